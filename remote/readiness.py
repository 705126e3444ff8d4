"""Is a server ready to generate? One answer for a launch that waits (``Box.wait_healthy``), a
measurement that starts (``workbench.measure``) and the inventory of a running server.

What SGLang 0.5.23 answers (``srt/entrypoints/http_server.py``):

- ``/health`` and ``/health_generate`` are one handler (``health_generate``). While the server
  starts (``ServerStatus.Starting``: models loading, the start-up warm-up running) or shuts down it
  answers **503 at once**. Otherwise it sends a 1-token generation (``input_ids=[0]``,
  ``max_new_tokens=1``, ``log_metrics=False``) to the scheduler and polls once a second
  (``await asyncio.sleep(1)`` first) for ANY answer of the scheduler/detokenizer since it started
  (``tokenizer_manager.last_receive_tstamp > tic``): **200**, at the earliest after 1 s. When
  none came within ``SGLANG_HEALTH_CHECK_TIMEOUT`` (default 20 s) it logs "Health check failed.
  Server couldn't get a response from detokenizer for last N seconds." and answers **503** (status
  ``UnHealthy``). So a 503 that took ≥ 1 s is a stuck scheduler, never a server starting.
- ``/health`` skips the generation (answers 200 at once) only with
  ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0`` (``srt/environ.py``, default on) or
  ``SGLANG_DIAG_BYPASS_HEALTH_GENERATE=1``: then it cannot see a stuck scheduler, which is why the
  check here asks ``/health_generate``.
- Before uvicorn listens (the scheduler processes load the weights first) the port refuses
  connections; ``/generate`` and the OpenAI endpoints are served by the same event loop.

The check (:func:`check_generation`): ``GET /health_generate``; an engine without it (404, 405)
gets a 1-token greedy ``POST /generate``; one without that either gets ``GET /health`` (not a
generation check, said so in the detail). :func:`classify` turns one answer into a
:class:`Readiness`; :func:`wait_ready` polls until ready, a start-up time-out, a stuck generation
or a dead process.

Units: seconds.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

import httpx

from .errors import GenerationStuck, ServerNotReady

__all__ = [
    "Readiness", "classify", "check_generation", "wait_ready", "SGLANG_HEALTH_MIN_WAIT_S", "HEALTH_PATH",
    "FALLBACK_GENERATE",
]

#: The shortest time SGLang 0.5.23's ``health_generate`` takes to answer once the server is up:
#: it sleeps 1 s before it first looks for the scheduler's answer (http_server.py). A 503 answered
#: later than this went through the generation wait, so the scheduler did not answer.
SGLANG_HEALTH_MIN_WAIT_S = 1.0
#: The generation-level health endpoint (SGLang >= 0.2; the sandbox serves it too).
HEALTH_PATH = "/health_generate"
#: The 1-token request sent to an engine without ``/health_generate``.
FALLBACK_GENERATE = {"text": "\n", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}

READY, STARTING, STUCK, DOWN, ERROR = "ready", "starting", "stuck", "down", "error"


@dataclass(frozen=True)
class Readiness:
    """One readiness answer. ``state``: ``ready`` (a generation answered), ``starting`` (503 at
    once, or the connection refused: the server may still be loading), ``stuck`` (HTTP answers but
    the generation did not return within the time-out, or SGLang's own health wait gave up: a 503
    after ≥ :data:`SGLANG_HEALTH_MIN_WAIT_S`), ``error`` (any other answer: 4xx/5xx other than
    503, a broken connection); ``down`` is never returned by :func:`classify` (the caller knows the
    process exited). ``detail``: one line saying what was answered; ``status``: the HTTP status
    (``None`` without one); ``elapsed_s``: seconds the request took; ``path``: what was asked."""

    state: str
    detail: str
    path: str
    status: Optional[int] = None
    elapsed_s: float = 0.0

    @property
    def ready(self) -> bool:
        return self.state == READY


def classify(path: str, *, status: Optional[int] = None, error: Optional[BaseException] = None,
             elapsed_s: float = 0.0, timeout: Optional[float] = None) -> Readiness:
    """The readiness one answer shows. Give ``status`` (the HTTP status) or ``error`` (the
    ``httpx`` exception raised instead), ``elapsed_s`` (seconds the request took) and ``timeout``
    (the request's read time-out, for the message).

    - 200 → ``ready``; 503 answered in < :data:`SGLANG_HEALTH_MIN_WAIT_S` → ``starting``; 503
      after longer → ``stuck`` (SGLang's health check waited for the scheduler and gave up);
    - ``httpx.ConnectError`` / ``ConnectTimeout`` (nothing accepts on the port yet) → ``starting``;
      so are ``RemoteProtocolError`` / ``ReadError`` / ``WriteError`` (the connection closed with
      no answer): through an SSH port forward (``remote.ssh.forward``) the local end accepts and
      then closes the connection when the box refuses it, which is how "nothing listens yet" looks
      there;
    - ``httpx.ReadTimeout`` (the connection was accepted, nothing came back) → ``stuck``;
    - anything else → ``error``.

    Raises ``ValueError`` when neither or both of ``status`` and ``error`` are given.
    """
    if (status is None) == (error is None):
        raise ValueError("classify needs exactly one of status= and error=")
    took = f"after {elapsed_s:.1f} s"
    if error is not None:
        name = type(error).__name__
        if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)):
            return Readiness(STARTING, f"{path}: connection failed ({name}): nothing accepts connections yet", path,
                             None, elapsed_s)
        if isinstance(error, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            return Readiness(STARTING, f"{path}: the connection closed with no answer ({name}: {error}): nothing "
                                       "accepts connections yet (through an SSH port forward a refusal looks so)",
                             path, None, elapsed_s)
        if isinstance(error, httpx.ReadTimeout):
            limit = f"{timeout:g} s" if timeout is not None else "the read time-out"
            return Readiness(STUCK, f"{path}: the connection was accepted but no answer came within {limit} "
                                    "(HTTP is up, generation does not return)", path, None, elapsed_s)
        return Readiness(ERROR, f"{path}: {name}: {error}", path, None, elapsed_s)
    if status == 200:
        return Readiness(READY, f"{path}: 200 {took}", path, 200, elapsed_s)
    if status == 503:
        if elapsed_s >= SGLANG_HEALTH_MIN_WAIT_S:
            return Readiness(STUCK, f"{path}: 503 {took}: the server's own health check got no answer from its "
                                    "scheduler (SGLang: 'Health check failed', SGLANG_HEALTH_CHECK_TIMEOUT)",
                             path, 503, elapsed_s)
        return Readiness(STARTING, f"{path}: 503 (not ready: still loading or warming up)", path, 503, elapsed_s)
    return Readiness(ERROR, f"{path}: HTTP {status} {took}", path, status, elapsed_s)


def _timed(call: Callable[[], httpx.Response]) -> tuple[Optional[httpx.Response], Optional[BaseException], float]:
    t0 = time.monotonic()
    try:
        return call(), None, time.monotonic() - t0
    except httpx.HTTPError as exc:
        return None, exc, time.monotonic() - t0


def check_generation(client: httpx.Client, base_url: str, *, timeout: float) -> Readiness:
    """One generation-level readiness check of the server at ``base_url`` (``http://host:port``)
    through ``client``, every request bounded by ``timeout`` seconds (read; connect at most 5 s):
    ``GET /health_generate``; on 404/405 a 1-token greedy ``POST /generate``
    (:data:`FALLBACK_GENERATE`); when that is absent too (404/405/501), ``GET /health`` (its detail
    says it is no generation check). Returns a :class:`Readiness` (:func:`classify`); raises
    nothing for HTTP failures (they are states)."""
    base = base_url.rstrip("/")
    t = httpx.Timeout(timeout, connect=min(5.0, timeout))
    resp, err, took = _timed(lambda: client.get(base + HEALTH_PATH, timeout=t))
    if resp is None or resp.status_code not in (404, 405):
        return classify(HEALTH_PATH, status=None if resp is None else resp.status_code, error=err, elapsed_s=took,
                        timeout=timeout)
    resp, err, took = _timed(lambda: client.post(base + "/generate", json=FALLBACK_GENERATE, timeout=t))
    if resp is None or resp.status_code not in (404, 405, 501):
        r = classify("/generate (1 token)", status=None if resp is None else resp.status_code, error=err,
                     elapsed_s=took, timeout=timeout)
        if r.state == STUCK and r.status == 503:  # a plain /generate 503 is "not ready", whatever it took
            r = Readiness(STARTING, f"/generate (1 token): 503 after {took:.1f} s (not ready)", r.path, 503, took)
        return r
    resp, err, took = _timed(lambda: client.get(base + "/health", timeout=t))
    r = classify("/health", status=None if resp is None else resp.status_code, error=err, elapsed_s=took,
                 timeout=timeout)
    return Readiness(r.state, r.detail + " (no /health_generate nor /generate here: liveness only, not a "
                                          "generation check)", r.path, r.status, r.elapsed_s)


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def wait_ready(
    base_url: str,
    *,
    start_timeout: float,
    request_timeout: float,
    alive: Optional[Callable[[], bool]] = None,
    progress: Optional[Callable[[str], None]] = _stderr_line,
    poll_interval: float = 0.5,
    client: Optional[httpx.Client] = None,
    what: str = "server",
) -> float:
    """Wait until the server at ``base_url`` generates (:func:`check_generation`); return the
    seconds waited (0.0-ish when it is ready at once).

    While it is ``starting`` (503 at once, connection refused) it is waited for, up to
    ``start_timeout`` seconds, with ONE ``progress`` line (``None``: silent) when the first answer
    is not ready. A refused connection is waited for only when ``alive`` (a callable: is the
    server's process still there?) is given and says so; without ``alive`` a refused connection
    fails at once. ``request_timeout``: each check's read time-out (the user's per-request
    time-out). ``client``: an ``httpx.Client`` (one with ``trust_env=False`` is made otherwise).

    Raises :class:`remote.errors.GenerationStuck` as soon as a check is ``stuck`` (HTTP answers,
    the 1-token generation does not return within ``request_timeout``, or SGLang's own health wait
    gave up), :class:`remote.errors.ServerNotReady` when it never became ready within
    ``start_timeout`` (its ``.last`` is what it last answered), when ``alive`` says the process is
    gone, when nothing accepts connections and there is no live process to wait for, or on any
    other answer (``error`` state: e.g. HTTP 500 from the health check).
    """
    if not start_timeout >= 0:
        raise ValueError(f"start_timeout must be >= 0 seconds, got {start_timeout!r}")
    if not request_timeout > 0:
        raise ValueError(f"request_timeout must be > 0 seconds, got {request_timeout!r}")
    start = time.monotonic()
    deadline = start + start_timeout
    own = client is None
    client = client or httpx.Client(trust_env=False)
    announced = False
    try:
        while True:
            r = check_generation(client, base_url, timeout=request_timeout)
            if r.ready:
                return time.monotonic() - start
            if r.state == STUCK:
                raise GenerationStuck(f"{what} at {base_url}: HTTP is up but generation is stuck: {r.detail}",
                                      url=base_url, timeout=request_timeout, last=r.detail)
            if r.state == ERROR:
                raise ServerNotReady(f"{what} at {base_url} is not ready: {r.detail}", url=base_url,
                                     timeout=start_timeout, last=r.detail)
            if r.status is None:  # connection refused: only a live process is worth waiting for
                if alive is None:
                    raise ServerNotReady(f"nothing answers at {base_url} ({r.detail}) and no server process is known "
                                         "to be starting there", url=base_url, timeout=start_timeout, last=r.detail)
            if alive is not None and not alive():
                raise ServerNotReady(f"{what} at {base_url}: its process exited before it became ready (last: "
                                     f"{r.detail})", url=base_url, timeout=start_timeout, last=r.detail)
            now = time.monotonic()
            if now >= deadline:
                raise ServerNotReady(f"{what} at {base_url} never became ready in {start_timeout:g} s (last answer: "
                                     f"{r.detail})", url=base_url, timeout=start_timeout, last=r.detail)
            if not announced and progress is not None:
                progress(f"waiting up to {start_timeout:g} s for the {what} at {base_url} to finish starting "
                         f"({r.detail})")
                announced = True
            time.sleep(min(poll_interval, max(0.0, deadline - now)))
    finally:
        if own:
            client.close()
