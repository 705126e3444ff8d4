"""The flag table a launch command is read against, and option strings resolved in it.

Holds: the engines' default ports (:data:`DEFAULT_PORT`, :data:`VLLM_DEFAULT_PORT`), the shipped
SGLang 0.5.23 table (:data:`DEFAULT_TABLE`, registered with :mod:`workbench.redact` together with the
shipped vLLM one), which table a command of an engine is read against (``_table_for``), argparse's
resolution of an option string (aliases, unique prefixes, ``--no-x``: :func:`canonical_flag`,
``_resolve``), a flag's entry (``_spec``), what a value written to a switch means
(:data:`SWITCH_TRUE` / :data:`SWITCH_FALSE`) and what is an option token (``_is_option``).

The lowest module of :mod:`workbench.engine.launch`: imports no other module of it; imports
:mod:`workbench.engine.flag_table`, :mod:`workbench.engine.flags`, :mod:`workbench.engine.vllm_flags`
(lazily), :mod:`workbench.errors` and :mod:`workbench.redact`.
"""

from __future__ import annotations

import re

from workbench.engine.flag_table import FlagTable
from workbench.engine.flags import FLAG_TABLE, FLAGS, SGLANG_VERSION
from workbench.errors import LaunchCommandError
from workbench.redact import register_flag_table

__all__ = ["DEFAULT_PORT", "VLLM_DEFAULT_PORT", "DEFAULT_TABLE", "SGLANG_VERSION", "SWITCH_TRUE", "SWITCH_FALSE",
           "canonical_flag"]


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

#: vLLM's default ``--port`` (vLLM 0.32.0 ``vllm/entrypoints/launchers/cli_args.py`` ``FrontendArgs.port``).
VLLM_DEFAULT_PORT = 8000


#: The sandbox launcher's own flags, which no SGLang release has (``workbench/sandbox/srt/server_args.py``
#: ``build_parser``): specs in the shipped table's form.
SANDBOX_FLAGS = {
    "--sandbox-load-seconds": {"aliases": [], "choices": None, "deprecated": None, "field": "sandbox_load_seconds",
                               "kind": "value", "nargs": None, "new_flag": None, "required": False, "type": "float",
                               "note": "the sandbox's own: spreads its start-up over S seconds",
                               "source": "workbench/sandbox/srt/server_args.py"},
    "--sandbox-fault": {"aliases": [], "choices": None, "deprecated": None, "field": "sandbox_fault",
                        "kind": "value", "nargs": None, "new_flag": None, "required": False, "type": None,
                        "note": "the sandbox's own: orphan-ranks | term-ignored | port-held | hang:PHASE",
                        "source": "workbench/sandbox/srt/server_args.py"},
}

_SANDBOX_TABLES: dict[int, tuple[FlagTable, FlagTable]] = {}  # id(base) -> (base, base + sandbox flags)


def sandbox_table(table: FlagTable | None = None) -> FlagTable:
    """``table`` (default: the shipped SGLang table) plus :data:`SANDBOX_FLAGS`: what the sandbox's
    launcher accepts (SGLang's flags and its own), so the doctor reads ``--sandbox-load-seconds`` /
    ``--sandbox-fault`` on the sandbox box as known flags (on an SGLang launcher they stay unknown)."""
    base = table or DEFAULT_TABLE
    if base.flags.keys() >= SANDBOX_FLAGS.keys():
        return base
    cached = _SANDBOX_TABLES.get(id(base))
    if cached is None or cached[0] is not base:
        cached = (base, FlagTable(base.version, {**base.flags, **SANDBOX_FLAGS}, base.origin,
                                  f"{base.source} + the sandbox launcher's own flags", base.files, base.engine))
        _SANDBOX_TABLES[id(base)] = cached
    return cached[1]


def _table_for(engine: str, table: FlagTable | None) -> FlagTable | None:
    """The table a command of ``engine`` is read against: ``table`` when it is that engine's (a
    vLLM table for vLLM, an SGLang one for SGLang and the sandbox), else the engine's shipped one
    (``None`` stands for SGLang's); for the sandbox with its own flags (:func:`sandbox_table`)."""
    from workbench.engine.vllm_flags import shipped_vllm_flag_table

    if engine == "vllm":
        return table if table is not None and table.engine == "vllm" else shipped_vllm_flag_table()
    table = table if table is not None and table.engine != "vllm" else None
    return sandbox_table(table) if engine == "sandbox" else table


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


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NEGATIVE_NUMBER.match(token)
