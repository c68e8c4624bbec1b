"""Engine fixtures: the Prism runner binary and the pipeline options that run a pipeline on it.

Prism is Apache Beam's portable runner written in Go. ``scripts/prism.sh`` builds it once (``go
install``, about 1.5 minutes on a cold Go module cache) into a per-user cache outside the
repository and returns at once afterwards; the session fixture calls it, so ``make test`` on a
fresh clone builds it and later runs reuse it. Without Go (and without a cached binary) the Prism
tests are skipped with that reason, unless ``BEAM_DPSKETCH_REQUIRE_PRISM=1`` makes it an error.

Beam's ``PrismRunner`` starts one Prism job server per process and reuses it for every later
pipeline of the process (its shared job-server handle), so only the first Prism pipeline of the
session pays the start-up (about 1 s); workers run in the test process (``LOOPBACK``), so
``collect.DumpToFile`` matchers write files this process reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRISM_SCRIPT = REPO / "scripts" / "prism.sh"


def _prism_cache_path() -> Path:
    # The script's own default location, to tell "cached" from "must build" without running it.
    version = os.environ.get("PRISM_VERSION", "v2.77.0")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    default = Path(cache) / "beam-dpsketch" / "prism" / version
    return Path(os.environ.get("BEAM_DPSKETCH_PRISM_DIR", default)) / "prism"


@pytest.fixture(scope="session")
def prism_binary() -> str:
    """Path of the Prism binary, built by ``scripts/prism.sh`` on first use."""
    if not _prism_cache_path().exists() and shutil.which("go") is None:
        reason = "Prism needs Go to build it (scripts/prism.sh); go is not on PATH"
        if os.environ.get("BEAM_DPSKETCH_REQUIRE_PRISM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run(
        ["bash", str(PRISM_SCRIPT)], capture_output=True, text=True, check=False, timeout=1800
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/prism.sh failed:\n{done.stderr[-4000:]}")
    path = done.stdout.strip().splitlines()[-1]
    assert os.access(path, os.X_OK), f"scripts/prism.sh printed a non-executable path {path}"
    return path


@pytest.fixture(scope="session")
def prism_args(prism_binary: str) -> list[str]:
    """Pipeline options of a batch pipeline on Prism (add ``--streaming`` for a streaming one).

    ``--prism_location`` names the local binary, so Beam neither downloads nor builds one;
    ``LOOPBACK`` runs the Python SDK workers inside this process (no Docker).
    """
    return [
        "--runner=PrismRunner",
        f"--prism_location={prism_binary}",
        "--environment_type=LOOPBACK",
        "--prism_log_level=warn",
    ]
