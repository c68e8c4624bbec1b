"""``beam-dpsketch sliding-window``: DP frequencies or heavy hitters over a sliding window.

Runs :class:`~beam_dpsketch.transforms.sliding.DPSlidingWindowFrequencies` (DPSW-Sketch: Wang, Wang
and Chen, "DPSW-Sketch: A Differentially Private Sketch Framework for Frequency Estimation over
Sliding Windows", KDD 2024, Section 4, Algorithms 2-3, Lemma 4.1) over one column of a file and
writes, every ``--release-every`` steps, the estimated window frequency of each ``--query`` key, or the
heavy hitters among the public ``--candidates``.

Steps:

* **Count-based** (no ``--time-column``): the position of a row is its 1-based rank in **file
  order** (files of a glob in sorted path order, rows in file order). The reader runs in one
  process, so positions are gap-free and public, and every worker assigns a row to the same
  block of the paper's Algorithm 2.
* **Time-based** (``--time-column``): the step of a row is
  ``floor((time - origin) / time_unit) + 1`` of its numeric (seconds) or timestamp value; rows
  need not be sorted (segments are assigned by event time). ``--window`` and
  ``--release-every`` are in time units. ``--origin`` is required: a public instant chosen
  without looking at the data (never derived from it), where step 1 and the query schedule
  start.

Budget: ``--epsilon`` with ``--delta`` (converted to the largest ``rho`` whose (epsilon, delta)
bound of Wang, Wang and Chen, Theorem 3.2, after Bun and Steinke 2016, fits), or ``--rho``; one
charge for the whole stream, however many queries.

Guarantee: for **replace-one** neighbours only, as the output's ``guarantee`` and ``--explain``
state: one row's key changed, every row position fixed (count-based) or that row's time
fixed (time-based). Adding or removing a row is not covered: it shifts every later position
(count-based), or it can add query times (time-based: queries run to the last step holding a row).
Empty input: the queries run up to the last step holding a row, so a file of no rows releases
the guarantee and no rows, and exits 0 (the rule of every subcommand whose schedule follows the
data, see ``docs/cli-output.md``). The number of rows is never output.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from beam_dpsketch.io import infer_input_format
from beam_dpsketch.pipelines.arguments import accept_negative_numbers, option_strings, refuse_given
from beam_dpsketch.pipelines.inputs import (
    TIME_COLUMN_MEMORY,
    add_input_arguments,
    convert_query_keys,
    ordered_input,
    read_candidates,
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
from beam_dpsketch.transforms.sliding import DPSlidingWindowFrequencies, SlidingLayout

__all__ = ["register", "run_sliding_window", "window_rows"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sliding-window`` subcommand."""
    sub = subparsers.add_parser(
        "sliding-window",
        help="DP frequencies / heavy hitters over a sliding window (DPSW-Sketch)",
        description=(
            "Estimate, every --release-every steps, the frequency of --query keys (or the heavy hitters "
            "among --candidates) over the last --window positions (file order) or time units "
            "(--time-column) with DPSW-Sketch (Wang, Wang and Chen, KDD 2024, Algorithms 2-3). "
            "rho-zCDP / (epsilon, delta)-DP over the whole stream, however many queries, for "
            "replace-one neighbours only: one row's key changed, every row position fixed "
            "(file order) or that row's time fixed (--time-column); adding or removing a row is "
            "not covered. Memory: the sketch over the window, plus, on the in-process runners, "
            "one table per segment of the blocks that the queries read (4 segments per block "
            "of W/10 rows by default; a query reads 11 blocks) holding only the cells of the "
            "--query keys or --candidates, about 2.5 KB each with a few query keys (at most "
            "16 x depth x width bytes of cells). With --release-every N >= 1.1 W that is about "
            "110 KB per query, whatever the number of rows; with a shorter N every block is "
            "read: about 10 KB, and a few ms of noise drawing, per block of W/10 rows."
        ),
    )
    accept_negative_numbers(sub)
    add_input_arguments(sub)
    win = sub.add_argument_group("window")
    win.add_argument(
        "--time-column",
        metavar="NAME",
        help="event-time column (seconds or timestamps): time-based windows; without it, "
        "positions are the file order" + TIME_COLUMN_MEMORY,
    )
    win.add_argument(
        "--time-unit", type=float, default=1.0, help="with --time-column: seconds per step (1)"
    )
    win.add_argument(
        "--origin",
        type=_origin,
        help="required with --time-column: public start of the time axis, the event time of "
        "step 1, in seconds since the epoch or as an ISO date/time in UTC such as 2001-01-01; "
        "fix it without looking at the data (e.g. the start of the reporting period): queries "
        "run at origin + N, origin + 2 N, ... (N = --release-every), and a row before it is "
        "refused",
    )
    win.add_argument("--window", type=int, required=True, help="window W in steps")
    win.add_argument(
        "--release-every", type=int, required=True, metavar="N", help="query every N steps"
    )
    sk = sub.add_argument_group("sketch")
    sk.add_argument("--width", type=int, default=STREAM_WIDTH, help=STREAM_WIDTH_HELP)
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
    sk.add_argument(
        "--alpha",
        default="1/2",
        help="smooth-histogram factor (1/2), with --preset theory or --block",
    )
    q = sub.add_argument_group("queries")
    q.add_argument("--query", nargs="+", action="extend", metavar="KEY", help="keys to estimate")
    q.add_argument(
        "--heavy-hitters", type=float, metavar="GAMMA", help="report keys above GAMMA * W"
    )
    q.add_argument("--candidates", metavar="FILE", help="public candidate keys, one per line")
    q.add_argument("--hh-slack", type=float, help="threshold slack zeta (default e/width)")
    add_privacy_arguments(sub.add_argument_group("privacy"), delta="gaussian", rho=True)
    add_output_arguments(sub)
    sub.add_argument("--plot", metavar="PATH.png", help="plot the estimates over time")
    sub.set_defaults(run=run_sliding_window, known_options=option_strings(sub))


def window_rows(
    record: tuple[Any, ...], heavy_hitters: bool, order: Mapping[str, int]
) -> Iterator[dict[str, Any]]:
    """``time``/``key``/``estimate`` rows of one released record.

    ``(time, [(key, estimate), ...])`` with ``heavy_hitters`` (rows keep the release's order),
    else ``(time, key, estimate)``, ordered by the key's place in ``order`` (JSON of the key).
    """
    if heavy_hitters:
        time, pairs = record
        for i, (key, value) in enumerate(pairs):
            t = plain(time)
            yield {"time": t, "key": plain(key), "estimate": round(float(value), 2), ORDER: [t, i]}
    else:
        time, key, value = record
        t, key = plain(time), plain(key)
        rank = order[json.dumps(key)]
        yield {"time": t, "key": key, "estimate": round(float(value), 2), ORDER: [t, rank]}


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
    check_output_arguments(args)
    hh = args.heavy_hitters is not None
    if bool(args.query) == hh:
        raise ValueError("pass either --query KEY ... or --heavy-hitters GAMMA --candidates FILE")
    if hh != bool(args.candidates):
        raise ValueError("--heavy-hitters GAMMA and --candidates FILE go together")
    if args.hh_slack is not None and not hh:
        raise ValueError("--hh-slack applies with --heavy-hitters only")
    if args.time_column is None:
        refuse_given(
            args, ("time_unit", "origin"), "without --time-column (steps are file positions)"
        )
    elif args.origin is None:
        # The time axis is anchored on a public instant, never on the data's first time: a
        # default such as the epoch would release every empty window before the data.
        raise ValueError(
            "--origin is required with --time-column: the public start of the time axis "
            "(seconds since the epoch or an ISO date such as 2001-01-01), fixed without "
            "looking at the data"
        )
    if args.block is not None:
        refuse_given(args, ("preset",), "with --block (the explicit block length replaces it)")
    elif args.preset == "paper_experiments":
        refuse_given(
            args,
            ("alpha",),
            "with --preset paper_experiments (its checkpoints are fixed; use --preset theory "
            "or --block)",
        )
    budget = budget_from_args(args, pure=False)
    if args.column is None and (args.input_format or infer_input_format(args.input)) != "text":
        raise ValueError("--column is required except for text input")
    # One reader in one process: positions are gap-free, and every row lands in the same block
    # on every worker (count-based mode).
    reader = ordered_input(args)
    raw = args.query or read_candidates(args.candidates)
    wanted = convert_query_keys(raw, reader.key_type, args.column)
    time_mode = args.time_column is not None
    if args.block is not None:
        preset = None
        layout = SlidingLayout(block=args.block, alpha=args.alpha)
    else:
        preset = args.preset
        alpha = args.alpha if preset == "theory" else None
        layout = SlidingLayout(preset=preset, alpha=alpha)
    transform = DPSlidingWindowFrequencies(
        args.window,
        args.width,
        args.depth,
        budget,
        release_every=args.release_every,
        seed=args.seed,
        query_keys=None if hh else wanted,
        candidates=wanted if hh else None,
        gamma=args.heavy_hitters,
        hh_slack=args.hh_slack,
        mode="time" if time_mode else "count",
        time_unit=args.time_unit if time_mode else 1,
        origin=args.origin if time_mode else None,
        layout=layout,
        noise_source=noise_source_from_args(args),
        label="sliding-window",
    )
    # The reader's (position, keys, seconds) batches go to the transform as they are.
    order = {json.dumps(plain(k)): i for i, k in enumerate(wanted)}
    run_ = run_release(
        reader,
        transform,
        functools.partial(window_rows, heavy_hitters=hh, order=order),
        beam_args,
        explain=args.explain,
        known_options=getattr(args, "known_options", ()),
    )
    guarantee, mechanism, calibration = guarantee_of(
        transform, insecure=args.insecure_test_seed is not None
    )
    parameters: dict[str, Any] = {
        "column": args.column,
        "clock": "event_time" if time_mode else "positions",
        "window": args.window,
        "release_every": args.release_every,
    }
    if time_mode:
        parameters.update(time_column=args.time_column, time_unit=args.time_unit)
        parameters["origin"] = args.origin
    parameters.update(width=args.width, depth=args.depth, seed=args.seed)
    parameters.update(preset=preset, block=args.block, alpha=str(args.alpha))
    if hh:
        parameters.update(queries="heavy_hitters", gamma=args.heavy_hitters)
        parameters["hh_slack"] = args.hh_slack
    else:
        parameters["queries"] = "keys"
    parameters["rho"] = transform.rho
    parameters.update(calibration)
    what = "time units" if time_mode else "positions"
    release = CliRelease(
        guarantee,
        mechanism,
        parameters,
        ("time", "key", "estimate"),
        run_.rows,
        title=(
            f"DPSW-Sketch over column {args.column!r} of {args.input}: window {args.window} "
            f"{what}, queries every {args.release_every}"
        ),
    )
    write_release(release, args.format, args.output)
    if args.plot:
        series: dict[Any, tuple[list, list]] = {}
        for r in release.rows:
            xs, ys = series.setdefault(r["key"], ([], []))
            xs.append(r["time"])
            ys.append(r["estimate"])
        plot_series(
            args.plot,
            series,
            xlabel="time" if time_mode else "position",
            ylabel="estimated window frequency",
            title=release.title,
        )
    return 0
