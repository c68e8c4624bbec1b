"""``beam-dpsketch continual``: a private sketch released continually over an ordered file.

Runs :class:`~beam_dpsketch.transforms.continual.ContinualDPSketch` in the element time model
(one time step per row, the arrival-indexed time of Holland, Section 2.1) and writes the time
series of noisy estimates of the ``--query`` keys, one row per release time and key (a release
every ``--release-every`` rows and at the horizon ``T``), in the output schema of
:mod:`beam_dpsketch.pipelines.output`, optionally also as a line plot (``--plot PATH.png``).

Time order
    The time step of a row is its position in the input: files matching ``--input`` in sorted
    path order, rows in file order. With ``--time-column COL`` the rows are instead stably sorted
    by that column (ties keep file order). Either order must be **public** and independent of the
    private values (an ingestion sequence or arrival timestamp, never the key itself). The rows
    are read by one worker to fix the order; ``--time-column`` sorts in memory.

Guarantee
    ``(epsilon, delta)``-DP for the whole time series under **replacement of one row's key**
    (the ``--column`` value), every row's position, and its ``--time-column`` value, public and
    unchanged (Holland, "Faster Differentially Private Sketches under Continual Observation":
    the neighbouring streams of Section 2.1 differ in one element at the same position; Theorem 2
    for LazySketch, Section 4.1 for PunctualSketch). Add/remove of a row is not covered: it would
    shift the time step of every later row. The output's ``guarantee`` states it.
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam

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
    plot_series,
    run_release,
    write_release,
)
from beam_dpsketch.pipelines.release_arguments import (
    STREAM_WIDTH,
    STREAM_WIDTH_HELP,
    add_privacy_arguments,
    budget_from_args,
    noise_source_from_args,
)
from beam_dpsketch.sketches.continual.binary_mechanism import CALIBRATIONS, DEFAULT_CALIBRATION
from beam_dpsketch.sketches.continual.sketch import CONTINUAL_ALGORITHMS, CONTINUAL_SKETCH_KINDS
from beam_dpsketch.transforms.continual import ContinualDPSketch

__all__ = ["register", "run_continual", "series_rows"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``continual`` subcommand."""
    cmd = subparsers.add_parser(
        "continual",
        help="release a DP sketch continually over an ordered file and print the time series",
        description=(
            "Release a differentially private Count-Min sketch or Count Sketch under continual "
            "observation (LazySketch or PunctualSketch; Holland, Algorithms 5 and 3) over the "
            "rows of the input in file order (or sorted by --time-column), one time step per "
            "row, and write "
            "the noisy estimate of every --query key after every --release-every rows. The "
            "whole time series is (epsilon, delta)-DP under replacement of one row's key, every "
            "row's position (and --time-column value) public and unchanged; add/remove of a row "
            "is not covered (it shifts later positions). The order must be public."
        ),
    )
    accept_negative_numbers(cmd)
    add_input_arguments(cmd)
    group = cmd.add_argument_group("release")
    group.add_argument(
        "--sketch", choices=tuple(CONTINUAL_SKETCH_KINDS), default="count-min", help="(count-min)"
    )
    group.add_argument(
        "--algorithm",
        choices=tuple(CONTINUAL_ALGORITHMS),
        default="lazy",
        help="lazy (Holland, Algorithm 5; default) or punctual (Algorithms 3-4)",
    )
    group.add_argument("--width", type=int, default=STREAM_WIDTH, help=STREAM_WIDTH_HELP)
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
            "values are treated as public (a row's replacement keeps them)" + TIME_COLUMN_MEMORY
        ),
    )
    group.add_argument(
        "--query", nargs="+", action="extend", required=True, metavar="KEY", help="keys to track"
    )
    group.add_argument(
        "--calibration",
        choices=CALIBRATIONS,
        default=DEFAULT_CALIBRATION,
        help=(
            f"Gaussian noise calibration ({DEFAULT_CALIBRATION}): analytic is the smallest noise "
            "that meets (epsilon, delta) exactly, for any epsilon > 0; paper is Holland's "
            "classical Gaussian, only for epsilon < 1 and never less noisy (to reproduce the "
            "paper)"
        ),
    )
    add_privacy_arguments(group, delta="gaussian")
    group.add_argument("--plot", metavar="PATH.png", help="also write a line plot of the series")
    add_output_arguments(cmd)
    cmd.set_defaults(run=run_continual, known_options=option_strings(cmd))


def series_rows(release: Any, keys: Sequence[Any]) -> Iterator[dict[str, Any]]:
    """One ``time``/``key``/``estimate`` row per query key of one release (``.t``, ``.answers``),
    in time order, then query order."""
    for i, key in enumerate(keys):
        estimate = round(float(release.answers[key]), 2)
        yield {"time": release.t, "key": plain(key), "estimate": estimate, ORDER: [release.t, i]}


def run_continual(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``continual`` subcommand; returns the exit status."""
    check_output_arguments(args)
    if args.horizon is None or args.horizon < 1:
        raise ValueError(f"--horizon must be >= 1, got {args.horizon}")
    release_every = args.release_every
    if release_every is None:
        release_every = max(1, math.ceil(args.horizon / 20))
    reader = ordered_input(args)
    keys = convert_query_keys(args.query, reader.key_type, args.column)
    budget = budget_from_args(args, pure=False)
    transform = ContinualDPSketch(
        args.width,
        args.depth,
        args.horizon,
        budget,
        query_keys=keys,
        sketch=args.sketch,
        algorithm=args.algorithm,
        release_every=release_every,
        seed=args.seed,
        calibration=args.calibration,
        noise_source=noise_source_from_args(args),
        with_metadata=True,
        label="continual",
    )
    # The element time model takes (position, key batch): the reader's public positions.
    source = reader | "Positions" >> beam.Map(lambda batch: batch[:2])
    run_ = run_release(
        source,
        transform,
        functools.partial(series_rows, keys=keys),
        beam_args,
        explain=args.explain,
        known_options=getattr(args, "known_options", ()),
    )
    guarantee, mechanism, calibration = guarantee_of(
        transform, insecure=args.insecure_test_seed is not None
    )
    parameters: dict[str, Any] = {
        "column": args.column,
        "clock": "positions",
        "time_column": args.time_column,
        "sketch": args.sketch,
        "algorithm": args.algorithm,
        "width": args.width,
        "depth": args.depth,
        "seed": args.seed,
        "horizon": args.horizon,
        "release_every": release_every,
        "calibration": args.calibration,
        **calibration,
    }
    order = "sorted by " + repr(args.time_column) if args.time_column else "in file order"
    release = CliRelease(
        guarantee,
        mechanism,
        parameters,
        ("time", "key", "estimate"),
        run_.rows,
        title=(
            f"DP continual estimates of column {args.column!r} of {args.input} ({order}): "
            f"{args.algorithm} {args.sketch} {args.depth}x{args.width}, T={args.horizon}, "
            "release every "
            f"{release_every}"
        ),
    )
    write_release(release, args.format, args.output)
    if args.plot:
        series: dict[Any, tuple[list, list]] = {}
        for r in release.rows:
            xs, ys = series.setdefault(str(r["key"]), ([], []))
            xs.append(r["time"])
            ys.append(r["estimate"])
        plot_series(
            args.plot,
            series,
            xlabel="time step t (rows processed)",
            ylabel="noisy estimate",
            title=release.title.split(":")[0],
            legend_title="query key",
        )
    return 0
