"""DPSlidingWindowFrequencies (DPSW-Sketch on Beam, docs/algorithms.md#dpsw-beam) against the core.

Every released value is checked **exactly**: the single-machine
:class:`~beam_dpsketch.sketches.sliding.dpsw.DPSWSketch` with the same (insecure, seeded) noise
source and label is fed the same items with ``update_at(keys, steps)`` and moved with
``advance_to(t)`` to each query step; the Beam output must be bit-identical. Since every PCMS's
noise comes from ``noise_source.stream((label, "dpsw", block, kind, level))``, equality shows
that the pipeline adds noise exactly once per sealed sketch, from the keyed stream, over the
exact raw counts of the range (any double noising, missing or duplicated item, or query on an
unsealed range would change the floats).

Count-based mode runs on the FnApiRunner (multi_processing with 2 workers, and in_memory);
time-based mode on the DirectRunner with ``--streaming`` and a TestStream (watermark advances;
the stream advances the watermark past the last query time before ending, because the direct
runner drops the output of timers that only fire at the final advance to +infinity).
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import FixedWindows, IntervalWindow, TimestampedValue
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming
from collect import DumpToFile

from beam_dpsketch.io import ordered_batches
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import BudgetExceededError, PrivacyAccountant, PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.transforms import DPSlidingWindowFrequencies, SlidingWindowRelease
from beam_dpsketch.transforms.sliding import SlidingLayout
from beam_dpsketch.transforms.sliding.stamp import Stamp
from beam_dpsketch.transforms.sliding.steps import SegmentWindows, StepClock
from beam_dpsketch.transforms.sliding.tables import SegmentTables

SEED = 20261122
WIDTH, DEPTH, SEED = 64, 3, 5
SHAPE = {"width": WIDTH, "depth": DEPTH, "seed": SEED}
# B = 10, alpha = 1/2: I = [10, 5, 3, 2, 1] (Wang, Wang and Chen, Algorithm 2; docs/algorithms.md#dpsw-checkpoints), segments cut at
# {0, 1, 2, 3, 5, 7, 8, 9, 10}.
CUTS = (0, 1, 2, 3, 5, 7, 8, 9, 10)
LAYOUT = {"block": 10, "alpha": "1/2"}


def source() -> NoiseSource:
    return NoiseSource.insecure_for_tests(SEED)


def run(pipeline: beam.Pipeline, build, out_file) -> list:
    out = DumpToFile(str(out_file))
    assert_that(build(pipeline), out)
    pipeline.run().wait_until_finish()
    return out.load()


def core(window: int, budget: PrivacyBudget, label: str, **kw) -> DPSWSketch:
    # A transform built from a fresh seeded source uses that source's first application key.
    noise = source().for_application()
    return DPSWSketch(window, budget, noise_source=noise, label=label, **SHAPE, **kw)


def stream_data(n: int, domain: int, seed: int) -> list[int]:
    # Zipf-like skew so heavy hitters exist; np.random only generates test data.
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.6, n) % domain).tolist()


# ------------------------------------------------------------------------------------------------
# Count-based mode (FnApiRunner)
# ------------------------------------------------------------------------------------------------


def test_count_mode_two_workers_equals_core(tmp_path):
    keys = stream_data(400, 30, 1)
    budget = PrivacyBudget.approx(1.0, 1e-6)
    queries = [0, 1, 2, 7, 29]
    transform = DPSlidingWindowFrequencies(
        60,
        WIDTH,
        DEPTH,
        budget,
        release_every=7,
        query_keys=queries,
        noise_source=source(),
        label="sw2",
        seed=SEED,
        layout=SlidingLayout(**LAYOUT),
    )
    options = PipelineOptions(
        [
            "--runner=FnApiRunner",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=2",
        ]
    )
    got = run(
        beam.Pipeline(options=options),
        lambda p: p | beam.Create(list(enumerate(keys, start=1))) | transform,
        tmp_path / "out.pickle",
    )
    ref = core(60, budget, "sw2", **LAYOUT).update_at(keys, np.arange(1, 401))
    expected = []
    for t in range(7, 401, 7):
        ref.advance_to(t)
        expected += [
            (t, k, v) for k, v in zip(queries, ref.estimate(queries).tolist(), strict=True)
        ]
    assert len(got) == len(expected) == 57 * len(queries)
    assert sorted(got) == sorted(expected)


def test_count_mode_heavy_hitters_with_metadata_equals_core(tmp_path):
    keys = stream_data(300, 12, 2)
    budget = PrivacyBudget.zcdp(2.0)
    candidates = list(range(12)) + [99]
    transform = DPSlidingWindowFrequencies(
        50,
        WIDTH,
        DEPTH,
        budget,
        release_every=25,
        candidates=candidates,
        gamma=0.3,
        hh_slack=0.05,
        noise_source=source(),
        with_metadata=True,
        label="hh3",
        seed=SEED,
        layout=SlidingLayout(**LAYOUT),
    )
    got = run(
        beam.Pipeline(runner="FnApiRunner"),
        lambda p: p | beam.Create([(t, k) for t, k in enumerate(keys, start=1)]) | transform,
        tmp_path / "out.pickle",
    )
    ref = core(50, budget, "hh3", **LAYOUT).update_at(keys, np.arange(1, 301))
    got = sorted(got, key=lambda r: r.step)
    assert [r.step for r in got] == list(range(25, 301, 25))
    nonempty = 0
    for r in got:
        ref.advance_to(r.step)
        hh = ref.heavy_hitters(candidates, 0.3, hh_slack=0.05)
        sel = ref.selection(r.step)
        assert isinstance(r, SlidingWindowRelease)
        assert list(r.records) == hh
        assert (r.window_start, r.window_end) == (max(r.step - 49, 1), r.step)
        assert r.covered == (sel[0].start, sel[-1].end)
        assert (r.kind, r.mode, r.transform, r.time) == ("heavy_hitters", "count", "hh3", r.step)
        assert r.rho == 2.0 and r.epsilon is None
        assert r.mechanism == transform.charge.mechanism
        assert r.noise_scale == transform.charge.noise_scale == ref.level_sigmas()[0]
        assert r.neighbouring_relation == transform.neighbouring_relation
        nonempty += bool(hh)
    # The oracle is not vacuous: the skewed stream has heavy hitters at most query times.
    assert nonempty >= 6


def test_queries_are_post_processing_same_values_whatever_the_schedule(tmp_path):
    """A query re-reads sealed sketches; no schedule draws fresh noise. Every 48 steps (more
    than W + B = 40) the blocks between query windows are never counted: the same values."""
    keys = stream_data(120, 8, 3)
    budget = PrivacyBudget.zcdp(1.0)
    runs = {}
    for every in (4, 6, 48):
        transform = DPSlidingWindowFrequencies(
            30,
            WIDTH,
            DEPTH,
            budget,
            release_every=every,
            query_keys=[0, 1, 2],
            noise_source=source(),
            label="pp",
            seed=SEED,
            layout=SlidingLayout(**LAYOUT),
        )
        runs[every] = run(
            beam.Pipeline(runner="FnApiRunner"),
            lambda p, tr_=transform: p | beam.Create(list(enumerate(keys, start=1))) | tr_,
            tmp_path / f"out{every}.pickle",
        )
    four = {(t, k): v for t, k, v in runs[4] if t % 12 == 0}
    six = {(t, k): v for t, k, v in runs[6] if t % 12 == 0}
    assert len(four) == 30 and four == six
    sparse = {(t, k): v for t, k, v in runs[48]}
    assert len(sparse) == 6 and sparse == {tk: v for tk, v in four.items() if tk[0] % 48 == 0}


GAP = "does not hold one element per position"
DUPLICATE = "segment holds more elements than positions"


@pytest.mark.parametrize(
    ("positions", "message", "every"),
    [
        ([1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12], GAP, 10),
        ([1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], DUPLICATE, 10),
        # Every 40 steps the first two blocks are read by no query (one window): still checked.
        ([t for t in range(1, 41) if t != 5], GAP, 40),
        ([3, *range(1, 41)], DUPLICATE, 40),
    ],
)
def test_count_mode_refuses_gaps_and_duplicates(tmp_path, positions, message, every):
    # The message names the rule (position_fn, each position once), never counts or positions.
    transform = DPSlidingWindowFrequencies(
        20,
        WIDTH,
        DEPTH,
        PrivacyBudget.zcdp(1.0),
        release_every=every,
        query_keys=["a"],
        noise_source=source(),
        seed=SEED,
        layout=SlidingLayout(**LAYOUT),
    )
    with pytest.raises(Exception, match=message):
        run(
            beam.Pipeline(runner="FnApiRunner"),
            lambda p: p | beam.Create([(t, "a") for t in positions]) | transform,
            tmp_path / "out.pickle",
        )


# ------------------------------------------------------------------------------------------------
# Time-based mode (TestStream, DirectRunner --streaming)
# ------------------------------------------------------------------------------------------------


# Every 40 steps (> W + B = 32): blocks between the query windows share one window per run.
@pytest.mark.parametrize("every", [5, 40])
def test_time_mode_teststream_equals_core_and_drops_late_data(tmp_path, every):
    rng = np.random.default_rng(4)
    n = 240
    # Millisecond times (TestStream watermarks are whole milliseconds), several items per step.
    times = np.round(np.sort(rng.uniform(0.0, 60.0, n)), 3)
    keys = stream_data(n, 10, 5)
    budget = PrivacyBudget.approx(2.0, 1e-6)
    queries = [0, 1, 3]
    # Steps of 0.5 s starting at origin 0.25 s: step s = floor((time - 0.25) / 0.5) + 1.
    times = times[times >= 0.25]
    keys = keys[: len(times)]
    n = len(times)
    transform = DPSlidingWindowFrequencies(
        24,
        WIDTH,
        DEPTH,
        budget,
        release_every=every,
        query_keys=queries,
        mode="time",
        time_unit=0.5,
        origin=0.25,
        noise_source=source(),
        label="time",
        seed=SEED,
        layout=SlidingLayout(block=8, alpha="1/2"),
    )
    # The watermark advances to the middle and to the end of every step (0.5 s), so a query
    # timer that fired before its range was complete would see a segment arrive after sealing.
    stream = ts.TestStream().advance_watermark_to(0)
    step_ends = 0.25 + 0.25 * np.arange(1, 243)
    where = np.searchsorted(times, step_ends, side="left")
    lo = 0
    for end, hi in zip(step_ends, where, strict=True):
        part = [
            TimestampedValue(k, float(x)) for k, x in zip(keys[lo:hi], times[lo:hi], strict=True)
        ]
        if part:
            stream = stream.add_elements(part)
        stream = stream.advance_watermark_to(float(end))
        lo = hi
        if end == 40.25:
            # Behind the watermark: its segment is already sealed, so Beam drops it
            # (allowed_lateness 0, assumption A2 of DPSW-beam); it must change nothing.
            stream = stream.add_elements([TimestampedValue(0, 1.0)])
    stream = stream.advance_watermark_to(100.0).advance_watermark_to_infinity()
    got = run(
        beam.Pipeline(options=PipelineOptions(["--streaming"])),
        lambda p: p | stream | transform,
        tmp_path / "out.pickle",
    )
    steps = (np.floor(times * 1e6).astype(np.int64) - 250_000) // 500_000 + 1
    ref = core(24, budget, "time", block=8, alpha="1/2")
    ref.update_at(keys, steps)
    expected = []
    for t in range(every, int(steps.max()) + 1, every):
        ref.advance_to(t)
        when = 0.25 + 0.5 * t
        expected += [
            (when, k, v) for k, v in zip(queries, ref.estimate(queries).tolist(), strict=True)
        ]
    assert len(expected) == 3 * (int(steps.max()) // every)
    assert sorted(got) == sorted(expected)


def test_segment_windows_follow_the_layout():
    windows = SegmentWindows(10, CUTS, StepClock(500_000, 250_000))
    # Step 14 is relative position 4 of block 2: segment (3, 5], i.e. steps 14..15.
    assert windows.segment_steps(14) == (13, 15)
    assert windows.segment_steps(10) == (9, 10)
    assert windows.segment_steps(11) == (10, 11)
    assert windows.segment_steps(17) == (15, 17)

    class Ctx:
        timestamp = Timestamp(micros=250_000 + 13 * 500_000 + 7)  # inside step 14

    (w,) = windows.assign(Ctx())
    assert (w.start.micros, w.end.micros) == (250_000 + 13 * 500_000, 250_000 + 15 * 500_000)
    with pytest.raises(ValueError, match="before the origin"):
        windows.segment_steps(0)


@pytest.mark.parametrize(
    "pane",
    [
        PaneInfo(True, False, PaneInfoTiming.EARLY, 0, -1),
        PaneInfo(False, True, PaneInfoTiming.LATE, 1, 0),
        PaneInfo(False, True, PaneInfoTiming.ON_TIME, 1, 0),
    ],
)
def test_only_a_single_on_time_pane_is_sealed(pane):
    """Early, late or repeated panes are asserted away (nothing is emitted; DPSW-beam A2)."""
    windows = SegmentWindows(10, CUTS, StepClock(1_000_000, 0))
    fn = SegmentTables("sw", windows)
    window = IntervalWindow(Timestamp(3), Timestamp(5))  # steps 4..5
    acc = [CountMinSketch(8, 2), 5]
    with pytest.raises(RuntimeError, match="only one ON_TIME pane"):
        list(fn.process(acc, window=window, pane=pane))
    ok = PaneInfo(True, True, PaneInfoTiming.ON_TIME, 0, 0)
    ((label, (first, last, max_step, items, _)),) = fn.process(acc, window=window, pane=ok)
    assert (label, first, last, max_step, items) == ("sw", 4, 5, 5, 0)


# ------------------------------------------------------------------------------------------------
# Accounting (when applied) and refusals
# ------------------------------------------------------------------------------------------------


def _applied(transform: DPSlidingWindowFrequencies) -> DPSlidingWindowFrequencies:
    """``transform`` applied in a pipeline that is built, not run: that is when it charges."""
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create([(1, "a")]) | transform
    return transform


def test_without_a_budget_takes_what_the_accountant_has_left(tmp_path):
    # budget=None with an accountant: the transform charges the accountant's remainder when
    # applied, and releases exactly what the same transform with that budget releases.
    acc = PrivacyAccountant(PrivacyBudget.approx(1.5, 2e-6), name="pipe")
    acc.charge("earlier", "some release", PrivacyBudget.approx(0.5, 1e-6), 1, "element")
    keys = stream_data(120, 6, 4)
    elements = [(t, k) for t, k in enumerate(keys, start=1)]

    def release(budget, accountant, name):
        t = DPSlidingWindowFrequencies(
            30,
            WIDTH,
            DEPTH,
            budget,
            release_every=10,
            query_keys=[0, 1, 2],
            accountant=accountant,
            noise_source=source(),
            label="rest",
            seed=SEED,
            layout=SlidingLayout(**LAYOUT),
        )
        assert t.rho is None if budget is None else t.rho is not None
        got = run(
            beam.Pipeline(runner="FnApiRunner"),
            lambda p: p | beam.Create(elements) | t,
            tmp_path / f"{name}.pickle",
        )
        return t, sorted(got)

    t, got = release(None, acc, "rest")
    assert acc.remaining.epsilon == pytest.approx(0.0, abs=1e-9)
    assert (t.epsilon, t.delta) == (pytest.approx(1.0), pytest.approx(1e-6))
    explicit, expected = release(PrivacyBudget.approx(t.epsilon, t.delta), None, "explicit")
    assert t.rho == explicit.rho
    assert got == expected


def test_one_charge_of_the_whole_budget_however_many_queries():
    budget = PrivacyBudget.approx(1.0, 1e-6)
    acc = PrivacyAccountant(budget, name="pipe")
    t = DPSlidingWindowFrequencies(
        100,
        WIDTH,
        DEPTH,
        budget,
        release_every=1,
        query_keys=["a"],
        accountant=acc,
        noise_source=source(),
        label="one",
        seed=SEED,
        layout=SlidingLayout(**LAYOUT),
    )
    # Nothing is charged at construction.
    assert acc.charges == ()
    with pytest.raises(RuntimeError, match="applied"):
        t.explain()
    _applied(t)
    (charge,) = acc.charges
    assert charge.releases == 1
    # Reference value of Wang, Wang and Chen, Eq. 1 (eps 1, delta 1e-6).
    assert charge.per_release_cost.rho == pytest.approx(0.01746890476912338, rel=1e-12)
    assert t.rho == charge.per_release_cost.rho
    assert acc.remaining.epsilon == pytest.approx(0.0, abs=1e-9)
    assert "DPSW-Sketch" in t.explain()
    with pytest.raises(BudgetExceededError):
        _applied(
            DPSlidingWindowFrequencies(
                100,
                WIDTH,
                DEPTH,
                PrivacyBudget.approx(0.1, 1e-7),
                release_every=1,
                query_keys=["a"],
                accountant=acc,
                noise_source=source(),
                label="two",
                seed=SEED,
                layout=SlidingLayout(**LAYOUT),
            )
        )
    with pytest.raises(ValueError, match="already has a charge"):
        _applied(
            DPSlidingWindowFrequencies(
                100,
                WIDTH,
                DEPTH,
                budget,
                release_every=1,
                query_keys=["a"],
                accountant=acc,
                noise_source=source(),
                label="one",
                seed=SEED,
                layout=SlidingLayout(**LAYOUT),
            )
        )
    assert len(acc.charges) == 1


def _build(**overrides):
    # Overrides of a layout field go into the SlidingLayout, the others to the transform.
    layout = dict(LAYOUT)
    for field in ("block", "preset"):
        if field in overrides:
            layout[field] = overrides.pop(field)
    kwargs = {
        "width": WIDTH,
        "depth": DEPTH,
        "budget": PrivacyBudget.zcdp(1.0),
        "release_every": 5,
        "query_keys": ["a"],
        "noise_source": source(),
        "seed": SEED,
        "layout": SlidingLayout(**layout),
    }
    kwargs.update(overrides)
    return DPSlidingWindowFrequencies(20, **kwargs)


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"release_every": 0}, ValueError, "release_every"),
        ({"release_every": 2.5}, TypeError, "release_every"),
        ({"budget": None}, ValueError, "pass a PrivacyBudget, an accountant"),
        ({"mode": "sessions"}, ValueError, "mode"),
        ({"candidates": ["a"]}, ValueError, "either query_keys or candidates"),
        ({"query_keys": None, "candidates": ["a"]}, ValueError, "gamma"),
        ({"query_keys": None, "candidates": ["a"], "gamma": 1.5}, ValueError, "gamma"),
        ({"query_keys": []}, ValueError, "query_keys"),
        ({"query_keys": [1.5]}, TypeError, "float"),
        ({"gamma": 0.5}, ValueError, "gamma and hh_slack"),
        ({"time_unit": 2}, ValueError, "time_unit"),
        ({"mode": "time", "time_unit": 0, "origin": 0}, ValueError, "time_unit"),
        ({"mode": "time", "position_fn": lambda e: e}, ValueError, "position_fn"),
        # The time axis starts at a public origin the caller gives: there is no default.
        ({"mode": "time"}, ValueError, "origin is required with mode='time'"),
        ({"mode": "time", "origin": None}, ValueError, "origin is required"),
        ({"origin": 0}, ValueError, "origin apply to mode='time' only"),
        ({"mode": "time", "origin": float("nan")}, ValueError, "origin"),
        ({"block": 30}, ValueError, "block"),
        ({"width": 0}, ValueError, "width"),
        ({"preset": "fast"}, ValueError, "preset"),
        ({"label": ""}, ValueError, "label"),
        ({"noise_source": NoiseSource.zero_noise_for_tests()}, ValueError, "zero-noise"),
    ],
)
def test_bad_parameters_name_the_parameter(overrides, error, message):
    with pytest.raises(error, match=message):
        _build(**overrides)


def test_pure_budget_is_refused():
    with pytest.raises(ValueError, match="pure DP"):
        DPSlidingWindowFrequencies(
            20,
            WIDTH,
            DEPTH,
            PrivacyBudget.pure(1.0),
            release_every=5,
            query_keys=["a"],
            noise_source=source(),
            seed=SEED,
            layout=SlidingLayout(**LAYOUT),
        )


@pytest.mark.parametrize(
    ("windowing", "message"),
    [
        (
            {
                "trigger": tr.AfterWatermark(early=tr.AfterCount(1)),
                "accumulation_mode": tr.AccumulationMode.DISCARDING,
            },
            "trigger",
        ),
        ({"allowed_lateness": 30}, "allowed_lateness"),
    ],
)
def test_early_triggers_and_lateness_are_refused_at_construction(windowing, message):
    transform = _build(mode="time", origin=0)
    p = beam.Pipeline(runner="FnApiRunner")
    windowed = p | beam.Create(["a"]) | beam.WindowInto(FixedWindows(10), **windowing)
    with pytest.raises(ValueError, match=message):
        _ = windowed | transform


# ------------------------------------------------------------------------------------------------
# Batch elements: (steps or times ndarray, keys) and ReadOrderedKeys' (position, keys, seconds)
# ------------------------------------------------------------------------------------------------


def _run_branches(branches: dict, out_dir, options: PipelineOptions | None = None) -> dict:
    """Run several ``name -> (elements, transform)`` branches in one pipeline (one startup)."""
    p = beam.Pipeline(options=options or PipelineOptions(["--runner=FnApiRunner"]))
    outs = {}
    for name, (elements, transform) in branches.items():
        outs[name] = DumpToFile(str(out_dir / f"{name}.pickle"))
        released = p | f"Create{name}" >> beam.Create(elements, reshuffle=False)
        assert_that(released | f"Release{name}" >> transform, outs[name], label=f"Check{name}")
    p.run().wait_until_finish()
    return {name: out.load() for name, out in outs.items()}


def test_count_mode_batches_equal_rows_and_core(tmp_path):
    """Batches (sorted or not, crossing segment and block boundaries) release exactly what the
    same rows sent one by one release, which is what the core releases."""
    keys = [f"k{v}" for v in stream_data(400, 30, 6)]
    budget = PrivacyBudget.approx(1.0, 1e-6)
    queries = ["k0", "k1", "k2", "k7", "k29"]

    def transform():
        return DPSlidingWindowFrequencies(
            60,
            WIDTH,
            DEPTH,
            budget,
            release_every=7,
            query_keys=queries,
            noise_source=source(),
            label="batches",
            seed=SEED,
            layout=SlidingLayout(**LAYOUT),
        )

    rng = np.random.default_rng(7)
    perm = rng.permutation(400)
    arr = np.array(keys)
    shuffled = [(perm[i : i + 64] + 1, arr[perm[i : i + 64]]) for i in range(0, 400, 64)]
    seconds = np.arange(400, dtype=np.float64)  # ignored in count-based mode
    mixed = [(np.arange(1, 151), keys[:150]), (150, pa.array(keys[150:230]), seconds[150:230])]
    mixed += list(enumerate(keys[230:], start=231))
    got = _run_branches(
        {
            "rows": (list(enumerate(keys, start=1)), transform()),
            # ReadOrderedKeys' elements; 37 rows each, so batches straddle segments and blocks.
            "ordered": (ordered_batches(pa.array(keys), None, 37), transform()),
            "shuffled": (shuffled, transform()),
            "mixed": (mixed, transform()),
        },
        tmp_path,
    )
    ref = core(60, budget, "batches", **LAYOUT).update_at(keys, np.arange(1, 401))
    expected = []
    for t in range(7, 401, 7):
        ref.advance_to(t)
        expected += [
            (t, k, v) for k, v in zip(queries, ref.estimate(queries).tolist(), strict=True)
        ]
    assert len(expected) == 57 * len(queries)
    for name, released in got.items():
        assert sorted(released) == sorted(expected), name


def test_time_mode_batches_equal_rows_and_core(tmp_path):
    """Time-based batches (unsorted seconds, float or int) equal rows and the core; in batch
    mode every query is answered from one timer firing, in order, as the core does."""
    rng = np.random.default_rng(8)
    n = 300
    times = np.round(rng.uniform(0.25, 60.0, n), 3)
    times[:40] = np.round(times[:40])  # whole seconds, sent below as an int64 array
    # Just below step starts (0.25 + 0.5 j): the row path floors the microseconds, so must the
    # batch path (rounding would move these rows to the next step).
    times[40:50] = 0.25 + 0.5 * rng.integers(1, 100, 10) - 4e-7
    keys = stream_data(n, 10, 9)
    budget = PrivacyBudget.approx(2.0, 1e-6)
    queries = [0, 1, 3]

    def transform():
        return DPSlidingWindowFrequencies(
            24,
            WIDTH,
            DEPTH,
            budget,
            release_every=5,
            query_keys=queries,
            mode="time",
            time_unit=0.5,
            origin=0.25,
            time_fn=lambda e: e[0],
            key_fn=lambda e: e[1],
            noise_source=source(),
            label="tbatch",
            seed=SEED,
            layout=SlidingLayout(block=8, alpha="1/2"),
        )

    order = np.argsort(times, kind="stable")
    arrays = [(times[:40].astype(np.int64), np.array(keys[:40]))]
    arrays += [(times[i : i + 50], pa.array(keys[i : i + 50])) for i in range(40, n, 50)]
    got = _run_branches(
        {
            "rows": (list(zip(times.tolist(), keys, strict=True)), transform()),
            "arrays": (arrays, transform()),
            "ordered": (
                ordered_batches(pa.array(np.array(keys)[order]), times[order], 45),
                transform(),
            ),
        },
        tmp_path,
    )
    steps = (np.floor(times * 1e6).astype(np.int64) - 250_000) // 500_000 + 1
    ref = core(24, budget, "tbatch", block=8, alpha="1/2").update_at(keys, steps)
    expected = []
    for t in range(5, int(steps.max()) + 1, 5):
        ref.advance_to(t)
        when = 0.25 + 0.5 * t
        expected += [
            (when, k, v) for k, v in zip(queries, ref.estimate(queries).tolist(), strict=True)
        ]
    assert len(expected) == 3 * (int(steps.max()) // 5) >= 3 * 20
    for name, released in got.items():
        assert sorted(released) == sorted(expected), name


def test_a_batch_becomes_one_exact_table_per_segment():
    windows = SegmentWindows(10, CUTS, StepClock(1_000_000, 0))
    stamp = Stamp("count", windows, (64, 3, 5), lambda e: e[1], lambda e: e[0], None)
    rng = np.random.default_rng(10)
    positions = rng.permutation(np.arange(3, 38))  # blocks 1..4, unsorted
    keys = [f"k{v}" for v in rng.integers(0, 6, len(positions))]
    outputs = list(stamp.process((positions, keys)))
    # The oracle: the core's own locate and segment ends.
    ref = core(20, PrivacyBudget.zcdp(1.0), "oracle", **LAYOUT)
    k, g = ref.locate(positions)
    ends = np.array([ref.segment_end(int(b), int(s)) for b, s in zip(k, g, strict=True)])
    # Positions 3..37: 6 segments of block 1, 8 of blocks 2 and 3, 5 of block 4.
    assert len(outputs) == len(set(ends.tolist())) == 27
    seen_ends = set()
    for out in outputs:
        assert out.tag == "segment_parts"
        part, ts = out.value.value, out.value.timestamp
        ((window),) = windows.assign(type("Ctx", (), {"timestamp": ts})())
        end = round(window.end.micros / 1_000_000)
        rows = ends == end
        assert part.sketch == CountMinSketch(64, 3, 5).update(
            [keys[i] for i in np.flatnonzero(rows)]
        )
        assert part.max_step == int(positions[rows].max())
        # Timestamped at the earliest row's step start, inside the segment window.
        assert ts.micros == (int(positions[rows].min()) - 1) * 1_000_000
        seen_ends.add(end)
    assert seen_ends == set(ends.tolist())


def test_vectorised_segments_match_the_core():
    ref = core(20, PrivacyBudget.zcdp(1.0), "oracle", **LAYOUT)
    windows = SegmentWindows(ref.block, ref.layout.cuts, StepClock(1_000_000, 0))
    steps = np.arange(1, 61, dtype=np.int64)
    lo, hi = windows.segment_bounds(steps)
    k, g = ref.locate(steps)
    cuts = np.asarray(ref.layout.cuts)
    assert hi.tolist() == [ref.segment_end(int(b), int(s)) for b, s in zip(k, g, strict=True)]
    assert lo.tolist() == ((k - 1) * ref.block + cuts[g]).tolist()
    assert windows.segment_steps(14) == (int(lo[13]), int(hi[13]))


@pytest.mark.parametrize(
    ("window", "block", "every"),
    [(20, 10, 7), (20, 10, 45), (20, 10, 100), (100, 10, 1000), (20, 5, 33), (30, 10, 30)],
)
def test_windows_of_unread_blocks_are_runs_that_no_query_reads(window, block, every):
    """Segment windows for every block a query reads, one window per run of the others.

    The oracle is the core's own query selection (Wang, Wang and Chen, Algorithm 3): the
    blocks of ``selection(t)`` for every query ``t = every, 2 every, ...``.
    """
    ref = DPSWSketch(
        window,
        PrivacyBudget.zcdp(1.0),
        noise_source=NoiseSource.zero_noise_for_tests(),
        block=block,
        alpha="1/2",
        **SHAPE,
    )
    n = 2000
    read: set[int] = set()
    # The schedule is unbounded: queries after step n read its last blocks too.
    for t in range(every, n + window + every, every):
        read |= {sel.block for sel in ref.advance_to(t).selection(t)}
    windows = SegmentWindows(ref.block, ref.layout.cuts, StepClock(1, 0), every, window)
    steps = np.arange(1, n + 1, dtype=np.int64)
    lo, hi, is_segment = windows.window_bounds(steps)
    blocks = (steps - 1) // block + 1
    assert is_segment.tolist() == [int(b) in read for b in blocks]
    seg_lo, seg_hi = windows.segment_bounds(steps)
    assert (lo[is_segment] == seg_lo[is_segment]).all()
    assert (hi[is_segment] == seg_hi[is_segment]).all()
    # Every step lies in its window; windows are disjoint block-aligned runs of unread blocks.
    assert ((lo < steps) & (steps <= hi)).all()
    runs = sorted(set(zip(lo[~is_segment].tolist(), hi[~is_segment].tolist(), strict=True)))
    for (_, b), (c, _) in zip(runs, runs[1:], strict=False):
        assert b < c
    for a, b in runs:
        assert a % block == 0 and b % block == 0
        run_blocks = set(range(a // block + 1, b // block + 1))
        assert not run_blocks & read
        # Maximal: the blocks on either side are read (or before the stream).
        assert a == 0 or a // block in read
        assert b // block + 1 in read
    assert windows.window_steps(int(steps[-1])) == (int(lo[-1]), int(hi[-1]), bool(is_segment[-1]))


@pytest.mark.parametrize(
    ("mode", "element", "error", "message"),
    [
        ("count", (np.array([1, 2]), ["a"]), ValueError, "one entry per key"),
        ("count", (np.array([1.0, 2.0]), ["a", "b"]), TypeError, "must be integers"),
        ("count", (np.array([0, 1]), ["a", "b"]), ValueError, "1-based"),
        ("count", (np.array([1, 2]), pa.array(["a", None])), TypeError, "None"),
        ("count", (np.array([1]), np.array([0.5])), TypeError, "float"),
        ("count", (np.array([1, 2]), "ab"), TypeError, "keys of a batch element"),
        ("count", (-1, pa.array(["a"]), None), ValueError, ">= 0"),
        ("time", (0, pa.array(["a"]), None), ValueError, "needs event times"),
        ("time", (np.array([np.nan]), ["a"]), ValueError, "finite"),
        ("time", (np.array([-5.0]), ["a"]), ValueError, "before the origin"),
        ("time", (np.array(["x"]), ["a"]), TypeError, "numbers of seconds"),
    ],
)
def test_bad_batches_are_refused(mode, element, error, message):
    windows = SegmentWindows(10, CUTS, StepClock(1_000_000, 0))
    stamp = Stamp(mode, windows, (64, 3, 5), lambda e: e, None, None)
    with pytest.raises(error, match=message):
        list(stamp.process(element))


def test_one_instance_is_applied_once(tmp_path):
    # The label (the noise key) and the single charge are fixed at construction: a second
    # application would release a second data set with the *same* noise (and no second charge),
    # so differences of the two outputs cancel the noise. It must be refused when applied.
    t = DPSlidingWindowFrequencies(
        20,
        WIDTH,
        DEPTH,
        PrivacyBudget.approx(1.0, 1e-6),
        release_every=10,
        query_keys=[1],
        noise_source=source(),
        label="once",
        seed=SEED,
        layout=SlidingLayout(**LAYOUT),
    )
    p = beam.Pipeline()
    _ = p | "A" >> beam.Create([(i, 1) for i in range(1, 21)]) | "TA" >> t
    with pytest.raises(ValueError, match="applied once"):
        _ = p | "B" >> beam.Create([(i, 2) for i in range(1, 21)]) | "TB" >> t
    assert len(t.accountant.charges) == 1


def test_time_mode_charge_claims_replace_one_only(tmp_path):
    # The query schedule runs to the last step holding an element, so adding one event after
    # all others adds releases: add/remove of an event is not covered, only substitution.
    def releases(times):
        t = DPSlidingWindowFrequencies(
            20,
            WIDTH,
            DEPTH,
            PrivacyBudget.approx(1.0, 1e-6),
            release_every=5,
            query_keys=[0],
            mode="time",
            origin=0,
            noise_source=source(),
            label="time-rel",
            seed=SEED,
            layout=SlidingLayout(**LAYOUT),
        )
        got = run(
            beam.Pipeline(),
            lambda p: p | beam.Create([TimestampedValue(0, float(x)) for x in times]) | t,
            tmp_path / f"out{len(times)}.pickle",
        )
        return t, sorted({when for when, _, _ in got})

    t, base = releases([0.5, 3.5, 7.5])
    _, added = releases([0.5, 3.5, 7.5, 18.5])
    assert base != added  # one added event is visible in the release times
    relation = t.charge.details["neighbouring_relation"]
    assert relation.startswith("replace one event: one event's key substituted, its event time")
    assert "adding, removing or moving an event is not covered" in relation
