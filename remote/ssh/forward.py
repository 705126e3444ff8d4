"""Local port forwards through the SSH connection: what ``SSHTransport.forward`` opens.

:class:`_PortForward` listens on ``127.0.0.1`` (an ephemeral port) and bridges every accepted TCP
connection to a ``direct-tcpip`` channel to the box's ``host:port`` (:func:`_open_direct`), one
daemon thread per connection plus one accepting. ``SSHTransport.forward`` keeps one forward per
``(host, port)`` and closes them with the box. While a server on the box is still starting, the
box refuses the forwarded connections: the client sees its connection closed, the refusal is
logged at debug level, and :class:`_RefusedForwardToDebug` (installed on paramiko's transport
logger by :mod:`remote.ssh` when it is imported) demotes paramiko's own ERROR record of it.

A forward does not hold the transport, only a callable returning its live connection (re-opened
after a drop), so this module depends on :mod:`remote.ssh.auth` and not on the transport.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
from typing import Callable

import paramiko

from ..errors import RemoteError
from .auth import _close_channel, _Connection, _dies_soon, dead_reason

log = logging.getLogger(__package__)  # "remote.ssh": one logger for the package, as before the split


class _RefusedForwardToDebug(logging.Filter):
    """paramiko logs ERROR "Secsh channel N open FAILED: ...: Connect failed" when the box refuses a
    forwarded connection, which is expected while a server starts (``wait_healthy`` polls through
    the forward) and is handled (and logged at debug) by the port forward: demote those records to
    DEBUG so a notebook does not fill with them. Every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and "open FAILED" in str(record.msg) and "Connect failed" in str(record.msg):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _open_direct(connection: Callable[[], _Connection], host: str, port: int,
                 origin: tuple[str, int], timeout: float) -> paramiko.Channel:
    """A ``direct-tcpip`` channel to the box's ``host:port`` (``origin``: the ``(ip, port)`` of the
    local client it carries) on ``connection()``, the live connection, opened within ``timeout``
    seconds. When opening it fails because
    the connection just died, it is tried once more on the re-opened one. Raises
    ``paramiko.ChannelException`` when the box refuses (nothing listens there), the
    ``paramiko.SSHException`` / ``EOFError`` / ``OSError`` when opening fails on a connection that
    stays up, ``SSHError`` (or its family) when the connection cannot be re-opened."""
    conn = connection()
    try:
        return conn.transport.open_channel("direct-tcpip", (host, port), origin, timeout=timeout)
    except paramiko.ChannelException:
        raise
    except (paramiko.SSHException, EOFError, OSError):
        if not _dies_soon(conn):
            raise
    return connection().transport.open_channel("direct-tcpip", (host, port), origin, timeout=timeout)


class _PortForward:
    """A local listening socket (``127.0.0.1``, an ephemeral port) whose accepted connections are
    each bridged to a ``direct-tcpip`` channel to the box's ``remote_host:remote_port`` on
    ``connection()`` (the transport's live connection). Threads are daemons; ``close()`` stops
    accepting and closes every bridge. ``local_address`` is ``("127.0.0.1", port)``."""

    def __init__(self, connection: Callable[[], _Connection], remote_host: str, remote_port: int, *,
                 timeout: float):
        self.connection = connection
        self.timeout = timeout
        self.remote = (remote_host, remote_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.5)
        self.local_address: tuple[str, int] = ("127.0.0.1", self.listener.getsockname()[1])
        self.closed = False
        self._lock = threading.Lock()
        self._bridges: set[tuple[socket.socket, paramiko.Channel]] = set()
        self._thread = threading.Thread(target=self._accept_loop, name=f"ewb-forward-{self.local_address[1]}",
                                        daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                conn, origin = self.listener.accept()
            except socket.timeout:
                continue
            except OSError as exc:
                if not self.closed:
                    log.warning("port forward %s -> box %s stopped accepting: %s", self.local_address, self.remote, exc)
                return
            threading.Thread(target=self._bridge, args=(conn, origin), daemon=True,
                             name=f"ewb-forward-{self.local_address[1]}-conn").start()

    def _bridge(self, conn: socket.socket, origin: tuple[str, int]) -> None:
        try:
            chan = _open_direct(self.connection, self.remote[0], self.remote[1], origin[:2], self.timeout)
        except paramiko.ChannelException as exc:
            # The box refused (nothing listens there yet): the client sees the connection closed.
            log.debug("port forward to box %s:%s refused: %s", *self.remote, exc)
            conn.close()
            return
        except (RemoteError, paramiko.SSHException, EOFError, OSError) as exc:
            log.warning("port forward to box %s:%s failed: %s", *self.remote, exc)
            conn.close()
            return
        pair = (conn, chan)
        with self._lock:
            if self.closed:
                _close_channel(chan)
                conn.close()
                return
            self._bridges.add(pair)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport = chan.get_transport()
            while not self.closed:
                readable, _, _ = select.select([conn, chan], [], [], 1.0)
                if not transport.is_active():
                    why = dead_reason(transport)
                    if why:
                        log.warning("port forward connection to box %s:%s closed: %s", *self.remote, why)
                    break
                if conn in readable:
                    data = conn.recv(1 << 16)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in readable:
                    data = chan.recv(1 << 16)
                    if not data:
                        # The channel's end can be seen before the transport is marked inactive;
                        # the dead-peer detection records its reason before it closes the
                        # transport, so the reason is said either way.
                        why = dead_reason(transport)
                        if why:
                            log.warning("port forward connection to box %s:%s closed: %s", *self.remote, why)
                        break
                    conn.sendall(data)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if not self.closed:
                log.debug("port forward connection to box %s:%s ended: %s", *self.remote, exc)
        finally:
            with self._lock:
                self._bridges.discard(pair)
            _close_channel(chan)
            conn.close()

    def close(self) -> None:
        """Stop accepting and close every bridged connection."""
        with self._lock:
            self.closed = True
            bridges = list(self._bridges)
            self._bridges.clear()
        self.listener.close()
        for conn, chan in bridges:
            _close_channel(chan)
            conn.close()
        self._thread.join(timeout=2)
