"""Rules of the engine_source family (workbench/rules/engine_source.py)."""

from __future__ import annotations

import pathlib

from rule_helpers import KIMI_K2, LLAMA31_8B, by_rule, deploy, doctor, draft_cfg, launch, specforge_spec
from workbench_test_helpers import fixture_config


def test_swallowed_config_error_points_at_the_real_line(box, tmp_path, sglang_source):
    cfg = fixture_config("sgl-project__SpecForge__configs_kimi-k2-eagle3.json")
    t, d = deploy(tmp_path, KIMI_K2, cfg)
    f = by_rule(doctor(box, launch(t, d), sglang_source), "swallowed-config-error")
    path, line = f.evidence["source"]["value"].rsplit(":", 1)
    text = pathlib.Path(path).read_text().splitlines()
    assert text[int(line) - 1].strip() == "except Exception:"
    gpath, gline = f.evidence["guarded"]["value"].rsplit(":", 1)
    assert gpath == path and int(gline) < int(line) and "eagle_config" in text[int(gline) - 1]


def test_norm_flags_unsupported_only_where_the_engine_never_reads_the_key(box, tmp_path, sglang_source,
                                                                         older_engine):
    """norm_before_fc set in the draft: a warning on an engine whose llama_eagle3.py never reads
    it (the older engine copy), nothing on SGLang 0.5.23, which reads it; set under eagle_config
    it is found there; a flag the older engine does read (norm_output) is no finding."""
    cfg = draft_cfg(norm_before_fc=True, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = specforge_spec(cfg)
    spec["input_norm.weight"] = ("BF16", (3 * 4096,))
    t, d = deploy(tmp_path, LLAMA31_8B, cfg, spec)
    old = doctor(box, launch(t, d), older_engine, "0.5.0")
    f = by_rule(old, "norm-flags-unsupported")
    assert f.severity == "warning" and f.evidence["norm_before_fc"] == {
        "value": True, "source": f"{d}/config.json: norm_before_fc"}
    assert f.evidence["engine_file"]["value"] == f"{older_engine}/srt/models/llama_eagle3.py"
    assert "norm-flags-unsupported" not in doctor(box, launch(t, d), sglang_source).rules
    cfg2 = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "norm_before_fc": True,
                                   "norm_output": True})
    t2, d2 = deploy(tmp_path, LLAMA31_8B, cfg2, spec, name="e")
    found = [f for f in doctor(box, launch(t2, d2), older_engine, "0.5.0").findings if f.rule == "norm-flags-unsupported"]
    assert [list(f.evidence)[0] for f in found] == ["norm_before_fc"]
    assert found[0].evidence["norm_before_fc"]["source"] == f"{d2}/config.json: eagle_config.norm_before_fc"
