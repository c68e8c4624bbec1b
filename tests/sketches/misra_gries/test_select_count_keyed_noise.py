"""The count step of select-then-count draws each key's noise from a stream keyed by the key.

Two runners whose selections differ (Design B depends on how the input is sharded), or a
retried bundle that meets the candidates in another order, must give a key that both
releases hold the same noisy count: noise assigned by a key's position among the candidates
would give it another draw whenever another candidate sorts before it.
"""

from __future__ import annotations

import itertools

import apache_beam as beam
import numpy as np
from apache_beam.testing.util import assert_that
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource, discrete_laplace_per_key
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries.select_count import count_release
from beam_dpsketch.transforms import DPHistogram
from beam_dpsketch.transforms.heavy_hitters import SelectThenCount

COUNTS = {"a": 40, "b": 7, ("t", 1): 3, 12: 5, b"raw": 0}


def stream():
    return NoiseSource.insecure_for_tests(11).stream(("stc", "global", 0))


def test_a_keys_noisy_count_does_not_depend_on_the_other_candidates():
    full = count_release(COUNTS, list(COUNTS), PrivacyBudget.pure(0.5), stream(), k=8)
    values = dict(full.items)
    # Every subset of the candidates that keeps a key gives that key the same noisy count
    # (keys sort as 12 < "a" < "b" < b"raw" < ("t", 1), so dropping one shifts the positions
    # of the others).
    for r in range(1, len(COUNTS)):
        for subset in itertools.combinations(COUNTS, r):
            counts = {key: COUNTS[key] for key in subset}
            release = count_release(counts, subset, PrivacyBudget.pure(0.5), stream(), k=8)
            assert dict(release.items) == {key: values[key] for key in subset}


def test_a_keys_noisy_count_does_not_depend_on_the_candidates_order():
    keys = list(COUNTS)
    first = count_release(COUNTS, keys, PrivacyBudget.pure(0.5), stream(), k=8).items
    for perm in itertools.permutations(keys):
        counts = {key: COUNTS[key] for key in perm}
        assert count_release(counts, perm, PrivacyBudget.pure(0.5), stream(), k=8).items == first


def test_the_count_mechanism_agrees_on_shared_keys_across_candidate_sets():
    # The Beam release of the count step, fed the candidate counts of two selections that
    # share keys "a" and "b" (as two runners' selections can); "A" sorts before both.
    budget = PrivacyBudget.approx(1.0, 1e-6)
    mechanism = SelectThenCount(8, max_shards=1).bind(top=None, max_contributions=None)
    one = {
        r.key: r.estimate for r in mechanism.release({"a": 40, "b": 7, "c": 2}, budget, stream())
    }
    other = {
        r.key: r.estimate for r in mechanism.release({"A": 9, "b": 7, "a": 40}, budget, stream())
    }
    assert one["a"] == other["a"] and one["b"] == other["b"]


def test_keyed_draws_are_independent_of_the_stream_position_and_differ_between_keys():
    s = stream()
    before = discrete_laplace_per_key(s, 100, ["a", "b", "c"])
    s.uint64(5)  # the release stream's own position is neither read nor advanced
    np.testing.assert_array_equal(discrete_laplace_per_key(s, 100, ["a", "b", "c"]), before)
    assert s.position == 40
    # Scale 100: three equal draws would be a coincidence of probability about 1e-5.
    assert len(set(before.tolist())) > 1
    zero = NoiseSource.zero_noise_for_tests().stream("z")
    assert discrete_laplace_per_key(zero, 100, ["a", "b"]).tolist() == [0, 0]


def _released(keys: list[str], out) -> dict[str, int]:
    dump = DumpToFile(str(out))
    with beam.Pipeline(runner="FnApiRunner") as p:
        released = (
            p
            | beam.Create(keys)
            | DPHistogram(
                4,
                PrivacyBudget.approx(1.0, 1e-6),
                mechanism="select-then-count",
                noise_source=NoiseSource.insecure_for_tests(2),
                label="stc",
            )
        )
        assert_that(released, dump)
    return {r.key: r.estimate for r in dump.load()}


def test_a_pipeline_gives_a_shared_key_the_same_noise_whatever_else_it_selects(tmp_path):
    # Two inputs whose selections are certain (every key 3000 times) and differ by key "a",
    # which sorts before "b" and "c". Same seeded test source and label: the same count stream.
    # Noise by position would give "b" and "c" other draws in the second pipeline.
    first = _released(["b", "c"] * 3000, tmp_path / "one")
    second = _released(["a", "b", "c"] * 3000, tmp_path / "two")
    assert set(first) == {"b", "c"} and set(second) == {"a", "b", "c"}
    assert first["b"] == second["b"] and first["c"] == second["c"]
