"""Fixtures shared by every test folder."""

import socket

import pytest


@pytest.fixture
def free_port():
    """A TCP port nothing listens on right now (bound to 0 and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
