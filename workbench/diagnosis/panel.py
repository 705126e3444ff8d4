"""An ipywidgets control panel over :class:`workbench.diagnosis.run.DiagnosisRun`, for JupyterLab.

One button per step of the ``diagnose_acceptance`` runbook, in order; each click runs the step and
shows what it returns in the panel's output area (errors too, with their type and message, and
the box restored when a step that changed it fails). The panel holds no diagnosis logic.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import ipywidgets as widgets
from IPython.display import HTML, display

from workbench.diagnosis.run import DiagnosisRun

#: (button label, DiagnosisRun method name or None for start) in runbook order.
STEPS: list[tuple[str, str]] = [
    ("1 · Inventory", "start"),
    ("2 · Measure symptom", "measure_symptom"),
    ("3 · Hypotheses (static)", "check_hypotheses"),
    ("4 · Probe the mechanism", "probe"),
    ("5 · Fixes: relaunch & measure", "apply_fixes"),
    ("Finish · restore box", "finish"),
]


class ControlPanel:
    """The panel: ``.widget`` to display, ``.run`` the :class:`DiagnosisRun` once started,
    ``.results`` what each step returned (by method name), ``.errors`` the exceptions caught.

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
        self.output = widgets.Output()
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
            self.output,
        ])

    def _handler(self, method: str) -> Callable[[widgets.Button], None]:
        def on_click(_button: widgets.Button) -> None:
            self.step(method)
        return on_click

    def step(self, method: str) -> Any:
        """Run one step (what a click does) and show its result; returns it, or ``None`` after an
        error (kept in ``.errors`` and shown). All buttons are disabled while it runs and
        ``.status`` (CSS class ``wb-panel-status``) names the step; a step other than Finish on a
        run that finished starts a new run first and says so."""
        label = dict((m, lab) for lab, m in STEPS)[method]
        for button in self.buttons.values():
            button.disabled = True
        self.status.value = f"running {label}…"
        try:
            if method not in ("start", "finish") and self.run is not None and self.run.finished:
                with self.output:
                    display(HTML(f"<p>The previous run finished; started run {self.runs_started + 1}.</p>"))
                if self._step("start") is None:
                    return None
            result = self._step(method)
            self.status.value = f"{label}: done" if result is not None or method == "finish" else f"{label}: failed"
            return result
        finally:
            for button in self.buttons.values():
                button.disabled = False

    def _step(self, method: str) -> Any:
        with self.output:
            try:
                if method == "start":
                    port = int(self.port.value) if self.port.value.strip() else None
                    kwargs = {"how": "N in the port field", **self.start_kwargs}
                    self.run = DiagnosisRun.start(host=self.host.value, port=port,
                                                  allow_restart=self.allow_restart.value, **kwargs)
                    self.runs_started += 1
                    result = self.run.inventory
                else:
                    if self.run is None:
                        raise RuntimeError("start with '1 · Inventory' first")
                    result = getattr(self.run, method)()
                self.results[method] = result
                if method == "finish":
                    display(HTML(self.run.summary_html()))
                    for fig in self.run.figures().values():
                        fig.show()
                    display(self.run.ledger)
                elif result is not None:
                    display(result)
                return result
            except Exception as exc:  # shown to the user in the panel, kept in .errors, box restored
                self.errors.append(exc)
                display(HTML(f"<pre style='color:#b00020'>{type(exc).__name__}: {exc}\n\n"
                             f"{traceback.format_exc(limit=3)}</pre>"))
                if self.run is not None and method not in ("start", "finish"):
                    self.run.finish()
                    display(HTML("<p>The box was restored (see the verdict's <code>restore</code>).</p>"))
                return None


def control_panel(**start_kwargs: Any) -> ControlPanel:
    """Build a :class:`ControlPanel`; display ``panel.widget`` in a notebook cell."""
    return ControlPanel(**start_kwargs)
