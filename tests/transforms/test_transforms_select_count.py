"""DPHistogram / DPHeavyHitters with mechanism "select-then-count" and "user-exact".

Batch pipelines name the FnApiRunner; streaming pipelines run TestStream on the DirectRunner with
``--streaming``. Noise comes from ``NoiseSource.insecure_for_tests`` and every expected output is
recomputed from the core release functions with the same keyed streams (``release_id_for``).
"""

from __future__ import annotations

import json
from collections import Counter

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger
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
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, PrivacyUnit, Windowing
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PostProcessedSum, approx_pp
from beam_dpsketch.sketches.misra_gries.exact import exact_user_gshm
from beam_dpsketch.sketches.misra_gries.hashed import HashedPAMG, hashed_selection
from beam_dpsketch.sketches.misra_gries.select_count import (
    DEFAULT_SELECTION_FRACTION,
    count_release,
    selection_parameters,
    split_budget,
)
from beam_dpsketch.transforms import DPHeavyHitters, DPHistogram
from beam_dpsketch.transforms.heavy_hitters import DesignB, SelectThenCount
from beam_dpsketch.transforms.release import release_id_for

EPS, DELTA = 1.0, 1e-6
BUDGET = PrivacyBudget.approx(EPS, DELTA)


def zipf_keys(n: int, seed: int, items: int = 300, s: float = 1.3) -> np.ndarray:
    ranks = np.arange(1, items + 1, dtype=np.float64)
    pmf = ranks**-s / np.sum(ranks**-s)
    return np.random.default_rng(seed).choice(items, size=n, p=pmf).astype(np.int64)


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(tmp_path / "output.pickle")


def expected_stc(t, keys, window, m=None, units=None, fraction=DEFAULT_SELECTION_FRACTION):
    """The core select-then-count release of one window, from the transform's noise streams."""
    label = t.release_label
    source = t.aggregate.noise_source
    eps_sel, eps_count = split_budget(EPS, fraction)
    sketch = MisraGries(t.k)
    if units is None:
        sketch.update(keys)
        truth = Counter(keys.tolist())
    else:
        truth = Counter()
        for unit_keys in units:
            sketch.update(unit_keys)
            truth.update(unit_keys)
    selection_stream = source.stream(release_id_for(f"{label}/selection", window, 0))
    if m is not None:
        # User level: hashed one-counter PAMG sketches of 4 k buckets, Gaussian threshold.
        hashed = HashedPAMG(4 * t.k)
        for unit_keys in units:
            hashed.update(unit_keys)
        chosen = hashed_selection(
            hashed, m, PrivacyBudget.approx(eps_sel, DELTA), selection_stream, k=t.k
        )
        cands = [x for x, _ in chosen]
        return count_release(
            {c: truth[c] for c in cands if truth[c]},
            cands,
            PrivacyBudget.pure(eps_count),
            source.stream(release_id_for(label, window, 0)),
            k=t.k,
            sensitivity=m,
        )
    eps0, d0 = selection_parameters(eps_sel, DELTA, m)
    selected = approx_pp(
        PostProcessedSum.from_sketch(sketch, max_shards=256),
        PrivacyBudget.approx(eps0, d0),
        source.stream(release_id_for(f"{label}/selection", window, 0)),
        count_fraction=0.0,
    ).top(t.k)
    cands = selected.keys()
    return count_release(
        {c: truth[c] for c in cands if truth[c]},
        cands,
        PrivacyBudget.pure(eps_count),
        source.stream(release_id_for(label, window, 0)),
        k=t.k,
        sensitivity=1 if m is None else m,
    )


def run_batch(t, elements, dump, *, timestamps=None, windowfn=None):
    with beam.Pipeline(runner=FnApiRunner()) as p:
        pcoll = p | beam.Create(elements, reshuffle=False)
        if timestamps is not None:
            pcoll = pcoll | beam.Map(lambda x: TimestampedValue(x, timestamps(x)))
        if windowfn is not None:
            pcoll = pcoll | beam.WindowInto(windowfn)
        assert_that(pcoll | t, dump)
    return dump.load()


def test_element_level_pipeline_equals_the_core_release(dump):
    keys = zipf_keys(6000, 1)
    t = DPHistogram(
        30,
        BUDGET,
        mechanism="select-then-count",
        noise_source=NoiseSource.insecure_for_tests(3),
        label="stc",
    )
    out = run_batch(t, [keys], dump)
    expected = expected_stc(t, keys, GlobalWindow())
    assert [r[:2] for r in out] == list(expected.items)
    assert len(out) >= 3  # the heavy keys are selected


def test_heavy_hitters_top_and_selection_fraction(dump):
    keys = zipf_keys(6000, 2)
    t = DPHeavyHitters(
        30,
        BUDGET,
        top=3,
        mechanism=SelectThenCount(30, selection_fraction=0.7),
        noise_source=NoiseSource.insecure_for_tests(4),
        label="stc-top",
    )
    out = run_batch(t, [keys], dump)
    expected = expected_stc(t, keys, GlobalWindow(), fraction=0.7)
    assert [r[:2] for r in out] == sorted(expected.top(3).items, key=lambda kv: -kv[1])
    # One charge for the whole mechanism (basic composition of selection and count).
    (charge,) = t.accountant.charges
    assert charge.transform == "stc-top"
    assert charge.total_cost.epsilon == EPS and charge.total_cost.delta == DELTA
    assert charge.noise_scale == pytest.approx(1 / split_budget(EPS, 0.7)[1])
    text = t.explain()
    assert "selection_fraction=0.7" in text and "memory: O(k)" in text
    assert "selection_threshold" in text


def test_fixed_windows_batch_release_each_window(dump):
    keys = zipf_keys(4000, 5)
    elements = [(i, int(x)) for i, x in enumerate(keys)]
    t = DPHistogram(
        20,
        BUDGET,
        key_fn=lambda e: e[1],
        mechanism="select-then-count",
        privacy_unit=PrivacyUnit(max_windows=1),
        noise_source=NoiseSource.insecure_for_tests(6),
        label="stc-win",
        with_metadata=True,
    )
    out = run_batch(t, elements, dump, timestamps=lambda e: e[0] % 20, windowfn=FixedWindows(10))
    assert len(out) == 2
    for rel in out:
        lo = int(rel.window_start)
        part = np.array([x for i, x in elements if lo <= i % 20 < lo + 10], dtype=np.int64)
        window = IntervalWindow(lo, lo + 10)
        assert tuple(r[:2] for r in rel.records) == expected_stc(t, part, window).items


def stream_of(elements, end=None):
    s = ts.TestStream().advance_watermark_to(0)
    s = s.add_elements([TimestampedValue(v, t) for v, t in elements])
    if end is not None:
        s = s.advance_watermark_to(end)
    return s.advance_watermark_to_infinity()


@pytest.mark.parametrize("windowed", [False, True])
def test_streaming_teststream_global_and_fixed_windows(windowed, dump):
    keys = zipf_keys(1500, 7)
    elements = [(int(x), float(i % 20)) for i, x in enumerate(keys)]
    t = DPHistogram(
        15,
        BUDGET,
        mechanism="select-then-count",
        privacy_unit=PrivacyUnit(max_windows=1 if windowed else None),
        noise_source=NoiseSource.insecure_for_tests(8),
        label="stc-stream",
        with_metadata=True,
    )
    with beam.Pipeline(options=PipelineOptions(["--streaming"])) as p:
        pcoll = p | stream_of(elements, end=10)
        if windowed:
            pcoll = pcoll | beam.WindowInto(FixedWindows(10))
        else:
            # Beam refuses a GroupByKey on an unbounded global window with the default trigger;
            # the watermark trigger fires once, when the stream ends.
            pcoll = pcoll | beam.WindowInto(
                GlobalWindows(),
                trigger=trigger.AfterWatermark(),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
            )
        assert_that(pcoll | t, dump)
    out = dump.load()
    if windowed:
        assert sorted(r.window_start for r in out) == [0.0, 10.0]
        for rel in out:
            lo = int(rel.window_start)
            part = np.array([x for x, ts_ in elements if lo <= ts_ < lo + 10], dtype=np.int64)
            records = tuple(r[:2] for r in rel.records)
            assert records == expected_stc(t, part, IntervalWindow(lo, lo + 10)).items
    else:
        assert len(out) == 1 and out[0].pane_timing == "ON_TIME"
        records = tuple(r[:2] for r in out[0].records)
        assert records == expected_stc(t, keys, GlobalWindow()).items


def user_rows(
    seed: int, users: int = 1500, m_true: int = 3, items: int = 60
) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    keys = zipf_keys(users * m_true, seed, items=items)
    return [(int(u), int(keys[i])) for i, u in enumerate(rng.integers(0, users, users * m_true))]


def run_units(t, rows, dump):
    """Run ``t`` and, with the same bounding step, collect each unit's bounded key set."""
    with beam.Pipeline(runner=FnApiRunner()) as p:
        pcoll = p | beam.Create(rows, reshuffle=False)
        assert_that(pcoll | t, dump)
    out = dump.load()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        units = (
            p
            | beam.Create(rows, reshuffle=False)
            | "Bound" >> t._bound
            | beam.GroupByKey()
            | beam.Map(lambda kv: sorted(set(kv[1])))
        )
        assert_that(units, dump)
    return out, dump.load()


def test_user_level_select_then_count_equals_the_core_release(dump):
    # Fewer distinct keys than buckets: every bucket holds at most one key whatever the order
    # and bundling, so the pipeline's selection equals the single-sketch oracle.
    rows = user_rows(11, items=8)
    t = DPHistogram(
        10,
        BUDGET,
        privacy_unit=PrivacyUnit(id=lambda r: r[0], max_contributions=2),
        key_fn=lambda r: r[1],
        mechanism="select-then-count",
        noise_source=NoiseSource.insecure_for_tests(12),
        selection_key=b"k" * 32,
        label="stc-user",
    )
    out, units = run_units(t, rows, dump)
    assert all(len(u) <= 2 for u in units)
    expected = expected_stc(t, None, GlobalWindow(), m=2, units=units, fraction=0.75)
    assert [r[:2] for r in out] == list(expected.items)
    assert len(out) >= 5  # most of the 8 keys pass the Gaussian threshold (sqrt(m), no group)
    mech = t.aggregate.calibrated_mechanism
    assert mech.sensitivity == 2  # count noise scales with m
    assert t.aggregate.charge.noise_scale == pytest.approx(2 / split_budget(EPS, 0.75)[1])
    assert "hashed one-counter PAMG" in t.explain()


def test_user_exact_equals_the_core_release(dump):
    rows = user_rows(21)
    t = DPHistogram(
        10,
        BUDGET,
        privacy_unit=PrivacyUnit(id=lambda r: r[0], max_contributions=2),
        key_fn=lambda r: r[1],
        mechanism="user-exact",
        noise_source=NoiseSource.insecure_for_tests(22),
        selection_key=b"k" * 32,
        label="exact",
    )
    out, units = run_units(t, rows, dump)
    counts = Counter(k for u in units for k in u)
    expected = exact_user_gshm(
        counts,
        2,
        PrivacyBudget.approx(EPS, DELTA),
        t.aggregate.noise_source.stream(release_id_for("exact", GlobalWindow(), 0)),
    )
    assert [r[:2] for r in out] == list(expected.items)
    assert len(out) >= 3
    text = t.explain()
    assert "grows with the number of distinct keys" in text


def test_pamg_gshm_releases_the_keys_user_exact_releases(dump):
    # Both release with noise for l = m, not k: 80 units per key pass either threshold.
    rows = [(u, u % 5) for u in range(400)]  # 5 keys, 80 units each
    kwargs = dict(
        privacy_unit=PrivacyUnit(id=lambda r: r[0]),
        key_fn=lambda r: r[1],
        noise_source=NoiseSource.insecure_for_tests(5),
    )
    exact = run_batch(DPHistogram(100, BUDGET, mechanism="user-exact", **kwargs), rows, dump)
    assert sorted(k for k, _ in exact) == [0, 1, 2, 3, 4]
    pamg = run_batch(DPHistogram(100, BUDGET, mechanism="pamg-gshm", **kwargs), rows, dump)
    assert sorted(k for k, _ in pamg) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "windowfn, trig, lateness",
    [
        (SlidingWindows(10, 5), None, 0),
        (FixedWindows(10), trigger.AfterWatermark(early=trigger.AfterCount(5)), 0),
        (FixedWindows(10), None, 30),
    ],
)
def test_refuses_windowing_it_cannot_analyse(windowfn, trig, lateness):
    t = DPHistogram(
        5, BUDGET, mechanism="select-then-count", windowing=Windowing(max_panes_per_window=3)
    )
    p = beam.Pipeline(runner=FnApiRunner())
    kw = {"allowed_lateness": lateness}
    if trig is not None:
        kw.update(trigger=trig, accumulation_mode=trigger.AccumulationMode.DISCARDING)
    pcoll = p | beam.Create([1, 2]) | beam.WindowInto(windowfn, **kw)
    with pytest.raises(ValueError, match="select-then-count"):
        _ = pcoll | t


def test_refuses_bad_configurations():
    with pytest.raises(ValueError, match="selection_fraction"):
        DPHistogram(budget=BUDGET, mechanism=SelectThenCount(5, selection_fraction=1.0))
    with pytest.raises(ValueError, match="mechanism"):
        DPHistogram(5, BUDGET, mechanism="user-exact")
    # selection_fraction is select-then-count's only: no other mechanism or transform takes it.
    with pytest.raises(TypeError, match="selection_fraction"):
        DesignB(5, selection_fraction=0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="selection_fraction"):
        DPHistogram(5, BUDGET, mechanism="design-b", selection_fraction=0.5)
    with pytest.raises(ValueError, match="delta"):
        DPHistogram(5, PrivacyBudget.pure(1.0), mechanism="select-then-count")


def test_shared_accountant_takes_what_is_left_and_splits_it(dump):
    acc = PrivacyAccountant(PrivacyBudget.approx(2.0, 1e-6))
    t = DPHistogram(
        accountant=acc, mechanism=SelectThenCount(10, selection_fraction=0.25), label="rest"
    )
    run_batch(t, [zipf_keys(500, 3)], dump)
    (charge,) = acc.charges
    assert charge.transform == "rest" and charge.total_cost.epsilon == pytest.approx(2.0)
    assert acc.remaining.epsilon == pytest.approx(0.0, abs=1e-12)
    mech = t.aggregate.calibrated_mechanism
    assert mech.count_epsilon(t.aggregate.per_release_budget) == pytest.approx(1.5)
    assert mech.selection.parameters(t.aggregate.per_release_budget) == (
        pytest.approx(0.5),
        1e-6,
    )


@pytest.mark.parametrize(
    ("extra", "mechanism"),
    [
        (["--mechanism", "select-then-count", "--selection-fraction", "0.6"], "select-then-count"),
        (
            ["--mechanism", "user-exact", "--privacy-id", "user", "--max-contributions", "1"],
            "user-exact",
        ),
    ],
)
def test_cli_runs_the_new_mechanisms(tmp_path, capsys, extra, mechanism):
    path = tmp_path / "visits.parquet"
    sites = ["news"] * 500 + ["mail"] * 300 + ["rare"] * 2
    pq.write_table(pa.table({"user": [f"u{i}" for i in range(len(sites))], "site": sites}), path)
    args = ["heavy-hitters", "--input", str(path), "--column", "site", "--k", "5"]
    args += ["--epsilon", "1", "--format", "json", "--insecure-test-seed", "2", *extra]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    envelope = json.loads(out)
    assert {r["key"] for r in envelope["rows"]} == {"news", "mail"}
    assert envelope["guarantee"].startswith("(eps=1, delta=1e-06)-DP in total")
    assert mechanism in envelope["mechanism"]
    if mechanism == "select-then-count":
        assert envelope["parameters"]["selection_fraction"] == 0.6


def test_recount_source_releases_what_the_single_input_shape_releases(tmp_path, dump):
    # The count pass reads the same Parquet file again instead of the runner holding the input:
    # same selection, same exact counts, same noise streams, so the same release.
    from beam_dpsketch.transforms import ReadKeyBatches

    keys = zipf_keys(20_000, 7)
    path, twice = tmp_path / "keys.parquet", tmp_path / "twice.parquet"
    pq.write_table(pa.table({"key": keys}), path)
    pq.write_table(pa.table({"key": np.concatenate([keys, keys])}), twice)

    def release(recount: bool, again=path) -> list:
        extra = {"recount_source": ReadKeyBatches(str(again), "key")} if recount else {}
        t = DPHeavyHitters(
            budget=BUDGET,
            top=20,
            mechanism=SelectThenCount(64, **extra),
            noise_source=NoiseSource.insecure_for_tests(11),
            label="hh",
        )
        with beam.Pipeline(runner=FnApiRunner()) as p:
            assert_that(p | ReadKeyBatches(str(path), "key") | t, dump)
        return sorted(r[:2] for r in dump.load())

    single = release(False)
    assert len(single) >= 5  # the heavy keys of the Zipf stream are selected
    assert release(True) == single
    # The counts really come from the second read: reading every row twice there adds each
    # selected key's exact count once more (same selection, same noise draws).
    exact = Counter(keys.tolist())
    doubled = dict(release(True, again=twice))
    assert {k: doubled[k] - c for k, c in single} == {k: exact[k] for k, _ in single}


def test_recount_source_is_refused_where_it_does_not_apply(tmp_path):
    from beam_dpsketch.transforms import ReadKeyBatches

    path = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"key": [1, 2]}), path)
    source = ReadKeyBatches(str(path), "key")
    with pytest.raises(TypeError, match="recount_source"):
        DesignB(5, recount_source=source)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="recount_source"):
        DPHistogram(5, BUDGET, mechanism="design-b", recount_source=source)
    with pytest.raises(ValueError, match="recount_source"):
        DPHistogram(
            budget=BUDGET,
            mechanism=SelectThenCount(5, recount_source=source),
            privacy_unit=PrivacyUnit(id=lambda r: r[0]),
            key_fn=lambda r: r[1],
        )
    t = DPHistogram(budget=BUDGET, mechanism=SelectThenCount(5, recount_source=source))
    p = beam.Pipeline(runner=FnApiRunner())
    windowed = p | beam.Create([1, 2]) | beam.WindowInto(FixedWindows(10))
    with pytest.raises(ValueError, match="recount_source"):
        _ = windowed | t


def test_recount_source_neighbours_move_one_count_by_one(tmp_path, dump):
    # Worst-case neighbours for the count pass: the same stream without one element of the
    # heaviest key, both passes reading it. With the same seeded noise the selection is the same,
    # so the released counts differ by exactly the count sensitivity, 1, on that key only.
    from beam_dpsketch.transforms import ReadKeyBatches

    keys = zipf_keys(20_000, 7)
    heavy = Counter(keys.tolist()).most_common(1)[0][0]
    smaller = np.delete(keys, int(np.flatnonzero(keys == heavy)[0]))

    def release(data: np.ndarray, name: str) -> dict:
        path = tmp_path / name
        pq.write_table(pa.table({"key": data}), path)
        t = DPHeavyHitters(
            budget=BUDGET,
            top=20,
            mechanism=SelectThenCount(64, recount_source=ReadKeyBatches(str(path), "key")),
            noise_source=NoiseSource.insecure_for_tests(11),
            label="hh",
        )
        with beam.Pipeline(runner=FnApiRunner()) as p:
            assert_that(p | ReadKeyBatches(str(path), "key") | t, dump)
        return dict(r[:2] for r in dump.load())

    big, small = release(keys, "d.parquet"), release(smaller, "d2.parquet")
    assert big.keys() == small.keys() and heavy in big
    assert {k: big[k] - small[k] for k in big} == {k: int(k == heavy) for k in big}
