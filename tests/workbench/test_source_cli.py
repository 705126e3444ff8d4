"""``workbench source locate|show|find|map|scan`` on the sandbox engine and the real SGLang 0.5.23
source, in process (the ``cli`` fixture) and over the loopback sshd."""

import json
import pathlib
import sys

import pytest
from testkit.engine_copy import sandbox_engine_dir


SANDBOX = sandbox_engine_dir()  # the engine this process's box finds (testkit.engine_copy)
ON_SANDBOX = ["--package", "workbench.sandbox", "--python", sys.executable]


def _line_of(path: pathlib.Path, text: str) -> int:
    (n,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip() == text]
    return n


def test_locate_and_map_on_the_sandbox_engine(cli):
    code, out, _ = cli("source", "locate", *ON_SANDBOX, "--json")
    assert code == 0 and json.loads(out)["root"] == str(SANDBOX)
    code, out, _ = cli("source", "map", *ON_SANDBOX, "--aux-ids", "1,3,6", "--num-layers", "8", "--json")
    assert code == 0
    doc = json.loads(out)
    entries = {e["key"]: e for e in doc["entries"]}
    assert all(e["found"] for e in entries.values()) and len(entries) == 15
    draft = SANDBOX / "srt/models/llama_eagle3.py"
    check = entries["draft-fc-width-check"]
    assert check["location"] == f"{draft}:{_line_of(draft, 'if hidden_states.shape[-1] != embeds.shape[-1]:')}"
    assert "for draft ids [1, 3, 6] on 8 layers it captures [2, 4, 7]" in entries["target-offset-rule"]["detail"]
    code, out, _ = cli("source", "map", *ON_SANDBOX)
    assert code == 0 and "draft-fc-width-check" in out and "srt/models/llama_eagle3.py:" in out


def test_show_and_find(cli):
    draft = SANDBOX / "srt/models/llama_eagle3.py"
    line = _line_of(draft, "if hidden_states.shape[-1] != embeds.shape[-1]:")
    code, out, _ = cli("source", "show", f"srt/models/llama_eagle3.py:{line}", "-C", "1", *ON_SANDBOX)
    assert code == 0
    assert out.splitlines()[0] == f"{draft}:{line}"
    assert out.splitlines()[2] == f"> {line} |         if hidden_states.shape[-1] != embeds.shape[-1]:"
    assert len(out.splitlines()) == 4
    code, out, _ = cli("source", "find", "LlamaForCausalLMEagle3.load_weights", *ON_SANDBOX, "--json")
    (found,) = json.loads(out)
    assert code == 0 and found["file"] == str(draft)
    assert draft.read_text().splitlines()[found["line"] - 1].strip().startswith("def load_weights(")


def test_scan_on_real_source_through_a_launch_command(cli, sglang_source):
    launch = (f"PYTHONPATH={sglang_source.parent} python3 -m sglang.launch_server --model-path /nonexistent/model "
              "--speculative-algorithm EAGLE3")
    code, out, _ = cli("source", "scan", "--launch", launch, "--json")
    assert code == 0
    doc = json.loads(out)
    where = sorted(f["evidence"]["source"]["value"] for f in doc["findings"])
    assert where == sorted([
        f"{sglang_source}/srt/model_executor/model_runner_components/spec_aux_hidden_state.py:195",
        f"{sglang_source}/srt/models/llama_eagle3.py:238", f"{sglang_source}/srt/models/llama_eagle3.py:363",
        f"{sglang_source}/srt/models/llama_eagle3.py:373"])
    assert doc["engine"]["version"] == "0.5.23"
    assert any("target config not read" in n for n in doc["notes"])


@pytest.mark.parametrize("argv, message", [
    (["show", "srt/models/nope.py:3", *ON_SANDBOX], "no file srt/models/nope.py in the engine package"),
    (["show", "srt/models/llama_eagle3.py:99999", *ON_SANDBOX], "line 99999 is outside"),
    (["find", "no_such_function_xyz", *ON_SANDBOX], "no definition of 'no_such_function_xyz'"),
    (["find", "load_weights", "--file", "srt/nosuch.py", *ON_SANDBOX], "no file srt/nosuch.py in the engine package"),
    (["locate", "--package", "no_such_engine_pkg", "--python", sys.executable], "no_such_engine_pkg package is not found"),
    (["map", "--launch", "not a launch command"], "workbench source map:"),
    (["locate", "--host", "nosuchalias-ewb"], "workbench source locate:"),
])
def test_bad_input_exits_2_with_one_line(cli, argv, message):
    code, out, err = cli("source", *argv)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--aux-ids", "1,x"], "expected comma-separated layer ids"),
    (["--aux-ids", ""], "expected non-negative layer ids"),
    (["--num-layers", "-3"], "must be >= 1"),
    (["--port", "0"], "must be >= 1"),
])
def test_bad_numbers_are_usage_errors(cli, argv, message):
    code, _, err = cli("source", "map", *argv, *ON_SANDBOX)
    assert code == 2
    assert message in err


def test_package_sandbox_from_another_directory_and_relative_launch_paths(cli, tmp_path, monkeypatch):
    """From any directory, --package workbench.sandbox reads the sandbox engine; a --launch with
    relative model paths resolves them against --cwd (default: this directory)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("source", "locate", "--package", "workbench.sandbox", "--json")
    assert code == 0, err
    assert json.loads(out)["root"] == str(SANDBOX)
    launch = (f"{sys.executable} -m workbench.sandbox.launch_server --model-path workbench/sandbox/models/target "
              "--speculative-algorithm EAGLE3 --speculative-draft-model-path workbench/sandbox/models/draft")
    repo = str(SANDBOX.parents[1])
    code, out, err = cli("source", "map", "--launch", launch, "--cwd", repo, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["notes"] == []
    rule = next(e for e in doc["entries"] if e["key"] == "target-offset-rule")
    assert "for draft ids [1, 3, 6] on 8 layers it captures [2, 4, 7]" in rule["detail"]
    monkeypatch.chdir(repo)
    code, out, err = cli("source", "map", "--launch", launch, "--json")
    assert code == 0 and json.loads(out)["notes"] == []


def test_map_over_ssh(cli, ssh_env):
    code, out, _ = cli("source", "map", "--host", ssh_env.alias, *ON_SANDBOX, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["engine"]["root"] == str(SANDBOX) and all(e["found"] for e in doc["entries"])
