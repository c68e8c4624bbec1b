"""Privacy smoke tests and mutation tests on neighbouring inputs (docs/algorithms.md#mg-oracles).

For neighbouring streams ``S ~ S'`` (one element removed) each mechanism runs ``R`` times per side
with distinct release ids, and for every event ``E`` of a small family (half-lines of a scalar
statistic, or "key x released") and both directions the test checks
``P[M(S) in E] <= e^eps P[M(S') in E] + delta`` with exact Clopper-Pearson bounds: it flags a
violation only if the lower confidence bound of the left side exceeds ``e^eps`` times the upper
bound of the right side plus ``delta``. Each bound fails with probability ``alpha = 1e-6 / (2 *
#checks)``, so a correct (eps, delta)-DP mechanism fails a test with probability below ``1e-6``.

These tests catch gross bugs; they do not prove privacy. To show that they can fail, each hard
case is also run on a deliberately broken mechanism (the mutants of docs/algorithms.md#mg-oracles: no shared noise / eta per
key, halved noise, a threshold that is too low, zero-count keys dropped, pure-DP noise only on
stored keys), which must be flagged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from privacy_audit import cp_lower, cp_upper

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import Universe, pmg, postprocess, pure_pp
from beam_dpsketch.sketches.misra_gries.pmg_release import pmg_noisy, pmg_parameters
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.universe import pure_top_k

SRC = NoiseSource.insecure_for_tests(4242)
TOTAL_ALPHA = 1e-6


def stream(*rid):
    return SRC.stream(("test_dp_misragries_privacy", *rid))


def dp_violations(
    side_a: np.ndarray,
    side_b: np.ndarray,
    events: dict[str, Callable[[np.ndarray], np.ndarray]],
    eps: float,
    delta: float,
) -> list[str]:
    """Events (either direction) with statistical evidence against (eps, delta)-DP."""
    checks = 2 * len(events)
    alpha = TOTAL_ALPHA / (2 * checks)
    bad = []
    for name, event in events.items():
        ha, hb = int(np.sum(event(side_a))), int(np.sum(event(side_b)))
        na, nb = len(side_a), len(side_b)
        if cp_lower(ha, na, alpha) > math.exp(eps) * cp_upper(hb, nb, alpha) + delta:
            bad.append(f"{name}: {ha}/{na} vs {hb}/{nb}")
        if cp_lower(hb, nb, alpha) > math.exp(eps) * cp_upper(ha, na, alpha) + delta:
            bad.append(f"{name} (reverse): {hb}/{nb} vs {ha}/{na}")
    return bad


def half_lines(points):
    events = {}
    for t in points:
        events[f">= {t}"] = lambda s, t=t: s >= t
        events[f"< {t}"] = lambda s, t=t: s < t
    return events


# --------------------------------------------------------------------------------------------
# Case D (all counters -1): the shared draw is what hides it (docs/algorithms.md#mg-oracles test 1)
# --------------------------------------------------------------------------------------------

K_D, C_D, R_D, EPS_D, DELTA_D = 40, 1000, 1200, 1.0, 1e-6


def _case_d_sketches():
    s_prime = MisraGries(K_D).update(list(range(K_D)), [C_D] * K_D)
    s = s_prime.copy().update([999])  # one extra element: a decrement, every counter -1
    assert s.d == 1 and all(c == C_D - 1 for _, c in s.slots())
    return s, s_prime


def _mean_released(sketch, tag, release):
    out = np.empty(R_D)
    for r in range(R_D):
        items = release(sketch, stream("caseD", tag, r))
        assert len(items) == K_D  # every key is far above the threshold
        out[r] = np.mean([v for _, v in items])
    return out


CASE_D_EVENTS = half_lines([C_D + x for x in (-2.5, -1.5, -0.5, 0.5, 1.5)])


def test_case_d_pmg_passes_and_missing_shared_noise_fails():
    s, s_prime = _case_d_sketches()
    scale, tau, _ = pmg_parameters(
        EPS_D, DELTA_D, noise="discrete_laplace", threshold_form="union_bound", draws=6
    )

    def correct(sk, st):
        return pmg(sk, PrivacyBudget.approx(EPS_D, DELTA_D), st).items

    def eta_per_key(sk, st):
        return pmg_noisy(sk.slots(), K_D, "discrete_laplace", scale, tau, st, per_key_eta=True)

    def halved(sk, st):
        return pmg_noisy(sk.slots(), K_D, "discrete_laplace", scale / 2, tau, st)

    for name, mech, should_pass in [
        ("correct", correct, True),
        ("eta-per-key", eta_per_key, False),
        ("noise-halved", halved, False),
    ]:
        a = _mean_released(s, (name, "S"), mech)
        b = _mean_released(s_prime, (name, "S'"), mech)
        bad = dp_violations(a, b, CASE_D_EVENTS, EPS_D, DELTA_D)
        assert (not bad) == should_pass, (name, bad)


def test_case_d_laplace_pmg_passes():
    s, s_prime = _case_d_sketches()

    def correct(sk, st):
        return pmg(sk, PrivacyBudget.approx(EPS_D, DELTA_D), st, noise="laplace").items

    a = _mean_released(s, ("lap", "S"), correct)
    b = _mean_released(s_prime, ("lap", "S'"), correct)
    assert not dp_violations(a, b, CASE_D_EVENTS, EPS_D, DELTA_D)


# --------------------------------------------------------------------------------------------
# Zero-count keys dropped with PMG's threshold (docs/algorithms.md#mg-oracles test 2)
# --------------------------------------------------------------------------------------------


def test_zero_key_dropping_mutant_fails():
    # S' = k distinct keys once each; S = S' plus one key, which decrements every counter to 0.
    # The variant keeps the k zero-count keys (all noised, eligible); the mutant (standard MG with
    # PMG's 6-draw threshold) drops them, so nothing can be released from S while from S' some
    # count-1 key passes with probability well above delta. delta = 0.3 makes this measurable.
    k, eps, delta, runs = 1000, 1.0, 0.3, 800
    s_prime = MisraGries(k).update(list(range(k)))
    s = s_prime.copy().update([10**6])
    assert all(c == 0 for _, c in s.slots())
    scale, tau, _ = pmg_parameters(
        eps, delta, noise="discrete_laplace", threshold_form="union_bound", draws=6
    )
    events = {"any key released": lambda x: x > 0}

    def any_released(sk, tag, drop_zero):
        out = np.empty(runs)
        for r in range(runs):
            st = stream("zero-drop", tag, r)
            if drop_zero:
                slots = list(sk.to_dict().items())
                out[r] = len(pmg_noisy(slots, k, "discrete_laplace", scale, tau, st))
            else:
                out[r] = len(pmg(sk, PrivacyBudget.approx(eps, delta), st))
        return out

    correct_s = any_released(s, "S", False)
    correct_sp = any_released(s_prime, "S'", False)
    assert not dp_violations(correct_s, correct_sp, events, eps, delta)
    # S' has no zero-count key, so the mutant behaves like the correct mechanism there.
    mutant_s = any_released(s, "S-mutant", True)
    assert not mutant_s.any()
    assert dp_violations(mutant_s, correct_sp, events, eps, delta)


# --------------------------------------------------------------------------------------------
# A new key in a zero slot (Case I): the threshold hides it ([LT23, Algorithm 2] Lemma 5)
# --------------------------------------------------------------------------------------------


def test_new_key_threshold_and_too_low_threshold_mutant():
    k, eps, delta, runs = 2, 1.0, 0.01, 2000
    s_prime = MisraGries(k).update(["a"] * 50)
    s = s_prime.copy().update(["b"])  # "b" takes the dummy slot with count 1
    assert dict(s.slots())["b"] == 1
    events = {"b released": lambda x: x > 0}
    scale, _, _ = pmg_parameters(
        eps, delta, noise="discrete_laplace", threshold_form="union_bound", draws=6
    )

    def b_released(sk, tag, threshold=None):
        out = np.empty(runs)
        for r in range(runs):
            st = stream("new-key", tag, r)
            if threshold is None:
                items = pmg(sk, PrivacyBudget.approx(eps, delta), st).as_dict()
            else:
                items = dict(pmg_noisy(sk.slots(), k, "discrete_laplace", scale, threshold, st))
            out[r] = "b" in items
        return out

    sp = b_released(s_prime, "S'")
    assert not sp.any()
    assert not dp_violations(b_released(s, "S"), sp, events, eps, delta)
    assert dp_violations(b_released(s, "S-low", threshold=2), sp, events, eps, delta)


# --------------------------------------------------------------------------------------------
# Pure DP over a declared universe ([LT23, Section 6])
# --------------------------------------------------------------------------------------------


def test_pure_pp_passes_and_noise_on_stored_keys_only_fails():
    # k = 2, U = {0..4}: cbar(S) = {0: 4/3, 1: 1/3}, cbar(S') = {0: 5/3} (key 1 drops out).
    k, eps, runs = 2, 1.0, 1500
    s = MisraGries(k).update([0, 0, 0, 1, 1])
    s_prime = MisraGries(k).update([0, 0, 0, 1])
    assert postprocess(s).scaled_counts() == {0: 4, 1: 1}
    assert postprocess(s_prime).scaled_counts() == {0: 5}
    universe = Universe.from_keys(range(5))
    events = {f"{x} released": (lambda v, x=x: v[:, x] > 0) for x in range(3)}

    def released(sk, tag, stored_only):
        out = np.zeros((runs, 5))
        for r in range(runs):
            st = stream("pure", tag, r)
            if stored_only:
                values = postprocess(sk).scaled_counts()
                scale = Fraction(2 * (k + 1)) / Fraction(eps)
                top, _ = pure_top_k(
                    values, Universe.from_keys(values), k, scale, st, capacity=k, method="enumerate"
                )
                keys = [x for x, _ in top]
            else:
                keys = pure_pp(sk, universe, PrivacyBudget.pure(eps), st).keys()
            assert len(keys) == min(k, len(keys)) and len(keys) <= k
            out[r, keys] = 1
        return out

    assert not dp_violations(
        released(s, "S", False), released(s_prime, "S'", False), events, eps, 0.0
    )
    assert dp_violations(
        released(s, "S-m", True), released(s_prime, "S'-m", True), events, eps, 0.0
    )
