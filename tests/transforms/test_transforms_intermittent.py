"""DPIntermittentQueries in Beam: answers equal the core D3 fed the same deltas, same noise.

Runners: FnApiRunner in-process and ``multi_processing`` with 2 workers (schedule by position),
the FnApiRunner in batch for the query-PCollection mode (event-time timers), and TestStream on the
DirectRunner with ``--streaming`` (BundleBasedDirectRunner) for query batches at different event
times with data arriving between them, late data included. The expected answers come from a
:class:`~beam_dpsketch.sketches.intermittent.sketch.UseAndKeepSketch` with the transform's public
``intermittent_sketch_id(label)`` and the same insecure test key, fed the deltas in batch order:
equality shows that each interval's exact counts reached exactly its batch, and that the noise is
drawn once per (batch, cell) from the keyed stream.
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
from apache_beam.transforms.window import FixedWindows, GlobalWindows, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import BudgetExceededError, PrivacyAccountant, PrivacyBudget
from beam_dpsketch.sketches.intermittent.sketch import UseAndKeepSketch
from beam_dpsketch.transforms import DPIntermittentQueries
from beam_dpsketch.transforms.intermittent import (
    CLOCKS,
    IntermittentRecord,
    QuerySchedule,
    intermittent_sketch_id,
    interval_index,
)

W, D = 64, 5
N = 6000
EPS = PrivacyBudget.pure(1.0)
# Batch times are positions 1..N; the last chunk runs past the last query (ignored elements).
SCHEDULE = QuerySchedule(
    [
        (1000, [1, 2, 3]),
        (2500, [1, 7, 7, 2]),  # duplicates share cells and answer
        (2600, [5]),
        (4000, [2, 99, (1, "t")]),  # a composite key never seen in the data
        (5500, [1]),
    ]
)


def _stream() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return np.arange(1, N + 1, dtype=np.int64), rng.zipf(1.4, N).astype(np.int64) % 300


def _chunks(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    # Generated inside the workers (beam.Create of big lists is slow); 6 chunks per seed, in an
    # order that has nothing to do with the positions.
    pos, keys = _stream()
    parts = list(zip(np.array_split(pos, 12), np.array_split(keys, 12), strict=True))
    return parts[seed::2]


def _expected(schedule, kind, source, label, pos, keys, with_metadata=False, epsilon=0.5):
    """The core D3 fed each interval's delta before its batch (schedule mode).

    ``epsilon`` is the core's budget: half the transform's for the positions clock (replace-one),
    all of it for the event-time clock.
    """
    core = UseAndKeepSketch(
        W,
        D,
        PrivacyBudget.pure(float(epsilon)),
        noise_source=source,
        release_prefix=intermittent_sketch_id(label),
        kind=kind,
    )
    out = []
    previous = -np.inf
    for t, q in schedule.batches:
        core.update(keys[(pos > previous) & (pos <= t)])  # interval (t_{k-1}, t_k]
        previous = t
        ans = core.answer(list(q), time=t)
        for j, key in enumerate(q):
            if with_metadata:
                mechanism = (
                    f"use-and-keep cell noise (D3), {kind.replace('_', '-')}, discrete Laplace"
                )
                rec = IntermittentRecord(
                    t,
                    key,
                    ans.estimates[j],
                    ans.batch,
                    ans.noise_std[j],
                    1.0,
                    mechanism,
                    CLOCKS["positions"],
                )
                out.append(rec)
            else:
                out.append((t, key, float(ans.estimates[j])))
    return out


def _key(record):
    return (record[0], repr(record[1]), record[2])


def test_interval_index_is_the_first_batch_at_or_after_t():
    times = [10, 20, 30]
    got = interval_index(times, [0, 10, 10.5, 20, 29, 30, 31])
    np.testing.assert_array_equal(got, [1, 1, 2, 2, 3, 3, 4])
    with pytest.raises(ValueError, match="strictly increasing"):
        interval_index([10, 10], [1])
    with pytest.raises(ValueError, match="NaN"):
        interval_index(times, [np.nan])


def test_query_schedule_sorts_merges_equal_times_and_checks_keys():
    s = QuerySchedule([(5, ["b"]), (1, np.array([3, 4])), (5, ["c", "b"])])
    assert s.batches == ((1, (3, 4)), (5, ("b", "c", "b")))
    assert s.num_queries == 5 and len(s) == 2
    assert QuerySchedule.from_pairs([(2, "x"), (1, "y"), (2, "z")]).batches == (
        (1, ("y",)),
        (2, ("x", "z")),
    )
    with pytest.raises(TypeError, match="tuple is one composite key"):
        QuerySchedule([(1, ("a", "b"))])
    with pytest.raises(TypeError, match="float"):
        QuerySchedule([(1, [1.5])])
    with pytest.raises(TypeError, match="time must be a real number"):
        QuerySchedule([("soon", ["a"])])
    with pytest.raises(ValueError, match="finite"):
        QuerySchedule([(float("inf"), ["a"])])
    with pytest.raises(ValueError, match="at least one"):
        QuerySchedule([])


@pytest.mark.parametrize(
    ("sketch", "kind"), [("count-sketch", "count-sketch"), ("count-min", "count-min")]
)
def test_schedule_by_position_equals_the_core_in_memory(sketch, kind, tmp_path):
    source = NoiseSource.insecure_for_tests(3)
    out = DumpToFile(str(tmp_path / "out.pickle"))
    t = DPIntermittentQueries(
        W,
        D,
        EPS,
        queries=SCHEDULE,
        clock="positions",
        sketch=sketch,
        noise_source=source,
        label="iq",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        res = p | beam.Create([0, 1]) | beam.FlatMap(_chunks) | t
        assert_that(res, out)
    got = out.load()
    expected = _expected(SCHEDULE, kind, t.noise_source, "iq", *_stream())
    assert len(got) == SCHEDULE.num_queries
    assert sorted(got, key=_key) == sorted(expected, key=_key)
    assert t.charge.total_cost == EPS and t.charge.releases == 1


@pytest.fixture
def _workers_can_import_this_module(monkeypatch):
    # multi_processing workers unpickle _chunks by reference to this module.
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    )


@pytest.mark.usefixtures("_workers_can_import_this_module")
def test_schedule_on_two_worker_processes_equals_the_core_with_metadata(tmp_path):
    source = NoiseSource.insecure_for_tests(8)
    out = DumpToFile(str(tmp_path / "out.pickle"))
    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    t = DPIntermittentQueries(
        W,
        D,
        EPS,
        queries=SCHEDULE,
        clock="positions",
        noise_source=source,
        with_metadata=True,
        label="mp",
    )
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        res = (
            p
            | beam.Create([0, 1])
            | "SpreadSeeds" >> beam.Reshuffle()
            | beam.FlatMap(_chunks)
            | "SpreadChunks" >> beam.Reshuffle()
            | t
        )
        assert_that(res, out)
    got = sorted(out.load(), key=_key)
    expected = sorted(
        _expected(SCHEDULE, "count-sketch", t.noise_source, "mp", *_stream(), True), key=_key
    )
    assert got == expected
    assert all(isinstance(r, IntermittentRecord) for r in got)
    assert {r.batch for r in got} == {1, 2, 3, 4, 5}
    assert all(r.epsilon == 1.0 and r.noise_std > 0 for r in got)


def test_single_elements_with_time_and_key_functions(tmp_path):
    # Records (position, key) as dicts: time_fn / key_fn pick the fields; one element at a time.
    pos, keys = _stream()
    pos, keys = pos[:1200], keys[:1200]
    records = [{"t": int(p), "k": int(k)} for p, k in zip(pos, keys, strict=True)]
    schedule = QuerySchedule([(600, [1, 2]), (1200, [1, 2])])
    source = NoiseSource.insecure_for_tests(4)
    out = DumpToFile(str(tmp_path / "out.pickle"))
    t = DPIntermittentQueries(
        W,
        D,
        EPS,
        queries=schedule,
        clock="positions",
        time_fn=lambda r: r["t"],
        key_fn=lambda r: r["k"],
        noise_source=source,
        label="fn",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(records) | t, out)
    expected = _expected(schedule, "count-sketch", t.noise_source, "fn", pos, keys)
    assert sorted(out.load(), key=_key) == sorted(expected, key=_key)


def test_every_batch_is_answered_without_any_data(tmp_path):
    # The existence of a release must not depend on the data (invariant I4 of docs/algorithms.md#int-beam): an empty
    # input still answers every batch, with noise only.
    source = NoiseSource.insecure_for_tests(5)
    out = DumpToFile(str(tmp_path / "out.pickle"))
    t = DPIntermittentQueries(
        W, D, EPS, queries=SCHEDULE, clock="positions", noise_source=source, label="empty"
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create([], reshuffle=False) | t, out)
    empty = np.zeros(0, np.int64)
    expected = _expected(SCHEDULE, "count-sketch", t.noise_source, "empty", empty, empty)
    got = sorted(out.load(), key=_key)
    assert got == sorted(expected, key=_key)
    assert any(r[2] != 0 for r in got)  # noisy, not the exact zeros


def test_same_key_reproduces_and_another_key_differs(tmp_path):
    def run(seed, name):
        out = DumpToFile(str(tmp_path / f"{name}.pickle"))
        t = DPIntermittentQueries(
            W,
            D,
            EPS,
            queries=SCHEDULE,
            clock="positions",
            noise_source=NoiseSource.insecure_for_tests(seed),
            label="r",
        )
        with beam.Pipeline(runner=FnApiRunner()) as p:
            assert_that(p | beam.Create([0, 1]) | beam.FlatMap(_chunks) | t, out)
        return sorted(out.load(), key=_key)

    first, again, other = run(1, "a"), run(1, "b"), run(2, "c")
    assert first == again
    assert first != other


def test_query_pcollection_on_a_batch_runner_equals_the_schedule(tmp_path):
    # Event-time mode on the FnApiRunner: every element is present before the timers fire, so
    # each batch gets exactly the data with timestamps <= its time, as in the schedule mode.
    pos, keys = _stream()
    source = NoiseSource.insecure_for_tests(6)
    out = DumpToFile(str(tmp_path / "out.pickle"))
    with beam.Pipeline(runner=FnApiRunner()) as p:
        queries = p | "Queries" >> beam.Create([(t, list(q)) for t, q in SCHEDULE.batches])
        data = (
            p
            | "Data" >> beam.Create(list(zip(pos.tolist(), keys.tolist(), strict=True)))
            | "Stamp" >> beam.Map(lambda r: TimestampedValue(r[1], r[0]))
        )
        # The event timestamps are the positions here: the positions clock.
        t = DPIntermittentQueries(
            W, D, EPS, queries=queries, clock="positions", noise_source=source, label="ev"
        )
        assert_that(data | t, out)
    expected = _expected(SCHEDULE, "count-sketch", t.noise_source, "ev", pos, keys)
    assert sorted(out.load(), key=_key) == sorted(expected, key=_key)


def _streaming_pipeline() -> beam.Pipeline:
    # --streaming + TestStream runs on the BundleBasedDirectRunner (the runner Beam uses for TestStream).
    return beam.Pipeline(options=PipelineOptions(["--streaming"]))


def _both(stream, step, *args, **kwargs):
    """Apply a TestStream step to both outputs (data and queries share one clock)."""
    for tag in ("data", "queries"):
        stream = getattr(stream, step)(*args, tag=tag, **kwargs)
    return stream


def test_teststream_batches_at_event_times_with_late_data_equal_the_core(tmp_path):
    source = NoiseSource.insecure_for_tests(9)
    stream = _both(ts.TestStream(), "advance_watermark_to", 0)
    stream = (
        stream.add_elements(
            [TimestampedValue((10, ["a", "b", "c"]), 0), TimestampedValue((20, ["a", "c"]), 0)],
            tag="queries",
        )
        .add_elements(
            [TimestampedValue(k, t) for k, t in [("a", 1), ("b", 2), ("a", 3)]], tag="data"
        )
        .add_elements([TimestampedValue(np.array([5, 6]), 9)], tag="data")  # an int batch
        .add_elements([TimestampedValue("c", 12)], tag="data")  # after batch 1's time
    )
    stream = _both(stream, "advance_watermark_to", 11)  # batch 1 (t=10) is answered here
    stream = stream.add_elements([TimestampedValue("b", 4)], tag="data")  # late: goes to batch 2
    stream = stream.add_elements(
        [TimestampedValue((30, ["b"]), 12), TimestampedValue((30, ["c"]), 12)], tag="queries"
    )  # two elements at one time form one batch
    stream = stream.add_elements([TimestampedValue("c", 15)], tag="data")
    stream = _both(stream, "advance_watermark_to", 21)
    stream = stream.add_elements([TimestampedValue("c", 25)], tag="data")
    stream = _both(stream, "advance_watermark_to", 31)
    stream = stream.add_elements([TimestampedValue("a", 40)], tag="data")  # after every query
    stream = _both(stream, "advance_watermark_to_infinity")
    out = DumpToFile(str(tmp_path / "out.pickle"))
    p = _streaming_pipeline()
    both = p | stream
    t = DPIntermittentQueries(
        16,
        3,
        EPS,
        queries=both["queries"],
        clock="event_time",
        noise_source=source,
        label="stream",
    )
    assert_that(both["data"] | t, out)
    p.run().wait_until_finish()

    core = UseAndKeepSketch(
        16,
        3,
        PrivacyBudget.pure(1.0),
        noise_source=t.noise_source,
        release_prefix=intermittent_sketch_id("stream"),
    )
    expected = []
    for t_k, delta, q in [
        (10, ["a", "b", "a", 5, 6], ["a", "b", "c"]),
        (20, ["c", "b", "c"], ["a", "c"]),  # the late "b" (time 4) enters batch 2
        (30, ["c"], ["b", "c"]),
    ]:
        core.update(delta)
        ans = core.answer(q, time=t_k)
        expected += [(t_k, k, float(e)) for k, e in zip(q, ans.estimates, strict=True)]
    got = out.load()
    assert len(got) == 7
    assert sorted(got, key=_key) == sorted(expected, key=_key)


def test_teststream_late_query_fails_loudly():
    stream = _both(ts.TestStream(), "advance_watermark_to", 0)
    stream = stream.add_elements([TimestampedValue((10, ["a"]), 0)], tag="queries")
    stream = stream.add_elements([TimestampedValue("a", 1)], tag="data")
    stream = _both(stream, "advance_watermark_to", 20)
    # Declares time 5 after the batch at 10 was answered: cannot be answered at its time.
    stream = stream.add_elements([TimestampedValue((5, ["a"]), 5)], tag="queries")
    stream = _both(stream, "advance_watermark_to_infinity")
    p = _streaming_pipeline()
    both = p | stream
    both["data"] | DPIntermittentQueries(
        16,
        3,
        EPS,
        queries=both["queries"],
        clock="event_time",
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    with pytest.raises(Exception, match="arrived after the batch at time 10"):
        p.run().wait_until_finish()


def test_teststream_early_discarding_panes_are_refused_in_both_modes():
    # Two early panes (AfterCount(2)) and an empty ON_TIME pane: one D3 state must see each
    # element once, in one interval, so any trigger but the default is refused when applied.
    triggers = [
        (FixedWindows(10), tr.AfterWatermark(early=tr.AfterCount(2))),
        (GlobalWindows(), tr.Repeatedly(tr.AfterCount(2))),
    ]
    for windowfn, trigger in triggers:
        for queries in ("schedule", "pcollection"):
            stream = _both(ts.TestStream(), "advance_watermark_to", 0)
            stream = stream.add_elements([TimestampedValue((10, ["a"]), 0)], tag="queries")
            for batch in ([("a", 1), ("b", 2)], [("a", 3), ("c", 4)]):
                stream = stream.add_elements([TimestampedValue(k, t) for k, t in batch], tag="data")
            stream = _both(stream, "advance_watermark_to_infinity")
            p = _streaming_pipeline()
            both = p | stream
            data = both["data"] | beam.WindowInto(
                windowfn, trigger=trigger, accumulation_mode=tr.AccumulationMode.DISCARDING
            )
            declared = SCHEDULE if queries == "schedule" else both["queries"]
            with pytest.raises(ValueError, match="global window with the default trigger"):
                _ = data | DPIntermittentQueries(W, D, EPS, queries=declared, clock="event_time")


def test_query_pcollection_answers_every_batch_without_any_data(tmp_path):
    # Event-time mode: the timers answer every declared batch even if no data ever arrives.
    out = DumpToFile(str(tmp_path / "out.pickle"))
    with beam.Pipeline(runner=FnApiRunner()) as p:
        queries = p | "Queries" >> beam.Create([(t, list(q)) for t, q in SCHEDULE.batches])
        data = p | "Data" >> beam.Create([], reshuffle=False)
        t = DPIntermittentQueries(
            W,
            D,
            EPS,
            queries=queries,
            clock="event_time",
            noise_source=NoiseSource.insecure_for_tests(2),
            label="no-data",
        )
        assert_that(data | t, out)
    got = out.load()
    assert sorted((r[0], repr(r[1])) for r in got) == sorted(
        (t, repr(k)) for t, q in SCHEDULE.batches for k in q
    )
    assert any(r[2] != 0 for r in got)  # noise only


# ------------------------------------------------------------------------------ refusals


def test_zero_noise_source_and_bad_parameters_are_refused():
    zero = NoiseSource.zero_noise_for_tests()
    with pytest.raises(ValueError, match="noise_source"):
        DPIntermittentQueries(W, D, EPS, queries=SCHEDULE, clock="positions", noise_source=zero)
    with pytest.raises(ValueError, match="pure"):
        DPIntermittentQueries(
            W, D, PrivacyBudget.approx(1.0, 1e-6), queries=SCHEDULE, clock="positions"
        )
    with pytest.raises(TypeError, match="budget"):
        DPIntermittentQueries(W, D, 1.0, queries=SCHEDULE, clock="positions")
    with pytest.raises(ValueError, match="sketch"):
        DPIntermittentQueries(W, D, EPS, queries=SCHEDULE, clock="positions", sketch="misra-gries")
    with pytest.raises(ValueError, match="width"):
        DPIntermittentQueries(1, D, EPS, queries=SCHEDULE, clock="positions")
    with pytest.raises(ValueError, match="depth"):
        DPIntermittentQueries(W, 0, EPS, queries=SCHEDULE, clock="positions")
    with pytest.raises(TypeError, match="queries"):
        DPIntermittentQueries(W, D, EPS, queries="every minute", clock="positions")
    with pytest.raises(ValueError, match="label"):
        DPIntermittentQueries(W, D, EPS, queries=SCHEDULE, clock="positions", label="")
    with pytest.raises(TypeError, match="time_fn"):
        DPIntermittentQueries(W, D, EPS, queries=SCHEDULE, clock="positions", time_fn=3)
    # The clock decides the guarantee: it must be declared, and be one the transform knows.
    with pytest.raises(TypeError, match="clock"):
        DPIntermittentQueries(W, D, EPS, queries=SCHEDULE)
    with pytest.raises(ValueError, match="clock must be one of"):
        DPIntermittentQueries(W, D, EPS, queries=SCHEDULE, clock="wall")


def test_queries_derived_from_the_data_are_refused():
    p = beam.Pipeline(runner=FnApiRunner())
    data = p | beam.Create([1, 2, 3])
    derived = data | beam.Map(lambda k: (10, [k]))
    with pytest.raises(ValueError, match="computed from the data input"):
        _ = data | DPIntermittentQueries(W, D, EPS, queries=derived, clock="event_time")
    separate = p | "Separate" >> beam.Create([(10, [1])])
    data | "Ok" >> DPIntermittentQueries(
        W, D, EPS, queries=separate, clock="event_time"
    )  # accepted


def test_windowed_data_and_time_fn_with_a_query_pcollection_are_refused():
    p = beam.Pipeline(runner=FnApiRunner())
    data = p | beam.Create([(1, 1)]) | beam.WindowInto(FixedWindows(10))
    with pytest.raises(ValueError, match="global window"):
        _ = data | DPIntermittentQueries(W, D, EPS, queries=SCHEDULE, clock="positions")
    queries = p | "Q" >> beam.Create([(10, [1])])
    with pytest.raises(ValueError, match="time_fn"):
        DPIntermittentQueries(
            W, D, EPS, queries=queries, clock="event_time", time_fn=lambda r: r[0]
        )


def test_charged_once_to_a_shared_accountant_and_refused_over_budget():
    accountant = PrivacyAccountant(PrivacyBudget.pure(1.5))
    p = beam.Pipeline(runner=FnApiRunner())
    data = p | beam.Create([(1, 1)])
    first = DPIntermittentQueries(
        W, D, EPS, queries=SCHEDULE, clock="positions", accountant=accountant, label="a"
    )
    _ = data | "A" >> first
    assert accountant.committed.epsilon == pytest.approx(1.0)
    assert "use-and-keep" in first.explain()
    assert first.charge.details["neighbouring_relation"] == first.neighbouring_relation
    assert first.neighbouring_relation.startswith("replace one element")
    assert first.neighbouring_relation in first.explain()
    with pytest.raises(ValueError, match="already has a charge"):
        _ = data | "A2" >> DPIntermittentQueries(
            W,
            D,
            PrivacyBudget.pure(0.1),
            queries=SCHEDULE,
            clock="positions",
            accountant=accountant,
            label="a",
        )
    with pytest.raises(BudgetExceededError):
        _ = data | "B" >> DPIntermittentQueries(
            W, D, EPS, queries=SCHEDULE, clock="positions", accountant=accountant, label="b"
        )


def test_without_a_budget_takes_what_the_accountant_has_left(tmp_path):
    # budget=None with an accountant: the accountant's remainder (here 1.0 of 1.5) is charged
    # when the transform is applied, and the answers are those of the same transform with
    # that budget; a non-pure remainder is refused at application.
    accountant = PrivacyAccountant(PrivacyBudget.pure(1.5))
    accountant.charge("earlier", "some release", PrivacyBudget.pure(0.5), 1, "element")
    source = NoiseSource.insecure_for_tests(3)
    out = DumpToFile(str(tmp_path / "out.pickle"))
    t = DPIntermittentQueries(
        W,
        D,
        queries=SCHEDULE,
        clock="positions",
        accountant=accountant,
        noise_source=source,
        label="iq",
    )
    assert t.noise_scale is None
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create([0, 1]) | beam.FlatMap(_chunks) | t, out)
    assert accountant.remaining.epsilon == pytest.approx(0.0, abs=1e-12)
    assert t.charge.per_release_cost.epsilon == pytest.approx(1.0)
    explicit = DPIntermittentQueries(
        W, D, EPS, queries=SCHEDULE, clock="positions", noise_source=source, label="iq"
    )
    assert t.noise_scale == explicit.noise_scale == 2 * D / 1.0
    expected = _expected(SCHEDULE, "count-sketch", t.noise_source, "iq", *_stream())
    assert sorted(out.load(), key=_key) == sorted(expected, key=_key)
    approx = PrivacyAccountant(PrivacyBudget.approx(1.0, 1e-6))
    p = beam.Pipeline(runner=FnApiRunner())
    with pytest.raises(ValueError, match="pure"):
        _ = (
            p
            | beam.Create([(1, 1)])
            | DPIntermittentQueries(W, D, queries=SCHEDULE, clock="positions", accountant=approx)
        )
    with pytest.raises(ValueError, match="pass a PrivacyBudget, an accountant"):
        DPIntermittentQueries(W, D, queries=SCHEDULE, clock="positions")


def test_bad_data_elements_name_their_type():
    p = beam.Pipeline(runner=FnApiRunner())
    _ = (
        p
        | beam.Create([(1, 2.5)])
        | DPIntermittentQueries(W, D, EPS, queries=SCHEDULE, clock="positions")
    )
    with pytest.raises(Exception, match="float"):
        p.run().wait_until_finish()
    p = beam.Pipeline(runner=FnApiRunner())
    _ = (
        p
        | beam.Create(["not a pair"])
        | DPIntermittentQueries(W, D, EPS, queries=SCHEDULE, clock="positions")
    )
    with pytest.raises(Exception, match="got str"):
        p.run().wait_until_finish()


# A long schedule over a wide sketch: most cells are never read, most keys are read at some
# batches only, some batches are empty, and rows arrive after the last query.
WIDE = 1024
POOL = [3, 4, 17, 250, "k7", "k9", (2, "c")]


def _sparse_schedule() -> QuerySchedule:
    rng = np.random.default_rng(5)
    batches = []
    for k in range(1, 301):
        t = 60 * k if k % 7 else 60 * k + 0.5  # a few float times
        if k % 50 == 25:
            batches.append((t, []))  # nothing asked
            continue
        picks = rng.choice(len(POOL), size=2 if k % 3 else 1, replace=False)
        batches.append((t, [POOL[i] for i in picks.tolist()]))
    return QuerySchedule(batches)


def _mixed_stream(extra: tuple[int, object] | None = None) -> tuple[np.ndarray, list]:
    """Times 1..20000 (the last query is at 18000), keys: ints, then strings, then composite."""
    rng = np.random.default_rng(12)
    n = 20_000
    ints = (rng.zipf(1.3, n) % 3000).tolist()
    keys = [f"k{k}" if 8000 < i <= 12000 else k for i, k in enumerate(ints, start=1)]
    keys[100:110] = [(2, "c")] * 10
    times = np.arange(1, n + 1, dtype=np.int64)
    if extra is not None:
        at, key = extra
        times = np.r_[times[:at], at, times[at:]].astype(np.int64)
        keys = [*keys[:at], key, *keys[at:]]
    return times, keys


def _mixed_chunks(times: np.ndarray, keys: list) -> list[tuple[np.ndarray, object]]:
    # Int runs as int64 arrays, other runs as lists of keys; in no particular order.
    out = []
    for a in range(0, times.size, 997):
        part = keys[a : a + 997]
        if all(type(k) is int for k in part):
            part = np.asarray(part, dtype=np.int64)
        out.append((times[a : a + 997], part))
    return out[::-1]


def _core_answers(schedule, kind, source, label, times, keys, clock, with_metadata=False):
    """The core D3 fed each interval's full delta (every row, every cell) before its batch."""
    core = UseAndKeepSketch(
        WIDE,
        D,
        EPS,
        noise_source=source,
        release_prefix=intermittent_sketch_id(label),
        kind=kind,
        neighbouring="replace" if clock == "positions" else "add_remove",
    )
    out = []
    previous = -np.inf
    for t, q in schedule.batches:
        rows = np.flatnonzero((times > previous) & (times <= t)).tolist()
        if rows:
            core.update([keys[i] for i in rows])
        previous = t
        ans = core.answer(list(q), time=t)
        for j, key in enumerate(q):
            if with_metadata:
                out.append((t, key, ans.estimates[j], ans.batch, ans.noise_std[j]))
            else:
                out.append((t, key, float(ans.estimates[j])))
    return out


def _run_wide(tmp_path, name, schedule, sketch, clock, times, keys, with_metadata=False):
    out = DumpToFile(str(tmp_path / f"{name}.pickle"))
    t = DPIntermittentQueries(
        WIDE,
        D,
        EPS,
        queries=schedule,
        clock=clock,
        sketch=sketch,
        noise_source=NoiseSource.insecure_for_tests(21),
        with_metadata=with_metadata,
        label="wide",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(_mixed_chunks(times, keys), reshuffle=False) | t, out)
    return t, out.load()


@pytest.mark.parametrize(
    ("sketch", "kind", "clock"),
    [("count-sketch", "count-sketch", "positions"), ("count-min", "count-min", "event_time")],
)
def test_many_batches_over_mostly_unread_cells_equal_the_core_fed_full_deltas(
    sketch, kind, clock, tmp_path
):
    schedule = _sparse_schedule()
    times, keys = _mixed_stream()
    t, got = _run_wide(tmp_path, "wide", schedule, sketch, clock, times, keys, True)
    expected = _core_answers(schedule, kind, t.noise_source, "wide", times, keys, clock, True)
    got = [(r.time, r.key, r.estimate, r.batch, r.noise_std) for r in got]
    assert len(got) == schedule.num_queries
    assert sorted(got, key=_key) == sorted(expected, key=_key)


def test_a_row_no_later_batch_reads_changes_nothing_and_a_read_row_changes_only_later_answers(
    tmp_path,
):
    # Neighbouring inputs (one row added, every other time unchanged). A row whose cells no
    # batch at or after its time reads reaches no answer; a row of a queried key changes only
    # the answers of batches at or after its time, and under the same noise by at most 1.
    schedule = _sparse_schedule()
    times, keys = _mixed_stream()
    _, base = _run_wide(tmp_path, "base", schedule, "count-min", "event_time", times, keys)
    base = sorted(base, key=_key)
    # Key 2999 shares no cell with a queried key (checked below); 18500 is after the last query.
    read = np.zeros(WIDE * D, dtype=bool)
    h1, h2 = hash_keys(POOL, 0)
    for row, buckets in enumerate(row_buckets(h1, h2, D, WIDE)):
        read[row * WIDE + buckets] = True
    h1, h2 = hash_keys([2999], 0)
    assert not any(read[r * WIDE + b[0]] for r, b in enumerate(row_buckets(h1, h2, D, WIDE)))
    last_key = schedule.batches[-1][1][0]  # read by the last batch, at 18000
    for name, extra in (("unread", (5000, 2999)), ("late", (18500, last_key))):
        _, got = _run_wide(
            tmp_path, name, schedule, "count-min", "event_time", *_mixed_stream(extra)
        )
        assert sorted(got, key=_key) == base, name
    at = 9000
    _, got = _run_wide(
        tmp_path, "read", schedule, "count-min", "event_time", *_mixed_stream((at, 3))
    )
    got = sorted(got, key=_key)
    changed = [(b, g) for b, g in zip(base, got, strict=True) if b != g]
    assert changed and all(b[0] >= at and b[1] == g[1] for b, g in changed)
    assert all(0 < g[2] - b[2] <= 1 for b, g in changed)
