"""Secure, reproducible, vectorised noise: keyed ChaCha20 streams and exact discrete samplers.

Randomness
----------
Every release draws its noise from a :class:`NoiseStream`, a ChaCha20 keystream whose 256-bit key
is ``HMAC-SHA256(secret_key, b"beam-dpsketch/noise/v1" + encode_key(release_id))``. The secret key
lives in a :class:`NoiseSource` (32 bytes from ``os.urandom`` unless the caller passes one) and the
release id names the release, e.g. ``("DPHeavyHitters/3", window_start, window_end, pane_index)``.
The same (secret key, release id) always gives the same bytes, so a Beam bundle that is retried
re-draws the *same* noise instead of publishing a second, fresh draw of the same data (which would
let an observer average the noise away). Different release ids give computationally independent
streams. ``random``, ``numpy.random`` and Python's built-in ``hash`` are never used.

:data:`INSECURE_TEST_KEY` and :meth:`NoiseSource.insecure_for_tests` give publicly known keys for
reproducible tests; noise drawn from them protects nothing. Keys made that way start with the
16-byte marker ``b"INSECURE-TESTKEY"`` so :attr:`NoiseSource.is_insecure` can refuse them.

Samplers (design brief section 3 principle 3; spec dp-misra-gries section 11.1 and Appendix B)
--------------------------------------------------------------------------------------------
:func:`discrete_laplace` and :func:`discrete_gaussian` are the exact samplers of Canonne, Kamath
and Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020), evaluated with
integer arithmetic only: every random decision is an exact comparison of uniform integers, so the
output distribution is exactly the stated one (up to the cryptographic assumption on ChaCha20).
They run on whole numpy arrays: Python loops run over rejection *rounds* with boolean masks,
never over samples. Parameters are rationals; a float parameter is converted to the exact rational
it denotes and, when that needs too large a denominator, rounded *up* (more noise, never less):

* discrete Laplace: ``scale`` is kept exactly when it is a fraction with denominator
  ``<= 2**40`` and numerator ``<= 2**62`` (every int, every small ``Fraction``, every float with
  at most 40 fractional bits); otherwise it is rounded up to the next multiple of ``2**-40``
  (of a coarser ``2**-j`` above ``2**22``, keeping the numerator ``<= 2**62``), a relative
  increase below ``2**-40 / scale`` (below ``2**-60`` for scales above ``2**22``).
* discrete Gaussian: ``sigma**2`` (exact square of the rational ``sigma``) is kept when its
  denominator is at most ``2**j`` and otherwise rounded up to a multiple of ``2**-j``, with ``j``
  chosen per ``sigma`` (``0 <= j <= 40``) so that every intermediate of the acceptance test fits in
  int64; the relative increase of ``sigma**2`` is below ``2**-40`` for ``sigma >= 1``.

Floats appear only where they cannot change the output distribution: choosing a proposal
parameter and batch sizes (efficiency only), and the final exact scaling ``Z * 2**-k`` in
:func:`gaussian` and :func:`laplace`, which sample the discrete Gaussian / Laplace on the fine
lattice ``2**-k * Z`` (granularity at most ``sigma * 2**-20``), never by Box-Muller or by
``-b * log(U)`` on doubles (Mironov 2012 attacks those).

Rejection samplers take data-independent but output-dependent time (Jin et al. 2022); callers must
not expose per-release timing.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import numbers
import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from beam_dpsketch.hashing import encode_key

__all__ = [
    "INSECURE_TEST_KEY",
    "NoiseSource",
    "NoiseStream",
    "discrete_gaussian",
    "discrete_laplace",
    "gaussian",
    "laplace",
    "new_secret_key",
]

_STREAM_DOMAIN = b"beam-dpsketch/noise/v1"
_INSECURE_MARKER = b"INSECURE-TESTKEY"
_INSECURE_SEED_DOMAIN = b"beam-dpsketch/insecure-test-seed/v1"

INSECURE_TEST_KEY: bytes = _INSECURE_MARKER + b"beam-dpsketch/v1"
"""A fixed, publicly known 32-byte key. INSECURE: for reproducible tests and demos only.

Anyone can recompute every noise value drawn from it, so a release made with it has no privacy.
"""

_MIN_KEY_BYTES = 16
# Refill granularity of the keystream buffer: large enough that the per-call overhead of
# ``encryptor.update`` is negligible, small enough to stay in cache.
_BLOCK_BYTES = 1 << 16
_ZEROS = bytes(_BLOCK_BYTES)
# cryptography's ChaCha20 refuses to let the 32-bit block counter wrap: 2**32 blocks of 64 bytes.
_MAX_STREAM_BYTES = (1 << 32) * 64

_INT64_MAX = (1 << 63) - 1
# Bounds up to 2**26 use 32-bit words: rejection then costs at most 1/64 of a redraw.
_SMALL_BOUND = 1 << 26

# Limits of the exact integer paths (see the module docstring and the samplers' docstrings).
_LAPLACE_MAX_DEN = 1 << 40
_LAPLACE_MAX_NUM = 1 << 62
_LAPLACE_MAX_SCALE = 1 << 52
_GAUSS_MIN_SIGMA = Fraction(1, 16)
_GAUSS_MAX_SIGMA = 1 << 30
_GAUSS_BUDGET_BITS = 48
_GAUSS_MAX_DEN_BITS = 40
_LATTICE_BITS = 20


def new_secret_key() -> bytes:
    """Return a fresh 32-byte secret key from ``os.urandom``."""
    return os.urandom(32)


def _check_count(n: Any, name: str) -> int:
    if isinstance(n, bool | np.bool_) or not isinstance(n, int | np.integer):
        raise TypeError(f"{name} must be a non-negative int, got {type(n).__name__}")
    n = int(n)
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


# --------------------------------------------------------------------------------------------
# Keyed streams
# --------------------------------------------------------------------------------------------


class NoiseStream:
    """A deterministic cryptographic random stream for one release.

    The stream is the ChaCha20 keystream (RFC 7539 block function, ``cryptography`` package) under
    a 256-bit per-release key, block counter starting at 0 and an all-zero nonce (safe because
    every release has its own key). Bytes are consumed strictly in order, so a stream is a pure
    function of its key and of the sequence of calls made on it. :meth:`uint64` is also chunk
    invariant: ``uint64(3)`` then ``uint64(5)`` returns the same eight values as ``uint64(8)``.
    Other methods consume whole bytes in data-independent amounts except for rejection rounds.

    Build streams with :meth:`NoiseSource.stream`. A stream pickles as its key, release id and
    position and resumes where it was. At most ``2**38`` bytes (256 GiB) can be drawn.

    Parameters
    ----------
    stream_key
        The 32-byte per-release ChaCha20 key.
    release_id
        The release id it was derived from (only shown in ``repr``).
    position
        Number of keystream bytes already consumed (used by unpickling).
    """

    __slots__ = ("_key", "_release_id", "_enc", "_buf", "_pos", "_consumed", "_generated")

    def __init__(self, stream_key: bytes, release_id: Any = None, position: int = 0) -> None:
        if not isinstance(stream_key, bytes) or len(stream_key) != 32:
            raise ValueError("stream_key must be 32 bytes")
        position = _check_count(position, "position")
        if position > _MAX_STREAM_BYTES:
            raise ValueError(f"position must be <= {_MAX_STREAM_BYTES}, got {position}")
        self._key = stream_key
        self._release_id = release_id
        block, skip = divmod(position, 64)
        # The first 4 nonce bytes are ChaCha20's little-endian block counter: seek to the block.
        nonce = block.to_bytes(4, "little") + bytes(12) if block < (1 << 32) else bytes(16)
        self._enc = Cipher(algorithms.ChaCha20(stream_key, nonce), mode=None).encryptor()
        self._buf = b""
        self._pos = 0
        self._generated = block * 64
        self._consumed = block * 64
        if skip:
            self._take(skip)

    @property
    def position(self) -> int:
        """Number of keystream bytes consumed so far."""
        return self._consumed

    def __repr__(self) -> str:
        return f"NoiseStream(release_id={self._release_id!r}, position={self._consumed})"

    def __reduce__(self) -> tuple:
        return (NoiseStream, (self._key, self._release_id, self._consumed))

    def _take(self, nbytes: int) -> bytes | bytearray | memoryview:
        """The next ``nbytes`` keystream bytes."""
        buf, pos = self._buf, self._pos
        end = pos + nbytes
        if end <= len(buf):
            self._pos = end
            self._consumed += nbytes
            return memoryview(buf)[pos:end]
        head = buf[pos:]
        need = nbytes - len(head)
        if need <= _BLOCK_BYTES:
            fill = _BLOCK_BYTES
            if self._generated + fill > _MAX_STREAM_BYTES:
                fill = need
            self._check_budget(fill)
            fresh = self._enc.update(memoryview(_ZEROS)[:fill])
            self._generated += fill
            self._buf, self._pos = fresh, need
            self._consumed += nbytes
            return head + fresh[:need] if head else memoryview(fresh)[:need]
        # Large request: encrypt the cached zero block straight into the output, chunk by chunk;
        # encrypting a fresh bytes(n) of zeros is several times slower (allocation, page faults).
        self._check_budget(need)
        out = bytearray(nbytes)
        out[: len(head)] = head
        view = memoryview(out)
        offset = len(head)
        while nbytes - offset >= _BLOCK_BYTES:
            self._enc.update_into(_ZEROS, view[offset : offset + _BLOCK_BYTES])
            offset += _BLOCK_BYTES
        if offset < nbytes:
            view[offset:] = self._enc.update(memoryview(_ZEROS)[: nbytes - offset])
        self._generated += need
        self._buf, self._pos = b"", 0
        self._consumed += nbytes
        return out

    def _check_budget(self, nbytes: int) -> None:
        if self._generated + nbytes > _MAX_STREAM_BYTES:
            raise RuntimeError("NoiseStream exhausted: a release may draw at most 2**38 bytes")

    def _u64(self, n: int) -> np.ndarray:
        return np.frombuffer(self._take(8 * n), dtype="<u8")

    def _u32(self, n: int) -> np.ndarray:
        return np.frombuffer(self._take(4 * n), dtype="<u4")

    def uint64(self, n: int) -> np.ndarray:
        """``n`` independent uniform 64-bit integers (little-endian words of the keystream)."""
        n = _check_count(n, "n")
        return self._u64(n).astype(np.uint64)

    def random_bits(self, n: int) -> np.ndarray:
        """``n`` independent fair bits as a bool array (consumes ``ceil(n / 8)`` bytes)."""
        n = _check_count(n, "n")
        return self._bits(n)

    def _bits(self, n: int) -> np.ndarray:
        raw = np.frombuffer(self._take((n + 7) // 8), dtype=np.uint8)
        return np.unpackbits(raw, count=n, bitorder="little").view(np.bool_)

    def uniform_below(self, bound: int, n: int) -> np.ndarray:
        """``n`` independent integers uniform on ``{0, ..., bound - 1}``, exactly (int64).

        Rejection sampling, so there is no modulo bias: a power of two takes the top bits of a
        word; any other bound draws ``B``-bit words (``B = 32`` for ``bound <= 2**26``, else 64),
        keeps those below ``w * bound`` with ``w = floor(2**B / bound)`` and returns ``word // w``,
        so every output value has exactly ``w`` accepted words mapping to it.

        Parameters
        ----------
        bound
            An int in ``[1, 2**63]``.
        n
            Number of values.
        """
        if isinstance(bound, bool | np.bool_) or not isinstance(bound, int | np.integer):
            raise TypeError(f"bound must be an int, got {type(bound).__name__}")
        bound = int(bound)
        if not 1 <= bound <= 1 << 63:
            raise ValueError(f"bound must be in [1, 2**63], got {bound}")
        return self._uniform_below(bound, _check_count(n, "n"))

    def _words(self, bits: int, n: int) -> np.ndarray:
        return self._u32(n) if bits == 32 else self._u64(n)

    def _uniform_below(self, bound: int, n: int) -> np.ndarray:
        if bound == 1 or n == 0:
            return np.zeros(n, dtype=np.int64)
        if bound & (bound - 1) == 0:
            bits = bound.bit_length() - 1
            if bits <= 32:
                return (self._u32(n) >> np.uint32(32 - bits)).astype(np.int64)
            return (self._u64(n) >> np.uint64(64 - bits)).astype(np.int64)
        bits = 32 if bound <= _SMALL_BOUND else 64
        dtype = np.uint32 if bits == 32 else np.uint64
        w = (1 << bits) // bound
        limit, wd = dtype(w * bound), dtype(w)
        out = np.empty(n, dtype=np.int64)
        filled = 0
        while filled < n:
            x = self._words(bits, n - filled)
            # numpy divides by a scalar with libdivide: far faster than a multiply-high in numpy.
            vals = x[x < limit] // wd
            out[filled : filled + vals.size] = vals
            filled += vals.size
        return out

    def _bernoulli_ratio(self, num: np.ndarray | int, den: int, n: int) -> np.ndarray:
        """Independent Bernoulli(num[i] / den), ``0 <= num[i] < den`` (or ``den == 1``), exactly.

        A word ``x`` uniform on ``[0, w * den)`` (``w = floor(2**B / den)``, larger words redrawn)
        satisfies ``P[x < num * w] = num / den``: one comparison, no division.
        """
        if den == 1:
            return np.broadcast_to(np.asarray(num) >= 1, (n,)).copy()
        bits = 32 if den <= _SMALL_BOUND else 64
        dtype = np.uint32 if bits == 32 else np.uint64
        w = (1 << bits) // den
        limit = w * den
        x = self._words(bits, n)
        if limit < 1 << bits:
            lim = dtype(limit)
            bad = np.flatnonzero(x >= lim)
            if bad.size:
                x = x.copy()
                while bad.size:
                    x[bad] = self._words(bits, bad.size)
                    bad = bad[x[bad] >= lim]
        if isinstance(num, int):
            return x < dtype(num * w)
        if bits == 32:
            return x < num * w
        return x < num.astype(np.uint64) * np.uint64(w)


class NoiseSource:
    """The secret key of a pipeline's noise, and a factory of per-release :class:`NoiseStream`.

    Parameters
    ----------
    secret_key
        At least 16 bytes (32 recommended). ``None`` draws 32 bytes from ``os.urandom``. Keep it
        secret: with the key and a release id anyone can recompute that release's noise.

    Notes
    -----
    Pickling stores only the key bytes (a source travels to Beam workers inside DoFns), and
    ``repr`` never shows the key.
    """

    __slots__ = ("_secret_key",)

    def __init__(self, secret_key: bytes | None = None) -> None:
        if secret_key is None:
            secret_key = new_secret_key()
        elif isinstance(secret_key, bytearray):
            secret_key = bytes(secret_key)
        if not isinstance(secret_key, bytes):
            raise TypeError(f"secret_key must be bytes or None, got {type(secret_key).__name__}")
        if len(secret_key) < _MIN_KEY_BYTES:
            raise ValueError(
                f"secret_key must be at least {_MIN_KEY_BYTES} bytes, got {len(secret_key)}"
            )
        self._secret_key = secret_key

    @classmethod
    def insecure_for_tests(cls, seed: int = 0) -> NoiseSource:
        """A source whose key is derived from ``seed`` alone. INSECURE: tests and demos only.

        The key is ``b"INSECURE-TESTKEY" + SHA-256(domain + encode_key(seed))[:16]``; anyone who
        knows or guesses the seed can recompute all its noise. :attr:`is_insecure` is ``True``.
        """
        if isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        digest = hashlib.sha256(_INSECURE_SEED_DOMAIN + encode_key(int(seed))).digest()
        return cls(_INSECURE_MARKER + digest[:16])

    @classmethod
    def zero_noise_for_tests(cls) -> NoiseSource:
        """A source whose samplers return exact zeros. TEST-ONLY: nothing it releases is private.

        The spec oracles "with the noise scale forced to zero" (e.g. spec lazy-sketch section 8,
        dpsw-sketch section 8) compare a private sketch with its exact non-private counterpart.
        Every sampler in this module validates its parameters as usual and then returns zeros when
        handed a stream of this source. :attr:`is_zero_noise` and :attr:`is_insecure` are
        ``True``, and :func:`check_release_source` (called by every Beam transform and the
        command line) refuses it, so it cannot be enabled in a release path.
        """
        return _ZeroNoiseSource(_ZERO_NOISE_KEY)

    @property
    def is_insecure(self) -> bool:
        """Whether the key is a publicly known test key (:data:`INSECURE_TEST_KEY` or seeded)."""
        return self._secret_key.startswith(_INSECURE_MARKER)

    @property
    def is_zero_noise(self) -> bool:
        """Whether this is the test-only zero-noise source of :meth:`zero_noise_for_tests`."""
        return False

    def __repr__(self) -> str:
        if self.is_insecure:
            return "NoiseSource(<INSECURE test key>)"
        return "NoiseSource(<secret key>)"

    def __reduce__(self) -> tuple:
        return (NoiseSource, (self._secret_key,))

    def stream(self, release_id: Any) -> NoiseStream:
        """The noise stream of one release.

        Parameters
        ----------
        release_id
            Anything :func:`beam_dpsketch.hashing.encode_key` accepts (str, bytes, int, tuples of
            these), e.g. ``("DPHeavyHitters/3", window_start, window_end, pane_index)``. Use a
            distinct id for every release: equal ids give identical noise.
        """
        try:
            encoded = encode_key(release_id)
        except TypeError as exc:
            raise TypeError(f"release_id: {exc}") from None
        key = hmac.new(self._secret_key, _STREAM_DOMAIN + encoded, hashlib.sha256).digest()
        return NoiseStream(key, release_id)


class _ZeroNoiseStream(NoiseStream):
    """A stream the samplers recognise and answer with zeros (see ``zero_noise_for_tests``)."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        return (_ZeroNoiseStream, (self._key, self._release_id, self._consumed))


class _ZeroNoiseSource(NoiseSource):
    __slots__ = ()

    @property
    def is_zero_noise(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "NoiseSource(<TEST-ONLY zero noise>)"

    def __reduce__(self) -> tuple:
        return (_ZeroNoiseSource, (self._secret_key,))

    def stream(self, release_id: Any) -> NoiseStream:
        base = super().stream(release_id)
        return _ZeroNoiseStream(base._key, release_id)


_ZERO_NOISE_KEY = _INSECURE_MARKER + b"ZERO-NOISE-TEST!"


def check_release_source(noise_source: Any, name: str = "noise_source") -> NoiseSource:
    """``noise_source`` (a new secret :class:`NoiseSource` when ``None``), checked for a release path.

    Raises ``TypeError`` for anything but a :class:`NoiseSource` and ``ValueError`` for the
    test-only source of :meth:`NoiseSource.zero_noise_for_tests`, whose "releases" carry no noise.
    Insecure seeded sources are allowed (tests and demos need reproducible noise) but the callers
    log a warning for them.
    """
    if noise_source is None:
        return NoiseSource()
    if not isinstance(noise_source, NoiseSource):
        raise TypeError(f"{name} must be a NoiseSource or None, got {type(noise_source).__name__}")
    if noise_source.is_zero_noise:
        raise ValueError(
            f"{name} is the test-only zero-noise source; it cannot be used in a release path"
        )
    return noise_source


def _zeros_if_test(stream: NoiseStream, size: int, dtype: Any) -> np.ndarray | None:
    if type(stream) is _ZeroNoiseStream:
        return np.zeros(size, dtype=dtype)
    return None


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _as_positive_fraction(value: Any, name: str) -> Fraction:
    """The exact rational value of a positive, finite int / float / Fraction parameter."""
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be an int, float or fractions.Fraction, got bool")
    if isinstance(value, float | np.floating):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
        x = Fraction(value)
    elif isinstance(value, int | np.integer):
        x = Fraction(int(value))
    elif isinstance(value, numbers.Rational):
        x = Fraction(int(value.numerator), int(value.denominator))
    else:
        raise TypeError(
            f"{name} must be an int, float or fractions.Fraction, got {type(value).__name__}"
        )
    if x <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return x


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(x: Fraction, max_den: int, max_num: int) -> Fraction:
    """``x`` itself if it fits, else the smallest multiple of ``1/den`` that is ``>= x``.

    ``den`` is the largest power of two ``<= max_den`` keeping the numerator ``<= max_num``.
    Rounding up means more noise than asked for, never less.
    """
    if x.denominator <= max_den and x.numerator <= max_num:
        return x
    den = max_den
    while den > 1 and _ceil_div(x.numerator * den, x.denominator) > max_num:
        den >>= 1
    return Fraction(_ceil_div(x.numerator * den, x.denominator), den)


def _laplace_fraction(scale: Fraction, name: str) -> Fraction:
    if scale > _LAPLACE_MAX_SCALE:
        raise ValueError(f"{name} must be <= 2**52, got {float(scale)!r}")
    return _round_up(scale, _LAPLACE_MAX_DEN, _LAPLACE_MAX_NUM)


@dataclass(frozen=True)
class _GaussParams:
    """Integer constants of the discrete Gaussian sampler for one ``sigma**2 = p/q``.

    The proposal is the discrete Laplace with scale ``tn/ts = sigma**2 / c`` and ``c = cn/cd``;
    a proposal ``y`` is accepted with probability ``exp(-gamma)``, where
    ``gamma = (|y| - c)**2 / (2 sigma**2) = mult * (cd*|y| - cn)**2 / den``.
    """

    sigma2: Fraction
    tn: int
    ts: int
    cn: int
    cd: int
    mult: int
    den: int
    ymax: int
    acceptance: float


def _optimal_shift(sigma2: float) -> float:
    """The ``c`` maximising the acceptance rate: the root of ``c * sinh(c / sigma2) = 1``.

    The acceptance rate is ``sum_y exp(-y**2/(2 s2)) * exp(-c**2/(2 s2)) * (1-a)/(1+a)`` with
    ``a = exp(-c/s2)``; its log-derivative in ``c`` vanishes exactly there. The root lies in
    ``(0, sigma]`` because ``sigma * sinh(1/sigma) >= 1``. Only efficiency depends on it.
    """
    lo, hi = 0.0, math.sqrt(sigma2)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid * math.sinh(mid / sigma2) < 1.0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def _gaussian_params(sigma: Fraction, name: str) -> _GaussParams:
    if sigma < _GAUSS_MIN_SIGMA:
        raise ValueError(
            f"{name} must be >= 1/16 (a smaller discrete Gaussian is 0 with probability "
            f"> 1 - 1e-55), got {float(sigma)!r}"
        )
    if sigma > _GAUSS_MAX_SIGMA:
        raise ValueError(f"{name} must be <= 2**30, got {float(sigma)!r}")
    exact2 = sigma * sigma
    s2f = float(exact2)
    c_opt = _optimal_shift(s2f)
    # c = cn/cd with cd a power of two making c_opt * cd >= 8: within 1/16 of the optimum, where
    # the acceptance rate is flat, while keeping cd (and the integers below) small.
    k = max(0, math.ceil(math.log2(8.0 / c_opt)))
    cd = 1 << k
    # q <= 2**j keeps mult * (cd*|y| - cn)**2 < 2**63 for |y| up to ~60 sigma and den < 2**51.
    e = exact2.numerator.bit_length() - exact2.denominator.bit_length()
    j = min(_GAUSS_MAX_DEN_BITS, max(0, _GAUSS_BUDGET_BITS - e - 2 * k))
    s2 = _round_up(exact2, 1 << j, 1 << 61)
    p, q = s2.numerator, s2.denominator
    cn = max(1, math.floor(c_opt * cd + 0.5))
    g = math.gcd(q, 2 * p * cd * cd)
    mult = q // g
    den = 2 * p * cd * cd // g
    if den > 1 << 62:
        raise ValueError(f"{name} is too large for the exact sampler, got {float(sigma)!r}")
    t = s2 / Fraction(cn, cd)
    limit = math.isqrt(_INT64_MAX // mult)
    ymax = (limit + cn) // cd
    # Acceptance estimate (floats: batch sizing only).
    sf = math.sqrt(s2f)
    c = cn / cd
    if sf > 50:
        z_gauss = sf * math.sqrt(2.0 * math.pi)
    else:
        zs = np.arange(-math.ceil(12 * sf) - 2, math.ceil(12 * sf) + 3, dtype=np.float64)
        z_gauss = float(np.exp(-(zs * zs) / (2.0 * s2f)).sum())
    x = c / s2f
    z_lap = (1.0 + math.exp(-x)) / -math.expm1(-x)
    acc = z_gauss * math.exp(-c * c / (2.0 * s2f)) / z_lap
    return _GaussParams(s2, t.numerator, t.denominator, cn, cd, mult, den, ymax, acc)


# --------------------------------------------------------------------------------------------
# Exact Bernoulli building blocks (CKS 2020; spec dp-misra-gries Appendix B)
# --------------------------------------------------------------------------------------------


def _bernoulli_exp_neg_fraction(stream: NoiseStream, num: np.ndarray, den: int) -> np.ndarray:
    """Independent Bernoulli(exp(-num[i]/den)) for ``0 <= num[i] < den`` (CKS, gamma < 1).

    CKS: ``K = 1; while Bernoulli(gamma/K): K += 1; return K odd``. All active elements share
    ``K`` in a round, so ``Bernoulli(gamma/K)`` is the product of two independent exact draws
    with scalar denominators, Bernoulli(1/K) and Bernoulli(num/den); the cheap Bernoulli(1/K)
    goes first so that fewer elements need the second.
    """
    n = num.size
    result = np.empty(n, dtype=np.bool_)
    go = stream._bernoulli_ratio(num, den, n)
    result[~go] = True
    idx = np.flatnonzero(go)
    cur = num[idx]
    k = 2
    while idx.size:
        go = stream._bernoulli_ratio(1, k, idx.size)
        result[idx[~go]] = bool(k & 1)
        idx, cur = idx[go], cur[go]
        if idx.size:
            go = stream._bernoulli_ratio(cur, den, idx.size)
            result[idx[~go]] = bool(k & 1)
            idx, cur = idx[go], cur[go]
        k += 1
    return result


def _bernoulli_exp_neg_one(stream: NoiseStream, n: int) -> np.ndarray:
    """Independent Bernoulli(exp(-1)): the CKS loop with gamma = 1, Bernoulli(1/K) each round."""
    result = np.empty(n, dtype=np.bool_)
    idx = np.arange(n)
    k = 2
    while idx.size:
        go = stream._bernoulli_ratio(1, k, idx.size)
        result[idx[~go]] = bool(k & 1)
        idx = idx[go]
        k += 1
    return result


def _geometric_exp_neg_one(stream: NoiseStream, n: int) -> np.ndarray:
    """Number of Bernoulli(exp(-1)) successes before the first failure, ``P[V >= v] = e**-v``."""
    v = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    while idx.size:
        idx = idx[_bernoulli_exp_neg_one(stream, idx.size)]
        v[idx] += 1
    return v


def _bernoulli_exp_neg_int(stream: NoiseStream, m: np.ndarray) -> np.ndarray:
    """Independent Bernoulli(exp(-m[i])), integer ``m[i] >= 0``: m successes of Bernoulli(exp(-1)).

    ``m`` may be an object array of Python ints larger than int64; those are consumed in int64
    chunks (an element only needs a second chunk after ``2**62`` consecutive successes).
    """
    n = m.size
    result = np.ones(n, dtype=np.bool_)
    if m.dtype == object:
        chunk_cap = 1 << 62
        rem = m
        idx = np.arange(n)
        while idx.size:
            chunk = np.array([min(int(r), chunk_cap) for r in rem], dtype=np.int64)
            ok = _bernoulli_exp_neg_int(stream, chunk)
            result[idx[~ok]] = False
            rem = np.array([int(r) - int(c) for r, c in zip(rem, chunk, strict=True)], object)
            keep = ok & (rem > 0)
            idx, rem = idx[keep], rem[keep]
        return result
    idx = np.flatnonzero(m > 0)
    rem = m[idx]
    while idx.size:
        ok = _bernoulli_exp_neg_one(stream, idx.size)
        result[idx[~ok]] = False
        rem = rem[ok] - 1
        idx = idx[ok]
        keep = rem > 0
        idx, rem = idx[keep], rem[keep]
    return result


def _batch_size(need: int, acceptance: float) -> int:
    # Enough candidates that one round usually suffices; only speed depends on this.
    expected = need / acceptance
    return int(expected + 4.0 * math.sqrt(expected) + 16)


# --------------------------------------------------------------------------------------------
# Discrete Laplace
# --------------------------------------------------------------------------------------------


def _laplace_acceptance(t: int, s: int) -> float:
    p_d = -math.expm1(-1.0) / (t * -math.expm1(-1.0 / t)) if t > 1 else 1.0
    return p_d * (1.0 - 0.5 * -math.expm1(-s / t))


def _floor_div_geometric(u: np.ndarray, v: np.ndarray, t: int, s: int) -> np.ndarray:
    """Exact ``(u + t*v) // s`` without int64 overflow of ``t*v``.

    With ``t = a*s + b`` and ``u = au*s + bu``: ``(u + t*v) // s = a*v + au + (bu + b*v) // s``,
    all in int64 while ``v <= vmax``; the (astronomically rare) larger ``v`` use Python ints.
    """
    a, b = divmod(t, s)
    au = u // s
    bu = u - au * s
    vmax = min((1 << 62) // s, (1 << 62) // (a + 2)) - 2
    if v.size == 0 or int(v.max()) <= vmax:
        return a * v + au + (bu + b * v) // s
    out = np.empty(v.size, dtype=np.int64)
    small = v <= vmax
    vs = v[small]
    out[small] = a * vs + au[small] + (bu[small] + b * vs) // s
    big = np.flatnonzero(~small)
    for i, ui, vi in zip(big.tolist(), u[big].tolist(), v[big].tolist(), strict=True):
        y = (ui + t * vi) // s
        if y > _INT64_MAX:
            raise OverflowError("discrete Laplace sample does not fit in int64")
        out[i] = y
    return out


def _discrete_laplace_ts(stream: NoiseStream, t: int, s: int, n: int) -> np.ndarray:
    """``n`` exact samples with ``P[Z = z] ~ exp(-|z| * s / t)`` (CKS Algorithm 2), int64."""
    out = np.empty(n, dtype=np.int64)
    acc = _laplace_acceptance(t, s)
    filled = 0
    while filled < n:
        batch = _batch_size(n - filled, acc)
        # X = U + t*V is geometric with ratio exp(-1/t); Y = X // s is geometric with ratio
        # exp(-s/t); a sign bit (rejecting "-0") makes it two-sided.
        u = stream._uniform_below(t, batch)
        if t > 1:
            u = u[_bernoulli_exp_neg_fraction(stream, u, t)]
        v = _geometric_exp_neg_one(stream, u.size)
        y = _floor_div_geometric(u, v, t, s)
        negative = stream._bits(y.size)
        z = np.where(negative, -y, y)[~(negative & (y == 0))]
        take = min(z.size, n - filled)
        out[filled : filled + take] = z[:take]
        filled += take
    return out


def discrete_laplace(stream: NoiseStream, scale: int | float | Fraction, size: int) -> np.ndarray:
    """Exact discrete Laplace samples: ``P[Z = z] = (1-a)/(1+a) * a**|z|``, ``a = exp(-1/scale)``.

    The algorithm of Canonne, Kamath and Steinke (2020, Algorithm 2; spec dp-misra-gries
    Appendix B, ``discrete_laplace(s, t)`` with ``scale = t/s``), vectorised: every decision is an
    exact comparison of uniform integers from ``stream``, so the distribution is exact. This is
    ``Geo2(exp(-1/scale))``; for sensitivity ``Delta`` and pure ``eps``-DP use
    ``scale = Delta / eps``.

    Parameters
    ----------
    stream
        The release's :class:`NoiseStream`.
    scale
        Positive and finite, at most ``2**52``: an int, a ``fractions.Fraction`` (used exactly) or
        a float, taken as the exact binary fraction it denotes. A value with denominator above
        ``2**40`` (e.g. most floats with a fractional part, such as ``3.7``) is rounded **up** to
        ``ceil(scale * 2**40) / 2**40`` (a coarser power of two above ``2**22``, see the module
        docstring): more noise, never less. Pass ``Fraction(37, 10)`` for exactly 3.7.
    size
        Number of samples, ``>= 0``.

    Returns
    -------
    numpy.ndarray
        int64 array of shape ``(size,)``.
    """
    size = _check_count(size, "size")
    frac = _laplace_fraction(_as_positive_fraction(scale, "scale"), "scale")
    zeros = _zeros_if_test(stream, size, np.int64)
    if zeros is not None:
        return zeros
    if size == 0:
        return np.empty(0, dtype=np.int64)
    return _discrete_laplace_ts(stream, frac.numerator, frac.denominator, size)


# --------------------------------------------------------------------------------------------
# Discrete Gaussian
# --------------------------------------------------------------------------------------------


def _gamma_parts(absy: np.ndarray, prm: _GaussParams) -> tuple[np.ndarray, np.ndarray]:
    """``gamma = m + r/den`` exactly: ``m`` (int64, or object if huge) and ``0 <= r < den``."""
    small = absy <= prm.ymax
    if small.all():
        a = prm.cd * absy - prm.cn
        num = a * a * prm.mult
        m = num // prm.den
        return m, num - m * prm.den
    # |y| beyond the int64-safe bound: rare (see discrete_gaussian), so exact Python ints are
    # affordable for those elements only.
    m = np.empty(absy.size, dtype=object)
    r = np.empty(absy.size, dtype=np.int64)
    ys = absy[small]
    a = prm.cd * ys - prm.cn
    num = a * a * prm.mult
    ms = num // prm.den
    m[small] = ms.tolist()
    r[small] = num - ms * prm.den
    big = np.flatnonzero(~small)
    for i, y in zip(big.tolist(), absy[big].tolist(), strict=True):
        mi, ri = divmod(prm.mult * (prm.cd * y - prm.cn) ** 2, prm.den)
        m[i] = mi
        r[i] = ri
    if all(int(x) <= _INT64_MAX for x in m[big]):
        m = m.astype(np.int64)
    return m, r


def _discrete_gaussian_prm(stream: NoiseStream, prm: _GaussParams, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        batch = _batch_size(n - filled, prm.acceptance)
        y = _discrete_laplace_ts(stream, prm.tn, prm.ts, batch)
        m, r = _gamma_parts(np.abs(y), prm)
        ok = _bernoulli_exp_neg_fraction(stream, r, prm.den)
        sel = np.flatnonzero(ok & (m > 0))
        if sel.size:
            ok[sel] = _bernoulli_exp_neg_int(stream, m[sel])
        z = y[ok]
        take = min(z.size, n - filled)
        out[filled : filled + take] = z[:take]
        filled += take
    return out


def discrete_gaussian(stream: NoiseStream, sigma: int | float | Fraction, size: int) -> np.ndarray:
    """Exact discrete Gaussian samples: ``P[Z = z] ~ exp(-z**2 / (2 sigma**2))`` on the integers.

    Canonne, Kamath and Steinke (2020, Algorithm 3; spec dp-misra-gries Appendix B): draw ``Y``
    from a discrete Laplace proposal of scale ``t = sigma**2 / c`` and accept it with probability
    ``exp(-(|Y| - c)**2 / (2 sigma**2))``, an exact CKS Bernoulli on the rational ``gamma``.
    The product of the two weights is ``exp(-Y**2/(2 sigma**2)) * exp(-c**2/(2 sigma**2))`` for
    every ``c > 0``, so the output is exact for any ``c``; CKS take ``t = floor(sigma) + 1``, i.e.
    ``c = sigma**2 / t``. Here ``c`` is a dyadic rational near the root of
    ``c * sinh(c / sigma**2) = 1``, which maximises the acceptance rate (about 0.76 for
    ``sigma >= 3`` against 0.52-0.75 for the CKS choice). ``gamma``'s numerator and denominator
    are computed exactly in int64 for every proposal within about ``60 sigma`` of 0 when
    ``sigma <= 5e7`` (within ``3e9`` otherwise); rarer proposals use exact Python ints.

    Parameters
    ----------
    stream
        The release's :class:`NoiseStream`.
    sigma
        In ``[1/16, 2**30]``: an int, a ``fractions.Fraction`` or a float (taken exactly).
        ``sigma**2`` is computed exactly and, if its denominator exceeds ``2**j``, rounded
        **up** to a multiple of ``2**-j``: more noise, never less. ``j`` is
        ``48 - floor(log2(sigma**2)) - 2 log2(cd)`` clipped to ``[0, 40]``, where ``cd <= 2**9``
        is the denominator of ``c`` (1 for ``sigma >= 8``); the relative increase of
        ``sigma**2`` is below ``2**-40`` for ``sigma >= 1`` and below ``2**-30`` for all sigma.
    size
        Number of samples, ``>= 0``.

    Returns
    -------
    numpy.ndarray
        int64 array of shape ``(size,)``.
    """
    size = _check_count(size, "size")
    prm = _gaussian_params(_as_positive_fraction(sigma, "sigma"), "sigma")
    zeros = _zeros_if_test(stream, size, np.int64)
    if zeros is not None:
        return zeros
    if size == 0:
        return np.empty(0, dtype=np.int64)
    return _discrete_gaussian_prm(stream, prm, size)


# --------------------------------------------------------------------------------------------
# Real-valued noise on a fine lattice
# --------------------------------------------------------------------------------------------


def _lattice_exponent(x: Fraction) -> int:
    """``k`` with ``x * 2**k`` in ``[2**20, 2**21)``: lattice step ``2**-k <= x * 2**-20``."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if x < Fraction(2) ** e:
        e -= 1
    return _LATTICE_BITS - e


def _check_lattice(k: int, name: str, value: Any) -> None:
    # Outputs Z * 2**-k must be normal doubles for the scaling to be exact.
    if not -900 <= k <= 900:
        raise ValueError(f"{name} is outside the supported range [2**-880, 2**880]: {value!r}")


def gaussian(stream: NoiseStream, sigma: int | float | Fraction, size: int) -> np.ndarray:
    """Real-valued Gaussian noise for mechanisms specified with continuous noise (float64).

    Returns the **exact discrete Gaussian on the lattice** ``2**-k * Z``: a
    :func:`discrete_gaussian` sample with parameter ``sigma * 2**k`` divided by ``2**k``, where
    ``k`` is chosen so that the granularity ``2**-k`` is at most ``sigma * 2**-20`` (i.e.
    ``sigma * 2**k`` lies in ``[2**20, 2**21)``). Following Canonne, Kamath and Steinke (2020),
    this is how real-valued noise is drawn without the floating-point attacks on Box-Muller or
    inverse-CDF samplers (Mironov 2012); its distance to ``N(0, sigma**2)`` is negligible. The
    division by ``2**k`` is exact in float64. See spec dp-misra-gries section 11.1.

    Parameters
    ----------
    stream
        The release's :class:`NoiseStream`.
    sigma
        Positive, finite (int, float or ``fractions.Fraction``, taken exactly).
    size
        Number of samples, ``>= 0``.
    """
    size = _check_count(size, "size")
    x = _as_positive_fraction(sigma, "sigma")
    k = _lattice_exponent(x)
    _check_lattice(k, "sigma", sigma)
    prm = _gaussian_params(x * Fraction(2) ** k, "sigma")
    zeros = _zeros_if_test(stream, size, np.float64)
    if zeros is not None:
        return zeros
    if size == 0:
        return np.empty(0, dtype=np.float64)
    return np.ldexp(_discrete_gaussian_prm(stream, prm, size).astype(np.float64), -k)


def laplace(stream: NoiseStream, scale: int | float | Fraction, size: int) -> np.ndarray:
    """Real-valued Laplace noise with density ``~ exp(-|x|/scale)`` on a fine lattice (float64).

    Returns the **exact discrete Laplace on the lattice** ``2**-k * Z``: a
    :func:`discrete_laplace` sample with scale ``scale * 2**k`` divided by ``2**k``, with
    granularity ``2**-k <= scale * 2**-20``. Never ``-b * log(U)`` on doubles (Mironov 2012);
    see Canonne, Kamath and Steinke (2020) and spec dp-misra-gries section 11.1.

    Parameters
    ----------
    stream
        The release's :class:`NoiseStream`.
    scale
        Positive, finite (int, float or ``fractions.Fraction``). ``scale * 2**k`` is kept exactly
        when its denominator is at most ``2**40`` (always for floats), else rounded up.
    size
        Number of samples, ``>= 0``.
    """
    size = _check_count(size, "size")
    x = _as_positive_fraction(scale, "scale")
    k = _lattice_exponent(x)
    _check_lattice(k, "scale", scale)
    frac = _laplace_fraction(x * Fraction(2) ** k, "scale")
    zeros = _zeros_if_test(stream, size, np.float64)
    if zeros is not None:
        return zeros
    if size == 0:
        return np.empty(0, dtype=np.float64)
    z = _discrete_laplace_ts(stream, frac.numerator, frac.denominator, size)
    return np.ldexp(z.astype(np.float64), -k)
