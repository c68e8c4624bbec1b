"""Collecting a test pipeline's output in the test process.

Beam pickles ``assert_that`` matchers, so a matcher that appended to a list of the caller would
fill a copy. :class:`DumpToFile` stores the output in a local file instead, which works on every
runner whose workers share this filesystem (all the local ones the tests use).
"""

from __future__ import annotations

import pickle
from typing import Any


class DumpToFile:
    """An ``assert_that`` matcher that pickles a pipeline's output to ``path``; :meth:`load` reads it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, actual: Any) -> None:
        with open(self.path, "wb") as f:
            pickle.dump(list(actual), f)

    def load(self) -> list[Any]:
        with open(self.path, "rb") as f:
            return pickle.load(f)
