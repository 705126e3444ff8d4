"""``port = None`` in a real JupyterLab (Chromium via Playwright): with two sandbox servers of the
test's own running, notebooks/engine_probes.ipynb run with its default ``port = None`` stops at
the cell that picks the server with one line — ``ServerChoiceError: … Pick one: set port = N in
the parameters cell`` listing both ports — and no traceback; nothing on the box changed."""

from __future__ import annotations

import re
from pathlib import Path

from remote import connect
from remote import probes as remote_probes
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.engine.locate import running_servers
from workbench.session import Journal

ROOT = Path(__file__).resolve().parents[2]


def test_port_none_with_two_servers_lists_them_in_notebook_terms(lab, lab_server, own_sandbox_server, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(lab_server.state_dir))  # the kernel's journal
    box = connect("local")
    try:
        with own_sandbox_server(tmp_path / "a", *sandbox_flags(**EAGLE)) as a, \
                own_sandbox_server(tmp_path / "b", *sandbox_flags(**EAGLE)) as b:
            before = {(s.pid, s.port, tuple(s.argv)) for s in running_servers(box)}
            probes_before = remote_probes.list_probes(box)
            lab.open(ROOT / "notebooks" / "engine_probes.ipynb")  # the committed default: port = None
            lab.run_all(timeout=180)
            errors = lab.errors()
            assert len(errors) == 1, errors  # the cell that picks the server stopped Run All
            [message] = errors
            assert message.strip().startswith("ServerChoiceError: "), message
            assert f"port {a.port}" in message and f"port {b.port}" in message, message
            assert re.search(r"Pick one: set port = \d+ in the parameters cell", message), message
            assert "--port" not in message
            for trace in ("Traceback", "File \"", "----> ", "NotebookMessage"):
                assert trace not in message, message
            assert len(message.strip().splitlines()) == 1, message
            lab.page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) [data-mime-type="application/vnd.jupyter.stderr"]'
                             ).first.scroll_into_view_if_needed()  # the message in the screenshot
            lab.screenshot("port-none-two-servers")
            # nothing changed: the same servers, no probe, no journal
            assert {(s.pid, s.port, tuple(s.argv)) for s in running_servers(box)} >= \
                {x for x in before if x[1] in (a.port, b.port)}
            assert [s.pid for s in running_servers(box, port=a.port)] == [a.pid]
            assert [s.pid for s in running_servers(box, port=b.port)] == [b.pid]
            assert remote_probes.list_probes(box) == probes_before
            assert not Journal(box).pending
    finally:
        box.close()
