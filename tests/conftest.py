"""Shared test configuration: a deterministic hypothesis profile.

``derandomize=True`` makes every property test draw the same examples on every run, so the suite is
reproducible and its runtime is stable; ``max_examples`` is kept modest for the 2-core CI box.
"""

import os
import sys

from hypothesis import HealthCheck, settings

# Test helper modules (tests/oracles.py) are imported as top-level modules.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
# Worker processes (multi_processing runner) unpickle test helpers such as collect.DumpToFile by
# module name, so they need the same directory on their path.
_PATH = os.environ.get("PYTHONPATH", "")
if _TESTS_DIR not in _PATH.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_TESTS_DIR, _PATH) if p)

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")
