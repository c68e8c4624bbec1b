"""``beam-dpsketch sliding-window``: DP frequencies or heavy hitters over a sliding window.

Runs :class:`~beam_dpsketch.transforms.sliding.DPSlidingWindowFrequencies` (DPSW-Sketch, spec
dpsw-sketch §6.5) over one column of a file and prints, every ``--every`` steps, the estimated
window frequency of each ``--query`` key, or the heavy hitters among the public ``--candidates``.

Steps:

* **Count-based** (no ``--time-column``): the position of a row is its 1-based rank in **file
  order** (files of a glob in sorted path order, rows in file order). The reader is the global
  sequencer of spec §6.2 A1: it runs in one process, so positions are gap-free and public.
* **Time-based** (``--time-column``): the step of a row is
  ``floor((time - origin) / time_unit) + 1`` of its numeric (seconds) or timestamp value; rows
  need not be sorted (segments are assigned by event time). ``--window`` and ``--every`` are in
  time units.

Budget: ``--epsilon`` with ``--delta`` (converted to ``rho`` by spec §1.3 Eq. 1), or ``--rho``;
one charge for the whole stream, however many queries.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.options import (
    add_format_argument,
    add_input_arguments,
    convert_query_keys,
    print_records,
    run_and_collect,
)
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms.readers import infer_input_format
from beam_dpsketch.transforms.sliding import DPSlidingWindowFrequencies

__all__ = ["read_rows", "register", "run_sliding_window"]

_CHUNK = 4096


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sliding-window`` subcommand."""
    sub = subparsers.add_parser(
        "sliding-window",
        help="DP frequencies / heavy hitters over a sliding window (DPSW-Sketch)",
        description=(
            "Estimate, every --every steps, the frequency of --query keys (or the heavy hitters "
            "among --candidates) over the last --window positions (file order) or time units "
            "(--time-column) with DPSW-Sketch (spec dpsw-sketch; Wang, Wang and Chen, KDD 2024). "
            "rho-zCDP / (epsilon, delta)-DP over the whole stream for event-level substitution "
            "neighbours, however many queries."
        ),
    )
    add_input_arguments(sub)
    win = sub.add_argument_group("window")
    win.add_argument(
        "--time-column",
        metavar="NAME",
        help="event-time column (seconds or timestamps): time-based windows; without it, "
        "positions are the file order",
    )
    win.add_argument("--time-unit", type=float, default=1.0, help="seconds per step (1)")
    win.add_argument("--origin", type=float, default=0.0, help="event time of step 1 (0)")
    win.add_argument("--window", type=int, required=True, help="window W in steps")
    win.add_argument("--every", type=int, required=True, help="query every N steps")
    sk = sub.add_argument_group("sketch")
    sk.add_argument("--width", type=int, default=1024, help="counters per row (1024)")
    sk.add_argument("--depth", type=int, default=3, help="rows (3)")
    sk.add_argument("--seed", type=int, default=0, help="public hash seed (0)")
    sk.add_argument(
        "--preset",
        choices=("paper_experiments", "theory"),
        default="paper_experiments",
        help="paper_experiments (B = W/10, |I| = 3, code split q = 0.8; default) or theory "
        "(B = ceil(sqrt(W)), alpha, paper split); --block overrides both",
    )
    sk.add_argument("--block", type=int, help="explicit block length B (with --alpha)")
    sk.add_argument("--alpha", default="1/2", help="smooth-histogram factor (1/2)")
    q = sub.add_argument_group("queries")
    q.add_argument("--query", nargs="+", action="extend", metavar="KEY", help="keys to estimate")
    q.add_argument(
        "--heavy-hitters", type=float, metavar="GAMMA", help="report keys above GAMMA * W"
    )
    q.add_argument("--candidates", metavar="FILE", help="public candidate keys, one per line")
    q.add_argument("--hh-slack", type=float, help="threshold slack zeta (default e/width)")
    p = sub.add_argument_group("privacy")
    p.add_argument("--epsilon", type=float, help="epsilon (with --delta)")
    p.add_argument("--delta", type=float, help="delta")
    p.add_argument("--rho", type=float, help="zCDP rho (instead of --epsilon/--delta)")
    p.add_argument(
        "--insecure-test-seed",
        type=int,
        metavar="N",
        help="INSECURE: derive the noise key from N (reproducible output, no privacy)",
    )
    p.add_argument("--explain", action="store_true", help="print the privacy accounting first")
    add_format_argument(sub)
    sub.add_argument("--plot", metavar="PATH.png", help="plot the estimates over time")
    sub.set_defaults(run=run_sliding_window)


def _budget(args: argparse.Namespace) -> PrivacyBudget:
    if args.rho is not None:
        if args.epsilon is not None or args.delta is not None:
            raise ValueError("pass either --rho or --epsilon with --delta")
        return PrivacyBudget.zcdp(args.rho)
    if args.epsilon is None or args.delta is None:
        raise ValueError(
            "--epsilon and --delta are both required (DPSW-Sketch is Gaussian: no pure DP), "
            "or pass --rho"
        )
    return PrivacyBudget.approx(args.epsilon, args.delta)


def _read_table(path: str, fmt: str, columns: list[str], key_column: str) -> pa.Table:
    with FileSystems.open(path) as f:
        if fmt == "parquet":
            return pq.read_table(f, columns=columns)
        if fmt == "csv":
            # Keys stay strings ("007" is not 7), as with every CSV reader of the library;
            # the time column is typed by pyarrow's inference.
            options = pa_csv.ConvertOptions(
                include_columns=columns,
                column_types={key_column: pa.string()},
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            )
            return pa_csv.read_csv(f, convert_options=options)
        return pa_json.read_json(f).select(columns)


def _times(column: pa.ChunkedArray, name: str, path: str) -> np.ndarray:
    typ = column.type
    if pa.types.is_timestamp(typ):
        micros = pc.cast(column, pa.timestamp("us", tz=typ.tz)).cast(pa.int64())
        return micros.to_numpy().astype(np.float64) / 1e6
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        return column.to_numpy().astype(np.float64)
    raise TypeError(
        f"time column {name!r} of {path} has type {typ}: it must hold numbers (seconds) or "
        "timestamps"
    )


def read_rows(
    pattern: str,
    column: str,
    input_format: str | None = None,
    time_column: str | None = None,
    key_type: str | None = None,
) -> tuple[list[Any], np.ndarray | None]:
    """Keys (in file order) and, with ``time_column``, their event times in seconds.

    Files of a glob are read in sorted path order; this single reader is the global sequencer
    of count-based mode (spec dpsw-sketch §6.2 A1). Missing values raise ``TypeError`` naming the
    column; text input (one key per line) has no time column.
    """
    fmt = input_format or infer_input_format(pattern)
    if time_column is not None and time_column == column:
        raise ValueError("--time-column must differ from --column")
    matches = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    if not matches:
        raise FileNotFoundError(f"no file matches {pattern}")
    keys: list[Any] = []
    times: list[np.ndarray] = []
    for path in matches:
        if fmt == "text":
            if time_column is not None:
                raise ValueError("--time-column needs CSV, Parquet or JSON Lines input")
            with FileSystems.open(path) as f:
                keys += [line.rstrip("\r\n") for line in f.read().decode("utf-8").splitlines()]
            continue
        columns = [column] + ([time_column] if time_column else [])
        try:
            table = _read_table(path, fmt, columns, column)
        except (KeyError, pa.ArrowInvalid) as exc:
            raise ValueError(f"cannot read columns {columns} of {path}: {exc}") from None
        for name in columns:
            if name not in table.column_names:
                raise ValueError(f"{path} has no column {name!r}; it has {table.column_names}")
            if table.column(name).null_count:
                raise TypeError(f"column {name!r} of {path} has missing values (None)")
        keys += table.column(column).to_pylist()
        if time_column:
            times.append(_times(table.column(time_column), time_column, path))
    if key_type == "int":
        try:
            keys = [int(k) for k in keys]
        except ValueError as exc:
            raise ValueError(f"column {column!r}: {exc}") from None
    elif key_type == "str":
        keys = [str(k) for k in keys]
    return keys, (np.concatenate(times) if time_column else None)


def _chunks(keys: list[Any], times: np.ndarray | None) -> list[tuple[int, list, list | None]]:
    """``(first position, keys, times)`` chunks: few, large elements for ``beam.Create``."""
    out = []
    for s in range(0, len(keys), _CHUNK):
        t = None if times is None else times[s : s + _CHUNK].tolist()
        out.append((s + 1, keys[s : s + _CHUNK], t))
    return out


def _rows(chunk: tuple[int, list, list | None]):
    first, keys, times = chunk
    if times is None:
        yield from zip(range(first, first + len(keys)), keys, strict=True)
    else:
        yield from zip(times, keys, strict=True)


def _read_candidates(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        keys = [line.rstrip("\n") for line in f if line.strip()]
    if not keys:
        raise ValueError(f"--candidates file {path} has no keys")
    return keys


def run_sliding_window(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``sliding-window`` subcommand; returns the exit status."""
    hh = args.heavy_hitters is not None
    if bool(args.query) == hh:
        raise ValueError("pass either --query KEY ... or --heavy-hitters GAMMA --candidates FILE")
    if hh != bool(args.candidates):
        raise ValueError("--heavy-hitters GAMMA and --candidates FILE go together")
    if args.hh_slack is not None and not hh:
        raise ValueError("--hh-slack applies with --heavy-hitters only")
    budget = _budget(args)
    if args.column is None and (args.input_format or infer_input_format(args.input)) != "text":
        raise ValueError("--column is required except for text input")
    keys, times = read_rows(
        args.input, args.column, args.input_format, args.time_column, args.key_type
    )
    if not keys:
        raise ValueError(f"{args.input} has no rows")
    key_type = args.key_type or (type(keys[0]).__name__ if type(keys[0]) in (int, str) else None)
    raw = args.query or _read_candidates(args.candidates)
    wanted = convert_query_keys(raw, key_type, args.column)
    time_mode = args.time_column is not None
    options: dict[str, Any] = {}
    if args.block is not None:
        options = {"block": args.block, "alpha": args.alpha}
        preset = None
    else:
        preset = args.preset
        if preset == "theory":
            options = {"alpha": args.alpha}
    source = (
        NoiseSource.insecure_for_tests(args.insecure_test_seed)
        if args.insecure_test_seed is not None
        else NoiseSource()
    )
    transform = DPSlidingWindowFrequencies(
        args.window,
        budget,
        every=args.every,
        width=args.width,
        depth=args.depth,
        seed=args.seed,
        query_keys=None if hh else wanted,
        candidates=wanted if hh else None,
        gamma=args.heavy_hitters,
        hh_slack=args.hh_slack,
        mode="time" if time_mode else "count",
        key_fn=lambda r: r[1],
        time_fn=(lambda r: r[0]) if time_mode else None,
        time_unit=args.time_unit if time_mode else 1,
        origin=args.origin if time_mode else 0,
        preset=preset,
        noise_source=source,
        label="sliding-window",
        **options,
    )
    source_t = beam.Create(_chunks(keys, times), reshuffle=False) | beam.FlatMap(_rows)
    released, seconds = run_and_collect(source_t, transform, beam_args, explain=args.explain)
    released.sort(key=lambda r: r[0])
    unit = "position" if not time_mode else "time"
    if hh:
        records = [
            {unit: t, "key": k, "estimate": round(float(v), 2)}
            for t, pairs in released
            for k, v in pairs
        ]
        counts = [{unit: t, "heavy_hitters": len(pairs)} for t, pairs in released]
    else:
        order = {k: i for i, k in enumerate(wanted)}
        released.sort(key=lambda r: (r[0], order[r[1]]))
        records = [{unit: t, "key": k, "estimate": round(float(v), 2)} for t, k, v in released]
        counts = []
    title = (
        f"# DPSW-Sketch over column {args.column!r} of {args.input}: window {args.window} "
        f"{'time units' if time_mode else 'positions'}, queries every {args.every}; {budget} "
        f"(rho = {transform.rho:.6g}); {len(keys)} rows; {seconds:.2f} s"
    )
    if hh and not records:
        title += f"; no heavy hitters at any of the {len(counts)} query times"
    print_records(records, [unit, "key", "estimate"], args.format, title=title)
    if args.plot:
        _plot(args.plot, records, unit, title)
    return 0


def _plot(path: str, records: list[dict[str, Any]], unit: str, title: str) -> None:
    from beam_dpsketch.evaluation.report import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series: dict[Any, tuple[list, list]] = {}
    for r in records:
        xs, ys = series.setdefault(r["key"], ([], []))
        xs.append(r[unit])
        ys.append(r["estimate"])
    for key, (xs, ys) in list(series.items())[:20]:
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=str(key))
    ax.set_xlabel(unit)
    ax.set_ylabel("estimated window frequency")
    ax.set_title(title.lstrip("# ")[:90], fontsize=8)
    if series:
        ax.legend(fontsize=7, ncol=2 if len(series) > 10 else 1)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
