"""Fault family: aux hidden-state capture (which target layers feed the EAGLE-3 draft).

Rules: ``aux-config-unread`` (the nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` is
missing, malformed or only at top level: the engine silently captures its default layers),
``aux-layer-ids-out-of-range`` (a captured layer the capture loop never reaches),
``aux-layer-offset-convention`` (the captured layers differ from the ids written), ``aux-count-mismatch``
(``fc`` in_features ≠ number of aux states × target hidden). The target's offset rule is
*evaluated* from the box's own ``set_eagle3_layers_to_capture``
(:meth:`workbench.engine.source.EngineSource.capture_rule`), else modelled from SGLang 0.5.23
(:func:`workbench.engine.modelled.modelled_capture`). Engine facts: SGLang 0.5.23
``model_runner_components/spec_aux_hidden_state.py`` (the ids read inside ``try/except Exception``),
``srt/models/llama.py`` (+1 offset), ``srt/models/llama_eagle3.py`` (aux count).
"""

from __future__ import annotations

from typing import Any

from workbench.checkpoint import DraftFacts, TargetFacts
from workbench.engine.launch import LaunchCommand
from workbench.engine.source import CaptureRule
from workbench.rules.finding import Finding, ev
from workbench.rules.launch_flags import _algo

__all__ = ["aux_rules"]


def _ids_ok(ids: Any) -> bool:
    return isinstance(ids, list) and bool(ids) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)


def aux_rules(launch: LaunchCommand, draft: DraftFacts, target: TargetFacts,
              capture: CaptureRule | None) -> list[Finding]:
    """EAGLE3 aux-layer rules: ``aux-config-unread``, ``aux-layer-ids-out-of-range``,
    ``aux-layer-offset-convention``, ``aux-count-mismatch``.

    SGLang 0.5.23 ``spec_aux_hidden_state.py`` reads only the nested
    ``eagle_config.eagle_aux_hidden_state_layer_ids`` (inside ``try/except Exception``: missing or
    malformed → ``None`` → the target's default layers). ``capture`` is the target's offset rule
    evaluated for those ids (:meth:`EngineSource.capture_rule`). ``aux-config-unread`` is a
    warning when the ids are malformed or only at top level (the draft's width code and the
    capture path then disagree) and ``info`` when absent altogether (the engine's default layers,
    which SpecForge also trains with when none are written: not a fault by itself).
    The aux count is ``num_aux_hidden_states``, else len(nested ids), else 3 (``llama_eagle3.py``).
    """
    if _algo(launch) != "EAGLE3":
        return []
    out: list[Finding] = []
    nested = draft.aux_layer_ids
    top = draft.aux_layer_ids_top_level
    L = target.num_hidden_layers
    engine_ids = nested if _ids_ok(nested) else None
    cap_src = capture.source if capture else None
    captured = capture.captured if capture else None
    ev_ids = ev(nested, draft.sources.get("aux_layer_ids") or f"{draft.config_path}: eagle_config (absent)")
    if engine_ids is None:
        malformed = nested is not None or (draft.eagle_config is None and "eagle_config" in draft.config)
        sev = "warning" if (malformed or top is not None) else "info"
        why = ("malformed" if malformed else "only at top level, which the capture path never reads" if top is not None
               else "absent")
        out.append(Finding("aux-config-unread", sev,
                           f"eagle_config.eagle_aux_hidden_state_layer_ids is {why}: the engine silently captures its "
                           f"default layers {str(captured) + ' ' if captured is not None else ''}(of {L} target layers)",
                           {"eagle_config.eagle_aux_hidden_state_layer_ids": ev_ids,
                            "eagle_aux_hidden_state_layer_ids (top level)": ev(top, draft.sources.get("aux_layer_ids_top_level")),
                            "captured_layers": ev(captured, cap_src)},
                           f"write the ids into eagle_config in {draft.config_path}"
                           + (f": \"eagle_config\": {{\"eagle_aux_hidden_state_layer_ids\": {top}}}" if _ids_ok(top) else "")))
    if captured is not None and L is not None and capture is not None:
        bad = [c for c in captured if c < 0 or c > capture.reachable_max]
        if bad:
            reach = [c for c in captured if 0 <= c <= capture.reachable_max]
            out.append(Finding("aux-layer-ids-out-of-range", "error",
                               f"the target captures layers {captured} but its capture loop reaches only 0..{capture.reachable_max} "
                               f"(num_hidden_layers {L}): {bad} never fire, so {len(reach)} aux states reach an fc built "
                               f"for {len(captured)}",
                               {"eagle_aux_hidden_state_layer_ids": ev_ids, "captured_layers": ev(captured, cap_src),
                                "num_hidden_layers": ev(L, target.sources.get("num_hidden_layers")),
                                "reachable_max": capture.reachable_max},
                               "use ids the engine can capture, or an engine version that captures the final boundary "
                               "(SGLang PR #32334)"))
        if engine_ids is not None and list(captured) != list(engine_ids):
            out.append(Finding("aux-layer-offset-convention", "info",
                               f"the config writes ids {engine_ids}; this engine captures layers {captured} for this "
                               f"target ({'+1' if captured and captured[0] == engine_ids[0] + 1 else 'as written'}), i.e. "
                               f"the outputs of layers {[c - 1 for c in captured]}: check the draft's training used the "
                               "same convention (first id 1 = 'output of layer', 2 = 'input to layer')",
                               {"config_ids": ev_ids, "captured_layers": ev(captured, cap_src)}, None))
    n_aux_src = None
    if draft.num_aux_hidden_states is not None:
        n_aux, n_aux_src = draft.num_aux_hidden_states, draft.sources.get("num_aux_hidden_states")
    elif engine_ids is not None:
        n_aux, n_aux_src = len(engine_ids), draft.sources.get("aux_layer_ids")
    else:
        n_aux, n_aux_src = 3, "llama_eagle3.py default 3"
    th = draft.target_hidden_size if draft.target_hidden_size is not None else target.hidden_size
    if draft.fc_in_features is not None and th is not None and n_aux * th != draft.fc_in_features:
        out.append(Finding("aux-count-mismatch", "error",
                           f"fc.weight takes {draft.fc_in_features} inputs but the engine feeds {n_aux} aux states × "
                           f"{th} = {n_aux * th}: the draft fails to load or its fc is skipped",
                           {"fc_in_features": ev(draft.fc_in_features, draft.sources.get("fc_in_features")),
                            "num_aux": ev(n_aux, n_aux_src), "target_hidden": th}, None))
    return out
