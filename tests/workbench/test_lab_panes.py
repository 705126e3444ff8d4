"""The console's probes and source panes (workbench.lab.probes_pane, workbench.lab.source_pane)
in-process, against a real sandbox server on this machine (the local box), with the shared
``BoxState`` (workbench.lab.state)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from remote import probes as remote_probes
from workbench.lab.probes_pane import ProbesPane
from workbench.lab.state import BoxState


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()



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
    rel = entry.file[len(str(root).rstrip("/")) + 1:]  # relative to the engine root, default tag
    probe = pane.add_expression(rel, entry.probe_line, ["hidden_states.shape"])
    assert probe is not None, pane.status.value
    assert probe.tag == f"llama_eagle3-L{entry.probe_line}" and probe.path == entry.file
    assert pane.add_recipe("draft-input-width") is not None, pane.status.value
    assert {p.tag for p in remote_probes.list_probes(state.box)} == {probe.tag, "draft-input-width"}
    done = pane.revert_all()
    assert done is not None and [p.tag for p in done] == ["draft-input-width", probe.tag], pane.status.value
    assert remote_probes.list_probes(state.box) == [] and sha(entry.file) == original


def test_parse_location_refuses_what_is_no_file_line():
    from workbench.errors import SourceLookupError
    from workbench.lab.source_pane import parse_location

    assert parse_location(" srt/models/llama_eagle3.py:120 ") == ("srt/models/llama_eagle3.py", 120)
    assert parse_location("/a:b/c.py:7") == ("/a:b/c.py", 7)
    for bad in ("srt/x.py", "srt/x.py:", "srt/x.py:0", "srt/x.py:ten", ":5", ""):
        with pytest.raises(SourceLookupError, match="not a file:line location"):
            parse_location(bad)


def test_source_pane_shows_the_code_path_entry_line(sandbox_server):
    from workbench.lab.source_pane import SourcePane

    srv = sandbox_server("EAGLE3")
    state = BoxState("local", srv.port)
    try:
        pane = SourcePane(state, context=3)
        cmap = pane.refresh()
        assert cmap is not None, pane.status.value
        keys = [c._dom_classes for c in pane.entries.children]
        assert len(keys) == len(cmap.entries)
        assert all("wb-source-entry" in k for k in keys)
        entry = cmap.entry("draft-fc-width-check")
        button = next(c for c in pane.entries.children if "wb-source-entry-draft-fc-width-check" in c._dom_classes)
        assert not button.disabled
        button.click()  # what a click in the browser does
        own_line = Path(entry.file).read_text().splitlines()[entry.line - 1]  # read the file myself
        focus = f"&gt; {entry.line:>{len(str(entry.line + 3))}} | " + html_escape(own_line)
        assert f'<span class="wb-source-focus"' in pane.view.value and focus in pane.view.value
        assert pane.view.value.count("\n") == 6  # 3 lines of context each side, 7 lines
        assert pane.location.value == f"{entry.file}:{entry.line}"
        assert pane.status.value.startswith("draft-fc-width-check: ")

        assert pane.show(entry.file, 10 ** 6) is None
        assert pane.status.value.startswith("<b>SourceLookupError</b>: line 1000000 is outside ")
        pane.location.value = "no-line-here"
        assert pane.show_location() is None and "not a file:line location" in pane.status.value
        assert pane.show_entry("no-such-entry") is None and "KeyError" in pane.status.value

        defs = pane.find("LlamaModel.forward")
        assert defs, pane.status.value
        d = defs[0]
        assert d.qualname.endswith("LlamaModel.forward") and len(pane.found.children) == len(defs)
        def_line = Path(d.file).read_text().splitlines()[d.line - 1]
        assert html_escape(def_line) in pane.view.value and pane.location.value == f"{d.file}:{d.line}"
        assert pane.find("not a name!") is None and "is not a Python name" in pane.status.value
    finally:
        state.close()


def html_escape(text: str) -> str:
    import html

    return html.escape(text, quote=False)
