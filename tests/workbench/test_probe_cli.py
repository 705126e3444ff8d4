"""``workbench probe add|recipes|list|revert|read`` on the real SGLang 0.5.23 source.

The engine is a copy of real 0.5.23 files (``srt/models/llama_eagle3.py``, ``srt/model_executor/
model_runner_components/spec_aux_hidden_state.py``, the package's ``__init__``/version files) in a
package directory named ``sglang`` under ``tmp_path/site``; ``PYTHONPATH`` points there so the box's
``find_spec("sglang")`` (which imports nothing) finds it. Every restore is checked by sha256 against
the unpacked original. The probed gate function is also run for real (lifted out of its module,
with stand-ins for what it reads) so the probe prints and ``probe read`` parses what it printed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.probes import CRASH_ENV, TAG_RE
from sglang_files import AUX_REL, DRAFT_REL, GATE, RUN_AUX_GATE, WIDTH_CHECK

REPO = Path(__file__).resolve().parents[2]
WIDTH_RX = r"if hidden_states\.shape\[-1\] != embeds"
GATE_RX = r"if spec_algorithm\.is_eagle3\(\):"

pytestmark = pytest.mark.usefixtures("state_dir")


@pytest.fixture
def site(sglang_source, tmp_path, monkeypatch):
    """``tmp_path/site`` holding a package ``sglang`` made of real 0.5.23 files; on ``PYTHONPATH``."""
    site = tmp_path / "site"
    for rel in ("__init__.py", "version.py", "_version.py", DRAFT_REL, AUX_REL):
        (site / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sglang_source / rel, site / "sglang" / rel)
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def line_of(path, text) -> int:
    [n] = [i for i, line in enumerate(Path(path).read_text().splitlines(), 1) if line.strip() == text]
    return n


def assert_one_clear_line(err: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("workbench probe ") and "Traceback" not in err, err


def test_add_list_revert_on_the_real_source(site, sglang_source, cli):
    draft, aux = site / "sglang" / DRAFT_REL, site / "sglang" / AUX_REL
    width_line, gate_line = line_of(draft, WIDTH_CHECK), line_of(aux, GATE)
    py = sys.executable

    code, out, err = cli("probe", "add", "--file", DRAFT_REL, "--before", WIDTH_RX, "--function", "LlamaModel.forward",
                         "--print", "hidden_states.shape", "--print", "embeds.shape", "--python", py)
    assert code == 0, err
    tag = f"llama_eagle3-L{width_line}"  # derived from the file stem and the anchor's line
    assert TAG_RE.match(tag) and out.startswith(f"probe {tag} added on local")
    assert f"{draft}:{width_line}  (in LlamaModel.forward)" in out
    assert f"before:  {WIDTH_CHECK}" in out and f"the original and the patched file compile with {py}" in out
    assert f"workbench probe read --host local --tag {tag}" in out
    assert f"workbench probe revert --host local --tag {tag}" in out
    patched = draft.read_bytes()
    compile(patched, str(draft), "exec")
    assert draft.read_text().splitlines()[width_line - 1].strip() == f"# >>> eagle-workbench probe {tag} >>>"

    # the same command again: the probe in place is recognised, the file is not touched
    code, out, _ = cli("probe", "add", "--file", DRAFT_REL, "--before", WIDTH_RX, "--function", "LlamaModel.forward",
                       "--print", "hidden_states.shape", "--print", "embeds.shape", "--python", py)
    assert code == 0 and out.startswith(f"probe {tag} is already in place") and draft.read_bytes() == patched

    code, out, err = cli("probe", "add", "--file", "sglang/" + AUX_REL, "--before", GATE_RX, "--tag", "gate",
                         "--print", "spec_algorithm.is_eagle3()", "--python", py)
    assert code == 0, err
    assert f"{aux}:{gate_line}" in out

    code, out, _ = cli("probe", "list")
    assert code == 0
    assert f"{tag}  [active]  {draft}:{width_line}" in out and f"gate  [active]  {aux}:{gate_line}" in out
    assert out.count("file: patched as recorded") == 2
    code, out, _ = cli("probe", "list", "--json")
    listed = json.loads(out)
    assert [(p["tag"], p["line"], p["file_status"], p["exprs"]) for p in listed] == [
        (tag, width_line, "patched", ["hidden_states.shape", "embeds.shape"]),
        ("gate", gate_line, "patched", ["spec_algorithm.is_eagle3()"])]
    assert listed[0]["file_sha256"] == sha(draft) and listed[0]["original_sha256"] == sha(sglang_source / DRAFT_REL)

    code, out, err = cli("probe", "revert", "--file", DRAFT_REL)
    assert code == 0, err
    assert f"reverted {tag}: {draft} restored byte for byte" in out and "matches the original's" in out
    assert sha(draft) == sha(sglang_source / DRAFT_REL)
    code, out, _ = cli("probe", "revert", "--tag", "gate")
    assert code == 0 and "reverted gate" in out
    assert sha(aux) == sha(sglang_source / AUX_REL)
    code, out, _ = cli("probe", "list")
    assert code == 0 and out.startswith("no probes on local")
    assert sorted(os.listdir(draft.parent)) == ["llama_eagle3.py"]


def test_recipe_draft_input_width_lands_on_the_width_check(site, sglang_source, cli):
    draft = site / "sglang" / DRAFT_REL
    width_line = line_of(draft, WIDTH_CHECK)
    code, out, err = cli("probe", "add", "--recipe", "draft-input-width", "--python", sys.executable, "--json")
    assert code == 0, err
    added = json.loads(out)
    assert (added["tag"], added["path"], added["line"]) == ("draft-input-width", str(draft), width_line)
    assert added["anchor_text"].strip() == WIDTH_CHECK and added["function"] == "LlamaModel.forward"
    assert added["engine"]["root"] == str(site / "sglang") and added["engine"]["version"] == "0.5.23"
    assert "self.fc.in_features" in added["exprs"]
    lines = draft.read_text().splitlines()
    assert lines[width_line - 1 + added["block_lines"]].strip() == WIDTH_CHECK
    patched = draft.read_bytes()
    # again: the map now finds the check below the block; the CLI recognises its own probe
    code, out, err = cli("probe", "add", "--recipe", "draft-input-width", "--python", sys.executable)
    assert code == 0, err
    assert out.startswith("probe draft-input-width is already in place")
    assert "reading: the draft-extend step after each target forward must show" in out
    assert "once per distinct value of hidden_states.shape[-1]" in out
    assert draft.read_bytes() == patched
    code, out, _ = cli("probe", "recipes")
    assert code == 0 and all(name in out for name in ("draft-input-width", "target-capture-layers", "draft-d2t"))
    code, out, _ = cli("probe", "revert", "--all")
    assert code == 0 and sha(draft) == sha(sglang_source / DRAFT_REL)


@pytest.mark.parametrize("argv, message", [
    (["revert", "--tag", "nope"], "no probe 'nope' in the journal"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "x", "--python", "/usr/bin/true"],
     "no engine found for the relative --file"),
    (["add", "--file", DRAFT_REL, "--before", "no_such_code_here", "--print", "x"], "matches no line"),
    (["add", "--file", DRAFT_REL, "--before", "hidden_states", "--function", "LlamaModel.forward", "--print", "x"],
     "matches"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "1 +"], "is not a Python expression"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "round(x, ndigits=1, ndigits=2)"], "fail to compile"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "await x"], "contains await at column 1"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "__import__('os').system('id')"],
     "contains __import__ at column 1"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "x", "--when", "getattr(x, 'zero_')()"],
     "--when \"getattr(x, 'zero_')()\" is refused: it contains getattr"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "hidden_states.zero_()"], "in-place method"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "10**10**10 > 0"],
     "--print '10**10**10 > 0' is refused: it contains a power too large to compute"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "len('a'*10**9)"],
     "a repetition too large to build (length 1 * 1000000000; at most 10000) at column 5"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "x", "--when", "[0]*(10**10)"],
     "--when '[0]*(10**10)' is refused: it contains a repetition too large to build"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "x", "--once-per", "1 << 10**10"],
     "a shift too large to compute"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "x", "--once-per", "(n := x)"],
     "--once-per '(n := x)' is refused"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "x", "--max-prints", "3"], "goes with --once-per"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "x", "--when", "(n := x)"], "--when '(n := x)' is refused"),
    (["read", "--tag", "t", "--recipe", "draft-d2t", "--log", "/x"], "exactly one of --tag TAG or --recipe NAME"),
    (["read", "--recipe", "nope", "--log", "/x"], "no probe recipe 'nope'"),
    (["read", "--tag", "t", "--log", "/x", "--port", "30000", "--pgid", "5"], "--pgid G names a launch"),
    (["add", "--recipe", "fc-width"], "no probe recipe 'fc-width'"),
    (["add", "--file", DRAFT_REL, "--line", "238", "--print", "x", "--tag", "bad tag"], "--tag 'bad tag'"),
    (["add", "--file", "srt/models/missing.py", "--line", "3", "--print", "x"], "no file"),
    (["add", "--file", DRAFT_REL, "--before", "x", "--line", "3", "--print", "x"], "exactly one of --before"),
    (["read", "--tag", "t", "--log", "/nonexistent/server.log"], "cannot read the log"),
    (["read", "--tag", "t", "--port", "1"], "no server runs on port 1"),
])
def test_bad_input_exits_2_with_one_clear_line(site, sglang_source, cli, argv, message, state_dir):
    if "--python" not in argv:
        argv = [*argv, "--python", sys.executable] if argv[0] == "add" else argv
    code, out, err = cli("probe", *argv)
    assert code == 2, (out, err)
    assert_one_clear_line(err)
    assert message in err
    assert sha(site / "sglang" / DRAFT_REL) == sha(sglang_source / DRAFT_REL)
    assert not (state_dir / "probes").exists() or os.listdir(state_dir / "probes") == []


def test_a_symlink_in_the_engine_pointing_out_is_refused_exit_2(site, sglang_source, cli, state_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.py"
    shutil.copy2(sglang_source / DRAFT_REL, victim)
    link = site / "sglang" / "srt" / "models" / "evil.py"
    os.symlink(victim, link)
    for file in ("srt/models/evil.py", str(link)):  # relative to the engine, and absolute inside it
        code, out, err = cli("probe", "add", "--file", file, "--line", "238", "--print", "hidden_states.shape",
                             "--python", sys.executable)
        assert code == 2, (out, err)
        assert_one_clear_line(err)
        assert f"{link} is a symlink to {victim}, outside the engine package {site / 'sglang'}" in err
    assert sha(victim) == sha(sglang_source / DRAFT_REL) and os.path.islink(link)
    assert not (state_dir / "probes").exists() or os.listdir(state_dir / "probes") == []
    # the file it points at, named by its own absolute path, is outside the engine too: refused
    code, out, err = cli("probe", "add", "--file", str(victim), "--line", "238", "--print", "hidden_states.shape",
                         "--python", sys.executable, "--tag", "outside")
    assert code == 2, (out, err)
    assert f"{victim} resolves to {victim}, outside the engine package {site / 'sglang'}" in err
    assert sha(victim) == sha(sglang_source / DRAFT_REL)


@pytest.mark.parametrize("locate", [["--python", sys.executable], ["--package", "sglang"]])
def test_an_absolute_file_outside_the_engine_is_refused_exit_2(site, sglang_source, cli, state_dir, tmp_path, locate):
    """A real file outside the package, named by its absolute path (no symlink anywhere), the
    engine located by --python or by --package (not by a running server: other servers may run
    here): exit 2 naming the file and the engine root, the file byte for byte as it was, nothing
    journalled; a file inside the engine, named the same way, is probed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    evil = outside / "evil.py"
    shutil.copy2(sglang_source / DRAFT_REL, evil)
    before = sha(evil)
    python = locate
    code, out, err = cli("probe", "add", "--file", str(evil), "--line", "238", "--print", "hidden_states.shape",
                         *python)
    assert code == 2, (out, err)
    assert_one_clear_line(err)
    assert f"{evil} resolves to {evil}, outside the engine package {site / 'sglang'}" in err
    assert sha(evil) == before and sorted(os.listdir(outside)) == ["evil.py"]
    assert not (state_dir / "probes").exists() or os.listdir(state_dir / "probes") == []
    inside = site / "sglang" / DRAFT_REL  # the control: absolute and inside, probed and reverted
    code, out, err = cli("probe", "add", "--file", str(inside), "--line", "238", "--print", "hidden_states.shape",
                         "--tag", "inside", *python)
    assert code == 0, err
    assert sha(inside) != sha(sglang_source / DRAFT_REL)
    code, out, err = cli("probe", "revert", "--tag", "inside")
    assert code == 0, err
    assert sha(inside) == sha(sglang_source / DRAFT_REL)


def test_an_absolute_file_without_a_located_engine_is_refused_exit_2(site, sglang_source, cli, tmp_path, monkeypatch):
    evil = tmp_path / "evil.py"
    shutil.copy2(sglang_source / DRAFT_REL, evil)
    monkeypatch.delenv("PYTHONPATH")
    code, _, err = cli("probe", "add", "--file", str(evil), "--line", "238", "--print", "x", "--python", sys.executable)
    assert code == 2
    assert_one_clear_line(err)
    assert f"no engine found to check that --file {evil} lies inside it" in err
    assert sha(evil) == sha(sglang_source / DRAFT_REL)


def test_no_engine_without_the_package_on_the_path(site, cli, monkeypatch):
    monkeypatch.delenv("PYTHONPATH")
    code, _, err = cli("probe", "add", "--recipe", "draft-input-width", "--python", sys.executable)
    assert code == 2
    assert_one_clear_line(err)
    assert "no engine found for recipe draft-input-width" in err and "sglang package is not found" in err


@pytest.mark.parametrize("point", ["after-backup", "before-replace"])
def test_cli_killed_between_backup_and_replace_is_cleaned_up_by_revert_all(site, sglang_source, point, cli):
    draft = site / "sglang" / DRAFT_REL
    original = draft.read_bytes()
    proc = cli.subprocess("probe", "add", "--file", DRAFT_REL, "--before", WIDTH_RX, "--print", "hidden_states.shape",
                          "--tag", "crashy", "--python", sys.executable, env={CRASH_ENV: point})
    assert proc.code == -signal.SIGKILL, proc.err
    assert draft.read_bytes() == original  # never half a file: the original until the rename
    proc = cli.subprocess("probe", "list")
    assert proc.code == 0, proc.err
    assert f"crashy  [pending]  {draft}:{line_of(draft, WIDTH_CHECK)}" in proc.out
    assert "file: back to the original; an add was interrupted" in proc.out
    proc = cli.subprocess("probe", "revert", "--all")
    assert proc.code == 0, proc.err
    assert "cleaned up an interrupted add of crashy" in proc.out and "matches the original's" in proc.out
    assert draft.read_bytes() == original and sha(draft) == sha(sglang_source / DRAFT_REL)
    assert sorted(os.listdir(draft.parent)) == ["llama_eagle3.py"]  # no temporary file left
    assert cli.subprocess("probe", "list").out.startswith("no probes on local")


def test_cli_killed_after_replace_is_reverted_byte_for_byte(site, sglang_source, cli):
    draft = site / "sglang" / DRAFT_REL
    proc = cli.subprocess("probe", "add", "--recipe", "draft-input-width", "--python", sys.executable,
                          env={CRASH_ENV: "after-replace"})
    assert proc.code == -signal.SIGKILL, proc.err
    compile(draft.read_bytes(), str(draft), "exec")  # the whole patched file
    listed = json.loads(cli.subprocess("probe", "list", "--json").out)
    assert [(p["tag"], p["state"], p["file_status"]) for p in listed] == [("draft-input-width", "pending", "patched")]
    proc = cli.subprocess("probe", "revert", "--tag", "draft-input-width")
    assert proc.code == 0, proc.err
    assert sha(draft) == sha(sglang_source / DRAFT_REL)


def test_revert_refuses_when_someone_edited_the_file(site, sglang_source, cli, state_dir):
    aux = site / "sglang" / AUX_REL
    code, _, err = cli("probe", "add", "--file", str(aux), "--before", GATE_RX, "--print", "spec_algorithm",
                       "--tag", "gate", "--python", sys.executable)
    assert code == 0, err
    with aux.open("a") as f:
        f.write("# a colleague's hotfix\n")
    edited = aux.read_bytes()
    code, out, _ = cli("probe", "list")
    assert "file: edited by someone else" in out
    for argv in (["revert", "--tag", "gate"], ["revert", "--all"], ["revert", "--file", str(aux)]):
        code, out, err = cli("probe", *argv)
        assert code == 1, (argv, out, err)
        assert "NOT reverted gate" in err and "edited by someone else" in err and "gate.orig" in err
        assert "Traceback" not in err
        assert aux.read_bytes() == edited  # their change is kept
        backup = state_dir / "probes" / "gate.orig"
        assert backup.read_bytes() == (sglang_source / AUX_REL).read_bytes()  # and so is the original
    # how to go on, as the message says: put the original back by hand, then drop the record
    [cp] = re.findall(r"`(cp [^`]+)`", err)
    assert cp == f"cp {backup} {aux}" and "then `workbench probe revert --tag gate` drops the record" in err
    subprocess.run(cp, shell=True, check=True)
    code, out, err = cli("probe", "revert", "--tag", "gate")
    assert code == 0, err
    assert "reverted gate" in out and "matches the original's" in out
    assert sha(aux) == sha(sglang_source / AUX_REL) and os.listdir(state_dir / "probes") == []


def test_read_parses_what_the_probe_printed(site, cli, tmp_path):
    aux = site / "sglang" / AUX_REL
    code, _, err = cli("probe", "add", "--file", AUX_REL, "--before", GATE_RX, "--tag", "gate", "--python",
                       sys.executable, "--print", "spec_algorithm", "--print", "spec_algorithm.is_eagle3()",
                       "--print", "draft_path", "--print", "config.eagle_aux_hidden_state_layer_ids")
    assert code == 0, err
    log = tmp_path / "server.log"
    code, _, err = cli("probe", "read", "--tag", "gate", "--log", str(log))
    assert code == 2 and "cannot read the log" in err  # no log yet
    log.write_text("[2026-01-01 12:00:00] server started\n")
    code, out, err = cli("probe", "read", "--tag", "gate", "--log", str(log))
    assert code == 1 and "0 line(s)" in out and "restart the server" in err  # not fired yet
    with log.open("a") as f:
        proc = subprocess.run([sys.executable, "-c", RUN_AUX_GATE, str(aux), "EAGLE"], stderr=f, stdout=subprocess.PIPE,
                              text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "False None\n"  # the real function, unchanged by the probe
    code, out, err = cli("probe", "read", "--tag", "gate", "--log", str(log))
    assert code == 0, err
    assert re.search(rf"line 2 \(pgid {os.getpgrp()}, pid \d+\):", out) and "spec_algorithm.is_eagle3() = False" in out and "draft_path = '/models/draft'" in out
    code, out, _ = cli("probe", "read", "--tag", "gate", "--log", str(log), "--json")
    [reading] = json.loads(out)["readings"]
    assert reading["values"] == {"spec_algorithm": "SpeculativeAlgorithm.EAGLE", "spec_algorithm.is_eagle3()": False,
                                 "draft_path": "/models/draft", "config.eagle_aux_hidden_state_layer_ids": None}
    assert reading["line_number"] == 2
    assert cli("probe", "revert", "--all")[0] == 0


def test_probe_cli_over_ssh(site, sglang_source, ssh_env, tmp_path, cli):
    """add / list / read / revert with --host = the loopback sshd's alias; the CLI runs as a subprocess."""
    host = ssh_env.alias
    aux = site / "sglang" / AUX_REL
    # the box's interpreter with the engine on its path (an ssh session does not get this PYTHONPATH):
    # the CLI locates the engine with it, to check that --file lies inside it
    python = tmp_path / "engine-python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    proc = cli.subprocess("probe", "add", "--host", host, "--file", str(aux), "--before", GATE_RX, "--function",
                          "_resolve_eagle_aux_hidden_state", "--print", "spec_algorithm.is_eagle3()", "--print",
                          "draft_path", "--python", str(python))
    assert proc.code == 0, proc.err
    tag = f"spec_aux_hidden_state-L{line_of(sglang_source / AUX_REL, GATE)}"
    assert proc.out.startswith(f"probe {tag} added on {host}")
    assert f"workbench probe read --host {host} --tag {tag}" in proc.out
    proc = cli.subprocess("probe", "list", "--host", host, "--json")
    assert proc.code == 0, proc.err
    assert [(p["tag"], p["path"], p["file_status"]) for p in json.loads(proc.out)] == [(tag, str(aux), "patched")]
    log = tmp_path / "server.log"
    with log.open("w") as f:
        assert subprocess.run([sys.executable, "-c", RUN_AUX_GATE, str(aux), "EAGLE3"], stderr=f,
                              stdout=subprocess.DEVNULL, timeout=60).returncode == 0
    proc = cli.subprocess("probe", "read", "--host", host, "--tag", tag, "--log", str(log), "--json")
    assert proc.code == 0, proc.err
    assert [r["values"] for r in json.loads(proc.out)["readings"]] == [
        {"spec_algorithm.is_eagle3()": True, "draft_path": "/models/draft"}]
    proc = cli.subprocess("probe", "revert", "--host", host, "--tag", tag)
    assert proc.code == 0, proc.err
    assert "matches the original's" in proc.out
    assert sha(aux) == sha(sglang_source / AUX_REL)


# -- what a probe may go into ------------------------------------------------------------------------


def test_add_refuses_files_that_are_not_python_or_do_not_compile(site, cli, tmp_path, state_dir):
    engine = site / "sglang"  # files of the engine package (a probe patches nothing else)
    hostname = engine / "hostname"
    hostname.write_text("vm\n")  # compiles as Python: refused for its name
    notes = engine / "notes.txt"
    notes.write_text("x = 1\n")
    for path in (hostname, notes):
        code, out, err = cli("probe", "add", "--file", str(path), "--line", "1", "--print", "1", "--python",
                             sys.executable)
        assert code == 2, (out, err)
        assert_one_clear_line(err)
        assert "not a Python source file" in err and str(path) in err
    legacy = engine / "legacy.py"
    legacy.write_text("def f(x):\n    print 'x is', x\n    return x\n")
    code, out, err = cli("probe", "add", "--file", str(legacy), "--before", "return x", "--print", "x", "--python",
                         sys.executable)
    assert code == 2, (out, err)
    assert_one_clear_line(err)
    assert "the original file does not compile" in err and "nothing was written" in err
    assert "Missing parentheses in call to 'print'" in err and err.rstrip().endswith("(at line 2 of the original)")
    assert hostname.read_text() == "vm\n" and notes.read_text() == "x = 1\n"
    assert legacy.read_text().startswith("def f(x):\n    print 'x is'")
    assert not (state_dir / "probes").exists() or os.listdir(state_dir / "probes") == []


# -- once per distinct key ----------------------------------------------------------------------------


def test_once_per_and_max_prints(site, sglang_source, cli, tmp_path):
    aux = site / "sglang" / AUX_REL
    argv = ["add", "--file", AUX_REL, "--before", GATE_RX, "--tag", "gate", "--python", sys.executable,
            "--print", "spec_algorithm", "--once-per", "spec_algorithm.is_eagle3()", "--max-prints", "2"]
    code, out, err = cli("probe", *argv)
    assert code == 0, err
    assert "once per distinct value of spec_algorithm.is_eagle3(), at most 2 lines per process" in out
    assert "the probe prints once per distinct value of spec_algorithm.is_eagle3()" in out
    patched = aux.read_bytes()
    code, out, err = cli("probe", *argv)  # the same again: in place, untouched
    assert code == 0 and out.startswith("probe gate is already in place") and aux.read_bytes() == patched
    for other in (["--once-per", "draft_path"], []):  # another key, or none, under the same tag
        code, out, err = cli("probe", *argv[:argv.index("--once-per")], *other)
        assert code == 2 and "already used by a probe" in err and "once per spec_algorithm.is_eagle3() (max 2)" in err
    code, out, _ = cli("probe", "list")
    assert code == 0 and "prints: spec_algorithm  (once per spec_algorithm.is_eagle3(), at most 2 lines)" in out
    code, out, _ = cli("probe", "list", "--json")
    [listed] = json.loads(out)
    assert (listed["once_per"], listed["max_prints"]) == ("spec_algorithm.is_eagle3()", 2)

    log = tmp_path / "server.log"
    with log.open("w") as f:
        proc = subprocess.run([sys.executable, "-c", RUN_AUX_GATE, str(aux), "EAGLE3"], stderr=f, stdout=subprocess.PIPE,
                              text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "True [1, 29, 57]\n"
    code, out, err = cli("probe", "read", "--tag", "gate", "--log", str(log), "--json")
    assert code == 0, err
    assert [r["values"] for r in json.loads(out)["readings"]] == [{"spec_algorithm": "SpeculativeAlgorithm.EAGLE3"}]

    # a recipe takes --once-per too (the draft's width per call, past CUDA-graph capture)
    code, out, err = cli("probe", "add", "--recipe", "draft-input-width", "--python", sys.executable,
                         "--once-per", "hidden_states.shape[-1]", "--json")
    assert code == 0, err
    assert (json.loads(out)["once_per"], json.loads(out)["max_prints"]) == ("hidden_states.shape[-1]", 8)
    assert cli("probe", "revert", "--all")[0] == 0
    assert sha(aux) == sha(sglang_source / AUX_REL) and sha(site / "sglang" / DRAFT_REL) == sha(sglang_source / DRAFT_REL)


# -- the journal -----------------------------------------------------------------------------------


def test_an_unreadable_journal_entry_is_reported_not_fatal(site, sglang_source, cli, state_dir):
    aux = site / "sglang" / AUX_REL
    code, _, err = cli("probe", "add", "--file", AUX_REL, "--before", GATE_RX, "--tag", "gate", "--print",
                       "spec_algorithm", "--python", sys.executable)
    assert code == 0, err
    bogus = state_dir / "probes" / "bogus.json"
    bogus.write_text("{ this is not json")
    code, out, err = cli("probe", "list")
    assert code == 1
    assert f"gate  [active]  {aux}:{line_of(sglang_source / AUX_REL, GATE)}" in out  # the readable one is listed
    assert "1 unreadable journal entry (problems)" in err and f"journal entry {bogus} is unreadable (not JSON" in err
    code, out, err = cli("probe", "list", "--json")
    assert code == 1 and [p["tag"] for p in json.loads(out)] == ["gate"] and str(bogus) in err
    code, out, err = cli("probe", "revert", "--tag", "bogus")
    assert code == 1 and "cannot revert bogus" in err and "unreadable" in err
    code, out, err = cli("probe", "revert", "--all")
    assert code == 1, (out, err)
    assert "reverted gate" in out and sha(aux) == sha(sglang_source / AUX_REL)  # reverted all the same
    assert str(bogus) in err and "then delete the entry" in err
    assert bogus.exists()  # left for a human
    bogus.unlink()
    code, out, _ = cli("probe", "list")
    assert code == 0 and out.startswith("no probes on local")


# -- the default tag, usage errors ----------------------------------------------------------------------


def test_default_tag_numbers_lines_as_in_the_original_file(site, sglang_source, cli):
    draft = site / "sglang" / DRAFT_REL
    width_line = line_of(sglang_source / DRAFT_REL, WIDTH_CHECK)
    code, out, err = cli("probe", "add", "--file", DRAFT_REL, "--function", "LlamaModel.forward", "--before",
                         r"hidden_states = forward_batch\.spec_info\.hidden_states", "--print", "1", "--tag", "above",
                         "--python", sys.executable, "--json")
    assert code == 0, err
    above = json.loads(out)["block_lines"]
    now = line_of(draft, WIDTH_CHECK)
    assert now == width_line + above
    for anchor in (["--before", WIDTH_RX], ["--line", str(now)]):
        code, out, err = cli("probe", "add", "--file", DRAFT_REL, *anchor, "--function", "LlamaModel.forward",
                             "--print", "hidden_states.shape", "--python", sys.executable)
        assert code == 0, err
        assert out.startswith(f"probe llama_eagle3-L{width_line} added")  # the original's numbering
        assert f"{draft}:{now}" in out
        code, _, err = cli("probe", "revert", "--tag", f"llama_eagle3-L{width_line}")
        assert code == 0, err
    assert cli("probe", "revert", "--all")[0] == 0
    assert sha(draft) == sha(sglang_source / DRAFT_REL)


@pytest.mark.parametrize("argv", [
    ["add", "--recipe", "draft-input-width", "--port", "0"],
    ["add", "--recipe", "draft-input-width", "--port", "-1"],
    ["add", "--recipe", "draft-input-width", "--port", "65536"],
    ["add", "--recipe", "draft-input-width", "--port", "x"],
    ["add", "--recipe", "draft-input-width", "--once-per", "x", "--max-prints", "0"],
    ["read", "--tag", "t", "--port", "0"],
])
def test_bad_port_or_max_prints_is_a_usage_error(cli, argv):
    code, _, err = cli("probe", *argv)
    assert code == 2
    assert err.startswith("usage: workbench probe") and ("must be a TCP port number" in err or "must be >= 1" in err)


def test_probe_help_has_a_description(cli):
    code, out, _ = cli("probe", "--help")
    assert code == 0
    assert "Debug prints in the engine's source on a box" in out
    code, out, _ = cli("probe", "add", "--help")
    assert code == 0
    assert "--once-per EXPR" in out and "--max-prints N" in out


# -- owner and mode ----------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def _engine_package(parent) -> Path:
    """``parent/ownerpkg``: a package (``__init__.py``) the CLI locates with ``--package ownerpkg``
    when ``parent`` is on ``PYTHONPATH``; the probed files go inside it."""
    pkg = Path(parent) / "ownerpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    os.chmod(pkg, 0o777)  # nobody's probe writes its temporary file beside the one it patches
    os.chmod(pkg / "__init__.py", 0o644)
    return pkg


def test_owner_is_kept_or_reported(cli, tmp_path, nobody, monkeypatch):
    """As root, a file of nobody's stays nobody's after add and revert (mode too); as nobody, a file
    of root's (writable by all) cannot be given back to root: the CLI says so and goes on."""
    import sysconfig
    import tempfile

    uid, gid = nobody
    pkg = _engine_package(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    src = pkg / "model.py"
    src.write_text("def f(x):\n    y = x + 1\n    return y\n")
    os.chmod(src, 0o640)
    os.chown(src, uid, gid)
    code, out, err = cli("probe", "add", "--file", str(src), "--before", "return y", "--print", "y", "--python",
                         sys.executable, "--package", "ownerpkg")
    assert code == 0, err
    st = src.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, 0o640) and "owner could not be kept" not in out
    code, out, err = cli("probe", "revert", "--all")
    assert code == 0, err
    st = src.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, 0o640) and "owner could not be kept" not in out

    work = tempfile.mkdtemp(prefix="ewb-owner-cli-")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                          work])}
    check = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import workbench.cli'], check=True)"
    python = next((c for c in (sys.executable, "/usr/bin/python3") if subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", c, "-c", check], env=env, cwd="/",
        capture_output=True).returncode == 0), None)
    if python is None:
        shutil.rmtree(work)
        pytest.skip("no Python nobody may run")
    try:
        os.chmod(work, 0o777)
        shared = os.path.join(_engine_package(work), "model.py")
        with open(shared, "w") as f:
            f.write("def f(x):\n    y = x + 1\n    return y\n")
        os.chmod(shared, 0o666)
        env = {**env, "HOME": work, "EAGLE_WORKBENCH_STATE_DIR": os.path.join(work, "state")}
        for argv in (["add", "--file", shared, "--before", "return y", "--print", "y", "--python", python,
                      "--package", "ownerpkg"],
                     ["revert", "--all"]):
            proc = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", python, "-m",
                                   "workbench.cli", "probe", *argv], env=env, cwd=work, capture_output=True, text=True,
                                  timeout=120)
            assert proc.returncode == 0, proc.stderr
            assert f"owner could not be kept: the file is now owned by {uid}:{gid}, the original by 0:0" in proc.stdout
        assert open(shared).read() == "def f(x):\n    y = x + 1\n    return y\n"
    finally:
        shutil.rmtree(work)


# -- reading the lines of the server running now ----------------------------------------------------

ENGINE_STEP = "def step(label):\n    width = len(label)\n    return width\n"

#: ``python -m sglang.launch_server --model-path M --port N`` as find_servers sees it: a stand-in that
#: runs the probed ``engine_step.step`` on each request (the real package cannot run here: no GPU).
FAKE_LAUNCH_SERVER = '''\
import argparse, http.server, sys
from sglang import engine_step

ap = argparse.ArgumentParser()
ap.add_argument("--model-path")
ap.add_argument("--port", type=int)
args = ap.parse_args()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path not in ("/health", "/health_generate"):  # the health checks (wait_healthy) print nothing
            engine_step.step(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\\n")

    def log_message(self, *a):
        pass


print("fake sglang server listening", file=sys.stderr, flush=True)
http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
'''


@pytest.mark.slow
def test_read_port_shows_only_the_server_running_now(cli, tmp_path, free_port, state_dir, monkeypatch):
    """A log appended by two launches of a (stand-in) SGLang server: ``read --port`` shows only the
    lines of the server running now and, before its first request, says that the lines in the log
    are from an earlier launch (exit 1); ``--log`` shows every line with its pgid, ``--pgid`` one
    launch's; a probe added after the server started asks for a restart."""
    import httpx

    from remote import connect

    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(FAKE_LAUNCH_SERVER)
    (fake / "sglang" / "engine_step.py").write_text(ENGINE_STEP)  # a file of the engine: a probe goes nowhere else
    monkeypatch.setenv("PYTHONPATH", str(fake))
    code, _, err = cli("probe", "add", "--file", str(fake / "sglang" / "engine_step.py"), "--before", "return width",
                       "--print",
                       "label", "--print", "width", "--once-per", "label", "--tag", "step", "--python", sys.executable)
    assert code == 0, err
    log = tmp_path / "server.log"
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/target", "--port", str(free_port)]
    port = str(free_port)
    with connect("local", state_dir=state_dir) as box:
        first = box.launch_server(argv, port=free_port, log_path=log, append_log=True, env={"PYTHONPATH": str(fake)})
        try:
            box.wait_healthy(first, timeout=60, path="/health")  # liveness only: a generation check would print a line
            for path in ("/one", "/two"):
                httpx.get(box.url(free_port) + path, timeout=10, trust_env=False)
            code, out, err = cli("probe", "read", "--tag", "step", "--port", port)
            assert code == 0, err
            assert f"from the server running now (pid {first.pid}, started " in out and "2 line(s)" in out
        finally:
            box.stop_server(first)
        second = box.launch_server(argv, port=free_port, log_path=log, append_log=True, env={"PYTHONPATH": str(fake)})
        try:
            box.wait_healthy(second, timeout=60, path="/health")
            code, out, err = cli("probe", "read", "--tag", "step", "--port", port)
            assert code == 1 and "0 line(s) from the server running now" in out
            assert re.search(rf"no \[probe:step\] line from the server running now \(pid {second.pid}, started [^)]+\) "
                             rf"— 2 lines in the log are from an earlier launch \(pgid {first.pgid}\); send a request",
                             err), err
            httpx.get(box.url(free_port) + "/three", timeout=10, trust_env=False)
            code, out, err = cli("probe", "read", "--tag", "step", "--port", port, "--json")
            assert code == 0, err
            got = json.loads(out)
            assert [(r["values"]["label"], r["pgid"]) for r in got["readings"]] == [("/three", second.pgid)]
            assert got["launch"]["pgid"] == second.pgid and got["other_launches"] == {str(first.pgid): 2}
            code, out, _ = cli("probe", "read", "--tag", "step", "--port", port)
            assert code == 0 and "(not shown: 2 lines in the log are from an earlier launch" in out
            # a probe added after this server started: the message asks for a restart
            time.sleep(0.6)  # the start time is compared with half a second of slack
            code, _, err = cli("probe", "add", "--file", str(fake / "sglang" / "engine_step.py"),
                               "--before", "width = ",
                               "--print", "label", "--tag", "late", "--python", sys.executable)
            assert code == 0, err
            code, _, err = cli("probe", "read", "--tag", "late", "--port", port)
            assert code == 1 and "no [probe:late] line at all in" in err
            assert "it started before the probe was added: restart it" in err
        finally:
            box.stop_server(second)
    code, out, err = cli("probe", "read", "--tag", "step", "--log", str(log))
    assert code == 0, err
    assert "3 line(s)" in out and out.count(f"(pgid {first.pgid}, pid {first.pid})") == 2
    assert out.count(f"(pgid {second.pgid}, pid {second.pid})") == 1
    code, out, _ = cli("probe", "read", "--tag", "step", "--log", str(log), "--pgid", str(first.pgid), "--json")
    assert code == 0 and [r["values"]["label"] for r in json.loads(out)["readings"]] == ["/one", "/two"]
    code, _, err = cli("probe", "read", "--tag", "step", "--log", str(log), "--pgid", "1")
    assert code == 1 and "no [probe:step] line from launch pgid 1 — 3 lines in the log are from an earlier launch" in err
    assert cli("probe", "revert", "--all")[0] == 0
    assert (fake / "sglang" / "engine_step.py").read_text() == ENGINE_STEP


#: Runs the real ``LlamaForCausalLMEagle3.load_weights`` of a (probed) 0.5.23 llama_eagle3.py, lifted
#: out of its module, on a stand-in draft with four parameters and a checkpoint of five tensors: one
#: q_proj name with a typo (dropped in the stacked loop), one fc name with a typo (dropped among the
#: others), d2t. Prints the names of the parameters it wrote.
RUN_LOAD_WEIGHTS = '''\
import __future__, ast, sys
import torch
path = sys.argv[1]
tree = ast.parse(open(path).read())
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LlamaForCausalLMEagle3")
fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "load_weights")
code = compile(ast.Module(body=[fn], type_ignores=[]), path, "exec", flags=__future__.annotations.compiler_flag)
written = []


def default_weight_loader(param, w):
    written.append(param.ewb_name)
    param.data.copy_(w)


def stacked_loader(param, w, shard_id):
    written.append(param.ewb_name + ":" + str(shard_id))


class Draft:
    def __init__(self):
        self.hot_token_id = None
        self.params = {}
        for name, shape in (("model.fc.weight", (2, 6)), ("model.layers.0.self_attn.qkv_proj.weight", (6, 4)),
                            ("model.norm.weight", (2,)), ("lm_head.weight", (3, 2))):
            p = torch.nn.Parameter(torch.ones(shape), requires_grad=False)
            p.ewb_name = name
            if "qkv" in name:
                p.weight_loader = stacked_loader
            self.params[name] = p

    def named_parameters(self):
        return iter(self.params.items())


g = {"__name__": "draft", "torch": torch, "default_weight_loader": default_weight_loader, "Iterable": None,
     "Tuple": None}
exec(code, g)
weights = [("midlayr.self_attn.q_proj.weight", torch.zeros(2, 4)), ("midlayer.self_attn.k_proj.weight", torch.zeros(2, 4)),
           ("fc.weights", torch.zeros(2, 6)), ("norm.weight", torch.zeros(2)), ("d2t", torch.zeros(3, dtype=torch.long))]
draft = Draft()
g["load_weights"](draft, weights)
print(" ".join(written), draft.hot_token_id.tolist())
'''


def test_weight_recipes_run_in_the_real_0_5_23_load_weights(site, sglang_source, cli, tmp_path):
    """``probe add --recipe draft-weights-unmatched`` and ``draft-params-at-init`` on the real 0.5.23
    files (all or none: refused while the worker file is missing); the real load_weights then runs
    (lifted out, stand-ins for the draft): only the two dropped names print, each where SGLang drops
    it, the norms before loading print once, the function's behaviour is unchanged, and ``probe read
    --recipe`` gives the answer (or says the readings are incomplete)."""
    draft = site / "sglang" / DRAFT_REL
    code, out, err = cli("probe", "add", "--recipe", "draft-weights-unmatched", "--python", sys.executable)
    assert code == 0, err
    assert out.startswith("recipe draft-weights-unmatched: 3 probes on local")
    for tag in ("draft-weights-unmatched", "draft-weights-unmatched.2", "draft-weights-unmatched.ran"):
        assert f"probe {tag} added on local" in out and f"workbench probe revert --host local --tag {tag}" in out
    assert "workbench probe read --host local --recipe draft-weights-unmatched" in out
    code, out, err = cli("probe", "add", "--recipe", "draft-params-at-init", "--python", sys.executable, "--json")
    assert code == 2 and "eagle_worker_v2.py" in err  # the worker file is not in this site: all or none
    assert sorted(p.name for p in (tmp_path / "box-state" / "probes").iterdir()) == sorted(
        f"{t}.{ext}" for t in ("draft-weights-unmatched", "draft-weights-unmatched.2", "draft-weights-unmatched.ran")
        for ext in ("json", "orig"))
    worker_rel = "srt/speculative/eagle_worker_v2.py"
    (site / "sglang" / worker_rel).parent.mkdir(parents=True)
    shutil.copy2(sglang_source / worker_rel, site / "sglang" / worker_rel)
    code, out, err = cli("probe", "add", "--recipe", "draft-params-at-init", "--python", sys.executable, "--json")
    assert code == 0, err
    assert [(p["tag"], p["path"]) for p in json.loads(out)["recipe_probes"]] == [
        ("draft-params-at-init", str(site / "sglang" / worker_rel)), ("draft-params-at-init.before", str(draft))]
    log = tmp_path / "server.log"
    with log.open("w") as f:
        proc = subprocess.run([sys.executable, "-c", RUN_LOAD_WEIGHTS, str(draft)], stderr=f, stdout=subprocess.PIPE,
                              text=True, timeout=120)
    assert proc.returncode == 0, log.read_text()[-2000:]
    # the real function, unchanged by the probes: k's shard and the norm written, q's and fc's dropped
    assert proc.stdout == "model.layers.0.self_attn.qkv_proj.weight:k model.norm.weight [0, 1, 2]\n"
    code, out, err = cli("probe", "read", "--recipe", "draft-weights-unmatched", "--log", str(log), "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["missing"] == [] and got["result"] == {"unmatched": ["midlayr.self_attn.qkv_proj.weight", "fc.weights"]}
    assert [(r["tag"], r["values"]) for r in got["readings"]] == [
        ("draft-weights-unmatched.ran", {"type(self).__name__": "Draft"}),
        ("draft-weights-unmatched", {"name": "midlayr.self_attn.qkv_proj.weight",
                                     "param_name": "model.midlayr.self_attn.qkv_proj.weight", "shard_id": "q"}),
        ("draft-weights-unmatched.2", {"name": "fc.weights", "param_name": "model.fc.weights"})]
    code, out, err = cli("probe", "read", "--recipe", "draft-weights-unmatched", "--log", str(log))
    assert code == 0 and "unmatched checkpoint names: midlayr.self_attn.qkv_proj.weight, fc.weights" in out
    # the norms before loading (all ones: sqrt(numel)); the worker's half cannot run here: incomplete
    code, out, err = cli("probe", "read", "--recipe", "draft-params-at-init", "--log", str(log), "--json")
    assert code == 1 and f"no [probe:draft-params-at-init] line in {log} yet, so its readings are incomplete" in err
    [before] = json.loads(out)["readings"]
    norms = before["values"][next(k for k in before["values"] if k.startswith("{n: repr("))]
    assert {k: float(v) for k, v in norms.items()} == pytest.approx(
        {"model.fc.weight": 12 ** 0.5, "model.layers.0.self_attn.qkv_proj.weight": 24 ** 0.5,
         "model.norm.weight": 2 ** 0.5, "lm_head.weight": 6 ** 0.5})
    # a log where load_weights never ran with the probes: no unmatched line is no evidence
    empty = tmp_path / "other.log"
    empty.write_text("[2026-01-01 12:00:00] server started\n")
    code, _, err = cli("probe", "read", "--recipe", "draft-weights-unmatched", "--log", str(empty))
    assert code == 1 and "no [probe:draft-weights-unmatched.ran] line at all" in err
    assert cli("probe", "revert", "--all")[0] == 0
    assert sha(draft) == sha(sglang_source / DRAFT_REL)
    # the same by hand: --when on the plain-parameter test (the README's example)
    code, out, err = cli("probe", "add", "--file", DRAFT_REL, "--line", "373", "--print", "name", "--once-per", "name",
                         "--when", "param_name not in params_dict", "--tag", "dropped", "--python", sys.executable)
    assert code == 0 and "only when param_name not in params_dict" in out, err
    code, out, _ = cli("probe", "list")
    assert code == 0 and "(only when param_name not in params_dict)" in out
    with log.open("w") as f:
        assert subprocess.run([sys.executable, "-c", RUN_LOAD_WEIGHTS, str(draft)], stderr=f, stdout=subprocess.DEVNULL,
                              timeout=120).returncode == 0
    code, out, _ = cli("probe", "read", "--tag", "dropped", "--log", str(log), "--json")
    assert code == 0 and [r["values"] for r in json.loads(out)["readings"]] == [{"name": "fc.weights"}]
    assert cli("probe", "revert", "--all")[0] == 0
    assert sha(draft) == sha(sglang_source / DRAFT_REL)
