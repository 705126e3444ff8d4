"""The ``workbench`` command line: doctor, runbook, report, restore (exit codes and messages).

``doctor`` runs on a real sparse EAGLE-3 draft (the public Kimi-K2 EAGLE-3 config, an ``fc``
of 7168 x 21504 in a sparse safetensors file) through the local box. One test runs the CLI as
a subprocess (``python -m workbench.cli``) so the entry point itself is exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote import connect
from workbench.cli import main
from workbench.session.journal import Journal, journal_path
from workbench.engine.launch import LaunchCommand
from rule_helpers import specforge_spec, token_map
from workbench_test_helpers import fixture_config, write_sparse_safetensors

REPO = Path(__file__).resolve().parents[2]
KIMI_DRAFT = "sgl-project__SpecForge__configs_kimi-k2-eagle3.json"
HIDDEN, LAYERS, VOCAB = 7168, 61, 163840


pytestmark = pytest.mark.usefixtures("state_dir")


@pytest.fixture
def models(tmp_path):
    """(target dir, draft dir): a Kimi-K2-shaped target config and a real EAGLE-3 draft config
    with a sparse model.safetensors whose fc takes 3 x 7168 inputs."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "vocab_size": VOCAB}))
    draft = tmp_path / "draft"
    draft.mkdir()
    cfg = fixture_config(KIMI_DRAFT)
    (draft / "config.json").write_text(json.dumps(cfg))
    d2t, t2d = token_map(cfg["vocab_size"], cfg["draft_vocab_size"])
    write_sparse_safetensors(draft / "model.safetensors", specforge_spec(cfg), data={"d2t": d2t, "t2d": t2d})
    return target, draft


def launch_text(algo: str, target, draft) -> str:
    return (f"python -m sglang.launch_server --model-path {target} --speculative-algorithm {algo} "
            f"--speculative-draft-model-path {draft} --tp 8 --port 30000")


def test_doctor_subprocess_eagle_flag_on_eagle3_draft(models, state_dir):
    target, draft = models
    env = {**os.environ, "EAGLE_WORKBENCH_STATE_DIR": str(state_dir)}
    proc = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "doctor", "--launch", launch_text("EAGLE", target, draft), "--json"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    first = out["findings"][0]
    assert (first["rule"], first["severity"]) == ("algorithm-mismatch", "error")
    assert "EAGLE3" in first["fix"]
    fixed = LaunchCommand.parse(first["fix"])
    assert fixed.get("--speculative-algorithm") == "EAGLE3"
    assert fixed.diff(LaunchCommand.parse(launch_text("EAGLE", target, draft))) == [
        ("--speculative-algorithm", "EAGLE3", "EAGLE")]
    assert first["evidence"]["fc_in_features"]["value"] == 3 * HIDDEN


def test_doctor_eagle3_is_clean(models, capsys):
    target, draft = models
    assert main(["doctor", "--launch", launch_text("EAGLE3", target, draft), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # Only information: the draft's rope_theta 1e6 against a target config without one (10000).
    assert [(f["rule"], f["severity"]) for f in out["findings"]] == [("rope-mismatch", "info")]
    assert out["exit_code"] == 0 and out["corrected_launch_command"] is None
    assert main(["doctor", "--launch", launch_text("EAGLE3", target, draft)]) == 0
    assert capsys.readouterr().out.splitlines()[-2].startswith("0 error(s), 0 warning(s), 1 info")


def test_doctor_relative_paths_resolve_against_cwd(models, tmp_path, monkeypatch, capsys):
    """A pasted command with relative paths: against this directory on the local box by default,
    against ``--cwd`` when given; found either way, so the real rule fires, not a missing path."""
    target, draft = models
    rel = launch_text("EAGLE", target.name, draft.name)
    monkeypatch.chdir(tmp_path)
    assert main(["doctor", "--launch", rel, "--json"]) == 1
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]
            if f["severity"] == "error"] == ["algorithm-mismatch"]
    monkeypatch.chdir("/")
    assert main(["doctor", "--cwd", str(tmp_path), "--launch", rel, "--json"]) == 1
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]
            if f["severity"] == "error"] == ["algorithm-mismatch"]
    assert main(["doctor", "--launch", rel, "--json"]) == 1  # from / the paths do not exist
    assert {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]} == {"checkpoint-unreadable"}


def test_doctor_text_output_names_rule_and_fix(models, capsys):
    target, draft = models
    assert main(["doctor", "--launch", launch_text("EAGLE", target, draft)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("ERROR   algorithm-mismatch:")
    assert "fix: " in out and "--speculative-algorithm EAGLE3" in out
    assert "corrected launch command: " in out


@pytest.mark.parametrize("text, message", [
    ("python -m sglang.launch_server --model-path '/models/kimi", "unbalanced quote"),
    ("", "empty launch command"),
    ("ls -la", "not an SGLang launch command"),
])
def test_doctor_unparseable_launch_exits_2(capsys, text, message):
    assert main(["doctor", "--launch", text]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("workbench doctor: ") and message in captured.err
    assert "Traceback" not in captured.err


def test_doctor_missing_draft_dir_is_a_finding(models, tmp_path, capsys):
    target, _ = models
    missing = tmp_path / "no-such-draft"
    assert main(["doctor", "--launch", launch_text("EAGLE", target, missing), "--json"]) == 1
    captured = capsys.readouterr()
    found = json.loads(captured.out)["findings"]
    assert [(f["rule"], f["severity"]) for f in found] == [("checkpoint-unreadable", "error")]
    assert f"{missing} does not exist" in found[0]["message"]
    assert "Traceback" not in captured.err


def test_doctor_without_draft_flag_and_unreachable_host_exit_2(models, capsys, free_port, tmp_path, monkeypatch):
    target, draft = models
    assert main(["doctor", "--launch", "python -m sglang.launch_server --speculative-algorithm EAGLE3"]) == 2
    assert "no --model-path" in capsys.readouterr().err
    # DeepseekV3 supplies its own MTP head (the engine uses the target path): no draft needed.
    assert main(["doctor", "--launch", f"python -m sglang.launch_server --model-path {target} "
                                       "--speculative-algorithm EAGLE", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                                                   "num_hidden_layers": 32, "vocab_size": 128256}))
    assert main(["doctor", "--launch", f"python -m sglang.launch_server --model-path {llama} "
                                       "--speculative-algorithm EAGLE3", "--json"]) == 1
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["draft-path-missing"]
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(tmp_path / "empty_ssh_config"))
    (tmp_path / "empty_ssh_config").write_text("")
    host = f"me@127.0.0.1:{free_port}"  # nothing listens there: refused at once, on loopback
    assert main(["doctor", "--launch", launch_text("EAGLE", target, draft), "--host", host]) == 2
    err = capsys.readouterr().err
    assert "connection refused" in err and f"127.0.0.1:{free_port}" in err and "Traceback" not in err


def test_runbook_unknown_exits_2_listing_known(capsys):
    assert main(["runbook", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "no runbook 'nosuch'" in err and "diagnose_acceptance" in err


def test_report_missing_notebook_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope.ipynb")]) == 2
    err = capsys.readouterr().err
    assert "no notebook file" in err and "Traceback" not in err


def test_restore_nothing_to_restore(capsys, state_dir):
    assert main(["restore"]) == 0
    assert capsys.readouterr().out.strip() == "nothing to restore"
    assert not (state_dir / "diagnosis" / "journal.json").exists()


def test_restore_reports_actions_and_clears_journal(capsys, state_dir):
    box = connect("local")
    assert box.state_dir == str(state_dir)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    j = Journal(box)
    j.begin()
    j.add_started(pid=gone.pid, pgid=gone.pid, port=None, argv=[sys.executable, "-c", "pass"], label="probe")
    assert main(["restore"]) == 0
    out = capsys.readouterr().out
    assert f"pid {gone.pid}" in out and "nothing to restore" not in out
    assert not Journal(box).pending
    assert main(["restore"]) == 0
    assert capsys.readouterr().out.strip() == "nothing to restore"


def test_restore_corrupt_journal_or_bad_host_exits_2(capsys, state_dir, free_port, tmp_path, monkeypatch):
    box = connect("local")
    box.write_file(journal_path(box), "{oops", make_dirs=True)
    assert main(["restore"]) == 2
    err = capsys.readouterr().err
    assert journal_path(box) in err and "not a diagnosis journal" in err and "Traceback" not in err
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(tmp_path / "empty_ssh_config"))
    (tmp_path / "empty_ssh_config").write_text("")
    assert main(["restore", "--host", f"me@127.0.0.1:{free_port}"]) == 2
    err = capsys.readouterr().err
    assert "connection refused" in err and "Traceback" not in err
    assert main(["restore", "--host", "no-such-alias"]) == 2  # a typo'd alias: no DNS lookup, a clear error
    assert "not a Host alias" in capsys.readouterr().err


def test_runbook_failure_restores_and_a_failing_restore_does_not_mask_the_error(tmp_path, capsys, monkeypatch):
    """A failing cell: the driver restores the box; when that restore fails too (here a corrupt
    journal), it says so, and the cell's error is still what the command reports (exit 1)."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    import workbench.cli as cli

    def failing_run(source, output, **kwargs):
        assert os.environ.get(cli.DRIVER_ENV) == "1"
        Path(output).write_text("not a notebook")
        raise PapermillExecutionError(3, 1, "x = 1/0", "ZeroDivisionError", "division by zero", [])

    monkeypatch.setattr(papermill, "execute_notebook", failing_run)
    monkeypatch.setattr(cli, "_kill_kernels", lambda: [])
    box = connect("local")
    box.write_file(journal_path(box), "{oops", make_dirs=True)
    assert main(["runbook", "diagnose_acceptance", "--report-dir", str(tmp_path / "reports")]) == 1
    err = capsys.readouterr().err
    assert "restore FAILED: JournalError" in err and "workbench restore" in err
    assert "cell 3 failed: ZeroDivisionError: division by zero" in err
    assert cli.DRIVER_ENV not in os.environ


def test_doctor_running_reads_the_server_command_line(models, tmp_path, capsys):
    """``--running``: the command line of the process serving on the box (a real process whose
    argv is an SGLang launch command: a stand-in ``sglang/launch_server.py`` that only sleeps)."""
    target, draft = models
    pkg = tmp_path / "fake" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("import time\ntime.sleep(120)\n")
    port = 39871
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "target", "--speculative-algorithm",
            "EAGLE", "--speculative-draft-model-path", "draft", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=target.parent, env={**os.environ, "PYTHONPATH": str(tmp_path / "fake")})
    try:
        assert main(["doctor", "--running", "--port", str(port), "--json"]) == 1
        out = json.loads(capsys.readouterr().out)
        # Relative paths resolved against the server's cwd, as the server resolves them.
        assert out["launch_command"].endswith(f"--port {port}")
        assert [f["rule"] for f in out["findings"] if f["severity"] == "error"] == ["algorithm-mismatch"]
        assert out["inputs"][0] == {"what": "target model", "path": str(target),
                                    "how": f"relative to the server's cwd {target.parent}"}
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert main(["doctor", "--running", "--port", str(port)]) == 2
    assert f"no SGLang server running on local on port {port}" in capsys.readouterr().err


def test_doctor_over_ssh(models, ssh_env, capsys):
    """The same doctor over SSH (loopback sshd): the same findings, bytes on the wire counted."""
    target, draft = models
    assert main(["doctor", "--launch", launch_text("EAGLE", target, draft), "--host", ssh_env.alias, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in out["findings"] if f["severity"] == "error"] == ["algorithm-mismatch"]
    assert out["findings"][0]["evidence"]["fc_in_features"]["value"] == 3 * HIDDEN
    token_map_bytes = 32000 * 8 + VOCAB  # d2t (I64 × draft vocab) and t2d (BOOL × vocab), read by byte range
    assert token_map_bytes < out["bytes_read"] < token_map_bytes + 100_000


@pytest.mark.parametrize("text, value", [("False", False), ("True", True), ("None", None), ("false", False),
                                         ("30000", 30000), ("1.5", 1.5), ("mybox", "mybox")])
def test_runbook_parameter_values_read_like_papermill(text, value):
    from workbench.cli import _coerce

    assert _coerce(text) is value if isinstance(value, bool) or value is None else _coerce(text) == value


def test_runbook_refuses_an_unknown_parameter_and_conflicting_hosts(tmp_path, capsys):
    """A typo (``hots``) must not silently diagnose ``local``; ``--host`` and ``-p host`` must agree."""
    assert main(["runbook", "diagnose_acceptance", "--report-dir", str(tmp_path), "-p", "hots", "mybox"]) == 2
    err = capsys.readouterr().err
    assert "no parameter 'hots'" in err and "host" in err
    assert main(["runbook", "diagnose_acceptance", "--report-dir", str(tmp_path), "--host", "a",
                 "-p", "host", "b"]) == 2
    assert "disagree" in capsys.readouterr().err
    assert not (tmp_path / "diagnose_acceptance.ipynb").exists()


def test_report_of_a_file_that_is_not_a_notebook_is_a_clear_error(tmp_path, capsys):
    verdict = tmp_path / "diagnose_acceptance.json"
    verdict.write_text('{"root_cause": null}')
    assert main(["report", str(verdict)]) == 2
    assert "is not a Jupyter notebook" in capsys.readouterr().err


def test_doctor_refuses_a_non_positive_timeout(capsys):
    with pytest.raises(SystemExit) as info:
        main(["doctor", "--running", "--timeout", "-5"])
    assert info.value.code == 2
    assert "must be a positive number of seconds" in capsys.readouterr().err
