"""HTTP endpoints of the sandbox server (FastAPI + uvicorn).

Mirrors SGLang 0.5.23, srt/entrypoints/http_server.py: `/health`, `/health_generate` (503
while starting; a 1-token generation once up), `/model_info` and `/server_info` (plus the
deprecated `/get_model_info`, `/get_server_info` that log a warning), `POST /generate`
(`text` str|list or `input_ids`, `sampling_params`; `meta_info` with the spec fields only when
`spec_verify_ct > 0`). Tokenizer: UTF-8 bytes (token id = byte value).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from workbench.sandbox import __version__

logger = logging.getLogger(__name__)


class _GlobalState:
    def __init__(self) -> None:
        self.server_args = None
        self.scheduler = None
        self.ready = False
        self.startup_error: Optional[str] = None
        self.startup_time = time.time()
        self.model_config: Dict[str, Any] = {}


_global_state = _GlobalState()
app = FastAPI()


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


@app.get("/health")
def health() -> Response:
    """200 once the models are loaded and warmed up, 503 before (SGLang: `/health`)."""
    return _not_ready() or Response(status_code=200)


@app.get("/health_generate")
def health_generate() -> Response:
    """503 while starting; else runs a 1-token generation (SGLang: `/health_generate`)."""
    if (r := _not_ready()) is not None:
        return r
    from workbench.sandbox.srt.managers.scheduler import SamplingParams

    _global_state.scheduler.generate(encode("\n"), SamplingParams(max_new_tokens=1, temperature=0), decode)
    return Response(status_code=200)


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

    import anyio

    results = []
    for ids in prompts:
        try:
            out = await anyio.to_thread.run_sync(_global_state.scheduler.generate, ids, params, decode)
        except ValueError as e:
            return _error(400, str(e))
        out["text"] = decode(out["output_ids"])
        results.append({"text": out["text"], "output_ids": out["output_ids"], "meta_info": out["meta_info"]})
    return results if batch else results[0]


def load_and_warm_up(server_args) -> None:
    """Load the models (target, then draft), run a warm-up request, mark the server ready."""
    import json
    import os

    from workbench.sandbox.srt.managers.scheduler import SamplingParams, Scheduler

    import torch

    # batch-1 decoding of a tiny model gains nothing from more threads, and spinning OpenMP
    # workers on a shared machine slow every other process down
    torch.set_num_threads(int(os.environ.get("SANDBOX_TORCH_THREADS", "1")))
    try:
        with open(os.path.join(server_args.model_path, "config.json")) as f:
            _global_state.model_config = json.load(f)
        _global_state.scheduler = Scheduler(server_args)
        _global_state.scheduler.generate(encode("The"), SamplingParams(max_new_tokens=1, temperature=0), decode)
        _global_state.ready = True
        logger.info("The server is fired up and ready to roll!")
    except Exception as e:  # report and stop the process: a server that cannot load must exit
        _global_state.startup_error = f"{type(e).__name__}: {e}"
        logger.exception("Server failed to start")
        os._exit(1)


def launch_server(server_args) -> None:
    """Start uvicorn on host:port; load models in a background thread (503 until ready)."""
    import uvicorn

    _global_state.server_args = server_args
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
