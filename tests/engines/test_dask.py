"""The DP transforms on Dask: the batch global-window matrix, and what is refused.

**Runs.** Each matrix test builds the same pipeline twice, each time with a fresh transform over
a fresh ``NoiseSource.insecure_for_tests(seed)`` (same application key, so the same keyed noise
streams), and runs it on the FnApiRunner and on a local Dask cluster: a scheduler and two
single-threaded worker processes on 127.0.0.1 (``dask_cluster.py``), reached with
``--runner=...ScalingDaskRunner --dask_client_address=...`` as a user would. The DP transforms
run on the ``ScalingDaskRunner`` (``beam_dpsketch.pipelines.dask_runner``): Beam's own
``DaskRunner`` drops what a ``DoFn`` emits from ``finish_bundle``, where the transforms' batching
steps emit each bundle's last batch, so every DP transform refuses it. Outputs are compared as
multisets. Equality is asserted where the release does not depend on bundling (linear sketches,
counts, the intermittent schedule, and Misra-Gries Design B and select-then-count fed one batch).
Design B over many bundles post-processes one segment per Beam accumulator, so there each
runner's output is checked against the mechanism's stated error bound instead, and the two
runners' counts differ by at most the Misra-Gries error ``n/(k+1)``; select-then-count over many
bundles selects with Design B, so the keys near the threshold may differ, but every key both
runners select has the same released record.

Each pipeline has exactly one sink (its ``assert_that``): the DaskRunner computes only the last
sink of a pipeline.

**Refusals.** The DaskRunner, and the ``ScalingDaskRunner`` with it, ignores windows, triggers
and timestamps and has no state or timers (``beam_dpsketch.transforms.engines``). Stateful
transforms and windowed inputs are refused when applied, before anything is charged, and every
DP transform is refused on Beam's own ``DaskRunner`` (and on a subclass that does not declare
``keeps_finish_bundle_outputs = True``); those tests build pipelines only and need no cluster.
``test_dask_ignores_windows``, ``test_dask_write_to_text_default_sharding_writes_nothing`` and
``test_dask_drops_finish_bundle_outputs`` run Beam's ``DaskRunner`` and pin the engine behaviour
the refusals rest on (the second one is why the command line does not run Beam's DaskRunner):
if a Beam upgrade changes it, they fail and the refusals can be revisited.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import dask_cluster
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import trigger, userstate, window
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue
from dask_cluster import DASK_RUNNER
from matrix import (
    assert_equal_and_nonempty,
    frequency_chunks,
    on_both,
    spread_chunks,
    zipf_keys,
)

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.runner import SCALING_DASK_RUNNER
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, PrivacyUnit
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
)
from beam_dpsketch.transforms.base import DPTransform
from beam_dpsketch.transforms.count import CountLaplaceMechanism
from beam_dpsketch.transforms.engines import UnsupportedRunnerError, runner_limits
from beam_dpsketch.transforms.heavy_hitters import DesignB
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.sliding import SlidingLayout

pytest.importorskip("distributed")

from apache_beam.runners.dask.dask_runner import DaskRunner  # noqa: E402 - needs dask

from beam_dpsketch.pipelines.dask_runner import ScalingDaskRunner  # noqa: E402


def dask_options(address: str) -> list[str]:
    """Pipeline arguments for the ``ScalingDaskRunner`` on the scheduler at ``address``: the DP
    transforms refuse Beam's own ``DaskRunner``, which drops ``finish_bundle`` outputs."""
    return [f"--runner={SCALING_DASK_RUNNER}", f"--dask_client_address={address}"]


def plain_dask_options(address: str) -> list[str]:
    """Pipeline arguments for Beam's own ``DaskRunner`` on the scheduler at ``address``."""
    return dask_cluster.dask_options(address)


# The module-scoped cluster fixture (a scheduler and two worker processes on 127.0.0.1).
dask_address = dask_cluster.dask_address

APPROX = PrivacyBudget.approx(1.0, 1e-6)
PURE = PrivacyBudget.pure(1.0)
# For the accountants of the refusal tests (the continual release needs epsilon < 1).
SMALL = PrivacyBudget.approx(0.5, 1e-6)


# ------------------------------------------------------------------------------------------------
# The batch, global-window matrix on a two-worker Dask cluster
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["design-b", "select-then-count"])
def test_heavy_hitters_single_batch_equal_fnapi(mechanism, tmp_path, dask_address):
    keys = zipf_keys(6000, 3, items=300, s=1.3)

    def build(p):
        t = DPHeavyHitters(
            30,
            APPROX,
            top=10,
            mechanism=mechanism,
            noise_source=NoiseSource.insecure_for_tests(4),
            label="hh",
        )
        return p | beam.Create([keys], reshuffle=False) | t

    ref, got = on_both(build, tmp_path, dask_options(dask_address))
    assert_equal_and_nonempty(ref, got)
    assert len(got) >= 3  # the heavy keys of a Zipf(1.3) stream are released


@pytest.mark.slow
def test_select_then_count_many_bundles_same_counts(tmp_path, dask_address):
    # The selection is a Design B release (bundling-dependent near its threshold); the count
    # release is exact counts plus keyed noise, so every key both runners select gets the same
    # record.
    seeds, k = list(range(6)), 100
    truth = Counter(np.concatenate([c for s in seeds for c in spread_chunks(s)]).tolist())

    def build(p):
        t = DPHeavyHitters(
            k,
            APPROX,
            top=10,
            mechanism="select-then-count",
            noise_source=NoiseSource.insecure_for_tests(8),
            label="stc",
        )
        return p | beam.Create(seeds) | beam.FlatMap(spread_chunks) | t

    ref, got = on_both(build, tmp_path, dask_options(dask_address))
    ref_by_key, got_by_key = {r.key: r for r in ref}, {r.key: r for r in got}
    common = ref_by_key.keys() & got_by_key.keys()
    assert {key for key, _ in truth.most_common(5)} <= common
    assert all(got_by_key[key] == ref_by_key[key] for key in common)


@pytest.mark.slow
def test_design_b_many_bundles_within_the_bound(tmp_path, dask_address):
    # 24 chunks in many Dask partitions: each runner picks its own segments.
    seeds, k, shards = list(range(6)), 100, 64
    keys = np.concatenate([c for s in seeds for c in spread_chunks(s)])
    truth, n = Counter(keys.tolist()), len(keys)

    def build(p):
        t = DPHeavyHitters(
            k,
            APPROX,
            top=10,
            mechanism=DesignB(k, max_shards=shards),
            noise_source=NoiseSource.insecure_for_tests(5),
            label="hh-spread",
        )
        return p | beam.Create(seeds) | beam.FlatMap(spread_chunks) | t

    ref, got = on_both(build, tmp_path, dask_options(dask_address))
    for out in (ref, got):
        assert len(out) == 10
        # Design B with the count correction: f(x) - noise <= released <= f(x) + n/(k+1) + noise,
        # whatever the segmentation; noise bounds as in tests/transforms (union bound over the
        # 11 draws of scale 2/eps_hh and (1/eps_c)/(k+1): failure probability <= 1.1e-8).
        noise = (2 / 0.95 + 1 / 0.05 / (k + 1)) * math.log(1e9)
        for key, count, *_ in out:
            assert truth[key] - noise <= count <= truth[key] + n / (k + 1) + noise
        assert {key for key, _ in truth.most_common(5)} <= {row.key for row in out}
    # Both runners draw the same keyed noise, so they differ only by the segmentation, which
    # moves a count by at most n/(k+1) (the Misra-Gries error of one segmentation).
    ref_counts = {row.key: row.estimate for row in ref}
    got_counts = {row.key: row.estimate for row in got}
    for key in ref_counts.keys() & got_counts.keys():
        assert abs(ref_counts[key] - got_counts[key]) <= n / (k + 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sketch", "budget"),
    [("count-min", PURE), ("count-sketch", PrivacyBudget.zcdp(0.5))],
)
def test_frequencies_equal_fnapi(sketch, budget, tmp_path, dask_address):
    def build(p):
        t = DPFrequencies(
            256,
            4,
            budget,
            sketch=sketch,
            seed=7,
            noise_source=NoiseSource.insecure_for_tests(3),
            label="f",
        )
        return p | beam.Create([1, 2, 3]) | beam.FlatMap(frequency_chunks) | t

    ref, got = on_both(build, tmp_path, dask_options(dask_address))
    assert len(ref) == len(got) == 1
    assert got[0] == ref[0]
    np.testing.assert_array_equal(np.asarray(got[0].table), np.asarray(ref[0].table))


@pytest.mark.slow
def test_quantiles_equal_fnapi(tmp_path, dask_address):
    values = np.clip(np.round(np.random.default_rng(8).normal(100, 30, 50_000)), 0, 255)
    chunks = np.array_split(values.astype(np.int64), 5)

    def build(p):
        t = DPQuantiles(
            [0.1, 0.5, 0.9],
            0,
            255,
            PrivacyBudget.zcdp(0.5),
            tree=QuantileTree(width=64, depth=3),
            noise_source=NoiseSource.insecure_for_tests(6),
            label="q",
        )
        return p | beam.Create(chunks) | t

    ref, got = on_both(build, tmp_path, dask_options(dask_address))
    assert len(got) == 3
    assert_equal_and_nonempty(ref, got)


@pytest.mark.slow
@pytest.mark.parametrize("user_level", [False, True], ids=["element", "user"])
def test_count_equal_fnapi(user_level, tmp_path, dask_address):
    # User level: 300 users with 1 to 9 events each, bounded to 2 contributions each; enough
    # elements for several Dask partitions.
    events = [(u, j) for u in range(300) for j in range(2 * (u % 5) + 1)]
    kwargs = (
        {"privacy_unit": PrivacyUnit(id=lambda e: e[0], max_contributions=2)} if user_level else {}
    )

    def build(p):
        t = DPCount(PURE, noise_source=NoiseSource.insecure_for_tests(11), label="count", **kwargs)
        return p | beam.Create(events) | t

    ref, got = on_both(build, tmp_path, dask_options(dask_address))
    assert len(got) == 1
    assert_equal_and_nonempty(ref, got)


INTERMITTENT = QuerySchedule(
    [(1000, [1, 2, 3]), (2500, [1, 7, 7, 2]), (2600, [5]), (4000, [2, 99, (1, "t")]), (5500, [1])]
)


def intermittent_chunks(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    pos = np.arange(1, 6001, dtype=np.int64)
    keys = np.random.default_rng(11).zipf(1.4, 6000).astype(np.int64) % 300
    return list(zip(np.array_split(pos, 12), np.array_split(keys, 12), strict=True))[seed::2]


@pytest.mark.slow
def test_intermittent_schedule_equal_fnapi(tmp_path, dask_address):
    # A declared schedule needs no state: times are element fields, grouped in the global window.
    def build(p):
        t = DPIntermittentQueries(
            64,
            5,
            PURE,
            queries=INTERMITTENT,
            clock="positions",
            noise_source=NoiseSource.insecure_for_tests(3),
            label="iq",
        )
        return p | beam.Create([0, 1]) | beam.FlatMap(intermittent_chunks) | t

    ref, got = on_both(build, tmp_path, dask_options(dask_address))
    assert len(got) == INTERMITTENT.num_queries
    assert_equal_and_nonempty(ref, got)


@pytest.mark.slow
def test_dask_ignores_windows(tmp_path, dask_address):
    # Three elements in three daily windows: the FnApiRunner counts per window, Dask once.
    def build(p):
        return (
            p
            | beam.Create([0, 86400, 2 * 86400])
            | beam.Map(lambda t: window.TimestampedValue(1, t))
            | beam.WindowInto(window.FixedWindows(86400))
            | beam.CombineGlobally(sum).without_defaults()
        )

    ref, got = on_both(build, tmp_path, plain_dask_options(dask_address))
    assert ref == [1, 1, 1]
    assert got == [3]


@pytest.mark.slow
def test_dask_write_to_text_default_sharding_writes_nothing(tmp_path, dask_address):
    # The command line's output path: WriteToText with runner-chosen sharding.
    p = beam.Pipeline(options=PipelineOptions(plain_dask_options(dask_address)))
    _ = p | beam.Create(list(range(300))) | beam.io.WriteToText(str(tmp_path / "out"))
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        result.client.close()
    lines = sum(len(f.read_text().splitlines()) for f in tmp_path.glob("out*"))
    assert lines == 0


class _CountAtFinishBundle(beam.DoFn):
    """Emits, from ``finish_bundle`` only, how many elements its bundle held (as the batching
    steps of the DP transforms emit a bundle's last batch)."""

    def start_bundle(self) -> None:
        self._count = 0

    def process(self, element: Any) -> list[Any]:
        self._count += 1
        return []

    def finish_bundle(self) -> Any:
        if self._count:
            yield WindowedValue(self._count, GlobalWindow().max_timestamp(), (GlobalWindow(),))


@pytest.mark.slow
def test_dask_drops_finish_bundle_outputs(tmp_path, dask_address):
    # The loss every DP transform is refused on Beam's DaskRunner for: the FnApiRunner counts
    # all 300 elements, Beam's DaskRunner emits nothing, the ScalingDaskRunner counts them all.
    def build(p):
        return p | beam.Create(list(range(300))) | beam.ParDo(_CountAtFinishBundle())

    ref, got = on_both(build, tmp_path, plain_dask_options(dask_address))
    assert sum(ref) == 300
    assert got == []
    _, kept = on_both(build, tmp_path, dask_options(dask_address))
    assert sum(kept) == 300


def _per_element_frequencies() -> DPTransform:
    return DPFrequencies(
        64, 3, PURE, seed=7, noise_source=NoiseSource.insecure_for_tests(1), label="f"
    )


def _per_element_heavy_hitters() -> DPTransform:
    return DPHeavyHitters(
        30, APPROX, top=10, noise_source=NoiseSource.insecure_for_tests(2), label="hh"
    )


PER_ELEMENT: dict[str, Callable[[], DPTransform]] = {
    "DPFrequencies": _per_element_frequencies,
    "DPHeavyHitters": _per_element_heavy_hitters,
}


def per_element_keys() -> list[int]:
    # One key per element, as a user's unbatched PCollection holds them: the transform batches
    # them itself, and emits each bundle's last batch from finish_bundle.
    return [i % 7 for i in range(700)]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PER_ELEMENT))
def test_per_element_keys_on_scaling_dask_equal_fnapi(name, tmp_path, dask_address):
    def build(p):
        return p | beam.Create(per_element_keys()) | PER_ELEMENT[name]()

    ref, got = on_both(build, tmp_path, dask_options(dask_address))
    assert_equal_and_nonempty(ref, got)
    if name == "DPFrequencies":
        np.testing.assert_array_equal(np.asarray(got[0].table), np.asarray(ref[0].table))
        assert np.asarray(ref[0].table).sum() != 0
    else:
        assert {row.key for row in got} == set(range(7))


# ------------------------------------------------------------------------------------------------
# Refused on Dask, before anything is charged (no cluster: the pipelines are only built)
# ------------------------------------------------------------------------------------------------


def dask_pipeline() -> beam.Pipeline:
    # Building needs no scheduler: the address is only used when the pipeline runs.
    return beam.Pipeline(options=PipelineOptions(dask_options("tcp://127.0.0.1:1")))


def plain_dask_pipeline() -> beam.Pipeline:
    return beam.Pipeline(options=PipelineOptions(plain_dask_options("tcp://127.0.0.1:1")))


def _noise() -> NoiseSource:
    return NoiseSource.insecure_for_tests(1)


def _continual(acc: PrivacyAccountant) -> DPTransform:
    return ContinualDPSketch(16, 3, 8, accountant=acc, query_keys=[1], noise_source=_noise())


def _sliding(acc: PrivacyAccountant) -> DPTransform:
    return DPSlidingWindowFrequencies(
        10, 16, 2, accountant=acc, release_every=5, query_keys=[1], noise_source=_noise(),
        layout=SlidingLayout(block=10, alpha="1/2"),
    )  # fmt: skip


def _intermittent_events(acc: PrivacyAccountant, p: beam.Pipeline) -> DPTransform:
    queries = p | "Queries" >> beam.Create([(3, [1])])
    return DPIntermittentQueries(
        16, 3, accountant=acc, queries=queries, clock="event_time", noise_source=_noise()
    )


def _sequential(acc: PrivacyAccountant) -> DPTransform:
    return DPHeavyHitters(8, accountant=acc, mechanism="sequential", noise_source=_noise())


STATEFUL: dict[str, Callable[..., DPTransform]] = {
    "ContinualDPSketch": _continual,
    "DPHeavyHitters": _sequential,
    "DPSlidingWindowFrequencies": _sliding,
    "DPIntermittentQueries": _intermittent_events,
}


def _apply_stateful(name: str, p: beam.Pipeline, acc: PrivacyAccountant) -> DPTransform:
    make = STATEFUL[name]
    t = make(acc, p) if name == "DPIntermittentQueries" else make(acc)
    data = p | "Data" >> beam.Create([(1, 1), (2, 2)])
    data | t  # noqa: B018 - applying is what is tested
    return t


@pytest.mark.parametrize("name", list(STATEFUL))
def test_stateful_transforms_refused_before_charging(name):
    acc = PrivacyAccountant(SMALL if name != "DPIntermittentQueries" else PURE, name="acc")
    p = dask_pipeline()
    with pytest.raises(UnsupportedRunnerError, match=rf"{name} cannot run on DaskRunner") as e:
        _apply_stateful(name, p, acc)
    assert "state" in str(e.value) and "timers" in str(e.value)
    assert acc.all_charges() == []
    assert acc.committed.epsilon == 0.0


def _windowed_cases() -> dict[str, Callable[[PrivacyAccountant], DPTransform]]:
    return {
        "DPCount": lambda acc: DPCount(accountant=acc, noise_source=_noise()),
        "DPHeavyHitters": lambda acc: DPHeavyHitters(8, accountant=acc, noise_source=_noise()),
        "DPFrequencies": lambda acc: DPFrequencies(32, 3, accountant=acc, noise_source=_noise()),
        "DPQuantiles": lambda acc: DPQuantiles(
            [0.5],
            0,
            15,
            accountant=acc,
            tree=QuantileTree(width=32, depth=3),
            noise_source=_noise(),
        ),
        "DPAggregate": lambda acc: DPAggregate(
            beam.combiners.CountCombineFn(),
            CountLaplaceMechanism(),
            accountant=acc,
            noise_source=_noise(),
        ),
    }


WINDOWINGS = {
    # 30 daily windows under a 7-window plan: Dask would release one global answer.
    "fixed": lambda: beam.WindowInto(window.FixedWindows(86400)),
    "sliding": lambda: beam.WindowInto(window.SlidingWindows(3600, 600)),
    # The global window with an early-firing trigger: Dask would fire once.
    "global-trigger": lambda: beam.WindowInto(
        window.GlobalWindows(),
        trigger=trigger.Repeatedly(trigger.AfterCount(10)),
        accumulation_mode=trigger.AccumulationMode.DISCARDING,
    ),
}


@pytest.mark.parametrize("windowing", list(WINDOWINGS))
@pytest.mark.parametrize("name", list(_windowed_cases()))
def test_windowed_input_refused_before_charging(name, windowing):
    acc = PrivacyAccountant(SMALL, name="acc")
    t = _windowed_cases()[name](acc)
    p = dask_pipeline()
    data = (
        p
        | beam.Create([1, 2, 3])
        | beam.Map(lambda x: window.TimestampedValue(x, x))
        | WINDOWINGS[windowing]()
    )
    with pytest.raises(UnsupportedRunnerError, match=rf"{name} cannot run on DaskRunner") as e:
        data | t  # noqa: B018
    assert "windowed input" in str(e.value)
    assert acc.all_charges() == []
    assert t.charge is None


def test_refusal_names_parameters_never_data():
    secret = "secret-key-7f3a"
    acc = PrivacyAccountant(SMALL, name="acc")
    p = dask_pipeline()
    data = p | beam.Create([secret]) | beam.WindowInto(window.FixedWindows(60))
    with pytest.raises(UnsupportedRunnerError) as e:
        data | DPHeavyHitters(8, accountant=acc, noise_source=_noise(), label="hh")  # noqa: B018
    message = str(e.value)
    assert message.startswith("hh: runner: DPHeavyHitters cannot run on DaskRunner")
    assert "FixedWindows" in message and secret not in message


@pytest.mark.parametrize("windowing", list(WINDOWINGS))
def test_refusal_names_window_and_trigger_classes_without_addresses(windowing):
    # A default object repr carries a memory address: no parameter, and no business in a message.
    acc = PrivacyAccountant(SMALL, name="acc")
    p = dask_pipeline()
    data = p | beam.Create([1]) | WINDOWINGS[windowing]()
    with pytest.raises(UnsupportedRunnerError) as e:
        data | DPCount(accountant=acc, noise_source=_noise(), label="c")  # noqa: B018
    message = str(e.value)
    assert " at 0x" not in message and "object" not in message
    windowfn = type(data.windowing.windowfn).__name__
    assert f"on windowed input ({windowfn}, trigger " in message


@pytest.mark.parametrize("name", ["DPCount", "DPHistogram", "DPIntermittentQueries-schedule"])
def test_global_stateless_transforms_accepted_on_dask(name):
    acc = PrivacyAccountant(PURE if name.startswith("DPIntermittent") else SMALL, name="acc")
    p = dask_pipeline()
    t = ALL_TRANSFORMS[name](acc, p)
    p | beam.Create([(1, 1)]) | t  # noqa: B018
    assert t.charge is not None and acc.all_charges()


def test_limits_found_by_class_and_subclass_only():
    class MyDaskRunner(DaskRunner):
        pass

    assert runner_limits(DaskRunner()).name == "DaskRunner"
    assert runner_limits(MyDaskRunner()).name == "DaskRunner"
    assert not runner_limits(DaskRunner()).keeps_finish_bundle_outputs
    assert not runner_limits(MyDaskRunner()).keeps_finish_bundle_outputs
    # The ScalingDaskRunner keeps finish_bundle outputs, and nothing else of the model.
    scaling = runner_limits(ScalingDaskRunner())
    assert scaling.name == "DaskRunner" and scaling.keeps_finish_bundle_outputs
    assert not scaling.keeps_windows and not scaling.keeps_state_and_timers
    assert runner_limits(FnApiRunner()) is None
    assert runner_limits(None) is None
    assert DASK_RUNNER.endswith(".DaskRunner")


# ------------------------------------------------------------------------------------------------
# needs_state_and_timers says what the expansion holds
# ------------------------------------------------------------------------------------------------


class _StatefulParDos(beam.pipeline.PipelineVisitor):
    def __init__(self) -> None:
        self.found: list[str] = []

    def visit_transform(self, node: Any) -> None:
        transform = node.transform
        if isinstance(transform, beam.ParDo) and userstate.is_stateful_dofn(transform.dofn):
            self.found.append(node.full_label)


def _ignoring_pipeline(
    make: Callable[[PrivacyAccountant], DPTransform],
) -> Callable[[PrivacyAccountant, beam.Pipeline], DPTransform]:
    return lambda acc, p: make(acc)


ALL_TRANSFORMS: dict[str, Callable[[PrivacyAccountant, beam.Pipeline], DPTransform]] = {
    **{n: _ignoring_pipeline(make) for n, make in _windowed_cases().items()},
    "DPHistogram": lambda acc, p: DPHistogram(8, accountant=acc, noise_source=_noise()),
    "DPIntermittentQueries-schedule": lambda acc, p: DPIntermittentQueries(
        16, 3, accountant=acc, queries=[(3, [1])], clock="positions", noise_source=_noise()
    ),
    "ContinualDPSketch": lambda acc, p: _continual(acc),
    "DPSlidingWindowFrequencies": lambda acc, p: _sliding(acc),
    "DPIntermittentQueries-events": _intermittent_events,
}


@pytest.mark.parametrize("name", list(ALL_TRANSFORMS))
def test_needs_state_and_timers_matches_the_expansion(name):
    # Built on the FnApiRunner, which accepts everything: the flag must say whether the
    # expansion holds a stateful DoFn, or the Dask refusal would miss it.
    acc = PrivacyAccountant(PURE if name.startswith("DPIntermittent") else SMALL, name="acc")
    p = beam.Pipeline(runner=FnApiRunner())
    t = ALL_TRANSFORMS[name](acc, p)
    data = p | "Data" >> beam.Create([(1, 1), (2, 2)])
    data | t  # noqa: B018
    visitor = _StatefulParDos()
    p.visit(visitor)
    assert bool(visitor.found) == t.needs_state_and_timers, visitor.found


# ------------------------------------------------------------------------------------------------
# Beam's own DaskRunner drops finish_bundle outputs: every DP transform is refused on it
# ------------------------------------------------------------------------------------------------


class _UndeclaredDaskRunner(DaskRunner):
    """A subclass with Beam's translation, which says nothing of ``finish_bundle``."""


class _TruthyDaskRunner(DaskRunner):
    """A subclass whose attribute is truthy but not the declaration (``True``)."""

    keeps_finish_bundle_outputs = "yes"


class _SubScalingDaskRunner(ScalingDaskRunner):
    """A subclass that inherits the declaration with the translation."""


class _RevokedScalingDaskRunner(ScalingDaskRunner):
    """A subclass that declares it does not keep them (say, it swaps the translation back)."""

    keeps_finish_bundle_outputs = False


@pytest.mark.parametrize("name", list(PER_ELEMENT))
def test_plain_dask_runner_refused_before_charging(name):
    p = plain_dask_pipeline()
    t = PER_ELEMENT[name]()
    data = p | beam.Create(per_element_keys())
    with pytest.raises(UnsupportedRunnerError) as e:
        data | t  # noqa: B018
    message = str(e.value)
    label = "f" if name == "DPFrequencies" else "hh"
    assert message.startswith(f"{label}: runner: {name} cannot run on DaskRunner: ")
    assert "finish_bundle" in message
    assert f"runner={SCALING_DASK_RUNNER}" in message and "--runner dask" in message
    assert t.charge is None


@pytest.mark.parametrize(
    "runner",
    [DaskRunner, _UndeclaredDaskRunner, _TruthyDaskRunner, _RevokedScalingDaskRunner],
    ids=lambda r: r.__name__,
)
def test_runners_without_the_declaration_refused(runner):
    acc = PrivacyAccountant(SMALL, name="acc")
    p = beam.Pipeline(runner=runner())
    data = p | beam.Create(per_element_keys())
    with pytest.raises(UnsupportedRunnerError, match="finish_bundle"):
        data | DPFrequencies(32, 3, accountant=acc, noise_source=_noise())  # noqa: B018
    assert acc.all_charges() == []


@pytest.mark.parametrize("runner", [ScalingDaskRunner, _SubScalingDaskRunner])
@pytest.mark.parametrize("name", ["DPCount", "DPHeavyHitters", "DPFrequencies"])
def test_declared_runners_accepted(name, runner):
    acc = PrivacyAccountant(SMALL, name="acc")
    p = beam.Pipeline(runner=runner())
    t = ALL_TRANSFORMS[name](acc, p)
    p | beam.Create(per_element_keys()) | t  # noqa: B018
    assert t.charge is not None and acc.all_charges()


@pytest.mark.parametrize("name", list(ALL_TRANSFORMS))
def test_every_transform_refused_on_plain_dask_before_charging(name):
    # Stateful transforms are refused for their state and timers, the others for the loss.
    acc = PrivacyAccountant(PURE if name.startswith("DPIntermittent") else SMALL, name="acc")
    p = plain_dask_pipeline()
    t = ALL_TRANSFORMS[name](acc, p)
    data = p | "Data" >> beam.Create([(1, 1), (2, 2)])
    with pytest.raises(UnsupportedRunnerError, match="cannot run on DaskRunner") as e:
        data | t  # noqa: B018
    reason = "state" if t.needs_state_and_timers else "finish_bundle"
    assert reason in str(e.value)
    assert acc.all_charges() == []
