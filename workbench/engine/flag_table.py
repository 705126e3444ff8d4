"""SGLang's launch flags read from an engine's own source: any release 0.4.6 … 0.5.23, on the box.

The reader parses (with :mod:`ast`, never importing SGLang) the places a release declares its
``launch_server`` arguments — found by hand in the published wheels:

* 0.4.6 … 0.5.12: ``parser.add_argument(...)`` calls in ``ServerArgs.add_cli_args``
  (``srt/server_args.py``): option strings (first = the flag, the rest aliases, e.g.
  ``"--tensor-parallel-size", "--tp-size"``), ``action`` (``"store_true"``,
  ``argparse.BooleanOptionalAction``, ``DeprecatedAction`` — a flag that *refuses*: its
  ``__call__`` raises ``ValueError(help)`` —, ``DeprecatedStoreTrueAction``,
  ``DeprecatedStoreConstAction``, ``DeprecatedAliasStoreAction(new_flag=...)``, ``LoRAPathAction``),
  ``nargs``, ``choices`` (a literal, or a module-level list by name), ``dest``, ``required``;
* 0.5.15, 0.5.18: ``A[T, "help"]`` / ``A[T, Arg(...)]`` fields of ``class ServerArgs`` in
  ``srt/server_args.py`` plus the remaining manual ``parser.add_argument`` calls (the deprecated
  aliases, e.g. ``--cuda-graph-max-bs`` → ``--cuda-graph-max-bs-decode``);
* 0.5.20 … 0.5.23: the same fields in ``srt/arg_groups/fields/*.py`` (every class there) plus the
  manual calls in ``ServerArgs.add_cli_args``.

Fields follow ``srt/arg_groups/arg_utils.py`` ``add_cli_args_from_dataclass`` (the same rules in
0.5.15 … 0.5.23): ``no_cli=True`` → no flag; ``cli_name`` else ``--`` + the field with ``-``;
``aliases``; a custom ``action`` → its kind (``action_kwargs`` may give ``nargs``); ``Literal[...]``
→ ``choices``; ``List[X]`` without ``type_parser`` → ``nargs="+"`` unless ``Arg(nargs=...)``;
``bool`` / ``Optional[bool]`` → ``store_true``; a field without default and ``required`` not
``False`` → required.

A table is ``{flag: spec}`` in the format of the shipped table (:mod:`workbench.engine.flags`):
``field``, ``aliases``, ``kind`` (``value`` / ``store_true`` / ``bool_optional``), ``nargs``,
``source``; plus ``choices`` (a list, or ``None`` when unrestricted or computed at run time),
``deprecated`` (``None``, ``"alias"`` — accepted with a warning, ``new_flag`` says for what —,
``"warn"`` — accepted, ignored or mapped —, ``"refused"`` — argparse raises on it), ``new_flag``
and ``note`` (a deprecated flag's help text, e.g. 0.4.6 ``--enable-flashinfer-mla``: "… Please use
'--attention-backend flashinfer' instead.").

Resolution (:meth:`FlagTable.resolve`) is argparse's with its default ``allow_abbrev=True`` (no
release sets it): an exact option string wins; else the option strings it is a prefix of — one
flag: that flag; several: ``ambiguous option: --x could match --x-a, --x-b`` and exit 2; none:
``unrecognized arguments`` and exit 2.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping

from remote.errors import RemoteError, RemoteFileError, RemoteFileNotFound
from workbench.engine.flags import read_data_json
from workbench.errors import WorkbenchInputError
from workbench.redact import register_flag_table

__all__ = ["FlagTable", "FlagTableError", "Resolution", "parse_flag_sources", "read_flag_table",
           "read_flag_table_dir", "shipped_flag_table", "flag_table_for_engine", "SHIPPED_TABLE",
           "load_flag_history", "FLAG_HISTORY", "vllm_option_name", "version_key", "flag_history", "lifetime", "replacements"]

#: The shipped table (generated from SGLang 0.5.23 by ``scripts/gen_sglang_flags.py``).
SHIPPED_TABLE = "sglang-0.5.23-flags.json"
#: The shipped flag history (``scripts/gen_sglang_flag_history.py`` over the cached wheels).
FLAG_HISTORY = "sglang-flag-history.json"

_SERVER_ARGS = "srt/server_args.py"
_FIELDS_DIR = "srt/arg_groups/fields"
_CHOICES = "srt/arg_groups/choices.py"  # 0.5.20+: the choice lists the fields import (LOAD_FORMAT_CHOICES, ...)


class FlagTableError(WorkbenchInputError):
    """An engine tree whose argument definitions cannot be read (no ``srt/server_args.py``, a file
    this Python cannot parse, no flag found). The message names the file."""


def version_key(version: str) -> tuple:
    """Sort key of a release number (``"0.5.10"`` after ``"0.5.9"``); non-numeric parts sort last."""
    return tuple(int(p) if p.isdigit() else 10**6 for p in re.split(r"[.+-]", str(version)))


@dataclass(frozen=True)
class Resolution:
    """How argparse reads one option string against a table. ``status``: ``"known"`` (``canon``
    is the flag, ``negated`` for ``--no-x``), ``"ambiguous"`` (``candidates``: the option strings
    it is a prefix of; ``canon`` is the token as written) or ``"unknown"`` (``canon`` as written)."""

    canon: str
    negated: bool = False
    status: str = "known"
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True)
class FlagTable:
    """The flags of one release. ``version`` (``"0.5.9"``, ``"unknown"``), ``flags`` (``{flag:
    spec}``), ``origin`` (``"box"``: read from the engine's source; ``"shipped"``: the table in
    ``workbench/engine/data``), ``source`` (where, e.g. ``read from /…/sglang/srt/server_args.py``)
    and ``engine`` (``"sglang"``, or ``"vllm"``: :mod:`workbench.engine.vllm_flags`; a vLLM table
    resolves an option string as vLLM's ``FlexibleArgumentParser`` does, underscores written as
    dashes first: :func:`vllm_option_name`)."""

    version: str
    flags: Mapping[str, dict]
    origin: str = "shipped"
    source: str = ""
    files: tuple[str, ...] = field(default=(), compare=False)
    engine: str = "sglang"

    @cached_property
    def aliases(self) -> dict[str, str]:
        """``{option string: flag}`` for every flag and alias."""
        out: dict[str, str] = {}
        for canon, spec in self.flags.items():
            out[canon] = canon
            for alias in spec.get("aliases") or ():
                out.setdefault(alias, canon)
        return out

    @cached_property
    def negations(self) -> dict[str, str]:
        """``{--no-x: --x}`` for the ``BooleanOptionalAction`` flags."""
        return {"--no-" + c[2:]: c for c, s in self.flags.items() if s.get("kind") == "bool_optional"}

    @cached_property
    def option_strings(self) -> list[str]:
        """Every option string argparse knows, sorted."""
        return sorted(set(self.aliases) | set(self.negations))

    @cached_property
    def by_field(self) -> dict[str, list[str]]:
        """``{field: [flags]}`` (a deprecated alias shares its new flag's field)."""
        out: dict[str, list[str]] = {}
        for canon, spec in self.flags.items():
            out.setdefault(spec.get("field") or "", []).append(canon)
        return out

    def spec(self, flag: str) -> dict | None:
        """The spec of a canonical flag, ``None`` when the table has none."""
        return self.flags.get(flag)

    def resolve(self, name: str) -> Resolution:
        """How argparse (``allow_abbrev=True``) reads option string ``name`` (without ``=value``).

        Prefixes that match several option strings of one flag (``--model`` / ``--model-path``
        aliases) count as that flag; several flags: ambiguous. On a vLLM table ``name`` is first
        written as vLLM's parser rewrites it (:func:`vllm_option_name`: ``--speculative_config`` is
        ``--speculative-config``)."""
        if self.engine == "vllm":
            name = vllm_option_name(name)
        if name in self.aliases:
            return Resolution(self.aliases[name])
        if name in self.negations:
            return Resolution(self.negations[name], True)
        if not name.startswith("--") or len(name) < 3:
            return Resolution(name, status="unknown")
        matches = [s for s in self.option_strings if s.startswith(name)]
        targets = {(self.aliases.get(s) or self.negations[s], s in self.negations) for s in matches}
        if len(targets) == 1:
            canon, negated = targets.pop()
            return Resolution(canon, negated)
        if len(targets) > 1:
            return Resolution(name, status="ambiguous", candidates=tuple(sorted(matches)))
        return Resolution(name, status="unknown")

    def describe(self) -> str:
        """``sglang 0.5.9 (read from …)`` / ``sglang 0.5.23 (shipped table …)`` / ``vllm 0.32.0 (…)``."""
        return f"{self.engine} {self.version} ({self.source})" if self.source else f"{self.engine} {self.version}"


def vllm_option_name(name: str) -> str:
    """An option string as vLLM's ``FlexibleArgumentParser.parse_args`` rewrites it before argparse
    sees it (vLLM 0.32.0 ``vllm/utils/argparse_utils.py``): in a ``--`` option, the underscores
    between the ``--`` and the first ``.`` become dashes (``--speculative_config.num_speculative_tokens``
    → ``--speculative-config.num_speculative_tokens``); single-dash options are kept."""
    if not name.startswith("--"):
        return name
    head, dot, tail = name[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail


# ---------------------------------------------------------------------------------------------
# Reading the sources.
# ---------------------------------------------------------------------------------------------


def _src(node: ast.AST) -> str:
    return ast.unparse(node)


def _literal(node: ast.AST | None, names: Mapping[str, Any]) -> Any:
    """A literal value, a module-level name bound to one, ``list(NAME)``/``sorted(NAME)`` of one;
    else ``None``."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "sorted", "set")
            and len(node.args) == 1):
        inner = _literal(node.args[0], names)
        if isinstance(inner, (list, tuple, set, frozenset, dict)):
            return sorted(inner, key=str) if node.func.id != "list" else list(inner)
    return None


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level ``NAME = <literal>`` bindings (choice lists such as ``LOAD_FORMAT_CHOICES``)."""
    out: dict[str, Any] = {}
    for st in tree.body:
        targets: list[ast.expr] = []
        value = None
        if isinstance(st, ast.Assign):
            targets, value = st.targets, st.value
        elif isinstance(st, ast.AnnAssign) and st.value is not None:
            targets, value = [st.target], st.value
        for t in targets:
            if isinstance(t, ast.Name) and value is not None:
                try:
                    out[t.id] = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
    return out


def _choices(value: Any) -> list | None:
    if isinstance(value, (list, tuple, set, frozenset)):
        return sorted(value, key=str) if isinstance(value, (set, frozenset)) else list(value)
    if isinstance(value, dict):
        return list(value)
    return None


_ACTION_KIND = {
    "store_true": ("store_true", None),
    "store_false": ("store_true", None),
    "store_const": ("store_true", None),
    "count": ("store_true", None),
    "BooleanOptionalAction": ("bool_optional", None),
    "DeprecatedAction": ("store_true", "refused"),
    "DeprecatedStoreTrueAction": ("store_true", "warn"),
    "DeprecatedStoreConstAction": ("store_true", "warn"),
    "DeprecatedAliasStoreAction": ("value", "alias"),
}


def _action_kind(action: ast.AST | None) -> tuple[str, str | None]:
    """``(kind, deprecated)`` for an ``action=`` expression (``None``: argparse's ``store``)."""
    if action is None:
        return "value", None
    name = _src(action).strip("'\"").rsplit(".", 1)[-1]
    return _ACTION_KIND.get(name, ("value", None))


def _value_type(node: ast.AST | None) -> str | None:
    """``"int"`` / ``"float"`` when ``node`` names that builtin (an ``add_argument(type=int)``, a
    field annotated ``int`` / ``Optional[float]``): argparse converts each value with it and exits 2
    with "invalid int value" when it fails; ``None`` for any other type (``str``, a custom parser:
    not checked)."""
    if node is None:
        return None
    name = _src(node)
    return name if name in ("int", "float") else None


def _manual_flags(tree: ast.Module, rel: str, names: Mapping[str, Any]) -> list[dict]:
    """The ``<parser>.add_argument(...)`` calls in ``ServerArgs.add_cli_args`` (and the module
    functions it calls with the parser: none in 0.4.6 … 0.5.23, but followed one level)."""
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    scopes: list[ast.AST] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"):
        for st in cls.body:
            if isinstance(st, ast.FunctionDef) and st.name == "add_cli_args":
                scopes.append(st)
    for scope in list(scopes):
        for call in ast.walk(scope):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in funcs
                    and any(isinstance(a, ast.Name) and a.id == "parser" for a in call.args)):
                scopes.append(funcs[call.func.id])
    out: list[dict] = []
    for scope in scopes:
        for node in ast.walk(scope):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            opts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            opts = [o for o in opts if o.startswith("-")]
            if not opts:
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            kind, deprecated = _action_kind(kw.get("action"))
            nargs = _literal(kw.get("nargs"), names)
            if "nargs" in kw and kind == "store_true" and deprecated is not None and nargs != 0:
                kind = "value"  # a custom action given nargs= takes values (0.5.23 --monokernel-backend amd)
            if kind != "value":
                nargs = None
            long = [o for o in opts if o.startswith("--")] or opts
            dest = _literal(kw.get("dest"), names)
            if not isinstance(dest, str):
                dest = long[0].lstrip("-").replace("-", "_")
            new_flag = _literal(kw.get("new_flag"), names)
            if deprecated is None and kw.get("help") is not None:
                help_text = _literal(kw["help"], names)
                if isinstance(help_text, str) and help_text.lower().lstrip("[").startswith("deprecated"):
                    deprecated = "warn"
            note = _literal(kw.get("help"), names) if deprecated else None
            out.append({"flag": long[0], "aliases": [o for o in opts if o != long[0]], "field": dest,
                        "note": note if isinstance(note, str) else None,
                        "kind": kind, "nargs": nargs, "choices": _choices(_literal(kw.get("choices"), names)),
                        "required": _literal(kw.get("required"), names) is True,
                        "deprecated": deprecated, "new_flag": new_flag if isinstance(new_flag, str) else None,
                        "type": _value_type(kw.get("type")) if kind == "value" else None,
                        "source": rel, "line": node.lineno})
    return out


def _unwrap_optional(tp: ast.AST) -> ast.AST:
    if isinstance(tp, ast.Subscript) and _src(tp.value) in ("Optional", "typing.Optional"):
        return tp.slice
    if isinstance(tp, ast.BinOp) and isinstance(tp.op, ast.BitOr):
        if _src(tp.right) == "None":
            return tp.left
        if _src(tp.left) == "None":
            return tp.right
    if isinstance(tp, ast.Subscript) and _src(tp.value) in ("Union", "typing.Union") and isinstance(tp.slice, ast.Tuple):
        rest = [e for e in tp.slice.elts if _src(e) != "None"]
        if len(rest) == 1:
            return rest[0]
    return tp


def _field_flags(tree: ast.Module, rel: str, names: Mapping[str, Any], classes: set[str] | None) -> list[dict]:
    """The ``A[T, "help"]`` / ``A[T, Arg(...)]`` fields of the classes of a module (``classes``:
    only those names; ``None``: all), as ``add_cli_args_from_dataclass`` turns them into flags."""
    out: list[dict] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        if classes is not None and cls.name not in classes:
            continue
        for st in cls.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            ann = st.annotation
            if not (isinstance(ann, ast.Subscript) and _src(ann.value) in ("A", "Annotated", "typing.Annotated")):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if len(elts) < 2:
                continue
            raw, meta = elts[0], elts[1:]
            arg: dict[str, ast.AST] | None = None
            for m in meta:  # _unwrap_annotated: the first Arg or str wins
                if isinstance(m, ast.Call) and _src(m.func).rsplit(".", 1)[-1] == "Arg":
                    arg = {kw.arg: kw.value for kw in m.keywords if kw.arg}
                    break
                if (isinstance(m, ast.Constant) and isinstance(m.value, str)) or isinstance(m, ast.JoinedStr) or (
                        isinstance(m, ast.BinOp) and isinstance(m.op, ast.Add)):
                    arg = {}
                    break
            if arg is None or _literal(arg.get("no_cli"), names) is True:
                continue
            fname = st.target.id
            cli = _literal(arg.get("cli_name"), names)
            cli = cli if isinstance(cli, str) else "--" + fname.replace("_", "-")
            aliases = _literal(arg.get("aliases"), names)
            aliases = [a for a in aliases if isinstance(a, str)] if isinstance(aliases, (list, tuple)) else []
            inner = _unwrap_optional(raw)
            nargs = _literal(arg.get("nargs"), names)
            choices = _choices(_literal(arg.get("choices"), names))
            kind, deprecated = "value", None
            if "action" in arg:
                kind, deprecated = _action_kind(arg["action"])
                akw = arg.get("action_kwargs")
                if isinstance(akw, ast.Dict):
                    for k, v in zip(akw.keys, akw.values):
                        if isinstance(k, ast.Constant) and k.value == "nargs":
                            nargs = _literal(v, names)
            elif isinstance(inner, ast.Subscript) and _src(inner.value) in ("Literal", "typing.Literal"):
                vals = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
                choices = choices or [_literal(v, names) for v in vals]
            elif (isinstance(inner, ast.Subscript) and _src(inner.value) in ("List", "list", "typing.List")
                  and "type_parser" not in arg):
                nargs = nargs or "+"
            elif _src(inner) == "bool":
                kind = "store_true"
            if kind != "value":
                nargs = None
            required = _literal(arg.get("required"), names)
            if kind != "value":
                vtype = None
            elif "type_parser" in arg or "type" in arg:
                vtype = _value_type(arg.get("type_parser") or arg.get("type"))
            else:
                elem = inner.slice if (isinstance(inner, ast.Subscript) and _src(inner.value)
                                       in ("List", "list", "typing.List")) else inner
                vtype = _value_type(_unwrap_optional(elem)) if not choices else None
            out.append({"flag": cli, "aliases": aliases, "field": fname, "kind": kind, "nargs": nargs, "type": vtype,
                        "choices": choices, "required": bool(required is True or (required is None and st.value is None
                                                                                 and kind == "value")),
                        "deprecated": deprecated, "new_flag": None, "note": None, "source": rel, "line": st.lineno})
    return out


def parse_flag_sources(files: Mapping[str, str], version: str, *, origin: str = "box", where: str = "") -> FlagTable:
    """The :class:`FlagTable` of a release from the text of its files: ``{relative path: text}``
    with ``srt/server_args.py``, any ``srt/arg_groups/fields/*.py`` and (0.5.20+)
    ``srt/arg_groups/choices.py``, whose module-level lists give the choices the fields name. ``where``: the package root
    the files were read from (for :attr:`FlagTable.source`).

    Raises :class:`FlagTableError` (naming the file) when ``srt/server_args.py`` is missing, a file
    does not parse, or no flag is found."""
    if _SERVER_ARGS not in files:
        raise FlagTableError(f"no {_SERVER_ARGS} in the engine package{' at ' + where if where else ''}")
    rows: list[dict] = []
    read: list[str] = []

    def parse(rel: str) -> ast.Module:
        try:
            return ast.parse(files[rel])
        except SyntaxError as exc:
            raise FlagTableError(f"{posixpath.join(where, rel) if where else rel}: this Python cannot parse it "
                                 f"(line {exc.lineno}: {exc.msg})") from exc

    shared = _module_constants(parse(_CHOICES)) if _CHOICES in files else {}
    order = sorted(k for k in files if k.startswith(_FIELDS_DIR + "/")) + [_SERVER_ARGS]
    for rel in order:
        tree = parse(rel)
        names = {**shared, **_module_constants(tree)}
        if rel == _SERVER_ARGS:
            rows += _field_flags(tree, rel, names, {"ServerArgs"})
            rows += _manual_flags(tree, rel, names)
        else:
            rows += _field_flags(tree, rel, names, None)
        read.append(rel)
    if not rows:
        raise FlagTableError(f"no launch flag declared in {', '.join(read)}{' under ' + where if where else ''}")
    table: dict[str, dict] = {}
    for r in rows:  # argparse: a repeated option string conflicts; the first declaration is kept
        flag = r.pop("flag")
        table.setdefault(flag, r)
    shown = _SERVER_ARGS + (f" and {_FIELDS_DIR}/*.py" if len(read) > 1 else "")
    source = f"read from {posixpath.join(where, shown) if where else shown}"
    return FlagTable(version, dict(sorted(table.items())), origin, source, tuple(read))


def _version_of(texts: Callable[[str], str | None]) -> str:
    for rel in ("_version.py", "version.py"):
        text = texts(rel)
        if not text:
            continue
        m = re.search(r"""^__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text, re.M)
        if m:
            return m.group(1)
    return "unknown"


def read_flag_table(box: Any, root: str, version: str | None = None, *, timeout: float = 30) -> FlagTable:
    """The flag table of the engine at ``root`` (the ``sglang`` package directory) on ``box``: one
    ``read_text`` per file (``srt/server_args.py``, each ``srt/arg_groups/fields/*.py`` and
    ``srt/arg_groups/choices.py`` when there are fields), one
    ``listdir``; each call ``timeout`` seconds at most. ``version``: the release (read from
    ``_version.py`` / ``version.py`` when ``None``).

    Raises :class:`FlagTableError` (naming the file) when ``srt/server_args.py`` is missing, a file
    cannot be read (permission, a directory, not UTF-8) or parsed, or no flag is declared; the
    box's other ``remote.errors.RemoteError`` subclasses (connection lost, time-out) propagate."""
    root = root.rstrip("/")
    return _read(lambda rel: box.read_text(posixpath.join(root, rel), timeout=timeout), lambda rel: box.listdir(posixpath.join(root, rel), timeout=timeout), root, version)


def _read(read: Callable[[str], str | None], listdir: Callable[[str], list[str]], root: str,
          version: str | None) -> FlagTable:
    def text(rel: str) -> str | None:
        try:
            return read(rel)
        except RemoteFileNotFound:
            return None
        except RemoteFileError as exc:  # permission, a directory, not UTF-8: this file cannot be read
            raise FlagTableError(f"{posixpath.join(root, rel)}: {exc}") from exc

    files: dict[str, str] = {}
    server_args = text(_SERVER_ARGS)
    if server_args is None:
        raise FlagTableError(f"no {_SERVER_ARGS} under {root}: not an SGLang package")
    files[_SERVER_ARGS] = server_args
    try:
        names = listdir(_FIELDS_DIR)
    except RemoteFileNotFound:
        names = []
    except RemoteFileError as exc:
        raise FlagTableError(f"{posixpath.join(root, _FIELDS_DIR)}: {exc}") from exc
    for name in sorted(names):
        if name.endswith(".py") and name != "__init__.py":
            body = text(f"{_FIELDS_DIR}/{name}")
            if body is not None:
                files[f"{_FIELDS_DIR}/{name}"] = body
    if names:
        body = text(_CHOICES)
        if body is not None:
            files[_CHOICES] = body
    return parse_flag_sources(files, version or _version_of(text), origin="box", where=root)


def read_flag_table_dir(path: str | Path, version: str | None = None) -> FlagTable:
    """:func:`read_flag_table` over a local unpacked ``sglang/`` directory (the wheels in the
    release cache, ``scripts/gen_sglang_flags.py``). Raises :class:`FlagTableError`."""
    from remote import connect

    box = connect("local")
    try:
        return read_flag_table(box, str(Path(path).resolve()), version)
    finally:
        box.close()


def shipped_flag_table() -> FlagTable:
    """The shipped table (``workbench/engine/data/sglang-0.5.23-flags.json``) as a :class:`FlagTable`
    (origin ``shipped``). Raises ``ValueError`` for a damaged file."""
    from workbench.engine.flags import load_flag_table

    version, flags = load_flag_table()
    return FlagTable(version, flags, "shipped", f"shipped table workbench/engine/data/{SHIPPED_TABLE}")


_ENGINE_TABLES: dict[tuple[str, str, str | None], FlagTable] = {}


def flag_table_for_engine(engine: Any, *, notes: list[str] | None = None) -> FlagTable:
    """The flag table for an :class:`workbench.engine.source.EngineSource` (``None``: the shipped
    table): read from the box's source (through ``engine.read``, one ``read_text`` per file, and one
    ``listdir``, each with the engine's timeout) once per (box, root, version) in this process, the shipped
    table when it cannot be read or the reader fails on it (the reason appended to ``notes``).
    Box errors (connection, time-out) propagate; a file that cannot be read is a fallback."""
    if engine is None:
        return shipped_flag_table()
    key = (str(getattr(engine.box, "name", id(engine.box))), engine.root, engine.version)
    if key not in _ENGINE_TABLES:
        try:  # through the EngineSource: its file cache is shared with the other source-reading rules
            _ENGINE_TABLES[key] = _read(engine.read, lambda rel: engine.box.listdir(engine.path(rel),
                                                                                   timeout=engine.timeout),
                                        engine.root, engine.version)
            register_flag_table(_ENGINE_TABLES[key])  # redaction resolves the box's flags too
        except FlagTableError as exc:
            if notes is not None:
                notes.append(f"launch flags: the box's engine source could not be read ({exc}); "
                             "the shipped table (sglang 0.5.23) stands in")
            return shipped_flag_table()
        except RemoteError:
            raise
        except Exception as exc:  # a release whose declarations this reader does not understand: reported, not hidden
            if notes is not None:
                notes.append(f"launch flags: the reader failed on the box's engine source ({type(exc).__name__}: "
                             f"{exc}); the shipped table (sglang 0.5.23) stands in")
            return shipped_flag_table()
    return _ENGINE_TABLES[key]


def load_flag_history(path: str | Path | None = None) -> dict:
    """The shipped flag history (``workbench/engine/data/sglang-flag-history.json``): ``releases``
    (the releases read, in order), ``flags`` (``{flag: {field, fields, ranges: [[first, last], ...],
    releases: [...], deprecated: {release: note}}}``; ``field`` as first seen, ``fields`` every
    field it stored when that changed) and ``renames`` (``{old flag: [{new, field,
    since, how}]}``). Raises ``ValueError`` for a file not of this format."""
    doc, where = read_data_json(FLAG_HISTORY, path)
    if not (isinstance(doc, dict) and isinstance(doc.get("flags"), dict) and isinstance(doc.get("releases"), list)):
        raise ValueError(f"{where}: not a flag history (expected releases, flags, renames)")
    doc.setdefault("renames", {})
    return doc


# ---------------------------------------------------------------------------------------------
# What a flag means across releases (the shipped history).
# ---------------------------------------------------------------------------------------------

_HISTORY: dict | None = None


def flag_history() -> dict:
    """The shipped history (:func:`load_flag_history`), loaded once."""
    global _HISTORY
    if _HISTORY is None:
        _HISTORY = load_flag_history()
    return _HISTORY


def lifetime(flag: str, history: Mapping | None = None) -> str | None:
    """Where ``flag`` exists among the releases of the history, as text: ``"0.4.6–0.5.18"``,
    ``"0.4.6–0.5.9, 0.5.12"``; ``None`` when no release read has it."""
    row = (history or flag_history())["flags"].get(flag)
    if not row:
        return None
    return ", ".join(a if a == b else f"{a}–{b}" for a, b in row["ranges"])


_PLAIN_FLAG = re.compile(r"^(--[A-Za-z0-9][\w-]*)(?:=(\S+))?$")


def replacements(flag: str, table: FlagTable, history: Mapping | None = None) -> list[dict]:
    """What ``table``'s release calls ``flag``: ``[{flag, value, how, note}]`` — ``flag``: a flag
    of ``table``; ``value``: the fixed value the rename names (``--cuda-graph-backend-prefill=disabled``)
    or ``None``; ``how``: ``new_flag`` / ``field`` / ``prefix`` (the history's rename) or
    ``older-name`` (a newer flag on an older release: the flag a later release renamed to it,
    ``--cuda-graph-max-bs-decode`` on 0.5.9 → ``--cuda-graph-max-bs``) or ``same-field`` (the table
    has a flag storing the field the flag stored). Renames are followed
    through up to four releases' worth of hops (``--nsa-decode`` → ``--nsa-decode-backend`` →
    ``--dsa-decode-backend``). A rename whose target is not one flag (``--cuda-graph-backend-{decode,prefill}=disabled``,
    ``--attn-dp-size <dp-size>``) comes back with ``flag`` ``None`` and the text in ``note``."""
    hist = history or flag_history()
    out: list[dict] = []
    seen = {flag}
    frontier = [flag]
    for _ in range(4):
        nxt: list[str] = []
        for f in frontier:
            for r in hist["renames"].get(f, []):
                m = _PLAIN_FLAG.match(r["new"])
                if not m:
                    out.append({"flag": None, "value": None, "how": r["how"], "note": r["new"]})
                    continue
                new, value = m.group(1), m.group(2)
                if new in seen:
                    continue
                seen.add(new)
                res = table.resolve(new)
                if res.status == "known" and new in table.aliases:
                    out.append({"flag": table.aliases[new], "value": value, "how": r["how"], "note": r["new"]})
                else:
                    nxt.append(new)
        frontier = nxt
    if not any(o["flag"] for o in out):  # a newer name on an older release: the older name it replaced
        back, older = [flag], {flag}
        for _ in range(4):
            nxt = []
            for f in back:
                for old, rows in hist["renames"].items():
                    if old in older or not any((_PLAIN_FLAG.match(r["new"]) or [None, None])[1] == f for r in rows):
                        continue
                    older.add(old)
                    if old in table.flags and not table.flags[old].get("deprecated"):
                        out.append({"flag": old, "value": None, "how": "older-name", "note": f"renamed {flag} later"})
                    else:
                        nxt.append(old)
            back = nxt
    if not any(o["flag"] for o in out):
        row = hist["flags"].get(flag) or {}
        for fld in row.get("fields") or ([row["field"]] if row.get("field") else []):
            for new in table.by_field.get(fld, []):
                if new != flag and not table.flags[new].get("deprecated") and all(o["flag"] != new for o in out):
                    out.append({"flag": new, "value": None, "how": "same-field", "note": f"stores {fld}"})
    return out
