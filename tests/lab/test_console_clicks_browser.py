"""Queued clicks in a real JupyterLab (Chromium via Playwright): three clicks on "Restart with this
command" in one tick (what a fast double-click does before the kernel disables the button) wait
in the kernel's queue while the restart runs; the console's click guard drops them, so the box
sees one restart (finding 3 of the fresh-user trial). The box is left as found."""

from __future__ import annotations

import time
from pathlib import Path

from lab import labkit
from remote import connect
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.engine.locate import running_servers

ROOT = Path(__file__).resolve().parents[2]



def test_three_quick_clicks_on_restart_restart_once_in_the_browser(lab, own_sandbox_server, tmp_path):
    box = connect("local")
    try:
        with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
            original = None
            try:
                original = tuple(running_servers(box, port=srv.port)[0].argv)
                lab.open(ROOT / "notebooks" / "box_console.ipynb", parameters={"port": srv.port})
                lab.run_all(timeout=240)
                lab.wait_for_text(".wb-console-status-view", "healthy", timeout=60)
                labkit.console_tab(lab, "Server")
                command = lab.page.locator(".wb-console-command textarea").first.input_value()
                lab.fill(".wb-console-command", command.replace("--speculative-algorithm EAGLE ",
                                                                "--speculative-algorithm EAGLE3 "))
                lab.page.locator(".wb-console-restart").first.evaluate(
                    "el => { const b = el.tagName === 'BUTTON' ? el : el.querySelector('button') || el;"
                    " b.click(); b.click(); b.click(); }")
                lab.wait_for_text(".wb-console-status", "healthy", timeout=240)
                time.sleep(5)  # time for the queued clicks to be delivered (and, unguarded, to restart)
                lab.wait_idle(60)
                now = running_servers(box, port=srv.port)
                assert len(now) == 1 and now[0].pid != srv.pid
                assert f"started pid {now[0].pid}" in lab.text(".wb-console-status")
                dropped = lab.wait_for_text(".wb-console-dropped", "ignored", timeout=30)
                assert "ignored 2 click(s) made while an action ran (the last on “restart”)" in dropped, dropped
                labkit.console_tab(lab, "Journal")
                journal = lab.wait_for_text(".wb-console-journal", "started pid", timeout=30)
                assert journal.count("started pid") == 1 and f"started pid {now[0].pid}" in journal, journal
                assert lab.errors() == []
            finally:
                if original is not None and lab.page.locator(".wb-console-restore").count():
                    time.sleep(1)  # past the click guard's settle time
                    labkit.console_tab(lab, "Journal")
                    lab.click(".wb-console-restore")
                    lab.wait_for_text(".wb-console-journal", "as found", timeout=240)
                for s in running_servers(box, port=srv.port):
                    if s.pid != srv.pid:
                        box.stop_server(s.pid, grace=10)
    finally:
        box.close()
