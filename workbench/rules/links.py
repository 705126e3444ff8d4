"""Which findings of one run are consequences of another finding (the declared links of
:mod:`workbench.rules.consequences`, applied to the findings themselves): :func:`attribute` maps
each explained finding to its cause, :func:`root_of` follows a chain to its root cause. The
doctor's report groups consequences under their cause with it
(:meth:`workbench.doctor.report.DoctorReport.to_text`); the diagnosis' ledger
(:mod:`workbench.diagnosis.ledger`) turns it into hypothesis verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from workbench.rules.finding import Finding
from workbench.rules.registry import REGISTRY, Registry

__all__ = ["Link", "attribute", "root_of"]

@dataclass(frozen=True)
class Link:
    """Finding ``effect`` (index into the findings) explained by finding ``cause`` (index), through
    the declared link ``mechanism`` (:class:`workbench.rules.registry.Consequence`); ``marked``:
    the effect's own rule named the cause (``evidence["consequence_of"]``)."""

    effect: int
    cause: int
    mechanism: str
    marked: bool


def attribute(findings: Sequence[Finding], registry: Registry | None = None) -> dict[int, Link]:
    """Which findings (error or warning) are consequences of another rule's error finding: index →
    :class:`Link` to the first finding (in order) that explains it through a declared link
    (:meth:`workbench.rules.registry.Registry.explains`, whose evidence condition must hold: the same
    tensor, field or width, not mere co-occurrence). Findings no link explains are absent. The
    declared graph is acyclic, so following the links always ends at a root (:func:`root_of`)."""
    reg = REGISTRY if registry is None else registry
    out: dict[int, Link] = {}
    for i, effect in enumerate(findings):
        if effect.severity not in ("error", "warning"):
            continue
        for j, cause in enumerate(findings):
            if j == i or cause.rule == effect.rule or cause.severity != "error":
                continue
            link = reg.explains(cause, effect)
            if link is not None:
                out[i] = Link(i, j, link.mechanism, effect.evidence.get("consequence_of") == cause.rule)
                break
        else:
            # a rule that marks a consequence no declaration lists yet: its own word counts (its check
            # knew the cause); tests/workbench/test_consequences.py keeps every mark declared
            mark = effect.evidence.get("consequence_of")
            j = next((j for j, c in enumerate(findings) if j != i and c.rule == mark and c.severity == "error"
                      and c.rule != effect.rule), None) if isinstance(mark, str) else None
            if j is not None and mark not in reg.reachable(effect.rule):  # never a cycle
                out[i] = Link(i, j, f"{effect.rule} marks itself a consequence of {mark} (no declared link)", True)
    return out


def root_of(index: int, links: Mapping[int, Link]) -> int:
    """The finding at the end of ``index``'s chain of causes (itself when nothing explains it)."""
    seen = {index}
    while index in links:
        index = links[index].cause
        if index in seen:  # cannot happen with an acyclic registry; never loop
            break
        seen.add(index)
    return index
