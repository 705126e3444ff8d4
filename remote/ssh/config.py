"""SSH specs and the ssh client config: what ``connect(spec)`` means before any network access.

:func:`parse_spec` splits a box spec (``user@host[:port]``, ``[v6addr]:port``, ``ssh://...``, an
alias); :func:`config_path` says which ssh client config file applies (``ssh_config=`` argument,
else ``$EAGLE_WORKBENCH_SSH_CONFIG``, else ``~/.ssh/config``); :func:`load_ssh_config` reads it
into :class:`SSHConfigFiles` with ``Include`` lines inlined and the known-hosts options' path lists
split the OpenSSH way; :func:`resolve_target` combines a spec and that config into an
:class:`SSHTarget` (destination, keys, jump hosts, time-outs, known_hosts files). The options
honoured are listed in :mod:`remote.ssh`.

Nothing here opens a socket; the only files read are the config files, their ``Include`` targets
and ``/etc/hosts``. Imports nothing from the other ``remote.ssh`` modules (the bottom of the
package's dependency order). Units: seconds, TCP ports.
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import getpass
import glob
import ipaddress
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

import paramiko

from ..errors import BoxSpecError, SSHConfigError, UnknownSSHHost

#: Environment variable naming the ssh client config file to read instead of ``~/.ssh/config``.
SSH_CONFIG_ENV = "EAGLE_WORKBENCH_SSH_CONFIG"
#: Seconds allowed to set up the TCP connection and the SSH handshake when the config sets no
#: ``ConnectTimeout`` (OpenSSH would wait for the system's TCP time-out, minutes).
DEFAULT_CONNECT_TIMEOUT = 15.0
#: Keepalive interval (seconds) when the config sets no ``ServerAliveInterval`` (OpenSSH's default
#: is 0, off; a debugging run needs a dead box noticed, so 30 here).
DEFAULT_KEEPALIVE = 30
#: Keepalive probes left unanswered before the box is declared dead, when the config sets no
#: ``ServerAliveCountMax`` (OpenSSH's default, ssh_config(5)).
DEFAULT_KEEPALIVE_COUNT = 3


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
    ``keepalive`` in seconds (``ServerAliveInterval``; 0: off), ``keepalive_count``
    (``ServerAliveCountMax``: the box is declared dead after ``keepalive * keepalive_count``
    seconds without a byte from it, as ssh_config(5) defines), ``known_hosts`` (user files; the first receives trust-on-first-use
    entries) and ``global_known_hosts``, ``accept_new`` (trust on first use allowed by the config),
    ``hash_known_hosts`` (``HashKnownHosts``: write trusted names hashed), ``config_file`` (the ssh
    config file read, ``None`` when none exists), ``ssh_destination`` (the arguments that make
    OpenSSH's ``ssh`` with the same config reach the same box: the host as the spec wrote it, an
    alias or a name, with ``-p PORT`` and ``user@`` when the spec gave them).
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
    keepalive: float = DEFAULT_KEEPALIVE
    keepalive_count: int = DEFAULT_KEEPALIVE_COUNT
    known_hosts: tuple[str, ...] = ()
    global_known_hosts: tuple[str, ...] = ()
    accept_new: bool = False
    hash_known_hosts: bool = False
    config_file: Optional[str] = None
    ssh_destination: tuple[str, ...] = ()

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
    """Turn ``spec`` into an :class:`SSHTarget` with the options of ``configs`` (see :mod:`remote.ssh`
    for those honoured). Values in the spec (user, port) win over the config.

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

    spec_port = port
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
    keepalive = number("serveraliveinterval", DEFAULT_KEEPALIVE)
    keepalive_count = int(number("serveralivecountmax", DEFAULT_KEEPALIVE_COUNT))
    if keepalive < 0 or keepalive_count < 1:
        raise SSHConfigError("ServerAliveInterval must be >= 0 and ServerAliveCountMax >= 1", spec=spec,
                             option="ServerAliveInterval" if keepalive < 0 else "ServerAliveCountMax")
    connect_timeout = number("connecttimeout", DEFAULT_CONNECT_TIMEOUT)
    if connect_timeout <= 0:
        raise SSHConfigError(f"ConnectTimeout must be a positive number of seconds, got {connect_timeout:g}",
                             spec=spec, option="ConnectTimeout")
    return SSHTarget(
        spec=spec,
        alias=host,
        hostname=str(opts.get("hostname", host)),
        port=port,
        user=user or str(opts.get("user") or getpass.getuser()),
        identity_files=_paths(opts.get("identityfile", [])),
        identities_only=_yes(opts.get("identitiesonly")),
        proxy_jump=jumps,
        connect_timeout=connect_timeout,
        keepalive=keepalive,
        keepalive_count=keepalive_count,
        known_hosts=known,
        global_known_hosts=global_known,
        accept_new=strict in ("accept-new", "no", "off"),
        hash_known_hosts=_yes(opts.get("hashknownhosts")),
        config_file=configs.files[0] if configs.files else None,
        ssh_destination=(*((["-p", str(port)]) if spec_port is not None else []),
                         f"{user}@{host}" if user else host),
    )


def _replace(target: SSHTarget, **changes) -> SSHTarget:
    """A copy of ``target`` with the fields in ``changes`` replaced (``TypeError`` for an unknown field)."""
    return dataclasses.replace(target, **changes)
