"""The box console (:class:`BoxConsole`, :func:`box_console`): the box and its server at a glance,
start / stop / restart with an editable launch command checked by the doctor first, the journal of
what the console changed with one "Put the box back" button, and the panes of
:mod:`workbench.lab` (log tail, accept length, source, probes) as tabs.

Launches go through a journalled :class:`workbench.session.box_session.BoxSession` (opened with
:func:`~workbench.session.box_session.open_box` on the first launch or stop, which takes the box's
run lock): the server found is recorded, and :meth:`BoxConsole.restore` puts it back (also at
interpreter exit, BoxSession's ``atexit``)."""

from __future__ import annotations

import html
import importlib
import importlib.util
import threading
import time
from typing import Any, Optional

import ipywidgets as W

from remote.errors import RemoteError, ServerDied, ServerStartTimedOut
from workbench.engine.launch import LaunchCommand
from workbench.errors import LaunchRefused, ServerChoiceError, WorkbenchError
from workbench.errors import GpusHeld
from workbench.lab.clicks import clicks_of
from workbench.lab.gpu import read_gpus
from workbench.lab.start_progress import StartProgressView
from workbench.lab.gpu_pane import GpuPane
from workbench.lab.console_status import status_html
from workbench.lab.server_facts import COMMAND_CHARS, server_health, server_uptime, shorten_command
from workbench.lab.state import BoxState, ServerGone

__all__ = ["BoxConsole", "box_console", "PANES", "server_health", "server_uptime", "shorten_command",
           "COMMAND_CHARS"]

#: The panes of other modules, as (tab title, module, class): built when importable (each takes a
#: :class:`BoxState`), else a placeholder tab says the pane is not installed.
PANES = [
    ("Log", "workbench.lab.logs_pane", "LogPane"),
    ("Accept length", "workbench.lab.accept_pane", "AcceptPane"),
    ("Source", "workbench.lab.source_pane", "SourcePane"),
    ("Probes", "workbench.lab.probes_pane", "ProbesPane"),
]


def _panes(state: BoxState) -> list[tuple[str, Any]]:
    """``(title, pane or None, widget)`` for each of :data:`PANES`: the pane built on ``state`` when its
    module is importable; else a placeholder saying it is not installed; a pane whose constructor
    raised shows the error's type and message."""
    out = []
    for title, module, cls in PANES:
        if importlib.util.find_spec(module) is None:
            w = W.HTML(f"<i>The {html.escape(title)} pane is not installed ({module}.{cls}).</i>")
            w.add_class("wb-console-missing-pane")
            out.append((title, None, w))
            continue
        try:
            pane = getattr(importlib.import_module(module), cls)(state)
            out.append((title, pane, pane.widget))
        except Exception as exc:  # noqa: BLE001 - shown in the tab
            out.append((title, None, W.HTML(f"<pre>{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</pre>")))
    return out


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _button(label: str, cls: str, style: str = "") -> W.Button:
    b = W.Button(description=label, button_style=style, layout=W.Layout(width="auto"))
    b.add_class(cls)
    return b


class BoxConsole:
    """The box console on ``host`` (``"local"``: the sandbox box; else an SSH host) looking at the
    server on ``port`` (``None``: the only one running). ``engine``: ``"auto"`` (the running
    server's), ``"sglang"`` or ``"vllm"`` (:data:`workbench.lab.state.ENGINES`): the panes read the
    running server's engine (vLLM: its log's metrics lines, its ``/metrics`` counters, its probe
    recipes, its launch checked by the doctor's vLLM rules); with no server running, the engine asked
    for decides the command the Server tab offers. ``launch_command``: that command (default: the
    sandbox box's on that engine, :func:`workbench.sandbox_box.sandbox_launch_command` /
    :func:`~workbench.sandbox_box.sandbox_vllm_launch_command`); ``server_start_timeout``: seconds a
    launch may take to get healthy; ``timeout``: seconds for each box call.

    ``.widget``: an ipywidgets ``Tab`` (Status, Server, Journal, then :data:`PANES`). Methods do what
    the buttons do: :meth:`refresh`, :meth:`start`, :meth:`stop`, :meth:`restart`,
    :meth:`restore`; none raises for a box or server problem — the error is shown in the pane and
    recorded in :attr:`last_error`."""

    def __init__(self, host: str = "local", port: Optional[int] = None, *, launch_command: Optional[str] = None,
                 server_start_timeout: float = 300.0, timeout: float = 30.0, state: Optional[BoxState] = None,
                 engine: Any = "auto"):
        self.state = state or BoxState(host, port, timeout=timeout, engine=engine)
        self.host = self.state.host
        self.launch_command = launch_command
        self.server_start_timeout = server_start_timeout
        self.timeout = timeout
        self.session = None  # BoxSession, opened on the first launch / stop
        self.last_error: Optional[BaseException] = None
        self.last_findings: list = []
        self.last_restore = None
        self._busy = False
        # -- Status
        self.status_html = W.HTML()
        self.status_html.add_class("wb-console-status-view")
        self.refresh_button = _button("Refresh", "wb-console-refresh")
        self.refresh_button.on_click(self._click("refresh", self.refresh))
        self.gpu_pane = GpuPane()  # "Reclaim my orphaned GPU memory" (this user's own orphans only)
        self.gpu_pane.button.on_click(self._click("reclaim GPUs", self.reclaim_gpus))
        status_box = W.VBox([self.refresh_button, self.status_html, self.gpu_pane.widget])
        # -- Server
        self.command = W.Textarea(layout=W.Layout(width="100%", height="7em"))
        self.command.add_class("wb-console-command")
        self.start_button = _button("Start", "wb-console-start", "success")
        self.stop_button = _button("Stop", "wb-console-stop", "danger")
        self.restart_button = _button("Restart with this command", "wb-console-restart", "warning")
        self.force_button = _button("Launch anyway (the doctor says it will not start)", "wb-console-force",
                                    "danger")
        self.force_button.layout.display = "none"
        self.command.observe(self._on_command_edit, names="value")
        self.start_button.on_click(self._click("start", self.start))
        self.stop_button.on_click(self._click("stop", self.stop))
        self.restart_button.on_click(self._click("restart", self.restart))
        self.force_button.on_click(self._click("launch anyway", lambda: self.restart(force=True)))
        self.status_line = W.HTML()
        self.status_line.add_class("wb-console-status")
        self.start_progress = StartProgressView()  # a launch's phase, shards, last log line while it loads
        self.dropped_html = W.HTML()
        self.dropped_html.add_class("wb-console-dropped")
        clicks_of(self.state).on_drop = self._on_dropped_click
        self.findings_html = W.HTML()
        self.findings_html.add_class("wb-console-findings")
        server_box = W.VBox([W.HTML("<b>Launch command</b> (edit, then Start / Restart; the doctor checks it first)"),
                             self.command,
                             W.HBox([self.start_button, self.stop_button, self.restart_button, self.force_button],
                                    layout=W.Layout(flex_flow="row wrap")),
                             self.status_line, self.start_progress.widget, self.dropped_html,
                             self.findings_html])
        # -- Journal
        self.journal_html = W.HTML()
        self.journal_html.add_class("wb-console-journal")
        self.restore_button = _button("Put the box back", "wb-console-restore", "primary")
        self.restore_button.on_click(self._click("put the box back", self.restore))
        self.restore_html = W.HTML()
        self.restore_html.add_class("wb-console-restore-report")
        journal_box = W.VBox([self.restore_button, self.restore_html, self.journal_html])
        self.panes = _panes(self.state)
        children = [status_box, server_box, journal_box] + [w for _, _, w in self.panes]
        titles = ["Status", "Server", "Journal"] + [t for t, _, _ in self.panes]
        self.widget = W.Tab(children=children, titles=titles)
        self.widget.add_class("wb-console")
        self.widget.observe(self._on_tab, names="selected_index")
        self._buttons = [self.start_button, self.stop_button, self.restart_button, self.force_button,
                         self.restore_button, self.refresh_button, self.gpu_pane.button]
        self.refresh()
        self._prefill()

    def _click(self, name: str, fn):
        """The ``on_click`` callback running ``fn()`` through the shared click guard
        (``state.clicks``, :class:`workbench.lab.clicks.ClickGuard`): a click queued while an action
        ran is dropped, not run again."""
        return clicks_of(self.state).handler(name, fn)

    def _on_dropped_click(self, name: str) -> None:
        """The click guard dropped a click on ``name`` (made while an action ran): said under the
        status line (``wb-console-dropped``), so a double-click is seen to have run once."""
        n = len(clicks_of(self.state).dropped)
        self.dropped_html.value = (f"<i>ignored {n} click(s) made while an action ran (the last on “{_esc(name)}”): "
                                   "each action runs once per click made after it ended</i>")

    def _on_tab(self, change) -> None:
        """A pane's tab was selected: the pane re-reads the box (its ``refresh()``, which shows its
        own errors), so the Log, Accept length and Source tabs are filled when first looked at."""
        index = change["new"]
        first = len(self.widget.children) - len(self.panes)
        if isinstance(index, int) and index >= first:
            pane = self.panes[index - first][1]
            if pane is not None:
                pane.refresh()

    # -- reading the box --------------------------------------------------------------------------

    def _prefill(self) -> None:
        try:
            server = self.state.server()
        except (WorkbenchError, RemoteError) as exc:
            server = None
            self.last_error = exc
        if server is not None:
            self.command.value = server.command_line
        elif self.launch_command:
            self.command.value = self.launch_command
        elif self.state.engine_choice == "vllm":
            from workbench.sandbox_box import VLLM_DEFAULT_PORT, sandbox_vllm_launch_command

            self.command.value = sandbox_vllm_launch_command(port=self.state.port or VLLM_DEFAULT_PORT)
        else:
            from workbench.sandbox_box import sandbox_launch_command

            self.command.value = sandbox_launch_command(port=self.state.port or 30000)

    def status(self) -> dict:
        """The Status tab's facts as a dict: ``host``, ``port``, ``pid``, ``pgid``, ``command``,
        ``health`` (readiness state) and ``health_detail``, ``uptime_s``, ``engine`` (``sglang``,
        ``sandbox`` or ``vllm``: the server's), ``engine_note`` (when it is not the one asked for), ``engine_root``,
        ``engine_version``, ``log_path``, ``others`` (ports of the other servers), ``gpu``
        (:class:`workbench.lab.gpu.GpuReport`), ``error`` (why no server could be chosen, or ``None``).
        Raises what the box raises."""
        st = self.state
        facts: dict = {"host": st.host, "port": st.port, "pid": None, "error": None, "gone": None}
        try:
            server = st.server()
        except ServerGone as exc:
            facts["gone"] = exc
            server = None
        except ServerChoiceError as exc:
            facts["error"] = str(exc)
            server = None
        servers = st.servers()
        facts["others"] = [s.port for s in servers if server is None or s.pid != server.pid]
        if server is not None:
            facts.update(port=server.port, pid=server.pid, pgid=server.pgid, command=server.command_line,
                         log_path=server.log_path, engine=st.engine_name(server))
            if st.engine_choice not in ("auto", "sglang" if facts["engine"] == "sandbox" else facts["engine"]):
                facts["engine_note"] = (f"engine={st.engine_choice!r} was asked for, but the server on port "
                                        f"{server.port} runs {facts['engine']}: the console reads it as it is")
            h = server_health(st.box, server.port, timeout=3.0)
            facts.update(health=h.state, health_detail=h.detail)
            facts["uptime_s"] = server_uptime(st.box, server.pid, timeout=self.timeout)
            try:
                eng = st.engine()
                facts.update(engine_root=eng.root, engine_version=eng.version)
            except WorkbenchError as exc:
                facts.update(engine_root=None, engine_version=None, engine_error=_err(exc))
        try:
            facts["gpu"] = read_gpus(st.box, server_pgid=facts.get("pgid"), timeout=10)
        except (WorkbenchError, RemoteError) as exc:
            facts["gpu"] = None
            facts["gpu_error"] = _err(exc)
        return facts

    def refresh(self) -> None:
        """Re-read the box: the Status and Journal tabs. Errors are shown in the tab."""
        try:
            self.status_html.value = self._status_html(self.status())
        except Exception as exc:  # noqa: BLE001 - shown in the pane
            self.last_error = exc
            self.status_html.value = f"<pre class='wb-error'>{_esc(_err(exc))}</pre>"
        self._show_journal()

    def _status_html(self, f: dict) -> str:
        return status_html(f)


    # -- the journal -------------------------------------------------------------------------------

    def journal_lines(self) -> list[str]:
        """What the console changed on the box, one line each: from the journal on the box
        (original server stopped, servers started, files created) and the probes recorded
        (:func:`remote.probes.list_probes`). Empty when nothing is changed. Raises what the box raises."""
        from remote.probes import list_probes
        from workbench.session.journal import Journal

        box = self.state.box
        data = Journal(box, timeout=self.timeout).data
        lines = []
        orig = data.get("original_server") or {}
        if orig.get("stopped"):
            lines.append(f"stopped the original server (port {orig.get('port')}, pid {orig.get('pid')}): "
                         "Put the box back relaunches it")
        for s in data.get("started_servers") or []:
            lines.append(f"started pid {s.get('pid')} on port {s.get('port')} ({s.get('label')}): "
                         + shorten_command(s.get("argv") or []))
        for p in data.get("created_paths") or []:
            lines.append(f"created {p}")
        for probe in list_probes(box, timeout=self.timeout):
            lines.append(f"probe {probe.tag} at {probe.path}:{probe.line}")
        return lines

    def _show_journal(self) -> None:
        try:
            lines = self.journal_lines()
            self.journal_html.value = ("<b>What this console changed on the box</b>"
                                       "<ul style='white-space:normal;overflow-wrap:anywhere'>"
                                       + "".join(f"<li>{_esc(x)}</li>" for x in lines) + "</ul>") if lines \
                else "<i>Nothing changed on the box: it is as found.</i>"
        except Exception as exc:  # noqa: BLE001 - shown in the pane
            self.journal_html.value = f"<pre>{_esc(_err(exc))}</pre>"

    # -- actions -----------------------------------------------------------------------------------

    def _run(self, what: str, fn) -> Any:
        """Run ``fn`` with the buttons disabled and a ticking status line; errors shown, not raised."""
        self._busy = True
        for b in self._buttons:
            b.disabled = True
        t0 = time.monotonic()
        done = threading.Event()
        self.start_progress.clear()

        def tick():
            while not done.wait(1.0):
                self.status_line.value = f"{_esc(what)}… {time.monotonic() - t0:.0f} s"

        ticker = threading.Thread(target=tick, daemon=True)
        self.status_line.value = f"{_esc(what)}…"
        ticker.start()
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every failure is shown in the pane
            self.last_error = exc
            self._show_error(exc)
            return None
        finally:
            final = self.status_line.value
            done.set()
            ticker.join(timeout=2)
            self.status_line.value = final  # the outcome, never a last tick
            # re-read the box BEFORE the buttons come back: a click the user makes once they look
            # enabled must not fall inside this action (the click guard drops those as queued)
            try:
                self.refresh()
            finally:
                for b in self._buttons:
                    b.disabled = False
                self._busy = False

    def _log_now(self, exc: BaseException) -> Optional[list[str]]:
        """The end of the log of the server ``exc`` is about (``ServerDied`` / ``ServerStartTimedOut``
        carry ``.log_path``), read again now that the session stopped that server: the lines it
        wrote after the error was raised (a server stuck in its start-up warm-up logs the
        exception that killed it only then). ``None`` without a log path; a read that fails is one
        line saying so."""
        path = getattr(exc, "log_path", None)
        if not path:
            return None
        try:
            return self.state.box.tail(path, n=max(len(getattr(exc, "log_tail", None) or ()), 20), timeout=self.timeout)
        except RemoteError as again:
            return [f"(the log {path} could not be read again: {_err(again)})"]

    def _show_error(self, exc: BaseException) -> None:
        from workbench.errors import WorkbenchInputError

        tail = getattr(exc, "log_tail", None)
        if isinstance(exc, WorkbenchInputError):  # the command's own fault: said in plain words
            self.status_line.value = (f"<b style='color:#b00'>Not launched</b>: <pre class='wb-console-input-error' "
                                      f"style='white-space:pre-wrap'>{_esc(exc)}</pre>Nothing was stopped or started.")
            return
        text = f"<b style='color:#b00'>{_esc(type(exc).__name__)}</b>: <pre style='white-space:pre-wrap'>{_esc(exc)}</pre>"
        if tail and not isinstance(exc, (ServerDied, ServerStartTimedOut)):
            text += "<pre>" + _esc("\n".join(tail)) + "</pre>"
        if isinstance(exc, (ServerDied, ServerStartTimedOut)):  # the message holds the tail when raised
            now = self._log_now(exc)
            if now and now != list(tail or ()):
                text += (f"<b>The end of that server's log now</b> ({_esc(exc.log_path)}, after it was stopped):"
                         f"<pre class='wb-console-log-tail' style='white-space:pre-wrap'>{_esc(chr(10).join(now))}</pre>")
        if isinstance(exc, GpusHeld):  # not the doctor's: the table of holders, no "launch anyway"
            text = (f"<b style='color:#b00'>Launch refused: the GPUs are held</b>"
                    f"<pre class='wb-console-gpus-held' style='white-space:pre-wrap'>{_esc(exc)}</pre>"
                    + ("Your own orphans can go: “Reclaim my orphaned GPU memory” in the Status tab." if exc.orphans else ""))
        elif isinstance(exc, LaunchRefused):
            self.force_button.layout.display = None
            text = ("<b style='color:#b00'>Launch refused</b>: the doctor says this command will not start; "
                    "nothing was stopped or started. Fix the command, or click "
                    "“Launch anyway”.")
        self.status_line.value = text

    def _session(self, launch: Optional[LaunchCommand]):
        from workbench.session.box_session import BoxSession, open_box

        if self.session is None or self.session.finished:
            port = self.state.port or (int(launch.get("--port")) if launch is not None and launch.get("--port") else None)
            running = [s for s in self.state.servers() if port is not None and s.port == port]
            given = None if running or launch is None else launch.text
            box, inv, journal = open_box(self.state.host, launch_command=given, port=port,
                                         server_start_timeout=self.server_start_timeout)
            self.session = BoxSession(box, inv, journal, server_start_timeout=self.server_start_timeout)
            self.session.start_reporter = self.start_progress
            self.state.port = inv.port
        return self.session

    def _findings_html(self, findings) -> str:
        if not findings:
            return "<i>The doctor found nothing on this command.</i>"
        rows = "".join(f"<tr><td>{_esc(f.rule)}</td><td>{_esc(f.severity)}</td><td>{_esc(f.message)}</td>"
                       f"<td>{_esc(f.fix or '')}</td></tr>" for f in findings)
        return ("<b>The doctor's findings on this command</b><table class='wb-console-findings-table' "
                "style='text-align:left'><tr><th>rule</th><th>severity</th><th>message</th><th>fix</th></tr>"
                + rows + "</table>")

    def _clear_check(self) -> None:
        """A new check starts (or the command changed): the last check's findings and "Launch
        anyway" go away, so nothing shown belongs to another command."""
        self.last_findings = []
        self.findings_html.value = ""
        self.force_button.layout.display = "none"

    def _on_command_edit(self, _change) -> None:
        self.force_button.layout.display = "none"  # "Launch anyway" was for the command refused

    def _check_port(self, launch: LaunchCommand) -> None:
        """Refuse, in plain words, a ``--port`` that is no TCP port number or that is not the
        port this console drives (raises :class:`~workbench.errors.LaunchCommandError`)."""
        from workbench.errors import LaunchCommandError

        given = launch.get("--port")
        if given is None:
            return
        text = str(given).strip()
        if not text.isdigit() or not 1 <= int(text) <= 65535:
            raise LaunchCommandError(f"--port {given} is not a TCP port number: give a whole number 1-65535"
                                     + (f" (this console drives port {self.state.port})" if self.state.port else ""))
        if self.state.port is not None and int(text) != self.state.port:
            raise LaunchCommandError(
                f"this console drives the server on port {self.state.port}; to run a server on {int(text)} open a "
                f"console with port = {int(text)} in the parameters cell, or set --port {self.state.port} here")

    def _launch(self, text: str, force: bool):
        self._clear_check()
        launch = LaunchCommand.parse(text)
        self._check_port(launch)
        self.state.forget_server()  # the console replaces the server itself: its absence is no news
        session = self._session(launch)
        self.force_button.layout.display = "none"
        try:
            handle = session.launch(launch, "console", force=force)
        except LaunchRefused as exc:
            self.last_findings = list(exc.findings)
            self.findings_html.value = self._findings_html(exc.findings)
            raise
        finally:
            try:
                rep, _ = session.guard.report(launch)
                self.last_findings = list(rep.findings)
                self.findings_html.value = self._findings_html(rep.findings)
            except Exception as exc:  # noqa: BLE001 - the doctor's report is shown where it can be
                self.findings_html.value = f"<pre>the doctor could not run: {_esc(_err(exc))}</pre>"
        self.state.port = session.inventory.port
        errors = self.state.notify("started")
        self.status_line.value = (f"started pid {handle.pid} on port {self.state.port}: healthy"
                                  + "".join(f"<br>a pane failed to refresh: {_esc(_err(e))}" for e in errors))
        return handle

    def start(self, command: Optional[str] = None, *, force: bool = False):
        """Launch ``command`` (default: the command box's text) after the doctor's check, stopping what
        serves the port first; returns the ``ServerHandle`` or ``None`` (refused / failed: shown)."""
        text = command if command is not None else self.command.value
        if command is not None:
            self.command.value = command
        return self._run("starting", lambda: self._launch(text, force))

    def restart(self, command: Optional[str] = None, *, force: bool = False):
        """Restart the server with the command box's text (or ``command``): the server on the port
        is stopped (journalled) and the command launched, as :meth:`start` does."""
        return self.start(command, force=force)

    def stop(self) -> bool:
        """Stop the server on the port (journalled: :meth:`restore` relaunches the one found). True
        when something was stopped."""
        def go():
            port = self.state.port
            was = [s for s in self.state.servers() if port is not None and s.port == port]
            gone = self.state.seen if self.state.seen is not None and not was else None
            stopped = self._session(None).stop() and bool(was)
            errors = self.state.notify("stopped")
            self.status_line.value = (f"stopped pid {was[0].pid} on port {port}" if stopped else
                                      "nothing was running" + (f" (the server on port {gone.port}, pid {gone.pid}, "
                                                               "had already exited)" if gone else "")) + "".join(
                f"<br>a pane failed to refresh: {_esc(_err(e))}" for e in errors)
            return stopped
        return bool(self._run("stopping", go))

    def reclaim_gpus(self) -> Optional[dict]:
        """Stop this user's orphaned SGLang processes holding GPU memory and wait for it
        (:meth:`GpuPane.reclaim`), under the box's run lock (the console's session's, else taken
        for the action). Returns the outcome dict (``reclaimed``, ``survivors``, ``release``,
        ``note``); errors are shown, not raised (``None``)."""
        from workbench.session.box_session import holding_run_lock

        def go():
            if self.session is not None and not self.session.finished:
                return self.gpu_pane.reclaim(self.session.box, timeout=self.session.gpu_free_timeout)
            with holding_run_lock(self.state.box, self.state.host, "the box console (reclaim GPUs)"):
                return self.gpu_pane.reclaim(self.state.box, timeout=60.0)
        return self._run("reclaiming orphaned GPU memory", go)

    def restore(self):
        """Put the box back as found (:meth:`BoxSession.restore`, else :func:`restore_box` on the
        journal): shows each action, or "nothing to restore". Returns the ``RestoreReport``."""
        from workbench.session.journal import restore_box

        def go():
            if self.session is not None and not self.session.finished:
                report = self.session.restore()
                self.session.finished = True
            else:
                # no session of this console: undo only what a dead run left, never a live run's changes
                report = restore_box(self.state.box, server_start_timeout=self.server_start_timeout,
                                     unless_owner_alive=True, reporter=self.start_progress)
            self.last_restore = report
            errors = self.state.notify("restored")
            if not report.actions and not report.problems:
                self.restore_html.value = "<b>Nothing to restore</b>: the box is as found."
            else:
                self.restore_html.value = ("<b>Put the box back</b><ul>" + "".join(f"<li>{_esc(a)}</li>" for a in report.actions)
                                           + "".join(f"<li style='color:#b00'>could not: {_esc(p)}</li>"
                                                     for p in report.problems) + "</ul>")
            self.restore_html.value += "".join(f"<br>a pane failed to refresh: {_esc(_err(e))}" for e in errors)
            self.status_line.value = "box restored" if report.clean else "restore incomplete: see the Journal tab"
            self._prefill()
            return report
        return self._run("putting the box back", go)

    def close(self) -> None:
        """Put the box back, stop the panes' background polling and close the connections."""
        if self.session is not None and not self.session.finished:
            self.restore()
        for _title, pane, _w in self.panes:
            closer = getattr(pane, "close", None) or getattr(pane, "stop", None)
            if closer is not None:
                closer()
        self.state.close()


def box_console(**kw) -> BoxConsole:
    """A :class:`BoxConsole` (keywords as its constructor); display ``.widget`` in the notebook."""
    return BoxConsole(**kw)
