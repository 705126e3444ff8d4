"""The console's probes and source panes (workbench.lab.probes_pane, workbench.lab.source_pane)
in-process, against a real sandbox server on this machine (the local box), with the shared
``BoxState`` (workbench.lab.state)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from remote import probes as remote_probes
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.lab.probes_pane import ProbesPane
from workbench.lab.state import BoxState


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def probe_state(own_sandbox_server, tmp_path):
    """A BoxState on a server of this test's own; no probe before, none left after (reverted
    here if the test failed half-way)."""
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        state = BoxState("local", srv.port)
        assert remote_probes.list_probes(state.box) == []
        try:
            yield state
        finally:
            left = remote_probes.list_probes(state.box)
            for p in reversed(left):
                remote_probes.revert_probe(state.box, p.tag)
            state.close()
            assert not left, f"the test left probes: {[p.tag for p in left]}"


def test_probes_pane_adds_lists_and_reverts_a_recipe(probe_state):
    state = probe_state
    entry = state.code_path().entry("draft-fc-width-check")
    original = sha(entry.file)
    pane = ProbesPane(state)
    assert pane.refresh() == [] and "no probes on the box" in pane.listing.value

    added = pane.add_recipe("draft-input-width")
    assert added is not None, pane.status.value
    assert [p.tag for p in added] == ["draft-input-width"]
    assert (added[0].path, added[0].line) == (entry.file, entry.probe_line)
    assert sha(entry.file) != original
    assert "prints after the server restarts" in pane.status.value
    assert [p.tag for p in remote_probes.list_probes(state.box)] == ["draft-input-width"]
    assert f"draft-input-width  [active]  {entry.file}:{entry.probe_line}" in pane.listing.value
    assert "self.fc.in_features" in pane.listing.value
    assert pane.tag.options == ("draft-input-width",) and pane.tag.value == "draft-input-width"
    assert not any(b.disabled for b in pane._buttons)

    reverted = pane.revert()
    assert reverted is not None and reverted.tag == "draft-input-width", pane.status.value
    assert remote_probes.list_probes(state.box) == []
    assert sha(entry.file) == original
    assert "matches the original's" in pane.status.value
    assert pane.tag.options == () and "no probes on the box" in pane.listing.value


def test_probes_pane_shows_errors_and_reverts_all(probe_state):
    state = probe_state
    pane = ProbesPane(state)
    assert pane.revert() is None
    assert "WorkbenchError" in pane.status.value and "no probe chosen" in pane.status.value
    assert pane.add_expression("", 1, ["x"]) is None and "no file given" in pane.status.value
    root = state.engine().root
    assert pane.add_expression("/etc/hostname", 1, ["x"]) is None
    assert pane.status.value.startswith("<b>ProbePathOutside</b>: ") and f"outside the engine package {root}" in pane.status.value

    entry = state.code_path().entry("draft-fc-width-check")
    original = sha(entry.file)
    probe = pane.add_expression(entry.file, entry.probe_line, ["hidden_states.shape"], tag="width-by-hand")
    assert probe is not None, pane.status.value
    assert probe.tag == "width-by-hand" and probe.path == entry.file
    assert pane.add_recipe("draft-input-width") is not None, pane.status.value
    assert {p.tag for p in remote_probes.list_probes(state.box)} == {"width-by-hand", "draft-input-width"}
    done = pane.revert_all()
    assert done is not None and [p.tag for p in done] == ["draft-input-width", "width-by-hand"], pane.status.value
    assert remote_probes.list_probes(state.box) == [] and sha(entry.file) == original
