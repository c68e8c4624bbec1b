"""Privacy of the released quantile tree with a larger branching factor and coarse leaves.

Two checks on worst-case neighbours (docs/algorithms.md#lin-wide-range):

* **Deterministic sensitivity.** For several layouts (the paper's binary tree, branching 8, 16
  and 32, leaves of 1 or ``2**k`` values, sketched levels under exact ones) and for every value
  ``x`` at the edges of the domain, of leaves and of top nodes (plus random ones), adding ``x``
  (add/remove) or replacing one value by another (replace) changes every level's table by at
  most the sensitivity its calibration uses, in L1 and in L2, and the levels' budget shares add
  up to at most the budget.
* **Statistical audit** (the idiom of ``tests/sketches/linear/test_dp_linear_privacy.py``):
  ``X`` holds the value 9 twice and its neighbour ``X'`` once, in a tree of branching 8 over
  ``[0, 63]`` (two exact levels). Both are released many times with fresh noise; the event
  ``S = {sum over the levels of the released count of 9's node >= TAU}`` is the worst case for
  sequential composition (its probability ratio tends to ``e^eps`` with the correct split).
  The check rejects only when the Clopper-Pearson bounds prove ``P_X(S) > e^eps P_X'(S) +
  delta`` at confidence ``1 - 5e-7``; it is run for a pure budget and for an ``(eps, delta)``
  budget spent as Laplace noise (``approx_noise="auto"``), and it **must** reject the mutation
  that gives every level the whole ``eps`` (shares not divided by the number of levels).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privacy_audit import cp_lower, cp_upper

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch

SRC = NoiseSource.insecure_for_tests(2611)
TRIALS = 8000
ALPHA = 2.5e-7
TAU = 5

LAYOUTS = [
    # (lower, upper, width, depth, branching, exact_nodes, leaf_bits)
    (0, 255, 16, 3, 2, None, 0),  # the paper's binary tree, sketched lower levels
    (0, 1023, 16, 3, 32, 1 << 15, 0),  # every level exact, one-value leaves
    (-5000, 20_000, 16, 3, 16, 1 << 8, 0),  # sketched leaves under exact upper levels
    (874_000_000, 894_000_000, 64, 3, 32, 1 << 15, 10),  # coarse leaves, all exact
    (0, 4095, 8, 2, 8, 64, 3),  # coarse leaves and sketched levels
]


def _edge_values(sketch: DyadicCountSketch, rng: np.random.Generator) -> np.ndarray:
    """Domain ends, both sides of every leaf and top-node boundary nearby, random values."""
    lo, hi = sketch.lower, sketch.upper
    edges = [lo, hi, lo + 1, hi - 1]
    for shift in (sketch.shifts[0], sketch.shifts[-1]):
        for k in (1, 2, 3):
            b = lo + (k << shift)
            edges += [b - 1, b]
    vals = np.array([v for v in edges if lo <= v <= hi], dtype=np.int64)
    return np.concatenate([vals, rng.integers(lo, hi + 1, 20)])


def _level_deltas(sketch_a: DyadicCountSketch, sketch_b: DyadicCountSketch, level: int):
    diff = (sketch_a.level_table(level) - sketch_b.level_table(level)).astype(np.float64)
    return float(np.abs(diff).sum()), float(np.sqrt((diff * diff).sum()))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_every_level_changes_by_at_most_its_calibrated_sensitivity(layout, relation):
    lower, upper, width, depth, branching, exact_nodes, leaf_bits = layout
    rng = np.random.default_rng(5)

    def make(values):
        return DyadicCountSketch(
            lower,
            upper,
            width,
            depth,
            3,
            branching=branching,
            exact_nodes=exact_nodes,
            leaf_bits=leaf_bits,
        ).update(np.asarray(values, dtype=np.int64))

    base = rng.integers(lower, upper + 1, 50)
    for budget in (PrivacyBudget.pure(1.0), PrivacyBudget.zcdp(0.5)):
        cals = PrivateDyadicCountSketch.calibrate(make(base), budget, neighbouring=relation)
        shares = [c.epsilon if c.rho is None else c.rho for c in cals]
        total = budget.epsilon if budget.is_pure else budget.rho
        assert sum(shares) <= total  # sequential composition over the levels
        values = _edge_values(make(base), rng)
        for x in values:
            for y in values[::7]:
                d = make(np.append(base, x))
                if relation == "add_remove":
                    d2 = make(base)
                else:
                    d2 = make(np.append(base, y))
                for j, cal in enumerate(cals):
                    l1, l2 = _level_deltas(d, d2, j)
                    bound = cal.sensitivity
                    got = l1 if cal.rho is None else l2
                    assert got <= bound + 1e-9, (j, int(x), int(y), got, bound)


def _event_counts(budget: PrivacyBudget, tag: str) -> tuple[int, int, int, int]:
    """``(#S under X, #S under X', #S^c under X', #S^c under X)`` over TRIALS releases each."""

    def make(values):
        return DyadicCountSketch(0, 63, 8, 2, 0, branching=8, exact_nodes=64).update(values)

    x, xp = make([9, 9]), make([9])
    assert x.levels == 2 and x.n_sketched == 0
    sums = []
    for j, exact in enumerate((x, xp)):
        out = np.empty(TRIALS, dtype=np.float64)
        for i in range(TRIALS):
            rel = PrivateDyadicCountSketch.release(
                exact, budget, SRC.stream((tag, j, i)), approx_noise="auto"
            )
            assert rel.noise == "discrete_laplace"
            out[i] = sum(rel.node_estimates(k, [9 >> rel.shifts[k]])[0] for k in range(2))
        sums.append(out)
    in_x, in_xp = int((sums[0] >= TAU).sum()), int((sums[1] >= TAU).sum())
    return in_x, in_xp, TRIALS - in_xp, TRIALS - in_x


def _violation(counts: tuple[int, int, int, int], eps: float, delta: float) -> bool:
    s_x, s_xp, c_xp, c_x = counts

    def proves(k1: int, k2: int) -> bool:
        return cp_lower(k1, TRIALS, ALPHA) > math.exp(eps) * cp_upper(k2, TRIALS, ALPHA) + delta

    return proves(s_x, s_xp) or proves(c_xp, c_x)


@pytest.mark.parametrize("kind", ["pure", "approx"])
def test_audit_of_the_level_split_on_neighbours(kind):
    eps, delta = 1.0, (0.0 if kind == "pure" else 1e-6)

    def budget(e: float) -> PrivacyBudget:
        return PrivacyBudget.pure(e) if kind == "pure" else PrivacyBudget.approx(e, delta)

    assert not _violation(_event_counts(budget(eps), kind), eps, delta)
    # Mutation: every level spends the whole eps (two levels: 2 eps in total) while eps is
    # claimed. The audit must catch it, which shows it has power.
    assert _violation(_event_counts(budget(2 * eps), kind + "-unsplit"), eps, delta)
