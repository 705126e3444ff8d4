"""The case's story for the runbook and the report: :func:`summary_html` (the outcome, every root
cause in the order it acts, the fixes and what they did in numbers, what is still open and how to
decide it) and :func:`figures` (the plotly figures the run has data for).

Reads ``ctx.state``, the ledger and the session's launch guard; changes nothing but ``ctx.notes``
(a figure left out says why).
"""

from __future__ import annotations

import html
from typing import Any

from workbench.diagnosis.context import RunContext
from workbench.diagnosis.results import fmt
from workbench.diagnosis.steps.finish import copy_kept, keeps_fix
from workbench.diagnosis.steps.relaunch import draft_dir
from workbench.diagnosis.verdict import (consequences, launch_diff, load_cost, outcome, outcome_detail,
                                         proposed_launch, root_causes, still_open)
from workbench.errors import FigureInputError
from workbench.redact import REDACTOR
from workbench.report import figures as plots
from workbench.report.tables import scroll_box
from workbench.report.timeline import box_timeline

__all__ = ["summary_html", "figures", "box_timeline_figure"]


def summary_html(ctx: RunContext) -> str:
    """The case's story as HTML: the outcome, every root cause in the order it acts, the fixes
    and what they did (measured), what is still open and how to decide it."""
    out = outcome(ctx)
    head = {"healthy": "Healthy: no cause found", "fixed": "Fixed", "partly-fixed": "Fix applied, not sufficient",
            "cause-found": "Cause found",
            "latent": "A fault with no measured effect on acceptance", "server-does-not-start": "The server does not start",
            "unexplained": "Acceptance is low and no cause is confirmed",
            "inconclusive": f"Inconclusive: {outcome_detail(ctx)}"}[out]
    parts = [f"<h3>Summary: {html.escape(head)}</h3>"]
    if ctx.state.server_lost is not None:
        lost = ctx.state.server_lost
        tail = "\n".join(lost.log_tail[-10:])
        parts.append(f"<p><b>The run ended early</b>: {html.escape(lost.describe())}. Nothing after that step was "
                     "measured; the box is put back at Finish.</p>"
                     + (f"<p>the end of its log ({html.escape(str(lost.log_path))}):</p><pre>{html.escape(tail)}</pre>"
                        if tail else ""))
    before = ctx.state.before.accept_length if ctx.state.before is not None else None
    after = ctx.state.fix.after.accept_length if ctx.state.fix.after is not None else None
    ceiling = ctx.ceiling()
    if before is not None:
        parts.append(f"<p>accept length as found: <b>{fmt(before)}</b>" +
                     (f" of at most {ceiling:g} per verify step" if ceiling else "") +
                     (f"; with the fix: <b>{fmt(after)}</b>" if after is not None else "") + "</p>")
        rate_before = ctx.state.before.generate.accept_rate
        rate_after = ctx.state.fix.after.generate.accept_rate if ctx.state.fix.after is not None else None
        if rate_before is not None:  # correct / proposed draft tokens (vLLM's "draft acceptance rate")
            parts.append(f"<p>draft tokens accepted as found: <b>{100 * rate_before:.1f} %</b>" +
                         (f"; with the fix: <b>{100 * rate_after:.1f} %</b>" if rate_after is not None else "") +
                         f" <small>({html.escape(str(ctx.state.before.generate.source or ''))})</small></p>")
    for failure in ctx.state.start_failures:
        if failure.refused is not None:
            why = "; ".join(f"{f['rule']}: {f['message']}" for f in failure.refused)
            parts.append(f"<p>{html.escape(failure.label)}: <b>launch refused</b> — the doctor's findings on that "
                         f"command say the server would not start, so no launch was spent on it "
                         f"({len(failure.refused)} finding(s); {ctx.session.restarts} restart(s) in this run): "
                         f"<code>{html.escape(why)}</code>. <code>force_launch=True</code> launches anyway.</p>")
            continue
        death = failure.death or {}
        attribution = death.get("attribution") or {}
        parts.append(f"<p>{html.escape(failure.label)}: the server did not start — "
                     f"<code>{html.escape(failure.exception or failure.error)}</code>"
                     + (f" (died in <b>{html.escape(str(death.get('step')))}</b>"
                        + (f", {html.escape(str(death['rank']))}" if death.get("rank") else "") + ")" if death else "")
                     + (f"<br>{'explained by ' + html.escape(', '.join(attribution['rules'])) + ': ' if attribution.get('explained') else ''}"
                        f"{html.escape(attribution['why'])}" if attribution else "") + "</p>")
    for check in ctx.session.guard.checks:
        if check.decision == "overridden":
            parts.append(f"<p>{html.escape(check.label)}: <b>launch guard overridden</b> (force_launch): launched "
                         "although the doctor's findings say the server would not start — "
                         f"<code>{html.escape('; '.join(f['rule'] + ': ' + f['message'] for f in check.findings))}"
                         "</code></p>")
        elif check.decision == "contradicted":
            parts.append(f"<p><small>{html.escape(check.label)}: the doctor's findings say this command would not "
                         "start, yet the server as found runs it: launched; the findings "
                         f"({html.escape(', '.join(f['rule'] for f in check.findings))}) are contradicted by the "
                         "box.</small></p>")
    if ctx.state.fix.refused is not None:
        parts.append(f"<p><b>The fix was not tried</b>: {html.escape(str(ctx.state.fix.result.get('why')))}</p>")
    causes = root_causes(ctx)
    if causes:
        items = "".join(
            f"<li><b>{html.escape(c['hypothesis'])}</b> (<code>{html.escape(str(c['rule']))}</code>): "
            f"{html.escape(c['message'])}" +
            (f"<br>fix ({', '.join(c['fix_kinds'])}): {html.escape(c['fix'])}" +
             (" — applied" if c["fix_applied"] else " — not applied") if c["fix"] else "") +
            (f"<br>missing: {html.escape(c['missing'])}" if c.get("missing") else "") +
            (f"<br>{len(c['consequences'])} consequence{'' if len(c['consequences']) == 1 else 's'}: "
             + ", ".join(f"<code>{html.escape(k['hypothesis'])}</code>" for k in c["consequences"])
             if c.get("consequences") else "") + "</li>"
            for c in causes)
        parts.append(f"<p><b>Root causes</b>, in the order they act:</p><ol>{items}</ol>")
    cons = consequences(ctx)
    if cons:
        def how(c: dict) -> str:
            if c["how"] == "static":
                gone = {True: "; the fix cleared its findings", False: "; its findings remain after the fix",
                        None: ""}[c["cleared_by_fix"]]
                return f"explained by {html.escape(', '.join(c['cleared_by']))}: {html.escape(c['mechanism'] or '')}{gone}"
            return f"cleared by the fix of {html.escape(', '.join(c['cleared_by']))}"
        items = "".join(f"<li><b>{html.escape(c['hypothesis'])}</b> (<code>{html.escape(str(c['rule']))}</code>): "
                        f"{html.escape(c['message'])}<br>{how(c)}</li>" for c in cons)
        parts.append(f"<p><b>{len(cons)} consequence{'' if len(cons) == 1 else 's'}</b> of the root causes (no "
                     f"cause of their own: nothing is asked, fixed or probed for them):</p><ul>{items}</ul>")
    if ctx.state.fix.result.get("applied"):
        ok = ctx.state.fix.result.get("sufficient")
        said = ("is not enough" if not ok else "brought acceptance back" if ctx.state.fix.result.get("before") is not None
                else "leaves acceptance not low (nothing was measured before it)")
        parts.append(f"<p><b>The fix {said}</b>: "
                     f"{html.escape(str(ctx.state.fix.result.get('why')))}</p>")
    diff = launch_diff(ctx)
    if diff:
        rows = "".join(f"<tr><td style='text-align:left'><code>{html.escape(f)}</code></td>"
                       f"<td style='color:#b00020;text-align:left'><code>- {html.escape(str(a))}</code></td>"
                       f"<td style='color:#1b7a1b;text-align:left'><code>+ {html.escape(str(b))}</code></td></tr>"
                       for f, a, b in diff)
        parts.append("<p><b>Launch-command diff</b>:</p>" + scroll_box(f"<table>{rows}</table>"))
        parts.append(f"<p>fixed command{'' if ctx.state.fix.launch is not None else ' (proposed, not applied)'}: "
                     f"<code>{html.escape(proposed_launch(ctx).to_display())}</code></p>")
        pending = [f for f in ctx.state.fix.derived if f.kind == "draft-copy" and f not in ctx.state.fix.applied]
        if ctx.state.fix.launch is None and pending:
            items = "".join(f"<li>{html.escape(f.summary)}</li>" for f in pending)
            parts.append("<p>That command still points at the draft as found: it needs the draft repairs too "
                         "(a run with <code>allow_restart</code> and <code>apply_fix</code> makes them as a "
                         f"copy, measured; or make them in a copy of your own):</p><ul>{items}</ul>")
    for copy in ctx.state.fix.draft_copies:
        actions = "".join(f"<li>{html.escape(a)}</li>" for a in copy.get("actions", []))
        kept = copy_kept(ctx, copy)
        parts.append(f"<p><b>Repaired copy of the draft</b> ({html.escape(copy.get('label', ''))}): "
                     f"<code>{html.escape(str(copy.get('path')))}</code>"
                     f"{' (kept: the fixed server uses it)' if kept else ' (removed at the end)'}</p>"
                     f"<ul>{actions}</ul>")
        if kept:
            parts.append("<p><small>The copy holds the changed files; the files no repair touched are "
                         f"symlinks into <code>{html.escape(str(copy.get('source') or draft_dir(ctx)))}</code>"
                         ": keep that directory, or copy the draft with <code>cp -rL</code> before removing it. "
                         "Nothing journals the copy any more: remove it yourself when done.</small></p>")
    if keeps_fix(ctx) or ctx.state.kept_server:
        server = ctx.state.kept_server or {"pid": ctx.session.current.pid, "pgid": ctx.session.current.pgid, "port": ctx.inventory.port}
        parts.append(f"<p><b>The fixed server is left running</b> (<code>keep_fix</code>): pid {server['pid']}, "
                     f"port {server['port']}, in place of the original. <code>workbench restore</code> will not "
                     f"stop it (nothing journals it); stop it on the box with <code>kill -TERM -- -{server['pgid']}"
                     "</code> (its process group).</p>")
    if ctx.state.fix.candidate_trials:
        rows = "".join(f"<tr><td style='text-align:left'>{html.escape(t['label'])}</td><td>{fmt(t['accept_length'])}</td></tr>"
                       for t in ctx.state.fix.candidate_trials)
        parts.append("<p><b>Candidates measured</b>:</p>" + scroll_box(f"<table>{rows}</table>"))
    still = still_open(ctx)
    if still:
        items = "".join(f"<li><b>{html.escape(o['hypothesis'])}</b>: {html.escape(o['why'])}<br>to decide: "
                        f"{html.escape(str(o['decide']))}</li>" for o in still)
        parts.append(f"<p><b>Still open</b>:</p><ul>{items}</ul>")
    else:
        parts.append("<p><b>Still open</b>: nothing — every hypothesis was decided.</p>")
    if out == "latent":
        parts.append("<p>Acceptance as found is not low, so no fix was applied: each cause above is a real fault "
                     "(its evidence is in the table) that this engine does not feel on this draft. Apply its "
                     "fix anyway before another engine or release reads the same field.</p>")
    if out == "inconclusive":
        parts.append("<p>Nothing was decided either way: " + (
            "the accept length as found was never measured (run <b>Measure symptom</b>), so there is no "
            "symptom to judge." if outcome_detail(ctx) == "symptom not measured" else
            f"acceptance as found is {'low' if ctx.low_before() else 'not low'}, but the hypotheses above are "
            "still open (run <b>Hypotheses (static)</b> to decide them).") + "</p>")
    if out == "healthy":
        parts.append("<p>No false alarm: every hypothesis was checked. To go further, sweep the speculative "
                     "settings with the <code>measure_acceptance</code> runbook.</p>")
    for note in ctx.notes:
        parts.append(f"<p><small>note: {html.escape(note)}</small></p>")
    return REDACTOR.text("".join(parts))


def figures(ctx: RunContext) -> dict[str, Any]:
    """The summary's plotly figures, only those the run has data for; a figure whose input is
    incomplete is left out and :attr:`notes` says so (never an exception)."""
    out: dict[str, Any] = {}

    def add(name: str, make) -> None:
        try:
            out[name] = make()
        except FigureInputError as exc:
            ctx.notes.append(f"figure {name} left out: {exc}")

    if ctx.state.before is not None and ctx.state.fix.after is not None and ctx.state.before.accept_length is not None \
            and ctx.state.fix.after.accept_length is not None:
        add("accept_length", lambda: plots.accept_length_before_after(
            ctx.state.before.accept_length, ctx.state.fix.after.accept_length, labels=(ctx.state.before.label, ctx.state.fix.after.label),
            ideal=ctx.ceiling(ctx.state.fix.launch)))
        if ctx.state.before.generate.records and ctx.state.fix.after.generate.records:
            add("per_request", lambda: plots.accept_length_per_request(
                [r.spec_accept_length or 0.0 for r in ctx.state.before.generate.records],
                [r.spec_accept_length or 0.0 for r in ctx.state.fix.after.generate.records]))
    timeline = {m.label: m.log_records for m in (ctx.state.before, ctx.state.fix.after) if m is not None and m.log_records}
    if timeline:
        add("timeline", lambda: plots.acceptance_timeline(timeline))
    positions = per_position_series(ctx)
    if positions:
        from workbench.report.figures_position import per_position_acceptance

        add("per_position", lambda: per_position_acceptance(positions))
    pr = ctx.state.probe.result
    if pr.get("observed_hidden_size") and pr.get("expected_hidden_size") and pr.get("target_hidden_size"):
        add("probe", lambda: plots.hidden_width_probe(pr["observed_hidden_size"], pr["expected_hidden_size"],
                                                        pr["target_hidden_size"]))
    elif pr.get("rides_on") and pr.get("after_fix_hidden_size") and pr.get("expected_hidden_size") \
            and pr.get("target_hidden_size"):
        # the probes rode on the fix launch: the width the fixed server's draft received
        add("probe", lambda: plots.hidden_width_probe(pr["after_fix_hidden_size"], pr["expected_hidden_size"],
                                                        pr["target_hidden_size"], where="probe on the fixed server"))
    if len(ctx.state.fix.ladder) >= 2 and all(r["accept_length"] is not None for r in ctx.state.fix.ladder):
        add("ladder", lambda: plots.fix_ladder([r["label"] for r in ctx.state.fix.ladder],
                                                 [r["accept_length"] for r in ctx.state.fix.ladder],
                                                 ceiling=ctx.ceiling(ctx.state.fix.launch)))
    if ctx.session.finished:
        add("box_timeline", lambda: box_timeline_figure(ctx))
    return out


def per_position_series(ctx: RunContext) -> dict[str, list[float]]:
    """``{label: [P(k-th draft accepted), k = 1 …]}`` of the run, both engines: each measurement's
    acceptance histogram (``workbench.measure.sources.position_acceptance``: SGLang's
    ``spec_correct_drafts_histogram``, vLLM's per-request ``acceptance_histogram`` or its per-position
    counters), and the server as found, live (vLLM's per-position counters since it started,
    :func:`workbench.diagnosis.steps.live.vllm_live`). Runs without them are left out."""
    from workbench.measure.sources import position_acceptance

    out: dict[str, list[float]] = {}
    live = (ctx.state.live or {}).get("per_position_acceptance")
    if live:
        out["as found, live (vLLM counters since start)"] = list(live)
    for m in (ctx.state.before, ctx.state.fix.after):
        hist = getattr(getattr(m, "generate", None), "histogram", None)
        pos = position_acceptance(hist)
        if pos:
            out[str(getattr(m, "label", None) or "measured")] = pos
    return out


def box_timeline_figure(ctx: RunContext):
    """The box's timeline during the run (:func:`workbench.report.timeline.box_timeline` over
    :func:`workbench.diagnosis.verdict.load_cost`): what served the port when, the seconds it was
    down and the loads. Complete once the run finished (the restore's relaunch in it)."""
    cost = load_cost(ctx)
    return box_timeline(cost["timeline"], loads=cost["loads"], port=ctx.inventory.port)
