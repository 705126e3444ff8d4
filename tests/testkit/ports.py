"""Free TCP ports on loopback: the one helper every test, fixture and test helper uses.

Each pytest process draws from a block of its own, so parallel workers (pytest-xdist) never hand
out the same port: the only process of a serial run takes 15000-15999, worker ``gwN`` takes
``16000 + 1000 * N`` onwards (below Linux's ephemeral range, 32768-60999, where the kernel places
client sockets and the port-0 binds of the servers' own internals, e.g. vLLM's workers). Within its
block a process starts at a random offset (two serial runs at once rarely meet) and checks every
port by binding it.
"""

from __future__ import annotations

import os
import random
import re
import socket

_HANDED_OUT: set[int] = set()

#: ports per process block; first port of the serial run's block
BLOCK = 1000
FIRST = 15000


def worker_block(worker: str | None = None) -> range:
    """The ports of this pytest process: ``worker`` is ``$PYTEST_XDIST_WORKER`` (``gw0``, ``gw1``,
    ...; unset in a serial run). Raises ``ValueError`` for a worker the block would put past 32767."""
    worker = os.environ.get("PYTEST_XDIST_WORKER") if worker is None else worker
    m = re.fullmatch(r"gw(\d+)", worker or "")
    index = int(m.group(1)) + 1 if m else 0
    start = FIRST + BLOCK * index
    if start + BLOCK > 32768:
        raise ValueError(f"xdist worker {worker!r}: its port block {start}-{start + BLOCK - 1} reaches "
                         "the ephemeral range (32768+); run fewer workers")
    return range(start, start + BLOCK)


_BLOCK = worker_block()
_NEXT = random.Random(os.getpid()).randrange(len(_BLOCK))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 of this process's block that nothing listens on right now (bound,
    then released).

    Never the same port twice in one test session: servers a session keeps running (the shared
    sandbox servers, the loopback sshd) and ports a test just released cannot be handed out again.
    Raises ``RuntimeError`` when the block has no such port left.
    """
    global _NEXT
    for _ in range(len(_BLOCK)):
        port = _BLOCK[_NEXT % len(_BLOCK)]
        _NEXT += 1
        if port not in _HANDED_OUT and _bindable(port):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {_BLOCK.start}-{_BLOCK.stop - 1} that this session has "
                       f"not handed out yet ({len(_HANDED_OUT)} so far)")
