"""The diagnosis journal: what a run changed on the box, kept ON the box, so it can be undone.

A diagnosis stops the server it found, launches servers of its own and patches engine source with
probes. Each change is written to a JSON journal on the box *before* it is made, and removed once
undone, so that whoever restores the box (the run's own ``finally``, the kernel's ``atexit``, the
``workbench runbook`` driver after an interrupted papermill run, or ``workbench restore`` from a
new session) knows what to undo. Probes have their own record in :mod:`remote.probes`.

Layout (``<box.state_dir>/diagnosis/journal.json``, by default ``~/.cache/eagle-workbench/...``)::

    {"run_id": "...", "started_at": 1764424800.0,
     "original_server": {"argv": [...], "cwd": "...", "env": {...}, "port": 30000,
                         "log_path": "...", "stopped": true},
     "started_servers": [{"pid": 123, "pgid": 123, "port": 30000, "argv": [...], "label": "probe"}],
     "created_paths": ["<state_dir>/repairs/<run-id>-1"]}

``created_paths``: directories and files the run creates under the state dir (journalled before
they are written: a repaired draft copy, a compare_drafts copy), removed by :func:`restore_box`
with ``rm -rf`` (a symlink in them is removed, never followed).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from remote.errors import RemoteError, RemoteFileDecodeError, RemoteFileNotFound
from remote.result import ServerHandle, ServerProcess
from workbench.errors import JournalError, WatchdogError
from workbench.session import runlock, watchdog_box
from workbench.session.launches import launch_phases, launch_record, progress_phases
from workbench.session.startup_wait import MAX_START_S, default_reporter, wait_for_start
from workbench.session.gpu_release import stop_and_release

#: The journal's file name, in ``<state_dir>/diagnosis`` (the watchdog on the box reads the same:
#: :mod:`workbench.session.watchdog_box` holds the layout).
JOURNAL_NAME = watchdog_box.JOURNAL_NAME
#: The journal's permission bits: it holds the original server's secrets (needed to relaunch it).
JOURNAL_MODE = watchdog_box.JOURNAL_MODE
#: The journal directory's permission bits when the workbench creates it.
JOURNAL_DIR_MODE = watchdog_box.DIR_MODE


@dataclass
class RestoreReport:
    """What :func:`restore_box` did: one line per action, and what it could not undo.
    ``launch``: the record of the original server's relaunch (``None``: not relaunched), as
    :func:`workbench.session.launches.launch_record` makes it (label ``restore``, its reason,
    launch and ready times, the phases of its part of the appended log)."""

    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    launch: dict | None = None

    @property
    def clean(self) -> bool:
        """True when nothing was left that could not be undone."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"actions": list(self.actions), "problems": list(self.problems), "clean": self.clean,
                "launch": self.launch}


def journal_path(box) -> str:
    """The journal's absolute path on ``box``: ``<box.state_dir>/diagnosis/journal.json``."""
    return f"{box.state_dir}/{watchdog_box.DIAGNOSIS_DIR}/{JOURNAL_NAME}"


class Journal:
    """A run's journal on the box. Every mutation is written through at once (atomic write).

    Raises:
        JournalError: the file exists but is not a journal (bad JSON).
    """

    def __init__(self, box, path: str | None = None, timeout: float = 10.0):
        self.box = box
        self.timeout = timeout
        self.path = path or journal_path(box)
        self._dir_private = False  # set once _write has made its directory 0700
        #: the run lock taken for this run (:func:`workbench.session.open_box`), or None
        self.run_lock = None
        self.data: dict[str, Any] = self._load()

    def _load(self) -> dict[str, Any]:
        if not self.box.exists(self.path, timeout=self.timeout):
            return {}
        try:
            text = self.box.read_text(self.path, timeout=self.timeout)
        except RemoteFileDecodeError as exc:
            raise JournalError(f"{self.path} on {self.box}: not a diagnosis journal ({exc.message})") from exc
        if not text.strip():
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JournalError(f"{self.path} on {self.box}: not a diagnosis journal ({exc})") from exc
        problem = _shape_problem(data)
        if problem:
            raise JournalError(f"{self.path} on {self.box}: not a diagnosis journal ({problem})")
        return data

    @property
    def pending(self) -> bool:
        """True when an earlier run left changes that were never undone (:func:`journal_data_pending`)."""
        return journal_data_pending(self.data)

    def begin(self, run_id: str | None = None) -> str:
        """Start a new run's journal (``run_id``: the id of the run lock taken for it, else a new
        one). Raises JournalError if an earlier run left changes pending."""
        if self.pending:
            raise JournalError(
                f"{self.path} on {self.box}: an earlier diagnosis run ({self.data.get('run_id')}) left the box "
                "changed; run `workbench restore --host ...` (or restore_box) first"
            )
        self.data = {"run_id": run_id or uuid.uuid4().hex[:12], "started_at": time.time(), "started_servers": [],
                     "owner": {"host": socket.gethostname(), **runlock.self_identity()}}
        self._write()
        return self.data["run_id"]

    def owner_alive(self) -> bool | None:
        """Whether the process that began this journal still runs (:func:`journal_owner_alive`).
        The run lock (:mod:`workbench.session.runlock`) decides this on the box; this is the
        fallback for a journal without one."""
        return journal_owner_alive(self.data)

    def record_original(self, *, argv: list[str], cwd: str | None, env: dict[str, str] | None,
                        port: int | None, log_path: str | None, pid: int | None) -> None:
        """Remember the server that was running when the run began (before it is stopped).

        ``env``: only what the relaunch must add to the environment a launch on the box gets anyway
        (the caller passes the variables that differ from it:
        :func:`workbench.session.box_session.launch_env_delta`), real values included: restore
        relaunches the server exactly, ``--api-key`` and ``HF_TOKEN`` too. The journal file is
        private (mode 0600, in a 0700 directory when the workbench creates it: :meth:`_write`)."""
        self.data["original_server"] = {
            "argv": list(argv), "cwd": cwd, "env": env, "port": port, "log_path": log_path,
            "pid": pid, "stopped": False,
        }
        self._write()

    def mark_original_stopped(self, stopped: bool = True) -> None:
        """Record that the original server was stopped (or is serving again).

        Raises JournalError when no original server was recorded: a journal saying "stopped"
        without the command to relaunch could never be restored."""
        original = self.data.get("original_server")
        if not original:
            if not stopped:
                return
            raise JournalError(f"{self.path} on {self.box}: no original server recorded (call record_original first)")
        original["stopped"] = stopped
        self._write()

    def add_started(self, *, pid: int, pgid: int, port: int | None, argv: list[str], label: str) -> None:
        self.data.setdefault("started_servers", []).append(
            {"pid": pid, "pgid": pgid, "port": port, "argv": list(argv), "label": label}
        )
        self._write()

    def begin_launch(self, *, port: int | None, argv: list[str], label: str) -> None:
        """Record a launch about to happen (its pid is not known yet), so that a run interrupted
        between the launch and :meth:`add_started` still has its server stopped by
        :func:`restore_box` (found by port and exact argv)."""
        self.data["launching"] = {"port": port, "argv": list(argv), "label": label}
        self._write()

    def end_launch(self, *, pid: int, pgid: int) -> None:
        """The launch recorded by :meth:`begin_launch` happened: move it to ``started_servers``."""
        launching = self.data.pop("launching")
        self.add_started(pid=pid, pgid=pgid, port=launching["port"], argv=launching["argv"], label=launching["label"])

    def abort_launch(self) -> None:
        """The launch recorded by :meth:`begin_launch` did not happen."""
        if self.data.pop("launching", None) is not None:
            self._write()

    def add_created(self, path: str) -> None:
        """Record a file or directory the run is about to create on the box (under its state dir),
        so that :func:`restore_box` removes it if the run cannot. Raises :class:`JournalError` for a
        path outside ``box.state_dir`` (restore never deletes anything else)."""
        if not str(path).startswith(str(self.box.state_dir).rstrip("/") + "/"):
            raise JournalError(f"{path} is not under the box's state dir {self.box.state_dir}")
        self.data.setdefault("created_paths", []).append(str(path))
        self._write()

    def remove_created(self, path: str) -> None:
        """``path`` is gone (the run removed it): forget it."""
        self.data["created_paths"] = [p for p in self.data.get("created_paths") or [] if p != str(path)]
        self._write()

    def remove_started(self, pid: int) -> None:
        self.data["started_servers"] = [s for s in self.data.get("started_servers") or [] if s["pid"] != pid]
        self._write()

    def close(self) -> None:
        """Everything was undone: empty the journal."""
        self.data = {}
        self._write()

    def _write(self) -> None:
        """Write the journal atomically, mode 0600 (it holds the original server's argv and the
        environment it needs, secrets included: only its owner may read it), its directory made
        0700 (created so, or tightened once when it already existed with looser bits).

        Raises :class:`WatchdogError` (``status`` ``"lost"``), writing nothing, when the run lock
        taken for this journal was lost (the watchdog found the run silent and restored the box:
        the journal on the box is no longer this run's)."""
        lost = getattr(self.run_lock, "lost", None)
        if lost:
            raise WatchdogError(f"run {self.data.get('run_id')} lost {self.box.name}: {lost} (its heartbeat was "
                                "silent for longer than watchdog_after_s); it changes nothing more", "lost")
        directory = self.path.rsplit("/", 1)[0]
        if not self._dir_private:
            # once per journal: a state directory an older release created 0755 becomes 0700 too
            self.box.private_dir(directory, timeout=self.timeout)
            self._dir_private = True
        else:
            self.box.makedirs(directory, mode=JOURNAL_DIR_MODE, timeout=self.timeout)
        self.box.write_file(self.path, json.dumps(self.data, indent=2, sort_keys=True) + "\n", mode=JOURNAL_MODE,
                            timeout=self.timeout)


def journal_owner_alive(data: dict) -> bool | None:
    """Whether the process that began the journal ``data`` still runs: True/False when it ran on
    this machine (host name and pid recorded by :meth:`Journal.begin`; with its start time, a
    reused pid is not taken for it; a zombie has exited), None when that cannot be told (another
    machine, or a journal without an owner)."""
    owner = data.get("owner") or {}
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return None
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{owner['pid']}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return True  # no /proc here (not Linux): the signal-0 answer stands
    if fields[0] in ("Z", "X"):
        return False  # a zombie: it has exited
    if owner.get("pid_start") is not None:
        return fields[19] == str(owner["pid_start"])
    return True


def journal_data_pending(data: dict) -> bool:
    """True when the journal ``data`` records changes never undone: servers it started, a launch
    in flight, the original server stopped, files it created (a repaired draft copy interrupted by
    a kill is one, and :meth:`Journal.begin` must not forget it)."""
    return bool(data.get("started_servers")) or bool(data.get("launching")) or bool(
        (data.get("original_server") or {}).get("stopped")
    ) or bool(data.get("created_paths"))


def pending_journal_from_text(text: str | None) -> dict | None:
    """The journal in ``text`` (as :func:`workbench.session.runlock.box_status` read it) when it
    records changes not yet undone, else None; an unreadable journal is ``{"unreadable": why}``."""
    if text is None or not text.strip():
        return None
    if text.startswith("\0"):
        return {"unreadable": text[1:]}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"unreadable": f"not JSON ({exc})"}
    if not isinstance(data, dict):
        return {"unreadable": "not a JSON object"}
    return data if journal_data_pending(data) else None


def pending_summary(data: dict) -> str:
    """What a pending journal ``data`` says is left changed, one line: ``2 servers it started, the
    original server stopped, 1 path it created``."""
    parts = []
    if data.get("started_servers"):
        n = len(data["started_servers"])
        parts.append(f"{n} server{'s' if n != 1 else ''} it started (pid "
                     + ", ".join(str(s.get("pid")) for s in data["started_servers"]) + ")")
    if data.get("launching"):
        parts.append("a server launch in flight")
    if (data.get("original_server") or {}).get("stopped"):
        parts.append("the original server stopped")
    if data.get("created_paths"):
        parts.append("created " + ", ".join(data["created_paths"]))
    return "; ".join(parts) or "nothing"


def _shape_problem(data: Any) -> str | None:
    """What makes ``data`` not a journal restore_box can act on, or None."""
    if not isinstance(data, dict):
        return "top level is not an object"
    started = data.get("started_servers")
    if started is not None:
        if not isinstance(started, list):
            return "started_servers is not a list"
        for i, server in enumerate(started):
            if not isinstance(server, dict) or not _is_pid(server.get("pid")):
                return f"started_servers[{i}] has no valid pid"
            if server.get("pgid") is not None and not _is_pid(server.get("pgid")):
                return f"started_servers[{i}] has an invalid pgid"
    created = data.get("created_paths")
    if created is not None and not (isinstance(created, list) and all(isinstance(p, str) for p in created)):
        return "created_paths is not a list of paths"
    original = data.get("original_server")
    if original is not None:
        if not isinstance(original, dict):
            return "original_server is not an object"
        argv = original.get("argv")
        if original.get("stopped") and not (
            isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
        ):
            return "original_server is marked stopped but has no argv to relaunch it with"
        env = original.get("env")
        if env is not None and not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            return "original_server.env is not a mapping of strings"
    return None


def _is_pid(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 1


def restore_box(box, *, server_start_timeout: float = 600.0, timeout: float = 30.0,
                unless_owner_alive: bool = False, release_lock: bool = True, reporter=None) -> RestoreReport:
    """Undo everything the journal on ``box`` records: stop servers the diagnosis started, revert
    every probe, relaunch the original server (same argv, cwd, environment, log file, appended
    to) if it was stopped. Idempotent; safe to call from several places.

    A started server is stopped only while its pid still belongs to the process group the
    journal recorded (a pid reused by an unrelated process is left alone); a group whose leader
    exited but whose workers live on is stopped too. The original server is not relaunched
    when a process with its exact argv already runs (a previous restore that timed out waiting
    for it, or someone else): that one is waited for instead, so two copies never compete for
    the port and the GPUs.

    ``unless_owner_alive``: do nothing when another run that is still alive holds the box's run
    lock (decided on the box: :mod:`workbench.session.runlock`), or, for a journal without a lock,
    when the process that began it still runs on this machine: a second run, or the driver of a
    run whose kernel lives, must not undo a live run's changes. When everything was undone the
    run lock is released if this process holds it or its holder is dead (``release_lock=False``:
    kept, for a run that restores what a dead run left before it starts).

    The run's watchdog on the box (:mod:`workbench.session.watchdog`): while it restores the box
    (it holds the lock) this waits for it to finish first (while it lives, up to
    :data:`~workbench.session.startup_wait.MAX_START_S` + 60 s: its relaunch may load that long),
    so two restorers never act on one journal; while it still watches a dead run whose box this
    restores, the dead run's heartbeat is beaten between the steps, so it keeps away (a watchdog
    whose run's lock is released by the end of this restore then exits).

    The original's relaunch is waited for as a launch is (:func:`~workbench.session.startup_wait.wait_for_start`):
    ``server_start_timeout`` seconds without progress is a stall (the phase named in ``problems``),
    one that progresses is waited for; its progress goes to ``reporter`` (None:
    :func:`~workbench.session.startup_wait.default_reporter`).

    Returns a :class:`RestoreReport`; never raises for an individual action that failed (the
    failure is in ``problems``, and the journal is kept so a later call can retry), raises
    :class:`JournalError` only when the journal is unreadable.
    """
    from remote import probes as remote_probes

    report = RestoreReport()
    watched = None  # the run a live watchdog watches
    try:
        status = runlock.box_status(box, timeout=min(timeout, 30.0))
        holder = status.holder
        if status.watchdog_alive:
            watched = (status.watchdog or {}).get("run_id")
    except (RemoteError, JournalError) as exc:
        holder = None
        report.actions.append(f"could not read the run lock ({exc}); deciding by the journal's owner")
    if holder is not None and holder.alive and holder.watchdog_of and not runlock.is_mine(holder):
        holder = _wait_for_watchdog(box, holder, report, wait_s=MAX_START_S + 60.0, timeout=timeout)
    journal = Journal(box, timeout=timeout)
    if unless_owner_alive:
        if holder is not None and holder.alive and not runlock.is_mine(holder):
            report.actions.append(f"the box is held by a run still alive, {holder.describe()}; left alone")
            return report
        if holder is None and journal.pending and journal.owner_alive():
            report.actions.append(f"the journal belongs to a diagnosis still running (pid "
                                  f"{journal.data['owner']['pid']}); left alone")
            return report
    def beat() -> None:
        # Restoring a dead run's box: beat its heartbeat between the steps, so its watchdog (if it
        # still watches) never starts restoring the same journal meanwhile.
        if holder is not None and holder.alive is False and watched is not None and watched == holder.run_id:
            try:
                runlock.heartbeat(box, holder.run_id, timeout=min(timeout, 30.0))
            except (RemoteError, JournalError) as exc:
                report.actions.append(f"could not beat the heartbeat of run {holder.run_id} ({exc})")

    beat()
    try:
        probed_files = sorted({p.path for p in remote_probes.list_probes(box, timeout=timeout)})
    except RemoteError as exc:
        probed_files = []
        report.actions.append(f"could not list the probes before reverting them ({exc})")
    for server in list(journal.data.get("started_servers") or []):
        beat()
        _stop_started(box, journal, server, report, timeout)
    if journal.data.get("launching"):
        beat()
        _stop_unrecorded_launch(box, journal, journal.data["launching"], report, timeout)
    beat()
    try:
        reverted = remote_probes.revert_all(box, timeout=timeout)
    except RemoteError as exc:
        reverted = list(getattr(exc, "reverted", []))
        report.problems.append(f"could not revert probes: {exc}")
    for probe in reverted:
        report.actions.append(f"reverted probe {probe.tag} in {probe.path} (sha256 restored)")
    for path in list(journal.data.get("created_paths") or []):
        if not path.startswith(str(box.state_dir).rstrip("/") + "/"):
            report.problems.append(f"journal names {path} outside the state dir {box.state_dir}: not removed")
            continue
        res = box.run(["rm", "-rf", "--", path], timeout=max(timeout, 60), check=False)
        if res.exit_code == 0:
            journal.remove_created(path)
            report.actions.append(f"removed {path} (created by the run)")
        else:
            report.problems.append(f"could not remove {path}: {res.stderr.strip()[-200:]}")
    _remove_write_leftovers(box, probed_files, report, timeout)
    def settle() -> None:
        # Everything is undone (the original's relaunch, if any, is spawned): empty the journal and
        # release the lock now, before waiting for the relaunched server to get healthy, so a
        # restorer killed during that wait (a kernel shut down by jupyter_client: SIGTERM, then
        # SIGKILL, within KernelManager.shutdown_wait_time, 5 s) leaves no pending journal and no
        # stale lock behind.
        if not report.problems and journal.data:
            try:
                journal.close()
            except RemoteError as exc:
                report.problems.append(f"everything was undone but the journal {journal.path} could not be emptied: {exc}")
        if release_lock and not report.problems and holder is not None and (runlock.is_mine(holder) or not holder.alive):
            try:
                if runlock.release(box, holder.run_id if runlock.is_mine(holder) else "*dead*",
                                   timeout=min(timeout, 30.0)) and not runlock.is_mine(holder):
                    report.actions.append(f"released the run lock left by {holder.describe()}")
            except (RemoteError, JournalError) as exc:
                report.problems.append(f"the box is restored but its run lock could not be released: {exc}")

    original = journal.data.get("original_server") or {}
    if original.get("stopped"):
        _bring_back_original(box, journal, original, report, server_start_timeout, timeout, settle, reporter)
    else:
        settle()
    return report


#: how often :func:`_wait_for_watchdog` looks (seconds)
WATCHDOG_WAIT_POLL_S = 0.25


def _wait_for_watchdog(box, holder: "runlock.Holder", report: RestoreReport, *, wait_s: float, timeout: float):
    """The box's watchdog is restoring it (it holds the run lock): wait until it is done (the lock
    released, or its process gone), at most ``wait_s`` seconds, so two restorers never act on the
    same journal at once. Returns the lock's holder then (None: free)."""
    started = time.monotonic()
    while holder is not None and holder.alive and holder.watchdog_of:
        if time.monotonic() - started > wait_s:
            report.actions.append(f"{holder.describe()} is still at it after {wait_s:g} s; restoring anyway")
            return holder
        time.sleep(WATCHDOG_WAIT_POLL_S)
        try:
            holder = runlock.box_status(box, timeout=min(timeout, 30.0)).holder
        except (RemoteError, JournalError) as exc:
            report.actions.append(f"could not read the run lock while waiting for the watchdog ({exc})")
            return None
    report.actions.append(f"waited {time.monotonic() - started:.1f} s for the box's watchdog to finish restoring it")
    return holder


#: the temporary file of an atomic write on the box (``remote.box.Box.temp_path_for``): ``.NAME.ewb-tmp-HEX``
_WRITE_TEMP = re.compile(watchdog_box.WRITE_TEMP_PATTERN)


def _remove_write_leftovers(box, probed_files: list[str], report: RestoreReport, timeout: float) -> None:
    """Remove the temporary files of atomic writes a killed run left half-done: any in the state
    dir's ``diagnosis/`` and ``probes/`` (the journals), and ``.NAME.ewb-tmp-*`` beside each file
    a probe patched (only for that NAME: nothing else in the engine's directories is touched)."""
    import posixpath

    wanted: dict[str, set[str] | None] = {f"{box.state_dir}/diagnosis": None, f"{box.state_dir}/probes": None}
    for path in probed_files:
        wanted.setdefault(posixpath.dirname(path), set())
        if wanted[posixpath.dirname(path)] is not None:
            wanted[posixpath.dirname(path)].add(posixpath.basename(path))
    for directory, names in wanted.items():
        try:
            entries = box.listdir(directory, timeout=timeout)
        except RemoteFileNotFound:
            continue  # no such directory: nothing was written there
        except RemoteError as exc:
            report.actions.append(f"could not look for interrupted writes in {directory}: {exc}")
            continue
        for entry in entries:
            m = _WRITE_TEMP.match(entry)
            if not m or (names is not None and m.group("name") not in names):
                continue
            try:
                box.remove(f"{directory}/{entry}", missing_ok=True, timeout=timeout)
                report.actions.append(f"removed {directory}/{entry} (an interrupted write's temporary file)")
            except RemoteError as exc:
                report.problems.append(f"could not remove {directory}/{entry}: {exc}")


def _stop_started(box, journal: Journal, server: dict, report: RestoreReport, timeout: float) -> None:
    pid = int(server["pid"])
    pgid = int(server.get("pgid") or pid)
    label = server.get("label") or "diagnosis"
    try:
        info = box.process(pid, timeout=timeout)
        leader = info is not None and info.state != "Z"
        if leader and info.pgid != pgid:
            report.actions.append(
                f"{label} server pid {pid} had exited; the pid now belongs to another process "
                f"(process group {info.pgid}, not {pgid}), left alone"
            )
        elif leader or (pgid > 1 and box.group_alive(pgid, timeout=timeout)):
            argv = tuple(server.get("argv") or ())
            target = ServerProcess(pid=pid, pgid=pgid, argv=argv, cwd=None, exe=None, port=server.get("port"),
                                   log_path=None)
            stopped, release = stop_and_release(box, target, grace=10.0, server=f"{label} server pid {pid}")
            what = f"server pid {pid}" if leader else f"server pid {pid}'s leftover process group {pgid}"
            report.actions.append(f"stopped {label} {what} ({stopped.how})")
            if release.error is not None or release.gpus:  # the GPUs it held back at their baseline, or not
                (report.problems if release.error else report.actions).append(release.note or release.describe())
        else:
            report.actions.append(f"{label} server pid {pid} had already exited")
    except RemoteError as exc:
        report.problems.append(f"could not stop {label} server pid {pid}: {exc}")
        return
    try:
        journal.remove_started(pid)
    except RemoteError as exc:
        report.problems.append(f"stopped {label} server pid {pid} but could not update the journal: {exc}")


def _stop_unrecorded_launch(box, journal: Journal, launching: dict, report: RestoreReport, timeout: float) -> None:
    """A launch was interrupted before its pid reached the journal: stop the process(es) with its
    exact argv on its port. The original server was always stopped before a diagnosis launches, so
    such a process can only be the diagnosis's own."""
    argv = [str(a) for a in launching.get("argv") or []]
    label = launching.get("label") or "diagnosis"
    try:
        for proc in box.find_servers(re.escape(" ".join(argv)), timeout=timeout):
            if list(proc.argv) == argv and (launching.get("port") is None or proc.port in (None, launching["port"])):
                stopped = box.stop_server(proc, grace=10.0)
                report.actions.append(f"stopped {label} server pid {proc.pid}, launched but not yet journalled "
                                      f"({stopped.how})")
        journal.abort_launch()
    except RemoteError as exc:
        report.problems.append(f"could not stop the interrupted {label} launch ({shlex.join(argv)}): {exc}")


def _bring_back_original(box, journal: Journal, original: dict, report: RestoreReport,
                         server_start_timeout: float, timeout: float, settle: Callable[[], None],
                         reporter=None) -> None:
    """Relaunch the original server (or adopt a process already running its exact argv), record
    it as serving and call ``settle`` (journal emptied, lock released) as soon as it is spawned;
    then wait until it is healthy. When it does not get healthy (or, with no port recorded,
    exits at once) the failure is in ``report.problems`` and the journal records the original as
    stopped again (when ``settle`` had emptied it), so a later restore retries."""
    argv = [str(a) for a in original["argv"]]
    command = shlex.join(argv)
    port = original.get("port")
    run_id = journal.data.get("run_id")
    try:
        running = _same_server(box, argv, journal, timeout)
        if running is not None:
            handle = ServerHandle(pid=running.pid, pgid=running.pgid, port=port if port is not None else running.port,
                                  log_path=running.log_path or original.get("log_path") or f"/proc/{running.pid}/fd/2",
                                  pid_path="", argv=tuple(running.argv), cwd=running.cwd, box=box.name)
            offset = _log_size(box, handle.log_path, timeout)
            done = f"the original server's command already runs (pid {running.pid}); not relaunched: {command}"
        else:
            offset = _log_size(box, original.get("log_path"), timeout)
            launched_at = time.time()
            handle = box.launch_server(
                argv, port=port, log_path=original.get("log_path"), cwd=original.get("cwd"),
                env=original.get("env"), append_log=True, timeout=timeout,
            )
            done = None
    except RemoteError as exc:
        report.problems.append(f"could not relaunch the original server ({command}): {exc}")
        return
    try:
        journal.mark_original_stopped(False)
    except RemoteError as exc:
        report.problems.append(f"the original server is back but the journal could not be updated: {exc}")
        return
    settle()
    try:
        health = ""
        if handle.port is not None:
            _waited, progress = wait_for_start(box, handle, stall_timeout=server_start_timeout, label="restore",
                                               reporter=reporter if reporter is not None else default_reporter(),
                                               log_offset=offset)
        elif done is None:
            time.sleep(1.0)
            if not box.is_alive(handle.pid, timeout=timeout):
                report.problems.append(
                    f"could not relaunch the original server ({command}): it exited at once "
                    f"(no port recorded to health-check; see {handle.log_path})"
                )
                _journal_original_again(journal, original, run_id, report)
                return
            health = " (no port recorded: running, health not checked)"
    except RemoteError as exc:
        report.problems.append(f"could not relaunch the original server ({command}): {exc}")
        _journal_original_again(journal, original, run_id, report)
        if done is None:
            report.launch = launch_record(label="restore", reason=RESTORE_REASON, launch_command=command,
                                          pid=handle.pid, log_path=handle.log_path, stopped_at=None, stopped=None,
                                          launched_at=launched_at, ready_at=None, log_start=offset,
                                          started=False, error=str(exc).splitlines()[0] if str(exc) else None,
                                          phases=launch_phases(box, handle.log_path, offset, None, timeout=timeout))
        return
    if done is None:
        ready_at = time.time() if handle.port is not None else None
        report.launch = launch_record(
            label="restore", reason=RESTORE_REASON, launch_command=command, pid=handle.pid, log_path=handle.log_path,
            stopped_at=None, stopped=None, launched_at=launched_at, ready_at=ready_at, log_start=offset,
            phases=progress_phases(progress) if handle.port is not None else None)
    report.actions.append(done or f"relaunched the original server (pid {handle.pid}){health}: {command}")


#: Why the restore's relaunch is a load (its launch record's ``reason``).
RESTORE_REASON = "restore: relaunch the server as found"


def _log_size(box, path, timeout: float) -> int:
    """Bytes in the log at ``path`` now (0: no path, no file, unreadable): where a relaunch that
    appends to it begins, so its start-up is read from there."""
    if not path:
        return 0
    try:
        return box.file_size(path, timeout=timeout)
    except RemoteError:
        return 0


def _journal_original_again(journal: Journal, original: dict, run_id: str | None, report: RestoreReport) -> None:
    """The relaunched original did not come up: record it as stopped again (a journal emptied by
    ``settle`` is begun again), so ``workbench restore`` or the next run relaunches it."""
    try:
        if not journal.data:
            journal.begin(run_id)
        journal.record_original(argv=list(original["argv"]), cwd=original.get("cwd"), env=original.get("env"),
                                port=original.get("port"), log_path=original.get("log_path"), pid=original.get("pid"))
        journal.mark_original_stopped(True)
    except (RemoteError, JournalError) as exc:
        report.problems.append(f"the journal could not record the original server as still stopped: {exc}")


def _same_server(box, argv: list[str], journal: Journal, timeout: float):
    """A running process (not one the journal still lists as started by the diagnosis) whose
    argv is exactly ``argv``, or None."""
    ours = {int(s["pid"]) for s in journal.data.get("started_servers") or []}
    pattern = re.escape(" ".join(argv))
    for proc in box.find_servers(pattern, timeout=timeout):
        if list(proc.argv) == argv and proc.pid not in ours:
            return proc
    return None


__all__ = ["Journal", "JournalError", "RestoreReport", "RESTORE_REASON", "journal_path", "journal_data_pending",
           "journal_owner_alive", "pending_journal_from_text", "pending_summary", "restore_box"]
