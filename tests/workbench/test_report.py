"""workbench.report: a notebook executed for real with papermill, exported to one self-contained HTML
file, checked statically and in headless Chromium; the verdict JSON contract.

Kernel: papermill runs kernel ``python3``; the Makefile installs the venv's kernelspec with
``.venv/bin/python -m ipykernel install --sys-prefix --name python3`` and ``test_kernel_is_this_venv``
checks that the notebook really ran in this interpreter's environment.

Browser: ``test_report_draws_in_headless_chromium`` needs a Chromium binary (Debian:
``apt-get install -y --no-install-recommends chromium fonts-dejavu-core``); it is skipped only when
none is found.
"""

import datetime as dt
import json
import re
import struct
import sys
import zlib

import nbformat
import numpy as np
import pytest

from workbench import report
from workbench.report import ReportError, VerdictSchemaError

PLOTLY_CELL = """\
from workbench.report.figures import accept_length_before_after, hidden_width_probe
fig = accept_length_before_after(accept_before, 3.25, ideal=4)
fig.show()"""

HIDDEN_CELL = """\
SECRET_SOURCE_MARKER = 'only-the-output-should-show'
hidden_width_probe(7168, 21504, 7168)"""


def _notebook() -> nbformat.NotebookNode:
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        v4.new_markdown_cell("# Acceptance report\n\nThe accept length was **pinned at 1.00** before the fix."),
        v4.new_code_cell("accept_before = 1.5\nlabel = 'default'", metadata={"tags": ["parameters"]}),
        v4.new_code_cell("import sys\nprint('KERNEL_PREFIX=' + sys.prefix)"),
        v4.new_code_cell(PLOTLY_CELL),
        v4.new_code_cell(HIDDEN_CELL, metadata={"tags": ["hide-input"]}),
        v4.new_code_cell("print('REMOVED-CELL-OUTPUT')", metadata={"tags": ["remove-cell"]}),
        v4.new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=3)"),
    ]
    return nb


@pytest.fixture(scope="module")
def executed(tmp_path_factory, execute_notebook):
    """The test notebook executed with papermill (kernel python3) and exported once for the module."""
    tmp = tmp_path_factory.mktemp("report")
    source = tmp / "report_in.ipynb"
    nbformat.write(_notebook(), source)
    out = tmp / "report_out.ipynb"
    execute_notebook(
        source,
        out,
        parameters={"accept_before": 1.0, "label": "EAGLE run"},
        cwd=str(tmp),
        log_output=False,
        execution_timeout=300,
    )
    html_path = report.export_html(out, tmp / "html" / "report.html", title="Acceptance report (test)")
    return {"dir": tmp, "notebook": out, "html_path": html_path, "html": html_path.read_text(encoding="utf-8")}


@pytest.mark.slow
def test_kernel_is_this_venv(executed):
    nb = nbformat.read(executed["notebook"], as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert f"KERNEL_PREFIX={sys.prefix}" in printed


@pytest.mark.slow
def test_export_is_self_contained(executed):
    html = executed["html"]
    assert report.check_self_contained(html) == []
    assert report.count_plotlyjs(html) == 1
    assert html.count("* plotly.js v") == 1
    assert not re.search(r"<script[^>]*\ssrc\s*=", html, re.IGNORECASE)
    assert '<script src="http' not in html and '<script src="//' not in html
    # outside plotly.js itself (whose source mentions a topojson CDN used only by geo maps) no CDN at all
    import plotly.offline

    assert plotly.offline.get_plotlyjs() in html
    outside = html.replace(plotly.offline.get_plotlyjs(), "")
    for cdn in ("cdnjs", "jsdelivr", "unpkg.com", "cdn.plot.ly", "require.js", "require.min.js", "mathjax.js", "tex-chtml", "mermaid.esm"):
        assert cdn not in outside.lower(), cdn
    assert "<title>Acceptance report (test)</title>" in html


@pytest.mark.slow
def test_export_contains_figures_and_cells(executed):
    html = executed["html"]
    assert report.count_plotly_figures(html) == 2
    assert html.count("Plotly.newPlot(") == 2
    # the figure data: the parameter injected by papermill reached the figure
    assert '"y":[1.0,3.25]' in html
    assert "Accept length before and after the fix" in html
    assert "Hidden-state width at the draft" in html
    # the markdown cell
    assert "Acceptance report" in html and "<strong>pinned at 1.00</strong>" in html
    # hide-input: output kept, source gone; remove-cell: gone entirely
    assert "SECRET_SOURCE_MARKER" not in html and "only-the-output-should-show" not in html
    assert "REMOVED-CELL-OUTPUT" not in html
    # papermill's injected cell became a summary; the defaults cell stays
    assert "Parameters of this run" in html and "EAGLE run" in html
    assert "# Parameters" not in html
    assert "accept_before" in html
    # the widget degraded to its text repr
    assert "IntSlider(value=3)" in html
    assert "application/vnd.jupyter.widget" not in html


@pytest.mark.slow
def test_report_draws_in_headless_chromium(executed):
    if report.find_chromium() is None:
        pytest.skip(
            "no chromium binary (install: apt-get install -y --no-install-recommends chromium fonts-dejavu-core)"
        )
    dom = report.render_dom(executed["html_path"])
    # plotly.js creates these elements only when it runs: the figures were actually drawn
    assert dom.count('class="plot-container plotly"') == 2
    assert dom.count('class="main-svg"') >= 2
    assert "Accept length before and after the fix" in dom  # title text drawn into the SVG
    assert re.search(r'<g class="point">', dom)  # bars

    png = report.screenshot(executed["html_path"], executed["dir"] / "report.png", window_size=(1200, 1600))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 1600)
    # not a blank page: the decoded image has many distinct byte values (a white page has ~3)
    idat, pos = b"", 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    assert len(set(zlib.decompress(idat))) > 50


# ---------------------------------------------------------------------------------------------------
# export edge cases on synthetic executed notebooks (no kernel needed)
# ---------------------------------------------------------------------------------------------------


def _executed_nb(outputs, tmp_path, name="nb.ipynb"):
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.cells = [v4.new_markdown_cell("hello report"), v4.new_code_cell("x", execution_count=1, outputs=outputs)]
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_export_without_figures_inlines_no_plotlyjs(tmp_path):
    out = nbformat.v4.new_output("stream", name="stdout", text="just text\n")
    html = report.export_html(_executed_nb([out], tmp_path), tmp_path / "a.html").read_text()
    assert report.count_plotlyjs(html) == 0
    assert report.check_self_contained(html) == []
    assert "just text" in html


def test_export_drops_notebook_renderer_plotlyjs_injection(tmp_path):
    import plotly.graph_objects as go
    import plotly.offline

    injection = nbformat.v4.new_output(
        "display_data", data={"text/html": f"<script>{plotly.offline.get_plotlyjs()}</script>"}
    )
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    figure = nbformat.v4.new_output(
        "display_data",
        data={report.PLOTLY_MIMETYPE: fig.to_plotly_json(), "text/html": '<script src="https://cdn.plot.ly/x.js">'},
    )
    html = report.export_html(_executed_nb([injection, figure], tmp_path), tmp_path / "b.html").read_text()
    assert report.count_plotlyjs(html) == 1
    assert report.count_plotly_figures(html) == 1
    assert "cdn.plot.ly/x.js" not in html


def test_export_refuses_external_script_and_writes_nothing(tmp_path):
    out = nbformat.v4.new_output(
        "display_data", data={"text/html": '<script src="https://cdn.example.org/lib.js"></script>'}
    )
    target = tmp_path / "c.html"
    with pytest.raises(ReportError, match=r'<script src="https://cdn.example.org/lib.js"> loads a network address'):
        report.export_html(_executed_nb([out], tmp_path), target)
    assert not target.exists()
    assert list(tmp_path.glob(".c.html.*")) == []


def test_export_refuses_unexecuted_and_unreadable(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1 + 1")]
    path = tmp_path / "fresh.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(ReportError, match="has not been executed"):
        report.export_html(path, tmp_path / "d.html")
    with pytest.raises(ReportError, match="cannot read notebook"):
        report.export_html(tmp_path / "missing.ipynb", tmp_path / "d.html")
    (tmp_path / "junk.ipynb").write_text("not json")
    with pytest.raises(ReportError, match="cannot read notebook"):
        report.export_html(tmp_path / "junk.ipynb", tmp_path / "d.html")


# ---------------------------------------------------------------------------------------------------
# check_self_contained
# ---------------------------------------------------------------------------------------------------

FAKE_PLOTLYJS = "/**\n* plotly.js v3.0.1\n*/ var Plotly = {};"
FIG_DIV = '<div class="plotly-graph-div" id="f1"></div><script>Plotly.newPlot("f1", [], {})</script>'


def _page(head="", body=""):
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"


@pytest.mark.parametrize(
    "html, expected",
    [
        (_page(f"<script>{FAKE_PLOTLYJS}</script>", FIG_DIV), []),
        (_page("", "<p>no figures</p>"), []),
        (_page('<script src="https://cdn.jsdelivr.net/npm/requirejs"></script>'), ["network address"]),
        (_page('<script type="text/javascript" src="//cdn.example/x.js"></script>'), ["network address"]),
        (_page('<script src="local.js"></script>'), ["a separate file"]),
        (_page('<link rel="stylesheet" href="https://fonts.example/css">'), ["<link"]),
        (_page("<style>@import 'https://fonts.example/a.css';</style>"), ["CSS loads"]),
        (_page('<script type="module">await import("https://cdn.example/m.mjs")</script>'), ["imports a network"]),
        (_page("", FIG_DIV), ["inlined 0 times"]),
        (_page(f"<script>{FAKE_PLOTLYJS}</script><script>{FAKE_PLOTLYJS}</script>", FIG_DIV), ["inlined 2 times"]),
        (_page(f"<script>{FAKE_PLOTLYJS}</script><script>{FAKE_PLOTLYJS}</script>"), ["inlined 2 times"]),
        (_page("", '<script type="application/vnd.jupyter.widget-view+json">{}</script>'), ["ipywidgets view"]),
        (_page("", '<img src="https://example.org/a.png">'), ["<img"]),
    ],
)
def test_check_self_contained(html, expected):
    problems = report.check_self_contained(html)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert fragment in problem


def test_check_ignores_urls_inside_script_text_and_svg_namespaces():
    js = 'var s = "<script src=\\"https://x\\"></script>"; var ns = "http://www.w3.org/2000/svg";'
    html = _page(f"<script>{FAKE_PLOTLYJS}</script><script>{js}</script>", FIG_DIV + '<svg xmlns="http://www.w3.org/2000/svg"></svg>')
    assert report.check_self_contained(html) == []


# ---------------------------------------------------------------------------------------------------
# verdict JSON
# ---------------------------------------------------------------------------------------------------


def _verdict():
    return {
        "root_cause": {"rule": "algorithm_mismatch", "summary": "EAGLE instead of EAGLE3"},
        "hypotheses": [
            {"id": "H1", "statement": "--speculative-algorithm EAGLE skips aux capture", "verdict": "confirmed",
             "evidence": ["probe: hidden width 7168 != 21504"]},
            {"id": 2, "statement": "draft vocab mapping is wrong", "verdict": "refuted", "evidence": None},
        ],
        "acceptance": {"before": {"accept_length": np.float64(1.0)}, "after": {"accept_length": 3.25}},
        "probe": {"observed_hidden_size": np.int64(7168), "expected_hidden_size": 21504},
        "fix": {"launch_command": "python -m sglang.launch_server --speculative-algorithm EAGLE3"},
        "restarts": 2,
        "duration_s": np.float32(12.5),
        "finished_at": dt.datetime(2026, 1, 5, 12, 30, tzinfo=dt.timezone.utc),
        "per_request": np.array([1.0, 1.0]),
    }


def test_write_verdict_json_roundtrip(tmp_path):
    path = report.write_verdict_json(tmp_path / "reports" / "diagnose_acceptance.json", _verdict())
    doc = json.loads(path.read_text())
    assert doc["probe"]["observed_hidden_size"] == 7168 and isinstance(doc["probe"]["observed_hidden_size"], int)
    assert doc["acceptance"]["before"]["accept_length"] == 1.0
    assert doc["duration_s"] == 12.5
    assert doc["finished_at"] == "2026-01-05T12:30:00+00:00"
    assert doc["per_request"] == [1.0, 1.0]
    assert doc["hypotheses"][0]["verdict"] == "confirmed"
    assert [p.name for p in path.parent.iterdir()] == ["diagnose_acceptance.json"]  # no temp file left


def test_verdict_allows_null_for_undetermined_values(tmp_path):
    verdict = _verdict()
    verdict["probe"] = {"observed_hidden_size": None, "expected_hidden_size": None}
    verdict["root_cause"]["rule"] = None
    verdict["acceptance"]["after"]["accept_length"] = None
    verdict["fix"]["launch_command"] = None
    doc = json.loads(report.write_verdict_json(tmp_path / "v.json", verdict).read_text())
    assert doc["probe"]["observed_hidden_size"] is None


@pytest.mark.parametrize(
    "mutate, path, message",
    [
        (lambda v: v["probe"].pop("observed_hidden_size"), "probe.observed_hidden_size", "missing"),
        (lambda v: v.pop("acceptance"), "acceptance", "missing"),
        (lambda v: v["acceptance"].__setitem__("before", 1.0), "acceptance.before", "must be an object"),
        (lambda v: v["acceptance"]["after"].__setitem__("accept_length", "3.2"), "acceptance.after.accept_length", "number"),
        (lambda v: v["hypotheses"][1].__setitem__("verdict", "maybe"), "hypotheses[1].verdict", "confirmed, refuted, inconclusive"),
        (lambda v: v["hypotheses"][0].pop("evidence"), "hypotheses[0].evidence", "missing"),
        (lambda v: v["hypotheses"][0].__setitem__("statement", ""), "hypotheses[0].statement", "non-empty string"),
        (lambda v: v.__setitem__("hypotheses", {"H1": {}}), "hypotheses", "must be a list"),
        (lambda v: v.__setitem__("restarts", None), "restarts", "got null"),
        (lambda v: v.__setitem__("restarts", 1.5), "restarts", "non-negative integer"),
        (lambda v: v["probe"].__setitem__("expected_hidden_size", 21504.0), "probe.expected_hidden_size", "integer"),
        (lambda v: v.pop("duration_s"), "duration_s", "missing"),
        (lambda v: v["fix"].__setitem__("launch_command", ["python", "-m"]), "fix.launch_command", "string"),
    ],
)
def test_verdict_schema_errors_name_the_key_path(tmp_path, mutate, path, message):
    verdict = _verdict()
    mutate(verdict)
    target = tmp_path / "v.json"
    target.write_text("previous\n")
    with pytest.raises(VerdictSchemaError) as info:
        report.write_verdict_json(target, verdict)
    assert info.value.path == path
    assert message in str(info.value)
    assert target.read_text() == "previous\n"  # an invalid verdict never replaces the old file


def test_verdict_reports_every_problem_and_rejects_nan_and_unserialisable(tmp_path):
    with pytest.raises(VerdictSchemaError) as info:
        report.validate_verdict({})
    paths = [p for p, _ in info.value.problems]
    assert {"root_cause", "hypotheses", "acceptance", "probe", "fix", "restarts", "duration_s"} <= set(paths)

    verdict = _verdict()
    verdict["acceptance"]["after"]["accept_length"] = float("nan")
    with pytest.raises(VerdictSchemaError, match="non-finite"):
        report.write_verdict_json(tmp_path / "v.json", verdict)

    verdict = _verdict()
    verdict["extra"] = object()
    with pytest.raises(VerdictSchemaError, match="not JSON serialisable"):
        report.write_verdict_json(tmp_path / "v.json", verdict)
    assert not (tmp_path / "v.json").exists()


def test_render_dom_errors(tmp_path, monkeypatch):
    with pytest.raises(ReportError, match="no such HTML file"):
        report.render_dom(tmp_path / "absent.html")
    (tmp_path / "p.html").write_text(_page())
    monkeypatch.setenv("WORKBENCH_CHROMIUM", str(tmp_path / "no-such-chromium"))
    with pytest.raises(report.BrowserNotFound, match="apt-get install"):
        report.render_dom(tmp_path / "p.html")
