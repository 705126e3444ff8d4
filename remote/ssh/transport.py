"""The SSH transport proper: :class:`SSHTransport`, a box's commands and files over one connection.

Commands: each is one exec channel running :func:`wrap_command`'s text in the box's login shell
(``eval`` when it is bash, else ``bash --norc -c``), in its own process group and session
(``setsid`` when sshd did not already make it one) whose id a small prologue prints first; stdout
and stderr are drained as they arrive; on time-out the remote group is killed with
``kill -KILL -- -PGID`` over a fresh channel. ``processes`` reads all of ``/proc`` with one
command (``_PROCESSES_SCRIPT``); ``kill`` and ``realpath``'s fallback are single commands.

Files: one SFTP session per connection (byte ranges with pipelined reads, exclusive create +
fsync via ``fsync@openssh.com``, ``posix-rename``, directory fsync), so file primitives cost round
trips, not commands. A read interrupted by a dropped connection is retried once on the new one.

The connection itself is opened by :mod:`remote.ssh.auth` (``_open_connection``) from the
:class:`~remote.ssh.config.SSHTarget` that :mod:`remote.ssh.config` resolves; port forwards are
:mod:`remote.ssh.forward`'s. This module depends on all three. Units: bytes, seconds.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import re
import select
import shlex
import signal as _signal
import socket
import stat as _stat
import struct
import threading
import time
from typing import Callable, Mapping, Optional, Sequence, TypeVar

import paramiko
from paramiko.sftp import CMD_EXTENDED

from ..errors import (
    RemoteError,
    RemoteFileError,
    RemoteFileNotFound,
    RemoteIsADirectory,
    RemotePermissionError,
    SSHConnectionLost,
    SSHError,
    SSHTimedOut,
)
from ..result import FileStat, ProcessInfo, Result
from ..transport import Transport, parse_proc_stat, proc_stat_threads, timed_out
from .auth import _close_channel, _Connection, _dies_soon, _open_connection, dead_reason
from .config import SSHConfigFiles, SSHTarget, _replace, config_path, load_ssh_config, resolve_target
from .forward import _PortForward

log = logging.getLogger(__package__)  # "remote.ssh": one logger for the package, as before the split

#: Seconds to keep reading after the remote group was killed on time-out.
_DRAIN_AFTER_KILL_S = 2.0
#: Seconds to wait, after a time-out, for the group id of a command whose login shell is still starting.
_HEADER_GRACE_S = 1.0
#: SSH channel window (bytes): large enough that bulk output is not throttled by window updates.
_WINDOW = 16 << 20
#: Largest SSH packet (bytes) the box may send on a command's channel: 256 KiB instead of paramiko's
#: 32 KiB default makes bulk output ~5x faster (fewer packets through paramiko's Python loop).
_MAX_PACKET = 1 << 18
#: SFTP request size (bytes) paramiko uses for reads and writes.
_SFTP_REQUEST = 32768

T = TypeVar("T")


_PROCESSES_SCRIPT = r"""
cd /proc || exit 1
for p in [0-9]*; do
  { IFS= read -r s < "$p/stat"; } 2>/dev/null || continue
  a=()
  if [ "$ewb_argv" = 1 ]; then { mapfile -d '' -t a < "$p/cmdline"; } 2>/dev/null; fi
  printf '%s\0%s\0%s\0' "$p" "$s" "${#a[@]}"
  if [ "${#a[@]}" -gt 0 ]; then printf '%s\0' "${a[@]}"; fi
done
"""

#: The fallback wrapper (``$0`` is its own text): used only when the login shell does not lead its
#: own process group (OpenSSH's sshd always makes it lead a new session, so normally never).
_WRAPPER = r"""printf '%s\n' "$$"
cd -- "$1" || exit 126
c=$2
shift 2
if [ $# -gt 0 ]; then exec env -- "$@" bash --norc -c "$c"; fi
exec bash --norc -c "$c"
"""


def wrap_command(command: str, cwd: str, env_pairs: Sequence[str] = ()) -> str:
    """The text the box's login shell runs for ``command``.

    It checks that the shell leads its own process group (sshd's session child does; otherwise it
    re-runs under ``setsid -w``), prints the group id as the first line of stdout, enters ``cwd``
    (exit 126 if impossible), then runs ``command``: with ``eval`` in the login shell itself when
    that is bash and no variables are added (no further process start: a command costs one shell
    start, as ``ssh box COMMAND`` does), else with ``exec [env -- K=V...] bash --norc -c COMMAND``
    (``--norc``: Debian's bash sources ``~/.bashrc`` in every shell sshd starts unless told not to;
    the login shell already did). Every value is ``shlex.quote``d; POSIX shell syntax only.
    """
    q = shlex.quote
    tail = " ".join(q(p) for p in (cwd, command, *env_pairs))
    prologue = (
        "read -r _ _ _ _ __ewb_pgrp _ < /proc/self/stat; "
        f'if [ "$__ewb_pgrp" != "$$" ]; then exec setsid -w bash --norc -c {q(_WRAPPER)} {q(_WRAPPER)} {tail}; fi; '
        f"unset __ewb_pgrp; printf '%s\\n' \"$$\"; cd -- {q(cwd)} || exit 126; "
    )
    if env_pairs:
        return prologue + f"exec env -- {' '.join(q(p) for p in env_pairs)} bash --norc -c {q(command)}"
    return prologue + f'if [ -n "$BASH_VERSION" ]; then eval {q(command)}; else exec bash --norc -c {q(command)}; fi'


class SSHTransport(Transport):
    """A box over SSH. Open with :meth:`open` (or ``remote.connect(spec)``); ``name`` is the spec.

    ``reconnects`` counts connections re-opened after a drop. ``trusted_new_host_key`` says which
    key was added to known_hosts when trust on first use was used (else ``None``).

    Sizes and offsets are in bytes, time-outs in seconds. Besides the errors each method names,
    any call may raise the ``SSHError`` family when the connection must be re-opened and cannot be
    (``SSHConnectFailed``, ``HostKeyChanged``, ``AuthenticationFailed``, ...), or ``SSHError``
    after :meth:`close`. File primitives raise ``SSHTimedOut`` when the box sends no SFTP reply
    within ``timeout``. A call the connection drops under raises ``SSHConnectionLost``, except a
    read (``read_range``, ``stat``, ``listdir``, ``readlink``), which is first retried once on a new
    connection.
    """

    def __init__(self, target: SSHTarget, configs: SSHConfigFiles, *, name: str, trust_unknown_hosts: bool = False,
                 allow_agent: bool = True, look_for_keys: bool = True):
        self.target = target
        self.configs = configs
        self.name = name
        self.trust_unknown_hosts = trust_unknown_hosts
        self.allow_agent = allow_agent
        self.look_for_keys = look_for_keys
        self.reconnects = 0
        self.trusted_new_host_key: Optional[str] = None
        self._conn: Optional[_Connection] = None
        self._conn_lock = threading.RLock()
        self._sftp: Optional[paramiko.SFTPClient] = None
        self._sftp_lock = threading.RLock()
        self._forwards: dict[tuple[str, int], _PortForward] = {}
        self._closed = False

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, spec: str, *, ssh_config: Optional[str] = None, trust_unknown_hosts: bool = False,
             allow_agent: bool = True, look_for_keys: bool = True,
             connect_timeout: Optional[float] = None) -> "SSHTransport":
        """Resolve ``spec`` with the ssh config (see :func:`config_path`) and connect.

        ``trust_unknown_hosts``: accept (and record in known_hosts) a host key seen for the first
        time; a changed key is refused regardless. ``allow_agent`` / ``look_for_keys``: also offer
        ssh-agent keys / ``~/.ssh/id_*`` (both off when the config says ``IdentitiesOnly yes``).
        ``connect_timeout`` (seconds) overrides the config's ``ConnectTimeout``.

        Raises ``BoxSpecError`` / ``UnknownSSHHost`` / ``SSHConfigError`` for the spec and config,
        ``SSHConnectFailed``, ``HostKeyUnknown``, ``HostKeyChanged``, ``AuthenticationFailed``.
        """
        configs = load_ssh_config(config_path(ssh_config))
        target = resolve_target(spec, configs)
        if connect_timeout is not None:
            target = _replace(target, connect_timeout=float(connect_timeout))
        transport = cls(target, configs, name=spec.strip(), trust_unknown_hosts=trust_unknown_hosts,
                        allow_agent=allow_agent, look_for_keys=look_for_keys)
        transport._connection()
        return transport

    def _connection(self) -> _Connection:
        """The live connection, opening (or re-opening after a drop) it first."""
        with self._conn_lock:
            if self._closed:
                raise SSHError("the box was closed", where=self.target.where, box=self.name)
            if self._conn is not None and self._conn.alive():
                return self._conn
            if self._conn is not None:
                why = self._conn.dead_reason
                log.warning("[%s] SSH connection to %s %s; reconnecting", self.name, self.target.where,
                            f"closed ({why})" if why else "dropped")
                self._discard_connection()
                self.reconnects += 1
            conn = _open_connection(self.target, self.configs, trust=self.trust_unknown_hosts,
                                    allow_agent=self.allow_agent, look_for_keys=self.look_for_keys, box=self.name)
            self._conn = conn
            if conn.trusted:
                self.trusted_new_host_key = conn.trusted
            return conn

    def _discard_connection(self) -> None:
        with self._sftp_lock:
            self._sftp = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def client(self) -> paramiko.SSHClient:
        """The ``paramiko.SSHClient`` of the current connection (opened if needed)."""
        return self._connection().client

    def close(self) -> None:
        """Close the port forwards, SFTP and the connection (and its jump hosts). Idempotent."""
        with self._conn_lock:
            self._closed = True
            for fwd in list(self._forwards.values()):
                fwd.close()
            self._forwards.clear()
            with self._sftp_lock:
                if self._sftp is not None:
                    _close_channel(self._sftp.get_channel())
                    self._sftp = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def tcp_bytes(self) -> Optional[tuple[int, int]]:
        """``(bytes_sent_acked, bytes_received)`` on the TCP connection to the box so far, from the
        kernel (Linux ``TCP_INFO``: ``tcpi_bytes_acked``, ``tcpi_bytes_received``), SSH framing
        included. ``None`` behind a jump host (no direct socket) or when the kernel lacks them."""
        conn = self._connection()
        if conn.sock is None or not hasattr(socket, "TCP_INFO"):
            return None
        info = conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        if len(info) < 136:
            return None
        return struct.unpack_from("<QQ", info, 120)

    def local_address(self) -> Optional[tuple[str, int]]:
        """This end's ``(ip, port)`` of the TCP connection to the box (``None`` behind a jump host)."""
        conn = self._connection()
        return None if conn.sock is None else conn.sock.getsockname()[:2]

    # -- commands ---------------------------------------------------------------------------------

    def run(self, command: str, *, timeout: float, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            stdin: Optional[bytes] = None) -> Result:
        """Run shell text ``command`` on the box (see :func:`wrap_command`) in ``cwd`` (default: the
        login directory) with ``env`` added, feeding it ``stdin``; wait at most ``timeout`` seconds.

        Returns the ``Result`` whatever the exit status (``exit_code`` ``None`` when a signal ended
        it). Raises ``RemoteFileNotFound`` when ``cwd`` is missing or not a directory, ``ValueError``
        for an unusable variable name in ``env``, ``CommandTimedOut`` (output so far attached) after
        killing the command's process group, ``SSHConnectionLost`` when the connection drops while
        it runs.
        """
        if cwd is not None:
            try:
                st = self.stat(cwd, timeout=min(timeout, 30))
            except RemoteFileNotFound:
                raise RemoteFileNotFound("working directory for the command does not exist", path=cwd,
                                         box=self.name) from None
            if not st.is_dir:
                raise RemoteFileNotFound("working directory for the command is not a directory", path=cwd,
                                         box=self.name)
        pairs = []
        for k, v in (env or {}).items():
            k = str(k)
            if not k or "=" in k or "\0" in k:
                raise ValueError(f"environment variable name {k!r} is not usable")
            pairs.append(f"{k}={v}")
        code, out, err, duration = self._exec(wrap_command(command, cwd or ".", pairs), timeout=timeout,
                                              stdin=stdin, display=command, group=True)
        return Result(command=command, stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                      exit_code=code, duration_s=duration, box=self.name)

    def _exec(self, remote: str, *, timeout: float, stdin: Optional[bytes], display: str,
              group: bool) -> tuple[Optional[int], bytes, bytes, float]:
        """Run ``remote`` (text for the login shell) on a new exec channel; drain stdout and stderr
        as they arrive; feed ``stdin``. With ``group`` the first stdout line is the process group id
        printed by the wrapper (removed from the output) and a time-out kills that group.

        Returns ``(exit_code, stdout, stderr, duration_s)``. Raises ``CommandTimedOut`` and
        ``SSHConnectionLost``.
        """
        start = time.monotonic()
        deadline = start + timeout
        chan = self._open_exec(remote, deadline, display)
        out = bytearray()
        err = bytearray()
        pgid: Optional[int] = None
        header = not group
        pending = memoryview(stdin) if stdin else None
        if pending is None:
            chan.shutdown_write()
        transport = chan.get_transport()

        def read_available() -> bool:
            nonlocal pgid, header
            got = False
            while chan.recv_ready():
                out.extend(chan.recv(1 << 20))
                got = True
            while chan.recv_stderr_ready():
                err.extend(chan.recv_stderr(1 << 20))
                got = True
            if not header:
                nl = out.find(b"\n")
                if nl >= 0:
                    text = out[:nl].decode("ascii", "replace").strip()
                    pgid = int(text) if text.isdigit() else None
                    del out[: nl + 1]
                    header = True
            return got

        try:
            while True:
                progressed = read_available()
                if pending is not None and chan.send_ready():
                    sent = chan.send(pending[: 1 << 16])
                    pending = pending[sent:]
                    if not pending:
                        pending = None
                        chan.shutdown_write()
                    progressed = True
                if (chan.closed or chan.eof_received) and chan.status_event.is_set() \
                        and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if not transport.is_active():
                    raise SSHConnectionLost(f"command {display!r}", where=self.target.where, box=self.name,
                                            detail=_lost_detail(transport, f"after {time.monotonic() - start:.1f}s"))
                now = time.monotonic()
                if now >= deadline:
                    killed, detail = self._end_timed_out(chan, read_available, group=group,
                                                         pgid=lambda: pgid, header=lambda: header)
                    raise timed_out(display, bytes(out), bytes(err), -_signal.SIGKILL if killed else None,
                                    time.monotonic() - start, timeout, self.name, killed=killed, detail=detail)
                if not progressed:
                    wait = min(0.05, deadline - now)
                    if chan.eof_received or chan.closed:
                        chan.status_event.wait(wait)
                    else:
                        select.select([chan], [], [], wait)
        except (KeyboardInterrupt, SystemExit):
            if pgid:
                try:
                    self._kill_group(pgid)
                except RemoteError as exc:
                    log.warning("[%s] could not kill process group %s after an interrupt: %s", self.name, pgid, exc)
            _close_channel(chan)
            raise
        code: Optional[int] = chan.exit_status if chan.status_event.is_set() else None
        _close_channel(chan)
        if code == -1 and _dies_soon(chan.get_transport(), 0.5):
            raise SSHConnectionLost(f"command {display!r}", where=self.target.where, box=self.name,
                                    detail=_lost_detail(transport, f"after {time.monotonic() - start:.1f}s, before "
                                                                   "it reported an exit status"))
        if code == -1:
            code = None  # ended by a signal: sshd sends exit-signal, which paramiko does not parse
        return code, bytes(out), bytes(err), time.monotonic() - start

    def _end_timed_out(self, chan: paramiko.Channel, read_available: Callable[[], bool], *, group: bool,
                       pgid: Callable[[], Optional[int]], header: Callable[[], bool]) -> tuple[bool, str]:
        """A command's time-out passed: kill its process group and collect what it printed before
        dying. The group id is the first line the prologue prints; if it has not arrived yet (the
        login shell is still starting, e.g. in a slow ``~/.bashrc``) it is waited for a moment;
        failing that the channel is closed: sshd then closes the shell's stdout, and the prologue's
        first ``printf`` kills the shell (SIGPIPE) before the command starts. Returns ``(killed, why
        not)``; closes the channel."""
        grace_end = time.monotonic() + _HEADER_GRACE_S
        while group and not header() and time.monotonic() < grace_end and not (chan.closed or chan.eof_received):
            if not read_available():
                time.sleep(0.01)
        killed, detail = False, ""
        if not group:
            detail = "an internal command without a process group of its own"
        elif pgid() is None:
            detail = (f"the login shell had not started the command within {_HEADER_GRACE_S:g}s more (slow "
                      "start-up files?); the channel is closed, so the shell dies of SIGPIPE on its first output, "
                      "before it starts the command")
        else:
            try:
                killed = self._kill_group(pgid())
            except RemoteError as exc:
                detail = f"kill -KILL -- -{pgid()} failed: {exc}"
            else:
                if not killed:
                    detail = f"kill -KILL -- -{pgid()} did not succeed"
        end = time.monotonic() + (_DRAIN_AFTER_KILL_S if killed else 0)  # the dying group's last output
        while time.monotonic() < end and not (chan.closed or chan.eof_received):
            if not read_available():
                time.sleep(0.01)
        read_available()
        _close_channel(chan)
        return killed, detail

    def _open_channel(self, what: str, timeout: float, opener: Callable[[paramiko.Transport, float], T]) -> T:
        """``opener(transport, timeout)`` on the live connection. Opening a channel changes nothing on
        the box, so when it fails because the connection just died (the transport thread may take a
        moment to notice a dead socket) the connection is re-opened and it is tried once more.
        Raises ``SSHError`` when the server refuses, ``SSHConnectionLost`` when the retry fails too."""
        for attempt in (0, 1):
            conn = self._connection()
            try:
                return opener(conn.transport, timeout)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                failure = exc
            if not _dies_soon(conn):
                raise SSHError(f"cannot open a channel for {what} within {timeout:g}s: {failure or 'no answer'}",
                               where=self.target.where, box=self.name) from None
        raise SSHConnectionLost(what, where=self.target.where, box=self.name,
                                detail=_lost_detail(conn.transport,
                                                    f"could not open a channel after reconnecting: {failure}"))

    def _open_exec(self, remote: str, deadline: float, display: str) -> paramiko.Channel:
        """A new session channel running ``remote`` (re-connecting first if the connection died)."""
        remaining = max(0.1, deadline - time.monotonic())
        chan = self._open_channel(
            f"command {display!r}", remaining,
            lambda t, to: t.open_session(window_size=_WINDOW, max_packet_size=_MAX_PACKET, timeout=to))
        # exec_command waits for the server's reply without a time-out of its own: bound it.
        watchdog = threading.Timer(remaining, functools.partial(_close_channel, chan))
        watchdog.daemon = True
        watchdog.start()
        try:
            chan.exec_command(remote)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            _close_channel(chan)
            if not watchdog.is_alive():  # it fired: no answer to the exec request in time
                raise timed_out(display, b"", b"", None, remaining, remaining, self.name) from None
            raise SSHConnectionLost(f"command {display!r}", where=self.target.where, box=self.name,
                                    detail=_lost_detail(chan.get_transport(), f"exec request failed: {exc}")) from None
        finally:
            watchdog.cancel()
        return chan

    def _kill_group(self, pgid: int) -> bool:
        """SIGKILL process group ``pgid`` on the box over a fresh channel. True when ``kill`` ran and
        the group was there (or had just gone: ``No such process`` counts as gone)."""
        code, _out, err, _ = self._exec(f"kill -KILL -- -{int(pgid)}", timeout=10, stdin=None,
                                        display=f"kill -KILL -- -{pgid}", group=False)
        return code == 0 or b"No such process" in err

    # -- SFTP -------------------------------------------------------------------------------------

    def _get_sftp(self, timeout: float) -> paramiko.SFTPClient:
        with self._sftp_lock:
            if self._sftp is not None and not self._sftp.get_channel().closed and self._conn is not None \
                    and self._conn.alive():
                return self._sftp
            self._sftp = None
            chan = self._open_channel("SFTP", timeout,
                                      lambda t, to: t.open_session(window_size=_WINDOW, timeout=to))
            conn = self._conn
            watchdog = threading.Timer(timeout, functools.partial(_close_channel, chan))
            watchdog.daemon = True
            watchdog.start()
            try:
                chan.invoke_subsystem("sftp")
                chan.settimeout(timeout)
                sftp = paramiko.SFTPClient(chan)
                if conn.home is None:
                    conn.home = sftp.normalize(".")  # SFTP sessions start in the login directory
            except (paramiko.SSHException, EOFError, OSError) as exc:
                _close_channel(chan)
                if _dies_soon(conn):
                    raise SSHConnectionLost("starting SFTP", where=self.target.where, box=self.name,
                                            detail=_lost_detail(conn.transport, str(exc))) from None
                raise SSHError(f"cannot start the SFTP subsystem (is it enabled in sshd_config?): {exc}",
                               where=self.target.where, box=self.name) from None
            finally:
                watchdog.cancel()
            self._sftp = sftp
            return sftp

    def _file_op(self, operation: str, path: str, fn: Callable[[paramiko.SFTPClient], T], *, timeout: float,
                 idempotent: bool) -> T:
        """Run ``fn(sftp)`` under the SFTP lock with ``timeout`` on every reply; translate errors.

        File errors become ``RemoteFileNotFound`` / ``RemotePermissionError`` / ``RemoteFileError``;
        no reply in time ``SSHTimedOut``; a dropped connection a retry on a new one when
        ``idempotent`` (once), else ``SSHConnectionLost``.
        """
        for attempt in (0, 1):
            with self._sftp_lock:
                sftp = self._get_sftp(timeout)
                chan = sftp.get_channel()
                chan.settimeout(timeout)
                try:
                    return fn(sftp)
                except (socket.timeout, TimeoutError):
                    self._drop_sftp()
                    raise SSHTimedOut(operation, path=path, timeout=timeout, where=self.target.where,
                                      box=self.name) from None
                except OSError as exc:
                    if exc.errno is not None:
                        raise self._file_error(exc, path, operation) from None
                    conn = self._conn
                    if str(exc) != "Socket is closed" and not chan.closed and conn is not None \
                            and not _dies_soon(conn, 0.0):
                        raise RemoteFileError(f"{operation} failed ({exc})", path=path, box=self.name) from None
                    failure: BaseException = exc
                except (EOFError, paramiko.SSHException) as exc:
                    failure = exc
                self._drop_sftp()
                if idempotent and attempt == 0:
                    log.warning("[%s] %s of %s interrupted (%s); retrying on a new connection", self.name, operation,
                                path, failure)
                    continue
                raise SSHConnectionLost(f"{operation} of {path}", where=self.target.where, box=self.name,
                                        detail=_lost_detail(chan.get_transport(),
                                                            f"{type(failure).__name__}: {failure}")) from None
        raise AssertionError("unreachable")

    def _drop_sftp(self) -> None:
        with self._sftp_lock:
            if self._sftp is not None:
                _close_channel(self._sftp.get_channel())
                self._sftp = None

    def _file_error(self, exc: OSError, path: str, doing: str) -> RemoteFileError:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return RemoteFileNotFound(f"{doing}: no such file or directory", path=path, box=self.name)
        if exc.errno in (errno.EACCES, errno.EPERM):
            return RemotePermissionError(f"{doing}: permission denied", path=path, box=self.name)
        err = RemoteFileError(f"{doing} failed ({exc.strerror or exc})", path=path, box=self.name)
        err.errno = exc.errno  # type: ignore[attr-defined]
        return err

    def _is_dir(self, sftp: paramiko.SFTPClient, path: str) -> bool:
        try:
            return _stat.S_ISDIR(sftp.stat(path).st_mode or 0)
        except OSError:
            return False

    # -- file primitives --------------------------------------------------------------------------

    def read_range(self, path: str, offset: int = 0, length: Optional[int] = None, *, timeout: float = 30) -> bytes:
        """Up to ``length`` bytes of ``path`` from byte ``offset`` (``None``: to EOF), short at EOF,
        over SFTP (reads beyond 32 KiB pipelined). Raises ``RemoteFileNotFound``,
        ``RemotePermissionError``, ``RemoteIsADirectory``, ``RemoteFileError``."""
        def op(sftp: paramiko.SFTPClient) -> bytes:
            try:
                f = sftp.open(path, "rb", bufsize=0)
            except OSError as exc:
                if exc.errno is None and self._is_dir(sftp, path):
                    raise RemoteIsADirectory("read: is a directory", path=path, box=self.name) from None
                raise
            with f:
                try:
                    return _read_file(f, offset, length)
                except OSError as exc:
                    if exc.errno is None and self._is_dir(sftp, path):
                        raise RemoteIsADirectory("read: is a directory", path=path, box=self.name) from None
                    raise

        return self._file_op("read", path, op, timeout=timeout, idempotent=True)

    def stat(self, path: str, *, timeout: float = 30) -> FileStat:
        """``FileStat`` of ``path``, symlinks followed: ``size`` in bytes, ``mode`` the permission
        bits, ``mtime`` in seconds since the epoch. Raises ``RemoteFileNotFound``,
        ``RemotePermissionError``, ``RemoteFileError``."""
        attrs = self._file_op("stat", path, lambda sftp: sftp.stat(path), timeout=timeout, idempotent=True)
        mode = attrs.st_mode or 0
        return FileStat(path=path, size=int(attrs.st_size or 0), mode=_stat.S_IMODE(mode),
                        mtime=float(attrs.st_mtime or 0), is_file=_stat.S_ISREG(mode), is_dir=_stat.S_ISDIR(mode))

    def listdir(self, path: str, *, timeout: float = 30) -> list[str]:
        """Names in directory ``path`` (no ``.``/``..``), unsorted. Raises ``RemoteFileNotFound``,
        ``RemotePermissionError``, ``RemoteFileError``."""
        return self._file_op("list directory", path, lambda sftp: sftp.listdir(path), timeout=timeout, idempotent=True)

    def readlink(self, path: str, *, timeout: float = 30) -> str:
        """Target of the symlink ``path``, as stored. Raises ``RemoteFileNotFound``, and
        ``RemoteFileError`` when ``path`` is not a symlink."""
        target = self._file_op("readlink", path, lambda sftp: sftp.readlink(path), timeout=timeout, idempotent=True)
        if target is None:
            raise RemoteFileError("readlink: not a symbolic link", path=path, box=self.name)
        return target

    def write_new(self, path: str, data: bytes, *, mode: int, timeout: float = 30) -> None:
        """Create ``path`` exclusively with permission bits ``mode``, write ``data`` (pipelined) and
        fsync it (``fsync@openssh.com``, else ``sync FILE`` on the box). Raises ``RemoteFileError``
        with ``errno`` ``EEXIST`` when ``path`` exists, ``RemoteFileNotFound`` (missing directory),
        ``RemotePermissionError``; not retried after a drop (``SSHConnectionLost``)."""
        def op(sftp: paramiko.SFTPClient) -> None:
            try:
                f = sftp.open(path, "wbx", bufsize=0)
            except OSError as exc:
                if exc.errno is None:
                    try:
                        sftp.stat(path)
                    except OSError:
                        raise exc from None
                    err = RemoteFileError("create: file exists", path=path, box=self.name)
                    err.errno = errno.EEXIST  # type: ignore[attr-defined]
                    raise err from None
                raise
            with f:
                f.chmod(mode)
                f.set_pipelined(True)
                view = memoryview(data)
                for i in range(0, len(view), _SFTP_REQUEST * 32):
                    f.write(view[i : i + _SFTP_REQUEST * 32])
                f.flush()
                self._fsync(sftp, f, path, timeout)

        self._file_op("create", path, op, timeout=timeout, idempotent=False)

    def _fsync(self, sftp: paramiko.SFTPClient, f: paramiko.SFTPFile, path: str, timeout: float) -> None:
        """fsync through OpenSSH's ``fsync@openssh.com`` SFTP extension, else ``sync FILE``."""
        try:
            sftp._request(CMD_EXTENDED, "fsync@openssh.com", f.handle)
            return
        except OSError as exc:
            if exc.errno is not None:
                raise
            log.info("[%s] fsync@openssh.com not available (%s); using sync", self.name, exc)
        code, _o, err, _d = self._exec(f"sync -- {shlex.quote(path)}", timeout=timeout, stdin=None,
                                       display=f"sync {path}", group=False)
        if code != 0:
            raise RemoteFileError(f"fsync failed ({err.decode('utf-8', 'replace').strip()})", path=path, box=self.name)

    def rename(self, src: str, dst: str, *, timeout: float = 30) -> None:
        """Atomically replace ``dst`` with ``src`` (``posix-rename@openssh.com``), then fsync
        ``dst``'s directory. Raises ``RemoteFileNotFound``, ``RemotePermissionError``,
        ``RemoteIsADirectory`` (``dst`` is a directory), ``RemoteFileError``."""
        def op(sftp: paramiko.SFTPClient) -> None:
            try:
                sftp.posix_rename(src, dst)
            except OSError as exc:
                if exc.errno is None and self._is_dir(sftp, dst):
                    raise RemoteIsADirectory(f"rename from {src}: destination is a directory", path=dst,
                                             box=self.name) from None
                raise

        self._file_op(f"rename from {src}", dst, op, timeout=timeout, idempotent=False)
        self._fsync_dir(os.path.dirname(dst) or ".", timeout=timeout)

    def _fsync_dir(self, directory: str, *, timeout: float) -> None:
        """fsync a directory (so a rename in it is durable): opened read-only over SFTP (OpenSSH's
        sftp-server opens directories like files) and fsynced with ``fsync@openssh.com``; else
        ``sync DIR`` on the box."""

        def op(sftp: paramiko.SFTPClient) -> bool:
            try:
                with sftp.open(directory, "rb", bufsize=0) as d:
                    sftp._request(CMD_EXTENDED, "fsync@openssh.com", d.handle)
            except OSError as exc:
                if exc.errno is not None:
                    raise
                log.info("[%s] fsync of directory %s over SFTP failed (%s); using sync", self.name, directory, exc)
                return False
            return True

        if self._file_op("fsync directory", directory, op, timeout=timeout, idempotent=True):
            return
        code, _o, err, _d = self._exec(f"sync -- {shlex.quote(directory)}", timeout=timeout, stdin=None,
                                       display=f"sync {directory}", group=False)
        if code != 0:
            raise RemoteFileError(f"fsync of the directory failed ({err.decode('utf-8', 'replace').strip()})",
                                  path=directory, box=self.name)

    def remove(self, path: str, *, timeout: float = 30) -> None:
        """Delete the file ``path``. Raises ``RemoteFileNotFound``, ``RemotePermissionError``,
        ``RemoteIsADirectory``, ``RemoteFileError``."""
        def op(sftp: paramiko.SFTPClient) -> None:
            try:
                sftp.remove(path)
            except OSError as exc:
                if exc.errno is None and self._is_dir(sftp, path):
                    raise RemoteIsADirectory("remove: is a directory", path=path, box=self.name) from None
                raise

        self._file_op("remove", path, op, timeout=timeout, idempotent=False)

    def makedirs(self, path: str, *, mode: int = 0o755, timeout: float = 30) -> None:
        """Create directory ``path`` and its missing parents with permission bits ``mode`` (before
        the box's umask); no error when it exists or appears meanwhile. Raises ``RemoteFileError``
        when a component is not a directory, ``RemotePermissionError``."""
        def op(sftp: paramiko.SFTPClient) -> None:
            missing = []
            current = path.rstrip("/") or "/"
            while True:
                try:
                    attrs = sftp.stat(current)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        raise
                    missing.append(current)
                    parent = os.path.dirname(current)
                    if parent in (current, ""):
                        break
                    current = parent
                    continue
                if not _stat.S_ISDIR(attrs.st_mode or 0):
                    raise RemoteFileError("create directory: a path component is not a directory", path=current,
                                          box=self.name)
                break
            for d in reversed(missing):
                try:
                    sftp.mkdir(d, mode)
                except OSError as exc:
                    if exc.errno is None and self._is_dir(sftp, d):
                        continue  # created meanwhile by someone else: fine
                    raise

        self._file_op("create directory", path, op, timeout=timeout, idempotent=False)

    def expanduser(self, path: str) -> str:
        """``path`` with a leading ``~`` (the login directory SFTP starts in) or ``~user`` (asked of
        the box's shell) expanded; returned unchanged when it has none or the user is unknown."""
        if not path.startswith("~"):
            return path
        head, sep, rest = path[1:].partition("/")
        if head == "":
            conn = self._connection()
            if conn.home is None:
                self._get_sftp(30)
            home = conn.home or "/"
        else:
            if not re.fullmatch(r"[A-Za-z0-9._][A-Za-z0-9._-]*", head):
                return path
            code, out, _e, _d = self._exec(f"printf %s ~{head}", timeout=30, stdin=None, display=f"~{head}",
                                           group=False)
            home = out.decode("utf-8", "replace")
            if code != 0 or home.startswith("~"):
                return path
        base = home.rstrip("/")
        return (base + "/" + rest) if sep else (base or "/")

    # -- faster versions of the defaults -----------------------------------------------------------

    def sha256(self, path: str, *, timeout: float = 60) -> str:
        """Hex sha256 (64 characters) of the file ``path``, computed on the box by ``sha256sum``
        (nothing but the digest crosses the connection). Raises ``RemoteFileNotFound``,
        ``RemotePermissionError``, ``RemoteIsADirectory``, ``RemoteFileError``, ``CommandTimedOut``."""
        res = self.run(f"LC_ALL=C sha256sum -b -- {shlex.quote(path)}", timeout=timeout)
        if res.exit_code == 0:
            m = re.match(r"^\\?([0-9a-f]{64}) ", res.stdout)
            if m:
                return m.group(1)
        msg = res.stderr.strip()
        if "No such file" in msg or "Not a directory" in msg:
            raise RemoteFileNotFound("read for sha256: no such file or directory", path=path, box=self.name)
        if "Permission denied" in msg:
            raise RemotePermissionError("read for sha256: permission denied", path=path, box=self.name)
        if "Is a directory" in msg:
            raise RemoteIsADirectory("read for sha256: is a directory", path=path, box=self.name)
        raise RemoteFileError(f"sha256sum failed (exit {res.exit_code}: {msg or res.stdout.strip()})", path=path,
                              box=self.name)

    def processes(self, *, argv: bool = True, timeout: float = 30) -> list[ProcessInfo]:
        """Every process on the box, read from ``/proc`` by one command (see ``_PROCESSES_SCRIPT``)."""
        return self._read_processes(argv=argv, timeout=timeout)

    # ``process(pid)`` stays the default: two SFTP reads of /proc/PID (no command, ~1 ms).

    def _read_processes(self, *, argv: bool, timeout: float) -> list[ProcessInfo]:
        """Every process from ``/proc`` in one command: pid, stat line and argv, NUL-separated with
        an argument count (argv may hold any byte but NUL)."""
        res = self.run(f"ewb_argv={1 if argv else 0}\n" + _PROCESSES_SCRIPT, timeout=timeout)
        if res.exit_code != 0:
            raise RemoteFileError(f"cannot list processes: {res.stderr.strip()}", path="/proc", box=self.name)
        fields = res.stdout.split("\0")
        out = []
        i = 0
        while i + 2 < len(fields):
            pid_text, stat_text, count_text = fields[i], fields[i + 1], fields[i + 2]
            count = int(count_text) if count_text.isdigit() else 0
            args = tuple(fields[i + 3 : i + 3 + count])
            i += 3 + count
            parsed = parse_proc_stat(stat_text)
            if parsed is None or not pid_text.isdigit():
                continue
            state, ppid, pgid = parsed
            out.append(ProcessInfo(pid=int(pid_text), ppid=ppid, pgid=pgid, state=state, argv=args,
                                   threads=proc_stat_threads(stat_text)))
        return out

    def kill(self, pid: int, sig: int, *, group: bool = False, timeout: float = 10) -> bool:
        """Send signal number ``sig`` to ``pid`` (to process group ``pid`` when ``group``) with the
        box's ``kill``. True when it was sent; False when there is no such process or it may not be
        signalled. Raises ``ValueError`` for an unknown signal number, ``CommandTimedOut``."""
        target = f"-{int(pid)}" if group else str(int(pid))
        name = _signal.Signals(sig).name.removeprefix("SIG")
        code, _o, _e, _d = self._exec(f"kill -s {name} -- {target}", timeout=timeout, stdin=None,
                                      display=f"kill -s {name} -- {target}", group=False)
        return code == 0

    def realpath(self, path: str, *, timeout: float = 10) -> str:
        """``path`` with every symlink resolved: SFTP ``realpath`` for an existing path, else
        ``readlink -f`` on the box (which allows a missing last component)."""
        try:
            return self._file_op("realpath", path, lambda sftp: sftp.normalize(path), timeout=timeout, idempotent=True)
        except RemoteFileNotFound:
            code, out, _e, _d = self._exec(f"readlink -f -- {shlex.quote(path)}", timeout=timeout, stdin=None,
                                           display=f"readlink -f {path}", group=False)
        text = out.decode("utf-8", "replace")
        if code != 0 or not text.strip():
            raise RemoteFileNotFound("cannot resolve path", path=path, box=self.name)
        return text.rstrip("\n")

    # -- port forwards ----------------------------------------------------------------------------

    def forward(self, host: str, port: int, *, timeout: float = 10) -> tuple[str, int]:
        """``("127.0.0.1", local_port)``: a listening socket on this machine whose connections are
        bridged to the box's ``host:port`` through this SSH connection (``direct-tcpip``). Opened on
        first use for that ``(host, port)``, kept until ``close()``. ``timeout`` (seconds) bounds
        opening each forwarded connection's channel (the latest value given for that forward
        applies); re-opening a dropped connection has its own ``ConnectTimeout``, and a box that
        stops answering ends every forwarded connection after ``ServerAliveInterval`` x
        ``ServerAliveCountMax``. Raises ``SSHError`` after :meth:`close`."""
        key = (host, int(port))
        with self._conn_lock:
            if self._closed:
                raise SSHError("the box was closed", where=self.target.where, box=self.name)
            fwd = self._forwards.get(key)
            if fwd is None or fwd.closed:
                self._connection()
                fwd = _PortForward(self._connection, host, int(port), timeout=float(timeout))
                self._forwards[key] = fwd
            else:
                fwd.timeout = float(timeout)
            return fwd.local_address


def _lost_detail(transport: Optional[paramiko.Transport], detail: str) -> str:
    """``detail``, preceded by why the dead-peer detection closed ``transport`` when it did."""
    why = dead_reason(transport)
    return f"{why}; {detail}" if why else detail


def _read_file(f: paramiko.SFTPFile, offset: int, length: Optional[int]) -> bytes:
    """``length`` bytes from ``offset`` of an open unbuffered SFTP file (``None``: to EOF), short at
    EOF. Reads beyond one request are pipelined up to the size the server reports; the rest (files
    whose size is not known in advance, such as ``/proc`` files) is read request by request."""
    f.seek(offset)
    if length is not None and length <= _SFTP_REQUEST:
        return f.read(length) if length else b""
    size = f.stat().st_size or 0
    end = size if length is None else min(offset + length, size)
    parts: list[bytes] = []
    got = 0
    if end - offset > _SFTP_REQUEST:
        for block in f.readv([(offset, end - offset)]):
            parts.append(block)
            got += len(block)
    f.seek(offset + got)
    while length is None or got < length:
        want = _SFTP_REQUEST if length is None else min(_SFTP_REQUEST, length - got)
        block = f.read(want)
        if not block:
            break
        parts.append(block)
        got += len(block)
    return b"".join(parts)
