"""known_hosts read the way OpenSSH reads it (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT").

Each line is ``[@marker] hostpatterns keytype base64-key [comment]``:

- host patterns: a comma list of names, ``[host]:port`` for a port other than 22, wildcards ``*``
  and ``?``, negation ``!pattern`` (a matching negated pattern rules the line out even when another
  pattern matches), or one hashed name ``|1|salt|hmac`` (HMAC-SHA1 of the name, ``HashKnownHosts``).
  Matching is case-insensitive, as OpenSSH's ``match_hostname``.
- markers: ``@revoked`` (the key must never be accepted for the matching hosts: refused with
  :class:`~remote.errors.HostKeyRevoked`, even if another line accepts it) and
  ``@cert-authority`` (a CA for host certificates: paramiko does not verify host certificates, so
  these lines are recognised and skipped with a warning, once; a host with no plain key then takes
  the usual unknown-host path).
- blank lines and ``#`` comments are ignored; a line that cannot be used (too few fields, bad
  base64, an unknown key type, an unknown marker, any other garbage) is skipped with a warning
  naming ``file:line`` (once per process for the same line), and the rest of the file is used.

Parsing of one entry is paramiko's (:meth:`paramiko.hostkeys.HostKeyEntry.from_line`); this module
adds what it lacks: markers, wildcards, negation, hashed-name matching, line numbers and
per-line error handling. :class:`KnownHosts` is what the host-key policy of :mod:`remote.ssh.auth`
checks a presented key against. Imports nothing from the other ``remote.ssh`` modules.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Optional

import paramiko

log = logging.getLogger(__package__)

#: The markers OpenSSH defines for known_hosts lines (sshd(8)).
MARKERS = ("@cert-authority", "@revoked")

_warned: set[tuple[str, int, str]] = set()
_warned_cert_authority: set[str] = set()


def _warn_once(path: str, lineno: int, text: str, message: str) -> None:
    key = (path, lineno, text)
    if key not in _warned:
        _warned.add(key)
        log.warning("%s:%d: %s; line skipped", path, lineno, message)


@dataclass(frozen=True)
class KnownHostLine:
    """One usable known_hosts line: ``path`` and ``lineno`` (1-based) where it is, ``marker``
    (``None``, ``"@revoked"`` or ``"@cert-authority"``), ``patterns`` (the host field split at
    commas) and ``key`` (a ``paramiko.PKey``)."""

    path: str
    lineno: int
    marker: Optional[str]
    patterns: tuple[str, ...]
    key: paramiko.PKey

    @property
    def where(self) -> str:
        """``path:line``, for messages."""
        return f"{self.path}:{self.lineno}"

    def matches(self, name: str) -> bool:
        """True when ``name`` (``host`` or ``[host]:port``) matches the line's host field, the way
        OpenSSH's ``match_hostname`` does (case-insensitive; a negated match rules the line out)."""
        return host_matches(name, self.patterns)


def _pattern_regex(pattern: str) -> re.Pattern:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + r"\Z",
                      re.IGNORECASE | re.DOTALL)


def host_matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """OpenSSH's host matching of one known_hosts host field (``patterns``: its comma-separated
    items) against ``name``: a hashed item (``|1|salt|hmac``) matches when HMAC-SHA1(salt, name)
    equals it; a plain item is a pattern with ``*`` / ``?`` wildcards; ``!pattern`` that matches
    makes the whole field not match. Case-insensitive (OpenSSH lower-cases the name)."""
    lowered = name.lower()
    positive = False
    for item in patterns:
        if not item:
            continue
        if item.startswith("|1|"):
            try:
                if paramiko.HostKeys.hash_host(lowered, item) == item:
                    positive = True
            except Exception as exc:  # noqa: BLE001 - a malformed salt: the item matches nothing
                log.debug("unusable hashed host name %r: %s", item, exc)
            continue
        negated = item.startswith("!")
        pattern = item[1:] if negated else item
        if _pattern_regex(pattern).match(lowered):
            if negated:
                return False
            positive = True
    return positive


def parse_line(text: str, path: str, lineno: int) -> Optional[KnownHostLine]:
    """The :class:`KnownHostLine` of one line of a known_hosts file, ``None`` for a blank line, a
    comment or a line that cannot be used (then a warning naming ``path:lineno`` says why, once).
    Never raises for the line's content."""
    line = text.strip()
    if not line or line.startswith("#"):
        return None
    marker = None
    if line.startswith("@"):
        parts = line.split(None, 1)
        marker = parts[0]  # case-sensitive, as OpenSSH's check_markers
        line = parts[1].strip() if len(parts) > 1 else ""
        if marker not in MARKERS:
            _warn_once(path, lineno, text, f"unknown marker {marker!r} (OpenSSH knows {', '.join(MARKERS)})")
            return None
    fields = line.split()
    if len(fields) < 3:
        _warn_once(path, lineno, text, "not a known_hosts entry (expected: hosts keytype base64-key)")
        return None
    normalized = " ".join(fields[:3])
    try:
        entry = paramiko.hostkeys.HostKeyEntry.from_line(normalized, lineno)
    except paramiko.hostkeys.InvalidHostKey as exc:
        _warn_once(path, lineno, text, f"the key is not valid base64 ({exc.exc})")
        return None
    except Exception as exc:  # noqa: BLE001 - key classes raise many types for a corrupt blob; reported
        _warn_once(path, lineno, text, f"the {fields[1]} key cannot be read ({type(exc).__name__}: {exc})")
        return None
    if entry is None or entry.key is None:
        _warn_once(path, lineno, text, f"key type {fields[1]!r} is not one paramiko can check")
        return None
    return KnownHostLine(path=path, lineno=lineno, marker=marker, patterns=tuple(fields[0].split(",")),
                         key=entry.key)


@dataclass
class KnownHosts:
    """The usable lines of some known_hosts files, in file order. ``files_read`` lists the files
    that existed and were read; ``unreadable`` maps a file that exists but could not be read to
    why (it is skipped with a warning, like a bad line)."""

    lines: list[KnownHostLine] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, paths) -> "KnownHosts":
        """Read every file of ``paths`` that exists (missing files are normal: OpenSSH reads
        ``~/.ssh/known_hosts2`` and ``/etc/ssh/ssh_known_hosts`` if present). Never raises for a
        file's content; an unreadable file (permissions, a directory) is skipped with a warning."""
        out = cls()
        for path in paths:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            except OSError as exc:
                out.unreadable[path] = exc.strerror or str(exc)
                log.warning("cannot read known_hosts file %s (%s); skipped", path, exc.strerror or exc)
                continue
            out.files_read.append(path)
            text = data.decode("utf-8", "replace")
            for lineno, raw in enumerate(text.splitlines(), start=1):
                entry = parse_line(raw, path, lineno)
                if entry is not None:
                    out.lines.append(entry)
        return out

    def for_host(self, name: str) -> list[KnownHostLine]:
        """The lines whose host field matches ``name`` (``host`` or ``[host]:port``)."""
        return [line for line in self.lines if line.matches(name)]

    def key_types(self, name: str, bare: Optional[str] = None) -> list[str]:
        """Key type names (``ssh-ed25519``, ``ssh-rsa``, ...) of the plain keys known for ``name``,
        in file order without repeats: the host key algorithms to prefer in the key exchange (as
        OpenSSH orders ``HostKeyAlgorithms`` by the known keys). ``bare``: the host name without
        the port, whose keys :meth:`check_host` also accepts for another port, come after."""
        out: list[str] = []
        for line in self.for_host(name) + (self.for_host(bare) if bare else []):
            if line.marker is None and line.key.get_name() not in out:
                out.append(line.key.get_name())
        return out

    def check(self, name: str, key: paramiko.PKey) -> tuple[str, Optional[KnownHostLine]]:
        """Check the presented ``key`` of host ``name`` (``host`` or ``[host]:port``), as OpenSSH's
        ``check_host_key`` does without certificates.

        Returns ``("revoked", line)`` when an ``@revoked`` line for the host holds this key (the
        caller must refuse, whatever else matches), ``("ok", line)`` when a plain line holds it,
        ``("changed", line)`` when the host has a plain line of the same key type with another key
        (``line`` the first such), ``("unknown", None)`` otherwise (no line, or only lines of other
        types or ``@cert-authority`` lines, which are skipped with a warning once per file)."""
        blob = key.asbytes()
        matching = self.for_host(name)
        for line in matching:
            if line.marker == "@revoked" and line.key.asbytes() == blob:
                return "revoked", line
        for line in matching:
            if line.marker == "@cert-authority" and line.path not in _warned_cert_authority:
                _warned_cert_authority.add(line.path)
                log.warning("%s: @cert-authority line skipped (first at line %d): paramiko cannot verify host "
                            "certificates, so only plain host keys are checked", line.path, line.lineno)
        plain = [line for line in matching if line.marker is None]
        for line in plain:
            if line.key.asbytes() == blob:
                return "ok", line
        for line in plain:
            if line.key.get_name() == key.get_name():
                return "changed", line
        return "unknown", None

    def check_host(self, hostname: str, port: int, key: paramiko.PKey) -> tuple[str, Optional[KnownHostLine]]:
        """:meth:`check` for ``hostname`` on ``port`` the way OpenSSH's client does it: under
        ``[hostname]:port`` (just ``hostname`` on port 22); when that finds nothing for a port
        other than 22, the key is looked up once more under the bare ``hostname`` and accepted if a
        plain line there holds it (sshconnect.c ``check_host_key``: "checking without port
        identifier"; a revoked key there is refused too). Same return values as :meth:`check`."""
        name = hostname if port == 22 else f"[{hostname}]:{port}"
        status, line = self.check(name, key)
        if status != "unknown" or port == 22:
            return status, line
        bare_status, bare_line = self.check(hostname, key)
        if bare_status in ("ok", "revoked"):
            return bare_status, bare_line
        return status, line
