"""One fault, its consequences (issue 29, part 3): the links between rules declared as data
(``workbench/rules/consequences.py``, checked by the registry), the ledger attributing findings to
their cause on the doctor's real findings for faulty sandbox deployments (``testkit.faults``), and
the static verdict: ONE root cause with its consequences under it, nothing asked of a consequence;
two independent faults stay two root causes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.faults import build_deployment
from workbench.diagnosis.ledger import Hypothesis, Ledger, LedgerError, attribute, consequence_hypotheses, root_of
from workbench.doctor import run_doctor
from workbench.engine.launch import LaunchCommand
from workbench.rules import REGISTRY, Finding
from workbench.rules.registry import Family, Registry

ROOT = Path(__file__).resolve().parents[2]
HYPS = [(s.id, s.rules) for s, _ in REGISTRY.hypotheses()]


@pytest.fixture(scope="module")
def doctor_on(box, tmp_path_factory):
    """The doctor's findings on a sandbox deployment with ``faults`` (built once per combination)."""
    cache: dict = {}

    def run(*faults: str) -> list[Finding]:
        if faults not in cache:
            dep = build_deployment(tmp_path_factory.mktemp("-".join(faults)), *faults)
            cache[faults] = run_doctor(box, LaunchCommand.parse(dep.launch_command(30999))).findings
        return cache[faults]
    return run


def _confirmed(findings: list[Finding]) -> set[str]:
    return {hid for hid, rules in HYPS if any(f.rule in rules and f.severity == "error" for f in findings)}


def _consequences(findings: list[Finding]) -> dict[str, set[str]]:
    out = consequence_hypotheses(findings, HYPS, _confirmed(findings))
    return {hid: {e["cause_hypothesis"] for e in entries} for hid, entries in out.items()}


# ---------------------------------------------------------------------------------------------
# The declarations
# ---------------------------------------------------------------------------------------------


def test_every_declared_link_names_registered_rules_a_mechanism_and_closes_no_cycle():
    links = REGISTRY.consequences()
    assert len(links) >= 15
    for c in links:
        assert c.cause in REGISTRY and c.effect in REGISTRY and c.cause != c.effect
        assert len(c.mechanism) > 40, c  # the mechanism, with its source
        assert c.cause not in REGISTRY.reachable(c.effect), c
    pairs = {(c.cause, c.effect) for c in links}
    # the pairs of the issue, derived from the rules' mechanisms
    assert {("weight-shape-mismatch", "aux-count-mismatch"), ("hidden-size-mismatch", "weights-missing"),
            ("draft-config-vs-tensors", "weight-shape-mismatch"), ("algorithm-mismatch", "aux-count-mismatch"),
            ("vocab-size-mismatch", "lm-head-shape-mismatch"),
            ("target-no-aux-capture", "aux-layer-ids-out-of-range")} <= pairs


def test_implies_refuses_unknown_ids_self_links_duplicates_empty_mechanisms_and_cycles():
    reg = Registry()
    fam = Family("demo", "demo", "demo family", module=__name__, registry=reg)
    def check(facts):
        """A demo rule: never fires."""
        return []

    for rid in ("a", "b", "c"):
        fam.rule(rid, severities=("error",), summary=rid)(check)
    with pytest.raises(ValueError, match="no rule 'zz'"):
        reg.implies("a", "zz", mechanism="m")
    with pytest.raises(ValueError, match="its own consequence"):
        reg.implies("a", "a", mechanism="m")
    with pytest.raises(ValueError, match="mechanism"):
        reg.implies("a", "b", mechanism=" ")
    reg.implies("a", "b", mechanism="a makes b fire")
    reg.implies("b", "c", mechanism="b makes c fire")
    with pytest.raises(ValueError, match="declared twice"):
        reg.implies("a", "b", mechanism="again")
    with pytest.raises(ValueError, match="cycle"):
        reg.implies("c", "a", mechanism="c makes a fire")
    assert reg.reachable("a") == {"b", "c"} and [c.effect for c in reg.consequences(cause="a")] == ["b"]


def _rule_marks() -> set[tuple[str, str]]:
    """(module, cause) for every ``evidence["consequence_of"] = ...`` a rule module writes."""
    out = set()
    for path in sorted((ROOT / "workbench" / "rules").glob("*.py")):
        for line in path.read_text().splitlines():
            if re.search(r"""\[["']consequence_of["']\]\s*=""", line):
                out |= {(path.stem, c) for c in re.findall(r'"([a-z0-9-]+)"', line.split("=", 1)[1])}
    return out


def test_every_cause_a_rule_marks_itself_is_declared():
    """A rule that marks its finding a consequence (``evidence["consequence_of"]``) names a cause the
    declarations know: the links are data, not only ad-hoc marks."""
    marks = _rule_marks()
    assert {c for _, c in marks} >= {"algorithm-mismatch", "draft-config-vs-tensors"}
    declared = {c.cause for c in REGISTRY.consequences()}
    assert {c for _, c in marks} <= declared, marks


def test_a_co_occurring_finding_is_no_consequence_unless_its_evidence_points_at_the_cause():
    vocab = Finding("vocab-size-mismatch", "error", "draft vocab_size 512 ≠ target vocab_size 256",
                    {"draft_vocab_size_field": {"value": 512, "source": "config.json: vocab_size"}})
    own = Finding("lm-head-shape-mismatch", "error", "lm_head", {"tensor": "lm_head.weight", "shape": [128, 160],
                                                                  "param": "lm_head.weight", "expected": [512, 160]})
    other = Finding("lm-head-shape-mismatch", "error", "lm_head", {"tensor": "lm_head.weight", "shape": [256, 160],
                                                                    "param": "lm_head.weight", "expected": [128, 160]})
    assert attribute([vocab, own])[1].cause == 0
    assert attribute([vocab, other]) == {}
    found = consequence_hypotheses([vocab, own], HYPS, {"config-vs-target", "weights-loaded"})
    assert {h: [e["cause_rule"] for e in v] for h, v in found.items()} == {"weights-loaded": ["vocab-size-mismatch"]}
    # a cause that is not confirmed explains nothing
    assert consequence_hypotheses([vocab, own], HYPS, set()) == {}


def test_a_rules_own_mark_counts_and_a_condition_that_cannot_read_the_evidence_does_not():
    cause = Finding("algorithm-mismatch", "error", "EAGLE", {})
    marked = Finding("unknown-draft-architecture", "error", "x", {"consequence_of": "algorithm-mismatch"})
    garbled = Finding("aux-count-mismatch", "error", "x", {"fc_in_features": "wide"})
    links = attribute([cause, marked, garbled])
    assert links[1].cause == 0 and links[1].marked and 2 not in links
    assert root_of(1, links) == 0 and root_of(0, links) == 0


def test_the_ledger_records_a_consequence_under_its_cause():
    led = Ledger([Hypothesis("cause", "c", "confirmed"), Hypothesis("effect", "e", "confirmed")])
    led.mark_consequence("effect", ["cause"])
    assert [h.id for h in led.root_causes()] == ["cause"] and [h.id for h in led.consequences_of("cause")] == ["effect"]
    assert Ledger.from_dict(led.to_dict()).get("effect").consequence_of == ["cause"]
    assert "consequence of <code>cause</code>" in led._repr_html_()
    with pytest.raises(LedgerError):
        led.mark_consequence("effect", ["effect"])
    with pytest.raises(LedgerError):
        led.mark_consequence("effect", ["nowhere"])


# ---------------------------------------------------------------------------------------------
# The doctor's real findings on faulty sandbox deployments
# ---------------------------------------------------------------------------------------------


def test_a_transposed_fc_is_one_fault_and_the_aux_count_its_consequence(doctor_on):
    """``fc-transposed``: the loader's shape assert (weights-loaded) and the fc width it gives
    (aux-count-mismatch, the aux-layer-ids hypothesis): one cause, one consequence."""
    findings = doctor_on("fc-transposed")
    errors = {f.rule for f in findings if f.severity == "error"}
    assert errors == {"weight-shape-mismatch", "aux-count-mismatch"}
    links = attribute(findings)
    shape = next(i for i, f in enumerate(findings) if f.rule == "weight-shape-mismatch")
    assert findings[shape].evidence["tensor"] == "fc.weight" and findings[shape].evidence["shape"] == [480, 160]
    for i, f in enumerate(findings):
        if f.rule == "aux-count-mismatch":
            assert links[i].cause == shape and "fc_in_features" in links[i].mechanism
    assert _consequences(findings) == {"aux-layer-ids": {"weights-loaded"}}


def test_a_wrong_target_hidden_size_explains_the_draft_embedding_it_makes_required(doctor_on):
    findings = doctor_on("target-hidden-mismatch")
    assert {f.rule for f in findings if f.severity == "error"} == {"hidden-size-mismatch", "weights-missing"}
    assert _consequences(findings) == {"weights-loaded": {"config-vs-target"}}


def test_a_config_that_disagrees_with_its_tensors_explains_every_weight_finding(doctor_on):
    findings = doctor_on("draft-hidden-size")
    weights = [f for f in findings if f.rule in dict(HYPS)["weights-loaded"]]
    assert len(weights) >= 10
    assert _consequences(findings) == {"weights-loaded": {"config-vs-target"}}


@pytest.mark.parametrize("faults", [("eagle-flag", "d2t-missing"), ("target-no-capture", "vocab-mismatch"),
                                    ("target-hidden-mismatch", "renamed-tensor")])
def test_independent_faults_stay_root_causes(doctor_on, faults):
    """Two faults of their own: no link applies (the renamed q_proj is missing for its own reason,
    beside the embedding the wrong width makes required), so each stays a root cause."""
    findings = doctor_on(*faults)
    assert len(_confirmed(findings)) == 2, [(f.rule, f.severity) for f in findings]
    assert _consequences(findings) == {}


# ---------------------------------------------------------------------------------------------
# The static verdict (no server, no restart)
# ---------------------------------------------------------------------------------------------


def _static_verdict(tmp_path, monkeypatch, port, *faults):
    from workbench.diagnosis.run import DiagnosisRun

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    dep = build_deployment(tmp_path / "dep", *faults)
    run = DiagnosisRun.start(launch_command=dep.launch_command(port), port=port, allow_restart=False,
                             report_dir=tmp_path / "reports")
    run.progress = False
    try:
        run.measure_symptom()
        table = run.check_hypotheses()
        assert run.probe() is None and run.apply_fixes() is None
    finally:
        verdict = run.finish()
    return verdict, table


def test_the_static_verdict_names_one_root_cause_with_its_consequence_and_asks_nothing_of_it(
        tmp_path, monkeypatch, free_port):
    verdict, table = _static_verdict(tmp_path, monkeypatch, free_port, "fc-transposed")
    assert [c["hypothesis"] for c in verdict["root_causes"]] == ["weights-loaded"]
    root = verdict["root_causes"][0]
    assert root["consequences"] == [{"hypothesis": "aux-layer-ids", "rule": "aux-count-mismatch", "how": "static"}]
    assert verdict["root_cause"]["consequences"] == root["consequences"]
    (cons,) = verdict["consequences"]
    assert cons["hypothesis"] == "aux-layer-ids" and cons["cleared_by"] == ["weights-loaded"]
    assert "fc_in_features" in cons["mechanism"]
    hyp = {h["id"]: h for h in verdict["hypotheses"]}
    assert hyp["aux-layer-ids"]["verdict"] == "confirmed" and hyp["aux-layer-ids"]["consequence_of"] == ["weights-loaded"]
    assert any(e["kind"] == "consequence" for e in hyp["aux-layer-ids"]["evidence"])
    # nothing asked of the consequence: no fix of its own (none either), no parameter, nothing open
    assert not [f for f in verdict["fixes"] if set(f["rules"]) & {"aux-count-mismatch"}], verdict["fixes"]
    assert not [o for o in verdict["open"] if o["hypothesis"] == "aux-layer-ids"]
    assert all(f.get("parameter") is None for f in verdict["fixes"])
    assert "a consequence of weights-loaded" in dict((h, w) for h, _, w in table.rows)["aux-layer-ids"]


def test_the_static_verdict_keeps_two_independent_faults_as_two_root_causes(tmp_path, monkeypatch, free_port):
    verdict, _ = _static_verdict(tmp_path, monkeypatch, free_port, "eagle-flag", "d2t-missing")
    assert [c["hypothesis"] for c in verdict["root_causes"]] == ["algorithm-flag", "token-map"]
    assert verdict["consequences"] == [] and all(c["consequences"] == [] for c in verdict["root_causes"])
