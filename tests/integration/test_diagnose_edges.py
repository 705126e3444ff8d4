"""The diagnosis at its edges, on the sandbox box (real server processes, real HTTP): a server that
stalls at start-up, a port held by something else, a launch the engine refuses, keeping the fix, a
launch command with relative model paths or an environment prefix, and parameters refused before
anything touches the box. Each ends with a verdict (or a typed error)
and nothing the run launched left running.
"""

from __future__ import annotations

import http.server
import os
import shlex
import threading
from pathlib import Path

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.faults import build_deployment
from workbench.diagnosis import DiagnosisRun
from workbench.errors import DiagnosisError
from workbench.session import Journal

pytestmark = pytest.mark.slow

PROMPTS = dict(num_prompts=2, max_new_tokens=32)


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    path = tmp_path / "box-state"
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(path))
    return path


def _run(tmp_path: Path, launch_command: str, port: int, **params) -> tuple[dict, DiagnosisRun]:
    run = DiagnosisRun.start(launch_command=launch_command, port=port, report_dir=tmp_path / "reports",
                             **{**PROMPTS, **params})
    run.progress = False
    return run.run_all(), run


def _nothing_left(port: int) -> None:
    with connect("local") as box:
        assert [s for s in box.find_servers() if s.port == port] == []
        assert remote_probes.list_probes(box) == [] and not Journal(box).pending


def test_a_server_that_stalls_at_start_up_is_stopped_not_left(tmp_path, state_dir, free_port):
    """A start-up that hangs in a phase (``--sandbox-fault hang:load``: the load's first line, then
    nothing: no log line, no CPU time) is given up after ``server_start_timeout`` seconds without
    progress (a stall time-out: a start that progresses is waited for), the run stops the server it
    launched (it would hold the port and every later launch would fail), and the verdict says the
    server does not start, naming the phase, never that a fix was applied and measured."""
    dep = build_deployment(tmp_path / "deployment", "eagle-flag")
    verdict, run = _run(tmp_path, dep.launch_command(free_port) + " --sandbox-fault hang:load", free_port,
                        server_start_timeout=2.0)
    assert verdict["outcome"] in ("server-does-not-start", "cause-found"), verdict["outcome"]
    assert verdict["start_failures"] and verdict["start_failures"][0]["error"].startswith("ServerStartStalled")
    assert "start-up phase 'load'" in verdict["start_failures"][0]["error"], verdict["start_failures"][0]["error"]
    assert verdict["fix"]["sufficient"] is not True and verdict["acceptance"]["after"]["accept_length"] is None
    for launch in verdict["launches"]:
        assert launch.get("pid") is None or not _alive(launch["pid"]), launch
    _nothing_left(free_port)


def _alive(pid: int) -> bool:
    """Running (a zombie the local box has not reaped yet is gone)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_port_held_by_another_program_is_a_symptom_with_a_verdict(tmp_path, state_dir, free_port):
    """Something that is no engine server listens on the port: the launch is refused (PortInUse), the
    verdict is written, and that program is left alone."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        dep = build_deployment(tmp_path / "deployment")
        verdict, _run_ = _run(tmp_path, dep.launch_command(free_port), free_port)
        assert verdict["outcome"] == "server-does-not-start"
        failure = verdict["start_failures"][0]
        assert "PortInUse" in failure["error"] and str(free_port) in failure["exception"]
        assert verdict["restarts"] == 0
        assert thread.is_alive()  # never stopped
    finally:
        server.shutdown()
        server.server_close()


def test_a_flag_value_the_engine_refuses_is_named_from_the_log(tmp_path, state_dir, free_port):
    """The engine's argparse refuses a value: the doctor says so statically (``launch-flag-unknown``:
    an int flag's value is not an int) and the launch guard spends no launch on it; forced past the
    guard, the verdict names the log's own error line, not the generic "exited before /health", and
    the open list asks for the server to start instead of runtime-only causes that need a serving
    server to matter."""
    dep = build_deployment(tmp_path / "deployment")
    command = dep.launch_command(free_port) + " --decode-log-interval notanint"
    guarded, _run_ = _run(tmp_path / "guarded", command, free_port)
    assert "launch-flag-unknown" in {c["rule"] for c in guarded["root_causes"]}, guarded["root_causes"]
    assert guarded["start_failures"] == [] or not guarded["start_failures"][0].get("exception")
    _nothing_left(free_port)
    verdict, _run_ = _run(tmp_path, command, free_port, force_launch=True)
    # forced: the launch is spent, the server does not start, and the static cause explains why
    assert verdict["outcome"] == "cause-found", verdict["outcome"]
    assert "launch-flag-unknown" in {c["rule"] for c in verdict["root_causes"]}
    exception = verdict["start_failures"][0]["exception"]
    assert exception and "--decode-log-interval" in exception and "notanint" in exception, exception
    opened = [o["hypothesis"] for o in verdict["open"]]
    assert "chat-template" not in opened and "quantised-target" not in opened, opened
    assert not any("acceptance is not low" in n for n in verdict["notes"]), verdict["notes"]
    _nothing_left(free_port)


def test_keep_fix_leaves_the_fixed_server_and_says_so(tmp_path, state_dir, free_port):
    """keep_fix: the fixed server (on the repaired copy) stays in place of the original, the journal
    forgets both, and the report says the copy is kept and how to stop the server."""
    dep = build_deployment(tmp_path / "deployment", "renamed-tensor")
    run = DiagnosisRun.start(launch_command=dep.launch_command(free_port), port=free_port,
                             report_dir=tmp_path / "reports", keep_fix=True, num_prompts=4, max_new_tokens=64,
                             expected_accept_length=2.0)
    run.progress = False
    kept = None
    try:
        run.measure_symptom()
        run.check_hypotheses()
        run.probe()
        run.apply_fixes()
        summary = run.summary_html()  # what the runbook shows before finish
        verdict = run.finish()
        assert verdict["outcome"] == "fixed" and verdict["fix"]["kept"] is True
        kept = verdict["fix"]["kept_server"]
        copy = verdict["fix"]["draft_copies"][0]
        assert copy["kept"] is True and Path(copy["path"]).is_dir()
        assert "(kept: the fixed server uses it)" in summary and "removed at the end" not in summary
        assert f"pid {kept['pid']}" in summary and f"kill -TERM -- -{kept['pgid']}" in summary
        assert "(kept: the fixed server uses it)" in run.summary_html()
        with connect("local") as box:
            servers = [s for s in box.find_servers() if s.port == free_port]
            assert [s.pid for s in servers] == [kept["pid"]]
            assert copy["path"] in " ".join(servers[0].argv)
            assert not Journal(box).pending
    finally:
        with connect("local") as box:
            for s in box.find_servers():
                if s.port == free_port:
                    box.stop_server(s)
            if kept is not None:
                box.run(["rm", "-rf", "--", verdict["fix"]["draft_copies"][0]["path"]], timeout=30)
        if not run.finished:
            run.finish()


def test_relative_model_paths_resolve_where_the_launched_server_starts(tmp_path, state_dir, free_port,
                                                                       monkeypatch):
    """No server runs and the given command names its models relative to the driver's cwd (the
    user's `--model-path ../cases/rel/target` from /tmp/trial2): the doctor reads them where the
    launched server starts, so the real cause (the algorithm flag) is named, never
    checkpoint-unreadable, and the relaunch that fixes it starts there too."""
    dep = build_deployment(tmp_path / "cases" / "rel", "eagle-flag")
    trial = tmp_path / "trial2"
    trial.mkdir()
    monkeypatch.chdir(trial)
    argv = dep.argv(free_port)
    rel = {str(dep.target_dir): os.path.relpath(dep.target_dir, trial),
           str(dep.draft_dir): os.path.relpath(dep.draft_dir, trial)}
    argv = [rel.get(a, a) for a in argv]
    assert "../cases/rel/target" in argv and "../cases/rel/draft" in argv
    verdict, run = _run(tmp_path, shlex.join(argv), free_port, num_prompts=4, max_new_tokens=64,
                        expected_accept_length=2.0)  # as keep_fix's test: enough tokens to judge the fix
    rules = {f["rule"] for f in verdict["findings"]}
    assert "checkpoint-unreadable" not in rules, [f["message"] for f in verdict["findings"]]
    assert run.inventory.server_cwd == str(trial.resolve()) == verdict["inventory"]["server_cwd"]
    assert run.inventory.resolved.get("--model-path") == str(dep.target_dir.resolve())
    assert [c["hypothesis"] for c in verdict["root_causes"]] == ["algorithm-flag"], verdict["root_causes"]
    assert verdict["outcome"] == "fixed" and verdict["fix"]["sufficient"] is True, (verdict["outcome"], verdict["fix"])
    assert "../cases/rel/target" in verdict["fix"]["launch_command"]  # the command as given, fixed
    assert verdict["start_failures"] == []
    _nothing_left(free_port)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


def test_an_environment_prefix_is_the_servers_environment_not_its_program(tmp_path, state_dir, free_port):
    """`FOO=1 python -m ...`: the server starts (the prefix is no program to exec), FOO=1 is really
    in its environment, its command line is the program without the prefix, and the verdict's
    launches show the command as given, prefix included."""
    dep = build_deployment(tmp_path / "deployment")
    command = "FOO=1 EWB_EDGE='a b' " + dep.launch_command(free_port)
    run = DiagnosisRun.start(launch_command=command, port=free_port, report_dir=tmp_path / "reports", **PROMPTS)
    run.progress = False
    try:
        symptom = run.measure_symptom()
        assert run.start_failures == [], [f.to_dict() for f in run.start_failures]
        assert symptom is not None and symptom.generate.accept_length, symptom
        pid = run.current.pid
        env = _environ(pid)
        assert env.get("FOO") == "1" and env.get("EWB_EDGE") == "a b"
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert cmdline == dep.argv(free_port)
    finally:
        verdict = run.finish()
    assert verdict["launches"] and all(launch["launch_command"].startswith("FOO=1 EWB_EDGE='a b' ")
                                       for launch in verdict["launches"]), verdict["launches"]
    assert verdict["inventory"]["launch_command"].startswith("FOO=1 ")
    _nothing_left(free_port)


@pytest.mark.parametrize("params, problem", [
    ({"allow_restart": "no"}, "allow_restart must be True or False, got 'no'"),
    ({"attribute_fixes": "maybe"}, "attribute_fixes must be True or False"),
    ({"keep_fix": 1}, "keep_fix must be True or False"),
    ({"num_prompts": 0}, "num_prompts must be None (all) or a whole number ≥ 1, got 0"),
    ({"num_prompts": "abc"}, "num_prompts must be None (all)"),
    ({"max_new_tokens": -5}, "max_new_tokens must be a whole number ≥ 1, got -5"),
    ({"server_start_timeout": 0}, "server_start_timeout must be a number of seconds > 0"),
    ({"request_timeout": -1}, "request_timeout must be a number of seconds > 0 (at most 1000000), got -1"),
])
def test_bad_parameters_are_refused_before_the_box_is_touched(tmp_path, state_dir, params, problem):
    """Each bad value is named with what it must be, before anything connects or changes."""
    with pytest.raises(DiagnosisError, match="bad parameters") as info:
        DiagnosisRun.start(launch_command="python -m sglang.launch_server --model-path /nonexistent",
                           report_dir=tmp_path / "reports", **params)
    assert problem in str(info.value)
    assert not state_dir.exists() or not (state_dir / "journal.json").exists()


def test_every_bad_parameter_is_named_at_once(tmp_path, state_dir):
    with pytest.raises(DiagnosisError) as info:
        DiagnosisRun.start(allow_restart="no", num_prompts=0, report_dir=tmp_path / "reports")
    assert "allow_restart" in str(info.value) and "num_prompts" in str(info.value)


def test_a_server_without_speculation_is_never_healthy(tmp_path, state_dir, free_port):
    """The launch command names no speculative algorithm (the flag dropped on the way): the server
    serves, no response carries a verify step, and the verdict says there is no speedup at all."""
    from workbench.engine.launch import LaunchCommand

    dep = build_deployment(tmp_path / "deployment")
    command = LaunchCommand.parse(dep.launch_command(free_port))
    for flag in [f for f in command.flags() if f.startswith("--speculative-")]:
        command = command.without_flag(flag)
    verdict, run = _run(tmp_path, command.to_string(), free_port)
    assert verdict["acceptance"]["before"]["speculative"] is False, verdict["acceptance"]
    assert verdict["outcome"] != "healthy" and verdict["healthy"] is None
    assert any("WITHOUT speculative decoding" in n for n in verdict["notes"]), verdict["notes"]
    _nothing_left(free_port)


def test_finish_twice_restores_again_and_rewrites_the_verdict_and_a_step_after_it_is_refused(
        tmp_path, state_dir, free_port):
    """Issue 15: a second finish() restores again (nothing to do) and rewrites the verdict file;
    a step on the finished run raises DiagnosisError instead of relaunching the original server."""
    dep = build_deployment(tmp_path / "deployment", "eagle-flag")
    run = DiagnosisRun.start(launch_command=dep.launch_command(free_port), port=free_port,
                             report_dir=tmp_path / "reports", **PROMPTS)
    run.progress = False
    try:
        run.measure_symptom()
    finally:
        first = run.finish()
    path = tmp_path / "reports" / "diagnose_acceptance.json"
    assert path.is_file() and "restore_again" not in first
    path.unlink()
    second = run.finish()
    assert path.is_file(), "the second finish rewrote the verdict"
    assert second["restore_again"] == ["nothing to do"]
    assert second["outcome"] == first["outcome"]
    for step in ("measure_symptom", "check_hypotheses", "probe", "apply_fixes", "attribute"):
        with pytest.raises(DiagnosisError, match=f"DiagnosisRun.{step}\\(\\): this run finished"):
            getattr(run, step)()
    _nothing_left(free_port)
