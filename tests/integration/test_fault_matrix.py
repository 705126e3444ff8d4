"""The fault matrix: the diagnosis on the sandbox box, one case per fault family, layered faults and
a healthy draft (issue 12). (The layered case over SSH is the runbook's, tests/integration/test_diagnose_sandbox.py.)

Each case builds a faulty copy of the sandbox deployment (``testkit.faults``: the faults are the
real-world ones, reproduced by the engine's own mechanism), runs the whole diagnosis in-process
(``DiagnosisRun``: symptom, static hypotheses, probe, every derived fix in one relaunch, verdict)
and asserts the verdict's rules, its root causes in the order they act, the kind of fix and, for
the fixable ones, that accept length after the fix is within 10 % of the healthy draft's, measured
in the same run. After every case the box is as found: the deployment's files and the committed
models byte for byte, no server on the port, no probe, no draft copy, no pending journal.

A case whose assertions all passed publishes its run for the rest of the session
(``testkit.session_share``: the run's inputs and its verdict's ``testkit.matrix.signature``, the
healthy accept length with the healthy one), so tests/integration/test_verdicts_under_load.py
compares its loaded runs with these rather than running the same diagnoses again.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.faults import build_deployment
from testkit.matrix import CASES, PROMPTS, entry_name, run_inputs, signature, step_times
from testkit.session_share import Publication
from workbench.diagnosis import DiagnosisRun
from workbench.session import Journal

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "workbench" / "sandbox" / "models"


def _digests(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def diagnose(tmp_path: Path, port: int, faults: tuple[str, ...], *, host: str = "local", expected=None,
             dep=None, **params):
    """Build the deployment (unless ``dep`` is given), run the whole diagnosis, return
    ``(verdict, deployment, run)``."""
    dep = dep or build_deployment(tmp_path / "deployment", *faults)
    run = DiagnosisRun.start(host=host, launch_command=dep.launch_command(port), port=port,
                             report_dir=tmp_path / "reports", expected_accept_length=expected, **PROMPTS, **params)
    run.progress = False
    return run.run_all(), dep, run


@pytest.fixture(scope="module")
def healthy(tmp_path_factory, state_dir_module):
    """The healthy deployment diagnosed first: its accept length is the level every fixable case's
    fix must reach (within 10 %), measured in the same run; its verdict says healthy."""
    from testkit.ports import free_port

    tmp = tmp_path_factory.mktemp("healthy")
    verdict, _dep, _run = diagnose(tmp, free_port(), ())
    return verdict


@pytest.fixture(scope="module")
def state_dir_module(tmp_path_factory):
    import os

    path = tmp_path_factory.mktemp("box-state")
    old = os.environ.get("EAGLE_WORKBENCH_STATE_DIR")
    os.environ["EAGLE_WORKBENCH_STATE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("EAGLE_WORKBENCH_STATE_DIR", None)
    else:
        os.environ["EAGLE_WORKBENCH_STATE_DIR"] = old


@pytest.fixture
def publication(request, tmp_path_factory):
    """This test's session-shared entry (``testkit.session_share.Publication``, named by
    ``testkit.matrix.entry_name``: the case's name, ``healthy`` for the healthy test): marked
    running now and done at teardown, passed or not; the test publishes its run into it only
    after its own assertions passed."""
    callspec = getattr(request.node, "callspec", None)
    pub = Publication(tmp_path_factory, entry_name(callspec.params["case"].name if callspec else "healthy"))
    pub.running()
    yield pub
    pub.done()


def test_a_healthy_draft_gets_a_healthy_verdict(healthy, publication):
    """No root cause, no false alarm, no restart: accept length against its ceiling, a pointer to
    the sweep runbook."""
    assert healthy["outcome"] == "healthy" and healthy["root_causes"] == [] and healthy["root_cause"]["rule"] is None
    assert not [h for h in healthy["hypotheses"] if h["verdict"] == "confirmed"]
    assert healthy["restarts"] == 0 and healthy["fix"]["applied"] is False
    assert healthy["healthy"]["accept_length"] == healthy["acceptance"]["before"]["accept_length"] > 1.8
    assert healthy["healthy"]["ceiling"] == 4.0 and "measure_acceptance" in healthy["healthy"]["note"]
    assert [f["rule"] for f in healthy["findings"] if f["severity"] == "error"] == []
    publication.publish({"inputs": run_inputs((), {}, None), "signature": signature(healthy),
                         "accept_length": healthy["acceptance"]["before"]["accept_length"],
                         "steps": step_times(healthy), "wall_s": healthy["duration_s"]})


def _box_as_found(box, port: int, state_dir: Path, digests_before: dict, roots: tuple[Path, ...]) -> None:
    assert [s for s in box.find_servers() if s.port == port] == []
    assert remote_probes.list_probes(box) == []
    assert not Journal(box).pending
    assert _digests(*roots) == digests_before
    repairs = state_dir / "repairs"
    assert not repairs.exists() or list(repairs.iterdir()) == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fault_matrix(case, healthy, tmp_path, state_dir_module, free_port, publication):
    box = connect("local")
    before_models = _digests(MODELS)
    dep = build_deployment(tmp_path / "deployment", *case.faults)
    before_deployment = _digests(dep.root)
    t0 = time.monotonic()
    verdict, dep, _run = diagnose(tmp_path, free_port, case.faults, dep=dep,
                                  expected=healthy["acceptance"]["before"]["accept_length"], **case.params)
    wall = time.monotonic() - t0
    rules = {f["rule"] for f in verdict["findings"]}
    assert set(case.rules) <= rules, (sorted(rules), verdict["notes"])
    assert [c["hypothesis"] for c in verdict["root_causes"]] == list(case.causes), verdict["root_causes"]
    assert verdict["outcome"] == case.outcome, (verdict["outcome"], verdict["fix"], verdict["open"])
    assert verdict["fix"]["kinds"] == sorted(case.kinds), verdict["fixes"]
    if case.causes:
        assert verdict["root_cause"]["hypothesis"] == case.causes[0]
    started = [launch for launch in verdict["launches"] if launch["label"] == "as-found"]
    assert bool(started and started[0].get("started", True)) == case.starts_as_found, verdict["launches"]
    if not case.starts_as_found:
        first = verdict["start_failures"][0]
        if case.refused_as_found:
            # the launch guard: the doctor's findings say it will not start; no launch is spent on it
            assert first["label"] == "as-found" and first["refused"] and not started, (first, verdict["launches"])
            assert {f["rule"] for f in first["refused"]} <= set(case.rules) | rules and \
                all(f["prevents_start"] and f["severity"] == "error" for f in first["refused"])
            assert verdict["launch_guard"]["checks"][0]["decision"] == "refused"
            assert verdict["launch_guard"]["overridden"] == 0
        else:
            assert first["log_tail"] and first["refused"] is None
        assert verdict["acceptance"]["before"]["accept_length"] is None
    else:
        assert not [c for c in verdict["launch_guard"]["checks"] if c["decision"] != "allowed"], \
            verdict["launch_guard"]  # a launch that lowers acceptance is never refused: it measures the symptom
    healthy_length = healthy["acceptance"]["before"]["accept_length"]
    if case.fixable:
        after = verdict["acceptance"]["after"]["accept_length"]
        assert after is not None and after >= 0.9 * healthy_length, (after, healthy_length, verdict["fix"])
        assert verdict["fix"]["sufficient"] is True
        trials = len(verdict["candidate_trials"])
        # a probe launch only when the probes could not ride on the fix launch, and it says why (issue 28)
        probes = [launch for launch in verdict["launches"] if launch["label"] == "probe"]
        assert len(probes) <= 1 and all(launch["reason"].startswith("probe: ") for launch in probes), probes
        if verdict["probe"].get("rides_on") == "fix":
            assert probes == [] and verdict["loads"] == 1 + int(case.starts_as_found) + trials, verdict["launches"]
        if case.starts_as_found and not trials:
            # a verified fix: one relaunch, the probes riding on it, or the probe launch before it
            # (the as-found launch is no restart)
            assert verdict["restarts"] == 1 + len(probes), [launch["label"] for launch in verdict["launches"]]
        elif case.starts_as_found:
            # a fix that had to be measured among candidates: the probe launch (when one was needed),
            # the fix of what was derived (when anything was), one relaunch per candidate
            derived = any(f["applied"] and f["kind"] != "candidates" for f in verdict["fixes"])
            assert verdict["restarts"] == len(probes) + int(derived) + trials, \
                [launch["label"] for launch in verdict["launches"]]
        elif not case.starts_as_found:
            # no probe on a server that does not start: the fix relaunch only
            assert verdict["restarts"] == 1, [launch["label"] for launch in verdict["launches"]]
    elif case.outcome == "latent":
        # a real fault, acceptance not low: its fix proposed, nothing applied, no fix relaunch
        assert verdict["acceptance"]["before"]["accept_length"] >= 0.9 * healthy_length
        assert verdict["fix"]["applied"] is False and verdict["acceptance"]["after"]["accept_length"] is None
        assert [f["kind"] for f in verdict["fixes"]] == ["draft-copy"], verdict["fixes"]
        assert verdict["root_causes"][0]["fix"] and not verdict["root_causes"][0]["fix_applied"]
        assert not [launch for launch in verdict["launches"] if launch["label"] == "fix"]
    else:
        # what is missing is said, and how to supply it
        missing = [f for f in verdict["fixes"] if f["kind"] == "none"]
        assert missing or verdict["open"], (verdict["fixes"], verdict["open"])
    if case.name == "eagle-config-missing-ids-unknown":
        # eagle_config missing and nothing records the training ids: the verdict says exactly what
        # is missing and the runbook parameter that supplies it
        missing = [f for f in verdict["fixes"] if f["kind"] == "none" and "aux-config-unread" in f["rules"]]
        assert missing and missing[0]["parameter"] == "aux_layer_ids" and "aux_layer_ids" in missing[0]["missing"]
        assert any(o["hypothesis"] == "aux-eagle-config" and o["parameter"] == "aux_layer_ids" for o in verdict["open"])
    assert all(h["evidence"] for h in verdict["hypotheses"])
    _probe_shows_the_mechanism(case, verdict)
    # the box as found
    _box_as_found(box, free_port, state_dir_module, before_deployment, (dep.root,))
    assert _digests(MODELS) == before_models
    publication.publish({"inputs": run_inputs(case.faults, case.params, healthy_length),
                         "signature": signature(verdict), "steps": step_times(verdict), "wall_s": round(wall, 1)})
    print(f"\n{case.name}: outcome {verdict['outcome']}, restarts {verdict['restarts']}, "
          f"{_acc(verdict['acceptance']['before'])} → {_acc(verdict['acceptance']['after'])} "
          f"(healthy {healthy_length:.3f}), {wall:.1f} s")


def _probe_shows_the_mechanism(case, verdict) -> None:
    """What the probe launch showed on the engine's code path, per family (a server that does not
    start as found has no probe launch: its log is the evidence)."""
    probe = verdict["probe"]
    if not case.starts_as_found or case.outcome in ("cause-found",):
        assert "lines" not in probe or not any(probe["lines"].values()), probe
        return
    rides = probe.get("rides_on") == "fix"  # no probe launch: the readings are the fixed server's (issue 28)
    if "eagle-flag" in case.faults:
        if rides:  # as found, read live: its /server_info's algorithm through the code-path map
            assert verdict["live"]["fc_widths_as_found"] == [160] and probe["observed_hidden_size"] is None, probe
        else:
            assert probe["observed_widths"] == [160] and probe["captured_layers"] == [], probe
        assert probe["after_fix_widths"] and 480 in probe["after_fix_widths"], probe
    elif "no-eagle-config" in case.faults:
        # as found the target's default layers, not [2, 4, 7]; the fixed draft copy's ids, read on the fix
        assert probe["captured_layers"] == ([2, 4, 7] if rides else [2, 4, 5]), probe
    elif "aux-ids-shifted" in case.faults:
        assert probe["captured_layers"] == ([2, 4, 7] if rides else [1, 3, 6]), probe
    if "renamed-tensor" in case.faults and rides:
        assert probe["unmatched"] == [], probe  # the fixed draft copy: nothing dropped any more
    elif "renamed-tensor" in case.faults:
        # the name as load_weights holds it after its own midlayer -> layers.0 rewrite
        assert [n.rsplit("layers.0.", 1)[-1] for n in probe["unmatched"]] == ["self_attn.qproj.weight"], probe
    elif "unmatched" in probe:
        assert probe["unmatched"] == [], probe
    if "d2t-minus-arange" in case.faults and "eagle-flag" not in case.faults:
        assert probe["d2t"], probe
    for group in (probe.get("lines") or {}, probe.get("after_fix_lines") or {}):  # the lines of one launch each
        for tag, lines in group.items():
            pgids = {line.split("pgid=")[1].split()[0] for line in lines if "pgid=" in line}
            assert len(pgids) <= 1, (tag, lines)


def _acc(m: dict) -> str:
    return "—" if m.get("accept_length") is None else f"{m['accept_length']:.3f}"


def test_static_root_cause_without_restarts(tmp_path, state_dir_module, free_port):
    """allow_restart False: the layered causes are named from the static evidence alone, with 0
    restarts and no launch."""
    verdict, _dep, _run = diagnose(tmp_path, free_port, ("eagle-flag", "d2t-minus-arange"), allow_restart=False)
    assert [c["hypothesis"] for c in verdict["root_causes"]] == ["algorithm-flag", "token-map"]
    assert verdict["restarts"] == 0 and verdict["launches"] == [] and verdict["outcome"] == "cause-found"
    assert verdict["fix"]["launch_command"] and "--speculative-algorithm EAGLE3" in verdict["fix"]["launch_command"]


def test_attribute_fixes_shows_what_each_fix_contributed(healthy, tmp_path, state_dir_module, free_port):
    """attribute_fixes: one relaunch per fix, cumulative in the order the causes act; the flag alone
    does not bring acceptance back (the broken token map masks it), both fixes do."""
    verdict, _dep, run = diagnose(tmp_path, free_port, ("eagle-flag", "d2t-minus-arange"), attribute_fixes=True,
                                  expected=healthy["acceptance"]["before"]["accept_length"])
    ladder = verdict["ladder"]
    assert [r["label"].split(":")[0] for r in ladder][0] == "as found" and len(ladder) == 3
    first, flag_only, both = (r["accept_length"] for r in ladder)
    assert both >= 0.9 * healthy["acceptance"]["before"]["accept_length"]
    assert flag_only < 0.8 * both and first < 0.8 * both
    assert "ladder" in run.figures()
