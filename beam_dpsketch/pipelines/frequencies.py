"""``beam-dpsketch frequencies`` and ``beam-dpsketch quantiles``: DP linear sketches on Beam.

``frequencies`` releases a private Count-Min sketch (or Count Sketch) of one column and answers
point queries for ``--query`` keys or a ``--candidates`` file; ``quantiles`` releases a private
dyadic Count Sketch of a numeric column and answers ``--q`` quantiles (Zhao, Qiao, Redberg, Agrawal,
El Abbadi and Wang, "Differentially Private Linear Sketches": Section 3, Theorems 3.1-3.2 for the
sketches, Section 4.2 for the private dyadic Count Sketch).
Budgets: ``--epsilon`` alone is pure DP; with ``--delta`` it is (epsilon, delta)-DP.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from beam_dpsketch.pipelines.options import (
    add_input_arguments,
    add_privacy_arguments,
    budget_from_args,
    convert_query_keys,
    noise_source_from_args,
    option_strings,
    read_candidates,
)
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
from beam_dpsketch.transforms import DPFrequencies, DPQuantiles, ReadKeyBatches

__all__ = ["frequency_rows", "quantile_rows", "register", "run_frequencies", "run_quantiles"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``frequencies`` and ``quantiles`` subcommands."""
    freq = subparsers.add_parser(
        "frequencies",
        help="release a DP Count-Min sketch of a column and estimate key frequencies",
        description=(
            "Release a differentially private Count-Min sketch (or Count Sketch) of one column "
            "(noise added once to every cell; Zhao et al. 2022, Section 3) and write the estimated "
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
    add_output_arguments(freq)
    freq.set_defaults(run=run_frequencies, known_options=option_strings(freq))

    quant = subparsers.add_parser(
        "quantiles",
        help="release DP quantiles of a numeric column (private dyadic Count Sketch)",
        description=(
            "Release differentially private quantiles of one numeric column with a private "
            "dyadic Count Sketch over the declared public range [--lower, --upper] (Zhao et al. "
            "2022, Section 4.2). Integer columns are used as they are; declare "
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
    add_output_arguments(quant)
    quant.set_defaults(run=run_quantiles, known_options=option_strings(quant))


def frequency_rows(
    released: Any, keys: Sequence[Any], candidates: bool, top: int | None
) -> Iterator[dict[str, Any]]:
    """``key``/``estimate`` rows of a released sketch: every query key in query order, or the
    largest ``top`` candidates (all with ``top=None``), largest first."""
    if candidates:
        pairs = released.heavy_hitters(list(keys), top=top)
    else:
        pairs = zip(keys, released.estimate(list(keys)).tolist(), strict=True)
    for i, (key, value) in enumerate(pairs):
        yield {"key": plain(key), "estimate": round(float(value), 2), ORDER: [i]}


def quantile_rows(record: Any) -> Iterator[dict[str, Any]]:
    """One ``quantile``/``value`` row per released quantile; ascending quantile levels."""
    quantile = float(plain(record["quantile"]))
    yield {"quantile": quantile, "value": plain(record["value"]), ORDER: [quantile]}


def _run(
    args: argparse.Namespace,
    beam_args: Sequence[str],
    reader: Any,
    transform: Any,
    to_rows: Any,
    fields: tuple[str, ...],
    parameters: dict[str, Any],
    title: str,
) -> int:
    rows = run_release(
        reader,
        transform,
        to_rows,
        beam_args,
        explain=args.explain,
        known_options=getattr(args, "known_options", ()),
    ).rows
    guarantee, mechanism, calibration = guarantee_of(
        transform, insecure=args.insecure_test_seed is not None
    )
    release = CliRelease(
        guarantee, mechanism, {**parameters, **calibration}, fields, rows, title=title
    )
    write_release(release, args.format, args.output)
    return 0


def run_frequencies(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``frequencies`` subcommand; returns the exit status."""
    check_output_arguments(args)
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
    parameters = {
        "column": args.column,
        "sketch": args.sketch,
        "width": args.width,
        "depth": args.depth,
        "seed": args.seed,
        "queries": "candidates" if args.candidates else "keys",
        "top": args.top,
    }
    return _run(
        args,
        beam_args,
        reader,
        transform,
        functools.partial(
            frequency_rows, keys=keys, candidates=bool(args.candidates), top=args.top
        ),
        ("key", "estimate"),
        parameters,
        f"DP frequency estimates of column {args.column!r} of {args.input}",
    )


def run_quantiles(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``quantiles`` subcommand; returns the exit status."""
    check_output_arguments(args)
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
    parameters = {
        "column": args.column,
        "quantiles": list(args.q),
        "lower": args.lower,
        "upper": args.upper,
        "resolution": args.resolution,
        "width": args.width,
        "depth": args.depth,
    }
    return _run(
        args,
        beam_args,
        reader,
        transform,
        quantile_rows,
        ("quantile", "value"),
        parameters,
        f"DP quantiles of column {args.column!r} of {args.input} in "
        f"[{args.lower:g}, {args.upper:g}]",
    )
