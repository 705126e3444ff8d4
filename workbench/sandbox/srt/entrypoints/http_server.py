"""HTTP endpoints of the sandbox server (FastAPI + uvicorn).

Mirrors SGLang 0.5.23, srt/entrypoints/http_server.py: `/health` and `/health_generate` (one
handler, as SGLang's `health_generate`: 503 at once while starting; once up a 1-token generation
whose scheduler progress it polls for up to `SGLANG_HEALTH_CHECK_TIMEOUT` seconds (default 20):
200 as soon as the scheduler produced anything since the check began, else the "Health check
failed." error line and 503; `/health` answers 200 without generating only with
`SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0`), `/model_info` and `/server_info` (plus the
deprecated `/get_model_info`, `/get_server_info` that log a warning), `POST /generate`
(`text` str|list or `input_ids`, `sampling_params`; `meta_info` with the spec fields only when
`spec_verify_ct > 0`). Tokenizer: UTF-8 bytes (token id = byte value).

Also, as SGLang 0.5.23 serves them:

- `POST /v1/completions` and `POST /v1/chat/completions` (srt/entrypoints/openai/serving_completions.py
  `_build_completion_response`, serving_chat.py `_build_chat_response`, protocol.py): OpenAI-shaped
  responses with `usage` (`prompt_tokens`, `total_tokens`, `completion_tokens`, ...; no speculative
  statistics) and, only when the request sets `return_spec_tokens_details: true` and the response
  carries spec keys, `sglext.spec_tokens_details` (protocol.py `SpecTokensDetails`, built by
  openai/utils.py `spec_tokens_details_from_meta_info`: the meta_info `spec_*` keys, absent ones as
  0 / 0.0 / []). With n == 1 it is one object, taken from the FIRST prompt of a batch (as SGLang
  does). Sandbox limits (400 errors): `n` must be 1, `stream` must be false, no logprobs.
  **Chat template**: the byte-level target has none; a chat prompt is the messages' text contents
  joined with "\n" (a single message: exactly its content, so a one-message chat request and
  `/v1/completions` or `/generate` with that text decode the same tokens). No role markers.
- `GET /metrics` only with `--enable-metrics` (404 otherwise, as SGLang, which mounts
  prometheus_client's ASGI app then): Prometheus text format 0.0.4 with SGLang's metric names,
  types and labels (see `workbench.sandbox.srt.observability.metrics_collector`).
- `GET|POST /flush_cache`: resets the scheduler's accept-length counters (the lifetime totals behind
  `/server_info`'s `avg_spec_accept_length` too) when idle; 400 while a request runs.

Start-up and failure, as SGLang 0.5.23: the models load, then the warm-up request (SGLang's:
"The capital city of France is", 8 greedy tokens), then "The server is fired up and ready to
roll!" and /health 200. An exception in the scheduler, while it loads or while it runs any
request (the warm-up included), is logged as "Scheduler hit an exception: <traceback>" and
SIGQUITs the launcher, which logs "Received sigquit from a child process. It usually means the
child failed." (while loading) or "SIGQUIT received. signum=None, frame=None. It usually means
one child failed." (once serving) and kills the process: exit status -9, never a server left
answering 503.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from typing import Any, Dict, List, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from workbench.sandbox import __version__
from workbench.sandbox.srt.utils.common import get_exception_traceback, kill_process_tree

logger = logging.getLogger(__name__)


class _GlobalState:
    def __init__(self) -> None:
        self.server_args = None
        self.scheduler = None
        self.tp_ranks = None  # TP > 1: the rank processes (tp_ranks.TpRanks), which stand in for the scheduler
        self.ready = False
        self.phase = "launch"  # "running" once the models are loaded (SGLang: the tokenizer loop is up)
        self.scheduler_died = False
        self.startup_time = time.time()
        self.model_config: Dict[str, Any] = {}


_global_state = _GlobalState()
app = FastAPI()


@app.middleware("http")
async def authentication(request: Request, call_next):
    """SGLang 0.5.23 ``add_api_key_middleware`` (srt/utils/common.py), installed when the server
    has an ``--api-key``: OPTIONS, ``/health*`` and ``/metrics`` pass; every other request needs
    ``Authorization: Bearer <api key>`` (the admin key is accepted too), else 401
    ``{"error": "Unauthorized"}``."""
    args = _global_state.server_args
    key = getattr(args, "api_key", None)
    if not key or request.method == "OPTIONS" or request.url.path.startswith(("/health", "/metrics")):
        return await call_next(request)
    given = request.headers.get("Authorization")
    admin = getattr(args, "admin_api_key", None)
    if given != "Bearer " + key and not (admin and given == "Bearer " + admin):
        return JSONResponse(content={"error": "Unauthorized"}, status_code=401)
    return await call_next(request)


def encode(text: str) -> List[int]:
    """Byte-level tokenizer: UTF-8 bytes -> ids 0..255."""
    return list(text.encode("utf-8"))


def decode(ids: List[int]) -> str:
    """ids -> text (invalid UTF-8 sequences replaced)."""
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def _not_ready() -> Optional[Response]:
    if not _global_state.ready:
        return Response(status_code=503)
    return None


#: SGLang 0.5.23 http_server.py: ``HEALTH_CHECK_TIMEOUT = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))``
#: (read at import there; per check here, so a test can set it in the server's environment).
DEFAULT_HEALTH_CHECK_TIMEOUT = 20
#: How often the check looks for scheduler progress. SGLang sleeps 1 s between looks (so it never
#: answers 200 in under 1 s); the sandbox looks more often, and answers 503 only after the full wait.
HEALTH_POLL_S = 0.05


def _health_check_timeout() -> float:
    raw = os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "").strip()
    try:
        return float(int(raw)) if raw else float(DEFAULT_HEALTH_CHECK_TIMEOUT)
    except ValueError:
        return float(DEFAULT_HEALTH_CHECK_TIMEOUT)


def _health_generation_enabled() -> bool:
    raw = os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "").strip().lower()
    return raw not in ("0", "false", "no", "off")  # srt/environ.py: EnvBool(True)


def _health_generate_once(scheduler) -> None:
    """The health check's 1-token request (SGLang: ``input_ids=[0]``, greedy, ``log_metrics=False``:
    not counted in the metrics). In a thread of its own: a stalled scheduler blocks it, not the
    event loop."""
    from workbench.sandbox.srt.managers.scheduler import SamplingParams

    try:
        scheduler.generate([0], SamplingParams(max_new_tokens=1, temperature=0), decode)
    except Exception as exc:  # the scheduler's failure path (exception_hook) has already run
        logger.error(f"health check request failed: {type(exc).__name__}: {exc}")


@app.get("/health")
@app.get("/health_generate")
async def health_generate(request: Request) -> Response:
    """SGLang 0.5.23 ``health_generate`` (module docstring): 503 while starting; 200 for ``/health``
    when ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` is off; else a 1-token generation, 200 once
    the scheduler produced output after the check began, 503 (and SGLang's error line) when it did
    not within ``SGLANG_HEALTH_CHECK_TIMEOUT`` seconds."""
    import asyncio

    if (r := _not_ready()) is not None:
        return r
    if request.url.path == "/health" and not _health_generation_enabled():
        return Response(status_code=200)
    scheduler = _global_state.scheduler
    tic = time.time()
    threading.Thread(target=_health_generate_once, args=(scheduler,), daemon=True, name="health-check").start()
    wait = _health_check_timeout()
    while time.time() < tic + wait:
        await asyncio.sleep(HEALTH_POLL_S)
        if scheduler.last_receive_tstamp > tic:
            return Response(status_code=200)
    tic_time = time.strftime("%H:%M:%S", time.localtime(tic))
    last = time.strftime("%H:%M:%S", time.localtime(scheduler.last_receive_tstamp))
    logger.error(f"Health check failed. Server couldn't get a response from detokenizer for last {wait:g} seconds. "
                 f"tic start time: {tic_time}. last_heartbeat time: {last}")
    return Response(status_code=503)


@app.get("/get_model_info")
def get_model_info():
    """Deprecated alias of `/model_info` (logs a warning, as SGLang 0.5.23)."""
    logger.warning(
        "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
        "Please use '/model_info' instead."
    )
    return model_info()


@app.get("/model_info")
def model_info():
    """The TARGET model's info (nothing about the draft): path, architectures, model_type."""
    args = _global_state.server_args
    return {
        "model_path": args.model_path,
        "served_model_name": args.served_model_name,
        "tokenizer_path": args.tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": None,
        "tool_call_parser": None,
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": _global_state.model_config.get("model_type"),
        "architectures": _global_state.model_config.get("architectures"),
    }


@app.get("/get_server_info")
def get_server_info():
    """Deprecated alias of `/server_info` (logs a warning, as SGLang 0.5.23)."""
    logger.warning(
        "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
        "Please use '/server_info' instead."
    )
    return server_info()


@app.get("/server_info")
def server_info():
    """Every resolved server arg, `launch_command`, `version`, `internal_states` (per DP rank;
    `avg_spec_accept_length` absent until the first decode log tick)."""
    args = _global_state.server_args
    result = args.resolved_dict()
    result["launch_command"] = args.launch_command
    sched = _global_state.scheduler
    result["internal_states"] = sched.get_internal_state() if sched is not None else [{}]
    result["startup_time"] = _global_state.startup_time
    result["version"] = __version__
    result["frontend"] = "python"
    return result


def _sampling_params(raw: Optional[Dict[str, Any]]):
    from workbench.sandbox.srt.managers.scheduler import SamplingParams

    raw = dict(raw or {})
    stop = raw.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    max_new = raw.get("max_new_tokens", 128)
    temperature = raw.get("temperature", 1.0)
    if not isinstance(max_new, int) or max_new < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new!r}")
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature must be a non-negative number, got {temperature!r}")
    return SamplingParams(max_new_tokens=max_new, temperature=float(temperature), stop=list(stop))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message}, "object": "error", "message": message, "code": status})


@app.post("/generate")
async def generate(request: Request):
    """SGLang's native generate: returns `{"text", "output_ids", "meta_info"}` (a list for a batch)."""
    if (r := _not_ready()) is not None:
        return r
    body = await request.json()
    try:
        params = _sampling_params(body.get("sampling_params"))
        text = body.get("text")
        input_ids = body.get("input_ids")
        if (text is None) == (input_ids is None):
            raise ValueError("Either text or input_ids should be provided.")
        if text is not None:
            batch = isinstance(text, list)
            prompts = [encode(t) for t in (text if batch else [text])]
        else:
            batch = bool(input_ids) and isinstance(input_ids[0], list)
            prompts = [list(map(int, p)) for p in (input_ids if batch else [input_ids])]
    except (ValueError, TypeError, AttributeError) as e:
        return _error(400, str(e))

    results = []
    for ids in prompts:
        try:
            out = await _run_generate(ids, params)
        except ValueError as e:
            return _error(400, str(e))
        results.append({"text": out["text"], "output_ids": out["output_ids"], "meta_info": out["meta_info"]})
    return results if batch else results[0]


async def _run_generate(ids: List[int], params) -> Dict[str, Any]:
    """Run one request on the scheduler (in a worker thread), add `text`, and count it in the
    Prometheus counters when metrics are on (SGLang: `TokenizerManager.collect_metrics` ->
    `observe_one_finished_request`, for every request with `log_metrics=True`)."""
    import anyio

    out = await anyio.to_thread.run_sync(_global_state.scheduler.generate, ids, params, decode)
    out["text"] = decode(out["output_ids"])
    _observe_finished(out["meta_info"])
    return out


def _observe_finished(meta: Dict[str, Any]) -> None:
    collector = getattr(_global_state.scheduler, "metrics_collector", None)
    if collector is not None:
        collector.observe_one_finished_request(
            meta["prompt_tokens"], meta["completion_tokens"], meta["e2e_latency"],
            spec_verify_ct=meta.get("spec_verify_ct", 0), is_streaming=False)


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible endpoints (SGLang 0.5.23 srt/entrypoints/openai/)
# ---------------------------------------------------------------------------------------------

_SPEC_KEYS = (  # openai/utils.py spec_tokens_details_from_meta_info: metric_keys, in SpecTokensDetails order
    "spec_accept_rate", "spec_accept_length", "spec_cap_length", "spec_block_accept_length",
    "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct",
    "spec_correct_drafts_histogram", "spec_cap_lens_histogram",
)


def _openai_error(message: str, status: int = 400, err_type: str = "BadRequestError") -> JSONResponse:
    """SGLang's `ErrorResponse` (protocol.py) as `OpenAIServingBase.create_error_response` sends it."""
    return JSONResponse(status_code=status, content={"object": "error", "message": message, "type": err_type,
                                                     "param": None, "code": status})


def spec_tokens_details_from_meta_info(meta: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """`SpecTokensDetails` from a meta_info, or None when it has no spec key (SGLang 0.5.23
    openai/utils.py `spec_tokens_details_from_meta_info`: missing or falsy keys become 0 / 0.0 / [])."""
    if not any(k in meta for k in _SPEC_KEYS):
        return None
    out: Dict[str, Any] = {}
    for k in _SPEC_KEYS:
        default: Any = [] if k.endswith("histogram") else (0 if k.startswith(("spec_num", "spec_verify")) else 0.0)
        out[k] = meta.get(k) or default
    return out


def _usage(metas: List[Dict[str, Any]]) -> Dict[str, Any]:
    """`UsageProcessor.calculate_response_usage` (usage_processor.py), without cache report."""
    prompt = sum(m.get("prompt_tokens", 0) for m in metas)
    completion = sum(m.get("completion_tokens", 0) for m in metas)
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None}


def _finish(meta: Dict[str, Any]) -> tuple:
    reason = meta.get("finish_reason") or None
    return (reason["type"] if reason else None), (reason.get("matched") if reason else None)


def _sglext(request: Dict[str, Any], metas: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """Response-level `sglext` (only `spec_tokens_details` here), or None to leave the key out."""
    if not request.get("return_spec_tokens_details"):
        return None
    details = [d for d in (spec_tokens_details_from_meta_info(m) for m in metas) if d is not None]
    if not details:
        return None
    return {"spec_tokens_details": details[0]}  # n == 1: the first item's, as SGLang


def _openai_params(body: Dict[str, Any], max_tokens: Optional[int], prompt_len: int):
    """SamplingParams for an OpenAI request; `max_tokens` None -> up to the context length."""
    from workbench.sandbox.srt.managers.scheduler import SamplingParams

    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else temperature
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature < 0:
        raise ValueError(f"temperature must be a non-negative number, got {temperature!r}")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(x, str) for x in stop):
        raise ValueError("stop must be a string or a list of strings")
    if max_tokens is None:
        max_tokens = max(_global_state.scheduler.context_length - prompt_len, 0)
    return SamplingParams(max_new_tokens=max_tokens, temperature=float(temperature), stop=list(stop))


def _check_common(body: Any) -> Optional[str]:
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if body.get("n", 1) != 1:
        return "n > 1 is not supported by the sandbox (greedy decoding only)"
    if body.get("stream"):
        return "stream=true is not supported by the sandbox; send stream=false"
    if body.get("logprobs") not in (None, False, 0):
        return "logprobs are not supported by the sandbox"
    rs = body.get("return_spec_tokens_details", False)
    if not isinstance(rs, bool):
        return f"return_spec_tokens_details must be a boolean, got {rs!r}"
    return None


def _max_tokens(value: Any, name: str) -> Optional[int]:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be positive")
    return value


async def _json_body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as e:
        raise ValueError(f"the request body is not JSON: {e}") from e


@app.post("/v1/completions")
async def openai_v1_completions(request: Request):
    """OpenAI completions (SGLang: `OpenAIServingCompletion`; response as `_build_completion_response`)."""
    if (r := _not_ready()) is not None:
        return r
    try:
        body = await _json_body(request)
        if (msg := _check_common(body)) is not None:
            raise ValueError(msg)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompts = [encode(prompt)]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompts = [encode(p) for p in prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompts = [list(prompt)]
        elif isinstance(prompt, list) and prompt and all(
                isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            prompts = [list(p) for p in prompt]
        else:
            raise ValueError("prompt must be a string, a list of strings, a list of token ids or a list of lists "
                             "of token ids")
        max_tokens = _max_tokens(body.get("max_tokens", 16), "max_tokens")
        outs = []
        for ids in prompts:
            outs.append(await _run_generate(ids, _openai_params(body, max_tokens, len(ids))))
    except ValueError as e:
        return _openai_error(str(e))
    choices = []
    for i, (ids, out) in enumerate(zip(prompts, outs)):
        reason, matched = _finish(out["meta_info"])
        text = (decode(ids) + out["text"]) if body.get("echo") else out["text"]
        choices.append({"index": i, "text": text, "logprobs": None, "finish_reason": reason, "matched_stop": matched})
    metas = [o["meta_info"] for o in outs]
    response: Dict[str, Any] = {
        "id": metas[0]["id"], "object": "text_completion", "created": int(time.time()),
        "model": body.get("model", "default"), "choices": choices, "usage": _usage(metas),
        "metadata": {"weight_version": metas[0].get("weight_version", "default")},
    }
    if (ext := _sglext(body, metas)) is not None:
        response["sglext"] = ext
    return response


def chat_prompt(messages: Any) -> str:
    """The sandbox's chat template: the messages' text contents joined with "\n" (no role markers;
    the byte-level target has no chat template). Content may be a string or a list of
    `{"type": "text", "text": ...}` parts. Raises ValueError for anything else."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    texts = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a string 'role'")
        content = m.get("content")
        if content is None:
            continue
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                               and isinstance(p.get("text"), str) for p in content):
            texts.append("".join(p["text"] for p in content))
        else:
            raise ValueError(f"messages[{i}].content must be a string or a list of text parts (the sandbox has no "
                             "image or audio input)")
    return "\n".join(texts)


@app.post("/v1/chat/completions")
async def openai_v1_chat_completions(request: Request):
    """OpenAI chat completions (SGLang: `OpenAIServingChat`; response as `_build_chat_response`)."""
    if (r := _not_ready()) is not None:
        return r
    try:
        body = await _json_body(request)
        if (msg := _check_common(body)) is not None:
            raise ValueError(msg)
        ids = encode(chat_prompt(body.get("messages")))
        max_tokens = _max_tokens(body.get("max_completion_tokens"), "max_completion_tokens")
        if max_tokens is None:
            max_tokens = _max_tokens(body.get("max_tokens"), "max_tokens")
        out = await _run_generate(ids, _openai_params(body, max_tokens, len(ids)))
    except ValueError as e:
        return _openai_error(str(e))
    meta = out["meta_info"]
    reason, matched = _finish(meta)
    response: Dict[str, Any] = {
        "id": meta["id"], "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "default"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": out["text"], "reasoning_content": None},
                     "logprobs": None, "finish_reason": reason, "matched_stop": matched}],
        "usage": _usage([meta]),
        "metadata": {"weight_version": meta.get("weight_version", "default")},
    }
    if (ext := _sglext(body, [meta])) is not None:
        response["sglext"] = ext
    return response


@app.api_route("/flush_cache", methods=["GET", "POST"])
def flush_cache():
    """SGLang's `/flush_cache` texts and statuses; resets the scheduler's metrics counters when idle."""
    sched = _global_state.scheduler
    if sched is not None and sched.flush_cache():
        return Response(content="Cache flushed.\nPlease check backend logs for more details. (When there are running "
                                "or waiting requests, the operation will not be performed.)\n", status_code=200)
    return Response(content="Flush cache failed.\n", status_code=400)


def metrics_endpoint() -> Response:
    """`GET /metrics` (registered only with `--enable-metrics`): Prometheus text format 0.0.4."""
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

    collector = getattr(_global_state.scheduler, "metrics_collector", None)
    body = collector.render() if collector is not None else b""
    return Response(content=body, media_type=CONTENT_TYPE_PLAIN_0_0_4)


#: SGLang 0.5.23's start-up warm-up request (http_server.py `_execute_server_warmup`, lines
#: 2407-2455): POST /generate with this text, greedy, 8 new tokens. Its decode steps run the
#: draft, so a draft that cannot run kills the server at start-up, as in SGLang.
WARMUP_TEXT = "The capital city of France is"
WARMUP_MAX_NEW_TOKENS = 8


def _signal_parent() -> None:
    """The scheduler's `parent_process.send_signal(signal.SIGQUIT)` (SGLang 0.5.23 scheduler.py:6373).
    The sandbox's "scheduler process" is a thread of the server process, so the signal goes to the
    main thread, whose handler (installed by `launch_server`) stands for the launcher's."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGQUIT)


def _scheduler_hit_exception() -> None:
    """SGLang 0.5.23 `run_scheduler_process` on an exception (scheduler.py:6369-6373): log the
    traceback as "Scheduler hit an exception: ..." and SIGQUIT the parent, which kills the server.
    Called inside the `except` that caught it (the traceback is the one being handled)."""
    _global_state.scheduler_died = True
    logger.error(f"Scheduler hit an exception: {get_exception_traceback()}")
    _signal_parent()


def _sigquit_handler(signum, frame) -> None:
    """The launcher's SIGQUIT handler: SGLang 0.5.23 `launch_phase_sigquit_handler`
    (entrypoints/engine.py:1976-1980) while the models load, then the tokenizer manager's
    `running_phase_sigquit_handler` (tokenizer_manager.py:4072-4081; installed with
    `loop.add_signal_handler`, so it is called without arguments). Both log one line and
    `kill_process_tree(os.getpid())`: the server dies with SIGKILL."""
    if _global_state.phase == "launch":
        logger.error("Received sigquit from a child process. It usually means the child failed.")
    else:
        logger.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    kill_process_tree(os.getpid())


def _wait_to_be_killed(seconds: float = 30.0) -> None:
    """After SIGQUIT the main thread kills the process; should that not happen within
    ``seconds`` (a main thread that never runs Python code again), exit with status 1 so a
    server that failed never lingers with /health 503."""
    time.sleep(seconds)
    logger.error("the SIGQUIT handler did not stop the server; exiting with status 1")
    os._exit(1)


def load_and_warm_up(server_args) -> None:
    """Load the models (target, then draft), run SGLang's warm-up request, mark the server ready.

    Failures end the process as SGLang's do: an exception while loading (the scheduler
    process's init) or while the warm-up runs in the scheduler is logged as "Scheduler hit an
    exception: <traceback>" and SIGQUITs the launcher, whose handler logs its line and kills the
    process (exit status -9); a warm-up that fails otherwise logs "Initialization failed. warmup
    error: <traceback>" and kills it the same way (http_server.py:2536-2540)."""
    try:
        _load_and_warm_up(server_args)
    finally:
        # launch_server.main disabled the cyclic collector for the start-up's imports: what they
        # created lives as long as the process, so it is frozen (never scanned again), then the
        # collector serves requests as usual
        gc.freeze()
        gc.enable()


def _load_and_warm_up(server_args) -> None:
    import json

    from workbench.sandbox.srt.managers.scheduler import SamplingParams, Scheduler
    from workbench.sandbox.srt.startup import Startup, open_gpus

    import torch

    # batch-1 decoding of a tiny model gains nothing from more threads, and spinning OpenMP
    # workers on a shared machine slow every other process down
    torch.set_num_threads(int(os.environ.get("SANDBOX_TORCH_THREADS", "1")))
    ranks = _global_state.tp_ranks
    try:
        with open(os.path.join(server_args.model_path, "config.json")) as f:
            _global_state.model_config = json.load(f)
        if ranks is None:  # TP 1: the scheduler runs in this process (a thread)
            startup = Startup(server_args, 0, open_gpus())
            startup.init_parallel(lambda: None)
            scheduler = Scheduler(server_args, 0, startup)
    except Exception:  # the scheduler process's init failed (SGLang: run_scheduler_process)
        _scheduler_hit_exception()
        _wait_to_be_killed()
        return
    if ranks is not None:  # TP > 1: the rank processes load; rank 0 answers for them
        from workbench.sandbox.srt.managers.tp_ranks import RankDied

        try:
            ranks.wait_ready()
        except RankDied as e:  # SGLang's launcher: "Rank 0 scheduler is dead. ..." and the tree is killed
            logger.error(str(e))
            kill_process_tree(os.getpid())
            _wait_to_be_killed()
            return
        scheduler = ranks
    else:
        scheduler.exception_hook = _scheduler_hit_exception
    _global_state.scheduler = scheduler
    _global_state.phase = "running"
    try:
        params = SamplingParams(max_new_tokens=WARMUP_MAX_NEW_TOKENS, temperature=0)
        warm = scheduler.generate(encode(WARMUP_TEXT), params, decode)
    except Exception:
        if not _global_state.scheduler_died:  # a refusal outside the scheduler (e.g. --context-length too small)
            logger.error(f"Initialization failed. warmup error: {get_exception_traceback()}")
            kill_process_tree(os.getpid())
        _wait_to_be_killed()
        return
    _observe_finished(warm["meta_info"])  # SGLang's start-up warm-up is an HTTP /generate: it is counted
    _global_state.ready = True
    logger.info("The server is fired up and ready to roll!")


def _start_tp_ranks(server_args) -> None:
    """TP > 1: import torch and the models here, then fork the ranks and the detokenizer
    (``workbench.sandbox.srt.managers.tp_ranks``) while this process still has one thread."""
    import importlib

    from workbench.sandbox.srt.managers.tp_ranks import TpRanks

    # imported before the fork, so the ranks inherit them: torch and the models' modules
    importlib.import_module("torch")
    importlib.import_module("workbench.sandbox.srt.managers.scheduler")

    if threading.active_count() != 1:
        logger.warning(f"forking the TP ranks with {threading.active_count()} threads running")
    ranks = TpRanks(server_args)
    ranks.start()
    _global_state.tp_ranks = ranks


def launch_server(server_args) -> None:
    """Start uvicorn on host:port; load models in a background thread (503 until ready).

    Installs the SIGQUIT handler first (`_sigquit_handler`), as SGLang's launcher does before it
    starts its subprocesses: a failure while loading or serving kills the server (exit -9)."""
    import uvicorn

    _global_state.server_args = server_args
    signal.signal(signal.SIGQUIT, _sigquit_handler)
    if server_args.tp_size > 1:
        _start_tp_ranks(server_args)
    if getattr(server_args, "enable_metrics", False):
        app.add_api_route("/metrics", metrics_endpoint, methods=["GET"], include_in_schema=False)
    threading.Thread(target=load_and_warm_up, args=(server_args,), daemon=True, name="model-loader").start()
    config = uvicorn.Config(
        app,
        host=server_args.host,
        port=server_args.port,
        log_config=None,  # uvicorn's loggers propagate to the SGLang-format root handler
        access_log=False,  # no access lines: they would not match SGLang's log format
        log_level=server_args.log_level,
        timeout_keep_alive=5,
    )
    uvicorn.Server(config).run()
