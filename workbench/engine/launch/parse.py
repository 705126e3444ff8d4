"""Reading a launch command's argv: the launcher (SGLang, the sandbox, vLLM) and its arguments.

Holds: the prompt strip (``_strip_prompt``), the launchers (``_MODULES``, ``_VLLM_CLI_MODULE``; the
launchers of other tools, named in the error: ``_other_launcher``), :func:`parse_parts` (shell text or
an argv list -> :class:`Parsed`, the fields of a :class:`workbench.engine.launch.LaunchCommand`: the
body of :meth:`LaunchCommand.parse <workbench.engine.launch.LaunchCommand.parse>`), SGLang's argparse
reading of the arguments against a flag table (``_parse_args``: SGLang 0.5.23 ``srt/server_args.py``)
and vLLM's (``_parse_vllm_args``, ``_vllm_option``: vLLM 0.32.0 ``vllm/utils/argparse_utils.py``
``FlexibleArgumentParser``: ``-O3``, dotted ``--speculative-config.x value``, the ``serve`` positional model).

Imports, of :mod:`workbench.engine.launch`, :mod:`.resolve` and :mod:`.tokens`; besides
:mod:`workbench.engine.flag_table` and :mod:`workbench.errors`.
"""

from __future__ import annotations

import re
import shlex
from typing import NamedTuple, Sequence

from workbench.engine.flag_table import FlagTable, Resolution, vllm_option_name
from workbench.engine.launch.resolve import DEFAULT_TABLE, _is_option, _table_for
from workbench.engine.launch.tokens import Arg, _split
from workbench.errors import LaunchCommandError

__all__ = ["Parsed", "parse_parts"]

_ENV_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_PY_OPTS_WITH_ARG = {"-X", "-W", "-Q"}
_MODULES = {"sglang.launch_server": "sglang", "workbench.sandbox.launch_server": "sandbox",
            # vLLM 0.32.0: deprecated but working (vllm/entrypoints/openai/api_server.py `__main__`)
            "vllm.entrypoints.openai.api_server": "vllm"}
#: ``python -m vllm.entrypoints.cli.main serve …`` is what the ``vllm`` console script runs
#: (vLLM 0.32.0 ``setup.py`` / ``vllm/entrypoints/cli/main.py``).
_VLLM_CLI_MODULE = "vllm.entrypoints.cli.main"

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
        _split(rest) and parse_parts(rest, table)
    except LaunchCommandError:
        return "", text
    return m.group(0).strip(), rest


class Parsed(NamedTuple):
    """What :func:`parse_parts` read: the fields of a :class:`workbench.engine.launch.LaunchCommand`,
    in its order (``LaunchCommand(**parsed._asdict())``)."""

    env: tuple[tuple[str, str], ...]
    launcher: tuple[str, ...]
    engine: str
    module: str
    args: tuple[Arg, ...]
    text: str
    table: FlagTable | None
    prompt: str


def parse_parts(text: str | Sequence[str], table: FlagTable | None = None) -> Parsed:
    """Shell text (or an argv list, e.g. from ``/proc/PID/cmdline``) read against the flag table
    ``table``: what :meth:`workbench.engine.launch.LaunchCommand.parse` builds its command of (see it
    for the rules). ``Parsed.table`` is the table the arguments were read against (a ``table`` of the
    other engine is not used: ``_table_for``). Raises :class:`LaunchCommandError` as that method."""
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
    return Parsed(tuple(env), launcher, engine, module, tuple(args), source, table, prompt)


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
