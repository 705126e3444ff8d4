"""``--engine-root DIR``: the doctor and ``workbench source`` read another release's tree (a published
wheel unpacked, never installed) instead of locating the engine with an interpreter."""

import json

import pytest

from rule_helpers import LLAMA31_8B, deploy, draft_cfg, launch


@pytest.fixture
def deployment(tmp_path):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    return deploy(tmp_path, LLAMA31_8B, cfg)


def test_doctor_on_another_releases_tree(cli, sglang_release, deployment):
    target, draft = deployment
    cmd = launch(target, draft, extra="--cuda-graph-max-bs 32")
    # 0.5.23 split --cuda-graph-max-bs: argparse refuses the prefix, the server does not start
    code, out, err = cli("doctor", "--launch", cmd, "--engine-root", str(sglang_release("0.5.23")), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["engine_version"] == "0.5.23", err
    assert "launch-flag-unknown" in {f["rule"] for f in doc["findings"]}
    # 0.5.9 has the flag: the same command is clean there
    code, out, err = cli("doctor", "--launch", cmd, "--engine-root", str(sglang_release("0.5.9")), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["engine_version"] == "0.5.9", (err, [f["rule"] for f in doc["findings"]])
    assert doc["engine_root"] == str(sglang_release("0.5.9"))


def test_source_map_on_another_releases_tree(cli, sglang_release):
    root = sglang_release("0.5.9")
    code, out, err = cli("source", "map", "--engine-root", str(root), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["version"] == "0.5.9" and doc["root"] == str(root)
    entries = {e["key"]: e for e in doc["entries"]}
    # by hand: 0.5.9 runs eagle_worker.py by default (SGLANG_ENABLE_SPEC_V2 = EnvBool(False));
    # `if self.speculative_algorithm.is_eagle3():` at srt/speculative/eagle_worker.py:120
    assert entries["token-map-init"]["location"] == f"{root}/srt/speculative/eagle_worker.py:120"
    code, out, err = cli("source", "show", "srt/models/llama_eagle3.py:162", "-C", "0", "--engine-root", str(root))
    assert code == 0 and "if hidden_states.shape[-1] != embeds.shape[-1]:" in out, (out, err)


@pytest.mark.parametrize("where, message", [
    ("/nonexistent/sglang", "no such directory"),
    ("{parent}", "did you mean {parent}/sglang?"),
    ("{pkg}/srt", "is not an SGLang package directory"),
    ("", "--engine-root is empty"),
    ("{pkg}/version.py", "is a file, not a directory (give the sglang/ package directory, {pkg}?)"),
])
def test_bad_engine_root_is_one_line_exit_2(cli, sglang_release, deployment, where, message):
    pkg = sglang_release("0.5.9")
    where = where.format(parent=pkg.parent, pkg=pkg)
    message = message.format(parent=pkg.parent, pkg=pkg)
    target, draft = deployment
    for argv in (("doctor", "--launch", launch(target, draft)), ("source", "map")):
        code, out, err = cli(*argv, "--engine-root", where)
        assert code == 2 and message in err and "Traceback" not in err, (argv, out, err)
