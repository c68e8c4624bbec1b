"""The command line on the DaskRunner: ``--runner dask`` with ``--dask-address`` or ``--dask-workers``.

**Same bytes.** Every batch subcommand is run twice under the same ``--insecure-test-seed``, once
on the FnApiRunner and once on a local Dask cluster (a scheduler and two single-threaded worker
processes on 127.0.0.1, ``dask_cluster.py``) reached with ``--runner dask --dask-address``, and
the two output files must be byte-identical and hold the release. The inputs are small, read in
one bundle, so releases that post-process one Misra-Gries segment per Beam accumulator
(Design B, select-then-count) do not depend on the runner either. An input too small to
release any key gives the same (empty) release on both.

**Local cluster.** ``--dask-workers N`` starts a cluster for the command and stops it when the
command ends, also when it fails: no process the command started outlives it.

**Refused up front.** Subcommands that release per window or keep state (and
``heavy-hitters --mechanism sequential``) are refused in one line naming runners that run them,
before any cluster starts; Dask options without ``--runner dask`` are refused too.

The demo, whose noise is not seeded, is checked for its three outputs and their bounds.

**The runner.** ``--runner dask`` is ``ScalingDaskRunner``: a ``Reshuffle`` spreads its elements
over partitions, combines are lifted, what a ``DoFn`` emits from ``finish_bundle`` is kept
(keys fed one per element are all counted, as on the FnApiRunner), and a side input is computed
once, not once per task that reads it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import dask_cluster
import numpy as np
import psutil
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.dask.overrides import dask_overrides
from matrix import on_both

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.pipelines.demo import run_demo
from beam_dpsketch.pipelines.runner import (
    SCALING_DASK_RUNNER,
    command_runner,
    pipeline_options,
    run_pipeline,
)
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPFrequencies

pytest.importorskip("distributed")

from beam_dpsketch.pipelines.dask_runner import (  # noqa: E402 - needs dask, checked above
    DEFAULT_RESHUFFLE_PARTITIONS,
    LiftCombines,
    ScalingDaskRunner,
)

# The module-scoped cluster fixture (a scheduler and two worker processes on 127.0.0.1).
dask_address = dask_cluster.dask_address


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CSV of 4000 Zipf-distributed keys and a numeric column (test data only)."""
    rng = np.random.default_rng(3)
    keys = rng.zipf(1.4, 4000) % 300
    values = (np.arange(4000) * 37) % 1000 / 10
    path = tmp_path_factory.mktemp("dask-cli") / "events.csv"
    lines = ["key,value"] + [f"k{k},{v}" for k, v in zip(keys, values, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _command(name: str, data: Path) -> list[str]:
    seeded = ["--epsilon", "1", "--insecure-test-seed", "3"]
    commands = {
        "heavy-hitters": ["heavy-hitters", "--column", "key", "--k", "50", "--top", "8", *seeded],
        "heavy-hitters-design-b": [
            "heavy-hitters", "--column", "key", "--k", "50", "--mechanism", "design-b", *seeded,
        ],
        "frequencies": [
            "frequencies", "--column", "key", "--query", "k1", "k2", "k3", "k299", *seeded,
        ],
        "quantiles": [
            "quantiles", "--column", "value", "--q", "0.1", "0.5", "0.9", "--lower", "0",
            "--upper", "100", *seeded,
        ],
        "sketch-misra-gries": ["sketch", "--column", "key", "--sketch", "misra-gries", "--k", "20"],
        "sketch-count-min": [
            "sketch", "--column", "key", "--sketch", "count-min", "--width", "64", "--depth", "3",
            "--query", "k1", "k2",
        ],
    }  # fmt: skip
    return [*commands[name], "--input", str(data)]


def _run(args: list[str], output: Path, fmt: str, engine: list[str]) -> bytes:
    code = main([*args, "--format", fmt, "--output", str(output), *engine])
    assert code == 0
    return output.read_bytes()


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("heavy-hitters", "json"),
        ("heavy-hitters-design-b", "parquet"),
        ("frequencies", "json"),
        ("quantiles", "csv"),
        ("sketch-misra-gries", "json"),
        ("sketch-count-min", "jsonl"),
    ],
)
def test_batch_subcommands_write_the_same_bytes_as_fnapi(name, fmt, events, tmp_path, dask_address):
    args = _command(name, events)
    ref = _run(args, tmp_path / f"fnapi.{fmt}", fmt, ["--runner=FnApiRunner"])
    # HOST:PORT as a user types it (tcp:// is implied).
    host_port = dask_address.removeprefix("tcp://")
    got = _run(
        args, tmp_path / f"dask.{fmt}", fmt, ["--runner", "dask", "--dask-address", host_port]
    )
    assert got == ref
    if fmt == "json":
        assert b'"rows": [{' in got, "the release is empty: the comparison would be vacuous"
    elif fmt in ("csv", "jsonl"):
        assert len(got.splitlines()) >= 2


def test_empty_release_is_the_same_on_dask(tmp_path, dask_address):
    # Too few rows for any key to pass the selection threshold: no row on either runner.
    data = tmp_path / "few.csv"
    data.write_text("key\n" + "a\nb\n" * 3)
    args = _command("heavy-hitters", data)
    ref = _run(args, tmp_path / "fnapi.json", "json", ["--runner=FnApiRunner"])
    got = _run(
        args, tmp_path / "dask.json", "json", ["--runner=dask", f"--dask-address={dask_address}"]
    )
    assert got == ref
    assert b'"rows": []' in got


def test_save_sketch_is_the_same_on_dask(events, tmp_path, dask_address):
    args = ["sketch", "--input", str(events), "--column", "key", "--sketch", "count-min"]
    args += ["--width", "64", "--depth", "3"]
    assert main([*args, "--save-sketch", str(tmp_path / "fnapi.sketch")]) == 0
    dask = ["--runner", "dask", "--dask-address", dask_address]
    assert main([*args, "--save-sketch", str(tmp_path / "dask.sketch"), *dask]) == 0
    assert (tmp_path / "dask.sketch").read_bytes() == (tmp_path / "fnapi.sketch").read_bytes()


def test_demo_on_dask(dask_address):
    # The demo's three outputs (the DP release and two exact sketches) all come back, on the
    # ScalingDaskRunner (its DP transform refuses Beam's DaskRunner, which drops finish_bundle
    # outputs).
    scaling = [f"--runner={SCALING_DASK_RUNNER}", f"--dask_client_address={dask_address}"]
    results = run_demo(top=5, beam_args=scaling, steps=3)
    assert results["flights"] == 300_000
    rows = results["top_routes"]
    assert len(rows) == 5
    bound = results["misra_gries"]["error_bound"]
    for row in rows:
        assert row["exact_count"] - bound <= row["mg_estimate"] <= row["exact_count"]
        assert row["cms_estimate"] >= row["exact_count"]


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_local_cluster_runs_the_command_and_stops(events, tmp_path):
    before = _children()
    args = _command("frequencies", events)
    ref = _run(args, tmp_path / "fnapi.json", "json", ["--runner=FnApiRunner"])
    got = _run(args, tmp_path / "dask.json", "json", ["--runner=dask", "--dask-workers=1"])
    assert got == ref
    assert _children() <= before


def test_local_cluster_stops_when_the_command_fails(tmp_path, capsys):
    data = tmp_path / "events.csv"
    data.write_text("key\na\n")
    before = _children()
    # The column is missing: the read fails inside a Dask worker.
    args = [
        "frequencies",
        "--input",
        str(data),
        "--column",
        "nope",
        "--query",
        "a",
        "--epsilon",
        "1",
    ]
    code = main(
        [*args, "--output", str(tmp_path / "out.json"), "--runner", "dask", "--dask-workers", "1"]
    )
    assert code == 2
    assert "nope" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
    assert _children() <= before


@pytest.mark.parametrize(
    "args",
    [
        ["continual", "--column", "key", "--horizon", "10", "--query", "a", "--epsilon", "0.5"],
        ["sliding-window", "--column", "key", "--window", "10", "--release-every", "5"],
        ["intermittent", "--column", "key", "--queries", "5", "--epsilon", "1"],
        ["heavy-hitters", "--column", "key", "--epsilon", "1", "--mechanism", "sequential"],
    ],
    ids=["continual", "sliding-window", "intermittent", "sequential"],
)
def test_windowed_and_stateful_refused_before_anything_starts(args, tmp_path, capsys):
    data = tmp_path / "events.csv"
    data.write_text("key\na\n")
    before = _children()
    code = main([*args, "--input", str(data), "--runner", "dask", "--dask-workers", "2"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "--runner dask" in lines[0] and "global window" in lines[0]
    assert "FnApiRunner" in lines[0] and "PrismRunner" in lines[0]
    assert _children() == before


@pytest.mark.parametrize(
    ("namespace", "beam_args", "message"),
    [
        ({"dask_workers": 2}, [], "need --runner dask"),
        ({"dask_address": "127.0.0.1:8786"}, ["--runner=FnApiRunner"], "need --runner dask"),
        ({}, ["--runner", "dask"], "needs --dask-address HOST:PORT"),
        (
            {"dask_address": "127.0.0.1:8786"},
            ["--runner=dask", "--dask_client_address=tcp://127.0.0.1:1"],
            "give one",
        ),
    ],
)
def test_dask_options_checked(namespace, beam_args, message):
    args = argparse.Namespace(command="frequencies", **namespace)
    with pytest.raises(ValueError, match=message), command_runner(args, beam_args):
        pass


def test_short_name_and_address():
    args = argparse.Namespace(command="frequencies", dask_address="10.0.0.5:8786")
    with command_runner(args, ["--runner", "dask"]) as beam_args:
        options = pipeline_options(beam_args).get_all_options()
    assert options["runner"] == SCALING_DASK_RUNNER
    assert options["address"] == "tcp://10.0.0.5:8786"
    # Beam's own option reaches the runner as it is.
    args = argparse.Namespace(command="sketch")
    given = ["--runner=DaskRunner", "--dask_client_address=tls://10.0.0.5:8786"]
    with command_runner(args, given) as beam_args:
        assert beam_args == given


# ------------------------------------------------------------------------------------------------
# The runner --runner dask chooses: Beam's DaskRunner with the corrections scaling out needs
# ------------------------------------------------------------------------------------------------


def _bags(build: Callable[[beam.Pipeline], object]) -> dict[str, Any]:
    """The dask bags ``ScalingDaskRunner`` builds for ``build``'s pipeline, by step label."""
    p = beam.Pipeline(options=PipelineOptions(dask_cluster.dask_options("tcp://127.0.0.1:1")))
    build(p)
    p.replace_all([LiftCombines()])
    p.replace_all(dask_overrides())
    visitor = ScalingDaskRunner.to_dask_bag_visitor()
    p.visit(visitor)
    return {node.full_label: bag for node, bag in visitor.bags.items()}


def test_reshuffle_spreads_over_partitions():
    # Beam's translation keeps the one partition a small Create makes; every later step would
    # run on one worker.
    bags = _bags(
        lambda p: p | "Parts" >> beam.Create(list(range(32))) | "Spread" >> beam.Reshuffle()
    )
    assert bags["Parts"].npartitions == 1
    assert bags["Spread"].npartitions == DEFAULT_RESHUFFLE_PARTITIONS


def test_combines_are_lifted():
    # Each partition combines its own elements; only accumulators cross the GroupByKey.
    labels = _bags(lambda p: p | beam.Create([1, 2, 3]) | "Sum" >> beam.CombineGlobally(sum))
    assert any("_PartialGroupByKeyCombiningValues" in label for label in labels)


def test_finish_bundle_outputs_kept_per_element_keys(tmp_path, dask_address):
    # Keys one per element: the DP transform batches them and emits the last batch of each
    # bundle from finish_bundle, which Beam's DaskRunner drops (its sketch would be empty).
    def build(p):
        t = DPFrequencies(
            64, 3, PrivacyBudget.pure(1.0), seed=7, noise_source=NoiseSource.insecure_for_tests(1)
        )
        return p | beam.Create([i % 7 for i in range(700)]) | t

    scaling = [f"--runner={SCALING_DASK_RUNNER}", f"--dask_client_address={dask_address}"]
    ref, got = on_both(build, tmp_path, scaling)
    assert len(got) == len(ref) == 1
    np.testing.assert_array_equal(np.asarray(got[0].table), np.asarray(ref[0].table))
    assert np.asarray(ref[0].table).sum() != 0


def _count_evaluation(x: int, path: str) -> int:
    with open(path, "a") as f:
        f.write("evaluated\n")
    return x


def test_side_input_computed_once(tmp_path, dask_address):
    # Beam's translation computes a side input again inside every task that reads it: here once
    # per partition of the step (16).
    marker = tmp_path / "evaluations.txt"
    p = beam.Pipeline(
        options=PipelineOptions(
            [f"--runner={SCALING_DASK_RUNNER}", f"--dask_client_address={dask_address}"]
        )
    )
    side = p | "Side" >> beam.Create([5]) | "Count" >> beam.Map(_count_evaluation, str(marker))
    _ = (
        p
        | "Parts" >> beam.Create(list(range(32)))
        | "Spread" >> beam.Reshuffle()
        | "Add" >> beam.Map(lambda x, s: x + s[0], beam.pvalue.AsList(side))
    )
    run_pipeline(p)
    assert marker.read_text().splitlines() == ["evaluated"]
