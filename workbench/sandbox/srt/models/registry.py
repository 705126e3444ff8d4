"""The model registry: architecture name → model class (mirrors SGLang 0.5.23,
srt/models/registry.py).

Every module of `workbench.sandbox.srt.models` is imported and each class in its `EntryClass`
(a class or a list of classes) is registered under its own `__name__`, as SGLang's
`import_model_classes` does (a module that fails to import is skipped with a warning; a name
registered twice is an `AssertionError`). `resolve_model_cls(architectures)` returns the first
registered name's class, else raises SGLang's `_raise_for_unsupported` errors.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from typing import AbstractSet, Dict, List, Tuple, Type, Union

logger = logging.getLogger(__name__)

MODELS_PACKAGE = "workbench.sandbox.srt.models"


@dataclass
class _ModelRegistry:
    """Keyed by architecture name (the class's ``__name__``). Loaded lazily, on first use."""

    models: Dict[str, type] = field(default_factory=dict)
    _default_models_loaded: bool = False

    def _load_default_models(self) -> None:
        if self._default_models_loaded:
            return
        self.models = import_model_classes(MODELS_PACKAGE) | self.models
        self._default_models_loaded = True

    def get_supported_archs(self) -> AbstractSet[str]:
        """The registered architecture names."""
        self._load_default_models()
        return self.models.keys()

    def is_arch_supported(self, architecture: str) -> bool:
        """Whether ``architecture`` names a registered class."""
        return architecture in self.get_supported_archs()

    def _raise_for_unsupported(self, architectures: List[str]):
        all_supported_archs = self.get_supported_archs()

        if any(arch in all_supported_archs for arch in architectures):
            raise ValueError(
                f"Model architectures {architectures} failed "
                "to be inspected. Please check the logs for more details."
            )

        raise ValueError(
            f"Model architectures {architectures} are not supported for now. "
            f"Supported architectures: {all_supported_archs}"
        )

    def resolve_model_cls(self, architectures: Union[str, List[str]]) -> Tuple[Type, str]:
        """``(class, architecture name)`` for the first registered name of ``architectures``.
        Raises ``ValueError`` with SGLang 0.5.23's messages (registry.py `_raise_for_unsupported`)
        when none is registered."""
        self._load_default_models()
        if isinstance(architectures, str):
            architectures = [architectures]
        if not architectures:
            logger.warning("No model architectures are specified")
        for arch in architectures:
            model_cls = self.models.get(arch)
            if model_cls is not None:
                return model_cls, arch
        return self._raise_for_unsupported(list(architectures))


@lru_cache()
def import_model_classes(package_name: str) -> Dict[str, type]:
    """``{class name: class}`` for every ``EntryClass`` of the modules of ``package_name``
    (SGLang 0.5.23 registry.py `import_model_classes`, non-strict: an import error is logged as a
    warning and the module skipped). Raises ``AssertionError`` on a duplicated class name."""
    model_arch_name_to_cls: Dict[str, type] = {}
    package = importlib.import_module(package_name)
    for _, name, ispkg in pkgutil.iter_modules(package.__path__, package_name + "."):
        if ispkg:
            continue
        try:
            module = importlib.import_module(name)
        except Exception as e:  # SGLang: "Ignore import error when loading {name}: {e}" (non-strict)
            logger.warning(f"Ignore import error when loading {name}: {e}")
            continue
        if hasattr(module, "EntryClass"):
            entry = module.EntryClass
            for tmp in entry if isinstance(entry, list) else [entry]:
                assert tmp.__name__ not in model_arch_name_to_cls, (
                    f"Duplicated model implementation for {tmp.__name__}"
                )
                model_arch_name_to_cls[tmp.__name__] = tmp
    return model_arch_name_to_cls


ModelRegistry = _ModelRegistry()
