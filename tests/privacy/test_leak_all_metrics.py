"""No metric a runner reports depends on the data, for every DP transform, except the
operator-only system metrics listed in ``OPERATOR_ONLY``.

Beam metrics leave the pipeline through ``result.metrics()``, the runner's monitoring UI and its
logs, outside any release. A step inside a DP transform that registers a metric computed from
the data (``beam.BatchElements`` registers ``BatchElements/batch_size``, whose sum is the exact
number of input elements) publishes an exact, unnoised statistic.

Every public DP transform (every mechanism of the histogram, element and user level) runs on
the FnApiRunner (``in_memory``) on a worst-case pair of neighbouring inputs: ``D`` and ``D``
plus one element (a new key, or an extreme value), or ``D`` plus one privacy unit holding more
than its contribution bound. For the transforms whose guarantee covers only replacing one
element (positions and event times public), appending one element is a stronger test: their
metrics may not depend on the data size either. Noise comes from a fixed test key, so both runs
draw the same noise. Every monitoring info of both runs, user and system metrics of every
namespace, is compared by URN and labels (step or PCollection). What may differ is exactly the
runner's system metrics in ``OPERATOR_ONLY``, which ``docs/privacy-model.md`` declares visible
to the operator only; a new metric that differs fails the test.
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

import beam_dpsketch.transforms as public
from beam_dpsketch.transforms import DPTransform
from beam_dpsketch.transforms.heavy_hitters import MECHANISMS
from tests.transform_cases import (
    CASES,
    ELEMENT_LEVEL,
    EXTRA_CASES,
    EXTRA_ELEMENT_LEVEL,
    EXTRA_USER_LEVEL,
    USER_LEVEL,
)

#: System metrics the runner reports for every step and PCollection, to whoever operates it.
#: They may differ on neighbouring inputs, and are what ``docs/privacy-model.md`` declares
#: operator-only: element counts and sampled byte sizes of PCollections (inside a DP transform
#: they count input elements, batches, privacy units or kept contributions exactly), the
#: data-channel read index of a fused stage's input (the number of elements it read), execution
#: times (which grow with the data) and the number of bundles run.
OPERATOR_ONLY = {
    "beam:metric:element_count:v1": "elements of a PCollection",
    "beam:metric:sampled_byte_size:v1": "sampled encoded sizes of a PCollection's elements",
    "beam:metric:data_channel:read_index:v1": "elements a stage read from its data channel",
    "beam:metric:pardo_execution_time:start_bundle_msecs:v1": "time in start_bundle",
    "beam:metric:pardo_execution_time:process_bundle_msecs:v1": "time in process",
    "beam:metric:pardo_execution_time:finish_bundle_msecs:v1": "time in finish_bundle",
    "beam:metric:ptransform_execution_time:total_msecs:v1": "time in a step",
    # The FnApiRunner sums its number of fused stages over every bundle it runs: with event-time
    # windows and timers the number of bundles follows the windows that hold data.
    "internal:__num_fused_stages": "fused stages times bundles run (FnApiRunner)",
}
#: Of those, the ones that are exact functions of the data: on inputs of different sizes they
#: always differ, which shows the comparison sees the runner's system metrics at all.
READ_INDEX = "beam:metric:data_channel:read_index:v1"
EXACT_COUNTS = {"beam:metric:element_count:v1", READ_INDEX}

RUNNER = "FnApiRunner"


#: Public classes the cases above exercise; DPTransform and DPAggregate are the bases the
#: others are built on (every release step here runs through DPAggregate or its own DoFn).
BASES = {"DPTransform", "DPAggregate"}


def _metric_key(info: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    return info.urn, tuple(sorted(info.labels.items()))


def _run(extra: bool) -> tuple[Counter, list[tuple[str, str]]]:
    """Run every case on ``base`` (+ ``extra``); return all monitoring infos and user metrics.

    The infos are a multiset of ``(urn, labels, payload)``: a stage can report one metric key
    more than once.
    """
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    p = beam.Pipeline(runner=RUNNER, options=options)
    for name, case in {**CASES, **EXTRA_CASES}.items():
        rows = case.base + case.extra if extra else case.base
        _ = (
            p
            | f"Create {name}" >> beam.Create(rows, reshuffle=False)
            | f"DP {name}" >> case.make(f"metrics-{name}")
        )
    result = p.run()
    result.wait_until_finish()
    infos = Counter((*_metric_key(m), m.payload) for m in result.monitoring_infos())
    query = result.metrics().query(MetricsFilter())
    users = [
        (m.key.step, f"{m.key.metric.namespace}/{m.key.metric.name}")
        for kind in ("counters", "distributions", "gauges", "string_sets", "bounded_tries")
        for m in query.get(kind, [])
    ]
    return infos, users


@pytest.fixture(scope="module")
def runs() -> tuple[tuple[Counter, list], tuple[Counter, list]]:
    return _run(extra=False), _run(extra=True)


def _differing(a: Counter, b: Counter) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Metric keys ``(urn, labels)`` whose reported values differ (or exist in one run only)."""
    return {(urn, labels) for urn, labels, _ in (a - b) + (b - a)}


def test_every_public_dp_transform_is_covered():
    dp_classes = {
        name
        for name in public.__all__
        if inspect.isclass(obj := getattr(public, name)) and issubclass(obj, DPTransform)
    }
    # EXTRA_CASES run in every audit of this module too (the golden seeded releases do not
    # record them).
    made = {type(case.make("probe")).__name__ for case in {**CASES, **EXTRA_CASES}.values()}
    assert dp_classes - BASES <= made
    assert "BoundContributions" in made
    # Every histogram mechanism runs, at each level it supports.
    levels = (ELEMENT_LEVEL, USER_LEVEL, EXTRA_ELEMENT_LEVEL, EXTRA_USER_LEVEL)
    assert set().union(*levels) == set(MECHANISMS)


def test_no_dp_transform_registers_a_user_metric(runs):
    (_, users_base), (_, users_extra) = runs
    assert users_base == [] and users_extra == []


def test_only_operator_only_system_metrics_differ_on_neighbouring_inputs(runs):
    (infos_base, _), (infos_extra, _) = runs
    differing = _differing(infos_base, infos_extra)
    leaking = sorted(key for key in differing if key[0] not in OPERATOR_ONLY)
    assert leaking == [], f"metrics that depend on the data: {leaking}"
    # The comparison sees the runner's system metrics: the exact counts do differ. (Execution
    # times and sampled sizes may or may not differ in a given run.)
    assert EXACT_COUNTS <= {urn for urn, _ in differing}


def test_the_unit_grouping_read_index_is_the_number_of_privacy_units(runs):
    # What docs/privacy-model.md tells operators: a runner metric of an internal step counts
    # the privacy units exactly (80 units, then one more).
    step = (("PTRANSFORM", "DP bounding/GroupByPrivacyId/Read"),)
    for (infos, _), units in zip(runs, (80, 81), strict=True):
        values = {
            VarIntCoder().decode(v)
            for urn, labels, v in infos
            if (urn, labels) == (READ_INDEX, step)
        }
        assert values == {units}
