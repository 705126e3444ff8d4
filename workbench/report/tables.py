"""Small HTML tables for notebook outputs and reports (``_repr_html_`` of the session's and the
diagnosis's results): rows of ``(name, value)``, evidence entries shown with their source."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["html_table", "evidence_cell"]


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
    through :func:`evidence_cell`)."""
    body = "".join(
        f"<tr><th style='text-align:left;padding-right:1em;vertical-align:top'>{html.escape(str(k))}</th>"
        f"<td style='text-align:left'>{evidence_cell(v)}</td></tr>"
        for k, v in rows
    )
    return f"<table>{body}</table>"
