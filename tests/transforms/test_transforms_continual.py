"""ContinualDPSketch: equal to the core sketch on the same steps, on batch and streaming runners.

Every released value is checked exactly against the core sketch (``LazySketch`` /
``PunctualSketch``) built with the same noise source and release prefix
(``continual_release_prefix(label, window)``) and fed the same time steps, so "noise only from
the keyed streams of this label and window, nothing drawn twice" is what is asserted:

* element model: the core fed the whole stream in position order, whatever order and bundling
  Beam delivered the ``(position, batch)`` elements in (FnApiRunner, multi_processing x2, and
  TestStream on the DirectRunner with ``--streaming``);
* element model under a trigger with early DISCARDING panes (one of them empty): triggers play
  no part in the stateful step, so the releases are those of the ordered stream;
* pane model: one step for the whole input of the global window (the only pane a data-independent
  trigger gives), equal to the core fed the exact sketch with ``step_counts``; data-dependent
  triggers and non-global windows are refused (``tests/privacy/test_leak_continual_pane_steps.py``).

Runners: FnApiRunner in-process for batch; DirectRunner ``--streaming`` for TestStream.
"""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    SlidingWindows,
    TimestampedValue,
)
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import (
    BudgetExceededError,
    PrivacyAccountant,
    PrivacyBudget,
    PrivacyUnit,
)
from beam_dpsketch.sketches import CountSketch
from beam_dpsketch.sketches.continual.sketch import new_continual_sketch
from beam_dpsketch.transforms.continual import ContinualDPSketch
from beam_dpsketch.transforms.release import release_id_for

SEED = 20261122
BUDGET = PrivacyBudget.approx(0.5, 1e-6)
QUERIES = [0, 1, 2, 7, 123]


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(str(tmp_path / "out.pickle"))


def _stream(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.3, n) % 200).astype(np.int64)


def _elements(keys: np.ndarray, sizes: list[int]) -> list:
    """``(position, batch)`` pairs covering ``keys`` in consecutive runs of ``sizes`` (cycled);
    runs of one key are given as a single key, not a batch."""
    out, pos, i = [], 0, 0
    while pos < len(keys):
        size = sizes[i % len(sizes)]
        run = keys[pos : pos + size]
        out.append((pos, int(run[0]) if len(run) == 1 else run))
        pos += len(run)
        i += 1
    return out


def _core(width, depth, horizon, source, label, window=None, **kwargs):
    return new_continual_sketch(
        width,
        depth,
        horizon,
        BUDGET,
        # The documented prefix, spelled out (not via continual_release_prefix, so that a
        # prefix that drops the window or the label fails here).
        release_prefix=release_id_for(label, window or GlobalWindow(), 0),
        noise_source=source,
        **kwargs,
    )


def _expected_element_releases(keys, times, core, queries=QUERIES):
    """``{t: answers}`` of the core fed ``keys`` in order, read at each time in ``times``."""
    out = {}
    for t in sorted(times):
        core.update_batch(keys[core.t : t])
        out[t] = dict(zip(queries, core.estimate(queries).tolist(), strict=True))
    return out


def _by_t(releases) -> dict:
    by_t = {r.t: r.answers for r in releases}
    assert len(by_t) == len(releases), "two releases for one time step"
    return by_t


# --------------------------------------------------------------------------------------------
# Element model, batch
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "sketch", "width", "n", "horizon", "every"),
    [
        # T = n: the horizon itself (not a multiple of 300) is released too.
        ("lazy", "count-min", 64, 2000, 2000, 300),
        ("lazy", "count-sketch", 64, 2000, 4096, 250),
        ("punctual", "count-min", 16, 600, 700, 100),
        ("punctual", "count-sketch", 16, 600, 600, 75),
    ],
)
def test_element_model_equals_core_on_the_ordered_stream(
    algorithm, sketch, width, n, horizon, every, dump
):
    source = NoiseSource.insecure_for_tests(SEED)
    keys = _stream(n)
    # Runs of 1..173 keys, delivered in reverse: every run but the first waits in the buffer.
    elements = _elements(keys, [173, 1, 40, 97, 1, 11])[::-1]
    t = ContinualDPSketch(
        width,
        3,
        horizon,
        BUDGET,
        query_keys=QUERIES,
        sketch=sketch,
        algorithm=algorithm,
        release_every=every,
        noise_source=source,
        label="cont",
        with_metadata=True,
        with_table=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(elements, reshuffle=False) | t, dump)
    releases = dump.load()
    times = list(range(every, n + 1, every)) + ([horizon] if horizon == n and n % every else [])
    assert sorted(r.t for r in releases) == times
    core = _core(width, 3, horizon, t.noise_source, "cont", sketch=sketch, algorithm=algorithm)
    expected = {}
    for time in times:
        core.update_batch(keys[core.t : time])
        expected[time] = (
            dict(zip(QUERIES, core.estimate(QUERIES).tolist(), strict=True)),
            core.noisy_table(),
        )
    for r in releases:
        answers, table = expected[r.t]
        assert r.answers == answers
        np.testing.assert_array_equal(r.noisy_table, table)
        assert (r.sketch, r.algorithm, r.width, r.depth, r.horizon, r.time_model) == (
            sketch,
            algorithm,
            width,
            3,
            horizon,
            "element",
        )
        assert (r.epsilon, r.delta) == (0.5, 1e-6)
        assert r.mechanism == t.charge.mechanism
        assert r.noise_scale == t.charge.noise_scale
        assert r.neighbouring_relation == t.neighbouring_relation
        assert (r.window_start, r.window_end, r.transform) == (None, None, "cont")


@pytest.mark.parametrize(
    ("algorithm", "sketch"),
    [(a, s) for a in ("lazy", "punctual") for s in ("count-min", "count-sketch")],
)
@pytest.mark.parametrize(
    ("sizes", "every", "horizon"),
    [
        # release_every cuts most batches; intervals shorter and longer than the width (24).
        ([1, 7, 30], 13, 500),
        ([150, 1, 61], 90, 470),
    ],
)
def test_element_model_shuffled_batches_equal_core_update_batch(
    algorithm, sketch, sizes, every, horizon, dump
):
    # The pre-aggregated path (pieces cut at the release times, summarized per interval, applied
    # in interval order) releases exactly what the core sketch fed the stream with update_batch
    # releases, under the same noise key and prefix, whatever the order of the elements.
    n = 470
    keys = _stream(n, seed=9)
    elements = _elements(keys, sizes)
    order = np.random.default_rng(4).permutation(len(elements))
    t = ContinualDPSketch(
        24,
        3,
        horizon,
        BUDGET,
        query_keys=QUERIES,
        sketch=sketch,
        algorithm=algorithm,
        release_every=every,
        noise_source=NoiseSource.insecure_for_tests(SEED),
        label="shuffled",
        with_metadata=True,
        with_table=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create([elements[i] for i in order], reshuffle=False) | t, dump)
    releases = dump.load()
    times = [x for x in range(every, n + 1, every)] + ([n] if n == horizon and n % every else [])
    assert sorted(r.t for r in releases) == times
    core = _core(24, 3, horizon, t.noise_source, "shuffled", sketch=sketch, algorithm=algorithm)
    by_t = {r.t: r for r in releases}
    for time in times:
        core.update_batch(keys[core.t : time])
        assert by_t[time].answers == dict(
            zip(QUERIES, core.estimate(QUERIES).tolist(), strict=True)
        )
        np.testing.assert_array_equal(by_t[time].noisy_table, core.noisy_table())


def test_default_records_are_the_answers_of_the_metadata_releases(tmp_path):
    # with_metadata=False (the default) emits (t, key, estimate) per query key and release:
    # exactly the answers of the ContinualRelease records, nothing else.
    keys = _stream(700, seed=2)
    elements = _elements(keys, [90, 1, 33])

    def run(with_metadata):
        out = DumpToFile(str(tmp_path / f"{with_metadata}.pickle"))
        t = ContinualDPSketch(
            32,
            3,
            700,
            BUDGET,
            query_keys=QUERIES,
            release_every=100,
            noise_source=NoiseSource.insecure_for_tests(SEED),
            label="records",
            with_metadata=with_metadata,
        )
        with beam.Pipeline(runner=FnApiRunner()) as p:
            assert_that(p | beam.Create(elements) | t, out)
        return out.load()

    releases = run(True)
    expected = sorted((r.t, k, v) for r in releases for k, v in r.answers.items())
    assert sorted(run(False)) == expected
    assert len(expected) == 7 * len(QUERIES)


def test_same_seed_and_label_reproduce_other_seed_or_label_differ(tmp_path):
    keys = _stream(1500, seed=3)
    elements = _elements(keys, [500])

    def run(seed, label):
        out = DumpToFile(str(tmp_path / f"{seed}-{label}.pickle"))
        t = ContinualDPSketch(
            32,
            3,
            1500,
            BUDGET,
            query_keys=QUERIES,
            sketch="count-min",
            release_every=500,
            noise_source=NoiseSource.insecure_for_tests(seed),
            label=label,
            with_metadata=True,
        )
        with beam.Pipeline(runner=FnApiRunner()) as p:
            assert_that(p | beam.Create(elements) | t, out)
        return sorted((r.t, tuple(r.answers.values())) for r in out.load())

    first = run(1, "a")
    assert run(1, "a") == first
    # Other noise: every release differs (same exact data and t).
    for other in (run(2, "a"), run(1, "b")):
        assert [t for t, _ in other] == [t for t, _ in first]
        assert all(o != f for (_, o), (_, f) in zip(other, first, strict=True))


def test_gap_holds_back_every_later_step(dump):
    # Position 700..799 never arrives: steps after 700 cannot be processed, so nothing after the
    # gap is released (out-of-order data is buffered, never skipped).
    source = NoiseSource.insecure_for_tests(SEED)
    keys = _stream(1200)
    elements = [e for e in _elements(keys, [100]) if e[0] != 700]
    t = ContinualDPSketch(
        32,
        3,
        2000,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        release_every=200,
        noise_source=source,
        label="gap",
        with_metadata=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(elements[::-1]) | t, dump)
    got = _by_t(dump.load())
    assert sorted(got) == [200, 400, 600]
    core = _core(32, 3, 2000, t.noise_source, "gap", sketch="count-min")
    assert got == _expected_element_releases(keys, [200, 400, 600], core)


@pytest.fixture
def _workers_can_import_this_module(monkeypatch):
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    )


@pytest.mark.usefixtures("_workers_can_import_this_module")
def test_element_model_on_two_worker_processes_equals_core(dump):
    source = NoiseSource.insecure_for_tests(SEED)
    keys = _stream(3000, seed=5)
    t = ContinualDPSketch(
        48,
        3,
        3000,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-sketch",
        release_every=1000,
        noise_source=source,
        label="mp",
        with_metadata=True,
    )
    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        assert_that(p | beam.Create(_elements(keys, [128, 77])) | t, dump)
    core = _core(48, 3, 3000, t.noise_source, "mp", sketch="count-sketch")
    assert _by_t(dump.load()) == _expected_element_releases(keys, [1000, 2000, 3000], core)


# --------------------------------------------------------------------------------------------
# Streaming (TestStream on the DirectRunner --streaming)
# --------------------------------------------------------------------------------------------


def streaming() -> beam.Pipeline:
    # --streaming + TestStream runs on the BundleBasedDirectRunner.
    return beam.Pipeline(options=PipelineOptions(["--streaming"]))


def test_streaming_element_model_out_of_order_bundles(dump):
    source = NoiseSource.insecure_for_tests(SEED)
    keys = _stream(900, seed=7)
    runs = _elements(keys, [100, 1, 49, 150])
    # One add_elements per bundle, later positions first within each pair of bundles.
    order = [runs[i + 1] if i + 1 < len(runs) else runs[i] for i in range(0, len(runs), 2)]
    order += [runs[i] for i in range(0, len(runs), 2) if i + 1 < len(runs)]
    assert sorted(e[0] for e in order) == [e[0] for e in runs]
    s = ts.TestStream().advance_watermark_to(0)
    for i, element in enumerate(order):
        s = s.add_elements([TimestampedValue(element, i)])
    t = ContinualDPSketch(
        32,
        3,
        900,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        release_every=100,
        noise_source=source,
        label="stream-el",
        with_metadata=True,
    )
    p = streaming()
    assert_that(p | s.advance_watermark_to_infinity() | t, dump)
    p.run().wait_until_finish()
    core = _core(32, 3, 900, t.noise_source, "stream-el", sketch="count-min")
    assert _by_t(dump.load()) == _expected_element_releases(keys, range(100, 901, 100), core)


def test_streaming_element_model_ignores_early_discarding_panes(dump):
    # Early firings every element in fixed windows, and an empty ON_TIME pane: the stateful step
    # sees each element once, in whichever pane, so the releases of window [0, 10) are those of
    # its ordered stream, and window [10, 20) (no data) releases nothing.
    source = NoiseSource.insecure_for_tests(SEED)
    keys = _stream(60, seed=4)
    runs = _elements(keys, [7, 1, 12])
    s = ts.TestStream().advance_watermark_to(0)
    for element in runs[::-1]:
        s = s.add_elements([TimestampedValue(element, 1)])
    s = s.advance_watermark_to(30).advance_watermark_to_infinity()
    t = ContinualDPSketch(
        16,
        3,
        60,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        release_every=20,
        noise_source=source,
        label="early-el",
        with_metadata=True,
    )
    p = streaming()
    windowed = (
        p
        | s
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    assert_that(windowed | t, dump)
    p.run().wait_until_finish()
    releases = dump.load()
    assert {(r.window_start, r.window_end) for r in releases} == {(0.0, 10.0)}
    core = _core(16, 3, 60, t.noise_source, "early-el", IntervalWindow(0, 10), sketch="count-min")
    assert _by_t(releases) == _expected_element_releases(keys, [20, 40, 60], core)


# --------------------------------------------------------------------------------------------
# Errors and accounting
# --------------------------------------------------------------------------------------------


def test_element_beyond_horizon_fails_naming_t():
    t = ContinualDPSketch(
        16,
        3,
        100,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        noise_source=NoiseSource.insecure_for_tests(1),
        with_metadata=True,
    )
    with pytest.raises(Exception, match=r"positions would go beyond the declared horizon T=100"):
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = p | beam.Create([(0, _stream(50)), (50, _stream(100))]) | t


@pytest.mark.parametrize(
    ("elements", "error"),
    [
        ([(0, 1), (0, 2)], "positions must be unique"),
        ([(3, 1), (3, 2)], "a time step arrived twice"),
        # Overlapping runs: found when the gap before them is filled.
        ([(2, np.arange(5)), (4, 1), (0, np.arange(2))], "arrived after it was processed"),
        # A duplicate run and a missing run of the same length: the interval's row count is
        # right, the overlap is what gives it away.
        ([(0, np.arange(50)), (0, np.arange(50)), (50, np.arange(50))], "arrived twice"),
        ([(0, np.arange(50)), (50, np.arange(50)), (0, np.arange(50))], "arrived twice"),
        ([(-1, 1)], "position must be an int >= 0"),
        ([("0", 1)], "position must be an int >= 0"),
        ([5], "expects \\(position, key\\)"),
        ([(0, 1.5)], "invalid key of type 'float'"),
        ([(0, np.array([1.5]))], "dtype float64"),
    ],
)
def test_bad_elements_raise_naming_the_problem(elements, error):
    t = ContinualDPSketch(
        16,
        3,
        100,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        noise_source=NoiseSource.insecure_for_tests(1),
        with_metadata=True,
    )
    with pytest.raises(Exception, match=error):
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = p | beam.Create(elements, reshuffle=False) | t


@pytest.mark.parametrize("reshuffle", [False, True])
def test_duplicate_run_filling_a_gap_of_its_length_raises(reshuffle):
    # Positions 0..49 twice and 50..99 never, in one release interval of 100: the interval has
    # exactly 100 rows, so only the overlap of the two runs shows the duplicate.
    t = ContinualDPSketch(
        16,
        3,
        200,
        BUDGET,
        query_keys=QUERIES,
        release_every=100,
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    elements = [(0, np.arange(50)), (100, np.arange(100)), (0, np.arange(50) + 7)]
    with pytest.raises(Exception, match="position: a time step arrived twice"):
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = p | beam.Create(elements, reshuffle=reshuffle) | t


def test_zero_noise_source_is_refused():
    with pytest.raises(ValueError, match="zero-noise"):
        ContinualDPSketch(
            16,
            3,
            100,
            BUDGET,
            query_keys=QUERIES,
            sketch="count-min",
            noise_source=NoiseSource.zero_noise_for_tests(),
            with_metadata=True,
        )


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"sketch": "lazy-cms"}, ValueError, "sketch must be one of"),
        ({"algorithm": "eager"}, ValueError, "algorithm must be one of"),
        ({"with_table": True}, ValueError, "with_table: .* with_metadata=True"),
        ({"time_model": "tick"}, ValueError, "time_model must be one of"),
        ({"horizon": 0}, ValueError, "horizon must be >= 1"),
        ({"horizon": 10.0}, TypeError, "horizon must be an int"),
        ({"release_every": 0}, ValueError, "release_every must be >= 1"),
        ({"query_keys": []}, ValueError, "at least one public query key"),
        ({"query_keys": "abc"}, TypeError, "query_keys must be a sequence"),
        ({"query_keys": [1.5]}, TypeError, "query_keys:"),
        ({"budget": PrivacyBudget.pure(0.5)}, ValueError, "delta > 0"),
        ({"budget": PrivacyBudget.zcdp(0.5)}, ValueError, "delta > 0"),
        (
            {"budget": PrivacyBudget.approx(1.5, 1e-6), "calibration": "paper"},
            ValueError,
            "epsilon must be < 1 with calibration='paper'",
        ),
        ({"width": 0}, ValueError, "width"),
        (
            {"privacy_unit": PrivacyUnit(id="u", max_contributions=2)},
            ValueError,
            "max_contributions applies to the pane",
        ),
        ({"key_fn": str}, ValueError, "key_fn applies to the pane"),
        ({"calibration": "exact"}, ValueError, "calibration must be one of"),
        ({"cs_sensitivity": "2d"}, ValueError, "cs_sensitivity must be one of"),
        ({"label": " "}, ValueError, "label must be a non-empty string"),
        ({"budget": None}, ValueError, "pass a PrivacyBudget, an accountant"),
    ],
)
def test_bad_parameters_raise_naming_them(kwargs, exc, message):
    args = {"width": 16, "depth": 3, "horizon": 100, "budget": BUDGET}
    args.update(kwargs)
    positional = [args.pop(k) for k in ("width", "depth", "horizon", "budget")]
    options = {"query_keys": QUERIES, "noise_source": NoiseSource.insecure_for_tests(1)}
    options.update(args)
    with pytest.raises(exc, match=message):
        ContinualDPSketch(*positional, **options)


def test_analytic_calibration_allows_epsilon_above_one():
    t = ContinualDPSketch(
        16,
        3,
        100,
        PrivacyBudget.approx(2.0, 1e-6),
        query_keys=QUERIES,
        sketch="count-min",
        calibration="analytic",
        noise_source=NoiseSource.insecure_for_tests(1),
        with_metadata=True,
    )
    assert t.noise_source.is_insecure


def test_charge_once_for_the_horizon_and_split_over_sliding_windows():
    acc = PrivacyAccountant(PrivacyBudget.approx(1.0, 1e-5), name="pipeline")
    p = beam.Pipeline(runner=FnApiRunner())
    events = p | beam.Create([(0, 1)])
    t1 = ContinualDPSketch(
        16,
        3,
        100,
        PrivacyBudget.approx(0.3, 2e-6),
        query_keys=QUERIES,
        sketch="count-min",
        accountant=acc,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="global",
        with_metadata=True,
    )
    _ = events | "G" >> t1
    # One release of the whole budget for the horizon (panes are steps, not releases).
    assert (t1.charge.releases, t1.charge.windows_per_unit) == (1, 1)
    assert t1.window_budget == PrivacyBudget.approx(0.3, 2e-6)
    assert t1.charge.details["horizon"] == 100
    sigma = new_continual_sketch(
        16, 3, 100, PrivacyBudget.approx(0.3, 2e-6), release_prefix="x", sketch="count-min"
    ).sigma
    assert t1.charge.noise_scale == pytest.approx(sigma)
    # SlidingWindows(30, 10): each element in 3 windows -> 3 window sketches of budget / 3.
    t2 = ContinualDPSketch(
        16,
        3,
        100,
        PrivacyBudget.approx(0.6, 3e-6),
        query_keys=QUERIES,
        sketch="count-min",
        accountant=acc,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="sliding",
        with_metadata=True,
    )
    _ = events | beam.WindowInto(SlidingWindows(30, 10)) | "S" >> t2
    assert (t2.charge.releases, t2.charge.windows_per_unit) == (3, 3)
    assert t2.window_budget.epsilon == pytest.approx(0.2)
    assert t2.window_budget.delta == pytest.approx(1e-6)
    assert acc.spent.epsilon == pytest.approx(0.9)
    assert acc.spent.delta == pytest.approx(5e-6)
    assert "horizon: 100" in t2.explain()
    # Over budget: refused at construction of the pipeline, before anything runs.
    t3 = ContinualDPSketch(
        16,
        3,
        100,
        PrivacyBudget.approx(0.2, 1e-6),
        query_keys=QUERIES,
        sketch="count-min",
        accountant=acc,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="third",
        with_metadata=True,
    )
    with pytest.raises(BudgetExceededError):
        _ = events | "T" >> t3
    # The same label twice would share noise.
    t4 = ContinualDPSketch(
        16,
        3,
        100,
        PrivacyBudget.approx(0.01, 1e-8),
        query_keys=QUERIES,
        sketch="count-min",
        accountant=acc,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="global",
        with_metadata=True,
    )
    with pytest.raises(ValueError, match="already has a charge for this label"):
        _ = events | "G2" >> t4


def test_pane_model_refuses_accumulating_mode():
    t = ContinualDPSketch(
        16,
        3,
        100,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        time_model="pane",
        noise_source=NoiseSource.insecure_for_tests(1),
        with_metadata=True,
    )
    p = beam.Pipeline(runner=FnApiRunner())
    windowed = (
        p
        | beam.Create([1])
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
            accumulation_mode=tr.AccumulationMode.ACCUMULATING,
        )
    )
    with pytest.raises(ValueError, match="DISCARDING"):
        _ = windowed | t


def test_explain_before_apply_is_an_error():
    t = ContinualDPSketch(
        16,
        3,
        100,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        noise_source=NoiseSource.insecure_for_tests(1),
        with_metadata=True,
    )
    with pytest.raises(RuntimeError, match="once the transform is applied"):
        t.explain()


def test_batch_pane_model_global_window_is_one_step_with_key_fn(dump):
    # Default windowing, batch: one (ON_TIME) pane, so one step whose delta is the exact sketch
    # of every record's key.
    source = NoiseSource.insecure_for_tests(SEED)
    records = [{"route": int(k)} for k in _stream(300, seed=9)]
    t = ContinualDPSketch(
        16,
        3,
        4,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-sketch",
        time_model="pane",
        key_fn=lambda r: r["route"],
        noise_source=source,
        label="batch-pane",
        with_metadata=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(records) | t, dump)
    (release,) = dump.load()
    core = _core(16, 3, 4, t.noise_source, "batch-pane", sketch="count-sketch")
    core.step_counts(CountSketch(16, 3, 0).update([r["route"] for r in records]))
    assert release.t == 1
    assert release.answers == dict(zip(QUERIES, core.estimate(QUERIES).tolist(), strict=True))


@pytest.mark.parametrize("watermark_trigger", [False, True], ids=["default", "after-watermark"])
def test_batch_pane_model_empty_input_still_releases_its_step(watermark_trigger, dump):
    # The existence of the step's release must not depend on whether any data arrived, with the
    # default windowing or with an explicit AfterWatermark() trigger in the global window.
    source = NoiseSource.insecure_for_tests(SEED)
    t = ContinualDPSketch(
        16,
        3,
        1,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        algorithm="punctual",
        time_model="pane",
        noise_source=source,
        label="empty-pane",
        with_metadata=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        keys = p | beam.Create([], reshuffle=False)
        if watermark_trigger:
            keys = keys | beam.WindowInto(
                GlobalWindows(),
                trigger=tr.AfterWatermark(),
                accumulation_mode=tr.AccumulationMode.DISCARDING,
            )
        assert_that(keys | t, dump)
    (release,) = dump.load()
    core = _core(16, 3, 1, t.noise_source, "empty-pane", sketch="count-min", algorithm="punctual")
    core.step_counts(np.zeros((3, 16), dtype=np.int64))
    assert release.t == 1
    assert release.answers == dict(zip(QUERIES, core.estimate(QUERIES).tolist(), strict=True))
    assert all(v != 0 for v in release.answers.values())  # noise only, not the exact zeros
