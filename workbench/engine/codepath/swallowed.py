"""Swallowed errors and silent fallbacks on a map's path: :func:`swallowed_on_path` ->
[:class:`Swallowed`] (broad handlers that neither log nor re-raise in the functions holding the
map's entries, and the entries marked silent). The facts only; the rule that reports them is
:mod:`workbench.rules.engine_source`.

Imports: :mod:`.ast_tools`, :mod:`.model`, :mod:`remote.probes` and :mod:`workbench.engine.source`.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass
from typing import Optional

from remote.probes import _probe_block_lines
from workbench.engine.codepath.ast_tools import _first_line, _is_broad, _logs_or_raises, _seg
from workbench.engine.codepath.model import CodePathMap
from workbench.engine.source import EngineSource, _walk_definitions

@dataclass(frozen=True)
class Swallowed:
    """A place on the path where an error or a missing value passes without a word.

    ``kind``: ``"handler"`` (a ``try`` whose broad handler neither logs nor re-raises) or
    ``"fallback"`` (a map entry marked silent: the fc width check, a ``params_dict`` test without
    ``else``). ``path``/``line``: the file on the box and the line reported (for a handler, the
    ``except`` line itself, SGLang 0.5.23 ``spec_aux_hidden_state.py:195``); ``function``: the
    enclosing function's qualified name. Handlers: ``try_line``, ``guarded_line`` (the guarded
    statement, as context: the one that reads ``eagle_config``, else the ``try`` body's first;
    0.5.23 ``:188``), ``guarded`` (its source text, first line), ``handler`` (``"except
    Exception: (line N)"``), ``fallback`` (what the handler does instead), ``about`` (what the
    ``try`` guards). Fallbacks: ``code`` (the line's text), ``what`` and ``detail`` of the entry."""

    kind: str
    path: str
    line: int
    function: Optional[str]
    rel: str
    try_line: Optional[int] = None
    guarded_line: Optional[int] = None
    guarded: Optional[str] = None
    handler: Optional[str] = None
    handler_kind: Optional[str] = None
    fallback: Optional[str] = None
    about: Optional[str] = None
    code: Optional[str] = None
    what: Optional[str] = None
    detail: Optional[str] = None


def _enclosing_function(tree: ast.AST, line: int) -> Optional[tuple[str, ast.AST]]:
    best = None
    for qual, node in _walk_definitions(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                _first_line(node) <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best[1].lineno:
                best = (qual, node)
    return best


def swallowed_on_path(src: EngineSource, cmap: CodePathMap) -> list[Swallowed]:
    """The swallowed errors and silent fallbacks on the path of ``cmap``, in file order.

    Scanned: every function that holds a found entry (the function itself, for entries that
    are definitions). Reported: each ``try`` with a broad handler (bare ``except``, ``except
    Exception``/``BaseException``, alone or in a tuple) whose body neither raises nor calls a
    logger, ``warnings``, ``print`` or ``traceback`` (the workbench's own probe blocks are not
    counted); and each entry marked silent. Files are read through ``src`` (each once)."""
    out: list[Swallowed] = []
    seen: set[tuple[str, int]] = set()
    functions: dict[tuple[str, str], ast.AST] = {}
    for e in cmap.entries:
        if not e.found:
            continue
        rel = src.rel(e.file)
        tree = src.tree(rel)
        if tree is None:
            continue
        enc = _enclosing_function(tree, e.line)
        if enc is not None:
            functions.setdefault((rel, enc[0]), enc[1])
    for (rel, qual), fn in functions.items():
        text = src.read(rel) or ""
        in_probe = _probe_block_lines(text.splitlines())
        for node in ast.walk(fn):
            if not isinstance(node, ast.Try) or node.lineno - 1 in in_probe:  # the workbench's own probes
                continue
            for h in node.handlers:
                if not _is_broad(h) or _logs_or_raises(h.body):
                    continue
                path = src.path(rel)
                if (path, h.lineno) in seen:
                    continue
                seen.add((path, h.lineno))
                guarded = next((s for s in node.body if "eagle_config" in _seg(text, s)), node.body[0])
                kind = f"except {_seg(text, h.type)}" if h.type is not None else "except"
                reads = " ".join(_seg(text, s) for s in node.body)
                out.append(Swallowed(
                    "handler", path, h.lineno, qual, posixpath.relpath(path, src.root), try_line=node.lineno,
                    guarded_line=guarded.lineno, guarded=_seg(text, guarded).splitlines()[0].strip(),
                    handler=f"{kind}: (line {h.lineno})", handler_kind=kind,
                    fallback="; ".join(_seg(text, s) for s in h.body),
                    about="the draft's eagle_config" if "eagle_config" in reads else "its try block"))
    for e in cmap.entries:
        if not e.found or not e.silent or (e.key == "eagle-config-read" and cmap.engine == "sglang"):
            continue
        lines = (src.read(src.rel(e.file)) or "").splitlines()
        for line in (e.line,) + e.also:
            if (e.file, line) in seen:
                continue
            seen.add((e.file, line))
            code = lines[line - 1].strip() if line <= len(lines) else ""
            out.append(Swallowed("fallback", e.file, line, e.function, posixpath.relpath(e.file, src.root),
                                 code=code, what=e.what, detail=e.detail))
    return out
