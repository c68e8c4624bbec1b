"""``DPHistogram`` and ``DPHeavyHitters``: Beam transforms that apply one heavy-hitter mechanism.

The transform owns what every mechanism shares (budget, accountant, noise source, label, key and
privacy-id extraction, contribution bounding, batching, the accounted release step); the
mechanism object (:mod:`~beam_dpsketch.transforms.heavy_hitters.mechanism`) owns its combine
step, its calibration, its release and its windowing rule.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import apache_beam as beam

from beam_dpsketch.hashing import canonical_key
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.privacy.declarations import (
    PrivacyUnit,
    Windowing,
    check_privacy_unit,
    check_windowing,
)
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import BatchKeys, call_user_fn, is_batch_type
from beam_dpsketch.transforms.bounding import BoundContributions
from beam_dpsketch.transforms.heavy_hitters.design_b import DesignB
from beam_dpsketch.transforms.heavy_hitters.mechanism import (
    ELEMENT,
    USER,
    HeavyHitterMechanism,
    check_k,
)
from beam_dpsketch.transforms.heavy_hitters.merged import MergedGSHM, MergedLaplace
from beam_dpsketch.transforms.heavy_hitters.select_count import (
    SELECT_COUNT,
    SelectThenCount,
    SelectThenCountSteps,
)
from beam_dpsketch.transforms.heavy_hitters.sequential import Sequential
from beam_dpsketch.transforms.heavy_hitters.sharded import DesignD, UntrustedShards
from beam_dpsketch.transforms.heavy_hitters.space_saving import SpaceSavingDP
from beam_dpsketch.transforms.heavy_hitters.user import PamgGSHM, UserExact, unit_key_set
from beam_dpsketch.transforms.heavy_hitters.user_pure import UserPurePP
from beam_dpsketch.transforms.release import AccountedTransform
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = [
    "HEAVY_HITTERS_DEFAULT_MECHANISM",
    "MECHANISMS",
    "MECHANISM_CLASSES",
    "USER_DEFAULT_MECHANISM",
    "USER_EXACT",
    "DPHeavyHitters",
    "DPHistogram",
    "mechanism_for",
]

#: Every heavy-hitter mechanism by name (its ``key``), in the order :data:`MECHANISMS` lists.
MECHANISM_CLASSES: dict[str, type[HeavyHitterMechanism]] = {
    cls.key: cls
    for cls in (
        DesignB,
        Sequential,
        DesignD,
        UntrustedShards,
        MergedGSHM,
        MergedLaplace,
        PamgGSHM,
        SelectThenCount,
        UserExact,
        UserPurePP,
        SpaceSavingDP,
    )
}
#: The names ``mechanism=`` accepts (each builds its class with its defaults).
MECHANISMS = tuple(MECHANISM_CLASSES)
USER_EXACT = UserExact.key
#: :class:`DPHeavyHitters`' release at element level when ``mechanism`` is not given (the
#: ``heavy-hitters`` command's too): its counts carry noise error only, no sketch error, in
#: ``O(k)`` memory. It needs the global window or fixed windows with a trigger that fires once
#: per window; other windowings (early or late firings, sliding windows) take
#: ``mechanism="design-b"``, which the refusal names.
HEAVY_HITTERS_DEFAULT_MECHANISM = SELECT_COUNT
#: The release at user level when ``mechanism`` is not given (:class:`DPHistogram`,
#: :class:`DPHeavyHitters` and the command): noise that grows with ``sqrt(max_contributions)``.
USER_DEFAULT_MECHANISM = USER_EXACT

# What errors and refusals name for the privacy unit's id: the parameter the user set.
_ID_PARAMETER = "privacy_unit.id"


def _levels_of(level: str) -> tuple[str, ...]:
    return tuple(name for name, cls in MECHANISM_CLASSES.items() if level in cls.levels)


def mechanism_for(
    mechanism: str | HeavyHitterMechanism, k: int | None, user_level: bool
) -> HeavyHitterMechanism:
    """The mechanism object for ``mechanism=``: a name of :data:`MECHANISMS` or an object.

    A name builds its class with ``k`` (``None``: the class's default) and every other
    parameter at its default. An object is used as it is; a transform ``k`` that differs from
    the object's is refused, since the object's ``k`` is the one its calibration uses.

    Raises
    ------
    ValueError
        Naming ``mechanism`` (an unknown name, or one that does not release at this privacy
        unit) or ``k``, with an accepted alternative.
    """
    level = USER if user_level else ELEMENT
    if isinstance(mechanism, HeavyHitterMechanism):
        if k is not None and k != mechanism.k:
            raise ValueError(
                f"k: the mechanism object has k={mechanism.k}; give k on the mechanism "
                f"({type(mechanism).__name__}(k={k}, ...)) or leave the transform's k out"
            )
        chosen = mechanism
    elif isinstance(mechanism, str) and mechanism in MECHANISM_CLASSES:
        chosen = MECHANISM_CLASSES[mechanism](k)
    else:
        raise ValueError(
            f"mechanism must be one of {MECHANISMS} or a mechanism object such as "
            f"DesignB(k=...), got {mechanism!r}"
        )
    if level not in chosen.levels:
        raise ValueError(
            "mechanism: user-level releases (privacy_unit=PrivacyUnit(id=...)) are "
            f"{_levels_of(USER)}; "
            f"element-level mechanisms are {_levels_of(ELEMENT)}, got {chosen.key!r}"
        )
    return chosen


def _identity(x: Any) -> Any:
    return x


class DPHistogram(AccountedTransform):
    """Differentially private sparse histogram of keys per window, from Misra-Gries sketches.

    Emits ``(key, noisy_count)`` rows (element level:
    :class:`~beam_dpsketch.transforms.records.BoundedKeyEstimate` rows, whose ``lower``,
    ``upper`` and ``confidence`` fields and ``error_bound`` property state each count's error;
    user level: :class:`~beam_dpsketch.transforms.records.KeyEstimate`) for every
    key whose noisy count passes the mechanism's threshold, in canonical key order (never
    insertion order, ``docs/algorithms.md#mg-order``), one release per window and pane (or
    :class:`~beam_dpsketch.transforms.release.Release` objects carrying the records and the
    release's mechanism, epsilon, delta, noise scale and threshold, with
    ``with_metadata=True``).

    Parameters
    ----------
    k
        A convenience for ``mechanism``'s own ``k``: the Misra-Gries counters per sketch of a
        mechanism given by name (default: the mechanism's, ``SELECT_COUNT_K`` = 131072 for
        element-level ``"select-then-count"``,
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K` = 4096 otherwise). With a
        mechanism object, leave it out or give the object's ``k``. Every key with true count
        above ``N/(k+1)`` plus the noise threshold is released with high probability (``N``
        elements per window). Size it with :func:`~beam_dpsketch.sketches.misra_gries.suggest_k`
        (an error target for an expected ``N``) or
        :func:`~beam_dpsketch.sketches.misra_gries.k_for_memory`.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` for this transform, split over the releases one
        privacy unit can influence (windows and panes, see ``docs/privacy-model.md``).
    key_fn
        Extracts the key from a record (a callable, or the field name of ``dict`` / ``beam.Row``
        elements); default: elements are keys (or batches of keys, as produced by
        :class:`~beam_dpsketch.transforms.ReadKeyBatches`).
    privacy_unit
        A :class:`~beam_dpsketch.privacy.PrivacyUnit`. ``PrivacyUnit()`` (the default): the
        guarantee is **element level**. ``PrivacyUnit(id=..., max_contributions=m,
        max_windows=w)``: the guarantee is **user level**; ``id`` (a callable, or the field name
        of ``dict`` / ``beam.Row`` elements) reads each element's unit, and each unit contributes
        at most ``m`` distinct keys per window (chosen by a secret keyed hash); ``w`` is the
        declared bound on the windows one unit appears in (required with non-global windows).
        User level requires ``key_fn`` or key elements, and unbatched input.
    windowing
        A :class:`~beam_dpsketch.privacy.Windowing`: ``max_panes_per_window`` (required for
        triggers that can fire more than once; further panes are withheld),
        ``data_independent_panes`` and ``release_range`` (Fixed or Sliding windows: every window
        starting in this public event-time range is released, empty ones included, and no other
        window is; without it a window without data is not released, so whether a window was
        released reveals that it had data).
    mechanism
        The release: a mechanism object of :mod:`beam_dpsketch.transforms.heavy_hitters`
        (:class:`DesignB`, :class:`Sequential`, :class:`DesignD`, :class:`UntrustedShards`,
        :class:`MergedGSHM`, :class:`MergedLaplace`, :class:`SelectThenCount` at element level; :class:`UserExact`, :class:`PamgGSHM`,
        :class:`SelectThenCount` at user level), which carries its own parameters
        (``max_shards``, ``count_fraction``, ``selection_fraction``, ``recount_source``,
        ``shards``), or
        one of :data:`MECHANISMS` for that class with its defaults. Default: ``"design-b"`` at
        element level for :class:`DPHistogram` (any windowing and trigger),
        ``"select-then-count"`` for :class:`DPHeavyHitters` (see its docstring), and
        ``"user-exact"`` at user level (noise that grows with the square root of
        the unit's ``max_contributions``, not with ``k``; memory grows with the distinct keys of
        a window,
        as in PipelineDP: pass ``"select-then-count"`` or ``"pamg-gshm"`` for memory bounded by
        ``k``). ``"sequential"``, ``"select-then-count"`` and the user-level releases need a
        trigger that fires once per window; ``"design-b"`` and the merged releases accept early
        and late firings (declare ``Windowing(max_panes_per_window=...)``).
    budget_weight
        Without ``budget``: the transform's weight in ``accountant``'s pool (default 1; see
        :class:`~beam_dpsketch.transforms.base.DPTransform`), so transforms sharing an
        accountant get the same budgets whatever order they are applied in.
    accountant, noise_source, with_metadata, label
        As for :class:`~beam_dpsketch.transforms.release.DPAggregate`.
    selection_key
        Secret key of the keyed hash that chooses each unit's keys at user level (default: a
        fresh random key).

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP for the whole transform under add/remove of one
    element (default) or of one privacy unit's bounded contributions, by basic composition over
    the releases a unit can influence (Lebeda and Tětek: Algorithm 2, Sections 6-7 and
    Theorem 12 of Section 8); each mechanism object states its own per-release guarantee.
    CombineFn shapes rely on assumption A-PART (``docs/algorithms.md#mg-a-part``).

    **Conditions.** Noise protects the released values. Which windows are released is covered
    only in the global window (always released) or with a declared
    ``Windowing(release_range=...)``; with a
    count-based early or late trigger the number and timing of panes depend on the data and are
    not covered. :meth:`explain` lists every such condition of the actual configuration under
    "NOT PROTECTED".
    """

    _top: int | None = None
    # True when the release is sorted and cut to at most k keys (DPHeavyHitters with top=None).
    _top_all: bool = False
    # The element-level release when ``mechanism`` is not given: design-b accepts every
    # windowing and trigger; DPHeavyHitters overrides it with the command's default.
    _default_mechanism: str = DesignB.key

    def __init__(
        self,
        k: int | None = None,
        budget: PrivacyBudget | None = None,
        *,
        key_fn: Callable[[Any], Any] | None = None,
        mechanism: str | HeavyHitterMechanism | None = None,
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        privacy_unit: PrivacyUnit | None = None,
        windowing: Windowing | None = None,
        noise_source: NoiseSource | None = None,
        selection_key: bytes | None = None,
        with_metadata: bool = False,
        label: str | None = None,
    ) -> None:
        if k is not None:
            check_k(k)
        if budget is None and accountant is None:
            raise ValueError(
                "budget: pass PrivacyBudget.approx(epsilon, delta), an accountant, or both"
            )
        unit = check_privacy_unit(privacy_unit)
        bounds = check_windowing(windowing)
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
        key_fn = as_extractor(key_fn, "key_fn")
        privacy_id_fn = as_extractor(unit.id, _ID_PARAMETER)
        user_level = unit.is_user_level
        # Whether the windowing refusal should also state the default's rule.
        self._mechanism_defaulted = mechanism is None
        if mechanism is None:
            # User level: user-exact counts exactly with noise that follows sqrt(m); the
            # bounded-memory pamg-gshm has the same noise but undercounts keys that share a
            # hash bucket, and select-then-count spends part of epsilon on its selection
            # (benchmarks/RESULTS.md, "User level").
            # Element level: design-b accepts every windowing and trigger.
            mechanism = USER_DEFAULT_MECHANISM if user_level else self._default_mechanism
        chosen = mechanism_for(mechanism, k, user_level)
        # The unit's bound on distinct keys per window; None at element level.
        m = unit.max_contributions if user_level else None
        if self._top_all:
            # Every selected key: at most k of them (k as the mechanism resolves it).
            self._top = chosen.bind(top=None, max_contributions=m).k
        self._mechanism: HeavyHitterMechanism = chosen.bind(top=self._top, max_contributions=m)
        self.k = self._mechanism.k
        self.mechanism_name = self._mechanism.key
        self.needs_state_and_timers = self._mechanism.needs_state_and_timers
        self._key_fn = key_fn
        # Bounding runs on (privacy id, key) pairs: PAMG needs only each unit's distinct keys,
        # and the pairs have a canonical id for the keyed-hash choice whatever the records are.
        self._bound = (
            BoundContributions(
                itemgetter(0),
                m,
                key_fn=itemgetter(1),
                max_partitions=m,
                selection_key=selection_key,
            )
            if m is not None
            else None
        )
        self._max_contributions = m
        self._privacy_id_fn = privacy_id_fn
        self._build_step(
            self._mechanism.combine_fn(),
            self._mechanism,
            privacy_unit=unit,
            windowing=bounds,
            with_metadata=with_metadata,
        )
        self._select_count: SelectThenCountSteps | None = None
        if isinstance(self._mechanism, SelectThenCount):
            self._select_count = self._mechanism.steps(self._step)

    @property
    def mechanism(self) -> HeavyHitterMechanism:
        """The mechanism object this transform releases with (bound to its privacy unit)."""
        return self._mechanism

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn, self._privacy_id_fn)

    def label_detail(self) -> str | None:
        return super().label_detail() or self.mechanism_name

    def display_parameters(self) -> dict[str, Any]:
        params = super().display_parameters()
        params.update(k=self.k, top=self._top, max_contributions=self._max_contributions)
        params.update(self._mechanism.display_parameters())
        return params

    def windowing_requirement(self) -> WindowingRequirement:
        defaulted_by = type(self).__name__ if self._mechanism_defaulted else None
        return self._mechanism.windowing_requirement(defaulted_by)

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        if self._select_count is not None:
            return self._select_count.plan(pcoll.windowing, name, self)
        return super().plan_release(pcoll, name)

    def _release(
        self, keys: beam.PCollection, recount: beam.PCollection | None = None
    ) -> beam.PCollection:
        if self._select_count is not None:
            return keys | "SelectThenCount" >> _SelectCount(
                self._select_count, self.run_salt, recount
            )
        return self._apply_step(keys)

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        if self._bound is not None:
            key_fn = self._key_fn or _identity
            pid = self._privacy_id_fn
            users = (
                pcoll
                | "ToUnitKeyPairs"
                >> beam.Map(
                    lambda x: (
                        canonical_key(call_user_fn(pid, x, _ID_PARAMETER)),
                        canonical_key(call_user_fn(key_fn, x, "key_fn")),
                    )
                )
                | "BoundContributions" >> self._bound
                | "GroupByUnit" >> beam.GroupByKey()
            )
            # Every user-level release counts each unit's distinct keys once.
            unit_keys = users | "KeysPerUnit" >> beam.Map(unit_key_set)
            return self._release(self._mechanism.prepare(unit_keys))
        keys = pcoll
        if self._key_fn is not None or not _is_batched(pcoll):
            keys = pcoll | "BatchKeys" >> BatchKeys(self._key_fn)
        recount_source = getattr(self._mechanism, "recount_source", None)
        if recount_source is not None:
            again = pcoll.pipeline | "ReadAgain" >> recount_source
            if self._key_fn is not None or not _is_batched(again):
                again = again | "BatchKeysAgain" >> BatchKeys(self._key_fn)
            return self._release(keys, again)
        return self._release(self._mechanism.prepare(keys))


class DPHeavyHitters(DPHistogram):
    """Differentially private top-``top`` heavy hitters per window, from Misra-Gries sketches.

    The :class:`DPHistogram` release, post-processed to its ``top`` largest noisy counts (default
    ``None``: every released key, at most ``k``), emitted as ``(key, noisy_count)`` tuples from
    the largest count down (ties by canonical key order). Same parameters and privacy guarantee
    as :class:`DPHistogram` (post-processing costs nothing).

    Default release, the same as the ``heavy-hitters`` command's: ``"select-then-count"``
    (:data:`HEAVY_HITTERS_DEFAULT_MECHANISM`) at element level, whose counts carry noise error
    only, for the global window and fixed windows with a trigger that fires once per window;
    any other windowing (early or late firings, sliding windows) is refused when the transform
    is applied, with the advice to pass ``mechanism="design-b"``, which accepts every windowing
    and trigger. At user level ``"user-exact"`` (:data:`USER_DEFAULT_MECHANISM`). Pick another
    release when: ``"design-b"`` for repeated panes or sliding windows; ``"sequential"`` for the
    smallest threshold when one worker can sketch a window; ``"design-d"`` for that threshold with
    a window's sketching spread over ``shards`` keyed-state shards; ``"pamg-gshm"`` or
    ``"select-then-count"`` at user level for memory bounded by ``k``.
    """

    _default_mechanism = HEAVY_HITTERS_DEFAULT_MECHANISM

    def __init__(
        self,
        k: int | None = None,
        budget: PrivacyBudget | None = None,
        *,
        top: int | None = None,
        key_fn: Callable[[Any], Any] | None = None,
        mechanism: str | HeavyHitterMechanism | None = None,
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        privacy_unit: PrivacyUnit | None = None,
        windowing: Windowing | None = None,
        noise_source: NoiseSource | None = None,
        selection_key: bytes | None = None,
        with_metadata: bool = False,
        label: str | None = None,
    ) -> None:
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
            raise ValueError(
                f"top must be a positive int or None (every released key), got {top!r}"
            )
        # top=None: every released key, which is at most k (set once k is resolved).
        self._top_all = top is None
        self._top = top
        super().__init__(
            k,
            budget,
            key_fn=key_fn,
            mechanism=mechanism,
            budget_weight=budget_weight,
            accountant=accountant,
            privacy_unit=privacy_unit,
            windowing=windowing,
            noise_source=noise_source,
            selection_key=selection_key,
            with_metadata=with_metadata,
            label=label,
        )


class _SelectCount(beam.PTransform):
    """Apply planned :class:`~beam_dpsketch.transforms.heavy_hitters.SelectThenCountSteps`."""

    def __init__(
        self,
        plan: SelectThenCountSteps,
        run_salt: Any,
        recount: beam.PCollection | None = None,
    ) -> None:
        super().__init__()
        self._plan = plan
        self._run_salt = run_salt
        self._recount = recount

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return self._plan.expand(pcoll, self._run_salt, self._recount)


def _is_batched(pcoll: beam.PCollection) -> bool:
    return is_batch_type(pcoll.element_type)
