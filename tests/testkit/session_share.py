"""Results a test publishes for the other tests of the same pytest session, across pytest-xdist
workers: so that two tests that need the same end-to-end run (the same deployment, parameters and
entry point) do not both run it. The publisher publishes only after its own assertions passed; a
reader uses what it finds and runs the thing itself otherwise (so it still passes alone).

The directory is shared by every process of one session and by no other session:
``tmp_path_factory.getbasetemp().parent`` under pytest-xdist (each worker's basetemp is
``<session basetemp>/<worker id>``), the basetemp itself in a plain run (:func:`shared_dir`).
Entries are JSON files written atomically (a temporary file renamed over the name): a reader sees
a whole entry or none.

A publisher that is still at work can be waited for: :meth:`Publication.running` (written when
its test starts: the process id) and :meth:`Publication.done` (when it ends, passed or not) bracket
it; :func:`wait_published` waits while an entry is running in a live process, up to a bound.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import psutil

__all__ = ["shared_dir", "publish", "published", "Publication", "wait_published"]

_DIRNAME = "session-shared"


def shared_dir(tmp_path_factory) -> Path:
    """The session's shared directory (created): under pytest-xdist the parent of this worker's
    basetemp (the session's basetemp, shared by all workers), else the basetemp."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / _DIRNAME
    path.mkdir(exist_ok=True)
    return path


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass  # already renamed, or never written
        raise


def _entry(tmp_path_factory, name: str, suffix: str = ".json") -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"not an entry name: {name!r}")
    return shared_dir(tmp_path_factory) / f"{name}{suffix}"


def publish(tmp_path_factory, name: str, data: Any) -> Path:
    """Publish ``data`` (JSON-serialisable) as ``name`` for the session, atomically; returns the file."""
    path = _entry(tmp_path_factory, name)
    _atomic_write(path, json.dumps(data, indent=1, sort_keys=True))
    return path


def published(tmp_path_factory, name: str) -> Optional[Any]:
    """What was published as ``name`` in this session, or ``None``."""
    try:
        return json.loads(_entry(tmp_path_factory, name).read_text())
    except FileNotFoundError:
        return None


class Publication:
    """The bracket around a publisher's test: :meth:`running` when it starts, :meth:`done` when it
    ends (passed or failed), so that a reader knows whether waiting for ``name`` can pay off."""

    def __init__(self, tmp_path_factory, name: str) -> None:
        self.factory, self._name = tmp_path_factory, name

    @property
    def name(self) -> str:
        return self._name

    def running(self) -> None:
        """Mark the entry running in this process."""
        _atomic_write(_entry(self.factory, self._name, ".running"), json.dumps({"pid": os.getpid()}))

    def publish(self, data: Any) -> Path:
        """Publish ``data`` as the entry (:func:`publish`)."""
        return publish(self.factory, self._name, data)

    def done(self) -> None:
        """Mark the entry done (published or not): readers stop waiting for it."""
        _atomic_write(_entry(self.factory, self._name, ".done"), json.dumps({"pid": os.getpid()}))


def wait_published(tmp_path_factory, name: str, *, timeout: float, poll: float = 2.0) -> tuple[Optional[Any], float]:
    """``(data, waited_s)``: what was published as ``name``; when nothing is yet but a publisher is
    running (:class:`Publication`: started, not done, its process alive), waits for it up to
    ``timeout`` seconds. ``data`` is ``None`` when nothing was published (none ran, it failed,
    its process died, or the time ran out)."""
    t0 = time.monotonic()
    while True:
        data = published(tmp_path_factory, name)
        if data is not None:
            return data, time.monotonic() - t0
        running, done = _entry(tmp_path_factory, name, ".running"), _entry(tmp_path_factory, name, ".done")
        try:
            pid = json.loads(running.read_text())["pid"]
        except FileNotFoundError:
            return None, time.monotonic() - t0
        except ValueError:  # unreadable: taken as running, up to the bound
            pid = None
        if done.exists() or (pid is not None and not psutil.pid_exists(pid)) or time.monotonic() - t0 > timeout:
            return published(tmp_path_factory, name), time.monotonic() - t0
        time.sleep(poll)
