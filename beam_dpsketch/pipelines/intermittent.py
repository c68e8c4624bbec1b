"""``beam-dpsketch intermittent``: answer declared query batches at their times with a DP sketch.

Runs :class:`~beam_dpsketch.transforms.intermittent.DPIntermittentQueries` (use-and-keep cell
noise: Yildirim, Kaya, Aydin and Erentug, "Differentially Private Frequency Sketches for
Intermittent Queries on Large Data Streams", Section IV.B, Algorithm 4, Theorem 4) over one key
column and writes one estimate per query: ``epsilon``-DP in total for every batch (pure DP,
element level), under the neighbouring relation of the clock:

* With ``--time-column`` each row's time is that column (numbers, e.g. seconds, or timestamps):
  the ``event_time`` clock, **add/remove of one row**, every other row's time unchanged.
* Otherwise a row's time is its **position**: 1 for the first row, in file order (the files of a
  glob in sorted path order). Removing one row renumbers every later row, so positions support
  only **replacement of one row's key** (every position unchanged); the ``positions`` clock
  calibrates for that (noise of scale ``2 depth / epsilon``,
  :class:`~beam_dpsketch.transforms.intermittent.DPIntermittentQueries`).

A query at time ``t`` is answered with the rows whose time is ``<= t`` (the rows in
``(t_{k-1}, t_k]`` are the increment of batch ``k``). The output's ``guarantee`` states it.

Queries file (``--queries``), declared independently of the data:

* CSV with a header that has the columns ``time`` and ``key``: one query per row;
* JSON Lines: one object per line, ``{"time": t, "key": k}`` (one query) or
  ``{"time": t, "keys": [k1, k2, ...]}`` (one batch per line).

Queries with the same time form one batch. Keys are converted to the data's key type (CSV data
and text give string keys unless ``--key-type int``).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_dpsketch.pipelines.arguments import accept_negative_numbers, option_strings
from beam_dpsketch.pipelines.inputs import (
    TIME_COLUMN_MEMORY,
    add_input_arguments,
    convert_query_keys,
    ordered_input,
)
from beam_dpsketch.pipelines.output import (
    ORDER,
    CliRelease,
    add_output_arguments,
    check_output_arguments,
    guarantee_of,
    plain,
    plot_figure,
    run_release,
    write_release,
)
from beam_dpsketch.pipelines.release_arguments import (
    add_privacy_arguments,
    budget_from_args,
    noise_source_from_args,
)
from beam_dpsketch.transforms.intermittent import (
    SKETCHES,
    DPIntermittentQueries,
    QuerySchedule,
)

__all__ = [
    "answer_rows",
    "exact_counts",
    "exact_counts_of_batches",
    "read_queries",
    "register",
    "run_intermittent",
]


#: Default counters per row. Collisions shrink with the width while run time and peak memory
#: hardly move (the release's memory follows the queries): at 2,048 a 2 M-row city stream read
#: a key of count 239 as 20-74 and an absent key as about 300 (eps 1); at 65,536 both were
#: within the noise, at the same run time and peak memory.
INTERMITTENT_WIDTH = 65536


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``intermittent`` subcommand."""
    sub = subparsers.add_parser(
        "intermittent",
        help="answer query batches at declared times with a DP Count Sketch (use-and-keep)",
        description=(
            "Answer the query batches of a --queries file, each at its time, with a "
            "differentially private Count Sketch (or Count-Min) whose cells keep their noise "
            "(use-and-keep, Yildirim et al., Section IV.B, Algorithm 4). "
            "The whole run is epsilon-DP (pure, element level) however many batches are "
            "answered: under add/remove of one row with --time-column (event times), under "
            "replacement of one row's key without it (times are row positions, 1 = first row, in "
            "file order, and removing a row would renumber the later ones). Queries file: CSV "
            "with columns time,key (one query per row), or JSON Lines "
            'with {"time": t, "key": k} or {"time": t, "keys": [...]} per line; equal times '
            "form one batch. Queries must not be chosen from the data. Memory does not grow "
            "with the input rows or distinct keys; it grows with the queries, which the release "
            "answers one row each (about 2.5 KB per query: 200,000 queries take about 680 MB)."
        ),
    )
    accept_negative_numbers(sub)
    add_input_arguments(sub)
    sub.add_argument(
        "--time-column",
        metavar="NAME",
        help=(
            "event-time column (numbers or timestamps): guarantee under add/remove of one row; "
            "default: row position in file order, guarantee under replacement of one row's key"
            + TIME_COLUMN_MEMORY
        ),
    )
    group = sub.add_argument_group("release")
    group.add_argument(
        "--queries", required=True, metavar="FILE", help="query batches (CSV or JSON Lines)"
    )
    group.add_argument("--sketch", choices=tuple(SKETCHES), default="count-sketch")
    group.add_argument(
        "--width",
        type=int,
        default=INTERMITTENT_WIDTH,
        help=f"counters per row ({INTERMITTENT_WIDTH}); a key's estimate carries about "
        "rows/width of other keys' counts, and a wider sketch costs little time or memory",
    )
    group.add_argument("--depth", type=int, default=5, help="rows, odd for Count Sketch (5)")
    group.add_argument("--seed", type=int, default=0, help="public hash seed (0)")
    add_privacy_arguments(group, delta=None)
    add_output_arguments(sub)
    sub.add_argument(
        "--plot",
        metavar="PATH.png",
        help=(
            "DIAGNOSTIC, NOT A DP RELEASE: also compute the exact counts of the queried keys "
            "from the input and plot the absolute and relative error of the answers over query "
            "time; the plot reveals exact counts, so do not publish it"
        ),
    )
    sub.set_defaults(run=run_intermittent, known_options=option_strings(sub))


def _number(value: Any, where: str) -> float | int:
    if isinstance(value, bool):
        raise ValueError(f"{where}: time must be a number, got {value!r}")
    if isinstance(value, int | float):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        pass
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: time must be a number, got {value!r}") from None


def read_queries(path: str) -> list[tuple[float | int, list[Any]]]:
    """``(time, raw keys)`` batches of a queries file (CSV ``time,key`` or JSON Lines).

    Raises ``ValueError`` naming the file and line for a missing column or field, a time that is
    not a number, or a file without queries.
    """
    batches: list[tuple[float | int, list[Any]]] = []
    with open(path, encoding="utf-8", newline="") as f:
        if path.lower().endswith(".csv"):
            reader = csv.DictReader(f)
            missing = {"time", "key"} - set(reader.fieldnames or ())
            if missing:
                raise ValueError(
                    f"--queries {path}: CSV needs the columns time and key, missing "
                    f"{', '.join(sorted(missing))}"
                )
            for line, row in enumerate(reader, start=2):
                batches.append((_number(row["time"], f"{path}:{line}"), [row["key"]]))
        else:
            for line, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                where = f"{path}:{line}"
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{where}: not JSON ({exc.msg})") from None
                if not isinstance(obj, dict) or "time" not in obj:
                    raise ValueError(f'{where}: expected {{"time": t, "key": k}} or "keys": [...]')
                if "keys" in obj:
                    if not isinstance(obj["keys"], list):
                        raise ValueError(f'{where}: "keys" must be a list')
                    keys = obj["keys"]
                elif "key" in obj:
                    keys = [obj["key"]]
                else:
                    raise ValueError(f'{where}: needs "key" or "keys"')
                batches.append((_number(obj["time"], where), keys))
    if not batches:
        raise ValueError(f"--queries file {path} has no queries")
    return batches


def _convert_keys(raw: list[Any], key_type: str | None, column: str | None) -> list[Any]:
    """Query keys in the data's key type (JSON ints stay ints for int data)."""
    if key_type == "int":
        return convert_query_keys([str(k) for k in raw], "int", column)
    return [k if isinstance(k, str) else json.dumps(k) for k in raw]


def _timed_batch(batch: tuple[int, pa.Array, np.ndarray | None]) -> tuple[np.ndarray, Any]:
    """``(times, keys)`` of one ordered batch: event times, or 1-based positions without a
    time column; int keys as an int64 array, others as a list."""
    position, keys, times = batch
    if times is None:
        times = np.arange(position + 1, position + 1 + len(keys), dtype=np.int64)
    if pa.types.is_integer(keys.type):
        return times, keys.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return times, keys.to_pylist()


def _rank_key(time: Any, key: Any) -> str:
    # Numeric times compare by value (a schedule's 100 is an answer's 100.0).
    return json.dumps([float(time), plain(key)])


def answer_rows(
    answer: tuple[Any, Any, Any], rank: Mapping[str, tuple[Any, int]]
) -> Iterator[dict[str, Any]]:
    """The ``time``/``key``/``estimate`` row of one ``(time, key, estimate)`` answer, in batch
    order, then the query order of the schedule (``rank``, by :func:`_rank_key`)."""
    time, key, estimate = answer
    time, key = plain(time), plain(key)
    order = list(rank[_rank_key(time, key)])
    yield {"time": time, "key": key, "estimate": round(float(estimate), 2), ORDER: order}


def exact_counts_of_batches(
    batches: Iterable[tuple[int, pa.Array, np.ndarray | None]],
    queries: Sequence[tuple[Any, Any]],
) -> np.ndarray:
    """:func:`exact_counts` over ordered ``(position, keys, times)`` batches
    (:meth:`~beam_dpsketch.io.ReadOrderedKeys.iter_batches`; a row's time is its
    1-based position when ``times`` is ``None``), holding only the rows of queried keys.

    Not private: for diagnostics only (``--plot``).
    """
    wanted = pa.array(list(dict.fromkeys(key for _, key in queries)))
    keys: list[Any] = []
    times: list[np.ndarray] = []
    for position, batch, seconds in batches:
        if seconds is None:
            seconds = np.arange(position + 1, position + 1 + len(batch), dtype=np.int64)
        hit = pc.is_in(batch, value_set=wanted.cast(batch.type)).to_numpy(zero_copy_only=False)
        keys.extend(batch.filter(pa.array(hit)).to_pylist())
        times.append(np.asarray(seconds)[hit])
    rows = np.concatenate(times) if times else np.empty(0, np.float64)
    return exact_counts(keys, rows, queries)


def exact_counts(
    keys: Sequence[Any], times: np.ndarray, queries: Sequence[tuple[Any, Any]]
) -> np.ndarray:
    """Exact ``f_x(t)``: rows with key ``x`` and time ``<= t``, for each ``(t, x)`` query.

    Not private: for diagnostics only (``--plot``).
    """
    wanted: dict[Any, int] = {}
    for _, key in queries:
        wanted.setdefault(key, len(wanted))
    code = np.fromiter((wanted.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
    hit = code >= 0
    code, t_hit = code[hit], np.asarray(times, dtype=np.float64)[hit]
    order = np.lexsort((t_hit, code))
    code, t_hit = code[order], t_hit[order]
    bounds = np.searchsorted(code, np.arange(len(wanted) + 1))
    out = np.empty(len(queries), dtype=np.int64)
    for i, (t, key) in enumerate(queries):
        j = wanted[key]
        seg = t_hit[bounds[j] : bounds[j + 1]]
        out[i] = int(np.searchsorted(seg, float(t), side="right"))
    return out


def _plot(path: str, records: list[dict[str, Any]], truth: np.ndarray, title: str) -> None:
    times = np.asarray([r["time"] for r in records], dtype=np.float64)
    est = np.asarray([r["estimate"] for r in records], dtype=np.float64)
    abs_err = np.abs(est - truth)
    rel_err = abs_err / np.maximum(truth, 1)
    batch_times = np.unique(times)
    with plot_figure(path, 2, figsize=(8, 6)) as (_, axes):
        for ax, err, name in (
            (axes[0], abs_err, "absolute error"),
            (axes[1], rel_err, "relative error"),
        ):
            ax.scatter(times, err, s=8, alpha=0.4, label="per query")
            ax.plot(
                batch_times,
                [err[times == t].mean() for t in batch_times],
                "o-",
                label="batch mean",
            )
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
        axes[1].set_xlabel("query time")
        axes[0].legend()
        axes[0].set_title(title + "\n(diagnostic: uses exact counts, not a DP release)", fontsize=9)


def run_intermittent(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``intermittent`` subcommand; returns the exit status."""
    check_output_arguments(args)
    if args.plot and not args.plot.lower().endswith(".png"):
        raise ValueError(f"--plot must name a .png file, got {args.plot!r}")
    reader = ordered_input(args)
    raw = read_queries(args.queries)
    batches = [(t, _convert_keys(q, reader.key_type, args.column)) for t, q in raw]
    schedule = QuerySchedule(batches)
    budget = budget_from_args(args)
    # Without a time column the times are row positions, which shift when a row is removed: the
    # transform then calibrates for (and claims) replacement of one row only.
    transform = DPIntermittentQueries(
        args.width,
        args.depth,
        budget,
        queries=schedule,
        clock="event_time" if args.time_column else "positions",
        sketch=args.sketch,
        seed=args.seed,
        noise_source=noise_source_from_args(args),
        label="intermittent",
    )
    source = reader | "TimedBatches" >> beam.Map(_timed_batch)
    # Batch order, then the query order of the schedule.
    rank: dict[str, tuple[Any, int]] = {}
    for t, q in schedule.batches:
        for i, key in enumerate(q):
            rank.setdefault(_rank_key(t, key), (t, i))
    run_ = run_release(
        source,
        transform,
        functools.partial(answer_rows, rank=rank),
        beam_args,
        explain=args.explain,
        known_options=getattr(args, "known_options", ()),
    )
    records = run_.rows
    guarantee, mechanism, calibration = guarantee_of(
        transform, insecure=args.insecure_test_seed is not None
    )
    clock = f"time column {args.time_column!r}" if args.time_column else "row positions"
    parameters: dict[str, Any] = {
        "column": args.column,
        "clock": "event_time" if args.time_column else "positions",
        "time_column": args.time_column,
        "sketch": args.sketch,
        "width": args.width,
        "depth": args.depth,
        "seed": args.seed,
        "batches": len(schedule),
        **calibration,
    }
    release = CliRelease(
        guarantee,
        mechanism,
        parameters,
        ("time", "key", "estimate"),
        records,
        title=(
            f"DP answers of column {args.column!r} of {args.input} at {len(schedule)} batch "
            f"times ({clock}): use-and-keep {args.sketch} {args.depth}x{args.width}"
        ),
    )
    write_release(release, args.format, args.output)
    if args.plot:
        # Diagnostic only: the driver reads the rows again, in the same order, keeping only
        # the rows of queried keys (memory grows with those rows, not with the input).
        queries = [(r["time"], r["key"]) for r in records]
        truth = exact_counts_of_batches(reader.iter_batches(), queries)
        _plot(
            args.plot,
            records,
            truth,
            f"{args.column!r} ({clock}): use-and-keep {args.sketch} {args.depth}x{args.width}, "
            f"{budget}",
        )
        print(f"# wrote {os.path.abspath(args.plot)} (exact counts: not private)", file=sys.stderr)
    return 0
