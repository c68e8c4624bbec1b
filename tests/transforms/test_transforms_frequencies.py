"""DPFrequencies / DPQuantiles in Beam: equal to the core release, noise once, turnstile.

Runners: FnApiRunner in-process, FnApiRunner multi_processing with 2 workers for the
noise-once test, and DirectRunner ``--streaming`` with TestStream for empty panes. Expected outputs are recomputed from the same keyed noise stream
(``release_id_for``), so equality shows both that the noise-free part is the single-machine exact
sketch and that noise was added exactly once.
"""

from __future__ import annotations

import os
import pickle

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

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch, DyadicCountSketch
from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch, PrivateCountSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.transforms import DPFrequencies, DPQuantiles
from beam_dpsketch.transforms.release import release_id_for

W, D = 256, 4
WIDE, DEEP = 1024, 8  # 8192 cells: enough to pin the noise variance to +-15%


class Dump:
    """assert_that matcher storing the output in a file (Beam pickles matchers)."""

    def __init__(self, path):
        self.path = str(path)

    def __call__(self, actual):
        with open(self.path, "wb") as f:
            pickle.dump(list(actual), f)

    def load(self):
        with open(self.path, "rb") as f:
            return pickle.load(f)


@pytest.fixture
def dump(tmp_path):
    return Dump(tmp_path / "out.pickle")


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
        exact, budget, t.aggregate.noise_source.stream(release_id_for("f", GlobalWindow(), 0))
    )
    assert released == expected
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
        noise = (np.asarray(released.table) - released.offset - exact.table).ravel()
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
    cal = PrivateCountMinSketch.calibrate(WIDE, DEEP, budget)
    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        res = (
            p
            | beam.Create([1, 2, 3])
            | "SpreadSeeds" >> beam.Reshuffle()
            | beam.FlatMap(_chunks)
            | "SpreadBatches" >> beam.Reshuffle()
            | DPFrequencies(
                WIDE, DEEP, budget, seed=7, noise_source=NoiseSource.insecure_for_tests(4)
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
    t = DPQuantiles(qs, 0, 255, budget, width=64, depth=3, noise_source=source, label="q")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(np.array_split(values, 5)) | t, dump)
    out = dump.load()
    private = PrivateDyadicCountSketch.release(
        DyadicCountSketch(0, 255, 64, 3, 0).update(values),
        budget,
        t.aggregate.noise_source.stream(release_id_for("q", GlobalWindow(), 0)),
    )
    assert sorted(out, key=lambda r: r["quantile"]) == [
        {"quantile": q, "value": int(v)} for q, v in zip(qs, private.quantiles(qs), strict=True)
    ]
    # Rank error: the released value's true rank is within 1% of q*n (the exact levels of a
    # 256-value domain carry only noise of scale ~3 per node on 50,000 values).
    for r in out:
        rank = np.mean(values <= r["value"])
        assert abs(rank - r["quantile"]) < 0.01


def test_float_quantiles_through_a_declared_domain(dump):
    values = np.linspace(0.0, 10.0, 20_001)
    t = DPQuantiles(
        [0.25, 0.75],
        0.0,
        10.0,
        PrivacyBudget.zcdp(1.0),
        resolution=0.01,
        width=128,
        depth=3,
        noise_source=NoiseSource.insecure_for_tests(7),
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(values.tolist()) | t, dump)
    got = {r["quantile"]: r["value"] for r in dump.load()}
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
    expected = PrivateCountMinSketch.release(
        CountMinSketch(W, D, 0).update(["a"] * 500 + ["b"] * 50),
        budget,
        transform.aggregate.noise_source.stream(release_id_for("side", GlobalWindow(), 0)),
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
        max_panes_per_window=3,
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
    assert [released] == _empty_pane_release(t, CountMinSketch(W, D, 3))
    # Noise only: an empty pane's cells are not all the public offset.
    assert np.any(released.table != released.offset)


def test_streaming_empty_on_time_pane_of_dpquantiles_is_released_with_noise(dump):
    t = DPQuantiles(
        [0.5, 0.9],
        0,
        255,
        PrivacyBudget.zcdp(0.5),
        width=16,
        depth=3,
        max_panes_per_window=3,
        noise_source=NoiseSource.insecure_for_tests(22),
        with_metadata=True,
        label="empty-quant",
    )
    p, out = _early_then_empty_on_time(t, [17, 200])
    assert_that(out, dump)
    p.run().wait_until_finish()
    panes = {r.pane_index: r for r in dump.load()}
    assert sorted(panes) == [0, 1, 2] and panes[2].pane_timing == "ON_TIME"
    expected = _empty_pane_release(t, DyadicCountSketch(0, 255, 16, 3, 0, clamp=True))
    assert list(panes[2].records) == expected and len(expected) == 2
