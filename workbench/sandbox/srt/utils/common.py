"""Logging set-up in SGLang's format (mirrors SGLang 0.5.23, srt/utils/common.py
`configure_logger`): `[%Y-%m-%d %H:%M:%S{.mmm if SGLANG_LOG_MS}{rank tags}] message` on stderr,
no level or logger name; `SGLANG_LOGGING_CONFIG_PATH` replaces the format entirely. Also the
two helpers of SGLang's failure path: `get_exception_traceback` and `kill_process_tree`.
"""

from __future__ import annotations

import json
import logging
import logging.config
import os
import sys


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def configure_logger(server_args, prefix: str = "") -> None:
    """Install the root handler. `prefix` holds the rank tags (" TP1", ...; empty for TP=1)."""
    config_path = os.getenv("SGLANG_LOGGING_CONFIG_PATH")
    if config_path:
        if not os.path.exists(config_path):
            raise Exception(
                "Setting SGLANG_LOGGING_CONFIG_PATH from env with "
                f"{config_path} but it does not exist!"
            )
        with open(config_path, encoding="utf-8") as file:
            logging.config.dictConfig(json.load(file))
        return
    maybe_ms = ".%(msecs)03d" if _env_flag("SGLANG_LOG_MS") else ""
    fmt = f"[%(asctime)s{maybe_ms}{prefix}] %(message)s"
    logging.basicConfig(
        level=getattr(logging, server_args.log_level.upper()),
        format=fmt,
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
        stream=sys.stderr,
    )
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def get_exception_traceback() -> str:
    """The exception being handled, formatted as Python prints it (mirrors SGLang 0.5.23,
    sglang/utils.py `get_exception_traceback`, lines 119-122)."""
    import traceback

    etype, value, tb = sys.exc_info()
    return "".join(traceback.format_exception(etype, value, tb))


def _children(pid: int) -> list:
    """The pids whose parent is ``pid`` (``/proc/PID/task/*/children``; empty when unreadable)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def kill_process_tree(parent_pid: int) -> None:
    """Kill ``parent_pid``'s descendants, then ``parent_pid`` itself, with SIGKILL (mirrors SGLang
    0.5.23, srt/utils/common.py `kill_process_tree`, lines 2507-2564: children first, via psutil's
    ``children(recursive=True)``; here from ``/proc``).

    Logs SGLang's "kill_process_tree called: ..." line, flushes the log handlers (SIGKILL gives
    them no later chance) and kills: called for this process it does not return, and the
    process's exit status is -9 (137 in a shell), as SGLang's launcher's is."""
    import signal

    logger = logging.getLogger(__name__)
    logger.info(f"kill_process_tree called: parent_pid={parent_pid}, include_parent=True, pid={os.getpid()}")
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    sys.stdout.flush()
    todo, seen = [parent_pid], []
    while todo:
        pid = todo.pop()
        for child in _children(pid):
            if child not in seen:
                seen.append(child)
                todo.append(child)
    for child in seen:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            continue
    os.kill(parent_pid, signal.SIGKILL)
