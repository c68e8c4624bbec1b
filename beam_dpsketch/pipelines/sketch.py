"""``beam-dpsketch sketch``: build one exact sketch of a column with Beam and query it.

The output is **not** differentially private: it shows the exact sketch estimates (what the DP
releases add noise to), for inspection and testing.

The pipeline writes the serialized sketch to ``--output`` (or to a temporary file) through Beam's
filesystems, and the command reads it back; on a remote runner, give an ``--output`` that both
the workers and this machine can reach (e.g. ``gs://...``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.hashing import encode_key
from beam_dpsketch.pipelines.options import (
    add_format_argument,
    add_input_arguments,
    convert_query_keys,
    make_pipeline,
    print_records,
)
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.transforms import ReadKeyBatches, SketchGlobally, SketchSpec

__all__ = [
    "NOT_PRIVATE_NOTE",
    "SaveSketch",
    "load_sketch",
    "register",
    "run",
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
    add_input_arguments(parser)
    group = parser.add_argument_group("sketch")
    group.add_argument(
        "--sketch",
        choices=("count-min", "count-sketch", "misra-gries"),
        default="count-min",
        help="sketch to build (default: count-min)",
    )
    group.add_argument("--width", type=int, help="counters per row (count-min/count-sketch; 2048)")
    group.add_argument("--depth", type=int, help="rows (count-min/count-sketch; default 5)")
    group.add_argument("--seed", type=int, help="hash seed (count-min/count-sketch; default 0)")
    group.add_argument("--k", type=int, help="counters (misra-gries; default 100)")
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
    group.add_argument("--output", metavar="PATH", help="also write the serialized sketch here")
    add_format_argument(parser)
    parser.set_defaults(run=run, known_options=_option_strings(parser))


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings]  # noqa: SLF001


def spec_from_args(args: argparse.Namespace) -> SketchSpec:
    """The :class:`SketchSpec` for ``--sketch`` and its parameters.

    Raises
    ------
    ValueError
        For a parameter of another sketch kind (e.g. ``--k`` with count-min), or an invalid
        value (the message names the parameter).
    """
    given = {name: getattr(args, name, None) for name in (*_LINEAR_ONLY, "k")}
    if args.sketch == "misra-gries":
        wrong = [f"--{n}" for n in _LINEAR_ONLY if given[n] is not None]
        if wrong:
            raise ValueError(f"{', '.join(wrong)} only apply to count-min and count-sketch")
        return SketchSpec.misra_gries(_DEFAULTS["k"] if given["k"] is None else given["k"])
    if given["k"] is not None:
        raise ValueError("--k only applies to misra-gries")
    params = {n: _DEFAULTS[n] if given[n] is None else given[n] for n in _LINEAR_ONLY}
    if args.sketch == "count-min":
        return SketchSpec.count_min(**params)
    return SketchSpec.count_sketch(**params)


def _describe(spec: SketchSpec) -> str:
    params = ", ".join(f"{k}={v}" for k, v in spec.params.items())
    name = {"count-min": "Count-Min", "count-sketch": "Count Sketch", "misra-gries": "Misra-Gries"}
    return f"{name[spec.kind]}({params})"


def _bound_note(sketch: Any) -> str:
    if isinstance(sketch, MisraGries):
        return f"every estimate is in [f(x) - {sketch.error_bound()}, f(x)]"
    if hasattr(sketch, "error_bound"):
        err, fail = sketch.error_bound()
        return f"each estimate is within +{err:.1f} of f(x) with probability >= {1 - fail:.3f}"
    return "estimates are unbiased; error shrinks with width"


def run(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``sketch`` subcommand; returns the exit status."""
    spec = spec_from_args(args)
    is_mg = spec.kind == "misra-gries"
    if args.top is not None and not is_mg:
        raise ValueError("--top needs --sketch misra-gries (linear sketches answer --query only)")
    if args.top is not None and args.top < 1:
        raise ValueError(f"--top must be a positive int, got {args.top}")
    if not is_mg and not args.query and not args.output:
        raise ValueError(
            f"{args.sketch} answers point queries: pass --query KEY (or --output PATH)"
        )
    reader = ReadKeyBatches(args.input, args.column, args.input_format, key_type=args.key_type)
    queries = convert_query_keys(args.query or [], reader.key_type, args.column)

    tmpdir = None
    path = args.output
    if path is None:
        tmpdir = tempfile.mkdtemp(prefix="beam-dpsketch-")
        path = os.path.join(tmpdir, "sketch.bin")
    try:
        started = time.perf_counter()
        with make_pipeline(beam_args, known_options=getattr(args, "known_options", ())) as p:
            _ = p | "Read" >> reader | "Sketch" >> SketchGlobally(spec) | "Save" >> SaveSketch(path)
        sketch = load_sketch(path, spec.sketch_type)
        elapsed = time.perf_counter() - started
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)

    n = sketch.n if is_mg else sketch.total_weight
    print(
        f"beam-dpsketch sketch: {n:,} keys from {args.input} in {elapsed:.2f} s",
        file=sys.stderr,
    )
    if args.output:
        print(f"beam-dpsketch sketch: wrote {_describe(spec)} to {args.output}", file=sys.stderr)
    if not queries and not is_mg:
        return 0

    what = f"column {args.column!r} of " if args.column else ""
    title = (
        f"# {_describe(spec)} of {what}{args.input}: {n:,} keys; {_bound_note(sketch)}\n"
        f"# {NOT_PRIVATE_NOTE}"
    )
    if queries:
        estimates = sketch.estimate(queries)
        records = [
            {"key": q, "estimate": _number(e)} for q, e in zip(queries, estimates, strict=True)
        ]
        print_records(records, ["key", "estimate"], args.format, title=title)
    else:
        top = top_items(sketch, 10 if args.top is None else args.top)
        records = [{"key": key, "count": int(count)} for key, count in top]
        print_records(records, ["key", "count"], args.format, title=title)
    return 0
