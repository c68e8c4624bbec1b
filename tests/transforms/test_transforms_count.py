"""DPCount: calibration, the noise distribution, a privacy check on neighbours, user level.

The statistical tests call the release mechanism directly with many release ids (one keyed
stream each, as the release DoFn does), from a seeded, INSECURE test key, so they are
deterministic; their bounds are set so that a correct mechanism fails with probability at most
1e-6 over the choice of key.
"""

from __future__ import annotations

import math
from fractions import Fraction
from operator import itemgetter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that

from beam_dpsketch.noise import NoiseSource, discrete_gaussian, discrete_laplace, new_run_salt
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, PrivacyUnit, Windowing
from beam_dpsketch.transforms import DPCount
from beam_dpsketch.transforms.count import CountGaussianMechanism, CountLaplaceMechanism
from beam_dpsketch.transforms.records import CountEstimate
from beam_dpsketch.transforms.release import _ReleaseDoFn, release_id_for

SEED = 314159


# --------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------


def test_laplace_scale_is_sensitivity_over_epsilon_rounded_up():
    mech = CountLaplaceMechanism()
    assert mech.sensitivity == 1
    assert mech.scale(PrivacyBudget.pure(0.5)) == Fraction(2)
    user = CountLaplaceMechanism(max_contributions=4)
    assert user.sensitivity == 4
    assert user.scale(PrivacyBudget.pure(0.5)) == Fraction(8)
    # eps = 0.3 is rounded down to a rational, so the scale is >= 1/0.3.
    assert float(mech.scale(PrivacyBudget.pure(0.3))) >= 1 / 0.3
    # An approximate budget's delta is not spent by a pure mechanism.
    assert mech.privacy_cost(PrivacyBudget.approx(0.5, 1e-6)) == PrivacyBudget.pure(0.5)


def test_replace_relation_keeps_the_count_sensitivity():
    for m in (1, 3):
        mech = CountLaplaceMechanism(m).for_pane_relation("replace")
        assert isinstance(mech, CountLaplaceMechanism)  # no group-privacy wrapper
        assert mech.pane_relation == "replace"
        assert mech.sensitivity == m
        text = mech.describe(PrivacyBudget.pure(1.0))["neighbouring_relation"]
        assert "replace" in text and "|added - removed|" in text


def test_gaussian_sigma_for_zcdp():
    mech = CountGaussianMechanism(max_contributions=2)
    sigma = mech.sigma(PrivacyBudget.zcdp(0.5))
    assert sigma >= 2 / math.sqrt(1.0)
    assert sigma == pytest.approx(2.0, rel=1e-12)
    # rho = Delta^2 / (2 sigma^2) never exceeds the budget.
    assert 4 / (2 * sigma * sigma) <= 0.5
    with pytest.raises(ValueError, match="zCDP"):
        mech.check_budget(PrivacyBudget.pure(1.0))
    with pytest.raises(ValueError, match="pure or approximate"):
        CountLaplaceMechanism().check_budget(PrivacyBudget.zcdp(1.0))


def test_dpcount_picks_the_mechanism_from_the_budget_kind():
    assert isinstance(DPCount(PrivacyBudget.pure(1.0)).mechanism, CountLaplaceMechanism)
    assert isinstance(DPCount(PrivacyBudget.approx(1.0, 1e-6)).mechanism, CountLaplaceMechanism)
    assert isinstance(DPCount(PrivacyBudget.zcdp(0.5)).mechanism, CountGaussianMechanism)
    acc = PrivacyAccountant(PrivacyBudget.zcdp(1.0))
    assert isinstance(DPCount(accountant=acc).mechanism, CountGaussianMechanism)


def test_dpcount_validates_arguments():
    with pytest.raises(ValueError, match="budget"):
        DPCount()
    with pytest.raises(
        ValueError, match=r"max_contributions applies to a user-level .*PrivacyUnit\(id="
    ):
        DPCount(
            PrivacyBudget.pure(1.0),
            privacy_unit=PrivacyUnit(max_contributions=3),
        )
    with pytest.raises(ValueError, match="max_contributions"):
        DPCount(
            PrivacyBudget.pure(1.0),
            privacy_unit=PrivacyUnit(id=itemgetter(0), max_contributions=0),
        )
    with pytest.raises(TypeError, match="count must be an int"):
        CountLaplaceMechanism().release(
            "3", PrivacyBudget.pure(1.0), NoiseSource.insecure_for_tests(0).stream("x")
        )


# --------------------------------------------------------------------------------------------
# Statistical: the noise has the discrete Laplace distribution's moments
# --------------------------------------------------------------------------------------------


def geo2_moments(scale: float) -> tuple[float, float]:
    """Variance and fourth moment of Geo2(exp(-1/scale)), summed from the pmf."""
    a = math.exp(-1.0 / scale)
    z = np.arange(-4000, 4001, dtype=np.float64)
    pmf = (1 - a) / (1 + a) * a ** np.abs(z)
    return float(np.sum(pmf * z**2)), float(np.sum(pmf * z**4))


def test_released_noise_has_the_discrete_laplace_variance():
    eps = 0.5
    n = 12_000
    budget = PrivacyBudget.pure(eps)
    mech = CountLaplaceMechanism()
    source = NoiseSource.insecure_for_tests(SEED)
    true = 1234
    noise = np.array(
        [mech.release(true, budget, source.stream(("var", i)))[0].count - true for i in range(n)],
        dtype=np.float64,
    )
    var, m4 = geo2_moments(float(mech.scale(budget)))
    a = math.exp(-eps)
    assert var == pytest.approx(2 * a / (1 - a) ** 2, rel=1e-9)
    # The mean is known (0), so mean(Z^2) is unbiased for the variance with variance
    # (m4 - var^2) / n. z = 5.5 bounds a two-sided false failure by ~4e-8 (CLT), and the same
    # for the mean: well under the 1e-6 target together.
    z = 5.5
    assert abs(np.mean(noise**2) - var) <= z * math.sqrt((m4 - var**2) / n)
    assert abs(np.mean(noise)) <= z * math.sqrt(var / n)
    # Sanity of the test itself: it rejects noise of half the scale.
    half_var, _ = geo2_moments(float(mech.scale(budget)) / 2)
    assert abs(half_var - var) > z * math.sqrt((m4 - var**2) / n)


def test_release_dofn_draws_from_the_release_stream_only():
    # The DoFn path (window, pane -> release id -> stream -> mechanism) matches a direct draw.
    from apache_beam.transforms.window import IntervalWindow
    from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming

    from beam_dpsketch.privacy.windowing import ReleasePlan
    from beam_dpsketch.transforms import plan_releases

    class W:
        windowfn = beam.transforms.window.FixedWindows(10)
        triggerfn = beam.transforms.trigger.DefaultTrigger()
        accumulation_mode = beam.transforms.trigger.AccumulationMode.DISCARDING
        allowed_lateness = 0

    plan: ReleasePlan = plan_releases(W())
    budget = PrivacyBudget.pure(1.0)
    mech = CountLaplaceMechanism()
    source = NoiseSource.insecure_for_tests(SEED)
    dofn = _ReleaseDoFn("lbl", mech, plan, budget, budget, source, False, 1.0, None)
    pane = PaneInfo(True, True, PaneInfoTiming.ON_TIME, 0, 0)
    window = IntervalWindow(10, 20)
    # An insecure source's run source is the source itself, whatever the run salt.
    salt = new_run_salt(source)
    out = list(dofn.process(7, salt, window=window, pane=pane))
    rid = release_id_for("lbl", window, 0)
    assert out == [CountEstimate(7 + int(discrete_laplace(source.stream(rid), 1, 1)[0]))]
    # Retrying the same release gives the same value.
    assert list(dofn.process(7, salt, window=window, pane=pane)) == out
    # A pane past the plan's maximum (1 here) is withheld.
    late = PaneInfo(False, True, PaneInfoTiming.LATE, 1, 1)
    assert list(dofn.process(7, salt, window=window, pane=late)) == []


def test_gaussian_count_noise_is_centred_with_variance_near_sigma_squared():
    rho = 0.125  # sigma = 2
    n = 4000
    budget = PrivacyBudget.zcdp(rho)
    mech = CountGaussianMechanism()
    source = NoiseSource.insecure_for_tests(SEED)
    noise = np.array(
        [mech.release(50, budget, source.stream(("g", i)))[0].count - 50 for i in range(n)],
        dtype=np.float64,
    )
    sigma = mech.sigma(budget)
    # Discrete Gaussian variance is within 1e-3 of sigma^2 for sigma = 2; 6-sigma-type bounds
    # with the Gaussian fourth moment 3 sigma^4.
    assert abs(np.mean(noise)) <= 5.5 * sigma / math.sqrt(n)
    assert abs(np.mean(noise**2) - sigma**2) <= 5.5 * math.sqrt(2 * sigma**4 / n) + 1e-2
    # Same stream, same draw as the sampler called directly.
    direct = int(discrete_gaussian(source.stream(("g", 0)), sigma, 1)[0])
    assert noise[0] == direct


# --------------------------------------------------------------------------------------------
# Privacy on neighbouring inputs
# --------------------------------------------------------------------------------------------

EVENT_OFFSETS = {
    "X == c": lambda x, c: x == c,
    "X == c - 1": lambda x, c: x == c - 1,
    "X >= c": lambda x, c: x >= c,
    "X <= c - 1": lambda x, c: x <= c - 1,
    "X >= c + 2": lambda x, c: x >= c + 2,
    "X <= c - 3": lambda x, c: x <= c - 3,
}


def dp_violations(mech, eps: float, n: int, seed: int, beta: float = 1e-6) -> list[str]:
    """Events E with P[M(D) in E] > e^eps P[M(D') in E] + slack, both directions.

    D has 10 elements and D' = D minus one (counts 10 and 9). Each probability is estimated
    from ``n`` releases with distinct release ids; Hoeffding gives |p_hat - p| <= t with
    probability 1 - beta/K per estimate (K estimates, union bound), so a mechanism that is
    eps-DP fails the check with probability <= beta. The slack is t (1 + e^eps).
    """
    budget = PrivacyBudget.pure(eps)
    source = NoiseSource.insecure_for_tests(seed)
    c = 10
    out_d = np.array([mech.release(c, budget, source.stream(("D", i)))[0].count for i in range(n)])
    out_n = np.array(
        [mech.release(c - 1, budget, source.stream(("D'", i)))[0].count for i in range(n)]
    )
    k = 2 * len(EVENT_OFFSETS)
    t = math.sqrt(math.log(2 * k / beta) / (2 * n))
    slack = t * (1 + math.exp(eps))
    bad = []
    for name, event in EVENT_OFFSETS.items():
        p_d = float(np.mean(event(out_d, c)))
        p_n = float(np.mean(event(out_n, c)))
        if p_d > math.exp(eps) * p_n + slack:
            bad.append(f"D vs D': {name}: {p_d:.3f} > e^eps {p_n:.3f} + {slack:.3f}")
        if p_n > math.exp(eps) * p_d + slack:
            bad.append(f"D' vs D: {name}: {p_n:.3f} > e^eps {p_d:.3f} + {slack:.3f}")
    return bad


class HalvedScaleLaplace(CountLaplaceMechanism):
    """Mutation: half the calibrated noise scale (so about 2 eps)."""

    def scale(self, budget):
        return super().scale(budget) / 2


def test_neighbouring_inputs_satisfy_the_dp_inequality():
    assert dp_violations(CountLaplaceMechanism(), eps=1.0, n=6000, seed=SEED) == []


def test_halved_noise_scale_is_caught_by_the_privacy_check():
    bad = dp_violations(HalvedScaleLaplace(), eps=1.0, n=6000, seed=SEED + 1)
    assert bad, "a mechanism with half the noise must violate eps-DP on some event"
    assert any("X == c" in b for b in bad)


# --------------------------------------------------------------------------------------------
# User level through BoundContributions (FnApiRunner, in process)
# --------------------------------------------------------------------------------------------


def test_user_level_count_bounds_contributions_and_scales_the_noise():
    source = NoiseSource.insecure_for_tests(SEED)
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        privacy_unit=PrivacyUnit(id=itemgetter(0), max_contributions=2),
        noise_source=source,
        selection_key=b"k" * 32,
        label="users",
    )
    # 5 users with 1, 3, 5, 7, 9 events: after bounding 1 + 2 + 2 + 2 + 2 = 9 elements.
    events = [(u, j) for u in range(5) for j in range(2 * u + 1)]
    p = beam.Pipeline(runner="FnApiRunner")
    out = p | beam.Create(events) | dp
    agg = dp.aggregate
    assert agg.plan.privacy_unit == "user"
    assert agg.calibrated_mechanism.sensitivity == 2
    scale = agg.calibrated_mechanism.scale(agg.per_release_budget)
    assert scale == Fraction(2)
    noise = int(discrete_laplace(agg.noise_source.stream(("users", "global", 0)), scale, 1)[0])

    def check(actual):
        assert actual == [CountEstimate(9 + noise)]

    assert_that(out, check)
    p.run().wait_until_finish()
    report = dp.explain()
    assert "privacy unit: user" in report and "sensitivity: 2" in report


def test_user_level_count_refuses_multi_pane_triggers():
    from apache_beam.transforms import trigger as tr
    from apache_beam.transforms.window import FixedWindows

    p = beam.Pipeline(runner="FnApiRunner")
    windowed = (
        p
        | beam.Create([(1, 1)])
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        privacy_unit=PrivacyUnit(id=itemgetter(0), max_windows=2),
        windowing=Windowing(max_panes_per_window=2),
    )
    with pytest.raises(ValueError, match="fires once per window"):
        windowed | dp


def test_zcdp_count_runs_and_is_charged_in_rho():
    source = NoiseSource.insecure_for_tests(SEED)
    acc = PrivacyAccountant(PrivacyBudget.zcdp(1.0))
    dp = DPCount(PrivacyBudget.zcdp(0.5), accountant=acc, noise_source=source, label="z")
    p = beam.Pipeline(runner="FnApiRunner")
    out = p | beam.Create(list(range(20))) | dp
    sigma = dp.aggregate.calibrated_mechanism.sigma(dp.aggregate.per_release_budget)
    noise = int(
        discrete_gaussian(dp.aggregate.noise_source.stream(("z", "global", 0)), sigma, 1)[0]
    )

    def check(actual):
        assert actual == [CountEstimate(20 + noise)]

    assert_that(out, check)
    p.run().wait_until_finish()
    assert acc.spent.rho == pytest.approx(0.5)


def test_count_of_read_key_batches_is_the_number_of_rows(tmp_path):
    # ReadKeyBatches emits pyarrow batches of many rows; one row is one element of the dataset,
    # so the released count is rows + one noise draw of sensitivity 1 (not batches + noise).
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_dpsketch.transforms import ReadKeyBatches

    n_rows = 3000
    table = pa.table({"route": [f"R{i % 17}" for i in range(n_rows)]})
    pq.write_table(table, tmp_path / "rows.parquet", row_group_size=250)
    reader = ReadKeyBatches(str(tmp_path / "rows.parquet"), "route")
    dp = DPCount(
        PrivacyBudget.pure(1.0), noise_source=NoiseSource.insecure_for_tests(SEED), label="rows"
    )
    p = beam.Pipeline(runner="FnApiRunner")
    batches = p | reader
    out = batches | dp
    assert dp.aggregate.calibrated_mechanism.sensitivity == 1
    scale = dp.aggregate.calibrated_mechanism.scale(dp.aggregate.per_release_budget)
    assert scale == Fraction(1)
    noise = int(discrete_laplace(dp.aggregate.noise_source.stream(("rows", "global", 0)), 1, 1)[0])

    def check(actual):
        assert actual == [CountEstimate(n_rows + noise)]

    assert_that(out, check)
    p.run().wait_until_finish()


def test_count_of_mixed_batches_and_single_elements():
    from beam_dpsketch.transforms.batching import KeyBatch
    from beam_dpsketch.transforms.count import RowCountCombineFn

    fn = RowCountCombineFn()
    acc = fn.create_accumulator()
    for element in (KeyBatch(["a", "b", "c"]), np.arange(5), "x", ("a", 1), ["not", "a batch"]):
        acc = fn.add_input(acc, element)
    # 3 + 5 keys in batches; a string, a tuple (composite key) and a plain list are one row each.
    assert fn.extract_output(fn.merge_accumulators([acc, 2])) == 3 + 5 + 3 + 2


def test_user_level_count_refuses_batches_of_keys():
    from beam_dpsketch.transforms.batching import KeyBatch

    p = beam.Pipeline(runner="FnApiRunner")
    batches = p | beam.Create([KeyBatch(["a", "b"])]).with_output_types(KeyBatch)
    with pytest.raises(ValueError, match=r"privacy_unit\.id: a user-level DPCount"):
        batches | DPCount(
            PrivacyBudget.pure(1.0),
            privacy_unit=PrivacyUnit(id=lambda r: r),
        )
