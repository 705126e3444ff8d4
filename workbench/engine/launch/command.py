"""The :class:`LaunchCommand` class: a parsed launch command, its queries and its rewrites, and
:func:`parse_launch_command`.

The class keeps the reading that is its own (``get`` / ``get_all`` / ``has``, the argv views, the
engine-neutral accessors: ``port``, ``host``, ``target_model``, ``tensor_parallel_size``, ...); its
methods that are a responsibility of their own are thin and call the module that holds it: parsing
(:mod:`.parse`), the speculative settings read and rewritten (:mod:`.speculative`), flags set,
replaced, fixes composed and vLLM's ``--config`` file pulled in (:mod:`.rewrite`), the redacted
display and the diff (:mod:`.display`). What a command is and how each is read: the package's
docstring (:mod:`workbench.engine.launch`).

The highest module of :mod:`workbench.engine.launch` but its ``__init__``: imports :mod:`.resolve`,
:mod:`.tokens`, :mod:`.parse`, :mod:`.speculative`, :mod:`.display` and :mod:`.rewrite`; besides
:mod:`workbench.engine.flag_table`, :mod:`workbench.errors` and :mod:`workbench.redact`.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from workbench.engine.flag_table import FlagTable
from workbench.engine.launch.display import _secret_arg as _display_secret_arg, diff as _diff, to_display as _to_display
from workbench.engine.launch.parse import parse_parts
from workbench.engine.launch.resolve import DEFAULT_PORT, DEFAULT_TABLE, VLLM_DEFAULT_PORT, _as_option, _spec
from workbench.engine.launch.rewrite import (replace_flag as _replace_flag, with_changes_of as _with_changes_of,
                                             with_config_file as _with_config_file, with_flag as _with_flag)
from workbench.engine.launch.speculative import (SpeculativeConfig, speculative_config as _speculative_config,
                                                 with_speculative as _with_speculative)
from workbench.engine.launch.tokens import Arg, _dotted_groups
from workbench.errors import LaunchCommandError
from workbench.redact import Redactor

__all__ = ["LaunchCommand", "parse_launch_command"]


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
        return cls(**parse_parts(text, table)._asdict())

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
        return _to_display(self, redactor)

    def _secret_arg(self, a: Arg) -> bool:
        """Whether argument ``a`` carries a secret value: decided by the flag it IS in this command's
        table (argparse's resolution: ``--api-k`` is ``--api-key``, ``--speculative-num-draft-token``
        is ``--speculative-num-draft-tokens`` and no secret), an unknown or ambiguous one by
        :func:`workbench.redact.is_secret_flag` on its spelling, a vLLM dotted key by its last key."""
        return _display_secret_arg(self, a)

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
        return _with_config_file(self, config)

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
        return _speculative_config(self)

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
        return _with_speculative(self, changes)

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
        return _with_flag(self, flag, value)

    def replace_flag(self, old: str, new: str, value: Any = True) -> "LaunchCommand":
        """A new command with every occurrence of ``old`` (a flag, or an unknown / ambiguous one as
        written) removed and ``new`` set to ``value`` where ``old`` first stood (as
        :meth:`with_flag` would set it; appended when ``old`` is absent). Raises
        :class:`LaunchCommandError` as :meth:`with_flag`."""
        return _replace_flag(self, old, new, value)

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
        return _with_changes_of(self, original, proposed)

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
        return _diff(self, other)


def parse_launch_command(text: str | Iterable[str], table: FlagTable | None = None) -> LaunchCommand:
    """Alias of :meth:`LaunchCommand.parse`."""
    return LaunchCommand.parse(text if isinstance(text, str) else list(text), table)
