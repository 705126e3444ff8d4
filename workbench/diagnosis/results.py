"""The values a diagnosis step returns and the runbook shows: :class:`Measurement` (acceptance of
one server), :class:`StartFailure` (a launch whose server did not start, or that the guard refused),
:class:`StepResult` (one step's outcome) and :class:`HypothesisTable` (the ledger after a step), each
with its ``_repr_html_`` for the notebook cell that returned it.

Imports only the report's HTML helpers, the redactor and the rules' :class:`Finding`: the lowest
room of :mod:`workbench.diagnosis` after the ledger.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from workbench.redact import REDACTOR
from workbench.report.tables import html_table, inline_code, scroll_box
from workbench.rules.finding import Finding

__all__ = ["Measurement", "StartFailure", "StepResult", "HypothesisTable", "fmt"]


def fmt(x: Any) -> str:
    """A number for a sentence or a table cell: ``—`` for ``None``, floats with 3 decimals."""
    return "—" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


@dataclass
class Measurement:
    """Acceptance measured on one server (``label``): the ``/generate`` measurement and the decode
    log records written while it ran."""

    label: str
    launch_command: str
    generate: Any  # workbench.measure.generate.AcceptanceMeasurement
    log_records: list[dict]
    log_path: str | None
    #: when the first accept length was within NEAR_THRESHOLD_BAND of a threshold: each
    #: measurement's accept length and the thresholds (``generate`` is then both pooled)
    remeasured: dict | None = None

    @property
    def accept_length(self) -> float | None:
        return self.generate.accept_length

    def to_dict(self) -> dict[str, Any]:
        out = self.generate.to_dict()
        out.update({"label": self.label, "launch_command": self.launch_command, "log_path": self.log_path,
                    "log_decode_records": len(self.log_records), "remeasured": self.remeasured})
        if self.log_records:
            lens = [r["accept_len"] for r in self.log_records if r.get("accept_len") is not None]
            out["log_accept_len_last"] = lens[-1] if lens else None
        return out

    def _repr_html_(self) -> str:
        g = self.generate
        rows = [
            ("server", self.label),
            ("accept length (Σ completion tokens / Σ verify steps)", fmt(g.accept_length)),
            ("accept rate", fmt(g.accept_rate)),
            ("requests (warm-up excluded)", len(g.records)),
            ("completion tokens / verify steps", f"{g.total_tokens} / {g.verify_steps}"),
            ("throughput (tokens/s)", fmt(g.tokens_per_s)),
            ("decode log lines read", len(self.log_records)),
        ]
        return f"<h4>Acceptance: {html.escape(self.label)}</h4>" + html_table(rows)


@dataclass
class StartFailure:
    """A launch whose server did not start: ``label``, ``launch_command``, ``error`` (one line),
    ``log_tail`` (its last log lines), ``exception`` (the last exception line of the log, if any).
    ``refused``: for a launch the guard refused (never made: no process, no log), the doctor's
    findings that say it would not start (dicts); ``None`` for a launch that was made. ``death``:
    what its log says it died of (:meth:`workbench.logs.deaths.Death.to_dict`: the engine's own
    line, the step, the rank, the known death; ``attribution`` added once the doctor's findings
    are read: :func:`workbench.diagnosis.deaths.attribute_deaths`), None when no line says."""

    label: str
    launch_command: str
    error: str
    log_tail: list[str]
    exception: str | None
    refused: list[dict] | None = None
    death: dict | None = None

    def __post_init__(self) -> None:
        # The log and the exception are the server's text: a key or token it printed (its own
        # argv in a traceback, a URL with a password) must not reach the report.
        self.launch_command = REDACTOR.text(self.launch_command)
        self.error = REDACTOR.text(self.error)
        self.exception = REDACTOR.text(self.exception)
        self.log_tail = [REDACTOR.text(line) for line in self.log_tail]
        if self.death is not None:
            self.death = REDACTOR.obj(self.death)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "launch_command": self.launch_command, "error": self.error,
                "exception": self.exception, "log_tail": list(self.log_tail), "refused": self.refused,
                "death": self.death}

    def _repr_html_(self) -> str:
        if self.refused is not None:
            items = "".join(f"<li><code>{html.escape(f['rule'])}</code>: {html.escape(f['message'])}</li>"
                            for f in self.refused)
            return (f"<h4>Launch refused ({html.escape(self.label)}): the doctor's findings say the server would "
                    f"not start</h4><p>No launch was made (nothing on the box changed for it):</p><ul>{items}</ul>"
                    "<p><small>force_launch=True launches anyway.</small></p>")
        tail = html.escape("\n".join(self.log_tail[-15:]))
        died = ""
        if self.death:
            sig = self.death.get("signature") or {}
            died = (f"<p>died in <b>{html.escape(str(self.death.get('step')))}</b>"
                    + (f" ({html.escape(str(self.death['rank']))})" if self.death.get("rank") else "")
                    + f": <code>{html.escape(self.death['exception'])}</code>"
                    + (f"<br>a known death: {html.escape(sig['id'])} ({html.escape(sig['fault'])}); rules: "
                       f"{html.escape(', '.join(sig['rules']) or 'none models it')}" if sig else
                       "<br>no known death has that text") + "</p>")
        return (f"<h4>The server did not start ({html.escape(self.label)})</h4>"
                f"<p>{html.escape(self.exception or self.error)}</p>{died}"
                f"<pre style='white-space:pre-wrap;max-height:20em;overflow:auto'>{tail}</pre>")


@dataclass
class StepResult:
    """A step's outcome: a title, a summary, and rows or findings to show."""

    hypothesis: str
    verdict: str
    summary: str
    findings: list[Finding] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        colour = {"confirmed": "#1a7f37", "refuted": "#cf222e"}.get(self.verdict, "#9a6700")  # as the ledger
        parts = [f"<h4>{html.escape(self.hypothesis)}: <span style='color:{colour}'>{self.verdict}</span></h4>",
                 f"<p>{html.escape(self.summary)}</p>"]
        for f in self.findings:
            parts.append(f"<p><b>{html.escape(f.rule)}</b> ({f.severity}): {html.escape(f.message)}</p>")
            parts.append(html_table([(k, v) for k, v in f.evidence.items()]))
            if f.fix:
                parts.append(f"<p>fix: <code>{html.escape(f.fix)}</code></p>")
        if self.data:
            parts.append(html_table(list(self.data.items())))
        return REDACTOR.text("".join(parts))  # a finding's fix is a launch command, key included


@dataclass
class HypothesisTable:
    """The hypotheses after a step: rows of ``(id, verdict, summary)``, in the order the causes act."""

    rows: list[tuple[str, str, str]]
    title: str = "Hypotheses"

    def _repr_html_(self) -> str:
        colour = {"confirmed": "#1a7f37", "refuted": "#57606a", "inconclusive": "#9a6700"}
        body = "".join(
            f"<tr><td style='text-align:left'><code>{html.escape(h)}</code></td>"
            f"<td style='color:{colour.get(v, '#000')};text-align:left'><b>{v}</b></td>"
            f"<td style='text-align:left'>{inline_code(s)}</td></tr>" for h, v, s in self.rows)
        return (f"<h4>{html.escape(self.title)}</h4>" + scroll_box(
                f"<table><tr><th style='text-align:left'>hypothesis</th>"
                f"<th style='text-align:left'>verdict</th><th style='text-align:left'>why</th></tr>{body}</table>"))
