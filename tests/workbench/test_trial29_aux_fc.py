"""Trial 29 items 3 and 6: fixes the doctor checks before it offers them (top-level-only aux ids in
the serving engine's convention; a transposed fc.weight named and repaired), on drafts built with
tests/testkit/faults.py."""

from __future__ import annotations

import json

from testkit.faults import build_deployment

from workbench.doctor import run_doctor
from workbench.doctor.run import gather_facts
from workbench.engine.launch import LaunchCommand
from workbench.rules.aux_layers import aux_fixes
from workbench.rules.repair_check import rejections


def _sglang(box, dep):
    cmd = dep.launch_command()
    return run_doctor(box, cmd), gather_facts(box, LaunchCommand.parse(cmd))


def _one(rep, rule):
    found = [f for f in rep.findings if f.rule == rule]
    assert len(found) == 1, [(f.rule, f.severity, f.message) for f in rep.findings]
    return found[0]


def _set_config(dep, **keys):
    path = dep.draft_dir / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(keys)
    path.unlink()
    path.write_text(json.dumps(cfg))


# --- item 3: top-level-only ids, written into eagle_config in SGLang's convention ---------------

def test_top_level_ids_in_vllm_spelling_are_shifted_for_sglang(box, tmp_path):
    """[2, 4, 7] at the top level on the 8-layer sandbox target: read as written by SGLang they
    capture [3, 5, 8] and 8 never fires (the trial's rejected fix); read in vLLM's convention they
    are SGLang's [1, 3, 6], the only reading consistent with the layer count."""
    dep = build_deployment(tmp_path / "d", "aux-ids-top-level", aux_ids=[2, 4, 7])
    rep, facts = _sglang(box, dep)
    f = _one(rep, "aux-config-unread")
    assert "is only at top level" not in f.message
    assert "written only at the top level" in f.message and "[2, 4, 7]" in f.message
    assert '"eagle_aux_hidden_state_layer_ids": [1, 3, 6]' in f.fix
    (fix,) = aux_fixes(facts, [f], {})
    assert fix.kind == "draft-copy"
    assert fix.repair.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6]
    assert rejections(facts, fix.repair) == []
    # the as-written copy is one the doctor rejects: the check is what keeps it out
    from workbench.rules.aux_layers import _eagle_config_repair

    rejected = rejections(facts, _eagle_config_repair(facts, [2, 4, 7], "as written"))
    assert [r.rule for r in rejected] == ["aux-layer-ids-out-of-range"]


def test_top_level_ids_both_readings_valid_are_candidates(box, tmp_path):
    """[1, 3, 6] at the top level, nothing recording the convention: both readings are ids SGLang
    captures ([0, 2, 5] for vLLM's, [1, 3, 6] as written): two candidates to measure."""
    dep = build_deployment(tmp_path / "d", "aux-ids-top-level")
    rep, facts = _sglang(box, dep)
    f = _one(rep, "aux-config-unread")
    (fix,) = aux_fixes(facts, [f], {})
    assert fix.kind == "candidates"
    ids = [c["repair"].config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] for c in fix.candidates]
    assert ids == [[0, 2, 5], [1, 3, 6]]
    assert all(rejections(facts, c["repair"]) == [] for c in fix.candidates)
    assert "measure" in f.fix


def test_top_level_ids_recorded_convention_is_used(box, tmp_path):
    dep = build_deployment(tmp_path / "d", "aux-ids-top-level")
    _set_config(dep, aux_layer_ids_convention="sglang")
    rep, facts = _sglang(box, dep)
    (fix,) = aux_fixes(facts, [_one(rep, "aux-config-unread")], {})
    assert fix.kind == "draft-copy"
    assert fix.repair.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6]
