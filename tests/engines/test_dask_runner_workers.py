"""The ``ScalingDaskRunner`` on in-process Dask workers: each partition has its own ``DoFn``.

A Dask worker process deserialises each task's arguments, so every partition of a ``ParDo``
gets its own copy of the ``DoFn`` and of the lists that receive its outputs. An in-process
worker (``distributed.LocalCluster(processes=False)``, ``Client(processes=False)``) runs the
tasks with the very objects the graph holds: these tests run pipelines there and check that a
partition returns its own outputs only (one shared receiver list made each partition return
the outputs of every partition before it) and that two partitions running at once on two
threads do not share one ``DoFn`` instance (batching steps and lifted combines keep their state
on ``self``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from collect import DumpToFile
from matrix import assert_equal_and_nonempty, frequency_chunks, on_both

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.runner import SCALING_DASK_RUNNER, run_pipeline
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPFrequencies

distributed = pytest.importorskip("distributed")


def _in_process_cluster(threads: int) -> object:
    return distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=threads,
        processes=False,
        # A free port for its HTTP server: the default one may be taken by another cluster.
        dashboard_address="127.0.0.1:0",
        silence_logs=40,
    )


@pytest.fixture(scope="module")
def one_thread() -> Iterator[str]:
    """A one-worker, one-thread in-process cluster's scheduler address."""
    cluster = _in_process_cluster(1)
    try:
        yield cluster.scheduler_address  # type: ignore[attr-defined]
    finally:
        cluster.close()  # type: ignore[attr-defined]


def _options(address: str, *extra: str) -> PipelineOptions:
    return PipelineOptions(
        [f"--runner={SCALING_DASK_RUNNER}", f"--dask_client_address={address}", *extra]
    )


def _run(p: beam.Pipeline, pcoll: beam.PCollection, path: Path) -> list:
    dump = DumpToFile(str(path))
    assert_that(pcoll, dump)
    run_pipeline(p)
    return dump.load()


def test_each_partition_returns_only_its_own_outputs(one_thread: str, tmp_path: Path):
    p = beam.Pipeline(options=_options(one_thread))
    counted = (
        p
        | beam.Create(list(range(1000)))
        | beam.Reshuffle()
        | beam.Map(lambda x: x + 1)
        | beam.combiners.Count.Globally()
    )
    assert _run(p, counted, tmp_path / "count.pickle") == [1000]


def test_dp_frequencies_equal_the_fnapi_runner_on_an_in_process_worker(
    one_thread: str, tmp_path: Path
):
    chunks = frequency_chunks(3)

    def build(p: beam.Pipeline) -> beam.PCollection:
        t = DPFrequencies(
            256, 3, PrivacyBudget.pure(1.0), seed=2, noise_source=NoiseSource.insecure_for_tests(5)
        )
        return p | beam.Create(chunks) | beam.Reshuffle() | t

    ref, got = on_both(
        build, tmp_path, [f"--runner={SCALING_DASK_RUNNER}", f"--dask_client_address={one_thread}"]
    )
    assert_equal_and_nonempty(ref, got)


# Both partitions of the next test wait here in ``start_bundle``, so they run at once.
_BOTH_STARTED = threading.Barrier(2, timeout=60)
_BUNDLE_IDS = itertools.count()


class TagWithBundle(beam.DoFn):
    """Each element paired with the id its bundle drew in ``start_bundle``."""

    def start_bundle(self) -> None:
        self.bundle = next(_BUNDLE_IDS)
        _BOTH_STARTED.wait()

    def process(self, element: int) -> Iterator[tuple[int, int]]:
        yield self.bundle, element


def test_two_partitions_on_two_threads_do_not_share_a_dofn(tmp_path: Path):
    cluster = _in_process_cluster(2)
    try:
        address = cluster.scheduler_address  # type: ignore[attr-defined]
        p = beam.Pipeline(options=_options(address, "--dask_npartitions=2"))
        tagged = p | beam.Create(list(range(200))) | beam.ParDo(TagWithBundle())
        got = _run(p, tagged, tmp_path / "tagged.pickle")
    finally:
        cluster.close()  # type: ignore[attr-defined]
    assert sorted(e for _, e in got) == list(range(200))
    # One DoFn per partition: each partition keeps the id its own start_bundle drew.
    assert len({b for b, _ in got}) == 2
