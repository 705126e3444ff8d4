"""The sandbox box's own dependencies: the ``sandbox`` extra of eagle-workbench.

A plain ``pip install eagle-workbench`` drives real boxes and has no torch; the sandbox box (its
server and its trainer) needs torch, transformers, safetensors, FastAPI, uvicorn and setproctitle (the TP ranks' titles). Its entry
points call :func:`missing_message` first and, when a module is missing, print one line on stderr
and exit with status 2 instead of a traceback from deep inside the server.

Standard library only, and nothing from ``remote`` or the rest of ``workbench`` (the sandbox
stands in for SGLang). The same module list is checked from outside, through the box, by the
diagnosis's default launch (``workbench.sandbox_box``); tests keep both equal to the extra in
``pyproject.toml``.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["EXTRA", "EXTRA_MODULES", "missing_modules", "missing_message", "exit_if_missing"]

#: The optional-dependency group of eagle-workbench that the sandbox box needs.
EXTRA = "sandbox"

#: The top-level modules of that extra's distributions (each distribution's import name is its own
#: name), in the order of ``pyproject.toml``.
EXTRA_MODULES = ("torch", "transformers", "safetensors", "fastapi", "uvicorn", "setproctitle")


def missing_modules(names: tuple[str, ...] = EXTRA_MODULES) -> list[str]:
    """The names in ``names`` this interpreter cannot import, found with
    :func:`importlib.util.find_spec` (nothing is imported: asking for torch costs no torch import).
    A finder that raises ``ImportError`` (or ``ValueError``, for a module whose ``__spec__`` is
    unset) for a name counts that name as missing."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def missing_message(names: tuple[str, ...] = EXTRA_MODULES) -> str | None:
    """One line saying which extra the sandbox box needs and which of its modules are missing
    here, or ``None`` when all of them can be imported."""
    missing = missing_modules(names)
    if not missing:
        return None
    return (f"the sandbox box needs the '{EXTRA}' extra ({', '.join(EXTRA_MODULES)}): "
            f"pip install 'eagle-workbench[{EXTRA}]' — missing: {', '.join(missing)}")


def exit_if_missing(prog: str) -> None:
    """For an entry point (``prog``: its name in the message): print ``prog: error: <the
    message>`` on stderr and exit with status 2 (:class:`SystemExit`) when a module of the extra
    is missing; return quietly otherwise."""
    message = missing_message()
    if message is not None:
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(2)
