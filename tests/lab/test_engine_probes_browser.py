"""notebooks/engine_probes.ipynb in a real JupyterLab (Chromium via Playwright) against a running
sandbox server of the test's own: run all cells; the code-path map is rendered with its entries'
names, no error output, the recipes' probes were added and reverted (nothing recorded afterwards,
the sandbox engine's files byte-identical); screenshot ``engine-probes.png``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from testkit.engine_copy import sandbox_engine_dir

REPO = Path(__file__).resolve().parents[2]
SANDBOX_SRT = sandbox_engine_dir() / "srt"  # the engine this process's kernels import (testkit.engine_copy)


def _hashes():
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in SANDBOX_SRT.rglob("*.py")}


def test_engine_probes_notebook_in_jupyterlab(lab, lab_server, own_sandbox_server, tmp_path, monkeypatch):
    from remote import connect, probes

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(lab_server.state_dir))
    before = _hashes()
    with own_sandbox_server(tmp_path) as srv:
        lab.open(REPO / "notebooks" / "engine_probes.ipynb", parameters={"port": srv.port})
        lab.run_all(timeout=300)
        assert lab.errors() == []
        out = lab.text(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea")
        for entry in ("spec-algorithm-is-eagle3", "eagle-config-read", "target-offset-rule", "draft-fc-width-check"):
            assert entry in out, entry  # the code-path map's rendered entries
        assert "neither logs nor re-raises" in out
        assert "reverted: ['draft-d2t'" in out and "still recorded: []" in out
        lab.page.get_by_text("draft-fc-width-check").first.scroll_into_view_if_needed()  # the map in view
        lab.screenshot("engine-probes")
        box = connect("local")
        try:
            assert probes.list_probes(box) == []
        finally:
            box.close()
    assert _hashes() == before
