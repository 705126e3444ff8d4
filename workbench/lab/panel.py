"""An ipywidgets control panel over :class:`workbench.diagnosis.run.DiagnosisRun`, for JupyterLab.

One button per step of the ``diagnose_acceptance`` runbook, in order; each click runs the step and
shows what it returns in the panel's output area (errors too, with their type and message, and
the box restored when a step that changed it fails). The panel holds no diagnosis logic.
"""

from __future__ import annotations

import html
import re
import traceback
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
    ``.results`` what each step returned (by method name), ``.errors`` the exceptions caught.
    Under the buttons: ``.status`` (``wb-panel-status``), ``.latest`` (``wb-panel-latest``: the
    newest step's output, replaced each step), ``.verdict`` (``wb-panel-verdict``: after Finish,
    :func:`verdict_html`) and ``.history`` (``wb-panel-history``: a collapsed Accordion of the
    older steps' outputs, titled ``"N. label"``).

    ``start_kwargs`` are passed to :meth:`DiagnosisRun.start` (``host``, ``port``, ...); the host
    and port fields in the panel override them.
    """

    def __init__(self, **start_kwargs: Any):
        self.start_kwargs = dict(start_kwargs)
        self.run: DiagnosisRun | None = None
        self.results: dict[str, Any] = {}
        self.errors: list[BaseException] = []
        self.host = widgets.Text(value=str(self.start_kwargs.pop("host", "local")), description="host")
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
            widgets.HBox([self.host, self.port, self.allow_restart],
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
                    port = int(self.port.value) if self.port.value.strip() else None
                    kwargs = {"how": "N in the port field", **self.start_kwargs}
                    self.run = DiagnosisRun.start(host=self.host.value, port=port,
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
    file's absolute path, the outcome, accept length before → after (tokens per verify step,
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
    again_html = ("<p>Finish again: " + html.escape("; ".join(map(str, again))) + "</p>") if again else ""
    return (f"<div><p><b>Verdict</b>: <code>{html.escape(str(path))}</code></p>"
            f"<p><b>Outcome</b>: {html.escape(str(verdict.get('outcome')))} · accept length "
            f"<span class='wb-panel-before'>{number('before')}</span> → "
            f"<span class='wb-panel-after'>{number('after')}</span></p>"
            f"<p><b>The box was restored</b>:</p><ul>{items}</ul>{again_html}</div>")


def control_panel(**start_kwargs: Any) -> ControlPanel:
    """Build a :class:`ControlPanel`; display ``panel.widget`` in a notebook cell."""
    return ControlPanel(**start_kwargs)
