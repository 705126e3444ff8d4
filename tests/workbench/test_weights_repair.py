"""Repairs of a draft's tensor names by rule (issue 29, part 2), on both engines' loaders as the box has
them: SGLang 0.5.23's ``load_weights`` read from the published wheel, vLLM 0.32.0's loading read from the
``.venv-vllm`` install. Each naming fault of ``testkit.faults`` (a wrapper prefix, a stripped prefix,
Meta's naming, ``self_attn`` → ``attn`` where q/k/v share a shape, one renamed tensor) is diagnosed by the
doctor, repaired by ``weight_fixes``, and the repaired names are followed through the SAME loader again:
nothing dropped, nothing refused, nothing missing, no re-export asked for. Shapes are a check (a mapped
tensor of another shape is rejected and the fix says which and why), an ambiguous mapping is refused,
an unmappable name is named. No server starts (the runtime proof is tests/integration/test_weights_repair_runtime.py
and tests/integration/test_vllm_weights_truth.py)."""

from __future__ import annotations

import dataclasses
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from rule_helpers import launch as sglang_launch
from testkit.faults import build_deployment
from workbench.doctor.run import gather_facts
from workbench.engine.launch import LaunchCommand
from workbench.rules.registry import REGISTRY
from workbench.rules.weights import name_repair, weight_fixes
from workbench.sandbox_box import sandbox_vllm_launch_command, vllm_python

NAMING = ("wrapper-prefix", "stripped-prefix", "framework-naming", "attn-renamed", "renamed-tensor")
VLLM_PYTHON = vllm_python()


@pytest.fixture(scope="module")
def deps(tmp_path_factory):
    root = tmp_path_factory.mktemp("naming")
    return {name: build_deployment(root / name, name) for name in NAMING}


def _facts(box, engine: str, dep, sglang_release):
    if engine == "vllm":
        cmd = sandbox_vllm_launch_command(python=str(VLLM_PYTHON), draft=str(dep.draft_dir))
        facts = gather_facts(box, LaunchCommand.parse(cmd))
        assert facts.vllm.root and facts.vllm.root.endswith("site-packages/vllm"), facts.notes
    else:
        cmd = sglang_launch(dep.target_dir, dep.draft_dir)
        facts = gather_facts(box, LaunchCommand.parse(cmd), engine_root=str(sglang_release("0.5.23")),
                             engine_version="0.5.23")
    return facts


def _analysis(facts):
    return facts.vllm_weights if facts.engine_name == "vllm" else facts.weights


def _reanalysed(facts, renames: dict):
    """The same launch's analysis with the draft's tensors renamed as the fix renames them."""
    draft = facts.draft
    tensors = {renames.get(n, n): info for n, info in draft.tensors.items()}
    fresh = type(facts).of(facts.launch, draft=dataclasses.replace(draft, tensors=tensors), target=facts.target,
                           box=facts.box, engine=facts.engine, engine_version=facts.engine_version)
    fresh.vllm = facts.vllm
    return _analysis(fresh)


@pytest.mark.vllm
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("fault", NAMING)
def test_every_name_is_mapped_through_the_engines_own_loader(box, deps, sglang_release, engine, fault):
    dep = deps[fault]
    facts = _facts(box, engine, dep, sglang_release)
    findings = REGISTRY.run(facts)
    w = _analysis(facts)
    assert w is not None and w.engine.startswith(("read from", "vllm: read from")), w.engine  # the box's source
    problem = sorted(set(w.dropped) | set(w.raises))
    dropped = [f for f in findings if f.rule == "weights-dropped"]
    assert dropped and dropped[0].severity == "error"
    # what each engine does with it: SGLang skips silently, vLLM refuses to start (measured: test_vllm_weights_truth)
    assert dropped[0].prevents_start is (engine == "vllm")
    fixes = weight_fixes(facts, findings, {})
    copies = [f for f in fixes if f.kind == "draft-copy" and f.repair.renames]
    assert len(copies) == 1, [f.to_dict() for f in fixes]
    renames = copies[0].repair.renames
    assert sorted(renames) == problem  # every name mapped
    assert not [f for f in fixes if f.kind == "none" and set(f.rules) & {"weights-dropped", "weights-missing"}]
    assert len(copies[0].repair.reasons) == len(renames) and all("the checkpoint's naming" in r
                                                                  for r in copies[0].repair.reasons)
    # nothing asks for a re-export: the missing parameters' finding points at the renames that fill them
    for f in findings:
        if f.rule == "weights-missing":
            assert "re-export" not in (f.fix or "") and f.evidence["renames_supply"] == renames, f.fix
    after = _reanalysed(facts, renames)
    assert (after.dropped, after.raises, after.missing, after.shape_problems) == ([], [], [], [])


def test_the_transform_is_learned_from_all_names_not_paired_by_shape(box, deps, sglang_release):
    """attn-renamed: q/k/v share one shape (shape-pairing is ambiguous); the learned edit maps each to
    its own shard, and the reason names the rule and how many names it explains."""
    facts = _facts(box, "sglang", deps["attn-renamed"], sglang_release)
    rep = name_repair(facts.draft, facts.weights)
    assert rep.renames == {f"midlayer.attn.{p}.weight": f"midlayer.self_attn.{p}.weight"
                           for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
    assert [s.describe() for s in rep.steps] == ["'attn' → 'self_attn' (learned: the same edit on 4 names)"]
    assert all("the same transform maps 4 names" in r for r in rep.reasons)


def _copy_with(tmp_path, dep, edit):
    """A copy of ``dep``'s draft whose tensors ``edit`` changes (name → array dict in, dict out)."""
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text((dep.draft_dir / "config.json").read_text())
    t = edit(dict(load_file(str(dep.draft_dir / "model.safetensors"))))
    save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


@pytest.mark.vllm
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_mapped_tensor_of_another_shape_is_rejected_with_its_reason(box, deps, sglang_release, tmp_path, engine):
    """Shapes are a check: k_proj cut to 80 rows maps by name onto shard k, whose shape is [160, 320]:
    rejected, named in the none fix; q/v/o are still renamed."""
    dep = deps["attn-renamed"]
    draft = _copy_with(tmp_path, dep, lambda t: {**t, "midlayer.attn.k_proj.weight": t["midlayer.attn.k_proj.weight"][:80]})
    dep2 = dataclasses.replace(dep, draft_dir=draft)
    facts = _facts(box, engine, dep2, sglang_release)
    fixes = weight_fixes(facts, REGISTRY.run(facts), {})
    [copy] = [f for f in fixes if f.kind == "draft-copy" and f.repair.renames]
    assert sorted(copy.repair.renames) == [f"midlayer.attn.{p}.weight" for p in ("o_proj", "q_proj", "v_proj")]
    [none] = [f for f in fixes if f.kind == "none" and "weights-missing" in f.rules]
    assert "midlayer.attn.k_proj.weight → midlayer.self_attn.k_proj.weight would land on" in none.missing
    assert "its shape [80, 320] is not the parameter's [160, 320]" in none.missing
    assert "re-export" in none.missing


def test_two_names_landing_on_one_parameter_are_refused_as_ambiguous(box, deps, sglang_release, tmp_path):
    dep = deps["renamed-tensor"]
    draft = _copy_with(tmp_path, dep, lambda t: {**t, "midlayer.self_attn.qprj.weight": t["midlayer.self_attn.qproj.weight"]})
    facts = _facts(box, "sglang", dataclasses.replace(dep, draft_dir=draft), sglang_release)
    rep = name_repair(facts.draft, facts.weights)
    assert rep.renames == {}
    assert set(rep.unmapped) == {"midlayer.self_attn.qproj.weight", "midlayer.self_attn.qprj.weight"}
    assert all("both map onto model.layers.0.self_attn.qkv_proj.weight shard q: ambiguous" in why
               for why in rep.unmapped.values())


@pytest.mark.vllm
def test_an_extra_name_vllm_refuses_is_named_and_no_reexport_is_asked(box, deps, sglang_release, tmp_path):
    """An extra tensor no parameter wants: every parameter has its tensor, so nothing to re-export; on
    vLLM the name makes it refuse to start, and the none fix says which name and why."""
    dep = deps["renamed-tensor"]
    draft = _copy_with(tmp_path, dep, lambda t: {**{("midlayer.self_attn.q_proj.weight" if k.endswith("qproj.weight")
                                                    else k): v for k, v in t.items()},
                                               "training_step_buffer": np.zeros(4, np.float32)})
    facts = _facts(box, "vllm", dataclasses.replace(dep, draft_dir=draft), sglang_release)
    findings = REGISTRY.run(facts)
    assert [f.rule for f in findings if f.rule.startswith("weights")] == ["weights-dropped"]
    [none] = [f for f in weight_fixes(facts, findings, {}) if f.kind == "none"]
    assert none.rules == ("weights-dropped",)
    assert "every parameter has its tensor" in none.missing and "re-export" not in none.missing
    assert "training_step_buffer: no transform of the checkpoint's naming" in none.missing


def test_naming_faults_are_documented_for_both_engines():
    from testkit.faults import FAULTS

    for name in NAMING[:4]:
        doc = " ".join(FAULTS[name].doc.split())
        assert "SGLang 0.5.23" in doc and "vLLM 0.32.0" in doc, name
