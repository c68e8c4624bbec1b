"""``examples/stream_directory.py`` on Prism: files dropped while it runs are each read once.

A writer thread drops files into the watched directory while the pipeline polls it (one before
the start, then one every 1.5 s), rewrites the first file under the same name after it has been
read, and leaves a file that does not match the pattern. The run uses a budget so large
(epsilon 1000: the count's discrete Laplace noise is non-zero with probability below 1e-80) that
the released counts are the exact ones, so the test can check that every matched file's lines
were counted exactly once, in windows that each release exactly once.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stream_directory.py"


def load_example():
    # examples/ is not a package: load the script as a module (registered, so Beam can pickle
    # its functions by reference for the in-process LOOPBACK workers).
    spec = importlib.util.spec_from_file_location("stream_directory_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# Every file holds "a" three times, so each window's count of "a" reaches the release threshold
# (3 at epsilon 800 for the heavy hitters); rarer keys may be withheld.
FILES = [
    ["a", "b", "a", "a"],
    ["a", "c", "a", "a"],
    ["b", "a", "a", "d", "a"],
    ["a", "a", "a"],
    ["c", "a", "b", "a", "a"],
]


def drop(directory: Path, name: str, lines: list[str]) -> None:
    # Written elsewhere, then renamed in: a poll never sees half a file.
    tmp = directory.parent / f".{name}.part"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, directory / name)


def writer(directory: Path) -> None:
    for i, lines in enumerate(FILES[1:], start=1):
        time.sleep(1.5)
        drop(directory, f"f{i}.txt", lines)
    # Rewriting an already-read file does not make it read again; other names are not matched.
    drop(directory, "f0.txt", ["z"] * 50)
    (directory / "ignored.csv").write_text("a\n" * 50)


# Runners that would run every poll at once, at the start: none of them may run the example.
NOT_POLLING = {
    "no runner options": [],
    "FnApiRunner": ["--runner=FnApiRunner", "--streaming"],
    "DirectRunner with Prism's location": [
        "--runner=DirectRunner",
        "--prism_location=/nonexistent/prism",
        "--streaming",
    ],
    "BundleBasedDirectRunner": ["--runner=BundleBasedDirectRunner", "--streaming"],
    "in-process job service": [
        "--runner=PortableRunner",
        "--job_endpoint=embed",
        "--environment_type=LOOPBACK",
        "--streaming",
    ],
    "Prism without --streaming": ["--runner=PrismRunner", "--prism_location=/nonexistent/prism"],
}


@pytest.mark.parametrize("case", list(NOT_POLLING))
def test_refuses_to_run_without_a_polling_streaming_runner(tmp_path, capsys, case):
    example = load_example()
    directory = tmp_path / "drop"
    directory.mkdir()
    drop(directory, "f0.txt", FILES[0])
    out = tmp_path / "releases.jsonl"
    argv = [f"--input-dir={directory}", "--duration-seconds=1", f"--output={out}"]
    started = time.monotonic()
    assert example.main([*argv, *NOT_POLLING[case]]) == 2
    assert time.monotonic() - started < 30  # refused before any pipeline starts
    captured = capsys.readouterr()
    assert captured.out == ""  # no privacy report, no release
    assert captured.err.startswith("stream_directory.py: error: ")
    assert ("--streaming is required" if "streaming" in case else "PrismRunner") in captured.err
    assert not out.exists()


def test_refusal_is_a_non_zero_exit_of_the_script(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), f"--input-dir={tmp_path}", "--duration-seconds=1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "stream_directory.py: error: the runner SwitchingDirectRunner" in done.stderr


# About 10 s of wall-clock time: the pipeline polls the directory in real time.
@pytest.mark.slow
def test_each_dropped_file_is_counted_once_per_window(tmp_path, prism_args, capsys):
    example = load_example()
    directory = tmp_path / "drop"
    directory.mkdir()
    drop(directory, "f0.txt", FILES[0])
    out = tmp_path / "releases.jsonl"
    thread = threading.Thread(target=writer, args=(directory,), daemon=True)
    argv = [
        f"--input-dir={directory}",
        "--window-seconds=3",
        "--duration-seconds=9",
        "--poll-seconds=0.5",
        "--epsilon=1000",
        f"--output={out}",
        *prism_args,
        "--streaming",
    ]
    thread.start()
    assert example.main(argv) == 0
    thread.join(timeout=5)
    assert "remaining budget" in capsys.readouterr().out  # the charges were printed first

    releases = [json.loads(line) for line in out.read_text().splitlines()]
    by_transform: dict[str, list] = {"lines": [], "top": []}
    for r in releases:
        by_transform[r["transform"]].append(r)
    windows = sorted(tuple(r["window"]) for r in by_transform["lines"])
    # One ON_TIME release per window and transform, over consecutive windows of the run.
    assert windows == sorted(tuple(r["window"]) for r in by_transform["top"])
    assert len(windows) == len(set(windows)) >= 3
    assert all(b[0] == a[1] for a, b in zip(windows, windows[1:], strict=False))
    assert {(r["pane"], r["timing"]) for r in releases} == {(0, "ON_TIME")}

    truth = Counter(key for lines in FILES for key in lines)
    assert sum(r["records"][0]["count"] for r in by_transform["lines"]) == truth.total()
    top = Counter()
    for r in by_transform["top"]:
        top.update({rec["key"]: rec["estimate"] for rec in r["records"]})
    assert "z" not in top  # the rewrite of f0.txt was not read
    # At eps 1000 the noise is a few thousandths: on a lattice finer than one count it need
    # not round to 0, so the counts are compared to within half a count.
    assert abs(top["a"] - truth["a"]) < 0.5
    assert all(count < truth[key] + 0.5 for key, count in top.items())
