"""Select-then-count: a DP selection of at most ``k`` keys, then their exact counts with noise.

Two releases per window over the same input, accounted as one charge of the whole budget
(basic composition; :meth:`~beam_dpsketch.transforms.DPTransform.explain` states both parts):

* the **selection** (:class:`SelectionMechanism`, budget share ``selection_fraction``, by default
  0.52 at element level and 0.75 at user level) first tests, with noise, whether every
  Misra-Gries segment held all of its distinct keys: then it selects from the exact counts by
  private partition selection (keys from a count of about ``ln(eps/(2 delta))/eps`` on),
  otherwise it is the Design B release of Misra-Gries sketches (Lebeda and Tětek, PODS 2023,
  Sections 6-7) cut to its ``k`` largest noisy estimates
  (:func:`~beam_dpsketch.sketches.misra_gries.select_count.select_candidates`); at user level it
  is a Gaussian threshold on hashed one-counter PAMG sketches of ``4 k`` buckets, calibrated for
  L2 sensitivity ``sqrt(m)`` without group privacy
  (:func:`~beam_dpsketch.sketches.misra_gries.hashed.hashed_selection`);
* the **count** (:class:`SelectThenCount`, the rest of epsilon): the released key set reaches a
  second pass over the same window as a windowed side input, which counts exactly those keys (a
  dict of at most ``k`` counters), and discrete Laplace noise of scale ``1/eps_count`` (element
  level) or ``m/eps_count`` (user level) is added to every candidate, zero counts included. The
  selected keys travel to the count release as one public marker element per window, so the
  count release exists exactly when the selection is released.

Windowing: the side input of a window must be complete when that window's data are counted, so
select-then-count accepts the global window and fixed windows with a trigger that fires once per
window (``ValueError`` at application otherwise, naming the ``mechanism``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import apache_beam as beam

from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.privacy.declarations import Windowing
from beam_dpsketch.transforms.base import same_windowing
from beam_dpsketch.transforms.combiners import SketchCombineFn
from beam_dpsketch.transforms.heavy_hitters.design_b import (
    DEFAULT_MAX_SHARDS,
    DesignBCombineFn,
    approx_pp_calibration,
)
from beam_dpsketch.transforms.heavy_hitters.mechanism import (
    ELEMENT,
    USER,
    HeavyHitterMechanism,
    check_approx_budget,
    check_k,
    design_b_windowing,
)
from beam_dpsketch.transforms.heavy_hitters.sketch_layer import (
    DEFAULT_K,
    DEFAULT_SELECTION_FRACTION,
    SELECT_COUNT_K,
    CandidateIndex,
    HashedPAMG,
    HeavyHitterRelease,
    PostProcessedSum,
    check_selection_fraction,
    count_release,
    hashed_selection,
    hashed_selection_parameters,
    select_candidates,
    select_count_relation,
    selection_calibration,
    selection_parameters,
    split_budget,
)
from beam_dpsketch.transforms.heavy_hitters.user import USER_BUCKETS_PER_CANDIDATE
from beam_dpsketch.transforms.release import ReleaseMechanism, ReleaseStep
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement, accept_windowing

__all__ = [
    "RECOUNT_WINDOWING",
    "SELECT_COUNT",
    "SELECT_COUNT_WINDOWING",
    "USER_SELECTION_FRACTION",
    "CandidateCountCombineFn",
    "SelectThenCount",
    "SelectThenCountSteps",
    "SelectionMechanism",
]

SELECT_COUNT = "select-then-count"

#: What select-then-count needs of the windowing: the selection of a window must be final before
#: its data are counted, through a side input whose window mapping is exact for the global
#: window and fixed windows only.
SELECT_COUNT_WINDOWING = WindowingRequirement(
    who=f"mechanism {SELECT_COUNT!r}",
    window_fns=("global", "fixed"),
    triggers="once",
    why=(
        "each window is counted against the key set selected in that same window, through a "
        "side input: the selection must be final before the window's data are counted"
    ),
)
#: ``recount_source`` reads the input again into the global window.
RECOUNT_WINDOWING = WindowingRequirement(
    who="recount_source",
    default_windowing=True,
    why="it reads the input again into the global window",
)

#: Share of epsilon the user-level selection spends unless declared otherwise: its threshold
#: grows like ``sqrt(m)/eps_sel``, and the keys it keeps are what a user-level release lacks
#: (benchmarks/RESULTS.md, "User level").
USER_SELECTION_FRACTION = 0.75

_DELTA_REASON = "the selection needs delta to hide keys"


def _split_note(fraction: float) -> str:
    return (
        f"selection_fraction={fraction:.6g}: selection (eps * {fraction:.6g}, delta), count "
        f"(eps * {1.0 - fraction:.6g}, 0); basic composition gives (eps, delta)"
    )


# --------------------------------------------------------------------------------------------
# Exact aggregation (no noise)
# --------------------------------------------------------------------------------------------


class _Candidates:
    """The selection's released key set for one window: public (a DP output)."""

    __slots__ = ("keys",)

    def __init__(self, keys: tuple[Any, ...]) -> None:
        self.keys = keys

    def __reduce__(self):
        # __slots__ without __dict__: pickle through the constructor.
        return (_Candidates, (self.keys,))


class CandidateCountCombineFn(beam.CombineFn):
    """Exact counts of the selected candidates: at most ``k`` counters per window.

    Inputs are the partial counts of :class:`_CountCandidates` (dicts over candidates) and the
    window's :class:`_Candidates` marker, which registers every candidate with count 0 so that
    the release covers all of them.
    """

    def create_accumulator(self) -> dict[Any, int]:
        return {}

    def add_input(self, acc: dict[Any, int], element: Any) -> dict[Any, int]:
        if isinstance(element, _Candidates):
            for key in element.keys:
                acc.setdefault(key, 0)
            return acc
        get = acc.get
        for key, count in element.items():
            acc[key] = get(key, 0) + count
        return acc

    def merge_accumulators(self, accumulators: Any) -> dict[Any, int]:
        it = iter(accumulators)
        first = next(it, None)
        if first is None:
            return {}
        for acc in it:
            get = first.get
            for key, count in acc.items():
                first[key] = get(key, 0) + count
        return first

    def extract_output(self, acc: dict[Any, int]) -> dict[Any, int]:
        return acc


class _CountCandidates(beam.DoFn):
    """Exact counts of the window's candidates in one input element (a batch or a unit's keys).

    Emits nothing when nothing matches, so the output carries no per-element information
    beyond the counts of public candidate keys.
    """

    def __init__(self) -> None:
        self._side: Any = None
        self._index: CandidateIndex | None = None

    def process(self, element: Any, selected: list[_Candidates]):
        if selected is not self._side:
            # The side input is one list per window; rebuild the index only when it changes.
            self._side = selected
            self._index = CandidateIndex(key for c in selected for key in c.keys)
        index = self._index
        if index is None or not len(index):
            return
        counts = index.count(element)
        if counts:
            yield counts


# --------------------------------------------------------------------------------------------
# Release mechanisms
# --------------------------------------------------------------------------------------------


class SelectionMechanism(ReleaseMechanism):
    """The selection of select-then-count: exact counts or Design B, top ``k`` keys as a marker.

    It receives the whole per-release budget ``(eps, delta)`` of the transform and spends
    ``(selection_fraction * eps, delta)`` of it (the count spends the rest). At user level it
    is :func:`~beam_dpsketch.sketches.misra_gries.hashed.hashed_selection` on a
    :class:`~beam_dpsketch.sketches.misra_gries.hashed.HashedPAMG` of ``4 k`` buckets
    (:meth:`combine_fn`): Gaussian noise for L2 sensitivity ``sqrt(m)``, no group privacy,
    memory that does not grow with the distinct keys.

    Parameters
    ----------
    k
        Misra-Gries counters per segment and maximum number of candidates.
    max_shards
        Declared maximum number of Design B segments per window.
    m
        ``None`` at element level; the contribution bound at user level.
    selection_fraction
        Share of epsilon spent here, in ``(0, 1)``.
    """

    def __init__(
        self,
        k: int,
        max_shards: int,
        m: int | None,
        selection_fraction: float = DEFAULT_SELECTION_FRACTION,
    ) -> None:
        self.k = check_k(k)
        self.max_shards = max_shards
        self.m = m
        self.selection_fraction = check_selection_fraction(selection_fraction)
        self.name = f"dp-misra-gries/{SELECT_COUNT}: selection (design-b)"

    def check_budget(self, budget: PrivacyBudget) -> None:
        check_approx_budget(self.name, budget, _DELTA_REASON)

    def parameters(self, budget: PrivacyBudget) -> tuple[float, float]:
        """``(eps_sel, delta)``: the selection's share of the transform's ``budget``."""
        eps_sel, _ = split_budget(budget.epsilon, self.selection_fraction)  # type: ignore[arg-type]
        if self.m is not None:
            return eps_sel, budget.delta  # type: ignore[return-value]
        return selection_parameters(eps_sel, budget.delta, None)

    @property
    def buckets(self) -> int:
        """Hash buckets of the user-level selection sketch."""
        return USER_BUCKETS_PER_CANDIDATE * self.k

    def combine_fn(self) -> beam.CombineFn:
        """The selection's ``CombineFn``: Design B sketches of key batches (element level) or
        hashed one-counter PAMG sketches of one unit's key list per input element (user level)."""
        if self.m is None:
            return DesignBCombineFn(self.k, self.max_shards)
        buckets = self.buckets
        return SketchCombineFn(lambda: HashedPAMG(buckets))

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        """The element-level selection's release with its metadata (never leaves the step)."""
        if self.m is not None:
            raise ValueError("release_object: the user-level selection releases keys only")
        selection = PrivacyBudget.approx(*self.parameters(budget))
        return select_candidates(accumulator, selection, stream, k=self.k)

    def selected_keys(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list:
        """The selected keys (at most ``k``) of one window and pane."""
        if self.m is None:
            return list(self.release_object(accumulator, budget, stream).keys())
        selection = PrivacyBudget.approx(*self.parameters(budget))
        chosen = hashed_selection(accumulator, self.m, selection, stream, k=self.k)
        return [x for x, _ in chosen]

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        # One marker per released pane, empty or not: the count release then exists exactly
        # when this one does.
        return [_Candidates(tuple(self.selected_keys(accumulator, budget, stream)))]

    def _user_describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        eps_sel, delta = self.parameters(budget)
        params = hashed_selection_parameters(self.m, eps_sel, delta)  # type: ignore[arg-type]
        return {
            "noise": "gaussian",
            "noise_scale": float(params.sigma),
            "threshold": float(params.threshold),
            "sensitivity": f"hashed one-counter PAMG sketches ({self.buckets} buckets): one "
            f"unit changes at most m = {self.m} counters, each by 1 (Lebeda and Tetek, Section "
            "8, Lemma 9 and Corollary 10, bucket by bucket); Gaussian for L2 sensitivity "
            "sqrt(m) at (eps_sel, delta/2), and a key stored on one side only (counter 1) "
            "passes with probability at most delta / (2 m e^eps_sel); candidates: the k "
            "largest noisy counters (post-processing)",
            "neighbouring_relation": select_count_relation(self.m),
            "memory": f"at most {self.buckets} keys (hash buckets), whatever the distinct keys",
        }

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        if self.m is not None:
            return self._user_describe(budget)
        eps0, delta0 = self.parameters(budget)
        cal = selection_calibration(eps0, delta0, self.k)
        # The sketch branch: Design B's APPROX_PP without the element count.
        branch = approx_pp_calibration(self.k, cal.branch_epsilon, cal.branch_delta, 0.0)
        return {
            "noise": "discrete_laplace",
            "noise_scale": branch.noise_scale,
            "threshold": float(branch.threshold),
            "exact_threshold": float(cal.exact_median),
            "exact_selection": (
                "private partition selection on the exact counts (Desfontaines, Voss, Gipson "
                f"and Mandayam 2022) at epsilon {cal.branch_epsilon:.6g}, delta "
                f"{cal.branch_delta:.3g}: a key of count {cal.exact_median} is kept with "
                f"probability >= 1/2, of count >= {cal.exact_certain} always"
            ),
            "exactness_test": (
                f"discrete Laplace of scale {float(cal.test_scale):.6g} on min(distinct keys, "
                f"k+1) of the widest segment (sensitivity 1, epsilon {cal.test_epsilon:.6g}); "
                f"exact counts are used iff the noisy value is at most {cal.test_cut}, "
                f"which a decremented sketch passes with probability <= {cal.test_delta:.3g}"
            ),
            "sensitivity": "exact branch: one element changes one count by 1, a key on one "
            "side only has count 1 (kept with probability <= delta); sketch branch: Lebeda and "
            "Tetek, Algorithm 3 (Section 6): L1 sensitivity 2 per element; candidates: the k "
            "largest noisy values (post-processing)",
            "neighbouring_relation": select_count_relation(None),
        }


class SelectThenCount(HeavyHitterMechanism):
    """Select-then-count (element or user level; :class:`~beam_dpsketch.transforms.DPHeavyHitters`'
    default at element level).

    A DP selection of at most ``k`` candidate keys (:class:`SelectionMechanism`, share
    ``selection_fraction`` of epsilon), then the exact counts of those keys in the same window
    released with discrete Laplace noise, zero counts included (the rest of epsilon, no delta):
    counts that carry noise error only, in memory ``O(k)``. This object is the count release,
    accounted once for both parts; the selection runs as a second release step with its own
    noise stream (:class:`SelectThenCountSteps`). Global or fixed windows, a trigger that fires
    once per window.

    Parameters
    ----------
    k
        Misra-Gries counters per selection segment and most candidates (default: ``SELECT_COUNT_K``
        = 131072 at element level, whose selection uses the sketches' exact counts when every
        segment held all of its distinct keys;
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K` = 4096 at user level).
    max_shards
        Element level: declared maximum number of Design B segments per window of the
        selection (at most ``max_shards * k`` keys at its aggregator).
    selection_fraction
        Share of epsilon spent on the selection, in ``(0, 1)`` (default 0.52 at element level,
        0.75 at user level); the count gets the rest and no delta.
    recount_source
        Element level, global window only: a root ``PTransform`` that reads the same input again
        (e.g. a second :class:`~beam_dpsketch.transforms.ReadKeyBatches` of the same files). The
        count pass reads it once the selection is final, so a runner need not hold the whole
        input until then. The guarantee does not depend on it being the same data: each pass is
        DP for its own input under add/remove of one element, and the two compose as before.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release by basic composition of the
    selection ``(selection_fraction * eps, delta)`` and the count ``((1 - selection_fraction) *
    eps, 0)``, under add/remove of one element (selection under A-PART) or of one privacy unit's
    set of at most ``m`` distinct keys (L1 sensitivity ``m`` for the count).
    """

    key = SELECT_COUNT
    levels = (ELEMENT, USER)
    delta_reason = _DELTA_REASON

    def __init__(
        self,
        k: int | None = None,
        *,
        max_shards: int = DEFAULT_MAX_SHARDS,
        selection_fraction: float | None = None,
        recount_source: beam.PTransform | None = None,
    ) -> None:
        super().__init__(SELECT_COUNT_K if k is None else k)
        PostProcessedSum(self.k, max_shards=max_shards)  # checks max_shards, names it
        self.k_declared = k
        self.max_shards = max_shards
        self.selection_fraction_declared = (
            None if selection_fraction is None else check_selection_fraction(selection_fraction)
        )
        if recount_source is not None and not isinstance(recount_source, beam.PTransform):
            raise ValueError(
                "recount_source must be a root PTransform that reads the input again, got "
                f"{type(recount_source).__name__}"
            )
        self.recount_source = recount_source
        self.selection = SelectionMechanism(
            self.k, max_shards, None, self.selection_fraction_declared or DEFAULT_SELECTION_FRACTION
        )

    def parameters(self) -> dict[str, Any]:
        return {
            "k": self.k_declared,
            "max_shards": self.max_shards,
            "selection_fraction": self.selection_fraction_declared,
            "recount_source": self.recount_source,
        }

    def on_bind(self) -> None:
        user_level = self.max_contributions is not None
        if user_level and self.recount_source is not None:
            raise ValueError(
                f"recount_source applies to mechanism {SELECT_COUNT!r} at element level: leave "
                "it out with a user-level privacy_unit"
            )
        if self.k_declared is None:
            self.k = DEFAULT_K if user_level else SELECT_COUNT_K
        fraction = self.selection_fraction_declared
        if fraction is None:
            fraction = USER_SELECTION_FRACTION if user_level else DEFAULT_SELECTION_FRACTION
        self.selection = SelectionMechanism(
            self.k, self.max_shards, self.max_contributions, fraction
        )

    @property
    def sensitivity(self) -> int:
        """L1 sensitivity of the candidate count vector."""
        return 1 if self.max_contributions is None else int(self.max_contributions)

    def combine_fn(self) -> beam.CombineFn:
        return CandidateCountCombineFn()

    def count_epsilon(self, budget: PrivacyBudget) -> float:
        """The count's share of ``budget.epsilon``."""
        return split_budget(budget.epsilon, self.selection.selection_fraction)[1]  # type: ignore[arg-type]

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        m = self.max_contributions
        return count_release(
            accumulator,
            accumulator.keys(),
            PrivacyBudget.pure(self.count_epsilon(budget)),
            stream,
            k=self.k,
            sensitivity=self.sensitivity,
            relation=select_count_relation(m),
            privacy_unit=ELEMENT if m is None else USER,
        )

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        m = self.max_contributions
        sel = self.selection.describe(budget)
        unit = (
            "one element changes one count by 1"
            if m is None
            else f"one unit adds 1 to at most m={m} distinct candidates"
        )
        scale = discrete_laplace_scale(self.sensitivity, self.count_epsilon(budget))
        return {
            "noise": f"count: discrete_laplace; selection: {sel['noise']}",
            "noise_scale": float(scale),
            "threshold": None,
            "selection_noise_scale": sel["noise_scale"],
            "selection_threshold": sel["threshold"],
            # The element-level selection's exact branch (absent at user level).
            **{
                f"selection_{name}": sel[name]
                for name in ("exact_threshold", "exact_selection", "exactness_test")
                if name in sel
            },
            "sensitivity": f"count: L1 = {self.sensitivity} ({unit}), every candidate released, "
            "zero counts included, so which keys appear depends only on the selection; "
            f"selection: {sel['sensitivity']}",
            "neighbouring_relation": select_count_relation(m),
            "budget_split": _split_note(self.selection.selection_fraction),
            "memory": f"O(k): at most k = {self.k} candidate counters per window; selection "
            + (
                f"at most max_shards * k = {self.max_shards * self.k} keys"
                if m is None
                else f"at most {self.selection.buckets} keys (hash buckets)"
            ),
        }

    def windowing_requirement(self, defaulted_by: str | None = None) -> WindowingRequirement:
        if self.recount_source is not None:
            return RECOUNT_WINDOWING
        if defaulted_by is None:
            return SELECT_COUNT_WINDOWING
        return dataclasses.replace(
            SELECT_COUNT_WINDOWING,
            who=f"{defaulted_by}, which defaults to mechanism {SELECT_COUNT!r},",
            instead=(
                (
                    "mechanism='design-b'",
                    design_b_windowing("mechanism 'design-b'", self.user_level),
                ),
            ),
        )

    def steps(self, count_step: ReleaseStep) -> SelectThenCountSteps:
        """The two release steps of one application: the selection and ``count_step``."""
        return SelectThenCountSteps(count_step, self.selection.combine_fn())


# --------------------------------------------------------------------------------------------
# The two-release shape
# --------------------------------------------------------------------------------------------


class _FixedBudget:
    """The owner seen by the selection step: a fixed budget, on a private accountant."""

    def __init__(self, budget: PrivacyBudget) -> None:
        self._budget = budget

    def check_label_free(self, name: str) -> None:
        """The selection's accountant is private to one application: nothing to check."""

    def budget_for(self, name: str) -> PrivacyBudget:
        return self._budget


class _ApplyStep(beam.PTransform):
    def __init__(self, step: ReleaseStep, run_salt: beam.pvalue.AsSingleton) -> None:
        super().__init__()
        self._step = step
        self._run_salt = run_salt

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return self._step.expand(pcoll, self._run_salt)


class SelectThenCountSteps:
    """The selection step and the count step of one select-then-count transform.

    The count step is the owner's accounted step: it charges the owner's accountant once for
    the whole mechanism (basic composition of both parts, see :class:`SelectThenCount`). The
    selection step is planned with the same budget on a private accountant (it only needs the
    per-release budget, which it splits the same way), and releases under the label
    ``<name>/selection`` so that its noise stream is its own.

    Parameters
    ----------
    count_step
        The owner's release step (:class:`CandidateCountCombineFn` and
        :class:`SelectThenCount`); its options (privacy unit, panes, windows, range) are the
        selection's too.
    selection_combine
        The selection's ``CombineFn`` (:meth:`SelectionMechanism.combine_fn`).
    """

    def __init__(self, count_step: ReleaseStep, selection_combine: beam.CombineFn) -> None:
        if not isinstance(count_step.mechanism, SelectThenCount):
            raise TypeError("count_step must release with a SelectThenCount mechanism")
        if count_step.unit is None:
            raise TypeError("count_step must declare its privacy unit as a PrivacyUnit")
        self.count = count_step
        self._selection_combine = selection_combine
        self.selection: ReleaseStep | None = None

    def plan(self, windowing: Any, name: str, owner: Any) -> Charge:
        """Check the windowing, plan the selection and charge the whole mechanism once.

        Raises
        ------
        ValueError
            For a window function other than global or fixed windows, or a trigger that can
            fire more than once per window (:data:`SELECT_COUNT_WINDOWING`; the message names
            ``mechanism``).
        """
        accept_windowing(windowing, None, name=name, requirement=SELECT_COUNT_WINDOWING)
        owner.check_label_free(name)
        total = owner.budget_for(name)
        count = self.count
        selection = ReleaseStep(
            self._selection_combine,
            count.mechanism.selection,  # type: ignore[attr-defined]
            accountant=PrivacyAccountant(total, name=f"{name}/selection"),
            noise_source=count.noise_source,
            # The selection is released under the count's own declaration.
            privacy_unit=count.unit,  # type: ignore[arg-type]
            windowing=Windowing(
                max_panes_per_window=count.max_panes_per_window,
                data_independent_panes=count.data_independent_panes,
                release_range=count.release_range,
            ),
            with_metadata=False,
        )
        selection.plan_for(windowing, f"{name}/selection", _FixedBudget(total))
        charge = count.plan_for(windowing, name, owner)
        self.selection = selection
        return charge

    def expand(
        self,
        pcoll: beam.PCollection,
        run_salt: beam.pvalue.AsSingleton,
        recount: beam.PCollection | None = None,
    ) -> beam.PCollection:
        """Select, count the selected keys in the same window, release the counts.

        ``run_salt`` is the owner's run salt side input
        (:func:`~beam_dpsketch.transforms.base.run_salt_input`), read by both releases.
        ``recount``, if given, is the same input read again (``recount_source`` of
        :class:`SelectThenCount`): the count pass reads it after the selection is final, so no
        runner has to hold ``pcoll`` until then.
        """
        if self.selection is None:
            raise RuntimeError("select-then-count is expanded only after plan()")
        selected = pcoll | "Selection" >> _ApplyStep(self.selection, run_salt)
        counted = pcoll if recount is None else recount
        counts = counted | "CountCandidates" >> beam.ParDo(
            _CountCandidates(), beam.pvalue.AsList(selected)
        )
        markers = selected | "CandidateWindows" >> same_windowing(pcoll.windowing)
        both = (counts, markers) | "WithCandidates" >> beam.Flatten()
        return both | "Count" >> _ApplyStep(self.count, run_salt)
