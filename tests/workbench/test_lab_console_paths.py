"""The box console's paths that tests/workbench/test_lab_console.py does not walk, in-process on
sandbox servers of the tests' own: "Launch anyway" after a refusal, a command the doctor passes
but the server dies on while starting (the error and that server's log tail shown), and the
restore at interpreter exit (a child python opens a console, restarts the server and exits).
Each leaves the box as found: the original argv running, no probe, the journal clean."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from remote import connect
from remote import probes as remote_probes
from remote.errors import ServerDied, ServerStartStuck, ServerStartTimedOut
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.engine.locate import running_servers
from workbench.errors import LaunchRefused
from workbench.lab.console import BoxConsole
from workbench.session import Journal
from testkit.engine_copy import checkout_dir

ROOT = Path(__file__).resolve().parents[2]


def _text(value: str) -> str:
    """What the page shows of an HTML widget's value: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", value))


def _as_found(box, port: int, original: tuple, not_pid: int | None = None) -> int:
    """Assert the box runs the original argv (alone) on ``port``, no probe, the journal clean;
    returns the pid of that server."""
    now = running_servers(box, port=port)
    assert [tuple(s.argv) for s in now] == [original], now
    if not_pid is not None:
        assert now[0].pid != not_pid
    assert remote_probes.list_probes(box) == []
    assert not Journal(box).pending
    return now[0].pid


def _stop_relaunched(box, port: int, keep_pid: int) -> None:
    for s in running_servers(box, port=port):
        if s.pid != keep_pid:  # what a restore relaunched (own_sandbox_server stops its own group)
            box.stop_server(s.pid, grace=10)


def test_launch_anyway_after_a_refusal_launches_and_the_box_is_restored(own_sandbox_server, tmp_path, state_dir):
    box = connect("local")
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        c = BoxConsole(port=srv.port, server_start_timeout=120)
        try:
            original = tuple(c.state.server().argv)
            draft = original[original.index("--speculative-draft-model-path") + 1]
            bad = c.command.value.replace(draft, str(tmp_path / "no-such-draft"))
            assert bad != c.command.value
            assert c.restart(bad) is None
            assert isinstance(c.last_error, LaunchRefused)
            assert c.force_button.layout.display is None  # "Launch anyway" appears only now
            assert "Launch refused" in c.status_line.value
            assert [s.pid for s in running_servers(box, port=srv.port)] == [srv.pid]  # nothing touched
            c.force_button.click()  # what clicking "Launch anyway" does: the command box's text, forced
            # the engine fails the way it fails without a draft: the launch was made, and it died
            assert isinstance(c.last_error, ServerDied), c.status_line.value
            assert c.session.guard.checks[-1].decision == "overridden"
            assert c.session.guard.checks[-1].findings  # the findings it overrode, recorded
            assert c.force_button.layout.display == "none"
            shown = _text(c.status_line.value)
            assert "ServerDied" in shown and "--- last log lines ---" in shown
            assert c.last_error.log_tail and c.last_error.log_tail[-1].strip() in shown
            assert running_servers(box, port=srv.port) == []  # the original stopped, the forced one dead
            assert not box.is_alive(srv.pid)
            report = c.restore()
            assert report is not None and report.clean, c.restore_html.value
            back = _as_found(box, srv.port, original, not_pid=srv.pid)
            assert "relaunched" in c.restore_html.value and c.journal_lines() == []
        finally:
            c.close()
            _stop_relaunched(box, srv.port, srv.pid)
    box.close()


def test_a_server_that_dies_on_start_shows_the_error_and_its_log_tail(own_sandbox_server, tmp_path, state_dir):
    """``--context-length 1``: the doctor has nothing against it; the sandbox server (as SGLang)
    loads, fails its start-up warm-up request (prompt longer than the context) and is killed."""
    box = connect("local")
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        c = BoxConsole(port=srv.port, server_start_timeout=120)
        try:
            original = tuple(c.state.server().argv)
            dying = c.command.value.strip() + " --context-length 1"
            assert c.restart(dying) is None
            exc = c.last_error
            # dead during start-up, or (its scheduler stuck in the failing warm-up) /health_generate
            # 503 first: the engine's two ways of failing a start
            assert isinstance(exc, (ServerDied, ServerStartTimedOut)), c.status_line.value
            assert c.session.guard.checks[-1].decision == "allowed"  # the doctor passed it
            assert c.force_button.layout.display == "none"  # nothing to override
            shown = _text(c.status_line.value)
            assert shown.startswith(type(exc).__name__), shown
            log = [line for line in Path(exc.log_path).read_text(errors="replace").splitlines() if line.strip()]
            assert any("maximum context length of 1 tokens" in line for line in log)
            for line in log[-3:]:  # the last lines of that server's own log, in the console
                assert line.strip() in shown, (line, shown)
            assert "maximum context length of 1 tokens" in shown
            # nothing of the console's left running: the dead server's group stopped, not journalled
            assert running_servers(box, port=srv.port) == [] and not box.is_alive(exc.pid)
            assert Journal(box).data.get("started_servers") in (None, [])
            assert any("stopped the original server" in x for x in c.journal_lines())
            report = c.restore()
            assert report is not None and report.clean, c.restore_html.value
            _as_found(box, srv.port, original, not_pid=srv.pid)
        finally:
            c.close()
            _stop_relaunched(box, srv.port, srv.pid)
    box.close()


def test_a_failed_start_shows_the_log_as_it_is_after_the_stop(tmp_path, free_port, state_dir):
    """The tail a ``ServerStartTimedOut`` carries is the log when the wait gave up; the server
    was stopped after that and its log has more (here a real file on the local box, as a server
    stuck in its warm-up leaves it): the console shows both, the later lines under
    ``wb-console-log-tail``; a log gone since is one line saying it could not be read."""
    log = tmp_path / "server.log"
    log.write_text("[t] Uvicorn running on http://127.0.0.1:1\n[t] ValueError: Requested token count exceeds "
                   "the model's maximum context length of 1 tokens.\n[t] kill_process_tree called: parent_pid=7\n")
    stale = ["[t] Uvicorn running on http://127.0.0.1:1"]
    c = BoxConsole(port=free_port)
    try:
        c._show_error(ServerStartStuck("generation is stuck", pid=7, log_path=str(log), log_tail=stale, timeout=1.0,
                                       url="http://127.0.0.1:1", last="503"))
        value = c.status_line.value
        assert _text(value).startswith("ServerStartStuck")
        [later] = re.findall(r"<pre class='wb-console-log-tail'[^>]*>(.*?)</pre>", value, re.S)
        assert _text(later).splitlines() == log.read_text().splitlines()
        assert f"({log}, after it was stopped)" in _text(value)
        log.unlink()
        c._show_error(ServerDied("exited with 1", pid=7, log_path=str(log), log_tail=stale))
        assert f"the log {log} could not be read again: RemoteFileNotFound" in _text(c.status_line.value)
        # a tail that is already the whole story is not repeated
        log.write_text(stale[0] + "\n")
        c._show_error(ServerDied("exited with 1", pid=7, log_path=str(log), log_tail=stale))
        assert "wb-console-log-tail" not in c.status_line.value
    finally:
        c.close()


CHILD = textwrap.dedent("""
    import json, sys
    from workbench.lab.console import BoxConsole

    port = int(sys.argv[1])
    c = BoxConsole(port=port, server_start_timeout=120)
    edited = c.command.value.replace("--speculative-algorithm EAGLE ", "--speculative-algorithm EAGLE3 ")
    handle = c.restart(edited)
    print(json.dumps({"pid": handle.pid if handle else None, "status": c.status_line.value}), flush=True)
    sys.exit(0)  # a normal exit, as a kernel shut down: BoxSession's atexit puts the box back
""")


def test_interpreter_exit_puts_the_box_back(own_sandbox_server, tmp_path, state_dir):
    box = connect("local")
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        original = tuple(running_servers(box, port=srv.port)[0].argv)
        back = None
        try:
            child = subprocess.run([sys.executable, "-c", CHILD, str(srv.port)], capture_output=True, text=True,
                                   timeout=400, cwd=str(checkout_dir()))
            assert child.returncode == 0, child.stderr[-2000:]
            said = json.loads(child.stdout.strip().splitlines()[-1])
            assert said["pid"] is not None, said["status"]
            assert not box.is_alive(said["pid"])  # the child's EAGLE3 server is gone
            assert "[eagle-workbench restore] relaunched" in child.stderr, child.stderr[-2000:]
            back = _as_found(box, srv.port, original, not_pid=srv.pid)
            assert back != said["pid"]
        finally:
            _stop_relaunched(box, srv.port, srv.pid)
    box.close()
