"""Which model class a config's `architectures` resolves to (mirrors SGLang 0.5.23,
srt/model_loader/utils.py `get_model_architecture` and `resolve_transformers_arch`).

A config naming a registered class (an `EntryClass` of `srt/models/*.py`, see
`workbench.sandbox.srt.models.registry`) gets that class. Otherwise SGLang falls back to its
Transformers backend: a name transformers does not know either (and no `auto_map.AutoModel`)
raises SGLang's "Cannot find model module. ..." `ValueError` (utils.py:154-161); a name it does
know would be served by SGLang's `TransformersForCausalLM`, which the sandbox does not have: it
raises a `ValueError` saying so (a documented sandbox limit).
"""

from __future__ import annotations

import logging
from typing import Tuple, Type

from workbench.sandbox.srt.models.registry import ModelRegistry

logger = logging.getLogger(__name__)


def resolve_transformers_arch(hf_config, architectures: list) -> list:
    """SGLang's fallback for architectures no EntryClass registers. Raises ``ValueError``:
    SGLang's own message for a name transformers does not define either (no ``auto_map``
    ``AutoModel``), else the sandbox's (it has no Transformers backend)."""
    import transformers

    auto_map = getattr(hf_config, "auto_map", None) or {}
    for arch in architectures:
        if str(arch).startswith("Transformers"):
            continue
        model_module = getattr(transformers, str(arch), None)
        if model_module is None and "AutoModel" not in auto_map:
            raise ValueError(
                f"Cannot find model module. '{arch}' is not a registered "
                "model in the Transformers library (only relevant if the "
                "model is meant to be in Transformers) and 'AutoModel' is "
                "not present in the model config's 'auto_map' (relevant "
                "if the model is custom)."
            )
    raise ValueError(
        f"Model architectures {list(architectures)} have no implementation in the sandbox; SGLang 0.5.23 would serve "
        "them through its Transformers backend (TransformersForCausalLM), which the sandbox does not implement. "
        f"Sandbox architectures: {sorted(ModelRegistry.get_supported_archs())}"
    )


def get_model_architecture(hf_config) -> Tuple[Type, str]:
    """``(model class, architecture name)`` for ``hf_config.architectures`` (a HF config object
    or anything with that attribute). Raises ``ValueError`` as SGLang 0.5.23 does for names it
    cannot resolve (see the module docstring)."""
    raw = getattr(hf_config, "architectures", None)
    architectures = [raw] if isinstance(raw, str) else list(raw or [])
    is_native_supported = any(ModelRegistry.is_arch_supported(arch) for arch in architectures)
    if not is_native_supported:
        resolve_transformers_arch(hf_config, architectures)
    return ModelRegistry.resolve_model_cls(architectures)
