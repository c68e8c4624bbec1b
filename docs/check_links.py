"""Check that every link inside the repository resolves: files exist, anchors name a heading.

Two kinds of reference are checked in every tracked (or new, not ignored) file:

* Markdown links ``[text](path#anchor)`` in ``*.md`` files, relative to the file: the path must
  exist, and an anchor must be a heading of the target page (GitHub's slug: lower case,
  punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for repeats) or an explicit
  ``<a id="...">``. Links to other sites are not followed (the build machines have no web).
* Repository paths with an anchor written in prose, docstrings and comments
  (``docs/algorithms.md#mg-e7``), which readers follow by hand.

An entry heading ``### MG-E7 · ...`` must define the anchor of its name in lower case
(``mg-e7``): docstrings cite entries by that anchor, so an anchor that differs from its entry's
name sends readers to the wrong place or nowhere.

Run ``python docs/check_links.py``: it prints each broken reference as ``file:line: message``
and exits 1 when there is one. ``make docs`` runs it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MARKDOWN_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE_LINK = re.compile(r"!\[[^\]\n]*\]\(([^)\s]+)\)")
PROSE_ANCHOR = re.compile(
    r"(?<![\w/.-])((?:docs|benchmarks|reproduction)/(?:[\w-]+/)*[\w-][\w.-]*\.md)#([\w-]+)"
)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
ENTRY_HEADING = re.compile(r"^#{2,6}\s+([A-Z][A-Z0-9]*-[\w-]+) · ")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = ("http://", "https://", "mailto:", "ftp://")


def repository_files(root: Path = ROOT) -> list[Path]:
    """Files git tracks, plus new files it does not ignore (a checkout without git: all)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root,
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for p in root.rglob("*") if p.is_file() and ".venv" not in p.parts)
    return sorted(root / name for name in out.decode().split("\0") if name)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before the ``-N`` suffix of repeats)."""
    text = re.sub(r"<[^>]+>", "", heading)  # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _lines_outside_code(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a Markdown file, skipping fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a Markdown page defines: heading slugs and explicit ``<a id>`` names."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _lines_outside_code(path):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            repeat = seen.get(base, 0)
            seen[base] = repeat + 1
            found.add(base if repeat == 0 else f"{base}-{repeat}")
    return frozenset(found)


def _check_target(source: Path, target: str, base: Path) -> str | None:
    """Why ``target`` (a path with an optional ``#anchor``) does not resolve, else None."""
    path_part, _, anchor = target.partition("#")
    resolved = (base / path_part).resolve() if path_part else source
    if path_part and not resolved.exists():
        return f"no file {path_part}"
    if anchor:
        if resolved.suffix != ".md":
            return None  # anchors into source files are line numbers: not checked
        if anchor not in anchors(resolved):
            shown = path_part or source.name
            return f"no anchor #{anchor} in {shown}"
    return None


def broken_links(root: Path = ROOT) -> list[str]:
    """``file:line: message`` for every reference that does not resolve."""
    problems: list[str] = []
    for path in repository_files(root):
        if path.suffix not in {".md", ".py", ".rst", ".txt", ".toml"} or not path.is_file():
            continue
        relative = path.relative_to(root)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if path.suffix == ".md":
            for number, line in _lines_outside_code(path):
                entry = ENTRY_HEADING.match(line)
                if entry and entry.group(1).lower() not in anchors(path):
                    problems.append(
                        f"{relative}:{number}: entry {entry.group(1)} has no anchor "
                        f"#{entry.group(1).lower()}"
                    )
                for pattern in (MARKDOWN_LINK, IMAGE_LINK):
                    for target in pattern.findall(line):
                        if target.startswith(EXTERNAL):
                            continue
                        why = _check_target(path, target, path.parent)
                        if why:
                            problems.append(f"{relative}:{number}: {why}")
        for number, line in enumerate(text.splitlines(), 1):
            for file_part, anchor in PROSE_ANCHOR.findall(line):
                why = _check_target(path, f"{file_part}#{anchor}", root)
                if why:
                    problems.append(f"{relative}:{number}: {why}")
    return problems


def main() -> int:
    """Print the broken references; exit status 1 when there is one."""
    problems = broken_links()
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken link(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
