"""An interrupted ``workbench runbook`` opens one connection to the box to restore it (issue 26
part 3, item 3), over the real loopback sshd.

The driver runs as a user runs it (a child process), with ``remote.connect`` wrapped in that
process to write one line per connection it opens (where from: the driver function that called
it) — the kernel is another process and opens its own. It is SIGTERMed while the diagnosis runs a
server it launched, so the restore has something to undo. Counted twice: by the wrapper (which
driver function connected) and by the sshd's own log (``Accepted publickey`` lines after the
signal: the kernel is dead by then, only the driver connects). Before this was fixed the restore
connected twice (the restore, then the journal's last word on a connection of its own) and the
driver four times in all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.faults import build_deployment
from workbench.session.journal import Journal, restore_box
from testkit.engine_copy import checkout_dir

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

#: ``python -c`` of the driver: ``workbench.cli.main`` with ``remote.connect`` counted
DRIVER = textwrap.dedent("""
    import json, os, sys, time, traceback
    import remote

    real = remote.connect
    driver_functions = ("_before_run", "_restore_after_failure", "_notice_pending", "_learn_secrets",
                        "_journal_pending", "run_runbook", "_run")

    def counted(*args, **kwargs):
        where = [f.name for f in traceback.extract_stack()[:-1] if f.name in driver_functions]
        with open(os.environ["EWB_CONNECT_LOG"], "a") as log:
            log.write(json.dumps({"t": time.time(), "where": where[-1] if where else None}) + "\\n")
        return real(*args, **kwargs)

    remote.connect = counted
    from workbench.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _connections(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _accepted(sshd_log: Path) -> int:
    return sum("Accepted publickey" in line for line in sshd_log.read_text(errors="replace").splitlines())


def test_an_interrupted_runbook_restores_the_box_over_one_connection(tmp_path, free_port, state_dir, ssh_env):
    dep = build_deployment(tmp_path / "deployment", "eagle-flag")
    counts = tmp_path / "connections.jsonl"
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir), EWB_CONNECT_LOG=str(counts))
    local = connect("local", state_dir=state_dir)
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, "runbook", "diagnose_acceptance", "--host", ssh_env.alias,
         "--report-dir", str(tmp_path / "reports"), "-p", "launch_command", dep.launch_command(free_port),
         "-p", "port", str(free_port), "-p", "num_prompts", "2", "-p", "max_new_tokens", "32"],
        env=env, cwd=checkout_dir(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        # mid-run: the server the run launched (as found) is journalled and serving
        while not any(s.port == free_port for s in local.find_servers()) or not Journal(local).pending:
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run never launched its server"
            time.sleep(0.1)
        before = _connections(counts)
        accepted_before = _accepted(ssh_env.server.log)
        driver.send_signal(signal.SIGTERM)
        out, err = driver.communicate(timeout=300)
        assert driver.returncode == 130, err[-3000:]
        assert "the box was restored (see above)" in err, err[-3000:]
        after = _connections(counts)[len(before):]
        # the driver's own connections: one before the run (notice + secrets), one to restore
        assert [c["where"] for c in before] == ["_before_run"], before
        assert [c["where"] for c in after] == ["_restore_after_failure"], after
        # the sshd saw exactly one more connection after the signal: the restore's
        assert _accepted(ssh_env.server.log) - accepted_before == 1
        print(f"\ndriver connections: {len(before)} before the interrupt, {len(after)} to restore")
        # and the box is as found
        assert not Journal(local).pending
        assert [s for s in local.find_servers() if s.port == free_port] == []
        assert remote_probes.list_probes(local) == []
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
        if Journal(local).pending:  # a failed assertion above: undo the run here
            report = restore_box(local, timeout=60)
            assert report.clean, report.problems
        for s in local.find_servers():
            if s.port == free_port:
                local.stop_server(s)
        local.close()
