"""The name repair on KINDS of naming, on a 4-layer EAGLE-3 draft described by its safetensors header only
(no data, no server, no engine source: SGLang 0.5.23's modelled ``load_weights`` and vLLM 0.32.0's shipped
loading — the box-source versions are tests/workbench/test_weights_repair.py). Each transform is applied to
EVERY name, as the tools that write such checkpoints do; the repair must learn it and map every name,
the re-analysis of the renamed checkpoint must be clean, and a transform whose tensors are also
transposed (a TF-style ``kernel``) must be rejected by the shape check with the reason."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.checkpoint.facts import draft_facts_from
from workbench.checkpoint.readers import TensorInfo
from workbench.engine.load_weights import analyse_weights
from workbench.engine.vllm_load_weights import shipped_load_weights
from workbench.engine.vllm_weights import analyse_vllm_weights
from workbench.rules.weights import name_repair

L, H, INTER = 4, 64, 128
CFG = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": H, "intermediate_size": INTER, "num_hidden_layers": L,
       "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256, "draft_vocab_size": 128,
       "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}


def _healthy() -> dict[str, tuple]:
    names = {"fc.weight": (H, 3 * H), "norm.weight": (H,), "lm_head.weight": (128, H)}
    for i in range(L):
        pre, width = ("midlayer" if i == 0 else f"layers.{i}"), (2 * H if i == 0 else H)
        for p in ("q", "k", "v"):
            names[f"{pre}.self_attn.{p}_proj.weight"] = (64, width)
        names[f"{pre}.self_attn.o_proj.weight"] = (H, 64)
        names[f"{pre}.mlp.gate_proj.weight"] = names[f"{pre}.mlp.up_proj.weight"] = (INTER, H)
        names[f"{pre}.mlp.down_proj.weight"] = (H, INTER)
        for n in ("input_layernorm", "post_attention_layernorm", "hidden_norm"):
            names[f"{pre}.{n}.weight"] = (H,)
    return names


META = (("self_attn.q_proj", "attention.wq"), ("self_attn.k_proj", "attention.wk"), ("self_attn.v_proj", "attention.wv"),
        ("self_attn.o_proj", "attention.wo"), ("mlp.gate_proj", "feed_forward.w1"), ("mlp.down_proj", "feed_forward.w2"),
        ("mlp.up_proj", "feed_forward.w3"), ("post_attention_layernorm", "ffn_norm"),
        ("input_layernorm", "attention_norm"), ("lm_head.", "output."))


def _meta(n: str) -> str:
    for a, b in META:
        n = n.replace(a, b)
    return n


TRANSFORMS = {
    "module-wrapper": lambda n: "module." + n,
    "nested-wrapper": lambda n: "draft_model.model." + n,
    "slash-separator": lambda n: n.replace(".", "/"),
    "short-suffix": lambda n: n[: -len("weight")] + "w" if n.endswith(".weight") else n,
    "attn-module": lambda n: n.replace(".self_attn.", ".attn."),
    "meta-naming": _meta,
    "wrapper-and-meta-naming": lambda n: "module." + _meta(n),
    "layers-as-blocks": lambda n: n.replace("layers.", "blocks."),
}


def _draft(names: dict[str, tuple]):
    tensors = {n: TensorInfo("F32", shape, (0, 0)) for n, shape in names.items()}
    return draft_facts_from("/d", "/d/config.json", CFG, tensors)


def _analyse(engine: str, draft):
    return analyse_weights(draft) if engine == "sglang" else analyse_vllm_weights(draft, shipped_load_weights(), 256)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("kind", sorted(TRANSFORMS))
def test_every_name_of_a_transformed_checkpoint_is_mapped(kind, engine):
    names = {TRANSFORMS[kind](n): shape for n, shape in _healthy().items()}
    draft = _draft(names)
    w = _analyse(engine, draft)
    assert w.dropped or w.raises, "the transform must break loading for the test to mean anything"
    rep = name_repair(draft, w)
    assert rep.unmapped == {} and rep.unfilled == [], (rep.unmapped, rep.unfilled, [s.describe() for s in rep.steps])
    assert sorted(rep.renames) == sorted(set(w.dropped) | set(w.raises))
    renamed = dataclasses.replace(draft, tensors={rep.renames.get(n, n): i for n, i in draft.tensors.items()})
    after = _analyse(engine, renamed)
    assert (after.dropped, after.raises, after.missing, after.shape_problems) == ([], [], [], [])


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_transposed_kernels_are_rejected_by_the_shape_check(engine):
    """TF/Flax-style ``kernel`` names with (in, out) matrices: the name maps (kernel → weight, learned),
    the shape does not — every non-square transposed projection is rejected and says so; the norms'
    ``kernel`` (1-D) map, and so do square matrices (a transpose the shape cannot show: a limit of a
    shape check, said here so nobody reads more into it)."""
    names = {}
    for n, shape in _healthy().items():
        new = n[: -len("weight")] + "kernel" if n.endswith(".weight") else n
        names[new] = tuple(reversed(shape)) if len(shape) == 2 else shape
    draft = _draft(names)
    w = _analyse(engine, draft)
    rep = name_repair(draft, w)
    matrices = [n for n, s in names.items() if len(s) == 2 and s[0] != s[1]]
    assert sorted(rep.unmapped) == sorted(matrices)
    assert all("is not the parameter's" in rep.unmapped[n] for n in matrices)
    assert sorted(rep.renames) == sorted(n for n, s in names.items() if len(s) == 1 or s[0] == s[1])
    assert rep.unfilled  # the projections still have no tensor: the fix asks for what it cannot derive
