"""The last step, restore and verdict: the box put back as found (the run's servers stopped, its
probes reverted, its draft copies removed, the original server relaunched: the journal's
:func:`~workbench.session.journal.restore_box`), then the verdict built and written to
``report_dir/diagnose_acceptance.json``. With ``keep_fix`` and a sufficient fix, the fixed server
and its draft copy stay (the journal forgets them). Idempotent: again, it restores once more and
rewrites the verdict.

Reads everything the steps added (``ctx.state``); adds ``ctx.state.kept_server`` and
``ctx.state.verdict``. Decides nothing.
"""

from __future__ import annotations

from workbench.diagnosis.context import RunContext
from workbench.diagnosis.steps.probe import revert_probes
from workbench.diagnosis.verdict import build_verdict
from workbench.diagnosis.words import draft_of
from workbench.redact import REDACTOR
from workbench.report.verdict import write_verdict_json

__all__ = ["finish", "keeps_fix", "copy_kept"]


def finish(ctx: RunContext) -> dict:
    """Put the box back as found (stop the run's servers, revert probes, remove its draft
    copies, relaunch the original server), then write ``report_dir/diagnose_acceptance.json``.
    With ``keep_fix`` and a sufficient fix, the fixed server and its draft copy stay.
    Idempotent."""
    if ctx.session.finished:
        # Again: restore once more (normally nothing to do) and rewrite the verdict, so a
        # second Finish never leaves the box changed nor the file stale.
        report = ctx.session.restore()
        if ctx.state.verdict is None:  # the first finish failed before the verdict was built
            ctx.state.verdict = REDACTOR.obj(build_verdict(ctx))
        else:
            ctx.state.verdict["restore_again"] = REDACTOR.obj(list(report.actions + report.problems)
                                                              or ["nothing to do"])
        write_verdict_json(ctx.settings.report_dir / "diagnose_acceptance.json", ctx.state.verdict)
        return ctx.state.verdict
    session, fix = ctx.session, ctx.state.fix
    session.finished = True
    revert_probes(ctx)
    if keeps_fix(ctx):
        # Leave the fixed server in place of the original: forget both, and the copy, in the journal.
        ctx.state.kept_server = {"pid": session.current.pid, "pgid": session.current.pgid, "port": ctx.inventory.port,
                                 "log_path": session.current.log_path,
                                 "launch_command": fix.launch.to_display() if fix.launch else None}
        session.journal.remove_started(session.current.pid)
        session.journal.mark_original_stopped(False)
        for copy in fix.draft_copies:
            if copy.get("path") and fix.launch is not None and draft_of(fix.launch) == copy["path"]:
                session.journal.remove_created(copy["path"])
                copy["kept"] = True
        session.current = None
    session.restore()
    # Redacted here, not only when written: the runbook prints parts of it (the restore's
    # actions name the original server's command line, key included).
    ctx.state.verdict = REDACTOR.obj(build_verdict(ctx))
    write_verdict_json(ctx.settings.report_dir / "diagnose_acceptance.json", ctx.state.verdict)
    return ctx.state.verdict


def keeps_fix(ctx: RunContext) -> bool:
    """Whether :func:`finish` leaves the fixed server (and its draft copy) running: ``keep_fix``
    and a fix that was measured and sufficient, its server still up."""
    return bool(ctx.settings.keep_fix and ctx.state.fix.after is not None and ctx.session.current is not None
                and ctx.state.fix.result.get("sufficient"))


def copy_kept(ctx: RunContext, copy: dict) -> bool:
    """Whether the draft copy ``copy`` (a ``ctx.state.fix.draft_copies`` record) stays on the box:
    kept by finish, or about to be (a kept fix's server serves it)."""
    fix_launch = ctx.state.fix.launch
    return bool(copy.get("kept")) or (not ctx.session.finished and keeps_fix(ctx) and fix_launch is not None
                                      and draft_of(fix_launch) == copy.get("path"))
