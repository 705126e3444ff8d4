"""Start-up deaths named end to end on the sandbox box (real server processes dying by the sandbox's
own model code, the diagnosis run as the runbook runs it): a death no rule predicts ends with the
engine's own line and the step in the verdict and the report, said to be unexplained; a death the
doctor predicts, launched anyway (force_launch), confirms the rule that predicted it."""

from __future__ import annotations

import json

import pytest

from testkit.faults import build_deployment
from workbench.diagnosis import DiagnosisRun

pytestmark = pytest.mark.slow


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    path = tmp_path / "box-state"
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(path))
    return path


def _run(tmp_path, dep, port, **params):
    run = DiagnosisRun.start(launch_command=dep.launch_command(port), port=port, report_dir=tmp_path / "reports",
                             num_prompts=2, max_new_tokens=32, **params)
    run.progress = False
    return run.run_all(), run


def test_a_death_no_rule_predicts_is_named_with_its_line_and_step(tmp_path, state_dir, free_port, cli):
    """``aux-ids-fewer-than-num-aux``: the draft's fc is built for three aux states (its
    ``num_aux_hidden_states``) while the target captures the two its ids name; loading passes and the
    warm-up's first draft forward dies in torch's matmul. No rule predicts it: the guard launches it,
    the verdict names the death (the engine's line, the step ``warmup``) and says the rules do not
    explain it, never an empty cause."""
    dep = build_deployment(tmp_path / "deployment", "aux-ids-fewer-than-num-aux")
    verdict, run = _run(tmp_path, dep, free_port)
    assert verdict["outcome"] == "server-does-not-start", (verdict["outcome"], verdict["root_causes"])
    assert verdict["launch_guard"]["checks"][0]["decision"] == "allowed"
    death = verdict["start_death"]
    assert death["label"] == "as-found" and death["step"] == "warmup", death
    assert death["exception"].startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied (")
    assert death["exception"].endswith("x320 and 480x160)"), death["exception"]
    assert death["where"].startswith("forward (") and "llama_eagle3.py" in death["where"]
    assert death["signature"]["id"] == "matmul-shape"
    attribution = death["attribution"]
    assert attribution["explained"] is False and attribution["rules"] == []
    assert attribution["why"].startswith("a start-up death the rules do not explain: the server died in warmup")
    assert death["exception"] in attribution["why"]
    assert verdict["start_failures"][0]["exception"] == death["exception"]
    [opened] = [o for o in verdict["open"] if o["hypothesis"] == "server start"]
    assert opened["why"] == attribution["why"]
    html = run.summary_html()
    assert "mat1 and mat2 shapes cannot be multiplied" in html and "warmup" in html
    assert "a start-up death the rules do not explain" in html
    saved = json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())
    assert saved["start_death"]["attribution"]["why"] == attribution["why"]
    # `workbench logs` on the dead server's log names the same death
    [launch] = [x for x in verdict["launches"] if x["label"] == "as-found"]
    code, out, _err = cli("logs", launch["log_path"], "--json")
    died = json.loads(out)["died"]
    assert (died["exception"], died["step"], died["signature"]["id"]) == (death["exception"], "warmup", "matmul-shape")
    code, out, _err = cli("logs", launch["log_path"])
    assert f"DIED          in warmup: {death['exception']}" in out


def test_a_death_the_doctor_predicts_confirms_its_rule(tmp_path, state_dir, free_port):
    """``target-hidden-mismatch`` launched past the guard (force_launch): the weight loader's assert
    while the draft loads is the death ``hidden-size-mismatch`` predicted; its hypothesis is confirmed
    with the engine's line as evidence."""
    dep = build_deployment(tmp_path / "deployment", "target-hidden-mismatch")
    verdict, _run_ = _run(tmp_path, dep, free_port, force_launch=True)
    death = verdict["start_death"]
    assert death["exception"] == ("AssertionError: Attempted to load weight (torch.Size([160, 480])) into parameter "
                                  "(torch.Size([160, 576]))")
    assert death["step"] == "load-draft" and death["signature"]["id"] == "weight-loader-shape-assert"
    attribution = death["attribution"]
    assert attribution["explained"] is True and "hidden-size-mismatch" in attribution["rules"]
    assert "hidden-size-mismatch" in attribution["predicted"]
    # the run goes on past the death (the fix of the confirmed cause is tried): the cause stays named
    assert "hidden-size-mismatch" in {c["rule"] for c in verdict["root_causes"]}, verdict["root_causes"]
    [hyp] = [h for h in verdict["hypotheses"] if "hidden-size-mismatch" in h["rules"]]
    assert hyp["verdict"] == "confirmed"
    said = [e for e in hyp["evidence"] if "the doctor predicted this death" in e["summary"]]
    assert said and said[0]["data"]["exception"] == death["exception"] and said[0]["data"]["step"] == "load-draft"
