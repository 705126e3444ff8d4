"""Opening an SSH connection: TCP (or a ProxyJump hop's ``direct-tcpip`` channel), the handshake,
the host key check and public-key authentication.

The connection opening (:func:`_open_connection`, :func:`_tcp_connect`, :func:`_handshake`, the
:class:`_Connection` it returns) lives here rather than in :mod:`remote.ssh.transport` because the
handshake is where the host-key policy and the key strategy act and where their failures become
typed errors; the transport only asks for a live connection and uses it. The two channel helpers
every user of a connection needs (:func:`_close_channel`, :func:`_dies_soon`) are here for the
same reason: both the transport and the port forward use them.

Host keys (:class:`_HostKeyPolicy`): checked against the target's known_hosts files, read the
OpenSSH way by :mod:`remote.ssh.known_hosts` (markers, wildcards, negation, hashed names; unusable
lines skipped with a warning); a key an ``@revoked`` line names raises ``HostKeyRevoked``; an
unknown key raises ``HostKeyUnknown`` unless trust on first use is on (then it is appended to the
first user known_hosts file, hashed when ``HashKnownHosts``); a changed key raises ``HostKeyChanged``.

Time-outs: ``ConnectTimeout`` (``target.connect_timeout``) bounds the whole opening: TCP connect,
banner, key exchange and authentication (paramiko's fixed 15 s / 30 s defaults are replaced by what
is left of it, and a watchdog aborts the socket at the deadline). Once open, :class:`_Liveness`
detects a box that stopped answering (``ServerAliveInterval`` x ``ServerAliveCountMax``).
Authentication (:class:`_KeyStrategy`): key files and ssh-agent keys only, never a password;
``AuthenticationFailed`` lists every key tried or skipped (:func:`_tried`).

Depends on :mod:`remote.ssh.config` (``SSHTarget``, ``resolve_target`` for jump hosts). Units: seconds.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Optional

import paramiko
from paramiko.auth_strategy import AuthFailure, AuthStrategy, InMemoryPrivateKey, OnDiskPrivateKey
from paramiko.common import cMSG_GLOBAL_REQUEST

from ..errors import (
    AuthenticationFailed,
    HostKeyChanged,
    HostKeyError,
    HostKeyRevoked,
    HostKeyUnknown,
    SSHConfigError,
    SSHConnectFailed,
)
from .config import SSHConfigFiles, SSHTarget, resolve_target
from .known_hosts import KnownHosts

log = logging.getLogger(__package__)  # "remote.ssh": one logger for the package, as before the split

#: The global request sent as a keepalive, with want-reply set: OpenSSH's client sends this one
#: (clientloop.c ``server_alive_check``) and every sshd answers it (with a failure, which is an answer).
KEEPALIVE_REQUEST = "keepalive@openssh.com"
#: Default keys tried when ``look_for_keys`` (OpenSSH's order, the types paramiko can load).
_DEFAULT_KEYS = ("id_rsa", "id_ecdsa", "id_ed25519")


# -- host keys and authentication ----------------------------------------------------------------


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """The whole host-key check (the client's own ``HostKeys`` stay empty, so paramiko hands every
    key to this policy): against :class:`~remote.ssh.known_hosts.KnownHosts` read the OpenSSH way.
    A key an ``@revoked`` line names raises ``HostKeyRevoked``; a key of a type known for the host
    with another key ``HostKeyChanged``; an unknown key ``HostKeyUnknown`` unless trust on first
    use is on, then it is appended to the first user known_hosts file."""

    def __init__(self, target: SSHTarget, trust: bool, hosts: KnownHosts, box: str):
        self.target = target
        self.trust = trust
        self.hosts = hosts
        self.files_read = hosts.files_read
        self.box = box
        self.added: Optional[str] = None

    def missing_host_key(self, client, hostname, key):
        name = self.target.host_key_name
        status, line = self.hosts.check_host(self.target.hostname, self.target.port, key)
        if status == "ok":
            return
        if status == "revoked":
            raise HostKeyRevoked(where=self.target.where, host_port=name, key_type=key.get_name(),
                                 fingerprint=key.fingerprint, revoked_at=line.where, known_hosts=self.files_read,
                                 box=self.box)
        if status == "changed":
            raise HostKeyChanged(where=self.target.where, host_port=name, key_type=key.get_name(),
                                 fingerprint=key.fingerprint, expected_fingerprint=line.key.fingerprint,
                                 known_hosts=[line.where], box=self.box)
        hostname = name
        if not self.trust:
            t = self.target
            raise HostKeyUnknown(where=t.where, host_port=hostname, key_type=key.get_name(),
                                 fingerprint=key.fingerprint, known_hosts=self.files_read, box=self.box,
                                 hostname=t.hostname, port=t.port, config_host=t.alias,
                                 ssh_destination=t.ssh_destination,
                                 known_hosts_file=t.known_hosts[0] if t.known_hosts else None,
                                 config_file=t.config_file)
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


class _ReceiveClock:
    """The socket (or jump host channel) under a paramiko ``Transport``, noting when bytes last
    arrived (``last_received``, ``time.monotonic()`` seconds): what dead-peer detection measures,
    as OpenSSH resets its keepalive count on any packet from the server. Everything else is the
    wrapped object's (paramiko needs ``recv``, ``send``, ``settimeout``, ``close``)."""

    def __init__(self, sock):
        self._sock = sock
        self.last_received = time.monotonic()

    def recv(self, n: int) -> bytes:
        data = self._sock.recv(n)
        if data:
            self.last_received = time.monotonic()
        return data

    @property
    def _closed(self) -> bool:  # read by paramiko's Transport.stop_thread
        return bool(getattr(self._sock, "_closed", getattr(self._sock, "closed", False)))

    def abort(self) -> None:
        """Make every blocked read and write on the connection return now: ``shutdown`` a socket
        (closing alone does not wake a ``recv`` in another thread), close a channel."""
        try:
            if isinstance(self._sock, socket.socket):
                self._sock.shutdown(socket.SHUT_RDWR)
            else:
                self._sock.close()
        except OSError as exc:  # already closed or never connected: nothing left to wake
            log.debug("aborting a dead SSH connection: %s", exc)

    def __getattr__(self, name):
        return getattr(self._sock, name)


#: ``paramiko.Transport`` -> why :class:`_Liveness` declared it dead (read by :func:`dead_reason`).
_DEAD: "weakref.WeakKeyDictionary[paramiko.Transport, str]" = weakref.WeakKeyDictionary()


def dead_reason(transport: Optional[paramiko.Transport]) -> Optional[str]:
    """Why ``transport`` was closed by the dead-peer detection (``None`` when it was not)."""
    return None if transport is None else _DEAD.get(transport)


class _Liveness:
    """Dead-peer detection for one connection, as ssh_config(5) defines ``ServerAliveInterval`` /
    ``ServerAliveCountMax``: when nothing has arrived from the box for a while, a
    ``keepalive@openssh.com`` global request with want-reply is sent (sshd answers every one, with
    a failure); after ``interval * count`` seconds without a single byte from the box (``count``
    requests sent, each given at least ``interval / 2`` seconds to be answered) the box is declared
    dead: the socket is shut down and the transport closed, so every channel on it (commands,
    SFTP, port forwards) ends at once and its call fails with ``SSHConnectionLost`` naming the
    reason (:func:`dead_reason`). ssh_config(5): with interval 15 and the default count 3 "ssh will
    disconnect after approximately 45 seconds". paramiko's own ``set_keepalive`` only sends
    (want-reply off) and never notices an unanswered probe, so it is not used.

    One daemon thread per connection, waking every ``min(1, interval / 4)`` seconds; it ends with
    the transport. Units: seconds."""

    def __init__(self, transport: paramiko.Transport, clock: _ReceiveClock, *, interval: float, count: int,
                 where: str, box: str):
        self.transport = transport
        self.clock = clock
        self.interval = float(interval)
        self.count = int(count)
        self.where = where
        self.box = box
        self.reason: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ewb-ssh-alive-{where}", daemon=True)
        self._thread.start()

    def _probe(self) -> None:
        def send() -> None:
            m = paramiko.Message()
            m.add_byte(cMSG_GLOBAL_REQUEST)
            m.add_string(KEEPALIVE_REQUEST)
            m.add_boolean(True)  # want reply: the answer is what proves the box alive
            try:
                # paramiko's global_request(wait=False) clears want-reply; its wait=True has no
                # time-out. This is the same message without either limit; it waits (in this
                # short-lived thread) only while a key exchange holds user messages back.
                self.transport._send_user_message(m)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                log.debug("[%s] keepalive not sent: %s", self.box, exc)

        threading.Thread(target=send, name=f"ewb-ssh-keepalive-{self.where}", daemon=True).start()

    def _run(self) -> None:
        step = min(1.0, self.interval / 4)
        sent = 0
        seen = self.clock.last_received
        limit = self.interval * self.count
        while not self._stop.wait(step):
            if not self.transport.is_active():
                return
            last = self.clock.last_received
            if last != seen:
                seen, sent = last, 0
            silent = time.monotonic() - last
            if silent >= limit and sent >= self.count:
                self._declare_dead(silent)
                return
            # probe k (1-based) once silent for (k - 1/2) intervals: count probes before the limit
            if sent < self.count and silent >= (sent + 0.5) * self.interval:
                sent += 1
                self._probe()

    def _declare_dead(self, silent: float) -> None:
        self.reason = (f"the box sent nothing for {silent:.1f}s and answered none of {self.count} keepalives "
                       f"(ServerAliveInterval {self.interval:g}s x ServerAliveCountMax {self.count}): "
                       "the box or the network stopped answering")
        _DEAD[self.transport] = self.reason
        log.warning("[%s] %s: %s; closing the connection", self.box, self.where, self.reason)
        self.clock.abort()
        try:
            self.transport.close()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            log.debug("[%s] closing the dead transport: %s", self.box, exc)

    def stop(self) -> None:
        """Stop watching (the connection is being closed on purpose)."""
        self._stop.set()


@dataclass
class _Connection:
    """An open SSH connection: the client, the TCP socket under it (``None`` behind a jump host),
    the jump hosts' connections it rides on (closed with it) and its dead-peer detection
    (``liveness``, ``None`` when ``ServerAliveInterval`` is 0)."""

    client: paramiko.SSHClient
    sock: Optional[socket.socket]
    jumps: list["_Connection"]
    home: Optional[str] = None
    trusted: Optional[str] = None  # "name type fingerprint -> file" when a key was trusted on first use
    liveness: Optional[_Liveness] = field(default=None, repr=False)

    @property
    def transport(self) -> paramiko.Transport:
        return self.client.get_transport()

    @property
    def dead_reason(self) -> Optional[str]:
        """Why the dead-peer detection closed this connection (``None``: it did not)."""
        return self.liveness.reason if self.liveness is not None else None

    def alive(self) -> bool:
        t = self.client.get_transport()
        return t is not None and t.is_active()

    def close(self) -> None:
        if self.liveness is not None:
            self.liveness.stop()
        self.client.close()
        for jump in reversed(self.jumps):
            jump.close()


def _open_connection(target: SSHTarget, configs: SSHConfigFiles, *, trust: bool, allow_agent: bool,
                     look_for_keys: bool, box: str, depth: int = 0) -> _Connection:
    """Connect to ``target`` (through its ProxyJump hops), check its host key and authenticate,
    all within ``target.connect_timeout`` seconds (OpenSSH's ``ConnectTimeout`` bounds the TCP
    connection and the protocol handshake; here authentication too, so nothing waits longer than
    the time-out the user set). Raises the ``SSHError`` family and ``SSHConfigError``."""
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
            deadline = time.monotonic() + target.connect_timeout
            try:
                channel_sock = jump.transport.open_channel(
                    "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=target.connect_timeout)
            except (paramiko.ChannelException, paramiko.SSHException, OSError, EOFError) as exc:
                raise SSHConnectFailed(f"jump host {hop.where} could not open a connection to "
                                       f"{target.hostname}:{target.port}: {exc}", where=target.where, box=box) from None
        else:
            deadline = time.monotonic() + target.connect_timeout
            sock = _tcp_connect(target, box)
        return _handshake(target, sock if sock is not None else channel_sock, sock, jumps, trust=trust,
                          allow_agent=allow_agent, look_for_keys=look_for_keys, box=box, deadline=deadline)
    except BaseException:
        if sock is not None:
            sock.close()
        if channel_sock is not None:
            _close_channel(channel_sock)
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


def _host_key_algorithms(available, known_types: list[str]) -> list[str]:
    """``available`` (paramiko's host key algorithms, preferred first) with the algorithms of the
    key types known_hosts holds for the host moved to the front, as OpenSSH orders
    ``HostKeyAlgorithms`` (an ``ssh-rsa`` key is offered as ``rsa-sha2-512`` / ``rsa-sha2-256``)."""
    available = list(available)
    wanted = []
    for kind in known_types:
        for alg in (("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa") if kind == "ssh-rsa" else (kind,)):
            if alg in available and alg not in wanted:
                wanted.append(alg)
    return wanted + [a for a in available if a not in wanted]


def _handshake(target: SSHTarget, channel, sock: Optional[socket.socket], jumps: list[_Connection], *, trust: bool,
               allow_agent: bool, look_for_keys: bool, box: str, deadline: float) -> _Connection:
    client = paramiko.SSHClient()
    hosts = KnownHosts.load((*target.global_known_hosts, *target.known_hosts))
    policy = _HostKeyPolicy(target, trust or target.accept_new, hosts, box)
    client.set_missing_host_key_policy(policy)
    strategy = _KeyStrategy(target, allow_agent=allow_agent, look_for_keys=look_for_keys)
    t = target.connect_timeout
    clock = _ReceiveClock(channel)

    def remaining() -> float:
        return max(0.05, deadline - time.monotonic())

    def transport_factory(sock_like, disabled_algorithms=None):
        transport = paramiko.Transport(sock_like, disabled_algorithms=disabled_algorithms)
        # paramiko's own defaults (banner 15 s, key exchange 15 s, each auth attempt 30 s) give way
        # to what is left of ConnectTimeout; the watchdog below bounds the sum.
        transport.banner_timeout = transport.handshake_timeout = transport.auth_timeout = remaining()
        opts = transport.get_security_options()
        opts.key_types = _host_key_algorithms(opts.key_types, hosts.key_types(
            target.host_key_name, None if target.port == 22 else target.hostname))
        return transport

    expired = threading.Event()

    def expire() -> None:
        expired.set()
        clock.abort()

    watchdog = threading.Timer(remaining(), expire)
    watchdog.daemon = True
    watchdog.start()
    began = time.monotonic()
    try:
        client.connect(target.hostname, target.port, username=target.user, sock=clock, timeout=remaining(),
                       auth_strategy=strategy, allow_agent=False, look_for_keys=False,
                       transport_factory=transport_factory)
        watchdog.cancel()
        if expired.is_set():
            raise EOFError("the connection was aborted at the deadline")
    except HostKeyError:
        client.close()
        raise
    except AuthFailure as exc:
        client.close()
        if expired.is_set():
            raise SSHConnectFailed(f"SSH authentication not done within ConnectTimeout {t:g}s",
                                   where=target.where, box=box) from None
        raise AuthenticationFailed(user=target.user, host=target.hostname, where=target.where,
                                   keys_tried=_tried(exc, strategy), box=box) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        if expired.is_set():
            raise SSHConnectFailed(f"SSH authentication not done within ConnectTimeout {t:g}s",
                                   where=target.where, box=box) from None
        raise AuthenticationFailed(user=target.user, host=target.hostname, where=target.where,
                                   keys_tried=[str(exc)] + strategy.skipped, box=box) from None
    except (paramiko.SSHException, EOFError, OSError) as exc:
        client.close()
        reason = str(exc) or type(exc).__name__
        waited = time.monotonic() - began
        if expired.is_set() or isinstance(exc, (socket.timeout, TimeoutError)) or "timeout" in reason.lower() \
                or time.monotonic() >= deadline - 0.1:
            reason = (f"SSH handshake (banner, key exchange, authentication) not done within ConnectTimeout "
                      f"{t:g}s ({reason}; {waited:.1f}s after the TCP connection)")
        else:
            reason = f"SSH handshake failed: {reason}"
        raise SSHConnectFailed(reason, where=target.where, box=box) from None
    except BaseException:  # SSHConfigError from the policy, KeyboardInterrupt: nothing left open
        client.close()
        raise
    finally:
        watchdog.cancel()
        strategy.close()
    transport = client.get_transport()
    liveness = None
    if target.keepalive > 0:
        liveness = _Liveness(transport, clock, interval=target.keepalive, count=target.keepalive_count,
                             where=target.where, box=box)
    return _Connection(client=client, sock=sock, jumps=jumps, trusted=policy.added, liveness=liveness)


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
