"""What a Beam runner keeps of the model, and refusing DP transforms a runner would break silently.

A DP transform's guarantee is stated for Beam's model: per-window releases, element timestamps,
per-key state and timers. A runner that drops part of the model does not fail on such a
pipeline, it runs it with different semantics: the accountant is charged for one thing and the
runner releases another. When the transform is applied, before its budget is charged,
:func:`check_runner` refuses any DP transform on a runner that drops ``finish_bundle`` outputs
and a stateful transform on a runner without state and timers, and
:func:`~beam_dpsketch.transforms.windowing_rules.accept_windowing` refuses a windowing or trigger
the runner would not honour (with every other windowing rule, from the :class:`RunnerLimits`
found here).

Known limits
------------
``DaskRunner`` (``apache_beam.runners.dask.dask_runner.DaskRunner``, Beam 2.77)
    Translates a pipeline to ``dask.bag`` operations. It **ignores windows and timestamps** (a
    ``GroupByKey`` or ``CombinePerKey`` groups over the whole input, so a 30-day input windowed
    by day is released once, globally, while the accountant plans one release per window) and
    **has no state or timers** (a stateful ``DoFn`` runs without them). It also **drops what a
    ``DoFn`` emits from** ``finish_bundle`` (its ``ParDo`` translation collects a bundle's
    outputs before calling ``finish_bundle``): the DP transforms batch unbatched keys with steps
    that emit each bundle's last batch there, so keys fed one per element would be released as
    an empty sketch. Every DP transform is therefore refused on it, naming ``runner`` and the
    accepted alternative, unless the runner class declares ``keeps_finish_bundle_outputs = True``
    as :class:`beam_dpsketch.pipelines.dask_runner.ScalingDaskRunner` (the command line's
    ``--runner dask``) does. On such a runner, batch pipelines in the global window with the
    default trigger and without stateful transforms run correctly
    (``tests/engines/test_dask.py``); it still ignores windows and has no state or timers.

``PrismRunner`` (``apache_beam.runners.portability.prism_runner.PrismRunner``, Prism 2.77)
    Implements windows, state and timers, but **fires no ON_TIME pane after early firings when
    no element arrived since the last early pane** (the model, and the BundleBasedDirectRunner,
    fire it empty), and with an accumulating trigger it has been seen to label a late element's
    panes as early and on time. With early firings, whether a release exists would then depend
    on the data, so triggers with early firings are refused on Prism; on-time and late panes
    only, and the global window, run as on the other runners (``tests/engines/test_prism_*.py``).

Prism is reached by more routes than its runner class, and each is judged when the transform is
applied (``tests/engines/test_engine_routes.py``):

* ``PrismRunner`` (or a subclass; by instance or by the name ``"PrismRunner"``/``"prism"``):
  Prism.
* Beam's default ``DirectRunner`` (``SwitchingDirectRunner``, also ``TestDirectRunner``) hands
  a pipeline to Prism whenever Prism can run it, decided over the whole pipeline at run time
  (``--prism_location`` only says where the binary is). What can be proven when a DP transform
  is applied is that a pipeline holding a ``TestStream``, or one with
  ``--allow_unsafe_triggers`` or ``--update_compatibility_version``, is never handed over; any
  other DirectRunner pipeline is treated as Prism.
* A portable runner (``PortableRunner``, ``FlinkRunner``, ``SparkRunner``, ...) submitting to
  ``--job_endpoint=<address>`` runs on whatever job service listens there, a standalone Prism
  included; it is treated as Prism unless ``--job_endpoint_engine`` (:class:`EngineOptions`)
  declares the engine behind the endpoint. ``--job_endpoint=embed`` is Beam's in-process
  Python job service (the FnApiRunner), and a ``FlinkRunner`` or ``SparkRunner`` without a
  job endpoint starts its own job server.

Every other runner is assumed to implement the model (the FnApiRunner, the
BundleBasedDirectRunner, Flink, Spark and Dataflow do).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from apache_beam.options.pipeline_options import (
    PipelineOptions,
    PortableOptions,
    StreamingOptions,
    TypeOptions,
)
from apache_beam.testing.test_stream import TestStream

__all__ = [
    "EngineOptions",
    "RunnerLimits",
    "UnsupportedRunnerError",
    "check_runner",
    "runner_limits",
]

# Engines ``--job_endpoint_engine`` can name: what the job service behind ``--job_endpoint`` is.
JOB_ENDPOINT_ENGINES = ("prism", "flink", "spark", "python")


class EngineOptions(PipelineOptions):
    """Pipeline options declaring the engine behind a portable ``--job_endpoint``.

    A portable runner submitting to ``--job_endpoint=<address>`` runs the pipeline on whatever
    job service listens there; nothing in the submitting process shows which engine that is.
    Without a declaration such a pipeline is treated as running on Prism (early firings are
    refused, see :func:`check_runner`). ``--job_endpoint_engine`` states it: ``prism``,
    ``flink`` (Beam's Flink job server), ``spark`` (Beam's Spark job server) or ``python``
    (Beam's Python job service, ``local_job_service_main``, which runs the FnApiRunner). The
    declaration is the operator's; a wrong one voids the guarantee the check protects.
    """

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument(
            "--job_endpoint_engine",
            default=None,
            help=(
                "The engine of the job service at --job_endpoint: one of "
                f"{', '.join(JOB_ENDPOINT_ENGINES)} (beam-dpsketch refuses triggers with early "
                "firings on an undeclared endpoint, as on Prism)."
            ),
        )


class UnsupportedRunnerError(ValueError):
    """A DP transform was applied in a pipeline whose runner would run it with wrong semantics."""


@dataclass(frozen=True)
class RunnerLimits:
    """What a runner drops of Beam's model.

    Attributes
    ----------
    name
        The runner (or route to an engine) as error messages name it.
    keeps_windows
        ``False`` if the runner ignores windows, triggers and timestamps (groups globally).
    keeps_state_and_timers
        ``False`` if the runner runs stateful ``DoFn`` s without their state and timers.
    keeps_early_panes
        ``False`` if the pane sequence after early firings differs from the model's (a pane
        the model fires may be missing), so that which releases exist depends on the data.
    keeps_finish_bundle_outputs
        ``False`` if the runner drops what a ``DoFn`` emits from ``finish_bundle``.
    """

    name: str
    keeps_windows: bool
    keeps_state_and_timers: bool
    keeps_early_panes: bool = True
    keeps_finish_bundle_outputs: bool = True


# Keyed by the runner class's module and qualified name, so that checking never imports a
# runner (the Dask one needs the optional ``dask`` package).
_LIMITED_RUNNERS: dict[str, RunnerLimits] = {
    "apache_beam.runners.dask.dask_runner.DaskRunner": RunnerLimits(
        "DaskRunner",
        keeps_windows=False,
        keeps_state_and_timers=False,
        keeps_finish_bundle_outputs=False,
    ),
    "apache_beam.runners.portability.prism_runner.PrismRunner": RunnerLimits(
        "PrismRunner", keeps_windows=True, keeps_state_and_timers=True, keeps_early_panes=False
    ),
}

# The runner class attribute by which a subclass of a runner that drops ``finish_bundle``
# outputs declares that it keeps them (its own ParDo translation collects them).
KEEPS_FINISH_BUNDLE_OUTPUTS = "keeps_finish_bundle_outputs"
# The runner to use instead of Beam's DaskRunner, named (not imported: it needs ``dask``).
SCALING_DASK_RUNNER = "beam_dpsketch.pipelines.dask_runner.ScalingDaskRunner"

_DIRECT_RUNNER = "apache_beam.runners.direct.direct_runner.SwitchingDirectRunner"
_PORTABLE_RUNNER = "apache_beam.runners.portability.portable_runner.PortableRunner"
_PRISM_RUNNER = "apache_beam.runners.portability.prism_runner.PrismRunner"

# What Beam's DirectRunner may run a pipeline on: Prism, whose pane sequence it then has.
_DIRECT_ON_PRISM = RunnerLimits(
    "DirectRunner (which hands pipelines to Prism)",
    keeps_windows=True,
    keeps_state_and_timers=True,
    keeps_early_panes=False,
)
# A job service the submitting process cannot identify: judged as Prism, the runner Beam's
# documentation and this project's deploying guide start standalone.
_UNDECLARED_ENDPOINT = RunnerLimits(
    "a portable runner at an undeclared --job_endpoint (judged as Prism)",
    keeps_windows=True,
    keeps_state_and_timers=True,
    keeps_early_panes=False,
)


def _class_names(runner: Any) -> list[str]:
    """Module-qualified names of ``runner``'s class and its bases (no runner is imported)."""
    return [f"{cls.__module__}.{cls.__qualname__}" for cls in type(runner).__mro__]


def _applied_transforms(pipeline: Any) -> Iterator[Any]:
    """Every transform applied to ``pipeline`` so far, composites and their parts."""
    stack = list(getattr(pipeline, "transforms_stack", [])[:1])
    while stack:
        node = stack.pop()
        yield node
        stack.extend(getattr(node, "parts", []))


def _direct_runner_keeps_pipeline(pipeline: Any) -> bool:
    """Whether Beam's DirectRunner is known, when a transform is applied, to keep ``pipeline``
    off Prism: it holds a ``TestStream``, or its options exclude Prism (Beam 2.77's rules in
    ``SwitchingDirectRunner.run_pipeline``; transforms applied later only ever exclude more)."""
    if pipeline is None:
        return False
    options = getattr(pipeline, "options", None)
    if options is not None and (
        options.view_as(TypeOptions).allow_unsafe_triggers
        or options.view_as(StreamingOptions).update_compatibility_version
    ):
        return True
    return any(isinstance(node.transform, TestStream) for node in _applied_transforms(pipeline))


def runner_limits(runner: Any, pipeline: Any = None) -> RunnerLimits | None:
    """The limits of ``runner`` (a ``PipelineRunner`` instance), ``None`` if it has none known.

    A subclass of a limited runner has its limits, except that a subclass of a runner that
    drops ``finish_bundle`` outputs keeps them if its class sets ``keeps_finish_bundle_outputs``
    to ``True``. An ``InteractiveRunner`` is judged by the
    runner it wraps. Beam's ``DirectRunner`` has Prism's limits unless ``pipeline`` (the
    pipeline being built, with its options) shows it will not hand the pipeline to Prism, and a
    portable runner with a ``--job_endpoint`` other than ``embed`` has them unless
    ``--job_endpoint_engine`` declares another engine (see the module docstring).
    """
    underlying = getattr(runner, "_underlying_runner", None)
    if underlying is not None and underlying is not runner:
        return runner_limits(underlying, pipeline)
    names = _class_names(runner)
    options = getattr(pipeline, "options", None)
    if _PORTABLE_RUNNER in names and _PRISM_RUNNER not in names and options is not None:
        endpoint = options.view_as(PortableOptions).job_endpoint
        if endpoint and endpoint != "embed":
            declared = options.view_as(EngineOptions).job_endpoint_engine
            if declared is not None and declared not in JOB_ENDPOINT_ENGINES:
                # Checked here, not by argparse, so that a wrong value is a ValueError naming
                # the option when the transform is applied rather than an exit of the process.
                raise ValueError(
                    f"--job_endpoint_engine must be one of {', '.join(JOB_ENDPOINT_ENGINES)}"
                )
            if declared is None:
                return _UNDECLARED_ENDPOINT
            return _LIMITED_RUNNERS[_PRISM_RUNNER] if declared == "prism" else None
    for name in names:
        limits = _LIMITED_RUNNERS.get(name)
        if limits is not None:
            # Only an explicit True declares it: a subclass inherits its base's translation,
            # and with it the loss, unless it says otherwise.
            if (
                not limits.keeps_finish_bundle_outputs
                and getattr(type(runner), KEEPS_FINISH_BUNDLE_OUTPUTS, False) is True
            ):
                return replace(limits, keeps_finish_bundle_outputs=True)
            return limits
    if _DIRECT_RUNNER in names and not _direct_runner_keeps_pipeline(pipeline):
        return _DIRECT_ON_PRISM
    return None


def check_runner(transform: Any, pcoll: Any, name: str) -> RunnerLimits | None:
    """Refuse applying ``transform`` to ``pcoll`` on a runner that would lose part of its input
    (``finish_bundle`` outputs), or, if it is stateful, on a runner without state and timers.

    Called by :meth:`~beam_dpsketch.transforms.base.DPTransform.expand` before the release is
    planned, so a refused transform charges nothing. What a runner's limits mean for the
    input's windowing and trigger (no windows on Dask, no early firings on Prism) is judged
    with the other windowing rules by
    :func:`~beam_dpsketch.transforms.windowing_rules.accept_windowing`, which takes the limits
    returned here.

    Parameters
    ----------
    transform
        The DP transform being applied; its ``needs_state_and_timers`` says whether it uses
        per-key state and timers (all such transforms also read timestamps or window).
    pcoll
        Its input.
    name
        The release label, for the message.

    Returns
    -------
    RunnerLimits or None
        The limits of the pipeline's runner (:func:`runner_limits`), ``None`` if it has none.

    Raises
    ------
    UnsupportedRunnerError
        If the runner drops state and timers and the transform needs them, or if it drops what
        a ``DoFn`` emits from ``finish_bundle`` (any DP transform; the message names
        ``runner`` and the runner to use instead). The message names the release, the
        transform's class and the runner (public parameters only).
    """
    pipeline = getattr(pcoll, "pipeline", None)
    limits = runner_limits(getattr(pipeline, "runner", None), pipeline)
    if limits is None:
        return None
    kind = type(transform).__name__
    if not limits.keeps_state_and_timers and getattr(transform, "needs_state_and_timers", False):
        raise UnsupportedRunnerError(
            f"{name}: {kind} cannot run on {limits.name}: it keeps per-key state and sets "
            f"timers, which {limits.name} does not implement (it would run without them and "
            "release wrong answers). Use the FnApiRunner, Prism, Flink, Spark or Dataflow"
        )
    if not limits.keeps_finish_bundle_outputs:
        # Every DP transform batches its input with steps that emit a bundle's last batch from
        # finish_bundle; dropped, that data is missing from the release without any error.
        raise UnsupportedRunnerError(
            f"{name}: runner: {kind} cannot run on {limits.name}: it drops what a DoFn emits "
            "from finish_bundle, where the batching steps of DP transforms emit each bundle's "
            "last batch, so the release would silently miss input. Use "
            f"runner={SCALING_DASK_RUNNER} (--runner dask on the beam-dpsketch command line), "
            "which keeps them (batch only, no state or timers), or the FnApiRunner, "
            "Prism, Flink, Spark or Dataflow"
        )
    return limits
