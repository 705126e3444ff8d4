"""The doctor's text report groups consequence findings under their root cause (issue 29 trial item 9):
one wrong config field is one root cause, and what it makes other rules find is printed indented under
it with the declared link's mechanism; the summary counts errors as root causes and consequences; the
JSON keeps every finding and adds ``grouping``. Faulty sandbox drafts built by ``testkit.faults``, the
doctor on the sandbox's SGLang box (its real source)."""

from __future__ import annotations

import json

from rule_helpers import launch as sglang_launch
from testkit.faults import build_deployment
from workbench.doctor import run_doctor


def _doctor(box, tmp_path, *faults):
    dep = build_deployment(tmp_path / "dep", *faults)
    return run_doctor(box, sglang_launch(dep.target_dir, dep.draft_dir))


def test_target_hidden_size_groups_the_own_embedding_under_it(box, tmp_path):
    """target_hidden_size 192 (the target's is 160): SGLang's set_embed keeps the draft's own embedding,
    so weights-missing ['model.embed_tokens.weight'] fires; it is the declared consequence of
    hidden-size-mismatch (consequences.py _own_embedding_for_width) and is printed under it."""
    report = _doctor(box, tmp_path, "target-hidden-mismatch")
    errors = {f.rule: f for f in report.findings if f.severity == "error"}
    assert errors["weights-missing"].evidence["missing"] == ["model.embed_tokens.weight"]
    g = report.grouping()
    (cause,) = [c for c in g["causes"] if c["consequences"]]
    assert cause["rule"] == "hidden-size-mismatch"
    assert [c["rule"] for c in cause["consequences"]] == ["weights-missing"]
    assert "set_embed" in cause["consequences"][0]["mechanism"]
    assert (g["root_causes"], g["consequences"]) == (len(errors) - 1, 1)
    text = report.to_text()
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("ERROR   hidden-size-mismatch"))
    sub = next(i for i, ln in enumerate(lines) if "└ error weights-missing" in ln)
    assert sub > head and not any(ln.startswith("ERROR   weights-missing") for ln in lines)
    assert "consequences of hidden-size-mismatch (1; fixing it fixes them)" in text
    assert f"{len(errors)} error(s) ({len(errors) - 1} root cause{'s' if len(errors) != 2 else ''}, 1 consequence)" in text
    doc = report.to_dict()
    assert len(doc["findings"]) == len(report.findings) and doc["grouping"] == json.loads(json.dumps(g))
    page = report._repr_html_()
    assert page.count("wb-doctor-consequence") == 1 and "a consequence of <code>hidden-size-mismatch</code>" in page


def test_a_config_that_disagrees_with_its_tensors_is_one_root_cause(box, tmp_path):
    """hidden_size 128 against 160-wide tensors: every shape and missing-parameter finding is a
    consequence of draft-config-vs-tensors: one root cause, the rest indented under it."""
    report = _doctor(box, tmp_path, "draft-hidden-size")
    errors = [f for f in report.findings if f.severity == "error"]
    g = report.grouping()
    assert g["root_causes"] == 1 and g["consequences"] == len(errors) - 1 >= 5
    root = next(c for c in g["causes"] if c["consequences"])
    assert root["rule"] == "draft-config-vs-tensors"
    text = report.to_text()
    assert f"{len(errors)} error(s) (1 root cause, {len(errors) - 1} consequences)" in text
    assert sum(ln.startswith("ERROR") for ln in text.splitlines()) == 1


def test_a_healthy_draft_prints_no_grouping(box, tmp_path):
    report = _doctor(box, tmp_path, "healthy")
    g = report.grouping()
    assert g["consequences"] == 0 and all(not c["consequences"] for c in g["causes"])
    assert "root cause" not in report.to_text() and "└" not in report.to_text()
