"""AST and source-text helpers the code-path maps read engine source with: every statement with its
ancestors, in file order (:func:`_in_order`); the expressions a statement owns (:func:`_own_exprs`);
a statement's first line, decorators included (:func:`_first_line`); the enclosing function's
qualified name (:func:`_function_of`); broad ``except`` handlers and whether a handler logs or
re-raises (:func:`_is_broad`, :func:`_logs_or_raises`); a node's source text (:func:`_seg`); and
the note on a file that holds workbench probe blocks (:func:`_probe_note`). Used by SGLang's map
(this package) and vLLM's (:mod:`workbench.engine.codepath_vllm`); they take parsed trees and
text, never a box.

Imports: the standard library and :mod:`remote.probes` (the probe-block markers) only; the lowest
module of the package.
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Iterator, Optional, Sequence

from remote.probes import _probe_block_lines


def _own_exprs(stmt: ast.stmt) -> Iterator[ast.AST]:
    """Expression nodes that belong to ``stmt`` itself (its test, targets, value, decorators...),
    not to the statements nested in its bodies."""
    for _, value in ast.iter_fields(stmt):
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, (ast.expr, ast.withitem, ast.keyword, ast.comprehension)):
                yield from ast.walk(item)


def _statements(tree: ast.AST) -> Iterator[tuple[ast.stmt, tuple[ast.AST, ...]]]:
    """Every statement with its ancestors (outermost first)."""
    stack: list[tuple[ast.AST, tuple[ast.AST, ...]]] = [(tree, ())]
    while stack:
        node, parents = stack.pop()
        for child in reversed(list(ast.iter_child_nodes(node))):
            if isinstance(child, ast.stmt):
                yield child, parents + (node,)
            if isinstance(child, (ast.stmt, ast.ExceptHandler, ast.Module)) or hasattr(child, "body"):
                stack.append((child, parents + (node,)))


def _in_order(tree: ast.AST) -> list[tuple[ast.stmt, tuple[ast.AST, ...]]]:
    return sorted(_statements(tree), key=lambda item: (item[0].lineno, item[0].col_offset))


def _function_of(parents: Sequence[ast.AST]) -> Optional[str]:
    """The qualified name of the innermost function/class among ``parents`` (``None`` at module level)."""
    names = [p.name for p in parents if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return ".".join(names) or None


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno] + [d.lineno for d in decorators])


def _calls_attr(node: ast.AST, attr: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr


def _is_broad(handler: ast.ExceptHandler) -> bool:
    t = handler.type
    names = [t] if not isinstance(t, ast.Tuple) else list(t.elts)
    return t is None or any(isinstance(n, ast.Name) and n.id in ("Exception", "BaseException") for n in names)


_LOG_NAMES = {"logger", "logging", "log", "LOGGER", "_logger", "warnings"}
_LOG_FUNCS = {"print", "warn", "print_warning", "print_exc", "warning_once", "info_once", "print_info_once",
              "print_warning_once"}


def _logs_or_raises(body: Sequence[ast.stmt]) -> bool:
    """True when the handler body raises, or calls a logger / warnings / print / traceback."""
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Raise):
                return True
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in _LOG_FUNCS:
                    return True
                if isinstance(f, ast.Attribute):
                    base = f.value
                    while isinstance(base, ast.Attribute):
                        base = base.value
                    if (isinstance(base, ast.Name) and (base.id in _LOG_NAMES or base.id == "traceback")) \
                            or f.attr in _LOG_FUNCS or f.attr in ("exception", "error", "warning"):
                        return True
    return False


@functools.lru_cache(maxsize=32)
def _source_lines(text: str) -> list[str]:
    """Lines of ``text`` with their endings, split as Python's tokenizer does (on ``\\n``)."""
    return re.split(r"(?<=\n)", text)


def _seg(text: str, node: ast.AST) -> str:
    """The source text of ``node`` (as ``ast.get_source_segment``, which re-splits the whole file on
    every call: too slow for an 85 KB file scanned node by node). Offsets are UTF-8 byte columns."""
    end = getattr(node, "end_lineno", None)
    if end is None or getattr(node, "lineno", None) is None:
        return ""
    lines = _source_lines(text)
    first, last = node.lineno - 1, end - 1
    if last >= len(lines):
        return ""
    if first == last:
        return lines[first].encode("utf-8")[node.col_offset:node.end_col_offset].decode("utf-8", "replace")
    head = lines[first].encode("utf-8")[node.col_offset:].decode("utf-8", "replace")
    tail = lines[last].encode("utf-8")[:node.end_col_offset].decode("utf-8", "replace")
    return head + "".join(lines[first + 1:last]) + tail


def _probe_note(lines: Sequence[str], line: int) -> Optional[str]:
    """When the file holds workbench probe blocks: how many, and how many of their lines come
    before ``line`` (so the original file's number is ``line`` minus that)."""
    blocked = _probe_block_lines(list(lines))
    if not blocked:
        return None
    tags = sum(1 for i in blocked if lines[i].lstrip().startswith("# >>> eagle-workbench probe"))
    above = sum(1 for i in blocked if i < line - 1)
    return (f"this file holds {tags} workbench probe(s); line numbers are the patched file's"
            + (f" (line {line - above} in the original)" if above else ""))
