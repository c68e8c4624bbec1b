"""Contribution bounding publishes no Beam metrics.

Beam metrics (``result.metrics()``, monitoring UIs, worker logs) leave the pipeline outside any
release. A counter of units, dropped contributions or dropped partitions is an exact function of
the data: on neighbouring inputs (one unit with many contributions added) it differs by a
deterministic amount. The test runs BoundContributions on two neighbouring inputs on the
FnApiRunner and reads every metric the run reports.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

from beam_dpsketch.transforms import BoundContributions

RUNNER = "FnApiRunner"
KEY = b"bounding-metrics-test-key-000001"
#: Namespace the bounding step once used for its counters.
BOUNDING_NAMESPACE = "beam_dpsketch.bounding"


def _base() -> list[tuple[str, str, int]]:
    # 20 units with 4 contributions each in 2 keys: the contribution bound (2) drops some.
    return [(f"u{u}", f"k{i % 2}", i) for u in range(20) for i in range(4)]


def _neighbour() -> list[tuple[str, str, int]]:
    # One more unit with 50 contributions in 50 distinct keys: the partition bound drops some.
    return _base() + [("heavy", f"h{i}", i) for i in range(50)]


def _all_metrics(elements: list[tuple[str, str, int]]) -> list[tuple[str, str, str]]:
    """Run the bounding step alone; return every reported metric as (namespace, name, value)."""
    p = beam.Pipeline(runner=RUNNER)
    _ = (
        p
        | beam.Create(elements, reshuffle=False)
        | BoundContributions(
            lambda e: e[0],
            2,
            key_fn=lambda e: e[1],
            max_partitions=2,
            selection_key=KEY,
        )
    )
    result = p.run()
    result.wait_until_finish()
    query = result.metrics().query(MetricsFilter())
    out = []
    for kind in ("counters", "distributions", "gauges"):
        for m in query.get(kind, []):
            value = m.committed if m.committed is not None else m.attempted
            out.append((m.key.metric.namespace, m.key.metric.name, repr(value)))
    return sorted(out)


def test_bounding_reports_no_metric_in_its_namespace():
    metrics = _all_metrics(_neighbour())
    ours = [m for m in metrics if m[0] == BOUNDING_NAMESPACE]
    assert ours == [], f"data-dependent bounding metrics published: {ours}"


def test_no_reported_metric_depends_on_the_data():
    # Whatever user metric the step reports must be the same on neighbouring inputs.
    assert _all_metrics(_base()) == _all_metrics(_neighbour())
