"""A relaunch with fixes applied, the one operation the fix, candidate and ladder steps share:
the launch command as found with each fix's flag changes (:func:`fixed_launch`), one repaired copy
of the draft on the box carrying every repair (:func:`copy_draft`: journalled, removed at the end
unless kept; never the user's files), the launch and its measurement (:func:`launch_with`).

Reads ``ctx.inventory`` (the launch command as found, its draft directory, the box's python) and
``ctx.session.journal``; adds the copies to ``ctx.state.fix.draft_copies``. Decides nothing.
"""

from __future__ import annotations

from workbench.diagnosis.context import RunContext
from workbench.diagnosis.results import Measurement, StartFailure
from workbench.diagnosis.serving import measure, try_launch
from workbench.diagnosis.words import draft_of
from workbench.engine.launch import LaunchCommand
from workbench.errors import DiagnosisError
from workbench.rules.fix import DraftRepair, Fix

__all__ = ["fixed_launch", "draft_dir", "copy_draft", "launch_with"]


def fixed_launch(ctx: RunContext, fixes: list[Fix], draft_path: str | None) -> LaunchCommand:
    """The launch command as found with every flag change of ``fixes`` (a value ``None`` removes
    the flag) and, when ``draft_path`` is given, that draft directory served instead."""
    launch = ctx.inventory.launch
    for fix in fixes:
        for flag, value in fix.launch.items():
            launch = launch.without_flag(flag) if value is None else launch.with_flag(flag, value)
    if draft_path:
        # SGLang: --speculative-draft-model-path; vLLM: --speculative-config's "model", its
        # form kept (LaunchCommand.with_draft_model)
        launch = launch.with_draft_model(draft_path)
    return launch


def draft_dir(ctx: RunContext) -> str | None:
    """The draft directory as found (paths resolved against the server's cwd), ``None`` when the
    launch command names none."""
    return draft_of(ctx.inventory.resolved or ctx.inventory.launch)


def copy_draft(ctx: RunContext, repair: DraftRepair, label: str) -> str:
    """A repaired copy of the draft on the box (journalled; removed at the end unless kept)."""
    from workbench.session.draft_copy import make_repaired_copy

    source = draft_dir(ctx)
    if source is None:
        raise DiagnosisError("a draft repair was derived but the launch command names no draft directory")
    copy = make_repaired_copy(ctx.box, ctx.session.journal, source, repair, python=ctx.inventory.python)
    record = copy.to_dict()
    record["label"] = label
    ctx.state.fix.draft_copies.append(record)
    return copy.path


def launch_with(ctx: RunContext, fixes: list[Fix], label: str,
                reason: str | None = None) -> tuple[LaunchCommand, Measurement | StartFailure]:
    """Relaunch with ``fixes`` applied (one draft copy carrying every repair), measure. ``reason``:
    why this load is needed (the verdict's ``launches[].reason``; default: the fixes' rules)."""
    repair = DraftRepair()
    for fix in fixes:
        if fix.repair is not None:
            repair = repair.merged(fix.repair)
    draft_path = copy_draft(ctx, repair, label) if not repair.empty else None
    launch = fixed_launch(ctx, fixes, draft_path)
    if reason is None:
        rules = ", ".join(dict.fromkeys(r for f in fixes for r in f.rules)) or "no rule"
        reason = f"{label}: measure {rules} fixed"
    _handle, failure = try_launch(ctx, launch, label, reason)
    if failure is not None:
        return launch, failure
    return launch, measure(ctx, label)
