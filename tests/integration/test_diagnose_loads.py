"""Loads are the cost the diagnosis minimises (issue 28): the reference case (the sandbox box with
``--speculative-algorithm EAGLE`` instead of ``EAGLE3``) on a box where the server already runs is
``fixed`` in two loads — the fix launch, the probes riding on it, and the restore — one with
``keep_fix``; the cause is confirmed before any restart from what the running server shows (its
``/server_info`` through the code-path map); a probe launch is spent only when a hypothesis cannot
be decided otherwise, and says why. Stack dumps of the running server with ``py-spy`` are opt-in: a
box without it gets a note.

Real sandbox server processes, real HTTP, the real probes in this checkout's sandbox engine."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from remote import connect
from testkit.faults import build_deployment
from workbench.diagnosis import DiagnosisRun
from workbench.diagnosis.steps.live import stack_dumps
from workbench.sandbox_box import sandbox_launch_command

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = json.loads((ROOT / "workbench" / "sandbox" / "models" / "target" / "config.json").read_text())["hidden_size"]
SMALL = {"num_prompts": 4, "max_new_tokens": 64}  # as the runbook tests: the fix measured clear of the thresholds


def _servers_on(box, port):
    return [s for s in box.find_servers() if s.port == port]


def _start(tmp_path, port, *extra):
    """The sandbox box with the wrong flag serving on ``port`` (a user's server: ``extra`` flags)."""
    box = connect("local")
    handle = box.launch_server(shlex.split(sandbox_launch_command(port=port)) + list(extra), port=port,
                               log_path=tmp_path / "original.log")
    box.wait_healthy(handle, timeout=180)
    return box, handle


@pytest.fixture
def running_box(tmp_path, free_port, state_dir):
    """The sandbox box with the wrong flag, already serving on ``free_port`` (started here, as a
    user's server; stopped at the end, whatever the run left)."""
    box = connect("local")
    handle = box.launch_server(shlex.split(sandbox_launch_command(port=free_port)), port=free_port,
                               log_path=tmp_path / "original.log")
    box.wait_healthy(handle, timeout=180)
    yield box, handle, free_port
    for s in _servers_on(box, free_port):
        box.stop_server(s)


def _phases_end_ready(launch):
    names = [p["name"] for p in launch["phases"] or []]
    return bool(names) and names[-1] == "ready" and launch["ready_after_s"] > 0


def test_the_reference_case_on_a_running_box_costs_two_loads(tmp_path, running_box):
    box, handle, port = running_box
    run = DiagnosisRun.start(port=port, report_dir=tmp_path / "reports", **SMALL)
    run.progress = False
    run.measure_symptom()
    run.check_hypotheses()
    # before any restart: the running server's own account of what it does
    assert run.live["server_info"]["speculative_algorithm"] == "EAGLE"
    assert run.live["fc_widths_as_found"] == [HIDDEN]
    assert run.launches == [] and box.process(handle.pid) is not None  # nothing restarted yet
    assert run.ledger.get("algorithm-flag").verdict == "confirmed"
    placed = run.probe()
    assert placed.verdict == "placed" and run.launches == []  # the probes wait for the fix launch
    for step in ("apply_fixes", "attribute"):
        getattr(run, step)()
    verdict = run.finish()
    assert verdict["outcome"] == "fixed" and verdict["root_cause"]["rule"] == "algorithm-mismatch"
    assert verdict["loads"] == 2 and verdict["restarts"] == 2
    assert [(launch["label"], launch["reason"]) for launch in verdict["launches"]] == [
        ("fix", "fix: measure the fix for algorithm-mismatch with the probes riding on it"),
        ("restore", "restore: relaunch the server as found")]
    assert all(_phases_end_ready(launch) for launch in verdict["launches"]), verdict["launches"]
    # downtime: from each stop of what served until the next server was ready, summed
    gaps = [launch["ready_at"] - launch["stopped_at"] for launch in verdict["launches"]]
    assert verdict["downtime_s"] > 0 and verdict["downtime_s"] == pytest.approx(sum(gaps), abs=0.05)
    assert [s["state"] for s in verdict["timeline"]] == ["serving as found", "down", "serving fixed", "down",
                                                         "restored"]
    # the mechanism: the fixed server's draft gets fc's width; as found, the code path says it never does
    assert verdict["probe"]["after_fix_hidden_size"] == 3 * HIDDEN
    assert verdict["root_cause"]["mechanism_confirmed_by_probe"] is True
    # TP 1: the scheduler runs in the launcher's process, no torch.distributed, no TP title: rank unknown
    assert [(e["rank"], e["pid"]) for e in verdict["probe"]["ranks"]] == [(None, verdict["launches"][0]["pid"])]
    assert "box_timeline" in run.figures()
    servers = _servers_on(box, port)
    assert len(servers) == 1 and servers[0].pid != handle.pid  # the original relaunched


def test_the_reference_case_at_tp2_costs_two_loads_and_every_rank_prints_its_width_sandbox_gpus(
        tmp_path, free_port, state_dir):
    """The same case on a TP 2 server (a launcher and two rank processes, sglang::scheduler_TP0/1,
    torch.distributed initialised; the GPUs are the sandbox's): two loads, the probes riding on the
    fix launch, one width per rank, both ranks agreeing."""
    box, handle = _start(tmp_path, free_port, "--tp-size", "2")
    try:
        titles = sorted(" ".join(p.argv) for p in box.process_tree(handle.pid) if p.argv and
                        p.argv[0].startswith("sglang::scheduler"))
        assert titles == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"], titles
        run = DiagnosisRun.start(port=free_port, report_dir=tmp_path / "reports", **SMALL)
        run.progress = False
        verdict = run.run_all()
        assert verdict["outcome"] == "fixed" and verdict["loads"] == 2 and verdict["downtime_s"] > 0
        assert [launch["reason"] for launch in verdict["launches"]] == [
            "fix: measure the fix for algorithm-mismatch with the probes riding on it",
            "restore: relaunch the server as found"]
        assert all(_phases_end_ready(launch) for launch in verdict["launches"]), verdict["launches"]
        assert sorted(verdict["launches"][0]["startup"]["ranks_seen"]) == ["TP0", "TP1"]  # in the order first seen
        ranks = verdict["probe"]["ranks"]
        assert [(e["rank"], e["value"]) for e in ranks] == [(0, 3 * HIDDEN), (1, 3 * HIDDEN)], ranks
        assert verdict["probe"]["ranks_disagree"] == [] and verdict["probe"]["after_fix_hidden_size"] == 3 * HIDDEN
        assert all(" rank=" in line for line in verdict["probe"]["after_fix_lines"]["draft-input-width"])
        servers = _servers_on(box, free_port)
        assert len(servers) == 1 and "--tp-size" in servers[0].argv  # the original, as found, back
    finally:
        for s in _servers_on(box, free_port):
            box.stop_server(s)


def test_keep_fix_costs_one_load(tmp_path, running_box):
    box, handle, port = running_box
    run = DiagnosisRun.start(port=port, report_dir=tmp_path / "reports", keep_fix=True, **SMALL)
    run.progress = False
    verdict = run.run_all()
    assert verdict["outcome"] == "fixed" and verdict["fix"]["kept"] is True
    assert verdict["loads"] == 1 and [launch["label"] for launch in verdict["launches"]] == ["fix"]
    fix = verdict["launches"][0]
    # down from the stop of the server as found until the fixed one was ready; then it serves on
    assert verdict["downtime_s"] == pytest.approx(fix["ready_at"] - fix["stopped_at"], abs=0.05)
    assert verdict["timeline"][-1]["state"] == "serving fixed"
    servers = _servers_on(box, port)
    assert len(servers) == 1 and servers[0].pid == verdict["fix"]["kept_server"]["pid"]


def test_a_hypothesis_with_no_fix_still_gets_its_probe_launch_and_says_why(tmp_path, free_port, state_dir):
    """The draft's eagle_config is gone and nothing says which aux layers it was trained on: no fix
    can be derived, so the probes need a launch of their own, and its reason names the hypothesis."""
    dep = build_deployment(tmp_path / "deployment", "no-eagle-config")
    run = DiagnosisRun.start(launch_command=dep.launch_command(free_port), port=free_port,
                             report_dir=tmp_path / "reports", **SMALL)
    run.progress = False
    verdict = run.run_all()
    probes = [launch for launch in verdict["launches"] if launch["label"] == "probe"]
    assert len(probes) == 1, (verdict["launches"], verdict.get("start_failures"), verdict["outcome"], verdict.get("outcome_detail"))
    assert probes[0]["reason"].startswith("probe: aux-eagle-config could not be decided from the running server and "
                                          "the code path (no fix derivable), and no fix launch will carry the probes "
                                          "(no confirmed cause has a fix)"), probes[0]["reason"]
    assert verdict["probe"].get("rides_on") is None and verdict["probe"]["observed_hidden_size"] is not None
    assert verdict["loads"] == len([launch for launch in verdict["launches"] if launch["pid"] is not None])
    assert _servers_on(connect("local"), free_port) == []


def test_live_evidence_reads_metrics_and_the_log_without_a_restart(tmp_path, free_port, state_dir):
    """A server running with --enable-metrics, diagnosed with no restart allowed: the live step
    reads /server_info, the ``sglang:spec_accept_length`` gauge of /metrics and the last decode
    line of its log — the gauge is that line's accept len (SGLang sets both at the decode log
    tick) — and confirms through the code path what the flag does, with nothing relaunched."""
    box, handle = _start(tmp_path, free_port, "--enable-metrics")
    try:
        run = DiagnosisRun.start(port=free_port, report_dir=tmp_path / "reports", allow_restart=False, **SMALL)
        run.progress = False
        verdict = run.run_all()
        live = verdict["live"]
        assert live["server_info"]["enable_metrics"] is True and "metrics" not in live
        assert live["spec_accept_length"] == pytest.approx(live["log_accept_length"], abs=0.006)
        assert live["log_accept_length"] < 1.3  # the symptom, seen live
        assert live["fc_widths_as_found"] == [HIDDEN]
        assert verdict["loads"] == 0 and verdict["launches"] == [] and verdict["downtime_s"] == 0
        assert [s["state"] for s in verdict["timeline"]] == ["serving as found"]
        assert verdict["root_cause"]["hypothesis"] == "algorithm-flag"
        assert box.process(handle.pid) is not None  # never restarted
    finally:
        for s in _servers_on(box, free_port):
            box.stop_server(s)


def test_stack_dumps_without_py_spy_are_a_note(running_box, monkeypatch):
    """No py-spy on the box's PATH: a note naming it, no dump, nothing raised."""
    box, handle, _port = running_box
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    got = stack_dumps(box, handle.pid)
    assert got["dumps"] == [] and "py-spy is not installed" in got["note"]


def test_stack_dumps_of_a_running_sandbox_server(running_box):
    """py-spy installed: each process of the running server dumped, no restart, the server still
    serving (skipped, saying so, where py-spy is not installed)."""
    if shutil.which("py-spy") is None:
        pytest.skip("py-spy is not installed here (pip install py-spy puts it on PATH)")
    box, handle, _port = running_box
    got = stack_dumps(box, handle.pid)
    assert got["note"] is None, got
    pids = {p.pid for p in box.process_tree(handle.pid)}
    assert {d["pid"] for d in got["dumps"]} == pids and handle.pid in pids
    main = next(d for d in got["dumps"] if d["pid"] == handle.pid)
    assert main["lines"][0].startswith(f"Process {handle.pid}:") and any("Thread" in ln for ln in main["lines"])
    assert box.is_alive(handle.pid)
