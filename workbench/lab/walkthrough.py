"""The walkthrough notebook's steps (``notebooks/walkthrough.ipynb``): the ``diagnose_acceptance``
runbook's story, one call per cell, for a person who runs and re-runs the cells one by one.

Every function here wraps ONE step of :class:`workbench.diagnosis.DiagnosisRun` (the same calls
the runbook makes, in the same order) and returns a view of what that step established: HTML for
JupyterLab (``_repr_html_``) and a plain-text ``repr`` (papermill, a terminal). The only logic
added is what a person re-running a cell needs:

- :func:`start_run` finishes the ``run`` of an earlier execution of the cell first (the box is
  put back, the verdict written), so a re-run starts over instead of failing on the box's run
  lock (one diagnosis per box: :mod:`workbench.session.runlock`);
- :func:`symptom`, :func:`probe_width` and :func:`apply_fix` run their step once per run and
  show the result again on a re-run (a second ``measure_symptom`` after the fix would measure the
  fixed server as "as found"; a second probe or fix would cost another restart);
- :func:`finish` may be run any number of times (:meth:`DiagnosisRun.finish` is idempotent: it
  restores again and rewrites the verdict).

A step called on a run that finished raises :class:`~workbench.errors.DiagnosisError` ("start a
new run"), shown in the notebook as its one line (:func:`workbench.lab.notebook.shown_as_message`).

Terms (``/work/shared/DESIGN.md`` glossary): the *target* is the model served, the *draft* the
small EAGLE-3 model that proposes tokens; *aux hidden states* are the target's hidden states at
three layers, concatenated (3 × hidden wide) as the draft's input; *accept length* is SGLang's
Σ completion tokens / Σ verify steps (bonus token included, so 1.0 means no proposal is ever
accepted); the *ceiling* is the most one verify step can yield (``--speculative-num-draft-tokens``,
or steps + 1 for chain drafting).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from remote import probes as remote_probes
from remote.errors import RemoteError
from workbench.diagnosis import DiagnosisRun
from workbench.diagnosis.results import Measurement, StartFailure
from workbench.engine.source import EngineSource
from workbench.errors import DiagnosisError, SourceLookupError
from workbench.lab.notebook import IN_PARAMETERS_CELL, shown_as_message
from workbench.lab.panel import verdict_html
from workbench.redact import REDACTOR
from workbench.report.tables import html_table, scroll_box
from workbench.rules.acceptance_level import classify_acceptance
from workbench.rules.runtime import COLLAPSED_ACCEPT_LENGTH

__all__ = ["FC_WIDTH_CHECK", "NEAR_ONE_FRACTION", "Symptom", "EngineLine", "ProbeWidth", "FixApplied", "Verification",
           "Finished", "start_run", "symptom", "engine_line", "probe_width", "apply_fix", "verification",
           "before_after_figure", "finish"]

#: The code-path map entry where the draft's fc is skipped when its input is not 3 × hidden wide:
#: SGLang 0.5.23 ``srt/models/llama_eagle3.py`` ``LlamaModel.forward``
#: (``if hidden_states.shape[-1] != embeds.shape[-1]: hidden_states = self.fc(hidden_states)``).
FC_WIDTH_CHECK = "draft-fc-width-check"


#: The walkthrough reads accept length as "pinned near 1.00" when it gained at most this fraction of
#: what the ceiling allows above 1.00 (``(accept - 1) <= 0.1 * (ceiling - 1)``; without a ceiling:
#: ``COLLAPSED_ACCEPT_LENGTH``, 1.05). A reading aid for the person, not a rule: the run's own
#: judgement (:meth:`DiagnosisRun.acceptance_low`) decides the hypotheses. The sandbox with the wrong
#: flag measures 1.0-1.2 of a ceiling of 4 on a few prompts.
NEAR_ONE_FRACTION = 0.1


def _num(x: Optional[float], digits: int = 3) -> str:
    return "not measured" if x is None else f"{x:.{digits}f}"


def _p(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"


# ----------------------------------------------------------------------------------------------
# 1. start, the symptom


def start_run(previous: Any = None, **params: Any) -> DiagnosisRun:
    """:meth:`DiagnosisRun.start` with ``params`` (``host``, ``port``, ``launch_command``,
    ``report_dir``, ``num_prompts``, ``max_new_tokens``, ...), ``how`` defaulting to "port = N in
    the parameters cell" (so a choice between several servers is asked for in the notebook's own
    terms). ``previous``: the ``run`` an earlier execution of the cell made (``None`` the first
    time, or anything that is not a :class:`DiagnosisRun`): when it is still open it is finished
    first — the box put back, its verdict written — because the box holds one run at a time.
    Raises what :meth:`DiagnosisRun.start` raises (:class:`DiagnosisError` for bad parameters,
    :class:`~workbench.errors.ServerChoiceError` listing the ports), as a one-line notebook
    message (:class:`~workbench.lab.notebook.NotebookMessage`)."""
    params.setdefault("how", IN_PARAMETERS_CELL)
    with shown_as_message():
        if isinstance(previous, DiagnosisRun) and not previous.finished:
            previous.finish()
        return DiagnosisRun.start(**params)


@dataclass
class Symptom:
    """The symptom in numbers: ``accept_length`` (tokens per verify step, bonus token included;
    ``None`` when nothing was measured), ``ceiling`` (the most one verify step yields, or ``None``
    when the launch does not say), ``low`` (:meth:`DiagnosisRun.acceptance_low`), ``failure`` (the
    server did not start, or stopped answering while it was measured: its error), ``measurement_html`` (the run's own table of the
    measurement), ``again`` (a re-run: shown, not measured again), ``expected`` (the run's
    ``expected_accept_length``, when given: the level is judged against it, as the run judges it)."""

    accept_length: Optional[float]
    ceiling: Optional[float]
    low: Optional[bool]
    failure: Optional[str] = None
    measurement_html: str = ""
    again: bool = False
    expected: Optional[float] = None

    @property
    def fraction(self) -> Optional[float]:
        """``accept_length / ceiling`` (0..1), ``None`` when either is unknown."""
        if self.accept_length is None or not self.ceiling:
            return None
        return self.accept_length / self.ceiling

    @property
    def pinned(self) -> bool:
        """Accept length is pinned near 1.00 (:data:`NEAR_ONE_FRACTION` of the ceiling's headroom)."""
        if self.accept_length is None:
            return False
        if self.ceiling and self.ceiling > 1:
            return self.accept_length - 1 <= NEAR_ONE_FRACTION * (self.ceiling - 1)
        return self.accept_length <= COLLAPSED_ACCEPT_LENGTH

    def reading(self) -> str:
        """What the numbers mean: first the level in the words ``workbench logs`` / ``measure`` /
        ``doctor --running`` print for the same value (:func:`~workbench.rules.acceptance_level.classify_acceptance`:
        0.45 of the ceiling, 90 % of ``expected``, the collapse at 1.05), then what it means (pinned
        near 1.00: :data:`NEAR_ONE_FRACTION` of the ceiling's headroom)."""
        if self.failure is not None and self.failure.startswith("server stopped answering"):
            return (f"The measurement was cut off: {self.failure}. The run ends there (inconclusive): nothing "
                    "was measured, and Finish puts the box back.")
        if self.failure is not None:
            return (f"The server did not start: {self.failure}. That is the symptom; its log tail is the "
                    "evidence the hypotheses below are decided on.")
        if self.accept_length is None:
            return "Nothing was measured (no server runs and none may be started)."
        # the one definition's words (workbench.rules.acceptance_level), as logs, measure and doctor --running
        # print them for the same value
        level = classify_acceptance(self.accept_length, ceiling=self.ceiling, expected=self.expected)
        words = level.words
        if self.low is not None and self.low != level.low:  # a judgement given with an expectation this view lacks
            words = (f"low: {self.accept_length:.2f} (under the run's expected accept length)" if self.low else
                     f"not low: {self.accept_length:.2f} (the run's expected accept length)")
        head = f"Acceptance: {words}. "
        if self.pinned:
            return (head + "Pinned near 1.00: the target accepts almost none of the draft's proposals. Pinned near "
                    "1.00 with no error in the log is this tool's fault class: the draft runs, but on the wrong input "
                    "(a flag, the aux layers, the token map, its weights), so every proposal is garbage.")
        if self.low:
            return head + "The draft helps a little; something on its path is still wrong."
        return head + "A working EAGLE-3 draft sits at 55-80 % of the ceiling; the hypotheses below still run."

    def text(self) -> str:
        """The numbers and :meth:`reading` as plain text."""
        head = f"accept length {_num(self.accept_length)}"
        if self.ceiling:
            head += f" of ceiling {self.ceiling:g}"
        if self.fraction is not None:
            head += f" ({self.fraction:.0%})"
        return head + ("  [measured earlier in this run]" if self.again else "") + "\n" + self.reading()

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        rows = [("accept length (tokens per verify step)", _num(self.accept_length)),
                ("ceiling (tokens one verify step can yield)", "—" if not self.ceiling else f"{self.ceiling:g}"),
                ("fraction of the ceiling", "—" if self.fraction is None else f"{self.fraction:.0%}"),
                ("low?", {True: "yes", False: "no", None: "—"}[self.low])]
        again = _p("Measured earlier in this run (a second measurement now would measure whatever server the "
                   "later steps left running, not the one as found).") if self.again else ""
        return (f"<div class='wb-walk-symptom'><h4>The symptom</h4>{html_table(rows)}"
                f"<p><b>{html.escape(self.reading())}</b></p>{again}{self.measurement_html}</div>")


def symptom(run: DiagnosisRun) -> Symptom:
    """Step 1: :meth:`DiagnosisRun.measure_symptom` (the server as found, launched by the run when
    none runs), once per run; a re-run shows the first measurement. Returns :class:`Symptom`.
    Raises :class:`DiagnosisError` (as a notebook message) when ``run`` finished before the
    symptom was measured, and what the measurement raises (``remote.errors.ServerNotReady``...). A
    server that stopped answering while it was measured is the ``failure`` (the run ends there)."""
    again = run.before is not None or bool(run.start_failures)
    with shown_as_message():
        result = run.measure_symptom() if not again else (run.before or run.start_failures[0])
    if run.server_lost is not None and not isinstance(result, (Measurement, StartFailure)):
        # the server stopped answering while it was measured: the run ends there (inconclusive)
        return Symptom(None, run.ceiling(), None, failure=str(run.server_lost), measurement_html="", again=again)
    if isinstance(result, StartFailure):
        return Symptom(None, run.ceiling(), None, failure=result.exception or result.error,
                       measurement_html=result._repr_html_(), again=again)
    accept = result.accept_length if isinstance(result, Measurement) else None
    return Symptom(accept, run.ceiling(), run.acceptance_low(accept),
                   measurement_html=result._repr_html_() if isinstance(result, Measurement) else "", again=again,
                   expected=run.expected_accept_length)


# ----------------------------------------------------------------------------------------------
# 4. the engine line that matters


@dataclass
class EngineLine:
    """One entry of the code-path map with the engine's own source around it: ``key``, ``what``
    it is, ``location`` (``file:line`` on the box, or where it was looked for), ``function``,
    ``detail`` (what this version does there), ``excerpt`` (numbered lines, ``>`` on the entry's
    line; ``None`` when not found), ``error`` (why the lines could not be read)."""

    key: str
    what: str
    location: str
    function: Optional[str] = None
    detail: Optional[str] = None
    excerpt: Optional[str] = None
    error: Optional[str] = None

    def text(self) -> str:
        """Plain text: the entry's header lines, then the excerpt (or why there is none)."""
        parts = [f"{self.key}: {self.what}", f"at {self.location}" + (f" in {self.function}" if self.function else "")]
        if self.detail:
            parts.append(self.detail)
        parts.append(self.excerpt or f"(no source shown: {self.error or 'not found in this version'})")
        return "\n".join(parts)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        body = (f"<pre style='text-align:left'>{html.escape(self.excerpt)}</pre>" if self.excerpt else
                _p(f"no source shown: {self.error or 'not found in this version'}"))
        return (f"<div class='wb-walk-engine-line'><h4><code>{html.escape(self.key)}</code>: "
                f"{html.escape(self.what)}</h4><p>at <code>{html.escape(self.location)}</code>"
                + (f" in <code>{html.escape(self.function)}</code>" if self.function else "") + "</p>"
                + (_p(self.detail) if self.detail else "") + scroll_box(body) + "</div>")


def engine_line(run: DiagnosisRun, key: str = FC_WIDTH_CHECK, context: int = 6) -> EngineLine:
    """Step 4: the code-path map entry ``key`` of the box's engine (:meth:`DiagnosisRun.code_path`,
    built for this deployment's target and draft classes) with ``context`` lines either side,
    read from the box (:meth:`EngineSource.show`). Raises :class:`DiagnosisError` when the engine
    source was not located on the box, ``KeyError`` naming the known keys for an unknown ``key``;
    a file that cannot be read is the view's ``error`` (the entry is still shown)."""
    cmap = run.code_path()
    if cmap is None:
        with shown_as_message():
            raise DiagnosisError("the engine's source was not located on the box (the inventory's engine_root is "
                                 "empty): there is no code path to show")
    entry = cmap.entry(key)
    view = EngineLine(entry.key, entry.what, entry.location, entry.function, entry.detail)
    if entry.found:
        src = EngineSource(run.box, run.inventory.engine_root, run.inventory.engine_version, timeout=30)
        try:
            view.excerpt = str(src.show(entry.file, entry.line, context))
        except (SourceLookupError, RemoteError) as exc:
            view.error = f"{type(exc).__name__}: {exc}"
    return view


# ----------------------------------------------------------------------------------------------
# 5. the probe


@dataclass
class ProbeWidth:
    """What the width probe read: ``observed`` (the width that decides, see
    ``workbench.diagnosis.steps.readings.decisive_width``), ``expected`` (the draft fc's in_features: 3 × the target's
    hidden size for EAGLE-3), ``target_hidden`` (the target's hidden size), ``widths`` (every
    width a draft forward received), ``lines`` (the probe's log lines, by tag), ``in_place`` (the
    probes recorded on the box now, by tag), ``skipped`` (why no probe ran: the run's notes),
    ``again`` (a re-run), ``rides_on`` (``"fix"``: placed, no probe launch; the fix launch's log
    gives the readings), ``live`` (what the server as found sends to fc, read without a restart)."""

    observed: Optional[int]
    expected: Optional[int]
    target_hidden: Optional[int]
    widths: list[int] = field(default_factory=list)
    lines: dict[str, list[str]] = field(default_factory=dict)
    in_place: list[str] = field(default_factory=list)
    skipped: Optional[str] = None
    again: bool = False
    rides_on: Optional[str] = None
    live: Optional[str] = None

    def reading(self) -> str:
        """What the width means for the draft's fc."""
        if self.skipped is not None:
            return f"No probe ran: {self.skipped}"
        if self.rides_on is not None and self.observed is None:
            return ("No probe launch: the probes are placed and ride on the fix launch, whose log gives the readings "
                    "(one load both shows the mechanism and measures the fix)." +
                    (f" The server as found, read live: {self.live}." if self.live else ""))
        if self.observed is None:
            return "The probe printed nothing: no draft forward reached the width check (see the log lines)."
        if self.expected is not None and self.observed == self.expected:
            return (f"The draft receives {self.observed}-wide input, what its fc expects: the aux hidden states "
                    "reach it; the width check is not the fault.")
        if self.target_hidden is not None and self.observed == self.target_hidden:
            return (f"The draft receives {self.observed} (one hidden state) where its fc expects {self.expected} "
                    f"(3 × {self.target_hidden}): the target captured no aux hidden states, the width check "
                    "skips fc, and the draft runs on the wrong features. The mechanism is confirmed.")
        return f"The draft receives {self.observed}-wide input; its fc expects {self.expected}."

    def text(self) -> str:
        """Plain text: observed vs expected, the reading, the probes in place."""
        return (f"observed width {self.observed}, expected {self.expected} (target hidden {self.target_hidden}); "
                f"widths seen {self.widths}" + ("  [read earlier in this run]" if self.again else "")
                + "\n" + self.reading() + f"\nprobes on the box now: {self.in_place or 'none'}")

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        rows = [("observed width (draft input, last dim)", "—" if self.observed is None else self.observed),
                ("expected (fc in_features = 3 × hidden)", "—" if self.expected is None else self.expected),
                ("target hidden size", "—" if self.target_hidden is None else self.target_hidden),
                ("every width seen", ", ".join(map(str, self.widths)) or "—"),
                ("probes on the box now", ", ".join(self.in_place) or "none")]
        lines = "\n".join(line for tag_lines in self.lines.values() for line in tag_lines)
        return (f"<div class='wb-walk-probe'><h4>The width reaching the draft's fc</h4>{html_table(rows)}"
                f"<p><b>{html.escape(self.reading())}</b></p>"
                + (scroll_box(f"<pre style='text-align:left'>{html.escape(REDACTOR.text(lines))}</pre>")
                   if lines else "")
                + "</div>")


def _in_place(run: DiagnosisRun) -> list[str]:
    try:
        return [p.tag for p in remote_probes.list_probes(run.box)]
    except RemoteError as exc:
        return [f"(could not list: {type(exc).__name__}: {exc})"]


def probe_width(run: DiagnosisRun) -> ProbeWidth:
    """Step 5: :meth:`DiagnosisRun.probe` once per run — the ``draft-input-width`` probe (and the
    recipes of the other suspects) added on the engine's own code path, the server relaunched with
    its own command, one request, the lines read back from that launch's log. The probes stay in
    for the fix relaunch (so the fixed server's width is read too) and the fix step reverts them;
    :func:`verification` shows none is left. A re-run shows the first reading. Returns
    :class:`ProbeWidth`; raises :class:`DiagnosisError` (a notebook message) on a finished run."""
    again = bool(run.probe_result)
    if not again:
        with shown_as_message():
            run.probe()
    pr = run.probe_result
    skipped = None
    if not pr:
        skipped = "; ".join(n for n in run.notes if n.startswith(("no probe", "probe ", "the probe"))) or \
            "the run took no probe reading"
    return ProbeWidth(pr.get("observed_hidden_size"), pr.get("expected_hidden_size"), pr.get("target_hidden_size"),
                      list(pr.get("observed_widths") or []), dict(pr.get("lines") or {}), _in_place(run), skipped,
                      again, rides_on=pr.get("rides_on"), live=(run.live or {}).get("fc_widths_words"))


# ----------------------------------------------------------------------------------------------
# 6. the fix


@dataclass
class FixApplied:
    """The fix step: ``fixes`` (``(kind, rules, summary)`` of each fix derived), ``diff``
    (``(flag, before, after)`` of the launch command), ``command`` (the corrected launch command,
    ``None`` when no fix changes it), ``applied`` (a relaunch with it was measured), ``accept_length``
    (measured with it), ``why`` (the run's judgement, or why nothing was applied), ``again``."""

    fixes: list[tuple[str, str, str]]
    diff: list[tuple[str, Any, Any]]
    command: Optional[str]
    applied: bool
    accept_length: Optional[float]
    why: str
    again: bool = False

    def text(self) -> str:
        """Plain text: the fixes, the diff, the corrected command, what the relaunch measured."""
        out = [f"{kind:10} {rules}: {summary}" for kind, rules, summary in self.fixes] or ["no fix derived"]
        out += [f"{flag}: {a} -> {b}" for flag, a, b in self.diff]
        out.append(f"corrected launch command: {self.command or '(unchanged)'}")
        out.append(("relaunched with it: accept length " + _num(self.accept_length)) if self.applied
                   else "not applied: " + self.why)
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        fixes = "".join(f"<li><b>{html.escape(k)}</b> (<code>{html.escape(r)}</code>): {html.escape(s)}</li>"
                        for k, r, s in self.fixes) or "<li>no fix derived</li>"
        diff = "".join(f"<tr><td style='text-align:left'><code>{html.escape(f)}</code></td>"
                       f"<td style='color:#b00020;text-align:left'><code>- {html.escape(str(a))}</code></td>"
                       f"<td style='color:#1b7a1b;text-align:left'><code>+ {html.escape(str(b))}</code></td></tr>"
                       for f, a, b in self.diff)
        cmd = ("<p>corrected launch command:</p>" + scroll_box(f"<pre style='text-align:left'>"
                                                               f"{html.escape(self.command)}</pre>")
               if self.command else _p("the launch command is unchanged"))
        result = (f"<p><b>Relaunched with the fix</b>: {html.escape(self.why)}</p>" if self.applied
                  else _p("Not applied: " + self.why))
        return (f"<div class='wb-walk-fix'><h4>The fix</h4><ul>{fixes}</ul>"
                + (scroll_box(f"<table>{diff}</table>") if diff else "") + cmd + result + "</div>")


def apply_fix(run: DiagnosisRun) -> FixApplied:
    """Step 6: :meth:`DiagnosisRun.apply_fixes` once per run — every fix the confirmed causes
    derive, applied in one relaunch (the probes still in: their readings on the fixed server are
    taken, then they are reverted), measured. A re-run shows the first result. Returns
    :class:`FixApplied` (the command redacted: an ``--api-key`` never shows); raises
    :class:`DiagnosisError` (a notebook message) on a finished run."""
    again = bool(run.fix_result)
    if not again:
        with shown_as_message():
            run.apply_fixes()
    proposed = run.proposed_launch()
    applied = bool(run.fix_result.get("applied"))
    why = run.fix_result.get("why") or "; ".join(n for n in run.notes if "fix" in n) or (
        "no fix could be derived: no cause is confirmed" if not run.fixes else "no relaunch was measured")
    return FixApplied([(f.kind, ", ".join(f.rules), f.summary) for f in run.fixes], run.launch_diff(),
                      REDACTOR.text(proposed.to_display()) if proposed is not None else None, applied,
                      run.after.accept_length if run.after is not None else None, REDACTOR.text(str(why)), again)


# ----------------------------------------------------------------------------------------------
# 7. verification


@dataclass
class Verification:
    """Before against after: ``before`` / ``after`` accept length (tokens per verify step; ``None``
    when not measured), ``ceiling``, ``expected`` (``expected_accept_length``, the trained value,
    when given), ``outcome`` (:meth:`DiagnosisRun.outcome`), ``why`` (the run's judgement of the
    fix), ``open`` (hypotheses still open: ``(id, why)``), ``width_before`` / ``width_after`` /
    ``width_expected`` (the probe's draft input width on each server), ``probes_left`` (probes on
    the box now)."""

    before: Optional[float]
    after: Optional[float]
    ceiling: Optional[float]
    outcome: str
    why: str = ""
    expected: Optional[float] = None
    open: list[tuple[str, str]] = field(default_factory=list)
    width_before: Optional[int] = None
    width_after: Optional[int] = None
    width_expected: Optional[int] = None
    probes_left: list[str] = field(default_factory=list)

    @property
    def gain(self) -> Optional[float]:
        """``after / before``, ``None`` when either was not measured."""
        if self.before is None or self.after is None or not self.before:
            return None
        return self.after / self.before

    @property
    def fixed(self) -> bool:
        """The run's outcome is ``fixed``: every confirmed cause had a fix applied, and with it
        accept length rose by at least ``SUFFICIENT_GAIN`` (1.1×) and is no longer low (near the
        trained value when ``expected`` was given: ≥ 90 % of it; else ≥ 45 % of the ceiling)."""
        return self.outcome == "fixed"

    def reading(self) -> str:
        """Fixed or still open, and why, in one sentence."""
        if self.fixed:
            return (f"Fixed: accept length {_num(self.before)} → {_num(self.after)}"
                    + (f" ({self.gain:.2f}×)" if self.gain else "")
                    + (f", near the trained value {self.expected:g}" if self.expected else
                       (f", {self.after / self.ceiling:.0%} of the ceiling {self.ceiling:g}"
                        if self.after is not None and self.ceiling else "")) + ".")
        if self.after is None:
            return f"Still open ({self.outcome}): nothing was measured with a fix. " + (self.why or "")
        measured = self.why or f"accept length {_num(self.before)} → {_num(self.after)}"
        return f"Still open ({self.outcome}): {measured}. Look at the open hypotheses below."

    def text(self) -> str:
        """Plain text: before → after, the reading, the widths, the probes left."""
        return (f"before {_num(self.before)}  after {_num(self.after)}  ceiling "
                f"{'—' if not self.ceiling else f'{self.ceiling:g}'}\n{self.reading()}\n"
                f"draft input width: before {self.width_before}, after {self.width_after} "
                f"(expected {self.width_expected}); probes on the box now: {self.probes_left or 'none'}")

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        rows = [("accept length before (as found)", _num(self.before)),
                ("accept length after (with the fix)", _num(self.after)),
                ("gain", "—" if self.gain is None else f"{self.gain:.2f}×"),
                ("ceiling", "—" if not self.ceiling else f"{self.ceiling:g}"),
                ("trained value (expected_accept_length)", "—" if not self.expected else f"{self.expected:g}"),
                ("draft input width before → after (expected)",
                 f"{self.width_before} → {self.width_after} ({self.width_expected})"),
                ("probes on the box now", ", ".join(self.probes_left) or "none")]
        colour = "#1a7f37" if self.fixed else "#9a6700"
        still = "".join(f"<li><b>{html.escape(h)}</b>: {html.escape(w)}</li>" for h, w in self.open)
        return (f"<div class='wb-walk-verify'><h4>Verification: accept length "
                f"<span class='wb-walk-before'>{_num(self.before)}</span> → "
                f"<span class='wb-walk-after'>{_num(self.after)}</span></h4>{html_table(rows)}"
                f"<p style='color:{colour}'><b>{html.escape(self.reading())}</b></p>"
                + (f"<p>Still open:</p><ul>{still}</ul>" if still else "") + "</div>")


def verification(run: DiagnosisRun) -> Verification:
    """Step 7: the fix judged from what the run measured (nothing is measured again; re-run
    freely): before and after accept length, the ceiling, the outcome, what is still open, the
    probe's width on the server as found and on the fixed one, the probes left on the box.
    Returns :class:`Verification`."""
    pr = run.probe_result
    return Verification(
        before=run.before.accept_length if run.before is not None else None,
        after=run.after.accept_length if run.after is not None else None,
        ceiling=run.ceiling(run.fix_launch), outcome=run.outcome(), why=str(run.fix_result.get("why") or ""),
        expected=run.expected_accept_length,
        open=[(o["hypothesis"], REDACTOR.text(str(o["why"]))) for o in run.still_open()],
        width_before=pr.get("observed_hidden_size"), width_after=pr.get("after_fix_hidden_size"),
        width_expected=pr.get("expected_hidden_size"), probes_left=_in_place(run))


class _NoFigure:
    """Why a figure is not shown (``_repr_html_`` and ``repr``)."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"no figure: {self.why}"

    def _repr_html_(self) -> str:
        return _p(f"no figure: {self.why}")


def before_after_figure(run: DiagnosisRun):
    """The before/after accept-length figure (:meth:`DiagnosisRun.figures` ``"accept_length"``: a
    plotly ``go.Figure``, bars with the ceiling as a line), or an object saying why there is none
    (nothing measured after a fix; the run's notes say why a figure was left out)."""
    figs = run.figures()
    if "accept_length" in figs:
        return figs["accept_length"]
    left_out = [n for n in run.notes if n.startswith("figure accept_length")]
    return _NoFigure(left_out[-1] if left_out else "accept length was not measured both before and after a fix")


# ----------------------------------------------------------------------------------------------
# 8. finish


@dataclass
class Finished:
    """After :meth:`DiagnosisRun.finish`: ``path`` (the verdict JSON, absolute), ``outcome``,
    ``actions`` (what the restore did, then what it could not undo), ``again`` (what a later
    finish found to do), ``html`` (the panel's verdict view, :func:`workbench.lab.panel.verdict_html`)."""

    path: Path
    outcome: str
    actions: list[str]
    again: Optional[list[str]]
    html: str

    def text(self) -> str:
        """Plain text: the path, the outcome, each restore action."""
        lines = [f"verdict: {self.path}", f"outcome: {self.outcome}"]
        lines += [f" - {a}" for a in self.actions] or [" - nothing to undo"]
        if self.again:
            lines.append("finish again: " + "; ".join(self.again))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return f"<div class='wb-walk-finish'>{self.html}</div>"


def finish(run: DiagnosisRun) -> Finished:
    """Step 8: :meth:`DiagnosisRun.finish` — stop the run's servers, revert its probes, remove its
    draft copies, relaunch the server found, write ``report_dir/diagnose_acceptance.json``. Safe to
    run again (restores again, rewrites the verdict). Returns :class:`Finished`."""
    verdict = run.finish()
    restore = verdict.get("restore") or {}
    actions = [str(a) for a in restore.get("actions") or []] + \
        [f"could not undo: {p}" for p in restore.get("problems") or []]
    again = verdict.get("restore_again")
    outcome = str(verdict.get("outcome"))
    if verdict.get("outcome_detail"):  # "inconclusive: symptom not measured"
        outcome += f": {verdict['outcome_detail']}"
    return Finished((run.report_dir / "diagnose_acceptance.json").resolve(), outcome, actions,
                    [str(a) for a in again] if again else None, verdict_html(run))
