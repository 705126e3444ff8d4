"""Static checks of an EAGLE-3 draft checkpoint against what the engine loads (hypothesis H3).

The engine is modelled from SGLang 0.5.23 ``srt/models/llama_eagle3.py`` (``LlamaModel`` and
``LlamaForCausalLMEagle3``; read from the published ``sglang==0.5.23`` wheel):

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

Findings use the catalogue's rule ids (``notes/doctor-rules.md``): ``weights-dropped``,
``weights-missing``, ``lm-head-shape-mismatch``, ``head-dim-mismatch``, ``aux-count-mismatch``,
``token-map-missing``, ``token-map-invalid``, ``checkpoint-unreadable``. They never load a model:
shapes come from the safetensors headers and ``d2t``/``t2d`` are read by byte range.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.checkpoint import CheckpointError, DraftFacts, TargetFacts, read_tensor
from workbench.engine.modelled import LEGACY_NAME_MAP, MODELLED_ENGINE, STACKED
from workbench.rules.finding import Finding

__all__ = ["LEGACY_NAME_MAP", "STACKED", "MODELLED_ENGINE", "expected_parameters", "map_checkpoint_name",
           "check_token_map", "check_draft_weights"]

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


def check_token_map(d2t: np.ndarray, vocab_size: int, t2d: np.ndarray | None = None,
                    source: str = "d2t", *, draft_vocab_size: int | None = None) -> list[str]:
    """Problems with a ``d2t`` offset table and, when given, ``t2d``; empty when valid.

    SGLang 0.5.23 ``llama_eagle3.py``: ``hot_token_id = d2t + arange(len(d2t))``, i.e. target id =
    draft id + d2t[draft id]; ``eagle_worker_v2.py`` indexes the target vocab with it. So every
    target id must lie in ``[0, vocab_size)`` and no two draft ids may share one; ``len(d2t)``
    must equal the draft lm_head's rows (``draft_vocab_size``). The engine never reads ``t2d``
    (``"t2d" in name: continue``); it is checked for consistency with the export (a bool mask over
    the target vocab marking exactly the draft's target ids, as SpecForge writes it). A d2t
    holding absolute target ids instead of offsets is recognised when ``t2d`` marks exactly the
    d2t values, or when d2t is strictly increasing inside the vocab but d2t + arange is not.
    Order alone is not a problem: the engine does not need sorted draft ids.
    """
    if d2t.ndim != 1:
        return [f"{source} has shape {list(d2t.shape)}, expected one dimension (the draft vocab)"]
    if not np.issubdtype(d2t.dtype, np.integer):
        return [f"{source} has dtype {d2t.dtype}, expected integer offsets"]
    problems: list[str] = []
    n = len(d2t)
    if draft_vocab_size is not None and n != draft_vocab_size:
        problems.append(f"{source} has {n} entries, the draft vocab (lm_head rows) is {draft_vocab_size}")
    raw = d2t.astype(np.int64)
    target_ids = raw + np.arange(n, dtype=np.int64)
    out = np.flatnonzero((target_ids < 0) | (target_ids >= vocab_size))
    t2d_ids = None
    if t2d is not None and t2d.shape == (vocab_size,):
        t2d_ids = np.flatnonzero(t2d)
    looks_absolute = n > 1 and (
        (t2d_ids is not None and len(t2d_ids) == n and np.array_equal(np.sort(raw), t2d_ids)
         and not np.array_equal(np.sort(target_ids), t2d_ids))
        or (out.size > 0 and bool(np.all(np.diff(raw) > 0)) and raw.min() >= 0 and raw.max() < vocab_size))
    if looks_absolute:
        problems.append(f"{source} holds absolute target ids, not offsets (its values are the target ids"
                        f"{' t2d marks' if t2d_ids is not None else ''}; the engine adds arange to them, "
                        "shifting draft id i by i)")
    if out.size:
        problems.append(f"{out.size} draft ids map outside the target vocab [0, {vocab_size}) (first: draft "
                        f"{int(out[0])} → target {int(target_ids[out[0]])})")
    uniq = np.unique(target_ids)
    if len(uniq) != n:
        problems.append(f"{source} maps {n - len(uniq)} draft ids onto target ids another draft id already has "
                        "(duplicates)")
    if t2d is not None:
        if t2d.shape != (vocab_size,):
            problems.append(f"t2d has shape {list(t2d.shape)}, expected [{vocab_size}] (the target vocab)")
        else:
            count = len(t2d_ids)
            want = draft_vocab_size if draft_vocab_size is not None else n
            if count != want:
                problems.append(f"t2d marks {count} target tokens, the draft vocab has {want}")
            elif not looks_absolute and not out.size and not np.array_equal(t2d_ids, uniq):
                problems.append("t2d and d2t disagree on which target tokens the draft vocab holds")
    return problems


def _rule_for_shape(param: str, shard: Any, got: tuple, want: tuple) -> str:
    if param == "lm_head.weight":
        return "lm-head-shape-mismatch"
    if param == "model.fc.weight" and len(got) == 2 and got[0] == want[0]:
        return "aux-count-mismatch"
    if "qkv_proj" in param and len(got) == 2 and got[1] == want[1]:
        return "head-dim-mismatch"
    if "o_proj.weight" in param and len(got) == 2 and got[0] == want[0]:
        return "head-dim-mismatch"
    return "weights-missing"


def check_draft_weights(box: Any, draft: DraftFacts, target: TargetFacts | None = None,
                        *, timeout: float = 60) -> tuple[list[Finding], dict[str, Any]]:
    """H3's static checks on the draft described by ``draft`` (facts already read from ``box``).

    Returns ``(findings, checked)``; ``checked`` summarises what was compared (tensor and
    parameter counts, dropped/missing names, shape problems, the d2t summary) for the evidence.
    Raises nothing for a bad checkpoint: an unreadable one is a ``checkpoint-unreadable`` finding.
    The target vocab (``target.vocab_size``, else the draft's ``vocab_size``) bounds d2t.
    """
    findings: list[Finding] = []
    checked: dict[str, Any] = {"draft": draft.path, "modelled_engine": MODELLED_ENGINE}
    if draft.tensors is None:
        findings.append(Finding("checkpoint-unreadable", "error", f"the draft checkpoint could not be read: "
                                f"{draft.checkpoint_error}", {"path": draft.path}, None))
        return findings, checked
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
    checked.update({"tensors": len(draft.tensors), "parameters": len(spec), "loaded_params": len(loaded),
                    "dropped": dropped, "missing": missing, "shape_problems": shape_problems})
    if dropped:
        findings.append(Finding("weights-dropped", "error",
                                f"{len(dropped)} checkpoint tensors match no parameter of LlamaForCausalLMEagle3 after "
                                f"the engine's renames and are silently skipped: {dropped[:5]}",
                                {"dropped": dropped, "checkpoint": draft.path, "modelled_engine": MODELLED_ENGINE},
                                "rename them to the engine's names (fc.*, layers.0.* or midlayer.*, norm.*, lm_head.*, "
                                "optionally under model.)"))
    if missing:
        findings.append(Finding("weights-missing", "error",
                                f"{len(missing)} parameters of the draft class get no tensor and keep their "
                                f"initial values: {missing}",
                                {"missing": missing, "checkpoint": draft.path,
                                 "why": {m.split(" ")[0]: spec[m.split(" ")[0]]["why"] for m in missing}}, None))
    for prob in shape_problems:
        findings.append(Finding(prob["rule"], "error",
                                f"{prob['tensor']} has shape {prob['shape']}, the engine builds {prob['param']}"
                                f"{'' if prob['shard'] is None else ' shard ' + str(prob['shard'])} as "
                                f"{prob['expected']}; its weight loader asserts, so the server fails to start",
                                prob, None))
    vocab = target.vocab_size if target is not None and target.vocab_size else draft.vocab_size
    dv = draft.draft_vocab_size
    checked["vocab_size"] = vocab
    checked["draft_vocab_size"] = dv
    if d2t_name is None:
        if dv is not None and vocab is not None and dv < vocab:
            findings.append(Finding("token-map-missing", "error",
                                    f"draft_vocab_size {dv} < vocab_size {vocab} and the checkpoint has no d2t: draft "
                                    "token ids would be used as target ids",
                                    {"draft_vocab_size": dv, "vocab_size": vocab, "checkpoint": draft.path},
                                    "export d2t/t2d with the draft"))
        return findings, checked
    if vocab is None:
        checked["d2t"] = {"name": d2t_name, "skipped": "no vocab_size in the draft or target config"}
        return findings, checked
    try:
        d2t = read_tensor(box, draft.tensors[d2t_name].file, d2t_name, timeout=timeout)
        t2d = read_tensor(box, draft.tensors[t2d_name].file, t2d_name, timeout=timeout) if t2d_name else None
    except CheckpointError as exc:
        findings.append(Finding("checkpoint-unreadable", "error", f"d2t/t2d unreadable: {exc}",
                                {"path": draft.path}, None))
        return findings, checked
    lm_rows = dv if dv is not None else vocab
    problems = check_token_map(d2t, vocab, t2d, source=d2t_name, draft_vocab_size=lm_rows)
    summary: dict[str, Any] = {"name": d2t_name, "t2d_name": t2d_name, "len": int(d2t.size), "dtype": str(d2t.dtype),
                               "t2d_true": int(np.count_nonzero(t2d)) if t2d is not None else None,
                               "problems": problems}
    if d2t.ndim == 1 and d2t.size and np.issubdtype(d2t.dtype, np.integer):
        target_ids = d2t.astype(np.int64) + np.arange(len(d2t), dtype=np.int64)
        summary.update({"target_id_min": int(target_ids.min()), "target_id_max": int(target_ids.max()),
                        "sorted": bool(np.all(np.diff(target_ids) > 0))})
    checked["d2t"] = summary
    if problems:
        findings.append(Finding("token-map-invalid", "error", "; ".join(problems), summary, None))
    return findings, checked
