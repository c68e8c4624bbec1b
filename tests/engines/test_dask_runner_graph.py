"""The Dask graph the ``ScalingDaskRunner`` builds for a lifted combine (no cluster needed).

A lifted combine sends one accumulator per partition and key to its ``GroupByKey``. Beam's
``GroupByKey`` translation groups them with Dask's task-based shuffle (the method Dask uses
whenever a distributed client exists), ``n * n`` small tasks for ``n`` partitions: at 16
partitions a global combine's graph held about 360 tasks, and scheduling them cost seconds per
run. The runner groups a lifted combine's accumulators in one partition, so the graph grows
linearly with the partitions. That the combines still release what the FnApiRunner releases is
checked by ``test_dask.py``, ``test_dask_cli.py`` and ``test_dask_runner_workers.py``.
"""

from __future__ import annotations

import apache_beam as beam
import dask
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

pytest.importorskip("distributed")

from apache_beam.runners.dask.overrides import dask_overrides  # noqa: E402 - needs dask

from beam_dpsketch.pipelines.dask_runner import LiftCombines, ScalingDaskRunner  # noqa: E402


def _graph_tasks(partitions: int) -> tuple[int, list[str]]:
    """Tasks of the optimised graph of a global sum over ``partitions`` partitions, and their
    names."""
    p = beam.Pipeline(runner=ScalingDaskRunner(), options=PipelineOptions([]))
    _ = p | beam.Create(list(range(1000))) | beam.Reshuffle() | beam.CombineGlobally(sum)
    # What ScalingDaskRunner.run_pipeline and Beam's DaskRunner.run_pipeline do before computing.
    p.replace_all([LiftCombines()])
    p.replace_all(dask_overrides())
    visitor = ScalingDaskRunner.to_dask_bag_visitor({"npartitions": partitions})
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        p.visit(visitor)
    (optimised,) = dask.optimize(list(visitor.bags.values())[-1])
    graph = optimised.__dask_graph__()
    names = [str(key[0] if isinstance(key, tuple) else key) for key in graph]
    return len(graph), names


def test_a_lifted_combine_groups_its_accumulators_without_an_all_to_all_shuffle():
    tasks_16, names = _graph_tasks(16)
    tasks_32, _ = _graph_tasks(32)
    assert not [name for name in names if name.startswith("shuffle-split")]
    # Linear in the partitions: an all-to-all shuffle would quadruple the graph.
    assert tasks_32 <= 2.5 * tasks_16
    assert tasks_16 < 16 * 16
