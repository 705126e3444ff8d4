"""The SSH transport: a box reached through Paramiko (one connection, reused).

``connect("myalias")``, ``connect("user@host:2222")`` or ``connect("ssh://user@host")`` build an
:class:`SSHTransport` from the spec and the OpenSSH client config (``~/.ssh/config``, or the file
named by ``$EAGLE_WORKBENCH_SSH_CONFIG`` or ``connect(..., ssh_config=PATH)``), read with
``paramiko.SSHConfig``. Honoured options: ``HostName``, ``User``, ``Port``, ``IdentityFile``,
``IdentitiesOnly``, ``ProxyJump`` (hops chained through ``direct-tcpip`` channels),
``ConnectTimeout`` (TCP connect, banner, key exchange and authentication together),
``ServerAliveInterval`` and ``ServerAliveCountMax`` (a box that answers nothing for interval x count
seconds is declared dead: every call on it fails with ``SSHConnectionLost``), ``UserKnownHostsFile``, ``GlobalKnownHostsFile``,
``StrictHostKeyChecking``, ``HashKnownHosts`` and ``Include``. ``ProxyCommand`` is refused with a clear error.

Security: host keys are checked against known_hosts (read as OpenSSH reads it, see
:mod:`remote.ssh.known_hosts`) and an unknown, changed or revoked key is refused (``HostKeyUnknown`` /
``HostKeyChanged`` / ``HostKeyRevoked``, naming ``host:port`` and the key's SHA256 fingerprint).
Trust on first use is an explicit opt-in (``trust_unknown_hosts=True`` or ``StrictHostKeyChecking
accept-new``; ``no`` is treated as ``accept-new``) that appends the new key to the first user
known_hosts file; a changed key is never accepted. Authentication is by key files and the SSH agent
only: no password is ever sent or prompted for (``AuthenticationFailed`` lists the keys tried).

Mechanics: one ``paramiko.SSHClient`` per box with ``TCP_NODELAY`` on its socket (without it every
command costs ~40 ms of delayed ACKs), keepalive from ``ServerAliveInterval`` (default 30 s) and
``ServerAliveCountMax`` (default 3). File
primitives use one SFTP session (byte ranges with pipelined reads, exclusive create + fsync,
``posix-rename``, directory fsync), so they cost round trips, not commands. Each command is one exec
channel: the command runs in the login shell (``eval`` when it is bash, else ``bash --norc -c``) in
its own process group and session (``setsid`` when sshd did not already make it one) whose id a
small prologue prints first; stdout and stderr are drained as they arrive; on time-out the remote
group is killed with ``kill -KILL -- -PGID`` over a fresh channel. Every exec channel starts the
user's login shell, which may read rc files (Debian's bash sources ``~/.bashrc`` for sshd
commands): that start-up cost is the box's, paid once per command.

A dropped connection is re-opened before the next call (opening a channel changes nothing on the
box); a read (``read_range``, ``stat``, ``listdir``, ``readlink``) that the drop interrupted is
retried once on the new connection, anything else raises ``SSHConnectionLost``.
``forward`` opens a local port forward (``127.0.0.1:EPHEMERAL`` -> the box's ``host:port``) through
the same connection, so ``Box.url`` works unchanged.

Requirements on the box: OpenSSH's sshd with the SFTP subsystem, ``bash`` (4.4+), ``setsid`` and
``kill`` (util-linux / procps), ``sha256sum`` and ``sync`` (coreutils), a POSIX login shell.
Units: bytes, seconds.

Modules, each importing only those before it (no cycles; none imports ``workbench``)::

    config, known_hosts  <-  auth  <-  forward  <-  transport  <-  remote.ssh (this file: re-exports, logging set-up)

- :mod:`remote.ssh.config`: box specs (:func:`parse_spec`), which config file applies
  (:func:`config_path`, :data:`SSH_CONFIG_ENV`), reading it (:func:`load_ssh_config`,
  :class:`SSHConfigFiles`: ``Include`` inlined, known-hosts path lists split the OpenSSH way) and
  resolving a spec against it (:func:`resolve_target`, :class:`SSHTarget`, ``/etc/hosts`` and IP
  checks, :data:`DEFAULT_CONNECT_TIMEOUT`, :data:`DEFAULT_KEEPALIVE`). No network access.
- :mod:`remote.ssh.known_hosts`: known_hosts read the OpenSSH way (:class:`KnownHosts`: markers
  ``@revoked`` / ``@cert-authority``, hashed names, ``[host]:port``, wildcards, negation; lines it
  cannot use skipped with a warning naming ``file:line``). No network access.
- :mod:`remote.ssh.auth`: opening a connection: TCP or a ProxyJump hop's channel, the handshake,
  the host-key policy (known_hosts, trust on first use), public-key authentication and the
  typed errors for their failures, ``ConnectTimeout`` over the whole opening, the dead-peer
  detection (``_Liveness``: :data:`KEEPALIVE_REQUEST` with want-reply, ``ServerAliveInterval`` x
  ``ServerAliveCountMax``), plus the channel helpers used on an open connection.
- :mod:`remote.ssh.forward`: the local port forward behind ``SSHTransport.forward`` (a listener
  whose connections are bridged to ``direct-tcpip`` channels) and the log filter for the box's
  refusals while a server starts.
- :mod:`remote.ssh.transport`: :class:`SSHTransport` (opening, commands and their time-out kill,
  SFTP file primitives, processes, kill, realpath, forwards' bookkeeping) and
  :func:`wrap_command`, the prologue every command runs under.

Every module logs to the one logger ``remote.ssh`` (:data:`log`). Importing this package adds,
once, a filter to ``paramiko.transport`` that demotes the expected "Connect failed" ERROR of a
refused forward to DEBUG, and a ``NullHandler`` to ``paramiko``.
"""

from __future__ import annotations

import logging

from .auth import KEEPALIVE_REQUEST
from .config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_KEEPALIVE,
    DEFAULT_KEEPALIVE_COUNT,
    SSH_CONFIG_ENV,
    SSHConfigFiles,
    SSHTarget,
    config_path,
    load_ssh_config,
    parse_spec,
    resolve_target,
)
from .forward import _RefusedForwardToDebug
from .known_hosts import KnownHosts
from .transport import SSHTransport, wrap_command

#: The package's logger, ``remote.ssh`` (every module of the package logs to it).
log = logging.getLogger(__name__)

# Module-level, so it runs once: when remote.ssh is first imported (importing any of its modules
# imports this package first).
logging.getLogger("paramiko.transport").addFilter(_RefusedForwardToDebug())
# Without a handler of the application's, Python's last-resort handler prints paramiko's own
# ERROR records (e.g. "Error reading SSH protocol banner" with a traceback) on stderr, beside the
# typed error the transport raises for the same failure. A library adds a NullHandler (logging
# HOWTO, "Configuring Logging for a Library"); an application that configures logging still sees them.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_KEEPALIVE",
    "DEFAULT_KEEPALIVE_COUNT",
    "KEEPALIVE_REQUEST",
    "KnownHosts",
    "SSH_CONFIG_ENV",
    "SSHConfigFiles",
    "SSHTarget",
    "SSHTransport",
    "config_path",
    "load_ssh_config",
    "parse_spec",
    "resolve_target",
    "wrap_command",
]
