"""Shared plumbing of the ``tests/evaluation/test_evaluation_*.py`` modules: smoke runs and doctored tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from reproduction import cli as eval_cli


def smoke_run(tmp_path_factory: Any, paper: str) -> Path:
    """Run ``evaluate <paper> --smoke`` once through the CLI; return the report directory.

    Meant for a module-scoped fixture (the smoke runs dominate the evaluation tests' runtime).
    """
    out = tmp_path_factory.mktemp("evaluation")
    status = eval_cli.run_evaluation(
        paper, scale="smoke", out=out, workers=1, offline=True, progress=False
    )
    assert status == 0
    return out / paper


def set_float_column(
    table: pa.Table, name: str, values: Sequence[float] | np.ndarray | Callable[[dict], float]
) -> pa.Table:
    """``table`` with column ``name`` replaced by float64 ``values``.

    ``values`` is an array-like with one value per row, or a function of the row (as a dict).
    """
    if callable(values):
        values = [values(row) for row in table.to_pylist()]
    i = table.column_names.index(name)
    return table.set_column(i, name, pa.array(np.asarray(values, dtype=np.float64)))
