"""The tests' boxes (this machine, directly and through the loopback sshd) without the cost of a
version manager's shims and rc files.

On this machine (and CI's) ``python3`` and ``python`` on ``PATH`` are pyenv shims: bash scripts that
run ``pyenv exec``, 40 processes and ~0.12 s of CPU before the interpreter starts, against ~0.015 s
for the interpreter itself. ``root``'s ``~/.bashrc`` runs ``pyenv init -`` and ``pyenv
virtualenv-init -``, and Debian's bash sources it in every shell sshd starts (``remote.ssh``: one
per command): 99 processes and ~0.15 s of CPU per SSH command. A profiled ``make test`` ran 102,508
``bash`` processes (2026-12-07, process accounting), ~300 s of CPU of its ~2,300: the box-side
``python3 -I -S -`` of every run lock, journal and watchdog operation, and every SSH command.

What the tests reach instead is what a box without a version manager has: ``python3`` and
``python`` on ``PATH`` are the interpreters those shims run (same version, same files: symbolic
links to their ``sys.executable``, in a directory put first on ``PATH``), and the loopback sshd's
sessions get this ``PATH`` and ``SHLVL=1`` (``tests/sshd.py``: bash sources ``~/.bashrc`` for
sshd only in a top-level shell, ``SHLVL`` < 2). The workbench runs unchanged; a test that wants a
box whose rc files are read sets ``SHLVL`` in its own sshd's ``SetEnv``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: the names on ``PATH`` the workbench runs on a box (``remote.Box.python`` defaults to ``python3``)
NAMES = ("python3", "python")


def is_script(path: str) -> bool:
    """Whether the file at ``path`` is a script (starts with ``#!``: a shim), not a binary."""
    with open(path, "rb") as f:
        return f.read(2) == b"#!"


def plain_python_dir(base: Path, *, timeout: float = 60.0) -> Path | None:
    """Put ``base/plain-python`` first on ``PATH`` (of this process, so of every process it starts),
    holding for each name of :data:`NAMES` that ``PATH`` resolves to a script (a shim) a symbolic
    link to the interpreter the script runs (its ``sys.executable``, asked once). Returns the
    directory, or ``None`` (``PATH`` unchanged) when no name is a shim. Raises
    ``subprocess.CalledProcessError`` / ``subprocess.TimeoutExpired`` when a shim does not answer,
    ``RuntimeError`` when what it names is not an executable file."""
    links = {}
    for name in NAMES:
        found = shutil.which(name)
        if found is None or not is_script(found):
            continue
        exe = subprocess.run([found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                             timeout=timeout, check=True).stdout.strip()
        if not (exe and os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise RuntimeError(f"{found} (on PATH as {name}) names {exe!r} as its interpreter: not an executable file")
        links[name] = exe
    if not links:
        return None
    where = Path(base) / "plain-python"
    where.mkdir(parents=True, exist_ok=True)
    for name, exe in links.items():
        (where / name).symlink_to(exe)
    os.environ["PATH"] = str(where) + os.pathsep + os.environ.get("PATH", "")
    return where
