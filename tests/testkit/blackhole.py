"""A TCP relay on loopback that can turn into a black hole: what a box behind a dead network link
looks like to an SSH client (the connection stays "up", nothing arrives, nothing is refused).

``Relay(upstream_port)`` listens on 127.0.0.1 (a free port) and copies bytes both ways between
each accepted connection and ``127.0.0.1:upstream_port`` (a real sshd). ``freeze()`` stops every
copy at once (bytes already in flight stay in the kernel buffers, nothing is read or written any
more) and makes new connections black holes too (accepted, never answered); ``thaw()`` resumes.
``drop()`` is the other fault: every relayed connection is cut (both ends closed) and new ones
are closed as soon as they are accepted (a box whose sshd or network dropped us); ``thaw()`` ends
either. ``close()`` ends everything. Threads are daemons; no process is started.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class Relay:
    """127.0.0.1:``port`` -> 127.0.0.1:``upstream_port``, freezable (see the module docstring)."""

    def __init__(self, upstream_port: int):
        self.upstream = ("127.0.0.1", int(upstream_port))
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = False
        self.dropping = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name=f"relay-{self.port}", daemon=True)
        self._thread.start()

    def freeze(self) -> None:
        """Stop relaying, on every connection and for new ones (a black hole)."""
        self.flowing.clear()

    def thaw(self) -> None:
        """Relay again (after :meth:`freeze` or :meth:`drop`)."""
        self.dropping = False
        self.flowing.set()

    def drop(self) -> None:
        """Cut every relayed connection now and every new one on arrival."""
        self.dropping = True
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            _cut(s)

    def _accept(self) -> None:
        while not self.closed:
            try:
                down, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.dropping:
                _cut(down)
                continue
            with self._lock:
                self._socks.append(down)
            threading.Thread(target=self._serve, args=(down,), daemon=True).start()

    def _serve(self, down: socket.socket) -> None:
        while not self.flowing.is_set() and not self.closed:  # a new connection during a freeze
            self.flowing.wait(0.1)
        if self.closed:
            return
        try:
            up = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            down.close()
            return
        with self._lock:
            self._socks.append(up)
        pair = {down: up, up: down}
        try:
            while not self.closed:
                if not self.flowing.is_set():
                    self.flowing.wait(0.1)
                    continue
                readable, _, _ = select.select([down, up], [], [], 0.1)
                for s in readable:
                    if not self.flowing.is_set():
                        break
                    data = s.recv(1 << 16)
                    if not data:
                        return
                    pair[s].sendall(data)
        except OSError:
            return
        finally:
            for s in (down, up):
                s.close()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self.closed = True
        self.flowing.set()
        self.listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            _cut(s)
        self._thread.join(timeout=2)


def _cut(s: socket.socket) -> None:
    """Shut ``s`` down both ways (wakes a thread blocked on it) and close it."""
    with contextlib.suppress(OSError):  # not connected any more: nothing to shut down
        s.shutdown(socket.SHUT_RDWR)
    s.close()
