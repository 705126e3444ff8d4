"""Free TCP ports on loopback: the one helper every test, fixture and test helper uses."""

from __future__ import annotations

import socket

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (bound to port 0, then released).

    Never the same port twice in one test session: servers a session keeps running (the shared
    sandbox servers, the loopback sshd) and ports a test just released cannot be handed out again.
    """
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no port on 127.0.0.1 that this session has not handed out yet ({len(_HANDED_OUT)} so far)")
