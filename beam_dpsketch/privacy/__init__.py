"""What every differentially private transform shares: budgets, accounting and release planning.

* :mod:`.budget`: :class:`PrivacyBudget` (pure DP, approximate DP, zCDP), conversions between
  them, sequential and parallel composition and :func:`group_privacy`.
* :mod:`.accountant`: :class:`PrivacyAccountant`, which refuses an over-budget configuration
  with :class:`BudgetExceededError` at pipeline construction, shares its pool among the
  transforms declared on it by weight (:mod:`.shares`, :class:`Share`) and explains every
  charge.
* :mod:`.declarations`: what a user declares once and hands to every transform: the
  :class:`PrivacyUnit` (element or user level, with its contribution and window bounds) and the
  :class:`Windowing` bounds (panes per window, data-independent panes, a public release range).
* :mod:`.windowing`: the :class:`ReleasePlan` of a windowing's shape (how many releases one
  privacy unit can influence), in pure logic. Reading a Beam windowing strategy, and every rule
  on which windowings a transform accepts, is in :mod:`beam_dpsketch.transforms.windowing_rules`
  (:func:`~beam_dpsketch.transforms.plan_releases`): nothing in this package imports Beam.
* :mod:`.bounding`: contribution bounding by secret keyed-hash ranks
  (:func:`select_contributions`, :func:`bounded_mask`, :func:`new_selection_key`), in pure
  Python and numpy.
* :mod:`.calibration`: noise scales and thresholds of the generic mechanisms (Laplace, discrete
  Laplace, Gaussian); importable from the module, not re-exported here.

The privacy model (privacy units, neighbouring relations, release channels) is described in
``docs/privacy-model.md``.
"""

from beam_dpsketch.privacy.accountant import (
    BudgetExceededError,
    BudgetUsage,
    Charge,
    ParallelComposition,
    PrivacyAccountant,
)
from beam_dpsketch.privacy.bounding import bounded_mask, new_selection_key, select_contributions
from beam_dpsketch.privacy.budget import (
    PrivacyBudget,
    compose_parallel,
    compose_sequential,
    group_privacy,
    zcdp_to_epsilon,
)
from beam_dpsketch.privacy.declarations import PrivacyUnit, Windowing
from beam_dpsketch.privacy.shares import Share
from beam_dpsketch.privacy.windowing import ReleasePlan

__all__ = [
    "BudgetExceededError",
    "BudgetUsage",
    "Charge",
    "ParallelComposition",
    "PrivacyAccountant",
    "PrivacyBudget",
    "PrivacyUnit",
    "ReleasePlan",
    "Share",
    "Windowing",
    "bounded_mask",
    "compose_parallel",
    "compose_sequential",
    "group_privacy",
    "new_selection_key",
    "select_contributions",
    "zcdp_to_epsilon",
]
