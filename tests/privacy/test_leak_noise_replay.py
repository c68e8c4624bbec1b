"""A pipeline built once and run many times draws fresh noise in every run; a retry does not.

A scheduler or a staged template launches one constructed (or pickled) pipeline again and
again. If every run drew the same noise, the difference of two runs' releases would be the
exact difference of their inputs. Each DP transform application therefore draws a run salt
when the run starts (a one-element side input, materialised once per run), and every release
derives its noise key from the application key and that salt: two runs never share noise, while
every retry of a release within one run reads the same salt and re-draws the same noise.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource, NoiseStream, discrete_laplace, new_run_salt
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.transforms import (
    ContinualDPSketch,
    DPAggregate,
    DPCount,
    DPFrequencies,
    DPHeavyHitters,
    DPHistogram,
    DPIntermittentQueries,
    DPQuantiles,
    DPSlidingWindowFrequencies,
    QuerySchedule,
    ReleaseMechanism,
)
from beam_dpsketch.transforms.count import CountLaplaceMechanism
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.sliding import SlidingLayout

RUNNER = "FnApiRunner"
SECRET_KEY = b"persisted-secret-key-of-a-sched"
KEYS = ["a", "b", "a", "c", "a", "b", "d", "a"] * 40
SMALL = PrivacyBudget.pure(0.05)
APPROX = PrivacyBudget.approx(0.5, 1e-6)
SCHEDULE = QuerySchedule([(40, ["a", "b"]), (120, ["a", "c"]), (300, ["a", "b", "d"])])


def _source() -> NoiseSource:
    # A persisted secret key, as a scheduled job would keep it: the same in every run.
    return NoiseSource(SECRET_KEY)


def _windowed_keys(p: beam.Pipeline, name: str) -> beam.PCollection:
    # 20 windows of 10 s, so DPCount makes 20 releases per run.
    return (
        p
        | f"{name}Data" >> beam.Create(list(enumerate(KEYS)))
        | f"{name}Stamp" >> beam.Map(lambda r: TimestampedValue(r[1], float(r[0] % 200)))
        | f"{name}Windows" >> beam.WindowInto(FixedWindows(10))
    )


def _build(p: beam.Pipeline, out: Path) -> dict[str, DumpToFile]:
    """One application of every DP transform family, each output dumped to its own file."""
    keys = p | "Keys" >> beam.Create(KEYS)
    # Heavy enough that the thresholded heavy-hitter releases are never empty.
    many = p | "ManyKeys" >> beam.Create(KEYS * 10)
    positions = p | "Positions" >> beam.Create([(i + 1, k) for i, k in enumerate(KEYS)])
    indexed = p | "Indexed" >> beam.Create(list(enumerate(KEYS)))
    values = p | "Values" >> beam.Create([i % 97 for i in range(len(KEYS))])
    queries = p | "Queries" >> beam.Create([(t, list(q)) for t, q in SCHEDULE.batches])
    stamped = positions | "StampPositions" >> beam.Map(lambda r: TimestampedValue(r[1], r[0]))
    outputs = {
        "count": _windowed_keys(p, "Count") | "DPCount" >> DPCount(SMALL, noise_source=_source()),
        "aggregate": _windowed_keys(p, "Agg")
        | "DPAggregate"
        >> DPAggregate(
            beam.combiners.CountCombineFn(),
            CountLaplaceMechanism(),
            budget=SMALL,
            noise_source=_source(),
        ),
        "histogram": many | "DPHistogram" >> DPHistogram(8, APPROX, noise_source=_source()),
        "select_count": many
        | "SelectThenCount"
        >> DPHeavyHitters(8, APPROX, mechanism="select-then-count", noise_source=_source()),
        "frequencies": keys
        | "DPFrequencies"
        >> DPFrequencies(
            32, 3, SMALL, seed=1, query_keys=["a", "b", "c", "d"], noise_source=_source()
        ),
        "quantiles": values
        | "DPQuantiles"
        >> DPQuantiles(
            [0.25, 0.5, 0.75],
            0,
            100,
            SMALL,
            tree=QuantileTree(width=32, depth=3),
            noise_source=_source(),
        ),
        "continual": indexed
        | "Continual"
        >> ContinualDPSketch(
            16,
            3,
            len(KEYS),
            APPROX,
            query_keys=["a", "b"],
            release_every=40,
            noise_source=_source(),
        ),
        "sliding": positions
        | "Sliding"
        >> DPSlidingWindowFrequencies(
            40,
            16,
            2,
            APPROX,
            release_every=40,
            query_keys=["a", "b"],
            noise_source=_source(),
            layout=SlidingLayout(block=20, alpha="1/2"),
        ),
        "intermittent": positions
        | "IntermittentSchedule"
        >> DPIntermittentQueries(
            16, 3, SMALL, queries=SCHEDULE, clock="positions", noise_source=_source()
        ),
        "intermittent_event_time": stamped
        | "IntermittentEventTime"
        >> DPIntermittentQueries(
            16, 3, SMALL, queries=queries, clock="positions", noise_source=_source()
        ),
    }
    dumps = {}
    for name, pcoll in outputs.items():
        dumps[name] = DumpToFile(str(out / name))
        assert_that(pcoll, dumps[name], label=f"Dump{name}")
    return dumps


def _canonical(records: list[Any]) -> list[bytes]:
    # Order-free comparison of any release records, by their pickles: some release objects
    # (e.g. PrivateKeyCounts) show no values in their repr.
    return sorted(pickle.dumps(r) for r in records)


def _results(dumps: dict[str, DumpToFile]) -> dict[str, list[bytes]]:
    return {name: _canonical(d.load()) for name, d in dumps.items()}


def test_a_pipeline_run_twice_draws_new_noise_in_every_family(tmp_path):
    p = beam.Pipeline(runner=RUNNER)
    dumps = _build(p, tmp_path)
    p.run().wait_until_finish()
    first = _results(dumps)
    p.run().wait_until_finish()
    second = _results(dumps)
    assert set(first) == set(second)
    assert all(first.values()), "every transform releases something"
    # Same input in both runs: any difference is noise. Identical releases mean that the
    # second run replayed the first run's noise (the difference of two runs would then be the
    # exact difference of their inputs). Each family releases many noisy values, so fresh
    # noise makes them all equal with negligible probability.
    replayed = [name for name in first if first[name] == second[name]]
    assert replayed == []


def test_a_staged_pipeline_draws_new_noise_in_every_run(tmp_path):
    # A staged template: the constructed pipeline is kept as its portable proto (every DoFn
    # pickled in it) and launched again and again.
    p = beam.Pipeline(runner=RUNNER)
    counts = _windowed_keys(p, "Count") | DPCount(SMALL, noise_source=_source())
    dump = DumpToFile(str(tmp_path / "counts"))
    assert_that(counts, dump)
    staged = p.to_runner_api().SerializeToString()
    runs = []
    for _ in range(2):
        proto = beam_runner_api_pb2.Pipeline.FromString(staged)
        beam.Pipeline.from_runner_api(proto, p.runner, p.options).run().wait_until_finish()
        runs.append(sorted(r.count for r in dump.load()))
    assert len(runs[0]) == 20
    # 20 releases with discrete Laplace noise of scale 20: all equal only on a replay.
    assert runs[0] != runs[1]


def test_an_insecure_test_source_reproduces_every_run(tmp_path):
    # Seeded tests and demos stay reproducible: the run salt of an insecure source is a fixed,
    # public constant (and such a source protects nothing anyway).
    p = beam.Pipeline(runner=RUNNER)
    counts = _windowed_keys(p, "Count") | DPCount(
        SMALL, noise_source=NoiseSource.insecure_for_tests(5)
    )
    dump = DumpToFile(str(tmp_path / "counts"))
    assert_that(counts, dump)
    runs = []
    for _ in range(2):
        p.run().wait_until_finish()
        runs.append(sorted(r.count for r in dump.load()))
    assert runs[0] == runs[1]


# --------------------------------------------------------------------------------------------
# A retried bundle re-draws the same noise
# --------------------------------------------------------------------------------------------


class _FailOnceMechanism(ReleaseMechanism):
    """A count mechanism that records every noise draw and fails its first release attempt.

    The record goes to files: the runner runs copies of the mechanism, possibly in threads.
    """

    name = "fail-once count"

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        noise = int(discrete_laplace(stream, 1000, 1)[0])
        attempts = sorted(os.listdir(self.folder))
        with open(os.path.join(self.folder, f"attempt-{len(attempts)}"), "w") as f:
            f.write(str(noise))
        if not attempts:
            raise RuntimeError("simulated worker failure after the noise was drawn")
        return [{"count": accumulator + noise}]

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        return {"noise": "discrete Laplace", "noise_scale": 1000.0}


def _attempts(folder: Path) -> list[int]:
    return [int((folder / name).read_text()) for name in sorted(os.listdir(folder))]


def test_a_retried_release_redraws_the_same_noise(tmp_path):
    # The bundle-based DirectRunner retries a failed bundle. The retry reads the same
    # materialised run salt, so it draws exactly the noise of the failed attempt: no second,
    # independent draw of the same data is ever made.
    runs = []
    for run in range(2):
        folder = tmp_path / f"run{run}"
        folder.mkdir()
        dump = DumpToFile(str(tmp_path / f"out{run}"))
        options = PipelineOptions(direct_num_workers=1)
        with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
            released = (
                p
                | beam.Create(list(range(50)))
                | DPAggregate(
                    beam.combiners.CountCombineFn(),
                    _FailOnceMechanism(str(folder)),
                    budget=PrivacyBudget.pure(1.0),
                    noise_source=_source(),
                )
            )
            assert_that(released, dump)
        attempts = _attempts(folder)
        assert len(attempts) == 2, "the runner did not retry the failed release"
        assert attempts[0] == attempts[1]
        assert dump.load() == [{"count": 50 + attempts[1]}]
        runs.append(attempts[0])
    # A new run of the same construction draws new noise (scale 1000: equal with p ~ 5e-4).
    assert runs[0] != runs[1]


def test_the_run_key_is_a_function_of_the_application_key_and_the_salt():
    app = _source().for_application()
    salt, other = b"\x01" * 16, b"\x02" * 16
    first = app.for_run(salt).stream(("r", "global", 0)).uint64(4)
    # The derivation a retried bundle repeats gives the same stream ...
    again = app.for_run(bytes(salt)).stream(("r", "global", 0)).uint64(4)
    np.testing.assert_array_equal(first, again)
    # ... and a pickled copy of the application source (a worker) derives it too.
    worker = pickle.loads(pickle.dumps(app))
    np.testing.assert_array_equal(worker.for_run(salt).stream(("r", "global", 0)).uint64(4), first)
    # Another run's salt, or no run salt at all, gives other noise.
    assert not np.array_equal(app.for_run(other).stream(("r", "global", 0)).uint64(4), first)
    assert not np.array_equal(app.stream(("r", "global", 0)).uint64(4), first)


def test_run_salts_are_fresh_for_secret_sources_and_fixed_for_test_sources():
    secret = _source().for_application()
    assert new_run_salt(secret) != new_run_salt(secret)
    assert len(new_run_salt(secret)) == 16
    test_source = NoiseSource.insecure_for_tests(3).for_application()
    assert new_run_salt(test_source) == new_run_salt(test_source)
    # An insecure source's run source is the source itself: seeded tests that recompute the
    # noise of a release from ``transform.noise_source`` keep working.
    assert test_source.for_run(new_run_salt(test_source)) is test_source
    with pytest.raises(TypeError, match="salt"):
        secret.for_run("not bytes")  # type: ignore[arg-type]
