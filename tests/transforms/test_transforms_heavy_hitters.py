"""DPHeavyHitters / DPHistogram: Beam pipelines equal the core mechanisms, accounting, bounding.

Runners: FnApiRunner in-process for most tests, FnApiRunner multi_processing with 2 workers for
one. Noise comes from ``NoiseSource.insecure_for_tests`` so every release is reproducible, and the
expected output is recomputed from the same keyed stream (``release_id_for``).
"""

from __future__ import annotations

import math
import os
from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import FixedWindows, GlobalWindow, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import (
    BudgetExceededError,
    PrivacyAccountant,
    PrivacyBudget,
    PrivacyUnit,
)
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import (
    ERROR_CONFIDENCE,
    PostProcessedSum,
    calibrate_gshm,
    gated_approx_pp,
    pmg,
)
from beam_dpsketch.transforms import DPHeavyHitters, DPHistogram
from beam_dpsketch.transforms.heavy_hitters import DesignB, Sequential
from beam_dpsketch.transforms.release import release_id_for

EPS, DELTA = 1.0, 1e-6
BUDGET = PrivacyBudget.approx(EPS, DELTA)


def zipf_keys(n: int, seed: int, items: int = 2000, s: float = 1.2) -> np.ndarray:
    ranks = np.arange(1, items + 1, dtype=np.float64)
    pmf = ranks**-s / np.sum(ranks**-s)
    return np.random.default_rng(seed).choice(items, size=n, p=pmf).astype(np.int64)


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(tmp_path / "output.pickle")


def run_one_batch(transform: beam.PTransform, keys: np.ndarray, dump: DumpToFile) -> list:
    """Run ``transform`` on one pre-batched array (a single bundle, a single segment)."""
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create([keys], reshuffle=False) | transform, dump)
    return dump.load()


@pytest.mark.parametrize("seed", [1, 2])
def test_design_b_pipeline_equals_the_core_release(seed, dump):
    keys = zipf_keys(5000, seed)
    source = NoiseSource.insecure_for_tests(seed)
    t = DPHistogram(40, BUDGET, noise_source=source, label="hist")
    # The transform's Design B runs behind the exactness gate (this stream decrements).
    expected = gated_approx_pp(
        PostProcessedSum.from_sketch(MisraGries(40).update(keys)),
        PrivacyBudget.approx(EPS, DELTA),
        t.aggregate.noise_source.stream(release_id_for("hist", GlobalWindow(), 0)),
    )
    out = run_one_batch(t, keys, dump)
    assert [r[:2] for r in out] == [(k, c) for k, c in expected.items]
    assert len(out) > 3  # the heavy keys of a Zipf(1.2) stream pass the threshold


def test_sequential_pipeline_equals_pmg_on_the_whole_stream(dump):
    keys = zipf_keys(3000, 7)
    source = NoiseSource.insecure_for_tests(9)
    t = DPHistogram(30, BUDGET, mechanism="sequential", noise_source=source, label="seq")
    expected = pmg(
        MisraGries(30).update(keys),
        PrivacyBudget.approx(EPS, DELTA),
        t.aggregate.noise_source.stream(release_id_for("seq", GlobalWindow(), 0)),
        error_confidence=ERROR_CONFIDENCE,
    )
    assert [r[:2] for r in run_one_batch(t, keys, dump)] == [(k, c) for k, c in expected.items]


def test_sequential_sketch_sees_every_batch_of_the_window(dump):
    # 40 batches over 3 bundles-worth of elements reach one sketch through keyed state (one
    # bytes round trip per batch). With k above the distinct keys Misra-Gries counts exactly
    # in any arrival order, so the release is PMG of the exact counts: a lost or repeated
    # batch, or a second sketch, changes it.
    keys = zipf_keys(4000, 11, items=60)
    batches = np.array_split(keys, 40)
    source = NoiseSource.insecure_for_tests(12)
    t = DPHistogram(64, BUDGET, mechanism="sequential", noise_source=source, label="seq")
    expected = pmg(
        MisraGries(64).update(keys),
        PrivacyBudget.approx(EPS, DELTA),
        t.aggregate.noise_source.stream(release_id_for("seq", GlobalWindow(), 0)),
        error_confidence=ERROR_CONFIDENCE,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(batches) | t, dump)
    assert [r[:2] for r in dump.load()] == [(k, c) for k, c in expected.items]


def test_two_sequential_releases_of_one_input_both_release(tmp_path):
    # Two applications read the same batches in one pipeline. Each has its own end-of-window
    # timer: with one timer name for both, the FnApiRunner fires only one of them and the other
    # release silently never happens.
    keys = zipf_keys(3000, 14, items=40)
    outs = [DumpToFile(tmp_path / f"out{i}.pickle") for i in range(2)]
    expected = []
    with beam.Pipeline(runner=FnApiRunner()) as p:
        batches = p | beam.Create(np.array_split(keys, 6)) | beam.Reshuffle()
        for i, out in enumerate(outs):
            source = NoiseSource.insecure_for_tests(20 + i)
            t = DPHistogram(64, BUDGET, mechanism="sequential", noise_source=source, label=f"s{i}")
            stream = t.aggregate.noise_source.stream(release_id_for(f"s{i}", GlobalWindow(), 0))
            whole = MisraGries(64).update(keys)
            expected.append(
                pmg(
                    whole,
                    PrivacyBudget.approx(EPS, DELTA),
                    stream,
                    error_confidence=ERROR_CONFIDENCE,
                ).items
            )
            assert_that(batches | f"s{i}" >> t, out, label=f"Check{i}")
    for out, items in zip(outs, expected, strict=True):
        assert [r[:2] for r in out.load()] == [(k, c) for k, c in items] and items


def test_misra_gries_bytes_round_trip_between_batches_changes_nothing():
    # The sequential release keeps its sketch as bytes between batches: decoding and
    # continuing must equal one uninterrupted Algorithm-1 run (k far below the distinct keys,
    # so decrements, zero slots and replacements all happen).
    keys = zipf_keys(20_000, 13, items=5000)
    whole = MisraGries(50)
    state = MisraGries(50).to_bytes()
    for batch in np.array_split(keys, 37):
        whole.update(batch)
        state = MisraGries.from_bytes(state).update(batch).to_bytes()
    assert MisraGries.from_bytes(state) == whole
    assert MisraGries.from_bytes(state).to_dict() == whole.to_dict()


def test_heavy_hitters_are_found_and_counts_within_the_bound(dump):
    keys = zipf_keys(20_000, 3)
    n, k = len(keys), 100
    truth = Counter(keys.tolist())
    out = run_one_batch(
        DPHeavyHitters(
            k,
            BUDGET,
            top=10,
            mechanism="design-b",
            noise_source=NoiseSource.insecure_for_tests(4),
        ),
        keys,
        dump,
    )
    assert len(out) == 10
    counts = [r.estimate for r in out]
    assert counts == sorted(counts, reverse=True)  # largest first
    # Design B with the count correction: f(x) <= (V + N)/(k+1) <= f(x) + n/(k+1), plus
    # discrete Laplace noise of scale 2/eps_hh per key and (1/eps_c)/(k+1) from N_hat
    # (eps_hh = 0.95 eps, eps_c = 0.05 eps); |noise| > scale * ln(1/beta) has probability
    # <= beta; with beta = 1e-9 per draw the union over 11 draws fails w.p. <= 1.1e-8.
    noise_bound = (2 / (0.95 * EPS) + 1 / (0.05 * EPS) / (k + 1)) * math.log(1e9)
    for rec in out:
        key, noisy = rec[:2]
        assert truth[key] - noise_bound <= noisy <= truth[key] + n / (k + 1) + noise_bound
        # The stated 95% interval is wider than the sketch's one-sided error.
        assert rec.error_bound >= n / (k + 1)
    top5 = {key for key, _ in truth.most_common(5)}
    assert top5 <= {r.key for r in out}


def test_histogram_is_in_canonical_key_order_and_has_no_dummies(dump):
    keys = np.array(["b", "a", "c"] * 400 + ["d"] * 3, dtype=object)
    out = run_one_batch(
        DPHistogram(
            5, BUDGET, mechanism="sequential", noise_source=NoiseSource.insecure_for_tests(1)
        ),
        keys,
        dump,
    )
    assert [r.key for r in out] == ["a", "b", "c"]  # "d" (count 3) is below the threshold
    assert all(r.key is not None for r in out)


def test_fixed_windows_release_once_per_window_with_distinct_noise(dump):
    source = NoiseSource.insecure_for_tests(5)
    keys = [f"k{i:02d}" for i in range(16)]
    events = [TimestampedValue(k, t) for t in range(20) for k in keys] * 50
    t = DPHistogram(
        20, BUDGET, mechanism="sequential", noise_source=source, with_metadata=True, label="w"
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        res = p | beam.Create(events) | beam.WindowInto(FixedWindows(10)) | t
        assert_that(res, dump)
    out = sorted(dump.load(), key=lambda r: r.window_start)
    assert len(out) == 2
    assert {(r.window_start, r.pane_index) for r in out} == {(0.0, 0), (10.0, 0)}
    # Each window holds each of 16 keys 500 times. The windows have distinct release ids, so
    # their noise vectors are independent: all 16 noisy counts coincide with probability
    # <= (sum_z P[Z=z]^2)^16 < 0.31^16 < 1e-8 for the discrete Laplace of scale 1/eps = 1; a
    # noisy count is 60 or more away with probability < 1e-25.
    released = [dict(rec[:2] for rec in r.records) for r in out]
    assert all(set(r) == set(keys) for r in released)
    assert released[0] != released[1]
    assert all(abs(v - 500) < 60 for r in released for v in r.values())
    assert all(r.epsilon == EPS and r.delta == DELTA for r in out)  # fixed windows: parallel
    assert "dp-misra-gries/sequential" in t.explain()


def test_over_budget_fails_at_construction_naming_the_transform():
    accountant = PrivacyAccountant(PrivacyBudget.approx(1.0, 1e-6))
    p = beam.Pipeline(runner=FnApiRunner())
    keys = p | beam.Create([np.arange(10, dtype=np.int64)])
    _ = keys | "First" >> DPHeavyHitters(10, PrivacyBudget.approx(0.7, 5e-7), accountant=accountant)
    with pytest.raises(BudgetExceededError, match="Second"):
        _ = keys | "Second" >> DPHeavyHitters(
            10, PrivacyBudget.approx(0.7, 5e-7), accountant=accountant
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 0, "budget": BUDGET}, "k must be"),
        ({"k": 10, "budget": PrivacyBudget.pure(1.0)}, "delta"),
        ({"k": 10, "budget": BUDGET, "mechanism": "nope"}, "mechanism must be one of"),
        ({"k": 10, "budget": BUDGET, "mechanism": "pamg-gshm"}, "privacy_unit"),
        (
            {"k": 10, "budget": BUDGET, "mechanism": "user-exact", "privacy_unit": PrivacyUnit()},
            "privacy_unit",
        ),
        ({"k": 10}, "budget"),
    ],
)
def test_invalid_parameters_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        p = beam.Pipeline(runner=FnApiRunner())
        _ = p | beam.Create([np.arange(3, dtype=np.int64)]) | DPHeavyHitters(**kwargs)


def test_user_level_bounds_each_units_contributions(dump):
    # One user sends "spam" 2000 times; 300 users send "ham" once each. With one contribution
    # per user, "spam" counts once and can never pass the GSHM threshold, "ham" does.
    rows = [{"user": "spammer", "key": "spam"}] * 2000
    rows += [{"user": f"u{i}", "key": "ham"} for i in range(300)]
    t = DPHistogram(
        8,
        BUDGET,
        key_fn=lambda r: r["key"],
        privacy_unit=PrivacyUnit(id=lambda r: r["user"]),
        noise_source=NoiseSource.insecure_for_tests(2),
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(rows) | t, dump)
    released = dict(r[:2] for r in dump.load())
    assert "spam" not in released
    assert "ham" in released and abs(released["ham"] - 300) < 150
    assert "privacy unit: user" in t.explain()


@pytest.fixture
def _workers_can_import_this_module(monkeypatch):
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    )


def _generate(seed: int) -> list[np.ndarray]:
    return np.array_split(zipf_keys(20_000, seed), 8)


class CheckAgainstTruth:
    """Matcher: the heaviest keys are released and every released count is within the
    single-machine release's guarantee, ``f(x) - N/(k+1) - b <= noisy <= f(x) + b``, where ``b``
    bounds the mechanism's noise except with probability <= 1e-9 per key."""

    def __init__(self, k: int, noise_bound: float):
        self.k, self.noise_bound = k, noise_bound

    def __call__(self, actual):
        keys = np.concatenate([np.concatenate(_generate(seed)) for seed in (11, 12, 13)])
        truth = Counter(keys.tolist())
        n = sum(truth.values())
        released = dict(r[:2] for r in actual)
        assert {0, 1} <= set(released), actual
        for key, noisy in released.items():
            low = truth[key] - n / (self.k + 1) - self.noise_bound
            assert low <= noisy <= truth[key] + self.noise_bound, (key, noisy, truth[key])


def _noise_bound(mechanism: str, k: int) -> float:
    if mechanism == "design-b":  # discrete Laplace, scale 2/eps on the count scale
        return 2 / EPS * math.log(1e9)
    if mechanism == "merged-laplace":  # scale k/eps
        return k / EPS * math.log(1e9)
    # Gaussian: P(|N(0, sigma^2)| > 6.5 sigma) < 1e-10.
    return 6.5 * calibrate_gshm(k, EPS, DELTA).sigma


@pytest.mark.usefixtures("_workers_can_import_this_module")
@pytest.mark.parametrize("mechanism", ["design-b", "merged-gshm", "merged-laplace"])
def test_merge_designs_on_multi_processing_with_two_workers(mechanism):
    # Shard partials from 2 worker processes are merged by Beam (Design B sums post-processed
    # segments; the merged designs use the Agarwal merge); the release must keep the
    # single-machine guarantee of its mechanism.
    k = 50
    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        res = (
            p
            | beam.Create([11, 12, 13])
            | beam.Reshuffle()
            | beam.FlatMap(_generate)
            | DPHistogram(
                k, BUDGET, mechanism=mechanism, noise_source=NoiseSource.insecure_for_tests(6)
            )
        )
        assert_that(res, CheckAgainstTruth(k, _noise_bound(mechanism, k)))


def test_design_b_metadata_records_carry_error_bounds_and_are_unbiased(dump):
    # 50 distinct keys <= k: every accumulator's sketch is exact, so only noise remains.
    keys = np.repeat(np.arange(50, dtype=np.int64), np.arange(50, 0, -1) * 40)
    keys = np.random.default_rng(2).permutation(keys)
    truth = Counter(keys.tolist())
    t = DPHeavyHitters(
        64,
        BUDGET,
        top=5,
        mechanism="design-b",
        noise_source=NoiseSource.insecure_for_tests(8),
        with_metadata=True,
    )
    (release,) = run_one_batch(t, keys, dump)
    assert len(release.records) == 5
    for rec in release.records:
        key, count = rec[:2]
        # Noise only: 2/eps_hh * ln(1e9) per key and (1/eps_c)/(k+1) * ln(1e9) from N_hat.
        assert abs(count - truth[key]) <= (2 / 0.95 + 20 / 65) * math.log(1e9)
        assert rec.confidence == 0.95 and rec.lower <= count <= rec.upper
        assert rec.error_bound == max(count - rec.lower, rec.upper - count)
    assert [r.key for r in release.records] == [0, 1, 2, 3, 4]


def test_explain_states_the_budget_split_estimate_and_memory():
    p = beam.Pipeline(runner=FnApiRunner())
    t = DPHeavyHitters(
        budget=BUDGET, mechanism="design-b", noise_source=NoiseSource.insecure_for_tests(1)
    )
    _ = p | beam.Create([np.arange(3, dtype=np.int64)]) | t
    assert t.k == 4096  # DEFAULT_K
    text = t.explain()
    # The exactness gate's test takes epsilon 0.020248 at k = 4096; the sketch branch splits
    # the rest, eps_b = 0.979752, into 95 % for the keys and 5 % for the element count.
    assert "exactness_gate: a noisy test" in text and "epsilon 0.020248" in text
    assert "eps_b = 0.979752" in text
    assert "budget_split: epsilon 0.930765 for the keys" in text and "0.048987" in text
    assert "count_noise_scale: 20.4" in text
    assert "max_shards * k = 1,048,576 keys" in text
    assert "error_bound: per key, with probability >= 0.95" in text
    assert "noise scale: 2.14877" in text  # 2 / eps_hh


def test_explain_states_the_user_level_contribution_bound():
    p = beam.Pipeline(runner=FnApiRunner())
    t = DPHistogram(
        8,
        BUDGET,
        key_fn=lambda r: r[1],
        privacy_unit=PrivacyUnit(id=lambda r: r[0], max_contributions=3),
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    _ = p | beam.Create([("u", "a")]) | t
    assert "m=3" in t.explain() and "m=1" not in t.explain()


@pytest.mark.parametrize(
    ("count_fraction", "match"),
    [
        (1.0, "count_fraction must be in"),
        (-0.5, "count_fraction must be in"),
        (1e-7, "count_fraction=1e-07 of epsilon"),
    ],
)
def test_count_fraction_is_refused_at_construction(count_fraction, match):
    with pytest.raises(ValueError, match=match):
        p = beam.Pipeline(runner=FnApiRunner())
        _ = (
            p
            | beam.Create([np.arange(3, dtype=np.int64)])
            | DPHeavyHitters(budget=BUDGET, mechanism=DesignB(10, count_fraction=count_fraction))
        )


def test_count_fraction_is_a_design_b_parameter_only():
    # The other mechanisms have no count_fraction, and the transforms take none.
    with pytest.raises(TypeError, match="count_fraction"):
        Sequential(10, count_fraction=0.1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="count_fraction"):
        DPHeavyHitters(10, BUDGET, mechanism="sequential", count_fraction=0.1)
