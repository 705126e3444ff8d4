"""The running server's current acceptance, read cheaply and judged by the one definition
(:func:`workbench.rules.acceptance_level.classify_acceptance`): what ``workbench doctor --running``
prints beside its static findings.

:func:`running_acceptance` sends no request to the server's model; it reads what the server
already reports:

- SGLang (and the sandbox, which logs as SGLang 0.5.23 does): the last :data:`TAIL_LINES` lines of
  the log file its output goes to (``ServerProcess.log_path``: ``/proc/PID/fd/1`` on the box, as
  the console and ``workbench status`` find it), their decode lines' mean ``accept len``
  (:class:`workbench.logs.LogScanner`, the parser ``workbench logs`` uses); when the server's
  output is not a file or holds no decode line with an accept length, ``GET /metrics``'s
  ``sglang:spec_accept_length`` gauge (the last decode-log interval's accept length; served only
  with ``--enable-metrics``).
- vLLM: ``GET /metrics``'s speculative-decoding counters (:func:`workbench.measure.vllm.spec_counters`,
  vLLM 0.32.0 ``v1/spec_decode/metrics.py``): 1 + accepted / drafts over the server's lifetime.

The ceiling is :func:`~workbench.rules.acceptance_level.verify_ceiling` of the running launch,
else the one its log's start-up lines state (:func:`~workbench.rules.acceptance_level.ceiling_from_log`,
as ``workbench logs`` reads it). Every read is bounded by ``timeout`` seconds; a read that fails is a
note (the level is then ``unknown``), never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import httpx

from remote.errors import RemoteError
from workbench.engine.launch import LaunchCommand
from workbench.logs import LogScanner, tail_bytes
from workbench.measure.sources import parse_metrics
from workbench.measure.vllm import spec_counters
from workbench.rules.acceptance_level import AcceptanceLevel, ceiling_from_log, classify_acceptance, verify_ceiling

__all__ = ["RunningAcceptance", "running_acceptance", "TAIL_LINES", "HEAD_BYTES"]

#: Lines of the end of an SGLang server's log read for its current accept length.
TAIL_LINES = 2000
#: Bytes of a log's head read for the ceiling its start-up lines state (as ``workbench logs``).
HEAD_BYTES = 256 * 1024
#: The gauge SGLang (≥ 0.4.6) serves with ``--enable-metrics``: the last decode-log interval's accept length.
SGLANG_GAUGE = "sglang:spec_accept_length"


@dataclass
class RunningAcceptance:
    """The running server's acceptance: ``level`` (:class:`AcceptanceLevel`, ``unknown`` when
    nothing was measured or it could not be read), ``source`` (where the accept length came from,
    e.g. ``"mean 'accept len' of the last 37 decode lines of /x/server.log"``; ``None`` when not
    read), ``notes`` (why it is unknown, what failed to be read)."""

    level: AcceptanceLevel
    source: Optional[str] = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"level": self.level.to_dict(), "source": self.source, "notes": list(self.notes)}


def _metrics(box: Any, port: int, timeout: float) -> Any:
    """One ``GET /metrics`` of the server on ``box``'s ``port`` (through :meth:`remote.Box.url`, a port
    forward over SSH), parsed. Raises ``httpx.HTTPError``, ``RemoteError``, ``ValueError`` (not
    Prometheus text), ``RuntimeError`` (an answer other than 200)."""
    if port is None:
        raise RuntimeError("the server's port is not known (no --port, no listening socket read)")
    url = box.url(int(port), timeout=timeout) + "/metrics"
    resp = httpx.get(url, timeout=timeout, trust_env=False)
    if resp.status_code != 200:
        raise RuntimeError(f"GET {url} answered {resp.status_code}")
    return parse_metrics(resp.text)


def _log_ceiling(box: Any, path: str, timeout: float) -> Optional[float]:
    head = box.read_bytes(path, 0, HEAD_BYTES, timeout=timeout)
    return ceiling_from_log(head.decode("utf-8", "replace").splitlines())


def running_acceptance(box: Any, server: Any, launch: Optional[LaunchCommand] = None, *,
                       timeout: float = 30.0, expected: Optional[float] = None) -> RunningAcceptance:
    """The current acceptance of ``server`` (``remote.result.ServerProcess``: ``port``, ``argv``,
    ``log_path``) running on ``box``, judged against the ceiling of its launch (``launch``, default
    parsed from ``server.argv``) and ``expected`` (an expected accept length, when the user gave
    one): see the module docstring for what is read on each engine. ``timeout``: seconds for each
    box read and HTTP request. Never raises for a read that fails: the level is then ``unknown`` and
    a note says what could not be read."""
    notes: list[str] = []
    if launch is None:
        launch = LaunchCommand.parse(list(server.argv))
    ceiling = verify_ceiling(launch)
    log_path = getattr(server, "log_path", None)
    if ceiling is None and log_path:
        try:
            ceiling = _log_ceiling(box, log_path, timeout)
        except (RemoteError, OSError) as exc:
            notes.append(f"the ceiling could not be read from {log_path}'s start-up lines: {type(exc).__name__}: {exc}")
    accept = source = None
    if launch.engine == "vllm":
        accept, source = _vllm(box, server, timeout, notes)
    else:
        accept, source = _sglang_log(box, log_path, timeout, notes)
        if accept is None:
            accept, source = _sglang_metrics(box, server, timeout, notes)
    return RunningAcceptance(classify_acceptance(accept, ceiling=ceiling, expected=expected), source, notes)


def _vllm(box: Any, server: Any, timeout: float, notes: list[str]) -> tuple[Optional[float], Optional[str]]:
    try:
        snap = _metrics(box, server.port, timeout)
    except (httpx.HTTPError, RemoteError, OSError, ValueError, RuntimeError) as exc:
        notes.append(f"vLLM's /metrics on port {server.port} could not be read: {type(exc).__name__}: {exc}")
        return None, None
    counts = spec_counters(snap)
    if counts is None:
        notes.append("vLLM's /metrics has no vllm:spec_decode_num_drafts counter: speculative decoding is off on this "
                     "server")
        return None, None
    if not counts.drafts:
        notes.append("nothing measured yet: vLLM's counters show no draft (no request decoded since the server "
                     "started; send some, e.g. workbench measure)")
        return None, None
    return counts.accept_length, (f"vLLM /metrics counters since the server started: 1 + {counts.accepted} accepted "
                                  f"/ {counts.drafts} drafts")


def _sglang_log(box: Any, path: Optional[str], timeout: float,
                notes: list[str]) -> tuple[Optional[float], Optional[str]]:
    if not path:
        notes.append("the server's output is not a file: its decode lines cannot be read")
        return None, None
    try:
        data, _ = tail_bytes(box, path, TAIL_LINES, timeout=timeout)
    except (RemoteError, OSError, ValueError) as exc:
        notes.append(f"the server's log {path} could not be read: {type(exc).__name__}: {exc}")
        return None, None
    scanner = LogScanner()
    scanner.feed(data)
    scanner.finish()
    acc = scanner.summary(source=path, evaluate_rules=False).acceptance
    if acc.accept_length is None:
        notes.append(f"nothing measured yet: no decode line with an accept length in the last {TAIL_LINES} lines of "
                     f"{path} (no request decoded yet, or speculative decoding is off)")
        return None, None
    return acc.accept_length, f"mean 'accept len' of the last {acc.lines} decode lines of {path}"


def _sglang_metrics(box: Any, server: Any, timeout: float, notes: list[str]) -> tuple[Optional[float], Optional[str]]:
    try:
        snap = _metrics(box, server.port, timeout)
    except (httpx.HTTPError, RemoteError, OSError, ValueError, RuntimeError) as exc:
        notes.append(f"its /metrics could not be read either ({type(exc).__name__}: {exc}; SGLang serves it with "
                     "--enable-metrics)")
        return None, None
    value = snap.gauge(SGLANG_GAUGE)
    if not value:  # 0.0 before the first decode-log interval (and in 0.5.4-0.5.6, where it is always 0)
        if snap.declared(SGLANG_GAUGE):
            notes.append(f"its /metrics gauge {SGLANG_GAUGE} has no accept length yet")
        return None, None
    return value, f"/metrics gauge {SGLANG_GAUGE} (the last decode-log interval)"
