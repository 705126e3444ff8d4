"""What the engine's ``load_weights`` does with a draft checkpoint, modelled from SGLang 0.5.23
``srt/models/llama_eagle3.py`` (``LlamaModel`` and ``LlamaForCausalLMEagle3``; read from the
published ``sglang==0.5.23`` wheel):

* ``load_weights`` first renames legacy substrings of every checkpoint name
  (``legacy_name_map``: ``midlayer`` → ``layers.0``, ``aux_norm_low|mid|high`` →
  ``fc_norm.0|1|2``); a name containing ``d2t`` then becomes
  ``hot_token_id = d2t + arange(len(d2t))`` (target id = draft id + d2t[draft id]: offsets); a
  name containing ``t2d`` is skipped; the first matching ``stacked_params_mapping`` entry
  (``.q_proj|.k_proj|.v_proj`` → ``.qkv_proj`` shard q/k/v, ``.gate_proj|.up_proj`` →
  ``.gate_up_proj`` shard 0/1) rewrites the name; the name is tried as-is, then with a
  ``model.`` prefix; **a name that matches no parameter is skipped with no warning**.
* A matched tensor of the wrong shape is not skipped: ``default_weight_loader``
  (``srt/model_loader/weight_utils.py``) and the parallel layers' loaders ``assert`` on it, so
  the server fails to start.
* Under EAGLE3, ``eagle_worker_v2.py`` ``init_lm_head`` replaces the draft's ``embed_tokens`` by
  the target's (``set_embed``; ``set_embed_and_head`` when ``load_lm_head_from_target``) and
  takes ``hot_token_id`` from the draft whenever a ``d2t`` was loaded.

:func:`expected_parameters` lists the draft class's parameters for a config,
:func:`map_checkpoint_name` follows one checkpoint name, :func:`analyse_weights` the whole
checkpoint (shapes from the safetensors headers; nothing is loaded). The rules that report on
the result are :mod:`workbench.rules.weights`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from workbench.checkpoint import DraftFacts
from workbench.engine.modelled import LEGACY_NAME_MAP, MODELLED_ENGINE, STACKED

__all__ = ["expected_parameters", "map_checkpoint_name", "analyse_weights", "WeightAnalysis", "LEGACY_NAME_MAP",
           "source_spec", "analyse_with_source",
           "STACKED", "MODELLED_ENGINE", "tensor_dims", "config_vs_tensors", "tally_weights", "WeightTally"]


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _shape(*dims: int | None) -> tuple[int, ...] | None:
    return None if any(d is None for d in dims) else tuple(dims)


def expected_parameters(draft: DraftFacts) -> dict[str, dict[str, Any]]:
    """The parameters of SGLang 0.5.23 ``LlamaForCausalLMEagle3`` for this draft config.

    Returns ``{param: {"shape": full parameter shape or None (unknown), "shards": {shard_id:
    shape} for stacked params (else absent), "required": bool, "why": str}}``. Shapes are
    ``(out, in)`` for Linear weights. From ``llama_eagle3.py`` (and ``llama.py`` for the layer):

    * ``model.fc``: ``Linear(hidden_size_in × num_aux → hidden)``; ``hidden_size_in`` is
      ``target_hidden_size`` when the config has it, else ``hidden_size``; ``num_aux`` is
      ``num_aux_hidden_states``, else ``len(eagle_config.eagle_aux_hidden_state_layer_ids)``,
      else 3; ``bias=config.bias`` (then ``model.fc.bias``).
    * ``model.input_norm`` (``RMSNorm(hidden_size_in × num_aux)``) when
      ``eagle_config.norm_before_fc`` (else top-level ``norm_before_fc``) is true;
      ``model.fc_norm.{i}`` (``RMSNorm(hidden_size_in)`` × num_aux) when ``fc_norm`` or legacy
      ``use_aux_norm`` is truthy.
    * ``model.layers.{i}`` for ``i < num_hidden_layers``: ``qkv_proj`` over ``2 × hidden`` for
      layer 0 (``cat[input_layernorm(embeds), hidden_norm(h)]``), ``hidden`` after, no bias;
      ``o_proj`` ``(hidden, heads × head_dim)`` with a bias when ``attention_bias`` or ``bias``
      (``llama.py`` ``LlamaDecoderLayer``); ``head_dim`` from the config, else hidden/heads;
      ``gate_up_proj`` ``(2 × inter, hidden)`` and ``down_proj`` ``(hidden, inter)``, no bias
      (``intermediate_size_mlp`` for ``llama4_text``); ``input_layernorm``,
      ``post_attention_layernorm``, ``hidden_norm`` ``(hidden,)``.
    * ``model.norm`` ``(hidden,)``.
    * ``lm_head.weight``: none when ``tie_word_embeddings`` (it *is* ``embed_tokens``);
      ``(draft_vocab_size, hidden)``; ``draft_vocab_size`` None → ``(vocab_size, hidden)`` and
      ``load_lm_head_from_target`` (the target's head replaces it: not required).
    * ``model.embed_tokens.weight`` ``(vocab_size, hidden)``: replaced by the target's
      (``set_embed``), so optional, except that ``LlamaForCausalLM.set_embed`` (``llama.py``)
      returns early when the config has a ``target_hidden_size`` ≠ ``hidden_size``: then the
      draft's own embedding is used and must come from the checkpoint.
    """
    cfg = draft.config
    h = _int(draft.hidden_size)
    heads = _int(cfg.get("num_attention_heads"))
    kv_heads = _int(cfg.get("num_key_value_heads")) or heads
    head_dim = _int(cfg.get("head_dim")) or (h // heads if h and heads else None)
    inter_key = "intermediate_size_mlp" if cfg.get("model_type") == "llama4_text" else "intermediate_size"
    inter = _int(cfg.get(inter_key))
    th = _int(draft.effective_target_hidden_size)
    ids = (draft.eagle_config or {}).get("eagle_aux_hidden_state_layer_ids")
    num_aux = draft.num_aux_hidden_states
    if num_aux is None:
        num_aux = len(ids) if isinstance(ids, list) and ids else 3
    ec = draft.eagle_config or {}
    n_layers = _int(draft.num_hidden_layers) or 1
    tied = bool(cfg.get("tie_word_embeddings"))
    dv = draft.draft_vocab_size
    vocab = _int(draft.vocab_size)
    lm_from_target = not tied and dv is None
    q = heads * head_dim if heads and head_dim else None
    kv = kv_heads * head_dim if kv_heads and head_dim else None
    src = "llama_eagle3.py"

    p: dict[str, dict[str, Any]] = {
        "model.fc.weight": {"shape": _shape(h, th * num_aux if th else None), "required": True,
                            "why": f"{src} LlamaModel.fc = Linear(hidden_size_in × num_aux={num_aux} → hidden)"},
    }
    if cfg.get("bias"):
        p["model.fc.bias"] = {"shape": _shape(h), "required": True, "why": f"{src} fc bias=config.bias"}
    if ec.get("norm_before_fc", cfg.get("norm_before_fc", False)):
        p["model.input_norm.weight"] = {"shape": _shape(th * num_aux if th else None), "required": True,
                                        "why": f"{src} norm_before_fc → input_norm RMSNorm"}
    if cfg.get("fc_norm") or cfg.get("use_aux_norm"):
        for i in range(num_aux):
            p[f"model.fc_norm.{i}.weight"] = {"shape": _shape(th), "required": True,
                                              "why": f"{src} fc_norm/use_aux_norm → fc_norm[{i}] RMSNorm"}
    o_bias = bool(cfg.get("attention_bias") or cfg.get("bias"))
    for i in range(n_layers):
        pre = f"model.layers.{i}"
        width = 2 * h if (h and i == 0) else h
        p[f"{pre}.self_attn.qkv_proj.weight"] = {
            "shape": _shape(q + 2 * kv if q and kv else None, width),
            "shards": {"q": _shape(q, width), "k": _shape(kv, width), "v": _shape(kv, width)}, "required": True,
            "why": f"{src} LlamaDecoderLayer qkv_proj over {'2 × hidden' if i == 0 else 'hidden'}"}
        p[f"{pre}.self_attn.o_proj.weight"] = {"shape": _shape(h, q), "required": True,
                                               "why": "llama.py LlamaAttention.o_proj"}
        if o_bias:
            p[f"{pre}.self_attn.o_proj.bias"] = {"shape": _shape(h), "required": True,
                                                 "why": "llama.py o_proj bias = attention_bias or bias"}
        p[f"{pre}.mlp.gate_up_proj.weight"] = {
            "shape": _shape(2 * inter if inter else None, h), "shards": {0: _shape(inter, h), 1: _shape(inter, h)},
            "required": True, "why": "llama.py LlamaMLP.gate_up_proj"}
        p[f"{pre}.mlp.down_proj.weight"] = {"shape": _shape(h, inter), "required": True,
                                            "why": "llama.py LlamaMLP.down_proj"}
        for norm in ("input_layernorm", "post_attention_layernorm", "hidden_norm"):
            p[f"{pre}.{norm}.weight"] = {"shape": _shape(h), "required": True, "why": f"{src} {norm} RMSNorm(hidden)"}
    p["model.norm.weight"] = {"shape": _shape(h), "required": True, "why": f"{src} LlamaModel.norm"}
    th_raw = cfg.get("target_hidden_size")
    own_embed = not lm_from_target and "target_hidden_size" in cfg and th_raw != cfg.get("hidden_size")
    p["model.embed_tokens.weight"] = {
        "shape": _shape(vocab, h), "required": own_embed,
        "why": ("llama.py set_embed keeps the draft's own embedding when target_hidden_size ≠ hidden_size"
                if own_embed else "eagle_worker_v2.py init_lm_head shares the target's embedding")}
    if not tied:
        rows = vocab if lm_from_target else dv
        p["lm_head.weight"] = {
            "shape": _shape(rows, h), "required": not lm_from_target,
            "why": (f"{src} draft_vocab_size is None → load_lm_head_from_target" if lm_from_target
                    else f"{src} ParallelLMHead(draft_vocab_size, hidden)")}
    return p


def _map(name: str, params: set[str] | dict) -> tuple[str | None, str, Any]:
    """``(param or None, how, shard_id or None)`` following ``load_weights`` step by step."""
    for legacy, new in LEGACY_NAME_MAP.items():
        if legacy in name:
            name = name.replace(legacy, new)
    if "d2t" in name:
        return None, "d2t", None
    if "t2d" in name:
        return None, "t2d", None
    for param_name, weight_name, shard_id in STACKED:
        if weight_name not in name:
            continue
        name = name.replace(weight_name, param_name)
        target = f"model.{name}" if name not in params else name
        return (target, "loaded", shard_id) if target in params else (None, "dropped", None)
    target = name if name in params else f"model.{name}"
    return (target, "loaded", None) if target in params else (None, "dropped", None)


def map_checkpoint_name(name: str, params: set[str] | dict) -> tuple[str | None, str]:
    """Where SGLang 0.5.23 ``LlamaForCausalLMEagle3.load_weights`` puts checkpoint tensor ``name``
    given the model's parameter names ``params``: ``(param or None, how)``.

    ``how`` is ``"d2t"`` (becomes ``hot_token_id``), ``"t2d"`` (skipped on purpose),
    ``"loaded"`` or ``"dropped"`` (no parameter matched after the renames: skipped silently).
    Legacy substrings are renamed first, then ``d2t``/``t2d`` are tested (so a legacy-renamed name
    is what is tested), then stacked shards, then the name as-is, then ``model.`` + name.
    """
    param, how, _ = _map(name, params)
    return param, how


def _rule_for_shape(param: str, shard: Any, got: tuple, want: tuple) -> str:
    if param == "lm_head.weight":
        return "lm-head-shape-mismatch"
    if param == "model.fc.weight" and len(got) == 2 and got[0] == want[0]:
        return "aux-count-mismatch"
    if "qkv_proj" in param and len(got) == 2 and got[1] == want[1]:
        return "head-dim-mismatch"
    if "o_proj.weight" in param and len(got) == 2 and got[0] == want[0]:
        return "head-dim-mismatch"
    return "weight-shape-mismatch"


@dataclass(frozen=True)
class WeightAnalysis:
    """A draft checkpoint's tensors through ``load_weights``: ``spec`` (the draft class's parameters,
    :func:`expected_parameters`; for a class only read from the source, its top-level modules),
    ``loaded`` (param → tensor names), ``dropped`` (names matched to no parameter and skipped:
    silently, or with a warning for those also in ``warned``), ``missing`` (required parameters no
    tensor fills, a stacked one with the shards it lacks), ``shape_problems`` (``{tensor, shape,
    expected, param, shard, file, rule}``: the rule id the mismatch belongs to), ``d2t_name`` /
    ``t2d_name`` (``None`` when absent), ``raises`` (names ``load_weights`` raises ``KeyError``
    on: the server does not start), ``cls`` (the draft class), ``engine`` (where the facts come
    from: ``read from <file>:<line>`` or ``modelled: ...``), ``module_level`` (only the class's
    top-level modules are known: inner names and shapes are not checked), ``load_facts`` (the
    :meth:`~workbench.engine.drafts.LoadWeights.to_dict` read, ``None`` when modelled), ``source``
    (the :class:`~workbench.engine.drafts.LoadWeights` itself, for following other names)."""

    spec: dict
    loaded: dict
    dropped: list
    missing: list
    shape_problems: list
    d2t_name: str | None
    t2d_name: str | None
    warned: list = field(default_factory=list)
    raises: list = field(default_factory=list)
    cls: str = "LlamaForCausalLMEagle3"
    engine: str = MODELLED_ENGINE
    module_level: bool = False
    load_facts: dict | None = None
    source: Any = field(default=None, repr=False, compare=False)


def analyse_weights(draft: DraftFacts) -> WeightAnalysis:
    """Follow every tensor of ``draft.tensors`` (a readable checkpoint) through SGLang 0.5.23's
    ``LlamaForCausalLMEagle3.load_weights`` against the parameters of this config."""
    spec = expected_parameters(draft)
    loaded: dict[str, list[str]] = {}
    shards_seen: dict[str, set] = {}
    dropped: list[str] = []
    shape_problems: list[dict] = []
    d2t_name = t2d_name = None
    for name, info in sorted(draft.tensors.items()):
        param, how, shard = _map(name, spec)
        if how == "d2t":
            d2t_name = name
            continue
        if how == "t2d":
            t2d_name = name
            continue
        if param is None:
            dropped.append(name)
            continue
        loaded.setdefault(param, []).append(name)
        stacked = spec[param].get("shards")
        if stacked is not None:
            shards_seen.setdefault(param, set()).update(stacked if shard is None else {shard})
        want = spec[param]["shape"] if shard is None else stacked[shard]
        if want is not None and tuple(info.shape) != want:
            shape_problems.append({"tensor": name, "shape": list(info.shape), "expected": list(want),
                                   "param": param, "shard": shard, "file": info.file,
                                   "rule": _rule_for_shape(param, shard, tuple(info.shape), want)})
    missing: list[str] = []
    for p, s in spec.items():
        if not s["required"]:
            continue
        if p not in loaded:
            missing.append(p)
        elif s.get("shards") is not None and shards_seen.get(p, set()) != set(s["shards"]):
            lacking = [str(k) for k in s["shards"] if k not in shards_seen.get(p, set())]
            missing.append(f"{p} (shard {', '.join(lacking)})")
    return WeightAnalysis(spec, loaded, dropped, missing, shape_problems, d2t_name, t2d_name)


def _lm_head_spec(draft: DraftFacts, lw: Any, kind: str, worker: str | None) -> dict[str, Any] | None:
    """``lm_head``'s entry for a class read from the source: ``None`` when the head is not the
    draft's own (tied to ``embed_tokens``, or the worker shares the target's)."""
    cfg, head = draft.config, lw.lm_head
    if kind != "eagle3":
        return None  # EAGLE-1/2 and MTP drafts: the worker's non-EAGLE3 branch set_embed_and_head(target's)
    if bool(cfg.get("tie_word_embeddings")) and head.tied_where:
        return None
    if head.own_where is None:
        return None
    dv = cfg.get("draft_vocab_size")
    rows = f"ParallelLMHead({head.rows}, hidden) at {head.own_where}"
    when = head.from_target_when or ""
    if head.from_target_where and worker:
        if "draft_vocab_size is None" in when:
            if dv is None:
                return {"shape": None, "required": False,
                        "why": f"{lw.cls}: draft_vocab_size is missing, so {head.from_target_where} sets "
                               f"load_lm_head_from_target and the worker ({worker}) gives it the target's head"}
            reason = (f"load_lm_head_from_target is set only when draft_vocab_size is missing ({head.from_target_where}); "
                      f"this config has draft_vocab_size={dv}, so the worker ({worker}) keeps the draft's own head")
        else:
            return {"shape": None, "required": False,
                    "why": f"{lw.cls} sets load_lm_head_from_target when {when} ({head.from_target_where}); whether it "
                           "applies to this config is not read: not required"}
    elif head.from_target_where:
        reason = (f"{lw.cls} sets load_lm_head_from_target ({head.from_target_where}) but no draft worker of this "
                  "release reads it, so the draft's own head is used")
    else:
        reason = f"{lw.cls} has no load_lm_head_from_target in this release: the draft's own head is always used"
    return {"shape": None, "required": True, "lm_head": True,
            "why": f"{lw.cls} builds its own lm_head ({rows}); {reason}: with no checkpoint tensor it stays at "
                   "its initial values and every draft token is noise (accept length about 1.00)"}


def source_spec(draft: DraftFacts, lw: Any, kind: str, worker: str | None) -> tuple[dict, Any, bool]:
    """The parameters of the draft class ``lw`` (:class:`~workbench.engine.drafts.LoadWeights`,
    read from the box's source) for this config: ``(spec, params, module_level)``.

    ``LlamaForCausalLMEagle3``: :func:`expected_parameters` (shapes modelled from 0.5.23) with the
    release's own layout: ``model.midlayer.*`` where the source builds ``self.midlayer``
    (SGLang before 0.5.12), no ``fc_norm`` / ``input_norm`` where the source has none, and the
    source's ``lm_head`` handling. Any other class: its top-level modules (:attr:`LoadWeights.modules`)
    without shapes; required are the unconditional ones the checkpoint must fill: not
    ``embed_tokens`` when the class has a ``set_embed`` (the worker shares the target's
    embedding), not ``lm_head`` when tied, shared by the worker or taken from the target
    (:func:`_lm_head_spec`); a module built under an ``if`` of ``__init__`` is not required (whether the
    config builds it is not evaluated)."""
    mods = lw.modules or []
    paths = {m.path for m in mods}
    if lw.cls == "LlamaForCausalLMEagle3" and mods:
        spec = expected_parameters(draft)
        if lw.layer_module == "midlayer":
            spec = {k.replace("model.layers.0.", "model.midlayer.", 1): v for k, v in spec.items()
                    if not (k.startswith("model.layers.") and not k.startswith("model.layers.0."))}
        fc = next((m for m in mods if m.path == "model.fc"), None)
        fixed = re.search(r"\*\s*(\d+)\s*$", fc.arg0 or "") if fc is not None else None
        th = _int(draft.effective_target_hidden_size)
        if fixed and "model.fc.weight" in spec and th:
            # before SGLang 0.5.12 the fc's width is a literal (hidden_size_in * 3), whatever the config says
            n = int(fixed.group(1))
            spec["model.fc.weight"] = {**spec["model.fc.weight"], "shape": _shape(_int(draft.hidden_size), th * n),
                                       "why": f"{lw.cls}: model.fc = {fc.ctor}({fc.arg0}, hidden) at {fc.where}: "
                                              f"{n} aux states whatever the config says"}
        for opt in ("model.fc_norm", "model.input_norm"):
            if opt not in paths:
                spec = {k: v for k, v in spec.items() if not k.startswith(opt + ".")}
        if "lm_head.weight" in spec:
            head = _lm_head_spec(draft, lw, kind, worker)
            if head is not None and head["required"] and not spec["lm_head.weight"]["required"]:
                spec["lm_head.weight"] = {**spec["lm_head.weight"], **head, "shape": spec["lm_head.weight"]["shape"]}
        return spec, set(spec), False
    spec: dict[str, dict[str, Any]] = {}
    for m in mods:
        if m.ctor.startswith("alias of"):
            continue
        entry = {"shape": None, "required": not m.conditional,
                 "why": f"{lw.cls}: {m.path} = {m.ctor}(...) at {m.where}"
                        + (f", built only when {m.condition}" if m.conditional else "")}
        if m.path.endswith("embed_tokens") and lw.set_embed_where:
            entry.update(required=False, why=f"{entry['why']}; the worker shares the target's embedding "
                                             f"(set_embed, {lw.set_embed_where})")
        if m.path == "lm_head":
            head = _lm_head_spec(draft, lw, kind, worker)
            entry = ({**entry, "required": False, "why": f"{entry['why']}; tied or the target's head is used"}
                     if head is None else {**entry, **head})
        spec[m.path] = entry
    return spec, [m for m in mods if not m.ctor.startswith("alias of")], True


@dataclass
class WeightTally:
    """What following every checkpoint name through a loader gives (:func:`tally_weights`):
    ``loaded`` (param → the names that fill it), ``dropped`` (``warned`` among them: dropped with a
    warning), ``raises`` (names the loader raises on), ``shape_problems`` (one dict per tensor whose
    shape is not the parameter's or shard's), ``d2t_name``/``t2d_name``, ``missing`` (required
    params, or ``"param (shard a, b)"``, no tensor fills)."""

    loaded: dict
    dropped: list
    warned: list
    raises: list
    shape_problems: list
    d2t_name: str | None
    t2d_name: str | None
    missing: list


def tally_weights(tensors: dict, follow_name: Any, spec: dict) -> WeightTally:
    """Follow every tensor of ``tensors`` (name → ``TensorInfo``, in name order) with ``follow_name``
    (name → ``(how, param, shard)``: ``loaded``, ``d2t``, ``skipped``, ``dropped``,
    ``dropped-warned``, ``raises`` or ``unknown`` — a branch whose handling was not read, neither
    loaded nor dropped) against ``spec`` (:func:`expected_parameters`' form: shapes checked only
    where it has them). Shared by SGLang's analysis and vLLM's
    (:func:`workbench.engine.vllm_weights.analyse_vllm_weights`)."""
    loaded: dict[str, list[str]] = {}
    shards_seen: dict[str, set] = {}
    dropped, warned, raises, shape_problems = [], [], [], []
    d2t_name = t2d_name = None
    for name, info in sorted((tensors or {}).items()):
        how, param, shard = follow_name(name)
        if how == "d2t":
            d2t_name = name
            continue
        if how == "skipped":
            if "t2d" in name:
                t2d_name = name
            continue
        if how in ("dropped", "dropped-warned"):
            dropped.append(name)
            if how == "dropped-warned":
                warned.append(name)
            continue
        if how == "raises":
            raises.append(name)
            continue
        if how == "unknown":
            continue
        loaded.setdefault(param, []).append(name)
        stacked = spec.get(param, {}).get("shards")
        if stacked is not None:
            shards_seen.setdefault(param, set()).update(stacked if shard is None else {shard})
        want = spec.get(param, {}).get("shape") if shard is None else (stacked or {}).get(shard)
        if want is not None and tuple(info.shape) != tuple(want):
            shape_problems.append({"tensor": name, "shape": list(info.shape), "expected": list(want),
                                   "param": param, "shard": shard, "file": info.file,
                                   "rule": _rule_for_shape(param, shard, tuple(info.shape), tuple(want))})
    missing: list[str] = []
    for p, s_ in spec.items():
        if not s_["required"]:
            continue
        if p not in loaded:
            missing.append(p)
        elif s_.get("shards") is not None and shards_seen.get(p, set()) != set(s_["shards"]):
            lacking = [str(k) for k in s_["shards"] if k not in shards_seen.get(p, set())]
            missing.append(f"{p} (shard {', '.join(lacking)})")
    return WeightTally(loaded, dropped, warned, raises, shape_problems, d2t_name, t2d_name, missing)


def analyse_with_source(draft: DraftFacts, lw: Any, kind: str = "eagle3", worker: str | None = None) -> WeightAnalysis:
    """Follow every tensor of ``draft.tensors`` through the ``load_weights`` read from the box's
    source (``lw``: :func:`workbench.engine.drafts.load_weights_facts`; ``kind``: the class's
    :attr:`~workbench.engine.drafts.DraftClass.kind` under EAGLE3, ``eagle`` under another algorithm
    (the worker then shares the target's embedding and head with any draft); ``worker``: where the draft worker reads
    ``load_lm_head_from_target``, :func:`workbench.engine.drafts.worker_lm_head_source`) against
    :func:`source_spec`. Shapes are checked only where the spec has them (``LlamaForCausalLMEagle3``)."""
    from workbench.engine.drafts import follow

    spec, params, module_level = source_spec(draft, lw, kind, worker)
    t = tally_weights(draft.tensors, lambda name: follow(name, lw, params)[:3], spec)
    loaded, dropped, missing, shape_problems = t.loaded, t.dropped, t.missing, t.shape_problems
    d2t_name, t2d_name, warned, raises = t.d2t_name, t.t2d_name, t.warned, t.raises
    return WeightAnalysis(spec, loaded, dropped, missing, shape_problems, d2t_name, t2d_name, warned, raises,
                          lw.cls, f"read from {lw.where}" if lw.where else "read from the source (no load_weights)",
                          module_level, lw.to_dict(), lw)


def _layer_name(name: str) -> str:
    """A checkpoint name in the engine's module naming: ``model.`` dropped, the legacy
    substrings renamed (``midlayer`` → ``layers.0``, SGLang 0.5.23 ``legacy_name_map``)."""
    name = name[len("model."):] if name.startswith("model.") else name
    for legacy, new in LEGACY_NAME_MAP.items():
        name = name.replace(legacy, new)
    return name


def tensor_dims(draft: DraftFacts) -> dict[str, tuple[int, list[str]]]:
    """What the draft checkpoint's own tensor shapes say its architecture is, from the
    safetensors headers (nothing loaded): ``{"hidden_size" | "intermediate_size" |
    "num_hidden_layers" | "q_rows" | "kv_rows": (value, [the tensors it was read from])}``.

    ``hidden_size``: ``norm``, ``layers.i.{input_layernorm,post_attention_layernorm,hidden_norm}``
    (``(hidden,)``), ``fc.weight`` rows, ``o_proj`` / ``down_proj`` rows, ``lm_head`` columns;
    ``intermediate_size``: ``gate_proj`` / ``up_proj`` rows, ``down_proj`` columns (``gate_up_proj``
    rows / 2); ``num_hidden_layers``: the decoder layers present (``layers.i.*``, ``midlayer.*`` is
    layer 0), when they are ``0 .. n-1``; ``q_rows`` / ``kv_rows``: ``q_proj`` / ``k_proj`` rows
    (heads × head_dim, kv heads × head_dim). A value is given only when every tensor that shows
    it agrees; an unreadable checkpoint gives ``{}``."""
    votes: dict[str, dict[int, list[str]]] = {}

    def vote(key: str, value: int, name: str) -> None:
        votes.setdefault(key, {}).setdefault(int(value), []).append(name)

    layers: set[int] = set()
    for raw, info in sorted((draft.tensors or {}).items()):
        name, shape = _layer_name(raw), tuple(info.shape)
        parts = name.split(".")
        if len(parts) > 2 and parts[0] == "layers" and parts[1].isdigit():
            layers.add(int(parts[1]))
        if "d2t" in name or "t2d" in name or not shape:
            continue
        if len(shape) == 1 and name.endswith(("norm.weight",)) and not name.startswith(("fc_norm", "input_norm")):
            vote("hidden_size", shape[0], raw)
        elif len(shape) == 2:
            if name == "fc.weight" or name.endswith(("o_proj.weight", "down_proj.weight")):
                vote("hidden_size", shape[0], raw)
            if name == "lm_head.weight":
                vote("hidden_size", shape[1], raw)
            if name.endswith(("gate_proj.weight", "up_proj.weight")) and "gate_up" not in name:
                vote("intermediate_size", shape[0], raw)
            if name.endswith("gate_up_proj.weight") and shape[0] % 2 == 0:
                vote("intermediate_size", shape[0] // 2, raw)
            if name.endswith("down_proj.weight"):
                vote("intermediate_size", shape[1], raw)
            if name.endswith("q_proj.weight"):
                vote("q_rows", shape[0], raw)
            if name.endswith("k_proj.weight"):
                vote("kv_rows", shape[0], raw)
    out = {key: next(iter(v.items())) for key, v in votes.items() if len(v) == 1}
    if layers and layers == set(range(len(layers))):
        out["num_hidden_layers"] = (len(layers), sorted(n for n in (draft.tensors or {})
                                                        if _layer_name(n).startswith("layers."))[:3])
    return out


def config_vs_tensors(draft: DraftFacts) -> dict[str, dict[str, Any]]:
    """The fields of the draft's ``config.json`` that disagree with its own tensors
    (:func:`tensor_dims`): ``{field: {"config": value, "tensors": value, "from": [tensor names],
    "key": where the config holds it ("hidden_size" or "transformer_layer_config.hidden_size")}}``.

    SGLang 0.5.23 builds ``LlamaForCausalLMEagle3`` from the config alone (``llama_eagle3.py``:
    ``hidden_size``, ``intermediate_size`` (``intermediate_size_mlp`` for ``llama4_text``),
    ``num_hidden_layers`` decoder layers, ``llama.py`` ``LlamaAttention`` heads ×
    ``head_dim``), so such a field makes parameters of other shapes (the weight loader asserts),
    extra layers no tensor fills (they keep their initial values) or tensors no layer takes
    (dropped). Heads are compared only where ``head_dim`` makes them unambiguous: the config
    states ``head_dim`` (without it, q rows ≠ heads × hidden/heads may as well be a missing
    ``head_dim``: ``head-dim-mismatch``)."""
    cfg = draft.config
    dims = tensor_dims(draft)
    nested = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else {}

    def where(key: str) -> str:
        return key if key in cfg or key not in nested else f"transformer_layer_config.{key}"

    def value(key: str) -> Any:
        return cfg[key] if key in cfg else nested.get(key)

    out: dict[str, dict[str, Any]] = {}
    inter_key = "intermediate_size_mlp" if cfg.get("model_type") == "llama4_text" else "intermediate_size"
    for key, dim in (("hidden_size", "hidden_size"), (inter_key, "intermediate_size"),
                     ("num_hidden_layers", "num_hidden_layers")):
        if dim not in dims:
            continue
        have, (want, names) = value(key), dims[dim]
        if have is not None and have != want:
            out[key] = {"config": have, "tensors": want, "from": names, "key": where(key)}
    heads, head_dim = _int(value("num_attention_heads")), _int(value("head_dim"))
    for key, dim in (("num_attention_heads", "q_rows"), ("num_key_value_heads", "kv_rows")):
        if head_dim is None or dim not in dims or dims[dim][0] % head_dim:
            continue
        want, names = dims[dim][0] // head_dim, dims[dim][1]
        have = value(key)
        if key == "num_key_value_heads" and have is None:
            have = heads  # LlamaConfig: num_key_value_heads defaults to num_attention_heads
        if have != want:
            out[key] = {"config": value(key), "tensors": want, "from": names, "key": where(key),
                        "head_dim": head_dim}
    return out
