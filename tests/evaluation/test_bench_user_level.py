"""The user-level benchmark's data and bounding are what its text says they are."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench():
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks import bench_user_level

    return bench_user_level


def test_ratings_have_the_stated_shape(bench):
    users = bench.ratings()
    assert len(users) == bench.USERS
    assert all(len(np.unique(u)) == len(u) for u in users)  # distinct items per user
    assert all(u.min() >= 0 and u.max() < bench.ITEMS for u in users)
    assert 90 <= np.mean([len(u) for u in users]) <= 125  # "mean about 106"


def test_bounding_keeps_at_most_m_of_each_users_items(bench):
    users = bench.ratings()
    for m in (1, 5):
        units = bench.bounded(users, m, seed=m)
        for items, unit in zip(users, units, strict=True):
            assert len(unit) == min(m, len(items)) and set(unit) <= set(items.tolist())


def test_the_user_level_default_releases_items_of_the_data(bench):
    users = bench.ratings()
    units = bench.bounded(users, 5, seed=5)
    released = bench.release("user-exact", 5, 4.0, units, trial=0)
    assert released and set(released) <= set(range(bench.ITEMS))


@pytest.mark.parametrize("m", [5, 20])
def test_bounded_memory_select_then_count_keeps_half_of_user_exacts_keys(bench, m):
    # The goal at eps 4: memory bounded by k (hashed selection sketch, then at most k exact
    # counters), at least half the keys of user-exact, whose memory grows with the items.
    users = bench.ratings()
    units = bench.bounded(users, m, seed=m)
    ours = [len(bench.release("select-then-count", m, 4.0, units, trial=t)) for t in range(5)]
    exact = [len(bench.release("user-exact", m, 4.0, units, trial=t)) for t in range(5)]
    assert np.mean(exact) > 20
    assert np.mean(ours) >= 0.5 * np.mean(exact)
