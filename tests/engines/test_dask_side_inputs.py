"""The ``ScalingDaskRunner`` computes a step once when it feeds both a side input and a main input.

A side input reaches the tasks that read it as one ``dask.delayed`` list. Built with
``delayed(list)(bag)``, that list would optimise the bag's graph on its own and rename its tasks,
so the steps upstream of the side input would run once for it and once more for every other
consumer: select-then-count would run its selection pass (its read, its Misra-Gries sketches and
their merge) twice and read the input it shares with the count pass three times. These tests count how many elements a
``DoFn`` upstream of both consumers processes, on an in-process Dask worker (the ``DoFn`` copies
run in this process, so they share one counter), and check what the pipeline releases.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.runner import SCALING_DASK_RUNNER, run_pipeline
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPHeavyHitters

distributed = pytest.importorskip("distributed")

_LOCK = threading.Lock()
#: Elements processed by every copy of :class:`CountProcessed` in this process, by label.
_PROCESSED: dict[str, int] = {}


class CountProcessed(beam.DoFn):
    """Passes its elements through and counts them under ``label`` in this process."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def process(self, element: object) -> Iterator[object]:
        with _LOCK:
            _PROCESSED[self.label] = _PROCESSED.get(self.label, 0) + 1
        yield element


@pytest.fixture(scope="module")
def in_process() -> Iterator[str]:
    """A one-worker, one-thread in-process cluster's scheduler address."""
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        # A free port for its HTTP server: the default one may be taken by another cluster.
        dashboard_address="127.0.0.1:0",
        silence_logs=40,
    )
    try:
        yield cluster.scheduler_address  # type: ignore[attr-defined]
    finally:
        cluster.close()  # type: ignore[attr-defined]


def _run(address: str, build, path: Path) -> list:
    """Run ``build(p)`` on the ScalingDaskRunner at ``address``; its output's elements."""
    p = beam.Pipeline(
        options=PipelineOptions(
            [f"--runner={SCALING_DASK_RUNNER}", f"--dask_client_address={address}"]
        )
    )
    dump = DumpToFile(str(path))
    assert_that(build(p), dump)
    run_pipeline(p)
    return dump.load()


def test_a_step_read_as_main_and_side_input_runs_once(in_process: str, tmp_path: Path):
    _PROCESSED.pop("numbers", None)

    def build(p: beam.Pipeline) -> beam.PCollection:
        numbers = (
            p
            | beam.Create(list(range(200)))
            | beam.Reshuffle()
            | beam.ParDo(CountProcessed("numbers"))
        )
        total = numbers | beam.CombineGlobally(sum)
        return numbers | beam.Map(lambda x, s: x + s, beam.pvalue.AsSingleton(total))

    got = _run(in_process, build, tmp_path / "out.pickle")
    assert sorted(got) == [x + sum(range(200)) for x in range(200)]
    # Each element once: not once for the side input and once again for the main input.
    assert _PROCESSED["numbers"] == 200


def test_select_then_count_reads_its_input_once(in_process: str, tmp_path: Path):
    _PROCESSED.pop("keys", None)
    keys = [i % 7 for i in range(400)] + [0] * 320

    def build(p: beam.Pipeline) -> beam.PCollection:
        hh = DPHeavyHitters(
            16,
            PrivacyBudget.approx(4.0, 1e-6),
            top=5,
            noise_source=NoiseSource.insecure_for_tests(3),
        )
        return (
            p
            | beam.Create(keys)
            | beam.Reshuffle()
            | beam.ParDo(CountProcessed("keys"))
            | "Release" >> hh
        )

    got = _run(in_process, build, tmp_path / "hh.pickle")
    # The selection pass and the count pass share one read of each element.
    assert _PROCESSED["keys"] == len(keys)
    # Key 0 holds more than half of the elements: selected and counted at this budget.
    assert got and got[0][0] == 0, got
