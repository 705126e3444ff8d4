"""How each entry of SGLang's map is recognised: :class:`Landmark` (the files to look in, a matcher
over statements, a describer of what this version does there, the line it names) and
:data:`LANDMARKS`, the table in path order (the module docstring of :mod:`workbench.engine.codepath`
lists it with the SGLang 0.5.23 files). The matchers ``_m_*`` / describers ``_d_*`` / line pickers
``_l_*``, target side first (``is_eagle3``, the aux gate, the ``eagle_config`` try, the capture call
and its ``use_aux_hidden_state`` gate, the capture point) then draft side (fc defined, the width
check, ``load_weights``' params dict, renames, drop and d2t read, the worker's token map, lm_head
and d2t use); :class:`_Ctx`, what one map's search knows (files per role, the worker). The search
itself (candidate files, ``grep`` fallback, probe blocks) is :mod:`.build`'s.

Imports: :mod:`.ast_tools`, :mod:`.worker` (:class:`~.worker.WorkerChoice` in :class:`_Ctx`) and
:mod:`workbench.engine.source`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from workbench.engine.codepath.ast_tools import _calls_attr, _first_line, _is_broad, _logs_or_raises, _own_exprs, _seg
from workbench.engine.codepath.worker import WorkerChoice
from workbench.engine.source import EngineSource

#: Where SGLang 0.5.23 keeps the aux capture set-up (older releases: ``model_runner.py``)
#: and the two EAGLE workers: the first files the landmarks that name them are looked in.
SPEC_AUX_FILE = "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
MODEL_RUNNER_FILE = "srt/model_executor/model_runner.py"
WORKER_FILES = ("srt/speculative/eagle_worker_v2.py", "srt/speculative/eagle_worker.py")


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
