"""Showing and comparing launch commands: the redacted text to display, and what changes between two.

Holds the logic of :meth:`workbench.engine.launch.LaunchCommand.to_display` (secret flag values and env
prefixes as ``***``, :mod:`workbench.redact`), ``_secret_arg`` (which argument holds a secret, resolved
in the command's own table) and :meth:`~workbench.engine.launch.LaunchCommand.diff`. Each takes the
command (its class lives above: used through its methods, never imported).

Imports, of :mod:`workbench.engine.launch`, :mod:`.resolve` and :mod:`.tokens`; besides
:mod:`workbench.redact`.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from workbench.engine.launch.resolve import DEFAULT_TABLE
from workbench.engine.launch.tokens import Arg
from workbench.redact import PLACEHOLDER, REDACTOR, Redactor

__all__ = ["to_display", "diff"]


def to_display(cmd: "LaunchCommand", redactor: Redactor | None = None) -> str:
    """The logic of :meth:`workbench.engine.launch.LaunchCommand.to_display` (see it): ``cmd``'s shell
    text with the values of secret flags and env prefixes, and every secret ``redactor`` (default
    :data:`workbench.redact.REDACTOR`) knows, replaced by ``***`` (unquoted)."""
    r = redactor or REDACTOR

    def quote(text: str) -> str:  # the placeholder unquoted: `--api-key ***`, not `'***'`
        return text if text == PLACEHOLDER else shlex.quote(text)

    env = [f"{k}={quote(r.env({k: v})[k])}" for k, v in cmd.env]
    tokens = [r.text(t) for t in cmd.launcher]
    for a in cmd.args:
        if a.flag and a.values and not a.positional and cmd._secret_arg(a):
            a = replace(a, values=tuple(PLACEHOLDER for _ in a.values))
        tokens += [t if t == PLACEHOLDER or (t.startswith("-") and t.endswith("=" + PLACEHOLDER)) else r.text(t)
                   for t in a.tokens()]
    return " ".join(env + [t if t.endswith("=" + PLACEHOLDER) and t.startswith("-") else quote(t) for t in tokens])


def _secret_arg(cmd: "LaunchCommand", a: Arg) -> bool:
    """Whether argument ``a`` of ``cmd`` carries a secret value: decided by the flag it IS in the
    command's table (argparse's resolution: ``--api-k`` is ``--api-key``, ``--speculative-num-draft-token``
    is ``--speculative-num-draft-tokens`` and no secret), an unknown or ambiguous one by
    :func:`workbench.redact.is_secret_flag` on its spelling, a vLLM dotted key by its last key."""
    from workbench.redact import is_secret_flag

    table = cmd.table or DEFAULT_TABLE
    if a.key:
        return is_secret_flag(a.spelled or a.flag, table)
    if a.status is None:
        return is_secret_flag(a.flag, table)
    return is_secret_flag(a.spelled or a.flag, table) or is_secret_flag(a.spelled or a.flag)


def diff(cmd: "LaunchCommand", other: "LaunchCommand") -> list[tuple[str, Any, Any]]:
    """The logic of :meth:`workbench.engine.launch.LaunchCommand.diff` (see it): ``[(flag, old, new)]``
    from ``cmd`` to ``other`` (:meth:`get` values, ``None`` when absent; ``"env:NAME"``, ``"launcher"``,
    ``"positionals"`` entries)."""
    out: list[tuple[str, Any, Any]] = []
    if cmd.launcher != other.launcher:
        out.append(("launcher", " ".join(cmd.launcher), " ".join(other.launcher)))
    mine, theirs = dict(cmd.env), dict(other.env)
    for k in list(mine) + [k for k in theirs if k not in mine]:
        if mine.get(k) != theirs.get(k):
            out.append((f"env:{k}", mine.get(k), theirs.get(k)))
    for f in cmd.flags() + [f for f in other.flags() if f not in cmd.flags()]:
        a, b = cmd.get(f), other.get(f)
        if a != b:
            out.append((f, a, b))
    if cmd.positionals != other.positionals:
        out.append(("positionals", cmd.positionals, other.positionals))
    return out
