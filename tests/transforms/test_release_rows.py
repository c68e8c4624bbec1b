"""Element-level heavy-hitter releases are typed rows that keep the sketch layer's error bounds.

``DPHistogram`` and ``DPHeavyHitters`` at element level emit
:class:`~beam_dpsketch.transforms.records.BoundedKeyEstimate` rows, registered with Beam's
``RowCoder``. Each row carries exactly the key, the estimate and the bound (``lower``, ``upper``,
``confidence``) of the sketch layer's ``HeavyHitterEstimate`` it is made from, in the same order,
on the seeded runs of ``tests/transform_cases.py`` and at the mechanism level.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

import beam_dpsketch.transforms.heavy_hitters.mechanism as mechanism_module
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import HeavyHitterEstimate
from beam_dpsketch.transforms.heavy_hitters import (
    DesignB,
    MergedGSHM,
    MergedLaplace,
    SelectThenCount,
    Sequential,
)
from beam_dpsketch.transforms.records import BoundedKeyEstimate
from tests.collect import DumpToFile
from tests.transform_cases import CASES, ELEMENT_LEVEL
from tests.transforms.test_hh_mechanisms import K, bound, drive, element_batches

RUNNER = "FnApiRunner"
SEEDED_CASES = [f"histogram-{m}" for m in ELEMENT_LEVEL] + ["heavy-hitters"]


def _as_fields(estimate: HeavyHitterEstimate) -> tuple[Any, ...]:
    return (estimate[0], estimate[1], estimate.lower, estimate.upper, estimate.confidence)


@pytest.mark.parametrize("name", SEEDED_CASES)
def test_seeded_rows_carry_the_sketch_layer_bounds(
    name: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sketch layer's estimates of the very release the pipeline emits, as the mechanism
    # hands them to ``released_records`` (the in-memory runner calls it in this process).
    seen: list[HeavyHitterEstimate] = []
    original = mechanism_module.released_records

    def spy(released: Any, top: int | None) -> list[Any]:
        chosen = released if top is None else released.top(top)
        estimates = list(chosen.estimates())
        if top is not None:
            estimates.sort(key=lambda kv: -kv[1])
        seen.extend(estimates)
        return original(released, top)

    monkeypatch.setattr(mechanism_module, "released_records", spy)
    case = CASES[name]
    dump = DumpToFile(str(tmp_path / "rows.pkl"))
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=RUNNER, options=options) as p:
        out = p | beam.Create(case.seeded_input, reshuffle=False) | case.make(f"rows-{name}")
        assert out.element_type is BoundedKeyEstimate
        assert_that(out, dump)
    rows = dump.load()
    assert seen, "the seeded case releases keys"
    assert all(isinstance(e, HeavyHitterEstimate) for e in seen)
    assert all(isinstance(r, BoundedKeyEstimate) for r in rows)
    assert sorted(rows, key=repr) == sorted((_as_fields(e) for e in seen), key=repr)
    for row in rows:
        assert row.error_bound == max(row.estimate - row.lower, row.upper - row.estimate)
        assert row.count == row.estimate


@pytest.mark.parametrize(
    "mechanism",
    [DesignB(K, max_shards=4), Sequential(K), MergedGSHM(K), MergedLaplace(K)],
    ids=repr,
)
def test_mechanism_rows_equal_the_sketch_estimates_in_order(mechanism: Any) -> None:
    m = bound(mechanism)
    if isinstance(m, Sequential):
        acc = m.combine_fn().create_accumulator()
        for batch in element_batches():
            acc.update(batch)
    else:
        acc = drive(m, element_batches())
    budget = PrivacyBudget.approx(1.0, 1e-6)
    rows = m.release(acc, budget, NoiseSource.insecure_for_tests(3).stream("r"))
    estimates = m.release_object(acc, budget, NoiseSource.insecure_for_tests(3).stream("r"))
    assert rows, "the release names keys"
    assert [type(r) for r in rows] == [BoundedKeyEstimate] * len(rows)
    assert rows == [_as_fields(e) for e in estimates.estimates()]


def test_select_then_count_rows_equal_the_sketch_estimates() -> None:
    m = SelectThenCount(K).bind(top=2, max_contributions=None)
    counts = {0: 400, 1: 370, 2: 300, 3: 0}
    budget = PrivacyBudget.approx(1.0, 1e-6)
    rows = m.release(counts, budget, NoiseSource.insecure_for_tests(5).stream("c"))
    top = m.release_object(counts, budget, NoiseSource.insecure_for_tests(5).stream("c")).top(2)
    assert [type(r) for r in rows] == [BoundedKeyEstimate] * 2
    assert rows == sorted((_as_fields(e) for e in top.estimates()), key=lambda r: -r[1])


def test_bounded_rows_go_through_the_row_coder_unchanged() -> None:
    coder = beam.coders.registry.get_coder(BoundedKeyEstimate)
    assert isinstance(coder, beam.coders.RowCoder)
    assert [f.name for f in coder.schema.fields] == list(BoundedKeyEstimate._fields)
    for row in (
        BoundedKeyEstimate("k1", 12, 9.5, 14.0, 0.95),
        BoundedKeyEstimate(3, 2.5, 0.0, 5.0, 0.9),
    ):
        back = coder.decode(coder.encode(row))
        assert back == row and type(back) is BoundedKeyEstimate
        assert [type(v) for v in back] == [type(v) for v in row]
