"""What a rule returns: a :class:`Finding` (rule id, severity, message, evidence, fix)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Finding", "SEVERITIES", "ev"]

#: Severities, most serious first: ``error`` (acceptance or start-up will fail), ``warning``
#: (likely loss), ``info`` (worth knowing). The doctor's exit code is 1 when any finding is an error.
SEVERITIES = ("error", "warning", "info")


def ev(value: Any, source: str | None) -> dict:
    """One evidence entry: ``{"value": value, "source": "file: key"}`` (``source`` ``None`` when
    nothing recorded it)."""
    return {"value": value, "source": source}





@dataclass
class Finding:
    """One result of a rule.

    ``rule``: the rule id (``"algorithm-mismatch"``); ``severity``: ``error`` (acceptance or
    startup will fail), ``warning`` (likely loss) or ``info``; ``message``: one or two sentences
    for a human; ``evidence``: ``{name: {"value": ..., "source": "file: key"}}`` plus derived
    values; ``fix``: the corrected launch command (or other remedy text), ``None`` if none.
    Raises ``ValueError`` for an unknown severity.
    """

    rule: str
    severity: str
    message: str
    evidence: dict = field(default_factory=dict)
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "message": self.message,
                "evidence": self.evidence, "fix": self.fix}
