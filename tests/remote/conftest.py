"""Fixtures for the box-layer tests.

Every test that takes ``box`` runs once per transport in ``BOX_SPECS``: this machine through the
local transport, through the local primitives only, and over SSH through a real OpenSSH server on
loopback (``sshd`` in ``tests/conftest.py``; the box is the same machine, reached by its alias).
The ``ssh`` instances are marked ``slow`` (they start sshd), so ``make test-fast`` runs the two
local ones.
"""

import sys
from pathlib import Path

import pytest

from remote import LocalTransport, Transport, connect


class PrimitivesOnlyTransport(LocalTransport):
    """This machine through the local primitives only: ``sha256``, ``process(es)``, ``kill`` and
    ``realpath`` fall back to the ``Transport`` defaults built on ``run`` / ``read_range``, as an
    SSH transport that implements only the primitives would. Proves ``Box`` needs nothing more."""

    sha256 = Transport.sha256
    process = Transport.process
    processes = Transport.processes
    kill = Transport.kill
    realpath = Transport.realpath


# spec string, transport factory, or SSH (the loopback sshd's alias, resolved in the fixture).
SSH = object()
BOX_SPECS = {"local": "local", "local-primitives": PrimitivesOnlyTransport, "ssh": SSH}

HERE = Path(__file__).resolve().parent
TINY_SERVER = HERE / "tiny_launch_server.py"


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.slow) if spec is SSH else name
                        for name, spec in BOX_SPECS.items()])
def box(request, tmp_path):
    """A box whose state directory (probe journal, server logs) lives under ``tmp_path``."""
    spec = BOX_SPECS[request.param]
    if spec is SSH:
        spec = request.getfixturevalue("ssh_env").alias
    spec = spec if isinstance(spec, str) else spec()
    with connect(spec, state_dir=tmp_path / "box-state", python=sys.executable) as b:
        yield b


@pytest.fixture
def tiny_server_argv():
    """argv prefix that starts the tiny HTTP server with this Python."""
    return [sys.executable, str(TINY_SERVER)]


class ReadCounter:
    """Wraps a transport's ``read_range`` to count the bytes read (proves partial reads)."""

    def __init__(self, box, monkeypatch):
        self.bytes = 0
        self.calls = 0
        original = box.transport.read_range

        def counting(path, offset=0, length=None, **kw):
            data = original(path, offset, length, **kw)
            self.bytes += len(data)
            self.calls += 1
            return data

        monkeypatch.setattr(box.transport, "read_range", counting)


@pytest.fixture
def read_counter(box, monkeypatch):
    return ReadCounter(box, monkeypatch)


@pytest.fixture
def launched(box):
    """Server handles a test launched on ``box`` (append each): stopped at the test's end."""
    handles = []
    yield handles
    for h in handles:
        box.stop_server(h, grace=2)
