"""Seeded fuzz of every sketch decoder (each ``from_bytes`` in ``beam_dpsketch``).

Every decoder reads bytes that may come from a runner's state backend, a file or a peer, so it
must hold two properties on any input:

* it returns a sketch or raises :class:`~beam_dpsketch.serialization.SketchFormatError`, never
  another exception (``MemoryError``, ``OverflowError``, ``IndexError``...);
* it allocates no more than the bytes imply: a forged size field (a width, a horizon, a number
  of counters) must be checked against the arrays actually present before anything is
  allocated from it.

Mutations are bit flips, truncations, insertions and deletions (most with the checksum
recomputed, so they reach the parser and the decoder instead of stopping at the CRC), and
structured forgeries: parameters of the JSON header replaced by huge, negative, zero or
mistyped values, and arrays replaced by longer, shorter or retyped ones, all re-encoded with a
valid checksum. Memory is checked with ``tracemalloc`` (numpy reports its buffers to it) under
an address-space limit, so a failing decoder fails the test instead of exhausting the machine.

``DPSKETCH_FUZZ_N`` sets the number of mutations per decoder (default ``10_000``, the CI
amount); ``make fuzz`` runs with more.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from beam_dpsketch import serialization
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches import CountMedianSketch, CountMinSketch, CountSketch, MisraGries
from beam_dpsketch.sketches.continual.binary_mechanism import GaussianBinaryMechanism
from beam_dpsketch.sketches.continual.heavy_hitters import HierarchicalLazySketch
from beam_dpsketch.sketches.continual.sketch import LazySketch, PunctualSketch
from beam_dpsketch.sketches.intermittent.strategies import STRATEGIES, make_intermittent_sketch
from beam_dpsketch.sketches.linear.private import (
    PrivateCountMedianSketch,
    PrivateCountMinSketch,
    PrivateCountSketch,
)
from beam_dpsketch.sketches.misra_gries.design_b import PostProcessedSum
from beam_dpsketch.sketches.misra_gries.user import PAMGSketch
from beam_dpsketch.sketches.prefix_tree import PrefixTreeSketch
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.sketches.space_saving import SpaceSaving

N_MUTATIONS = int(os.environ.get("DPSKETCH_FUZZ_N", "10000"))
SRC = NoiseSource.insecure_for_tests(17)
BUDGET = PrivacyBudget.approx(0.5, 1e-3)
KEYS = np.arange(40) % 7

#: Extra bytes a decoder may allocate beyond ``ALLOC_FACTOR`` times its valid input's peak.
ALLOC_SLACK = 1 << 20
ALLOC_FACTOR = 8
#: Address space the fuzzed decoders may add to the test process (a guard, not the check).
AS_HEADROOM = 1 << 30


# --------------------------------------------------------------------------------------------
# One small example of every decoder
# --------------------------------------------------------------------------------------------


def _intermittent(strategy: str):
    kw = {"eta": 0.5} if "forget" in strategy else {}
    sk = make_intermittent_sketch(
        strategy,
        8,
        3,
        PrivacyBudget.pure(1.0),
        noise_source=SRC,
        release_prefix=("fuzz", strategy),
        **kw,
    )
    sk.update(KEYS)
    return sk


def _examples() -> dict[str, tuple[Callable[[], object], Callable[[bytes], object]]]:
    """name -> (build a small sketch, decode bytes). Decoders needing the noise source get it."""

    def cms():
        return CountMinSketch(8, 2, seed=3).update(KEYS)

    def dyadic():
        return DyadicCountSketch(0, 63, 8, 2, 5).update(KEYS)

    out: dict[str, tuple[Callable[[], object], Callable[[bytes], object]]] = {
        "CountMinSketch": (cms, CountMinSketch.from_bytes),
        "CountSketch": (
            lambda: CountSketch(8, 2, seed=3).update(KEYS),
            CountSketch.from_bytes,
        ),
        "PrivateCountMinSketch": (
            lambda: PrivateCountMinSketch.release(cms(), BUDGET, SRC.stream("fuzz-pcms")),
            PrivateCountMinSketch.from_bytes,
        ),
        "PrivateCountSketch": (
            lambda: PrivateCountSketch.release(
                CountSketch(8, 2, seed=3).update(KEYS), BUDGET, SRC.stream("fuzz-pcs")
            ),
            PrivateCountSketch.from_bytes,
        ),
        "CountMedianSketch": (
            lambda: CountMedianSketch(8, 2, seed=3).update(KEYS),
            CountMedianSketch.from_bytes,
        ),
        "PrivateCountMedianSketch": (
            lambda: PrivateCountMedianSketch.release(
                CountMedianSketch(8, 2, seed=3).update(KEYS), BUDGET, SRC.stream("fuzz-pcmed")
            ),
            PrivateCountMedianSketch.from_bytes,
        ),
        "MisraGries": (lambda: MisraGries(4).update(KEYS.tolist()), MisraGries.from_bytes),
        "PostProcessedSum": (
            lambda: PostProcessedSum.from_sketch(MisraGries(4).update(KEYS.tolist())),
            PostProcessedSum.from_bytes,
        ),
        "PAMGSketch": (
            lambda: PAMGSketch(4, 2).update_users([[1, 2], [2, 3], [5]]),
            PAMGSketch.from_bytes,
        ),
        "SpaceSaving": (lambda: SpaceSaving(4).update(KEYS.tolist()), SpaceSaving.from_bytes),
        "DyadicCountSketch": (dyadic, DyadicCountSketch.from_bytes),
        "PrefixTreeSketch": (
            lambda: PrefixTreeSketch(8, 2, 3, seed=3).update(["ab", "a", "abcd", 7]),
            PrefixTreeSketch.from_bytes,
        ),
        "PrivateDyadicCountSketch": (
            lambda: PrivateDyadicCountSketch.release(dyadic(), BUDGET, SRC.stream("fuzz-dy")),
            PrivateDyadicCountSketch.from_bytes,
        ),
        "GaussianBinaryMechanism": (
            lambda: _gbm(),
            lambda data: GaussianBinaryMechanism.from_bytes(data, SRC),
        ),
        "LazySketch": (
            lambda: LazySketch(
                8, 2, 64, BUDGET, noise_source=SRC, release_prefix="fuzz-lazy"
            ).update_batch(KEYS),
            lambda data: LazySketch.from_bytes(data, SRC),
        ),
        "PunctualSketch": (
            lambda: PunctualSketch(
                8, 2, 64, BUDGET, noise_source=SRC, release_prefix="fuzz-punctual"
            ).update_batch(KEYS),
            lambda data: PunctualSketch.from_bytes(data, SRC),
        ),
        "HierarchicalLazySketch": (
            lambda: _hierarchical(),
            lambda data: HierarchicalLazySketch.from_bytes(data, SRC),
        ),
        "DPSWSketch": (
            lambda: DPSWSketch(
                20,
                PrivacyBudget.zcdp(0.5),
                width=8,
                depth=2,
                block=5,
                alpha="1/2",
                noise_source=SRC,
                label="fuzz-dpsw",
            ).update_batch(np.arange(33) % 5),
            lambda data: DPSWSketch.from_bytes(data, SRC),
        ),
    }
    for strategy in sorted(STRATEGIES):
        cls = STRATEGIES[strategy]
        out[f"Intermittent[{strategy}]"] = (
            lambda s=strategy: _intermittent(s),
            lambda data, c=cls: c.from_bytes(data, SRC),
        )
    return out


def _gbm() -> GaussianBinaryMechanism:
    mech = GaussianBinaryMechanism(4, 32, BUDGET, 1, noise_source=SRC, release_prefix="fuzz-gbm")
    for _ in range(5):
        mech.update([1, 0, 2, 1])
    return mech


def _hierarchical() -> HierarchicalLazySketch:
    sk = HierarchicalLazySketch(
        8, 4, 8, 2, 64, BUDGET, noise_source=SRC, release_prefix="fuzz-hier"
    )
    sk.update_batch(KEYS)
    return sk


EXAMPLES = _examples()
#: The intermittent strategies share one decoder: together they get N_MUTATIONS.
SHARES = {
    name: (N_MUTATIONS // len(STRATEGIES) + 1 if name.startswith("Intermittent") else N_MUTATIONS)
    for name in EXAMPLES
}


# --------------------------------------------------------------------------------------------
# Mutations
# --------------------------------------------------------------------------------------------


def _with_crc(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "little")


FORGED_VALUES: list[object] = [
    0,
    1,
    -1,
    2,
    3,
    255,
    2**16,
    2**31 - 1,
    2**31,
    2**32,
    2**40,
    2**53,
    2**62,
    2**63 - 1,
    2**64,
    -(2**63),
    10**30,
    0.0,
    -0.5,
    1e308,
    float("inf"),
    float("nan"),
    "",
    "x",
    "ff",
    None,
    True,
    [],
    [1, 2],
    {},
]


def _forge_params(params: object, rng: np.random.Generator) -> object:
    """A copy of ``params`` with one value (at any depth) replaced, removed or scaled."""
    if isinstance(params, dict) and params:
        keys = sorted(params)
        key = keys[int(rng.integers(len(keys)))]
        out = dict(params)
        roll = rng.random()
        value = params[key]
        if isinstance(value, dict | list) and value and roll < 0.4:
            out[key] = _forge_params(value, rng)
        elif roll < 0.05:
            del out[key]
        elif isinstance(value, int) and not isinstance(value, bool) and roll < 0.5:
            # Size fields: a little or a lot bigger, the shape a forger would try.
            factors = [2, 3, 1000, 2**20, 2**30]
            out[key] = value * factors[int(rng.integers(len(factors)))] + int(rng.integers(0, 3))
        else:
            out[key] = FORGED_VALUES[int(rng.integers(len(FORGED_VALUES)))]
        return out
    if isinstance(params, list) and params:
        out_list = list(params)
        i = int(rng.integers(len(out_list)))
        if isinstance(out_list[i], dict | list) and rng.random() < 0.5:
            out_list[i] = _forge_params(out_list[i], rng)
        else:
            out_list[i] = FORGED_VALUES[int(rng.integers(len(FORGED_VALUES)))]
        return out_list
    return FORGED_VALUES[int(rng.integers(len(FORGED_VALUES)))]


def _forge_arrays(arrays: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = dict(arrays)
    if not out:
        return out
    names = sorted(out)
    name = names[int(rng.integers(len(names)))]
    arr = out[name]
    roll = rng.random()
    if roll < 0.05:
        del out[name]
    elif roll < 0.3 and arr.size:
        out[name] = arr.ravel()[: int(rng.integers(arr.size))].copy()
    elif roll < 0.5:
        out[name] = np.concatenate([arr.ravel(), arr.ravel()[:1].repeat(int(rng.integers(1, 9)))])
    elif roll < 0.6:
        out[name] = arr.astype(np.float64 if arr.dtype.kind != "f" else np.int64)
    elif arr.size and arr.dtype.kind in "iuf":
        flat = arr.ravel().copy()
        i = int(rng.integers(flat.size))
        choices = (
            [-1, 0, 2**31, 2**62, np.iinfo(np.int64).min]
            if arr.dtype.kind in "iu"
            else [
                np.nan,
                np.inf,
                -1e300,
            ]
        )
        value = choices[int(rng.integers(len(choices)))]
        try:
            flat[i] = value
        except (OverflowError, ValueError):
            flat[i] = 0
        out[name] = flat.reshape(arr.shape)
    return out


def _forge_header(data: bytes, rng: np.random.Generator) -> bytes:
    """Overwrite one of the first array's size fields (a dimension or its data length)."""
    kind_len = data[6]
    params_len = int.from_bytes(data[7 + kind_len : 11 + kind_len], "little")
    pos = 11 + kind_len + params_len + 2  # the array count, then the first array's name
    if pos + 2 > len(data) - 4:
        return data
    pos += 1 + data[pos]  # name
    pos += 1 + data[pos]  # dtype
    ndim = data[pos]
    pos += 1
    field = pos + 8 * int(rng.integers(ndim + 1))  # one dimension, or the data length
    if field + 8 > len(data) - 4:
        return data
    sizes = [0, 1, 2**20, 2**32, 2**39, 2**62, 2**64 - 1]
    value = sizes[int(rng.integers(len(sizes)))]
    body = bytearray(data[:-4])
    body[field : field + 8] = value.to_bytes(8, "little")
    return _with_crc(bytes(body))


def mutations(data: bytes, n: int, seed: int) -> Iterator[tuple[str, bytes]]:
    """``n`` deterministic mutations of ``data``: ``(kind, mutated bytes)``."""
    rng = np.random.default_rng(seed)
    _, params, arrays = serialization.loads(data)
    kind = serialization.loads(data)[0]
    body = data[:-4]
    for _ in range(n):
        roll = rng.random()
        if roll < 0.1:
            buf = bytearray(data)
            buf[int(rng.integers(len(buf)))] ^= 1 << int(rng.integers(8))
            yield "flip", bytes(buf)
        elif roll < 0.35:
            buf = bytearray(body)
            for _ in range(int(rng.integers(1, 4))):
                buf[int(rng.integers(len(buf)))] ^= 1 << int(rng.integers(8))
            yield "flip+crc", _with_crc(bytes(buf))
        elif roll < 0.45:
            cut = int(rng.integers(len(data)))
            yield "truncate", data[:cut] if rng.random() < 0.5 else _with_crc(body[:cut])
        elif roll < 0.5:
            i = int(rng.integers(len(body)))
            if rng.random() < 0.5:
                extra = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
                yield "insert", _with_crc(body[:i] + extra + body[i:])
            else:
                yield "delete", _with_crc(body[:i] + body[i + int(rng.integers(1, 9)) :])
        elif roll < 0.6:
            yield "header", _forge_header(data, rng)
        elif roll < 0.85:
            yield "params", serialization.dumps(kind, _forge_params(params, rng), arrays)
        else:
            forged = _forge_params(params, rng) if rng.random() < 0.3 else params
            yield "arrays", serialization.dumps(kind, forged, _forge_arrays(arrays, rng))


# --------------------------------------------------------------------------------------------
# Harness
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def address_space_guard(headroom: int) -> Iterator[None]:
    """Cap the process's address space at its current size plus ``headroom`` bytes.

    A decoder allocating from a forged size then fails with ``MemoryError`` (reported as the
    failure it is) instead of exhausting the machine.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        current = int(f.read().split()[0]) * resource.getpagesize()
    limit = current + headroom
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _peak(decode: Callable[[bytes], object], data: bytes) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    try:
        decode(data)
        error = None
    except BaseException as exc:  # noqa: BLE001 - classified by the caller
        error = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, error


def fuzz_decoder(name: str, n: int, seed: int) -> list[str]:
    """Run ``n`` mutations against decoder ``name``; the list of failures (empty if none)."""
    build, decode = EXAMPLES[name]
    data = build().to_bytes()
    base_peak, error = _peak(decode, data)
    assert error is None, f"{name}: the valid bytes do not decode: {error!r}"
    budget = ALLOC_FACTOR * base_peak + ALLOC_SLACK
    failures: list[str] = []
    with address_space_guard(AS_HEADROOM):
        for i, (kind, mutated) in enumerate(mutations(data, n, seed)):
            # Size forgeries are the allocation risk: measure those, run the rest plainly.
            if kind in ("params", "arrays", "header"):
                peak, error = _peak(decode, mutated)
            else:
                peak = 0
                try:
                    decode(mutated)
                    error = None
                except BaseException as exc:  # noqa: BLE001 - classified below
                    error = exc
            if error is not None and not isinstance(error, SketchFormatError):
                failures.append(
                    f"#{i} {kind} ({len(mutated)} B): {type(error).__name__}: {error} "
                    f"[{_describe(mutated)}]"
                )
            elif peak > budget:
                failures.append(
                    f"#{i} {kind} ({len(mutated)} B): allocated {peak} B (> {budget} B) "
                    f"[{_describe(mutated)}]"
                )
            if len(failures) >= 5:
                break
    return failures


def _describe(data: bytes) -> str:
    try:
        _, params, arrays = serialization.loads(data)
    except SketchFormatError:
        return "unparseable"
    shapes = {k: (v.dtype.str, v.shape) for k, v in arrays.items()}
    return f"params={json.dumps(params)[:300]} arrays={shapes}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_decoder_survives_mutations(name):
    seed = sum(name.encode()) + 20261125
    failures = fuzz_decoder(name, SHARES[name], seed)
    assert not failures, f"{name}: " + "; ".join(failures)


def test_mutations_reach_the_decoders():
    """Most mutations pass the checksum and parse: the fuzz exercises decoders, not the CRC."""
    data = EXAMPLES["LazySketch"][0]().to_bytes()
    parsed = 0
    total = 400
    for _, mutated in mutations(data, total, 1):
        try:
            serialization.loads(mutated)
            parsed += 1
        except SketchFormatError:
            pass
    assert parsed >= total // 2


def test_the_harness_catches_an_allocating_decoder():
    """A decoder allocating from a size field fails the fuzz (the check is not vacuous)."""

    def naive(data: bytes) -> object:
        _, params, _ = serialization.loads(data)
        width = params.get("width")
        if isinstance(width, int) and not isinstance(width, bool) and 0 < width < 2**26:
            return np.ones(width * 64, dtype=np.int64)
        raise SketchFormatError("bad width")

    EXAMPLES["_naive"] = (EXAMPLES["CountMinSketch"][0], naive)
    try:
        failures = fuzz_decoder("_naive", 600, 3)
    finally:
        del EXAMPLES["_naive"]
    assert any("allocated" in f for f in failures)
