"""Fixes of the fresh-user trial (issue 15, console side), in-process against real sandbox
servers on the local box: queued clicks dropped (findings 3, 4), the Source pane re-reading a
file a probe changed (5), the Source tab's entry buttons after the tab is shown (7), the console
sticking to its server's port (8), the doctor's findings replaced on every check (9), port
errors in plain words (10), the console notebook's one-line errors (11), line numbers in files
with probes (14), the journal's long commands (15)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.lab.clicks import ClickGuard
from workbench.lab.console import BoxConsole
from workbench.lab.probes_pane import ProbesPane
from workbench.lab.source_pane import SourcePane
from workbench.lab.state import BoxState


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """This test's own journal and run lock (the workbench's state directory on the local box)."""
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def deliver_click(button) -> None:
    """What ipykernel does with one queued click: the comm message handed to the button (ipywidgets'
    ``Button._handle_button_msg``), after the previous message's handler returned."""
    button._handle_button_msg(None, {"event": "click"}, [])


# -- the click guard (3, 4) -------------------------------------------------------------------


def test_click_guard_drops_clicks_sent_while_the_action_ran():
    """Send times on the browser's clock (the comm message header's date): a click sent before
    the action ended is dropped, one sent after it runs; the browser clock's offset does not
    matter (only differences of send times are compared with the action's duration)."""
    runs = []
    for offset in (0.0, -3600.0, 86400.0):  # browser clock = kernel clock, an hour behind, a day ahead
        g = ClickGuard()
        t_send = 1_700_000_000.0 + offset
        g.run("restart", lambda: (runs.append(1), time.sleep(0.4)), sent_at=t_send)
        # a double-click: the second click sent 0.1 s after the first, handled once the first returned
        assert g.run("restart", lambda: runs.append(2), sent_at=t_send + 0.1) is None
        assert g.run("revert", lambda: runs.append(3), sent_at=t_send + 0.3) is None
        assert g.dropped == ["restart", "revert"]
        assert g.run("restart", lambda: runs.append(4) or "ran", sent_at=t_send + 2.0) == "ran"
    assert runs == [1, 4] * 3


def test_click_guard_without_send_times_drops_what_is_handled_right_after():
    g = ClickGuard(settle_s=0.3)
    assert g.run("a", lambda: 1) == 1
    assert g.run("a", lambda: 2) is None  # handled at once after the first: queued during it
    time.sleep(0.35)
    assert g.run("a", lambda: 3) == 3
    time.sleep(0.35)
    nested = []
    g.run("outer", lambda: nested.append(g.run("inner", lambda: "no")))  # a click while one runs
    assert nested == [None] and g.dropped == ["a", "inner"]


def test_a_double_click_on_restart_restarts_once(own_sandbox_server, tmp_path, state_dir):
    box = connect("local")
    relaunched = None
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        c = BoxConsole(port=srv.port, server_start_timeout=120)
        try:
            original = tuple(c.state.server().argv)
            c.command.value = c.command.value.replace("--speculative-algorithm EAGLE ",
                                                      "--speculative-algorithm EAGLE3 ")
            deliver_click(c.restart_button)  # the first click: the restart runs
            first = c.state.server()
            assert first.pid != srv.pid, c.status_line.value
            deliver_click(c.restart_button)  # two clicks queued while it ran, delivered now
            deliver_click(c.restart_button)
            assert c.state.server().pid == first.pid
            started = [x for x in c.journal_lines() if x.startswith("started pid")]
            assert len(started) == 1 and f"started pid {first.pid}" in started[0], started
            assert c.state.clicks.dropped == ["restart", "restart"]
            assert "ignored 2 click(s) made while an action ran (the last on “restart”)" in c.dropped_html.value
            report = c.restore()
            assert report is not None and report.clean, c.restore_html.value
            relaunched = c.state.server()
            assert tuple(relaunched.argv) == original
        finally:
            c.close()
            if relaunched is not None and relaunched.pid != srv.pid:
                box.stop_server(relaunched.pid, grace=10)
    assert remote_probes.list_probes(box) == []
    box.close()



def test_a_double_click_on_revert_reverts_one_probe(probe_state):
    state = probe_state
    pane = ProbesPane(state)
    entry = state.code_path().entry("draft-fc-width-check")
    root = str(state.engine().root).rstrip("/")
    rel = entry.file[len(root) + 1:]
    assert pane.add_expression(rel, entry.probe_line, ["hidden_states.shape"]) is not None, pane.status.value
    assert pane.add_recipe("draft-input-width") is not None, pane.status.value
    tags = [p.tag for p in remote_probes.list_probes(state.box)]
    assert len(tags) == 2 and pane.tag.value == tags[-1]
    time.sleep(0.4)  # past the settle time of the adds above (called from Python, no send time)
    deliver_click(pane.revert_button)
    deliver_click(pane.revert_button)  # queued during the first revert: dropped
    assert [p.tag for p in remote_probes.list_probes(state.box)] == tags[:1]
    assert state.clicks.dropped == ["revert this probe"]
    time.sleep(0.4)
    deliver_click(pane.revert_button)  # a click made later: runs
    assert remote_probes.list_probes(state.box) == []


# -- the Source pane after probes (5, 14) ---------------------------------------------------------


def test_find_definition_after_add_and_revert_gives_the_original_line(probe_state):
    state = probe_state
    pane = SourcePane(state, context=2)
    name = "LlamaForCausalLMEagle3.load_weights"
    before = pane.find(name)
    assert before, pane.status.value
    d0 = before[0]
    original_text = Path(d0.file).read_text()
    assert original_text.splitlines()[d0.line - 1].lstrip().startswith("def load_weights")
    # a probe above the method: the definition moves down in the patched file
    entry = state.code_path().entry("draft-fc-width-check")
    assert entry.file == d0.file and entry.probe_line < d0.line
    probe = remote_probes.add_probe(state.box, entry.file, before=entry.probe_line, exprs=["hidden_states.shape"],
                                    tag="fix5", python=state.engine().python, root=state.engine().root)
    during = pane.find(name)
    assert during and during[0].line == d0.line + probe.block_lines, pane.status.value
    remote_probes.revert_probe(state.box, "fix5")
    assert Path(d0.file).read_text() == original_text
    after = pane.find(name)
    assert after and after[0].line == d0.line, pane.status.value
    line = original_text.splitlines()[d0.line - 1]
    assert html_escape(line) in pane.view.value and "fix5" not in pane.view.value


def html_escape(text: str) -> str:
    import html

    return html.escape(text, quote=False)


# -- the console sticks to its server (8) -------------------------------------------------------


def test_a_killed_server_is_reported_with_its_log_and_no_other_is_offered(own_sandbox_server, tmp_path, state_dir):
    import os
    import signal

    with own_sandbox_server(tmp_path / "a", *sandbox_flags(**EAGLE)) as a, \
            own_sandbox_server(tmp_path / "b", *sandbox_flags(**EAGLE)) as b:
        c = BoxConsole(port=a.port, server_start_timeout=120)
        try:
            assert c.state.server().pid == a.pid and c.state.seen.pid == a.pid
            os.killpg(a.pid, signal.SIGKILL)  # kill -9 of the console's server, from outside
            a.proc.wait(timeout=30)
            deadline = time.monotonic() + 30
            while any(s.port == a.port for s in c.state.servers()) and time.monotonic() < deadline:
                time.sleep(0.5)
            c.refresh()
            page = c.status_html.value
            assert f"The server on port {a.port} (pid {a.pid}) is not running any more" in page, page
            last = [ln for ln in a.log().splitlines() if ln.strip()][-1]
            assert html_escape(last) in page and str(a.log_path) in page
            assert "Pick one" not in page and f"port {b.port}" in page  # listed, not taken
            assert c.state.port == a.port
            from workbench.errors import ServerChoiceError
            from workbench.lab.state import ServerGone

            with pytest.raises(ServerGone, match=f"port {a.port} \\(pid {a.pid}\\) is not running any more"):
                c.state.server()
            assert c.stop() is False
            assert c.status_line.value.startswith(f"nothing was running (the server on port {a.port}, pid {a.pid}, "
                                                   "had already exited)"), c.status_line.value
            # after the console's own stop the port is free: plain "no server on port P", still no other taken
            with pytest.raises(ServerChoiceError) as err:
                c.state.server()
            assert not isinstance(err.value, ServerGone) and f"no SGLang server runs on port {a.port}" in str(err.value)
            assert c.state.port == a.port
        finally:
            c.close()


# -- bad port values in the console notebook (11) ---------------------------------------------


@pytest.mark.parametrize("port, why", [
    ("abc", "got 'abc': text that is no number"),
    (0, "got 0: outside 1-65535, the range of TCP ports"),
    (70000, "got 70000: outside 1-65535, the range of TCP ports"),
    (-1, "got -1: outside 1-65535, the range of TCP ports"),
    ("70000", "got '70000': outside 1-65535, the range of TCP ports"),
    (True, "got True: a bool, not a number"),
    (31555.0, "got 31555.0: a float; write port = 31555"),
    (0.5, "got 0.5: a float, not a port number"),
    ([31555], "got [31555]: a list, not a number"),
])
def test_a_bad_port_is_one_clear_error(port, why):
    from workbench.errors import ServerChoiceError
    from workbench.lab.console import box_console

    with pytest.raises(ServerChoiceError) as err:
        box_console(port=port)
    assert str(err.value) == f"port must be a TCP port number 1-65535 or None, {why} (local)"


def test_a_port_given_as_digits_is_that_number():
    assert BoxState("local", "31555").port == 31555 and BoxState("local", " 8 ").port == 8
    assert BoxState("local", None).port is None and BoxState("local", 65535).port == 65535


@pytest.mark.slow  # starts a kernel
@pytest.mark.parametrize("port", ["abc", 70000, 31555.0])
def test_box_console_notebook_shows_a_bad_port_as_one_line(port, execute_notebook, tmp_path, state_dir):
    import nbformat
    from papermill.exceptions import PapermillExecutionError

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "box_console.ipynb"
    with pytest.raises(PapermillExecutionError) as err:
        execute_notebook(root / "notebooks" / "box_console.ipynb", out, parameters={"port": port}, cwd=str(tmp_path))
    assert err.value.ename == "NotebookMessage"
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert len(errors) == 1
    lines = errors[0]["traceback"]
    from workbench.errors import ServerChoiceError
    from workbench.lab.state import port_value

    with pytest.raises(ServerChoiceError) as expected:
        port_value(port, where="local")
    assert lines == [f"ServerChoiceError: {expected.value}"]


# -- the Server tab's check (9, 10) -------------------------------------------------------------


def test_every_check_replaces_the_findings_and_hides_launch_anyway(free_port, tmp_path, state_dir):
    """No server is started: a command the doctor refuses (its draft path does not exist), then
    commands that do not parse, then --port values that are no port or not the console's."""
    from workbench.engine.launch import LaunchCommand
    from workbench.sandbox_box import sandbox_launch_command

    good = sandbox_launch_command(port=free_port)
    draft = LaunchCommand.parse(good).get("--speculative-draft-model-path")
    refused = good.replace(draft, str(tmp_path / "no-such-draft"))
    c = BoxConsole(port=free_port, server_start_timeout=60)
    try:
        assert c.start(refused) is None and "Launch refused" in c.status_line.value
        assert c.last_findings and c.last_findings[0].rule in c.findings_html.value
        assert c.force_button.layout.display is None
        for bad in ("", "   \n  ", "python3 -m http.server 30000", "sleep 600", 'python -m x --a "b'):
            c.command.value = refused  # back to the refused command, "Launch anyway" shown again
            c.force_button.layout.display = None
            assert c.start(bad) is None
            assert c.findings_html.value == "" and c.last_findings == [], (bad, c.findings_html.value)
            assert c.force_button.layout.display == "none", bad
            assert "Not launched" in c.status_line.value and "LaunchCommandError" not in c.status_line.value
        c.force_button.layout.display = None
        c.command.value = refused + " "  # an edit hides "Launch anyway"
        assert c.force_button.layout.display == "none"
        for port in ("99999", "abc", "0"):
            assert c.start(good.replace(f"--port {free_port}", f"--port {port}")) is None
            assert f"--port {port} is not a TCP port number: give a whole number 1-65535" in c.status_line.value
            assert "Error" not in c.status_line.value and c.findings_html.value == ""
        other = free_port + 1 if free_port < 65535 else free_port - 1
        assert c.start(good.replace(f"--port {free_port}", f"--port {other}")) is None
        assert (f"this console drives the server on port {free_port}; to run a server on {other} open a console "
                f"with port = {other}") in c.status_line.value
        assert not [s for s in c.state.servers() if s.port in (free_port, other)]
    finally:
        c.close()
    from workbench.session.journal import Journal

    box = connect("local")
    try:
        assert not Journal(box).pending
    finally:
        box.close()


def test_line_errors_in_a_file_with_probes_say_so_with_the_original_line_count(probe_state):
    state = probe_state
    entry = state.code_path().entry("draft-fc-width-check")
    original_lines = len(Path(entry.file).read_text().splitlines())
    pane = ProbesPane(state)
    source = SourcePane(state, context=2)
    assert pane.add_recipe("draft-input-width") is not None, pane.status.value
    now_lines = len(Path(entry.file).read_text().splitlines())
    assert now_lines > original_lines
    # the map is read again from the patched file: its line is where the statement is now
    moved = state.code_path().entry("draft-fc-width-check")
    text_now = Path(entry.file).read_text().splitlines()
    assert moved.line > entry.line
    assert text_now[moved.line - 1].strip() == entry.code.strip()
    root = str(state.engine().root).rstrip("/")
    rel = entry.file[len(root) + 1:]
    assert pane.add_expression(rel, 9999999, ["x"]) is None
    status = pane.status.value
    assert "AnchorNotFound" in status and f"it has {now_lines} lines" in status
    assert (f"the file has 1 probe(s) in it: {now_lines} lines now, {original_lines} in the original file"
            in status), status
    block = remote_probes.probe_blocks(Path(entry.file).read_text())
    assert len(block) == 1
    assert pane.add_expression(rel, block[0][0] + 1, ["x"]) is None
    assert "inside another probe's block" in pane.status.value and "in the original file" in pane.status.value
    # the Source tab: a line outside the file, and any excerpt of the file, say the file has probes
    assert source.show(entry.file, 9999999) is None
    assert (f"this file has 1 probe(s) in it: the line numbers are the file's with them ({now_lines} lines; "
            f"{original_lines} in the original file)") in source.status.value
    assert source.show_entry("draft-fc-width-check") is not None
    assert html_escape(entry.code.strip()) in source.view.value and f"{entry.file}:{moved.line}" in source.status.value
    assert "in the original file" in source.status.value
    assert pane.revert_all() is not None and remote_probes.list_probes(state.box) == []
    assert source.show(entry.file, entry.line) is not None and "probe(s)" not in source.status.value
    assert remote_probes.original_line_count(Path(entry.file).read_text()) == original_lines


# -- the journal's long commands (15) and the Source tab's entries (7) -----------------------------


def test_long_commands_are_cut_between_arguments_with_an_ellipsis():
    from workbench.lab.console import shorten_command

    short = ["python", "-m", "sglang.launch_server", "--port", "30000"]
    assert shorten_command(short) == "python -m sglang.launch_server --port 30000"
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "/models/" + "x" * 60 + "/Llama-3.1-8B-Instruct",
            "--speculative-draft-model-path", "/models/" + "y" * 60 + "/EAGLE3-LLaMA3.1-Instruct-8B"]
    full = " ".join(argv)
    got = shorten_command(argv, limit=120)
    head = " ".join(argv[:4])  # the model path would cross the limit: cut before it, not inside it
    assert got == f"{head} … ({len(full) - len(head)} more characters)"
    assert shorten_command(["/" + "z" * 50], limit=10) == "/" + "z" * 9 + "… … (41 more characters)"


def test_the_source_tab_has_its_entry_buttons_once_shown(sandbox_server):
    srv = sandbox_server("EAGLE3")
    c = BoxConsole(port=srv.port)
    try:
        index = c.widget.titles.index("Source")
        pane = c.panes[index - 3][1]
        assert isinstance(pane, SourcePane)
        c.widget.selected_index = index  # what a click on the tab does
        keys = [b._dom_classes for b in pane.entries.children]
        cmap = c.state.code_path()
        assert len(keys) == len(cmap.entries) > 0, pane.status.value
        assert all(f"wb-source-entry-{e.key}" in k for e, k in zip(cmap.entries, keys))
    finally:
        c.close()
