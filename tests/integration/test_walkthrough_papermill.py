"""notebooks/walkthrough.ipynb executed by papermill against the sandbox box, as a person would run
it top to bottom: a sandbox server runs with the wrong flag (``--speculative-algorithm EAGLE``,
the sandbox's default scenario), the walkthrough diagnoses it, fixes it, verifies and finishes.
Asserted from the verdict JSON and from the box itself: outcome fixed, accept length back, the
server found running again with its original argv, no probe left, the journal clean."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import nbformat
import pytest

from remote import connect
from remote import probes as remote_probes
from workbench.diagnosis.run import DRAFT_MODEL_FILE
from workbench.sandbox_box import sandbox_launch_command
from workbench.session.journal import Journal
from testkit.engine_copy import sandbox_engine_dir, checkout_dir

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "walkthrough.ipynb"
DRAFT_FILE = sandbox_engine_dir() / DRAFT_MODEL_FILE  # the file the probe patches, in this process's engine
TARGET_CONFIG = ROOT / "workbench" / "sandbox" / "models" / "target" / "config.json"

pytestmark = pytest.mark.slow


def _outputs(nb_path: Path) -> list[str]:
    """Every code cell's outputs as one text each (text/plain, text/html, stream text)."""
    texts = []
    for cell in nbformat.read(str(nb_path), as_version=4).cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for o in cell.get("outputs", []):
            parts.append(o.get("text", ""))
            for mime in ("text/plain", "text/html"):
                parts.append(o.get("data", {}).get(mime, ""))
        texts.append("".join(parts))
    return texts


def test_walkthrough_diagnoses_fixes_and_puts_the_box_back(tmp_path, free_port, state_dir, monkeypatch,
                                                           execute_notebook):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(state_dir))  # the kernel inherits it: the same box state
    hidden = json.loads(TARGET_CONFIG.read_text())["hidden_size"]
    box = connect("local", state_dir=state_dir)
    argv = shlex.split(sandbox_launch_command(port=free_port))  # the wrong flag: EAGLE
    handle = box.launch_server(argv, port=free_port, log_path=tmp_path / "original.log")
    try:
        box.wait_healthy(handle, timeout=180)
        sha_before = box.sha256(DRAFT_FILE)
        out = tmp_path / "walkthrough.ipynb"
        execute_notebook(NOTEBOOK, out, cwd=str(checkout_dir()),
                         parameters={"port": free_port, "report_dir": str(tmp_path / "reports"),
                                     "num_prompts": 3, "max_new_tokens": 48})
        verdict = json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())
        before = verdict["acceptance"]["before"]["accept_length"]
        after = verdict["acceptance"]["after"]["accept_length"]
        assert verdict["outcome"] == "fixed"
        assert before < 1.3 and after > 1.5 and after > before
        assert verdict["root_cause"]["rule"] == "algorithm-mismatch"
        # no probe launch (issue 28): the probes rode on the fix launch; the server as found was read live
        assert verdict["probe"]["rides_on"] == "fix" and verdict["probe"]["observed_hidden_size"] is None
        assert verdict["live"]["fc_widths_as_found"] == [hidden]
        assert verdict["loads"] == 2 and [launch["label"] for launch in verdict["launches"]] == ["fix", "restore"]
        assert verdict["probe"]["expected_hidden_size"] == 3 * hidden
        assert verdict["probe"]["after_fix_hidden_size"] == 3 * hidden
        assert verdict["inventory"]["server_pid"] == handle.pid
        assert "--speculative-algorithm EAGLE3" in verdict["fix"]["launch_command"]
        # the box as found: the original command line serves the port again (a new process), no
        # probe, the engine file byte for byte, the journal clean
        servers = [s for s in box.find_servers() if s.port == free_port]
        assert len(servers) == 1 and list(servers[0].argv) == argv and servers[0].pid != handle.pid
        assert remote_probes.list_probes(box) == []
        assert box.sha256(DRAFT_FILE) == sha_before
        assert not Journal(box).pending

        texts = _outputs(out)
        # the walkthrough's own views said the same thing along the way
        assert any("Pinned near 1.00" in t for t in texts)
        assert any("No probe launch: the probes are placed and ride on the fix launch" in t
                   and f"the target's {hidden}-wide hidden state, never fc's {3 * hidden}" in t for t in texts)
        verify = next(t for t in texts if "Verification: accept length" in t)
        assert f"{before:.3f}" in verify and f"{after:.3f}" in verify and "Fixed:" in verify
        assert "probes on the box now" in verify
        assert any(f"verdict: {(tmp_path / 'reports' / 'diagnose_acceptance.json').resolve()}" in t for t in texts)
    finally:
        for s in box.find_servers():
            if s.port == free_port:
                box.stop_server(s)
        box.close()
