"""The run's watchdog over SSH (issue 26 part 2), against the loopback sshd and the sandbox servers.

A driver (``testkit/watchdog_driver.py``, session mode: ``open_box`` and a ``BoxSession`` over
SSH, as a diagnosis does) changes the box: it stops the sandbox server it found (journalled),
inserts a probe, launches a fixed server of its own. At each of those moments its SSH connections
are cut (every sshd session process of the loopback server SIGKILLed) and the driver SIGKILLed.
Nothing is run afterwards: the watchdog the driver left on the box, alone, must put the box back
after ``watchdog_after_s`` seconds of silence: the original sandbox server relaunched with its
argv, cwd and log and answering ``/health``, the probed file byte for byte, the fixed server
gone, the journal empty, the run lock free, its report shown by ``workbench status`` over SSH; and
the next run over SSH starts clean."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.sandbox_servers import EAGLE, sandbox_flags
from testkit.watchdogs import driver_until_ready, kill_all, stop_watchdogs_under
from workbench.session import runlock, watchdog
from workbench.session.journal import journal_path
from testkit.engine_copy import checkout_dir

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "testkit" / "watchdog_driver.py"
AFTER = 3.0  # seconds of silence before the watchdog acts
PROBED = b"def forward(x):\n    y = x * 2\n    return y\n"

pytestmark = pytest.mark.slow


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    kids: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue  # exited while we looked
        names[int(entry)] = text[text.index("(") + 1:text.rindex(")")]
        kids.setdefault(int(text.rsplit(") ", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], list(kids.get(pid, ()))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(kids.get(child, ()))
    return [p for p in out if names.get(p, "").startswith("sshd")]


def _cut_ssh(sshd) -> list[int]:
    """SIGKILL every session process of the loopback sshd (its listener survives): every SSH
    connection to it is cut, the box side first."""
    return kill_all(_children(sshd.server.proc.pid))


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _driver(host: str, port: int, probe_file: Path, stage: str, state_dir: Path) -> tuple[subprocess.Popen, dict]:
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, str(DRIVER), "session", host, "--port", str(port), "--after", str(AFTER),
                             "--probe-file", str(probe_file), "--stage", stage, "--start-timeout", "120"],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=checkout_dir())
    # the server's log lines ("[2026-...") are not the driver's
    return proc, driver_until_ready(proc, stage, err_filter=lambda line: not line.startswith("[20"))


@pytest.mark.parametrize("stage", ["original-stopped", "probe-inserted", "fix-running"])
def test_the_box_is_back_without_any_command_after_the_driver_and_its_ssh_die(
        ssh_env, own_sandbox_server, tmp_path, state_dir, stage, cli, monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(state_dir))  # the `workbench status` below too
    host = ssh_env.alias
    probe_file = tmp_path / "engine" / "model.py"
    probe_file.parent.mkdir()
    probe_file.write_bytes(PROBED)
    probe_sha = hashlib.sha256(PROBED).hexdigest()
    local = connect("local", state_dir=state_dir)
    drivers = []
    with own_sandbox_server(tmp_path / "srv", *sandbox_flags(**EAGLE)) as srv:
        try:
            proc, said = _driver(host, srv.port, probe_file, stage, state_dir)
            drivers.append(proc)
            # the driver stopped the server it found (else: what it said, and the journal's record)
            assert srv.proc.poll() is not None, (said, Path(journal_path(local)).read_text()
                                                 if Path(journal_path(local)).exists() else "no journal")
            if stage != "original-stopped":
                assert hashlib.sha256(probe_file.read_bytes()).hexdigest() != probe_sha
            cut = _cut_ssh(ssh_env)
            assert cut, "no sshd session to cut"
            proc.kill()
            proc.wait(timeout=10)
            killed = time.monotonic()

            def back() -> bool:
                return (Path(watchdog.report_path(local)).exists() and not Path(runlock.lock_path(local)).exists()
                        and _healthy(srv.port))

            deadline = killed + AFTER + 90
            while not back():
                assert time.monotonic() < deadline, (Path(journal_path(local)).read_text(),
                                                     (state_dir / "diagnosis" / "watchdog.log").read_text())
                time.sleep(0.1)
            took = time.monotonic() - killed
            print(f"\n[{stage}] the box was back {took:.1f} s after the driver and its SSH died "
                  f"(watchdog_after_s {AFTER:g})")
            assert took >= AFTER - 0.5
            # the original: same argv, cwd and log, answering
            (orig,) = [s for s in local.find_servers() if list(s.argv) == list(srv.argv)]
            # (the original was started in this process's checkout: testkit.sandbox_servers, testkit.engine_copy)
            assert orig.pid != srv.pid and orig.cwd == str(checkout_dir()) and orig.log_path == str(srv.log_path)
            assert hashlib.sha256(probe_file.read_bytes()).hexdigest() == probe_sha
            assert remote_probes.list_probes(local) == []
            if "fix_pid" in said:
                assert not Path(f"/proc/{said['fix_pid']}").exists() or \
                    Path(f"/proc/{said['fix_pid']}/stat").read_text().rsplit(") ", 1)[1][0] == "Z"
            assert [s.pid for s in local.find_servers() if s.port == srv.port] == [orig.pid]
            assert json.loads(Path(journal_path(local)).read_text()) == {}
            report = watchdog.read_report(local)
            assert report["clean"] and report["run_id"] == said["run_id"], report
            # what it did, over SSH, with the command a user runs
            code, out, err = cli("status", "--host", host)
            assert code == 0 and "watchdog report (new): the watchdog restored the box" in out, (out, err)
            assert "relaunched the original server" in out and "run lock: free" in out
            # the next run over SSH starts clean, and its watchdog leaves with it
            proc2, said2 = _driver(host, srv.port, probe_file, "locked", state_dir)
            drivers.append(proc2)
            proc2.stdin.write("release\n")
            proc2.stdin.flush()
            out2, err2 = proc2.communicate(timeout=120)
            assert "released" in out2 and "restoring it first" not in err2, (out2, err2)
            released = json.loads(out2.split("released ", 1)[1])
            assert released["clean"] and released["problems"] == []
            deadline = time.monotonic() + 5
            while Path(f"/proc/{said2['watchdog_pid']}").exists() and \
                    Path(f"/proc/{said2['watchdog_pid']}/stat").read_text().rsplit(") ", 1)[1][0] != "Z":
                assert time.monotonic() < deadline, "the next run's watchdog outlived its run"
                time.sleep(0.05)
        finally:
            # a driver still running (a failed assertion) would restore the box when it exits
            # (BoxSession's atexit) and relaunch the original after this clean-up: killed first
            for driver in drivers:
                if driver.poll() is None:
                    driver.kill()
                    driver.wait(timeout=10)
            stop_watchdogs_under(str(state_dir))
            for s in local.find_servers():
                if s.port == srv.port and s.pid != srv.pid:
                    local.stop_server(s, grace=10)
            if remote_probes.list_probes(local):
                remote_probes.revert_all(local)
