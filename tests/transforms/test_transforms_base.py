"""The common base of the DP transforms: labels, accounting, ``explain()``, display data, extractors.

Every DP transform is a :class:`~beam_dpsketch.transforms.base.DPTransform`. These tests check,
for each of them and in the same way, that

* ``label=`` is the Beam label: two instances with different labels apply in one pipeline (on
  the FnApiRunner) and both release; without a label the Beam label is the class name;
* nothing is charged at construction, and applying charges the accountant exactly once, under
  the release label; ``explain()`` refuses before that and reports the charge after;
* ``display_data()`` holds the budget and public parameters, never a value from the data;
* extractors given as field names read ``dict`` and ``beam.Row`` elements, with the same
  release (same seeded, INSECURE test noise key and label) as the equivalent callables on
  tuples.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.transforms.display import DisplayData

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, PrivacyUnit
from beam_dpsketch.transforms import (
    BoundedKeyEstimate,
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
from beam_dpsketch.transforms.base import DPTransform, FieldExtractor, as_extractor
from beam_dpsketch.transforms.count import CountLaplaceMechanism
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.sliding import SlidingLayout

SEED = 20261125
SECRET = "secret-key-7f3a"
APPROX = PrivacyBudget.approx(0.5, 1e-6)
PURE = PrivacyBudget.pure(1.0)
SELECTION_KEY = b"k" * 32


def fnapi() -> beam.Pipeline:
    return beam.Pipeline(runner="FnApiRunner")


def noise() -> NoiseSource:
    return NoiseSource.insecure_for_tests(SEED)


# One factory per DP transform (the seven, and the release step DPAggregate), with the input
# each expects. ``make(label, **extractors)`` builds it; ``data`` are its tuple elements.
KEYS = [SECRET, "b", SECRET, "c", SECRET, "b"]


def _count(label=None, **kw):
    return DPCount(PURE, noise_source=noise(), label=label, **kw)


def _aggregate(label=None, **kw):
    return DPAggregate(
        beam.combiners.CountCombineFn(),
        CountLaplaceMechanism(),
        budget=PURE,
        noise_source=noise(),
        label=label,
        **kw,
    )


def _histogram(label=None, **kw):
    return DPHistogram(8, PrivacyBudget.approx(1.0, 1e-6), noise_source=noise(), label=label, **kw)


def _heavy_hitters(label=None, **kw):
    if "privacy_unit" not in kw:
        kw.setdefault("mechanism", "design-b")
    return DPHeavyHitters(
        8, PrivacyBudget.approx(1.0, 1e-6), top=2, noise_source=noise(), label=label, **kw
    )


def _frequencies(label=None, **kw):
    return DPFrequencies(32, 3, PURE, seed=1, noise_source=noise(), label=label, **kw)


def _quantiles(label=None, **kw):
    return DPQuantiles(
        [0.5],
        0,
        15,
        PURE,
        tree=QuantileTree(width=32, depth=3),
        noise_source=noise(),
        label=label,
        **kw,
    )


def _continual(label=None, **kw):
    return ContinualDPSketch(
        16, 3, 8, APPROX, query_keys=[SECRET, "b"], noise_source=noise(), label=label, **kw
    )


def _sliding(label=None, **kw):
    return DPSlidingWindowFrequencies(
        10,
        16,
        2,
        APPROX,
        release_every=5,
        query_keys=["b"],
        noise_source=noise(),
        label=label,
        layout=SlidingLayout(block=10, alpha="1/2"),
        **kw,
    )


SCHEDULE = QuerySchedule([(3, ["b"]), (6, ["b", SECRET])])


def _intermittent(label=None, **kw):
    return DPIntermittentQueries(
        16, 3, PURE, queries=SCHEDULE, clock="positions", noise_source=noise(), label=label, **kw
    )


# name: (factory, elements, options for the pane time model etc.)
CASES: dict[str, tuple[Callable[..., DPTransform], list[Any], dict[str, Any]]] = {
    "DPCount": (_count, KEYS, {}),
    "DPAggregate": (_aggregate, KEYS, {}),
    "DPHistogram": (_histogram, KEYS * 50, {}),
    "DPHeavyHitters": (_heavy_hitters, KEYS * 50, {}),
    "DPFrequencies": (_frequencies, KEYS, {}),
    "DPQuantiles": (_quantiles, [1, 5, 5, 7, 9, 15], {}),
    "ContinualDPSketch": (_continual, [(i, k) for i, k in enumerate(KEYS)], {}),
    "DPSlidingWindowFrequencies": (_sliding, [(i + 1, k) for i, k in enumerate(KEYS * 2)], {}),
    "DPIntermittentQueries": (_intermittent, [(i + 1, k) for i, k in enumerate(KEYS)], {}),
}


# --------------------------------------------------------------------------------------------
# Labels: two instances of a class in one pipeline
# --------------------------------------------------------------------------------------------


def test_two_heavy_hitters_with_labels_a_and_b_both_release():
    p = fnapi()
    data = p | beam.Create(KEYS * 200)
    acc = PrivacyAccountant(PrivacyBudget.approx(2.0, 1e-5), name="pipeline")
    budget = PrivacyBudget.approx(1.0, 1e-6)
    kw = {"accountant": acc, "mechanism": "design-b", "noise_source": noise()}
    a = data | DPHeavyHitters(4, budget, label="a", **kw)
    b = data | DPHeavyHitters(4, budget, label="b", **kw)

    def released(records):
        # Each release is a non-empty list of (key, noisy count) rows with their bounds:
        # SECRET's 600 copies less Algorithm 3's offset N/(k+1) = 240 sit about 330 above the
        # threshold (about 31), some 150 noise scales.
        assert records and all(type(r) is BoundedKeyEstimate for r in records)

    assert_that(a, released, label="CheckA")
    assert_that(b, released, label="CheckB")
    p.run().wait_until_finish()
    assert [c.transform for c in acc.charges] == ["a", "b"]


@pytest.mark.parametrize("name", list(CASES))
def test_two_instances_of_each_class_apply_in_one_pipeline(name, tmp_path):
    make, elements, _ = CASES[name]
    p = fnapi()
    data = p | beam.Create(elements)
    first, second = make(label="first"), make(label="second")
    for transform in (first, second):
        out = data | transform
        _dump(out, tmp_path / f"{transform.label}.pickle", label=f"Dump{transform.label}")
    p.run().wait_until_finish()
    for transform in (first, second):
        assert _load(tmp_path / f"{transform.label}.pickle"), f"{transform.label} released nothing"
        assert transform.release_label == transform.label
        assert [c.transform for c in transform.accountant.charges] == [transform.label]


@pytest.mark.parametrize("name", list(CASES))
def test_default_label_is_the_class_name_and_its_shape(name):
    make, elements, _ = CASES[name]
    transform = make()
    label = transform.default_label()
    assert transform.label == label
    # The class name, then the shape in parentheses when there is one to show.
    assert label == name or (label.startswith(f"{name}(") and label.endswith(")")), label
    p = fnapi()
    _ = p | beam.Create(elements) | transform
    # Applied without a label: the release is named by the applied full label.
    assert transform.release_label == label


# --------------------------------------------------------------------------------------------
# Accounting and explain()
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_charges_once_when_applied_and_explains_the_same_way(name):
    make, elements, _ = CASES[name]
    transform = make(label="x")
    assert isinstance(transform, DPTransform)
    # Nothing is charged at construction, so there is nothing to explain yet.
    assert transform.accountant.charges == ()
    assert transform.charge is None
    with pytest.raises(RuntimeError, match="applied"):
        transform.explain()
    p = fnapi()
    _ = p | beam.Create(elements) | transform
    (charge,) = transform.accountant.charges
    assert charge is transform.charge
    assert charge.transform == "x" == transform.release_label
    report = transform.explain()
    assert report == transform.accountant.explain()
    assert "x" in report and charge.mechanism in report


@pytest.mark.parametrize("name", list(CASES))
def test_shared_accountant_refuses_a_second_release_with_one_label(name):
    make, elements, _ = CASES[name]
    acc = PrivacyAccountant(PrivacyBudget.approx(100.0, 1e-3), name="shared")
    p = fnapi()
    data = p | beam.Create(elements)
    _ = data | "One" >> make(label="same", accountant=acc)
    with pytest.raises(ValueError, match="already has a charge"):
        _ = data | "Two" >> make(label="same", accountant=acc)
    assert len(acc.charges) == 1


def test_remaining_budget_of_a_shared_accountant():
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0), name="pipe")
    p = fnapi()
    data = p | beam.Create(KEYS)
    first = DPCount(PrivacyBudget.pure(0.25), accountant=acc, label="first")
    rest = DPCount(accountant=acc, label="rest")
    _ = data | first
    _ = data | rest
    assert rest.budget is None
    assert rest.aggregate.per_release_budget.epsilon == pytest.approx(0.75)


# --------------------------------------------------------------------------------------------
# display_data()
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_display_data_shows_public_parameters_only(name):
    make, elements, _ = CASES[name]
    transform = make(label="shown")
    p = fnapi()
    _ = p | beam.Create(elements) | transform
    items = {item.key: item.value for item in DisplayData.create_from(transform).items}
    assert items["budget"] == str(transform.budget)
    assert items["release_label"] == "shown"
    assert "mechanism" in items
    for value in items.values():
        # Query keys are public, but none is shown: only their number.
        assert SECRET not in str(value)
        assert isinstance(value, bool | int | float | str)


# --------------------------------------------------------------------------------------------
# Extractors: callables or field names of dicts and beam.Rows
# --------------------------------------------------------------------------------------------


def test_as_extractor():
    assert as_extractor(None, "key_fn") is None
    fn = len
    assert as_extractor(fn, "key_fn") is fn
    field = as_extractor("key", "key_fn")
    assert isinstance(field, FieldExtractor)
    assert field({"key": 3}) == 3
    assert field(beam.Row(key=4)) == 4
    copy = pickle.loads(pickle.dumps(field))
    assert (copy.field, copy.parameter) == (field.field, field.parameter)
    assert copy({"key": 5}) == 5
    with pytest.raises(TypeError, match="key_fn"):
        as_extractor(3, "key_fn")
    with pytest.raises(ValueError, match="key_fn"):
        as_extractor("", "key_fn")


def test_missing_field_names_the_parameter_and_field_never_the_value():
    field = as_extractor("key", "key_fn")
    with pytest.raises(KeyError) as info:
        field({"other": SECRET})
    message = str(info.value)
    assert "key_fn" in message and "'key'" in message and "dict" in message
    assert SECRET not in message
    with pytest.raises(KeyError) as info:
        field(beam.Row(other=SECRET))
    assert SECRET not in str(info.value)


def _dump(pcoll: beam.PCollection, path: Path, label: str = "Dump") -> None:
    """Write the elements of ``pcoll`` to ``path`` (the FnApiRunner runs in this process)."""
    target = str(path)

    def write(actual):
        with open(target, "wb") as fh:
            pickle.dump(list(actual), fh)

    assert_that(pcoll, write, label=label)


def _load(path: Path) -> list:
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _normalise(records: list) -> list:
    """Comparable, ordered form of released records (sketches by their noisy tables)."""
    out = []
    for r in records:
        if hasattr(r, "table") and hasattr(r, "estimate"):
            out.append(("sketch", np.asarray(r.table).tolist()))
        elif isinstance(r, dict):
            out.append(("dict", sorted(r.items())))
        else:
            out.append(("record", r))
    return sorted(out, key=repr)


def _release(make, elements, **extractors) -> list:
    """The records of ``make(label="same", **extractors)`` over ``elements``, in a fresh run."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.pickle"
        p = fnapi()
        out = p | beam.Create(elements) | make(label="same", **extractors)
        _dump(out, path)
        p.run().wait_until_finish()
        return _normalise(_load(path))


USERS = ["u1", "u2", "u1", "u3", "u2", "u4"]

# name: (factory, rows as dicts, extractors by field name, the same by callables on tuples)
FIELD_CASES: dict[str, tuple[Callable[..., DPTransform], list[dict], dict, dict]] = {
    "DPCount": (
        _count,
        [{"user": u} for u in USERS],
        {
            "privacy_unit": PrivacyUnit(id="user", max_contributions=2),
            "selection_key": SELECTION_KEY,
        },
        {
            "privacy_unit": PrivacyUnit(id=lambda e: e[0], max_contributions=2),
            "selection_key": SELECTION_KEY,
        },
    ),
    "DPHistogram": (
        _histogram,
        [{"key": k} for k in KEYS * 50],
        {"key_fn": "key"},
        {"key_fn": lambda e: e[0]},
    ),
    "DPHeavyHitters": (
        _heavy_hitters,
        [{"user": f"u{i}", "key": KEYS[i % len(KEYS)]} for i in range(300)],
        {
            "privacy_unit": PrivacyUnit(id="user"),
            "key_fn": "key",
            "selection_key": SELECTION_KEY,
        },
        {
            "privacy_unit": PrivacyUnit(id=lambda e: e[0]),
            "key_fn": lambda e: e[1],
            "selection_key": SELECTION_KEY,
        },
    ),
    "DPFrequencies": (
        _frequencies,
        [{"key": k, "w": 1 if i % 4 else -1} for i, k in enumerate(KEYS)],
        {"key_fn": "key", "weight_fn": "w"},
        {"key_fn": lambda e: e[0], "weight_fn": lambda e: e[1]},
    ),
    "DPQuantiles": (
        _quantiles,
        [{"v": v, "w": 1} for v in [1, 5, 5, 7, 9, 15]],
        {"value_fn": "v", "weight_fn": "w"},
        {"value_fn": lambda e: e[0], "weight_fn": lambda e: e[1]},
    ),
    "ContinualDPSketch": (
        _continual,
        [{"key": k} for k in KEYS],
        {"key_fn": "key", "time_model": "pane"},
        {"key_fn": lambda e: e[0], "time_model": "pane"},
    ),
    "DPSlidingWindowFrequencies": (
        _sliding,
        [{"pos": i + 1, "key": k} for i, k in enumerate(KEYS * 2)],
        {"position_fn": "pos", "key_fn": "key"},
        {"position_fn": lambda e: e[0], "key_fn": lambda e: e[1]},
    ),
    "DPIntermittentQueries": (
        _intermittent,
        [{"t": i + 1, "key": k} for i, k in enumerate(KEYS)],
        {"time_fn": "t", "key_fn": "key"},
        {"time_fn": lambda e: e[0], "key_fn": lambda e: e[1]},
    ),
}


@pytest.mark.parametrize("name", list(FIELD_CASES))
def test_field_names_read_dicts_and_rows_like_callables_read_tuples(name):
    make, dicts, by_name, by_callable = FIELD_CASES[name]
    tuples = [tuple(d.values()) for d in dicts]
    rows = [beam.Row(**d) for d in dicts]
    expected = _release(make, tuples, **by_callable)
    assert expected, f"{name} released nothing"
    assert _release(make, dicts, **by_name) == expected
    assert _release(make, rows, **by_name) == expected
