"""The control panel (issue 15) on the sandbox box, in-process: a step after Finish starts a new
run (the finished one refuses steps with DiagnosisError), Finish twice restores again and rewrites
the verdict, and every button is disabled while a step runs."""

from __future__ import annotations

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.faults import build_deployment
from workbench.diagnosis.panel import ControlPanel
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
        panel.step("finish")
        verdict = tmp_path / "reports" / "diagnose_acceptance.json"
        assert verdict.is_file()
        verdict.unlink()
        panel.step("finish")
        assert verdict.is_file() and first.verdict["restore_again"] == ["nothing to do"]
        panel.step("measure_symptom")
        assert panel.run is not first and panel.runs_started == 2
        with pytest.raises(DiagnosisError, match="this run finished"):
            first.check_hypotheses()
        assert panel.errors == []
    finally:
        if panel.run is not None:
            panel.run.finish()
    with connect("local") as box:
        assert [s for s in box.find_servers() if s.port == free_port] == []
        assert remote_probes.list_probes(box) == [] and not Journal(box).pending
