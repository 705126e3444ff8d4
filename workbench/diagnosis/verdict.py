"""The verdict: what the steps found, read as a case — the root causes in the order they act
(:func:`root_causes`; a confirmed cause the fix cleared, or one whose findings name another cause,
is a consequence: :func:`consequences`), what is still open and how to decide it
(:func:`still_open`), the outcome (:func:`outcome`: healthy, fixed, partly-fixed, latent,
cause-found, server-does-not-start, unexplained, inconclusive; :func:`outcome_detail`), the fixed
command (:func:`proposed_launch`, :func:`launch_diff`) and the verdict document
(:func:`build_verdict`; schema: DESIGN.md, "Contracts").

Reads ``ctx.state`` and the ledger, never the box; changes nothing (except that
:func:`proposed_launch` derives the fixes when no step did yet).
"""

from __future__ import annotations

import time
from typing import Any

from workbench.diagnosis.context import RunContext
from workbench.diagnosis.deaths import start_death
from workbench.diagnosis.loads import all_launches, count_loads, downtime_s, timeline
from workbench.diagnosis.results import Measurement
from workbench.diagnosis.steps.fixes import cleared_by_fix, derive_fixes, explained_by
from workbench.diagnosis.steps.relaunch import fixed_launch
from workbench.engine.launch import LaunchCommand
from workbench.rules import REGISTRY
from workbench.rules.acceptance_level import classify_acceptance
from workbench.rules.runtime import acceptance_collapsed

__all__ = ["consequences", "root_causes", "root_cause", "still_open", "outcome", "undecided", "outcome_detail",
           "proposed_launch", "launch_diff", "load_cost", "build_verdict", "checked",
           "open_with_standing_finding"]


def consequences(ctx: RunContext) -> list[dict[str, Any]]:
    """The confirmed hypotheses that are consequences of the root causes: those whose every finding a
    confirmed cause explains statically (the ledger's ``consequence_of``: the links
    :mod:`workbench.rules.consequences` declares, each with its evidence condition; known before any
    relaunch), and those no fix of their own was applied to whose every error the doctor on the
    fixed command no longer reports (e.g. the draft's own embedding required only because the
    config's target_hidden_size is wrong). Each: ``hypothesis``, ``rule``, ``message``,
    ``cleared_by`` (the explaining hypotheses, or the fixed ones), ``how`` (``"static"``: explained
    before any relaunch; ``"fix"``: the fix cleared its findings), ``mechanism`` (static: how the
    cause makes its rule fire), ``cleared_by_fix`` (whether the fix's doctor no longer reports it:
    recorded as evidence once a fix was applied)."""
    out = []
    for spec, _fam in REGISTRY.hypotheses():
        hyp = ctx.ledger.get(spec.id)
        if hyp.verdict != "confirmed":
            continue
        explained = explained_by(ctx, spec)
        cleared = cleared_by_fix(ctx, spec)
        if not (cleared or explained):
            continue
        finding = next((f for f in ctx.state.findings if f.rule in spec.rules and f.severity == "error"),
                       next((f for f in ctx.state.findings if f.rule in spec.rules), None))
        links = [e for e in hyp.evidence if e.kind == "consequence"]
        out.append({"hypothesis": spec.id, "rule": finding.rule if finding else None,
                    "message": finding.message if finding else hyp.evidence[-1].summary,
                    "cleared_by": explained or ctx.hypotheses.of_fixes(ctx.state.fix.applied),
                    "how": "static" if explained else "fix",
                    "mechanism": links[0].summary if links else None,
                    "cleared_by_fix": cleared or (explained and _gone_after_fix(ctx, spec))})
    return out


def _gone_after_fix(ctx: RunContext, spec) -> bool | None:
    """Whether the doctor on the fixed command no longer reports ``spec``'s error findings (``None``
    when no fix was checked)."""
    if not ctx.state.fix.doctor:
        return None
    errors = {f.rule for f in ctx.state.findings if f.rule in spec.rules and f.severity == "error"}
    return bool(errors) and errors <= set(ctx.state.fix.doctor["cleared"])


def root_causes(ctx: RunContext) -> list[dict[str, Any]]:
    """Every confirmed cause, in the order it acts on a request: its hypothesis, its first error
    finding (or the measurement that confirmed it), the fix derived for it and whether it was
    applied, and ``consequences``: the hypotheses it explains (:func:`consequences`, ``hypothesis``
    and ``rule`` each), reported under it and never as causes of their own."""
    out = []
    cons = consequences(ctx)
    for spec, fam in REGISTRY.hypotheses():
        hyp = ctx.ledger.get(spec.id)
        if hyp.verdict != "confirmed" or cleared_by_fix(ctx, spec) or explained_by(ctx, spec):
            continue
        errors = [f for f in ctx.state.findings if f.rule in spec.rules and f.severity == "error"]
        finding = errors[0] if errors else next((f for f in ctx.state.findings if f.rule in spec.rules), None)
        fixes = [f for f in ctx.state.fix.derived if any(ctx.hypotheses.of_rule(r) == spec.id for r in f.rules)]
        applied = [f for f in ctx.state.fix.applied if any(ctx.hypotheses.of_rule(r) == spec.id for r in f.rules)]
        out.append({"hypothesis": spec.id, "rule": finding.rule if finding else None,
                    "message": finding.message if finding else hyp.evidence[-1].summary,
                    "family": fam.name, "fix_kinds": sorted({f.kind for f in fixes}),
                    "fix_applied": bool(applied), "fix": (applied or fixes)[0].summary if (applied or fixes) else None,
                    "missing": next((f.missing for f in fixes if f.kind == "none"), None),
                    "consequences": [{"hypothesis": c["hypothesis"], "rule": c["rule"], "how": c["how"]}
                                     for c in cons if spec.id in c["cleared_by"]]})
    return out


def root_cause(ctx: RunContext) -> dict[str, Any] | None:
    """The first cause to act (:func:`root_causes`), with the mechanism flag for the width probe."""
    causes = root_causes(ctx)
    if not causes:
        return None
    first = dict(causes[0])
    pr = ctx.state.probe.result
    on_found = bool(pr.get("observed_hidden_size") is not None
                    and pr.get("observed_hidden_size") != pr.get("expected_hidden_size"))
    on_fix = bool(pr.get("mechanism_shown_on_fix")) and first.get("hypothesis") == "algorithm-flag"
    first["mechanism_confirmed_by_probe"] = on_found or on_fix or first.get("hypothesis") in ctx.state.probe.confirmed
    # how: a probe launch on the server as found, or the probes riding on the fix launch judged
    # with what the server as found showed without a restart (steps.readings.attach_fix_width_evidence)
    first["mechanism_confirmed_by"] = ("probe on the server as found" if on_found or first.get("hypothesis") in
                                       ctx.state.probe.confirmed else
                                       "probe on the fixed server + live evidence of the server as found" if on_fix
                                       else None)
    return first


def still_open(ctx: RunContext) -> list[dict[str, Any]]:
    """The hypotheses not decided, each with what would decide it; and, when a fix was applied
    but is not sufficient, the causes it did not cure."""
    out = []
    never_served = ctx.state.before is None and ctx.state.fix.after is None and bool(ctx.state.start_failures)
    if never_served and not root_causes(ctx):
        failure = ctx.state.start_failures[0]
        attribution = (failure.death or {}).get("attribution") or {}
        out.append({"hypothesis": "server start", "why": attribution.get("why") or failure.exception or failure.error,
                    "decide": "the log tail above: fix what it names (a flag value, an interpreter, a file), "
                              "then run again", "parameter": None})
    for spec, _ in REGISTRY.hypotheses():
        hyp = ctx.ledger.get(spec.id)
        if never_served and not spec.static:
            continue  # a runtime-only cause needs a server that serves: not reached
        if hyp.verdict == "inconclusive":
            fix = next((f for f in ctx.state.fix.derived if f.kind == "none" and any(ctx.hypotheses.of_rule(r) == spec.id
                                                                           for r in f.rules)), None)
            out.append({"hypothesis": spec.id, "why": hyp.evidence[-1].summary if hyp.evidence else "",
                        "decide": spec.decide or (fix.missing if fix else "the probes of " + spec.id),
                        "parameter": fix.parameter if fix else None})
    if ctx.state.fix.blocked and ctx.state.fix.refused is not None:
        blocking = "; ".join(f"{f['rule']}: {f['message']}" for f in ctx.state.fix.refused.refused or [])
        seen = set()
        for fix in ctx.state.fix.blocked:
            for rule in fix.rules:
                hid = ctx.hypotheses.of_rule(rule)
                if hid and hid not in seen:
                    seen.add(hid)
                    out.append({"hypothesis": hid, "why": f"its fix ({fix.summary}) was not tried: the launch "
                                f"with it was refused, still blocked by {blocking}",
                                "decide": "fix what the blocking findings name, then run again (force_launch=True "
                                          "launches anyway)", "parameter": "force_launch"})
    if ctx.state.fix.result.get("applied") and not ctx.state.fix.result.get("sufficient"):
        for hid in ctx.hypotheses.of_fixes(ctx.state.fix.applied):
            out.append({"hypothesis": hid, "why": "its fix was applied and measured: " + ctx.state.fix.result["why"],
                        "decide": "the other hypotheses above; the probe lines of the fixed server", "parameter": None})
    return out


def outcome(ctx: RunContext) -> str:
    """``healthy`` (nothing confirmed, acceptance not low), ``fixed`` (every confirmed cause with
    an applied fix that brought acceptance back), ``partly-fixed`` (a fix applied, not
    sufficient), ``latent`` (a cause confirmed while acceptance is not low: a fault with no
    measured effect on acceptance here, its fix proposed and not applied), ``cause-found`` (a
    cause named, acceptance low or not measured, its fix not applied or not derivable),
    ``server-does-not-start`` (as found, with no cause named), ``unexplained`` (acceptance low,
    nothing confirmed once the hypotheses were looked at), ``inconclusive`` (nothing confirmed, and
    acceptance low with no hypothesis looked at yet, or the symptom was not measured
    or acceptance is not low while a hypothesis is still undecided: :func:`outcome_detail`
    says which). ``healthy`` only when acceptance was measured, is not low and every
    hypothesis was decided. A run whose server stopped answering mid-run (:attr:`server_lost`)
    is ``inconclusive`` whatever else it found: its measurements were cut off."""
    if ctx.state.server_lost is not None:
        return "inconclusive"
    causes = root_causes(ctx)
    low = ctx.acceptance_low(ctx.state.before.accept_length if ctx.state.before is not None else None)
    if ctx.speculation_off():
        low = True  # no verify step at all: no speedup, whatever else holds
    if causes and low is False and not ctx.state.fix.result.get("applied"):
        return "latent"
    if ctx.state.fix.result.get("applied") and ctx.state.fix.result.get("after") is not None:
        if ctx.state.fix.result.get("sufficient") and all(c["fix_applied"] for c in causes) \
                and not open_with_standing_finding(ctx):
            return "fixed"
        return "partly-fixed"
    if causes:
        return "cause-found"
    if ctx.state.start_failures and ctx.state.before is None:
        return "server-does-not-start"
    if low and not checked(ctx):
        return "inconclusive"  # low, but no hypothesis was ever looked at: nothing is "unexplained" yet
    if low:
        return "unexplained"
    if low is None or undecided(ctx):
        return "inconclusive"  # never "healthy" on a symptom not measured or a hypothesis not decided
    return "healthy"


def open_with_standing_finding(ctx: RunContext) -> list[str]:
    """The undecided hypotheses one of whose doctor findings stands (severity warning or error):
    a run that leaves one open is not ``fixed`` (its fix was not measured)."""
    return [hid for hid, spec in ctx.hypotheses.specs.items() if ctx.ledger.get(hid).verdict == "inconclusive"
            and any(f.rule in spec.rules and f.severity in ("warning", "error") for f in ctx.state.findings)]


def checked(ctx: RunContext) -> bool:
    """Whether any hypothesis was looked at (has evidence in the ledger): the hypotheses step ran,
    or a probe or a measurement spoke to one."""
    return any(ctx.ledger.get(hid).evidence for hid in ctx.hypotheses.specs)


def undecided(ctx: RunContext) -> list[str]:
    """The ids of the hypotheses the ledger has not decided yet (verdict ``inconclusive``, the
    ledger's start value), in the order they act."""
    return [spec.id for spec, _ in REGISTRY.hypotheses() if ctx.ledger.get(spec.id).verdict == "inconclusive"]


def outcome_detail(ctx: RunContext) -> str | None:
    """Why :func:`outcome` is ``inconclusive``, in words, or ``partly-fixed`` although the fix was
    sufficient (an open hypothesis whose finding stands, :func:`open_with_standing_finding`);
    ``None`` for every other outcome:
    ``"symptom not measured"`` when no accept length as found was measured (Measure symptom
    did not run), else ``"N hypotheses still open"`` (``"1 hypothesis still open"``) naming
    them — a run whose symptom or hypotheses were never decided is never called healthy
    (issue 15, trial finding 2). When the server under measurement stopped answering:
    ``"server stopped answering: the fix server (pid P, port N) exited during apply_fixes
    (measuring: fix): <the failed request>; its log ends: <last line>"``, then what the
    restore did with the box (:data:`SERVER_STOPPED_ANSWERING`)."""
    result = outcome(ctx)
    standing = open_with_standing_finding(ctx)
    if result == "partly-fixed" and ctx.state.fix.result.get("sufficient") and standing:
        return (f"the fix left acceptance not low, but {', '.join(standing)} is still open: its doctor finding "
                "stands and no measurement tested its own fix")
    if result != "inconclusive":
        return None
    if ctx.state.server_lost is not None:
        lost = ctx.state.server_lost
        last = next((line.strip() for line in reversed(lost.log_tail) if line.strip()), None)
        detail = lost.describe() + (f"; its log ends: {last[:300]}" if last else "; its log is empty or unread")
        if lost.server == "the server as found":
            detail += "; the run did not start that server and left it as it is"
        report = ctx.session.restore_report
        if report is not None:
            relaunched = any(a.startswith("relaunched") or "already runs" in a for a in report.actions)
            detail += ("; the box was restored" + (" (the original server relaunched)" if relaunched else "")
                       if report.clean else "; the restore left problems: " + "; ".join(report.problems))
        return detail
    if ctx.acceptance_low(ctx.state.before.accept_length if ctx.state.before is not None else None) is None:
        return "symptom not measured"
    open_ids = undecided(ctx)
    return (f"{len(open_ids)} {'hypothesis' if len(open_ids) == 1 else 'hypotheses'} still open: "
            + ", ".join(open_ids))


def proposed_launch(ctx: RunContext) -> LaunchCommand | None:
    """The launch command with every fix applied: the relaunch's command when the fixes were
    applied, else the command the launch-command fixes derive (a draft repair needs its copy
    made: without it the command keeps the draft as found). ``None`` when no fix changes it."""
    if ctx.state.fix.launch is not None:
        return ctx.state.fix.launch
    if ctx.state.static_report is None:
        return None
    fixes = ctx.state.fix.derived or derive_fixes(ctx)
    launch_fixes = [f for f in fixes if f.kind == "launch"]
    return fixed_launch(ctx, launch_fixes, None) if launch_fixes else None


def launch_diff(ctx: RunContext) -> list[tuple[str, Any, Any]]:
    """The fix as a launch-command diff: (flag, before, after)."""
    proposed = proposed_launch(ctx)
    return ctx.inventory.launch.diff(proposed) if proposed is not None else []


def load_cost(ctx: RunContext, now: float | None = None) -> dict[str, Any]:
    """What the run cost the box in loads (:mod:`workbench.diagnosis.loads`): ``launches`` (the
    run's launch records, then the restore's relaunch), ``loads`` (start-ups the run caused,
    restore included), ``timeline`` (what served the port from the run's start to ``now``, epoch
    seconds) and ``downtime_s`` (seconds it served nothing: a stop until the next server was
    ready, summed)."""
    session = ctx.session
    report = session.restore_report
    launches = all_launches(session.launches, report.launch if report is not None else None)
    final_stop = session.restore_stopped_at if report is not None and report.launch is None else None
    segments = timeline(launches, found_serving=ctx.inventory.server_pid is not None, start=ctx.state.started_epoch,
                        end=time.time() if now is None else now, final_stop_at=final_stop)
    return {"launches": launches, "loads": count_loads(launches), "timeline": segments,
            "downtime_s": downtime_s(segments)}


def build_verdict(ctx: RunContext) -> dict[str, Any]:
    """The verdict document (schema: DESIGN.md, "Contracts"; plus ``outcome``,
    ``root_causes``, ``open``, ``fixes``, ``start_failures``, ``start_death`` (the server's death at
    start-up, named and attributed: :func:`workbench.diagnosis.deaths.start_death`), ``ladder``,
    ``healthy``; the loads:
    ``launches`` with the restore's relaunch, ``loads``, ``downtime_s``, ``timeline``,
    :func:`load_cost`; ``live``: what the server as found showed without a restart;
    ``probe.ranks``: one entry per rank that printed the width probe)."""
    def acceptance(m: Measurement | None) -> dict:
        return m.to_dict() if m is not None else {"accept_length": None}

    death = start_death(ctx)  # first: attributing a death may confirm a hypothesis
    rc = root_cause(ctx)
    before = ctx.state.before.accept_length if ctx.state.before is not None else None
    cost = load_cost(ctx)
    ceiling = ctx.ceiling()
    verdict = {
        "outcome": outcome(ctx),
        "outcome_detail": outcome_detail(ctx),
        "root_cause": rc or {"rule": None},
        "root_causes": root_causes(ctx),
        "consequences": consequences(ctx),
        "fixed_doctor": ctx.state.fix.doctor or None,
        "open": still_open(ctx),
        "hypotheses": [
            {**h, "family": ctx.hypotheses.families[h["id"]].name, "order": ctx.hypotheses.specs[h["id"]].order,
             "rules": list(ctx.hypotheses.specs[h["id"]].rules), "static": ctx.hypotheses.specs[h["id"]].static,
             "decide": ctx.hypotheses.specs[h["id"]].decide or None}
            for h in ctx.ledger.to_dict()["hypotheses"]],
        "acceptance": {"before": acceptance(ctx.state.before), "after": acceptance(ctx.state.fix.after),
                       "ceiling": ceiling, "low_before": ctx.acceptance_low(before),
                       # the one definition's words (workbench.rules.acceptance_level), as logs and measure print them
                       "level_before": classify_acceptance(before, ceiling=ceiling,
                                                           expected=ctx.settings.expected_accept_length).to_dict(),
                       "expected": ctx.settings.expected_accept_length},
        "probe": {
            "observed_hidden_size": ctx.state.probe.result.get("observed_hidden_size"),
            "expected_hidden_size": ctx.state.probe.result.get("expected_hidden_size"),
            "ranks": ctx.state.probe.result.get("ranks") or [],
            **{k: v for k, v in ctx.state.probe.result.items() if k not in ("observed_hidden_size", "expected_hidden_size")},
        },
        "live": ctx.state.live or None,
        "fix": {
            "launch_command": proposed_launch(ctx).to_display() if proposed_launch(ctx) is not None else None,
            "diff": [{"flag": f, "before": a, "after": b} for f, a, b in launch_diff(ctx)],
            "applied": bool(ctx.state.fix.result.get("applied")),
            "sufficient": ctx.state.fix.result.get("sufficient"),
            "why": ctx.state.fix.result.get("why"),
            "kinds": sorted({f.kind for f in ctx.state.fix.applied}),
            "kept": ctx.state.kept_server is not None,
            "kept_server": ctx.state.kept_server,
            "draft_copies": ctx.state.fix.draft_copies,
        },
        "fixes": [{**f.to_dict(), "applied": f in ctx.state.fix.applied or (f.kind == "candidates" and any(
            set(a.rules) == set(f.rules) for a in ctx.state.fix.applied))} for f in ctx.state.fix.derived],
        "candidate_trials": ctx.state.fix.candidate_trials,
        "ladder": ctx.state.fix.ladder,
        "start_failures": [f.to_dict() for f in ctx.state.start_failures],
        "start_death": death,
        "server_stopped_answering": ctx.state.server_lost.to_dict() if ctx.state.server_lost is not None else None,
        "healthy": ({"accept_length": before, "ceiling": ceiling,
                     "note": "no cause found and acceptance is not low; the measure_acceptance runbook sweeps the "
                             "speculative settings for more"} if outcome(ctx) == "healthy" else None),
        "findings": [f.to_dict() for f in ctx.state.findings],
        "preflight": ctx.state.static_report.to_dict() if ctx.state.static_report is not None else None,
        "runtime_findings": [f.to_dict() for f in acceptance_collapsed(
            ctx.state.before.generate, ctx.state.findings, source=f"{ctx.state.before.generate.source or '/generate'} over the prompt set: {ctx.state.before.label}")]
        if ctx.state.before is not None else [],
        "inventory": ctx.inventory.to_dict(),
        "code_path": ctx.state.probe.code_path.to_dict() if ctx.state.probe.code_path is not None else None,
        "launches": cost["launches"],
        "loads": cost["loads"],
        "downtime_s": cost["downtime_s"],
        "timeline": cost["timeline"],
        "launch_guard": ctx.session.guard.summary(),
        "restarts": ctx.session.restarts,
        # what each stop found of the GPUs and the orphans reclaim_gpus stopped (never undone)
        "gpu_events": list(getattr(ctx.session, "gpu_events", []) or []),
        "restore": ctx.session.restore_report.to_dict() if ctx.session.restore_report else None,
        "notes": ctx.notes,
        "duration_s": round(time.monotonic() - ctx.state.started_at, 2),
    }
    return verdict
