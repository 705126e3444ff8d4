"""The preflight doctor (``workbench.doctor``) on real files through the local box.

Every case is a deployment on disk: a target ``config.json`` built from the public model card's
facts, a real or report-derived draft ``config.json``, and a sparse ``model.safetensors`` whose
header carries the real tensor names and shapes (multi-GB shapes cost no disk). The engine
source is the real SGLang 0.5.23 package (``sglang_source``); version-dependent cases run again
on a copy of it with the relevant lines put back as older releases had them.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import struct

import numpy as np
import pytest

from test_draft_checks import specforge_spec, token_map
from workbench.doctor import DoctorReport, run_doctor
from workbench.rules.runtime import acceptance_collapsed
from workbench.rules import Facts
from workbench.rules.launch_flags import spec_params_invalid
from workbench.engine.launch import LaunchCommand
from workbench_test_helpers import fixture_config, public_report, write_raw, write_sparse_safetensors

# Public model-card facts of the targets: (architectures, hidden, layers, vocab, max positions, rope theta).
KIMI_K25 = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
            "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
                            "vocab_size": 163840, "max_position_embeddings": 262144, "rope_theta": 50000.0}}
KIMI_K2 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
           "vocab_size": 163840, "max_position_embeddings": 131072, "rope_theta": 50000.0}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
               "vocab_size": 129280, "max_position_embeddings": 163840, "rope_theta": 10000}
LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
             "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0}
LLAMA31_8B = {**LLAMA3_8B, "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
LLAMA33_70B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "num_hidden_layers": 80,
               "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
GPT_OSS_20B = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "num_hidden_layers": 24,
               "vocab_size": 201088, "max_position_embeddings": 131072, "rope_theta": 150000}
GPT_OSS_120B = {**GPT_OSS_20B, "num_hidden_layers": 36}
QWEN3_30B = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
             "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0}
QWEN3_14B = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 40,
             "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0}
QWEN3_8B = {**QWEN3_14B, "hidden_size": 4096, "num_hidden_layers": 36}
# The verifier of the speculators config (a private Mistral 123B): its facts as the speculators
# export copied them into transformer_layer_config (hidden, vocab, context), 88 layers.
MISTRAL_LARGE = {"architectures": ["Mistral3ForConditionalGeneration"],
                 "text_config": {"hidden_size": 12288, "num_hidden_layers": 88, "vocab_size": 131072,
                                 "max_position_embeddings": 32768, "rope_theta": 1000000.0}}


def draft_cfg(**over) -> dict:
    """A SpecForge-style LlamaForCausalLMEagle3 config; ``over`` replaces keys (``None`` removes)."""
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
           "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 131072,
           "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
           "tie_word_embeddings": False}
    for k, v in over.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def deploy(root: pathlib.Path, target: dict, draft: dict, spec: dict | None = None, *, token_map_data: bool = True,
           name: str = "d") -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``root/name/{target,draft}``: configs and a sparse draft checkpoint (SpecForge's
    names and shapes for ``draft`` unless ``spec`` is given; a valid d2t/t2d when it has them)."""
    base = root / name
    (base / "target").mkdir(parents=True, exist_ok=True)
    (base / "draft").mkdir(parents=True, exist_ok=True)
    (base / "target" / "config.json").write_text(json.dumps(target))
    (base / "draft" / "config.json").write_text(json.dumps(draft))
    spec = specforge_spec(draft) if spec is None else spec
    data = {}
    if token_map_data and "d2t" in spec and "t2d" in spec:
        data["d2t"], data["t2d"] = token_map(spec["t2d"][1][0], spec["d2t"][1][0])
    write_sparse_safetensors(base / "draft" / "model.safetensors", spec, data=data)
    return base / "target", base / "draft"


def launch(target, draft, algo="EAGLE3", extra="") -> str:
    return (f"python -m sglang.launch_server --model-path {target} --speculative-algorithm {algo} "
            f"--speculative-draft-model-path {draft} --speculative-num-steps 3 --speculative-eagle-topk 1 "
            f"--speculative-num-draft-tokens 4 --tp 8 {extra}").strip()


def doctor(box, cmd, engine, version="0.5.23") -> DoctorReport:
    return run_doctor(box, cmd, engine_root=str(engine), engine_version=version)


def serious(report: DoctorReport) -> list[tuple[str, str]]:
    return sorted((f.rule, f.severity) for f in report.findings if f.severity != "info")


def by_rule(report: DoctorReport, rule: str):
    hits = [f for f in report.findings if f.rule == rule]
    assert hits, f"{rule} not in {report.rules}"
    return hits[0]


@pytest.fixture(scope="module")
def older_engine(sglang_source, tmp_path_factory):
    """A copy of the SGLang 0.5.23 files the rules read, with what older releases lacked put back:
    ``gpt_oss.py`` adding +1 to every explicit id and never capturing the final boundary (before
    PR #32334), ``deepseek_v2.py`` adding +1 unconditionally (before PR #25454), and
    ``llama_eagle3.py`` without ``norm_before_fc``."""
    root = tmp_path_factory.mktemp("sglang-old") / "sglang"
    for rel in ("srt/models/llama.py", "srt/models/llama_eagle3.py", "srt/models/llama_eagle.py",
                "srt/models/gpt_oss.py", "srt/models/deepseek_v2.py", "srt/models/kimi_k25.py",
                "srt/models/kimi_k25_eagle3.py", "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sglang_source / rel, root / rel)
    gpt = (root / "srt/models/gpt_oss.py").read_text()
    gpt = gpt.replace("if layer_ids and max(layer_ids) == num_layers:", "if False:")
    gpt = re.sub(r"self\.end_layer in self\.layers_to_capture", "False", gpt)
    (root / "srt/models/gpt_oss.py").write_text(gpt)
    ds = (root / "srt/models/deepseek_v2.py").read_text()
    assert "if layer_ids and layer_ids[0] == 1:" in ds
    (root / "srt/models/deepseek_v2.py").write_text(ds.replace("if layer_ids and layer_ids[0] == 1:", "if True:"))
    le = (root / "srt/models/llama_eagle3.py").read_text()
    le = le.replace('"norm_before_fc"', '"_removed_"').replace("config, \"norm_before_fc\"", "config, \"_removed_\"")
    assert "norm_before_fc\"" not in le
    (root / "srt/models/llama_eagle3.py").write_text(le)
    return root


# ---------------------------------------------------------------------------------------------
# The ten public reports
# ---------------------------------------------------------------------------------------------


def hf_cache(root: pathlib.Path, repo: str, files: pathlib.Path, rev: str = "0123abcd") -> None:
    """Lay ``files`` (a model dir) out as huggingface_hub's cache under ``root/hub``."""
    repo_dir = root / "hub" / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(rev)
    snap = repo_dir / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in files.iterdir():  # the hub's snapshots are symlinks into blobs/
        (snap / f.name).symlink_to(f)


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


def test_hf_repo_not_in_cache_is_a_finding(box, tmp_path, sglang_source):
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    cmd = (f"HF_HOME={tmp_path / 'hf'} python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 "
           "--speculative-algorithm EAGLE3 --speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3")
    rep = doctor(box, cmd, sglang_source)
    assert serious(rep) == [("model-not-on-box", "warning")] * 2
    assert "models--moonshotai--Kimi-K2.5 missing" in rep.findings[0].message


def eagle1_spec(h: int, heads: int, kv: int, inter: int, vocab: int) -> dict:
    hd = h // heads
    return {"fc.weight": ("F16", (h, 2 * h)), "layers.0.self_attn.q_proj.weight": ("F16", (heads * hd, h)),
            "layers.0.self_attn.k_proj.weight": ("F16", (kv * hd, h)),
            "layers.0.self_attn.v_proj.weight": ("F16", (kv * hd, h)),
            "layers.0.self_attn.o_proj.weight": ("F16", (h, heads * hd)),
            "layers.0.mlp.gate_proj.weight": ("F16", (inter, h)), "layers.0.mlp.up_proj.weight": ("F16", (inter, h)),
            "layers.0.mlp.down_proj.weight": ("F16", (h, inter)),
            "layers.0.post_attention_layernorm.weight": ("F16", (h,))}


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
    assert "LlamaForCausalLMEagle3" in by_rule(rep, "unknown-draft-architecture").evidence[
        "registered_draft_classes"]["value"]


def test_sglang32226_gptoss_final_boundary_and_norm_before_fc(box, tmp_path, sglang_source, older_engine):
    inputs = public_report("sglang-32226-gptoss-eagle3-v3-aux-ids-norm-before-fc")["inputs"]["draft_config"]
    cfg = draft_cfg(hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                    intermediate_size=17280, vocab_size=201088, rope_theta=150000, rope_scaling=None,
                    norm_before_fc=inputs["norm_before_fc"],
                    eagle_config={"eagle_aux_hidden_state_layer_ids": inputs["eagle_aux_hidden_state_layer_ids"]})
    spec = specforge_spec(cfg)
    spec["input_norm.weight"] = ("BF16", (3 * 2880,))
    target, draft = deploy(tmp_path, GPT_OSS_120B, cfg, spec)
    old = doctor(box, launch(target, draft), older_engine, "0.5.0")
    assert serious(old) == [("aux-layer-ids-out-of-range", "error"), ("norm-flags-unsupported", "warning")]
    f = by_rule(old, "aux-layer-ids-out-of-range")
    assert f.evidence["captured_layers"]["value"] == [25, 31, 37] and f.evidence["reachable_max"] == 35
    assert "gpt_oss.py:" in f.evidence["captured_layers"]["source"]
    assert by_rule(old, "norm-flags-unsupported").evidence["norm_before_fc"]["value"] is True
    # SGLang 0.5.23 keeps ids that include the final boundary and reads norm_before_fc.
    new = doctor(box, launch(target, draft), sglang_source)
    assert serious(new) == []
    assert "aux-layer-offset-convention" not in new.rules


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


def test_pr25454_aux_offset_convention_depends_on_engine_version(box, tmp_path, sglang_source, older_engine):
    ids = public_report("sglang-pr25454-aux-layer-id-offset-convention")["inputs"]["other"][
        "convention_examples_from_real_configs"]["first_id_2"]
    assert ids.endswith("[2, 30, 58]")
    cfg = fixture_config("sgl-project__SpecForge__configs_kimi-k2-eagle3.json")
    cfg["max_position_embeddings"] = 262144  # a Kimi-K2.5 draft serves the K2.5 context
    target, draft = deploy(tmp_path, KIMI_K25, cfg)
    new = doctor(box, launch(target, draft), sglang_source)
    assert "aux-layer-offset-convention" not in new.rules and serious(new) == []
    old = doctor(box, launch(target, draft), older_engine, "0.5.10")
    f = by_rule(old, "aux-layer-offset-convention")
    assert f.severity == "info"
    assert f.evidence["captured_layers"]["value"] == [3, 31, 59]
    assert "kimi_k25.py" in f.evidence["captured_layers"]["source"] and "deepseek_v2.py" in f.evidence[
        "captured_layers"]["source"]


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


def test_speculators74_lm_head_with_target_vocab_rows(box, tmp_path, sglang_source):
    dc = public_report("speculators-pr74-lm-head-tied-to-embeddings")["inputs"]["draft_config"]
    cfg = draft_cfg(draft_vocab_size=dc["draft_vocab_size"], vocab_size=dc["vocab_size"], hidden_size=dc["hidden_size"],
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = specforge_spec(cfg)
    spec["lm_head.weight"] = ("BF16", (128256, 4096))  # tied to the target-vocab embedding on export
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_source)
    assert serious(rep) == [("lm-head-shape-mismatch", "error")]
    f = by_rule(rep, "lm-head-shape-mismatch")
    assert (f.evidence["shape"], f.evidence["expected"]) == ([128256, 4096], [32000, 4096])


def test_vllm18909_d2t_kept_by_sglang_or_dropped_under_a_renamed_key(box, tmp_path, sglang_source):
    dc = public_report("vllm-pr18909-d2t-mapping-dropped")["inputs"]["draft_config"]
    cfg = draft_cfg(draft_vocab_size=dc["draft_vocab_size"], vocab_size=dc["vocab_size"],
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg)
    assert serious(doctor(box, launch(target, draft), sglang_source)) == []  # SGLang loads d2t as hot_token_id
    spec = specforge_spec(cfg)
    spec["draft_id_to_target_id"] = spec.pop("d2t")  # vLLM's buffer name: SGLang's loader drops it
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg, spec, token_map_data=False, name="renamed")
    rep = doctor(box, launch(target, draft), sglang_source)
    assert serious(rep) == [("token-map-missing", "error"), ("weights-dropped", "error")]
    assert by_rule(rep, "weights-dropped").evidence["dropped"] == ["draft_id_to_target_id"]


def test_automodel2447_no_d2t_in_a_reduced_vocab_checkpoint(box, tmp_path, sglang_source):
    assert "(absent) d2t" in public_report("automodel-pr2447-d2t-t2d-missing-from-checkpoint")["inputs"]["weight_names"]
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = {k: v for k, v in specforge_spec(cfg).items() if k not in ("d2t", "t2d")}
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_source)
    assert serious(rep) == [("token-map-missing", "error")]
    assert by_rule(rep, "token-map-missing").evidence == {"draft_vocab_size": 32000, "vocab_size": 128256,
                                                          "checkpoint": str(draft)}


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
    # set_eagle3_layers_to_capture: all real findings for that engine.
    assert serious(rep) == [("aux-config-unread", "warning"), ("target-no-aux-capture", "error"),
                            ("unknown-draft-architecture", "error")], rep.to_text()
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


def test_swallowed_config_error_points_at_the_real_line(box, tmp_path, sglang_source):
    cfg = fixture_config("sgl-project__SpecForge__configs_kimi-k2-eagle3.json")
    t, d = deploy(tmp_path, KIMI_K2, cfg)
    f = by_rule(doctor(box, launch(t, d), sglang_source), "swallowed-config-error")
    path, line = f.evidence["source"]["value"].rsplit(":", 1)
    text = pathlib.Path(path).read_text().splitlines()
    assert "eagle_config" in text[int(line) - 1]
    assert any(ln.strip() == "except Exception:" for ln in text[int(line):int(line) + 12])


def test_aux_config_unread_lists_default_layers_and_target_no_aux_capture(box, tmp_path, sglang_source):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": "2,16,29"})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    f = by_rule(doctor(box, launch(t, d), sglang_source), "aux-config-unread")
    assert f.severity == "warning" and f.evidence["captured_layers"]["value"] == [2, 16, 29]
    # A target class without set_eagle3_layers_to_capture in 0.5.23 (GPT-2).
    t2, d2 = deploy(tmp_path, {"architectures": ["GPT2LMHeadModel"], "hidden_size": 4096, "num_hidden_layers": 32,
                               "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                               "rope_scaling": {"rope_type": "llama3"}},
                    draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}), name="gpt2")
    g = by_rule(doctor(box, launch(t2, d2), sglang_source), "target-no-aux-capture")
    assert "srt/models/gpt2.py:" in g.evidence["class"]["source"]


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


@pytest.mark.parametrize("extra, severity, text", [
    ("--speculative-eagle-topk 1 --speculative-num-draft-tokens 4", "error", "bare assert"),
    ("--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 8", "warning", "rewrites"),
    ("--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8 --page-size 16 "
     "--attention-backend flashmla", "error", "attention backend"),
    ("--speculative-num-steps x", "error", "not an integer"),
])
def test_spec_params_invalid(extra, severity, text):
    cmd = LaunchCommand.parse(f"python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3 {extra}")
    found = spec_params_invalid(Facts.of(cmd))
    assert [(f.rule, f.severity) for f in found] == [("spec-params-invalid", severity)] and text in found[0].message
    if severity == "warning":
        assert LaunchCommand.parse(found[0].fix).get("--speculative-num-draft-tokens") == "4"


def test_acceptance_collapsed_runtime_rule():
    from workbench.rules import Finding

    static = [Finding("algorithm-mismatch", "error", "m", {}, None)]
    hit = acceptance_collapsed({"accept_length": 1.0, "verify_steps": 96}, static)
    assert [f.rule for f in hit] == ["acceptance-collapsed"] and hit[0].evidence["static_causes"] == ["algorithm-mismatch"]
    assert acceptance_collapsed({"accept_length": 1.0, "verify_steps": 19}) == []
    assert acceptance_collapsed({"accept_length": 1.06, "verify_steps": 200}) == []


def _corrupt(path: pathlib.Path, kind: str) -> None:
    if kind == "truncated":
        with open(path, "r+b") as f:
            f.truncate(5)
    elif kind == "huge-header":
        write_raw(path, b"{}", length=200_000_000)
    elif kind == "not-json":
        write_raw(path, b"{not json at all}")
    elif kind == "unknown-dtype":
        write_raw(path, json.dumps({"fc.weight": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}}).encode(), extra=b"xx")
    elif kind == "offsets-past-end":
        write_raw(path, json.dumps({"fc.weight": {"dtype": "U8", "shape": [64], "data_offsets": [0, 64]}}).encode())
    elif kind == "missing":
        path.unlink()


@pytest.mark.parametrize("kind", ["truncated", "huge-header", "not-json", "unknown-dtype", "offsets-past-end", "missing"])
def test_bad_checkpoints_are_findings(box, tmp_path, sglang_source, kind):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    _corrupt(d / "model.safetensors", kind)
    rep = doctor(box, launch(t, d), sglang_source)
    f = by_rule(rep, "checkpoint-unreadable")
    assert f.severity == "error" and rep.exit_code == 1
    assert f.evidence["reason"] == {"truncated": "truncated", "huge-header": "header-too-large", "not-json": "not-json",
                                    "unknown-dtype": "unknown-dtype", "offsets-past-end": "offsets-past-end",
                                    "missing": "missing"}[kind]


@pytest.mark.parametrize("which", ["draft", "target"])
def test_malformed_config_json_is_a_finding(box, tmp_path, sglang_source, which):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    (t if which == "target" else d).joinpath("config.json").write_text('{"hidden_size": 4096,')
    rep = doctor(box, launch(t, d), sglang_source)
    f = by_rule(rep, "checkpoint-unreadable")
    assert "not valid JSON" in f.message and "line 1" in f.message


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


def test_head_dim_from_config_else_hidden_over_heads(box, tmp_path, sglang_source):
    """Qwen3-style drafts have head_dim 128 with hidden 2048 / 32 heads = 64: without ``head_dim``
    in the config the engine builds 64-wide heads and the checkpoint's q/k/v/o do not fit."""
    cfg = fixture_config("sgl-project__SpecForge__configs_qwen3-30B-eagle3.json")
    spec = specforge_spec(cfg)
    del cfg["head_dim"]
    t, d = deploy(tmp_path, QWEN3_30B, cfg, spec)
    rep = doctor(box, launch(t, d, extra="--context-length 2048"), sglang_source)
    assert {r for r, _ in serious(rep)} == {"head-dim-mismatch"}
    f = by_rule(rep, "head-dim-mismatch")
    assert f.evidence["tensor"].startswith("midlayer.self_attn.") and f.evidence["expected"][0] in (32 * 64, 4 * 64)


@pytest.mark.parametrize("variant", ["unsorted", "absolute", "out-of-vocab", "duplicates"])
def test_token_map_variants(box, tmp_path, sglang_source, variant):
    """d2t read by byte range from the checkpoint. SGLang 0.5.23 ``llama_eagle3.py`` computes
    ``hot_token_id = d2t + arange`` and indexes the target vocab with it: order is free (an
    unsorted map is valid), absolute ids, ids outside the vocab and duplicates are not."""
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = specforge_spec(cfg)
    d2t, t2d = token_map(cfg["vocab_size"], cfg["draft_vocab_size"])
    target_ids = d2t + np.arange(len(d2t))
    if variant == "unsorted":
        perm = np.random.default_rng(1).permutation(len(d2t))
        d2t = target_ids[perm] - np.arange(len(d2t))
    elif variant == "absolute":
        d2t = target_ids
    elif variant == "out-of-vocab":
        d2t = d2t.copy()
        d2t[-1] = cfg["vocab_size"]
    else:
        d2t = d2t.copy()
        d2t[1] = target_ids[0] - 1
    t, d = deploy(tmp_path, LLAMA31_8B, cfg, spec, token_map_data=False)
    write_sparse_safetensors(d / "model.safetensors", spec, data={"d2t": d2t.astype(np.int64), "t2d": t2d})
    rep = doctor(box, launch(t, d), sglang_source)
    if variant == "unsorted":
        assert serious(rep) == []
        return
    f = by_rule(rep, "token-map-invalid")
    assert f.severity == "error" and f.evidence["len"] == 32000
    assert {"absolute": "absolute target ids", "out-of-vocab": "outside the target vocab",
            "duplicates": "duplicates"}[variant] in f.message


def test_unknown_algorithm_name_from_the_engine_source(box, tmp_path, sglang_source):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    rep = doctor(box, launch(t, d, "EAGLE-3"), sglang_source)
    f = by_rule(rep, "spec-params-invalid")
    assert f.severity == "error" and "EAGLE3" in f.evidence["engine_algorithms"]["value"]
    assert "srt/speculative/spec_info.py:" in f.evidence["engine_algorithms"]["source"]
    assert "spec-params-invalid" not in doctor(box, launch(t, d, "nextn"), sglang_source).rules


def test_launch_flag_unknown_names_the_typo_and_the_flag_meant():
    from workbench.rules.launch_flags import launch_flag_unknown
    from workbench.engine.launch import LaunchCommand

    typo = LaunchCommand.parse("python -m sglang.launch_server --model-path /m --speculative-algoritm EAGLE3 "
                               "--tp 8 --trust-remote-code")
    [f] = launch_flag_unknown(Facts.of(typo, engine_version="0.5.23"))
    assert (f.rule, f.severity) == ("launch-flag-unknown", "error")
    assert f.evidence["unknown_flags"]["value"] == ["--speculative-algoritm"]
    assert "did you mean --speculative-algorithm?" in f.message
    assert "--speculative-algorithm EAGLE3" in f.fix and "--speculative-algoritm" not in f.fix
    # another engine version might define it: a warning, not an error
    assert launch_flag_unknown(Facts.of(typo, engine_version="0.6.0"))[0].severity == "warning"
    # real flags, aliases and unique prefixes (--tp) are not findings
    ok = LaunchCommand.parse("python -m sglang.launch_server --model /m --speculative-algorithm EAGLE3 --tp 8 "
                             "--speculative-draft-model /d --context-length 4096")
    assert launch_flag_unknown(Facts.of(ok, engine_version="0.5.23")) == []


def test_unknown_algorithm_name_is_an_error(tmp_path):
    """A misspelled algorithm is caught from the names the box's engine source defines (the
    sandbox mirrors SGLang's spec_info.py), else from the names modelled from 0.5.23."""
    from remote import connect
    from workbench.sandbox_box import sandbox_launch_command
    from workbench.doctor import run_doctor
    from workbench.engine.launch import LaunchCommand

    text = sandbox_launch_command(port=30123).replace("--speculative-algorithm EAGLE ",
                                                      "--speculative-algorithm EAGEL3 ")
    with connect("local", state_dir=tmp_path / "state") as box:
        report = run_doctor(box, LaunchCommand.parse(text), engine_root=None)
    bad = [f for f in report.findings if f.rule == "spec-params-invalid"]
    assert bad and "EAGEL3" in bad[0].message and bad[0].severity == "error"
