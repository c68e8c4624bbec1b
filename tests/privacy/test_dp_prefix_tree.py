"""Privacy of the released prefix tree (DPTopKeys' only noisy release).

The release is the noisy tree; extraction is post-processing of it. Two checks on worst-case
neighbours (docs/algorithms.md#top-keys):

* **Deterministic sensitivity.** For keys of every kind and length (short, exactly
  ``max_key_bytes``, longer and truncated; str, bytes, int, tuple), adding one element changes
  at most one counter per row of each of the ``L + 1`` levels, by 1: the whole tree moves by at
  most ``(L + 1) d`` in L1 and ``sqrt((L + 1) d)`` in L2. Replacing one element by another moves
  each level by at most the replacement sensitivity of one linear sketch. The per-level
  calibration equals the Gaussian mechanism on the whole tree (same sigma on every counter).
* **Statistical audit** (the idiom of ``tests/privacy/test_dp_quantile_tree.py``): ``X`` holds
  the key ``"a"`` once and its neighbour ``X'`` is empty, in a tree with ``L = 2`` (3 levels)
  and one row. Both are released many times with fresh noise; the event ``S = {sum over the
  levels of the released count of "a"'s node >= TAU}`` is the worst case for the composition
  over levels. The check rejects only when Clopper-Pearson bounds prove
  ``P_X(S) > e^eps P_X'(S)`` at confidence ``1 - 5e-7`` per side, and it **must** reject the
  mutation that calibrates the noise for one level instead of ``L + 1`` (every level spends the
  whole ``eps``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privacy_audit import cp_lower, cp_upper

from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.budget import approx_to_zcdp
from beam_dpsketch.sketches.linear.calibration import linear_sensitivity
from beam_dpsketch.sketches.prefix_tree import PrefixTreeSketch, PrivatePrefixTree

SRC = NoiseSource.insecure_for_tests(2917)
TRIALS = 6000
ALPHA = 2.5e-7
TAU = 4

KEYS = ["", "a", "ab", "abcdefg", "abcdefghijklmnop", "é" * 9, b"", b"\x00\xff", 0, -1, 2**70]
KEYS += [("a", 1), "z" * 40]


def _tables(tree: PrefixTreeSketch) -> np.ndarray:
    return np.stack([s.table for s in tree.sketches]).astype(np.float64)


@pytest.mark.parametrize("kind", ["count-sketch", "count-min"])
@pytest.mark.parametrize("max_key_bytes", [3, 9, 16])
def test_one_element_changes_one_counter_per_row_and_level(kind, max_key_bytes):
    d, w = 4, 8  # a narrow table: collisions inside a row are frequent, and still harmless
    base = ["a", "abc", "b", 7, b"xy", "abcdefghijklmnopq"] * 3

    def make(extra):
        return PrefixTreeSketch(w, d, max_key_bytes, seed=11, kind=kind).update(base + extra)

    levels = max_key_bytes + 1
    for x in KEYS:
        diff = _tables(make([x])) - _tables(make([]))
        per_level = np.abs(diff).reshape(levels, -1)
        reached = min(len(encode_key(x)) + 1, levels)
        # One counter per row of each level the key reaches, by exactly 1; nothing deeper.
        assert (per_level.sum(axis=1)[:reached] == d).all()
        assert per_level[reached:].sum() == 0
        assert np.abs(diff).sum() <= levels * d
        assert math.sqrt((diff * diff).sum()) <= math.sqrt(levels * d) + 1e-12
        for y in KEYS[::3]:
            swap = _tables(make([x])) - _tables(make([y]))
            for level in range(levels):
                sl = swap[level]
                l2 = math.sqrt((sl * sl).sum())
                assert l2 <= linear_sensitivity(kind, "replace", d) + 1e-12
                assert np.abs(sl).sum() <= linear_sensitivity(kind, "replace", d, "l1")


@pytest.mark.parametrize("budget", [PrivacyBudget.zcdp(0.3), PrivacyBudget.approx(1.0, 1e-6)])
def test_level_calibration_is_the_gaussian_mechanism_on_the_whole_tree(budget):
    tree = PrefixTreeSketch(64, 5, 12)
    cal = PrivatePrefixTree.calibrate(tree, budget, neighbouring="add_remove")
    assert cal.noise == "discrete_gaussian"
    rho = budget.rho if budget.kind == "zcdp" else approx_to_zcdp(1.0, 1e-6)
    # sigma = sqrt((L + 1) d) / sqrt(2 rho): the L2 sensitivity of all 13 levels together.
    assert cal.scale == pytest.approx(math.sqrt(13 * 5) / math.sqrt(2 * rho), rel=1e-9)
    assert 13 * cal.rho <= rho


def _sums(eps: float, tag: str, levels_charged: int) -> tuple[np.ndarray, np.ndarray]:
    """Released sum over the levels of ``"a"``'s node, over TRIALS releases of X and of X'.

    ``levels_charged`` is the number of levels the budget is divided by: the correct release
    divides by ``L + 1 = 3``; the mutation divides by 1 (noise for one level).
    """
    budget = PrivacyBudget.pure(eps * 3 / levels_charged)
    x = PrefixTreeSketch(8, 1, 2, seed=5).update(["a"])
    xp = PrefixTreeSketch(8, 1, 2, seed=5)
    path = encode_key("a")  # b"a\x03": 2 bytes, so it reaches all 3 levels (END at level 3)
    nodes = [path[:1], path[:2], path]
    out = []
    for j, exact in enumerate((x, xp)):
        sums = np.empty(TRIALS)
        for i in range(TRIALS):
            rel = PrivatePrefixTree.release(exact, budget, SRC.stream((tag, j, i)))
            assert rel.calibration.noise == "discrete_laplace"
            sums[i] = sum(rel.node_estimates(lv + 1, [nodes[lv]])[0] for lv in range(3))
        out.append(sums)
    return out[0], out[1]


def _violation(sx: np.ndarray, sxp: np.ndarray, eps: float) -> bool:
    def proves(k1: int, k2: int) -> bool:
        return cp_lower(k1, TRIALS, ALPHA) > math.exp(eps) * cp_upper(k2, TRIALS, ALPHA)

    in_x, in_xp = int((sx >= TAU).sum()), int((sxp >= TAU).sum())
    return proves(in_x, in_xp) or proves(TRIALS - in_xp, TRIALS - in_x)


def test_audit_of_the_whole_tree_calibration_on_neighbours():
    eps = 1.0
    assert not _violation(*_sums(eps, "tree", 3), eps)
    # Mutation: noise calibrated for one level (each of the 3 levels spends the whole eps).
    assert _violation(*_sums(eps, "one-level", 1), eps)
