"""Experiment runner: a declared grid of cells, cached and resumable results in a tidy table.

An :class:`Experiment` declares a parameter grid, base seeds, a number of trials, the metric
names, and a function ``func(params, seed) -> {metric: value}``. :func:`run_experiment` computes
every cell (one parameter combination x one base seed x one trial) that is not already stored,
and writes one row per cell to ``<out>/<name>.parquet`` (and a CSV copy) with the parameters,
seeds, metrics, the library version and the experiment version.

Caching and resuming
    A cell is identified by ``cell_key``: the sha256 of a canonical JSON encoding of the
    experiment name, its ``version``, the parameters, the base seed and the trial (never Python's
    salted built-in ``hash``). Re-running skips every cell whose key is stored; adding a grid value runs
    only the new cells; bumping ``version`` (do it when the experiment's code changes) recomputes
    everything. The library version is recorded in each row but is not part of the key, so a
    library upgrade alone does not discard results. Each finished cell is appended at once to
    ``<name>.journal.jsonl``, so an interrupted run loses at most the cells in flight; the
    journal is folded into the Parquet file at the end.

Seeds
    The seed passed to ``func`` depends only on the base seed and the trial, not on the other
    parameters: every cell of one trial sees the same data (common random numbers), which makes
    curves across the grid smoother for the same compute. Derived with sha256, in ``[0, 2**32)``,
    so it is also a valid sketch hash seed.

Parallelism
    ``workers=2`` runs cells in a ``ProcessPoolExecutor`` (spawn context, at most 2 processes:
    the machine has 2 cores shared with others). ``func`` must then be a module-level function.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

__all__ = [
    "MAX_WORKERS",
    "Cell",
    "Experiment",
    "RunResult",
    "derive_seed",
    "library_version",
    "load_results",
    "run_experiment",
    "select_mode",
    "stable_hash",
]

MAX_WORKERS = 2
"""Upper bound on worker processes (2 cores on the project's machines)."""

_META_COLUMNS = ("experiment", "experiment_version", "library_version", "cell_key")
_CELL_COLUMNS = ("seed", "trial", "cell_seed")
_TAIL_COLUMNS = ("elapsed_s", "finished_at")
_RESERVED = frozenset(_META_COLUMNS + _CELL_COLUMNS + _TAIL_COLUMNS)

MetricFn = Callable[[Mapping[str, Any], int], Mapping[str, Any]]
_Config = TypeVar("_Config")


def library_version() -> str:
    """The installed ``beam-dpsketch`` version, or ``"unknown"`` when running from a bare tree."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("beam-dpsketch")
    except PackageNotFoundError:
        return "unknown"


def _canonical(value: Any) -> Any:
    """JSON-ready canonical form: numpy scalars to Python, tuples to lists, finite floats only."""
    if isinstance(value, np.generic):
        value = value.item()  # numpy scalar -> the Python value it equals
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"parameter values must be finite, got {value}")
        # Kept as a float: width=1024 and width=1024.0 are different parameters (and columns
        # of different types), so they hash differently on purpose.
        return value
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    raise TypeError(
        f"parameter values must be None, bool, int, float, str or lists of these, "
        f"got {type(value).__name__}"
    )


def stable_hash(obj: Any) -> str:
    """sha256 hex digest of the canonical JSON of ``obj`` (sorted keys, no whitespace)."""
    text = json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def derive_seed(seed: int, trial: int) -> int:
    """The seed a trial's cells receive: 32 bits of ``sha256(["trial-seed", seed, trial])``."""
    return int(stable_hash(["trial-seed", int(seed), int(trial)])[:8], 16)


@dataclass(frozen=True)
class Cell:
    """One unit of work: a parameter combination, a base seed and a trial."""

    params: Mapping[str, Any]
    seed: int
    trial: int
    cell_seed: int
    key: str


@dataclass(frozen=True)
class Experiment:
    """A declared experiment: a grid, seeds, trials and a function returning metrics.

    Parameters
    ----------
    name
        Identifier, also the results' file stem (letters, digits, ``-`` and ``_``).
    func
        ``func(params, seed) -> {metric: number}``; ``seed`` is the cell's derived seed
        (:func:`derive_seed`). Must be a module-level function when run with 2 workers.
    grid
        Either a mapping ``{param: [values...]}`` (its Cartesian product, in declaration order)
        or an explicit sequence of parameter dicts (for grids that are not products).
    metrics
        The metric names ``func`` returns, in column order. Returning a missing or an
        undeclared metric is an error, so the table's columns are always the declared ones.
    seeds
        Base seeds.
    trials
        Trials per base seed.
    version
        Bump when ``func`` changes meaning: it is part of every cell key.
    description
        One line for reports.
    """

    name: str
    func: MetricFn
    grid: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]]
    metrics: Sequence[str]
    seeds: Sequence[int] = (0,)
    trials: int = 1
    version: str = "1"
    description: str = ""
    _param_names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise ValueError(
                f"name must be non-empty letters, digits, '-' or '_', got {self.name!r}"
            )
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise ValueError(f"trials must be a positive int, got {self.trials!r}")
        if not self.seeds:
            raise ValueError("seeds must not be empty")
        if not self.metrics or len(set(self.metrics)) != len(self.metrics):
            raise ValueError("metrics must be a non-empty list of distinct names")
        names: list[str] = []
        for combo in self._combos():
            for k in combo:
                if k not in names:
                    names.append(k)
        clash = (set(names) | set(self.metrics)) & _RESERVED
        if clash or set(names) & set(self.metrics):
            raise ValueError(
                f"parameter and metric names must be distinct and avoid the reserved "
                f"{sorted(_RESERVED)}; clashing: {sorted(clash or set(names) & set(self.metrics))}"
            )
        object.__setattr__(self, "_param_names", tuple(names))

    @property
    def param_names(self) -> tuple[str, ...]:
        """Parameter names in column order."""
        return self._param_names

    @property
    def columns(self) -> list[str]:
        """Columns of the tidy results table, in order."""
        return [
            *_META_COLUMNS,
            *self.param_names,
            *_CELL_COLUMNS,
            *self.metrics,
            *_TAIL_COLUMNS,
        ]

    def _combos(self) -> list[dict[str, Any]]:
        if isinstance(self.grid, Mapping):
            keys = list(self.grid)
            for k in keys:
                if isinstance(self.grid[k], str | bytes) or not isinstance(self.grid[k], Sequence):
                    raise ValueError(f"grid[{k!r}] must be a sequence of values")
            return [
                dict(zip(keys, values, strict=True))
                for values in itertools.product(*(self.grid[k] for k in keys))
            ]
        combos = [dict(c) for c in self.grid]
        if not combos:
            raise ValueError("grid must not be empty")
        return combos

    def cells(self) -> list[Cell]:
        """Every cell, in grid order, then seed, then trial."""
        out = []
        for params in self._combos():
            canon = _canonical(params)
            for seed in self.seeds:
                for trial in range(self.trials):
                    key = stable_hash(
                        {
                            "experiment": self.name,
                            "version": self.version,
                            "params": canon,
                            "seed": int(seed),
                            "trial": trial,
                        }
                    )
                    out.append(Cell(params, int(seed), trial, derive_seed(seed, trial), key))
        return out


@dataclass(frozen=True)
class RunResult:
    """What :func:`run_experiment` did and the resulting table (the current grid's cells)."""

    table: pa.Table
    computed: int
    cached: int
    parquet_path: Path
    csv_path: Path


def _paths(out_dir: Path, name: str) -> tuple[Path, Path, Path]:
    return out_dir / f"{name}.parquet", out_dir / f"{name}.csv", out_dir / f"{name}.journal.jsonl"


def _read_rows(parquet: Path, journal: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    if parquet.is_file():
        for row in pq.read_table(parquet).to_pylist():
            rows[row["cell_key"]] = row
    if journal.is_file():
        with open(journal, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash: that cell simply runs again
                rows[row["cell_key"]] = row
    return rows


def load_results(out_dir: str | os.PathLike[str], name: str) -> pa.Table | None:
    """All stored rows of experiment ``name`` in ``out_dir`` (Parquet plus journal), or None."""
    parquet, _, journal = _paths(Path(out_dir), name)
    rows = _read_rows(parquet, journal)
    return pa.Table.from_pylist(list(rows.values())) if rows else None


def _call(func: MetricFn, params: Mapping[str, Any], seed: int) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    result = func(dict(params), seed)
    return dict(result), time.perf_counter() - start


def _validate(exp: Experiment, result: Mapping[str, Any]) -> dict[str, float]:
    missing = [m for m in exp.metrics if m not in result]
    extra = [m for m in result if m not in exp.metrics]
    if missing or extra:
        raise ValueError(
            f"experiment {exp.name!r} returned metrics that do not match its declaration: "
            f"missing {missing}, undeclared {extra}"
        )
    out = {}
    for m in exp.metrics:
        v = result[m]
        try:
            out[m] = float(v) if v is not None else math.nan
        except (TypeError, ValueError):
            raise ValueError(f"metric {m!r} must be a number, got {v!r}") from None
    return out


def _progress_bar(total: int, desc: str, progress: bool | None) -> Any:
    if progress is False or total == 0:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress:
            raise ImportError(
                "a progress bar needs the 'tqdm' package: pip install 'tqdm>=4.60' "
                "(or pass progress=False)"
            ) from None
        return None
    if progress is None and not sys.stderr.isatty():
        return None
    return tqdm(total=total, desc=desc, unit="cell", file=sys.stderr)


def _write_table(exp: Experiment, rows: list[dict[str, Any]], parquet: Path, csv: Path) -> None:
    table = _to_table(exp, rows)
    tmp = parquet.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, parquet)
    tmp = csv.with_suffix(".csv.tmp")
    pacsv.write_csv(table, tmp)
    os.replace(tmp, csv)


def _to_table(exp: Experiment, rows: list[dict[str, Any]]) -> pa.Table:
    # Known columns first, in declared order; columns of older grids (other params) follow.
    cols = list(exp.columns)
    for row in rows:
        for k in row:
            if k not in cols:
                cols.append(k)
    try:
        return pa.Table.from_pylist([{c: row.get(c) for c in cols} for row in rows])
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"results of {exp.name!r} do not form a table: {exc}") from None


def select_mode(modes: Mapping[str, _Config], mode: str) -> _Config:
    """The configuration of a paper (its ``MODES``) for scale ``mode``.

    Raises
    ------
    ValueError
        If ``mode`` is not one of ``modes``.
    """
    if mode not in modes:
        raise ValueError(f"mode must be one of {sorted(modes)}, got {mode!r}")
    return modes[mode]


def run_experiment(
    exp: Experiment,
    out_dir: str | os.PathLike[str],
    *,
    workers: int = 1,
    progress: bool | None = None,
) -> RunResult:
    """Compute the cells of ``exp`` not already stored in ``out_dir``; return the tidy table.

    Parameters
    ----------
    exp
        The experiment.
    out_dir
        Directory of ``<name>.parquet``, ``<name>.csv`` and the in-progress journal.
    workers
        1 (in process) or 2 (separate processes); larger values are capped at
        :data:`MAX_WORKERS`.
    progress
        Show a tqdm bar: ``True`` always (tqdm required), ``False`` never, ``None`` when stderr is
        a terminal and tqdm is installed.

    Returns
    -------
    RunResult
        ``table`` holds one row per cell of the current grid (columns :attr:`Experiment.columns`).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    workers = min(workers, MAX_WORKERS)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parquet, csv, journal = _paths(out, exp.name)
    stored = _read_rows(parquet, journal)
    cells = exp.cells()
    todo = [c for c in cells if c.key not in stored]
    version = library_version()

    def make_row(cell: Cell, metrics: dict[str, float], elapsed: float) -> dict[str, Any]:
        row: dict[str, Any] = {
            "experiment": exp.name,
            "experiment_version": exp.version,
            "library_version": version,
            "cell_key": cell.key,
        }
        row.update({k: _canonical(cell.params.get(k)) for k in exp.param_names})
        row.update({"seed": cell.seed, "trial": cell.trial, "cell_seed": cell.cell_seed})
        row.update(metrics)
        row["elapsed_s"] = elapsed
        row["finished_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        return row

    bar = _progress_bar(len(todo), exp.name, progress)
    try:
        with open(journal, "a", encoding="utf-8") as jf:

            def record(cell: Cell, result: dict[str, Any], elapsed: float) -> None:
                row = make_row(cell, _validate(exp, result), elapsed)
                stored[cell.key] = row
                jf.write(json.dumps(row) + "\n")
                jf.flush()
                if bar is not None:
                    bar.update(1)

            if workers == 1 or len(todo) <= 1:
                for cell in todo:
                    record(cell, *_call(exp.func, cell.params, cell.cell_seed))
            else:
                try:
                    pickle.dumps(exp.func)
                except (pickle.PicklingError, AttributeError, TypeError) as exc:
                    raise ValueError(
                        f"workers=2 needs a module-level experiment function: {exc}"
                    ) from None
                ctx = multiprocessing.get_context("spawn")
                with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
                    futures = {pool.submit(_call, exp.func, c.params, c.cell_seed): c for c in todo}
                    try:
                        for fut in concurrent.futures.as_completed(futures):
                            record(futures[fut], *fut.result())
                    except BaseException:
                        pool.shutdown(cancel_futures=True)
                        raise
    finally:
        if bar is not None:
            bar.close()
    # Fold the journal into the Parquet/CSV files; rows of cells no longer in the grid are kept,
    # so shrinking and re-growing a grid does not recompute them.
    _write_table(exp, list(stored.values()), parquet, csv)
    journal.unlink(missing_ok=True)
    current = [stored[c.key] for c in cells]
    table = _to_table(exp, current).select(exp.columns)
    return RunResult(table, len(todo), len(cells) - len(todo), parquet, csv)
