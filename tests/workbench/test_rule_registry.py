"""The rule registry: every rule id in one place, the catalogue generated from it, each rule tested
beside its family, and one failing rule never hiding the others."""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import pytest

from remote import connect
from remote.errors import RemoteFileNotFound
from rule_helpers import LLAMA31_8B, deploy, doctor, draft_cfg, launch
from workbench.doctor import RULE_IDS, run_doctor
from workbench.rules import FAMILY_MODULES, REGISTRY, Facts, Finding
from workbench.rules.catalogue import catalogue_markdown, default_path, main as catalogue_main
from workbench.rules.registry import Family, Registry, RuleFailure

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: The catalogue the project started from (shared/notes/doctor-rules.md) plus the two rules the doctor
#: added: none may go missing (new rules need no entry here).
CATALOGUE_IDS = {
    "algorithm-mismatch", "draft-path-missing", "spec-params-invalid", "unknown-draft-architecture",
    "aux-config-unread", "aux-layer-ids-out-of-range", "aux-layer-offset-convention", "aux-count-mismatch",
    "hidden-size-mismatch", "vocab-size-mismatch", "head-dim-mismatch", "context-length-mismatch", "rope-mismatch",
    "norm-flags-unsupported", "weights-dropped", "weights-missing", "lm-head-shape-mismatch", "token-map-missing",
    "token-map-invalid", "checkpoint-unreadable", "target-no-aux-capture", "swallowed-config-error",
    "acceptance-collapsed", "model-not-on-box", "launch-flag-unknown",
}


def test_docs_rules_md_is_generated_from_the_registry():
    committed = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert committed == catalogue_markdown(), "docs/rules.md is stale: run `python -m workbench.rules.catalogue --write`"
    assert default_path() == ROOT / "docs" / "rules.md"
    assert catalogue_main(["--check"]) == 0


def test_catalogue_check_fails_on_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "rules.md"
    stale.write_text(catalogue_markdown().replace("weights-dropped", "weights-dropt", 1))
    assert catalogue_main(["--check", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    assert catalogue_main(["--write", str(stale)]) == 0
    assert catalogue_main(["--check", str(stale)]) == 0


def test_the_registry_holds_the_catalogue_and_the_doctor_emits_its_ids():
    assert CATALOGUE_IDS <= set(REGISTRY.ids)
    assert len(set(REGISTRY.ids)) == len(REGISTRY.ids)  # no id twice
    assert tuple(RULE_IDS) == REGISTRY.ids
    text = catalogue_markdown()
    for r in REGISTRY:
        assert f"### `{r.id}`" in text and f"[`{r.id}`](#{r.id})" in text
        assert r.explanation and r.summary and r.fix
        assert r.family in [f.name for f in REGISTRY.families]
    assert [m.FAMILY.name for m in FAMILY_MODULES] == [f.name for f in REGISTRY.families]
    assert {r.id for r in REGISTRY if r.kind == "runtime"} == {"acceptance-collapsed", "gpus-held", "gpus-too-few"}


def _finding_literals() -> list[tuple[str, str, int]]:
    """``(rule id, module, line)`` of every ``Finding("<id>", ...)`` in the library's source."""
    out = []
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        if "sandbox" in path.relative_to(ROOT / "workbench").parts[:1]:
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Finding" \
                    and node.args and isinstance(node.args[0], ast.Constant):
                out.append((node.args[0].value, module, node.lineno))
    return out


def test_every_finding_is_made_in_its_own_family_module():
    literals = _finding_literals()
    assert len(literals) > 20  # the scan sees the rules
    for rule_id, module, line in literals:
        assert rule_id in REGISTRY, f"{module}:{line} emits {rule_id!r}, which no rule registers"
        assert REGISTRY.get(rule_id).module == module, (
            f"{module}:{line} builds a {rule_id} finding; the rule lives in {REGISTRY.get(rule_id).module}")


def test_every_rule_is_tested_beside_its_family():
    for r in REGISTRY:
        family_tests = ROOT / "tests" / "workbench" / f"test_rule_{r.module.rsplit('.', 1)[1]}.py"
        assert family_tests.is_file(), f"{r.id}: no {family_tests.name}"
        assert f'"{r.id}"' in family_tests.read_text(encoding="utf-8"), f"{r.id}: not asserted in {family_tests.name}"


# -- the registry's own rules -------------------------------------------------------------------


def _rule_check(facts):
    """A check for the registry tests."""
    return []


def test_a_family_refuses_bad_records():
    reg = Registry()
    fam = Family("f", "a family", "doc", module=__name__, registry=reg)
    fam.rule("r-one", severities=("error",), summary="s", fix="x")(_rule_check)
    with pytest.raises(ValueError, match="registered twice"):
        fam.rule("r-one", severities=("error",), summary="s")(_rule_check)
    with pytest.raises(ValueError, match="severities must be"):
        fam.rule("r-two", severities=("fatal",), summary="s")(_rule_check)
    with pytest.raises(ValueError, match="needs a docstring"):
        fam.rule("r-three", severities=("info",), summary="s")(lambda facts: [])
    with pytest.raises(ValueError, match="kind must be"):
        fam.rule("r-four", severities=("info",), summary="s", kind="sometimes")(_rule_check)
    with pytest.raises(ValueError, match="registered twice"):
        Family("f", "again", "doc", module=__name__, registry=reg)
    with pytest.raises(ValueError, match="the registered families are"):
        reg.arrange(["f", "g"])
    assert reg.ids == ("r-one",) and reg.get("r-one").explanation == "A check for the registry tests."
    with pytest.raises(KeyError, match="no rule 'nope'.*r-one"):
        reg.get("nope")


def test_run_checks_each_finding_against_its_rule():
    reg = Registry()
    fam = Family("f", "a family", "doc", module=__name__, registry=reg)

    def wrong_id(facts):
        """Emits another rule's id."""
        return [Finding("someone-else", "error", "m")]

    def wrong_severity(facts):
        """Emits a severity it does not declare."""
        return [Finding("w-sev", "warning", "m")]

    fam.rule("w-id", severities=("error",), summary="s")(wrong_id)
    with pytest.raises(ValueError, match="emitted a finding 'someone-else'"):
        reg.run(Facts.of(None))
    reg2 = Registry()
    Family("g", "g", "doc", module=__name__, registry=reg2).rule("w-sev", severities=("error",), summary="s")(
        wrong_severity)
    with pytest.raises(ValueError, match="with severity 'warning'"):
        reg2.run(Facts.of(None))


def test_a_failing_rule_is_a_note_and_never_hides_the_others():
    reg = Registry()
    fam = Family("f", "a family", "doc", module=__name__, registry=reg)

    def boom(facts):
        """Fails on input it does not understand."""
        raise TypeError("'NoneType' object is not subscriptable")

    def fine(facts):
        """Still runs."""
        return [Finding("fine", "info", "ran")]

    fam.rule("boom", severities=("error",), summary="s")(boom)
    fam.rule("fine", severities=("info",), summary="s")(fine)
    failures: list[RuleFailure] = []
    assert [f.rule for f in reg.run(Facts.of(None), failures=failures)] == ["fine"]
    assert failures == [RuleFailure("boom", "TypeError: 'NoneType' object is not subscriptable")]
    assert "rule boom could not run" in str(failures[0])
    with pytest.raises(TypeError):  # without a list to report into, the failure is raised
        reg.run(Facts.of(None))

    def box_fails(facts):
        """The box went away: the doctor cannot run."""
        raise RemoteFileNotFound("gone", path="/x", box="b")

    Family("g", "g", "doc", module=__name__, registry=reg).rule("box", severities=("error",), summary="s")(box_fails)
    with pytest.raises(RemoteFileNotFound):
        reg.run(Facts.of(None), failures=[])


def test_run_doctor_reports_a_broken_rule_and_still_runs_the_rest(box, tmp_path, sglang_source, monkeypatch):
    cfg = draft_cfg(vocab_size=32000, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    healthy = doctor(box, launch(t, d), sglang_source)
    assert "vocab-size-mismatch" in healthy.rules and "algorithm-mismatch" not in healthy.rules

    def broken(facts):
        raise KeyError("rope_theta")

    rope = REGISTRY.get("rope-mismatch")
    monkeypatch.setitem(REGISTRY._rules, "rope-mismatch", dataclasses.replace(rope, check=broken))
    report = doctor(box, launch(t, d, "EAGLE"), sglang_source)
    assert "algorithm-mismatch" in report.rules and "vocab-size-mismatch" in report.rules
    assert "rope-mismatch" not in report.rules
    assert [f.rule for f in report.rule_failures] == ["rope-mismatch"]
    assert any(n.startswith("rule rope-mismatch could not run (KeyError:") for n in report.notes)
    assert report.exit_code == 1


class _ReadCounter:
    """The local box, counting reads per path (to show the facts are gathered once)."""

    def __init__(self, box):
        self._box, self.reads = box, {}

    def __getattr__(self, name):
        return getattr(self._box, name)

    def _count(self, path):
        self.reads[str(path)] = self.reads.get(str(path), 0) + 1

    def read_text(self, path, **kw):
        self._count(path)
        return self._box.read_text(path, **kw)

    def read_bytes(self, path, offset=0, length=None, **kw):
        self._count(path)
        return self._box.read_bytes(path, offset, length, **kw)


def test_the_doctor_reads_each_config_once_for_all_rules(tmp_path, sglang_source):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    counting = _ReadCounter(connect("local"))
    report = run_doctor(counting, launch(t, d, "EAGLE"), engine_root=str(sglang_source), engine_version="0.5.23")
    assert "algorithm-mismatch" in report.rules
    assert counting.reads[f"{t}/config.json"] == 1 and counting.reads[f"{d}/config.json"] == 1
    # the safetensors header: 8 bytes of length, then the header itself; d2t/t2d once each at most
    assert counting.reads[f"{d}/model.safetensors"] <= 4
