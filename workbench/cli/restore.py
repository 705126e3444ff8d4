"""``workbench restore``: undo what an interrupted diagnosis left on the box.

    workbench restore [--host SPEC] [--timeout S] [--force]

Reads the box's diagnosis journal (:func:`workbench.session.journal.restore_box`): stops the servers
the run started, reverts its probes, removes what it created under the state dir, relaunches the
server it stopped; prints each action (``nothing to restore`` when the journal is empty) and each
problem on stderr. Idempotent: run it again after fixing what a problem names.

When the run's watchdog (:mod:`workbench.session.watchdog`) restored the box on its own (the run's
heartbeat went silent), its report comes first (``the watchdog restored the box at ...``, each
action, each problem), shown once: ``workbench status`` shows it again. While the watchdog is
restoring the box, the command waits for it.

A run that is still alive (it holds the box's run lock, :mod:`workbench.session.runlock`: decided on
the box) is never undone: the command names it and refuses; it restores the box itself at its end.
``--force`` undoes it anyway, after saying what it is about to undo (the live run then fails).

Exit codes: 0 the box is restored (or nothing was pending), 1 something could not be undone (the
journal is kept for another try) or a live run holds the box (refused, nothing changed), 2 the
command could not run (an unreachable box, an unreadable journal).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.cli.common import CliError, ExitCode, add_box_options, open_box, set_command

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench restore``: see the module docstring. Raises :class:`CliError` (a live run holds
    the box and no ``--force``) and what connecting and ``restore_box`` raise (``RemoteError``,
    ``JournalError``)."""
    from workbench.redact import REDACTOR
    from workbench.session import runlock
    from workbench.session.journal import Journal, JournalError, pending_summary, restore_box
    from workbench.session.watchdog import acknowledge_report, read_report, report_lines

    # unreachable: this command changed nothing, and what an earlier run left (if anything) is still there
    with open_box(args, notice=False, unreachable="nothing was changed (and nothing restored: run it again once "
                                                  "the box answers)") as box:
        try:
            # What it prints names the original server's command line: learn its secrets first.
            original = Journal(box, timeout=args.timeout).data.get("original_server") or {}
        except JournalError:
            original = {}  # restore_box raises the same error, with the journal's path, just below
        REDACTOR.learn_argv([str(a) for a in original.get("argv") or []])
        REDACTOR.learn_env(original.get("env") if isinstance(original.get("env"), dict) else None)
        holder = runlock.box_status(box, timeout=min(args.timeout, 30.0)).holder
        if holder is not None and holder.alive and holder.watchdog_of:
            print(f"{holder.describe()}: waiting for it", file=sys.stderr)
        elif holder is not None and holder.alive and not runlock.is_mine(holder):
            journal = Journal(box, timeout=args.timeout)
            changed = pending_summary(journal.data) if journal.pending else "nothing journalled yet"
            if not args.force:
                raise CliError(f"{holder.describe()} is still running on {box.name} and restores the box itself "
                               f"at its end; wait for it (its changes: {changed}). "
                               f"`workbench restore --force` undoes them anyway and makes that run fail",
                               ExitCode.FAILURE)
            print(f"--force: undoing the changes of {holder.describe()}, which is still running: {changed}",
                  file=sys.stderr)
        report = restore_box(box, timeout=args.timeout)
        shown = read_report(box, timeout=min(args.timeout, 30.0))
        if shown is not None:
            REDACTOR.learn_argv([str(a) for a in shown.get("original_argv") or []])
            for line in report_lines(shown):
                print(line)
            acknowledge_report(box, timeout=min(args.timeout, 30.0))
    if not report.actions and not report.problems and shown is None:
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
    p.add_argument("--force", action="store_true",
                   help="undo the changes of a run that is still alive (it then fails); says what it undoes first")
    set_command(p, _run)
