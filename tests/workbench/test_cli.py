"""The ``workbench`` command line: doctor, runbook, report, restore (exit codes and messages).

``doctor`` runs on a real sparse EAGLE-3 draft (the public Kimi-K2 EAGLE-3 config, an ``fc``
of 7168 x 21504 in a sparse safetensors file) through the local box. One test runs the CLI as
a subprocess (``python -m workbench.cli``) so the entry point itself is exercised; the others run
``workbench.cli.main`` in process through the ``cli`` fixture (``tests/cli_runner.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote import connect
from workbench.session.journal import Journal, journal_path
from workbench.engine.launch import LaunchCommand
from rule_helpers import specforge_spec, token_map
from workbench_test_helpers import fixture_config, write_sparse_safetensors

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


def test_doctor_subprocess_eagle_flag_on_eagle3_draft(models, state_dir, cli):
    target, draft = models
    proc = cli.subprocess("doctor", "--launch", launch_text("EAGLE", target, draft), "--json",
                          env={"EAGLE_WORKBENCH_STATE_DIR": str(state_dir)}, timeout=60)
    assert proc.code == 1, proc.err
    out = json.loads(proc.out)
    first = out["findings"][0]
    assert (first["rule"], first["severity"]) == ("algorithm-mismatch", "error")
    assert "EAGLE3" in first["fix"]
    fixed = LaunchCommand.parse(first["fix"])
    assert fixed.get("--speculative-algorithm") == "EAGLE3"
    assert fixed.diff(LaunchCommand.parse(launch_text("EAGLE", target, draft))) == [
        ("--speculative-algorithm", "EAGLE3", "EAGLE")]
    assert first["evidence"]["fc_in_features"]["value"] == 3 * HIDDEN


def test_doctor_eagle3_is_clean(models, cli):
    target, draft = models
    code, out, _ = cli("doctor", "--launch", launch_text("EAGLE3", target, draft), "--json")
    assert code == 0
    out = json.loads(out)
    # Only information: the draft's rope_theta 1e6 against a target config without one (10000).
    assert [(f["rule"], f["severity"]) for f in out["findings"]] == [("rope-mismatch", "info")]
    assert out["exit_code"] == 0 and out["corrected_launch_command"] is None
    code, out, _ = cli("doctor", "--launch", launch_text("EAGLE3", target, draft))
    assert code == 0
    assert out.splitlines()[-2].startswith("0 error(s), 0 warning(s), 1 info")


def test_doctor_relative_paths_resolve_against_cwd(models, tmp_path, monkeypatch, cli):
    """A pasted command with relative paths: against this directory on the local box by default,
    against ``--cwd`` when given; found either way, so the real rule fires, not a missing path."""
    target, draft = models
    rel = launch_text("EAGLE", target.name, draft.name)
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli("doctor", "--launch", rel, "--json")
    assert code == 1
    assert [f["rule"] for f in json.loads(out)["findings"] if f["severity"] == "error"] == ["algorithm-mismatch"]
    monkeypatch.chdir("/")
    code, out, _ = cli("doctor", "--cwd", str(tmp_path), "--launch", rel, "--json")
    assert code == 1
    assert [f["rule"] for f in json.loads(out)["findings"] if f["severity"] == "error"] == ["algorithm-mismatch"]
    code, out, _ = cli("doctor", "--launch", rel, "--json")
    assert code == 1  # from / the paths do not exist
    assert {f["rule"] for f in json.loads(out)["findings"]} == {"checkpoint-unreadable"}


def test_doctor_text_output_names_rule_and_fix(models, cli):
    target, draft = models
    code, out, _ = cli("doctor", "--launch", launch_text("EAGLE", target, draft))
    assert code == 1
    # the launch's python has no sglang here: that comes first, then the findings
    head, _, findings = out.partition("\n\nERROR   algorithm-mismatch:")
    assert out.startswith("ERROR   algorithm-mismatch:") or (findings and head.startswith(
        "ENGINE NOT FOUND: the sglang package"))
    assert "fix: " in out and "--speculative-algorithm EAGLE3" in out
    assert "corrected launch command: " in out


@pytest.mark.parametrize("text, message", [
    ("python -m sglang.launch_server --model-path '/models/kimi", "unbalanced quote"),
    ("", "empty launch command"),
    ("ls -la", "not an SGLang launch command"),
])
def test_doctor_unparseable_launch_exits_2(cli, text, message):
    code, out, err = cli("doctor", "--launch", text)
    assert code == 2
    assert out == ""
    assert err.startswith("workbench doctor: ") and message in err
    assert "Traceback" not in err


def test_doctor_missing_draft_dir_is_a_finding(models, tmp_path, cli):
    target, _ = models
    missing = tmp_path / "no-such-draft"
    code, out, err = cli("doctor", "--launch", launch_text("EAGLE", target, missing), "--json")
    assert code == 1
    found = json.loads(out)["findings"]
    assert [(f["rule"], f["severity"]) for f in found] == [("checkpoint-unreadable", "error")]
    assert f"{missing} does not exist" in found[0]["message"]
    assert "Traceback" not in err


def test_doctor_without_draft_flag_and_unreachable_host_exit_2(models, cli, free_port, tmp_path, monkeypatch):
    target, draft = models
    code, out, err = cli("doctor", "--launch", "python -m sglang.launch_server --speculative-algorithm EAGLE3", "--json")
    assert code == 1 and "Traceback" not in err  # a finding now: the launch would not start
    assert "model-path-missing" in [f["rule"] for f in json.loads(out)["findings"]]
    # DeepseekV3 supplies its own MTP head (the engine uses the target path): no draft needed.
    code, out, _ = cli("doctor", "--launch", f"python -m sglang.launch_server --model-path {target} "
                                             "--speculative-algorithm EAGLE", "--json")
    assert code == 0
    assert json.loads(out)["findings"] == []
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                                                   "num_hidden_layers": 32, "vocab_size": 128256}))
    code, out, _ = cli("doctor", "--launch", f"python -m sglang.launch_server --model-path {llama} "
                                             "--speculative-algorithm EAGLE3", "--json")
    assert code == 1
    assert [f["rule"] for f in json.loads(out)["findings"]] == ["draft-path-missing"]
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(tmp_path / "empty_ssh_config"))
    (tmp_path / "empty_ssh_config").write_text("")
    host = f"me@127.0.0.1:{free_port}"  # nothing listens there: refused at once, on loopback
    code, _, err = cli("doctor", "--launch", launch_text("EAGLE", target, draft), "--host", host)
    assert code == 2
    assert "connection refused" in err and f"127.0.0.1:{free_port}" in err and "Traceback" not in err


def test_runbook_unknown_exits_2_listing_known(cli):
    code, _, err = cli("runbook", "nosuch")
    assert code == 2
    assert "no runbook 'nosuch'" in err and "diagnose_acceptance" in err


def test_report_missing_notebook_exits_2(tmp_path, cli):
    code, _, err = cli("report", str(tmp_path / "nope.ipynb"))
    assert code == 2
    assert "no notebook file" in err and "Traceback" not in err


def test_restore_nothing_to_restore(cli, state_dir):
    code, out, _ = cli("restore")
    assert code == 0
    assert out.strip() == "nothing to restore"
    assert not (state_dir / "diagnosis" / "journal.json").exists()


def test_restore_reports_actions_and_clears_journal(cli, state_dir):
    box = connect("local")
    assert box.state_dir == str(state_dir)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    j = Journal(box)
    j.begin()
    j.add_started(pid=gone.pid, pgid=gone.pid, port=None, argv=[sys.executable, "-c", "pass"], label="probe")
    code, out, _ = cli("restore")
    assert code == 0
    assert f"pid {gone.pid}" in out and "nothing to restore" not in out
    assert not Journal(box).pending
    code, out, _ = cli("restore")
    assert code == 0
    assert out.strip() == "nothing to restore"


def test_restore_corrupt_journal_or_bad_host_exits_2(cli, state_dir, free_port, tmp_path, monkeypatch):
    box = connect("local")
    box.write_file(journal_path(box), "{oops", make_dirs=True)
    code, _, err = cli("restore")
    assert code == 2
    assert journal_path(box) in err and "not a diagnosis journal" in err and "Traceback" not in err
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(tmp_path / "empty_ssh_config"))
    (tmp_path / "empty_ssh_config").write_text("")
    code, _, err = cli("restore", "--host", f"me@127.0.0.1:{free_port}")
    assert code == 2
    assert "connection refused" in err and "Traceback" not in err
    code, _, err = cli("restore", "--host", "no-such-alias")
    assert code == 2  # a typo'd alias: no DNS lookup, a clear error
    assert "not a Host alias" in err


def test_runbook_failure_restores_and_a_failing_restore_does_not_mask_the_error(tmp_path, cli, monkeypatch):
    """A failing cell: the driver restores the box; when that restore fails too (here a corrupt
    journal), it says so, and the cell's error is still what the command reports (exit 1)."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    import workbench.cli.runbook as runbook

    def failing_run(source, output, **kwargs):
        assert os.environ.get(runbook.DRIVER_ENV) == "1"
        Path(output).write_text("not a notebook")
        raise PapermillExecutionError(3, 1, "x = 1/0", "ZeroDivisionError", "division by zero", [])

    monkeypatch.setattr(papermill, "execute_notebook", failing_run)
    monkeypatch.setattr(runbook, "_kill_kernels", lambda: [])
    box = connect("local")
    box.write_file(journal_path(box), "{oops", make_dirs=True)
    code, _, err = cli("runbook", "diagnose_acceptance", "--report-dir", str(tmp_path / "reports"))
    assert code == 1
    assert "restore FAILED: JournalError" in err and "workbench restore" in err
    assert "cell 3 failed: ZeroDivisionError: division by zero" in err
    assert runbook.DRIVER_ENV not in os.environ


@pytest.mark.slow  # starts a stand-in SGLang process
def test_doctor_running_reads_the_server_command_line(models, tmp_path, cli):
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
        code, out, _ = cli("doctor", "--running", "--port", str(port), "--json")
        assert code == 1
        out = json.loads(out)
        # Relative paths resolved against the server's cwd, as the server resolves them.
        assert out["launch_command"].endswith(f"--port {port}")
        assert [f["rule"] for f in out["findings"] if f["severity"] == "error"] == ["algorithm-mismatch"]
        assert out["inputs"][0] == {"what": "target model", "path": str(target),
                                    "how": f"relative to the server's cwd {target.parent}"}
    finally:
        proc.kill()
        proc.wait(timeout=10)
    code, _, err = cli("doctor", "--running", "--port", str(port))
    assert code == 2
    assert f"no SGLang or vLLM server running on local on port {port}" in err


def test_doctor_over_ssh(models, ssh_env, cli):
    """The same doctor over SSH (loopback sshd): the same findings, bytes on the wire counted."""
    target, draft = models
    code, out, _ = cli("doctor", "--launch", launch_text("EAGLE", target, draft), "--host", ssh_env.alias, "--json")
    assert code == 1
    out = json.loads(out)
    assert [f["rule"] for f in out["findings"] if f["severity"] == "error"] == ["algorithm-mismatch"]
    assert out["findings"][0]["evidence"]["fc_in_features"]["value"] == 3 * HIDDEN
    token_map_bytes = 32000 * 8 + VOCAB  # d2t (I64 × draft vocab) and t2d (BOOL × vocab), read by byte range
    assert token_map_bytes < out["bytes_read"] < token_map_bytes + 100_000


@pytest.mark.parametrize("text, value", [("False", False), ("True", True), ("None", None), ("false", False),
                                         ("30000", 30000), ("1.5", 1.5), ("mybox", "mybox")])
def test_runbook_parameter_values_read_like_papermill(text, value):
    from workbench.cli.runbook import coerce_parameter

    assert coerce_parameter(text) is value if isinstance(value, bool) or value is None else \
        coerce_parameter(text) == value


def test_runbook_refuses_an_unknown_parameter_and_conflicting_hosts(tmp_path, cli):
    """A typo (``hots``) must not silently diagnose ``local``; ``--host`` and ``-p host`` must agree."""
    code, _, err = cli("runbook", "diagnose_acceptance", "--report-dir", str(tmp_path), "-p", "hots", "mybox")
    assert code == 2
    assert "no parameter 'hots'" in err and "host" in err
    code, _, err = cli("runbook", "diagnose_acceptance", "--report-dir", str(tmp_path), "--host", "a",
                       "-p", "host", "b")
    assert code == 2
    assert "disagree" in err
    assert not (tmp_path / "diagnose_acceptance.ipynb").exists()


def test_runbook_force_launch_is_short_for_the_parameter_kernel_run_faked(tmp_path, cli, monkeypatch):
    """``--force-launch`` is ``-p force_launch True`` for the runbooks that launch; a runbook that
    launches nothing has no such parameter, and ``-p force_launch False`` with it disagrees —
    both refused before any kernel starts. The kernel run itself is faked (a fast test starts no
    kernel): what it is handed is the parameters."""
    import workbench.cli.runbook as rb

    seen = {}
    monkeypatch.setattr(rb, "run_runbook", lambda name, params, report_dir, **kw: seen.update(params) or {})
    code, _, _ = cli("runbook", "measure_acceptance", "--report-dir", str(tmp_path), "--force-launch")
    assert code == 0 and seen["force_launch"] is True
    code, _, err = cli("runbook", "preflight", "--report-dir", str(tmp_path), "--force-launch")
    assert code == 2 and "no parameter 'force_launch'" in err
    code, _, err = cli("runbook", "diagnose_acceptance", "--report-dir", str(tmp_path), "--force-launch",
                       "-p", "force_launch", "False")
    assert code == 2 and "disagree" in err


def test_runbook_report_dir_is_one_place(tmp_path, cli):
    """``-p report_dir`` and ``--report-dir`` name the same thing (the notebook, the HTML and the
    verdict go together): two different ones are refused before anything runs."""
    code, _, err = cli("runbook", "diagnose_acceptance", "--report-dir", str(tmp_path / "a"),
                       "-p", "report_dir", str(tmp_path / "b"))
    assert code == 2 and "--report-dir" in err and "-p report_dir" in err and "disagree" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_report_of_a_file_that_is_not_a_notebook_is_a_clear_error(tmp_path, cli):
    verdict = tmp_path / "diagnose_acceptance.json"
    verdict.write_text('{"root_cause": null}')
    code, _, err = cli("report", str(verdict))
    assert code == 2
    assert "is not a Jupyter notebook" in err


def test_doctor_refuses_a_non_positive_timeout(cli):
    code, _, err = cli("doctor", "--running", "--timeout", "-5")
    assert code == 2
    assert "must be a positive number of seconds" in err
