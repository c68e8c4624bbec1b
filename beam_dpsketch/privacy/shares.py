"""How the transforms declared on one accountant share its budget: explicit budgets and weights.

A :class:`~beam_dpsketch.privacy.accountant.PrivacyAccountant` records one :class:`Share` per
transform declared on it (:meth:`~beam_dpsketch.privacy.accountant.PrivacyAccountant.declare`):
an explicit budget, or a weight. When the accountant freezes its pool (what the explicit budgets
leave), :func:`split_by_weight` gives every weighted share ``pool * weight / (sum of weights)``.
The helpers here are pure functions of public parameters; the accountant owns the order of
events (declarations, the freeze, charges).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .budget import PrivacyBudget

__all__ = ["Share", "budget_of_usage", "reserved_by", "share_lines", "split_by_weight"]


@dataclass(frozen=True)
class Share:
    """One transform's declared claim on a shared accountant.

    Attributes
    ----------
    name
        The transform's name: its label when declared, its release label once it has asked for
        its budget.
    weight
        Its weight in the shared pool, or ``None`` for an explicit budget.
    budget
        The explicit budget, or (for a weight) its share once the pool is frozen; ``None`` before.
    """

    name: str
    weight: float | None
    budget: PrivacyBudget | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "name": self.name,
            "weight": self.weight,
            "budget": None if self.budget is None else self.budget.to_dict(),
        }


def reserved_by(budget: PrivacyBudget, total: PrivacyBudget) -> PrivacyBudget | None:
    """What an explicit ``budget`` reserves from an accountant of budget ``total``.

    The budget itself when the accountant can count its kind. An approximate-DP budget under a
    pure or zCDP accountant can only be spent by a pure mechanism (anything else is refused when
    it charges), which costs at most its ``epsilon``: that much is reserved. A zCDP budget under
    a pure accountant can never be charged there: nothing is reserved.
    """
    if total.kind == "approx" or budget.kind == "pure" or budget.kind == total.kind:
        return budget
    if budget.kind == "approx":
        return PrivacyBudget.pure(budget.epsilon)  # type: ignore[arg-type]
    return None


def budget_of_usage(usage: Any, like: PrivacyBudget) -> PrivacyBudget | None:
    """``usage`` as a budget of the kind of ``like``; ``None`` if nothing is in it.

    ``usage`` is an accountant's :class:`~beam_dpsketch.privacy.accountant.BudgetUsage` (read by
    its ``epsilon``, ``delta`` and ``rho``; typed loosely, since the accountant imports this
    module).
    """
    if like.kind == "zcdp":
        if usage.rho <= 0.0:
            return None
        return PrivacyBudget.zcdp(usage.rho, like.delta_for_conversion)
    if usage.epsilon <= 0.0:
        return None
    if like.kind == "pure":
        return PrivacyBudget.pure(usage.epsilon)
    return PrivacyBudget.approx(usage.epsilon, usage.delta)


def split_by_weight(shares: Sequence[Share], pool: PrivacyBudget | None) -> list[Share]:
    """``shares`` with every weighted one given ``pool * weight / (sum of weights)``.

    :meth:`PrivacyBudget.fraction` scales every parameter of the pool. An empty pool (``None``)
    leaves the weighted shares without a budget (their transforms are refused when they ask).
    """
    total = math.fsum(s.weight for s in shares if s.weight is not None)
    out = []
    for s in shares:
        if s.weight is None or pool is None:
            out.append(s)
            continue
        budget = pool if s.weight == total else pool.fraction(s.weight / total)
        out.append(Share(s.name, s.weight, budget))
    return out


def share_lines(shares: Sequence[Share], pool: str | None, pad: str) -> list[str]:
    """Report lines of the shares when any is weighted (``pool``: its text once frozen)."""
    weights = [s.weight for s in shares if s.weight is not None]
    if not weights:
        return []
    total = math.fsum(weights)
    if pool is None:
        head = "shared by weight (the pool is frozen at the first charge)"
    else:
        head = f"shared by weight: {pool}"
    lines = [f"{pad}{head}"]
    for s in shares:
        if s.weight is None:
            lines.append(f"{pad}  - {s.name!r}: explicit budget {s.budget}")
            continue
        share = "not frozen yet" if pool is None else str(s.budget)
        lines.append(f"{pad}  - {s.name!r}: weight {s.weight:g} of {total:g}: {share}")
    return lines
