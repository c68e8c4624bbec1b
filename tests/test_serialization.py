"""Tests of the versioned binary format (``beam_dpsketch.serialization``) and of every sketch's
``to_bytes``/``from_bytes``: round trips, a seeded fuzz of malformed inputs (each must raise
``SketchFormatError``, never another exception), and CRC-valid but malformed contents.
"""

from __future__ import annotations

import json
import pickle
import struct
import tracemalloc
import zlib

import numpy as np
import pytest

from beam_dpsketch import serialization
from beam_dpsketch.hashing import encode_key
from beam_dpsketch.serialization import FORMAT_VERSION, MAGIC, SketchFormatError, dumps, loads
from beam_dpsketch.sketches import CountMinSketch, CountSketch, MisraGries

SKETCH_CLASSES = [CountMinSketch, CountSketch, MisraGries]


# --------------------------------------------------------------------------------------------
# Fixtures: small sketches in interesting states
# --------------------------------------------------------------------------------------------


def linear_examples(cls):
    rng = np.random.default_rng(7)
    empty = cls(5, 3, seed=11)
    small = cls(5, 3, seed=11).update(["a", "b", "a", 3, (1, "x"), b"z"])
    weighted = cls(8, 4, seed=2).update(rng.integers(0, 50, 300), rng.integers(-5, 6, 300))
    merged = cls(8, 4, seed=2).update(np.arange(20)).merge(cls(8, 4, seed=2).update(["q"] * 7))
    big = cls(1, 1, seed=2**32 - 1).update([2**70], [2**40])
    return {"empty": empty, "small": small, "weighted": weighted, "merged": merged, "big": big}


def mg_examples():
    empty = MisraGries(3)
    small = MisraGries(4).update(["a", "b", "a", 3, (1, "x")])  # one dummy left
    zero_keys = MisraGries(2).update([1, 2, 1, 3, 3, 4])  # A.1: {1:0, 3:0}, d = 2
    full = MisraGries(3).update([5, 1, 5, 2, 3, 5, 4, 4, 4])  # A.1: {2:0, 4:3, 5:2}
    mixed = MisraGries(5).update(
        [b"x", "x", 7, -(2**70), ("t", b"u"), True, "x"], [1, 2, 3, 1, 1, 4, 5]
    )
    merged = MisraGries(3).update([1, 1, 2, 3]).merge(MisraGries(3).update([4, 4, 5, 6, 1]))
    merged_then_updated = merged.copy().update([9, 9, 8])
    return {
        "empty": empty,
        "small": small,
        "zero_keys": zero_keys,
        "full": full,
        "mixed": mixed,
        "merged": merged,
        "merged_then_updated": merged_then_updated,
    }


def all_examples():
    out = []
    for cls in (CountMinSketch, CountSketch):
        out += [(f"{cls.__name__}-{name}", sk) for name, sk in linear_examples(cls).items()]
    out += [(f"MisraGries-{name}", sk) for name, sk in mg_examples().items()]
    return out


EXAMPLES = all_examples()


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, sketch", EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_round_trip(name, sketch):
    data = sketch.to_bytes()
    assert isinstance(data, bytes) and data[:4] == MAGIC
    back = type(sketch).from_bytes(data)
    assert back == sketch
    assert back.to_bytes() == data  # the encoding is deterministic
    assert type(sketch).from_bytes(bytearray(data)) == sketch
    assert type(sketch).from_bytes(memoryview(data)) == sketch
    assert pickle.loads(pickle.dumps(sketch)) == sketch
    # The restored sketch behaves identically from here on.
    probe = ["a", 3, 9, (1, "x"), b"z", 2**70, "never"]
    np.testing.assert_array_equal(back.estimate(probe), sketch.estimate(probe))
    if isinstance(sketch, MisraGries):
        assert back.slots() == sketch.slots()
        assert back.to_dict() == sketch.to_dict()
        assert (back.n, back.d, back.merged) == (sketch.n, sketch.d, sketch.merged)
        more = [9, 1, "a", 5, 5, 42, 9, 9]
        assert back.update(more) == sketch.copy().update(more)
    else:
        assert back.table.dtype == np.int64
        more = ["a", 1, 1, "zz"]
        assert back.update(more) == sketch.copy().update(more)


def test_mg_round_trip_keeps_dummies_and_zero_count_keys():
    sk = MisraGries(2).update([1, 2, 1, 3, 3, 4])
    assert sk.slots() == [(1, 0), (3, 0)]
    back = MisraGries.from_bytes(sk.to_bytes())
    assert back.slots() == [(1, 0), (3, 0)]
    # The next new key replaces the smallest zero key (1), in both.
    assert back.update([7]).slots() == sk.update([7]).slots() == [(3, 0), (7, 1)]
    sk = MisraGries(4).update(["b", "a"])
    back = MisraGries.from_bytes(sk.to_bytes())
    assert back.slots() == [(None, 0), (None, 0), ("a", 1), ("b", 1)]


def test_dumps_loads_round_trip_of_all_allowed_dtypes():
    arrays = {
        "i8": np.array([[1, -2], [3, 2**62]], dtype="<i8"),
        "u8": np.array([2**64 - 1], dtype="<u8"),
        "i4": np.arange(6, dtype="<i4").reshape(1, 2, 3),
        "u4": np.array([], dtype="<u4"),
        "f8": np.array([0.5, -np.inf]),
        "u1": np.frombuffer(b"\x00\xff", dtype="|u1"),
        "i1": np.array([-128, 127], dtype="|i1"),
        "b1": np.array([True, False]),
        "be": np.array([1, 2], dtype=">i8"),  # big-endian input is stored little-endian
        "fortran": np.asfortranarray(np.arange(6, dtype="<i8").reshape(2, 3)),
        "strided": np.arange(10, dtype="<i8")[::3],
    }
    params = {"a": 1, "b": [1, "x"], "c": {"d": None}, "e": True}
    kind, p, arrs = loads(dumps("Thing", params, arrays), expected_kind="Thing")
    assert kind == "Thing" and p == params and list(arrs) == list(arrays)
    for name, arr in arrays.items():
        np.testing.assert_array_equal(arrs[name], arr)
        assert arrs[name].shape == arr.shape
        assert arrs[name].flags.writeable  # a copy, not a view on the input
    with pytest.raises(TypeError, match="dtype"):
        dumps("Thing", {}, {"x": np.array(["a"])})


def test_dumps_loads_round_trip_keeps_zero_dimensional_arrays():
    # The format stores ndim = 0 (no dimensions, one element), so a 0-d array must come back 0-d.
    _, _, arrs = loads(dumps("Thing", {}, {"scalar": np.array(5, dtype="<i8")}))
    assert arrs["scalar"].shape == ()
    assert arrs["scalar"] == 5


# --------------------------------------------------------------------------------------------
# Fuzz: every mutation must raise SketchFormatError (and nothing else)
# --------------------------------------------------------------------------------------------


def _crc(body: bytes) -> bytes:
    return struct.pack("<I", zlib.crc32(body))


def _mutations(data: bytes, rng: np.random.Generator, n_random: int):
    """Yield (description, mutated bytes) for one serialized sketch. Seeded and deterministic."""
    n = len(data)
    for length in range(n):  # every truncation
        yield f"truncate to {length}", data[:length]
    for pos in range(n):  # every single-byte flip
        flip = int(rng.integers(1, 256))
        yield f"flip byte {pos} ^ {flip}", data[:pos] + bytes([data[pos] ^ flip]) + data[pos + 1 :]
    for pos in range(0, n, 7):  # every single-bit flip in a sample of bytes
        for bit in range(8):
            yield (
                f"bit {bit} of byte {pos}",
                data[:pos] + bytes([data[pos] ^ (1 << bit)]) + data[pos + 1 :],
            )
    for i in range(n_random):
        buf = bytearray(data)
        op = i % 4
        if op == 0:  # several random byte changes
            for _ in range(int(rng.integers(2, 6))):
                pos = int(rng.integers(0, len(buf)))
                buf[pos] ^= int(rng.integers(1, 256))
            desc = "multi-flip"
        elif op == 1:  # insertion
            pos = int(rng.integers(0, len(buf) + 1))
            buf[pos:pos] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
            desc = f"insert at {pos}"
        elif op == 2:  # deletion
            pos = int(rng.integers(0, len(buf)))
            del buf[pos : pos + int(rng.integers(1, 9))]
            desc = f"delete at {pos}"
        else:  # append garbage
            buf += rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
            desc = "append"
        yield desc, bytes(buf)


def test_fuzz_mutations_raise_sketch_format_error():
    rng = np.random.default_rng(20240601)
    bases = [
        CountMinSketch(3, 2, seed=5).update(["a", "b", 1]),
        CountSketch(3, 2, seed=5).update(["a", "b", 1], [3, -2, 1]),
        MisraGries(3).update([1, "a", 1, b"b"]),
        MisraGries(2).update([1, 2, 1, 3, 3, 4]),  # zero-count keys
        MisraGries(2).update([5, 5]).merge(MisraGries(2).update([6, 7, 7])),
    ]
    total = 0
    failures: list[str] = []
    for base in bases:
        cls = type(base)
        data = base.to_bytes()
        assert cls.from_bytes(data) == base
        for desc, bad in _mutations(data, rng, n_random=1400):
            if bad == data:
                continue
            total += 1
            try:
                cls.from_bytes(bad)
            except SketchFormatError:
                continue
            except Exception as exc:
                failures.append(f"{cls.__name__} {desc}: {type(exc).__name__}: {exc}"[:200])
                continue
            failures.append(f"{cls.__name__} {desc}: decoded without error")
        # wrong kind: the bytes of one class given to another
        for other in SKETCH_CLASSES:
            if other is not cls:
                with pytest.raises(SketchFormatError, match=cls.KIND):
                    other.from_bytes(data)
                total += 1
        # wrong version, with a valid checksum so only the version check can catch it
        body = data[:-4]
        for version in [0, FORMAT_VERSION + 1, 0xFFFF]:
            bad = body[:4] + struct.pack("<H", version) + body[6:]
            with pytest.raises(SketchFormatError, match="version"):
                cls.from_bytes(bad + _crc(bad))
            total += 1
        # not bytes at all
        for junk in [None, "DPSK", 12, [1, 2], np.frombuffer(data, dtype=np.uint8)]:
            with pytest.raises(SketchFormatError):
                cls.from_bytes(junk)
            total += 1
    assert not failures, f"{len(failures)} failures, e.g.:\n" + "\n".join(failures[:20])
    assert total >= 10_000, total


def _assert_valid_sketch(sketch, cls):
    """A decoded sketch must be a usable, self-consistent object of the right class."""
    assert type(sketch) is cls
    probe = ["a", 1, b"b", (1, "x")]
    if cls is MisraGries:
        assert 1 <= sketch.k <= 1 << 24
        slots = sketch.slots()
        assert len(slots) == sketch.k
        counts = [c for _, c in slots]
        assert all(type(c) is int and c >= 0 for c in counts)
        assert type(sketch.n) is int and sketch.n >= 0
        assert type(sketch.d) is int and sketch.d >= 0
        assert type(sketch.merged) is bool
        assert sketch.estimate(probe).shape == (4,)
        assert MisraGries.from_bytes(sketch.to_bytes()) == sketch
        after = sketch.copy().update(["fresh1", "fresh2", 1, 1])
        assert len(after.slots()) == sketch.k
        merged = sketch.copy().merge(MisraGries(sketch.k).update([1, 2]))
        assert len(merged.to_dict()) <= sketch.k
    else:
        assert 1 <= sketch.width <= 1 << 31 and 1 <= sketch.depth <= 64
        assert 0 <= sketch.seed < 1 << 32
        assert sketch.table.dtype == np.int64 and sketch.table.shape == (sketch.depth, sketch.width)
        assert type(sketch.total_weight) is int
        assert sketch.estimate(probe).shape == (4,)
        assert cls.from_bytes(sketch.to_bytes()) == sketch
        sketch.copy().update(probe).merge(cls(sketch.width, sketch.depth, sketch.seed))


def test_fuzz_crc_valid_mutations_raise_or_decode_to_a_valid_sketch():
    # Mutate the body and recompute the checksum, so the parser itself is exercised.
    rng = np.random.default_rng(99)
    bases = [
        CountMinSketch(3, 2, seed=5).update(["a", "b", 1]),
        CountSketch(2, 2, seed=5).update(["a", "b"], [3, -2]),
        MisraGries(3).update([1, "a", 1, b"b", (2, "t")]),
        MisraGries(2).update([1, 2, 1, 3, 3, 4]),
    ]
    outcomes = {"error": 0, "valid": 0}
    failures: list[str] = []
    for base in bases:
        cls = type(base)
        body = base.to_bytes()[:-4]
        for desc, bad in _mutations(body, rng, n_random=600):
            data = bad + _crc(bad)
            try:
                sketch = cls.from_bytes(data)
            except SketchFormatError:
                outcomes["error"] += 1
                continue
            except Exception as exc:
                failures.append(f"{cls.__name__} {desc}: {type(exc).__name__}: {exc}"[:200])
                continue
            try:
                _assert_valid_sketch(sketch, cls)
            except Exception as exc:
                failures.append(
                    f"{cls.__name__} {desc}: invalid sketch: {type(exc).__name__}: {exc}"[:200]
                )
                continue
            outcomes["valid"] += 1
    assert not failures, f"{len(failures)} failures, e.g.:\n" + "\n".join(failures[:20])
    assert outcomes["error"] > 1000 and outcomes["valid"] > 50, outcomes


# --------------------------------------------------------------------------------------------
# Hand-built, CRC-valid malformed contents
# --------------------------------------------------------------------------------------------


def frame(kind: bytes, params: bytes, arrays: list[bytes], version: int = FORMAT_VERSION) -> bytes:
    """Assemble raw sketch bytes (any content) with a correct checksum."""
    body = MAGIC + struct.pack("<H", version) + bytes([len(kind)]) + kind
    body += (
        struct.pack("<I", len(params)) + params + struct.pack("<H", len(arrays)) + b"".join(arrays)
    )
    return body + _crc(body)


def raw_array(
    name: bytes, dtype: bytes, shape: tuple[int, ...], data: bytes, nbytes: int | None = None
) -> bytes:
    out = bytes([len(name)]) + name + bytes([len(dtype)]) + dtype + bytes([len(shape)])
    out += b"".join(struct.pack("<Q", d) for d in shape)
    return out + struct.pack("<Q", len(data) if nbytes is None else nbytes) + data


def cm_bytes(params=None, arrays=None, kind="CountMinSketch"):
    p = {"width": 2, "depth": 2, "seed": 0, "total_weight": 0}
    if params:
        p.update(params)
    p = {k: v for k, v in p.items() if v is not DELETE}
    a = {"table": np.zeros((2, 2), np.int64)} if arrays is None else arrays
    return dumps(kind, p, a)


def mg_bytes(params=None, arrays=None):
    keys = [encode_key(1), encode_key("a")]
    data, offsets = serialization.pack_bytes_list(keys)
    p = {"k": 3, "n": 3, "d": 0, "merged": False}
    if params:
        p.update(params)
    p = {k: v for k, v in p.items() if v is not DELETE}
    a = {
        "key_data": data,
        "key_offsets": offsets,
        "counts": np.array([2, 1], np.int64),
        "dummy_ids": np.array([0], np.int64),
    }
    if arrays:
        a.update(arrays)
    a = {k: v for k, v in a.items() if v is not DELETE}
    return dumps("MisraGries", p, a)


DELETE = object()
I8 = np.int64


def test_hand_built_baselines_are_valid():
    # The builders produce valid sketches when nothing is malformed, so the cases below test one
    # defect at a time.
    assert CountMinSketch.from_bytes(cm_bytes()) == CountMinSketch(2, 2, 0)
    assert CountSketch.from_bytes(cm_bytes(kind="CountSketch")) == CountSketch(2, 2, 0)
    mg = MisraGries.from_bytes(mg_bytes())
    assert mg.slots() == [(None, 0), (1, 2), ("a", 1)] and mg.n == 3


LINEAR_MALFORMED = {
    "width 0": cm_bytes({"width": 0}, {"table": np.zeros((2, 0), I8)}),
    "depth 65": cm_bytes({"depth": 65}, {"table": np.zeros((65, 2), I8)}),
    "width too large": cm_bytes({"width": 2**31 + 1}),
    "seed -1": cm_bytes({"seed": -1}),
    "seed 2**32": cm_bytes({"seed": 2**32}),
    "width float": cm_bytes({"width": 2.0}),
    "width bool": cm_bytes({"width": True}),
    "width str": cm_bytes({"width": "2"}),
    "width null": cm_bytes({"width": None}),
    "missing width": cm_bytes({"width": DELETE}),
    "missing seed": cm_bytes({"seed": DELETE}),
    "missing total_weight": cm_bytes({"total_weight": DELETE}),
    "total_weight float": cm_bytes({"total_weight": 1.5}),
    "total_weight bool": cm_bytes({"total_weight": False}),
    "missing table": cm_bytes(arrays={}),
    "table renamed": cm_bytes(arrays={"tabel": np.zeros((2, 2), I8)}),
    "table wrong shape": cm_bytes(arrays={"table": np.zeros((2, 3), I8)}),
    "table transposed shape": cm_bytes({"width": 3}, {"table": np.zeros((3, 2), I8)}),
    "table 1-d": cm_bytes(arrays={"table": np.zeros(4, I8)}),
    "table 3-d": cm_bytes(arrays={"table": np.zeros((2, 2, 1), I8)}),
    "table int32": cm_bytes(arrays={"table": np.zeros((2, 2), np.int32)}),
    "table uint64": cm_bytes(arrays={"table": np.zeros((2, 2), np.uint64)}),
    "table float64": cm_bytes(arrays={"table": np.zeros((2, 2), np.float64)}),
    "table bool": cm_bytes(arrays={"table": np.zeros((2, 2), bool)}),
    "params not an object": frame(b"CountMinSketch", b"[1,2]", []),
    "params not json": frame(b"CountMinSketch", b"{width:2}", []),
    "params not utf-8": frame(b"CountMinSketch", b'{"\xff":1}', []),
    "params NaN width": frame(
        b"CountMinSketch", b'{"width":NaN,"depth":2,"seed":0,"total_weight":0}', []
    ),
}


@pytest.mark.parametrize("cls", [CountMinSketch, CountSketch])
@pytest.mark.parametrize("case", list(LINEAR_MALFORMED))
def test_linear_malformed_contents_raise(cls, case):
    data = LINEAR_MALFORMED[case]
    if cls is CountSketch:  # same contents, other kind name
        _, params, arrays = _loads_lenient(data)
        if params is not None:
            data = dumps("CountSketch", params, arrays)
        else:
            data = data.replace(b"\x0eCountMinSketch", b"\x0bCountSketch")
            data = data[:-4] + _crc(data[:-4])
    with pytest.raises(SketchFormatError):
        cls.from_bytes(data)


def _loads_lenient(data):
    try:
        _, params, arrays = loads(data)
        return None, params, arrays
    except SketchFormatError:
        return None, None, None


MG_MALFORMED = {
    "k 0": mg_bytes({"k": 0}),
    "k negative": mg_bytes({"k": -3}),
    "k too large": mg_bytes({"k": 2**24 + 1}),
    "k float": mg_bytes({"k": 3.0}),
    "k bool": mg_bytes({"k": True}),
    "k mismatch (too many slots)": mg_bytes({"k": 2}),
    "k mismatch (too few slots)": mg_bytes({"k": 4}),
    "missing k": mg_bytes({"k": DELETE}),
    "missing n": mg_bytes({"n": DELETE}),
    "missing d": mg_bytes({"d": DELETE}),
    "missing merged": mg_bytes({"merged": DELETE}),
    "merged int": mg_bytes({"merged": 1}),
    "n negative": mg_bytes({"n": -1}),
    "d negative": mg_bytes({"d": -1}),
    "n str": mg_bytes({"n": "3"}),
    "negative count": mg_bytes(arrays={"counts": np.array([2, -1], I8)}),
    "counts wrong length": mg_bytes(arrays={"counts": np.array([2, 1, 0], I8)}),
    "counts 2-d": mg_bytes(arrays={"counts": np.array([[2, 1]], I8)}),
    "counts int32": mg_bytes(arrays={"counts": np.array([2, 1], np.int32)}),
    "counts float": mg_bytes(arrays={"counts": np.array([2.0, 1.0])}),
    "counts uint64": mg_bytes(arrays={"counts": np.array([2, 1], np.uint64)}),
    "missing counts": mg_bytes(arrays={"counts": DELETE}),
    "missing key_data": mg_bytes(arrays={"key_data": DELETE}),
    "missing key_offsets": mg_bytes(arrays={"key_offsets": DELETE}),
    "missing dummy_ids": mg_bytes(arrays={"dummy_ids": DELETE}),
    "dummy_ids 2-d": mg_bytes(arrays={"dummy_ids": np.array([[0]], I8)}),
    "dummy_ids float": mg_bytes(arrays={"dummy_ids": np.array([0.0])}),
    "duplicate dummy ids": mg_bytes({"k": 4}, {"dummy_ids": np.array([0, 0], I8)}),
    "offsets not starting at 0": mg_bytes(arrays={"key_offsets": np.array([1, 9, 11], I8)}),
    "offsets decreasing": mg_bytes(arrays={"key_offsets": np.array([0, 11, 9], I8)}),
    "offsets past the data": mg_bytes(arrays={"key_offsets": np.array([0, 9, 12], I8)}),
    "offsets short of the data": mg_bytes(arrays={"key_offsets": np.array([0, 9, 10], I8)}),
    "offsets empty": mg_bytes(
        {"k": 1}, {"key_offsets": np.array([], I8), "counts": np.array([], I8)}
    ),
    "offsets int32": mg_bytes(arrays={"key_offsets": np.array([0, 9, 11], np.int32)}),
    "key_data int8": mg_bytes(arrays={"key_data": np.zeros(11, np.int8)}),
    "key_data 2-d": mg_bytes(arrays={"key_data": np.zeros((1, 11), np.uint8)}),
    "malformed key": mg_bytes(
        arrays={"key_data": np.frombuffer(b"\x00" * 9 + b"\xfe\x07", np.uint8)}
    ),
    "invalid utf-8 key": mg_bytes(
        arrays={"key_data": np.frombuffer(b"\x00" * 9 + b"\xff\x03", np.uint8)}
    ),
    "duplicate keys": mg_bytes(
        arrays={
            "key_data": np.frombuffer(encode_key(1) * 2, np.uint8),
            "key_offsets": np.array([0, 9, 18], I8),
        }
    ),
}


@pytest.mark.parametrize("case", list(MG_MALFORMED))
def test_mg_malformed_contents_raise(case):
    with pytest.raises(SketchFormatError):
        MisraGries.from_bytes(MG_MALFORMED[case])


def test_malformed_framing_raises():
    good_array = raw_array(b"table", b"<i8", (2, 2), bytes(32))
    params = json.dumps({"width": 2, "depth": 2, "seed": 0, "total_weight": 0}).encode()
    assert CountMinSketch.from_bytes(
        frame(b"CountMinSketch", params, [good_array])
    ) == CountMinSketch(2, 2, 0)
    cases = {
        "bad magic": b"DPSX" + frame(b"CountMinSketch", params, [good_array])[4:],
        "empty": b"",
        "magic only": MAGIC,
        "unknown dtype": frame(
            b"CountMinSketch", params, [raw_array(b"table", b"<i2", (2, 2), bytes(8))]
        ),
        "object dtype": frame(
            b"CountMinSketch", params, [raw_array(b"table", b"|O", (2, 2), bytes(32))]
        ),
        "big-endian dtype": frame(
            b"CountMinSketch", params, [raw_array(b"table", b">i8", (2, 2), bytes(32))]
        ),
        "shape/length mismatch": frame(
            b"CountMinSketch", params, [raw_array(b"table", b"<i8", (2, 2), bytes(24))]
        ),
        "length past end": frame(
            b"CountMinSketch", params, [raw_array(b"table", b"<i8", (2, 2), bytes(32), nbytes=40)]
        ),
        "huge declared length": frame(
            b"CountMinSketch",
            params,
            [raw_array(b"table", b"<i8", (2**61, 1), b"", nbytes=2**64 - 8)],
        ),
        "non-ascii array name": frame(
            b"CountMinSketch", params, [raw_array(b"t\xffble", b"<i8", (2, 2), bytes(32))]
        ),
        "non-ascii kind": frame(b"CountMin\xffketch", params, [good_array]),
        "trailing bytes": frame(b"CountMinSketch", params, [good_array + b"\x00"]),
        "array count too high": frame(b"CountMinSketch", params, [good_array])[:-4].replace(
            b"\x01\x00\x05table", b"\x02\x00\x05table"
        ),
        "duplicate array name": frame(
            b"CountMinSketch", params, [good_array, raw_array(b"table", b"<i8", (1,), bytes(8))]
        ),
        "params length past end": frame(b"CountMinSketch", b"", [])[:-10] + struct.pack("<I", 1000),
    }
    for name, data in cases.items():
        if name in ("array count too high", "params length past end"):
            data = data + _crc(data)
        try:
            CountMinSketch.from_bytes(data)
        except SketchFormatError:
            continue
        except Exception as exc:  # pragma: no cover - reported below
            pytest.fail(f"{name}: raised {type(exc).__name__}: {exc}")
        if name == "duplicate array name":
            continue  # a later array of the same name may legitimately win if it is valid
        pytest.fail(f"{name}: decoded without error")


# Inputs that exercise the decoder's handling of adversarial sizes. Each is a few hundred bytes with
# a valid checksum; each must be rejected with SketchFormatError (a ValueError subclass is not
# enough: callers catch SketchFormatError), quickly and without large allocations.
ADVERSARIAL = {
    "deeply nested JSON params": frame(b"CountMinSketch", b"[" * 100_000 + b"]" * 100_000, []),
    "JSON int with 5000 digits": frame(b"CountMinSketch", b'{"width":' + b"9" * 5000 + b"}", []),
    "array with 65 dimensions": frame(
        b"CountMinSketch", b"{}", [raw_array(b"table", b"<i8", (1,) * 65, bytes(8))]
    ),
    "dimension above 2**63": frame(
        b"CountMinSketch", b"{}", [raw_array(b"table", b"<i8", (0, 2**64 - 1), b"")]
    ),
    "width*depth of a terabyte": cm_bytes({"width": 2**31, "depth": 64}),
    "MG key nested 5000 deep": None,  # built below
}


def _deep_tuple_key(depth: int) -> bytes:
    enc = b"\x05"  # the empty tuple
    for _ in range(depth):
        n = len(enc)
        length = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            length.append(byte | (0x80 if n else 0))
            if not n:
                break
        enc = bytes(length) + enc + b"\x05"
    return enc


_deep = np.frombuffer(_deep_tuple_key(5000), np.uint8)
ADVERSARIAL["MG key nested 5000 deep"] = mg_bytes(
    {"k": 1, "n": 1},
    {
        "key_data": _deep,
        "key_offsets": np.array([0, len(_deep)], I8),
        "counts": np.array([1], I8),
        "dummy_ids": np.array([], I8),
    },
)


@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_adversarial_sizes_raise_sketch_format_error(case):
    data = ADVERSARIAL[case]
    cls = MisraGries if case.startswith("MG") else CountMinSketch
    with pytest.raises(SketchFormatError):
        cls.from_bytes(data)


@pytest.mark.parametrize(
    "cls, params",
    [
        (MisraGries, {"k": 1 << 16, "n": 0, "d": 0, "merged": False}),
        (CountMinSketch, {"width": 1 << 20, "depth": 8, "seed": 0, "total_weight": 0}),
        (CountSketch, {"width": 1 << 20, "depth": 8, "seed": 0, "total_weight": 0}),
    ],
)
def test_rejecting_small_bytes_does_not_allocate_what_the_params_claim(cls, params):
    # A ~200-byte input whose params claim a huge sketch but whose arrays are empty/tiny must be
    # rejected without building the huge sketch first ("never allocate more than the input
    # implies", serialization module docstring). Measured with tracemalloc: peak < 4 MB, while
    # building the claimed sketch takes 64 MB (linear) or ~10 MB of dummy slots (k = 65536).
    if cls is MisraGries:
        data, offsets = serialization.pack_bytes_list([])
        arrays = {
            "key_data": data,
            "key_offsets": offsets,
            "counts": np.zeros(0, I8),
            "dummy_ids": np.zeros(0, I8),
        }
    else:
        arrays = {"table": np.zeros((1, 1), I8)}
    data = dumps(cls.KIND, params, arrays)
    assert len(data) < 300
    tracemalloc.start()
    try:
        with pytest.raises(SketchFormatError):
            cls.from_bytes(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MB to reject {len(data)} bytes"


def test_mg_decoder_rejects_inconsistent_counters():
    # docs/algorithms.md#mg-oracles invariant 2: for Algorithm 1, sum of counters == n - (k+1) d, and
    # after Agarwal merges sum + (k+1) d <= n (each merge removes at least (k+1) v). Bytes that
    # violate this cannot come from any stream (e.g. counters summing to more than n) and would
    # make the post-processed release's offset n/(k+1) - d negative; they are malformed state.
    cases = {
        "counters sum above n": mg_bytes({"n": 1}),
        "d above n/(k+1)": mg_bytes({"n": 3, "d": 5}),
        "merged, counters sum above n": mg_bytes({"n": 1, "merged": True}),
    }
    for name, data in cases.items():
        with pytest.raises(SketchFormatError):
            MisraGries.from_bytes(data)
            pytest.fail(name)


def test_count_min_decoder_rejects_inconsistent_rows():
    # Every Count-Min update adds each weight to exactly one cell per row, so every row sums to
    # total_weight (mod 2**64, as the table is int64). A table violating this is malformed state.
    cases = {
        "rows with different sums": cm_bytes(
            {"total_weight": 1}, {"table": np.array([[1, 0], [0, 0]], I8)}
        ),
        "total_weight not the row sum": cm_bytes(
            {"total_weight": 5}, {"table": np.array([[1, 0], [0, 1]], I8)}
        ),
    }
    for name, data in cases.items():
        with pytest.raises(SketchFormatError):
            CountMinSketch.from_bytes(data)
            pytest.fail(name)


def test_require_helpers():
    assert serialization.require({"a": 3}, "a", int) == 3
    with pytest.raises(SketchFormatError):
        serialization.require({"a": True}, "a", int)
    assert serialization.require({"a": True}, "a", bool) is True
    with pytest.raises(SketchFormatError):
        serialization.require({}, "a", int)
    arr = np.zeros((2, 3), I8)
    assert serialization.require_array({"x": arr}, "x", "<i8", (2, 3)) is arr
    with pytest.raises(SketchFormatError):
        serialization.require_array({"x": arr}, "x", "<i8", (3, 2))
    with pytest.raises(SketchFormatError):
        serialization.require_array({"x": arr}, "x", "<i4")
    with pytest.raises(SketchFormatError):
        serialization.require_array({}, "x", "<i8")


def test_pack_unpack_bytes_list():
    items = [b"", b"a", b"\x00\xff", b"", b"xyz" * 50]
    data, offsets = serialization.pack_bytes_list(items)
    assert serialization.unpack_bytes_list(data, offsets) == items
    data, offsets = serialization.pack_bytes_list([])
    assert serialization.unpack_bytes_list(data, offsets) == []
    for bad_offsets in [np.array([], I8), np.array([1, 2], I8), np.array([0, 5, 3], I8)]:
        with pytest.raises(SketchFormatError):
            serialization.unpack_bytes_list(np.zeros(3, np.uint8), bad_offsets)
    with pytest.raises(SketchFormatError):
        serialization.unpack_bytes_list(np.zeros(3, np.int8), np.array([0, 3], I8))
