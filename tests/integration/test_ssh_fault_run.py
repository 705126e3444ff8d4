"""A diagnosis over SSH whose connection dies in the middle of the run.

``workbench runbook diagnose_acceptance`` runs against the sandbox over the loopback sshd, through
a relay (``testkit.blackhole``). While the run's second server (the probed or the fixed one) runs,
the relay either stalls (a black hole: nothing arrives, nothing is refused) or drops every
connection and refuses new ones. The run must end in bounded time (the keepalive detection and the
ConnectTimeout, not the 300 s of one ``/generate``) with a message naming the SSH failure; its own
restore cannot reach the box and says so; once the network is back, ``workbench restore`` leaves
the box as found: the sandbox tree byte for byte, no server, no probe, no journal entry pending.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.blackhole import Relay
from workbench.session.journal import Journal, restore_box
from testkit.engine_copy import checkout_dir, sandbox_engine_dir

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = sandbox_engine_dir()  # this process's engine (testkit.engine_copy); its models/ a symlink

pytestmark = pytest.mark.slow

#: The relay's alias: keepalive every 1 s, dead after 3 unanswered (3 s); 3 s to connect.
INTERVAL, COUNT, CONNECT_TIMEOUT = 1, 3, 3
#: Seconds the run may take to end once the connection died: detection (3 s), the cell's error,
#: killing the kernel, the restore's connection attempt (3 s), exporting the report, on a loaded
#: machine. The fault being fixed made it 300 s (one /generate's HTTP time-out).
BOUND_S = 90


def _tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (bytecode caches aside), by relative path."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _servers_on(box, port):
    return [s for s in box.find_servers() if s.port == port]


@pytest.mark.parametrize("fault", ["stalled", "dropped"])
def test_a_run_whose_ssh_dies_fails_in_bounded_time_and_restore_leaves_the_box_clean(
        tmp_path, free_port, state_dir, sshd, fault):
    relay = Relay(sshd.server.port)
    kind, blob = Path(str(sshd.server.host_key) + ".pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{relay.port} {kind} {blob}\n")
    config = tmp_path / "ssh_config"
    config.write_text(sshd.host_block("flaky", relay.port, UserKnownHostsFile=f'"{known}"',
                                      ConnectTimeout=str(CONNECT_TIMEOUT), ServerAliveInterval=str(INTERVAL),
                                      ServerAliveCountMax=str(COUNT)))
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir), EAGLE_WORKBENCH_SSH_CONFIG=str(config))
    local = connect("local", state_dir=state_dir)
    before = {**_tree_digest(SANDBOX), **_tree_digest(SANDBOX / "models")}
    driver = None
    try:
        driver = subprocess.Popen(
            [sys.executable, "-m", "workbench.cli", "runbook", "diagnose_acceptance", "--host", "flaky",
             "--report-dir", str(tmp_path / "reports"), "-p", "port", str(free_port),
             "-p", "num_prompts", "1", "-p", "max_new_tokens", "8"],
            env=env, cwd=checkout_dir(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 600
        # mid-run: the as-found server was launched and measured, and the run's next launch (the
        # probed or the fixed server) is up: the journal holds servers and maybe a probe to undo
        first = None
        while True:
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run never launched a second server"
            pids = {s.pid for s in _servers_on(local, free_port)}
            if first is None and pids:
                first = min(pids)
            if first is not None and pids - {first}:
                break
            time.sleep(0.1)
        assert Journal(local).pending
        relay.freeze() if fault == "stalled" else relay.drop()
        died = time.monotonic()
        out, err = driver.communicate(timeout=600)
        took = time.monotonic() - died
        assert driver.returncode == 1, err[-3000:]
        assert took < BOUND_S, (took, err[-3000:])
        # what the user reads: the SSH failure, naming the box; the restore could not reach it and says what to run
        last = [line for line in err.splitlines() if line.startswith("workbench")]
        assert last and "failed" in last[-1], err[-3000:]
        # the call in flight fails (SSHConnectionLost), or, when that was a read retried on a new
        # connection or an HTTP request, the next box call cannot reconnect (SSHConnectFailed)
        assert "failed: SSHConnectionLost: " in last[-1] or "failed: SSHConnectFailed: " in last[-1], err[-3000:]
        assert f"127.0.0.1:{relay.port}" in last[-1], err[-3000:]
        restore_failed = [line for line in err.splitlines() if line.startswith("restore FAILED: ")]
        assert restore_failed and "SSHConnectFailed" in restore_failed[0], err[-3000:]
        if fault == "stalled":  # a black hole: the handshake never completes within ConnectTimeout
            assert f"within ConnectTimeout {CONNECT_TIMEOUT}s" in restore_failed[0], err[-3000:]
        else:  # connections are cut as soon as they are accepted
            assert "SSH handshake failed" in restore_failed[0], err[-3000:]
        print(f"\n[{fault}] the run ended {took:.1f}s after the connection died")
        assert "run `workbench restore --host flaky`" in err, err[-3000:]
        assert Journal(local).pending  # nothing could be undone yet

        relay.thaw()
        restore = subprocess.run([sys.executable, "-m", "workbench.cli", "restore", "--host", "flaky",
                                  "--timeout", "60"], env=env, cwd=checkout_dir(), capture_output=True, text=True, timeout=600)
        assert restore.returncode == 0, restore.stdout + restore.stderr
        assert {**_tree_digest(SANDBOX), **_tree_digest(SANDBOX / "models")} == before
        assert _servers_on(local, free_port) == []
        assert remote_probes.list_probes(local) == []
        assert not Journal(local).pending
        assert local.find_servers(rf"--port {free_port}\b") == []
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.communicate()
        relay.close()
        if Journal(local).pending:  # a failed assertion above: undo the run here, never leave a probe behind
            report = restore_box(local, timeout=60)
            assert report.clean, report.problems
        for s in _servers_on(local, free_port):
            local.stop_server(s)
