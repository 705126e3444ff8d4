"""Opening an SSH connection: TCP (or a ProxyJump hop's ``direct-tcpip`` channel), the handshake,
the host key check and public-key authentication.

The connection opening (:func:`_open_connection`, :func:`_tcp_connect`, :func:`_handshake`, the
:class:`_Connection` it returns) lives here rather than in :mod:`remote.ssh.transport` because the
handshake is where the host-key policy and the key strategy act and where their failures become
typed errors; the transport only asks for a live connection and uses it. The two channel helpers
every user of a connection needs (:func:`_close_channel`, :func:`_dies_soon`) are here for the
same reason: both the transport and the port forward use them.

Host keys (:class:`_HostKeyPolicy`): checked against the target's known_hosts files; an unknown
key raises ``HostKeyUnknown`` unless trust on first use is on (then it is appended to the first
user known_hosts file, hashed when ``HashKnownHosts``); a changed key raises ``HostKeyChanged``.
Authentication (:class:`_KeyStrategy`): key files and ssh-agent keys only, never a password;
``AuthenticationFailed`` lists every key tried or skipped (:func:`_tried`).

Depends on :mod:`remote.ssh.config` (``SSHTarget``, ``resolve_target`` for jump hosts). Units: seconds.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Optional

import paramiko
from paramiko.auth_strategy import AuthFailure, AuthStrategy, InMemoryPrivateKey, OnDiskPrivateKey

from ..errors import AuthenticationFailed, HostKeyChanged, HostKeyUnknown, SSHConfigError, SSHConnectFailed
from .config import SSHConfigFiles, SSHTarget, resolve_target

log = logging.getLogger(__package__)  # "remote.ssh": one logger for the package, as before the split

#: Seconds to wait for the server to open a channel (a command, SFTP, a forwarded connection).
CHANNEL_TIMEOUT = 15.0
#: Seconds allowed per authentication attempt.
AUTH_TIMEOUT = 30.0
#: Default keys tried when ``look_for_keys`` (OpenSSH's order, the types paramiko can load).
_DEFAULT_KEYS = ("id_rsa", "id_ecdsa", "id_ed25519")


# -- host keys and authentication ----------------------------------------------------------------


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse an unknown host key with ``HostKeyUnknown``, or (trust on first use) append it to
    the first user known_hosts file. Changed keys never reach this policy (paramiko raises
    ``BadHostKeyException`` for them)."""

    def __init__(self, target: SSHTarget, trust: bool, files_read: list[str], box: str):
        self.target = target
        self.trust = trust
        self.files_read = files_read
        self.box = box
        self.added: Optional[str] = None

    def missing_host_key(self, client, hostname, key):
        if not self.trust:
            raise HostKeyUnknown(where=self.target.where, host_port=hostname, key_type=key.get_name(),
                                 fingerprint=key.fingerprint, known_hosts=self.files_read, box=self.box)
        if not self.target.known_hosts:
            raise SSHConfigError("trust on first use needs a UserKnownHostsFile to record the key in",
                                 spec=self.target.spec, option="UserKnownHostsFile")
        path = self.target.known_hosts[0]
        name = paramiko.HostKeys.hash_host(hostname) if self.target.hash_known_hosts else hostname
        line = paramiko.hostkeys.HostKeyEntry([name], key).to_line()
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        with os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = "\n" + line
            f.write(line.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.added = f"{hostname} {key.get_name()} {key.fingerprint} -> {path}"
        log.warning("trusting new host key on first use: %s", self.added)


class _KeyStrategy(AuthStrategy):
    """Public-key authentication only: the config's IdentityFiles, then agent keys, then the default
    ``~/.ssh/id_*`` keys. Keys that cannot be loaded (missing, encrypted) are recorded, not tried."""

    def __init__(self, target: SSHTarget, *, allow_agent: bool, look_for_keys: bool):
        super().__init__(ssh_config=None)
        self.target = target
        self.allow_agent = allow_agent
        self.look_for_keys = look_for_keys
        self.skipped: list[str] = []
        self.agent: Optional[paramiko.Agent] = None

    def _load(self, path: str, source: str):
        try:
            pkey = paramiko.PKey.from_path(path)
        except FileNotFoundError:
            if source == "ssh-config":
                self.skipped.append(f"{path} (no such file)")
            return None
        except (paramiko.PasswordRequiredException, TypeError) as exc:
            # paramiko raises PasswordRequiredException, or cryptography's TypeError ("Key is
            # password-protected, but password was not provided.") for OpenSSH-format keys.
            if isinstance(exc, TypeError) and "password" not in str(exc):
                raise
            self.skipped.append(f"{path} (encrypted; load it into ssh-agent, passphrases are never prompted for)")
            return None
        except (paramiko.SSHException, OSError, ValueError) as exc:
            self.skipped.append(f"{path} (unreadable: {exc})")
            return None
        return OnDiskPrivateKey(self.target.user, source, path, pkey)

    def get_sources(self):
        for path in self.target.identity_files:
            src = self._load(path, "ssh-config")
            if src is not None:
                yield src
        if self.allow_agent and not self.target.identities_only:
            self.agent = paramiko.Agent()
            for key in self.agent.get_keys():
                yield InMemoryPrivateKey(self.target.user, key)
        if self.look_for_keys and not self.target.identities_only:
            for name in _DEFAULT_KEYS:
                path = os.path.expanduser(f"~/.ssh/{name}")
                if path not in self.target.identity_files and os.path.exists(path):
                    src = self._load(path, "implicit-home")
                    if src is not None:
                        yield src

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()
            self.agent = None


def _describe_source(source) -> str:
    key = getattr(source, "pkey", None)
    what = f"{key.get_name()} {key.fingerprint}" if key is not None else type(source).__name__
    if isinstance(source, OnDiskPrivateKey):
        return f"{source.path} ({what})"
    return f"agent key ({what})"


def _tried(failure: AuthFailure, strategy: _KeyStrategy) -> list[str]:
    out = []
    for item in failure.result:
        result = item.result
        if isinstance(result, paramiko.AuthenticationException):
            outcome = "refused"
        elif isinstance(result, Exception):
            outcome = f"{type(result).__name__}: {result}"
        else:
            outcome = str(result)
        out.append(f"{_describe_source(item.source)}: {outcome}")
    return out + [f"{s}: not tried" for s in strategy.skipped]


# -- the connection ----------------------------------------------------------------------------


@dataclass
class _Connection:
    """An open SSH connection: the client, the TCP socket under it (``None`` behind a jump host)
    and the jump hosts' connections it rides on (closed with it)."""

    client: paramiko.SSHClient
    sock: Optional[socket.socket]
    jumps: list["_Connection"]
    home: Optional[str] = None
    trusted: Optional[str] = None  # "name type fingerprint -> file" when a key was trusted on first use

    @property
    def transport(self) -> paramiko.Transport:
        return self.client.get_transport()

    def alive(self) -> bool:
        t = self.client.get_transport()
        return t is not None and t.is_active()

    def close(self) -> None:
        self.client.close()
        for jump in reversed(self.jumps):
            jump.close()


def _open_connection(target: SSHTarget, configs: SSHConfigFiles, *, trust: bool, allow_agent: bool,
                     look_for_keys: bool, box: str, depth: int = 0) -> _Connection:
    """Connect to ``target`` (through its ProxyJump hops), check its host key and authenticate.
    Raises the ``SSHError`` family and ``SSHConfigError``."""
    if depth > 8:
        raise SSHConfigError("ProxyJump chain longer than 8 hops (a loop?)", spec=target.spec, option="ProxyJump")
    jumps: list[_Connection] = []
    sock = None
    channel_sock = None
    try:
        if target.proxy_jump:
            *before, last = target.proxy_jump
            hop = resolve_target(last, configs, jump_override=tuple(before) if before else None)
            jump = _open_connection(hop, configs, trust=trust, allow_agent=allow_agent, look_for_keys=look_for_keys,
                                    box=box, depth=depth + 1)
            jumps.append(jump)
            try:
                channel_sock = jump.transport.open_channel(
                    "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=target.connect_timeout)
            except (paramiko.ChannelException, paramiko.SSHException, OSError, EOFError) as exc:
                raise SSHConnectFailed(f"jump host {hop.where} could not open a connection to "
                                       f"{target.hostname}:{target.port}: {exc}", where=target.where, box=box) from None
        else:
            sock = _tcp_connect(target, box)
        return _handshake(target, sock if sock is not None else channel_sock, sock, jumps, trust=trust,
                          allow_agent=allow_agent, look_for_keys=look_for_keys, box=box)
    except BaseException:
        if sock is not None:
            sock.close()
        for jump in jumps:
            jump.close()
        raise


def _tcp_connect(target: SSHTarget, box: str) -> socket.socket:
    try:
        sock = socket.create_connection((target.hostname, target.port), timeout=target.connect_timeout)
    except socket.gaierror as exc:
        raise SSHConnectFailed(f"cannot resolve host name {target.hostname!r} ({exc.strerror})",
                               where=target.where, box=box) from None
    except ConnectionRefusedError:
        raise SSHConnectFailed(f"connection refused: nothing listens on {target.hostname}:{target.port}",
                               where=target.where, box=box) from None
    except (socket.timeout, TimeoutError):
        raise SSHConnectFailed(f"no TCP connection within ConnectTimeout {target.connect_timeout:g}s",
                               where=target.where, box=box) from None
    except OSError as exc:
        raise SSHConnectFailed(f"TCP connection failed: {exc.strerror or exc}", where=target.where, box=box) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _handshake(target: SSHTarget, channel, sock: Optional[socket.socket], jumps: list[_Connection], *, trust: bool,
               allow_agent: bool, look_for_keys: bool, box: str) -> _Connection:
    client = paramiko.SSHClient()
    files_read = []
    for path in (*target.global_known_hosts, *target.known_hosts):
        if os.path.isfile(path):
            try:
                client.get_host_keys().load(path)
            except (OSError, paramiko.SSHException, ValueError) as exc:
                raise SSHConfigError(f"cannot read known_hosts file {path}: {exc}", spec=target.spec,
                                     option="UserKnownHostsFile") from None
            files_read.append(path)
    policy = _HostKeyPolicy(target, trust or target.accept_new, files_read, box)
    client.set_missing_host_key_policy(policy)
    strategy = _KeyStrategy(target, allow_agent=allow_agent, look_for_keys=look_for_keys)
    t = target.connect_timeout
    began = time.monotonic()
    try:
        client.connect(target.hostname, target.port, username=target.user, sock=channel, timeout=t,
                       banner_timeout=t, auth_timeout=AUTH_TIMEOUT, channel_timeout=CHANNEL_TIMEOUT,
                       auth_strategy=strategy, allow_agent=False, look_for_keys=False)
    except HostKeyUnknown:
        client.close()
        raise
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyChanged(where=target.where, host_port=target.host_key_name, key_type=exc.key.get_name(),
                             fingerprint=exc.key.fingerprint, expected_fingerprint=exc.expected_key.fingerprint,
                             known_hosts=files_read, box=box) from None
    except AuthFailure as exc:
        client.close()
        raise AuthenticationFailed(user=target.user, host=target.hostname, where=target.where,
                                   keys_tried=_tried(exc, strategy), box=box) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        raise AuthenticationFailed(user=target.user, host=target.hostname, where=target.where,
                                   keys_tried=[str(exc)] + strategy.skipped, box=box) from None
    except (paramiko.SSHException, EOFError, OSError) as exc:
        client.close()
        reason = str(exc) or type(exc).__name__
        waited = time.monotonic() - began
        if isinstance(exc, (socket.timeout, TimeoutError)) or "timeout" in reason.lower() or waited >= 0.9 * t:
            reason = f"SSH handshake not done within {t:g}s ({reason})"
        else:
            reason = f"SSH handshake failed: {reason}"
        raise SSHConnectFailed(reason, where=target.where, box=box) from None
    except BaseException:  # SSHConfigError from the policy, KeyboardInterrupt: nothing left open
        client.close()
        raise
    finally:
        strategy.close()
    client.get_transport().set_keepalive(max(0, int(target.keepalive)))
    return _Connection(client=client, sock=sock, jumps=jumps, trusted=policy.added)


# -- channel helpers ---------------------------------------------------------------------------


def _close_channel(chan: paramiko.Channel) -> None:
    """Close ``chan``. On a connection that already died the close message cannot be sent: the
    channel is closed on this side anyway, which is all that is needed (logged at debug level)."""
    try:
        chan.close()
    except (EOFError, OSError, paramiko.SSHException) as exc:
        log.debug("closing channel %s on a dead connection: %s", chan.get_name(), exc)


def _dies_soon(conn, wait: float = 1.0) -> bool:
    """True when the connection (a ``_Connection`` or a ``paramiko.Transport``) is dead or dies
    within ``wait`` seconds (paramiko's reader thread notices a dead socket a moment after a write
    to it failed)."""
    transport = conn.transport if isinstance(conn, _Connection) else conn
    deadline = time.monotonic() + wait
    while True:
        if transport is None or not transport.is_active():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
