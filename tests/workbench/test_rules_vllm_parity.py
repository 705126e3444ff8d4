"""The token-map, aux-id, draft-class and norm rules on vLLM launches (issue 29): each evaluated from
the real vLLM 0.32.0 source of ``.venv-vllm`` (the doctor locates it with the launch's interpreter and
reads it with ``Box.read_text``), on faulty copies of the sandbox draft (``testkit.faults``), with
vLLM's own consequence; what real vLLM does with the same drafts is
tests/integration/test_vllm_fault_truth.py's."""

from __future__ import annotations

import json
import shlex

import pytest

from remote import connect
from testkit.faults import build_deployment
from testkit.vllm_servers import vllm_python
from workbench.doctor import run_doctor
from workbench.rules import REGISTRY
from workbench.rules.cross_engine import CONVENTION_KEY
from workbench.rules.facts import Facts
from workbench.rules.vllm_engine import shipped_vllm_engine
from workbench.rules.vllm_source import draft_code, parse_draft_code

pytestmark = pytest.mark.vllm


def _deploy(tmp_path, *faults, aux_ids=(2, 4, 7), convention=True):
    dep = build_deployment(tmp_path / "dep", *faults, aux_ids=list(aux_ids) if aux_ids is not None else None)
    if convention:
        path = dep.draft_dir / "config.json"
        cfg = json.loads(path.read_text())
        cfg[CONVENTION_KEY] = "vllm"
        path.unlink()
        path.write_text(json.dumps(cfg))
    return dep


def _launch(dep, env: str = "", **spec) -> str:
    sc = {"method": "eagle3", "model": str(dep.draft_dir), "num_speculative_tokens": 3, **spec}
    return (f"{env} " if env else "") + shlex.join([str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
                                                   "--model", str(dep.target_dir), "--speculative-config",
                                                   json.dumps(sc)])


def _doctor(dep, **kw):
    return run_doctor(connect("local"), _launch(dep, **kw))


def _one(rep, rule):
    found = [f for f in rep.findings if f.rule == rule]
    assert len(found) == 1, [(f.rule, f.severity) for f in rep.findings]
    return found[0]


def _errors(rep):
    return sorted((f.rule, f.prevents_start) for f in rep.findings if f.severity == "error")


def test_healthy_vllm_convention_draft_has_no_error(tmp_path):
    rep = _doctor(_deploy(tmp_path))
    assert _errors(rep) == []
    # the rules that do not check vLLM are named with vLLM's own rule for the same fault
    (note,) = [n for n in rep.notes if "do not check a vLLM launch" in n]
    assert "spec-params-invalid → speculative-config-invalid" in note and "token-map" not in note
    assert "aux-layer-offset-convention → aux-id-convention" in note


def test_missing_d2t_is_zeros_read_from_the_box(tmp_path):
    f = _one(_doctor(_deploy(tmp_path, "d2t-missing")), "token-map-missing")
    assert f.severity == "error" and not f.prevents_start
    assert "draft id i is proposed as target id i" in f.message
    src = f.evidence["engine_zeros"]["source"]
    assert src.startswith(str(vllm_python().parent.parent)) or "site-packages/vllm/" in src
    assert src.endswith("model_executor/models/llama_eagle3.py:340") and "built-in" not in src
    assert f.evidence["engine_zeros"]["value"] == "self.config.draft_vocab_size != target_vocab_size"


@pytest.mark.parametrize("fault, severity, stops, words", [
    ("d2t-short", "error", True, "AssertionError: Attempted to load weight (torch.Size([32])) into parameter"),
    ("d2t-out-of-range", "error", False, "first draft step of the first request"),
    ("d2t-minus-arange", "error", False, "silently"),
    ("d2t-float", "warning", False, "casts it to int64"),
    ("d2t-full-vocab", "error", True, "There is no module or parameter named 'draft_id_to_target_id'"),
])
def test_token_map_faults_with_vllms_consequence(tmp_path, fault, severity, stops, words):
    rep = _doctor(_deploy(tmp_path, fault))
    f = _one(rep, "token-map-invalid")
    assert (f.severity, f.prevents_start) == (severity, stops) and words in f.message, f.message
    assert f.evidence["engine_use"]["source"].endswith("llama_eagle3.py:386")
    assert [x for x in rep.findings if x.rule == "token-map-missing"] == []
    if fault == "d2t-float":
        assert _errors(rep) == []  # the same draft kills SGLang's warm-up; vLLM loads it as meant


def test_shuffled_d2t_is_a_vllm_candidate(tmp_path):
    f = _one(_doctor(_deploy(tmp_path, "d2t-shuffled")), "token-map-unordered")
    assert f.severity == "warning" and "vLLM scatters the draft's logits" in f.message


def test_stale_top_level_ids_win_on_vllm(tmp_path):
    rep = _doctor(_deploy(tmp_path, "aux-ids-top-level-stale"))
    f = _one(rep, "aux-ids-ignored")
    assert f.severity == "error" and "[0, 2, 5] at the top level and [2, 4, 7] in eagle_config" in f.message
    assert f.evidence["ids_read_by_vllm"]["value"] == [0, 2, 5]
    assert "gpu_model_runner.py" in f.evidence["ids_read_by_vllm"]["source"]


def test_both_spellings_in_each_engines_convention_are_not_a_fault(tmp_path):
    """Top-level [2, 4, 7] (vLLM's) beside eagle_config [1, 3, 6] (SGLang's): the cross-engine repair."""
    dep = _deploy(tmp_path, aux_ids=(1, 3, 6), convention=False)
    path = dep.draft_dir / "config.json"
    cfg = json.loads(path.read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 4, 7]
    path.unlink()
    path.write_text(json.dumps(cfg))
    assert [f for f in _doctor(dep).findings if f.rule == "aux-ids-ignored"] == []


def test_capture_switched_off(tmp_path):
    f = _one(_doctor(_deploy(tmp_path, "aux-capture-off")), "aux-capture-disabled")
    assert f.severity == "error" and not f.prevents_start and "fc over 480 inputs (dropped)" in f.message


def test_no_ids_means_vllms_defaults_from_interfaces(tmp_path):
    f = _one(_doctor(_deploy(tmp_path, "no-eagle-config", aux_ids=None, convention=False)), "aux-config-unread")
    assert f.severity == "info" and f.evidence["default_layers"]["value"] == [2, 4, 5]
    assert f.evidence["default_layers"]["source"].endswith("model_executor/models/interfaces.py:1733")


def test_v2_runner_never_reads_the_nested_ids(tmp_path):
    rep = _doctor(_deploy(tmp_path), env="VLLM_USE_V2_MODEL_RUNNER=1")
    f = _one(rep, "aux-config-unread")
    assert f.severity == "error" and "V2 model runner never reads" in f.message
    assert "eagle3_utils.py" in f.evidence["ids_read_by_vllm"]["source"]


def test_ids_as_one_string_are_not_read_by_vllm(tmp_path):
    """``"2,4,7"`` (one string): vLLM's reader takes only a list or tuple and falls back to the defaults."""
    dep = _deploy(tmp_path)
    path = dep.draft_dir / "config.json"
    cfg = json.loads(path.read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = "2,4,7"
    path.unlink()
    path.write_text(json.dumps(cfg))
    f = _one(_doctor(dep), "aux-config-unread")
    assert f.severity == "error" and not f.prevents_start and "reads only a list" in f.message
    assert f.evidence["states_fed"]["value"] == [2, 4, 5]


def test_string_ids_never_match_a_layer(tmp_path):
    f = _one(_doctor(_deploy(tmp_path, "aux-ids-strings")), "aux-layer-ids-invalid")
    assert f.severity == "error" and not f.prevents_start and "equal no layer index" in f.message


def test_unregistered_draft_class_is_one_finding(tmp_path):
    rep = _doctor(_deploy(tmp_path, "draft-arch-qwen2"))
    f = _one(rep, "unknown-draft-architecture")
    assert f.prevents_start and "Eagle3Qwen2ForCausalLM" in f.message
    assert [x for x in rep.findings if x.rule in ("draft-format-unread", "method-draft-mismatch")] == []
    # vLLM registers its own class name: the SGLang fault is not one on vLLM
    assert _errors(_doctor(_deploy(tmp_path / "b", "draft-unknown-architecture"))) == []


def test_target_without_supports_eagle3(tmp_path):
    f = _one(_doctor(_deploy(tmp_path, "target-no-capture-vllm")), "target-no-aux-capture")
    assert f.prevents_start and f.evidence["class"]["value"] == "SolarForCausalLM"
    assert f.evidence["class"]["source"].endswith("model_executor/models/solar.py:349")
    # vLLM's Granite implements it: SGLang's fault serves on vLLM
    rep = _doctor(_deploy(tmp_path / "g", "target-no-capture"))
    assert [x for x in rep.findings if x.rule == "target-no-aux-capture"] == []


def test_norm_switch_vllm_never_reads(tmp_path):
    f = _one(_doctor(_deploy(tmp_path, "norm-flag-unread")), "norm-flags-unsupported")
    assert "use_aux_norm" in f.message and f.severity == "warning"


def test_config_against_tensors_on_vllm(tmp_path):
    f = _one(_doctor(_deploy(tmp_path, "draft-hidden-size")), "draft-config-vs-tensors")
    assert f.prevents_start and "hidden size (128) is not a multiple" in f.message


def test_swallowed_error_in_vllms_reader(tmp_path):
    """vLLM 0.32.0 reads the aux ids without a broad except: no finding. A copy of its files whose V1
    reader wraps the nested read in ``try/except Exception`` (``--engine-root``): the finding names it."""
    from testkit.vllm_copies import MAP_FILES, pristine_copy
    from workbench.rules.vllm_engine import locate_vllm

    dep = _deploy(tmp_path)
    assert [f for f in _doctor(dep).findings if f.rule == "swallowed-config-error"] == []
    root, _, _ = locate_vllm(connect("local"), str(vllm_python()))
    copy = tmp_path / "vllm"
    pristine_copy(root, copy, MAP_FILES)
    runner = copy / "v1/worker/gpu_model_runner.py"
    text = runner.read_text()
    read = ('            if eagle_config and isinstance(eagle_config, dict):\n'
            '                layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")\n')
    assert text.count(read) == 1
    runner.write_text(text.replace(read, '            try:\n'
                                         '                layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")\n'
                                         '            except Exception:\n'
                                         '                layer_ids = None\n'))
    rep = run_doctor(connect("local"), _launch(dep), engine_root=str(copy))
    f = _one(rep, "swallowed-config-error")
    assert f.severity == "info" and f.evidence["source"]["value"].startswith(str(runner) + ":")
    assert "eagle_config.get" in f.evidence["guarded_code"]


def test_built_in_facts_when_the_source_is_not_read(tmp_path):
    """No vLLM package located: vLLM 0.32.0's built-in facts, said in the evidence and the notes."""
    from workbench.checkpoint import read_draft_facts, read_target_facts
    from workbench.rules.weights import token_map_missing

    dep = _deploy(tmp_path, "d2t-missing")
    box = connect("local")
    facts = Facts.of(_launch(dep), draft=read_draft_facts(box, str(dep.draft_dir)),
                     target=read_target_facts(box, str(dep.target_dir)), box=box, vllm=shipped_vllm_engine())
    (f,) = token_map_missing(facts)
    assert "built-in vLLM 0.32.0 facts" in f.evidence["engine_zeros"]["source"]
    assert draft_code(facts).origin == "shipped"
    assert any("vLLM's draft class not read from the box" in n for n in facts.notes)


def test_parse_draft_code_finds_each_fact_by_ast():
    text = (vllm_python().parent.parent / "lib/python3.11/site-packages/vllm/model_executor/models/llama_eagle3.py")
    code = parse_draft_code(text.read_text(), "llama_eagle3.py")
    assert (code.d2t_param, code.t2d_skip, code.d2t_rename, code.d2t_left_at_init, code.d2t_offsets,
            code.d2t_scatter) == tuple(f"llama_eagle3.py:{n}" for n in (340, 426, 429, 459, 386, 394))
    assert {"norm_before_fc", "fc_norm", "norm_before_residual", "norm_output"} <= code.keys
    assert "use_aux_norm" not in code.keys
    moved = parse_draft_code("class X:\n    def f(self):\n        self.draft_id_to_target_id = torch.zeros(3)\n", "m.py")
    assert moved.d2t_param == "m.py:3" and moved.d2t_offsets is None


def test_every_rule_skipped_on_vllm_names_vllms_own_or_is_a_weight_rule():
    for r in REGISTRY.skipped_for("vllm"):
        assert r.vllm_rule in REGISTRY or r.family == "weights", r.id
        if r.vllm_rule:
            assert "vllm" in REGISTRY.get(r.vllm_rule).engines
