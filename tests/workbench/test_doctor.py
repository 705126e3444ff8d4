"""The preflight doctor (``workbench.doctor``) on real files through the local box.

Every case is a deployment on disk: a target ``config.json`` built from the public model card's
facts, a real or report-derived draft ``config.json``, and a sparse ``model.safetensors`` whose
header carries the real tensor names and shapes (multi-GB shapes cost no disk). The engine
source is the real SGLang 0.5.23 package (``sglang_source``); version-dependent cases run again
on a copy of it with the relevant lines put back as older releases had them.
"""

from __future__ import annotations

import json
import re

import pytest

from rule_helpers import (
    DEEPSEEK_V3,
    GPT_OSS_20B,
    KIMI_K2,
    KIMI_K25,
    LLAMA31_8B,
    LLAMA3_8B,
    MISTRAL_LARGE,
    QWEN3_30B,
    by_rule,
    deploy,
    doctor,
    eagle1_spec,
    hf_cache,
    launch,
    serious,
    specforge_spec,
    token_map,
)
from workbench.doctor import run_doctor
from workbench.engine.launch import LaunchCommand
from workbench_test_helpers import fixture_config, public_report, write_sparse_safetensors


# ---------------------------------------------------------------------------------------------
# The ten public reports
# ---------------------------------------------------------------------------------------------


def test_pr21272_eagle_flag_with_eagle3_draft_via_hf_cache(box, tmp_path, sglang_source):
    report = public_report("sglang-pr21272-eagle-flag-with-eagle3-draft")
    assert "--speculative-algorithm EAGLE " in report["inputs"]["launch_command"]
    cfg = fixture_config("sgl-project__SpecForge__configs_kimi-k2-eagle3.json")
    cfg["max_position_embeddings"] = 262144  # a Kimi-K2.5 draft serves the K2.5 context
    target, draft = deploy(tmp_path, KIMI_K25, cfg)
    hf_cache(tmp_path / "hf", "moonshotai/Kimi-K2.5", target)
    hf_cache(tmp_path / "hf", "lightseekorg/kimi-k2.5-eagle3", draft)
    cmd = (f"HF_HOME={tmp_path / 'hf'} python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 "
           "--speculative-algorithm EAGLE --speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 --tp 8 "
           "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    rep = doctor(box, cmd, sglang_source)
    assert serious(rep) == [("algorithm-mismatch", "error")]
    f = by_rule(rep, "algorithm-mismatch")
    assert f.evidence["fc_in_features"]["value"] == 3 * 7168
    assert f.evidence["target_hidden_size"]["value"] == 7168  # text_config of the multimodal target
    assert "snapshots/0123abcd" in f.evidence["target_hidden_size"]["source"]
    assert rep.corrected_launch() == LaunchCommand.parse(cmd).with_flag("--speculative-algorithm", "EAGLE3").to_string()
    assert rep.exit_code == 1
    fixed = doctor(box, rep.corrected_launch(), sglang_source)
    assert serious(fixed) == []
    # Kimi-K2.5 delegates capture to DeepseekV3 (+1 only when ids[0] == 1): [2, 30, 58] as written.
    assert "aux-layer-offset-convention" not in fixed.rules


def test_eagle214_eagle1_draft_launched_as_eagle3(box, tmp_path, sglang_source):
    assert public_report("eagle-214-eagle1-config-used-for-eagle3")["inputs"]["draft_config"]["architectures"] == [
        "LlamaForCausalLM"]
    cfg = fixture_config("SafeAILab__EAGLE__eagle_train_EAGLE-LLaMA3-Instruct-8B.json")
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg, eagle1_spec(4096, 32, 8, 14336, 128256))
    rep = doctor(box, launch(target, draft, "EAGLE3"), sglang_source)
    # fc takes 2 × 4096, EAGLE3 feeds 3 × 4096: the aux count disagrees too.
    assert serious(rep) == [("algorithm-mismatch", "error"), ("aux-count-mismatch", "error"),
                            ("context-length-mismatch", "warning"), ("unknown-draft-architecture", "error")]
    assert by_rule(rep, "algorithm-mismatch").evidence["fc_in_features / draft_hidden_size"] == 2.0
    unknown = by_rule(rep, "unknown-draft-architecture")
    assert "LlamaForCausalLMEagle3" in unknown.evidence["registered_draft_classes"]["value"]
    # consequences of the algorithm finding: no relabel to an EAGLE-3 class (its fc is 2× wide), no
    # eagle_config ids to write
    assert unknown.evidence["consequence_of"] == "algorithm-mismatch"
    assert "proposed_architecture" not in unknown.evidence and "LlamaForCausalLMEagle3\"]" not in unknown.fix
    assert by_rule(rep, "aux-count-mismatch").evidence["consequence_of"] == "algorithm-mismatch"
    assert "aux-config-unread" not in rep.rules
    from workbench.doctor.run import gather_facts
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.aux_layers import aux_fixes
    from workbench.rules.configs import config_fixes

    facts = gather_facts(box, LaunchCommand.parse(launch(target, draft, "EAGLE3")), engine_root=str(sglang_source),
                         engine_version="0.5.23")
    assert config_fixes(facts, [unknown], {}) == []
    assert aux_fixes(facts, rep.findings, {}) == []


# ---------------------------------------------------------------------------------------------
# Real configs against the targets they were made for
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, target, extra, expect", [
    ("sgl-project__SpecForge__configs_kimi-k2-eagle3.json", KIMI_K2, "", []),
    ("sgl-project__SpecForge__configs_deepseek-v3-671b-eagle3.json", DEEPSEEK_V3, "", []),
    # SpecForge trained it on 2048-token samples: served at that context it is healthy.
    ("sgl-project__SpecForge__configs_qwen3-30B-eagle3.json", QWEN3_30B, "--context-length 2048", []),
    ("sgl-project__SpecForge__configs_qwen3-30B-eagle3.json", QWEN3_30B, "", [("context-length-mismatch", "warning")]),
    # SGLang 0.5.23 registers no GptOssForCausalLMEagle3 (SpecForge's training class): a real finding.
    ("sgl-project__SpecForge__configs_gpt-oss-20B-eagle3.json", GPT_OSS_20B, "--context-length 4096",
     [("unknown-draft-architecture", "error")]),
])
def test_real_eagle3_configs(box, tmp_path, sglang_source, name, target, extra, expect):
    cfg = fixture_config(name)
    t, d = deploy(tmp_path, target, cfg)
    rep = doctor(box, launch(t, d, extra=extra), sglang_source)
    assert serious(rep) == expect, rep.to_text()
    if not expect:
        assert rep.exit_code == 0


def test_real_gpt_oss_config_with_the_engine_class_is_healthy(box, tmp_path, sglang_source):
    cfg = fixture_config("sgl-project__SpecForge__configs_gpt-oss-20B-eagle3.json")
    cfg["architectures"] = ["LlamaForCausalLMEagle3"]
    t, d = deploy(tmp_path, GPT_OSS_20B, cfg)
    rep = doctor(box, launch(t, d, extra="--context-length 4096"), sglang_source)
    assert serious(rep) == []
    f = by_rule(rep, "aux-layer-offset-convention")  # gpt_oss.py: +1 unless max(ids) == num_layers
    assert f.evidence["captured_layers"]["value"] == [2, 12, 22]


def test_real_eagle1_config_needs_the_engine_eagle_class(box, tmp_path, sglang_source):
    cfg = fixture_config("SafeAILab__EAGLE__eagle_train_EAGLE-LLaMA3-Instruct-8B.json")
    spec = eagle1_spec(4096, 32, 8, 14336, 128256)
    t, d = deploy(tmp_path, LLAMA3_8B, cfg, spec)
    rep = doctor(box, launch(t, d, "EAGLE", extra="--context-length 2048"), sglang_source)
    assert serious(rep) == [("unknown-draft-architecture", "error")]
    assert 'LlamaForCausalLMEagle"]' in by_rule(rep, "unknown-draft-architecture").fix
    cfg["architectures"] = ["LlamaForCausalLMEagle"]
    t, d = deploy(tmp_path, LLAMA3_8B, cfg, spec, name="fixed")
    assert serious(doctor(box, launch(t, d, "EAGLE", extra="--context-length 2048"), sglang_source)) == []


def test_real_speculators_config_is_not_read_by_sglang(box, tmp_path, sglang_source):
    cfg = fixture_config("vllm-project__speculators__issues_796_comment-config.json")
    h = cfg["transformer_layer_config"]["hidden_size"]
    spec = {"fc.weight": ("BF16", (h, 3 * h)), "d2t": ("I64", (32000,)), "t2d": ("BOOL", (32768,))}
    t, d = deploy(tmp_path, MISTRAL_LARGE, cfg, spec)
    rep = doctor(box, launch(t, d), sglang_source)
    # SGLang 0.5.23 reads neither the speculators format nor a top-level id list, and its
    # Mistral3ForConditionalGeneration (mistral.py, a LlavaForConditionalGeneration) has no
    # set_eagle3_layers_to_capture: all real findings for that engine (draft-format-unread names
    # the layout SGLang has no reader for: no "speculators" anywhere under its srt/).
    assert serious(rep) == [("aux-config-unread", "warning"), ("draft-format-unread", "error"),
                            ("target-no-aux-capture", "error"), ("unknown-draft-architecture", "error")], rep.to_text()
    f = by_rule(rep, "aux-config-unread")
    assert f.evidence["eagle_aux_hidden_state_layer_ids (top level)"]["value"] == [2, 44, 85]
    assert "[2, 44, 85]" in f.fix


# ---------------------------------------------------------------------------------------------
# The sandbox box, other rules, bad inputs
# ---------------------------------------------------------------------------------------------


def test_sandbox_eagle3_healthy_and_eagle_flag_caught(box):
    from workbench.sandbox_box import sandbox_launch_command

    good = run_doctor(box, sandbox_launch_command(algorithm="EAGLE3"))
    assert serious(good) == [] and good.engine_version == "0.5.23+sandbox"
    assert sorted(good.rules) == ["aux-layer-offset-convention", "swallowed-config-error"]
    sw = by_rule(good, "swallowed-config-error")
    assert re.search(r"spec_aux_hidden_state\.py:\d+$", sw.evidence["source"]["value"])
    bad = run_doctor(box, sandbox_launch_command(algorithm="EAGLE"))
    assert serious(bad) == [("algorithm-mismatch", "error")]
    assert LaunchCommand.parse(bad.corrected_launch()).get("--speculative-algorithm") == "EAGLE3"


def test_sharded_draft_index_and_bytes_read(box, tmp_path, sglang_source):
    cfg = fixture_config("sgl-project__SpecForge__configs_kimi-k2-eagle3.json")
    spec = specforge_spec(cfg)
    t, d = deploy(tmp_path, KIMI_K2, cfg, {})
    (d / "model.safetensors").unlink()
    names = list(spec)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    d2t, t2d = token_map(cfg["vocab_size"], cfg["draft_vocab_size"])
    for fname, part in halves.items():
        write_sparse_safetensors(d / fname, {n: spec[n] for n in part},
                                 data={k: v for k, v in {"d2t": d2t, "t2d": t2d}.items() if k in part})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f for f, part in halves.items() for n in part}}))
    rep = doctor(box, launch(t, d), sglang_source)
    assert serious(rep) == []
    sizes = sum((d / f).stat().st_size for f in halves)
    assert sizes > 2_000_000_000 and rep.bytes_read < 1_000_000




def test_relabel_proposed_only_when_the_tensors_fit_the_class(box, tmp_path, sglang_source):
    # SpecForge's gpt-oss class name with SpecForge's Llama-layout tensors: they load into
    # LlamaForCausalLMEagle3, so the relabel is the fix
    cfg = fixture_config("sgl-project__SpecForge__configs_gpt-oss-20B-eagle3.json")
    t, d = deploy(tmp_path, GPT_OSS_20B, cfg)
    f = by_rule(doctor(box, launch(t, d, extra="--context-length 4096"), sglang_source), "unknown-draft-architecture")
    assert f.evidence["proposed_architecture"] == "LlamaForCausalLMEagle3"
    assert "tensors_that_do_not_fit" not in f.evidence
    assert f.fix == f'set "architectures": ["LlamaForCausalLMEagle3"] in {d}/config.json'
    assert "the engine builds GptOssForCausalLMEagle3" not in f.message
    assert "GptOssForCausalLMEagle3 is not registered by this release" in f.message
