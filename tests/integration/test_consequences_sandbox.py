"""One cause, its consequences, end to end on the sandbox (issue 29, part 3): the draft's config
names a wrong ``target_hidden_size`` (``testkit.faults`` ``target-hidden-mismatch``), which also
makes the draft need an embedding it was never trained with (``weights-missing``, the
weights-loaded hypothesis). The runbook's whole diagnosis (``DiagnosisRun``, in process on the
local box) names ONE root cause with the other listed as its consequence, asks nothing of the
consequence (no parameter, no ``none`` fix, nothing open), and the one fix brings accept length back."""

from __future__ import annotations

import pytest

from testkit.faults import build_deployment
from testkit.matrix import PROMPTS
from workbench.diagnosis import DiagnosisRun
from workbench.rules.acceptance_level import classify_acceptance

pytestmark = pytest.mark.slow


def test_one_root_cause_its_consequence_listed_under_it_and_the_one_fix_brings_acceptance_back(
        tmp_path, free_port, monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    dep = build_deployment(tmp_path / "deployment", "target-hidden-mismatch")
    run = DiagnosisRun.start(host="local", launch_command=dep.launch_command(free_port), port=free_port,
                             report_dir=tmp_path / "reports", **PROMPTS)
    run.progress = False
    verdict = run.run_all()
    assert [c["hypothesis"] for c in verdict["root_causes"]] == ["config-vs-target"], verdict["root_causes"]
    root = verdict["root_causes"][0]
    assert root["rule"] == "hidden-size-mismatch" and root["fix_applied"]
    assert root["consequences"] == [{"hypothesis": "weights-loaded", "rule": "weights-missing", "how": "static"}]
    (cons,) = verdict["consequences"]
    assert cons["cleared_by"] == ["config-vs-target"] and "set_embed" in cons["mechanism"]
    assert cons["cleared_by_fix"] is True  # the fix's doctor no longer reports it: recorded as evidence
    hyp = {h["id"]: h for h in verdict["hypotheses"]}
    assert hyp["weights-loaded"]["consequence_of"] == ["config-vs-target"]
    # nothing asked of the consequence: no fix of its own, no parameter, nothing open, no probe
    assert all(not (set(f["rules"]) & {"weights-missing"}) for f in verdict["fixes"]), verdict["fixes"]
    assert all(f.get("parameter") is None for f in verdict["fixes"]) and verdict["open"] == []
    assert verdict["fix"]["kinds"] == ["draft-copy"] and verdict["outcome"] == "fixed"
    after = verdict["acceptance"]["after"]["accept_length"]
    assert verdict["fix"]["sufficient"] is True and classify_acceptance(after, ceiling=4.0).low is False, after
    assert verdict["restarts"] == 1  # the one fix relaunch (the as-found launch was refused by the guard)
