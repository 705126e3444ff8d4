"""The ``diagnose_acceptance`` runbook, as one orchestrator over its steps:

1. the symptom — acceptance as found (:mod:`.steps.symptom`);
2. preflight — every static rule, once, no restart (:mod:`.steps.static`);
3. the hypotheses decided from the static evidence (:mod:`.steps.hypotheses`);
4. one probe launch showing the suspects' mechanism on the engine's own code path
   (:mod:`.steps.probe`, its readings in :mod:`.steps.readings`);
5. the fixes the confirmed causes derive, applied in ONE relaunch and measured
   (:mod:`.steps.fixes`; the candidates of undecided causes: :mod:`.steps.candidates`);
6. the ladder, one relaunch per fix (:mod:`.steps.ladder`);
7. restore and verdict (:mod:`.steps.finish`, :mod:`.verdict`, :mod:`.summary`).

Each step is a module with one small interface: it takes the :class:`~.context.RunContext` (the
box session, the settings, the ledger and the :class:`~.context.RunState` the steps hand on),
reads the values of the steps before it and adds its own. :class:`DiagnosisRun` is the box
session the runbook, the console and the control panel drive: one method per step, each a call of
its module, and the run's values under their old names (``run.before``, ``run.probe_result``, ...).

Everything goes through a :class:`remote.Box` (commands, files, servers, probes) and HTTP to the
server; nothing here imports the sandbox box, which is diagnosed like any SGLang box. A fix is
called a fix only when accept length came back. The box is left as found: every change is
journalled on the box first (:mod:`workbench.session.journal`) and :meth:`DiagnosisRun.finish`
(also registered with ``atexit`` in the kernel, and called by the ``workbench runbook`` driver
when papermill is interrupted) puts it back. Restarts: the static checks cost none; the probe one
launch, the fix one more (the probes stay in, so the fixed server shows its mechanism too); a
candidate tried one each; ``attribute_fixes`` one per fix; putting the original server back one
more.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

from remote.errors import RemoteError
from workbench.diagnosis import summary as summary_doc, verdict as verdict_doc
from workbench.diagnosis.acceptance import (LOW_ACCEPT_FRACTION, NEAR_THRESHOLD_BAND, SUFFICIENT_GAIN,
                                            pooled_measurement, verify_ceiling)
from workbench.diagnosis.context import HypothesisIndex, RunContext, RunSettings, RunState
from workbench.diagnosis.ledger import Ledger
from workbench.diagnosis.results import HypothesisTable, Measurement, StartFailure, StepResult
from workbench.diagnosis.serving import LOST_LOG_TAIL, SERVER_STOPPED_ANSWERING, measure, record_loss
from workbench.diagnosis.steps import (finish as finish_step, fixes as fixes_step, hypotheses as hypotheses_step,
                                       ladder as ladder_step, live as live_step, probe as probe_step,
                                       static as static_step, symptom as symptom_step)
from workbench.diagnosis.steps.fixes import MEASURED_EVEN_IF_NOT_LOW
from workbench.diagnosis.steps.hypotheses import CROSS_ENGINE_AUX
from workbench.diagnosis.steps.readings import DRAFT_MODEL_FILE, PROBE_RECIPE
from workbench.diagnosis.words import (d2t_words, draft_of as _draft_of, last_exception as _last_exception,
                                       literal as _literal, method_label as _method_label, parse_ids as _parse_ids,
                                       pr_subset, unmatched_words)
from workbench.engine.codepath import CodePathMap
from workbench.engine.launch import LaunchCommand
from workbench.errors import DiagnosisError, ServerStoppedAnswering
from workbench.measure.prompts import load_prompts
from workbench.rules.fix import Fix
from workbench.runbook_params import runbook_parameter_problems
from workbench.sandbox_box import sandbox_prompts_path
from workbench.session import BoxSession, Inventory, Journal, open_box
from workbench.session.box_session import check_run_parameters, sandbox_default_launch
from workbench.session.inventory import serves_sandbox_target
from workbench.session.watchdog import WATCHDOG_AFTER_S

__all__ = ["DiagnosisError", "DiagnosisRun", "Measurement", "StepResult", "StartFailure", "HypothesisTable",
           "DRAFT_MODEL_FILE", "PROBE_RECIPE", "LOW_ACCEPT_FRACTION", "SUFFICIENT_GAIN", "SERVER_STOPPED_ANSWERING",
           "NEAR_THRESHOLD_BAND", "CROSS_ENGINE_AUX", "MEASURED_EVEN_IF_NOT_LOW", "LOST_LOG_TAIL", "verify_ceiling",
           "pooled_measurement", "d2t_words", "unmatched_words", "pr_subset"]

# Kept importable from here (tests and the lab read them under these names).
_KEPT_NAMES = (_draft_of, _last_exception, _literal, _method_label, _parse_ids)


def _ends_on_server_loss(step: str):
    """Decorate a :class:`DiagnosisRun` step that talks to a server: a
    :class:`~workbench.errors.ServerStoppedAnswering` raised inside it is recorded
    (:func:`workbench.diagnosis.serving.record_loss`) and the step returns a :class:`StepResult`
    (``inconclusive``) instead of raising; once the server was lost, the step is skipped
    (``None``, with a note), so the runbook's later cells run on to :meth:`DiagnosisRun.finish`
    and its verdict. A step called after finish raises :class:`DiagnosisError`."""
    def wrap(method):
        @functools.wraps(method)
        def run_step(self, *args, **kwargs):
            self._require_open(step)
            if self.server_lost is not None:
                self.notes.append(f"no {step}: {self.server_lost.describe()}")
                return None
            try:
                return method(self, *args, **kwargs)
            except ServerStoppedAnswering as exc:
                return record_loss(self.ctx, exc, step)
        return run_step
    return wrap


class _Value:
    """A :class:`DiagnosisRun` attribute that names a value the steps hand on (``"state.before"``:
    ``run.ctx.state.before``). Read-only unless ``settable``."""

    def __init__(self, path: str, *, settable: bool = False, doc: str | None = None):
        self.path = path.split(".")
        self.settable = settable
        self.__doc__ = doc or f"``ctx.{path}``"

    def __set_name__(self, owner, name):
        self.name = name

    def _parent(self, run):
        obj = run.ctx
        for part in self.path[:-1]:
            obj = getattr(obj, part)
        return obj

    def __get__(self, run, owner=None):
        if run is None:
            return self
        return getattr(self._parent(run), self.path[-1])

    def __set__(self, run, value):
        if not self.settable:
            raise AttributeError(f"DiagnosisRun.{self.name} is a value of the steps (ctx.{'.'.join(self.path)}): "
                                 "read-only")
        setattr(self._parent(run), self.path[-1], value)


class DiagnosisRun(BoxSession):
    """One diagnosis of one box. Create with :meth:`start`; call the steps in order
    (:meth:`measure_symptom`, :meth:`check_hypotheses`, :meth:`probe`, :meth:`apply_fixes`,
    :meth:`attribute`); end with :meth:`finish` (idempotent; also run at interpreter exit).

    Parameters mirror the runbook's: ``allow_restart`` (False: static checks only, no probe, no
    fix; the static root cause is still named), ``apply_fix``, ``keep_fix`` (leave the fixed server
    — and its draft copy — running instead of putting the original back), ``attribute_fixes``
    (one relaunch per fix, to show what each contributed), ``try_candidates`` (measure the known
    conventions when a fix cannot be derived), ``aux_layer_ids`` (the ids the draft was trained
    with, when its config does not record them), ``expected_accept_length`` (what a healthy draft
    reaches here, to judge acceptance by). ``ctx`` (:class:`~workbench.diagnosis.context.RunContext`)
    holds what the steps hand on.
    """

    #: The steps in the runbook's order: (method, what it does). :meth:`run_all` runs them.
    STEPS: tuple[tuple[str, str], ...] = (
        ("measure_symptom", "the symptom: acceptance as found"),
        ("check_hypotheses", "preflight and the hypotheses decided statically, no restart"),
        ("probe", "the probes: riding on the fix launch, or one probe launch when a suspect has no fix"),
        ("apply_fixes", "every fix in one relaunch, measured; the candidates of undecided causes"),
        ("attribute", "the ladder: what each fix contributed (attribute_fixes)"),
    )

    def __init__(self, box, inventory: Inventory, journal: Journal, *, allow_restart: bool, apply_fix: bool,
                 keep_fix: bool, prompts: list[dict], max_new_tokens: int, server_start_timeout: float,
                 report_dir: str | Path, attribute_fixes: bool = False, try_candidates: bool = True,
                 aux_layer_ids: list[int] | None = None, expected_accept_length: float | None = None,
                 request_timeout: float = 300.0, force_launch: bool = False, stack_dumps: bool = False):
        settings = RunSettings(apply_fix=apply_fix, keep_fix=keep_fix, attribute_fixes=attribute_fixes,
                               try_candidates=try_candidates, prompts=prompts, max_new_tokens=max_new_tokens,
                               report_dir=Path(report_dir), expected_accept_length=expected_accept_length,
                               given={"aux_layer_ids": list(aux_layer_ids)} if aux_layer_ids is not None else {},
                               progress="text" if os.environ.get("EAGLE_WORKBENCH_DRIVER") else True,
                               stack_dumps=stack_dumps)
        index = HypothesisIndex()
        ledger = Ledger()
        for spec, _fam in index.in_order():
            ledger.add(spec.id, spec.statement)
        self.ctx = RunContext(session=self, settings=settings, hypotheses=index, ledger=ledger, state=RunState())
        super().__init__(box, inventory, journal, server_start_timeout=server_start_timeout,
                         allow_restart=allow_restart, request_timeout=request_timeout, force_launch=force_launch)
        self.ctx.state.started_at = time.monotonic()  # the verdict's duration_s counts from here, as it always did
        self.ctx.state.started_epoch = time.time()  # the box's timeline too

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def start(cls, *, host: str = "local", launch_command: str | None = None, port: int | None = None,
              allow_restart: bool = True, apply_fix: bool = True, keep_fix: bool = False,
              attribute_fixes: bool = False, try_candidates: bool = True, aux_layer_ids: Any = None,
              expected_accept_length: float | None = None, prompts: str | None = None,
              num_prompts: int | None = None, max_new_tokens: int = 96, server_start_timeout: float = 300.0,
              report_dir: str | Path = "reports", request_timeout: float = 300.0,
              force_launch: bool = False, how: str = "port = N in the parameters cell",
              engine: str | None = None, watchdog_after_s: float = WATCHDOG_AFTER_S,
              stack_dumps: bool = False) -> "DiagnosisRun":
        """Connect to ``host``, restore anything an interrupted earlier run left, take the
        inventory and open the journal. ``launch_command=None`` means the embedded sandbox box
        launched with the wrong flag (when no server is running on ``port``); with ``engine="vllm"``
        the sandbox box on vLLM's CPU build instead (its SGLang-convention draft as shipped:
        :func:`workbench.sandbox_box.sandbox_vllm_launch_command`, port 8000 unless given).
        ``aux_layer_ids``:
        a list of ints, or their text (``"1,3,6"``, ``"[1, 3, 6]"``). ``request_timeout``: seconds
        each request to the server may take (a stalled one fails after it). ``force_launch``: launch
        even what the launch guard refuses (the doctor's findings say it will not start); the
        verdict's ``launch_guard`` records what was overridden. ``watchdog_after_s``: seconds of
        silence of this run's heartbeat after which its watchdog on the box restores the box
        (:mod:`workbench.session.watchdog`; 0: no watchdog). ``stack_dumps``: ``py-spy dump`` of
        the running server's processes as live evidence (:mod:`workbench.diagnosis.steps.live`).
        Raises :class:`DiagnosisError` for
        parameters that are no such values (before anything changes on the box);
        :class:`~workbench.errors.ServerChoiceError` when ``port`` is ``None``, no server runs on
        the default port and several run elsewhere (the message lists them and says how to pick
        one: ``how``, ``N`` standing for the number; the panel passes ``"N in the port field"``);
        :class:`~workbench.errors.PromptSetError` for a ``prompts`` file that cannot be read (before
        anything happens on the box)."""
        check_run_parameters(flags={"allow_restart": allow_restart, "apply_fix": apply_fix, "keep_fix": keep_fix,
                                    "attribute_fixes": attribute_fixes, "try_candidates": try_candidates,
                                    "stack_dumps": stack_dumps},
                             counts={"max_new_tokens": max_new_tokens}, optional_counts={"num_prompts": num_prompts},
                             seconds={"server_start_timeout": server_start_timeout,
                                      "request_timeout": request_timeout})
        ids = _parse_ids(aux_layer_ids)
        # the runbook schema's check (accept length counts the bonus token: never below 1)
        bad = runbook_parameter_problems("diagnose_acceptance", {"expected_accept_length": expected_accept_length})
        if bad:
            raise DiagnosisError("bad parameters: " + "; ".join(bad))
        default_launch = sandbox_default_launch(engine, port)  # raises DiagnosisError for an unknown engine
        # a prompt set the user named is read before the box is touched (no lock, no watchdog, no
        # journal for a run refused on its parameters): PromptSetError
        prompt_set = load_prompts(prompts) if prompts is not None else None
        box, inventory, journal = open_box(host, launch_command=launch_command, port=port,
                                           server_start_timeout=server_start_timeout, how=how,
                                           default_launch=default_launch, watchdog_after_s=watchdog_after_s)
        if prompt_set is None:
            # The sandbox target is a byte-level model of Python source: the built-in chat prompts
            # mean nothing to it, its own held-out code prompts are its workload.
            prompt_set = load_prompts(str(sandbox_prompts_path()) if serves_sandbox_target(inventory) else None)
        if num_prompts:
            prompt_set = prompt_set[:num_prompts]
        return cls(box, inventory, journal, allow_restart=allow_restart, apply_fix=apply_fix, keep_fix=keep_fix,
                   prompts=prompt_set, max_new_tokens=max_new_tokens, server_start_timeout=server_start_timeout,
                   report_dir=report_dir, attribute_fixes=attribute_fixes, try_candidates=try_candidates,
                   aux_layer_ids=ids, expected_accept_length=expected_accept_length,
                   request_timeout=request_timeout, force_launch=force_launch, stack_dumps=stack_dumps)

    # -- the values the steps hand on, under the names the runbook, the lab and the tests read ----

    ledger = _Value("ledger")
    state = _Value("state")
    notes = _Value("state.notes")
    before = _Value("state.before")
    start_failures = _Value("state.start_failures")
    server_lost = _Value("state.server_lost")
    kept_server = _Value("state.kept_server")
    verdict = _Value("state.verdict")
    started_at = _Value("state.started_at")
    findings = _Value("state.findings")
    doctor_report = _Value("state.static_report")
    draft_facts = _Value("state.draft_facts")
    target_facts = _Value("state.target_facts")
    probes = _Value("state.probe.in_place")
    probe_result = _Value("state.probe.result")
    probe_confirmed = _Value("state.probe.confirmed")
    _code_path = _Value("state.probe.code_path")
    fixes = _Value("state.fix.derived")
    applied = _Value("state.fix.applied")
    blocked = _Value("state.fix.blocked")
    fix_refused = _Value("state.fix.refused")
    fix_launch = _Value("state.fix.launch")
    after = _Value("state.fix.after")
    draft_copies = _Value("state.fix.draft_copies")
    fix_result = _Value("state.fix.result")
    candidate_trials = _Value("state.fix.candidate_trials")
    fixed_doctor = _Value("state.fix.doctor")
    ladder = _Value("state.fix.ladder")
    settings = _Value("settings")
    prompts = _Value("settings.prompts")
    max_new_tokens = _Value("settings.max_new_tokens")
    report_dir = _Value("settings.report_dir")
    expected_accept_length = _Value("settings.expected_accept_length")
    given = _Value("settings.given")
    keep_fix = _Value("settings.keep_fix")
    apply_fix_enabled = _Value("settings.apply_fix")
    attribute_enabled = _Value("settings.attribute_fixes")
    try_candidates = _Value("settings.try_candidates")
    live = _Value("state.live")
    progress = _Value("settings.progress", settable=True, doc="the measurements' progress display (settable)")
    specs = _Value("hypotheses.specs")
    families = _Value("hypotheses.families")

    # -- acceptance (workbench.diagnosis.acceptance) -------------------------------------------------

    def measure(self, label: str) -> Measurement:
        """Acceptance of the server that serves now (:func:`workbench.diagnosis.serving.measure`)."""
        self._require_open("measure")
        return measure(self.ctx, label)

    def decision_thresholds(self, launch: LaunchCommand | None = None) -> list[float]:
        """The accept lengths a decision compares a measurement of ``launch`` with
        (:meth:`~workbench.diagnosis.context.RunContext.decision_thresholds`)."""
        return self.ctx.decision_thresholds(launch)

    def ceiling(self, launch: LaunchCommand | None = None) -> float | None:
        """Tokens one verify step can yield with ``launch`` (default: as found)."""
        return self.ctx.ceiling(launch)

    def acceptance_low(self, accept_length: float | None, launch: LaunchCommand | None = None) -> bool | None:
        """Whether ``accept_length`` is low for this deployment (``None``: nothing measured)."""
        return self.ctx.acceptance_low(accept_length, launch)

    # -- the steps, in the runbook's order ------------------------------------------------------

    @_ends_on_server_loss("measure_symptom")
    def measure_symptom(self) -> Measurement | StartFailure | StepResult | None:
        """1 · The symptom (:func:`workbench.diagnosis.steps.symptom.measure_symptom`)."""
        return symptom_step.measure_symptom(self.ctx)

    def preflight(self):
        """2 · Every static rule on the launch command as found, once
        (:func:`workbench.diagnosis.steps.static.preflight`); returns the doctor's report."""
        return static_step.preflight(self.ctx)

    def check_hypotheses(self) -> HypothesisTable:
        """3 · Every hypothesis decided from the static evidence, no restart
        (:func:`workbench.diagnosis.steps.hypotheses.check_hypotheses`)."""
        self._require_open("check_hypotheses")
        table = hypotheses_step.check_hypotheses(self.ctx)
        self.live_evidence()
        return table

    def live_evidence(self) -> StepResult | None:
        """What the server serving now shows, no restart: ``/server_info``, ``/metrics``, its log,
        the code-path map for its flags, opt-in stack dumps
        (:func:`workbench.diagnosis.steps.live.live_evidence`); run by :meth:`check_hypotheses`.
        A box that cannot be read is noted, never raised."""
        self._require_open("live_evidence")
        try:
            return live_step.live_evidence(self.ctx, stack_dumps_on=self.settings.stack_dumps)
        except (RemoteError, ValueError) as exc:
            self.notes.append(f"the live evidence was not read ({type(exc).__name__}: {exc})")
            return None

    def suspects(self) -> list[str]:
        """The hypotheses still in play (confirmed or inconclusive), in the order they act."""
        return probe_step.suspects(self.ctx)

    def code_path(self) -> CodePathMap | None:
        """The box's engine's EAGLE-3 code-path map for this deployment (built once)."""
        return probe_step.code_path(self.ctx)

    @_ends_on_server_loss("probe")
    def probe(self) -> StepResult | None:
        """4 · The probes, riding on the fix launch when every suspect has a fix that will be
        applied, else one probe launch (:func:`workbench.diagnosis.steps.probe.probe`, the reason:
        :func:`workbench.diagnosis.steps.fixes.probe_launch_needed`)."""
        return probe_step.probe(self.ctx, lambda: fixes_step.probe_launch_needed(self.ctx))

    def derive_fixes(self) -> list[Fix]:
        """Every fix the families derive for the confirmed (and candidates for the undecided)
        hypotheses (:func:`workbench.diagnosis.steps.fixes.derive_fixes`)."""
        return fixes_step.derive_fixes(self.ctx)

    @_ends_on_server_loss("apply_fixes")
    def apply_fixes(self) -> Measurement | StartFailure | StepResult | None:
        """5 · Every fix in ONE relaunch, measured and judged; then the candidates
        (:func:`workbench.diagnosis.steps.fixes.apply_fixes`)."""
        return fixes_step.apply_fixes(self.ctx)

    @_ends_on_server_loss("attribute")
    def attribute(self) -> list[dict] | StepResult | None:
        """6 · The ladder with ``attribute_fixes`` (:func:`workbench.diagnosis.steps.ladder.attribute`)."""
        return ladder_step.attribute(self.ctx)

    def run_all(self) -> dict:
        """Every step of :attr:`STEPS` in order, then :meth:`finish`, also when a step raises (the
        box is put back, the error propagates). Returns the verdict (see :meth:`build_verdict`).
        For scripts, tests and benchmarks; the runbook calls the steps one cell each."""
        try:
            for name, _what in self.STEPS:
                getattr(self, name)()
        finally:
            result = self.finish()
        return result

    def finish(self) -> dict:
        """7 · Put the box back as found, then write ``report_dir/diagnose_acceptance.json``
        (:func:`workbench.diagnosis.steps.finish.finish`). Idempotent."""
        return finish_step.finish(self.ctx)

    def _require_open(self, step: str) -> None:
        """Raise :class:`DiagnosisError` when ``step`` is called on a run that finished: its box
        was restored, so a step would act on a server the run no longer owns (issue 15: "Measure
        symptom" after Finish relaunched the wrong-flag server). Start a new run instead."""
        if self.finished:
            raise DiagnosisError(f"DiagnosisRun.{step}(): this run finished (the box was restored and the "
                                 f"verdict written to {self.report_dir / 'diagnose_acceptance.json'}); "
                                 "start a new run with DiagnosisRun.start(...)")

    # -- the verdict (workbench.diagnosis.verdict, .summary) -----------------------------------------

    def root_causes(self) -> list[dict[str, Any]]:
        """Every confirmed cause, in the order it acts (:func:`workbench.diagnosis.verdict.root_causes`)."""
        return verdict_doc.root_causes(self.ctx)

    def root_cause(self) -> dict[str, Any] | None:
        """The first cause to act (:func:`workbench.diagnosis.verdict.root_cause`)."""
        return verdict_doc.root_cause(self.ctx)

    def consequences(self) -> list[dict[str, Any]]:
        """The confirmed hypotheses that are consequences of the root causes
        (:func:`workbench.diagnosis.verdict.consequences`)."""
        return verdict_doc.consequences(self.ctx)

    def still_open(self) -> list[dict[str, Any]]:
        """What is not decided and how to decide it (:func:`workbench.diagnosis.verdict.still_open`)."""
        return verdict_doc.still_open(self.ctx)

    def outcome(self) -> str:
        """The case's outcome (:func:`workbench.diagnosis.verdict.outcome`)."""
        return verdict_doc.outcome(self.ctx)

    def outcome_detail(self) -> str | None:
        """Why the outcome is ``inconclusive`` (:func:`workbench.diagnosis.verdict.outcome_detail`)."""
        return verdict_doc.outcome_detail(self.ctx)

    def proposed_launch(self) -> LaunchCommand | None:
        """The launch command with every fix (:func:`workbench.diagnosis.verdict.proposed_launch`)."""
        return verdict_doc.proposed_launch(self.ctx)

    def launch_diff(self) -> list[tuple[str, Any, Any]]:
        """The fix as a launch-command diff: (flag, before, after)."""
        return verdict_doc.launch_diff(self.ctx)

    def build_verdict(self) -> dict[str, Any]:
        """The verdict document (:func:`workbench.diagnosis.verdict.build_verdict`)."""
        return verdict_doc.build_verdict(self.ctx)

    def figures(self) -> dict[str, Any]:
        """The summary's plotly figures (:func:`workbench.diagnosis.summary.figures`)."""
        return summary_doc.figures(self.ctx)

    def box_timeline(self):
        """The box's timeline during the run as a plotly figure: what served the port when, the
        seconds it was down, the loads (:func:`workbench.diagnosis.summary.box_timeline_figure`)."""
        return summary_doc.box_timeline_figure(self.ctx)

    def summary_html(self) -> str:
        """The case's story as HTML (:func:`workbench.diagnosis.summary.summary_html`)."""
        return summary_doc.summary_html(self.ctx)
