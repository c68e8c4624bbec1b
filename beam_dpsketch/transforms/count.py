"""``DPCount``: a differentially private count per window and pane.

The count of a pane is exact (:class:`RowCountCombineFn`) and gets integer noise once, at release
(:class:`~beam_dpsketch.transforms.release.DPAggregate`). What is counted is rows: an element
that is a batch of keys (a numpy or pyarrow array or a
:class:`~beam_dpsketch.transforms.batching.KeyBatch`, as :class:`~beam_dpsketch.transforms.ReadKeyBatches`
and :class:`~beam_dpsketch.transforms.BatchKeys` emit, the same batch convention as the sketch
transforms) counts as its number of keys, any other element as one. One row is one element of
the dataset, so the element-level sensitivity below is per row whatever the batching:

* pure or approximate DP budget: discrete Laplace ``Geo2(exp(-eps/Delta))`` with scale
  ``Delta / eps`` (the discrete Laplace mechanism, pure ``eps``-DP for L1 sensitivity ``Delta``;
  exact sampler of Canonne, Kamath and Steinke 2020, ``noise.discrete_laplace``). ``eps`` is rounded down to a
  rational first (:func:`~beam_dpsketch.privacy.calibration.discrete_laplace_scale`): more noise, never less.
  The mechanism is pure ``eps``-DP, so an approximate budget's ``delta`` is not spent;
* zCDP budget: discrete Gaussian with ``sigma = Delta / sqrt(2 rho)``, which is
  ``Delta^2 / (2 sigma^2) = rho``-zCDP (Canonne, Kamath and Steinke 2020: the same bound as the
  continuous Gaussian; ``docs/algorithms.md#noise-sampling``).

Sensitivity ``Delta``
    * element level (add/remove one element): ``Delta = 1``;
    * user level after :class:`~beam_dpsketch.transforms.BoundContributions` with
      ``max_contributions = m``: ``Delta = m``;
    * pane relation ``"replace"`` (multi-pane triggers whose pane boundaries depend on the data,
      ``ReleasePlan.pane_relation``): a pane's input may lose up to ``Delta`` elements (the
      removed ones) and gain up to ``Delta`` others that shifted in from the next pane. A count
      changes by ``#added - #removed``, whose absolute value is at most ``max(#added, #removed)
      <= Delta``: a pure swap leaves it unchanged, a one-sided change (e.g. the last pane, which
      nothing shifts into) moves it by at most ``Delta``. The sensitivity is therefore ``Delta``
      under replacement too, and group privacy (which would double the noise, as needed for a
      histogram, where a swap moves one unit of count between two cells) is not needed.

The released count is unbiased and can be negative; clamping at 0 is post-processing (it costs
no privacy) and is left to the caller.
"""

from __future__ import annotations

import abc
import math
import numbers
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np

from beam_dpsketch.noise import NoiseSource, NoiseStream, discrete_gaussian, discrete_laplace
from beam_dpsketch.privacy.accountant import PrivacyAccountant
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.calibration import discrete_laplace_scale, zcdp_gaussian_sigma
from beam_dpsketch.privacy.declarations import (
    PrivacyUnit,
    Windowing,
    check_privacy_unit,
    check_windowing,
)
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import call_user_fn, is_batch_type, is_key_batch
from beam_dpsketch.transforms.bounding import (
    BOUNDED_RELEASE_WINDOWING,
    BoundContributions,
    canonical_id,
)
from beam_dpsketch.transforms.records import CountEstimate
from beam_dpsketch.transforms.release import (
    PANE_RELATIONS,
    AccountedTransform,
    ReleaseMechanism,
)
from beam_dpsketch.transforms.windowing_rules import ANY_WINDOWING, WindowingRequirement

__all__ = ["CountGaussianMechanism", "CountLaplaceMechanism", "DPCount", "RowCountCombineFn"]

# How errors name the privacy unit's id: the parameter the user set.
_ID_PARAMETER = "privacy_unit.id"

# The exact discrete Gaussian sampler accepts sigma >= 1/16; a smaller sigma is raised to it
# (more noise, never less).
_MIN_SIGMA = Fraction(1, 16)


class RowCountCombineFn(beam.CombineFn):
    """Exact number of rows: a batch of keys counts ``len(batch)``, any other element one.

    Batches are the library's batch types (:func:`~beam_dpsketch.transforms.batching.is_key_batch`):
    numpy arrays, pyarrow arrays and ``KeyBatch`` lists. The accumulator is a Python int.
    """

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, mutable_accumulator: int, element: Any) -> int:
        # A batch is a vector of rows; its length is O(1) to read, so there is no per-row work.
        return mutable_accumulator + (len(element) if is_key_batch(element) else 1)

    def merge_accumulators(self, accumulators: Any) -> int:
        return sum(accumulators)

    def extract_output(self, accumulator: int) -> int:
        return accumulator


def _exact_count(accumulator: Any) -> int:
    if isinstance(accumulator, bool | np.bool_) or not isinstance(accumulator, numbers.Integral):
        raise TypeError(f"a count must be an int, got {type(accumulator).__name__}")
    value = int(accumulator)
    if value < 0:
        raise ValueError("a count must be >= 0")
    return value


class _CountMechanism(ReleaseMechanism):
    #: Every release is one noisy count.
    record_type = CountEstimate

    def __init__(self, max_contributions: int = 1, pane_relation: str = "add_remove") -> None:
        if (
            isinstance(max_contributions, bool)
            or not isinstance(max_contributions, numbers.Integral)
            or int(max_contributions) < 1
        ):
            raise ValueError(f"max_contributions must be an int >= 1, got {max_contributions!r}")
        if pane_relation not in PANE_RELATIONS:
            raise ValueError(
                f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}"
            )
        self.max_contributions = int(max_contributions)
        self.pane_relation = pane_relation

    @property
    def sensitivity(self) -> int:
        """Sensitivity of a pane's count under ``pane_relation`` (see the module docstring)."""
        # Same value under both relations: |#added - #removed| <= max contributions.
        return self.max_contributions

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        if pane_relation not in PANE_RELATIONS:
            raise ValueError(
                f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}"
            )
        return type(self)(self.max_contributions, pane_relation)

    def _relation_text(self) -> str:
        unit = (
            "one element"
            if self.max_contributions == 1
            else f"one privacy unit's <= {self.max_contributions} contributions"
        )
        if self.pane_relation == "add_remove":
            return f"add/remove {unit}"
        return (
            f"replace: a pane may lose {unit} and gain as many shifted from another pane; the "
            f"count moves by |added - removed| <= {self.max_contributions}, so the sensitivity "
            "is unchanged"
        )

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        count = _exact_count(accumulator)
        noise = int(self.noise(budget, stream))
        return [CountEstimate(count + noise)]

    @abc.abstractmethod
    def noise(self, budget: PrivacyBudget, stream: NoiseStream) -> int:
        """The one noise draw of a release (from ``stream``; exposed for tests and audits)."""


class CountLaplaceMechanism(_CountMechanism):
    """Count + discrete Laplace noise of scale ``sensitivity / eps`` (pure ``eps``-DP).

    Parameters
    ----------
    max_contributions
        Elements one privacy unit contributes at most per window (1 at element level).
    pane_relation
        ``"add_remove"`` or ``"replace"`` (same sensitivity for a count).
    """

    name = "count + discrete Laplace"

    def check_budget(self, budget: PrivacyBudget) -> None:
        if budget.kind not in ("pure", "approx"):
            raise ValueError(
                f"budget: the discrete Laplace count needs a pure or approximate-DP budget, got "
                f"{budget.kind} (use CountGaussianMechanism for zCDP)"
            )

    def scale(self, budget: PrivacyBudget) -> Fraction:
        """Exact rational noise scale ``>= sensitivity / eps`` for a release with ``budget``."""
        self.check_budget(budget)
        return discrete_laplace_scale(self.sensitivity, budget.epsilon)  # type: ignore[arg-type]

    def privacy_cost(self, budget: PrivacyBudget) -> PrivacyBudget:
        # Pure eps-DP: an approximate budget's delta is not needed, so it is not charged.
        self.check_budget(budget)
        return PrivacyBudget.pure(budget.epsilon)  # type: ignore[arg-type]

    def noise(self, budget: PrivacyBudget, stream: NoiseStream) -> int:
        return int(discrete_laplace(stream, self.scale(budget), 1)[0])

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        scale = self.scale(budget)
        alpha = math.exp(-1.0 / float(scale))
        return {
            "noise": "discrete Laplace Geo2(exp(-1/scale))",
            "noise_scale": float(scale),
            "noise_variance": 2.0 * alpha / (1.0 - alpha) ** 2,
            "threshold": None,
            "sensitivity": self.sensitivity,
            "sensitivity_norm": "L1",
            "neighbouring_relation": self._relation_text(),
            "guarantee": f"{budget.epsilon:.6g}-DP per release",
        }


class CountGaussianMechanism(_CountMechanism):
    """Count + discrete Gaussian noise, ``sigma = sensitivity / sqrt(2 rho)`` (``rho``-zCDP).

    Parameters
    ----------
    max_contributions
        Elements one privacy unit contributes at most per window (1 at element level).
    pane_relation
        ``"add_remove"`` or ``"replace"`` (same sensitivity for a count).
    """

    name = "count + discrete Gaussian"

    def check_budget(self, budget: PrivacyBudget) -> None:
        if budget.kind != "zcdp":
            raise ValueError(
                f"budget: the discrete Gaussian count needs a zCDP budget, got {budget.kind} "
                "(use CountLaplaceMechanism for pure or approximate DP)"
            )

    def sigma(self, budget: PrivacyBudget) -> float:
        """Noise sigma for a release with ``budget`` (rounded up, at least 1/16)."""
        self.check_budget(budget)
        sigma = zcdp_gaussian_sigma(self.sensitivity, budget.rho)  # type: ignore[arg-type]
        # Two ulps up absorb the rounding of sqrt and the division: rho is never exceeded.
        sigma = math.nextafter(math.nextafter(sigma, math.inf), math.inf)
        return max(sigma, float(_MIN_SIGMA))

    def noise(self, budget: PrivacyBudget, stream: NoiseStream) -> int:
        return int(discrete_gaussian(stream, self.sigma(budget), 1)[0])

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        return {
            "noise": "discrete Gaussian N_Z(0, sigma^2)",
            "noise_scale": self.sigma(budget),
            "threshold": None,
            "sensitivity": self.sensitivity,
            "sensitivity_norm": "L2",
            "neighbouring_relation": self._relation_text(),
            "guarantee": f"{budget.rho:.6g}-zCDP per release",
        }


class DPCount(AccountedTransform):
    """Differentially private number of elements per window and pane.

    Output: one :class:`~beam_dpsketch.transforms.records.CountEstimate` (field ``count``, an
    ``int``) per released pane (or a
    :class:`~beam_dpsketch.transforms.release.Release` with ``with_metadata=True``). In the
    default global window an empty input still gives one noisy count. Rows are counted: an
    element that is a batch of keys (e.g. from :class:`~beam_dpsketch.transforms.ReadKeyBatches`)
    counts as its number of keys, so ``ReadKeyBatches(...) | DPCount(...)`` counts the rows read.

    Parameters
    ----------
    budget
        Total budget for one privacy unit: pure/approximate DP (discrete Laplace noise) or zCDP
        (discrete Gaussian). ``None``: a share of ``accountant``'s pool by ``budget_weight``.
    budget_weight
        Without ``budget``: the transform's weight in ``accountant``'s pool (default 1; see
        :class:`~beam_dpsketch.transforms.base.DPTransform`).
    accountant
        Pipeline accountant to charge (default: a private one with ``budget``).
    privacy_unit
        A :class:`~beam_dpsketch.privacy.PrivacyUnit`. ``PrivacyUnit()`` (the default): the
        guarantee is **element level**. ``PrivacyUnit(id=..., max_contributions=m,
        max_windows=w)``: the guarantee is **user level**; elements are grouped by ``id`` (a
        callable, or the field name of ``dict`` / ``beam.Row`` elements), each unit keeps at most
        ``m`` per window (:class:`~beam_dpsketch.transforms.BoundContributions`), so
        ``sensitivity = m``; ``w`` is the declared bound on the windows one unit appears in
        (required with non-global windows), a declaration the data must satisfy: bounding is per
        window.
    windowing
        A :class:`~beam_dpsketch.privacy.Windowing`: ``max_panes_per_window`` (required for
        triggers that can fire more than once; further panes are withheld, never emitted and not
        counted: their number depends on the data), ``data_independent_panes`` and
        ``release_range`` (every window starting in a public event-time range is released, empty
        ones included, and no other window is).
    noise_source
        Secret noise key; default ``NoiseSource()`` (``os.urandom``), drawn at construction.
    selection_key
        Secret key of the contribution selection (user level); default ``os.urandom``.
    with_metadata
        Emit :class:`~beam_dpsketch.transforms.release.Release` objects instead of records.
    label
        Beam label, release label and accountant entry name (default: the class name as Beam
        label, the full transform label as release label).

    Notes
    -----
    **Privacy guarantee.** The output is ``budget``-DP (``eps``-DP for a pure budget, and for an
    approximate budget, whose ``delta`` is not used; ``rho``-zCDP for a zCDP budget) under the
    add/remove neighbouring relation of one element (default) or of one privacy unit's bounded
    contributions (a user-level ``privacy_unit``). Each of the ``R`` releases a unit can influence
    (windows x panes, :class:`~beam_dpsketch.privacy.ReleasePlan`) is calibrated with
    ``budget / R``.

    **Conditions.** Noise protects the released values. Which windows are released is covered
    only in the global window (always released) or with a declared ``Windowing(release_range=...)``;
    with a count-based early or late trigger the number and timing of panes depend on the data and are
    not covered. :meth:`explain` lists every such condition of the actual configuration under
    "NOT PROTECTED".

    User level needs a trigger that fires once per window (the bound is per window); see
    :class:`~beam_dpsketch.transforms.BoundContributions`.
    """

    def __init__(
        self,
        budget: PrivacyBudget | None = None,
        *,
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        privacy_unit: PrivacyUnit | None = None,
        windowing: Windowing | None = None,
        noise_source: NoiseSource | None = None,
        selection_key: bytes | None = None,
        with_metadata: bool = False,
        label: str | None = None,
    ) -> None:
        unit = check_privacy_unit(privacy_unit)
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
        self._privacy_id_fn = as_extractor(unit.id, _ID_PARAMETER)
        if not unit.is_user_level:
            if selection_key is not None:
                raise ValueError(
                    "selection_key applies to user-level counts only: give "
                    "privacy_unit=PrivacyUnit(id=...)"
                )
            self._bound: BoundContributions | None = None
        else:
            # Bounding runs on the elements' privacy ids: a count needs nothing else from an
            # element, and the ids are canonical whatever the elements are (dicts, Rows, ...).
            self._bound = BoundContributions(
                _identity, unit.max_contributions, selection_key=selection_key
            )
        kind = self.budget.kind if self.budget is not None else self.accountant.budget.kind
        mechanism_cls = CountGaussianMechanism if kind == "zcdp" else CountLaplaceMechanism
        self.mechanism = mechanism_cls(unit.max_contributions)
        self._build_step(
            RowCountCombineFn(),
            self.mechanism,
            privacy_unit=unit,
            windowing=check_windowing(windowing),
            with_metadata=with_metadata,
        )

    def windowing_requirement(self) -> WindowingRequirement:
        return ANY_WINDOWING if self._bound is None else BOUNDED_RELEASE_WINDOWING

    def display_parameters(self) -> dict[str, Any]:
        params = super().display_parameters()
        params["max_contributions"] = self.mechanism.max_contributions
        params["neighbouring_relation"] = self.mechanism._relation_text()
        return params

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._privacy_id_fn,)

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        counted = pcoll
        if self._bound is not None:
            if is_batch_type(pcoll.element_type):
                raise ValueError(
                    f"{_ID_PARAMETER}: a user-level DPCount needs one element per row, got batches "
                    "of keys; read rows (records with a privacy id) instead"
                )
            counted = (
                pcoll
                | "PrivacyIds" >> beam.Map(_privacy_id, self._privacy_id_fn)
                | "BoundContributions" >> self._bound
            )
        return self._apply_step(counted)


def _identity(x: Any) -> Any:
    return x


def _privacy_id(element: Any, privacy_id_fn: Callable[[Any], Any]) -> Any:
    """The canonical privacy id of ``element`` (errors name ``privacy_unit.id``, never data)."""
    if is_key_batch(element):
        # A batch holds many rows, possibly of many units: one id for it would break the bound.
        raise ValueError(
            f"{_ID_PARAMETER}: a user-level DPCount needs one element per row, got a batch of keys"
        )
    return canonical_id(call_user_fn(privacy_id_fn, element, _ID_PARAMETER))
