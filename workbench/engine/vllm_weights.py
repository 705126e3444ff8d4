"""A draft checkpoint through vLLM's EAGLE-3 weight loading: the parameters vLLM builds
(:func:`vllm_expected_parameters`), one name followed (:func:`follow_vllm`), the whole checkpoint
(:func:`analyse_vllm_weights`, a :class:`~workbench.engine.load_weights.WeightAnalysis` like
SGLang's). The loading facts are :class:`~workbench.engine.vllm_load_weights.VllmLoadWeights`
(read from the box's vLLM, vLLM 0.32.0's as fallback). Shapes come from the safetensors headers;
nothing is loaded.

The consequences, vLLM 0.32.0 (measured on the CPU build, ``tests/integration/test_vllm_weights_truth.py``):
a name no parameter has → ``ValueError: There is no module or parameter named ...``, the engine
does not start; a name the mappers drop (``t2d``, ``mask_hidden``, an unexpected ``*.bias``,
``input_norm.*`` without ``norm_before_fc``) → skipped silently; a parameter no tensor fills →
starts and keeps the value it was created with (RMSNorm weights: ones; linear weights:
``torch.empty``, whatever the memory held), no word; no ``lm_head.weight`` → the proposer shares
the target's ``lm_head`` (``v1/spec_decode/llm_base_proposer.py`` ``_maybe_share_lm_head``:
``has_own_lm_head`` is False) and ``LogitsProcessor(draft_vocab_size)`` keeps its first
``draft_vocab_size`` rows: rows of other tokens for a reduced draft vocab; a tensor of another
shape → the weight loader fails (``AssertionError`` / ``RuntimeError``) at start-up.
"""

from __future__ import annotations

from typing import Any

from workbench.checkpoint import DraftFacts
from workbench.engine.load_weights import WeightAnalysis, tally_weights
from workbench.engine.vllm_load_weights import VLLM_LOAD_VERSION, VllmLoadWeights

__all__ = ["vllm_expected_parameters", "follow_vllm", "analyse_vllm_weights", "load_conditions", "INIT_VALUES"]

#: What a parameter no tensor fills holds after vLLM 0.32.0 loads the draft: RMSNorm weights are
#: created with ``torch.ones`` (``layers/layernorm.py``; measured: ``model.norm.weight`` all ones),
#: linear and embedding weights with ``torch.empty`` (``layers/linear.py`` ``create_weights``:
#: uninitialised memory), ``draft_id_to_target_id`` with ``torch.zeros`` (``llama_eagle3.py``).
INIT_VALUES = {"norm": "ones (RMSNorm's initial weight)", "linear": "uninitialised memory (torch.empty)",
               "d2t": "zeros (draft id i becomes target id i)"}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _shape(*dims: int | None) -> tuple[int, ...] | None:
    return None if any(d is None for d in dims) else tuple(dims)


def vllm_expected_parameters(draft: DraftFacts, target_vocab: int | None = None,
                             cls: str = "Eagle3LlamaForCausalLM") -> dict[str, dict[str, Any]]:
    """The parameters vLLM 0.32.0 builds for ``cls`` from this draft config, ``{param: {"shape",
    "shards" (stacked), "required", "why", "init"}}`` (shapes ``(out, in)``; ``None`` unknown).

    ``llama_eagle3.py``: ``model.fc`` ``ReplicatedLinear(target_hidden_size × num_aux → hidden,
    bias=False)`` when ``eagle_config.use_aux_hidden_state`` (default true); ``num_aux``:
    ``num_aux_hidden_states``, else ``len(eagle_config.eagle_aux_hidden_state_layer_ids)``, else 3;
    ``model.input_norm`` when ``norm_before_fc`` (``eagle_config`` first, then top level),
    ``model.fc_norm.{i}`` when ``fc_norm``; per layer ``qkv_proj`` over 2 × hidden for layer 0 (bias
    when ``attention_bias``), ``o_proj`` (bias when ``attention_bias`` or ``bias``: ``llama.py``
    ``LlamaDecoderLayer``), ``gate_up_proj``/``down_proj`` (bias when ``mlp_bias``), the norms and
    ``hidden_norm``; ``q_norm``/``k_norm`` (head_dim) for ``Eagle3Qwen3ForCausalLM``; ``model.norm``;
    ``lm_head`` ``ParallelLMHead(draft_vocab_size or vocab_size, hidden)``; ``model.embed_tokens``
    (not required: shared with the target's when the checkpoint has none); ``draft_id_to_target_id``
    (``draft_vocab_size``,) when the draft vocab differs from ``target_vocab`` (the token map's rules
    judge it; not required here). ``head_dim`` from the config, else hidden / heads."""
    cfg = draft.config
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    h = _int(cfg.get("hidden_size"))
    heads = _int(cfg.get("num_attention_heads"))
    kv_heads = _int(cfg.get("num_key_value_heads")) or heads
    head_dim = _int(cfg.get("head_dim")) or (h // heads if h and heads else None)
    inter = _int(cfg.get("intermediate_size"))
    th = _int(cfg.get("target_hidden_size")) or h
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    num_aux = _int(cfg.get("num_aux_hidden_states")) or (len(ids) if isinstance(ids, list) and ids else 3)
    vocab = _int(cfg.get("vocab_size"))
    dv = _int(cfg.get("draft_vocab_size")) or vocab
    n_layers = _int(cfg.get("num_hidden_layers")) or 1
    q = heads * head_dim if heads and head_dim else None
    kv = kv_heads * head_dim if kv_heads and head_dim else None
    src = f"vllm {VLLM_LOAD_VERSION} llama_eagle3.py"
    lin, norm = INIT_VALUES["linear"], INIT_VALUES["norm"]
    p: dict[str, dict[str, Any]] = {}
    use_aux = ec.get("use_aux_hidden_state", True)
    if use_aux:
        p["model.fc.weight"] = {"shape": _shape(h, th * num_aux if th else None), "required": True, "init": lin,
                                "why": f"{src} LlamaModel.fc = ReplicatedLinear(target_hidden_size × {num_aux} → hidden)"}
        if bool(ec.get("norm_before_fc", cfg.get("norm_before_fc", False))):
            p["model.input_norm.weight"] = {"shape": _shape(th * num_aux if th else None), "required": True,
                                            "init": norm, "why": f"{src} norm_before_fc → input_norm RMSNorm"}
        if cfg.get("fc_norm"):
            for i in range(num_aux):
                p[f"model.fc_norm.{i}.weight"] = {"shape": _shape(th), "required": True, "init": norm,
                                                  "why": f"{src} fc_norm → fc_norm[{i}] RMSNorm(target_hidden_size)"}
    attn_bias = bool(cfg.get("attention_bias"))
    o_bias = bool(cfg.get("attention_bias") or cfg.get("bias"))
    for i in range(n_layers):
        pre = f"model.layers.{i}"
        width = 2 * h if (h and i == 0) else h
        p[f"{pre}.self_attn.qkv_proj.weight"] = {
            "shape": _shape(q + 2 * kv if q and kv else None, width), "required": True, "init": lin,
            "shards": {"q": _shape(q, width), "k": _shape(kv, width), "v": _shape(kv, width)},
            "why": f"{src} LlamaDecoderLayer qkv_proj over {'2 × hidden' if i == 0 else 'hidden'}"}
        if attn_bias:
            p[f"{pre}.self_attn.qkv_proj.bias"] = {"shape": _shape(q + 2 * kv if q and kv else None), "required": True,
                                                   "init": lin, "shards": {"q": _shape(q), "k": _shape(kv), "v": _shape(kv)},
                                                   "why": f"{src} qkv_proj bias = attention_bias"}
        p[f"{pre}.self_attn.o_proj.weight"] = {"shape": _shape(h, q), "required": True, "init": lin,
                                               "why": "llama.py LlamaAttention.o_proj"}
        if o_bias:
            p[f"{pre}.self_attn.o_proj.bias"] = {"shape": _shape(h), "required": True, "init": lin,
                                                 "why": "llama.py o_proj bias = attention_bias or bias"}
        if cls == "Eagle3Qwen3ForCausalLM":
            for n in ("q_norm", "k_norm"):
                p[f"{pre}.self_attn.{n}.weight"] = {"shape": _shape(head_dim), "required": True, "init": norm,
                                                    "why": f"qwen3.py Qwen3Attention.{n} RMSNorm(head_dim)"}
        p[f"{pre}.mlp.gate_up_proj.weight"] = {
            "shape": _shape(2 * inter if inter else None, h), "shards": {0: _shape(inter, h), 1: _shape(inter, h)},
            "required": True, "init": lin, "why": "llama.py LlamaMLP.gate_up_proj"}
        p[f"{pre}.mlp.down_proj.weight"] = {"shape": _shape(h, inter), "required": True, "init": lin,
                                            "why": "llama.py LlamaMLP.down_proj"}
        if cfg.get("mlp_bias"):
            p[f"{pre}.mlp.gate_up_proj.bias"] = {"shape": _shape(2 * inter if inter else None), "required": True,
                                                 "init": lin, "shards": {0: _shape(inter), 1: _shape(inter)},
                                                 "why": "llama.py LlamaMLP bias = mlp_bias"}
            p[f"{pre}.mlp.down_proj.bias"] = {"shape": _shape(h), "required": True, "init": lin,
                                              "why": "llama.py LlamaMLP bias = mlp_bias"}
        for n in ("input_layernorm", "post_attention_layernorm", "hidden_norm"):
            p[f"{pre}.{n}.weight"] = {"shape": _shape(h), "required": True, "init": norm, "why": f"{src} {n} RMSNorm(hidden)"}
    p["model.norm.weight"] = {"shape": _shape(h), "required": True, "init": norm, "why": f"{src} LlamaModel.norm"}
    p["model.embed_tokens.weight"] = {"shape": _shape(vocab, h), "required": False, "init": lin,
                                      "why": "llm_base_proposer.py _maybe_share_embeddings shares the target's embedding "
                                             "when the checkpoint has none"}
    full = target_vocab is not None and dv == target_vocab
    p["lm_head.weight"] = {"shape": _shape(dv, h), "required": not full, "init": lin, "lm_head": True,
                           "why": f"{src} ParallelLMHead(draft_vocab_size={dv}, hidden)"
                                  + ("; a full-vocabulary draft without one shares the target's (_maybe_share_lm_head)"
                                     if full else "")}
    if target_vocab is not None and dv is not None and dv != target_vocab:
        p["draft_id_to_target_id"] = {"shape": (dv,), "required": False, "init": INIT_VALUES["d2t"], "token_map": True,
                                      "why": f"{src} draft_vocab_size {dv} ≠ the target's {target_vocab}: "
                                             "nn.Parameter(torch.zeros(draft_vocab_size)) (the token map's rules judge it)"}
    return p


def load_conditions(draft: DraftFacts) -> dict[str, bool]:
    """The values the conditions of ``load_weights``' mapper removals test (:attr:`VllmLoadWeights.removals`),
    from the checkpoint's names and the draft config (vLLM 0.32.0 names)."""
    names = list(draft.tensors or {})
    cfg = draft.config
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    return {"includes_draft_id_mapping": any("d2t" in n for n in names if "t2d" not in n),
            "includes_embed_tokens": any("embed_tokens" in n for n in names),
            "self.model.use_aux_hidden_state": bool(ec.get("use_aux_hidden_state", True)),
            "self.model.norm_before_fc": bool(ec.get("norm_before_fc", cfg.get("norm_before_fc", False))),
            "self.use_parallel_drafting": False}


def _holds(cond: str, ctx: dict[str, bool]) -> bool | None:
    """A removal's condition evaluated (``"always"``, ``X`` or ``not X`` for a name of ``ctx``);
    ``None`` when it tests something else (then the removal is not applied)."""
    if cond == "always":
        return True
    neg = cond.startswith("not ")
    key = cond[4:].strip() if neg else cond.strip()
    if key not in ctx:
        return None
    return (not ctx[key]) if neg else ctx[key]


def follow_vllm(name: str, lw: VllmLoadWeights, spec: dict, ctx: dict[str, bool]) -> tuple[str, str | None, Any]:
    """``(how, param, shard)`` of checkpoint ``name`` through ``lw`` step by step (the loop's rewrites,
    the top mapper's removals, the rotary removals, the ``model`` child's ``hf_to_vllm_mapper``: substr
    then stacked, as ``WeightsMapper._map_name_with_shard`` applies them). ``how``: ``loaded``, ``d2t``
    (into ``draft_id_to_target_id``), ``skipped`` (on purpose: ``t2d``), ``dropped-warned`` (skipped
    with a warning: ``mask_hidden``), ``dropped`` (removed by a mapper or an ignored ``*.bias``:
    silently), ``raises`` (no module or parameter: ``ValueError``, the engine does not start)."""
    n = name
    for chain in lw.chains:
        for sub, neg, act in chain:
            if (sub in n) == neg:
                continue
            if act[0] == "skip":
                return "skipped", None, None
            if act[0] == "skip-warned":
                return "dropped-warned", None, None
            if act[0] == "rename":
                n = n.replace(act[1], act[2])
            elif act[0] == "prefix":
                n = act[1] + n
            break
    for sub, cond in lw.removals.items():
        if sub in n and _holds(cond, ctx):
            return "dropped", None, None
    if any(s in n for s in lw.ignore_substr):
        return "dropped", None, None
    if n == "draft_id_to_target_id" and n in spec:
        return "d2t", n, None
    head, _, rest = n.partition(".")
    shard = None
    if head == "model" and rest:
        for sub, new in lw.inner_substr.items():
            if sub in rest:
                rest = rest.replace(sub, new, 1)
        for sub, (new, sid) in lw.inner_stacked.items():
            if sub in rest:
                rest, shard = rest.replace(sub, new, 1), sid
        n = "model." + rest
    if n in spec:
        return "loaded", n, shard
    if any(n.endswith(s) for s in lw.ignore_suffixes):
        return "dropped", None, None
    return ("raises" if lw.unknown_raises else "dropped"), None, None


def analyse_vllm_weights(draft: DraftFacts, lw: VllmLoadWeights, target_vocab: int | None = None) -> WeightAnalysis:
    """Every tensor of ``draft.tensors`` (a readable checkpoint) through vLLM's loading ``lw`` against
    :func:`vllm_expected_parameters`: the same :class:`~workbench.engine.load_weights.WeightAnalysis`
    SGLang's analysis gives (``raises``: the names vLLM raises ``ValueError`` on; ``dropped``: those
    it drops silently, ``warned`` among them with a warning; ``source``: ``lw``). Shape problems of
    ``draft_id_to_target_id`` are left to the token map's rules."""
    spec = vllm_expected_parameters(draft, target_vocab, lw.cls)
    ctx = load_conditions(draft)
    t = tally_weights(draft.tensors, lambda name: follow_vllm(name, lw, spec, ctx), spec)
    loaded, dropped, missing, shape_problems = t.loaded, t.dropped, t.missing, t.shape_problems
    d2t_name, t2d_name, warned, raises = t.d2t_name, t.t2d_name, t.warned, t.raises
    if d2t_name is None:
        d2t_name = next((n for n in sorted(draft.tensors or {}) if "d2t" in n and "t2d" not in n
                         and n not in raises and n not in dropped), None)
    where = lw.sources.get("load_weights", "")
    engine = (f"vllm: read from {where}" if lw.origin != "shipped" else
              f"modelled: vllm {VLLM_LOAD_VERSION} {lw.cls}.load_weights (the box's vLLM source not read)")
    return WeightAnalysis(spec, loaded, dropped, missing, shape_problems, d2t_name, t2d_name, warned, raises,
                          lw.cls, engine, False, {**lw.to_dict(), "conditions": ctx}, lw)
