"""Typed errors of the box layer.

Every error says what went wrong and where: the box (``box``), and the path, command or port
involved. Errors about a command carry its :class:`~remote.result.Result` (``.result``), as
Fabric/invoke's ``UnexpectedExit`` does; errors about a server carry the tail of its log.

The hierarchy::

    RemoteError
    ├── BoxSpecError                  connect() was given a spec it cannot use
    │   └── SSHNotImplemented         an SSH spec (user@host, ssh://..., an alias): not built yet
    ├── CommandError                  carries .result (a Result)
    │   ├── CommandFailed             non-zero exit status with check=True
    │   └── CommandTimedOut           killed (whole process group) after its time-out
    ├── RemoteFileError               carries .path
    │   ├── RemoteFileNotFound
    │   ├── RemotePermissionError
    │   ├── RemoteIsADirectory
    │   ├── RemoteFileDecodeError     bytes are not valid text in the requested encoding
    │   └── RemoteFileChanged         a file changed between two reads (sha256 differs)
    ├── ServerError                   about a server launched or found on the box
    │   ├── PortInUse                 refused to launch: the port is already bound
    │   ├── ServerLaunchFailed        the detached launch itself failed (no pid file)
    │   ├── ServerDied                the process exited while waiting; carries .log_tail
    │   ├── ServerStartTimedOut       not healthy in time; carries .log_tail
    │   └── ServerStopFailed          still alive after TERM and KILL
    └── ProbeError                    about a debug probe (remote.probes)
        ├── AnchorNotFound            the anchor regex / line / function matched nothing usable
        ├── AnchorAmbiguous           the anchor matched more than one line
        ├── ProbeCompileError         the patched file does not compile with the box's python
        ├── ProbeExists               the tag is already used by a different probe
        ├── ProbeNotFound             no probe with that tag in the journal
        └── ProbeConflict             the file was edited by someone else; nothing was changed

All of them derive from :class:`RemoteError`, so ``except RemoteError`` catches anything the box
layer raises on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .result import Result


class RemoteError(Exception):
    """Base class of every error raised on purpose by the box layer.

    ``box`` names the box (``"local"``, later ``"user@host"``); it is ``None`` when no box was
    involved (for example a bad spec).
    """

    def __init__(self, message: str, *, box: str | None = None) -> None:
        self.message = message
        self.box = box
        super().__init__(f"[{box}] {message}" if box else message)


# -- connecting ---------------------------------------------------------------------------------


class BoxSpecError(RemoteError):
    """``connect()`` was given a spec it cannot turn into a box."""

    def __init__(self, message: str, *, spec: object) -> None:
        self.spec = spec
        super().__init__(message)


class SSHNotImplemented(BoxSpecError):
    """The spec names an SSH box (``user@host``, ``ssh://...``, a ``~/.ssh/config`` alias).

    The SSH transport is not implemented yet; only ``connect("local")`` works.
    """

    def __init__(self, spec: str) -> None:
        super().__init__(
            f"box spec {spec!r} looks like an SSH destination, but the SSH transport is not "
            "implemented yet; only connect('local') is available",
            spec=spec,
        )


# -- commands -----------------------------------------------------------------------------------


class CommandError(RemoteError):
    """A command did not end well; ``.result`` holds what it printed and how it ended."""

    def __init__(self, message: str, result: "Result") -> None:
        self.result = result
        super().__init__(message, box=result.box)


def _excerpt(text: str, limit: int = 2000) -> str:
    text = text.rstrip("\n")
    if len(text) <= limit:
        return text
    return "...[" + str(len(text) - limit) + " chars cut]..." + text[-limit:]


class CommandFailed(CommandError):
    """The command exited with a non-zero status (raised only with ``check=True``)."""

    def __init__(self, result: "Result") -> None:
        msg = f"command exited with status {result.exit_code} after {result.duration_s:.2f}s: {result.command}"
        if result.stderr.strip():
            msg += "\n--- stderr ---\n" + _excerpt(result.stderr)
        super().__init__(msg, result)


class CommandTimedOut(CommandError):
    """The command ran longer than its time-out; its whole process group was killed.

    ``.result`` holds the output captured before the kill (``exit_code`` is the negative signal
    number, or ``None`` when it could not be collected); ``.timeout`` is the limit in seconds.
    """

    def __init__(self, result: "Result", timeout: float) -> None:
        self.timeout = timeout
        super().__init__(
            f"command timed out after {timeout:g}s (process group killed): {result.command}", result
        )


# -- files --------------------------------------------------------------------------------------


class RemoteFileError(RemoteError):
    """A file operation failed; ``.path`` is the path on the box."""

    def __init__(self, message: str, *, path: str, box: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message}: {path}", box=box)


class RemoteFileNotFound(RemoteFileError):
    """The path (or the directory it should be in) does not exist on the box."""


class RemotePermissionError(RemoteFileError):
    """The box user may not read / write / list the path."""


class RemoteIsADirectory(RemoteFileError):
    """A file was expected, the path is a directory (or not a regular file)."""


class RemoteFileDecodeError(RemoteFileError):
    """The file's bytes are not valid text in the requested encoding."""


class RemoteFileChanged(RemoteFileError):
    """The file's content changed between two reads (``expected_sha256`` vs ``actual_sha256``)."""

    def __init__(
        self, message: str, *, path: str, expected_sha256: str, actual_sha256: str, box: str | None = None
    ) -> None:
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
        super().__init__(
            f"{message} (expected sha256 {expected_sha256[:12]}…, found {actual_sha256[:12]}…)",
            path=path,
            box=box,
        )


# -- servers ------------------------------------------------------------------------------------


class ServerError(RemoteError):
    """About a server on the box."""


class PortInUse(ServerError):
    """Refused to launch: ``.port`` is already bound (listening) on the box."""

    def __init__(self, port: int, *, box: str | None = None, detail: str = "") -> None:
        self.port = port
        super().__init__(
            f"port {port} is already in use on the box{(' (' + detail + ')') if detail else ''}; "
            "stop that server or choose another port",
            box=box,
        )


class ServerLaunchFailed(ServerError):
    """The detached launch did not produce a running process (no pid file appeared)."""

    def __init__(self, message: str, *, log_tail: Sequence[str] = (), box: str | None = None) -> None:
        self.log_tail = list(log_tail)
        super().__init__(_with_tail(message, self.log_tail), box=box)


def _with_tail(message: str, tail: Sequence[str]) -> str:
    if not tail:
        return message + "\n(log is empty)"
    return message + "\n--- last log lines ---\n" + "\n".join(tail)


class ServerDied(ServerError):
    """The server process exited before it became healthy; ``.log_tail`` is its last log lines."""

    def __init__(self, message: str, *, pid: int, log_path: str, log_tail: Sequence[str], box: str | None = None):
        self.pid = pid
        self.log_path = log_path
        self.log_tail = list(log_tail)
        super().__init__(_with_tail(f"{message} (pid {pid}, log {log_path})", self.log_tail), box=box)


class ServerStartTimedOut(ServerError):
    """The server did not answer healthy within ``.timeout`` seconds; ``.log_tail`` is its log's end."""

    def __init__(
        self, message: str, *, pid: int, log_path: str, log_tail: Sequence[str], timeout: float, box: str | None = None
    ):
        self.pid = pid
        self.log_path = log_path
        self.log_tail = list(log_tail)
        self.timeout = timeout
        super().__init__(_with_tail(f"{message} (pid {pid}, log {log_path})", self.log_tail), box=box)


class ServerStopFailed(ServerError):
    """The process group was still alive after TERM, the grace period and KILL."""

    def __init__(self, message: str, *, pid: int, pgid: int, box: str | None = None):
        self.pid = pid
        self.pgid = pgid
        super().__init__(message, box=box)


# -- probes -------------------------------------------------------------------------------------


class ProbeError(RemoteError):
    """About a debug probe (``remote.probes``); ``.path`` is the source file when known."""

    def __init__(self, message: str, *, path: str | None = None, box: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message}{(': ' + path) if path else ''}", box=box)


class AnchorNotFound(ProbeError):
    """The anchor (regex, line number, function) matched no line where a probe can go."""


class AnchorAmbiguous(ProbeError):
    """The anchor regex matched several lines (``.lines``, 1-based); make it more specific."""

    def __init__(self, message: str, *, lines: Sequence[int], path: str, box: str | None = None) -> None:
        self.lines = list(lines)
        super().__init__(message, path=path, box=box)


class ProbeCompileError(ProbeError):
    """The patched text failed to compile with the box's python; ``.output`` is its error text."""

    def __init__(self, message: str, *, output: str, path: str, box: str | None = None) -> None:
        self.output = output
        super().__init__(f"{message}\n--- compiler output ---\n{_excerpt(output)}\n---", path=path, box=box)


class ProbeExists(ProbeError):
    """The tag is already in use by a different probe (other file, anchor or expressions)."""


class ProbeNotFound(ProbeError):
    """No probe with that tag is recorded in the box's journal."""


class ProbeConflict(ProbeError):
    """The file was changed by someone else (or by a later probe); nothing was written.

    The backup of the original is kept (``.backup_path``) so it can be restored by hand.
    """

    def __init__(self, message: str, *, path: str | None = None, backup_path: str | None = None, box: str | None = None):
        self.backup_path = backup_path
        super().__init__(message, path=path, box=box)
