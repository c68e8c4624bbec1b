"""``examples/yaml/stream_directory.yaml`` on Prism: files dropped while it runs are each read once.

The YAML form of ``tests/engines/test_stream_directory.py``, with its files and writer: a thread
drops files into the watched directory while the pipeline polls it, rewrites the first file after
it has been read, and leaves a file that does not match the pattern. The test controls the stop
condition (``duration_seconds``, a Jinja variable of the example) and a budget so large (epsilon
1000: the count's discrete Laplace noise is non-zero with probability below 1e-80) that the
released counts are the exact ones.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.yaml import main as yaml_main

from beam_dpsketch.yaml import ReadNewLines
from tests.engines.test_stream_directory import FILES, NOT_POLLING, drop, writer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "yaml" / "stream_directory.yaml"


def read_json_lines(directory: Path, pattern: str) -> list[dict]:
    rows = []
    for path in sorted(directory.glob(pattern)):
        rows.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return rows


# About 15 s of wall-clock time: the pipeline polls the directory in real time.
@pytest.mark.slow
def test_each_dropped_file_is_counted_once_per_window(tmp_path, prism_args):
    directory = tmp_path / "drop"
    directory.mkdir()
    drop(directory, "f0.txt", FILES[0])
    out = tmp_path / "releases"
    variables = {
        "input_dir": str(directory),
        "output": str(out),
        "window_seconds": 3,
        "duration_seconds": 9,
        "poll_seconds": 0.5,
        "epsilon": 1000,
    }
    thread = threading.Thread(target=writer, args=(directory,), daemon=True)
    thread.start()
    yaml_main.run(
        argv=[
            f"--yaml_pipeline_file={EXAMPLE}",
            f"--jinja_variables={json.dumps(variables)}",
            *prism_args,
        ]
    )
    thread.join(timeout=5)

    counts = read_json_lines(out, "lines.json-*")
    top = read_json_lines(out, "top.json-*")
    windows = sorted((r["window_start"], r["window_end"]) for r in counts)
    # One ON_TIME release per window of the declared range, consecutive, empty ones included.
    assert len(windows) == len(set(windows)) >= 3
    assert all(b[0] == a[1] for a, b in zip(windows, windows[1:], strict=False))
    assert {r["pane_index"] for r in counts + top} == {0}
    assert {(r["window_start"], r["window_end"]) for r in top} <= set(windows)

    truth = Counter(key for lines in FILES for key in lines)
    assert sum(r["count"] for r in counts) == truth.total()
    estimates: Counter = Counter()
    for r in top:
        estimates[r["key"]] += r["estimate"]
    assert "z" not in estimates  # the rewrite of f0.txt was not read
    # At eps 800 the heavy hitters' noise is a few thousandths of a count.
    assert abs(estimates["a"] - truth["a"]) < 0.5
    assert all(estimate < truth[key] + 0.5 for key, estimate in estimates.items())


# The example sets ``streaming: true`` itself; the case without it is checked on the step below.
@pytest.mark.parametrize("case", [c for c in NOT_POLLING if "--streaming" not in c])
def test_the_example_is_refused_while_built_without_a_polling_runner(tmp_path, case):
    out = tmp_path / "releases"
    variables = {"input_dir": str(tmp_path), "output": str(out), "duration_seconds": 1}
    with pytest.raises(ValueError, match="ReadNewLines: the runner .* is not known to poll"):
        yaml_main.run(
            argv=[
                f"--yaml_pipeline_file={EXAMPLE}",
                f"--jinja_variables={json.dumps(variables)}",
                *NOT_POLLING[case],
            ]
        )
    assert not out.exists()  # refused before anything ran


def test_a_batch_pipeline_on_prism_is_refused():
    p = beam.Pipeline(
        options=PipelineOptions(["--runner=PrismRunner", "--prism_location=/nonexistent/prism"])
    )
    with pytest.raises(ValueError, match="^ReadNewLines: --streaming is required"):
        p | ReadNewLines("/nonexistent/*.txt", duration_seconds=1)
