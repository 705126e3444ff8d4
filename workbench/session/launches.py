"""What one server start-up cost, as the record a session keeps of it (issue 28: loads are the
cost a diagnosis minimises): why it was needed, when the server that served the port before was
stopped, when the launch began and when it was ready, and the start-up's phases read from that
launch's own part of its log (:func:`launch_phases`, over :func:`workbench.logs.startup.startup_progress`).

Used by :class:`workbench.session.BoxSession` (the run's launches) and
:func:`workbench.session.journal.restore_box` (the relaunch of the original server). Times are
epoch seconds (``time.time()`` on the machine running the workbench).
"""

from __future__ import annotations

from typing import Any

from remote.errors import RemoteError
from workbench.logs.bounded import cap_lines

__all__ = ["PHASE_READ_BYTES", "launch_phases", "progress_phases", "launch_record", "log_size", "serving_now"]

#: At most this many bytes of one launch's start-up log are read for its phases: the first and the
#: last half of it when it is longer (a start-up's phase lines are at its beginning — launch,
#: NCCL, load — and its end — capture, warm-up, ready; the shard progress in between is what a
#: long log holds most of).
PHASE_READ_BYTES = 4 * 1024 * 1024


def log_size(box, path: str | None, *, timeout: float = 30) -> int | None:
    """The size in bytes of the log ``path`` on ``box`` now (``None``: no path, no such file, or
    unreadable): where a launch appending to it starts its own part."""
    if not path:
        return None
    try:
        return box.file_size(path, timeout=timeout) if box.exists(path, timeout=timeout) else 0
    except RemoteError:
        return None


def launch_phases(box, log_path: str | None, start: int | None, end: int | None, *,
                  max_bytes: int = PHASE_READ_BYTES, timeout: float = 30) -> dict[str, Any] | None:
    """The start-up phases of the launch whose log lines are bytes ``start``..``end`` of
    ``log_path`` on ``box`` (``end=None``: to the end now): ``{"phases": [{"name", "at"}, ...],
    "phase": the last one, "shards": [done, total] or None, "ranks_seen": [...], "last_line"}``
    (:func:`workbench.logs.startup.startup_progress`; ``at`` is the log line's own timestamp,
    epoch seconds, or ``None``). A log longer than ``max_bytes`` is read as its first and last
    ``max_bytes / 2`` bytes (``"cut": True``); each line bounded (:func:`cap_lines`). ``None``
    when there is no log or it cannot be read (``RemoteError`` is not raised: a record without
    phases is still a record)."""
    from workbench.logs.startup import startup_progress

    if not log_path or start is None:
        return None
    try:
        if end is None:
            end = box.file_size(log_path, timeout=timeout)
        size = max(0, end - start)
        if size <= max_bytes:
            data, cut = box.read_bytes(log_path, start, size, timeout=timeout), False
        else:
            half = max_bytes // 2
            head = box.read_bytes(log_path, start, half, timeout=timeout)
            tail = box.read_bytes(log_path, end - half, half, timeout=timeout)
            data, cut = head[:head.rfind(b"\n") + 1] + tail[tail.find(b"\n") + 1:], True
    except RemoteError:
        return None
    lines = cap_lines(data).decode("utf-8", "replace").splitlines()
    return {**progress_phases(startup_progress(lines)), "cut": cut}


def progress_phases(progress) -> dict[str, Any] | None:
    """A :class:`workbench.logs.startup.StartupProgress` (the one the wait for a launch followed,
    :func:`workbench.session.startup_wait.wait_for_start`) as a launch record keeps it:
    ``{"phases": [{"name", "at"}], "phase", "shards": [done, total] or None, "ranks_seen",
    "last_line"}``; ``None`` for ``None``."""
    if progress is None:
        return None
    return {"phases": [dict(p) for p in progress.phases], "phase": progress.phase,
            "shards": list(progress.shards) if progress.shards else None,
            "ranks_seen": list(progress.ranks_seen), "last_line": progress.last_line}


def launch_record(*, label: str, reason: str | None, launch_command: str | None, pid: int | None,
                  log_path: str | None, stopped_at: float | None, stopped: str | None, launched_at: float,
                  ready_at: float | None, log_start: int | None, started: bool = True,
                  error: str | None = None, phases: dict | None = None) -> dict[str, Any]:
    """One launch as the verdict's ``launches[]`` lists it. ``label`` (``as-found``, ``probe``,
    ``fix``, a candidate's or rung's label, ``restore``); ``reason``: why the load was needed, a
    sentence (``"fix: measure the fix for algorithm-mismatch with the probes riding on it"``);
    ``stopped_at``: when the stop of whatever served the port before began (``None``: nothing
    served it), ``stopped``: what that was, in words; ``launched_at`` / ``ready_at``: when the
    launch began and when the server answered healthy (``None``: it never did);
    ``healthy_after_s`` and ``ready_after_s``: seconds from launch to ready (the first the name
    older readers use); ``phases``: :func:`launch_phases` (its ``phases`` list; the rest under
    ``startup``); ``log_start``: the byte offset where this launch's lines begin in its log."""
    ready_after = round(ready_at - launched_at, 2) if ready_at is not None else None
    return {"label": label, "reason": reason or label, "launch_command": launch_command, "pid": pid,
            "log_path": log_path, "log_start": log_start, "started": started, "error": error,
            "stopped_at": stopped_at, "stopped": stopped, "launched_at": launched_at,
            "started_at": launched_at, "ready_at": ready_at,
            "healthy_after_s": ready_after, "ready_after_s": ready_after,
            "phases": (phases or {}).get("phases") if phases else None,
            "startup": {k: v for k, v in phases.items() if k != "phases"} if phases else None}


def serving_now(session) -> str | None:
    """What serves a :class:`~workbench.session.BoxSession`'s port now, in words (``None``:
    nothing): the run's own server by its launch label (``"the fix server"``), or ``"the server as
    found"`` while the original runs (not stopped by the run). What a launch's ``stopped`` says."""
    if session.current is not None:
        label = next((r["label"] for r in reversed(session.launches) if r.get("pid") == session.current.pid), None)
        return f"the {label} server" if label else "the run's server"
    original = session.journal.data.get("original_server")
    if original and not original.get("stopped") and session.inventory.server_pid is not None:
        return "the server as found"
    return None
