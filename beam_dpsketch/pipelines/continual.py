"""``beam-dpsketch continual``: a private sketch released continually over an ordered file.

Runs :class:`~beam_dpsketch.transforms.continual.ContinualDPSketch` in the element time model
(one time step per row; spec lazy-sketch §6.4) and prints the time series of noisy estimates of the
``--query`` keys, one row per release (every ``--release-every`` rows and at the horizon ``T``),
optionally as a line plot (``--plot PATH.png``).

Time order
    The time step of a row is its position in the input: files matching ``--input`` in sorted
    path order, rows in file order. With ``--time-column COL`` the rows are instead stably sorted
    by that column (ties keep file order). Either order must be **public** and independent of the
    private values (an ingestion sequence or arrival timestamp, never the key itself): the
    guarantee is ``(epsilon, delta)``-DP for the whole time series under event-level replacement
    of one row (spec lazy-sketch §1.2, §6.3 item 11). The rows are read by one worker to fix the
    order; ``--time-column`` sorts in memory.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.options import (
    add_format_argument,
    add_input_arguments,
    convert_query_keys,
    jsonable_key,
    print_records,
    run_and_collect,
)
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms.continual import CONTINUAL_SKETCHES, ContinualDPSketch
from beam_dpsketch.transforms.readers import (
    ReadKeyBatches,
    _ColumnReader,
    _open,
    _probe_column,
)

__all__ = ["ReadOrderedKeys", "register", "run_continual"]

# Rows per (position, batch) element: big enough that Beam's per-element cost is negligible.
_CHUNK = 1 << 16


class _ReadInOrder(_ColumnReader):
    """All files in the given order -> ``(position, key batch)`` with public row positions."""

    def __init__(
        self,
        fmt: str,
        column: str | None,
        key_type: str | None,
        time_column: str | None,
        chunk: int,
    ) -> None:
        super().__init__(column or "line", key_type, dead_letter=False)
        self._fmt = fmt
        self._time_column = time_column
        self._chunk = chunk

    def _read_file(self, path: str) -> tuple[Any, Any]:
        columns = [self._column] + ([self._time_column] if self._time_column else [])
        if self._fmt == "text":
            with _open(path) as f:
                lines = f.read().decode("utf-8").splitlines()
            return pa.array(lines, pa.string()), None
        with _open(path, compressed=self._fmt != "parquet") as f:
            if self._fmt == "parquet":
                table = pq.read_table(f, columns=columns)
            elif self._fmt == "csv":
                types = {self._column: pa.int64() if self._key_type == "int" else pa.string()}
                options = pa_csv.ConvertOptions(
                    include_columns=columns,
                    column_types=types,
                    null_values=[""],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                )
                table = pa_csv.read_csv(f, convert_options=options)
            else:
                table = pa_json.read_json(f)
        for name in columns:
            if name not in table.column_names:
                raise ValueError(
                    f"column {name!r} not found in {path}; available columns: "
                    + ", ".join(repr(c) for c in table.column_names)
                )
        times = table.column(self._time_column) if self._time_column else None
        return table.column(self._column), times

    def process(self, paths: list[str]) -> Iterator[tuple[int, Any]]:
        keys: list[Any] = []
        times: list[np.ndarray] = []
        for path in paths:
            arr, time_arr = self._read_file(path)
            batches = list(self._batches(arr, path))
            if time_arr is not None:
                if time_arr.null_count:
                    raise TypeError(
                        f"time column {self._time_column!r} of {path} has missing values (None)"
                    )
                times.append(time_arr.to_numpy())
            keys.extend(batches)
        if not keys:
            return
        column = pa.chunked_array(keys).combine_chunks()
        if times:
            # Stable: rows with equal times keep their file order.
            order = np.argsort(np.concatenate(times), kind="stable")
            column = column.take(pa.array(order))
        for start in range(0, len(column), self._chunk):
            yield start, column.slice(start, self._chunk)


class ReadOrderedKeys(beam.PTransform):
    """Read one key column in a public order as ``(position, key batch)`` elements.

    Files matching ``path_or_glob`` in sorted path order, rows in file order (or stably sorted by
    ``time_column``); positions count rows from 0. The column, format and key type are checked at
    construction by :class:`~beam_dpsketch.transforms.readers.ReadKeyBatches`, whose ``key_type``
    this transform exposes.
    """

    def __init__(
        self,
        path_or_glob: str,
        column: str | None,
        input_format: str | None = None,
        *,
        key_type: str | None = None,
        time_column: str | None = None,
        chunk: int = _CHUNK,
    ) -> None:
        super().__init__()
        probe = ReadKeyBatches(path_or_glob, column, input_format, key_type=key_type)
        if time_column is not None and probe.input_format == "text":
            raise ValueError("--time-column needs Parquet, CSV or JSON Lines input")
        self.key_type = probe.key_type
        self.input_format = probe.input_format
        matches = FileSystems.match([path_or_glob])[0].metadata_list
        self._paths = sorted(m.path for m in matches)
        if time_column is not None:
            # Like the key column: a missing time column fails now, listing the columns.
            _probe_column(self._paths[0], probe.input_format, time_column)
        self._reader = _ReadInOrder(probe.input_format, column, probe.key_type, time_column, chunk)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Paths" >> beam.Create([self._paths])
            | "ReadInOrder" >> beam.ParDo(self._reader)
        )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``continual`` subcommand."""
    cmd = subparsers.add_parser(
        "continual",
        help="release a DP sketch continually over an ordered file and print the time series",
        description=(
            "Release a differentially private Count-Min sketch or Count Sketch under continual "
            "observation (LazySketch or PunctualSketch; spec lazy-sketch) over the rows of the "
            "input in file order (or sorted by --time-column), one time step per row, and print "
            "the noisy estimate of every --query key after every --release-every rows. The "
            "whole time series is (epsilon, delta)-DP under replacement of one row; the order "
            "must be public."
        ),
    )
    add_input_arguments(cmd)
    group = cmd.add_argument_group("release")
    group.add_argument("--sketch", choices=tuple(CONTINUAL_SKETCHES), default="lazy-cms")
    group.add_argument("--width", type=int, default=1024, help="counters per row (1024)")
    group.add_argument("--depth", type=int, default=3, help="rows (3)")
    group.add_argument("--seed", type=int, default=0, help="public hash seed (0)")
    group.add_argument(
        "--horizon",
        type=int,
        required=True,
        metavar="T",
        help="declared maximum number of rows (time steps); more rows is an error",
    )
    group.add_argument(
        "--release-every",
        type=int,
        metavar="N",
        help="release after every N rows (and at T); default: ceil(T/20)",
    )
    group.add_argument(
        "--time-column",
        metavar="COL",
        help="sort rows by this public time column (stable) instead of using file order",
    )
    group.add_argument(
        "--query", nargs="+", action="extend", required=True, metavar="KEY", help="keys to track"
    )
    group.add_argument("--epsilon", type=float, required=True, help="privacy parameter epsilon")
    group.add_argument("--delta", type=float, required=True, help="privacy parameter delta")
    group.add_argument(
        "--calibration",
        choices=("paper", "analytic"),
        default="paper",
        help="Gaussian calibration: the paper's classical one (epsilon < 1) or analytic",
    )
    group.add_argument(
        "--insecure-test-seed",
        type=int,
        metavar="N",
        help="INSECURE: derive the noise key from N (reproducible output, no privacy)",
    )
    group.add_argument(
        "--explain", action="store_true", help="print the privacy accounting before running"
    )
    group.add_argument("--plot", metavar="PATH.png", help="also write a line plot of the series")
    add_format_argument(cmd)
    cmd.set_defaults(run=run_continual)


def run_continual(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``continual`` subcommand; returns the exit status."""
    if args.horizon is None or args.horizon < 1:
        raise ValueError(f"--horizon must be >= 1, got {args.horizon}")
    release_every = args.release_every
    if release_every is None:
        release_every = max(1, math.ceil(args.horizon / 20))
    reader = ReadOrderedKeys(
        args.input,
        args.column,
        args.input_format,
        key_type=args.key_type,
        time_column=args.time_column,
    )
    keys = convert_query_keys(args.query, reader.key_type, args.column)
    source = (
        NoiseSource.insecure_for_tests(args.insecure_test_seed)
        if args.insecure_test_seed is not None
        else NoiseSource()
    )
    budget = PrivacyBudget.approx(args.epsilon, args.delta)
    transform = ContinualDPSketch(
        args.sketch,
        args.width,
        args.depth,
        args.horizon,
        budget,
        queries=keys,
        release_every=release_every,
        seed=args.seed,
        calibration=args.calibration,
        noise_source=source,
        label="continual",
    )
    releases, seconds = run_and_collect(reader, transform, beam_args, explain=args.explain)
    releases = sorted(releases, key=lambda r: r.t)
    order = "sorted by " + repr(args.time_column) if args.time_column else "in file order"
    title = (
        f"# DP continual estimates of column {args.column!r} of {args.input} ({order}): "
        f"{budget} for the whole series, {args.sketch} {args.depth}x{args.width}, T={args.horizon}, "
        f"release every {release_every}; {len(releases)} releases; {seconds:.2f} s"
    )
    names = [str(jsonable_key(k)) for k in keys]
    if args.format == "json":
        records = [
            {
                "t": r.t,
                "estimates": {n: round(r.answers[k], 2) for n, k in zip(names, keys, strict=True)},
            }
            for r in releases
        ]
        print_records(records, ["t", "estimates"], "json", title=title)
    else:
        columns = [f"q{i}" for i in range(len(keys))]
        records = [
            {"t": r.t, **{c: round(r.answers[k], 2) for c, k in zip(columns, keys, strict=True)}}
            for r in releases
        ]
        print_records(records, ["t", *columns], "table", title=title, headers=["t", *names])
    if args.plot:
        _plot(releases, keys, names, args.plot, title.lstrip("# ").split(":")[0])
    return 0


def _plot(releases: list, keys: list, names: list[str], path: str, title: str) -> None:
    from beam_dpsketch.evaluation.report import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ts = [r.t for r in releases]
    for key, name in zip(keys, names, strict=True):
        ax.plot(ts, [r.answers[key] for r in releases], marker=".", label=name)
    ax.set_xlabel("time step t (rows processed)")
    ax.set_ylabel("noisy estimate")
    ax.set_title(title, fontsize=9)
    ax.legend(title="query key")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
