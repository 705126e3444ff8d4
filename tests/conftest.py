"""Fixtures shared by every test folder (including the loopback OpenSSH server of the SSH tests)."""

import socket

import pytest

from sshd import LoopbackSSHD, keygen, make_client, sshd_missing_reason


@pytest.fixture
def free_port():
    """A TCP port nothing listens on right now (bound to 0 and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real OpenSSH server on 127.0.0.1 serving this machine for the whole session, and a
    client side for it (``sshd.ClientSide``: key, known_hosts, an ssh config with the alias
    ``ewb-loopback``). Skipped only when ``/usr/sbin/sshd`` is not installed."""
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("sshd")
    (base / "client").mkdir()
    key = keygen(base / "client" / "id_ed25519")
    server = LoopbackSSHD(base / "server", authorized=[key]).start()
    try:
        yield make_client(base / "client", server, key)
    finally:
        server.stop()


@pytest.fixture
def ssh_env(sshd, monkeypatch):
    """``$EAGLE_WORKBENCH_SSH_CONFIG`` pointing at the loopback client config (child processes
    inherit it); returns the ``ClientSide``."""
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(sshd.config))
    return sshd
