"""The DP SpaceSaving and user-level PURE_PP rows of the DP Misra-Gries report (smoke size).

Runs each sweep's cells at the smoke size and checks the rows computed from them: DP
SpaceSaving keeps at least PMG's recall with no larger relative error at equal counters and
budget ([Hol-HH], abstract), and user-level PURE_PP stays within its bound for every ``m``
([LT23, Section 8, Lemma 4]).
"""

from __future__ import annotations

import pyarrow as pa

from reproduction.experiments.misra_gries import runs as mg
from reproduction.experiments.misra_gries.space_saving import (
    SS_METRICS,
    USER_PURE_METRICS,
    space_saving_claims,
    user_pure_claims,
)
from reproduction.report import summarize
from reproduction.runner import derive_seed


def run(name: str) -> pa.Table:
    experiment = mg.build_experiments(mg.MODES["smoke"], None)[name]
    rows = [{**p, **experiment.func(p, derive_seed(0, 0))} for p in experiment.grid]
    return pa.Table.from_pylist(rows)


def test_smoke_space_saving_sweep_reproduces_its_row():
    agg = summarize(run("space_saving"), ["s", "eps"], list(SS_METRICS))
    (claim,) = space_saving_claims(agg)
    assert claim.id == "SS1" and claim.verdict == "reproduced", claim.measured


def test_smoke_user_pure_sweep_stays_within_its_bound():
    agg = summarize(run("user_pure"), ["m"], list(USER_PURE_METRICS))
    (claim,) = user_pure_claims(agg)
    assert claim.id == "MP1" and claim.verdict == "reproduced", claim.measured
