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
            self.buttons[method] = button
        self.widget = widgets.VBox([
            widgets.HBox([self.host, self.port, self.allow_restart]),
            widgets.HBox(list(self.buttons.values())),
            self.output,
        ])

    def _handler(self, method: str) -> Callable[[widgets.Button], None]:
        def on_click(_button: widgets.Button) -> None:
            self.step(method)
        return on_click

    def step(self, method: str) -> Any:
        """Run one step (what a click does) and show its result; returns it, or ``None`` after an
        error (kept in ``.errors`` and shown)."""
        with self.output:
            try:
                if method == "start":
                    port = int(self.port.value) if self.port.value.strip() else None
                    self.run = DiagnosisRun.start(host=self.host.value, port=port,
                                                  allow_restart=self.allow_restart.value, **self.start_kwargs)
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
