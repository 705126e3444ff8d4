"""The run's watchdog on the box (issue 26 part 2: ``workbench.session.watchdog``), on the local box
with real processes: a driver (``testkit/watchdog_driver.py``) that changes the box through the
library is SIGKILLed at each moment that matters, and the watchdog alone puts the box back; it
never acts while the run's heartbeat lives (a driver on "another machine", whose heartbeat is its
only sign of life, also across a pause shorter than the threshold); it exits at once when the run
ends; two watchdogs never act on one journal; its restore and ``restore_box`` agree on the same
journal. The servers are the remote tests' tiny HTTP server. The same over the loopback sshd with
the sandbox servers: ``tests/integration/test_watchdog_ssh.py``."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from remote import connect
from remote import probes as remote_probes
from remote.box import Box
from testkit.ports import free_port
from testkit.watchdogs import driver_until_ready, watchdog_pids
from workbench.errors import DiagnosisError, WatchdogError
from workbench.session import runlock, watchdog, watchdog_box
from workbench.session.box_session import MAX_RUN_SECONDS
from workbench.session.journal import Journal, journal_path, restore_box

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "remote" / "tiny_launch_server.py"
DRIVER = ROOT / "tests" / "testkit" / "watchdog_driver.py"
MARK = "EWB_WATCHDOG_TEST_MARK"
AFTER = 2.0  # seconds of silence before a test's watchdog acts
PROBED = b"def forward(x):\n    y = x * 2\n    return y\n"


# -- helpers -------------------------------------------------------------------------------------


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait(what, timeout: float, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            return value
        time.sleep(step)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


class Box0:
    """A local box with its own state dir, an "original" tiny server (own cwd, env, log) and a
    probe target; at the end every tiny server on this test's ports is stopped."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.state = tmp_path / "box-state"
        self.box = connect("local", state_dir=self.state, python=sys.executable)
        self.port, self.fix_port = free_port(), None
        self.cwd = tmp_path / "server-cwd"
        self.cwd.mkdir()
        self.log = tmp_path / "original.log"
        self.argv = [sys.executable, str(TINY), "--port", str(self.port)]
        self.probe_file = tmp_path / "engine" / "model.py"
        self.probe_file.parent.mkdir()
        self.probe_file.write_bytes(PROBED)
        self.probe_sha = _sha(self.probe_file)
        self.original_pid = None

    def start_original(self) -> int:
        handle = self.box.launch_server(self.argv, port=self.port, log_path=self.log, cwd=self.cwd,
                                        env={MARK: "original-42"})
        self.box.wait_healthy(handle, timeout=20)
        self.original_pid = handle.pid
        return handle.pid

    def fix_argv(self) -> list[str]:
        return [sys.executable, str(TINY), "--port", str(self.port), "--child"]

    def running(self, argv) -> list:
        return [s for s in self.box.find_servers(re.escape(str(TINY))) if list(s.argv) == list(argv)]

    def journal(self) -> dict:
        path = Path(journal_path(self.box))
        return json.loads(path.read_text()) if path.exists() else {}

    def close(self) -> None:
        for proc in self.box.find_servers(re.escape(str(TINY))):
            if proc.port == self.port:
                self.box.stop_server(proc, grace=2)
        for pid in watchdog_pids(str(self.state)):
            os.kill(pid, signal.SIGKILL)
        self.box.close()


@pytest.fixture
def b0(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "box-state"))
    b = Box0(tmp_path)
    yield b
    b.close()


def _driver(b: Box0, stage: str, *, mode: str = "low", host: str = "local", after: float = AFTER,
            extra=(), env_extra=None) -> tuple[subprocess.Popen, dict]:
    """Start the driver up to ``stage``; returns it and what it said (run id, watchdog pid, fix pid)."""
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(b.state), PYTHONPATH=str(ROOT), **(env_extra or {}))
    proc = subprocess.Popen([sys.executable, str(DRIVER), mode, host, "--port", str(b.port), "--after", str(after),
                             "--probe-file", str(b.probe_file), "--stage", stage, "--fix-argv",
                             json.dumps(b.fix_argv()), *extra],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, driver_until_ready(proc, stage)


def _kill(proc: subprocess.Popen) -> float:
    proc.kill()
    proc.wait(timeout=10)
    return time.monotonic()


def _restored(b: Box0):
    """The box as the watchdog leaves it: journal emptied, lock free, original serving, report written."""
    report = Path(watchdog.report_path(b.box))
    return (b.journal() == {} and not Path(runlock.lock_path(b.box)).exists() and report.exists()
            and _healthy(b.port) and b.running(b.argv))


def _assert_back_as_found(b: Box0, said: dict) -> dict:
    (orig,) = b.running(b.argv)
    assert orig.pid != b.original_pid  # relaunched
    assert orig.cwd == str(b.cwd) and orig.log_path == str(b.log)
    environ = Path(f"/proc/{orig.pid}/environ").read_bytes().split(b"\0")
    assert f"{MARK}=original-42".encode() in environ
    assert _sha(b.probe_file) == b.probe_sha
    assert remote_probes.list_probes(b.box) == []
    assert not b.running(b.fix_argv())
    if "fix_pid" in said:
        assert not _alive(said["fix_pid"])
    assert b.journal() == {}
    assert not Path(runlock.lock_path(b.box)).exists()
    assert not _alive(said["watchdog_pid"])
    report = watchdog.read_report(b.box)
    assert report["run_id"] == said["run_id"] and report["clean"] is True, report
    return report


# -- one source of truth --------------------------------------------------------------------------


def test_the_box_program_is_standard_library_only():
    """What runs on the box imports nothing but the standard library (no workbench installed there)."""
    tree = ast.parse(Path(watchdog_box.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names and names <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)


def test_the_layout_has_one_source(tmp_path):
    box = connect("local", state_dir=tmp_path)
    layout = watchdog_box.Layout(str(tmp_path))
    assert journal_path(box) == layout.journal
    assert runlock.lock_path(box) == layout.lock
    assert remote_probes.journal_dir(box) == layout.probes
    assert re.match(watchdog_box.WRITE_TEMP_PATTERN, os.path.basename(Box.temp_path_for("/x/journal.json")))
    assert watchdog.MAX_WATCHDOG_AFTER_S == MAX_RUN_SECONDS
    assert watchdog_box.DEFAULTS["after_s"] == watchdog.WATCHDOG_AFTER_S


@pytest.mark.parametrize("value", [-1, 0.5, True, "300", float("inf"), float("nan"), MAX_RUN_SECONDS * 2])
def test_watchdog_after_refuses_what_is_no_silence(value):
    with pytest.raises(DiagnosisError, match="watchdog_after_s must be 0"):
        watchdog.check_watchdog_after(value)


def test_watchdog_after_takes_zero_and_seconds():
    assert watchdog.check_watchdog_after(0) == 0.0
    assert watchdog.check_watchdog_after(300) == 300.0
    assert watchdog.heartbeat_interval(300) == runlock.HEARTBEAT_S
    assert watchdog.heartbeat_interval(3) == pytest.approx(0.6)
    assert watchdog.poll_interval(300) == watchdog.POLL_S


# -- the driver killed at each moment that matters ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["original-stopped", "probe-inserted", "fix-running"])
def test_the_watchdog_restores_the_box_after_the_driver_is_killed(b0, stage, cli):
    b0.start_original()
    proc, said = _driver(b0, stage)
    assert _alive(said["watchdog_pid"])
    killed = _kill(proc)
    assert _wait(lambda: _restored(b0), AFTER + 30), (b0.journal(), watchdog.read_report(b0.box))
    took = time.monotonic() - killed
    report = _assert_back_as_found(b0, said)
    assert AFTER <= took + 0.5, took  # it waited out the silence
    assert report["silent_for_s"] >= AFTER
    assert any(a.startswith("relaunched the original server") for a in report["actions"]), report
    if stage != "original-stopped":
        assert any(a.startswith("reverted probe wd-probe") for a in report["actions"]), report
    if stage == "fix-running":
        assert any(a.startswith("stopped fix server") for a in report["actions"]), report
        # what the next command says, what status and restore show
        code, out, err = cli("status")
        assert code == 0 and "watchdog report (new): the watchdog restored the box" in out, (out, err)
        assert "reverted probe wd-probe" in out and "run lock: free" in out
        code, out, err = cli("restore")
        assert code == 0 and "nothing to restore" in out, (out, err)  # shown once: status showed it
        code, out, err = cli("status")
        assert "last watchdog report:" in out
    # the next run starts clean: no leftover to restore, its own watchdog, released at its end
    proc2, said2 = _driver(b0, "locked")
    try:
        assert said2["run_id"] != said["run_id"] and _alive(said2["watchdog_pid"])
        proc2.stdin.write("release\n")
        proc2.stdin.flush()
        out, err = proc2.communicate(timeout=60)
        assert "released" in out and "restoring it first" not in err, (out, err)
        assert _wait(lambda: not _alive(said2["watchdog_pid"]), 5)
    finally:
        if proc2.poll() is None:
            proc2.kill()


@pytest.mark.slow
def test_workbench_restore_shows_the_report_once(b0, cli):
    b0.start_original()
    proc, said = _driver(b0, "probe-inserted")
    _kill(proc)
    assert _wait(lambda: _restored(b0), AFTER + 30)
    code, out, err = cli("doctor", "--running", "--port", str(b0.port))
    assert "the watchdog restored the box at" in err and "workbench status --host local" in err, err
    code, out, err = cli("restore")
    assert code == 0 and "the watchdog restored the box at" in out and "reverted probe wd-probe" in out, (out, err)
    assert "relaunched the original server" in out
    code, out, err = cli("restore")
    assert "nothing to restore" in out and "watchdog" not in out
    code, out, err = cli("doctor", "--running", "--port", str(b0.port))
    assert "watchdog" not in err


# -- never while the heartbeat lives --------------------------------------------------------------


@pytest.mark.slow
def test_never_acts_while_the_heartbeat_lives_nor_across_a_short_pause(b0):
    """A driver on "another machine" (another boot id in the lock: its process is no sign of life
    to the box, only its heartbeat): a run longer than the threshold, and a pause (a laptop that
    sleeps) shorter than it, leave the box alone; once the heartbeat stops for good, the box is
    restored."""
    b0.start_original()
    proc, said = _driver(b0, "probe-inserted", extra=["--fake-boot"])
    try:
        time.sleep(AFTER * 2.5)
        assert _alive(said["watchdog_pid"]) and b0.journal().get("run_id") == said["run_id"]
        assert _sha(b0.probe_file) != b0.probe_sha  # still probed: the run goes on
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(AFTER * 0.5)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(AFTER * 1.5)
        assert _alive(said["watchdog_pid"]) and not Path(watchdog.report_path(b0.box)).exists()
        assert b0.journal().get("original_server", {}).get("stopped") is True
    finally:
        killed = _kill(proc)
    assert _wait(lambda: _restored(b0), AFTER + 30)
    assert time.monotonic() - killed >= AFTER - 0.5
    _assert_back_as_found(b0, said)


@pytest.mark.slow
def test_a_live_driver_on_the_box_is_never_restored(b0):
    """A driver on the box's own kernel lives by its process: even with its heartbeat stopped
    (SIGSTOP: no thread runs) for longer than the threshold, the watchdog leaves it alone."""
    b0.start_original()
    proc, said = _driver(b0, "original-stopped")
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(AFTER * 2)
        assert _alive(said["watchdog_pid"]) and b0.journal().get("original_server", {}).get("stopped") is True
        assert not Path(watchdog.report_path(b0.box)).exists()
        os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.write("release\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=60)
        assert "released" in out
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait(lambda: not _alive(said["watchdog_pid"]), 3)
    assert not Path(watchdog.report_path(b0.box)).exists()  # it did nothing
    assert b0.running(b0.argv)  # the run's own restore relaunched it


# -- the run's end, two watchdogs ------------------------------------------------------------------


def _lock(box, run_id: str) -> runlock.RunLock:
    return runlock.acquire(box, "local", run_id, heartbeat_s=0.2)


@pytest.mark.slow
def test_it_exits_at_once_when_the_run_releases_the_lock(tmp_path):
    box = connect("local", state_dir=tmp_path / "s")
    lock = _lock(box, "ends1")
    w = watchdog.start_watchdog(box, "ends1", after_s=60, poll_s=0.1)
    assert _alive(w.pid)
    status = runlock.box_status(box)
    assert status.watchdog_alive and status.watchdog["run_id"] == "ends1" and status.watchdog["after_s"] == 60
    lock.release()
    released = time.monotonic()
    assert _wait(lambda: not _alive(w.pid), 3)
    assert time.monotonic() - released < 1.5
    assert not Path(watchdog.report_path(box)).exists()
    assert runlock.box_status(box).watchdog is None  # its state file goes with it
    assert _wait(lambda: sorted(os.listdir(tmp_path / "s" / "diagnosis")) == [], 2), \
        os.listdir(tmp_path / "s" / "diagnosis")  # nothing of it is left: no lock, log or state file


@pytest.mark.slow
def test_two_watchdogs_never_watch_one_journal(tmp_path):
    box = connect("local", state_dir=tmp_path / "s")
    lock = _lock(box, "one1")
    first = watchdog.start_watchdog(box, "one1", after_s=60, poll_s=0.1)
    # launched together for the same run: one watches, the others find it busy
    answers: list = []

    def launch():
        try:
            answers.append(watchdog.start_watchdog(box, "one1", after_s=60, poll_s=0.1, wait_s=0.5))
        except WatchdogError as exc:
            answers.append(exc.status)

    threads = [threading.Thread(target=launch) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == ["busy"] * 3 and watchdog_pids(str(tmp_path / "s")) == [first.pid]
    # a run that does not hold the lock gets none
    with pytest.raises(WatchdogError) as err:
        watchdog.start_watchdog(box, "someone-else", after_s=60, poll_s=0.1)
    assert err.value.status == "not-held"
    # the next run's watchdog waits for the previous one, which exits once its run ended
    lock.release()
    lock2 = _lock(box, "two2")
    second = watchdog.start_watchdog(box, "two2", after_s=60, poll_s=0.1)
    assert not _alive(first.pid) and watchdog_pids(str(tmp_path / "s")) == [second.pid]
    lock2.release()
    assert _wait(lambda: not _alive(second.pid), 3)


@pytest.mark.slow
def test_a_run_that_lost_the_box_to_its_watchdog_changes_nothing_more(tmp_path):
    """The watchdog took the lock over (the run's heartbeat was silent too long: a laptop that
    slept): the heartbeat finds it lost and the journal refuses every further change."""
    box = connect("local", state_dir=tmp_path / "s")
    lock = _lock(box, "lost1")
    journal = Journal(box)
    journal.begin("lost1")
    journal.run_lock = lock
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ident = {"pid": sleeper.pid, "pid_start": int(Path(f"/proc/{sleeper.pid}/stat").read_text()
                                                         .rsplit(") ", 1)[1].split()[19]),
                 "boot_id": runlock.self_identity()["boot_id"]}
        Path(runlock.lock_path(box)).write_text(json.dumps({**ident, "run_id": "lost1-watchdog", "host": "box",
                                                            "runbook": "watchdog", "started_at": time.time(),
                                                            "watchdog_of": "lost1"}))
        assert _wait(lambda: lock.lost, 5)
        with pytest.raises(WatchdogError, match="lost") as err:
            journal.add_created(str(tmp_path / "s" / "repairs" / "x"))
        assert err.value.status == "lost"
        holder = runlock.box_status(box).holder
        assert holder.alive and holder.watchdog_of == "lost1"
        assert holder.describe().startswith("the watchdog of run lost1")
        with pytest.raises(runlock.RunLocked, match="the watchdog of run lost1"):
            runlock.acquire(box, "local", "next2")
        # restore_box waits for the watchdog to finish instead of racing it
        done: list = []
        t = threading.Thread(target=lambda: done.append(restore_box(box, timeout=10)))
        t.start()
        time.sleep(0.6)
        assert not done
        os.unlink(runlock.lock_path(box))
        t.join(10)
        assert done and any(a.startswith("waited") and "watchdog" in a for a in done[0].actions), done
    finally:
        sleeper.kill()
        sleeper.wait()


# -- one restore, two implementations -------------------------------------------------------------


def _leave_changed(b: Box0, run_id: str) -> dict:
    """Journal and make the changes a killed run leaves: the original stopped, a server of its own
    running, a probe, a created directory, an interrupted write's temporary file."""
    pid = b.start_original()
    (found,) = [s for s in b.box.find_servers() if s.pid == pid]
    env = dict(i.split("=", 1) for i in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in i)
    j = Journal(b.box)
    j.begin(run_id)
    j.record_original(argv=list(found.argv), cwd=found.cwd, env={MARK: env[MARK]}, port=b.port,
                      log_path=found.log_path, pid=pid)
    j.mark_original_stopped(True)
    b.box.stop_server(pid, grace=5)
    created = b.state / "repairs" / f"{run_id}-1"
    j.add_created(str(created))
    (created / "sub").mkdir(parents=True)
    (created / "sub" / "f").write_text("x")
    remote_probes.add_probe(b.box, str(b.probe_file), before=r"return y", exprs=["y"], tag="wd-probe")
    fix = b.box.launch_server(b.fix_argv(), port=b.port)
    j.add_started(pid=fix.pid, pgid=fix.pgid, port=b.port, argv=b.fix_argv(), label="fix")
    b.box.wait_healthy(fix, timeout=20)
    (b.state / "diagnosis" / ".journal.json.ewb-tmp-0123abcd").write_text("half")
    return {"fix": fix.pid, "created": created}


def _outcome(b: Box0, left: dict) -> dict:
    orig = b.running(b.argv)
    return {
        "journal": b.journal(), "probe_sha_is_original": _sha(b.probe_file) == b.probe_sha,
        "probes": sorted(os.listdir(b.state / "probes")), "created_exists": left["created"].exists(),
        "fix_alive": _alive(left["fix"]) or bool(b.running(b.fix_argv())),
        "original": [(list(o.argv), o.cwd, o.log_path) for o in orig], "healthy": _healthy(b.port),
        "leftovers": sorted(n for n in os.listdir(b.state / "diagnosis") if "ewb-tmp" in n),
        "original_env": [f"{MARK}=original-42".encode() in Path(f"/proc/{o.pid}/environ").read_bytes().split(b"\0")
                         for o in orig],
    }


@pytest.mark.slow
def test_the_watchdogs_restore_and_restore_box_agree(b0):
    left = _leave_changed(b0, "par1")
    by_restore_box = restore_box(b0.box, server_start_timeout=20)
    assert by_restore_box.clean, by_restore_box.problems
    a = _outcome(b0, left)
    for proc in b0.running(b0.argv):
        b0.box.stop_server(proc, grace=2)
    left = _leave_changed(b0, "par2")
    by_watchdog = watchdog.restore_on_box(b0.box, server_start_timeout=20)
    assert by_watchdog["clean"], by_watchdog["problems"]
    b = _outcome(b0, left)
    assert a == b
    assert a["journal"] == {} and a["probe_sha_is_original"] and a["healthy"] and a["original_env"] == [True]
    assert not a["fix_alive"] and not a["created_exists"] and a["leftovers"] == [] and a["probes"] == []

    def kinds(actions):
        return sorted(re.sub(r"\d+|/\S+|\(.*\)", "", x).split(":")[0].strip() for x in actions)

    assert kinds(by_restore_box.actions) == kinds(by_watchdog["actions"])
    # both report the relaunch as a load (issue 28): its record, why, and when it was ready
    for launch in (by_restore_box.launch, by_watchdog["launch"]):
        assert launch["label"] == "restore" and launch["reason"].startswith("restore")
        assert launch["ready_at"] >= launch["launched_at"] and launch["ready_after_s"] >= 0
        assert launch["pid"] is not None and list(launch["launch_command"].split()) == [str(a) for a in b0.argv]
    assert [p["name"] for p in by_restore_box.launch["phases"]][-1] == "ready"


# -- the parameter on the runbooks and the command line ------------------------------------------


@pytest.mark.parametrize("runbook", ["diagnose_acceptance", "measure_acceptance", "compare_drafts"])
def test_the_runbooks_that_change_the_box_take_watchdog_after_s(runbook):
    from workbench.errors import RunbookParameterError
    from workbench.runbook_params import SCHEMAS, check_runbook_parameters

    assert SCHEMAS[runbook]["watchdog_after_s"] == "watchdog"
    check_runbook_parameters(runbook, {"watchdog_after_s": 0})
    check_runbook_parameters(runbook, {"watchdog_after_s": 3.5})
    for bad in (0.2, -5, "300", True):
        with pytest.raises(RunbookParameterError, match="watchdog_after_s must be 0 \\(no watchdog\\)"):
            check_runbook_parameters(runbook, {"watchdog_after_s": bad})


def test_workbench_runbook_watchdog_after(cli):
    code, out, err = cli("runbook", "diagnose_acceptance", "--watchdog-after", "0.3")
    assert code == 2 and "--watchdog-after: must be 0 (no watchdog)" in err, err
    code, out, err = cli("runbook", "diagnose_acceptance", "--watchdog-after", "5", "-p", "watchdog_after_s", "6")
    assert code == 2 and "--watchdog-after 5 and -p watchdog_after_s 6 disagree" in err, err
    code, out, err = cli("runbook", "preflight", "--watchdog-after", "5")
    assert code == 2 and "preflight has no parameter 'watchdog_after_s'" in err, err


def test_open_box_refuses_a_bad_watchdog_after_s_before_touching_the_box(tmp_path, monkeypatch):
    from workbench.session.box_session import open_box

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "s"))
    with pytest.raises(DiagnosisError, match="watchdog_after_s must be 0"):
        open_box("local", launch_command=None, port=1, watchdog_after_s=-1)
    assert not (tmp_path / "s").exists()
