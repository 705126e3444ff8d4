"""The three probe recipes on the embedded sandbox box, through ``workbench probe``: the sandbox
server is launched twice (EAGLE3, then EAGLE) with the probes in place, one ``/generate`` request
each, and the values read back from each server's log show the mechanism.

* ``draft-input-width``: the draft receives 3 x 160 = 480 wide hidden states under EAGLE3 and the
  target's 160 under EAGLE (fc is then skipped); ``self.fc.in_features`` is 480 either way.
* ``target-capture-layers``: the target captures the inputs of layers [2, 4, 7] (the draft's ids
  [1, 3, 6] + 1) under EAGLE3, none under EAGLE.
* ``draft-d2t``: under EAGLE3 the worker maps draft ids through ``hot_token_id`` of shape
  (draft vocab,) = (128,); under EAGLE it holds ``None`` (the target's lm_head replaced the
  draft's).

The sandbox's source files are shared with other tests: the probes are always reverted (in a
``finally``) and the files checked byte for byte against what they were before the test.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import time
from pathlib import Path

import httpx
import pytest

from remote import connect
from remote.probes import list_probes, read_probe_log
from workbench.cli import main
from workbench.engine import running_servers
from workbench.engine.recipes import TARGET_CAPTURES_AUX
from workbench.sandbox_box import sandbox_launch_command
from testkit.engine_copy import sandbox_engine_dir

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = sandbox_engine_dir()  # this process's engine (testkit.engine_copy)
PROBED = {  # recipe -> the sandbox file its map entry lies in
    "draft-input-width": "srt/models/llama_eagle3.py",
    "target-capture-layers": "srt/models/llama.py",
    "draft-d2t": "srt/speculative/eagle_worker.py",
}

pytestmark = pytest.mark.slow


def _probe(capsys, *argv) -> tuple[int, str, str]:
    code = main(["probe", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _serve_once(box, algorithm: str, port: int, log: Path, capsys) -> dict:
    """Launch the sandbox with ``algorithm``, send one /generate, read the three probes (through
    ``workbench probe read --port`` for one of them, the library for all), stop the server."""
    argv = shlex.split(sandbox_launch_command(algorithm=algorithm, port=port))
    handle = box.launch_server(argv, port=port, log_path=log)
    try:
        box.wait_healthy(handle, timeout=240)
        reply = httpx.post(box.url(port) + "/generate", timeout=120, trust_env=False,
                           json={"text": "def main():\n    ", "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
        assert reply.status_code == 200, reply.text
        assert reply.json()["meta_info"]["completion_tokens"] >= 1
        code, out, err = _probe(capsys, "read", "--tag", "draft-input-width", "--port", str(port), "--json")
        assert code == 0, err
        via_cli = json.loads(out)
        assert via_cli["log"] == str(log)
    finally:
        box.stop_server(handle)
    readings = {name: read_probe_log(box, log, next(p for p in list_probes(box) if p.tag == name), timeout=30)
                for name in PROBED}
    for name, found in readings.items():
        assert all(r.error is None for r in found), found
        if name == "draft-input-width":  # once per distinct width: the draft-extend and the draft's own steps
            widths = [r.values["hidden_states.shape"][-1] for r in found]
            assert len(widths) == len(set(widths)) >= 1, (algorithm, widths)
        else:
            assert len(found) == 1, (algorithm, name, found, log.read_text()[-3000:])  # once per process
    assert [r["values"]["hidden_states.shape"] for r in via_cli["readings"]] == [
        list(r.values["hidden_states.shape"]) for r in readings["draft-input-width"]]
    out = {name: found[0] for name, found in readings.items()}
    out["widths"] = [r.values["hidden_states.shape"][-1] for r in readings["draft-input-width"]]
    return out


def test_recipes_on_the_sandbox_under_eagle3_and_eagle(tmp_path, free_port, monkeypatch, capsys):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "box-state"))
    box = connect("local")
    files = {rel: SANDBOX / rel for rel in PROBED.values()}
    before = {rel: path.read_bytes() for rel, path in files.items()}
    target_hidden = json.loads((SANDBOX / "models" / "target" / "config.json").read_text())["hidden_size"]
    draft_cfg = json.loads((SANDBOX / "models" / "draft" / "config.json").read_text())
    aux_ids = draft_cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    try:
        for name, rel in PROBED.items():
            code, out, err = _probe(capsys, "add", "--recipe", name, "--package", "workbench.sandbox",
                                    "--python", sys.executable, "--json")
            assert code == 0, err
            added = json.loads(out)
            assert added["path"] == str(files[rel]) and added["engine"]["package"] == "workbench.sandbox"
        assert {p.tag for p in list_probes(box)} == set(PROBED)

        eagle3 = _serve_once(box, "EAGLE3", free_port, tmp_path / "eagle3.log", capsys)
        eagle = _serve_once(box, "EAGLE", free_port, tmp_path / "eagle.log", capsys)
    finally:
        code, out, err = _probe(capsys, "revert", "--all")
        restored = {rel: path.read_bytes() == before[rel] for rel, path in files.items()}
    assert code == 0, err
    assert restored == {rel: True for rel in files}, "a sandbox file was left patched"
    assert list_probes(box) == []

    # EAGLE3: the draft-extend after each target forward gets the 3 aux states (480), the draft's own
    # next steps its 160-wide state; EAGLE: only ever 160, the fc width never arrives.
    assert eagle3["widths"] == [3 * target_hidden, draft_cfg["hidden_size"]] == [480, 160]
    assert eagle["widths"] == [target_hidden] == [160]
    width3, width1 = eagle3["draft-input-width"].values, eagle["draft-input-width"].values
    assert width3["hidden_states.shape"][-1] == 3 * target_hidden == 480
    assert width1["hidden_states.shape"][-1] == target_hidden == 160
    assert width3["embeds.shape"][-1] == width1["embeds.shape"][-1] == draft_cfg["hidden_size"]
    assert width3["self.fc.in_features"] == width1["self.fc.in_features"] == 480
    assert width3["hidden_states.dtype"] == "torch.float32"

    layers3, layers1 = eagle3["target-capture-layers"].values, eagle["target-capture-layers"].values
    assert layers3["self.layers_to_capture"] == [i + 1 for i in aux_ids] == [2, 4, 7]
    assert layers3[TARGET_CAPTURES_AUX] is True
    assert layers1["self.layers_to_capture"] == []
    assert layers1[TARGET_CAPTURES_AUX] is False

    d2t3, d2t1 = eagle3["draft-d2t"], eagle["draft-d2t"]
    assert d2t3.values["self.hot_token_id is None"] is False
    shape_expr, head_expr = (f"None if self.hot_token_id is None else {e}"
                             for e in ("tuple(self.hot_token_id.shape)", "self.hot_token_id[:8].tolist()"))
    assert d2t3.values[shape_expr] == (draft_cfg["draft_vocab_size"],) == (128,)
    head = d2t3.values[head_expr]
    assert len(head) == 8 and all(0 <= t < draft_cfg["vocab_size"] for t in head)
    assert d2t1.values["self.hot_token_id is None"] is True
    assert d2t1.values[shape_expr] is None and d2t1.values[head_expr] is None and not d2t1.errors


# -- the weight recipes, and one log appended by two launches ------------------------------------------

#: Checkpoint names renamed in the broken copy of the draft, and the names load_weights then looks
#: for and drops: one in the plain branch (``.2``), one in the stacked q/k/v loop (the main probe).
RENAMED = {"fc.weight": "fc.weights", "midlayer.self_attn.q_proj.weight": "midlayr.self_attn.q_proj.weight"}
DROPPED = {"fc.weights": "model.fc.weights", "midlayr.self_attn.qkv_proj.weight": "model.midlayr.self_attn.qkv_proj.weight"}
WEIGHT_PROBES = {"draft-weights-unmatched": "srt/models/llama_eagle3.py",
                 "draft-params-at-init": "srt/speculative/eagle_worker.py", "draft-input-width": "srt/models/llama_eagle3.py"}


def _broken_draft(tmp_path: Path) -> Path:
    """A copy of the sandbox draft with the tensors of RENAMED renamed in its safetensors file."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    src = SANDBOX / "models" / "draft"
    dest = tmp_path / "draft-renamed"
    dest.mkdir()
    (dest / "config.json").write_bytes((src / "config.json").read_bytes())
    with safe_open(str(src / "model.safetensors"), framework="np") as f:
        metadata = f.metadata()
    tensors = load_file(str(src / "model.safetensors"))
    save_file({RENAMED.get(k, k): v for k, v in tensors.items()}, str(dest / "model.safetensors"), metadata=metadata)
    return dest


def _read(capsys, *argv) -> tuple[int, dict, str]:
    code, out, err = _probe(capsys, "read", *argv, "--json")
    return code, (json.loads(out) if out.strip() else {}), err


def test_weight_recipes_name_what_load_weights_dropped_per_launch(tmp_path, free_port, monkeypatch, capsys):
    """The healthy draft, then a copy with two tensors renamed, served in turn with their lines
    appended to one log: ``draft-weights-unmatched`` shows no name for the first launch and exactly
    the two dropped names for the second; ``draft-params-at-init`` shows the fc the rename left at its
    random initialisation; ``probe read --port`` counts only the running server's lines (before its
    first line, the draft-input-width lines in the log are the earlier launch's)."""
    from workbench.engine.recipes import params_left_at_init, read_recipes, weights_unmatched

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "box-state"))
    box = connect("local")
    files = {rel: SANDBOX / rel for rel in WEIGHT_PROBES.values()}
    before = {rel: path.read_bytes() for rel, path in files.items()}
    broken = _broken_draft(tmp_path)
    log = tmp_path / "server.log"
    port = str(free_port)
    launches = {}
    try:
        for name in WEIGHT_PROBES:
            code, out, err = _probe(capsys, "add", "--recipe", name, "--package", "workbench.sandbox", "--python",
                                    sys.executable, "--json")
            assert code == 0, err
        probes = list_probes(box)
        assert sorted(p.tag for p in probes) == sorted([
            "draft-weights-unmatched", "draft-weights-unmatched.2", "draft-weights-unmatched.ran",
            "draft-params-at-init", "draft-params-at-init.before", "draft-input-width"])
        for label, draft in (("healthy", SANDBOX / "models" / "draft"), ("renamed", broken)):
            argv = shlex.split(sandbox_launch_command(algorithm="EAGLE3", port=free_port))
            argv[argv.index("--speculative-draft-model-path") + 1] = str(draft)
            handle = box.launch_server(argv, port=free_port, log_path=log, append_log=True)
            launches[label] = handle
            try:
                # right after the launch (the server still imports torch and loads): no line of its own yet.
                # (Once healthy it has printed its width: the warm-up request runs the draft.)
                deadline = time.monotonic() + 30
                while not running_servers(box, port=free_port) and time.monotonic() < deadline:
                    time.sleep(0.02)  # until the launcher's shell has exec'd the server
                width_before = _read(capsys, "--tag", "draft-input-width", "--port", port)
                box.wait_healthy(handle, timeout=240)
                unmatched = _read(capsys, "--recipe", "draft-weights-unmatched", "--port", port)
                at_init = _read(capsys, "--recipe", "draft-params-at-init", "--port", port)
                reply = httpx.post(box.url(free_port) + "/generate", timeout=120, trust_env=False,
                                   json={"text": "def main():\n    ", "sampling_params": {"max_new_tokens": 4}})
                assert reply.status_code == 200, reply.text
                width_after = _read(capsys, "--tag", "draft-input-width", "--port", port)  # warm-up and request
                by_recipe = read_recipes(box, log, probes, pgid=handle, timeout=30)
            finally:
                box.stop_server(handle)
            launches[label] = (handle, width_before, unmatched, at_init, width_after, by_recipe)
    finally:
        code, out, err = _probe(capsys, "revert", "--all")
        restored = {rel: path.read_bytes() == before[rel] for rel, path in files.items()}
    assert code == 0, err
    assert restored == {rel: True for rel in files}, "a sandbox file was left patched"

    (h1, w1_before, unmatched1, init1, w1_after, recipes1) = launches["healthy"]
    (h2, w2_before, unmatched2, init2, w2_after, recipes2) = launches["renamed"]
    # healthy: load_weights ran with the probes in place and matched every name; only the embedding is
    # unwritten (the target's replaces it right after); nothing of the draft-input-width yet
    assert unmatched1[0] == 0 and unmatched1[1]["missing"] == [] and unmatched1[1]["result"] == {"unmatched": []}
    assert [r["tag"] for r in unmatched1[1]["readings"]] == ["draft-weights-unmatched.ran"]
    assert init1[0] == 0 and init1[1]["result"]["faults"] == {}
    assert init1[1]["result"]["shared_from_target"] == ["model.embed_tokens.weight"]
    assert w1_before[0] == 1 and "no [probe:draft-input-width] line at all" in w1_before[2]
    assert w1_after[0] == 0 and {r["pgid"] for r in w1_after[1]["readings"]} == {h1.pgid}
    # renamed: exactly the two dropped names, from this launch only; fc left at its initial value (the
    # q shard dropped from qkv_proj is a partial write: named by draft-weights-unmatched, not at init)
    assert unmatched2[0] == 0 and sorted(unmatched2[1]["result"]["unmatched"]) == sorted(DROPPED)
    assert {r["values"]["name"]: r["values"]["param_name"] for r in unmatched2[1]["readings"] if r["values"].get("name")
            } == DROPPED
    assert {r["pgid"] for r in unmatched2[1]["readings"]} == {h2.pgid}
    assert init2[0] == 0 and list(init2[1]["result"]["faults"]) == ["model.fc.weight"]
    assert "model.layers.0.self_attn.qkv_proj.weight" in init2[1]["result"]["changed"]
    # before its warm-up the second server has printed no width: the log's lines are the first's
    assert w2_before[0] == 1
    assert (f"no [probe:draft-input-width] line from the server running now (pid {h2.pid}, started" in w2_before[2]
            and "are from an earlier launch" in w2_before[2] and "send a request" in w2_before[2])
    assert w2_before[1]["readings"] == [] and list(w2_before[1]["other_launches"]) == [str(h1.pgid)]
    assert w2_after[0] == 0
    assert {r["pgid"] for r in w2_after[1]["readings"]} == {h2.pgid}
    # the library: the same, per launch
    assert weights_unmatched(recipes1["draft-weights-unmatched"]) == []
    assert sorted(weights_unmatched(recipes2["draft-weights-unmatched"])) == sorted(DROPPED)
    assert list(params_left_at_init(recipes2["draft-params-at-init"]).faults) == ["model.fc.weight"]
    assert params_left_at_init(recipes1["draft-params-at-init"]).compared == 1
    assert {r.pgid for rs in recipes2.values() for r in rs} == {h2.pgid}
    assert list_probes(box) == []
