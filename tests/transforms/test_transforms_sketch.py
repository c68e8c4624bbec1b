"""SketchGlobally / SketchPerKey on the in-process FnApiRunner: pipeline sketch == direct sketch.

Inputs are generated inside the pipeline (a few seeds, then FlatMap to numpy chunks or keys):
``beam.Create`` of a large list is slow.
"""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from beam_dpsketch.sketches import CountMinSketch, CountSketch, MisraGries
from beam_dpsketch.transforms import KeyBatch, SketchGlobally, SketchPerKey, SketchSpec

SEEDS = [11, 12, 13]
CHUNK = 3000


def int_chunks(seed: int) -> list[np.ndarray]:
    """Zipf-ish int64 keys: a few heavy keys and a long tail."""
    rng = np.random.default_rng(seed)
    return [(rng.zipf(1.3, CHUNK) % 5000).astype(np.int64) for _ in range(3)]


def str_keys(seed: int) -> list[str]:
    """Individual string keys (one Beam element each) with a skewed distribution."""
    rng = np.random.default_rng(seed)
    return [f"k{int(x)}" for x in rng.zipf(1.5, 4000) % 700]


def all_ints(seeds=SEEDS) -> np.ndarray:
    return np.concatenate([c for s in seeds for c in int_chunks(s)])


def fnapi_pipeline() -> beam.Pipeline:
    return beam.Pipeline(runner=FnApiRunner())


def equals_sketch(expected):
    def check(actual):
        assert len(actual) == 1, f"expected one sketch, got {len(actual)}"
        assert actual[0] == expected, f"{actual[0]!r} != {expected!r}"

    return check


def within_mg_bound(keys, k: int):
    """Matcher: one MG sketch whose estimates satisfy f(x) - n/(k+1) <= est <= f(x)."""
    exact = Counter(np.asarray(keys).tolist() if isinstance(keys, np.ndarray) else keys)
    n = sum(exact.values())

    def check(actual):
        assert len(actual) == 1, f"expected one sketch, got {len(actual)}"
        mg = actual[0]
        assert isinstance(mg, MisraGries) and mg.n == n and mg.k == k
        assert mg.error_bound() <= n / (k + 1)
        queried = list(exact)
        est = mg.estimate(queried)
        f = np.array([exact[x] for x in queried])
        assert np.all(est <= f), "Misra-Gries overestimated"
        assert np.all(est >= f - n / (k + 1)), "Misra-Gries undercount beyond n/(k+1)"
        assert all(x in exact for x in mg.to_dict()), "a key that never occurred has a counter"

    return check


@pytest.mark.parametrize(
    ("transform", "expected"),
    [
        (SketchGlobally.count_min(512, 4, seed=3), CountMinSketch(512, 4, 3)),
        (SketchGlobally.count_sketch(512, 5, seed=4), CountSketch(512, 5, 4)),
    ],
    ids=["count-min", "count-sketch"],
)
def test_linear_sketch_from_numpy_chunks_equals_direct(transform, expected):
    expected.update(all_ints())
    with fnapi_pipeline() as p:
        chunks = p | beam.Create(SEEDS) | beam.FlatMap(int_chunks)
        assert_that(chunks | transform, equals_sketch(expected))


def test_count_min_from_individual_str_keys_equals_direct():
    expected = CountMinSketch(300, 3, 9)
    for s in SEEDS:
        expected.update(str_keys(s))
    with fnapi_pipeline() as p:
        keys = p | beam.Create(SEEDS) | beam.FlatMap(str_keys)
        sketches = keys | SketchGlobally.count_min(300, 3, seed=9, batch_size=512)
        assert_that(sketches, equals_sketch(expected))


def test_misra_gries_within_merged_bound():
    k = 40
    keys = [x for s in SEEDS for x in str_keys(s)]
    with fnapi_pipeline() as p:
        # A Reshuffle spreads the seeds so Beam may build and merge several partial sketches.
        out = (
            p
            | beam.Create(SEEDS)
            | beam.Reshuffle()
            | beam.FlatMap(str_keys)
            | SketchGlobally.misra_gries(k, batch_size=1000)
        )
        assert_that(out, within_mg_bound(keys, k))


def test_misra_gries_single_bundle_equals_sequential_sketch():
    # One seed, no reshuffle: one bundle, keys in arrival order, so no merge happens.
    expected = MisraGries(25).update(str_keys(5))
    with fnapi_pipeline() as p:
        out = (
            p
            | beam.Create([5], reshuffle=False)
            | beam.FlatMap(str_keys)
            | SketchGlobally.misra_gries(25, batch_size=333)
        )
        assert_that(out, equals_sketch(expected))


def test_sketch_factory_and_key_fn_on_records():
    records_of = lambda s: [{"id": int(x), "w": 1} for x in int_chunks(s)[0][:500]]  # noqa: E731
    expected = CountMinSketch(64, 2, 1).update(
        np.concatenate([int_chunks(s)[0][:500] for s in SEEDS])
    )
    with fnapi_pipeline() as p:
        out = (
            p
            | beam.Create(SEEDS)
            | beam.FlatMap(records_of)
            | SketchGlobally(lambda: CountMinSketch(64, 2, 1), key_fn=lambda r: r["id"])
        )
        assert_that(out, equals_sketch(expected))


def test_empty_input_gives_empty_sketch_in_global_window():
    with fnapi_pipeline() as p:
        out = p | beam.Create([], reshuffle=False) | SketchGlobally.count_min(16, 2)
        assert_that(out, equals_sketch(CountMinSketch(16, 2, 0)))


def _timestamped(seed: int):
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 50, 2000)
    times = rng.uniform(0, 40, 2000)
    return [(int(k), float(t)) for k, t in zip(keys, times, strict=True)]


def _per_window_expected(make, size: float):
    by_window: dict[float, list] = {}
    for s in SEEDS:
        for key, t in _timestamped(s):
            by_window.setdefault(size * (t // size), []).append(key)
    return {start: make().update(keys) for start, keys in by_window.items()}, by_window


def _with_window_start(sketch, window=beam.DoFn.WindowParam):
    return float(window.start), sketch


@pytest.mark.parametrize("kind", ["count-min", "misra-gries"])
def test_fixed_windows_give_one_sketch_per_window(kind):
    spec = SketchSpec.count_min(64, 3, 2) if kind == "count-min" else SketchSpec.misra_gries(60)
    expected, _ = _per_window_expected(spec, 10.0)

    def check(actual):
        got = dict(actual)
        assert len(got) == len(actual) == len(expected) == 4
        for start, sketch in got.items():
            # MG with k above the number of distinct keys is exact, so equality holds here
            # in any merge tree (up to the zero-count slots, compared through to_dict).
            if kind == "misra-gries":
                assert sketch.to_dict() == expected[start].to_dict()
                assert sketch.n == expected[start].n
            else:
                assert sketch == expected[start], start

    with fnapi_pipeline() as p:
        out = (
            p
            | beam.Create(SEEDS)
            | beam.FlatMap(_timestamped)
            | beam.MapTuple(lambda key, t: TimestampedValue(key, t))
            | beam.WindowInto(FixedWindows(10))
            | SketchGlobally(spec, batch_size=256)
            | beam.Map(_with_window_start)
        )
        assert_that(out, check)


def test_windowed_prebatched_arrays_stay_in_their_windows():
    # Batches made upstream (numpy arrays) pass through BatchKeys untouched, per window.
    def batches(seed):
        rng = np.random.default_rng(seed)
        return [TimestampedValue(rng.integers(0, 9, 100), float(t)) for t in (1, 12, 25)]

    expected = {}
    for s in SEEDS:
        for tv in batches(s):
            start = 10.0 * (tv.timestamp.micros // 10_000_000)
            expected.setdefault(start, CountMinSketch(32, 2, 0)).update(tv.value)

    def check(actual):
        assert dict(actual) == expected and len(actual) == 3

    with fnapi_pipeline() as p:
        out = (
            p
            | beam.Create(SEEDS)
            | beam.FlatMap(batches)
            | beam.WindowInto(FixedWindows(10))
            | SketchGlobally.count_min(32, 2)
            | beam.Map(_with_window_start)
        )
        assert_that(out, check)


def test_sketch_per_key():
    def pairs(seed):
        return [(f"g{i % 3}", key) for i, key in enumerate(str_keys(seed)[:1500])]

    expected: dict[str, CountMinSketch] = {}
    mg_expected: dict[str, Counter] = {}
    for s in SEEDS:
        for group, key in pairs(s):
            expected.setdefault(group, CountMinSketch(128, 3, 5)).update([key])
            mg_expected.setdefault(group, Counter())[key] += 1

    def check_cms(actual):
        assert dict(actual) == expected and len(actual) == 3

    def check_mg(actual):
        got = dict(actual)
        assert set(got) == set(mg_expected)
        for group, mg in got.items():
            exact = mg_expected[group]
            n = sum(exact.values())
            est = mg.estimate(list(exact))
            f = np.array(list(exact.values()))
            assert mg.n == n and np.all(est <= f) and np.all(est >= f - n / 21)

    with fnapi_pipeline() as p:
        kv = p | beam.Create(SEEDS) | beam.FlatMap(pairs)
        assert_that(kv | "CMS" >> SketchPerKey.count_min(128, 3, seed=5), check_cms, label="cms")
        assert_that(kv | "MG" >> SketchPerKey.misra_gries(20), check_mg, label="mg")


def test_sketch_per_key_numpy_groups_and_batches():
    # numpy scalar groups would break GroupByKey on the FnApiRunner; they are converted.
    def pairs(seed):
        rng = np.random.default_rng(seed)
        return [(np.int64(g), rng.integers(0, 20, 50)) for g in range(2)]

    expected: dict[int, CountMinSketch] = {}
    for s in SEEDS:
        for g, batch in pairs(s):
            expected.setdefault(int(g), CountMinSketch(16, 2, 0)).update(batch)

    with fnapi_pipeline() as p:
        out = p | beam.Create(SEEDS) | beam.FlatMap(pairs) | SketchPerKey.count_min(16, 2)

        def check(actual):
            assert dict(actual) == expected and len(actual) == 2

        assert_that(out, check)


def test_prebatched_key_batches_skip_batching():
    with fnapi_pipeline() as p:
        batches = p | beam.Create([KeyBatch(["a", "b"]), KeyBatch(["a", ("t", 1)])])
        out = batches | SketchGlobally.misra_gries(4, batched=True)

        def check(actual):
            assert [mg.to_dict() for mg in actual] == [{"a": 2, "b": 1, ("t", 1): 1}]

        assert_that(out, check)


def test_output_pcollection_uses_sketch_coder():
    from beam_dpsketch.transforms.combiners import SketchCoder

    p = fnapi_pipeline()
    out = p | beam.Create([1]) | SketchGlobally.count_min(8, 1)
    assert out.element_type is CountMinSketch
    assert beam.coders.registry.get_coder(out.element_type) == SketchCoder(CountMinSketch)


def test_invalid_parameters_fail_at_construction():
    with pytest.raises(ValueError, match="width"):
        SketchGlobally.count_min(0, 3)
    with pytest.raises(ValueError, match="depth"):
        SketchGlobally.count_sketch(10, 65)
    with pytest.raises(ValueError, match="seed"):
        SketchGlobally.count_min(10, 2, seed=-1)
    with pytest.raises(ValueError, match="k"):
        SketchPerKey.misra_gries(0)
    with pytest.raises(ValueError, match="batch_size"):
        SketchGlobally.misra_gries(3, batch_size=0)
    with pytest.raises(ValueError, match="sketch"):
        SketchGlobally("count-min")
    with pytest.raises(ValueError, match="batched"):
        SketchGlobally.misra_gries(3, batched=True, key_fn=str)
