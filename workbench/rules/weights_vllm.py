"""The weight rules on a vLLM launch: the draft checkpoint through vLLM's own EAGLE-3 weight loading
(:mod:`workbench.engine.vllm_load_weights`, read from the box's vLLM; :mod:`workbench.engine.vllm_weights`)
and vLLM's consequences, which differ from SGLang's:

* ``weights-dropped``: a name no module or parameter has makes ``AutoWeightsLoader`` raise
  ``ValueError: There is no module or parameter named ...``: the engine does not start
  (``prevents_start``), where SGLang skips it silently. Names vLLM's mappers drop (an unexpected
  ``*.bias``, ``input_norm.*`` without ``norm_before_fc``, ``mask_hidden``) are skipped silently.
* ``weights-missing``: ``Eagle3LlamaForCausalLM.load_weights`` returns nothing, so the default
  loader's strict check does not run: a parameter no tensor fills keeps its initial value, silently
  (RMSNorm ones, linear weights uninitialised memory); no ``lm_head.weight`` with a reduced draft vocab:
  the target's ``lm_head`` is shared and its first ``draft_vocab_size`` rows score the draft's ids.
  When names also raise, the engine does not start and the missing parameters are the other side of
  those names: the message says so (never "starts, silently"), ``evidence["consequence_of"] =
  "weights-dropped"``.
* the shape rules: the weight loader fails at start-up (``AssertionError`` from
  ``default_weight_loader`` / ``ParallelLMHead``, ``RuntimeError`` from a stacked shard's ``narrow``).

The functions here work out each finding's parts (:data:`Parts`); :mod:`workbench.rules.weights`, the
family's module, builds the findings. Layering: the rules layer (reads :class:`workbench.rules.facts.Facts`)."""

from __future__ import annotations

from typing import Any

from workbench.engine.load_weights import WeightAnalysis
from workbench.engine.vllm_load_weights import (
    CLASS_FILES,
    VLLM_LOAD_VERSION,
    VllmLoadWeights,
    read_load_weights,
    shipped_load_weights,
)
from workbench.engine.vllm_weights import analyse_vllm_weights

__all__ = ["vllm_load_facts", "vllm_weight_analysis", "vllm_dropped_parts", "vllm_missing_parts",
           "vllm_shape_parts", "Parts", "vllm_draft_class"]

_DROPPED_MEANS_A_FAULT = ("lm_head", "d2t", "t2d", "draft_id_to_target_id", "hot_token")


#: A finding's parts (``severity``, ``message``, ``evidence``, ``fix``, ``prevents_start``); the
#: family module (:mod:`workbench.rules.weights`) builds the :class:`~workbench.rules.finding.Finding`.
Parts = dict


def _parts(severity: str, message: str, evidence: dict, fix: str | None = None, prevents_start: bool = False) -> Parts:
    return {"severity": severity, "message": message, "evidence": evidence, "fix": fix,
            "prevents_start": prevents_start}


def vllm_draft_class(facts: Any) -> str | None:
    """The vLLM class the launch builds for the draft (its architecture as ``EAGLEConfig`` rewrites it
    under ``eagle3``, through the box's ``_SPECULATIVE_DECODING_MODELS``), when it is an EAGLE-3 draft
    class whose loading this module models (:data:`~workbench.engine.vllm_load_weights.CLASS_FILES`);
    ``None`` otherwise (another method, an unregistered class: other rules say so)."""
    cls = _built_class(facts)
    return cls if cls in CLASS_FILES else None


def _built_class(facts: Any) -> str | None:
    """The vLLM class an ``eagle3`` launch builds for the draft, modelled or not (``None``: unknown)."""
    from workbench.rules.vllm_engine import eagle_config_architecture

    arch = facts.draft_architecture
    if arch is None or (facts.speculative_method or "").lower() != "eagle3":
        return None
    return (getattr(facts.vllm, "draft_classes", None) or {}).get(eagle_config_architecture(arch, "eagle3"))


def vllm_load_facts(facts: Any, cls: str) -> VllmLoadWeights:
    """``cls``'s loading read from the box's vLLM (:attr:`Facts.vllm` ``root``), else vLLM 0.32.0's
    shipped facts with a note saying so. Notes are added to ``facts.notes`` once."""
    root = getattr(facts.vllm, "root", None)
    if root and facts.box is not None:
        lw = read_load_weights(facts.box, root, cls, timeout=facts.timeout or 30)
    else:
        lw = shipped_load_weights(cls, why="no vLLM package located on the box" if not root else "no box")
    for note in lw.notes:
        if note not in facts.notes:
            facts.notes.append(note)
    return lw


def vllm_weight_analysis(facts: Any) -> WeightAnalysis | None:
    """The draft checkpoint through vLLM's loading for this launch (:func:`analyse_vllm_weights`),
    when the draft is readable and its vLLM class is modelled (:func:`vllm_draft_class`); else ``None``."""
    draft = facts.draft
    if draft is None or draft.tensors is None:
        return None
    cls = vllm_draft_class(facts)
    if cls is None:
        built = _built_class(facts)
        if built is not None:
            note = (f"the weight rules on vLLM model {' and '.join(sorted(CLASS_FILES))}; the draft's class {built} "
                    "is not checked parameter by parameter (its loading is not modelled)")
            if note not in facts.notes:
                facts.notes.append(note)
        return None
    lw = vllm_load_facts(facts, cls)
    vocab = facts.target.vocab_size if facts.target is not None and facts.target.vocab_size else None
    return analyse_vllm_weights(draft, lw, vocab)


def _evidence(draft: Any, w: WeightAnalysis) -> dict:
    lw = w.source
    out = {"engine": w.engine, "draft_class": w.cls, "checkpoint": draft.path, "load_weights": w.load_facts}
    if lw is not None and lw.origin == "shipped":
        out["modelled_engine"] = f"vllm {VLLM_LOAD_VERSION}"
    return out


def vllm_dropped_parts(draft: Any, w: WeightAnalysis) -> list[Parts]:
    """``weights-dropped`` on vLLM: the names ``AutoWeightsLoader`` raises on (``prevents_start``),
    and the names vLLM's mappers drop silently (an error when a parameter is left without a tensor or
    a head / token map is among them, else a warning)."""
    out: list[Parts] = []
    ev = _evidence(draft, w)
    if w.raises:
        out.append(_parts(
            "error", f"{len(w.raises)} checkpoint tensor(s) match no module or parameter of {w.cls} after vLLM's renames "
            f"(load_weights: 'model.' prefix unless lm_head, d2t → draft_id_to_target_id; the model's "
            f"hf_to_vllm_mapper: midlayer. → layers.0., q/k/v → qkv_proj, gate/up → gate_up_proj): AutoWeightsLoader "
            f"raises \"ValueError: There is no module or parameter named ...\" and the engine does not start: "
            f"{w.raises[:5]}", {**ev, "raises": w.raises, "dropped": w.dropped},
            f"rename them to the names {w.cls} loads (see evidence load_weights)", prevents_start=True))
    if not w.dropped:
        return out
    meaningful = [n for n in w.dropped if any(k in n for k in _DROPPED_MEANS_A_FAULT)]
    evidence = {**ev, "dropped": w.dropped, "warned": w.warned}
    how = "with a warning in the log" if set(w.dropped) <= set(w.warned) else "silently"
    if not w.missing and not meaningful:
        return out + [_parts("warning",
                             f"{len(w.dropped)} checkpoint tensor(s) are dropped by vLLM's mappers ({how}: an "
                             f"unexpected '.bias', a switch the config turns off): {w.dropped[:5]}; every parameter "
                             "still gets a tensor", evidence,
                             "nothing to do unless the engine should load them (check the config's switches)")]
    return out + [_parts("error",
                         f"{len(w.dropped)} checkpoint tensor(s) are dropped by vLLM's mappers ({how}): "
                         f"{w.dropped[:5]} ({w.cls}, {w.engine})", evidence,
                         f"rename them to the names {w.cls} loads, or set the config switch that loads them")]


def vllm_missing_parts(draft: Any, w: WeightAnalysis) -> list[Parts]:
    """``weights-missing`` on vLLM: required parameters no tensor fills, each with what it holds
    instead (vLLM 0.32.0 skips its strict check for this class: silent); the draft's own ``lm_head``
    replaced by the target's. A consequence of ``weights-dropped`` when names also raise."""
    if not w.missing:
        return []
    holds = {m: w.spec[m.split(" ")[0]].get("init") for m in w.missing}
    head = [m for m in w.missing if m.split(" ")[0] == "lm_head.weight"]
    lw = w.source
    strict = bool(getattr(lw, "strict_check", False))
    kept = {m: v for m, v in holds.items() if m not in head}
    msg = (f"{len(w.missing)} parameter(s) of {w.cls} get no tensor: {w.missing}; "
           + (f"vLLM does not start with this checkpoint: it refuses {len(w.raises)} tensor name(s) no module or "
              "parameter has (weights-dropped), and these parameters are the other side of those names"
              if w.raises else
              "vLLM's default loader refuses that ('Following weights were not initialized from checkpoint'): the "
              "engine does not start" if strict else
              f"{w.cls}.load_weights returns nothing, so vLLM's strict 'weights were not initialized' check does not "
              "run: the engine starts, silently"
              + (" and each keeps its initial value (" + "; ".join(f"{m}: {v}" for m, v in kept.items()) + ")"
                 if kept else "")))
    # a refused name that is the head (under a prefix) fills it once renamed: no shared head to describe
    head_refused = any(n.endswith("lm_head.weight") for n in w.raises)
    if head and not strict and not head_refused:
        holds[head[0]] = "the target's lm_head (shared)"
        rows = (w.spec["lm_head.weight"].get("shape") or [None])[0]
        msg += ("; once it starts," if w.raises else ";")
        msg += (f" without lm_head.weight the proposer shares the TARGET's lm_head (llm_base_proposer.py "
                f"_maybe_share_lm_head: has_own_lm_head False) and LogitsProcessor({rows}) keeps its first {rows} rows: "
                "the draft's ids are scored by other tokens' rows (accept length about 1.0)")
    ev = {**_evidence(draft, w), "missing": w.missing, "holds": holds,
          "why": {m: w.spec[m.split(' ')[0]]["why"] for m in w.missing}}
    f = _parts("error", msg, ev, "re-export the draft with its trained lm_head" if head else None,
               prevents_start=strict)
    if w.raises:
        f["evidence"]["consequence_of"] = "weights-dropped"
    return [f]


def vllm_shape_parts(draft: Any, w: WeightAnalysis, rule_id: str) -> list[Parts]:
    """The shape mismatches of ``w`` under ``rule_id``: vLLM's weight loader fails at start-up
    (``default_weight_loader`` / ``ParallelLMHead`` assert; a stacked shard's ``narrow`` raises
    ``RuntimeError``)."""
    out = []
    for p in w.shape_problems:
        if p["rule"] != rule_id:
            continue
        out.append(_parts("error",
                          f"{p['tensor']} has shape {p['shape']}, vLLM builds {p['param']}"
                          f"{'' if p['shard'] is None else ' shard ' + str(p['shard'])} as {p['expected']} "
                          f"({w.cls}): its weight loader fails (AssertionError / RuntimeError) and the engine does "
                          "not start", {**p, **_evidence(draft, w)}, None, prevents_start=True))
    return out
