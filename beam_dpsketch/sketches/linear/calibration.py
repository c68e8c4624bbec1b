"""Calibration of the DP linear sketch releases: neighbouring relations, exact sensitivities, noise.

Shared by :mod:`beam_dpsketch.sketches.linear.private` (Count-Min, Count Sketch, Count-Median) and
:mod:`beam_dpsketch.sketches.quantiles.dyadic` (dyadic Count Sketch). Paper: Zhao et al., "Differentially Private Linear Sketches" (NeurIPS
2022), cited as [ZQR+22]; deviations in docs/algorithms.md#linear-sketches.

Neighbouring relations (docs/algorithms.md#lin-sensitivity)
-----------------------------------------------------------
``"add_remove"`` (library default, event level: one unit update added or removed),
``"replace"`` (the paper's Definition 2.3: one element replaced by another),
``"replace_update"`` (one turnstile update ``(x, v)`` replaced by ``(y, v')``, possibly a sign
flip) and ``"user:k"`` (one user's at most ``k`` unit updates added or removed; the bound must be
enforced upstream, e.g. by :mod:`beam_dpsketch.privacy.bounding`).

Sensitivities of a ``depth``-row sketch (docs/algorithms.md#lin-sensitivity; every row changes the same way):

============== ============= ============= =======
relation       L2, Count-Min L2, CountSk.  L1
============== ============= ============= =======
add_remove     sqrt(d)       sqrt(d)       d
replace        sqrt(2d)      2 sqrt(d)     2d
replace_update 2 sqrt(d)     2 sqrt(d)     2d
user:k         k sqrt(d)     k sqrt(d)     k d
============== ============= ============= =======

Count-Median has the Count-Min table, hence the Count-Min column. CountSketch under ``replace``
is ``2 sqrt(d)``, not the paper's ``sqrt(2d)`` (docs/algorithms.md#lin-e3: with public hashes a
pair colliding in every row with opposite signs moves one counter by 2 per row).

Noise (docs/algorithms.md#noise-sampling: integer counters get discrete noise)
------------------------------------------------------------------------------
* pure ``eps`` budget: exact discrete Laplace (:func:`beam_dpsketch.noise.discrete_laplace`) of
  scale ``b = L1 / eps'`` with ``eps' <= eps`` the rational floor of ``eps``
  (:func:`~beam_dpsketch.privacy.calibration.discrete_laplace_scale`). Independent
  coordinates and an integer shift of L1 norm at most ``L1`` give ``eps'``-DP.
* ``rho``-zCDP budget: exact discrete Gaussian (:func:`beam_dpsketch.noise.discrete_gaussian`)
  with ``sigma = L2 / sqrt(2 rho)`` (docs/algorithms.md#lin-strict; Lemma 2.8 with docs/algorithms.md#lin-e2). For independent
  discrete Gaussian coordinates and integer shifts this is exactly ``rho``-zCDP (Canonne, Kamath
  and Steinke 2020, Theorem 14: Renyi divergences of independent coordinates add, and each
  coordinate obeys the continuous bound). The ``exp(-pi^2 sigma^2)`` correction mentioned in
  docs/algorithms.md#noise-sampling concerns CKS's direct ``(eps, delta)`` bound (their Theorem 15), which is not used.
* ``(eps, delta)`` budget with ``delta > 0``: converted to
  ``rho = approx_to_zcdp(eps, delta)`` (exact inverse of Lemma 2.9, [ZQR+22, Section 2.1]) and released as
  above, so the release is ``rho``-zCDP and therefore ``(eps, delta)``-DP.

Uniform noise bound ([ZQR+22, Algorithm 3] and docs/algorithms.md#lin-strict)
-----------------------------------------------------------------------------
``E`` is a level that every one of the ``n`` noise values stays within (``|Z| <= E``) with
probability ``>= 1 - beta_noise``: ``E = sigma sqrt(2 ln(2 n / beta_noise))`` for the discrete
Gaussian (which is sigma-subgaussian, CKS Corollary 9, so ``P(|Z| > t) <= 2 exp(-t^2/2sigma^2)``);
for the discrete Laplace the smallest integer ``E`` with ``n * 2 a^(E+1) / (1+a) <= beta_noise``,
``a = exp(-1/b)``. The Count-Min offset is the integer ``ceil(E)`` (docs/algorithms.md#noise-sampling: counters stay
int64).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch.checks import check_bool, check_choice, check_int, check_probability
from beam_dpsketch.hashing import MAX_DEPTH
from beam_dpsketch.noise import NoiseStream, check_stream, discrete_gaussian, discrete_laplace
from beam_dpsketch.privacy.budget import PrivacyBudget, approx_to_zcdp, zcdp_to_epsilon
from beam_dpsketch.privacy.calibration import (
    MAX_LATTICE,
    discrete_laplace_scale,
    noise_lattice,
    zcdp_gaussian_sigma,
)

__all__ = [
    "NEIGHBOURING_RELATIONS",
    "NOISE_DISCRETE_GAUSSIAN",
    "NOISE_DISCRETE_LAPLACE",
    "LinearCalibration",
    "calibrate_linear",
    "check_budget",
    "check_probability",
    "SKETCH_KINDS",
    "check_publish_total",
    "check_sketch_kind",
    "check_stream",
    "draw_noise",
    "linear_sensitivity",
    "noise_abs_quantile",
    "noise_lattice",
    "noise_minimum_mean",
    "noise_pmf",
    "noise_tail_bound",
    "pane_calibration",
    "pane_relation_text",
    "noise_variance",
    "paper_compat_parameters",
    "parse_neighbouring",
    "user_level",
]

#: The fixed neighbouring relations; ``"user:k"`` (see :func:`user_level`) is also accepted.
NEIGHBOURING_RELATIONS = ("add_remove", "replace", "replace_update")
NOISE_DISCRETE_LAPLACE = "discrete_laplace"
NOISE_DISCRETE_GAUSSIAN = "discrete_gaussian"
#: Sketch kinds, named as everywhere in the library. Count-Median has the Count-Min table (unsigned
#: rows), so it has the Count-Min sensitivities.
SKETCH_KINDS = ("count-min", "count-sketch", "count-median")
_KIND_OF_CODE = {"count_min": "count-min", "count_sketch": "count-sketch"}
_MIN_SIGMA, _MAX_SIGMA = 1.0 / 16.0, float(1 << 30)  # range of noise.discrete_gaussian


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def parse_neighbouring(neighbouring: Any) -> tuple[str, int]:
    """Canonical name and contribution bound ``k`` of a neighbouring relation (docs/algorithms.md#lin-sensitivity).

    Accepts ``"add_remove"``, ``"replace"``, ``"replace_update"`` (``k = 1``) and ``"user:k"``
    with an integer ``k >= 1``. Raises ``ValueError`` naming ``neighbouring`` otherwise.
    """
    if isinstance(neighbouring, str):
        name = neighbouring.strip()
        if name in NEIGHBOURING_RELATIONS:
            return name, 1
        if name.startswith("user:"):
            text = name[5:].strip()
            if text.isdigit() and int(text) >= 1:
                return f"user:{int(text)}", int(text)
    raise ValueError(
        "neighbouring must be 'add_remove', 'replace', 'replace_update' or 'user:k' with an "
        f"integer k >= 1 (docs/algorithms.md#lin-sensitivity), got {neighbouring!r}"
    )


def user_level(k: int) -> str:
    """The relation ``"user:k"``: one user with at most ``k`` unit updates added or removed."""
    return f"user:{check_int(k, 'k')}"


def check_budget(budget: Any) -> PrivacyBudget:
    if not isinstance(budget, PrivacyBudget):
        raise TypeError(
            f"budget must be a beam_dpsketch.privacy.PrivacyBudget, got {type(budget).__name__}"
        )
    return budget


def check_publish_total(publish_total: Any, neighbouring: str) -> bool:
    """Whether a release publishes its exact total weight ``N``.

    ``None`` means: exactly under the declared replace-one model (``neighbouring ==
    "replace"``, Zhao et al. Definition 2.3, where ``N`` is a public invariant). ``False`` keeps
    ``N`` private under any relation, which is what a release calibrated for replacement only
    because of how its input was cut (e.g. a pane that can lose one element and gain another)
    needs. ``True`` is refused unless the relation is ``"replace"``: under any other relation
    ``N`` differs between neighbours and the noise does not cover it.
    """
    if publish_total is None:
        return neighbouring == "replace"
    if check_bool(publish_total, "publish_total") and neighbouring != "replace":
        raise ValueError(
            "publish_total=True needs neighbouring='replace': only the declared replace-one "
            f"model makes the total a public invariant, got neighbouring={neighbouring!r}"
        )
    return publish_total


def _check_depth(depth: Any) -> int:
    return check_int(depth, "depth")


# --------------------------------------------------------------------------------------------
# Sensitivities
# --------------------------------------------------------------------------------------------


def check_sketch_kind(kind: Any) -> str:
    """``kind`` as ``"count-min"``, ``"count-sketch"`` or ``"count-median"`` (``ValueError`` naming
    ``kind`` otherwise).

    The underscored spellings are mapped to these with a ``DeprecationWarning``.
    """
    return check_choice(kind, "kind", SKETCH_KINDS, deprecated=_KIND_OF_CODE, stacklevel=4)


def linear_sensitivity(kind: str, neighbouring: str, depth: int, norm: str = "l2") -> float | int:
    """Exact worst-case sensitivity of a ``depth``-row linear sketch (docs/algorithms.md#lin-sensitivity).

    Parameters
    ----------
    kind
        ``"count-min"`` or ``"count-median"`` (unsigned rows, the same table; also an exact
        count vector with ``depth = 1``) or ``"count-sketch"`` (signed rows). The underscored ``"count_min"`` / ``"count_sketch"``
        are accepted with a ``DeprecationWarning``.
    neighbouring
        A relation accepted by :func:`parse_neighbouring`.
    depth
        Number of rows ``d`` (the actual integer, docs/algorithms.md#lin-sensitivity).
    norm
        ``"l2"`` (float) or ``"l1"`` (int).

    Returns
    -------
    float or int
        ``Delta_2`` or ``Delta_1`` (see the module docstring's table). Count Sketch under
        ``replace`` is ``2 sqrt(d)`` (docs/algorithms.md#lin-e3).
    """
    kind = check_sketch_kind(kind)
    name, k = parse_neighbouring(neighbouring)
    d = _check_depth(depth)
    if norm == "l1":
        return {"add_remove": d, "replace": 2 * d, "replace_update": 2 * d}.get(name, k * d)
    if norm != "l2":
        raise ValueError(f"norm must be 'l1' or 'l2', got {norm!r}")
    root = math.sqrt(d)
    if name == "add_remove":
        return root
    if name == "replace":
        return 2.0 * root if kind == "count-sketch" else math.sqrt(2 * d)
    if name == "replace_update":
        return 2.0 * root
    return k * root


# --------------------------------------------------------------------------------------------
# Noise distributions
# --------------------------------------------------------------------------------------------


def _laplace_ratio(scale: float) -> float:
    return math.exp(-1.0 / scale)


def noise_variance(noise: str, scale: float) -> float:
    """Exact variance of one noise value.

    Discrete Laplace of scale ``b``: ``2a / (1-a)^2`` with ``a = exp(-1/b)``. Discrete Gaussian
    with parameter ``sigma``: ``sum z^2 w(z) / sum w(z)`` with ``w(z) = exp(-z^2 / 2 sigma^2)``
    (slightly below ``sigma^2`` for small sigma; equal to it in float64 for ``sigma >= 100``).
    """
    if noise == NOISE_DISCRETE_LAPLACE:
        a = _laplace_ratio(scale)
        return 2.0 * a / (-math.expm1(-1.0 / scale)) ** 2
    if noise == NOISE_DISCRETE_GAUSSIAN:
        if scale >= 100.0:
            return scale * scale
        z = np.arange(-math.ceil(14 * scale + 14), math.ceil(14 * scale + 14) + 1, dtype=float)
        w = np.exp(-(z * z) / (2.0 * scale * scale))
        return float(np.sum(z * z * w) / np.sum(w))
    raise ValueError(f"unknown noise {noise!r}")


def noise_tail_bound(noise: str, scale: float, counters: int, beta_noise: float) -> float:
    """Level ``E`` with ``P(max over counters |Z| > E) <= beta_noise`` (union bound, docs/algorithms.md#lin-strict).

    Discrete Gaussian: ``E = sigma sqrt(2 ln(2 n / beta_noise))`` (sigma-subgaussian tails).
    Discrete Laplace: the smallest integer ``E >= 0`` with ``n 2 a^(E+1) / (1+a) <= beta_noise``.
    """
    n = int(counters)
    if n < 1:
        raise ValueError(f"counters must be >= 1, got {counters!r}")
    beta = check_probability(beta_noise, "beta_noise")
    if noise == NOISE_DISCRETE_GAUSSIAN:
        return scale * math.sqrt(2.0 * math.log(2.0 * n / beta))
    if noise != NOISE_DISCRETE_LAPLACE:
        raise ValueError(f"unknown noise {noise!r}")
    a = _laplace_ratio(scale)

    def tail(e: int) -> float:  # n * P(|Z| > e)
        return n * 2.0 * math.exp(-(e + 1) / scale) / (1.0 + a)

    e = max(0, math.ceil(scale * math.log(2.0 * n / ((1.0 + a) * beta))) - 1)
    while e > 0 and tail(e - 1) <= beta:
        e -= 1
    while tail(e) > beta:
        e += 1
    return float(e)


# --------------------------------------------------------------------------------------------
# Moments and quantiles of one noise law (docs/algorithms.md#lin-error-bounds)
# --------------------------------------------------------------------------------------------

#: Noise laws whose minimum has a tabulated mean: the continuous Gaussian of
#: :func:`beam_dpsketch.noise.gaussian` and the two exact discrete samplers.
MINIMUM_NOISE_KINDS: tuple[str, ...] = ("gaussian", NOISE_DISCRETE_GAUSSIAN, NOISE_DISCRETE_LAPLACE)
# Above this many support points a discrete law is replaced by the continuous one: its scale is
# then over 10^5 and the two means differ by a negligible fraction of it.
_MAX_SUPPORT = 1 << 22


@functools.lru_cache(maxsize=64)
def _normal_minimum_mean(depth: int) -> float:
    """``E[min]`` of ``depth`` i.i.d. standard normals, ``-c_a`` (Appendix-B constants).

    ``E[max] = int x a phi(x) Phi(x)^(a-1) dx``, by the trapezoid rule on ``[-12, 12]`` with step
    ``2**-11``: the integrand is smooth and below ``1e-29`` outside, so the error is far below
    ``1e-9``.
    """
    if depth == 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 24 * 2048 + 1)
    cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in x.tolist()])
    f = x * depth * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * cdf ** (depth - 1)
    h = float(x[1] - x[0])
    return -h * (math.fsum(f.tolist()) - 0.5 * (f[0] + f[-1]))


def _discrete_pmf(noise: str, scale: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Support and probability mass of a discrete noise law (``None`` if too wide to tabulate).

    Discrete Gaussian ``P[k] ~ exp(-k^2 / (2 sigma^2))`` on ``|k| <= 13 sigma``; discrete Laplace
    ``P[k] ~ exp(-|k| / b)`` on ``|k| <= 40 b``: the mass left out is below ``1e-17``.
    """
    half = math.ceil((13.0 if noise == NOISE_DISCRETE_GAUSSIAN else 40.0) * scale) + 1
    if 2 * half + 1 > _MAX_SUPPORT:
        return None
    k = np.arange(-half, half + 1, dtype=np.float64)
    if noise == NOISE_DISCRETE_GAUSSIAN:
        pmf = np.exp(-(k * k) / (2.0 * scale * scale))
    else:
        pmf = np.exp(-np.abs(k) / scale)
    return k, pmf / pmf.sum()


def noise_pmf(noise: str, scale: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Support (float64 integers) and probability mass of one discrete noise law.

    ``noise`` is ``"discrete_gaussian"`` (parameter ``sigma = scale``) or
    ``"discrete_laplace"`` (scale ``b``); the mass left out is below ``1e-17``. ``None`` when
    the law is too wide to tabulate (over ``2**22`` support points).
    """
    if noise not in (NOISE_DISCRETE_GAUSSIAN, NOISE_DISCRETE_LAPLACE):
        raise ValueError(f"unknown noise {noise!r}")
    return _discrete_pmf(noise, float(scale))


@functools.lru_cache(maxsize=64)
def _discrete_minimum_mean(depth: int, noise: str, scale: float) -> float | None:
    """``E[min]`` of ``depth`` i.i.d. values of a discrete noise law, from its mass function."""
    law = _discrete_pmf(noise, scale)
    if law is None:
        return None
    k, pmf = law
    # P[Z >= k] for each k of the support, then P[min >= k] = P[Z >= k]^depth.
    above = np.cumsum(pmf[::-1])[::-1] ** depth
    mass = above - np.append(above[1:], 0.0)
    return float(math.fsum((k * mass).tolist()))


def noise_minimum_mean(depth: int, sigma: float, noise: str = "gaussian") -> float:
    """Mean of the minimum of ``depth`` i.i.d. noise values of one counter's law.

    ``E[min_r Z_r]`` with ``Z_r ~ N(0, sigma^2)`` (``noise="gaussian"``, the noise of
    :func:`~beam_dpsketch.noise.gaussian`, a lattice of step ``<= 2**-20 sigma``): ``-c_a sigma``,
    ``c_a`` the expected maximum of ``a = depth`` standard normals (0.5642 for ``a = 2``, 0.8463
    for ``a = 3``, 1.1630 for ``a = 5``). With ``noise="discrete_gaussian"`` the same mean for
    the discrete Gaussian on the integers, and with ``noise="discrete_laplace"`` for the discrete
    Laplace of scale ``sigma`` (``P[k] ~ exp(-|k| / sigma)``), each computed from its probability
    mass function. A public constant: it depends on public parameters only. Subtracting it from
    a minimum over noisy counters removes the noise's downward bias (Count-Min, DPSW).

    Parameters
    ----------
    depth
        Number of rows ``a >= 1`` (0 for ``a = 1``).
    sigma
        Per-counter noise standard deviation (the Gaussian's parameter), or the discrete
        Laplace scale, ``> 0``.
    noise
        ``"gaussian"``, ``"discrete_gaussian"`` or ``"discrete_laplace"``.
    """
    depth = check_int(depth, "depth", 1, MAX_DEPTH)
    if isinstance(sigma, bool) or not isinstance(sigma, int | float | np.floating | np.integer):
        raise TypeError(f"sigma must be a number, got {type(sigma).__name__}")
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError("sigma must be finite and > 0")
    if noise not in MINIMUM_NOISE_KINDS:
        raise ValueError(f"noise must be one of {MINIMUM_NOISE_KINDS}, got {noise!r}")
    if depth == 1:
        return 0.0
    if noise != "gaussian":
        exact = _discrete_minimum_mean(depth, noise, float(sigma))
        if exact is not None:
            return exact
        if noise == NOISE_DISCRETE_LAPLACE:
            # Too wide to tabulate: the law is then the continuous Laplace on a lattice of
            # step below 1e-5 of its scale, whose minimum's mean is linear in the scale.
            ref = float(_MAX_SUPPORT // 100)
            return _discrete_minimum_mean(depth, noise, ref) * float(sigma) / ref
    return _normal_minimum_mean(depth) * float(sigma)


def noise_abs_quantile(noise: str, scale: float, beta: float) -> float:
    """Smallest integer ``E >= 0`` with ``P(|Z| > E) <= beta`` for ONE noise value ``Z``.

    Exact for the discrete Laplace (closed form) and for the discrete Gaussian (summed mass
    function; the continuous normal tail when the law is too wide to tabulate, a relative
    difference below 1e-5). Unlike :func:`noise_tail_bound` with one counter, which uses the
    sub-Gaussian tail for the discrete Gaussian (about 2.7 sigma at 95 %), this is the
    quantile itself (about 1.96 sigma), so a bound built on it covers close to its stated level.
    """
    beta = check_probability(beta, "beta")
    if noise == NOISE_DISCRETE_LAPLACE:
        return noise_tail_bound(noise, scale, 1, beta)
    if noise != NOISE_DISCRETE_GAUSSIAN:
        raise ValueError(f"unknown noise {noise!r}")
    law = _discrete_pmf(noise, scale)
    if law is None:
        z = _normal_abs_quantile(beta)
        return float(math.ceil(scale * z - 1e-9))
    k, pmf = law
    # P(|Z| > e) for e = 0, 1, ...: the mass outside [-e, e].
    centre = len(k) // 2
    inside = np.cumsum(np.concatenate(([pmf[centre]], pmf[centre + 1 :] + pmf[centre - 1 :: -1])))
    outside = 1.0 - inside
    return float(int(np.argmax(outside <= beta)))


def _normal_abs_quantile(beta: float) -> float:
    """``z`` with ``P(|N(0, 1)| > z) = beta`` (bisection on ``erfc``)."""
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if math.erfc(mid / math.sqrt(2.0)) > beta:
            lo = mid
        else:
            hi = mid
    return hi


def draw_noise(
    stream: NoiseStream, noise: str, parameter: Fraction | float, size: int
) -> np.ndarray:
    """``size`` int64 noise values from the release's stream with the exact discrete samplers."""
    if noise == NOISE_DISCRETE_LAPLACE:
        return discrete_laplace(stream, parameter, size)
    if noise == NOISE_DISCRETE_GAUSSIAN:
        return discrete_gaussian(stream, parameter, size)
    raise ValueError(f"unknown noise {noise!r}")


# --------------------------------------------------------------------------------------------
# The calibration record
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearCalibration:
    """Public calibration facts of one DP linear-sketch release (all safe to publish).

    Attributes
    ----------
    noise
        ``"discrete_laplace"`` (pure DP) or ``"discrete_gaussian"`` (zCDP / approximate DP).
    scale
        Laplace scale ``b`` or Gaussian ``sigma`` of every counter's noise.
    scale_exact
        The exact sampler parameter: ``"num/den"`` for the discrete Laplace, ``repr(sigma)``
        for the discrete Gaussian.
    sensitivity, sensitivity_norm
        The sensitivity the noise is calibrated to and its norm (``"l1"`` or ``"l2"``).
    neighbouring
        Canonical neighbouring relation (docs/algorithms.md#lin-sensitivity).
    budget_kind
        ``"pure"``, ``"approx"`` or ``"zcdp"`` (the kind of the budget that was spent).
    epsilon, delta, rho
        The guarantee: ``epsilon``-DP (pure), ``rho``-zCDP hence ``(epsilon, delta)``-DP
        (approx), or ``rho``-zCDP (zcdp; ``epsilon``/``delta`` filled when the budget has a
        ``delta_for_conversion``). With ``paper_compat`` the ``rho`` is the **effective** value
        for ``neighbouring`` (it can exceed the requested budget, docs/algorithms.md#lin-strict).
    noise_variance
        Exact variance of one counter's noise.
    noise_bound
        ``E``: all noise values satisfy ``|Z| <= E`` with probability ``>= 1 - beta_noise``.
    offset
        Public constant added to every counter (Count-Min: ``ceil(E)``; otherwise 0).
    beta_noise
        Failure probability of the noise event.
    paper_compat
        ``True`` for the labelled reproduction of Algorithm 3 as printed ([ZQR+22, Algorithm 3]).
    epsilon_effective
        For pure releases, the rational ``eps' <= epsilon`` the noise actually gives.
    lattice
        Lattice steps per unit (a power of two; 1: integer noise). With ``lattice = g > 1`` the
        released counters are ``g`` times the exact ones plus integer noise of the exact scale
        ``scale_exact`` (``g * scale``), read in units of ``1 / g``; ``scale``,
        ``noise_variance`` and ``noise_bound`` are stated in those units
        (:func:`noise_lattice`).
    """

    noise: str
    scale: float
    scale_exact: str
    sensitivity: float
    sensitivity_norm: str
    neighbouring: str
    budget_kind: str
    epsilon: float | None
    delta: float | None
    rho: float | None
    noise_variance: float
    noise_bound: float
    offset: int
    beta_noise: float
    paper_compat: bool = False
    epsilon_effective: float | None = None
    lattice: int = 1

    def tail_bound(self, counters: int, beta: float) -> float:
        """:func:`noise_tail_bound` of this noise in released units (``1 / lattice`` steps)."""
        g = self.lattice
        return noise_tail_bound(self.noise, self.scale * g, counters, beta) / g

    def abs_quantile(self, beta: float) -> float:
        """:func:`noise_abs_quantile` of this noise in released units (``1 / lattice`` steps)."""
        g = self.lattice
        return noise_abs_quantile(self.noise, self.scale * g, beta) / g

    def minimum_mean(self, depth: int) -> float:
        """:func:`noise_minimum_mean` of ``depth`` values of this noise, in released units."""
        g = self.lattice
        return noise_minimum_mean(depth, self.scale * g, self.noise) / g

    def sampler_parameter(self) -> Fraction | float:
        """The exact parameter passed to the sampler (Fraction scale or float sigma)."""
        if self.noise == NOISE_DISCRETE_LAPLACE:
            return Fraction(self.scale_exact)
        return float(self.scale_exact)

    def epsilon_at(self, delta: float, method: str = "standard") -> float:
        """The ``epsilon`` of the implied ``(epsilon, delta)``-DP guarantee.

        Pure releases return ``epsilon`` (valid for every ``delta``). zCDP releases use
        :func:`~beam_dpsketch.privacy.budget.zcdp_to_epsilon` (Lemma 2.9 by default, [ZQR+22, Section 2.1];
        ``method="cks"`` for the tighter Canonne-Kamath-Steinke conversion).
        """
        if self.rho is None:
            return float(self.epsilon)  # type: ignore[arg-type]
        return zcdp_to_epsilon(self.rho, delta, method)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (used by serialization and reports)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> LinearCalibration:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on anything malformed."""
        if not isinstance(data, dict):
            raise ValueError("calibration must be a dict")
        try:
            cal = cls(**data)
        except TypeError as exc:
            raise ValueError(f"malformed calibration: {exc}") from None
        cal._validate()
        return cal

    def _validate(self) -> None:
        floats = (self.scale, self.sensitivity, self.noise_variance, self.noise_bound)
        if self.noise not in (NOISE_DISCRETE_LAPLACE, NOISE_DISCRETE_GAUSSIAN):
            raise ValueError(f"unknown noise {self.noise!r}")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in floats):
            raise ValueError("calibration numbers must be numbers")
        if not all(math.isfinite(v) and v >= 0 for v in floats) or self.scale <= 0:
            raise ValueError("calibration numbers must be finite and non-negative")
        if not isinstance(self.offset, int) or isinstance(self.offset, bool) or self.offset < 0:
            raise ValueError("offset must be a non-negative int")
        if self.sensitivity_norm not in ("l1", "l2") or self.budget_kind not in (
            "pure",
            "approx",
            "zcdp",
        ):
            raise ValueError("malformed calibration kind fields")
        parse_neighbouring(self.neighbouring)
        check_probability(self.beta_noise, "beta_noise")
        if not isinstance(self.paper_compat, bool) or not isinstance(self.scale_exact, str):
            raise ValueError("malformed calibration fields")
        try:
            param = self.sampler_parameter()
        except (ValueError, ZeroDivisionError):
            raise ValueError("malformed exact scale") from None
        if not param > 0:
            raise ValueError("malformed exact scale")
        g = self.lattice
        if (
            not isinstance(g, int)
            or isinstance(g, bool)
            or not 1 <= g <= MAX_LATTICE
            or g & (g - 1)
            or (g > 1 and (self.noise != NOISE_DISCRETE_LAPLACE or self.offset != 0))
        ):
            raise ValueError("malformed lattice")


def paper_compat_parameters(beta: float, gamma: float, rho: float) -> tuple[float, float]:
    """``(sigma, E)`` of Algorithm 3 **as printed** ([ZQR+22, Algorithm 3]; reproduction only).

    ``sigma = sqrt(ln(2/beta) / rho)`` and
    ``E = sqrt(2 ln(2/beta) / rho) * sqrt(ln((4/gamma) ln(2/beta) / beta))``, with the unrounded
    ``d = ln(2/beta)`` and ``w = 1/gamma``. This under-noises Count Sketch under ``replace``
    (docs/algorithms.md#lin-e3) and under-noises by ``d / ln(2/beta)`` when ``d`` is rounded up (docs/algorithms.md#lin-e13).
    """
    b = check_probability(beta, "beta")
    g = check_probability(gamma, "gamma")
    lg = math.log(2.0 / b)
    sigma = math.sqrt(lg / rho)
    e = math.sqrt(2.0 * lg / rho) * math.sqrt(math.log((4.0 / g) * lg / b))
    return sigma, e


def _budget_guarantee(budget: PrivacyBudget, rho: float | None) -> tuple[Any, Any]:
    if budget.kind == "approx" and not budget.is_pure:
        return budget.epsilon, budget.delta
    if budget.kind == "zcdp" and budget.delta_for_conversion is not None and rho is not None:
        d = budget.delta_for_conversion
        return zcdp_to_epsilon(rho, d), d
    return None, None


def calibrate_linear(
    kind: str,
    depth: int,
    budget: PrivacyBudget,
    *,
    neighbouring: str = "add_remove",
    counters: int,
    beta_noise: float = 0.005,
    offset: bool = False,
    paper_compat: bool = False,
    beta: float = 0.01,
    gamma: float | None = None,
    lattice: bool = False,
) -> LinearCalibration:
    """Strict calibration of one release of ``counters`` noisy counters (docs/algorithms.md#lin-strict).

    Parameters
    ----------
    kind
        ``"count-min"``, ``"count-sketch"`` or ``"count-median"`` (sensitivity table,
        docs/algorithms.md#lin-sensitivity).
    depth
        Rows ``d`` of the sketch.
    budget
        The budget of this release (pure -> discrete Laplace on L1; zCDP or approximate ->
        discrete Gaussian on L2, see the module docstring).
    neighbouring
        Relation the guarantee is stated for (docs/algorithms.md#lin-sensitivity); default ``"add_remove"``.
    counters
        Number of noisy counters (for the union bound ``E``).
    beta_noise
        Failure probability of the noise event ``max |Z| <= E`` (docs/algorithms.md#lin-strict, default ``beta/2``).
    offset
        Whether to add the Count-Min offset ``ceil(E)``.
    paper_compat
        Reproduce Algorithm 3 as printed (zCDP budgets only; ``beta`` and ``gamma`` are the
        paper's inputs). The guarantee reported is the *effective* rho for ``neighbouring``.
    lattice
        Discrete Laplace noise only (pure budgets): draw it on the lattice of
        :func:`noise_lattice` (``LinearCalibration.lattice``), so that its quantiles, and the
        error bounds built on them, are resolved finer than one count when the scale is small.
        The guarantee is the same (docs/algorithms.md#lin-lattice). Refused with ``offset``.
    """
    kind = check_sketch_kind(kind)
    budget = check_budget(budget)
    check_bool(lattice, "lattice")
    if lattice and offset:
        raise ValueError("lattice: the Count-Min offset is an integer; release without it")
    name, _ = parse_neighbouring(neighbouring)
    d = _check_depth(depth)
    beta_noise = check_probability(beta_noise, "beta_noise")
    check_bool(paper_compat, "paper_compat")
    l2 = float(linear_sensitivity(kind, name, d, "l2"))
    if paper_compat:
        if budget.kind != "zcdp":
            raise ValueError(
                "paper_compat=True reproduces Algorithm 3, which is stated for a rho-zCDP budget; "
                f"got a {budget.kind} budget"
            )
        if gamma is None:
            raise ValueError("paper_compat=True needs gamma (the paper's 1/width)")
        sigma, e_paper = paper_compat_parameters(beta, gamma, budget.rho)  # type: ignore[arg-type]
        rho_eff = l2 * l2 / (2.0 * sigma * sigma)
        eps, dl = _budget_guarantee(budget, rho_eff)
        return LinearCalibration(
            noise=NOISE_DISCRETE_GAUSSIAN,
            scale=sigma,
            scale_exact=repr(sigma),
            sensitivity=l2,
            sensitivity_norm="l2",
            neighbouring=name,
            budget_kind="zcdp",
            epsilon=eps,
            delta=dl,
            rho=rho_eff,
            noise_variance=noise_variance(NOISE_DISCRETE_GAUSSIAN, sigma),
            noise_bound=e_paper,
            offset=math.ceil(e_paper) if offset else 0,
            beta_noise=beta / 2.0,
            paper_compat=True,
        )
    if budget.is_pure:
        l1 = int(linear_sensitivity(kind, name, d, "l1"))
        frac = discrete_laplace_scale(l1, budget.epsilon)  # type: ignore[arg-type]
        scale = float(frac)
        g = noise_lattice(scale) if lattice else 1
        # On the lattice: noise of scale g * b on g times the counts (sensitivity g * l1).
        steps = frac * g
        bound = noise_tail_bound(NOISE_DISCRETE_LAPLACE, float(steps), counters, beta_noise) / g
        return LinearCalibration(
            noise=NOISE_DISCRETE_LAPLACE,
            scale=scale,
            scale_exact=f"{steps.numerator}/{steps.denominator}",
            sensitivity=float(l1),
            sensitivity_norm="l1",
            neighbouring=name,
            budget_kind="pure",
            epsilon=float(budget.epsilon),  # type: ignore[arg-type]
            delta=0.0,
            rho=None,
            noise_variance=noise_variance(NOISE_DISCRETE_LAPLACE, float(steps)) / (g * g),
            noise_bound=bound,
            offset=int(bound) if offset else 0,
            beta_noise=beta_noise,
            epsilon_effective=float(Fraction(l1) / frac),
            lattice=g,
        )
    rho = budget.rho if budget.kind == "zcdp" else approx_to_zcdp(budget.epsilon, budget.delta)  # type: ignore[arg-type]
    sigma = zcdp_gaussian_sigma(l2, rho)  # type: ignore[arg-type]
    if not _MIN_SIGMA <= sigma <= _MAX_SIGMA:
        raise ValueError(
            f"the budget gives sigma={sigma:.6g}, outside the discrete Gaussian sampler's range "
            f"[1/16, 2**30]: rho={rho:.6g} is too large or too small for this sketch"
        )
    bound = noise_tail_bound(NOISE_DISCRETE_GAUSSIAN, sigma, counters, beta_noise)
    eps, dl = _budget_guarantee(budget, rho)
    return LinearCalibration(
        noise=NOISE_DISCRETE_GAUSSIAN,
        scale=sigma,
        scale_exact=repr(sigma),
        sensitivity=l2,
        sensitivity_norm="l2",
        neighbouring=name,
        budget_kind=budget.kind,
        epsilon=eps,
        delta=dl,
        rho=float(rho),  # type: ignore[arg-type]
        noise_variance=noise_variance(NOISE_DISCRETE_GAUSSIAN, sigma),
        noise_bound=bound,
        offset=math.ceil(bound) if offset else 0,
        beta_noise=beta_noise,
    )


def pane_calibration(neighbouring: str, pane_relation: str, turnstile: bool) -> str:
    """The relation whose exact sensitivity a release is calibrated for.

    Sensitivities: the table of this module.

    Under the pane relation ``"replace"`` (multi-pane triggers whose boundaries depend on the
    data) a pane can lose one record and gain another. With unit insertions that is the
    ``replace`` sensitivity; with signed records (``weight_fn``) the record lost can be a deletion
    ``(x, -1)`` and the one gained an insertion ``(x, +1)``, which moves a cell by 2 per row: the
    ``replace_update`` sensitivity (``2 sqrt(d)``, not Count-Min's ``sqrt(2d)``). Either covers a
    pane that only loses a record.
    """
    if pane_relation == "replace":
        return "replace_update" if turnstile else "replace"
    return neighbouring


def pane_relation_text(neighbouring: str, pane_relation: str, calibrated: str) -> str:
    if pane_relation == "add_remove":
        if neighbouring == "replace":
            return "replace (declared replace-one model: the total N is public and published)"
        return f"{neighbouring} (the total is not published)"
    return (
        f"add_remove for the transform; each pane calibrated for {calibrated} (a pane may lose "
        "one record and gain another shifted from a neighbouring pane); the pane total is not "
        "published"
    )
