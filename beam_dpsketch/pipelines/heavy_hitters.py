"""``beam-dpsketch heavy-hitters``: differentially private heavy hitters of one column.

Reads Parquet, CSV, JSON Lines or text with a Beam pipeline (FnApiRunner unless ``--runner``),
builds Misra-Gries sketches and releases the top keys with the DP Misra-Gries mechanisms of
:class:`~beam_dpsketch.transforms.DPHeavyHitters` (spec dp-misra-gries), with the privacy cost
stated up front (``--explain``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

from beam_dpsketch.pipelines.options import (
    add_input_arguments,
    add_privacy_arguments,
    budget_from_args,
    jsonable_key,
    noise_source_from_args,
    print_records,
    run_and_collect,
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
            "privacy, using Misra-Gries sketches and the releases of Lebeda and Tetek (spec "
            "dp-misra-gries). Element level by default (neighbouring inputs differ by one row); "
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
    parser.add_argument(
        "--format",
        choices=("table", "json", "parquet"),
        default="table",
        help="table, one JSON document on stdout, or a Parquet file (--output)",
    )
    parser.add_argument("--output", metavar="PATH", help="with --format parquet: where to write")
    parser.set_defaults(run=run)


def heavy_hitters(
    args: argparse.Namespace, beam_args: Sequence[str]
) -> tuple[list[tuple[Any, Any]], DPHeavyHitters, float]:
    """Run the release pipeline for parsed ``args``; returns (records, transform, seconds)."""
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
    records, seconds = run_and_collect(reader, transform, beam_args, explain=args.explain)
    records.sort(key=lambda kv: -kv[1])
    return records, transform, seconds


def run(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``heavy-hitters`` subcommand; returns the exit status."""
    if args.format == "parquet" and not args.output:
        raise ValueError("--format parquet needs --output PATH")
    records, transform, elapsed = heavy_hitters(args, beam_args)
    unit = "user" if args.privacy_id else "element (one row)"
    title = (
        f"# DP heavy hitters of column {args.column!r} of {args.input}: "
        f"({args.epsilon:g}, {args.delta:g})-DP, privacy unit: {unit}, "
        f"mechanism: {transform.mechanism_name}, k={args.k}; {elapsed:.2f} s"
    )
    rows = [{"key": key, "count": round(float(count), 2)} for key, count in records]
    if args.format == "parquet":
        table = pa.table(
            {"key": [jsonable_key(r["key"]) for r in rows], "count": [r["count"] for r in rows]}
        )
        pq.write_table(table, args.output)
        print(f"{title}\n# wrote {len(rows)} keys to {args.output}", file=sys.stderr)
        return 0
    print_records(rows, ["key", "count"], args.format, title=title)
    return 0
