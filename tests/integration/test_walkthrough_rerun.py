"""The walkthrough's cells re-run, in-process on the sandbox box (no server on the port: the run
launches the wrong-flag sandbox itself): a re-run symptom, probe or fix cell shows its first result
and costs no launch; re-running the start cell finishes the open run first (box restored, verdict
written); a step on a finished run is one message; finish twice restores again and rewrites the
verdict. The box is left as found: no server on the port, no probe, the journal clean."""

from __future__ import annotations

import json

import pytest

from remote import connect
from remote import probes as remote_probes
from workbench.lab import walkthrough as walk
from workbench.lab.notebook import NotebookMessage
from workbench.session.journal import Journal

pytestmark = pytest.mark.slow


def test_walkthrough_cells_rerun_without_restarting_anything(tmp_path, free_port, state_dir, monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(state_dir))
    params = dict(host="local", port=free_port, report_dir=tmp_path / "reports", num_prompts=3, max_new_tokens=48)
    verdict_path = tmp_path / "reports" / "diagnose_acceptance.json"
    box = connect("local", state_dir=state_dir)
    runs = []
    try:
        first = walk.start_run(None, **params)
        runs.append(first)
        first.progress = False
        s1 = walk.symptom(first)
        launched = len(first.launches)
        s2 = walk.symptom(first)
        assert launched == 1 and len(first.launches) == launched  # the re-run measured nothing again
        assert not s1.again and s2.again and s2.accept_length == s1.accept_length and s1.pinned

        # the start cell again: the open run is finished first (its server stopped), a new run starts
        second = walk.start_run(first, **params)
        runs.append(second)
        second.progress = False
        assert first.finished and json.loads(verdict_path.read_text())["launches"][0]["label"] == "as-found"
        with pytest.raises(NotebookMessage, match="this run finished"):
            walk.probe_width(first)  # a step the finished run never took: one message, no launch

        walk.symptom(second)
        second.check_hypotheses()
        p1 = walk.probe_width(second)
        restarts = second.restarts
        p2 = walk.probe_width(second)
        assert p2.again and second.restarts == restarts and p2.observed == p1.observed
        # the probes ride on the fix launch (no load of their own): nothing observed yet, in place
        assert p1.observed is None and p1.rides_on and "draft-input-width" in p1.in_place
        assert "never fc's 480" in str(p1)  # what the server as found sends to fc, read live (no restart)
        f1 = walk.apply_fix(second)
        restarts = second.restarts
        f2 = walk.apply_fix(second)
        assert f2.again and second.restarts == restarts and f2.accept_length == f1.accept_length
        assert f1.applied and ("--speculative-algorithm", "EAGLE", "EAGLE3") in f1.diff
        v = walk.verification(second)
        assert v.fixed and v.after > v.before and v.probes_left == [] and v.width_after == 480  # the sandbox draft fc: 3 x the target's 160

        done = walk.finish(second)
        assert done.outcome == "fixed" and done.path == verdict_path.resolve() and done.again is None
        verdict_path.unlink()
        again = walk.finish(second)
        assert again.again == ["nothing to do"] and json.loads(verdict_path.read_text())["outcome"] == "fixed"

        assert [s for s in box.find_servers() if s.port == free_port] == []
        assert remote_probes.list_probes(box) == []
        assert not Journal(box).pending
    finally:
        for run in runs:
            if not run.finished:
                run.finish()
        box.close()
