"""The Beam YAML examples (``examples/yaml/``) run with ``apache_beam.yaml.main`` and release
exactly what the Python API releases under the same seeded, insecure test noise.

Each batch example runs on the FnApiRunner and on Prism (``--insecure_test_noise_key=0``, the
pipeline option that seeds every YAML DP transform), and its output files are compared with
the records of the same transforms built with the Python API from one
``NoiseSource.insecure_for_tests(0)``, applied in the same order with the same labels (a YAML
step's name is its release label). The over-budget example must fail while it is built, print the
accountant's report, and write nothing.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from apache_beam.yaml import main as yaml_main

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, PrivacyUnit, Windowing
from beam_dpsketch.transforms import DPCount, DPFrequencies, DPHeavyHitters, DPQuantiles
from beam_dpsketch.yaml.config import insecure_test_selection_key
from tests.collect import DumpToFile

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "yaml"
PURCHASES = EXAMPLES / "data" / "purchases.csv"
EVENTS = EXAMPLES / "data" / "events.jsonl"
FNAPI = ["--runner=FnApiRunner"]
SEED = 0
# The windowed example's declared release range and pages.
RANGE = (1764331200, 1764331380)
PAGES = ["/home", "/search", "/cart", "/checkout", "/help"]


def run_example(name: str, runner_args: list[str], **variables: str) -> None:
    """``python -m apache_beam.yaml.main`` on ``examples/yaml/<name>.yaml``, in this process."""
    yaml_main.run(
        argv=[
            f"--yaml_pipeline_file={EXAMPLES / name}.yaml",
            f"--jinja_variables={json.dumps(variables)}",
            f"--insecure_test_noise_key={SEED}",
            *runner_args,
        ]
    )


@pytest.fixture(params=["FnApiRunner", "Prism"])
def runner_args(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "FnApiRunner":
        return FNAPI
    return request.getfixturevalue("prism_args")


def purchase_rows() -> list[beam.Row]:
    with PURCHASES.open() as f:
        return [beam.Row(user_id=r["user_id"], item=r["item"]) for r in csv.DictReader(f)]


def event_rows() -> list[beam.Row]:
    with EVENTS.open() as f:
        return [
            beam.Row(ts=e["ts"], page=e["page"], latency_ms=e["latency_ms"])
            for e in map(json.loads, f)
        ]


def reference(build, tmp_path: Path) -> dict[str, list]:
    """The records of the Python API pipeline ``build(p)`` (a dict of PCollections) by name."""
    dumps = {}
    with beam.Pipeline("FnApiRunner") as p:
        for name, pcoll in build(p).items():
            dumps[name] = DumpToFile(str(tmp_path / f"reference-{name}.pkl"))
            beam.testing.util.assert_that(pcoll, dumps[name], label=f"Dump {name}")
    return {name: dump.load() for name, dump in dumps.items()}


def with_window(pcoll: beam.PCollection, label: str) -> beam.PCollection:
    return pcoll | label >> beam.Map(
        lambda record, w=beam.DoFn.WindowParam: (float(w.start), record)
    )


def read_json_lines(pattern: str, directory: Path) -> list[dict]:
    rows = []
    for path in sorted(directory.glob(pattern)):
        rows.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return rows


# ---------------------------------------------------------------------------------------------


def test_heavy_hitters_by_user_equals_the_python_api(runner_args, tmp_path):
    out = tmp_path / "top"
    run_example("heavy_hitters_by_user", runner_args, input=str(PURCHASES), output=str(out))
    table = pq.read_table(list(tmp_path.glob("top-*")))
    assert table.column_names == ["key", "estimate", "lower", "upper", "confidence"]
    released = sorted(zip(table["key"].to_pylist(), table["estimate"].to_pylist(), strict=True))

    def build(p):
        top = (
            p
            | beam.Create(purchase_rows())
            | DPHeavyHitters(
                None,
                PrivacyBudget.approx(1.0, 1e-6),
                top=10,
                key_fn="item",
                privacy_unit=PrivacyUnit(id="user_id", max_contributions=3),
                selection_key=insecure_test_selection_key(SEED),
                noise_source=NoiseSource.insecure_for_tests(SEED),
                label="Top items by user",
            )
        )
        return {"top": top}

    expected = sorted((key, float(count)) for key, count in reference(build, tmp_path)["top"])
    assert len(expected) >= 3  # the head of the bundled data passes the threshold
    assert released == expected


def test_windowed_equals_the_python_api(runner_args, tmp_path):
    out = tmp_path / "windowed"
    run_example("windowed", runner_args, input=str(EVENTS), output=str(out))
    views = read_json_lines("page_views.json-*", out)
    quantiles = read_json_lines("latency_quantiles.json-*", out)

    def build(p):
        source = NoiseSource.insecure_for_tests(SEED)
        minutes = (
            p
            | beam.Create(event_rows())
            | beam.Map(lambda e: TimestampedValue(e, e.ts))
            | beam.WindowInto(FixedWindows(60))
        )
        counts = minutes | "Page views" >> DPFrequencies(
            budget=PrivacyBudget.pure(1.0),
            query_keys=PAGES,
            key_fn="page",
            windowing=Windowing(release_range=RANGE),
            noise_source=source,
            label="Page views",
        )
        levels = minutes | "Latency quantiles" >> DPQuantiles(
            [0.5, 0.9, 0.99],
            0,
            2000,
            PrivacyBudget.pure(1.0),
            value_fn="latency_ms",
            windowing=Windowing(release_range=RANGE),
            noise_source=source,
            label="Latency quantiles",
        )
        return {
            "views": with_window(counts, "ViewWindows"),
            "quantiles": with_window(levels, "QuantileWindows"),
        }

    ref = reference(build, tmp_path)
    expected_views = sorted(
        (start, key, float(estimate), float(counts.error_bound()))
        for start, counts in ref["views"]
        for key, estimate in counts.as_dict().items()
    )
    assert [start for start, *_ in expected_views[:: len(PAGES)]] == [
        float(t) for t in range(*RANGE, 60)
    ]  # every window of the declared range, one release each
    assert (
        sorted((r["window_start"], r["key"], r["estimate"], r["error_bound"]) for r in views)
        == expected_views
    )
    assert {(r["window_end"] - r["window_start"], r["pane_index"]) for r in views} == {(60.0, 0)}
    expected_quantiles = sorted(
        (start, q.quantile, float(q.value)) for start, q in ref["quantiles"]
    )
    assert (
        sorted((r["window_start"], r["quantile"], r["value"]) for r in quantiles)
        == expected_quantiles
    )
    assert len(expected_quantiles) == 3 * 3


def test_shared_budget_equals_the_python_api(runner_args, tmp_path):
    out = tmp_path / "shared"
    run_example("shared_budget", runner_args, input=str(PURCHASES), output=str(out))
    counts = read_json_lines("count.json-*", out)
    table = pq.read_table(list(out.glob("top_items-*")))
    top = sorted(zip(table["key"].to_pylist(), table["estimate"].to_pylist(), strict=True))

    def build(p):
        accountant = PrivacyAccountant(PrivacyBudget.approx(1.0, 1e-6), name="etl")
        source = NoiseSource.insecure_for_tests(SEED)
        rows = p | beam.Create(purchase_rows())
        count = rows | "Count" >> DPCount(
            PrivacyBudget.pure(0.2),
            accountant=accountant,
            privacy_unit=PrivacyUnit(id="user_id", max_contributions=20),
            selection_key=insecure_test_selection_key(SEED),
            noise_source=source,
            label="Purchase count",
        )
        items = rows | "Top" >> DPHeavyHitters(
            None,
            PrivacyBudget.approx(0.8, 1e-6),
            top=10,
            key_fn="item",
            privacy_unit=PrivacyUnit(id="user_id", max_contributions=3),
            accountant=accountant,
            selection_key=insecure_test_selection_key(SEED),
            noise_source=source,
            label="Top items by user",
        )
        return {"count": count, "top": items}

    ref = reference(build, tmp_path)
    assert counts == [{"count": c.count} for c in ref["count"]]
    assert top == sorted((key, float(count)) for key, count in ref["top"])


def test_over_budget_yaml_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "over"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "apache_beam.yaml.main",
            f"--yaml_pipeline_file={EXAMPLES / 'shared_budget_over.yaml'}",
            f"--jinja_variables={json.dumps({'input': str(PURCHASES), 'output': str(out)})}",
            *FNAPI,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode != 0
    assert "Running pipeline" not in done.stdout  # refused while the pipeline was built
    assert not out.exists()  # nothing written
    err = done.stderr
    assert "privacy budget exceeded: transform 'Top items by user'" in err
    # The accountant's report: the charge that was admitted and what is left.
    assert "Privacy accountant 'etl': budget (eps=1, delta=1e-06)-DP" in err
    assert "[1] transform 'Purchase count'" in err
    assert "remaining budget: eps=0.8, delta=1e-06" in err
