"""A local Dask cluster for the engine tests: one scheduler and two worker processes.

The cluster listens on ``127.0.0.1`` only and has no dashboard. Its workers are separate
interpreters (``processes=True``), so every function and accumulator a pipeline ships to them
crosses a process boundary, as on a real cluster. Pipelines reach it the way a user's would, with
``--runner=...DaskRunner --dask_client_address=<scheduler address>``.

Use the ``dask_address`` fixture (module scoped) from a test module with
``from dask_cluster import dask_address  # noqa: F401``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

__all__ = ["DASK_RUNNER", "dask_address", "dask_options", "start_cluster"]

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"

_HERE = os.path.dirname(os.path.abspath(__file__))
_TESTS = os.path.dirname(_HERE)


def dask_options(address: str) -> list[str]:
    """Beam pipeline arguments that run a pipeline on the Dask scheduler at ``address``."""
    return [f"--runner={DASK_RUNNER}", f"--dask_client_address={address}"]


def start_cluster(n_workers: int = 2) -> object:
    """A ``distributed.LocalCluster`` of ``n_workers`` single-threaded worker processes.

    The workers are spawned with ``tests/`` and ``tests/engines/`` on ``PYTHONPATH``, so they can
    unpickle test helpers (``collect.DumpToFile``) by module name.
    """
    distributed = pytest.importorskip("distributed")
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [p for p in (_TESTS, _HERE) if p not in path] + [p for p in path if p]
    )
    return distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        # Worker logs would otherwise interleave with pytest's output.
        silence_logs=40,
    )


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    """The address of a running two-worker local Dask cluster, closed after the module."""
    cluster = start_cluster()
    try:
        yield cluster.scheduler_address  # type: ignore[attr-defined]
    finally:
        cluster.close()  # type: ignore[attr-defined]
