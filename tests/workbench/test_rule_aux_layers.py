"""Rules of the aux_layers family (workbench/rules/aux_layers.py)."""

from __future__ import annotations

import json

import pytest

from rule_helpers import (
    GPT_OSS_120B,
    KIMI,
    KIMI_K25,
    LLAMA31_8B,
    QWEN3,
    by_rule,
    deploy,
    doctor,
    draft_cfg,
    facts_of,
    launch,
    make_draft,
    rules,
    run,
    sandbox_deployment,
    serious,
    specforge_spec,
)
from workbench.doctor import run_doctor
from workbench.engine.codepath import code_path_map
from workbench.engine.modelled import modelled_capture
from workbench.engine.source import EngineSource
from workbench.rules.aux_layers import aux_fixes
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
    # Ids only at top level: the capture path reads only eagle_config's, so the defaults are captured.
    cfg = draft_cfg(eagle_aux_hidden_state_layer_ids=[1, 15, 28])
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


def test_aux_ids_written_as_strings_stop_the_server_and_the_int_ids_are_the_fix(box, tmp_path, sglang_source):
    """A trial's ``["1","3","6"]``: SGLang 0.5.23 reads the value without complaint (the try covers
    only the read) and llama.py's ``[val + 1 for val in layer_ids]`` raises TypeError at start-up —
    not "the default layers"."""
    cmd = sandbox_deployment(tmp_path, eagle_aux_hidden_state_layer_ids=["1", "3", "6"])
    report = doctor(box, cmd, sglang_source)
    assert report.rule_failures == [] and not report.notes
    assert serious(report) == [("aux-layer-ids-invalid", "error")]
    f = by_rule(report, "aux-layer-ids-invalid")
    assert f.evidence["engine_error"]["value"] == 'TypeError: can only concatenate str (not "int") to str'
    assert "srt/models/llama.py:929" in f.evidence["engine_error"]["source"]
    assert f.evidence["as_ints"] == [1, 3, 6] and "the server does not start" in f.message
    facts = facts_of(box, cmd, sglang_source)
    assert facts.capture.rule.error.startswith("TypeError") and facts.capture.rule.captured is None
    (fix,) = aux_fixes(facts, report.findings, {})
    assert fix.kind == "draft-copy" and fix.rules == ("aux-layer-ids-invalid",)
    ec = fix.repair.config["eagle_config"]
    assert ec["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6] and ec["use_aux_hidden_state"] is True
    # given training ids win over the ones the strings spell
    (given,) = aux_fixes(facts, report.findings, {"aux_layer_ids": [2, 4, 6]})
    assert given.repair.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]
    # every other consumer of the ids: the code-path map, the modelled rule
    cmap = code_path_map(EngineSource(box, str(sglang_source), "0.5.23"), target_arch="LlamaForCausalLM",
                         aux_ids=["1", "3", "6"], num_layers=8, keys=["target-offset-rule"])
    entry = next(e for e in cmap.entries if e.key == "target-offset-rule")
    assert "raises TypeError: can only concatenate str" in entry.detail
    modelled = modelled_capture("LlamaForCausalLM", 8, ["1", "3", "6"])
    assert modelled.captured is None and modelled.error.startswith("TypeError")


@pytest.mark.parametrize("ids, severity, captured, fixed", [
    ([1.5, 3, 6], "error", [4, 7], None),          # 2.5 equals no layer: never captured
    ([1.0, 3, 6], "warning", [2, 4, 7], [1, 3, 6]),  # 2.0 == 2: captured by value
    ([True, 3, 6], "warning", [2, 4, 7], None),      # True + 1 == 2, but a bool spells no id
    ([[1], 3, 6], "error", None, None),              # [1] + 1: TypeError
    ([1, None, 6], "error", None, None),             # None + 1: TypeError
    ([], "error", [], None),                         # captures nothing, fc expects 3
    ("1,3,6", "error", None, [1, 3, 6]),             # iterated by character: TypeError
])
def test_aux_ids_that_are_not_ints_are_one_typed_finding(box, tmp_path, sglang_source, ids, severity, captured, fixed):
    cmd = sandbox_deployment(tmp_path, eagle_aux_hidden_state_layer_ids=ids)
    report = doctor(box, cmd, sglang_source)
    assert report.rule_failures == [] and not report.notes
    f = by_rule(report, "aux-layer-ids-invalid")
    assert f.severity == severity
    assert f.evidence["captured_layers"]["value"] == captured
    assert "aux-config-unread" not in report.rules
    fixes = aux_fixes(facts_of(box, cmd, sglang_source), [f], {})
    if fixed is None:
        assert [(x.kind, x.parameter) for x in fixes] == [("none", "aux_layer_ids")]
    else:
        assert fixes[0].repair.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == fixed


def test_string_ids_on_a_deepseek_family_target_never_match_a_layer(box, tmp_path, sglang_source):
    """deepseek_v2.py keeps ids whose first is not 1 as written (``"1" == 1`` is false): nothing
    raises, the forward's ``i in self.layers_to_capture`` never matches a string."""
    cfg = fixture_config(KIMI)
    cfg["max_position_embeddings"] = 262144
    t, d = deploy(tmp_path, KIMI_K25, cfg)
    c = json.loads((d / "config.json").read_text())
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ["1", "29", "57"]
    (d / "config.json").write_text(json.dumps(c))
    f = by_rule(doctor(box, launch(t, d), sglang_source), "aux-layer-ids-invalid")
    assert f.severity == "error" and f.evidence["captured_layers"]["value"] == []
    assert f.evidence["never_captured"] == ['string "1"', 'string "29"', 'string "57"']
    assert "deepseek_v2.py" in f.evidence["captured_layers"]["source"]


def test_negative_aux_ids_are_not_counted_from_the_end(box, tmp_path, sglang_source):
    """``[-1, 3, 6]`` on the Llama sandbox target: llama.py's +1 makes -1 index 0, which the loop
    reaches — the embedding output replaces the state the draft was trained on (not an INFO note
    about "outputs of layers [-1, 3, 6]")."""
    cmd = sandbox_deployment(tmp_path / "llama", eagle_aux_hidden_state_layer_ids=[-1, 3, 6])
    report = doctor(box, cmd, sglang_source)
    assert serious(report) == [("aux-layer-ids-out-of-range", "error")]
    assert "aux-layer-offset-convention" not in report.rules
    f = by_rule(report, "aux-layer-ids-out-of-range")
    assert f.evidence["captured_layers"]["value"] == [0, 4, 7] and f.evidence["negative_ids"] == [-1]
    assert "embedding output" in f.message and "-1 is not the last layer" in f.message
    # -2 → -1 after the offset: never fires, fewer aux states reach fc.
    cmd2 = sandbox_deployment(tmp_path / "minus2", eagle_aux_hidden_state_layer_ids=[-2, 3, 6])
    g = by_rule(doctor(box, cmd2, sglang_source), "aux-layer-ids-out-of-range")
    assert g.evidence["captured_layers"]["value"] == [-1, 4, 7] and "[-1] never fire, so 2 aux states" in g.message
    assert "not counted from the end" in g.message
    (fix,) = aux_fixes(facts_of(box, cmd, sglang_source), [f], {})
    assert fix.kind == "none" and fix.parameter == "aux_layer_ids"


@pytest.mark.parametrize("value, severity", [
    ([1, 3, 6], "error"),                                   # the ids written as eagle_config itself
    ("eagle_aux_hidden_state_layer_ids=1,3,6", "error"),     # a string
    ([], "warning"),                                        # falsy: `or {}` lets it through, defaults
])
def test_an_eagle_config_that_is_not_an_object(box, tmp_path, sglang_source, value, severity):
    """SGLang 0.5.23 swallows a non-object eagle_config while reading the ids (default layers), but the
    draft's constructor calls ``.get`` on it unguarded (``llama_eagle3.py:169-174``): a truthy list or
    string kills the server at load. The fix is the same eagle_config written as an object."""
    cmd = sandbox_deployment(tmp_path, eagle_config=value)
    report = doctor(box, cmd, sglang_source)
    f = by_rule(report, "aux-config-unread")
    assert f.severity == severity, f.message
    if severity == "error":
        assert f"AttributeError: '{type(value).__name__}' object has no attribute 'get'" in f.message
    else:
        assert "silently captures its default layers" in f.message
    facts = facts_of(box, cmd, sglang_source)
    (fix,) = aux_fixes(facts, [f], {"aux_layer_ids": [1, 3, 6]})
    assert fix.kind == "draft-copy"
    assert fix.repair.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6]


def test_an_eagle_config_that_is_the_id_list_is_fixed_with_those_ids(box, tmp_path, sglang_source):
    cmd = sandbox_deployment(tmp_path, eagle_config=[1, 3, 6])
    report = doctor(box, cmd, sglang_source)
    (fix,) = aux_fixes(facts_of(box, cmd, sglang_source), [by_rule(report, "aux-config-unread")], {})
    assert fix.kind == "draft-copy" and fix.repair.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6]


# --- aux-ids-ignored: the releases whose target takes no ids (SGLang 0.4.6-0.4.8 llama.py) ---

LLAMA_LINE = {"0.4.6": 639, "0.4.8": 700}  # grep -n 'def set_eagle3_layers_to_capture' srt/models/llama.py
NO_IDS = set(LLAMA_LINE)


@pytest.mark.parametrize("version", ["0.4.6", "0.4.8", "0.4.10", "0.5.23"])
def test_doctor_says_when_the_release_ignores_the_drafts_ids(box, sglang_release, tmp_path, version):
    # an EAGLE-3 draft trained on layers 0, 10, 20 of a 32-layer Llama (ids written in SGLang's
    # convention), on each release
    target_cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
                  "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    draft = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 10, 20], "use_aux_hidden_state": True})
    target, draft_dir = deploy(tmp_path, target_cfg, draft)
    report = doctor(box, launch(target, draft_dir), sglang_release(version), version)
    assert report.rule_failures == []
    got = {f.rule for f in report.findings}
    if version in NO_IDS:
        f = by_rule(report, "aux-ids-ignored")
        assert f.severity == "warning"
        assert "captures its default layers [2, 16, 29]" in f.message and "layers [1, 11, 21]" in f.message
        assert f.evidence["captured_layers"]["source"].endswith(f"llama.py:{LLAMA_LINE[version]} "
                                                                "(LlamaForCausalLM.set_eagle3_layers_to_capture)")
        assert "aux-layer-offset-convention" not in got
    else:
        assert "aux-ids-ignored" not in got
        conv = by_rule(report, "aux-layer-offset-convention")
        assert conv.evidence["captured_layers"]["value"] == [1, 11, 21]


def test_doctor_is_silent_when_the_ignored_ids_are_the_defaults(box, sglang_release, tmp_path):
    # SpecForge's usual ids for a 32-layer target, [1, 15, 28], are what 0.4.8's defaults capture
    target_cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
                  "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    draft = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    target, draft_dir = deploy(tmp_path, target_cfg, draft)
    report = doctor(box, launch(target, draft_dir), sglang_release("0.4.8"), "0.4.8")
    assert "aux-ids-ignored" not in {f.rule for f in report.findings}
    assert report.rule_failures == []


# --- aux-capture-disabled: eagle_config.use_aux_hidden_state false on the releases that read it ---
# Found by hand: grep -n '"use_aux_hidden_state"' (the statement's first line, one above) and
# grep -n 'if .*eagle_use_aux_hidden_state:' in each wheel's srt/model_executor.
MR_REL = "srt/model_executor/model_runner.py"
SPEC_AUX_REL = "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
SETUP_REL = "srt/model_executor/model_runner_components/attention_backend_setup.py"
USE_AUX_READ = {
    "0.5.9": ((MR_REL, 360), (MR_REL, 621, "if self.eagle_use_aux_hidden_state:")),
    "0.5.12": ((MR_REL, 433), (MR_REL, 903, "if self.eagle_use_aux_hidden_state:")),
    "0.5.18": ((SPEC_AUX_REL, 88), (SETUP_REL, 54, "if eagle_use_aux_hidden_state:")),
    "0.5.23": ((SPEC_AUX_REL, 189), (SETUP_REL, 54, "if eagle_use_aux_hidden_state:")),
}


@pytest.mark.parametrize("version", ["0.4.6", "0.4.8", "0.4.10", "0.5.2", "0.5.4", "0.5.9", "0.5.12", "0.5.18",
                                     "0.5.23"])
def test_use_aux_hidden_state_false_is_an_error_where_the_release_reads_it(box, sglang_release, tmp_path, version):
    target_cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
                  "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    draft = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": False})
    target, draft_dir = deploy(tmp_path, target_cfg, draft)
    root = sglang_release(version)
    cmd = launch(target, draft_dir)
    report = doctor(box, cmd, root, version)
    assert report.rule_failures == []
    if version not in USE_AUX_READ:  # 0.4.6 ... 0.5.7 never read the key: they capture anyway
        assert "aux-capture-disabled" not in report.rules
        return
    (read_rel, read_line), (gate_rel, gate_line, gate_code) = USE_AUX_READ[version]
    f = by_rule(report, "aux-capture-disabled")
    assert f.severity == "error"
    assert f.evidence["engine_read"]["source"] == f"{root}/{read_rel}:{read_line}"
    assert 'eagle_config.get( "use_aux_hidden_state", True )' in f.evidence["engine_read"]["value"]
    assert f.evidence["capture_gate"] == {"value": gate_code, "source": f"{root}/{gate_rel}:{gate_line}"}
    assert f.evidence["eagle_config.use_aux_hidden_state"]["value"] is False
    assert "captures no aux hidden states" in f.message and "fc gets the 1×-wide" in f.message
    # no "this engine captures layers ..." next to it: nothing is captured
    assert "aux-layer-offset-convention" not in report.rules
    facts = facts_of(box, cmd, root)
    (fix,) = [x for x in aux_fixes(facts, report.findings, {}) if x.rules == ("aux-capture-disabled",)]
    assert fix.kind == "draft-copy"
    assert fix.repair.config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [1, 15, 28],
                                                 "use_aux_hidden_state": True}
    # the map's capture-configured entry names the gate, its condition read from the source
    entry = code_path_map(EngineSource(box, str(root), version), keys=["capture-configured"]).entry(
        "capture-configured")
    cond = gate_code[len("if "):-1]
    assert entry.detail.startswith(f"runs only when `{cond}` (line {gate_line})")


def test_use_aux_hidden_state_null_or_true_or_top_level(box, sglang_source, tmp_path):
    target_cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
                  "vocab_size": 128256, "max_position_embeddings": 131072}
    # null: eagle_config.get returns None, falsy, the gate skips the capture
    null = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": None})
    target, d = deploy(tmp_path, target_cfg, null, name="null")
    f = by_rule(doctor(box, launch(target, d), sglang_source), "aux-capture-disabled")
    assert "use_aux_hidden_state is null" in f.message
    # true, and false only at top level (the engine reads the nested key only): no finding
    for name, over in (("true", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28],
                                                  "use_aux_hidden_state": True}}),
                       ("top", {"use_aux_hidden_state": False,
                                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}})):
        target, d = deploy(tmp_path, target_cfg, draft_cfg(**over), name=name)
        assert "aux-capture-disabled" not in doctor(box, launch(target, d), sglang_source).rules


def test_sandbox_engine_gate_is_an_early_return(box):
    from workbench.engine.codepath import aux_capture_switch
    import workbench.sandbox as sb
    import pathlib

    root = pathlib.Path(sb.__file__).parent
    sw = aux_capture_switch(EngineSource(box, str(root), "0.5.23"))
    rel = "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
    assert sw.read[:2] == (f"{root}/{rel}", 55)  # grep -n '"use_aux_hidden_state"' in the sandbox's file
    assert sw.gate[:2] == (f"{root}/{rel}", 66) and sw.condition == "not config.eagle_use_aux_hidden_state → return"


@pytest.mark.vllm
def test_aux_count_mismatch_on_a_vllm_launch():
    """vLLM counts aux states as SGLang does (llama_eagle3.py: num_aux_hidden_states, else the nested
    ids, else 3) and has no width check: a 4-id draft whose fc takes 3 × hidden does not load there."""
    import json as _json
    import pathlib

    from workbench.checkpoint.facts import draft_facts_from, target_facts_from
    from workbench.checkpoint.readers import TensorInfo
    from workbench.rules.aux_layers import aux_count_mismatch
    from workbench.rules.facts import Facts
    from workbench.rules.vllm_engine import shipped_vllm_engine

    from workbench.sandbox_box import vllm_python

    src = pathlib.Path(vllm_python()).parents[1] / "lib/python3.11/site-packages/vllm/model_executor/models/llama_eagle3.py"
    assert "self.fc_input_size = target_hidden_size * self.num_aux_hidden_states" in src.read_text()
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "vocab_size": 128256,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 10, 20, 28]}}
    fc = {"fc.weight": TensorInfo("BF16", (4096, 3 * 4096), (0, 2 * 4096 * 3 * 4096), "/d/model.safetensors")}
    draft = draft_facts_from("/d", "/d/config.json", _json.loads(_json.dumps(cfg)), fc)
    target = target_facts_from("/t", "/t/config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                                                         "num_hidden_layers": 32, "vocab_size": 128256})
    facts = Facts.of(None, draft=draft, target=target, engine_name="vllm", speculative_method="eagle3",
                     vllm=shipped_vllm_engine())
    found = aux_count_mismatch(facts)
    assert [(f.rule, f.severity) for f in found] == [("aux-count-mismatch", "error")]
    assert "weight loader refuses" in found[0].message and found[0].evidence["num_aux"]["value"] == 4
