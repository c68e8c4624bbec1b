"""Draw the plots of the user guide from published results (no pipeline runs).

``python docs/guide/make_plots.py`` writes ``docs/guide/plots/*.png`` with the project's plot
helper (``reproduction.report.line_plot``):

* ``count_error.png``: the 95 % error half-width of ``DPCount`` against epsilon, computed from the
  discrete Laplace and discrete Gaussian distributions themselves;
* ``quantiles_rank_error.png``: the mean rank error of ``DPQuantiles`` and of PipelineDP, read from
  the "Quantiles, 20 M-wide range" table of ``benchmarks/RESULTS.md``.

Run it from the repository root after the benchmark that feeds a plot has been re-run.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from reproduction.report import Series, line_plot  # noqa: E402  (after the path above)

PLOTS = Path(__file__).resolve().parent / "plots"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
EPSILONS = [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]


def discrete_laplace_half_width(scale: float, coverage: float = 0.95) -> int:
    """Smallest ``t`` with ``P(|Z| <= t) >= coverage`` for ``P(Z = z) ~ exp(-|z| / scale)``."""
    a = math.exp(-1.0 / scale)
    t = 0
    # P(|Z| >= t + 1) = 2 a^(t+1) / (1 + a).
    while 2 * a ** (t + 1) / (1 + a) > 1 - coverage:
        t += 1
    return t


def discrete_gaussian_half_width(sigma: float, coverage: float = 0.95) -> int:
    """Smallest ``t`` with ``P(|Z| <= t) >= coverage`` for ``P(Z = z) ~ exp(-z^2 / (2 sigma^2))``."""
    span = int(12 * sigma) + 2
    weights = [math.exp(-(z * z) / (2 * sigma * sigma)) for z in range(-span, span + 1)]
    total = sum(weights)
    t = 0
    while sum(weights[span - t : span + t + 1]) / total < coverage:
        t += 1
    return t


def count_error_plot() -> Path:
    """95 % half-width of DPCount's noise at element level (sensitivity 1)."""
    laplace = [discrete_laplace_half_width(1.0 / eps) for eps in EPSILONS]
    # The zCDP budget with the same epsilon^2 / 2 (rho) as a pure budget's zCDP conversion.
    gauss = [discrete_gaussian_half_width(1.0 / math.sqrt(2 * (eps * eps / 2))) for eps in EPSILONS]
    return line_plot(
        PLOTS / "count_error.png",
        [
            (
                "DPCount, element level",
                [
                    Series("pure epsilon (discrete Laplace)", EPSILONS, laplace),
                    Series("zCDP rho = epsilon^2 / 2 (discrete Gaussian)", EPSILONS, gauss),
                ],
            )
        ],
        xlabel="epsilon",
        ylabel="95 % error half-width (elements)",
        logx=True,
        logy=True,
    )


def quantile_rows() -> list[tuple[str, str, float, float]]:
    """``(data set, method, eps, rank error)`` rows of the wide-range quantile table."""
    text = RESULTS.read_text(encoding="utf-8")
    start = text.index("### Quantiles, 20 M-wide range")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"[\d.]+", cells[2]):
            rows.append((cells[0], cells[1], float(cells[2]), float(cells[3])))
    return rows


def quantiles_plot() -> Path:
    """Mean rank error against epsilon, one panel per data set."""
    rows = quantile_rows()
    panels = []
    for data in dict.fromkeys(r[0] for r in rows):
        series = []
        for method in dict.fromkeys(r[1] for r in rows if r[0] == data):
            points = sorted((r[2], r[3]) for r in rows if r[0] == data and r[1] == method)
            label = method.replace("beam-dpsketch ", "")
            series.append(Series(label, [p[0] for p in points], [p[1] for p in points]))
        panels.append((data, series))
    return line_plot(
        PLOTS / "quantiles_rank_error.png",
        panels,
        xlabel="epsilon",
        ylabel="mean rank error (fraction of N)",
        logx=True,
        logy=True,
    )


def main() -> None:
    """Write every plot of the guide."""
    PLOTS.mkdir(exist_ok=True)
    for path in (count_error_plot(), quantiles_plot()):
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
