"""Every route to Prism refuses early firings when a DP transform is applied.

Prism fires no ON_TIME pane after early firings when the window received nothing since its last
early pane (pinned in ``test_prism_streaming.py``), so with early firings whether a release
exists would depend on the data. Prism is reached through the ``PrismRunner`` class, through
Beam's default ``DirectRunner`` (which hands a pipeline to Prism whenever Prism can run it), and
through any portable runner whose ``--job_endpoint`` is a standalone Prism. Each route is built
here the way a user writes it (runner instance, runner name, ``--runner`` option) and refused at
construction: no pipeline runs and nothing is charged. Routes that are proven to fire the pane
(the FnApiRunner, the BundleBasedDirectRunner, the DirectRunner with a ``TestStream``, the
in-process ``embed`` job service, a declared engine) still accept early firings. One test runs a
plain (non-DP) pipeline to pin the premise of the DirectRunner route: with Prism at hand, Beam's
DirectRunner runs it on Prism.
"""

from __future__ import annotations

from collections.abc import Callable

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner, DirectRunner
from apache_beam.runners.direct.test_direct_runner import TestDirectRunner
from apache_beam.runners.portability.flink_runner import FlinkRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.portable_runner import PortableRunner
from apache_beam.runners.portability.prism_runner import PrismRunner
from apache_beam.testing import test_stream as ts
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, Windowing
from beam_dpsketch.transforms import DPCount, DPFrequencies
from beam_dpsketch.transforms.engines import UnsupportedRunnerError, runner_limits

EARLY = tr.AfterWatermark(early=tr.AfterCount(1), late=tr.AfterCount(1))
ON_TIME_AND_LATE = tr.AfterWatermark(late=tr.AfterCount(1))
# A path that need not exist: nothing here starts Prism.
PRISM_LOCATION = "--prism_location=/nonexistent/prism"
ENDPOINT = "--job_endpoint=localhost:8073"


class MyPrismRunner(PrismRunner):
    pass


def _options(*args: str) -> PipelineOptions:
    return PipelineOptions(list(args))


# Each route: a function building the pipeline as a user would.
PRISM_ROUTES: dict[str, Callable[[], beam.Pipeline]] = {
    "PrismRunner instance": lambda: beam.Pipeline(runner=PrismRunner()),
    "PrismRunner subclass": lambda: beam.Pipeline(runner=MyPrismRunner()),
    "runner='PrismRunner'": lambda: beam.Pipeline(runner="PrismRunner"),
    "runner='prism'": lambda: beam.Pipeline(runner="prism"),
    "--runner=PrismRunner": lambda: beam.Pipeline(
        options=_options("--runner=PrismRunner", PRISM_LOCATION, "--streaming")
    ),
    "default runner": lambda: beam.Pipeline(),
    "default runner --streaming": lambda: beam.Pipeline(options=_options("--streaming")),
    "runner='DirectRunner'": lambda: beam.Pipeline(runner="DirectRunner"),
    "DirectRunner instance": lambda: beam.Pipeline(runner=DirectRunner()),
    "TestDirectRunner instance": lambda: beam.Pipeline(runner=TestDirectRunner()),
    "--runner=DirectRunner --prism_location": lambda: beam.Pipeline(
        options=_options("--runner=DirectRunner", PRISM_LOCATION)
    ),
    "--runner=DirectRunner --prism_location --streaming": lambda: beam.Pipeline(
        options=_options("--runner=DirectRunner", PRISM_LOCATION, "--streaming")
    ),
    "runner='SwitchingDirectRunner'": lambda: beam.Pipeline(runner="SwitchingDirectRunner"),
    "DirectRunner --direct_running_mode=in_memory": lambda: beam.Pipeline(
        options=_options("--runner=DirectRunner", "--direct_running_mode=in_memory")
    ),
    # The deploying guide's standalone Prism: a job endpoint the process cannot identify.
    "PortableRunner at a job endpoint": lambda: beam.Pipeline(
        options=_options("--runner=PortableRunner", ENDPOINT, "--environment_type=LOOPBACK")
    ),
    "PortableRunner instance at a job endpoint": lambda: beam.Pipeline(
        runner=PortableRunner(), options=_options(ENDPOINT)
    ),
    "FlinkRunner at a job endpoint": lambda: beam.Pipeline(
        runner=FlinkRunner(), options=_options(ENDPOINT)
    ),
    "PortableRunner at a job endpoint declared prism": lambda: beam.Pipeline(
        options=_options("--runner=PortableRunner", ENDPOINT, "--job_endpoint_engine=prism")
    ),
    "PrismRunner at a job endpoint declared flink": lambda: beam.Pipeline(
        options=_options("--runner=PrismRunner", ENDPOINT, "--job_endpoint_engine=flink")
    ),
}

MODEL_ROUTES: dict[str, Callable[[], beam.Pipeline]] = {
    "FnApiRunner instance": lambda: beam.Pipeline(runner=FnApiRunner()),
    "runner='FnApiRunner'": lambda: beam.Pipeline(runner="FnApiRunner"),
    "BundleBasedDirectRunner": lambda: beam.Pipeline(runner=BundleBasedDirectRunner()),
    "runner='BundleBasedDirectRunner'": lambda: beam.Pipeline(runner="BundleBasedDirectRunner"),
    "PortableRunner embed": lambda: beam.Pipeline(
        options=_options(
            "--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"
        )
    ),
    "PortableRunner at a job endpoint declared flink": lambda: beam.Pipeline(
        options=_options("--runner=PortableRunner", ENDPOINT, "--job_endpoint_engine=flink")
    ),
    "PortableRunner at a job endpoint declared python": lambda: beam.Pipeline(
        options=_options("--runner=PortableRunner", ENDPOINT, "--job_endpoint_engine=python")
    ),
    "FlinkRunner with its own job server": lambda: beam.Pipeline(runner=FlinkRunner()),
    "DirectRunner --allow_unsafe_triggers": lambda: beam.Pipeline(
        options=_options("--runner=DirectRunner", "--allow_unsafe_triggers")
    ),
}


def _windowed(p: beam.Pipeline, trigger: tr.TriggerFn) -> beam.PCollection:
    return (
        p
        | beam.Create([1, 2, 3])
        | beam.Map(lambda x: TimestampedValue(x, x))
        | beam.WindowInto(
            FixedWindows(10), trigger=trigger, accumulation_mode=tr.AccumulationMode.DISCARDING
        )
    )


def _dp_count(acc: PrivacyAccountant) -> DPCount:
    return DPCount(
        accountant=acc,
        windowing=Windowing(max_panes_per_window=4),
        noise_source=NoiseSource.insecure_for_tests(1),
        label="stream",
    )


@pytest.mark.parametrize("route", list(PRISM_ROUTES))
def test_early_firings_refused_on_every_route_to_prism(route):
    acc = PrivacyAccountant(PrivacyBudget.pure(10.0), name="acc")
    dp = _dp_count(acc)
    windowed = _windowed(PRISM_ROUTES[route](), EARLY)
    with pytest.raises(UnsupportedRunnerError, match="with early firings") as e:
        _ = windowed | dp
    message = str(e.value)
    assert message.startswith("stream: runner: DPCount cannot run on ")
    assert "Prism" in message and "--job_endpoint_engine" in message
    assert " at 0x" not in message
    # Refused before planning: nothing charged.
    assert acc.all_charges() == []
    assert dp.charge is None


@pytest.mark.parametrize("route", list(PRISM_ROUTES))
def test_on_time_and_late_panes_accepted_on_every_route_to_prism(route):
    acc = PrivacyAccountant(PrivacyBudget.pure(10.0), name="acc")
    dp = _dp_count(acc)
    _ = _windowed(PRISM_ROUTES[route](), ON_TIME_AND_LATE) | dp
    assert dp.charge is not None


@pytest.mark.parametrize("route", list(MODEL_ROUTES))
def test_early_firings_accepted_where_the_engine_fires_the_on_time_pane(route):
    acc = PrivacyAccountant(PrivacyBudget.pure(10.0), name="acc")
    dp = _dp_count(acc)
    p = MODEL_ROUTES[route]()
    _ = _windowed(p, EARLY) | dp
    assert dp.charge is not None
    assert runner_limits(p.runner, p) is None


@pytest.mark.parametrize(
    "options",
    [["--streaming"], ["--runner=DirectRunner", PRISM_LOCATION, "--streaming"]],
)
def test_direct_runner_with_a_test_stream_keeps_early_firings(options):
    # Beam's DirectRunner never hands a pipeline holding a TestStream to Prism: it runs it on
    # the BundleBasedDirectRunner, which fires the empty ON_TIME pane.
    acc = PrivacyAccountant(PrivacyBudget.pure(10.0), name="acc")
    dp = _dp_count(acc)
    p = beam.Pipeline(options=PipelineOptions(options))
    events = ts.TestStream().advance_watermark_to(0).add_elements([TimestampedValue(1, 1)])
    windowed = (
        p
        | events.advance_watermark_to_infinity()
        | beam.WindowInto(
            FixedWindows(10), trigger=EARLY, accumulation_mode=tr.AccumulationMode.DISCARDING
        )
    )
    _ = windowed | dp
    assert dp.charge is not None


def test_test_stream_on_a_side_branch_counts_too():
    # Beam's choice is over the whole pipeline, not the DP transform's input alone.
    acc = PrivacyAccountant(PrivacyBudget.pure(10.0), name="acc")
    dp = _dp_count(acc)
    p = beam.Pipeline(options=PipelineOptions(["--streaming"]))
    _ = p | "Other" >> ts.TestStream().advance_watermark_to_infinity()
    _ = _windowed(p, EARLY) | dp
    assert dp.charge is not None


def test_every_dp_transform_shares_the_refusal():
    acc = PrivacyAccountant(PrivacyBudget.pure(10.0), name="acc")
    freq = DPFrequencies(
        32,
        3,
        accountant=acc,
        windowing=Windowing(max_panes_per_window=4),
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    windowed = _windowed(beam.Pipeline(options=_options("--runner=DirectRunner")), EARLY)
    with pytest.raises(UnsupportedRunnerError, match="DPFrequencies cannot run on DirectRunner"):
        _ = windowed | freq
    assert acc.all_charges() == []


def test_job_endpoint_engine_accepts_only_named_engines():
    acc = PrivacyAccountant(PrivacyBudget.pure(10.0), name="acc")
    dp = _dp_count(acc)
    options = _options("--runner=PortableRunner", ENDPOINT, "--job_endpoint_engine=dask")
    windowed = _windowed(beam.Pipeline(options=options), EARLY)
    with pytest.raises(ValueError, match="--job_endpoint_engine must be one of prism, flink"):
        _ = windowed | dp
    assert acc.all_charges() == []


def test_direct_runner_does_hand_a_plain_pipeline_to_prism(prism_binary):
    # The premise of the DirectRunner route: given Prism's location, Beam's default runner runs
    # an ordinary pipeline (no TestStream) on Prism, a portable job, not in process.
    p = beam.Pipeline(
        options=_options(
            "--runner=DirectRunner",
            f"--prism_location={prism_binary}",
            "--environment_type=LOOPBACK",
            "--prism_log_level=warn",
        )
    )
    _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x + 1)
    result = p.run()
    result.wait_until_finish()
    assert type(result).__module__ == "apache_beam.runners.portability.portable_runner"
