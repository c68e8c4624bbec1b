"""Privacy layer: budgets, calibration, accounting, release planning and contribution bounding.

* :mod:`.budget`: :class:`PrivacyBudget` (pure, approximate, zCDP), conversions, composition.
* :mod:`.calibration`: noise scales (Laplace, discrete Laplace, classical/analytic/zCDP Gaussian)
  and thresholds, each citing its spec section.
* :mod:`.accountant`: :class:`PrivacyAccountant`, which refuses over-budget configurations at
  pipeline construction and explains every charge.
* :mod:`.windowing`: :func:`plan_releases` turns a PCollection's windowing into a
  :class:`ReleasePlan` (releases per privacy unit). Beam is imported lazily.
* :mod:`.bounding`: keyed-hash contribution bounding helpers (pure Python/numpy).

The privacy model is described in ``docs/privacy-model.md``.
"""

from .accountant import (
    BudgetExceededError,
    BudgetUsage,
    Charge,
    ParallelComposition,
    PrivacyAccountant,
    Release,
)
from .bounding import (
    bounded_mask,
    contribution_rank,
    contribution_ranks,
    new_selection_key,
    select_contributions,
)
from .budget import (
    PrivacyBudget,
    approx_to_zcdp,
    compose_parallel,
    compose_sequential,
    group_privacy,
    pure_to_zcdp,
    zcdp_to_epsilon,
)
from .calibration import (
    analytic_gaussian_sigma,
    approx_pp_threshold,
    classical_gaussian_sigma,
    discrete_laplace_parameter,
    discrete_laplace_scale,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_zcdp_rho,
    geometric_tail_threshold,
    gshm_closed_form_parameters,
    gshm_delta,
    gshm_threshold,
    laplace_scale,
    laplace_tail_threshold,
    merged_laplace_threshold,
    pmg_geometric_threshold,
    pmg_geometric_threshold_paper,
    pmg_standard_threshold,
    pmg_threshold,
    rational_epsilon_floor,
    subsampled_epsilon,
    user_level_pmg_parameters,
    zcdp_gaussian_sigma,
)
from .windowing import (
    ReleasePlan,
    max_trigger_firings,
    plan_releases,
)

__all__ = [
    "BudgetExceededError",
    "BudgetUsage",
    "Charge",
    "ParallelComposition",
    "PrivacyAccountant",
    "PrivacyBudget",
    "Release",
    "ReleasePlan",
    "analytic_gaussian_sigma",
    "approx_pp_threshold",
    "approx_to_zcdp",
    "bounded_mask",
    "classical_gaussian_sigma",
    "compose_parallel",
    "compose_sequential",
    "contribution_rank",
    "contribution_ranks",
    "discrete_laplace_parameter",
    "discrete_laplace_scale",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_zcdp_rho",
    "geometric_tail_threshold",
    "group_privacy",
    "gshm_closed_form_parameters",
    "gshm_delta",
    "gshm_threshold",
    "laplace_scale",
    "laplace_tail_threshold",
    "max_trigger_firings",
    "merged_laplace_threshold",
    "new_selection_key",
    "plan_releases",
    "pmg_geometric_threshold",
    "pmg_geometric_threshold_paper",
    "pmg_standard_threshold",
    "pmg_threshold",
    "pure_to_zcdp",
    "rational_epsilon_floor",
    "select_contributions",
    "subsampled_epsilon",
    "user_level_pmg_parameters",
    "zcdp_gaussian_sigma",
    "zcdp_to_epsilon",
]
