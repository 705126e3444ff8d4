"""``Box``: one API over any transport (commands, files, servers, logs).

Everything here is built from the primitives of ``remote.transport.Transport``; nothing in this
module knows whether the box is this machine or a remote one.

Units: sizes and offsets in bytes, time-outs and durations in seconds. Paths are paths on the
box; a leading ``~`` is expanded to the box user's home.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import signal
import time
from typing import Callable, Mapping, Optional, Sequence, Union

import httpx

from .errors import (
    CommandFailed,
    RemoteFileDecodeError,
    RemoteFileError,
    RemoteFileNotFound,
    RemoteIsADirectory,
    PortInUse,
    RemoteError,
    ServerDied,
    ServerError,
    ServerLaunchFailed,
    ServerStartNotReady,
    ServerStartStalled,
    ServerStartStuck,
    ServerStartTimedOut,
    ServerStopFailed,
)
from .result import FileStat, ProcessInfo, Result, ServerHandle, ServerProcess, ServerStopped
from . import engines
from .transport import CHUNK, Transport

PathLike = Union[str, "os.PathLike[str]"]

#: Default pattern of ``find_servers``: SGLang's entry points and the sandbox's (``launch_server``,
#: ``sglang``) and vLLM's (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``,
#: ``python -m vllm.entrypoints.cli.main serve``). Loose on purpose: ``ServerProcess.engine`` says
#: which matches are launchers.
DEFAULT_SERVER_PATTERN = r"launch_server|sglang|vllm"
#: Default state directory on the box (probe journal, server logs).
DEFAULT_STATE_DIR = "~/.cache/eagle-workbench"

#: Clock ticks per second of the CPU times in ``/proc/PID/stat`` (Linux's ``USER_HZ``: 100 on every
#: architecture the kernel exports to user space).
USER_HZ = 100
#: An access-log line of a readiness check (uvicorn's ``"GET /health_generate HTTP/1.1" 503``, the
#: tiny test server's ``request: "GET /health ..."``): the echo of a poll, no progress of the server.
POLL_LINE = re.compile(rb'"(?:GET|POST) /(?:health_generate|health|generate|v1/models|v1/completions)[ ?"]')

_TAIL_BLOCK = 64 * 1024
_TCP_LISTEN = "0A"

#: The longest line (bytes) any log reader of the workbench holds: a longer one is cut to its first
#: ``MAX_LINE`` bytes followed by :func:`cut_mark` (its real length). One pathological line (a
#: printed tensor, a 500 MB dump) then costs 64 KiB, not its size.
MAX_LINE = 64 * 1024
#: The largest block a backward scan reads at once (it starts at 64 KiB and doubles).
_TAIL_MAX_BLOCK = 8 << 20
_CUT_RE = re.compile(rb" \[eagle-workbench: line cut at (\d+) of (\d+) bytes\]\r?$")


def cut_mark(kept: int, length: int) -> bytes:
    """What follows the kept head of a line cut to ``kept`` bytes out of ``length``:
    ``b" [eagle-workbench: line cut at 65536 of 524288000 bytes]"``."""
    return b" [eagle-workbench: line cut at %d of %d bytes]" % (kept, length)


def cut_length(line: bytes) -> Optional[int]:
    """The real length (bytes) of a line that ends with :func:`cut_mark`, else ``None``."""
    m = _CUT_RE.search(line[-96:])
    return int(m.group(2)) if m else None


def cut_line(line: bytes, max_line: int = MAX_LINE) -> bytes:
    """``line`` (without its newline) as a log reader keeps it: whole up to ``max_line`` bytes, else
    its first ``max_line`` bytes and :func:`cut_mark`."""
    return line if len(line) <= max_line else bytes(line[:max_line]) + cut_mark(max_line, len(line))


def tail_lines(read: "Callable[[int, int], bytes]", end: int, n: int, *, max_line: int = MAX_LINE) -> list[bytes]:
    """The last ``n`` lines before byte ``end`` of a file read with ``read(offset, length)``,
    without their newlines, each at most ``max_line`` bytes plus :func:`cut_mark` (a longer one
    is cut there, the mark giving its real length); an unfinished last line counts as a line.

    Reads backwards in blocks of 64 KiB doubling to 8 MiB, keeping at most 8 MiB plus the lines'
    heads: the memory does not depend on the lines' length, the time on the bytes between ``end``
    and the start of the n-th line from the end. Raises what ``read`` raises; ``ValueError`` for
    ``n < 0``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n == 0 or end <= 0:
        return []
    newlines: list[int] = []  # offsets of newline bytes, from the end backwards
    kept: list[bytes] = []    # the blocks read, while they stay under _TAIL_MAX_BLOCK in all
    kept_bytes, kept_ok = 0, True
    pos, step = end, _TAIL_BLOCK
    last_byte_newline: Optional[bool] = None
    while pos > 0:
        size = min(step, pos)
        block = read(pos - size, size)
        if len(block) != size:  # the file shrank under us: read what there is from here on
            block = block[:size]
        if last_byte_newline is None:
            last_byte_newline = block.endswith(b"\n")
        cut = len(block)
        while True:
            cut = block.rfind(b"\n", 0, cut)
            if cut < 0:
                break
            newlines.append(pos - size + cut)
            if cut == 0:
                break
        pos -= size
        if kept_ok:
            kept.append(block)
            kept_bytes += size
            if kept_bytes > _TAIL_MAX_BLOCK:
                kept, kept_ok = [], False
        if len(newlines) - (1 if last_byte_newline else 0) >= n:
            break
        step = min(step * 2, _TAIL_MAX_BLOCK)
    stops = newlines[::-1]  # ascending
    if last_byte_newline:
        stops = stops[:-1]  # the final newline ends the last line, it starts none
    last_end = end - 1 if last_byte_newline else end
    starts = ([0] if pos == 0 else []) + [s + 1 for s in stops]
    ends = (stops if pos == 0 else stops[1:]) + [last_end]
    ranges = list(zip(starts, ends))[-n:]
    if kept_ok:
        buf, base = b"".join(reversed(kept)), pos
        return [cut_line(buf[a - base:b - base], max_line) for a, b in ranges]
    out = []
    for a, b in ranges:
        head = read(a, min(b - a, max_line + 1)) if b > a else b""
        out.append(head if b - a <= max_line else head[:max_line] + cut_mark(max_line, b - a))
    return out



class Box:
    """A machine the workbench works on, reached through ``transport``.

    ``state_dir`` (on the box) holds the probe journal and default server logs;
    ``python`` is the interpreter used on the box (probe compile checks).
    Use as a context manager, or call ``close()``.
    """

    def __init__(self, transport: Transport, *, state_dir: Optional[PathLike] = None, python: str = "python3"):
        self.transport = transport
        self.name = transport.name
        self.state_dir = self._p(state_dir if state_dir is not None else DEFAULT_STATE_DIR)
        self.python = python

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the transport (idempotent)."""
        self.transport.close()

    def __enter__(self) -> "Box":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Box {self.name} state_dir={self.state_dir!r}>"

    def expand_path(self, path: PathLike) -> str:
        """``path`` as text, with a leading ``~`` expanded to the box user's home."""
        return self._p(path)

    def realpath(self, path: PathLike, *, timeout: float = 10) -> str:
        """``path`` made absolute with every symlink resolved (on the box)."""
        return self.transport.realpath(self._p(path), timeout=timeout)

    def _p(self, path: PathLike) -> str:
        text = os.fspath(path)
        if not isinstance(text, str):
            raise TypeError(f"paths on a box are text, got {type(text).__name__}")
        if text.startswith("~"):
            text = self.transport.expanduser(text)
        return text

    # -- commands -------------------------------------------------------------------------------

    def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        timeout: float = 30,
        check: bool = True,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
    ) -> Result:
        """Run ``cmd`` on the box and return its :class:`Result`.

        ``cmd`` is shell text run with ``bash -c``, or an argv sequence (shlex-joined, so no
        shell expansion happens). ``timeout`` is in seconds; ``env`` is added to the box's
        environment; ``stdin`` is fed to the command (otherwise it reads from /dev/null).

        Raises ``CommandFailed`` (carrying the Result) on a non-zero exit when ``check`` is true;
        ``CommandTimedOut`` after killing the command's whole process group on time-out;
        ``RemoteFileNotFound`` when ``cwd`` does not exist.
        """
        if timeout is None or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        command = cmd if isinstance(cmd, str) else shlex.join([os.fspath(a) for a in cmd])
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        result = self.transport.run(
            command, timeout=timeout, cwd=None if cwd is None else self._p(cwd), env=env, stdin=data
        )
        if check and result.exit_code != 0:
            raise CommandFailed(result)
        return result

    # -- reading files --------------------------------------------------------------------------

    def read_bytes(self, path: PathLike, offset: int = 0, length: Optional[int] = None, *, timeout: float = 30) -> bytes:
        """``length`` bytes of the file from byte ``offset`` (``None``: to the end), reading
        only that range. Short (or empty) at end of file.

        Raises ``RemoteFileNotFound``, ``RemotePermissionError``, ``RemoteIsADirectory``.
        """
        if offset < 0 or (length is not None and length < 0):
            raise ValueError(f"offset and length must be >= 0, got offset={offset} length={length}")
        return self.transport.read_range(self._p(path), offset, length, timeout=timeout)

    def read_text(self, path: PathLike, *, encoding: str = "utf-8", timeout: float = 30) -> str:
        """The whole file decoded with ``encoding``.

        Raises ``RemoteFileDecodeError`` when it is not valid text, and the file errors of
        ``read_bytes``.
        """
        p = self._p(path)
        data = self.transport.read_range(p, 0, None, timeout=timeout)
        try:
            return data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise RemoteFileDecodeError(
                f"not valid {encoding} at byte {exc.start}", path=p, box=self.name
            ) from None

    def read_lines(
        self, path: PathLike, start: int = 1, end: Optional[int] = None, *, encoding: str = "utf-8", timeout: float = 30
    ) -> list[tuple[int, str]]:
        """Lines ``start``..``end`` (1-based, inclusive; ``end=None``: to the end of the file) as
        ``(line_number, text)`` with the line ending removed. Reads the file in blocks and stops
        after line ``end``. Undecodable bytes are replaced. A line longer than :data:`MAX_LINE`
        bytes comes back as its first 64 KiB and :func:`cut_mark` (no more of it is held).

        Raises the file errors of ``read_bytes``; ``ValueError`` for ``start < 1`` or ``end < start``.
        """
        if start < 1 or (end is not None and end < start):
            raise ValueError(f"line range must satisfy 1 <= start <= end, got start={start} end={end}")
        p = self._p(path)
        out: list[tuple[int, str]] = []
        lineno = 0
        offset = 0
        pending = b""

        pending_len = 0  # the real length of the unfinished line (pending holds at most MAX_LINE of it)

        def keep(raw: bytes, length: int) -> bool:  # True when done
            nonlocal lineno
            lineno += 1
            if lineno >= start:
                raw = raw if length <= MAX_LINE else raw[:MAX_LINE] + cut_mark(MAX_LINE, length)
                out.append((lineno, raw.rstrip(b"\r").decode(encoding, "replace")))
            return end is not None and lineno >= end

        while True:
            block = self.transport.read_range(p, offset, CHUNK, timeout=timeout)
            if not block:
                if pending_len:
                    keep(pending, pending_len)
                return out
            offset += len(block)
            first = block.find(b"\n")
            if first < 0:  # the line goes on: keep its head only
                pending += block[: max(0, MAX_LINE + 1 - len(pending))]
                pending_len += len(block)
                continue
            if keep(pending + block[: min(first, max(0, MAX_LINE + 1 - len(pending)))], pending_len + first):
                return out
            parts = block[first + 1:].split(b"\n")
            last = parts.pop()
            for raw in parts:
                if keep(raw[: MAX_LINE + 1], len(raw)):
                    return out
            pending, pending_len = last[: MAX_LINE + 1], len(last)

    def sha256(self, path: PathLike, *, timeout: float = 60) -> str:
        """Hex sha256 of the file's bytes. Raises the file errors of ``read_bytes``."""
        return self.transport.sha256(self._p(path), timeout=timeout)

    def stat(self, path: PathLike, *, timeout: float = 30) -> FileStat:
        """Size (bytes), mode, mtime and kind of ``path``. Raises ``RemoteFileNotFound`` etc."""
        return self.transport.stat(self._p(path), timeout=timeout)

    def exists(self, path: PathLike, *, timeout: float = 30) -> bool:
        """True when ``path`` exists (file or directory). Raises ``RemotePermissionError``."""
        try:
            self.transport.stat(self._p(path), timeout=timeout)
        except RemoteFileNotFound:
            return False
        return True

    def file_size(self, path: PathLike, *, timeout: float = 30) -> int:
        """Size of the file in bytes. Raises ``RemoteFileNotFound`` etc."""
        return self.stat(path, timeout=timeout).size

    def listdir(self, path: PathLike, *, timeout: float = 30) -> list[str]:
        """Sorted names in the directory ``path``."""
        return sorted(self.transport.listdir(self._p(path), timeout=timeout))

    # -- writing files --------------------------------------------------------------------------

    def write_file(
        self,
        path: PathLike,
        data: Union[str, bytes],
        mode: Optional[int] = None,
        *,
        make_dirs: bool = False,
        timeout: float = 30,
    ) -> None:
        """Replace (or create) ``path`` atomically with ``data`` (text is written as UTF-8).

        The data goes to a temporary file in the same directory, is fsynced, then renamed over
        ``path``: a reader (or a crash) sees the old file or the new one, never a mix. The
        permission bits are ``mode`` if given, else those of the existing file, else 0o644.
        ``make_dirs`` creates the parent directory first.

        Raises ``RemoteFileNotFound`` (no parent directory), ``RemotePermissionError``,
        ``RemoteIsADirectory``.
        """
        p = self._p(path)
        blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        parent = os.path.dirname(p) or "."
        if make_dirs:
            self.transport.makedirs(parent, timeout=timeout)
        if mode is None:
            try:
                st = self.transport.stat(p, timeout=timeout)
            except RemoteFileNotFound:
                mode = 0o644
            else:
                if not st.is_file:
                    raise RemoteIsADirectory("write_file: not a regular file", path=p, box=self.name)
                mode = st.mode
        tmp = self.temp_path_for(p)
        self.transport.write_new(tmp, blob, mode=mode, timeout=timeout)
        try:
            self.transport.rename(tmp, p, timeout=timeout)
        except BaseException:
            self._remove_quietly(tmp, timeout=timeout)
            raise

    @staticmethod
    def temp_path_for(path: str) -> str:
        """A fresh temporary name next to ``path`` (same directory, so a rename is atomic)."""
        head, tail = os.path.split(path)
        return os.path.join(head, f".{tail}.ewb-tmp-{secrets.token_hex(4)}")

    def _remove_quietly(self, path: str, *, timeout: float) -> None:
        """Remove a temporary file during clean-up; a missing file is fine, other errors raise."""
        try:
            self.transport.remove(path, timeout=timeout)
        except RemoteFileNotFound:
            return

    def remove(self, path: PathLike, *, missing_ok: bool = False, timeout: float = 30) -> None:
        """Delete a file. Raises ``RemoteFileNotFound`` unless ``missing_ok``."""
        p = self._p(path)
        try:
            self.transport.remove(p, timeout=timeout)
        except RemoteFileNotFound:
            if not missing_ok:
                raise

    def makedirs(self, path: PathLike, *, mode: int = 0o755, timeout: float = 30) -> None:
        """Create a directory and its parents (no error if it exists)."""
        self.transport.makedirs(self._p(path), mode=mode, timeout=timeout)

    def private_dir(self, path: PathLike, *, timeout: float = 30) -> None:
        """Create the directory ``path`` (and its parents) and make it private to the box user:
        mode 0700 whether it was just created or already existed with looser bits (for the
        workbench's own state directories, which hold server logs and journals with the servers'
        command lines and environments, secrets included). Raises the errors of :meth:`makedirs`
        and :meth:`run` (``RemoteCommandFailed`` when ``chmod`` fails, e.g. a directory owned by
        another user)."""
        p = self._p(path)
        self.transport.makedirs(p, mode=0o700, timeout=timeout)
        self.run(["chmod", "0700", p], timeout=timeout, check=True)

    # -- logs -----------------------------------------------------------------------------------

    def tail(self, path: PathLike, n: int = 50, *, encoding: str = "utf-8", timeout: float = 30) -> list[str]:
        """The last ``n`` lines of the file (line endings removed), read backwards from the end in
        blocks of 64 KiB doubling to 8 MiB (:func:`tail_lines`): a multi-gigabyte log costs only the
        bytes back to those lines, and a line longer than :data:`MAX_LINE` bytes comes back as its
        first 64 KiB and ``" [eagle-workbench: line cut at 65536 of N bytes]"`` (memory stays
        bounded whatever one line's length). Undecodable bytes are replaced.

        Raises the file errors of ``read_bytes``.
        """
        if n <= 0:
            return []
        p = self._p(path)
        size = self.transport.stat(p, timeout=timeout).size
        lines = tail_lines(lambda off, length: self.transport.read_range(p, off, length, timeout=timeout), size, n)
        return [ln.rstrip(b"\r").decode(encoding, "replace") for ln in lines]

    def follow(
        self, path: PathLike, offset: int, *, max_bytes: Optional[int] = None, timeout: float = 30
    ) -> tuple[bytes, int]:
        """New bytes of a growing file since byte ``offset``, and the offset to pass next time.

        If the file is now shorter than ``offset`` (truncated, or rotated to a new file) it is
        read again from byte 0. ``max_bytes`` caps one read. A file that does not exist (yet)
        gives ``(b"", offset)``.
        """
        p = self._p(path)
        try:
            size = self.transport.stat(p, timeout=timeout).size
        except RemoteFileNotFound:
            return b"", offset
        if offset > size:
            offset = 0
        want = size - offset
        if max_bytes is not None:
            want = min(want, max_bytes)
        if want <= 0:
            return b"", offset
        data = self.transport.read_range(p, offset, want, timeout=timeout)
        return data, offset + len(data)

    # -- network --------------------------------------------------------------------------------

    def url(self, port: int, host: str = "127.0.0.1", *, timeout: float = 10) -> str:
        """Base URL (``http://host:port``) at which a server listening on the box's ``host:port``
        is reachable from where the workbench runs: the same address on a local box; over SSH the
        local end of a port forward through the box's connection (``127.0.0.1:EPHEMERAL``, opened
        on first use, kept per port until the box is closed). Nothing needs to listen yet.

        Raises the transport's errors when the forward cannot be set up (``SSHError`` subclasses).
        """
        local_host, local_port = self.transport.forward(host, int(port), timeout=timeout)
        if ":" in local_host and not local_host.startswith("["):
            local_host = f"[{local_host}]"
        return f"http://{local_host}:{int(local_port)}"

    def server_identity(self, port: int, *, host: str = "127.0.0.1", timeout: float = 10,
                        headers: Optional[Mapping[str, str]] = None) -> "readiness.ServerIdentity":
        """Which engine answers on the box's ``host:port`` (``remote.readiness.identify_server``:
        ``/server_info``, ``/version``, ``/v1/models`` ``owned_by``, ``/metrics`` prefixes), through
        :meth:`url` (a port forward over SSH); each request bounded by ``timeout`` seconds;
        ``headers`` (e.g. ``Authorization`` for a vLLM ``--api-key``) sent with each. Raises the
        transport's errors when the forward cannot be set up; HTTP failures are evidence, not errors."""
        from . import readiness

        with httpx.Client(trust_env=False, headers=dict(headers or {})) as client:
            return readiness.identify_server(client, self.url(port, host, timeout=timeout), timeout=timeout)

    def listening_ports(self, *, timeout: float = 10) -> set[int]:
        """TCP ports in LISTEN state on the box (IPv4 and IPv6), read from ``/proc/net/tcp*``."""
        ports: set[int] = set()
        seen_any = False
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                text = self.transport.read_range(table, timeout=timeout).decode("ascii", "replace")
            except RemoteFileNotFound:
                continue
            seen_any = True
            for line in text.splitlines()[1:]:
                fields = line.split()
                if len(fields) > 3 and fields[3] == _TCP_LISTEN:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        if not seen_any:
            raise RemoteFileNotFound("cannot list listening ports: no /proc/net/tcp", path="/proc/net/tcp", box=self.name)
        return ports

    def port_in_use(self, port: int, *, timeout: float = 10) -> bool:
        """True when some socket on the box listens on TCP ``port``."""
        return int(port) in self.listening_ports(timeout=timeout)

    # -- processes ------------------------------------------------------------------------------

    def process(self, pid: int, *, timeout: float = 10) -> Optional[ProcessInfo]:
        """The process ``pid`` (``None`` when there is none)."""
        return self.transport.process(int(pid), timeout=timeout)

    def is_alive(self, pid: int, *, timeout: float = 10) -> bool:
        """True when process ``pid`` exists and has not exited (:attr:`ProcessInfo.exited`: a
        zombie whose threads are all gone)."""
        info = self.transport.process(int(pid), argv=False, timeout=timeout)
        return info is not None and not info.exited

    def cpu_seconds(self, pgid: int, *, timeout: float = 30) -> Optional[float]:
        """CPU seconds (user + system, children reaped included) used so far by the live processes
        of process group ``pgid``, read from ``/proc/PID/stat`` (fields 14-17, in
        :data:`USER_HZ` ticks); ``None`` when no process of the group is left."""
        total, seen = 0, False
        for proc in self.transport.processes(argv=False, timeout=timeout):
            if proc.pgid != pgid or proc.state == "Z":
                continue
            try:
                text = self.transport.read_range(f"/proc/{proc.pid}/stat", timeout=timeout).decode("ascii", "replace")
            except RemoteFileError:  # vanished between the listing and the read
                continue
            fields = text[text.rfind(")") + 2:].split()
            try:
                total += sum(int(f) for f in fields[11:15])
            except ValueError:
                continue
            seen = True
        return total / USER_HZ if seen else None

    def activity_probe(self, pgid: Optional[int], log_path: Optional[str], *,
                       timeout: float = 30) -> Callable[[], tuple]:
        """A callable for stall detection (``remote.readiness.StallClock``): each call returns what
        the server has done so far, ``(log bytes of progress or None, CPU seconds of process group
        pgid or None)`` (:meth:`cpu_seconds`). Log bytes of progress count the new lines of its log
        except the access-log lines of the readiness checks themselves (:data:`POLL_LINE`: a
        ``"GET /health_generate"`` line is the poll's echo, not the server's progress), read from
        where the previous call stopped (at most the last 64 KiB of what is new). Raises nothing
        for a missing log or a gone group (``None`` in their place)."""
        state = {"offset": None, "progress": 0}

        def look() -> tuple:
            size = None
            if log_path:
                try:
                    size = self.transport.stat(self._p(log_path), timeout=timeout).size
                except RemoteFileError:
                    size = None
            if size is not None:
                start = state["offset"]
                if start is None or size < start:  # first look, or a log truncated: from its end
                    state["offset"] = size
                elif size > start:
                    begin = max(start, size - _TAIL_BLOCK)
                    try:
                        new = self.transport.read_range(self._p(log_path), begin, size - begin, timeout=timeout)
                    except RemoteFileError:
                        new = b""
                    state["progress"] += (begin - start) + sum(
                        len(line) + 1 for line in new.split(b"\n") if line.strip() and not POLL_LINE.search(line))
                    state["offset"] = size
            cpu = self.cpu_seconds(pgid, timeout=timeout) if pgid is not None else None
            return (state["progress"] if size is not None else None), cpu

        return look

    def group_alive(self, pgid: int, *, timeout: float = 30) -> bool:
        """True when any process of process group ``pgid`` has not exited (:attr:`ProcessInfo.exited`)."""
        return any(p.pgid == pgid and not p.exited for p in self.transport.processes(argv=False, timeout=timeout))

    def find_servers(self, pattern: str = DEFAULT_SERVER_PATTERN, *, timeout: float = 30) -> list[ServerProcess]:
        """Running servers whose command line matches the regex ``pattern``, with their argv,
        process group, cwd, executable, port, log file (where fd 2, else fd 1, points when that is a
        regular file), engine (``remote.engines.launcher_engine``) and live descendants. Sorted by
        pid; zombies and kernel threads skipped.

        A server is listed once, not with its helper processes: a match whose ancestor is also a
        match is left out when it is an engine helper (``remote.engines.helper_kind``: vLLM 0.32.0's
        ``VLLM::EngineCore`` / ``VLLM::Worker`` and the ``multiprocessing`` resource tracker or
        spawned children, whose argv holds the venv's path; SGLang's ``sglang::scheduler``) or runs
        the very argv of that ancestor (a forked child); any other matching descendant (a second
        launcher a wrapper started) is listed.

        The port is ``--port`` of the argv; without one, the TCP port the process itself listens on
        (``/proc/PID/fd`` sockets matched with ``/proc/net/tcp*``): the engine's default (vLLM
        8000, ``FrontendArgs.port`` in vllm/entrypoints/launchers/cli_args.py; SGLang 30000) when
        it is among them, else the only one, else ``None`` (all of them in ``listening_ports``).
        Raises the transport's errors when the process table cannot be read.
        """
        rx = re.compile(pattern)
        procs = [p for p in self.transport.processes(argv=True, timeout=timeout) if p.state != "Z"]
        by_pid = {p.pid: p for p in procs}
        kids: dict[int, list[int]] = {}
        for p in procs:
            kids.setdefault(p.ppid, []).append(p.pid)
        matched = {p.pid for p in procs if p.argv and rx.search(" ".join(p.argv))}
        listed = []
        for pid in sorted(matched):
            proc = by_pid[pid]
            parent = _matched_ancestor(proc, by_pid, matched)
            if parent is not None and (engines.is_helper_process(proc.argv) or proc.argv == parent.argv):
                continue  # part of the server ``parent``
            listed.append(proc)
        sockets: Optional[dict[int, int]] = None
        found = []
        for proc in listed:
            port = port_from_argv(proc.argv)
            engine = engines.launcher_engine(proc.argv)
            listening: tuple[int, ...] = ()
            if port is None:
                if sockets is None:
                    sockets = self._listening_inodes(timeout)
                listening = self._ports_of(proc.pid, sockets, timeout)
                port = _port_among(listening, engines.DEFAULT_PORTS.get(engine or ""))
            found.append(
                ServerProcess(
                    pid=proc.pid,
                    pgid=proc.pgid,
                    argv=proc.argv,
                    cwd=self._readlink_or_none(f"/proc/{proc.pid}/cwd", timeout),
                    exe=self._readlink_or_none(f"/proc/{proc.pid}/exe", timeout),
                    port=port,
                    log_path=self._log_of(proc.pid, timeout),
                    engine=engine,
                    children=tuple(sorted(_descendants(proc.pid, kids))),
                    listening_ports=listening,
                )
            )
        return found

    def listening_sockets(self, *, timeout: float = 10) -> dict[int, int]:
        """``{socket inode: port}`` of every TCP socket listening on the box (``/proc/net/tcp*``).
        Raises ``RemoteError`` when the box fails (a missing table is skipped)."""
        return self._listening_inodes(timeout)

    def _listening_inodes(self, timeout: float) -> dict[int, int]:
        """``{socket inode: port}`` of every TCP socket in LISTEN state on the box (``/proc/net/tcp``
        and ``tcp6``; column 10 is the inode)."""
        out: dict[int, int] = {}
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                text = self.transport.read_range(table, timeout=timeout).decode("ascii", "replace")
            except RemoteFileNotFound:
                continue
            for line in text.splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == _TCP_LISTEN and fields[9].isdigit():
                    out[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
        return out

    def _ports_of(self, pid: int, sockets: Mapping[int, int], timeout: float) -> tuple[int, ...]:
        """The TCP ports process ``pid`` itself listens on (its ``/proc/PID/fd`` sockets found in
        ``sockets``), sorted; empty when its fds cannot be read (another user's process)."""
        try:
            fds = self.transport.listdir(f"/proc/{pid}/fd", timeout=timeout)
        except RemoteFileError:
            return ()
        ports = set()
        for fd in fds:
            target = self._readlink_or_none(f"/proc/{pid}/fd/{fd}", timeout)
            if target and target.startswith("socket:["):
                inode = target[8:-1]
                if inode.isdigit() and int(inode) in sockets:
                    ports.add(sockets[int(inode)])
        return tuple(sorted(ports))

    def listening_ports_of(self, pid: int, *, timeout: float = 30) -> tuple[int, ...]:
        """The TCP ports process ``pid`` itself listens on (IPv4 and IPv6: its ``/proc/PID/fd``
        sockets found LISTENing in ``/proc/net/tcp*``), sorted; empty when it listens on none, is
        gone, or its fds may not be read (another user's process)."""
        return self._ports_of(int(pid), self._listening_inodes(timeout), timeout)

    def process_tree(self, pid: int, *, timeout: float = 30) -> list[ProcessInfo]:
        """The live process ``pid``, every live process of its process group (when ``pid`` is gone:
        of process group ``pid``, a launched server's own) and every live descendant of either (by
        parent pid, also those that left the group with ``setsid`` or ``setpgid``), sorted by pid;
        empty when nothing of it is left."""
        procs = [p for p in self.transport.processes(argv=True, timeout=timeout) if p.state != "Z"]
        pgid = _pgid_of(int(pid), procs)
        pgid = int(pid) if pgid is None else pgid
        return _tree(int(pid), pgid if pgid > 1 else None, procs)

    def _readlink_or_none(self, path: str, timeout: float) -> Optional[str]:
        try:
            return self.transport.readlink(path, timeout=timeout)
        except RemoteFileError:  # not ours to read, or the process just exited
            return None

    def _log_of(self, pid: int, timeout: float) -> Optional[str]:
        for fd in (2, 1):
            target = self._readlink_or_none(f"/proc/{pid}/fd/{fd}", timeout)
            if not target or not target.startswith("/") or target.endswith(" (deleted)"):
                continue
            try:
                if self.transport.stat(target, timeout=timeout).is_file:
                    return target
            except RemoteFileError:
                continue
        return None

    # -- servers --------------------------------------------------------------------------------

    def launch_server(
        self,
        argv: Union[Sequence[str], str],
        *,
        port: Optional[int],
        log_path: Optional[PathLike] = None,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None,
        append_log: bool = False,
        timeout: float = 30,
    ) -> ServerHandle:
        """Start a server detached from this session and return its handle.

        ``argv`` is the program and its arguments (or shell text, run with ``bash -c``). The
        server gets its own session and process group (``setsid``), stdin from /dev/null, stdout
        and stderr written to ``log_path`` (default ``STATE_DIR/servers/server-PORT-TIME.log``;
        truncated first unless ``append_log``), and its pid in ``log_path + ".pid"``. ``env`` is
        added to the box's environment, with ``PYTHONDONTWRITEBYTECODE=1`` unless ``env`` sets it
        (or the command does, ``env PYTHONDONTWRITEBYTECODE=0 python ...``, which wins): a server
        the workbench starts writes no ``__pycache__`` into the engine's tree. It keeps running when this Python process exits.
        ``port`` (the port the server will listen on; ``None`` if unknown) is checked before
        launching; this call does not wait for the server to be healthy (see ``wait_healthy``).

        Raises ``PortInUse`` when something already listens on ``port``, ``ServerLaunchFailed``
        when no pid file appears within ``timeout`` seconds, ``RemoteFileNotFound`` when ``cwd``
        does not exist.
        """
        port = None if port is None else int(port)
        if port is not None and self.port_in_use(port, timeout=timeout):
            raise PortInUse(port, box=self.name)
        if log_path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            log = f"{self.state_dir}/servers/server-{port}-{stamp}-{secrets.token_hex(2)}.log"
            # The log holds the server's arguments (SGLang prints server_args, --api-key included):
            # the workbench's own log directory is private.
            self.private_dir(f"{self.state_dir}/servers", timeout=timeout)
        else:
            log = self._p(log_path)
            if not log.startswith("/") and cwd is not None:
                log = f"{self._p(cwd).rstrip('/')}/{log}"  # the shell opens it inside cwd
            self.transport.makedirs(os.path.dirname(log) or ".", timeout=timeout)
        pid_path = log + ".pid"
        run_cwd = None if cwd is None else self._p(cwd)
        argv_t = (argv,) if isinstance(argv, str) else tuple(os.fspath(a) for a in argv)
        program = ["bash", "-c", argv] if isinstance(argv, str) else list(argv_t)
        # No bytecode into the engine's tree (new files on the box): unless the launch sets it itself.
        env = {**({} if env is None else dict(env))}
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        program = ["env", *[f"{k}={v}" for k, v in env.items()], *program]
        # The inner shell writes its own pid (atomically) and execs the server, so the pid file
        # holds the server's pid, which is also its process group and session id.
        inner = 'echo $$ > "$0.tmp" && mv -f "$0.tmp" "$0" && exec "$@"'
        # A log file the launch creates is created 0600 (a subshell's umask: the server itself keeps
        # the box's umask for whatever it writes); an existing log keeps its mode.
        launch = (
            f"(umask 077 && : >> {shlex.quote(log)}); rm -f {shlex.quote(pid_path)}; "
            f"setsid bash -c {shlex.quote(inner)} {shlex.quote(pid_path)} {shlex.join(program)} "
            f"{'>>' if append_log else '>'} {shlex.quote(log)} 2>&1 < /dev/null &"
        )
        self.run(launch, timeout=timeout, cwd=run_cwd)
        deadline = time.monotonic() + timeout
        pid = None
        while pid is None:
            try:
                text = self.transport.read_range(pid_path, timeout=timeout).decode("ascii", "replace").strip()
            except RemoteFileNotFound:
                text = ""
            if text.isdigit():
                pid = int(text)
            elif time.monotonic() > deadline:
                raise ServerLaunchFailed(
                    f"no pid file {pid_path} within {timeout:g}s of launching {shlex.join(program)}",
                    log_tail=self._tail_or_empty(log),
                    box=self.name,
                )
            else:
                time.sleep(0.02)
        return ServerHandle(
            pid=pid, pgid=pid, port=port, log_path=log, pid_path=pid_path, argv=argv_t, cwd=run_cwd, box=self.name
        )

    def _tail_or_empty(self, path: str, n: int = 40) -> list[str]:
        try:
            return self.tail(path, n)
        except RemoteFileNotFound:
            return [f"(no log file at {path})"]

    def wait_healthy(
        self,
        handle: ServerHandle,
        *,
        timeout: float,
        path: Optional[str] = None,
        poll_interval: float = 0.25,
        on_log: Optional[Callable[[str], None]] = None,
        tail_lines: int = 40,
        request_timeout: Optional[float] = None,
        stall_timeout: Optional[float] = None,
        progress_marker: Optional[Callable[[], object]] = None,
        stall_phase: Optional[Callable[[list], Optional[str]]] = None,
        log_offset: int = 0,
    ) -> float:
        """Poll the server launched as ``handle`` until it is ready to generate; return the seconds
        waited.

        The check is generation-level (``remote.readiness.check_generation``): ``GET
        /health_generate`` (SGLang 0.5.23: 503 at once while starting, 200 once a 1-token
        generation got an answer from the scheduler), a 1-token ``POST /generate`` on an engine
        without it, ``GET /health`` then ``/v1/models`` and a 1-token ``POST /v1/completions`` on one
        without either. A vLLM launch (``remote.engines.launch_engine`` of ``handle.argv``: ``vllm
        serve``, ``python -m vllm.entrypoints.openai.api_server``, also as shell text with ``VAR=…``
        assignments) is checked on vLLM's routes at once (``engine="vllm"``: a ``/health`` 503 is a
        dead engine core, a 401 a missing API key, a 404 a missing route: ``ServerStartNotReady`` at
        once). ``path`` given: only ``GET path`` must
        answer 200 (liveness only, the old behaviour). Each poll's read time-out is
        ``request_timeout`` (default ``min(30, timeout)``; connect at most 5 s). Between polls the
        process is checked and, when ``on_log`` is given, new log text is passed to it as it appears.

        ``timeout``: seconds the whole wait may take. ``stall_timeout`` (seconds, ``None``: no stall
        check): the launch is given up as soon as it has made no progress for that long: its log did
        not grow, its process group used no CPU time (less than
        ``remote.readiness.MIN_CPU_PROGRESS_S`` per second) and its answer did not change
        (``remote.readiness.StallClock`` over :meth:`activity_probe`, looked at about once a second). So a
        server that starts slowly on a busy machine is waited for while it works, and one that
        hangs is given up after ``stall_timeout``, whatever the machine's load.
        ``progress_marker`` (called once per poll): a value that changes whenever the caller's own
        reading of the start-up moved (e.g. its phase or shard count from the text ``on_log``
        got): a change counts as progress too. ``stall_phase``: called with the log's last
        ``tail_lines`` lines when the stall time-out is reached, returns the start-up phase it
        stalled in (or None), named in the error. (``remote`` knows no log formats: the caller
        reads them, ``workbench.logs.startup``.) ``log_offset``: the byte of the log where this
        launch's output begins (a launch appending to an old log: its size before the launch);
        ``on_log`` gets the text from there, at most 4 MiB per poll.

        Raises ``ServerDied`` (with the log's last ``tail_lines`` lines) as soon as the process
        has exited, ``ServerStartNotReady`` (a ``ServerStartTimedOut``; ``.routes``: the routes that
        answered 404) as soon as a vLLM launch answers that it will not become ready,
        ``ServerStartStuck`` (a ``ServerStartTimedOut`` and a ``GenerationStuck``) as soon as HTTP
        answers but the 1-token generation does not return within ``request_timeout``, or when the
        server's own health check gave up on its scheduler: a 503 after >= 1 s on
        ``remote.readiness.STUCK_CONFIRMATIONS`` consecutive checks (one slow 503 may be a busy
        machine) with SGLang's ``Health check failed`` line in the log (a slow 503 without it is a
        server still starting whose event loop was slow to answer: waited for),
        ``ServerStartStalled`` (a ``ServerStartTimedOut``; ``.stalled_s``, ``.phase``,
        ``.last_line``) when it made no progress for ``stall_timeout`` seconds, ``ServerStartTimedOut`` (with the tail and what it
        last answered) when it never became ready within ``timeout`` seconds.
        """
        from . import readiness

        start = time.monotonic()
        deadline = start + timeout
        if handle.port is None:
            raise ValueError("wait_healthy needs a server launched with a port (handle.port is None)")
        if stall_timeout is not None and not stall_timeout > 0:
            raise ValueError(f"stall_timeout must be > 0 seconds, got {stall_timeout!r}")
        per_request = request_timeout if request_timeout is not None else max(min(30.0, timeout), 1.0)
        base = self.url(handle.port)
        engine = engines.launch_engine(handle.argv)
        engine = engine if engine == engines.VLLM else None
        url = base + (path or ("/health" if engine == engines.VLLM else readiness.HEALTH_PATH))
        last = "no answer yet"
        stuck_seen = 0
        stall = None if stall_timeout is None else readiness.StallClock(
            self.activity_probe(handle.pgid, handle.log_path), interval=min(1.0, stall_timeout / 3))
        with httpx.Client(timeout=httpx.Timeout(per_request, connect=min(5.0, per_request)), trust_env=False) as client:
            while True:
                if on_log is not None:
                    chunk, log_offset = self.follow(handle.log_path, log_offset, max_bytes=4 << 20)
                    if chunk:
                        on_log(chunk.decode("utf-8", "replace"))
                if not self.is_alive(handle.pid):
                    raise ServerDied(
                        f"server exited before {url} answered 200 (last: {last})",
                        pid=handle.pid,
                        log_path=handle.log_path,
                        log_tail=self._tail_or_empty(handle.log_path, tail_lines),
                        box=self.name,
                    )
                answer: object = None
                if path is not None:
                    try:
                        response = client.get(url)
                    except httpx.HTTPError as exc:
                        last = f"{type(exc).__name__}: {exc}"
                        answer = type(exc).__name__
                    else:
                        if response.status_code == 200:
                            return time.monotonic() - start
                        last = f"HTTP {response.status_code}"
                        answer = response.status_code
                else:
                    r = readiness.check_generation(client, base, timeout=per_request, engine=engine)
                    if r.ready:
                        return time.monotonic() - start
                    last = r.detail
                    answer = (r.state, r.status)
                    if r.state == readiness.ERROR and engine == engines.VLLM:
                        missing = r.missing_routes if r.status in (404, 405) else ()
                        raise ServerStartNotReady(
                            f"vLLM server at {base} answers but will not become ready: {r.detail}",
                            pid=handle.pid,
                            log_path=handle.log_path,
                            log_tail=self._tail_or_empty(handle.log_path, tail_lines),
                            timeout=timeout,
                            url=base,
                            last=r.detail,
                            routes=missing,
                            box=self.name,
                        )
                    stuck_seen = stuck_seen + 1 if r.state == readiness.STUCK else 0
                    confirmed = r.status != 503 or stuck_seen >= readiness.STUCK_CONFIRMATIONS
                    if (r.state == readiness.STUCK and r.status == 503 and confirmed
                            and not self._health_check_failed_logged(handle.log_path, tail_lines)):
                        # Slow 503s, but no "Health check failed" line: the server's event loop was
                        # slow to answer its "starting" 503 (model loading holds the CPU or the GIL),
                        # it did not give up on its scheduler. Still starting.
                        last = f"{r.detail}; no 'Health check failed' line in its log: still starting"
                    elif r.state == readiness.STUCK and confirmed and self.is_alive(handle.pid):
                        raise ServerStartStuck(
                            f"server at {base} answers HTTP but generation is stuck ({r.detail})"
                            + (f", {stuck_seen} checks in a row" if stuck_seen > 1 else ""),
                            pid=handle.pid,
                            log_path=handle.log_path,
                            log_tail=self._tail_or_empty(handle.log_path, tail_lines),
                            timeout=per_request,
                            url=base,
                            last=r.detail,
                            box=self.name,
                        )
                    if r.state == readiness.STUCK:
                        continue  # re-check at once: one slow 503 decides nothing
                now = time.monotonic()
                if stall is not None:
                    stall.look((answer, progress_marker()) if progress_marker is not None else answer)
                    if stall.idle_s >= stall_timeout:
                        tail = self._tail_or_empty(handle.log_path, tail_lines)
                        phase = stall_phase(list(tail)) if stall_phase is not None else None
                        last_line = next((t.strip() for t in reversed(tail)
                                          if t.strip() and not POLL_LINE.search(t.encode("utf-8", "replace"))), None)
                        where = f" in start-up phase {phase!r}" if phase else ""
                        raise ServerStartStalled(
                            f"server at {base} stalled{where}: made no progress for {stall.idle_s:.1f} s (stall "
                            f"time-out {stall_timeout:g} s: no new log bytes, no CPU time used, the same answer; "
                            f"last answer: {last}; last log line: {last_line if last_line is not None else '(none)'})",
                            pid=handle.pid,
                            log_path=handle.log_path,
                            log_tail=tail,
                            timeout=stall_timeout,
                            stalled_s=stall.idle_s,
                            box=self.name,
                            phase=phase,
                            last_line=last_line,
                        )
                if now >= deadline:
                    raise ServerStartTimedOut(
                        f"server at {base} never became ready in {timeout:g}s (last: {last})",
                        pid=handle.pid,
                        log_path=handle.log_path,
                        log_tail=self._tail_or_empty(handle.log_path, tail_lines),
                        timeout=timeout,
                        box=self.name,
                    )
                time.sleep(min(poll_interval, deadline - now))

    def stop_server(
        self, handle_or_pid: Union[ServerHandle, ServerProcess, int], *, grace: float = 10, kill_wait: float = 10
    ) -> ServerStopped:
        """Stop a server as a whole: its process group AND every descendant of it, also those that
        left the group (``setsid``/``setpgid``: signalled one by one). SIGTERM, wait up to ``grace``
        seconds for all of them to be gone, then SIGKILL whatever is left and wait up to
        ``kill_wait`` seconds. A stopped process (SIGSTOP) among them gets SIGCONT right after the
        SIGTERM, so it handles it. Descendants that appear while it waits (a worker forked during the
        shutdown) are included. "Gone" is :attr:`ProcessInfo.exited`: a zombie leader whose other
        threads are still exiting (a multi-threaded server right after SIGTERM) still holds its port
        and memory, so it is waited for. Returns how it ended (``ServerStopped``: ``stopped_pids``
        lists every process that was alive at the start, ``outside_group`` those that had left the
        group). Removes the handle's pid file.

        On vLLM 0.32.0 the tree is api_server → resource_tracker, ``VLLM::EngineCore`` →
        ``VLLM::Worker``, all in the api_server's group when it has its own session; on SIGTERM the
        api_server terminates its engine processes itself and joins them for up to 5 s
        (``vllm/v1/utils.py``: "[shutdown] Process manager: send sigterm to process EngineCore").
        When its EngineCore died, the api_server exits and leaves the worker (and the resource
        tracker) running in the group (observed here): those are stopped too.

        A server that shares the caller's own process group (started by this process without a
        new session) is signalled alone with its descendants, never its group: the caller must
        survive.

        Raises ``ServerError`` for pid <= 1, ``ServerStopFailed`` (``.survivors``: the pids) when
        processes survive SIGKILL.
        """
        start = time.monotonic()
        if isinstance(handle_or_pid, (ServerHandle, ServerProcess)):
            pid, pgid = handle_or_pid.pid, handle_or_pid.pgid
        else:
            pid = int(handle_or_pid)
            info = self.transport.process(pid, argv=False)
            pgid = info.pgid if info is not None else pid
        if pid <= 1:
            raise ServerError(f"refusing to stop pid {pid}", box=self.name)
        protected = self.transport.protected_pgids()
        group = pgid > 1 and pgid not in protected
        what = f"process group {pgid}" if group else f"process {pid}"
        tracked: set[int] = set()  # every pid of the tree seen so far

        def live_tree() -> list[ProcessInfo]:
            # not exited: a zombie leader whose other threads still exit holds the port and memory
            procs = [p for p in self.transport.processes(argv=False) if not p.exited]
            return _tree(pid, pgid if group else None, procs, also=tracked)

        def loners(tree: list[ProcessInfo]) -> list[int]:  # not reached by the group signal
            return [p.pid for p in tree if not (group and p.pgid == pgid)]

        first = live_tree()
        tracked.update(p.pid for p in first)
        outside = sorted(p.pid for p in first if group and p.pgid != pgid)
        signals: list[str] = []
        how = "already-exited"
        remaining = first

        def gone() -> bool:
            nonlocal remaining
            remaining = live_tree()
            tracked.update(p.pid for p in remaining)
            return not remaining

        if first:
            self._signal_tree(pid, pgid, group, loners(first), signal.SIGTERM)
            signals.append("TERM")
            if any(p.state in ("T", "t") for p in first):
                # A stopped process (SIGSTOP, a debugger) keeps SIGTERM pending until it runs again:
                # continue it, so it can shut down within the grace period instead of waiting for SIGKILL.
                self._signal_tree(pid, pgid, group, loners(first), signal.SIGCONT)
                signals.append("CONT")
            how = "terminated"
            if not self._wait_until_gone(lambda: not gone(), grace):
                self._signal_tree(pid, pgid, group, loners(remaining) + [p.pid for p in remaining], signal.SIGKILL)
                signals.append("KILL")
                how = "killed"
                if not self._wait_until_gone(lambda: not gone(), kill_wait):
                    left = sorted(p.pid for p in remaining)
                    raise ServerStopFailed(
                        f"{what}: processes {left} still alive {kill_wait:g}s after SIGKILL", pid=pid, pgid=pgid,
                        box=self.name, survivors=left,
                    )
        if isinstance(handle_or_pid, ServerHandle):
            self.remove(handle_or_pid.pid_path, missing_ok=True)
        return ServerStopped(pid=pid, pgid=pgid, how=how, waited_s=time.monotonic() - start, signals=tuple(signals),
                             stopped_pids=tuple(sorted(tracked)), outside_group=tuple(outside))

    #: What SGLang 0.5.23's ``health_generate`` logs when it answers 503 because its scheduler did
    #: not answer (http_server.py: ``Health check failed. Server couldn't get a response from
    #: detokenizer for last N seconds``); the 503 it answers while starting logs nothing.
    HEALTH_CHECK_FAILED = "Health check failed"

    def _health_check_failed_logged(self, log_path: str, lines: int) -> bool:
        """Whether the last ``max(lines, 200)`` lines of the server's log hold SGLang's
        :data:`HEALTH_CHECK_FAILED` line (a log that cannot be read: True, the 503 is taken as
        SGLang's verdict)."""
        try:
            return any(self.HEALTH_CHECK_FAILED in line for line in self.tail(log_path, max(lines, 200)))
        except RemoteError:
            return True

    def _signal_tree(self, pid: int, pgid: int, group: bool, singles: Sequence[int], sig: int) -> None:
        """``sig`` to process group ``pgid`` (``group``) or to ``pid`` alone, then to each pid of
        ``singles`` (processes the group signal does not reach); a process already gone is fine."""
        self.transport.kill(pgid if group else pid, sig, group=group)
        for other in sorted(set(singles) - {pid}):
            self.transport.kill(other, sig, group=False)

    @staticmethod
    def _wait_until_gone(alive: Callable[[], bool], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        delay = 0.02
        while True:
            if not alive():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def port_from_argv(argv: Sequence[str]) -> Optional[int]:
    """The value of ``--port N`` / ``--port=N`` in ``argv`` (last one wins), else ``None``."""
    port = None
    for i, arg in enumerate(argv):
        value = None
        if arg == "--port" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--port="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit():
            port = int(value)
    return port


def _pgid_of(pid: int, procs: Sequence[ProcessInfo]) -> Optional[int]:
    return next((p.pgid for p in procs if p.pid == pid), None)


def _descendants(pid: int, kids: Mapping[int, Sequence[int]]) -> set[int]:
    """Every pid below ``pid`` in the parent map ``kids`` (ppid -> child pids)."""
    out: set[int] = set()
    todo = list(kids.get(pid, ()))
    while todo:
        child = todo.pop()
        if child not in out:
            out.add(child)
            todo.extend(kids.get(child, ()))
    return out


def _tree(pid: int, pgid: Optional[int], procs: Sequence[ProcessInfo], *, also: Sequence[int] = ()) -> list[ProcessInfo]:
    """The processes of ``procs`` that are ``pid``, in process group ``pgid`` (``None``: none), in
    ``also`` (pids tracked earlier), or descendants of any of those; sorted by pid."""
    kids: dict[int, list[int]] = {}
    for p in procs:
        kids.setdefault(p.ppid, []).append(p.pid)
    roots = {p.pid for p in procs if p.pid == pid or (pgid is not None and p.pgid == pgid) or p.pid in also}
    members = set(roots)
    for root in roots:
        members |= _descendants(root, kids)
    return sorted((p for p in procs if p.pid in members), key=lambda p: p.pid)


def _matched_ancestor(proc: ProcessInfo, by_pid: Mapping[int, ProcessInfo], matched: set[int]) -> Optional[ProcessInfo]:
    """The nearest ancestor of ``proc`` whose pid is in ``matched``, else ``None``."""
    seen = {proc.pid}
    ppid = proc.ppid
    while ppid > 1 and ppid in by_pid and ppid not in seen:
        if ppid in matched:
            return by_pid[ppid]
        seen.add(ppid)
        ppid = by_pid[ppid].ppid
    return None


def _port_among(ports: Sequence[int], default: Optional[int]) -> Optional[int]:
    """The server port among the ports a process listens on: ``default`` when listed, else the
    only one, else ``None``."""
    if default is not None and default in ports:
        return default
    return ports[0] if len(ports) == 1 else None
