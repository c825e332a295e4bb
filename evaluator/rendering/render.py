"""Rendering helpers shared by the terminal summaries and the HTML pages: numbers, tables, escaping.

The escaping contract, one for each medium:
- HTML: every value handed to html_table (cells and headers) and to esc() is text and gets
  escaped; a fragment that is already HTML, made by our own code with its data escaped, is
  wrapped in Html(...) and goes in as it is. Text is never escaped twice, and data never
  reaches a page unescaped.
- Terminal (rich): strings printed through rich are markup. Our own styling is written in them
  ("[yellow]...[/yellow]"); every value that comes from the data (task ids, check names, grid
  labels, models, causes, paths) goes through markup() first, so `[x]` in a task id is text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape

MISSING = "–"  # what a number that does not exist (None) is shown as


def pct(value: float | None, digits: int = 1) -> str:
    """A rate as a percentage: 0.1234 -> "12.3%"; None -> "–"."""
    return MISSING if value is None else f"{100 * value:.{digits}f}%"


def interval(pair: Sequence[float] | None) -> str:
    """A 95% interval of rates in whole percent: (0.12, 0.34) -> "12–34%"; None -> "–"."""
    return MISSING if not pair else f"{100 * pair[0]:.0f}–{100 * pair[1]:.0f}%"


def num(value: float | None, digits: int = 3) -> str:
    """A whole number with thousands separators, else `digits` decimals; None -> "–"."""
    if value is None:
        return MISSING
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.{digits}f}"


# --- HTML ----------------------------------------------------------------------------------------


class Html(str):
    """A fragment that is already HTML (its data escaped by its maker): html_table inserts it as it is."""


def esc(value: Any) -> str:
    """Text (None as nothing) made safe for HTML content and attribute values."""
    return escape("" if value is None else str(value), quote=True)


def html_table(headers: Sequence[Any], rows: Iterable[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    """A <table>; the columns whose index is in `numeric` are right-aligned. Cells are text
    (escaped here) or Html fragments (inserted as they are)."""
    head = "".join(f'<th class="n">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
                   for i, h in enumerate(headers))
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            content = cell if isinstance(cell, Html) else esc(cell)
            cells.append(f'<td class="n">{content}</td>' if i in numeric else f"<td>{content}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# --- terminal ------------------------------------------------------------------------------------


def markup(value: Any) -> str:
    """Data (None as nothing) made safe to print through rich: `[model=a]` is text, not a style."""
    return rich_escape("" if value is None else str(value))


def terminal(console: Console | None = None) -> Console:
    """The console to print on: the given one, else stdout; when that is not a terminal (CI logs)
    and COLUMNS is not set, 120 columns, wide enough for the tables and never squeezed to 80."""
    if console is not None:
        return console
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=120)
    return console
