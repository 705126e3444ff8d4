"""The outcome of a run that decided nothing (issue 15, trial finding 2), on the sandbox box: a run
finished right after Inventory, or after only the probe step, is ``inconclusive`` with what was not
measured — never ``healthy`` / "No false alarm: every hypothesis was checked". The verdict JSON,
the summary HTML and the control panel say the same."""

from __future__ import annotations

import json

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.faults import build_deployment
from workbench.diagnosis import DiagnosisRun
from workbench.diagnosis.steps.readings import target_hidden
from workbench.lab import walkthrough as walk
from workbench.lab.panel import ControlPanel
from workbench.session import Journal

PROMPTS = dict(num_prompts=2, max_new_tokens=32)


def _nothing_left(port: int) -> None:
    with connect("local") as box:
        assert [s for s in box.find_servers() if s.port == port] == []
        assert remote_probes.list_probes(box) == [] and not Journal(box).pending


@pytest.mark.slow
def test_panel_inventory_then_finish_is_inconclusive_symptom_not_measured(tmp_path, state_dir, free_port):
    """1 · Inventory then Finish: nothing measured, nothing decided. The verdict file, the summary
    and the panel's verdict line all say ``inconclusive: symptom not measured``."""
    dep = build_deployment(tmp_path / "deployment", "eagle-flag")
    panel = ControlPanel(launch_command=dep.launch_command(free_port), port=free_port,
                         report_dir=tmp_path / "reports", **PROMPTS)
    try:
        assert panel.step("start") is not None
        panel.step("finish")
    finally:
        if panel.run is not None and not panel.run.finished:
            panel.run.finish()
    assert panel.errors == []
    written = json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())
    assert written["outcome"] == "inconclusive" and written["outcome_detail"] == "symptom not measured"
    assert written["healthy"] is None
    assert "<b>Outcome</b>: inconclusive: symptom not measured" in panel.verdict.value
    summary = panel.run.summary_html()
    assert "Summary: Inconclusive: symptom not measured" in summary
    assert "Healthy" not in summary and "No false alarm" not in summary
    # the walkthrough's finish cell on the same run says it too (finishing again is allowed)
    assert walk.finish(panel.run).outcome == "inconclusive: symptom not measured"
    _nothing_left(free_port)


@pytest.mark.slow
def test_a_run_finished_after_only_the_probe_is_inconclusive_not_healthy(tmp_path, state_dir, free_port):
    """Inventory, 4 · Probe (the mechanism shown: the width reaching fc), Finish: the symptom was
    never measured and every hypothesis is still open, so the outcome is inconclusive."""
    dep = build_deployment(tmp_path / "deployment", "eagle-flag")
    run = DiagnosisRun.start(launch_command=dep.launch_command(free_port), port=free_port,
                             report_dir=tmp_path / "reports", **PROMPTS)
    run.progress = False
    try:
        result = run.probe()
        assert result is not None and result.verdict == "done", (result, run.notes)
        assert run.probe_result.get("observed_widths"), run.probe_result
        # finding 13: the expected fc width is read from the draft's config even with the probe as
        # the first step (3 target hidden states concatenated: the EAGLE-3 fc's input)
        fc_in = run.draft_facts.fc_in_features
        assert fc_in == 3 * target_hidden(run.ctx) and run.probe_result["expected_hidden_size"] == fc_in
        assert f"(fc expects {fc_in})" in result.summary, result.summary
        # the token map and the weights in words, not raw probe expressions
        assert "hot_token_id" not in result.summary, result.summary
        if "d2t" in run.probe_result:  # EAGLE (the wrong flag): no hot token map is loaded
            assert "hot token map (d2t) loaded: no" in result.summary, result.summary
        if "unmatched" in run.probe_result:
            assert "to nothing" not in result.summary, result.summary
    finally:
        verdict = run.finish()
    assert verdict["outcome"] == "inconclusive" and verdict["outcome_detail"] == "symptom not measured"
    assert verdict["acceptance"]["before"]["accept_length"] is None and verdict["healthy"] is None
    summary = run.summary_html()
    assert "Inconclusive: symptom not measured" in summary and "No false alarm" not in summary
    assert "Still open" in summary and "Measure symptom" in summary
    _nothing_left(free_port)


@pytest.mark.slow
def test_measured_not_low_but_hypotheses_never_checked_is_inconclusive(tmp_path, state_dir, free_port):
    """The healthy deployment measured (acceptance not low) but the hypotheses never checked: not
    healthy — ``N hypotheses still open`` with their ids; after check_hypotheses the same run is
    healthy (every hypothesis decided)."""
    dep = build_deployment(tmp_path / "deployment")
    # judged against what the healthy sandbox draft reaches on 2 short prompts (~1.8; ceiling 4)
    run = DiagnosisRun.start(launch_command=dep.launch_command(free_port), port=free_port,
                             report_dir=tmp_path / "reports", expected_accept_length=1.6, **PROMPTS)
    run.progress = False
    try:
        run.measure_symptom()
        assert run.acceptance_low(run.before.accept_length) is False, run.before.accept_length
        n = len(run.ledger.to_dict()["hypotheses"])
        assert run.outcome() == "inconclusive"
        assert run.outcome_detail().startswith(f"{n} hypotheses still open: ")
        assert "algorithm-flag" in run.outcome_detail()
        assert "Inconclusive: " in run.summary_html() and "No false alarm" not in run.summary_html()
        run.check_hypotheses()
        assert run.outcome() == "healthy" and run.outcome_detail() is None
    finally:
        verdict = run.finish()
    assert verdict["outcome"] == "healthy" and verdict["outcome_detail"] is None
    _nothing_left(free_port)


def test_d2t_and_unmatched_readouts_are_words_not_probe_expressions():
    """The probe readings as the probe prints them (repr text keyed by expression) -> plain words."""
    from workbench.diagnosis.run import d2t_words, unmatched_words
    from workbench.engine.recipes import RECIPES

    is_none, shape, head, tail = RECIPES["draft-d2t"].probes[0].exprs
    off = {is_none: "True", shape: "None", head: "None", tail: "None"}
    assert d2t_words(off) == "hot token map (d2t) loaded: no (draft token ids are used as target ids as they are)"
    on = {is_none: "False", shape: "(128,)", head: "[0, 1, 5, 7, 8, 9, 11, 12]", tail: "[250, 251, 253, 255]"}
    assert d2t_words(on) == ("hot token map (d2t) loaded: yes, shape (128,), target ids "
                             "[0, 1, 5, 7, 8, 9, 11, 12] … [250, 251, 253, 255]")
    assert d2t_words({}).startswith("hot token map (d2t): not read")
    assert unmatched_words([]) == "load_weights used every checkpoint tensor (no name was dropped)"
    names = [f"midlayer.w{i}" for i in range(7)]
    assert unmatched_words(names) == ("load_weights dropped 7 checkpoint tensor(s) whose names match no draft "
                                      f"parameter: {names[:5]} …")
