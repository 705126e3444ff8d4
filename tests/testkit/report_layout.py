"""What a reader of an exported report sees, measured in a real browser (Playwright driving the
system Chromium, ``executable_path=shutil.which("chromium")``): used by the report tests.

:func:`measure_report` opens one HTML file at the given viewport widths and returns, per width, the
facts the readability tests assert (stderr blocks, progress lines, paragraph texts, the code-path
table's cells, page and table-box scroll widths, and the plotly text boxes that intersect).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

_JS = r"""
() => {
  const txt = el => el.textContent.replace(/\s+/g, ' ').trim();
  const stderr = [...document.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')].map(txt);
  const progress = [...document.querySelectorAll('.wb-progress')].map(txt);
  const paragraphs = [...document.querySelectorAll('.jp-RenderedMarkdown p, .jp-OutputArea-output p, .jp-OutputArea-output li')]
    .map(txt).filter(t => t.length > 40);
  const cp = [...document.querySelectorAll('h4')].find(h => h.textContent.startsWith('EAGLE-3 code path'));
  let codepath = null;
  if (cp) {
    let el = cp.nextElementSibling;
    while (el && !el.querySelector('table') && el.tagName !== 'TABLE') el = el.nextElementSibling;
    const table = el && (el.tagName === 'TABLE' ? el : el.querySelector('table'));
    if (table) codepath = [...table.querySelectorAll('td')].map(td => ({
      align: getComputedStyle(td).textAlign, html: td.innerHTML, text: td.textContent}));
  }
  const boxes = [...document.querySelectorAll('.wb-table-scroll')].map(b => ({scroll: b.scrollWidth, client: b.clientWidth}));
  const overlaps = [];
  document.querySelectorAll('.plotly-graph-div').forEach((fig, i) => {
    const items = [...fig.querySelectorAll('g.annotation-text-g, g.infolayer g.g-gtitle, g.infolayer text.legendtext, '
      + 'text.xtitle, text.ytitle, g.legend, g.textpoint text, g.xtick text, g.ytick text')]
      .map(el => ({el, r: el.getBoundingClientRect(), t: txt(el)})).filter(x => x.r.width > 0 && x.r.height > 0);
    for (let a = 0; a < items.length; a++) for (let b = a + 1; b < items.length; b++) {
      const A = items[a], B = items[b];
      if (A.el.contains(B.el) || B.el.contains(A.el)) continue;
      if ((A.el.closest('g.legend') && B.el.closest('g.legend'))) continue;
      const w = Math.min(A.r.right, B.r.right) - Math.max(A.r.left, B.r.left);
      const h = Math.min(A.r.bottom, B.r.bottom) - Math.max(A.r.top, B.r.top);
      if (w > 1 && h > 1) overlaps.push({figure: i, a: A.t, b: B.t});
    }
  });
  // on-plot labels (annotations: reference-line labels, notes) over what the data draws: bars,
  // markers, and the horizontal lines (shapes), whose boxes are as thin as the line
  const covers = [];
  document.querySelectorAll('.plotly-graph-div').forEach((fig, i) => {
    const box = el => el.getBoundingClientRect();
    const labels = [...fig.querySelectorAll('g.annotation-text-g')].map(el => ({r: box(el), t: txt(el)}))
      .filter(x => x.r.width > 0 && x.r.height > 0 && x.t);
    const marks = [...fig.querySelectorAll('g.trace.bars g.point path, g.trace.scatter path.point, g.shapelayer path')]
      .map(el => ({r: box(el), kind: el.closest('g.shapelayer') ? 'line' : (el.closest('g.bars') ? 'bar' : 'marker')}))
      .filter(x => x.r.width > 0 || x.r.height > 0);
    for (const L of labels) for (const M of marks) {
      const w = Math.min(L.r.right, M.r.right) - Math.max(L.r.left, M.r.left);
      const h = Math.min(L.r.bottom, M.r.bottom) - Math.max(L.r.top, M.r.top);
      if (w > 1 && h > (M.kind === 'line' ? 0 : 1)) covers.push({figure: i, label: L.t, over: M.kind});
    }
  });
  return {stderr, progress, paragraphs, codepath, boxes, overlaps, covers,
          figures: document.querySelectorAll('.plotly-graph-div .main-svg').length,
          page: {scroll: document.documentElement.scrollWidth, inner: window.innerWidth}};
}
"""


def measure_report(html_path: str | Path, widths: tuple[int, ...] = (1280, 800), *, timeout_s: float = 60) -> dict:
    """``{width: facts}`` for ``html_path`` opened in headless Chromium at each viewport width (height
    900 px), after plotly drew its figures. ``facts``: ``stderr`` (texts of the stderr-styled outputs),
    ``progress`` (texts of the ``.wb-progress`` lines), ``paragraphs`` (texts over 40 characters of the
    markdown paragraphs and the outputs' ``p``/``li``), ``codepath`` (per cell of the code-path table:
    computed ``align``, inner ``html``, ``text``; ``None`` without one), ``boxes`` (scroll/client width
    of each ``.wb-table-scroll``), ``overlaps`` (pairs of intersecting plotly text boxes, more than 1 px
    each way, per figure), ``covers`` (on-plot annotation labels drawn over a bar, a marker or a
    horizontal reference line of their figure: ``{figure, label, over}``), ``figures`` (drawn svg layers), ``page`` (document scrollWidth, innerWidth).
    Raises ``RuntimeError`` when no Chromium is on PATH.

    Playwright's sync API refuses to start in a thread whose asyncio loop runs (the ``lab``
    fixtures of tests/lab keep one running for the whole session), so the browser is driven from a
    thread of its own; its exception is re-raised here."""
    chromium = shutil.which("chromium")
    if chromium is None:
        raise RuntimeError("no chromium on PATH (apt-get install chromium)")
    result: dict = {}

    def work() -> None:
        try:
            result["out"] = _measure(chromium, html_path, widths, timeout_s)
        except BaseException as exc:  # handed to the caller's thread, re-raised below
            result["error"] = exc

    worker = threading.Thread(target=work, name="report-layout-browser", daemon=True)
    worker.start()
    worker.join(timeout_s * (len(widths) + 2))
    if worker.is_alive():
        raise RuntimeError(f"measuring {html_path} in Chromium took over {timeout_s * (len(widths) + 2):.0f} s")
    if "error" in result:
        raise result["error"]
    return result["out"]


def _measure(chromium: str, html_path: str | Path, widths: tuple[int, ...], timeout_s: float) -> dict:
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"], timeout=timeout_s * 1000)
        try:
            for width in widths:
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.goto(Path(html_path).resolve().as_uri(), timeout=timeout_s * 1000)
                page.wait_for_function("[...document.querySelectorAll('.plotly-graph-div')]"
                                       ".every(d => d.querySelector('.main-svg'))", timeout=timeout_s * 1000)
                page.wait_for_timeout(300)
                out[width] = page.evaluate(_JS)
                page.close()
        finally:
            browser.close()
    return out
