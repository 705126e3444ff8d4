"""Fault family: the draft's config against the target's (and against the engine's draft classes).

Rules: ``unknown-draft-architecture`` (the draft declares a class the engine does not register as
an EAGLE draft: the engine builds the wrong model), ``draft-config-vs-tensors`` (the draft's config
disagrees with its own tensors: hidden size, intermediate size, layer count, heads),
``hidden-size-mismatch``,
``vocab-size-mismatch`` (errors: the draft was trained for another target),
``context-length-mismatch`` (warning), ``rope-mismatch`` (info). They read the two ``config.json``
files (:class:`workbench.checkpoint.DraftFacts` / ``TargetFacts``; the target's ``text_config``
for multimodal targets) and the draft classes the engine source on the box registers. Engine
facts: SGLang 0.5.23 ``srt/models/llama_eagle3.py`` (the draft's ``fc`` input width is
``target_hidden_size`` else ``hidden_size``; draft logits are mapped to the target vocab).
"""

from __future__ import annotations

from typing import Any

from workbench.engine.drafts import DRAFT_CLASS_HISTORY, load_weights_facts
from workbench.engine.load_weights import analyse_weights, analyse_with_source
from workbench.errors import LaunchCommandError
from workbench.rules.facts import Facts
from workbench.rules.finding import Finding, ev
from workbench.rules.fix import DraftRepair, Fix
from workbench.rules.launch_flags import int_flag
from workbench.rules.registry import ALL_ENGINES, Family, HypothesisSpec
from workbench.rules import vllm_checks

__all__ = ["FAMILY", "LLAMA_ROPE_THETA", "unknown_draft_architecture", "draft_config_vs_tensors",
           "hidden_size_mismatch", "vocab_size_mismatch", "context_length_mismatch", "rope_mismatch"]

def _vllm_findings(said: list) -> list[Finding]:
    """This family's findings on a vLLM launch, from what :mod:`workbench.rules.vllm_checks` found
    (:class:`~workbench.rules.vllm_checks.Said`): the findings are made here, in the rules' own module."""
    return [Finding(s.rule, s.severity, s.message, s.evidence, s.fix, prevents_start=s.prevents_start) for s in said]


FAMILY = Family("configs", "The draft's config against the target's and the engine's draft classes", __doc__,
                module=__name__, hypotheses=(HypothesisSpec(
                    "config-vs-target", "The draft's config disagrees with the target (hidden size, vocab), with "
                    "its own tensors, or names a class the engine does not build as an EAGLE draft.",
                    rules=("unknown-draft-architecture", "draft-config-vs-tensors", "hidden-size-mismatch",
                           "vocab-size-mismatch", "context-length-mismatch", "rope-mismatch"), order=5),))

#: ``rope_theta`` when a config has none: the Llama default (transformers ``LlamaConfig``).
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


@FAMILY.rule("unknown-draft-architecture", severities=("error",), prevents_start="always", engines=ALL_ENGINES,
             summary="the draft's architectures is not an EAGLE draft class of the engine on the box (e.g. "
                     "Qwen3ForCausalLM on a checkpoint with midlayer.* / fc.* tensors)",
             fix="the architecture name the engine registers")
def unknown_draft_architecture(facts: Facts) -> list[Finding]:
    """SGLang builds the class named by the draft's ``architectures[0]``. The draft classes are read
    from the box's engine (:func:`workbench.engine.drafts.registered_draft_classes`): an
    ``EntryClass`` of ``srt/models`` whose class reads ``spec_info.hidden_states``; EAGLE-3 ones set
    ``capture_aux_hidden_states = True`` in ``__init__`` (SGLang 0.5.23: ``LlamaForCausalLMEagle3``,
    ``Eagle3DeepseekV2ForCausalLM``, the latter only from 0.5.12; 0.4.6–0.5.10 register
    ``LlamaForCausalLMEagle3`` alone); under EAGLE the EAGLE-1/2 drafts count too (``LlamaForCausalLMEagle``, ...).
    Without the engine's source, SGLang 0.5.23's two EAGLE-3 classes. A draft launched with EAGLE3,
    or whose checkpoint holds EAGLE tensors (``midlayer.*``, ``fc.*``), under any other class name
    is built as that class: its weights do not fit (sglang#9135). The weight rules do not run then
    (they follow the registered class's own ``load_weights``).

    A class this release has no source for at all is "not registered by this release", with the
    release it is registered from when the workbench knows it
    (:data:`workbench.engine.drafts.DRAFT_CLASS_HISTORY`: ``Eagle3DeepseekV2ForCausalLM`` from
    0.5.12). The relabel to a registered class is proposed only when the checkpoint's tensors fit
    it, followed through that class's ``load_weights`` (:func:`_relabel_misfit`: an MLA draft's
    ``q_a_proj`` / ``kv_b_proj`` do not fit ``LlamaForCausalLMEagle3``); otherwise no relabel. An
    EAGLE-1/2 draft (fc 2× hidden) under EAGLE3 is ``algorithm-mismatch``'s fault: the finding is
    its consequence (``evidence["consequence_of"]``), with no EAGLE-3 fix.

    vLLM 0.32.0 (:func:`workbench.rules.vllm_checks.unknown_draft_architecture`): under ``eagle3`` the
    draft's architecture after ``EAGLEConfig``'s rewrite (``transformers_utils/configs/eagle.py``,
    evaluated from the box) must be in ``_SPECULATIVE_DECODING_MODELS`` (the box's
    ``model_executor/models/registry.py``), else vLLM refuses the config at start-up. vLLM registers
    its own names and SGLang's (``Eagle3LlamaForCausalLM``, ``LlamaForCausalLMEagle3``), and the
    rewrite makes a plain ``LlamaForCausalLM`` its ``Eagle3LlamaForCausalLM``. An EAGLE-1/2 draft under
    ``eagle3``, and an EAGLE-3 draft under ``eagle``, are ``method-draft-mismatch``'s (one finding per
    fault); a speculators-format draft is ``draft-format-unread``'s."""
    if facts.engine_name == "vllm":
        from workbench.rules.cross_engine import effective_vllm_method

        return _vllm_findings(vllm_checks.unknown_draft_architecture(facts, effective_vllm_method(facts)[0]))
    draft = facts.draft
    if draft is None or not facts.draft_class_unknown:
        return []
    registered, reg_src = facts.draft_classes
    algo, arch = facts.algorithm, facts.draft_architecture
    want = sorted(registered) or ["LlamaForCausalLMEagle3"]
    evidence: dict[str, Any] = {
        "draft_architectures": ev(draft.architectures, draft.sources.get("architectures")),
        "registered_draft_classes": ev(want, reg_src),
        "eagle_tensors": [n for n in sorted(draft.tensors or {}) if n.startswith(("midlayer.", "fc."))][:4]}
    kind = f"EAGLE{'-3' if algo == 'EAGLE3' else ''} draft class of this engine ({', '.join(want)})"
    if algo == "EAGLE3" and draft.is_eagle1_like:
        # an EAGLE-1/2 draft launched with EAGLE3: algorithm-mismatch's fault; no EAGLE-3 class fits it
        evidence["consequence_of"] = "algorithm-mismatch"
        return [Finding("unknown-draft-architecture", "error",
                        f"the draft declares architectures {draft.architectures}, which is not an {kind}: it is an "
                        "EAGLE-1/2 draft (fc 2× hidden) launched with EAGLE3 (algorithm-mismatch), and no EAGLE-3 "
                        "class takes its tensors", evidence,
                        "relaunch with --speculative-algorithm EAGLE (algorithm-mismatch)")]
    history = DRAFT_CLASS_HISTORY.get(arch or "")
    in_engine = facts.engine.find_class(arch) if facts.engine is not None and arch else None
    if history is not None and in_engine is None and facts.engine is not None:
        evidence["class_history"] = ev(f"{arch} from SGLang {history[0]} ({history[1]})",
                                       "workbench.engine.drafts.DRAFT_CLASS_HISTORY (read by hand from the published "
                                       "wheels)")
        built = (f"{arch} is not registered by this release (no such class under {facts.engine.root}/srt/models); it "
                 f"is registered from SGLang {history[0]} on ({history[1]})")
    elif in_engine is None and facts.engine is not None:
        built = f"{arch or 'no class'} is not registered by this release (no such class under {facts.engine.root}/srt/models)"
    else:
        built = f"the engine builds {arch or 'nothing'} and its weights do not fit"
    best = ("LlamaForCausalLMEagle" if algo == "EAGLE" and draft.is_eagle1_like and "LlamaForCausalLMEagle" in registered
            else "LlamaForCausalLMEagle3" if "LlamaForCausalLMEagle3" in registered else want[0])
    try:
        misfit = _relabel_misfit(facts, best)
    except Exception as exc:  # noqa: BLE001 - a box error reading the class: said, the relabel stays unchecked
        facts.notes.append(f"could not follow the draft's tensors through {best}.load_weights "
                           f"({type(exc).__name__}: {exc}): the relabel is proposed unchecked")
        misfit = None
    if misfit:
        evidence["proposed_architecture"] = None
        evidence["tensors_that_do_not_fit"] = ev(misfit[:20] + ([f"... {len(misfit) - 20} more"] if len(misfit) > 20
                                                                else []), f"{best}.load_weights ({len(misfit)} tensors "
                                                                         "dropped, raising or of another shape)")
        where = f"SGLang {history[0]} or later" if history is not None else "an engine release that registers it"
        fix = (f"serve the draft on {where} ({arch}), or use a draft exported for {best}: its tensors do not load "
               f"into {best}")
    else:
        evidence["proposed_architecture"] = best
        fix = f"set \"architectures\": [\"{best}\"] in {draft.config_path}"
    return [Finding("unknown-draft-architecture", "error",
                    f"the draft declares architectures {draft.architectures}, which is not an {kind}; {built}",
                    evidence, fix)]


def _relabel_misfit(facts: Facts, best: str) -> list[str] | None:
    """The checkpoint tensors the proposed class ``best`` cannot take, followed through its
    ``load_weights`` as read from the box's source (:func:`workbench.engine.drafts.load_weights_facts`,
    :func:`workbench.engine.load_weights.analyse_with_source`; without the source, SGLang 0.5.23's
    ``LlamaForCausalLMEagle3`` modelled): names no parameter takes (dropped), names the loader
    raises on, and tensors of another shape (an MLA draft's ``q_a_proj`` / ``kv_b_proj`` into a
    Llama class; an EAGLE-1 ``fc`` 2× wide). ``[]``: they fit; ``None``: not checkable (no
    tensors, a class whose ``load_weights`` the workbench cannot follow)."""
    draft, reg = facts.draft, facts.draft_registry
    if not draft.tensors:
        return None
    if facts.engine is not None and reg is not None and best in reg:
        lw = load_weights_facts(facts.engine, best, reg[best].file)
        if lw is None or lw.followable is not None:
            return None
        wa = analyse_with_source(draft, lw, reg[best].kind if facts.algorithm == "EAGLE3" else "eagle", None)
    elif facts.engine is None and best == "LlamaForCausalLMEagle3":
        wa = analyse_weights(draft)
    else:
        return None
    bad = list(wa.dropped) + list(wa.raises) + [p["tensor"] for p in wa.shape_problems if p.get("tensor")]
    return sorted(dict.fromkeys(bad))


@FAMILY.rule("draft-config-vs-tensors", severities=("error",), prevents_start="depends", engines=ALL_ENGINES,
             summary="the draft's hidden_size, intermediate_size, num_hidden_layers or heads (where head_dim makes "
                     "them unambiguous) disagree with what its own tensors' shapes say",
             fix="the fields as the tensors say, in a copy of the draft")
def draft_config_vs_tensors(facts: Facts) -> list[Finding]:
    """SGLang 0.5.23 builds the draft (``srt/models/llama_eagle3.py`` ``LlamaForCausalLMEagle3``,
    its layers from ``llama.py``) from ``config.json`` alone and then loads the checkpoint into
    it, so a config field that disagrees with the tensors' shapes
    (:func:`workbench.engine.load_weights.config_vs_tensors`, read from the safetensors headers)
    stops or corrupts the draft: a ``hidden_size`` not divisible by ``num_attention_heads`` is
    refused when the config is read (transformers 5.24 ``LlamaConfig.validate_architecture``:
    ``ValueError: The hidden size (128) is not a multiple of the number of attention heads (5)``),
    other sizes make parameters of other shapes (the weight loader asserts at start-up), more
    ``num_hidden_layers`` than the checkpoint holds builds layers no tensor fills (they keep their
    initial values and the draft runs them), fewer drops the extra layers' tensors. The weight
    rules' findings for such a draft are its consequences (``evidence["consequence_of"]``).
    Start-up: prevented by the first two (the config refused, the loader's assert); a draft whose
    only disagreement is its layer count starts.

    vLLM 0.32.0 builds ``Eagle3LlamaForCausalLM`` (``model_executor/models/llama_eagle3.py``) from the
    config the same way: transformers' ``LlamaConfig`` refuses the same configs (measured: ``ValueError:
    The hidden size (128) is not a multiple of the number of attention heads (5)``) and
    ``default_weight_loader`` asserts on the same shapes; checked for a draft vLLM builds as that class.
    A head-count fault whose config heads the config's kv heads do not divide dies earlier on vLLM,
    building the draft's attention (``model_executor/layers/attention/attention.py:329``:
    ``AssertionError: num_heads (5) is not divisible by num_kv_heads (3)``), and the finding says so."""
    draft = facts.draft
    bad = facts.config_vs_tensors
    if draft is None or not bad:
        return []
    parts, effects = [], []
    stops = False  # a start-up failure: transformers refuses the config, or the weight loader asserts
    for key, d in bad.items():
        parts.append(f"{d['key']} {d['config']} (its tensors say {d['tensors']}: {', '.join(d['from'][:3])})")
    heads = draft.config.get("num_attention_heads")
    h = bad.get("hidden_size", {}).get("config")
    layers = bad.get("num_hidden_layers")
    if isinstance(h, int) and isinstance(heads, int) and heads > 0 and h % heads:
        effects.append(f"transformers refuses the config when the engine reads it (ValueError: The hidden size ({h}) "
                       f"is not a multiple of the number of attention heads ({heads})): the server does not start")
        stops = True
    elif set(bad) - {"num_hidden_layers"}:
        stops = True
        kv = draft.config.get("num_key_value_heads", heads)
        if facts.engine_name == "vllm" and isinstance(heads, int) and isinstance(kv, int) and kv > 0 and heads % kv:
            # vLLM 0.32.0 model_executor/layers/attention/attention.py:329 (Attention.__init__), before any load
            effects.append(f"vLLM asserts while building the draft's attention, before any weight is loaded "
                           f"(AssertionError: num_heads ({heads}) is not divisible by num_kv_heads ({kv}), "
                           "layers/attention/attention.py): the server does not start")
        else:
            effects.append("the engine builds parameters of the config's sizes and its weight loader asserts on the "
                           "checkpoint's shapes (the server does not start)")
    if layers and isinstance(layers["config"], int) and layers["config"] > layers["tensors"]:
        effects.append(f"the engine builds {layers['config']} decoder layers and runs them all: layers "
                       f"{list(range(layers['tensors'], layers['config']))} get no tensor and keep their initial values")
    elif layers and isinstance(layers["config"], int):
        effects.append(f"the engine builds {layers['config']} decoder layer(s): the tensors of layers "
                       f"{list(range(layers['config'], layers['tensors']))} match no parameter and are dropped")
    evidence = {f"draft_{key}": ev(d["config"], f"{draft.config_path}: {d['key']}") for key, d in bad.items()}
    evidence.update({f"tensors_{key}": ev(d["tensors"], f"{draft.path}: {', '.join(d['from'][:3])} (shapes)")
                     for key, d in bad.items()})
    evidence["fields"] = {key: {"config": d["config"], "tensors": d["tensors"], "key": d["key"], "from": d["from"][:3]}
                          for key, d in bad.items()}
    return [Finding("draft-config-vs-tensors", "error",
                    "the draft's config disagrees with its own tensors: " + "; ".join(parts) + ": " + "; ".join(effects),
                    evidence, "set " + ", ".join(f"{d['key']} to {d['tensors']}" for d in bad.values())
                    + f" in {draft.config_path}", prevents_start=stops)]


@FAMILY.rule("hidden-size-mismatch", engines=ALL_ENGINES, severities=("error",), prevents_start="depends",
             summary="draft target_hidden_size (else hidden_size) ≠ the target's hidden size (text config for "
                     "multimodal targets)",
             fix="use the draft trained for this target")
def hidden_size_mismatch(facts: Facts) -> list[Finding]:
    """The draft's ``fc`` takes aux hidden states of width ``target_hidden_size``, else
    ``hidden_size`` (SGLang 0.5.23 ``srt/models/llama_eagle3.py``); a target of another width feeds
    it states it was not trained on (sglang#7011). When the draft's own ``fc.weight`` is
    ``n_aux`` × the target's width, the draft was trained on this target and only the config
    is wrong (the engine builds ``fc`` from the config, and the loader's shape assert stops it:
    that finding prevents start). A draft trained for another target loads, and only its
    proposals are wrong."""
    draft, target = facts.draft, facts.target
    if draft is None or target is None:
        return []
    th = draft.effective_target_hidden_size
    if th is None or target.hidden_size is None or th == target.hidden_size:
        return []
    key = "target_hidden_size" if draft.target_hidden_size is not None else "hidden_size"
    own = facts.config_vs_tensors.get("hidden_size") if key == "hidden_size" else None
    if own is not None and own["tensors"] == target.hidden_size:
        return []  # the tensors are this target's width, the config alone is wrong: draft-config-vs-tensors
    n_aux, n_aux_src = draft.aux_count()
    if draft.fc_in_features is not None and draft.fc_in_features == n_aux * target.hidden_size:
        return [Finding("hidden-size-mismatch", "error",
                        f"the draft's config says {key} {th}, but its own fc.weight takes {draft.fc_in_features} "
                        f"= {n_aux} × {target.hidden_size} inputs: it was trained on this target's "
                        f"{target.hidden_size}-wide states and the config is wrong; the engine builds fc for "
                        f"{n_aux} × {th} = {n_aux * th} inputs and its weight loader asserts (the server does "
                        "not start)",
                        {"draft_" + key: ev(th, draft.sources.get(key)),
                         "target_hidden_size": ev(target.hidden_size, target.sources.get("hidden_size")),
                         "fc_in_features": ev(draft.fc_in_features, draft.sources.get("fc_in_features")),
                         "num_aux": ev(n_aux, n_aux_src)},
                        f"set {key} to {target.hidden_size} in the draft's config", prevents_start=True)]
    return [Finding("hidden-size-mismatch", "error",
                    f"the draft expects target hidden states {th} wide ({key}) but the target's are "
                    f"{target.hidden_size}: the draft was trained for another target",
                    {"draft_" + key: ev(th, draft.sources.get(key)),
                     "target_hidden_size": ev(target.hidden_size, target.sources.get("hidden_size"))},
                    "use the draft trained for this target")]


@FAMILY.rule("vocab-size-mismatch", engines=ALL_ENGINES, severities=("error",),
             summary="draft vocab_size ≠ target vocab_size",
             fix="use the draft trained for this target's tokenizer")
def vocab_size_mismatch(facts: Facts) -> list[Finding]:
    """The draft's (full) ``vocab_size`` is the target tokenizer's: the draft shares the target's
    embedding and maps its logits to target ids (SGLang 0.5.23 ``eagle_worker_v2.py``
    ``init_lm_head``); another vocab means another tokenizer."""
    draft, target = facts.draft, facts.target
    if draft is None or target is None or draft.vocab_size is None or target.vocab_size is None \
            or draft.vocab_size == target.vocab_size:
        return []
    return [Finding("vocab-size-mismatch", "error",
                    f"draft vocab_size {draft.vocab_size} ≠ target vocab_size {target.vocab_size}",
                    {"draft_vocab_size_field": ev(draft.vocab_size, draft.sources.get("vocab_size")),
                     "target_vocab_size": ev(target.vocab_size, target.sources.get("vocab_size"))},
                    "use the draft trained for this target's tokenizer")]


@FAMILY.rule("context-length-mismatch", engines=ALL_ENGINES, severities=("warning",),
             summary="draft max_position_embeddings < the context the server will serve (--context-length, else the "
                     "target's max_position_embeddings)",
             fix="raise the draft's max_position_embeddings, or serve a shorter context")
def context_length_mismatch(facts: Facts) -> list[Finding]:
    """The server serves ``--context-length`` tokens, else the target's
    ``max_position_embeddings``; a draft configured (and usually trained) for fewer positions
    accepts less and less on long prompts (SpecForge #271: a 2048 draft on a 40960 target). The
    draft's value may sit in ``transformer_layer_config`` (speculators format). On vLLM the served
    length is ``--max-model-len``; vLLM 0.32.0 raises the draft's ``max_position_embeddings`` to it
    (``config/speculative.py`` ``_maybe_override_draft_max_position_embeddings``: the rotary cache
    no longer overflows, #48894), but positions the draft was never trained on stay untrained."""
    draft, target, launch = facts.draft, facts.target, facts.launch
    if draft is None or target is None:
        return []
    dmpe, dmpe_src = draft.config.get("max_position_embeddings"), f"{draft.config_path}: max_position_embeddings"
    if dmpe is None and isinstance(draft.config.get("transformer_layer_config"), dict):
        dmpe = draft.config["transformer_layer_config"].get("max_position_embeddings")
        dmpe_src = f"{draft.config_path}: transformer_layer_config.max_position_embeddings"
    flag = "--max-model-len" if facts.engine_name == "vllm" else "--context-length"
    try:
        ctx_flag, _ = int_flag(launch, flag) if launch is not None else (None, None)
    except LaunchCommandError:  # a flag this command's table does not define: no served length from it
        ctx_flag = None
    ctx, csrc = (ctx_flag, f"launch command: {flag}") if ctx_flag else (
        target.max_position_embeddings, target.sources.get("max_position_embeddings"))
    if not (isinstance(dmpe, int) and ctx is not None and dmpe < ctx):
        return []
    fix = f"set max_position_embeddings to {ctx} in {draft.config_path}"
    if not ctx_flag:
        fix += f", or serve with {flag} {dmpe}"
    return [Finding("context-length-mismatch", "warning",
                    f"the draft's max_position_embeddings {dmpe} is below the {ctx}-token context the server "
                    "will serve: acceptance decays on long prompts",
                    {"draft_max_position_embeddings": ev(dmpe, dmpe_src), "served_context": ev(ctx, csrc)}, fix)]


@FAMILY.rule("rope-mismatch", engines=ALL_ENGINES, severities=("info",),
             summary="draft rope_theta or rope_scaling type differ from the target's",
             fix="align them, or confirm training used them")
def rope_mismatch(facts: Facts) -> list[Finding]:
    """Harmless if the draft was trained with this config, a known source of small losses when
    training ignored it. A missing ``rope_theta`` means 10000 (the Llama default); numbers compare
    by value; ``type`` and ``rope_type`` are the same key; ``rope_parameters`` (transformers ≥ 4.56)
    is read too."""
    draft, target = facts.draft, facts.target
    if draft is None or target is None:
        return []
    dt, dts, dk, dks = _rope(draft.config, draft.config_path)
    tc = target.config.get("text_config") if target.text_config_used else None
    tt, tts, tk, tks = _rope(tc if isinstance(tc, dict) else target.config,
                             target.config_path + (" text_config" if target.text_config_used else ""))
    if dt == tt and dk == tk:
        return []
    return [Finding("rope-mismatch", "info",
                    f"draft rope (theta {dt:g}, scaling {dk}) differs from the target's (theta {tt:g}, scaling "
                    f"{tk}); harmless if the draft was trained with this config",
                    {"draft_rope_theta": ev(dt, dts), "target_rope_theta": ev(tt, tts),
                     "draft_rope_scaling_type": ev(dk, dks), "target_rope_scaling_type": ev(tk, tks)},
                    "align them, or confirm training used them")]


@FAMILY.fixes_with
def config_fixes(facts: Facts, findings: list[Finding], given: dict) -> list[Fix]:
    """Config fields aligned in a copy of the draft where the draft's own tensors (or the engine)
    say what the field must be: ``hidden_size``, ``intermediate_size``, ``num_hidden_layers`` and
    the heads (where ``head_dim`` makes them unambiguous) → what the tensors' shapes say;
    ``architectures`` → the class the engine registers; a
    ``target_hidden_size`` that disagrees with the target while ``fc``'s width is num_aux × the
    target's hidden size; a ``vocab_size`` that disagrees with the target while ``t2d`` (a mask
    over the target vocab) has the target's length. A draft whose tensors were trained for another
    target cannot be repaired: the fix says to use the right draft."""
    draft, target = facts.draft, facts.target
    out: list[Fix] = []
    for f in findings:
        if f.severity != "error" or draft is None:
            continue
        if f.rule == "draft-config-vs-tensors":
            fields = f.evidence.get("fields") or {}
            config: dict[str, Any] = {}
            for key, d in fields.items():
                if d["key"].startswith("transformer_layer_config."):
                    nested = config.setdefault("transformer_layer_config", dict(draft.config["transformer_layer_config"]))
                    nested[key] = d["tensors"]
                else:
                    config[key] = d["tensors"]
            out.append(Fix("draft-copy", (f.rule,), ", ".join(f"{k} → {d['tensors']}" for k, d in fields.items())
                           + " in a copy of the draft (what its tensors say)",
                           repair=DraftRepair(config=config, reasons=[
                               f"draft-config-vs-tensors: {d['key']} {d['config']} → {d['tensors']} (the shapes of "
                               f"{', '.join(d['from'][:3])})" for d in fields.values()])))
        elif f.rule == "unknown-draft-architecture":
            best = f.evidence.get("proposed_architecture")
            if f.evidence.get("consequence_of") == "algorithm-mismatch":
                continue  # the launch is fixed by algorithm-mismatch's relaunch, not by an EAGLE-3 class
            if not best:
                out.append(Fix("none", (f.rule,), "the checkpoint's tensors do not load into any draft class this "
                               "engine registers", missing=f.fix))
                continue
            out.append(Fix("draft-copy", (f.rule,), f"architectures → [{best}] in a copy of the draft",
                           repair=DraftRepair(config={"architectures": [best]},
                                              reasons=[f"unknown-draft-architecture: architectures {draft.architectures}"
                                                       f" → [{best!r}], the EAGLE draft class the engine registers"])))
        elif f.rule == "hidden-size-mismatch" and target is not None and target.hidden_size:
            n_aux = draft.num_aux_hidden_states or (len(draft.aux_layer_ids) if isinstance(draft.aux_layer_ids, list)
                                                    and draft.aux_layer_ids else 3)
            if draft.fc_in_features == n_aux * target.hidden_size:
                out.append(Fix("draft-copy", (f.rule,), f"target_hidden_size → {target.hidden_size} in a copy of the "
                               "draft (its fc tensor already takes that width)",
                               repair=DraftRepair(config={"target_hidden_size": target.hidden_size},
                                                  reasons=[f"hidden-size-mismatch: target_hidden_size → "
                                                           f"{target.hidden_size} (fc.weight in_features "
                                                           f"{draft.fc_in_features} = {n_aux} × {target.hidden_size})"])))
            else:
                out.append(Fix("none", (f.rule,), "the draft was trained for another target",
                               missing=f"the EAGLE-3 draft trained for this target (hidden {target.hidden_size}): "
                                       "give launch_command with its --speculative-draft-model-path"))
        elif f.rule == "vocab-size-mismatch" and target is not None and target.vocab_size:
            t2d = facts.token_map.t2d if facts.token_map is not None else None
            if t2d is not None and t2d.ndim == 1 and t2d.shape[0] == target.vocab_size:
                out.append(Fix("draft-copy", (f.rule,), f"vocab_size → {target.vocab_size} in a copy of the draft "
                               "(its t2d spans the target's vocab)",
                               repair=DraftRepair(config={"vocab_size": target.vocab_size},
                                                  reasons=[f"vocab-size-mismatch: vocab_size {draft.vocab_size} → "
                                                           f"{target.vocab_size} (t2d has {t2d.shape[0]} entries, the "
                                                           "target's vocab)"])))
            else:
                out.append(Fix("none", (f.rule,), "the draft was trained for another tokenizer",
                               missing=f"the draft trained for this target's tokenizer (vocab {target.vocab_size})"))
    return out
