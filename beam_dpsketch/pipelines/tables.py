"""How the command line shows keys and records: keys as JSON values, and aligned text tables
in which a key from the data prints as text, never as a command to the terminal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["format_table", "jsonable_key", "terminal_safe"]


def jsonable_key(key: Any) -> Any:
    """A key as JSON: str and int as they are, bytes decoded as UTF-8 (escaped if invalid),
    tuples as lists."""
    if isinstance(key, bytes):
        return key.decode("utf-8", "backslashreplace")
    if isinstance(key, tuple):
        return [jsonable_key(k) for k in key]
    return key


# Characters a terminal may act on rather than show: C0 and C1 controls (ESC starts the
# sequences that recolour, move the cursor or retitle the window), DEL, line and paragraph
# separators, and the bidirectional overrides that reorder what is shown.
_UNSAFE_FOR_TERMINAL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on shown as a Python escape
    (``"\\x1b"``, ``"\\n"``, ``"\\u202e"``), so that keys from the data print as text."""
    return _UNSAFE_FOR_TERMINAL.sub(lambda m: repr(m.group())[1:-1], text)


def _cell(value: Any) -> str:
    if value is None:
        # A release that states no value here (an error bound it does not give).
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bytes):
        return terminal_safe(value.decode("utf-8", "backslashreplace"))
    return terminal_safe(str(value))


def format_table(
    records: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    headers: Sequence[str] | None = None,
) -> str:
    """Records as an aligned text table (numbers right-aligned), one line per record.

    Cells and headers pass through :func:`terminal_safe`: a key holding terminal control
    sequences prints as escaped text, never as a command to the terminal.
    """
    headers = [terminal_safe(h) for h in (headers or columns)]
    rows = [[_cell(r.get(c, "")) for c in columns] for r in records]
    numeric = [
        bool(records) and all(isinstance(r.get(c), int | float) for r in records) for c in columns
    ]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(cells, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    return "\n".join(out)
