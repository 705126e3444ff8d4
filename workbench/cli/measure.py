"""``workbench measure``: acceptance of a running server from every source it offers.

    workbench measure [--host SPEC] [--port N] [--prompts chat|code|math|default|FILE] [--num-prompts N]
                      [--max-new-tokens N] [--warmup K] [--sources generate,openai,server_info,metrics]
                      [--openai-endpoint completions|chat] [--flush-cache] [--timeout S] [--no-progress] [--json]

Prints one row per source (accept length as SGLang defines it, accepted drafts per verify step,
the EAGLE papers' τ, accept rate, tokens/s), the per-position acceptance and histogram, and why
a source was unavailable (``workbench.measure`` has the definitions and their SGLang sources).
Over SSH (``--host``) the HTTP goes through a port forward on the box's connection.
Exit codes: 0 measured, 1 ``acceptance-collapsed`` fired on a source (accept length ≤ 1.05 over
≥ 20 verify steps), 2 the measurement could not run (bad input, unreachable box or server).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_measure_parser"]

PROG = "workbench measure"


def _int(args: argparse.Namespace, name: str, low: int) -> int | None:
    """An integer option given as text: ``None`` when absent; raises ValueError with one line."""
    text = getattr(args, name)
    if text is None:
        return None
    flag = "--" + name.replace("_", "-")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{flag} must be an integer >= {low}, got {text!r}") from None
    if value < low:
        raise ValueError(f"{flag} must be an integer >= {low}, got {value}")
    return value


def _run(args: argparse.Namespace) -> int:
    from remote import connect
    from remote.errors import RemoteError
    from workbench.measure import SOURCES, MeasureError, PromptSetError, format_table, measure
    from workbench.measure.prompts import load_prompts

    try:
        port = _int(args, "port", 1)
        if port > 65535:
            raise ValueError(f"--port must be a TCP port in 1..65535, got {port}")
        num_prompts = _int(args, "num_prompts", 1)
        max_new_tokens = _int(args, "max_new_tokens", 1)
        warmup = _int(args, "warmup", 0)
        try:
            timeout = float(args.timeout)
        except ValueError:
            raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout!r}") from None
        if not timeout > 0:
            raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout!r}")
        sources = [s.strip() for s in args.sources.split(",") if s.strip()]
        unknown = [s for s in sources if s not in SOURCES]
        if unknown or not sources:
            raise ValueError(f"--sources: unknown source {', '.join(unknown) or '(none given)'}; choose from "
                             f"{','.join(SOURCES)}")
        prompts = load_prompts(args.prompts)
    except (ValueError, PromptSetError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        box = connect(args.host)
    except RemoteError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        url = box.url(port)
        m = measure(url, prompts, sources=sources, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                    warmup=warmup, openai_endpoint=args.openai_endpoint, flush_cache_after_warmup=args.flush_cache,
                    timeout=timeout, progress=False if args.no_progress else None)
    except (MeasureError, RemoteError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 2
    finally:
        box.close()
    m.prompt_set = args.prompts
    if box.name != "local":
        m.notes.append(f"box {box.name}: port {port} reached through an SSH port forward ({url})")
    findings = m.findings()
    print(json.dumps(m.to_dict(), indent=2, default=str) if args.json else format_table(m))
    return 1 if findings else 0


def add_measure_parser(sub: Any) -> None:
    """Register ``workbench measure`` on the CLI's subparsers (``sub`` from ``add_subparsers``)."""
    p = sub.add_parser("measure", help="accept length from /generate, the OpenAI endpoints, /server_info and "
                                       "/metrics, warm-up excluded",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="local", help="the box: local, an ~/.ssh/config alias, user@host[:port]")
    p.add_argument("--port", default="30000", help="the server's port on the box (default 30000)")
    p.add_argument("--prompts", default="default",
                   help="chat, code, math, default (built in; see workbench/prompts/README.md) or a JSONL file "
                        "with a 'text' per line")
    p.add_argument("--num-prompts", help="use the first N prompts of the set (default: all)")
    p.add_argument("--max-new-tokens", default="128", help="tokens per request (default 128)")
    p.add_argument("--warmup", default="1", help="requests per request source sent first and not counted (default 1)")
    p.add_argument("--sources", default="generate,openai,server_info,metrics",
                   help="comma-separated: generate, openai, server_info, metrics (default: all)")
    p.add_argument("--openai-endpoint", choices=["completions", "chat"], default="completions",
                   help="the OpenAI endpoint for the openai source (default completions: the same text as /generate)")
    p.add_argument("--flush-cache", action="store_true",
                   help="POST /flush_cache after the warm-up so /server_info's average covers only the measured "
                        "requests (also empties the server's prefix cache)")
    p.add_argument("--timeout", default="300", help="seconds per request (default 300)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the whole measurement as JSON")
    p.set_defaults(func=_run)
