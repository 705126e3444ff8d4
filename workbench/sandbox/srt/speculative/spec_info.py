"""Speculative algorithm names (mirrors SGLang 0.5.23, srt/speculative/spec_info.py).

`from_string` upper-cases the name; NEXTN is an alias of EAGLE; unknown names raise.
`is_eagle()` is true for EAGLE and EAGLE3; `is_eagle3()` is strictly EAGLE3 (the gate of the
aux hidden-state capture).
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Optional

_RESERVED_ALIASES = {"NEXTN"}


class SpeculativeAlgorithm(Enum):
    """Builtin speculative decoding algorithms (the sandbox implements EAGLE / EAGLE3 / NONE)."""

    DFLASH = auto()
    EAGLE = auto()
    EAGLE3 = auto()
    STANDALONE = auto()
    NGRAM = auto()
    NONE = auto()

    @classmethod
    def from_string(cls, name: Optional[str]) -> "SpeculativeAlgorithm":
        """None -> NONE; case-insensitive member name; NEXTN -> EAGLE; else ValueError."""
        if name is None:
            return cls.NONE
        upper = name.upper()
        try:
            return cls[upper]
        except KeyError:
            pass
        if upper in _RESERVED_ALIASES:
            return cls.EAGLE
        raise ValueError(f"Unknown speculative algorithm name: {name}")

    def is_none(self) -> bool:
        """No speculative decoding."""
        return self == SpeculativeAlgorithm.NONE

    def is_eagle(self) -> bool:
        """EAGLE or EAGLE3 (both run the EAGLE worker)."""
        return self in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.EAGLE3)

    def is_eagle3(self) -> bool:
        """Strictly EAGLE3: the only algorithm that turns on aux hidden-state capture."""
        return self == SpeculativeAlgorithm.EAGLE3

    def is_standalone(self) -> bool:
        """STANDALONE (a separate small LM as draft); not implemented by the sandbox."""
        return self == SpeculativeAlgorithm.STANDALONE

    def is_ngram(self) -> bool:
        """NGRAM lookup drafting; not implemented by the sandbox."""
        return self == SpeculativeAlgorithm.NGRAM
