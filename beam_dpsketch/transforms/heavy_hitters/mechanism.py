"""The contract every heavy-hitter mechanism object keeps, and what the mechanisms share.

A heavy-hitter mechanism is one object (:class:`HeavyHitterMechanism`) that owns, for one DP
release of Lebeda and Tětek ("Better Differentially Private Approximate Histograms and Heavy
Hitters using the Misra-Gries Sketch", PODS 2023) or of select-then-count:

* its public parameters (``k`` and whatever else applies to it only), checked when it is built;
* its combine step (:meth:`~HeavyHitterMechanism.combine_fn`, and
  :meth:`~HeavyHitterMechanism.prepare` for a step before it);
* its calibration, computed up front from its public parameters and the budget
  (:meth:`~HeavyHitterMechanism.calibration`): no release is run to learn it;
* its release (:meth:`~HeavyHitterMechanism.release`) and the type of its records;
* what it requires of the windowing (:meth:`~HeavyHitterMechanism.windowing_requirement`) and
  whether it keeps state and timers.

:class:`~beam_dpsketch.transforms.DPHistogram` and
:class:`~beam_dpsketch.transforms.DPHeavyHitters` choose one and bind it to their privacy unit and
``top`` (:meth:`~HeavyHitterMechanism.bind`).
"""

from __future__ import annotations

import abc
import copy
from typing import Any, ClassVar

import apache_beam as beam

from beam_dpsketch.checks import check_int
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms.bounding import BOUNDED_RELEASE_WINDOWING
from beam_dpsketch.transforms.heavy_hitters.sketch_layer import HeavyHitterRelease
from beam_dpsketch.transforms.records import BoundedKeyEstimate, as_key_estimate
from beam_dpsketch.transforms.release import ReleaseMechanism
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = [
    "ELEMENT",
    "USER",
    "HeavyHitterMechanism",
    "check_approx_budget",
    "check_k",
    "design_b_windowing",
    "released_records",
]

#: The two privacy units a heavy-hitter mechanism can release for.
ELEMENT = "element"
USER = "user"


def check_k(k: Any) -> int:
    """``k`` as a positive ``int`` (``ValueError`` naming ``k``, as the transforms always did)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return check_int(k, "k")


def check_approx_budget(name: str, budget: PrivacyBudget, why: str) -> None:
    """Refuse a budget without ``delta > 0``: every heavy-hitter release thresholds keys."""
    if budget.kind != "approx" or not budget.delta:
        raise ValueError(
            f"{name} is (epsilon, delta)-DP: pass PrivacyBudget.approx(eps, delta) with "
            f"delta > 0 (got a {budget.kind} budget); {why}"
        )


def design_b_windowing(who: str, user_level: bool) -> WindowingRequirement:
    """What a mechanism that accepts every windowing and trigger requires: batched keys only."""
    return WindowingRequirement(who=who, batched=not user_level)


def released_records(released: Any, top: int | None) -> list[Any]:
    """The records of a sketch release: its ``top`` largest counts (largest first), or all.

    Ties keep the canonical key order of the release (a stable sort), so the order depends on
    released values only.
    """
    if top is not None:
        released = released.top(top)
    records = [as_key_estimate(r) for r in released.estimates()]
    if top is not None:
        records.sort(key=lambda kv: -kv[1])
    return records


class HeavyHitterMechanism(ReleaseMechanism):
    """One heavy-hitter release: combine step, calibration, release and windowing rule.

    Subclasses set :attr:`key` (the mechanism's name in
    :data:`~beam_dpsketch.transforms.heavy_hitters.MECHANISMS`), :attr:`levels` (the privacy
    units it releases for) and implement :meth:`combine_fn`, :meth:`calibration` and
    :meth:`release_object` (the release with its metadata; :meth:`release` emits its records).

    Parameters
    ----------
    k
        Misra-Gries counters per sketch (for every mechanism that builds sketches), or the most
        keys a release can hold.

    Notes
    -----
    **Privacy guarantee.** Each subclass states its own: ``(epsilon, delta)``-DP for the budget
    it is given, under add/remove of one element or of one privacy unit's bounded contribution
    (:attr:`max_contributions` distinct keys per window). :meth:`calibration` reads public
    parameters only, so :meth:`describe` and every report built on it carry no data.
    """

    #: The name in :data:`~beam_dpsketch.transforms.heavy_hitters.MECHANISMS`.
    key: ClassVar[str]
    #: Privacy units the mechanism releases for (``"element"``, ``"user"``).
    levels: ClassVar[tuple[str, ...]] = (ELEMENT,)
    #: Whether its pipeline shape keeps keyed state and timers.
    needs_state_and_timers: ClassVar[bool] = False
    #: The budget refusal's reason.
    delta_reason: ClassVar[str] = "thresholding needs delta to hide keys"

    def __init__(self, k: int) -> None:
        self.k = check_k(k)
        #: The transform's ``top``: emit only the ``top`` largest noisy counts (post-processing).
        self.top: int | None = None
        #: User level: the contribution bound ``m`` (distinct keys per unit and window).
        self.max_contributions: int | None = None
        self.name = f"dp-misra-gries/{self.key}"

    def __repr__(self) -> str:
        params = ", ".join(f"{name}={value!r}" for name, value in self.parameters().items())
        return f"{type(self).__name__}({params})"

    def parameters(self) -> dict[str, Any]:
        """The public parameters the mechanism was built with (its constructor's)."""
        return {"k": self.k}

    def display_parameters(self) -> dict[str, Any]:
        """Parameters the owning transform shows in its display data besides ``k``."""
        return {}

    @property
    def user_level(self) -> bool:
        """Whether the mechanism is bound to a user-level release."""
        return self.max_contributions is not None

    def bind(self, *, top: int | None, max_contributions: int | None) -> HeavyHitterMechanism:
        """A copy of this mechanism for one transform: its ``top`` and privacy unit.

        ``max_contributions`` is ``None`` at element level. Raises ``ValueError`` naming
        ``mechanism`` when the mechanism does not release for that privacy unit.
        """
        level = ELEMENT if max_contributions is None else USER
        if level not in self.levels:
            raise ValueError(
                f"mechanism: {self.key!r} releases at {' and '.join(self.levels)} level, not at "
                f"{level} level"
                + (
                    " (pass privacy_unit=PrivacyUnit(id=..., max_contributions=...) for user level)"
                    if level == ELEMENT
                    else ""
                )
            )
        bound = copy.copy(self)
        bound.top = top
        bound.max_contributions = max_contributions
        bound.on_bind()
        return bound

    def on_bind(self) -> None:  # noqa: B027 (optional hook)
        """Check or resolve what depends on the privacy unit (called on the bound copy)."""

    @property
    def record_type(self) -> type:
        """:class:`~beam_dpsketch.transforms.records.BoundedKeyEstimate`: a count with its
        error bound (subclasses without a per-value bound say otherwise)."""
        return BoundedKeyEstimate

    def check_budget(self, budget: PrivacyBudget) -> None:
        check_approx_budget(self.name, budget, self.delta_reason)

    @abc.abstractmethod
    def combine_fn(self) -> beam.CombineFn:
        """The exact, noiseless ``CombineFn`` whose output :meth:`release` takes."""

    @abc.abstractmethod
    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        """The sketch layer's release of ``accumulator``, with its metadata.

        :meth:`release` emits its records; the object itself never leaves the release step.
        Its noise scale, threshold and details are what :meth:`calibration` states up front.
        """

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        return released_records(self.release_object(accumulator, budget, stream), self.top)

    def prepare(self, keys: beam.PCollection) -> beam.PCollection:
        """A step between the key batches and :meth:`combine_fn` (default: none)."""
        return keys

    @abc.abstractmethod
    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        """The release's public calibration at ``budget``, computed from parameters only.

        At least ``noise``, ``noise_scale``, ``threshold``, ``sensitivity`` and
        ``neighbouring_relation`` (JSON-friendly values): what a release with this budget reports
        in its metadata, stated before any data is seen.
        """

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        return self.calibration(budget)

    def windowing_requirement(self, defaulted_by: str | None = None) -> WindowingRequirement:
        """What the mechanism requires of the windowing and trigger.

        ``defaulted_by`` names the transform class when the mechanism was its default, so that
        a refusal can say so and name a mechanism that accepts the windowing.
        """
        if self.user_level:
            return BOUNDED_RELEASE_WINDOWING
        return design_b_windowing(f"mechanism {self.key!r}", user_level=False)
