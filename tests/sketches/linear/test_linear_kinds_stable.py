"""Seeded Count-Min and Count Sketch releases stay bit-identical beside the Count-Median kind.

The two paper sketches share their calibration, total estimate and error-bound tails with
Count-Median. Their released tables (SHA-256 of the little-endian int64 cells), per-estimate
error bounds and Count-Min totals are pinned here for a fixed insecure test key on a signed
(general turnstile) input, under a pure budget, a zCDP budget with replace-one, and a pure budget
on the lattice without offset (as ``DPFrequencies`` releases): any change to a released number
fails the test.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch, PrivateCountSketch

RELEASES = {
    "pure": (PrivacyBudget.pure(1.0), {}),
    "zcdp": (PrivacyBudget.zcdp(0.5), {"neighbouring": "replace"}),
    "lattice": (PrivacyBudget.pure(2.0), {"offset": False, "lattice": True}),
}

# (class, release) -> (table digest, error_bound(0.95), total() or None)
PINNED = {
    (PrivateCountMinSketch, "pure"): ("603604f08e090585", 72.00316429138184, 14257.2),
    (PrivateCountMinSketch, "zcdp"): ("d5eaf12a0abb375d", 23.00117015838623, 14284.0),
    (PrivateCountMinSketch, "lattice"): ("c218ed1eec3ea130", 9.846451986911307, 14335.75),
    (PrivateCountSketch, "pure"): ("6ee03c24490f8729", 11.00080943107605, None),
    (PrivateCountSketch, "zcdp"): ("49f0f7b64aefbf94", 9.000362873077393, None),
    (PrivateCountSketch, "lattice"): ("118529bf2d00721c", 7.87532365322113, None),
}


@pytest.mark.parametrize(("cls", "release"), sorted(PINNED, key=lambda k: (k[0].KIND, k[1])))
def test_seeded_release_is_unchanged(cls, release):
    keys = np.random.default_rng(5).zipf(1.3, 20000) % 3000
    weights = np.where(np.arange(20000) % 7 == 0, -1, 1)
    exact_cls = CountMinSketch if cls is PrivateCountMinSketch else CountSketch
    exact = exact_cls(512, 5, 9).update(keys, weights)
    budget, options = RELEASES[release]
    stream = NoiseSource.insecure_for_tests(77).stream((cls.KIND, release))
    rel = cls.release(exact, budget, stream, **options)
    table = np.ascontiguousarray(rel.table, dtype="<i8").tobytes()
    digest, bound, total = PINNED[(cls, release)]
    assert hashlib.sha256(table).hexdigest()[:16] == digest
    # Bounds and totals are post-processing in float64: equal up to rounding.
    assert rel.error_bound(0.95) == pytest.approx(bound, rel=1e-12)
    if total is not None:
        assert rel.total() == pytest.approx(total, rel=1e-12)
