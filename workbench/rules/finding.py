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
    values; ``fix``: the corrected launch command (or other remedy text), ``None`` if none;
    ``prevents_start``: ``True`` when the fault it names stops the server from starting (the
    engine raises or exits while it starts up: argparse, a config it cannot read, the weight
    loader's shape assert, ...), so a launch with it is spent for nothing. Set by the rule (on the
    rule, :attr:`workbench.rules.registry.Rule.prevents_start`, or per finding); only an ``error``
    can carry it. The launch guard (:func:`workbench.session.guard.refusing_findings`) refuses a
    launch on these. Raises ``ValueError`` for an unknown severity, or ``prevents_start`` on a
    finding that is no error.
    """

    rule: str
    severity: str
    message: str
    evidence: dict = field(default_factory=dict)
    fix: str | None = None
    prevents_start: bool = False

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.prevents_start and self.severity != "error":
            raise ValueError(f"{self.rule}: only an error finding can prevent the server from starting "
                             f"(severity {self.severity!r})")

    def to_dict(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "message": self.message,
                "evidence": self.evidence, "fix": self.fix, "prevents_start": self.prevents_start}
