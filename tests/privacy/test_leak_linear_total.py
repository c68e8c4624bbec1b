"""DPFrequencies / DPQuantiles publish an exact total only under the declared replace-one model.

A trigger that can fire several panes per window makes the release planner calibrate every pane
for replacement (a pane can lose one element and gain one shifted in from another pane, or only
lose one). That is a statement about the noise, not about the data: the pane's size is not a
public invariant, so the released sketch must not carry it (``public_total``, ``total()``,
``to_bytes()``, ``describe()``), and the quantile targets ``ceil(q N)`` must not use it. Only a
``neighbouring="replace"`` declared by the caller (Zhao et al., Definition 2.3, where ``N`` is
public) publishes it.

Runners: FnApiRunner (batch, the planner's replace path through a multi-firing trigger on the
global window) and DirectRunner ``--streaming`` with TestStream (FixedWindows, early firings,
ACCUMULATING). Noise keys are insecure seeded test keys, so every assertion is deterministic.
"""

from __future__ import annotations

import math

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import FixedWindows, GlobalWindows, TimestampedValue
from collect import DumpToFile

from beam_dpsketch import serialization
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, Windowing
from beam_dpsketch.sketches import CountMinSketch, CountSketch, DyadicCountSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.transforms import DPFrequencies, DPQuantiles
from beam_dpsketch.transforms.frequencies import LinearSketchReleaseMechanism
from beam_dpsketch.transforms.quantiles import QuantileMechanism, QuantileTree

RHO = PrivacyBudget.zcdp(1.0)
KEYS = [f"k{i}" for i in range(8)]  # the 8-element side of an 8 / 7 pair of neighbours


@pytest.fixture
def quantile_totals(monkeypatch):
    """Record ``public_total`` and ``level_sensitivities`` of every sketch quantiles are read from.

    The runners used here execute in this process, so the patched method is the one they call.
    """
    seen: list[tuple[int | None, list[float]]] = []
    original = PrivateDyadicCountSketch.quantiles

    def spy(self, qs):
        seen.append((self.public_total, self.level_sensitivities.tolist()))
        return original(self, qs)

    monkeypatch.setattr(PrivateDyadicCountSketch, "quantiles", spy)
    return seen


def _estimated_total(released) -> float:
    """The Count-Min total estimated from the noisy table alone ."""
    rows = released.table.sum(axis=1) - released.offset * released.width
    return float(rows.mean())


def _assert_no_public_total(released) -> None:
    assert released.public_total is None
    assert serialization.loads(released.to_bytes())[1]["public_total"] is None
    assert released.describe()["total_public"] is False


# --------------------------------------------------------------------------------------------
# Mechanism level: the planner's calibration path
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "exact_cls"), [("count-min", CountMinSketch), ("count-sketch", CountSketch)]
)
def test_planner_replace_calibration_sets_no_public_total(kind, exact_cls):
    exact = exact_cls(64, 3, 5).update(KEYS)
    planned = LinearSketchReleaseMechanism(kind, 64, 3, 5, "add_remove").for_pane_relation(
        "replace"
    )
    (released,) = planned.release(exact, RHO, NoiseSource.insecure_for_tests(1).stream("pane"))
    assert released.calibration.neighbouring == "replace"  # noise: replacement sensitivity
    _assert_no_public_total(released)
    assert planned.describe(RHO)["total_published"] is False
    # The caller's own declaration of the replace-one model is what publishes N.
    declared = LinearSketchReleaseMechanism(kind, 64, 3, 5, "replace")
    (public,) = declared.release(exact, RHO, NoiseSource.insecure_for_tests(1).stream("pane"))
    assert public.public_total == len(KEYS) and public.total() == float(len(KEYS))


def test_planner_replace_quantiles_never_read_the_exact_pane_size(quantile_totals):
    layout = (0, 255, 16, 3, 0)
    exact = DyadicCountSketch(*layout).update(np.arange(0, 240, 30))  # 8 values
    planned = QuantileMechanism([0.5, 1.0], None, "add_remove", layout).for_pane_relation("replace")
    planned.release(exact, RHO, NoiseSource.insecure_for_tests(2).stream("pane"))
    assert [total for total, _ in quantile_totals] == [None]
    QuantileMechanism([0.5], None, "replace", layout).release(
        exact, RHO, NoiseSource.insecure_for_tests(2).stream("pane")
    )
    assert quantile_totals[-1][0] == 8


def test_pane_replacement_with_signed_weights_is_calibrated_for_a_sign_flip(quantile_totals):
    # Under the pane relation "replace" a pane can lose the deletion (x, -1) and gain the
    # insertion (x, +1): one cell per row moves by 2, an L2 change of 2 sqrt(d) (Count-Min's
    # "replace" sensitivity is only sqrt(2 d)).
    depth = 4
    lost = CountMinSketch(64, depth, 5).update(["x"], [-1])
    gained = CountMinSketch(64, depth, 5).update(["x"], [1])
    flip = float(np.linalg.norm(lost.table - gained.table))
    assert math.isclose(flip, 2 * math.sqrt(depth))
    freq = DPFrequencies(
        64,
        depth,
        RHO,
        seed=5,
        sketch="count-min",
        key_fn=lambda r: r[0],
        weight_fn=lambda r: r[1],
    ).mechanism.for_pane_relation("replace")
    (released,) = freq.release(lost, RHO, NoiseSource.insecure_for_tests(3).stream("pane"))
    assert released.sensitivity >= flip - 1e-12

    layout = (0, 255, 16, 3, 0)
    lost = DyadicCountSketch(*layout).update([7], [-1])
    gained = DyadicCountSketch(*layout).update([7], [1])
    flips = [
        float(np.linalg.norm(lost.level_table(j) - gained.level_table(j)))
        for j in range(lost.levels)
    ]
    quant = DPQuantiles(
        [0.5],
        0,
        255,
        RHO,
        tree=QuantileTree(width=16, depth=3),
        value_fn=lambda r: r[0],
        weight_fn=lambda r: r[1],
    ).mechanism.for_pane_relation("replace")
    quant.release(lost, RHO, NoiseSource.insecure_for_tests(3).stream("pane"))
    ((_, sensitivities),) = quantile_totals
    assert all(s >= f - 1e-12 for s, f in zip(sensitivities, flips, strict=True)), (
        sensitivities,
        flips,
    )


# --------------------------------------------------------------------------------------------
# Pipelines
# --------------------------------------------------------------------------------------------


def test_batch_multi_pane_trigger_releases_no_exact_total(tmp_path, quantile_totals):
    # FnApiRunner, global window, early firing after every element, ACCUMULATING: the planner
    # calibrates for replacement. Two panes per application, each a release.
    freq_out, quant_out = (
        DumpToFile(tmp_path / "freq.pickle"),
        DumpToFile(tmp_path / "quant.pickle"),
    )
    freq = DPFrequencies(
        64,
        3,
        RHO,
        sketch="count-min",
        windowing=Windowing(max_panes_per_window=2),
        noise_source=NoiseSource.insecure_for_tests(11),
        with_metadata=True,
        label="freq",
    )
    quant = DPQuantiles(
        [0.5, 1.0],
        0,
        255,
        RHO,
        tree=QuantileTree(width=16, depth=3),
        windowing=Windowing(max_panes_per_window=2),
        noise_source=NoiseSource.insecure_for_tests(12),
        label="quant",
    )
    trigger = tr.AfterWatermark(early=tr.AfterCount(1))
    with beam.Pipeline(runner="FnApiRunner") as p:
        windowed = (
            p
            | beam.Create(list(range(8)))
            | beam.WindowInto(
                GlobalWindows(), trigger=trigger, accumulation_mode=tr.AccumulationMode.ACCUMULATING
            )
        )
        assert_that(
            windowed | "Keys" >> beam.Map(lambda i: f"k{i}") | freq, freq_out, label="FreqOut"
        )
        assert_that(windowed | "Values" >> beam.Map(lambda i: 30 * i) | quant, quant_out)
    assert freq.aggregate.plan.pane_relation == "replace"
    releases = freq_out.load()
    assert releases
    for release in releases:
        (sketch,) = release.records
        _assert_no_public_total(sketch)
        assert sketch.total() == _estimated_total(sketch)
    assert quant.aggregate.plan.pane_relation == "replace"
    assert quant_out.load() and quantile_totals
    assert all(total is None for total, _ in quantile_totals)


def test_streaming_early_firings_release_no_exact_total(tmp_path):
    # The reproduction: 8 elements in FixedWindows(10), AfterWatermark(early=AfterCount(1)),
    # ACCUMULATING, 2 panes per window, released by two applications with different noise keys.
    # A total that only depends on the data would be equal (and 8) in both.
    outs = [DumpToFile(tmp_path / f"out{i}.pickle") for i in range(2)]
    stream = (
        ts.TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(k, 1 + i) for i, k in enumerate(KEYS)])
        .advance_watermark_to(10)
        .advance_watermark_to_infinity()
    )
    p = beam.Pipeline(runner="DirectRunner", options=PipelineOptions(["--streaming"]))
    windowed = (
        p
        | stream
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.ACCUMULATING,
        )
    )
    for i, out in enumerate(outs):
        released = windowed | f"DP{i}" >> DPFrequencies(
            64,
            3,
            RHO,
            sketch="count-min",
            windowing=Windowing(max_panes_per_window=2),
            noise_source=NoiseSource.insecure_for_tests(100 + i),
            with_metadata=True,
            label=f"f{i}",
        )
        assert_that(released, out, label=f"Out{i}")
    p.run().wait_until_finish()
    by_pane = [{r.pane_index: r.records[0] for r in out.load()} for out in outs]
    assert by_pane[0].keys() == by_pane[1].keys() and by_pane[0]
    for panes in by_pane:
        for sketch in panes.values():
            _assert_no_public_total(sketch)
            assert sketch.total() == _estimated_total(sketch)
    last = max(by_pane[0])
    totals = [panes[last].total() for panes in by_pane]
    assert totals[0] != totals[1], totals
