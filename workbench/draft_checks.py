"""Static checks of an EAGLE-3 draft checkpoint against what the engine loads (hypothesis H3).

The engine's loader is modelled from SGLang 0.5.23 ``srt/models/llama_eagle3.py``
(``LlamaForCausalLMEagle3.load_weights``): a checkpoint name has the legacy substrings renamed
(``midlayer`` → ``layers.0``, ``aux_norm_low|mid|high`` → ``fc_norm.0|1|2``); a name containing
``d2t`` becomes ``hot_token_id = d2t + arange(len(d2t))``; a name containing ``t2d`` is skipped;
``q|k|v_proj`` are stacked into ``qkv_proj`` and ``gate|up_proj`` into ``gate_up_proj``; the name
is tried as-is, then with a ``model.`` prefix; a name that matches no parameter is dropped with no
warning. Findings use the catalogue's rule ids (``notes/doctor-rules.md``): ``weights-dropped``,
``weights-missing``, ``lm-head-shape-mismatch``, ``head-dim-mismatch``, ``aux-count-mismatch``,
``token-map-missing``, ``token-map-invalid``. They never load a model: shapes come from the
safetensors headers and ``d2t``/``t2d`` are read by byte range.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.checkpoint import CheckpointError, DraftFacts, TargetFacts, read_tensor
from workbench.rules import Finding

#: Legacy checkpoint names → module names (SGLang 0.5.23 llama_eagle3.py ``legacy_name_map``).
LEGACY_NAME_MAP = {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                   "aux_norm_high": "fc_norm.2"}
#: Stacked parameters (SGLang 0.5.23 llama_eagle3.py ``stacked_params_mapping``).
STACKED = [(".qkv_proj", ".q_proj"), (".qkv_proj", ".k_proj"), (".qkv_proj", ".v_proj"),
           (".gate_up_proj", ".gate_proj"), (".gate_up_proj", ".up_proj")]


def expected_parameters(draft: DraftFacts) -> dict[str, dict[str, Any]]:
    """The parameters of ``LlamaForCausalLMEagle3`` for this config and the checkpoint shapes that
    feed them: ``{param: {"sources": {ckpt_suffix: shape}, "required": bool}}``.

    Shapes are ``(out, in)`` for Linear weights. From SGLang 0.5.23 ``llama_eagle3.py``: fc is
    ``Linear(target_hidden × num_aux → hidden)``; layer 0's q/k/v read ``2 × hidden``; lm_head is
    ``draft_vocab × hidden`` unless tied or ``draft_vocab_size`` is absent (then taken from the
    target); ``embed_tokens`` is optional (shared from the target).
    """
    cfg = draft.config
    h = draft.hidden_size
    heads = cfg.get("num_attention_heads")
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or (h // heads if h and heads else None)
    inter = cfg.get("intermediate_size")
    th = draft.effective_target_hidden_size
    ids = draft.aux_layer_ids
    num_aux = draft.num_aux_hidden_states or (len(ids) if isinstance(ids, list) and ids else 3)
    ec = draft.eagle_config or {}
    p: dict[str, dict[str, Any]] = {
        "model.fc.weight": {"shapes": {"fc.weight": (h, th * num_aux) if h and th else None}, "required": True},
        "model.layers.0.self_attn.qkv_proj.weight": {"shapes": {
            "q_proj.weight": (heads * head_dim, 2 * h) if heads and head_dim and h else None,
            "k_proj.weight": (kv_heads * head_dim, 2 * h) if kv_heads and head_dim and h else None,
            "v_proj.weight": (kv_heads * head_dim, 2 * h) if kv_heads and head_dim and h else None}, "required": True},
        "model.layers.0.self_attn.o_proj.weight": {"shapes": {"o_proj.weight": (h, heads * head_dim) if heads and head_dim and h else None}, "required": True},
        "model.layers.0.mlp.gate_up_proj.weight": {"shapes": {"gate_proj.weight": (inter, h) if inter and h else None,
                                                              "up_proj.weight": (inter, h) if inter and h else None}, "required": True},
        "model.layers.0.mlp.down_proj.weight": {"shapes": {"down_proj.weight": (h, inter) if inter and h else None}, "required": True},
        "model.layers.0.input_layernorm.weight": {"shapes": {"input_layernorm.weight": (h,)}, "required": True},
        "model.layers.0.post_attention_layernorm.weight": {"shapes": {"post_attention_layernorm.weight": (h,)}, "required": True},
        "model.layers.0.hidden_norm.weight": {"shapes": {"hidden_norm.weight": (h,)}, "required": True},
        "model.norm.weight": {"shapes": {"norm.weight": (h,)}, "required": True},
        "model.embed_tokens.weight": {"shapes": {"embed_tokens.weight": None}, "required": False},
    }
    if cfg.get("bias"):
        p["model.fc.bias"] = {"shapes": {"fc.bias": (h,)}, "required": True}
    if ec.get("norm_before_fc", cfg.get("norm_before_fc")):
        p["model.input_norm.weight"] = {"shapes": {"input_norm.weight": None}, "required": True}
    if cfg.get("fc_norm", cfg.get("use_aux_norm")):
        for i in range(num_aux):
            p[f"model.fc_norm.{i}.weight"] = {"shapes": {f"fc_norm.{i}.weight": (th,)}, "required": True}
    if not cfg.get("tie_word_embeddings"):
        dv = draft.draft_vocab_size
        p["lm_head.weight"] = {"shapes": {"lm_head.weight": (dv, h) if dv and h else None},
                               "required": dv is not None}
    return p


def map_checkpoint_name(name: str, params: set[str]) -> tuple[str | None, str]:
    """Where the engine puts checkpoint tensor ``name``: ``(param or None, how)``.

    ``how`` is ``"d2t"``, ``"t2d"`` (skipped on purpose), ``"loaded"`` or ``"dropped"``
    (no parameter matched: SGLang 0.5.23 skips it silently).
    """
    for legacy, new in LEGACY_NAME_MAP.items():
        if legacy in name:
            name = name.replace(legacy, new)
    if "d2t" in name:
        return None, "d2t"
    if "t2d" in name:
        return None, "t2d"
    for param_name, weight_name in STACKED:
        if weight_name in name:
            stacked = name.replace(weight_name, param_name)
            target = stacked if stacked in params else f"model.{stacked}"
            return (target, "loaded") if target in params else (None, "dropped")
    target = name if name in params else f"model.{name}"
    return (target, "loaded") if target in params else (None, "dropped")


def _suffix_shape(param: str, ckpt_name: str, spec: dict) -> tuple | None:
    for suffix, shape in spec["shapes"].items():
        if ckpt_name.endswith(suffix):
            return shape
    return None


def check_token_map(d2t: np.ndarray, vocab_size: int, t2d: np.ndarray | None = None,
                    source: str = "d2t") -> list[str]:
    """Problems with a ``d2t`` offset table (target_id = draft_id + d2t[draft_id], SGLang 0.5.23
    llama_eagle3.py ``hot_token_id = d2t + arange``) and, when given, ``t2d`` (bool over the
    target vocab). Returns human-readable problems; empty when valid."""
    problems: list[str] = []
    if d2t.ndim != 1:
        return [f"{source} has shape {tuple(d2t.shape)}, expected one dimension (draft vocab)"]
    if not np.issubdtype(d2t.dtype, np.integer):
        problems.append(f"{source} has dtype {d2t.dtype}, expected integer offsets")
        return problems
    target_ids = d2t.astype(np.int64) + np.arange(len(d2t), dtype=np.int64)
    out = np.flatnonzero((target_ids < 0) | (target_ids >= vocab_size))
    if out.size:
        problems.append(f"{out.size} draft ids map outside [0, {vocab_size}) (first: draft {int(out[0])} → "
                        f"target {int(target_ids[out[0]])})")
    if len(target_ids) > 1 and not np.all(np.diff(target_ids) > 0):
        dup = len(target_ids) - len(np.unique(target_ids))
        problems.append(f"target ids are not strictly increasing ({dup} duplicates)")
    if (out.size and len(d2t) > 1 and np.all(np.diff(d2t) > 0) and d2t.min() >= 0 and d2t.max() < vocab_size):
        problems.append(f"{source} looks like absolute target ids, not offsets (it is strictly increasing and "
                        f"within [0, {vocab_size}); the engine adds arange to it)")
    if t2d is not None:
        if t2d.shape != (vocab_size,):
            problems.append(f"t2d has shape {tuple(t2d.shape)}, expected ({vocab_size},)")
        else:
            count = int(np.count_nonzero(t2d))
            if count != len(d2t):
                problems.append(f"t2d marks {count} target tokens, d2t has {len(d2t)} draft tokens")
            elif not out.size and not np.array_equal(np.flatnonzero(t2d), np.sort(target_ids)):
                problems.append("t2d and d2t disagree on which target tokens the draft vocab holds")
    return problems


def check_draft_weights(box: Any, draft: DraftFacts, target: TargetFacts | None = None,
                        *, timeout: float = 60) -> tuple[list[Finding], dict[str, Any]]:
    """H3's static checks on the draft named by ``draft`` (facts already read from ``box``).

    Returns ``(findings, checked)`` where ``checked`` summarises what was compared (counts, the
    d2t summary) for the evidence. Raises nothing for a bad checkpoint: an unreadable one is a
    ``checkpoint-unreadable`` finding.
    """
    findings: list[Finding] = []
    checked: dict[str, Any] = {"draft": draft.path, "modelled_engine": "sglang 0.5.23 llama_eagle3.py load_weights"}
    if draft.tensors is None:
        findings.append(Finding("checkpoint-unreadable", "error", f"the draft checkpoint could not be read: "
                                f"{draft.checkpoint_error}", {"path": draft.path}, None))
        return findings, checked
    spec = expected_parameters(draft)
    params = set(spec)
    loaded: dict[str, list[str]] = {}
    dropped: list[str] = []
    shape_problems: list[dict] = []
    d2t_name = t2d_name = None
    for name, info in sorted(draft.tensors.items()):
        param, how = map_checkpoint_name(name, params)
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
        want = _suffix_shape(param, name, spec[param])
        if want is not None and None not in want and tuple(info.shape) != tuple(want):
            shape_problems.append({"tensor": name, "shape": list(info.shape), "expected": list(want),
                                   "param": param, "file": info.file})
    missing = [p for p, s in spec.items() if s["required"] and p not in loaded]
    checked.update({"tensors": len(draft.tensors), "loaded_params": len(loaded), "dropped": dropped,
                    "missing": missing, "shape_problems": shape_problems})
    if dropped:
        findings.append(Finding("weights-dropped", "error",
                                f"{len(dropped)} checkpoint tensors match no parameter of LlamaForCausalLMEagle3 after "
                                f"the engine's renames and are silently skipped: {dropped[:5]}",
                                {"dropped": dropped, "checkpoint": draft.path}, "rename them to the engine's names"))
    if missing:
        findings.append(Finding("weights-missing", "error",
                                f"{len(missing)} parameters of the draft class get no tensor and keep their "
                                f"initial values: {missing}", {"missing": missing, "checkpoint": draft.path}, None))
    for prob in shape_problems:
        rule = ("lm-head-shape-mismatch" if prob["param"] == "lm_head.weight" else
                "aux-count-mismatch" if prob["param"] == "model.fc.weight" else
                "head-dim-mismatch" if "qkv_proj" in prob["param"] or "o_proj" in prob["param"] else
                "weights-missing")
        findings.append(Finding(rule, "error", f"{prob['tensor']} has shape {prob['shape']}, the engine builds "
                                f"{prob['param']} for {prob['expected']}", prob, None))
    vocab = (target.vocab_size if target is not None and target.vocab_size else draft.vocab_size)
    dv = draft.draft_vocab_size
    if dv is not None and vocab is not None and dv < vocab:
        if d2t_name is None:
            findings.append(Finding("token-map-missing", "error",
                                    f"draft_vocab_size {dv} < vocab_size {vocab} and the checkpoint has no d2t: draft "
                                    "token ids would be used as target ids", {"draft_vocab_size": dv, "vocab_size": vocab},
                                    "export d2t/t2d with the draft"))
        else:
            try:
                d2t = read_tensor(box, draft.tensors[d2t_name].file, d2t_name, timeout=timeout)
                t2d = read_tensor(box, draft.tensors[t2d_name].file, t2d_name, timeout=timeout) if t2d_name else None
            except CheckpointError as exc:
                findings.append(Finding("checkpoint-unreadable", "error", f"d2t/t2d unreadable: {exc}",
                                        {"path": draft.path}, None))
            else:
                problems = check_token_map(d2t, vocab, t2d, source=d2t_name)
                target_ids = d2t.astype(np.int64) + np.arange(len(d2t))
                checked["d2t"] = {"name": d2t_name, "len": int(len(d2t)), "dtype": str(d2t.dtype),
                                  "target_id_min": int(target_ids.min()) if len(d2t) else None,
                                  "target_id_max": int(target_ids.max()) if len(d2t) else None,
                                  "t2d_true": int(np.count_nonzero(t2d)) if t2d is not None else None,
                                  "problems": problems}
                if len(d2t) != dv:
                    problems.append(f"d2t has {len(d2t)} entries, draft_vocab_size is {dv}")
                if problems:
                    findings.append(Finding("token-map-invalid", "error", "; ".join(problems),
                                            checked["d2t"], None))
    return findings, checked
