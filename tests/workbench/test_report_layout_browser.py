"""Readable reports in a real browser (Playwright driving the system Chromium,
``tests/testkit/report_layout.py``): a hand-built executed notebook with every kind of output the
runbooks print (a progress bar on stderr, a real warning, markdown prose, a table wider than the page,
the runbook's figures at the values of a sandbox diagnosis) exported and measured at 1280 and 800 px.
The same checks on a real executed ``diagnose_acceptance`` report are in
``tests/integration/test_diagnose_sandbox.py::test_diagnose_sandbox_from_a_launch_command``."""

import shutil

import nbformat
import pytest

from tests.testkit.report_layout import measure_report
from workbench.report import figures
from workbench.report.html import PLOTLY_MIMETYPE, export_html
from workbench.report.tables import html_table

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium on PATH")]

PROSE = "The target captures no aux hidden states under EAGLE, so the draft receives one hidden state of 160."
TQDM = ("\rrequests:   0%|          | 0/8 [00:00<?, ?req/s]"
        "\rrequests: 100%|██████████| 8/8 [00:03<00:00,  2.41req/s]\n")
WARNING = "UserWarning: the draft config has no eagle_config"
WIDE = "--speculative-draft-model-path=" + "/very/long/path" * 30  # no break opportunity: wider than 800 px


def _notebook():
    v4 = nbformat.v4
    nb = v4.new_notebook()
    figs = [figures.accept_length_before_after(1.157, 2.356, ideal=4),
            figures.accept_length_per_request([1.1, 1.2, 1.15, 1.2], [2.3, 2.4, 2.2, 2.5]),
            figures.hidden_width_probe(160, 480, 160)]
    cell = v4.new_code_cell("run()")
    cell.execution_count = 1
    cell.outputs = [v4.new_output("stream", name="stderr", text=TQDM + WARNING + "\n"),
                    v4.new_output("display_data", data={"text/html": html_table([("launch", WIDE), ("port", 30000)]),
                                                        "text/plain": "table"})]
    cell.outputs += [v4.new_output("display_data", data={PLOTLY_MIMETYPE: f.to_plotly_json(), "text/plain": "fig"})
                     for f in figs]
    nb.cells = [v4.new_markdown_cell(PROSE), cell]
    return nb


def test_exported_report_reads_well_in_chromium(tmp_path):
    src = tmp_path / "nb.ipynb"
    nbformat.write(_notebook(), src)
    html = export_html(src, tmp_path / "nb.html")
    facts = measure_report(html, widths=(1280, 800))
    for width, f in facts.items():
        assert f["stderr"] == [WARNING], width  # the warning is still a stderr block, the bar is not
        assert f["progress"] == ["requests: 100%|██████████| 8/8 [00:03<00:00, 2.41req/s]"], width
        assert f["paragraphs"].count(PROSE) == 1, width
        assert f["page"]["scroll"] <= f["page"]["inner"], (width, f["page"])
        assert f["overlaps"] == [], (width, f["overlaps"])
        assert f["covers"] == [], (width, f["covers"])  # no label overprints a bar or a line (issue 15)
        assert f["figures"] >= 3
    wide = facts[800]["boxes"][0]
    assert wide["scroll"] > wide["client"], wide  # the wide table scrolls inside its own box
