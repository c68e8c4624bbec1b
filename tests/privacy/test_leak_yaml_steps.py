"""The Beam YAML steps (``beam_dpsketch.yaml``) add no channel of their own.

``docs/privacy-model.md`` ("Beam YAML steps"): a step hands on released rows only, registers no
metric (user metrics of any namespace: the comparison covers every one ``result.metrics()``
reports: a step that registers none has none that could differ on neighbouring inputs), and a
failure on a bad record names types and parameters, never the record. Each step runs on the
FnApiRunner with seeded test noise.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_dpsketch.yaml import (
    YamlContinualDPSketch,
    YamlDPCount,
    YamlDPFrequencies,
    YamlDPHeavyHitters,
    YamlDPHistogram,
    YamlDPIntermittentQueries,
    YamlDPQuantiles,
    YamlDPSlidingWindowFrequencies,
)

STEPS = {
    "DPHeavyHitters": lambda: YamlDPHeavyHitters("item", top=3, epsilon=1, delta=1e-6),
    "DPHeavyHitters user": lambda: YamlDPHeavyHitters(
        "item", epsilon=1, delta=1e-6, privacy_unit={"id": "user", "max_contributions": 2}
    ),
    "DPHistogram": lambda: YamlDPHistogram("item", epsilon=1, delta=1e-6),
    "DPFrequencies keys": lambda: YamlDPFrequencies("item", query_keys=["a", "b"], epsilon=1),
    "DPFrequencies sketch": lambda: YamlDPFrequencies("item", width=64, depth=3, epsilon=1),
    "DPQuantiles": lambda: YamlDPQuantiles("ms", [0.5], 0, 100, epsilon=1),
    "DPCount": lambda: YamlDPCount(epsilon=1),
    "ContinualDPSketch": lambda: YamlContinualDPSketch(
        32, 3, 64, ["a", "b"], "item", position="step", release_every=16, epsilon=1, delta=1e-6
    ),
    "DPSlidingWindowFrequencies": lambda: YamlDPSlidingWindowFrequencies(
        16,
        32,
        3,
        8,
        "item",
        position="pos",
        query_keys=["a"],
        preset="theory",
        epsilon=1,
        delta=1e-6,
    ),
    "DPIntermittentQueries": lambda: YamlDPIntermittentQueries(
        32, 3, [[30, ["a"]], [61, ["a", "b"]]], "positions", "item", "pos", epsilon=1
    ),
}


def data(extra: bool) -> list[beam.Row]:
    rows = [
        beam.Row(user=f"u{i % 7}", item="ab"[i % 2], ms=float(i % 50), step=i, pos=i + 1)
        for i in range(60)
    ]
    if extra:
        rows.append(beam.Row(user="u-new", item="new-key", ms=99.0, step=60, pos=61))
    return rows


def user_metrics(step: str, extra: bool) -> dict:
    options = PipelineOptions(["--insecure_test_noise_key=0"])
    p = beam.Pipeline("FnApiRunner", options=options)
    _ = p | beam.Create(data(extra)) | STEPS[step]()
    result = p.run()
    result.wait_until_finish()
    metrics = result.metrics().query()
    return {
        kind: [(m.key.step, m.key.metric.name) for m in found] for kind, found in metrics.items()
    }


@pytest.mark.parametrize("step", list(STEPS))
def test_a_yaml_step_registers_no_metric(step):
    # No metric at all, of any namespace: then none can differ on neighbouring inputs.
    assert user_metrics(step, extra=True) == {
        "counters": [],
        "distributions": [],
        "gauges": [],
        "string_sets": [],
        "bounded_tries": [],
    }


SECRET = "secret-user-5511"


@pytest.mark.parametrize("step", ["DPHeavyHitters", "DPFrequencies keys", "DPQuantiles"])
def test_a_bad_record_fails_without_showing_the_record(step):
    bad = beam.Row(user=SECRET, item=None, ms=None, step=None, pos=None)
    p = beam.Pipeline("FnApiRunner", options=PipelineOptions(["--insecure_test_noise_key=0"]))
    _ = p | beam.Create([*data(False), bad]) | STEPS[step]()
    with pytest.raises(Exception) as info:
        p.run().wait_until_finish()
    assert SECRET not in str(info.value)
