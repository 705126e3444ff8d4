"""An ipywidgets control panel over :class:`workbench.diagnosis.run.DiagnosisRun`, for JupyterLab.

One button per step of the ``diagnose_acceptance`` runbook, in order; each click runs the step and
shows what it returns in the panel's output area (errors too, with their type and message, and
the box restored when a step that changed it fails). The panel holds no diagnosis logic.
"""

from __future__ import annotations

import html
import re
import traceback
from pathlib import Path
from typing import Any, Callable

import ipywidgets as widgets
from IPython.display import HTML, display

from workbench.diagnosis.run import DiagnosisRun
from workbench.errors import DiagnosisError, WorkbenchError

#: (button label, DiagnosisRun method name or None for start) in runbook order.
STEPS: list[tuple[str, str]] = [
    ("1 · Inventory", "start"),
    ("2 · Measure symptom", "measure_symptom"),
    ("3 · Hypotheses (static)", "check_hypotheses"),
    ("4 · Probe the mechanism", "probe"),
    ("5 · Fixes: relaunch & measure", "apply_fixes"),
    ("Finish · restore box", "finish"),
]


#: The step number a button's label starts with ("1 · "), left out of the history's titles.
_STEP_NUMBER = re.compile(r"^\d+ · ")


class ControlPanel:
    """The panel: ``.widget`` to display, ``.run`` the :class:`DiagnosisRun` once started,
    ``.results`` what each step returned (by method name), ``.errors`` the exceptions caught,
    ``.notices`` what the panel did on its own (a run finished before a new Inventory), as shown.
    Under the buttons: ``.status`` (``wb-panel-status``), ``.latest`` (``wb-panel-latest``: the
    newest step's output, replaced each step), ``.verdict`` (``wb-panel-verdict``: after Finish,
    :func:`verdict_html`) and ``.history`` (``wb-panel-history``: a collapsed Accordion of the
    older steps' outputs, titled ``"N. label"``).

    ``start_kwargs`` are passed to :meth:`DiagnosisRun.start` (``host``, ``port``, ...); the host,
    port and engine fields in the panel override them. ``engine`` (``.engine``, a Dropdown,
    ``wb-panel-engine``): ``"auto"`` (the running server's engine: SGLang or vLLM; with none running
    the sandbox box on SGLang), ``"sglang"`` or ``"vllm"`` (with none running, the sandbox box on
    vLLM's CPU build); a value not among :data:`workbench.lab.state.ENGINES` raises
    :class:`~workbench.errors.WorkbenchInputError` when the panel is built. A relative ``report_dir`` (default ``"reports"``)
    is resolved against the project root (:func:`resolve_report_dir`). The port field is read by
    :func:`parse_port` (a bad value: one line, nothing started). Inventory while the panel's own
    run is unfinished finishes that run first and says so.
    """

    def __init__(self, **start_kwargs: Any):
        self.start_kwargs = dict(start_kwargs)
        self.start_kwargs["report_dir"] = resolve_report_dir(self.start_kwargs.get("report_dir", "reports"))
        self.run: DiagnosisRun | None = None
        self.results: dict[str, Any] = {}
        self.errors: list[BaseException] = []
        self.notices: list[str] = []  # what the panel did on its own (a run finished first), as shown
        self.host = widgets.Text(value=str(self.start_kwargs.pop("host", "local")), description="host")
        from workbench.lab.state import ENGINES, engine_value

        self.engine = widgets.Dropdown(options=list(ENGINES), description="engine",
                                       value=engine_value(self.start_kwargs.pop("engine", None), where="control panel"))
        self.engine.add_class("wb-panel-engine")
        port = self.start_kwargs.pop("port", None)
        self.port = widgets.Text(value="" if port is None else str(port), description="port",
                                 placeholder="from the launch command")
        self.allow_restart = widgets.Checkbox(value=self.start_kwargs.pop("allow_restart", True),
                                              description="allow restart")
        self.output = widgets.Output()  # the current step's area (replaced each step)
        self.latest = widgets.VBox([])
        self.latest.add_class("wb-panel-latest")
        self.history = widgets.Accordion(children=[], selected_index=None)
        self.history.add_class("wb-panel-history")
        self.verdict = widgets.HTML(value="")
        self.verdict.add_class("wb-panel-verdict")
        self.step_count = 0
        self._latest_title = ""
        self.buttons: dict[str, widgets.Button] = {}
        for label, method in STEPS:
            button = widgets.Button(description=label, layout=widgets.Layout(width="auto"))
            button.on_click(self._handler(method))
            button.add_class(f"wb-panel-{method}")
            self.buttons[method] = button
        self.status = widgets.HTML(value="")
        self.status.add_class("wb-panel-status")
        self.runs_started = 0
        self.widget = widgets.VBox([
            widgets.HBox([self.host, self.port, self.engine, self.allow_restart],
                         layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox(list(self.buttons.values()), layout=widgets.Layout(flex_flow="row wrap")),
            self.status,
            self.latest,
            self.verdict,
            self.history,
        ])

    def _handler(self, method: str) -> Callable[[widgets.Button], None]:
        def on_click(_button: widgets.Button) -> None:
            self.step(method)
        return on_click

    def step(self, method: str) -> Any:
        """Run one step (what a click does) and show its result; returns it, or ``None`` after an
        error (kept in ``.errors`` and shown). All buttons are disabled while it runs and
        ``.status`` (CSS class ``wb-panel-status``) names the step (``running <label>…``, then
        ``<label>: done``, or ``<label>: failed`` when an error was caught, Finish included); a step other than Finish on a
        run that finished starts a new run first and says so. The step's output goes to a new
        area shown in ``.latest`` (``wb-panel-latest``, directly under the buttons); the one it
        replaces moves to ``.history``, a collapsed Accordion (oldest first). After Finish,
        ``.verdict`` (``wb-panel-verdict``) shows :func:`verdict_html`."""
        label = dict((m, lab) for lab, m in STEPS)[method]
        for button in self.buttons.values():
            button.disabled = True
        self.status.value = f"running {label}…"
        self._new_output(label)
        try:
            if method not in ("start", "finish") and self.run is not None and self.run.finished:
                with self.output:
                    display(HTML(f"<p>The previous run finished; started run {self.runs_started + 1}.</p>"))
                if self._step("start") is None:
                    self.status.value = f"{label}: failed"
                    return None
            errors = len(self.errors)
            result = self._step(method)
            failed = len(self.errors) > errors or (result is None and method != "finish")
            self.status.value = f"{label}: failed" if failed else f"{label}: done"
            return result
        finally:
            for button in self.buttons.values():
                button.disabled = False

    def _finish_current(self) -> None:
        """Inventory pressed while the panel's own run is unfinished: finish that run first (its
        box restored, its verdict written) and say so in the step's output, so the new run does
        not meet the old one's run lock (issue 15, trial finding 12). An error finishing it is
        raised (the new run is not started)."""
        run = self.run
        where = f"port {run.inventory.port}" if run.inventory is not None and run.inventory.port else "its port"
        run.finish()
        notice = (f"Finished the current run ({where}) first: its box was restored and its verdict written to "
                  f"{(run.report_dir / 'diagnose_acceptance.json').resolve()} (outcome {_outcome_text(run.verdict)}).")
        self.notices.append(notice)
        display(HTML(f"<p class='wb-panel-notice'>{html.escape(notice)}</p>"))

    def _new_output(self, label: str) -> None:
        """A fresh output area for the step ``label`` in ``.latest``; the previous one, if any,
        becomes the last (collapsed) entry of ``.history``."""
        previous = self.latest.children[0] if self.latest.children else None
        if previous is not None:
            self.history.children = (*self.history.children, previous)
            self.history.titles = (*self.history.titles[:len(self.history.children) - 1], self._latest_title)
            self.history.selected_index = None
        self.step_count += 1
        self._latest_title = f"{self.step_count}. {_STEP_NUMBER.sub('', label)}"  # "1 · Inventory" -> "1. Inventory"
        self.output = widgets.Output()
        self.latest.children = (self.output,)

    def _step(self, method: str) -> Any:
        with self.output:
            try:
                if method == "start":
                    port = parse_port(self.port.value)  # before anything touches the box
                    if self.run is not None and not self.run.finished:
                        self._finish_current()
                    kwargs = {"how": "N in the port field", **self.start_kwargs}
                    engine = None if self.engine.value == "auto" else self.engine.value
                    self.run = DiagnosisRun.start(host=self.host.value, port=port, engine=engine,
                                                  allow_restart=self.allow_restart.value, **kwargs)
                    self.runs_started += 1
                    # A tqdm widget bar is closed when its measurement ends (leave=False): its view
                    # in a step's output would then read "Error displaying widget: model not found"
                    # once that output moves into the history. One text line per measurement instead.
                    self.run.progress = "text"
                    self.verdict.value = ""
                    result = self.run.inventory
                else:
                    if self.run is None:
                        raise DiagnosisError("no run yet: start with '1 · Inventory' first")
                    result = getattr(self.run, method)()
                self.results[method] = result
                if method == "finish":
                    self.verdict.value = verdict_html(self.run)
                    display(HTML(self.run.summary_html()))
                    for fig in self.run.figures().values():
                        fig.show()
                    display(self.run.ledger)
                elif result is not None:
                    display(result)
                return result
            except Exception as exc:  # shown to the user in the panel, kept in .errors, box restored
                self.errors.append(exc)
                # a typed workbench error says what was wrong and what to do: no traceback around it
                trace = "" if isinstance(exc, WorkbenchError) else "\n\n" + traceback.format_exc(limit=3)
                display(HTML(f"<pre style='color:#b00020;white-space:pre-wrap'>"
                             f"{html.escape(f'{type(exc).__name__}: {exc}{trace}')}</pre>"))
                if self.run is not None and method not in ("start", "finish") and not self.run.finished:
                    try:
                        self.run.finish()
                    except Exception as again:  # shown and kept: the box may still be changed
                        self.errors.append(again)
                        display(HTML(f"<pre style='color:#b00020;white-space:pre-wrap'>restoring failed: "
                                     f"{html.escape(f'{type(again).__name__}: {again}')}</pre>"))
                        return None
                    self.verdict.value = verdict_html(self.run)
                    display(HTML("<p>The box was restored (see the verdict's <code>restore</code>).</p>"))
                return None


def verdict_html(run: DiagnosisRun) -> str:
    """What a finished ``run`` left, as HTML for the panel's ``wb-panel-verdict``: the verdict
    file's absolute path, the outcome (with the verdict's ``outcome_detail`` when it has one:
    ``inconclusive: symptom not measured``), accept length before → after (tokens per verify step,
    as measured; "not measured" when absent) and each restore action the box took (the verdict's
    ``restore.actions`` / ``problems``, then ``restore_again`` of a later Finish). Empty before
    the run finished."""
    verdict = run.verdict
    if not verdict:
        return ""
    path = (run.report_dir / "diagnose_acceptance.json").resolve()

    def number(side: str) -> str:
        value = (verdict.get("acceptance") or {}).get(side, {}).get("accept_length")
        return f"{value:.2f}" if isinstance(value, (int, float)) else "not measured"

    restore = verdict.get("restore") or {}
    actions = list(restore.get("actions") or []) + [f"could not undo: {p}" for p in restore.get("problems") or []]
    again = verdict.get("restore_again")
    items = "".join(f"<li>{html.escape(str(a))}</li>" for a in actions) or "<li>nothing to undo</li>"
    outcome = _outcome_text(verdict)
    again_html = ("<p>Finish again: " + html.escape("; ".join(map(str, again))) + "</p>") if again else ""
    return (f"<div><p><b>Verdict</b>: <code>{html.escape(str(path))}</code></p>"
            f"<p><b>Outcome</b>: {html.escape(outcome)} · accept length "
            f"<span class='wb-panel-before'>{number('before')}</span> → "
            f"<span class='wb-panel-after'>{number('after')}</span></p>"
            f"<p><b>The box was restored</b>:</p><ul>{items}</ul>{again_html}</div>")


def _outcome_text(verdict: dict) -> str:
    """The verdict's outcome with its ``outcome_detail`` when it has one (``"inconclusive:
    symptom not measured"``), never a bare word that hides what was not decided."""
    outcome = str(verdict.get("outcome"))
    return f"{outcome}: {verdict['outcome_detail']}" if verdict.get("outcome_detail") else outcome


def parse_port(text: str) -> int | None:
    """The panel's port field: ``None`` when blank (the only server running), else a TCP port
    1–65535. Raises :class:`DiagnosisError` (one line, shown without a traceback) for anything
    else (``"abc"``, ``"-1"``, ``"70000"``, ``"3.5"``) naming the value."""
    value = text.strip()
    if not value:
        return None
    try:
        port = int(value, 10)
    except ValueError:
        port = None
    if port is None or not 1 <= port <= 65535:
        raise DiagnosisError(f"the port field must be a TCP port 1–65535 or empty (the only server running), "
                             f"got {value!r}; nothing was started")
    return port


#: What marks a project root for :func:`resolve_report_dir`.
_ROOT_MARKERS = (".git", "pyproject.toml")


def resolve_report_dir(report_dir: str | Path, cwd: Path | None = None) -> Path:
    """Where the panel's Finish writes the verdict: ``report_dir`` as given when absolute; when
    relative, against the project root — the nearest directory from ``cwd`` (default: the
    kernel's working directory, which JupyterLab sets to the notebook's folder) upwards holding
    ``.git`` or ``pyproject.toml`` — so the default ``"reports"`` is the repository's
    ``reports/`` whether the notebook sits in ``notebooks/`` or at the root (issue 15, trial
    finding 15); against ``cwd`` itself when no directory up holds either. Returns an absolute
    path (not created here)."""
    path = Path(report_dir).expanduser()
    if path.is_absolute():
        return path
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in _ROOT_MARKERS):
            return folder / path
    return here / path


def control_panel(**start_kwargs: Any) -> ControlPanel:
    """Build a :class:`ControlPanel`; display ``panel.widget`` in a notebook cell."""
    return ControlPanel(**start_kwargs)
