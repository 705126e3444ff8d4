"""Closing a notebook after a console Restart (finding 6 of the fresh-user trial): JupyterLab
deletes the session, Jupyter server shuts the kernel down with jupyter_client's
``KernelManager.shutdown_kernel()`` (a shutdown request, SIGTERM after half of
``shutdown_wait_time``, SIGKILL at its end: 2.5 s + 2.5 s), while the kernel's BoxSession
restores the box at interpreter exit. The box must end as found: the original server's argv runs
again, no pending journal, no run lock. A real kernel (the venv's ``python3`` kernelspec) runs
the real box console against a real sandbox server of the test's own."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time

import pytest

from remote import connect
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.session import runlock
from workbench.session.journal import Journal, restore_box

jupyter_client = pytest.importorskip("jupyter_client")


def _run(kc, code: str, timeout: float = 240) -> str:
    out: list[str] = []

    def hook(msg):
        content = msg["content"]
        if msg["msg_type"] == "stream":
            out.append(content["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(content["traceback"]))

    reply = kc.execute_interactive(textwrap.dedent(code), timeout=timeout, output_hook=hook)
    text = "".join(out)
    assert reply["content"]["status"] == "ok", text
    return text


def _kernel(tmp_path, state_dir, session_name: str):
    km = jupyter_client.KernelManager(kernel_name="python3")
    # jupyter_server's SessionManager.get_kernel_env sets JPY_SESSION_NAME to the notebook's path
    env = {**os.environ, "EAGLE_WORKBENCH_STATE_DIR": str(state_dir), "JPY_SESSION_NAME": session_name}
    env.pop("EAGLE_WORKBENCH_DRIVER", None)
    stderr = open(tmp_path / "kernel-stderr.log", "wb")
    km.start_kernel(env=env, stderr=stderr)
    stderr.close()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return km, kc


def _restart_in_kernel(kc, port: int) -> dict:
    """The user's steps in box_console.ipynb: the console on ``port``, Restart with EAGLE3."""
    text = _run(kc, f"""
        import json
        from workbench.lab.console import BoxConsole
        c = BoxConsole(port={port}, server_start_timeout=180)
        edited = c.command.value.replace("--speculative-algorithm EAGLE ", "--speculative-algorithm EAGLE3 ")
        handle = c.restart(edited)
        assert handle is not None, c.status_line.value
        print("RESULT" + json.dumps({{"pid": handle.pid}}))
    """)
    return json.loads(text.split("RESULT", 1)[1].splitlines()[0])


def _original_running(box, argv: tuple[str, ...]):
    return [p for p in box.find_servers(timeout=30) if tuple(p.argv) == argv]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["shutdown_kernel", "sigterm"])
def test_kernel_shutdown_after_a_console_restart_leaves_the_box_as_found(how, own_sandbox_server, tmp_path, state_dir):
    """``shutdown_kernel``: what deleting the session does (now=False); ``sigterm``: the kernel
    terminated without a shutdown request (``kill PID``). ``now=True`` (SIGKILL at once) cannot be
    handled: the next run on the box or ``workbench restore`` restores then (tests/workbench/test_journal.py)."""
    box = connect("local")
    relaunched = []
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        original = next(tuple(p.argv) for p in box.find_servers(timeout=30) if p.pid == srv.pid)
        km, kc = _kernel(tmp_path, state_dir, "/work/repo/notebooks/box_console.ipynb")
        try:
            restarted = _restart_in_kernel(kc, srv.port)["pid"]
            assert not box.is_alive(srv.pid) and box.is_alive(restarted)
            holder = runlock.box_status(box).holder
            # the lock names the notebook, not ipykernel_launcher.py
            assert holder is not None and holder.runbook == "box_console.ipynb", holder
            assert Journal(box).pending
        finally:
            kc.stop_channels()
            started = time.monotonic()
            if how == "shutdown_kernel":
                km.shutdown_kernel()  # what deleting the session does (now=False)
            else:
                os.kill(km.provisioner.pid, signal.SIGTERM)
                while km.is_alive() and time.monotonic() - started < 240:
                    time.sleep(0.2)
                assert not km.is_alive(), "the kernel outlived SIGTERM"
                km.shutdown_kernel(now=True)  # its connection files and sockets
            took = time.monotonic() - started
        log = (tmp_path / "kernel-stderr.log").read_text(errors="replace")
        print(f"shutdown_kernel() took {took:.2f} s; the kernel's stderr:\n{log}")
        try:
            # right after the shutdown: nothing pending, no lock (the relaunch may still be starting)
            assert not Journal(box).pending, (took, log)
            assert Journal(box).data == {}, log
            assert runlock.box_status(box).holder is None, log
            assert not box.is_alive(restarted), log
            deadline = time.monotonic() + 180
            while not (relaunched := _original_running(box, original)) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert len(relaunched) == 1, log
            box.wait_healthy(_handle(box, relaunched[0], srv.port), timeout=180)
            # a `workbench restore` afterwards has nothing to do (no stale lock, no pending journal)
            after = restore_box(box, server_start_timeout=30)
            assert after.clean and after.actions == [], after
        finally:
            if Journal(box).pending:  # the test failed: put the box back (stops the restarted server)
                restore_box(box, server_start_timeout=120)
            for p in relaunched or _original_running(box, original):
                box.stop_server(p.pid, grace=10)
    from remote.probes import list_probes
    assert list_probes(box) == []
    box.close()


def _handle(box, proc, port):
    from remote.result import ServerHandle

    return ServerHandle(pid=proc.pid, pgid=proc.pgid, port=port, log_path=proc.log_path or f"/proc/{proc.pid}/fd/2",
                        pid_path="", argv=tuple(proc.argv), cwd=proc.cwd, box=box.name)


def test_run_name_is_the_notebook_in_a_jupyter_kernel(monkeypatch):
    monkeypatch.delenv(runlock.RUNBOOK_ENV, raising=False)
    monkeypatch.setenv(runlock.JUPYTER_SESSION_ENV, "/home/u/eagle-workbench/notebooks/box_console.ipynb")
    assert runlock.run_name() == "box_console.ipynb"
    monkeypatch.setenv(runlock.JUPYTER_SESSION_ENV, "Console 1")
    assert runlock.run_name() == "Console 1"
    monkeypatch.setenv(runlock.RUNBOOK_ENV, "diagnose_acceptance")
    assert runlock.run_name() == "diagnose_acceptance"
    monkeypatch.delenv(runlock.RUNBOOK_ENV)
    monkeypatch.delenv(runlock.JUPYTER_SESSION_ENV)
    monkeypatch.setattr("sys.argv", ["/x/bin/workbench", "restore"])
    assert runlock.run_name() == "workbench"
