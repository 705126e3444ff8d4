"""Talking to the servers a diagnosis measures: :func:`measure` (acceptance over the prompt set,
measured again near a threshold), :func:`try_launch` (a launch whose failure to start is a value,
not an exception), and a server that stops answering (:func:`stopped_answering`: what the failed
request means; :func:`record_loss`: the run ends there, ``inconclusive``).

Reads ``ctx.session`` (the box, the inventory, the server the run launched, its journal) and
``ctx.settings`` (prompts, tokens, progress); adds to ``ctx.state`` the start failures and the
lost server; never decides a hypothesis.
"""

from __future__ import annotations

import time

import httpx

from remote.errors import (GenerationStuck, PortInUse, RemoteError, ServerDied, ServerNotReady,
                           ServerStartTimedOut)
from workbench.diagnosis.acceptance import NEAR_THRESHOLD_BAND, near_thresholds, pooled_measurement
from workbench.diagnosis.context import RunContext
from workbench.diagnosis.deaths import read_start_death
from workbench.diagnosis.results import Measurement, StartFailure, StepResult, fmt
from workbench.diagnosis.words import last_exception
from workbench.engine.launch import LaunchCommand
from workbench.errors import AcceptanceError, LaunchRefused, MeasureError, ServerStoppedAnswering
from workbench.logs import read_decode_records, read_when_settled
from workbench.measure.generate import measure_generate
from workbench.redact import REDACTOR
from workbench.session.launches import launch_phases, launch_record

__all__ = ["SERVER_STOPPED_ANSWERING", "LOST_LOG_TAIL", "measure", "try_launch", "forget_dead", "serving_label",
           "stopped_answering", "record_loss"]

#: The verdict's ``outcome_detail`` starts with this when the server under measurement stopped
#: answering mid-run (killed, crashed, SIGSTOPped, hung): the run ends there, ``inconclusive``.
SERVER_STOPPED_ANSWERING = "server stopped answering"
#: Lines of the server's log kept as evidence when it stopped answering.
LOST_LOG_TAIL = 20


def measure(ctx: RunContext, label: str) -> Measurement:
    """Accept length over the prompt set through ``/generate`` (SGLang's definition:
    Σ completion_tokens / Σ spec_verify_ct), with the decode log lines written meanwhile (read
    once the log has settled: ``workbench.logs.read_when_settled``). A server still starting (the
    one found running, typically) is waited for while it makes progress (new log bytes, CPU
    time of its process group: ``remote.box.Box.activity_probe``), given up after
    ``server_start_timeout`` seconds without (``remote.readiness.wait_ready``'s ``max_wait``). An
    accept length within :data:`NEAR_THRESHOLD_BAND` of a threshold a decision compares it with
    (:meth:`RunContext.decision_thresholds`) is measured once more and both are pooled
    (:func:`pooled_measurement`; ``Measurement.remeasured`` says so). Raises
    ``remote.errors.ServerNotReady`` when it never gets ready, ``remote.errors.GenerationStuck``
    when its HTTP answers and a 1-token generation does not return.

    Raises :class:`~workbench.errors.ServerStoppedAnswering` when the server stops answering
    in the middle (its process exited, or it lives and answers nothing within
    ``request_timeout``: SIGSTOPped, hung); the steps turn it into the verdict
    ``inconclusive: server stopped answering``."""
    session = ctx.session
    base_url, log_path, launch = session._serving()
    offset = ctx.box.file_size(log_path) if log_path and ctx.box.exists(log_path) else 0
    pid = session.current.pid if session.current is not None else ctx.inventory.server_pid
    pgid = session.current.pgid if session.current is not None else None
    if pgid is None and pid:
        info = ctx.box.process(pid)
        pgid = info.pgid if info is not None else None
    key = launch.get("--api-key")

    def once():
        return measure_generate(base_url, ctx.settings.prompts, max_new_tokens=ctx.settings.max_new_tokens, warmup=1,
                                progress=ctx.settings.progress, timeout=session.request_timeout,
                                start_timeout=session.server_start_timeout,
                                alive=(lambda: ctx.box.is_alive(pid)) if pid else None,
                                activity=ctx.box.activity_probe(pgid, log_path) if pgid else None,
                                api_key=key if isinstance(key, str) else None)

    def guarded():
        try:
            return once()
        except (AcceptanceError, MeasureError, ServerNotReady, GenerationStuck) as exc:
            lost = stopped_answering(ctx, exc, what=f"measuring: {label}", pid=pid, log_path=log_path)
            if lost is None:
                raise
            raise lost from exc

    result = guarded()
    remeasured = None
    near = near_thresholds(result.accept_length, ctx.decision_thresholds(launch))
    if near:
        again = guarded()
        remeasured = {"accept_lengths": [result.accept_length, again.accept_length], "near": near}
        result = pooled_measurement(result, again)
        remeasured["pooled"] = result.accept_length
        ctx.notes.append(f"{label}: accept length {remeasured['accept_lengths'][0]:.3f} within "
                         f"{NEAR_THRESHOLD_BAND:.0%} of {', '.join(f'{t:.3f}' for t in near)}: measured again "
                          f"({fmt(again.accept_length)}), decided on both pooled ({fmt(result.accept_length)})")
    records: list[dict] = []
    if log_path:
        # bounded whatever the log holds (a 500 MB line costs 64 KiB): workbench.logs.bounded;
        # read once the log stopped growing (its last decode line written)
        got, _settled = read_when_settled(ctx.box, log_path,
                                          lambda: read_decode_records(ctx.box, log_path, offset, missing_ok=True))
        records = [r.to_dict() for r in got]
    return Measurement(label=label, launch_command=launch.to_display(), generate=result,
                       log_records=records, log_path=log_path, remeasured=remeasured)


def try_launch(ctx: RunContext, launch: LaunchCommand, label: str, reason: str | None = None):
    """:meth:`BoxSession._launch`, a server that does not start recorded as a :class:`StartFailure`
    (returned, with ``None`` for the handle) instead of raised; a launch the guard refused
    (:class:`LaunchRefused`: never made) too, with the findings that refused it. ``reason``: why
    the load is needed, a sentence (the verdict's ``launches[].reason``)."""
    session = ctx.session
    try:
        return session._launch(launch, label, reason), None
    except LaunchRefused as exc:
        failure = StartFailure(label, launch.to_string(), str(exc), [], None,
                               refused=[f.to_dict() for f in exc.findings])
        ctx.state.start_failures.append(failure)
        return None, failure
    except PortInUse as exc:
        # Something that is no engine server of ours holds the port (found by the inventory's
        # port check, never stopped): the launch is refused, nothing started.
        failure = StartFailure(label, launch.to_display(), f"PortInUse: {exc}", [], str(exc))
        ctx.state.start_failures.append(failure)
        session.launches.append(launch_record(label=label, reason=reason, launch_command=launch.to_display(), pid=None,
                                              log_path=None, stopped_at=None, stopped=None, launched_at=time.time(),
                                              ready_at=None, log_start=None, started=False, error=str(exc)))
        return None, failure
    except (ServerDied, ServerStartTimedOut) as exc:
        death = read_start_death(ctx, getattr(exc, "log_path", None), list(exc.log_tail), launch.engine)
        failure = StartFailure(label, launch.to_display(), f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                               list(exc.log_tail), death["exception"] if death else last_exception(exc.log_tail),
                               death=death)
        ctx.state.start_failures.append(failure)
        if session.launches and session.launches[-1].get("pid") is None:
            session.launches.pop()
        times = dict(session.failed_launch or {"stopped_at": None, "stopped": None, "launched_at": time.time(),
                                               "log_start": 0})
        times.update(label=label, reason=reason, launch_command=launch.to_display(), pid=exc.pid,
                     log_path=exc.log_path)
        session.launches.append(launch_record(**times, ready_at=None, started=False,
                                              error=failure.exception or failure.error,
                                              phases=launch_phases(ctx.box, exc.log_path, 0, None)))
        forget_dead(ctx, exc.pid)
        return None, failure


def forget_dead(ctx: RunContext, pid: int) -> None:
    """A launched server that died: nothing to stop, the journal forgets it."""
    session = ctx.session
    if session.current is not None and session.current.pid == pid:
        session.journal.remove_started(pid)
        session.current = None
        session.current_launch = None


def serving_label(ctx: RunContext) -> str:
    """Which server answers now, in words: ``the probe server`` (a launch of the run, by its
    label), ``the server as found`` (the one running before the run, never launched by it)."""
    session = ctx.session
    if session.current is not None:
        label = next((l["label"] for l in reversed(session.launches) if l.get("pid") == session.current.pid), None)
        if label is None:
            label = next((s.get("label") for s in session.journal.data.get("started_servers") or []
                          if s.get("pid") == session.current.pid), None) or "run's"
        return "the server the run launched as found" if label == "as-found" else f"the {label} server"
    return "the server as found"


def stopped_answering(ctx: RunContext, exc: BaseException, *, what: str, pid: int | None,
                      log_path: str | None) -> ServerStoppedAnswering | None:
    """The :class:`ServerStoppedAnswering` that ``exc`` (a failed request to the server that
    serves now) means, or ``None`` when the server did answer (an error status, a body that is
    no ``/generate`` response: a failure of another kind, raised as it is). No answer at all —
    a connection refused or reset, a read time-out, a server not ready or stuck — is a server
    that stopped answering; what its process is doing then is read on the box (exited, stopped
    by SIGSTOP, still running) with the log's last :data:`LOST_LOG_TAIL` lines. Each box call is
    bounded (10 s for the process, 30 s for the log)."""
    if isinstance(exc, (AcceptanceError, MeasureError)) and not isinstance(exc.__cause__, httpx.TransportError):
        return None
    state = "unknown"
    if pid is not None:
        try:
            info = ctx.box.process(pid, timeout=10)
            state = ("exited" if info is None or info.state in ("Z", "X") else
                     "stopped" if info.state in ("T", "t") else "running")
        except RemoteError as err:
            ctx.notes.append(f"the state of server pid {pid} could not be read: {err}")
    tail: list[str] = []
    if log_path:
        try:
            tail = ctx.box.tail(log_path, LOST_LOG_TAIL, timeout=30)
        except RemoteError as err:
            ctx.notes.append(f"the log {log_path} could not be read: {err}")
    return ServerStoppedAnswering(server=serving_label(ctx), port=ctx.inventory.port, pid=pid, state=state,
                                  step="", what=what, error=" ".join(str(exc).split())[:500],
                                  log_tail=REDACTOR.obj(tail), log_path=log_path)


def record_loss(ctx: RunContext, exc: ServerStoppedAnswering, step: str) -> StepResult:
    """Record that the server stopped answering during ``step`` (the run ends there: every
    later step is skipped, the finish step restores the box and writes the verdict
    ``inconclusive``). A server the run launched is stopped at the restore, the original
    relaunched if the run had stopped it; the server as found is left as it is (the run did
    not start it and does not kill it). Returns the step's result."""
    exc.step = exc.step or step
    ctx.state.server_lost = exc
    if ctx.state.fix.applied and ctx.state.fix.after is None and not ctx.state.fix.result:
        ctx.state.fix.result = {"applied": True, "sufficient": None,
                           "why": f"nothing was measured with the fix: {SERVER_STOPPED_ANSWERING}"}
    return StepResult(step, "inconclusive", exc.describe(), data=exc.to_dict())

