"""The transport seam: the few primitives a box needs, implemented once per way of reaching it.

``Box`` (``remote.box``) builds everything (line ranges, tails, atomic writes, server launch,
probes) on top of these primitives, so a new transport (SSH through Paramiko) only implements
this class. Like httpx's ``BaseTransport``: one small base class, concrete transports below it.

Primitives a transport must implement:

- ``run(command, timeout=, cwd=, env=, stdin=)``: run shell text with ``bash -c`` in its own
  process group; on time-out kill the whole group and raise ``CommandTimedOut``. Never raises
  ``CommandFailed`` (``Box`` decides on ``check``).
- ``read_range(path, offset, length)``: bytes of a file from ``offset`` (``length=None``: to EOF)
  without reading the rest of it.
- ``stat``, ``listdir``, ``readlink``, ``write_new`` (create exclusively, write, fsync),
  ``rename`` (atomic replace, then fsync the directory), ``remove``, ``makedirs``, ``expanduser``.

Defaults built on those (a transport may override them with something faster): ``sha256``,
``processes`` / ``process`` (read ``/proc``), ``kill`` (``kill -s SIG``), ``realpath``
(``readlink -f``), ``close``, and ``forward`` (where a TCP port of the box is reachable from this
machine: the same address locally; a port forward through the connection over SSH).

All sizes and offsets are in bytes, all time-outs in seconds. Errors are ``remote.errors`` types
naming the box (``self.name``) and the path or command.
"""

from __future__ import annotations

import hashlib
import shlex
import signal as _signal
from abc import ABC, abstractmethod
from typing import Mapping, Optional

from .errors import CommandTimedOut, RemoteFileError, RemoteFileNotFound, RemotePermissionError
from .result import FileStat, ProcessInfo, Result

#: Block size (bytes) for chunked reads (hashing, line scans, tails).
CHUNK = 1 << 20


class Transport(ABC):
    """Base class of the ways to reach a box. ``name`` is shown in every error and result."""

    name: str = "transport"

    # -- commands -------------------------------------------------------------------------------

    @abstractmethod
    def run(
        self,
        command: str,
        *,
        timeout: float,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[bytes] = None,
    ) -> Result:
        """Run ``command`` with ``bash -c`` in a new process group and wait at most ``timeout`` s.

        Returns the Result whatever the exit status. Raises ``CommandTimedOut`` (carrying the
        output captured so far) after killing the whole process group on time-out, and
        ``RemoteFileNotFound`` when ``cwd`` does not exist.
        """

    # -- files ----------------------------------------------------------------------------------

    @abstractmethod
    def read_range(self, path: str, offset: int = 0, length: Optional[int] = None, *, timeout: float = 30) -> bytes:
        """Up to ``length`` bytes from byte ``offset`` (``None``: to the end). Short at EOF."""

    @abstractmethod
    def stat(self, path: str, *, timeout: float = 30) -> FileStat:
        """Stat ``path`` following symlinks. Raises ``RemoteFileNotFound`` / ``RemotePermissionError``."""

    @abstractmethod
    def listdir(self, path: str, *, timeout: float = 30) -> list[str]:
        """Names in directory ``path`` (no ``.``/``..``), unsorted."""

    @abstractmethod
    def readlink(self, path: str, *, timeout: float = 30) -> str:
        """Target of the symlink ``path`` (for ``/proc/PID/cwd``, ``exe``, ``fd/N``)."""

    @abstractmethod
    def write_new(self, path: str, data: bytes, *, mode: int, timeout: float = 30) -> None:
        """Create ``path`` exclusively (fails if it exists) with permission bits ``mode``, write
        ``data``, fsync and close it."""

    @abstractmethod
    def rename(self, src: str, dst: str, *, timeout: float = 30) -> None:
        """Atomically replace ``dst`` with ``src`` (same file system), then fsync the directory."""

    @abstractmethod
    def remove(self, path: str, *, timeout: float = 30) -> None:
        """Delete the file ``path``. Raises ``RemoteFileNotFound`` if it does not exist."""

    @abstractmethod
    def makedirs(self, path: str, *, mode: int = 0o755, timeout: float = 30) -> None:
        """Create directory ``path`` and its parents; no error if it exists."""

    @abstractmethod
    def expanduser(self, path: str) -> str:
        """Expand a leading ``~`` to the box user's home directory."""

    # -- defaults built on the primitives --------------------------------------------------------

    def sha256(self, path: str, *, timeout: float = 60) -> str:
        """Hex sha256 of the file, read in blocks of ``CHUNK`` bytes."""
        h = hashlib.sha256()
        offset = 0
        while True:
            block = self.read_range(path, offset, CHUNK, timeout=timeout)
            if not block:
                return h.hexdigest()
            h.update(block)
            offset += len(block)

    def process(self, pid: int, *, argv: bool = True, timeout: float = 10) -> Optional[ProcessInfo]:
        """The process ``pid`` read from ``/proc``, or ``None`` if there is no such process."""
        try:
            stat_text = self.read_range(f"/proc/{pid}/stat", timeout=timeout).decode("utf-8", "replace")
        except (RemoteFileNotFound, RemotePermissionError):
            return None
        except RemoteFileError:  # the process vanished between listdir and open (ESRCH)
            return None
        parsed = parse_proc_stat(stat_text)
        if parsed is None:
            return None
        state, ppid, pgid = parsed
        args: tuple[str, ...] = ()
        if argv:
            try:
                raw = self.read_range(f"/proc/{pid}/cmdline", timeout=timeout)
            except RemoteFileError:
                return None
            args = tuple(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
        return ProcessInfo(pid=pid, ppid=ppid, pgid=pgid, state=state, argv=args, threads=proc_stat_threads(stat_text))

    def processes(self, *, argv: bool = True, timeout: float = 30) -> list[ProcessInfo]:
        """Every process visible in ``/proc`` (vanishing ones skipped)."""
        out = []
        for name in self.listdir("/proc", timeout=timeout):
            if name.isdigit():
                info = self.process(int(name), argv=argv, timeout=timeout)
                if info is not None:
                    out.append(info)
        return out

    def kill(self, pid: int, sig: int, *, group: bool = False, timeout: float = 10) -> bool:
        """Send ``sig`` to ``pid`` (to process group ``pid`` when ``group``). False if none exists."""
        target = f"-{pid}" if group else str(pid)
        name = _signal.Signals(sig).name.removeprefix("SIG")
        res = self.run(f"kill -s {name} -- {shlex.quote(target)}", timeout=timeout)
        return res.exit_code == 0

    def realpath(self, path: str, *, timeout: float = 10) -> str:
        """``path`` with symlinks resolved (``readlink -f``), so a rename replaces the real file."""
        res = self.run(f"readlink -f -- {shlex.quote(path)}", timeout=timeout)
        if res.exit_code != 0 or not res.stdout.strip():
            raise RemoteFileNotFound("cannot resolve path", path=path, box=self.name)
        return res.stdout.rstrip("\n")

    def protected_pgids(self) -> set[int]:
        """Process groups ``Box.stop_server`` must never signal (the caller's own group)."""
        return set()

    def forward(self, host: str, port: int, *, timeout: float = 10) -> tuple[str, int]:
        """``(host, port)`` on this machine at which the box's TCP ``host:port`` is reachable.

        This default is for a box that is this machine: the address itself. A transport to another
        machine opens (and caches) a local port forward and returns its local end.
        """
        return host, int(port)

    def close(self) -> None:
        """Release connections. The local transport holds none."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def _stat_fields(text: str) -> list[str]:
    """The fields of a ``/proc/PID/stat`` text after ``comm`` (which may hold spaces): field 3
    (state) first; ``[]`` when there is no ``comm``."""
    close = text.rfind(")")
    return text[close + 2 :].split() if close >= 0 else []


def parse_proc_stat(text: str) -> Optional[tuple[str, int, int]]:
    """``(state, ppid, pgid)`` from the text of ``/proc/PID/stat`` (``comm`` may hold spaces)."""
    fields = _stat_fields(text)
    if len(fields) < 3:
        return None
    try:
        return fields[0], int(fields[1]), int(fields[2])
    except ValueError:
        return None


def proc_stat_threads(text: str) -> int:
    """``num_threads`` (field 20) from the text of ``/proc/PID/stat``; 1 when it cannot be read."""
    try:
        return int(_stat_fields(text)[17])
    except (IndexError, ValueError):
        return 1


def timed_out(command: str, stdout: bytes, stderr: bytes, exit_code, duration_s: float, timeout: float, box: str,
              *, killed: bool = True, detail: str = ""):
    """Build the ``CommandTimedOut`` a transport raises (``killed``/``detail``: see the error)."""
    res = Result(
        command=command,
        stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        exit_code=exit_code,
        duration_s=duration_s,
        box=box,
    )
    return CommandTimedOut(res, timeout, killed=killed, detail=detail)
