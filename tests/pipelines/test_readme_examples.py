"""Every example in README.md and in the user guide (docs/guide/*.md) runs as written, on the
bundled data.

Each fenced ``bash``, ``sh`` or ``python`` block is extracted and run on its own (a shell block
with ``bash -euo pipefail`` from a scratch folder that links the project's ``.venv``, a Python
block with the project's interpreter), with a timeout. A block is skipped only when the line
right before it says so with a reason::

    <!-- not run by tests: REASON -->

and the test reports that reason. The examples write their files (plots, reports) into the
scratch folder, never into the repository.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Every page that holds examples: the README's quick start and the guide the rest moved into.
DOCUMENTS = [README, *sorted((ROOT / "docs" / "guide").glob("*.md"))]
LANGUAGES = ("bash", "sh", "python")
SKIP = re.compile(r"<!--\s*not run by tests:\s*(?P<reason>.+?)\s*-->")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
TIMEOUT_SECONDS = 600


def readme_blocks(text: str) -> list[tuple[int, str, str, str | None]]:
    """``(line, language, code, skip_reason)`` of every fenced block in ``text``.

    ``line`` is the 1-based line of the opening fence; ``skip_reason`` is the reason of a
    ``<!-- not run by tests: ... -->`` marker on the last non-blank line before it.
    """
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        previous = next((line for line in reversed(lines[:start]) if line.strip()), "")
        marker = SKIP.search(previous)
        lang = opening.group("lang").lower()
        blocks.append((start + 1, lang, "\n".join(body) + "\n", marker and marker["reason"]))
    return blocks


def document_blocks(path: Path) -> list[tuple[str, int, str, str, str | None]]:
    """``(file, line, language, code, skip_reason)`` of the runnable-language blocks of ``path``."""
    name = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    return [(name, *block) for block in readme_blocks(text) if block[1] in LANGUAGES]


BLOCKS = [block for path in DOCUMENTS for block in document_blocks(path)]


def test_the_readme_has_runnable_examples():
    # Guards the extraction itself: the examples are found in every page, and most of them run.
    # The README keeps its quick start (a Python and a shell example); the other examples moved
    # into the guide, so all pages together hold at least as many as the README once did.
    assert len(DOCUMENTS) >= 9
    assert len(BLOCKS) >= 8
    assert sum(reason is None for *_, reason in BLOCKS) >= 10
    assert {"bash", "python"} <= {lang for _, _, lang, _, _ in BLOCKS}
    for path in DOCUMENTS:
        blocks = document_blocks(path)
        # The guide's index is a table of contents; every other page shows its transform in code.
        assert blocks or path.name == "index.md", f"{path.name}: no fenced example found"
        # A page skips at most one block (the two commands, or a guide page's opening fragment).
        assert sum(reason is not None for *_, reason in blocks) <= 1, path.name
    readme = document_blocks(README)
    assert {"bash", "python"} <= {lang for _, _, lang, _, reason in readme if reason is None}


@pytest.mark.parametrize("path", DOCUMENTS, ids=[p.relative_to(ROOT).as_posix() for p in DOCUMENTS])
def test_every_fenced_block_names_its_language(path):
    unnamed = [
        line for line, lang, _, _ in readme_blocks(path.read_text(encoding="utf-8")) if lang == ""
    ]
    assert unnamed == [], f"{path.name} blocks without a language at lines {unnamed}"


@pytest.mark.parametrize(
    ("name", "line", "lang", "code", "reason"),
    BLOCKS,
    ids=[f"{b[0]}:line{b[1]}-{b[2]}" for b in BLOCKS],
)
def test_readme_example_runs(name, line, lang, code, reason, tmp_path):
    if reason:
        pytest.skip(f"{name} line {line}: {reason}")
    # The shell examples run from the repository root, where `make` creates .venv: the
    # scratch folder links it, so they run as written and their files land here.
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if lang == "python":
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", code]
    proc = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    assert proc.returncode == 0, (
        f"{name} line {line} ({lang}) failed with status {proc.returncode}:\n{proc.stderr[-3000:]}"
    )
    assert proc.stdout.strip(), f"{name} line {line} ({lang}) printed nothing"
