"""``beam-dpsketch demo``: DP heavy routes of the bundled 2001 flights sample, with Beam.

One Beam pipeline reads the ``route`` column of the bundled Parquet sample once and, from the same
batches, releases the top routes with :class:`~beam_dpsketch.transforms.DPHeavyHitters`
((epsilon, delta)-DP, element level: one flight) and builds an exact Misra-Gries summary and
Count-Min sketch for comparison. The command prints the privacy accounting, then the DP top routes
next to the exact sketch estimates and the exact counts (computed with pyarrow), and with
``--out`` writes a Markdown report, a JSON file of the results and a bar chart.

Only the DP column is private; the exact columns are shown to judge its accuracy.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import importlib.resources
import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.io.sinks import StagingArea, atomic_destination, emit_text
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.heavy_hitters import CLI_DEFAULT_MECHANISM
from beam_dpsketch.pipelines.output import plain
from beam_dpsketch.pipelines.runner import add_runner_arguments, pipeline_options, run_pipeline
from beam_dpsketch.pipelines.sketch import SaveSketch, load_sketch
from beam_dpsketch.pipelines.tables import format_table
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries.release import ERROR_CONFIDENCE
from beam_dpsketch.sketches.misra_gries.select_count import DEFAULT_SELECTION_FRACTION
from beam_dpsketch.sketches.misra_gries.sizing import DEFAULT_K
from beam_dpsketch.transforms import DPHeavyHitters, ReadKeyBatches, SketchGlobally, SketchSpec

__all__ = ["DATA_FILE", "DEMO_COLUMN", "LABEL", "data_path", "register", "run", "run_demo"]

DATA_FILE = "flights_2001_sample.parquet"
DEMO_COLUMN = "route"
LABEL = (
    "DP heavy hitters (the 'DP count' column is differentially private; the exact sketch "
    "estimates and exact counts next to it are NOT, and are shown only to judge its accuracy)"
)
_COLUMNS = [
    "rank",
    "route",
    "dp_count",
    "dp_error_bound",
    "mg_estimate",
    "cms_estimate",
    "exact_count",
    "exact_rank",
]
_HEADERS = [
    "rank",
    "route",
    "DP count",
    "+/- (95%)",
    "Misra-Gries",
    "Count-Min",
    "exact",
    "exact rank",
]


def data_path() -> str:
    """Filesystem path of the bundled flights sample."""
    return str(importlib.resources.files("beam_dpsketch.pipelines") / "data" / DATA_FILE)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="DP heavy hitters (top flight routes) of the bundled sample on Beam",
        description=(
            "Run a Beam pipeline (FnApiRunner) over the bundled 300,000-flight sample of 2001 US "
            "flights and release the top routes with (epsilon, delta)-differential privacy "
            "(DP Misra-Gries, element level), next to exact Misra-Gries and Count-Min estimates "
            "and the exact counts. " + LABEL + "."
        ),
    )
    parser.add_argument(
        "--out", metavar="DIR", help="write report.html, report.md, results.json and a PNG"
    )
    parser.add_argument(
        "--k", type=int, default=DEFAULT_K, help=f"Misra-Gries counters ({DEFAULT_K})"
    )
    parser.add_argument("--epsilon", type=float, default=1.0, help="privacy epsilon (1.0)")
    parser.add_argument("--delta", type=float, default=1e-6, help="privacy delta (1e-6)")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="routes shown (10)")
    parser.add_argument("--width", type=int, default=8192, help="Count-Min width (8192)")
    parser.add_argument("--depth", type=int, default=5, help="Count-Min depth (5)")
    parser.add_argument(
        "--data-path",
        action="store_true",
        help="print the path of the bundled flights sample (Parquet) and exit, e.g. to try "
        "the other subcommands on it",
    )
    add_runner_arguments(parser)
    parser.set_defaults(run=run)


def _progress(step: int, total: int, message: str) -> None:
    print(f"[{step}/{total}] {message}", file=sys.stderr, flush=True)


def _released_row(record: tuple[Any, Any]) -> list[Any]:
    """A released ``(route, noisy count)`` and its error bound (``None`` if none) as JSON."""
    route, noisy = record[0], record[1]
    bound = getattr(record, "error_bound", None)
    return [plain(route), float(noisy), None if bound is None else float(bound)]


def run_demo(
    *,
    k: int = DEFAULT_K,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    top: int = 10,
    width: int = 8192,
    depth: int = 5,
    beam_args: Sequence[str] = (),
    steps: int = 3,
) -> dict[str, Any]:
    """Run the demo pipeline and return the results (what ``results.json`` holds).

    Progress lines (``[i/steps] ...``) go to stderr; ``steps`` is the total they count to.

    Raises
    ------
    ValueError
        For an invalid ``k``, ``top``, ``width`` or ``depth`` (named in the message).
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be a positive int, got {top!r}")
    budget = PrivacyBudget.approx(epsilon, delta)
    # The heavy-hitters command's default release: exact counts of a DP selection.
    dp = DPHeavyHitters(
        k,
        budget,
        top=top,
        mechanism=CLI_DEFAULT_MECHANISM,
        noise_source=NoiseSource(),
        label="demo",
    )
    mg_spec = SketchSpec.misra_gries(k)
    cms_spec = SketchSpec.count_min(width, depth, 0)
    path = data_path()

    _progress(1, steps, f"reading {DATA_FILE} (column {DEMO_COLUMN!r}) with ReadKeyBatches")
    reader = ReadKeyBatches(path, DEMO_COLUMN)
    options = pipeline_options(beam_args)
    # Every output leaves the pipeline through a sink into the staging area (any filesystem
    # the workers can reach, with --temp_location), and is read back from there.
    with StagingArea(options) as staging:
        mg_path = FileSystems.join(staging.directory, "misra_gries.sketch")
        cms_path = FileSystems.join(staging.directory, "count_min.sketch")
        _progress(
            2,
            steps,
            f"Beam pipeline: DPHeavyHitters (eps={epsilon:g}, delta={delta:g}), exact "
            f"Misra-Gries(k={k}) and Count-Min({width}x{depth})",
        )
        started = time.perf_counter()
        p = beam.Pipeline(options=options)
        batches = p | "Read" >> reader
        released_rows = batches | "DPHeavyHitters" >> dp | "Rows" >> beam.Map(_released_row)
        print(dp.explain(), file=sys.stderr)
        saved_mg = (
            batches | "MisraGries" >> SketchGlobally(mg_spec) | "SaveMG" >> SaveSketch(mg_path)
        )
        saved_cms = (
            batches | "CountMin" >> SketchGlobally(cms_spec) | "SaveCMS" >> SaveSketch(cms_path)
        )
        # One sink for every output (the DaskRunner computes only a pipeline's last sink).
        staging.write_all({"released": released_rows, "mg": saved_mg, "cms": saved_cms})
        run_pipeline(p)
        pipeline_seconds = time.perf_counter() - started
        mg = load_sketch(mg_path, mg_spec.sketch_type)
        cms = load_sketch(cms_path, cms_spec.sketch_type)
        # Largest noisy count first (a sink keeps no order).
        released = sorted(
            ((route, noisy, bound) for route, noisy, bound in staging.read("released")),
            key=lambda kv: (-kv[1], str(kv[0])),
        )
    print(f"      {mg.n:,} flights sketched in {pipeline_seconds:.2f} s", file=sys.stderr)

    _progress(3, steps, "exact counts with pyarrow, for comparison")
    routes = pq.read_table(path, columns=[DEMO_COLUMN]).column(DEMO_COLUMN)
    counts = pc.value_counts(routes)
    exact = dict(
        zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    )
    exact_order = sorted(exact, key=lambda r: (-exact[r], r))
    exact_rank = {route: i + 1 for i, route in enumerate(exact_order)}

    keys = [route for route, _, _ in released]
    mg_estimates = mg.estimate(keys).tolist() if keys else []
    cms_estimates = cms.estimate(keys).tolist() if keys else []
    rows = [
        {
            "rank": i + 1,
            "route": route,
            "dp_count": round(float(noisy), 1),
            "dp_error_bound": None if bound is None else round(float(bound), 1),
            "mg_estimate": int(mg_est),
            "cms_estimate": int(cms_est),
            "exact_count": int(exact.get(route, 0)),
            "exact_rank": exact_rank.get(route),
        }
        for i, ((route, noisy, bound), mg_est, cms_est) in enumerate(
            zip(released, mg_estimates, cms_estimates, strict=True)
        )
    ]
    cms_error, cms_failure = cms.error_bound()
    return {
        "label": LABEL,
        "dataset": f"{DATA_FILE} (bundled; see pipelines/data/README.md)",
        "column": DEMO_COLUMN,
        "flights": mg.n,
        "distinct_routes": len(exact),
        "pipeline_seconds": round(pipeline_seconds, 3),
        "dp_release": {
            "mechanism": dp.mechanism_name,
            "epsilon": epsilon,
            "delta": delta,
            "privacy_unit": "element (one flight)",
            "k": k,
            "selection_fraction": DEFAULT_SELECTION_FRACTION,
            "error_confidence": ERROR_CONFIDENCE,
            "accounting": dp.explain(),
        },
        "misra_gries": {"k": k, "error_bound": mg.error_bound(), "merged": mg.merged},
        "count_min": {
            "width": width,
            "depth": depth,
            "seed": 0,
            "error_bound": round(cms_error, 3),
            "failure_probability": round(cms_failure, 6),
        },
        "top_routes": rows,
        "exact_top_routes": [{"route": r, "exact_count": int(exact[r])} for r in exact_order[:top]],
    }


def _summary_lines(results: dict[str, Any]) -> list[str]:
    mg = results["misra_gries"]
    cms = results["count_min"]
    dp = results["dp_release"]
    return [
        f"Top {len(results['top_routes'])} routes of {results['flights']:,} flights "
        f"({results['distinct_routes']:,} distinct routes), by DP count: "
        f"({dp['epsilon']:g}, {dp['delta']:g})-DP, privacy unit {dp['privacy_unit']}, "
        f"mechanism {dp['mechanism']}: a DP Misra-Gries selection of at most k={dp['k']} routes "
        f"on {dp['selection_fraction']:g} of epsilon (Lebeda and Tetek, Section 6, Algorithm 3 "
        "per shard, summed over shards), then the exact count of each selected route in a "
        "second pass, released with discrete Laplace noise of scale "
        f"{1 / (dp['epsilon'] * (1 - dp['selection_fraction'])):.3g} (basic composition).",
        "DP count = exact count + noise: there is no sketch error. The +/- column is each DP "
        f"count's error bound at {dp['error_confidence']:g} confidence (a quantile of the "
        "noise, computed from public parameters only).",
        f"Misra-Gries(k={mg['k']}): every estimate is in [exact - {mg['error_bound']}, exact].",
        f"Count-Min({cms['width']}x{cms['depth']}): every estimate is >= exact, and <= exact + "
        f"{cms['error_bound']:.1f} with probability >= {1 - cms['failure_probability']:.4f}.",
    ]


def _write_text(path: str, text: str) -> None:
    """Write a report file atomically, published with the command's other outputs."""
    with atomic_destination(path) as temporary, open(temporary, "w", encoding="utf-8") as f:
        f.write(text)


def _write_report(results: dict[str, Any], out: str) -> list[str]:
    os.makedirs(out, exist_ok=True)
    written = []
    json_path = os.path.join(out, "results.json")
    _write_text(json_path, json.dumps(results, indent=2) + "\n")
    written.append(json_path)

    plot_name = _write_plot(results, out)
    table = format_table(results["top_routes"], _COLUMNS, _HEADERS)
    lines = [
        "# beam-dpsketch demo: heavy flight routes",
        "",
        f"**{results['label'][0].upper() + results['label'][1:]}.**",
        "",
        f"Data: {results['dataset']}, column `{results['column']}`. "
        f"Generated {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; "
        f"Beam pipeline time {results['pipeline_seconds']:.2f} s.",
        "",
        *[f"- {line}" for line in _summary_lines(results)],
        "",
        "```",
        table,
        "```",
        "",
    ]
    if plot_name:
        lines += [f"![top routes]({plot_name})", ""]
    else:
        lines += ["(No chart: matplotlib is not installed.)", ""]
    report_path = os.path.join(out, "report.md")
    _write_text(report_path, "\n".join(lines))
    written.append(report_path)
    written.append(_write_html(results, out, plot_name))
    if plot_name:
        written.append(os.path.join(out, plot_name))
    return written


def _write_html(results: dict[str, Any], out: str, plot_name: str | None) -> str:
    """A self-contained HTML page: summary, the table, the chart and the privacy accounting."""
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in _HEADERS)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(str(row[c]))}</td>" for c in _COLUMNS) + "</tr>"
        for row in results["top_routes"]
    )
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>beam-dpsketch demo</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;"
        "text-align:right}pre{background:#f6f6f6;padding:1em;overflow-x:auto}</style>",
        "</head><body><h1>DP heavy flight routes</h1>",
        f"<p><b>{esc(results['label'])}.</b></p>",
        f"<p>Data: {esc(results['dataset'])}, column <code>{esc(results['column'])}</code>; "
        f"Beam pipeline time {results['pipeline_seconds']:.2f} s.</p>",
        "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in _summary_lines(results)) + "</ul>",
        f"<table><tr>{head}</tr>{body}</table>",
    ]
    if plot_name:
        parts.append(f"<p><img src='{esc(plot_name)}' alt='top routes'></p>")
    parts += [
        "<h2>Privacy accounting</h2>",
        f"<pre>{esc(results['dp_release']['accounting'])}</pre>",
        "</body></html>",
    ]
    path = os.path.join(out, "report.html")
    _write_text(path, "\n".join(parts))
    return path


def _write_plot(results: dict[str, Any], out: str) -> str | None:
    """A grouped bar chart of the three counts, or ``None`` when matplotlib is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = results["top_routes"]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.8), 4))
    for offset, field, label in (
        (-0.3, "dp_count", "DP count"),
        (-0.1, "mg_estimate", "Misra-Gries (exact sketch)"),
        (0.1, "exact_count", "exact"),
        (0.3, "cms_estimate", "Count-Min (exact sketch)"),
    ):
        # The DP counts carry their error bars (per-count bound at the stated confidence).
        yerr = [r["dp_error_bound"] or 0 for r in rows] if field == "dp_count" else None
        ax.bar(x + offset, [r[field] for r in rows], width=0.2, label=label, yerr=yerr)
    ax.set_xticks(x, [r["route"] for r in rows], rotation=45, ha="right")
    ax.set_ylabel("flights")
    ax.set_title("Top routes: DP count next to exact sketch estimates and exact counts")
    # Headroom above the tallest bar keeps the legend off the bars.
    ax.set_ylim(
        0, 1.3 * max([r["exact_count"] for r in rows] + [r["cms_estimate"] for r in rows] + [1])
    )
    ax.legend(loc="upper center", ncol=2, frameon=False, fontsize="small")
    fig.tight_layout()
    name = "top_routes.png"
    with atomic_destination(os.path.join(out, name)) as temporary:
        fig.savefig(temporary, dpi=100)
    plt.close(fig)
    return name


def run(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """Run the ``demo`` subcommand; returns the exit status."""
    if args.data_path:
        emit_text(data_path() + "\n")
        return 0
    results = run_demo(
        k=args.k,
        epsilon=args.epsilon,
        delta=args.delta,
        top=args.top,
        width=args.width,
        depth=args.depth,
        beam_args=beam_args,
        steps=4 if args.out else 3,
    )
    if args.out:
        _progress(4, 4, f"writing the report to {args.out}")
        written = _write_report(results, args.out)
    lines = [f"beam-dpsketch demo: {LABEL}", *_summary_lines(results), ""]
    lines.append(format_table(results["top_routes"], _COLUMNS, _HEADERS))
    if args.out:
        lines += ["", *(f"wrote {path}" for path in written)]
    # Printed once the report files are in place (inside the command line: when it succeeds).
    emit_text("\n".join(lines) + "\n")
    return 0
