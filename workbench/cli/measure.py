"""``workbench measure``: acceptance of a running server (SGLang or vLLM) from every source it offers.

    workbench measure [--host SPEC] [--port N] [--prompts chat|code|math|default|FILE] [--num-prompts N]
                      [--max-new-tokens N] [--warmup K] [--sources generate,openai,server_info,metrics]
                      [--openai-endpoint completions|chat] [--flush-cache] [--timeout S] [--start-timeout S]
                      [--no-progress] [--json]

Prints one row per source (accept length as SGLang defines it, accepted drafts per verify step,
the EAGLE papers' τ, accept rate, tokens/s), the per-position acceptance and histogram, and why
a source was unavailable (``workbench.measure`` has the definitions and their SGLang sources).
On a vLLM server (detected from the server: no SGLang ``/server_info``, ``/v1/models`` owned by
``vllm``, ``vllm:`` metrics) the rows come from vLLM's own sources (``workbench.measure.vllm``):
``openai`` from ``/v1/completions`` with its per-request ``metrics.speculative_decoding`` (a server
started with ``--per-request-spec-decode-metrics summary``), ``metrics`` from the
``vllm:spec_decode_*`` counter deltas; accept length = 1 + accepted / drafts (bonus included) and
per-position acceptance as on SGLang; ``generate`` and ``server_info`` are listed unavailable, with why.
Without ``--port``: the server on SGLang's default port 30000 or vLLM's 8000, whichever runs
(30000 when neither; name one when both run). Over SSH (``--host``) the HTTP goes through a port forward on the box's connection. ``--timeout S``:
seconds for each request (status reads and the readiness check included) and for opening the port
forward (default 300). Before measuring, the server must generate (a 1-token check:
``/health_generate``, else ``/generate``): one still starting (503, or refusing connections while a
server process for the port runs) is waited for up to ``--start-timeout S`` (default 600), with one
line on stderr; one whose HTTP answers but whose generation does not return within ``--timeout`` is
reported as stuck (exit 2).
Exit codes: 0 measured, 1 ``acceptance-collapsed`` fired on a source (accept length ≤ 1.05 over
≥ 20 verify steps), 2 the measurement could not run (bad input, unreachable box or server), 130
interrupted (Ctrl-C) before it was done.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from workbench.cli.argtypes import non_negative_int, non_negative_seconds, positive_int
from workbench.cli.common import (
    CliError, ExitCode, add_box_options, add_json_option, add_port_option, open_box, set_command,
)

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench measure``: see the module docstring. Raises :class:`CliError` (an unknown
    source, an unusable prompt set, a measurement that could not be made) and what connecting
    raises."""
    from remote.errors import RemoteError
    from workbench.measure import SOURCES, MeasureError, format_table, measure
    from workbench.measure.prompts import load_prompts

    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        raise CliError(f"--sources: unknown source {', '.join(unknown) or '(none given)'}; choose from "
                       f"{','.join(SOURCES)}")
    try:
        prompts = load_prompts(args.prompts)
    except ValueError as exc:  # PromptSetError among them
        raise CliError(str(exc)) from exc
    with open_box(args) as box:
        try:
            args.port = _default_port(box, args.port, timeout=args.timeout)
            url = box.url(args.port, timeout=args.timeout)
            api_key = _server_api_key(box, args.port, timeout=args.timeout)
            m = measure(url, prompts, api_key=api_key, sources=sources, num_prompts=args.num_prompts,
                        max_new_tokens=args.max_new_tokens, warmup=args.warmup, openai_endpoint=args.openai_endpoint,
                        flush_cache_after_warmup=args.flush_cache, timeout=args.timeout,
                        progress=False if args.no_progress else None, start_timeout=args.start_timeout,
                        alive=_server_alive(box, args.port, timeout=args.timeout))
        except (MeasureError, RemoteError, ValueError) as exc:
            longer = "; give a longer one with --timeout S" if "longer per-request time-out" in str(exc) else ""
            raise CliError(str(exc) + longer) from exc
        except KeyboardInterrupt as exc:
            # Ctrl-C (and SIGTERM/SIGHUP: workbench.cli main) is an interrupt: exit 130 like every command
            raise CliError("interrupted; nothing was measured (measure changes nothing on the box)",
                           ExitCode.INTERRUPTED) from exc
    m.prompt_set = args.prompts
    if box.name != "local":
        m.notes.append(f"box {box.name}: port {args.port} reached through an SSH port forward ({url})")
    findings = m.findings()
    print(json.dumps(m.to_dict(), indent=2, default=str) if args.json else format_table(m))
    return ExitCode.FAILURE if findings else ExitCode.OK


def _default_port(box: Any, port: int | None, *, timeout: float) -> int:
    """``port`` when given; else the engines' default port a server runs on: SGLang's 30000
    (``workbench.engine.launch.DEFAULT_PORT``) or vLLM's 8000 (``VLLM_DEFAULT_PORT``; vLLM 0.32.0
    ``FrontendArgs.port``), whichever one of them a server process on ``box`` listens on (by its
    command line or its listening socket: ``Box.find_servers``); 30000 when neither runs (or the
    process table cannot be read). Raises :class:`CliError` when servers run on both: name one."""
    from remote.errors import RemoteError
    from workbench.engine.launch import DEFAULT_PORT, VLLM_DEFAULT_PORT
    from workbench.engine.locate import running_servers

    if port is not None:
        return port
    try:
        running = {s.port for s in running_servers(box, timeout=timeout)}
    except RemoteError:
        return DEFAULT_PORT
    both = [p for p in (DEFAULT_PORT, VLLM_DEFAULT_PORT) if p in running]
    if len(both) == 2:
        raise CliError(f"servers run on both SGLang's default port {DEFAULT_PORT} and vLLM's {VLLM_DEFAULT_PORT} on "
                       f"{box.name}: pass --port to say which to measure")
    return both[0] if both else DEFAULT_PORT


def _server_alive(box: Any, port: int, *, timeout: float):
    """A callable saying whether a server process for ``port`` (SGLang or the sandbox, by its
    command line; no ``--port`` means SGLang's default 30000) still runs on ``box``, or ``None``
    when none runs now (then a refused connection is not waited for). Processes that cannot be
    listed leave it ``None`` too."""
    from remote.errors import RemoteError
    from workbench.engine.launch import DEFAULT_PORT
    from workbench.engine.locate import running_servers

    try:
        pids = [s.pid for s in running_servers(box, timeout=timeout)
                if s.port == port or (s.port is None and port == DEFAULT_PORT)]
    except RemoteError:
        return None
    if not pids:
        return None
    return lambda: any(box.is_alive(pid, timeout=timeout) for pid in pids)
def _server_api_key(box: Any, port: int, *, timeout: float) -> str | None:
    """The ``--api-key`` of the SGLang server listening on ``port`` of ``box`` (its command line,
    from the process table), learned by the redactor so it is never printed; ``None`` when the
    server has none or is not found there (an SGLang behind a proxy: then no header is sent)."""
    from workbench.engine.launch import LaunchCommand
    from workbench.engine.locate import is_launch_argv
    from workbench.errors import LaunchCommandError
    from workbench.redact import REDACTOR

    for server in box.find_servers(timeout=timeout):
        if server.port != port or not is_launch_argv(server.argv):
            continue
        try:
            launch = LaunchCommand.parse(list(server.argv))
        except LaunchCommandError:
            continue
        REDACTOR.learn_launch(launch)
        key = launch.get("--api-key")
        return key if isinstance(key, str) and key else None
    return None


def add_parser(sub: Any) -> None:
    """Register ``workbench measure`` on the CLI's subparsers (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("measure", help="accept length from /generate, the OpenAI endpoints, /server_info and "
                                       "/metrics (SGLang; vLLM: /v1/completions and its counters), warm-up excluded",
                       description=__doc__.split("\n\n")[0])
    add_box_options(p, timeout=300.0, timeout_help="each request to the server (and opening the port forward)")
    add_port_option(p, "the server's port on the box (default: SGLang's 30000 or vLLM's 8000, whichever a running "
                       "server listens on; 30000 when neither)")
    p.add_argument("--prompts", default="default",
                   help="chat, code, math, default (built in; see workbench/measure/prompt_sets/README.md) or a JSONL "
                        "file "
                        "with a 'text' per line")
    p.add_argument("--num-prompts", type=positive_int, metavar="N", help="use the first N prompts of the set "
                                                                         "(default: all)")
    p.add_argument("--max-new-tokens", type=positive_int, default=128, metavar="N",
                   help="tokens per request (default 128)")
    p.add_argument("--warmup", type=non_negative_int, default=1, metavar="K",
                   help="requests per request source sent first and not counted (default 1)")
    p.add_argument("--sources", default="generate,openai,server_info,metrics",
                   help="comma-separated: generate, openai, server_info, metrics (default: all)")
    p.add_argument("--openai-endpoint", choices=["completions", "chat"], default="completions",
                   help="the OpenAI endpoint for the openai source (default completions: the same text as /generate)")
    p.add_argument("--flush-cache", action="store_true",
                   help="POST /flush_cache after the warm-up so /server_info's average covers only the measured "
                        "requests (also empties the server's prefix cache)")
    p.add_argument("--start-timeout", type=non_negative_seconds, default=600.0, metavar="S",
                   help="seconds to wait for a server that is still starting (503, or refusing connections while "
                        "its process runs) before measuring (default 600; 0: do not wait)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_option(p, "the whole measurement")
    set_command(p, _run)
