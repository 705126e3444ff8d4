"""What the steps of a diagnosis hand on: the run's parameters (:class:`RunSettings`), the
catalogue's hypotheses (:class:`HypothesisIndex`), the explicit values each step adds
(:class:`StaticEvidence` from preflight, :class:`ProbeState` from the probe, :class:`FixState` from
the fixes and the ladder, gathered in :class:`RunState`) and :class:`RunContext`, the one argument
every step takes: the box session, the settings, the ledger and the state, with the few services
every step shares (judging an accept length, deciding a hypothesis).

A step reads the values of the steps before it and adds its own; it never reaches into another
step's module. Nothing here talks to the box: :mod:`workbench.diagnosis.serving` does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.diagnosis.acceptance import acceptance_low, decision_thresholds, verify_ceiling
from workbench.diagnosis.ledger import Evidence, Ledger
from workbench.diagnosis.results import Measurement, StartFailure, StepResult
from workbench.engine.launch import LaunchCommand
from workbench.errors import ServerStoppedAnswering
from workbench.rules import REGISTRY
from workbench.rules.runtime import COLLAPSED_ACCEPT_LENGTH
from workbench.rules.finding import Finding
from workbench.rules.fix import Fix
from workbench.rules.registry import HypothesisSpec

if TYPE_CHECKING:  # the session is the DiagnosisRun itself (a BoxSession); typing only
    from workbench.session import BoxSession

__all__ = ["RunSettings", "HypothesisIndex", "StaticEvidence", "ProbeState", "FixState", "RunState", "RunContext"]


@dataclass
class RunSettings:
    """The runbook's parameters a step obeys (``allow_restart`` lives on the session: the launch
    guard and the restore read it too). ``given``: what the user stated that no file records
    (``{"aux_layer_ids": [1, 3, 6]}``). ``expected_accept_length``: tokens per verify step a
    healthy draft reaches here (``None``: judged against the ceiling). ``progress``: the
    measurement's progress display (``True`` a bar, ``"text"`` lines, ``False`` none).
    ``stack_dumps``: ``py-spy dump`` of the running server's processes as live evidence."""

    apply_fix: bool
    keep_fix: bool
    attribute_fixes: bool
    try_candidates: bool
    prompts: list[dict]
    max_new_tokens: int
    report_dir: Path
    given: dict[str, Any] = field(default_factory=dict)
    expected_accept_length: float | None = None
    progress: bool | str = True
    stack_dumps: bool = False


class HypothesisIndex:
    """The catalogue's hypotheses in the order their causes act on a request
    (:meth:`workbench.rules.registry.Registry.hypotheses`): ``specs`` (id → :class:`HypothesisSpec`),
    ``families`` (id → its fault family), :meth:`of_rule` (which hypothesis a rule answers)."""

    def __init__(self, registry=REGISTRY):
        self.registry = registry
        self.specs: dict[str, HypothesisSpec] = {}
        self.families: dict[str, Any] = {}
        for spec, fam in registry.hypotheses():
            self.specs[spec.id] = spec
            self.families[spec.id] = fam

    def in_order(self) -> list[tuple[HypothesisSpec, Any]]:
        """``(spec, family)`` pairs in the order the causes act."""
        return list(self.registry.hypotheses())

    def of_rule(self, rule: str) -> str | None:
        """The id of the hypothesis whose rules include ``rule``; ``None`` for a rule no hypothesis
        lists."""
        return next((hid for hid, spec in self.specs.items() if rule in spec.rules), None)

    def of_fixes(self, fixes: list[Fix]) -> list[str]:
        """The hypotheses ``fixes`` answer, each once, in the fixes' order."""
        hids: list[str] = []
        for fix in fixes:
            for rule in fix.rules:
                hid = self.of_rule(rule)
                if hid and hid not in hids:
                    hids.append(hid)
        return hids


@dataclass
class StaticEvidence:
    """What preflight read, no restart: the doctor's report on the launch command as found, its
    findings (plus those a first fault masked, ``evidence["found_with"]``), the draft's and the
    target's facts (``None`` when unreadable)."""

    report: Any  # workbench.doctor.DoctorReport
    findings: list[Finding]
    draft: Any = None  # workbench.checkpoint.DraftFacts
    target: Any = None  # workbench.checkpoint.TargetFacts


@dataclass
class ProbeState:
    """The probe step's value: ``in_place`` (the ``remote.probes.Probe`` blocks in the engine's
    files now), ``result`` (the readings summarised: widths reaching ``fc``, captured layers, d2t,
    dropped weights; ``after_fix_*`` from the fixed server), ``confirmed`` (hypotheses the readings
    confirmed on the code path), ``code_path`` (the code-path map, built once), ``rides_on``
    (``"fix"`` when the probes were placed without a launch of their own: they ride on the fix
    launch)."""

    in_place: list = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    confirmed: set[str] = field(default_factory=set)
    code_path: Any = None  # workbench.engine.codepath.CodePathMap
    rides_on: str | None = None  # "fix": placed, no probe launch; the fix launch's log gives the readings


@dataclass
class FixState:
    """The fix step's value: ``derived`` (every fix the families derive, in the order the causes
    act), ``applied`` (measured in the fix relaunch, candidates kept included), ``blocked`` /
    ``refused`` (a fix launch the guard refused: not tried), ``launch`` (the fixed command),
    ``after`` (acceptance with the fix), ``draft_copies`` (repaired copies made on the box),
    ``result`` (applied / sufficient / why), ``candidate_trials``, ``doctor`` (the doctor on the
    fixed command: cleared and remaining rules), ``ladder`` (one rung per fix, with
    ``attribute_fixes``)."""

    derived: list[Fix] = field(default_factory=list)
    applied: list[Fix] = field(default_factory=list)
    blocked: list[Fix] = field(default_factory=list)
    refused: StartFailure | None = None
    launch: LaunchCommand | None = None
    after: Measurement | None = None
    draft_copies: list[dict] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    candidate_trials: list[dict] = field(default_factory=list)
    doctor: dict[str, Any] = field(default_factory=dict)
    ladder: list[dict] = field(default_factory=list)


@dataclass
class RunState:
    """Everything the steps found, in one value: ``before`` (the symptom), ``start_failures``
    (every launch that did not start or was refused), ``static``, ``probe``, ``fix``,
    ``server_lost`` (the server stopped answering: the run ended there), ``kept_server`` (the fixed
    server finish left running), ``live`` (what the server as found showed without a restart:
    :mod:`workbench.diagnosis.steps.live`), ``verdict`` (once built), ``notes`` (what the report should say
    besides), ``started_at`` (``time.monotonic()``), ``started_epoch`` (``time.time()`` then: the
    timeline's start)."""

    before: Measurement | None = None
    start_failures: list[StartFailure] = field(default_factory=list)
    static: StaticEvidence | None = None
    probe: ProbeState = field(default_factory=ProbeState)
    fix: FixState = field(default_factory=FixState)
    server_lost: ServerStoppedAnswering | None = None
    kept_server: dict | None = None
    live: dict[str, Any] = field(default_factory=dict)
    verdict: dict | None = None
    notes: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    started_epoch: float = field(default_factory=time.time)
    _no_findings: list[Finding] = field(default_factory=list, repr=False)

    @property
    def findings(self) -> list[Finding]:
        """The static findings (before preflight: one empty list, always the same)."""
        return self.static.findings if self.static is not None else self._no_findings

    @property
    def static_report(self):
        """The doctor's report on the launch command as found (``None`` before preflight)."""
        return self.static.report if self.static is not None else None

    @property
    def draft_facts(self):
        """The draft's facts preflight read (``None`` before it, or when the draft is unreadable)."""
        return self.static.draft if self.static is not None else None

    @property
    def target_facts(self):
        """The target's facts preflight read (``None`` before it, or when unreadable)."""
        return self.static.target if self.static is not None else None


@dataclass
class RunContext:
    """The one argument of every step: ``session`` (the box session: ``box``, ``inventory``,
    ``journal``, ``allow_restart``, launching and restoring; the :class:`DiagnosisRun` itself),
    ``settings``, ``hypotheses``, ``ledger`` and ``state``."""

    session: "BoxSession"
    settings: RunSettings
    hypotheses: HypothesisIndex
    ledger: Ledger
    state: RunState

    @property
    def box(self):
        return self.session.box

    @property
    def inventory(self):
        return self.session.inventory

    @property
    def notes(self) -> list[str]:
        return self.state.notes

    # -- judging acceptance (workbench.diagnosis.acceptance) --------------------------------------

    def ceiling(self, launch: LaunchCommand | None = None) -> float | None:
        """Tokens one verify step can yield with ``launch`` (default: as found), the server's
        ``/server_info`` filling in what the command leaves out (:func:`verify_ceiling`)."""
        return verify_ceiling(launch or self.inventory.launch, self.inventory.server_info)

    def acceptance_low(self, accept_length: float | None, launch: LaunchCommand | None = None) -> bool | None:
        """:func:`~workbench.diagnosis.acceptance.acceptance_low` with this run's expectation and
        the ceiling of ``launch`` (read only when it decides: no expectation given and acceptance not
        collapsed)."""
        expected = self.settings.expected_accept_length
        needs_ceiling = accept_length is not None and not expected and accept_length > COLLAPSED_ACCEPT_LENGTH
        return acceptance_low(accept_length, expected=expected, ceiling=self.ceiling(launch) if needs_ceiling else None)

    def low_before(self) -> bool | None:
        """Whether acceptance as found is low (``None``: not measured)."""
        before = self.state.before
        return self.acceptance_low(before.accept_length if before is not None else None)

    def decision_thresholds(self, launch: LaunchCommand | None = None) -> list[float]:
        """:func:`~workbench.diagnosis.acceptance.decision_thresholds` for a measurement of ``launch``."""
        before, expected = self.state.before, self.settings.expected_accept_length
        return decision_thresholds(expected=expected, ceiling=None if expected else self.ceiling(launch),
                                   before=before.accept_length if before is not None else None)

    def speculation_off(self) -> bool:
        """The server as found answered, but with no speculative step at all (no response carried
        ``spec_verify_ct``): speculative decoding is off there, so there is no speedup to lose — the
        symptom, never "healthy"."""
        before = self.state.before
        return before is not None and not getattr(before.generate, "speculative", True)

    # -- the ledger -------------------------------------------------------------------------------

    def decide(self, hid: str, verdict: str, summary: str, *, findings: list[Finding] = (),
               data: dict | None = None, kind: str = "static check") -> StepResult:
        """Decide hypothesis ``hid`` in the ledger with its evidence: each finding (source ``kind``),
        ``data`` read on the box, or a note when there is neither. Returns the step's row."""
        evidence = [Evidence(kind="finding", summary=f"{f.rule}: {f.message}", data=f.to_dict(), source=kind)
                    for f in findings]
        if data:
            evidence.append(Evidence(kind="data", summary=summary, data=dict(data), source="box"))
        if not evidence:
            evidence.append(Evidence(kind="note", summary=summary, data={}, source="workbench"))
        self.ledger.decide(hid, verdict, *evidence)
        return StepResult(hid, verdict, summary, list(findings), dict(data or {}))

    def add_evidence(self, hid: str, summary: str, data: dict | None = None, kind: str = "probe") -> None:
        """Evidence for ``hid`` that does not change its verdict (read on the box)."""
        self.ledger.add_evidence(hid, Evidence(kind=kind, summary=summary, data=dict(data or {}), source="box"))

    def verdict_of(self, hid: str) -> str:
        return self.ledger.get(hid).verdict
