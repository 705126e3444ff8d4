"""Readable reports: the export transforms and the tables' HTML, on hand-built notebooks and objects
(no kernel, no server, no browser).

- progress: tqdm redraws on stderr (``\\r``-separated status lines, tqdm's ``format_meter`` format)
  become one small grey ``wb-progress`` line per bar with its final state; other stderr lines stay
  stderr;
- tables: cells left-aligned inline (JupyterLab right-aligns ``td``), markdown code spans rendered as
  ``<code>`` with the text escaped, every table in a ``wb-table-scroll`` box;
- the ledger writes each evidence text once.
"""

import re

import nbformat

from workbench.diagnosis.ledger import Evidence, Hypothesis, Ledger
from workbench.report.html import collapse_progress, export_html, is_progress_line
from workbench.report.tables import html_table, inline_code

# What tqdm.std writes to a non-TTY stderr for 8 requests (redraws separated by \r, a final \n).
TQDM_STDERR = ("\rrequests:   0%|          | 0/8 [00:00<?, ?req/s]"
               "\rrequests:  50%|█████     | 4/8 [00:01<00:01,  2.50req/s]"
               "\rrequests: 100%|██████████| 8/8 [00:03<00:00,  2.41req/s]\n")
WARNING = "UserWarning: the draft config has no eagle_config"


def _executed(outputs):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("run()")
    cell.execution_count = 1
    cell.outputs = outputs
    nb.cells = [nbformat.v4.new_markdown_cell("One paragraph."), cell]
    return nb


def test_tqdm_status_lines_are_recognised_and_other_lines_are_not():
    assert is_progress_line("requests: 100%|██████████| 8/8 [00:03<00:00,  2.41req/s]")
    assert is_progress_line("  0%|          | 0/8 [00:00<?, ?it/s]")
    assert is_progress_line("sweep: 3setting [01:02, 20.8s/setting]")
    assert not is_progress_line(WARNING)
    assert not is_progress_line("requests: 8 in 21.1 s")
    assert not is_progress_line("Traceback (most recent call last):")


def test_progress_redraws_collapse_to_one_line_with_the_final_state_and_warnings_stay_stderr():
    nb = _executed([nbformat.v4.new_output("stream", name="stderr", text=TQDM_STDERR + WARNING + "\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="done\n")])
    assert collapse_progress(nb) == 1
    outs = nb.cells[1].outputs
    assert [o.output_type for o in outs] == ["display_data", "stream", "stream"]
    assert outs[0].data["text/plain"] == "requests: 100%|██████████| 8/8 [00:03<00:00,  2.41req/s]"
    assert outs[0].data["text/html"].startswith("<pre class='wb-progress'>requests: 100%")
    assert (outs[1].name, outs[1].text) == ("stderr", WARNING + "\n")
    assert (outs[2].name, outs[2].text) == ("stdout", "done\n")


def test_two_bars_in_one_stream_give_two_lines_and_a_plain_stderr_is_untouched():
    two = TQDM_STDERR + TQDM_STDERR.replace("requests", "warm-up").replace("8/8", "2/2").replace("4/8", "1/2")
    nb = _executed([nbformat.v4.new_output("stream", name="stderr", text=two),
                    nbformat.v4.new_output("stream", name="stderr", text=WARNING + "\n")])
    assert collapse_progress(nb) == 2
    outs = nb.cells[1].outputs
    assert [o.data["text/plain"].split(":")[0] for o in outs[:2]] == ["requests", "warm-up"]
    assert "2/2" in outs[1].data["text/plain"]
    assert outs[2].text == WARNING + "\n"


def test_export_shows_progress_as_a_small_line_not_as_a_stderr_block(tmp_path):
    src = tmp_path / "nb.ipynb"
    nbformat.write(_executed([nbformat.v4.new_output("stream", name="stderr", text=TQDM_STDERR + WARNING + "\n")]), src)
    out = export_html(src, tmp_path / "nb.html").read_text()
    stderr_blocks = re.findall(r'data-mime-type="application/vnd\.jupyter\.stderr".*?</div>', out, re.S)
    assert len(stderr_blocks) == 1 and WARNING in stderr_blocks[0] and "req/s" not in stderr_blocks[0]
    assert out.count('class="wb-progress"') == 1 and "8/8 [00:03&lt;00:00" in out
    assert "0/8" not in out and "4/8" not in out
    assert out.index('id="workbench-report-css"') > out.index(".jp-RenderedHTMLCommon td")  # after the lab CSS
    src.unlink()


def test_inline_code_renders_code_spans_and_escapes():
    assert inline_code("fc runs when `a.shape[-1] != b` <x>") == "fc runs when <code>a.shape[-1] != b</code> &lt;x&gt;"
    assert inline_code("``a`b``") == "<code>a`b</code>"
    assert inline_code("a lone ` stays") == "a lone ` stays"


def test_tables_are_left_aligned_scroll_in_their_box_and_show_code_as_code():
    t = html_table([("k", "v")])
    assert t.startswith("<div class='wb-table-scroll' style='overflow-x:auto;max-width:100%'><table>")
    assert "<td style='text-align:left;vertical-align:top'><code>v</code></td>" in t
    led = Ledger([Hypothesis("h1", "the `--speculative-algorithm` flag is EAGLE",
                             evidence=[Evidence("log", "skipped by `if x: return`", source="server.log")]),
                  Hypothesis("h2", "the draft's `fc` is skipped",
                             evidence=[Evidence("log", "skipped by `if x: return`", source="server.log")])])
    out = led._repr_html_()
    assert out.startswith("<div class='wb-table-scroll'")
    assert "`" not in out
    assert "<code>--speculative-algorithm</code>" in out and "<code>if x: return</code>" in out
    assert out.count("skipped by") == 1 and "the same as under <code>h1</code>" in out
    assert all("text-align:left" in cell for cell in re.findall(r"<t[dh](?=[\s>])[^>]*>", out))
