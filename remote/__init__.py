"""The box layer: run commands, read and write files, manage servers and probes on a box.

``connect("local")`` (this machine) or ``connect("myalias")`` / ``connect("user@host:port")``
(over SSH, :mod:`remote.ssh`) returns a :class:`Box`; every method takes a ``timeout`` in seconds and
raises the typed errors of :mod:`remote.errors`. Probes live in :mod:`remote.probes`; which engine a
process or a URL is (SGLang, the sandbox, vLLM) in :mod:`remote.engines` and
:func:`remote.readiness.identify_server`.
This package imports nothing from ``workbench``.
"""

from . import engines, errors
from .box import DEFAULT_SERVER_PATTERN, DEFAULT_STATE_DIR, Box, port_from_argv
from .connect import connect
from .errors import (
    CommandFailed,
    CommandTimedOut,
    PortInUse,
    RemoteError,
    RemoteFileNotFound,
    ServerDied,
    ServerStartTimedOut,
    SSHError,
)
from .local import LocalTransport
from .result import FileStat, ProcessInfo, Result, ServerHandle, ServerProcess, ServerStopped
from .transport import Transport

__all__ = [
    "Box",
    "CommandFailed",
    "CommandTimedOut",
    "DEFAULT_SERVER_PATTERN",
    "DEFAULT_STATE_DIR",
    "FileStat",
    "LocalTransport",
    "PortInUse",
    "ProcessInfo",
    "RemoteError",
    "RemoteFileNotFound",
    "Result",
    "SSHError",
    "ServerDied",
    "ServerHandle",
    "ServerProcess",
    "ServerStartTimedOut",
    "ServerStopped",
    "Transport",
    "connect",
    "engines",
    "errors",
    "port_from_argv",
]
