"""One fault, its consequences: which rule's finding makes which other rule fire, as data.

Each declaration (:meth:`workbench.rules.registry.Registry.implies`) names a cause rule, an effect
rule, the mechanism (how the engine turns the one fault into the other symptom, with its source:
the rules' own docstrings, which cite the engine's files) and the evidence condition under which
the link applies: a finding is a consequence only when its evidence points at the cause's object
(the same tensor, config field or width), never because the two merely co-occur. A rule that
knows the link itself marks its finding (``evidence["consequence_of"] = <cause rule>``); the mark
counts for a declared pair whatever the condition says. The diagnosis
(:func:`workbench.rules.links.attribute`, used by the diagnosis ledger and the doctor's report) reads these links to report each consequence
under its cause and to ask nothing of a consequence (no parameter, no fix, no probe, no relaunch).

Pairs left out on purpose (the mechanism does not hold on the rules' evidence): the weight rules
under ``unknown-draft-architecture`` or ``checkpoint-unreadable`` (they do not run then);
``hidden-size-mismatch`` from a malformed ``fc.weight`` (that rule reads the config's widths, not
the tensor); ``token-map-missing`` ⇒ ``token-map-invalid`` (the latter needs a ``d2t`` the former
says is absent).

Imported by :mod:`workbench.rules` after every family registered its rules (the registry checks
that both ids exist and that no link closes a cycle).
"""

from __future__ import annotations

from typing import Any

from workbench.rules.finding import Finding
from workbench.rules.registry import REGISTRY, Registry

__all__ = ["declare", "WEIGHT_RULES", "SHAPE_RULES", "AUX_RULES"]

#: The weight rules whose parameters are modelled from the draft's config (weights family).
WEIGHT_RULES = ("weights-dropped", "weights-missing", "weight-shape-mismatch", "lm-head-shape-mismatch",
                "head-dim-mismatch")
#: The rules whose findings are one tensor against the parameter the engine builds (the shape
#: evidence of ``workbench.engine.load_weights.WeightAnalysis.shape_problems``: ``tensor``,
#: ``shape``, ``param``, ``expected``).
SHAPE_RULES = ("weight-shape-mismatch", "lm-head-shape-mismatch", "head-dim-mismatch", "aux-count-mismatch")
#: The aux-layer rules that read which target layers are captured.
AUX_RULES = ("aux-config-unread", "aux-layer-ids-out-of-range", "aux-layer-offset-convention", "aux-ids-ignored")


def _value(evidence: dict, key: str) -> Any:
    """An evidence entry's value: ``ev()`` dicts (``{"value", "source"}``) or plain values."""
    v = evidence.get(key)
    return v.get("value") if isinstance(v, dict) and "value" in v else v


def _is_fc(f: Finding) -> bool:
    return str(f.evidence.get("param", "")).endswith("fc.weight") or str(f.evidence.get("tensor", "")).endswith(
        "fc.weight")


def _shape_holds_config_value(cause: Finding, effect: Finding) -> bool:
    """draft-config-vs-tensors ⇒ a shape rule: the shape the engine builds holds a field's config
    value where the checkpoint's tensor holds the value its tensors say (the same field, the same
    width), e.g. hidden_size 128 vs 160: ``[128, 480]`` built, ``[160, 480]`` in the checkpoint."""
    built, got = effect.evidence.get("expected"), effect.evidence.get("shape")
    if not (isinstance(built, (list, tuple)) and isinstance(got, (list, tuple)) and len(built) == len(got)):
        return False
    for d in (cause.evidence.get("fields") or {}).values():
        if any(b == d["config"] and g == d["tensors"] for b, g in zip(built, got)):
            return True
    return False


def _missing_from_config_field(cause: Finding, effect: Finding) -> bool:
    """draft-config-vs-tensors ⇒ weights-missing / weights-dropped: the layers the config's layer
    count adds (no tensor fills them) or drops (their tensors match nothing)."""
    layers = (cause.evidence.get("fields") or {}).get("num_hidden_layers")
    if not layers:
        return False
    lo, hi = sorted((layers["config"], layers["tensors"]))
    names = list(effect.evidence.get("missing") or []) + list(effect.evidence.get("dropped") or [])
    extra = [f"layers.{i}." for i in range(lo, hi)]
    return bool(names) and all(any(x in n for x in extra) for n in names)


def _hidden_from_config_hidden_size(cause: Finding, effect: Finding) -> bool:
    """draft-config-vs-tensors ⇒ hidden-size-mismatch: the width the latter reads is the config's
    ``hidden_size`` the former found wrong (no ``target_hidden_size``: the fc width falls back to it)."""
    field = (cause.evidence.get("fields") or {}).get("hidden_size")
    return field is not None and "draft_hidden_size" in effect.evidence and \
        _value(effect.evidence, "draft_hidden_size") == field["config"]


def _draft_width(cause: Finding) -> int | None:
    """The width hidden-size-mismatch found in the draft's config (``target_hidden_size``, else ``hidden_size``)."""
    for key in ("draft_target_hidden_size", "draft_hidden_size"):
        if key in cause.evidence:
            return _value(cause.evidence, key)
    return None


def _own_embedding_for_width(cause: Finding, effect: Finding) -> bool:
    """hidden-size-mismatch ⇒ weights-missing: the only parameters without a tensor are the
    draft's own embedding, required because the config's ``target_hidden_size`` differs from its
    ``hidden_size`` (the finding's ``why`` says so: SGLang 0.5.23 ``llama.py`` ``set_embed``)."""
    missing = effect.evidence.get("missing") or []
    why = effect.evidence.get("why") or {}
    return bool(missing) and "draft_target_hidden_size" in cause.evidence and all(
        "embed_tokens" in m and "target_hidden_size" in str(why.get(m.split(" ")[0], "")) for m in missing)


def _fc_built_for_width(cause: Finding, effect: Finding) -> bool:
    """hidden-size-mismatch ⇒ the fc's width (aux-count-mismatch, weight-shape-mismatch on fc):
    the engine builds (or the rule expects) fc over n × the config's wrong width."""
    width = _draft_width(cause)
    if not width:
        return False
    if "target_hidden" in effect.evidence:  # aux-count-mismatch's own comparison
        return effect.evidence["target_hidden"] == width
    built = effect.evidence.get("expected")
    return _is_fc(effect) and isinstance(built, (list, tuple)) and built[-1] % width == 0 and built[-1] != \
        (effect.evidence.get("shape") or [None])[-1]


def _same_fc_tensor(cause: Finding, effect: Finding) -> bool:
    """weight-shape-mismatch on ``fc.weight`` ⇒ aux-count-mismatch: the fc width the latter reads
    is the columns of the very tensor the former found malformed (its rows are wrong too: a
    transposed or mis-exported fc), so the aux count is not what is wrong."""
    if not _is_fc(cause):
        return False
    shape = cause.evidence.get("shape") or []
    if "fc_in_features" in effect.evidence:
        return bool(shape) and _value(effect.evidence, "fc_in_features") == shape[-1]
    return _is_fc(effect) and effect.evidence.get("tensor") == cause.evidence.get("tensor")


def _eagle1_fc(cause: Finding, effect: Finding) -> bool:
    """algorithm-mismatch ⇒ aux-count-mismatch: the fc width the aux count disagrees with is the
    same fc the algorithm rule read, 2 × the target's width (an EAGLE-1/2 fc launched as EAGLE3)."""
    fc = _value(cause.evidence, "fc_in_features")
    th = _value(cause.evidence, "target_hidden_size")
    return fc is not None and _value(effect.evidence, "fc_in_features") == fc and th is not None and fc == 2 * th


def _lm_head_rows_from_vocab(cause: Finding, effect: Finding) -> bool:
    """vocab-size-mismatch ⇒ lm-head-shape-mismatch: the engine builds ``lm_head`` with the
    config's wrong ``vocab_size`` rows (no ``draft_vocab_size``: the draft's vocab is its full one)."""
    built = effect.evidence.get("expected")
    return isinstance(built, (list, tuple)) and bool(built) and built[0] == _value(cause.evidence,
                                                                                 "draft_vocab_size_field")


def _same_target_class(cause: Finding, effect: Finding) -> bool:
    """target-no-aux-capture ⇒ an aux-layer rule: the effect's captured layers are read from the
    same target class, the one that has no capture method (its evidence names that class)."""
    cls = _value(cause.evidence, "target_architecture")
    return bool(cls) and str(cls) in repr(effect.evidence)


def declare(registry: Registry = REGISTRY) -> None:
    """Declare every link in ``registry`` (:meth:`~workbench.rules.registry.Registry.implies`)."""
    cfg = ("both engines build the draft from config.json alone, then load the checkpoint into it (SGLang 0.5.23 "
           "srt/models/llama_eagle3.py LlamaForCausalLMEagle3; vLLM 0.32.0 model_executor/models/llama_eagle3.py "
           "Eagle3LlamaForCausalLM): a config field that disagrees with the tensors gives parameters of the "
           "config's sizes (draft-config-vs-tensors, weights family docstring)")
    for effect in SHAPE_RULES[:3]:
        registry.implies("draft-config-vs-tensors", effect, when=_shape_holds_config_value,
                         mechanism=cfg + ": the weight loader asserts on the tensor of the field's other width "
                                         "(SGLang srt/model_loader/weight_utils.py; vLLM model_loader/weight_utils.py:"
                                         "1485) — on vLLM a head-count fault dies earlier, building the draft's "
                                         "attention (layers/attention/attention.py:329)")
    for effect in ("weights-missing", "weights-dropped"):
        registry.implies("draft-config-vs-tensors", effect, when=_missing_from_config_field,
                         mechanism=cfg + ": another num_hidden_layers builds layers no tensor fills, or drops the "
                                         "tensors of the layers it does not build")
    registry.implies("draft-config-vs-tensors", "hidden-size-mismatch", when=_hidden_from_config_hidden_size,
                     mechanism="fc's input width is target_hidden_size, else hidden_size (llama_eagle3.py in SGLang "
                               "0.5.23 srt/models and vLLM 0.32.0 model_executor/models, fc_input_size): a wrong "
                               "hidden_size is also the width the draft expects of the target")
    registry.implies("hidden-size-mismatch", "weights-missing", when=_own_embedding_for_width,
                     mechanism="SGLang 0.5.23 llama.py set_embed keeps the draft's own embedding when "
                               "target_hidden_size ≠ hidden_size: the wrong target_hidden_size makes the draft need "
                               "an embed_tokens tensor it was never trained with")
    for effect in ("aux-count-mismatch", "weight-shape-mismatch"):
        registry.implies("hidden-size-mismatch", effect, when=_fc_built_for_width,
                         mechanism="the engine builds fc over num_aux × target_hidden_size (SGLang 0.5.23 srt/models/"
                                   "llama_eagle3.py; vLLM 0.32.0 model_executor/models/llama_eagle3.py:221): the "
                                   "config's wrong width is the fc width the checkpoint's tensor is compared with")
    registry.implies("weight-shape-mismatch", "aux-count-mismatch", when=_same_fc_tensor,
                     mechanism="aux-count-mismatch reads fc's input width from fc.weight's columns "
                               "(DraftFacts.fc_in_features): a malformed fc.weight (transposed, mis-exported) gives a "
                               "width that is no aux count at all")
    for effect in ("aux-count-mismatch", "unknown-draft-architecture"):
        registry.implies("algorithm-mismatch", effect, when=_eagle1_fc if effect == "aux-count-mismatch" else None,
                         mechanism="an EAGLE-1/2 draft (fc 2× hidden) launched with EAGLE3: the engine feeds fc 3 aux "
                                   "states and builds an EAGLE-3 class, neither of which this draft is "
                                   "(aux_layers.py / configs.py docstrings); the relaunch with EAGLE fixes both")
    registry.implies("method-draft-mismatch", "aux-count-mismatch",
                     mechanism="vLLM 0.32.0: an EAGLE-1/2 draft under method eagle3 gets an fc over 3 aux states "
                               "(llama_eagle3.py fc_input_size); method-draft-mismatch's fix fixes both")
    registry.implies("vocab-size-mismatch", "lm-head-shape-mismatch", when=_lm_head_rows_from_vocab,
                     mechanism="without draft_vocab_size the draft's lm_head has vocab_size rows "
                               "(ParallelLMHead(draft_vocab_size or vocab_size, hidden), llama_eagle3.py in SGLang 0.5.23 and "
                               "vLLM 0.32.0): the wrong "
                               "vocab_size is the row count the checkpoint's lm_head is compared with")
    registry.implies("weights-dropped", "weights-missing",
                     mechanism="the names the loader matches to nothing are the ones the missing parameters were "
                               "meant to get: SGLang 0.5.23 (srt/models/llama_eagle3.py load_weights) skips them and "
                               "the parameters keep their initial values; vLLM 0.32.0's AutoWeightsLoader raises on "
                               "them (model_executor/models/utils.py), so the engine stops before those parameters "
                               "are filled. Renaming them back fills both (weights_vllm.py marks it)")
    for effect in AUX_RULES:
        registry.implies("target-no-aux-capture", effect, when=_same_target_class,
                         mechanism="a target class without set_eagle3_layers_to_capture captures no layer at all "
                                   "(the engine raises when EAGLE3 sets up capture): which layers the ids name, and "
                                   "where they are read from, cannot matter until the target can capture")


declare()
