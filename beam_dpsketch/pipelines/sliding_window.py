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

Guarantee: for **replace-one** neighbours only, as printed in the title line and by
``--explain``: one row's key changed, every row position fixed (count-based) or that row's time
fixed (time-based). Adding or removing a row is not covered: it shifts every later position
(count-based), or it can add query times (time-based: queries run to the last step holding a row).
The row count in the title is public under this relation.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Sequence
from typing import Any

import apache_beam as beam

from beam_dpsketch.pipelines.options import (
    add_format_argument,
    add_input_arguments,
    add_privacy_arguments,
    budget_from_args,
    convert_query_keys,
    noise_source_from_args,
    ordered_input,
    plot_series,
    print_records,
    read_candidates,
    run_and_collect,
)
from beam_dpsketch.transforms.readers import infer_input_format
from beam_dpsketch.transforms.sliding import DPSlidingWindowFrequencies

__all__ = ["register", "run_sliding_window"]

# The neighbouring relation of the printed guarantee (the transform's, in terms of rows): the
# row count is public under it, never add/remove (DPSlidingWindowFrequencies.neighbouring_relation).
_GUARANTEE = {
    "position": "replace-one neighbours (one row's key changed, every row position fixed)",
    "time": "replace-one neighbours (one row's key changed, its time fixed)",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sliding-window`` subcommand."""
    sub = subparsers.add_parser(
        "sliding-window",
        help="DP frequencies / heavy hitters over a sliding window (DPSW-Sketch)",
        description=(
            "Estimate, every --every steps, the frequency of --query keys (or the heavy hitters "
            "among --candidates) over the last --window positions (file order) or time units "
            "(--time-column) with DPSW-Sketch (spec dpsw-sketch; Wang, Wang and Chen, KDD 2024). "
            "rho-zCDP / (epsilon, delta)-DP over the whole stream, however many queries, for "
            "replace-one neighbours only: one row's key changed, every row position fixed "
            "(file order) or that row's time fixed (--time-column); adding or removing a row is "
            "not covered."
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
    win.add_argument(
        "--origin",
        type=_origin,
        default=0.0,
        help="public start of the time axis: event time of step 1, in seconds since the epoch "
        "or as an ISO date/time in UTC such as 2001-01-01 (default 0, i.e. 1970-01-01); queries "
        "run at origin + every, origin + 2 every, ...",
    )
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
    add_privacy_arguments(sub.add_argument_group("privacy"), delta="required", rho=True)
    add_format_argument(sub)
    sub.add_argument("--plot", metavar="PATH.png", help="plot the estimates over time")
    sub.set_defaults(run=run_sliding_window)


class _ReleaseAndCount(beam.PTransform):
    """``transform`` over the reader's batches, tagged ``("release", record)``, plus one
    ``("rows", n)`` record: the number of rows read (a public count, spec §6.2 A1)."""

    def __init__(self, transform: DPSlidingWindowFrequencies) -> None:
        super().__init__()
        self._transform = transform

    def explain(self) -> str:
        return self._transform.explain()

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        released = (
            batches
            | "Release" >> self._transform
            | "TagRelease" >> beam.Map(lambda r: ("release", r))
        )
        rows = (
            batches
            | "BatchRows" >> beam.Map(lambda b: len(b[1]))
            | "SumRows" >> beam.CombineGlobally(sum)
            | "TagRows" >> beam.Map(lambda n: ("rows", n))
        )
        return (released, rows) | "Outputs" >> beam.Flatten()


def _origin(text: str) -> float:
    """``--origin``: seconds since the epoch, or an ISO date/time (UTC unless it names a zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not seconds or an ISO date/time: {text!r} (e.g. 2001-01-01 or 978307200)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def run_sliding_window(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``sliding-window`` subcommand; returns the exit status."""
    hh = args.heavy_hitters is not None
    if bool(args.query) == hh:
        raise ValueError("pass either --query KEY ... or --heavy-hitters GAMMA --candidates FILE")
    if hh != bool(args.candidates):
        raise ValueError("--heavy-hitters GAMMA and --candidates FILE go together")
    if args.hh_slack is not None and not hh:
        raise ValueError("--hh-slack applies with --heavy-hitters only")
    budget = budget_from_args(args, pure=False)
    if args.column is None and (args.input_format or infer_input_format(args.input)) != "text":
        raise ValueError("--column is required except for text input")
    # One reader in one process: the global sequencer of count-based mode (spec §6.2 A1).
    reader = ordered_input(args)
    raw = args.query or read_candidates(args.candidates)
    wanted = convert_query_keys(raw, reader.key_type, args.column)
    time_mode = args.time_column is not None
    options: dict[str, Any] = {}
    if args.block is not None:
        options = {"block": args.block, "alpha": args.alpha}
        preset = None
    else:
        preset = args.preset
        if preset == "theory":
            options = {"alpha": args.alpha}
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
        time_unit=args.time_unit if time_mode else 1,
        origin=args.origin if time_mode else 0,
        preset=preset,
        noise_source=noise_source_from_args(args),
        label="sliding-window",
        **options,
    )
    # The reader's (position, keys, seconds) batches go to the transform as they are.
    output, seconds = run_and_collect(
        reader, _ReleaseAndCount(transform), beam_args, explain=args.explain
    )
    (n_rows,) = [n for tag, n in output if tag == "rows"]
    if not n_rows:
        raise ValueError(f"{args.input} has no rows")
    released = sorted((r for tag, r in output if tag == "release"), key=lambda r: r[0])
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
        f"(rho = {transform.rho:.6g}) for {_GUARANTEE[unit]}; {n_rows} rows; {seconds:.2f} s"
    )
    if hh and not records:
        title += f"; no heavy hitters at any of the {len(counts)} query times"
    print_records(records, [unit, "key", "estimate"], args.format, title=title)
    if args.plot:
        series: dict[Any, tuple[list, list]] = {}
        for r in records:
            xs, ys = series.setdefault(r["key"], ([], []))
            xs.append(r[unit])
            ys.append(r["estimate"])
        plot_series(
            args.plot,
            series,
            xlabel=unit,
            ylabel="estimated window frequency",
            title=title.lstrip("# "),
        )
    return 0
