"""Rules of the readability family (workbench/rules/readability.py)."""

from __future__ import annotations

import pytest

from rule_helpers import (
    LLAMA31_8B,
    QWEN3,
    by_rule,
    corrupt,
    deploy,
    doctor,
    draft_cfg,
    launch,
    make_draft,
    rules,
    run,
    serious,
)
from workbench_test_helpers import fixture_config


def test_hf_repo_not_in_cache_is_a_finding(box, tmp_path, sglang_source):
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    cmd = (f"HF_HOME={tmp_path / 'hf'} python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 "
           "--speculative-algorithm EAGLE3 --speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3")
    rep = doctor(box, cmd, sglang_source)
    assert serious(rep) == [("model-not-on-box", "warning")] * 2
    assert "models--moonshotai--Kimi-K2.5 missing" in rep.findings[0].message


@pytest.mark.parametrize("kind", ["truncated", "huge-header", "not-json", "unknown-dtype", "offsets-past-end", "missing"])
def test_bad_checkpoints_are_findings(box, tmp_path, sglang_source, kind):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    corrupt(d / "model.safetensors", kind)
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


def test_unreadable_checkpoint(box, tmp_path):
    root = make_draft(tmp_path, fixture_config(QWEN3))
    (root / "draft" / "model.safetensors").write_bytes(b"\x01\x00")
    findings, _ = run(box, root)
    assert rules(findings) == ["checkpoint-unreadable"]
