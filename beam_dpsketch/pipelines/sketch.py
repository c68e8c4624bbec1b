"""``beam-dpsketch sketch``: build one exact sketch of a column with Beam and query it.

The output is **not** differentially private: it shows the exact sketch estimates (what the DP
releases add noise to), for inspection and testing.

The pipeline answers the queries from the sketch and writes the rows through a Beam sink
(:mod:`beam_dpsketch.pipelines.output`, the same schema as the DP subcommands, with the guarantee
``NOT PRIVATE (exact sketch)``); ``--save-sketch PATH`` also writes the serialized sketch through
Beam's filesystems (on a remote runner, give a path the workers can reach, e.g. ``gs://...``).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.hashing import encode_key
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
)
from beam_dpsketch.pipelines.output import (
    NOT_PRIVATE,
    ORDER,
    CliRelease,
    add_output_arguments,
    check_output_arguments,
    plain,
    run_release,
    write_release,
)
from beam_dpsketch.sketches import CountMedianSketch, MisraGries
from beam_dpsketch.transforms import ReadKeyBatches, SketchGlobally, SketchSpec

__all__ = [
    "NOT_PRIVATE_NOTE",
    "SaveSketch",
    "load_sketch",
    "register",
    "run",
    "sketch_rows",
    "spec_from_args",
    "top_items",
]

NOT_PRIVATE_NOTE = "exact sketch estimates, NOT differentially private"
_DEFAULTS = {"width": 2048, "depth": 5, "seed": 0, "k": 100}
_LINEAR_ONLY = ("width", "depth", "seed")


def _write_sketch(sketch: Any, path: str) -> str:
    with FileSystems.create(path) as f:
        f.write(sketch.to_bytes())
    return path


class SaveSketch(beam.PTransform):
    """Write the single sketch of a globally windowed PCollection to ``path`` (any filesystem).

    Rewriting the same bytes on a retried bundle is harmless, so the write is idempotent.
    """

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def expand(self, sketches):
        return sketches | "Write" >> beam.Map(_write_sketch, self._path)


def load_sketch(path: str, sketch_type: type) -> Any:
    """Read a sketch written by :class:`SaveSketch` (or ``to_bytes``) back from ``path``."""
    with FileSystems.open(path) as f:
        return sketch_type.from_bytes(f.read())


def top_items(sketch: MisraGries, n: int) -> list[tuple[Any, int]]:
    """The ``n`` keys with the largest Misra-Gries counters; ties broken by canonical key order."""
    items = sorted(sketch.to_dict().items(), key=lambda kv: (-kv[1], encode_key(kv[0])))
    return items[:n]


def _number(value: Any) -> int | float:
    """A Python number for JSON and tables: Count Sketch medians of integers print as ints."""
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sketch`` subcommand."""
    parser = subparsers.add_parser(
        "sketch",
        help="build an exact (non-private) sketch of a column and query it",
        description=(
            "Build a Count-Min sketch, Count Sketch or Misra-Gries summary of one column with an "
            "Apache Beam pipeline, then print the estimates of --query keys, or the --top "
            "heavy hitters of Misra-Gries. The estimates are exact sketch estimates and NOT "
            "differentially private. Unknown options are Beam pipeline options (default runner: "
            "FnApiRunner in-process)."
        ),
    )
    accept_negative_numbers(parser)
    add_input_arguments(parser)
    group = parser.add_argument_group("sketch")
    group.add_argument(
        "--sketch",
        choices=("count-min", "count-sketch", "count-median", "misra-gries"),
        default="count-min",
        help="sketch to build (default: count-min)",
    )
    group.add_argument(
        "--width",
        type=int,
        default=_DEFAULTS["width"],
        help=f"counters per row (linear sketches; {_DEFAULTS['width']})",
    )
    group.add_argument(
        "--depth",
        type=int,
        default=_DEFAULTS["depth"],
        help=f"rows (linear sketches; default {_DEFAULTS['depth']})",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=_DEFAULTS["seed"],
        help=f"hash seed (linear sketches; default {_DEFAULTS['seed']})",
    )
    group.add_argument(
        "--k",
        type=int,
        default=_DEFAULTS["k"],
        help=f"counters (misra-gries; default {_DEFAULTS['k']})",
    )
    group.add_argument(
        "--query",
        nargs="+",
        action="extend",
        metavar="KEY",
        help="keys to estimate (repeatable); converted to the column's key type",
    )
    group.add_argument(
        "--top", type=int, metavar="N", help="misra-gries: print the N largest counters (10)"
    )
    group.add_argument(
        "--save-sketch", metavar="PATH", help="also write the serialized sketch here"
    )
    add_output_arguments(parser)
    parser.set_defaults(run=run, known_options=option_strings(parser))


def spec_from_args(args: argparse.Namespace) -> SketchSpec:
    """The :class:`SketchSpec` for ``--sketch`` and its parameters.

    Raises
    ------
    ValueError
        For a parameter of another sketch kind (e.g. ``--k`` with count-min), or an invalid
        value (the message names the parameter).
    """
    # A namespace from another parser may hold None for an option it did not set.
    value = {
        name: _DEFAULTS[name] if getattr(args, name, None) is None else getattr(args, name)
        for name in (*_LINEAR_ONLY, "k")
    }
    if args.sketch == "misra-gries":
        wrong = given_options(args, *_LINEAR_ONLY)
        if wrong:
            raise ValueError(
                f"{', '.join(wrong)} only apply to count-min, count-sketch and count-median"
            )
        return SketchSpec.misra_gries(value["k"])
    if given_options(args, "k"):
        raise ValueError("--k only applies to misra-gries")
    params = {n: value[n] for n in _LINEAR_ONLY}
    if args.sketch == "count-min":
        return SketchSpec.count_min(**params)
    if args.sketch == "count-median":
        return SketchSpec.count_median(**params)
    return SketchSpec.count_sketch(**params)


def _describe(spec: SketchSpec) -> str:
    params = ", ".join(f"{k}={v}" for k, v in spec.params.items())
    name = {
        "count-min": "Count-Min",
        "count-sketch": "Count Sketch",
        "count-median": "Count-Median",
        "misra-gries": "Misra-Gries",
    }
    return f"{name[spec.kind]}({params})"


def _bound_note(sketch: Any) -> str:
    if isinstance(sketch, MisraGries):
        return f"every estimate is in [f(x) - {sketch.error_bound()}, f(x)]"
    if isinstance(sketch, CountMedianSketch):
        # The total weight is ||f||_1 for non-negative frequencies, as the command counts.
        bound = sketch.error_bound(0.95)
        return f"each estimate is within {bound:.1f} of f(x) with probability >= 0.95"
    if hasattr(sketch, "error_bound"):
        err, fail = sketch.error_bound()
        return f"each estimate is within +{err:.1f} of f(x) with probability >= {1 - fail:.3f}"
    return "estimates are unbiased; error shrinks with width"


def sketch_rows(sketch: Any, queries: Sequence[Any], top: int | None) -> Iterator[dict[str, Any]]:
    """``key``/``estimate`` rows: the estimate of every query (in query order), or the ``top``
    largest Misra-Gries counters (largest first)."""
    if queries:
        pairs = zip(queries, sketch.estimate(list(queries)), strict=True)
    elif isinstance(sketch, MisraGries):
        pairs = top_items(sketch, 10 if top is None else top)
    else:
        pairs = iter(())
    for i, (key, estimate) in enumerate(pairs):
        yield {"key": plain(key), "estimate": _number(estimate), ORDER: [i]}


def run(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``sketch`` subcommand; returns the exit status."""
    check_output_arguments(args)
    spec = spec_from_args(args)
    is_mg = spec.kind == "misra-gries"
    if args.top is not None and not is_mg:
        raise ValueError("--top needs --sketch misra-gries (linear sketches answer --query only)")
    if args.top is not None and args.top < 1:
        raise ValueError(f"--top must be a positive int, got {args.top}")
    if not is_mg and not args.query and not args.save_sketch:
        raise ValueError(
            f"{args.sketch} answers point queries: pass --query KEY (or --save-sketch PATH)"
        )
    if args.query:
        refuse_given(args, ("top",), "with --query (the query keys' estimates are printed)")
    if not is_mg and not args.query:
        refuse_given(
            args, ("output", "format"), f"without --query ({args.sketch} writes only --save-sketch)"
        )
    reader = ReadKeyBatches(
        args.input,
        args.column,
        args.input_format,
        key_type=args.key_type,
        **bad_record_options(args),
    )
    queries = convert_query_keys(args.query or [], reader.key_type, args.column)
    released_sides: dict[str, beam.PTransform] = {
        "bound": beam.Map(_bound_note),
    }
    if args.save_sketch:
        # The sketch is written under a temporary name and renamed onto --save-sketch with the
        # command's other outputs, so a failed run leaves no file there.
        outputs = active_outputs()
        saved_to = args.save_sketch
        if outputs is not None:
            saved_to = outputs.temporary_for(args.save_sketch)
            outputs.add_file(saved_to, args.save_sketch)
        released_sides["saved"] = SaveSketch(saved_to)
    run_ = run_release(
        reader,
        SketchGlobally(spec),
        functools.partial(sketch_rows, queries=queries, top=args.top),
        beam_args,
        released_sides=released_sides,
        known_options=getattr(args, "known_options", ()),
    )
    if args.save_sketch:
        note = f"beam-dpsketch sketch: wrote {_describe(spec)} to {args.save_sketch}"
        if outputs is not None:
            outputs.add_note(note)
        else:
            print(note, file=sys.stderr)
    if not queries and not is_mg:
        return 0
    what = f"column {args.column!r} of " if args.column else ""
    (bound,) = run_.sides["bound"]
    parameters: dict[str, Any] = {"column": args.column, "sketch": spec.kind, **spec.params}
    parameters["queries"] = "keys" if queries else "top"
    if not queries:
        parameters["top"] = 10 if args.top is None else args.top
    release = CliRelease(
        NOT_PRIVATE,
        _describe(spec),
        parameters,
        ("key", "estimate"),
        run_.rows,
        title=f"{_describe(spec)} of {what}{args.input}; {bound}; {NOT_PRIVATE_NOTE}",
    )
    write_release(release, args.format, args.output)
    return 0
