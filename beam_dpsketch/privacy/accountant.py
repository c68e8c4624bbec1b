"""A privacy accountant that refuses, at pipeline construction, to exceed its budget.

:class:`PrivacyAccountant` holds one :class:`~beam_dpsketch.privacy.budget.PrivacyBudget` and a list
of entries, in order:

* :class:`Charge` (alias ``Release``): one transform's mechanism, its cost per release and the
  number of releases one privacy unit can influence (from a
  :class:`~beam_dpsketch.privacy.windowing.ReleasePlan`), composed sequentially;
* a *split* (:meth:`PrivacyAccountant.split`): a child accountant with its own budget, reserved in
  full from the parent when it is created;
* a *parallel group* (:meth:`PrivacyAccountant.parallel`): a reserved budget whose partitions
  (disjoint parts of the data, e.g. key-partitioned shards, docs/algorithms.md#mg-partition) each get the
  whole group budget, because parallel composition costs the maximum ([WWC24, Theorem 3.2]).

Transforms that share an accountant declare themselves on it when constructed
(:meth:`PrivacyAccountant.declare`): an explicit budget, or a weight. The weighted ones share the
**pool** (the budget minus the entries recorded before the first transform is applied, minus the
explicit budgets) in proportion to their weights; the pool is frozen once, at the first entry
recorded after a declaration, so no share depends on the order in which transforms are built or
applied (:meth:`PrivacyAccountant.share_of`, :attr:`PrivacyAccountant.shares`).

Composition rules (what "the total" means):

* sequential, pure or approximate DP: basic composition, ``sum eps`` and ``sum delta`` (docs/privacy-model.md#many-releases-from-one-noisy-state; [YKAE, Section II-A]);
* sequential, zCDP: ``sum rho`` ([ZQR+22, Section 2.1, Lemma 2.7]); a pure charge joins as
  ``eps^2/2`` (Bun and Steinke 2016, Prop. 1.4);
* with an approximate-DP budget, zCDP charges are added up first and converted **once** with the
  delta left over by the approximate-DP charges (``method`` ``"standard"`` by default, [ZQR+22, Section 2.1, Lemma 2.9]; or ``"cks"``). Pure charges are counted either in the
  ``eps`` sum or as ``eps^2/2`` in the zCDP part, whichever gives the smaller total; both are valid
  bounds, so their minimum is too;
* parallel: component-wise maximum over the partitions of the group.

Every check uses the *committed* total (charges plus full reservations of splits and groups), so a
child can never push its parent over budget. Comparisons allow a relative slack of ``1e-12`` for
floating-point rounding (the tolerance [WWC24, Algorithm 2] uses for its budget assertion);
:meth:`PrivacyBudget.divide` rounds shares down so exact splits never rely on it.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from beam_dpsketch.checks import check_real

from .budget import ConversionMethod, PrivacyBudget, zcdp_to_epsilon
from .shares import Share, budget_of_usage, reserved_by, share_lines, split_by_weight

if TYPE_CHECKING:
    from .windowing import ReleasePlan

__all__ = [
    "BudgetExceededError",
    "BudgetUsage",
    "Charge",
    "ParallelComposition",
    "PrivacyAccountant",
]

_REL_TOL = 1e-12


class BudgetExceededError(ValueError):
    """A charge or reservation would take an accountant over its budget.

    Attributes
    ----------
    transform
        Name of the transform (or split/group) that asked.
    accountant
        Name of the accountant that refused.
    spent
        What was already committed, in the budget's terms.
    requested
        The cost of the refused charge or reservation.
    budget
        The accountant's budget.
    """

    def __init__(
        self,
        transform: str,
        accountant: str,
        spent: BudgetUsage,
        requested: str,
        budget: PrivacyBudget,
        would_be: BudgetUsage | None,
        reason: str = "",
    ) -> None:
        self.transform = transform
        self.accountant = accountant
        self.spent = spent
        self.requested = requested
        self.budget = budget
        self.would_be = would_be
        total = f"; total would be {would_be}" if would_be is not None else ""
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"privacy budget exceeded: transform {transform!r} requests {requested} but "
            f"accountant {accountant!r} has already committed {spent} of its budget "
            f"{budget}{total}{why}"
        )


@dataclass(frozen=True)
class BudgetUsage:
    """An amount of privacy loss expressed in a budget's terms (values may be 0).

    ``kind`` is the budget kind; ``epsilon``/``delta`` are meaningful for ``pure``/``approx``,
    ``rho`` for ``zcdp``. ``route`` says how an approximate-DP total was obtained.
    """

    kind: str
    epsilon: float = 0.0
    delta: float = 0.0
    rho: float = 0.0
    route: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        if self.kind == "zcdp":
            return {"kind": self.kind, "rho": self.rho}
        out: dict[str, Any] = {"kind": self.kind, "epsilon": self.epsilon, "delta": self.delta}
        if self.route:
            out["route"] = self.route
        return out

    def __str__(self) -> str:
        if self.kind == "zcdp":
            return f"rho={self.rho:.6g}"
        if self.kind == "pure":
            return f"eps={self.epsilon:.6g}"
        return f"eps={self.epsilon:.6g}, delta={self.delta:.6g}"


@dataclass(frozen=True)
class _Cost:
    """Cost vector: every component composes additively (sequential) or by max (parallel)."""

    pure_eps: float = 0.0
    pure_rho: float = 0.0  # the same pure charges expressed as zCDP (sum of eps^2/2)
    approx_eps: float = 0.0
    approx_delta: float = 0.0
    rho: float = 0.0

    @staticmethod
    def of(budget: PrivacyBudget, k: int = 1) -> _Cost:
        if budget.kind == "zcdp":
            return _Cost(rho=k * budget.rho)  # type: ignore[operator]
        eps = budget.epsilon
        if budget.is_pure:
            return _Cost(pure_eps=k * eps, pure_rho=k * 0.5 * eps * eps)  # type: ignore[operator]
        return _Cost(approx_eps=k * eps, approx_delta=k * budget.delta)  # type: ignore[operator]

    def __add__(self, other: _Cost) -> _Cost:
        return _Cost(
            math.fsum((self.pure_eps, other.pure_eps)),
            math.fsum((self.pure_rho, other.pure_rho)),
            math.fsum((self.approx_eps, other.approx_eps)),
            math.fsum((self.approx_delta, other.approx_delta)),
            math.fsum((self.rho, other.rho)),
        )

    def max(self, other: _Cost) -> _Cost:
        return _Cost(
            max(self.pure_eps, other.pure_eps),
            max(self.pure_rho, other.pure_rho),
            max(self.approx_eps, other.approx_eps),
            max(self.approx_delta, other.approx_delta),
            max(self.rho, other.rho),
        )

    @property
    def is_zero(self) -> bool:
        return not (self.pure_eps or self.approx_eps or self.approx_delta or self.rho)


def _sum_costs(costs: list[_Cost]) -> _Cost:
    total = _Cost()
    for c in costs:
        total = total + c
    return total


@dataclass(frozen=True)
class Charge:
    """One recorded charge: a transform's mechanism released ``releases`` times.

    Attributes
    ----------
    transform, mechanism
        Names shown in reports.
    per_release_cost
        Privacy cost of one release (one window x pane) for one privacy unit.
    releases
        How many releases one privacy unit can influence (sequential composition).
    total_cost
        ``per_release_cost`` composed ``releases`` times.
    privacy_unit
        What is protected: ``"element"``, ``"user"``, or a named privacy-unit id.
    noise_scale, threshold
        Calibrated noise parameter and release threshold, if any (for the report).
    windows_per_unit, panes_per_window
        Windowing behind ``releases`` (from a ``ReleasePlan``), if known.
    details
        Free-form extra facts (sensitivity, relation, paper reference, ...).
    remaining_after
        The accountant's remaining budget right after this charge.
    """

    transform: str
    mechanism: str
    per_release_cost: PrivacyBudget
    releases: int
    total_cost: PrivacyBudget
    privacy_unit: str
    noise_scale: float | None = None
    threshold: float | None = None
    windows_per_unit: int | None = None
    panes_per_window: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)
    remaining_after: BudgetUsage | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "type": "charge",
            "transform": self.transform,
            "mechanism": self.mechanism,
            "per_release_cost": self.per_release_cost.to_dict(),
            "releases": self.releases,
            "total_cost": self.total_cost.to_dict(),
            "privacy_unit": self.privacy_unit,
            "noise_scale": self.noise_scale,
            "threshold": self.threshold,
            "windows_per_unit": self.windows_per_unit,
            "panes_per_window": self.panes_per_window,
            "details": {k: _jsonable(v) for k, v in self.details.items()},
            "remaining_after": None
            if self.remaining_after is None
            else self.remaining_after.to_dict(),
        }


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, list | tuple):
            return [_jsonable(v) for v in value]
        return repr(value)


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    return name


def _optional_positive_int(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def _optional_finite(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    return float(value)


@dataclass
class _Reservation:
    kind: str  # "split" or "parallel"
    name: str
    budget: PrivacyBudget
    child: PrivacyAccountant | ParallelComposition


class PrivacyAccountant:
    """Tracks privacy charges against a budget and refuses to exceed it.

    Parameters
    ----------
    budget
        The total budget. Its kind decides the composition rules (module docstring).
    name
        Name used in reports and error messages.
    conversion
        zCDP to ``(eps, delta)`` conversion used with an approximate-DP budget: ``"standard"``
        (default; [ZQR+22, Section 2.1, Lemma 2.9]) or ``"cks"`` (Canonne, Kamath and
        Steinke 2020; tighter, valid for any zCDP mechanism).

    Examples
    --------
    >>> acc = PrivacyAccountant(PrivacyBudget.approx(1.0, 1e-6))
    >>> _ = acc.charge("hh", "PMG", PrivacyBudget.approx(0.25, 2.5e-7), releases=2)
    >>> str(acc.remaining)
    'eps=0.5, delta=5e-07'
    """

    def __init__(
        self,
        budget: PrivacyBudget,
        name: str = "pipeline",
        *,
        conversion: ConversionMethod = "standard",
    ) -> None:
        if not isinstance(budget, PrivacyBudget):
            raise TypeError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
        if conversion not in ("standard", "cks"):
            raise ValueError(f"conversion must be 'standard' or 'cks', got {conversion!r}")
        self.budget = budget
        self.name = _check_name(name, "name")
        self.conversion: ConversionMethod = conversion
        self._entries: list[Charge | _Reservation] = []
        # Transforms declared on this accountant (explicit budgets and weights), in order, and
        # the pool the weights share: frozen by the first entry recorded after a declaration.
        self._shares: list[Share] = []
        self._pool: BudgetUsage | None = None
        self._pool_text = ""

    # ---- evaluation -------------------------------------------------------------------------

    def _evaluate(self, cost: _Cost) -> BudgetUsage:
        """Express ``cost`` in the budget's terms; raise ValueError if it cannot be expressed."""
        b = self.budget
        if b.kind == "pure":
            if cost.approx_eps or cost.approx_delta or cost.rho:
                raise ValueError(
                    f"accountant {self.name!r} has a pure budget {b}; approximate-DP or zCDP "
                    "charges cannot be counted against it"
                )
            return BudgetUsage("pure", epsilon=cost.pure_eps)
        if b.kind == "zcdp":
            if cost.approx_eps or cost.approx_delta:
                raise ValueError(
                    f"accountant {self.name!r} has a zCDP budget {b}; approximate-DP charges "
                    "with delta > 0 cannot be converted to zCDP"
                )
            return BudgetUsage("zcdp", rho=math.fsum((cost.rho, cost.pure_rho)))
        # approximate-DP budget
        delta_left = b.delta - cost.approx_delta
        linear_route = BudgetUsage(
            "approx",
            epsilon=math.fsum((cost.pure_eps, cost.approx_eps)),
            delta=cost.approx_delta,
            route="basic composition",
        )
        if not cost.rho and not cost.pure_rho:
            return linear_route
        routes: list[BudgetUsage] = []
        if delta_left > 0.0:
            if cost.rho:
                eps_z = zcdp_to_epsilon(cost.rho, delta_left, self.conversion)
                routes.append(
                    BudgetUsage(
                        "approx",
                        epsilon=math.fsum((cost.pure_eps, cost.approx_eps, eps_z)),
                        delta=b.delta,
                        route=f"zCDP part (rho={cost.rho:.6g}) converted at delta={delta_left:.6g}",
                    )
                )
            if cost.pure_rho:
                rho_all = math.fsum((cost.rho, cost.pure_rho))
                eps_z = zcdp_to_epsilon(rho_all, delta_left, self.conversion)
                routes.append(
                    BudgetUsage(
                        "approx",
                        epsilon=math.fsum((cost.approx_eps, eps_z)),
                        delta=b.delta,
                        route=(
                            f"pure charges as zCDP, rho={rho_all:.6g} converted at "
                            f"delta={delta_left:.6g}"
                        ),
                    )
                )
        if not cost.rho:
            routes.append(linear_route)
        if not routes:
            # zCDP charges but no delta left to convert them: infinite epsilon.
            return BudgetUsage(
                "approx",
                epsilon=math.inf,
                delta=cost.approx_delta,
                route="zCDP charges need delta but the approximate-DP charges used it all",
            )
        return min(routes, key=lambda u: u.epsilon)

    def _fits(self, usage: BudgetUsage) -> bool:
        b = self.budget
        slack = 1.0 + _REL_TOL
        if b.kind == "zcdp":
            return usage.rho <= b.rho * slack  # type: ignore[operator]
        if usage.epsilon > b.epsilon * slack:  # type: ignore[operator]
            return False
        return usage.delta <= b.delta * slack

    def _remaining_of(self, usage: BudgetUsage) -> BudgetUsage:
        b = self.budget
        if b.kind == "zcdp":
            return BudgetUsage("zcdp", rho=max(0.0, b.rho - usage.rho))  # type: ignore[operator]
        return BudgetUsage(
            b.kind,
            epsilon=max(0.0, b.epsilon - usage.epsilon),  # type: ignore[operator]
            delta=max(0.0, b.delta - usage.delta),
        )

    def _committed_cost(self) -> _Cost:
        costs: list[_Cost] = []
        for e in self._entries:
            if isinstance(e, Charge):
                costs.append(_Cost.of(e.per_release_cost, e.releases))
            else:
                costs.append(_Cost.of(e.budget))
        return _sum_costs(costs)

    def _spent_cost(self) -> _Cost:
        costs: list[_Cost] = []
        for e in self._entries:
            if isinstance(e, Charge):
                costs.append(_Cost.of(e.per_release_cost, e.releases))
            else:
                costs.append(e.child._spent_cost())
        return _sum_costs(costs)

    def _admit(self, who: str, cost: _Cost, requested: str) -> BudgetUsage:
        """Check that adding ``cost`` fits; return the new committed usage or raise."""
        # The first entry after a declaration freezes the pool, from the entries before it.
        self._freeze_pool()
        before = self._evaluate(self._committed_cost())
        after = self._evaluate(self._committed_cost() + cost)
        if not self._fits(after):
            reason = after.route if math.isinf(after.epsilon) else ""
            raise BudgetExceededError(who, self.name, before, requested, self.budget, after, reason)
        return after

    # ---- public views -----------------------------------------------------------------------

    @property
    def charges(self) -> tuple[Charge, ...]:
        """This accountant's own charges, in order (children are not included)."""
        return tuple(e for e in self._entries if isinstance(e, Charge))

    def all_charges(self) -> list[tuple[str, Charge]]:
        """Every charge in this accountant and its children, as ``(path, charge)`` pairs."""
        out: list[tuple[str, Charge]] = []
        for e in self._entries:
            if isinstance(e, Charge):
                out.append((self.name, e))
            else:
                children = (
                    [e.child]
                    if isinstance(e.child, PrivacyAccountant)
                    else list(e.child.partitions.values())
                )
                for child in children:
                    out.extend((f"{self.name}/{p}", c) for p, c in child.all_charges())
        return out

    @property
    def committed(self) -> BudgetUsage:
        """Charges plus full reservations of splits and parallel groups: what the checks use."""
        return self._evaluate(self._committed_cost())

    @property
    def spent(self) -> BudgetUsage:
        """Actual composed cost: charges, plus children's actual spending (max over partitions)."""
        return self._evaluate(self._spent_cost())

    @property
    def remaining(self) -> BudgetUsage:
        """Budget minus :attr:`committed` (never negative)."""
        return self._remaining_of(self.committed)

    # ---- recording --------------------------------------------------------------------------

    def charge(
        self,
        name: str,
        mechanism: str,
        per_release_cost: PrivacyBudget,
        releases: int = 1,
        privacy_unit: str = "element",
        *,
        noise_scale: float | None = None,
        threshold: float | None = None,
        windows: int | None = None,
        panes: int | None = None,
        **details: Any,
    ) -> Charge:
        """Record that transform ``name`` releases ``mechanism`` ``releases`` times.

        Parameters
        ----------
        name
            Transform name (shown in reports and errors).
        mechanism
            Mechanism name, e.g. ``"PMG (Laplace)"`` or ``"Gaussian (zCDP)"``.
        per_release_cost
            Cost of one release for one privacy unit.
        releases
            Number of releases one privacy unit can influence (``ReleasePlan.releases_per_element``).
        privacy_unit
            What is protected (``"element"``, ``"user"``, ...).
        noise_scale, threshold
            Calibrated parameters to show in :meth:`explain`.
        windows, panes
            Windows per unit and panes per window behind ``releases``, for the report.
        **details
            Extra facts for the report (sensitivity, paper reference, ...).

        Returns
        -------
        Charge
            The recorded entry.

        Raises
        ------
        BudgetExceededError
            If the committed total would exceed the budget; nothing is recorded then.
        ValueError
            For invalid arguments, or a cost kind the budget cannot absorb (e.g. zCDP into pure).
        """
        _check_name(name, "name")
        _check_name(mechanism, "mechanism")
        _check_name(privacy_unit, "privacy_unit")
        if not isinstance(per_release_cost, PrivacyBudget):
            raise TypeError(
                f"per_release_cost must be a PrivacyBudget, got {type(per_release_cost).__name__}"
            )
        k = _optional_positive_int(releases, "releases")
        assert k is not None
        total = per_release_cost.times(k)
        requested = f"{total} ({k} release{'s' if k != 1 else ''} of {per_release_cost})"
        after = self._admit(name, _Cost.of(per_release_cost, k), requested)
        entry = Charge(
            transform=name,
            mechanism=mechanism,
            per_release_cost=per_release_cost,
            releases=k,
            total_cost=total,
            privacy_unit=privacy_unit,
            noise_scale=_optional_finite(noise_scale, "noise_scale"),
            threshold=_optional_finite(threshold, "threshold"),
            windows_per_unit=_optional_positive_int(windows, "windows"),
            panes_per_window=_optional_positive_int(panes, "panes"),
            details=dict(details),
            remaining_after=self._remaining_of(after),
        )
        self._entries.append(entry)
        return entry

    def charge_plan(
        self,
        name: str,
        mechanism: str,
        per_release_cost: PrivacyBudget,
        plan: ReleasePlan,
        *,
        noise_scale: float | None = None,
        threshold: float | None = None,
        **details: Any,
    ) -> Charge:
        """:meth:`charge` with releases, privacy unit, windows and panes taken from ``plan``.

        The plan's pane relation, accumulation mode, trigger and data-dependent-schedule notes are
        added to the charge details so that :meth:`explain` shows them.
        """
        extra = {
            "accumulation": plan.accumulation_mode,
            "trigger": plan.trigger,
            "pane_relation": plan.pane_relation,
            "max_panes_per_window": plan.panes_per_window,
        }
        if plan.data_dependent_schedule:
            extra["data_dependent_schedule"] = list(plan.data_dependent_schedule)
        extra.update(details)
        return self.charge(
            name,
            mechanism,
            per_release_cost,
            plan.releases_per_element,
            plan.privacy_unit,
            noise_scale=noise_scale,
            threshold=threshold,
            windows=plan.windows_per_element,
            panes=plan.panes_charged_per_window,
            **extra,
        )

    # ---- shares: the explicit budgets and weights of the transforms that charge it ---------

    def declare(
        self,
        name: str,
        *,
        budget: PrivacyBudget | None = None,
        weight: float | None = None,
    ) -> int:
        """Declare a transform that will charge this accountant; return its token.

        Every DP transform declares itself once, when it is constructed, with either its
        explicit ``budget`` or a ``weight`` (its ``budget_weight``; a transform given neither
        has weight 1). The transforms with a weight share the **pool**: the budget left after
        the entries recorded before the pool is frozen and after every explicit budget declared
        by then. Each gets ``pool * weight / (sum of weights)`` (:meth:`share_of`).

        The pool is frozen by the first charge, split or parallel group recorded after the first
        declaration (in practice: when the first transform is applied), or by the first
        :meth:`share_of`. At that moment no declared transform has charged yet, so the shares
        do not depend on the order in which transforms are constructed or applied.

        Parameters
        ----------
        name
            The transform's name, for reports (its label or class name).
        budget
            An explicit budget: reserved from the pool (the transform charges it itself).
        weight
            A weight > 0 in the pool.

        Returns
        -------
        int
            The token to pass to :meth:`share_of`.

        Raises
        ------
        ValueError
            If both or neither of ``budget`` and ``weight`` are given, or for a weight once the
            pool is frozen (declaring it then would change the shares already handed out).
        TypeError
            For a budget that is not a :class:`PrivacyBudget` or a weight that is not a real.
        """
        _check_name(name, "name")
        if (budget is None) == (weight is None):
            raise ValueError(
                f"budget_weight: {name!r} must give either an explicit budget or a "
                "budget_weight, not both"
            )
        if budget is not None:
            if not isinstance(budget, PrivacyBudget):
                raise TypeError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
            self._shares.append(Share(name, None, budget))
            return len(self._shares) - 1
        w = check_real(weight, "budget_weight", 0.0, lower_open=True)
        if self._pool is not None:
            raise ValueError(
                f"budget_weight: {name!r} was constructed after accountant {self.name!r} froze "
                "the pool its weighted transforms share (at its first charge); construct every "
                "transform that shares the accountant before applying any of them, or give this "
                "one an explicit budget=PrivacyBudget(...)"
            )
        self._shares.append(Share(name, w, None))
        return len(self._shares) - 1

    def share_of(self, token: int, name: str | None = None) -> PrivacyBudget:
        """The budget of the declared transform ``token``: its explicit budget, or its share.

        Freezes the pool if it is not frozen yet (see :meth:`declare`).

        Parameters
        ----------
        token
            What :meth:`declare` returned.
        name
            The transform's release name, recorded for reports.

        Raises
        ------
        BudgetExceededError
            For a weight when nothing is left in the pool.
        """
        if (
            isinstance(token, bool)
            or not isinstance(token, int)
            or not 0 <= token < len(self._shares)
        ):
            raise ValueError(f"token must be a token returned by declare(), got {token!r}")
        share = self._shares[token]
        if name is not None and name != share.name:
            share = Share(_check_name(name, "name"), share.weight, share.budget)
            self._shares[token] = share
        if share.weight is None:
            return share.budget  # type: ignore[return-value]
        self._freeze_pool()
        share = self._shares[token]
        if share.budget is None:
            raise BudgetExceededError(
                share.name,
                self.name,
                self.committed,
                f"a share of weight {share.weight:g} of the pool, but the pool is empty "
                f"({self._pool_text})",
                self.budget,
                None,
            )
        return share.budget

    @property
    def shares(self) -> tuple[Share, ...]:
        """The declared transforms, in order: explicit budgets and weights with their shares."""
        return tuple(self._shares)

    @property
    def pool(self) -> BudgetUsage | None:
        """The pool the weighted transforms share, once frozen (``None`` before)."""
        return self._pool

    def _freeze_pool(self) -> None:
        """Freeze the pool and every weighted share, once, from the entries recorded so far."""
        if self._pool is not None or not self._shares:
            return
        cost = self._committed_cost()
        explicit = [s.budget for s in self._shares if s.budget is not None]
        for budget in explicit:
            reserved = reserved_by(budget, self.budget)
            if reserved is not None:
                cost = cost + _Cost.of(reserved)
        usage = self._evaluate(cost)
        left = self._remaining_of(usage) if self._fits(usage) else BudgetUsage(self.budget.kind)
        self._pool = left
        before = self._evaluate(self._committed_cost())
        self._pool_text = (
            f"pool {left} = budget {self.budget} minus entries before it ({before}) minus "
            f"{len(explicit)} explicit budget{'s' if len(explicit) != 1 else ''}"
        )
        self._shares = split_by_weight(self._shares, budget_of_usage(left, self.budget))

    def _budget_for_child(
        self, fraction_or_budget: float | PrivacyBudget, what: str
    ) -> PrivacyBudget:
        if isinstance(fraction_or_budget, PrivacyBudget):
            child = fraction_or_budget
            self._evaluate(_Cost.of(child))  # raises ValueError if the kinds are incompatible
            return child
        if isinstance(fraction_or_budget, bool) or not isinstance(fraction_or_budget, numbers.Real):
            raise TypeError(
                f"{what} must be a fraction in (0, 1] or a PrivacyBudget, "
                f"got {type(fraction_or_budget).__name__}"
            )
        return self.budget.fraction(float(fraction_or_budget))

    def _reserve(self, kind: str, name: str, budget: PrivacyBudget, child: Any) -> None:
        _check_name(name, "name")
        if any(isinstance(e, _Reservation) and e.name == name for e in self._entries):
            raise ValueError(
                f"accountant {self.name!r} already has a split or group named {name!r}"
            )
        self._admit(name, _Cost.of(budget), f"a {kind} reservation of {budget}")
        self._entries.append(_Reservation(kind, name, budget, child))

    def split(self, name: str, fraction_or_budget: float | PrivacyBudget) -> PrivacyAccountant:
        """Reserve part of this budget for a child accountant (e.g. one transform) and return it.

        Parameters
        ----------
        name
            Child name (unique among this accountant's splits and groups).
        fraction_or_budget
            A fraction in ``(0, 1]`` of *this accountant's total* budget, or an explicit
            :class:`PrivacyBudget` (pure into anything; approximate into approximate; zCDP into
            zCDP or approximate).

        Raises
        ------
        BudgetExceededError
            If the reservation does not fit in what is left.
        """
        budget = self._budget_for_child(fraction_or_budget, "fraction_or_budget")
        child = PrivacyAccountant(budget, name, conversion=self.conversion)
        self._reserve("split", name, budget, child)
        return child

    def parallel(self, name: str, fraction_or_budget: float | PrivacyBudget) -> ParallelComposition:
        """Reserve a budget for a group of disjoint partitions that compose in parallel.

        Every partition (``group.partition(key)``) is an accountant with the whole group budget;
        the group's actual cost is the maximum over partitions. Use it only when each privacy unit
        lands in exactly one partition (docs/algorithms.md#mg-partition: element-level data hashed by
        element; docs/algorithms.md#lin-merge: one user, one key).
        """
        budget = self._budget_for_child(fraction_or_budget, "fraction_or_budget")
        group = ParallelComposition(name, budget, self.conversion)
        self._reserve("parallel", name, budget, group)
        return group

    # ---- reports ----------------------------------------------------------------------------

    def _composition_text(self) -> str:
        b = self.budget
        if b.kind == "pure":
            return "sequential: sum of eps; parallel partitions: max"
        if b.kind == "zcdp":
            return "sequential: sum of rho (pure charges as eps^2/2); parallel partitions: max"
        conv = (
            "rho + 2 sqrt(rho ln(1/delta))"
            if self.conversion == "standard"
            else "Canonne-Kamath-Steinke 2020"
        )
        return (
            "sequential: sum of eps and delta; zCDP charges summed and converted once "
            f"({conv}); parallel partitions: max"
        )

    def explain(self) -> str:
        """A human-readable report of every charge, split and group, with running budgets."""
        return "\n".join(self._explain_lines(0))

    def _explain_lines(self, indent: int) -> list[str]:
        pad = "  " * indent
        lines = [
            f"{pad}Privacy accountant {self.name!r}: budget {self.budget}",
            f"{pad}  composition: {self._composition_text()}",
        ]
        lines.extend(self._share_lines(pad + "  "))
        if not self._entries:
            lines.append(f"{pad}  (no charges)")
        for i, e in enumerate(self._entries, 1):
            if isinstance(e, Charge):
                lines.extend(_charge_lines(i, e, pad + "  "))
            elif isinstance(e.child, PrivacyAccountant):
                lines.append(f"{pad}  [{i}] split {e.name!r}: reserved {e.budget}")
                lines.extend(e.child._explain_lines(indent + 3))
            else:
                group = e.child
                lines.append(
                    f"{pad}  [{i}] parallel group {e.name!r}: reserved {e.budget}; partitions "
                    f"compose in parallel (max); actual cost {group.spent}"
                )
                if not group.partitions:
                    lines.append(f"{pad}      (no partitions)")
                for part in group.partitions.values():
                    lines.extend(part._explain_lines(indent + 3))
        committed = self.committed
        lines.append(f"{pad}  committed (charges + reservations): {committed}")
        if committed.route and self.budget.kind == "approx":
            lines.append(f"{pad}    computed as: {committed.route}")
        lines.append(f"{pad}  actually spent: {self.spent}")
        lines.append(f"{pad}  remaining budget: {self.remaining}")
        return lines

    def _share_lines(self, pad: str) -> list[str]:
        """The weighted shares, when any transform declared a weight."""
        pool = None if self._pool is None else self._pool_text
        return share_lines(self._shares, pool, pad)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable report (the same content as :meth:`explain`)."""
        entries: list[dict[str, Any]] = []
        for e in self._entries:
            if isinstance(e, Charge):
                entries.append(e.to_dict())
            elif isinstance(e.child, PrivacyAccountant):
                entries.append(
                    {
                        "type": "split",
                        "name": e.name,
                        "reserved": e.budget.to_dict(),
                        "accountant": e.child.to_dict(),
                    }
                )
            else:
                entries.append(
                    {
                        "type": "parallel",
                        "name": e.name,
                        "reserved": e.budget.to_dict(),
                        "spent": e.child.spent.to_dict(),
                        "partitions": {k: p.to_dict() for k, p in e.child.partitions.items()},
                    }
                )
        return {
            "name": self.name,
            "budget": self.budget.to_dict(),
            "conversion": self.conversion,
            "composition": self._composition_text(),
            "entries": entries,
            "shares": [s.to_dict() for s in self._shares],
            "pool": None if self._pool is None else self._pool.to_dict(),
            "committed": self.committed.to_dict(),
            "spent": self.spent.to_dict(),
            "remaining": self.remaining.to_dict(),
        }


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"


def _charge_lines(i: int, c: Charge, pad: str) -> list[str]:
    lines = [
        f"{pad}[{i}] transform {c.transform!r}: mechanism {c.mechanism!r}",
        f"{pad}    noise scale: {_fmt(c.noise_scale)}; threshold: {_fmt(c.threshold)}",
    ]
    windows = "unknown" if c.windows_per_unit is None else str(c.windows_per_unit)
    panes = "unknown" if c.panes_per_window is None else str(c.panes_per_window)
    lines.append(
        f"{pad}    privacy unit: {c.privacy_unit}; windows per unit: {windows}; "
        f"panes per window: {panes}"
    )
    lines.append(
        f"{pad}    cost per release: {c.per_release_cost}; releases: {c.releases}; "
        f"total: {c.total_cost}"
    )
    for key, value in c.details.items():
        if key == "data_dependent_schedule" and isinstance(value, list | tuple):
            # Conditions of the guarantee: said loudly, one per line, never buried in a list.
            lines.append(f"{pad}    NOT PROTECTED by the noise (conditions of the guarantee):")
            lines.extend(f"{pad}      - {reason}" for reason in value)
            continue
        lines.append(f"{pad}    {key}: {value}")
    if c.remaining_after is not None:
        lines.append(f"{pad}    remaining budget after this charge: {c.remaining_after}")
    return lines


class ParallelComposition:
    """A reserved budget shared by disjoint partitions (parallel composition: the maximum).

    Obtain it from :meth:`PrivacyAccountant.parallel`; call :meth:`partition` for each disjoint
    part of the data. Each partition is a :class:`PrivacyAccountant` with the whole group budget.
    """

    def __init__(self, name: str, budget: PrivacyBudget, conversion: ConversionMethod) -> None:
        self.name = name
        self.budget = budget
        self.conversion: ConversionMethod = conversion
        self.partitions: dict[str, PrivacyAccountant] = {}

    def partition(self, key: str) -> PrivacyAccountant:
        """The accountant of partition ``key`` (created on first use)."""
        _check_name(key, "key")
        if key not in self.partitions:
            self.partitions[key] = PrivacyAccountant(
                self.budget, f"{self.name}[{key}]", conversion=self.conversion
            )
        return self.partitions[key]

    def _spent_cost(self) -> _Cost:
        total = _Cost()
        for part in self.partitions.values():
            total = total.max(part._spent_cost())
        return total

    @property
    def spent(self) -> BudgetUsage:
        """Actual cost of the group: the component-wise maximum over partitions."""
        return PrivacyAccountant(self.budget, self.name, conversion=self.conversion)._evaluate(
            self._spent_cost()
        )
