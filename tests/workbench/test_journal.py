"""workbench.journal: the diagnosis journal on the box and restore_box, with real processes.

Every test has its own box state directory (so its own journal and probe journal); the ``slow``
ones start the tiny HTTP server of the remote tests as the "original" SGLang server.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote import connect
from testkit.ports import free_port
from remote import probes as remote_probes
from workbench.session.journal import Journal, JournalError, journal_path, restore_box

TINY_SERVER = Path(__file__).resolve().parent.parent / "remote" / "tiny_launch_server.py"
MARK = "EWB_JOURNAL_TEST_MARK"


_PORTS: list[int] = []  # ports of the tiny servers the current test may have started


def _free_port() -> int:
    """A free port (``testkit.ports.free_port``), recorded for ``jbox``'s clean-up."""
    port = free_port()
    _PORTS.append(port)
    return port


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().split("=", 1) for item in raw.split(b"\0") if b"=" in item)


@pytest.fixture
def jbox(tmp_path):
    """A local box with its own state dir; at the end the tiny servers this test ran are stopped
    (only those on this test's ports: other tests may run tiny servers concurrently)."""
    _PORTS.clear()
    with connect("local", state_dir=tmp_path / "box-state", python=sys.executable) as b:
        yield b
        for proc in b.find_servers(re.escape(str(TINY_SERVER))):
            if proc.port in _PORTS:
                b.stop_server(proc, grace=2)


class Original:
    """The "server as found": a tiny server in its own cwd, with a custom env var and a log."""

    def __init__(self, box, tmp_path: Path, *, extra=()):
        self.box = box
        self.port = _free_port()
        self.cwd = tmp_path / "server-cwd"
        self.cwd.mkdir(exist_ok=True)
        self.log = tmp_path / "original.log"
        self.argv = [sys.executable, str(TINY_SERVER), "--port", str(self.port), *extra]
        self.handle = box.launch_server(self.argv, port=self.port, log_path=self.log, cwd=self.cwd,
                                        env={MARK: "original-42"})
        box.wait_healthy(self.handle, timeout=20)
        (self.found,) = [s for s in box.find_servers() if s.pid == self.handle.pid]
        self.env = _environ(self.handle.pid)  # what the diagnosis reads from /proc/PID/environ

    def record(self, journal: Journal) -> None:
        journal.record_original(argv=list(self.found.argv), cwd=self.found.cwd, env=self.env, port=self.port,
                                log_path=self.found.log_path, pid=self.found.pid)

    def stop(self, journal: Journal) -> None:
        journal.mark_original_stopped(True)
        self.box.stop_server(self.found.pid, grace=5)
        assert not self.box.port_in_use(self.port)

    def running(self):
        return [s for s in self.box.find_servers() if list(s.argv) == self.argv]


def _probe_file(tmp_path: Path) -> Path:
    path = tmp_path / "engine" / "model.py"
    path.parent.mkdir()
    path.write_bytes(b"def forward(x):\n    y = x * 2\n    return y\n")
    return path


def test_begin_refuses_when_an_earlier_run_left_changes(jbox, tmp_path):
    j = Journal(jbox)
    assert not j.pending
    run_id = j.begin()
    j.record_original(argv=["python", "-m", "sglang.launch_server"], cwd="/", env=None, port=1, log_path=None, pid=2)
    j.mark_original_stopped(True)
    again = Journal(jbox)
    assert again.pending and again.data["run_id"] == run_id
    with pytest.raises(JournalError, match="restore"):
        again.begin()

    other = connect("local", state_dir=tmp_path / "other-state")
    j2 = Journal(other)
    j2.begin()
    j2.add_started(pid=12345, pgid=12345, port=1, argv=["x"], label="probe")
    with pytest.raises(JournalError, match=re.escape(journal_path(other))):
        Journal(other).begin()


def test_mark_stopped_without_original_refuses(jbox):
    j = Journal(jbox)
    j.begin()
    with pytest.raises(JournalError, match="no original server"):
        j.mark_original_stopped(True)
    assert not Journal(jbox).pending


@pytest.mark.slow  # starts tiny servers
def test_restore_relaunches_original_stops_started_reverts_probe(jbox, tmp_path):
    original = Original(jbox, tmp_path)
    old_pid = original.handle.pid
    j = Journal(jbox)
    j.begin()
    original.record(j)
    original.stop(j)
    log_before = original.log.read_bytes()
    assert b"listening on" in log_before

    # a server the diagnosis started on another port, and a probe on engine source
    port2 = _free_port()
    started = jbox.launch_server([sys.executable, str(TINY_SERVER), "--port", str(port2)], port=port2)
    j.add_started(pid=started.pid, pgid=started.pgid, port=port2, argv=list(started.argv), label="probe")
    jbox.wait_healthy(started, timeout=20)
    src = _probe_file(tmp_path)
    sha_before = _sha256(src)
    remote_probes.add_probe(jbox, str(src), before=r"return y", exprs=["y"], tag="jt")
    assert _sha256(src) != sha_before

    report = restore_box(jbox, server_start_timeout=20)
    assert report.clean, report.problems
    text = "\n".join(report.actions)
    assert f"stopped probe server pid {started.pid}" in text
    assert "reverted probe jt" in text
    assert "relaunched the original server" in text

    assert not jbox.is_alive(started.pid)
    assert _sha256(src) == sha_before
    (back,) = original.running()
    assert back.pid != old_pid
    assert list(back.argv) == original.argv
    assert back.cwd == str(original.cwd)
    assert os.readlink(f"/proc/{back.pid}/cwd") == str(original.cwd)
    assert _environ(back.pid)[MARK] == "original-42"
    assert back.log_path == str(original.log)
    log_after = original.log.read_bytes()
    assert log_after.startswith(log_before)
    assert log_after.count(b"tiny server starting") == 2
    assert not Journal(jbox).pending

    # idempotent: nothing left to do, nothing touched
    second = restore_box(jbox, server_start_timeout=20)
    assert (second.actions, second.problems) == ([], [])
    assert [s.pid for s in original.running()] == [back.pid]


@pytest.mark.slow  # starts tiny servers
def test_relaunch_failure_is_reported_and_journal_kept(jbox, tmp_path):
    original = Original(jbox, tmp_path)
    j = Journal(jbox)
    j.begin()
    original.record(j)
    original.stop(j)
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old server's TIME_WAIT
    squatter.bind(("127.0.0.1", original.port))
    squatter.listen()
    try:
        report = restore_box(jbox, server_start_timeout=10)
    finally:
        squatter.close()
    assert not report.clean
    (problem,) = report.problems
    assert "could not relaunch the original server" in problem and str(original.port) in problem
    assert original.running() == []
    assert Journal(jbox).pending  # kept, so a later restore can retry

    retry = restore_box(jbox, server_start_timeout=20)
    assert retry.clean, retry.problems
    assert len(original.running()) == 1
    assert not Journal(jbox).pending


@pytest.mark.slow  # starts tiny servers
def test_restore_does_not_relaunch_when_the_original_argv_already_serves(jbox, tmp_path):
    original = Original(jbox, tmp_path)
    j = Journal(jbox)
    j.begin()
    original.record(j)
    j.mark_original_stopped(True)  # e.g. a restore that timed out while the relaunch was loading
    report = restore_box(jbox, server_start_timeout=20)
    assert report.clean, report.problems
    assert any("already runs" in a and str(original.handle.pid) in a for a in report.actions), report.actions
    assert [s.pid for s in original.running()] == [original.handle.pid]
    assert not Journal(jbox).pending


def test_started_pid_reused_by_another_process_is_left_alone(jbox):
    other = subprocess.Popen(["sleep", "30"])  # in this test's process group, not its own
    try:
        j = Journal(jbox)
        j.begin()
        j.add_started(pid=other.pid, pgid=other.pid, port=None, argv=["old", "server"], label="probe")
        report = restore_box(jbox)
        assert report.clean, report.problems
        assert "another process" in report.actions[0]
        assert other.poll() is None
        assert not Journal(jbox).pending
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow  # starts tiny servers
def test_started_group_whose_leader_died_is_stopped(jbox, tmp_path):
    port = _free_port()
    handle = jbox.launch_server([sys.executable, str(TINY_SERVER), "--port", str(port), "--child"], port=port)
    j = Journal(jbox)
    j.begin()
    j.add_started(pid=handle.pid, pgid=handle.pgid, port=port, argv=list(handle.argv), label="fix")
    jbox.wait_healthy(handle, timeout=20)
    (child_pid,) = [int(m) for m in re.findall(r"child pid (\d+)", Path(handle.log_path).read_text())]
    os.kill(handle.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while jbox.is_alive(handle.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert jbox.is_alive(child_pid)
    report = restore_box(jbox)
    assert report.clean, report.problems
    assert "leftover process group" in report.actions[0]
    assert not jbox.is_alive(child_pid)


@pytest.mark.parametrize("content", [
    b"{not json", b"[1, 2]", b"\xff\xfe\x00garbage", b'{"started_servers": [{"pid": "x"}]}',
    b'{"original_server": {"stopped": true}}',
])
def test_corrupt_journal_raises_with_path(jbox, content):
    path = journal_path(jbox)
    jbox.write_file(path, content, make_dirs=True)
    with pytest.raises(JournalError) as err:
        Journal(jbox)
    assert path in str(err.value)
    with pytest.raises(JournalError, match=re.escape(path)):
        restore_box(jbox)
    assert Path(path).read_bytes() == content  # never overwritten


def test_restore_with_nothing_journalled_writes_nothing(jbox):
    report = restore_box(jbox)
    assert (report.actions, report.problems, report.clean) == ([], [], True)
    assert not Path(journal_path(jbox)).exists()
    assert json.loads(json.dumps(report.to_dict())) == {"actions": [], "problems": [], "clean": True, "launch": None}


@pytest.mark.slow  # starts tiny servers
def test_launch_interrupted_before_its_pid_was_journalled_is_stopped(jbox, tmp_path):
    """begin_launch is written before the server starts; a run killed before end_launch still has
    that server stopped by restore_box (found by its exact argv on its port)."""
    journal = Journal(jbox)
    journal.begin()
    port = _free_port()
    argv = [sys.executable, str(TINY_SERVER), "--port", str(port)]
    journal.begin_launch(port=port, argv=argv, label="probe")
    handle = jbox.launch_server(argv, port=port, log_path=tmp_path / "s.log")
    jbox.wait_healthy(handle, timeout=30)
    assert Journal(jbox).pending
    report = restore_box(jbox)
    assert report.clean, report.problems
    assert any("not yet journalled" in a for a in report.actions)
    assert not jbox.is_alive(handle.pid)
    assert not Journal(jbox).pending


@pytest.mark.slow  # starts tiny servers
def test_a_live_runs_journal_is_not_restored_by_a_concurrent_driver(jbox, tmp_path):
    """Two diagnoses on one box: the second one's driver, cleaning up after its own failure, must
    not undo the first one's changes while the first still runs (its owner pid is alive)."""
    journal = Journal(jbox)
    journal.begin()  # owner: this test process, alive
    port = _free_port()
    argv = [sys.executable, str(TINY_SERVER), "--port", str(port)]
    handle = jbox.launch_server(argv, port=port, log_path=tmp_path / "s.log")
    journal.add_started(pid=handle.pid, pgid=handle.pgid, port=port, argv=argv, label="probe")
    assert Journal(jbox).owner_alive() is True
    report = restore_box(jbox, unless_owner_alive=True)
    assert jbox.is_alive(handle.pid) and Journal(jbox).pending
    assert "still running" in report.actions[0]
    # the owner gone (recorded pid no longer exists): the same call restores
    data = Journal(jbox).data
    data["owner"]["pid"] = 2 ** 22 + 12345
    jbox.write_file(journal_path(jbox), __import__("json").dumps(data))
    assert Journal(jbox).owner_alive() is False
    report = restore_box(jbox, unless_owner_alive=True)
    assert report.clean and not jbox.is_alive(handle.pid) and not Journal(jbox).pending
