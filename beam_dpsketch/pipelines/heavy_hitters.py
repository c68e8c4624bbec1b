"""``beam-dpsketch heavy-hitters``: differentially private heavy hitters of one column.

Reads Parquet, CSV, JSON Lines or text with a Beam pipeline (FnApiRunner unless ``--runner``),
builds Misra-Gries sketches and releases the top keys with the DP Misra-Gries mechanisms of
:class:`~beam_dpsketch.transforms.DPHeavyHitters` (Lebeda and Tetek, "Better Differentially Private
Approximate Histograms and Heavy Hitters using the Misra-Gries Sketch"), with the privacy cost
stated up front (``--explain``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any

import apache_beam as beam

from beam_dpsketch.pipelines.options import (
    add_input_arguments,
    add_privacy_arguments,
    budget_from_args,
    noise_source_from_args,
    option_strings,
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
from beam_dpsketch.transforms import DPHeavyHitters, ReadKeyBatches
from beam_dpsketch.transforms.heavy_hitters import MECHANISMS
from beam_dpsketch.transforms.readers import ReadKeyPairs

__all__ = ["heavy_hitters", "register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``heavy-hitters`` subcommand."""
    parser = subparsers.add_parser(
        "heavy-hitters",
        help="release the top keys of a column with differential privacy (DP Misra-Gries)",
        description=(
            "Release the K most frequent keys of one column with (epsilon, delta)-differential "
            "privacy, using Misra-Gries sketches and the releases of Lebeda and Tetek "
            "(Algorithms 2-4; Sections 7-8 for merged and user-level releases). Element level by "
            "default (neighbouring inputs differ by one row); "
            "with --privacy-id, user level (by all of one user's rows, each user contributing "
            "at most --max-contributions distinct keys). Unknown options are Beam pipeline "
            "options (default runner: FnApiRunner in-process)."
        ),
    )
    add_input_arguments(parser)
    group = parser.add_argument_group("release")
    group.add_argument("--k", type=int, default=100, help="Misra-Gries counters (default 100)")
    group.add_argument("--top", type=int, help="how many keys to print (default: --k)")
    add_privacy_arguments(group, delta=1e-6)
    group.add_argument("--privacy-id", metavar="COL", help="user id column (user-level privacy)")
    group.add_argument(
        "--max-contributions",
        type=int,
        metavar="M",
        help="with --privacy-id: distinct keys kept per user (default 1)",
    )
    group.add_argument(
        "--mechanism",
        choices=MECHANISMS,
        help="release (default design-b; pamg-gshm with --privacy-id)",
    )
    group.add_argument(
        "--max-shards",
        type=int,
        default=256,
        help="design-b: maximum Beam accumulators merged per window (memory bound; 256)",
    )
    add_output_arguments(parser)
    parser.set_defaults(run=run, known_options=option_strings(parser))


def _rows(record: tuple[Any, Any]) -> Iterator[dict[str, Any]]:
    """One ``key``/``estimate`` row per released ``(key, noisy count)``; largest first."""
    key, count = record
    key, estimate = plain(key), round(float(count), 2)
    yield {"key": key, "estimate": estimate, ORDER: [-estimate, json.dumps(key)]}


def heavy_hitters(args: argparse.Namespace, beam_args: Sequence[str]) -> CliRelease:
    """Run the release pipeline for parsed ``args`` and return what the command writes."""
    if args.k < 1:
        raise ValueError(f"--k must be a positive int, got {args.k}")
    if args.max_contributions is not None and args.privacy_id is None:
        raise ValueError("--max-contributions applies with --privacy-id only")
    budget = budget_from_args(args)
    options: dict[str, Any] = {
        "top": args.top,
        "mechanism": args.mechanism,
        "noise_source": noise_source_from_args(args),
        "label": "heavy-hitters",
    }
    if args.mechanism in (None, "design-b"):
        options["max_shards"] = args.max_shards
    if args.privacy_id is not None:
        reader: beam.PTransform = ReadKeyPairs(
            args.input, args.column, args.privacy_id, args.input_format
        )
        options.update(
            privacy_id_fn=itemgetter(0),
            key_fn=itemgetter(1),
            max_contributions=args.max_contributions or 1,
        )
    else:
        reader = ReadKeyBatches(args.input, args.column, args.input_format, key_type=args.key_type)
    transform = DPHeavyHitters(args.k, budget, **options)
    run_ = run_release(
        reader,
        transform,
        _rows,
        beam_args,
        explain=args.explain,
        known_options=getattr(args, "known_options", ()),
    )
    guarantee, mechanism, calibration = guarantee_of(
        transform, insecure=args.insecure_test_seed is not None
    )
    parameters: dict[str, Any] = {"column": args.column, "k": args.k, "top": args.top}
    if args.privacy_id is not None:
        parameters.update(privacy_id=args.privacy_id, max_contributions=args.max_contributions or 1)
    if args.mechanism in (None, "design-b"):
        parameters["max_shards"] = args.max_shards
    parameters.update(calibration)
    return CliRelease(
        guarantee,
        mechanism,
        parameters,
        ("key", "estimate"),
        run_.rows,
        title=f"DP heavy hitters of column {args.column!r} of {args.input}",
    )


def run(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``heavy-hitters`` subcommand; returns the exit status."""
    check_output_arguments(args)
    write_release(heavy_hitters(args, beam_args), args.format, args.output)
    return 0
