"""A launch whose server died at start-up, named: the engine's own error line, the step it died in,
and the rule that explains it — or "a start-up death the rules do not explain", never an empty cause.

:func:`read_start_death` reads the death from the dead server's log (:func:`workbench.logs.deaths.read_death`)
when :func:`workbench.diagnosis.serving.try_launch` records a :class:`StartFailure`;
:func:`attribute_deaths` (run by the hypotheses step and again by the verdict, idempotent) maps each
death to the doctor's findings on that launch (:func:`workbench.logs.deaths.attribute`): a death
whose signature's rules found an error confirms that hypothesis with the death as evidence (when the
finding said it prevents the start, the death is the prediction come true); a death whose text no
such rule explains is still attributed to the findings that said the launch would not start
(``prevents_start``); only a death with neither is recorded as unexplained, with its line and step. :func:`start_death` is the verdict's
``start_death`` entry. Reads the box only in :func:`read_start_death` (one bounded tail).
"""

from __future__ import annotations

from typing import Any

from remote.errors import RemoteError
from workbench.diagnosis.context import RunContext
from workbench.logs.deaths import attribute, read_death, read_death_from_box

__all__ = ["read_start_death", "attribute_deaths", "start_death"]

def read_start_death(ctx: RunContext, log_path: str | None, log_tail: list[str], engine: str | None) -> dict | None:
    """The death (:meth:`workbench.logs.deaths.Death.to_dict`) the log at ``log_path`` on the box
    shows, read from its last bytes (:func:`workbench.logs.deaths.read_death_from_box`, 30 s per
    box call), else from ``log_tail`` (the lines the start-up error carried); None when no line
    says why the server ended. A log that cannot be read is noted in ``ctx.notes``, never raised."""
    if log_path:
        try:
            death = read_death_from_box(ctx.box, log_path, timeout=30, engine=engine)
            return death.to_dict() if death is not None else None
        except (RemoteError, OSError) as exc:
            ctx.notes.append(f"the dead server's log {log_path} could not be read for its death ({exc}); "
                             "read from the lines the start-up error carried")
    death = read_death(list(log_tail), engine=engine)
    return death.to_dict() if death is not None else None


def _death_of(entry: dict) -> Any:
    """A :class:`~workbench.logs.deaths.Death`-like view of a stored death dict, for :func:`attribute`."""
    from workbench.logs.death_signatures import SIGNATURES
    from workbench.logs.deaths import Death

    sig = entry.get("signature") or {}
    signature = next((s for s in SIGNATURES if s.id == sig.get("id")), None)
    return Death(exception=entry["exception"], exc_type=entry.get("exc_type") or "", message=entry.get("message") or "",
                 step=entry.get("step") or "launch", log_phase=entry.get("log_phase") or "launch",
                 rank=entry.get("rank"), where=entry.get("where"), signature=signature)


def attribute_deaths(ctx: RunContext) -> None:
    """Attribute every start failure's death that is not yet (``failure.death["attribution"]``)
    to the doctor's error findings on the launch as found (``ctx.state.findings``; a fix or probe
    launch's death to the same findings less the ones its fix answered is left to the fix step:
    only the failures labelled ``as-found`` are attributed here). An explained death is evidence
    (kind ``"log"``) of each hypothesis whose rule it names, confirming it; an unexplained one
    adds a note. Does nothing before the doctor ran (no findings read yet)."""
    if ctx.state.static_report is None:
        return
    errors = [f for f in ctx.state.findings if f.severity == "error"]
    for failure in ctx.state.start_failures:
        death = failure.death
        if not death or death.get("attribution") is not None:
            continue
        if failure.label != "as-found":
            continue
        prevents = list(dict.fromkeys(f.rule for f in errors if f.prevents_start))
        result = attribute(_death_of(death), [f.rule for f in errors], prevents)
        predicted = result["predicted"]
        death["attribution"] = result
        if not result["explained"]:
            ctx.notes.append(f"{failure.label}: {result['why']}")
            continue
        for rule in result["rules"]:
            hid = ctx.hypotheses.of_rule(rule)
            if hid is None:
                continue
            said = ("the doctor predicted this death (its finding says the server does not start) and the "
                    "engine's own line confirms it: " if rule in predicted and rule in result["candidates"] else "")
            summary = f"{said}{result['why']}"
            data = {"exception": death["exception"], "step": death["step"], "rank": death.get("rank"),
                    "signature": (death.get("signature") or {}).get("id"), "rule": rule, "log": failure.label}
            if ctx.ledger.get(hid).verdict == "confirmed":
                ctx.add_evidence(hid, summary, data, kind="log")
            else:
                ctx.decide(hid, "confirmed", summary, data=data, kind="log")


def start_death(ctx: RunContext) -> dict | None:
    """The verdict's ``start_death``: the first start failure's death with its attribution
    (``exception``, ``step``, ``rank``, ``where``, ``signature``, ``attribution``: ``{"rules",
    "candidates", "explained", "why", "predicted"}``, and ``label``), None when no launch died
    with a readable death."""
    attribute_deaths(ctx)
    for failure in ctx.state.start_failures:
        if failure.death:
            return {"label": failure.label, **failure.death}
    return None
