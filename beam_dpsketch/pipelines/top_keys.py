"""``beam-dpsketch top-keys``: the most frequent keys of a column, with no key list.

Releases a tree of DP linear sketches over the keys' byte prefixes and finds the top keys by
descending the noisy tree (:class:`~beam_dpsketch.transforms.DPTopKeys`; Zhao et al. [ZQR+22,
Algorithm 3] per level, the budget split over the levels as in [ZQR+22, Section 4.2]; the tree
and its descent are derived here, docs/algorithms.md#top-keys). With ``--window-size`` and
``--time-column`` every fixed event-time window gets its own release ("the top keys of the last
hour"). Budgets: ``--epsilon`` alone is pure DP; with ``--delta`` it is (epsilon, delta)-DP.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import FixedWindows, GlobalWindows, TimestampedValue

from beam_dpsketch.pipelines.arguments import accept_negative_numbers, option_strings
from beam_dpsketch.pipelines.inputs import add_input_arguments, bad_record_options
from beam_dpsketch.pipelines.output import (
    ORDER,
    CliRelease,
    add_output_arguments,
    check_output_arguments,
    guarantee_of,
    plain,
    run_release,
    write_release,
)
from beam_dpsketch.pipelines.release_arguments import (
    add_privacy_arguments,
    budget_from_args,
    noise_source_from_args,
)
from beam_dpsketch.privacy import Windowing
from beam_dpsketch.transforms import DPTopKeys, ReadKeyBatches, ReadOrderedKeys
from beam_dpsketch.transforms.top_keys import ROW_CONFIDENCE

__all__ = ["register", "run_top_keys", "top_key_rows"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``top-keys`` subcommand."""
    sub = subparsers.add_parser(
        "top-keys",
        help="release the DP top keys of a column with no candidate list (prefix tree of "
        "linear sketches)",
        description=(
            "Release the --k most frequent keys of one column without naming any key before "
            "the run: a Count Sketch per prefix length of the keys' bytes is released once "
            "with noise for all its levels together, and the keys are found by descending the "
            "noisy tree (post-processing). Keys longer than --max-key-bytes bytes (a string's "
            "UTF-8 bytes plus 1, an integer 9) are never released. With --window-size and "
            "--time-column, each fixed event-time window is released on its own (element "
            "level: a row is in one window). Element level: neighbouring inputs differ by one "
            "row."
        ),
    )
    accept_negative_numbers(sub)
    add_input_arguments(sub)
    group = sub.add_argument_group("release")
    group.add_argument("--k", type=int, default=10, help="keys to release (10)")
    group.add_argument(
        "--max-key-bytes",
        type=int,
        default=16,
        help="longest key encoding released (16); the noise grows with its square root",
    )
    group.add_argument("--width", type=int, default=2048, help="counters per row (2048)")
    group.add_argument("--depth", type=int, default=5, help="rows per level (5)")
    group.add_argument("--beam", type=int, help="prefixes kept per level (default 32 k)")
    group.add_argument(
        "--sketch",
        choices=("count-sketch", "count-min"),
        default="count-sketch",
        help="sketch of each level (count-sketch)",
    )
    group.add_argument("--seed", type=int, default=0, help="public hash seed (0)")
    win = sub.add_argument_group("windows")
    win.add_argument(
        "--window-size", type=float, metavar="SECONDS", help="fixed event-time windows"
    )
    win.add_argument("--time-column", help="event-time column (seconds or timestamps)")
    win.add_argument(
        "--release-range",
        type=float,
        nargs=2,
        metavar=("START", "END"),
        help="release every window starting in [START, END), empty ones included (public), "
        "so that whether a window is released reveals nothing",
    )
    add_privacy_arguments(group)
    add_output_arguments(sub)
    sub.set_defaults(run=run_top_keys, known_options=option_strings(sub))


def top_key_rows(record: Any, windowed: bool) -> Iterator[dict[str, Any]]:
    """``key``/``estimate``/``error_bound`` rows of one release, largest first; with
    ``windowed``, ``time`` is the window's start (event time). ``error_bound`` is the row's
    symmetric bound at :data:`~beam_dpsketch.transforms.top_keys.ROW_CONFIDENCE`."""
    if windowed:
        rows, start = record.records, record.window_start
    else:
        rows, start = [record], None
    for i, row in enumerate(rows):
        out = {
            "key": plain(row.key),
            "estimate": round(float(row.estimate), 2),
            "error_bound": round(float(row.error_bound), 2),
        }
        if windowed:
            out["time"] = start
            out[ORDER] = [start, -float(row.estimate), i]
        else:
            out[ORDER] = [-float(row.estimate), i]
        yield out


class _WindowedKeys(beam.PTransform):
    """Ordered ``(position, keys, times)`` batches -> per-window key batches, timestamped and
    put in fixed windows of ``size`` seconds (one element per window and batch)."""

    def __init__(self, size: float) -> None:
        super().__init__()
        self._size = size

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        size = self._size

        def split(element: Any) -> Iterator[Any]:
            _, keys, times = element
            starts = np.floor(np.asarray(times, dtype=np.float64) / size) * size
            for start in np.unique(starts).tolist():
                idx = np.flatnonzero(starts == start)
                yield TimestampedValue(keys.take(idx), start)

        return pcoll | "ByWindow" >> beam.FlatMap(split) | beam.WindowInto(FixedWindows(size))


class _InGlobalWindow(beam.PTransform):
    """``release`` followed by a move of its output to the global window: the command line's
    staging sink writes one file per run, so released rows of every window go to it together
    (each row keeps its window's start as ``time``)."""

    def __init__(self, release: DPTopKeys) -> None:
        super().__init__()
        self.release = release

    def explain(self) -> str:
        return self.release.explain()

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | self.release | "GlobalWindow" >> beam.WindowInto(GlobalWindows())


def run_top_keys(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``top-keys`` subcommand; returns the exit status."""
    check_output_arguments(args)
    windowed = args.window_size is not None
    if windowed != (args.time_column is not None):
        raise ValueError("--window-size and --time-column go together")
    if args.window_size is not None and not args.window_size > 0:
        raise ValueError("--window-size must be > 0")
    if args.release_range is not None and not windowed:
        raise ValueError("--release-range applies with --window-size only")
    options = bad_record_options(args)
    if windowed:
        ordered = ReadOrderedKeys(
            args.input,
            args.column,
            args.input_format,
            key_type=args.key_type,
            time_column=args.time_column,
            **options,
        )
        reader: beam.PTransform = ordered | _WindowedKeys(args.window_size)
    else:
        reader = ReadKeyBatches(
            args.input, args.column, args.input_format, key_type=args.key_type, **options
        )
    windowing = None
    if args.release_range is not None:
        windowing = Windowing(release_range=tuple(args.release_range))
    transform = DPTopKeys(
        args.k,
        budget_from_args(args),
        width=args.width,
        depth=args.depth,
        max_key_bytes=args.max_key_bytes,
        beam=args.beam,
        sketch=args.sketch,
        seed=args.seed,
        windowing=windowing,
        noise_source=noise_source_from_args(args),
        with_metadata=windowed,
        label="top-keys",
    )
    rows = run_release(
        reader,
        _InGlobalWindow(transform) if windowed else transform,
        lambda record: top_key_rows(record, windowed),
        beam_args,
        explain=args.explain,
        known_options=getattr(args, "known_options", ()),
    ).rows
    guarantee, mechanism, calibration = guarantee_of(
        transform, insecure=args.insecure_test_seed is not None
    )
    parameters: dict[str, Any] = {
        "column": args.column,
        "k": args.k,
        "max_key_bytes": args.max_key_bytes,
        "width": args.width,
        "depth": args.depth,
        "beam": transform.mechanism.beam,
        "sketch": args.sketch,
        "seed": args.seed,
        "window_size": args.window_size,
        "error_confidence": ROW_CONFIDENCE,
    }
    fields: tuple[str, ...] = ("key", "estimate", "error_bound")
    if windowed:
        # A row's time is the start of its window, in the time column's units.
        parameters["clock"] = "event_time"
        fields += ("time",)
    release = CliRelease(
        guarantee,
        mechanism,
        {**parameters, **calibration},
        fields,
        rows,
        title=f"DP top keys of column {args.column!r} of {args.input}",
    )
    write_release(release, args.format, args.output)
    return 0
