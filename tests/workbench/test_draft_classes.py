"""Draft classes and their ``load_weights`` read from the engine on the box, on the published SGLang
wheels (``sglang_release``: ``pip download --no-deps``, cached, never installed), and the weight
rules applied to each class with its own facts.

Every expected value below was found by hand in the wheel (``grep -n`` over
``srt/models/*.py``: the ``EntryClass`` of each file that reads ``spec_info.hidden_states``, the
``capture_aux_hidden_states = True`` of the EAGLE-3 ones, the ``def load_weights`` /
``if "d2t" in name`` / ``load_lm_head_from_target = True`` lines), never computed by the code
under test.
"""

from __future__ import annotations


import pytest

from rule_helpers import KIMI_K25, by_rule, deploy, doctor, draft_cfg, launch, specforge_spec, with_keys
from workbench.engine.drafts import follow, load_weights_facts, registered_draft_classes
from workbench.engine.releases import COVERED_RELEASES
from workbench.engine.source import EngineSource
from workbench_test_helpers import fixture_config

# -- the classes each release registers ------------------------------------------------------------

_MTP_046 = {"DeepseekV3ForCausalLMNextN"}
_MTP_048 = _MTP_046 | {"MiMoMTP"}
_MTP_0410 = _MTP_048 | {"Glm4MoeForCausalLMNextN"}
_MTP_052 = _MTP_0410 | {"Ernie4_5_MoeForCausalLMMTP", "LongcatFlashForCausalLMNextN", "Qwen3NextForCausalLMMTP"}
_MTP_054 = _MTP_052 | {"BailingMoeForCausalLMNextN"}
_MTP_059 = _MTP_054 | {"ExaoneMoEForCausalLMMTP", "GlmOcrForConditionalGenerationNextN", "MiMoV2MTP",
                       "NemotronHForCausalLMMTP", "Qwen3_5ForCausalLMMTP", "Step3p5MTP"}
_MTP_0512 = _MTP_059 | {"DeepseekV4ForCausalLMNextN", "Gemma4AssistantForCausalLM", "HYV3ForCausalLMNextN"}
_MTP_0518 = _MTP_0512 | {"Gemma4UnifiedAssistantForCausalLM", "Glm4MoeLiteForCausalLMNextN",
                         # glm4_moe.py: class GlmMoeDsaForCausalLMNextN(DeepseekV3ForCausalLMNextN), in its EntryClass
                         "GlmMoeDsaForCausalLMNextN",
                         "InklingForConditionalGenerationMTP", "Qwen3MoeForCausalLMMTP"}
_MTP_0523 = _MTP_0518 | {"Dots3NoteForCausalLMNextN", "GigaChat35ForCausalLMNextN",
                         # glm5_next_nextn.py: class Glm5NextForConditionalGenerationNextN(DeepseekV3ForCausalLMNextN)
                         "Glm5NextForConditionalGenerationNextN", "HYV4ForCausalLMNextN", "IQuestQ1MTP",
                         "Qwen4ExpForCausalLMMTP"}
_EAGLE_046 = {"LlamaForCausalLMEagle", "Qwen2ForCausalLMEagle"}
_EAGLE_059 = _EAGLE_046 | {"MistralLarge3ForCausalLMEagle"}
_EAGLE_0512 = _EAGLE_059 | {"MistralForCausalLMEagle"}

#: release → (EAGLE-3 drafts, EAGLE-1/2 drafts, MTP drafts), by hand.
REGISTERED = {
    "0.4.6": ({"LlamaForCausalLMEagle3"}, _EAGLE_046, _MTP_046),
    "0.4.8": ({"LlamaForCausalLMEagle3"}, _EAGLE_046, _MTP_048),
    "0.4.10": ({"LlamaForCausalLMEagle3"}, _EAGLE_046, _MTP_0410),
    "0.5.2": ({"LlamaForCausalLMEagle3"}, _EAGLE_046, _MTP_052),
    "0.5.4": ({"LlamaForCausalLMEagle3"}, _EAGLE_046, _MTP_054),
    "0.5.9": ({"LlamaForCausalLMEagle3"}, _EAGLE_059, _MTP_059),
    "0.5.12": ({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"}, _EAGLE_0512, _MTP_0512),
    "0.5.18": ({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"}, _EAGLE_0512, _MTP_0518),
    "0.5.23": ({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"}, _EAGLE_0512, _MTP_0523),
}
assert set(REGISTERED) == set(COVERED_RELEASES)

#: release → line of ``class LlamaForCausalLMEagle3`` / ``class Eagle3DeepseekV2ForCausalLM`` (by hand).
CLASS_LINES = {"0.4.6": {"LlamaForCausalLMEagle3": 148}, "0.4.8": {"LlamaForCausalLMEagle3": 150},
               "0.4.10": {"LlamaForCausalLMEagle3": 168}, "0.5.2": {"LlamaForCausalLMEagle3": 181},
               "0.5.4": {"LlamaForCausalLMEagle3": 181}, "0.5.9": {"LlamaForCausalLMEagle3": 186},
               "0.5.12": {"LlamaForCausalLMEagle3": 250, "Eagle3DeepseekV2ForCausalLM": 266},
               "0.5.18": {"LlamaForCausalLMEagle3": 263, "Eagle3DeepseekV2ForCausalLM": 314},
               "0.5.23": {"LlamaForCausalLMEagle3": 272, "Eagle3DeepseekV2ForCausalLM": 315}}


def _src(box, sglang_release, version):
    return EngineSource(box, str(sglang_release(version)), version)


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_registered_draft_classes_per_release(box, sglang_release, version):
    reg = registered_draft_classes(_src(box, sglang_release, version))
    eagle3, eagle, mtp = REGISTERED[version]
    got = {kind: {n for n, d in reg.items() if d.kind == kind} for kind in ("eagle3", "eagle", "mtp")}
    assert got["eagle3"] == eagle3
    assert got["eagle"] == eagle
    assert got["mtp"] == mtp
    assert set(reg) == eagle3 | eagle | mtp  # no target class, nothing unclassified
    for name, line in CLASS_LINES[version].items():
        assert (reg[name].file, reg[name].line) == (
            {"LlamaForCausalLMEagle3": "srt/models/llama_eagle3.py",
             "Eagle3DeepseekV2ForCausalLM": "srt/models/kimi_k25_eagle3.py"}[name], line)
        assert "capture_aux_hidden_states = True" in reg[name].why
    # the scope the doctor uses under EAGLE3 reads the EAGLE-3 drafts only, and finds the same ones
    light = registered_draft_classes(_src(box, sglang_release, version), scope="eagle3")
    assert set(light) == eagle3


#: release → (load_weights def line, its file, the d2t line, the decoder layer's module,
#: the legacy renames, the load_lm_head_from_target line or None), by hand in llama_eagle3.py.
LLAMA_LW = {
    "0.4.6": (180, 182, "midlayer", [], None),
    "0.4.8": (183, 185, "midlayer", [], None),
    "0.4.10": (202, 215, "midlayer", [], None),
    "0.5.2": (219, 232, "midlayer", [], 206),
    "0.5.4": (219, 232, "midlayer", [], 206),
    "0.5.9": (229, 242, "midlayer", [], 211),
    "0.5.12": (293, 318, "layers", [("midlayer", "layers.0", 314), ("aux_norm_low", "fc_norm.0", 314),
                                    ("aux_norm_mid", "fc_norm.1", 314), ("aux_norm_high", "fc_norm.2", 314)], 275),
    "0.5.18": (314, 339, "layers", [("midlayer", "layers.0", 335), ("aux_norm_low", "fc_norm.0", 335),
                                    ("aux_norm_mid", "fc_norm.1", 335), ("aux_norm_high", "fc_norm.2", 335)], 296),
    "0.5.23": (325, 350, "layers", [("midlayer", "layers.0", 346), ("aux_norm_low", "fc_norm.0", 346),
                                    ("aux_norm_mid", "fc_norm.1", 346), ("aux_norm_high", "fc_norm.2", 346)], 307),
}


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_llama_eagle3_load_weights_facts_per_release(box, sglang_release, version):
    lw = load_weights_facts(_src(box, sglang_release, version), "LlamaForCausalLMEagle3", "srt/models/llama_eagle3.py")
    def_line, d2t_line, layer, renames, ft_line = LLAMA_LW[version]
    f = "srt/models/llama_eagle3.py"
    assert lw.where == f"{f}:{def_line}" and lw.d2t_where == f"{f}:{d2t_line}"
    assert lw.layer_module == layer
    assert [(o, n, int(w.rsplit(":", 1)[1])) for k, o, n, w in lw.renames if k == "replace"] == renames
    assert lw.lm_head.from_target_where == (f"{f}:{ft_line}" if ft_line else None)
    if version in ("0.4.6", "0.4.8"):
        # names go to LlamaForCausalLM.load_weights with "model." added; a stacked name no
        # parameter has is params_dict[name]: KeyError (llama.py:517 / :578)
        assert lw.delegate is not None and lw.delegate.cls == "LlamaForCausalLM"
        assert lw.prefix_mode == "unless-lm_head" and lw.delegate.drop_stacked == "raises"
        assert lw.delegate.drop_stacked_where == {"0.4.6": "srt/models/llama.py:517",
                                                  "0.4.8": "srt/models/llama.py:578"}[version]
        assert lw.delegate.drop == "warning"  # else: logger.warning(f"Parameter {name} not found ...")
    else:
        assert lw.delegate is None and lw.prefix_mode == "if-not-param"
        assert (lw.drop, lw.drop_stacked) == ("silent", "silent")
        assert lw.stacked == [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"),
                              (".qkv_proj", ".v_proj", "v"), (".gate_up_proj", ".gate_proj", 0),
                              (".gate_up_proj", ".up_proj", 1)]


@pytest.mark.parametrize("version, expect", [
    # the SpecForge name of layer 0's q projection, and the newer layers.0 one
    ("0.4.6", {"midlayer.self_attn.q_proj.weight": ("loaded", "q"), "layers.0.self_attn.q_proj.weight": ("raises", None),
               "t2d": ("skipped", None), "d2t": ("d2t", None)}),
    ("0.5.9", {"midlayer.self_attn.q_proj.weight": ("loaded", "q"), "layers.0.self_attn.q_proj.weight": ("dropped", None),
               "t2d": ("skipped", None), "d2t": ("d2t", None)}),
    ("0.5.23", {"midlayer.self_attn.q_proj.weight": ("loaded", "q"), "layers.0.self_attn.q_proj.weight": ("loaded", "q"),
                "t2d": ("skipped", None), "d2t": ("d2t", None)}),
])
def test_follow_names_through_each_release(box, sglang_release, version, expect):
    lw = load_weights_facts(_src(box, sglang_release, version), "LlamaForCausalLMEagle3", "srt/models/llama_eagle3.py")
    for name, (how, shard) in expect.items():
        got = follow(name, lw, lw.modules)
        assert (got[0], got[2]) == (how, shard), (name, got)


def test_mla_draft_load_weights_facts(box, sglang_release):
    lw = load_weights_facts(_src(box, sglang_release, "0.5.23"), "Eagle3DeepseekV2ForCausalLM",
                            "srt/models/kimi_k25_eagle3.py")
    f = "srt/models/kimi_k25_eagle3.py"
    assert lw.where == f"{f}:428" and lw.d2t_where == f"{f}:437"
    assert lw.renames == [("regex", r"^layers\.0\.", "midlayer.", f"{f}:448")]
    assert lw.prefix_mode == "unless-lm_head" and lw.layer_module == "midlayer"
    assert (lw.drop, lw.drop_where) == ("warning", f"{f}:494")  # logger.warning("Eagle3 MLA: skipping ...")
    assert lw.lm_head.own_where == f"{f}:359" and lw.lm_head.from_target_where == f"{f}:356"
    assert "draft_vocab_size is None" in lw.lm_head.from_target_when
    # a checkpoint name with a model. prefix becomes model.model.*: skipped with a warning
    assert follow("model.layers.0.mlp.down_proj.weight", lw, lw.modules)[0] == "dropped-warned"
    assert follow("layers.0.self_attn.kv_a_proj_with_mqa.weight", lw, lw.modules)[:2] == ("loaded", "model.midlayer")


# -- the weight rules on each class ------------------------------------------------------------------

#: Kimi-K2 MLA geometry (public model card: q_lora_rank 1536, kv_lora_rank 512, qk_nope 128,
#: qk_rope 64, v_head 128, 64 heads on the draft's layer) in the style of SpecForge's kimi-k2 config.
def mla_draft_cfg(**over) -> dict:
    cfg = fixture_config("sgl-project__SpecForge__configs_kimi-k2-eagle3.json")
    cfg.update({"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "q_lora_rank": 1536,
                "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128})
    return with_keys(cfg, **over)


def mla_spec(cfg: dict, *, lm_head: bool) -> dict:
    """The kimi-k2.x-eagle3-mla checkpoint layout (``layers.0.*``, ``fc``, ``norm``; MLA's
    ``q_a_proj`` / ``kv_a_proj_with_mqa`` over 2 × hidden), sparse; ``lm_head`` only when asked."""
    h, heads, inter = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    q_lora, kv_lora, nope, rope, v = (cfg[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                       "qk_rope_head_dim", "v_head_dim"))
    p = "layers.0."
    spec = {"fc.weight": ("BF16", (h, 3 * h)),
            p + "self_attn.q_a_proj.weight": ("BF16", (q_lora, 2 * h)),
            p + "self_attn.q_a_layernorm.weight": ("BF16", (q_lora,)),
            p + "self_attn.q_b_proj.weight": ("BF16", (heads * (nope + rope), q_lora)),
            p + "self_attn.kv_a_proj_with_mqa.weight": ("BF16", (kv_lora + rope, 2 * h)),
            p + "self_attn.kv_a_layernorm.weight": ("BF16", (kv_lora,)),
            p + "self_attn.kv_b_proj.weight": ("BF16", (heads * (nope + v), kv_lora)),
            p + "self_attn.o_proj.weight": ("BF16", (h, heads * v)),
            p + "mlp.gate_proj.weight": ("BF16", (inter, h)), p + "mlp.up_proj.weight": ("BF16", (inter, h)),
            p + "mlp.down_proj.weight": ("BF16", (h, inter)),
            p + "input_layernorm.weight": ("BF16", (h,)), p + "hidden_norm.weight": ("BF16", (h,)),
            p + "post_attention_layernorm.weight": ("BF16", (h,)), "norm.weight": ("BF16", (h,))}
    if lm_head:
        spec["lm_head.weight"] = ("BF16", (cfg.get("draft_vocab_size") or cfg["vocab_size"], h))
    if cfg.get("draft_vocab_size"):
        spec["d2t"] = ("I64", (cfg["draft_vocab_size"],))
        spec["t2d"] = ("BOOL", (cfg["vocab_size"],))
    return spec


@pytest.mark.parametrize("version", ["0.5.12", "0.5.18", "0.5.23"])
def test_kimi_k26_mla_draft_without_lm_head(box, tmp_path, sglang_release, version):
    """The public Kimi-K2.6 case: an MLA EAGLE-3 draft whose checkpoint has no lm_head, accept
    length 1.00 on every decode line. The class keeps its own head whenever draft_vocab_size is
    set (kimi_k25_eagle3.py: load_lm_head_from_target only when it is missing), so the head stays
    at its initial values."""
    cfg = mla_draft_cfg()
    target, draft = deploy(tmp_path, KIMI_K25, cfg, mla_spec(cfg, lm_head=False))
    rep = doctor(box, launch(target, draft), sglang_release(version), version)
    assert "unknown-draft-architecture" not in rep.rules
    f = by_rule(rep, "weights-missing")
    assert f.evidence["missing"] == ["lm_head"]
    why = f.evidence["why"]["lm_head"]
    own, ft = {"0.5.12": (308, 305), "0.5.18": (356, 353), "0.5.23": (359, 356)}[version]
    assert f"srt/models/kimi_k25_eagle3.py:{own}" in why and f"srt/models/kimi_k25_eagle3.py:{ft}" in why
    assert "draft_vocab_size=32000" in why and "initial values" in why
    assert "lm_head" in f.message and "initial values" in f.message
    assert f.evidence["engine"].startswith("read from srt/models/kimi_k25_eagle3.py:")
    # nothing else the checkpoint holds is dropped: the MLA names land in the class's modules
    assert "weights-dropped" not in rep.rules


def test_kimi_mla_draft_without_lm_head_or_draft_vocab_takes_the_target_head(box, tmp_path, sglang_release):
    cfg = mla_draft_cfg(draft_vocab_size=None)
    target, draft = deploy(tmp_path, KIMI_K25, cfg, mla_spec(cfg, lm_head=False))
    rep = doctor(box, launch(target, draft), sglang_release("0.5.23"), "0.5.23")
    assert "weights-missing" not in rep.rules and "weights-dropped" not in rep.rules


def test_kimi_mla_draft_with_model_prefixed_names_is_dropped_with_a_warning(box, tmp_path, sglang_release):
    cfg = mla_draft_cfg()
    spec = {("model." + n if n.startswith("layers.") else n): v for n, v in mla_spec(cfg, lm_head=True).items()}
    target, draft = deploy(tmp_path, KIMI_K25, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_release("0.5.23"), "0.5.23")
    f = by_rule(rep, "weights-dropped")
    layer0 = sorted(n for n in spec if n.startswith("model.layers.0."))
    assert len(layer0) == 13 and f.evidence["dropped"] == layer0
    # the fused q/kv-a projection's branch skips a fused name no parameter has without a word
    # (kimi_k25_eagle3.py: if fused_name in params_dict, no else); every other name is warned about
    assert f.evidence["warned"] == [n for n in layer0 if "q_a_proj" not in n and "kv_a_proj_with_mqa" not in n]
    assert "warning" in f.message and f.severity == "error"
    assert by_rule(rep, "weights-missing").evidence["missing"] == ["model.midlayer"]
    # the fix puts them back in the layout the class reads (layers.0.*, which it maps to midlayer.*)
    from workbench.checkpoint import read_draft_facts
    from workbench.rules.facts import Facts
    from workbench.rules.weights import weight_fixes

    facts = Facts.of(launch(target, draft), draft=read_draft_facts(box, str(draft)), box=box,
                     engine=EngineSource(box, str(sglang_release("0.5.23")), "0.5.23"))
    [fix] = [x for x in weight_fixes(facts, rep.findings, {}) if x.kind == "draft-copy"]
    assert fix.repair.renames == {n: n[len("model."):] for n in layer0}


def test_mla_draft_is_unknown_to_0_5_9(box, tmp_path, sglang_release):
    """0.5.9 has no kimi_k25_eagle3.py: the MLA class is no draft class of that release."""
    assert not (sglang_release("0.5.9") / "srt/models/kimi_k25_eagle3.py").exists()
    cfg = mla_draft_cfg()
    target, draft = deploy(tmp_path, KIMI_K25, cfg, mla_spec(cfg, lm_head=False))
    rep = doctor(box, launch(target, draft), sglang_release("0.5.9"), "0.5.9")
    f = by_rule(rep, "unknown-draft-architecture")
    assert f.evidence["registered_draft_classes"]["value"] == ["LlamaForCausalLMEagle3"]
    assert "weights-missing" not in rep.rules  # the weight rules do not apply to a class the engine lacks
    # not "the engine builds it": 0.5.9 has no such class; it is registered from 0.5.12 on
    assert "the engine builds" not in f.message
    assert "Eagle3DeepseekV2ForCausalLM is not registered by this release" in f.message
    assert "registered from SGLang 0.5.12 on (srt/models/kimi_k25_eagle3.py)" in f.message
    # no relabel to LlamaForCausalLMEagle3: the MLA tensors do not load into it (0.5.9 llama_eagle3.py
    # load_weights: midlayer.*, no q_a_proj / kv_b_proj parameters)
    assert f.evidence["proposed_architecture"] is None
    misfit = f.evidence["tensors_that_do_not_fit"]["value"]
    assert "layers.0.self_attn.kv_a_layernorm.weight" in misfit
    assert f.evidence["tensors_that_do_not_fit"]["source"] == ("LlamaForCausalLMEagle3.load_weights (13 tensors "
                                                               "dropped, raising or of another shape)")
    assert "architectures" not in f.fix and "SGLang 0.5.12 or later" in f.fix
    from workbench.doctor.run import gather_facts
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.configs import config_fixes

    facts = gather_facts(box, LaunchCommand.parse(launch(target, draft)), engine_root=str(sglang_release("0.5.9")),
                         engine_version="0.5.9")
    fixes = [x for x in config_fixes(facts, rep.findings, {}) if x.rules == ("unknown-draft-architecture",)]
    assert [x.kind for x in fixes] == ["none"] and not any(x.repair for x in fixes)


@pytest.mark.parametrize("version, rules, prevents", [
    # llama.py 0.4.6: the stacked branch's params_dict[name] raises KeyError: the server does not start
    ("0.4.6", {"weights-dropped", "weights-missing"}, True),
    # before 0.5.12 layer 0 is model.midlayer: layers.0.* names match nothing and are skipped silently
    ("0.5.9", {"weights-dropped", "weights-missing"}, False),
    # 0.5.12+: self.layers, and legacy midlayer names are renamed: both layouts load
    ("0.5.23", set(), False),
])
def test_layers0_checkpoint_per_release(box, tmp_path, sglang_release, version, rules, prevents):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = {n.replace("midlayer.", "layers.0."): v for n, v in specforge_spec(cfg).items()}
    target, draft = deploy(tmp_path, {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                                      "num_hidden_layers": 32, "vocab_size": 128256,
                                      "max_position_embeddings": 131072, "rope_theta": 500000.0,
                                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_release(version), version)
    weight_rules = {r for r in rep.rules if r in ("weights-dropped", "weights-missing")}
    assert weight_rules == rules, rep.to_text()
    if rules:
        f = by_rule(rep, "weights-dropped")
        assert sorted(f.evidence.get("dropped", []) + f.evidence.get("raises", [])) == sorted(
            n for n in spec if n.startswith("layers.0."))
        assert f.prevents_start is prevents
        assert f.evidence["engine"] == {"0.4.6": "read from srt/models/llama_eagle3.py:180",
                                        "0.5.9": "read from srt/models/llama_eagle3.py:229"}[version]
        missing = by_rule(rep, "weights-missing").evidence["missing"]
        assert "model.midlayer.self_attn.qkv_proj.weight" in missing and "model.midlayer.hidden_norm.weight" in missing


def test_unparseable_draft_file_is_a_note_and_every_other_rule_runs(box, tmp_path, sglang_release):
    """An engine tree with a draft file this Python cannot parse (and a regex rename that is no
    valid pattern in another): the file is named in a note, the other drafts are still read, and
    the doctor runs every rule."""
    import shutil

    root = tmp_path / "engine" / "sglang"
    (root / "srt/models").mkdir(parents=True)
    src = sglang_release("0.5.23")
    for rel in ("srt/models/llama.py", "srt/models/llama_eagle3.py", "srt/models/kimi_k25_eagle3.py",
                "srt/speculative/eagle_worker_v2.py", "srt/speculative/spec_info.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, root / rel)
    (root / "srt/models/broken_eagle3.py").write_text(
        "class X(nn.Module:\n    def forward(self, forward_batch):\n"
        "        self.capture_aux_hidden_states = True\n        return forward_batch.spec_info.hidden_states\n"
        "EntryClass = [X]\n")
    mla = (root / "srt/models/kimi_k25_eagle3.py").read_text()
    assert 're.sub(r"^layers\\.0\\.", "midlayer.", name)' in mla
    (root / "srt/models/kimi_k25_eagle3.py").write_text(
        mla.replace('re.sub(r"^layers\\.0\\.", "midlayer.", name)', 're.sub(r"^layers\\.0\\.(", "midlayer.", name)'))
    reg = registered_draft_classes(EngineSource(box, str(root), "0.5.23"))
    assert set(reg) == {"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM", "__skipped__"}
    assert "srt/models/broken_eagle3.py: not parseable" in reg["__skipped__"].why
    cfg = mla_draft_cfg()
    target, draft = deploy(tmp_path, KIMI_K25, cfg, mla_spec(cfg, lm_head=False))
    rep = doctor(box, launch(target, draft, extra="--context-length 1000000"), root, "0.5.23")
    assert any("broken_eagle3.py: not parseable" in n for n in rep.notes), rep.notes
    assert any("could not follow the checkpoint through Eagle3DeepseekV2ForCausalLM.load_weights" in n
               for n in rep.notes), rep.notes
    assert "context-length-mismatch" in rep.rules  # the other rules ran
    assert "weights-missing" not in rep.rules and "unknown-draft-architecture" not in rep.rules


def test_layers0_checkpoint_on_0_5_9_is_repaired_into_the_midlayer_layout(box, tmp_path, sglang_release):
    """0.5.9 reads layer 0 as midlayer.*: the fix renames every layers.0.* tensor into that layout
    (each rename followed through 0.5.9's own load_weights), and the repaired names load."""
    from workbench.checkpoint import read_draft_facts
    from workbench.rules.facts import Facts
    from workbench.rules.weights import weight_fixes

    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = {n.replace("midlayer.", "layers.0."): v for n, v in specforge_spec(cfg).items()}
    target, draft = deploy(tmp_path, {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                                      "num_hidden_layers": 32, "vocab_size": 128256,
                                      "max_position_embeddings": 131072, "rope_theta": 500000.0}, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_release("0.5.9"), "0.5.9")
    facts = Facts.of(launch(target, draft), draft=read_draft_facts(box, str(draft)), box=box,
                     engine=EngineSource(box, str(sglang_release("0.5.9")), "0.5.9"))
    [fix] = [f for f in weight_fixes(facts, rep.findings, {}) if f.kind == "draft-copy"]
    layer0 = sorted(n for n in spec if n.startswith("layers.0."))
    assert fix.repair.renames == {n: n.replace("layers.0.", "midlayer.") for n in layer0}
    assert not [f for f in weight_fixes(facts, rep.findings, {}) if f.kind == "none"]  # nothing left over


def test_without_engine_source_the_shipped_0_5_23_tables_are_used(box, tmp_path):
    """No engine source: LlamaForCausalLMEagle3's load_weights as modelled from 0.5.23 (layers.0.*
    loads there), and the evidence says modelled."""
    from workbench.checkpoint import read_draft_facts
    from workbench.rules.facts import Facts
    from workbench.rules.weights import weights_dropped

    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = {n.replace("midlayer.", "layers.0."): v for n, v in specforge_spec(cfg).items()}
    spec["fc.weights"] = spec.pop("fc.weight")
    _, draft = deploy(tmp_path, {"architectures": ["LlamaForCausalLM"], "vocab_size": 128256}, cfg, spec)
    facts = Facts.of(f"python -m sglang.launch_server --model-path /t --speculative-algorithm EAGLE3 "
                     f"--speculative-draft-model-path {draft}", draft=read_draft_facts(box, str(draft)), box=box)
    [f] = weights_dropped(facts)
    assert f.evidence["dropped"] == ["fc.weights"]
    assert f.evidence["engine"].startswith("modelled") and "modelled_engine" in f.evidence
    assert "load_weights" not in f.evidence


def test_a_draft_whose_loader_cannot_be_followed_gets_a_note_not_a_guess(box, tmp_path, sglang_release):
    """DeepseekV3ForCausalLMNextN (an MTP draft, 0.5.23 deepseek_nextn.py) hands its names to
    DeepseekV3ForCausalLM.load_weights, whose treatment of an unmatched name this reader cannot
    follow: the doctor says so in a note and raises no weight finding it would have to guess."""
    cfg = {"architectures": ["DeepseekV3ForCausalLMNextN"], "model_type": "deepseek_v3", "hidden_size": 7168,
           "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "vocab_size": 129280,
           "max_position_embeddings": 163840, "rope_theta": 10000}
    spec = {"model.layers.61.eh_proj.weight": ("BF16", (7168, 14336)), "model.layers.61.enorm.weight": ("BF16", (7168,)),
            "model.layers.61.hnorm.weight": ("BF16", (7168,))}
    target, draft = deploy(tmp_path, {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
                                      "num_hidden_layers": 61, "vocab_size": 129280,
                                      "max_position_embeddings": 163840, "rope_theta": 10000}, cfg, spec)
    rep = doctor(box, launch(target, draft, "EAGLE"), sglang_release("0.5.23"), "0.5.23")
    assert "unknown-draft-architecture" not in rep.rules  # an MTP draft of this release
    assert not [r for r in rep.rules if r.startswith(("weights-", "weight-", "token-map"))], rep.rules
    assert any(n.startswith("the weight rules do not run for DeepseekV3ForCausalLMNextN") for n in rep.notes), rep.notes


def test_check_draft_weights_with_the_engine_uses_the_release(box, tmp_path, sglang_release):
    """H3's check on a layers.0.* export: clean against the modelled 0.5.23 loader, dropped against
    0.5.9's own (layer 0 is midlayer there)."""
    from workbench.checkpoint import read_draft_facts
    from workbench.rules.weights import check_draft_weights

    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = {n.replace("midlayer.", "layers.0."): v for n, v in specforge_spec(cfg).items()}
    _, draft = deploy(tmp_path, {"architectures": ["LlamaForCausalLM"], "vocab_size": 128256}, cfg, spec)
    facts = read_draft_facts(box, str(draft))
    modelled, _ = check_draft_weights(box, facts)
    assert modelled == []
    found, checked = check_draft_weights(box, facts, engine=EngineSource(box, str(sglang_release("0.5.9")), "0.5.9"))
    assert {f.rule for f in found} == {"weights-dropped", "weights-missing"}
    assert checked["engine"] == "read from srt/models/llama_eagle3.py:229"


@pytest.mark.parametrize("version, expect", [
    # llama_eagle3.py 0.5.9:135: self.fc = torch.nn.Linear(self.hidden_size_in * 3, ...); from 0.5.12 its
    # width is hidden_size_in * self.num_aux_hidden_states (from the config's ids)
    ("0.5.9", {"aux-count-mismatch"}),
    ("0.5.23", set()),
])
def test_four_aux_fc_against_a_release_with_three_fixed(box, tmp_path, sglang_release, version, expect):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 10, 20, 28]})
    spec = specforge_spec(cfg)
    assert spec["fc.weight"] == ("BF16", (4096, 4 * 4096))
    target, draft = deploy(tmp_path, {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                                      "num_hidden_layers": 32, "vocab_size": 128256,
                                      "max_position_embeddings": 131072, "rope_theta": 500000.0,
                                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_release(version), version)
    got = {f.rule for f in rep.findings if f.rule == "aux-count-mismatch" and f.evidence.get("param") == "model.fc.weight"}
    assert got == expect, rep.to_text()
    if expect:
        f = next(f for f in rep.findings if f.rule == "aux-count-mismatch" and f.evidence.get("param") == "model.fc.weight")
        assert f.evidence["expected"] == [4096, 3 * 4096] and f.evidence["shape"] == [4096, 4 * 4096]
        assert f.prevents_start  # the loader's shape assert


# -- the worker this server runs reads load_lm_head_from_target (item 11) -------------------------
#: grep -n load_lm_head_from_target srt/speculative/*.py (first line of each worker's test), and the
#: worker each launch runs (the code-path map's choice: test_codepath_releases.py).
LM_HEAD_WORKER = [
    ("0.5.4", {}, [], "srt/speculative/eagle_worker.py:140"),  # overlap off without --enable-beta-spec
    ("0.5.4", {}, ["--enable-beta-spec"], "srt/speculative/eagle_worker_v2.py:158"),
    ("0.5.12", {}, [], "srt/speculative/eagle_worker_v2.py:218"),  # SGLANG_ENABLE_SPEC_V2 EnvBool(True)
    ("0.5.12", {"SGLANG_ENABLE_SPEC_V2": "0"}, [], "srt/speculative/eagle_worker.py:183"),
    ("0.5.23", {}, [], "srt/speculative/eagle_worker_v2.py:357"),
]


@pytest.mark.parametrize("version, env, args, want", LM_HEAD_WORKER)
def test_worker_lm_head_source_is_the_worker_the_server_runs(box, sglang_release, version, env, args, want):
    from workbench.engine.codepath import eagle_worker
    from workbench.engine.drafts import worker_lm_head_source

    src = EngineSource(box, str(sglang_release(version)), version)
    assert worker_lm_head_source(src, worker=eagle_worker(src, env=env, launch_args=args)) == want


@pytest.mark.parametrize("prefix, want", [("", "srt/speculative/eagle_worker_v2.py:218"),
                                          ("SGLANG_ENABLE_SPEC_V2=0 ", "srt/speculative/eagle_worker.py:183")])
def test_mla_weights_missing_cites_the_worker_of_the_launch(box, tmp_path, sglang_release, prefix, want):
    cfg = mla_draft_cfg()
    target, draft = deploy(tmp_path, KIMI_K25, cfg, mla_spec(cfg, lm_head=False))
    rep = doctor(box, prefix + launch(target, draft), sglang_release("0.5.12"), "0.5.12")
    why = by_rule(rep, "weights-missing").evidence["why"]["lm_head"]
    assert f"the worker ({want}) keeps the draft's own head" in why


@pytest.mark.parametrize("version, entry, switch, env_line, legacy", [
    # grep -n 'def load_weights\|SGLANG_ENABLE_WEIGHT_LOADER_V2.get\|def _legacy_load_weights' srt/models/llama.py;
    # grep -n 'SGLANG_ENABLE_WEIGHT_LOADER_V2 = ' srt/environ.py
    ("0.5.18", 663, 666, 293, 670),
    ("0.5.23", 701, 704, 315, 708),
])
def test_eagle1_draft_loader_note_cites_load_weights_and_the_default_loader(box, sglang_release, version, entry,
                                                                            switch, env_line, legacy):
    from workbench.engine.drafts import load_weights_facts

    lw = load_weights_facts(EngineSource(box, str(sglang_release(version)), version), "LlamaForCausalLMEagle",
                            "srt/models/llama_eagle.py")
    assert lw.delegate.entry_where == f"srt/models/llama.py:{entry}"
    assert lw.delegate.where == f"srt/models/llama.py:{legacy}"  # the loader followed: the default one
    (note,) = [n for n in lw.notes if n.startswith("names are handed to")]
    assert note == (f"names are handed to LlamaForCausalLM.load_weights (srt/models/llama.py:{entry}): switches on "
                    f"`envs.SGLANG_ENABLE_WEIGHT_LOADER_V2.get()` (line {switch}): _load_weights_v2 when it is true, "
                    f"else _legacy_load_weights; by default (SGLANG_ENABLE_WEIGHT_LOADER_V2 = EnvBool(False), "
                    f"srt/environ.py:{env_line}) _legacy_load_weights runs; _legacy_load_weights "
                    f"(srt/models/llama.py:{legacy}) is read")
