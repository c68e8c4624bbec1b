"""The YAML provider's configuration: errors name the key, budgets are shared per pipeline, noise is
secret unless an insecure test key is asked for, and both documented registrations work."""

from __future__ import annotations

import logging

import apache_beam as beam
import pytest
import yaml
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.yaml.yaml_transform import expand_pipeline

import beam_dpsketch.yaml as dps_yaml
from beam_dpsketch.privacy import BudgetExceededError
from beam_dpsketch.yaml import (
    PROVIDERS_FILE,
    ReadNewLines,
    YamlDPCount,
    YamlDPFrequencies,
    YamlDPHeavyHitters,
    YamlDPQuantiles,
)
from tests.collect import DumpToFile

ROWS = [beam.Row(user="u1", item="a", ms=10.0), beam.Row(user="u2", item="b", ms=20.0)]


def rows(p: beam.Pipeline) -> beam.PCollection:
    # One Create per application: each transform below reads its own copy.
    rows.calls = getattr(rows, "calls", 0) + 1
    return p | f"Rows{rows.calls}" >> beam.Create(ROWS)


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: YamlDPCount(), "epsilon"),
        (lambda: YamlDPCount(delta=1e-6), "delta"),
        (lambda: YamlDPCount(epsilon=0), "epsilon"),
        (lambda: YamlDPCount(epsilon=1, delta=2), "delta"),
        (lambda: YamlDPCount(epsilon=1, accountant={"name": "etl"}), "accountant.epsilon"),
        (lambda: YamlDPCount(epsilon=1, accountant={"name": "", "epsilon": 1}), "accountant.name"),
        (lambda: YamlDPCount(epsilon=1, accountant={"nme": "x"}), "accountant"),
        (lambda: YamlDPCount(epsilon=1, privacy_unit={"user": "id"}), "privacy_unit"),
        (
            lambda: YamlDPCount(epsilon=1, privacy_unit={"id": "u", "max_contributions": 0}),
            "privacy_unit",
        ),
        (lambda: YamlDPCount(epsilon=1, windowing={"release_range": "all"}), "windowing"),
        (lambda: YamlDPCount(epsilon=1, windowing={"max_panes_per_window": 0}), "windowing"),
        (lambda: YamlDPCount(epsilon=1, insecure_test_noise_key=-1), "insecure_test_noise_key"),
        (lambda: YamlDPCount(epsilon=1, label=""), "label"),
        (lambda: YamlDPHeavyHitters(key="", epsilon=1), "key"),
        (lambda: YamlDPHeavyHitters(key="item", top=0, epsilon=1), "top"),
        (lambda: YamlDPHeavyHitters(key="item", k=0, epsilon=1), "k"),
        (lambda: YamlDPQuantiles("ms", [], 0, 1, epsilon=1), "quantiles"),
        (lambda: YamlDPQuantiles("ms", [1.5], 0, 1, epsilon=1), "quantiles"),
        (lambda: YamlDPFrequencies("item", query_keys="a", epsilon=1), "query_keys"),
        (lambda: ReadNewLines("/tmp/*.txt", stop=2e9, duration_seconds=5), "stop"),
    ],
)
def test_a_bad_configuration_is_refused_at_construction_naming_its_key(make, key):
    with pytest.raises((TypeError, ValueError)) as info:
        make()
    assert str(info.value).startswith(key)


def test_a_field_missing_from_the_input_schema_names_the_key_and_the_schema():
    p = beam.Pipeline("FnApiRunner")
    with pytest.raises(ValueError, match=r"^key: the input rows have no field 'page'") as info:
        rows(p) | YamlDPHeavyHitters(key="page", epsilon=1, delta=1e-6)
    assert "['item', 'ms', 'user']" in str(info.value)  # the schema: public, no values


def test_a_shared_accountant_is_one_budget_per_pipeline(capsys):
    etl = {"name": "etl", "epsilon": 1.0}
    # Two pipelines built in one process each get their own accountant.
    for _ in range(2):
        p = beam.Pipeline("FnApiRunner")
        first = YamlDPCount(epsilon=0.6, accountant=etl)
        rows(p) | "First" >> first
        assert first.dp_transform.accountant.name == "etl"
    # Within one pipeline the second transform sees the first one's charge.
    second = YamlDPCount(epsilon=0.6, accountant=etl)
    with pytest.raises(BudgetExceededError):
        rows(p) | "Second" >> second
    assert second.dp_transform.accountant is first.dp_transform.accountant
    err = capsys.readouterr().err
    assert "privacy budget exceeded: transform 'Second'" in err
    assert "Privacy accountant 'etl'" in err and "[1] transform 'First'" in err


def test_one_accountant_name_with_two_budgets_is_refused():
    p = beam.Pipeline("FnApiRunner")
    rows(p) | "A" >> YamlDPCount(epsilon=0.1, accountant={"name": "etl", "epsilon": 1.0})
    with pytest.raises(ValueError, match=r"^accountant: 'etl' is declared with two budgets"):
        rows(p) | "B" >> YamlDPCount(epsilon=0.1, accountant={"name": "etl", "epsilon": 2.0})


def test_noise_is_secret_unless_an_insecure_test_key_is_configured(caplog):
    p = beam.Pipeline("FnApiRunner")
    secret = YamlDPCount(epsilon=1)
    rows(p) | "Secret" >> secret
    assert not secret.dp_transform.noise_source.is_insecure
    with caplog.at_level(logging.WARNING):
        seeded = YamlDPCount(epsilon=1, insecure_test_noise_key=3)
        rows(p) | "Seeded" >> seeded
    assert seeded.dp_transform.noise_source.is_insecure
    assert "Seeded uses an INSECURE test noise key" in caplog.text
    # The pipeline option seeds every transform that sets no key of its own.
    q = beam.Pipeline(
        "FnApiRunner",
        options=beam.options.pipeline_options.PipelineOptions(["--insecure_test_noise_key=0"]),
    )
    by_option = YamlDPCount(epsilon=1)
    rows(q) | by_option
    assert by_option.dp_transform.noise_source.is_insecure


def test_the_provider_file_lists_every_yaml_transform():
    (provider,) = yaml.safe_load(PROVIDERS_FILE.read_text())
    assert provider["type"] == "python"
    for name, target in provider["transforms"].items():
        module, _, attr = target.rpartition(".")
        assert module == "beam_dpsketch.yaml"
        cls = getattr(dps_yaml, attr)
        assert issubclass(cls, beam.PTransform), name
    assert set(provider["transforms"]) == {
        "DPHeavyHitters",
        "DPHistogram",
        "DPFrequencies",
        "DPTopKeys",
        "DPQuantiles",
        "DPCount",
        "ContinualDPSketch",
        "DPSlidingWindowFrequencies",
        "DPIntermittentQueries",
        "ReadNewLines",
    }


INLINE = """
pipeline:
  type: chain
  transforms:
    - type: Create
      config:
        elements: [{page: a}, {page: a}, {page: b}]
    - type: DPFrequencies
      name: Views
      config:
        key: page
        query_keys: [a, b, c]
        epsilon: 1000
        insecure_test_noise_key: 0
"""


@pytest.mark.parametrize("registration", ["inline", "include"])
def test_both_documented_registrations_run(registration):
    if registration == "inline":
        providers = [
            {
                "type": "python",
                "config": {},
                "transforms": {"DPFrequencies": "beam_dpsketch.yaml.YamlDPFrequencies"},
            }
        ]
    else:
        providers = [{"include": str(PROVIDERS_FILE)}]
    spec = yaml.safe_load(INLINE)
    spec["providers"] = providers
    with beam.Pipeline("FnApiRunner") as p:
        views = expand_pipeline(p, yaml.safe_dump(spec))
        # At epsilon 1000 the discrete noise rounds to the exact counts.
        got = views | beam.Map(lambda r: (r.key, round(r.estimate)))
        assert_that(got, equal_to([("a", 2), ("b", 1), ("c", 0)]))


def test_element_level_heavy_hitter_rows_carry_their_bounds(tmp_path):
    spec = yaml.safe_load(INLINE)
    spec["providers"] = [{"include": str(PROVIDERS_FILE)}]
    spec["pipeline"]["transforms"][0]["config"]["elements"] = [{"page": "a"}] * 300 + [
        {"page": "b"}
    ] * 200
    spec["pipeline"]["transforms"][1] = {
        "type": "DPHeavyHitters",
        "name": "Top",
        "config": {"key": "page", "epsilon": 1.0, "delta": 1e-6, "insecure_test_noise_key": 0},
    }
    dump = DumpToFile(str(tmp_path / "rows.pkl"))
    with beam.Pipeline("FnApiRunner") as p:
        rows = expand_pipeline(p, yaml.safe_dump(spec))
        assert_that(rows | beam.Map(lambda r: r._asdict()), dump)
    released = dump.load()
    assert {r["key"] for r in released} == {"a", "b"}
    for r in released:
        assert r["lower"] <= r["estimate"] <= r["upper"]
        assert 0.5 < r["confidence"] < 1
