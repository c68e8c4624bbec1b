"""Stated error bounds of the sequential (PMG) and merged (M-LAP, M-GSHM) releases: coverage.

Each released value's bound is a per-value, marginal statement at 95 %. Seeded checks:

* when the stream has fewer distinct keys than ``k`` (the sketch is exact, and the private test
  says so), the bound is the noise quantile alone and covers 93-97 % of the released values;
  the same check fails on a broken mechanism (the bound halved);
* when the sketch decremented, the bound adds a private upper bound on ``n/(k+1)`` and covers
  at least 95 % (honest, wider);
* the bound is a function of released values and public parameters only: equal for every key
  of a release.
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import (
    merged,
    merged_gshm,
    merged_laplace,
    pmg,
    pmg_release,
    tails,
)

DELTA = 1e-6
CONF = 0.95


def _sketch(counts: np.ndarray, k: int, parts: int) -> MisraGries:
    """A sketch of keys ``0..len(counts)-1`` with those counts, built in ``parts`` merged pieces."""
    keys = np.arange(len(counts), dtype=np.int64)
    out = MisraGries(k)
    for share in range(parts):
        piece = counts // parts + (share < counts % parts)
        part = MisraGries(k)
        part.update(keys[piece > 0], piece[piece > 0])
        out.merge(part) if parts > 1 else out.update(keys[piece > 0], piece[piece > 0])
    return out


def _zipf_stream(n: int, distinct: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.zipf(1.2, n) % distinct


def _coverage(release_fn, source, truth: dict, eps: float, trials: int, **kw) -> float:
    hits = total = 0
    for trial in range(trials):
        stream = NoiseSource.insecure_for_tests(trial).stream(("bounds", release_fn.__name__))
        rel = release_fn(
            source, PrivacyBudget.approx(eps, DELTA), stream, error_confidence=CONF, **kw
        )
        bounds = [e.error_bound for e in rel.estimates()]
        # One public bound for every released key (up to the rounding of count +- bound).
        assert not bounds or max(bounds) - min(bounds) <= 1e-9 * max(bounds)
        for e in rel.estimates():
            total += 1
            hits += abs(float(e.count) - truth[e.key]) <= e.error_bound
    assert total >= 1000
    return hits / total


def _exact_cases():
    # Counts from 20,000 down; fewer distinct keys than k, so every sketch is exact.
    heavy = (10**7 / np.arange(1, 401) ** 0.9).astype(np.int64)
    light = (3_000 / np.arange(1, 801) ** 0.8).astype(np.int64) + 1
    return [
        ("pmg", pmg, _sketch(light, 4096, 1), light, 0.3, {}),
        ("merged-laplace", merged_laplace, _sketch(heavy, 4096, 3), heavy, 4.0, {}),
        ("merged-gshm", merged_gshm, _sketch(light[:100], 256, 2), light[:100], 8.0, {}),
    ]


@pytest.mark.parametrize("case", _exact_cases(), ids=lambda c: c[0])
def test_exact_sketch_bounds_cover_about_95_percent(case):
    _, fn, sketch, counts, eps, kw = case
    assert sketch.d == 0
    truth = dict(enumerate(counts.tolist()))
    cov = _coverage(fn, sketch, truth, eps, trials=200, **kw)
    assert 0.93 <= cov <= 0.97, cov


@pytest.mark.parametrize("case", _exact_cases()[:2], ids=lambda c: c[0])
def test_the_coverage_check_fails_on_a_halved_bound(case, monkeypatch):
    _, fn, sketch, counts, eps, kw = case
    truth = dict(enumerate(counts.tolist()))
    for name in ("laplace_sum_quantile", "laplace_quantile"):
        original = getattr(tails, name)
        halved = lambda *a, _f=original, **k: _f(*a, **k) / 2  # noqa: E731
        for module in (pmg_release, merged):
            monkeypatch.setattr(module, name, halved, raising=False)
    assert _coverage(fn, sketch, truth, eps, trials=60, **kw) < 0.93


def test_decremented_sketch_bounds_stay_honest():
    stream = _zipf_stream(200_000, 5_000, 0)
    truth = dict(enumerate(np.bincount(stream, minlength=5_000).tolist()))
    sketch = MisraGries(64)
    sketch.update(stream)
    tree = MisraGries(64)
    for piece in np.array_split(stream, 3):
        part = MisraGries(64)
        part.update(piece)
        tree.merge(part)
    assert sketch.d > 0 and tree.d > 0
    assert _coverage(pmg, sketch, truth, 1.0, trials=200) >= 0.95
    assert _coverage(merged_laplace, tree, truth, 4.0, trials=300) >= 0.95
    # The sketch's undercount is in the bound: it exceeds the noise quantile by about n/(k+1).
    stream_id = NoiseSource.insecure_for_tests(0).stream("bounds-decremented")
    rel = pmg(sketch, PrivacyBudget.approx(1.0, DELTA), stream_id, error_confidence=CONF)
    assert not rel.details["exactness_test_passed"]
    assert rel.error.above - rel.error.below >= len(stream) / 65


def test_error_confidence_is_checked_and_off_by_default():
    sketch = _sketch(np.array([50, 40, 30]), 8, 1)
    stream = NoiseSource.insecure_for_tests(0).stream("bounds-args")
    assert pmg(sketch, PrivacyBudget.approx(1.0, DELTA), stream).error is None
    # beam_dpsketch.checks: a bound violated is a ValueError, a wrong type a TypeError.
    bad_values = [(0.0, ValueError), (1.0, ValueError), (0.999, ValueError)]
    bad_types = [(True, TypeError), ("0.9", TypeError)]
    for bad, error in bad_values + bad_types:
        with pytest.raises(error, match="error_confidence"):
            pmg(sketch, PrivacyBudget.approx(1.0, DELTA), stream, error_confidence=bad)
