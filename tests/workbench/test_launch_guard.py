"""The launch guard's decision (issue 13): which findings refuse a launch, decided by the rule's
mechanism (``prevents_start``), and the guard itself on the real doctor over real deployments on
disk (``testkit.faults``: the sandbox's committed models, faults injected). Nothing is launched
here: the slow tests (tests/sandbox/test_sandbox_faults.py, every fault launched; the diagnosis and the
sweep in tests/integration/test_launch_guard_sandbox.py) show the sandbox engine agrees."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from remote import connect
from testkit.faults import FAULTS, build_deployment
from testkit.matrix import GUARD_REFUSES as REFUSED_BY
from workbench.engine.launch import LaunchCommand
from workbench.errors import DiagnosisError, LaunchRefused
from workbench.rules import REGISTRY, Facts, Finding
from workbench.rules.launch_flags import model_path_missing, spec_params_invalid
from workbench.rules.registry import Family, Registry
from workbench.session.guard import LaunchGuard, refusing_findings

SANDBOX = f"{shlex.quote(sys.executable)} -m workbench.sandbox.launch_server"



def _guard(box, **kw) -> LaunchGuard:
    return LaunchGuard(box, engine_root=None, engine_version=None, cwd=None, **kw)


def test_only_errors_marked_prevents_start_refuse():
    stops = Finding("checkpoint-unreadable", "error", "config unreadable", prevents_start=True)
    lowers = Finding("algorithm-mismatch", "error", "EAGLE for an EAGLE-3 draft")
    warns = Finding("spec-params-invalid", "warning", "draft tokens rewritten")
    assert refusing_findings([lowers, stops, warns]) == [stops]
    assert refusing_findings([lowers, warns]) == []
    with pytest.raises(ValueError, match="only an error finding"):
        Finding("spec-params-invalid", "warning", "m", prevents_start=True)
    assert stops.to_dict()["prevents_start"] is True and lowers.to_dict()["prevents_start"] is False


def test_the_registry_marks_a_rule_that_always_stops_start_and_refuses_a_mark_from_one_that_never_does():
    reg = Registry()
    fam = Family("demo", "demo", "demo family", module=__name__, registry=reg)

    @fam.rule("stops", severities=("error", "warning"), summary="s", prevents_start="always")
    def stops(facts):
        """Always stops start-up when an error."""
        return [Finding("stops", "error", "e"), Finding("stops", "warning", "w")]

    @fam.rule("lowers", severities=("error",), summary="s")
    def lowers(facts):
        """Lowers acceptance only, yet marks its finding (a bug)."""
        return [Finding("lowers", "error", "e", prevents_start=True)]

    with pytest.raises(ValueError, match="prevents_start 'never'"):
        reg.run(Facts.of(None))
    reg2 = Registry()
    fam2 = Family("demo", "demo", "demo family", module=__name__, registry=reg2)
    fam2.rule("stops", severities=("error", "warning"), summary="s", prevents_start="always")(stops)
    error, warning = reg2.run(Facts.of(None))
    assert error.prevents_start is True and warning.prevents_start is False
    with pytest.raises(ValueError, match="needs the error severity"):
        fam2.rule("info-only", severities=("info",), summary="s", prevents_start="always")(stops)
    with pytest.raises(ValueError, match="must be one of"):
        fam2.rule("odd", severities=("error",), summary="s", prevents_start="sometimes")(stops)


def test_every_rule_declares_what_its_errors_mean_for_start_up():
    declared = {r.id: r.prevents_start for r in REGISTRY}
    # the faults that only lower acceptance never refuse a launch
    for rid in ("algorithm-mismatch", "token-map-missing",
                "vocab-size-mismatch", "acceptance-collapsed", "model-not-on-box"):
        assert declared[rid] == "never", rid
    for rid in ("checkpoint-unreadable", "model-path-missing", "launch-flag-unknown", "target-no-aux-capture",
                "weight-shape-mismatch", "unknown-draft-architecture"):
        assert declared[rid] == "always", rid
    # weights-dropped: a skipped name only lowers acceptance, but on SGLang 0.4.6-0.4.8 a stacked name no
    # parameter has is params_dict[name] in llama.py's load_weights: KeyError at start-up (test_draft_classes)
    for rid in ("spec-params-invalid", "aux-layer-ids-out-of-range", "hidden-size-mismatch", "draft-config-vs-tensors",
                "token-map-invalid", "weights-dropped",
                # weights-missing: silent on SGLang and on vLLM 0.32.0 (Eagle3LlamaForCausalLM.load_weights returns
                # nothing, so the strict check is skipped), a start-up refusal where a vLLM's loader checks
                "weights-missing"):
        assert declared[rid] == "depends", rid


def test_spec_params_findings_refuse_only_what_the_engine_refuses():
    base = "python -m sglang.launch_server --model-path /t --speculative-algorithm EAGLE3 --speculative-draft-model-path /d"
    [no_steps] = spec_params_invalid(Facts.of(base + " --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"))
    assert no_steps.severity == "error" and no_steps.prevents_start is True  # the bare assert at start-up
    [zero] = spec_params_invalid(Facts.of(base + " --speculative-num-steps 0"))
    assert zero.severity == "error" and zero.prevents_start is False  # starts, drafts nothing: the symptom
    [rewrite] = spec_params_invalid(Facts.of(base + " --speculative-num-steps 3 --speculative-eagle-topk 1 "
                                                    "--speculative-num-draft-tokens 8"))
    assert rewrite.severity == "warning" and rewrite.prevents_start is False
    [bad_int] = spec_params_invalid(Facts.of(base + " --speculative-num-steps three"))
    assert bad_int.prevents_start is True  # argparse refuses it


def test_a_command_without_model_path_is_a_finding_that_refuses():
    [f] = model_path_missing(Facts.of("python -m sglang.launch_server --speculative-algorithm EAGLE3 --port 30000"))
    assert f.rule == "model-path-missing" and f.severity == "error" and "--model-path" in f.message
    assert model_path_missing(Facts.of("python -m sglang.launch_server --model-path /t")) == []
    [g] = REGISTRY.run(Facts.of("python -m workbench.sandbox.launch_server --port 1"), family="launch-flags")
    assert g.rule == "model-path-missing" and g.prevents_start is True


def test_the_doctor_without_model_path_reports_it_and_every_other_rule_still_runs(tmp_path):
    dep = build_deployment(tmp_path / "dep")
    text = f"{SANDBOX} --speculative-algorithm EAGLE3 --speculative-draft-model-path {dep.draft_dir} --port 30999"
    from workbench.doctor import run_doctor

    with connect("local") as box:
        report = run_doctor(box, text)
    rules = [f.rule for f in report.findings]
    assert "model-path-missing" in rules
    assert report.draft_facts is not None and report.target_facts is None  # the draft was still read
    text = report.to_text()
    assert "model-path-missing" in text and "start: the server does not start" in text


@pytest.mark.parametrize("fault", sorted(REFUSED_BY))
def test_guard_refuses_exactly_the_faults_that_stop_start_up(fault, tmp_path):
    dep = build_deployment(tmp_path / "dep", *(() if fault == "healthy" else (fault,)))
    launch = LaunchCommand.parse(dep.launch_command(30999))
    with connect("local") as box:
        guard = _guard(box)
        if REFUSED_BY[fault]:
            with pytest.raises(LaunchRefused) as info:
                guard.check(launch, "as-found")
            err = info.value
            assert isinstance(err, DiagnosisError) and err.label == "as-found"
            assert {f.rule for f in err.findings} == REFUSED_BY[fault]
            assert all(f.rule in str(err) for f in err.findings) and "force_launch" in str(err)
            assert [c.decision for c in guard.checks] == ["refused"]
        else:
            assert guard.check(launch, "as-found").decision == "allowed"


def test_every_matrix_fault_is_in_the_table():
    assert set(REFUSED_BY) == set(FAULTS)


def test_a_directory_config_json_refuses_and_force_overrides(tmp_path):
    dep = build_deployment(tmp_path / "dep")
    cfg = dep.draft_dir / "config.json"
    cfg.unlink()
    cfg.mkdir()
    launch = LaunchCommand.parse(dep.launch_command(30999))
    with connect("local") as box:
        with pytest.raises(LaunchRefused) as info:
            _guard(box).check(launch, "as-found")
        assert [f.rule for f in info.value.findings] == ["checkpoint-unreadable"]
        assert "config" in info.value.findings[0].message
        forced = _guard(box, force=True)
        c = forced.check(launch, "fix")
        assert c.decision == "overridden" and [f["rule"] for f in c.findings] == ["checkpoint-unreadable"]
        assert forced.summary()["overridden"] == 1 and forced.summary()["refused"] == 0


def test_the_doctor_runs_once_per_command_and_draft_path(tmp_path):
    dep = build_deployment(tmp_path / "dep", "eagle-flag")
    launch = LaunchCommand.parse(dep.launch_command(30999))
    other_draft = launch.with_flag("--speculative-draft-model-path", str(tmp_path / "elsewhere"))
    with connect("local") as box:
        guard = _guard(box)
        assert guard.check(launch, "as-found").cached is False
        assert guard.check(launch, "probe").cached is True
        first, _ = guard.report(launch)
        assert guard.report(launch)[0] is first
        with pytest.raises(LaunchRefused):  # another draft path: the doctor again (it does not exist)
            guard.check(other_draft, "fix")
        assert [c.cached for c in guard.checks] == [False, True, False]


def test_the_command_the_original_server_runs_is_never_refused(tmp_path):
    dep = build_deployment(tmp_path / "dep", "truncated-checkpoint")
    launch = LaunchCommand.parse(dep.launch_command(30999))
    with connect("local") as box:
        guard = _guard(box, running_argv=launch.exec_argv)
        c = guard.check(launch, "probe")
        assert c.decision == "contradicted" and [f["rule"] for f in c.findings] == ["checkpoint-unreadable"]
        with pytest.raises(LaunchRefused):  # any other command is still checked
            guard.check(launch.with_flag("--speculative-num-steps", 2), "fix")


def test_launch_refused_says_what_and_where():
    f = Finding("model-path-missing", "error", "the launch command has no --model-path", prevents_start=True)
    err = LaunchRefused("python -m sglang.launch_server --port 1", "as-found", [f])
    assert err.findings == [f] and err.launch_command.endswith("--port 1")
    assert str(err).startswith("launch refused (as-found)") and "model-path-missing" in str(err)
    assert json.dumps(f.to_dict())  # what the verdict carries is JSON
