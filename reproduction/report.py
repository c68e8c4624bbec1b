"""HTML reports: the paper's claims, our figures beside them, and computed verdicts.

A :class:`Report` lists :class:`Claim` rows (the claim, its source, what we measured, a verdict
and the reason), :class:`Figure` PNGs (matplotlib, Agg backend), small summary tables and the
notes on what the run does not match. :func:`write_html` renders it as one self-contained page
(``index.html`` next to the PNGs, linked by relative paths). Verdicts are computed by the
experiment modules from measurements; this module only renders them.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from beam_dpsketch.pipelines.plotting import pyplot

__all__ = [
    "Claim",
    "Figure",
    "Report",
    "Series",
    "VERDICTS",
    "line_plot",
    "pyplot",
    "summarize",
    "verdict",
    "verdict_from_checks",
    "write_html",
]

VERDICTS = ("reproduced", "differs", "not run")
"""Allowed verdicts: the measurement agrees, disagrees (with a reason), or was not possible."""


@dataclass(frozen=True)
class Claim:
    """One row of a paper's "results to reproduce" table, with our measurement and verdict.

    Parameters
    ----------
    id
        Short identifier, unique within the report (``"S1"``, ``"R3"``).
    claim
        The statement being checked, as testable.
    source
        Where it comes from: the paper and the theorem, figure or section stating it.
    measured
        What we measured, with numbers.
    verdict
        One of :data:`VERDICTS`.
    reason
        Why the verdict (always given for ``"differs"`` and ``"not run"``).
    figure
        File name of the PNG shown beside the claim, if any.
    """

    id: str
    claim: str
    source: str
    measured: str
    verdict: str
    reason: str = ""
    figure: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.verdict != "reproduced" and not self.reason:
            raise ValueError(f"claim {self.id}: a {self.verdict!r} verdict needs a reason")


def verdict(ok: bool, reason: str = "") -> tuple[str, str]:
    """``(verdict, reason)`` of a :class:`Claim`: ``reproduced`` if ``ok``, else ``differs``.

    ``reason`` is kept only for ``differs`` (a reproduced claim needs none).
    """
    return ("reproduced", "") if ok else ("differs", reason)


def verdict_from_checks(failed: Sequence[str], held: Sequence[str]) -> tuple[str, str]:
    """``(verdict, reason)`` of a claim made of named checks: ``reproduced`` when none failed.

    Otherwise ``differs``, saying which checks held and which did not.
    """
    if not failed:
        return verdict(True)
    prefix = f"partly: {'; '.join(held)} hold(s); " if held else ""
    return verdict(False, prefix + "not reproduced: " + "; ".join(failed))


@dataclass(frozen=True)
class Figure:
    """A PNG in the report directory and its caption."""

    file: str
    caption: str


@dataclass
class Report:
    """Everything :func:`write_html` renders."""

    title: str
    paper: str
    mode: str
    summary: str
    claims: list[Claim] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    tables: list[tuple[str, pa.Table]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    parameters: Mapping[str, Any] = field(default_factory=dict)
    library_version: str = "unknown"
    runtime_s: float | None = None
    command: str = ""

    def verdict_counts(self) -> dict[str, int]:
        """Number of claims per verdict."""
        return {v: sum(c.verdict == v for c in self.claims) for v in VERDICTS}


# ------------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------------


def summarize(
    table: pa.Table, by: Sequence[str], metrics: Sequence[str], *, stats: Sequence[str] = ("mean",)
) -> pa.Table:
    """Aggregate trials: one row per ``by`` group with ``<metric>_<stat>`` columns and ``n``.

    ``stats`` are pyarrow hash aggregations (``mean``, ``stddev``, ``min``, ``max``, ``sum``).
    Rows are sorted by the ``by`` columns.
    """
    aggs: list[tuple[str, str]] = [(m, s) for m in metrics for s in stats]
    # pyarrow names each aggregate "<column>_<stat>"; the row count is "count_all", renamed "n".
    grouped = table.group_by(list(by)).aggregate([*aggs, ([], "count_all")])
    grouped = grouped.rename_columns(["n" if c == "count_all" else c for c in grouped.column_names])
    return grouped.sort_by([(b, "ascending") for b in by])


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if not np.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:,.4g}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _table_html(table: pa.Table, max_rows: int = 60) -> str:
    cols = table.column_names
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for row in table.slice(0, max_rows).to_pylist():
        body.append(
            "<tr>" + "".join(f"<td>{html.escape(_fmt(row[c]))}</td>" for c in cols) + "</tr>"
        )
    more = ""
    if table.num_rows > max_rows:
        more = (
            f"<p class='small'>{table.num_rows - max_rows} more rows in the Parquet/CSV files.</p>"
        )
    return f"<table class='data'><tr>{head}</tr>{''.join(body)}</table>{more}"


# ------------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------------


def matplotlib_ticker() -> Any:
    """``matplotlib.ticker`` (after :func:`pyplot` has checked matplotlib is installed)."""
    import matplotlib.ticker

    return matplotlib.ticker


@dataclass(frozen=True)
class Series:
    """One line of a :func:`line_plot`: ``y`` against ``x``, optional error bars and style."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    style: str = "-o"
    color: str | None = None
    yerr: Sequence[float] | None = None


def line_plot(
    path: str | os.PathLike[str],
    panels: Sequence[tuple[str, Sequence[Series]]],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    suptitle: str = "",
    symlog_threshold: float | None = None,
    ylims: Sequence[tuple[float | None, float | None]] | None = None,
    annotate: Callable[[Any, int], None] | None = None,
) -> Path:
    """Write a PNG with one or more side-by-side panels of line series.

    Parameters
    ----------
    path
        Output PNG path.
    panels
        ``(title, series)`` per panel.
    xlabel, ylabel
        Axis labels (shared by the panels).
    logx, logy
        Logarithmic axes.
    suptitle
        Figure title.
    symlog_threshold
        Use a symmetric-log y axis, linear below this value: shows rates that are 0 and rates
        of 1e-5 on one axis.
    ylims
        Optional ``(bottom, top)`` per panel (``None`` keeps matplotlib's choice).
    annotate
        Optional ``annotate(axes, panel_index)`` hook for extra drawing.
    """
    plt = pyplot()
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 4.0), squeeze=False)
    for i, (title, series) in enumerate(panels):
        ax = axes[0][i]
        for s in series:
            kw: dict[str, Any] = {"label": s.label}
            if s.color:
                kw["color"] = s.color
            if s.yerr is not None:
                ax.errorbar(s.x, s.y, yerr=s.yerr, fmt=s.style, capsize=2, markersize=4, **kw)
            else:
                ax.plot(s.x, s.y, s.style, markersize=4, **kw)
        if logx:
            ax.set_xscale("log")
            # Minor-tick labels of a short log axis overlap each other: keep the decades only.
            ax.xaxis.set_minor_formatter(matplotlib_ticker().NullFormatter())
        if logy:
            ax.set_yscale("log")
        elif symlog_threshold is not None:
            ax.set_yscale("symlog", linthresh=symlog_threshold)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        if i == 0:
            ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        if ylims is not None:
            ax.set_ylim(*ylims[i])
        if annotate is not None:
            annotate(ax, i)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ------------------------------------------------------------------------------------------------
# HTML
# ------------------------------------------------------------------------------------------------

_CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8em 0; }
td, th { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; font-size: 0.92em; }
th { background: #f3f3f3; }
table.data td { text-align: right; font-family: monospace; }
.verdict { font-weight: bold; padding: 2px 6px; border-radius: 4px; white-space: nowrap; }
.reproduced { background: #d7f5dd; color: #14532d; }
.differs { background: #fde2e1; color: #7f1d1d; }
.notrun { background: #eee; color: #555; }
.small { font-size: 0.85em; color: #555; }
img.thumb { width: 330px; border: 1px solid #ddd; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; max-width: 1150px; }
figcaption { font-size: 0.88em; color: #444; max-width: 1100px; }
code { background: #f6f6f6; padding: 0 3px; }
"""


def write_html(
    report: Report, out_dir: str | os.PathLike[str], filename: str = "index.html"
) -> Path:
    """Render ``report`` to ``out_dir/filename`` and return the path.

    Figures are referenced by relative path, so the directory can be moved or archived whole.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    esc = html.escape
    counts = report.verdict_counts()
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{esc(report.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(report.title)}</h1>",
        "<p class='small'>"
        + esc(
            f"paper: {report.paper} | mode: {report.mode} | beam-dpsketch "
            f"{report.library_version} | generated "
            f"{_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')}"
            + (f" | runtime {report.runtime_s:.1f} s" if report.runtime_s is not None else "")
        )
        + "</p>",
        f"<p>{esc(report.summary)}</p>",
        "<p><b>Verdicts:</b> "
        + ", ".join(f"{counts[v]} {esc(v)}" for v in VERDICTS)
        + f" (of {len(report.claims)} claims).</p>",
    ]
    if report.command:
        parts.append(f"<p class='small'>Reproduce with <code>{esc(report.command)}</code>.</p>")
    parts.append("<h2>Claims</h2><table><tr><th>#</th><th>claim (source)</th>")
    parts.append("<th>our measurement</th><th>verdict</th><th>our figure</th></tr>")
    for c in report.claims:
        cls = "notrun" if c.verdict == "not run" else c.verdict
        fig = ""
        if c.figure:
            fig = f"<a href='{esc(c.figure)}'><img class='thumb' src='{esc(c.figure)}' alt='{esc(c.figure)}'></a>"
        reason = f"<br><span class='small'>{esc(c.reason)}</span>" if c.reason else ""
        parts.append(
            f"<tr><td>{esc(c.id)}</td><td>{esc(c.claim)}<br><span class='small'>{esc(c.source)}"
            f"</span></td><td>{esc(c.measured)}</td><td><span class='verdict {cls}'>"
            f"{esc(c.verdict)}</span>{reason}</td><td>{fig}</td></tr>"
        )
    parts.append("</table>")
    if report.figures:
        parts.append("<h2>Figures</h2>")
        for f in report.figures:
            parts.append(
                f"<figure><img src='{esc(f.file)}' alt='{esc(f.file)}' style='max-width:100%'>"
                f"<figcaption>{esc(f.caption)}</figcaption></figure>"
            )
    for caption, table in report.tables:
        parts.append(f"<h2>{esc(caption)}</h2>{_table_html(table)}")
    if report.notes:
        parts.append("<h2>What this run does not match</h2><ul>")
        parts.extend(f"<li>{esc(n)}</li>" for n in report.notes)
        parts.append("</ul>")
    if report.parameters:
        parts.append("<h2>Parameters</h2><table>")
        for k, v in report.parameters.items():
            parts.append(f"<tr><th>{esc(str(k))}</th><td>{esc(_fmt(v))}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    path = out / filename
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
