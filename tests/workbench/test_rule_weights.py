"""H3's static draft checks (``workbench.draft_checks``) on sparse SpecForge-style EAGLE-3 exports.

Every draft is a real public config (``tests/fixtures/configs``) plus a ``model.safetensors`` whose
header carries the tensor names, dtypes and shapes a SpecForge EAGLE-3 export has (``fc.weight``,
``midlayer.*`` with separate q/k/v and gate/up, ``norm.weight``, ``lm_head.weight``, ``d2t`` I64
[draft_vocab], ``t2d`` BOOL [vocab]); the big tensors are sparse holes, ``d2t``/``t2d`` real bytes.
Everything is read through the real local box (``remote.connect("local")``) and
``workbench.checkpoint.read_draft_facts`` / ``read_target_facts``.

The engine facts modelled are SGLang 0.5.23 ``srt/models/llama_eagle3.py``
(``LlamaForCausalLMEagle3.__init__``/``load_weights``); ``test_map_matches_real_load_weights``
runs the real ``load_weights`` body from the wheel's source when it is on this machine.
"""

from __future__ import annotations

import ast
import os
import pathlib
import textwrap
import types
import typing

import numpy as np
import pytest

from rule_helpers import (
    DEEPSEEK,
    GPT_OSS,
    KIMI,
    LLAMA31_8B,
    QWEN3,
    QWEN3_30B,
    SPECFORGE_CONFIGS,
    by_rule,
    deploy,
    doctor,
    draft_cfg,
    hot_ids,
    launch,
    make_draft,
    rules,
    run,
    serious,
    specforge_spec,
    token_map,
)
from workbench.checkpoint import read_draft_facts
from workbench.rules.weights import (
    LEGACY_NAME_MAP,
    check_token_map,
    expected_parameters,
    map_checkpoint_name,
)
from workbench_test_helpers import public_report, fixture_config, write_sparse_safetensors




# ---------------------------------------------------------------------------------------------
# Building drafts
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Healthy exports: no false alarms
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", SPECFORGE_CONFIGS)
def test_healthy_specforge_export_has_no_findings(box, tmp_path, config):
    cfg = fixture_config(config)
    root = make_draft(tmp_path, cfg)
    findings, checked = run(box, root)
    assert findings == [], [f.message for f in findings]
    assert checked["dropped"] == [] and checked["missing"] == [] and checked["shape_problems"] == []
    assert checked["d2t"]["len"] == cfg["draft_vocab_size"] and checked["d2t"]["problems"] == []
    assert checked["d2t"]["t2d_true"] == cfg["draft_vocab_size"] and checked["d2t"]["sorted"] is True
    assert 0 <= checked["d2t"]["target_id_min"] <= checked["d2t"]["target_id_max"] < cfg["vocab_size"]
    # the multi-GB tensors are holes: the file costs at most the header and the token map
    assert os.stat(root / "draft" / "model.safetensors").st_blocks * 512 < 4 << 20


def test_kimi_shapes_are_the_engines(box, tmp_path):
    """Kimi-K2 draft: fc 7168 × (3 × 7168), q over 2 × 7168 with head_dim 128 ≠ 7168/64."""
    cfg = fixture_config(KIMI)
    facts = read_draft_facts(box, str(make_draft(tmp_path, cfg) / "draft"))
    p = expected_parameters(facts)
    assert p["model.fc.weight"]["shape"] == (7168, 21504)
    assert p["model.layers.0.self_attn.qkv_proj.weight"]["shards"] == {
        "q": (8192, 14336), "k": (8192, 14336), "v": (8192, 14336)}
    assert p["model.layers.0.self_attn.o_proj.weight"]["shape"] == (7168, 8192)
    assert p["model.layers.0.mlp.gate_up_proj.weight"]["shape"] == (2 * 18432, 7168)
    assert p["lm_head.weight"] == {**p["lm_head.weight"], "shape": (32000, 7168), "required": True}
    assert not p["model.embed_tokens.weight"]["required"]
    assert "model.fc.bias" not in p and "model.input_norm.weight" not in p and "model.fc_norm.0.weight" not in p


@pytest.mark.parametrize("form", ["layers.0", "model.midlayer", "model.layers.0", "fused"])
def test_every_loadable_naming_is_healthy(box, tmp_path, form):
    """The engine accepts ``midlayer.*`` (legacy), ``layers.0.*``, ``model.``-prefixed names and
    pre-stacked ``qkv_proj``/``gate_up_proj`` (no shard id: the fused loader takes the whole)."""
    cfg = fixture_config(QWEN3)
    spec = specforge_spec(cfg)
    if form == "fused":
        q, k, v = (spec.pop(f"midlayer.self_attn.{x}_proj.weight")[1] for x in "qkv")
        g, u = (spec.pop(f"midlayer.mlp.{x}_proj.weight")[1] for x in ("gate", "up"))
        spec["midlayer.self_attn.qkv_proj.weight"] = ("BF16", (q[0] + k[0] + v[0], q[1]))
        spec["midlayer.mlp.gate_up_proj.weight"] = ("BF16", (g[0] + u[0], g[1]))
    else:
        spec = {(n.replace("midlayer", form) if n.startswith("midlayer") else
                 f"model.{n}" if form.startswith("model.") and n not in ("lm_head.weight", "d2t", "t2d") else n): s
                for n, s in spec.items()}
    findings, checked = run(box, make_draft(tmp_path, cfg, spec))
    assert findings == [], [f.message for f in findings]
    assert checked["loaded_params"] == 10


def test_optional_embed_tokens_is_loaded_not_dropped(box, tmp_path):
    cfg = fixture_config(DEEPSEEK)
    spec = {**specforge_spec(cfg), "embed_tokens.weight": ("BF16", (cfg["vocab_size"], cfg["hidden_size"]))}
    findings, _ = run(box, make_draft(tmp_path, cfg, spec))
    assert findings == []


# ---------------------------------------------------------------------------------------------
# Names the engine drops, parameters it never fills
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("old, new, missing", [
    ("fc.weight", "decoder.fc.weight", "model.fc.weight"),
    ("norm.weight", "final_norm.weight", "model.norm.weight"),
    ("midlayer.self_attn.k_proj.weight", "midlayer.attn.k_proj.weight",
     "model.layers.0.self_attn.qkv_proj.weight (shard k)"),
    ("midlayer.mlp.down_proj.weight", "model.model.midlayer.mlp.down_proj.weight", "model.layers.0.mlp.down_proj.weight"),
    ("lm_head.weight", "model.lm_head.weight", "lm_head.weight"),
])
def test_unmatchable_name_is_dropped_and_its_parameter_missing(box, tmp_path, old, new, missing):
    cfg = fixture_config(KIMI)
    findings, checked = run(box, make_draft(tmp_path, cfg, rename={old: new}))
    assert rules(findings) == ["weights-dropped", "weights-missing"]
    dropped = next(f for f in findings if f.rule == "weights-dropped")
    assert dropped.evidence["dropped"] == [new] and new in dropped.message
    assert checked["missing"] == [missing]


def test_missing_final_norm(box, tmp_path):
    findings, checked = run(box, make_draft(tmp_path, fixture_config(DEEPSEEK), drop=("norm.weight",)))
    assert rules(findings) == ["weights-missing"]
    assert "model.norm.weight" in findings[0].message and checked["missing"] == ["model.norm.weight"]


def test_lm_head_rows_are_the_full_vocab(box, tmp_path):
    cfg = fixture_config(KIMI)
    findings, _ = run(box, make_draft(tmp_path, cfg, shapes={"lm_head.weight": (163840, 7168)}))
    assert rules(findings) == ["lm-head-shape-mismatch"]
    assert findings[0].evidence["expected"] == [32000, 7168] and findings[0].evidence["shape"] == [163840, 7168]


def test_head_dim_dropped_from_config(box, tmp_path):
    """Kimi's draft has head_dim 128 while 7168/64 = 112: without ``head_dim`` the engine builds
    q/k/v with 112-wide heads (``llama.py``: ``getattr(config, "head_dim", hidden // heads)``)."""
    cfg = fixture_config(KIMI)
    spec = specforge_spec(cfg)
    cfg = {k: v for k, v in cfg.items() if k != "head_dim"}
    findings, _ = run(box, make_draft(tmp_path, cfg, spec))
    assert set(rules(findings)) == {"head-dim-mismatch"} and len(findings) == 4  # q, k, v, o


def test_tied_embeddings_need_no_lm_head(box, tmp_path):
    cfg = {**fixture_config(QWEN3), "tie_word_embeddings": True}
    findings, checked = run(box, make_draft(tmp_path, cfg))
    assert "lm_head.weight" not in specforge_spec(cfg)
    assert findings == [], [f.message for f in findings]


def test_tied_embeddings_drop_a_trained_lm_head(box, tmp_path):
    """With tie_word_embeddings ``lm_head`` *is* ``model.embed_tokens`` (named_parameters lists it
    once, as model.embed_tokens.weight): a checkpoint ``lm_head.weight`` matches nothing."""
    cfg = {**fixture_config(QWEN3), "tie_word_embeddings": True}
    spec = {**specforge_spec(cfg), "lm_head.weight": ("BF16", (32000, 2048))}
    findings, _ = run(box, make_draft(tmp_path, cfg, spec))
    assert rules(findings) == ["weights-dropped"] and findings[0].evidence["dropped"] == ["lm_head.weight"]


def test_no_draft_vocab_size_takes_lm_head_from_target(box, tmp_path):
    """``draft_vocab_size`` None → ``load_lm_head_from_target``: no lm_head needed, and one of the
    full vocab loads (then is replaced); no d2t is needed either."""
    cfg = {k: v for k, v in fixture_config(DEEPSEEK).items() if k != "draft_vocab_size"}
    spec = specforge_spec(cfg)
    assert "d2t" not in spec
    findings, _ = run(box, make_draft(tmp_path, cfg, spec, drop=("lm_head.weight",)))
    assert findings == [], [f.message for f in findings]
    findings, _ = run(box, make_draft(tmp_path / "with_head", cfg, spec))
    assert findings == [], [f.message for f in findings]
    findings, _ = run(box, make_draft(tmp_path / "bad_head", cfg, spec, shapes={"lm_head.weight": (32000, 7168)}))
    assert rules(findings) == ["lm-head-shape-mismatch"]


def test_bias_config_needs_fc_and_o_proj_bias(box, tmp_path):
    """``bias: true``: fc bias (llama_eagle3.py) and o_proj bias (llama.py ``attention_bias or bias``)."""
    cfg = {**fixture_config(QWEN3), "bias": True}
    findings, checked = run(box, make_draft(tmp_path, cfg))
    assert rules(findings) == ["weights-missing"]
    assert checked["missing"] == ["model.fc.bias", "model.layers.0.self_attn.o_proj.bias"]
    spec = {**specforge_spec(cfg), "fc.bias": ("BF16", (2048,)), "midlayer.self_attn.o_proj.bias": ("BF16", (2048,))}
    findings, _ = run(box, make_draft(tmp_path / "ok", cfg, spec))
    assert findings == []


@pytest.mark.parametrize("flags", [{"use_aux_norm": True}, {"fc_norm": False, "use_aux_norm": True}, {"fc_norm": True}])
def test_legacy_aux_norm_names_fill_fc_norm(box, tmp_path, flags):
    """``fc_norm`` or legacy ``use_aux_norm`` (``getattr(config, "fc_norm", None) or
    getattr(config, "use_aux_norm", False)``) and ``aux_norm_low|mid|high`` → ``fc_norm.0|1|2``."""
    cfg = {**fixture_config(QWEN3), **flags}
    spec = {**specforge_spec(cfg), **{f"aux_norm_{x}.weight": ("BF16", (2048,)) for x in ("low", "mid", "high")}}
    findings, checked = run(box, make_draft(tmp_path, cfg, spec))
    assert findings == [], [f.message for f in findings]
    findings, checked = run(box, make_draft(tmp_path / "none", cfg))
    assert checked["missing"] == [f"model.fc_norm.{i}.weight" for i in range(3)]


def test_norm_before_fc_needs_input_norm(box, tmp_path):
    cfg = fixture_config(QWEN3)
    cfg["eagle_config"] = {**(cfg.get("eagle_config") or {}), "norm_before_fc": True}
    findings, checked = run(box, make_draft(tmp_path, cfg))
    assert checked["missing"] == ["model.input_norm.weight"]
    spec = {**specforge_spec(cfg), "input_norm.weight": ("BF16", (3 * 2048,))}
    findings, _ = run(box, make_draft(tmp_path / "ok", cfg, spec))
    assert findings == []


# ---------------------------------------------------------------------------------------------
# d2t / t2d
# ---------------------------------------------------------------------------------------------


def test_reduced_draft_vocab_without_d2t(box, tmp_path):
    cfg = fixture_config(GPT_OSS)
    findings, _ = run(box, make_draft(tmp_path, cfg, drop=("d2t", "t2d")))
    assert rules(findings) == ["token-map-missing"]
    assert findings[0].evidence == {**findings[0].evidence, "draft_vocab_size": 32000, "vocab_size": 201088}


def _token_map_finding(box, root, cfg, d2t, t2d):
    findings, checked = run(box, make_draft(root, cfg, data={"d2t": d2t, "t2d": t2d}))
    assert rules(findings) == ["token-map-invalid"], [f.message for f in findings]
    return findings[0].message


def test_d2t_absolute_ids(box, tmp_path):
    cfg = fixture_config(KIMI)
    hot = hot_ids(163840, 32000)
    _, t2d = token_map(163840, 32000)
    msg = _token_map_finding(box, tmp_path, cfg, hot, t2d)
    assert "absolute target ids" in msg


def test_d2t_absolute_ids_without_t2d(box, tmp_path):
    cfg = fixture_config(KIMI)
    findings, _ = run(box, make_draft(tmp_path, cfg, drop=("t2d",), data={"d2t": hot_ids(163840, 32000)}))
    assert rules(findings) == ["token-map-invalid"]
    assert "absolute target ids" in findings[0].message and "outside the target vocab" in findings[0].message


def test_d2t_duplicates(box, tmp_path):
    cfg = fixture_config(QWEN3)
    d2t, t2d = token_map(151936, 32000)
    d2t[1] = d2t[0] - 1  # draft 1 → the target id of draft 0
    msg = _token_map_finding(box, tmp_path, cfg, d2t, t2d)
    assert "duplicates" in msg


def test_d2t_out_of_range(box, tmp_path):
    cfg = fixture_config(DEEPSEEK)
    d2t, t2d = token_map(129280, 32000)
    d2t[-1] += 129280
    msg = _token_map_finding(box, tmp_path, cfg, d2t, t2d)
    assert "1 draft ids map outside the target vocab [0, 129280)" in msg and "draft 31999" in msg


def test_t2d_count_differs_from_draft_vocab(box, tmp_path):
    cfg = fixture_config(GPT_OSS)
    d2t, t2d = token_map(201088, 32000)
    t2d[np.flatnonzero(~t2d)[:5]] = True
    msg = _token_map_finding(box, tmp_path, cfg, d2t, t2d)
    assert msg == "t2d marks 32005 target tokens, the draft vocab has 32000"


def test_check_token_map_unit():
    """Small cases of the offset rule ``target = draft + d2t[draft]`` (llama_eagle3.py)."""
    hot = np.array([0, 1, 5, 9])
    d2t = hot - np.arange(4)
    t2d = np.zeros(10, bool)
    t2d[hot] = True
    assert check_token_map(d2t, 10, t2d, draft_vocab_size=4) == []
    assert check_token_map(d2t[[2, 0, 3, 1]] + np.array([2, 0, 3, 1]) - np.arange(4), 10, t2d) == []  # unsorted: fine
    assert "absolute" in check_token_map(hot, 10, t2d)[0]
    assert check_token_map(d2t, 10, draft_vocab_size=5) == ["d2t has 4 entries, the draft vocab (lm_head rows) is 5"]
    assert "dtype float32" in check_token_map(d2t.astype(np.float32), 10)[0]
    assert "t2d has shape [11]" in check_token_map(d2t, 10, np.zeros(11, bool))[0]
    other = np.zeros(10, bool)
    other[[0, 1, 5, 8]] = True
    assert check_token_map(d2t, 10, other) == ["t2d and d2t disagree on which target tokens the draft vocab holds"]


# ---------------------------------------------------------------------------------------------
# map_checkpoint_name
# ---------------------------------------------------------------------------------------------

LEGACY_CASES = {
    "midlayer.self_attn.q_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", "loaded"),
    "midlayer.self_attn.k_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", "loaded"),
    "midlayer.self_attn.v_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", "loaded"),
    "midlayer.self_attn.o_proj.weight": ("model.layers.0.self_attn.o_proj.weight", "loaded"),
    "midlayer.mlp.gate_proj.weight": ("model.layers.0.mlp.gate_up_proj.weight", "loaded"),
    "midlayer.mlp.up_proj.weight": ("model.layers.0.mlp.gate_up_proj.weight", "loaded"),
    "midlayer.mlp.down_proj.weight": ("model.layers.0.mlp.down_proj.weight", "loaded"),
    "midlayer.hidden_norm.weight": ("model.layers.0.hidden_norm.weight", "loaded"),
    "model.midlayer.input_layernorm.weight": ("model.layers.0.input_layernorm.weight", "loaded"),
    "model.layers.0.self_attn.q_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", "loaded"),
    "layers.0.post_attention_layernorm.weight": ("model.layers.0.post_attention_layernorm.weight", "loaded"),
    "aux_norm_low.weight": ("model.fc_norm.0.weight", "loaded"),
    "aux_norm_mid.weight": ("model.fc_norm.1.weight", "loaded"),
    "model.aux_norm_high.weight": ("model.fc_norm.2.weight", "loaded"),
    "fc.weight": ("model.fc.weight", "loaded"),
    "model.fc.weight": ("model.fc.weight", "loaded"),
    "norm.weight": ("model.norm.weight", "loaded"),
    "lm_head.weight": ("lm_head.weight", "loaded"),
    "embed_tokens.weight": ("model.embed_tokens.weight", "loaded"),
    "d2t": (None, "d2t"),
    "model.d2t": (None, "d2t"),
    "t2d": (None, "t2d"),
    "model.lm_head.weight": (None, "dropped"),
    "decoder.fc.weight": (None, "dropped"),
    "midlayer.attn.k_proj.weight": (None, "dropped"),
    "layers.1.self_attn.q_proj.weight": (None, "dropped"),
}


def _params_with_fc_norm() -> set[str]:
    cfg = {**fixture_config(KIMI), "fc_norm": True}
    from workbench.checkpoint import draft_facts_from
    return set(expected_parameters(draft_facts_from("/d", "/d/config.json", cfg)))


@pytest.mark.parametrize("name", sorted(LEGACY_CASES))
def test_map_checkpoint_name_legacy_forms(name):
    assert map_checkpoint_name(name, _params_with_fc_norm()) == LEGACY_CASES[name]


def test_legacy_map_is_the_engines():
    assert LEGACY_NAME_MAP == {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                               "aux_norm_high": "fc_norm.2"}


def _real_load_weights(llama_eagle3: pathlib.Path):
    """The real ``LlamaForCausalLMEagle3.load_weights`` compiled from the SGLang 0.5.23 source,
    with ``torch.arange`` and ``default_weight_loader`` replaced by recorders."""
    tree = ast.parse(llama_eagle3.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LlamaForCausalLMEagle3")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "load_weights")
    src = textwrap.dedent(ast.get_source_segment(llama_eagle3.read_text(), fn))
    calls: list = []
    ns = {"Iterable": typing.Iterable, "Tuple": typing.Tuple,
          "torch": types.SimpleNamespace(arange=lambda n: np.arange(n)),
          "default_weight_loader": lambda param, w, *shard: calls.append((param.name, shard[0] if shard else None))}
    exec(compile(src, str(llama_eagle3), "exec"), ns)
    return ns["load_weights"], calls


def test_map_matches_real_load_weights(sglang_source):
    """Feed every case to the real ``load_weights`` body and compare where each tensor lands."""
    load_weights, calls = _real_load_weights(sglang_source / "srt/models/llama_eagle3.py")
    params = _params_with_fc_norm()
    fake = types.SimpleNamespace(named_parameters=lambda: [(p, types.SimpleNamespace(name=p)) for p in sorted(params)],
                                 hot_token_id=None)
    for name in sorted(LEGACY_CASES):
        calls.clear()
        fake.hot_token_id = None
        load_weights(fake, [(name, np.zeros(4, dtype=np.int64))])
        real = calls[0][0] if calls else None
        param, how = map_checkpoint_name(name, params)
        assert param == real, name
        assert (how == "d2t") == (fake.hot_token_id is not None), name
        assert (how == "dropped") == (not calls and fake.hot_token_id is None and "t2d" not in name), name


def test_speculators74_lm_head_with_target_vocab_rows(box, tmp_path, sglang_source):
    dc = public_report("speculators-pr74-lm-head-tied-to-embeddings")["inputs"]["draft_config"]
    cfg = draft_cfg(draft_vocab_size=dc["draft_vocab_size"], vocab_size=dc["vocab_size"], hidden_size=dc["hidden_size"],
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = specforge_spec(cfg)
    spec["lm_head.weight"] = ("BF16", (128256, 4096))  # tied to the target-vocab embedding on export
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_source)
    assert serious(rep) == [("lm-head-shape-mismatch", "error")]
    f = by_rule(rep, "lm-head-shape-mismatch")
    assert (f.evidence["shape"], f.evidence["expected"]) == ([128256, 4096], [32000, 4096])


def test_vllm18909_d2t_kept_by_sglang_or_dropped_under_a_renamed_key(box, tmp_path, sglang_source):
    dc = public_report("vllm-pr18909-d2t-mapping-dropped")["inputs"]["draft_config"]
    cfg = draft_cfg(draft_vocab_size=dc["draft_vocab_size"], vocab_size=dc["vocab_size"],
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg)
    assert serious(doctor(box, launch(target, draft), sglang_source)) == []  # SGLang loads d2t as hot_token_id
    spec = specforge_spec(cfg)
    spec["draft_id_to_target_id"] = spec.pop("d2t")  # vLLM's buffer name: SGLang's loader drops it
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg, spec, token_map_data=False, name="renamed")
    rep = doctor(box, launch(target, draft), sglang_source)
    assert serious(rep) == [("token-map-missing", "error"), ("weights-dropped", "error")]
    assert by_rule(rep, "weights-dropped").evidence["dropped"] == ["draft_id_to_target_id"]


def test_automodel2447_no_d2t_in_a_reduced_vocab_checkpoint(box, tmp_path, sglang_source):
    assert "(absent) d2t" in public_report("automodel-pr2447-d2t-t2d-missing-from-checkpoint")["inputs"]["weight_names"]
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = {k: v for k, v in specforge_spec(cfg).items() if k not in ("d2t", "t2d")}
    target, draft = deploy(tmp_path, LLAMA31_8B, cfg, spec)
    rep = doctor(box, launch(target, draft), sglang_source)
    assert serious(rep) == [("token-map-missing", "error")]
    assert by_rule(rep, "token-map-missing").evidence == {"draft_vocab_size": 32000, "vocab_size": 128256,
                                                          "checkpoint": str(draft)}


def test_head_dim_from_config_else_hidden_over_heads(box, tmp_path, sglang_source):
    """Qwen3-style drafts have head_dim 128 with hidden 2048 / 32 heads = 64: without ``head_dim``
    in the config the engine builds 64-wide heads and the checkpoint's q/k/v/o do not fit."""
    cfg = fixture_config("sgl-project__SpecForge__configs_qwen3-30B-eagle3.json")
    spec = specforge_spec(cfg)
    del cfg["head_dim"]
    t, d = deploy(tmp_path, QWEN3_30B, cfg, spec)
    rep = doctor(box, launch(t, d, extra="--context-length 2048"), sglang_source)
    assert {r for r, _ in serious(rep)} == {"head-dim-mismatch"}
    f = by_rule(rep, "head-dim-mismatch")
    assert f.evidence["tensor"].startswith("midlayer.self_attn.") and f.evidence["expected"][0] in (32 * 64, 4 * 64)


@pytest.mark.parametrize("variant", ["unsorted", "absolute", "out-of-vocab", "duplicates"])
def test_token_map_variants(box, tmp_path, sglang_source, variant):
    """d2t read by byte range from the checkpoint. SGLang 0.5.23 ``llama_eagle3.py`` computes
    ``hot_token_id = d2t + arange`` and indexes the target vocab with it: order is free (an
    unsorted map is valid for the engine, only warned about), absolute ids, ids outside the vocab and
    duplicates are not."""
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    spec = specforge_spec(cfg)
    d2t, t2d = token_map(cfg["vocab_size"], cfg["draft_vocab_size"])
    target_ids = d2t + np.arange(len(d2t))
    if variant == "unsorted":
        perm = np.random.default_rng(1).permutation(len(d2t))
        d2t = target_ids[perm] - np.arange(len(d2t))
    elif variant == "absolute":
        d2t = target_ids
    elif variant == "out-of-vocab":
        d2t = d2t.copy()
        d2t[-1] = cfg["vocab_size"]
    else:
        d2t = d2t.copy()
        d2t[1] = target_ids[0] - 1
    t, d = deploy(tmp_path, LLAMA31_8B, cfg, spec, token_map_data=False)
    write_sparse_safetensors(d / "model.safetensors", spec, data={"d2t": d2t.astype(np.int64), "t2d": t2d})
    rep = doctor(box, launch(t, d), sglang_source)
    if variant == "unsorted":
        # the engine takes it; the trainers never write it (token-map-unordered): a warning, never an error
        assert serious(rep) == [("token-map-unordered", "warning")]
        return
    f = by_rule(rep, "token-map-invalid")
    assert f.severity == "error" and f.evidence["len"] == 32000
    assert {"absolute": "absolute target ids", "out-of-vocab": "outside the target vocab",
            "duplicates": "duplicates"}[variant] in f.message


def test_a_tensor_of_another_shape_is_weight_shape_mismatch_not_weights_missing(box, tmp_path, sglang_source):
    """One down_proj exported with other columns (the config and the other tensors agree on
    intermediate_size 6144): the loader asserts; the finding is a shape rule's and stands on its
    own (no consequence of a config fault)."""
    from rule_helpers import QWEN3_30B, by_rule, deploy, doctor, launch

    cfg = fixture_config(QWEN3)
    spec = {**specforge_spec(cfg), "midlayer.mlp.down_proj.weight": ("BF16", (2048, 6000))}
    findings, checked = run(box, make_draft(tmp_path / "alone", cfg, spec))
    assert rules(findings) == ["weight-shape-mismatch"]
    assert findings[0].evidence["expected"] == [2048, 6144] and findings[0].evidence["shape"] == [2048, 6000]
    t, d = deploy(tmp_path, QWEN3_30B, cfg, spec)
    report = doctor(box, launch(t, d), sglang_source)
    f = by_rule(report, "weight-shape-mismatch")
    assert "consequence_of" not in f.evidence and "draft-config-vs-tensors" not in report.rules
    assert "weights-missing" not in report.rules


def test_an_extra_tensor_when_every_parameter_is_filled_is_a_warning(box, tmp_path):
    """A tensor no parameter takes, while every parameter still gets one (an export's leftover):
    skipped silently by load_weights, but nothing is left at its initial value — a warning, not a
    root cause."""
    cfg = fixture_config(QWEN3)
    spec = {**specforge_spec(cfg), "midlayer.extra_thing.weight": ("BF16", (8, 8))}
    findings, _ = run(box, make_draft(tmp_path, cfg, spec))
    assert [(f.rule, f.severity) for f in findings] == [("weights-dropped", "warning")]
    assert findings[0].evidence["dropped"] == ["midlayer.extra_thing.weight"]


def test_a_shuffled_d2t_is_flagged_and_sorting_it_back_is_the_candidate(box, tmp_path):
    """A permutation of a valid d2t (the same target ids, other draft ids): every id valid, the set
    t2d marks, so token-map-invalid is silent; but the trainers write the ids ascending, so the
    order is a warning and the candidate fix puts them back, same ids."""
    from workbench.rules.weights import weight_fixes

    cfg = fixture_config(QWEN3)
    d2t, t2d = token_map(151936, 32000)
    ids = d2t + np.arange(len(d2t))
    shuffled_ids = np.random.default_rng(0).permutation(ids)
    shuffled = shuffled_ids - np.arange(len(d2t))
    root = make_draft(tmp_path, cfg, data={"d2t": shuffled, "t2d": t2d})
    findings, _ = run(box, root)
    assert [(f.rule, f.severity) for f in findings] == [("token-map-unordered", "warning")]
    assert findings[0].evidence["sorted"] is False and findings[0].evidence["problems"] == []
    from workbench.checkpoint import read_draft_facts
    from workbench.rules.facts import Facts

    facts = Facts.of(None, draft=read_draft_facts(box, str(root / "draft")), box=box)
    (fix,) = [f for f in weight_fixes(facts, findings, {}) if f.kind == "candidates"]
    (cand,) = fix.candidates
    got = np.array(cand["repair"].tensors["d2t"].values)
    np.testing.assert_array_equal(got, d2t)  # the trainers' map back, exactly
    # the sorted map itself is not a finding
    assert run(box, make_draft(tmp_path / "ok", cfg, data={"d2t": d2t, "t2d": t2d}))[0] == []
