"""Plain tables for a terminal or a pipe: columns padded to their widest cell, the last column
wrapped to the width left (COLUMNS, the terminal's width, else 80) with its lines aligned under
it. Values people type (rule ids, partitions) sit in the first columns and are never cut."""

from __future__ import annotations

import shutil
import textwrap

GAP = "  "
MIN_LAST = 20   # narrower than this, the last column goes under its row, indented


def width() -> int:
    """COLUMNS when set (also when piped), else the terminal's width, else 80."""
    return shutil.get_terminal_size((80, 24)).columns


def fit(headers: list[str], rows: list[list[str]], columns: int | None = None) -> str:
    """`rows` under `headers`, every line at most `columns` wide (unless a fixed cell is wider)."""
    columns = columns or width()
    fixed = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    indent = sum(fixed) + len(GAP) * len(fixed)
    room = columns - indent
    below = room < MIN_LAST
    lines = []
    for n, row in enumerate([headers, *rows]):
        head = GAP.join(str(c).ljust(w) for c, w in zip(row, fixed))
        last = str(row[-1])
        if below:
            lines.append(head.rstrip())
            lines += ["    " + x for x in textwrap.wrap(last, columns - 4) or [""]] if n else []
            continue
        wrapped = textwrap.wrap(last, room, break_on_hyphens=False) or [""]
        lines.append(head + GAP + wrapped[0])
        lines += [" " * indent + x for x in wrapped[1:]]
    if not below:
        lines.insert(1, "-" * min(columns, indent + max(len(x) - indent for x in lines)))
    return "\n".join(x.rstrip() for x in lines) + "\n"
