"""A journalled session on one box: it may stop the server it found, launch servers of its own on
the same port, and leaves the box as found (:class:`BoxSession`, opened with :func:`open_box`).
Shared by the diagnosis (:class:`workbench.diagnosis.run.DiagnosisRun`) and the sweeps
(:class:`workbench.measure.sweep.SweepRun`)."""

from __future__ import annotations

import atexit
import os
import sys
import time
import uuid
from typing import Any

from remote import connect
from remote.errors import RemoteError, ServerDied, ServerStartTimedOut
from workbench.engine.launch import DEFAULT_PORT, LaunchCommand
from workbench.errors import DiagnosisError
from workbench.sandbox_box import sandbox_launch_command
from workbench.session.inventory import Inventory, take_inventory
from workbench.session.journal import Journal, RestoreReport, restore_box

__all__ = ["BoxSession", "open_box"]


class BoxSession:
    """A journalled session on one box that may stop the server it found, launch servers of its
    own on the same port, and must leave the box as found (:meth:`restore`, also at interpreter
    exit). Shared by :class:`DiagnosisRun` and :class:`workbench.sweep.SweepRun`; open the box with
    :func:`open_box`. ``restarts`` counts launches of something other than what was running."""

    def __init__(self, box, inventory: Inventory, journal: Journal, *, server_start_timeout: float = 300.0,
                 allow_restart: bool = True):
        self.box = box
        self.inventory = inventory
        self.journal = journal
        self.allow_restart = allow_restart
        self.server_start_timeout = server_start_timeout
        self.restarts = 0
        self.launches: list[dict] = []
        self.current = None  # ServerHandle of the server the session launched and left running, if any
        self.current_launch: LaunchCommand | None = None
        self.restore_report: RestoreReport | None = None
        self.finished = False
        atexit.register(self._atexit)

    # -- server management ----------------------------------------------------------------------

    def _stop_current(self) -> None:
        if self.current is not None:
            self.box.stop_server(self.current, grace=10.0)
            self.journal.remove_started(self.current.pid)
            self.current = None
            self.current_launch = None

    def _stop_original(self) -> None:
        original = self.journal.data.get("original_server")
        if original and not original.get("stopped") and self.inventory.server_pid is not None:
            # Journal first: an interruption during the stop still gets the original back.
            self.journal.mark_original_stopped(True)
            self.box.stop_server(self.inventory.server_pid, grace=15.0)

    def _launch(self, launch: LaunchCommand, label: str):
        """Stop whatever serves the port (the original, or the run's previous server), launch
        ``launch`` with the original's cwd and environment, wait until healthy.

        The cwd is ``inventory.server_cwd``: the original's, or, when the run launches the given
        command itself, the directory a server launched on that box starts in (what the doctor
        resolved relative model paths against). An environment prefix (``FOO=1 python -m ...``)
        is no program: its variables are merged over the original's environment and the program
        is launched without it (:meth:`LaunchCommand.exec_argv`, what the server's
        ``/proc/PID/cmdline`` shows, so the journal finds it by that argv); what is recorded as
        the launch command keeps the prefix, as given."""
        self._stop_current()
        self._stop_original()
        env = launch.launch_env(self.inventory.server_env)
        argv = launch.exec_argv
        self.journal.begin_launch(port=self.inventory.port, argv=argv, label=label)
        try:
            handle = self.box.launch_server(argv, port=self.inventory.port, cwd=self.inventory.server_cwd, env=env)
        except RemoteError:
            self.journal.abort_launch()
            raise
        self.journal.end_launch(pid=handle.pid, pgid=handle.pgid)
        self.current, self.current_launch = handle, launch
        if label != "as-found":
            self.restarts += 1  # launching what was not running is not a restart
        started = time.time()
        try:
            waited = self.box.wait_healthy(handle, timeout=self.server_start_timeout)
        except (ServerDied, ServerStartTimedOut):
            # Ours either way: a server that did not answer in time still runs (and holds the
            # port), one that died may leave workers in its process group. Stop the whole group
            # before the failure is reported, so nothing the run launched outlives it.
            self._stop_current()
            raise
        self.launches.append({"label": label, "launch_command": launch.to_string(), "pid": handle.pid,
                              "log_path": handle.log_path, "healthy_after_s": round(waited, 2),
                              "started_at": started})
        return handle

    def _serving(self) -> tuple[str, str | None, LaunchCommand]:
        """The URL, log path and launch command of whatever serves now, launching the given
        command when nothing runs (a box with no server: the run starts it, and stops it at the end)."""
        if self.current is not None:
            return self.inventory.base_url, self.current.log_path, self.current_launch
        original = self.journal.data.get("original_server")
        if original and not original.get("stopped"):
            return self.inventory.base_url, self.inventory.server_log, self.inventory.launch
        if not self.allow_restart:
            raise DiagnosisError("no server is running and allow_restart is False: nothing to measure")
        handle = self._launch(self.inventory.launch, "as-found")
        return self.inventory.base_url, handle.log_path, self.inventory.launch

    def restore(self) -> RestoreReport:
        """Put the box back as found: stop the session's servers, revert probes, relaunch the
        original server (:func:`workbench.journal.restore_box`). Counts a relaunch as a restart."""
        self.restore_report = restore_box(self.box, server_start_timeout=self.server_start_timeout)
        lock = getattr(self.journal, "run_lock", None)
        if lock is not None and self.restore_report.clean:
            lock.released = True  # restore_box released it (this process holds it)
            lock.stop_heartbeat()
        if any(a.startswith("relaunched") for a in self.restore_report.actions):
            self.restarts += 1
        self.current = None
        return self.restore_report

    def _atexit(self) -> None:
        # Under ``workbench runbook`` the driver restores the box after killing the kernel; a
        # second restorer here would race it.
        try:
            if os.environ.get("EAGLE_WORKBENCH_DRIVER"):
                return
            if not self.finished:
                self.finished = True
                report = restore_box(self.box, server_start_timeout=self.server_start_timeout)
                for line in report.actions + report.problems:
                    print(f"[eagle-workbench restore] {line}", file=sys.stderr)
        finally:
            self.box.close()  # an SSH box: close its connection and port forwards before exit



def check_run_parameters(*, flags: dict[str, Any] | None = None, counts: dict[str, Any] | None = None,
                         optional_counts: dict[str, Any] | None = None, non_negative: dict[str, Any] | None = None,
                         seconds: dict[str, Any] | None = None) -> None:
    """Check a runbook's parameters before anything touches the box, all at once. ``flags``: must
    be ``True``/``False`` (a string such as ``"no"`` is refused, never taken as true); ``counts``:
    ints ≥ 1; ``optional_counts``: ``None`` or ints ≥ 1 (``0`` is refused, never taken as "all");
    ``non_negative``: ints ≥ 0; ``seconds``: numbers > 0. Raises :class:`DiagnosisError` naming
    every bad parameter with its value and what it must be."""
    problems = []

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    for name, v in (flags or {}).items():
        if not isinstance(v, bool):
            problems.append(f"{name} must be True or False, got {v!r}")
    for name, v in (counts or {}).items():
        if not (is_int(v) and v >= 1):
            problems.append(f"{name} must be a whole number ≥ 1, got {v!r}")
    for name, v in (optional_counts or {}).items():
        if v is not None and not (is_int(v) and v >= 1):
            problems.append(f"{name} must be None (all) or a whole number ≥ 1, got {v!r}")
    for name, v in (non_negative or {}).items():
        if not (is_int(v) and v >= 0):
            problems.append(f"{name} must be a whole number ≥ 0, got {v!r}")
    for name, v in (seconds or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            problems.append(f"{name} must be a number of seconds > 0, got {v!r}")
    if problems:
        raise DiagnosisError("bad parameters: " + "; ".join(problems))


def open_box(host: str, *, launch_command: str | None, port: int | None,
             server_start_timeout: float = 300.0, default_launch: str | None = None) -> tuple[Any, Inventory, Journal]:
    """Connect to ``host``, take the box's run lock (one run per box, decided atomically on the
    box before anything changes: :mod:`workbench.session.runlock`), restore anything a dead
    earlier run left, take the inventory (``launch_command=None``: the server running on ``port``,
    else ``default_launch``, by default the embedded sandbox box with the wrong flag) and open the
    journal with the original server recorded. The lock is ``journal.run_lock`` (released by the
    session's restore, :func:`restore_box`, once everything is undone).

    Raises :class:`~workbench.session.runlock.RunLocked` (a :class:`DiagnosisError`) naming the
    live run (run id, pid, host, runbook, since when) when another run holds the box — nothing
    on the box is touched then; :class:`DiagnosisError` when what a dead run left cannot be
    restored; what connecting and the inventory raise (the lock is released again)."""
    from workbench.session import runlock

    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise DiagnosisError(f"port must be a TCP port number 1-65535, got {port!r}")
    box = connect(host)
    run_id = uuid.uuid4().hex[:12]
    try:
        lock = runlock.acquire(box, host, run_id)
    except BaseException:
        box.close()
        raise
    journal = None
    try:
        leftover = Journal(box)
        if leftover.pending:
            # The lock is ours: whoever left this journal is dead (or ran before run locks existed:
            # then its owner's pid is checked too).
            if leftover.owner_alive():
                raise DiagnosisError(
                    f"another diagnosis (pid {leftover.data['owner']['pid']}, run {leftover.data.get('run_id')}) "
                    f"is running on {box.name}; wait for it to finish (its journal: {leftover.path})")
            print(f"[eagle-workbench] run {leftover.data.get('run_id')} left {box.name} changed; restoring it first",
                  file=sys.stderr)
            report = restore_box(box, server_start_timeout=server_start_timeout, release_lock=False)  # ours now
            for line in report.actions:
                print(f"[eagle-workbench restore] {line}", file=sys.stderr)
            if not report.clean:
                raise DiagnosisError("an earlier run left the box changed and it could not be restored: "
                                     + "; ".join(report.problems))
        inventory = take_inventory(box, launch_command=launch_command, port=port,
                                   default_launch=default_launch or sandbox_launch_command(port=port or DEFAULT_PORT))
        journal = Journal(box)
        journal.begin(run_id)
        journal.run_lock = lock
        if inventory.server_pid is not None:
            journal.record_original(argv=list(inventory.launch.argv), cwd=inventory.server_cwd,
                                    env=inventory.server_env, port=inventory.port,
                                    log_path=inventory.server_log, pid=inventory.server_pid)
    except BaseException:
        # Nothing was changed yet (the journal, if begun, records nothing pending): empty it and
        # give the box back to the next run.
        try:
            if journal is not None and not journal.pending:
                journal.close()
            lock.release()
        except Exception as exc:  # noqa: BLE001 - reported; the error that stopped open_box follows
            print(f"[eagle-workbench] could not release the run lock on {box.name}: {exc}", file=sys.stderr)
        box.close()
        raise
    return box, inventory, journal
