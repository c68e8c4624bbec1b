"""DPSlidingWindowFrequencies states the replace-one relation its guarantee holds for, everywhere.

Count-based mode uses positions from a declared order as the clock: removing a row shifts every
later position, so the only relation the analysis of DPSW-Sketch (Wang, Wang and Chen, KDD 2024,
Lemma 4.1 and Theorem 4.4) supports is replace-one: one element's key substituted, every position
fixed. Time-based mode answers queries up to the last step holding an event, so an added event
can add releases: replace-one again (one event's key substituted, its event time fixed). The
charge, ``explain()``, the transform's ``neighbouring_relation`` and the ``sliding-window`` CLI
(the output's guarantee, ``--explain`` and ``--help``) must say exactly that and never claim add/remove.
"""

from __future__ import annotations

import apache_beam as beam
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPSlidingWindowFrequencies
from beam_dpsketch.transforms.sliding import SlidingLayout

COUNT_RELATION = (
    "replace one element: one element's key substituted, every position fixed (neighbouring "
    "streams have the same length); adding or removing an element is not covered"
)
TIME_RELATION = (
    "replace one event: one event's key substituted, its event time fixed (event times are "
    "public); adding, removing or moving an event is not covered"
)


def transform(mode: str) -> DPSlidingWindowFrequencies:
    return DPSlidingWindowFrequencies(
        20,
        16,
        2,
        PrivacyBudget.approx(1.0, 1e-6),
        release_every=5,
        query_keys=["a"],
        mode=mode,
        origin=0 if mode == "time" else None,
        noise_source=NoiseSource.insecure_for_tests(3),
        label=f"sw-relation-{mode}",
        layout=SlidingLayout(block=10, alpha="1/2"),
    )


@pytest.mark.parametrize(("mode", "relation"), [("count", COUNT_RELATION), ("time", TIME_RELATION)])
def test_charge_and_explain_name_replace_one(mode, relation):
    dp = transform(mode)
    # The transform charges when applied (the pipeline is built, not run).
    _ = beam.Pipeline(runner="FnApiRunner") | beam.Create([(1, "a")]) | dp
    assert dp.neighbouring_relation.startswith(relation)
    assert dp.charge.details["neighbouring_relation"] == dp.neighbouring_relation
    (line,) = [x for x in dp.explain().splitlines() if "neighbouring_relation" in x]
    assert relation in line
    assert "substitution" not in line and "add/remove" not in line


@pytest.fixture
def events_csv(tmp_path):
    rows = "".join(f"{0.5 * i},{'ab'[i % 3 == 0]}\n" for i in range(1, 61))
    path = tmp_path / "events.csv"
    path.write_text("ts,item\n" + rows)
    return str(path)


@pytest.mark.parametrize(
    ("extra", "relation"),
    [([], COUNT_RELATION), (["--time-column", "ts", "--origin", "0"], TIME_RELATION)],
    ids=["count", "time"],
)
def test_cli_prints_the_replace_one_guarantee(events_csv, capsys, extra, relation):
    args = ["sliding-window", "--input", events_csv, "--column", "item", "--window", "20"]
    args += ["--release-every", "10", "--rho", "1", "--query", "a", "--insecure-test-seed", "1"]
    args += ["--explain", *extra]
    assert main(args) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("# DPSW-Sketch over column 'item'")
    assert lines[1].startswith("# guarantee: rho=1-zCDP in total; privacy unit: element; ")
    assert f"neighbouring relation: {relation}" in lines[1]
    assert relation in err  # --explain prints the charge
    assert "add/remove" not in lines[1] + err
    # The number of rows read is a count from the data: it is never printed.
    assert "60 rows" not in out + err


def test_cli_help_names_replace_one(capsys):
    with pytest.raises(SystemExit):
        main(["sliding-window", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "for replace-one neighbours only: one row's key changed" in text
    assert "adding or removing a row is not covered" in text
    assert "substitution" not in text
