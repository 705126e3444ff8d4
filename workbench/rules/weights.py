"""Fault family: the draft's weights and token map against what the engine loads.

Rules: ``weights-dropped`` (checkpoint tensors ``load_weights`` matches to no parameter: skipped
without a word), ``weights-missing`` (parameters no tensor fills: they keep their initial values),
``weight-shape-mismatch``, ``lm-head-shape-mismatch``, ``head-dim-mismatch`` (a matched tensor of
the wrong shape: the weight loader asserts at start-up), ``token-map-missing`` (a reduced draft vocab without ``d2t``),
``token-map-invalid`` (a ``d2t`` that is not an offset table the engine can use). They apply to a
readable checkpoint of every draft class the box's engine registers (EAGLE-3, EAGLE-1/2 and MTP
drafts: :func:`workbench.engine.drafts.registered_draft_classes`), each with its own
``load_weights`` read from that engine's source (:func:`workbench.engine.drafts.load_weights_facts`:
its renames, ``model.`` prefix, stacked shards, skipped names, ``d2t`` read, what it does with a
name no parameter has — skip silently, skip with a warning, or raise ``KeyError`` — and its
modules and ``lm_head`` handling), so the same checkpoint is judged differently where releases
differ (before 0.5.12 layer 0 is ``midlayer`` and ``layers.0.*`` names are dropped; on 0.4.6–0.4.8 a
stacked name no parameter has raises at start-up; ``Eagle3DeepseekV2ForCausalLM`` keeps its own
``lm_head`` whenever ``draft_vocab_size`` is set). ``LlamaForCausalLMEagle3`` is checked parameter by
parameter with shapes (:func:`workbench.engine.load_weights.expected_parameters`, laid out as the
release builds it); any other class module by module (its top-level modules; inner names and
shapes are not read, and the evidence says so). Without the engine's source the rules use SGLang
0.5.23's ``LlamaForCausalLMEagle3`` as shipped tables (evidence ``modelled_engine``). Shapes come
from the safetensors headers and ``d2t``/``t2d`` are read by byte range — no model is loaded. The fc's width (``aux-count-mismatch``) is the aux
layers' family; an unreadable ``d2t`` is ``checkpoint-unreadable`` (readability). When the draft's
config disagrees with its own tensors (``draft-config-vs-tensors``, configs family), the parameters
modelled from that config are wrong too: every finding here then carries
``evidence["consequence_of"] = "draft-config-vs-tensors"`` and is no root cause of its own.

On a vLLM launch the weight rules follow vLLM's own EAGLE-3 loading instead (:mod:`workbench.rules.weights_vllm`,
read from the box's vLLM by :mod:`workbench.engine.vllm_load_weights`, vLLM 0.32.0 as fallback): a name
no parameter has stops vLLM at start-up (``ValueError``), a missing parameter keeps its initial value
silently, a missing ``lm_head`` is replaced by the target's. The repair of dropped names
(:mod:`workbench.rules.weights_repair`) learns the checkpoint's naming and follows each new name through
the launch's engine's loader.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.checkpoint import DraftFacts, TargetFacts
from workbench.engine.drafts import follow
from workbench.engine.load_weights import _map as _map_modelled
from workbench.engine.load_weights import (
    LEGACY_NAME_MAP,
    MODELLED_ENGINE,
    STACKED,
    WeightAnalysis,
    analyse_weights,
    expected_parameters,
    map_checkpoint_name,
)
from workbench.rules.facts import Facts, TokenMap
from workbench.rules.finding import Finding
from workbench.rules.fix import DraftRepair, Fix, TensorData
from workbench.rules.readability import draft_checkpoint_findings, token_map_unreadable_findings
from workbench.rules.registry import ALL_ENGINES, Family, HypothesisSpec
from workbench.engine.vllm_load_weights import VllmLoadWeights
from workbench.engine.vllm_weights import follow_vllm
from workbench.rules.weights_repair import NameRepair, repair_names
from workbench.rules.weights_vllm import vllm_dropped_parts, vllm_missing_parts, vllm_shape_parts
from workbench.rules import vllm_checks

__all__ = ["FAMILY", "LEGACY_NAME_MAP", "STACKED", "MODELLED_ENGINE", "expected_parameters", "map_checkpoint_name",
           "check_token_map", "check_draft_weights", "token_map_summary"]

def _vllm_findings(said: list) -> list[Finding]:
    """This family's findings on a vLLM launch, from what :mod:`workbench.rules.vllm_checks` found
    (:class:`~workbench.rules.vllm_checks.Said`): the findings are made here, in the rules' own module."""
    return [Finding(s.rule, s.severity, s.message, s.evidence, s.fix, prevents_start=s.prevents_start) for s in said]


FAMILY = Family(
    "weights", "The draft's weights and token map against what the engine loads", __doc__,
    module=__name__, probes=("draft-weights-unmatched", "draft-params-at-init", "draft-d2t"),
    hypotheses=(
        HypothesisSpec("weights-loaded", "Draft tensors are dropped by load_weights (names it matches to nothing), "
                       "parameters get no tensor and keep their initial values, or a tensor has the wrong shape.",
                       rules=("weights-dropped", "weights-missing", "weight-shape-mismatch", "lm-head-shape-mismatch",
                              "head-dim-mismatch"),
                       probes=("draft-weights-unmatched", "draft-params-at-init"), order=10),
        HypothesisSpec("token-map", "The draft's token map (d2t) is missing or invalid: draft ids become the wrong "
                       "target ids and the proposals are other tokens.",
                       rules=("token-map-missing", "token-map-invalid", "token-map-unordered"), probes=("draft-d2t",),
                       order=40),
    ))


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


def _shape_finding(prob: dict) -> Finding:
    """A matched tensor of the wrong shape (``WeightAnalysis.shape_problems`` entry), under the
    rule the mismatch belongs to."""
    return Finding(prob["rule"], "error",
                   f"{prob['tensor']} has shape {prob['shape']}, the engine builds {prob['param']}"
                   f"{'' if prob['shard'] is None else ' shard ' + str(prob['shard'])} as "
                   f"{prob['expected']}; its weight loader asserts, so the server fails to start", prob, None)


def shape_findings(w: WeightAnalysis, rule_id: str) -> list[Finding]:
    """The shape mismatches of ``w`` that belong to ``rule_id``."""
    return [_shape_finding(prob) for prob in w.shape_problems if prob["rule"] == rule_id]


def _vllm_weight_findings(rule_id: str, parts: list[dict]) -> list[Finding]:
    """``rule_id``'s findings from the parts :mod:`workbench.rules.weights_vllm` worked out on vLLM."""
    return [Finding(rule_id, p["severity"], p["message"], p["evidence"], p["fix"], prevents_start=p["prevents_start"])
            for p in parts]


def _shapes(facts: Facts, rule_id: str) -> list[Finding]:
    """``rule_id``'s shape findings for the launch's engine: vLLM's loading on a vLLM launch
    (:attr:`Facts.vllm_weights`), else SGLang's (:attr:`Facts.weights`)."""
    if facts.engine_name == "vllm":
        w = facts.vllm_weights
        return _vllm_weight_findings(rule_id, vllm_shape_parts(facts.draft, w, rule_id)) if w is not None else []
    w = facts.weights
    return shape_findings(w, rule_id) if w is not None else []


#: Dropped names that are a fault even when every parameter gets a tensor: a trained lm_head the
#: engine replaces (tied embeddings), a token map under a name the loader does not read.
_DROPPED_MEANS_A_FAULT = ("lm_head", "d2t", "t2d", "draft_id_to_target_id", "target_id_to_draft_id", "hot_token")


def _engine_evidence(w: WeightAnalysis) -> dict:
    """Where the load_weights facts come from: ``engine`` (``read from <file>:<line>`` or
    ``modelled: ...``), ``modelled_engine`` (kept for readers of the modelled case) and, when read,
    the facts themselves."""
    out = {"engine": w.engine if w.load_facts is not None else f"modelled: {w.engine} (engine source not read)",
           "draft_class": w.cls}
    if w.load_facts is None:
        out["modelled_engine"] = MODELLED_ENGINE
    else:
        out["load_weights"] = w.load_facts
    if w.module_level:
        out["checked"] = "module level: the class's top-level modules read from its source; inner names and shapes not"
    return out


def dropped_findings(draft: DraftFacts, w: WeightAnalysis) -> list[Finding]:
    """``weights-dropped`` for an analysis (see :func:`weights_dropped`): names ``load_weights``
    matches to no parameter — skipped silently, skipped with a warning in the server's log, or (a
    release whose loader indexes ``params_dict[name]`` unguarded) a ``KeyError`` that stops the
    server (``prevents_start``)."""
    out: list[Finding] = []
    where = f"{w.cls}.load_weights ({w.engine})"
    if w.raises:
        out.append(Finding("weights-dropped", "error",
                           f"{len(w.raises)} checkpoint tensors match no parameter of {w.cls} and its load_weights "
                           f"raises KeyError on them (params_dict[name] unguarded): the server does not start: "
                           f"{w.raises[:5]}",
                           {"raises": w.raises, "dropped": w.dropped, "checkpoint": draft.path, **_engine_evidence(w)},
                           "rename them to the names this release's draft class has", prevents_start=True))
    if not w.dropped:
        return out
    how = ("skipped with a warning in the server's log" if set(w.dropped) <= set(w.warned) else
           "silently skipped" if not w.warned else f"skipped ({len(w.warned)} with a warning in the server's log)")
    meaningful = [n for n in w.dropped if any(k in n for k in _DROPPED_MEANS_A_FAULT)]
    evidence = {"dropped": w.dropped, "warned": w.warned, "checkpoint": draft.path, **_engine_evidence(w)}
    if not w.missing and not meaningful:
        # every parameter still gets a tensor and nothing skipped is a head or a token map: what is
        # skipped is extra (a training-only buffer, an export's leftover) — worth knowing, no fault
        return out + [Finding("weights-dropped", "warning",
                              f"{len(w.dropped)} checkpoint tensor(s) match no parameter of {w.cls} and are "
                              f"{how}: {w.dropped[:5]}; every parameter still gets a tensor, so nothing is left "
                              "at its initial value", evidence,
                              "nothing to do unless the engine should load them under another name")]
    return out + [Finding("weights-dropped", "error",
                          f"{len(w.dropped)} checkpoint tensors match no parameter of {w.cls} after "
                          f"the engine's renames and are {how}: {w.dropped[:5]} ({where})", evidence,
                          "rename them to the engine's names (fc.*, layers.0.* or midlayer.*, norm.*, lm_head.*, "
                          "optionally under model.)" if w.load_facts is None else
                          f"rename them to the names {w.cls}.load_weights of this release maps (see evidence "
                          "load_weights: renames, prefix)")]


def missing_findings(draft: DraftFacts, w: WeightAnalysis) -> list[Finding]:
    """``weights-missing`` for an analysis (see :func:`weights_missing`): the required parameters
    no tensor fills. The draft's own ``lm_head`` among them is named with its consequence (the
    class keeps it, so it stays at its initial values: every draft token is noise)."""
    if not w.missing:
        return []
    why = {m.split(" ")[0]: w.spec[m.split(" ")[0]]["why"] for m in w.missing}
    head = [m for m in w.missing if m.split(" ")[0] in ("lm_head", "lm_head.weight")]
    msg = (f"{len(w.missing)} parameters of the draft class get no tensor and keep their "
           f"initial values: {w.missing}")
    if head and w.spec[head[0]].get("lm_head"):
        msg += (f"; the draft's lm_head is its own ({w.cls} does not take the target's for this config), so it "
                "stays at its initial values and every draft token is noise (accept length about 1.00)")
    return [Finding("weights-missing", "error", msg,
                    {"missing": w.missing, "checkpoint": draft.path, "why": why, **_engine_evidence(w)},
                    "re-export the draft with its trained lm_head (or, for a full-vocabulary draft, remove "
                    "draft_vocab_size so the engine takes the target's head)"
                    if head and w.spec[head[0]].get("lm_head") else None)]


def token_map_missing_findings(draft: DraftFacts, tm: TokenMap) -> list[Finding]:
    """``token-map-missing`` for a token map (see :func:`token_map_missing`)."""
    dv, vocab = tm.draft_vocab, tm.vocab
    if tm.d2t_name is not None or dv is None or vocab is None or dv >= vocab:
        return []
    return [Finding("token-map-missing", "error",
                    f"draft_vocab_size {dv} < vocab_size {vocab} and the checkpoint has no d2t: draft "
                    "token ids would be used as target ids",
                    {"draft_vocab_size": dv, "vocab_size": vocab, "checkpoint": draft.path},
                    "export d2t/t2d with the draft")]


def token_map_summary(tm: TokenMap) -> dict[str, Any] | None:
    """What was read of the token map, for the evidence: name, length, dtype, t2d count, the
    problems :func:`check_token_map` found, the target-id range and whether it is sorted;
    ``None`` when no ``d2t`` was read."""
    if tm.d2t is None:
        return None
    d2t, t2d = tm.d2t, tm.t2d
    lm_rows = tm.draft_vocab if tm.draft_vocab is not None else tm.vocab
    problems = check_token_map(d2t, tm.vocab, t2d, source=tm.d2t_name, draft_vocab_size=lm_rows)
    summary: dict[str, Any] = {"name": tm.d2t_name, "t2d_name": tm.t2d_name, "len": int(d2t.size),
                               "dtype": str(d2t.dtype),
                               "t2d_true": int(np.count_nonzero(t2d)) if t2d is not None else None,
                               "problems": problems}
    if d2t.ndim == 1 and d2t.size and np.issubdtype(d2t.dtype, np.integer):
        target_ids = d2t.astype(np.int64) + np.arange(len(d2t), dtype=np.int64)
        summary.update({"target_id_min": int(target_ids.min()), "target_id_max": int(target_ids.max()),
                        "sorted": bool(np.all(np.diff(target_ids) > 0))})
    return summary


def token_map_invalid_findings(tm: TokenMap) -> list[Finding]:
    """``token-map-invalid`` for a token map (see :func:`token_map_invalid`)."""
    summary = token_map_summary(tm)
    if summary is None or not summary["problems"]:
        return []
    d2t = tm.d2t
    lm_rows = tm.draft_vocab if tm.draft_vocab is not None else tm.vocab
    # start-up: a d2t the draft's first forward cannot index with (see token_map_invalid)
    stops = d2t.ndim != 1 or not np.issubdtype(d2t.dtype, np.integer) or (lm_rows is not None and d2t.size < lm_rows)
    return [Finding("token-map-invalid", "error", "; ".join(summary["problems"]), summary, None,
                    prevents_start=bool(stops))]


def consequences_of_config(facts: Facts, findings: list[Finding]) -> list[Finding]:
    """``findings`` marked as consequences of ``draft-config-vs-tensors`` when the draft's config
    disagrees with its own tensors (:attr:`Facts.config_vs_tensors`): ``evidence["consequence_of"]``
    names that rule and the message says so. Returned unchanged otherwise, and on a launch whose
    engine that rule does not check (no cause to report them under)."""
    from workbench.rules.registry import REGISTRY

    bad = facts.config_vs_tensors
    engine = facts.engine_name
    if engine is not None and engine not in getattr(REGISTRY.get("draft-config-vs-tensors"), "engines", (engine,)):
        return findings
    if not bad or not findings:
        return findings
    fields = ", ".join(f"{d['key']} {d['config']} vs {d['tensors']}" for d in bad.values())
    for f in findings:
        f.evidence["consequence_of"] = "draft-config-vs-tensors"
        f.message += f" (a consequence of the config disagreeing with its own tensors: {fields})"
    return findings


@FAMILY.rule("weights-dropped", engines=ALL_ENGINES, severities=("error", "warning"), prevents_start="depends",
             summary="a checkpoint tensor name matches no parameter after the engine's renames (it is silently "
                     "skipped)",
             fix="rename the tensors to the engine's names (a rename map)")
def weights_dropped(facts: Facts) -> list[Finding]:
    """The draft class's own ``load_weights`` as the box's engine has it (read from its source;
    SGLang 0.5.23 ``LlamaForCausalLMEagle3.load_weights`` without the source) is followed for every
    checkpoint name (:func:`workbench.engine.drafts.follow`): its renames (0.5.23 ``llama_eagle3.py``
    ``midlayer`` → ``layers.0``, ``aux_norm_*`` → ``fc_norm.*``; ``kimi_k25_eagle3.py`` ``^layers.0.`` →
    ``midlayer.``), the stacked q/k/v and gate/up shards, the ``model.`` prefix, a hand-off to the
    base class's ``load_weights`` (0.4.6–0.4.8). A name that matches no parameter is skipped with no
    warning (``if name in params_dict:`` without ``else``), skipped with a warning in the log
    (``kimi_k25_eagle3.py``: ``Eagle3 MLA: skipping unexpected weight``), or makes the loader raise
    ``KeyError`` (0.4.6 ``llama.py``: ``param = params_dict[name]`` in the stacked branch, the failure
    of sglang#9135): that finding prevents start-up. The names that land nowhere are listed.

    On a vLLM launch the draft's vLLM class (``Eagle3LlamaForCausalLM`` / ``Eagle3Qwen3ForCausalLM``)
    is followed instead (:mod:`workbench.rules.weights_vllm`, read from the box's vLLM, 0.32.0 as
    fallback): ``load_weights`` skips ``t2d``, renames ``d2t``, prefixes ``model.`` unless ``lm_head``;
    ``hf_to_vllm_mapper`` maps ``midlayer.`` and the stacked shards; a name no module or parameter has
    makes ``AutoWeightsLoader`` raise ``ValueError`` (the engine does not start, measured), an
    unexpected ``*.bias`` or a mapper's ``None`` is dropped silently."""
    if facts.engine_name == "vllm":
        w = facts.vllm_weights
        found = _vllm_weight_findings("weights-dropped", vllm_dropped_parts(facts.draft, w)) if w is not None else []
    else:
        w = facts.weights
        found = dropped_findings(facts.draft, w) if w is not None else []
    return consequences_of_config(facts, _concrete_dropped_fix(facts.draft, w, found))


@FAMILY.rule("weights-missing", engines=ALL_ENGINES, severities=("error",), prevents_start="depends",
             summary="a parameter of the draft class gets no tensor (fc, layer 0 projections and norms, final norm, "
                     "lm_head unless tied or taken from the target)",
             fix="—")
def weights_missing(facts: Facts) -> list[Finding]:
    """The parameters the draft class builds for this config that no checkpoint tensor fills keep
    their random initial values; a stacked parameter missing a shard counts. For
    ``LlamaForCausalLMEagle3``: :func:`workbench.engine.load_weights.expected_parameters` (``fc`` over
    num_aux × target hidden, layer 0's ``qkv_proj`` over 2 × hidden, the norms, ``lm_head`` of
    ``draft_vocab_size`` rows unless tied or taken from the target), laid out as the release builds
    it (``model.midlayer`` before 0.5.12). For another class: its unconditional top-level modules
    read from its ``__init__``, less those the worker replaces (``embed_tokens`` when the class has
    ``set_embed``; ``lm_head`` when tied, for EAGLE-1/2 and MTP drafts, or when the class sets
    ``load_lm_head_from_target`` for this config and the release's draft worker reads it). The
    public Kimi-K2.6 case: ``Eagle3DeepseekV2ForCausalLM`` (``kimi_k25_eagle3.py``, 0.5.12+) sets
    ``load_lm_head_from_target`` only when ``draft_vocab_size`` is missing, so with it set and no
    ``lm_head`` tensor the head stays at its initial values (accept length 1.00); the finding names
    the lines.

    On a vLLM launch (:mod:`workbench.rules.weights_vllm`): vLLM 0.32.0's ``Eagle3LlamaForCausalLM.load_weights``
    returns nothing, so the default loader's strict "weights were not initialized" check does not run:
    the engine starts and each parameter keeps its initial value (RMSNorm ones, linear weights
    ``torch.empty``; measured: no ``fc.weight`` → 61 of 669 draft tokens accepted, healthy 116/504); no
    ``lm_head.weight`` → the target's head is shared and its first ``draft_vocab_size`` rows score the
    draft's ids (measured: 0 of 846 accepted).
    Where the box's source shows the check runs, the finding prevents start-up."""
    if facts.engine_name == "vllm":
        w = facts.vllm_weights
        found = _vllm_weight_findings("weights-missing", vllm_missing_parts(facts.draft, w)) if w is not None else []
    else:
        w = facts.weights
        found = missing_findings(facts.draft, w) if w is not None else []
    return consequences_of_config(facts, _renames_supply(facts.draft, w, found))


def _slot_text(slots: list[str]) -> str:
    return ", ".join(slots[:6]) + (f" (+{len(slots) - 6} more)" if len(slots) > 6 else "")


def _reexport_for(w: WeightAnalysis, unfilled: list[str]) -> str:
    """What to re-export for the parameter slots ``unfilled`` (names as :class:`NameRepair` lists
    them): the trained ``lm_head`` when it is among them, the rest by name."""
    head = [u for u in unfilled if u.split(" ")[0] in ("lm_head", "lm_head.weight")]
    rest = [u for u in unfilled if u not in head]
    parts = (["its trained lm_head"] if head else []) + ([_slot_text(rest)] if rest else [])
    return "re-export the draft with " + " and ".join(parts)


def _renames_supply(draft: DraftFacts, w: WeightAnalysis | None, found: list[Finding]) -> list[Finding]:
    """``weights-missing`` findings' fix by what can fill the parameters: a checkpoint with no tensors
    says so; the dropped (or refused) tensors renamed by the checkpoint's naming
    (:func:`name_repair`) fill the parameters they map onto — the fix offers that rename whatever else
    is wrong, and asks for a re-export only of the parameters no rename can fill (each unmapped
    name's reason in ``evidence["unmapped"]``); the evidence lists the renames."""
    if not found or w is None:
        return found
    if draft is not None and draft.tensors is not None and not draft.tensors:
        for f in found:
            f.fix = (f"the checkpoint holds no tensors ({draft.path}): export the draft's trained weights into it "
                     "(nothing can be renamed or derived)")
            f.message += "; the checkpoint holds no tensors at all"
            f.evidence["tensors"] = 0
        return found
    if not (w.dropped or w.raises):
        return found
    rep = name_repair(draft, w)
    if not rep.renames:
        return found
    steps = "; ".join(s.describe() for s in rep.steps)
    verb = "refuses" if w.raises else "drops"
    # an unfilled slot a tensor would land on but for its shape: that tensor is the fault, not a re-export
    blocked = {u: why for u in rep.unfilled for why in rep.unmapped.values()
               if f"would land on {u.split(' ')[0]}" in why}
    absent = [u for u in rep.unfilled if u not in blocked]
    for f in found:
        if rep.unfilled:
            f.fix = (f"rename the {len(rep.renames)} tensor(s) the engine {verb} by the checkpoint's naming ({steps}) "
                     f"in a copy of the draft (the draft-copy fix does it): they fill every parameter but "
                     f"{_slot_text(rep.unfilled)}"
                     + (f"; {' | '.join(blocked.values())}" if blocked else "")
                     + (f"; no tensor of the checkpoint can fill {_slot_text(absent)}: " + _reexport_for(w, absent)
                        if absent else ""))
            f.evidence["unfilled"] = list(rep.unfilled)
            f.evidence["unmapped"] = dict(rep.unmapped)
        else:
            f.fix = (f"rename the {len(rep.renames)} tensor(s) the engine {verb} by the checkpoint's naming ({steps}): "
                     "they fill every one of these parameters (the draft-copy fix does it)")
        f.evidence["renames_supply"] = dict(rep.renames)
    return found


def _concrete_dropped_fix(draft: DraftFacts, w: WeightAnalysis | None, found: list[Finding]) -> list[Finding]:
    """``weights-dropped`` error findings' fix made concrete: the naming transform :func:`name_repair`
    learned (e.g. "strip the prefix '_orig_mod.' ... from 14 names") in a copy of the draft, and the
    names no transform maps with why; unchanged when no rename is found."""
    if not found or w is None or not (w.dropped or w.raises):
        return found
    rep = name_repair(draft, w)
    if not rep.renames:
        return found
    steps = "; ".join(s.describe() for s in rep.steps)
    for f in found:
        if f.severity != "error":
            continue
        left = [why for n, why in rep.unmapped.items()]
        f.fix = (f"in a copy of the draft, {steps} — on {len(rep.renames)} name(s), each followed through the "
                 "engine's loader onto a parameter that got no tensor (the draft-copy fix does it)"
                 + (f"; {len(left)} name(s) no rename maps: " + " | ".join(left[:3]) if left else ""))
        f.evidence["renames"] = dict(rep.renames)
    return found


@FAMILY.rule("weight-shape-mismatch", engines=ALL_ENGINES, severities=("error",), prevents_start="always",
             summary="a checkpoint tensor matched to a parameter has another shape than the engine builds for this "
                     "config (other than lm_head, head_dim and the fc width)",
             fix="the draft's config and checkpoint from the same training run")
def weight_shape_mismatch(facts: Facts) -> list[Finding]:
    """A tensor ``load_weights`` maps onto a parameter (SGLang 0.5.23 ``llama_eagle3.py``) whose
    shape differs from the parameter the engine built from the config: ``default_weight_loader``
    (``srt/model_loader/weight_utils.py``) and the parallel layers' loaders ``assert`` on it, so
    the server fails to start. The mismatches a more specific rule explains are its own
    (``lm-head-shape-mismatch``, ``head-dim-mismatch``, ``aux-count-mismatch``); a config that
    disagrees with its tensors makes these consequences of ``draft-config-vs-tensors``. On a vLLM launch the parameters vLLM
    builds (:func:`workbench.engine.vllm_weights.vllm_expected_parameters`) are compared: its weight loader
    fails the same way (``AssertionError``; ``RuntimeError`` from a stacked shard's ``narrow``), measured.
    A 2-D tensor whose shape is exactly the built one reversed (not square) is named stored transposed
    (``evidence["stored_transposed"]``), with a copy of the draft holding it transposed as its fix."""
    return consequences_of_config(facts, [_name_transposed(f) for f in _shapes(facts, "weight-shape-mismatch")])


def _name_transposed(f: Finding) -> Finding:
    """``f`` (a shape mismatch) saying the tensor is stored transposed when its shape is the built
    one reversed (:func:`workbench.rules.aux_layers.stored_transposed`; a stacked shard excluded)."""
    from workbench.rules.repair_check import stored_transposed

    e = f.evidence
    if e.get("shard") is None and stored_transposed(e.get("shape"), e.get("expected")):
        e["stored_transposed"] = True
        f.message = (f"{e.get('tensor')} is stored transposed: {e.get('shape')} is the {e.get('expected')} the engine "
                     "builds, reversed (a converter's [in, out] layout for a Linear that holds [out, in]) — "
                     + f.message)
        f.fix = f"a copy of the draft with {e.get('tensor')} transposed (its data, not only its header)"
    return f


@FAMILY.rule("lm-head-shape-mismatch", engines=ALL_ENGINES, severities=("error",), prevents_start="always",
             summary="lm_head.weight rows ≠ draft_vocab_size (or cols ≠ hidden)",
             fix="—")
def lm_head_shape_mismatch(facts: Facts) -> list[Finding]:
    """``ParallelLMHead(draft_vocab_size, hidden)`` (SGLang 0.5.23 ``llama_eagle3.py``); a checkpoint
    ``lm_head.weight`` of another shape (e.g. the target's vocab rows, speculators PR #74) makes the
    weight loader assert at start-up. On a vLLM launch the parameters vLLM
    builds (:func:`workbench.engine.vllm_weights.vllm_expected_parameters`) are compared: its weight loader
    fails the same way (``AssertionError``; ``RuntimeError`` from a stacked shard's ``narrow``), measured."""
    return consequences_of_config(facts, _shapes(facts, "lm-head-shape-mismatch"))


@FAMILY.rule("head-dim-mismatch", engines=ALL_ENGINES, severities=("error",), prevents_start="always",
             summary="a q/k/v or o projection's shape ≠ heads × head_dim (head_dim from config, else hidden/heads)",
             fix="set head_dim in the draft's config")
def head_dim_mismatch(facts: Facts) -> list[Finding]:
    """``LlamaAttention`` (SGLang 0.5.23 ``srt/models/llama.py``) sizes ``qkv_proj`` and ``o_proj``
    with ``head_dim`` from the config, else ``hidden_size // num_attention_heads``; a checkpoint
    trained with another head_dim has projections of another width and the loader asserts. On a vLLM launch the parameters vLLM
    builds (:func:`workbench.engine.vllm_weights.vllm_expected_parameters`) are compared: its weight loader
    fails the same way (``AssertionError``; ``RuntimeError`` from a stacked shard's ``narrow``), measured."""
    return consequences_of_config(facts, _shapes(facts, "head-dim-mismatch"))


@FAMILY.rule("token-map-missing", engines=ALL_ENGINES, severities=("error",),
             summary="draft_vocab_size < vocab_size and the checkpoint has no d2t",
             fix="export d2t/t2d with the draft")
def token_map_missing(facts: Facts) -> list[Finding]:
    """With a reduced draft vocab the draft's logits index draft ids; SGLang 0.5.23 maps them to
    target ids through ``hot_token_id`` (built from ``d2t`` in ``load_weights``). Without ``d2t`` the
    draft ids are used as target ids: every proposal is another token (AutoModel PR #2447).

    vLLM (:func:`workbench.rules.vllm_checks.token_map_missing`, read from the box's
    ``llama_eagle3.py``): ``draft_id_to_target_id`` is created as zeros whenever the draft vocab
    differs from the target's and stays zeros when the checkpoint has no ``d2t``; ``compute_logits``
    adds it to ``arange``: draft id i is proposed as target id i, silently."""
    tm = facts.token_map
    if tm is None:
        return []
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.token_map_missing(facts, tm))
    return token_map_missing_findings(facts.draft, tm)


@FAMILY.rule("token-map-invalid", severities=("error", "warning"), prevents_start="depends", engines=ALL_ENGINES,
             summary="d2t is not an integer offset table: draft_id + d2t[draft_id] outside [0, vocab), duplicates, "
                     "absolute ids, or t2d disagreeing with it",
             fix="—")
def token_map_invalid(facts: Facts) -> list[Finding]:
    """SGLang 0.5.23 ``llama_eagle3.py``: ``hot_token_id = d2t + arange(len(d2t))`` (target id =
    draft id + d2t[draft id]) and ``eagle_worker_v2.py`` indexes the target vocab with it, so every
    target id must lie in ``[0, vocab)``, no two draft ids may share one and ``len(d2t)`` must equal
    the draft lm_head's rows. A ``d2t`` of absolute ids is recognised; order alone is not a problem
    (:func:`check_token_map`). Start-up: a ``d2t`` that is not integer (or not one-dimensional)
    makes ``hot_token_id`` float, and the next draft step's embedding refuses float indices; one
    with fewer entries than the draft's lm_head rows is indexed past its end by the draft's top-k
    (``hot_token_id[topk_index]``, IndexError) — both in the draft's first forward, which the
    engine runs while it starts up (the sandbox box dies the same way); other invalid maps start
    and only propose wrong tokens (the symptom the diagnosis measures).

    vLLM 0.32.0 (:func:`workbench.rules.vllm_checks.token_map_invalid`, read from the box's
    ``llama_eagle3.py``): a ``d2t`` of another shape than ``[draft_vocab_size]`` fails the weight
    loader's assert (the server does not start); another dtype is cast to int64 as it loads (whole
    float ids work: a warning), an id outside the vocab raises in the first request's first draft
    step (the engine dies; start-up does not run draft logits), duplicates and absolute ids are
    silent; ``t2d`` is skipped (its disagreement with ``d2t`` is evidence only)."""
    tm = facts.token_map
    if tm is None:
        return []
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.token_map_invalid(facts, tm, check_token_map))
    return token_map_invalid_findings(tm)


@FAMILY.rule("token-map-unordered", severities=("warning",), engines=ALL_ENGINES,
             summary="a valid d2t whose target ids (d2t + arange) are not ascending: every known trainer writes them "
                     "sorted, so a permutation maps draft ids to the wrong target tokens, silently",
             fix="d2t in ascending target-id order (measured as a candidate)")
def token_map_unordered(facts: Facts) -> list[Finding]:
    """The engine takes any order (SGLang 0.5.23 ``llama_eagle3.py``: ``hot_token_id = d2t +
    arange``), but the draft's lm_head row i was trained for the i-th smallest target id of its
    vocabulary: EAGLE (``eagle/traineagle3/cnets.py``) and SpecForge
    (``specforge/data/preprocessing.py``, ``generate_vocab_mapping``) both ``used_tokens.sort()``
    before ``d2t = used_tokens[i] - i``. A d2t that passes :func:`check_token_map` but is not
    ascending was reordered after training (a shuffle, a merge of two maps): a warning, since no
    static check can prove which order the lm_head learned; the candidate fix is measured. vLLM 0.32.0
    takes any order too (``llama_eagle3.py``: ``targets = arange + draft_id_to_target_id``):
    :func:`workbench.rules.vllm_checks.token_map_unordered` words it."""
    tm = facts.token_map
    summary = token_map_summary(tm) if tm is not None else None
    if summary is None or summary["problems"] or summary.get("sorted") is not False:
        return []
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.token_map_unordered(facts, summary))
    return [Finding("token-map-unordered", "warning",
                    f"{summary['name']}'s target ids (d2t + arange) are not in ascending order; EAGLE and SpecForge "
                    "write them sorted, so the map was reordered after training and draft ids would become the wrong "
                    "target tokens (the engine takes any order, silently)", summary,
                    "d2t in ascending target-id order, in a copy of the draft (measured)")]


def d2t_sorted(tm: TokenMap) -> TensorData | None:
    """The same target ids as ``tm.d2t``, as offsets in ascending target-id order (the trainers'
    layout, see :func:`token_map_unordered`); ``None`` without an integer 1-D d2t."""
    d2t = tm.d2t
    if d2t is None or d2t.ndim != 1 or not np.issubdtype(d2t.dtype, np.integer):
        return None
    ids = np.sort(d2t.astype(np.int64) + np.arange(len(d2t), dtype=np.int64))
    offsets = ids - np.arange(len(ids), dtype=np.int64)
    return TensorData("I64", (len(ids),), tuple(int(v) for v in offsets))


def check_draft_weights(box: Any, draft: DraftFacts, target: TargetFacts | None = None,
                        *, timeout: float = 60, engine: Any = None) -> tuple[list[Finding], dict[str, Any]]:
    """H3's weight and token-map checks on ``draft`` (facts already read from ``box``), whatever its
    declared class: the findings of this family's rules (plus ``checkpoint-unreadable`` for a
    checkpoint or ``d2t`` that cannot be read), in the order the engine meets them.

    Returns ``(findings, checked)``; ``checked`` summarises what was compared (tensor and
    parameter counts, dropped/missing names, shape problems, the d2t summary) for the evidence.
    Raises nothing for a bad checkpoint: an unreadable one is a ``checkpoint-unreadable`` finding.
    The target vocab (``target.vocab_size``, else the draft's ``vocab_size``) bounds d2t.
    ``engine``: the box's :class:`~workbench.engine.source.EngineSource`; when given and it registers
    the declared class with a ``load_weights`` that can be followed, that class's own facts are used
    (:attr:`workbench.rules.facts.Facts.weights`), else SGLang 0.5.23's modelled
    ``LlamaForCausalLMEagle3``.
    """
    checked: dict[str, Any] = {"draft": draft.path, "modelled_engine": MODELLED_ENGINE}
    if draft.tensors is None:
        return draft_checkpoint_findings(draft), checked
    w = None
    if engine is not None:
        w = Facts.of(None, draft=draft, target=target, box=box, timeout=timeout, engine=engine).weights
    if w is None:
        w = analyse_weights(draft)
    else:
        checked = {"draft": draft.path, **_engine_evidence(w)}
    facts = Facts.of(None, draft=draft, target=target, box=box, timeout=timeout, weights=w)
    tm = facts.token_map
    checked.update({"tensors": len(draft.tensors), "parameters": len(w.spec), "loaded_params": len(w.loaded),
                    "dropped": w.dropped, "missing": w.missing, "shape_problems": w.shape_problems,
                    "vocab_size": tm.vocab, "draft_vocab_size": tm.draft_vocab})
    findings = dropped_findings(draft, w) + missing_findings(draft, w) + [_shape_finding(p) for p in w.shape_problems]
    findings += token_map_missing_findings(draft, tm)
    if tm.skipped:
        checked["d2t"] = {"name": tm.d2t_name, "skipped": tm.skipped}
    findings += token_map_unreadable_findings(draft, tm)
    summary = token_map_summary(tm)
    if summary is not None:
        checked["d2t"] = summary
    findings += token_map_invalid_findings(tm)
    findings += token_map_unordered(facts)
    return findings, checked


def _follow_any(w: WeightAnalysis, name: str) -> tuple[str, str | None, Any]:
    """``(how, param, shard)`` of checkpoint ``name`` through the analysed class's loader: vLLM's
    (:func:`workbench.engine.vllm_weights.follow_vllm`) for a vLLM analysis, else SGLang's
    ``load_weights`` as read from the source, else SGLang 0.5.23's modelled one."""
    if isinstance(w.source, VllmLoadWeights):
        return follow_vllm(name, w.source, w.spec, w.load_facts.get("conditions") or {})[:3]
    if w.source is not None:
        params = ([m for m in (w.source.modules or []) if m.path in w.spec] if w.module_level else set(w.spec))
        how, param, shard, _ = follow(name, w.source, params)
        return how, param, shard
    param, how, shard = _map_modelled(name, w.spec)
    return how, param, shard


def name_repair(draft: DraftFacts, w: WeightAnalysis) -> NameRepair:
    """The renames that put the tensors the loader drops (or, on vLLM, refuses) back where the
    loader wants them, by the checkpoint's naming pattern through the loader's own mapping
    (:func:`workbench.rules.weights_repair.repair_names`), shapes as a check."""
    key = (id(draft), len(draft.tensors or ()))
    memo = getattr(w, "_name_repair_memo", None)
    if memo is not None and memo[0] == key:
        return memo[1]
    problem = list(dict.fromkeys(list(w.raises) + list(w.dropped)))
    shapes = {n: tuple(draft.tensors[n].shape) for n in problem}
    rep = repair_names(problem, shapes, w, lambda n: _follow_any(w, n), existing=set(draft.tensors),
                       many_per_slot=w.module_level)
    try:  # one repair per analysis and draft: the rules and the fixes all ask for it
        object.__setattr__(w, "_name_repair_memo", (key, rep))
    except AttributeError:
        pass
    return rep


def rename_repair(draft: DraftFacts, w: WeightAnalysis) -> tuple[dict[str, str], list[str]]:
    """``(renames, reasons)`` of :func:`name_repair` (what cannot be mapped stays out)."""
    rep = name_repair(draft, w)
    return rep.renames, rep.reasons


def d2t_from_t2d(tm: TokenMap) -> TensorData | None:
    """The offset table ``d2t`` rebuilt from ``t2d`` (a boolean mask over the target vocab marking
    the draft vocab's target ids, ascending: SpecForge's export): ``d2t[i] = target_id[i] - i``,
    I64, when ``t2d`` has the target vocab's length and marks exactly ``draft_vocab`` ids; else ``None``."""
    t2d = tm.t2d
    if t2d is None or t2d.ndim != 1 or (tm.vocab is not None and t2d.shape[0] != tm.vocab):
        return None
    ids = np.flatnonzero(t2d).astype(np.int64)
    want = tm.draft_vocab if tm.draft_vocab is not None else (len(tm.d2t) if tm.d2t is not None else None)
    if want is None or len(ids) != want:
        return None
    offsets = ids - np.arange(len(ids), dtype=np.int64)
    return TensorData("I64", (len(ids),), tuple(int(v) for v in offsets))


@FAMILY.fixes_with
def weight_fixes(facts: Facts, findings: list[Finding], given: dict) -> list[Fix]:
    """A copy of the draft with the tensors the engine's loader drops (SGLang) or refuses (vLLM)
    renamed to the names it maps, by the naming transform the checkpoint applied to all its names
    (a wrapper or stripped prefix, another framework's naming, learned token edits), each new name
    followed through the launch's engine's own loader, shapes as a check (:func:`name_repair`,
    :mod:`workbench.rules.weights_repair`), and ``d2t`` rebuilt from ``t2d`` when the map is missing
    or invalid (:func:`d2t_from_t2d`). What cannot be derived (a parameter no tensor can fill, a
    name no transform maps — each named with why —, a wrong shape, no ``t2d``) is a ``none`` fix
    saying what to re-export or rename; none when every name was mapped. Nothing
    for the weight rules when the draft's config disagrees with its own tensors: their findings
    are that fault's consequences, and the configs family's fix aligns the config."""
    draft, tm = facts.draft, facts.token_map
    w = facts.vllm_weights if facts.engine_name == "vllm" else facts.weights
    rules = {f.rule for f in findings if f.severity == "error"}
    out: list[Fix] = []
    if draft is None:
        return out
    if w is None:  # the token map is read without the weight analysis on vLLM (Facts.token_map)
        rules -= {"weights-dropped", "weights-missing", "weight-shape-mismatch", "lm-head-shape-mismatch",
                  "head-dim-mismatch"}
    if facts.config_vs_tensors:
        # the config is wrong, not the tensors: draft-config-vs-tensors' fix aligns it; what is left
        # after that is judged by the doctor on the fixed draft
        rules -= {"weights-dropped", "weights-missing", "weight-shape-mismatch", "lm-head-shape-mismatch",
                  "head-dim-mismatch"}
    if rules & {"weights-dropped", "weights-missing"}:
        rep = name_repair(draft, w)
        if rep.renames:
            out.append(Fix("draft-copy", tuple(sorted(rules & {"weights-dropped", "weights-missing"})),
                           f"{len(rep.renames)} tensor(s) the engine {'refuses' if w.raises else 'drops'} renamed to the "
                           "names its loader maps, in a copy of the draft",
                           repair=DraftRepair(renames=rep.renames, reasons=rep.reasons)))
        # a name left unmapped matters when a parameter still lacks its tensor, or when the engine
        # refuses it (vLLM: the copy would not start); an extra tensor the engine skips does not
        blocking = {n: why for n, why in rep.unmapped.items() if n in w.raises or rep.unfilled}
        if rep.unfilled or blocking:
            out.append(Fix("none", ("weights-missing",) if rep.unfilled else ("weights-dropped",),
                           "tensors no rename can supply",
                           missing=(f"{len(rep.unfilled)} parameter(s) no checkpoint tensor can fill: {rep.unfilled[:6]}"
                                    if rep.unfilled else "every parameter has its tensor")
                                   + (f"; {len(blocking)} tensor name(s) could not be mapped: "
                                      + " | ".join(list(blocking.values())[:4]) if blocking else "")
                                   + ("; re-export the draft with every parameter of its class" if rep.unfilled else
                                      "; remove or rename them (the engine refuses a name no parameter has)")))
    transposed = sorted({f.evidence["tensor"] for f in findings if f.rule == "weight-shape-mismatch"
                         and f.evidence.get("stored_transposed") and f.evidence.get("tensor")})
    if transposed and "weight-shape-mismatch" in rules:
        fix = _transpose_fix(facts, transposed)
        out.append(fix)
        if fix.kind == "draft-copy" and all(f.evidence.get("stored_transposed") for f in findings
                                            if f.rule == "weight-shape-mismatch"):
            rules -= {"weight-shape-mismatch"}
    for rule in ("weight-shape-mismatch", "lm-head-shape-mismatch", "head-dim-mismatch"):
        if rule in rules:
            out.append(Fix("none", (rule,), "a tensor of the wrong shape",
                           missing="the draft's config and checkpoint from the same training run (a re-export)"))
    if tm is not None and "token-map-invalid" in rules and facts.engine_name == "vllm" and tm.d2t_name \
            and tm.draft_vocab is not None and tm.draft_vocab == tm.vocab:
        # a full-vocabulary draft with a map vLLM has no parameter for: nothing to rebuild, the map must go
        rules -= {"token-map-invalid"}
        out.append(Fix("none", ("token-map-invalid",), f"a full-vocabulary draft that ships {tm.d2t_name}",
                       missing=f"a copy of the draft without {tm.d2t_name}"
                               + (f"/{tm.t2d_name}" if tm.t2d_name else "") + " (vLLM builds no map for a draft "
                               "whose vocab equals the target's and refuses one in the checkpoint)"))
    if tm is not None and rules & {"token-map-missing", "token-map-invalid"}:
        rebuilt = d2t_from_t2d(tm)
        if rebuilt is not None:
            name = tm.d2t_name or "d2t"
            out.append(Fix("draft-copy", tuple(sorted(rules & {"token-map-missing", "token-map-invalid"})),
                           f"{name} rebuilt from {tm.t2d_name} in a copy of the draft",
                           repair=DraftRepair(tensors={name: rebuilt},
                                              reasons=[f"token map: {name} rebuilt from {tm.t2d_name} "
                                                       f"(d2t[i] = target id of draft id i - i, {rebuilt.shape[0]} "
                                                       "ids)"])))
        else:
            out.append(Fix("none", tuple(sorted(rules & {"token-map-missing", "token-map-invalid"})),
                           "no t2d to rebuild the token map from",
                           missing="the draft's d2t/t2d as its training exported them (SpecForge writes both)"))
    if tm is not None and any(f.rule == "token-map-unordered" for f in findings):
        ordered = d2t_sorted(tm)
        if ordered is not None:
            name = tm.d2t_name or "d2t"
            out.append(Fix("candidates", ("token-map-unordered",), f"{name} in ascending target-id order, measured",
                           candidates=[{"label": f"{name} sorted (the trainers' order)", "launch": {},
                                        "repair": DraftRepair(tensors={name: ordered},
                                                              reasons=[f"token map: {name} put back in ascending "
                                                                       "target-id order (same ids), tried"])}]))
    return out


def _transpose_fix(facts: Facts, names: list[str]) -> Fix:
    """The ``draft-copy`` fix for tensors stored transposed: a copy with each transposed
    (:attr:`DraftRepair.transposes`, written by :mod:`workbench.session.draft_copy` from the
    source's bytes and verified byte for byte), offered only when the shape rules accept the
    copy (:func:`workbench.rules.repair_check.rejections`: ``aux-count-mismatch`` reads fc's width
    from the very tensor)."""
    from workbench.rules.repair_check import rejections

    repair = DraftRepair(transposes=tuple(names),
                         reasons=[f"weight-shape-mismatch: {n} stored transposed, written transposed" for n in names])
    left = rejections(facts, repair, ("aux-count-mismatch",))
    if left:
        return Fix("none", ("weight-shape-mismatch",), f"{', '.join(names)} transposed would still be rejected",
                   missing="; ".join(f"{f.rule}: {f.message}" for f in left))
    return Fix("draft-copy", ("weight-shape-mismatch",),
               f"{', '.join(names)} transposed in a copy of the draft (stored [in, out])", repair=repair)
