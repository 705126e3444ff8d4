"""``workbench restore``: undo what an interrupted diagnosis left on the box.

    workbench restore [--host SPEC] [--timeout S]

Reads the box's diagnosis journal (:func:`workbench.session.journal.restore_box`): stops the servers
the run started, reverts its probes, removes what it created under the state dir, relaunches the
server it stopped; prints each action (``nothing to restore`` when the journal is empty) and each
problem on stderr. Idempotent: run it again after fixing what a problem names.

Exit codes: 0 the box is restored (or nothing was pending), 1 something could not be undone (the
journal is kept for another try), 2 the command could not run (an unreachable box, an unreadable
journal).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.cli.common import ExitCode, add_box_options, open_box, set_command

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench restore``: see the module docstring. Raises what connecting and
    ``restore_box`` raise (``RemoteError``, ``JournalError``)."""
    from workbench.redact import REDACTOR
    from workbench.session.journal import Journal, JournalError, restore_box

    with open_box(args) as box:
        try:
            # What it prints names the original server's command line: learn its secrets first.
            original = Journal(box, timeout=args.timeout).data.get("original_server") or {}
        except JournalError:
            original = {}  # restore_box raises the same error, with the journal's path, just below
        REDACTOR.learn_argv([str(a) for a in original.get("argv") or []])
        REDACTOR.learn_env(original.get("env") if isinstance(original.get("env"), dict) else None)
        report = restore_box(box, timeout=args.timeout)
    if not report.actions and not report.problems:
        print("nothing to restore")
    for line in report.actions:
        print(line)
    for line in report.problems:
        print(f"FAILED: {line}", file=sys.stderr)
    return ExitCode.OK if report.clean else ExitCode.FAILURE


def add_parser(sub: Any) -> None:
    """Register ``workbench restore`` on the CLI's subparsers (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("restore", help="undo what an interrupted diagnosis left on the box",
                       description=__doc__.split("\n\n")[0])
    add_box_options(p, timeout=30.0)
    set_command(p, _run)
