"""The EAGLE-3 code path in the box's engine source: a map of (file, line, what happens there),
a scan of that path for swallowed errors and silent fallbacks, and named probe recipes.

Every entry is *found* in the box's own source with :mod:`ast` (a statement of a given shape, in
the files where SGLang 0.5.23 keeps it, else in the files a ``grep -F`` for a token names); its
line is the line of that statement in that version. An entry that is not found says where it
was looked for and is never given a line.

The path, in the order a request meets it (SGLang 0.5.23 file in brackets):

1. ``spec-algorithm-is-eagle3``: ``SpeculativeAlgorithm.is_eagle3`` is ``== EAGLE3`` only
   (``srt/speculative/spec_info.py``).
2. ``aux-capture-gate``: ``if spec_algorithm.is_eagle3():`` around the aux capture set-up
   (``model_runner_components/spec_aux_hidden_state.py``, ``_resolve_eagle_aux_hidden_state``).
3. ``eagle-config-read``: the draft's ``eagle_config`` read inside ``try: ... except
   Exception:`` that falls back to default layers (same function).
4. ``capture-configured``: ``model.set_eagle3_layers_to_capture(ids)`` outside the model files
   (``model_runner_components/attention_backend_setup.py``).
5. ``target-offset-rule``: the target class's ``set_eagle3_layers_to_capture`` (``srt/models/llama.py``:
   ``[val + 1 for val in layer_ids]``).
6. ``target-capture-point``: the target forward's ``i in self.layers_to_capture`` test.
7. ``draft-fc-defined`` / 8. ``draft-fc-width-check``: the draft's ``self.fc = Linear(...)`` and
   ``if hidden_states.shape[-1] != embeds.shape[-1]:`` (``srt/models/llama_eagle3.py``).
9. ``draft-params-dict`` / 10. ``draft-weight-renames`` / 11. ``draft-weight-drop`` /
   12. ``draft-d2t-read``: the draft's ``load_weights``: ``params_dict =
   dict(self.named_parameters())`` (its first statement: nothing is loaded yet), the legacy-name
   map, the ``if param_name in params_dict:`` without ``else`` (silent drop), ``hot_token_id = d2t
   + arange``.
13. ``token-map-init`` / 14. ``lm-head-shared`` / 15. ``d2t-use``: the draft worker's
    ``init_token_map``, ``init_lm_head`` and ``self.hot_token_id[...]``
    (``srt/speculative/eagle_worker_v2.py``).

The sandbox box's engine (``workbench/sandbox/srt``) mirrors those names, so the same map and
recipes work on it.
"""

from __future__ import annotations

import ast
import functools
import html
import posixpath
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional, Sequence

from remote.probes import _probe_block_lines
from workbench.checkpoint import CheckpointError, read_draft_facts, read_target_facts
from workbench.checkpoint.paths import box_env, resolve_model_path
from workbench.engine.launch import LaunchCommand
from workbench.engine.modelled import DRAFT_CLASS_FILES
from workbench.engine.source import EngineSource, _walk_definitions

__all__ = ["PathEntry", "CodePathMap", "LANDMARKS", "code_path_map", "DRAFT_CLASS_FILES", "map_for_launch",
           "Swallowed", "swallowed_on_path"]

SPEC_AUX_FILE = "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
MODEL_RUNNER_FILE = "srt/model_executor/model_runner.py"
WORKER_FILES = ("srt/speculative/eagle_worker_v2.py", "srt/speculative/eagle_worker.py")


@dataclass(frozen=True)
class PathEntry:
    """One place on the EAGLE-3 path. ``file`` is the absolute path on the box and ``line`` the
    1-based first line of the statement (``None`` for both when ``found`` is false); ``code`` that
    line's text; ``function`` the enclosing function's qualified name; ``detail`` what this
    version does there (e.g. the evaluated offset rule); ``also`` other lines of the same kind;
    ``looked_in`` where it was searched; ``silent`` marks a silent fallback; ``note`` says when the
    file holds workbench probes (its line numbers are then the patched file's); ``also_code``: the
    text of each ``also`` line."""

    key: str
    what: str
    found: bool
    file: Optional[str] = None
    line: Optional[int] = None
    code: Optional[str] = None
    function: Optional[str] = None
    detail: Optional[str] = None
    also: tuple[int, ...] = ()
    looked_in: str = ""
    silent: bool = False
    note: Optional[str] = None
    also_code: tuple[str, ...] = ()

    @property
    def location(self) -> str:
        """``file:line``, or ``not found`` with where it was looked for."""
        return f"{self.file}:{self.line}" if self.found else f"not found in this version (looked in {self.looked_in})"

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["also"] = list(self.also)
        d["also_code"] = list(self.also_code)
        d["location"] = self.location
        return d


@dataclass
class CodePathMap:
    """The map for one engine: ``root``/``version`` of the package, ``entries`` in path order,
    the ``target_arch``/``draft_arch`` the model-specific entries were read for."""

    root: str
    version: Optional[str]
    target_arch: str
    draft_arch: str
    entries: list[PathEntry] = field(default_factory=list)

    def entry(self, key: str) -> PathEntry:
        """The entry ``key``; raises ``KeyError`` naming the known keys."""
        for e in self.entries:
            if e.key == key:
                return e
        raise KeyError(f"no entry {key!r} in the map (entries: {', '.join(e.key for e in self.entries)})")

    @property
    def missing(self) -> list[str]:
        return [e.key for e in self.entries if not e.found]

    def to_dict(self) -> dict:
        return {"root": self.root, "version": self.version, "target_arch": self.target_arch,
                "draft_arch": self.draft_arch, "entries": [e.to_dict() for e in self.entries]}

    def to_text(self) -> str:
        rows = [f"EAGLE-3 code path: {self.root} (version {self.version or 'unknown'}; "
                f"target {self.target_arch}, draft {self.draft_arch})"]
        for i, e in enumerate(self.entries, 1):
            rel = posixpath.relpath(e.file, self.root) if e.file else None
            where = f"{rel}:{e.line}" if e.found else "NOT FOUND in this version"
            rows.append(f"{i:2d}. {e.key:<26} {where}" + ("   [silent]" if e.silent else ""))
            rows.append(f"      {e.what}")
            if e.found and e.code:
                rows.append(f"      | {e.code.strip()}")
            if e.detail:
                rows.append(f"      {e.detail}")
            if e.found and e.also:
                rows.append(f"      also at line(s) {', '.join(map(str, e.also))}")
            if e.note:
                rows.append(f"      note: {e.note}")
            if not e.found:
                rows.append(f"      looked in: {e.looked_in}")
        return "\n".join(rows)

    def _repr_html_(self) -> str:
        head = (f"<h4>EAGLE-3 code path — {html.escape(self.root)} (version "
                f"{html.escape(self.version or 'unknown')})</h4>")
        cell = "text-align:left;vertical-align:top;white-space:normal;overflow-wrap:anywhere"
        body = "".join(
            f"<tr><td style='{cell}'>{html.escape(e.key)}</td><td style='{cell}'><code>"
            f"{html.escape(posixpath.relpath(e.file, self.root) + ':' + str(e.line)) if e.found else 'not found'}"
            f"</code></td><td style='{cell}'>{html.escape(e.what)}"
            f"{'<br><code>' + html.escape(e.code.strip()) + '</code>' if e.found and e.code else ''}"
            f"{'<br>' + html.escape(e.detail) if e.detail else ''}</td></tr>"
            for e in self.entries)
        return head + (f"<table style='table-layout:fixed;width:100%'><colgroup><col style='width:14%'>"
                       f"<col style='width:26%'><col style='width:60%'></colgroup><tr><th style='{cell}'>entry</th>"
                       f"<th style='{cell}'>file:line</th><th style='{cell}'>what happens</th></tr>{body}</table>")


# ---------------------------------------------------------------------------------------------
# AST helpers
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Landmarks
# ---------------------------------------------------------------------------------------------


@dataclass
class _Ctx:
    src: EngineSource
    target_arch: str
    draft_arch: str
    aux_ids: Optional[list[int]]
    num_layers: Optional[int]
    target_files: tuple[str, ...] = ()
    draft_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Landmark:
    """How to find one entry: statements in ``files(ctx)`` (else in the files holding ``token``,
    restricted by ``where``) for which ``match(stmt, parents, text)`` is true; the first in file
    order is the entry, the others go to ``also``. ``detail(stmt, parents, text, ctx)`` adds what
    this version does there."""

    key: str
    what: str
    token: str
    files: Callable[[_Ctx], Sequence[str]]
    match: Callable[[ast.stmt, tuple, str], bool]
    where: Callable[[str], bool] = lambda rel: rel.startswith("srt/")
    detail: Optional[Callable[[ast.stmt, tuple, str, _Ctx], Optional[str]]] = None
    silent: bool = False
    grep_fallback: bool = True


def _m_is_eagle3_def(stmt, parents, text):
    return isinstance(stmt, ast.FunctionDef) and stmt.name == "is_eagle3"


def _d_is_eagle3_def(stmt, parents, text, ctx):
    rets = [n for n in ast.walk(stmt) if isinstance(n, ast.Return)]
    return f"returns: {_seg(text, rets[0].value)}" if rets and rets[0].value is not None else None


def _m_gate(stmt, parents, text):
    return (isinstance(stmt, ast.If) and any(_calls_attr(n, "is_eagle3") for n in ast.walk(stmt.test))
            and "aux_hidden_state" in "".join(_seg(text, s) for s in stmt.body))


def _m_eagle_config_try(stmt, parents, text):
    return (isinstance(stmt, ast.Try) and any(_is_broad(h) for h in stmt.handlers)
            and any("eagle_config" in _seg(text, s) for s in stmt.body))


def _d_eagle_config_try(stmt, parents, text, ctx):
    h = next(h for h in stmt.handlers if _is_broad(h))
    body = "; ".join(_seg(text, s) for s in h.body)
    kind = f"except {_seg(text, h.type)}" if h.type is not None else "bare except"
    logs = "logs or re-raises" if _logs_or_raises(h.body) else "neither logs nor re-raises"
    return f"handler `{kind}:` at line {h.lineno} {logs}; it does: {body}"


def _m_capture_call(stmt, parents, text):
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    return any(_calls_attr(n, "set_eagle3_layers_to_capture") for n in _own_exprs(stmt))


def _m_capture_point(stmt, parents, text):
    for n in _own_exprs(stmt):
        if isinstance(n, ast.Compare) and any(isinstance(op, ast.In) for op in n.ops) and any(
                isinstance(c, ast.Attribute) and c.attr == "layers_to_capture" for c in n.comparators):
            return True
    return False


def _m_fc_defined(stmt, parents, text):
    return (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "fc"
                                                 and isinstance(t.value, ast.Name) and t.value.id == "self"
                                                 for t in stmt.targets)
            and isinstance(stmt.value, ast.Call))


def _d_fc_defined(stmt, parents, text, ctx):
    call = stmt.value
    args = [_seg(text, a) for a in call.args[:2]]
    return f"in_features = {args[0]}" + (f", out_features = {args[1]}" if len(args) > 1 else "") if args else None


def _m_width_check(stmt, parents, text):
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    t = stmt.test
    sides = [t.left] + list(t.comparators)
    return (len(t.ops) == 1 and isinstance(t.ops[0], ast.NotEq)
            and all(_seg(text, s).replace(" ", "").endswith(".shape[-1]") for s in sides)
            and any(_calls_attr(n, "fc") for s in stmt.body for n in ast.walk(s)))


def _d_width_check(stmt, parents, text, ctx):
    return (f"fc runs only when `{_seg(text, stmt.test)}`; with a 1×-wide input the branch is skipped "
            "and no error is raised")


def _m_renames(stmt, parents, text):
    return isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict) and any(
        isinstance(k, ast.Constant) and isinstance(k.value, str) and "midlayer" in k.value for k in stmt.value.keys)


def _d_renames(stmt, parents, text, ctx):
    pairs = [f"{k.value}→{v.value}" for k, v in zip(stmt.value.keys, stmt.value.values)
             if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)]
    return "substring renames: " + ", ".join(pairs)


def _in_load_weights(parents) -> bool:
    return any(isinstance(p, ast.FunctionDef) and p.name == "load_weights" for p in parents)


def _m_weight_drop(stmt, parents, text):
    return (isinstance(stmt, ast.If) and not stmt.orelse and _in_load_weights(parents)
            and isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1
            and isinstance(stmt.test.ops[0], ast.In)
            and isinstance(stmt.test.comparators[0], ast.Name) and stmt.test.comparators[0].id == "params_dict")


def _d_weight_drop(stmt, parents, text, ctx):
    return f"`{_seg(text, stmt.test)}` has no else: a name that matches no parameter is skipped silently"


def _m_params_dict(stmt, parents, text):
    if not (isinstance(stmt, ast.Assign) and _in_load_weights(parents) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == "params_dict"):
        return False
    value = stmt.value
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict"
            and len(value.args) == 1 and _calls_attr(value.args[0], "named_parameters"))


def _d_params_dict(stmt, parents, text, ctx):
    return (f"`{_seg(text, stmt)}`: every checkpoint name is looked up in it; a parameter no name reaches keeps "
            "the value it was created with (torch.empty, ones, a random init), with no warning")


def _m_d2t_read(stmt, parents, text):
    return (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "hot_token_id"
                                                 for t in stmt.targets)
            and "arange" in _seg(text, stmt.value))


def _d_d2t_read(stmt, parents, text, ctx):
    return f"`{_seg(text, stmt)}`: d2t holds offsets, target id = draft id + d2t[draft id]"


def _m_def(name):
    return lambda stmt, parents, text: isinstance(stmt, ast.FunctionDef) and stmt.name == name


def _m_lm_head(stmt, parents, text):
    return (isinstance(stmt, ast.If) and any(_calls_attr(n, "is_eagle3") for n in ast.walk(stmt.test))
            and any(isinstance(p, ast.FunctionDef) and p.name == "init_lm_head" for p in parents))


def _d_lm_head(stmt, parents, text, ctx):
    other = "".join(_seg(text, s) for s in stmt.orelse)
    return ("non-EAGLE3 branch calls set_embed_and_head (the target's lm_head replaces the draft's)"
            if "set_embed_and_head" in other else None)


def _m_d2t_use(stmt, parents, text):
    def uses(s):
        return isinstance(s, ast.Assign) and isinstance(s.value, ast.Subscript) and \
            _seg(text, s.value.value).replace(" ", "") == "self.hot_token_id"

    if isinstance(stmt, ast.If) and "hot_token_id" in _seg(text, stmt.test) and any(uses(s) for s in stmt.body):
        return True
    parent = parents[-1] if parents else None
    return uses(stmt) and not (isinstance(parent, ast.If) and "hot_token_id" in _seg(text, parent.test))


def _d_d2t_use(stmt, parents, text, ctx):
    if isinstance(stmt, ast.If):
        inner = next(s for s in stmt.body if isinstance(s, ast.Assign))
        return f"`{_seg(text, inner)}` (line {inner.lineno}) only when `{_seg(text, stmt.test)}`"
    return f"`{_seg(text, stmt)}`"


def _spec_aux_files(ctx):
    return (SPEC_AUX_FILE, MODEL_RUNNER_FILE)


LANDMARKS: tuple[Landmark, ...] = (
    Landmark("spec-algorithm-is-eagle3",
             "is_eagle3() is true only for EAGLE3: EAGLE (and its alias NEXTN) skips everything gated on it",
             "def is_eagle3", lambda c: ("srt/speculative/spec_info.py",), _m_is_eagle3_def, detail=_d_is_eagle3_def),
    Landmark("aux-capture-gate",
             "the target's aux hidden-state capture is set up only inside this EAGLE3 gate",
             "is_eagle3()", _spec_aux_files, _m_gate),
    Landmark("eagle-config-read",
             "the draft's eagle_config.eagle_aux_hidden_state_layer_ids is read inside a broad except: a missing "
             "or malformed eagle_config silently means the target's default aux layers",
             "eagle_config", _spec_aux_files, _m_eagle_config_try, detail=_d_eagle_config_try, silent=True),
    Landmark("capture-configured",
             "the runner applies the capture to the target: model.set_eagle3_layers_to_capture(layer_ids)",
             "set_eagle3_layers_to_capture(",
             lambda c: ("srt/model_executor/model_runner_components/attention_backend_setup.py", SPEC_AUX_FILE,
                        MODEL_RUNNER_FILE),
             _m_capture_call, where=lambda rel: rel.startswith("srt/") and not rel.startswith("srt/models/")),
    # target-offset-rule is computed from the target class (see _target_offset_rule)
    Landmark("target-capture-point",
             "in the target's forward the hidden state entering layer i is captured when i is in "
             "layers_to_capture (empty unless set_eagle3_layers_to_capture ran)",
             "layers_to_capture", lambda c: c.target_files, _m_capture_point, grep_fallback=False),
    Landmark("draft-fc-defined",
             "the draft's fc projects the concatenated aux states (target hidden × number of aux states) "
             "to its hidden size", "self.fc", lambda c: c.draft_files, _m_fc_defined, detail=_d_fc_defined,
             grep_fallback=False),
    Landmark("draft-fc-width-check",
             "fc is applied only when the input is wider than the embedding; a 1×-wide input (EAGLE: no aux "
             "capture) skips fc without an error", "shape[-1]", lambda c: c.draft_files, _m_width_check,
             detail=_d_width_check, silent=True, grep_fallback=False),
    Landmark("draft-params-dict",
             "load_weights starts by collecting the draft's parameters by name (nothing is loaded yet)",
             "params_dict", lambda c: c.draft_files, _m_params_dict, detail=_d_params_dict, grep_fallback=False),
    Landmark("draft-weight-renames",
             "load_weights renames legacy checkpoint names by substring before matching parameters",
             "midlayer", lambda c: c.draft_files, _m_renames, detail=_d_renames, grep_fallback=False),
    Landmark("draft-weight-drop",
             "load_weights skips a checkpoint tensor whose name matches no parameter, with no warning",
             "params_dict", lambda c: c.draft_files, _m_weight_drop, detail=_d_weight_drop, silent=True,
             grep_fallback=False),
    Landmark("draft-d2t-read",
             "load_weights turns the checkpoint's d2t offsets into target ids (hot_token_id); t2d is skipped",
             "hot_token_id", lambda c: c.draft_files, _m_d2t_read, detail=_d_d2t_read, grep_fallback=False),
    Landmark("token-map-init",
             "EAGLE3 takes the token map from the draft checkpoint (d2t) and ignores --speculative-token-map; "
             "other algorithms read --speculative-token-map", "def init_token_map", lambda c: WORKER_FILES,
             _m_def("init_token_map"), where=lambda rel: rel.startswith("srt/speculative/")),
    Landmark("lm-head-shared",
             "EAGLE3 keeps the draft's own lm_head over the draft vocab; any other algorithm gives the draft the "
             "target's embedding and lm_head, so the draft's d2t is never used", "def init_lm_head",
             lambda c: WORKER_FILES, _m_lm_head, detail=_d_lm_head,
             where=lambda rel: rel.startswith("srt/speculative/")),
    Landmark("d2t-use",
             "the draft worker maps each proposed draft id to a target id through hot_token_id",
             "hot_token_id[", lambda c: WORKER_FILES, _m_d2t_use, detail=_d_d2t_use,
             where=lambda rel: rel.startswith("srt/speculative/")),
)

_TARGET_RULE_WHAT = ("the target turns the draft's aux layer ids into the layers it captures (its offset "
                     "rule: the capture is taken at a layer's input, so the output of layer id is layer id+1's input)")


def _find(ctx: _Ctx, lm: Landmark) -> PathEntry:
    tried: list[str] = []
    candidates = [f for f in dict.fromkeys(lm.files(ctx)) if f]
    for rel in candidates:
        tried.append(rel)
        entry = _find_in(ctx, lm, rel)
        if entry is not None:
            return entry
    if lm.grep_fallback:
        hits = ctx.src.grep([lm.token])[lm.token]
        for rel in sorted({r for r, _ in hits if r not in candidates and lm.where(r)}):
            tried.append(rel)
            entry = _find_in(ctx, lm, rel)
            if entry is not None:
                return entry
        if not hits:
            tried.append(f"no file under srt/ holds {lm.token!r}")
    return PathEntry(lm.key, lm.what, False, looked_in=", ".join(tried) or "no candidate file", silent=lm.silent)


def _find_in(ctx: _Ctx, lm: Landmark, rel: str) -> Optional[PathEntry]:
    tree = ctx.src.tree(rel)
    if tree is None:
        return None
    text = ctx.src.read(rel) or ""
    hits = [(s, p) for s, p in _in_order(tree) if lm.match(s, p, text)]
    if not hits:
        return None
    lines = text.splitlines()
    in_probe = _probe_block_lines(lines)
    hits = [(s, p) for s, p in hits if _first_line(s) - 1 not in in_probe]  # the workbench's own probes
    if not hits:
        return None
    stmt, parents = hits[0]
    line = _first_line(stmt)
    detail = lm.detail(stmt, parents, text, ctx) if lm.detail else None
    also = tuple(_first_line(s) for s, _ in hits[1:])
    return PathEntry(lm.key, lm.what, True, ctx.src.path(rel), line, lines[line - 1] if line <= len(lines) else None,
                     _function_of(parents + ((stmt,) if isinstance(stmt, ast.FunctionDef) else ())), detail,
                     also, rel, lm.silent, _probe_note(lines, line),
                     tuple(lines[n - 1] if n <= len(lines) else "" for n in also))


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


def _target_offset_rule(ctx: _Ctx) -> PathEntry:
    key = "target-offset-rule"
    hit = ctx.src.find_method(ctx.target_arch, "set_eagle3_layers_to_capture")
    if hit is None:
        where = ctx.target_files[0] if ctx.target_files else f"no class {ctx.target_arch} under srt/models"
        return PathEntry(key, _TARGET_RULE_WHAT, False,
                         looked_in=f"{ctx.target_arch} and its bases ({where}): no set_eagle3_layers_to_capture; "
                                   "under EAGLE3 the runner raises at startup")
    rel, fn, text, owner = hit
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "layers_to_capture" for t in n.targets)]
    rules = "; ".join(f"`{_seg(text, a)}`" for a in assigns)
    detail = rules or None
    if ctx.num_layers:
        rule = ctx.src.capture_rule(ctx.target_arch, ctx.num_layers, ctx.aux_ids)
        if rule is not None and rule.error:
            detail = (detail + "; " if detail else "") + (
                f"for draft ids {ctx.aux_ids} it raises {rule.error} ({rule.source}): the engine fails at start-up")
        elif rule is not None and rule.captured is not None:
            ids = ctx.aux_ids if ctx.aux_ids is not None else "none (defaults)"
            detail = (detail + "; " if detail else "") + (
                f"for draft ids {ids} on {ctx.num_layers} layers it captures {rule.captured} ({rule.source})")
            unreachable = [i for i in rule.captured if i > rule.reachable_max or i < 0] + list(rule.unmatchable)
            if unreachable:
                detail += (f"; layer(s) {unreachable} are never reached (the capture loop covers 0.."
                           f"{rule.reachable_max}): fewer aux states than the draft's fc expects")
    elif ctx.aux_ids is not None:
        detail = (detail + "; " if detail else "") + "give the target's layer count to evaluate the rule for the draft's ids"
    lines = text.splitlines()
    return PathEntry(key, _TARGET_RULE_WHAT, True, ctx.src.path(rel), fn.lineno, lines[fn.lineno - 1],
                     f"{owner}.set_eagle3_layers_to_capture", detail, (), rel, note=_probe_note(lines, fn.lineno))


def code_path_map(src: EngineSource, *, target_arch: str = "LlamaForCausalLM",
                  draft_arch: str = "LlamaForCausalLMEagle3", aux_ids: Optional[Sequence[int]] = None,
                  num_layers: Optional[int] = None, keys: Optional[Iterable[str]] = None) -> CodePathMap:
    """The EAGLE-3 code-path map of the engine ``src`` (:class:`workbench.engine.EngineSource`).

    ``target_arch`` / ``draft_arch``: the classes whose files hold the model-specific entries
    (SGLang's ``architectures[0]`` of each config; defaults: Llama target, SGLang's EAGLE-3 draft).
    ``aux_ids`` / ``num_layers``: the draft's aux layer ids and the target's layer count, to
    evaluate the target's offset rule for them (optional). ``keys``: only these entries (the
    doctor asks for one); default all. Files are read through the box, once each; box errors
    propagate. Entries not in this version come back with ``found=False`` and no line.
    """
    want = set(keys) if keys is not None else None
    target_files: list[str] = []
    needs_target = want is None or bool(want & {"target-offset-rule", "target-capture-point"})
    needs_draft = want is None or any(k.startswith("draft-") for k in want)
    arch: str | None = target_arch if needs_target else None
    for _ in range(3):  # the target, then the classes it delegates the capture to (Kimi-K2.5 → DeepseekV3)
        found = src.find_class(arch) if arch else None
        if found is None:
            break
        target_files.append(found[0])
        owner = src.find_method(arch, "set_eagle3_layers_to_capture")
        if owner is not None:
            target_files.append(owner[0])
        arch = src.capture_delegate(arch)
    draft_files: list[str] = []
    if not needs_draft:
        pass
    elif draft_arch in DRAFT_CLASS_FILES and src.read(DRAFT_CLASS_FILES[draft_arch]) is not None:
        draft_files.append(DRAFT_CLASS_FILES[draft_arch])
    else:
        hit = src.find_class(draft_arch) if draft_arch else None
        if hit is not None:
            draft_files.append(hit[0])
    ctx = _Ctx(src, target_arch, draft_arch, list(aux_ids) if aux_ids is not None else None, num_layers,
               tuple(dict.fromkeys(target_files)), tuple(draft_files))
    entries: list[PathEntry] = []
    for lm in LANDMARKS:
        if lm.key == "target-capture-point" and (want is None or "target-offset-rule" in want):
            entries.append(_target_offset_rule(ctx))
        if want is not None and lm.key not in want:
            continue
        entry = _find(ctx, lm)
        if not entry.found and not lm.grep_fallback:
            missing = "target" if lm.key == "target-capture-point" else "draft"
            arch = target_arch if missing == "target" else draft_arch
            files = ctx.target_files if missing == "target" else ctx.draft_files
            if not files:
                entry = PathEntry(lm.key, lm.what, False, looked_in=f"no {missing} class {arch} under srt/models",
                                  silent=lm.silent)
        entries.append(entry)
    return CodePathMap(src.root, src.version, target_arch, draft_arch, entries)


def map_for_launch(box, src: EngineSource, launch, *, cwd: Optional[str] = None, timeout: float = 30,
                   notes: Optional[list[str]] = None) -> CodePathMap:
    """:func:`code_path_map` for a deployment: the target architecture and layer count from the
    ``--model-path`` config, the draft architecture and aux layer ids from the
    ``--speculative-draft-model-path`` config (read on the box; Hugging Face repo ids through the
    box's cache, relative paths against ``cwd``). A config that cannot be read leaves the default
    (Llama target, SGLang's EAGLE-3 draft) and appends why to ``notes``. ``launch``: a
    :class:`workbench.engine.launch.LaunchCommand` or its text."""
    notes = notes if notes is not None else []
    launch = LaunchCommand.parse(launch) if isinstance(launch, str) else launch
    env = {**box_env(box, timeout), **dict(launch.env)}
    kw: dict = {}
    for flag, role in (("--model-path", "target"), ("--speculative-draft-model-path", "draft")):
        value = launch.get(flag)
        if not isinstance(value, str) or not value:
            notes.append(f"no {flag} in the launch command: default {role} class used")
            continue
        path, how = resolve_model_path(box, value, env=env, cwd=cwd, timeout=timeout)
        if path is None:
            notes.append(f"{role} config not read ({how}): default {role} class used")
            continue
        try:
            if role == "target":
                facts = read_target_facts(box, path, timeout=timeout)
                if facts.architectures:
                    kw["target_arch"] = facts.architectures[0]
                kw["num_layers"] = facts.num_hidden_layers
            else:
                draft = read_draft_facts(box, path, timeout=timeout)
                if draft.architectures:
                    kw["draft_arch"] = draft.architectures[0]
                if isinstance(draft.aux_layer_ids, list):
                    kw["aux_ids"] = draft.aux_layer_ids
        except CheckpointError as exc:
            notes.append(f"{role} config not read ({exc}): default {role} class used")
    return code_path_map(src, **kw)




# ---------------------------------------------------------------------------------------------
# Swallowed errors and silent fallbacks on the path (the facts; the rule that reports them is
# workbench.rules.engine_source)
# ---------------------------------------------------------------------------------------------


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
        if not e.found or not e.silent or e.key == "eagle-config-read":
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
