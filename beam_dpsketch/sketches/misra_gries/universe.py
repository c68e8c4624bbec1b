"""Declared key universes and the exact pure-DP top-k sampler over them ([LT23, Section 6]).

The pure-DP machinery alone (public key universes and an exact Binomial/geometric sampler in
arbitrary precision), used by :func:`~.design_b.pure_pp`, :func:`~.merged.merged_pure` and
:func:`~.baselines.chan_pure`.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch.checks import check_choice, check_int
from beam_dpsketch.hashing import canonical_key, encode_key
from beam_dpsketch.noise import NoiseStream, discrete_laplace

__all__ = [
    "Universe",
    "pure_top_k",
    "pure_top_k_cutoff",
    "pure_top_k_method",
    "sample_tail_count",
    "sample_upper_geometric",
    "validate_in_universe",
]

# --------------------------------------------------------------------------------------------
# Declared universes (pure DP, [LT23, Section 3; Section 6])
# --------------------------------------------------------------------------------------------

_MAX_UNIVERSE = (1 << 63) - 1


class Universe:
    """A declared, public key universe ``U`` for the pure-DP releases ([LT23, Section 3; Section 6] and docs/algorithms.md#mg-merged).

    Pure DP puts noise on every key of ``U``, so ``U`` must be fixed before seeing the data and
    every stored key must belong to it ([LT23, Section 6], last bullet; docs/algorithms.md#mg-order domain validation). Build
    it in one of three ways:

    * :meth:`from_keys` with an explicit collection (deduplicated and sorted by canonical key
      order, so key ``i`` is the ``i``-th smallest);
    * :meth:`from_keys` with a ``range`` of ints, used lazily (``range(10**12)`` costs nothing);
    * :meth:`from_function` with a size, an injective ``key_fn(i)`` for ``0 <= i < size`` and a
      membership predicate ``contains(key)``. Nothing is materialised: the release samples
      indices and calls ``key_fn`` only for the keys it needs.

    Sizes up to ``2**63 - 1`` are supported. The universe is public: it is not protected.
    """

    __slots__ = ("size", "_keys", "_set", "_key_fn", "_contains")

    def __init__(
        self,
        size: int,
        key_fn: Callable[[int], Any],
        contains: Callable[[Any], bool],
        keys: tuple[Any, ...] | None = None,
    ) -> None:
        size = check_int(size, "size", upper=_MAX_UNIVERSE)
        if not callable(key_fn):
            raise TypeError("key_fn must be callable")
        if not callable(contains):
            raise TypeError("contains must be callable")
        self.size = int(size)
        self._key_fn = key_fn
        self._contains = contains
        self._keys = keys
        self._set = None if keys is None else frozenset(keys)

    @classmethod
    def from_keys(cls, keys: Iterable[Any]) -> Universe:
        """A universe given by its keys (any iterable of keys, or a ``range`` used lazily)."""
        if isinstance(keys, range):
            r = keys
            if len(r) == 0:
                raise ValueError("keys must not be empty")
            return cls(len(r), r.__getitem__, lambda x, r=r: type(x) is int and x in r)
        if isinstance(keys, str | bytes):
            raise TypeError("keys must be a collection of keys, not a single str/bytes")
        canon = {canonical_key(x) for x in keys}
        if not canon:
            raise ValueError("keys must not be empty")
        ordered = tuple(sorted(canon, key=encode_key))
        members = frozenset(ordered)

        def contains(x: Any) -> bool:
            try:
                return canonical_key(x) in members
            except TypeError:
                return False

        return cls(len(ordered), ordered.__getitem__, contains, ordered)

    @classmethod
    def from_function(
        cls, size: int, key_fn: Callable[[int], Any], contains: Callable[[Any], bool]
    ) -> Universe:
        """A universe of ``size`` keys ``key_fn(0..size-1)`` with membership test ``contains``.

        ``key_fn`` must be injective on ``range(size)`` and ``contains(x)`` must be true exactly
        for its image; neither is checked (that would materialise the universe).
        """
        return cls(size, key_fn, contains)

    def __len__(self) -> int:
        return self.size

    def __contains__(self, key: Any) -> bool:
        return bool(self._contains(key))

    def key_at(self, index: int) -> Any:
        """The key with index ``0 <= index < size`` (canonicalised)."""
        return canonical_key(self._key_fn(int(index)))

    def __repr__(self) -> str:
        kind = "explicit" if self._keys is not None else "function"
        return f"Universe(size={self.size}, {kind})"


def validate_in_universe(keys: Iterable[Any], universe: Universe) -> None:
    """Raise ``ValueError`` if a stored key lies outside the declared universe ([LT23, Section 6] and docs/algorithms.md#mg-order).

    A key outside ``U`` would be released with no noise on the neighbouring side to cover it;
    validate the domain *before* sketching, this check is the last line of defence.
    """
    if not isinstance(universe, Universe):
        raise TypeError(f"universe must be a Universe, got {type(universe).__name__}")
    for key in keys:
        if key not in universe:
            raise ValueError(
                f"a stored key of type {type(key).__name__} is outside the declared universe: "
                "reject out-of-universe keys before sketching ([LT23, Section 6] and docs/algorithms.md#mg-order)"
            )


# --------------------------------------------------------------------------------------------
# Exact Binomial(n, P[Geo2(exp(-1/b)) >= t0]) by lazy-precision inversion
# --------------------------------------------------------------------------------------------

_BINOMIAL_START_BITS = 128
_BLOCK_MEAN = 16.0


def _uniform_bits(stream: NoiseStream, bits: int) -> int:
    words = stream.uint64(bits // 64) if bits >= 64 else stream.uint64(1)
    value = 0
    for w in words.tolist():
        value = (value << 64) | int(w)
    return value if bits >= 64 else value >> (64 - bits)


def _tail_q_bounds(b: Fraction, t0: int, bits: int) -> tuple[int, int]:
    """Integers ``lo <= 2**bits * q <= hi`` for ``q = a**t0 / (1 + a)``, ``a = exp(-1/b)``."""
    digits = int(bits * 0.30103) + 40
    with decimal.localcontext() as ctx:
        ctx.prec = digits
        a = (decimal.Decimal(-b.denominator) / decimal.Decimal(b.numerator)).exp()
        head = (decimal.Decimal(-t0 * b.denominator) / decimal.Decimal(b.numerator)).exp()
        q = head / (1 + a) * (decimal.Decimal(2) ** bits)
        qi = int(q)
    # Each Decimal operation is correctly rounded to `digits` digits (relative error 10**(1-digits)),
    # a handful of them, so 10**(10-digits) relative is a very generous enclosure.
    slack = (1 << bits) // 10 ** (digits - 10) + 2
    return max(0, qi - slack), min((1 << bits) - 1, qi + 1 + slack)


def _pow_bounds(q_lo: int, q_hi: int, nb: int, bits: int) -> tuple[int, int]:
    """Integers enclosing ``2**bits * (1 - q)**nb`` for every ``q`` in ``[q_lo, q_hi] / 2**bits``."""
    nd = len(str(nb))
    digits = int(bits * 0.30103) + 40 + nd
    one = decimal.Decimal(2) ** bits
    out = []
    with decimal.localcontext() as ctx:
        ctx.prec = digits
        for qq in (q_hi, q_lo):  # (1-q)^nb decreases in q
            x = decimal.Decimal(qq) / one
            v = (decimal.Decimal(nb) * (1 - x).ln()).exp() * one
            out.append(int(v))
    # Absolute error of nb * ln(1 - x) is about nb * 10**(1-digits); exp turns it into a relative
    # error, so 10**(nd + 10 - digits) relative encloses it with a wide margin.
    slack = (1 << bits) // 10 ** (digits - nd - 10) + 2
    return max(0, out[0] - slack), min(1 << bits, out[1] + 1 + slack)


def _binomial_walk(
    u: int, nb: int, p_lo: int, p_hi: int, r_lo: int, r_hi: int, bits: int
) -> int | None:
    """Inversion ``min{j : U < F(j)}`` with interval CDF bounds; ``None`` if undecided."""
    one = 1 << bits
    lo, hi = p_lo, p_hi
    f_lo, f_hi = lo, hi
    j = 0
    while True:
        if u + 1 <= f_lo:  # U < (u+1)/2**bits <= F(j)
            return j
        if u < f_hi:  # cannot tell U < F(j) from U >= F(j) at this precision
            return None
        if j + 1 == nb:  # U >= F(nb - 1): the outcome is nb (F(nb) = 1)
            return nb
        m = nb - j
        den = (j + 1) << bits
        lo = (lo * m * r_lo) // den
        hi = -(-(hi * m * r_hi) // den)
        j += 1
        f_lo += lo
        f_hi = min(one, f_hi + hi)


def sample_tail_count(
    stream: NoiseStream,
    n: int,
    scale: Fraction,
    t0: int,
    *,
    expected_hint: float,
    start_bits: int = _BINOMIAL_START_BITS,
) -> int:
    """Exact ``Binomial(n, q)`` with ``q = P[Geo2(exp(-1/scale)) >= t0]`` from the keyed stream.

    This is the number of absent keys whose noise reaches the cutoff ``t0`` ([LT23, Section 6] step 3).
    Inversion of the CDF with a lazily refined uniform ``U``: ``U``'s bits come from ``stream``,
    the pmf is enclosed in rigorous integer intervals (fixed point with ``bits`` fractional
    bits; ``q`` and ``(1-q)**n`` from correctly rounded ``decimal`` arithmetic with a wide error
    margin), and whenever the intervals cannot decide, the precision doubles and ``U`` gets more
    bits. So the output distribution is exactly Binomial (no float approximation), as pure DP
    needs. ``n`` is split into blocks of expected mean about 16 (sum of independent binomials
    with the same ``q``), so the fixed point never underflows; ``expected_hint`` (computed from
    public values only) sets the number of blocks.
    """
    if n <= 0:
        return 0
    blocks = min(n, max(1, math.ceil(expected_hint / _BLOCK_MEAN)))
    base, extra = divmod(n, blocks)
    cache: dict[tuple[str, int, int], tuple[int, int]] = {}
    total = 0
    for i in range(blocks):
        nb = base + (1 if i < extra else 0)
        if nb == 0:
            continue
        bits = start_bits
        u = _uniform_bits(stream, bits)
        while True:
            qkey = ("q", 0, bits)
            if qkey not in cache:
                cache[qkey] = _tail_q_bounds(scale, t0, bits)
            q_lo, q_hi = cache[qkey]
            pkey = ("p", nb, bits)
            if pkey not in cache:
                cache[pkey] = _pow_bounds(q_lo, q_hi, nb, bits)
            p_lo, p_hi = cache[pkey]
            one = 1 << bits
            r_lo = (q_lo << bits) // (one - q_lo)
            r_hi = -(-(q_hi << bits) // (one - q_hi))
            j = _binomial_walk(u, nb, p_lo, p_hi, r_lo, r_hi, bits)
            if j is not None:
                break
            u = (u << bits) | _uniform_bits(stream, bits)
            bits *= 2
        total += j
    return total


def sample_upper_geometric(stream: NoiseStream, scale: Fraction, size: int) -> np.ndarray:
    """``size`` draws of ``Z - t0`` given ``Z >= t0`` for ``Z ~ Geo2(a)``, integer ``t0 >= 0``.

    That conditional law is ``P[G = j] = (1 - a) a**j`` (``j >= 0``) for every ``t0 >= 0``; it is
    sampled exactly as a discrete Laplace conditioned on being ``>= 0`` (rejection, acceptance
    ``1/(1+a) >= 1/2``).
    """
    out: list[np.ndarray] = []
    have = 0
    while have < size:
        need = size - have
        z = discrete_laplace(stream, scale, 2 * need + 8)
        z = z[z >= 0][:need]
        out.append(z)
        have += z.size
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _choose_absent(
    stream: NoiseStream, universe: Universe, count: int, stored: set[Any]
) -> list[Any]:
    """``count`` distinct keys uniform from ``U`` minus ``stored`` (rejection on indices)."""
    chosen: list[Any] = []
    seen: set[Any] = set()
    tries = 0
    limit = 64 * count + 4096
    while len(chosen) < count:
        batch = stream.uniform_below(universe.size, count - len(chosen) + 8)
        for idx in batch.tolist():
            tries += 1
            key = universe.key_at(idx)
            if key in stored or key in seen:
                continue
            seen.add(key)
            chosen.append(key)
            if len(chosen) == count:
                break
        if tries > limit:
            raise RuntimeError(
                "could not draw distinct absent keys: is the universe's key_fn injective?"
            )
    return chosen


#: ``method="auto"`` enumerates the universe when ``size <= _ENUMERATE_FACTOR * capacity``.
_ENUMERATE_FACTOR = 16
#: Hard limit on the number of noise draws of ``method="enumerate"``.
_ENUMERATE_MAX = 1 << 24


def pure_top_k_method(universe_size: int, capacity: int, method: str = "auto") -> str:
    """The method :func:`pure_top_k` runs: ``"auto"`` enumerates when
    ``|U| <= 16 * capacity`` and samples otherwise (public parameters only)."""
    check_choice(method, "method", ("auto", "enumerate", "sample"))
    if method == "auto":
        return "enumerate" if universe_size <= _ENUMERATE_FACTOR * capacity else "sample"
    return method


def pure_top_k_cutoff(universe_size: int, k: int, scale: Fraction) -> int:
    """The data-independent integer cutoff ``t0 = max(0, ceil(scale ln(|U| / (2k))))`` of the
    cutoff sampler of :func:`pure_top_k` ([LT23, Section 6])."""
    return max(0, math.ceil(float(scale) * math.log(universe_size / (2.0 * k))))


def pure_top_k(
    values: Mapping[Any, int],
    universe: Universe,
    k: int,
    scale: Fraction,
    stream: NoiseStream,
    *,
    capacity: int,
    method: str = "auto",
) -> tuple[list[tuple[Any, int]], dict[str, Any]]:
    """Top-``k`` of ``values[x] + Geo2(exp(-1/scale))`` over the declared universe ([LT23, Section 6]).

    ``values`` holds the positive integer values (all other keys of ``U`` are 0); ``capacity``
    bounds how many positive keys there can be (public: ``k`` for one sketch, ``shards * k`` for
    Design B) and only chooses the method.

    * ``"enumerate"``: one draw per key of ``U``; exactly ``min(k, |U|)`` keys are returned.
    * ``"sample"``: the exact cutoff sampler of [LT23, Section 6] with the data-independent integer
      cutoff ``t0 = max(0, ceil(scale * ln(|U| / (2k))))``: stored keys get explicit draws; the
      number ``K`` of absent keys whose noise is ``>= t0`` is drawn exactly from
      ``Binomial(|U| - #stored, P[Geo2 >= t0])`` (:func:`sample_tail_count`), the ``K`` keys
      uniformly without replacement from the rest of ``U`` (rejection on indices, keyed stream),
      and their values as ``t0 + G`` with ``G`` the exact conditional tail
      (:func:`sample_upper_geometric`). The top-``k`` among values ``>= t0`` is returned: this is
      exactly "top-k among noisy values ``>= t0``" of the full noisy vector, hence
      post-processing of the Laplace mechanism. At most ``k`` keys (possibly fewer).
    * ``"auto"``: ``"enumerate"`` when ``|U| <= 16 * capacity``, else ``"sample"``.

    Ties in the top-``k`` are broken by the canonical key order (a function of the noisy vector).
    """
    check_choice(method, "method", ("auto", "enumerate", "sample"))
    u = universe.size
    method = pure_top_k_method(u, capacity, method)
    details: dict[str, Any] = {"universe_size": u, "method": method}
    if method == "enumerate":
        if u > _ENUMERATE_MAX:
            raise ValueError(f"universe of size {u} is too large to enumerate; use method='sample'")
        keys = [universe.key_at(i) for i in range(u)]
        z = discrete_laplace(stream, scale, u)
        cands = [
            (x, int(values.get(x, 0)) + int(zi)) for x, zi in zip(keys, z.tolist(), strict=True)
        ]
        details["cutoff"] = None
    else:
        if u < 4 * (capacity + k):
            raise ValueError(
                f"universe of size {u} is too small for method='sample' with capacity "
                f"{capacity}; use method='enumerate'"
            )
        t0 = pure_top_k_cutoff(u, k, scale)
        stored = sorted(values, key=encode_key)
        z = discrete_laplace(stream, scale, len(stored))
        cands = [
            (x, int(values[x]) + int(zi))
            for x, zi in zip(stored, z.tolist(), strict=True)
            if int(values[x]) + int(zi) >= t0
        ]
        q = math.exp(-t0 / float(scale)) / (1.0 + math.exp(-1.0 / float(scale)))
        n_absent = u - len(stored)
        count = sample_tail_count(stream, n_absent, scale, t0, expected_hint=u * q)
        absent = _choose_absent(stream, universe, count, set(stored))
        g = sample_upper_geometric(stream, scale, count)
        cands.extend((x, t0 + int(gi)) for x, gi in zip(absent, g.tolist(), strict=True))
        details["cutoff"] = t0
    cands.sort(key=lambda kv: (-kv[1], encode_key(kv[0])))
    return cands[:k], details
