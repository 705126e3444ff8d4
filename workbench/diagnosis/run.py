"""The ``diagnose_acceptance`` runbook's steps: symptom → hypotheses → probe → fixes → verify → verdict.

Each step is one method of :class:`DiagnosisRun`; the runbook's cells call them and show what they
return. Everything goes through a :class:`remote.Box` (commands, files, servers, probes) and HTTP to
the server; nothing here imports the sandbox box, which is diagnosed like any SGLang box.

The diagnosis is the catalogue, walked (``docs/rules.md``): every fault family's hypotheses
(:meth:`workbench.rules.registry.Registry.hypotheses`) are decided from the doctor's static
evidence first (no restart); one probe launch shows the mechanism of the suspects on the engine's
own code path (the width reaching ``fc``, the layers the target captures, the token map the worker
holds, the checkpoint names ``load_weights`` drops); every fix the confirmed causes derive — a
launch-command change, a repaired copy of the draft on the box, never the user's files — is applied
in ONE relaunch and measured; a fix is called a fix only when accept length came back. A server
that does not start is a symptom: its log tail and exception are evidence. Layered causes are
listed in the order they act; ``attribute_fixes`` relaunches once per fix to show what each one
contributed (a ladder).

The box is left as found: every change is journalled on the box first
(:mod:`workbench.session.journal`) and :meth:`DiagnosisRun.finish` (also registered with ``atexit``
in the kernel, and called by the ``workbench runbook`` driver when papermill is interrupted) stops
the servers the run started, reverts its probes, removes its draft copies and relaunches the
server it found. Restarts: the static checks cost none; the probe one launch, the fix one more
(the probes stay in, so the fixed server shows its mechanism too); a candidate tried (the offset
convention) one each; ``attribute_fixes`` one per fix; putting the original server back one more.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import html
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from remote import probes as remote_probes
from remote.errors import (GenerationStuck, PortInUse, RemoteError, ServerDied, ServerNotReady,
                           ServerStartTimedOut)
from workbench.diagnosis.ledger import Evidence, Ledger
from workbench.doctor import DoctorError, run_doctor
from workbench.engine.codepath import CodePathMap, code_path_map
from workbench.engine.launch import LaunchCommand
from workbench.engine.recipes import (RECIPES, VLLM_RECIPES, recipes_for, add_recipes, missing_required, params_left_at_init, read_recipes,
                                      recipe_probes, weights_unmatched)
from workbench.engine.source import EngineSource
from workbench.errors import (AcceptanceError, DiagnosisError, FigureInputError, LaunchRefused, MeasureError,
                              ServerStoppedAnswering, SourceLookupError, WorkbenchInputError)
from workbench.session.watchdog import WATCHDOG_AFTER_S
from workbench.logs import read_decode_records, read_when_settled
from workbench.measure.generate import auth_headers, measure_generate
from workbench.measure.prompts import load_prompts
from workbench.report import figures
from workbench.report.tables import html_table, inline_code, scroll_box
from workbench.redact import REDACTOR
from workbench.report.verdict import write_verdict_json
from workbench.rules import REGISTRY
from workbench.rules.facts import Facts
from workbench.rules.finding import Finding
from workbench.rules.fix import DraftRepair, Fix
from workbench.rules.registry import HypothesisSpec
from workbench.rules.runtime import COLLAPSED_ACCEPT_LENGTH, acceptance_collapsed
from workbench.runbook_params import parse_layer_ids, runbook_parameter_problems
from workbench.sandbox_box import sandbox_prompts_path
from workbench.session import BoxSession, Inventory, Journal, open_box
from workbench.session.inventory import serves_sandbox_target
from workbench.session.box_session import check_run_parameters, sandbox_default_launch

__all__ = ["DiagnosisError", "DiagnosisRun", "Measurement", "StepResult", "DRAFT_MODEL_FILE", "PROBE_RECIPE",
           "LOW_ACCEPT_FRACTION", "SUFFICIENT_GAIN", "SERVER_STOPPED_ANSWERING", "NEAR_THRESHOLD_BAND", "verify_ceiling",
           "pooled_measurement"]

#: The draft model file, relative to the engine package root: SGLang 0.5.23
#: ``srt/models/llama_eagle3.py`` (the sandbox mirrors the path).
DRAFT_MODEL_FILE = "srt/models/llama_eagle3.py"
#: The probe that gives the verdict's ``probe.observed_hidden_size``: the ``draft-input-width``
#: recipe, anchored on the draft's fc width check as the code-path map finds it in the box's
#: version (SGLang 0.5.23 ``srt/models/llama_eagle3.py`` ``LlamaModel.forward``).
PROBE_RECIPE = "draft-input-width"
#: Without ``expected_accept_length``, acceptance counts as low below this fraction of its ceiling
#: (the tokens one verify step can yield: ``--speculative-num-draft-tokens``, steps + 1 for chain
#: drafting) or when it has collapsed (≤ 1.05). A heuristic: a working EAGLE-3 draft on chat or
#: code prompts sits at 0.55-0.8 of its ceiling (the sandbox's at 0.53-0.6); give ``expected_accept_length`` (e.g. the draft's
#: training evaluation) to judge against that instead (low: below 90 % of it).
LOW_ACCEPT_FRACTION = 0.45
#: A fix is sufficient when acceptance is no longer low and rose by at least this factor.
SUFFICIENT_GAIN = 1.1
#: A measured accept length within this fraction of a threshold a decision compares it with (low:
#: 90 % of ``expected_accept_length`` or :data:`LOW_ACCEPT_FRACTION` of the ceiling, collapsed;
#: a fix's gain: :data:`SUFFICIENT_GAIN` × the accept length before) is measured once more and the
#: decision taken on both measurements pooled (Σ tokens / Σ verify steps): one measurement near a
#: threshold never decides alone (issue 26).
NEAR_THRESHOLD_BAND = 0.03
#: The cross-engine aux-id hypothesis (``workbench/rules/cross_engine.py``): a draft's aux layer ids
#: written in the other engine's convention.
CROSS_ENGINE_AUX = "aux-cross-engine-convention"
#: Confirmed causes whose fix is applied and measured even when acceptance as found is not judged
#: low: a convention shift shown on the code path is a certain fault whose cost only a measurement
#: gives (the sandbox draft on vLLM sits near the low threshold either side).
MEASURED_EVEN_IF_NOT_LOW = (CROSS_ENGINE_AUX,)
#: The verdict's ``outcome_detail`` starts with this when the server under measurement stopped
#: answering mid-run (killed, crashed, SIGSTOPped, hung): the run ends there, ``inconclusive``.
SERVER_STOPPED_ANSWERING = "server stopped answering"
#: Lines of the server's log kept as evidence when it stopped answering.
LOST_LOG_TAIL = 20


def _ends_on_server_loss(step: str):
    """Decorate a :class:`DiagnosisRun` step that talks to a server: a
    :class:`~workbench.errors.ServerStoppedAnswering` raised inside it is recorded
    (:meth:`DiagnosisRun._lost`) and the step returns a :class:`StepResult` (``inconclusive``)
    instead of raising; once the server was lost, the step is skipped (``None``, with a note), so
    the runbook's later cells run on to :meth:`DiagnosisRun.finish` and its verdict."""
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
                return self._lost(exc, step)
        return run_step
    return wrap


# ----------------------------------------------------------------------------------------------
# Step results


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
            ("accept length (Σ completion tokens / Σ verify steps)", _fmt(g.accept_length)),
            ("accept rate", _fmt(g.accept_rate)),
            ("requests (warm-up excluded)", len(g.records)),
            ("completion tokens / verify steps", f"{g.total_tokens} / {g.verify_steps}"),
            ("throughput (tokens/s)", _fmt(g.tokens_per_s)),
            ("decode log lines read", len(self.log_records)),
        ]
        return f"<h4>Acceptance: {html.escape(self.label)}</h4>" + html_table(rows)


@dataclass
class StartFailure:
    """A launch whose server did not start: ``label``, ``launch_command``, ``error`` (one line),
    ``log_tail`` (its last log lines), ``exception`` (the last exception line of the log, if any).
    ``refused``: for a launch the guard refused (never made: no process, no log), the doctor's
    findings that say it would not start (dicts); ``None`` for a launch that was made."""

    label: str
    launch_command: str
    error: str
    log_tail: list[str]
    exception: str | None
    refused: list[dict] | None = None

    def __post_init__(self) -> None:
        # The log and the exception are the server's text: a key or token it printed (its own
        # argv in a traceback, a URL with a password) must not reach the report.
        self.launch_command = REDACTOR.text(self.launch_command)
        self.error = REDACTOR.text(self.error)
        self.exception = REDACTOR.text(self.exception)
        self.log_tail = [REDACTOR.text(line) for line in self.log_tail]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "launch_command": self.launch_command, "error": self.error,
                "exception": self.exception, "log_tail": list(self.log_tail), "refused": self.refused}

    def _repr_html_(self) -> str:
        if self.refused is not None:
            items = "".join(f"<li><code>{html.escape(f['rule'])}</code>: {html.escape(f['message'])}</li>"
                            for f in self.refused)
            return (f"<h4>Launch refused ({html.escape(self.label)}): the doctor's findings say the server would "
                    f"not start</h4><p>No launch was made (nothing on the box changed for it):</p><ul>{items}</ul>"
                    "<p><small>force_launch=True launches anyway.</small></p>")
        tail = html.escape("\n".join(self.log_tail[-15:]))
        return (f"<h4>The server did not start ({html.escape(self.label)})</h4>"
                f"<p>{html.escape(self.exception or self.error)}</p>"
                f"<pre style='white-space:pre-wrap;max-height:20em;overflow:auto'>{tail}</pre>")


def _fmt(x: Any) -> str:
    return "—" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


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


# ----------------------------------------------------------------------------------------------
# The run


def verify_ceiling(launch: LaunchCommand | None, server_info: dict | None = None) -> float | None:
    """The most tokens one verify step can yield (tokens per verify step, bonus included) for a
    server launched with ``launch``: ``--speculative-num-draft-tokens``, else
    ``--speculative-num-steps`` + 1 (chain drafting: every draft token and the bonus token
    accepted), each falling back on ``server_info`` (``GET /server_info``'s resolved
    ``speculative_num_draft_tokens`` / ``speculative_num_steps``) when the flag is absent;
    ``None`` when neither is known or a value is not a number (SGLang's ``server_args.py``:
    ``speculative_num_draft_tokens`` verify slots per step). On a vLLM launch:
    ``num_speculative_tokens`` + 1 from ``--speculative-config`` (vLLM drafts a chain of k
    tokens per verify step), ``None`` when the config cannot be read."""
    if launch is not None and launch.engine == "vllm":
        # vLLM 0.32.0 chain drafting (vllm/config/speculative.py num_speculative_tokens; the
        # proposer drafts k tokens per step, v1/spec_decode/llm_base_proposer.py): k + 1 per step
        try:
            k = launch.num_speculative_tokens
        except WorkbenchInputError:
            return None
        return float(k) + 1 if isinstance(k, int) and k > 0 else None
    info = server_info or {}
    get = launch.get if launch is not None else (lambda _flag: None)
    ndt = get("--speculative-num-draft-tokens") or info.get("speculative_num_draft_tokens")
    steps = get("--speculative-num-steps") or info.get("speculative_num_steps")
    try:
        return float(ndt) if ndt is not None else (float(steps) + 1 if steps is not None else None)
    except (TypeError, ValueError):
        return None


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
    reaches here, to judge acceptance by).
    """

    def __init__(self, box, inventory: Inventory, journal: Journal, *, allow_restart: bool, apply_fix: bool,
                 keep_fix: bool, prompts: list[dict], max_new_tokens: int, server_start_timeout: float,
                 report_dir: str | Path, attribute_fixes: bool = False, try_candidates: bool = True,
                 aux_layer_ids: list[int] | None = None, expected_accept_length: float | None = None,
                 request_timeout: float = 300.0, force_launch: bool = False):
        super().__init__(box, inventory, journal, server_start_timeout=server_start_timeout,
                         allow_restart=allow_restart, request_timeout=request_timeout, force_launch=force_launch)
        self.apply_fix_enabled = apply_fix
        self.keep_fix = keep_fix
        self.attribute_enabled = attribute_fixes
        self.try_candidates = try_candidates
        self.given: dict[str, Any] = {}
        if aux_layer_ids is not None:
            self.given["aux_layer_ids"] = list(aux_layer_ids)
        self.expected_accept_length = expected_accept_length
        self.prompts = prompts
        self.max_new_tokens = max_new_tokens
        self.report_dir = Path(report_dir)
        self.started_at = time.monotonic()
        self.ledger = Ledger()
        self.specs: dict[str, HypothesisSpec] = {}
        self.families: dict[str, Any] = {}
        for spec, fam in REGISTRY.hypotheses():
            self.ledger.add(spec.id, spec.statement)
            self.specs[spec.id] = spec
            self.families[spec.id] = fam
        self.before: Measurement | None = None
        self.after: Measurement | None = None
        self.start_failures: list[StartFailure] = []
        self.findings: list[Finding] = []
        self.probes: list = []  # remote.probes.Probe in place
        self.probe_result: dict[str, Any] = {}
        self.probe_confirmed: set[str] = set()  # hypotheses the probe's readings confirmed on the code path
        self.fixes: list[Fix] = []
        self.applied: list[Fix] = []
        self.blocked: list[Fix] = []  # fixes whose launch the guard refused: not tried
        self.fix_refused: StartFailure | None = None
        self.fix_launch: LaunchCommand | None = None
        self.draft_copies: list[dict] = []
        self.fix_result: dict[str, Any] = {}
        self.candidate_trials: list[dict] = []
        self.fixed_doctor: dict[str, Any] = {}  # the doctor on the fixed command (see _doctor_on_fix)
        self.ladder: list[dict] = []
        self.kept_server: dict | None = None  # the fixed server finish() left running (keep_fix)
        self.notes: list[str] = []
        self.verdict: dict | None = None
        self.server_lost: ServerStoppedAnswering | None = None  # the server stopped answering: the run ended there
        self.draft_facts = None
        self.target_facts = None
        self._code_path: CodePathMap | None = None
        self.doctor_report = None
        self.progress: bool | str = "text" if os.environ.get("EAGLE_WORKBENCH_DRIVER") else True

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def start(cls, *, host: str = "local", launch_command: str | None = None, port: int | None = None,
              allow_restart: bool = True, apply_fix: bool = True, keep_fix: bool = False,
              attribute_fixes: bool = False, try_candidates: bool = True, aux_layer_ids: Any = None,
              expected_accept_length: float | None = None, prompts: str | None = None,
              num_prompts: int | None = None, max_new_tokens: int = 96, server_start_timeout: float = 300.0,
              report_dir: str | Path = "reports", request_timeout: float = 300.0,
              force_launch: bool = False, how: str = "port = N in the parameters cell",
              engine: str | None = None, watchdog_after_s: float = WATCHDOG_AFTER_S) -> "DiagnosisRun":
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
        (:mod:`workbench.session.watchdog`; 0: no watchdog). Raises :class:`DiagnosisError` for
        parameters that are no such values (before anything changes on the box);
        :class:`~workbench.errors.ServerChoiceError` when ``port`` is ``None``, no server runs on
        the default port and several run elsewhere (the message lists them and says how to pick
        one: ``how``, ``N`` standing for the number; the panel passes ``"N in the port field"``)."""
        check_run_parameters(flags={"allow_restart": allow_restart, "apply_fix": apply_fix, "keep_fix": keep_fix,
                                    "attribute_fixes": attribute_fixes, "try_candidates": try_candidates},
                             counts={"max_new_tokens": max_new_tokens}, optional_counts={"num_prompts": num_prompts},
                             seconds={"server_start_timeout": server_start_timeout,
                                      "request_timeout": request_timeout})
        ids = _parse_ids(aux_layer_ids)
        # the runbook schema's check (accept length counts the bonus token: never below 1)
        bad = runbook_parameter_problems("diagnose_acceptance", {"expected_accept_length": expected_accept_length})
        if bad:
            raise DiagnosisError("bad parameters: " + "; ".join(bad))
        default_launch = sandbox_default_launch(engine, port)  # raises DiagnosisError for an unknown engine
        box, inventory, journal = open_box(host, launch_command=launch_command, port=port,
                                           server_start_timeout=server_start_timeout, how=how,
                                           default_launch=default_launch, watchdog_after_s=watchdog_after_s)
        if prompts is None and serves_sandbox_target(inventory):
            # The sandbox target is a byte-level model of Python source: the built-in chat prompts
            # mean nothing to it, its own held-out code prompts are its workload.
            prompts = str(sandbox_prompts_path())
        prompt_set = load_prompts(prompts)
        if num_prompts:
            prompt_set = prompt_set[:num_prompts]
        return cls(box, inventory, journal, allow_restart=allow_restart, apply_fix=apply_fix, keep_fix=keep_fix,
                   prompts=prompt_set, max_new_tokens=max_new_tokens, server_start_timeout=server_start_timeout,
                   report_dir=report_dir, attribute_fixes=attribute_fixes, try_candidates=try_candidates,
                   aux_layer_ids=ids, expected_accept_length=expected_accept_length,
                   request_timeout=request_timeout, force_launch=force_launch)

    # -- acceptance -----------------------------------------------------------------------------

    def measure(self, label: str) -> Measurement:
        """Accept length over the prompt set through ``/generate`` (SGLang's definition:
        Σ completion_tokens / Σ spec_verify_ct), with the decode log lines written meanwhile (read
        once the log has settled: ``workbench.logs.read_when_settled``). A server still starting (the
        one found running, typically) is waited for while it makes progress (new log bytes, CPU
        time of its process group: ``remote.box.Box.activity_probe``), given up after
        ``server_start_timeout`` seconds without (``START_WAIT_FACTOR`` times that in all). An
        accept length within :data:`NEAR_THRESHOLD_BAND` of a threshold a decision compares it with
        (:meth:`decision_thresholds`) is measured once more and both are pooled
        (:func:`pooled_measurement`; ``Measurement.remeasured`` says so). Raises
        ``remote.errors.ServerNotReady`` when it never gets ready, ``remote.errors.GenerationStuck``
        when its HTTP answers and a 1-token generation does not return.

        Raises :class:`~workbench.errors.ServerStoppedAnswering` when the server stops answering
        in the middle (its process exited, or it lives and answers nothing within
        ``request_timeout``: SIGSTOPped, hung); the steps turn it into the verdict
        ``inconclusive: server stopped answering``."""
        self._require_open("measure")
        base_url, log_path, launch = self._serving()
        offset = self.box.file_size(log_path) if log_path and self.box.exists(log_path) else 0
        pid = self.current.pid if self.current is not None else self.inventory.server_pid
        pgid = self.current.pgid if self.current is not None else None
        if pgid is None and pid:
            info = self.box.process(pid)
            pgid = info.pgid if info is not None else None
        key = launch.get("--api-key")

        def once():
            return measure_generate(base_url, self.prompts, max_new_tokens=self.max_new_tokens, warmup=1,
                                    progress=self.progress, timeout=self.request_timeout,
                                    start_timeout=self.server_start_timeout,
                                    alive=(lambda: self.box.is_alive(pid)) if pid else None,
                                    activity=self.box.activity_probe(pgid, log_path) if pgid else None,
                                    api_key=key if isinstance(key, str) else None)

        def guarded():
            try:
                return once()
            except (AcceptanceError, MeasureError, ServerNotReady, GenerationStuck) as exc:
                lost = self._stopped_answering(exc, what=f"measuring: {label}", pid=pid, log_path=log_path)
                if lost is None:
                    raise
                raise lost from exc

        result = guarded()
        remeasured = None
        near = [t for t in self.decision_thresholds(launch)
                if result.accept_length is not None and abs(result.accept_length - t) <= NEAR_THRESHOLD_BAND * t]
        if near:
            again = guarded()
            remeasured = {"accept_lengths": [result.accept_length, again.accept_length], "near": near}
            result = pooled_measurement(result, again)
            remeasured["pooled"] = result.accept_length
            self.notes.append(f"{label}: accept length {remeasured['accept_lengths'][0]:.3f} within "
                              f"{NEAR_THRESHOLD_BAND:.0%} of {', '.join(f'{t:.3f}' for t in near)}: measured again "
                              f"({_fmt(again.accept_length)}), decided on both pooled ({_fmt(result.accept_length)})")
        records: list[dict] = []
        if log_path:
            # bounded whatever the log holds (a 500 MB line costs 64 KiB): workbench.logs.bounded;
            # read once the log stopped growing (its last decode line written)
            got, _settled = read_when_settled(self.box, log_path,
                                              lambda: read_decode_records(self.box, log_path, offset, missing_ok=True))
            records = [r.to_dict() for r in got]
        return Measurement(label=label, launch_command=launch.to_display(), generate=result,
                           log_records=records, log_path=log_path, remeasured=remeasured)

    def decision_thresholds(self, launch: LaunchCommand | None = None) -> list[float]:
        """The accept lengths a decision compares a measurement of ``launch`` with: the low line
        (90 % of ``expected_accept_length``; else the collapse line and :data:`LOW_ACCEPT_FRACTION`
        of the ceiling) and, once acceptance before was measured, the fix's gain line
        (:data:`SUFFICIENT_GAIN` × before)."""
        out: list[float] = []
        if self.expected_accept_length:
            out.append(0.9 * self.expected_accept_length)
        else:
            out.append(COLLAPSED_ACCEPT_LENGTH)
            ceiling = self.ceiling(launch)
            if ceiling:
                out.append(LOW_ACCEPT_FRACTION * ceiling)
        if self.before is not None and self.before.accept_length:
            out.append(self.before.accept_length * SUFFICIENT_GAIN)
        return out

    def ceiling(self, launch: LaunchCommand | None = None) -> float | None:
        """The most tokens one verify step can yield with ``launch`` (default: as found):
        ``--speculative-num-draft-tokens``, else steps + 1 (chain drafting), from the server's
        ``/server_info`` when it reported the resolved values."""
        return verify_ceiling(launch or self.inventory.launch, self.inventory.server_info)

    def acceptance_low(self, accept_length: float | None, launch: LaunchCommand | None = None) -> bool | None:
        """Whether ``accept_length`` is low for this deployment (``None``: nothing measured): below
        90 % of ``expected_accept_length`` when given, else collapsed (≤ 1.05) or below
        :data:`LOW_ACCEPT_FRACTION` of the :meth:`ceiling`."""
        if accept_length is None:
            return None
        if self.expected_accept_length:
            return accept_length < 0.9 * self.expected_accept_length
        if accept_length <= COLLAPSED_ACCEPT_LENGTH:
            return True
        ceiling = self.ceiling(launch)
        return bool(ceiling) and accept_length < LOW_ACCEPT_FRACTION * ceiling

    def _try_launch(self, launch: LaunchCommand, label: str):
        """:meth:`_launch`, a server that does not start recorded as a :class:`StartFailure`
        (returned, with ``None`` for the handle) instead of raised; a launch the guard refused
        (:class:`LaunchRefused`: never made) too, with the findings that refused it."""
        try:
            return self._launch(launch, label), None
        except LaunchRefused as exc:
            failure = StartFailure(label, launch.to_string(), str(exc), [], None,
                                   refused=[f.to_dict() for f in exc.findings])
            self.start_failures.append(failure)
            return None, failure
        except PortInUse as exc:
            # Something that is no engine server of ours holds the port (found by the inventory's
            # port check, never stopped): the launch is refused, nothing started.
            failure = StartFailure(label, launch.to_display(), f"PortInUse: {exc}", [], str(exc))
            self.start_failures.append(failure)
            self.launches.append({"label": label, "launch_command": launch.to_display(), "pid": None,
                                  "log_path": None, "healthy_after_s": None, "started": False, "error": str(exc)})
            return None, failure
        except (ServerDied, ServerStartTimedOut) as exc:
            failure = StartFailure(label, launch.to_display(), f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                                   list(exc.log_tail), _last_exception(exc.log_tail))
            self.start_failures.append(failure)
            if self.launches and self.launches[-1].get("pid") is None:
                self.launches.pop()
            self.launches.append({"label": label, "launch_command": launch.to_display(), "pid": exc.pid,
                                  "log_path": exc.log_path, "healthy_after_s": None, "started": False,
                                  "error": failure.exception or failure.error})
            self._forget_dead(exc.pid)
            return None, failure

    def _forget_dead(self, pid: int) -> None:
        """A launched server that died: nothing to stop, the journal forgets it."""
        if self.current is not None and self.current.pid == pid:
            self.journal.remove_started(pid)
            self.current = None
            self.current_launch = None

    def _serving_label(self) -> str:
        """Which server answers now, in words: ``the probe server`` (a launch of the run, by its
        label), ``the server as found`` (the one running before the run, never launched by it)."""
        if self.current is not None:
            label = next((l["label"] for l in reversed(self.launches) if l.get("pid") == self.current.pid), None)
            if label is None:
                label = next((s.get("label") for s in self.journal.data.get("started_servers") or []
                              if s.get("pid") == self.current.pid), None) or "run's"
            return "the server the run launched as found" if label == "as-found" else f"the {label} server"
        return "the server as found"

    def _stopped_answering(self, exc: BaseException, *, what: str, pid: int | None,
                           log_path: str | None) -> ServerStoppedAnswering | None:
        """The :class:`ServerStoppedAnswering` that ``exc`` (a failed request to the server that
        serves now) means, or ``None`` when the server did answer (an error status, a body that is
        no ``/generate`` response: a failure of another kind, raised as it is). No answer at all —
        a connection refused or reset, a read time-out, a server not ready or stuck — is a server
        that stopped answering; what its process is doing then is read on the box (exited, stopped
        by SIGSTOP, still running) with the log's last :data:`LOST_LOG_TAIL` lines. Each box call is
        bounded (10 s for the process, 30 s for the log)."""
        if isinstance(exc, (AcceptanceError, MeasureError)) and not isinstance(exc.__cause__, httpx.TransportError):
            return None
        state = "unknown"
        if pid is not None:
            try:
                info = self.box.process(pid, timeout=10)
                state = ("exited" if info is None or info.state in ("Z", "X") else
                         "stopped" if info.state in ("T", "t") else "running")
            except RemoteError as err:
                self.notes.append(f"the state of server pid {pid} could not be read: {err}")
        tail: list[str] = []
        if log_path:
            try:
                tail = self.box.tail(log_path, LOST_LOG_TAIL, timeout=30)
            except RemoteError as err:
                self.notes.append(f"the log {log_path} could not be read: {err}")
        return ServerStoppedAnswering(server=self._serving_label(), port=self.inventory.port, pid=pid, state=state,
                                      step="", what=what, error=" ".join(str(exc).split())[:500],
                                      log_tail=REDACTOR.obj(tail), log_path=log_path)

    def _lost(self, exc: ServerStoppedAnswering, step: str) -> StepResult:
        """Record that the server stopped answering during ``step`` (the run ends there: every
        later step is skipped, :meth:`finish` restores the box and writes the verdict
        ``inconclusive``). A server the run launched is stopped at the restore, the original
        relaunched if the run had stopped it; the server as found is left as it is (the run did
        not start it and does not kill it). Returns the step's result."""
        exc.step = exc.step or step
        self.server_lost = exc
        if self.applied and self.after is None and not self.fix_result:
            self.fix_result = {"applied": True, "sufficient": None,
                               "why": f"nothing was measured with the fix: {SERVER_STOPPED_ANSWERING}"}
        return StepResult(step, "inconclusive", exc.describe(), data=exc.to_dict())

    @_ends_on_server_loss("measure_symptom")
    def measure_symptom(self) -> Measurement | StartFailure | StepResult | None:
        """The symptom: acceptance of the server as found (launched by the run when none runs). A
        server that does not start is the symptom then (:class:`StartFailure`: its exception and
        log tail become evidence). With no server running and ``allow_restart`` False there is
        nothing to measure: ``None``, and the static checks still run. A server that stops answering
        while it is measured ends the run: a :class:`StepResult` (``inconclusive``), the later steps
        skipped, the verdict ``inconclusive: server stopped answering``."""
        original = self.journal.data.get("original_server")
        if self.current is None and not (original and not original.get("stopped")):
            if not self.allow_restart:
                self.notes.append("no server is running and allow_restart is False: nothing was measured")
                return None
            handle, failure = self._try_launch(self.inventory.launch, "as-found")
            if failure is not None:
                return failure
        self.before = self.measure("as found: " + _method_label(self.inventory.launch))
        if self._speculation_off():
            info = getattr(self.before.generate, "server_info", None) or {}
            if self.inventory.launch.engine == "vllm":
                self.notes.append("the server serves WITHOUT speculative decoding: its /metrics has no "
                                  "vllm:spec_decode_* counts for the requests sent; check that the launch command's "
                                  "--speculative-config reaches vLLM, so there is no speedup at all")
            else:
                self.notes.append("the server serves WITHOUT speculative decoding: no response carried spec_verify_ct "
                                  f"(/server_info speculative_algorithm: {info.get('speculative_algorithm')!r}); check "
                                  "that the launch command's --speculative-algorithm reaches the engine (a mistyped or "
                                  "dropped flag), so there is no speedup at all")
        return self.before

    # -- static -----------------------------------------------------------------------------------

    def preflight(self):
        """Every static rule of the catalogue (:func:`workbench.doctor.run_doctor`) on the launch
        command as found, read from the box (paths resolved against the server's cwd, the engine
        source the inventory located). Run once; every hypothesis decides from its findings."""
        if self.doctor_report is None:
            resolved = self.inventory.resolved or self.inventory.launch
            self.doctor_report = run_doctor(self.box, resolved, engine_root=self.inventory.engine_root,
                                            engine_version=self.inventory.engine_version,
                                            cwd=self.inventory.server_cwd)
            self.draft_facts = self.doctor_report.draft_facts
            self.target_facts = self.doctor_report.target_facts
            self.findings = list(self.doctor_report.findings)
            given = self.given.get("aux_layer_ids")
            recorded = getattr(self.draft_facts, "aux_layer_ids", None)
            if given is not None and isinstance(recorded, (list, tuple)) and list(recorded) != list(given):
                self.notes.append(f"aux_layer_ids {given} was given and the draft's eagle_config records {recorded}: "
                                  "the engine reads the recorded ids; the given ones are used only by a fix that "
                                  "rewrites eagle_config (when the recorded ids are missing or wrong)")
            self._unmask(resolved)
        return self.doctor_report

    def _unmask(self, resolved: LaunchCommand) -> None:
        """Faults one fault masks (the aux rules apply only under EAGLE3, so a wrong flag hides a
        missing eagle_config): the doctor again on the command with the launch fixes applied, its
        new findings added with ``evidence["found_with"]`` naming the command. Static, no restart;
        at most two more passes."""
        seen = {(f.rule, f.message) for f in self.findings}
        report = self.doctor_report
        for _ in range(2):
            fixed = report.corrected_launch()
            if fixed is None:
                return
            launch = LaunchCommand.parse(fixed)
            if launch.argv == resolved.argv:
                return
            report = run_doctor(self.box, launch, engine_root=self.inventory.engine_root,
                                engine_version=self.inventory.engine_version, cwd=self.inventory.server_cwd)
            changes = ", ".join(f"{flag} {new}" for flag, _old, new in resolved.diff(launch) if flag.startswith("--"))
            for f in report.findings:
                if (f.rule, f.message) in seen:
                    continue
                seen.add((f.rule, f.message))
                f.evidence["found_with"] = f"the launch fixed ({changes}): this fault is masked as launched"
                self.findings.append(f)
            resolved = launch

    def _facts(self, *, launch_fixed: bool = False) -> Facts:
        """The facts the doctor read, for the families' fix derivers (the token map re-read
        through the box when a deriver needs it). ``launch_fixed``: with the launch command the
        doctor's launch fixes make (what the relaunch will run: the aux facts under EAGLE3)."""
        report = self.preflight()
        launch = self.inventory.resolved or self.inventory.launch
        if launch_fixed and report.corrected_launch():
            launch = LaunchCommand.parse(report.corrected_launch())
        engine = (EngineSource(self.box, self.inventory.engine_root, self.inventory.engine_version, timeout=30)
                  if self.inventory.engine_root else None)
        return Facts(launch, target=report.target_facts, draft=report.draft_facts, engine=engine,
                     engine_version=self.inventory.engine_version, box=self.box, timeout=30)

    def _spec_findings(self, spec: HypothesisSpec) -> list[Finding]:
        return [f for f in self.findings if f.rule in spec.rules]

    def _decide(self, hid: str, verdict: str, summary: str, *, findings: list[Finding] = (),
                data: dict | None = None, kind: str = "static check") -> StepResult:
        evidence = [Evidence(kind="finding", summary=f"{f.rule}: {f.message}", data=f.to_dict(), source=kind)
                    for f in findings]
        if data:
            evidence.append(Evidence(kind="data", summary=summary, data=dict(data), source="box"))
        if not evidence:
            evidence.append(Evidence(kind="note", summary=summary, data={}, source="workbench"))
        self.ledger.decide(hid, verdict, *evidence)
        return StepResult(hid, verdict, summary, list(findings), dict(data or {}))

    def _add_evidence(self, hid: str, summary: str, data: dict | None = None, kind: str = "probe") -> None:
        self.ledger.add_evidence(hid, Evidence(kind=kind, summary=summary, data=dict(data or {}), source="box"))

    def check_hypotheses(self) -> HypothesisTable:
        """Every hypothesis decided from the static evidence (no restart): confirmed by an error
        finding of its rules; for the aux layers, by ids the user gave that differ from what the
        engine captures, or by ids the draft states where the engine never reads them; refuted when
        its rules ran and found nothing (or only information) and acceptance is not low;
        inconclusive when its inputs could not be read, when only a warning points at it, or when
        it is out of static reach (the runtime-only causes, with what would decide them)."""
        self._require_open("check_hypotheses")
        report = self.preflight()
        low = self.acceptance_low(self.before.accept_length if self.before is not None else None)
        unreadable = self.draft_facts is None
        # on vLLM the SGLang-code rules are not run (Rule.engines): said so, never "ran and found nothing"
        skipped_engine = "vllm" if self.inventory.launch.engine == "vllm" else None
        skipped = {r.id for r in REGISTRY.skipped_for(skipped_engine)}
        rows = []
        for spec, _fam in REGISTRY.hypotheses():
            hid = spec.id
            found = self._spec_findings(spec)
            errors = [f for f in found if f.severity == "error"]
            if not spec.static:
                verdict, why = "inconclusive", f"out of static reach; decided by {spec.decide}"
                if low is False:
                    verdict, why = "refuted", "acceptance is not low: nothing for it to explain"
                self._decide(hid, verdict, why, kind="workbench")
            elif errors:
                verdict, why = "confirmed", "; ".join(f.message for f in errors)
                self._decide(hid, verdict, why, findings=found)
            elif hid == "aux-eagle-config" and found and any(f.rule == "aux-config-unread" for f in found):
                verdict, why = self._decide_eagle_config(found, low)
            elif hid == CROSS_ENGINE_AUX and found:
                verdict, why = self._decide_cross_engine(found, low)
            elif hid == "aux-offset-convention" and found:
                verdict = "inconclusive" if low else "refuted"
                why = ("acceptance is low and this engine captures other layers than the ids written: the other "
                       "convention is worth measuring" if low else
                       "the ids are read with this engine's offset rule and acceptance is not low")
                self._decide(hid, verdict, why, findings=found)
            elif unreadable and hid != "checkpoint-readable" and hid != "spec-params":
                verdict, why = "inconclusive", "the draft could not be read: " + "; ".join(
                    f.message for f in report.findings if f.rule in ("checkpoint-unreadable", "model-not-on-box"))
                self._decide(hid, verdict, why, findings=found)
            elif hid == "weights-loaded" and self.draft_facts is not None and self.draft_facts.tensors is not None \
                    and any(f.rule == "unknown-draft-architecture" for f in self.findings):
                verdict, why = "inconclusive", ("the draft declares a class the weight rules do not model "
                                                "(unknown-draft-architecture): its tensors were not followed")
                self._decide(hid, verdict, why, findings=found)
            else:
                warnings = [f for f in found if f.severity == "warning"]
                not_run = [r for r in spec.rules if r in skipped]
                if warnings and low:
                    verdict, why = "inconclusive", "; ".join(f.message for f in warnings)
                elif not found and not_run and len(not_run) == len(spec.rules):
                    # e.g. SGLang's silent fc width check: the rules model SGLang's code, which a vLLM
                    # server does not run. Not checked statically: decided as the runtime-only
                    # hypotheses are (the probe, the fix's measurement), refuted only by acceptance.
                    rules = f"its rules ({', '.join(spec.rules)}) model SGLang's code and are not run on vLLM"
                    if low:
                        verdict, why = "inconclusive", f"{rules}; acceptance is low: the probe or the fix decides"
                    else:
                        verdict, why = "refuted", f"{rules}; acceptance is not low: nothing for it to explain"
                else:
                    verdict = "refuted"
                    ran = [r for r in spec.rules if r not in skipped]
                    why = ("its rules ran and found " + ("only: " + "; ".join(f"{f.severity} {f.rule}" for f in found)
                                                         if found else "nothing") + f" ({', '.join(ran)})" +
                           (f"; not run on {skipped_engine}: {', '.join(not_run)}" if not_run else ""))
                self._decide(hid, verdict, why, findings=found)
            rows.append((hid, verdict, why))
        return HypothesisTable(rows, "Hypotheses after the static checks (no restart)")

    def _decide_cross_engine(self, found: list[Finding], low: bool | None) -> tuple[str, str]:
        """:data:`CROSS_ENGINE_AUX` from the doctor's ``aux-id-convention`` warning: when the draft's
        convention is known (recorded, or presumed from its layout) the one-layer shift is certain
        from the two engines' capture rules, only its cost is not: inconclusive whatever the
        acceptance (the probe shows the layers the target captures, the fix measures the cost);
        with the convention unknown, inconclusive only when acceptance is low (a candidate to
        measure), refuted otherwise."""
        finding = next(f for f in found if f.rule == "aux-id-convention")
        known = (finding.evidence.get("draft_convention") or {}).get("value") is not None
        if known:
            verdict, why = "inconclusive", (f"{finding.message}; the shift follows from the two engines' rules, what it "
                                            "costs does not: the probe shows the layers the target captures, the "
                                            "repaired copy measures the cost")
        elif low:
            verdict, why = "inconclusive", f"{finding.message}; acceptance is low: the other convention is worth measuring"
        else:
            verdict, why = "refuted", f"{finding.message}; but nothing says whose convention and acceptance is not low"
        self._decide(CROSS_ENGINE_AUX, verdict, why, findings=found)
        return verdict, why

    def _decide_eagle_config(self, found: list[Finding], low: bool | None) -> tuple[str, str]:
        draft = self.draft_facts
        unread = next(f for f in found if f.rule == "aux-config-unread")
        captured = (unread.evidence.get("captured_layers") or {}).get("value")
        given = self.given.get("aux_layer_ids")
        if draft is not None and draft.aux_layer_ids_top_level is not None and unread.severity == "warning":
            verdict, why = "confirmed", (f"{unread.message}; the draft states ids {draft.aux_layer_ids_top_level} "
                                         "where the engine never reads them")
        elif given is not None:
            expect = [i + 1 for i in given] if captured is not None else None
            if expect is not None and list(captured) != expect and list(captured) != list(given):
                verdict, why = "confirmed", (f"{unread.message}; the draft was trained with ids {given} (given), "
                                             f"the engine captures {captured}")
            else:
                verdict, why = "refuted", f"the engine's default layers {captured} are what the given ids {given} mean"
        elif low:
            verdict, why = "inconclusive", (f"{unread.message}; acceptance is low, and the ids the draft was trained "
                                            "with are recorded nowhere: give aux_layer_ids to decide")
        else:
            verdict, why = "refuted", f"{unread.message}, and acceptance is not low (the default layers fit)"
        self._decide("aux-eagle-config", verdict, why, findings=found)
        return verdict, why

    # -- probes -----------------------------------------------------------------------------------

    def suspects(self) -> list[str]:
        """The hypotheses still in play (confirmed or inconclusive), in the order they act."""
        return [spec.id for spec, _ in REGISTRY.hypotheses()
                if self.ledger.get(spec.id).verdict in ("confirmed", "inconclusive") and spec.static]

    def code_path(self) -> CodePathMap | None:
        """The EAGLE-3 code-path map of the box's engine for this deployment's target and draft
        classes (:func:`workbench.engine.codepath.code_path_map`; built once). ``None`` when the
        engine source was not located."""
        if self._code_path is None and self.inventory.engine_root:
            kw: dict[str, Any] = {}
            if self.target_facts is not None and self.target_facts.architectures:
                kw["target_arch"] = self.target_facts.architectures[0]
                kw["num_layers"] = self.target_facts.num_hidden_layers
            if self.draft_facts is not None:
                if self.draft_facts.architectures:
                    kw["draft_arch"] = self.draft_facts.architectures[0]
                if isinstance(self.draft_facts.aux_layer_ids, list):
                    kw["aux_ids"] = self.draft_facts.aux_layer_ids
            src = EngineSource(self.box, self.inventory.engine_root, self.inventory.engine_version, timeout=30)
            launch = self.inventory.launch
            # the EAGLE worker the server runs follows its environment and flags (SGLANG_ENABLE_SPEC_V2, ...)
            kw["env"] = {**(self.inventory.server_env or {}), **dict(launch.env)} if launch is not None else \
                self.inventory.server_env
            kw["launch_args"] = list(launch.arg_tokens) if launch is not None else None
            if self._engine_kind() == "vllm":
                # vLLM's own code path: the draft's class and whole config from --speculative-config, the
                # model runner from the server's environment (workbench.engine.codepath_vllm)
                from workbench.engine.codepath_vllm import vllm_map_for_launch

                self._code_path = vllm_map_for_launch(self.box, src, self.inventory.resolved or launch,
                                                      cwd=self.inventory.server_cwd, timeout=30, notes=self.notes,
                                                      environ=self.inventory.server_env)
            else:
                self._code_path = code_path_map(src, **kw)
        return self._code_path

    def _engine_kind(self) -> str:
        """``"vllm"`` when the box's engine package is vLLM, else ``"sglang"`` (SGLang and the
        sandbox's mirror of it): whose code-path map and probe recipes the probe step uses."""
        return "vllm" if (self.inventory.engine_package or "").split(".")[0] == "vllm" else "sglang"

    def _recipes_for(self, suspects: list[str]) -> list[str]:
        names = [PROBE_RECIPE]
        for hid in suspects:
            names += [p for p in self.specs[hid].probes if p not in names]
        table = recipes_for(self._engine_kind())
        return [n for n in names if n in table]

    @_ends_on_server_loss("probe")
    def probe(self) -> StepResult | None:
        """One probe launch showing the mechanism of the suspects on the engine's own code path:
        the recipes of every confirmed or undecided hypothesis (the width reaching ``fc`` always),
        the server relaunched with its own command, one request, the readings taken from that
        launch's log. Skipped (``None``) when restarts are not allowed, when nothing is suspect and
        acceptance is not low (a healthy deployment costs no restart), when the engine source was
        not located, or when the server does not start as found (the start-up failure is the
        evidence). The probes stay in place for the fix relaunch (the fixed server shows its
        mechanism too) when fixes will be applied, and are reverted otherwise. A probe server that
        stops answering ends the run (``inconclusive``, see :meth:`measure_symptom`)."""
        if not self.allow_restart:
            self.notes.append("no probe: allow_restart is False")
            return None
        suspects = self.suspects()
        low = self.acceptance_low(self.before.accept_length if self.before is not None else None)
        low = True if self._speculation_off() else low
        if self.start_failures and self.before is None:
            self.notes.append("no probe: the server does not start as found (its log is the evidence)")
            return None
        if not suspects and not low:
            self.notes.append("no probe: no hypothesis is suspect and acceptance is not low")
            return None
        if not self.inventory.engine_root:
            self.notes.append("no probe: the engine's source was not located on the box")
            return None
        # The draft's and target's configs (the fc width the probe's readout is judged against, the
        # classes the code-path map follows) come from the static read, also when the probe is the
        # first step after Inventory; a draft that cannot be read leaves them unknown (said below).
        self._read_configs()
        cmap = self.code_path()
        added = []
        for name in self._recipes_for(suspects):
            try:
                recipe_probes(cmap, name)
            except SourceLookupError as exc:
                self.notes.append(f"probe {name} not added: {exc}")
                continue
            added.append(name)
        if not added:
            return None
        try:
            self.probes = add_recipes(self.box, cmap, added, python=self.inventory.python, timeout=60)
        except (RemoteError, SourceLookupError) as exc:
            self.notes.append(f"the probes were not added ({type(exc).__name__}: {exc}); none is in place")
            return StepResult("probe", "inconclusive", f"the probes could not be added: {exc}")
        handle, failure = self._try_launch(self.inventory.launch, "probe")
        if failure is not None:
            self._revert_probes()
            return StepResult("probe", "inconclusive", f"the probe launch did not start: {failure.exception or failure.error}")
        readings = self._read_probes(handle)
        self.probe_result = self._probe_summary(readings, before=True)
        self.probe_result["recipes_added"] = added
        self._attach_probe_evidence(readings)
        if not (self.apply_fix_enabled and self.allow_restart):
            self._revert_probes()
        return StepResult("probe", "done", self._probe_text(), data={k: v for k, v in self.probe_result.items()
                                                                      if k in ("observed_widths", "captured_layers",
                                                                               "d2t", "unmatched", "left_at_init")})

    def _read_probes(self, handle) -> dict[str, list]:
        """Send one request to the launch ``handle`` (bounded by ``request_timeout``) and read each
        recipe's lines printed by that launch (its process group: an earlier launch's lines are no
        evidence about this one): ``{recipe name: [ProbeReading, ...]}``. Read once the log has
        settled (``workbench.logs.read_when_settled``: not grown for 0.5 s with the width line in
        it), or given up when it has not grown for 10 s without it: no fixed deadline a busy
        machine could overrun."""
        launch = self.current_launch or self.inventory.launch
        key = launch.get("--api-key")
        with httpx.Client(timeout=self.request_timeout, trust_env=False,
                          headers=auth_headers(key if isinstance(key, str) else None)) as client:
            try:
                if launch.engine == "vllm":
                    # vLLM has no /generate: one greedy /v1/completions for the served model
                    # (vLLM 0.32.0 entrypoints/openai/completion; its id from GET /v1/models)
                    models = client.get(self.inventory.base_url + "/v1/models").json().get("data") or []
                    model = next((m.get("id") for m in models if isinstance(m, dict) and m.get("id")), None)
                    body = {"prompt": self.prompts[0]["text"], "max_tokens": 8, "temperature": 0}
                    client.post(self.inventory.base_url + "/v1/completions",
                                json={**body, **({"model": model} if model else {})})
                else:
                    client.post(self.inventory.base_url + "/generate",
                                json={"text": self.prompts[0]["text"],
                                      "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                lost = (self._stopped_answering(exc, what="the probe request", pid=handle.pid, log_path=handle.log_path)
                        if isinstance(exc, httpx.TransportError) else None)
                if lost is not None:
                    raise lost from exc
                self.notes.append(f"the probe request failed: {type(exc).__name__}: {exc}")
        # Read once the log has settled: the lines of every recipe the request printed, never a
        # partial read of a log still being written; given up when it has not grown for
        # SETTLE_STALL_S without the width line (a stall, not a total time: a busy box is slower).
        try:
            out, _settled = read_when_settled(
                self.box, handle.log_path,
                lambda: read_recipes(self.box, handle.log_path, self.probes, pgid=handle, timeout=30),
                done=lambda readings: bool(readings.get(PROBE_RECIPE)), timeout=30)
        except RemoteError as exc:
            self.notes.append(f"the probe lines could not be read: {exc}")
            return {}
        return out

    def _probe_summary(self, readings: dict[str, list], *, before: bool) -> dict[str, Any]:
        widths: list[tuple[int, ...]] = []
        for r in readings.get(PROBE_RECIPE, []):
            if "hidden_states.shape" in r.raw and not r.error:
                try:
                    widths.append(remote_probes.parse_shape(r.raw["hidden_states.shape"]))
                except ValueError:
                    continue
        expected = self._expected_width()
        observed = self._decisive_width(widths, expected)
        out: dict[str, Any] = {
            "observed_hidden_size": observed, "expected_hidden_size": expected,
            "target_hidden_size": self._target_hidden(),
            "observed_shape": next((s for s in widths if s and s[-1] == observed), None),
            "observed_widths": sorted({s[-1] for s in widths if s}),
            "lines": {tag: [r.log_line for r in rs] for tag, rs in readings.items()},
        }
        # SGLang: the layer inputs the target tests (``self.layers_to_capture``); vLLM: the layers its
        # model keeps (``self.aux_hidden_state_layers``: the hidden state after k layers)
        # (a vLLM target with its own setter, DeepSeek-V2/V3, stores the runner's ``aux_layers`` as given)
        rows = [r for r in readings.get("target-capture-layers", []) if not r.error]
        cap = [_literal(r.raw[key]) for key in ("self.layers_to_capture", "self.aux_hidden_state_layers", "aux_layers")
               for r in rows if key in r.raw][:1]
        if cap:
            out["captured_layers"] = cap[0]
        d2t = [r.raw for r in readings.get("draft-d2t", []) if not r.error]
        if d2t:
            out["d2t"] = d2t[0]
        weights = readings.get("draft-weights-unmatched")
        if weights is not None and not missing_required("draft-weights-unmatched", weights):
            out["unmatched"] = weights_unmatched(weights)
        elif weights is not None:
            out["unmatched_unknown"] = "load_weights printed no .ran line: no unmatched name is no evidence"
        at_init = readings.get("draft-params-at-init")
        if at_init:
            left = params_left_at_init(at_init)
            if left.compared:
                out["left_at_init"] = left.faults
                out["shared_from_target"] = list(left.shared_from_target)
        return out

    def _read_configs(self) -> None:
        """:meth:`preflight` (run once) for the probe step, its failure recorded in :attr:`notes`
        instead of raised: the probe still runs, its expected widths then unknown."""
        if self.doctor_report is not None:
            return
        try:
            self.preflight()
        except (DoctorError, RemoteError) as exc:
            self.notes.append(f"the draft's config was not read before the probe ({type(exc).__name__}: {exc}): "
                              "the fc width it expects is unknown")

    def _attach_probe_evidence(self, readings: dict[str, list]) -> None:
        pr = self.probe_result
        expected, observed = pr.get("expected_hidden_size"), pr.get("observed_hidden_size")
        widths = pr.get("observed_widths")
        if observed is not None and expected is not None:
            if observed != expected:
                self._add_evidence("algorithm-flag", f"probe: no draft forward saw the fc's width {expected} "
                                   f"(widths seen {widths}): the width check skips fc", pr_subset(pr))
            else:
                self._add_evidence("algorithm-flag", f"probe: the draft-extend step receives {expected}-wide input, "
                                   "what its fc expects", pr_subset(pr))
        if "captured_layers" in pr:
            for hid in ("aux-eagle-config", "aux-layer-ids", "aux-offset-convention", "target-capture"):
                self._add_evidence(hid, f"probe: the target captures layers {pr['captured_layers']}",
                                   {"captured_layers": pr["captured_layers"]})
            self._probe_decides_cross_engine(pr["captured_layers"])
        if "d2t" in pr:
            self._add_evidence("token-map", f"probe: {d2t_words(pr['d2t'])}", {"d2t": pr["d2t"]})
        if "left_at_init" in pr:
            left = sorted(pr["left_at_init"])
            self._add_evidence("weights-loaded", f"probe: load_weights left {len(left)} parameter(s) at their initial "
                               f"values{': ' + str(left[:5]) + (' …' if len(left) > 5 else '') if left else ''} (besides those the target's embedding "
                               "/ lm_head replace)", {"left_at_init": pr["left_at_init"],
                                                      "shared_from_target": pr.get("shared_from_target")})
        if "unmatched" in pr:
            self._add_evidence("weights-loaded", f"probe: {unmatched_words(pr['unmatched'])}",
                               {"unmatched": pr["unmatched"]})

    def _probe_decides_cross_engine(self, captured: Any) -> None:
        """The ``target-capture-layers`` reading decides :data:`CROSS_ENGINE_AUX` when the doctor's
        ``aux-id-convention`` finding named a known convention: the target capturing the states the
        finding says the serving engine feeds (``states_fed``, which differ from those the draft was
        trained on) confirms the shift on the engine's own code path; capturing the trained states
        refutes it. Both as evidence ``kind="probe"``. Layer numbers are hidden states after k
        decoder layers in both engines (SGLang's ``layers_to_capture`` = inputs of layer k; vLLM's
        ``aux_hidden_state_layers``, vLLM 0.32.0 ``model_executor/models/interfaces.py``)."""
        finding = next((f for f in self.findings if f.rule == "aux-id-convention"), None)
        if finding is None or not isinstance(captured, (list, tuple)) or \
                self.ledger.get(CROSS_ENGINE_AUX).verdict != "inconclusive":
            return
        ev = finding.evidence
        if (ev.get("draft_convention") or {}).get("value") is None:
            return
        fed = (ev.get("states_fed") or {}).get("value")
        trained = next(((v or {}).get("value") for k, v in ev.items() if k.startswith("states_under_")
                        and k != "states_under_v2"), None)
        got = sorted(int(x) for x in captured)
        data = {"captured_layers": got, "states_fed": fed, "states_trained": trained,
                "proposed_ids": ev.get("proposed_ids")}
        if isinstance(fed, list) and isinstance(trained, list) and got == sorted(fed) and got != sorted(trained):
            self._decide(CROSS_ENGINE_AUX, "confirmed", f"probe: the target captures the states after {got} decoder "
                         f"layers; the draft was trained on those after {trained} (its ids written for the other "
                         "engine)", data=data, kind="probe")
            self.probe_confirmed.add(CROSS_ENGINE_AUX)
        elif isinstance(trained, list) and got == sorted(trained):
            self._decide(CROSS_ENGINE_AUX, "refuted", f"probe: the target captures the states after {got} decoder "
                         "layers, those the draft was trained on", data=data, kind="probe")

    def _probe_text(self) -> str:
        pr = self.probe_result
        parts = []
        if pr.get("observed_widths"):
            expected = pr.get("expected_hidden_size")
            parts.append(f"widths reaching fc: {pr['observed_widths']} " +
                         (f"(fc expects {expected})" if expected is not None else
                          "(the width fc expects is unknown: the draft's config was not read)"))
        if "captured_layers" in pr:
            parts.append(f"layers captured: {pr['captured_layers']}" +
                         (" (none: no aux hidden states reach the draft)" if pr["captured_layers"] == [] else ""))
        if "d2t" in pr:
            parts.append(d2t_words(pr["d2t"]))
        if "unmatched" in pr:
            parts.append(unmatched_words(pr["unmatched"]))
        if "left_at_init" in pr:
            parts.append(f"parameters left at their initial values: {sorted(pr['left_at_init']) or 'none'}")
        return "; ".join(parts) or "the probes printed nothing"

    # -- fixes ------------------------------------------------------------------------------------

    def derive_fixes(self) -> list[Fix]:
        """Every fix the families derive for the confirmed hypotheses (and, for undecided ones,
        candidates to measure), in the order the causes act."""
        as_found, relaunched = self._facts(), self._facts(launch_fixed=True)
        confirmed = {hid for hid in self.specs if self.ledger.get(hid).verdict == "confirmed"}
        open_ = {hid for hid in self.specs if self.ledger.get(hid).verdict == "inconclusive"}
        wanted: dict[str, str] = {}
        for hid in confirmed | open_:
            for rule in self.specs[hid].rules:
                wanted.setdefault(rule, hid)
        out: list[tuple[int, Fix]] = []
        seen_fixers = set()
        for spec, fam in REGISTRY.hypotheses():
            if fam.fixer is None or fam.name in seen_fixers:
                continue
            seen_fixers.add(fam.name)
            mine = [f for f in self.findings if f.rule in wanted]
            facts = as_found if fam.name == "launch-flags" else relaunched
            for fix in fam.fixer(facts, mine, self.given):
                hids = {wanted[r] for r in fix.rules if r in wanted}
                if not hids:
                    continue
                if fix.kind == "candidates" and not (hids & open_):
                    continue
                if fix.kind != "candidates" and not (hids & confirmed) and fix.kind != "none":
                    continue
                order = min(self.specs[h].order for h in hids)
                out.append((order, fix))
        fixes: list[Fix] = []
        for _, fix in sorted(out, key=lambda of: of[0]):
            same = next((i for i, f in enumerate(fixes) if f.kind == fix.kind and f.summary == fix.summary
                         and f.missing == fix.missing and f.launch == fix.launch and f.repair is fix.repair), None)
            if same is None:
                fixes.append(fix)
            else:  # two rules proposing the same fix: listed once, answering both
                fixes[same] = dataclasses.replace(fixes[same], rules=tuple(dict.fromkeys(fixes[same].rules + fix.rules)))
        self.fixes = fixes
        return self.fixes

    def _fixed_launch(self, fixes: list[Fix], draft_path: str | None) -> LaunchCommand:
        launch = self.inventory.launch
        for fix in fixes:
            for flag, value in fix.launch.items():
                launch = launch.without_flag(flag) if value is None else launch.with_flag(flag, value)
        if draft_path:
            # SGLang: --speculative-draft-model-path; vLLM: --speculative-config's "model", its
            # form kept (LaunchCommand.with_draft_model)
            launch = launch.with_draft_model(draft_path)
        return launch

    def _draft_dir(self) -> str | None:
        return _draft_of(self.inventory.resolved or self.inventory.launch)

    def _copy_draft(self, repair: DraftRepair, label: str) -> str:
        """A repaired copy of the draft on the box (journalled; removed at the end unless kept)."""
        from workbench.session.draft_copy import make_repaired_copy

        source = self._draft_dir()
        if source is None:
            raise DiagnosisError("a draft repair was derived but the launch command names no draft directory")
        copy = make_repaired_copy(self.box, self.journal, source, repair, python=self.inventory.python)
        record = copy.to_dict()
        record["label"] = label
        self.draft_copies.append(record)
        return copy.path

    def _launch_with(self, fixes: list[Fix], label: str) -> tuple[LaunchCommand, Measurement | StartFailure]:
        """Relaunch with ``fixes`` applied (one draft copy carrying every repair), measure."""
        repair = DraftRepair()
        for fix in fixes:
            if fix.repair is not None:
                repair = repair.merged(fix.repair)
        draft_path = self._copy_draft(repair, label) if not repair.empty else None
        launch = self._fixed_launch(fixes, draft_path)
        handle, failure = self._try_launch(launch, label)
        if failure is not None:
            return launch, failure
        return launch, self.measure(label)

    @_ends_on_server_loss("apply_fixes")
    def apply_fixes(self) -> Measurement | StartFailure | StepResult | None:
        """Apply every derivable fix of the confirmed causes in ONE relaunch (launch changes, and a
        single repaired copy of the draft carrying every repair), read the probes on the fixed
        server, measure. Sufficient when acceptance is no longer low and rose by
        :data:`SUFFICIENT_GAIN` (or, when nothing could be measured before, is simply not low);
        otherwise the fix is reported as insufficient and the causes stay open. Then, when allowed,
        the candidates of the undecided hypotheses (the offset convention) are tried, each measured
        on top of the fix, and the best one that helps is kept. ``None`` when nothing was applied.
        A fixed server that stops answering ends the run (``inconclusive``, see :meth:`measure_symptom`)."""
        if not (self.apply_fix_enabled and self.allow_restart):
            self._revert_probes()
            return None
        fixes = self.derive_fixes()
        applicable = [f for f in fixes if f.kind in ("launch", "draft-copy")]
        candidates = [f for f in fixes if f.kind == "candidates"]
        result = None
        measured_anyway = [h for h in MEASURED_EVEN_IF_NOT_LOW if self.ledger.get(h).verdict == "confirmed"
                           and any(self._hypothesis_of(r) == h for f in applicable for r in f.rules)]
        if self.before is not None and self.acceptance_low(self.before.accept_length) is False and not measured_anyway:
            # Nothing to prove: a relaunch with the fix could only show the same acceptance.
            if applicable:
                self.notes.append(f"accept length {_fmt(self.before.accept_length)} is not low: the fixes of the "
                                  "confirmed causes are proposed, not applied (they have no measured effect here)")
            self._revert_probes()
            self._judge_fix()
            return None
        if applicable:
            self.applied = list(applicable)
            try:
                self.fix_launch, result = self._launch_with(applicable, "fix")
                self._doctor_on_fix(self.fix_launch)
                if isinstance(result, StartFailure) and result.refused is not None:
                    # Not tried: what the fix leaves still stops start-up. The causes stay open.
                    self.fix_refused, self.blocked, self.applied, self.fix_launch = result, self.applied, [], None
                if isinstance(result, Measurement):
                    handle = self.current
                    if self.probes and handle is not None:
                        after = self._probe_summary(self._read_probes(handle), before=False)
                        self.probe_result["after_fix_hidden_size"] = after.get("observed_hidden_size")
                        self.probe_result["after_fix_shape"] = after.get("observed_shape")
                        self.probe_result["after_fix_widths"] = after.get("observed_widths")
                        self.probe_result["after_fix"] = {k: v for k, v in after.items() if k != "lines"}
                        self.probe_result["after_fix_lines"] = after.get("lines")
                    self.after = result
            except ServerStoppedAnswering:
                raise
            except DiagnosisError as exc:
                self.notes.append(f"the fix could not be applied: {exc}")
        unfixed = [hid for hid in self.specs if self.ledger.get(hid).verdict == "confirmed"
                   and not any(self._hypothesis_of(r) == hid for f in self.applied for r in f.rules)
                   and not self._cleared_by_fix(self.specs[hid]) and not self._explained_by(self.specs[hid])]
        if candidates and self.try_candidates and self.allow_restart:
            if unfixed:
                # A confirmed cause with no fix keeps acceptance low whatever the candidates do: a
                # restart per candidate would measure nothing about them.
                self.notes.append(f"candidates not tried: {', '.join(unfixed)} is confirmed and has no fix applied; "
                                  "acceptance stays low until it is fixed")
            else:
                self._try_candidate_fixes(candidates)
        self._revert_probes()
        self._judge_fix()
        # a candidate fix for a hypothesis the measurements refuted is no fix to propose
        self.fixes = [f for f in self.fixes if not (f.kind == "candidates" and all(
            self.ledger.get(h).verdict == "refuted" for h in {self._hypothesis_of(r) for r in f.rules} - {None}))]
        return self.after if self.after is not None else result

    def _doctor_on_fix(self, launch: LaunchCommand) -> None:
        """Every rule again on the fixed command, the repaired draft copy in place (static, no
        restart): :attr:`fixed_doctor` gets the error rules the fix cleared and the findings that
        remain. A confirmed cause without a fix of its own whose every error the fix cleared is a
        consequence of the fixed causes (:meth:`consequences`), not a root cause."""
        try:
            report, _cached = self.guard.report(launch)  # the launch guard ran it on this command already
        except (DoctorError, RemoteError) as exc:
            self.notes.append(f"the doctor on the fixed command did not run ({type(exc).__name__}: {exc})")
            return
        left = {f.rule for f in report.findings if f.severity == "error"}
        self.fixed_doctor = {
            "launch_command": launch.to_display(),
            "cleared": sorted({f.rule for f in self.findings if f.severity == "error"} - left),
            "remaining": [{"rule": f.rule, "severity": f.severity, "message": f.message}
                          for f in report.findings if f.severity in ("error", "warning")],
        }

    def _explained_by(self, spec: HypothesisSpec) -> list[str]:
        """The confirmed hypotheses that explain every error finding of ``spec`` statically: each
        names the rule it is a consequence of (``evidence["consequence_of"]``, e.g. the weight
        findings of a draft whose config disagrees with its own tensors), that rule's hypothesis
        confirmed. Empty when any error of ``spec`` stands on its own."""
        errors = [f for f in self.findings if f.rule in spec.rules and f.severity == "error"]
        causes: list[str] = []
        for f in errors:
            rule = f.evidence.get("consequence_of")
            hid = self._hypothesis_of(rule) if isinstance(rule, str) else None
            if hid is None or hid == spec.id or self.ledger.get(hid).verdict != "confirmed":
                return []
            if hid not in causes:
                causes.append(hid)
        return causes

    def _cleared_by_fix(self, spec: HypothesisSpec) -> bool:
        """Whether the fix cleared every error finding of ``spec`` while no applied fix is its own
        (never when the fix's launch was refused: nothing was fixed, every cause stays a cause)."""
        if not self.fixed_doctor or self.fix_refused is not None or spec.id in self._fixed_hypotheses():
            return False
        errors = {f.rule for f in self.findings if f.rule in spec.rules and f.severity == "error"}
        return bool(errors) and errors <= set(self.fixed_doctor["cleared"])

    def consequences(self) -> list[dict[str, Any]]:
        """The confirmed hypotheses that are consequences of the root causes: no fix of their own
        was applied and the doctor on the fixed command no longer reports any of their errors
        (e.g. the draft's own embedding required only because the config's target_hidden_size is
        wrong), or whose every error finding names a confirmed cause it is a consequence of
        (``evidence["consequence_of"]``: known before any relaunch). Each: ``hypothesis``, ``rule``,
        ``message``, ``cleared_by`` (the fixed hypotheses, or the explaining ones)."""
        out = []
        for spec, _fam in REGISTRY.hypotheses():
            if self.ledger.get(spec.id).verdict != "confirmed":
                continue
            explained = self._explained_by(spec)
            if not (self._cleared_by_fix(spec) or explained):
                continue
            finding = next(f for f in self.findings if f.rule in spec.rules and f.severity == "error")
            out.append({"hypothesis": spec.id, "rule": finding.rule, "message": finding.message,
                        "cleared_by": self._fixed_hypotheses() if self._cleared_by_fix(spec) else explained})
        return out

    def _try_candidate_fixes(self, candidates: list[Fix]) -> None:
        base = self.after.accept_length if self.after is not None else (
            self.before.accept_length if self.before is not None else None)
        if base is not None and not self.acceptance_low(base):
            return
        for fix in candidates:
            hid = next((self._hypothesis_of(r) for r in fix.rules if self._hypothesis_of(r)), None)
            best = None
            for cand in fix.candidates:
                trial = Fix("draft-copy" if cand.get("repair") else "launch", fix.rules, cand["label"],
                            launch=cand.get("launch") or {}, repair=cand.get("repair"))
                launch, m = self._launch_with(self.applied + [trial], f"candidate: {cand['label']}")
                accept = m.accept_length if isinstance(m, Measurement) else None
                self.candidate_trials.append({"hypothesis": hid, "label": cand["label"], "accept_length": accept,
                                              "started": isinstance(m, Measurement),
                                              "refused": isinstance(m, StartFailure) and m.refused is not None,
                                              "launch_command": launch.to_display()})
                if accept is not None and (best is None or accept > best[0]):
                    best = (accept, trial, launch, m)
            if best is None or hid is None:
                continue
            accept, trial, launch, m = best
            if (base is None or accept >= base * SUFFICIENT_GAIN) and not self.acceptance_low(accept, launch):
                self.applied.append(trial)
                self.fix_launch, self.after = launch, m
                self._decide(hid, "confirmed", f"measured: {trial.summary} brings accept length to {accept:.3f} "
                             f"(from {_fmt(base)})", data={"trials": [t for t in self.candidate_trials
                                                                      if t["hypothesis"] == hid]}, kind="measurement")
                base = accept
            else:
                self._decide(hid, "refuted", f"measured: no candidate helps (best {accept:.3f} against {_fmt(base)})",
                             data={"trials": [t for t in self.candidate_trials if t["hypothesis"] == hid]},
                             kind="measurement")
        if self.after is not None and self.current is not None and self.fix_launch is not None \
                and self.current_launch is not None and self.current_launch.argv != self.fix_launch.argv:
            # leave the best fixed server running (keep_fix / the ladder expect it), not the last trial
            self._launch_with(self.applied, "fix")

    def _hypothesis_of(self, rule: str) -> str | None:
        return next((hid for hid, spec in self.specs.items() if rule in spec.rules), None)

    def _judge_fix(self) -> None:
        before = self.before.accept_length if self.before is not None else None
        after = self.after.accept_length if self.after is not None else None
        launch = self.fix_launch
        if not self.applied:
            self.fix_result = {"applied": False, "sufficient": None}
            if self.fix_refused is not None:
                blocking = self.fix_refused.refused or []
                self.fix_result.update({
                    "tried": False, "refused": True, "blocked_by": blocking,
                    "why": "the fix was not tried: the doctor on the command with it applied still finds what stops "
                           "the server from starting — " + "; ".join(f"{f['rule']}: {f['message']}" for f in blocking)})
            return
        failed = next((f for f in reversed(self.start_failures) if f.label == "fix"), None)
        if after is None:
            self.fix_result = {"applied": True, "sufficient": False,
                               "why": f"the server does not start with the fix: {failed.exception or failed.error}"
                               if failed else "nothing was measured with the fix"}
            return
        low = self.acceptance_low(after, launch)
        sufficient = (not low) and (before is None or after >= before * SUFFICIENT_GAIN)
        self.fix_result = {"applied": True, "sufficient": bool(sufficient), "before": before, "after": after,
                           "why": (f"accept length {_fmt(before)} → {after:.3f}" +
                                   ("" if sufficient else (" — still low" if low else " — no real gain")))}
        for hid in self._fixed_hypotheses():
            self._add_evidence(hid, ("measured: the fix brought acceptance back: " if sufficient else
                                     "measured: the fix is not enough: ") + self.fix_result["why"],
                               {"before": before, "after": after}, kind="measurement")
        if sufficient:
            fixed = set(self._fixed_hypotheses())
            for spec, _ in REGISTRY.hypotheses():
                if spec.id not in fixed and self.ledger.get(spec.id).verdict == "inconclusive":
                    self._decide(spec.id, "refuted", "the fix of the confirmed causes brought acceptance back "
                                 f"({self.fix_result['why']}): nothing left for it to explain", kind="measurement")

    def _fixed_hypotheses(self) -> list[str]:
        hids = []
        for fix in self.applied:
            for rule in fix.rules:
                hid = self._hypothesis_of(rule)
                if hid and hid not in hids:
                    hids.append(hid)
        return hids

    @_ends_on_server_loss("attribute")
    def attribute(self) -> list[dict] | StepResult | None:
        """With ``attribute_fixes``: relaunch once per fix, cumulatively in the order the causes
        act (as found → + the first fix → + the second → …), and measure each: what each fix
        contributed (the ladder; the last rung is the fix already measured). ``None`` otherwise.
        A rung's server that stops answering ends the run (``inconclusive``, see :meth:`measure_symptom`)."""
        if not (self.attribute_enabled and self.allow_restart and self.applied):
            return None
        ladder = [{"label": "as found", "accept_length": self.before.accept_length if self.before else None,
                   "fixes": []}]
        for k in range(1, len(self.applied)):
            launch, m = self._launch_with(self.applied[:k], f"ladder: {k} fix(es)")
            ladder.append({"label": "+ " + self.applied[k - 1].summary,
                           "accept_length": m.accept_length if isinstance(m, Measurement) else None,
                           "fixes": [f.summary for f in self.applied[:k]]})
        ladder.append({"label": "+ " + self.applied[-1].summary,
                       "accept_length": self.after.accept_length if self.after else None,
                       "fixes": [f.summary for f in self.applied]})
        self.ladder = ladder
        if self.keep_fix and self.current_launch is not None and self.fix_launch is not None \
                and self.current_launch.argv != self.fix_launch.argv:
            self._launch_with(self.applied, "fix")
        return ladder

    # -- the end ----------------------------------------------------------------------------------

    def run_all(self) -> dict:
        """Every step in the runbook's order — :meth:`measure_symptom`, :meth:`check_hypotheses`,
        :meth:`probe`, :meth:`apply_fixes`, :meth:`attribute` — then :meth:`finish`, also when a
        step raises (the box is put back, the error propagates). Returns the verdict (see
        :meth:`build_verdict`). For scripts, tests and benchmarks; the runbook calls the steps one
        cell each."""
        try:
            self.measure_symptom()
            self.check_hypotheses()
            self.probe()
            self.apply_fixes()
            self.attribute()
        finally:
            verdict = self.finish()
        return verdict

    def finish(self) -> dict:
        """Put the box back as found (stop the run's servers, revert probes, remove its draft
        copies, relaunch the original server), then write ``report_dir/diagnose_acceptance.json``.
        With ``keep_fix`` and a sufficient fix, the fixed server and its draft copy stay.
        Idempotent."""
        if self.finished:
            # Again: restore once more (normally nothing to do) and rewrite the verdict, so a
            # second Finish never leaves the box changed nor the file stale.
            report = self.restore()
            if self.verdict is None:  # the first finish failed before the verdict was built
                self.verdict = REDACTOR.obj(self.build_verdict())
            else:
                self.verdict["restore_again"] = REDACTOR.obj(list(report.actions + report.problems)
                                                             or ["nothing to do"])
            write_verdict_json(self.report_dir / "diagnose_acceptance.json", self.verdict)
            return self.verdict
        if not self.finished:
            self.finished = True
            self._revert_probes()
            if self._keeps_fix():
                # Leave the fixed server in place of the original: forget both, and the copy, in the journal.
                self.kept_server = {"pid": self.current.pid, "pgid": self.current.pgid, "port": self.inventory.port,
                                    "log_path": self.current.log_path,
                                    "launch_command": self.fix_launch.to_display() if self.fix_launch else None}
                self.journal.remove_started(self.current.pid)
                self.journal.mark_original_stopped(False)
                for copy in self.draft_copies:
                    if copy.get("path") and self.fix_launch is not None and \
                            _draft_of(self.fix_launch) == copy["path"]:
                        self.journal.remove_created(copy["path"])
                        copy["kept"] = True
                self.current = None
            self.restore()
            # Redacted here, not only when written: the runbook prints parts of it (the restore's
            # actions name the original server's command line, key included).
            self.verdict = REDACTOR.obj(self.build_verdict())
            write_verdict_json(self.report_dir / "diagnose_acceptance.json", self.verdict)
        return self.verdict

    def _require_open(self, step: str) -> None:
        """Raise :class:`DiagnosisError` when ``step`` is called on a run that finished: its box
        was restored, so a step would act on a server the run no longer owns (issue 15: "Measure
        symptom" after Finish relaunched the wrong-flag server). Start a new run instead."""
        if self.finished:
            raise DiagnosisError(f"DiagnosisRun.{step}(): this run finished (the box was restored and the "
                                 f"verdict written to {self.report_dir / 'diagnose_acceptance.json'}); "
                                 "start a new run with DiagnosisRun.start(...)")

    def _speculation_off(self) -> bool:
        """The server as found answered, but with no speculative step at all (no response carried
        ``spec_verify_ct``): speculative decoding is off there, so there is no speedup to lose — the
        symptom, never "healthy"."""
        return self.before is not None and not getattr(self.before.generate, "speculative", True)

    def _keeps_fix(self) -> bool:
        """Whether :meth:`finish` leaves the fixed server (and its draft copy) running: ``keep_fix``
        and a fix that was measured and sufficient, its server still up."""
        return bool(self.keep_fix and self.after is not None and self.current is not None
                    and self.fix_result.get("sufficient"))

    def _copy_kept(self, copy: dict) -> bool:
        return bool(copy.get("kept")) or (not self.finished and self._keeps_fix() and self.fix_launch is not None
                                          and _draft_of(self.fix_launch) == copy.get("path"))

    def _revert_probes(self) -> None:
        for probe in reversed(self.probes):
            try:
                remote_probes.revert_probe(self.box, probe)
            except RemoteError as exc:
                self.notes.append(f"probe {probe.tag} not reverted here ({exc}); the restore reverts it")
        if self.probes:
            self.probe_result["reverted"] = True
        self.probes = []

    @staticmethod
    def _decisive_width(shapes: list[tuple[int, ...]], expected: int | None) -> int | None:
        """The width that decides: ``expected`` (the draft's fc in_features) when any forward saw
        it (the aux states reached the draft), else the widest seen; ``None`` when none."""
        widths = [s[-1] for s in shapes if s]
        if not widths:
            return None
        return expected if expected in widths else max(widths)

    def _target_hidden(self) -> int | None:
        if self.target_facts is not None and self.target_facts.hidden_size:
            return self.target_facts.hidden_size
        if self.draft_facts is not None:
            return self.draft_facts.effective_target_hidden_size
        return None

    def _expected_width(self) -> int | None:
        if self.draft_facts is not None and self.draft_facts.fc_in_features:
            return self.draft_facts.fc_in_features
        return None

    # -- summary ----------------------------------------------------------------------------------

    def root_causes(self) -> list[dict[str, Any]]:
        """Every confirmed cause, in the order it acts on a request: its hypothesis, its first error
        finding (or the measurement that confirmed it), the fix derived for it and whether it was
        applied."""
        out = []
        for spec, fam in REGISTRY.hypotheses():
            hyp = self.ledger.get(spec.id)
            if hyp.verdict != "confirmed" or self._cleared_by_fix(spec) or self._explained_by(spec):
                continue
            errors = [f for f in self.findings if f.rule in spec.rules and f.severity == "error"]
            finding = errors[0] if errors else next((f for f in self.findings if f.rule in spec.rules), None)
            fixes = [f for f in self.fixes if any(self._hypothesis_of(r) == spec.id for r in f.rules)]
            applied = [f for f in self.applied if any(self._hypothesis_of(r) == spec.id for r in f.rules)]
            out.append({"hypothesis": spec.id, "rule": finding.rule if finding else None,
                        "message": finding.message if finding else hyp.evidence[-1].summary,
                        "family": fam.name, "fix_kinds": sorted({f.kind for f in fixes}),
                        "fix_applied": bool(applied), "fix": (applied or fixes)[0].summary if (applied or fixes) else None,
                        "missing": next((f.missing for f in fixes if f.kind == "none"), None)})
        return out

    def root_cause(self) -> dict[str, Any] | None:
        """The first cause to act (:meth:`root_causes`), with the mechanism flag for the width probe."""
        causes = self.root_causes()
        if not causes:
            return None
        first = dict(causes[0])
        first["mechanism_confirmed_by_probe"] = bool(
            self.probe_result.get("observed_hidden_size") is not None
            and self.probe_result.get("observed_hidden_size") != self.probe_result.get("expected_hidden_size")) \
            or first.get("hypothesis") in self.probe_confirmed
        return first

    def still_open(self) -> list[dict[str, Any]]:
        """The hypotheses not decided, each with what would decide it; and, when a fix was applied
        but is not sufficient, the causes it did not cure."""
        out = []
        never_served = self.before is None and self.after is None and bool(self.start_failures)
        if never_served and not self.root_causes():
            failure = self.start_failures[0]
            out.append({"hypothesis": "server start", "why": failure.exception or failure.error,
                        "decide": "the log tail above: fix what it names (a flag value, an interpreter, a file), "
                                  "then run again", "parameter": None})
        for spec, _ in REGISTRY.hypotheses():
            hyp = self.ledger.get(spec.id)
            if never_served and not spec.static:
                continue  # a runtime-only cause needs a server that serves: not reached
            if hyp.verdict == "inconclusive":
                fix = next((f for f in self.fixes if f.kind == "none" and any(self._hypothesis_of(r) == spec.id
                                                                               for r in f.rules)), None)
                out.append({"hypothesis": spec.id, "why": hyp.evidence[-1].summary if hyp.evidence else "",
                            "decide": spec.decide or (fix.missing if fix else "the probes of " + spec.id),
                            "parameter": fix.parameter if fix else None})
        if self.blocked and self.fix_refused is not None:
            blocking = "; ".join(f"{f['rule']}: {f['message']}" for f in self.fix_refused.refused or [])
            seen = set()
            for fix in self.blocked:
                for rule in fix.rules:
                    hid = self._hypothesis_of(rule)
                    if hid and hid not in seen:
                        seen.add(hid)
                        out.append({"hypothesis": hid, "why": f"its fix ({fix.summary}) was not tried: the launch "
                                    f"with it was refused, still blocked by {blocking}",
                                    "decide": "fix what the blocking findings name, then run again (force_launch=True "
                                              "launches anyway)", "parameter": "force_launch"})
        if self.fix_result.get("applied") and not self.fix_result.get("sufficient"):
            for hid in self._fixed_hypotheses():
                out.append({"hypothesis": hid, "why": "its fix was applied and measured: " + self.fix_result["why"],
                            "decide": "the other hypotheses above; the probe lines of the fixed server", "parameter": None})
        return out

    def outcome(self) -> str:
        """``healthy`` (nothing confirmed, acceptance not low), ``fixed`` (every confirmed cause with
        an applied fix that brought acceptance back), ``partly-fixed`` (a fix applied, not
        sufficient), ``latent`` (a cause confirmed while acceptance is not low: a fault with no
        measured effect on acceptance here, its fix proposed and not applied), ``cause-found`` (a
        cause named, acceptance low or not measured, its fix not applied or not derivable),
        ``server-does-not-start`` (as found, with no cause named), ``unexplained`` (acceptance low,
        nothing confirmed), ``inconclusive`` (nothing confirmed, and the symptom was not measured
        or acceptance is not low while a hypothesis is still undecided: :meth:`outcome_detail`
        says which). ``healthy`` only when acceptance was measured, is not low and every
        hypothesis was decided. A run whose server stopped answering mid-run (:attr:`server_lost`)
        is ``inconclusive`` whatever else it found: its measurements were cut off."""
        if self.server_lost is not None:
            return "inconclusive"
        causes = self.root_causes()
        low = self.acceptance_low(self.before.accept_length if self.before is not None else None)
        if self._speculation_off():
            low = True  # no verify step at all: no speedup, whatever else holds
        if causes and low is False and not self.fix_result.get("applied"):
            return "latent"
        if self.fix_result.get("applied") and self.fix_result.get("after") is not None:
            if self.fix_result.get("sufficient") and all(c["fix_applied"] for c in causes):
                return "fixed"
            return "partly-fixed"
        if causes:
            return "cause-found"
        if self.start_failures and self.before is None:
            return "server-does-not-start"
        if low:
            return "unexplained"
        if low is None or self._undecided():
            return "inconclusive"  # never "healthy" on a symptom not measured or a hypothesis not decided
        return "healthy"

    def _undecided(self) -> list[str]:
        """The ids of the hypotheses the ledger has not decided yet (verdict ``inconclusive``, the
        ledger's start value), in the order they act."""
        return [spec.id for spec, _ in REGISTRY.hypotheses() if self.ledger.get(spec.id).verdict == "inconclusive"]

    def outcome_detail(self) -> str | None:
        """Why :meth:`outcome` is ``inconclusive``, in words (``None`` for every other outcome):
        ``"symptom not measured"`` when no accept length as found was measured (Measure symptom
        did not run), else ``"N hypotheses still open"`` (``"1 hypothesis still open"``) naming
        them — a run whose symptom or hypotheses were never decided is never called healthy
        (issue 15, trial finding 2). When the server under measurement stopped answering:
        ``"server stopped answering: the fix server (pid P, port N) exited during apply_fixes
        (measuring: fix): <the failed request>; its log ends: <last line>"``, then what the
        restore did with the box (:data:`SERVER_STOPPED_ANSWERING`)."""
        if self.outcome() != "inconclusive":
            return None
        if self.server_lost is not None:
            lost = self.server_lost
            last = next((line.strip() for line in reversed(lost.log_tail) if line.strip()), None)
            detail = lost.describe() + (f"; its log ends: {last[:300]}" if last else "; its log is empty or unread")
            if lost.server == "the server as found":
                detail += "; the run did not start that server and left it as it is"
            report = self.restore_report
            if report is not None:
                relaunched = any(a.startswith("relaunched") or "already runs" in a for a in report.actions)
                detail += ("; the box was restored" + (" (the original server relaunched)" if relaunched else "")
                           if report.clean else "; the restore left problems: " + "; ".join(report.problems))
            return detail
        if self.acceptance_low(self.before.accept_length if self.before is not None else None) is None:
            return "symptom not measured"
        open_ids = self._undecided()
        return (f"{len(open_ids)} {'hypothesis' if len(open_ids) == 1 else 'hypotheses'} still open: "
                + ", ".join(open_ids))

    def proposed_launch(self) -> LaunchCommand | None:
        """The launch command with every fix applied: the relaunch's command when the fixes were
        applied, else the command the launch-command fixes derive (a draft repair needs its copy
        made: without it the command keeps the draft as found). ``None`` when no fix changes it."""
        if self.fix_launch is not None:
            return self.fix_launch
        if self.doctor_report is None:
            return None
        fixes = self.fixes or self.derive_fixes()
        launch_fixes = [f for f in fixes if f.kind == "launch"]
        return self._fixed_launch(launch_fixes, None) if launch_fixes else None

    def launch_diff(self) -> list[tuple[str, Any, Any]]:
        """The fix as a launch-command diff: (flag, before, after)."""
        proposed = self.proposed_launch()
        return self.inventory.launch.diff(proposed) if proposed is not None else []

    def figures(self) -> dict[str, Any]:
        """The summary's plotly figures, only those the run has data for; a figure whose input is
        incomplete is left out and :attr:`notes` says so (never an exception)."""
        out: dict[str, Any] = {}

        def add(name: str, make) -> None:
            try:
                out[name] = make()
            except FigureInputError as exc:
                self.notes.append(f"figure {name} left out: {exc}")

        if self.before is not None and self.after is not None and self.before.accept_length is not None \
                and self.after.accept_length is not None:
            add("accept_length", lambda: figures.accept_length_before_after(
                self.before.accept_length, self.after.accept_length, labels=(self.before.label, self.after.label),
                ideal=self.ceiling(self.fix_launch)))
            if self.before.generate.records and self.after.generate.records:
                add("per_request", lambda: figures.accept_length_per_request(
                    [r.spec_accept_length or 0.0 for r in self.before.generate.records],
                    [r.spec_accept_length or 0.0 for r in self.after.generate.records]))
        timeline = {m.label: m.log_records for m in (self.before, self.after) if m is not None and m.log_records}
        if timeline:
            add("timeline", lambda: figures.acceptance_timeline(timeline))
        pr = self.probe_result
        if pr.get("observed_hidden_size") and pr.get("expected_hidden_size") and pr.get("target_hidden_size"):
            add("probe", lambda: figures.hidden_width_probe(pr["observed_hidden_size"], pr["expected_hidden_size"],
                                                            pr["target_hidden_size"]))
        if len(self.ladder) >= 2 and all(r["accept_length"] is not None for r in self.ladder):
            add("ladder", lambda: figures.fix_ladder([r["label"] for r in self.ladder],
                                                     [r["accept_length"] for r in self.ladder],
                                                     ceiling=self.ceiling(self.fix_launch)))
        return out

    def build_verdict(self) -> dict[str, Any]:
        """The verdict document (schema: DESIGN.md, "Contracts"; plus ``outcome``,
        ``root_causes``, ``open``, ``fixes``, ``start_failures``, ``ladder``, ``healthy``)."""
        def acceptance(m: Measurement | None) -> dict:
            return m.to_dict() if m is not None else {"accept_length": None}

        rc = self.root_cause()
        before = self.before.accept_length if self.before is not None else None
        ceiling = self.ceiling()
        verdict = {
            "outcome": self.outcome(),
            "outcome_detail": self.outcome_detail(),
            "root_cause": rc or {"rule": None},
            "root_causes": self.root_causes(),
            "consequences": self.consequences(),
            "fixed_doctor": self.fixed_doctor or None,
            "open": self.still_open(),
            "hypotheses": [
                {**h, "family": self.families[h["id"]].name, "order": self.specs[h["id"]].order,
                 "rules": list(self.specs[h["id"]].rules), "static": self.specs[h["id"]].static,
                 "decide": self.specs[h["id"]].decide or None}
                for h in self.ledger.to_dict()["hypotheses"]],
            "acceptance": {"before": acceptance(self.before), "after": acceptance(self.after),
                           "ceiling": ceiling, "low_before": self.acceptance_low(before),
                           "expected": self.expected_accept_length},
            "probe": {
                "observed_hidden_size": self.probe_result.get("observed_hidden_size"),
                "expected_hidden_size": self.probe_result.get("expected_hidden_size"),
                **{k: v for k, v in self.probe_result.items() if k not in ("observed_hidden_size", "expected_hidden_size")},
            },
            "fix": {
                "launch_command": self.proposed_launch().to_display() if self.proposed_launch() is not None else None,
                "diff": [{"flag": f, "before": a, "after": b} for f, a, b in self.launch_diff()],
                "applied": bool(self.fix_result.get("applied")),
                "sufficient": self.fix_result.get("sufficient"),
                "why": self.fix_result.get("why"),
                "kinds": sorted({f.kind for f in self.applied}),
                "kept": self.kept_server is not None,
                "kept_server": self.kept_server,
                "draft_copies": self.draft_copies,
            },
            "fixes": [{**f.to_dict(), "applied": f in self.applied or (f.kind == "candidates" and any(
                set(a.rules) == set(f.rules) for a in self.applied))} for f in self.fixes],
            "candidate_trials": self.candidate_trials,
            "ladder": self.ladder,
            "start_failures": [f.to_dict() for f in self.start_failures],
            "server_stopped_answering": self.server_lost.to_dict() if self.server_lost is not None else None,
            "healthy": ({"accept_length": before, "ceiling": ceiling,
                         "note": "no cause found and acceptance is not low; the measure_acceptance runbook sweeps the "
                                 "speculative settings for more"} if self.outcome() == "healthy" else None),
            "findings": [f.to_dict() for f in self.findings],
            "preflight": self.doctor_report.to_dict() if self.doctor_report is not None else None,
            "runtime_findings": [f.to_dict() for f in acceptance_collapsed(
                self.before.generate, self.findings, source=f"{self.before.generate.source or '/generate'} over the prompt set: {self.before.label}")]
            if self.before is not None else [],
            "inventory": self.inventory.to_dict(),
            "code_path": self._code_path.to_dict() if self._code_path is not None else None,
            "launches": self.launches,
            "launch_guard": self.guard.summary(),
            "restarts": self.restarts,
            "restore": self.restore_report.to_dict() if self.restore_report else None,
            "notes": self.notes,
            "duration_s": round(time.monotonic() - self.started_at, 2),
        }
        return verdict

    def summary_html(self) -> str:
        """The case's story as HTML: the outcome, every root cause in the order it acts, the fixes
        and what they did (measured), what is still open and how to decide it."""
        out = self.outcome()
        head = {"healthy": "Healthy: no cause found", "fixed": "Fixed", "partly-fixed": "Fix applied, not sufficient",
                "cause-found": "Cause found",
                "latent": "A fault with no measured effect on acceptance", "server-does-not-start": "The server does not start",
                "unexplained": "Acceptance is low and no cause is confirmed",
                "inconclusive": f"Inconclusive: {self.outcome_detail()}"}[out]
        parts = [f"<h3>Summary: {html.escape(head)}</h3>"]
        if self.server_lost is not None:
            lost = self.server_lost
            tail = "\n".join(lost.log_tail[-10:])
            parts.append(f"<p><b>The run ended early</b>: {html.escape(lost.describe())}. Nothing after that step was "
                         "measured; the box is put back at Finish.</p>"
                         + (f"<p>the end of its log ({html.escape(str(lost.log_path))}):</p><pre>{html.escape(tail)}</pre>"
                            if tail else ""))
        before = self.before.accept_length if self.before is not None else None
        after = self.after.accept_length if self.after is not None else None
        ceiling = self.ceiling()
        if before is not None:
            parts.append(f"<p>accept length as found: <b>{_fmt(before)}</b>" +
                         (f" of at most {ceiling:g} per verify step" if ceiling else "") +
                         (f"; with the fix: <b>{_fmt(after)}</b>" if after is not None else "") + "</p>")
            rate_before = self.before.generate.accept_rate
            rate_after = self.after.generate.accept_rate if self.after is not None else None
            if rate_before is not None:  # correct / proposed draft tokens (vLLM's "draft acceptance rate")
                parts.append(f"<p>draft tokens accepted as found: <b>{100 * rate_before:.1f} %</b>" +
                             (f"; with the fix: <b>{100 * rate_after:.1f} %</b>" if rate_after is not None else "") +
                             f" <small>({html.escape(str(self.before.generate.source or ''))})</small></p>")
        for failure in self.start_failures:
            if failure.refused is not None:
                why = "; ".join(f"{f['rule']}: {f['message']}" for f in failure.refused)
                parts.append(f"<p>{html.escape(failure.label)}: <b>launch refused</b> — the doctor's findings on that "
                             f"command say the server would not start, so no launch was spent on it "
                             f"({len(failure.refused)} finding(s); {self.restarts} restart(s) in this run): "
                             f"<code>{html.escape(why)}</code>. <code>force_launch=True</code> launches anyway.</p>")
                continue
            parts.append(f"<p>{html.escape(failure.label)}: the server did not start — "
                         f"<code>{html.escape(failure.exception or failure.error)}</code></p>")
        for check in self.guard.checks:
            if check.decision == "overridden":
                parts.append(f"<p>{html.escape(check.label)}: <b>launch guard overridden</b> (force_launch): launched "
                             "although the doctor's findings say the server would not start — "
                             f"<code>{html.escape('; '.join(f['rule'] + ': ' + f['message'] for f in check.findings))}"
                             "</code></p>")
            elif check.decision == "contradicted":
                parts.append(f"<p><small>{html.escape(check.label)}: the doctor's findings say this command would not "
                             "start, yet the server as found runs it: launched; the findings "
                             f"({html.escape(', '.join(f['rule'] for f in check.findings))}) are contradicted by the "
                             "box.</small></p>")
        if self.fix_refused is not None:
            parts.append(f"<p><b>The fix was not tried</b>: {html.escape(str(self.fix_result.get('why')))}</p>")
        causes = self.root_causes()
        if causes:
            items = "".join(
                f"<li><b>{html.escape(c['hypothesis'])}</b> (<code>{html.escape(str(c['rule']))}</code>): "
                f"{html.escape(c['message'])}" +
                (f"<br>fix ({', '.join(c['fix_kinds'])}): {html.escape(c['fix'])}" +
                 (" — applied" if c["fix_applied"] else " — not applied") if c["fix"] else "") +
                (f"<br>missing: {html.escape(c['missing'])}" if c.get("missing") else "") + "</li>"
                for c in causes)
            parts.append(f"<p><b>Root causes</b>, in the order they act:</p><ol>{items}</ol>")
        cons = self.consequences()
        if cons:
            items = "".join(f"<li><b>{html.escape(c['hypothesis'])}</b> (<code>{html.escape(c['rule'])}</code>): "
                            f"{html.escape(c['message'])}<br>cleared by the fix of "
                            f"{html.escape(', '.join(c['cleared_by']))}</li>" for c in cons)
            parts.append("<p><b>Consequences</b> of the root causes (the doctor on the fixed command no longer "
                         f"reports them):</p><ul>{items}</ul>")
        if self.fix_result.get("applied"):
            ok = self.fix_result.get("sufficient")
            parts.append(f"<p><b>The fix {'brought acceptance back' if ok else 'is not enough'}</b>: "
                         f"{html.escape(str(self.fix_result.get('why')))}</p>")
        diff = self.launch_diff()
        if diff:
            rows = "".join(f"<tr><td style='text-align:left'><code>{html.escape(f)}</code></td>"
                           f"<td style='color:#b00020;text-align:left'><code>- {html.escape(str(a))}</code></td>"
                           f"<td style='color:#1b7a1b;text-align:left'><code>+ {html.escape(str(b))}</code></td></tr>"
                           for f, a, b in diff)
            parts.append(f"<p><b>Launch-command diff</b>:</p>" + scroll_box(f"<table>{rows}</table>"))
            parts.append(f"<p>fixed command{'' if self.fix_launch is not None else ' (proposed, not applied)'}: "
                         f"<code>{html.escape(self.proposed_launch().to_display())}</code></p>")
            pending = [f for f in self.fixes if f.kind == "draft-copy" and f not in self.applied]
            if self.fix_launch is None and pending:
                items = "".join(f"<li>{html.escape(f.summary)}</li>" for f in pending)
                parts.append("<p>That command still points at the draft as found: it needs the draft repairs too "
                             "(a run with <code>allow_restart</code> and <code>apply_fix</code> makes them as a "
                             f"copy, measured; or make them in a copy of your own):</p><ul>{items}</ul>")
        for copy in self.draft_copies:
            actions = "".join(f"<li>{html.escape(a)}</li>" for a in copy.get("actions", []))
            kept = self._copy_kept(copy)
            parts.append(f"<p><b>Repaired copy of the draft</b> ({html.escape(copy.get('label', ''))}): "
                         f"<code>{html.escape(str(copy.get('path')))}</code>"
                         f"{' (kept: the fixed server uses it)' if kept else ' (removed at the end)'}</p>"
                         f"<ul>{actions}</ul>")
            if kept:
                parts.append("<p><small>The copy holds the changed files; the files no repair touched are "
                             f"symlinks into <code>{html.escape(str(copy.get('source') or self._draft_dir()))}</code>"
                             ": keep that directory, or copy the draft with <code>cp -rL</code> before removing it. "
                             "Nothing journals the copy any more: remove it yourself when done.</small></p>")
        if self._keeps_fix() or self.kept_server:
            server = self.kept_server or {"pid": self.current.pid, "pgid": self.current.pgid, "port": self.inventory.port}
            parts.append(f"<p><b>The fixed server is left running</b> (<code>keep_fix</code>): pid {server['pid']}, "
                         f"port {server['port']}, in place of the original. <code>workbench restore</code> will not "
                         f"stop it (nothing journals it); stop it on the box with <code>kill -TERM -- -{server['pgid']}"
                         "</code> (its process group).</p>")
        if self.candidate_trials:
            rows = "".join(f"<tr><td style='text-align:left'>{html.escape(t['label'])}</td><td>{_fmt(t['accept_length'])}</td></tr>"
                           for t in self.candidate_trials)
            parts.append(f"<p><b>Candidates measured</b>:</p>" + scroll_box(f"<table>{rows}</table>"))
        still = self.still_open()
        if still:
            items = "".join(f"<li><b>{html.escape(o['hypothesis'])}</b>: {html.escape(o['why'])}<br>to decide: "
                            f"{html.escape(str(o['decide']))}</li>" for o in still)
            parts.append(f"<p><b>Still open</b>:</p><ul>{items}</ul>")
        else:
            parts.append("<p><b>Still open</b>: nothing — every hypothesis was decided.</p>")
        if out == "latent":
            parts.append("<p>Acceptance as found is not low, so no fix was applied: each cause above is a real fault "
                         "(its evidence is in the table) that this engine does not feel on this draft. Apply its "
                         "fix anyway before another engine or release reads the same field.</p>")
        if out == "inconclusive":
            parts.append("<p>Nothing was decided either way: " + (
                "the accept length as found was never measured (run <b>Measure symptom</b>), so there is no "
                "symptom to judge." if self.outcome_detail() == "symptom not measured" else
                "acceptance as found is not low, but the hypotheses above are still open (run <b>Hypotheses "
                "(static)</b> to decide them).") + "</p>")
        if out == "healthy":
            parts.append("<p>No false alarm: every hypothesis was checked. To go further, sweep the speculative "
                         "settings with the <code>measure_acceptance</code> runbook.</p>")
        for note in self.notes:
            parts.append(f"<p><small>note: {html.escape(note)}</small></p>")
        return REDACTOR.text("".join(parts))


def pooled_measurement(a, b):
    """Two acceptance measurements of the same server pooled into one
    (``workbench.measure.generate.AcceptanceMeasurement``): through ``/generate`` every number
    recomputed over both requests' records (``summarize_responses``: Σ tokens / Σ verify steps);
    from another source (vLLM's counters) accept length and accept rate weighted by each one's verify
    steps (the same server drafts the same tokens per step). Either
    without an accept length: ``a`` unchanged."""
    from workbench.measure.generate import summarize_responses

    if a.accept_length is None or b.accept_length is None or not a.verify_steps or not b.verify_steps:
        return a
    if a.source == "/generate" and b.source == "/generate" and a.records and b.records:
        return summarize_responses(list(a.records) + list(b.records), warmup=a.warmup, max_new_tokens=a.max_new_tokens,
                                   base_url=a.base_url, server_info=b.server_info)
    steps = a.verify_steps + b.verify_steps
    wall = a.wall_s + b.wall_s
    # accepted / drafted: the same server drafts the same number of tokens per verify step, so the
    # rates pool weighted by verify steps too
    rate = (None if a.accept_rate is None or b.accept_rate is None
            else (a.accept_rate * a.verify_steps + b.accept_rate * b.verify_steps) / steps)
    return dataclasses.replace(
        a, accept_length=(a.accept_length * a.verify_steps + b.accept_length * b.verify_steps) / steps,
        accept_rate=rate, verify_steps=steps, total_tokens=a.total_tokens + b.total_tokens, wall_s=wall,
        tokens_per_s=(a.total_tokens + b.total_tokens) / wall if wall > 0 else None,
        records=list(a.records) + list(b.records), histogram=None,
        note=(a.note + "; " if a.note else "") + "two measurements pooled: accept length weighted by verify steps")


def d2t_words(raw: dict) -> str:
    """The ``draft-d2t`` probe's readings (``{expression: printed text}``, the expressions of
    :data:`workbench.engine.recipes.RECIPES` ``["draft-d2t"]`` — or, on vLLM, of
    :data:`workbench.engine.recipes.VLLM_RECIPES` ``["draft-d2t"]`` (its ``draft_id_to_target_id``) —
    in their order: is-None, shape, first 8 ids, last 4 ids) in plain words: ``"hot token map (d2t) loaded: no (draft token ids
    are used as target ids as they are)"``, or ``"hot token map (d2t) loaded: yes, shape (128,),
    ids [..] … [..]"``. A reading that is not there is said so, never guessed."""
    exprs = next((r["draft-d2t"].probes[0].exprs for r in (RECIPES, VLLM_RECIPES)
                  if r["draft-d2t"].probes[0].exprs[0] in raw), RECIPES["draft-d2t"].probes[0].exprs)
    is_none, shape, head, tail = (_literal(raw.get(e)) for e in exprs[:4])
    if is_none is True or is_none == "True":
        return "hot token map (d2t) loaded: no (draft token ids are used as target ids as they are)"
    if is_none is False or is_none == "False":
        return (f"hot token map (d2t) loaded: yes, shape {shape}, target ids {head} … {tail}")
    return f"hot token map (d2t): not read (the probe printed {raw!r})"


def unmatched_words(unmatched: list) -> str:
    """The ``draft-weights-unmatched`` reading in plain words: the checkpoint tensor names the
    engine's ``load_weights`` matched to no parameter of the draft (those tensors were dropped:
    their parameters keep their initial values). First 5 named."""
    if not unmatched:
        return "load_weights used every checkpoint tensor (no name was dropped)"
    more = " …" if len(unmatched) > 5 else ""
    return (f"load_weights dropped {len(unmatched)} checkpoint tensor(s) whose names match no draft parameter: "
            f"{list(unmatched[:5])}{more}")


def pr_subset(pr: dict) -> dict:
    return {k: pr.get(k) for k in ("observed_widths", "observed_hidden_size", "expected_hidden_size",
                                   "target_hidden_size")}


def _literal(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _last_exception(lines: list[str]) -> str | None:
    """The last line of a log that says why the process ended: an exception (``SomeError: ...``,
    ``module.SomeError: ...``), else an argparse refusal (``prog: error: argument --x: ...``, what
    SGLang's ``launch_server`` prints for a bad flag value), else a shell's ``No such file or
    directory`` / ``command not found`` / ``...: not found`` (``exec: NAME: not found``, dash's
    ``sh: 1: NAME: not found``) / ``Permission denied`` for a program that is not there.
    ``None`` when no line says."""
    for line in reversed(lines):
        text = line.strip()
        head = text.split(":", 1)[0].rsplit(".", 1)[-1]
        if ":" in text and " " not in head and (head.endswith(("Error", "Exception", "Exit", "Interrupt"))):
            return text
    for line in reversed(lines):
        text = line.strip()
        if ": error: " in text or text.startswith("error: "):
            return text
    for line in reversed(lines):
        text = line.strip()
        if text.endswith(("No such file or directory", "command not found", ": not found", "Permission denied")):
            return text
    return None


def _parse_ids(value: Any) -> list[int] | None:
    """The ``aux_layer_ids`` parameter: ``None``, a list of ints, or their text (``"1,3,6"``,
    ``"[1, 3, 6]"``), read as the runbook's schema reads it
    (:func:`workbench.runbook_params.parse_layer_ids`). Raises :class:`DiagnosisError` naming the
    value otherwise."""
    try:
        return parse_layer_ids(value)
    except ValueError:
        raise DiagnosisError(f"aux_layer_ids must be non-negative layer ids such as [1, 3, 6], got {value!r}") from None


def _draft_of(launch: LaunchCommand | None) -> str | None:
    """The draft directory ``launch`` serves: SGLang's ``--speculative-draft-model-path``, vLLM's
    ``--speculative-config`` ``"model"`` (:attr:`LaunchCommand.draft_model`); ``None`` when there is
    none or vLLM's config cannot be read (the doctor's ``speculative-config-unreadable`` says so)."""
    if launch is None:
        return None
    try:
        value = launch.draft_model
    except WorkbenchInputError:
        return None
    return value if isinstance(value, str) else None


def _method_label(launch: LaunchCommand) -> str:
    """The speculative method as the launch writes it, for a measurement's label: SGLang's
    ``--speculative-algorithm`` (``"None"`` when absent, as before), vLLM's ``--speculative-config``
    method (``"vllm <method>"``)."""
    if launch.engine != "vllm":
        return str(launch.get("--speculative-algorithm"))
    try:
        return f"vllm {launch.speculative_method}"
    except WorkbenchInputError:
        return "vllm (speculative config unreadable)"

