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
import sys
from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any

import apache_beam as beam

from beam_dpsketch.io import ReadKeyPairs
from beam_dpsketch.pipelines.arguments import option_strings, refuse_given
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
    DEFAULT_DELTA,
    add_privacy_arguments,
    budget_from_args,
    noise_source_from_args,
)
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
from beam_dpsketch.sketches.misra_gries.release import ERROR_CONFIDENCE
from beam_dpsketch.sketches.misra_gries.sizing import (
    DEFAULT_K,
    SELECT_COUNT_K,
    k_for_memory,
    suggest_k,
)
from beam_dpsketch.transforms import DPHeavyHitters, ReadKeyBatches
from beam_dpsketch.transforms.heavy_hitters import (
    HEAVY_HITTERS_DEFAULT_MECHANISM,
    MECHANISMS,
    SELECT_COUNT,
    USER_DEFAULT_MECHANISM,
    USER_EXACT,
    DesignB,
    DesignD,
    HeavyHitterMechanism,
    SelectThenCount,
    SpaceSavingDP,
    UntrustedShards,
    UserPurePP,
)

__all__ = [
    "CLI_DEFAULT_MECHANISM",
    "CLI_DEFAULT_USER_MECHANISM",
    "DEFAULT_TOP",
    "heavy_hitters",
    "k_from_args",
    "register",
    "run",
    "shortfall_message",
]

#: Keys printed when ``--top`` is not given (at most ``--k``).
DEFAULT_TOP = 100

#: The release when ``--mechanism`` is not given, at element level, the same as
#: :class:`~beam_dpsketch.transforms.DPHeavyHitters`' default: its counts carry only noise error
#: (no sketch error) in ``O(k)`` memory. The command reads files (one global window), so the
#: once-per-window trigger it needs always holds.
CLI_DEFAULT_MECHANISM = HEAVY_HITTERS_DEFAULT_MECHANISM
#: At user level: exact bounded counts, noise that grows with ``sqrt(--max-contributions)``; its
#: memory grows with the distinct keys, as PipelineDP's does.
CLI_DEFAULT_USER_MECHANISM = USER_DEFAULT_MECHANISM


#: The sharded sequential releases and their classes (``--shards``).
_SHARDED: dict[str, Any] = {DesignD.key: DesignD, UntrustedShards.key: UntrustedShards}


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
    sizing = group.add_mutually_exclusive_group()
    sizing.add_argument(
        "--k",
        type=int,
        help=f"Misra-Gries counters (default {SELECT_COUNT_K} for select-then-count at element "
        f"level, {DEFAULT_K} otherwise): up to k distinct keys per accumulator are counted "
        "exactly, and then select-then-count selects from the exact counts; beyond that keys "
        "above about rows/(k+1) plus the noise threshold are released",
    )
    sizing.add_argument(
        "--max-error",
        type=float,
        metavar="E",
        help="choose k so that the sketch error rows/(k+1) is at most E for --expected-rows",
    )
    sizing.add_argument(
        "--memory",
        type=int,
        metavar="BYTES",
        help="choose the largest k whose design-b aggregate (max-shards * k keys, about 200 "
        "bytes each for short keys) fits in BYTES",
    )
    group.add_argument(
        "--expected-rows",
        type=int,
        metavar="N",
        help="with --max-error: planned number of input rows (a public figure, not counted)",
    )
    group.add_argument(
        "--top",
        type=_top_arg,
        metavar="N|all",
        help=f"how many keys to print (default: {DEFAULT_TOP}, at most --k); 'all' prints every "
        "released key",
    )
    add_privacy_arguments(group, delta=DEFAULT_DELTA)
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
        help="release. Default select-then-count (DP selection of at most --k keys, then "
        "their noisy exact counts in a second pass, O(k) memory); with --privacy-id, default "
        "user-exact (exact bounded counts with GSHM at l=--max-contributions: noise grows with "
        "its square root; memory grows with the distinct keys). pamg-gshm: user level in "
        "memory of 4 k keys (hashed sketches), the same noise as user-exact. design-b: one "
        "pass, any windowing. user-pure-pp: user level, pure epsilon-DP over a declared "
        "--universe (noise grows with --max-contributions). space-saving: one SpaceSaving "
        "sketch of --k counters, values that over-count by at most its minimum",
    )
    group.add_argument(
        "--selection-fraction",
        type=float,
        metavar="F",
        help="select-then-count: share of epsilon spent on the selection (default 0.5)",
    )
    group.add_argument(
        "--max-shards",
        type=int,
        default=256,
        help="design-b and select-then-count (and --memory): maximum Beam accumulators merged "
        "per window (memory bound; 256)",
    )
    group.add_argument(
        "--shards",
        type=int,
        metavar="S",
        help="design-d and untrusted-shards: number of shards, each one sequential sketch "
        "released with PMG (default 8; untrusted-shards at most 24)",
    )
    group.add_argument(
        "--holder",
        metavar="COL",
        help="untrusted-shards (required there): the column naming each row's data holder; "
        "each holder's rows are one shard's, and the shards' releases are summed",
    )
    group.add_argument(
        "--universe",
        metavar="FILE",
        help="user-pure-pp (required there): the declared public key universe, one key per line "
        "(ints when every line is one); pure epsilon-DP with noise on every key of it "
        "(--delta is not spent)",
    )
    add_output_arguments(parser)
    parser.set_defaults(run=run, known_options=option_strings(parser))


def _rows(record: tuple[Any, Any]) -> Iterator[dict[str, Any]]:
    """One ``key``/``estimate``/``error_bound`` row per released ``(key, noisy count)``; largest
    first. ``error_bound`` is ``None`` for releases that state none."""
    # The first two fields; a row may carry its bound in further fields.
    key, count = record[0], record[1]
    key, estimate = plain(key), round(float(count), 2)
    bound = getattr(record, "error_bound", None)
    error_bound = None if bound is None else round(float(bound), 2)
    yield {
        "key": key,
        "estimate": estimate,
        "error_bound": error_bound,
        ORDER: [-estimate, json.dumps(key)],
    }


def _top_arg(value: str) -> int | str:
    """``--top``: a positive int or ``all``."""
    if value == "all":
        return value
    try:
        top = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--top must be a positive int or 'all', got {value!r}"
        ) from None
    if top < 1:
        raise argparse.ArgumentTypeError(f"--top must be a positive int or 'all', got {value!r}")
    return top


def mechanism_of(args: argparse.Namespace) -> str:
    """``--mechanism``, or the command's default at its level."""
    if args.mechanism is not None:
        return args.mechanism
    return CLI_DEFAULT_MECHANISM if args.privacy_id is None else CLI_DEFAULT_USER_MECHANISM


def k_from_args(args: argparse.Namespace) -> int:
    """``--k``, or the k that ``--max-error``/``--memory`` ask for, or the default."""
    if args.expected_rows is not None and args.max_error is None:
        raise ValueError("--expected-rows applies with --max-error only")
    if args.max_error is not None:
        if args.expected_rows is None:
            raise ValueError("--max-error needs --expected-rows (the planned number of rows)")
        return suggest_k(max_error=args.max_error, n=args.expected_rows)
    if args.memory is not None:
        return k_for_memory(args.memory, max_shards=args.max_shards)
    if args.k is not None:
        return args.k
    if mechanism_of(args) == SELECT_COUNT and args.privacy_id is None:
        return SELECT_COUNT_K
    return DEFAULT_K


def shortfall_message(
    released: int,
    top: int,
    k: int,
    epsilon: float,
    threshold: float | None,
    mechanism: str | None = None,
    *,
    user_level: bool = False,
    max_contributions: int = 1,
) -> str:
    """Why fewer than ``top`` keys were released, and the option that releases more.

    The advice is the lever that lowers the bar a key must clear under ``mechanism`` (the
    command's default at the level when ``None``): ``--k`` where the Misra-Gries undercount
    ``rows/(k+1)`` dominates, ``--max-contributions`` for ``user-exact`` (no sketch: ``--k``
    plays no part), ``pamg-gshm`` and user-level select-then-count (their thresholds grow only
    with its square root), ``--epsilon`` everywhere, ``--selection-fraction`` for
    select-then-count, and the release to switch to where one releases more from the same input.

    Only public values enter it: the number of released rows (itself released), ``top``, ``k``,
    ``epsilon``, ``max_contributions``, the mechanism and its public threshold; nothing about
    the unreleased keys.
    """
    if mechanism is None:
        mechanism = CLI_DEFAULT_USER_MECHANISM if user_level else CLI_DEFAULT_MECHANISM
    cut = "the noise threshold" if threshold is None else f"the threshold {threshold:.4g}"
    m = max_contributions
    head = f"# heavy-hitters: {released} of the {top} requested keys were released. "
    tail = " Every other key stays hidden."
    if mechanism == USER_EXACT:
        return (
            # Names the release that ran without "--mechanism": no advice to pick it again.
            head + f"With the {USER_EXACT} release a key is released only when its noisy count of "
            f"users passes {cut} (epsilon={epsilon:g}, --max-contributions={m}): each user "
            f"counts once for each of at most {m} of its distinct keys, and no sketch is "
            "involved, so --k changes nothing." + tail + " To release more keys raise "
            "--max-contributions towards the number of distinct keys a typical user has (the "
            "threshold grows only with its square root), or raise --epsilon."
        )
    if mechanism == "pamg-gshm":
        return (
            head + f"With --mechanism pamg-gshm a key is released only when its noisy count of "
            f"users (one hashed sketch counter per key) passes {cut}, which grows with the "
            f"square root of m (epsilon={epsilon:g}, m=--max-contributions={m}) but not with "
            "k; a key sharing its hash bucket with other keys is undercounted by their users."
            + tail
            + " To release more keys raise --max-contributions towards the number of distinct "
            "keys a typical user has (each user then counts for more of its keys while the "
            "threshold grows only with the square root of m) or raise --epsilon; a larger --k "
            f"(4 k buckets) only reduces the undercount of shared buckets; --mechanism "
            f"{USER_EXACT} (the default) counts exactly, where the distinct keys fit in memory."
        )
    if mechanism == SELECT_COUNT and user_level:
        return (
            head + f"With --mechanism {SELECT_COUNT} at user level a key is released only when its "
            f"noisy selection estimate (the first pass, on hashed sketches) passes {cut}, which "
            f"grows with the square root of m (epsilon={epsilon:g}, m=--max-contributions={m}) "
            "but not with k." + tail + " To release more keys raise --epsilon, raise "
            "--max-contributions towards the number of distinct keys a typical user has (the "
            f"threshold grows only with its square root), or use --mechanism {USER_EXACT} (the "
            "default at user level: all of epsilon on one release; memory grows with the "
            "distinct keys)."
        )
    if mechanism in ("merged-gshm", "merged-laplace"):
        return (
            head + f"With --mechanism {mechanism} a key is released only when its noisy sketch "
            f"count passes {cut}, which grows with k (k={k}, epsilon={epsilon:g}), while the "
            "sketch undercounts a key by up to rows/(k+1)." + tail + " To release more keys "
            "raise --epsilon, or move --k towards the number of keys you expect (a smaller k "
            f"lowers the threshold, a larger k the undercount); --mechanism {SELECT_COUNT} (the "
            "default) or design-b releases more keys at the same k."
        )
    if mechanism == SpaceSavingDP.key:
        return (
            head + f"With --mechanism {mechanism} a key is released only when its noisy count "
            f"exceeds a noisy upper bound on the sketch's minimum count plus {cut} "
            f"(k={k}, epsilon={epsilon:g}); SpaceSaving counts over-count by at most that "
            "minimum." + tail + " To release more keys raise --epsilon, or raise --k (more "
            "counters lower the sketch's minimum count)."
        )
    if mechanism == UserPurePP.key:
        return (
            head + f"With --mechanism {mechanism} the release lists the --k largest noisy counts "
            "over the declared --universe (at most its number of keys; fewer when a large "
            "universe is drawn above a noise cutoff), with noise that grows with "
            f"--max-contributions={m} (epsilon={epsilon:g}, k={k})."
            + tail
            + " To release more keys raise --k, declare the keys you expect in --universe, or "
            "raise --epsilon."
        )
    stage = "selection estimate (the first pass)" if mechanism == SELECT_COUNT else "sketch count"
    memory = "; memory grows with max-shards * k" if mechanism in ("design-b", SELECT_COUNT) else ""
    levers = f"raise --k (or --max-error/--memory{memory})"
    if mechanism == SELECT_COUNT:
        levers += (
            ", --epsilon, or --selection-fraction (the share of epsilon spent on the "
            "selection: a larger share lowers the threshold)"
        )
    else:
        levers += " or --epsilon"
    return (
        head + f"A key is released only when its noisy {stage} passes {cut}, i.e. when its true "
        f"count exceeds about rows/(k+1) + threshold (k={k}, epsilon={epsilon:g})."
        + tail
        + f" To release more keys {levers}."
    )


def _check_options_in_effect(args: argparse.Namespace) -> None:
    """Refuse options the user gave that the chosen release would not read.

    ``--max-shards`` bounds the design-b and select-then-count aggregates (and sizes
    ``--memory``); ``--selection-fraction`` splits select-then-count's budget; user-level input
    keeps the key column's type. (``--k`` is read by every mechanism: with ``user-exact``, which
    builds no Misra-Gries sketch, it still sets the default ``--top``.)

    Raises
    ------
    ValueError
        Naming the options and why they would have no effect.
    """
    chosen = mechanism_of(args)
    if chosen not in ("design-b", SELECT_COUNT) and args.memory is None:
        refuse_given(
            args,
            ("max_shards",),
            f"with --mechanism {chosen} (it bounds the design-b and {SELECT_COUNT} aggregates, "
            "and sizes --memory)",
        )
    if chosen != SELECT_COUNT:
        refuse_given(
            args,
            ("selection_fraction",),
            f"with --mechanism {chosen} (it splits the budget of {SELECT_COUNT})",
        )
    if args.privacy_id is not None:
        refuse_given(
            args, ("key_type",), "with --privacy-id (user-level keys keep the column's type)"
        )
    if chosen not in _SHARDED:
        refuse_given(
            args, ("shards",), f"with --mechanism {chosen} (it shards {' and '.join(_SHARDED)})"
        )
    if chosen != UntrustedShards.key:
        refuse_given(
            args, ("holder",), f"with --mechanism {chosen} (it names untrusted-shards' holders)"
        )
    elif args.holder is None:
        raise ValueError("--holder: --mechanism untrusted-shards needs the data holder column")
    if chosen != UserPurePP.key:
        refuse_given(
            args, ("universe",), f"with --mechanism {chosen} (it declares user-pure-pp's keys)"
        )
    elif args.universe is None:
        raise ValueError("--universe: --mechanism user-pure-pp needs the declared key universe")


def read_universe(path: str) -> list[str] | list[int]:
    """The keys of a ``--universe`` file: one per line, blank lines skipped, as ints when every
    line is an int (the key type a numeric column is read with).

    Raises
    ------
    ValueError
        Naming ``--universe`` if the file has no keys.
    """
    with open(path, encoding="utf-8") as f:
        keys = [line.rstrip("\n") for line in f if line.strip()]
    if not keys:
        raise ValueError("--universe: the file has no keys")
    try:
        return [int(key) for key in keys]
    except ValueError:
        return keys


def heavy_hitters(args: argparse.Namespace, beam_args: Sequence[str]) -> CliRelease:
    """Run the release pipeline for parsed ``args`` and return what the command writes."""
    _check_options_in_effect(args)
    k = k_from_args(args)
    if k < 1:
        raise ValueError(f"--k must be a positive int, got {k}")
    # --top all: every released key (at most k); no shortfall to report then.
    top = min(DEFAULT_TOP, k) if args.top is None else None if args.top == "all" else args.top
    if args.max_contributions is not None and args.privacy_id is None:
        raise ValueError("--max-contributions applies with --privacy-id only")
    chosen = mechanism_of(args)
    # user-pure-pp is pure epsilon-DP: the command's default --delta is not spent.
    budget = (
        PrivacyBudget.pure(args.epsilon) if chosen == UserPurePP.key else budget_from_args(args)
    )
    options: dict[str, Any] = {
        "top": top,
        "noise_source": noise_source_from_args(args),
        "label": "heavy-hitters",
    }
    # The mechanism's own options (refused above for the mechanisms that do not read them).
    mechanism_options: dict[str, Any] = {}
    if chosen in (DesignB.key, SELECT_COUNT):
        mechanism_options["max_shards"] = args.max_shards
    if args.selection_fraction is not None:
        mechanism_options["selection_fraction"] = args.selection_fraction
    if args.shards is not None:
        mechanism_options["shards"] = args.shards
    if args.holder is not None:
        # Each row's key is (holder, key): the holder decides the row's shard.
        reader: beam.PTransform = ReadKeyPairs(
            args.input,
            args.column,
            args.holder,
            args.input_format,
            **bad_record_options(args),
        )
    elif args.privacy_id is not None:
        reader = ReadKeyPairs(
            args.input,
            args.column,
            args.privacy_id,
            args.input_format,
            **bad_record_options(args),
        )
        options.update(
            privacy_unit=PrivacyUnit(
                id=itemgetter(0), max_contributions=args.max_contributions or 1
            ),
            key_fn=itemgetter(1),
        )
    else:
        reader = ReadKeyBatches(
            args.input,
            args.column,
            args.input_format,
            key_type=args.key_type,
            **bad_record_options(args),
        )
        if chosen == SELECT_COUNT:
            # The count pass reads the files again rather than having the runner hold every
            # row until the selection is final: memory stays flat in the input size.
            mechanism_options["recount_source"] = ReadKeyBatches(
                args.input,
                args.column,
                args.input_format,
                key_type=args.key_type,
                **bad_record_options(args),
            )
    if chosen == DesignB.key:
        mechanism: HeavyHitterMechanism | str = DesignB(k, **mechanism_options)
    elif chosen == SELECT_COUNT:
        mechanism = SelectThenCount(k, **mechanism_options)
    elif chosen in _SHARDED:
        mechanism = _SHARDED[chosen](k, **mechanism_options)
    elif chosen == UserPurePP.key:
        mechanism = UserPurePP(k, universe=read_universe(args.universe))
    else:
        mechanism = chosen
    transform = DPHeavyHitters(k, budget, mechanism=mechanism, **options)
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
    parameters: dict[str, Any] = {"column": args.column, "k": k, "top": top}
    if args.privacy_id is not None:
        parameters.update(privacy_id=args.privacy_id, max_contributions=args.max_contributions or 1)
    if chosen == "design-b":
        parameters["max_shards"] = args.max_shards
        if args.privacy_id is None:
            parameters["error_confidence"] = ERROR_CONFIDENCE
    if chosen in _SHARDED:
        parameters["shards"] = transform.mechanism.shards
        parameters["error_confidence"] = ERROR_CONFIDENCE
        if args.holder is not None:
            parameters["holder"] = args.holder
    if chosen == SELECT_COUNT:
        parameters["max_shards"] = args.max_shards
        parameters["error_confidence"] = ERROR_CONFIDENCE
        # Public calibration of the selection, which decides which keys are counted.
        details = transform.accountant.all_charges()[-1][1].details
        parameters["selection_threshold"] = details["selection_threshold"]
        if "selection_exact_threshold" in details:
            # Used instead when every accumulator held all of its distinct keys.
            parameters["selection_exact_threshold"] = details["selection_exact_threshold"]
        parameters["selection_fraction"] = transform.mechanism.selection.selection_fraction
    parameters.update(calibration)
    return CliRelease(
        guarantee,
        mechanism,
        parameters,
        ("key", "estimate", "error_bound"),
        run_.rows,
        title=f"DP heavy hitters of column {args.column!r} of {args.input}",
    )


def run(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``heavy-hitters`` subcommand; returns the exit status."""
    check_output_arguments(args)
    release = heavy_hitters(args, beam_args)
    write_release(release, args.format, args.output)
    top = release.parameters["top"]
    if top is not None and len(release.rows) < top:
        # Not an error: hiding keys below the threshold is what the release must do.
        print(
            shortfall_message(
                len(release.rows),
                top,
                release.parameters["k"],
                args.epsilon,
                release.parameters.get("threshold", release.parameters.get("selection_threshold")),
                mechanism_of(args),
                user_level=args.privacy_id is not None,
                max_contributions=args.max_contributions or 1,
            ),
            file=sys.stderr,
        )
    return 0
