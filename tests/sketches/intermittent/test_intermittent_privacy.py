"""Privacy oracles for the intermittent-query sketches ([YKAE, Algorithm 4], derived,
Appendix B items 3, 4 and 6).

The exact privacy-loss check: run a strategy on a random small stream ``X`` with real (seeded,
INSECURE test key) noise and random query batches at public times, record its transcript (the
released cells with ``details=True``, or the released answers), and compute the log-likelihood
ratio of that transcript under ``X`` and under a random neighbour ``X'`` (one element deleted,
every other timestamp unchanged) **exactly** from the discrete Laplace pmf
``P[Z = z] = (1-a)/(1+a) a^|z|``, ``a = exp(-1/scale)``. Exact counts ``g`` under ``X`` and ``X'``
come from independent exact sketches. These checks are deterministic (no false failures).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.intermittent.sketch import UseAndKeepSketch
from beam_dpsketch.sketches.intermittent.strategies import (
    BatchSensitiveSketch,
    StaticCellSketch,
    UseAndForgetCellSketch,
)

SRC = NoiseSource.insecure_for_tests(2024)
EXACT = {"count-sketch": CountSketch, "count-min": CountMinSketch}
TOL = 1e-9


def log_pmf_ratio(r: np.ndarray, g: np.ndarray, g_prime: np.ndarray, scale: Fraction) -> float:
    """``sum ln P[r - g] - ln P[r - g']`` for discrete Laplace(scale): exact up to float rounding."""
    a = math.exp(-1.0 / float(scale))
    norm = math.log((1 - a) / (1 + a))
    lx = np.sum(norm + np.abs(r - g) * math.log(a))
    ly = np.sum(norm + np.abs(r - g_prime) * math.log(a))
    return float(lx - ly)


def random_instance(rng: np.random.Generator, n: int = 40, universe: int = 8, batches: int = 4):
    """Stream (one element per tick 1..n), batch times, query sets and the deleted index."""
    stream = rng.integers(0, universe, n)
    times = np.sort(rng.choice(np.arange(1, n + 1), batches, replace=False))
    queries = [rng.integers(0, universe, rng.integers(1, 5)) for _ in range(batches)]
    return stream, times, queries, int(rng.integers(0, n))


def exact_tables(kind, width, depth, seed, stream, arrival, times):
    """Exact flat tables after all arrivals at or before each batch time."""
    out = []
    for t in times:
        sk = EXACT[kind](width, depth, seed)
        sk.update(stream[arrival <= t])
        out.append(sk.table.reshape(-1).copy())
    return out


def run_cells(sketch, stream, arrival, times, queries, adaptive=False):
    """Feed arrivals between batches and answer each batch; returns the per-batch transcripts."""
    transcript = []
    prev = 0
    for k, t in enumerate(times):
        sketch.update(stream[(arrival > prev) & (arrival <= t)])
        q = queries[k]
        if adaptive and transcript:
            # Adaptive composition: the next batch is chosen from earlier *released* answers.
            last = transcript[-1]["answer"]
            q = np.r_[q, last["keys"][np.argsort(-last["estimates"], kind="stable")[:2]]]
        ans = sketch.answer(q, time=int(t), details=True)
        transcript.append({"answer": {"keys": q, "estimates": ans.estimates}, "ans": ans})
        prev = t
    return transcript


def use_and_keep_llr(transcript, g_x, g_y, scale) -> float:
    """[YKAE, Algorithm 4] identity: per cell, the released increments between uses are Lemma-1 draws."""
    last_r: dict[int, int] = {}
    last_gx: dict[int, int] = {}
    last_gy: dict[int, int] = {}
    rs, gxs, gys = [], [], []
    for k, step in enumerate(transcript):
        ans = step["ans"]
        for c, r in zip(ans.cells.tolist(), ans.cell_values.tolist(), strict=True):
            rs.append(r - last_r.get(c, 0))
            gxs.append(int(g_x[k][c]) - last_gx.get(c, 0))
            gys.append(int(g_y[k][c]) - last_gy.get(c, 0))
            last_r[c], last_gx[c], last_gy[c] = r, int(g_x[k][c]), int(g_y[k][c])
    return log_pmf_ratio(np.array(rs), np.array(gxs), np.array(gys), scale)


@pytest.mark.parametrize("kind", ["count-sketch", "count-min"])
@pytest.mark.parametrize("adaptive", [False, True])
def test_use_and_keep_privacy_loss_at_most_epsilon(kind, adaptive):
    # Appendix B item 4 / R10: |LLR| <= eps + 1e-9 on every transcript, and the bound is reached.
    width, depth, eps = 4, 3, Fraction(1, 2)
    rng = np.random.default_rng(11 + adaptive)
    worst = 0.0
    for trial in range(150):
        stream, times, queries, j = random_instance(rng)
        arrival = np.arange(1, stream.size + 1)
        keep = np.ones(stream.size, dtype=bool)
        keep[j] = False
        sk = UseAndKeepSketch(
            width,
            depth,
            PrivacyBudget.pure(float(eps)),
            noise_source=SRC,
            release_prefix=("llr", kind, adaptive, trial),
            kind=kind,
            seed=trial,
        )
        transcript = run_cells(sk, stream, arrival, times, queries, adaptive)
        g_x = exact_tables(kind, width, depth, trial, stream, arrival, times)
        g_y = exact_tables(kind, width, depth, trial, stream[keep], arrival[keep], times)
        llr = use_and_keep_llr(transcript, g_x, g_y, sk.noise_scale)
        assert abs(llr) <= float(eps) + TOL, (trial, llr)
        worst = max(worst, abs(llr))
    assert worst == pytest.approx(float(eps), abs=TOL)


def test_neighbours_differ_in_exactly_d_cells():
    # [YKAE, Section III-A]: deleting one element changes d cells by -s_i(x*) (CS) or -1 (CM).
    rng = np.random.default_rng(3)
    stream = rng.integers(0, 50, 200)
    for cls in EXACT.values():
        full = cls(16, 5, 7).update(stream).table
        gone = cls(16, 5, 7).update(np.delete(stream, 17)).table
        diff = full - gone
        assert np.count_nonzero(diff) == 5 and np.all(np.abs(diff).sum(axis=1) == 1)


def test_use_and_forget_cell_privacy_loss():
    # Appendix B item 4 for D2: fresh draws at per-use budgets (eps/d)(1-eta)eta^(r-1).
    width, depth, eps = 4, 3, Fraction(1)
    rng = np.random.default_rng(5)
    for trial in range(100):
        stream, times, queries, j = random_instance(rng, batches=5)
        arrival = np.arange(1, stream.size + 1)
        keep = np.ones(stream.size, dtype=bool)
        keep[j] = False
        sk = UseAndForgetCellSketch(
            width,
            depth,
            PrivacyBudget.pure(float(eps)),
            eta=0.5,
            noise_source=SRC,
            release_prefix=("d2", trial),
            seed=trial,
        )
        uses = np.zeros(width * depth, dtype=np.int64)
        transcript = run_cells(sk, stream, arrival, times, queries)
        g_x = exact_tables("count-sketch", width, depth, trial, stream, arrival, times)
        g_y = exact_tables("count-sketch", width, depth, trial, stream[keep], arrival[keep], times)
        llr = 0.0
        for k, step in enumerate(transcript):
            ans = step["ans"]
            uses[ans.cells] += 1
            for u in np.unique(uses[ans.cells]).tolist():
                sel = uses[ans.cells] == u
                cells = ans.cells[sel]
                llr += log_pmf_ratio(
                    ans.cell_values[sel], g_x[k][cells], g_y[k][cells], sk.use_scale(u)
                )
        assert abs(llr) <= sk.epsilon_spent() + TOL <= float(eps) + TOL, (trial, llr)


def brute_force_m_q(q: np.ndarray, width: int, depth: int, seed: int) -> int:
    """Eq. 3 with columns limited to those hit by Q ([YKAE, Section III-B], docs/algorithms.md#int-e3): tests only."""
    q = np.unique(q)
    b = row_buckets(*hash_keys(q, seed), depth, width)
    choices = [sorted(set(row.tolist())) for row in b]
    return max(
        int(np.sum(np.any(b == np.array(js)[:, None], axis=0)))
        for js in itertools.product(*choices)
    )


def test_m_q_bounds_brute_force():
    # Appendix B item 3: m_Q <= min(n_Q, mhat_Q), and m_Q = n_Q when n_Q <= d.
    from beam_dpsketch.sketches.intermittent.sketch import sensitive_query_bound

    rng = np.random.default_rng(8)
    for trial in range(200):
        depth = int(rng.choice([1, 3, 5]))
        q = rng.integers(0, 1000, rng.integers(1, 9))
        m_q = brute_force_m_q(q, 6, depth, trial)
        assert m_q <= sensitive_query_bound(q, 6, depth, trial)
        if np.unique(q).size <= depth:
            assert m_q == np.unique(q).size


def test_batch_sensitive_privacy_loss():
    # S3: one batch with Lap(mtilde/eps) on each distinct answer; |LLR| <= eps (Appendix B 4).
    width, depth, eps = 6, 3, Fraction(1)
    rng = np.random.default_rng(9)
    worst = 0.0
    for trial in range(200):
        stream, _, _, j = random_instance(rng, n=30)
        q = np.unique(rng.integers(0, 8, rng.integers(1, 7)))
        sk = BatchSensitiveSketch(
            width,
            depth,
            PrivacyBudget.pure(float(eps)),
            noise_source=SRC,
            release_prefix=("s3", trial),
            seed=trial,
        )
        sk.update(stream)
        released = sk.answer(q).estimates
        fx = CountSketch(width, depth, trial).update(stream).estimate(q)
        fy = CountSketch(width, depth, trial).update(np.delete(stream, j)).estimate(q)
        b = row_buckets(*hash_keys(q, trial), depth, width)
        mtilde = min(q.size, sum(int(np.bincount(row, minlength=width).max()) for row in b))
        changed = int(np.count_nonzero(fx != fy))
        assert changed <= brute_force_m_q(q, width, depth, trial) <= mtilde
        llr = log_pmf_ratio(released, fx, fy, Fraction(mtilde) / eps)
        assert abs(llr) <= float(eps) * changed / mtilde + TOL
        worst = max(worst, abs(llr))
    assert worst > 0.5 * float(eps)


@pytest.mark.parametrize("kind", ["count-sketch", "count-min"])
def test_single_batch_use_and_keep_equals_static_lazy(kind):
    # Appendix B item 6: with one batch, D3 is S4-lazy; both take the same keyed draws.
    data = np.random.default_rng(4).integers(0, 300, 5000)
    q = np.arange(0, 300, 7)
    d3 = UseAndKeepSketch(
        32, 5, PrivacyBudget.pure(0.3), noise_source=SRC, release_prefix="same", kind=kind
    )
    s4 = StaticCellSketch(
        32, 5, PrivacyBudget.pure(0.3), noise_source=SRC, release_prefix="same", kind=kind
    )
    d3.update(data)
    s4.update(data)
    a, b = d3.answer(q, details=True), s4.answer(q, details=True)
    np.testing.assert_array_equal(a.estimates, b.estimates)
    np.testing.assert_array_equal(a.cell_values, b.cell_values)
    # A second batch differs: D3 adds fresh noise to the kept value, S4 reuses it.
    a2, b2 = d3.answer(q, details=True), s4.answer(q, details=True)
    np.testing.assert_array_equal(b2.cell_values, b.cell_values)
    assert not np.array_equal(a2.cell_values, a.cell_values)
