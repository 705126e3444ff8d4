"""A probe's text and where it goes in a file's text: the marker lines, :func:`render_block` (the
block's source), the probe blocks already in a file (:func:`probe_blocks`,
:func:`original_line_count`), function bodies and statement starts, the anchor line a probe goes
before (``_find_anchor``), and :func:`default_tag`. Pure functions of text: no box is called.

Imports only the standard library, ``remote.errors`` (``remote.box`` for a type),
:mod:`remote.probes.record` and :mod:`remote.probes.guard`.
"""

from __future__ import annotations

import ast
import posixpath
import re
from typing import Optional, Sequence, Union

from ..box import Box
from ..errors import AnchorAmbiguous, AnchorNotFound
from .guard import _GATE_LINES, guarded_source
from .record import MAX_PRINTS, MAX_REPR

BEGIN_MARKER = "# >>> eagle-workbench probe {tag} >>>"
END_MARKER = "# <<< eagle-workbench probe {tag} <<<"
_MARKER_RE = re.compile(r"^\s*# (>>>|<<<) eagle-workbench probe (\S+) (>>>|<<<)\s*$")

#: The rank of the printing process, appended to the line's ``who`` as `` rank=R`` when it can be
#: known inside that process: ``torch.distributed.get_rank()`` when torch.distributed is imported
#: and initialised (SGLang's scheduler processes are: SGLang 0.5.23
#: ``srt/model_executor/model_runner.py`` ``init_torch_distributed``), else the ``TP<r>`` of the
#: process title in ``/proc/self/cmdline`` (``sglang::scheduler_TP3``,
#: ``sglang::scheduler_DP0_TP0_EP0``, ``sglang::scheduler_PP2_TP1``: SGLang 0.5.23
#: ``srt/managers/scheduler.py`` ``run_scheduler_process`` sets them with setproctitle), else
#: nothing (no rank printed, never a guess). torch is never imported by the probe; the builtins
#: come from ``_ewb_b`` (the probed frame may shadow ``open``).
RANK_LINES = [
    "try:",
    "    _ewb_rank = None",
    "    _ewb_td = _ewb_sys.modules.get('torch.distributed')",
    "    if _ewb_td is not None and _ewb_td.is_available() and _ewb_td.is_initialized():",
    "        _ewb_rank = _ewb_b.int(_ewb_td.get_rank())",
    "    else:",
    "        with _ewb_b.open('/proc/self/cmdline', 'rb') as _ewb_f:",
    "            _ewb_title = _ewb_f.read().split(b'\\0')[0].decode('utf-8', 'replace')",
    "        if _ewb_title.startswith('sglang::'):",
    "            import re as _ewb_re",
    "            _ewb_m = _ewb_re.search(r'(?:^|_)TP(\\d+)', _ewb_title.split('::', 1)[1])",
    "            _ewb_rank = _ewb_b.int(_ewb_m.group(1)) if _ewb_m else None",
    "    if _ewb_rank is not None:",
    "        _ewb_who += ' rank=%d' % _ewb_rank",
    "except Exception:  # the rank cannot be read here: the line is printed without one",
    "    _ewb_rank = None",
]


# -- the block ---------------------------------------------------------------------------------


def render_block(
    tag: str,
    exprs: Sequence[str],
    indent: str = "",
    newline: str = "\n",
    max_repr: int = MAX_REPR,
    *,
    once_per: Optional[str] = None,
    max_prints: int = MAX_PRINTS,
    when: Optional[str] = None,
) -> str:
    """The probe's source text (marker lines included), indented by ``indent``.

    Each value is printed as its ``repr`` cut to ``max_repr`` characters, on one line
    ``[probe:TAG pgid=G pid=P rank=R] expr=value ...`` to the process's stderr, flushed (`` rank=R``
    only where the rank can be known: :data:`RANK_LINES`). ``G`` is
    ``os.getpgrp()`` of the printing process (a server launched by ``Box.launch_server`` is its
    own process group and the processes it spawns inherit it: the pgid names the launch), ``P``
    its ``os.getpid()`` (one TP rank, say); both are ``?`` when they cannot be read. They are
    read only when the line is printed (never on the calls that print nothing).

    Without ``once_per`` the block prints once per process. With ``once_per`` (an expression) it
    prints the first time each distinct ``repr(once_per)`` is seen in the process, at most
    ``max_prints`` lines per process (after that the key is not even evaluated). With ``when``
    (an expression) it prints only on a call where ``when`` is true: the condition is evaluated
    first, on each call until the probe has printed (once per process) or reached
    ``max_prints`` (``once_per``), and a call where it is false uses up nothing.

    Everything is evaluated inside the block's ``try``: an expression that raises prints
    ``expr=<error:...>``; a key or a condition that raises (or a print that fails) prints one
    ``<probe failed:...>`` line, once per process, and nothing ever raises into the code. When
    stderr itself cannot be written the failure is kept in
    ``sys._eagle_workbench_probes_lost[TAG]`` (there is nowhere left to print it). The key and the
    condition are not printed: list them among ``exprs`` to see them. Pick cheap host-side ones (a
    shape, an int, a name): ``repr`` of a tensor's values would synchronise the GPU (and fail
    inside CUDA-graph capture).
    """
    exprs_code = [guarded_source(e) for e in exprs]
    once_code = guarded_source(once_per, what="once_per") if once_per is not None else None
    when_code = guarded_source(when, what="when") if when is not None else None
    head = f"[probe:{tag}]"  # the tag as grep finds it in the source; printed as [probe:TAG pgid=G pid=P rank=R]
    cut = f"_ewb_cut = lambda s: s if _ewb_b.len(s) <= {int(max_repr)} else s[:{int(max_repr)}] + '...'"
    who = [
        "try:",
        "    import os as _ewb_os",
        "    _ewb_who = ' pgid=%d pid=%d' % (_ewb_os.getpgrp(), _ewb_os.getpid())",
        "except Exception:  # not POSIX: the line is still printed, its launch unknown",
        "    _ewb_who = ' pgid=? pid=?'",
        *RANK_LINES,
    ]
    # The block's own builtins come from the builtins module: the probed frame may shadow any name.
    body = [BEGIN_MARKER.format(tag=tag), "try:", "    import sys as _ewb_sys, builtins as _ewb_b"]
    if once_per is None:
        body += [
            "    _ewb_fired = _ewb_sys.__dict__.setdefault('_eagle_workbench_probes_fired', _ewb_b.set())",
            f"    if {tag!r} not in _ewb_fired:",
        ]
        pad = "        "
        body += [pad + line for line in _GATE_LINES]
        if when is not None:
            body += [pad + "_ewb_g.z()", pad + f"if {when_code}:"]
            pad += "    "
        body.append(pad + f"_ewb_fired.add({tag!r})")
    else:
        body += [
            "    _ewb_seen = _ewb_sys.__dict__.setdefault('_eagle_workbench_probes_seen', {})"
            + f".setdefault({tag!r}, _ewb_b.set())",
            f"    if _ewb_b.len(_ewb_seen) < {int(max_prints)}:",
        ]
        pad = "        "
        body += [pad + line for line in _GATE_LINES]
        if when is not None:
            body += [pad + "_ewb_g.z()", pad + f"if {when_code}:"]
            pad += "    "
        body += [
            pad + "_ewb_g.z()",
            pad + f"_ewb_key = _ewb_b.repr({once_code})",
            pad + "if _ewb_key not in _ewb_seen:",
            pad + "    _ewb_seen.add(_ewb_key)",
        ]
        pad += "    "
    body += [pad + "_ewb_parts = []", pad + cut]
    for expr, code in zip(exprs, exprs_code):
        body += [
            pad + "try:",
            pad + "    _ewb_g.z()",
            pad + f"    _ewb_parts.append({expr + '='!r} + _ewb_cut(_ewb_b.repr({code})))",
            pad + "except Exception as _ewb_exc:",
            pad + f"    _ewb_parts.append({expr + '=<error:'!r} + _ewb_b.repr(_ewb_exc) + '>')",
        ]
    body += [pad + line for line in who]
    body.append(pad + f"_ewb_b.print({head!r}[:-1] + _ewb_who + '] ' + ' '.join(_ewb_parts).replace('\\n', '\\\\n'), "
                      "file=_ewb_sys.stderr, flush=True)")
    body += [
        "except Exception as _ewb_exc:  # a probe must never break the code it watches",
        "    try:",
        "        import sys as _ewb_sys, builtins as _ewb_b",
        "        _ewb_failed = _ewb_sys.__dict__.setdefault('_eagle_workbench_probes_failed', _ewb_b.set())",
        f"        if {tag!r} not in _ewb_failed:",
        f"            _ewb_failed.add({tag!r})",
        *("            " + line for line in who),
        f"            _ewb_b.print({head!r}[:-1] + _ewb_who + '] <probe failed:' + _ewb_b.repr(_ewb_exc)[:{int(max_repr)}]"
        " + '>', file=_ewb_sys.stderr, flush=True)",
        "    except Exception as _ewb_lost:  # stderr cannot be written: nowhere left to say it but here",
        "        __import__('sys').__dict__.setdefault('_eagle_workbench_probes_lost', {})"
        f"[{tag!r}] = __import__('builtins').repr(_ewb_lost)",
        END_MARKER.format(tag=tag),
    ]
    return "".join(indent + line + newline for line in body)


def _split_lines(text: str) -> list[str]:
    """Lines with their endings kept; numbering matches Python's for ``\\n`` and ``\\r\\n``."""
    lines = re.split(r"(?<=\n)", text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _probe_block_lines(lines: Sequence[str]) -> set[int]:
    """0-based indices of lines inside any probe's marker block (markers included)."""
    inside: set[int] = set()
    open_at: Optional[int] = None
    for i, line in enumerate(lines):
        m = _MARKER_RE.match(line)
        if m and m.group(1) == ">>>":
            open_at = i
        elif m and m.group(1) == "<<<" and open_at is not None:
            inside.update(range(open_at, i + 1))
            open_at = None
    return inside


def probe_blocks(text: str) -> list[tuple[int, int]]:
    """The probe marker blocks in a file's ``text``: ``(first, last)`` 1-based line numbers of each
    block, markers included, in file order (empty: the file holds no probe)."""
    lines = _split_lines(text)
    inside = sorted(_probe_block_lines(lines))
    blocks: list[tuple[int, int]] = []
    for i in inside:
        if blocks and blocks[-1][1] == i:  # i is 0-based: the line after the block's last (1-based)
            blocks[-1] = (blocks[-1][0], i + 1)
        else:
            blocks.append((i + 1, i + 1))
    return blocks


def original_line_count(text: str) -> int:
    """How many lines ``text`` has without its probe blocks: the original file's line count
    (the lines of :func:`probe_blocks` not counted)."""
    lines = _split_lines(text)
    return len(lines) - len(_probe_block_lines(lines))


def _function_bodies(text: str, lines: Sequence[str], name: str) -> list[tuple[int, int]]:
    """1-based inclusive (first, last) body line ranges of functions called ``name``.

    ``name`` may be qualified (``LlamaModel.forward``). Uses ``ast`` when this Python can parse
    the file, else an indentation scan of ``def name(``.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    ranges: list[tuple[int, int]] = []
    if tree is not None:

        def visit(node: ast.AST, prefix: tuple[str, ...]) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    qual = prefix + (child.name,)
                    dotted = ".".join(qual)
                    if not isinstance(child, ast.ClassDef) and (dotted == name or dotted.endswith("." + name)):
                        ranges.append((child.body[0].lineno, child.end_lineno or child.body[-1].lineno))
                    visit(child, qual)
                else:
                    visit(child, prefix)

        visit(tree, ())
        return ranges
    short = name.rsplit(".", 1)[-1]
    def_rx = re.compile(rf"^(\s*)(?:async\s+)?def\s+{re.escape(short)}\s*\(")
    for i, line in enumerate(lines):
        m = def_rx.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        last = i
        started = False
        for j in range(i + 1, len(lines)):
            stripped = lines[j].strip()
            if not stripped or stripped.startswith("#"):
                continue
            cur = len(lines[j]) - len(lines[j].lstrip())
            if cur <= indent and not stripped.startswith(")"):
                break
            if cur > indent:
                started = True
            last = j
        if started:
            ranges.append((i + 2, last + 1))
    return ranges


def _statement_starts(text: str) -> Optional[dict[int, int]]:
    """Map 1-based line -> 1-based first line of the statement containing it, for lines where a
    statement (or its first decorator) starts. ``None`` when this Python cannot parse the file."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    starts: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            first = node.lineno
            decorators = getattr(node, "decorator_list", None)
            if decorators:
                first = min(d.lineno for d in decorators)
            starts[first] = first
    return starts


def _find_anchor(
    text: str, lines: Sequence[str], before: Union[str, int], function: Optional[str], path: str, box: Box
) -> int:
    """0-based index of the line the probe goes before."""
    blocked = _probe_block_lines(lines)
    if function:
        bodies = _function_bodies(text, lines, function)
        if not bodies:
            raise AnchorNotFound(f"no function named {function!r}", path=path, box=box.name)
        allowed = {i for first, last in bodies for i in range(first - 1, last)}
    else:
        allowed = set(range(len(lines)))
    if isinstance(before, bool) or not isinstance(before, (int, str)):
        raise TypeError(f"before must be a regex (str) or a 1-based line number (int), got {before!r}")
    if isinstance(before, int):
        idx = before - 1
        if not 0 <= idx < len(lines):
            raise AnchorNotFound(f"line {before} is outside the file (it has {len(lines)} lines)", path=path, box=box.name)
        if idx not in allowed:
            raise AnchorNotFound(f"line {before} is not inside function {function!r}", path=path, box=box.name)
        if idx in blocked:
            raise AnchorNotFound(f"line {before} is inside another probe's block", path=path, box=box.name)
        if not lines[idx].strip():
            raise AnchorNotFound(f"line {before} is blank; anchor on a statement", path=path, box=box.name)
    else:
        try:
            rx = re.compile(before)
        except re.error as exc:
            raise AnchorNotFound(f"anchor regex {before!r} is invalid ({exc})", path=path, box=box.name) from None
        hits = [i for i in sorted(allowed) if i not in blocked and rx.search(lines[i].rstrip("\r\n"))]
        where = f" inside function {function!r}" if function else ""
        if not hits:
            raise AnchorNotFound(f"anchor regex {before!r} matches no line{where}", path=path, box=box.name)
        if len(hits) > 1:
            numbers = [i + 1 for i in hits]
            restrict = "" if function else "restrict it with --function (function= in Python), "
            raise AnchorAmbiguous(
                f"anchor regex {before!r} matches {len(hits)} lines{where} (lines {numbers[:20]}); "
                f"make it more specific, {restrict}or give a line number (--line N; before=N in Python)",
                lines=numbers,
                path=path,
                box=box.name,
            )
        idx = hits[0]
    starts = _statement_starts(text)
    if starts is not None and (idx + 1) not in starts:
        owner = max((s for s in starts if s <= idx + 1), default=None)
        raise AnchorNotFound(
            f"line {idx + 1} does not start a statement"
            + (f" (it continues the statement starting at line {owner}, or is an else/except/elif clause)" if owner else "")
            + "; anchor on the first line of a statement",
            path=path,
            box=box.name,
        )
    return idx


def default_tag(path: str, line: int, taken: set[str]) -> str:
    """The default tag of a probe at ``line`` of ``path``: ``<file stem>-L<line>`` (valid per
    :data:`TAG_RE`), with ``-2``, ``-3``... when ``taken`` (the journal's tags) already holds it. ``line``: the anchor's line in the original file's numbering
    (other probes' blocks not counted)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", posixpath.splitext(posixpath.basename(path))[0]).lstrip("_.-")
    base = f"{(stem or 'probe')[:48]}-L{line}"
    tag, n = base, 2
    while tag in taken:
        tag, n = f"{base}-{n}", n + 1
    return tag
