"""The Beam side of the command line: pipeline options from the arguments it does not parse,
and the runner they choose (the in-process FnApiRunner unless ``--runner`` says otherwise).

Every subcommand builds its pipeline through :func:`make_pipeline`, which runs on Beam's
in-process ``FnApiRunner`` unless ``--runner`` is given. The default ``DirectRunner`` would first
try to download the Prism runner (offline machines wait for it to fail), and the FnApiRunner's
``multi_threading`` mode is refused because on Beam 2.77 it loses elements around large
GroupByKeys; ``--direct_running_mode=multi_processing --direct_num_workers=N`` is the way to use
several cores locally. Its SDK worker processes then log at this process's level for Beam
(:class:`FnApiRunnerWorkerLogging`).

Options of every runner Beam defines are recognised, including those declared next to a runner
rather than in ``apache_beam.options.pipeline_options`` (``--dask_client_address`` of the
``DaskRunner``): the chosen runner's module is imported before the options are checked. The
``DaskRunner`` itself is refused (:func:`pipeline_options`): the command line's outputs leave the
pipeline through ``WriteToText``, which it completes without writing the elements.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import sys
from collections.abc import Iterable, Sequence
from typing import TextIO

import apache_beam as beam
from apache_beam.options import pipeline_options as beam_pipeline_options
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
from google.protobuf import struct_pb2

__all__ = [
    "DEFAULT_RUNNER",
    "FnApiRunnerWorkerLogging",
    "make_pipeline",
    "pipeline_options",
]

DEFAULT_RUNNER = "FnApiRunner"


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
# Runners the command line refuses, with the reason (measured on Beam 2.77).
_REFUSED_RUNNERS = {
    "apache_beam.runners.dask.dask_runner.DaskRunner": (
        "the command line's results leave the pipeline through WriteToText, which DaskRunner "
        "completes without writing the elements (the output would be empty), and DaskRunner "
        "computes only the last of several outputs. Apply the DP transforms in a Python "
        "pipeline with one sink (docs/deploying.md), or choose another runner"
    ),
}


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
        For ``--direct_running_mode=multi_threading``, which loses data on this Beam version,
        and for a runner the command line cannot get its results back from (the DaskRunner).
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
    _warn_unknown(args, known_options, stderr or sys.stderr)
    if path in _REFUSED_RUNNERS:
        name = path.rsplit(".", 1)[-1]
        raise ValueError(f"--runner {name}: {_REFUSED_RUNNERS[path]}")
    if path in _FN_API_RUNNERS and _flag_value(args, "--direct_running_mode") == "multi_processing":
        args = [f"--runner={_WORKER_LOGGING_RUNNER}", *_without_flag(args, "--runner")]
    return PipelineOptions(args)


def make_pipeline(
    beam_args: Sequence[str] | None = None, *, known_options: Iterable[str] = ()
) -> beam.Pipeline:
    """A ``beam.Pipeline`` with :func:`pipeline_options` (FnApiRunner unless ``--runner``)."""
    return beam.Pipeline(options=pipeline_options(beam_args, known_options=known_options))
