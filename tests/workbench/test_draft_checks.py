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
import json
import os
import pathlib
import textwrap
import types
import typing

import numpy as np
import pytest

from workbench.checkpoint import read_draft_facts, read_target_facts
from workbench.rules.weights import (
    LEGACY_NAME_MAP,
    check_draft_weights,
    check_token_map,
    expected_parameters,
    map_checkpoint_name,
)
from workbench_test_helpers import fixture_config, write_sparse_safetensors

KIMI = "sgl-project__SpecForge__configs_kimi-k2-eagle3.json"
DEEPSEEK = "sgl-project__SpecForge__configs_deepseek-v3-671b-eagle3.json"
QWEN3 = "sgl-project__SpecForge__configs_qwen3-30B-eagle3.json"
GPT_OSS = "sgl-project__SpecForge__configs_gpt-oss-20B-eagle3.json"
SPECFORGE_CONFIGS = [KIMI, DEEPSEEK, QWEN3, GPT_OSS]

LLAMA_EAGLE3 = pathlib.Path("/tmp/sglang_src/sglang/srt/models/llama_eagle3.py")


# ---------------------------------------------------------------------------------------------
# Building drafts
# ---------------------------------------------------------------------------------------------


def hot_ids(vocab: int, dv: int, seed: int = 0) -> np.ndarray:
    """A draft vocab: ``dv`` distinct target ids in ascending order (SpecForge sorts them)."""
    return np.sort(np.random.default_rng(seed).choice(vocab, size=dv, replace=False)).astype(np.int64)


def token_map(vocab: int, dv: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """SpecForge's export: ``d2t = hot - arange`` (I64 offsets), ``t2d[hot] = True`` (BOOL [vocab])."""
    hot = hot_ids(vocab, dv, seed)
    t2d = np.zeros(vocab, dtype=np.bool_)
    t2d[hot] = True
    return hot - np.arange(dv, dtype=np.int64), t2d


def specforge_spec(cfg: dict) -> dict:
    """``{name: (dtype, shape)}`` of a SpecForge EAGLE-3 export for draft config ``cfg``."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    inter = cfg["intermediate_size"]
    th = cfg.get("target_hidden_size") or h
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    n_aux = len(ids) if ids else 3  # the engine's default when no ids are given (qwen3-30B config)
    spec = {
        "fc.weight": ("BF16", (h, th * n_aux)),
        "midlayer.self_attn.q_proj.weight": ("BF16", (heads * hd, 2 * h)),
        "midlayer.self_attn.k_proj.weight": ("BF16", (kv * hd, 2 * h)),
        "midlayer.self_attn.v_proj.weight": ("BF16", (kv * hd, 2 * h)),
        "midlayer.self_attn.o_proj.weight": ("BF16", (h, heads * hd)),
        "midlayer.mlp.gate_proj.weight": ("BF16", (inter, h)),
        "midlayer.mlp.up_proj.weight": ("BF16", (inter, h)),
        "midlayer.mlp.down_proj.weight": ("BF16", (h, inter)),
        "midlayer.input_layernorm.weight": ("BF16", (h,)),
        "midlayer.post_attention_layernorm.weight": ("BF16", (h,)),
        "midlayer.hidden_norm.weight": ("BF16", (h,)),
        "norm.weight": ("BF16", (h,)),
    }
    if not cfg.get("tie_word_embeddings"):
        spec["lm_head.weight"] = ("BF16", (cfg.get("draft_vocab_size") or cfg["vocab_size"], h))
    if cfg.get("draft_vocab_size"):
        spec["d2t"] = ("I64", (cfg["draft_vocab_size"],))
        spec["t2d"] = ("BOOL", (cfg["vocab_size"],))
    return spec


def make_draft(root: pathlib.Path, cfg: dict, spec: dict | None = None, data: dict | None = None,
               *, drop: tuple = (), rename: dict | None = None, shapes: dict | None = None) -> pathlib.Path:
    """Write ``root/draft/{config.json, model.safetensors}`` and ``root/target/config.json``.

    ``spec`` defaults to :func:`specforge_spec`; ``drop`` removes tensors, ``rename`` renames
    them, ``shapes`` overrides shapes. ``data`` defaults to a valid d2t/t2d when the spec has them.
    """
    spec = dict(specforge_spec(cfg) if spec is None else spec)
    for name in drop:
        del spec[name]
    for old, new in (rename or {}).items():
        spec[new] = spec.pop(old)
    for name, shape in (shapes or {}).items():
        spec[name] = (spec[name][0], shape)
    if data is None:
        data = {}
        if "d2t" in spec and "t2d" in spec:
            data["d2t"], data["t2d"] = token_map(spec["t2d"][1][0], spec["d2t"][1][0])
    draft = root / "draft"
    draft.mkdir(parents=True, exist_ok=True)
    (draft / "config.json").write_text(json.dumps(cfg))
    write_sparse_safetensors(draft / "model.safetensors", spec, data={k: v for k, v in data.items() if k in spec})
    target = root / "target"
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": cfg.get("target_hidden_size") or cfg["hidden_size"],
        "vocab_size": cfg["vocab_size"], "num_hidden_layers": 61}))
    return root


def run(box, root: pathlib.Path):
    draft = read_draft_facts(box, str(root / "draft"))
    target = read_target_facts(box, str(root / "target"))
    return check_draft_weights(box, draft, target)


def rules(findings) -> list[str]:
    return sorted(f.rule for f in findings)


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


def test_eagle1_width_fc_is_aux_count_mismatch(box, tmp_path):
    cfg = fixture_config(QWEN3)
    findings, _ = run(box, make_draft(tmp_path, cfg, shapes={"fc.weight": (2048, 4096)}))
    assert rules(findings) == ["aux-count-mismatch"]
    assert findings[0].evidence["expected"] == [2048, 3 * 2048]


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


def test_unreadable_checkpoint(box, tmp_path):
    root = make_draft(tmp_path, fixture_config(QWEN3))
    (root / "draft" / "model.safetensors").write_bytes(b"\x01\x00")
    findings, _ = run(box, root)
    assert rules(findings) == ["checkpoint-unreadable"]


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


def _real_load_weights():
    """The real ``LlamaForCausalLMEagle3.load_weights`` compiled from the SGLang 0.5.23 source,
    with ``torch.arange`` and ``default_weight_loader`` replaced by recorders."""
    tree = ast.parse(LLAMA_EAGLE3.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LlamaForCausalLMEagle3")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "load_weights")
    src = textwrap.dedent(ast.get_source_segment(LLAMA_EAGLE3.read_text(), fn))
    calls: list = []
    ns = {"Iterable": typing.Iterable, "Tuple": typing.Tuple,
          "torch": types.SimpleNamespace(arange=lambda n: np.arange(n)),
          "default_weight_loader": lambda param, w, *shard: calls.append((param.name, shard[0] if shard else None))}
    exec(compile(src, str(LLAMA_EAGLE3), "exec"), ns)
    return ns["load_weights"], calls


@pytest.mark.skipif(not LLAMA_EAGLE3.exists(), reason=f"SGLang 0.5.23 source not unpacked at {LLAMA_EAGLE3}")
def test_map_matches_real_load_weights():
    """Feed every case to the real ``load_weights`` body and compare where each tensor lands."""
    load_weights, calls = _real_load_weights()
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
