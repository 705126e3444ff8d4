"""argparse value types shared by the ``workbench`` commands: each returns the parsed value or
raises ``argparse.ArgumentTypeError`` saying what was expected and what was given, so argparse
prints a usage error naming the option (``argument --port: ...``) and exits 2."""

from __future__ import annotations

import argparse

__all__ = ["positive_int", "non_negative_int", "positive_seconds", "non_negative_seconds", "watchdog_seconds",
           "tcp_port", "layer_ids", "MAX_SECONDS"]

#: The longest time-out taken, in seconds (11.6 days): the waits underneath (``select``/``poll``,
#: Paramiko's channel time-outs) take milliseconds in a C int and overflow above about 2.1e6 s.
MAX_SECONDS = 1_000_000.0


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """A number of seconds > 0 and at most :data:`MAX_SECONDS` (``inf`` and ``nan`` refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    if not value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:g} seconds, got {text}")
    return value


def non_negative_seconds(text: str) -> float:
    """A number of seconds >= 0 (0: do not wait) and at most :data:`MAX_SECONDS` (``nan``, ``inf``
    and negative values refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value == 0:
        return 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number of seconds, got {text}")
    return positive_seconds(text)


def watchdog_seconds(text: str) -> float:
    """A watchdog's silence (``--watchdog-after``): 0 (no watchdog) or a number of seconds from
    ``workbench.session.watchdog.MIN_WATCHDOG_AFTER_S`` to :data:`MAX_SECONDS`."""
    from workbench.session.watchdog import WATCHDOG_AFTER_EXPECTED, watchdog_after_ok

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not watchdog_after_ok(value):
        raise argparse.ArgumentTypeError(f"must be {WATCHDOG_AFTER_EXPECTED}, got {text}")
    return value


def tcp_port(text: str) -> int:
    """A TCP port number, 1..65535 (0, "any free port" to ``bind``, names no server)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a TCP port number (an integer 1-65535), got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be >= 1 and <= 65535 (a TCP port number), got {value}")
    return value


def layer_ids(text: str) -> list[int]:
    """Comma-separated non-negative layer ids: ``1,3,6`` -> ``[1, 3, 6]``."""
    try:
        ids = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer ids such as 1,3,6, got {text!r}") from None
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative layer ids such as 1,3,6, got {text!r}")
    return ids
