"""The shard sweep of the DP Misra-Gries report: Design D and the untrusted-aggregator sum.

Runs the sweep's cells at the smoke size (``k = 100``, ``n = 2**16``, ``s`` in 1, 2, 8) and
checks the two report rows computed from them: Design D stays close to single-stream PMG
(derived here) and the untrusted sum's error grows with the shard count ([LT23, Section 7]).
"""

from __future__ import annotations

import pyarrow as pa

from reproduction.experiments.misra_gries import runs as mg
from reproduction.experiments.misra_gries.sharded import SHARD_METRICS, shard_claims
from reproduction.report import summarize
from reproduction.runner import derive_seed


def test_smoke_shard_sweep_reproduces_both_rows():
    experiment = mg.build_experiments(mg.MODES["smoke"], None)["shards"]
    rows = []
    for params in experiment.grid:
        rows.append({**params, **experiment.func(params, derive_seed(0, 0))})
    agg = summarize(pa.Table.from_pylist(rows), ["shards"], list(SHARD_METRICS))
    claims = {c.id: c for c in shard_claims(agg)}
    assert set(claims) == {"MD1", "MU1"}
    assert claims["MD1"].verdict == "reproduced", claims["MD1"].measured
    assert claims["MU1"].verdict == "reproduced", claims["MU1"].measured
    # One shard: every design is one sketch of the whole stream, so the untrusted sum is PMG.
    one = rows[0]
    assert one["shards"] == 1 and one["untrusted_err"] == one["pmg_err"]
