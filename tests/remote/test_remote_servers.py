"""Detached servers: launch, wait_healthy, find_servers, stop_server, with a real HTTP server."""

import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from remote import PortInUse, ServerDied, ServerStartTimedOut
from remote.errors import ServerError

pytestmark = pytest.mark.slow  # every test here launches (or tries to launch) a detached server


@pytest.fixture
def launched(box):
    """Servers launched by a test; stopped afterwards whatever happens."""
    handles = []
    yield handles
    for h in handles:
        box.stop_server(h, grace=1)


def _session_id(pid):
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return int(text[text.rfind(")") + 2 :].split()[3])


def test_launch_wait_find_stop(box, free_port, tiny_server_argv, launched, tmp_path):
    log = tmp_path / "logs dir" / "tiny server.log"
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--delay", "0.3"], port=free_port,
                          log_path=log, cwd=tmp_path, env={"EWB_MARK": "1"})
    launched.append(h)
    assert h.pid == h.pgid and h.port == free_port and h.log_path == str(log)
    assert int(open(h.pid_path).read()) == h.pid
    assert os.getpgid(h.pid) == h.pid and _session_id(h.pid) == h.pid  # own session and group
    waited = box.wait_healthy(h, timeout=20)
    assert 0 <= waited < 20
    assert httpx.get(box.url(free_port) + "/health", trust_env=False).status_code == 200
    assert any("listening on" in line for line in box.tail(h.log_path, 10))

    found = [s for s in box.find_servers() if s.pid == h.pid]
    assert len(found) == 1
    s = found[0]
    assert s.port == free_port and s.pgid == h.pid
    assert s.log_path == str(log) and s.cwd == str(tmp_path)
    assert s.exe and os.path.basename(s.exe).startswith("python")
    assert "tiny_launch_server.py" in s.command_line
    assert box.find_servers(r"no-such-server-pattern-xyz") == []

    stopped = box.stop_server(h, grace=5)
    assert stopped.how == "terminated" and stopped.signals == ("TERM",)
    assert not box.is_alive(h.pid)
    assert not os.path.exists(h.pid_path)
    assert box.stop_server(h).how == "already-exited"


def test_port_in_use_is_refused_before_launching(box, tiny_server_argv, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert box.port_in_use(port)
        log = tmp_path / "never.log"
        with pytest.raises(PortInUse) as info:
            box.launch_server([*tiny_server_argv, "--port", str(port)], port=port, log_path=log)
        assert info.value.port == port and str(port) in str(info.value)
        assert not log.exists()


def test_server_that_dies_raises_server_died_with_log_tail(box, free_port, tiny_server_argv, launched):
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--die-after", "0.2"], port=free_port)
    launched.append(h)
    with pytest.raises(ServerDied) as info:
        box.wait_healthy(h, timeout=20, poll_interval=0.05)
    assert any("fatal: tiny server gives up" in line for line in info.value.log_tail)
    assert "fatal: tiny server gives up" in str(info.value)
    assert h.log_path.startswith(box.state_dir)


def test_exec_failure_is_reported_as_server_died(box, free_port, launched):
    h = box.launch_server(["/nonexistent/launch_server-binary", "--port", str(free_port)], port=free_port)
    launched.append(h)
    with pytest.raises(ServerDied) as info:
        box.wait_healthy(h, timeout=10, poll_interval=0.05)
    assert "nonexistent" in "\n".join(info.value.log_tail)


def test_slow_server_times_out_with_log_tail(box, free_port, tiny_server_argv, launched):
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--delay", "60"], port=free_port)
    launched.append(h)
    seen = []
    with pytest.raises(ServerStartTimedOut) as info:
        box.wait_healthy(h, timeout=1, poll_interval=0.1, on_log=seen.append)
    assert info.value.timeout == 1
    assert any("tiny server starting" in line for line in info.value.log_tail)
    assert "tiny server starting" in "".join(seen)


def test_stop_kills_the_group_after_grace(box, free_port, tiny_server_argv):
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--ignore-term", "--child"], port=free_port)
    box.wait_healthy(h, timeout=20, poll_interval=0.05)
    child = next(int(line.split()[-1]) for line in box.tail(h.log_path, 20) if line.startswith("child pid"))
    assert os.getpgid(child) == h.pgid
    stopped = box.stop_server(h, grace=0.5)
    assert stopped.how == "killed" and stopped.signals == ("TERM", "KILL")
    assert not box.is_alive(h.pid) and not box.is_alive(child)


def test_a_stopped_server_is_continued_so_it_handles_sigterm(box, free_port, tiny_server_argv):
    """A SIGSTOPped server (it accepts connections and answers nothing) keeps SIGTERM pending:
    stop_server continues it right after, so it terminates within the grace period instead of
    waiting it out for SIGKILL."""
    import signal

    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--child"], port=free_port)
    box.wait_healthy(h, timeout=20, poll_interval=0.05)
    box.transport.kill(h.pgid, signal.SIGSTOP, group=True)
    deadline = time.monotonic() + 10
    while box.process(h.pid).state not in ("T", "t"):
        assert time.monotonic() < deadline, "the server never stopped"
        time.sleep(0.02)
    started = time.monotonic()
    stopped = box.stop_server(h, grace=20)
    assert stopped.how == "terminated" and stopped.signals == ("TERM", "CONT"), stopped
    assert time.monotonic() - started < 10 and not box.is_alive(h.pid)


def test_shell_text_launch_and_stop_by_pid(box, free_port, tiny_server_argv):
    cmd = " ".join(f"'{a}'" for a in tiny_server_argv) + f" --port {free_port}"
    h = box.launch_server(cmd, port=free_port)
    assert h.argv == (cmd,)
    box.wait_healthy(h, timeout=20, poll_interval=0.05)
    assert box.stop_server(h.pid, grace=5).how == "terminated"


def test_server_in_the_callers_group_is_stopped_alone(box, free_port, tiny_server_argv):
    if box.name != "local":
        pytest.skip("the caller's process group only exists on the local box")
    proc = subprocess.Popen([*tiny_server_argv, "--port", str(free_port)], stderr=subprocess.DEVNULL)
    try:
        assert os.getpgid(proc.pid) == os.getpgrp()
        stopped = box.stop_server(proc.pid, grace=5)
        assert stopped.how == "terminated" and proc.wait(timeout=5) == -15
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(ServerError):
        box.stop_server(1)


def test_append_log_keeps_earlier_text(box, free_port, tiny_server_argv, tmp_path):
    log = tmp_path / "kept.log"
    log.write_text("earlier run\n")
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port)], port=free_port, log_path=log, append_log=True)
    try:
        box.wait_healthy(h, timeout=20, poll_interval=0.05)
        assert log.read_text().startswith("earlier run\ntiny server starting")
    finally:
        box.stop_server(h, grace=2)


def test_server_outlives_the_session_that_launched_it(box, free_port, tiny_server_argv, tmp_path):
    """A separate Python process launches the server and exits; the server keeps serving."""
    script = textwrap.dedent(
        f"""
        import sys
        from remote import connect
        box = connect({box.name!r}, state_dir={str(tmp_path / 'other-state')!r})
        h = box.launch_server({tiny_server_argv!r} + ["--port", "{free_port}"], port={free_port})
        print(h.pid)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.strip())
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(box.url(free_port) + "/health", trust_env=False, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)
        assert box.is_alive(pid)
        assert [s.pid for s in box.find_servers(rf"--port {free_port}\b")] == [pid]
    finally:
        box.stop_server(pid, grace=2)


def _pid_after(box, h, label, timeout=20):
    """The pid the tiny server printed as ``LABEL pid N`` in its log."""
    deadline = time.monotonic() + timeout
    while True:
        for line in box.tail(h.log_path, 40):
            if line.startswith(f"{label} pid "):
                return int(line.split()[-1])
        assert time.monotonic() < deadline, f"no '{label} pid' line in {h.log_path}"
        time.sleep(0.05)


def test_find_lists_the_server_once_not_its_forked_and_multiprocessing_children(box, free_port, tiny_server_argv,
                                                                                  launched):
    """The pattern matches every process the server's interpreter runs (as the default pattern's
    ``vllm`` matches vLLM's helpers through the venv's path): the forked child (the same argv) and
    the multiprocessing spawn child and resource tracker (``python -c "from multiprocessing…"``) are
    part of the server, listed in its ``children``, not as servers."""
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--fork-child", "--mp-child"], port=free_port)
    launched.append(h)
    box.wait_healthy(h, timeout=30, poll_interval=0.05)
    fork_child, mp_child = _pid_after(box, h, "fork child"), _pid_after(box, h, "mp child")
    tree = {p.pid: p for p in box.process_tree(h.pid)}
    tracker = [pid for pid, p in tree.items() if any("resource_tracker" in a for a in p.argv)]
    assert len(tracker) == 1 and {fork_child, mp_child} <= set(tree)
    assert tree[fork_child].argv == tree[h.pid].argv  # a fork keeps the argv
    assert any("--multiprocessing-fork" in a for a in tree[mp_child].argv)
    mine = [s for s in box.find_servers(re.escape(sys.executable)) if s.pid in tree]
    assert [s.pid for s in mine] == [h.pid]
    assert set(mine[0].children) == {fork_child, mp_child, *tracker}
    assert mine[0].engine is None  # the tiny server is no engine's launcher
    stopped = box.stop_server(h, grace=5)
    assert set(stopped.stopped_pids) == {h.pid, fork_child, mp_child, *tracker}
    assert not any(box.is_alive(p) for p in stopped.stopped_pids)


def test_stop_reaches_a_descendant_that_left_the_process_group(box, free_port, tiny_server_argv, launched):
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--child", "--child-own-session"],
                          port=free_port)
    launched.append(h)
    box.wait_healthy(h, timeout=30, poll_interval=0.05)
    child, detached = _pid_after(box, h, "child"), _pid_after(box, h, "detached child")
    assert box.process(detached).pgid == detached != h.pgid  # its own session and group
    assert box.process(child).pgid == h.pgid
    stopped = box.stop_server(h, grace=5)
    assert stopped.how == "terminated"
    assert stopped.outside_group == (detached,)
    assert set(stopped.stopped_pids) == {h.pid, child, detached}
    assert not box.is_alive(detached) and not box.is_alive(child) and not box.is_alive(h.pid)
    assert not box.port_in_use(free_port)


def test_find_reads_the_port_from_the_listening_socket_when_the_argv_names_none(box, free_port, tiny_server_argv,
                                                                                 launched):
    h = box.launch_server([*tiny_server_argv, "--listen", str(free_port)], port=free_port)
    launched.append(h)
    box.wait_healthy(h, timeout=30, poll_interval=0.05)
    (s,) = [s for s in box.find_servers() if s.pid == h.pid]
    assert "--port" not in s.argv
    assert s.port == free_port and s.listening_ports == (free_port,)


LEADER_EXITS_FIRST = textwrap.dedent("""
    import ctypes, signal, threading, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the thread left behind outlives a SIGTERM
    threading.Thread(target=time.sleep, args=(120,)).start()
    print("ready", flush=True)
    ctypes.CDLL(None).pthread_exit(None)  # the leader thread exits; the process goes on
""")


def test_a_process_whose_leader_thread_exited_first_is_not_taken_for_stopped(box):
    """A leader thread that exited while another thread of its process runs shows ``Z``: the process
    still holds its files and port, so it is alive (ProcessInfo.threads 2), and stop_server waits
    for the whole process (here SIGTERM is ignored: SIGKILL after the grace), not the leader alone.
    (A server stopped this way was reported stopped while its threads were still exiting.)"""
    proc = subprocess.Popen([sys.executable, "-c", LEADER_EXITS_FIRST], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10
        while (info := box.process(proc.pid)) is None or info.state != "Z":
            assert time.monotonic() < deadline, info
            time.sleep(0.05)
        assert info.threads == 2 and not info.exited
        assert box.is_alive(proc.pid) and box.group_alive(proc.pid)
        stopped = box.stop_server(proc.pid, grace=1)
        assert stopped.how == "killed" and stopped.signals == ("TERM", "KILL"), stopped
        assert proc.wait(timeout=10) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
