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

Samplers (docs/algorithms.md#noise-sampling)
--------------------------------------------
:func:`discrete_laplace` and :func:`discrete_gaussian` are the exact samplers of Canonne, Kamath
and Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020): the same proposals
and acceptance probabilities, with every random decision an exact comparison of uniform random
numbers with exact thresholds, so the output distribution is exactly the stated one (up to the
cryptographic assumption on ChaCha20). Uniform integers are drawn by rejection (no modulo bias).
Each Bernoulli(exp(-x)) (CKS decide it with nested loops of rational Bernoulli draws) and the
geometric count ``V`` with ``P[V >= v] = exp(-v)`` are decided by comparing one uniform real
``R``, read lazily 64 bits at a time, with ``exp(-x)``: against exact integer thresholds
``floor(exp(-v) * 2**64)`` for integer ``x``, and against a float bracket ``[lo, hi]`` of
``exp(-x)`` with a proved relative error bound for rational ``x``. When ``R``'s first word does
not settle the comparison (probability about ``2**-39``), more words of ``R`` are read and compared
with ``exp(-x)`` bounded by exact integer arithmetic until it does. The brackets only choose how
many digits of ``R`` are read, never the outcome. Samplers run on numpy arrays in rounds of at most
``2**15`` candidates: Python loops run over rounds and over the rare undecided elements, never
over samples. Parameters are rationals; a float parameter is converted to the exact rational it
denotes and, when that needs too large a denominator, rounded *up* (more noise, never less):

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
parameter and batch sizes (efficiency only), the brackets above (their proved error bound is
about 300 times smaller than the bracket width), and the final exact scaling ``Z * 2**-k`` in
:func:`gaussian` and :func:`laplace`, which sample the discrete Gaussian / Laplace on the fine
lattice ``2**-k * Z`` (granularity at most ``min(1, sigma * 2**-20)``), never by Box-Muller or by
``-b * log(U)`` on doubles (Mironov 2012 attacks those).

Rejection samplers take data-independent but output-dependent time (Jin et al. 2022); callers must
not expose per-release timing.

Why one module
--------------
Every random bit a release publishes comes from here, so this file is the whole audit surface for
randomness: a reviewer checks one file for the key derivation, the keystream and the exactness of
each sampler, and a search for any other source of randomness in the package has one place to
exclude. The samplers share the lazy uniform reader and the exact ``exp(-x)`` comparison, so they
would not split into independent modules anyway.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import numbers
import os
from collections.abc import Sequence
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
    "check_stream",
    "application_source",
    "bernoulli_dyadic",
    "check_release_source",
    "discrete_gaussian",
    "discrete_laplace",
    "gaussian",
    "discrete_laplace_per_key",
    "laplace",
    "new_run_salt",
    "new_secret_key",
]

_STREAM_DOMAIN = b"beam-dpsketch/noise/v1"
_INSECURE_MARKER = b"INSECURE-TESTKEY"
_INSECURE_SEED_DOMAIN = b"beam-dpsketch/insecure-test-seed/v1"
_APPLICATION_DOMAIN = b"beam-dpsketch/application/v1"
_RUN_DOMAIN = b"beam-dpsketch/run/v1"
_SUBSTREAM_DOMAIN = b"beam-dpsketch/substream/v1"
_RUN_SALT_BYTES = 16
# The run salt of an insecure test source: fixed and public, so seeded runs reproduce.
_INSECURE_RUN_SALT = b"INSECURE-RUNSALT"

INSECURE_TEST_KEY: bytes = _INSECURE_MARKER + b"beam-dpsketch/v1"
"""A fixed, publicly known 32-byte key. INSECURE: for reproducible tests and demos only.

Anyone can recompute every noise value drawn from it, so a release made with it has no privacy.
"""

_MIN_KEY_BYTES = 16
# Refill granularity of the keystream buffer: large enough that the per-call overhead of
# ``encryptor.update`` is negligible, small enough to stay in cache.
_BLOCK_BYTES = 1 << 16
_ZEROS = bytes(_BLOCK_BYTES)
# The first refill of a stream: most releases (a count, one key's noise) draw a few words, and
# encrypting a whole block for them would cost more than the draw. Refills then double.
_FIRST_FILL = 1 << 10
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


def new_run_salt(noise_source: NoiseSource) -> bytes:
    """The salt of one run of a transform application whose noise comes from ``noise_source``.

    16 fresh bytes from ``os.urandom`` for a secret source. For an insecure test source
    (:attr:`NoiseSource.is_insecure`) a fixed, public constant instead: INSECURE by design, so
    that a seeded test or demo draws the same noise in every run. Every DP transform draws this
    once per run, when the run starts, and hands it to its release steps as a side input
    (:meth:`NoiseSource.for_run`).
    """
    if noise_source.is_insecure:
        return _INSECURE_RUN_SALT
    return os.urandom(_RUN_SALT_BYTES)


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

    def substream(self, sub_id: Any) -> NoiseStream:
        """An independent stream for the part ``sub_id`` of this release (e.g. one released key).

        Its key is ``HMAC-SHA256(stream_key, domain + encode_key(sub_id))``: a function of this
        stream's key and ``sub_id`` alone, not of this stream's position or of the other parts.
        Noise drawn for one key from ``substream(key)`` is therefore the same whichever other
        keys the release holds and in whatever order they are processed.

        Parameters
        ----------
        sub_id
            Anything :func:`beam_dpsketch.hashing.encode_key` accepts.
        """
        try:
            encoded = encode_key(sub_id)
        except TypeError as exc:
            raise TypeError(f"sub_id: {exc}") from None
        key = hmac.new(self._key, _SUBSTREAM_DOMAIN + encoded, hashlib.sha256).digest()
        # Same class: a substream of a zero-noise test stream is one too.
        return type(self)(key, self._release_id)

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
            # The keystream is the same whatever the refill sizes: only the cost changes.
            fill = min(_BLOCK_BYTES, max(_FIRST_FILL, need, self._generated))
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


def check_stream(stream: Any) -> NoiseStream:
    """Require a :class:`NoiseStream` (a release's keyed noise); ``TypeError`` names ``stream``."""
    if not isinstance(stream, NoiseStream):
        raise TypeError(
            "stream must be a beam_dpsketch.noise.NoiseStream (NoiseSource.stream(release_id)), "
            f"got {type(stream).__name__}"
        )
    return stream


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

    __slots__ = ("_secret_key", "_applications", "_run")

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
        self._applications = 0
        # The last (run salt, run source) of for_run: one derivation per run and worker.
        self._run: tuple[bytes, NoiseSource] | None = None

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

        Tests "with the noise scale forced to zero" (docs/algorithms.md#lazy-oracles,
        docs/algorithms.md#sliding-windows) compare a private sketch with its exact counterpart.
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

    def for_application(self) -> NoiseSource:
        """A source with its own key, for one application of one transform.

        Two transforms given the same source (and even the same label) must never draw the same
        noise, or the difference of their outputs would be the exact difference of their inputs.
        Every DP transform therefore calls this once, at construction, and keeps the result: it
        travels pickled to the workers. Its releases draw from :meth:`for_run` of it, with a salt
        drawn when each run starts, so a pipeline built once and run many times never replays
        its noise.

        The derived key is ``HMAC-SHA256(secret_key, domain + salt)``. For a secret key the salt is
        16 fresh bytes from ``os.urandom``: two applications, or two runs of one pipeline with a
        persisted key and a stable label, never share noise. For an insecure test key the salt is
        this object's application counter, so a seeded test or demo stays reproducible (a fresh
        ``insecure_for_tests(seed)`` gives the same sequence of derived sources) while two
        transforms built from one source still get different noise.
        """
        if self.is_insecure:
            salt = b"counter:" + self._applications.to_bytes(8, "big")
        else:
            salt = b"random:" + os.urandom(16)
        self._applications += 1
        digest = hmac.new(self._secret_key, _APPLICATION_DOMAIN + salt, hashlib.sha256).digest()
        if self.is_insecure:
            # Keep the marker: noise derived from a public key is as public as the key.
            return type(self)(_INSECURE_MARKER + digest[:16])
        return type(self)(digest)

    def for_run(self, salt: bytes) -> NoiseSource:
        """The source of one run of this transform application: its releases draw from it.

        A transform built once can be run many times (a staged template, a pipeline a scheduler
        launches again): its application key, drawn at construction, is then the same in every
        run. Each run therefore draws a ``salt`` when it starts (:func:`new_run_salt`, once per
        run, materialised as a Beam side input before any release reads it) and its releases
        use the key ``HMAC-SHA256(application key, domain + salt)``: two runs never share noise,
        and every retry of a release within one run reads the same salt and re-draws the same
        noise.

        For an insecure test source the result is this source itself (its runs reproduce on
        purpose, and its noise protects nothing). The last derivation is cached, so a worker
        calling this for every bundle or element computes one HMAC per run.

        Parameters
        ----------
        salt
            The run salt: at least 16 bytes.

        Raises
        ------
        TypeError, ValueError
            If ``salt`` is not bytes, or shorter than 16 bytes.
        """
        if not isinstance(salt, bytes):
            raise TypeError(f"salt must be bytes, got {type(salt).__name__}")
        if len(salt) < _RUN_SALT_BYTES:
            raise ValueError(f"salt must be at least {_RUN_SALT_BYTES} bytes")
        if self.is_insecure:
            return self
        cached = self._run
        if cached is not None and cached[0] == salt:
            return cached[1]
        digest = hmac.new(self._secret_key, _RUN_DOMAIN + salt, hashlib.sha256).digest()
        derived = type(self)(digest)
        self._run = (salt, derived)
        return derived

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


def application_source(noise_source: Any, name: str = "noise_source") -> NoiseSource:
    """The noise source of one transform application: checked, then given its own key.

    ``check_release_source(noise_source, name).for_application()``. Every DP transform calls this
    once when it is constructed, so that two transforms sharing a :class:`NoiseSource` (or a
    label) never draw identical noise; see :meth:`NoiseSource.for_application`.
    """
    return check_release_source(noise_source, name).for_application()


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
        x = _float_fraction(value)
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


# Callers pass the same few parameters again and again; Fraction(float) is a pure function.
_float_fraction = functools.lru_cache(maxsize=256)(Fraction)


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
    prm = _gaussian_params_checked(sigma)
    if prm.den > 1 << 62:
        raise ValueError(f"{name} is too large for the exact sampler, got {float(sigma)!r}")
    return prm


# Releases draw with the same few sigmas over and over: the constants (a root-finding loop, an
# acceptance sum) are a pure function of sigma, so they are computed once.
@functools.lru_cache(maxsize=256)
def _gaussian_params_checked(sigma: Fraction) -> _GaussParams:
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
# Exact Bernoulli(exp(-x)) decisions (Canonne, Kamath and Steinke 2020, Algorithm 1)
# --------------------------------------------------------------------------------------------
#
# CKS decide Bernoulli(exp(-x)) with nested loops of rational Bernoulli draws. Here the same
# distribution comes from one comparison "R < exp(-x)" of a uniform real R in [0, 1) whose binary
# digits are read lazily from the stream: the first 64 are one uniform word U, so R lies in
# [U / 2**64, (U + 1) / 2**64). When precomputed bounds lo <= exp(-x) <= hi put that whole range
# on one side, the decision is final (and exact); otherwise (R's range straddles lo or hi:
# probability about 2**-39 per decision for the float bounds, 2**-64 for the integer ones)
# _exp_neg_less appends 64 more digits at a time and compares with exp(-x) bounded by exact
# integer arithmetic until decided. Either way P[R < exp(-x)] = exp(-x) exactly: the bounds only
# decide how many digits are read. Undecided elements are resolved in index order after the
# batch draw, so the stream consumption stays a pure function of the call sequence.


def _exp_neg_series(f: Fraction, w: int) -> tuple[int, int]:
    """``(lo, hi)`` with ``lo <= exp(-f) * 2**w <= hi`` for rational ``0 <= f <= 1``, exactly.

    The terms ``t_n = f**n / n!`` of ``exp(-f) = sum (-1)**n t_n`` are bounded in fixed point at
    ``w + 16`` bits from below and above (``t_n = t_(n-1) * p / (q n)`` with floor resp.
    ceiling division) until ``t_N <= 2**-(w + 16)``. The series alternates with non-increasing
    terms (``f <= 1``), so the tail after ``N`` terms lies in ``[-t_N, t_N]``.
    """
    p, q = f.numerator, f.denominator
    big = w + 16
    tl = th = 1 << big
    lo = hi = 0
    n = 0
    while th > 1:
        if n & 1:
            lo -= th
            hi -= tl
        else:
            lo += tl
            hi += th
        n += 1
        tl = (tl * p) // (q * n)
        th = _ceil_div(th * p, q * n)
    return (lo - 1) >> 16, -((-(hi + 1)) >> 16)


@functools.lru_cache(maxsize=64)
def _exp_neg_one_bounds(w: int) -> tuple[int, int]:
    return _exp_neg_series(Fraction(1), w)


def _exp_neg_interval(x: Fraction, prec: int) -> tuple[int, int]:
    """``(lo, hi)`` with ``lo <= exp(-x) * 2**prec <= hi`` and ``hi - lo <= 2``, for ``x >= 0``.

    ``exp(-x) = exp(-1)**k * exp(-f)`` with ``k = floor(x)``: each factor is bounded by the exact
    series at ``w >= prec + 2k + 40`` bits and the product taken with floor (resp. ceiling)
    rounding; the guard bits absorb the ``k`` roundings relative to ``exp(-k) > 2**(-1.45 k)``.
    """
    if x == 0:
        return 1 << prec, 1 << prec
    if 10 * x >= 7 * (prec + 1):
        # 0.7 > ln 2, so exp(-x) < 2**-(prec + 1): the scaled value is below 1/2.
        return 0, 1
    k = x.numerator // x.denominator
    # Rounded up to a multiple of 64 so that the cached exp(-1) bounds are reused.
    w = -(-(prec + 2 * k + 40) // 64) * 64
    lo, hi = _exp_neg_series(x - k, w)
    if k:
        elo, ehi = _exp_neg_one_bounds(w)
        for _ in range(k):
            lo = (lo * elo) >> w
            hi = -((-hi * ehi) >> w)
    shift = w - prec
    return lo >> shift, -((-hi) >> shift)


def _exp_neg_less(stream: NoiseStream, x: Fraction, digits: list[int]) -> bool:
    """Decide ``R < exp(-x)`` exactly, where ``R = (digits[0] + R') / 2**digits[1]``.

    ``R'`` is uniform on ``[0, 1)`` and read lazily: each undecided step appends a 64-bit word of
    ``stream`` to the known digits (``digits`` is updated in place, so later comparisons of the
    same ``R`` reuse them). ``hi - lo <= 2`` at ``2 + digits[1]`` bits, so a step stays undecided
    with probability at most ``2**-63`` and the loop ends (``exp(-x)`` is irrational for rational
    ``x > 0``; ``x = 0`` is decided at once).
    """
    while True:
        prefix, nbits = digits
        lo, hi = _exp_neg_interval(x, nbits + 2)
        if (prefix + 1) << 2 <= lo:
            return True
        if prefix << 2 >= hi:
            return False
        digits[0] = (prefix << 64) | int(stream._u64(1)[0])
        digits[1] = nbits + 64


def _floor_exp_neg_scaled(x: Fraction, bits: int) -> int:
    """``floor(exp(-x) * 2**bits)`` exactly, for rational ``x > 0`` (never an integer point)."""
    extra = 32
    while True:
        lo, hi = _exp_neg_interval(x, bits + extra)
        if lo >> extra == hi >> extra:
            return lo >> extra
        extra += 32


def _exp_neg_float(x: Fraction) -> float:
    """``exp(-x)`` as a double, relative error at most ``2**-53 (1 + 2**-60)``."""
    prec = 128 + 2 * math.ceil(x)
    lo, hi = _exp_neg_interval(x, prec)
    return math.ldexp(float((lo + hi) >> 1), -prec)


# Integer thresholds F_v = floor(exp(-v) * 2**64), v = 1..44 (exp(-45) * 2**64 < 1). For a word
# U: U < F_v gives R < exp(-v), U > F_v gives R > exp(-v), only U == F_v is undecided.
_GEO_LEVELS = 44
_EXP_NEG_INT_THRESHOLDS = tuple(
    _floor_exp_neg_scaled(Fraction(v), 64) for v in range(1, _GEO_LEVELS + 1)
)
# Geometric V = #{v >= 1 : R < exp(-v)}, so P[V >= v] = exp(-v). Consecutive F_v differ by a
# factor e > 2, so each binade of U holds at most one. For U >= 2**11 the float U >> 11 is exact
# and its IEEE-754 biased exponent is 1022 + bitlen(U) - 11 =: idx; then
# V = count[idx] + (U < thr[idx]) with count[idx] the number of F_v >= 2**bitlen(U) and thr[idx]
# the F_v with U's bit length (0 if none). U < 2**11 (idx 0) takes the exact path.
_GEO_COUNT = np.zeros(1076, dtype=np.int64)
_GEO_THRESHOLD = np.zeros(1076, dtype=np.uint64)
for _bitlen in range(12, 65):
    _GEO_COUNT[1011 + _bitlen] = sum(f >> _bitlen > 0 for f in _EXP_NEG_INT_THRESHOLDS)
    _GEO_THRESHOLD[1011 + _bitlen] = next(
        (f for f in _EXP_NEG_INT_THRESHOLDS if f.bit_length() == _bitlen), 0
    )
_LOW_WORD = np.uint64(1 << 11)
# Bernoulli(exp(-m)) for integer m >= 0: U < _INT_THRESHOLD[min(m, 45)] (entry 0 is unused).
_INT_THRESHOLD = np.array([0, *_EXP_NEG_INT_THRESHOLDS, 0], dtype=np.uint64)
_SHIFT_11 = np.uint64(11)

# Float bounds on exp(-x) for rational x = num/den in [0, 1), scaled by 2**53:
#   y = fl(fl(num) * fl(4096 / den)), j = floor(y), w = y - j (exact), delta = w / 4096,
#   P = fl(T[j] * fl(1 - w (A1 - w (A2 - w A3)))), T[j] = fl(exp(-j / 4096) * 2**53),
# using only IEEE-754 conversions, +, -, * and / (each with relative error <= u = 2**-53; no
# libm call, no fused operation). Error budget (relative, first order in u): y = 4096 x (1 + t)
# with |t| <= 4u, so exp(-y/4096) = exp(-x) (1 + t') with |t'| <= 4u x <= 4u; the cubic Taylor
# polynomial of exp(-delta), delta < 2**-12, truncates below delta**4/24 < 0.71u and its Horner
# evaluation adds < 1.1u; T[j] adds u and the product u; for the discrete Gaussian the factor
# exp(-m) adds 2u (table entry, product) and the margins 2u (products). Total < 13u; doubled
# to 26u to also cover conversions that are only faithfully rounded. The brackets
# P * (1 -+ _MARGIN) with _MARGIN = 2**-40 = 8192u are therefore valid with a factor of 300 to
# spare; tests check them against an independent 80-digit computation.
_EXP_TABLE_SIZE = 1 << 12


def _exp_table() -> np.ndarray:
    # exp(-j/4096), j = 0..4096, by repeated multiplication of exact 128-bit bounds: the 4096
    # floor/ceiling roundings move them by under 2**-110 relative, far below u.
    w = 128
    blo, bhi = _exp_neg_series(Fraction(1, _EXP_TABLE_SIZE), w)
    lo = hi = 1 << w
    out = [math.ldexp(1.0, 53)]
    for _ in range(_EXP_TABLE_SIZE):
        lo = (lo * blo) >> w
        hi = -((-hi * bhi) >> w)
        out.append(math.ldexp(float((lo + hi) >> 1), 53 - w))
    return np.array(out, dtype=np.float64)


_EXP_TABLE = _exp_table()
_A1 = 2.0**-12
_A2 = 2.0**-25
_A3 = 1.0 / (6.0 * 2.0**36)
# exp(-m), m = 0..64, for the discrete Gaussian's integer part; m >= 64 uses the last entry as an
# upper bound only (its lower bound is 0: those elements are decided by the exact path).
_EXP_INT_CAP = 64
_EXP_NEG_INT_HI = np.array(
    [_exp_neg_float(Fraction(m)) for m in range(_EXP_INT_CAP + 1)], dtype=np.float64
)
_EXP_NEG_INT_LO = np.append(_EXP_NEG_INT_HI[:-1], 0.0)
_MARGIN = 2.0**-40


def _exp_neg_scaled(num: np.ndarray, den: int) -> np.ndarray:
    """``exp(-num/den) * 2**53`` for ``0 <= num < den``, relative error below ``26u`` (above)."""
    y = np.multiply(num, _EXP_TABLE_SIZE / float(den), dtype=np.float64)
    j = np.floor(y)
    y -= j
    # In place: 1 - w (A1 - w (A2 - w A3)) with w = y, evaluated left to right as written.
    p = y * _A3
    np.subtract(_A2, p, out=p)
    p *= y
    np.subtract(_A1, p, out=p)
    p *= y
    np.subtract(1.0, p, out=p)
    p *= _EXP_TABLE.take(j.astype(np.intp))
    return p


def _decide_exp_neg(stream: NoiseStream, lo: np.ndarray, hi: np.ndarray, exact: Any) -> np.ndarray:
    """Bernoulli(p[i]) for ``p[i] = exp(-exact(i))`` given ``lo[i] <= p[i] * 2**53 <= hi[i]``.

    One word each; ``exact(i)`` (the rational exponent) is only evaluated for the words the
    bounds leave undecided.
    """
    return _decide_exp_neg_words(stream, stream._u64(lo.size), lo, hi, exact)


def _decide_exp_neg_words(
    stream: NoiseStream, words: np.ndarray, lo: np.ndarray, hi: np.ndarray, exact: Any
) -> np.ndarray:
    """:func:`_decide_exp_neg` with the first 64 digits of each ``R`` given as ``words``."""
    a = (words >> _SHIFT_11).view(np.int64).astype(np.float64)
    # R < (a + 1) / 2**53 <= lo / 2**53 <= p: success; R >= a / 2**53 >= hi / 2**53 >= p: failure.
    ok = a + 1.0 <= lo
    maybe = a < hi
    if np.count_nonzero(maybe) != np.count_nonzero(ok):
        for i in (maybe & ~ok).nonzero()[0].tolist():
            ok[i] = _exp_neg_less(stream, exact(i), [int(words[i]), 64])
    return ok


def _bernoulli_exp_neg(
    stream: NoiseStream, m: np.ndarray | None, num: np.ndarray, den: int
) -> np.ndarray:
    """Independent Bernoulli(exp(-(m[i] + num[i]/den))), ``0 <= num[i] < den``, exactly.

    ``m`` (integers ``>= 0``: int64, or an object array of Python ints) may be ``None`` for 0.
    One comparison per element replaces CKS's nested Bernoulli loops (same distribution).
    """
    p = _exp_neg_scaled(num, den)
    lo = p * (1.0 - _MARGIN)
    hi = p * (1.0 + _MARGIN)
    if m is not None:
        if m.dtype == object:
            idx = np.array([min(int(v), _EXP_INT_CAP) for v in m], dtype=np.intp)
        else:
            idx = np.minimum(m, _EXP_INT_CAP)
        lo *= _EXP_NEG_INT_LO.take(idx)
        hi *= _EXP_NEG_INT_HI.take(idx)

    def exact(i: int) -> Fraction:
        x = Fraction(int(num[i]), den)
        return x if m is None else x + int(m[i])

    return _decide_exp_neg(stream, lo, hi, exact)


def _bernoulli_exp_neg_fraction(stream: NoiseStream, num: np.ndarray, den: int) -> np.ndarray:
    """Independent Bernoulli(exp(-num[i]/den)) for ``0 <= num[i] < den``, exactly."""
    return _bernoulli_exp_neg(stream, None, num, den)


def _bernoulli_exp_neg_int(
    stream: NoiseStream, m: np.ndarray, words: np.ndarray | None = None
) -> np.ndarray:
    """Independent Bernoulli(exp(-m[i])) for integers ``m[i] >= 0``, exactly.

    ``U < floor(exp(-m) * 2**64)`` decides all but ``U == floor(...)`` (probability ``2**-64``).
    ``m`` may be an object array of Python ints larger than int64. ``words`` (tests only) gives
    the first 64 digits of each ``R`` instead of drawing them.
    """
    if m.dtype == object:
        idx = np.array([min(int(v), _GEO_LEVELS + 1) for v in m], dtype=np.intp)
    else:
        idx = np.minimum(m, _GEO_LEVELS + 1)
    if words is None:
        words = stream._u64(m.size)
    thr = _INT_THRESHOLD.take(idx)
    ok = (words < thr) | (idx == 0)
    for i in ((words == thr) & (idx > 0)).nonzero()[0].tolist():
        ok[i] = _exp_neg_less(stream, Fraction(int(m[i])), [int(words[i]), 64])
    return ok


def _bernoulli_exp_neg_one(stream: NoiseStream, n: int) -> np.ndarray:
    """Independent Bernoulli(exp(-1)), exactly."""
    return _bernoulli_exp_neg_int(stream, np.ones(n, dtype=np.int64))


def _geometric_from_words(stream: NoiseStream, words: np.ndarray) -> np.ndarray:
    """``V = #{v >= 1 : R < exp(-v)}`` for the reals ``R`` whose first 64 bits are ``words``."""
    idx = (words >> _SHIFT_11).view(np.int64).astype(np.float64).view(np.int64) >> 52
    thr = _GEO_THRESHOLD.take(idx)
    v = _GEO_COUNT.take(idx)
    v += words < thr
    undecided = words == thr
    if np.count_nonzero(undecided) or (words.size and words.min() < _LOW_WORD):
        for i in (undecided | (words < _LOW_WORD)).nonzero()[0].tolist():
            digits = [int(words[i]), 64]
            # U < F_v already decides R < exp(-v) for those v: start above them.
            k = sum(digits[0] < f for f in _EXP_NEG_INT_THRESHOLDS)
            while _exp_neg_less(stream, Fraction(k + 1), digits):
                k += 1
            v[i] = k
    return v


def _geometric_exp_neg_one(stream: NoiseStream, n: int) -> np.ndarray:
    """Independent ``V`` with ``P[V >= v] = exp(-v)`` (CKS's count of Bernoulli(exp(-1))
    successes before the first failure), one word each, exactly."""
    return _geometric_from_words(stream, stream._u64(n))


# Candidates per round: rounds of at most this size keep every temporary array in the CPU cache
# (whole-array rounds on millions of elements spend much of their time on page faults).
_MAX_BATCH = 1 << 15


def _batch_size(need: int, acceptance: float) -> int:
    # Enough candidates that one round usually suffices; only speed depends on this.
    expected = need / acceptance
    return min(int(expected + 4.0 * math.sqrt(expected) + 16), _MAX_BATCH)


# --------------------------------------------------------------------------------------------
# Discrete Laplace
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LaplacePlan:
    """Constants of the discrete Laplace sampler for ``P[Z = z] ~ exp(-|z| s / t)``.

    ``U`` uniform on ``[0, t)`` is ``word // width`` for ``bits``-bit words below ``limit``
    (``limit == 2**bits`` when nothing is rejected); ``yield_`` estimates samples per word.
    """

    t: int
    s: int
    bits: int
    limit: int
    width: int
    vmax: int
    yield_: float


@functools.lru_cache(maxsize=256)
def _laplace_plan(t: int, s: int) -> _LaplacePlan:
    bits = 32 if t <= _SMALL_BOUND else 64
    width = (1 << bits) // t
    limit = width * t
    p_d = -math.expm1(-1.0) / (t * -math.expm1(-1.0 / t)) if t > 1 else 1.0
    yield_ = limit / 2.0**bits * p_d * (1.0 - 0.5 * -math.expm1(-s / t))
    # (u + t*v) // s stays in int64 while v <= vmax (see _floor_div_geometric).
    a = t // s
    vmax = min((1 << 62) // s, (1 << 62) // (a + 2)) - 2 if s > 1 else (_INT64_MAX - t) // t
    return _LaplacePlan(t, s, bits, limit, width, vmax, yield_)


def _floor_div_geometric(u: np.ndarray, v: np.ndarray, t: int, s: int) -> np.ndarray:
    """Exact ``(u + t*v) // s`` without int64 overflow of ``t*v``.

    With ``t = a*s + b`` and ``u = au*s + bu``: ``(u + t*v) // s = a*v + au + (bu + b*v) // s``,
    all in int64 while ``v <= vmax``; the (astronomically rare) larger ``v`` use Python ints.
    """
    vmax = _laplace_plan(t, s).vmax
    if v.size == 0 or int(v.max()) <= vmax:
        if s == 1:
            return u + t * v
        a, b = divmod(t, s)
        au = u // s
        return a * v + au + (u - au * s + b * v) // s
    out = np.empty(v.size, dtype=np.int64)
    small = (v <= vmax).nonzero()[0]
    out[small] = _floor_div_geometric(u[small], v[small], t, s)
    big = (v > vmax).nonzero()[0]
    for i, ui, vi in zip(big.tolist(), u[big].tolist(), v[big].tolist(), strict=True):
        y = (ui + t * vi) // s
        if y > _INT64_MAX:
            raise OverflowError("discrete Laplace sample does not fit in int64")
        out[i] = y
    return out


def _laplace_round(stream: NoiseStream, plan: _LaplacePlan, words: int) -> np.ndarray:
    """Discrete Laplace samples from one round of ``words`` candidates (CKS Algorithm 2).

    ``X = U + t*V`` with ``U`` uniform on ``[0, t)`` kept with probability ``exp(-U/t)`` and ``V``
    geometric (``P[V >= v] = exp(-v)``) is geometric with ratio ``exp(-1/t)``; ``Y = X // s`` is
    geometric with ratio ``exp(-s/t)``; a sign bit, rejecting "-0", makes it two-sided.
    Returns a variable number of samples (about ``words * plan.yield_``), int64.
    """
    t = plan.t
    if t == 1:
        u = np.zeros(words, dtype=np.int64)
    else:
        x = stream._words(plan.bits, words)
        if plan.limit < 1 << plan.bits:
            bad = x >= plan.limit
            if np.count_nonzero(bad):
                x = x[~bad]
        u = (x // x.dtype.type(plan.width)).astype(np.int64)
        u = u[_bernoulli_exp_neg_fraction(stream, u, t)]
    v = _geometric_exp_neg_one(stream, u.size)
    y = _floor_div_geometric(u, v, t, plan.s)
    negative = stream._bits(y.size)
    z = np.where(negative, -y, y)
    keep = (y != 0) >= negative
    return z if np.count_nonzero(keep) == z.size else z[keep]


def _discrete_laplace_ts(stream: NoiseStream, t: int, s: int, n: int) -> np.ndarray:
    """``n`` exact samples with ``P[Z = z] ~ exp(-|z| * s / t)`` (CKS Algorithm 2), int64."""
    plan = _laplace_plan(t, s)
    z = _laplace_round(stream, plan, _batch_size(n, plan.yield_))
    if z.size >= n:
        return z[:n]
    out = np.empty(n, dtype=np.int64)
    out[: z.size] = z
    filled = z.size
    while filled < n:
        z = _laplace_round(stream, plan, _batch_size(n - filled, plan.yield_))
        take = min(z.size, n - filled)
        out[filled : filled + take] = z[:take]
        filled += take
    return out


def discrete_laplace(stream: NoiseStream, scale: int | float | Fraction, size: int) -> np.ndarray:
    """Exact discrete Laplace samples: ``P[Z = z] = (1-a)/(1+a) * a**|z|``, ``a = exp(-1/scale)``.

    The algorithm of Canonne, Kamath and Steinke (2020, Algorithm 2,
    ``discrete_laplace(s, t)`` with ``scale = t/s``), vectorised: every decision is an
    exact comparison of uniform random numbers from ``stream`` with exact thresholds (see the
    module docstring), so the distribution is exact. This is
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


def discrete_laplace_per_key(
    stream: NoiseStream, scale: int | float | Fraction, keys: Sequence[Any]
) -> np.ndarray:
    """One exact discrete Laplace sample per key, each from the key's own stream.

    Sample ``i`` is ``discrete_laplace(stream.substream(keys[i]), scale, 1)``
    (:meth:`NoiseStream.substream`): the noise of a key depends only on the release's stream
    and on the key's canonical encoding, never on the other keys or on their order. A key
    keeps its noise when the set of keys released with it changes, and a retry that meets the
    keys in another order re-draws the same values. The scale is converted once; each key then
    costs one HMAC, one keystream and one sampler round (about 0.1 ms), so use this when the
    keys are few (a released key set), and :func:`discrete_laplace` for noise by position.

    Parameters
    ----------
    stream
        The release's :class:`NoiseStream` (its own position is neither read nor advanced).
    scale
        As for :func:`discrete_laplace`.
    keys
        Distinct keys (anything :func:`beam_dpsketch.hashing.encode_key` accepts).

    Returns
    -------
    numpy.ndarray
        int64 array of shape ``(len(keys),)``.
    """
    frac = _laplace_fraction(_as_positive_fraction(scale, "scale"), "scale")
    n = len(keys)
    zeros = _zeros_if_test(stream, n, np.int64)
    if zeros is not None:
        return zeros
    out = np.empty(n, dtype=np.int64)
    t, s = frac.numerator, frac.denominator
    for i, key in enumerate(keys):
        out[i] = _discrete_laplace_ts(stream.substream(key), t, s, 1)[0]
    return out


def bernoulli_dyadic(stream: NoiseStream, numerators: Sequence[int]) -> np.ndarray:
    """Independent exact Bernoulli draws with probabilities ``numerators[i] / 2**64``.

    Draw ``i`` is ``True`` iff the ``i``-th uniform 64-bit word of ``stream`` is below
    ``numerators[i]``, which has probability exactly ``numerators[i] / 2**64``; a numerator of
    ``2**64`` is always ``True``. For a probability known as a real number, round it **down**
    to the ``2**-64`` grid and account for the rounding in the calibration.

    A zero-noise test stream answers ``numerators[i] >= 2**63`` (the draw's median), the
    noiseless analogue of a keep-with-probability decision.

    Parameters
    ----------
    stream
        The release's :class:`NoiseStream`; ``len(numerators)`` words are consumed.
    numerators
        Integers in ``[0, 2**64]``.

    Returns
    -------
    numpy.ndarray
        bool array of shape ``(len(numerators),)``.
    """
    nums = [int(x) for x in numerators]
    if any(not 0 <= x <= 1 << 64 for x in nums):
        raise ValueError("numerators must be integers in [0, 2**64]")
    n = len(nums)
    always = np.fromiter((x == 1 << 64 for x in nums), dtype=np.bool_, count=n)
    below = np.fromiter((min(x, (1 << 64) - 1) for x in nums), dtype=np.uint64, count=n)
    if _zeros_if_test(stream, 0, np.int64) is not None:
        return always | (below >= np.uint64(1 << 63))
    return always | (stream.uint64(n) < below)


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
    """``n`` exact discrete Gaussian samples (CKS Algorithm 3 with the shift ``c`` of ``prm``)."""
    plan = _laplace_plan(prm.tn, prm.ts)
    rate = plan.yield_ * prm.acceptance
    out = None if n else np.empty(0, dtype=np.int64)
    filled = 0
    while filled < n:
        y = _laplace_round(stream, plan, _batch_size(n - filled, rate))
        m, r = _gamma_parts(np.abs(y), prm)
        z = y[_bernoulli_exp_neg(stream, m, r, prm.den)]
        if out is None:
            if z.size >= n:
                return z[:n]
            out = np.empty(n, dtype=np.int64)
        take = min(z.size, n - filled)
        out[filled : filled + take] = z[:take]
        filled += take
    return out


def discrete_gaussian(stream: NoiseStream, sigma: int | float | Fraction, size: int) -> np.ndarray:
    """Exact discrete Gaussian samples: ``P[Z = z] ~ exp(-z**2 / (2 sigma**2))`` on the integers.

    Canonne, Kamath and Steinke (2020, Algorithm 3): draw ``Y``
    from a discrete Laplace proposal of scale ``t = sigma**2 / c`` and accept it with probability
    ``exp(-(|Y| - c)**2 / (2 sigma**2))``, an exact Bernoulli(exp(-gamma)) on the rational
    ``gamma`` (one lazily read uniform real compared with ``exp(-gamma)``, module docstring).
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


@functools.lru_cache(maxsize=256)
def _on_lattice(x: Fraction) -> tuple[int, Fraction]:
    """``(k, x * 2**k)`` for the lattice exponent ``k`` of ``x`` (cached: a pure function)."""
    k = _lattice_exponent(x)
    return k, x * Fraction(2) ** k


@functools.lru_cache(maxsize=256)
def _laplace_on_lattice(x: Fraction) -> tuple[int, Fraction]:
    """``(k, scale)``: the lattice exponent of ``x`` and the discrete scale ``x * 2**k`` as used."""
    k, scaled = _on_lattice(x)
    return k, _laplace_fraction(scaled, "scale")


def _lattice_exponent(x: Fraction) -> int:
    """``k >= 0`` with lattice step ``2**-k <= min(1, x * 2**-20)``.

    For ``x < 2**21`` this puts ``x * 2**k`` in ``[2**20, 2**21)``. Larger parameters get the
    integer lattice (``k = 0``): a coarser step ``2**j`` would make every output of an integer
    count plus noise a multiple of ``2**j`` away from the count, revealing its residue.
    """
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if x < Fraction(2) ** e:
        e -= 1
    return max(0, _LATTICE_BITS - e)


def _check_lattice(k: int, name: str, value: Any) -> None:
    # Outputs Z * 2**-k must be normal doubles for the scaling to be exact.
    if not -900 <= k <= 900:
        raise ValueError(f"{name} is outside the supported range [2**-880, 2**880]: {value!r}")


def gaussian(stream: NoiseStream, sigma: int | float | Fraction, size: int) -> np.ndarray:
    """Real-valued Gaussian noise for mechanisms specified with continuous noise (float64).

    Returns the **exact discrete Gaussian on the lattice** ``2**-k * Z``: a
    :func:`discrete_gaussian` sample with parameter ``sigma * 2**k`` divided by ``2**k``, where
    ``k >= 0`` is chosen so that the granularity ``2**-k`` is at most ``sigma * 2**-20`` and never
    above 1 (``sigma * 2**k`` lies in ``[2**20, 2**21)`` for ``sigma < 2**21``; larger ``sigma``
    use the integers, so ``sigma`` is limited to ``2**30`` as in :func:`discrete_gaussian`). A
    step above 1 would leave integer data plus noise in one residue class of the data. Following Canonne, Kamath and Steinke (2020),
    this is how real-valued noise is drawn without the floating-point attacks on Box-Muller or
    inverse-CDF samplers (Mironov 2012); its distance to ``N(0, sigma**2)`` is negligible. The
    division by ``2**k`` is exact in float64. See docs/algorithms.md#noise-sampling.

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
    k, scaled = _on_lattice(x)
    _check_lattice(k, "sigma", sigma)
    prm = _gaussian_params(scaled, "sigma")
    zeros = _zeros_if_test(stream, size, np.float64)
    if zeros is not None:
        return zeros
    if size == 0:
        return np.empty(0, dtype=np.float64)
    out = _discrete_gaussian_prm(stream, prm, size).astype(np.float64)
    return np.ldexp(out, -k, out=out)


def laplace(stream: NoiseStream, scale: int | float | Fraction, size: int) -> np.ndarray:
    """Real-valued Laplace noise with density ``~ exp(-|x|/scale)`` on a fine lattice (float64).

    Returns the **exact discrete Laplace on the lattice** ``2**-k * Z``: a
    :func:`discrete_laplace` sample with scale ``scale * 2**k`` divided by ``2**k``, with
    granularity ``2**-k <= min(1, scale * 2**-20)`` (the integers for ``scale >= 2**21``: a
    coarser step would reveal the residue of integer data). Never ``-b * log(U)`` on doubles (Mironov 2012);
    see Canonne, Kamath and Steinke (2020) and docs/algorithms.md#noise-sampling.

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
    k, frac = _laplace_on_lattice(x)
    _check_lattice(k, "scale", scale)
    zeros = _zeros_if_test(stream, size, np.float64)
    if zeros is not None:
        return zeros
    if size == 0:
        return np.empty(0, dtype=np.float64)
    z = _discrete_laplace_ts(stream, frac.numerator, frac.denominator, size)
    out = z.astype(np.float64)
    return np.ldexp(out, -k, out=out)
