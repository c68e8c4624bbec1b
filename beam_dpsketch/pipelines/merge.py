"""``beam-dpsketch merge``: answer queries over the union of independently released DP sketches.

Federated release: organisations that never share raw data each run their own pipeline and
publish a DP sketch (``beam-dpsketch frequencies ... --sketch-output FILE``, ``beam-dpsketch
quantiles ... --sketch-output FILE``, or ``to_bytes()`` of a released sketch or quantile tree in
Python). This subcommand reads two or more of those files,
sums them (:func:`~beam_dpsketch.sketches.linear.merged.merge_released`: linearity of the
sketches of Zhao et al. [ZQR+22, Section 2.2]; the noise of the sum is derived in
docs/algorithms.md#lin-merge-released) and answers ``--keys`` frequency queries or ``--quantiles`` over the
union of the data sets, with the merged error bound and guarantee. Merging is post-processing of
released sketches: it adds no privacy cost, and it runs no Beam pipeline (nothing but the
published files is read).

Sketches whose kind, shape, hash seed, format version or neighbouring relation differ are
refused, as are exact (non-private) sketches written by ``beam-dpsketch sketch``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beam_dpsketch import serialization
from beam_dpsketch.pipelines.arguments import accept_negative_numbers, option_strings
from beam_dpsketch.pipelines.frequencies import frequency_rows
from beam_dpsketch.pipelines.inputs import convert_query_keys
from beam_dpsketch.pipelines.output import (
    ORDER,
    CliRelease,
    add_output_arguments,
    check_output_arguments,
    plain,
    write_release,
)
from beam_dpsketch.sketches.linear import PRIVATE_LINEAR_SKETCHES
from beam_dpsketch.sketches.linear.merged import guarantee_text, merge_released
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.transforms.frequencies import ERROR_BOUND_CONFIDENCE

__all__ = ["RELEASED_CLASSES", "load_released", "register", "run"]

#: Released (DP) classes a merge accepts, by the kind name their bytes carry.
RELEASED_CLASSES: dict[str, type] = {
    **{cls.KIND: cls for cls in PRIVATE_LINEAR_SKETCHES.values()},
    PrivateDyadicCountSketch.KIND: PrivateDyadicCountSketch,
}


def load_released(path: str) -> Any:
    """The released DP sketch in the file at ``path`` (any Beam filesystem).

    Raises
    ------
    ValueError
        (:class:`~beam_dpsketch.serialization.SketchFormatError` included) for malformed bytes,
        another format version, or a kind that is not a released DP sketch; the message names
        the file and the kind, never a value of the sketch.
    """
    with FileSystems.open(path) as f:
        data = f.read()
    try:
        kind, _, _ = serialization.loads(data)
    except serialization.SketchFormatError as exc:
        raise serialization.SketchFormatError(f"{path}: {exc}") from None
    cls = RELEASED_CLASSES.get(kind)
    if cls is None:
        raise ValueError(
            f"{path} holds a {kind}, which merge cannot sum: it reads released (noisy) linear "
            f"sketches and quantile trees only ({', '.join(sorted(RELEASED_CLASSES))}); an exact "
            "sketch is not a release"
        )
    return cls.from_bytes(data)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``merge`` subcommand."""
    parser = subparsers.add_parser(
        "merge",
        help="answer queries over the union of independently released DP sketches",
        description=(
            "Sum two or more released DP sketches of the same kind, shape, hash seed and "
            "neighbouring relation (files written by `frequencies --sketch-output` or "
            "`quantiles --sketch-output`, or by to_bytes() of a released sketch or quantile tree) and answer --keys frequency "
            "queries or --quantiles over the union of their data sets. Merging is "
            "post-processing: no new privacy cost; each data set keeps the guarantee it was "
            "released with, and the output states the guarantee of the collection (the largest "
            "for --data-sets disjoint, the sum for overlapping). Error bounds follow the summed "
            "noise (Zhao et al. 2022, linearity; the noise of the sum is derived in the docs)."
        ),
    )
    accept_negative_numbers(parser)
    parser.add_argument("sketches", nargs="+", metavar="FILE", help="released sketch files")
    group = parser.add_argument_group("merge")
    group.add_argument(
        "--data-sets",
        choices=("disjoint", "overlapping"),
        required=True,
        help="declare whether a record can be in two of the data sets: disjoint (the "
        "guarantee is the largest single one) or overlapping (the sum)",
    )
    group.add_argument(
        "--keys",
        nargs="+",
        action="extend",
        metavar="KEY",
        help="keys to estimate over the union (linear sketches)",
    )
    group.add_argument(
        "--key-type",
        choices=("str", "int", "bytes"),
        default="str",
        help="type of the sketched keys, to hash --keys as they were (str)",
    )
    group.add_argument(
        "--quantiles",
        type=float,
        nargs="+",
        metavar="Q",
        help="quantile levels in [0, 1] over the union (released quantile trees)",
    )
    group.add_argument(
        "--beta-noise",
        type=float,
        help="failure probability of the merged uniform noise bound (default: the inputs' "
        "smallest)",
    )
    add_output_arguments(parser)
    parser.set_defaults(run=run, known_options=option_strings(parser))


def _quantile_rows(merged: PrivateDyadicCountSketch, levels: Sequence[float]) -> list[dict]:
    values = merged.quantiles(list(levels))
    return [
        {"quantile": float(q), "value": plain(v), ORDER: [float(q)]}
        for q, v in zip(levels, values, strict=True)
    ]


def run(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``merge`` subcommand; returns the exit status."""
    check_output_arguments(args)
    if beam_args:
        raise ValueError(
            f"merge runs no pipeline and takes no Beam options, got {' '.join(beam_args)}"
        )
    if len(args.sketches) < 2:
        raise ValueError("merge needs two or more released sketch files")
    if (args.keys is None) == (args.quantiles is None):
        raise ValueError("pass one of --keys KEY ... or --quantiles Q ...")
    released = [load_released(path) for path in args.sketches]
    disjoint = args.data_sets == "disjoint"
    merged = merge_released(released, disjoint=disjoint, beta_noise=args.beta_noise)
    parameters: dict[str, Any] = {
        "kind": merged.KIND,
        "releases": len(released),
        "data_sets": args.data_sets,
        "neighbouring": merged.neighbouring,
        "width": merged.width,
        "depth": merged.depth,
        "seed": merged.seed,
    }
    # A merged linear sketch states its guarantee in its calibration; a quantile tree in itself.
    facts = getattr(merged, "calibration", merged)
    guarantee_of = (facts.budget_kind, facts.epsilon, facts.delta, facts.rho)
    if isinstance(merged, PrivateDyadicCountSketch):
        if args.keys is not None:
            raise ValueError("--keys needs released frequency sketches; these are quantile trees")
        if any(not 0.0 <= q <= 1.0 for q in args.quantiles):
            raise ValueError("--quantiles must be in [0, 1]")
        rows = sorted(_quantile_rows(merged, args.quantiles), key=lambda r: r[ORDER])
        fields: tuple[str, ...] = ("quantile", "value")
        parameters.update(
            lower=merged.lower,
            upper=merged.upper,
            levels=merged.levels,
            noise=merged.noise,
            level_noise_bounds=[round(float(b), 3) for b in merged.noise_bounds],
            beta_noise=merged.beta_noise,
        )
        what = "quantiles"
    else:
        if args.quantiles is not None:
            raise ValueError(
                "--quantiles needs released quantile trees; these are frequency sketches"
            )
        keys = convert_query_keys(args.keys, args.key_type, None)
        rows = list(frequency_rows(merged, keys, candidates=False, top=None))
        fields = ("key", "estimate", "error_bound")
        cal = merged.calibration
        parameters.update(
            noise=cal.noise,
            noise_scale=cal.scale,
            noise_bound=cal.noise_bound,
            beta_noise=cal.beta_noise,
            offset=cal.offset,
            error_confidence=ERROR_BOUND_CONFIDENCE,
        )
        what = "frequency estimates"
    for row in rows:
        row.pop(ORDER, None)
    text = guarantee_text(guarantee_of, disjoint, len(released))
    release = CliRelease(
        f"{text}; neighbouring relation: {merged.neighbouring}",
        f"merged {merged.KIND} (sum of {len(released)} independent releases)",
        parameters,
        fields,
        rows,
        title=f"DP {what} over the union of {len(released)} released sketches",
    )
    write_release(release, args.format, args.output)
    return 0
