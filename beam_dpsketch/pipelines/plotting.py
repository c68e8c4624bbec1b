"""matplotlib for the command line's ``--plot`` outputs, loaded only when a plot is asked for,
and the check of a ``--plot`` destination before any work.

matplotlib is an optional dependency (the ``eval`` extra): importing this module never imports
it, so ``beam-dpsketch`` and the library stay usable without it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

__all__ = ["check_plot_path", "pyplot"]


def pyplot() -> Any:
    """``matplotlib.pyplot`` with the non-interactive Agg backend.

    Returns
    -------
    module
        ``matplotlib.pyplot``, drawing with Agg (no display needed; the same on every machine).

    Raises
    ------
    ImportError
        If matplotlib is not installed; the message says how to install it.
    """
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "plots need the 'matplotlib' package: pip install 'matplotlib>=3.8'"
        ) from None
    matplotlib.use("Agg", force=True)  # no display on servers; must precede pyplot's import
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path: str, *, formats: Sequence[str] | None = None) -> None:
    """Refuse a ``--plot`` destination before any work: matplotlib must be installed and write
    the file's extension (or one of ``formats``), and the file must be writable locally.

    Raises
    ------
    ValueError
        Naming ``--plot`` (a missing matplotlib raises ``ValueError`` too, so the command line
        reports it in one line before the pipeline runs).
    """
    # Imported here, not with the module: plotting modules of the reproduction harness and the
    # benchmarks import this one, and need neither Beam nor the file sinks.
    from beam_dpsketch.io.sinks import check_local_destination

    try:
        pyplot()  # the Agg backend of plot_figure
    except ImportError:
        raise ValueError(
            "--plot needs the 'matplotlib' package: pip install 'matplotlib>=3.8'"
        ) from None
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    extension = os.path.splitext(path)[1].lower().lstrip(".")
    allowed = sorted(formats or FigureCanvasAgg.get_supported_filetypes())
    if extension not in allowed:
        raise ValueError(
            f"--plot {path}: the extension must be one of {', '.join('.' + f for f in allowed)}"
        )
    check_local_destination(path, "--plot")
