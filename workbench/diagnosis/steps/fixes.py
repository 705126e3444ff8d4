"""Step 5, the fixes: every fix the confirmed causes derive (each family's fixer, in the order the
causes act), applied in ONE relaunch (launch-command changes and one repaired copy of the draft),
measured, and judged: a fix is a fix when accept length came back (:func:`judge_fix`). The doctor
runs again on the fixed command (:func:`doctor_on_fix`): a confirmed cause whose every error the
fix cleared is a consequence (:func:`cleared_by_fix`), as is one whose findings name a confirmed
cause (:func:`explained_by`). Then the candidates of the undecided hypotheses
(:mod:`~workbench.diagnosis.steps.candidates`).

Reads ``ctx.state.static`` (findings, facts), the ledger, ``ctx.state.before`` and
``ctx.state.probe`` (probes in place are read again on the fixed server; probes that ride on the fix
launch, :func:`probe_launch_needed`, are read there only); adds ``ctx.state.fix``
(derived, applied, after, result, doctor) and ``after_fix_*`` to the probe's result; adds to the
ledger the fix's measurement as evidence of the fixed hypotheses and, when it was sufficient,
refutes the hypotheses still open (kind ``measurement``).
"""

from __future__ import annotations

import dataclasses

from remote.errors import RemoteError
from workbench.diagnosis.acceptance import SUFFICIENT_GAIN
from workbench.diagnosis.context import RunContext
from workbench.diagnosis.results import Measurement, StartFailure, StepResult, fmt
from workbench.diagnosis.steps.candidates import try_candidate_fixes
from workbench.diagnosis.steps.hypotheses import CROSS_ENGINE_AUX
from workbench.diagnosis.steps.probe import launch_probe, read_probes, revert_probes, suspects
from workbench.diagnosis.steps.readings import DECIDED_AS_FOUND, attach_probe_evidence, summarize_readings
from workbench.diagnosis.steps.relaunch import launch_with
from workbench.diagnosis.steps.static import facts
from workbench.doctor import DoctorError
from workbench.engine.launch import LaunchCommand
from workbench.errors import DiagnosisError, ServerStoppedAnswering
from workbench.rules import REGISTRY
from workbench.rules.fix import Fix
from workbench.rules.registry import HypothesisSpec

__all__ = ["MEASURED_EVEN_IF_NOT_LOW", "RIDING_KEYS", "standing_findings", "standing_own_fixes", "derive_fixes", "apply_fixes", "fix_will_be_measured",
           "probe_launch_needed", "doctor_on_fix", "explained_by", "cleared_by_fix", "judge_fix"]

#: Confirmed causes whose fix is applied and measured even when acceptance as found is not judged
#: low: a convention shift shown on the code path is a certain fault whose cost only a measurement
#: gives (the sandbox draft on vLLM sits near the low threshold either side).
MEASURED_EVEN_IF_NOT_LOW = (CROSS_ENGINE_AUX,)


def derive_fixes(ctx: RunContext) -> list[Fix]:
    """Every fix the families derive for the confirmed hypotheses (and, for undecided ones,
    candidates to measure), in the order the causes act."""
    as_found, relaunched = facts(ctx), facts(ctx, launch_fixed=True)
    # a consequence asks for nothing its cause explains: no fix, no `none` fix, no candidate of its own
    consequence = {hid for hid in ctx.hypotheses.specs if explained_by(ctx, ctx.hypotheses.specs[hid])}
    confirmed = {hid for hid in ctx.hypotheses.specs if ctx.ledger.get(hid).verdict == "confirmed"} - consequence
    open_ = {hid for hid in ctx.hypotheses.specs if ctx.ledger.get(hid).verdict == "inconclusive"} - consequence
    wanted: dict[str, str] = {}
    for hid in confirmed | open_:
        for rule in ctx.hypotheses.specs[hid].rules:
            wanted.setdefault(rule, hid)
    out: list[tuple[int, Fix]] = []
    seen_fixers = set()
    for spec, fam in REGISTRY.hypotheses():
        if fam.fixer is None or fam.name in seen_fixers:
            continue
        seen_fixers.add(fam.name)
        mine = [f for f in ctx.state.findings if f.rule in wanted]
        known = as_found if fam.name == "launch-flags" else relaunched
        for fix in fam.fixer(known, mine, ctx.settings.given):
            hids = {wanted[r] for r in fix.rules if r in wanted}
            if not hids:
                continue
            if fix.kind == "candidates" and not (hids & open_):
                continue
            if fix.kind != "candidates" and not (hids & confirmed) and fix.kind != "none":
                continue
            order = min(ctx.hypotheses.specs[h].order for h in hids)
            out.append((order, fix))
    fixes: list[Fix] = []
    for _, fix in sorted(out, key=lambda of: of[0]):
        same = next((i for i, f in enumerate(fixes) if f.kind == fix.kind and f.summary == fix.summary
                     and f.missing == fix.missing and f.launch == fix.launch and f.repair is fix.repair), None)
        if same is None:
            fixes.append(fix)
        else:  # two rules proposing the same fix: listed once, answering both
            fixes[same] = dataclasses.replace(fixes[same], rules=tuple(dict.fromkeys(fixes[same].rules + fix.rules)))
    ctx.state.fix.derived = fixes
    return ctx.state.fix.derived


def apply_fixes(ctx: RunContext) -> Measurement | StartFailure | StepResult | None:
    """Apply every derivable fix of the confirmed causes in ONE relaunch (launch changes, and a
    single repaired copy of the draft carrying every repair), read the probes on the fixed
    server, measure. Sufficient when acceptance is no longer low and rose by
    :data:`SUFFICIENT_GAIN` (or, when nothing could be measured before, is simply not low);
    otherwise the fix is reported as insufficient and the causes stay open. Then, when allowed,
    the candidates of the undecided hypotheses (the offset convention) are tried, each measured
    on top of the fix, and the best one that helps is kept. ``None`` when nothing was applied.
    A fixed server that stops answering ends the run (``inconclusive``, see :mod:`~workbench.diagnosis.steps.symptom`)."""
    fx = ctx.state.fix
    if not (ctx.settings.apply_fix and ctx.session.allow_restart):
        revert_probes(ctx)
        return None
    fixes = derive_fixes(ctx)
    applicable = [f for f in fixes if f.kind in ("launch", "draft-copy")]
    candidates = [f for f in fixes if f.kind == "candidates"]
    result = None
    if not fix_will_be_measured(ctx, applicable):
        # Nothing to prove: a relaunch with the fix could only show the same acceptance.
        if applicable:
            ctx.notes.append(f"accept length {fmt(ctx.state.before.accept_length)} is not low: the fixes of the "
                              "confirmed causes are proposed, not applied (they have no measured effect here)")
        revert_probes(ctx)
        judge_fix(ctx)
        return None
    if applicable:
        fx.applied = list(applicable)
        riding = ctx.state.probe.rides_on == "fix" and bool(ctx.state.probe.in_place)
        rules = ", ".join(dict.fromkeys(r for f in applicable for r in f.rules))
        reason = (f"fix: measure the fix for {rules}" + (" with the probes riding on it" if riding else
                  " with the probes still in place" if ctx.state.probe.in_place else ""))
        try:
            fx.launch, result = launch_with(ctx, applicable, "fix", reason)
            doctor_on_fix(ctx, fx.launch)
            if isinstance(result, StartFailure) and result.refused is not None:
                # Not tried: what the fix leaves still stops start-up. The causes stay open.
                fx.refused, fx.blocked, fx.applied, fx.launch = result, fx.applied, [], None
            if isinstance(result, Measurement):
                handle = ctx.session.current
                if ctx.state.probe.in_place and handle is not None:
                    readings = read_probes(ctx, handle)
                    after = summarize_readings(ctx, readings, before=False)
                    ctx.state.probe.result["after_fix_hidden_size"] = after.get("observed_hidden_size")
                    ctx.state.probe.result["after_fix_shape"] = after.get("observed_shape")
                    ctx.state.probe.result["after_fix_widths"] = after.get("observed_widths")
                    ctx.state.probe.result["after_fix"] = {k: v for k, v in after.items() if k != "lines"}
                    ctx.state.probe.result["after_fix_lines"] = after.get("lines")
                    if riding:
                        ctx.state.probe.result.update({k: after[k] for k in after if k in RIDING_KEYS})
                        attach_probe_evidence(ctx, readings, after, on_fix=True)
                fx.after = result
            elif riding:
                # the load the probes were to ride on did not serve: their own launch, as found
                why = result.exception or result.error if isinstance(result, StartFailure) else "no measurement"
                launch_probe(ctx, f"probe: the fix launch the probes were to ride on "
                                  f"{'was refused' if fx.refused is not None else 'did not start'} ({why}); "
                                  "the mechanism is read on the server as found")
        except ServerStoppedAnswering:
            raise
        except DiagnosisError as exc:
            ctx.notes.append(f"the fix could not be applied: {exc}")
    unfixed = [hid for hid in ctx.hypotheses.specs if ctx.ledger.get(hid).verdict == "confirmed"
               and not any(ctx.hypotheses.of_rule(r) == hid for f in fx.applied for r in f.rules)
               and not cleared_by_fix(ctx, ctx.hypotheses.specs[hid]) and not explained_by(ctx, ctx.hypotheses.specs[hid])]
    own = standing_own_fixes(ctx) if isinstance(fx.after, Measurement) else []
    if (candidates or own) and ctx.settings.try_candidates and ctx.session.allow_restart:
        if unfixed:
            # A confirmed cause with no fix keeps acceptance low whatever the candidates do: a
            # restart per candidate would measure nothing about them.
            ctx.notes.append(f"candidates not tried: {', '.join(unfixed)} is confirmed and has no fix applied; "
                              "acceptance stays low until it is fixed")
        else:
            if candidates:
                try_candidate_fixes(ctx, candidates)
            if own:  # a standing finding whose fix the measurement did not test: measured on top of it
                try_candidate_fixes(ctx, [f for f in own if ctx.ledger.get(
                    ctx.hypotheses.of_rule(f.rules[0])).verdict == "inconclusive"], even_if_not_low=True)
    revert_probes(ctx)
    judge_fix(ctx)
    # a candidate fix for a hypothesis the measurements refuted is no fix to propose
    fx.derived = [f for f in fx.derived if not (f.kind == "candidates" and all(
        ctx.ledger.get(h).verdict == "refuted" for h in {ctx.hypotheses.of_rule(r) for r in f.rules} - {None}))]
    return fx.after if fx.after is not None else result


#: What a summary of the fix launch's probe readings gives the probe's result when the probes rode
#: on it (no probe launch: these readings are the run's only ones).
RIDING_KEYS = ("captured_layers", "d2t", "unmatched", "unmatched_unknown", "left_at_init", "shared_from_target",
               "ranks", "ranks_disagree", "expected_hidden_size", "target_hidden_size")


def fix_will_be_measured(ctx: RunContext, applicable: list[Fix]) -> bool:
    """Whether :func:`apply_fixes` relaunches with the ``applicable`` fixes (launch and
    draft-copy kinds) and measures them: fixes allowed (``apply_fix``, ``allow_restart``), and
    acceptance as found low or not measured — or a cause of :data:`MEASURED_EVEN_IF_NOT_LOW`
    among them (its cost only a measurement gives)."""
    if not (ctx.settings.apply_fix and ctx.session.allow_restart):
        return False
    measured_anyway = [h for h in MEASURED_EVEN_IF_NOT_LOW if ctx.ledger.get(h).verdict == "confirmed"
                       and any(ctx.hypotheses.of_rule(r) == h for f in applicable for r in f.rules)]
    before = ctx.state.before
    return not (before is not None and ctx.acceptance_low(before.accept_length) is False and not measured_anyway)


def standing_findings(ctx: RunContext, hid: str) -> list:
    """The doctor's findings of hypothesis ``hid`` that stand (severity warning or error): a
    measurement that did not test their own fix never refutes ``hid``."""
    spec = ctx.hypotheses.specs.get(hid)
    if spec is None:
        return []
    return [f for f in ctx.state.findings if f.rule in spec.rules and f.severity in ("warning", "error")]


def standing_own_fixes(ctx: RunContext) -> list[Fix]:
    """The own fix of each still-open :data:`MEASURED_EVEN_IF_NOT_LOW` hypothesis with a standing
    finding (e.g. the doctor's ``aux-id-convention`` warning on a launch whose server did not start
    as found, so no probe decided it), as a one-candidate fix (kind ``candidates``) to measure on
    top of the fix applied: docs/runbooks.md, a certain shift is measured even when acceptance is
    not judged low. Empty when none is open or its fixer derives nothing to apply."""
    out: list[Fix] = []
    relaunched = facts(ctx, launch_fixed=True)
    applied = set(ctx.hypotheses.of_fixes(ctx.state.fix.applied))
    for hid in MEASURED_EVEN_IF_NOT_LOW:
        if hid in applied or ctx.ledger.get(hid).verdict != "inconclusive":
            continue
        mine = standing_findings(ctx, hid)
        if not mine:
            continue
        seen = set()
        for _spec, fam in REGISTRY.hypotheses():
            if fam.fixer is None or fam.name in seen:
                continue
            seen.add(fam.name)
            for fix in fam.fixer(relaunched, mine, ctx.settings.given):
                if fix.kind in ("draft-copy", "launch"):
                    out.append(Fix("candidates", fix.rules, f"its own fix, measured on top: {fix.summary}",
                                   candidates=[{"label": fix.summary, "launch": fix.launch or {},
                                                "repair": fix.repair}]))
                elif fix.kind == "candidates":
                    out.append(fix)
    return out


def probe_launch_needed(ctx: RunContext) -> list[str]:
    """Why the probes need a launch of their own, one sentence per reason; empty when they can
    ride on the fix launch. They ride when a fix launch will be made and measured
    (:func:`fix_will_be_measured`: some confirmed cause has a launch or draft-copy fix) and no
    suspect (:func:`~workbench.diagnosis.steps.probe.suspects`) without a fix of its own is one
    that only readings of the server as found decide
    (:data:`~workbench.diagnosis.steps.readings.DECIDED_AS_FOUND`): every other suspect is read on
    the fixed server (its readings are those of the deployment the fix leaves alone) and decided
    by the fix's measurement (a fix that brings acceptance back leaves it nothing to explain) or
    its candidates. A probe launch is needed with no fix launch at all (no fix derivable, only
    candidates, ``apply_fix`` off, acceptance not low), and with low acceptance and no suspect."""
    suspected = suspects(ctx)
    if not suspected:
        return ["acceptance is low and no hypothesis is suspect from the static evidence: the probes look for "
                "the mechanism on the server as found"]
    fixes = derive_fixes(ctx)
    applicable = [f for f in fixes if f.kind in ("launch", "draft-copy")]
    answered = set(ctx.hypotheses.of_fixes(applicable))

    def lacks(hid: str) -> str:
        kinds = {f.kind for f in fixes if hid in ctx.hypotheses.of_fixes([f])}
        return "only candidates to measure" if "candidates" in kinds else "no fix derivable"

    if not applicable or not fix_will_be_measured(ctx, applicable):
        why = ("allow_restart is False" if not ctx.session.allow_restart else
               "apply_fix is False" if not ctx.settings.apply_fix else
               "no confirmed cause has a fix" if not applicable else
               "acceptance as found is not low: the fixes are proposed, not applied")
        unfixed = [h for h in suspected if h not in answered]
        return ([f"{hid} could not be decided from the running server and the code path ({lacks(hid)}), and no "
                 f"fix launch will carry the probes ({why})" for hid in unfixed] or
                [f"{', '.join(suspected)}: no fix launch will carry the probes ({why}); their mechanism is read on "
                 "the server as found"])
    return [f"{hid} could not be decided from the running server and the code path ({lacks(hid)}): only the "
            "probes' readings on the server as found decide it" for hid in suspected
            if hid not in answered and hid in DECIDED_AS_FOUND]


def doctor_on_fix(ctx: RunContext, launch: LaunchCommand) -> None:
    """Every rule again on the fixed command, the repaired draft copy in place (static, no
    restart): ``ctx.state.fix.doctor`` gets the error rules the fix cleared and the findings that
    remain. A confirmed cause without a fix of its own whose every error the fix cleared is a
    consequence of the fixed causes (:func:`workbench.diagnosis.verdict.consequences`), not a root cause."""
    try:
        report, _cached = ctx.session.guard.report(launch)  # the launch guard ran it on this command already
    except (DoctorError, RemoteError) as exc:
        ctx.notes.append(f"the doctor on the fixed command did not run ({type(exc).__name__}: {exc})")
        return
    left = {f.rule for f in report.findings if f.severity == "error"}
    ctx.state.fix.doctor = {
        "launch_command": launch.to_display(),
        "cleared": sorted({f.rule for f in ctx.state.findings if f.severity == "error"} - left),
        "remaining": [{"rule": f.rule, "severity": f.severity, "message": f.message}
                      for f in report.findings if f.severity in ("error", "warning")],
    }


def explained_by(ctx: RunContext, spec: HypothesisSpec) -> list[str]:
    """The confirmed hypotheses whose cause explains every finding of ``spec`` statically (the ledger's
    ``consequence_of``, set by :func:`~workbench.diagnosis.steps.hypotheses.mark_consequences` through
    the links :mod:`workbench.rules.consequences` declares, e.g. the weight findings of a draft whose
    config disagrees with its own tensors). Empty when any finding of ``spec`` stands on its own."""
    return [c for c in ctx.ledger.get(spec.id).consequence_of if ctx.ledger.get(c).verdict == "confirmed"]


def cleared_by_fix(ctx: RunContext, spec: HypothesisSpec) -> bool:
    """Whether the fix cleared every error finding of ``spec`` while no applied fix is its own
    (never when the fix's launch was refused: nothing was fixed, every cause stays a cause)."""
    if not ctx.state.fix.doctor or ctx.state.fix.refused is not None or spec.id in ctx.hypotheses.of_fixes(ctx.state.fix.applied):
        return False
    errors = {f.rule for f in ctx.state.findings if f.rule in spec.rules and f.severity == "error"}
    return bool(errors) and errors <= set(ctx.state.fix.doctor["cleared"])


def judge_fix(ctx: RunContext) -> None:
    """``ctx.state.fix.result``: whether a fix was applied, and when measured whether it is
    sufficient (no longer low, and :data:`SUFFICIENT_GAIN` × the accept length before), with the
    numbers in words (``why``); a fix launch the guard refused says what blocks it."""
    fx = ctx.state.fix
    before = ctx.state.before.accept_length if ctx.state.before is not None else None
    after = fx.after.accept_length if fx.after is not None else None
    launch = fx.launch
    if not fx.applied:
        fx.result = {"applied": False, "sufficient": None}
        if fx.refused is not None:
            blocking = fx.refused.refused or []
            fx.result.update({
                "tried": False, "refused": True, "blocked_by": blocking,
                "why": "the fix was not tried: the doctor on the command with it applied still finds what stops "
                       "the server from starting — " + "; ".join(f"{f['rule']}: {f['message']}" for f in blocking)})
        return
    failed = next((f for f in reversed(ctx.state.start_failures) if f.label == "fix"), None)
    if after is None:
        fx.result = {"applied": True, "sufficient": False,
                           "why": f"the server does not start with the fix: {failed.exception or failed.error}"
                           if failed else "nothing was measured with the fix"}
        return
    low = ctx.acceptance_low(after, launch)
    sufficient = (not low) and (before is None or after >= before * SUFFICIENT_GAIN)
    fx.result = {"applied": True, "sufficient": bool(sufficient), "before": before, "after": after,
                       "why": (f"accept length {fmt(before)} → {after:.3f}" +
                               ("" if sufficient else (" — still low" if low else " — no real gain")))}
    for hid in ctx.hypotheses.of_fixes(fx.applied):
        ctx.add_evidence(hid, ("measured: the fix brought acceptance back: " if sufficient and before is not None else
                               "measured: with the fix acceptance is not low (nothing was measured before it): "
                               if sufficient else "measured: the fix is not enough: ") + fx.result["why"],
                         {"before": before, "after": after}, kind="measurement")
    if sufficient:
        fixed = set(ctx.hypotheses.of_fixes(fx.applied))
        done = ("brought acceptance back" if before is not None else
                "left acceptance not low (nothing was measured before it)")
        for spec, _ in REGISTRY.hypotheses():
            if spec.id in fixed or ctx.ledger.get(spec.id).verdict != "inconclusive":
                continue
            standing = standing_findings(ctx, spec.id)
            if standing:
                # its finding stands and the measurement did not test its fix: not refuted by it
                rules = ", ".join(dict.fromkeys(f.rule for f in standing))
                ctx.add_evidence(spec.id, f"not decided: the fix of the confirmed causes {done} "
                                 f"({fx.result['why']}) but did not include the fix of {rules}, whose finding "
                                 "stands; its own fix measured on top of it (or the probe's reading on the fixed "
                                 "server) decides it", {"standing": [f.rule for f in standing]}, kind="measurement")
                continue
            ctx.decide(spec.id, "refuted", f"the fix of the confirmed causes {done} "
                       f"({fx.result['why']}): nothing left for it to explain", kind="measurement")
