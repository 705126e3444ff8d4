"""Facts about a server the box console shows (moved out of :mod:`workbench.lab.console`, which
re-exports them): its readiness (:func:`server_health`), how long it has run (:func:`server_uptime`),
and a command line cut to fit (:func:`shorten_command`)."""

from __future__ import annotations

import time
from typing import Any, Optional

__all__ = ["server_health", "server_uptime", "shorten_command", "COMMAND_CHARS"]


def server_health(box: Any, port: int, *, timeout: float = 3.0):
    """``GET /health`` on the server at ``port`` of ``box`` (through ``box.url``: a port forward
    over SSH), at most ``timeout`` seconds, classified by :func:`remote.readiness.classify`
    (``ready`` / ``starting`` / ``stuck`` / ``error``)."""
    import httpx

    from remote.readiness import classify

    base = box.url(port)
    t0 = time.monotonic()
    try:
        with httpx.Client(trust_env=False, timeout=timeout) as client:
            r = client.get(base.rstrip("/") + "/health")
        return classify("/health", status=r.status_code, elapsed_s=time.monotonic() - t0, timeout=timeout)
    except httpx.HTTPError as exc:
        return classify("/health", error=exc, elapsed_s=time.monotonic() - t0, timeout=timeout)


def server_uptime(box: Any, pid: int, *, timeout: float = 10.0) -> Optional[int]:
    """Seconds process ``pid`` has run on ``box`` (``ps -o etimes= -p PID``); ``None`` when gone."""
    res = box.run(["ps", "-o", "etimes=", "-p", str(pid)], check=False, timeout=timeout)
    text = res.stdout.strip()
    return int(text) if res.exit_code == 0 and text.isdigit() else None


#: Characters of a command line the Journal shows at most (the rest is said with an ellipsis).
COMMAND_CHARS = 400


def shorten_command(argv, limit: int = COMMAND_CHARS) -> str:
    """``argv`` joined with spaces, at most about ``limit`` characters: a longer one is cut after
    the last whole argument that fits and ends with ``" … (N more characters)"`` — never silently,
    never in the middle of an argument (a first argument longer than ``limit`` is cut with ``…``)."""
    text = " ".join(str(a) for a in argv)
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit + 1)
    cut = cut if cut > 0 else limit
    head = text[:cut].rstrip()
    return f"{head}{'' if text[cut:cut + 1] == ' ' else '…'} … ({len(text) - len(head)} more characters)"
