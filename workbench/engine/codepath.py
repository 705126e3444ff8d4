"""The EAGLE-3 code path in the box's engine source: a map of (file, line, what happens there),
a scan of that path for swallowed errors and silent fallbacks, and named probe recipes.

Every entry is *found* in the box's own source with :mod:`ast` (a statement of a given shape, in
the files where SGLang 0.5.23 keeps it, else in the files a ``grep -F`` for a token names); its
line is the line it names in that version (the statement's first line, or the line of the test
inside it: :attr:`PathEntry.probe_line` is where a probe goes). An entry that is not found says
where it was looked for and is never given a line. Tested on the published wheels of 0.4.6,
0.4.8, 0.4.10, 0.5.2, 0.5.4, 0.5.9, 0.5.12, 0.5.18 and 0.5.23 (``tests/workbench/test_codepath_releases.py``).

The landmarks follow the kinds of change those releases made: code moved to another file (the aux
capture from ``model_runner.py`` to ``model_runner_components/``), a function inlined (the token
map and lm_head tests in ``EAGLEWorker.__init__`` before ``init_token_map`` / ``init_lm_head``
existed), a wrapper model (the capture test followed through the target's forward into the
classes it delegates to), a base class doing the work (the draft's ``super().load_weights``), and
two workers (the entries of the draft worker are read in the one the server runs:
:func:`eagle_worker`).

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
    ``if ...is_eagle3():`` on ``--speculative-token-map`` (in ``init_token_map``), the
    ``is_eagle3()`` test in ``init_lm_head`` and ``self.hot_token_id[...]``
    (``srt/speculative/eagle_worker_v2.py``; ``eagle_worker.py`` where the server runs ``EAGLEWorker``).

The sandbox box's engine (``workbench/sandbox/srt``) mirrors those names, so the same map and
recipes work on it.
"""

from __future__ import annotations

import ast
import functools
import html
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

from remote.probes import _probe_block_lines
from workbench.checkpoint import CheckpointError, read_draft_facts, read_target_facts
from workbench.checkpoint.paths import box_env, resolve_model_path
from workbench.engine.launch import LaunchCommand
from workbench.engine.locate import read_environ
from workbench.engine.modelled import DRAFT_CLASS_FILES
from workbench.engine.source import EngineSource, _walk_definitions
from workbench.report.tables import inline_code, scroll_box

__all__ = ["PathEntry", "CodePathMap", "LANDMARKS", "code_path_map", "DRAFT_CLASS_FILES", "map_for_launch",
           "AuxSwitch", "aux_capture_switch", "WorkerChoice", "eagle_worker", "server_worker_inputs",
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
    text of each ``also`` line; ``anchor`` / ``also_anchor``: the first line of the statement
    holding ``line`` / each ``also`` line, where a probe goes (``None`` / empty: the lines
    themselves); ``anchor_code``: the text of the anchor line and of each ``also_anchor`` line
    (empty when the anchors are the lines themselves)."""

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
    anchor: Optional[int] = None
    also_anchor: tuple[int, ...] = ()
    anchor_code: tuple[str, ...] = ()

    @property
    def probe_line(self) -> Optional[int]:
        """The line a probe for this entry goes before: the first line of the statement that holds
        the entry's line (``anchor``), which is ``line`` itself unless the entry names a line inside
        a longer statement (SGLang 0.5.23's capture test is an argument of the layer call at
        ``llama.py:487``, its line 492)."""
        return self.anchor if self.anchor is not None else self.line

    @property
    def location(self) -> str:
        """``file:line``, or ``not found`` with where it was looked for."""
        return f"{self.file}:{self.line}" if self.found else f"not found in this version (looked in {self.looked_in})"

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["also"] = list(self.also)
        d["also_code"] = list(self.also_code)
        d["also_anchor"] = list(self.also_anchor)
        d["anchor_code"] = list(self.anchor_code)
        d["location"] = self.location
        return d


@dataclass
class CodePathMap:
    """The map for one engine: ``root``/``version`` of the package, ``entries`` in path order,
    the ``target_arch``/``draft_arch`` the model-specific entries were read for; ``worker``: the
    EAGLE worker the draft-worker entries were read in (:func:`eagle_worker`); ``engine``:
    ``"sglang"`` (this module's map, also the sandbox's mirror of SGLang) or ``"vllm"``
    (:func:`workbench.engine.codepath_vllm.vllm_code_path_map`); ``runner``: vLLM's model runner
    (``"v1"`` / ``"v2"``) the runner-specific entries were chosen for (``None`` on SGLang);
    ``method``: vLLM's speculative method the draft's class was looked up for (``None`` on SGLang)."""

    root: str
    version: Optional[str]
    target_arch: str
    draft_arch: str
    entries: list[PathEntry] = field(default_factory=list)
    worker: Optional["WorkerChoice"] = None
    engine: str = "sglang"
    runner: Optional[str] = None
    method: Optional[str] = None

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
        return {"engine": self.engine, "root": self.root, "version": self.version, "target_arch": self.target_arch,
                "draft_arch": self.draft_arch, "worker": self.worker.to_dict() if self.worker else None,
                "runner": self.runner, "method": self.method, "entries": [e.to_dict() for e in self.entries]}

    def to_text(self) -> str:
        engine = "" if self.engine == "sglang" else f" ({self.engine}" + (
            f", {self.runner.upper()} model runner)" if self.runner else ")")
        rows = [f"EAGLE-3 code path{engine}: {self.root} (version {self.version or 'unknown'}; "
                f"target {self.target_arch}, draft {self.draft_arch})"]
        if self.worker is not None:
            rows.append(f"draft worker: {self.worker.cls} ({self.worker.file}): {self.worker.why}")
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
        if self.worker is not None:
            head += (f"<p>draft worker: <code>{html.escape(self.worker.cls)}</code> "
                     f"(<code>{html.escape(self.worker.file)}</code>): {html.escape(self.worker.why)}</p>")
        cell = "text-align:left;vertical-align:top;white-space:normal;overflow-wrap:anywhere"
        body = "".join(
            f"<tr><td style='{cell}'>{html.escape(e.key)}</td><td style='{cell}'><code>"
            f"{html.escape(posixpath.relpath(e.file, self.root) + ':' + str(e.line)) if e.found else 'not found'}"
            f"</code></td><td style='{cell}'>{inline_code(e.what)}"
            f"{'<br><code>' + html.escape(e.code.strip()) + '</code>' if e.found and e.code else ''}"
            f"{'<br>' + inline_code(e.detail) if e.detail else ''}</td></tr>"
            for e in self.entries)
        return head + scroll_box(
            f"<table style='table-layout:fixed;width:100%;min-width:40em'><colgroup><col style='width:14%'>"
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
# Which EAGLE worker the release runs
# ---------------------------------------------------------------------------------------------

WORKER_V1 = ("EAGLEWorker", "srt/speculative/eagle_worker.py")
WORKER_V2 = ("EAGLEWorkerV2", "srt/speculative/eagle_worker_v2.py")
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
#: Where releases pick the worker class and turn the overlap schedule off under speculative
#: decoding (SGLang 0.5.4 ``managers/scheduler.py`` ``launch_draft_worker``; 0.5.9 … 0.5.12
#: ``speculative/spec_info.py`` ``create_worker``; the overlap switch in ``server_args.py``).
_SELECTOR_FILES = ("srt/speculative/spec_info.py", "srt/managers/scheduler.py")
_SERVER_ARGS_FILES = ("srt/server_args.py", "srt/arg_groups/speculative_hook.py")


@dataclass(frozen=True)
class WorkerChoice:
    """The EAGLE worker class a server of this release runs for EAGLE/EAGLE3, read from the
    release's source: ``cls`` (``EAGLEWorker`` / ``EAGLEWorkerV2``), ``file`` (relative to the
    package root), ``why`` (the reasons, in words, with file:line), ``evidence`` (the file:line
    of each statement the choice rests on), ``default``: the class with no environment and no
    flag (what the release runs out of the box), ``other``: the other worker's file when the
    release has both (its entries are never taken for this one's)."""

    cls: str
    file: str
    why: str
    evidence: tuple[str, ...] = ()
    default: Optional[str] = None
    other: Optional[str] = None

    def to_dict(self) -> dict:
        return {"cls": self.cls, "file": self.file, "why": self.why, "evidence": list(self.evidence),
                "default": self.default, "other": self.other}


def _env_bool(value: str) -> Optional[bool]:
    """SGLang's ``EnvBool.parse`` (0.5.5 … 0.5.12 ``srt/environ.py``): ``true/1/yes/y`` and
    ``false/0/no/n`` in any case; ``None`` for anything else (the server raises ``ValueError``)."""
    v = value.strip().lower()
    if v in ("true", "1", "yes", "y"):
        return True
    if v in ("false", "0", "no", "n"):
        return False
    return None


def _assigns_overlap_off(stmts: Sequence[ast.stmt]) -> Optional[ast.Assign]:
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value is True and any(
                    isinstance(t, ast.Attribute) and t.attr == "disable_overlap_schedule" for t in n.targets):
                return n
    return None


def _overlap_switches(src: EngineSource) -> list[tuple[str, str, int, bool]]:
    """``(kind, rel, line, off_when_true)`` of each ``if`` in the server-args files that sets
    ``disable_overlap_schedule = True`` on a test of the spec-v2 environment variable
    (``kind="env"``), of ``enable_beta_spec`` (``"flag"``) or of ``speculative_eagle_topk``
    (``"topk"``); ``off_when_true``: the assignment is in the branch taken when the tested value
    is true (else when it is false). ``line``: the assignment's."""
    out = []
    for rel in _SERVER_ARGS_FILES:
        tree = src.tree(rel)
        if tree is None:
            continue
        text = src.read(rel) or ""
        for node in ast.walk(tree):
            if not isinstance(node, ast.If):
                continue
            test = _seg(text, node.test)
            kind = ("env" if SPEC_V2_ENV in test else "flag" if "enable_beta_spec" in test
                    else "topk" if "speculative_eagle_topk" in test and ">" in test else None)
            if kind is None:
                continue
            token = {"env": SPEC_V2_ENV, "flag": "enable_beta_spec", "topk": "speculative_eagle_topk"}[kind]
            negated = any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not) and token in _seg(text, n.operand)
                          for n in ast.walk(node.test))
            for branch, taken_when_true in ((node.body, True), (node.orelse, False)):
                direct = [s for s in branch if not isinstance(s, ast.If)]  # not a nested test's branch
                hit = _assigns_overlap_off(direct)
                if hit is not None:
                    out.append((kind, rel, hit.lineno, taken_when_true != negated))
    return out


def _selector(src: EngineSource) -> Optional[str]:
    """``rel:line`` of the statement that picks ``EAGLEWorkerV2`` on the overlap schedule (an
    ``if`` / conditional expression testing an ``*overlap*`` name), if the release has one."""
    for rel in _SELECTOR_FILES:
        tree = src.tree(rel)
        if tree is None:
            continue
        text = src.read(rel) or ""
        for node in ast.walk(tree):
            if isinstance(node, (ast.If, ast.IfExp)) and "overlap" in _seg(text, node.test):
                body = node.body if isinstance(node, ast.If) else [node.body]
                if any("EAGLEWorkerV2" in _seg(text, b) for b in body):
                    return f"{rel}:{node.lineno}"
    return None


def _env_default(src: EngineSource) -> Optional[tuple[bool, str]]:
    """The spec-v2 variable's default (``SGLANG_ENABLE_SPEC_V2 = EnvBool(X)`` in
    ``srt/environ.py``) and its ``rel:line``; ``None`` when the release declares no such variable."""
    tree = src.tree("srt/environ.py")
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == SPEC_V2_ENV for t in node.targets) \
                and isinstance(node.value, ast.Call) and node.value.args \
                and isinstance(node.value.args[0], ast.Constant) and isinstance(node.value.args[0].value, bool):
            return node.value.args[0].value, f"srt/environ.py:{node.lineno}"
    return None


def _flag_value(args: Sequence[str], flag: str) -> Optional[str]:
    """The value written for ``flag`` (``--flag V`` / ``--flag=V``; ``""`` for a bare flag), last wins."""
    value = None
    for i, tok in enumerate(args):
        if tok == flag:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            value = "" if nxt.startswith("--") else nxt
        elif tok.startswith(flag + "="):
            value = tok.split("=", 1)[1]
    return value


def eagle_worker(src: EngineSource, *, env: Optional[Mapping[str, str]] = None,
                 launch_args: Optional[Sequence[str]] = None) -> Optional[WorkerChoice]:
    """The EAGLE worker a server of the engine ``src`` runs for EAGLE/EAGLE3, read from its source.

    ``env``: the server's environment (``/proc/PID/environ``, :func:`workbench.engine.locate.read_environ`,
    with the launch command's ``VAR=value`` prefix over it); ``None`` or a mapping without the
    variable: the release's default. ``launch_args``: the launch command's argument tokens
    (``--disable-overlap-schedule``, ``--enable-beta-spec``, ``--speculative-eagle-topk N`` are read).

    How releases choose, as their source says: a release with only ``eagle_worker.py`` (≤ 0.5.3)
    or only ``eagle_worker_v2.py`` (0.5.15 …) runs that one. With both (0.5.4 … 0.5.12) the V2
    worker runs when the overlap schedule is on (``EAGLEWorkerV2 if self.enable_overlap`` /
    ``create_worker``), and ``server_args.py`` turns it off under speculative decoding: without
    ``--enable-beta-spec`` (0.5.4), when ``SGLANG_ENABLE_SPEC_V2`` is false (0.5.5 … 0.5.12; its
    default ``EnvBool(False)`` until 0.5.10, ``EnvBool(True)`` in 0.5.12), for
    ``--speculative-eagle-topk`` > 1 where an ``if`` says so (0.5.12), or with
    ``--disable-overlap-schedule``. ``None`` when the release has neither file. Box errors propagate."""
    has1, has2 = src.read(WORKER_V1[1]) is not None, src.read(WORKER_V2[1]) is not None
    if not has1 and not has2:
        return None
    if not has2:
        return WorkerChoice(*WORKER_V1, f"the release has no {WORKER_V2[1]}: every EAGLE/EAGLE3 server runs "
                                        f"{WORKER_V1[0]}", (), WORKER_V1[0])
    if not has1:
        return WorkerChoice(*WORKER_V2, f"the release has no {WORKER_V1[1]}: every EAGLE/EAGLE3 server runs "
                                        f"{WORKER_V2[0]} (with or without the overlap schedule)", (), WORKER_V2[0])
    args = list(launch_args or ())
    env = dict(env or {})
    evidence: list[str] = []
    sel = _selector(src)
    if sel:
        evidence.append(sel)
    reasons: list[str] = []
    on = on_default = True
    switches = _overlap_switches(src)
    env_sw = [s for s in switches if s[0] == "env"]
    flag_sw = [s for s in switches if s[0] == "flag"]
    topk_sw = [s for s in switches if s[0] == "topk"]
    if env_sw:
        default = _env_default(src)
        dflt = default[0] if default else False
        evidence += ([default[1]] if default else []) + [f"{r}:{n}" for _, r, n, _ in env_sw]
        raw = env.get(SPEC_V2_ENV)
        parsed = _env_bool(raw) if raw is not None else None
        value = parsed if parsed is not None else dflt
        where = f"{env_sw[0][1]}:{env_sw[0][2]}"
        off_when_true = env_sw[0][3]
        on_default = dflt != off_when_true
        on = value != off_when_true
        if raw is None:
            said = f"{SPEC_V2_ENV} is not set (default {dflt} at {default[1] if default else 'srt/environ.py'})"
        elif parsed is None:
            said = f"{SPEC_V2_ENV}={raw!r} is no boolean (the server refuses it; default {dflt} used here)"
        else:
            said = f"{SPEC_V2_ENV}={raw} in the server's environment"
        reasons.append(f"{said}: {where} turns the overlap schedule {'on' if on else 'off'}")
    elif flag_sw:
        evidence += [f"{r}:{n}" for _, r, n, _ in flag_sw]
        given = _flag_value(args, "--enable-beta-spec") is not None
        where = f"{flag_sw[0][1]}:{flag_sw[0][2]}"
        on_default = False
        on = given
        reasons.append(("--enable-beta-spec given" if given else "no --enable-beta-spec") +
                       f": {where} {'keeps' if on else 'turns'} the overlap schedule {'on' if on else 'off'}")
    if on and topk_sw:
        topk = _flag_value(args, "--speculative-eagle-topk")
        if topk and topk.isdigit() and int(topk) > 1:
            on = False
            evidence += [f"{r}:{n}" for _, r, n, _ in topk_sw]
            reasons.append(f"--speculative-eagle-topk {topk} > 1: {topk_sw[0][1]}:{topk_sw[0][2]} turns the overlap "
                           "schedule off")
    if _flag_value(args, "--disable-overlap-schedule") is not None:
        on = False
        reasons.append("--disable-overlap-schedule given")
    cls, file = WORKER_V2 if on else WORKER_V1
    other = WORKER_V1[1] if on else WORKER_V2[1]
    pick = f"{sel} runs {WORKER_V2[0]} only with the overlap schedule" if sel else \
        f"{WORKER_V2[0]} runs only with the overlap schedule"
    why = "; ".join(reasons + [pick]) + f": this server runs {cls}"
    return WorkerChoice(cls, file, why, tuple(dict.fromkeys(evidence)), (WORKER_V2 if on_default else WORKER_V1)[0],
                        other)


def server_worker_inputs(box, engine, *, launch: Optional[LaunchCommand] = None,
                         timeout: float = 30) -> tuple[Optional[dict], Optional[list[str]]]:
    """``(env, launch_args)`` for :func:`eagle_worker` / :func:`code_path_map` from a located
    engine (:class:`workbench.engine.locate.EngineInfo`): the running server's own environment
    (``/proc/PID/environ`` on the box, :func:`workbench.engine.locate.read_environ`) with
    ``launch``'s ``VAR=value`` prefix over it, and the argument tokens of ``launch``, else of the
    server's command line (``engine.launch``). ``(None, None)`` when neither is known (the
    release's default worker is then used). An environment that cannot be read (another user's
    process) counts as unknown; box errors other than that propagate."""
    env: Optional[dict] = None
    pid = getattr(engine, "server_pid", None)
    if pid:
        env = read_environ(box, pid, timeout=timeout)
    args: Optional[list[str]] = None
    if launch is not None:
        env = {**(env or {}), **dict(launch.env)}
        args = list(launch.arg_tokens)
    elif getattr(engine, "launch", None):
        try:
            args = shlex.split(engine.launch)
        except ValueError:  # an unbalanced quote in the recorded command: its flags are not read
            args = None
    return env, args


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
    forward_files: tuple[str, ...] = ()
    draft_load_files: tuple[str, ...] = ()
    worker: Optional[WorkerChoice] = None
    inherited: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Landmark:
    """How to find one entry: statements in ``files(ctx)`` (else in the files holding ``token``,
    restricted by ``where``) for which ``match(stmt, parents, text)`` is true; the first in file
    order is the entry, the others go to ``also``. ``detail(stmt, parents, text, ctx)`` adds what
    this version does there. ``line_of(stmt, text)``: the line the entry names when it is not the
    statement's first (the probe anchor stays the statement's first line). ``worker``: an entry of
    the draft worker, looked for in the worker this server runs (:func:`eagle_worker`), never in
    the other worker's file."""

    key: str
    what: str
    token: str
    files: Callable[[_Ctx], Sequence[str]]
    match: Callable[[ast.stmt, tuple, str], bool]
    where: Callable[[str], bool] = lambda rel: rel.startswith("srt/")
    detail: Optional[Callable[[ast.stmt, tuple, str, _Ctx], Optional[str]]] = None
    silent: bool = False
    grep_fallback: bool = True
    line_of: Optional[Callable[[ast.stmt, str], int]] = None
    worker: bool = False


def _m_is_eagle3_def(stmt, parents, text):
    return isinstance(stmt, ast.FunctionDef) and stmt.name == "is_eagle3"


def _d_is_eagle3_def(stmt, parents, text, ctx):
    rets = [n for n in ast.walk(stmt) if isinstance(n, ast.Return)]
    return f"returns: {_seg(text, rets[0].value)}" if rets and rets[0].value is not None else None


def _m_gate(stmt, parents, text):
    """An ``if ...is_eagle3():`` whose body sets the aux capture up: it names aux hidden states
    (0.4.10 …) or calls ``set_eagle3_layers_to_capture`` itself (0.4.6 … 0.4.9 ``model_runner.py``)."""
    return (isinstance(stmt, ast.If) and any(_calls_attr(n, "is_eagle3") for n in ast.walk(stmt.test))
            and ("aux_hidden_state" in "".join(_seg(text, s) for s in stmt.body)
                 or any(_calls_attr(n, "set_eagle3_layers_to_capture") for s in stmt.body for n in ast.walk(s))))


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


def _flag_gate(stmt: ast.stmt, parents: Sequence[ast.AST]) -> Optional[tuple[ast.If, bool]]:
    """The test on ``use_aux_hidden_state`` that decides whether ``stmt`` (the capture call) runs:
    an enclosing ``if`` whose condition names it (SGLang 0.5.8 … 0.5.15 ``model_runner.py``: ``if
    self.eagle_use_aux_hidden_state:``; 0.5.18 … ``attention_backend_setup.py:54``: ``if
    eagle_use_aux_hidden_state:``) → ``(if, False)``, else an earlier ``if ...: return`` in the same
    function (the sandbox's ``if not config.eagle_use_aux_hidden_state: return``) → ``(if, True)``;
    ``None`` when nothing gates it (0.5.7 and older never read the key)."""
    for p in reversed(parents):
        if isinstance(p, ast.If) and any(isinstance(n, (ast.Name, ast.Attribute)) and
                                         (getattr(n, "id", None) or getattr(n, "attr", "")).endswith(
                                             "use_aux_hidden_state") and "dflash" not in
                                         (getattr(n, "id", None) or getattr(n, "attr", ""))
                                         for n in ast.walk(p.test)):
            return p, False
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for s in p.body:
                if getattr(s, "lineno", 0) >= stmt.lineno:
                    break
                if isinstance(s, ast.If) and s.body and isinstance(s.body[-1], ast.Return) and any(
                        isinstance(n, (ast.Name, ast.Attribute)) and
                        (getattr(n, "id", None) or getattr(n, "attr", "")) == "eagle_use_aux_hidden_state"
                        for n in ast.walk(s.test)):
                    return s, True
            break
    return None


def _d_capture_call(stmt, parents, text, ctx):
    gate = _flag_gate(stmt, parents)
    if gate is None:
        return None
    node, early = gate
    cond = _seg(text, node.test)
    how = (f"skipped by `if {cond}: return` (line {node.lineno})" if early
           else f"runs only when `{cond}` (line {node.lineno})")
    return (f"{how}: that flag is the draft's eagle_config.use_aux_hidden_state (default true); false means the "
            "target captures no aux states and the draft's fc is skipped")


@dataclass(frozen=True)
class AuxSwitch:
    """Where the engine reads the draft's ``eagle_config.use_aux_hidden_state`` and the test that
    skips the aux capture when it is false (:func:`aux_capture_switch`). ``read`` / ``gate``:
    ``(absolute file, line, code)``; ``default``: the ``.get`` default's source text; ``condition``:
    the gate's test as written (``not ...`` for an early return)."""

    read: tuple[str, int, str]
    default: Optional[str]
    gate: Optional[tuple[str, int, str]]
    condition: Optional[str]


def aux_capture_switch(src: EngineSource) -> Optional[AuxSwitch]:
    """The box's read of ``eagle_config.get("use_aux_hidden_state", ...)`` (SGLang 0.5.8
    ``model_runner.py:336``, 0.5.23 ``model_runner_components/spec_aux_hidden_state.py:189``) and
    the gate around the capture call (0.5.8 ``model_runner.py:587``, 0.5.23
    ``attention_backend_setup.py:54``), found with :mod:`ast` in the aux set-up files, else in the
    files under ``srt/`` (not ``srt/models``) holding the key; ``None`` when the release never
    reads it (0.4.6 … 0.5.7): it always captures under EAGLE3. Box errors propagate."""
    files = [SPEC_AUX_FILE, MODEL_RUNNER_FILE]
    hits = src.grep(["use_aux_hidden_state"])["use_aux_hidden_state"]
    files += sorted({r for r, _ in hits if r.startswith("srt/") and not r.startswith("srt/models/")} - set(files))
    read = None
    for rel in files:
        tree = src.tree(rel)
        if tree is None:
            continue
        text = src.read(rel) or ""
        for stmt, _parents in _in_order(tree):
            call = next((n for n in _own_exprs(stmt) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                         and n.func.attr == "get" and n.args and isinstance(n.args[0], ast.Constant)
                         and n.args[0].value == "use_aux_hidden_state"), None)
            if call is not None:
                line = _first_line(stmt)
                read = (src.path(rel), line, " ".join(_seg(text, stmt).split()),
                        _seg(text, call.args[1]) if len(call.args) > 1 else None)
                break
        if read is not None:
            break
    if read is None:
        return None
    gate = None
    for rel in ["srt/model_executor/model_runner_components/attention_backend_setup.py"] + files:
        tree = src.tree(rel)
        if tree is None:
            continue
        text = src.read(rel) or ""
        for stmt, parents in _in_order(tree):
            if _m_capture_call(stmt, parents, text):
                g = _flag_gate(stmt, parents)
                if g is not None:
                    node, early = g
                    cond = _seg(text, node.test)
                    gate = (src.path(rel), node.lineno, text.splitlines()[node.lineno - 1].strip(),
                            cond if not early else f"{cond} → return")
                    break
        if gate is not None:
            break
    return AuxSwitch(read[:3], read[3], gate[:3] if gate else None, gate[3] if gate else None)


def _capture_compare(stmt) -> Optional[ast.Compare]:
    for n in _own_exprs(stmt):
        if isinstance(n, ast.Compare) and any(isinstance(op, ast.In) for op in n.ops) and any(
                isinstance(c, ast.Attribute) and c.attr == "layers_to_capture" for c in n.comparators):
            return n
    return None


def _m_capture_point(stmt, parents, text):
    return _capture_compare(stmt) is not None


def _l_capture_point(stmt, text):
    """The line of the ``i in self.layers_to_capture`` test itself (0.5.23: an argument of the
    layer call, five lines below the statement's first)."""
    return _capture_compare(stmt).lineno


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


def _str_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _rename_pairs(stmt: ast.stmt) -> list[tuple[str, str, str]]:
    """The literal renames ``stmt`` itself makes, ``[(kind, old, new)]``: a dict literal of string
    pairs (SGLang 0.5.12 … ``llama_eagle3.py``: ``legacy_name_map = {"midlayer.": ...}``),
    ``str.replace("a", "b")`` and ``re.sub(r"^a", "b", name)`` (0.5.12 ``kimi_k25_eagle3.py:397``:
    ``re.sub(r"^layers\\.0\\.", "midlayer.", name)``) — the forms
    :func:`workbench.engine.drafts.load_weights_facts` reads as renames."""
    out: list[tuple[str, str, str]] = []
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Dict) and stmt.value.keys \
            and all(k is not None and _str_const(k) and _str_const(v)
                    for k, v in zip(stmt.value.keys, stmt.value.values)):
        out += [("dict", k.value, v.value) for k, v in zip(stmt.value.keys, stmt.value.values)]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return out
    for n in _own_exprs(stmt):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and len(n.args) >= 2
                and _str_const(n.args[0]) and _str_const(n.args[1])):
            continue
        if n.func.attr == "replace" and len(n.args) == 2:
            out.append(("str.replace", n.args[0].value, n.args[1].value))
        elif n.func.attr == "sub" and isinstance(n.func.value, ast.Name) and n.func.value.id == "re":
            out.append(("re.sub", n.args[0].value, n.args[1].value))
    return out


def _m_renames(stmt, parents, text):
    """A statement of the draft's ``load_weights`` that renames checkpoint names with literal
    strings (:func:`_rename_pairs`), whatever form the release uses."""
    return _in_load_weights(parents) and bool(_rename_pairs(stmt))


def _d_renames(stmt, parents, text, ctx):
    pairs = _rename_pairs(stmt)
    kind = pairs[0][0]
    how = {"dict": "substring renames (dict)", "str.replace": "str.replace", "re.sub": "re.sub"}[kind]
    return f"{how}: " + ", ".join(f"{old}→{new}" for _, old, new in pairs)


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


def _m_token_map(stmt, parents, text):
    """The ``if ...is_eagle3():`` whose branches decide on ``--speculative-token-map``: in
    ``init_token_map`` (0.5.4 … ``eagle_worker_v2.py``) or inline in ``EAGLEWorker.__init__``
    (``eagle_worker.py``, every release that has it)."""
    return (isinstance(stmt, ast.If) and any(_calls_attr(n, "is_eagle3") for n in ast.walk(stmt.test))
            and "speculative_token_map" in "".join(_seg(text, s) for s in stmt.body + stmt.orelse))


def _m_lm_head(stmt, parents, text):
    """The ``if ...is_eagle3():`` that decides whether the draft keeps its own lm_head: in
    ``init_lm_head``, or any such test whose other branch calls ``set_embed_and_head`` (inline in
    ``EAGLEWorker.__init__`` in ``eagle_worker.py``)."""
    return (isinstance(stmt, ast.If) and any(_calls_attr(n, "is_eagle3") for n in ast.walk(stmt.test))
            and (any(isinstance(p, ast.FunctionDef) and p.name == "init_lm_head" for p in parents)
                 or any(_calls_attr(n, "set_embed_and_head") for s in stmt.orelse for n in ast.walk(s))))


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


def _l_d2t_use(stmt, text):
    """The line of the mapping ``x = self.hot_token_id[x]`` itself (inside its ``if self.hot_token_id
    is not None:``, which stays the probe anchor: a probe there sees ``None`` too)."""
    if isinstance(stmt, ast.If):
        return next((s.lineno for s in stmt.body if isinstance(s, ast.Assign)
                     and "self.hot_token_id[" in _seg(text, s.value).replace(" ", "")), stmt.lineno)
    return _first_line(stmt)


def _d_d2t_use(stmt, parents, text, ctx):
    if isinstance(stmt, ast.If):
        inner = next(s for s in stmt.body if isinstance(s, ast.Assign))
        return f"`{_seg(text, inner)}` (line {inner.lineno}) only when `{_seg(text, stmt.test)}`"
    return f"`{_seg(text, stmt)}`"


def _spec_aux_files(ctx):
    return (SPEC_AUX_FILE, MODEL_RUNNER_FILE)


def _worker_files(ctx):
    return (ctx.worker.file,) if ctx.worker is not None else WORKER_FILES


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
             _m_capture_call, where=lambda rel: rel.startswith("srt/") and not rel.startswith("srt/models/"),
             detail=_d_capture_call),
    # target-offset-rule is computed from the target class (see _target_offset_rule)
    Landmark("target-capture-point",
             "in the target's forward the hidden state entering layer i is captured when i is in "
             "layers_to_capture (empty unless set_eagle3_layers_to_capture ran)",
             "layers_to_capture", lambda c: c.forward_files, _m_capture_point, grep_fallback=False,
             line_of=_l_capture_point),
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
             "params_dict", lambda c: c.draft_load_files, _m_params_dict, detail=_d_params_dict, grep_fallback=False),
    Landmark("draft-weight-renames",
             "load_weights renames checkpoint names (a dict of substrings, str.replace or re.sub) before "
             "matching parameters",
             "load_weights", lambda c: c.draft_load_files, _m_renames, detail=_d_renames, grep_fallback=False),
    Landmark("draft-weight-drop",
             "load_weights skips a checkpoint tensor whose name matches no parameter, with no warning",
             "params_dict", lambda c: c.draft_load_files, _m_weight_drop, detail=_d_weight_drop, silent=True,
             grep_fallback=False),
    Landmark("draft-d2t-read",
             "load_weights turns the checkpoint's d2t offsets into target ids (hot_token_id); t2d is skipped",
             "hot_token_id", lambda c: c.draft_load_files, _m_d2t_read, detail=_d_d2t_read, grep_fallback=False),
    Landmark("token-map-init",
             "EAGLE3 takes the token map from the draft checkpoint (d2t) and ignores --speculative-token-map; "
             "other algorithms read --speculative-token-map", "speculative_token_map", _worker_files,
             _m_token_map, where=lambda rel: rel.startswith("srt/speculative/"), worker=True),
    Landmark("lm-head-shared",
             "EAGLE3 keeps the draft's own lm_head over the draft vocab; any other algorithm gives the draft the "
             "target's embedding and lm_head, so the draft's d2t is never used", "set_embed_and_head",
             _worker_files, _m_lm_head, detail=_d_lm_head,
             where=lambda rel: rel.startswith("srt/speculative/"), worker=True),
    Landmark("d2t-use",
             "the draft worker maps each proposed draft id to a target id through hot_token_id",
             "hot_token_id[", _worker_files, _m_d2t_use, detail=_d_d2t_use,
             where=lambda rel: rel.startswith("srt/speculative/"), worker=True, line_of=_l_d2t_use),
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
    if lm.worker and ctx.worker is not None:
        # the worker's own modules (what it imports from srt/speculative), never the other worker
        for rel in _speculative_imports(ctx.src, ctx.worker.file):
            if rel in candidates or rel == ctx.worker.other:
                continue
            tried.append(rel)
            entry = _find_in(ctx, lm, rel)
            if entry is not None:
                return entry
    elif lm.grep_fallback:
        hits = ctx.src.grep([lm.token])[lm.token]
        for rel in sorted({r for r, _ in hits if r not in candidates and lm.where(r)}):
            tried.append(rel)
            entry = _find_in(ctx, lm, rel)
            if entry is not None:
                return entry
        if not hits:
            tried.append(f"no file under srt/ holds {lm.token!r}")
    looked = ", ".join(tried) or "no candidate file"
    if lm.worker and ctx.worker is not None:
        looked += f" (the worker this server runs: {ctx.worker.cls})"
    return PathEntry(lm.key, lm.what, False, looked_in=looked, silent=lm.silent)


def _speculative_imports(src: EngineSource, rel: str) -> list[str]:
    """The ``srt/speculative`` modules ``rel`` imports (``from sglang.srt.speculative.X import``),
    in file order, those that exist."""
    tree = src.tree(rel)
    out: list[str] = []
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang.srt.speculative."):
            cand = node.module[len("sglang."):].replace(".", "/") + ".py"
            if cand != rel and cand not in out and src.read(cand) is not None:
                out.append(cand)
    return out


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

    def named(s):
        return lm.line_of(s, text) if lm.line_of else _first_line(s)

    line, anchor = named(stmt), _first_line(stmt)
    detail = lm.detail(stmt, parents, text, ctx) if lm.detail else None
    if lm.worker and ctx.worker is not None:
        detail = (detail + "; " if detail else "") + f"in {ctx.worker.cls} ({ctx.worker.why})"
    if lm.key.startswith("draft-") and rel in ctx.inherited:
        detail = (detail + "; " if detail else "") + ctx.inherited[rel]
    also = tuple(named(s) for s, _ in hits[1:])
    anchors = tuple(_first_line(s) for s, _ in hits)
    return PathEntry(lm.key, lm.what, True, ctx.src.path(rel), line, lines[line - 1] if line <= len(lines) else None,
                     _function_of(parents + ((stmt,) if isinstance(stmt, ast.FunctionDef) else ())), detail,
                     also, rel, lm.silent, _probe_note(lines, anchor),
                     tuple(lines[n - 1] if n <= len(lines) else "" for n in also),
                     anchor if anchor != line else None, anchors[1:] if lm.line_of else (),
                     tuple(lines[n - 1] if n <= len(lines) else "" for n in anchors) if lm.line_of else ())


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


def _class_name(node: ast.expr) -> Optional[str]:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name if name and name[:1].isupper() and name not in ("Module", "object") else None


def _forward_classes(src: EngineSource, arch: str, limit: int = 12) -> list[tuple[str, str]]:
    """``(class, file)`` of the target class and every class its forward runs through, breadth
    first: its bases, and the classes of the attributes its ``forward`` reads that ``__init__``
    assigns as ``self.X = Cls(...)`` (Kimi-K2.5's ``language_model = DeepseekV3ForCausalLM(...)``,
    a causal LM's ``model = LlamaModel(...)``). Classes are looked up under ``srt/models``; at most
    ``limit`` classes."""
    out: list[tuple[str, str]] = []
    queue, seen = [arch], set()
    while queue and len(seen) < limit:
        cls = queue.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        found = src.find_class(cls)
        if found is None:
            continue
        rel, node, _ = found
        out.append((cls, rel))
        queue += [b for b in (_class_name(b) for b in node.bases) if b]
        methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
        fwd, init = methods.get("forward"), methods.get("__init__")
        if fwd is None or init is None:
            continue
        used = {n.attr for n in ast.walk(fwd) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "self"}
        for n in ast.walk(init):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and any(
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                    and t.attr in used for t in n.targets):
                name = _class_name(n.value.func)
                if name:
                    queue.append(name)
    return out


def _draft_file(src: EngineSource, draft_arch: str) -> Optional[str]:
    """The file that defines the draft class: the known file (:data:`DRAFT_CLASS_FILES`) when
    the box has it, else the file under ``srt/models`` that defines the class; ``None`` when
    none does."""
    if draft_arch in DRAFT_CLASS_FILES and src.read(DRAFT_CLASS_FILES[draft_arch]) is not None:
        return DRAFT_CLASS_FILES[draft_arch]
    hit = src.find_class(draft_arch) if draft_arch else None
    return hit[0] if hit is not None else None


def _load_weights_bases(src: EngineSource, draft_arch: str, depth: int = 3) -> list[tuple[str, str]]:
    """``(file, how)`` of the base classes whose ``load_weights`` the draft's ``load_weights``
    hands its tensors to through ``super().load_weights(...)`` (SGLang 0.4.6 … 0.4.9
    ``llama_eagle3.py``: ``super().load_weights([(f"model.{name}", loaded_weight)])`` into
    ``LlamaForCausalLM.load_weights`` in ``llama.py``), followed ``depth`` levels."""
    out: list[tuple[str, str]] = []
    cls = draft_arch
    for _ in range(depth):
        found = src.find_class(cls)
        if found is None:
            break
        rel, node, _ = found
        fn = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "load_weights"), None)
        if fn is None or not any(_calls_attr(n, "load_weights") and isinstance(n.func.value, ast.Call)
                                 and isinstance(n.func.value.func, ast.Name) and n.func.value.func.id == "super"
                                 for n in ast.walk(fn)):
            break
        base = next((b for b in (_class_name(b) for b in node.bases) if b), None)
        hit = src.find_method(base, "load_weights") if base else None
        if hit is None:
            break
        out.append((hit[0], f"reached through super().load_weights from {cls}.load_weights ({rel}:{fn.lineno})"))
        cls = hit[3]
    return out


def code_path_map(src: EngineSource, *, target_arch: str = "LlamaForCausalLM",
                  draft_arch: str = "LlamaForCausalLMEagle3", aux_ids: Optional[Sequence[int]] = None,
                  num_layers: Optional[int] = None, keys: Optional[Iterable[str]] = None,
                  env: Optional[Mapping[str, str]] = None,
                  launch_args: Optional[Sequence[str]] = None,
                  worker: Optional[WorkerChoice] = None) -> CodePathMap:
    """The EAGLE-3 code-path map of the engine ``src`` (:class:`workbench.engine.EngineSource`).

    ``target_arch`` / ``draft_arch``: the classes whose files hold the model-specific entries
    (SGLang's ``architectures[0]`` of each config; defaults: Llama target, SGLang's EAGLE-3 draft).
    ``aux_ids`` / ``num_layers``: the draft's aux layer ids and the target's layer count, to
    evaluate the target's offset rule for them (optional). ``keys``: only these entries (the
    doctor asks for one); default all. ``env`` / ``launch_args``: the server's environment and
    its launch command's argument tokens, which decide the EAGLE worker the draft-worker entries
    are read in (:func:`eagle_worker`; default: the release's own default); ``worker``: that
    choice made already (another map's :attr:`CodePathMap.worker`), used as it is. Files are read
    through the box, once each; box errors propagate. Entries not in this version come back with
    ``found=False`` and no line.

    The target's capture test is looked for in the classes its forward runs through
    (:func:`_forward_classes`); the draft's ``load_weights`` entries also in the base class's
    ``load_weights`` it hands tensors to (:func:`_load_weights_bases`).
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
    forward_files: list[str] = []
    if want is None or "target-capture-point" in want:
        forward_files = [rel for _, rel in _forward_classes(src, target_arch)]
    draft_files: list[str] = []
    draft_load: list[str] = []
    inherited: dict[str, str] = {}
    if needs_draft:
        own = _draft_file(src, draft_arch)
        if own is not None:
            draft_files.append(own)
            draft_load.append(own)
            for rel, how in _load_weights_bases(src, draft_arch):
                if rel not in draft_load:
                    draft_load.append(rel)
                    inherited[rel] = how
    needs_worker = want is None or bool(want & {lm.key for lm in LANDMARKS if lm.worker})
    if worker is None and needs_worker:
        worker = eagle_worker(src, env=env, launch_args=launch_args)
    ctx = _Ctx(src, target_arch, draft_arch, list(aux_ids) if aux_ids is not None else None, num_layers,
               tuple(dict.fromkeys(target_files)), tuple(draft_files), tuple(dict.fromkeys(forward_files)),
               tuple(draft_load), worker, inherited)
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
            files = ctx.forward_files if missing == "target" else ctx.draft_files
            if not files:
                entry = PathEntry(lm.key, lm.what, False, looked_in=f"no {missing} class {arch} under srt/models",
                                  silent=lm.silent)
        entries.append(entry)
    return CodePathMap(src.root, src.version, target_arch, draft_arch, entries, worker)


def map_for_launch(box, src: EngineSource, launch, *, cwd: Optional[str] = None, timeout: float = 30,
                   notes: Optional[list[str]] = None, environ: Optional[Mapping[str, str]] = None) -> CodePathMap:
    """:func:`code_path_map` for a deployment: the target architecture and layer count from the
    ``--model-path`` config, the draft architecture and aux layer ids from the
    ``--speculative-draft-model-path`` config (read on the box; Hugging Face repo ids through the
    box's cache, relative paths against ``cwd``). A config that cannot be read leaves the default
    (Llama target, SGLang's EAGLE-3 draft) and appends why to ``notes``. ``launch``: a
    :class:`workbench.engine.launch.LaunchCommand` or its text. The EAGLE worker
    (:func:`eagle_worker`) follows ``environ`` (the running server's own environment,
    :func:`workbench.engine.locate.read_environ`; ``None``: none known) with the command's
    ``VAR=value`` prefix over it, and the command's flags."""
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
    server_env = {**dict(environ or {}), **dict(launch.env)}
    return code_path_map(src, env=server_env, launch_args=launch.arg_tokens, **kw)




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

