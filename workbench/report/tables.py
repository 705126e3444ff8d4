"""Small HTML tables for notebook outputs and reports (``_repr_html_`` of the session's and the
diagnosis's results): rows of ``(name, value)``, evidence entries shown with their source.

Every table here renders the same in JupyterLab and in the exported report (inline styles only, no
stylesheet either side must have): cells left-aligned (JupyterLab's ``.jp-RenderedHTMLCommon`` rule
right-aligns ``td``/``th``), markdown code spans (```x```) shown as ``<code>``, and the table inside a
``wb-table-scroll`` box that scrolls sideways when the table is wider than the page.
"""

from __future__ import annotations

import html
import re
from typing import Any

__all__ = ["html_table", "evidence_cell", "inline_code", "scroll_box", "CELL_STYLE", "WRAP"]

#: Inline style of a prose table cell: left-aligned, top-aligned (JupyterLab right-aligns by default).
CELL_STYLE = "text-align:left;vertical-align:top"

#: For prose cells: long flags and paths break where they must, so a table fits its box (JupyterLab
#: sets ``white-space: pre-wrap`` on ``code``, which keeps a long command line one unbreakable word).
WRAP = "overflow-wrap:anywhere"

# A markdown code span: one or more backticks, the text, the same run of backticks (CommonMark 6.1).
_CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def inline_code(text: Any) -> str:
    """``text`` (any value, through ``str``) as HTML-escaped prose with its markdown code spans
    (```x``` or ````x````) turned into ``<code>x</code>`` (the span's content escaped too); an
    unpaired backtick stays as it is. E.g. ``"fc runs when `a != b`"`` ->
    ``"fc runs when <code>a != b</code>"``."""
    s = str(text)
    out, last = [], 0
    for m in _CODE_SPAN.finditer(s):
        out.append(html.escape(s[last:m.start()]))
        body = m.group(2)
        if body.startswith(" ") and body.endswith(" ") and body.strip():
            body = body[1:-1]  # CommonMark: one space each side is stripped
        out.append(f"<code>{html.escape(body)}</code>")
        last = m.end()
    out.append(html.escape(s[last:]))
    return "".join(out)


def scroll_box(table_html: str) -> str:
    """``table_html`` inside ``<div class="wb-table-scroll">`` that scrolls sideways
    (``overflow-x: auto``, at most the width of its container), so a wide table never widens the page."""
    return f"<div class='wb-table-scroll' style='overflow-x:auto;max-width:100%'>{table_html}</div>"


def evidence_cell(value: Any) -> str:
    """One evidence value as HTML: ``{"value": v, "source": s}`` (the rules' evidence entries) as the
    value with its source beneath, anything else as code."""
    if isinstance(value, dict) and set(value) == {"value", "source"}:
        source = value["source"] or "(source not recorded)"
        return (f"<code>{html.escape(str(value['value']))}</code><br>"
                f"<small style='color:#57606a'>from {html.escape(str(source))}</small>")
    return f"<code>{html.escape(str(value))}</code>"


def html_table(rows: list[tuple[str, Any]]) -> str:
    """``rows`` of ``(name, value)`` as a two-column HTML table (names left-aligned, each value
    through :func:`evidence_cell`) in a :func:`scroll_box`."""
    body = "".join(
        f"<tr><th style='text-align:left;padding-right:1em;vertical-align:top'>{html.escape(str(k))}</th>"
        f"<td style='{CELL_STYLE}'>{evidence_cell(v)}</td></tr>"
        for k, v in rows
    )
    return scroll_box(f"<table>{body}</table>")
