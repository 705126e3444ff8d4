"""The diagnosis's vLLM pieces that need no running server: the verify ceiling of a vLLM launch,
the draft it serves, the sandbox box's default launch per engine, vLLM paths resolved against the
server's cwd, the ``engine`` runbook parameter, and the cross-engine aux-id hypothesis decided from
the doctor's finding (static) and from the ``target-capture-layers`` reading (the probe's), on the
real vLLM source of ``.venv-vllm`` (the doctor reads it on the box)."""

from __future__ import annotations

import json

import pytest

from remote import connect
from testkit.vllm_servers import require_vllm
from workbench.diagnosis.run import CROSS_ENGINE_AUX, _draft_of, _method_label, verify_ceiling
from workbench.engine.launch import LaunchCommand
from workbench.errors import DiagnosisError
from workbench.runbook_params import runbook_parameter_problems
from workbench.sandbox_box import sandbox_models_dir, sandbox_vllm_launch_command
from workbench.session.box_session import sandbox_default_launch
from workbench.session.inventory import absolutize

VLLM = "python -m vllm.entrypoints.openai.api_server --model /t --speculative-config "


@pytest.mark.parametrize("spec, ceiling", [
    ('\'{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}\'', 4.0),
    ('\'{"method": "eagle3", "model": "/d", "num_speculative_tokens": 5}\'', 6.0),
    ('\'{"method": "eagle3", "model": "/d"}\'', None),           # k unknown: no ceiling, never guessed
    ('\'{"method": "eagle3", "model": \'', None),                 # unreadable JSON: None, not an exception
])
def test_verify_ceiling_of_a_vllm_launch_is_k_plus_one(spec, ceiling):
    assert verify_ceiling(LaunchCommand.parse(VLLM + spec)) == ceiling


def test_sglang_ceiling_unchanged():
    launch = LaunchCommand.parse("python -m sglang.launch_server --model-path /t --speculative-algorithm EAGLE3 "
                                 "--speculative-num-steps 3 --speculative-num-draft-tokens 4")
    assert verify_ceiling(launch) == 4.0 and _method_label(launch) == "EAGLE3"


def test_draft_and_label_of_vllm_and_sglang_launches():
    vllm = LaunchCommand.parse(VLLM + '\'{"method": "eagle3", "model": "/drafts/d", "num_speculative_tokens": 3}\'')
    assert _draft_of(vllm) == "/drafts/d" and _method_label(vllm) == "vllm eagle3"
    assert _draft_of(vllm.with_draft_model("/copy")) == "/copy"
    broken = LaunchCommand.parse(VLLM + "'{not json'")
    assert _draft_of(broken) is None and "unreadable" in _method_label(broken)
    sglang = LaunchCommand.parse("python -m sglang.launch_server --model-path /t --speculative-draft-model-path /d")
    assert _draft_of(sglang) == "/d" and _draft_of(sglang.with_draft_model("/c")) == "/c"


def test_sandbox_default_launch_per_engine():
    vllm = LaunchCommand.parse(sandbox_default_launch("vllm", None))
    assert vllm.engine == "vllm" and vllm.port == 8000
    assert vllm.draft_model == str(sandbox_models_dir() / "draft") and vllm.speculative_method == "eagle3"
    assert dict(vllm.env) == {"VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert LaunchCommand.parse(sandbox_default_launch("vllm", 18000)).port == 18000
    sglang = LaunchCommand.parse(sandbox_default_launch(None, 31000))
    assert sglang.engine == "sandbox" and sglang.get("--speculative-algorithm") == "EAGLE" and sglang.port == 31000
    with pytest.raises(DiagnosisError, match="engine must be None, 'sglang' or 'vllm'.*'trt'"):
        sandbox_default_launch("trt", None)


def test_engine_parameter_of_the_three_runbooks():
    for runbook in ("diagnose_acceptance", "measure_acceptance", "compare_drafts"):
        assert runbook_parameter_problems(runbook, {"engine": "vllm"}) == []
        assert runbook_parameter_problems(runbook, {"engine": None}) == []
        (problem,) = runbook_parameter_problems(runbook, {"engine": "VLLM"})
        assert problem.startswith("engine must be None, 'sglang' or 'vllm'") and "'VLLM'" in problem


def test_absolutize_a_vllm_launch_resolves_model_and_draft_keeping_the_json(tmp_path):
    (tmp_path / "models" / "target").mkdir(parents=True)
    (tmp_path / "models" / "draft").mkdir(parents=True)
    launch = LaunchCommand.parse("vllm serve models/target --speculative-config "
                                 "'{\"method\": \"eagle3\", \"model\": \"models/draft\", \"num_speculative_tokens\": 3}'")
    with connect("local", state_dir=tmp_path / "state") as box:
        out = absolutize(box, launch, str(tmp_path))
    assert out.draft_model == str(tmp_path / "models" / "draft")
    assert out.speculative_method == "eagle3" and out.num_speculative_tokens == 3
    assert out.target_model == str(tmp_path / "models" / "target")


def test_vllm_sandbox_static_run_names_the_convention_and_the_probe_reading_decides(tmp_path, monkeypatch, free_port):
    """``engine="vllm"``, no server, no restarts: the inventory is vLLM's (the real vllm-cpu
    source located by its interpreter), the doctor's aux-id-convention warning makes the
    cross-engine hypothesis inconclusive (the shift is known, its cost is measured), and the
    ``target-capture-layers`` reading decides it: the layers the finding says vLLM feeds (1, 3, 6)
    confirm it; the ones the draft was trained on (2, 4, 7) would refute it."""
    require_vllm()
    from workbench.diagnosis.run import DiagnosisRun
    from workbench.diagnosis.steps.readings import probe_decides_cross_engine

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    run = DiagnosisRun.start(engine="vllm", port=free_port, allow_restart=False, report_dir=tmp_path / "reports")
    try:
        assert run.inventory.engine == "vllm" and run.inventory.engine_version == "0.32.0"
        assert run.inventory.server_pid is None and run.inventory.port == free_port
        assert len(run.prompts) > 0 and "def " in "".join(p["text"] for p in run.prompts)  # the sandbox's own prompts
        assert run.ceiling() == 4.0
        verdicts = {h: v for h, v, _ in run.check_hypotheses().rows}
        assert verdicts[CROSS_ENGINE_AUX] == "inconclusive"
        assert [h for h, v in verdicts.items() if v == "confirmed"] == []
        (finding,) = [f for f in run.findings if f.rule == "aux-id-convention"]
        assert finding.evidence["states_fed"]["value"] == [1, 3, 6]
        assert finding.evidence["proposed_ids"] == [2, 4, 7]
        assert run.derive_fixes() == []  # undecided: no fix yet (the doctor's ids are known: no candidate either)

        probe_decides_cross_engine(run.ctx, (6, 1, 3))  # as vLLM prints its sorted tuple, any order
        assert run.ledger.get(CROSS_ENGINE_AUX).verdict == "confirmed"
        assert CROSS_ENGINE_AUX in run.probe_confirmed
        evidence = run.ledger.get(CROSS_ENGINE_AUX).evidence[-1]
        assert evidence.data["captured_layers"] == [1, 3, 6] and evidence.data["states_trained"] == [2, 4, 7]
        # confirmed: its fix is a draft copy with the ids in vLLM's convention, top level and eagle_config
        fixes = run.derive_fixes()
        assert [(f.kind, f.rules) for f in fixes] == [("draft-copy", ("aux-id-convention",))]
        repair = fixes[0].repair.config
        assert repair["eagle_aux_hidden_state_layer_ids"] == [2, 4, 7]
        assert repair["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 7]
        assert repair["aux_layer_ids_convention"] == "vllm"
        # the other reading refutes (a fresh decision from inconclusive)
        run.ledger.decide(CROSS_ENGINE_AUX, "inconclusive")
        run.probe_confirmed.clear()
        probe_decides_cross_engine(run.ctx, [2, 4, 7])
        assert run.ledger.get(CROSS_ENGINE_AUX).verdict == "refuted" and not run.probe_confirmed
        assert run.probe() is None and run.apply_fixes() is None
    finally:
        verdict = run.finish()
    assert verdict["inventory"]["engine"] == "vllm" and verdict["restarts"] == 0 and verdict["launches"] == []
    assert json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())["restarts"] == 0


def test_inventory_rows_of_a_vllm_server_show_its_speculative_config():
    from workbench.session.inventory import Inventory

    launch = LaunchCommand.parse(sandbox_vllm_launch_command(port=8123))
    inv = Inventory(host="local", engine="vllm", engine_package="vllm", engine_version="0.32.0", engine_root=None,
                    python="python", launch=launch, port=8123, base_url="http://127.0.0.1:8123")
    rows = dict(inv.rows())
    assert rows["speculative method (--speculative-config)"] == "eagle3"
    assert rows["draft"] == str(sandbox_models_dir() / "draft") and rows["num_speculative_tokens"] == 3
    assert "speculative algorithm (resolved)" not in rows
    broken = Inventory(host="local", engine="vllm", engine_package="vllm", engine_version=None, engine_root=None,
                       python="python", launch=LaunchCommand.parse(VLLM + "'{oops'"), port=8000,
                       base_url="http://127.0.0.1:8000")
    assert dict(broken.rows())["--speculative-config"].startswith("unreadable: ")


def test_vllm_method_eagle_with_an_eagle3_draft_is_the_static_root_cause_with_a_launch_fix(tmp_path, monkeypatch,
                                                                                           free_port):
    """``"method": "eagle"`` with the sandbox's EAGLE-3 draft (vLLM refuses it at start-up): with no
    restarts allowed the doctor's ``method-draft-mismatch`` is the root cause, and the proposed
    command is the same ``--speculative-config`` with ``"method": "eagle3"`` (form kept, draft kept)."""
    require_vllm()
    from workbench.diagnosis.run import DiagnosisRun

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    wrong = sandbox_vllm_launch_command(port=free_port).replace('"method": "eagle3"', '"method": "eagle"')
    run = DiagnosisRun.start(launch_command=wrong, allow_restart=False, report_dir=tmp_path / "reports")
    try:
        assert run.inventory.engine == "vllm" and run.inventory.port == free_port
        assert run.measure_symptom() is None
        verdicts = {h: v for h, v, _ in run.check_hypotheses().rows}
        assert verdicts["engine-reads-draft"] == "confirmed"
    finally:
        verdict = run.finish()
    assert verdict["root_cause"]["rule"] == "method-draft-mismatch" and verdict["outcome"] == "cause-found"
    proposed = LaunchCommand.parse(verdict["fix"]["launch_command"])
    assert proposed.speculative_method == "eagle3" and proposed.draft_model == str(sandbox_models_dir() / "draft")
    assert proposed.num_speculative_tokens == 3 and verdict["fix"]["applied"] is False
    assert [d["flag"] for d in verdict["fix"]["diff"]] == ["--speculative-config"]
    assert verdict["restarts"] == 0 and verdict["launches"] == []


def test_sglang_code_rules_are_said_not_run_on_vllm(tmp_path, monkeypatch, free_port):
    """On vLLM the hypotheses whose every rule checks SGLang's code (the wrong --speculative-algorithm
    and its silent fc skip) are refuted as not applying, never as "its rules ran and found nothing"."""
    require_vllm()
    from workbench.diagnosis.run import DiagnosisRun
    from workbench.rules import REGISTRY

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    run = DiagnosisRun.start(engine="vllm", port=free_port, allow_restart=False, report_dir=tmp_path / "reports")
    try:
        rows = {h: (v, why) for h, v, why in run.check_hypotheses().rows}
    finally:
        run.finish()
    skipped = {r.id for r in REGISTRY.skipped_for("vllm")}
    assert "algorithm-mismatch" in skipped
    verdict, why = rows["algorithm-flag"]  # nothing measured (no restarts, no server): acceptance not known low
    assert verdict == "refuted" and "are not run on vLLM" in why and "ran and found" not in why
    import re

    for hid, (verdict, why) in rows.items():
        said_ran = re.search(r"its rules ran and found nothing \(([^)]*)\)", why)
        if said_ran:  # the rules named as run are rules that do run on vLLM
            assert not set(said_ran.group(1).split(", ")) & skipped, (hid, why)
    verdict, why = rows["spec-params"]  # mixed: vLLM's own rule runs, the SGLang-code ones named as not run
    ran, not_run = why.split("; not run on vllm: ")
    assert "vllm-model-missing" in ran and set(not_run.split(", ")) == \
        {r for r in ("spec-params-invalid", "launch-flag-unknown", "draft-path-missing", "model-path-missing")
         if r in skipped} != set()
    verdict, why = rows["config-vs-target"]  # every rule of the draft's config runs on vLLM now (issue 29)
    assert verdict == "refuted" and "not run on vllm" not in why and "unknown-draft-architecture" in why


def _vllm_fault_launch(tmp_path, fault: str, port: int) -> str:
    """The sandbox's vLLM launch of a faulty copy of its draft (``testkit.faults``), the draft's aux
    layer ids in vLLM's convention (recorded), so the fault is the only one."""
    from testkit.faults import build_deployment
    from workbench.rules.cross_engine import CONVENTION_KEY

    dep = build_deployment(tmp_path / "dep", fault, aux_ids=[2, 4, 7])
    path = dep.draft_dir / "config.json"
    cfg = json.loads(path.read_text())
    cfg[CONVENTION_KEY] = "vllm"
    path.unlink()
    path.write_text(json.dumps(cfg))
    return sandbox_vllm_launch_command(port=port, draft=str(dep.draft_dir)).replace(
        str(sandbox_models_dir() / "target"), str(dep.target_dir))


@pytest.mark.parametrize("fault, hypothesis, rule", [
    ("d2t-minus-arange", "token-map", "token-map-invalid"),
    ("aux-capture-off", "aux-capture-off", "aux-capture-disabled"),
    ("aux-ids-top-level-stale", "aux-eagle-config", "aux-ids-ignored"),
    ("target-no-capture-vllm", "target-capture", "target-no-aux-capture"),
])
def test_a_vllm_draft_fault_confirms_its_hypothesis_and_proposes_the_fix(tmp_path, monkeypatch, free_port, fault,
                                                                         hypothesis, rule):
    """On a vLLM launch (no server, no restarts) the vLLM reading of the rule confirms the fault's
    hypothesis, nothing else is confirmed, and its family's fix is a copy of the draft: d2t rebuilt
    from the t2d vLLM skips (offsets of the ids t2d marks), use_aux_hidden_state back to true, or the
    top-level ids vLLM reads replaced by eagle_config's (in the convention the draft records)."""
    require_vllm()
    import numpy as np
    from safetensors.numpy import load_file

    from workbench.diagnosis.run import DiagnosisRun

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    run = DiagnosisRun.start(launch_command=_vllm_fault_launch(tmp_path, fault, free_port), allow_restart=False,
                             report_dir=tmp_path / "reports")
    try:
        assert run.inventory.engine == "vllm"
        verdicts = {h: v for h, v, _ in run.check_hypotheses().rows}
        assert [h for h, v in verdicts.items() if v == "confirmed"] == [hypothesis]
        fixes = run.derive_fixes()
        if fault == "target-no-capture-vllm":  # nothing in the draft to repair: the engine's class decides
            assert [(f.kind, f.rules) for f in fixes] == [("none", (rule,))]
            assert "SupportsEagle3" in fixes[0].missing and "SolarForCausalLM" in fixes[0].missing
        else:
            assert [(f.kind, f.rules) for f in fixes] == [("draft-copy", (rule,))]
        repair = fixes[0].repair
        if fault == "target-no-capture-vllm":
            assert repair is None
        elif fault == "aux-ids-top-level-stale":  # eagle_config's ids, in the convention the draft records (vLLM's)
            assert repair.config == {"eagle_aux_hidden_state_layer_ids": [2, 4, 7]}
        elif fault == "d2t-minus-arange":
            t2d = load_file(str(tmp_path / "dep" / "draft" / "model.safetensors"))["t2d"]
            ids = np.flatnonzero(t2d)
            assert list(repair.tensors["d2t"].values) == [int(v) for v in ids - np.arange(len(ids))]
        else:
            assert repair.config["eagle_config"]["use_aux_hidden_state"] is True
            assert repair.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 7]
    finally:
        verdict = run.finish()
    assert verdict["restarts"] == 0 and verdict["launches"] == []


def test_a_fix_of_another_cause_does_not_refute_a_standing_aux_id_convention_finding(tmp_path, monkeypatch, free_port):
    """Trial 29 finding 1: on vLLM the prefix repair (weights-loaded's fix) measured 1.964 with
    nothing measured before (the server as found did not start). The cross-engine hypothesis,
    open on the doctor's real aux-id-convention warning (sandbox draft, ids in SGLang's
    convention), is NOT refuted by that measurement (it did not test the ids fix): it stays open
    with what decides it, the run is not ``fixed``, no "brought acceptance back" wording, and its
    own fix is the one measured on top (a draft copy with ids [2, 4, 7])."""
    require_vllm()
    from workbench.diagnosis.results import Measurement
    from workbench.diagnosis.run import DiagnosisRun
    from workbench.diagnosis.steps.fixes import judge_fix, standing_own_fixes
    from workbench.diagnosis.verdict import open_with_standing_finding, outcome, outcome_detail
    from workbench.measure.generate import AcceptanceMeasurement
    from workbench.rules.fix import Fix

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    run = DiagnosisRun.start(engine="vllm", port=free_port, allow_restart=False, report_dir=tmp_path / "reports")
    try:
        verdicts = {h: v for h, v, _ in run.check_hypotheses().rows}
        assert verdicts[CROSS_ENGINE_AUX] == "inconclusive"
        ctx = run.ctx
        # the state the trial's run reached: the weights fix applied, 1.964 measured, nothing before
        ctx.ledger.decide("weights-loaded", "confirmed")
        ctx.state.before = None
        ctx.state.fix.applied = [Fix("draft-copy", ("weights-dropped",), "strip the wrapper prefix")]
        gen = AcceptanceMeasurement(accept_length=1.964, accept_rate=None, mean_spec_accept_rate=None,
                                    verify_steps=250, total_tokens=491, wall_s=10.0, tokens_per_s=49.1,
                                    speculative=True, records=[])
        ctx.state.fix.after = Measurement("fix", "", gen, [], None)
        ctx.ledger.decide("aux-layer-ids", "inconclusive")  # open, with no finding of its own
        judge_fix(ctx)
        assert ctx.state.fix.result["sufficient"] is True and ctx.state.fix.result["before"] is None
        entry = ctx.ledger.get(CROSS_ENGINE_AUX)
        assert entry.verdict == "inconclusive", entry
        last = entry.evidence[-1].summary
        assert last.startswith("not decided:") and "aux-id-convention" in last and "back" not in last, last
        assert "back" not in ctx.ledger.get("weights-loaded").evidence[-1].summary
        assert open_with_standing_finding(ctx) == [CROSS_ENGINE_AUX]
        assert outcome(ctx) == "partly-fixed"
        assert CROSS_ENGINE_AUX in outcome_detail(ctx) and "no measurement tested its own fix" in outcome_detail(ctx)
        assert "brought acceptance back" not in run.summary_html()
        # its own fix, to measure on top of the applied one: the ids in vLLM's convention
        (own,) = standing_own_fixes(ctx)
        assert own.kind == "candidates" and own.rules == ("aux-id-convention",)
        assert own.candidates[0]["repair"].config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 7]
        # a hypothesis with no finding of its own is refuted by the sufficient fix, in words that
        # say nothing was measured before
        ids = ctx.ledger.get("aux-layer-ids")
        assert ids.verdict == "refuted" and "nothing was measured before it" in ids.evidence[-1].summary, ids
    finally:
        run.finish()
