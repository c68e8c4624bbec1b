"""The Beam YAML step ``DPTopKeys``: top keys of a field with no key list, as schema'd rows."""

from __future__ import annotations

import apache_beam as beam
import pytest
import yaml
from apache_beam.testing.util import assert_that
from apache_beam.yaml.yaml_transform import expand_pipeline
from collect import DumpToFile

from beam_dpsketch.yaml import PROVIDERS_FILE, YamlDPTopKeys

SPEC = """
pipeline:
  type: chain
  transforms:
    - type: Create
      config:
        elements: []
    - type: DPTopKeys
      name: Top
      config:
        key: page
        k: 2
        max_key_bytes: 8
        width: 256
        epsilon: 1.0
        delta: 1.0e-6
        insecure_test_noise_key: 3
"""


def test_top_keys_step_releases_bounded_rows(tmp_path):
    spec = yaml.safe_load(SPEC)
    spec["providers"] = [{"include": str(PROVIDERS_FILE)}]
    elements = [{"page": "/home"}] * 700 + [{"page": "/cart"}] * 400
    elements += [{"page": f"/p{i}"} for i in range(150)]
    spec["pipeline"]["transforms"][0]["config"]["elements"] = elements
    dump = DumpToFile(str(tmp_path / "rows.pkl"))
    with beam.Pipeline("FnApiRunner") as p:
        rows = expand_pipeline(p, yaml.safe_dump(spec))
        assert_that(rows | beam.Map(lambda r: r._asdict()), dump)
    released = dump.load()
    assert [r["key"] for r in sorted(released, key=lambda r: -r["estimate"])] == ["/home", "/cart"]
    for r in released:
        assert r["lower"] <= r["estimate"] <= r["upper"] and r["confidence"] == 0.95


def test_top_keys_step_checks_its_keys_at_construction():
    with pytest.raises(ValueError, match="max_key_bytes"):
        YamlDPTopKeys(key="page", max_key_bytes=0, epsilon=1.0)
    with pytest.raises(ValueError, match="k"):
        YamlDPTopKeys(key="page", k=0, epsilon=1.0)
