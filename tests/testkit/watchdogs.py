"""The run watchdogs (``workbench.session.watchdog``) the tests started, found in ``/proc``."""

from __future__ import annotations

import os
import signal


def watchdog_pids(state_prefix: str) -> list[int]:
    """Live watchdog processes (``python3 -I -S - start STATE_DIR CONFIG``) whose state dir starts
    with ``state_prefix``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(") ", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # exited while we looked, or not ours to read
        if state != "Z" and argv[1:5] == ["-I", "-S", "-", "start"] and len(argv) > 5 and \
                argv[5].startswith(state_prefix):
            out.append(int(name))
    return out


def stop_watchdogs_under(state_prefix: str) -> list[int]:
    """SIGKILL each watchdog of :func:`watchdog_pids`; returns their pids."""
    pids = watchdog_pids(state_prefix)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return pids
