"""Step 1, the symptom: acceptance of the server as found (launched by the run when none runs).

Reads ``ctx.session`` (the server found running, the journal) and ``ctx.inventory.launch``; adds
``ctx.state.before`` (a :class:`~workbench.diagnosis.results.Measurement`), or a start failure to
``ctx.state.start_failures`` (a server that does not start as found is the symptom then), and a
note when the server serves without speculative decoding. Decides no hypothesis.
"""

from __future__ import annotations

from workbench.diagnosis.context import RunContext
from workbench.diagnosis.results import Measurement, StartFailure, StepResult
from workbench.diagnosis.serving import measure, try_launch
from workbench.diagnosis.words import method_label
from workbench.errors import DiagnosisError

__all__ = ["measure_symptom"]


def measure_symptom(ctx: RunContext) -> Measurement | StartFailure | StepResult | None:
    """The symptom: acceptance of the server as found (launched by the run when none runs). A
    server that does not start is the symptom then (:class:`StartFailure`: its exception and
    log tail become evidence). With no server running and ``allow_restart`` False there is
    nothing to measure: ``None``, and the static checks still run. A server that stops answering
    while it is measured ends the run: a :class:`StepResult` (``inconclusive``), the later steps
    skipped, the verdict ``inconclusive: server stopped answering``. Raises :class:`DiagnosisError`
    when the server that serves now is one the run launched with another command (a fix, a
    candidate, a ladder rung): that is not the symptom; start a new run to measure it again."""
    serving = ctx.session.current_launch
    if serving is not None and serving.argv != ctx.inventory.launch.argv:
        raise DiagnosisError("DiagnosisRun.measure_symptom(): the server serving now is not the one as found "
                             f"(this run relaunched it as: {serving.to_display()}); the symptom is measured on the "
                             "deployment as found: start a new run with DiagnosisRun.start(...) to measure it again")
    original = ctx.session.journal.data.get("original_server")
    if ctx.session.current is None and not (original and not original.get("stopped")):
        if not ctx.session.allow_restart:
            ctx.notes.append("no server is running and allow_restart is False: nothing was measured")
            return None
        _handle, failure = try_launch(ctx, ctx.inventory.launch, "as-found",
                                      f"as-found: no server ran on port {ctx.inventory.port}; the run launched the "
                                      "command as given to measure the symptom")
        if failure is not None:
            return failure
    ctx.state.before = measure(ctx, "as found: " + method_label(ctx.inventory.launch))
    if ctx.speculation_off():
        info = getattr(ctx.state.before.generate, "server_info", None) or {}
        if ctx.inventory.launch.engine == "vllm":
            ctx.notes.append("the server serves WITHOUT speculative decoding: its /metrics has no "
                             "vllm:spec_decode_* counts for the requests sent; check that the launch command's "
                             "--speculative-config reaches vLLM, so there is no speedup at all")
        else:
            ctx.notes.append("the server serves WITHOUT speculative decoding: no response carried spec_verify_ct "
                             f"(/server_info speculative_algorithm: {info.get('speculative_algorithm')!r}); check "
                             "that the launch command's --speculative-algorithm reaches the engine (a mistyped or "
                             "dropped flag), so there is no speedup at all")
    return ctx.state.before
