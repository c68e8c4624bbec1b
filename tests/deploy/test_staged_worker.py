"""A DP pipeline whose SDK workers live in another virtual environment and get beam-dpsketch only
through Beam's staging, as on Dataflow, Flink or Spark.

How the workers are set up, and why:

* Beam's Python worker pool (``apache_beam.runners.worker.worker_pool_main``) starts SDK workers
  but does not install staged packages itself; with ``--container_executable`` it starts each
  worker through Beam's boot program (the entry point of Beam's SDK container images, built from
  Beam's Go module by ``scripts/beam-boot.sh``), which fetches the staged artifacts from the
  runner, pip-installs them (``--extra_package`` files, the sdist that ``--setup_file`` builds)
  and then runs the SDK harness. That is the path every portable runner's container takes.
* The worker pool runs in a fresh virtual environment that sees a cached venv with apache-beam
  and the runtime dependencies (``scripts/worker-venv.sh``) but never beam-dpsketch; the boot
  program installs the staged package into the fresh venv, so each case starts clean.
* The runners are Beam's portable runner with its in-process job service
  (``--job_endpoint=embed``, which executes on the FnApiRunner) and Prism (``PrismRunner``, the
  local binary of ``scripts/prism.sh``), each with ``--environment_type=EXTERNAL`` pointing at
  the pool.

Each case checks that every worker imported beam_dpsketch from the package it installed (not
from the repository, not from the driver's venv), which compiled or pure-Python modules it
used, and that the releases equal the same pipeline's run in-process on the FnApiRunner under
the same fixed insecure noise key.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import REPO, run

pytestmark = pytest.mark.deploy

PIPELINE = Path(__file__).with_name("staged_pipeline.py")
COMPILED = {
    "murmur3": "beam_dpsketch.murmur3",
    "kernel": "beam_dpsketch.sketches.misra_gries.kernel",
}
FALLBACK = {
    "murmur3": "beam_dpsketch.murmur3_fallback",
    "kernel": "beam_dpsketch.sketches.misra_gries.kernel_fallback",
}


def run_pipeline(out: Path, *options: str) -> tuple[list[str], list[dict]]:
    """Run tests/deploy/staged_pipeline.py from the driver's venv; its releases and reports."""
    run([sys.executable, str(PIPELINE), str(out), *options], cwd=out.parent, timeout=600)
    releases = (out / "releases.txt").read_text().splitlines()
    where = [json.loads(line) for line in (out / "where.txt").read_text().splitlines()]
    return releases, where


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict]:
    """The releases and the worker report of the same pipeline run in-process."""
    releases, where = run_pipeline(
        tmp_path_factory.mktemp("in-process") / "out", "--runner=FnApiRunner"
    )
    assert len(releases) == 2 and len(where) == 1
    return releases, where[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@contextmanager
def worker_pool(root: Path, worker_venv: Path, boot: Path) -> Iterator[tuple[int, Path]]:
    """A Python worker pool in a fresh venv layered on ``worker_venv``; yields (port, venv)."""
    env_dir = root / "worker-env"
    run([str(worker_venv / "bin" / "python"), "-m", "venv", "--without-pip", str(env_dir)])
    (site,) = (env_dir / "lib").glob("python3*/site-packages")
    (base_site,) = (worker_venv / "lib").glob("python3*/site-packages")
    # The cached venv's packages (apache-beam, pip, the dependencies) are visible; what the boot
    # program installs lands in env_dir only.
    (site / "worker-venv.pth").write_text(f"{base_site}\n")
    semi = root / "semi-persist"
    semi.mkdir()
    # The boot program's per-worker files (staged artifacts, options) go under root, not /tmp.
    wrapper = root / "boot.sh"
    wrapper.write_text(f'#!/bin/sh\nexec "{boot}" --semi_persist_dir="{semi}" "$@"\n')
    wrapper.chmod(0o755)
    port = free_port()
    env = {
        "HOME": os.environ.get("HOME", str(root)),
        # The fresh venv first: the boot program runs `python` and `python -m pip` from PATH.
        "PATH": f"{env_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        # Install into the venv on PATH rather than a venv under /opt/apache (container layout).
        "RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT": "1",
    }
    log = (root / "worker-pool.log").open("w")
    pool = subprocess.Popen(
        [str(env_dir / "bin" / "python"), "-m", "apache_beam.runners.worker.worker_pool_main"]
        + [f"--service_port={port}", f"--container_executable={wrapper}"],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert pool.poll() is None, (root / "worker-pool.log").read_text()[-3000:]
            try:
                socket.create_connection(("localhost", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the worker pool did not start listening"
                time.sleep(0.2)
        yield port, env_dir
    finally:
        # The pool and the workers it started share its session: end that group only.
        try:
            os.killpg(pool.pid, signal.SIGTERM)
            pool.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(pool.pid, signal.SIGKILL)
            pool.wait(timeout=30)
        log.close()


# Every staging route on the portable runner; the wheel on Prism too (Prism serves the staged
# artifacts to the boot program itself).
CASES = [
    ("PortableRunner", "wheel"),
    ("PortableRunner", "sdist"),
    ("PortableRunner", "setup_file"),
    ("PortableRunner", "wheel built without a compiler"),
    ("PrismRunner", "wheel"),
]


@pytest.mark.parametrize(("runner", "staging"), CASES)
def test_staged_package_reaches_a_separate_worker_environment(
    runner: str,
    staging: str,
    request: pytest.FixtureRequest,
    in_process: tuple[list[str], dict],
    dist: dict[str, Path],
    wheel_without_compiler: Path,
    worker_venv: Path,
    beam_boot: Path,
    tmp_path: Path,
) -> None:
    stage = {
        "wheel": [f"--extra_package={dist['wheel']}"],
        "sdist": [f"--extra_package={dist['sdist']}"],
        # Beam builds an sdist of the repository (setup.py's directory) and stages it.
        "setup_file": [f"--setup_file={REPO / 'setup.py'}"],
        "wheel built without a compiler": [f"--extra_package={wheel_without_compiler}"],
    }[staging]
    if runner == "PrismRunner":
        prism = request.getfixturevalue("prism_binary")
        runner_options = ["--runner=PrismRunner", f"--prism_location={prism}"]
    else:
        # The in-process job service, which executes on the FnApiRunner.
        runner_options = ["--runner=PortableRunner", "--job_endpoint=embed"]
    with worker_pool(tmp_path, worker_venv, beam_boot) as (port, env_dir):
        releases, where = run_pipeline(
            tmp_path / "out",
            *runner_options,
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{port}",
            *stage,
        )
    assert where
    for report in where:
        imported = Path(report["file"])
        # Installed by the boot program from what Beam staged, in the worker's own venv ...
        assert imported.is_relative_to(env_dir), report
        assert Path(report["prefix"]) == env_dir and Path(report["executable"]).is_relative_to(
            env_dir
        )
        # ... never the checkout, nor the driver's environment.
        assert not imported.is_relative_to(REPO) and not imported.is_relative_to(sys.prefix)
        expected = FALLBACK if staging == "wheel built without a compiler" else COMPILED
        assert {k: report[k] for k in expected} == expected
        # Both modules give this worker the driver's hashes and Misra-Gries sketch, bit for bit.
        assert report["hashes"] == in_process[1]["hashes"]
        assert report["misra_gries"] == in_process[1]["misra_gries"]
    # The DP releases equal the in-process run's under the same fixed (insecure) noise key
    # (in any order: the two runs write the flattened releases in their own order).
    assert sorted(releases) == sorted(in_process[0])
