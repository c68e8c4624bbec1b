"""Memory of ``DPIntermittentQueries`` (schedule mode): the owner holds every interval's delta
until the batches run in order, so each is held as its non-zero cells, not a dense table."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.transforms.intermittent import _SparseDelta, _to_owner


class Config:
    width, depth, seed = 2048, 5, 3

    def __init__(self, kind: str) -> None:
        self.kind = kind


@pytest.mark.parametrize(
    ("kind", "cls"), [("count_min", CountMinSketch), ("count_sketch", CountSketch)]
)
def test_a_small_interval_reaches_the_owner_as_its_cells(kind, cls):
    delta = cls(2048, 5, 3).update(["a", "b", "a"])
    key, (k, sparse) = _to_owner((7, delta))
    assert k == 7
    # Dense, the table alone is 2048 * 5 * 8 = 81920 bytes.
    assert len(pickle.dumps(sparse)) < 1024
    assert sparse.cells.size <= 2 * 5
    back = sparse.dense(Config(kind))
    assert back == delta


def test_sparse_delta_round_trips_signed_and_weighted_tables():
    rng = np.random.default_rng(2)
    delta = CountSketch(2048, 5, 3).update(rng.integers(0, 50, 400), rng.integers(-3, 4, 400))
    assert _SparseDelta(delta).dense(Config("count_sketch")) == delta
