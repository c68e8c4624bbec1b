"""``beam-dpsketch continual``: a private sketch released continually over an ordered file.

Runs :class:`~beam_dpsketch.transforms.continual.ContinualDPSketch` in the element time model
(one time step per row; spec lazy-sketch §6.4) and prints the time series of noisy estimates of the
``--query`` keys, one row per release (every ``--release-every`` rows and at the horizon ``T``),
optionally as a line plot (``--plot PATH.png``).

Time order
    The time step of a row is its position in the input: files matching ``--input`` in sorted
    path order, rows in file order. With ``--time-column COL`` the rows are instead stably sorted
    by that column (ties keep file order). Either order must be **public** and independent of the
    private values (an ingestion sequence or arrival timestamp, never the key itself). The rows
    are read by one worker to fix the order; ``--time-column`` sorts in memory.

Guarantee
    ``(epsilon, delta)``-DP for the whole time series under **replacement of one row's key**
    (the ``--column`` value), every row's position, and its ``--time-column`` value, public and
    unchanged (Holland, Theorem 2; spec lazy-sketch §1.2, §6.3 item 11). Add/remove of a row is
    not covered: it would shift the time step of every later row. The printed header states it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import apache_beam as beam

from beam_dpsketch.pipelines.options import (
    add_format_argument,
    add_input_arguments,
    add_privacy_arguments,
    budget_from_args,
    convert_query_keys,
    jsonable_key,
    noise_source_from_args,
    ordered_input,
    plot_series,
    print_records,
    run_and_collect,
)
from beam_dpsketch.transforms.continual import (
    CONTINUAL_SKETCHES,
    ELEMENT_RELATION,
    ContinualDPSketch,
)

__all__ = ["register", "run_continual"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``continual`` subcommand."""
    cmd = subparsers.add_parser(
        "continual",
        help="release a DP sketch continually over an ordered file and print the time series",
        description=(
            "Release a differentially private Count-Min sketch or Count Sketch under continual "
            "observation (LazySketch or PunctualSketch; spec lazy-sketch) over the rows of the "
            "input in file order (or sorted by --time-column), one time step per row, and print "
            "the noisy estimate of every --query key after every --release-every rows. The "
            "whole time series is (epsilon, delta)-DP under replacement of one row's key, every "
            "row's position (and --time-column value) public and unchanged; add/remove of a row "
            "is not covered (it shifts later positions). The order must be public."
        ),
    )
    add_input_arguments(cmd)
    group = cmd.add_argument_group("release")
    group.add_argument("--sketch", choices=tuple(CONTINUAL_SKETCHES), default="lazy-cms")
    group.add_argument("--width", type=int, default=1024, help="counters per row (1024)")
    group.add_argument("--depth", type=int, default=3, help="rows (3)")
    group.add_argument("--seed", type=int, default=0, help="public hash seed (0)")
    group.add_argument(
        "--horizon",
        type=int,
        required=True,
        metavar="T",
        help="declared maximum number of rows (time steps); more rows is an error",
    )
    group.add_argument(
        "--release-every",
        type=int,
        metavar="N",
        help="release after every N rows (and at T); default: ceil(T/20)",
    )
    group.add_argument(
        "--time-column",
        metavar="COL",
        help=(
            "sort rows by this public time column (stable) instead of using file order; its "
            "values are treated as public (a row's replacement keeps them)"
        ),
    )
    group.add_argument(
        "--query", nargs="+", action="extend", required=True, metavar="KEY", help="keys to track"
    )
    group.add_argument(
        "--calibration",
        choices=("paper", "analytic"),
        default="paper",
        help="Gaussian calibration: the paper's classical one (epsilon < 1) or analytic",
    )
    add_privacy_arguments(group, delta="required")
    group.add_argument("--plot", metavar="PATH.png", help="also write a line plot of the series")
    add_format_argument(cmd)
    cmd.set_defaults(run=run_continual)


def run_continual(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``continual`` subcommand; returns the exit status."""
    if args.horizon is None or args.horizon < 1:
        raise ValueError(f"--horizon must be >= 1, got {args.horizon}")
    release_every = args.release_every
    if release_every is None:
        release_every = max(1, math.ceil(args.horizon / 20))
    reader = ordered_input(args)
    keys = convert_query_keys(args.query, reader.key_type, args.column)
    budget = budget_from_args(args, pure=False)
    transform = ContinualDPSketch(
        args.sketch,
        args.width,
        args.depth,
        args.horizon,
        budget,
        queries=keys,
        release_every=release_every,
        seed=args.seed,
        calibration=args.calibration,
        noise_source=noise_source_from_args(args),
        label="continual",
    )
    # The element time model takes (position, key batch): the reader's public positions.
    source = reader | "Positions" >> beam.Map(lambda batch: batch[:2])
    releases, seconds = run_and_collect(source, transform, beam_args, explain=args.explain)
    releases = sorted(releases, key=lambda r: r.t)
    order = "sorted by " + repr(args.time_column) if args.time_column else "in file order"
    title = (
        f"# DP continual estimates of column {args.column!r} of {args.input} ({order}): "
        f"{budget} for the whole series under {ELEMENT_RELATION}, {args.sketch} "
        f"{args.depth}x{args.width}, T={args.horizon}, release every {release_every}; "
        f"{len(releases)} releases; {seconds:.2f} s"
    )
    names = [str(jsonable_key(k)) for k in keys]
    ts = [r.t for r in releases]
    if args.format == "json":
        records = [
            {
                "t": r.t,
                "estimates": {n: round(r.answers[k], 2) for n, k in zip(names, keys, strict=True)},
            }
            for r in releases
        ]
        print_records(records, ["t", "estimates"], "json", title=title)
    else:
        columns = [f"q{i}" for i in range(len(keys))]
        records = [
            {"t": r.t, **{c: round(r.answers[k], 2) for c, k in zip(columns, keys, strict=True)}}
            for r in releases
        ]
        print_records(records, ["t", *columns], "table", title=title, headers=["t", *names])
    if args.plot:
        plot_series(
            args.plot,
            {n: (ts, [r.answers[k] for r in releases]) for n, k in zip(names, keys, strict=True)},
            xlabel="time step t (rows processed)",
            ylabel="noisy estimate",
            title=title.lstrip("# ").split(":")[0],
            legend_title="query key",
        )
    return 0
