"""ContinualDPSketch (element model): what reaches the stateful step is bounded by the schedule.

The batches are cut at the public release times and pre-aggregated per release interval before
the single-key stateful step, so the number of keyed elements the step receives (which a runner
may materialise, and which the step buffers when they arrive out of order) is the number of
release intervals per bundle, not the number of batches or rows. Checked by counting the
elements of the stateful step's input PCollection, found by its step label.

A fine schedule (``release_every=1``, a wide sketch) passes the per-bundle cap on held
summaries, which are then sent on before the bundle ends: the releases are still the core's.

Runner: FnApiRunner in-process (one bundle for ``Create(..., reshuffle=False)``).
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.pipeline import PipelineVisitor
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import GlobalWindow
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.continual.sketch import new_continual_sketch
from beam_dpsketch.transforms.continual import ContinualDPSketch, continual_release_prefix

BUDGET = PrivacyBudget.approx(0.5, 1e-6)


class _StepInput(PipelineVisitor):
    """Finds the main input PCollection of the step whose full label ends with ``suffix``."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.found: list[beam.PCollection] = []

    def visit_transform(self, node) -> None:
        if node.full_label.endswith(self.suffix):
            self.found.extend(node.main_inputs.values())


@pytest.mark.parametrize(
    ("algorithm", "sketch"), [("lazy", "count-min"), ("punctual", "count-sketch")]
)
def test_stateful_step_receives_one_element_per_release_interval(algorithm, sketch):
    n, size, every = 3000, 7, 400
    keys = (np.random.default_rng(2).zipf(1.3, n) % 100).astype(np.int64)
    elements = [(pos, keys[pos : pos + size]) for pos in range(0, n, size)]
    order = np.random.default_rng(3).permutation(len(elements))
    t = ContinualDPSketch(
        32,
        3,
        n,
        BUDGET,
        query_keys=[1, 2],
        sketch=sketch,
        algorithm=algorithm,
        release_every=every,
        noise_source=NoiseSource.insecure_for_tests(5),
        label="memory",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        releases = p | beam.Create([elements[i] for i in order], reshuffle=False) | t
        visitor = _StepInput("/ContinualRelease")
        p.visit(visitor)
        assert len(visitor.found) == 1
        counted = visitor.found[0] | "CountIn" >> beam.combiners.Count.Globally()
        intervals = -(-n // every)
        # 429 batches, 8 release intervals (the last one ends at T = 3000).
        assert len(elements) > 50 * intervals
        assert_that(counted, equal_to([intervals]), label="OneElementPerInterval")
        times = releases | beam.Map(lambda record: record[0]) | beam.Distinct()
        expected = [*range(every, n + 1, every), n]
        assert_that(times, equal_to(sorted(set(expected))), label="EveryRelease")


def test_fine_schedule_sends_summaries_on_before_the_bundle_ends(tmp_path):
    # release_every=1 and a wide sketch: the bundle's summaries pass the per-bundle cap many
    # times over, so they are sent on early; the releases are still exactly the core's.
    n, width = 1000, 1024
    keys = (np.random.default_rng(4).zipf(1.3, n) % 100).astype(np.int64)
    elements = [(pos, keys[pos : pos + 10]) for pos in range(0, n, 10)]
    dump = DumpToFile(str(tmp_path / "out.pickle"))
    t = ContinualDPSketch(
        width,
        3,
        n,
        BUDGET,
        query_keys=[1, 2],
        release_every=1,
        noise_source=NoiseSource.insecure_for_tests(6),
        label="fine",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(elements[::-1], reshuffle=False) | t, dump)
    got = sorted(dump.load())
    core = new_continual_sketch(
        width,
        3,
        n,
        BUDGET,
        release_prefix=continual_release_prefix("fine", GlobalWindow()),
        noise_source=t.noise_source,
    )
    expected = []
    for key in keys.tolist():
        core.update(key)
        expected += [
            (core.t, q, v) for q, v in zip([1, 2], core.estimate([1, 2]).tolist(), strict=True)
        ]
    assert got == sorted(expected)
