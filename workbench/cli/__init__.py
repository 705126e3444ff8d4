"""The ``workbench`` command line.

    workbench runbook NAME [-p KEY VALUE]... [--host SPEC] [--report-dir DIR]   run runbooks/NAME.ipynb with
                                                                  papermill, then export NAME.html beside NAME.json
    workbench report NOTEBOOK [--html OUT]                        export an executed notebook to one HTML file
    workbench restore [--host SPEC]                               undo what an interrupted diagnosis left
    workbench status [--host SPEC] [--json]                       the box's run lock, what is left changed, and
                                                                  what the run's watchdog did
    workbench doctor --launch "CMD" [--cwd DIR] | --running [--port N] [--host SPEC] [--json]   every preflight
                                                                  rule on a launch command or the running server
    workbench probe add --host H --file PATH (--before REGEX | --line N) [--function F] --print EXPR...
                        [--once-per EXPR [--max-prints N]] [--tag TAG] [--python P] [--port N] [--package PKG]
                        [--timeout S]                             inject a debug print, once per process or once
                                                                  per distinct value of --once-per (relative PATH:
                                                                  against the engine's package root)
    workbench probe add --host H --recipe NAME [--target-arch A] [--draft-arch A] [--tag TAG] [--once-per EXPR] [...]
                                                                  a named probe on the EAGLE-3 code path
    workbench probe recipes [--json]                              the named probes and how to read them
    workbench probe list --host H [--json]                        the probes in the box's journal and their files
    workbench probe revert --host H (--tag TAG | --file PATH | --all)   restore the files byte for byte
    workbench probe read --host H --tag TAG (--log FILE | --port N) [--json]   what a probe printed, parsed
    workbench logs FILE [--host H] [--json] [--last N] [--follow S]   accept length, throughput and load over time
                                                                  from an SGLang server log (0.4.x to 0.5.23)
    workbench measure [--host H] [--port N] [--prompts chat|code|math|FILE] [--sources ...] [--json]
                                                                  accept length from every source the server offers
    workbench source locate|show FILE[:LINE]|find NAME|map|scan [--host H] [--port N | --python P | --package PKG]
                                                                  read the engine's source on the box: where it is,
                                                                  numbered lines, definitions (ast), the EAGLE-3
                                                                  code-path map, swallowed errors on that path

Every subcommand that talks to a box takes ``--host SPEC`` (default local: this machine; an
``~/.ssh/config`` alias, ``user@host[:port]``) and ``--timeout S`` (positive seconds for each call
to the box; given, it also bounds connecting); ``--port N`` is a TCP port, 1..65535. Each
subcommand is a module of this package (``runbook``, ``report``, ``restore``, ``status``, ``doctor``, ``probe``,
``logs``, ``measure``, ``source``) with its own usage; ``common`` holds what they share.

Exit codes (:class:`~workbench.cli.common.ExitCode`): 0 success (doctor: no error finding), 1 the
command ran and found a failure (doctor: at least one error finding; logs, measure: acceptance
collapsed; probe: a revert refused because someone else edited the file, an unreadable journal
entry, or a probe that has not printed yet; restore: something could not be undone; status: a
run no longer alive left the box changed; runbook: a cell failed), 2 the command itself could not run (bad arguments, unreachable box, unknown tag or
recipe, no engine found, an anchor that matches no line or several, an expression that is not
Python or would change state, a file that is not Python source), 130 interrupted (runbook). The
error that ends a command is one line on stderr, ``workbench <subcommand>: <message>``.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from workbench.cli.common import ExitCode, run_command

__all__ = ["ExitCode", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``workbench`` command: each subcommand module registers its
    subcommand with ``add_parser(sub)``, in the order ``workbench --help`` lists them."""
    # Imported here, not at the top: `python -m workbench.cli.logs` must not find its module
    # already imported by this package.
    from workbench.cli import doctor, logs, measure, probe, report, restore, runbook, source, status

    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (runbook, report, restore, status, doctor, probe, source, logs, measure):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workbench`` command (``argv``: the arguments after ``workbench``,
    default ``sys.argv[1:]``); returns the exit code, an :class:`ExitCode`. A usage error (or
    ``--help``) exits through argparse: ``SystemExit`` with code 2 (0)."""
    return run_command(build_parser().parse_args(argv))
