"""Fault family: the draft's config against the target's.

Rules: ``hidden-size-mismatch``, ``vocab-size-mismatch`` (errors: the draft was trained for another
target), ``context-length-mismatch`` (warning), ``rope-mismatch`` (info). They read the two
``config.json`` files only (:class:`workbench.checkpoint.DraftFacts` / ``TargetFacts``; the
target's ``text_config`` for multimodal targets). Engine facts: SGLang 0.5.23
``srt/models/llama_eagle3.py`` (the draft's ``fc`` input width is ``target_hidden_size`` else
``hidden_size``; draft logits are mapped to the target vocab).
"""

from __future__ import annotations

from typing import Any

from workbench.checkpoint import DraftFacts, TargetFacts
from workbench.engine.launch import LaunchCommand
from workbench.rules.finding import Finding, ev
from workbench.rules.launch_flags import _int_flag

__all__ = ["config_rules", "LLAMA_ROPE_THETA"]


#: The draft class's source file, relative to the engine root (SGLang 0.5.23).
LLAMA_ROPE_THETA = 10000.0
def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _rope(cfg: dict, path: str) -> tuple[float, str, str | None, str]:
    """(theta, its source, scaling type or None, its source) with ``rope_parameters``
    (transformers ≥ 4.56), ``rope_theta`` and ``rope_scaling.type|rope_type``; a missing theta
    is 10000 (the Llama default, transformers ``LlamaConfig``)."""
    rp = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    if _num(cfg.get("rope_theta")) is not None:
        theta, tsrc = _num(cfg["rope_theta"]), f"{path}: rope_theta"
    elif _num(rp.get("rope_theta")) is not None:
        theta, tsrc = _num(rp["rope_theta"]), f"{path}: rope_parameters.rope_theta"
    else:
        theta, tsrc = LLAMA_ROPE_THETA, f"{path}: rope_theta absent (Llama default 10000)"
    rs = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else rp
    kind = (rs or {}).get("rope_type") or (rs or {}).get("type")
    if kind == "default":
        kind = None
    return theta, tsrc, kind, f"{path}: rope_scaling" if cfg.get("rope_scaling") else f"{path}: rope_parameters"


def config_rules(launch: LaunchCommand, draft: DraftFacts, target: TargetFacts) -> list[Finding]:
    """Rules comparing the draft's config with the target's: ``hidden-size-mismatch``,
    ``vocab-size-mismatch`` (errors), ``context-length-mismatch`` (warning), ``rope-mismatch``
    (info). The target's text config is used for multimodal targets (:class:`TargetFacts`).
    Engine facts (SGLang 0.5.23 ``llama_eagle3.py``): the draft's ``fc`` input width is
    ``target_hidden_size`` else ``hidden_size``; draft logits are mapped to the target vocab."""
    out: list[Finding] = []
    dsrc = draft.sources
    th = draft.effective_target_hidden_size
    if th is not None and target.hidden_size is not None and th != target.hidden_size:
        key = "target_hidden_size" if draft.target_hidden_size is not None else "hidden_size"
        out.append(Finding("hidden-size-mismatch", "error",
                           f"the draft expects target hidden states {th} wide ({key}) but the target's are "
                           f"{target.hidden_size}: the draft was trained for another target",
                           {"draft_" + key: ev(th, dsrc.get(key)),
                            "target_hidden_size": ev(target.hidden_size, target.sources.get("hidden_size"))},
                           "use the draft trained for this target"))
    if draft.vocab_size is not None and target.vocab_size is not None and draft.vocab_size != target.vocab_size:
        out.append(Finding("vocab-size-mismatch", "error",
                           f"draft vocab_size {draft.vocab_size} ≠ target vocab_size {target.vocab_size}",
                           {"draft_vocab_size_field": ev(draft.vocab_size, dsrc.get("vocab_size")),
                            "target_vocab_size": ev(target.vocab_size, target.sources.get("vocab_size"))},
                           "use the draft trained for this target's tokenizer"))
    dmpe, dmpe_src = draft.config.get("max_position_embeddings"), f"{draft.config_path}: max_position_embeddings"
    if dmpe is None and isinstance(draft.config.get("transformer_layer_config"), dict):
        dmpe = draft.config["transformer_layer_config"].get("max_position_embeddings")
        dmpe_src = f"{draft.config_path}: transformer_layer_config.max_position_embeddings"
    ctx_flag, _ = _int_flag(launch, "--context-length")
    ctx, csrc = (ctx_flag, "launch command: --context-length") if ctx_flag else (
        target.max_position_embeddings, target.sources.get("max_position_embeddings"))
    if isinstance(dmpe, int) and ctx is not None and dmpe < ctx:
        fix = f"set max_position_embeddings to {ctx} in {draft.config_path}"
        if not ctx_flag:
            fix += f", or serve with --context-length {dmpe}"
        out.append(Finding("context-length-mismatch", "warning",
                           f"the draft's max_position_embeddings {dmpe} is below the {ctx}-token context the server "
                           "will serve: acceptance decays on long prompts",
                           {"draft_max_position_embeddings": ev(dmpe, dmpe_src),
                            "served_context": ev(ctx, csrc)}, fix))
    dt, dts, dk, dks = _rope(draft.config, draft.config_path)
    tc = target.config.get("text_config") if target.text_config_used else None
    tt, tts, tk, tks = _rope(tc if isinstance(tc, dict) else target.config,
                             target.config_path + (" text_config" if target.text_config_used else ""))
    if dt != tt or dk != tk:
        out.append(Finding("rope-mismatch", "info",
                           f"draft rope (theta {dt:g}, scaling {dk}) differs from the target's (theta {tt:g}, scaling "
                           f"{tk}); harmless if the draft was trained with this config",
                           {"draft_rope_theta": ev(dt, dts), "target_rope_theta": ev(tt, tts),
                            "draft_rope_scaling_type": ev(dk, dks), "target_rope_scaling_type": ev(tk, tks)},
                           "align them, or confirm training used them"))
    return out
