"""Launch the sandbox server: `python -m workbench.sandbox.launch_server --model-path DIR ...`.

Mirrors SGLang 0.5.23, `python -m sglang.launch_server` (srt/entrypoints/http_server.py
`launch_server`): same flag names (see `workbench.sandbox.srt.server_args`), logs on stderr in
SGLang's format, `server_args=ServerArgs(...)` line first. Unknown SGLang flags are accepted and
logged as ignored. Bad values exit with status 2 and a one-line `error:` message; so does a
missing module of the `sandbox` extra (torch, transformers, safetensors, FastAPI, uvicorn, setproctitle), checked
before anything imports them. A model that fails to load, or a scheduler that fails on a request
(the start-up warm-up included), ends the process as SGLang's launcher ends: the exception in the
log, then SIGKILL (exit status -9; see `workbench.sandbox.srt.entrypoints.http_server`).
"""

from __future__ import annotations

import gc
import logging
import sys


def main(argv=None) -> int:
    """Parse flags, configure logging, serve until killed. Returns the exit status: 2 for a bad
    flag value or a missing module of the ``sandbox`` extra (one ``launch_server: error:`` line on
    stderr, no traceback).

    No cyclic garbage collection while the server starts: importing torch, FastAPI and the models
    allocates hundreds of thousands of objects that live as long as the process, and the
    collector's passes over them cost ~13 % of a start's CPU (2.41 -> 2.09 s here). The model
    loader turns it back on once the models are loaded, after freezing what the start-up created
    (``load_and_warm_up``); returning from here turns it back on in any case."""
    gc.disable()
    try:
        return _serve(argv)
    finally:
        gc.enable()


def _serve(argv) -> int:
    from workbench.sandbox.extra import missing_message

    missing = missing_message()
    if missing is not None:
        print(f"launch_server: error: {missing}", file=sys.stderr, flush=True)
        return 2
    from workbench.sandbox.srt.server_args import ServerArgs, ServerArgsError, prepare_server_args
    from workbench.sandbox.srt.utils.common import configure_logger

    argv = sys.argv[1:] if argv is None else argv
    configure_logger(ServerArgs(model_path=""))
    logger = logging.getLogger("workbench.sandbox.launch_server")
    try:
        server_args = prepare_server_args(argv)
    except ServerArgsError as e:
        print(f"launch_server: error: {e}", file=sys.stderr, flush=True)
        return 2
    configure_logger(server_args)
    logger.info(f"server_args={server_args!r}")
    for flag in server_args.ignored_args:
        logger.warning(f"Ignoring SGLang flag not implemented by the sandbox: {flag}")

    from workbench.sandbox.srt.entrypoints.http_server import launch_server

    launch_server(server_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
