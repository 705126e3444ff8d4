"""The control panel (issue 15) on the sandbox box, in-process: a step after Finish starts a new
run (the finished one refuses steps with DiagnosisError), Finish twice restores again and rewrites
the verdict, and every button is disabled while a step runs."""

from __future__ import annotations

import html

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.faults import build_deployment
from workbench.lab.panel import ControlPanel
from workbench.errors import DiagnosisError
from workbench.session import Journal

pytestmark = pytest.mark.slow


def test_panel_step_after_finish_starts_a_new_run_and_buttons_disable_while_running(tmp_path, state_dir, free_port):
    dep = build_deployment(tmp_path / "deployment", "eagle-flag")
    panel = ControlPanel(launch_command=dep.launch_command(free_port), port=free_port,
                         report_dir=tmp_path / "reports", num_prompts=2, max_new_tokens=32)
    seen: list[list[bool]] = []
    try:
        assert panel.step("start") is not None
        start_area = panel.output
        assert panel.latest.children == (start_area,) and panel.history.children == ()
        first = panel.run
        first.progress = False
        real = first.measure_symptom

        def observed():  # records the buttons' state from inside the step
            seen.append([b.disabled for b in panel.buttons.values()])
            return real()
        first.measure_symptom = observed
        assert panel.step("measure_symptom") is not None
        assert seen == [[True] * len(panel.buttons)]
        assert not any(b.disabled for b in panel.buttons.values())
        assert panel.status.value == "2 · Measure symptom: done"
        # the newest result in its own area under the buttons; the older one collapsed below
        assert panel.latest.children == (panel.output,) and panel.output is not start_area
        assert panel.history.children == (start_area,) and panel.history.titles == ("1. Inventory",)
        assert panel.history.selected_index is None
        assert panel.verdict.value == ""
        panel.step("finish")
        verdict = tmp_path / "reports" / "diagnose_acceptance.json"
        assert verdict.is_file()
        shown = panel.verdict.value
        assert f"<code>{verdict.resolve()}</code>" in shown and verdict.resolve().is_absolute()
        assert f"<b>Outcome</b>: {first.verdict['outcome']}" in shown
        before = first.verdict["acceptance"]["before"]["accept_length"]
        assert f"<span class='wb-panel-before'>{before:.2f}</span>" in shown
        assert "<span class='wb-panel-after'>not measured</span>" in shown  # no fix was measured
        actions = first.verdict["restore"]["actions"]
        assert actions and all(f"<li>{html.escape(a)}</li>" in shown for a in actions)
        assert len(panel.history.children) == 2 and panel.history.titles[-1] == "2. Measure symptom"
        verdict.unlink()
        panel.step("finish")
        assert verdict.is_file() and first.verdict["restore_again"] == ["nothing to do"]
        assert "Finish again: nothing to do" in panel.verdict.value
        panel.step("measure_symptom")
        assert panel.run is not first and panel.runs_started == 2
        assert panel.verdict.value == ""  # the new run has no verdict yet
        assert len(panel.history.children) == 4 and panel.history.titles[-1] == "4. Finish · restore box"
        with pytest.raises(DiagnosisError, match="this run finished"):
            first.check_hypotheses()
        assert panel.errors == []
    finally:
        if panel.run is not None:
            panel.run.finish()
    with connect("local") as box:
        assert [s for s in box.find_servers() if s.port == free_port] == []
        assert remote_probes.list_probes(box) == [] and not Journal(box).pending


def test_panel_step_before_inventory_says_so_without_a_traceback(tmp_path):
    panel = ControlPanel(report_dir=tmp_path / "reports")
    assert panel.step("measure_symptom") is None
    assert [type(e) for e in panel.errors] == [DiagnosisError]
    assert "start with '1 · Inventory' first" in str(panel.errors[0])
    assert panel.status.value == "2 · Measure symptom: failed"
    assert not any(b.disabled for b in panel.buttons.values())
    assert panel.latest.children == (panel.output,) and panel.verdict.value == ""


def test_panel_finish_that_fails_says_failed(tmp_path):
    """Finish with no run to finish is an error the panel catches: the status says so (not "done")."""
    panel = ControlPanel(report_dir=tmp_path / "reports")
    assert panel.step("finish") is None
    assert [type(e) for e in panel.errors] == [DiagnosisError]
    assert panel.status.value == "Finish · restore box: failed"
    assert panel.verdict.value == "" and not any(b.disabled for b in panel.buttons.values())
