"""The hypothesis ledger: what we suspect, what we found, what we decided.

A :class:`Ledger` holds :class:`Hypothesis` entries, each with a verdict (``confirmed``,
``refuted`` or ``inconclusive`` — the default until decided) and a list of :class:`Evidence`.
It serialises to the ``hypotheses[]`` list of the verdict document
(``reports/diagnose_acceptance.json``: ``id``, ``statement``, ``verdict``, ``evidence``) and
renders as an HTML table in notebooks.

One fault, its consequences: :func:`attribute` links each finding another rule's finding explains
(the links declared in :mod:`workbench.rules.consequences`, each with its evidence condition) to
its cause, and :func:`consequence_hypotheses` lifts that to hypotheses: a hypothesis whose every
finding is explained by a confirmed cause of ANOTHER hypothesis is that cause's consequence
(:meth:`Ledger.mark_consequence`; ``consequence_of`` in the verdict document), never a root cause
of its own.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from workbench.errors import LedgerError
from workbench.redact import REDACTOR
from workbench.report.tables import CELL_STYLE, WRAP, inline_code, scroll_box
from workbench.rules.finding import Finding
from workbench.rules.links import Link, attribute, root_of
from workbench.rules.registry import Registry

__all__ = ["Evidence", "Hypothesis", "Ledger", "VERDICTS", "LedgerError", "Link", "attribute", "root_of",
           "consequence_hypotheses"]

VERDICTS = ("confirmed", "refuted", "inconclusive")

_COLOURS = {"confirmed": "#1a7f37", "refuted": "#cf222e", "inconclusive": "#9a6700"}


@dataclass
class Evidence:
    """One observation. ``kind``: what sort (``"finding"``, ``"acceptance"``, ``"probe"``,
    ``"log"``, ...); ``summary``: one line for a human; ``data``: the values (JSON-serialisable);
    ``source``: where it came from (a file and key, an endpoint, a log path)."""

    kind: str
    summary: str
    data: dict = field(default_factory=dict)
    source: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "summary": self.summary, "data": self.data, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "Evidence":
        return cls(d["kind"], d["summary"], dict(d.get("data") or {}), d.get("source", ""))


def _check_verdict(verdict: str) -> str:
    if verdict not in VERDICTS:
        raise LedgerError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    return verdict


@dataclass
class Hypothesis:
    """A statement under test. ``verdict`` is validated (:data:`VERDICTS`); it stays
    ``"inconclusive"`` until :meth:`Ledger.decide` sets it."""

    id: str
    statement: str
    verdict: str = "inconclusive"
    evidence: list[Evidence] = field(default_factory=list)
    #: the hypotheses whose confirmed cause explains every finding of this one (empty: not a consequence)
    consequence_of: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _check_verdict(self.verdict)

    def to_dict(self) -> dict:
        return {"id": self.id, "statement": self.statement, "verdict": self.verdict,
                "evidence": [e.to_dict() for e in self.evidence], "consequence_of": list(self.consequence_of)}

    @classmethod
    def from_dict(cls, d: dict) -> "Hypothesis":
        return cls(d["id"], d["statement"], d.get("verdict", "inconclusive"),
                   [Evidence.from_dict(e) for e in d.get("evidence", [])], list(d.get("consequence_of") or []))


class Ledger:
    """An ordered set of hypotheses keyed by id.

    ``add(id, statement)`` (or ``add(Hypothesis)``) → the hypothesis; ``get(id)``;
    ``add_evidence(id, *evidence)``; ``decide(id, verdict, *evidence)``; ``to_dict()`` /
    ``to_json()`` / ``from_dict()``; ``_repr_html_()`` for notebooks.
    Raises :class:`LedgerError` on a duplicate or unknown id or an invalid verdict.
    """

    def __init__(self, hypotheses: list[Hypothesis] | None = None) -> None:
        self._items: dict[str, Hypothesis] = {}
        for h in hypotheses or []:
            self.add(h)

    def add(self, hypothesis: Hypothesis | str, statement: str | None = None) -> Hypothesis:
        if isinstance(hypothesis, str):
            if statement is None:
                raise LedgerError(f"hypothesis {hypothesis!r} needs a statement")
            hypothesis = Hypothesis(hypothesis, statement)
        if hypothesis.id in self._items:
            raise LedgerError(f"hypothesis {hypothesis.id!r} is already in the ledger")
        self._items[hypothesis.id] = hypothesis
        return hypothesis

    def get(self, id: str) -> Hypothesis:
        try:
            return self._items[id]
        except KeyError:
            raise LedgerError(f"no hypothesis {id!r} in the ledger (have: {', '.join(self._items) or 'none'})") from None

    def add_evidence(self, id: str, *evidence: Evidence) -> Hypothesis:
        h = self.get(id)
        h.evidence.extend(evidence)
        return h

    def decide(self, id: str, verdict: str, *evidence: Evidence) -> Hypothesis:
        """Set the verdict of ``id`` and append ``evidence``."""
        h = self.get(id)
        h.verdict = _check_verdict(verdict)
        h.evidence.extend(evidence)
        return h

    def mark_consequence(self, id: str, causes: Sequence[str], *evidence: Evidence) -> Hypothesis:
        """Record that ``id`` is a consequence of the hypotheses ``causes`` (each in the ledger, none
        ``id`` itself) and append ``evidence`` (the links). Raises :class:`LedgerError` otherwise."""
        h = self.get(id)
        for c in causes:
            self.get(c)
            if c == id:
                raise LedgerError(f"hypothesis {id!r} cannot be a consequence of itself")
        h.consequence_of = list(dict.fromkeys([*h.consequence_of, *causes]))
        h.evidence.extend(evidence)
        return h

    def consequences_of(self, id: str) -> list[Hypothesis]:
        """The hypotheses recorded as consequences of ``id`` (:meth:`mark_consequence`)."""
        self.get(id)
        return [h for h in self if id in h.consequence_of]

    def __iter__(self) -> Iterator[Hypothesis]:
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, id: object) -> bool:
        return id in self._items

    def confirmed(self) -> list[Hypothesis]:
        return [h for h in self if h.verdict == "confirmed"]

    def root_causes(self) -> list[Hypothesis]:
        """The confirmed hypotheses that are no consequence of another (:meth:`mark_consequence`)."""
        return [h for h in self if h.verdict == "confirmed" and not h.consequence_of]

    def to_dict(self) -> dict:
        return {"hypotheses": [h.to_dict() for h in self]}

    def to_json(self, **kwargs: Any) -> str:
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: dict) -> "Ledger":
        return cls([Hypothesis.from_dict(h) for h in d.get("hypotheses", [])])

    def _repr_html_(self) -> str:
        """The ledger as an HTML table (one row per hypothesis: id, statement, verdict, evidence), each
        evidence text written once: an entry already shown under an earlier hypothesis (same kind, summary
        and source) is a short reference to it, so a report does not repeat a paragraph."""
        esc = html.escape
        rows = []
        first_shown: dict[tuple[str, str, str], str] = {}
        for h in self:
            colour = _COLOURS[h.verdict]
            items = []
            for e in h.evidence:
                key = (e.kind, e.summary, e.source)
                if key in first_shown:
                    items.append(f"<li><b>{esc(e.kind)}</b>: <i>the same as under <code>{esc(first_shown[key])}</code></i></li>")
                    continue
                first_shown[key] = h.id
                items.append(f"<li><b>{esc(e.kind)}</b>: {inline_code(e.summary)}"
                             + (f" <span style='color:#57606a'>({esc(e.source)})</span>" if e.source else "") + "</li>")
            ev = "".join(items) or "<i>none yet</i>"
            of = (f"<br><small>consequence of {', '.join(f'<code>{esc(c)}</code>' for c in h.consequence_of)}</small>"
                  if h.consequence_of else "")
            rows.append(
                f"<tr><td style='{CELL_STYLE}'><code>{esc(h.id)}</code></td><td style='{CELL_STYLE};{WRAP}'>"
                f"{inline_code(h.statement)}</td><td style='{CELL_STYLE}'><span style='color:#fff;background:{colour};"
                f"padding:1px 6px;border-radius:3px'>{esc(h.verdict)}</span>{of}</td><td style='{CELL_STYLE}'>"
                f"<ul style='margin:0;padding-left:1.2em;{WRAP}'>{ev}</ul></td></tr>"
            )
        body = "".join(rows) or "<tr><td colspan='4'><i>no hypotheses</i></td></tr>"
        return REDACTOR.text(  # evidence quotes launch commands and log lines: no secret in the report
            scroll_box("<table class='eagle-workbench-ledger' style='border-collapse:collapse;text-align:left;width:100%;table-layout:auto'><thead><tr>"
                       + "".join(f"<th style='{CELL_STYLE}'>{c}</th>" for c in ("id", "hypothesis", "verdict", "evidence"))
                       + f"</tr></thead><tbody>{body}</tbody></table>")
        )


def consequence_hypotheses(findings: Sequence[Finding], hypotheses: Iterable[tuple[str, Sequence[str]]],
                           confirmed: Iterable[str], registry: Registry | None = None) -> dict[str, list[dict]]:
    """The hypotheses (``(id, rule ids)`` pairs, e.g. from ``REGISTRY.hypotheses()``) that are
    consequences of confirmed causes: every finding of it that counts (its errors; its warnings
    when it has no error) has a root cause (:func:`root_of`) that is a finding of ANOTHER
    hypothesis in ``confirmed``. A link between two rules of one hypothesis makes nothing a
    consequence. Returns id → one entry per explained finding: ``rule``, ``message``,
    ``cause_hypothesis``, ``cause_rule``, ``cause_message``, ``mechanism`` (of the first link of
    its chain), ``marked``."""
    hyps = [(hid, tuple(rules)) for hid, rules in hypotheses]
    of_rule = {r: hid for hid, rules in hyps for r in rules}
    confirmed = set(confirmed)
    links = attribute(findings, registry)
    out: dict[str, list[dict]] = {}
    for hid, rules in hyps:
        mine = [i for i, f in enumerate(findings) if f.rule in rules and f.severity in ("error", "warning")]
        counted = [i for i in mine if findings[i].severity == "error"] or mine
        if not counted:
            continue
        entries = []
        for i in counted:
            root = root_of(i, links)
            cause_hid = of_rule.get(findings[root].rule)
            if root == i or cause_hid is None or cause_hid == hid or cause_hid not in confirmed:
                entries = []
                break
            first = links[i]
            entries.append({"rule": findings[i].rule, "message": findings[i].message, "cause_hypothesis": cause_hid,
                            "cause_rule": findings[root].rule, "cause_message": findings[root].message,
                            "mechanism": first.mechanism, "marked": first.marked})
        if entries:
            out[hid] = entries
    return out
