"""The papers the harness reproduces, and :func:`run_paper`, the one way to run any of them.

Each experiment module declares its paper's experiment table as a :class:`Paper` named
``PAPER``: its scales, the function that builds its experiment grids, the function that turns
the results into a report, which real data it reads and which experiments are timed. Every
paper then runs the same way: resolve the data, run (or resume) each experiment, build the
report.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reproduction.report import Report
    from reproduction.runner import Experiment, RunResult

__all__ = ["DATA_SOURCES", "PAPERS", "Paper", "load_paper", "run_paper"]

PAPERS: dict[str, str] = {
    "sketches": "reproduction.experiments.sketches",
    "misra-gries": "reproduction.experiments.misra_gries",
    "linear": "reproduction.experiments.linear",
    "lazy": "reproduction.experiments.lazy",
    "dpsw": "reproduction.experiments.dpsw",
    "intermittent": "reproduction.experiments.intermittent",
}
"""Every paper ``evaluate`` knows (the keys of ``docs/algorithms.md``) and the module that
declares its :class:`Paper` as ``PAPER``."""

DATA_SOURCES = ("flights", "words")
"""Real data a paper may read, fetched (or found in the cache) before its experiments run."""


@dataclass(frozen=True)
class Paper:
    """A paper's experiment table: everything :func:`run_paper` needs to reproduce it.

    Parameters
    ----------
    modes
        Configuration per scale (``"smoke"``, ``"quick"``, ``"full"``), as for
        :func:`~reproduction.runner.select_mode`.
    experiments
        ``experiments(config, [flights_kind], [words])``: the experiments to run, a sequence
        (each table keyed by its experiment's name) or a mapping from table key to experiment.
        ``flights_kind`` is passed when ``data`` has ``"flights"`` (``None``, ``"sample"`` or
        ``"full"``); ``words`` (whether the word-frequency table is usable) when it has
        ``"words"``.
    report
        ``report(tables, config, out_dir, **data)``: the report built from the result tables.
        ``data`` holds ``flights_kind`` and ``flights_note`` with ``"flights"``, ``words_note``
        with ``"words"``.
    data
        The real data the experiments read, among :data:`DATA_SOURCES`.
    timed
        Names of experiments whose cells measure time: they run one cell at a time, so two timed
        cells never share the cores.
    """

    modes: Mapping[str, Any]
    experiments: Callable[..., Sequence[Experiment] | Mapping[str, Experiment]]
    report: Callable[..., Report]
    data: tuple[str, ...] = ()
    timed: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.data) - set(DATA_SOURCES))
        if unknown:
            raise ValueError(f"data must be among {DATA_SOURCES}, got {unknown}")


def load_paper(name: str) -> Paper:
    """The :class:`Paper` of ``name``, one of :data:`PAPERS` (its module is imported now).

    Raises
    ------
    ValueError
        If ``name`` is not one of :data:`PAPERS`.
    """
    if name not in PAPERS:
        raise ValueError(f"unknown paper {name!r}; choose from {', '.join(PAPERS)}")
    return importlib.import_module(PAPERS[name]).PAPER


def run_paper(
    paper: Paper,
    mode: str,
    out_dir: str | Path,
    *,
    workers: int = 1,
    progress: bool | None = None,
    offline: bool = False,
) -> tuple[Report, dict[str, RunResult]]:
    """Run (or resume) a paper's experiments at ``mode`` scale and build its report.

    Results are cached in ``out_dir/<experiment>.parquet``: a second run only rebuilds the
    report, and an interrupted run resumes where it stopped.

    Parameters
    ----------
    paper
        The paper's experiment table.
    mode
        One of ``paper.modes``.
    out_dir
        Where the result tables and the report's figures go.
    workers
        Worker processes for the experiments that are not timed (1 or 2).
    progress
        Show a progress bar (``None``: when stderr is a terminal).
    offline
        Never fetch data from a package registry: the cache or the bundled sample only.

    Returns
    -------
    (Report, dict)
        The report (written by :func:`~reproduction.report.write_html`) and the runner's result
        of each experiment, under the key its table has in the report.
    """
    # Imported here: the command line imports this module for PAPERS, and `beam-dpsketch --help`
    # should not load the data and runner modules.
    from reproduction import datasets
    from reproduction.runner import run_experiment, select_mode

    config = select_mode(paper.modes, mode)
    start = time.perf_counter()
    arguments: list[Any] = []
    data: dict[str, Any] = {}
    if "flights" in paper.data:
        kind, note = datasets.resolve_flights(config.flights, config.flights_rows, offline)
        arguments.append(kind)
        data.update(flights_kind=kind, flights_note=note)
    if "words" in paper.data:
        words_note = datasets.resolve_words(offline) if "words" in config.datasets else ""
        arguments.append(not words_note)
        data.update(words_note=words_note)
    experiments = paper.experiments(config, *arguments)
    if not isinstance(experiments, Mapping):
        experiments = {exp.name: exp for exp in experiments}
    out = Path(out_dir)
    results = {
        key: run_experiment(
            exp, out, workers=1 if exp.name in paper.timed else workers, progress=progress
        )
        for key, exp in experiments.items()
    }
    report = paper.report({key: r.table for key, r in results.items()}, config, out, **data)
    report.runtime_s = time.perf_counter() - start
    return report, results
