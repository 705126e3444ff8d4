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


# --- item 6: fc.weight stored transposed, named, a consequence link, a transpose repair ---------

def _vllm_launch(dep) -> str:
    import shlex

    from testkit.vllm_servers import vllm_python

    sc = {"method": "eagle3", "model": str(dep.draft_dir), "num_speculative_tokens": 3}
    return shlex.join([str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model",
                       str(dep.target_dir), "--speculative-config", json.dumps(sc)])


def _assert_transposed_findings(rep):
    shape = _one(rep, "weight-shape-mismatch")
    assert shape.evidence["stored_transposed"] is True
    assert "fc.weight is stored transposed" in shape.message and "transposed" in shape.fix
    count = _one(rep, "aux-count-mismatch")
    assert count.evidence["consequence_of"] == "weight-shape-mismatch"
    assert "stored transposed" in count.message and "the aux layer ids are not what is wrong" in count.message
    from workbench.rules.registry import REGISTRY

    assert REGISTRY.explains(shape, count) is not None  # the declared link applies on this evidence


def _transpose_fix(facts, rep):
    from workbench.rules.weights import weight_fixes

    fixes = [f for f in weight_fixes(facts, rep.findings, {}) if "weight-shape-mismatch" in f.rules]
    assert len(fixes) == 1, [f.to_dict() for f in fixes]
    (fix,) = fixes
    assert fix.kind == "draft-copy" and fix.repair.transposes == ("fc.weight",)
    assert rejections(facts, fix.repair) == []
    return fix


def test_transposed_fc_on_sglang(box, tmp_path):
    dep = build_deployment(tmp_path / "d", "fc-transposed")
    rep, facts = _sglang(box, dep)
    _assert_transposed_findings(rep)
    _transpose_fix(facts, rep)


def test_transposed_fc_on_vllm(box, tmp_path):
    dep = build_deployment(tmp_path / "d", "fc-transposed")
    cmd = _vllm_launch(dep)
    rep = run_doctor(box, cmd)
    _assert_transposed_findings(rep)
    _transpose_fix(gather_facts(box, LaunchCommand.parse(cmd)), rep)


def test_a_square_or_other_shape_is_not_called_transposed():
    from workbench.rules.repair_check import stored_transposed

    assert stored_transposed([480, 160], [160, 480])
    assert not stored_transposed([160, 160], [160, 160])
    assert not stored_transposed([160, 320], [160, 480])
    assert not stored_transposed([480], [480])
    assert not stored_transposed([2, 3, 4], [4, 3, 2])


def test_the_transpose_repair_copies_byte_exact_and_the_doctor_accepts_the_copy(box, tmp_path):
    """The repair made on the box (draft_copy's script transposes the bytes; the read-back compares
    them byte for byte with the source's transposed), then the doctor run on a launch of the copy:
    no shape or count finding is left."""
    import numpy as np
    import sys

    from remote import connect
    from safetensors.numpy import load_file
    from workbench.session import Journal, make_repaired_copy

    dep = build_deployment(tmp_path / "d", "fc-transposed")
    rep, facts = _sglang(box, dep)
    fix = _transpose_fix(facts, rep)
    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as lbox:
        journal = Journal(lbox)
        journal.begin()
        copy = make_repaired_copy(lbox, journal, str(dep.draft_dir), fix.repair)
        assert any("byte for byte" in c for c in copy.checks), copy.checks
        src = load_file(str(dep.draft_dir / "model.safetensors"))
        got = load_file(f"{copy.path}/model.safetensors")
        assert got["fc.weight"].shape == (160, 480)
        assert np.array_equal(got["fc.weight"], src["fc.weight"].T)
        assert all(np.array_equal(got[k], v) for k, v in src.items() if k != "fc.weight")
        fixed_cmd = LaunchCommand.parse(dep.launch_command()).with_flag(
            "--speculative-draft-model-path", copy.path).to_string()
        after = run_doctor(box, fixed_cmd)
        assert not {"weight-shape-mismatch", "aux-count-mismatch"} & {f.rule for f in after.findings}


def _fc_for_two(dep):
    """fc.weight cut to 2 aux states ([160, 320]) while eagle_config keeps 3 ids."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = dep.draft_dir / "model.safetensors"
    t = load_file(str(path))
    t["fc.weight"] = np.ascontiguousarray(t["fc.weight"][:, :320])
    path.unlink()
    save_file(t, str(path))


def test_fc_for_fewer_aux_states_is_one_finding_per_engine_with_candidates(box, tmp_path):
    dep = build_deployment(tmp_path / "d", "healthy")
    _fc_for_two(dep)
    rep, facts = _sglang(box, dep)
    f = _one(rep, "aux-count-mismatch")  # once: the loader's shape mismatch on fc is the same fault
    assert "fails to load or its fc is skipped" not in f.message
    assert "weight loader asserts" in f.message and f.prevents_start
    assert "weight-shape-mismatch" not in rep.rules
    (fix,) = aux_fixes(facts, [f], {})
    assert fix.kind == "candidates"
    assert [c["repair"].config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] for c in fix.candidates] == \
        [[1, 3], [1, 6], [3, 6]]
    cmd = _vllm_launch(dep)
    vrep = run_doctor(box, cmd)
    v = _one(vrep, "aux-count-mismatch")
    assert "vLLM builds fc" in v.message
    (vfix,) = aux_fixes(gather_facts(box, LaunchCommand.parse(cmd)), [v], {})
    assert vfix.kind == "candidates" and len(vfix.candidates) == 3
