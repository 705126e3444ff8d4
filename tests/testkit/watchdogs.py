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


def kill_all(pids: list[int]) -> list[int]:
    """SIGKILL each of ``pids`` (one already gone is skipped); returns ``pids``."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return pids


def stop_watchdogs_under(state_prefix: str) -> list[int]:
    """SIGKILL each watchdog of :func:`watchdog_pids`; returns their pids."""
    return kill_all(watchdog_pids(state_prefix))


def driver_until_ready(proc, stage: str, *, err_filter=None) -> dict:
    """Read what ``tests/testkit/watchdog_driver.py`` (``proc``, stdout a text pipe) says until its
    ``ready`` line: ``{"run_id", "watchdog_pid", "fix_pid"}`` (those it said). Raises
    ``AssertionError`` with its stderr (lines kept by ``err_filter``, last 60) when it ended before ``stage``."""
    said: dict = {}
    for line in proc.stdout:
        if line.startswith("run "):
            _, said["run_id"], _, pid = line.split()
            said["watchdog_pid"] = int(pid)
        elif line.startswith("fix pid "):
            said["fix_pid"] = int(line.split()[-1])
        elif line.strip() == "ready":
            return said
    proc.wait(timeout=10)
    err = [line for line in proc.stderr.read().splitlines() if err_filter is None or err_filter(line)]
    raise AssertionError(f"the driver ended before {stage}: " + "\n".join(err[-60:]))
