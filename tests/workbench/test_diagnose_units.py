"""Unit tests of the diagnosis's helpers that need no sandbox server: paths resolved against the
server's cwd, the engine package named by a launch command, the server's interpreter."""

import os
import sys
from pathlib import Path

import pytest

from remote import connect
from workbench.engine.locate import engine_package, server_python
from workbench.session.inventory import absolutize
from workbench.sandbox_box import sandbox_launch_command
from workbench.engine.launch import LaunchCommand

TINY_SERVER = Path(__file__).resolve().parent.parent / "remote" / "tiny_launch_server.py"


@pytest.fixture
def box(tmp_path):
    with connect("local", state_dir=tmp_path / "state") as b:
        yield b


def test_absolutize_resolves_relative_model_dirs_against_the_server_cwd(box, tmp_path):
    (tmp_path / "models" / "draft").mkdir(parents=True)
    (tmp_path / "models" / "target").mkdir(parents=True)
    launch = LaunchCommand.parse("python -m sglang.launch_server --model-path ./models/target "
                                 "--speculative-algorithm EAGLE3 --speculative-draft-model-path models/draft "
                                 "--tokenizer-path moonshotai/Kimi-K2.5")
    out = absolutize(box, launch, str(tmp_path))
    assert out.get("--model-path") == str(tmp_path / "models" / "target")
    assert out.get("--speculative-draft-model-path") == str(tmp_path / "models" / "draft")
    # not a directory under the cwd: a Hugging Face repo id, kept as written
    assert out.get("--tokenizer-path") == "moonshotai/Kimi-K2.5"
    assert absolutize(box, launch, None) is launch


@pytest.mark.parametrize("text, package", [
    ("python -m sglang.launch_server --model-path /m", "sglang"),
    ("sglang serve /m", "sglang"),
    ("python -m workbench.sandbox.launch_server --model-path /m", "workbench.sandbox"),
])
def test_engine_package(text, package):
    assert engine_package(LaunchCommand.parse(text)) == package


@pytest.mark.slow  # launches a server on the box
def test_server_python_keeps_the_venv_interpreter(box, tmp_path):
    """/proc/PID/exe of a venv's python is the base interpreter, which lacks the venv's packages;
    the diagnosis must run the engine lookups with argv[0] (absolute, or found on the server's PATH)."""
    venv_python = sys.executable
    argv = [venv_python, str(TINY_SERVER), "--port", "0"]
    handle = box.launch_server(argv, port=1, log_path=tmp_path / "s.log",
                               env={"PATH": f"{Path(venv_python).parent}:/usr/bin:/bin"})
    try:
        (server,) = [s for s in box.find_servers(str(TINY_SERVER)) if s.pid == handle.pid]
        absolute = LaunchCommand.parse(f"{venv_python} -m sglang.launch_server --model-path /m")
        assert server_python(box, absolute, server, timeout=10) == venv_python
        relative = LaunchCommand.parse(f"{Path(venv_python).name} -m sglang.launch_server --model-path /m")
        assert server_python(box, relative, server, timeout=10) == venv_python
    finally:
        box.stop_server(handle, grace=2)


def test_sandbox_launch_command_names_the_wrong_flag_and_the_committed_models():
    launch = LaunchCommand.parse(sandbox_launch_command(port=30111))
    assert launch.engine == "sandbox"
    assert launch.get("--speculative-algorithm") == "EAGLE"
    assert launch.get("--port") == "30111"
    assert os.path.isdir(launch.get("--model-path")) and os.path.isdir(launch.get("--speculative-draft-model-path"))


def test_only_launch_commands_count_as_servers():
    """A process that merely mentions sglang / launch_server (this workbench's own command line with a
    launch_command parameter, `tail -f sglang.log`) is not a server."""
    from workbench.engine.locate import is_launch_argv

    assert is_launch_argv(["python3", "-m", "sglang.launch_server", "--model-path", "/m"])
    assert is_launch_argv(["/v/bin/python", "-m", "workbench.sandbox.launch_server", "--model-path", "/m"])
    assert not is_launch_argv(["/v/bin/python", "/v/bin/workbench", "runbook", "diagnose_acceptance", "-p",
                                "launch_command", "python -m sglang.launch_server --model-path /m"])
    assert not is_launch_argv(["tail", "-f", "/var/log/sglang.log"])


def test_a_second_diagnosis_refuses_while_the_first_runs(tmp_path, monkeypatch):
    from workbench.errors import DiagnosisError
    from workbench.diagnosis.run import DiagnosisRun
    from workbench.session.journal import Journal

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    first = Journal(connect("local"))
    first.begin()
    first.begin_launch(port=1, argv=["python3", "-m", "sglang.launch_server"], label="probe")
    with pytest.raises(DiagnosisError, match="another diagnosis"):
        DiagnosisRun.start(host="local", port=1)


def test_evidence_cells_show_value_and_source_escaped():
    from workbench.report.tables import html_table

    out = html_table([("speculative_algorithm", {"value": "<EAGLE>", "source": "launch command: --speculative-algorithm"}),
                       ("fc_in_features", {"value": 576, "source": None}), ("ids", [1, 3, 4])])
    assert "<code>&lt;EAGLE&gt;</code><br><small" in out and "from launch command: --speculative-algorithm" in out
    assert "from (source not recorded)" in out
    assert "<code>[1, 3, 4]</code>" in out and "'value'" not in out


def test_the_sandbox_default_is_refused_on_a_box_that_lacks_it(box, tmp_path, free_port):
    from workbench.errors import DiagnosisError
    from workbench.session.inventory import take_inventory

    elsewhere = sandbox_launch_command(port=free_port).replace(str(Path(sys.executable)),
                                                                str(tmp_path / "nowhere" / "python3"))
    with pytest.raises(DiagnosisError) as info:
        take_inventory(box, launch_command=None, port=free_port, default_launch=elsewhere)
    assert str(tmp_path / "nowhere" / "python3") in str(info.value) and "launch_command" in str(info.value)
    # on this machine the default is there: the inventory plans to launch it
    inv = take_inventory(box, launch_command=None, port=free_port,
                         default_launch=sandbox_launch_command(port=free_port))
    assert inv.server_pid is None and inv.launch.get("--port") == str(free_port)


def test_static_hypotheses_name_the_root_cause_before_any_restart(tmp_path, monkeypatch, free_port):
    """The hypotheses are decided from the doctor first: with restarts forbidden and no server
    running, nothing is measured, yet the sandbox's wrong flag is still the root cause, with its
    proposed fix (not applied), and the verdict records zero restarts."""
    import json

    from workbench.diagnosis.run import DiagnosisRun

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    run = DiagnosisRun.start(port=free_port, allow_restart=False, report_dir=tmp_path / "reports")
    try:
        assert run.measure_symptom() is None
        verdicts = {h: v for h, v, _ in run.check_hypotheses().rows}
        assert verdicts["algorithm-flag"] == "confirmed" and verdicts["weights-loaded"] == "refuted"
        assert verdicts["token-map"] == "refuted" and run.doctor_report.engine_version == "0.5.23+sandbox"
        assert run.probe() is None and run.apply_fixes() is None
    finally:
        verdict = run.finish()
    assert verdict["root_cause"]["rule"] == "algorithm-mismatch" and verdict["outcome"] == "cause-found"
    assert LaunchCommand.parse(verdict["fix"]["launch_command"]).get("--speculative-algorithm") == "EAGLE3"
    assert verdict["fix"]["applied"] is False and verdict["fix"]["kinds"] == []
    assert verdict["restarts"] == 0 and verdict["launches"] == []
    assert [f["rule"] for f in verdict["preflight"]["findings"] if f["severity"] == "error"] == ["algorithm-mismatch"]
    assert verdict["runtime_findings"] == []
    assert json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())["restarts"] == 0


@pytest.mark.slow  # launches a server on the box
def test_inventory_without_a_port_looks_only_at_the_default_port_fake_sglang_process(tmp_path, free_port):
    """No port given: the server on SGLang's default port (or the launch command's --port) is the
    one diagnosed; a server on another port is only mentioned, never taken over (restarted).
    SGLang cannot run here: the other server is a stand-in ``sglang/launch_server.py`` that sleeps,
    so that its real command line is ``python -m sglang.launch_server ... --port N``."""
    from workbench.sandbox_box import DEFAULT_PORT
    from workbench.session.inventory import take_inventory

    pkg = tmp_path / "fake" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("import time\ntime.sleep(120)\n")
    box = connect("local", state_dir=tmp_path / "state")
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(tmp_path), "--port", str(free_port)]
    handle = box.launch_server(argv, port=free_port, log_path=tmp_path / "s.log", cwd=tmp_path / "fake")
    try:
        assert [s.pid for s in box.find_servers() if s.port == free_port] == [handle.pid]
        # this machine is shared: with several servers elsewhere and none named, take_inventory
        # asks which one is meant (test_port_none.py); here only ours is seen besides the default port's
        real = box.find_servers
        box.find_servers = lambda **kw: [s for s in real(**kw) if s.pid == handle.pid or s.port == DEFAULT_PORT]
        inv = take_inventory(box, launch_command=None, port=None,
                             default_launch=sandbox_launch_command(port=DEFAULT_PORT))
        assert inv.server_pid != handle.pid
        mentioned = [p for n in inv.notes if "other servers run on port(s) " in n
                     for p in n.split("port(s) ")[1].split(";")[0].split(", ")]
        assert str(free_port) in mentioned
        inv = take_inventory(box, launch_command=None, port=free_port,
                             default_launch=sandbox_launch_command(port=free_port))
        assert inv.server_pid == handle.pid
    finally:
        box.stop_server(handle)


@pytest.mark.parametrize("line", [
    "/state/servers/server-31000-x.log.pid: line 1: exec: FOO=1: not found",  # bash's exec of a missing program
    "sh: 1: pythonx: not found",  # dash
    "bash: line 1: pythonx: command not found",
    "bash: /nowhere/python: No such file or directory",
])
def test_a_shell_line_naming_a_missing_program_is_the_start_failures_exception(line):
    from workbench.diagnosis.run import _last_exception

    assert _last_exception(["some output", line, ""]) == line
    assert _last_exception(["model weights not found anywhere"]) is None  # no shell's form


def test_inventory_shows_the_speculative_settings_as_numbers_not_strings():
    """Issue 15, trial finding 15: the report's inventory row read ('3', '1', '4') (the launch
    command's text) where the panel, reading the server's info, showed (3, 1, 4)."""
    from workbench.session.inventory import Inventory

    launch = LaunchCommand.parse("python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3 "
                                 "--speculative-num-steps 3 --speculative-eagle-topk 1 "
                                 "--speculative-num-draft-tokens 4 --port 30000")
    inv = Inventory(host="local", engine="sglang", engine_package="sglang", engine_version=None, engine_root=None,
                    python="python", launch=launch, port=30000, base_url="http://127.0.0.1:30000")
    rows = dict(inv.rows())
    assert rows["num steps / topk / draft tokens"] == (3, 1, 4)
    served = Inventory(**{**inv.__dict__, "server_info": {"speculative_num_steps": 5, "speculative_eagle_topk": 2}})
    assert dict(served.rows())["num steps / topk / draft tokens"] == (5, 2, 4)
    bare = Inventory(**{**inv.__dict__, "launch": LaunchCommand.parse("python -m sglang.launch_server --port 1")})
    assert dict(bare.rows())["num steps / topk / draft tokens"] == (None, None, None)
