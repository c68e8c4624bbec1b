"""The sharded sequential mechanisms in pipelines: ``"design-d"`` and ``"untrusted-shards"``.

Runner: FnApiRunner in-process. Each pipeline's release must equal the sketch layer's release
(:func:`~beam_dpsketch.sketches.misra_gries.design_d`,
:func:`~beam_dpsketch.sketches.misra_gries.untrusted_sum`) of the same shard sketches under the
same noise stream: a lost or repeated batch, a key in the wrong shard or a merged shard changes
it. Streams have fewer distinct keys per shard than ``k``, so each shard's sketch is exact
whatever order its batches arrive in.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
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
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit, Windowing
from beam_dpsketch.sketches.misra_gries import (
    ERROR_CONFIDENCE,
    ShardedMisraGries,
    design_d,
    untrusted_sum,
)
from beam_dpsketch.sketches.misra_gries.sharded import split_by_shard
from beam_dpsketch.transforms import DPHeavyHitters, DPHistogram
from beam_dpsketch.transforms.heavy_hitters import MECHANISMS, DesignD, UntrustedShards
from beam_dpsketch.transforms.release import release_id_for

BUDGET = PrivacyBudget.approx(1.0, 1e-6)


def zipf_keys(n: int, seed: int, items: int, s: float = 1.2) -> np.ndarray:
    ranks = np.arange(1, items + 1, dtype=np.float64)
    pmf = ranks**-s / np.sum(ranks**-s)
    return np.random.default_rng(seed).choice(items, size=n, p=pmf).astype(np.int64)


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(tmp_path / "output.pickle")


def test_design_d_pipeline_equals_the_sketch_layer_release(dump):
    keys = zipf_keys(6000, 3, items=120)
    source = NoiseSource.insecure_for_tests(21)
    t = DPHistogram(64, BUDGET, mechanism=DesignD(64, shards=4), noise_source=source, label="d")
    expected = design_d(
        ShardedMisraGries(64, 4).update(keys),
        BUDGET,
        t.aggregate.noise_source.stream(release_id_for("d", GlobalWindow(), 0)),
        error_confidence=ERROR_CONFIDENCE,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(np.array_split(keys, 30)) | t, dump)
    out = dump.load()
    assert [r[:2] for r in out] == [(k, c) for k, c in expected.items]
    assert len(out) > 5  # the head of the stream passes the shards' thresholds
    # The error bound of every row is the release's, stated from released values.
    assert {(r.lower, r.upper) for r in out} == {(e.lower, e.upper) for e in expected.estimates()}


def test_untrusted_shards_pipeline_equals_the_sum_of_holder_releases(dump):
    keys = zipf_keys(6000, 4, items=100)
    holders = [f"site-{i % 5}" for i in range(len(keys))]
    pairs = list(zip(holders, keys.tolist(), strict=True))
    source = NoiseSource.insecure_for_tests(22)
    t = DPHeavyHitters(
        128,
        BUDGET,
        top=10,
        mechanism=UntrustedShards(128, shards=3),
        key_fn=lambda r: (r["holder"], r["key"]),
        noise_source=source,
        label="u",
    )
    sketch = ShardedMisraGries(128, 3, "holder")
    for j, part in split_by_shard(keys.tolist(), 3, by=holders):
        sketch.update_shard(j, part)
    expected = untrusted_sum(
        sketch,
        BUDGET,
        t.aggregate.noise_source.stream(release_id_for("u", GlobalWindow(), 0)),
        error_confidence=ERROR_CONFIDENCE,
    ).top(10)
    records = [{"holder": h, "key": k} for h, k in pairs]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(records) | t, dump)
    out = dump.load()
    assert sorted(r[:2] for r in out) == sorted(expected.items)
    assert [r[1] for r in out] == sorted((r[1] for r in out), reverse=True)
    assert len(out) == 10


@pytest.mark.parametrize("budget", [BUDGET, PrivacyBudget.approx(0.3, 1e-8)], ids=str)
@pytest.mark.parametrize(
    "mechanism", [DesignD(16, shards=3), UntrustedShards(16, shards=3)], ids=repr
)
def test_calibration_is_what_the_release_reports(mechanism, budget):
    m = mechanism.bind(top=None, max_contributions=None)
    keys = zipf_keys(4000, 5, items=800)
    acc = m.combine_fn().create_accumulator()
    if isinstance(m, DesignD):
        acc.update(keys)
    else:
        for j, part in enumerate(np.array_split(keys, 3)):
            acc.update_shard(j, part)
    stated = m.calibration(budget)
    released = m.release_object(acc, budget, NoiseSource.insecure_for_tests(3).stream("r"))
    assert stated["noise_scale"] == pytest.approx(released.noise.scale, rel=1e-12)
    assert stated["threshold"] == pytest.approx(released.threshold, rel=1e-12)
    assert stated["noise"] == released.noise.distribution
    assert stated["neighbouring_relation"] == released.neighbouring
    assert stated["shards"] == released.details["shards"] == 3
    split = stated["budget_split"]
    assert split.startswith(f"epsilon {released.details['release_epsilon']:.6g} for the release")
    assert released.error is not None and released.error.confidence == ERROR_CONFIDENCE


def test_names_and_parameters():
    assert "design-d" in MECHANISMS and "untrusted-shards" in MECHANISMS
    t = DPHistogram(budget=BUDGET, mechanism=DesignD(32, shards=5))
    assert t.display_data()["shards"].value == 5
    assert repr(UntrustedShards(8, shards=2)) == "UntrustedShards(k=8, shards=2)"
    with pytest.raises(ValueError, match="shards"):
        DesignD(8, shards=0)
    # Past 24 shards the summed values cannot state a 95 % bound (union bound over shards).
    with pytest.raises(ValueError, match="shards must be at most 24"):
        UntrustedShards(8, shards=25)


@pytest.mark.parametrize("name", ["design-d", "untrusted-shards"])
def test_user_level_is_refused_naming_the_mechanism(name):
    with pytest.raises(ValueError, match="mechanism"):
        DPHistogram(
            8,
            BUDGET,
            mechanism=name,
            privacy_unit=PrivacyUnit(id=lambda r: r[0], max_contributions=2),
            key_fn=lambda r: r[1],
        )


def test_untrusted_shards_refuses_keys_without_a_holder_naming_their_type():
    t = DPHistogram(8, BUDGET, mechanism="untrusted-shards", label="plain")
    with pytest.raises(Exception, match="holder, key.*of type str") as info:
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = p | beam.Create(["secret-key-a", "secret-key-b"]) | t
    # The error names the key's type, never the key.
    assert "secret-key" not in str(info.value)


@pytest.mark.parametrize("name", ["design-d", "untrusted-shards"])
def test_a_trigger_that_fires_more_than_once_is_refused_naming_design_b(name):
    p = beam.Pipeline(runner=FnApiRunner())
    early = (
        p
        | beam.Create([TimestampedValue(("h", i % 3), i) for i in range(30)])
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    with pytest.raises(ValueError, match=f"mechanism '{name}'.*design-b"):
        _ = early | DPHistogram(
            8, BUDGET, mechanism=name, windowing=Windowing(max_panes_per_window=4)
        )


def test_design_d_releases_each_fixed_window_from_its_own_shard_sketches(dump):
    # Two windows of different keys: each window's release is design_d of that window's
    # elements alone (the shard state and timers are per window).
    keys = [(i % 7, float(i)) for i in range(0, 700)] + [
        (100 + i % 5, 1000.0 + i) for i in range(500)
    ]
    source = NoiseSource.insecure_for_tests(23)
    t = DPHistogram(16, BUDGET, mechanism=DesignD(16, shards=3), noise_source=source, label="w")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (
            p
            | beam.Create([TimestampedValue(k, ts) for k, ts in keys])
            | beam.WindowInto(FixedWindows(1000))
        )
        assert_that(out | t | beam.Map(lambda r: (r[0], r[1])), dump)
    got = sorted(dump.load())
    expected = []
    for start, part in (
        (0, [k for k, ts in keys if ts < 1000]),
        (1000, [k for k, ts in keys if ts >= 1000]),
    ):
        window = IntervalWindow(start, start + 1000)
        rel = design_d(
            ShardedMisraGries(16, 3).update(part),
            BUDGET,
            t.aggregate.noise_source.stream(release_id_for("w", window, 0)),
            error_confidence=ERROR_CONFIDENCE,
        )
        expected += list(rel.items)
    assert got == sorted(expected)
    assert {k for k, _ in got} == set(range(7)) | set(range(100, 105))
