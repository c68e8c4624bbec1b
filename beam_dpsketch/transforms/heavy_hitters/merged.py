"""The merged releases: ``MERGE_k``-merged Misra-Gries sketches with GSHM or Laplace noise.

Lebeda and Tětek, "Better Differentially Private Approximate Histograms and Heavy Hitters using
the Misra-Gries Sketch" (PODS 2023), Section 7, Lemma 1 and Corollary 2: Beam merges raw sketches
with the Agarwal merge, and the result is released with the Gaussian sparse histogram mechanism
at ``l = k`` (:class:`MergedGSHM`) or Laplace noise of scale ``k/eps`` (:class:`MergedLaplace`):
strictly bounded memory, noise that grows with ``k``. Both run behind the exactness gate.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import apache_beam as beam

from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms.combiners import SketchCombineFn
from beam_dpsketch.transforms.heavy_hitters.design_b import gate_description
from beam_dpsketch.transforms.heavy_hitters.mechanism import HeavyHitterMechanism
from beam_dpsketch.transforms.heavy_hitters.sequential import sketch_check_facts
from beam_dpsketch.transforms.heavy_hitters.sketch_layer import (
    DEFAULT_K,
    ERROR_CONFIDENCE,
    NEIGHBOURING_SHARDED,
    HeavyHitterRelease,
    SketchCheck,
    calibrate_gshm,
    exactness_test_calibration,
    merged_gshm,
    merged_laplace,
    merged_laplace_parameters,
    sketch_check_calibration,
)

__all__ = ["MergedGSHM", "MergedLaplace", "MergedMechanism"]


class MergedMechanism(HeavyHitterMechanism):
    """A release of a ``MERGE_k``-merged sketch behind the exactness gate (shared part).

    Subclasses give the noise (:attr:`noise`), the exact branch's noise (:attr:`exact_noise`),
    the gated release (:meth:`release_object`) and the sketch branch's ``(noise scale,
    threshold)``.
    """

    noise: ClassVar[str]
    exact_noise: ClassVar[str]

    def __init__(self, k: int | None = None) -> None:
        super().__init__(DEFAULT_K if k is None else k)

    def combine_fn(self) -> beam.CombineFn:
        return SketchCombineFn.misra_gries(self.k)

    @abc.abstractmethod
    def branch_noise(self, check: SketchCheck, delta: float) -> tuple[float, float]:
        """``(noise scale, threshold)`` of the sketch branch released at ``check``'s slice."""

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        gate = exactness_test_calibration(budget.epsilon, budget.delta, self.k)  # type: ignore[arg-type]
        # The sketch branch's facts are stated at its own budget (eps_b, delta_b).
        check = sketch_check_calibration(gate.branch_epsilon, self.k)
        scale, threshold = self.branch_noise(check, gate.branch_delta)
        out: dict[str, Any] = {
            "noise": self.noise,
            "noise_scale": scale,
            "threshold": threshold,
            "sensitivity": "Lebeda and Tetek, sensitivity lemmas of Sections 5-8, for " + self.key,
            "neighbouring_relation": NEIGHBOURING_SHARDED,
            "exactness_gate": gate_description(gate, self.exact_noise),
        }
        out.update(
            sketch_check_facts(
                check.release_epsilon, check.test_epsilon, check.count_epsilon, gate.branch_epsilon
            )
        )
        return out


class MergedGSHM(MergedMechanism):
    """Merged sketches released with the Gaussian sparse histogram mechanism at ``l = k``.

    Element level, strictly bounded memory (``k`` counters per sketch, merged with
    ``MERGE_k``); :func:`~beam_dpsketch.sketches.misra_gries.merged_gshm` behind the exactness
    gate, with a per-value error bound. Accepts every windowing and trigger.

    Parameters
    ----------
    k
        Counters per sketch (default :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`).

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one element
    (sharded relation, A-PART): Lebeda and Tětek, Section 7, Lemma 1 and Corollary 2, with the
    exact ``delta_GSHM`` of Theorem 5.
    """

    key = "merged-gshm"
    noise = "gaussian"
    exact_noise = "Gaussian noise calibrated as GSHM at l = 1"

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return merged_gshm(
            accumulator, budget, stream, error_confidence=ERROR_CONFIDENCE, exactness_gate=True
        )

    def branch_noise(self, check: SketchCheck, delta: float) -> tuple[float, float]:
        params = calibrate_gshm(self.k, check.release_epsilon, delta)
        return float(params.sigma), float(params.threshold)


class MergedLaplace(MergedMechanism):
    """Merged sketches released with discrete Laplace noise of scale ``k/eps`` (M-LAP).

    Element level, strictly bounded memory; :func:`~beam_dpsketch.sketches.misra_gries.merged_laplace`
    behind the exactness gate, with a per-value error bound. Accepts every windowing and
    trigger.

    Parameters
    ----------
    k
        Counters per sketch (default :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`).

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one element
    (sharded relation, A-PART): Lebeda and Tětek, Section 7, Lemma 1 and Corollary 2 (L1
    sensitivity ``k`` of a merged sketch).
    """

    key = "merged-laplace"
    noise = "discrete_laplace"
    exact_noise = "discrete Laplace noise of scale 1/eps_b"

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return merged_laplace(
            accumulator, budget, stream, error_confidence=ERROR_CONFIDENCE, exactness_gate=True
        )

    def branch_noise(self, check: SketchCheck, delta: float) -> tuple[float, float]:
        scale, tau = merged_laplace_parameters(
            self.k, check.release_epsilon, delta, "discrete_laplace"
        )
        return float(scale), float(tau)
