"""The paper-reproduction harness sits beside the library, not in it.

``reproduction/`` is a top-level folder of the repository: the installed package neither ships
nor imports it, ``beam-dpsketch evaluate`` finds it in a checkout and says how to get it
elsewhere, and every paper runs through the one :func:`reproduction.papers.run_paper`.
"""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

from beam_dpsketch.pipelines import evaluate
from beam_dpsketch.pipelines.cli import main
from reproduction.papers import PAPERS, Paper, load_paper

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "beam_dpsketch"


def _packaged() -> list[str]:
    """The packages a build of the repository ships, by the rule pyproject.toml declares."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    rule = config["tool"]["setuptools"]["packages"]["find"]
    return sorted(find_packages(where=str(REPO), include=rule["include"]))


def test_the_installed_package_ships_no_harness():
    packages = _packaged()
    assert "beam_dpsketch" in packages and "beam_dpsketch.pipelines" in packages
    assert [p for p in packages if not p.startswith("beam_dpsketch")] == []
    assert [p for p in packages if "evaluation" in p or "reproduction" in p] == []
    assert (REPO / "reproduction" / "papers.py").is_file()


def test_the_library_never_imports_the_harness():
    importers = []
    for path in sorted(LIBRARY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(n.split(".")[0] == evaluate.HARNESS_PACKAGE for n in names):
                importers.append(path.relative_to(REPO).as_posix())
    assert importers == []


def test_harness_root_finds_a_checkout_only():
    assert evaluate.harness_root([REPO]) == REPO


def test_harness_root_is_none_without_the_folder(tmp_path):
    assert evaluate.harness_root([tmp_path]) is None
    # A folder of that name without the harness's command line is not the harness.
    (tmp_path / evaluate.HARNESS_PACKAGE).mkdir()
    assert evaluate.harness_root([tmp_path]) is None


def test_evaluate_without_the_harness_says_how_to_get_it(monkeypatch, capsys):
    monkeypatch.setattr(evaluate, "harness_root", lambda candidates=None: None)
    assert main(["evaluate", "sketches", "--smoke", "--out", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("beam-dpsketch evaluate: error: ")
    assert "clone" in err and "reproduction/" in err and "from its root" in err


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_every_paper_is_an_experiment_table_run_by_run_paper(name):
    paper = load_paper(name)
    assert isinstance(paper, Paper)
    assert set(paper.modes) == {"smoke", "quick", "full"}
    # One entry point: no paper module keeps a run() of its own.
    assert not hasattr(importlib.import_module(PAPERS[name]), "run")


def test_load_paper_names_the_choices():
    with pytest.raises(ValueError, match="choose from"):
        load_paper("future")


def test_paper_refuses_unknown_data():
    with pytest.raises(ValueError, match="data must be among"):
        Paper(modes={}, experiments=list, report=dict, data=("aol",))
