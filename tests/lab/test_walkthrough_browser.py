"""notebooks/walkthrough.ipynb in a real JupyterLab (Chromium via Playwright) against a sandbox
server of the test's own launched with the wrong flag: run all cells; no error output; the
verification cell shows accept length before → after, the numbers the verdict JSON records;
screenshot ``walkthrough.png``. The box is left as found (the finish cell put the original command
line back; the test stops that relaunched server, and finishes the run itself when a cell failed)."""

from __future__ import annotations

import json
from pathlib import Path

from remote import connect
from remote import probes as remote_probes
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.engine.locate import running_servers
from workbench.session.journal import Journal

ROOT = Path(__file__).resolve().parents[2]

_RUN_LAST_CELL = """() => { const panel = window.jupyterapp.shell.currentWidget;
  panel.content.activeCellIndex = panel.content.widgets.length - 1;
  return window.jupyterapp.commands.execute('notebook:run-cell'); }"""


def test_walkthrough_runs_in_jupyterlab_and_shows_before_after(lab, lab_server, own_sandbox_server, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(lab_server.state_dir))  # the kernels' box state
    box = connect("local", state_dir=lab_server.state_dir)
    reports = tmp_path / "reports"
    verdict_path = reports / "diagnose_acceptance.json"
    try:
        with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
            original = tuple(running_servers(box, port=srv.port)[0].argv)
            try:
                lab.open(ROOT / "notebooks" / "walkthrough.ipynb",
                         parameters={"port": srv.port, "report_dir": str(reports), "num_prompts": 3,
                                     "max_new_tokens": 48})
                lab.run_all(timeout=420)
                assert lab.errors() == []
                verdict = json.loads(verdict_path.read_text())
                before = verdict["acceptance"]["before"]["accept_length"]
                after = verdict["acceptance"]["after"]["accept_length"]
                assert verdict["outcome"] == "fixed" and before < 1.3 and after > 1.5
                shown = lab.wait_for_text(".wb-walk-verify", "Fixed:", timeout=30)
                assert f"accept length {before:.3f} → {after:.3f}" in shown
                assert lab.text(".wb-walk-verify .wb-walk-before") == f"{before:.3f}"
                assert lab.text(".wb-walk-verify .wb-walk-after") == f"{after:.3f}"
                assert "probes on the box now\tnone" in shown or "probes on the box now none" in shown
                assert str(verdict_path.resolve()) in lab.text(".wb-walk-finish")
                assert lab.page.locator(".js-plotly-plot").count() >= 1  # the before/after figure rendered
                # the shot for the README: the notebook alone, the verification at the top, the figure under it
                lab.page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
                cell = lab.page.locator(".jp-Cell:has(.wb-walk-verify)").first
                cell.evaluate("e => e.scrollIntoView({block: 'start'})")
                lab.page.wait_for_timeout(300)
                shot = lab.screenshot("walkthrough")
                assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
                back = running_servers(box, port=srv.port)
                assert len(back) == 1 and tuple(back[0].argv) == original and back[0].pid != srv.pid
                assert remote_probes.list_probes(box) == []
                assert not Journal(box).pending
            finally:
                if not verdict_path.exists() and lab.kernel_id is not None:
                    # a cell failed before the finish cell: finish the run in its kernel now (else the
                    # kernel's exit would relaunch the original after this test's clean-up)
                    lab.page.evaluate(_RUN_LAST_CELL)
                    lab.wait_idle(300)
                for s in running_servers(box, port=srv.port):
                    if s.pid != srv.pid:  # the original relaunched by the finish cell
                        box.stop_server(s.pid, grace=10)
    finally:
        box.close()
