"""A journalled session on one box: it may stop the server it found, launch servers of its own on
the same port, and leaves the box as found (:class:`BoxSession`, opened with :func:`open_box`).
Shared by the diagnosis (:class:`workbench.diagnosis.run.DiagnosisRun`) and the sweeps
(:class:`workbench.measure.sweep.SweepRun`)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any, Callable

from remote import connect
from remote.errors import RemoteError, ServerDied, ServerStartTimedOut
from workbench.engine.launch import DEFAULT_PORT, LaunchCommand
from workbench.errors import DiagnosisError, GpusNotFreed
from workbench.redact import REDACTOR
from workbench.sandbox_box import VLLM_DEFAULT_PORT, sandbox_launch_command, sandbox_vllm_launch_command
from workbench.session.gpu_guard import check_before_launch, check_before_stop, not_freed_refusal
from workbench.session.gpu_release import GPU_FREE_TIMEOUT_S, GpuRelease, stop_and_release
from workbench.session.gpus import sandbox_gpu_env
from workbench.session.guard import LaunchGuard
from workbench.session.inventory import Inventory, take_inventory
from workbench.session.journal import Journal, RestoreReport, restore_box
from workbench.session.launches import launch_record, progress_phases, serving_now
from workbench.session.startup_wait import MAX_START_S, default_reporter, wait_for_start
from workbench.errors import WatchdogError
from workbench.session.watchdog import (WATCHDOG_AFTER_EXPECTED, WATCHDOG_AFTER_S, check_watchdog_after,
                                        heartbeat_interval, read_report, report_notice, start_watchdog,
                                        watchdog_after_ok)

__all__ = ["BoxSession", "open_box", "holding_run_lock", "launch_env_delta", "check_run_parameters", "run_parameter_problem",
           "RUN_PARAMETER_KINDS", "MAX_RUN_SECONDS", "MAX_START_S"]

#: A launch is given up after ``server_start_timeout`` seconds WITHOUT progress (no new log bytes,
#: no CPU time used by its process group, the same answer, the same start-up phase and shard
#: count: ``remote.readiness.StallClock``, :mod:`workbench.session.startup_wait`), naming the phase
#: it stalled in; one that keeps progressing is waited for up to :data:`MAX_START_S` in all,
#: whatever ``server_start_timeout`` is (issue 28: a 40-minute load that progresses is waited for).


class BoxSession:
    """A journalled session on one box that may stop the server it found, launch servers of its
    own on the same port, and must leave the box as found (:meth:`restore`, also at interpreter
    exit). Shared by :class:`DiagnosisRun` and :class:`workbench.sweep.SweepRun`; open the box with
    :func:`open_box`. ``restarts`` counts launches of something other than what was running.
    ``server_start_timeout``: seconds a launch (or a server found still starting) may go without
    progress before it is given up, naming the start-up phase it stalled in (a launch that
    progresses: up to :data:`MAX_START_S` in all); ``request_timeout``: seconds each HTTP request to the server may take (the measurements'
    requests, the probe request).

    Every launch passes the launch guard first (:attr:`guard`, :class:`workbench.session.guard.LaunchGuard`):
    the doctor on the exact command, and a launch its findings say will not start is refused with
    :class:`workbench.errors.LaunchRefused` before anything is stopped or started; ``force_launch``
    launches it anyway (recorded as overridden).

    A launch's start-up progress (phase, shard count, elapsed, last log line) goes to
    :attr:`start_reporter` while it loads (``reporter(label, StartupProgress, elapsed_s, final)``;
    None: :func:`~workbench.session.startup_wait.default_reporter` at each launch, a bar on a
    terminal, lines in a notebook; set it to show progress elsewhere, e.g. the console's status);
    :attr:`last_start` is the :class:`~workbench.logs.startup.StartupProgress` of the latest launch.

    GPUs (:mod:`workbench.session.gpu_release`, :mod:`workbench.session.gpu_guard`): every stop
    waits until the GPUs the server used are back at their baseline (``gpu_free_timeout`` seconds,
    else :class:`~workbench.errors.GpusNotFreed`; before a launch, a refusal), and every launch is
    preceded by the check of its rendezvous ports and GPUs (:class:`~workbench.errors.GpusHeld`
    naming the holders); ``reclaim_gpus`` (settable, default False) cleans up the box user's own
    orphaned SGLang processes first. ``gpu_events``: what each stop and clean-up found (dicts)."""

    def __init__(self, box, inventory: Inventory, journal: Journal, *, server_start_timeout: float = 300.0,
                 allow_restart: bool = True, request_timeout: float = 300.0, force_launch: bool = False):
        self.box = box
        self.inventory = inventory
        self.journal = journal
        self.allow_restart = allow_restart
        self.server_start_timeout = server_start_timeout
        self.request_timeout = request_timeout
        self.restarts = 0
        self.launches: list[dict] = []
        self.current = None  # ServerHandle of the server the session launched and left running, if any
        self.current_launch: LaunchCommand | None = None
        self.restore_report: RestoreReport | None = None
        self.failed_launch: dict | None = None  # the times of the last launch that did not start
        self.restore_stopped_at: float | None = None  # when the restore began stopping the run's server
        self.finished = False
        self.force_launch = force_launch
        self.start_reporter = None
        self.last_start = None
        self.reclaim_gpus = False
        self.gpu_free_timeout = GPU_FREE_TIMEOUT_S
        self.gpu_events: list[dict] = []
        self._gpu_baselines: dict = {}  # pid of a launched server -> GpuBaseline before its launch
        running = list(inventory.launch.exec_argv) if inventory.server_pid is not None else None
        self.guard = LaunchGuard(box, engine_root=inventory.engine_root, engine_version=inventory.engine_version,
                                 cwd=inventory.server_cwd, force=force_launch is True, running_argv=running)
        atexit.register(self._atexit)
        _OPEN_SESSIONS.append(self)
        _handle_sigterm_like_exit()

    # -- server management ----------------------------------------------------------------------

    def _stop_released(self, target, grace: float, what: str) -> GpuRelease:
        """Stop ``target`` (whole tree), then wait for its GPUs (``gpu_free_timeout``); recorded in ``gpu_events``."""
        baseline = self._gpu_baselines.pop(getattr(target, "pid", target), None)
        _stopped, release = stop_and_release(self.box, target, grace=grace, baseline=baseline,
                                             timeout=self.gpu_free_timeout, server=what)
        self.gpu_events.append({"event": "stop", "server": what, **release.to_dict()})
        return release

    def _stop_current(self, *, check_gpus: bool = True) -> None:
        if self.current is not None:
            release = self._stop_released(self.current, 10.0, f"the run's server (pid {self.current.pid})")
            self.journal.remove_started(self.current.pid)
            self.current = None
            self.current_launch = None
            if check_gpus:
                release.raise_error()

    def _serving_pid(self) -> int | None:
        """The pid of the server serving the port now (the run's own, else the original not yet
        stopped), ``None`` when none serves."""
        if self.current is not None:
            return self.current.pid
        original = self.journal.data.get("original_server")
        if original and not original.get("stopped") and self.inventory.server_pid is not None:
            return self.inventory.server_pid
        return None

    def _stop_original(self) -> None:
        original = self.journal.data.get("original_server")
        if original and not original.get("stopped") and self.inventory.server_pid is not None:
            # Journal first: an interruption during the stop still gets the original back.
            self.journal.mark_original_stopped(True)
            self._stop_released(self.inventory.server_pid, 15.0,
                                f"the server as found (pid {self.inventory.server_pid})").raise_error()

    def _launch(self, launch: LaunchCommand, label: str, reason: str | None = None):
        """Stop whatever serves the port (the original, or the run's previous server), launch
        ``launch`` with the original's cwd and environment, wait until healthy.

        The cwd is ``inventory.server_cwd``: the original's, or, when the run launches the given
        command itself, the directory a server launched on that box starts in (what the doctor
        resolved relative model paths against). An environment prefix (``FOO=1 python -m ...``)
        is no program: its variables are merged over the original's environment and the program
        is launched without it (:meth:`LaunchCommand.exec_argv`, what the server's
        ``/proc/PID/cmdline`` shows, so the journal finds it by that argv); what is recorded as
        the launch command keeps the prefix, as given.

        First the launch guard (:meth:`LaunchGuard.check`): raises :class:`LaunchRefused` when the
        doctor's findings on ``launch`` say it will not start, before anything is stopped.

        ``reason``: why this load is needed, kept in its record in ``self.launches``
        (:func:`~workbench.session.launches.launch_record`); one that does not start leaves its
        times in :attr:`failed_launch`."""
        self.guard.check(launch, label)
        env = sandbox_gpu_env(self.box, launch, launch.launch_env(self.inventory.server_env))
        # what the stop cannot change refuses the launch before anything is stopped (no outage)
        check_before_stop(self.box, launch, env=env, label=label, serving_pid=self._serving_pid(),
                          reclaim=self.reclaim_gpus is True, timeout=10)
        stopped = serving_now(self)
        stopped_at = time.time() if stopped else None
        self.failed_launch = None
        try:
            self._stop_current()
            self._stop_original()
        except GpusNotFreed as exc:
            raise not_freed_refusal(launch, label, exc) from exc
        check = check_before_launch(self.box, launch, env=env, label=label, reclaim=self.reclaim_gpus is True,
                                    timeout=self.gpu_free_timeout)
        if check.reclaimed:
            self.gpu_events.append({"event": "reclaim", "label": label, "reclaimed": check.reclaimed})
        argv = launch.exec_argv
        self.journal.begin_launch(port=self.inventory.port, argv=argv, label=label)
        launched_at = time.time()
        try:
            handle = self.box.launch_server(argv, port=self.inventory.port, cwd=self.inventory.server_cwd, env=env)
        except RemoteError:
            self.journal.abort_launch()
            raise
        self.journal.end_launch(pid=handle.pid, pgid=handle.pgid)
        self.current, self.current_launch = handle, launch
        self._gpu_baselines[handle.pid] = check.baseline
        if label != "as-found":
            self.restarts += 1  # launching what was not running is not a restart
        times = {"label": label, "reason": reason, "launch_command": launch.to_display(), "pid": handle.pid,
                 "log_path": handle.log_path, "stopped_at": stopped_at, "stopped": stopped,
                 "launched_at": launched_at, "log_start": 0}
        try:
            # a stall time-out: a start slowed down by a busy machine keeps its log and CPU moving
            reporter = self.start_reporter if self.start_reporter is not None else default_reporter()
            _waited, self.last_start = wait_for_start(self.box, handle, stall_timeout=self.server_start_timeout,
                                                     label=label, reporter=reporter)
        except (ServerDied, ServerStartTimedOut):
            # Ours either way: a server that did not answer in time still runs (and holds the
            # port), one that died may leave workers in its process group. Stop the whole group
            # before the failure is reported, so nothing the run launched outlives it.
            self.failed_launch = times
            self._stop_current(check_gpus=False)  # GPUs still held are in gpu_events; the start failure is the error
            raise
        ready_at = time.time()
        phases = progress_phases(self.last_start)
        self.launches.append(launch_record(**times, ready_at=ready_at, phases=phases))
        return handle

    def launch(self, launch: LaunchCommand, label: str, *, force: bool = False, reason: str | None = None):
        """Launch ``launch`` on the session's port in place of whatever serves it (journalled: the
        original server is recorded, and :meth:`restore` brings it back), wait until healthy and
        return the ``remote.result.ServerHandle``. ``force``: launch even when the doctor's
        findings say it will not start (recorded as ``overridden``). Raises
        :class:`workbench.errors.LaunchRefused` (nothing stopped or started), ``ServerDied`` /
        ``ServerStartTimedOut`` (the launched server is stopped first, whole group) and
        :class:`DiagnosisError` when ``launch`` names another ``--port`` than the session's."""
        port = launch.get("--port")
        if port is not None and str(port) != str(self.inventory.port):
            raise DiagnosisError(f"the launch command's --port {port} is not the session's port "
                                 f"{self.inventory.port}: a session launches on the port it found")
        before = self.guard.force
        self.guard.force = before or force is True
        try:
            return self._launch(launch, label, reason)
        finally:
            self.guard.force = before

    def stop(self) -> bool:
        """Stop whatever serves the session's port: the session's own server, or the original
        (journalled first, so :meth:`restore` relaunches it). True when something was stopped."""
        original = self.journal.data.get("original_server")
        stopping = self.current is not None or bool(original and not original.get("stopped")
                                                    and self.inventory.server_pid is not None)
        self._stop_current()
        self._stop_original()
        return stopping

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
        handle = self._launch(self.inventory.launch, "as-found",
                              f"as-found: no server ran on port {self.inventory.port}; the run launched the "
                              "command as given to measure it")
        return self.inventory.base_url, handle.log_path, self.inventory.launch

    def restore(self) -> RestoreReport:
        """Put the box back as found: stop the session's servers, revert probes, relaunch the
        original server (:func:`workbench.journal.restore_box`). Counts a relaunch as a restart;
        its record (``restore_report.launch``) gets the stop time (:attr:`restore_stopped_at`)."""
        serving = serving_now(self)
        if serving and serving != "the server as found" and self.restore_stopped_at is None:
            self.restore_stopped_at = time.time()
        self.restore_report = restore_box(self.box, server_start_timeout=self.server_start_timeout,
                                          reporter=self.start_reporter)
        if self.restore_report.launch is not None and serving and serving != "the server as found":
            self.restore_report.launch.update(stopped_at=self.restore_stopped_at, stopped=serving)
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
                with _sigterm_ignored():
                    report = restore_box(self.box, server_start_timeout=self.server_start_timeout)
                for line in report.actions + report.problems:
                    print(f"[eagle-workbench restore] {REDACTOR.text(line)}", file=sys.stderr)
        finally:
            self.box.close()  # an SSH box: close its connection and port forwards before exit



#: the sessions of this process, for the SIGTERM handler (:func:`_handle_sigterm_like_exit`)
_OPEN_SESSIONS: list[BoxSession] = []
_SIGTERM_INSTALLED = False


@contextlib.contextmanager
def _sigterm_ignored():
    """SIGTERM is ignored inside the block (main thread only; elsewhere nothing changes). The
    interpreter-exit restore runs in it: a Jupyter kernel shut down by jupyter_client gets a
    shutdown request, then SIGTERM after half of ``KernelManager.shutdown_wait_time`` (5 s by
    default), then SIGKILL at its end (jupyter_client ``KernelManager._async_finish_shutdown``);
    ignoring the SIGTERM gives the restore the whole 5 s. SIGKILL cannot be handled: what it cuts
    off is restored by the next run on the box or ``workbench restore``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _on_sigterm(signum, frame) -> None:
    """SIGTERM (a kernel terminated without a shutdown request, ``kill PID``): restore the box as
    at exit (every open session of this process, SIGTERM ignored meanwhile), then die of SIGTERM
    as the default action would."""
    for session in list(_OPEN_SESSIONS):
        try:
            session._atexit()
        except Exception as exc:  # noqa: BLE001 - reported; the other sessions are restored still
            print(f"[eagle-workbench restore] could not restore {getattr(session.box, 'name', session.box)} "
                  f"on SIGTERM: {type(exc).__name__}: {REDACTOR.text(str(exc))}", file=sys.stderr)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _handle_sigterm_like_exit() -> None:
    """Install :func:`_on_sigterm` once per process, from the main thread and only where SIGTERM
    still has its default action (a program with its own handler keeps it)."""
    global _SIGTERM_INSTALLED
    if _SIGTERM_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    _SIGTERM_INSTALLED = True


#: The longest time-out a run parameter takes, in seconds (11.6 days): the waits underneath
#: (``select``/``poll``, Paramiko's channel time-outs) take milliseconds in a C int and overflow
#: above about 2.1e6 s (the same bound as ``workbench.cli.argtypes.MAX_SECONDS``).
MAX_RUN_SECONDS = 1_000_000.0


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_seconds(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and 0 < v <= MAX_RUN_SECONDS


#: The plain kinds of run parameter: kind -> (what a value must be, the test of a value). A bool is
#: never a number here (``True`` is no count of 1) and a string never a flag (``"no"`` is no False).
#: Used by :func:`check_run_parameters` and by the runbooks' schemas (:mod:`workbench.runbook_params`).
RUN_PARAMETER_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "flag": ("True or False", lambda v: isinstance(v, bool)),
    "count": ("a whole number ≥ 1", lambda v: _is_int(v) and v >= 1),
    "optional_count": ("None (all) or a whole number ≥ 1", lambda v: v is None or (_is_int(v) and v >= 1)),
    "non_negative": ("a whole number ≥ 0", lambda v: _is_int(v) and v >= 0),
    "seconds": (f"a number of seconds > 0 (at most {MAX_RUN_SECONDS:.0f})", _is_seconds),
    "watchdog": (WATCHDOG_AFTER_EXPECTED, watchdog_after_ok),
}


def run_parameter_problem(name: str, kind: str, value: Any) -> str | None:
    """``None`` when ``value`` is of ``kind`` (a key of :data:`RUN_PARAMETER_KINDS`), else the
    problem as one phrase: ``"NAME must be WHAT, got VALUE"``. Raises ``KeyError`` for an unknown kind."""
    expected, ok = RUN_PARAMETER_KINDS[kind]
    return None if ok(value) else f"{name} must be {expected}, got {value!r}"


def check_run_parameters(*, flags: dict[str, Any] | None = None, counts: dict[str, Any] | None = None,
                         optional_counts: dict[str, Any] | None = None, non_negative: dict[str, Any] | None = None,
                         seconds: dict[str, Any] | None = None) -> None:
    """Check a runbook's parameters before anything touches the box, all at once. ``flags``: must
    be ``True``/``False`` (a string such as ``"no"`` is refused, never taken as true); ``counts``:
    ints ≥ 1; ``optional_counts``: ``None`` or ints ≥ 1 (``0`` is refused, never taken as "all");
    ``non_negative``: ints ≥ 0; ``seconds``: numbers > 0 and at most :data:`MAX_RUN_SECONDS`
    (``inf``, ``nan`` refused). Raises :class:`DiagnosisError` naming every bad parameter with its
    value and what it must be (:func:`run_parameter_problem`). The runbooks check every one of
    their parameters with :func:`workbench.runbook_params.check_runbook_parameters`, which uses
    the same kinds."""
    problems = []
    for kind, values in (("flag", flags), ("count", counts), ("optional_count", optional_counts),
                         ("non_negative", non_negative), ("seconds", seconds)):
        for name, v in (values or {}).items():
            problem = run_parameter_problem(name, kind, v)
            if problem:
                problems.append(problem)
    if problems:
        raise DiagnosisError("bad parameters: " + "; ".join(problems))


def launch_env_delta(box, env: dict[str, str] | None, *, timeout: float = 30) -> dict[str, str] | None:
    """The part of a server's environment ``env`` that a relaunch on ``box`` must pass explicitly:
    the variables whose value differs from (or is missing in) the environment a launch on that box
    gets anyway, read with ``env -0`` run through the box the way ``Box.launch_server`` runs its
    command (``launch_server`` adds ``env`` to exactly that environment, so the relaunch sees the
    same values). ``None`` when ``env`` is ``None``. When the box's environment cannot be read the
    whole ``env`` is returned (a relaunch must never lose a variable), with a note on stderr.
    Limit: a variable the original server did not have but the box's environment has is not removed
    by the relaunch (``launch_server`` only adds)."""
    if env is None:
        return None
    try:
        result = box.run(["env", "-0"], timeout=timeout)
    except RemoteError as exc:
        print(f"[eagle-workbench] the box's environment could not be read ({exc}); the journal keeps the "
              "original server's whole environment", file=sys.stderr)
        return dict(env)
    base = dict(item.split("=", 1) for item in result.stdout.split("\0") if "=" in item)
    return {k: v for k, v in env.items() if base.get(k) != v}


def sandbox_default_launch(engine: str | None, port: int | None, *, algorithm: str = "EAGLE") -> str:
    """The embedded sandbox box's launch command for ``engine``: ``None``/``"sglang"`` its
    SGLang-compatible server with ``--speculative-algorithm ALGORITHM`` on ``port`` (default
    30000); ``"vllm"`` vLLM's CPU build serving the same target and draft as shipped
    (:func:`workbench.sandbox_box.sandbox_vllm_launch_command`, default port 8000). Raises
    :class:`DiagnosisError` for another engine."""
    if engine in (None, "sglang"):
        return sandbox_launch_command(algorithm=algorithm, port=port or DEFAULT_PORT)
    if engine == "vllm":
        return sandbox_vllm_launch_command(port=port or VLLM_DEFAULT_PORT)
    raise DiagnosisError(f"engine must be None, 'sglang' or 'vllm' (the sandbox box's engine), got {engine!r}")


@contextlib.contextmanager
def holding_run_lock(box, host: str, name: str, *, timeout: float = 10.0):
    """Hold ``box``'s run lock (:mod:`workbench.session.runlock`) for the block: what a command
    that changes the box outside a runbook (``workbench probe add`` / ``revert``) takes, so it
    never changes a box a runbook is using, nor a runbook one it is changing. ``host``: the box's
    spec (a holder on another machine than the box heartbeats over its own connection); ``name``:
    what the lock names as the holder (shown to a run that finds the box taken); ``timeout``:
    seconds for each lock call on the box. Yields the :class:`~workbench.session.runlock.RunLock`.

    Raises :class:`~workbench.session.runlock.RunLocked` (exit 2) naming the live holder (run id,
    pid, host, runbook, since when) before the block runs, nothing on the box changed;
    ``JournalError`` / ``RemoteError`` when the lock cannot be taken. A release that fails after
    the block is reported on stderr, never raised over the block's own result or error (the lock of
    a process that has ended is taken over by the next run: its holder is dead)."""
    from workbench.errors import JournalError
    from workbench.session import runlock

    lock = runlock.acquire(box, host, uuid.uuid4().hex[:12], timeout=timeout, name=name)
    try:
        yield lock
    finally:
        try:
            lock.release(timeout=timeout)
        except (RemoteError, JournalError) as exc:
            print(f"[eagle-workbench] could not release the run lock on {box.name} ({exc}); it is taken over "
                  "once this process has ended", file=sys.stderr)


def open_box(host: str, *, launch_command: str | None, port: int | None,
             server_start_timeout: float = 300.0, default_launch: str | None = None,
             how: str = "port = N in the parameters cell",
             watchdog_after_s: float = WATCHDOG_AFTER_S) -> tuple[Any, Inventory, Journal]:
    """Connect to ``host``, take the box's run lock (one run per box, decided atomically on the
    box before anything changes: :mod:`workbench.session.runlock`), start the run's watchdog on
    the box, restore anything a dead earlier run left, take the inventory (``launch_command=None``:
    the server running on ``port``, else ``default_launch``, by default the embedded sandbox box
    with the wrong flag) and open the journal with the original server recorded. The lock is
    ``journal.run_lock`` (released by the session's restore, :func:`restore_box`, once everything
    is undone; the watchdog, ``journal.run_lock.watchdog``, then exits).

    ``watchdog_after_s``: seconds of heartbeat silence after which the watchdog restores the box
    itself (:mod:`workbench.session.watchdog`; the run then heartbeats every
    :func:`~workbench.session.watchdog.heartbeat_interval` seconds); ``0`` runs no watchdog. A
    watchdog that cannot start (another still watches the box) is said on stderr; the run goes on
    without one.

    Raises :class:`~workbench.session.runlock.RunLocked` (a :class:`DiagnosisError`) naming the
    live run (run id, pid, host, runbook, since when) when another run holds the box — nothing
    on the box is touched then; :class:`DiagnosisError` when what a dead run left cannot be
    restored; what connecting and the inventory raise (the lock is released again), e.g.
    :class:`~workbench.errors.ServerChoiceError` when several servers run and none is named
    (``how``: how the caller's user names a port, see :func:`take_inventory`)."""
    from workbench.session import runlock

    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise DiagnosisError(f"port must be a TCP port number 1-65535, got {port!r}")
    after_s = check_watchdog_after(watchdog_after_s)
    box = connect(host)
    run_id = uuid.uuid4().hex[:12]
    try:
        lock = runlock.acquire(box, host, run_id, heartbeat_s=heartbeat_interval(after_s) if after_s else None)
    except BaseException:
        box.close()
        raise
    journal = None
    try:
        if after_s:
            try:
                lock.watchdog = start_watchdog(box, run_id, after_s=after_s, server_start_timeout=server_start_timeout)
            except WatchdogError as exc:
                print(f"[eagle-workbench] no watchdog for run {run_id}: {exc}", file=sys.stderr)
        try:
            shown = read_report(box)
        except RemoteError as exc:
            shown = {"unreadable": str(exc)}
        if shown is not None:
            print(f"[eagle-workbench] {report_notice(shown)}; `workbench status --host {host}` shows what it did",
                  file=sys.stderr)
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
        inventory = take_inventory(box, launch_command=launch_command, port=port, how=how,
                                   default_launch=default_launch or sandbox_launch_command(port=port or DEFAULT_PORT))
        journal = Journal(box)
        journal.begin(run_id)
        journal.run_lock = lock
        if inventory.server_pid is not None:
            journal.record_original(argv=list(inventory.launch.argv), cwd=inventory.server_cwd,
                                    env=launch_env_delta(box, inventory.server_env), port=inventory.port,
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
