"""Rules of the aux_layers family (workbench/rules/aux_layers.py)."""

from __future__ import annotations

from rule_helpers import (
    GPT_OSS_120B,
    KIMI_K25,
    LLAMA31_8B,
    QWEN3,
    by_rule,
    deploy,
    doctor,
    draft_cfg,
    launch,
    make_draft,
    rules,
    run,
    serious,
    specforge_spec,
)
from workbench_test_helpers import fixture_config, public_report


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


def test_eagle1_width_fc_is_aux_count_mismatch(box, tmp_path):
    cfg = fixture_config(QWEN3)
    findings, _ = run(box, make_draft(tmp_path, cfg, shapes={"fc.weight": (2048, 4096)}))
    assert rules(findings) == ["aux-count-mismatch"]
    assert findings[0].evidence["expected"] == [2048, 3 * 2048]
