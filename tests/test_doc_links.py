"""Links inside the repository resolve: the checker ``docs/check_links.py`` that ``make docs`` runs.

The checker is a script of the documentation, not part of the package, so it is loaded by path.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_checker() -> ModuleType:
    """Import ``docs/check_links.py`` as a module."""
    spec = importlib.util.spec_from_file_location("check_links", ROOT / "docs" / "check_links.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_repository_has_no_broken_links() -> None:
    """Every Markdown link and every ``docs/...md#anchor`` in the repository resolves."""
    assert load_checker().broken_links() == []


def test_checker_finds_missing_files_anchors_and_misnamed_entries(tmp_path: Path) -> None:
    """A missing file, a missing anchor and an entry whose anchor differs are all reported."""
    checker = load_checker()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "algorithms.md").write_text(
        "# Algorithms\n\n"
        '<a id="mg-e1"></a>\n### MG-E1 · Right anchor\n\n'
        '<a id="select-exact"></a>\n### MG-select-exact · Anchor not named after the entry\n\n'
        "```\n[in a code block](nowhere.md)\n```\n"
    )
    (docs / "guide.md").write_text(
        "# Guide\n\n## Two words · here\n\n"
        "[ok](algorithms.md#mg-e1) [ok](#two-words--here) [ok](#guide)\n"
        "[bad file](missing.md) [bad anchor](algorithms.md#mg-e2) [web](https://example.org/#x)\n"
    )
    # Written in two parts so that this file does not hold the broken reference itself.
    broken = "docs/algorithms.md" + "#int-e5"
    (tmp_path / "code.py").write_text(f'"""See docs/algorithms.md#mg-e1 and {broken}."""\n')
    problems = checker.broken_links(tmp_path)
    assert sorted(problems) == [
        "code.py:1: no anchor #int-e5 in docs/algorithms.md",
        "docs/algorithms.md:7: entry MG-select-exact has no anchor #mg-select-exact",
        "docs/guide.md:6: no anchor #mg-e2 in algorithms.md",
        "docs/guide.md:6: no file missing.md",
    ]


def test_slug_follows_github_headings() -> None:
    """Heading anchors as GitHub makes them: lower case, punctuation dropped, spaces to hyphens."""
    slug = load_checker().slug
    assert slug("MG-E7 · The offset n/(k+1) is exact") == "mg-e7--the-offset-nk1-is-exact"
    assert slug("`DPQuantiles`: error") == "dpquantiles-error"
