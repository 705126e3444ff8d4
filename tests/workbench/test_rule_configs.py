"""Rules of the configs family (workbench/rules/configs.py)."""

from __future__ import annotations

import json

import pytest

from rule_helpers import (
    LLAMA31_8B,
    LLAMA33_70B,
    LLAMA3_8B,
    QWEN3_14B,
    QWEN3_8B,
    QWEN3_30B,
    by_rule,
    deploy,
    doctor,
    draft_cfg,
    facts_of,
    launch,
    sandbox_deployment,
    serious,
    specforge_spec,
)
from workbench.rules.configs import config_fixes
from workbench.rules.weights import weight_fixes
from workbench.doctor import run_doctor
from workbench.engine.launch import LaunchCommand
from workbench_test_helpers import fixture_config, public_report


def test_sglang7011_target_hidden_size_differs_from_draft_hidden(box, tmp_path, sglang_source):
    assert "target_hidden_size" in public_report("sglang-7011-draft-extend-cuda-graph-target-hidden-size")["inputs"][
        "draft_config"]
    cfg = draft_cfg(hidden_size=6144, target_hidden_size=8192, num_attention_heads=48, intermediate_size=16384,
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 39, 76]})
    spec = specforge_spec(cfg)
    # llama.py set_embed keeps the draft's own embedding when target_hidden_size ≠ hidden_size.
    spec["embed_tokens.weight"] = ("BF16", (128256, 6144))
    target, draft = deploy(tmp_path, LLAMA33_70B, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_source)
    # 0.5.23 sizes its buffers from target_hidden_size (PR #8163): a differing draft width is no fault.
    assert serious(rep) == []
    wrong = deploy(tmp_path, LLAMA3_8B | {"max_position_embeddings": 131072, "rope_scaling": cfg["rope_scaling"]},
                   cfg, spec, name="wrong-target")
    rep = doctor(box, launch(*wrong), sglang_source)
    assert ("hidden-size-mismatch", "error") in serious(rep)
    f = by_rule(rep, "hidden-size-mismatch")
    assert (f.evidence["draft_target_hidden_size"]["value"], f.evidence["target_hidden_size"]["value"]) == (8192, 4096)


def test_a_wrong_target_hidden_size_beside_an_fc_of_the_targets_width_blames_the_config(box, tmp_path, sglang_source):
    """fc.weight is 3 × the target's 4096 but the config says target_hidden_size 5120: the draft
    was trained on this target, its config is wrong (one finding; the aux count is right)."""
    cfg = draft_cfg(hidden_size=4096, target_hidden_size=4096,
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = specforge_spec(cfg)
    assert spec["fc.weight"][1] == (4096, 3 * 4096)
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg | {"target_hidden_size": 5120}, spec)
    rep = doctor(box, launch(target, draft), sglang_source)
    assert [r for r, _ in serious(rep) if r.startswith(("hidden-size", "aux-count"))] == ["hidden-size-mismatch"]
    f = by_rule(rep, "hidden-size-mismatch")
    assert f.evidence["fc_in_features"]["value"] == 12288 and f.evidence["num_aux"]["value"] == 3
    assert "config is wrong" in f.message and "3 × 5120 = 15360" in f.message
    assert f.fix == "set target_hidden_size to 4096 in the draft's config"
    # The same config with an fc of another width: the draft was trained for another target.
    spec["fc.weight"] = ("BF16", (4096, 3 * 5120))
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg | {"target_hidden_size": 5120}, spec, name="other")
    f = by_rule(doctor(box, launch(target, draft), sglang_source), "hidden-size-mismatch")
    assert "trained for another target" in f.message and "fc_in_features" not in f.evidence


def test_sglang9135_qwen3_architecture_on_a_midlayer_checkpoint(box, tmp_path, sglang_source):
    quoted = public_report("sglang-9135-draft-arch-qwen3-midlayer-keyerror")["inputs"]["draft_config"]
    cfg = draft_cfg(architectures=["Qwen3ForCausalLM"], hidden_size=quoted["hidden_size"], num_attention_heads=40,
                    head_dim=128, intermediate_size=quoted["intermediate_size"], vocab_size=151936,
                    max_position_embeddings=quoted["max_position_embeddings"], rope_theta=1000000.0, rope_scaling=None)
    target, draft = deploy(tmp_path, QWEN3_14B, cfg)
    rep = doctor(box, launch(target, draft), sglang_source)
    assert serious(rep) == [("unknown-draft-architecture", "error")]
    f = by_rule(rep, "unknown-draft-architecture")
    assert "LlamaForCausalLMEagle3" in f.fix and "midlayer.hidden_norm.weight" in f.evidence["eagle_tensors"]


def test_specforge271_draft_context_2048_on_a_40960_target(box, tmp_path, sglang_source):
    report = public_report("specforge-pr271-draft-max-position-embeddings-2048")
    cfg = draft_cfg(hidden_size=4096, vocab_size=151936, rope_theta=1000000.0, rope_scaling=None,
                    max_position_embeddings=report["inputs"]["draft_config"]["max_position_embeddings"])
    target, draft = deploy(tmp_path, QWEN3_8B, cfg)
    # The report's --cuda-graph-max-bs is ambiguous in 0.5.23 (…-decode / …-prefill): the decode one here.
    cmd = LaunchCommand.parse(report["inputs"]["launch_command"].replace("<TARGET_QWEN3_8B>", str(target))
                              .replace("--cuda-graph-max-bs ", "--cuda-graph-max-bs-decode ")
                              .replace("<DRAFT>", str(draft)).replace("<HOST>", "127.0.0.1"))
    rep = doctor(box, cmd, sglang_source)
    assert serious(rep) == [("context-length-mismatch", "warning")]
    f = by_rule(rep, "context-length-mismatch")
    assert (f.evidence["draft_max_position_embeddings"]["value"], f.evidence["served_context"]["value"]) == (2048, 40960)
    assert serious(doctor(box, cmd.with_flag("--context-length", 2048), sglang_source)) == []


def test_vocab_and_aux_count_and_rope_rules(box, tmp_path, sglang_source):
    cfg = draft_cfg(vocab_size=128000, num_aux_hidden_states=2, rope_theta=10000, rope_scaling=None,
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = specforge_spec(draft_cfg(vocab_size=128000, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}))
    t, d = deploy(tmp_path, LLAMA31_8B, cfg, spec)
    rep = doctor(box, launch(t, d), sglang_source)
    assert ("vocab-size-mismatch", "error") in serious(rep) and ("aux-count-mismatch", "error") in serious(rep)
    r = by_rule(rep, "rope-mismatch")
    assert (r.evidence["draft_rope_theta"]["value"], r.evidence["target_rope_theta"]["value"]) == (10000.0, 500000.0)
    assert r.evidence["target_rope_scaling_type"]["value"] == "llama3"


def test_rope_compares_by_value_and_type_equals_rope_type(box, tmp_path, sglang_source):
    cfg = draft_cfg(rope_theta=500000, rope_scaling={"type": "llama3", "factor": 8.0},
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    assert "rope-mismatch" not in doctor(box, launch(t, d), sglang_source).rules


@pytest.mark.parametrize("value", [[1], 5, None, [None], {"name": "x"}])
@pytest.mark.parametrize("algo", ["EAGLE", "EAGLE3"])
def test_a_bogus_architectures_value_is_a_finding_never_a_failed_rule(box, tmp_path, algo, value):
    """``architectures`` that is no list of names (a trial's [1], 5, null...): SGLang would fail to
    build ``architectures[0]``; the doctor says so (unknown-draft-architecture; under EAGLE also
    the algorithm mismatch the checkpoint shows) and no rule fails on it."""
    import shutil

    from workbench.sandbox_box import sandbox_launch_command, sandbox_models_dir

    for name in ("target", "draft"):
        shutil.copytree(sandbox_models_dir() / name, tmp_path / name)
    cfg_path = tmp_path / "draft" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["architectures"] = value
    cfg_path.write_text(json.dumps(cfg))
    cmd = LaunchCommand.parse(sandbox_launch_command(algorithm=algo)) \
        .with_flag("--model-path", str(tmp_path / "target")) \
        .with_flag("--speculative-draft-model-path", str(tmp_path / "draft"))
    report = run_doctor(box, cmd)
    assert report.rule_failures == [] and not any("could not run" in n for n in report.notes)
    assert "unknown-draft-architecture" in report.rules and report.exit_code == 1
    assert ("algorithm-mismatch" in report.rules) == (algo == "EAGLE")


WEIGHT_RULES = {"weights-dropped", "weights-missing", "weight-shape-mismatch", "lm-head-shape-mismatch",
                "head-dim-mismatch"}


def test_a_hidden_size_its_own_tensors_contradict_is_the_root_cause(box, tmp_path, sglang_source):
    """A trial's draft with ``hidden_size`` 128 where every tensor is 160 wide: transformers refuses
    the config (128 is no multiple of 5 heads) and the shapes the engine would build all differ.
    The config finding is the cause; the 13 shape findings and the embed_tokens the wrong
    hidden_size makes required are its consequences, each under a weight rule of its own."""
    cmd = sandbox_deployment(tmp_path, hidden_size=128)
    report = doctor(box, cmd, sglang_source)
    assert report.rule_failures == []
    f = by_rule(report, "draft-config-vs-tensors")
    assert f.severity == "error"
    assert f.evidence["fields"]["hidden_size"]["config"] == 128 and f.evidence["fields"]["hidden_size"]["tensors"] == 160
    assert "The hidden size (128) is not a multiple of the number of attention heads (5)" in f.message
    assert "hidden-size-mismatch" not in report.rules
    weights = [g for g in report.findings if g.rule in WEIGHT_RULES]
    assert sorted({g.rule for g in weights}) == ["lm-head-shape-mismatch", "weight-shape-mismatch", "weights-missing"]
    assert len([g for g in weights if g.rule == "weight-shape-mismatch"]) == 12
    assert by_rule(report, "weights-missing").evidence["missing"] == ["model.embed_tokens.weight"]
    assert all(g.evidence["consequence_of"] == "draft-config-vs-tensors" for g in weights)
    facts = facts_of(box, cmd, sglang_source)
    (fix,) = config_fixes(facts, report.findings, {})
    assert fix.kind == "draft-copy" and fix.repair.config == {"hidden_size": 160}
    assert weight_fixes(facts, report.findings, {}) == []  # the config fix covers them


def test_num_hidden_layers_beyond_the_checkpoints_layers_is_derivable(box, tmp_path, sglang_source):
    """``num_hidden_layers: 2`` on a one-layer draft: the engine builds and runs a second layer no
    tensor fills (its 7 parameters keep their initial values); the fix is the count the tensors have."""
    cmd = sandbox_deployment(tmp_path, num_hidden_layers=2)
    report = doctor(box, cmd, sglang_source)
    assert serious(report) == [("draft-config-vs-tensors", "error"), ("weights-missing", "error")]
    f = by_rule(report, "draft-config-vs-tensors")
    assert f.evidence["fields"]["num_hidden_layers"] == {"config": 2, "tensors": 1, "key": "num_hidden_layers",
                                                         "from": f.evidence["fields"]["num_hidden_layers"]["from"]}
    assert "layers [1] get no tensor and keep their initial values" in f.message
    missing = by_rule(report, "weights-missing")
    assert len(missing.evidence["missing"]) == 7 and missing.evidence["consequence_of"] == "draft-config-vs-tensors"
    (fix,) = config_fixes(facts_of(box, cmd, sglang_source), report.findings, {})
    assert fix.repair.config == {"num_hidden_layers": 1}


def test_intermediate_size_and_kv_heads_from_a_public_config_are_read_off_the_tensors(box, tmp_path, sglang_source):
    """SpecForge's Qwen3-30B draft (head_dim 128 given): a config whose intermediate_size and
    num_key_value_heads disagree with tensors exported from the real config."""
    real = fixture_config("sgl-project__SpecForge__configs_qwen3-30B-eagle3.json")
    wrong = {**real, "intermediate_size": 4096, "num_key_value_heads": 8}
    t, d = deploy(tmp_path, QWEN3_30B, wrong, specforge_spec(real))
    report = doctor(box, launch(t, d), sglang_source)
    f = by_rule(report, "draft-config-vs-tensors")
    assert {k: (v["config"], v["tensors"]) for k, v in f.evidence["fields"].items()} == {
        "intermediate_size": (4096, 6144), "num_key_value_heads": (8, 4)}
    assert all(g.evidence.get("consequence_of") == "draft-config-vs-tensors"
               for g in report.findings if g.rule in WEIGHT_RULES)
    (fix,) = config_fixes(facts_of(box, launch(t, d), sglang_source), report.findings, {})
    assert fix.repair.config == {"intermediate_size": 6144, "num_key_value_heads": 4}
    # the real config against the same tensors: nothing to say
    t2, d2 = deploy(tmp_path, QWEN3_30B, real, name="ok")
    assert "draft-config-vs-tensors" not in doctor(box, launch(t2, d2), sglang_source).rules


def test_context_length_mismatch_on_vllm_reads_max_model_len():
    """On vLLM the served length is --max-model-len (vLLM 0.32.0 then raises the draft's
    max_position_embeddings, config/speculative.py); a 2048 draft served at 8192 still warns, at 512 not."""
    from workbench.checkpoint.facts import draft_facts_from, target_facts_from
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.configs import context_length_mismatch
    from workbench.rules.facts import Facts

    draft = draft_facts_from("/d", "/d/config.json", {"architectures": ["LlamaForCausalLMEagle3"],
                                                      "max_position_embeddings": 2048})
    target = target_facts_from("/t", "/t/config.json", {"architectures": ["LlamaForCausalLM"],
                                                         "max_position_embeddings": 131072})
    spec = "--speculative-config '{\"method\": \"eagle3\", \"model\": \"/d\"}'"
    long = Facts.of(LaunchCommand.parse(f"vllm serve /t --max-model-len 8192 {spec}"), draft=draft, target=target)
    [f] = context_length_mismatch(long)
    assert f.rule == "context-length-mismatch" and f.evidence["served_context"] == {"value": 8192, "source": "launch command: --max-model-len"}
    short = Facts.of(LaunchCommand.parse(f"vllm serve /t --max-model-len 512 {spec}"), draft=draft, target=target)
    assert context_length_mismatch(short) == []
    default = Facts.of(LaunchCommand.parse(f"vllm serve /t {spec}"), draft=draft, target=target)
    assert context_length_mismatch(default)[0].evidence["served_context"]["value"] == 131072
    assert "--max-model-len 2048" in context_length_mismatch(default)[0].fix
