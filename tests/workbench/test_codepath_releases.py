"""The EAGLE-3 code-path map and the probe recipes on every covered SGLang release (the published
wheels, unpacked and never installed: the ``sglang_release`` fixture).

Every file, line and text below was found BY HAND in the unpacked wheels
(``grep -n`` / ``sed -n`` in ``~/.cache/eagle-workbench/sglang-releases/<v>/sglang/...``), not by
running the code under test: e.g. ``grep -n "if self.hot_token_id is not None:"
srt/speculative/eagle_worker.py``. ``None`` marks an entry the release genuinely does not have,
with the files the map must say it looked in:

- ``eagle-config-read`` before 0.4.10: no ``eagle_config`` anywhere under ``srt/`` (the capture
  layers are the target's defaults, ``set_eagle3_layers_to_capture()`` takes no ids);
- ``draft-weight-renames`` before 0.5.12: ``load_weights`` has no ``legacy_name_map`` (the
  module is still called ``midlayer``);
- ``draft-weight-drop`` on 0.4.6 / 0.4.8: the draft hands every tensor to
  ``LlamaForCausalLM.load_weights`` (``super().load_weights``), whose miss is logged
  (``logger.warning(f"Parameter {name} not found in params_dict")``), not dropped silently.
"""

import hashlib
import pathlib
import shutil
import sys

import pytest

from workbench.engine.codepath import code_path_map, eagle_worker, map_for_launch
from workbench.engine.recipes import RECIPES, add_recipes, recipe_probes
from workbench.engine.releases import COVERED_RELEASES
from workbench.engine.source import EngineSource
from workbench.errors import SourceLookupError
from testkit.engine_copy import sandbox_engine_dir

MR = "srt/model_executor/model_runner.py"
AUX = "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
SETUP = "srt/model_executor/model_runner_components/attention_backend_setup.py"
SPEC = "srt/speculative/spec_info.py"
LLAMA = "srt/models/llama.py"
DRAFT = "srt/models/llama_eagle3.py"
V1 = "srt/speculative/eagle_worker.py"
V2 = "srt/speculative/eagle_worker_v2.py"
DSV2 = "srt/models/deepseek_v2.py"
KIMI = "srt/models/kimi_k25.py"

IS3 = "if self.speculative_algorithm.is_eagle3():"
GATE = "if self.spec_algorithm.is_eagle3() and not self.is_draft_worker:"
FC = "self.fc = torch.nn.Linear("
WIDTH = "if hidden_states.shape[-1] != embeds.shape[-1]:"
PARAMS = "params_dict = dict(self.named_parameters())"
DROP = "if param_name in params_dict:"
D2T = "self.hot_token_id = loaded_weight + torch.arange(loaded_weight.shape[0])"
HOT = "if self.hot_token_id is not None:"
MAP = "topk_index = self.hot_token_id[topk_index]"
CAPTURE = "if i in self.layers_to_capture:"
RULE = "def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):"
CALL = "self.model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)"

#: release -> entry -> (file, line, stripped text) found by hand; None: not in the release.
EXPECTED = {
    "0.4.6": {
        "spec-algorithm-is-eagle3": (SPEC, 15, "def is_eagle3(self):"),
        "aux-capture-gate": (MR, 228, GATE),
        "eagle-config-read": None,
        "capture-configured": (MR, 229, "self.model.set_eagle3_layers_to_capture()"),
        "target-offset-rule": (LLAMA, 639, "def set_eagle3_layers_to_capture(self):"),
        "target-capture-point": (LLAMA, 309, CAPTURE),
        "draft-fc-defined": (DRAFT, 109, "self.fc = torch.nn.Linear(config.target_hidden_size * 3, config.hidden_size)"),
        "draft-fc-width-check": (DRAFT, 128, WIDTH),
        "draft-params-dict": (LLAMA, 491, PARAMS),
        "draft-weight-renames": None,
        "draft-weight-drop": None,
        "draft-d2t-read": (DRAFT, 184, D2T),
        "token-map-init": (V1, 92, IS3),
        "lm-head-shared": (V1, 121, IS3),
        "d2t-use": (V1, 431, MAP),
    },
    "0.4.8": {
        "spec-algorithm-is-eagle3": (SPEC, 15, "def is_eagle3(self):"),
        "aux-capture-gate": (MR, 306, GATE),
        "eagle-config-read": None,
        "capture-configured": (MR, 307, "self.model.set_eagle3_layers_to_capture()"),
        "target-offset-rule": (LLAMA, 700, "def set_eagle3_layers_to_capture(self):"),
        "target-capture-point": (LLAMA, 331, CAPTURE),
        "draft-fc-defined": (DRAFT, 110, "self.fc = torch.nn.Linear(config.target_hidden_size * 3, config.hidden_size)"),
        "draft-fc-width-check": (DRAFT, 130, WIDTH),
        "draft-params-dict": (LLAMA, 542, PARAMS),
        "draft-weight-renames": None,
        "draft-weight-drop": None,
        "draft-d2t-read": (DRAFT, 187, D2T),
        "token-map-init": (V1, 108, IS3),
        "lm-head-shared": (V1, 138, IS3),
        "d2t-use": (V1, 586, MAP),
    },
    "0.4.10": {
        "spec-algorithm-is-eagle3": (SPEC, 15, "def is_eagle3(self):"),
        "aux-capture-gate": (MR, 341, GATE),
        "eagle-config-read": (MR, 349, "try:"),
        "capture-configured": (MR, 361, CALL),
        "target-offset-rule": (LLAMA, 743, RULE),
        "target-capture-point": (LLAMA, 331, CAPTURE),
        "draft-fc-defined": (DRAFT, 124, FC),
        "draft-fc-width-check": (DRAFT, 148, WIDTH),
        "draft-params-dict": (DRAFT, 203, PARAMS),
        "draft-weight-renames": None,
        "draft-weight-drop": (DRAFT, 228, DROP),
        "draft-d2t-read": (DRAFT, 217, D2T),
        "token-map-init": (V1, 109, IS3),
        "lm-head-shared": (V1, 140, IS3),
        "d2t-use": (V1, 595, MAP),
    },
    "0.5.2": {
        "spec-algorithm-is-eagle3": (SPEC, 16, "def is_eagle3(self):"),
        "aux-capture-gate": (MR, 396, GATE),
        "eagle-config-read": (MR, 404, "try:"),
        "capture-configured": (MR, 416, CALL),
        "target-offset-rule": (LLAMA, 726, RULE),
        "target-capture-point": (LLAMA, 339, CAPTURE),
        "draft-fc-defined": (DRAFT, 134, FC),
        "draft-fc-width-check": (DRAFT, 161, WIDTH),
        "draft-params-dict": (DRAFT, 220, PARAMS),
        "draft-weight-renames": None,
        "draft-weight-drop": (DRAFT, 245, DROP),
        "draft-d2t-read": (DRAFT, 234, D2T),
        "token-map-init": (V1, 111, IS3),
        "lm-head-shared": (V1, 142, IS3),
        "d2t-use": (V1, 709, MAP),
    },
    "0.5.4": {
        "spec-algorithm-is-eagle3": (SPEC, 22, "def is_eagle3(self):"),
        "aux-capture-gate": (MR, 481, GATE),
        "eagle-config-read": (MR, 489, "try:"),
        "capture-configured": (MR, 501, CALL),
        "target-offset-rule": (LLAMA, 730, RULE),
        "target-capture-point": (LLAMA, 339, CAPTURE),
        "draft-fc-defined": (DRAFT, 134, FC),
        "draft-fc-width-check": (DRAFT, 161, WIDTH),
        "draft-params-dict": (DRAFT, 220, PARAMS),
        "draft-weight-renames": None,
        "draft-weight-drop": (DRAFT, 245, DROP),
        "draft-d2t-read": (DRAFT, 234, D2T),
        "token-map-init": (V1, 105, IS3),
        "lm-head-shared": (V1, 136, IS3),
        "d2t-use": (V1, 554, MAP),
    },
    "0.5.9": {
        "spec-algorithm-is-eagle3": (SPEC, 40, "def is_eagle3(self) -> bool:"),
        "aux-capture-gate": (MR, 345, GATE),
        "eagle-config-read": (MR, 355, "try:"),
        "capture-configured": (MR, 622, "self.model.set_eagle3_layers_to_capture("),
        "target-offset-rule": (LLAMA, 778, RULE),
        "target-capture-point": (LLAMA, 382, CAPTURE),
        "draft-fc-defined": (DRAFT, 135, FC),
        "draft-fc-width-check": (DRAFT, 162, WIDTH),
        "draft-params-dict": (DRAFT, 230, PARAMS),
        "draft-weight-renames": None,
        "draft-weight-drop": (DRAFT, 255, DROP),
        "draft-d2t-read": (DRAFT, 244, D2T),
        "token-map-init": (V1, 120, IS3),
        "lm-head-shared": (V1, 159, IS3),
        "d2t-use": (V1, 626, MAP),
    },
    "0.5.12": {
        "spec-algorithm-is-eagle3": (SPEC, 97, "def is_eagle3(self) -> bool:"),
        "aux-capture-gate": (MR, 418, GATE),
        "eagle-config-read": (MR, 428, "try:"),
        "capture-configured": (MR, 904, "self.model.set_eagle3_layers_to_capture("),
        "target-offset-rule": (LLAMA, 798, RULE),
        "target-capture-point": (LLAMA, 394, CAPTURE),
        "draft-fc-defined": (DRAFT, 160, FC),
        "draft-fc-width-check": (DRAFT, 218, WIDTH),
        "draft-params-dict": (DRAFT, 294, PARAMS),
        "draft-weight-renames": (DRAFT, 306, "legacy_name_map = {"),
        "draft-weight-drop": (DRAFT, 331, DROP),
        "draft-d2t-read": (DRAFT, 320, D2T),
        "token-map-init": (V2, 198, IS3),
        "lm-head-shared": (V2, 214, IS3),
        "d2t-use": (V2, 431, MAP),
    },
    "0.5.18": {
        "spec-algorithm-is-eagle3": (SPEC, 107, "def is_eagle3(self) -> bool:"),
        "aux-capture-gate": (AUX, 82, "if spec_algorithm.is_eagle3():"),
        "eagle-config-read": (AUX, 84, "try:"),
        "capture-configured": (SETUP, 55, "model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)"),
        "target-offset-rule": (LLAMA, 891, RULE),
        "target-capture-point": (LLAMA, 442, CAPTURE),
        "draft-fc-defined": (DRAFT, 155, FC),
        "draft-fc-width-check": (DRAFT, 229, WIDTH),
        "draft-params-dict": (DRAFT, 315, PARAMS),
        "draft-weight-renames": (DRAFT, 327, "legacy_name_map = {"),
        "draft-weight-drop": (DRAFT, 352, DROP),
        "draft-d2t-read": (DRAFT, 341, D2T),
        "token-map-init": (V2, 269, IS3),
        "lm-head-shared": (V2, 293, IS3),
        "d2t-use": (V2, 573, MAP),
    },
    "0.5.23": {
        "spec-algorithm-is-eagle3": (SPEC, 111, "def is_eagle3(self) -> bool:"),
        "aux-capture-gate": (AUX, 185, "if spec_algorithm.is_eagle3():"),
        "eagle-config-read": (AUX, 187, "try:"),
        "capture-configured": (SETUP, 61, "model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)"),
        "target-offset-rule": (LLAMA, 929, RULE),
        "target-capture-point": (LLAMA, 492, "if i in self.layers_to_capture"),
        "draft-fc-defined": (DRAFT, 163, FC),
        "draft-fc-width-check": (DRAFT, 238, WIDTH),
        "draft-params-dict": (DRAFT, 326, PARAMS),
        "draft-weight-renames": (DRAFT, 338, "legacy_name_map = {"),
        "draft-weight-drop": (DRAFT, 363, DROP),
        "draft-d2t-read": (DRAFT, 352, D2T),
        "token-map-init": (V2, 325, IS3),
        "lm-head-shared": (V2, 353, IS3),
        "d2t-use": (V2, 758, MAP),
    },
}

#: Where a not-found entry must say it looked (files, by hand: the candidate files of each entry).
LOOKED_IN = {
    "eagle-config-read": ("no file under srt/ holds 'eagle_config'",),
    "draft-weight-renames": (DRAFT,),
    "draft-weight-drop": (DRAFT,),
}

#: The statement a probe goes before, where the entry names a line inside it (by hand: the
#: first line of the statement holding the capture test).
ANCHORS = {("0.5.23", "target-capture-point"): (487, "hidden_states = self.layers[i]("),
           **{(v, "d2t-use"): (n, "if self.hot_token_id is not None:") for v, n in (
               ("0.4.6", 430), ("0.4.8", 585), ("0.4.10", 594), ("0.5.2", 708), ("0.5.4", 553), ("0.5.9", 625),
               ("0.5.12", 430), ("0.5.18", 572), ("0.5.23", 757))},
           ("0.5.18", "kimi"): (2846, "hidden_states, residual, topk_indices = layer("),
           ("0.5.23", "kimi"): (3185, "(hidden_states, topk_indices) = layer(")}

#: Kimi-K2.5 target (srt/models/kimi_k25.py, where the release has it): its own capture rule and
#: the capture test in DeepseekV2Model.forward reached through self.language_model (by hand).
KIMI_EXPECTED = {
    "0.5.9": (None, (DSV2, 2721, CAPTURE)),
    "0.5.12": ((KIMI, 799, "def set_eagle3_layers_to_capture("), (DSV2, 2275, CAPTURE)),
    "0.5.18": ((KIMI, 926, "def set_eagle3_layers_to_capture("),
               (DSV2, 2856, "aux_hidden_states if i in self.layers_to_capture else None")),
    "0.5.23": ((KIMI, 928, "def set_eagle3_layers_to_capture("), (DSV2, 3194, "if i in self.layers_to_capture")),
}


def _rel(root, path):
    return str(pathlib.Path(path).relative_to(root))


def _line(root, rel, n):
    return (pathlib.Path(root) / rel).read_text().splitlines()[n - 1].strip()


def _check(root, entry, want, version):
    if want is None:
        assert not entry.found, (version, entry.key, entry.location)
        assert entry.file is None and entry.line is None
        for where in LOOKED_IN[entry.key]:
            assert where in entry.looked_in, (version, entry.key, entry.looked_in)
        return
    rel, line, text = want
    assert entry.found, (version, entry.key, entry.looked_in)
    assert (_rel(root, entry.file), entry.line) == (rel, line), (version, entry.key)
    assert entry.code.strip() == text, (version, entry.key)
    assert _line(root, rel, line) == text, (version, entry.key)  # the table itself against the wheel


def test_the_tables_cover_every_covered_release_and_entry():
    keys = list(EXPECTED["0.5.23"])
    assert set(EXPECTED) == set(COVERED_RELEASES)
    assert all(list(table) == keys for table in EXPECTED.values())


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_every_entry_at_its_line_on_the_release(box, sglang_release, version):
    root = sglang_release(version)
    cmap = code_path_map(EngineSource(box, str(root), version))
    assert [e.key for e in cmap.entries] == list(EXPECTED[version])
    for entry in cmap.entries:
        _check(root, entry, EXPECTED[version][entry.key], version)
        if entry.found:
            anchor = ANCHORS.get((version, entry.key))
            if anchor is None:
                assert entry.probe_line == entry.line, (version, entry.key)
            else:
                assert (entry.probe_line, _line(root, _rel(root, entry.file), anchor[0])) == anchor
    # the worker entries name the worker the release runs by default, and why
    worker = {"0.5.12": "EAGLEWorkerV2", "0.5.18": "EAGLEWorkerV2", "0.5.23": "EAGLEWorkerV2"}.get(version, "EAGLEWorker")
    assert cmap.worker.cls == worker
    for key in ("token-map-init", "lm-head-shared", "d2t-use"):
        assert f"in {worker} (" in cmap.entry(key).detail, (version, key)
    assert f"draft worker: {worker} (" in cmap.to_text() and f"<code>{worker}</code>" in cmap._repr_html_()


def test_a_worker_entry_missing_from_the_running_worker_is_never_taken_from_the_other(box, sglang_release,
                                                                                       tmp_path):
    """0.5.9 runs EAGLEWorker by default; with its token-map test edited away (a release that moved
    it), the entry is not found in the worker the server runs, though eagle_worker_v2.py has one."""
    root = tmp_path / "sglang"
    src_root = sglang_release("0.5.9")
    for rel in ("srt/speculative", ):
        shutil.copytree(src_root / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__"))
    for rel in ("srt/server_args.py", "srt/environ.py"):
        shutil.copy(src_root / rel, root / rel)
    v1 = root / V1
    text = v1.read_text()
    assert text.count("speculative_token_map") == 3  # lines 121, 126, 127 (by hand)
    v1.write_text(text.replace("speculative_token_map", "speculative_vocab_map"))
    cmap = code_path_map(EngineSource(box, str(root), "0.5.9"), keys=["token-map-init"])
    entry = cmap.entry("token-map-init")
    assert cmap.worker.cls == "EAGLEWorker" and not entry.found
    assert entry.looked_in.startswith(V1) and V2 not in entry.looked_in
    assert "the worker this server runs: EAGLEWorker" in entry.looked_in


@pytest.mark.parametrize("version", sorted(KIMI_EXPECTED))
def test_kimi_k25_target_capture_followed_through_language_model(box, sglang_release, version):
    root = sglang_release(version)
    cmap = code_path_map(EngineSource(box, str(root), version), target_arch="KimiK25ForConditionalGeneration",
                         keys=["target-offset-rule", "target-capture-point"])
    rule_want, point_want = KIMI_EXPECTED[version]
    rule, point = cmap.entry("target-offset-rule"), cmap.entry("target-capture-point")
    if rule_want is None:  # 0.5.9: KimiK25ForConditionalGeneration defines no set_eagle3_layers_to_capture
        assert not rule.found and "kimi_k25.py" in rule.looked_in and "raises at startup" in rule.looked_in
    else:
        assert rule.found and (_rel(root, rule.file), rule.line, rule.code.strip()) == rule_want
    assert point.found, point.looked_in
    assert (_rel(root, point.file), point.line, point.code.strip()) == point_want
    assert _line(root, point_want[0], point_want[1]) == point_want[2]
    anchor = ANCHORS.get((version, "kimi"))
    assert point.probe_line == (anchor[0] if anchor else point.line)


#: grep -n 're.sub(r"^layers' srt/models/kimi_k25_eagle3.py (Eagle3DeepseekV2ForCausalLM.load_weights);
#: the class is not in 0.5.9 (no kimi_k25_eagle3.py).
MLA_RENAMES = {"0.5.12": 397, "0.5.18": 445, "0.5.23": 448}


@pytest.mark.parametrize("version", ["0.5.9", *sorted(MLA_RENAMES)])
def test_mla_draft_weight_renames_by_re_sub(box, sglang_release, version):
    root = sglang_release(version)
    cmap = code_path_map(EngineSource(box, str(root), version), target_arch="DeepseekV3ForCausalLM",
                         draft_arch="Eagle3DeepseekV2ForCausalLM", keys=["draft-weight-renames"])
    entry = cmap.entry("draft-weight-renames")
    if version not in MLA_RENAMES:
        assert not entry.found and "no draft class Eagle3DeepseekV2ForCausalLM" in entry.looked_in
        return
    assert entry.found, entry.looked_in
    assert (_rel(root, entry.file), entry.line) == ("srt/models/kimi_k25_eagle3.py", MLA_RENAMES[version])
    assert entry.code.strip() == 'mapped_name = re.sub(r"^layers\\.0\\.", "midlayer.", name)'
    assert entry.function == "Eagle3DeepseekV2ForCausalLM.load_weights"
    assert entry.detail == r"re.sub: ^layers\.0\.→midlayer."


# -- the worker the server runs ------------------------------------------------------------

#: (release, server environment, launch flags) -> the worker class, from the release's source
#: by hand: 0.5.4 scheduler.py:564 `EAGLEWorkerV2 if self.enable_overlap else EAGLEWorker` and
#: server_args.py:1302 `if not self.enable_beta_spec: self.disable_overlap_schedule = True`;
#: 0.5.9 environ.py:414 `SGLANG_ENABLE_SPEC_V2 = EnvBool(False)`, server_args.py:2384 (the
#: else of the spec-v2 test) turns overlap off, spec_info.py:76 `if enable_overlap:` →
#: EAGLEWorkerV2; 0.5.12 environ.py:470 `EnvBool(True)`, server_args.py:3754 topk > 1 → off;
#: 0.5.23 has no eagle_worker.py.
WORKER_CASES = [
    ("0.4.6", {}, [], "EAGLEWorker"),
    ("0.4.6", {"SGLANG_ENABLE_SPEC_V2": "1"}, [], "EAGLEWorker"),
    ("0.5.4", {}, [], "EAGLEWorker"),
    ("0.5.4", {}, ["--enable-beta-spec"], "EAGLEWorkerV2"),
    ("0.5.4", {}, ["--enable-beta-spec", "--disable-overlap-schedule"], "EAGLEWorker"),
    ("0.5.9", {}, [], "EAGLEWorker"),
    ("0.5.9", {"SGLANG_ENABLE_SPEC_V2": "1"}, [], "EAGLEWorkerV2"),
    ("0.5.9", {"SGLANG_ENABLE_SPEC_V2": "True"}, ["--disable-overlap-schedule"], "EAGLEWorker"),
    ("0.5.9", {"SGLANG_ENABLE_SPEC_V2": "maybe"}, [], "EAGLEWorker"),
    ("0.5.12", {}, [], "EAGLEWorkerV2"),
    ("0.5.12", {"SGLANG_ENABLE_SPEC_V2": "0"}, [], "EAGLEWorker"),
    ("0.5.12", {}, ["--speculative-eagle-topk", "4"], "EAGLEWorker"),
    ("0.5.12", {}, ["--speculative-eagle-topk=1"], "EAGLEWorkerV2"),
    ("0.5.23", {"SGLANG_ENABLE_SPEC_V2": "0"}, ["--disable-overlap-schedule"], "EAGLEWorkerV2"),
]


@pytest.mark.parametrize("version,env,args,cls", WORKER_CASES)
def test_the_worker_follows_the_release_environment_and_flags(box, sglang_release, version, env, args, cls):
    choice = eagle_worker(EngineSource(box, str(sglang_release(version)), version), env=env, launch_args=args)
    assert choice.cls == cls
    assert choice.file == {"EAGLEWorker": V1, "EAGLEWorkerV2": V2}[cls]
    if version == "0.5.9":
        assert choice.default == "EAGLEWorker" and "srt/environ.py:414" in choice.evidence
        assert "srt/speculative/spec_info.py:76" in choice.evidence
    if "maybe" in env.values():
        assert "no boolean" in choice.why


def test_spec_v2_from_the_launch_prefix_moves_the_worker_entries_on_0_5_9(box, sglang_release, tmp_path):
    """``SGLANG_ENABLE_SPEC_V2=1 python -m sglang.launch_server ...`` on 0.5.9 runs EAGLEWorkerV2:
    the worker entries are in eagle_worker_v2.py (by hand: 179 / 195 / 391), never in the V1 file."""
    root = sglang_release("0.5.9")
    src = EngineSource(box, str(root), "0.5.9")
    cmap = map_for_launch(box, src, "SGLANG_ENABLE_SPEC_V2=1 python -m sglang.launch_server --model-path "
                          f"{tmp_path}/none --speculative-algorithm EAGLE3", notes=[])
    assert cmap.worker.cls == "EAGLEWorkerV2" and "SGLANG_ENABLE_SPEC_V2=1" in cmap.worker.why
    want = {"token-map-init": (V2, 179, IS3), "lm-head-shared": (V2, 195, IS3), "d2t-use": (V2, 391, MAP)}
    for key, w in want.items():
        _check(root, cmap.entry(key), w, "0.5.9")
    # the server's own environment, when the prefix does not say
    cmap = map_for_launch(box, src, f"python -m sglang.launch_server --model-path {tmp_path}/none",
                          environ={"SGLANG_ENABLE_SPEC_V2": "true"}, notes=[])
    assert cmap.worker.cls == "EAGLEWorkerV2" and _rel(root, cmap.entry("d2t-use").file) == V2


# -- the recipes -----------------------------------------------------------------------------

#: release -> recipe tag -> (file, line, stripped text) of the probe's anchor, by hand (the
#: entries above; the probe goes before the statement); None: the recipe does not apply (an
#: entry it stands on is not in the release).
def _recipe_sites(version):
    e = EXPECTED[version]

    def at(key, line=None, text=None):
        rel, n, t = e[key]
        return (rel, line or n, text or t)

    also_drop = {"0.4.10": 238, "0.5.2": 255, "0.5.4": 255, "0.5.9": 265, "0.5.12": 341, "0.5.18": 362,
                 "0.5.23": 373}  # the second `if param_name in params_dict:` (grep -n)
    sites = {
        "draft-weights-unmatched": None if e["draft-weight-drop"] is None else at("draft-weight-drop"),
        "draft-weights-unmatched.2": None if e["draft-weight-drop"] is None else
        at("draft-weight-drop", also_drop[version]),
        "draft-weights-unmatched.ran": at("draft-params-dict"),
        "draft-params-at-init": at("lm-head-shared"),
        "draft-params-at-init.before": at("draft-params-dict"),
        "draft-input-width": at("draft-fc-width-check"),
        "target-capture-layers": at("target-capture-point", *ANCHORS.get((version, "target-capture-point"), ())),
        "draft-d2t": at("d2t-use", *ANCHORS[(version, "d2t-use")]),
    }
    return sites


def _copy_release(root, dest):
    """The files the map and the recipes read, copied (the wheel's own tree is never patched)."""
    for rel in ("srt/speculative", "srt/model_executor"):
        shutil.copytree(root / rel, dest / rel, ignore=shutil.ignore_patterns("__pycache__"))
    for rel in (LLAMA, DRAFT, "srt/server_args.py", "srt/environ.py", "srt/managers/scheduler.py", "version.py"):
        if (root / rel).exists():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(root / rel, dest / rel)
    return dest


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_recipes_resolve_patch_and_revert_on_a_copy_of_the_release(sglang_release, tmp_path, version):
    from remote import connect
    from remote.probes import list_probes, revert_all

    root = _copy_release(sglang_release(version), tmp_path / "site" / "sglang")
    hashes = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*.py")}
    want = _recipe_sites(version)
    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as box:
        cmap = code_path_map(EngineSource(box, str(root), version))
        usable = []
        for name in RECIPES:
            tags = [t for t in want if t == name or t.startswith(name + ".")]
            if any(want[t] is None for t in tags):
                with pytest.raises(SourceLookupError, match="not in this engine version"):
                    recipe_probes(cmap, name)
                continue
            specs = recipe_probes(cmap, name)
            got = {s.tag: (_rel(root, s.path), s.line, s.code.strip()) for s in specs}
            assert got == {t: want[t] for t in tags}, (version, name)
            for rel, line, text in got.values():
                assert _line(root, rel, line) == text
            usable.append(name)
        probes = add_recipes(box, cmap, usable, python=sys.executable)
        assert [p.tag for p in probes] == [t for n in usable for t in want if t == n or t.startswith(n + ".")]
        if version in ("0.4.6", "0.4.8"):  # in LlamaForCausalLM.load_weights, which loads the target too
            before = next(p for p in probes if p.tag == "draft-params-at-init.before")
            assert before.when == "type(self).__name__ == 'LlamaForCausalLMEagle3'"
        for p in {pathlib.Path(p.path) for p in probes}:
            compile(p.read_text(), str(p), "exec")
        assert len(revert_all(box)) == len(probes)
        assert list_probes(box) == []
    assert hashes == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*.py")}


@pytest.mark.slow
def test_server_worker_inputs_read_the_running_process_environment(box, sglang_release):
    """A real process started with ``SGLANG_ENABLE_SPEC_V2=1`` in its environment (the way a
    server inherits it): its ``/proc/PID/environ`` decides the worker on 0.5.9."""
    import os
    import subprocess

    from workbench.engine.codepath import server_worker_inputs
    from workbench.engine.locate import EngineInfo

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, "SGLANG_ENABLE_SPEC_V2": "1"})
    try:
        root = sglang_release("0.5.9")
        engine = EngineInfo("sglang", str(root), "0.5.9", sys.executable, "test", server_pid=proc.pid,
                            launch="python -m sglang.launch_server --model-path /m --speculative-eagle-topk 1")
        env, args = server_worker_inputs(box, engine)
        assert env["SGLANG_ENABLE_SPEC_V2"] == "1"
        assert args[-2:] == ["--speculative-eagle-topk", "1"]
        src = EngineSource(box, str(root), "0.5.9")
        assert eagle_worker(src, env=env, launch_args=args).cls == "EAGLEWorkerV2"
        cmap = code_path_map(src, keys=["d2t-use"], env=env, launch_args=args)
        assert (_rel(root, cmap.entry("d2t-use").file), cmap.entry("d2t-use").line) == (V2, 391)
        # without a server: the release's default
        assert server_worker_inputs(box, EngineInfo("sglang", str(root), "0.5.9", sys.executable, "test")) == \
            (None, None)
    finally:
        proc.kill()
        proc.wait(timeout=10)


SANDBOX_ROOT = sandbox_engine_dir()  # the engine this process's box finds (testkit.engine_copy)


@pytest.mark.parametrize("version", COVERED_RELEASES + ("sandbox",))
def test_only_a_base_class_method_in_another_file_gets_the_draft_only_condition(box, sglang_release, version):
    """The fc width check lies in the draft file's own ``LlamaModel.forward`` (``self`` is the inner
    model there): a ``type(self).__name__ == draft`` condition would silence the probe (it did, on
    the sandbox box). Only ``LlamaForCausalLM.load_weights`` in llama.py, which 0.4.6 / 0.4.8's
    draft reaches through ``super()``, prints for the draft only."""
    root = SANDBOX_ROOT if version == "sandbox" else sglang_release(version)
    cmap = code_path_map(EngineSource(box, str(root), version))
    (width,) = recipe_probes(cmap, "draft-input-width")
    assert width.path.endswith("srt/models/llama_eagle3.py") and width.function == "LlamaModel.forward"
    assert width.when is None
    base = [p for p in recipe_probes(cmap, "draft-params-at-init") if p.function.endswith(".load_weights")]
    (loader,) = base
    if version in ("0.4.6", "0.4.8"):
        assert loader.function == "LlamaForCausalLM.load_weights" and loader.path.endswith("srt/models/llama.py")
        assert loader.when == "type(self).__name__ == 'LlamaForCausalLMEagle3'"
    else:
        assert loader.function == "LlamaForCausalLMEagle3.load_weights" and loader.when is None
