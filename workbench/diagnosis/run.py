"""The ``diagnose_acceptance`` runbook's steps: symptom → hypotheses → probe → fix → verify → report.

Each step is one method of :class:`DiagnosisRun`; the runbook's cells call them and show what they
return. Everything goes through a :class:`remote.Box` (commands, files, servers, probes) and HTTP to
the server; nothing here imports the sandbox box, which is diagnosed like any SGLang box.

The box is left as found: every change is journalled on the box first (:mod:`workbench.session.journal`),
and :meth:`DiagnosisRun.finish` (also registered with ``atexit`` in the kernel, and called by the
``workbench runbook`` driver when papermill is interrupted) stops the servers the run started,
reverts its probes and relaunches the server it found. Restarts are kept to the minimum the
evidence needs: the static checks (H1, H3) run first and cost none; the probe (H2) costs one launch,
the fix one more (the probe stays in place, so the fixed server shows its input width too), and
putting the original server back one more.
"""

from __future__ import annotations

import html
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from remote import probes as remote_probes
from workbench.diagnosis.ledger import Evidence, Ledger
from workbench.engine.codepath import CodePathMap, code_path_map
from workbench.engine.launch import LaunchCommand
from workbench.engine.recipes import recipe_probe
from workbench.engine.source import EngineSource
from workbench.errors import DiagnosisError, SourceLookupError
from workbench.doctor import run_doctor
from workbench.logs import parse_log
from workbench.measure.generate import measure_generate
from workbench.measure.prompts import load_prompts
from workbench.report import figures
from workbench.report.tables import html_table
from workbench.report.verdict import write_verdict_json
from workbench.rules.finding import Finding
from workbench.rules.runtime import acceptance_collapsed
from workbench.sandbox_box import sandbox_prompts_path
from workbench.session import BoxSession, Inventory, Journal, open_box

__all__ = ["DiagnosisError", "DiagnosisRun", "Measurement", "StepResult", "DRAFT_MODEL_FILE", "PROBE_RECIPE",
           "PROBE_TAG"]

#: The draft model file, relative to the engine package root: SGLang 0.5.23
#: ``srt/models/llama_eagle3.py`` (the sandbox mirrors the path).
DRAFT_MODEL_FILE = "srt/models/llama_eagle3.py"
#: H2's probe: the ``draft-input-width`` recipe (:data:`workbench.codepath.RECIPES`), anchored on the
#: draft's fc width check as the code-path map finds it in the box's version (SGLang 0.5.23
#: ``srt/models/llama_eagle3.py`` ``LlamaModel.forward``: ``if hidden_states.shape[-1] != embeds.shape[-1]:``).
PROBE_RECIPE = "draft-input-width"
PROBE_TAG = "draft-input-width"

H1 = "H1"
H2 = "H2"
H3 = "H3"


# ----------------------------------------------------------------------------------------------
# Inventory


# ----------------------------------------------------------------------------------------------
# Step results


@dataclass
class Measurement:
    """Acceptance measured on one server (``label``): the ``/generate`` measurement and the decode
    log records written while it ran."""

    label: str
    launch_command: str
    generate: Any  # workbench.acceptance.AcceptanceMeasurement
    log_records: list[dict]
    log_path: str | None

    @property
    def accept_length(self) -> float | None:
        return self.generate.accept_length

    def to_dict(self) -> dict[str, Any]:
        out = self.generate.to_dict()
        out.update({"label": self.label, "launch_command": self.launch_command, "log_path": self.log_path,
                    "log_decode_records": len(self.log_records)})
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


def _fmt(x: Any) -> str:
    return "—" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


@dataclass
class StepResult:
    """A hypothesis step's outcome: its verdict, the findings or probe values behind it, and text."""

    hypothesis: str
    verdict: str
    summary: str
    findings: list[Finding] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        colour = {"confirmed": "#1a7f37", "refuted": "#cf222e"}.get(self.verdict, "#9a6700")  # as the ledger
        parts = [f"<h4>{self.hypothesis}: <span style='color:{colour}'>{self.verdict}</span></h4>",
                 f"<p>{html.escape(self.summary)}</p>"]
        for f in self.findings:
            parts.append(f"<p><b>{html.escape(f.rule)}</b> ({f.severity}): {html.escape(f.message)}</p>")
            parts.append(html_table([(k, v) for k, v in f.evidence.items()]))
            if f.fix:
                parts.append(f"<p>fix: <code>{html.escape(f.fix)}</code></p>")
        if self.data:
            parts.append(html_table(list(self.data.items())))
        return "".join(parts)


# ----------------------------------------------------------------------------------------------
# The run


class DiagnosisRun(BoxSession):
    """One diagnosis of one box. Create with :meth:`start`; call the steps in order; end with
    :meth:`finish` (idempotent; also run at interpreter exit).

    Parameters mirror the runbook's: ``allow_restart`` (False: only static checks, H2 stays
    inconclusive and no fix is applied), ``apply_fix``, ``keep_fix`` (leave the fixed server
    running instead of putting the original back).
    """

    def __init__(self, box, inventory: Inventory, journal: Journal, *, allow_restart: bool, apply_fix: bool,
                 keep_fix: bool, prompts: list[dict], max_new_tokens: int, server_start_timeout: float,
                 report_dir: str | Path):
        super().__init__(box, inventory, journal, server_start_timeout=server_start_timeout,
                         allow_restart=allow_restart)
        self.apply_fix_enabled = apply_fix
        self.keep_fix = keep_fix
        self.prompts = prompts
        self.max_new_tokens = max_new_tokens
        self.report_dir = Path(report_dir)
        self.started_at = time.monotonic()
        self.ledger = Ledger()
        self.ledger.add(H1, "The --speculative-algorithm flag does not match the draft's architecture "
                            "(an EAGLE-3 draft launched as EAGLE, or the reverse).")
        self.ledger.add(H2, "The target does not capture its auxiliary hidden states: the draft's fc receives a "
                            "1×-wide hidden state instead of num_aux × target hidden, and is skipped.")
        self.ledger.add(H3, "The draft's weights or token map are wrong: tensors the engine drops or misses, "
                            "wrong shapes, or an invalid d2t.")
        self.probe = None
        self.before: Measurement | None = None
        self.after: Measurement | None = None
        self.findings: list[Finding] = []
        self.probe_result: dict[str, Any] = {}
        self.fix_launch: LaunchCommand | None = None
        self.verdict: dict | None = None
        self.draft_facts = None
        self.target_facts = None
        self._code_path: CodePathMap | None = None
        self.doctor_report = None
        self.progress: bool | str = "text" if os.environ.get("EAGLE_WORKBENCH_DRIVER") else True

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def start(cls, *, host: str = "local", launch_command: str | None = None, port: int | None = None,
              allow_restart: bool = True, apply_fix: bool = True, keep_fix: bool = False,
              prompts: str | None = None, num_prompts: int | None = None, max_new_tokens: int = 96,
              server_start_timeout: float = 300.0, report_dir: str | Path = "reports") -> "DiagnosisRun":
        """Connect to ``host``, restore anything an interrupted earlier run left, take the
        inventory and open the journal. ``launch_command=None`` means the embedded sandbox box
        launched with the wrong flag (when no server is running on ``port``)."""
        box, inventory, journal = open_box(host, launch_command=launch_command, port=port,
                                           server_start_timeout=server_start_timeout)
        if prompts is None and inventory.engine == "sandbox":
            # The sandbox target is a byte-level model of Python source: the built-in chat prompts
            # mean nothing to it, its own held-out code prompts are its workload.
            prompts = str(sandbox_prompts_path())
        prompt_set = load_prompts(prompts)
        if num_prompts:
            prompt_set = prompt_set[:num_prompts]
        return cls(box, inventory, journal, allow_restart=allow_restart, apply_fix=apply_fix, keep_fix=keep_fix,
                   prompts=prompt_set, max_new_tokens=max_new_tokens, server_start_timeout=server_start_timeout,
                   report_dir=report_dir)

    # -- steps ----------------------------------------------------------------------------------

    def measure(self, label: str) -> Measurement:
        """Accept length over the prompt set through ``/generate`` (SGLang's definition:
        Σ completion_tokens / Σ spec_verify_ct), with the decode log lines written meanwhile."""
        base_url, log_path, launch = self._serving()
        offset = self.box.file_size(log_path) if log_path and self.box.exists(log_path) else 0
        result = measure_generate(base_url, self.prompts, max_new_tokens=self.max_new_tokens, warmup=1,
                                      progress=self.progress)
        records: list[dict] = []
        if log_path:
            chunk, _ = self.box.follow(log_path, offset)
            parsed = parse_log(chunk.decode("utf-8", "replace").splitlines())
            records = [r.to_dict() for r in parsed.decode]
        return Measurement(label=label, launch_command=launch.to_string(), generate=result,
                           log_records=records, log_path=log_path)

    def measure_symptom(self) -> Measurement:
        """The symptom: acceptance of the server as found."""
        self.before = self.measure("as found: " + str(self.inventory.launch.get("--speculative-algorithm")))
        return self.before

    def preflight(self):
        """Every static rule of the catalogue (:func:`workbench.doctor.run_doctor`) on the launch
        command as found, read from the box (paths resolved against the server's cwd, the engine
        source the inventory located). Run once; H1 and H3 decide from its findings, so a static
        root cause is named before any restart."""
        if self.doctor_report is None:
            resolved = self.inventory.resolved or self.inventory.launch
            self.doctor_report = run_doctor(self.box, resolved, engine_root=self.inventory.engine_root,
                                            engine_version=self.inventory.engine_version,
                                            cwd=self.inventory.server_cwd)
            self.draft_facts = self.doctor_report.draft_facts
            self.target_facts = self.doctor_report.target_facts
        return self.doctor_report

    def check_algorithm(self) -> StepResult:
        """H1 (static, no restart): the doctor's ``algorithm-mismatch`` finding (launch command, the
        draft's config.json and safetensors header, read from the box)."""
        launch = self.inventory.launch
        if not (self.inventory.resolved or launch).get("--speculative-draft-model-path"):
            return self._decide(H1, "inconclusive", "the launch command names no --speculative-draft-model-path")
        report = self.preflight()
        if self.draft_facts is None:
            why = "; ".join(f.message for f in report.findings if f.rule in ("checkpoint-unreadable", "model-not-on-box"))
            return self._decide(H1, "inconclusive", f"the draft could not be read: {why}")
        findings = [f for f in report.findings if f.rule == "algorithm-mismatch"]
        self.findings.extend(findings)
        if findings:
            # The fix on the command as written (the doctor saw paths resolved against the cwd).
            algo = LaunchCommand.parse(findings[0].fix).get("--speculative-algorithm")
            self.fix_launch = launch.with_flag("--speculative-algorithm", algo)
            return self._decide(H1, "confirmed", findings[0].message, findings=findings)
        return self._decide(H1, "refuted", f"--speculative-algorithm {launch.get('--speculative-algorithm')} matches "
                                           f"the draft ({self.draft_facts.architectures})",
                            data={"draft_architectures": self.draft_facts.architectures,
                                  "fc_in_features": self.draft_facts.fc_in_features})

    def check_draft(self) -> StepResult:
        """H3 (static, no restart): the doctor's other error findings: the draft's tensor names and
        shapes against what the engine's ``load_weights`` keeps, the d2t/t2d token map, the aux
        layers, the config against the target's, the checkpoint's readability. Warnings and
        information are recorded as data."""
        report = self.preflight()
        if self.draft_facts is None:
            return self._decide(H3, "inconclusive", "the draft could not be read: " + "; ".join(
                f.message for f in report.findings if f.rule in ("checkpoint-unreadable", "model-not-on-box")))
        findings = [f for f in report.errors if f.rule != "algorithm-mismatch"]
        self.findings.extend(findings)
        checked = {"rules_run_by": "workbench.doctor.run_doctor", "engine_version": report.engine_version,
                   "bytes_read": report.bytes_read,
                   "warnings_and_info": [f"{f.severity} {f.rule}: {f.message}" for f in report.findings
                                         if f.severity != "error"]}
        if findings:
            return self._decide(H3, "confirmed", "; ".join(f.message for f in findings), findings=findings,
                                data=checked)
        return self._decide(H3, "refuted", "every draft tensor maps to a parameter of the draft class, none is "
                                           "missing, shapes agree, d2t is a valid offset table, and no other static "
                                           "rule reports an error", data=checked)

    def probe_input_width(self) -> StepResult:
        """H2 (one restart): a print of the draft's input hidden-state width just before the fc
        check (once per distinct width: a GPU server's CUDA-graph capture runs the draft at start-up
        on a 1×-wide buffer), the server relaunched with its own command, one request, the widths
        read from the log; confirmed when no forward saw the fc's in_features. The probe stays in place for the fix step when ``apply_fix`` (the fixed server then
        shows its width too) and is reverted at once otherwise."""
        if not self.allow_restart:
            return self._decide(H2, "inconclusive", "allow_restart is False: the probe needs a restart")
        if not self.inventory.engine_root:
            return self._decide(H2, "inconclusive", "the engine's source was not located on the box; no probe")
        cmap = self.code_path()
        try:
            spec = recipe_probe(cmap, PROBE_RECIPE, tag=PROBE_TAG)
        except SourceLookupError as exc:
            return self._decide(H2, "inconclusive", f"no probe: {exc}")
        path = spec.path
        self.probe = remote_probes.add_probe(self.box, path, before=spec.line, function=spec.function,
                                             exprs=spec.exprs, tag=spec.tag, once_per=spec.once_per,
                                             python=self.inventory.python)
        handle = self._launch(self.inventory.launch, "probe")
        shapes = self._probe_shapes(handle)
        expected = self._expected_width()
        target_hidden = self._target_hidden()
        observed = self._decisive_width(shapes, expected)
        observed_shape = next((s for s in shapes if s and s[-1] == observed), None)
        self.probe_result = {
            "file": path, "line": self.probe.line,
            "anchor": f"{spec.entry} (code-path map: {path}:{spec.line})", "tag": PROBE_TAG,
            "recipe": PROBE_RECIPE, "observed_shape": observed_shape,
            "observed_widths": sorted({s[-1] for s in shapes if s}),
            "observed_hidden_size": observed, "expected_hidden_size": expected, "target_hidden_size": target_hidden,
            "launch_command": self.inventory.launch.to_string(),
        }
        if not self.apply_fix_enabled:
            self._revert_probe()
        if observed is None:
            return self._decide(H2, "inconclusive", f"the probe printed nothing in {handle.log_path}: the draft's "
                                                    "forward never reached the fc check", data=self.probe_result)
        if expected is not None and observed != expected:
            seen = self.probe_result["observed_widths"]
            why = (f"the draft received a {observed}-wide hidden state where its fc needs {expected} "
                   f"(= {expected // target_hidden if target_hidden else '?'} × target hidden {target_hidden}); "
                   f"no forward saw {expected} (widths seen: {seen}): the width check is false, so fc is "
                   "skipped silently")
            return self._decide(H2, "confirmed", why, data=self.probe_result)
        return self._decide(H2, "refuted", f"the draft received {observed}-wide input, what its fc expects",
                            data=self.probe_result)

    def apply_fix(self) -> Measurement | None:
        """Relaunch with the fix the static findings propose (H1), read the probe on the fixed
        server when it is in place, and measure acceptance again."""
        if not (self.apply_fix_enabled and self.allow_restart):
            return None
        if self.fix_launch is None:
            return None
        try:
            handle = self._launch(self.fix_launch, "fix")
            if self.probe is not None:
                shapes = self._probe_shapes(handle)
                width = self._decisive_width(shapes, self._expected_width())
                self.probe_result["after_fix_shape"] = next((s for s in shapes if s and s[-1] == width), None)
                self.probe_result["after_fix_hidden_size"] = width
                self.probe_result["after_fix_widths"] = sorted({s[-1] for s in shapes if s})
        finally:
            self._revert_probe()
        self.after = self.measure("fixed: " + str(self.fix_launch.get("--speculative-algorithm")))
        return self.after

    def finish(self) -> dict:
        """Put the box back as found (stop the run's servers, revert probes, relaunch the original
        server), then write ``report_dir/diagnose_acceptance.json``. Idempotent."""
        if not self.finished:
            self.finished = True
            if self.keep_fix and self.after is not None and self.current is not None:
                # Leave the fixed server in place of the original: forget both in the journal.
                self.journal.remove_started(self.current.pid)
                self.journal.mark_original_stopped(False)
                self.current = None
            self.restore()
            self.verdict = self.build_verdict()
            write_verdict_json(self.report_dir / "diagnose_acceptance.json", self.verdict)
        return self.verdict

    # -- helpers --------------------------------------------------------------------------------

    def _revert_probe(self) -> None:
        if self.probe is not None:
            remote_probes.revert_probe(self.box, self.probe)
            self.probe_result["reverted"] = True
            self.probe = None

    def _probe_shapes(self, handle, *, timeout: float = 60.0) -> list[tuple[int, ...]]:
        """Send one request, then read the probe's lines from the server log (grep on the box): the
        distinct input shapes the draft's forward saw, in the order first seen (the recipe prints
        once per distinct width). Empty when nothing was printed within 10 s."""
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            client.post(self.inventory.base_url + "/generate",
                        json={"text": self.prompts[0]["text"], "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
        deadline = time.monotonic() + 10
        while True:
            readings = [r for r in remote_probes.read_probe_log(self.box, handle.log_path, self.probe, timeout=30)
                        if "hidden_states.shape" in r.raw and not r.error]
            if readings or time.monotonic() > deadline:
                self.probe_result.setdefault("printed", []).extend(r.raw for r in readings)
                shapes = []
                for r in readings:
                    try:
                        shapes.append(remote_probes.parse_shape(r.raw["hidden_states.shape"]))
                    except ValueError:
                        continue
                return shapes
            time.sleep(0.2)

    @staticmethod
    def _decisive_width(shapes: list[tuple[int, ...]], expected: int | None) -> int | None:
        """The width that decides H2: ``expected`` (the draft's fc in_features) when any forward saw
        it (the aux states reached the draft), else the widest seen; ``None`` when none."""
        widths = [s[-1] for s in shapes if s]
        if not widths:
            return None
        return expected if expected in widths else max(widths)

    def code_path(self) -> CodePathMap | None:
        """The EAGLE-3 code-path map of the box's engine for this deployment's target and draft
        classes (:func:`workbench.codepath.code_path_map`; built once). ``None`` when the engine
        source was not located."""
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
            self._code_path = code_path_map(src, **kw)
        return self._code_path

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

    def _decide(self, hid: str, verdict: str, summary: str, *, findings: list[Finding] = (),
                data: dict | None = None) -> StepResult:
        evidence = [Evidence(kind="finding", summary=f"{f.rule}: {f.message}", data=f.to_dict(),
                             source="static check") for f in findings]
        if data:
            evidence.append(Evidence(kind="data", summary=summary, data=dict(data), source="box"))
        if not evidence:
            evidence.append(Evidence(kind="note", summary=summary, data={}, source="workbench"))
        self.ledger.decide(hid, verdict, *evidence)
        return StepResult(hid, verdict, summary, list(findings), dict(data or {}))

    # -- summary --------------------------------------------------------------------------------

    def root_cause(self) -> dict[str, Any] | None:
        """The first error finding of a confirmed hypothesis, in ledger order, with the mechanism
        (H2's probe) attached when it was confirmed."""
        for hyp in self.ledger:
            if hyp.verdict != "confirmed":
                continue
            errors = [f for f in self.findings if f.severity == "error"]
            for f in errors:
                return {"rule": f.rule, "hypothesis": hyp.id, "message": f.message, "fix": f.fix,
                        "mechanism_confirmed_by_probe": self.ledger.get(H2).verdict == "confirmed"}
        return None

    def launch_diff(self) -> list[tuple[str, Any, Any]]:
        """The fix as a launch-command diff: (flag, before, after)."""
        return self.inventory.launch.diff(self.fix_launch) if self.fix_launch is not None else []

    def figures(self) -> dict[str, Any]:
        """The summary's plotly figures (only those the run has data for)."""
        out: dict[str, Any] = {}
        if self.before is not None and self.after is not None:
            out["accept_length"] = figures.accept_length_before_after(
                self.before.accept_length or 0.0, self.after.accept_length or 0.0,
                labels=(self.before.label, self.after.label),
                ideal=float(self.fix_launch.get("--speculative-num-draft-tokens") or 0) or None)
            out["per_request"] = figures.accept_length_per_request(
                [r.spec_accept_length or 0.0 for r in self.before.generate.records],
                [r.spec_accept_length or 0.0 for r in self.after.generate.records])
        timeline = {m.label: m.log_records for m in (self.before, self.after) if m is not None and m.log_records}
        if timeline:
            out["timeline"] = figures.acceptance_timeline(timeline)
        if self.probe_result.get("observed_hidden_size"):
            out["probe"] = figures.hidden_width_probe(self.probe_result["observed_hidden_size"],
                                                      self.probe_result.get("expected_hidden_size") or 0,
                                                      self.probe_result.get("target_hidden_size") or 0)
        return out

    def build_verdict(self) -> dict[str, Any]:
        """The verdict document (schema: DESIGN.md, "Contracts")."""
        def acceptance(m: Measurement | None) -> dict | None:
            return m.to_dict() if m is not None else {"accept_length": None}

        return {
            "root_cause": self.root_cause() or {"rule": None},
            "hypotheses": self.ledger.to_dict()["hypotheses"],
            "acceptance": {"before": acceptance(self.before), "after": acceptance(self.after)},
            "probe": {
                "observed_hidden_size": self.probe_result.get("observed_hidden_size"),
                "expected_hidden_size": self.probe_result.get("expected_hidden_size"),
                **{k: v for k, v in self.probe_result.items() if k not in ("observed_hidden_size", "expected_hidden_size")},
            },
            "fix": {
                "launch_command": self.fix_launch.to_string() if self.fix_launch is not None else None,
                "diff": [{"flag": f, "before": a, "after": b} for f, a, b in self.launch_diff()],
                "applied": self.after is not None,
                "kept": bool(self.keep_fix and self.after is not None),
            },
            "findings": [f.to_dict() for f in self.findings],
            "preflight": self.doctor_report.to_dict() if self.doctor_report is not None else None,
            "runtime_findings": [f.to_dict() for f in acceptance_collapsed(
                self.before.generate, self.findings, source=f"/generate over the prompt set: {self.before.label}")]
            if self.before is not None else [],
            "inventory": self.inventory.to_dict(),
            "code_path": self._code_path.to_dict() if self._code_path is not None else None,
            "launches": self.launches,
            "restarts": self.restarts,
            "restore": self.restore_report.to_dict() if self.restore_report else None,
            "duration_s": round(time.monotonic() - self.started_at, 2),
        }

    def summary_html(self) -> str:
        """Root cause, fix diff and the box's state, as HTML for the summary cell."""
        rc = self.root_cause()
        parts = ["<h3>Summary</h3>"]
        if rc:
            parts.append(f"<p><b>Root cause</b> (<code>{html.escape(rc['rule'])}</code>): {html.escape(rc['message'])}</p>")
        else:
            parts.append("<p><b>No root cause confirmed.</b> See the ledger for what was ruled out.</p>")
        if self.before is not None:
            parts.append(f"<p>accept length before: <b>{_fmt(self.before.accept_length)}</b>"
                         + (f", after the fix: <b>{_fmt(self.after.accept_length)}</b>" if self.after else "") + "</p>")
        diff = self.launch_diff()
        if diff:
            rows = "".join(f"<tr><td><code>{html.escape(f)}</code></td><td style='color:#b00020'><code>- {html.escape(str(a))}"
                           f"</code></td><td style='color:#1b7a1b'><code>+ {html.escape(str(b))}</code></td></tr>"
                           for f, a, b in diff)
            parts.append(f"<p><b>Fix</b> (launch-command diff):</p><table>{rows}</table>")
            parts.append(f"<p>fixed command: <code>{html.escape(self.fix_launch.to_string())}</code></p>")
        return "".join(parts)
