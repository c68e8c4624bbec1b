"""The repeated-release YAML steps (``ContinualDPSketch``, ``DPSlidingWindowFrequencies``,
``DPIntermittentQueries``) release exactly what the Python API releases under the same seeded
test noise, as rows, when Beam YAML builds them from a pipeline file's configuration."""

from __future__ import annotations

import apache_beam as beam
import pytest
import yaml
from apache_beam.yaml.yaml_transform import expand_pipeline

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import (
    ContinualDPSketch,
    DPIntermittentQueries,
    DPSlidingWindowFrequencies,
)
from beam_dpsketch.transforms.sliding import SlidingLayout
from beam_dpsketch.yaml import PROVIDERS_FILE, YamlContinualDPSketch
from tests.collect import DumpToFile

KEYS = "aabacabdaa"
# ``step``: 0-based time steps (the continual element model); ``pos``: 1-based positions.
ELEMENTS = [{"step": i, "pos": i + 1, "item": KEYS[i % len(KEYS)]} for i in range(60)]

STEPS = {
    "ContinualDPSketch": {
        "config": {
            "width": 64,
            "depth": 3,
            "horizon": 60,
            "query_keys": ["a", "b"],
            "key": "item",
            "position": "step",
            "release_every": 20,
            "epsilon": 1.0,
            "delta": 1e-6,
        },
        "python": lambda source: ContinualDPSketch(
            64,
            3,
            60,
            PrivacyBudget.approx(1.0, 1e-6),
            query_keys=["a", "b"],
            release_every=20,
            noise_source=source,
            label="Step",
        ),
        "pairs": True,
        "row": lambda r: (r.step, r.key, r.estimate),
        "record": lambda r: (r.step, r.key, float(r.estimate)),
    },
    "DPSlidingWindowFrequencies": {
        "config": {
            "window": 20,
            "width": 64,
            "depth": 3,
            "release_every": 10,
            "key": "item",
            "position": "pos",
            "query_keys": ["a", "b"],
            "preset": "theory",
            "epsilon": 1.0,
            "delta": 1e-6,
        },
        "python": lambda source: DPSlidingWindowFrequencies(
            20,
            64,
            3,
            PrivacyBudget.approx(1.0, 1e-6),
            release_every=10,
            key_fn="item",
            position_fn="pos",
            query_keys=["a", "b"],
            layout=SlidingLayout(preset="theory"),
            noise_source=source,
            label="Step",
        ),
        "pairs": False,
        "row": lambda r: (r.time, r.key, r.estimate),
        "record": lambda r: (float(r[0]), r[1], float(r[2])),
    },
    "DPIntermittentQueries": {
        "config": {
            "width": 64,
            "depth": 3,
            "queries": [[20, ["a", "b"]], [50, ["a"]]],
            "clock": "positions",
            "key": "item",
            "time": "pos",
            "epsilon": 1.0,
        },
        "python": lambda source: DPIntermittentQueries(
            64,
            3,
            PrivacyBudget.pure(1.0),
            queries=[(20, ["a", "b"]), (50, ["a"])],
            clock="positions",
            key_fn="item",
            time_fn="pos",
            noise_source=source,
            label="Step",
        ),
        "pairs": False,
        "row": lambda r: (r.time, r.key, r.estimate),
        "record": lambda r: (float(r[0]), r[1], float(r[2])),
    },
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_yaml_step_releases_the_python_api_records(step, tmp_path):
    case = STEPS[step]
    spec = {
        "providers": [{"include": str(PROVIDERS_FILE)}],
        "pipeline": {
            "type": "chain",
            "transforms": [
                {"type": "Create", "config": {"elements": ELEMENTS}},
                {
                    "type": step,
                    "name": "Step",
                    "config": {**case["config"], "insecure_test_noise_key": 0},
                },
            ],
        },
    }
    from_yaml = DumpToFile(str(tmp_path / "yaml.pkl"))
    with beam.Pipeline("FnApiRunner") as p:
        rows = expand_pipeline(p, yaml.safe_dump(spec))
        beam.testing.util.assert_that(rows | beam.Map(case["row"]), from_yaml)

    from_python = DumpToFile(str(tmp_path / "python.pkl"))
    with beam.Pipeline("FnApiRunner") as p:
        data = p | beam.Create([beam.Row(**e) for e in ELEMENTS])
        if case["pairs"]:
            data = data | beam.Map(lambda r: (r.step, r.item))
        released = data | case["python"](NoiseSource.insecure_for_tests(0))
        beam.testing.util.assert_that(released | beam.Map(case["record"]), from_python)

    expected = sorted(from_python.load())
    assert len(expected) >= 3
    assert sorted(from_yaml.load()) == expected


def test_the_continual_step_takes_its_contribution_bound_from_the_privacy_unit():
    rows = [beam.Row(user=f"u{i % 5}", item="ab"[i % 2]) for i in range(40)]
    unit = {"id": "user", "max_contributions": 8}
    config = {"width": 32, "depth": 3, "horizon": 1, "query_keys": ["a"], "key": "item"}
    p = beam.Pipeline("FnApiRunner")
    pane = YamlContinualDPSketch(
        **config, time_model="pane", privacy_unit=unit, epsilon=1.0, delta=1e-6
    )
    _ = p | "Pane" >> beam.Create(rows) | "PaneStep" >> pane
    assert pane.dp_transform.charge is not None
    assert "8" in pane.explain()  # the declared bound, a public parameter
    # The element model has one arrival per step: a bound is refused, naming the key.
    element = YamlContinualDPSketch(
        **config, position="item", privacy_unit=unit, epsilon=1.0, delta=1e-6
    )
    with pytest.raises(ValueError, match="^privacy_unit: max_contributions applies to the pane"):
        _ = p | "Element" >> beam.Create(rows) | "ElementStep" >> element
