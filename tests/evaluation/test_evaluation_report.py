"""`beam-dpsketch evaluate` end to end, the HTML report, and the sketches experiment's cell."""

from __future__ import annotations

import importlib
import re
import sys

import pyarrow as pa
import pytest

from beam_dpsketch.pipelines import cli
from reproduction import cli as eval_cli
from reproduction import report as rep
from reproduction.experiments import sketches
from reproduction.papers import Paper
from reproduction.runner import run_experiment

pytest.importorskip("matplotlib")

MODULE = "beam_dpsketch.pipelines.evaluate"


@pytest.fixture
def main(monkeypatch):
    """The real `beam-dpsketch` entry point with the evaluate subcommand registered."""
    if MODULE not in cli.SUBCOMMAND_MODULES:
        monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", (*cli.SUBCOMMAND_MODULES, MODULE))
    return cli.main


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("evaluation")


def test_evaluate_sketches_smoke_end_to_end(main, smoke_dir, capsys):
    argv = ["evaluate", "sketches", "--smoke", "--workers", "1", "--offline", "--no-progress"]
    assert main([*argv, "--out", str(smoke_dir)]) == 0
    out = capsys.readouterr().out
    assert "sketches: report" in out
    html = (smoke_dir / "sketches" / "index.html").read_text()
    pngs = set(re.findall(r"src='([^']+\.png)'", html))
    assert pngs and all((smoke_dir / "sketches" / p).is_file() for p in pngs)
    assert (smoke_dir / "sketches" / "sketches.parquet").is_file()
    assert (smoke_dir / "sketches" / "sketches.csv").is_file()
    verdicts = re.findall(r"class='verdict (\w+)'>([^<]+)<", html)
    assert len(verdicts) >= 8
    # The non-private sketches must meet their textbook guarantees: every verdict reproduced.
    assert {v for _, v in verdicts} == {"reproduced"}, html
    assert "never underestimates" in html and "What this run does not match" in html


def test_rerun_uses_the_cache(smoke_dir):
    # Runs after the end-to-end test (same module-scoped directory): nothing is recomputed.
    if not (smoke_dir / "sketches" / "sketches.parquet").is_file():
        pytest.skip("needs the end-to-end test's results")
    [exp] = sketches.build_experiments(sketches.MODES["smoke"], "sample")
    result = run_experiment(exp, smoke_dir / "sketches", progress=False)
    assert result.computed == 0 and result.cached == result.table.num_rows > 0


def test_every_paper_has_an_experiment_module():
    papers = {"sketches", "misra-gries", "linear", "lazy", "dpsw", "intermittent"}
    assert set(eval_cli.PAPERS) == papers
    for module in eval_cli.PAPERS.values():
        # Each declares its experiment table, which the one run_paper runs.
        assert isinstance(importlib.import_module(module).PAPER, Paper), module


def test_an_unknown_paper_exits_nonzero_without_a_report(main, capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        main(["evaluate", "future", "--out", str(tmp_path)])
    assert exited.value.code == 2
    assert "invalid choice: 'future'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown paper 'future'"):
        eval_cli.run_evaluation("future", out=tmp_path)
    assert not any(tmp_path.iterdir())  # no fake report


def test_unknown_options_are_rejected(main, capsys):
    assert main(["evaluate", "sketches", "--smoke", "--runner=DirectRunner"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_missing_matplotlib_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="pip install 'matplotlib"):
        rep.pyplot()


def test_claims_need_a_reason_and_html_is_escaped(tmp_path):
    with pytest.raises(ValueError, match="reason"):
        rep.Claim("X1", "c", "s", "m", "differs")
    with pytest.raises(ValueError, match="verdict"):
        rep.Claim("X1", "c", "s", "m", "maybe")
    report = rep.Report(
        title="T <script>",
        paper="p",
        mode="smoke",
        summary="s & t",
        claims=[rep.Claim("X1", "a < b", "src", "1 of 2", "differs", "because <b>")],
        tables=[("tab", pa.table({"w": [1, 2], "err": [0.5, 1234567.0]}))],
        notes=["note"],
        parameters={"n": 10},
    )
    html = rep.write_html(report, tmp_path).read_text()
    assert "<script>" not in html and "T &lt;script&gt;" in html
    assert "because &lt;b&gt;" in html and "0 reproduced, 1 differs" in html


def test_summarize_means_per_group():
    t = pa.table({"w": [1, 1, 2], "e": [1.0, 3.0, 5.0]})
    s = rep.summarize(t, ["w"], ["e"], stats=("mean", "max"))
    assert s.to_pylist() == [
        {"w": 1, "e_mean": 2.0, "e_max": 3.0, "n": 2},
        {"w": 2, "e_mean": 5.0, "e_max": 5.0, "n": 1},
    ]


def test_sketch_cell_invariants():
    params = {"dataset": "zipf", "s": 1.2, "n": 5000, "n_items": 1000, "width": 64, "depth": 5}
    out = sketches.sketch_cell(params, seed=3)
    assert set(out) == set(sketches.METRICS)
    assert out["cms_under"] == 0 and out["mg_over"] == 0 and out["mg_under_d"] == 0
    assert out["mg_d"] <= out["mg_res_bound"] + 1e-9 <= out["mg_bound"] + 1e-9
    assert out["mg_k"] == 160 and out["nominal_bytes"] == 8 * 5 * 64
    # P(Bin(5, 1/4) >= 3) = 0.103515625 exactly.
    assert sketches.cs_tail_bound(5) == pytest.approx(0.103515625)
