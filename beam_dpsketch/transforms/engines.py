"""What a Beam runner keeps of the model, and refusing DP transforms a runner would break silently.

A DP transform's guarantee is stated for Beam's model: per-window releases, element timestamps,
per-key state and timers. A runner that drops part of the model does not fail on such a
pipeline, it runs it with different semantics: the accountant is charged for one thing and the
runner releases another. :func:`check_runner` refuses those combinations when the transform is
applied, before its budget is charged.

Known limits
------------
``DaskRunner`` (``apache_beam.runners.dask.dask_runner.DaskRunner``, Beam 2.77)
    Translates a pipeline to ``dask.bag`` operations. It **ignores windows and timestamps** (a
    ``GroupByKey`` or ``CombinePerKey`` groups over the whole input, so a 30-day input windowed
    by day is released once, globally, while the accountant plans one release per window) and
    **has no state or timers** (a stateful ``DoFn`` runs without them). It also turns
    ``Reshuffle`` into a no-op and computes only the last sink of a pipeline; neither changes
    what a DP transform releases. Batch pipelines in the global window with the default trigger
    and without stateful transforms run correctly (``tests/engines/test_dask.py``).

``PrismRunner`` (``apache_beam.runners.portability.prism_runner.PrismRunner``, Prism 2.77)
    Implements windows, state and timers, but **fires no ON_TIME pane after early firings when
    no element arrived since the last early pane** (the model, and the DirectRunner, fire it
    empty), and with an accumulating trigger it has been seen to label a late element's panes
    as early and on time. With early firings, whether a release exists would then depend on the
    data, so triggers with early firings are refused on Prism; on-time and late panes only, and
    the global window, run as on the other runners (``tests/engines/test_prism_*.py``).

Every other runner is assumed to implement the model (the FnApiRunner, Flink, Spark and Dataflow
do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RunnerLimits", "UnsupportedRunnerError", "check_runner", "runner_limits"]


class UnsupportedRunnerError(ValueError):
    """A DP transform was applied in a pipeline whose runner would run it with wrong semantics."""


@dataclass(frozen=True)
class RunnerLimits:
    """What a runner drops of Beam's model.

    Attributes
    ----------
    name
        The runner's class name, as error messages show it.
    keeps_windows
        ``False`` if the runner ignores windows, triggers and timestamps (groups globally).
    keeps_state_and_timers
        ``False`` if the runner runs stateful ``DoFn`` s without their state and timers.
    keeps_early_panes
        ``False`` if the pane sequence after early firings differs from the model's (a pane
        the model fires may be missing), so that which releases exist depends on the data.
    """

    name: str
    keeps_windows: bool
    keeps_state_and_timers: bool
    keeps_early_panes: bool = True


# Keyed by the runner class's module and qualified name, so that checking never imports a
# runner (the Dask one needs the optional ``dask`` package).
_LIMITED_RUNNERS: dict[str, RunnerLimits] = {
    "apache_beam.runners.dask.dask_runner.DaskRunner": RunnerLimits(
        "DaskRunner", keeps_windows=False, keeps_state_and_timers=False
    ),
    "apache_beam.runners.portability.prism_runner.PrismRunner": RunnerLimits(
        "PrismRunner", keeps_windows=True, keeps_state_and_timers=True, keeps_early_panes=False
    ),
}


def _has_early_firings(trigger: Any) -> bool:
    """Whether ``trigger`` is (or wraps) an ``AfterWatermark`` with early firings."""
    if getattr(trigger, "early", None) is not None:
        return True
    inner = getattr(trigger, "underlying", None) or getattr(trigger, "triggers", None)
    if inner is None:
        return False
    parts = inner if isinstance(inner, list | tuple) else [inner]
    return any(_has_early_firings(t) for t in parts)


def runner_limits(runner: Any) -> RunnerLimits | None:
    """The limits of ``runner`` (a ``PipelineRunner`` instance), ``None`` if it has none known.

    A subclass of a limited runner has its limits. An ``InteractiveRunner`` is judged by the
    runner it wraps.
    """
    underlying = getattr(runner, "_underlying_runner", None)
    if underlying is not None and underlying is not runner:
        return runner_limits(underlying)
    for cls in type(runner).__mro__:
        limits = _LIMITED_RUNNERS.get(f"{cls.__module__}.{cls.__qualname__}")
        if limits is not None:
            return limits
    return None


def check_runner(transform: Any, pcoll: Any, name: str) -> None:
    """Refuse applying ``transform`` to ``pcoll`` if the pipeline's runner would break it.

    Called by :meth:`~beam_dpsketch.transforms.base.DPTransform.expand` before the release is
    planned, so a refused transform charges nothing.

    Parameters
    ----------
    transform
        The DP transform being applied; its ``needs_state_and_timers`` says whether it uses
        per-key state and timers (all such transforms also read timestamps or window).
    pcoll
        Its input.
    name
        The release label, for the message.

    Raises
    ------
    UnsupportedRunnerError
        If the runner drops state and timers and the transform needs them, if it drops
        windows and the input is not in the global window with the default trigger, or if it
        loses panes after early firings and the input's trigger has early firings. The
        message names the release, the transform's class and the runner (public parameters
        only).
    """
    pipeline = getattr(pcoll, "pipeline", None)
    limits = runner_limits(getattr(pipeline, "runner", None))
    if limits is None:
        return
    kind = type(transform).__name__
    if not limits.keeps_state_and_timers and getattr(transform, "needs_state_and_timers", False):
        raise UnsupportedRunnerError(
            f"{name}: {kind} cannot run on {limits.name}: it keeps per-key state and sets "
            f"timers, which {limits.name} does not implement (it would run without them and "
            "release wrong answers). Use the FnApiRunner, Prism, Flink, Spark or Dataflow"
        )
    windowing = getattr(pcoll, "windowing", None)
    if (
        not limits.keeps_early_panes
        and windowing is not None
        and _has_early_firings(windowing.triggerfn)
    ):
        raise UnsupportedRunnerError(
            f"{name}: {kind} cannot run on {limits.name} with early firings (trigger "
            f"{windowing.triggerfn!r}): {limits.name} omits the on-time pane of a window that "
            "received no element after its last early pane, so whether a release exists would "
            "depend on the data. Use a trigger without early firings (on-time and late panes), "
            "or the DirectRunner, Flink, Spark or Dataflow"
        )
    if not limits.keeps_windows and windowing is not None and not windowing.is_default():
        raise UnsupportedRunnerError(
            f"{name}: {kind} cannot run on {limits.name} on windowed input "
            f"({windowing.windowfn!r}, trigger {windowing.triggerfn!r}): {limits.name} ignores "
            "windows, triggers and timestamps, so it would release once for the whole input "
            "while the privacy plan is per window. Window the input into the global window "
            "with the default trigger, or use the FnApiRunner, Prism, Flink, Spark or Dataflow"
        )
