"""``MisraGries.update`` on a batch equals updating with its keys one at a time, for every input
form the fast paths handle (Arrow strings, binary, ints, booleans, dictionary-encoded and chunked
arrays, numpy ints, lists with runs), for small ``k`` where decrements and zero-key replacements
happen on almost every step, from empty and non-empty starting states and across several batches
(the lazy decrement offset is folded back at the end of each call). Equality is ``==``, the
serialized bytes and the naive O(k)-scan reference of test_sketches_misragries.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import NaiveMG

from beam_dpsketch.hashing import canonical_keys
from beam_dpsketch.sketches import MisraGries

K = st.integers(1, 6)
SMALL_K = st.sampled_from([1, 2, 3])
# Runs of repeated keys over a small universe: held runs, zero keys hit again, decrements.
RUNS = st.lists(st.tuples(st.integers(-3, 12), st.integers(1, 6)), max_size=20).map(
    lambda pairs: [x for x, w in pairs for _ in range(w)]
)
INTS = st.lists(st.integers(-5, 15), max_size=80)
WORDS = st.lists(
    st.sampled_from(["", "a", "b", "ab", "é", "漢", "LAX-SFO", "SFO-LAX"]), max_size=80
)
BLOBS = st.lists(st.sampled_from([b"", b"a", b"\xff", b"ab", b"\x00"]), max_size=60)
MIXED_KEY = st.one_of(
    st.integers(-3, 9),
    st.sampled_from([2**64, -(2**70), True, False]),
    st.sampled_from(["a", "b", "", "é"]),
    st.sampled_from([b"a", b"", b"\xff"]),
    st.tuples(st.integers(0, 2), st.sampled_from(["x", b"x"])),
)


def one_at_a_time(k: int, keys: list, start: MisraGries | None = None) -> MisraGries:
    sketch = MisraGries(k) if start is None else start.copy()
    for x in keys:
        sketch.update([x])
    return sketch


def assert_same(got: MisraGries, want: MisraGries) -> None:
    assert got == want
    assert got.to_bytes() == want.to_bytes()
    assert got.slots() == want.slots()
    assert got.error_bound() == want.error_bound()


def check(k: int, batch, keys: list) -> None:
    """``batch`` (any input form) holds ``keys``; one call on it equals per-key updates."""
    got = MisraGries(k).update(batch)
    assert_same(got, one_at_a_time(k, keys))
    naive = NaiveMG(k).extend(keys)
    assert got.slots() == naive.slots()


@given(K, WORDS)
def test_arrow_strings(k, words):
    check(k, pa.array(words, pa.string()), words)
    check(k, pa.array(words, pa.large_string()), words)


@given(K, BLOBS)
def test_arrow_binary(k, blobs):
    check(k, pa.array(blobs, pa.binary()), blobs)
    check(k, pa.array(blobs, pa.large_binary()), blobs)


@given(K, INTS, st.sampled_from([pa.int64(), pa.int8(), pa.int32()]))
def test_arrow_ints(k, ints, typ):
    check(k, pa.array(ints, typ), ints)


@given(K, st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 9), max_size=40))
def test_arrow_uint64_beyond_int64(k, ints):
    check(k, pa.array(ints, pa.uint64()), ints)


@given(K, st.lists(st.booleans(), max_size=40))
def test_arrow_and_numpy_booleans_are_int_keys(k, flags):
    ints = [int(b) for b in flags]
    check(k, pa.array(flags, pa.bool_()), ints)
    check(k, np.array(flags, dtype=bool), ints)


@given(K, INTS, st.sampled_from([np.int64, np.int16, np.uint32, np.uint8]))
def test_numpy_ints(k, ints, dtype):
    ints = [x for x in ints if np.iinfo(dtype).min <= x <= np.iinfo(dtype).max]
    check(k, np.array(ints, dtype=dtype), ints)


@given(SMALL_K, RUNS)
def test_lists_and_arrays_with_runs_small_k(k, keys):
    check(k, keys, keys)
    check(k, np.array(keys, dtype=np.int64), keys)
    check(k, pa.array(keys, pa.int64()), keys)
    words = [f"w{x}" for x in keys]
    check(k, words, words)
    check(k, pa.array(words, pa.string()), words)


@given(K, st.lists(MIXED_KEY, max_size=60))
def test_mixed_python_keys(k, keys):
    canon = canonical_keys(keys)
    check(k, keys, canon)


@given(K, WORDS, st.data())
def test_dictionary_encoded_arrays(k, words, data):
    check(k, pa.array(words, pa.string()).dictionary_encode(), words)
    # A dictionary with repeated and unused entries, gathered by arbitrary indices.
    entries = data.draw(st.lists(st.sampled_from(["a", "b", "é", ""]), min_size=1, max_size=6))
    idx = data.draw(st.lists(st.integers(0, len(entries) - 1), max_size=60))
    arr = pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), pa.array(entries))
    check(k, arr, [entries[i] for i in idx])
    ints = data.draw(st.lists(st.integers(-3, 5), min_size=1, max_size=6))
    arr = pa.DictionaryArray.from_arrays(
        pa.array(idx, pa.int8()), pa.array(ints[:1] * len(entries))
    )
    check(k, arr, [ints[0]] * len(idx))


@given(K, st.lists(WORDS, max_size=4), st.lists(INTS, max_size=4))
def test_chunked_arrays(k, word_chunks, int_chunks):
    check(k, pa.chunked_array(word_chunks, pa.string()), [w for c in word_chunks for w in c])
    check(k, pa.chunked_array(int_chunks, pa.int64()), [x for c in int_chunks for x in c])


@given(SMALL_K, st.lists(RUNS, min_size=1, max_size=5), RUNS)
def test_several_batches_from_a_restored_state(k, batches, prefix):
    # A sketch restored from bytes holds zero-count keys; each call starts its lazy decrement
    # offset at 0 and must fold it back before the next.
    start = MisraGries.from_bytes(MisraGries(k).update(prefix).to_bytes())
    got = start.copy()
    for batch in batches:
        got.update(pa.array([f"w{x}" for x in batch], pa.string()))
        got.update(np.array(batch, dtype=np.int64))
    keys = [y for batch in batches for y in ([f"w{x}" for x in batch] + batch)]
    assert_same(got, one_at_a_time(k, keys, start))


def test_canonical_keys_of_arrow_arrays_match_to_pylist():
    arrays = [
        pa.array(["a", "é", "a"], pa.string()),
        pa.array([b"a", b"\xff"], pa.large_binary()),
        pa.array([1, -2, 1], pa.int16()),
        pa.array([2**64 - 1, 0], pa.uint64()),
        pa.array(["x", "y", "x"]).dictionary_encode(),
        pa.chunked_array([[1, 2], [], [3]], pa.int64()),
        pa.chunked_array([], pa.string()),
        pa.array(["p", "q", "p", "r"])[1:],
        pa.array([f"s{i % 7}" for i in range(9000)])[1234:],
        pa.array(list(range(10)), pa.int64())[3:8],
    ]
    for arr in arrays:
        got = canonical_keys(arr)
        assert got == arr.to_pylist()
        assert [type(x) for x in got] == [type(x) for x in arr.to_pylist()]
    assert canonical_keys(pa.array([True, False])) == [1, 0]
    assert [type(x) for x in canonical_keys(pa.array([True]))] == [int]


def test_null_dictionary_entry_is_reported_only_when_used():
    unused = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int8()), pa.array(["a", None]))
    assert canonical_keys(unused) == ["a", "a"]
    used = pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int8()), pa.array(["a", None]))
    with pytest.raises(TypeError, match="NoneType"):
        canonical_keys(used)


@pytest.mark.parametrize("k", [1, 3, 64])
def test_long_string_arrays_with_and_without_repeats(k):
    # Long enough for the shared-object conversion (values repeat in the prefix) and for the
    # plain one (a distinct prefix, repeats only later), both equal to the key-by-key result.
    rng = np.random.default_rng(7)
    zipf = [f"r{v}" for v in np.minimum(rng.zipf(1.3, 6000), 500).tolist()]
    late = [f"u{i}" for i in range(5000)] + zipf[:3000]
    for words in (zipf, late):
        for typ in (pa.string(), pa.large_string()):
            arr = pa.array(words, typ)
            assert canonical_keys(arr) == words
            check(k, arr, words)
        blobs = [w.encode() for w in words]
        assert canonical_keys(pa.array(blobs, pa.binary())) == blobs
