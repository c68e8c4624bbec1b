"""Metric functions on hand-computed examples (definitions cited in evaluation/metrics.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from reproduction import datasets as ds
from reproduction import metrics as m


def test_are_and_aae():
    true = [10, 4, 1]
    est = [12, 4, 0]
    # |10-12|/10 = 0.2, 0, |1-0|/1 = 1 -> mean 0.4; absolute 2, 0, 1 -> mean 1.
    assert m.are(true, est) == pytest.approx(0.4)
    assert m.aae(true, est) == pytest.approx(1.0)
    assert m.mae(true, est) == pytest.approx(1.0)
    assert m.max_abs_error(true, est) == 2.0
    with pytest.raises(ValueError, match="positive"):
        m.are([0, 1], [0, 1])
    with pytest.raises(ValueError, match="aligned"):
        m.are([1, 2], [1])
    with pytest.raises(ValueError, match="empty"):
        m.aae([], [])


def test_top_k_versions():
    true = np.array([1, 100, 50, 7, 50])
    est = np.array([3, 90, 60, 7, 40])
    # Top-2 by true count: positions 1 (100) and 2 (50, ties with 4: smaller position first).
    assert m.top_k_indices(true, 2).tolist() == [1, 2]
    assert m.are_top_k(true, est, 2) == pytest.approx((10 / 100 + 10 / 50) / 2)
    assert m.aae_top_k(true, est, 2) == pytest.approx(10.0)
    # Top-3 true = {1, 2, 4}; top-3 estimated = {1, 2, 4} too (90, 60, 40 beat 7 and 3).
    items = np.array([11, 12, 13, 14, 15])
    assert m.top_k_f1(items, true, est, 3) == 1.0
    est2 = np.array([3, 90, 60, 70, 40])  # item 14 climbs into the estimated top-3
    assert m.top_k_f1(items, true, est2, 3) == pytest.approx(2 / 3)


def test_mre_floor_and_positivity():
    assert m.mre([4, 2], [5, 1]) == pytest.approx((1 / 4 + 1 / 2) / 2)
    # docs/algorithms.md#int-a8: RE = |fhat - f| / max(f, 1), zero counts allowed.
    assert m.mre([0, 2], [3, 2], floor=1) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        m.mre([0, 2], [3, 2])


def test_precision_recall_f1_and_conventions():
    prf = m.precision_recall_f1({1, 2, 3, 4}, {2, 4, 6})
    assert prf.precision == pytest.approx(0.5)
    assert prf.recall == pytest.approx(2 / 3)
    assert prf.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    # [WWC24, Section 5], library choice: P = 1 for an empty report, R = 1 for an empty truth, F1 = 0 if P+R = 0.
    assert m.precision_recall_f1([], [1]) == m.PRF(1.0, 0.0, 0.0)
    assert m.precision_recall_f1([1], []) == m.PRF(0.0, 1.0, 0.0)
    assert m.precision_recall_f1([], []) == m.PRF(1.0, 1.0, 1.0)
    assert m.precision_recall_f1([1], [2]).f1 == 0.0
    # numpy scalars and Python ints are the same item.
    assert m.precision_recall_f1(np.array([3, 5]), [3, 5]).f1 == 1.0


def test_rank_errors_on_quantile_points():
    values = np.array([1, 2, 2, 3, 5, 8, 8, 8, 9, 10])
    keys = ds.quantile_points(values, 3)  # r_i = ceil(i*10/4) = 3, 5, 8 -> 2, 5, 8
    assert keys.tolist() == [2, 5, 8]
    true = ds.true_ranks(values, keys)
    assert true.tolist() == [3, 5, 8]
    est = np.array([4, 5, 6])
    assert m.rank_errors(true, est).tolist() == [1, 0, 2]
    assert m.average_rank_error(true, est) == pytest.approx(1.0)


def test_throughput_and_timed():
    assert m.throughput(1_000_000, 0.5) == 2_000_000.0
    with pytest.raises(ValueError):
        m.throughput(10, 0.0)
    result, secs = m.timed(lambda: time.sleep(0.01) or 42)
    assert result == 42 and secs >= 0.009
