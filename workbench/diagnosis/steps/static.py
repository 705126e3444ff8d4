"""Step 2, preflight: every static rule of the catalogue on the launch command as found, read from
the box, once (no restart), and the faults a first fault masks (the doctor again on the command
with its launch fixes).

Reads ``ctx.inventory`` (the launch command, its resolved paths, the engine source) and
``ctx.settings.given``; adds ``ctx.state.static`` (:class:`~workbench.diagnosis.context.StaticEvidence`:
the doctor's report, its findings, the draft's and the target's facts). Decides no hypothesis:
:mod:`workbench.diagnosis.steps.hypotheses` does, from these findings.
"""

from __future__ import annotations

from remote.errors import RemoteError
from workbench.diagnosis.context import RunContext, StaticEvidence
from workbench.doctor import DoctorError, run_doctor
from workbench.engine.launch import LaunchCommand
from workbench.engine.source import EngineSource
from workbench.rules.facts import Facts

__all__ = ["preflight", "unmask", "facts", "read_configs"]


def preflight(ctx: RunContext):  # -> workbench.doctor.DoctorReport
    """Every static rule of the catalogue (:func:`workbench.doctor.run_doctor`) on the launch
    command as found, read from the box (paths resolved against the server's cwd, the engine
    source the inventory located). Run once; every hypothesis decides from its findings."""
    if ctx.state.static is None:
        resolved = ctx.inventory.resolved or ctx.inventory.launch
        report = run_doctor(ctx.box, resolved, engine_root=ctx.inventory.engine_root,
                            engine_version=ctx.inventory.engine_version, cwd=ctx.inventory.server_cwd)
        ctx.state.static = StaticEvidence(report=report, findings=list(report.findings), draft=report.draft_facts,
                                          target=report.target_facts)
        given = ctx.settings.given.get("aux_layer_ids")
        recorded = getattr(ctx.state.static.draft, "aux_layer_ids", None)
        if given is not None and isinstance(recorded, (list, tuple)) and list(recorded) != list(given):
            ctx.notes.append(f"aux_layer_ids {given} was given and the draft's eagle_config records {recorded}: "
                             "the engine reads the recorded ids; the given ones are used only by a fix that "
                             "rewrites eagle_config (when the recorded ids are missing or wrong)")
        unmask(ctx, resolved)
    return ctx.state.static.report


def unmask(ctx: RunContext, resolved: LaunchCommand) -> None:
    """Faults one fault masks (the aux rules apply only under EAGLE3, so a wrong flag hides a
    missing eagle_config): the doctor again on the command with the launch fixes applied, its
    new findings added with ``evidence["found_with"]`` naming the command. Static, no restart;
    at most two more passes."""
    seen = {(f.rule, f.message) for f in ctx.state.findings}
    report = ctx.state.static.report
    for _ in range(2):
        fixed = report.corrected_launch()
        if fixed is None:
            return
        launch = LaunchCommand.parse(fixed)
        if launch.argv == resolved.argv:
            return
        report = run_doctor(ctx.box, launch, engine_root=ctx.inventory.engine_root,
                            engine_version=ctx.inventory.engine_version, cwd=ctx.inventory.server_cwd)
        changes = ", ".join(f"{flag} {new}" for flag, _old, new in resolved.diff(launch) if flag.startswith("--"))
        for f in report.findings:
            if (f.rule, f.message) in seen:
                continue
            seen.add((f.rule, f.message))
            f.evidence["found_with"] = f"the launch fixed ({changes}): this fault is masked as launched"
            ctx.state.findings.append(f)
        resolved = launch


def facts(ctx: RunContext, *, launch_fixed: bool = False) -> Facts:
    """The facts the doctor read, for the families' fix derivers (the token map re-read
    through the box when a deriver needs it). ``launch_fixed``: with the launch command the
    doctor's launch fixes make (what the relaunch will run: the aux facts under EAGLE3)."""
    report = preflight(ctx)
    launch = ctx.inventory.resolved or ctx.inventory.launch
    if launch_fixed and report.corrected_launch():
        launch = LaunchCommand.parse(report.corrected_launch())
    engine = (EngineSource(ctx.box, ctx.inventory.engine_root, ctx.inventory.engine_version, timeout=30)
              if ctx.inventory.engine_root else None)
    return Facts(launch, target=report.target_facts, draft=report.draft_facts, engine=engine,
                 engine_version=ctx.inventory.engine_version, box=ctx.box, timeout=30)


def read_configs(ctx: RunContext) -> None:
    """:func:`preflight` (run once) for the probe step, its failure recorded in ``ctx.notes``
    instead of raised: the probe still runs, its expected widths then unknown."""
    if ctx.state.static is not None:
        return
    try:
        preflight(ctx)
    except (DoctorError, RemoteError) as exc:
        ctx.notes.append(f"the draft's config was not read before the probe ({type(exc).__name__}: {exc}): "
                         "the fc width it expects is unknown")
