"""Report export: an executed notebook -> one self-contained HTML file.

HTML (``export_html``): plotly figures are rendered to static ``<div>`` + inline-script HTML at export
(nbconvert would otherwise drop their ``application/vnd.plotly.v1+json`` outputs), plotly.js from the
installed ``plotly`` package is inlined exactly once in ``<head>``, and the JupyterLab template's network
scripts (require.js, MathJax, mermaid, the ipywidgets manager) are left out, so the file opens offline
with no request leaving the machine. ``check_self_contained`` verifies this on the final text; the
export refuses (``ReportError``) to write a file that fails it. Math in markdown stays as TeX source
(MathJax would have to come from a CDN).

The verdict JSON is :mod:`workbench.report.verdict`; the headless-Chromium check that plotly.js
drew the figures is :mod:`workbench.report.browser`.
"""

from __future__ import annotations

import copy
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterable, Sequence

from workbench.errors import ReportError
from workbench.redact import REDACTOR, Redactor
from workbench.report.files import atomic_write_text

__all__ = ["ReportError", "export_html", "collapse_progress", "is_progress_line", "redact_notebook", "check_self_contained", "count_plotlyjs", "count_plotly_figures",
           "PLOTLY_MIMETYPE"]

PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"
WIDGET_VIEW_MIMETYPE = "application/vnd.jupyter.widget-view+json"
# The banner at the top of every plotly.js bundle ("/**\n* plotly.js v3.0.1\n...").
_PLOTLYJS_BANNER = re.compile(r"\*\s*plotly\.js v\d+\.\d+")
_NETWORK_URL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)  # http://, https://, //host, ws://
_CSS_NETWORK = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:https?:)?//[^'")\s]+)""", re.IGNORECASE)
_JS_NETWORK_IMPORT = re.compile(r"""\bimport\s*\(\s*['"]((?:https?:)?//[^'"]+)['"]""", re.IGNORECASE)


# --------------------------------------------------------------------------------------------------
# HTML export
# --------------------------------------------------------------------------------------------------

# Extends nbconvert's JupyterLab template; every block that would load something from the network is
# replaced. plotly.js comes in through resources["workbench_plotlyjs"], set only when figures exist.
_TEMPLATE_NAME = "workbench_offline.html.j2"
_TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}
{%- if resources.workbench_plotlyjs %}
<script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: 'local'};</script>
<script type="text/javascript" id="workbench-plotlyjs">{{ resources.workbench_plotlyjs }}</script>
{%- endif -%}
{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block notebook_css -%}
{{ super() }}
<style id="workbench-report-css">
/* the page never scrolls sideways: a wide output scrolls inside its own box */
html, body { overflow-x: hidden; }
.jp-OutputArea-output { max-width: 100%; overflow-x: auto; }
/* after the lab CSS: output tables left-aligned (JupyterLab's :not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td
   right-aligns them; same specificity, later wins); a cell's own inline style (numbers) still wins */
.jp-RenderedHTMLCommon table { margin-left: 0; }
.jp-OutputArea-output.jp-RenderedHTMLCommon td, .jp-OutputArea-output.jp-RenderedHTMLCommon th { text-align: left; vertical-align: top; }
.wb-table-scroll { overflow-x: auto; max-width: 100%; }
/* a progress bar's final state: one small grey line, not the stderr style */
.wb-progress { color: #57606a; font-size: 0.85em; font-family: var(--jp-code-font-family, monospace); margin: 0; }
</style>
{%- endblock notebook_css -%}
"""


def _outputs(nb: Any) -> Iterable[Any]:
    for cell in nb.cells:
        if cell.cell_type == "code":
            yield from cell.get("outputs", [])


def _render_plotly_outputs(nb: Any) -> int:
    """Replace every plotly mime bundle by static HTML; drop plotly.js injections. Returns figure count."""
    import plotly.io as pio

    figures = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data")
            if data is None:
                kept.append(output)
                continue
            if PLOTLY_MIMETYPE in data:
                try:
                    html = pio.to_html(
                        data[PLOTLY_MIMETYPE],
                        include_plotlyjs=False,
                        full_html=False,
                        validate=False,
                        config={"responsive": True},
                    )
                except (ValueError, TypeError) as exc:
                    raise ReportError(f"cannot render a plotly figure output of cell {cell.get('id', '?')}: {exc}") from exc
                output["data"] = {"text/html": html, "text/plain": data.get("text/plain", "<plotly figure>")}
                figures += 1
            elif isinstance(data.get("text/html"), str) and _PLOTLYJS_BANNER.search(data["text/html"]):
                # The "notebook" renderer's one-off plotly.js injection: the template inlines it once instead.
                continue
            kept.append(output)
        cell["outputs"] = kept
    return figures


# A tqdm status line (tqdm.std.tqdm.format_meter): "desc: 45%|████▌     | 9/20 [00:03<00:04,  2.41req/s, x]"
# with a known total, "desc: 9req [00:03, 2.41req/s]" without; the rate may be "?it/s" or "1.5s/it".
_TQDM_LINE = re.compile(
    r"^\s*(?:[^\n]*?:\s*)?(?:\d{1,3}%\|[^|\n]*\|\s*)?\d+(?:\.\d+)?[kMGTP]?(?:/\d+(?:\.\d+)?[kMGTP]?)?"
    r"(?:[A-Za-z_ ]*)?\s*\[(?:\d+:)?\d+:\d+(?:<(?:(?:\d+:)?\d+:\d+|\?))?,\s*"
    r"(?:\?|\d+(?:\.\d+)?[kMGTP]?)(?:[A-Za-z_]+/s|s/[A-Za-z_]+)[^\]\n]*\]\s*$"
)


#: A launch's start-up progress line (``workbench.session.startup_wait.PROGRESS_MARK``, which
#: this layer cannot import; a test keeps the two equal): ``[start-up] fix: loading weights: ...``.
START_UP_MARK = "[start-up] "


def is_progress_line(line: str) -> bool:
    """Whether ``line`` (one line, no newline) is a tqdm status line (``tqdm.std.tqdm.format_meter``:
    ``"desc: 45%|████▌     | 9/20 [00:03<00:04,  2.41req/s]"`` or, with no total,
    ``"desc: 9req [00:03, 2.41req/s]"``), or a launch's start-up progress line (:data:`START_UP_MARK`)."""
    return bool(_TQDM_LINE.match(line)) or line.startswith(START_UP_MARK)


def _progress_key(line: str) -> str:
    """The bar a status line belongs to: its description (the text before ``": "`` and the count);
    for a start-up line, the launch it is about (``[start-up] fix``)."""
    if line.startswith(START_UP_MARK):
        return line.split(": ", 1)[0]
    head = re.split(r"\s*\d{1,3}%\||\s*\d+(?:\.\d+)?[kMGTP]?(?:/\d+)?[A-Za-z_ ]*\[", line.strip(), maxsplit=1)[0]
    return head.rstrip(": ").strip()


def collapse_progress(nb: Any) -> int:
    """Replace the progress-bar redraws in the notebook's stderr stream outputs by one small grey line
    per bar with its final state (``<pre class="wb-progress">``, a ``text/html`` display output), in
    place; the other stderr lines stay a stderr stream (a real warning still reads as one).

    A stream's text is split into lines at ``\\n``; within a line the text after the last ``\\r`` is
    what a terminal shows (tqdm redraws with ``\\r``). A line is a progress line when
    :func:`is_progress_line` says so; consecutive updates of one bar (same description) keep the last.
    Returns the number of progress lines written (one per bar)."""
    import nbformat

    written = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for output in cell.get("outputs", []):
            if output.get("output_type") != "stream" or output.get("name") != "stderr":
                outputs.append(output)
                continue
            text = output.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            pieces: list[tuple[str, str]] = []  # ("progress", key|line) or ("text", line)
            bars: dict[str, str] = {}
            for raw in text.split("\n"):
                shown = raw.rstrip("\r").rsplit("\r", 1)[-1]
                if is_progress_line(shown):
                    key = _progress_key(shown)
                    if key not in bars:
                        pieces.append(("progress", key))
                    bars[key] = shown.strip()
                elif shown.strip():
                    pieces.append(("text", shown))
            if not bars:
                outputs.append(output)
                continue
            plain: list[str] = []
            for kind, value in pieces + [("end", "")]:
                if kind != "text" and plain:
                    outputs.append(nbformat.v4.new_output("stream", name="stderr", text="\n".join(plain) + "\n"))
                    plain = []
                if kind == "text":
                    plain.append(value)
                elif kind == "progress":
                    final = bars[value]
                    outputs.append(nbformat.v4.new_output(
                        "display_data",
                        data={"text/html": f"<pre class='wb-progress'>{_escape(final)}</pre>", "text/plain": final},
                        metadata={"workbench": {"progress": True}}))
                    written += 1
        cell["outputs"] = outputs
    return written


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def _degrade_widgets(nb: Any) -> int:
    """Drop widget views (they need a CDN widget manager); keep their text/plain repr. Returns count."""
    count = 0
    for output in _outputs(nb):
        data = output.get("data")
        if data and WIDGET_VIEW_MIMETYPE in data:
            del data[WIDGET_VIEW_MIMETYPE]
            data.setdefault("text/plain", "[interactive widget: not rendered in the static report]")
            count += 1
    nb.metadata.pop("widgets", None)
    return count


def _papermill_parameters_to_markdown(nb: Any) -> None:
    """Turn papermill's injected-parameters code cell into a short markdown cell listing the values."""
    import nbformat

    for index, cell in enumerate(nb.cells):
        if "injected-parameters" not in cell.get("metadata", {}).get("tags", []):
            continue
        lines = [line for line in cell.source.splitlines() if line.strip() != "# Parameters"]
        body = "\n".join(lines).strip()
        fence = "````" if "```" in body else "```"
        md = nbformat.v4.new_markdown_cell(
            "**Parameters of this run** (injected by papermill; they override the defaults above)\n\n"
            f"{fence}python\n{body}\n{fence}"
        )
        md.metadata["tags"] = ["injected-parameters"]
        nb.cells[index] = md


def export_html(
    notebook_path: str | os.PathLike[str],
    html_path: str | os.PathLike[str],
    *,
    title: str | None = None,
    hide_input_tags: Sequence[str] = ("hide-input",),
    remove_cell_tags: Sequence[str] = ("remove-cell",),
    summarize_parameters: bool = True,
    require_executed: bool = True,
    redactor: Redactor | None = None,
) -> Path:
    """Export an executed notebook (e.g. a papermill output) to one self-contained HTML file.

    Plotly outputs become static HTML driven by a single inlined copy of plotly.js (from the installed
    ``plotly`` package); ipywidgets outputs degrade to their text repr; cells tagged with one of
    ``hide_input_tags`` show only their outputs, cells tagged with ``remove_cell_tags`` are dropped;
    with ``summarize_parameters`` papermill's injected-parameters cell becomes a markdown cell listing
    the run's parameters. The file is written atomically.

    Args:
        notebook_path: the executed ``.ipynb``.
        html_path: where to write the HTML (parent directories are created).
        title: the HTML ``<title>``; default: the notebook's ``metadata.title`` or file stem.
        require_executed: refuse a notebook none of whose code cells has run.
        redactor: redacts every secret in the HTML (:mod:`workbench.redact`; default the
            process-wide one); the inlined plotly.js is left as shipped.

    Returns:
        ``html_path`` as a ``Path``.

    Raises:
        ReportError: the notebook cannot be read, has not been executed, a figure cannot be rendered,
            or the HTML fails :func:`check_self_contained` (nothing is written then).
    """
    import jinja2
    import nbformat
    import plotly.offline
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    notebook_path = Path(notebook_path)
    try:
        nb = nbformat.read(notebook_path, as_version=4)
    except (OSError, ValueError, nbformat.reader.NotJSONError) as exc:
        raise ReportError(f"cannot read notebook {notebook_path}: {exc}") from exc

    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    if require_executed and code_cells and not any(c.get("execution_count") or c.get("outputs") for c in code_cells):
        raise ReportError(
            f"{notebook_path} has not been executed (no code cell has an execution count or output); "
            "run it first, e.g. with papermill"
        )

    nb = copy.deepcopy(nb)
    figures = _render_plotly_outputs(nb)
    _degrade_widgets(nb)
    collapse_progress(nb)
    if summarize_parameters:
        _papermill_parameters_to_markdown(nb)
    if title is not None:
        nb.metadata["title"] = title

    exporter = HTMLExporter(
        template_name="lab",
        template_file=_TEMPLATE_NAME,
        extra_loaders=[jinja2.DictLoader({_TEMPLATE_NAME: _TEMPLATE})],
    )
    tag_remover = TagRemovePreprocessor(
        remove_input_tags=set(hide_input_tags), remove_cell_tags=set(remove_cell_tags), enabled=True
    )
    exporter.register_preprocessor(tag_remover, enabled=True)
    resources: dict[str, Any] = {"metadata": {"name": notebook_path.stem}}
    if figures:
        resources["workbench_plotlyjs"] = plotly.offline.get_plotlyjs()
    try:
        html, _ = exporter.from_notebook_node(nb, resources=resources)
    except (jinja2.TemplateError, ValueError, KeyError) as exc:
        raise ReportError(f"nbconvert failed on {notebook_path}: {exc}") from exc

    problems = check_self_contained(html)
    if problems:
        raise ReportError(f"the HTML export of {notebook_path} is not self-contained: " + "; ".join(problems))
    return atomic_write_text(Path(html_path), _redact_html(html, resources.get("workbench_plotlyjs"), redactor))


_CODE_BLOCK = re.compile(r"(<script\b[^>]*>.*?</script\s*>|<style\b[^>]*>.*?</style\s*>)", re.S | re.I)


def _redact_html(html: str, plotlyjs: str | None, redactor: Redactor | None) -> str:
    """``html`` with every secret redacted (:mod:`workbench.redact`): the text with every rule; the
    ``<script>`` and ``<style>`` bodies (figure data, the template's code) with the learned values
    and token shapes only (a rule such as ``NAME=value`` would rewrite code); the inlined plotly.js
    byte for byte as shipped (library code, not the run's text)."""
    r = redactor or REDACTOR
    parts = _CODE_BLOCK.split(html)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(r.text(part))
        elif plotlyjs and plotlyjs in part:
            head, _, tail = part.partition(plotlyjs)
            out.append(r.values_text(head) + plotlyjs + r.values_text(tail))
        else:
            out.append(r.values_text(part))
    return "".join(out)


def redact_notebook(notebook_path: str | os.PathLike[str], *, redactor: Redactor | None = None) -> bool:
    """Rewrite an (executed) notebook in place, atomically, with every secret redacted in its cell
    sources and outputs (stream text, ``text/*`` and JSON display data, error names, values and
    tracebacks, papermill's injected parameters) and its metadata (:mod:`workbench.redact`:
    ``redactor`` default the process-wide one). Returns whether anything changed (if not, the file
    is left untouched). Raises :class:`ReportError` when it cannot be read."""
    import nbformat

    path = Path(notebook_path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"cannot read notebook {path}: {exc}") from exc
    cleaned = (redactor or REDACTOR).obj(raw)
    if cleaned == raw:
        return False
    nbformat.validate(nbformat.from_dict(cleaned))  # still a notebook
    atomic_write_text(path, json.dumps(cleaned, indent=1, ensure_ascii=False) + "\n")
    return True


class _HTMLScan(HTMLParser):
    """Collects what check_self_contained needs: external references, script bodies, figure divs."""

    _SRC_TAGS = {"img", "iframe", "audio", "video", "source", "embed", "track", "input"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.script_bodies: list[str] = []
        self.style_bodies: list[str] = []
        self.figure_divs = 0
        self.widget_views = 0
        self._in: str | None = None
        self._buffer: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {k.lower(): (v or "") for k, v in attrs}
        if tag == "script":
            src = attr.get("src")
            if src is not None and "src" in attr:
                where = "a network address" if _NETWORK_URL.match(src) else "a separate file"
                self.problems.append(f'<script src="{src}"> loads {where}')
            if attr.get("type", "") == WIDGET_VIEW_MIMETYPE:
                self.widget_views += 1
            self._in, self._buffer = "script", []
        elif tag == "style":
            self._in, self._buffer = "style", []
        elif tag == "link":
            href = attr.get("href", "")
            if href and _NETWORK_URL.match(href):
                self.problems.append(f'<link rel="{attr.get("rel", "")}" href="{href}"> loads a network address')
        elif tag in self._SRC_TAGS:
            src = attr.get("src", "")
            if src and _NETWORK_URL.match(src):
                self.problems.append(f'<{tag} src="{src}"> loads a network address')
        if tag == "div" and "plotly-graph-div" in attr.get("class", "").split():
            self.figure_divs += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag in ("script", "style"):
            self.handle_endtag(tag)

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self._buffer.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._in == tag:
            body = "".join(self._buffer)
            (self.script_bodies if tag == "script" else self.style_bodies).append(body)
            self._in, self._buffer = None, []


def _scan(html_text: str) -> _HTMLScan:
    scan = _HTMLScan()
    scan.feed(html_text)
    scan.close()
    return scan


def count_plotlyjs(html_text: str) -> int:
    """Number of plotly.js bundles inlined in ``<script>`` elements of ``html_text``."""
    return sum(len(_PLOTLYJS_BANNER.findall(body)) for body in _scan(html_text).script_bodies)


def count_plotly_figures(html_text: str) -> int:
    """Number of plotly figure containers (``<div class="plotly-graph-div">``) in ``html_text``."""
    return _scan(html_text).figure_divs


def check_self_contained(html_text: str) -> list[str]:
    """Problems that would stop ``html_text`` from rendering offline as one file; ``[]`` when none.

    Checks: no ``<script src=...>`` at all (network or separate file), no ``<link>`` / ``<img>`` / ... to
    a network address, no CSS ``url(//...)`` / ``@import`` or JS ``import("//...")`` of a network
    address, plotly.js inlined exactly once when the page has plotly figures (at most once otherwise),
    no plotly figure call without plotly.js, and no ipywidgets view left (it would need a CDN widget
    manager and render as a broken widget).
    """
    scan = _scan(html_text)
    problems = list(scan.problems)
    for body in scan.style_bodies:
        for url in _CSS_NETWORK.findall(body):
            problems.append(f"CSS loads a network address: {url}")
    bundles = 0
    plots_called = False
    for body in scan.script_bodies:
        found = len(_PLOTLYJS_BANNER.findall(body))
        bundles += found
        if not found:
            for url in _JS_NETWORK_IMPORT.findall(body):
                problems.append(f"script imports a network address: {url}")
            plots_called = plots_called or "Plotly.newPlot" in body
    if scan.figure_divs and bundles != 1:
        problems.append(f"{scan.figure_divs} plotly figure(s) but plotly.js is inlined {bundles} times (expected 1)")
    elif not scan.figure_divs and bundles > 1:
        problems.append(f"plotly.js is inlined {bundles} times (expected at most 1)")
    if plots_called and not bundles and not scan.figure_divs:
        problems.append("a script calls Plotly.newPlot but plotly.js is not inlined")
    if scan.widget_views:
        problems.append(f"{scan.widget_views} ipywidgets view(s) left in the HTML (they need a CDN widget manager)")
    return problems



