"""The fast run's guard: under ``make test-fast`` (``pytest -m "not slow"``) nothing may start a
server, sshd, a notebook kernel or a browser. A test that does without being marked ``slow`` (by
hand, or automatically from the fixtures it uses: ``tests/conftest.py``) is a mis-marked test: the
guard refuses the start (``StartRefused``) and the test fails, naming what it tried to start.

What is refused, in the test process:

- ``remote.Box.launch_server`` (any transport, any program): a detached server;
- a subprocess (``subprocess.Popen`` and everything built on it: ``run``, papermill's kernel
  manager, the local transport's ``bash -c``) whose command line starts ``sshd``, a module or
  script named ``*launch_server`` (the sandbox, SGLang, the tests' tiny and stand-in servers), a
  Jupyter kernel (``ipykernel``, ``jupyter``, ``papermill``), Chromium / Chrome, or the
  ``workbench runbook`` driver (a kernel plus servers).

Plain commands (``bash -c 'echo ...'``, ``python -c ...``, ``workbench doctor`` in a subprocess)
stay allowed: they start nothing that outlives them. Grandchildren (what a subprocess starts in
turn) are out of the guard's reach, which is why ``workbench runbook`` is refused at the door.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from typing import Any, Callable

_SHELLS = {"bash", "sh", "dash", "zsh"}
_WRAPPERS = {"exec", "setsid", "nohup", "env", "nice", "command"}
_OPERATORS = set(";&|()\n")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_KERNEL_MODULES = {"ipykernel", "ipykernel_launcher", "jupyter", "jupyter_client", "papermill", "notebook", "nbclient",
                   "jupyterlab", "jupyter_server"}
_BROWSERS = {"chromium", "chromium-browser", "chrome", "google-chrome", "google-chrome-stable", "headless_shell"}


class StartRefused(RuntimeError):
    """A test not marked ``slow`` tried to start something under ``make test-fast``."""


def _words(args: Any) -> list[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        return [os.fsdecode(args)]
    return [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]


def _commands(words: list[str]) -> list[list[str]]:
    """The simple commands ``words`` runs: itself without wrappers (``env A=1``, ``setsid``,
    ``exec``...), and for a shell's ``-c`` text each command of that text, recursively."""
    i = 0
    while i < len(words) and (os.path.basename(words[i]) in _WRAPPERS or _ASSIGNMENT.match(words[i])
                              or (i > 0 and words[i].startswith("-") and os.path.basename(words[i - 1]) in _WRAPPERS)):
        i += 1
    words = words[i:]
    if not words:
        return []
    found = [words]
    if os.path.basename(words[0]) in _SHELLS and "-c" in words[1:-1]:
        c = words.index("-c")
        text = words[c + 1]
        if "$@" in text:  # the words after $0 are run as a command: `bash -c '... exec "$@"' $0 PROG ARGS`
            found.extend(_commands(words[c + 3:]))
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            parts = list(lexer)
        except ValueError:  # unbalanced quotes: the plain words still show what runs
            parts = text.split()
        segment: list[str] = []
        for part in [*parts, ";"]:
            if part and set(part) <= _OPERATORS:
                found.extend(_commands(segment))
                segment = []
            else:
                segment.append(part)
    return found


def _judge(cmd: list[str]) -> str | None:
    prog = os.path.basename(cmd[0])
    if prog == "sshd":
        return "an OpenSSH server (sshd)"
    if prog in _BROWSERS:
        return f"a browser ({prog})"
    if prog in ("jupyter", "papermill") or prog.startswith("jupyter-"):
        return f"a notebook kernel ({prog})"
    if prog.endswith(("launch_server", "launch_server.py")):
        return f"a server ({prog})"
    target, rest = prog, cmd[1:]
    if prog.startswith("python"):
        k = 1
        while k < len(cmd) and cmd[k].startswith("-") and cmd[k] not in ("-m", "-c"):
            k += 1
        if k >= len(cmd) or cmd[k] == "-c":
            return None
        if cmd[k] == "-m":
            target, rest = (cmd[k + 1] if k + 1 < len(cmd) else ""), cmd[k + 2:]
        else:
            target, rest = os.path.basename(cmd[k]), cmd[k + 1:]
        if target.endswith(("launch_server", "launch_server.py")):
            return f"a server ({target})"
        if target.split(".")[0] in _KERNEL_MODULES:
            return f"a notebook kernel ({target})"
    if target in ("workbench", "workbench.cli") and [w for w in rest if not w.startswith("-")][:1] == ["runbook"]:
        return "a runbook run (a notebook kernel and servers)"
    return None


def what_it_starts(args: Any) -> str | None:
    """What the command ``args`` (a ``Popen`` argument) would start that the fast run forbids,
    or ``None``."""
    for cmd in _commands(_words(args)):
        what = _judge(cmd)
        if what is not None:
            return what
    return None


class FastGuard:
    """Installs the refusals (``install``, with a ``pytest.MonkeyPatch``); ``violations`` lists
    what was refused, so the test is failed even when the code under test caught the error."""

    def __init__(self) -> None:
        self.violations: list[str] = []

    def _refuse(self, what: str, command: str) -> None:
        message = (f"make test-fast starts nothing, but this test started {what}: {command[:300]}\n"
                   "mark the test @pytest.mark.slow (or use the fixture that starts it: tests/conftest.py "
                   "marks tests by their fixtures)")
        self.violations.append(message)
        raise StartRefused(message)

    def install(self, monkeypatch) -> None:
        guard = self
        real_popen_init: Callable[..., None] = subprocess.Popen.__init__

        def popen_init(self, args, *rest, **kwargs):
            what = what_it_starts(args)
            if what is not None:
                guard._refuse(what, args if isinstance(args, str) else shlex.join(map(os.fsdecode, args)))
            real_popen_init(self, args, *rest, **kwargs)

        monkeypatch.setattr(subprocess.Popen, "__init__", popen_init)

        from remote.box import Box

        def launch_server(self, argv, *rest, **kwargs):
            guard._refuse("a server (Box.launch_server)", argv if isinstance(argv, str) else shlex.join(argv))

        monkeypatch.setattr(Box, "launch_server", launch_server)
