"""Step 3, the hypotheses decided from the static evidence, no restart: every hypothesis of the
catalogue (:meth:`workbench.rules.registry.Registry.hypotheses`, in the order its cause acts) is
confirmed by an error finding of its rules, refuted when its rules ran and found nothing (or only
information) and acceptance is not low, and inconclusive when its inputs could not be read, when
only a warning points at it, or when it is out of static reach (runtime-only causes).

A family whose static decision needs more than that registers one decider here
(:func:`static_decider`: ``(ctx, found, low) -> (verdict, why) | None``); adding one touches that
function and its registration, nothing else.

Reads ``ctx.state.static`` (via :func:`~workbench.diagnosis.steps.static.preflight`, run once),
``ctx.state.before`` (whether acceptance is low) and ``ctx.settings.given``; adds to the ledger one
decision per hypothesis, its findings as evidence (source ``static check``).
"""

from __future__ import annotations

from typing import Callable

from workbench.diagnosis.context import RunContext
from workbench.diagnosis.deaths import attribute_deaths
from workbench.diagnosis.ledger import Evidence, consequence_hypotheses
from workbench.diagnosis.results import HypothesisTable
from workbench.diagnosis.steps.static import preflight
from workbench.rules import REGISTRY
from workbench.rules.finding import Finding
from workbench.rules.registry import HypothesisSpec

__all__ = ["CROSS_ENGINE_AUX", "STATIC_DECIDERS", "static_decider", "spec_findings", "check_hypotheses", "mark_consequences",
           "decide_cross_engine", "decide_eagle_config", "decide_offset_convention", "decide_weights_loaded"]

#: The cross-engine aux-id hypothesis (``workbench/rules/cross_engine.py``): a draft's aux layer ids
#: written in the other engine's convention.
CROSS_ENGINE_AUX = "aux-cross-engine-convention"

#: A decision of one hypothesis from its findings: ``(ctx, found, low) -> (verdict, why)``, or
#: ``None`` when the generic decision applies (``found``: the findings of its rules; ``low``: whether
#: acceptance as found is low, ``None`` when not measured).
Decider = Callable[[RunContext, "list[Finding]", "bool | None"], "tuple[str, str] | None"]
#: Hypothesis id -> its static decider, consulted after an error finding (which always confirms)
#: and before the generic rules.
STATIC_DECIDERS: dict[str, Decider] = {}


def static_decider(hid: str) -> Callable[[Decider], Decider]:
    """Register the static decider of hypothesis ``hid`` (one per hypothesis). Raises
    ``ValueError`` when ``hid`` has one already."""
    def register(fn: Decider) -> Decider:
        if hid in STATIC_DECIDERS:
            raise ValueError(f"hypothesis {hid!r} has a static decider already: {STATIC_DECIDERS[hid].__name__}")
        STATIC_DECIDERS[hid] = fn
        return fn
    return register


def spec_findings(ctx: RunContext, spec: HypothesisSpec) -> list[Finding]:
    """The static findings of ``spec``'s rules."""
    return [f for f in ctx.state.findings if f.rule in spec.rules]


def check_hypotheses(ctx: RunContext) -> HypothesisTable:
    """Every hypothesis decided from the static evidence (no restart): confirmed by an error
    finding of its rules; for the aux layers, by ids the user gave that differ from what the
    engine captures, or by ids the draft states where the engine never reads them; refuted when
    its rules ran and found nothing (or only information) and acceptance is not low;
    inconclusive when its inputs could not be read, when only a warning points at it, or when
    it is out of static reach (the runtime-only causes, with what would decide them). Raises
    what :func:`~workbench.diagnosis.steps.static.preflight` raises (the doctor could not run)."""
    report = preflight(ctx)
    low = ctx.low_before()
    unreadable = ctx.state.draft_facts is None
    # on vLLM the SGLang-code rules are not run (Rule.engines): said so, never "ran and found nothing"
    skipped_engine = "vllm" if ctx.inventory.launch.engine == "vllm" else None
    skipped = {r.id for r in REGISTRY.skipped_for(skipped_engine)}
    rows = []
    for spec, _fam in REGISTRY.hypotheses():
        hid = spec.id
        found = spec_findings(ctx, spec)
        errors = [f for f in found if f.severity == "error"]
        special = STATIC_DECIDERS.get(hid)
        if not spec.static:
            verdict, why = "inconclusive", f"out of static reach; decided by {spec.decide}"
            if low is False:
                verdict, why = "refuted", "acceptance is not low: nothing for it to explain"
            ctx.decide(hid, verdict, why, kind="workbench")
            rows.append((hid, verdict, why))
            continue
        if errors:
            verdict, why = "confirmed", "; ".join(f.message for f in errors)
        elif special is not None and (decided := special(ctx, found, low)) is not None:
            verdict, why = decided
        elif unreadable and hid != "checkpoint-readable" and hid != "spec-params":
            verdict, why = "inconclusive", "the draft could not be read: " + "; ".join(
                f.message for f in report.findings if f.rule in ("checkpoint-unreadable", "model-not-on-box"))
        else:
            verdict, why = _generic(spec, found, low, skipped, skipped_engine)
        ctx.decide(hid, verdict, why, findings=found)
        rows.append((hid, verdict, why))
    attribute_deaths(ctx)  # a server that died at start-up: its death is evidence of the rule that explains it
    marked = mark_consequences(ctx)
    rows = [(hid, verdict, why if hid not in marked else f"{why} — a consequence of {', '.join(marked[hid])}")
            for hid, verdict, why in rows]
    return HypothesisTable(rows, "Hypotheses after the static checks (no restart)")


def mark_consequences(ctx: RunContext) -> dict[str, list[str]]:
    """Record in the ledger which hypotheses are consequences of a confirmed cause
    (:func:`workbench.diagnosis.ledger.consequence_hypotheses` over the static findings, through the
    links :mod:`workbench.rules.consequences` declares): each gets ``consequence_of`` and one
    evidence entry (kind ``consequence``) per finding its cause explains, naming the mechanism. A
    consequence still undecided (a warning only) is confirmed: its finding holds, its cause is
    known. Returns id → its causes."""
    confirmed = {hid for hid in ctx.hypotheses.specs if ctx.ledger.get(hid).verdict == "confirmed"}
    found = consequence_hypotheses(ctx.state.findings, [(s.id, s.rules) for s in ctx.hypotheses.specs.values()],
                                   confirmed)
    out: dict[str, list[str]] = {}
    for hid, entries in found.items():
        causes = list(dict.fromkeys(e["cause_hypothesis"] for e in entries))
        if ctx.ledger.get(hid).verdict == "refuted" or set(causes) <= set(ctx.ledger.get(hid).consequence_of):
            continue
        if ctx.ledger.get(hid).verdict == "inconclusive":
            ctx.ledger.decide(hid, "confirmed")
        ctx.ledger.mark_consequence(hid, causes, *[
            Evidence("consequence", f"{e['rule']} is a consequence of {e['cause_rule']} ({e['cause_hypothesis']}): "
                     f"{e['mechanism']}", {k: e[k] for k in ("rule", "cause_rule", "cause_hypothesis", "marked")},
                     "workbench.rules.consequences") for e in entries])
        out[hid] = causes
    return out


def _generic(spec: HypothesisSpec, found: list[Finding], low: bool | None, skipped: set[str],
             skipped_engine: str | None) -> tuple[str, str]:
    """The decision of a hypothesis without an error finding nor a decider of its own: a warning
    while acceptance is low leaves it open; rules that do not run on this engine are said so
    (open while acceptance is low); otherwise refuted, naming the rules that ran."""
    warnings = [f for f in found if f.severity == "warning"]
    not_run = [r for r in spec.rules if r in skipped]
    if warnings and low:
        return "inconclusive", "; ".join(f.message for f in warnings)
    if not found and not_run and len(not_run) == len(spec.rules):
        # e.g. SGLang's silent fc width check: the rules model SGLang's code, which a vLLM
        # server does not run. Not checked statically: decided as the runtime-only
        # hypotheses are (the probe, the fix's measurement), refuted only by acceptance.
        rules = f"its rules ({', '.join(spec.rules)}) model SGLang's code and are not run on vLLM"
        if low:
            return "inconclusive", f"{rules}; acceptance is low: the probe or the fix decides"
        return "refuted", f"{rules}; acceptance is not low: nothing for it to explain"
    ran = [r for r in spec.rules if r not in skipped]
    why = ("its rules ran and found " + ("only: " + "; ".join(f"{f.severity} {f.rule}" for f in found)
                                         if found else "nothing") + f" ({', '.join(ran)})" +
           (f"; not run on {skipped_engine}: {', '.join(not_run)}" if not_run else ""))
    return "refuted", why


@static_decider(CROSS_ENGINE_AUX)
def decide_cross_engine(ctx: RunContext, found: list[Finding], low: bool | None) -> tuple[str, str] | None:
    """:data:`CROSS_ENGINE_AUX` from the doctor's ``aux-id-convention`` warning: when the draft's
    convention is known (recorded, or presumed from its layout) the one-layer shift is certain
    from the two engines' capture rules, only its cost is not: inconclusive whatever the
    acceptance (the probe shows the layers the target captures, the fix measures the cost);
    with the convention unknown, inconclusive only when acceptance is low (a candidate to
    measure), refuted otherwise. ``None`` (the generic decision) without that finding."""
    finding = next((f for f in found if f.rule == "aux-id-convention"), None)
    if finding is None:
        return None
    known = (finding.evidence.get("draft_convention") or {}).get("value") is not None
    if known:
        verdict, why = "inconclusive", (f"{finding.message}; the shift follows from the two engines' rules, what it "
                                        "costs does not: the probe shows the layers the target captures, the "
                                        "repaired copy measures the cost")
    elif low:
        verdict, why = "inconclusive", f"{finding.message}; acceptance is low: the other convention is worth measuring"
    else:
        verdict, why = "refuted", f"{finding.message}; but nothing says whose convention and acceptance is not low"
    return verdict, why


@static_decider("aux-eagle-config")
def decide_eagle_config(ctx: RunContext, found: list[Finding], low: bool | None) -> tuple[str, str] | None:
    """``aux-eagle-config`` from the doctor's ``aux-config-unread`` (the engine never reads the
    draft's aux ids): confirmed when the draft states ids where the engine does not look, or when
    the ids the user gave (``aux_layer_ids``) differ from the layers the engine captures; refuted
    when the given ids are what the engine's default means, or acceptance is not low; open while
    acceptance is low and the ids are recorded nowhere. ``None`` without that finding."""
    unread = next((f for f in found if f.rule == "aux-config-unread"), None)
    if unread is None:
        return None
    draft = ctx.state.draft_facts
    captured = (unread.evidence.get("captured_layers") or {}).get("value")
    given = ctx.settings.given.get("aux_layer_ids")
    if draft is not None and draft.aux_layer_ids_top_level is not None and unread.severity == "warning":
        verdict, why = "confirmed", (f"{unread.message}; the draft states ids {draft.aux_layer_ids_top_level} "
                                     "where the engine never reads them")
    elif given is not None:
        expect = [i + 1 for i in given] if captured is not None else None
        if expect is not None and list(captured) != expect and list(captured) != list(given):
            verdict, why = "confirmed", (f"{unread.message}; the draft was trained with ids {given} (given), "
                                         f"the engine captures {captured}")
        else:
            verdict, why = "refuted", f"the engine's default layers {captured} are what the given ids {given} mean"
    elif low:
        verdict, why = "inconclusive", (f"{unread.message}; acceptance is low, and the ids the draft was trained "
                                        "with are recorded nowhere: give aux_layer_ids to decide")
    else:
        verdict, why = "refuted", f"{unread.message}, and acceptance is not low (the default layers fit)"
    return verdict, why


@static_decider("aux-offset-convention")
def decide_offset_convention(ctx: RunContext, found: list[Finding], low: bool | None) -> tuple[str, str] | None:
    """``aux-offset-convention`` from its warning (this engine captures other layers than the ids
    written): open while acceptance is low (the other convention is worth measuring: a candidate
    fix), refuted otherwise. ``None`` without a finding."""
    if not found:
        return None
    if low:
        return "inconclusive", ("acceptance is low and this engine captures other layers than the ids written: the "
                                "other convention is worth measuring")
    return "refuted", "the ids are read with this engine's offset rule and acceptance is not low"


@static_decider("weights-loaded")
def decide_weights_loaded(ctx: RunContext, found: list[Finding], low: bool | None) -> tuple[str, str] | None:
    """``weights-loaded`` for a draft whose class the weight rules do not model
    (``unknown-draft-architecture``): its tensors were not followed, so it stays open. ``None``
    otherwise (or when the draft's tensors were not read)."""
    draft = ctx.state.draft_facts
    if draft is not None and draft.tensors is not None and any(f.rule == "unknown-draft-architecture"
                                                               for f in ctx.state.findings):
        return "inconclusive", ("the draft declares a class the weight rules do not model "
                                "(unknown-draft-architecture): its tensors were not followed")
    return None
