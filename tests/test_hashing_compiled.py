"""The compiled MurmurHash3 loop over lists of ``str`` (``beam_dpsketch.murmur3``).

The reference is ``mmh3`` on the canonical encoding, one key at a time (:func:`hash_key`). The C
loop has separate code for tails of 0, 1-3, 4-7, 8 and 9-15 payload bytes, for an encoding that
ends exactly on a block boundary (the tag is the last byte of a full block) and for the body
loop; the edge lengths below reach each with ASCII and with multi-byte UTF-8. The behaviour of
:func:`hash_keys` without the compiled path ("legacy") is reproduced by disabling it, so fallback
cases are compared with exactly what the library did before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dpsketch import hashing, murmur3
from beam_dpsketch.hashing import hash_key, hash_keys

SEEDS = [0, 1, 0x9747B28C, 2**31, 2**32 - 1]
TAG_STR, TAG_BYTES = 0x03, 0x04
# Payload byte lengths around every tail case and block boundary (the encoding adds one byte).
EDGE_LENGTHS = [
    0,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    9,
    14,
    15,
    16,
    17,
    30,
    31,
    32,
    33,
    47,
    48,
    49,
    255,
    256,
    300,
]
MULTIBYTE = "é€𝄞中"  # 2, 3, 4 and 3 UTF-8 bytes


def edge_strings() -> list[str]:
    """ASCII and multi-byte strings whose UTF-8 length is each of ``EDGE_LENGTHS``."""
    out = []
    for n in EDGE_LENGTHS:
        out.append("".join(chr(ord("a") + i % 26) for i in range(n)))
        for char in MULTIBYTE:
            width = len(char.encode("utf-8"))
            if n >= width:
                # Multi-byte characters first, ASCII padding to the exact byte length.
                text = char * (n // width) + "z" * (n % width)
                assert len(text.encode("utf-8")) == n
                out.append(text)
    return out


def compiled(keys: Sequence[Any], tag: int, seed: int) -> tuple[int, np.ndarray, np.ndarray]:
    h1 = np.zeros(len(keys), np.uint64)
    h2 = np.zeros(len(keys), np.uint64)
    bad = murmur3.hash_tagged(keys, tag, seed, h1, h2)
    return bad, h1, h2


def reference(keys: Sequence[Any], seed: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.array([hash_key(k, seed) for k in keys], dtype=np.uint64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def outcome(fn: Callable[[], tuple[np.ndarray, np.ndarray]]) -> tuple[Any, ...]:
    """The hashes ``fn`` returns, or the type and message of what it raises."""
    try:
        h1, h2 = fn()
    except Exception as exc:  # noqa: BLE001 - any exception is part of the compared behaviour
        return ("raised", type(exc), str(exc))
    return ("hashed", h1.dtype, h1.tolist(), h2.tolist())


def legacy_hash_keys(keys: Any, seed: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """The outcome of :func:`hash_keys` with the compiled path disabled."""
    with monkeypatch.context() as patch:
        patch.setattr(hashing, "_hash_str_sequence", lambda _keys, _seed: None)
        return outcome(lambda: hash_keys(keys, seed))


class CountingMurmur3:
    """Stands in for the module, counting calls to ``hash_tagged`` and what they returned."""

    def __init__(self) -> None:
        self.results: list[int] = []

    def hash_tagged(self, *args: Any) -> int:
        result = murmur3.hash_tagged(*args)
        self.results.append(result)
        return result


# ------------------------------------------------------------------ the C loop against mmh3


@pytest.mark.parametrize("seed", SEEDS)
def test_edge_lengths_match_mmh3(seed: int) -> None:
    keys = edge_strings()
    bad, h1, h2 = compiled(keys, TAG_STR, seed)
    assert bad == -1
    ref1, ref2 = reference(keys, seed)
    np.testing.assert_array_equal(h1, ref1)
    np.testing.assert_array_equal(h2, ref2)


@pytest.mark.parametrize("seed", SEEDS)
def test_bytes_edge_lengths_match_mmh3(seed: int) -> None:
    keys = [s.encode("utf-8") for s in edge_strings()] + [bytes(range(256)) * 2, b"\x00" * 17]
    bad, h1, h2 = compiled(keys, TAG_BYTES, seed)
    assert bad == -1
    ref1, ref2 = reference(keys, seed)
    np.testing.assert_array_equal(h1, ref1)
    np.testing.assert_array_equal(h2, ref2)


@given(
    keys=st.lists(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=70)),
    seed=st.one_of(st.sampled_from(SEEDS), st.integers(0, 2**32 - 1)),
)
def test_random_strings_match_mmh3(keys: list[str], seed: int) -> None:
    bad, h1, h2 = compiled(keys, TAG_STR, seed)
    assert bad == -1
    ref1, ref2 = reference(keys, seed)
    np.testing.assert_array_equal(h1, ref1)
    np.testing.assert_array_equal(h2, ref2)


@given(keys=st.lists(st.binary(max_size=70)), seed=st.integers(0, 2**32 - 1))
def test_random_bytes_match_mmh3(keys: list[bytes], seed: int) -> None:
    bad, h1, h2 = compiled(keys, TAG_BYTES, seed)
    assert bad == -1
    ref1, ref2 = reference(keys, seed)
    np.testing.assert_array_equal(h1, ref1)
    np.testing.assert_array_equal(h2, ref2)


def test_tuple_and_other_sequences() -> None:
    keys = ("LAX-SFO", "é" * 9, "")
    ref1, ref2 = reference(keys, 5)
    for seq in (keys, list(keys), pa.array(keys).to_pylist()):
        bad, h1, h2 = compiled(seq, TAG_STR, 5)
        assert bad == -1
        np.testing.assert_array_equal(h1, ref1)
        np.testing.assert_array_equal(h2, ref2)


# ------------------------------------------------------------------ what the C loop refuses


class Text(str):
    pass


@pytest.mark.parametrize(
    ("keys", "tag", "first_bad"),
    [
        (["a", "b", 3, "d"], TAG_STR, 2),
        (["a", Text("b")], TAG_STR, 1),
        (["a", "b", "\ud800", "\udfff"], TAG_STR, 2),
        (["a", b"b"], TAG_STR, 1),
        ([None], TAG_STR, 0),
        ([b"a", "b"], TAG_BYTES, 1),
        ([b"a", bytearray(b"b")], TAG_BYTES, 1),
    ],
)
def test_reports_first_key_it_cannot_hash(keys: list[Any], tag: int, first_bad: int) -> None:
    bad, h1, h2 = compiled(keys, tag, 0)
    assert bad == first_bad
    # Keys before the refused one are hashed.
    ref1, ref2 = reference(keys[:first_bad], 0)
    np.testing.assert_array_equal(h1[:first_bad], ref1)
    np.testing.assert_array_equal(h2[:first_bad], ref2)


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((["a"], 5, 0), ValueError, "tag"),
        ((["a"], TAG_STR, -1), ValueError, "seed"),
        ((["a"], TAG_STR, 2**32), ValueError, "seed"),
        ((["a"], TAG_STR, 2**80), ValueError, "seed"),
        ((["a"], TAG_STR, 1.0), TypeError, "int"),
        ((5, TAG_STR, 0), TypeError, "sequence"),
    ],
)
def test_rejects_bad_arguments(args: tuple[Any, ...], exc: type[Exception], match: str) -> None:
    out = np.zeros(1, np.uint64)
    with pytest.raises(exc, match=match):
        murmur3.hash_tagged(*args, out, out.copy())


def test_rejects_short_or_read_only_buffers() -> None:
    small = np.zeros(1, np.uint64)
    with pytest.raises(ValueError, match="8 bytes per key"):
        murmur3.hash_tagged(["a", "b"], TAG_STR, 0, small, np.zeros(2, np.uint64))
    frozen = np.zeros(1, np.uint64)
    frozen.flags.writeable = False
    with pytest.raises((TypeError, BufferError, ValueError)):
        murmur3.hash_tagged(["a"], TAG_STR, 0, frozen, np.zeros(1, np.uint64))


# ------------------------------------------------------------------ hash_keys on lists of str


@given(
    keys=st.lists(
        st.one_of(
            st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40),
            st.sampled_from(edge_strings()),
        ),
        min_size=1,
    ),
    seed=st.sampled_from(SEEDS),
)
def test_list_equals_arrow_array(keys: list[str], seed: int) -> None:
    h1, h2 = hash_keys(keys, seed)
    a1, a2 = hash_keys(pa.array(keys, pa.string()), seed)
    assert h1.dtype == np.uint64 and h2.dtype == np.uint64
    np.testing.assert_array_equal(h1, a1)
    np.testing.assert_array_equal(h2, a2)


def test_list_equals_legacy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = edge_strings() * 3
    assert outcome(lambda: hash_keys(keys, 7)) == legacy_hash_keys(keys, 7, monkeypatch)


def test_compiled_path_is_taken_for_a_list_of_str(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = CountingMurmur3()
    monkeypatch.setattr(hashing, "murmur3", counting)

    def no_arrow(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a list of str must not be converted to Arrow")

    monkeypatch.setattr(pa, "array", no_arrow)
    keys = ["LAX-SFO", "JFK-LHR", "é" * 20]
    h1, h2 = hash_keys(keys, 3)
    assert counting.results == [-1]
    ref1, ref2 = reference(keys, 3)
    np.testing.assert_array_equal(h1, ref1)
    np.testing.assert_array_equal(h2, ref2)


@pytest.mark.parametrize(
    "keys",
    [
        ["a", 1, "b"],
        ["a", Text("b"), "c"],
        ["a", "\ud800"],
        ["\udc80", "a"],
        ["a", None],
        ["a", b"a"],
        ["a", 1.5],
        ["a", ("b", 1)],
        ["a", np.str_("b")],
    ],
    ids=[
        "int",
        "str-subclass",
        "surrogate",
        "leading-surrogate",
        "None",
        "bytes",
        "float",
        "tuple",
        "numpy-str",
    ],
)
def test_fallback_keeps_legacy_behaviour(keys: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    legacy = legacy_hash_keys(keys, 11, monkeypatch)
    counting = CountingMurmur3()
    monkeypatch.setattr(hashing, "murmur3", counting)
    assert outcome(lambda: hash_keys(keys, 11)) == legacy
    # The compiled loop was tried and refused the batch: the result came from the general path.
    assert len(counting.results) == 1 and counting.results[0] >= 0


def test_fallback_messages_name_types_not_values(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError, match="'float'") as info:
        hash_keys(["secret-a", 1.5], 0)
    assert "secret" not in str(info.value)
    with pytest.raises(TypeError, match="None"):
        hash_keys(["secret-a", None], 0)


@pytest.mark.parametrize("seed", [np.uint32(5), True, 2**32, -1, 2**64])
def test_unusual_seeds_keep_legacy_behaviour(seed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = ["a", "bb", "c" * 20]
    assert outcome(lambda: hash_keys(keys, seed)) == legacy_hash_keys(keys, seed, monkeypatch)


def test_empty_list_and_empty_strings() -> None:
    h1, h2 = hash_keys([], 0)
    assert h1.dtype == np.uint64 and len(h1) == len(h2) == 0
    h1, h2 = hash_keys(["", "", "x"], 9)
    ref1, ref2 = reference(["", "", "x"], 9)
    np.testing.assert_array_equal(h1, ref1)
    np.testing.assert_array_equal(h2, ref2)
