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
     "started_servers": [{"pid": 123, "pgid": 123, "port": 30000, "argv": [...], "label": "probe"}]}
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from remote.errors import RemoteError

JOURNAL_NAME = "journal.json"


class JournalError(RuntimeError):
    """The journal on the box is unreadable, or another run's journal is still open."""


@dataclass
class RestoreReport:
    """What :func:`restore_box` did: one line per action, and what it could not undo."""

    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when nothing was left that could not be undone."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"actions": list(self.actions), "problems": list(self.problems), "clean": self.clean}


def journal_path(box) -> str:
    """The journal's absolute path on ``box``: ``<box.state_dir>/diagnosis/journal.json``."""
    return f"{box.state_dir}/diagnosis/{JOURNAL_NAME}"


class Journal:
    """A run's journal on the box. Every mutation is written through at once (atomic write).

    Raises:
        JournalError: the file exists but is not a journal (bad JSON).
    """

    def __init__(self, box, path: str | None = None, timeout: float = 10.0):
        self.box = box
        self.timeout = timeout
        self.path = path or journal_path(box)
        self.data: dict[str, Any] = self._load()

    def _load(self) -> dict[str, Any]:
        if not self.box.exists(self.path, timeout=self.timeout):
            return {}
        text = self.box.read_text(self.path, timeout=self.timeout)
        if not text.strip():
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JournalError(f"{self.path} on {self.box}: not a diagnosis journal ({exc})") from exc
        if not isinstance(data, dict):
            raise JournalError(f"{self.path} on {self.box}: not a diagnosis journal (top level is not an object)")
        return data

    @property
    def pending(self) -> bool:
        """True when an earlier run left changes that were never undone."""
        return bool(self.data.get("started_servers")) or bool(
            (self.data.get("original_server") or {}).get("stopped")
        )

    def begin(self) -> str:
        """Start a new run's journal. Raises JournalError if an earlier run left changes pending."""
        if self.pending:
            raise JournalError(
                f"{self.path} on {self.box}: an earlier diagnosis run ({self.data.get('run_id')}) left the box "
                "changed; run `workbench restore --host ...` (or restore_box) first"
            )
        self.data = {"run_id": uuid.uuid4().hex[:12], "started_at": time.time(), "started_servers": []}
        self._write()
        return self.data["run_id"]

    def record_original(self, *, argv: list[str], cwd: str | None, env: dict[str, str] | None,
                        port: int | None, log_path: str | None, pid: int | None) -> None:
        """Remember the server that was running when the run began (before it is stopped)."""
        self.data["original_server"] = {
            "argv": list(argv), "cwd": cwd, "env": env, "port": port, "log_path": log_path,
            "pid": pid, "stopped": False,
        }
        self._write()

    def mark_original_stopped(self, stopped: bool = True) -> None:
        self.data.setdefault("original_server", {})["stopped"] = stopped
        self._write()

    def add_started(self, *, pid: int, pgid: int, port: int | None, argv: list[str], label: str) -> None:
        self.data.setdefault("started_servers", []).append(
            {"pid": pid, "pgid": pgid, "port": port, "argv": list(argv), "label": label}
        )
        self._write()

    def remove_started(self, pid: int) -> None:
        self.data["started_servers"] = [s for s in self.data.get("started_servers", []) if s["pid"] != pid]
        self._write()

    def close(self) -> None:
        """Everything was undone: empty the journal."""
        self.data = {}
        self._write()

    def _write(self) -> None:
        self.box.makedirs(self.path.rsplit("/", 1)[0], timeout=self.timeout)
        self.box.write_file(self.path, json.dumps(self.data, indent=2, sort_keys=True) + "\n")


def restore_box(box, *, server_start_timeout: float = 600.0, timeout: float = 30.0) -> RestoreReport:
    """Undo everything the journal on ``box`` records: stop servers the diagnosis started, revert
    every probe, relaunch the original server (same argv, cwd, environment, log file) if it was
    stopped. Idempotent; safe to call from several places.

    Returns a :class:`RestoreReport`; never raises for an individual action that failed (the
    failure is in ``problems``), raises :class:`JournalError` only when the journal is unreadable.
    """
    from remote import probes as remote_probes

    report = RestoreReport()
    journal = Journal(box, timeout=timeout)
    for server in list(journal.data.get("started_servers", [])):
        pid = int(server["pid"])
        try:
            if box.is_alive(pid, timeout=timeout):
                stopped = box.stop_server(pid, grace=10.0)
                report.actions.append(f"stopped {server.get('label', 'diagnosis')} server pid {pid} ({stopped.how})")
            else:
                report.actions.append(f"{server.get('label', 'diagnosis')} server pid {pid} had already exited")
            journal.remove_started(pid)
        except RemoteError as exc:
            report.problems.append(f"could not stop server pid {pid}: {exc}")
    try:
        reverted = remote_probes.revert_all(box, timeout=timeout)
        for probe in reverted:
            report.actions.append(f"reverted probe {probe.tag} in {probe.path} (sha256 restored)")
    except RemoteError as exc:
        report.problems.append(f"could not revert probes: {exc}")
    original = journal.data.get("original_server") or {}
    if original.get("stopped"):
        try:
            handle = box.launch_server(
                original["argv"], port=original.get("port"), log_path=original.get("log_path"),
                cwd=original.get("cwd"), env=original.get("env"), append_log=True, timeout=timeout,
            )
            box.wait_healthy(handle, timeout=server_start_timeout)
            report.actions.append(
                f"relaunched the original server (pid {handle.pid}): {shlex.join(original['argv'])}"
            )
            journal.mark_original_stopped(False)
        except RemoteError as exc:
            report.problems.append(
                f"could not relaunch the original server ({shlex.join(original['argv'])}): {exc}"
            )
    if not report.problems:
        journal.close()
    return report


__all__ = ["Journal", "JournalError", "RestoreReport", "journal_path", "restore_box"]
