"""``beam-dpsketch frequencies`` and ``beam-dpsketch quantiles``: DP linear sketches on Beam.

``frequencies`` counts the keys named before the run (``--query``, ``--query-keys`` or a
``--candidates`` file) exactly, with noise calibrated for a count (no sketch error; every
declared key, zero counts included), or, when a sketch option is given, releases a private Count
Sketch (or Count-Min or Count-Median sketch) of one column that answers those keys, each estimate
with an ``error_bound`` at 95% confidence; ``quantiles`` releases a private
dyadic Count Sketch of a numeric column and answers ``--q`` quantiles (Zhao, Qiao, Redberg, Agrawal,
El Abbadi and Wang, "Differentially Private Linear Sketches": Section 3, Theorems 3.1-3.2 for the
sketches, Section 4.2 for the private dyadic Count Sketch).
Budgets: ``--epsilon`` alone is pure DP; with ``--delta`` it is (epsilon, delta)-DP.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any

from beam_dpsketch.io import NUMBERS
from beam_dpsketch.io.sinks import active_outputs
from beam_dpsketch.pipelines.arguments import (
    accept_negative_numbers,
    given_options,
    option_strings,
    refuse_given,
)
from beam_dpsketch.pipelines.inputs import (
    add_input_arguments,
    bad_record_options,
    convert_query_keys,
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
from beam_dpsketch.pipelines.release_arguments import (
    add_privacy_arguments,
    budget_from_args,
    noise_source_from_args,
)
from beam_dpsketch.pipelines.sketch import SaveSketch
from beam_dpsketch.transforms import DPFrequencies, DPQuantiles, ReadKeyBatches
from beam_dpsketch.transforms.frequencies import DEFAULT_SKETCH, ERROR_BOUND_CONFIDENCE, SKETCHES
from beam_dpsketch.transforms.quantiles import QuantileTree

__all__ = [
    "DEFAULT_DEPTH",
    "DEFAULT_WIDTH",
    "frequency_rows",
    "quantile_rows",
    "read_query_keys",
    "register",
    "run_frequencies",
    "run_quantiles",
    "tree_quantile_rows",
]

# Three rows: a sketch's noise grows with its depth (L1 sensitivity d), and on skewed streams the
# median of three rows already ignores the rare collisions with heavy keys; 2**18 counters per row
# bring the hashing error below the noise on million-row streams. Measured on a 1.8 M-row
# word-frequency stream, point-query MAE at epsilon 0.1 / 1: 18.1 / 2.0 (PipelineDP with public
# partitions: 10.1 / 1.0), against 25.9 / 5.0 at 5 x 32768; three rows of 2**18 int64 counters hold
# 6 MB whatever the number of keys, and the run takes the same time.
# One row has the least noise (L1 sensitivity 1, the noise of exact counts) but no protection
# against a collision with a heavy key: measured on the words and names streams (1.8 M and 3.8 M
# rows) at epsilon 1, a single row of 2**22 counters (32 MB, twice the run time) gave 0.9-1.5x
# PipelineDP's MAE on random keys but 3.5-8x on the top 100, where one collision of a top key with
# another heavy key dominates; even 2**24 counters (128 MB, 6x the run time) misses on some hash
# seeds. Three rows keep every cell within 2-3x at a fixed 6 MB.
DEFAULT_WIDTH, DEFAULT_DEPTH = 1 << 18, 3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``frequencies`` and ``quantiles`` subcommands."""
    freq = subparsers.add_parser(
        "frequencies",
        help="release DP key frequencies of a column (Count Sketch, or exact counts of "
        "declared keys)",
        description=(
            "Release the frequency of keys named before the run (--query, --query-keys, or a "
            "--candidates file), each with an "
            f"error_bound at {ERROR_BOUND_CONFIDENCE:g} confidence: they are counted exactly "
            "with noise for a count of sensitivity 1 (no sketch error; every declared key is "
            "released, zero counts included). Give a sketch option (--sketch, --width, --depth, "
            "--seed) to release a differentially private Count Sketch (or Count-Min or "
            "Count-Median sketch) of the column instead (noise added once to every cell; Zhao et al. 2022, Section 3), "
            "which answers the same keys with hashing error plus noise, read off the released "
            "sketch (about 2-3x the error of exact counts at the default shape). Element level: "
            "neighbouring inputs differ by one row."
        ),
    )
    accept_negative_numbers(freq)
    add_input_arguments(freq)
    group = freq.add_argument_group("release")
    group.add_argument(
        "--sketch",
        choices=SKETCHES,
        default=DEFAULT_SKETCH,
        help=f"sketch kind ({DEFAULT_SKETCH}: unbiased median estimator; count-median for "
        "general turnstile data)",
    )
    group.add_argument(
        "--width", type=int, default=DEFAULT_WIDTH, help=f"counters per row ({DEFAULT_WIDTH})"
    )
    group.add_argument("--depth", type=int, default=DEFAULT_DEPTH, help=f"rows ({DEFAULT_DEPTH})")
    group.add_argument("--seed", type=int, default=0, help="public hash seed (0)")
    group.add_argument(
        "--query",
        nargs="+",
        action="extend",
        metavar="KEY",
        help="keys to estimate, declared before the run: counted exactly with noise (no sketch "
        "error) unless --sketch, --width, --depth or --seed asks the sketch to answer them",
    )
    group.add_argument(
        "--candidates", metavar="FILE", help="file of public candidate keys, one per line"
    )
    group.add_argument(
        "--query-keys",
        metavar="FILE|K1,K2,...",
        help="declared public keys (a file with one key per line, or a comma-separated list): "
        "release their exact counts with noise instead of a sketch",
    )
    group.add_argument(
        "--top", type=int, metavar="N", help="with --candidates or --query-keys: the N largest"
    )
    group.add_argument(
        "--sketch-output",
        metavar="PATH",
        help="also write the released DP sketch here (versioned bytes, any Beam filesystem), "
        "for `beam-dpsketch merge`; implies a sketch release",
    )
    add_privacy_arguments(group)
    add_output_arguments(freq)
    freq.set_defaults(run=run_frequencies, known_options=option_strings(freq))

    quant = subparsers.add_parser(
        "quantiles",
        help="release DP quantiles of a numeric column (private dyadic Count Sketch)",
        description=(
            "Release differentially private quantiles of one numeric column with a private "
            "dyadic Count Sketch over the declared public range [--lower, --upper] (Zhao et al. "
            "2022, Section 4.2), as a tree of --branching children per node whose levels are "
            "counted exactly up to --exact-nodes nodes; on a range wider than that, leaves hold "
            "several values and a quantile inside a leaf is interpolated. Integer columns are used as they are; declare "
            "--resolution for fractional values (without it a fraction counts as its floor). "
            "Integer and float columns are read as numbers, CSV and text cells parsed as "
            "numbers of any size (1.5, 1e3, 18446744073709551615, nan). Every value is mapped "
            "into the bounds before it is counted: values below --lower count as --lower, "
            "above --upper (and NaN) as --upper, so no number can make the run fail (a cell "
            "that is not a number fails naming its file and row)."
        ),
    )
    accept_negative_numbers(quant)
    add_input_arguments(quant)
    group = quant.add_argument_group("release")
    group.add_argument("--q", type=float, nargs="+", required=True, help="quantiles in [0, 1]")
    group.add_argument("--lower", type=float, required=True, help="public lower bound")
    group.add_argument("--upper", type=float, required=True, help="public upper bound")
    group.add_argument("--resolution", type=float, help="bin width for fractional values")
    group.add_argument(
        "--branching",
        type=int,
        default=32,
        help="children per tree node, a power of two (32; 2 is the paper's dyadic tree)",
    )
    group.add_argument(
        "--exact-nodes",
        type=int,
        default=1 << 15,
        help="count levels with at most this many nodes exactly (32768; bounds the memory)",
    )
    group.add_argument(
        "--leaf-bits",
        type=int,
        help="leaves of 2**LEAF_BITS values (default: the finest for which every level is "
        "exact; 0 = one value per leaf, with Count Sketch levels on a wide range)",
    )
    group.add_argument(
        "--width", type=int, default=1024, help="counters per row of sketched levels (1024)"
    )
    group.add_argument("--depth", type=int, default=5, help="rows of sketched levels (5)")
    group.add_argument(
        "--sketch-output",
        metavar="PATH",
        help="also write the released quantile tree here (versioned bytes, any Beam "
        "filesystem), for `beam-dpsketch merge`; integer values only (no --resolution)",
    )
    add_privacy_arguments(group)
    add_output_arguments(quant)
    quant.set_defaults(run=run_quantiles, known_options=option_strings(quant))


def frequency_rows(
    released: Any, keys: Sequence[Any], candidates: bool, top: int | None
) -> Iterator[dict[str, Any]]:
    """``key``/``estimate``/``error_bound`` rows of a release (a sketch or declared-key counts):
    every query key in query order, or the largest ``top`` candidates (all with ``top=None``),
    largest first. ``error_bound`` is the release's per-estimate bound at
    :data:`~beam_dpsketch.transforms.frequencies.ERROR_BOUND_CONFIDENCE` (post-processing of
    released and public values)."""
    if candidates:
        pairs = released.heavy_hitters(list(keys), top=top)
    else:
        pairs = zip(keys, released.estimate(list(keys)).tolist(), strict=True)
    bound = round(float(released.error_bound(ERROR_BOUND_CONFIDENCE)), 2)
    for i, (key, value) in enumerate(pairs):
        yield {
            "key": plain(key),
            "estimate": round(float(value), 2),
            "error_bound": bound,
            ORDER: [i],
        }


def read_query_keys(spec: str) -> list[str]:
    """The declared keys of ``--query-keys``: a file of keys (one per line, as for
    ``--candidates``) if ``spec`` names an existing file, else a comma-separated list.

    Raises
    ------
    ValueError
        If no key is given.
    """
    if os.path.isfile(spec):
        return read_candidates(spec)
    keys = [k.strip() for k in spec.split(",") if k.strip()]
    if not keys:
        raise ValueError("--query-keys needs a file of keys or a comma-separated list of keys")
    return keys


def quantile_rows(record: Any) -> Iterator[dict[str, Any]]:
    """One ``quantile``/``value`` row per released quantile; ascending quantile levels."""
    quantile = float(plain(record.quantile))
    yield {"quantile": quantile, "value": plain(record.value), ORDER: [quantile]}


def _sketch_output_sides(args: argparse.Namespace) -> dict[str, Any] | None:
    """The side step that writes the released object to ``--sketch-output``, if given.

    The released object is what every row is read from: publishing it adds nothing to the
    release. It is written under a temporary name and renamed with the command's other
    outputs, so a failed run leaves no file there.
    """
    path = getattr(args, "sketch_output", None)
    if not path:
        return None
    outputs = active_outputs()
    saved_to = path
    if outputs is not None:
        saved_to = outputs.temporary_for(path)
        outputs.add_file(saved_to, path)
    return {"saved": SaveSketch(saved_to)}


def tree_quantile_rows(tree: Any, levels: Sequence[float]) -> Iterator[dict[str, Any]]:
    """``quantile``/``value`` rows answered from a released quantile tree (post-processing),
    the values :class:`~beam_dpsketch.transforms.DPQuantiles` itself would release."""
    values = tree.quantiles(list(levels))
    for q, v in zip(levels, values, strict=True):
        yield {"quantile": float(q), "value": plain(v), ORDER: [float(q)]}


def _run(
    args: argparse.Namespace,
    beam_args: Sequence[str],
    reader: Any,
    transform: Any,
    to_rows: Any,
    fields: tuple[str, ...],
    parameters: dict[str, Any],
    title: str,
    released_sides: dict[str, Any] | None = None,
) -> int:
    rows = run_release(
        reader,
        transform,
        to_rows,
        beam_args,
        explain=args.explain,
        released_sides=released_sides,
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
    modes = [bool(args.query), bool(args.candidates), args.query_keys is not None]
    if sum(modes) != 1:
        raise ValueError("pass one of --query KEY ..., --candidates FILE or --query-keys KEYS")
    if args.top is not None and not (args.candidates or args.query_keys is not None):
        raise ValueError("--top applies with --candidates or --query-keys only")
    sketch_options = given_options(args, "sketch", "width", "depth", "seed", "sketch_output")
    # Keys named on the command line or in a --candidates file are known before the run: they
    # are counted exactly (public partitions, no sketch error) unless a sketch option asks for
    # the sketch to answer them.
    declared_query = bool(args.query or args.candidates) and not sketch_options
    public_keys = args.query_keys is not None or declared_query
    if args.query_keys is not None:
        wrong = sketch_options
        if wrong:
            raise ValueError(
                f"{wrong[0]} does not apply with --query-keys (exact counts, no sketch)"
            )
    reader = ReadKeyBatches(
        args.input,
        args.column,
        args.input_format,
        key_type=args.key_type,
        **bad_record_options(args),
    )
    if args.query_keys is not None:
        raw = read_query_keys(args.query_keys)
    else:
        raw = args.query or read_candidates(args.candidates)
    keys = convert_query_keys(raw, reader.key_type, args.column)
    if public_keys:
        transform = DPFrequencies(
            budget=budget_from_args(args),
            query_keys=keys,
            noise_source=noise_source_from_args(args),
            label="frequencies",
        )
        parameters: dict[str, Any] = {
            "column": args.column,
            "query_keys": len(dict.fromkeys(keys)),
            "queries": (
                "public_keys"
                if args.query_keys is not None
                else ("candidates" if args.candidates else "keys")
            ),
            "top": args.top,
        }
    else:
        sketch, width, depth, seed = args.sketch, args.width, args.depth, args.seed
        transform = DPFrequencies(
            width,
            depth,
            budget_from_args(args),
            seed=seed,
            sketch=sketch,
            noise_source=noise_source_from_args(args),
            label="frequencies",
        )
        parameters = {
            "column": args.column,
            "sketch": sketch,
            "width": width,
            "depth": depth,
            "seed": seed,
            "queries": "candidates" if args.candidates else "keys",
            "top": args.top,
        }
    parameters["error_confidence"] = ERROR_BOUND_CONFIDENCE
    released_sides = _sketch_output_sides(args)
    if args.query_keys is not None:
        # Every declared key is a row (zero counts included), largest first with --top.
        keys = list(dict.fromkeys(keys))
    return _run(
        args,
        beam_args,
        reader,
        transform,
        functools.partial(
            frequency_rows,
            keys=keys,
            candidates=bool(args.candidates)
            or (args.query_keys is not None and args.top is not None),
            top=args.top,
        ),
        ("key", "estimate", "error_bound"),
        parameters,
        f"DP frequency estimates of column {args.column!r} of {args.input}",
        released_sides,
    )


def run_quantiles(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``quantiles`` subcommand; returns the exit status."""
    check_output_arguments(args)
    refuse_given(args, ("key_type",), "in quantiles (values are read as numbers)")
    # Numbers, not keys: ints and floats of any size reach DPQuantiles, which maps each one
    # into [lower, upper] (clamping, NaN to upper, floor without --resolution).
    reader = ReadKeyBatches(
        args.input, args.column, args.input_format, key_type=NUMBERS, **bad_record_options(args)
    )
    tree_output = bool(getattr(args, "sketch_output", None))
    if tree_output:
        refuse_given(args, ("resolution",), "with --sketch-output (the tree holds integer values)")
    transform = DPQuantiles(
        args.q,
        args.lower,
        args.upper,
        budget_from_args(args),
        tree=QuantileTree(
            branching=args.branching,
            exact_nodes=args.exact_nodes,
            leaf_bits=args.leaf_bits,
            width=args.width,
            depth=args.depth,
        ),
        resolution=args.resolution,
        noise_source=noise_source_from_args(args),
        label="quantiles",
        output="tree" if tree_output else "quantiles",
    )
    parameters = {
        "column": args.column,
        "quantiles": list(args.q),
        "lower": args.lower,
        "upper": args.upper,
        "resolution": args.resolution,
        "width": args.width,
        "depth": args.depth,
        "branching": args.branching,
        "exact_nodes": args.exact_nodes,
        "leaf_bits": transform.mechanism.tree["leaf_bits"],
    }
    return _run(
        args,
        beam_args,
        reader,
        transform,
        functools.partial(tree_quantile_rows, levels=args.q) if tree_output else quantile_rows,
        ("quantile", "value"),
        parameters,
        f"DP quantiles of column {args.column!r} of {args.input} in "
        f"[{args.lower:g}, {args.upper:g}]",
        _sketch_output_sides(args),
    )
