"""The box state the console's panes share (:class:`BoxState`): one box connection, the server
the console looks at (by port), and what is read from it on demand (engine, source, code-path map,
log path). Every read of the server re-reads the box, so a pane follows restarts."""

from __future__ import annotations

from typing import Any, Callable, Optional

from remote import connect
from workbench.lab.clicks import ClickGuard
from workbench.engine.launch import LaunchCommand
from workbench.engine.locate import choose_server, find_engine, read_environ, running_servers
from workbench.errors import ServerChoiceError, WorkbenchInputError

__all__ = ["BoxState", "NOTEBOOK_HOW", "ServerGone", "port_value", "ENGINES", "engine_value"]

#: The engines a console or panel can be opened on: ``"auto"`` (the running server's; with none
#: running, the sandbox box's SGLang-compatible server), ``"sglang"``, ``"vllm"``.
ENGINES = ("auto", "sglang", "vllm")


def engine_value(engine: Any, *, where: str = "") -> str:
    """``engine`` checked against :data:`ENGINES` (``None`` is ``"auto"``; case and spaces ignored).
    Raises :class:`~workbench.errors.WorkbenchInputError` naming the value and the choices."""
    text = "auto" if engine is None else str(engine).strip().lower()
    if text not in ENGINES:
        raise WorkbenchInputError(f"engine={engine!r}{' (' + where + ')' if where else ''}: give one of "
                                  + ", ".join(repr(e) for e in ENGINES))
    return text

#: How a notebook user picks a server (for :class:`workbench.errors.ServerChoiceError` messages,
#: ``choose_server(..., how=NOTEBOOK_HOW)``; ``N`` stands for the port).
NOTEBOOK_HOW = "port = N in the parameters cell"


def port_value(port: Any, *, where: str = "") -> Optional[int]:
    """``port`` as a TCP port number (int 1-65535) or ``None``; a string of digits (``"31555"``)
    is taken as that number. Raises :class:`~workbench.errors.ServerChoiceError` saying what is
    wrong with anything else: a bool, a float (``31555.0``), a string that is no number
    (``"abc"``), a number outside 1-65535 (``0``, ``-1``, ``70000``); ``where`` names the box."""
    value = port
    if isinstance(port, str) and port.strip().isdigit():
        value = int(port.strip())
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535):
        return value
    head = f"port must be a TCP port number 1-65535 or None, got {port!r}"
    if isinstance(port, bool):
        why = "a bool, not a number"
    elif isinstance(port, float):
        why = (f"a float; write port = {int(port)}" if port.is_integer() and 1 <= port <= 65535
               else "a float, not a port number")
    elif isinstance(value, int):
        why = "outside 1-65535, the range of TCP ports"
    elif isinstance(port, str):
        why = "text that is no number"
    else:
        why = f"a {type(port).__name__}, not a number"
    raise ServerChoiceError(f"{head}: {why}", where=where)


class ServerGone(ServerChoiceError):
    """The server the console had chosen (``.port``, ``.pid``) is not running any more — killed,
    crashed, or stopped by someone else — and the console does not take another one in its place.
    ``.log_path``: its log file (``None``: not a file); ``.log_tail``: its last lines (a line
    saying why when it could not be read). A subclass of
    :class:`~workbench.errors.ServerChoiceError`, so what handles "no server chosen" handles it."""

    def __init__(self, port: int, pid: int, log_path: Optional[str], log_tail: list[str], *,
                 ports=(), where: str = ""):
        self.port, self.pid, self.log_path, self.log_tail = port, pid, log_path, list(log_tail)
        log = (f"its log {log_path} ends with:\n" + "\n".join(self.log_tail)) if log_path else \
            "its output went to no log file"
        super().__init__(f"the server on port {port} (pid {pid}) is not running any more — {log}",
                         ports=ports, where=where)


class BoxState:
    """The box and the server a console looks at, shared by the console's panes.

    ``host``: ``"local"`` (this machine, the sandbox box) or an SSH host as ``remote.connect``
    takes it; ``port``: the server's TCP port (checked by :func:`port_value`: a string of digits
    is taken as the number, anything else not 1-65535 raises ``ServerChoiceError``), or ``None`` to take the only server running (set on
    the first :meth:`server` call that finds exactly one); ``box``: an already connected
    ``remote.Box`` (else connected lazily with ``remote.connect(host)`` and closed by
    :meth:`close`); ``timeout``: seconds every remote call made here may take; ``how``: how the
    user picks a port, used in :class:`~workbench.errors.ServerChoiceError` messages
    (default :data:`NOTEBOOK_HOW`); ``engine``: the engine asked for (:data:`ENGINES`, checked by
    :func:`engine_value`): the running server's decides what the panes read (:meth:`engine_name`),
    the one asked for what a console offers to launch when none runs.

    ``listeners``: callbacks ``fn(event)`` that :meth:`notify` calls with ``"started"``,
    ``"stopped"`` or ``"restored"`` after the console changed the server, so other panes refresh;
    a listener's exception is collected, not raised (:meth:`notify` returns them)."""

    def __init__(self, host: str = "local", port: Optional[int] = None, *, box: Any = None, timeout: float = 30,
                 how: str = NOTEBOOK_HOW, engine: Any = "auto"):
        self.host = host
        self.engine_choice = engine_value(engine, where=str(host))
        self.port = port_value(port, where=str(host))
        self.timeout = timeout
        self.how = how
        self._box = box
        self._own_box = box is None
        self._engines: dict[int, Any] = {}
        self._sources: dict[tuple, Any] = {}
        self._maps: dict[tuple, Any] = {}
        self.listeners: list[Callable[[str], None]] = []
        #: The server :meth:`server` returned last (``ServerProcess``): once a server is chosen the
        #: state sticks to its port, and when it is gone :meth:`server` raises :class:`ServerGone`
        #: with its log instead of offering another server.
        self.seen = None
        #: The click guard every button of the console and its panes goes through
        #: (:class:`workbench.lab.clicks.ClickGuard`): one action at a time, queued clicks dropped.
        self.clicks = ClickGuard()

    # -- the box and its servers ---------------------------------------------------------------

    @property
    def box(self):
        """The ``remote.Box`` (connected on first use with ``remote.connect(host)``)."""
        if self._box is None:
            self._box = connect(self.host)
        return self._box

    @box.setter
    def box(self, value) -> None:
        self._box = value

    def servers(self) -> list:
        """The SGLang (or sandbox) servers running on the box now (``ServerProcess`` list, by pid;
        :func:`workbench.engine.locate.running_servers`)."""
        return running_servers(self.box, timeout=self.timeout)

    def server(self):
        """The ``remote.result.ServerProcess`` on :attr:`port` now (re-read on every call), or
        with ``port`` ``None`` the only one running (and :attr:`port` is set to its port); ``None``
        when none runs and no port was asked for. Raises :class:`~workbench.errors.ServerChoiceError`
        when several run and no port picks one, or when ``port`` names no running server (the
        message lists the ports in the notebook's terms, :attr:`how`), and :class:`ServerGone`
        when the server it returned before on :attr:`port` is not running any more (its log's end
        in the message; another server is never taken in its place)."""
        servers = self.servers()
        seen = self.seen
        if (seen is not None and self.port is not None and seen.port == self.port
                and not any(s.port == self.port for s in servers)):
            raise ServerGone(seen.port, seen.pid, seen.log_path, self._tail(seen.log_path),
                             ports=[s.port for s in servers], where=self.box.name)
        chosen = choose_server(servers, self.port, how=self.how, where=self.box.name)
        if chosen is not None and self.port is None and chosen.port is not None:
            self.port = chosen.port
        if chosen is not None:
            self.seen = chosen
        return chosen

    def _tail(self, path: Optional[str], n: int = 20) -> list[str]:
        """The last ``n`` lines of the log ``path`` (one line saying why when it cannot be read)."""
        from remote.errors import RemoteError

        if not path:
            return []
        try:
            return self.box.tail(path, n=n, timeout=self.timeout)
        except RemoteError as exc:
            return [f"(the log could not be read: {type(exc).__name__}: {exc})"]

    def forget_server(self) -> None:
        """Forget the server last seen (:attr:`seen`): the console stopped or replaced it itself,
        so its absence is no news (:meth:`notify` calls this first)."""
        self.seen = None

    def launch(self) -> Optional[LaunchCommand]:
        """The running server's launch command (:class:`LaunchCommand` parsed from its argv), or
        ``None`` when no server runs."""
        server = self.server()
        return LaunchCommand.parse(list(server.argv)) if server is not None else None

    def engine_name(self, server: Any = None) -> str:
        """The engine the panes read: that of ``server`` (default: the current server, :meth:`server`)
        from its command line (``"vllm"``, ``"sglang"``, or ``"sandbox"`` for the sandbox box's
        SGLang-compatible server); with no server (or none that can be chosen: several run, or the
        port has none), the one asked for (``"auto"``: ``"sglang"``). Box errors propagate."""
        if server is None:
            try:
                server = self.server()
            except ServerChoiceError:
                server = None
        if server is not None:
            try:
                return LaunchCommand.parse(list(server.argv)).engine
            except WorkbenchInputError:
                pass  # not a launch command we read: the engine asked for
        return "sglang" if self.engine_choice == "auto" else self.engine_choice

    # -- what is read from the server ----------------------------------------------------------

    def engine(self):
        """The engine of the current server (:func:`workbench.engine.locate.find_engine` on its
        port: package, root, version, interpreter), cached per server pid. Raises
        :class:`~workbench.errors.EngineNotFound` when no server runs (or the engine is not found)."""
        server = self._need_server()
        if server.pid not in self._engines:
            self._engines[server.pid] = find_engine(self.box, port=server.port, timeout=self.timeout)
        return self._engines[server.pid]

    def source_stamp(self) -> str:
        """A fingerprint of the engine's source files as they are now: sha256 of every ``*.py``
        file's path, size and mtime under the engine root (one ``find`` on the box). It changes
        when a probe is added or reverted (the file's size and mtime change), so what was read of
        the files is read again (:meth:`source`, :meth:`code_path`). Raises what the box raises."""
        root = str(self.engine().root)
        script = 'find "$1" -name "*.py" -type f -printf "%p %s %T@\\n" | LC_ALL=C sort | sha256sum'
        res = self.box.run(["sh", "-c", script, "sh", root], timeout=self.timeout)
        return res.stdout.split()[0] if res.stdout.split() else ""

    def source(self):
        """The current server's :class:`workbench.engine.source.EngineSource`, cached per server
        pid and :meth:`source_stamp`: a file changed on the box (a probe added or reverted) is read
        again, never shown from a stale cache."""
        return self._source_now()[1]

    def _source_now(self) -> tuple:
        """``((pid, stamp), EngineSource)`` of the current server's source as it is now."""
        server = self._need_server()
        key = (server.pid, self.source_stamp())
        if key not in self._sources:
            self._sources = {k: v for k, v in self._sources.items() if k[0] != server.pid}
            self._sources[key] = self.engine().source(self.box, timeout=self.timeout)
        return key, self._sources[key]

    def code_path(self, notes: Optional[list[str]] = None):
        """The code-path map for the running launch (:func:`workbench.engine.codepath_vllm.map_for_engine`:
        SGLang's or vLLM's, with the server's argv, cwd and environment), cached per pid and :meth:`source_stamp`: its
        lines are those of the files as they are now (with the probes in them, if any: each such
        entry's ``note`` says so); ``notes`` collects what could not be read (configs)."""
        from workbench.engine.codepath_vllm import map_for_engine

        key, source = self._source_now()
        server = self._need_server()
        if key not in self._maps:
            self._maps = {k: v for k, v in self._maps.items() if k[0] != key[0]}
            launch = LaunchCommand.parse(list(server.argv))
            environ = read_environ(self.box, server.pid, timeout=self.timeout)
            self._maps[key] = map_for_engine(self.box, source, launch, engine=getattr(self.engine(), "engine", "sglang"),
                                             cwd=server.cwd, timeout=self.timeout, notes=notes, environ=environ)
        return self._maps[key]

    def log_path(self) -> Optional[str]:
        """The current server's log file on the box (where its stderr goes), re-read on every call so
        it follows restarts; ``None`` when no server runs or its output is no regular file."""
        server = self.server()
        return server.log_path if server is not None else None

    def _need_server(self):
        server = self.server()
        if server is None:
            from workbench.errors import EngineNotFound

            raise EngineNotFound("no SGLang or vLLM server is running" + (f" on port {self.port}" if self.port else ""),
                                 where=self.box.name)
        return server

    # -- events --------------------------------------------------------------------------------

    def notify(self, event: str) -> list[BaseException]:
        """Call every listener with ``event`` (``"started"``, ``"stopped"``, ``"restored"``); the
        exceptions listeners raised are returned (each listener still runs), for the caller to show."""
        self.forget_server()
        errors: list[BaseException] = []
        for fn in list(self.listeners):
            try:
                fn(event)
            except Exception as exc:  # noqa: BLE001 - returned to the caller, who shows it
                errors.append(exc)
        return errors

    def close(self) -> None:
        """Close the box connection if this state opened it (idempotent)."""
        if self._box is not None and self._own_box:
            self._box.close()
        self._box = None if self._own_box else self._box
