"""The ladder (``attribute_fixes``): one relaunch per fix, cumulatively in the order the causes
act (as found → + the first fix → + the second → …), each measured: what each fix contributed.

Reads ``ctx.state.fix`` (the fixes applied, acceptance with all of them) and ``ctx.state.before``;
adds ``ctx.state.fix.ladder``. Decides nothing. Costs one restart per fix but the last (already
measured), plus one to leave the fixed server running with ``keep_fix``.
"""

from __future__ import annotations

from workbench.diagnosis.context import RunContext
from workbench.diagnosis.results import Measurement, StepResult
from workbench.diagnosis.steps.relaunch import launch_with

__all__ = ["attribute"]


def attribute(ctx: RunContext) -> list[dict] | StepResult | None:
    """With ``attribute_fixes``: relaunch once per fix, cumulatively in the order the causes
    act (as found → + the first fix → + the second → …), and measure each: what each fix
    contributed (the ladder; the last rung is the fix already measured). ``None`` otherwise.
    A rung's server that stops answering ends the run (``inconclusive``, see :meth:`measure_symptom`)."""
    if not (ctx.settings.attribute_fixes and ctx.session.allow_restart and ctx.state.fix.applied):
        return None
    ladder = [{"label": "as found", "accept_length": ctx.state.before.accept_length if ctx.state.before else None,
               "fixes": []}]
    for k in range(1, len(ctx.state.fix.applied)):
        launch, m = launch_with(ctx, ctx.state.fix.applied[:k], f"ladder: {k} fix(es)",
                                f"ladder: what the first {k} fix(es) give on their own (attribute_fixes)")
        ladder.append({"label": "+ " + ctx.state.fix.applied[k - 1].summary,
                       "accept_length": m.accept_length if isinstance(m, Measurement) else None,
                       "fixes": [f.summary for f in ctx.state.fix.applied[:k]]})
    ladder.append({"label": "+ " + ctx.state.fix.applied[-1].summary,
                   "accept_length": ctx.state.fix.after.accept_length if ctx.state.fix.after else None,
                   "fixes": [f.summary for f in ctx.state.fix.applied]})
    ctx.state.fix.ladder = ladder
    if ctx.settings.keep_fix and ctx.session.current_launch is not None and ctx.state.fix.launch is not None \
            and ctx.session.current_launch.argv != ctx.state.fix.launch.argv:
        launch_with(ctx, ctx.state.fix.applied, "fix", "fix again: the fixed server back after the ladder (keep_fix)")
    return ladder
