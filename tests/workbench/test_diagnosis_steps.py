"""The diagnosis as an orchestrator over step modules (issue 27): each step takes the run's
context and hands on explicit values; the orchestrator runs them in the runbook's order.

The step functions are called directly here, on the sandbox box with no server running and no
restart allowed (static steps only: nothing on the box changes), and on values built by hand for
the pure ones (acceptance, readings)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from remote.probes import ProbeReading
from workbench.diagnosis import DiagnosisRun
from workbench.diagnosis.acceptance import (COLLAPSED_ACCEPT_LENGTH, LOW_ACCEPT_FRACTION, NEAR_THRESHOLD_BAND,
                                            SUFFICIENT_GAIN, acceptance_low, decision_thresholds, near_thresholds)
from workbench.diagnosis.context import HypothesisIndex, StaticEvidence
from workbench.diagnosis.steps import hypotheses, readings, static
from workbench.diagnosis import verdict as verdict_doc

ROOT = Path(__file__).resolve().parents[2]


# -- acceptance: numbers in, judgement out --------------------------------------------------------

def test_acceptance_low_against_the_ceiling_and_against_an_expectation():
    # no expectation: collapsed (<= 1.05) or below 0.45 x the ceiling (4 tokens per verify step: 1.8)
    assert COLLAPSED_ACCEPT_LENGTH == 1.05 and LOW_ACCEPT_FRACTION * 4.0 == pytest.approx(1.8)
    assert acceptance_low(1.04, expected=None, ceiling=None) is True
    assert acceptance_low(1.79, expected=None, ceiling=4.0) is True
    assert acceptance_low(1.81, expected=None, ceiling=4.0) is False
    assert acceptance_low(1.81, expected=None, ceiling=None) is False  # no ceiling known: only the collapse
    # an expectation replaces both: low below 90 % of it
    assert acceptance_low(2.6, expected=3.0, ceiling=4.0) is True
    assert acceptance_low(2.75, expected=3.0, ceiling=4.0) is False
    assert acceptance_low(None, expected=3.0, ceiling=4.0) is None


def test_decision_thresholds_and_the_band_that_measures_again():
    assert decision_thresholds(expected=None, ceiling=4.0, before=None) == pytest.approx([1.05, 1.8])
    assert decision_thresholds(expected=None, ceiling=4.0, before=1.2) == pytest.approx([1.05, 1.8, 1.2 * SUFFICIENT_GAIN])
    assert decision_thresholds(expected=2.0, ceiling=4.0, before=None) == pytest.approx([1.8])
    # within 3 % of a threshold: measured again; outside: not
    assert NEAR_THRESHOLD_BAND == 0.03
    assert near_thresholds(1.85, [1.8]) == [1.8] and near_thresholds(1.86, [1.8]) == []
    assert near_thresholds(None, [1.8]) == []


# -- the orchestrator --------------------------------------------------------------------------

def test_the_orchestrator_runs_the_runbooks_steps_in_the_runbooks_order():
    """``DiagnosisRun.STEPS`` is the runbook's table of contents: the runbook's cells call the same
    step methods in the same order (preflight, a part of check_hypotheses, shown on its own)."""
    nb = json.loads((ROOT / "runbooks" / "diagnose_acceptance.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    called = [m for m in re.findall(r"\brun\.(\w+)\(", code) if m in {name for name, _ in DiagnosisRun.STEPS}]
    assert list(dict.fromkeys(called)) == [name for name, _ in DiagnosisRun.STEPS]


def test_a_hypothesis_has_at_most_one_static_decider():
    with pytest.raises(ValueError, match="aux-offset-convention.*decide_offset_convention"):
        hypotheses.static_decider("aux-offset-convention")(lambda ctx, found, low: None)
    # every registered decider names a hypothesis of the catalogue
    ids = {spec.id for spec, _ in HypothesisIndex().in_order()}
    assert set(hypotheses.STATIC_DECIDERS) <= ids


# -- the steps on the sandbox box, static only -------------------------------------------------------

@pytest.fixture
def static_run(tmp_path, state_dir, free_port):
    run = DiagnosisRun.start(port=free_port, allow_restart=False, report_dir=tmp_path / "reports")
    try:
        yield run
    finally:
        run.finish()


def test_preflight_hands_on_its_evidence_and_runs_once(static_run):
    ctx = static_run.ctx
    assert ctx.state.static is None and ctx.state.findings == []
    report = static.preflight(ctx)
    assert isinstance(ctx.state.static, StaticEvidence) and ctx.state.static.report is report
    assert static.preflight(ctx) is report  # run once
    # the sandbox's wrong flag, and the draft read from the box: its fc takes 3 target widths
    assert [f.rule for f in ctx.state.findings if f.severity == "error"] == ["algorithm-mismatch"]
    assert ctx.state.draft_facts.fc_in_features == 3 * ctx.state.target_facts.hidden_size
    # the run's old attribute names read the same values
    assert static_run.doctor_report is report and static_run.findings is ctx.state.findings


def test_the_hypotheses_step_writes_the_ledger_and_the_verdict_reads_it(static_run):
    ctx = static_run.ctx
    table = hypotheses.check_hypotheses(ctx)
    rows = {h: v for h, v, _ in table.rows}
    assert rows["algorithm-flag"] == "confirmed" and ctx.ledger.get("algorithm-flag").verdict == "confirmed"
    assert set(rows) == set(ctx.hypotheses.specs)
    # nothing measured: the runtime-only hypotheses stay open, the verdict says cause-found
    assert verdict_doc.outcome(ctx) == "cause-found"
    assert verdict_doc.root_cause(ctx)["rule"] == "algorithm-mismatch"
    proposed = verdict_doc.proposed_launch(ctx)
    assert proposed.get("--speculative-algorithm") == "EAGLE3"
    assert verdict_doc.launch_diff(ctx) == [("--speculative-algorithm", "EAGLE", "EAGLE3")]


def test_the_probes_readings_are_judged_against_the_drafts_fc(static_run):
    """The readings of one launch, summarised against the width the draft's fc takes: the
    sandbox's wrong flag shows the target's width (fc skipped); the fixed launch the fc's."""
    ctx = static_run.ctx
    static.preflight(ctx)
    hidden = ctx.state.target_facts.hidden_size
    fc_in = ctx.state.draft_facts.fc_in_features

    def width_line(width: int, n: int) -> ProbeReading:
        shape = f"torch.Size([7, {width}])"
        return ProbeReading(tag="draft-input-width", values={}, raw={"hidden_states.shape": shape}, line_number=n,
                            log_line=f"[probe:draft-input-width pgid=1 pid=2] hidden_states.shape={shape}")

    wrong = readings.summarize_readings(ctx, {readings.PROBE_RECIPE: [width_line(hidden, 1)]}, before=True)
    assert (wrong["observed_hidden_size"], wrong["expected_hidden_size"]) == (hidden, fc_in)
    assert wrong["observed_widths"] == [hidden] and wrong["target_hidden_size"] == hidden
    # the fixed launch: some forwards see the target's width (the first token), the fc's decides
    fixed = readings.summarize_readings(ctx, {readings.PROBE_RECIPE: [width_line(hidden, 1), width_line(fc_in, 2)]},
                                        before=False)
    assert fixed["observed_hidden_size"] == fc_in and fixed["observed_widths"] == sorted({hidden, fc_in})
    # attached as evidence of the wrong flag, in words
    ctx.state.probe.result = wrong
    readings.attach_probe_evidence(ctx, {})
    last = ctx.ledger.get("algorithm-flag").evidence[-1]
    assert last.kind == "probe" and f"fc's width {fc_in}" in last.summary and "skips fc" in last.summary
    assert readings.probe_text(ctx).startswith(f"widths reaching fc: [{hidden}] (fc expects {fc_in})")


def test_the_verdict_uses_rank_0_and_names_every_rank_that_disagrees(static_run):
    """Probe lines of a TP 3 launch (issue 28, ``probe.ranks``): one entry per rank with the width
    it printed; the decisive width is rank 0's; rank 2, whose draft saw only the target's width,
    is named (in the summary and in a note), and a line without a rank is kept apart by its pid."""
    ctx = static_run.ctx
    static.preflight(ctx)
    hidden, fc_in = ctx.state.target_facts.hidden_size, ctx.state.draft_facts.fc_in_features

    def line(width: int, rank, pid: int, n: int) -> ProbeReading:
        shape = f"torch.Size([7, {width}])"
        who = f"pgid=1 pid={pid}" + (f" rank={rank}" if rank is not None else "")
        return ProbeReading(tag="draft-input-width", values={}, raw={"hidden_states.shape": shape}, line_number=n,
                            log_line=f"[probe:draft-input-width {who}] hidden_states.shape={shape}", pgid=1, pid=pid,
                            rank=rank)

    lines = [line(hidden, 1, 11, 1), line(fc_in, 1, 11, 2), line(fc_in, 0, 10, 3), line(hidden, 2, 12, 4)]
    got = readings.summarize_readings(ctx, {readings.PROBE_RECIPE: lines}, before=False)
    assert [(e["rank"], e["value"]) for e in got["ranks"]] == [(0, fc_in), (1, fc_in), (2, hidden)]
    assert got["observed_hidden_size"] == fc_in and got["ranks_disagree"] == [2]
    readings.attach_probe_evidence(ctx, {}, got, on_fix=True)
    assert any(n.startswith("probe on the fixed server: rank(s) [2] printed another width than rank 0")
               for n in ctx.notes), ctx.notes
    # rank 0 decides even when another rank saw only the target's width first
    assert readings.summarize_readings(ctx, {readings.PROBE_RECIPE: [line(hidden, 1, 11, 1), line(hidden, 0, 10, 2)]},
                                       before=True)["observed_hidden_size"] == hidden
    # lines without a rank: one entry per process, rank None, all of them decide
    unranked = readings.summarize_readings(ctx, {readings.PROBE_RECIPE: [line(hidden, None, 20, 1),
                                                                        line(fc_in, None, 21, 2)]}, before=True)
    assert [(e["rank"], e["pid"], e["value"]) for e in unranked["ranks"]] == [(None, 20, hidden), (None, 21, fc_in)]
    assert unranked["observed_hidden_size"] == fc_in and unranked["ranks_disagree"] == []


def test_the_runs_values_are_the_steps_values_and_read_only(static_run):
    with pytest.raises(AttributeError, match="read-only"):
        static_run.before = None
    static_run.progress = False  # the one setting a caller changes after start
    assert static_run.ctx.settings.progress is False
    assert static_run.probe_result is static_run.ctx.state.probe.result
    assert static_run.notes is static_run.ctx.state.notes


def test_a_step_after_finish_is_refused(tmp_path, state_dir, free_port):
    from workbench.errors import DiagnosisError

    run = DiagnosisRun.start(port=free_port, allow_restart=False, report_dir=tmp_path / "reports")
    verdict = run.finish()
    # no step ran: nothing measured, nothing decided
    assert (verdict["outcome"], verdict["outcome_detail"]) == ("inconclusive", "symptom not measured")
    for step in ("check_hypotheses", "measure_symptom", "probe", "apply_fixes", "attribute"):
        with pytest.raises(DiagnosisError, match=f"DiagnosisRun.{step}\\(\\): this run finished"):
            getattr(run, step)()
    assert run.finish()["outcome"] == "inconclusive"  # finishing again is allowed


def test_a_prompt_set_that_cannot_be_read_is_refused_before_the_box_is_touched(tmp_path, state_dir, free_port):
    """A new user's trial: a missing ``prompts`` file raised only after the run lock and the
    watchdog were taken, and a corrected retry in the same kernel was refused as "another run"."""
    from workbench.errors import PromptSetError

    with pytest.raises(PromptSetError):
        DiagnosisRun.start(port=free_port, allow_restart=False, prompts=str(tmp_path / "missing.jsonl"),
                           report_dir=tmp_path / "reports")
    again = DiagnosisRun.start(port=free_port, allow_restart=False, report_dir=tmp_path / "reports")
    assert len(again.prompts) > 0
    again.finish()


@pytest.mark.slow  # launches the sandbox server as found, then with the fix's command
def test_the_symptom_is_never_measured_on_a_server_the_run_relaunched_otherwise(tmp_path, state_dir, free_port):
    """A new user's trial: measure_symptom() after apply_fixes() measured the fix server and filed it
    as the symptom (before = after). The symptom is the deployment as found; after a relaunch with
    another command it is refused. Before that, low acceptance with no hypothesis looked at is
    inconclusive (every hypothesis still open), never "unexplained"."""
    from workbench.errors import DiagnosisError

    run = DiagnosisRun.start(port=free_port, report_dir=tmp_path / "reports", num_prompts=2, max_new_tokens=24)
    run.progress = False
    try:
        before = run.measure_symptom()
        assert before.accept_length is not None and run.acceptance_low(before.accept_length) is True
        n = len(run.ctx.hypotheses.specs)
        assert run.outcome() == "inconclusive"
        assert run.outcome_detail().startswith(f"{n} hypotheses still open: ")
        assert "acceptance as found is low, but the hypotheses above are still open" in run.summary_html()
        run.check_hypotheses()
        assert run.outcome() == "cause-found"
        run.launch(run.inventory.launch.with_flag("--speculative-algorithm", "EAGLE3"), "fix")
        with pytest.raises(DiagnosisError, match="not the one as found.*EAGLE3"):
            run.measure_symptom()
        assert run.before is before
    finally:
        verdict = run.finish()
    assert verdict["acceptance"]["before"]["launch_command"].count("EAGLE3") == 0


def test_why_the_probes_need_a_launch_of_their_own(static_run):
    """The sandbox's wrong flag, decided statically (issue 28): every suspect that no applied fix
    answers is named with why; with fixes that will be applied the probes ride on the fix launch
    (nothing named); a suspect only the readings as found decide (the cross-engine aux convention)
    still needs its probe launch."""
    from workbench.diagnosis.steps import fixes
    from workbench.diagnosis.steps.hypotheses import CROSS_ENGINE_AUX

    static_run.check_hypotheses()
    ctx = static_run.ctx
    assert ctx.ledger.get("algorithm-flag").verdict == "confirmed"
    # allow_restart False (this run): no fix launch at all
    assert fixes.probe_launch_needed(ctx) == [
        "algorithm-flag: no fix launch will carry the probes (allow_restart is False); their mechanism is read on "
        "the server as found"]
    ctx.session.allow_restart = True
    try:
        assert fixes.probe_launch_needed(ctx) == []  # the flag's fix will be applied: the probes ride on it
        ctx.settings.apply_fix = False
        assert "(apply_fix is False)" in fixes.probe_launch_needed(ctx)[0]
        ctx.settings.apply_fix = True
        ctx.ledger.decide(CROSS_ENGINE_AUX, "inconclusive")
        assert fixes.probe_launch_needed(ctx) == [
            f"{CROSS_ENGINE_AUX} could not be decided from the running server and the code path (no fix derivable): "
            "only the probes' readings on the server as found decide it"]
    finally:
        ctx.session.allow_restart = False
