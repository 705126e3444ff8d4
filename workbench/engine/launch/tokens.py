"""Tokens of a launch command: shell text split as ``bash`` splits it, and the arguments read from them.

Holds: the quote check naming the column of a quote never closed (``_check_quotes``), the split
(``_split``: line continuations, ``# comments``, ``shlex``), :class:`Arg` (one argument after the
launcher: its tokens and the value argparse stores) and the vLLM dotted arguments' values
(``_vllm_dotted_value``; ``_dotted_groups``: the objects vLLM 0.32.0 builds from ``--flag.key value``
arguments, ``_merge``: its ``recursive_dict_update``), and ``_derived``: a new command made of another's
pieces (the rewrites' constructor; the command's class lives above this module).

Imports, of :mod:`workbench.engine.launch`, only :mod:`.resolve`; besides :mod:`workbench.engine.flag_table`,
:mod:`workbench.errors` and :mod:`workbench.redact`.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from workbench.engine.flag_table import FlagTable, vllm_option_name
from workbench.engine.launch.resolve import _spec, _switch_value
from workbench.errors import LaunchCommandError
from workbench.redact import REDACTOR

__all__ = ["Arg"]


# ---------------------------------------------------------------------------------------------
# Tokenising.
# ---------------------------------------------------------------------------------------------


def _check_quotes(text: str) -> None:
    """Raise LaunchCommandError naming the column of a quote that is never closed."""
    state, opened, i = None, -1, 0
    while i < len(text):
        c = text[i]
        if state is None:
            if c == "\\":
                i += 2
                continue
            if c == "#" and (i == 0 or text[i - 1].isspace()):
                nl = text.find("\n", i)
                if nl < 0:
                    break
                i = nl
            elif c in "'\"":
                state, opened = c, i
        elif state == "'":
            if c == "'":
                state = None
        else:  # inside double quotes: backslash escapes
            if c == "\\":
                i += 2
                continue
            if c == '"':
                state = None
        i += 1
    if state is not None:
        line = text.count("\n", 0, opened) + 1
        col = opened - (text.rfind("\n", 0, opened) + 1) + 1
        # the excerpt is cut from the REDACTED text on each side of the quote: a cut through
        # "--api-key=VALUE" must not leave a tail of VALUE no rule can recognise any more
        before, after = REDACTOR.text(text[:opened])[-20:], REDACTOR.text(text[opened:])[:20]
        raise LaunchCommandError(
            f"unbalanced quote: the {state} at line {line}, column {col} (character {opened}) "
            f"is never closed: ...{before + after!r}",
            position=opened,
        )


def _split(text: str) -> list[str]:
    text = re.sub(r"\\\r?\n", "", text)  # shell line continuation
    _check_quotes(text)
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # pragma: no cover - _check_quotes catches the known cases
        raise LaunchCommandError(f"cannot split the launch command: {REDACTOR.text(str(exc))}") from exc


# ---------------------------------------------------------------------------------------------
# The arguments; vLLM's dotted ones.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    """One argument after the launcher.

    ``flag``: canonical flag (``None`` for a positional); ``spelled``: the option as written
    (``--tp``); ``values``: the value tokens (empty for a boolean); ``equals``: written as
    ``--flag=value``; ``negated``: ``--no-x`` of a BooleanOptionalAction flag;
    ``positional``: the flag's value was given as a positional (``sglang serve <model>``);
    ``status``: ``None`` (a flag of the table, or a positional), ``"unknown"`` (the table has no
    such flag: ``flag`` is the option as written), ``"ambiguous"`` (a prefix of several flags:
    ``flag`` is as written, ``candidates`` the option strings it could match) or
    ``"switch-value"`` (a boolean flag written ``--flag=value``: argparse exits 2 with "ignored
    explicit argument"; ``values`` holds the value written); ``table``: the flag
    table it was read against (``None``: the shipped one).

    vLLM only (vLLM 0.32.0 ``vllm/utils/argparse_utils.py`` ``FlexibleArgumentParser``): ``key``,
    the dotted path of a ``--flag.key.sub value`` argument (``("num_speculative_tokens",)`` for
    ``--speculative-config.num_speculative_tokens 3``; ``spelled`` is then the whole option as
    written, ``--speculative-config.num_speculative_tokens``), ``append`` for the list form
    ``--flag.key+ a,b``; ``attached``: the value glued to the option (``-O3``); ``origin``:
    ``"config"`` for an argument read from vLLM's ``--config`` YAML file
    (:meth:`LaunchCommand.with_config_file`), ``""`` when written on the command line.
    """

    flag: str | None
    spelled: str
    values: tuple[str, ...] = ()
    equals: bool = False
    negated: bool = False
    positional: bool = False
    status: str | None = None
    candidates: tuple[str, ...] = ()
    table: FlagTable | None = field(default=None, compare=False, repr=False)
    key: tuple[str, ...] = ()
    append: bool = False
    attached: bool = False
    origin: str = ""

    def tokens(self) -> list[str]:
        if self.flag is None or self.positional:
            return list(self.values)
        if self.attached:
            return [f"{self.spelled}{self.values[0]}", *self.values[1:]]
        if self.equals:
            return [f"{self.spelled}={self.values[0]}", *self.values[1:]]
        return [self.spelled, *self.values]

    def value(self) -> Any:
        """The value argparse would store: bool, str, or list[str] for list flags. A vLLM dotted
        argument (:attr:`key`): the value as vLLM reads it (``json.loads``, else a human-readable
        int such as ``3k``, else the text; the ``+`` form: the list of its comma-separated parts)."""
        if self.key:
            return _vllm_dotted_value(self.values[0] if self.values else "", self.append)
        spec = _spec(self.flag, self.table) if self.flag else None
        kind = spec["kind"] if spec else None
        if self.status == "switch-value":
            meant = _switch_value(self.values[0] if self.values else "")
            return (not meant) if self.negated else meant
        if kind == "store_true":
            return True
        if kind == "bool_optional":
            return not self.negated
        if spec and spec.get("nargs") in ("+", "*"):
            return list(self.values)
        if spec and spec.get("nargs") == "?":
            return self.values[0] if self.values else ""
        if not self.values:
            return True  # unknown flag written without a value
        return self.values[0] if len(self.values) == 1 else list(self.values)


def _vllm_dotted_value(text: str, append: bool) -> Any:
    """A dotted argument's value as vLLM 0.32.0 reads it (``argparse_utils.py``): the ``+`` form is
    the list of the comma-separated parts; else ``json.loads``, else a human-readable integer
    (``3k`` = 3000, ``1K`` = 1024: ``human_readable_int``), else the text."""
    if append:
        return list(text.split(","))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if "." not in number:
            return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)
        return text
    try:
        return int(text.strip())
    except ValueError:
        return text


def _merge(original: dict, update: Mapping) -> None:
    """``recursive_dict_update`` of vLLM 0.32.0 ``argparse_utils.py``: objects merge, lists concatenate,
    anything else is replaced."""
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _merge(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] = original[k] + v
        else:
            original[k] = v


def _dotted_groups(occ: Sequence[Arg]) -> dict[str, dict]:
    """The objects vLLM builds from the dotted arguments among ``occ``: ``{option name as written
    (underscores as dashes): merged object}``, in order of first appearance."""
    groups: dict[str, dict] = {}
    for a in occ:
        if not a.key:
            continue
        name = vllm_option_name(a.spelled.partition("=")[0]).split(".", 1)[0]
        nested: Any = a.value()
        for k in reversed(a.key):
            nested = {k: nested}
        _merge(groups.setdefault(name, {}), nested)
    return groups


def _derived(cmd: Any, **fields: Any) -> Any:
    """A new command made from ``cmd`` (a :class:`workbench.engine.launch.LaunchCommand`; its class
    lives above this module) with ``fields`` changed (``args``, ``env``, ``launcher``, ``module``, ...):
    as ``LaunchCommand(env, launcher, engine, module, args, table=cmd.table)`` builds it, so ``text``
    and ``prompt`` are ``""`` (a derived command has no text of its own)."""
    return replace(cmd, **{"text": "", "prompt": "", **fields})
