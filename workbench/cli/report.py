"""``workbench report``: export an executed notebook to one self-contained HTML file.

    workbench report NOTEBOOK [--html OUT]

Writes ``OUT`` (default: the notebook's path with ``.html``), plotly.js inlined once and no
``<script src=`` to any network address (:func:`workbench.report.export_html`), and prints its path.
A notebook run with papermill directly is exported this way; ``workbench runbook`` exports its own.

Exit codes: 0 exported, 1 the export failed or would not be self-contained, 2 the command could not
run (no such file, a file that is not a Jupyter notebook).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from workbench.cli.common import CliError, ExitCode, set_command

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench report``: see the module docstring. Raises :class:`CliError`."""
    from workbench.report import ReportError, export_html

    if not Path(args.notebook).is_file():
        raise CliError(f"no notebook file {args.notebook}")
    import nbformat

    html = args.html or str(Path(args.notebook).with_suffix(".html"))
    try:
        print(export_html(args.notebook, html, require_executed=False))
    except ReportError as exc:
        raise CliError(str(exc), ExitCode.FAILURE) from exc
    except (nbformat.ValidationError, json.JSONDecodeError, UnicodeDecodeError, KeyError, AttributeError) as exc:
        raise CliError(f"{args.notebook} is not a Jupyter notebook (.ipynb) "
                       f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
    return ExitCode.OK


def add_parser(sub: Any) -> None:
    """Register ``workbench report`` on the CLI's subparsers (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("report", help="export an executed notebook to one self-contained HTML file",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("notebook")
    p.add_argument("--html", help="output path (default: the notebook's path with .html)")
    set_command(p, _run)
