"""Values returned by the box layer: command results, file stats, server handles."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Result:
    """How a command ended on a box.

    ``command`` is the shell text that ran (a sequence is shown shlex-joined), ``stdout`` /
    ``stderr`` are decoded as UTF-8 (undecodable bytes replaced), ``exit_code`` is the exit
    status (negative signal number when killed by a signal, ``None`` if unknown), ``duration_s``
    the wall time in seconds, ``box`` the name of the box it ran on.
    """

    command: str
    stdout: str
    stderr: str
    exit_code: Optional[int]
    duration_s: float
    box: str = "local"

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.exit_code == 0

    @property
    def failed(self) -> bool:
        """True when the command did not exit with status 0."""
        return not self.ok

    def __str__(self) -> str:  # short, for notebooks and logs
        return f"Result(exit_code={self.exit_code}, duration_s={self.duration_s:.3f}, command={self.command!r})"


@dataclass(frozen=True)
class FileStat:
    """What ``Box.stat`` reports about a path (symlinks followed).

    ``size`` in bytes, ``mode`` the permission bits (``0o644``), ``mtime`` seconds since the epoch.
    """

    path: str
    size: int
    mode: int
    mtime: float
    is_file: bool
    is_dir: bool


@dataclass(frozen=True)
class ProcessInfo:
    """One process on the box as read from ``/proc`` (``state`` is the one-letter state, ``Z`` zombie;
    ``threads`` its live threads, ``/proc/PID/stat`` field 20, ``num_threads``)."""

    pid: int
    ppid: int
    pgid: int
    state: str
    argv: tuple[str, ...]
    threads: int = 1

    @property
    def exited(self) -> bool:
        """Whether nothing of the process runs any more: a zombie (or dead) whose every thread has
        exited, only its exit status left. A leader thread that exited while other threads of the
        process still tear down (a server's threads after SIGTERM, freeing a large address space)
        shows ``Z`` too, with ``threads`` > 1: that process still holds its files, its listening
        port and, on a GPU box, its device memory, so it has not exited yet (Linux ``proc(5)``:
        ``num_threads``; a fully exited zombie shows 1)."""
        return self.state in ("Z", "X") and self.threads <= 1


@dataclass(frozen=True)
class ServerHandle:
    """A server launched by ``Box.launch_server``.

    ``pid`` is the session leader (pid == pgid: the server owns its process group), ``port`` the
    port it was asked to listen on, ``log_path`` the file that receives its stdout and stderr,
    ``pid_path`` the file holding its pid, ``argv`` what was launched (a one-element tuple holding
    the shell text when a string was given), ``cwd`` its working directory.
    """

    pid: int
    pgid: int
    port: Optional[int]
    log_path: str
    pid_path: str
    argv: tuple[str, ...]
    cwd: Optional[str] = None
    box: str = "local"

    def to_dict(self) -> dict:
        """A JSON-able dict (for journals and reports)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ServerProcess:
    """A running server found by ``Box.find_servers``.

    ``port`` is parsed from ``--port N`` / ``--port=N`` in ``argv``; without one, it is read from
    the TCP sockets the process listens on (``listening_ports``): the engine's default port when it
    is among them (vLLM 8000, SGLang 30000), else the only one; ``None`` when it cannot be told.
    ``log_path`` is where its stderr (else stdout) goes when that is a regular file.
    ``cwd`` / ``exe`` are ``None`` when the box user may not read them. ``engine`` is ``"vllm"`` /
    ``"sglang"`` when ``argv`` is that engine's launcher (``remote.engines.launcher_engine``; the
    sandbox counts as ``"sglang"``), else ``None``. ``children``: the pids of its live descendants
    (engine core, workers, resource tracker…) when it was found, sorted. ``listening_ports``: the TCP
    ports it listens on, read only when ``argv`` names no port (else empty).
    """

    pid: int
    pgid: int
    argv: tuple[str, ...]
    cwd: Optional[str]
    exe: Optional[str]
    port: Optional[int]
    log_path: Optional[str]
    engine: Optional[str] = None
    children: tuple[int, ...] = ()
    listening_ports: tuple[int, ...] = ()

    @property
    def command_line(self) -> str:
        """The argv shlex-joined, ready to paste into a shell."""
        import shlex

        return shlex.join(self.argv)


@dataclass(frozen=True)
class ServerStopped:
    """How ``Box.stop_server`` ended a server.

    ``how`` is ``"already-exited"`` (nothing to stop), ``"terminated"`` (gone after SIGTERM within
    the grace period) or ``"killed"`` (needed SIGKILL). ``waited_s`` is the wall time in seconds.
    ``stopped_pids``: every process of the server's tree that was alive when the stop began (its
    process group and its descendants), sorted; ``outside_group``: those of them that had left the
    process group (their own group or session), signalled one by one. All are gone when
    ``stop_server`` returns.
    """

    pid: int
    pgid: int
    how: str
    waited_s: float
    signals: tuple[str, ...] = field(default_factory=tuple)
    stopped_pids: tuple[int, ...] = ()
    outside_group: tuple[int, ...] = ()
