"""Which target layers feed the EAGLE-3 draft (mirrors SGLang 0.5.23,
srt/model_executor/model_runner_components/spec_aux_hidden_state.py).

`_resolve_eagle_aux_hidden_state` is gated on `spec_algorithm.is_eagle3()`; under it the
draft's NESTED `eagle_config.eagle_aux_hidden_state_layer_ids` is read inside a
`try/except Exception` that silently falls back to `None` (the target's default layers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

logger = logging.getLogger(__name__)


@dataclass
class SpecAuxHiddenStateConfig:
    """Resolved aux-capture settings for the target model runner."""

    eagle_use_aux_hidden_state: bool = False
    eagle_aux_hidden_state_layer_ids: Any = None
    eagle_draft_num_layers: Optional[int] = None


def resolve_spec_aux_hidden_state_config(*, draft_hf_config, spec_algorithm, is_draft_worker: bool = False) -> SpecAuxHiddenStateConfig:
    """Resolve the capture config for the target runner (SGLang: same name).

    `draft_hf_config` is the draft's HF config object (attributes, `eagle_config` a dict).
    """
    config = SpecAuxHiddenStateConfig()
    _resolve_eagle_aux_hidden_state(
        config=config,
        draft_hf_config=draft_hf_config,
        spec_algorithm=spec_algorithm,
        is_draft_worker=is_draft_worker,
    )
    return config


def _resolve_eagle_aux_hidden_state(*, config: SpecAuxHiddenStateConfig, draft_hf_config, spec_algorithm, is_draft_worker: bool) -> None:
    if not (spec_algorithm.is_eagle() and not is_draft_worker):
        return
    if draft_hf_config is None:
        return
    config.eagle_draft_num_layers = int(getattr(draft_hf_config, "num_hidden_layers", 1))

    if spec_algorithm.is_eagle3():
        config.eagle_use_aux_hidden_state = True
        # Deliberate mirror of SGLang 0.5.23: a missing or malformed nested eagle_config is
        # swallowed here and silently means "default layers" (layer_ids = None). Do not "fix".
        try:
            eagle_config = getattr(draft_hf_config, "eagle_config", None)
            config.eagle_use_aux_hidden_state = eagle_config.get("use_aux_hidden_state", True)
            config.eagle_aux_hidden_state_layer_ids = eagle_config["eagle_aux_hidden_state_layer_ids"]
        except Exception:
            config.eagle_aux_hidden_state_layer_ids = None


def configure_aux_hidden_state_capture(target_model, config: SpecAuxHiddenStateConfig) -> None:
    """Apply the capture to the target (SGLang 0.5.23, model_runner_components/
    attention_backend_setup.py:54-61, `configure_aux_hidden_state_capture`). Raises `ValueError`
    with SGLang's message when the target class lacks `set_eagle3_layers_to_capture` (e.g. the
    sandbox's `GraniteForCausalLM`, like SGLang's)."""
    if not config.eagle_use_aux_hidden_state:
        return
    if not hasattr(target_model, "set_eagle3_layers_to_capture"):
        raise ValueError(
            f"Model {target_model.__class__.__name__} does not implement "
            "set_eagle3_layers_to_capture, which EAGLE3 aux hidden-state "
            "capture requires."
        )
    target_model.set_eagle3_layers_to_capture(config.eagle_aux_hidden_state_layer_ids)
