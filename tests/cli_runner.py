"""The ``workbench`` command line as a test runs it: in this process, or as a user runs it.

``CliRunner(capsys)(*argv)`` runs ``workbench.cli.main(argv)`` here and returns a :class:`CliResult`
``(code, out, err)``: the exit code (a usage error's or ``--help``'s ``SystemExit`` code too) and
what was printed on stdout and stderr. ``CliRunner.subprocess(*argv)`` runs ``python -m
workbench.cli ARGV`` (or, with ``entry_point=True``, the ``workbench`` script the package installs)
in a child process from the repository, with this process's environment plus ``env``; its code is
the child's return code (negative: the signal that ended it). The ``cli`` fixture of
``tests/conftest.py`` hands a runner to a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional

REPO = Path(__file__).resolve().parents[1]


class CliResult(NamedTuple):
    """What one ``workbench`` command did: exit ``code``, ``out`` (stdout), ``err`` (stderr)."""

    code: int
    out: str
    err: str


class CliRunner:
    """Runs ``workbench ARGV`` for a test; ``capsys``: pytest's capture of this process's output."""

    def __init__(self, capsys: Any):
        self.capsys = capsys

    def __call__(self, *argv: str) -> CliResult:
        """``workbench.cli.main(argv)`` in this process. Output printed before the call is dropped."""
        from workbench.cli import main

        self.capsys.readouterr()
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse: a usage error (2) or --help (0)
            code = exc.code if isinstance(exc.code, int) else 2
        out, err = self.capsys.readouterr()
        return CliResult(int(code), out, err)

    @staticmethod
    def subprocess(*argv: str, env: Optional[Mapping[str, str]] = None, cwd: Optional[os.PathLike] = None,
                   timeout: float = 120, entry_point: bool = False) -> CliResult:
        """``python -m workbench.cli ARGV`` (``entry_point``: the installed ``workbench`` script next to
        this interpreter) in a child process, in ``cwd`` (default the repository), the environment
        this process's plus ``env``. Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds,
        ``FileNotFoundError`` when the ``workbench`` script is not installed."""
        if entry_point:
            script = Path(sys.executable).with_name("workbench")
            if not script.exists():
                raise FileNotFoundError(f"no workbench script next to {sys.executable} (pip install -e .)")
            cmd = [str(script)]
        else:
            cmd = [sys.executable, "-m", "workbench.cli"]
        proc = subprocess.run([*cmd, *map(str, argv)], capture_output=True, text=True, cwd=cwd or REPO,
                              env={**os.environ, **(env or {})}, timeout=timeout)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)
