"""The compiled arrival-order update equals Algorithm 1 run one key at a time.

``MisraGries.update`` sends batches of at least 1,024 keys that code to int64 (ints, or strs /
bytes by their rank) through the C loop of ``misra_gries/kernel.c``; smaller batches and mixed
key types stay on the Python loop. Both must give the naive reference's slots exactly, for every
input form, from empty and non-empty starting states (zero-count keys, dummy ids listed rather
than a range) and across several calls, with small ``k`` so that every branch (hit, dummy,
zero-key replacement, decrement) runs thousands of times.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from oracles import NaiveMG

from beam_dpsketch import serialization
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import kernel

BATCH = 1500


def zipf_ints(seed: int, n: int, universe: int, shift: int = -5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.3, n) % universe + shift).astype(np.int64)


def as_words(ints: np.ndarray) -> list[str]:
    # Non-ASCII strings of every storage width (é, 漢, 😀) and strings that extend one another
    # or share their first eight UTF-8 bytes: code-point order must match the kernel's.
    lead = ("é", "e", "漢", "😀", "prefix-0", "prefix-0x")
    return [lead[v % 6] + "x" * (v % 4) + str(v) for v in ints.tolist()]


FORMS = {
    "numpy int64": lambda v: v,
    # Keys spread over the int64 range take the kernel's hashed table, not its direct array.
    "numpy int64 spread": lambda v: v * (1 << 40) + 3,
    "numpy int32": lambda v: v.astype(np.int32),
    "numpy uint64": lambda v: (v + 5).astype(np.uint64),
    "numpy bool": lambda v: (v % 2).astype(bool),
    "arrow int16": lambda v: pa.array(v, pa.int16()),
    "arrow dictionary int": lambda v: pa.array(v).dictionary_encode(),
    "list int": lambda v: v.tolist(),
    "arrow string": lambda v: pa.array(as_words(v)),
    "arrow large_string": lambda v: pa.array(as_words(v), pa.large_string()),
    "arrow dictionary string": lambda v: pa.array(as_words(v)).dictionary_encode(),
    "arrow chunked string": lambda v: pa.chunked_array(
        [as_words(v[: len(v) // 2]), as_words(v[len(v) // 2 :])]
    ),
    "arrow binary": lambda v: pa.array([w.encode() for w in as_words(v)], pa.binary()),
    "list str": as_words,
}


def plain_keys(batch) -> list:
    if isinstance(batch, pa.Array | pa.ChunkedArray):
        return batch.to_pylist()
    if isinstance(batch, np.ndarray):
        return [int(x) for x in batch.tolist()]
    return list(batch)


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the calls that reach the C loop."""
    calls = []

    def counting(real):
        def counted(*args):
            calls.append(len(args[0]))
            return real(*args)

        return counted

    for name in ("update_unit", "update_strs"):
        monkeypatch.setattr(kernel, name, counting(getattr(kernel, name)))
    return calls


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("k", [1, 2, 7, 64])
def test_batches_match_the_naive_reference(form, k, kernel_calls):
    batches = [FORMS[form](zipf_ints(seed, BATCH + 97 * seed, 40 + 30 * seed)) for seed in range(3)]
    sketch = MisraGries(k)
    naive = NaiveMG(k)
    for batch in batches:
        sketch.update(batch)
        naive.extend(plain_keys(batch))
        assert sketch.slots() == naive.slots()
        assert (sketch.n, sketch.error_bound()) == (naive.n, naive.d)
    assert len(kernel_calls) == len(batches), "every batch should take the compiled path"
    assert MisraGries.from_bytes(sketch.to_bytes()) == sketch


@pytest.mark.parametrize("form", ["numpy int64", "list str", "arrow binary"])
def test_compiled_and_python_loops_agree_from_any_state(form, kernel_calls):
    """A state left by the Python loop (small batches, zero-count keys, a partly used range of
    dummies) continues identically on either loop."""
    k = 12
    keys = FORMS[form](zipf_ints(11, 4 * BATCH, 60))
    head, tail = keys[:300], keys[300:]
    start = MisraGries(k).update(head)
    assert not kernel_calls
    assert any(c == 0 for _, c in start.key_slots()) or start.dummy_slots
    compiled = MisraGries.from_bytes(start.to_bytes()).update(tail)
    assert kernel_calls
    python = MisraGries.from_bytes(start.to_bytes())
    for i in range(0, len(tail), 500):  # below the compiled path's batch size
        python.update(tail[i : i + 500])
    assert len(kernel_calls) == 1
    assert compiled == python
    assert compiled.to_bytes() == python.to_bytes()
    assert compiled.slots() == NaiveMG(k).extend(plain_keys(keys)).slots()


def with_listed_dummies(sketch: MisraGries) -> MisraGries:
    """``sketch`` with its dummy slots given as a list of ids that is not a range (a form the
    format accepts and a decoded sketch keeps)."""
    _, params, arrays = serialization.loads(sketch.to_bytes())
    start, stop = params.pop("dummy_range")
    arrays["dummy_ids"] = (np.arange(start, stop, dtype=np.int64) * 3) + 1
    return MisraGries.from_bytes(serialization.dumps(MisraGries.KIND, params, arrays))


def test_listed_dummies_are_used_in_order(kernel_calls):
    """Dummy ids that are not a range are consumed first, smallest id first, by either loop."""
    listed = with_listed_dummies(MisraGries(6).update([1, 2]))
    assert "dummy_range" not in serialization.loads(listed.to_bytes())[1]
    keys = zipf_ints(3, 3000, 30)
    compiled = listed.copy().update(keys)
    assert kernel_calls
    python = listed.copy()
    for i in range(0, len(keys), 500):
        python.update(keys[i : i + 500])
    assert len(kernel_calls) == 1
    assert compiled == python  # equality includes the ids of the dummies left
    assert compiled.slots() == NaiveMG(6).extend([1, 2, *keys.tolist()]).slots()
    # A batch that leaves dummies unused keeps the remaining ids, in order.
    few = with_listed_dummies(MisraGries(3000).update([1, 2])).update(np.arange(10, 1034))
    assert few == with_listed_dummies(MisraGries(3000).update([1, 2])).update(
        np.arange(10, 1034).tolist()[:500]
    ).update(np.arange(10, 1034).tolist()[500:])


@pytest.mark.parametrize(
    "batch",
    [
        [1, "a"] * 700,  # mixed key types
        [2**70, 1] * 700,  # an int beyond int64
        [(1, "x"), (2, "y")] * 700,  # tuples
        [b"a", "a"] * 700,  # bytes and str
    ],
    ids=["int and str", "big int", "tuples", "bytes and str"],
)
def test_keys_the_kernel_cannot_code_stay_on_the_python_loop(batch, kernel_calls):
    sketch = MisraGries(3).update(batch)
    assert not kernel_calls
    assert sketch.slots() == NaiveMG(3).extend(batch).slots()


def test_held_keys_of_another_type_keep_the_python_loop(kernel_calls):
    """A sketch holding strs fed an int batch mixes key types: the Python loop orders them."""
    sketch = MisraGries(4).update(["b", "a"])
    ints = zipf_ints(5, 2000, 9)
    sketch.update(ints)
    assert not kernel_calls
    assert sketch.slots() == NaiveMG(4).extend(["b", "a", *ints.tolist()]).slots()


def test_bad_keys_are_reported_by_the_python_loop():
    with pytest.raises(TypeError, match="float"):
        MisraGries(4).update([1, 2.5] * 800)
    with pytest.raises(TypeError, match="None"):
        MisraGries(4).update(pa.array(["a", None] * 800))


def test_kernel_refuses_inconsistent_state():
    codes = np.arange(5, dtype=np.int64)
    out = np.empty(8, np.int64)
    with pytest.raises(ValueError, match="inconsistent"):
        # k must equal the held keys plus the free dummy slots.
        kernel.update_unit(codes, np.zeros(0, np.int64), np.zeros(0, np.int64), out, out, 4, 3)
    with pytest.raises(ValueError, match="duplicate"):
        held = np.array([3, 3], np.int64)
        kernel.update_unit(codes, held, np.zeros(2, np.int64), out, out.copy(), 4, 2)


@pytest.mark.parametrize("form", ["numpy int64", "list str"])
def test_long_zero_lists_are_replaced_in_the_fixed_order(form, kernel_calls):
    """Many keys reach zero at once (a wide sketch over a wide universe), so the zero list is
    long; int codes spread over all 64 bits, negative ones included, exercise every byte of
    its sort."""
    rng = np.random.default_rng(21)
    raw = rng.integers(0, 900, 6000)
    spread = (raw - 450) * (1 << 47) + raw * 7919
    keys = FORMS[form](spread)
    sketch = MisraGries(300).update(keys)
    assert kernel_calls
    naive = NaiveMG(300).extend(plain_keys(keys))
    assert sketch.slots() == naive.slots()
    assert sketch.error_bound() == naive.d > 0


def test_unencodable_strs_stay_on_the_python_loop(kernel_calls):
    """A lone surrogate has no UTF-8 encoding: the C loop gives up without changing anything
    and the Python loop, which orders strs by code point, runs the batch."""
    keys = [f"k{v % 40}" for v in range(3000)]
    keys[2000] = "\ud800"
    sketch = MisraGries(5).update(keys)
    assert sketch.slots() == NaiveMG(5).extend(keys).slots()
