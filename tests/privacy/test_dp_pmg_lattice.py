"""Privacy of the sequential (PMG) release on the lattice, on worst-case neighbours.

:func:`~beam_dpsketch.sketches.misra_gries.pmg` (discrete noise, default) runs
Algorithm 2 of Lebeda and Tetek on ``g`` times the counters, with both draws of scale ``g/eps``,
and reads the values in units of ``1/g`` (docs/algorithms.md#mg-lattice). Neighbouring streams
change the sketch in one of two ways ([LT23, Lemma 5]): one counter by one count (``g`` lattice
steps) or every counter by one count. Checked here:

* deterministic: the scale in lattice steps is ``g`` times the integer form's, the threshold is
  ``g + 2t`` with ``6 P[Geo2 >= t] <= delta`` at that scale, and every released value is a
  multiple of ``1/g``;
* statistical, on both worst cases: half-lines of the released value of the changed key (one
  counter changed) and of the mean released value (all counters changed), ``R`` seeded releases
  per side; :func:`privacy_audit.epsilon_lower_bound` (Clopper-Pearson) over all events and
  directions must not exceed ``epsilon``, at total failure probability ``1e-6``. The same check
  flags the broken mechanism that scales the counts by ``g`` but keeps the integer form's noise
  scale ``1/eps`` (noise ``g`` times too small).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.sketches.misra_gries import pmg
from beam_dpsketch.sketches.misra_gries.pmg_release import pmg_noisy_sketch, pmg_parameters
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.tails import geometric_union_tail

SRC = NoiseSource.insecure_for_tests(2612)
EPS, DELTA, K, C, R = 1.0, 1e-6, 8, 1000, 1500
G = 16  # noise_lattice(1 / EPS)
OFFSETS = (-1.5, -0.5, 0.5, 1.5, 2.5)


def stream(*rid):
    return SRC.stream(("test_dp_pmg_lattice", *rid))


def correct(sk: MisraGries, st) -> list:
    return list(pmg(sk, PrivacyBudget.approx(EPS, DELTA), st).items)


def old_scale(sk: MisraGries, st) -> list:
    """Broken: ``g`` times the counts, but noise of the integer form's scale ``1/eps``."""
    _, tau, _ = pmg_parameters(
        EPS, DELTA, noise="discrete_laplace", threshold_form="union_bound", draws=6, lattice=G
    )
    scale = discrete_laplace_scale(1, EPS)
    pairs = pmg_noisy_sketch(sk, "discrete_laplace", scale, tau, st, lattice=G)
    return [(key, y / G) for key, y in pairs]


def one_counter() -> tuple[MisraGries, MisraGries, Callable[[list], float]]:
    """Key 0 counted once more; no decrement (``k > `` distinct keys)."""
    s_prime = MisraGries(K + 2).update(list(range(K)), [C] * K)
    s = s_prime.copy().update([0])
    return s, s_prime, lambda items: float(dict(items)[0])


def all_counters() -> tuple[MisraGries, MisraGries, Callable[[list], float]]:
    """One more element of a new key: a decrement, every counter one lower."""
    s_prime = MisraGries(K).update(list(range(K)), [C] * K)
    s = s_prime.copy().update([K + 99])
    assert s.d == 1
    return s, s_prime, lambda items: float(np.mean([v for _, v in items]))


def max_epsilon_evidence(case, release, tag: str) -> float:
    s, s_prime, statistic = case()
    sides = []
    for name, sk in (("S", s), ("S'", s_prime)):
        sides.append(np.asarray([statistic(release(sk, stream(tag, name, r))) for r in range(R)]))
    a, b = sides
    events = []
    for x in OFFSETS:
        events += [lambda v, x=x: v >= C + x, lambda v, x=x: v < C + x]
    failure = FAILURE / (2 * len(events) * 2)  # every event, both directions, both cases
    worst = 0.0
    for event in events:
        ha, hb = int(event(a).sum()), int(event(b).sum())
        worst = max(worst, epsilon_lower_bound(ha, R, hb, R, DELTA, failure))
        worst = max(worst, epsilon_lower_bound(hb, R, ha, R, DELTA, failure))
    return worst


def test_lattice_parameters_are_the_integer_form_scaled():
    rel = pmg(MisraGries(K).update([1, 1, 2]), PrivacyBudget.approx(EPS, DELTA), stream("params"))
    assert rel.details["lattice"] == G
    scale, tau, _ = pmg_parameters(
        EPS, DELTA, noise="discrete_laplace", threshold_form="union_bound", draws=6, lattice=G
    )
    assert scale == G * discrete_laplace_scale(1, EPS)
    t = geometric_union_tail(scale, DELTA, 6)
    assert tau == G + 2 * t and rel.threshold == tau / G
    a = math.exp(-1.0 / float(scale))
    assert 6 * a**t / (1 + a) <= DELTA
    assert all(float(v * G).is_integer() for _, v in rel.items)


@pytest.mark.parametrize("case", [one_counter, all_counters], ids=["one-counter", "all-counters"])
def test_lattice_release_is_private_on_worst_case_neighbours(case):
    assert max_epsilon_evidence(case, correct, "ok") <= EPS


@pytest.mark.parametrize("case", [one_counter, all_counters], ids=["one-counter", "all-counters"])
def test_noise_at_the_integer_scale_on_scaled_counts_is_flagged(case):
    assert max_epsilon_evidence(case, old_scale, "broken") > EPS
