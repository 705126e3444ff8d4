"""Parse, query and rewrite an SGLang server launch command.

A :class:`LaunchCommand` is the shell text an operator typed (or ``/server_info`` reported) to
start SGLang, split the way ``bash`` and SGLang's ``argparse`` parser would split it:

- leading ``NAME=value`` environment assignments, e.g.
  ``CUDA_VISIBLE_DEVICES=0,1 SGLANG_LOG_MS=1``;
- the launcher: ``python[3[.x]] -m sglang.launch_server`` (any interpreter path),
  ``sglang serve`` (SGLang 0.5.23 ``cli/main.py``; a first positional is the model path,
  ``cli/serve.py`` ``_normalize_positional_model_path``), or
  ``python -m workbench.sandbox.launch_server`` (the embedded sandbox box, same flags);
- the flags, as SGLang 0.5.23's parser reads them: ``--flag value`` and ``--flag=value``;
  boolean ``store_true`` flags take no value; ``argparse.BooleanOptionalAction`` flags accept
  ``--x`` / ``--no-x``; list flags (``nargs="+"/"*"``) take values up to the next option;
  aliases (``--model`` = ``--model-path``, ``--speculative-draft-model`` =
  ``--speculative-draft-model-path``, ``--tensor-parallel-size`` = ``--tp-size``) and unique
  prefixes (``argparse``'s ``allow_abbrev``: ``--tp`` = ``--tp-size``) resolve to one canonical
  flag; when a flag is repeated the last one wins, as in ``argparse``.

Which flag takes a value comes from a flag table (:class:`workbench.engine.flag_table.FlagTable`):
the one given to :meth:`LaunchCommand.parse` (the box's engine, read from its own source by
:func:`workbench.engine.flag_table.read_flag_table`), else the shipped table generated from the
SGLang 0.5.23 source (:mod:`workbench.engine.flags`). Parsing never refuses a flag the table does
not define: an unknown flag (a typo, a newer or older engine's flag) and an ambiguous prefix
(``--cuda-graph-max-bs`` on 0.5.23, a prefix of ``--cuda-graph-max-bs-decode`` and
``--cuda-graph-max-bs-prefill``, which argparse refuses) are kept as written, with
:attr:`Arg.status` ``"unknown"`` / ``"ambiguous"`` (:meth:`LaunchCommand.unresolved`); each takes
a value when the next token is not an option. The ``launch-flag-unknown`` rule reports them.

Line continuations (backslash-newline) and ``# comments`` are handled as in the shell.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from workbench.engine.flag_table import FlagTable, Resolution
from workbench.engine.flags import FLAG_TABLE, FLAGS, SGLANG_VERSION
from workbench.errors import LaunchCommandError
from workbench.redact import PLACEHOLDER, REDACTOR, Redactor

__all__ = ["LaunchCommand", "LaunchCommandError", "Arg", "canonical_flag", "SGLANG_VERSION", "DEFAULT_TABLE"]


# ---------------------------------------------------------------------------------------------
# The flag table: canonical names, aliases, value arity.
# ---------------------------------------------------------------------------------------------

#: SGLang's default ``--port`` (0.5.23 ``srt/server_args.py`` ``ServerArgs.port``).
DEFAULT_PORT = 30000

#: The shipped table (SGLang 0.5.23), used when no table is given.
DEFAULT_TABLE = FlagTable(SGLANG_VERSION, FLAGS, "shipped", f"shipped table workbench/engine/data/{FLAG_TABLE}")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_ENV_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_PY_OPTS_WITH_ARG = {"-X", "-W", "-Q"}
_MODULES = {"sglang.launch_server": "sglang", "workbench.sandbox.launch_server": "sandbox"}


def _resolve(name: str, table: FlagTable | None = None) -> tuple[str, bool]:
    """(canonical flag, negated) for an option string as argparse would match it.

    Raises LaunchCommandError for an ambiguous prefix. Unknown flags resolve to themselves.
    """
    r = (table or DEFAULT_TABLE).resolve(name)
    if r.status == "ambiguous":
        shown = ", ".join(r.candidates[:6])
        raise LaunchCommandError(f"ambiguous flag {name}: it is a prefix of {shown}")
    return r.canon, r.negated


def _as_option(flag: str) -> str:
    return flag if flag.startswith("-") else "--" + flag.replace("_", "-")


def canonical_flag(flag: str, table: FlagTable | None = None) -> str:
    """The canonical SGLang flag for ``flag``: an alias, a unique prefix or a field name, in
    ``table`` (default: the shipped SGLang 0.5.23 table).

    ``canonical_flag("--tp") == "--tp-size"``, ``canonical_flag("speculative_algorithm") ==
    "--speculative-algorithm"``. Unknown flags are returned as given (with ``--``).
    Raises :class:`LaunchCommandError` on an ambiguous prefix.
    """
    return _resolve(_as_option(flag), table)[0]


def _spec(canon: str, table: FlagTable | None = None) -> dict | None:
    return (table or DEFAULT_TABLE).flags.get(canon)


#: What a value written to a switch (``--x=true``) means, as an operator meant it.
SWITCH_TRUE = frozenset({"true", "1", "yes", "on", "y", "t"})
SWITCH_FALSE = frozenset({"false", "0", "no", "off", "n", "f", ""})


def _switch_value(written: str) -> bool:
    """What ``--x=written`` meant for a boolean flag: ``False`` for ``false``/``0``/``no``/``off``,
    else ``True`` (argparse refuses either; this is what a fix keeps)."""
    return written.strip().lower() not in SWITCH_FALSE


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NEGATIVE_NUMBER.match(token)


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


#: A shell prompt pasted with the command: ``$ ``, ``# `` (root), ``> ``, ``% ``, optionally after
#: ``user@host:dir`` and a ``(venv)`` / ``(base)`` environment name.
_PROMPT = re.compile(r"^\s*(?:\([\w.\-/ ]+\)\s*)?(?:[\w.\-]+@[\w.\-]+(?::\S*?)?\s*)?[$#>%]\s+(?=\S)")


def _strip_prompt(text: str, table: FlagTable | None) -> tuple[str, str]:
    """``(prompt, rest)``: a leading shell prompt (:data:`_PROMPT`) split off ``text`` when what
    follows it parses as a launch command (else ``("", text)``, and the text is read as it is: a
    ``# `` line is then a comment, as the shell reads it)."""
    m = _PROMPT.match(text)
    if not m:
        return "", text
    rest = text[m.end():]
    try:
        _split(rest) and LaunchCommand.parse(rest, table)
    except LaunchCommandError:
        return "", text
    return m.group(0).strip(), rest


def _split(text: str) -> list[str]:
    text = re.sub(r"\\\r?\n", "", text)  # shell line continuation
    _check_quotes(text)
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # pragma: no cover - _check_quotes catches the known cases
        raise LaunchCommandError(f"cannot split the launch command: {REDACTOR.text(str(exc))}") from exc


# ---------------------------------------------------------------------------------------------
# The command.
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

    def tokens(self) -> list[str]:
        if self.flag is None or self.positional:
            return list(self.values)
        if self.equals:
            return [f"{self.spelled}={self.values[0]}", *self.values[1:]]
        return [self.spelled, *self.values]

    def value(self) -> Any:
        """The value argparse would store: bool, str, or list[str] for list flags."""
        spec = _spec(self.flag, self.table) if self.flag else None
        kind = spec["kind"] if spec else None
        if self.status == "switch-value":
            meant = _switch_value(self.values[0] if self.values else "")
            return (not meant) if self.negated else meant
        if kind == "store_true":
            return True
        if kind == "bool_optional":
            return not self.negated
        if spec and spec["nargs"] in ("+", "*"):
            return list(self.values)
        if spec and spec["nargs"] == "?":
            return self.values[0] if self.values else ""
        if not self.values:
            return True  # unknown flag written without a value
        return self.values[0] if len(self.values) == 1 else list(self.values)


@dataclass(frozen=True)
class LaunchCommand:
    """A parsed launch command. Immutable: ``with_flag`` / ``without_flag`` return new ones.

    Attributes: ``env`` (ordered ``(name, value)`` pairs), ``launcher`` (the tokens that start
    the server, e.g. ``("python3", "-m", "sglang.launch_server")``), ``engine`` (``"sglang"``
    or ``"sandbox"``), ``module`` (``"sglang.launch_server"``,
    ``"workbench.sandbox.launch_server"`` or ``"sglang serve"``), ``args`` (:class:`Arg`
    items in order), ``text`` (the text parsed, ``""`` for derived commands), ``table`` (the flag
    table the flags were resolved against; ``None``: the shipped SGLang 0.5.23 table), ``prompt``
    (a pasted shell prompt stripped from the front of the text, ``"$ "``; ``""`` when none).
    """

    env: tuple[tuple[str, str], ...]
    launcher: tuple[str, ...]
    engine: str
    module: str
    args: tuple[Arg, ...]
    text: str = field(default="", compare=False)
    table: FlagTable | None = field(default=None, compare=False, repr=False)
    prompt: str = field(default="", compare=False)

    # -- parsing --------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str | Sequence[str], table: FlagTable | None = None) -> "LaunchCommand":
        """Parse shell text (or an argv list, e.g. from ``/proc/PID/cmdline``) against the flag
        table ``table`` (the box's engine's; default the shipped SGLang 0.5.23 table).

        An unknown flag or an ambiguous prefix is kept as written (:meth:`unresolved`), never an
        error, nor is a value given to a boolean flag (``--x=true``: :attr:`Arg.status`
        ``"switch-value"``). Raises :class:`LaunchCommandError`: empty text, unbalanced quote (with
        its column), not an SGLang / sandbox launch command, flag missing its value.
        """
        prompt = ""
        if isinstance(text, str):
            prompt, text = _strip_prompt(text, table)
            tokens = _split(text)
            source = text
        else:
            tokens = [str(t) for t in text]
            source = shlex.join(tokens)
        if not tokens:
            raise LaunchCommandError("empty launch command")
        i = 0
        env: list[tuple[str, str]] = []
        while i < len(tokens):
            m = _ENV_ASSIGN.match(tokens[i])
            if not m:
                break
            env.append((m.group(1), m.group(2)))
            i += 1
        start = i
        if i >= len(tokens):
            raise LaunchCommandError(f"not an SGLang launch command: only environment settings in {source!r}")
        exe = tokens[i].rsplit("/", 1)[-1]
        engine = module = None
        if _PYTHON.match(exe):
            j = i + 1
            while j < len(tokens) and tokens[j] != "-m" and tokens[j].startswith("-"):
                j += 2 if tokens[j] in _PY_OPTS_WITH_ARG else 1
            if j + 1 < len(tokens) and tokens[j] == "-m" and tokens[j + 1] in _MODULES:
                module = tokens[j + 1]
                engine = _MODULES[module]
                i = j + 2
        elif exe == "sglang" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            module, engine = "sglang serve", "sglang"
            i += 2
        if engine is None:
            shown = " ".join(tokens[start:start + 4])
            other = _other_launcher(tokens[start:])
            expected = ("`python -m sglang.launch_server ...`, `sglang serve ...` or "
                        "`python -m workbench.sandbox.launch_server ...`")
            raise LaunchCommandError(
                f"not an SGLang launch command: `{shown}` (token {start}) is {other}; the workbench checks "
                f"SGLang launches: {expected}" if other else
                f"not an SGLang launch command: expected {expected}, got `{shown}` at token {start}",
                token=start,
            )
        launcher = tuple(tokens[start:i])
        args = _parse_args(tokens, i, module, table)
        return cls(tuple(env), launcher, engine, module, tuple(args), text=source, table=table, prompt=prompt)

    def with_table(self, table: FlagTable | None) -> "LaunchCommand":
        """The same command read again against ``table`` (e.g. the box's engine's flags): the
        flags re-resolved, unknown / ambiguous ones marked anew. Raises
        :class:`LaunchCommandError` when the command does not parse against it (a flag that
        takes a value there missing it)."""
        again = LaunchCommand.parse(self.argv, table)
        return replace(again, text=self.text)

    def unresolved(self) -> list[Arg]:
        """The arguments argparse would refuse by name: unknown flags and ambiguous prefixes
        (:attr:`Arg.status`), in order."""
        return [a for a in self.args if a.status in ("unknown", "ambiguous")]

    # -- queries --------------------------------------------------------------------------

    @property
    def argv(self) -> list[str]:
        """All tokens: env assignments, launcher, arguments (what ``execve`` would see, with
        the env assignments in front as the shell would show them)."""
        return [f"{k}={v}" for k, v in self.env] + list(self.launcher) + self.arg_tokens

    @property
    def exec_argv(self) -> list[str]:
        """The program and its arguments without the environment prefix (the launcher and the
        arguments): what the shell ``exec``s after putting the prefix's variables into the
        environment, and what ``/proc/PID/cmdline`` of the server shows."""
        return list(self.launcher) + self.arg_tokens

    def launch_env(self, base: Mapping[str, str] | None = None) -> dict[str, str] | None:
        """The environment to launch :attr:`exec_argv` with: ``base`` (e.g. the running server's
        own environment, ``None``: nothing beyond the box's) with the prefix's assignments merged
        over it, in order (a repeated name: the last wins, as in the shell). ``None`` when both are
        empty."""
        env = dict(base or {})
        env.update(self.env)
        return env or None

    @property
    def arg_tokens(self) -> list[str]:
        """The argument tokens after the launcher."""
        return [t for a in self.args for t in a.tokens()]

    @property
    def positionals(self) -> list[str]:
        """Positional tokens (not flags, not flag values)."""
        return [a.values[0] for a in self.args if a.flag is None]

    def to_string(self) -> str:
        """Shell text; ``LaunchCommand.parse(c.to_string()) == c``."""
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env]
        return " ".join(env + [shlex.quote(t) for t in list(self.launcher) + self.arg_tokens])

    def __str__(self) -> str:
        return self.to_string()

    def to_display(self, redactor: Redactor | None = None) -> str:
        """Shell text to SHOW (reports, verdicts, terminal): :meth:`to_string` with the values of
        secret flags (``--api-key``, ``--hf-token``, ``--ssl-keyfile-password``, …, both ``--flag V``
        and ``--flag=V``) and of secret env prefixes (``HF_TOKEN=…``) replaced by ``***``, and any
        secret the redactor knows replaced wherever it appears (:mod:`workbench.redact`).
        ``redactor``: default the process-wide :data:`workbench.redact.REDACTOR`. What is launched
        is always :attr:`exec_argv` / :meth:`to_string`, with the real values."""
        r = redactor or REDACTOR

        def quote(text: str) -> str:  # the placeholder unquoted: `--api-key ***`, not `'***'`
            return text if text == PLACEHOLDER else shlex.quote(text)

        env = [f"{k}={quote(r.env({k: v})[k])}" for k, v in self.env]
        tokens = r.argv(list(self.launcher) + self.arg_tokens)
        return " ".join(env + [t if t.endswith("=" + PLACEHOLDER) and t.startswith("-") else quote(t) for t in tokens])

    def _canon(self, flag: str) -> str:
        """The canonical flag in this command's table; an ambiguous prefix as written (it then
        matches the arguments written so, which kept it)."""
        r = (self.table or DEFAULT_TABLE).resolve(_as_option(flag))
        return r.canon

    def _occurrences(self, flag: str) -> list[Arg]:
        canon = self._canon(flag)
        return [a for a in self.args if a.flag == canon]

    def has_written(self, flag: str) -> bool:
        """Whether an argument's flag is ``flag`` exactly (canonical, or an unknown / ambiguous
        one as written), without resolving it."""
        return any(a.flag == flag for a in self.args)

    def has(self, flag: str) -> bool:
        """Whether ``flag`` (any alias or unique prefix, or a field name) appears."""
        return bool(self._occurrences(flag))

    def get(self, flag: str, default: Any = None) -> Any:
        """The value SGLang would see for ``flag`` (last occurrence wins), else ``default``.

        ``str`` for valued flags, ``True`` for store_true flags, ``True``/``False`` for
        ``--x``/``--no-x`` flags, ``list[str]`` for list flags (``nargs`` ``+``/``*``).
        The value is the text as written: no type conversion, no upper-casing.
        """
        occ = self._occurrences(flag)
        return occ[-1].value() if occ else default

    def get_all(self, flag: str) -> list[Any]:
        """The value of every occurrence of ``flag``, in order."""
        return [a.value() for a in self._occurrences(flag)]

    def flags(self) -> list[str]:
        """Canonical flags present, in order of first appearance."""
        seen: list[str] = []
        for a in self.args:
            if a.flag is not None and a.flag not in seen:
                seen.append(a.flag)
        return seen

    # -- rewriting ------------------------------------------------------------------------

    def with_flag(self, flag: str, value: Any = True) -> "LaunchCommand":
        """A new command with ``flag`` set to ``value``.

        The first occurrence is replaced in place, keeping how it was spelled and whether it
        used ``=``; later occurrences are dropped (so the value is unambiguous). An absent flag
        is appended (canonical spelling). ``value``: ``True`` for a boolean flag (``False``
        removes a store_true flag, writes ``--no-x`` for a BooleanOptionalAction flag), a
        scalar (converted with ``str``) or a list for list flags.
        Raises :class:`LaunchCommandError` when the value does not fit the flag, or ``flag`` is an
        ambiguous prefix in this command's table.
        """
        canon = canonical_flag(flag, self.table)
        spec = _spec(canon, self.table)
        kind = spec["kind"] if spec else "value"
        negated = False
        if kind == "store_true":
            if value is False:
                return self.without_flag(canon)
            if value is not True:
                raise LaunchCommandError(f"{canon} is a boolean flag (store_true): it takes no value, got {value!r}")
            values: tuple[str, ...] = ()
        elif kind == "bool_optional":
            if not isinstance(value, bool):
                raise LaunchCommandError(f"{canon} is a --x/--no-x flag: pass True or False, got {value!r}")
            values, negated = (), not value
        else:
            if isinstance(value, bool):
                raise LaunchCommandError(f"{canon} takes a value, got the boolean {value!r}")
            if isinstance(value, (list, tuple)):
                if not spec or spec["nargs"] not in ("+", "*"):
                    if len(value) != 1:
                        raise LaunchCommandError(f"{canon} takes one value, got {len(value)}: {value!r}")
                values = tuple(str(v) for v in value)
            else:
                values = (str(value),)
        new_args: list[Arg] = []
        replaced = False
        for a in self.args:
            if a.flag != canon:
                new_args.append(a)
                continue
            if replaced:
                continue
            spelled = a.spelled
            if kind == "bool_optional":
                spelled = ("--no-" + canon[2:]) if negated else canon
            equals = a.equals and len(values) == 1
            new_args.append(
                Arg(canon, spelled, values, equals=equals, negated=negated, positional=a.positional and len(values) == 1,
                    status=None if spec else "unknown", table=self.table)
            )
            replaced = True
        if not replaced:
            spelled = ("--no-" + canon[2:]) if negated else canon
            new_args.append(Arg(canon, spelled, values, negated=negated, status=None if spec else "unknown",
                                table=self.table))
        return LaunchCommand(self.env, self.launcher, self.engine, self.module, tuple(new_args), table=self.table)

    def replace_flag(self, old: str, new: str, value: Any = True) -> "LaunchCommand":
        """A new command with every occurrence of ``old`` (a flag, or an unknown / ambiguous one as
        written) removed and ``new`` set to ``value`` where ``old`` first stood (as
        :meth:`with_flag` would set it; appended when ``old`` is absent). Raises
        :class:`LaunchCommandError` as :meth:`with_flag`."""
        canon_old = self._canon(old)
        at = next((k for k, a in enumerate(self.args) if a.flag == canon_old), None)
        rest = self.without_flag(old)
        if at is None:
            return rest.with_flag(new, value)
        canon_new = canonical_flag(new, self.table)
        single = LaunchCommand(self.env, self.launcher, self.engine, self.module, (), table=self.table).with_flag(new, value)
        before = [a for a in self.args[:at] if a.flag != canon_old and a.flag != canon_new]
        after = [a for a in self.args[at:] if a.flag != canon_old and a.flag != canon_new]
        return LaunchCommand(self.env, self.launcher, self.engine, self.module, tuple(before + list(single.args) + after),
                             table=self.table)

    def without_flag(self, flag: str) -> "LaunchCommand":
        """A new command with every occurrence of ``flag`` removed."""
        canon = self._canon(flag)
        args = tuple(a for a in self.args if a.flag != canon)
        return LaunchCommand(self.env, self.launcher, self.engine, self.module, args, table=self.table)

    def with_env(self, name: str, value: str | None) -> "LaunchCommand":
        """A new command with environment variable ``name`` set (``None`` removes it)."""
        env = [(k, v) for k, v in self.env if k != name]
        if value is not None:
            replaced = [(k, (str(value) if k == name else v)) for k, v in self.env]
            env = replaced if any(k == name for k, _ in self.env) else env + [(name, str(value))]
        return LaunchCommand(tuple(env), self.launcher, self.engine, self.module, self.args, table=self.table)

    def with_changes_of(self, original: "LaunchCommand", proposed: "LaunchCommand") -> "LaunchCommand":
        """This command with the flag changes that turn ``original`` into ``proposed`` applied
        (a fix made from ``original``, applied on top of earlier fixes: :meth:`compose`).

        Only the flags ``original.diff(proposed)`` names (and those written otherwise with the same
        value: ``--x=true`` → ``--x``) change; every other flag of ``self`` (an
        earlier fix's) stays. A changed flag is replaced where it first stands in ``self`` (later
        occurrences dropped); a dropped one is removed; a new one is inserted after the argument
        that precedes it in ``proposed`` (so a flag a fix replaced in place keeps its position),
        at the end when none does; a positional word ``proposed`` no longer has is removed. Works on
        the arguments as written, never re-resolving a flag,
        so an unknown or ambiguous flag never raises."""
        args = list(self.args)
        changed = [flag for flag, _old, _new in original.diff(proposed) if flag.startswith("--")]
        for flag in original.flags():  # same value, other tokens: `--x=true` written as the bare switch
            if flag not in changed and flag.startswith("--") and proposed.has_written(flag) and (
                    [a.tokens() for a in original.args if a.flag == flag] !=
                    [a.tokens() for a in proposed.args if a.flag == flag]):
                changed.append(flag)
        for flag in changed:
            theirs = [a for a in proposed.args if a.flag == flag]
            if not theirs:
                args = [a for a in args if a.flag != flag]
                continue
            new_arg = theirs[-1]
            at = next((k for k, a in enumerate(args) if a.flag == flag), None)
            if at is not None:
                args = [a for k, a in enumerate(args) if a.flag != flag or k == at]
                args[at] = new_arg
                continue
            where = len(args)
            pos = next(k for k, a in enumerate(proposed.args) if a is new_arg)
            for prev in reversed(proposed.args[:pos]):
                hits = [k for k, a in enumerate(args) if (a.flag is not None and a.flag == prev.flag)
                        or (a.flag is None and prev.flag is None and a.values == prev.values)]
                if hits:
                    where = hits[-1] + 1
                    break
            else:
                where = 0 if pos == 0 else len(args)
            args.insert(where, new_arg)
        gone = [a.values for a in original.args if a.flag is None]
        for a in proposed.args:  # the positionals the fix dropped (a stray word, a placeholder)
            if a.flag is None and a.values in gone:
                gone.remove(a.values)
        for values in gone:
            at = next((k for k, a in enumerate(args) if a.flag is None and a.values == values), None)
            if at is not None:
                del args[at]
        return LaunchCommand(self.env, self.launcher, self.engine, self.module, tuple(args), table=self.table)

    @staticmethod
    def compose(original: "LaunchCommand", fixes: Iterable["LaunchCommand"]) -> "LaunchCommand":
        """``original`` with every fix applied in turn, each fix's changes taken as its diff
        against ``original`` (each fix was made from it): :meth:`with_changes_of`. Two fixes
        changing different flags both hold; a later fix of the same flag wins."""
        current = original
        for proposed in fixes:
            current = current.with_changes_of(original, proposed)
        return current

    def diff(self, other: "LaunchCommand") -> list[tuple[str, Any, Any]]:
        """What changes from ``self`` to ``other``: ``[(flag, old, new), ...]``.

        ``old``/``new`` are :meth:`get` values, ``None`` when absent. Environment variables
        appear as ``("env:NAME", old, new)``, a changed launcher as ``("launcher", old, new)``,
        changed positionals as ``("positionals", old, new)``.
        """
        out: list[tuple[str, Any, Any]] = []
        if self.launcher != other.launcher:
            out.append(("launcher", " ".join(self.launcher), " ".join(other.launcher)))
        mine, theirs = dict(self.env), dict(other.env)
        for k in list(mine) + [k for k in theirs if k not in mine]:
            if mine.get(k) != theirs.get(k):
                out.append((f"env:{k}", mine.get(k), theirs.get(k)))
        for f in self.flags() + [f for f in other.flags() if f not in self.flags()]:
            a, b = self.get(f), other.get(f)
            if a != b:
                out.append((f, a, b))
        if self.positionals != other.positionals:
            out.append(("positionals", self.positionals, other.positionals))
        return out


#: Launchers of other tools that public EAGLE reports use (``../shared/fixtures/public-reports``):
#: first token (or ``python -m`` module prefix) → what it is.
_OTHER_LAUNCHERS = {"vllm": "a vLLM launch", "vllm.entrypoints": "a vLLM launch", "speculators": "a speculators command",
                    "eagle.": "an EAGLE reference-code run (eagle.evaluation / eagle.train)",
                    "specforge": "a SpecForge (training) command", "trtllm-serve": "a TensorRT-LLM launch",
                    "torchrun": "a torchrun job", "accelerate": "an accelerate job"}


def _other_launcher(tokens: Sequence[str]) -> str | None:
    """What a non-SGLang command is (``"a vLLM launch"``), ``None`` when not recognised."""
    if not tokens:
        return None
    exe = tokens[0].rsplit("/", 1)[-1]
    if exe in _OTHER_LAUNCHERS:
        return _OTHER_LAUNCHERS[exe]
    if _PYTHON.match(exe):
        rest = list(tokens[1:])
        if "-m" in rest and rest.index("-m") + 1 < len(rest):
            mod = rest[rest.index("-m") + 1]
            for prefix, what in _OTHER_LAUNCHERS.items():
                if mod == prefix or mod.startswith(prefix.rstrip(".") + "."):
                    return what
            if mod.startswith("sglang."):
                return f"the SGLang module {mod}, not its server launcher (sglang.launch_server)"
            return f"the Python module {mod}"
        script = next((t for t in rest if not t.startswith("-")), None)
        if script and script.endswith(".py"):
            return f"the Python script {script}" + (" (vLLM's examples)" if "vllm" in script or
                                                   script.startswith("examples/") else "")
    return None


def _parse_args(tokens: list[str], i: int, module: str, table: FlagTable | None = None) -> list[Arg]:
    args: list[Arg] = []
    tab = table or DEFAULT_TABLE
    if module == "sglang serve" and i < len(tokens) and not _is_option(tokens[i]):
        # cli/serve.py: `sglang serve <model>` == `sglang serve --model-path <model>`
        args.append(Arg("--model-path", "", (tokens[i],), positional=True, table=table))
        i += 1
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            args.extend(Arg(None, t, (t,)) for t in tokens[i:])
            break
        if not _is_option(tok):
            args.append(Arg(None, tok, (tok,)))
            i += 1
            continue
        name, eq, inline = tok.partition("=")
        res: Resolution = tab.resolve(name)
        canon, negated = res.canon, res.negated
        status = None if res.status == "known" else res.status
        extra = {"status": status, "candidates": res.candidates, "table": table}
        spec = tab.flags.get(canon) if status is None else None
        if status == "ambiguous":  # argparse refuses it; its values are read as every candidate would read them
            arities = {(s["kind"], s.get("nargs")) for s in (tab.flags.get(tab.aliases.get(c, c)) for c in res.candidates)
                       if s is not None}
            if len(arities) == 1:
                spec = tab.flags.get(tab.aliases.get(res.candidates[0], res.candidates[0]))
        kind = spec["kind"] if spec else None
        nargs = spec["nargs"] if spec else None
        if kind in ("store_true", "bool_optional"):
            if eq:  # argparse exits 2 ("ignored explicit argument"): kept, the launch-flag-unknown rule reports it
                args.append(Arg(canon, name, (inline,), equals=True, negated=negated,
                                **{**extra, "status": extra["status"] or "switch-value"}))
            else:
                args.append(Arg(canon, name, (), negated=negated, **extra))
            i += 1
            continue
        if eq:
            values = [inline]
            i += 1
            if nargs in ("+", "*"):
                while i < len(tokens) and not _is_option(tokens[i]) and tokens[i] != "--":
                    values.append(tokens[i])
                    i += 1
            args.append(Arg(canon, name, tuple(values), equals=True, **extra))
            continue
        j = i + 1
        values = []
        if nargs in ("+", "*"):
            while j < len(tokens) and not _is_option(tokens[j]) and tokens[j] != "--":
                values.append(tokens[j])
                j += 1
            if nargs == "+" and not values:
                raise LaunchCommandError(f"flag {name} (token {i}) is missing its value (one or more expected)", token=i)
        elif nargs == "?" or spec is None:
            if j < len(tokens) and not _is_option(tokens[j]) and tokens[j] != "--":
                values.append(tokens[j])
                j += 1
        else:
            if j >= len(tokens) or _is_option(tokens[j]):
                after = "at the end of the command" if j >= len(tokens) else f"before {tokens[j]}"
                raise LaunchCommandError(f"flag {name} (token {i}) is missing its value ({after})", token=i)
            values.append(tokens[j])
            j += 1
        args.append(Arg(canon, name, tuple(values), **extra))
        i = j
    return args


def parse_launch_command(text: str | Iterable[str], table: FlagTable | None = None) -> LaunchCommand:
    """Alias of :meth:`LaunchCommand.parse`."""
    return LaunchCommand.parse(text if isinstance(text, str) else list(text), table)
