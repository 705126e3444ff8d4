"""One run per box (issue 13): the run lock decided on the box (``workbench.session.runlock``),
``restore_box``/``workbench restore`` that never undo a live run, the pending-run notice of the
next command, and the interrupt exits. Real processes on the local box: the lock script runs in
``python3`` through ``box.run``; holders are plain Python processes (they start nothing)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from remote import connect
from workbench.session import runlock
from workbench.session.journal import Journal, journal_path, restore_box

ROOT = Path(__file__).resolve().parents[2]

# A process that takes the lock (and journals a created directory), says so, then waits for stdin to close.
HOLDER = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, %r)
    from remote import connect
    from workbench.session import runlock
    from workbench.session.journal import Journal
    box = connect("local")
    lock = runlock.acquire(box, "local", sys.argv[1])
    if len(sys.argv) > 2:
        j = Journal(box); j.begin(sys.argv[1]); j.add_created(sys.argv[2]); os.makedirs(sys.argv[2])
    print("held", flush=True)
    sys.stdin.read()
""") % str(ROOT)


@pytest.fixture
def lbox(state_dir):
    return connect("local", state_dir=state_dir)


def _holder(state_dir: Path, run_id: str, created: str | None = None, env_extra: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir), **(env_extra or {}))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, run_id, *([created] if created else [])], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "held", proc.stderr.read()
    return proc


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def _write_lock(box, **fields) -> Path:
    path = Path(runlock.lock_path(box))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": "r0", "host": "elsewhere", "runbook": "diagnose_acceptance",
                                "started_at": time.time(), **fields}))
    return path


def test_a_second_run_is_refused_naming_the_live_one(lbox, monkeypatch):
    monkeypatch.setenv(runlock.RUNBOOK_ENV, "diagnose_acceptance")
    lock = runlock.acquire(lbox, "local", "first1")
    try:
        with pytest.raises(runlock.RunLocked) as err:
            runlock.acquire(lbox, "local", "second2")
        msg = str(err.value)
        assert "run first1" in msg and f"pid {os.getpid()} on {socket.gethostname()}" in msg
        assert "runbook diagnose_acceptance" in msg and "since " in msg and "wait for it" in msg
        assert "workbench restore" not in msg
        assert err.value.holder.run_id == "first1" and err.value.holder.alive is True
        assert lock.holder["heartbeat"] is False  # this machine is the box: no heartbeat needed
    finally:
        lock.release()
    assert runlock.box_status(lbox).holder is None
    assert runlock.acquire(lbox, "local", "third3").run_id == "third3"


def test_runs_started_together_exactly_one_wins(lbox, state_dir):
    """Four processes race for the lock at the same instant (they wait for a start file): one wins."""
    go = state_dir.parent / "go"
    script = textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, %r)
        from remote import connect
        from workbench.session import runlock
        box = connect("local")
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.001)
        try:
            runlock.acquire(box, "local", sys.argv[1]); print("won")
        except runlock.RunLocked as e:
            print("lost", e.holder.run_id)
        sys.stdin.read()
    """) % str(ROOT)
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir))
    procs = [subprocess.Popen([sys.executable, "-c", script, f"run{i}", str(go)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for i in range(4)]
    try:
        time.sleep(1.0)  # let them all import and wait
        go.write_text("")
        answers = [p.stdout.readline().split() for p in procs]
        winners = [f"run{i}" for i, a in enumerate(answers) if a == ["won"]]
        assert len(winners) == 1, answers
        assert all(a == ["lost", winners[0]] for a in answers if a != ["won"]), answers
        assert runlock.box_status(lbox).holder.run_id == winners[0]
    finally:
        for p in procs:
            _end(p)


def test_over_ssh_the_lock_is_the_same_lock(ssh_env, state_dir, lbox):
    """Taken through an SSH box (the real loopback sshd), it holds against a local run, and the
    other way round; whether the holder lives is decided on the box either way."""
    with connect(ssh_env.alias, state_dir=state_dir) as sbox:
        lock = runlock.acquire(sbox, ssh_env.alias, "viassh")
        try:
            with pytest.raises(runlock.RunLocked, match="run viassh"):
                runlock.acquire(lbox, "local", "local1")
            status = runlock.box_status(sbox)
            assert status.holder.alive is True and runlock.is_mine(status.holder)
        finally:
            lock.release()
        assert runlock.box_status(sbox).holder is None
        local = runlock.acquire(lbox, "local", "local2")
        with pytest.raises(runlock.RunLocked, match="run local2"):
            runlock.acquire(sbox, ssh_env.alias, "viassh2")
        local.release()


def test_a_dead_holders_lock_is_taken_over(lbox, state_dir):
    holder = _holder(state_dir, "dead01")
    holder.kill()
    holder.communicate()
    status = runlock.box_status(lbox)
    assert status.holder.run_id == "dead01" and status.holder.alive is False
    assert runlock.acquire(lbox, "local", "next01").run_id == "next01"
    assert runlock.box_status(lbox).holder.run_id == "next01"


def test_a_reused_pid_is_not_the_holder(lbox):
    """The recorded pid lives (this process) but started at another time: not the holder."""
    me = runlock.self_identity()
    _write_lock(lbox, pid=me["pid"], pid_start=me["pid_start"] + 1, boot_id=me["boot_id"])
    assert runlock.box_status(lbox).holder.alive is False
    _write_lock(lbox, **me)
    assert runlock.box_status(lbox).holder.alive is True


def test_a_zombie_holder_is_dead(lbox):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        start = int(Path(f"/proc/{child.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not reaped
            assert time.monotonic() < deadline
            time.sleep(0.05)
        _write_lock(lbox, pid=child.pid, pid_start=start, boot_id=runlock.self_identity()["boot_id"])
        assert runlock.box_status(lbox).holder.alive is False
    finally:
        child.wait()


def test_a_holder_on_another_machine_lives_by_its_heartbeat(lbox):
    path = _write_lock(lbox, pid=12345, pid_start=1, boot_id="another-machine", heartbeat=True)
    status = runlock.box_status(lbox)
    assert status.holder.alive is True and status.holder.host == "elsewhere"
    with pytest.raises(runlock.RunLocked):
        runlock.acquire(lbox, "local", "mine01")
    old = time.time() - runlock.STALE_AFTER_S - 5
    os.utime(path, (old, old))
    assert runlock.box_status(lbox).holder.alive is False
    assert runlock.acquire(lbox, "local", "mine01").run_id == "mine01"


def test_the_heartbeat_keeps_a_remote_holders_lock_fresh(lbox, monkeypatch):
    """The heartbeat thread (what a driver on another machine than the box runs) touches the lock
    over its own connection, and stops once the lock is released."""
    monkeypatch.setattr(runlock, "HEARTBEAT_S", 0.2)
    taken = runlock.acquire(lbox, "local", "beat01")
    lock = runlock.RunLock(lbox, "local", taken.holder, heartbeat=True)
    path = Path(runlock.lock_path(lbox))
    old = time.time() - 3600
    os.utime(path, (old, old))
    deadline = time.monotonic() + 30
    while path.stat().st_mtime < time.time() - 600:
        assert time.monotonic() < deadline, "no heartbeat"
        time.sleep(0.1)
    lock.release()
    lock._thread.join(timeout=30)
    assert not lock._thread.is_alive() and not path.exists()


def test_a_holder_that_ran_here_is_checked_here():
    """A box on another machine sees only the heartbeat of a holder that ran here; whoever asks
    from here knows better: its pid and start time (a kernel the driver just killed is dead)."""
    me = runlock.self_identity()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    gone = {"run_id": "k1", "pid": child.pid, "pid_start": 1, "boot_id": me["boot_id"]}
    assert runlock._alive_here(gone, True) is False
    assert runlock._alive_here({**gone, "pid": me["pid"], "pid_start": me["pid_start"]}, True) is True
    assert runlock._alive_here({**gone, "boot_id": "another-machine"}, True) is True  # the box's word


def test_restore_box_leaves_a_live_run_alone_and_releases_a_dead_ones_lock(lbox, state_dir):
    created = str(state_dir / "repairs" / "run-copy")
    holder = _holder(state_dir, "live01", created)
    try:
        report = restore_box(lbox, unless_owner_alive=True)
        assert "run live01" in report.actions[0] and "left alone" in report.actions[0]
        assert Path(created).is_dir() and Journal(lbox).pending
    finally:
        _end(holder)
    report = restore_box(lbox, unless_owner_alive=True)
    assert report.clean and not Path(created).exists() and not Journal(lbox).pending
    assert any("released the run lock left by run live01" in a for a in report.actions)
    assert runlock.box_status(lbox).holder is None


def test_workbench_restore_refuses_a_live_run_unless_forced(cli, lbox, state_dir):
    created = str(state_dir / "repairs" / "run-copy")
    holder = _holder(state_dir, "live02", created)
    try:
        code, out, err = cli("restore")
        assert code == 1 and out == "", err
        assert "run live02" in err and "still running" in err and "--force" in err
        assert Path(created).is_dir() and Journal(lbox).pending
        code, out, err = cli("restore", "--force")
        assert code == 0, err
        assert "--force: undoing the changes of run live02" in err and created in err
        assert f"removed {created}" in out and not Path(created).exists() and not Journal(lbox).pending
        assert runlock.box_status(lbox).holder.run_id == "live02"  # the live run still holds its lock
    finally:
        _end(holder)


def test_the_next_command_says_a_dead_run_left_the_box_changed(cli, lbox, state_dir):
    assert "left the box changed" not in cli("probe", "list")[2]
    created = str(state_dir / "repairs" / "run-copy")
    holder = _holder(state_dir, "gone03", created)
    code, _out, err = cli("probe", "list")
    assert "gone03" not in err  # alive: its changes are its own, it restores them itself
    _end(holder)
    code, _out, err = cli("probe", "list")
    lines = [line for line in err.splitlines() if "gone03" in line]
    assert len(lines) == 1, err
    assert "run gone03 (started " in lines[0] and "left the box changed" in lines[0] and created in lines[0]
    assert "`workbench restore --host local`" in lines[0]
    assert cli("restore")[0] == 0
    assert "gone03" not in cli("probe", "list")[2]


def test_the_notice_never_hides_the_command(cli, lbox):
    """An unreadable journal is one line, and the command still runs."""
    Path(journal_path(lbox)).parent.mkdir(parents=True, exist_ok=True)
    Path(journal_path(lbox)).write_text("{not json")
    code, out, err = cli("probe", "list")
    assert "diagnosis journal is unreadable" in err and "workbench restore --host local" in err


def test_measure_interrupted_exits_130(cli, monkeypatch):
    import workbench.measure as measure

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "measure", interrupted)
    code, out, err = cli("measure", "--port", "9")
    assert code == 130 and err.splitlines()[-1].startswith("workbench measure: interrupted"), err


@pytest.mark.parametrize("exc, signals, reason", [
    ("zmq", ["SIGTERM"], "SIGTERM to the driver"),
    ("runtime", ["SIGINT", "SIGINT"], "Ctrl-C (SIGINT)"),
    ("keyboard", [], "Ctrl-C (SIGINT)"),
    ("dead", [], "the kernel died (killed by a signal, or out of memory)"),
    ("cell-interrupt", [], "the kernel was interrupted (SIGINT to the kernel)"),
    ("cell-error", [], None),
    ("runtime", [], None),
])
def test_interrupt_reasons(exc, signals, reason):
    """What papermill/ZMQ raise while a signal is handled is the interrupt; a cell's own error, or
    an unknown error with no signal, is not."""
    import zmq
    from nbclient.exceptions import DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    from workbench.cli.runbook import _interrupt_reason

    made = {"zmq": lambda: zmq.error.ZMQError(88, "Socket operation on non-socket"),
            "runtime": lambda: RuntimeError("Event loop is closed"),
            "keyboard": KeyboardInterrupt,
            "dead": lambda: DeadKernelError("Kernel died"),
            "cell-interrupt": lambda: PapermillExecutionError(5, 1, "", "KeyboardInterrupt", "", []),
            "cell-error": lambda: PapermillExecutionError(5, 1, "", "ValueError", "bad", [])}[exc]()
    assert _interrupt_reason(made, list(signals)) == reason


def test_only_a_killed_kernels_orphaned_task_is_dropped():
    """asyncio's "Task exception was never retrieved" is dropped for an nbclient task that died of
    the interrupt, kept for anything else."""
    import logging

    from nbclient.exceptions import DeadKernelError

    from workbench.cli.runbook import _InterruptedTaskFilter

    def record(msg, exc):
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, msg, None,
                                 (type(exc), exc, None) if exc is not None else None)

    f = _InterruptedTaskFilter()
    assert f.filter(record("Task exception was never retrieved", DeadKernelError("Kernel died"))) is False
    assert f.filter(record("Task exception was never retrieved", ValueError("a bug"))) is True
    assert f.filter(record("Unclosed client session", None)) is True


def test_an_abandoned_nbclient_coroutine_says_nothing_after_an_interrupt():
    """A signal between papermill making a cell's coroutine and awaiting it leaves the coroutine
    never awaited: after an interrupt its RuntimeWarning (printed at exit, after the run's last
    line) is ignored; another never-awaited coroutine still warns."""
    import subprocess
    import sys

    code = (
        "import gc\n"
        "from nbclient import NotebookClient\n"
        "import nbformat\n"
        "from workbench.cli.runbook import _quiet_interrupted_tasks\n"
        "client = NotebookClient(nbformat.v4.new_notebook())\n"
        "async def other():\n    pass\n"
        "_quiet_interrupted_tasks()\n"
        "c = client.async_execute_cell(nbformat.v4.new_code_cell('1'), 0)\n"
        "del c; gc.collect()\n"
        "o = other()\n"
        "del o; gc.collect()\n"
    )
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "NotebookClient.async_execute_cell' was never awaited" not in done.stderr, done.stderr
    assert "coroutine 'other' was never awaited" in done.stderr, done.stderr


def test_a_run_that_finds_the_box_taken_changes_nothing(lbox, state_dir):
    """``open_box`` (every diagnosis and sweep) refuses before its inventory or journal: the live
    run's journal stays byte for byte, and the refusal says to wait, not to restore."""
    from workbench.session import open_box

    created = str(state_dir / "repairs" / "live-copy")
    holder = _holder(state_dir, "live04", created)
    try:
        before = Path(journal_path(lbox)).read_bytes()
        with pytest.raises(runlock.RunLocked) as err:
            open_box("local", launch_command="python3 -m sglang.launch_server --model-path /m --port 1", port=1)
        assert "run live04" in str(err.value) and "wait for it" in str(err.value)
        assert "workbench restore" not in str(err.value)
        assert Path(journal_path(lbox)).read_bytes() == before and Path(created).is_dir()
        assert runlock.box_status(lbox).holder.run_id == "live04"
    finally:
        _end(holder)


def test_a_run_restores_what_a_dead_run_left_and_keeps_its_own_lock(lbox, state_dir, capfd):
    from testkit.ports import free_port
    from workbench.sandbox_box import sandbox_launch_command
    from workbench.session import open_box

    created = str(state_dir / "repairs" / "dead-copy")
    holder = _holder(state_dir, "dead05", created)
    _end(holder)
    port = free_port()
    box, _inventory, journal = open_box("local", launch_command=sandbox_launch_command(port=port), port=port)
    try:
        assert "run dead05 left local changed; restoring it first" in capfd.readouterr().err
        assert not Path(created).exists()
        status = runlock.box_status(lbox)
        assert runlock.is_mine(status.holder) and status.holder.run_id == journal.data["run_id"] != "dead05"
    finally:
        report = restore_box(box)
        box.close()
    assert report.clean and runlock.box_status(lbox).holder is None
