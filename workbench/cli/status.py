"""``workbench status``: who uses the box, what is left changed on it, and what its watchdog did.

    workbench status [--host SPEC] [--timeout S] [--json]

One small read of the box (:func:`workbench.session.runlock.box_status`, a shell call, no
interpreter started): the run lock's holder and whether it lives, the journal (what a run left
changed), the watchdog (:mod:`workbench.session.watchdog`: which run it watches, after how many
seconds of silence it restores the box, whether its process lives) and the watchdog's last report
(when it restored the box on its own: each action and problem). A report not shown before is
shown once (``workbench restore`` shows it too). Then the box now
(:func:`workbench.session.box_view.box_view`): its servers as process trees (launcher and ranks with
titles and ports), SGLang processes no live launcher owns (orphans), and its GPUs with their memory
and holders (pid, title, user, MiB per GPU, the server holding them; orphans flagged) — on a box
with no nvidia-smi the GPU part says it was skipped and why. ``--json`` prints it all as one object
(``servers``, ``orphans``, ``gpus`` beside the run lock's keys).

Exit codes: 0 the box is in use by a live run or left as found, 1 a run that is no longer alive
left it changed (``workbench restore`` undoes it), 2 the command could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from workbench.cli.common import ExitCode, add_box_options, add_json_option, open_box, set_command

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench status``: see the module docstring. Raises what connecting and
    ``box_status`` raise (``RemoteError``, ``JournalError``)."""
    from workbench.redact import REDACTOR
    from workbench.session import runlock
    from workbench.session.box_view import box_view, box_view_lines
    from workbench.session.journal import pending_journal_from_text, pending_summary
    from workbench.session.watchdog import acknowledge_report, parse_report, read_report, report_lines

    with open_box(args, notice=False) as box:
        status = runlock.box_status(box, timeout=args.timeout)
        report = parse_report(status.watchdog_report_text)
        fresh = report is not None
        if report is None:
            report = read_report(box, seen=True, timeout=args.timeout)
        if fresh:
            acknowledge_report(box, timeout=args.timeout)
        now = box_view(box, timeout=args.timeout)
    journal = pending_journal_from_text(status.journal_text)
    if report is not None:
        REDACTOR.learn_argv([str(a) for a in report.get("original_argv") or []])
    holder = status.holder
    left_changed = journal is not None and not (holder is not None and holder.alive)
    watchdog = status.watchdog if status.watchdog and status.watchdog_alive else None
    if args.json:
        print(json.dumps({
            "box": box.name, "state_dir": str(box.state_dir),
            "holder": None if holder is None else {**{k: v for k, v in holder.raw.items() if not k.startswith("_")},
                                                   "alive": holder.alive, "describe": holder.describe()},
            "journal_pending": None if journal is None else (pending_summary(journal) if "unreadable" not in journal
                                                             else f"unreadable: {journal['unreadable']}"),
            "watchdog": watchdog, "watchdog_report": report, "watchdog_report_new": fresh, **now,
        }, indent=2, default=str))
    else:
        print(f"box: {box.name} (state dir {box.state_dir})")
        if holder is None:
            print("run lock: free")
        else:
            print(f"run lock: {holder.describe()}, {'alive' if holder.alive else 'no longer alive'}")
        if journal is None:
            print("journal: nothing left changed")
        elif "unreadable" in journal:
            print(f"journal: unreadable ({journal['unreadable']})")
        else:
            print(f"journal: run {journal.get('run_id')} changed the box: {pending_summary(journal)}")
        if watchdog is None:
            print("watchdog: none running")
        else:
            print(f"watchdog: pid {watchdog.get('pid')} watching run {watchdog.get('run_id')}; it restores the box after "
                  f"{float(watchdog.get('after_s') or 0):g} s of silence ({watchdog.get('state')})")
        if report is not None:
            print(("watchdog report (new): " if fresh else "last watchdog report: ") + report_lines(report)[0])
            for line in report_lines(report)[1:]:
                print(line)
        for line in box_view_lines(now):
            print(REDACTOR.text(line))
        if left_changed:
            print(f"undo what is left changed with `workbench restore --host {args.host}`", file=sys.stderr)
    return ExitCode.FAILURE if left_changed else ExitCode.OK


def add_parser(sub: Any) -> None:
    """Register ``workbench status`` on the CLI's subparsers (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("status", help="the box's run lock, what is left changed, and what its watchdog did",
                       description=__doc__.split("\n\n")[0])
    add_box_options(p, timeout=10.0)
    add_json_option(p, "the status")
    set_command(p, _run)
