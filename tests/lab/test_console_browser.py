"""The box console in a real JupyterLab (Chromium via Playwright): open notebooks/box_console.ipynb
with the test server's port, run all, read the Status tab, restart with EAGLE3 from the Server tab,
put the box back from the Journal tab; the box is left as found."""

from __future__ import annotations

import shutil
from pathlib import Path

from lab import labkit
from remote import connect
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.engine.locate import running_servers

ROOT = Path(__file__).resolve().parents[2]



def test_console_restart_and_put_the_box_back_in_the_browser(lab, own_sandbox_server, tmp_path):
    box = connect("local")
    try:
        with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
            original = None
            try:
                original = tuple(running_servers(box, port=srv.port)[0].argv)
                lab.open(ROOT / "notebooks" / "box_console.ipynb", parameters={"port": srv.port})
                lab.run_all(timeout=240)
                status = lab.wait_for_text(".wb-console-status-view", "healthy", timeout=60)
                assert str(srv.port) in status and str(srv.pid) in status
                lab.screenshot("console-status")
                labkit.console_tab(lab, "Server")
                command = lab.page.locator(".wb-console-command textarea").first.input_value()
                assert "--speculative-algorithm EAGLE " in command
                lab.fill(".wb-console-command", command.replace("--speculative-algorithm EAGLE ",
                                                                "--speculative-algorithm EAGLE3 "))
                lab.click(".wb-console-restart")
                lab.wait_for_text(".wb-console-status", "healthy", timeout=240)
                now = running_servers(box, port=srv.port)
                assert len(now) == 1 and now[0].pid != srv.pid
                assert now[0].argv[now[0].argv.index("--speculative-algorithm") + 1] == "EAGLE3"
                labkit.console_tab(lab, "Status")
                lab.wait_for_text(".wb-console-status-view", "EAGLE3", timeout=30)
                labkit.console_tab(lab, "Journal")
                assert "stopped the original server" in lab.text(".wb-console-journal")
                lab.click(".wb-console-restore")
                # longer than the console's own wait for the relaunched original (its
                # server_start_timeout, 300 s), so a relaunch that fails says why in the pane
                lab.wait_for_text(".wb-console-restore-report", "relaunched", timeout=360,
                                  also=(".wb-console-status", ".wb-console-dropped", ".wb-console-journal"))
                lab.wait_for_text(".wb-console-journal", "as found", timeout=30)
                back = running_servers(box, port=srv.port)
                assert len(back) == 1 and tuple(back[0].argv) == original
                labkit.console_tab(lab, "Status")
                text = lab.wait_for_text(".wb-console-status-view", str(back[0].pid), timeout=30)
                assert "EAGLE3" not in text and "healthy" in text
                shot = lab.screenshot("console-after-restore")
                assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
                assert lab.errors() == []
            finally:
                # put the box back through the console while its kernel lives (else the kernel's
                # exit would relaunch the original after this test), then stop what it relaunched
                if original is not None and lab.page.locator(".wb-console-restore").count():
                    labkit.console_tab(lab, "Journal")
                    lab.click(".wb-console-restore")
                    lab.wait_for_text(".wb-console-journal", "as found", timeout=240)
                for s in running_servers(box, port=srv.port):
                    if s.pid != srv.pid:  # the relaunched original, or a restart left by a failure
                        box.stop_server(s.pid, grace=10)
    finally:
        box.close()
