"""Noise keys are unique per transform application, and lattice noise never coarser than 1.

Two transforms that drew identical noise would publish the exact difference of their inputs;
integer counts plus noise on a lattice of step 2 or more would publish the counts' residues.
"""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that

from beam_dpsketch.noise import (
    NoiseSource,
    application_source,
    check_release_source,
    gaussian,
    laplace,
)
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.transforms import DPCount

RUNNER = "FnApiRunner"


def _two_counts(source: NoiseSource, n_a: int, n_b: int, out: Path) -> tuple[int, int]:
    """Release counts of ``n_a`` and ``n_b`` elements with two DPCount sharing source and label."""
    budget = PrivacyBudget.pure(0.5)
    first = DPCount(budget, noise_source=source, label="count")
    second = DPCount(budget, noise_source=source, label="count")

    def keep(name):
        # The runner pickles the check, so the value travels back through a file.
        def check(actual):
            (out / name).write_text(json.dumps(actual[0].count))

        return check

    with beam.Pipeline(runner=RUNNER) as p:
        a = p | "A" >> beam.Create(list(range(n_a))) | "CountA" >> first
        b = p | "B" >> beam.Create(list(range(n_b))) | "CountB" >> second
        assert_that(a, keep("a"), label="KeepA")
        assert_that(b, keep("b"), label="KeepB")
    return json.loads((out / "a").read_text()), json.loads((out / "b").read_text())


def test_two_transforms_with_one_source_and_label_draw_different_noise(tmp_path):
    # Same source, same label, each transform with its own default accountant: if they shared
    # noise, released(a) - released(b) would be exactly 40 - 25 on every seed.
    exact = 0
    for seed in range(4):
        a, b = _two_counts(NoiseSource.insecure_for_tests(seed), 40, 25, tmp_path)
        exact += (a - b) == 40 - 25
    # Independent discrete Laplace noise of scale 2 makes the difference exact with probability
    # about 0.18 per seed; 4 of 4 happens with probability about 1e-3.
    assert exact < 4


def test_application_keys_are_distinct_and_secret_keys_never_replay():
    key = b"k" * 32
    first = NoiseSource(key).for_application()
    second = NoiseSource(key).for_application()
    # A persisted secret key with a stable label must not replay noise in a second run.
    assert (
        first.stream(("label", "global", 0)).uint64(4).tolist()
        != second.stream(("label", "global", 0)).uint64(4).tolist()
    )
    source = NoiseSource(key)
    assert (
        source.for_application().stream("x").uint64(2).tolist()
        != source.for_application().stream("x").uint64(2).tolist()
    )
    assert not application_source(source).is_insecure


def test_insecure_sources_stay_reproducible_but_distinct_per_application():
    def derived(seed: int) -> list[bytes]:
        src = NoiseSource.insecure_for_tests(seed)
        return [tuple(src.for_application().stream("r").uint64(2).tolist()) for _ in range(3)]

    assert derived(7) == derived(7)
    assert len(set(derived(7))) == 3
    assert NoiseSource.insecure_for_tests(7).for_application().is_insecure


def test_release_paths_refuse_the_zero_noise_source():
    with pytest.raises(ValueError, match="zero-noise"):
        application_source(NoiseSource.zero_noise_for_tests())
    assert check_release_source(None) is not None


@pytest.mark.parametrize("sampler", [gaussian, laplace])
@pytest.mark.parametrize("scale", [2.0**21, 2.0**23 + 0.5, 3.0 * 2**25])
def test_large_scale_noise_is_on_a_lattice_of_step_at_most_one(sampler, scale):
    # Integer counts plus noise must not all share the counts' residue modulo 2: with a step of
    # 2 or more, every released value would have the parity of the exact count.
    source = NoiseSource.insecure_for_tests(3)
    draws = sampler(source.stream(("lattice", int(scale * 2))), scale, 4000)
    assert np.all(draws == np.round(draws))
    odd = int(np.count_nonzero(draws.astype(np.int64) % 2))
    # Fair parity: P[odd count outside (1700, 2300)] < 1e-9 for 4000 draws.
    assert 1700 < odd < 2300


def test_gaussian_above_the_sampler_range_is_refused_not_coarsened():
    with pytest.raises(ValueError, match="sigma"):
        gaussian(NoiseSource.insecure_for_tests(0).stream("s"), 2.0**31, 1)
