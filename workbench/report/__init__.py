"""Report output: what leaves the box for people to read.

- :mod:`.html` — an executed notebook → one self-contained HTML file (plotly rendered, plotly.js
  inlined once, nothing fetched from the network), and the check that it is;
- :mod:`.verdict` — the verdict JSON document, its contract checked before it is written;
- :mod:`.figures` — plotly figures from plain numbers (accept length before/after, per request,
  over time, the probe's width);
- :mod:`.tables` — small HTML tables for notebook outputs;
- :mod:`.browser` — headless Chromium: the report's DOM after its scripts ran, screenshots;
- :mod:`.files` — atomic writes.

Layering: imports :mod:`workbench.errors` only (and plotly, nbconvert).
"""

from workbench.errors import BrowserError, BrowserNotFound, FigureInputError, ReportError, VerdictSchemaError
from workbench.report.browser import find_chromium, render_dom, screenshot
from workbench.report.html import (PLOTLY_MIMETYPE, check_self_contained, count_plotly_figures, count_plotlyjs, export_html,
                                   redact_notebook)
from workbench.report.verdict import HYPOTHESIS_VERDICTS, validate_verdict, write_verdict_json

__all__ = [
    "ReportError", "VerdictSchemaError", "BrowserNotFound", "BrowserError", "FigureInputError", "export_html", "redact_notebook",
    "check_self_contained", "count_plotlyjs", "count_plotly_figures", "validate_verdict", "write_verdict_json",
    "find_chromium", "render_dom", "screenshot", "PLOTLY_MIMETYPE", "HYPOTHESIS_VERDICTS",
]
