"""DPIntermittentQueries publishes no Beam metric: a counter is an exact, unnoised release.

Beam metrics leave the pipeline through the runner's monitoring, outside the release boundary.
A counter of the data elements after the last query time (which no answer depends on) would be
an exact count of private elements. The run below has 7 such elements; no user metric of any
namespace may exist after it.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms.intermittent import DPIntermittentQueries, QuerySchedule


def _user_metrics(result: beam.runners.runner.PipelineResult) -> list[tuple[str, str, int]]:
    found = result.metrics().query(MetricsFilter())
    return [
        (m.key.metric.namespace, m.key.metric.name, m.committed)
        for kind in ("counters", "distributions", "gauges")
        for m in found.get(kind, [])
    ]


def test_no_metric_counts_the_elements_after_the_last_query():
    schedule = QuerySchedule([(3, ["a"]), (5, ["a", "b"])])
    rows = [(t, "a" if t % 2 else "b") for t in range(1, 13)]  # positions 6..12 after the last
    t = DPIntermittentQueries(
        32,
        3,
        PrivacyBudget.pure(1.0),
        queries=schedule,
        clock="positions",
        noise_source=NoiseSource.insecure_for_tests(4),
        label="metrics",
    )
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create(rows) | t
    result = p.run()
    result.wait_until_finish()
    assert _user_metrics(result) == []
