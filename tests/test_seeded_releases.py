"""Seeded releases of every public DP transform stay identical when the code is reorganised.

Every case of :mod:`tests.transform_cases` runs on its base input on the FnApiRunner
(``in_memory``) with its fixed insecure test key; its output is reduced to the values it
releases and compared with ``tests/golden/seeded_releases.json``. The reduction keeps what a
user reads (numbers, and strings that are keys of the input) and drops how they are packaged
(class and field names, reprs), so moving code or renaming a record type keeps the file valid
while any change to a released number, a key set or the noise drawn fails the test.

A change that is meant to alter releases regenerates the file with
``BEAM_DPSKETCH_REGEN_GOLDEN=1 pytest tests/test_seeded_releases.py`` and says why in its commit.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

from beam_dpsketch.transforms.records import BoundedKeyEstimate
from tests.collect import DumpToFile
from tests.transform_cases import CASES

RUNNER = "FnApiRunner"
GOLDEN = Path(__file__).parent / "golden" / "seeded_releases.json"
REGEN = os.environ.get("BEAM_DPSKETCH_REGEN_GOLDEN") == "1"


def _vocabulary(rows: Iterable[Any]) -> set[str]:
    """Every string in the input: the only strings a release may carry that the test keeps."""
    out: set[str] = set()
    pending: list[Any] = [_leaves(list(rows), set(), keep_all_strings=True)]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            out.add(item)
    return out


def _number(x: float) -> float | str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(f"{x:.12g}")


def _leaves(obj: Any, vocabulary: set[str], *, keep_all_strings: bool = False) -> list[Any]:
    """The released values of ``obj``, depth first; containers and packaging dropped."""
    if obj is None or isinstance(obj, bool):
        return [obj]
    if isinstance(obj, (int, np.integer)):
        return [int(obj)]
    if isinstance(obj, (float, np.floating)):
        return [_number(float(obj))]
    if isinstance(obj, str):
        return [obj] if keep_all_strings or obj in vocabulary else []
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return [bytes(obj).hex()]
    if isinstance(obj, np.ndarray):
        return [_leaves(x, vocabulary, keep_all_strings=keep_all_strings) for x in obj.tolist()]
    if isinstance(obj, Mapping):
        items = sorted(
            (json.dumps(_leaves(k, vocabulary, keep_all_strings=keep_all_strings)), v)
            for k, v in obj.items()
        )
        return [[k, _leaves(v, vocabulary, keep_all_strings=keep_all_strings)] for k, v in items]
    if isinstance(obj, BoundedKeyEstimate):
        # The recorded file holds the (key, estimate) of these rows; their bound fields are
        # compared with the sketch layer's bounds by tests/transforms/test_release_rows.py.
        return _leaves((obj.key, obj.estimate), vocabulary, keep_all_strings=keep_all_strings)
    if isinstance(obj, (list, tuple, set, frozenset)):
        parts = [_leaves(x, vocabulary, keep_all_strings=keep_all_strings) for x in obj]
        if isinstance(obj, (set, frozenset)):
            parts.sort(key=json.dumps)
        return parts
    if dataclasses.is_dataclass(obj):
        values = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    else:
        # Any other object (a released sketch, a release record class): its public data
        # attributes, properties included, in an order that does not depend on their names.
        values = []
        for name in dir(obj):
            if name.startswith("_"):
                continue
            try:
                value = getattr(obj, name)
            except Exception:  # a property that does not apply to this object
                continue
            if not callable(value) and not isinstance(value, type):
                values.append(value)
    parts = [_leaves(v, vocabulary, keep_all_strings=keep_all_strings) for v in values]
    return sorted(parts, key=json.dumps)


def _canonical(output: list[Any], vocabulary: set[str]) -> list[str]:
    """One JSON string per output element, sorted (output order is not part of a release)."""
    return sorted(json.dumps(_leaves(x, vocabulary), sort_keys=True) for x in output)


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("seeded")
    dumps = {name: DumpToFile(str(folder / f"{name}.pkl")) for name in CASES}
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=RUNNER, options=options) as p:
        for name, case in CASES.items():
            out = (
                p
                | f"Create {name}" >> beam.Create(case.seeded_input, reshuffle=False)
                | f"DP {name}" >> case.make(f"seeded-{name}")
            )
            assert_that(out, dumps[name], label=f"Dump {name}")
    return {
        name: _canonical(dumps[name].load(), _vocabulary(CASES[name].seeded_input))
        for name in CASES
    }


def test_seeded_releases_match_the_recorded_ones(released: dict[str, list[str]]) -> None:
    if REGEN:
        GOLDEN.write_text(json.dumps(released, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(GOLDEN.read_text())
    assert sorted(recorded) == sorted(CASES), "a case was added or removed: regenerate"
    changed = [name for name in CASES if released[name] != recorded[name]]
    assert changed == [], f"seeded releases changed for: {changed}"


def test_every_case_releases_something(released: dict[str, list[str]]) -> None:
    # A case whose output reduced to nothing would compare equal whatever the code did.
    empty = [
        name
        for name, rows in released.items()
        if not any(any(c.isalnum() for c in r) for r in rows)
    ]
    assert empty == []
