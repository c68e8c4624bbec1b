"""The command line on other engines: runner options and worker logs.

* Options declared next to a runner (``--dask_client_address`` in Beam's Dask runner module) are
  recognised once that runner is chosen; a misspelt one still warns, with a suggestion.
* The command line on the DaskRunner (``--runner dask``) is tested on a Dask cluster in
  ``tests/engines/test_dask_cli.py``.
* Without ``-v`` the FnApiRunner's ``multi_processing`` SDK workers (separate processes writing
  to the command's stderr) log at ERROR, and Dask's loggers are set to ERROR here and, through
  the environment, in the processes a local Dask cluster spawns. With ``-v`` they log at INFO.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest

from beam_dpsketch.pipelines import cli
from beam_dpsketch.pipelines.runner import FnApiRunnerWorkerLogging, pipeline_options

DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"


def _warnings(args: list[str]) -> str:
    err = io.StringIO()
    try:
        pipeline_options(args, stderr=err)
    except ValueError:
        pass  # a refused option is refused after the options are checked
    return err.getvalue()


def test_options_of_the_chosen_runner_module_are_known():
    pytest.importorskip("distributed")
    args = [
        f"--runner={DASK}",
        "--dask_client_address=tcp://127.0.0.1:8786",
        "--dask_npartitions=4",
    ]
    assert _warnings(args) == ""
    misspelt = _warnings([f"--runner={DASK}", "--dask_client_adress=tcp://127.0.0.1:8786"])
    assert "unknown option --dask_client_adress" in misspelt
    assert "did you mean --dask_client_address?" in misspelt


def test_options_of_known_runners_and_typos():
    assert _warnings(["--runner=PrismRunner", "--prism_location=/bin/prism"]) == ""
    assert _warnings(["--runner=FnApiRunner", "--direct_num_workers=2"]) == ""
    typo = _warnings(["--runner=FnApiRunner", "--direct_num_worker=2"])
    assert "unknown option --direct_num_worker " in typo and "--direct_num_workers" in typo


def test_multi_processing_becomes_the_worker_logging_fnapi_runner():
    for runner in ([], ["--runner=FnApiRunner"], ["--runner", "FnApiRunner"]):
        options = pipeline_options(
            [*runner, "--direct_running_mode=multi_processing", "--direct_num_workers=2"]
        )
        assert options.get_all_options()["runner"].endswith(".FnApiRunnerWorkerLogging")
    assert pipeline_options([]).get_all_options()["runner"] == "FnApiRunner"


def test_worker_logging_runner_passes_the_beam_log_level(monkeypatch):
    logger = logging.getLogger("apache_beam")
    monkeypatch.setattr(logger, "level", logging.ERROR)
    runner = FnApiRunnerWorkerLogging()
    options = runner._provision_info.provision_info.pipeline_options  # noqa: SLF001
    assert options["beam:option:default_sdk_harness_log_level:v1"] == "ERROR"


def test_dask_loggers_quiet_unless_verbose(monkeypatch):
    monkeypatch.delenv("DASK_LOGGING__DISTRIBUTED", raising=False)
    monkeypatch.setattr(cli, "_dask_level_set_here", False)
    for name in ("", "apache_beam", "distributed"):
        monkeypatch.setattr(
            logging.getLogger(name or None), "level", logging.getLogger(name or None).level
        )
    cli._configure_logging(verbose=False)  # noqa: SLF001
    assert os.environ["DASK_LOGGING__DISTRIBUTED"] == "error"
    assert logging.getLogger("distributed").level == logging.ERROR
    # A process started now (a Dask worker) configures distributed at ERROR.
    level = subprocess.run(
        [
            sys.executable,
            "-c",
            "import distributed, logging; print(logging.getLogger('distributed').level)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()[-1]
    assert int(level) == logging.ERROR
    cli._configure_logging(verbose=True)  # noqa: SLF001
    assert "DASK_LOGGING__DISTRIBUTED" not in os.environ
    assert logging.getLogger("distributed").level == logging.INFO


def test_user_dask_log_level_is_kept(monkeypatch):
    monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", "warning")
    monkeypatch.setattr(cli, "_dask_level_set_here", False)
    for name in ("", "apache_beam", "distributed"):
        monkeypatch.setattr(
            logging.getLogger(name or None), "level", logging.getLogger(name or None).level
        )
    cli._configure_logging(verbose=False)  # noqa: SLF001
    cli._configure_logging(verbose=True)  # noqa: SLF001
    assert os.environ["DASK_LOGGING__DISTRIBUTED"] == "warning"


def _run_multi_processing(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    path = tmp_path / "events.csv"
    path.write_text("browser\n" + "firefox\n" * 600 + "chrome\n" * 300)
    command = [
        sys.executable,
        "-m",
        "beam_dpsketch.pipelines.cli",
        *extra,
        "heavy-hitters",
        "--input",
        str(path),
        "--column",
        "browser",
        "--k",
        "10",
        "--epsilon",
        "1",
        "--format",
        "json",
        "--insecure-test-seed",
        "3",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.slow
def test_multi_processing_workers_quiet_without_verbose(tmp_path):
    done = _run_multi_processing(tmp_path)
    assert done.returncode == 0, done.stderr
    assert [r["key"] for r in json.loads(done.stdout)["rows"]] == ["firefox", "chrome"]
    logged = [line for line in done.stderr.splitlines() if line.startswith(("INFO:", "WARNING:"))]
    # Each worker logs one line before it reads its options, plus Beam's import-time warning;
    # unquieted, the two workers log about forty lines (sdk_worker, data_plane, statecache, ...).
    assert len(logged) <= 4, done.stderr
    assert not [line for line in logged if "apache_beam.runners.worker" in line], done.stderr


@pytest.mark.slow
def test_multi_processing_workers_log_with_verbose(tmp_path):
    done = _run_multi_processing(tmp_path, "-v")
    assert done.returncode == 0, done.stderr
    assert "INFO:apache_beam.runners.worker.sdk_worker:" in done.stderr
