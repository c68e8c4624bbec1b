"""``beam-dpsketch frequencies`` and ``beam-dpsketch quantiles``: DP linear sketches on Beam.

``frequencies`` releases a private Count-Min sketch (or Count Sketch) of one column and answers
point queries for ``--query`` keys or a ``--candidates`` file; ``quantiles`` releases a private
dyadic Count Sketch of a numeric column and answers ``--q`` quantiles (spec dp-linear-sketches).
Budgets: ``--epsilon`` alone is pure DP; with ``--delta`` it is (epsilon, delta)-DP.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from beam_dpsketch.pipelines.options import (
    add_format_argument,
    add_input_arguments,
    add_privacy_arguments,
    budget_from_args,
    convert_query_keys,
    noise_source_from_args,
    print_records,
    read_candidates,
    run_and_collect,
)
from beam_dpsketch.transforms import DPFrequencies, DPQuantiles, ReadKeyBatches

__all__ = ["register", "run_frequencies", "run_quantiles"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``frequencies`` and ``quantiles`` subcommands."""
    freq = subparsers.add_parser(
        "frequencies",
        help="release a DP Count-Min sketch of a column and estimate key frequencies",
        description=(
            "Release a differentially private Count-Min sketch (or Count Sketch) of one column "
            "(noise added once to every cell; spec dp-linear-sketches) and print the estimated "
            "frequency of each --query key or of every key in a --candidates file. Element level: "
            "neighbouring inputs differ by one row."
        ),
    )
    add_input_arguments(freq)
    group = freq.add_argument_group("release")
    group.add_argument("--sketch", choices=("count-min", "count-sketch"), default="count-min")
    group.add_argument("--width", type=int, default=2048, help="counters per row (2048)")
    group.add_argument("--depth", type=int, default=5, help="rows (5)")
    group.add_argument("--seed", type=int, default=0, help="public hash seed (0)")
    group.add_argument(
        "--query", nargs="+", action="extend", metavar="KEY", help="keys to estimate"
    )
    group.add_argument(
        "--candidates", metavar="FILE", help="file of public candidate keys, one per line"
    )
    group.add_argument("--top", type=int, metavar="N", help="with --candidates: the N largest")
    add_privacy_arguments(group)
    add_format_argument(freq)
    freq.set_defaults(run=run_frequencies)

    quant = subparsers.add_parser(
        "quantiles",
        help="release DP quantiles of a numeric column (private dyadic Count Sketch)",
        description=(
            "Release differentially private quantiles of one numeric column with a private "
            "dyadic Count Sketch over the declared public range [--lower, --upper] (spec "
            "dp-linear-sketches §5). Integer columns are used as they are; declare "
            "--resolution for fractional values. Every value is mapped into the bounds before it "
            "is counted: values below --lower count as --lower, above --upper (and NaN) as "
            "--upper, so no value can make the run fail."
        ),
    )
    add_input_arguments(quant)
    group = quant.add_argument_group("release")
    group.add_argument("--q", type=float, nargs="+", required=True, help="quantiles in [0, 1]")
    group.add_argument("--lower", type=float, required=True, help="public lower bound")
    group.add_argument("--upper", type=float, required=True, help="public upper bound")
    group.add_argument("--resolution", type=float, help="bin width for fractional values")
    group.add_argument("--width", type=int, default=1024, help="counters per row (1024)")
    group.add_argument("--depth", type=int, default=5, help="rows (5)")
    add_privacy_arguments(group)
    add_format_argument(quant)
    quant.set_defaults(run=run_quantiles)


def run_frequencies(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``frequencies`` subcommand; returns the exit status."""
    if bool(args.query) == bool(args.candidates):
        raise ValueError("pass either --query KEY ... or --candidates FILE")
    if args.top is not None and not args.candidates:
        raise ValueError("--top applies with --candidates only")
    reader = ReadKeyBatches(args.input, args.column, args.input_format, key_type=args.key_type)
    raw = args.query or read_candidates(args.candidates)
    keys = convert_query_keys(raw, reader.key_type, args.column)
    transform = DPFrequencies(
        args.width,
        args.depth,
        budget_from_args(args),
        seed=args.seed,
        sketch=args.sketch,
        noise_source=noise_source_from_args(args),
        label="frequencies",
    )
    (released,), seconds = run_and_collect(reader, transform, beam_args, explain=args.explain)
    if args.candidates:
        pairs = released.heavy_hitters(keys, top=args.top)
    else:
        pairs = list(zip(keys, released.estimate(keys).tolist(), strict=True))
    title = (
        f"# DP frequency estimates of column {args.column!r} of {args.input}: "
        f"{budget_from_args(args)}, {args.sketch} {args.depth}x{args.width}; {seconds:.2f} s"
    )
    records = [{"key": k, "estimate": round(float(v), 2)} for k, v in pairs]
    print_records(records, ["key", "estimate"], args.format, title=title)
    return 0


def run_quantiles(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``quantiles`` subcommand; returns the exit status."""
    reader = ReadKeyBatches(args.input, args.column, args.input_format, key_type="int")
    transform = DPQuantiles(
        args.q,
        args.lower,
        args.upper,
        budget_from_args(args),
        width=args.width,
        depth=args.depth,
        resolution=args.resolution,
        noise_source=noise_source_from_args(args),
        label="quantiles",
    )
    released, seconds = run_and_collect(reader, transform, beam_args, explain=args.explain)
    title = (
        f"# DP quantiles of column {args.column!r} of {args.input} in "
        f"[{args.lower:g}, {args.upper:g}]: {budget_from_args(args)}; {seconds:.2f} s"
    )
    rows = sorted(released, key=lambda r: r["quantile"])
    print_records(rows, ["quantile", "value"], args.format, title=title)
    return 0
