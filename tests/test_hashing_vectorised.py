"""The vectorised MurmurHash3_x64_128 over Arrow string/binary values (``hashing._murmur3_var``).

Every test compares against the reference: ``mmh3`` on the canonical encoding (:func:`encode_key`),
one key at a time, and on the encoding re-implemented in ``oracles.ref_encode``. The vectorised
path has separate code for tails that fit ``k1``, tails that reach ``k2``, encodings whose tag byte
falls in the last full block (length a multiple of 16), values of mixed block counts (sorted) or
equal block counts (unsorted), long values (per-value ``mmh3``), chunk boundaries and Arrow
buffer offsets; the inputs below cover each.
"""

from __future__ import annotations

import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import ref_encode

from beam_dpsketch import hashing
from beam_dpsketch.hashing import encode_key, hash_key, hash_keys
from beam_dpsketch.sketches import CountMinSketch

SEEDS = [0, 1, 0x9747B28C, 2**31, 2**32 - 1]
MULTIBYTE = "é€𝄞ß中"  # 2, 3, 4, 2 and 3 UTF-8 bytes


def reference(keys, seed):
    """``mmh3`` on ``encode_key(k)`` per key, checked against the independent encoder too."""
    pairs = []
    for key in keys:
        enc = encode_key(key)
        assert enc == ref_encode(key)
        pairs.append(mmh3.mmh3_x64_128_utupledigest(enc, seed))
    arr = np.array(pairs, dtype=np.uint64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def assert_same(got, keys, seed):
    h1, h2 = got
    e1, e2 = reference(keys, seed)
    assert h1.dtype == np.uint64 and h2.dtype == np.uint64
    assert h1.shape == h2.shape == (len(keys),)
    np.testing.assert_array_equal(h1, e1)
    np.testing.assert_array_equal(h2, e2)


def ascii_text(rng, length):
    return "".join(chr(c) for c in rng.integers(32, 127, length))


def multibyte_text(rng, n_bytes):
    """A string of exactly ``n_bytes`` UTF-8 bytes with multi-byte characters."""
    out, size = [], 0
    while size < n_bytes:
        ch = MULTIBYTE[int(rng.integers(len(MULTIBYTE)))]
        if size + len(ch.encode()) > n_bytes:
            ch = "x"
        out.append(ch)
        size += len(ch.encode())
    return "".join(out)


def every_length_strings(max_len=70):
    rng = np.random.default_rng(11)
    strs = [ascii_text(rng, n) for n in range(max_len + 1)]
    strs += [multibyte_text(rng, n) for n in range(max_len + 1)]
    return strs


STRING_TYPES = [pa.string(), pa.large_string()]
BINARY_TYPES = [pa.binary(), pa.large_binary()]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("typ", STRING_TYPES, ids=str)
def test_every_length_0_to_70_in_one_array(seed, typ):
    strs = every_length_strings()
    assert {len(s.encode()) for s in strs} == set(range(71))
    assert_same(hash_keys(pa.array(strs, typ), seed), strs, seed)


@pytest.mark.parametrize("seed", [0, 2**32 - 1])
def test_every_length_alone_in_its_array(seed):
    # One length per array: the equal-block-count branch (no sort) for every length.
    for s in every_length_strings():
        keys = [s, s[::-1], s]
        assert_same(hash_keys(pa.array(keys, pa.string()), seed), keys, seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("typ", BINARY_TYPES, ids=str)
def test_bytes_of_every_length_with_zero_and_high_bytes(seed, typ):
    rng = np.random.default_rng(5)
    byts = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in range(71)]
    byts += [b"\x00" * n for n in range(71)]
    byts += [b"\xff" * n for n in range(71)]
    assert_same(hash_keys(pa.array(byts, typ), seed), byts, seed)


@pytest.mark.parametrize("seed", [0, 42, 2**32 - 1])
def test_random_lengths_up_to_1000_including_long_values(seed):
    rng = np.random.default_rng(seed % 1000)
    lengths = rng.integers(0, 1001, 400).tolist() + [254, 255, 256, 257, 1000, 0]
    strs = [multibyte_text(rng, n) if i % 3 else ascii_text(rng, n) for i, n in enumerate(lengths)]
    assert max(len(s.encode()) for s in strs) >= hashing._VAR_MAX_VECTOR_LEN
    for typ in STRING_TYPES:
        assert_same(hash_keys(pa.array(strs, typ), seed), strs, seed)
    byts = [s.encode() for s in strs]
    for typ in BINARY_TYPES:
        assert_same(hash_keys(pa.array(byts, typ), seed), byts, seed)


def test_only_long_values():
    strs = ["a" * 300, "b" * 5000]
    assert_same(hash_keys(pa.array(strs), 7), strs, 7)


@pytest.mark.parametrize("seed", [0, 2**32 - 1])
def test_empty_strings_and_empty_arrays(seed):
    for keys in ([""], ["", "", ""], ["", "a", "", "bc", ""]):
        assert_same(hash_keys(pa.array(keys, pa.string()), seed), keys, seed)
        assert_same(hash_keys(keys, seed), keys, seed)
    assert_same(hash_keys(pa.array([b"", b""], pa.binary()), seed), [b"", b""], seed)
    for typ in STRING_TYPES + BINARY_TYPES:
        h1, h2 = hash_keys(pa.array([], typ), seed)
        assert h1.dtype == h2.dtype == np.uint64 and len(h1) == len(h2) == 0
        h1, h2 = hash_keys(pa.chunked_array([], typ), seed)
        assert h1.dtype == h2.dtype == np.uint64 and len(h1) == len(h2) == 0


def test_str_and_bytes_with_equal_payload_differ_by_tag():
    h_str = hash_keys(pa.array(["abc"]), 0)
    h_bytes = hash_keys(pa.array([b"abc"]), 0)
    assert h_str[0][0] != h_bytes[0][0]
    assert (int(h_str[0][0]), int(h_str[1][0])) == hash_key("abc", 0)
    assert (int(h_bytes[0][0]), int(h_bytes[1][0])) == hash_key(b"abc", 0)


@pytest.mark.parametrize("typ", STRING_TYPES + BINARY_TYPES, ids=str)
def test_sliced_arrays_use_the_array_offset(typ):
    strs = every_length_strings(40)
    keys = strs if pa.types.is_string(typ) or pa.types.is_large_string(typ) else []
    keys = keys or [s.encode() for s in strs]
    arr = pa.array(keys, typ)
    for start, stop in [(1, None), (3, 50), (17, 18), (len(keys) - 1, None), (5, 5), (40, 81)]:
        part = arr[start:stop]
        assert_same(hash_keys(part, 3), keys[start:stop], 3)
    # A slice of a slice, and a slice of a dictionary array.
    assert_same(hash_keys(arr[10:70][5:30], 3), keys[15:40], 3)
    assert_same(hash_keys(arr.dictionary_encode()[7:60], 3), keys[7:60], 3)


def test_dictionary_arrays_hash_their_values():
    strs = every_length_strings(30)
    indices = pa.array(np.random.default_rng(2).integers(0, len(strs), 300), pa.int32())
    expected = [strs[i] for i in indices.to_pylist()]
    for typ in STRING_TYPES:
        arr = pa.DictionaryArray.from_arrays(indices, pa.array(strs, typ))
        assert_same(hash_keys(arr, 9), expected, 9)
        assert_same(hash_keys(pa.chunked_array([arr[:100], arr[100:]]), 9), expected, 9)
    byts = [s.encode() for s in strs]
    arr = pa.DictionaryArray.from_arrays(indices, pa.array(byts, pa.large_binary()))
    assert_same(hash_keys(arr, 9), [byts[i] for i in indices.to_pylist()], 9)


@pytest.mark.parametrize("typ", STRING_TYPES + BINARY_TYPES, ids=str)
def test_chunked_arrays(typ):
    strs = every_length_strings(50)
    keys = strs if typ in STRING_TYPES else [s.encode() for s in strs]
    arr = pa.array(keys, typ)
    chunked = pa.chunked_array([arr[:10], arr[10:10], arr[10:60], arr[60:]], typ)
    assert_same(hash_keys(chunked, 2**32 - 1), keys, 2**32 - 1)
    assert_same(hash_keys(pa.chunked_array([arr]), 0), keys, 0)
    assert_same(hash_keys(pa.chunked_array([arr[:0], arr[:3]]), 0), keys[:3], 0)


def test_chunk_boundaries(monkeypatch):
    strs = every_length_strings(70) * 2
    rng = np.random.default_rng(4)
    rng.shuffle(strs)
    expected = reference(strs, 5)
    for chunk in (1, 2, 7, 16, len(strs) - 1, len(strs), len(strs) + 1):
        monkeypatch.setattr(hashing, "_VAR_CHUNK", chunk)
        got = hash_keys(pa.array(strs[1:]), 5)
        np.testing.assert_array_equal(got[0], expected[0][1:])
        np.testing.assert_array_equal(got[1], expected[1][1:])


def test_more_values_than_one_chunk():
    n = 2 * hashing._VAR_CHUNK + 123
    rng = np.random.default_rng(8)
    values, repeats = rng.integers(0, 10**9, n).tolist(), rng.integers(0, 4, n).tolist()
    keys = [f"k{v}" * r for v, r in zip(values, repeats, strict=True)]
    # An Arrow array: the numpy loop hashes it chunk by chunk (a list is hashed in C).
    assert_same(hash_keys(pa.array(keys), 2**32 - 1), keys, 2**32 - 1)


def test_null_values_are_rejected():
    with pytest.raises(TypeError, match="None"):
        hash_keys(pa.array(["a", None]), 0)
    with pytest.raises(TypeError, match="None"):
        hash_keys(pa.chunked_array([pa.array(["a"]), pa.array([None], pa.string())]), 0)
    with pytest.raises(TypeError, match="NoneType"):
        hash_keys(["a", None], 0)


@pytest.mark.parametrize("seed", [0, 2**32 - 1])
def test_list_of_str_equals_arrow_array_equals_hash_key(seed):
    strs = every_length_strings(70) + ["LAX-LAS", "key-12345", "", "ß" * 200, "x" * 600]
    from_list = hash_keys(strs, seed)
    from_arrow = hash_keys(pa.array(strs), seed)
    from_large = hash_keys(pa.array(strs, pa.large_string()), seed)
    per_key = np.array([hash_key(s, seed) for s in strs], dtype=np.uint64)
    for h1, h2 in (from_list, from_arrow, from_large):
        np.testing.assert_array_equal(h1, per_key[:, 0])
        np.testing.assert_array_equal(h2, per_key[:, 1])
    assert_same(from_list, strs, seed)


def test_lists_that_are_not_all_str_take_the_general_path():
    class Sub(str):
        pass

    cases = [
        ["a", b"a", "bc"],  # Arrow would infer binary for this: the str keys keep their tag
        ["a", 1, -(2**70)],
        ["a", ("a", 1)],
        ["a", Sub("b"), np.str_("c")],
        ["a", bytearray(b"b"), True],
        ("tuple", "of", "str"),
    ]
    for keys in cases:
        got = hash_keys(keys, 11)
        per_key = np.array([hash_key(k, 11) for k in keys], dtype=np.uint64)
        np.testing.assert_array_equal(got[0], per_key[:, 0])
        np.testing.assert_array_equal(got[1], per_key[:, 1])
    with pytest.raises(TypeError, match="float"):
        hash_keys(["a", 1.5], 0)
    with pytest.raises(TypeError, match="dict"):
        hash_keys(["a", {"b": 1}], 0)


def test_numpy_str_and_bytes_arrays():
    strs = every_length_strings(40)
    assert_same(hash_keys(np.array(strs), 6), strs, 6)
    byts = [s.encode() for s in strs if s]  # numpy 'S' drops trailing NULs; these have none
    assert_same(hash_keys(np.array(byts), 6), byts, 6)


def test_count_min_update_from_list_matches_per_key_hashes():
    rng = np.random.default_rng(3)
    codes = ["LAX", "LAS", "SFO", "JFK", "ORD", "SEA", "BOS", "ATL"]
    routes = [f"{a}-{b}" for a in codes for b in codes if a != b]
    keys = [routes[i] for i in rng.integers(0, len(routes), 70_000)]  # > one update chunk
    sketch = CountMinSketch(2048, 5, 17).update(keys)
    pairs = np.array([hash_key(k, 17) for k in routes], dtype=np.uint64)
    index = {k: i for i, k in enumerate(routes)}
    rows = np.array([index[k] for k in keys])
    expected = CountMinSketch(2048, 5, 17).update_hashes(pairs[rows, 0], pairs[rows, 1])
    assert sketch == expected
    np.testing.assert_array_equal(sketch.table, expected.table)
    assert sketch == CountMinSketch(2048, 5, 17).update(pa.array(keys))


@given(st.lists(st.text(max_size=80), min_size=1, max_size=40), st.sampled_from(SEEDS))
def test_hypothesis_random_text(strs, seed):
    assert_same(hash_keys(strs, seed), strs, seed)
    arr = pa.array(strs, pa.string())
    assert_same(hash_keys(arr, seed), strs, seed)
    assert_same(hash_keys(arr[1:], seed), strs[1:], seed)
    assert_same(hash_keys(pa.array(strs, pa.large_string()), seed), strs, seed)


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=30), st.sampled_from(SEEDS))
def test_hypothesis_random_bytes(byts, seed):
    assert_same(hash_keys(pa.array(byts, pa.binary()), seed), byts, seed)
    assert_same(hash_keys(pa.array(byts, pa.large_binary())[1:], seed), byts[1:], seed)


@given(
    st.lists(
        st.one_of(st.text(max_size=40), st.sampled_from(["", MULTIBYTE])), min_size=1, max_size=12
    ),
    st.lists(st.integers(0, 11), min_size=1, max_size=80),
    st.sampled_from(SEEDS),
)
def test_hypothesis_dictionary_encoded_batches_with_repeats(pool, picks, seed):
    """Dictionary-encoded str/bytes batches (each distinct value hashed once) equal per-value hashes."""
    strs = [pool[i % len(pool)] for i in picks]
    byts = [s.encode() for s in strs]
    for keys, typ in ((strs, pa.string()), (strs, pa.large_string()), (byts, pa.binary())):
        encoded = pa.array(keys, typ).dictionary_encode()
        assert_same(hash_keys(encoded, seed), keys, seed)
        assert_same(hash_keys(encoded[1:], seed), keys[1:], seed)
        assert_same(hash_keys(pa.chunked_array([encoded[:5], encoded[5:]]), seed), keys, seed)
