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


@pytest.mark.parametrize("value", ["abc", "-1", "0", "70000", "3.5", "31 999"])
def test_panel_bad_port_field_is_one_line_and_starts_nothing(tmp_path, state_dir, value):
    """Trial finding 11: a port field that is no TCP port is a one-line DiagnosisError naming the
    value (a WorkbenchError: shown without a traceback), before anything touches the box."""
    panel = ControlPanel(report_dir=tmp_path / "reports")
    panel.port.value = value
    assert panel.step("start") is None
    assert [type(e) for e in panel.errors] == [DiagnosisError]
    message = str(panel.errors[0])
    assert "\n" not in message and repr(value.strip()) in message and "1–65535" in message
    assert panel.run is None and panel.runs_started == 0
    assert panel.status.value == "1 · Inventory: failed"
    assert not (tmp_path / "reports").exists() and not (state_dir / "journal.json").exists()


def test_panel_inventory_again_finishes_its_own_run_first_instead_of_run_locked(tmp_path, state_dir):
    """Trial finding 12: Inventory on port A, the port field changed to B, Inventory again: the
    panel's own unfinished run is finished first (box restored, verdict written, said so) and the
    new run starts on B — never RunLocked naming the panel's own kernel."""
    from testkit.ports import free_port

    port_a, port_b = free_port(), free_port()
    panel = ControlPanel(port=port_a, report_dir=tmp_path / "reports", allow_restart=False)
    try:
        assert panel.step("start") is not None
        first = panel.run
        assert first.inventory.port == port_a and not first.finished
        panel.port.value = str(port_b)
        assert panel.step("start") is not None, panel.errors
        assert panel.errors == [] and panel.status.value == "1 · Inventory: done"
        assert first.finished and first.verdict["outcome"] == "inconclusive"
        assert panel.run is not first and panel.run.inventory.port == port_b and panel.runs_started == 2
        assert (tmp_path / "reports" / "diagnose_acceptance.json").is_file()
        assert len(panel.notices) == 1 and panel.notices[0].startswith(f"Finished the current run (port {port_a}) first")
        assert "outcome inconclusive: symptom not measured" in panel.notices[0]
        assert panel.verdict.value == ""  # the new run has no verdict yet
    finally:
        if panel.run is not None and not panel.run.finished:
            panel.run.finish()
    with connect("local") as box:
        assert not Journal(box).pending


def test_relative_report_dir_lands_in_the_project_root_whatever_the_kernel_cwd(tmp_path, monkeypatch):
    """Trial finding 15: the panel's default "reports" is the repository's reports/, also when the
    kernel runs in notebooks/ (JupyterLab's cwd); absolute stays; no project root: the cwd."""
    from workbench.lab.panel import resolve_report_dir

    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert resolve_report_dir("reports", repo / "notebooks") == repo.resolve() / "reports"
    assert resolve_report_dir("reports", repo) == repo.resolve() / "reports"
    assert resolve_report_dir(tmp_path / "abs", repo / "notebooks") == tmp_path / "abs"
    loose = tmp_path / "loose"
    loose.mkdir()
    if not any((p / m).exists() for p in (loose.resolve(), *loose.resolve().parents) for m in (".git", "pyproject.toml")):
        assert resolve_report_dir("reports", loose) == loose.resolve() / "reports"
    monkeypatch.chdir(repo / "notebooks")
    panel = ControlPanel()
    assert panel.start_kwargs["report_dir"] == repo.resolve() / "reports"
