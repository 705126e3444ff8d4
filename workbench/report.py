"""Report export: an executed notebook -> one self-contained HTML file, and the verdict JSON document.

HTML (``export_html``): plotly figures are rendered to static ``<div>`` + inline-script HTML at export
(nbconvert would otherwise drop their ``application/vnd.plotly.v1+json`` outputs), plotly.js from the
installed ``plotly`` package is inlined exactly once in ``<head>``, and the JupyterLab template's network
scripts (require.js, MathJax, mermaid, the ipywidgets manager) are left out, so the file opens offline
with no request leaving the machine. ``check_self_contained`` verifies this on the final text; the
export refuses (``ReportError``) to write a file that fails it. Math in markdown stays as TeX source
(MathJax would have to come from a CDN).

Verdict (``write_verdict_json``): validates the contract of ``reports/diagnose_acceptance.json``
(DESIGN.md, "Contracts") and writes it atomically.

Browser check (``render_dom`` / ``screenshot``): runs a headless Chromium on a report so a test (or a
user) can see that plotly.js actually drew the figures (``class="main-svg"`` only exists after it ran).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import enum
import json
import math
import numbers
import os
import re
import shutil
import signal
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

__all__ = [
    "ReportError",
    "VerdictSchemaError",
    "BrowserNotFound",
    "BrowserError",
    "export_html",
    "check_self_contained",
    "count_plotlyjs",
    "count_plotly_figures",
    "validate_verdict",
    "write_verdict_json",
    "find_chromium",
    "render_dom",
    "screenshot",
    "PLOTLY_MIMETYPE",
    "HYPOTHESIS_VERDICTS",
]

PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"
WIDGET_VIEW_MIMETYPE = "application/vnd.jupyter.widget-view+json"
HYPOTHESIS_VERDICTS = ("confirmed", "refuted", "inconclusive")

# The banner at the top of every plotly.js bundle ("/**\n* plotly.js v3.0.1\n...").
_PLOTLYJS_BANNER = re.compile(r"\*\s*plotly\.js v\d+\.\d+")
_NETWORK_URL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)  # http://, https://, //host, ws://
_CSS_NETWORK = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:https?:)?//[^'")\s]+)""", re.IGNORECASE)
_JS_NETWORK_IMPORT = re.compile(r"""\bimport\s*\(\s*['"]((?:https?:)?//[^'"]+)['"]""", re.IGNORECASE)


class ReportError(RuntimeError):
    """The report could not be exported, or the exported HTML would not be self-contained."""


class VerdictSchemaError(ValueError):
    """The verdict document misses a required key or holds a value of the wrong type.

    Attributes:
        path: the first offending key path, e.g. ``"hypotheses[1].verdict"``.
        problems: every ``(path, message)`` found.
    """

    def __init__(self, problems: Sequence[tuple[str, str]]):
        self.problems = list(problems)
        self.path = self.problems[0][0] if self.problems else ""
        super().__init__("invalid verdict document: " + "; ".join(f"{p}: {m}" for p, m in self.problems))


class BrowserNotFound(ReportError):
    """No Chromium / Chrome binary on this machine (install the Debian package ``chromium``)."""


class BrowserError(ReportError):
    """Chromium ran but failed or timed out; ``stderr`` holds its last output."""

    def __init__(self, message: str, stderr: str = ""):
        self.stderr = stderr
        super().__init__(message + (f"\n--- chromium stderr (tail) ---\n{stderr[-3000:]}" if stderr else ""))


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


def _atomic_write_text(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def export_html(
    notebook_path: str | os.PathLike[str],
    html_path: str | os.PathLike[str],
    *,
    title: str | None = None,
    hide_input_tags: Sequence[str] = ("hide-input",),
    remove_cell_tags: Sequence[str] = ("remove-cell",),
    summarize_parameters: bool = True,
    require_executed: bool = True,
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
    return _atomic_write_text(Path(html_path), html)


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


# --------------------------------------------------------------------------------------------------
# Verdict JSON
# --------------------------------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    """JSON fallback: datetimes (ISO 8601), timedeltas (seconds), numpy scalars/arrays, paths, enums,
    sets/tuples, dataclasses and objects with ``to_dict()``."""
    if isinstance(obj, (_dt.datetime, _dt.date, _dt.time)):
        return obj.isoformat()
    if isinstance(obj, _dt.timedelta):
        return obj.total_seconds()
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if callable(getattr(obj, "to_dict", None)):
        return obj.to_dict()
    module = type(obj).__module__
    if module == "numpy" or module.startswith("numpy."):
        if hasattr(obj, "tolist"):
            return obj.tolist()  # ndarray and numpy scalars (int64, float32, bool_, ...)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def _to_plain(verdict: Any) -> Any:
    try:
        return json.loads(json.dumps(verdict, default=_json_default, allow_nan=False))
    except ValueError as exc:  # NaN / inf
        raise VerdictSchemaError([("", f"holds a non-finite number (NaN / inf), which JSON cannot carry: {exc}")]) from exc
    except TypeError as exc:
        raise VerdictSchemaError([("", str(exc))]) from exc


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# key path -> (type predicate, type description, None allowed)
_REQUIRED: list[tuple[str, Any, str, bool]] = [
    ("root_cause.rule", lambda v: isinstance(v, str) and v != "", "a non-empty string (a rule id)", True),
    ("acceptance.before.accept_length", _is_number, "a number (tokens / verify step)", True),
    ("acceptance.after.accept_length", _is_number, "a number (tokens / verify step)", True),
    ("probe.observed_hidden_size", _is_int, "an integer (hidden units)", True),
    ("probe.expected_hidden_size", _is_int, "an integer (hidden units)", True),
    ("fix.launch_command", lambda v: isinstance(v, str) and v != "", "a non-empty string", True),
    ("restarts", lambda v: _is_int(v) and v >= 0, "a non-negative integer", False),
    ("duration_s", lambda v: _is_number(v) and v >= 0, "a non-negative number (seconds)", False),
]


def _lookup(doc: Any, dotted: str, problems: list[tuple[str, str]]) -> tuple[bool, Any]:
    node = doc
    walked: list[str] = []
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            where = ".".join(walked) or "(document)"
            problems.append((where, f"must be an object holding {part!r}, got {type(node).__name__}"))
            return False, None
        if part not in node:
            problems.append((".".join(walked + [part]), "missing"))
            return False, None
        node = node[part]
        walked.append(part)
    return True, node


def validate_verdict(verdict: Mapping[str, Any]) -> None:
    """Check the verdict document against DESIGN.md's contract.

    Required (``None`` allowed where a run could not determine the value, but the key must exist):
    ``root_cause.rule`` (str), ``hypotheses`` (list of objects with ``id`` (str or int), ``statement``
    (str), ``verdict`` (one of confirmed / refuted / inconclusive), ``evidence`` (any, may be None)),
    ``acceptance.before.accept_length`` and ``acceptance.after.accept_length`` (number, tokens / verify
    step), ``probe.observed_hidden_size`` and ``probe.expected_hidden_size`` (int, hidden units),
    ``fix.launch_command`` (str); always set: ``restarts`` (int >= 0) and ``duration_s`` (seconds >= 0).

    Raises:
        VerdictSchemaError: listing every missing or ill-typed key path (``.path`` is the first one).
    """
    problems: list[tuple[str, str]] = []
    if not isinstance(verdict, Mapping):
        raise VerdictSchemaError([("(document)", f"must be an object, got {type(verdict).__name__}")])
    for dotted, check, described, nullable in _REQUIRED:
        found, value = _lookup(verdict, dotted, problems)
        if not found:
            continue
        if value is None:
            if not nullable:
                problems.append((dotted, f"must be {described}, got null"))
        elif not check(value) or (isinstance(value, float) and not math.isfinite(value)):
            problems.append((dotted, f"must be {described}{' or null' if nullable else ''}, got {value!r}"))

    found, hypotheses = _lookup(verdict, "hypotheses", problems)
    if found:
        if not isinstance(hypotheses, list):
            problems.append(("hypotheses", f"must be a list, got {type(hypotheses).__name__}"))
        else:
            for i, hyp in enumerate(hypotheses):
                where = f"hypotheses[{i}]"
                if not isinstance(hyp, Mapping):
                    problems.append((where, f"must be an object, got {type(hyp).__name__}"))
                    continue
                for key in ("id", "statement", "verdict", "evidence"):
                    if key not in hyp:
                        problems.append((f"{where}.{key}", "missing"))
                if "id" in hyp and not (isinstance(hyp["id"], str) and hyp["id"] or _is_int(hyp["id"])):
                    problems.append((f"{where}.id", f"must be a non-empty string or an integer, got {hyp['id']!r}"))
                if "statement" in hyp and not (isinstance(hyp["statement"], str) and hyp["statement"].strip()):
                    problems.append((f"{where}.statement", f"must be a non-empty string, got {hyp['statement']!r}"))
                if "verdict" in hyp and hyp["verdict"] not in HYPOTHESIS_VERDICTS:
                    problems.append(
                        (f"{where}.verdict", f"must be one of {', '.join(HYPOTHESIS_VERDICTS)}, got {hyp['verdict']!r}")
                    )
    if problems:
        raise VerdictSchemaError(problems)


def write_verdict_json(path: str | os.PathLike[str], verdict: Mapping[str, Any]) -> Path:
    """Validate ``verdict`` (see :func:`validate_verdict`) and write it as indented UTF-8 JSON, atomically.

    Datetimes become ISO 8601 strings, timedeltas seconds, numpy scalars / arrays plain numbers / lists,
    dataclasses and objects with ``to_dict()`` objects. Parent directories are created.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        VerdictSchemaError: a required key is missing or ill-typed, or a value is not JSON-serialisable
            (including NaN / inf); nothing is written then.
        OSError: the file cannot be written.
    """
    plain = _to_plain(verdict)
    validate_verdict(plain)
    text = json.dumps(plain, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    return _atomic_write_text(Path(path), text)


# --------------------------------------------------------------------------------------------------
# Headless Chromium
# --------------------------------------------------------------------------------------------------

_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """Path of a Chromium / Chrome binary: ``$WORKBENCH_CHROMIUM`` if set, else the first of
    chromium, chromium-browser, google-chrome(-stable), chrome on ``PATH``; ``None`` if there is none."""
    explicit = os.environ.get("WORKBENCH_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else shutil.which(explicit)
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run_chromium(args: list[str], *, chromium: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    binary = chromium or find_chromium()
    if not binary:
        raise BrowserNotFound(
            "no Chromium binary found (tried $WORKBENCH_CHROMIUM, " + ", ".join(_CHROMIUM_NAMES) + "); "
            "on Debian/Ubuntu: apt-get install -y --no-install-recommends chromium fonts-dejavu-core"
        )
    with tempfile.TemporaryDirectory(prefix="workbench-chromium-") as profile:
        argv = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--mute-audio",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ]
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # its own process group: helpers (zygote, crashpad) die with it
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc.pid)
            stdout, stderr = proc.communicate()
            raise BrowserError(f"chromium timed out after {timeout:g} s", stderr) from exc
        finally:
            _kill_group(proc.pid)
    if proc.returncode != 0:
        raise BrowserError(f"chromium exited with code {proc.returncode}", stderr)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _kill_group(pgid: int) -> None:
    """Kill what is left of the process group this module started for one Chromium run."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return  # the group already exited: nothing left to stop


def _file_url(html_path: str | os.PathLike[str]) -> str:
    path = Path(html_path).resolve()
    if not path.is_file():
        raise ReportError(f"no such HTML file: {path}")
    return path.as_uri()


def render_dom(
    html_path: str | os.PathLike[str],
    *,
    virtual_time_budget_ms: int = 5000,
    timeout: float = 120.0,
    chromium: str | None = None,
) -> str:
    """Open ``html_path`` in headless Chromium and return the DOM after its scripts ran (``--dump-dom``).

    A plotly figure that plotly.js actually drew contains ``<svg class="main-svg">`` elements, which
    only exist in this run-time DOM, never in the exported file. Network access is not needed and
    background networking is disabled.

    Args:
        virtual_time_budget_ms: virtual time given to the page's scripts, milliseconds.
        timeout: wall-clock limit for the browser, seconds.
        chromium: binary to use (default: :func:`find_chromium`).

    Raises:
        BrowserNotFound: no Chromium binary. BrowserError: it failed or timed out.
        ReportError: ``html_path`` does not exist.
    """
    url = _file_url(html_path)
    proc = _run_chromium(
        [f"--virtual-time-budget={int(virtual_time_budget_ms)}", "--dump-dom", url], chromium=chromium, timeout=timeout
    )
    if "<html" not in proc.stdout.lower():
        raise BrowserError("chromium printed no DOM", proc.stderr)
    return proc.stdout


def screenshot(
    html_path: str | os.PathLike[str],
    png_path: str | os.PathLike[str],
    *,
    window_size: tuple[int, int] = (1280, 1800),
    virtual_time_budget_ms: int = 5000,
    timeout: float = 120.0,
    chromium: str | None = None,
) -> Path:
    """Render ``html_path`` in headless Chromium to a PNG of ``window_size`` (width, height) pixels.

    Raises:
        BrowserNotFound, BrowserError (no PNG written), ReportError (no such HTML file).
    """
    url = _file_url(html_path)
    png = Path(png_path).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    width, height = window_size
    proc = _run_chromium(
        [
            f"--window-size={int(width)},{int(height)}",
            f"--virtual-time-budget={int(virtual_time_budget_ms)}",
            f"--screenshot={png}",
            url,
        ],
        chromium=chromium,
        timeout=timeout,
    )
    if not png.is_file() or png.stat().st_size == 0:
        raise BrowserError(f"chromium wrote no screenshot to {png}", proc.stderr)
    return png
