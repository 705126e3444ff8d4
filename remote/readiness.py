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

What vLLM 0.32.0 answers (``vllm/entrypoints/``): no ``/health_generate``, ``/generate`` nor
``/server_info`` (the last only with ``VLLM_SERVER_DEV_MODE=1``: ``launchers/api_server/routers.py``).
Before its engine core is up the api_server does not listen (connection refused); then
``GET /health`` answers 200, or **503 only when the engine is dead** (``EngineDeadError``:
``serve/instrumentator/health.py``), never while starting. ``GET /v1/models`` lists the served
model (``owned_by: "vllm"``), ``POST /v1/completions`` generates, ``GET /version`` answers
``{"version": "0.32.0"}``, ``/metrics`` carries ``vllm:`` series. With ``--api-key`` the ``/v1``
routes answer 401 without the key, ``/health`` does not need it.

The check (:func:`check_generation`): ``GET /health_generate``; an engine without it (404, 405)
gets a 1-token greedy ``POST /generate``; one without that either gets ``GET /health`` and, when
that is 200, the OpenAI route: ``GET /v1/models`` then a 1-token greedy ``POST /v1/completions``
for its first model (vLLM's generation check); a server with no ``/v1/models`` either is checked by
``/health`` alone (not a generation check, said so in the detail). ``engine="vllm"`` goes straight to
``/health`` → ``/v1/models`` → ``/v1/completions`` and calls a missing route an error
(``missing_routes``). :func:`classify` turns one answer into a :class:`Readiness`;
:func:`wait_ready` polls until ready, a start-up time-out, a stuck generation or a dead process.
:func:`identify_server` tells which engine answers at a URL.

Units: seconds.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

import httpx

from .errors import GenerationStuck, ServerNotReady, ServerRouteMissing

__all__ = [
    "Readiness", "classify", "check_generation", "wait_ready", "SGLANG_HEALTH_MIN_WAIT_S", "HEALTH_PATH",
    "FALLBACK_GENERATE", "ServerIdentity", "identify_server", "OPENAI_COMPLETION", "StallClock",
    "STUCK_CONFIRMATIONS", "MIN_CPU_PROGRESS_S",
]

#: The shortest time SGLang 0.5.23's ``health_generate`` takes to answer once the server is up:
#: it sleeps 1 s before it first looks for the scheduler's answer (http_server.py). A 503 answered
#: later than this went through the generation wait, so the scheduler did not answer.
SGLANG_HEALTH_MIN_WAIT_S = 1.0
#: The generation-level health endpoint (SGLang >= 0.2; the sandbox serves it too).
HEALTH_PATH = "/health_generate"
#: The 1-token request sent to an engine without ``/health_generate``.
FALLBACK_GENERATE = {"text": "\n", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}

#: The 1-token greedy OpenAI completion sent to a server with ``/v1/models`` (vLLM), ``model`` added.
OPENAI_COMPLETION = {"prompt": "\n", "max_tokens": 1, "temperature": 0}

READY, STARTING, STUCK, DOWN, ERROR = "ready", "starting", "stuck", "down", "error"

#: How many consecutive answers of SGLang's own health wait giving up (a 503 after >=
#: :data:`SGLANG_HEALTH_MIN_WAIT_S`) make a server stuck. One such answer may be a busy machine
#: delaying the "at once" 503 of a server still loading (its loader thread holding the GIL while
#: other jobs share the cores); the health wait of a stuck scheduler answers so every time. A read
#: time-out (no byte within the request time-out) is a stall measured already: stuck at once.
STUCK_CONFIRMATIONS = 2
#: CPU seconds a server's process group must use between two looks to count as progress
#: (:class:`StallClock`): more than an idle Python server's housekeeping.
MIN_CPU_PROGRESS_S = 0.05


class StallClock:
    """Seconds since a server last made progress, for time-outs that measure a stall instead of
    the total time (issue 26: on a machine twice as busy a start takes twice as long; a stalled
    server never ends).

    ``activity``: a callable returning a snapshot ``(log bytes of progress or None, CPU seconds of the
    server's process group or None)`` (``remote.box.Box.activity_probe``), or ``None`` (then only a change
    of the answer is progress). :meth:`look` takes a snapshot (at most every ``interval`` seconds)
    and the server's current answer (any hashable: e.g. ``(state, status)``); progress, between
    two snapshots, is a log that grew, CPU time used at a rate of at least ``min_cpu_s`` seconds
    per second (default :data:`MIN_CPU_PROGRESS_S`: a process that only keeps house uses less), or
    a different answer. :attr:`idle_s`: seconds since the last progress (or since the clock
    started). Errors of ``activity`` propagate (``remote.errors.RemoteError``)."""

    def __init__(self, activity: Optional[Callable[[], tuple]] = None, *, interval: float = 1.0,
                 min_cpu_s: float = MIN_CPU_PROGRESS_S, clock: Callable[[], float] = time.monotonic):
        self.activity, self.interval, self.min_cpu_s, self.clock = activity, interval, min_cpu_s, clock
        self.started = self.last_progress = clock()
        self._looked: Optional[float] = None
        self._size: Optional[int] = None
        self._cpu: Optional[float] = None
        self._answer: object = None
        self.progress_events = 0

    @property
    def idle_s(self) -> float:
        """Seconds since the last progress (or since the clock started)."""
        return self.clock() - self.last_progress

    def look(self, answer: object = None) -> bool:
        """Take a snapshot; True when it shows progress since the previous one."""
        now = self.clock()
        first = self._looked is None
        moved = not first and answer != self._answer
        self._answer = answer
        if first or (self.activity is not None and now - self._looked >= self.interval):
            if self.activity is not None:
                size, cpu = self.activity()
                if not first:
                    dt = max(now - self._looked, 1e-6)
                    moved = moved or (size is not None and self._size is not None and size > self._size)
                    moved = moved or (cpu is not None and self._cpu is not None
                                      and (cpu - self._cpu) / dt >= self.min_cpu_s)
                self._size, self._cpu = size, cpu
            self._looked = now
        if moved:
            self.last_progress = now
            self.progress_events += 1
        return moved


@dataclass(frozen=True)
class Readiness:
    """One readiness answer. ``state``: ``ready`` (a generation answered), ``starting`` (503 at
    once, or the connection refused: the server may still be loading), ``stuck`` (HTTP answers but
    the generation did not return within the time-out, or SGLang's own health wait gave up: a 503
    after ≥ :data:`SGLANG_HEALTH_MIN_WAIT_S`), ``error`` (any other answer: 4xx/5xx other than
    503, a broken connection); ``down`` is never returned by :func:`classify` (the caller knows the
    process exited). ``detail``: one line saying what was answered; ``status``: the HTTP status
    (``None`` without one); ``elapsed_s``: seconds the request took; ``path``: what was asked;
    ``missing_routes``: the routes the server answered 404/405 to on the way (``("/v1/models",)``
    for a vLLM-like server without it), so a caller can say which route is missing."""

    state: str
    detail: str
    path: str
    status: Optional[int] = None
    elapsed_s: float = 0.0
    missing_routes: tuple[str, ...] = ()

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


def check_generation(client: httpx.Client, base_url: str, *, timeout: float, engine: Optional[str] = None) -> Readiness:
    """One generation-level readiness check of the server at ``base_url`` (``http://host:port``)
    through ``client``, every request bounded by ``timeout`` seconds (read; connect at most 5 s).

    ``engine=None`` or ``"sglang"``: ``GET /health_generate``; on 404/405 a 1-token greedy ``POST
    /generate`` (:data:`FALLBACK_GENERATE`); when that is absent too (404/405/501), ``GET /health``
    and, when it is 200, the OpenAI check below; a server without ``/v1/models`` is then ``ready``
    on ``/health`` alone, its detail saying it is no generation check. ``engine="vllm"``: the OpenAI
    check at once: ``GET /health`` (vLLM 0.32.0: 200, or 503 only for a dead engine: ``error``),
    ``GET /v1/models`` (the first model's ``id``), a 1-token greedy ``POST /v1/completions``
    (:data:`OPENAI_COMPLETION`); a route answering 404/405 is an ``error`` naming it in
    ``missing_routes``, a 401/403 an ``error`` saying the server wants an API key.

    Returns a :class:`Readiness` (:func:`classify`); raises nothing for HTTP failures (they are
    states); ``ValueError`` for an engine other than ``None``, ``"sglang"``, ``"vllm"``."""
    if engine not in (None, "sglang", "vllm"):
        raise ValueError(f"engine must be None, 'sglang' or 'vllm', got {engine!r}")
    base = base_url.rstrip("/")
    t = httpx.Timeout(timeout, connect=min(5.0, timeout))
    if engine == "vllm":
        return _check_openai(client, base, t, timeout, strict=True, missing=())
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
    return _check_openai(client, base, t, timeout, strict=False, missing=(HEALTH_PATH, "/generate"))


def _with(r: Readiness, *, detail: Optional[str] = None, state: Optional[str] = None,
          missing: tuple[str, ...] = ()) -> Readiness:
    return Readiness(state or r.state, detail if detail is not None else r.detail, r.path, r.status, r.elapsed_s,
                     tuple(missing))


def _check_openai(client: httpx.Client, base: str, t: httpx.Timeout, timeout: float, *, strict: bool,
                  missing: tuple[str, ...]) -> Readiness:
    """``/health`` → ``/v1/models`` → a 1-token ``/v1/completions`` (see :func:`check_generation`)."""
    resp, err, took = _timed(lambda: client.get(base + "/health", timeout=t))
    r = classify("/health", status=None if resp is None else resp.status_code, error=err, elapsed_s=took,
                 timeout=timeout)
    if resp is not None and resp.status_code in (404, 405):
        return _with(r, state=ERROR, missing=missing + ("/health",),
                     detail=f"/health: HTTP {resp.status_code}: the server has no /health route"
                            + (f" (nor {', '.join(missing)})" if missing else ""))
    if strict and resp is not None and resp.status_code == 503:
        return _with(r, state=ERROR, missing=missing,
                     detail="/health: 503: vLLM's engine is dead (it answers 503 only on EngineDeadError, never "
                            "while starting: vllm/entrypoints/serve/instrumentator/health.py)")
    if not r.ready:
        return _with(r, missing=missing)
    resp, err, took = _timed(lambda: client.get(base + "/v1/models", timeout=t))
    if resp is not None and resp.status_code in (404, 405):
        if not strict:  # an engine with /health only: liveness, the old behaviour
            return _with(r, missing=missing + ("/v1/models",),
                         detail=r.detail + " (no /health_generate nor /generate nor /v1/models here: liveness only, "
                                           "not a generation check)")
        return Readiness(ERROR, f"/v1/models: HTTP {resp.status_code}: the server has no /v1/models route (an "
                                "OpenAI-compatible server such as vLLM serves it)", "/v1/models", resp.status_code,
                         took, missing + ("/v1/models",))
    if resp is None or resp.status_code != 200:
        m = classify("/v1/models", status=None if resp is None else resp.status_code, error=err, elapsed_s=took,
                     timeout=timeout)
        if m.status in (401, 403):
            return _with(m, state=ERROR, missing=missing,
                         detail=f"/v1/models: HTTP {m.status}: the server wants an API key (vLLM --api-key): give "
                                "the client its Authorization header")
        return _with(m, missing=missing)
    try:
        models = resp.json().get("data") or []
        model = models[0]["id"]
    except (ValueError, AttributeError, LookupError, TypeError):
        return Readiness(ERROR, f"/v1/models: 200 but no model listed ({resp.text[:200]!r})", "/v1/models", 200,
                         took, missing)
    body = {**OPENAI_COMPLETION, "model": model}
    resp, err, took = _timed(lambda: client.post(base + "/v1/completions", json=body, timeout=t))
    path = "/v1/completions (1 token)"
    if resp is not None and resp.status_code in (404, 405):
        return Readiness(ERROR, f"{path}: HTTP {resp.status_code}: the server has no /v1/completions route",
                         path, resp.status_code, took, missing + ("/v1/completions",))
    c = classify(path, status=None if resp is None else resp.status_code, error=err, elapsed_s=took, timeout=timeout)
    if c.state == STUCK and c.status == 503:
        c = Readiness(STARTING, f"{path}: 503 after {took:.1f} s (not ready)", path, 503, took)
    if c.ready:
        c = _with(c, detail=f"{path}: 200 after {took:.1f} s (model {model!r})")
    return _with(c, missing=missing)


@dataclass(frozen=True)
class ServerIdentity:
    """Which engine answers at a URL (:func:`identify_server`). ``engine``: ``"vllm"``,
    ``"sglang"`` (the sandbox answers as SGLang), ``"unknown"`` (nothing told) or ``"conflicting"``
    (the sources disagree: see ``evidence``); ``version``: the engine's version as the server
    reports it (``None`` when not told); ``evidence``: one line per source asked, what it answered
    and what it says; ``models``: the ids of ``/v1/models`` (empty without it)."""

    engine: str
    version: Optional[str]
    evidence: tuple[str, ...]
    models: tuple[str, ...] = ()


def identify_server(client: httpx.Client, base_url: str, *, timeout: float = 10) -> ServerIdentity:
    """Ask the server at ``base_url`` which engine it is, each request bounded by ``timeout``
    seconds. Sources (every one asked; each adds an ``evidence`` line):

    - ``GET /server_info``: SGLang 0.5.23 answers its server args with ``version`` (and
      ``model_path``, ``internal_states``…); vLLM 0.32.0 serves it only in dev mode, with
      ``vllm_config`` / ``vllm_env`` (``vllm/entrypoints/serve/dev/server_info/api_router.py``);
    - ``GET /version``: vLLM 0.32.0 ``{"version": "0.32.0"}`` (``serve/instrumentator/basic.py``);
      SGLang 0.5.23 has no such route;
    - ``GET /v1/models``: ``owned_by`` is ``"vllm"`` (vLLM ``serve/engine/protocol.py``) or
      ``"sglang"`` (SGLang ``srt/entrypoints/openai/protocol.py``);
    - ``GET /metrics``: series named ``vllm:…`` or ``sglang:…`` (SGLang serves it only with
      ``--enable-metrics``).

    A failed request (refused, time-out, 404) is evidence too ("no /version"). Raises nothing for
    HTTP failures."""
    base = base_url.rstrip("/")
    t = httpx.Timeout(timeout, connect=min(5.0, timeout))
    votes: list[str] = []
    evidence: list[str] = []
    version: Optional[str] = None
    models: tuple[str, ...] = ()

    def get(path: str) -> Optional[httpx.Response]:
        try:
            resp = client.get(base + path, timeout=t)
        except httpx.HTTPError as exc:
            evidence.append(f"{path}: {type(exc).__name__}: {exc}")
            return None
        if resp.status_code != 200:
            evidence.append(f"{path}: HTTP {resp.status_code}")
            return None
        return resp

    def json_of(resp: httpx.Response, path: str):
        try:
            return resp.json()
        except ValueError:
            evidence.append(f"{path}: 200 but not JSON ({resp.text[:80]!r})")
            return None

    resp = get("/server_info")
    data = json_of(resp, "/server_info") if resp is not None else None
    if isinstance(data, dict):
        if "vllm_config" in data or "vllm_env" in data:
            votes.append("vllm")
            evidence.append("/server_info: has vllm_config (vLLM in dev mode)")
        elif "version" in data and any(k in data for k in ("model_path", "internal_states", "launch_command")):
            votes.append("sglang")
            version = str(data["version"])
            evidence.append(f"/server_info: SGLang's server args, version {version}")
        else:
            evidence.append(f"/server_info: 200 with unknown keys {sorted(data)[:8]}")
    resp = get("/version")
    data = json_of(resp, "/version") if resp is not None else None
    if isinstance(data, dict) and isinstance(data.get("version"), str) and len(data) == 1:
        votes.append("vllm")
        version = version or data["version"]
        evidence.append(f"/version: {data['version']} (vLLM's route)")
    elif resp is not None:
        evidence.append(f"/version: 200 with unexpected body {str(data)[:80]!r}")
    resp = get("/v1/models")
    data = json_of(resp, "/v1/models") if resp is not None else None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        entries = [m for m in data["data"] if isinstance(m, dict)]
        models = tuple(str(m.get("id")) for m in entries)
        owners = sorted({str(m.get("owned_by")) for m in entries})
        for owner in owners:
            if owner in ("vllm", "sglang"):
                votes.append(owner)
        evidence.append(f"/v1/models: owned_by {', '.join(owners) or 'nothing'}")
    resp = get("/metrics")
    if resp is not None:
        prefixes = sorted({name for name in ("vllm", "sglang")
                           if any(line.startswith(name + ":") for line in resp.text.splitlines())})
        votes.extend(prefixes)
        evidence.append(f"/metrics: series prefixed {', '.join(p + ':' for p in prefixes) or 'by no engine'}")
    engines = sorted(set(votes))
    engine = engines[0] if len(engines) == 1 else ("unknown" if not engines else "conflicting")
    return ServerIdentity(engine, version, tuple(evidence), models)


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
    engine: Optional[str] = None,
    activity: Optional[Callable[[], tuple]] = None,
    max_wait: Optional[float] = None,
) -> float:
    """Wait until the server at ``base_url`` generates (:func:`check_generation`); return the
    seconds waited (0.0-ish when it is ready at once).

    While it is ``starting`` (503 at once, connection refused) it is waited for, up to
    ``start_timeout`` seconds, with ONE ``progress`` line (``None``: silent) when the first answer
    is not ready. With ``activity`` (a callable returning ``(log bytes of progress, CPU seconds of the
    server's process group)``, either ``None`` when unknown: ``remote.box.Box.activity_probe``) the
    ``start_timeout`` counts seconds WITHOUT progress instead (:class:`StallClock`: no new log
    bytes, no CPU time used, the same answer), and ``max_wait`` (seconds, default 4 ×
    ``start_timeout``) bounds the whole wait: a server starting slowly on a busy machine is waited
    for while it works. A refused connection is waited for only when ``alive`` (a callable: is the
    server's process still there?) is given and says so; without ``alive`` a refused connection
    fails at once. ``request_timeout``: each check's read time-out (the user's per-request
    time-out). ``client``: an ``httpx.Client`` (one with ``trust_env=False`` is made otherwise).
    ``engine``: passed to :func:`check_generation` (``"vllm"``: ``/health`` → ``/v1/models`` → 1-token
    ``/v1/completions``; ``None``: SGLang's routes first, then those).

    Raises :class:`remote.errors.GenerationStuck` as soon as a check is ``stuck`` by a read
    time-out (HTTP answers, the 1-token generation does not return within ``request_timeout``), or
    when SGLang's own health wait gave up (a 503 after >= :data:`SGLANG_HEALTH_MIN_WAIT_S`) on
    :data:`STUCK_CONFIRMATIONS` consecutive checks; :class:`remote.errors.ServerNotReady` when it
    never became ready within ``start_timeout`` (with ``activity``: made no progress for that long,
    or ``max_wait`` passed; its ``.last`` is what it last answered), when ``alive`` says the process
    is gone, when nothing accepts connections and there is no live process to wait for, or on any
    other answer (``error`` state: e.g. HTTP 500 from the health check, vLLM's ``/health`` 503 of a
    dead engine with ``engine="vllm"``); :class:`remote.errors.ServerRouteMissing` (a
    ``ServerNotReady``; ``.routes``) when the route the check needs answers 404/405.
    """
    if not start_timeout >= 0:
        raise ValueError(f"start_timeout must be >= 0 seconds, got {start_timeout!r}")
    if not request_timeout > 0:
        raise ValueError(f"request_timeout must be > 0 seconds, got {request_timeout!r}")
    start = time.monotonic()
    total = start_timeout if activity is None else (max_wait if max_wait is not None else 4 * start_timeout)
    deadline = start + total
    stall = None if activity is None else StallClock(activity, interval=min(1.0, max(start_timeout, 0.01) / 3))
    own = client is None
    client = client or httpx.Client(trust_env=False)
    announced = False
    stuck_seen = 0
    try:
        while True:
            r = check_generation(client, base_url, timeout=request_timeout, engine=engine)
            if r.ready:
                return time.monotonic() - start
            stuck_seen = stuck_seen + 1 if r.state == STUCK else 0
            if r.state == STUCK and (r.status != 503 or stuck_seen >= STUCK_CONFIRMATIONS):
                raise GenerationStuck(f"{what} at {base_url}: HTTP is up but generation is stuck: {r.detail}"
                                      + (f" ({stuck_seen} checks in a row)" if stuck_seen > 1 else ""),
                                      url=base_url, timeout=request_timeout, last=r.detail)
            if r.state == STUCK:
                continue  # one slow 503 decides nothing: ask again at once
            if r.state == ERROR and r.status in (404, 405):
                raise ServerRouteMissing(f"{what} at {base_url} is not ready: {r.detail}", url=base_url,
                                         timeout=start_timeout, last=r.detail, routes=r.missing_routes)
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
            if stall is not None:
                stall.look((r.state, r.status))
                if stall.idle_s >= start_timeout:
                    raise ServerNotReady(f"{what} at {base_url} made no progress for {stall.idle_s:.1f} s (no new log "
                                         f"bytes, no CPU time used, the same answer; stall time-out {start_timeout:g} s;"
                                         f" last answer: {r.detail})", url=base_url, timeout=start_timeout,
                                         last=r.detail)
            if now >= deadline:
                raise ServerNotReady(f"{what} at {base_url} never became ready in {total:g} s (last answer: "
                                     f"{r.detail})", url=base_url, timeout=start_timeout, last=r.detail)
            if not announced and progress is not None:
                how = (f"while it makes progress (given up after {start_timeout:g} s without, {total:g} s at most)"
                       if stall is not None else f"up to {start_timeout:g} s")
                progress(f"waiting {how} for the {what} at {base_url} to finish starting ({r.detail})")
                announced = True
            time.sleep(min(poll_interval, max(0.0, deadline - now)))
    finally:
        if own:
            client.close()
