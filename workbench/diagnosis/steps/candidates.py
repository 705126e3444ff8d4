"""The candidates of an undecided hypothesis, measured: when a cause is suspected but no file says
which value is right (the aux-id offset convention), each known convention is tried in a relaunch
on top of the fixes already applied, and the best one that brings acceptance back is kept.

Reads ``ctx.state.fix`` (the fixes applied, acceptance with them) and ``ctx.state.before``; adds
each trial to ``ctx.state.fix.candidate_trials``, the kept one to ``ctx.state.fix.applied`` and
decides the hypothesis in the ledger (kind ``measurement``): confirmed by the kept candidate,
refuted when none helps. One restart per candidate, plus one to leave the best fixed server running.
"""

from __future__ import annotations

from workbench.diagnosis.acceptance import SUFFICIENT_GAIN
from workbench.diagnosis.context import RunContext
from workbench.diagnosis.results import Measurement, StartFailure, fmt
from workbench.diagnosis.steps.relaunch import launch_with
from workbench.rules.fix import Fix

__all__ = ["try_candidate_fixes"]


def try_candidate_fixes(ctx: RunContext, candidates: list[Fix], even_if_not_low: bool = False) -> None:
    """Measure every candidate of each ``candidates`` fix (kind ``candidates``) and keep the best
    one that is sufficient (no longer low, and :data:`SUFFICIENT_GAIN` × the accept length so far);
    nothing is tried when acceptance is already not low, unless ``even_if_not_low`` (the own fix
    of a hypothesis whose finding stands, :func:`~workbench.diagnosis.steps.fixes.standing_own_fixes`)."""
    base = ctx.state.fix.after.accept_length if ctx.state.fix.after is not None else (
        ctx.state.before.accept_length if ctx.state.before is not None else None)
    if base is not None and not ctx.acceptance_low(base) and not even_if_not_low:
        return
    for fix in candidates:
        hid = next((ctx.hypotheses.of_rule(r) for r in fix.rules if ctx.hypotheses.of_rule(r)), None)
        best = None
        for cand in fix.candidates:
            trial = Fix("draft-copy" if cand.get("repair") else "launch", fix.rules, cand["label"],
                        launch=cand.get("launch") or {}, repair=cand.get("repair"))
            launch, m = launch_with(ctx, ctx.state.fix.applied + [trial], f"candidate: {cand['label']}",
                                    (f"candidate: {hid}'s finding stands and the fix measured did not test it; "
                                     f"measure its own fix {cand['label']} on top of the fix") if even_if_not_low else
                                    (f"candidate: {hid} has no fix derivable from the files; measure the "
                                     f"candidate {cand['label']} on top of the fix"))
            accept = m.accept_length if isinstance(m, Measurement) else None
            ctx.state.fix.candidate_trials.append({"hypothesis": hid, "label": cand["label"], "accept_length": accept,
                                          "started": isinstance(m, Measurement),
                                          "refused": isinstance(m, StartFailure) and m.refused is not None,
                                          "launch_command": launch.to_display()})
            if accept is not None and (best is None or accept > best[0]):
                best = (accept, trial, launch, m)
        if best is None or hid is None:
            continue
        accept, trial, launch, m = best
        if (base is None or accept >= base * SUFFICIENT_GAIN) and not ctx.acceptance_low(accept, launch):
            ctx.state.fix.applied.append(trial)
            ctx.state.fix.launch, ctx.state.fix.after = launch, m
            ctx.decide(hid, "confirmed", f"measured: {trial.summary} brings accept length to {accept:.3f} "
                         f"(from {fmt(base)})", data={"trials": [t for t in ctx.state.fix.candidate_trials
                                                                  if t["hypothesis"] == hid]}, kind="measurement")
            base = accept
        else:
            ctx.decide(hid, "refuted", f"measured: no candidate helps (best {accept:.3f} against {fmt(base)})",
                         data={"trials": [t for t in ctx.state.fix.candidate_trials if t["hypothesis"] == hid]},
                         kind="measurement")
    if ctx.state.fix.after is not None and ctx.session.current is not None and ctx.state.fix.launch is not None \
            and ctx.session.current_launch is not None and ctx.session.current_launch.argv != ctx.state.fix.launch.argv:
        # leave the best fixed server running (keep_fix / the ladder expect it), not the last trial
        launch_with(ctx, ctx.state.fix.applied, "fix",
                    "fix again: the best fixed server back after the candidates (keep_fix and the ladder use it)")
