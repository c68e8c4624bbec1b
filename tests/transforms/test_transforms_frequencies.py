"""DPFrequencies / DPQuantiles in Beam: equal to the core release, noise once, turnstile.

Runners: FnApiRunner in-process, FnApiRunner multi_processing with 2 workers for the
noise-once test, and DirectRunner ``--streaming`` with TestStream for empty panes. Expected outputs are recomputed from the same keyed noise stream
(``release_id_for``), so equality shows both that the noise-free part is the single-machine exact
sketch and that noise was added exactly once.
"""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindow,
    IntervalWindow,
    TimestampedValue,
)
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, Windowing
from beam_dpsketch.sketches import CountMinSketch, CountSketch, DyadicCountSketch
from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch, PrivateCountSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.transforms import DPFrequencies, DPQuantiles
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.records import QuantileEstimate
from beam_dpsketch.transforms.release import release_id_for

W, D = 256, 4
WIDE, DEEP = 1024, 8  # 8192 cells: enough to pin the noise variance to +-15%


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(tmp_path / "out.pickle")


def _chunks(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.array_split(rng.zipf(1.3, 20_000).astype(np.int64) % 5000, 8)


def _all_keys() -> np.ndarray:
    return np.concatenate([np.concatenate(_chunks(s)) for s in (1, 2, 3)])


@pytest.mark.parametrize(
    ("sketch", "exact_cls", "private_cls", "budget"),
    [
        ("count-min", CountMinSketch, PrivateCountMinSketch, PrivacyBudget.pure(1.0)),
        ("count-sketch", CountSketch, PrivateCountSketch, PrivacyBudget.zcdp(0.5)),
    ],
)
def test_release_equals_the_single_machine_release(sketch, exact_cls, private_cls, budget, dump):
    source = NoiseSource.insecure_for_tests(3)
    t = DPFrequencies(W, D, budget, sketch=sketch, seed=7, noise_source=source, label="f")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        res = p | beam.Create([1, 2, 3]) | beam.FlatMap(_chunks) | t
        assert_that(res, dump)
    (released,) = dump.load()
    exact = exact_cls(W, D, 7).update(_all_keys())
    expected = private_cls.release(
        exact,
        budget,
        t.aggregate.noise_source.stream(release_id_for("f", GlobalWindow(), 0)),
        offset=False,
        lattice=True,
    )
    assert released == expected
    # No public constant is added: an estimate is the minimum or median of noisy counters.
    assert released.offset == 0
    with pytest.raises(TypeError):
        released.update([1])


@pytest.fixture
def _workers_can_import_this_module(monkeypatch):
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    )


class NoiseVariance:
    """Matcher: the released cells minus the exact sketch have the calibrated variance."""

    def __init__(self, expected_variance: float):
        self.expected_variance = expected_variance

    def __call__(self, actual):
        (released,) = actual
        exact = CountMinSketch(WIDE, DEEP, 7).update(_all_keys())
        # Released counters in counts (the noise may sit on a lattice finer than one count).
        noise = (np.asarray(released.cells) - released.offset - exact.table).ravel()
        # Mean of Z^2 over n = 8192 i.i.d. cells: for (discrete) Laplace noise E[Z^4] = 6 sigma^4,
        # so its standard error is sigma^2 sqrt(5/n) (2.5%); a 6-SE band (+-15%) fails with
        # probability ~2e-9 (normal approximation). Noise added twice doubles the variance.
        n = noise.size
        var = float(np.mean(noise.astype(np.float64) ** 2))
        se = self.expected_variance * np.sqrt(5 / n)
        assert abs(var - self.expected_variance) <= 6 * se, (var, self.expected_variance)


@pytest.mark.usefixtures("_workers_can_import_this_module")
def test_noise_is_added_once_however_many_bundles_on_two_workers():
    # 24 batches over 2 worker processes: many partial sketches, one release. If noise were added
    # per partial, the cell variance would be a multiple of sigma^2, far outside the band.
    budget = PrivacyBudget.pure(1.0)
    cal = PrivateCountMinSketch.calibrate(WIDE, DEEP, budget, offset=False, lattice=True)
    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        res = (
            p
            | beam.Create([1, 2, 3])
            | "SpreadSeeds" >> beam.Reshuffle()
            | beam.FlatMap(_chunks)
            | "SpreadBatches" >> beam.Reshuffle()
            | DPFrequencies(
                WIDE,
                DEEP,
                budget,
                seed=7,
                sketch="count-min",
                noise_source=NoiseSource.insecure_for_tests(4),
            )
        )
        assert_that(res, NoiseVariance(cal.noise_variance))


def test_turnstile_insert_then_delete_equals_the_remainder(dump):
    source = NoiseSource.insecure_for_tests(5)
    keep = [f"k{i}" for i in range(300)]
    gone = [f"g{i}" for i in range(200)]
    records = [(k, 1) for k in keep + gone] + [(k, -1) for k in gone]
    budget = PrivacyBudget.pure(1.0)
    t = DPFrequencies(
        W,
        D,
        budget,
        sketch="count-min",
        key_fn=lambda r: r[0],
        weight_fn=lambda r: r[1],
        noise_source=source,
        label="turnstile",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(records) | t, dump)
    (released,) = dump.load()
    expected = PrivateCountMinSketch.release(
        CountMinSketch(W, D, 0).update(keep),
        budget,
        t.aggregate.noise_source.stream(release_id_for("turnstile", GlobalWindow(), 0)),
        offset=False,
        lattice=True,
    )
    assert released == expected


def test_weights_beyond_one_are_refused():
    with pytest.raises(Exception, match="weight must be -1, 0 or 1"):
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = (
                p
                | beam.Create([("a", 2)])
                | DPFrequencies(
                    W, D, PrivacyBudget.pure(1.0), key_fn=lambda r: r[0], weight_fn=lambda r: r[1]
                )
            )


def test_quantiles_equal_the_core_release_and_are_accurate(dump):
    rng = np.random.default_rng(8)
    values = np.clip(np.round(rng.normal(100, 30, 50_000)), 0, 255).astype(np.int64)
    source = NoiseSource.insecure_for_tests(6)
    budget = PrivacyBudget.zcdp(0.5)
    qs = [0.1, 0.5, 0.9]
    t = DPQuantiles(
        qs, 0, 255, budget, tree=QuantileTree(width=64, depth=3), noise_source=source, label="q"
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(np.array_split(values, 5)) | t, dump)
    out = dump.load()
    # The transform's default tree: branching 32, every level exact, consistent estimates.
    assert t.mechanism.tree == {"branching": 32, "exact_nodes": 1 << 15, "leaf_bits": 0}
    private = PrivateDyadicCountSketch.release(
        DyadicCountSketch(0, 255, 64, 3, 0, **t.mechanism.tree).update(values),
        budget,
        t.aggregate.noise_source.stream(release_id_for("q", GlobalWindow(), 0)),
        consistency=True,
    )
    assert sorted(out, key=lambda r: r.quantile) == [
        QuantileEstimate(q, int(v)) for q, v in zip(qs, private.quantiles(qs), strict=True)
    ]
    # Rank error: the released value's true rank is within 1% of q*n (the exact levels of a
    # 256-value domain carry only noise of scale ~3 per node on 50,000 values).
    for r in out:
        rank = np.mean(values <= r.value)
        assert abs(rank - r.quantile) < 0.01


def test_float_quantiles_through_a_declared_domain(dump):
    values = np.linspace(0.0, 10.0, 20_001)
    t = DPQuantiles(
        [0.25, 0.75],
        0.0,
        10.0,
        PrivacyBudget.zcdp(1.0),
        resolution=0.01,
        tree=QuantileTree(width=128, depth=3),
        noise_source=NoiseSource.insecure_for_tests(7),
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(values.tolist()) | t, dump)
    got = {r.quantile: r.value for r in dump.load()}
    assert abs(got[0.25] - 2.5) < 0.1 and abs(got[0.75] - 7.5) < 0.1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"quantiles": [1.5], "lower": 0, "upper": 10}, "quantiles"),
        ({"quantiles": [0.5], "lower": 0.5, "upper": 10}, "integers unless resolution"),
    ],
)
def test_quantile_parameters_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DPQuantiles(budget=PrivacyBudget.pure(1.0), **kwargs)


def test_released_sketch_is_queryable_as_a_side_input(dump):
    # The typical use: release once, then look keys up in another branch of the pipeline.
    source = NoiseSource.insecure_for_tests(9)
    budget = PrivacyBudget.pure(1.0)
    transform = DPFrequencies(W, D, budget, noise_source=source, label="side")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        released = p | "Data" >> beam.Create(["a"] * 500 + ["b"] * 50) | "Release" >> transform
        lookups = (
            p
            | "Queries" >> beam.Create(["a", "b", "zzz"])
            | beam.Map(
                lambda key, sk: (key, float(sk.estimate([key])[0])),
                sk=beam.pvalue.AsSingleton(released),
            )
        )
        assert_that(lookups, dump)
    got = dict(dump.load())
    # The default sketch is Count Sketch.
    expected = PrivateCountSketch.release(
        CountSketch(W, D, 0).update(["a"] * 500 + ["b"] * 50),
        budget,
        transform.aggregate.noise_source.stream(release_id_for("side", GlobalWindow(), 0)),
        lattice=True,
    )
    assert got == {
        k: float(v)
        for k, v in zip("a b zzz".split(), expected.estimate(["a", "b", "zzz"]), strict=True)
    }


# --------------------------------------------------------------------------------------------
# Streaming: an empty ON_TIME pane after DISCARDING early firings is a release with noise
# --------------------------------------------------------------------------------------------


def _early_then_empty_on_time(transform, records):
    """``(pipeline, output)``: one record per TestStream step (each fires an early pane), then the
    watermark passes the window, whose ON_TIME pane (index 2) holds no element.

    DirectRunner ``--streaming``; early firings after every element, DISCARDING.
    """
    stream = ts.TestStream().advance_watermark_to(0)
    for t, record in enumerate(records, start=1):
        stream = stream.add_elements([TimestampedValue(record, t)])
    stream = stream.advance_watermark_to(10).advance_watermark_to_infinity()
    p = beam.Pipeline(runner="DirectRunner", options=PipelineOptions(["--streaming"]))
    windowed = (
        p
        | stream
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    return p, windowed | transform


def _empty_pane_release(transform, empty_accumulator):
    """What the calibrated mechanism releases for an empty pane 2 of window [0, 10)."""
    agg = transform.aggregate
    rid = release_id_for(agg.release_label, IntervalWindow(0, 10), 2)
    return agg.calibrated_mechanism.release(
        empty_accumulator, agg.per_release_budget, agg.noise_source.stream(rid)
    )


def test_streaming_empty_on_time_pane_of_dpfrequencies_is_released_with_noise(dump):
    t = DPFrequencies(
        W,
        D,
        PrivacyBudget.pure(1.0),
        seed=3,
        windowing=Windowing(max_panes_per_window=3),
        noise_source=NoiseSource.insecure_for_tests(21),
        with_metadata=True,
        label="empty-freq",
    )
    p, out = _early_then_empty_on_time(t, ["a", "b"])
    assert_that(out, dump)
    p.run().wait_until_finish()
    panes = {r.pane_index: r for r in dump.load()}
    assert sorted(panes) == [0, 1, 2] and panes[2].pane_timing == "ON_TIME"
    (released,) = panes[2].records
    assert [released] == _empty_pane_release(t, CountSketch(W, D, 3))
    # Noise only: an empty pane's cells are not all zero.
    assert released.offset == 0 and np.any(released.table != 0)


def test_streaming_empty_on_time_pane_of_dpquantiles_is_released_with_noise(dump):
    t = DPQuantiles(
        [0.5, 0.9],
        0,
        255,
        PrivacyBudget.zcdp(0.5),
        tree=QuantileTree(width=16, depth=3),
        windowing=Windowing(max_panes_per_window=3),
        noise_source=NoiseSource.insecure_for_tests(22),
        with_metadata=True,
        label="empty-quant",
    )
    p, out = _early_then_empty_on_time(t, [17, 200])
    assert_that(out, dump)
    p.run().wait_until_finish()
    panes = {r.pane_index: r for r in dump.load()}
    assert sorted(panes) == [0, 1, 2] and panes[2].pane_timing == "ON_TIME"
    expected = _empty_pane_release(
        t, DyadicCountSketch(0, 255, 16, 3, 0, clamp=True, **t.mechanism.tree)
    )
    assert list(panes[2].records) == expected and len(expected) == 2


# --------------------------------------------------------------------------------------------
# Declared public keys: exact counts + noise, every declared key released
# --------------------------------------------------------------------------------------------


def test_query_keys_release_exact_counts_of_every_declared_key(dump):
    from beam_dpsketch.sketches.linear.key_counts import KeyCountIndex, PrivateKeyCounts

    source = NoiseSource.insecure_for_tests(31)
    budget = PrivacyBudget.approx(1.0, 1e-6)
    declared = ["LAX-SFO", "JFK-BOS", "never-seen", 7]
    data = ["LAX-SFO"] * 300 + ["JFK-BOS"] * 20 + ["ORD-DEN"] * 50 + [7, 7, 8]
    t = DPFrequencies(budget=budget, query_keys=declared, noise_source=source, label="pk")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        # Elements in several batches and bundles: the counts are exact however they arrive.
        released = p | beam.Create(data, reshuffle=True) | t
        assert_that(released, dump)
    (got,) = dump.load()
    index = KeyCountIndex(declared)
    exact = index.add(index.zeros(), data)
    assert exact.tolist() == [300, 20, 0, 2]
    expected = PrivateKeyCounts.release(
        index,
        exact,
        t.aggregate.per_release_budget,
        t.aggregate.noise_source.stream(release_id_for("pk", GlobalWindow(), 0)),
    )
    assert got == expected
    # Every declared key, zero counts included, nothing undeclared.
    assert list(got.as_dict()) == declared
    assert got.estimate(["never-seen"]).shape == (1,)
    with pytest.raises(KeyError, match="keys: only declared query_keys"):
        got.estimate(["ORD-DEN"])
    # Noise for counting: sensitivity 1 (not a sketch's depth or sqrt(depth)); the approximate
    # budget is spent by the discrete Laplace of scale 1/eps, which has the smaller variance.
    assert got.calibration.sensitivity == 1.0 and got.neighbouring == "add_remove"
    assert got.noise == "discrete_laplace" and got.scale == 1.0
    assert t.accountant.spent.delta == 0.0
    # P(|Z| > 3) = 2 e^-4 / (1 + e^-1) <= 0.05 < P(|Z| > 2) for the discrete Laplace of scale 1.
    assert got.error_bound(0.95) == 3.0
    report = t.explain()
    assert "dp-counts/public-keys" in report and "none: exact counts" in report


def test_query_keys_count_integer_batches_and_turnstile_records(dump):
    from beam_dpsketch.sketches.linear.key_counts import KeyCountIndex, PrivateKeyCounts

    source = NoiseSource.insecure_for_tests(32)
    budget = PrivacyBudget.pure(1.0)
    records = [(5, 1)] * 10 + [(6, 1)] * 4 + [(6, -1)] * 3 + [(9, 1)] * 2
    t = DPFrequencies(
        budget=budget,
        query_keys=[5, 6],
        key_fn=lambda r: r[0],
        weight_fn=lambda r: r[1],
        noise_source=source,
        label="pk-turnstile",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(records) | t, dump)
    (got,) = dump.load()
    index = KeyCountIndex([5, 6])
    stream = t.aggregate.noise_source.stream(release_id_for("pk-turnstile", GlobalWindow(), 0))
    expected = PrivateKeyCounts.release(
        index, np.array([10, 1]), budget, stream, neighbouring="add_remove"
    )
    assert got == expected
    # Integer arrays are looked up without per-key Python: same counts as a list.
    assert index.add(index.zeros(), np.array([5, 5, 6, 9])).tolist() == [2, 1]


def test_query_keys_parameters_are_validated():
    budget = PrivacyBudget.pure(1.0)
    # The sketch shape is not used with declared keys; a sketch kind is refused.
    assert DPFrequencies(64, 3, budget, query_keys=["a"]).mechanism.name == "dp-counts/public-keys"
    with pytest.raises(ValueError, match="sketch: query_keys"):
        DPFrequencies(budget=budget, query_keys=["a"], sketch="count-min")
    with pytest.raises(ValueError, match="query_keys must hold at least one"):
        DPFrequencies(budget=budget, query_keys=[])
    with pytest.raises(TypeError, match="query_keys must be a sequence"):
        DPFrequencies(budget=budget, query_keys="abc")
    with pytest.raises(ValueError, match="width and depth are required"):
        DPFrequencies(budget=budget)


def test_default_sketch_is_count_sketch_without_offset():
    t = DPFrequencies(W, D, PrivacyBudget.pure(1.0))
    assert t.mechanism.sketch == "count-sketch"
    facts = t.mechanism.describe(PrivacyBudget.pure(1.0))
    assert facts["offset"] == 0 and facts["estimator"] == "median over rows"
    cm = DPFrequencies(W, D, PrivacyBudget.pure(1.0), sketch="count-min").mechanism
    assert cm.describe(PrivacyBudget.pure(1.0))["offset"] == 0
