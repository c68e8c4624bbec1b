"""The pure-Python fallbacks of the two C extensions give bit-identical results.

A package built where no C compiler exists ships neither ``beam_dpsketch.murmur3`` nor
``beam_dpsketch.sketches.misra_gries.kernel``; the library then loads
``beam_dpsketch.murmur3_fallback`` and ``...misra_gries.kernel_fallback``. Checked three ways:

* function by function, the fallback against the compiled module on the same arguments (every
  branch of the Misra-Gries loop with a small ``k``, every MurmurHash3 tail length);
* whole results in a fresh interpreter with ``BEAM_DPSKETCH_PURE_PYTHON=1``: hashes and
  serialized Misra-Gries sketches equal those of this (compiled) process;
* in a fresh interpreter where importing the compiled modules fails (as in a wheel built without
  a compiler): the fallbacks load, and a DEBUG log line says which path each extension took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from beam_dpsketch import hashing, murmur3, murmur3_fallback
from beam_dpsketch.extensions import FORCE_PURE_PYTHON_ENV
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import kernel, kernel_fallback
from beam_dpsketch.sketches.misra_gries import sketch as mg_sketch

REPO = Path(__file__).resolve().parents[2]
MULTIBYTE = "é€𝄞中"


class StrSubclass(str):
    """Not exactly a ``str``: both paths stop at it."""


def words(n: int, seed: int) -> list[str]:
    """Zipf-distributed strings of every UTF-8 width, lengths around each MurmurHash3 tail."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.3, n) % 300
    lead = ("", "é", "漢", "😀", "prefix-01", "prefix-01x")
    return [lead[r % 6] + "x" * (r % 19) + str(r) for r in ranks.tolist()]


def test_compiled_modules_are_used_by_default() -> None:
    # Guards the comparisons below: they compare two different implementations.
    assert hashing.murmur3 is murmur3 and murmur3 is not murmur3_fallback
    assert mg_sketch.kernel is kernel and kernel is not kernel_fallback


# ------------------------------------------------------------------------------------------------
# Function by function
# ------------------------------------------------------------------------------------------------


def hashed(module: Any, keys: list[Any], tag: int, seed: int) -> tuple[int, list[int], list[int]]:
    h1 = np.zeros(len(keys), np.uint64)
    h2 = np.zeros(len(keys), np.uint64)
    bad = module.hash_tagged(keys, tag, seed, h1, h2)
    return bad, h1.tolist(), h2.tolist()


@pytest.mark.parametrize("seed", [0, 1, 0x9747B28C, 2**32 - 1])
def test_murmur3_fallback_equals_compiled(seed: int) -> None:
    strs = ["a" * n for n in range(50)] + [c * n for c in MULTIBYTE for n in range(1, 20)]
    strs += words(500, seed % 97)
    assert hashed(murmur3_fallback, strs, 3, seed) == hashed(murmur3, strs, 3, seed)
    blobs = [s.encode() for s in strs]
    assert hashed(murmur3_fallback, blobs, 4, seed) == hashed(murmur3, blobs, 4, seed)
    # The first key of the wrong type, or with no UTF-8 encoding, stops both at the same index.
    for bad in (b"x", 7, None, "\ud800", StrSubclass("z")):
        mixed = [*strs[:30], bad, *strs[30:40]]
        assert hashed(murmur3_fallback, mixed, 3, seed) == hashed(murmur3, mixed, 3, seed)
        assert hashed(murmur3_fallback, mixed, 3, seed)[0] == 30


def test_murmur3_fallback_refuses_what_the_compiled_refuses() -> None:
    ok = np.zeros(2, np.uint64)
    for module in (murmur3, murmur3_fallback):
        with pytest.raises(ValueError, match="tag"):
            module.hash_tagged(["a"], 5, 0, ok, ok.copy())
        for seed in (-1, 2**32):
            with pytest.raises(ValueError, match="seed"):
                module.hash_tagged(["a"], 3, seed, ok, ok.copy())
        with pytest.raises(ValueError, match="8 bytes per key"):
            module.hash_tagged(["a", "b", "c"], 3, 0, ok, ok.copy())
        frozen = np.zeros(2, np.uint64)
        frozen.flags.writeable = False
        with pytest.raises((TypeError, BufferError, ValueError)):
            module.hash_tagged(["a"], 3, 0, frozen, ok)


def run_unit(module: Any, codes: np.ndarray, state: tuple[np.ndarray, np.ndarray], k: int):
    keys, counts = state
    free = k - len(keys)
    room = len(keys) + min(free, len(codes))
    out_keys = np.full(room, -7, np.int64)
    out_counts = np.full(room, -7, np.int64)
    held, free_left, d = module.update_unit(codes, keys, counts, out_keys, out_counts, k, free)
    return (held, free_left, d), out_keys.tolist(), out_counts.tolist()


def run_strs(module: Any, batch: list[Any], held: list[Any], counts: np.ndarray, k: int):
    free = k - len(held)
    out = np.full(len(held) + min(free, len(batch)), -7, np.int64)
    result = module.update_strs(batch, list(held), counts, out, k, free)
    return result, out.tolist()


@pytest.mark.parametrize("k", [1, 3, 17, 200])
@pytest.mark.parametrize("spread", [1, 1 << 40])
def test_kernel_update_unit_fallback_equals_compiled(k: int, spread: int) -> None:
    rng = np.random.default_rng(k)
    state = (np.empty(0, np.int64), np.empty(0, np.int64))
    for step in range(4):
        codes = ((rng.zipf(1.2, 3000) % 500 - 250) * spread).astype(np.int64)
        compiled = run_unit(kernel, codes, state, k)
        assert run_unit(kernel_fallback, codes, state, k) == compiled, step
        (held, _, _), out_keys, out_counts = compiled
        state = (np.array(out_keys[:held], np.int64), np.array(out_counts[:held], np.int64))
    # The held keys include zero counters: the zero-key replacement branch ran.
    assert held == k


@pytest.mark.parametrize("k", [1, 4, 31])
def test_kernel_update_strs_fallback_equals_compiled(k: int) -> None:
    held: list[str] = []
    counts = np.empty(0, np.int64)
    for step in range(4):
        batch = words(2500, 100 * k + step)
        compiled = run_strs(kernel, batch, held, counts, k)
        assert run_strs(kernel_fallback, batch, held, counts, k) == compiled, step
        (held, _, _), out = compiled
        counts = np.array(out[: len(held)], np.int64)
    # A key that is not exactly a str, or a lone surrogate in the zero list: both give None.
    for bad in ([*words(50, 1), b"x"], ["\ud800", *words(50, 2)]):
        assert run_strs(kernel_fallback, bad, [], np.empty(0, np.int64), 1)[0] is None
        assert run_strs(kernel, bad, [], np.empty(0, np.int64), 1)[0] is None


def test_kernel_fallback_refuses_what_the_compiled_refuses() -> None:
    one = np.array([1], np.int64)
    for module in (kernel, kernel_fallback):
        with pytest.raises(ValueError, match="inconsistent"):
            module.update_unit(one, one, one, np.empty(2, np.int64), np.empty(2, np.int64), 5, 0)
        with pytest.raises(ValueError, match="duplicate"):
            module.update_unit(
                one,
                np.array([3, 3]),
                np.array([1, 1]),
                np.empty(2, np.int64),
                np.empty(2, np.int64),
                2,
                0,
            )
        with pytest.raises(ValueError, match="int64"):
            module.update_unit(b"abc", one, one, np.empty(2, np.int64), np.empty(2, np.int64), 2, 1)


# ------------------------------------------------------------------------------------------------
# Whole results in a fresh interpreter
# ------------------------------------------------------------------------------------------------

# Hashes of lists of str (the compiled MurmurHash3 path) and serialized Misra-Gries sketches
# (the compiled update loop) for ints, a list of str and Arrow strings.
PROBE = r"""
import json, logging, sys
logging.basicConfig(level=logging.DEBUG, format="%(name)s %(message)s", stream=sys.stderr)
import numpy as np, pyarrow as pa
from beam_dpsketch import hashing
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import sketch

def words(n, seed):
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.3, n) % 300
    lead = ("", "é", "漢", "😀", "prefix-01", "prefix-01x")
    return [lead[r % 6] + "x" * (r % 19) + str(r) for r in ranks.tolist()]

out = {"murmur3": hashing.murmur3.__name__, "kernel": sketch.kernel.__name__}
strs = words(4000, 3)
h1, h2 = hashing.hash_keys(strs, 12345)
out["hashes"] = [h1.tolist(), h2.tolist()]
ints = (np.random.default_rng(5).zipf(1.2, 6000) % 700 - 300).astype(np.int64)
sketches = {}
for k in (5, 64):
    sketches[f"int{k}"] = MisraGries(k).update(ints[:3000]).update(ints[3000:]).to_bytes().hex()
    sketches[f"str{k}"] = MisraGries(k).update(strs[:2000]).update(strs[2000:]).to_bytes().hex()
    sketches[f"arrow{k}"] = MisraGries(k).update(pa.array(strs)).to_bytes().hex()
out["sketches"] = sketches
print(json.dumps(out))
"""

# Importing a compiled extension fails, as in a package built without a C compiler.
NO_EXTENSIONS = r"""
import importlib.abc, sys
class NoExtensions(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ("beam_dpsketch.murmur3", "beam_dpsketch.sketches.misra_gries.kernel"):
            raise ImportError("no compiled extension " + name)
        return None
sys.meta_path.insert(0, NoExtensions())
"""


def probe(prefix: str = "", env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    full_env = {k: v for k, v in os.environ.items() if k != FORCE_PURE_PYTHON_ENV}
    full_env.update(env or {})
    done = subprocess.run(
        [sys.executable, "-c", prefix + PROBE],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def compiled_probe() -> tuple[dict[str, Any], str]:
    return probe()


def test_compiled_probe_uses_the_extensions(compiled_probe: tuple[dict[str, Any], str]) -> None:
    result, log = compiled_probe
    assert result["murmur3"] == "beam_dpsketch.murmur3"
    assert result["kernel"] == "beam_dpsketch.sketches.misra_gries.kernel"
    assert "beam_dpsketch.murmur3: compiled extension" in log


@pytest.mark.parametrize(
    "how",
    ["forced by the environment", "compiled modules not importable"],
)
def test_fallback_results_are_bit_identical(
    how: str, compiled_probe: tuple[dict[str, Any], str]
) -> None:
    if how == "forced by the environment":
        result, log = probe(env={FORCE_PURE_PYTHON_ENV: "1"})
        reason = f"forced by {FORCE_PURE_PYTHON_ENV}"
    else:
        result, log = probe(prefix=NO_EXTENSIONS)
        reason = "compiled extension not importable"
    assert result["murmur3"] == "beam_dpsketch.murmur3_fallback"
    assert result["kernel"] == "beam_dpsketch.sketches.misra_gries.kernel_fallback"
    # The DEBUG line says which path each extension took, and why.
    for name in ("beam_dpsketch.murmur3", "beam_dpsketch.sketches.misra_gries.kernel"):
        assert f"beam_dpsketch.extensions {name}: pure-Python fallback" in log
    assert reason in log
    expected, _ = compiled_probe
    assert result["hashes"] == expected["hashes"]
    assert result["sketches"] == expected["sketches"]


def test_direct_sketch_update_matches_in_process() -> None:
    # The probe's sketches equal this process's: the subprocess comparison compares like with like.
    ints = (np.random.default_rng(5).zipf(1.2, 6000) % 700 - 300).astype(np.int64)
    sk = MisraGries(5).update(ints[:3000]).update(ints[3000:])
    result, _ = probe()
    assert result["sketches"]["int5"] == sk.to_bytes().hex()
