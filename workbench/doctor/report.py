"""The doctor's result: :class:`DoctorReport` (findings, what was read, the corrected launch command)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any

from workbench.checkpoint import DraftFacts, TargetFacts
from workbench.engine.flag_table import FlagTable
from workbench.engine.launch import LaunchCommand, LaunchCommandError
from workbench.redact import REDACTOR
from workbench.report.tables import CELL_STYLE, inline_code, scroll_box
from workbench.rules.finding import Finding

__all__ = ["DoctorReport"]


@dataclass
class DoctorReport:
    """The doctor's result: ``findings`` (ordered: errors, warnings, info), ``inputs`` (what was
    read: ``{"what", "path", "how"}``), ``bytes_read`` (bytes returned by the box's reads and
    commands), ``wire_bytes`` (TCP bytes over SSH, ``None`` locally), ``engine_version``,
    ``engine_root``, ``launch`` (the command checked), ``duration_s``, ``notes``;
    ``rule_failures``: the rules whose check raised (each also a note), ``draft_facts`` /
    ``target_facts``: what was read; ``flag_table``: the launch flags the rules read (the box's,
    else the shipped table), the one the fixes are composed against; ``engine_fallback``: ``None``
    when the box's engine was read, else what its absence cost (the rules that used built-in release
    facts, the release, what could differ: :func:`workbench.doctor.fallback.engine_fallback`),
    printed first; ``running_acceptance``: with ``doctor --running``, the running server's current
    acceptance judged by the one definition (:class:`workbench.rules.acceptance_level.AcceptanceLevel`
    as ``{"level": ..., "source": ..., "notes": [...]}``: ``workbench.measure.running``), ``None``
    for a launch command; printed beside the findings, never instead of them."""

    findings: list[Finding]
    inputs: list[dict]
    bytes_read: int
    wire_bytes: int | None
    engine_version: str | None
    engine_root: str | None
    launch: str
    duration_s: float
    notes: list[str] = field(default_factory=list)
    draft_facts: DraftFacts | None = field(default=None, repr=False, compare=False)
    target_facts: TargetFacts | None = field(default=None, repr=False, compare=False)
    rule_failures: list = field(default_factory=list, repr=False, compare=False)
    flag_table: FlagTable | None = field(default=None, repr=False, compare=False)
    engine_fallback: dict | None = None
    running_acceptance: dict | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def exit_code(self) -> int:
        """0 no error finding, 1 at least one (the catalogue's exit codes)."""
        return 1 if self.errors else 0

    @property
    def rules(self) -> list[str]:
        return [f.rule for f in self.findings]

    def corrected_launch(self) -> str | None:
        """The launch command with every error/warning fix that is itself a launch command
        applied, or ``None`` when no finding proposes a change.

        Each fix was made from the command checked, so each is taken as its diff against that
        command and the fixes are composed (:meth:`LaunchCommand.compose`): a later fix never
        undoes an earlier one. Commands are read against :attr:`flag_table` (the box's flags, the
        ones the rules read), so a flag the box resolves differently from the shipped table
        neither raises nor is mis-read; nothing here raises on an unknown or ambiguous flag."""
        original = self._parse(self.launch)
        if original is None:
            return None
        fixes = []
        for f in self.findings:
            if f.severity == "info" or not f.fix or "of_corrected_launch" in f.evidence:
                continue  # a finding of the corrected launch proposes from that command, not this one
            proposed = self._parse(f.fix)
            if proposed is not None:
                fixes.append(proposed)
        if not fixes:
            return None
        fixed = LaunchCommand.compose(original, fixes)
        return fixed.to_string() if fixed.arg_tokens != original.arg_tokens or fixed.env != original.env else None

    def _parse(self, text: str) -> LaunchCommand | None:
        """``text`` read against :attr:`flag_table` (else the shipped table); ``None`` when it is
        no launch command (a fix given as advice text)."""
        for table in ((self.flag_table, None) if self.flag_table is not None else (None,)):
            try:
                return LaunchCommand.parse(text, table)
            except LaunchCommandError:
                continue
        return None

    def to_dict(self) -> dict:
        """The report as plain JSON (``doctor --json``, the verdict's ``preflight``), secrets
        redacted (:mod:`workbench.redact`); :meth:`corrected_launch` keeps the real values (it is
        launched)."""
        return REDACTOR.obj({"findings": [f.to_dict() for f in self.findings], "inputs": self.inputs,
                "bytes_read": self.bytes_read, "wire_bytes": self.wire_bytes, "engine_version": self.engine_version,
                "engine_root": self.engine_root, "launch_command": self.launch,
                "corrected_launch_command": self.corrected_launch(), "duration_s": self.duration_s,
                "notes": self.notes, "engine_fallback": self.engine_fallback, "exit_code": self.exit_code,
                "grouping": self.grouping(), **self._acceptance_keys()})

    def _acceptance_keys(self) -> dict:
        """``acceptance_level`` (the dict ``workbench logs`` / ``measure`` print under the same key) and
        ``acceptance_source`` / ``acceptance_notes``, only for a running server."""
        ra = self.running_acceptance
        if ra is None:
            return {}
        return {"acceptance_level": ra["level"], "acceptance_source": ra.get("source"),
                "acceptance_notes": list(ra.get("notes") or [])}

    def acceptance_line(self) -> str | None:
        """``acceptance: <words>`` (the words of ``workbench logs`` / ``measure``: the level's
        ``words``) and where it was read; for an unknown level, why; ``None`` for a launch command."""
        ra = self.running_acceptance
        if ra is None:
            return None
        level = ra["level"]
        if level["level"] == "unknown":
            return f"acceptance: unknown: {level['words']} ({'; '.join(ra.get('notes') or []) or 'nothing measured yet'})"
        return f"acceptance: {level['words']}" + (f"    [{ra['source']}]" if ra.get("source") else "")

    def grouping(self) -> dict:
        """The findings grouped by cause (:func:`workbench.rules.links.attribute` over the declared
        links of :mod:`workbench.rules.consequences`, whose evidence conditions must hold, and the
        links a rule marks itself, ``evidence["consequence_of"]``): ``causes`` — one entry per finding
        no other finding explains (``index`` into :attr:`findings`, ``rule``, ``consequences``: the
        findings whose chain of causes ends at it, each ``{"index", "rule", "explained_by",
        "mechanism"}``); ``root_causes`` / ``consequences``: how many errors are each."""
        from workbench.rules.links import attribute, root_of

        links = attribute(self.findings)
        causes: dict[int, dict] = {}
        for i, f in enumerate(self.findings):
            if i not in links:
                causes[i] = {"index": i, "rule": f.rule, "consequences": []}
        for i, link in sorted(links.items()):
            root = root_of(i, links)
            causes.setdefault(root, {"index": root, "rule": self.findings[root].rule, "consequences": []})
            causes[root]["consequences"].append({"index": i, "rule": self.findings[i].rule,
                                                 "explained_by": self.findings[link.cause].rule,
                                                 "mechanism": link.mechanism})
        errors = [i for i, f in enumerate(self.findings) if f.severity == "error"]
        return {"causes": list(causes.values()),
                "root_causes": sum(1 for i in errors if i not in links),
                "consequences": sum(1 for i in errors if i in links)}

    def _finding_lines(self, f: Finding, indent: str = "") -> list[str]:
        lines = []
        for k, v in f.evidence.items():
            if isinstance(v, dict) and set(v) == {"value", "source"}:
                lines.append(f"{indent}          {k} = {json.dumps(v['value'], default=str)}    [{v['source']}]")
            else:
                lines.append(f"{indent}          {k} = {json.dumps(v, default=str)[:300]}")
        if f.fix:
            lines.append(f"{indent}   fix:   {f.fix}")
        if f.prevents_start:
            lines.append(f"{indent}   start: the server does not start with this (a runbook refuses the launch; "
                         "force_launch overrides)")
        return lines

    def to_text(self) -> str:
        """Terminal output: one block per finding, evidence indented (a finding whose fault stops
        start-up says so); a finding another one explains (:meth:`grouping`) is printed indented
        under its root cause as ``consequence`` with the link's mechanism, and the summary line
        counts errors as root causes and consequences. When the engine was not found, that comes
        first, with what it costs (:func:`workbench.doctor.fallback.fallback_lines`)."""
        from workbench.doctor.fallback import fallback_lines

        lines = fallback_lines(self.engine_fallback)
        grouping = self.grouping()
        for cause in grouping["causes"]:
            f = self.findings[cause["index"]]
            lines.append(f"{f.severity.upper():7} {f.rule}: {f.message}")
            lines.extend(self._finding_lines(f))
            if cause["consequences"]:
                lines.append(f"   consequences of {f.rule} ({len(cause['consequences'])}; fixing it fixes them):")
            for c in cause["consequences"]:
                e = self.findings[c["index"]]
                lines.append(f"     └ {e.severity} {e.rule}: {e.message}")
                lines.append(f"          because {c['explained_by']}: {c['mechanism']}")
                lines.extend(self._finding_lines(e, "     "))
            lines.append("")
        if self.running_acceptance is not None:
            lines.append(self.acceptance_line())
            lines.extend(f"note: {n}" for n in self.running_acceptance.get("notes") or []
                         if self.running_acceptance["level"]["level"] != "unknown")
        counts = {s: sum(f.severity == s for f in self.findings) for s in ("error", "warning", "info")}
        split = (f" ({grouping['root_causes']} root cause{'s' if grouping['root_causes'] != 1 else ''}, "
                 f"{grouping['consequences']} consequence{'s' if grouping['consequences'] != 1 else ''})"
                 if grouping["consequences"] else "")
        lines.append(f"{counts['error']} error(s){split}, {counts['warning']} warning(s), {counts['info']} info; "
                     f"engine {self.engine_version or 'unknown'}; read {self.bytes_read} bytes in {self.duration_s:.2f} s")
        for n in self.notes:
            lines.append(f"note: {n}")
        fixed = self.corrected_launch()
        if fixed:
            lines.append(f"corrected launch command: {fixed}")
        return REDACTOR.text("\n".join(lines))

    def fix_html(self) -> str:
        """The corrected launch command and its diff against the checked one, as HTML."""
        fixed = self.corrected_launch()
        if fixed is None:
            return "<p>No finding proposes a launch-command change.</p>"
        diff = self._parse(self.launch).diff(self._parse(fixed))
        rows = "".join(f"<tr><td style='{CELL_STYLE}'><code>{html.escape(f)}</code></td><td style='color:#b00020;{CELL_STYLE}'><code>- {html.escape(str(a))}"
                       f"</code></td><td style='color:#1b7a1b;{CELL_STYLE}'><code>+ {html.escape(str(b))}</code></td></tr>"
                       for f, a, b in diff)
        return REDACTOR.text(f"<p><b>Corrected launch command</b>:</p><pre style='white-space:pre-wrap'>"
                             f"{html.escape(fixed)}</pre>" + scroll_box(f"<table>{rows}</table>"))

    def write_json(self, path: Any) -> Any:
        """Write :meth:`to_dict` as JSON to ``path`` (a local path; parents created); returns it."""
        from pathlib import Path

        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.to_dict(), indent=2, default=str))
        return out

    def _repr_html_(self) -> str:
        colour = {"error": "#cf222e", "warning": "#9a6700", "info": "#57606a"}
        rows = []
        under = {c["index"]: (cause["rule"], c["mechanism"]) for cause in self.grouping()["causes"]
                 for c in cause["consequences"]}
        for i, f in enumerate(self.findings):
            note = (f"<br><small class='wb-doctor-consequence'>a consequence of <code>{html.escape(under[i][0])}</code>: "
                    f"{html.escape(under[i][1])}</small>" if i in under else "")
            ev = "<br>".join(
                f"<code>{html.escape(str(k))}</code> = <code>{html.escape(json.dumps(v['value'], default=str))}</code>"
                f" <small>({html.escape(str(v['source']))})</small>" if isinstance(v, dict) and set(v) == {"value", "source"}
                else f"<code>{html.escape(str(k))}</code> = <code>{html.escape(json.dumps(v, default=str)[:300])}</code>"
                for k, v in f.evidence.items())
            rows.append(f"<tr><td style='color:{colour[f.severity]};{CELL_STYLE}'><b>{f.severity}</b></td>"
                        f"<td style='{CELL_STYLE}'><code>{f.rule}</code></td>"
                        f"<td style='{CELL_STYLE}'>{inline_code(f.message)}{note}</td><td style='{CELL_STYLE}'>{ev}</td>"
                        f"<td style='{CELL_STYLE}'><code>{html.escape(f.fix or '')}</code></td></tr>")
        head = "<tr>" + "".join(f"<th style='{CELL_STYLE}'>{c}</th>" for c in ("severity", "rule", "message", "evidence", "fix")) + "</tr>"
        summary = (f"<p>engine {html.escape(str(self.engine_version))} at {html.escape(str(self.engine_root))}; "
                   f"{len(self.inputs)} inputs, {self.bytes_read} bytes read, {self.duration_s:.2f} s</p>")
        if self.running_acceptance is not None:
            summary += f"<p class='wb-doctor-acceptance'>{html.escape(self.acceptance_line())}</p>"
        fb = ""
        if self.engine_fallback:
            from workbench.doctor.fallback import fallback_lines

            fb = ("<div class='wb-doctor-engine-fallback' style='border:2px solid #cf222e;padding:4px'>"
                  f"<pre style='white-space:pre-wrap'>{html.escape(chr(10).join(fallback_lines(self.engine_fallback)))}"
                  "</pre></div>")
        return REDACTOR.text(f"<h4>Preflight findings</h4>{fb}{summary}" + scroll_box(f"<table>{head}{''.join(rows) or '<tr><td colspan=5>no findings</td></tr>'}</table>"))


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """``findings`` without repeats (same rule and message), errors first, then warnings, then
    information, each in the order found."""
    seen: set = set()
    out = []
    for f in findings:
        key = (f.rule, f.message)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda f: order[f.severity])
