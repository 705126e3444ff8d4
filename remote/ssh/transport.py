"""The SSH transport: a box reached through Paramiko (one connection, reused).

``connect("myalias")``, ``connect("user@host:2222")`` or ``connect("ssh://user@host")`` build an
:class:`SSHTransport` from the spec and the OpenSSH client config (``~/.ssh/config``, or the file
named by ``$EAGLE_WORKBENCH_SSH_CONFIG`` or ``connect(..., ssh_config=PATH)``), read with
``paramiko.SSHConfig``. Honoured options: ``HostName``, ``User``, ``Port``, ``IdentityFile``,
``IdentitiesOnly``, ``ProxyJump`` (hops chained through ``direct-tcpip`` channels),
``ConnectTimeout``, ``ServerAliveInterval``, ``UserKnownHostsFile``, ``GlobalKnownHostsFile``,
``StrictHostKeyChecking``, ``HashKnownHosts`` and ``Include``. ``ProxyCommand`` is refused with a clear error.

Security: host keys are checked against known_hosts and an unknown or changed key is refused
(``HostKeyUnknown`` / ``HostKeyChanged``, naming ``host:port`` and the key's SHA256 fingerprint).
Trust on first use is an explicit opt-in (``trust_unknown_hosts=True`` or ``StrictHostKeyChecking
accept-new``; ``no`` is treated as ``accept-new``) that appends the new key to the first user
known_hosts file; a changed key is never accepted. Authentication is by key files and the SSH agent
only: no password is ever sent or prompted for (``AuthenticationFailed`` lists the keys tried).

Mechanics: one ``paramiko.SSHClient`` per box with ``TCP_NODELAY`` on its socket (without it every
command costs ~40 ms of delayed ACKs), keepalive from ``ServerAliveInterval`` (default 30 s). File
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
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import getpass
import glob
import ipaddress
import json
import logging
import os
import re
import select
import shlex
import signal as _signal
import socket
import stat as _stat
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence, TypeVar

import paramiko
from paramiko.auth_strategy import AuthFailure, AuthStrategy, InMemoryPrivateKey, OnDiskPrivateKey
from paramiko.sftp import CMD_EXTENDED

from ..errors import (
    AuthenticationFailed,
    HostKeyChanged,
    HostKeyUnknown,
    RemoteError,
    RemoteFileError,
    RemoteFileNotFound,
    RemoteIsADirectory,
    RemotePermissionError,
    SSHConfigError,
    SSHConnectFailed,
    SSHConnectionLost,
    SSHError,
    SSHTimedOut,
    BoxSpecError,
    UnknownSSHHost,
)
from ..result import FileStat, ProcessInfo, Result
from ..transport import Transport, parse_proc_stat, timed_out

log = logging.getLogger(__package__)  # "remote.ssh", the name its records had before the split


class _RefusedForwardToDebug(logging.Filter):
    """paramiko logs ERROR "Secsh channel N open FAILED: ...: Connect failed" when the box refuses a
    forwarded connection, which is expected while a server starts (``wait_healthy`` polls through
    the forward) and is handled (and logged at debug) by the port forward: demote those records to
    DEBUG so a notebook does not fill with them. Every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and "open FAILED" in str(record.msg) and "Connect failed" in str(record.msg):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


logging.getLogger("paramiko.transport").addFilter(_RefusedForwardToDebug())
# Without a handler of the application's, Python's last-resort handler prints paramiko's own
# ERROR records (e.g. "Error reading SSH protocol banner" with a traceback) on stderr, beside the
# typed error the transport raises for the same failure. A library adds a NullHandler (logging
# HOWTO, "Configuring Logging for a Library"); an application that configures logging still sees them.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

#: Environment variable naming the ssh client config file to read instead of ``~/.ssh/config``.
SSH_CONFIG_ENV = "EAGLE_WORKBENCH_SSH_CONFIG"
#: Seconds allowed to set up the TCP connection and the SSH handshake when the config sets no
#: ``ConnectTimeout`` (OpenSSH would wait for the system's TCP time-out, minutes).
DEFAULT_CONNECT_TIMEOUT = 15.0
#: Keepalive interval (seconds) when the config sets no ``ServerAliveInterval``.
DEFAULT_KEEPALIVE = 30
#: Seconds to wait for the server to open a channel (a command, SFTP, a forwarded connection).
CHANNEL_TIMEOUT = 15.0
#: Seconds allowed per authentication attempt.
AUTH_TIMEOUT = 30.0
#: Seconds to keep reading after the remote group was killed on time-out.
_DRAIN_AFTER_KILL_S = 2.0
#: Seconds to wait, after a time-out, for the group id of a command whose login shell is still starting.
_HEADER_GRACE_S = 1.0
#: SSH channel window (bytes): large enough that bulk output is not throttled by window updates.
_WINDOW = 16 << 20
#: Largest SSH packet (bytes) the box may send on a command's channel: 256 KiB instead of paramiko's
#: 32 KiB default makes bulk output ~5x faster (fewer packets through paramiko's Python loop).
_MAX_PACKET = 1 << 18
#: SFTP request size (bytes) paramiko uses for reads and writes.
_SFTP_REQUEST = 32768
#: Default keys tried when ``look_for_keys`` (OpenSSH's order, the types paramiko can load).
_DEFAULT_KEYS = ("id_rsa", "id_ecdsa", "id_ed25519")

T = TypeVar("T")


# -- specs and config ----------------------------------------------------------------------------

_SPEC = re.compile(r"^(?:(?P<user>[^@\s/]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>\d+))?$")


def parse_spec(spec: str) -> tuple[Optional[str], str, Optional[int]]:
    """``(user, host, port)`` of ``user@host[:port]``, ``host``, ``[v6addr]:port`` or
    ``ssh://[user@]host[:port]`` (``None`` where not given; brackets removed from IPv6).

    Raises ``BoxSpecError`` when the text is none of these.
    """
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://") :].rstrip("/")
    m = _SPEC.match(text)
    if not m:
        raise BoxSpecError(
            f"cannot understand box spec {spec!r}: expected 'local', 'user@host[:port]', "
            "'ssh://user@host[:port]' or an ~/.ssh/config alias",
            spec=spec,
        )
    host = m.group("host")
    if host.startswith("["):
        host = host[1:-1]
    port = int(m.group("port")) if m.group("port") else None
    if port is not None and not 0 < port < 65536:
        raise BoxSpecError(f"port {port} in box spec {spec!r} is not a TCP port (1-65535)", spec=spec)
    return m.group("user"), host, port


@dataclass
class SSHConfigFiles:
    """The ssh client config as read: ``config`` (a ``paramiko.SSHConfig``, ``Include`` lines
    inlined) and ``files`` (every file read, the main one first; empty when none exists)."""

    config: paramiko.SSHConfig
    files: list[str] = field(default_factory=list)

    def aliases(self) -> list[str]:
        """``Host`` patterns without wildcards or negation: the aliases a user can type."""
        return sorted(h for h in self.config.get_hostnames() if not re.search(r"[*?!]", h))

    def defines(self, name: str) -> bool:
        """True when some ``Host`` pattern other than a bare ``*`` matches ``name``."""
        return any(
            fnmatch.fnmatchcase(name, pattern)
            for pattern in self.config.get_hostnames()
            if pattern not in ("*",) and not pattern.startswith("!")
        )


def config_path(ssh_config: Optional[str] = None) -> Optional[str]:
    """The ssh config file to read: ``ssh_config`` if given, else ``$EAGLE_WORKBENCH_SSH_CONFIG``,
    else ``~/.ssh/config`` (``None`` when that does not exist)."""
    if ssh_config is not None:
        return os.path.expanduser(os.fspath(ssh_config))
    if os.environ.get(SSH_CONFIG_ENV):
        return os.path.expanduser(os.environ[SSH_CONFIG_ENV])
    default = os.path.expanduser("~/.ssh/config")
    return default if os.path.exists(default) else None


def load_ssh_config(path: Optional[str]) -> SSHConfigFiles:
    """Read the ssh client config at ``path`` (``None``: an empty config) with ``Include`` lines
    inlined (relative patterns are under ``~/.ssh``, as OpenSSH does for user configs).

    Raises ``SSHConfigError`` when an explicitly named file does not exist or cannot be parsed.
    """
    if path is None:
        return SSHConfigFiles(paramiko.SSHConfig.from_text(""), [])
    files: list[str] = []
    try:
        text = _read_config_text(path, files, depth=0)
    except OSError as exc:
        raise SSHConfigError(f"cannot read ssh config file ({exc.strerror or exc})", spec=path,
                             option="config file") from None
    try:
        config = paramiko.SSHConfig.from_text(text)
    except (paramiko.ConfigParseError, ValueError) as exc:
        raise SSHConfigError(f"cannot parse ssh config ({exc})", spec=path, option="config file") from None
    return SSHConfigFiles(config, files)


_INCLUDE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(?P<rest>.+?)\s*$", re.IGNORECASE)
# Known-hosts options hold a list of paths, each possibly quoted. paramiko keeps the raw text (and
# strips one pair of outer quotes), which would make '"/a b/kh"' and '/a /b' indistinguishable: the
# value is split here, the OpenSSH way, and carried through paramiko as JSON.
_PATH_LIST = re.compile(r"^\s*(?P<key>userknownhostsfile|globalknownhostsfile)(?:\s*=\s*|\s+)(?P<rest>.+?)\s*$",
                        re.IGNORECASE)
_PATH_LIST_TAG = "ewb-paths:"


def _read_config_text(path: str, files: list[str], depth: int) -> str:
    if depth > 16:
        raise OSError(errno.ELOOP, f"Include nested more than 16 levels deep at {path}")
    files.append(path)
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            paths = _PATH_LIST.match(line)
            if paths:
                out.append(f"{paths.group('key')} {_PATH_LIST_TAG}{json.dumps(shlex.split(paths.group('rest')))}\n")
                continue
            m = _INCLUDE.match(line)
            if not m:
                out.append(line)
                continue
            for pattern in shlex.split(m.group("rest")):
                pattern = os.path.expanduser(pattern)
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
                for included in sorted(glob.glob(pattern)):
                    if os.path.isfile(included):
                        out.append(_read_config_text(included, files, depth + 1))
                        out.append("\n")
    return "".join(out)


@dataclass(frozen=True)
class SSHTarget:
    """Where and how to connect, resolved from a spec and the ssh config.

    ``spec`` as given, ``alias`` the host part looked up in the config, ``hostname`` / ``port`` /
    ``user`` the destination, ``identity_files`` (expanded paths), ``identities_only`` (no agent
    keys, no default keys), ``proxy_jump`` (hop specs, first hop first), ``connect_timeout`` and
    ``keepalive`` in seconds, ``known_hosts`` (user files; the first receives trust-on-first-use
    entries) and ``global_known_hosts``, ``accept_new`` (trust on first use allowed by the config),
    ``hash_known_hosts`` (``HashKnownHosts``: write trusted names hashed).
    """

    spec: str
    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    proxy_jump: tuple[str, ...] = ()
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    keepalive: int = DEFAULT_KEEPALIVE
    known_hosts: tuple[str, ...] = ()
    global_known_hosts: tuple[str, ...] = ()
    accept_new: bool = False
    hash_known_hosts: bool = False

    @property
    def where(self) -> str:
        """``user@hostname:port``, for messages."""
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{self.user}@{host}:{self.port}"

    @property
    def host_key_name(self) -> str:
        """The name of this host in known_hosts: ``host`` on port 22, else ``[host]:port``."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def _yes(value: Optional[str]) -> bool:
    return str(value).strip().lower() in ("yes", "true", "on")


def _paths(value) -> tuple[str, ...]:
    if isinstance(value, str) and value.startswith(_PATH_LIST_TAG):
        items = json.loads(value[len(_PATH_LIST_TAG) :])
    else:
        items = value if isinstance(value, list) else shlex.split(str(value))
    return tuple(os.path.expanduser(v) for v in items if v and v.lower() != "none")


def _in_etc_hosts(name: str) -> bool:
    try:
        with open("/etc/hosts", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split("#", 1)[0].split()
                if name in fields[1:]:
                    return True
    except OSError:
        return False
    return False


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def resolve_target(spec: str, configs: SSHConfigFiles, *, jump_override: Optional[tuple[str, ...]] = None) -> SSHTarget:
    """Turn ``spec`` into an :class:`SSHTarget` with the options of ``configs`` (see the module
    docstring for those honoured). Values in the spec (user, port) win over the config.

    ``jump_override`` replaces the config's ``ProxyJump`` (used for the hops of a jump chain).
    Raises ``BoxSpecError`` (unparseable spec), ``UnknownSSHHost`` (a bare name that no ``Host``
    defines and ``/etc/hosts`` does not know), ``SSHConfigError`` (``ProxyCommand``, a bad number).
    """
    user, host, port = parse_spec(spec)
    try:
        opts = configs.config.lookup(host)
    except Exception as exc:  # noqa: BLE001 - paramiko's lookup raises many types (Match exec, tokens)
        raise SSHConfigError(f"lookup failed: {type(exc).__name__}: {exc}", spec=spec, option="Host/Match") from None
    bare = user is None and port is None and "." not in host and ":" not in host and not spec.startswith("ssh://")
    if bare and not configs.defines(host) and not _is_ip(host) and not _in_etc_hosts(host):
        raise UnknownSSHHost(host, config_files=configs.files, aliases=configs.aliases())

    def number(key: str, default: float) -> float:
        if key not in opts:
            return default
        try:
            return float(str(opts[key]).split()[0])
        except ValueError:
            raise SSHConfigError(f"not a number: {opts[key]!r}", spec=spec, option=key) from None

    if port is None:
        port = int(number("port", 22))
    jumps: tuple[str, ...]
    if jump_override is not None:
        jumps = jump_override
    else:
        raw_jump = str(opts.get("proxyjump", "none")).strip()
        jumps = () if raw_jump.lower() == "none" else tuple(j.strip() for j in raw_jump.split(",") if j.strip())
    proxy_command = str(opts.get("proxycommand", "none")).strip()
    if not jumps and proxy_command.lower() != "none":
        raise SSHConfigError(
            f"ProxyCommand {proxy_command!r} is not supported; use ProxyJump (the jump host must allow TCP forwarding)",
            spec=spec, option="ProxyCommand",
        )
    strict = str(opts.get("stricthostkeychecking", "yes")).strip().lower()
    known = _paths(opts["userknownhostsfile"]) if "userknownhostsfile" in opts else (
        os.path.expanduser("~/.ssh/known_hosts"), os.path.expanduser("~/.ssh/known_hosts2"))
    global_known = _paths(opts["globalknownhostsfile"]) if "globalknownhostsfile" in opts else (
        "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
    keepalive = int(number("serveraliveinterval", DEFAULT_KEEPALIVE))
    return SSHTarget(
        spec=spec,
        alias=host,
        hostname=str(opts.get("hostname", host)),
        port=port,
        user=user or str(opts.get("user") or getpass.getuser()),
        identity_files=_paths(opts.get("identityfile", [])),
        identities_only=_yes(opts.get("identitiesonly")),
        proxy_jump=jumps,
        connect_timeout=number("connecttimeout", DEFAULT_CONNECT_TIMEOUT),
        keepalive=keepalive,
        known_hosts=known,
        global_known_hosts=global_known,
        accept_new=strict in ("accept-new", "no", "off"),
        hash_known_hosts=_yes(opts.get("hashknownhosts")),
    )


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


# -- the transport ----------------------------------------------------------------------------


_PROCESSES_SCRIPT = r"""
cd /proc || exit 1
for p in [0-9]*; do
  { IFS= read -r s < "$p/stat"; } 2>/dev/null || continue
  a=()
  if [ "$ewb_argv" = 1 ]; then { mapfile -d '' -t a < "$p/cmdline"; } 2>/dev/null; fi
  printf '%s\0%s\0%s\0' "$p" "$s" "${#a[@]}"
  if [ "${#a[@]}" -gt 0 ]; then printf '%s\0' "${a[@]}"; fi
done
"""

#: The fallback wrapper (``$0`` is its own text): used only when the login shell does not lead its
#: own process group (OpenSSH's sshd always makes it lead a new session, so normally never).
_WRAPPER = r"""printf '%s\n' "$$"
cd -- "$1" || exit 126
c=$2
shift 2
if [ $# -gt 0 ]; then exec env -- "$@" bash --norc -c "$c"; fi
exec bash --norc -c "$c"
"""


def wrap_command(command: str, cwd: str, env_pairs: Sequence[str] = ()) -> str:
    """The text the box's login shell runs for ``command``.

    It checks that the shell leads its own process group (sshd's session child does; otherwise it
    re-runs under ``setsid -w``), prints the group id as the first line of stdout, enters ``cwd``
    (exit 126 if impossible), then runs ``command``: with ``eval`` in the login shell itself when
    that is bash and no variables are added (no further process start: a command costs one shell
    start, as ``ssh box COMMAND`` does), else with ``exec [env -- K=V...] bash --norc -c COMMAND``
    (``--norc``: Debian's bash sources ``~/.bashrc`` in every shell sshd starts unless told not to;
    the login shell already did). Every value is ``shlex.quote``d; POSIX shell syntax only.
    """
    q = shlex.quote
    tail = " ".join(q(p) for p in (cwd, command, *env_pairs))
    prologue = (
        "read -r _ _ _ _ __ewb_pgrp _ < /proc/self/stat; "
        f'if [ "$__ewb_pgrp" != "$$" ]; then exec setsid -w bash --norc -c {q(_WRAPPER)} {q(_WRAPPER)} {tail}; fi; '
        f"unset __ewb_pgrp; printf '%s\\n' \"$$\"; cd -- {q(cwd)} || exit 126; "
    )
    if env_pairs:
        return prologue + f"exec env -- {' '.join(q(p) for p in env_pairs)} bash --norc -c {q(command)}"
    return prologue + f'if [ -n "$BASH_VERSION" ]; then eval {q(command)}; else exec bash --norc -c {q(command)}; fi'


class SSHTransport(Transport):
    """A box over SSH. Open with :meth:`open` (or ``remote.connect(spec)``); ``name`` is the spec.

    ``reconnects`` counts connections re-opened after a drop. ``trusted_new_host_key`` says which
    key was added to known_hosts when trust on first use was used (else ``None``).
    """

    def __init__(self, target: SSHTarget, configs: SSHConfigFiles, *, name: str, trust_unknown_hosts: bool = False,
                 allow_agent: bool = True, look_for_keys: bool = True):
        self.target = target
        self.configs = configs
        self.name = name
        self.trust_unknown_hosts = trust_unknown_hosts
        self.allow_agent = allow_agent
        self.look_for_keys = look_for_keys
        self.reconnects = 0
        self.trusted_new_host_key: Optional[str] = None
        self._conn: Optional[_Connection] = None
        self._conn_lock = threading.RLock()
        self._sftp: Optional[paramiko.SFTPClient] = None
        self._sftp_lock = threading.RLock()
        self._forwards: dict[tuple[str, int], _PortForward] = {}
        self._closed = False

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, spec: str, *, ssh_config: Optional[str] = None, trust_unknown_hosts: bool = False,
             allow_agent: bool = True, look_for_keys: bool = True,
             connect_timeout: Optional[float] = None) -> "SSHTransport":
        """Resolve ``spec`` with the ssh config (see :func:`config_path`) and connect.

        ``trust_unknown_hosts``: accept (and record in known_hosts) a host key seen for the first
        time; a changed key is refused regardless. ``allow_agent`` / ``look_for_keys``: also offer
        ssh-agent keys / ``~/.ssh/id_*`` (both off when the config says ``IdentitiesOnly yes``).
        ``connect_timeout`` (seconds) overrides the config's ``ConnectTimeout``.

        Raises ``BoxSpecError`` / ``UnknownSSHHost`` / ``SSHConfigError`` for the spec and config,
        ``SSHConnectFailed``, ``HostKeyUnknown``, ``HostKeyChanged``, ``AuthenticationFailed``.
        """
        configs = load_ssh_config(config_path(ssh_config))
        target = resolve_target(spec, configs)
        if connect_timeout is not None:
            target = _replace(target, connect_timeout=float(connect_timeout))
        transport = cls(target, configs, name=spec.strip(), trust_unknown_hosts=trust_unknown_hosts,
                        allow_agent=allow_agent, look_for_keys=look_for_keys)
        transport._connection()
        return transport

    def _connection(self) -> _Connection:
        """The live connection, opening (or re-opening after a drop) it first."""
        with self._conn_lock:
            if self._closed:
                raise SSHError("the box was closed", where=self.target.where, box=self.name)
            if self._conn is not None and self._conn.alive():
                return self._conn
            if self._conn is not None:
                log.warning("[%s] SSH connection to %s dropped; reconnecting", self.name, self.target.where)
                self._discard_connection()
                self.reconnects += 1
            conn = _open_connection(self.target, self.configs, trust=self.trust_unknown_hosts,
                                    allow_agent=self.allow_agent, look_for_keys=self.look_for_keys, box=self.name)
            self._conn = conn
            if conn.trusted:
                self.trusted_new_host_key = conn.trusted
            return conn

    def _discard_connection(self) -> None:
        with self._sftp_lock:
            self._sftp = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def client(self) -> paramiko.SSHClient:
        """The ``paramiko.SSHClient`` of the current connection (opened if needed)."""
        return self._connection().client

    def close(self) -> None:
        """Close the port forwards, SFTP and the connection (and its jump hosts). Idempotent."""
        with self._conn_lock:
            self._closed = True
            for fwd in list(self._forwards.values()):
                fwd.close()
            self._forwards.clear()
            with self._sftp_lock:
                if self._sftp is not None:
                    _close_channel(self._sftp.get_channel())
                    self._sftp = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def tcp_bytes(self) -> Optional[tuple[int, int]]:
        """``(bytes_sent_acked, bytes_received)`` on the TCP connection to the box so far, from the
        kernel (Linux ``TCP_INFO``: ``tcpi_bytes_acked``, ``tcpi_bytes_received``), SSH framing
        included. ``None`` behind a jump host (no direct socket) or when the kernel lacks them."""
        conn = self._connection()
        if conn.sock is None or not hasattr(socket, "TCP_INFO"):
            return None
        info = conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        if len(info) < 136:
            return None
        return struct.unpack_from("<QQ", info, 120)

    def local_address(self) -> Optional[tuple[str, int]]:
        """This end's ``(ip, port)`` of the TCP connection to the box (``None`` behind a jump host)."""
        conn = self._connection()
        return None if conn.sock is None else conn.sock.getsockname()[:2]

    # -- commands ---------------------------------------------------------------------------------

    def run(self, command: str, *, timeout: float, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            stdin: Optional[bytes] = None) -> Result:
        if cwd is not None:
            try:
                st = self.stat(cwd, timeout=min(timeout, 30))
            except RemoteFileNotFound:
                raise RemoteFileNotFound("working directory for the command does not exist", path=cwd,
                                         box=self.name) from None
            if not st.is_dir:
                raise RemoteFileNotFound("working directory for the command is not a directory", path=cwd,
                                         box=self.name)
        pairs = []
        for k, v in (env or {}).items():
            k = str(k)
            if not k or "=" in k or "\0" in k:
                raise ValueError(f"environment variable name {k!r} is not usable")
            pairs.append(f"{k}={v}")
        code, out, err, duration = self._exec(wrap_command(command, cwd or ".", pairs), timeout=timeout,
                                              stdin=stdin, display=command, group=True)
        return Result(command=command, stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                      exit_code=code, duration_s=duration, box=self.name)

    def _exec(self, remote: str, *, timeout: float, stdin: Optional[bytes], display: str,
              group: bool) -> tuple[Optional[int], bytes, bytes, float]:
        """Run ``remote`` (text for the login shell) on a new exec channel; drain stdout and stderr
        as they arrive; feed ``stdin``. With ``group`` the first stdout line is the process group id
        printed by the wrapper (removed from the output) and a time-out kills that group.

        Returns ``(exit_code, stdout, stderr, duration_s)``. Raises ``CommandTimedOut`` and
        ``SSHConnectionLost``.
        """
        start = time.monotonic()
        deadline = start + timeout
        chan = self._open_exec(remote, deadline, display)
        out = bytearray()
        err = bytearray()
        pgid: Optional[int] = None
        header = not group
        pending = memoryview(stdin) if stdin else None
        if pending is None:
            chan.shutdown_write()
        transport = chan.get_transport()

        def read_available() -> bool:
            nonlocal pgid, header
            got = False
            while chan.recv_ready():
                out.extend(chan.recv(1 << 20))
                got = True
            while chan.recv_stderr_ready():
                err.extend(chan.recv_stderr(1 << 20))
                got = True
            if not header:
                nl = out.find(b"\n")
                if nl >= 0:
                    text = out[:nl].decode("ascii", "replace").strip()
                    pgid = int(text) if text.isdigit() else None
                    del out[: nl + 1]
                    header = True
            return got

        try:
            while True:
                progressed = read_available()
                if pending is not None and chan.send_ready():
                    sent = chan.send(pending[: 1 << 16])
                    pending = pending[sent:]
                    if not pending:
                        pending = None
                        chan.shutdown_write()
                    progressed = True
                if (chan.closed or chan.eof_received) and chan.status_event.is_set() \
                        and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if not transport.is_active():
                    raise SSHConnectionLost(f"command {display!r}", where=self.target.where, box=self.name,
                                            detail=f"after {time.monotonic() - start:.1f}s")
                now = time.monotonic()
                if now >= deadline:
                    killed, detail = self._end_timed_out(chan, read_available, group=group,
                                                         pgid=lambda: pgid, header=lambda: header)
                    raise timed_out(display, bytes(out), bytes(err), -_signal.SIGKILL if killed else None,
                                    time.monotonic() - start, timeout, self.name, killed=killed, detail=detail)
                if not progressed:
                    wait = min(0.05, deadline - now)
                    if chan.eof_received or chan.closed:
                        chan.status_event.wait(wait)
                    else:
                        select.select([chan], [], [], wait)
        except (KeyboardInterrupt, SystemExit):
            if pgid:
                try:
                    self._kill_group(pgid)
                except RemoteError as exc:
                    log.warning("[%s] could not kill process group %s after an interrupt: %s", self.name, pgid, exc)
            _close_channel(chan)
            raise
        code: Optional[int] = chan.exit_status if chan.status_event.is_set() else None
        _close_channel(chan)
        if code == -1 and _dies_soon(chan.get_transport(), 0.5):
            raise SSHConnectionLost(f"command {display!r}", where=self.target.where, box=self.name,
                                    detail=f"after {time.monotonic() - start:.1f}s, before it reported an exit status")
        if code == -1:
            code = None  # ended by a signal: sshd sends exit-signal, which paramiko does not parse
        return code, bytes(out), bytes(err), time.monotonic() - start

    def _end_timed_out(self, chan: paramiko.Channel, read_available: Callable[[], bool], *, group: bool,
                       pgid: Callable[[], Optional[int]], header: Callable[[], bool]) -> tuple[bool, str]:
        """A command's time-out passed: kill its process group and collect what it printed before
        dying. The group id is the first line the prologue prints; if it has not arrived yet (the
        login shell is still starting, e.g. in a slow ``~/.bashrc``) it is waited for a moment;
        failing that the channel is closed: sshd then closes the shell's stdout, and the prologue's
        first ``printf`` kills the shell (SIGPIPE) before the command starts. Returns ``(killed, why
        not)``; closes the channel."""
        grace_end = time.monotonic() + _HEADER_GRACE_S
        while group and not header() and time.monotonic() < grace_end and not (chan.closed or chan.eof_received):
            if not read_available():
                time.sleep(0.01)
        killed, detail = False, ""
        if not group:
            detail = "an internal command without a process group of its own"
        elif pgid() is None:
            detail = (f"the login shell had not started the command within {_HEADER_GRACE_S:g}s more (slow "
                      "start-up files?); the channel is closed, so the shell dies of SIGPIPE on its first output, "
                      "before it starts the command")
        else:
            try:
                killed = self._kill_group(pgid())
            except RemoteError as exc:
                detail = f"kill -KILL -- -{pgid()} failed: {exc}"
            else:
                if not killed:
                    detail = f"kill -KILL -- -{pgid()} did not succeed"
        end = time.monotonic() + (_DRAIN_AFTER_KILL_S if killed else 0)  # the dying group's last output
        while time.monotonic() < end and not (chan.closed or chan.eof_received):
            if not read_available():
                time.sleep(0.01)
        read_available()
        _close_channel(chan)
        return killed, detail

    def _open_channel(self, what: str, timeout: float, opener: Callable[[paramiko.Transport, float], T]) -> T:
        """``opener(transport, timeout)`` on the live connection. Opening a channel changes nothing on
        the box, so when it fails because the connection just died (the transport thread may take a
        moment to notice a dead socket) the connection is re-opened and it is tried once more.
        Raises ``SSHError`` when the server refuses, ``SSHConnectionLost`` when the retry fails too."""
        for attempt in (0, 1):
            conn = self._connection()
            try:
                return opener(conn.transport, timeout)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                failure = exc
            if not _dies_soon(conn):
                raise SSHError(f"cannot open a channel for {what}: {failure}", where=self.target.where,
                               box=self.name) from None
        raise SSHConnectionLost(what, where=self.target.where, box=self.name,
                                detail=f"could not open a channel after reconnecting: {failure}")

    def _open_exec(self, remote: str, deadline: float, display: str) -> paramiko.Channel:
        """A new session channel running ``remote`` (re-connecting first if the connection died)."""
        remaining = max(0.1, deadline - time.monotonic())
        chan = self._open_channel(
            f"command {display!r}", min(CHANNEL_TIMEOUT, remaining),
            lambda t, to: t.open_session(window_size=_WINDOW, max_packet_size=_MAX_PACKET, timeout=to))
        # exec_command waits for the server's reply without a time-out of its own: bound it.
        watchdog = threading.Timer(remaining, functools.partial(_close_channel, chan))
        watchdog.daemon = True
        watchdog.start()
        try:
            chan.exec_command(remote)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            _close_channel(chan)
            if not watchdog.is_alive():  # it fired: no answer to the exec request in time
                raise timed_out(display, b"", b"", None, remaining, remaining, self.name) from None
            raise SSHConnectionLost(f"command {display!r}", where=self.target.where, box=self.name,
                                    detail=f"exec request failed: {exc}") from None
        finally:
            watchdog.cancel()
        return chan

    def _kill_group(self, pgid: int) -> bool:
        """SIGKILL process group ``pgid`` on the box over a fresh channel. True when ``kill`` ran and
        the group was there (or had just gone: ``No such process`` counts as gone)."""
        code, _out, err, _ = self._exec(f"kill -KILL -- -{int(pgid)}", timeout=10, stdin=None,
                                        display=f"kill -KILL -- -{pgid}", group=False)
        return code == 0 or b"No such process" in err

    # -- SFTP -------------------------------------------------------------------------------------

    def _get_sftp(self, timeout: float) -> paramiko.SFTPClient:
        with self._sftp_lock:
            if self._sftp is not None and not self._sftp.get_channel().closed and self._conn is not None \
                    and self._conn.alive():
                return self._sftp
            self._sftp = None
            chan = self._open_channel("SFTP", min(CHANNEL_TIMEOUT, timeout),
                                      lambda t, to: t.open_session(window_size=_WINDOW, timeout=to))
            conn = self._conn
            watchdog = threading.Timer(timeout, functools.partial(_close_channel, chan))
            watchdog.daemon = True
            watchdog.start()
            try:
                chan.invoke_subsystem("sftp")
                chan.settimeout(timeout)
                sftp = paramiko.SFTPClient(chan)
                if conn.home is None:
                    conn.home = sftp.normalize(".")  # SFTP sessions start in the login directory
            except (paramiko.SSHException, EOFError, OSError) as exc:
                _close_channel(chan)
                if _dies_soon(conn):
                    raise SSHConnectionLost("starting SFTP", where=self.target.where, box=self.name,
                                            detail=str(exc)) from None
                raise SSHError(f"cannot start the SFTP subsystem (is it enabled in sshd_config?): {exc}",
                               where=self.target.where, box=self.name) from None
            finally:
                watchdog.cancel()
            self._sftp = sftp
            return sftp

    def _file_op(self, operation: str, path: str, fn: Callable[[paramiko.SFTPClient], T], *, timeout: float,
                 idempotent: bool) -> T:
        """Run ``fn(sftp)`` under the SFTP lock with ``timeout`` on every reply; translate errors.

        File errors become ``RemoteFileNotFound`` / ``RemotePermissionError`` / ``RemoteFileError``;
        no reply in time ``SSHTimedOut``; a dropped connection a retry on a new one when
        ``idempotent`` (once), else ``SSHConnectionLost``.
        """
        for attempt in (0, 1):
            with self._sftp_lock:
                sftp = self._get_sftp(timeout)
                chan = sftp.get_channel()
                chan.settimeout(timeout)
                try:
                    return fn(sftp)
                except (socket.timeout, TimeoutError):
                    self._drop_sftp()
                    raise SSHTimedOut(operation, path=path, timeout=timeout, where=self.target.where,
                                      box=self.name) from None
                except OSError as exc:
                    if exc.errno is not None:
                        raise self._file_error(exc, path, operation) from None
                    conn = self._conn
                    if str(exc) != "Socket is closed" and not chan.closed and conn is not None \
                            and not _dies_soon(conn, 0.0):
                        raise RemoteFileError(f"{operation} failed ({exc})", path=path, box=self.name) from None
                    failure: BaseException = exc
                except (EOFError, paramiko.SSHException) as exc:
                    failure = exc
                self._drop_sftp()
                if idempotent and attempt == 0:
                    log.warning("[%s] %s of %s interrupted (%s); retrying on a new connection", self.name, operation,
                                path, failure)
                    continue
                raise SSHConnectionLost(f"{operation} of {path}", where=self.target.where, box=self.name,
                                        detail=f"{type(failure).__name__}: {failure}") from None
        raise AssertionError("unreachable")

    def _drop_sftp(self) -> None:
        with self._sftp_lock:
            if self._sftp is not None:
                _close_channel(self._sftp.get_channel())
                self._sftp = None

    def _file_error(self, exc: OSError, path: str, doing: str) -> RemoteFileError:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return RemoteFileNotFound(f"{doing}: no such file or directory", path=path, box=self.name)
        if exc.errno in (errno.EACCES, errno.EPERM):
            return RemotePermissionError(f"{doing}: permission denied", path=path, box=self.name)
        err = RemoteFileError(f"{doing} failed ({exc.strerror or exc})", path=path, box=self.name)
        err.errno = exc.errno  # type: ignore[attr-defined]
        return err

    def _is_dir(self, sftp: paramiko.SFTPClient, path: str) -> bool:
        try:
            return _stat.S_ISDIR(sftp.stat(path).st_mode or 0)
        except OSError:
            return False

    # -- file primitives --------------------------------------------------------------------------

    def read_range(self, path: str, offset: int = 0, length: Optional[int] = None, *, timeout: float = 30) -> bytes:
        def op(sftp: paramiko.SFTPClient) -> bytes:
            try:
                f = sftp.open(path, "rb", bufsize=0)
            except OSError as exc:
                if exc.errno is None and self._is_dir(sftp, path):
                    raise RemoteIsADirectory("read: is a directory", path=path, box=self.name) from None
                raise
            with f:
                try:
                    return _read_file(f, offset, length)
                except OSError as exc:
                    if exc.errno is None and self._is_dir(sftp, path):
                        raise RemoteIsADirectory("read: is a directory", path=path, box=self.name) from None
                    raise

        return self._file_op("read", path, op, timeout=timeout, idempotent=True)

    def stat(self, path: str, *, timeout: float = 30) -> FileStat:
        attrs = self._file_op("stat", path, lambda sftp: sftp.stat(path), timeout=timeout, idempotent=True)
        mode = attrs.st_mode or 0
        return FileStat(path=path, size=int(attrs.st_size or 0), mode=_stat.S_IMODE(mode),
                        mtime=float(attrs.st_mtime or 0), is_file=_stat.S_ISREG(mode), is_dir=_stat.S_ISDIR(mode))

    def listdir(self, path: str, *, timeout: float = 30) -> list[str]:
        return self._file_op("list directory", path, lambda sftp: sftp.listdir(path), timeout=timeout, idempotent=True)

    def readlink(self, path: str, *, timeout: float = 30) -> str:
        target = self._file_op("readlink", path, lambda sftp: sftp.readlink(path), timeout=timeout, idempotent=True)
        if target is None:
            raise RemoteFileError("readlink: not a symbolic link", path=path, box=self.name)
        return target

    def write_new(self, path: str, data: bytes, *, mode: int, timeout: float = 30) -> None:
        def op(sftp: paramiko.SFTPClient) -> None:
            try:
                f = sftp.open(path, "wbx", bufsize=0)
            except OSError as exc:
                if exc.errno is None:
                    try:
                        sftp.stat(path)
                    except OSError:
                        raise exc from None
                    err = RemoteFileError("create: file exists", path=path, box=self.name)
                    err.errno = errno.EEXIST  # type: ignore[attr-defined]
                    raise err from None
                raise
            with f:
                f.chmod(mode)
                f.set_pipelined(True)
                view = memoryview(data)
                for i in range(0, len(view), _SFTP_REQUEST * 32):
                    f.write(view[i : i + _SFTP_REQUEST * 32])
                f.flush()
                self._fsync(sftp, f, path, timeout)

        self._file_op("create", path, op, timeout=timeout, idempotent=False)

    def _fsync(self, sftp: paramiko.SFTPClient, f: paramiko.SFTPFile, path: str, timeout: float) -> None:
        """fsync through OpenSSH's ``fsync@openssh.com`` SFTP extension, else ``sync FILE``."""
        try:
            sftp._request(CMD_EXTENDED, "fsync@openssh.com", f.handle)
            return
        except OSError as exc:
            if exc.errno is not None:
                raise
            log.info("[%s] fsync@openssh.com not available (%s); using sync", self.name, exc)
        code, _o, err, _d = self._exec(f"sync -- {shlex.quote(path)}", timeout=timeout, stdin=None,
                                       display=f"sync {path}", group=False)
        if code != 0:
            raise RemoteFileError(f"fsync failed ({err.decode('utf-8', 'replace').strip()})", path=path, box=self.name)

    def rename(self, src: str, dst: str, *, timeout: float = 30) -> None:
        def op(sftp: paramiko.SFTPClient) -> None:
            try:
                sftp.posix_rename(src, dst)
            except OSError as exc:
                if exc.errno is None and self._is_dir(sftp, dst):
                    raise RemoteIsADirectory(f"rename from {src}: destination is a directory", path=dst,
                                             box=self.name) from None
                raise

        self._file_op(f"rename from {src}", dst, op, timeout=timeout, idempotent=False)
        self._fsync_dir(os.path.dirname(dst) or ".", timeout=timeout)

    def _fsync_dir(self, directory: str, *, timeout: float) -> None:
        """fsync a directory (so a rename in it is durable): opened read-only over SFTP (OpenSSH's
        sftp-server opens directories like files) and fsynced with ``fsync@openssh.com``; else
        ``sync DIR`` on the box."""

        def op(sftp: paramiko.SFTPClient) -> bool:
            try:
                with sftp.open(directory, "rb", bufsize=0) as d:
                    sftp._request(CMD_EXTENDED, "fsync@openssh.com", d.handle)
            except OSError as exc:
                if exc.errno is not None:
                    raise
                log.info("[%s] fsync of directory %s over SFTP failed (%s); using sync", self.name, directory, exc)
                return False
            return True

        if self._file_op("fsync directory", directory, op, timeout=timeout, idempotent=True):
            return
        code, _o, err, _d = self._exec(f"sync -- {shlex.quote(directory)}", timeout=timeout, stdin=None,
                                       display=f"sync {directory}", group=False)
        if code != 0:
            raise RemoteFileError(f"fsync of the directory failed ({err.decode('utf-8', 'replace').strip()})",
                                  path=directory, box=self.name)

    def remove(self, path: str, *, timeout: float = 30) -> None:
        def op(sftp: paramiko.SFTPClient) -> None:
            try:
                sftp.remove(path)
            except OSError as exc:
                if exc.errno is None and self._is_dir(sftp, path):
                    raise RemoteIsADirectory("remove: is a directory", path=path, box=self.name) from None
                raise

        self._file_op("remove", path, op, timeout=timeout, idempotent=False)

    def makedirs(self, path: str, *, mode: int = 0o755, timeout: float = 30) -> None:
        def op(sftp: paramiko.SFTPClient) -> None:
            missing = []
            current = path.rstrip("/") or "/"
            while True:
                try:
                    attrs = sftp.stat(current)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        raise
                    missing.append(current)
                    parent = os.path.dirname(current)
                    if parent in (current, ""):
                        break
                    current = parent
                    continue
                if not _stat.S_ISDIR(attrs.st_mode or 0):
                    raise RemoteFileError("create directory: a path component is not a directory", path=current,
                                          box=self.name)
                break
            for d in reversed(missing):
                try:
                    sftp.mkdir(d, mode)
                except OSError as exc:
                    if exc.errno is None and self._is_dir(sftp, d):
                        continue  # created meanwhile by someone else: fine
                    raise

        self._file_op("create directory", path, op, timeout=timeout, idempotent=False)

    def expanduser(self, path: str) -> str:
        if not path.startswith("~"):
            return path
        head, sep, rest = path[1:].partition("/")
        if head == "":
            conn = self._connection()
            if conn.home is None:
                self._get_sftp(30)
            home = conn.home or "/"
        else:
            if not re.fullmatch(r"[A-Za-z0-9._][A-Za-z0-9._-]*", head):
                return path
            code, out, _e, _d = self._exec(f"printf %s ~{head}", timeout=30, stdin=None, display=f"~{head}",
                                           group=False)
            home = out.decode("utf-8", "replace")
            if code != 0 or home.startswith("~"):
                return path
        base = home.rstrip("/")
        return (base + "/" + rest) if sep else (base or "/")

    # -- faster versions of the defaults -----------------------------------------------------------

    def sha256(self, path: str, *, timeout: float = 60) -> str:
        res = self.run(f"LC_ALL=C sha256sum -b -- {shlex.quote(path)}", timeout=timeout)
        if res.exit_code == 0:
            m = re.match(r"^\\?([0-9a-f]{64}) ", res.stdout)
            if m:
                return m.group(1)
        msg = res.stderr.strip()
        if "No such file" in msg or "Not a directory" in msg:
            raise RemoteFileNotFound("read for sha256: no such file or directory", path=path, box=self.name)
        if "Permission denied" in msg:
            raise RemotePermissionError("read for sha256: permission denied", path=path, box=self.name)
        if "Is a directory" in msg:
            raise RemoteIsADirectory("read for sha256: is a directory", path=path, box=self.name)
        raise RemoteFileError(f"sha256sum failed (exit {res.exit_code}: {msg or res.stdout.strip()})", path=path,
                              box=self.name)

    def processes(self, *, argv: bool = True, timeout: float = 30) -> list[ProcessInfo]:
        """Every process on the box, read from ``/proc`` by one command (see ``_PROCESSES_SCRIPT``)."""
        return self._read_processes(argv=argv, timeout=timeout)

    # ``process(pid)`` stays the default: two SFTP reads of /proc/PID (no command, ~1 ms).

    def _read_processes(self, *, argv: bool, timeout: float) -> list[ProcessInfo]:
        """Every process from ``/proc`` in one command: pid, stat line and argv, NUL-separated with
        an argument count (argv may hold any byte but NUL)."""
        res = self.run(f"ewb_argv={1 if argv else 0}\n" + _PROCESSES_SCRIPT, timeout=timeout)
        if res.exit_code != 0:
            raise RemoteFileError(f"cannot list processes: {res.stderr.strip()}", path="/proc", box=self.name)
        fields = res.stdout.split("\0")
        out = []
        i = 0
        while i + 2 < len(fields):
            pid_text, stat_text, count_text = fields[i], fields[i + 1], fields[i + 2]
            count = int(count_text) if count_text.isdigit() else 0
            args = tuple(fields[i + 3 : i + 3 + count])
            i += 3 + count
            parsed = parse_proc_stat(stat_text)
            if parsed is None or not pid_text.isdigit():
                continue
            state, ppid, pgid = parsed
            out.append(ProcessInfo(pid=int(pid_text), ppid=ppid, pgid=pgid, state=state, argv=args))
        return out

    def kill(self, pid: int, sig: int, *, group: bool = False, timeout: float = 10) -> bool:
        target = f"-{int(pid)}" if group else str(int(pid))
        name = _signal.Signals(sig).name.removeprefix("SIG")
        code, _o, _e, _d = self._exec(f"kill -s {name} -- {target}", timeout=timeout, stdin=None,
                                      display=f"kill -s {name} -- {target}", group=False)
        return code == 0

    def realpath(self, path: str, *, timeout: float = 10) -> str:
        """``path`` with every symlink resolved: SFTP ``realpath`` for an existing path, else
        ``readlink -f`` on the box (which allows a missing last component)."""
        try:
            return self._file_op("realpath", path, lambda sftp: sftp.normalize(path), timeout=timeout, idempotent=True)
        except RemoteFileNotFound:
            code, out, _e, _d = self._exec(f"readlink -f -- {shlex.quote(path)}", timeout=timeout, stdin=None,
                                           display=f"readlink -f {path}", group=False)
        text = out.decode("utf-8", "replace")
        if code != 0 or not text.strip():
            raise RemoteFileNotFound("cannot resolve path", path=path, box=self.name)
        return text.rstrip("\n")

    # -- port forwards ----------------------------------------------------------------------------

    def forward(self, host: str, port: int, *, timeout: float = 10) -> tuple[str, int]:
        """``("127.0.0.1", local_port)``: a listening socket on this machine whose connections are
        bridged to the box's ``host:port`` through this SSH connection (``direct-tcpip``). Opened on
        first use for that ``(host, port)``, kept until ``close()``."""
        key = (host, int(port))
        with self._conn_lock:
            if self._closed:
                raise SSHError("the box was closed", where=self.target.where, box=self.name)
            fwd = self._forwards.get(key)
            if fwd is None or fwd.closed:
                self._connection()
                fwd = _PortForward(self, host, int(port))
                self._forwards[key] = fwd
            return fwd.local_address

    def _open_direct(self, host: str, port: int, origin: tuple[str, int]) -> paramiko.Channel:
        """A ``direct-tcpip`` channel to the box's ``host:port``. Raises ``paramiko.ChannelException``
        when the box refuses (nothing listens there), ``SSHError`` when the connection fails."""
        conn = self._connection()
        try:
            return conn.transport.open_channel("direct-tcpip", (host, port), origin, timeout=CHANNEL_TIMEOUT)
        except paramiko.ChannelException:
            raise
        except (paramiko.SSHException, EOFError, OSError):
            if not _dies_soon(conn):
                raise
        return self._connection().transport.open_channel("direct-tcpip", (host, port), origin,
                                                         timeout=CHANNEL_TIMEOUT)


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


def _replace(target: SSHTarget, **changes) -> SSHTarget:
    import dataclasses

    return dataclasses.replace(target, **changes)


def _read_file(f: paramiko.SFTPFile, offset: int, length: Optional[int]) -> bytes:
    """``length`` bytes from ``offset`` of an open unbuffered SFTP file (``None``: to EOF), short at
    EOF. Reads beyond one request are pipelined up to the size the server reports; the rest (files
    whose size is not known in advance, such as ``/proc`` files) is read request by request."""
    f.seek(offset)
    if length is not None and length <= _SFTP_REQUEST:
        return f.read(length) if length else b""
    size = f.stat().st_size or 0
    end = size if length is None else min(offset + length, size)
    parts: list[bytes] = []
    got = 0
    if end - offset > _SFTP_REQUEST:
        for block in f.readv([(offset, end - offset)]):
            parts.append(block)
            got += len(block)
    f.seek(offset + got)
    while length is None or got < length:
        want = _SFTP_REQUEST if length is None else min(_SFTP_REQUEST, length - got)
        block = f.read(want)
        if not block:
            break
        parts.append(block)
        got += len(block)
    return b"".join(parts)


class _PortForward:
    """A local listening socket (``127.0.0.1``, an ephemeral port) whose accepted connections are
    each bridged to a ``direct-tcpip`` channel to the box's ``remote_host:remote_port``. Threads are
    daemons; ``close()`` stops accepting and closes every bridge."""

    def __init__(self, owner: SSHTransport, remote_host: str, remote_port: int):
        self.owner = owner
        self.remote = (remote_host, remote_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.5)
        self.local_address: tuple[str, int] = ("127.0.0.1", self.listener.getsockname()[1])
        self.closed = False
        self._lock = threading.Lock()
        self._bridges: set[tuple[socket.socket, paramiko.Channel]] = set()
        self._thread = threading.Thread(target=self._accept_loop, name=f"ewb-forward-{self.local_address[1]}",
                                        daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                conn, origin = self.listener.accept()
            except socket.timeout:
                continue
            except OSError as exc:
                if not self.closed:
                    log.warning("port forward %s -> box %s stopped accepting: %s", self.local_address, self.remote, exc)
                return
            threading.Thread(target=self._bridge, args=(conn, origin), daemon=True,
                             name=f"ewb-forward-{self.local_address[1]}-conn").start()

    def _bridge(self, conn: socket.socket, origin: tuple[str, int]) -> None:
        try:
            chan = self.owner._open_direct(self.remote[0], self.remote[1], origin[:2])
        except paramiko.ChannelException as exc:
            # The box refused (nothing listens there yet): the client sees the connection closed.
            log.debug("port forward to box %s:%s refused: %s", *self.remote, exc)
            conn.close()
            return
        except (RemoteError, paramiko.SSHException, EOFError, OSError) as exc:
            log.warning("port forward to box %s:%s failed: %s", *self.remote, exc)
            conn.close()
            return
        pair = (conn, chan)
        with self._lock:
            if self.closed:
                _close_channel(chan)
                conn.close()
                return
            self._bridges.add(pair)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not self.closed:
                readable, _, _ = select.select([conn, chan], [], [], 1.0)
                if conn in readable:
                    data = conn.recv(1 << 16)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in readable:
                    data = chan.recv(1 << 16)
                    if not data:
                        break
                    conn.sendall(data)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if not self.closed:
                log.debug("port forward connection to box %s:%s ended: %s", *self.remote, exc)
        finally:
            with self._lock:
                self._bridges.discard(pair)
            _close_channel(chan)
            conn.close()

    def close(self) -> None:
        """Stop accepting and close every bridged connection."""
        with self._lock:
            self.closed = True
            bridges = list(self._bridges)
            self._bridges.clear()
        self.listener.close()
        for conn, chan in bridges:
            _close_channel(chan)
            conn.close()
        self._thread.join(timeout=2)
