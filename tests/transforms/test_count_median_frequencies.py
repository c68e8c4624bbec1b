"""``DPFrequencies(sketch="count-median")`` through Beam, the command line and Beam YAML.

Runner: FnApiRunner in-process. The transform's release equals the single-machine release of the
exact Count-Median sketch with the same keyed noise stream (noise added once); general turnstile
records (``weight_fn`` with deletions) give negative estimates where the count is negative; the
explain report names the estimator and the Count-Min sensitivity; a misspelt kind is refused
naming the parameter and listing the kinds. The ``frequencies`` and ``sketch`` commands and the
YAML step take ``count-median`` as they take the other kinds.
"""

from __future__ import annotations

import json

import apache_beam as beam
import numpy as np
import pytest
import yaml
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import GlobalWindow
from apache_beam.yaml.yaml_transform import expand_pipeline
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMedianSketch
from beam_dpsketch.sketches.linear.private import PrivateCountMedianSketch
from beam_dpsketch.transforms import DPFrequencies
from beam_dpsketch.transforms.frequencies import SKETCHES
from beam_dpsketch.transforms.release import release_id_for
from beam_dpsketch.yaml import PROVIDERS_FILE

W, D = 256, 5


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(tmp_path / "out.pickle")


def _chunks(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.array_split(rng.zipf(1.3, 20_000).astype(np.int64) % 5000, 8)


def test_release_equals_the_single_machine_release(dump):
    source = NoiseSource.insecure_for_tests(3)
    budget = PrivacyBudget.pure(1.0)
    t = DPFrequencies(W, D, budget, sketch="count-median", seed=7, noise_source=source, label="f")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        res = p | beam.Create([1, 2, 3]) | beam.FlatMap(_chunks) | t
        assert_that(res, dump)
    (released,) = dump.load()
    assert type(released) is PrivateCountMedianSketch
    keys = np.concatenate([np.concatenate(_chunks(s)) for s in (1, 2, 3)])
    exact = CountMedianSketch(W, D, 7).update(keys)
    expected = PrivateCountMedianSketch.release(
        exact,
        budget,
        t.aggregate.noise_source.stream(release_id_for("f", GlobalWindow(), 0)),
        offset=False,
        lattice=True,
    )
    assert released == expected
    assert released.offset == 0 and released.neighbouring == "add_remove"
    assert t.accountant.spent.epsilon == 1.0


def test_general_turnstile_records(dump):
    # "b" ends at -30 (more deletions than insertions): Count-Median answers it as Count Sketch
    # does, where Count-Min's minimum is no upper bound.
    records = [("a", 1)] * 120 + [("b", 1)] * 20 + [("b", -1)] * 50 + [("c", 1)] * 40
    t = DPFrequencies(
        4096,
        3,
        PrivacyBudget.pure(10.0),
        sketch="count-median",
        key_fn=lambda r: r[0],
        weight_fn=lambda r: r[1],
        noise_source=NoiseSource.insecure_for_tests(5),
        label="turnstile",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(records) | t, dump)
    (released,) = dump.load()
    est = released.estimate(["a", "b", "c", "never"])
    bound = released.error_bound(0.95)
    assert 0 < bound < 10
    assert np.all(np.abs(est - np.array([120, -30, 40, 0])) <= 3 * bound), (est, bound)


def test_explain_names_the_estimator_and_the_count_min_sensitivity():
    t = DPFrequencies(
        W,
        D,
        PrivacyBudget.zcdp(0.5),
        sketch="count-median",
        neighbouring="replace",
        noise_source=NoiseSource.insecure_for_tests(1),
        label="explained",
    )
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create(["k"]) | t
    facts = t.aggregate.calibrated_mechanism.describe(t.aggregate.per_release_budget)
    assert facts["estimator"] == "median over rows of the unsigned (Count-Min) counters"
    # Count-Min's table under replace-one: sqrt(2d), not Count Sketch's 2 sqrt(d).
    assert facts["sensitivity"] == f"{np.sqrt(2 * D):g} (l2, replace)"
    report = t.explain()
    assert "dp-linear/count-median" in report and "median over rows" in report
    assert t.display_parameters()["sketch"] == "count-median"


def test_kinds_are_listed_and_a_misspelt_one_is_refused():
    assert SKETCHES == ("count-min", "count-sketch", "count-median")
    with pytest.raises(ValueError, match="^sketch must be one of .*'count-median'.*got 'cmed'"):
        DPFrequencies(W, D, PrivacyBudget.pure(1.0), sketch="cmed")


def _cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_frequencies_command_releases_a_count_median_sketch(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("browser\n" + "firefox\n" * 600 + "chrome\n" * 300 + "edge\n" * 5)
    code, out, err = _cli(
        ["frequencies", "--input", str(path), "--column", "browser", "--epsilon", "1"]
        + ["--format", "json", "--insecure-test-seed", "2", "--sketch", "count-median"]
        + ["--width", "4096", "--depth", "3", "--query", "firefox", "chrome", "opera"],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mechanism"] == "dp-linear/count-median"
    assert doc["parameters"]["sketch"] == "count-median"
    rows = {r["key"]: r for r in doc["rows"]}
    assert set(rows) == {"firefox", "chrome", "opera"}
    for key, count in (("firefox", 600), ("chrome", 300), ("opera", 0)):
        # Three rows of scale-3 noise: the median errs by a few counts.
        assert abs(rows[key]["estimate"] - count) <= rows[key]["error_bound"] + 10
        assert rows[key]["error_bound"] > 0


def test_sketch_command_builds_an_exact_count_median_sketch(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("browser\n" + "firefox\n" * 60 + "chrome\n" * 30)
    code, out, err = _cli(
        ["sketch", "--input", str(path), "--column", "browser", "--sketch", "count-median"]
        + ["--width", "64", "--depth", "3", "--format", "json", "--query", "firefox", "chrome"],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    got = {r["key"]: r["estimate"] for r in doc["rows"]}
    # Two keys in 64 x 3 counters: the median of three rows ignores one collision.
    assert got == {"firefox": 60, "chrome": 30}
    assert "Count-Median" in json.dumps(doc)


YAML_PIPELINE = """
pipeline:
  type: chain
  transforms:
    - type: Create
      config:
        elements: [{page: a}, {page: a}, {page: b}]
    - type: DPFrequencies
      name: Views
      config:
        key: page
        width: 64
        depth: 3
        sketch: count-median
        epsilon: 1000
        insecure_test_noise_key: 0
"""


def test_yaml_step_passes_the_kind_through(dump):
    spec = yaml.safe_load(YAML_PIPELINE)
    spec["providers"] = [{"include": str(PROVIDERS_FILE)}]
    with beam.Pipeline("FnApiRunner") as p:
        rows = expand_pipeline(p, yaml.safe_dump(spec))
        assert_that(rows | beam.Map(lambda r: bytes(r.sketch)), dump)
    (data,) = dump.load()
    released = PrivateCountMedianSketch.from_bytes(data)
    # At epsilon 1000 the noise is far below one count.
    assert np.round(released.estimate(["a", "b", "c"])).tolist() == [2.0, 1.0, 0.0]


def test_rows_output_carries_the_count_median_sketch(dump):
    t = DPFrequencies(
        W,
        D,
        PrivacyBudget.pure(1.0),
        sketch="count-median",
        output="rows",
        noise_source=NoiseSource.insecure_for_tests(4),
        label="rows",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(["a"] * 50 + ["b"] * 20) | t, dump)
    (row,) = dump.load()
    assert row.kind == "count-median"
    released = row.decode()
    assert type(released) is PrivateCountMedianSketch
    assert row.error_bound == pytest.approx(released.error_bound(row.confidence))
