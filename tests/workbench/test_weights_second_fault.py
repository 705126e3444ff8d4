"""The weight-name repair with a second fault beside the naming one (issue 29 trial, items 7 and 8), on
both engines' loaders as the box has them (SGLang 0.5.23 read from the published wheel, vLLM 0.32.0 read
from the ``.venv-vllm`` install): the rename is still offered for every name it maps, a re-export is
asked only for what no rename can fill (a missing lm_head), a tensor of the wrong shape is named with
its shape, an empty checkpoint says it holds no tensors, vLLM's weights-missing on refused names says the
engine does not start (never "starts, silently"), and weights-dropped's fix is the learned transform with
counts that agree. No server starts."""

from __future__ import annotations

import re

import pytest

from rule_helpers import launch as sglang_launch
from testkit.faults import build_deployment
from workbench.doctor.run import gather_facts
from workbench.engine.launch import LaunchCommand
from workbench.rules.registry import REGISTRY
from workbench.rules.weights import weight_fixes
from workbench.sandbox_box import sandbox_vllm_launch_command, vllm_python

CASES = {"prefix+no-head": ("wrapper-prefix", "lm-head-missing"),
         "fc-T+prefix": ("fc-transposed", "wrapper-prefix"),
         "prefix": ("wrapper-prefix",),
         "empty": ("no-tensors",)}


@pytest.fixture(scope="module")
def deps(tmp_path_factory):
    root = tmp_path_factory.mktemp("second")
    return {name: build_deployment(root / re.sub(r"\W", "_", name), *faults) for name, faults in CASES.items()}


def _run(box, engine, dep, sglang_release):
    if engine == "vllm":
        cmd = sandbox_vllm_launch_command(python=str(vllm_python()), draft=str(dep.draft_dir))
        facts = gather_facts(box, LaunchCommand.parse(cmd))
        assert facts.vllm.root and facts.vllm.root.endswith("site-packages/vllm"), facts.notes
    else:
        facts = gather_facts(box, LaunchCommand.parse(sglang_launch(dep.target_dir, dep.draft_dir)),
                             engine_root=str(sglang_release("0.5.23")), engine_version="0.5.23")
    findings = REGISTRY.run(facts)
    return facts, {f.rule: f for f in findings if f.severity == "error"}, findings


@pytest.mark.vllm
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_rename_offered_beside_a_missing_lm_head(box, deps, sglang_release, engine):
    facts, err, findings = _run(box, engine, deps["prefix+no-head"], sglang_release)
    missing = err["weights-missing"]
    # the rename is offered for what it maps; the re-export only for the head no rename can fill
    assert "strip the prefix 'module.'" in missing.fix and "re-export the draft with its trained lm_head" in missing.fix
    assert missing.evidence["unfilled"] == ["lm_head.weight"] and missing.evidence["renames_supply"]
    assert all(n.startswith("module.") for n in missing.evidence["renames_supply"])
    dropped = err["weights-dropped"]
    n = len(missing.evidence["renames_supply"])
    assert f"strip the prefix 'module.' (a wrapper prefix on {n} of {n} names)" in dropped.fix
    assert f"on {n} name(s)" in dropped.fix
    fixes = weight_fixes(facts, findings, {})
    copies = [f for f in fixes if f.kind == "draft-copy" and f.repair.renames]
    assert len(copies) == 1 and copies[0].repair.renames == missing.evidence["renames_supply"]


@pytest.mark.vllm
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_rename_offered_beside_a_transposed_fc(box, deps, sglang_release, engine):
    facts, err, _ = _run(box, engine, deps["fc-T+prefix"], sglang_release)
    missing, dropped = err["weights-missing"], err["weights-dropped"]
    assert "strip the prefix 'module.'" in missing.fix and "re-export" not in missing.fix
    # the fc is named with its shape, not asked to be re-exported as if absent
    assert "module.fc.weight → fc.weight would land on model.fc.weight but its shape [480, 160]" in missing.fix
    assert missing.evidence["unfilled"] == ["model.fc.weight"]
    assert "strip the prefix 'module.'" in dropped.fix and "1 name(s) no rename maps: module.fc.weight" in dropped.fix


@pytest.mark.vllm
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_an_empty_checkpoint_says_it_holds_no_tensors(box, deps, sglang_release, engine):
    _, err, _ = _run(box, engine, deps["empty"], sglang_release)
    missing = err["weights-missing"]
    assert missing.fix.startswith("the checkpoint holds no tensors") and "lm_head" not in missing.fix
    assert "holds no tensors" in missing.message and missing.evidence["tensors"] == 0


@pytest.mark.vllm
def test_vllm_missing_on_refused_names_says_it_does_not_start(box, deps, sglang_release):
    """vLLM refuses the prefixed names (weights-dropped, prevents start): weights-missing is the other
    side of them and must not say the engine starts; the counts of the dropped finding and its fix agree
    (the token map counted in both)."""
    _, err, _ = _run(box, "vllm", deps["prefix"], sglang_release)
    missing, dropped = err["weights-missing"], err["weights-dropped"]
    assert "starts, silently" not in missing.message and "vLLM does not start" in missing.message
    assert missing.evidence["consequence_of"] == "weights-dropped"
    n = len(dropped.evidence["raises"])
    assert dropped.message.startswith(f"{n} checkpoint tensor(s)") and "module.d2t" in dropped.evidence["raises"]
    assert f"(a wrapper prefix on {n} of {n} names) — on {n} name(s)" in dropped.fix
    assert "see evidence load_weights" not in dropped.fix
    assert f"rename the {n} tensor(s) the engine refuses" in missing.fix
    # the head is among the refused names: renamed, it loads; no "shares the target's lm_head" story
    assert "TARGET's lm_head" not in missing.message


@pytest.mark.vllm
def test_vllm_missing_head_beside_refused_names_says_what_happens_once_renamed(box, deps, sglang_release):
    _, err, _ = _run(box, "vllm", deps["prefix+no-head"], sglang_release)
    missing = err["weights-missing"]
    assert "vLLM does not start" in missing.message and "starts, silently" not in missing.message
    assert "once it starts, without lm_head.weight the proposer shares the TARGET's lm_head" in missing.message
