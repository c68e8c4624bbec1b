"""The Beam side of the command line: pipeline options from the arguments it does not parse,
and the runner they choose (the in-process FnApiRunner unless ``--runner`` says otherwise).

Every subcommand builds its pipeline through :func:`pipeline_options`, which runs on Beam's
in-process ``FnApiRunner`` unless ``--runner`` is given. The default ``DirectRunner`` would first
try to download the Prism runner (offline machines wait for it to fail), and the FnApiRunner's
``multi_threading`` mode is refused because on Beam 2.77 it loses elements around large
GroupByKeys; ``--direct_running_mode=multi_processing --direct_num_workers=N`` is the way to use
several cores locally. Its SDK worker processes then log at this process's level for Beam
(:class:`FnApiRunnerWorkerLogging`).

Options of every runner Beam defines are recognised, including those declared next to a runner
rather than in ``apache_beam.options.pipeline_options`` (``--dask_client_address`` of the
``DaskRunner``): the chosen runner's module is imported before the options are checked.

Dask
----
``--runner dask`` (or ``DaskRunner``) runs a command on
:class:`~beam_dpsketch.pipelines.dask_runner.ScalingDaskRunner` (Beam's ``DaskRunner`` with
combines lifted, so that the work spreads over the workers), on the scheduler at ``--dask-address HOST:PORT`` or on a local cluster of
``--dask-workers N`` single-threaded worker processes that the command starts for its run and
stops when it ends, however it ends (:func:`command_runner`, :func:`local_dask_cluster`). The
DaskRunner runs batch pipelines in the global window only: it ignores windows and timestamps and
has no state or timers, so the subcommands that release per window or keep state
(:data:`DASK_REFUSED_COMMANDS`, and ``heavy-hitters`` with a stateful mechanism such as
``--mechanism sequential``) are refused before
anything starts, with a message naming the runners that run them. The results come back through
the command line's one staging sink (:class:`~beam_dpsketch.io.sinks.StagingArea`), which works on
the DaskRunner as on every other runner.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

import apache_beam as beam
from apache_beam.options import pipeline_options as beam_pipeline_options
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
from google.protobuf import struct_pb2

from beam_dpsketch.transforms.engines import SCALING_DASK_RUNNER
from beam_dpsketch.transforms.heavy_hitters import MECHANISM_CLASSES
from beam_dpsketch.transforms.windowing_rules import windowless_runner_refusal

__all__ = [
    "DASK_REFUSED_COMMANDS",
    "DASK_RUNNER",
    "SCALING_DASK_RUNNER",
    "DEFAULT_RUNNER",
    "FnApiRunnerWorkerLogging",
    "add_runner_arguments",
    "command_runner",
    "local_dask_cluster",
    "make_pipeline",
    "pipeline_options",
    "run_pipeline",
]

DEFAULT_RUNNER = "FnApiRunner"
#: Beam's DaskRunner.
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
#: The DaskRunner that ``--runner dask`` chooses: Beam's, with combines lifted, ``Reshuffle``
#: spreading elements and ``finish_bundle`` outputs kept, so that a pipeline scales out
#: (:mod:`beam_dpsketch.pipelines.dask_runner`).
_DASK_RUNNERS = (DASK_RUNNER, SCALING_DASK_RUNNER)
#: Runner names the command line accepts besides Beam's own (``DaskRunner`` is not among
#: Beam's known runners, so Beam alone would need its full path).
_SHORT_RUNNERS = {"dask": SCALING_DASK_RUNNER, "daskrunner": SCALING_DASK_RUNNER}
#: Subcommands refused on the DaskRunner: they release per window or pane, or keep per-key state
#: and timers, which the DaskRunner does not implement (it would run them with other semantics).
DASK_REFUSED_COMMANDS = ("continual", "sliding-window", "intermittent")
#: Options (destination, value) that make a batch subcommand stateful, refused on Dask likewise:
#: every heavy-hitter mechanism that keeps per-key state and timers.
_DASK_REFUSED_OPTIONS = tuple(
    ("mechanism", name, f"heavy-hitters --mechanism {name}")
    for name, cls in MECHANISM_CLASSES.items()
    if cls.needs_state_and_timers
)
_DASK_ACCEPTED = (
    "the default FnApiRunner (--direct_running_mode=multi_processing --direct_num_workers=N for "
    "several cores) or --runner PrismRunner"
)


def _has_flag(args: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def _flag_value(args: Sequence[str], name: str) -> str | None:
    value = None
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            value = a.split("=", 1)[1]
        elif a == name and i + 1 < len(args):
            value = args[i + 1]
    return value


def _runner_path(runner: str) -> str | None:
    """The ``module.Class`` path of a ``--runner`` value (a path, or a name Beam knows)."""
    if "." in runner:
        return runner
    wanted = runner.lower()
    if wanted in _SHORT_RUNNERS:
        return _SHORT_RUNNERS[wanted]
    for path in StandardOptions.ALL_KNOWN_RUNNERS:
        name = path.rsplit(".", 1)[-1].lower()
        if wanted in (name, name.removesuffix("runner")):
            return path
    return None


def _import_runner(beam_args: Sequence[str]) -> str | None:
    """Import the module of the chosen runner, so that its own options classes exist.

    Returns the runner's ``module.Class`` path (``None`` if unknown). A runner that cannot be
    imported is left for Beam to report when it builds the pipeline.
    """
    runner = _flag_value(beam_args, "--runner")
    path = _runner_path(runner) if runner else None
    if path is not None:
        try:
            importlib.import_module(path.rsplit(".", 1)[0])
        except Exception:  # Beam reports it, with its own message, when it creates the runner
            pass
    return path


def _without_flag(args: Sequence[str], name: str) -> list[str]:
    """``args`` without every ``name=value`` and ``name value`` occurrence."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def _warn_unknown(beam_args: Sequence[str], known: Iterable[str], stderr: TextIO) -> None:
    """Warn about options neither this CLI nor Beam knows: Beam ignores them silently."""
    # The same parser Beam builds in PipelineOptions.get_all_options (private, but it is how
    # Beam itself decides which arguments it will discard). The options classes are the
    # subclasses of PipelineOptions imported so far: the caller imports the runner's module first.
    parser = beam_pipeline_options._BeamArgumentParser(allow_abbrev=False)  # noqa: SLF001
    classes: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)  # noqa: SLF001
    _, unknown = parser.parse_known_args(list(beam_args))
    choices = sorted({s for a in parser._actions for s in a.option_strings} | set(known))  # noqa: SLF001
    for arg in unknown:
        if not arg.startswith("--"):
            continue
        name = arg.split("=", 1)[0]
        hint = difflib.get_close_matches(name, choices, n=1)
        suffix = f" (did you mean {hint[0]}?)" if hint else ""
        print(
            f"beam-dpsketch: warning: unknown option {name} passed to Beam, which ignores it"
            + suffix,
            file=stderr,
        )


class FnApiRunnerWorkerLogging(FnApiRunner):
    """Beam's FnApiRunner, whose SDK worker processes log at this process's level for Beam.

    The FnApiRunner starts its ``multi_processing`` workers with no pipeline options, so they log
    at INFO (about twenty lines each) whatever the caller configured. This runner gives them
    ``default_sdk_harness_log_level``: the effective level of the ``apache_beam`` logger when the
    runner is created (``ERROR`` for the command line without ``-v``). A worker still prints
    what it logs before it reads its options (one line, and Beam's import-time warnings).
    Everything else is the FnApiRunner's.
    """

    def __init__(self) -> None:
        level = logging.getLevelName(logging.getLogger("apache_beam").getEffectiveLevel())
        options = struct_pb2.Struct()
        options.update({"beam:option:default_sdk_harness_log_level:v1": level})
        info = beam_provision_api_pb2.ProvisionInfo(
            retrieval_token="unused-retrieval-token", pipeline_options=options
        )
        super().__init__(provision_info=ExtendedProvisionInfo(info))


_FN_API_RUNNERS = (
    "apache_beam.runners.portability.fn_api_runner.FnApiRunner",
    "apache_beam.runners.portability.fn_api_runner.fn_runner.FnApiRunner",
)
_WORKER_LOGGING_RUNNER = f"{__name__}.{FnApiRunnerWorkerLogging.__name__}"


def pipeline_options(
    beam_args: Sequence[str] | None = None,
    *,
    known_options: Iterable[str] = (),
    stderr: TextIO | None = None,
) -> PipelineOptions:
    """Beam pipeline options from the pass-through arguments, defaulting to the FnApiRunner.

    The FnApiRunner in ``multi_processing`` mode becomes :class:`FnApiRunnerWorkerLogging`
    (the same runner, with workers that log at this process's level for Beam).

    Parameters
    ----------
    beam_args
        Arguments the subcommand did not parse (``--runner``, ``--direct_num_workers``, ...).
    known_options
        The subcommand's own option strings, used to suggest corrections for typos.
    stderr
        Where to warn about options Beam does not know (default ``sys.stderr``).

    Raises
    ------
    ValueError
        For ``--direct_running_mode=multi_threading``, which loses data on this Beam version.
    """
    args = list(beam_args or ())
    if _flag_value(args, "--direct_running_mode") == "multi_threading":
        raise ValueError(
            "--direct_running_mode=multi_threading loses elements on Beam 2.77; use "
            "in_memory (the default) or multi_processing"
        )
    if not _has_flag(args, "--runner"):
        args = [f"--runner={DEFAULT_RUNNER}", *args]
    path = _import_runner(args)
    if path == SCALING_DASK_RUNNER and _flag_value(args, "--runner") != path:
        # A short name: Beam knows a runner outside its own list by its path only.
        args = [f"--runner={path}", *_without_flag(args, "--runner")]
    _warn_unknown(args, known_options, stderr or sys.stderr)
    if path in _FN_API_RUNNERS and _flag_value(args, "--direct_running_mode") == "multi_processing":
        args = [f"--runner={_WORKER_LOGGING_RUNNER}", *_without_flag(args, "--runner")]
    return PipelineOptions(args)


def make_pipeline(
    beam_args: Sequence[str] | None = None, *, known_options: Iterable[str] = ()
) -> beam.Pipeline:
    """A ``beam.Pipeline`` with :func:`pipeline_options` (FnApiRunner unless ``--runner``)."""
    return beam.Pipeline(options=pipeline_options(beam_args, known_options=known_options))


def run_pipeline(pipeline: beam.Pipeline) -> None:
    """Run ``pipeline`` and wait until it finishes; close the Dask client a DaskRunner opened.

    The DaskRunner opens one client per run and leaves it open (its result holds it): it is
    closed here once the run has ended, however it ended.
    """
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)
        if client is not None:
            client.close()


# --------------------------------------------------------------------------------------------
# Dask from the command line
# --------------------------------------------------------------------------------------------


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--dask-address HOST:PORT`` and ``--dask-workers N`` (for ``--runner dask``)."""
    group = parser.add_argument_group(
        "Dask (with --runner dask; batch subcommands in the global window)"
    )
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--dask-address",
        metavar="HOST:PORT",
        help="run on the Dask scheduler listening there (tcp:// unless the address names a "
        "protocol); its workers must import beam_dpsketch",
    )
    where.add_argument(
        "--dask-workers",
        type=int,
        metavar="N",
        help="start a local Dask cluster of N worker processes (one thread each) for this "
        "command, and stop it when the command ends",
    )


@contextmanager
def local_dask_cluster(n_workers: int) -> Iterator[str]:
    """A local Dask cluster of ``n_workers`` single-threaded worker processes; yields the
    scheduler's address (``tcp://127.0.0.1:PORT``), for ``--dask_client_address``.

    The scheduler listens on 127.0.0.1 only and has no dashboard. The cluster is closed when the
    block ends, however it ends (an error, ``KeyboardInterrupt``, the command line's ``SIGTERM``
    handling): no worker process outlives the block. The workers start without the
    ``MALLOC_TRIM_THRESHOLD_`` that Dask's nanny sets by default (unless this process's
    environment sets it): it turns off glibc's adaptive ``mmap`` threshold, so every numpy
    temporary above 128 KiB is mapped and unmapped again, and a sketch update of 10^7 int keys
    took about 5x longer in a worker than in this process.

    Raises
    ------
    ValueError
        If ``n_workers`` is not a positive int, or ``distributed`` is not installed.
    """
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ValueError(f"--dask-workers must be a positive int, got {n_workers!r}")
    try:
        import distributed
    except ImportError:
        raise ValueError(
            "--runner dask needs Dask's distributed scheduler: pip install 'dask[distributed]'"
        ) from None
    import dask

    # None removes a variable from the nanny's defaults (distributed's documented override); the
    # nanny reads them when it is made, so while the cluster starts is enough.
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        cluster = distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            # Its HTTP server (there is one even without a dashboard) on a free local port: a
            # fixed port would collide with another cluster's.
            dashboard_address="127.0.0.1:0",
            # Dask logs at WARNING by default; the command line shows Beam's and Dask's logs
            # with -v.
            silence_logs=logging.getLogger("distributed").getEffectiveLevel(),
        )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def _dask_address(address: str) -> str:
    return address if "://" in address else f"tcp://{address}"


def _refuse_on_dask(args: argparse.Namespace) -> None:
    command = getattr(args, "command", None)
    what = None
    if command in DASK_REFUSED_COMMANDS:
        what = f"the {command} subcommand"
    for dest, value, name in _DASK_REFUSED_OPTIONS:
        if getattr(args, dest, None) == value:
            what = name
    # Fixed event-time windows: the DaskRunner drops windows and timestamps.
    if getattr(args, "window_size", None) is not None:
        what = f"{command} --window-size"
    if what is not None:
        raise windowless_runner_refusal("--runner dask", what, "DaskRunner", _DASK_ACCEPTED)


@contextmanager
def command_runner(args: argparse.Namespace, beam_args: Sequence[str]) -> Iterator[list[str]]:
    """The Beam arguments a command runs with, and the Dask cluster it runs on, if any.

    Without ``--runner dask`` this yields ``beam_args`` unchanged (and refuses the Dask options).
    With it, the subcommand is checked first (:data:`DASK_REFUSED_COMMANDS`; nothing starts for
    a refused one), then ``--dask-address`` becomes Beam's ``--dask_client_address``, or
    ``--dask-workers N`` starts a local cluster (:func:`local_dask_cluster`) that lives as long
    as the block. The runner may also be reached with Beam's own ``--dask_client_address`` or
    ``--dask_scheduler_file``.

    Raises
    ------
    ValueError
        Naming the option: Dask options without ``--runner dask``, ``--runner dask`` without a
        scheduler, two schedulers, or a subcommand the DaskRunner would run with other semantics.
    """
    address = getattr(args, "dask_address", None)
    workers = getattr(args, "dask_workers", None)
    out = list(beam_args)
    runner = _flag_value(out, "--runner")
    if (_runner_path(runner) if runner else None) not in _DASK_RUNNERS:
        if address is not None or workers is not None:
            raise ValueError("--dask-address and --dask-workers need --runner dask")
        yield out
        return
    _refuse_on_dask(args)
    beam_scheduler = _has_flag(out, "--dask_client_address") or _has_flag(
        out, "--dask_scheduler_file"
    )
    if beam_scheduler and (address is not None or workers is not None):
        raise ValueError(
            "--dask-address/--dask-workers and --dask_client_address/--dask_scheduler_file "
            "both name a scheduler: give one"
        )
    if address is not None:
        yield [*out, f"--dask_client_address={_dask_address(address)}"]
    elif workers is not None:
        with local_dask_cluster(workers) as scheduler:
            yield [*out, f"--dask_client_address={scheduler}"]
    elif beam_scheduler:
        yield out
    else:
        raise ValueError(
            "--runner dask needs --dask-address HOST:PORT (a running Dask scheduler) or "
            "--dask-workers N (a local cluster for this command)"
        )
