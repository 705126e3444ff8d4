"""Typed errors of the box layer.

Every error says what went wrong and where: the box (``box``), and the path, command or port
involved. Errors about a command carry its :class:`~remote.result.Result` (``.result``), as
Fabric/invoke's ``UnexpectedExit`` does; errors about a server carry the tail of its log.

The hierarchy::

    RemoteError
    ├── BoxSpecError                  connect() was given a spec it cannot use
    │   ├── UnknownSSHHost            a bare name that is no Host in the ssh config (nor in /etc/hosts)
    │   └── SSHConfigError            an ssh config option that cannot be honoured (ProxyCommand, bad value)
    ├── SSHError                      reaching the box over SSH failed; names user@host:port (.where)
    │   ├── SSHConnectFailed          TCP connect refused / timed out / name not resolved / handshake failed
    │   ├── HostKeyError              the host key is not trusted; .fingerprint (SHA256:...), .key_type
    │   │   ├── HostKeyUnknown        no known_hosts entry (trust on first use is an explicit opt-in)
    │   │   ├── HostKeyChanged        the key differs from known_hosts (.expected_fingerprint)
    │   │   └── HostKeyRevoked        an @revoked known_hosts line names the key (.revoked_at file:line)
    │   ├── AuthenticationFailed      no key / agent key was accepted (.user, .keys_tried); never a password
    │   ├── SSHConnectionLost         the connection dropped (or the box stopped answering keepalives)
    │   │                             during a call that is not safe to repeat
    │   └── SSHTimedOut               a file operation over SFTP took longer than its time-out
    ├── CommandError                  carries .result (a Result)
    │   ├── CommandFailed             non-zero exit status with check=True
    │   └── CommandTimedOut           killed (whole process group) after its time-out
    ├── RemoteFileError               carries .path
    │   ├── RemoteFileNotFound
    │   ├── RemotePermissionError
    │   ├── RemoteIsADirectory
    │   ├── RemoteFileDecodeError     bytes are not valid text in the requested encoding
    │   └── RemoteFileChanged         a file changed between two reads (sha256 differs)
    ├── ServerError                   about a server launched or found on the box
    │   ├── PortInUse                 refused to launch: the port is already bound
    │   ├── ServerLaunchFailed        the detached launch itself failed (no pid file)
    │   ├── ServerDied                the process exited while waiting; carries .log_tail
    │   ├── ServerStartTimedOut       not healthy in time; carries .log_tail
    │   │   └── ServerStartStuck      launched, HTTP up, generation stuck (also a GenerationStuck)
    │   ├── ServerNotReady            not ready to generate (still 503 / refused past the time-out); .url, .last
    │   ├── GenerationStuck           HTTP up, a 1-token generation does not return in time; .url, .last
    │   └── ServerStopFailed          still alive after TERM and KILL
    └── ProbeError                    about a debug probe (remote.probes)
        ├── ProbeExpressionRefused    an expression outside the probe whitelist (.node, .column)
        ├── ProbePathOutside          the file resolves outside the engine package (.link, .target)
        ├── AnchorNotFound            the anchor regex / line / function matched nothing usable
        ├── AnchorAmbiguous           the anchor matched more than one line
        ├── ProbeCompileError         the patched file does not compile with the box's python
        ├── ProbeExists               the tag is already used by a different probe
        ├── ProbeNotFound             no probe with that tag in the journal
        └── ProbeConflict             the file was edited by someone else; nothing was changed

All of them derive from :class:`RemoteError`, so ``except RemoteError`` catches anything the box
layer raises on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .result import Result


class RemoteError(Exception):
    """Base class of every error raised on purpose by the box layer.

    ``box`` names the box (``"local"``, or the SSH spec it was opened with such as an alias or
    ``user@host:port``); it is ``None`` when no box was
    involved (for example a bad spec).
    """

    def __init__(self, message: str, *, box: str | None = None) -> None:
        self.message = message
        self.box = box
        super().__init__(f"[{box}] {message}" if box else message)


# -- connecting ---------------------------------------------------------------------------------


class BoxSpecError(RemoteError):
    """``connect()`` was given a spec it cannot turn into a box."""

    def __init__(self, message: str, *, spec: object) -> None:
        self.spec = spec
        super().__init__(message)


class UnknownSSHHost(BoxSpecError):
    """A bare name (no ``@``, port or dot) that is no ``Host`` in the ssh config files read and no
    name in ``/etc/hosts``: almost always a mistyped alias. ``.config_files`` are the files read,
    ``.aliases`` the aliases they define. A plain host name is written ``user@name`` (or fully
    qualified) and is then resolved like any host name."""

    def __init__(self, spec: str, *, config_files: Sequence[str], aliases: Sequence[str]) -> None:
        self.config_files = list(config_files)
        self.aliases = list(aliases)
        known = ", ".join(self.aliases[:20]) or "none"
        where = (f"in {', '.join(self.config_files)} (aliases defined: {known})" if self.config_files else
                 "(no ssh config file exists: ~/.ssh/config, or the file $EAGLE_WORKBENCH_SSH_CONFIG names)")
        super().__init__(
            f"{spec!r} is not a Host alias {where} and not a name in /etc/hosts; "
            f"for a plain host name write user@{spec} or its fully qualified name",
            spec=spec,
        )


class SSHConfigError(BoxSpecError):
    """An ssh config option (or ``connect`` argument) cannot be honoured, e.g. ``ProxyCommand``
    (use ``ProxyJump``) or a port that is not a number. ``.option`` names it."""

    def __init__(self, message: str, *, spec: str, option: str) -> None:
        self.option = option
        super().__init__(f"{spec}: {option}: {message}", spec=spec)


# -- SSH ----------------------------------------------------------------------------------------


class SSHError(RemoteError):
    """Reaching or talking to a box over SSH failed. ``.where`` is ``user@host:port`` (the
    resolved destination), ``box`` the spec the box was opened with."""

    def __init__(self, message: str, *, where: str, box: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}", box=box)


class SSHConnectFailed(SSHError):
    """No SSH session could be set up: the TCP connection was refused or timed out, the name did
    not resolve, or the SSH handshake failed or timed out. ``.reason`` says which."""

    def __init__(self, reason: str, *, where: str, box: str | None = None) -> None:
        self.reason = reason
        super().__init__(f"cannot connect: {reason}", where=where, box=box)


class HostKeyError(SSHError):
    """The box's host key is not trusted. ``.host_port`` is the known_hosts name (``host`` or
    ``[host]:port``), ``.key_type`` the key's algorithm, ``.fingerprint`` its OpenSSH SHA256
    fingerprint (``SHA256:...``, compare with ``ssh-keygen -lf`` on the box), ``.known_hosts``
    the files that were read."""

    def __init__(self, message: str, *, where: str, host_port: str, key_type: str, fingerprint: str,
                 known_hosts: Sequence[str], box: str | None = None) -> None:
        self.host_port = host_port
        self.key_type = key_type
        self.fingerprint = fingerprint
        self.known_hosts = list(known_hosts)
        super().__init__(message, where=where, box=box)


class HostKeyUnknown(HostKeyError):
    """No known_hosts entry for the host: the key is refused (checking is on by default).

    The message says what to do, as commands that work as written: check the fingerprint on the
    box, then record the key with ``ssh-keyscan -p PORT -t TYPE HOST >> KNOWN_HOSTS`` (the first
    user known_hosts file the workbench reads: the config's ``UserKnownHostsFile``, else
    ``~/.ssh/known_hosts``), or with one OpenSSH login (``ssh -o StrictHostKeyChecking=accept-new
    [-F CONFIG] DEST exit``, which writes the same file), or let the workbench record it on first use:
    ``StrictHostKeyChecking accept-new`` under the box's ``Host`` in the ssh config (Python:
    ``connect(spec, trust_unknown_hosts=True)``). ``hostname``/``port``: the destination
    (``HostName``, ``Port``: what ``ssh-keyscan`` asks); ``config_host``: the host as the spec wrote
    it (an alias or a name: the ``Host`` line the option goes under); ``ssh_destination``: the
    ``ssh`` arguments reaching the same box (``("alias",)``, ``("-p", "2222", "me@10.0.0.5")``);
    ``known_hosts_file``: where a trusted key goes; ``config_file``: the ssh config read (``None``:
    none exists, ``~/.ssh/config`` is where one goes).
    """

    def __init__(self, *, where: str, host_port: str, key_type: str, fingerprint: str,
                 known_hosts: Sequence[str], box: str | None = None, hostname: str | None = None,
                 port: int | None = None, config_host: str | None = None, ssh_destination: Sequence[str] = (),
                 known_hosts_file: str | None = None, config_file: str | None = None) -> None:
        self.hostname = hostname
        self.port = port
        self.config_host = config_host
        self.ssh_destination = tuple(ssh_destination)
        self.known_hosts_file = known_hosts_file
        self.config_file = config_file
        files = ", ".join(known_hosts) or "none"
        super().__init__(
            f"host key of {host_port} is unknown ({key_type} {fingerprint}; known_hosts read: {files}); "
            f"refusing to connect. {unknown_host_key_advice(self, key_type)}",
            where=where, host_port=host_port, key_type=key_type, fingerprint=fingerprint,
            known_hosts=known_hosts, box=box,
        )


#: ``ssh-keyscan -t`` names of the host key algorithms paramiko reports (``PKey.get_name()``).
_KEYSCAN_TYPES = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "ecdsa-sha2-nistp256": "ecdsa",
                  "ecdsa-sha2-nistp384": "ecdsa", "ecdsa-sha2-nistp521": "ecdsa"}


def _sh(word: str) -> str:
    import shlex

    return shlex.quote(word)


def unknown_host_key_advice(err: "HostKeyUnknown", key_type: str) -> str:
    """The remedies of an unknown host key, as commands that work when pasted (see
    :class:`HostKeyUnknown`). Without the destination (an error made by hand) the general advice."""
    import os

    if not err.hostname:
        return ("Check the fingerprint on the box (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then add the key to "
                "known_hosts (ssh-keyscan, or ssh once) or set StrictHostKeyChecking accept-new for the host in "
                "the ssh config (Python: connect(spec, trust_unknown_hosts=True))")
    port = err.port or 22
    scan_type = _KEYSCAN_TYPES.get(key_type)
    known = err.known_hosts_file or os.path.expanduser("~/.ssh/known_hosts")
    keyscan = " ".join(["ssh-keyscan", *(["-p", str(port)] if port != 22 else []),
                        *(["-t", scan_type] if scan_type else []), _sh(err.hostname), ">>", _sh(known)])
    folder = os.path.dirname(known)
    if folder and not os.path.isdir(folder):  # `>>` does not make the directory (a fresh ~/.ssh)
        keyscan = f"mkdir -p -m 700 {_sh(folder)} && {keyscan}"
    default_config = os.path.expanduser("~/.ssh/config")
    config = err.config_file or default_config
    dest = err.ssh_destination or ((["-p", str(port)] if port != 22 else []) + [err.hostname])
    ssh = " ".join(["ssh", "-o", "StrictHostKeyChecking=accept-new",
                    *(["-F", _sh(config)] if err.config_file and os.path.abspath(config) != default_config else []),
                    *[_sh(d) for d in dest], "exit"])
    host = err.config_host or err.hostname
    pub = f"/etc/ssh/ssh_host_{scan_type}_key.pub" if scan_type else "/etc/ssh/ssh_host_*_key.pub"
    return (f"Check the fingerprint on the box (`ssh-keygen -lf {pub}` there), then trust the key in one of "
            f"three ways: record it with `{keyscan}`; or log in once with OpenSSH, which records it in the same "
            f"file: `{ssh}`; or let the workbench record it on first use: add the line `StrictHostKeyChecking "
            f"accept-new` under `Host {host}` in {config}{'' if err.config_file else ' (create the file)'} "
            f"(the key is appended to {known}, the first UserKnownHostsFile; Python: connect(spec, "
            f"trust_unknown_hosts=True))")


class HostKeyChanged(HostKeyError):
    """The host presented a key that differs from its known_hosts entry (a reinstalled box, or a
    man in the middle). Never accepted automatically, trust on first use or not.
    ``.expected_fingerprint`` is the recorded key's fingerprint."""

    def __init__(self, *, where: str, host_port: str, key_type: str, fingerprint: str, expected_fingerprint: str,
                 known_hosts: Sequence[str], box: str | None = None) -> None:
        self.expected_fingerprint = expected_fingerprint
        super().__init__(
            f"HOST KEY CHANGED for {host_port}: it presented {key_type} {fingerprint}, known_hosts "
            f"({', '.join(known_hosts)}) records {expected_fingerprint}; refusing to connect. If the box was "
            f"reinstalled, remove the old entry (ssh-keygen -R '{host_port}') after checking the new fingerprint",
            where=where, host_port=host_port, key_type=key_type, fingerprint=fingerprint,
            known_hosts=known_hosts, box=box,
        )


class HostKeyRevoked(HostKeyError):
    """The host presented a key that an ``@revoked`` line of known_hosts marks as revoked for it
    (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"): refused even when another line accepts the key, as
    OpenSSH refuses it. ``.revoked_at`` is the ``file:line`` of the ``@revoked`` line."""

    def __init__(self, *, where: str, host_port: str, key_type: str, fingerprint: str, revoked_at: str,
                 known_hosts: Sequence[str], box: str | None = None) -> None:
        self.revoked_at = revoked_at
        super().__init__(
            f"host key of {host_port} ({key_type} {fingerprint}) is REVOKED by {revoked_at}; refusing to connect. "
            "Ask the box's administrator for its current host key",
            where=where, host_port=host_port, key_type=key_type, fingerprint=fingerprint,
            known_hosts=known_hosts, box=box,
        )


class AuthenticationFailed(SSHError):
    """The server accepted none of the keys offered (key files and agent keys; passwords are never
    tried or prompted for). ``.user``, ``.host``; ``.keys_tried`` lists each key with what happened."""

    def __init__(self, *, user: str, host: str, where: str, keys_tried: Sequence[str], box: str | None = None) -> None:
        self.user = user
        self.host = host
        self.keys_tried = list(keys_tried)
        tried = "; ".join(self.keys_tried) or "no key at all (no IdentityFile, no agent, no ~/.ssh/id_* key)"
        super().__init__(
            f"authentication as {user}@{host} failed (public key / agent only, no password); keys tried: {tried}",
            where=where, box=box,
        )


class SSHConnectionLost(SSHError):
    """The SSH connection dropped during ``.operation``, which is not safe to repeat blindly (a
    command or a write may or may not have happened). Reads are retried once on a new connection
    instead; the next call reconnects."""

    def __init__(self, operation: str, *, where: str, detail: str = "", box: str | None = None) -> None:
        self.operation = operation
        super().__init__(
            f"connection lost during {operation}{(' (' + detail + ')') if detail else ''}; it may or may not "
            "have taken effect on the box", where=where, box=box,
        )


class SSHTimedOut(SSHError):
    """A file operation over SFTP (``.operation``, on ``.path``) got no answer within ``.timeout`` seconds."""

    def __init__(self, operation: str, *, path: str, timeout: float, where: str, box: str | None = None) -> None:
        self.operation = operation
        self.path = path
        self.timeout = timeout
        super().__init__(f"{operation} timed out after {timeout:g}s: {path}", where=where, box=box)


# -- commands -----------------------------------------------------------------------------------


class CommandError(RemoteError):
    """A command did not end well; ``.result`` holds what it printed and how it ended."""

    def __init__(self, message: str, result: "Result") -> None:
        self.result = result
        super().__init__(message, box=result.box)


def _excerpt(text: str, limit: int = 2000) -> str:
    text = text.rstrip("\n")
    if len(text) <= limit:
        return text
    return "...[" + str(len(text) - limit) + " chars cut]..." + text[-limit:]


class CommandFailed(CommandError):
    """The command exited with a non-zero status (raised only with ``check=True``)."""

    def __init__(self, result: "Result") -> None:
        msg = f"command exited with status {result.exit_code} after {result.duration_s:.2f}s: {result.command}"
        if result.stderr.strip():
            msg += "\n--- stderr ---\n" + _excerpt(result.stderr)
        super().__init__(msg, result)


class CommandTimedOut(CommandError):
    """The command ran longer than its time-out; its whole process group was killed.

    ``.result`` holds the output captured before the kill (``exit_code`` is the negative signal
    number, or ``None`` when it could not be collected); ``.timeout`` is the limit in seconds.
    ``.killed`` is False when the group could not be killed (over SSH: the box's login shell never
    got as far as starting the command, or the kill itself failed); ``.detail`` then says why.
    """

    def __init__(self, result: "Result", timeout: float, *, killed: bool = True, detail: str = "") -> None:
        self.timeout = timeout
        self.killed = killed
        self.detail = detail
        how = "process group killed" if killed else f"process group NOT killed: {detail or 'unknown why'}"
        super().__init__(f"command timed out after {timeout:g}s ({how}): {result.command}", result)


# -- files --------------------------------------------------------------------------------------


class RemoteFileError(RemoteError):
    """A file operation failed; ``.path`` is the path on the box."""

    def __init__(self, message: str, *, path: str, box: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message}: {path}", box=box)


class RemoteFileNotFound(RemoteFileError):
    """The path (or the directory it should be in) does not exist on the box."""


class RemotePermissionError(RemoteFileError):
    """The box user may not read / write / list the path."""


class RemoteIsADirectory(RemoteFileError):
    """A file was expected, the path is a directory (or not a regular file)."""


class RemoteFileDecodeError(RemoteFileError):
    """The file's bytes are not valid text in the requested encoding."""


class RemoteFileChanged(RemoteFileError):
    """The file's content changed between two reads (``expected_sha256`` vs ``actual_sha256``)."""

    def __init__(
        self, message: str, *, path: str, expected_sha256: str, actual_sha256: str, box: str | None = None
    ) -> None:
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
        super().__init__(
            f"{message} (expected sha256 {expected_sha256[:12]}…, found {actual_sha256[:12]}…)",
            path=path,
            box=box,
        )


# -- servers ------------------------------------------------------------------------------------


class ServerError(RemoteError):
    """About a server on the box."""


class PortInUse(ServerError):
    """Refused to launch: ``.port`` is already bound (listening) on the box."""

    def __init__(self, port: int, *, box: str | None = None, detail: str = "") -> None:
        self.port = port
        super().__init__(
            f"port {port} is already in use on the box{(' (' + detail + ')') if detail else ''}; "
            "stop that server or choose another port",
            box=box,
        )


class ServerLaunchFailed(ServerError):
    """The detached launch did not produce a running process (no pid file appeared)."""

    def __init__(self, message: str, *, log_tail: Sequence[str] = (), box: str | None = None) -> None:
        self.log_tail = list(log_tail)
        super().__init__(_with_tail(message, self.log_tail), box=box)


def _with_tail(message: str, tail: Sequence[str]) -> str:
    if not tail:
        return message + "\n(log is empty)"
    return message + "\n--- last log lines ---\n" + "\n".join(tail)


class ServerDied(ServerError):
    """The server process exited before it became healthy; ``.log_tail`` is its last log lines."""

    def __init__(self, message: str, *, pid: int, log_path: str, log_tail: Sequence[str], box: str | None = None):
        self.pid = pid
        self.log_path = log_path
        self.log_tail = list(log_tail)
        super().__init__(_with_tail(f"{message} (pid {pid}, log {log_path})", self.log_tail), box=box)


class ServerStartTimedOut(ServerError):
    """The server did not answer healthy within ``.timeout`` seconds; ``.log_tail`` is its log's end."""

    def __init__(
        self, message: str, *, pid: int, log_path: str, log_tail: Sequence[str], timeout: float, box: str | None = None
    ):
        self.pid = pid
        self.log_path = log_path
        self.log_tail = list(log_tail)
        self.timeout = timeout
        super().__init__(_with_tail(f"{message} (pid {pid}, log {log_path})", self.log_tail), box=box)


class ServerStartStalled(ServerStartTimedOut):
    """A server just launched made no progress for ``.stalled_s`` seconds (``Box.wait_healthy``
    with ``stall_timeout``): its log did not grow, its process group used no CPU time and its
    answer did not change in that time. ``.timeout`` is the stall time-out (seconds); ``.phase``:
    the start-up phase it stalled in (``"load"``, ``"nccl-init"``, ...: the caller's reading of
    the log, ``workbench.logs.startup``; None when not known); ``.last_line``: the log's last
    non-empty line (None for an empty log)."""

    def __init__(self, message: str, *, pid: int, log_path: str, log_tail: Sequence[str], timeout: float,
                 stalled_s: float, box: str | None = None, phase: str | None = None, last_line: str | None = None):
        self.stalled_s = stalled_s
        self.phase = phase
        self.last_line = last_line
        super().__init__(message, pid=pid, log_path=log_path, log_tail=log_tail, timeout=timeout, box=box)


class ServerNotReady(ServerError):
    """The server at ``.url`` did not become ready to generate: still starting (503, connection
    refused) after ``.timeout`` seconds, its process gone, nothing listening, or an error answer
    from its health check. ``.last`` is what it last answered (``remote.readiness``)."""

    def __init__(self, message: str, *, url: str, timeout: float, last: str, box: str | None = None) -> None:
        self.url = url
        self.timeout = timeout
        self.last = last
        super().__init__(message, box=box)


class GenerationStuck(ServerError):
    """HTTP is up at ``.url`` but generation is stuck: a 1-token generation (``/health_generate``,
    else ``/generate``) did not return within ``.timeout`` seconds, or the server's own health check
    gave up on its scheduler (SGLang: a 503 after its ``SGLANG_HEALTH_CHECK_TIMEOUT`` wait).
    ``.last``: what the check saw (``remote.readiness``)."""

    def __init__(self, message: str, *, url: str, timeout: float, last: str, box: str | None = None) -> None:
        self.url = url
        self.timeout = timeout
        self.last = last
        super().__init__(message, box=box)


class ServerStartStuck(ServerStartTimedOut, GenerationStuck):
    """A server just launched answers HTTP but its generation is stuck (``Box.wait_healthy``): a
    ``ServerStartTimedOut`` (callers that stop a server that did not start catch it) and a
    ``GenerationStuck`` (``.url``, ``.last``)."""

    def __init__(self, message: str, *, pid: int, log_path: str, log_tail: Sequence[str], timeout: float, url: str,
                 last: str, box: str | None = None):
        self.pid, self.log_path, self.log_tail = pid, log_path, list(log_tail)
        self.timeout, self.url, self.last = timeout, url, last
        # not the cooperative chain: the two parents take different keywords
        RemoteError.__init__(self, _with_tail(f"{message} (pid {pid}, log {log_path})", self.log_tail), box=box)


class ServerRouteMissing(ServerNotReady):
    """The server at ``.url`` answers, but not the route its readiness check needs: ``.routes`` are
    the routes it answered 404/405 to (e.g. ``("/v1/models",)``: a server that is not
    OpenAI-compatible; ``("/health",)``). ``.last``: what the check saw (``remote.readiness``)."""

    def __init__(self, message: str, *, url: str, timeout: float, last: str, routes: Sequence[str],
                 box: str | None = None) -> None:
        self.routes = tuple(routes)
        super().__init__(message, url=url, timeout=timeout, last=last, box=box)


class ServerStartNotReady(ServerStartTimedOut, ServerNotReady):
    """A server just launched answers HTTP, and says it will not become ready (``Box.wait_healthy``
    on vLLM: ``/health`` 503 is a dead engine core; a 401 from ``/v1/models`` wants an API key;
    a route answers 404): a ``ServerStartTimedOut`` (callers that stop a server that did not start
    catch it) and a ``ServerNotReady`` (``.url``, ``.last``); ``.routes``: the routes answered
    404/405 (empty when none was missing)."""

    def __init__(self, message: str, *, pid: int, log_path: str, log_tail: Sequence[str], timeout: float, url: str,
                 last: str, routes: Sequence[str] = (), box: str | None = None):
        self.pid, self.log_path, self.log_tail = pid, log_path, list(log_tail)
        self.timeout, self.url, self.last, self.routes = timeout, url, last, tuple(routes)
        RemoteError.__init__(self, _with_tail(f"{message} (pid {pid}, log {log_path})", self.log_tail), box=box)


class ServerStopFailed(ServerError):
    """Processes of the server's tree (its process group, its descendants) were still alive after
    TERM, the grace period and KILL; ``.survivors`` are their pids (empty when not known)."""

    def __init__(self, message: str, *, pid: int, pgid: int, box: str | None = None,
                 survivors: Sequence[int] = ()):
        self.pid = pid
        self.pgid = pgid
        self.survivors = tuple(survivors)
        super().__init__(message, box=box)


# -- probes -------------------------------------------------------------------------------------


class ProbeError(RemoteError):
    """About a debug probe (``remote.probes``); ``.path`` is the source file when known."""

    def __init__(self, message: str, *, path: str | None = None, box: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message}{(': ' + path) if path else ''}", box=box)


class ProbeExpressionRefused(ProbeError):
    """A probe expression (or ``once_per``, ``when``) uses something outside the whitelist of
    ``remote.probes.check_expression``; ``.node`` is the refused syntax node's type (``"Call"``,
    ``"Attribute"``, ...), ``.column`` its 1-based column in the expression (``None`` if unknown)."""

    def __init__(self, message: str, *, node: str | None = None, column: int | None = None,
                 path: str | None = None, box: str | None = None) -> None:
        self.node = node
        self.column = column
        super().__init__(message, path=path, box=box)


class ProbePathOutside(ProbeError):
    """A probe's file resolves (symlinks followed, every component) outside the engine package
    root: ``.link`` is the path component that is a symlink leading out (``None`` when the path
    itself lies outside), ``.target`` where it resolves, ``.root`` the resolved root."""

    def __init__(self, message: str, *, link: str | None = None, target: str | None = None,
                 root: str | None = None, path: str | None = None, box: str | None = None) -> None:
        self.link = link
        self.target = target
        self.root = root
        super().__init__(message, path=path, box=box)


class AnchorNotFound(ProbeError):
    """The anchor (regex, line number, function) matched no line where a probe can go."""


class AnchorAmbiguous(ProbeError):
    """The anchor regex matched several lines (``.lines``, 1-based); make it more specific."""

    def __init__(self, message: str, *, lines: Sequence[int], path: str, box: str | None = None) -> None:
        self.lines = list(lines)
        super().__init__(message, path=path, box=box)


class ProbeCompileError(ProbeError):
    """The patched text (or, with ``.of_original``, the original file before patching) failed to
    compile with the box's python; ``.output`` is its error text. Nothing was written."""

    def __init__(self, message: str, *, output: str, path: str, box: str | None = None,
                 of_original: bool = False) -> None:
        self.output = output
        self.of_original = of_original
        super().__init__(f"{message}\n--- compiler output ---\n{_excerpt(output)}\n---", path=path, box=box)


class ProbeExists(ProbeError):
    """The tag is already in use by a different probe (other file, anchor or expressions)."""


class ProbeNotFound(ProbeError):
    """No probe with that tag is recorded in the box's journal."""


class ProbeConflict(ProbeError):
    """The file was changed by someone else (or by a later probe); nothing was written.

    The backup of the original is kept (``.backup_path``) so it can be restored by hand.
    """

    def __init__(self, message: str, *, path: str | None = None, backup_path: str | None = None, box: str | None = None):
        self.backup_path = backup_path
        super().__init__(message, path=path, box=box)
