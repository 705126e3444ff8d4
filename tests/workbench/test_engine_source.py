"""The engine on the box: locating it, reading its source, the EAGLE-3 code-path map and the
swallowed-error scan, on the real SGLang 0.5.23 source (the published wheel) and edited copies of
it standing for other versions, and on the sandbox box's engine."""

import hashlib
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from workbench.engine.recipes import RECIPES, recipe_probe, recipe_probes
from workbench.engine.codepath import code_path_map, map_for_launch
from workbench.rules.engine_source import scan_swallowed
from workbench.engine import EngineNotFound, EngineSource, SourceLookupError, find_engine
from testkit.engine_copy import sandbox_engine_dir

SANDBOX_ROOT = sandbox_engine_dir()  # the engine this process's box finds (testkit.engine_copy)

# Where each entry is in SGLang 0.5.23, and the text of that line (checked against the file too).
EXPECTED_0_5_23 = {
    "spec-algorithm-is-eagle3": ("srt/speculative/spec_info.py", 111, "def is_eagle3(self) -> bool:"),
    "aux-capture-gate": ("srt/model_executor/model_runner_components/spec_aux_hidden_state.py", 185,
                         "if spec_algorithm.is_eagle3():"),
    "eagle-config-read": ("srt/model_executor/model_runner_components/spec_aux_hidden_state.py", 187, "try:"),
    "capture-configured": ("srt/model_executor/model_runner_components/attention_backend_setup.py", 61,
                           "model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)"),
    "target-offset-rule": ("srt/models/llama.py", 929,
                           "def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):"),
    "target-capture-point": ("srt/models/llama.py", 492, "if i in self.layers_to_capture"),
    "draft-fc-defined": ("srt/models/llama_eagle3.py", 163, "self.fc = torch.nn.Linear("),
    "draft-fc-width-check": ("srt/models/llama_eagle3.py", 238, "if hidden_states.shape[-1] != embeds.shape[-1]:"),
    "draft-params-dict": ("srt/models/llama_eagle3.py", 326, "params_dict = dict(self.named_parameters())"),
    "draft-weight-renames": ("srt/models/llama_eagle3.py", 338, "legacy_name_map = {"),
    "draft-weight-drop": ("srt/models/llama_eagle3.py", 363, "if param_name in params_dict:"),
    "draft-d2t-read": ("srt/models/llama_eagle3.py", 352,
                       "self.hot_token_id = loaded_weight + torch.arange(loaded_weight.shape[0])"),
    "token-map-init": ("srt/speculative/eagle_worker_v2.py", 325, "if self.speculative_algorithm.is_eagle3():"),
    "lm-head-shared": ("srt/speculative/eagle_worker_v2.py", 353, "if self.speculative_algorithm.is_eagle3():"),
    "d2t-use": ("srt/speculative/eagle_worker_v2.py", 758, "topk_index = self.hot_token_id[topk_index]"),
}

PATH_FILES = sorted({f for f, _, _ in EXPECTED_0_5_23.values()} | {"__init__.py", "version.py", "_version.py"})


@pytest.fixture
def sglang_copy(sglang_source, tmp_path):
    """A copy of the SGLang 0.5.23 files on the EAGLE-3 path (package dir ``.../sglang``), for
    edits that stand for other versions."""
    root = tmp_path / "site" / "sglang"
    for rel in PATH_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sglang_source / rel, root / rel)
    return root


def _src(box, root, version="0.5.23"):
    return EngineSource(box, str(root), version)


def test_map_on_real_0_5_23_every_entry_at_its_line(box, sglang_source):
    cmap = code_path_map(_src(box, sglang_source), aux_ids=[1, 3, 6], num_layers=8)
    assert [e.key for e in cmap.entries] == list(EXPECTED_0_5_23)
    for entry in cmap.entries:
        rel, line, text = EXPECTED_0_5_23[entry.key]
        assert entry.found, entry
        assert (entry.file, entry.line) == (str(sglang_source / rel), line), entry.key
        assert (sglang_source / rel).read_text().splitlines()[line - 1].strip() == text
        assert entry.code.strip() == text
    assert cmap.missing == []
    rule = cmap.entry("target-offset-rule")
    assert "captures [2, 4, 7]" in rule.detail and "[val + 1 for val in layer_ids]" in rule.detail
    assert cmap.entry("draft-weight-drop").also == (373,)
    assert "except Exception:` at line 195 neither logs nor re-raises" in cmap.entry("eagle-config-read").detail
    assert cmap.entry("d2t-use").function == "EagleDraftWorker.draft_forward"
    assert cmap.entry("lm-head-shared").detail.startswith("non-EAGLE3 branch calls set_embed_and_head")
    text = cmap.to_text()
    assert "srt/models/llama_eagle3.py:238" in text and "NOT FOUND" not in text


def test_scan_finds_the_broad_except_and_the_silent_fallbacks(box, sglang_source):
    src = _src(box, sglang_source)
    findings = scan_swallowed(src, code_path_map(src))
    where = {f.evidence["source"]["value"]: f for f in findings}
    aux = str(sglang_source / "srt/model_executor/model_runner_components/spec_aux_hidden_state.py")
    # the handler's own line (spec_aux_hidden_state.py:195 `except Exception:`), the guarded
    # eagle_config read (:188) as context
    assert set(where) == {f"{aux}:195", f"{sglang_source}/srt/models/llama_eagle3.py:238",
                          f"{sglang_source}/srt/models/llama_eagle3.py:363",
                          f"{sglang_source}/srt/models/llama_eagle3.py:373"}
    assert where[f"{sglang_source}/srt/models/llama_eagle3.py:373"].evidence["code"] == "if param_name in params_dict:"
    broad = where[f"{aux}:195"]
    assert broad.rule == "swallowed-config-error" and broad.evidence["handler"] == "except Exception: (line 195)"
    assert broad.evidence["guarded"]["value"] == f"{aux}:188"
    assert broad.evidence["guarded_code"] == 'eagle_config = getattr(draft_model_config.hf_config, "eagle_config", None)'
    assert broad.message.startswith("srt/model_executor/model_runner_components/spec_aux_hidden_state.py:195 ")
    assert broad.evidence["fallback"] == "config.eagle_aux_hidden_state_layer_ids = None"
    assert broad.evidence["function"] == "_resolve_eagle_aux_hidden_state"


def test_scan_ignores_a_handler_that_logs_or_reraises(box, sglang_copy):
    aux = sglang_copy / "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
    text = aux.read_text()
    logged = text.replace("        except Exception:\n            config.eagle_aux_hidden_state_layer_ids = None",
                          "        except Exception:\n            logger.warning('bad eagle_config')\n"
                          "            config.eagle_aux_hidden_state_layer_ids = None")
    assert logged != text
    aux.write_text(logged)
    src = _src(box, sglang_copy)
    assert not [f for f in scan_swallowed(src, code_path_map(src)) if "spec_aux" in f.message]
    aux.write_text(text.replace("        except Exception:\n            config.eagle_aux_hidden_state_layer_ids = None",
                                "        except Exception:\n            raise"))
    src = _src(box, sglang_copy)
    assert not [f for f in scan_swallowed(src, code_path_map(src)) if "spec_aux" in f.message]
    aux.write_text(text.replace("        except Exception:\n", "        except (ValueError, BaseException):\n"))
    src = _src(box, sglang_copy)
    assert [f for f in scan_swallowed(src, code_path_map(src)) if "spec_aux" in f.message]


def test_older_layout_gate_in_model_runner_with_bare_except(box, sglang_copy):
    """The 0.4.x layout: no spec_aux_hidden_state.py; ModelRunner.__init__ reads eagle_config under
    a bare ``except:`` and calls ``self.model.set_eagle3_layers_to_capture`` itself."""
    (sglang_copy / "srt/model_executor/model_runner_components/spec_aux_hidden_state.py").unlink()
    (sglang_copy / "srt/model_executor/model_runner_components/attention_backend_setup.py").unlink()
    runner = sglang_copy / "srt/model_executor/model_runner.py"
    runner.write_text(
        "class ModelRunner:\n"
        "    def __init__(self, model_config, spec_algorithm, is_draft_worker):\n"
        "        self.eagle_use_aux_hidden_state = False\n"
        "        if spec_algorithm.is_eagle3() and not is_draft_worker:\n"
        "            self.eagle_use_aux_hidden_state = True\n"
        "            try:\n"
        "                eagle_config = getattr(model_config.hf_config, 'eagle_config', None)\n"
        "                self.eagle_aux_hidden_state_layer_ids = eagle_config['eagle_aux_hidden_state_layer_ids']\n"
        "            except:\n"
        "                self.eagle_aux_hidden_state_layer_ids = None\n"
        "\n"
        "    def load_model(self):\n"
        "        if self.eagle_use_aux_hidden_state:\n"
        "            self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)\n")
    src = _src(box, sglang_copy, "0.4.9")
    cmap = code_path_map(src)
    rel = str(runner)
    assert (cmap.entry("aux-capture-gate").file, cmap.entry("aux-capture-gate").line) == (rel, 4)
    assert (cmap.entry("eagle-config-read").file, cmap.entry("eagle-config-read").line) == (rel, 6)
    assert "bare except" in cmap.entry("eagle-config-read").detail
    assert (cmap.entry("capture-configured").file, cmap.entry("capture-configured").line) == (rel, 14)
    assert cmap.entry("capture-configured").function == "ModelRunner.load_model"
    finding = [f for f in scan_swallowed(src, cmap) if "model_runner.py" in f.message]
    assert len(finding) == 1 and finding[0].evidence["source"]["value"] == f"{rel}:9"
    assert finding[0].evidence["handler"] == "except: (line 9)"
    assert finding[0].evidence["guarded"]["value"] == f"{rel}:7"


def test_a_piece_missing_in_this_version_is_said_and_never_given_a_line(box, sglang_copy):
    (sglang_copy / "srt/model_executor/model_runner_components/attention_backend_setup.py").unlink()
    spec_info = sglang_copy / "srt/speculative/spec_info.py"
    spec_info.write_text(spec_info.read_text().replace("def is_eagle3(self)", "def is_eagle_three(self)"))
    cmap = code_path_map(_src(box, sglang_copy))
    cap = cmap.entry("capture-configured")
    assert not cap.found and cap.line is None and cap.file is None
    assert "attention_backend_setup.py" in cap.looked_in
    assert "capture-configured" in cmap.missing and "spec-algorithm-is-eagle3" in cmap.missing
    assert "NOT FOUND in this version" in cmap.to_text()
    with pytest.raises(KeyError, match="no entry 'nope'"):
        cmap.entry("nope")


def test_missing_target_or_draft_class_is_reported_not_guessed(box, sglang_source):
    cmap = code_path_map(_src(box, sglang_source), target_arch="NoSuchForCausalLM", draft_arch="NoSuchEagle3")
    for key in ("target-offset-rule", "target-capture-point", "draft-fc-width-check", "draft-weight-drop"):
        assert not cmap.entry(key).found and cmap.entry(key).line is None, key
    assert "NoSuchForCausalLM" in cmap.entry("target-offset-rule").looked_in
    assert "no draft class NoSuchEagle3" in cmap.entry("draft-fc-width-check").looked_in
    with pytest.raises(SourceLookupError, match="draft-input-width: the code-path entry draft-fc-width-check"):
        recipe_probe(cmap, "draft-input-width")


def test_deepseek_target_entries_come_from_its_own_file(box, sglang_source):
    cmap = code_path_map(_src(box, sglang_source), target_arch="DeepseekV3ForCausalLM", aux_ids=[1, 29, 57],
                         num_layers=61)
    rule = cmap.entry("target-offset-rule")
    assert rule.found and rule.file.endswith("srt/models/deepseek_v2.py")
    lines = (sglang_source / "srt/models/deepseek_v2.py").read_text().splitlines()
    assert lines[rule.line - 1].strip().startswith("def set_eagle3_layers_to_capture")
    assert "captures [2, 30, 58]" in rule.detail
    point = cmap.entry("target-capture-point")
    assert point.found and point.file.endswith("srt/models/deepseek_v2.py")
    # the entry names the capture test (3194); probes go before the layer call that holds it (3185)
    assert (point.line, point.code.strip()) == (3194, "if i in self.layers_to_capture")
    assert (point.probe_line, lines[3185 - 1].strip()) == (3185, "(hidden_states, topk_indices) = layer(")


def test_sandbox_engine_map_is_complete_and_recipes_resolve(box):
    src = _src(box, SANDBOX_ROOT, None)
    cmap = code_path_map(src, aux_ids=[1, 3, 6], num_layers=8)
    assert cmap.missing == []
    for entry in cmap.entries:
        text = (SANDBOX_ROOT / src.rel(entry.file)).read_text().splitlines()[entry.line - 1]
        assert text == entry.code
    assert "captures [2, 4, 7]" in cmap.entry("target-offset-rule").detail
    for name in RECIPES:
        spec = recipe_probe(cmap, name)
        assert spec.line == cmap.entry(RECIPES[name].entry).probe_line and spec.tag == name
    specs = [s for name in RECIPES for s in recipe_probes(cmap, name)]
    for s in specs:  # each probe's line is the statement it names, in the sandbox file as it is now
        assert (SANDBOX_ROOT / src.rel(s.path)).read_text().splitlines()[s.line - 1].strip() == s.code.strip()
    sites = {s.tag: (src.rel(s.path), s.code.strip()) for s in specs}
    assert sites == {  # the sandbox's mirror of the 0.5.23 anchors
        "draft-weights-unmatched": ("srt/models/llama_eagle3.py", "if param_name in params_dict:"),
        "draft-weights-unmatched.2": ("srt/models/llama_eagle3.py", "if param_name in params_dict:"),
        "draft-weights-unmatched.ran": ("srt/models/llama_eagle3.py", "params_dict = dict(self.named_parameters())"),
        "draft-params-at-init": ("srt/speculative/eagle_worker.py", "if self.speculative_algorithm.is_eagle3():"),
        "draft-params-at-init.before": ("srt/models/llama_eagle3.py", "params_dict = dict(self.named_parameters())"),
        "draft-input-width": ("srt/models/llama_eagle3.py", "if hidden_states.shape[-1] != embeds.shape[-1]:"),
        "target-capture-layers": ("srt/models/llama.py",
                                  "if self.capture_aux_hidden_states and layer_index in self.layers_to_capture:"),
        "draft-d2t": ("srt/speculative/eagle_worker.py", "if self.hot_token_id is not None:"),
    }
    by_tag = {s.tag: s for s in specs}
    assert by_tag["draft-weights-unmatched"].line < by_tag["draft-weights-unmatched.2"].line
    assert by_tag["draft-weights-unmatched.ran"].line < by_tag["draft-weights-unmatched"].line
    with pytest.raises(KeyError, match="no probe recipe 'nope'"):
        recipe_probe(cmap, "nope")


def test_show_find_and_path_forms(box, sglang_source):
    src = _src(box, sglang_source)
    ex = src.show("sglang/srt/models/llama_eagle3.py", 238, 2)
    assert (ex.first, ex.last, ex.focus) == (236, 240, 238)
    assert "> 238 |         if hidden_states.shape[-1] != embeds.shape[-1]:" in str(ex)
    assert src.path(str(sglang_source / "srt/models/llama.py")) == str(sglang_source / "srt/models/llama.py")
    with pytest.raises(SourceLookupError, match="line 99999 is outside srt/models/llama_eagle3.py"):
        src.show("srt/models/llama_eagle3.py", 99999)
    with pytest.raises(SourceLookupError, match="no file srt/models/nope.py"):
        src.lines("srt/models/nope.py")
    with pytest.raises(SourceLookupError, match="not inside the engine package"):
        src.path("/etc/passwd")
    with pytest.raises(SourceLookupError, match="climbs out"):
        src.path("../../etc/passwd")

    (load,) = src.find_definition("LlamaForCausalLMEagle3.load_weights")
    assert (load.file, load.line, load.kind) == (str(sglang_source / "srt/models/llama_eagle3.py"), 325, "method")
    is3 = src.find_definition("is_eagle3")
    assert [(pathlib.Path(d.file).name, d.line, d.qualname) for d in is3] == [
        ("spec_info.py", 111, "SpeculativeAlgorithm.is_eagle3"), ("spec_registry.py", 75, "CustomSpecAlgo.is_eagle3")]
    classes = src.find_definition("LlamaForCausalLMEagle3")
    assert [(c.kind, c.line) for c in classes] == [("class", 272)]
    fwd = src.find_definition("forward", file="srt/models/llama_eagle3.py")
    assert [(d.qualname, d.line) for d in fwd] == [("LlamaDecoderLayer.forward", 88), ("LlamaModel.forward", 209)]
    with pytest.raises(SourceLookupError, match="defined in .* files; qualify it"):
        src.find_definition("forward", limit=5)
    with pytest.raises(SourceLookupError, match="no definition of 'no_such_function_xyz'"):
        src.find_definition("no_such_function_xyz")
    with pytest.raises(SourceLookupError, match="is not a Python name"):
        src.find_definition("foo(bar)")


def test_find_engine_by_python_launch_env_and_errors(box, sglang_copy):
    site = str(sglang_copy.parent)
    found = find_engine(box, launch=f"PYTHONPATH={site} {sys.executable} -m sglang.launch_server --model-path /m")
    assert (found.package, found.root, found.version) == ("sglang", str(sglang_copy), "0.5.23")
    with pytest.raises(EngineNotFound, match="the sglang package is not found .*pass --python"):
        find_engine(box, python=sys.executable, package="sglang")
    sandbox = find_engine(box, python=sys.executable, package="workbench.sandbox")
    assert sandbox.root == str(SANDBOX_ROOT) and sandbox.version == "0.5.23+sandbox"
    with pytest.raises(EngineNotFound, match="could not run the locate script"):
        find_engine(box, python="/no/such/python3", package="sglang")


@pytest.mark.slow  # starts a stand-in SGLang server
def test_find_engine_from_the_running_server_uses_its_cwd_and_pythonpath(box, sglang_copy, tmp_path, free_port):
    """A server started as ``cd DIR && PYTHONPATH=... python -m sglang.launch_server``: the engine
    is found where that server imports it from. The server process is a stand-in for SGLang
    (which cannot run without a GPU): a ``sglang/launch_server.py`` added to the copied package
    that only listens on its port."""
    (sglang_copy / "__init__.py").write_text("")  # the real one imports the whole engine
    (sglang_copy / "launch_server.py").write_text(
        "import socket, sys, time\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', port)); s.listen(); time.sleep(120)\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "/m", "--port",
                             str(free_port)], cwd=workdir, env={"PYTHONPATH": str(sglang_copy.parent),
                                                                  "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 20
        while free_port not in box.listening_ports() and time.monotonic() < deadline:
            time.sleep(0.1)
        found = find_engine(box, port=free_port)
        assert (found.root, found.version, found.server_pid, found.port) == (str(sglang_copy), "0.5.23", proc.pid,
                                                                            free_port)
        assert "server pid" in found.how
        with pytest.raises(EngineNotFound, match=f"no SGLang server runs on port {free_port + 1}"):
            find_engine(box, port=free_port + 1)
        # an explicit package never switches to whichever server runs (on a shared box: someone else's)
        with pytest.raises(EngineNotFound, match=r"the sglang package is not found"):
            find_engine(box, package="sglang")
        assert find_engine(box, package="workbench.sandbox").root == str(SANDBOX_ROOT)
    finally:
        proc.kill()
        proc.wait()


def test_map_for_launch_reads_the_classes_and_aux_ids_from_the_configs(box, tmp_path, sglang_source):
    import json

    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"],
                                                    "num_hidden_layers": 61, "hidden_size": 7168}))
    (draft / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168,
                                                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}}))
    notes = []
    cmap = map_for_launch(box, _src(box, sglang_source),
                          f"python -m sglang.launch_server --model-path {target} --speculative-draft-model-path "
                          f"{draft} --speculative-algorithm EAGLE3", notes=notes)
    assert cmap.target_arch == "DeepseekV3ForCausalLM" and notes == []
    assert "for draft ids [1, 29, 57] on 61 layers it captures [2, 30, 58]" in cmap.entry("target-offset-rule").detail
    notes = []
    cmap = map_for_launch(box, _src(box, sglang_source), "python -m sglang.launch_server --model-path org/none",
                          notes=notes)
    assert cmap.target_arch == "LlamaForCausalLM"
    assert any("target config not read" in n for n in notes) and any("speculative-draft-model-path" in n for n in notes)


def test_map_over_ssh_matches_local(ssh_env, sglang_source):
    from remote import connect

    with connect("local") as local, connect(ssh_env.alias) as remote_box:
        here = code_path_map(_src(local, sglang_source)).to_dict()
        there = code_path_map(_src(remote_box, sglang_source)).to_dict()
    assert here == there


def test_source_files_are_only_read(box, sglang_source):
    before = {p: hashlib.sha256((sglang_source / p).read_bytes()).hexdigest() for p in PATH_FILES}
    src = _src(box, sglang_source)
    scan_swallowed(src, code_path_map(src))
    assert before == {p: hashlib.sha256((sglang_source / p).read_bytes()).hexdigest() for p in PATH_FILES}
    assert re.fullmatch(r"\d+\.\d+\.\d+", find_engine(box, python=sys.executable, package="workbench.sandbox")
                        .version.split("+")[0])


def test_kimi_target_follows_the_capture_delegation_to_deepseek(box, sglang_source):
    """Kimi-K2.5 hands set_eagle3_layers_to_capture to its language_model (DeepseekV3 in 0.5.23):
    the offset rule and the capture point come from deepseek_v2.py, the map says so."""
    cmap = code_path_map(_src(box, sglang_source), target_arch="KimiK25ForConditionalGeneration",
                         aux_ids=[1, 29, 57], num_layers=61)
    rule, point = cmap.entry("target-offset-rule"), cmap.entry("target-capture-point")
    assert rule.file.endswith("srt/models/kimi_k25.py") and "kimi_k25.py" in rule.detail
    assert "deepseek_v2.py" in rule.detail and "captures [2, 30, 58]" in rule.detail
    assert point.found and point.file.endswith("srt/models/deepseek_v2.py")


#: Where each recipe's probes go in SGLang 0.5.23 (the anchor's line in the unpatched file and its text).
RECIPE_SITES_0_5_23 = {
    "draft-weights-unmatched": ("srt/models/llama_eagle3.py", 363, "if param_name in params_dict:"),
    "draft-weights-unmatched.2": ("srt/models/llama_eagle3.py", 373, "if param_name in params_dict:"),
    "draft-weights-unmatched.ran": ("srt/models/llama_eagle3.py", 326, "params_dict = dict(self.named_parameters())"),
    "draft-params-at-init": ("srt/speculative/eagle_worker_v2.py", 353, "if self.speculative_algorithm.is_eagle3():"),
    "draft-params-at-init.before": ("srt/models/llama_eagle3.py", 326, "params_dict = dict(self.named_parameters())"),
    "draft-input-width": ("srt/models/llama_eagle3.py", 238, "if hidden_states.shape[-1] != embeds.shape[-1]:"),
    "target-capture-layers": ("srt/models/llama.py", 487, "hidden_states = self.layers[i]("),
    "draft-d2t": ("srt/speculative/eagle_worker_v2.py", 757, "if self.hot_token_id is not None:"),
}


def test_recipe_sites_on_real_0_5_23(box, sglang_source):
    cmap = code_path_map(_src(box, sglang_source))
    sites = {s.tag: (str(pathlib.Path(s.path).relative_to(sglang_source)), s.line, s.code.strip())
             for name in RECIPES for s in recipe_probes(cmap, name)}
    assert sites == RECIPE_SITES_0_5_23
    for rel, line, text in RECIPE_SITES_0_5_23.values():
        assert (sglang_source / rel).read_text().splitlines()[line - 1].strip() == text
    unmatched = {s.tag: s for s in recipe_probes(cmap, "draft-weights-unmatched")}
    assert {t: (s.when, s.once_per) for t, s in unmatched.items()} == {
        "draft-weights-unmatched": ("param_name not in params_dict", "(param_name, shard_id)"),
        "draft-weights-unmatched.2": ("param_name not in params_dict", "param_name"),
        "draft-weights-unmatched.ran": (None, None)}
    assert unmatched["draft-weights-unmatched"].function == "LlamaForCausalLMEagle3.load_weights"
    with pytest.raises(SourceLookupError, match="has 1 line"):  # a version with one drop site only
        from dataclasses import replace
        drop = cmap.entry("draft-weight-drop")
        cmap.entries[cmap.entries.index(drop)] = replace(drop, also=())
        recipe_probes(cmap, "draft-weights-unmatched")


def test_kimi_draft_has_the_params_dict_but_not_the_llama_drop_test(box, sglang_source):
    cmap = code_path_map(_src(box, sglang_source), target_arch="KimiK25ForConditionalGeneration",
                         draft_arch="Eagle3DeepseekV2ForCausalLM")
    start = cmap.entry("draft-params-dict")
    assert (start.file, start.line) == (str(sglang_source / "srt/models/kimi_k25_eagle3.py"), 429)
    assert start.function == "Eagle3DeepseekV2ForCausalLM.load_weights"
    drop = cmap.entry("draft-weight-drop")  # the fused q/kv_a test; the others log "skipping unexpected weight"
    assert (drop.line, drop.code.strip(), drop.also) == (484, "if fused_name in params_dict:", ())
    with pytest.raises(SourceLookupError, match="not a test on `param_name in params_dict`"):
        recipe_probes(cmap, "draft-weights-unmatched")
    assert [s.tag for s in recipe_probes(cmap, "draft-params-at-init")] == [
        "draft-params-at-init", "draft-params-at-init.before"]


def test_recipes_patch_compile_and_revert_on_real_0_5_23(sglang_copy, tmp_path):
    """Every recipe's probes go into the real 0.5.23 files at their map entries' lines, added in one
    call (each line re-read: probes in the same file move the later ones down), the patched files
    compile, a second call is idempotent, and revert_all restores every file byte for byte."""
    from remote import connect
    from remote.probes import list_probes, revert_all
    from workbench.engine.recipes import add_recipe, add_recipes

    files = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sglang_copy.rglob("*.py")}
    originals = {rel: (sglang_copy / rel).read_text().splitlines() for rel in {r for r, _, _ in RECIPE_SITES_0_5_23.values()}}
    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as box:
        cmap = code_path_map(_src(box, sglang_copy))
        with pytest.raises(ValueError, match="use add_recipes|add it with add_recipes"):
            add_recipe(box, cmap, "draft-params-at-init")  # several probes: refused before anything is added
        assert list_probes(box) == []
        probes = add_recipes(box, cmap, list(RECIPES), python=sys.executable)
        assert [p.tag for p in probes] == list(RECIPE_SITES_0_5_23)
        for p in files:
            compile(p.read_text(), str(p), "exec")
        # each block sits right before its statement: the statement follows the block's end marker
        for rel, lines in originals.items():
            patched = (sglang_copy / rel).read_text().splitlines()
            for tag, (site_rel, line, text) in RECIPE_SITES_0_5_23.items():
                if site_rel != rel:
                    continue
                end = patched.index(next(x for x in patched if x.strip() == f"# <<< eagle-workbench probe {tag} <<<"))
                after = end + 1
                while patched[after].strip().startswith("# >>> eagle-workbench probe"):  # another probe, same anchor
                    after = patched.index(next(x for x in patched[after:] if x.strip().startswith("# <<<")), after) + 1
                assert patched[after].strip() == text, tag
                assert patched[after] == lines[line - 1], tag
        assert add_recipes(box, code_path_map(_src(box, sglang_copy)), list(RECIPES), python=sys.executable) == probes
        assert {p.tag for p in list_probes(box)} == set(RECIPE_SITES_0_5_23)
        assert len(revert_all(box)) == len(RECIPE_SITES_0_5_23)
        assert list_probes(box) == []
    assert files == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sglang_copy.rglob("*.py")}


def test_add_recipes_is_all_or_none(sglang_copy, tmp_path, monkeypatch):
    """A failing add reverts the probes the call added before it; the files are as before."""
    from remote import connect
    from remote import probes as remote_probes
    from remote.errors import ProbeCompileError
    from remote.probes import list_probes
    from workbench.engine.recipes import add_recipes

    files = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sglang_copy.rglob("*.py")}
    real_add = remote_probes.add_probe

    def failing_third(box, path, **kw):
        if kw["tag"] == "draft-weights-unmatched.ran":
            raise ProbeCompileError("stand-in compile failure", output="", path=str(path))
        return real_add(box, path, **kw)

    monkeypatch.setattr(remote_probes, "add_probe", failing_third)
    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as box:
        with pytest.raises(ProbeCompileError, match="stand-in"):
            add_recipes(box, code_path_map(_src(box, sglang_copy)), ["draft-input-width", "draft-weights-unmatched"],
                        python=sys.executable)
        assert list_probes(box) == []
    assert files == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sglang_copy.rglob("*.py")}


def test_probes_in_place_are_not_reported_and_the_map_says_lines_moved(sglang_copy, tmp_path):
    from remote import connect
    from remote.probes import revert_all
    from workbench.engine.recipes import add_recipe

    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as box:
        add_recipe(box, code_path_map(_src(box, sglang_copy)), "draft-input-width")
        try:
            src = _src(box, sglang_copy)
            cmap = code_path_map(src)
            check = cmap.entry("draft-fc-width-check")
            lines = (sglang_copy / "srt/models/llama_eagle3.py").read_text().splitlines()
            assert lines[check.line - 1].strip() == "if hidden_states.shape[-1] != embeds.shape[-1]:"
            assert check.line > 238 and check.note.endswith("(line 238 in the original)")
            assert cmap.entry("draft-fc-defined").note and "in the original" not in cmap.entry("draft-fc-defined").note
            assert cmap.entry("aux-capture-gate").note is None
            found = scan_swallowed(src, cmap)
            assert len(found) == 4 and not any("_ewb" in f.message for f in found)
        finally:
            revert_all(box)


def test_offset_rule_warns_about_layers_the_loop_never_reaches(box, sglang_source):
    cmap = code_path_map(_src(box, sglang_source), aux_ids=[1, 3, 6], num_layers=4)
    assert "layer(s) [4, 7] are never reached (the capture loop covers 0..3)" in cmap.entry("target-offset-rule").detail
    cmap = code_path_map(_src(box, sglang_source), aux_ids=[1, 3, 6])
    assert "give the target's layer count" in cmap.entry("target-offset-rule").detail
