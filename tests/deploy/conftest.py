"""Fixtures of the packaging and staged-worker tests (``make test-deploy``).

The tests marked ``deploy`` build the package (``python -m build``), build Beam's Python boot
program (``scripts/beam-boot.sh``, Go) and a worker virtual environment without beam-dpsketch
(``scripts/worker-venv.sh``); both scripts cache what they make outside the repository. They run
when ``BEAM_DPSKETCH_DEPLOY_TESTS=1`` (``make test-deploy`` sets it; ``.ci/run`` calls it) and are
skipped by a plain ``pytest``, which keeps ``make test`` within its time budget.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY_ENV = "BEAM_DPSKETCH_DEPLOY_TESTS"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "deploy: packaging and staged-worker tests, run by `make test-deploy`"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(DEPLOY_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"packaging test: run by `make test-deploy` ({DEPLOY_ENV}=1)")
    for item in items:
        if "deploy" in item.keywords:
            item.add_marker(skip)


def run(cmd: list[str], *, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; fail the test with the end of its output when it fails."""
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    if done.returncode != 0:
        pytest.fail(
            f"{cmd[:4]} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return done


def script_output(name: str, *args: str) -> Path:
    """The path a cache script of ``scripts/`` prints on its last line."""
    done = run(["bash", str(REPO / "scripts" / name), *args], timeout=1800)
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel (with the C extensions) that ``python -m build`` makes."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)])
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


@pytest.fixture(scope="session")
def wheel_without_compiler(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from the sdist where the C compiler fails (``CC=/bin/false``)."""
    out = tmp_path_factory.mktemp("nocc")
    env = {**os.environ, "CC": "/bin/false", "LDSHARED": "/bin/false"}
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check"]
        + ["--wheel-dir", str(out), str(dist["sdist"])],
        env=env,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def beam_boot() -> Path:
    """Beam's Python boot program (the SDK container's entry point), built once and cached."""
    return script_output("beam-boot.sh")


@pytest.fixture(scope="session")
def worker_venv() -> Path:
    """A cached venv with apache-beam (the driver's version) and the runtime dependencies only."""
    return script_output("worker-venv.sh", sys.executable)


@pytest.fixture(scope="session")
def prism_binary() -> Path:
    """Prism, Beam's portable runner in Go, built once by ``scripts/prism.sh`` and cached."""
    return script_output("prism.sh")
