"""Committed notebooks: no outputs, a tagged parameters cell, and the same cells the build script
writes (so the runbook cannot drift from ``scripts/build_runbooks.py``)."""

import importlib.util
from pathlib import Path

import nbformat
import pytest
from testkit.engine_copy import checkout_dir, sandbox_engine_dir

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_runbooks", ROOT / "scripts" / "build_runbooks.py")
build_runbooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_runbooks)

NOTEBOOKS = {
    ROOT / "runbooks" / "diagnose_acceptance.ipynb": build_runbooks.DIAGNOSE,
    ROOT / "notebooks" / "control_panel.ipynb": build_runbooks.PANEL,
    ROOT / "runbooks" / "preflight.ipynb": build_runbooks.PREFLIGHT,
    ROOT / "notebooks" / "engine_probes.ipynb": build_runbooks.ENGINE,
    ROOT / "notebooks" / "box_console.ipynb": build_runbooks.CONSOLE,
    ROOT / "notebooks" / "walkthrough.ipynb": build_runbooks.WALKTHROUGH,
    ROOT / "runbooks" / "measure_acceptance.ipynb": build_runbooks.MEASURE,
    ROOT / "runbooks" / "compare_drafts.ipynb": build_runbooks.COMPARE,
}


@pytest.mark.parametrize("path", sorted(NOTEBOOKS), ids=lambda p: p.name)
def test_committed_without_outputs_and_in_sync(path):
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has stored outputs"
    assert [c.source for c in nb.cells] == [c.source for c in NOTEBOOKS[path]], \
        f"{path.name} differs from scripts/build_runbooks.py: rerun it"


def test_runbook_parameters_cell():
    nb = nbformat.read(str(ROOT / "runbooks" / "diagnose_acceptance.ipynb"), as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    names = {line.split("=")[0].strip() for line in tagged[0].source.splitlines() if "=" in line}
    assert {"host", "launch_command", "port", "allow_restart", "apply_fix", "report_dir"} <= names


def test_preflight_runbook_on_the_sandbox_with_the_wrong_flag(tmp_path, execute_notebook):
    """papermill executes runbooks/preflight.ipynb on the sandbox box launched with EAGLE: the
    findings table names algorithm-mismatch and the corrected command says EAGLE3."""
    import json

    from workbench.sandbox_box import sandbox_launch_command
    from workbench.engine.launch import LaunchCommand

    out = tmp_path / "preflight.ipynb"
    execute_notebook(ROOT / "runbooks" / "preflight.ipynb", out,
                     parameters={"launch_command": sandbox_launch_command(algorithm="EAGLE"),
                                 "report_dir": str(tmp_path)}, cwd=str(checkout_dir()))
    result = json.loads((tmp_path / "preflight.json").read_text())
    assert [(f["rule"], f["severity"]) for f in result["findings"] if f["severity"] != "info"] == [
        ("algorithm-mismatch", "error")]
    assert LaunchCommand.parse(result["corrected_launch_command"]).get("--speculative-algorithm") == "EAGLE3"
    html_out = "".join(o.get("data", {}).get("text/html", "") for c in nbformat.read(str(out), as_version=4).cells
                       if c.cell_type == "code" for o in c.outputs)
    assert "algorithm-mismatch" in html_out and "Corrected launch command" in html_out


def test_engine_probes_notebook_on_the_sandbox_engine(tmp_path, monkeypatch, execute_notebook):
    """papermill executes notebooks/engine_probes.ipynb on the sandbox box's engine (no server
    running): the map shows every entry, the scan names the broad except, the three recipes are
    added and reverted, and the sandbox's files are byte-identical afterwards."""
    import hashlib
    import sys

    sandbox = sandbox_engine_dir() / "srt"  # the engine this process's kernels import
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sandbox.rglob("*.py")}
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "engine_probes.ipynb"
    execute_notebook(ROOT / "notebooks" / "engine_probes.ipynb", out,
                     parameters={"package": "workbench.sandbox", "python": sys.executable}, cwd=str(checkout_dir()))
    texts = []
    for cell in nbformat.read(str(out), as_version=4).cells:
        for o in cell.get("outputs", []):
            texts.append(o.get("text", "") + o.get("data", {}).get("text/html", "") +
                         o.get("data", {}).get("text/plain", ""))
    text = "\n".join(texts)
    assert "draft-fc-width-check" in text and "not found" not in text.lower()
    assert "spec_aux_hidden_state.py:57" in text and "neither logs nor re-raises" in text
    width_check = "        if hidden_states.shape[-1] != embeds.shape[-1]:"
    lines = (sandbox / "models" / "llama_eagle3.py").read_text().splitlines()
    assert f"> {lines.index(width_check) + 1} | {width_check}" in text
    assert ("reverted: ['draft-d2t', 'target-capture-layers', 'draft-input-width', 'draft-params-at-init.before', "
            "'draft-params-at-init', 'draft-weights-unmatched.ran', 'draft-weights-unmatched.2', "
            "'draft-weights-unmatched']  still recorded: []") in text
    assert before == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sandbox.rglob("*.py")}
