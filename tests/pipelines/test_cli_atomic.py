"""All or nothing: a command line run that fails, or is stopped, releases nothing.

Every output is written under a temporary name and renamed into place only once the whole
command has succeeded; stdout is written after that. Staging lives in a hidden folder next to
``--output``; signals delete it, and a folder left by a killed run is removed by the next run.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from beam_dpsketch.io import sinks as sinks_module
from beam_dpsketch.io.sinks import STAGING_PREFIX, atomic_destination, remove_stale_staging
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.pipelines.demo import data_path
from beam_dpsketch.pipelines.output import CliRelease, write_release

RUNNER = "--runner=FnApiRunner"
SEED = ["--insecure-test-seed", "7"]

try:
    import fcntl
except ImportError:  # pragma: no cover - the project runs on POSIX
    fcntl = None


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    root = tmp_path_factory.mktemp("atomic")
    keys = ["alpha"] * 600 + ["\x1b[31mred"] * 400 + [f"other{i}" for i in range(100)]
    path = root / "events.csv"
    path.write_text("item\n" + "".join(f"{k}\n" for k in keys))
    return str(path)


def _staging(folder):
    return [p for p in os.listdir(folder) if p.startswith(STAGING_PREFIX)]


def _continual(events, *extra):
    return [
        "continual",
        "--input",
        events,
        "--column",
        "item",
        "--width",
        "64",
        "--horizon",
        "2000",
        "--release-every",
        "500",
        "--epsilon",
        "0.5",
        "--delta",
        "1e-6",
        "--query",
        "alpha",
        *SEED,
        *extra,
        RUNNER,
    ]


def test_a_plot_that_cannot_be_saved_releases_nothing(events, tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    # The release to stdout: nothing may be printed for a run that exits non-zero.
    code = main(_continual(events, "--format", "json", "--plot", str(tmp_path / "p.png")))
    out, err = capsys.readouterr()
    assert code != 0 and "No space left" in err
    assert out == ""
    # The release to a file: no file, and no staging left in its folder.
    target = tmp_path / "release.json"
    code = main(
        _continual(
            events, "--format", "json", "--output", str(target), "--plot", str(tmp_path / "p.png")
        )
    )
    out, err = capsys.readouterr()
    assert code != 0
    assert out == "" and "# wrote" not in err
    assert sorted(os.listdir(tmp_path)) == []


class _FailingFile:
    """A file that takes the first ``limit`` bytes, then fails as a full disk does."""

    def __init__(self, inner, limit):
        self.inner, self.left = inner, limit

    def write(self, data):
        if len(data) > self.left:
            self.inner.write(data[: self.left])
            self.inner.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        self.left -= len(data)
        return self.inner.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_a_write_that_fails_halfway_leaves_no_file(events, tmp_path, capsys, monkeypatch, fmt):
    real_create = sinks_module.FileSystems.create

    def create(path, *args, **kwargs):
        f = real_create(path, *args, **kwargs)
        # Only the release file: Beam's own sinks (the staging) write normally.
        return _FailingFile(f, 40) if path.endswith(f"release.{fmt}") else f

    monkeypatch.setattr(sinks_module.FileSystems, "create", staticmethod(create))
    target = tmp_path / f"release.{fmt}"
    code = main(_continual(events, "--format", fmt, "--output", str(target)))
    out, err = capsys.readouterr()
    assert code == 2 and "No space left" in err
    assert out == "" and "# wrote" not in err
    assert os.listdir(tmp_path) == []  # no truncated release, no staging


def test_a_failed_write_keeps_the_earlier_file(tmp_path, monkeypatch):
    release = CliRelease("g", "m", {}, ("key", "estimate"), [{"key": "a", "estimate": 1.0}] * 50)
    target = tmp_path / "out.csv"
    write_release(release, "csv", str(target))
    before = target.read_text()
    real_create = sinks_module.FileSystems.create
    monkeypatch.setattr(
        sinks_module.FileSystems,
        "create",
        staticmethod(lambda p, *a, **k: _FailingFile(real_create(p, *a, **k), 30)),
    )
    with pytest.raises(OSError, match="No space"):
        write_release(release, "csv", str(target))
    assert target.read_text() == before
    assert os.listdir(tmp_path) == ["out.csv"]


def test_atomic_destination_renames_only_on_success(tmp_path):
    target = tmp_path / "x.txt"
    with pytest.raises(RuntimeError), atomic_destination(str(target)) as temporary:
        with open(temporary, "w") as f:
            f.write("partial")
        raise RuntimeError("stopped")
    assert os.listdir(tmp_path) == []
    with atomic_destination(str(target)) as temporary:
        assert temporary.endswith("x.txt") and os.path.dirname(temporary) != str(tmp_path)
        with open(temporary, "w") as f:
            f.write("whole")
    assert target.read_text() == "whole" and os.listdir(tmp_path) == ["x.txt"]


def test_an_unwritable_output_is_refused_before_the_pipeline(events, tmp_path, capsys):
    (tmp_path / "taken").write_text("")  # a file where --output wants a folder
    code = main(_continual(events, "--format", "json", "--output", str(tmp_path / "taken/r.json")))
    out, err = capsys.readouterr()
    assert code == 2 and "--output" in err and out == ""
    assert "# guarantee" not in err  # refused before anything ran


def test_an_unwritable_sketch_destination_is_refused_before_the_pipeline(events, tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    code = main(
        ["sketch", "--input", events, "--column", "item", "--sketch", "count-min"]
        + ["--save-sketch", str(tmp_path / "taken/s.sketch"), RUNNER]
    )
    out, err = capsys.readouterr()
    assert code == 2 and "--save-sketch" in err and out == ""
    assert os.listdir(tmp_path) == ["taken"]


def test_stale_staging_of_a_killed_run_is_removed_by_the_next(events, tmp_path, capsys):
    if fcntl is None:
        pytest.skip("needs POSIX file locks")
    stale = tmp_path / f"{STAGING_PREFIX}killed"
    (stale / "rows").mkdir(parents=True)
    (stale / "rows" / "rows-00000-of-00001.jsonl").write_text('{"key": "alpha"}\n')
    (stale / ".lock").write_text("")
    running = tmp_path / f"{STAGING_PREFIX}running"
    running.mkdir()
    with open(running / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a command that is still running
        code = main(_continual(events, "--format", "csv", "--output", str(tmp_path / "r.csv")))
        capsys.readouterr()
        assert code == 0
        assert sorted(_staging(tmp_path)) == [running.name]
    assert remove_stale_staging(str(tmp_path)) == [str(running)]


def test_table_output_escapes_terminal_control_sequences(events, capsys):
    code = main(
        ["heavy-hitters", "--input", events, "--column", "item", "--k", "10", "--epsilon", "1"]
        + [*SEED, "--format", "table", RUNNER]
    )
    out, _ = capsys.readouterr()
    assert code == 0
    assert "\x1b" not in out
    assert "\\x1b[31mred" in out  # shown, as text
    # JSON keeps the key exactly (json escapes it).
    code = main(
        ["heavy-hitters", "--input", events, "--column", "item", "--k", "10", "--epsilon", "1"]
        + [*SEED, "--format", "json", RUNNER]
    )
    out, _ = capsys.readouterr()
    assert "\x1b" not in out
    assert "\x1b[31mred" in [r["key"] for r in json.loads(out)["rows"]]


def _start(out_dir, tmp_dir):
    """A heavy-hitters run over the bundled data, and the folder its staging appeared in."""
    env = {**os.environ, "TMPDIR": str(tmp_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "beam_dpsketch.pipelines.cli", "heavy-hitters"]
        + ["--input", data_path(), "--column", "route", "--epsilon", "1", "--format", "json"]
        + ["--output", str(out_dir / "hh.json"), RUNNER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if _staging(out_dir) or _staging(tmp_dir):
            time.sleep(0.3)  # the pipeline is running
            return proc
        time.sleep(0.02)
    proc.kill()
    pytest.fail("the run created no staging folder")


@pytest.mark.parametrize(
    ("signum", "status", "word"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "")]
)
def test_a_signal_stops_the_run_and_deletes_its_staging(tmp_path, signum, status, word):
    out_dir, tmp_dir = tmp_path / "out", tmp_path / "tmp"
    out_dir.mkdir()
    tmp_dir.mkdir()
    proc = _start(out_dir, tmp_dir)
    # Staging is next to the output, nowhere else.
    assert _staging(out_dir) and not _staging(tmp_dir)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    assert out == ""
    assert "KeyboardInterrupt" not in err and "Traceback" not in err
    assert f"{word or 'interrupted'} ({signal.Signals(signum).name})" in err
    assert os.listdir(out_dir) == [] and os.listdir(tmp_dir) == []


def test_a_saved_sketch_appears_only_when_the_command_succeeds(
    events, tmp_path, capsys, monkeypatch
):
    """--save-sketch is published with the other outputs: a command that fails after its
    pipeline ran leaves no sketch file (and no staging), one that succeeds leaves it whole."""
    from beam_dpsketch.pipelines import sketch as sketch_module

    def failing(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    saved = tmp_path / "s.sketch"
    command = ["sketch", "--input", events, "--column", "item", "--sketch", "count-min"]
    command += ["--query", "alpha", "--save-sketch", str(saved), RUNNER]
    monkeypatch.setattr(sketch_module, "write_release", failing)
    code = main(command)
    out, _ = capsys.readouterr()
    assert code != 0 and out == ""
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    assert main(command) == 0
    capsys.readouterr()
    assert os.listdir(tmp_path) == ["s.sketch"]
    from beam_dpsketch.sketches import CountMinSketch

    loaded = sketch_module.load_sketch(str(saved), CountMinSketch)
    assert loaded.estimate(["alpha"])[0] >= 600
