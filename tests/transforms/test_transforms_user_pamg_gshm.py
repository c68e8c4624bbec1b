"""``pamg-gshm``: user-level heavy hitters from hashed one-counter PAMG sketches, GSHM at ``l = m``.

The pipeline (FnApiRunner) must equal the sketch-layer release
(:func:`~beam_dpsketch.sketches.misra_gries.hashed.hashed_pamg_gshm`) on the units' key sets,
state its calibration for ``sqrt(m)`` in ``explain()``, and keep its memory at ``4 k`` keys.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import GlobalWindow
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
from beam_dpsketch.sketches.misra_gries.hashed import (
    HashedPAMG,
    hashed_pamg_gshm,
    hashed_selection_parameters,
)
from beam_dpsketch.transforms import DPHistogram
from beam_dpsketch.transforms.release import release_id_for

EPS, DELTA, M, K = 2.0, 1e-6, 3, 16


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(str(tmp_path / "out"))


def unit_rows(seed: int, users: int = 600, items: int = 12) -> dict[int, list[int]]:
    """Each user holds at most ``M`` distinct keys (so bounding keeps them all), Zipf-like."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, items + 1)
    weights /= weights.sum()
    return {
        u: sorted(int(x) for x in rng.choice(items, size=M, replace=False, p=weights))
        for u in range(users)
    }


def run(t, rows, dump):
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(rows, reshuffle=False) | t, dump)
    return dump.load()


def histogram(seed: int, k: int = K) -> DPHistogram:
    return DPHistogram(
        k,
        PrivacyBudget.approx(EPS, DELTA),
        privacy_unit=PrivacyUnit(id=lambda r: r[0], max_contributions=M),
        key_fn=lambda r: r[1],
        mechanism="pamg-gshm",
        noise_source=NoiseSource.insecure_for_tests(seed),
        label="pamg",
    )


def test_pipeline_equals_the_sketch_release(dump):
    units = unit_rows(3)
    rows = [(u, x) for u, xs in units.items() for x in xs]
    t = histogram(7)
    out = run(t, rows, dump)
    sketch = HashedPAMG(4 * K)
    for xs in units.values():
        sketch.update(xs)
    # 12 keys in 64 buckets: the bucket contents do not depend on order or bundling.
    stream = t.aggregate.noise_source.stream(release_id_for("pamg", GlobalWindow(), 0))
    expected = hashed_pamg_gshm(sketch, M, PrivacyBudget.approx(EPS, DELTA), stream, k=K)
    assert out == list(expected.items)
    counts: dict[int, int] = {}
    for xs in units.values():
        for x in xs:
            counts[x] = counts.get(x, 0) + 1
    # Noise for l = m: at eps 2 every key held by 60 users or more passes the threshold.
    threshold = hashed_selection_parameters(M, EPS, DELTA).threshold
    assert threshold < 40
    assert {x for x, c in counts.items() if c >= 60 and sketch.to_dict().get(x) == c} <= {
        x for x, _ in out
    }


def test_explain_states_the_sqrt_m_calibration_and_bounded_memory():
    t = histogram(0)
    p = beam.Pipeline(runner=FnApiRunner())
    _ = p | beam.Create([(0, 1)]) | t  # applied, not run: explain() reads the configuration
    text = t.explain()
    params = hashed_selection_parameters(M, EPS, DELTA)
    assert f"at most {4 * K} keys (hash buckets)" in text
    assert "sqrt(m)" in text and f"m = {M}" in text
    facts = t.aggregate.mechanism.describe(PrivacyBudget.approx(EPS, DELTA))
    assert facts["noise_scale"] == pytest.approx(params.sigma)
    assert facts["threshold"] == pytest.approx(params.threshold)
