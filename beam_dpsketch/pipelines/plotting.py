"""matplotlib for the command line's ``--plot`` outputs, loaded only when a plot is asked for.

matplotlib is an optional dependency (the ``eval`` extra): importing this module never imports
it, so ``beam-dpsketch`` and the library stay usable without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pyplot"]


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
