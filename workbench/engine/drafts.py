"""The draft classes the engine on the box registers, and what each one's ``load_weights`` does,
read from that engine's own source with :mod:`ast` (any release; nothing is imported).

* :func:`registered_draft_classes`: every class an ``EntryClass`` under ``srt/models`` registers
  that is a speculative draft by what its source does — the class (or a module it builds, or a
  base defined in its file) reads the target's hidden states from ``forward_batch.spec_info.hidden_states``
  (SGLang's drafts all do: ``llama_eagle3.py``, ``kimi_k25_eagle3.py``, ``llama_eagle.py``, the
  ``*_nextn.py`` / ``*_mtp.py`` MTP heads). Its ``kind``: ``eagle3`` when its ``__init__`` sets
  ``self.capture_aux_hidden_states = True`` (an EAGLE-3 draft: it takes the target's aux hidden
  states; targets set it only in ``set_eagle3_layers_to_capture``), ``eagle`` when it feeds an
  ``fc`` with ``cat(embeds, spec_info.hidden_states)`` or its name says ``Eagle`` (EAGLE-1/2), else
  ``mtp`` (NextN / MTP heads: ``eh_proj`` and the like).
* :func:`load_weights_facts`: one class's ``load_weights`` as facts, each with the ``file:line``
  it was read from: the renames applied to checkpoint names (``str.replace`` pairs, a
  ``legacy_name_map`` dict, ``re.sub``), the ``model.`` prefix and when it is added, the
  ``stacked_params_mapping``, the names skipped on purpose (``t2d``, ``lm_head`` for EAGLE-1), the
  ``d2t`` → ``hot_token_id`` read, what happens to a name that matches no parameter (``silent``:
  ``if name in params_dict`` with no ``else``; ``warning``: a ``logger.warning`` then skip;
  ``raises``: an unguarded ``params_dict[name]``, a ``KeyError`` at start-up — sglang#9135), a
  ``super().load_weights`` it hands names on to (followed into the base class), the top-level
  modules its ``__init__`` and its model's ``__init__`` build (``self.X = Cls(...)``) and how it
  gets its ``lm_head`` (tied, its own, ``load_lm_head_from_target`` and when it is set). What the
  source does not say is ``None`` / ``"unknown"``, never guessed.
* :func:`follow`: one checkpoint name through those facts, step by step, to where it lands (a
  parameter, ``hot_token_id``, skipped, dropped, or the ``KeyError`` that stops the server).

Facts were read from the published wheels of SGLang 0.4.6 … 0.5.23 (``pip download --no-deps``);
``tests/workbench/test_draft_classes.py`` checks them on each covered release.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from remote.errors import RemoteFileNotFound

__all__ = ["DraftClass", "Module", "LmHead", "LoadWeights", "registered_draft_classes", "load_weights_facts",
           "entry_classes", "worker_lm_head_source", "follow", "DRAFT_CLASS_HISTORY"]

#: The first published SGLang release (of the 20 read, 0.4.6 … 0.5.23) whose ``srt/models``
#: defines each EAGLE draft class, and its file; found by hand (``grep -ln '^class
#: Eagle3DeepseekV2ForCausalLM' srt/models/*.py`` in each unpacked wheel: absent in 0.5.10, in
#: ``kimi_k25_eagle3.py`` from 0.5.12). ``0.4.6`` = the oldest release read (it may be older).
DRAFT_CLASS_HISTORY = {
    "LlamaForCausalLMEagle3": ("0.4.6", "srt/models/llama_eagle3.py"),
    "LlamaForCausalLMEagle": ("0.4.6", "srt/models/llama_eagle.py"),
    "Eagle3DeepseekV2ForCausalLM": ("0.5.12", "srt/models/kimi_k25_eagle3.py"),
}

#: Constructor names that build no parameters (skipped from a class's module list).
_PARAMLESS = ("LogitsProcessor", "Pooler", "MultimemAllGatherer", "BumpAllocator", "DraftParallelSpec",
              "get_layer_id", "copy", "deepcopy")
#: Constructor name endings that build parameters (a module the checkpoint must fill, or the
#: worker replaces).
_PARAM_SUFFIXES = ("Linear", "Embedding", "LMHead", "Norm", "LayerNorm", "RMSNorm", "ModuleList", "Layer", "MLP",
                   "Attention", "Model", "Block", "MLA", "Proj", "MoE", "Experts")


@dataclass(frozen=True)
class DraftClass:
    """A draft class the engine registers. ``name``; ``file`` (relative to the engine root);
    ``line`` (its ``class`` line); ``kind``: ``eagle3`` | ``eagle`` | ``mtp``; ``why``: what in
    the source says so (``file:line`` of the ``spec_info.hidden_states`` read and of the
    ``capture_aux_hidden_states = True`` / ``fc`` evidence)."""

    name: str
    file: str
    line: int
    kind: str
    why: str

    @property
    def eagle3(self) -> bool:
        """True for an EAGLE-3 draft (it takes the target's aux hidden states)."""
        return self.kind == "eagle3"


@dataclass(frozen=True)
class Module:
    """A top-level module a draft class builds: ``path`` (``lm_head``, ``model.fc``,
    ``model.midlayer``), ``ctor`` (the constructor's name, or ``alias of <path>``), ``where``
    (``file:line``), ``conditional`` (assigned under an ``if`` of ``__init__``: whether it exists
    depends on the config; the test's text in ``condition``), ``arg0`` (the constructor's first
    argument as written: ``self.hidden_size_in * 3`` is the fc's input width before SGLang 0.5.12)."""

    path: str
    ctor: str
    where: str
    conditional: bool = False
    condition: str | None = None
    arg0: str | None = None


@dataclass(frozen=True)
class LmHead:
    """How a draft class gets its ``lm_head``: ``tied_where`` (``self.lm_head =
    self.model.embed_tokens`` under a ``tie_word_embeddings`` test), ``own_where`` (its own
    ``ParallelLMHead``; ``rows`` the first argument's text), ``from_target_where`` / ``from_target_when``
    (``self.load_lm_head_from_target = True`` and the test it sits under, e.g.
    ``draft_vocab_size is None``; ``None`` when the class never sets it)."""

    tied_where: str | None = None
    own_where: str | None = None
    rows: str | None = None
    from_target_where: str | None = None
    from_target_when: str | None = None


@dataclass
class LoadWeights:
    """One draft class's ``load_weights`` (see the module docstring). ``cls``; ``owner`` (the class
    defining the method: a base when inherited); ``where`` (``file:line`` of the ``def``; ``None``
    when the class has none); ``renames``: ``[(kind, old, new, where)]`` with kind ``replace`` or
    ``regex``, applied in order; ``prefix`` (``"model."`` or ``None``) and ``prefix_mode``
    (``always``, ``unless-lm_head``, ``if-not-param``: tried as-is first); ``stacked``:
    ``[(param piece, checkpoint piece, shard id)]`` and ``stacked_where``; ``skips``:
    ``[(substring, where)]`` names skipped on purpose; ``handled``: ``[(substring, where)]`` names a
    branch of its own loads (fused projections: their target is the module the name falls in);
    ``d2t_where`` (the ``hot_token_id`` read);
    ``drop`` / ``drop_stacked``: ``silent`` | ``warning`` | ``raises`` | ``unknown`` for a
    name that matches no parameter in the regular / stacked branch, ``drop_where``; ``delegate``:
    the base ``load_weights`` it hands names to (``None`` if it loads them itself); ``modules``:
    the top-level :class:`Module` list (``None``: unknown); ``lm_head``: :class:`LmHead`;
    ``set_embed_where`` (the class's ``set_embed``; ``None``: it has none); ``notes``."""

    cls: str
    owner: str | None
    where: str | None
    renames: list = field(default_factory=list)
    prefix: str | None = None
    prefix_mode: str | None = None
    stacked: list = field(default_factory=list)
    stacked_where: str | None = None
    skips: list = field(default_factory=list)
    handled: list = field(default_factory=list)
    d2t_where: str | None = None
    drop: str = "unknown"
    drop_stacked: str = "unknown"
    drop_where: str | None = None
    drop_stacked_where: str | None = None
    delegate: "LoadWeights | None" = None
    modules: list | None = None
    lm_head: LmHead = field(default_factory=LmHead)
    set_embed_where: str | None = None
    notes: list = field(default_factory=list)
    #: ``file:line`` of the ``def load_weights`` itself when it only dispatches to another loader
    #: (``where`` is then the loader followed: the one the release runs by default).
    entry_where: str | None = None

    @property
    def final(self) -> "LoadWeights":
        """The ``load_weights`` that finally loads the names (the last of the hand-offs)."""
        cur = self
        while cur.delegate is not None:
            cur = cur.delegate
        return cur

    @property
    def followable(self) -> str | None:
        """``None`` when the names can be followed to a verdict (the final loader's treatment of a
        name no parameter has was read); else why not (the weight rules then do not run: they do
        not guess)."""
        fin = self.final
        if fin.where is None:
            return f"no load_weights found for {fin.cls}"
        if fin.drop == "unknown":
            return (f"what {fin.cls}.load_weights ({fin.where}) does with a name no parameter has could not be read "
                    "from its source")
        if self.modules is None or not self.modules:
            return f"the modules {self.cls} builds could not be read from its source"
        return None

    @property
    def layer_module(self) -> str | None:
        """``midlayer`` or ``layers`` (the decoder layer's module under ``model.``), ``None`` when unknown."""
        for m in self.modules or []:
            if m.path in ("model.midlayer", "model.layers"):
                return m.path.split(".", 1)[1]
        return None

    def to_dict(self) -> dict:
        """A JSON-able summary for evidence."""
        out = {"class": self.cls, "owner": self.owner, "read_from": self.where, "renames": self.renames,
               "prefix": self.prefix, "prefix_mode": self.prefix_mode, "stacked": [list(s) for s in self.stacked],
               "skips": self.skips, "handled": self.handled, "d2t": self.d2t_where, "unmatched_names": self.drop,
               "unmatched_names_stacked": self.drop_stacked, "unmatched_where": self.drop_where,
               "modules": [m.path for m in self.modules] if self.modules is not None else "unknown",
               "lm_head": dict(self.lm_head.__dict__), "set_embed": self.set_embed_where}
        if self.delegate is not None:
            out["delegate"] = self.delegate.to_dict()
        return out


# -- reading the source ---------------------------------------------------------------------------


def _text(src: Any, rel: str) -> str | None:
    try:
        return src.read(rel)
    except RemoteFileNotFound:
        return None


def entry_classes(tree: ast.Module) -> list[str]:
    """The names an ``EntryClass = [A, B]`` / ``EntryClass = A`` at module level registers."""
    out: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            vals = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            out += [v.id for v in vals if isinstance(v, ast.Name)]
    return out


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]


def _reads_spec_hidden(node: ast.AST) -> int | None:
    for n in ast.walk(node):
        if (isinstance(n, ast.Attribute) and n.attr == "hidden_states" and isinstance(n.value, ast.Attribute)
                and n.value.attr == "spec_info"):
            return n.lineno
    return None


def _method(node: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
            return item
    return None


def _self_assigns(fn: ast.FunctionDef) -> list[tuple[str, ast.AST, int, list[ast.expr]]]:
    """``(attr, value, line, enclosing if-tests)`` of every ``self.attr = value`` in ``fn``."""
    out: list = []

    def walk(stmts: list, tests: list) -> None:
        for st in stmts:
            if isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        out.append((t.attr, st.value, st.lineno, list(tests)))
            elif isinstance(st, ast.If):
                walk(st.body, tests + [st.test])
                walk(st.orelse, tests + [ast.UnaryOp(op=ast.Not(), operand=st.test)])
            elif isinstance(st, (ast.With, ast.For, ast.Try)):
                walk(st.body, tests)
                for h in getattr(st, "handlers", []):
                    walk(h.body, tests)
                walk(getattr(st, "orelse", []), tests)
    walk(fn.body, [])
    return out


def _ctor(value: ast.AST) -> str | None:
    if isinstance(value, ast.Call):
        f = value.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _captures_aux(node: ast.ClassDef) -> int | None:
    init = _method(node, "__init__")
    if init is None:
        return None
    for attr, value, line, tests in _self_assigns(init):
        if attr == "capture_aux_hidden_states" and isinstance(value, ast.Constant) and value.value is True and not tests:
            return line
    return None


#: Cheap structural markers a draft file has beyond ``spec_info.hidden_states``: the EAGLE-3 aux
#: capture and the EAGLE-1/2 ``fc`` call (MTP heads have neither).
_EAGLE_MARKERS = ("capture_aux_hidden_states = True", "self.fc(")


def registered_draft_classes(src: Any, *, scope: str = "all", also: tuple[str, ...] = ()) -> dict[str, DraftClass] | None:
    """``{class name: DraftClass}``: the draft classes the engine at ``src`` (an
    :class:`~workbench.engine.source.EngineSource`) registers, read as the module docstring says.
    One ``grep`` over ``srt/models`` picks the files with an ``EntryClass`` and a
    ``spec_info.hidden_states`` read; only those are read. ``scope`` bounds what is read (over SSH
    every file costs its size): ``all`` (every draft), ``eagle`` (files that also set
    ``capture_aux_hidden_states = True`` or call ``self.fc(``: the EAGLE-3 and EAGLE-1/2 drafts,
    about 60 KB on 0.5.23 against 400 KB for all), ``eagle3`` (only the first marker); ``also``:
    class names whose files are read whatever the scope (the draft's declared class). ``None``
    when the engine has no ``srt/models`` directory, and on a vLLM package (``src.layout ==
    "vllm"``: vLLM 0.32.0 registers its drafts in ``model_executor/models/registry.py``, not read here). A file this Python cannot parse is skipped
    and named in the ``__skipped__`` entry's ``why`` (never a silent gap)."""
    if scope not in ("all", "eagle", "eagle3"):
        raise ValueError(f"scope must be all, eagle or eagle3, got {scope!r}")
    markers = {"all": (), "eagle": _EAGLE_MARKERS, "eagle3": _EAGLE_MARKERS[:1]}[scope]
    also = tuple(a for a in also if a and re.fullmatch(r"\w+", a))
    tokens = ["EntryClass", "spec_info.hidden_states", *markers, *(f"class {a}(" for a in also)]
    if getattr(src, "layout", "sglang") == "vllm":
        return None  # SGLang's registry (EntryClass in srt/models); vLLM 0.32.0 registers drafts in
        # model_executor/models/registry.py (_SPECULATIVE_DECODING_MODELS), which this does not read
    try:
        hits = src.grep(tokens, under="srt/models")
    except RemoteFileNotFound:
        return None
    with_entry = {rel for rel, _ in hits["EntryClass"]}
    files = with_entry & {rel for rel, _ in hits["spec_info.hidden_states"]}
    if markers:
        wanted = {rel for m in markers for rel, _ in hits[m]}
        wanted |= {rel for a in also for rel, _ in hits[f"class {a}("]}
        files &= wanted
    if not with_entry:
        try:
            src.box.listdir(posixpath.join(src.root, "srt", "models"), timeout=src.timeout)
        except RemoteFileNotFound:
            return None
    out: dict[str, DraftClass] = {}
    for rel in sorted(files):
        tree = src.tree(rel)
        if tree is None:
            prev = out.get("__skipped__")
            out["__skipped__"] = DraftClass("__skipped__", rel, 0, "unknown",
                                            ((prev.why + ";") if prev else "") + f" {rel}: not parseable")
            continue
        classes = _classes(tree)
        for name in entry_classes(tree):
            node = classes.get(name)
            if node is None:
                continue
            got = _draft_kind(name, node, classes, rel)
            if got is not None and (scope != "eagle3" or got[0] == "eagle3" or name in also):
                out[name] = DraftClass(name, rel, node.lineno, got[0], got[1])
    if scope == "all":
        _registered_elsewhere(src, out, {rel for rel, _ in hits["spec_info.hidden_states"]})
    return out


def _registered_elsewhere(src: Any, out: dict[str, DraftClass], readers: set[str]) -> None:
    """Add the drafts an ``EntryClass`` registers but another file defines or whose draft
    structure is inherited: SGLang 0.5.23 ``dots3_nextn.py`` registers a class of
    ``dots3_common/nextn.py``; ``glm5_next_nextn.py`` subclasses ``DeepseekV3ForCausalLMNextN``.
    One ``grep`` for the ``EntryClass`` lines (single-line ones: a list spread over lines is
    not read here) and one for the ``class Name(`` lines of the names not yet known."""
    res = src.box.run(["grep", "-rnE", "--include=*.py", r"^EntryClass\s*=", posixpath.join(src.root, "srt", "models")],
                      timeout=src.timeout, check=False)
    names: dict[str, str] = {}
    for row in res.stdout.splitlines():
        path, _, rest = row.partition(":")
        _, _, text = rest.partition(":")
        for n in re.findall(r"\b([A-Z]\w*)\b", text.split("=", 1)[-1]):
            names.setdefault(n, posixpath.relpath(path, src.root))
    todo = sorted(n for n in names if n not in out and n != "EntryClass")
    if not todo:
        return
    hits = src.grep([f"class {n}(" for n in todo], under="srt/models")
    for n in todo:
        rows = hits.get(f"class {n}(") or []
        if not rows:
            continue
        rel, line = rows[0]
        text = (src.read(rel) if rel in readers else None)
        tree = src.tree(rel) if text is not None else None
        if tree is not None:
            classes = _classes(tree)
            if n in classes:
                got = _draft_kind(n, classes[n], classes, rel)
                if got is not None:
                    out[n] = DraftClass(n, rel, line, got[0], got[1] + f" (registered in {names[n]})")
                    continue
        # a subclass of a known draft defined elsewhere: read only its class line's bases
        res = src.box.run(["sed", "-n", f"{line}p", posixpath.join(src.root, rel)], timeout=src.timeout, check=False)
        bases = re.findall(r"\w+", res.stdout.partition("(")[2].partition(")")[0])
        base = next((b for b in bases if b in out), None)
        if base is not None:
            out[n] = DraftClass(n, rel, line, out[base].kind,
                                f"{rel}:{line} subclasses {base} ({out[base].why.split(';')[0]})")


def _related(node: ast.ClassDef, classes: dict[str, ast.ClassDef], depth: int = 3) -> list[ast.ClassDef]:
    """``node``, its bases defined in the same file, and the same-file classes its ``__init__``
    builds (``self.model = Model(...)``), transitively to ``depth``."""
    seen: dict[str, ast.ClassDef] = {node.name: node}
    todo = [(node, 0)]
    while todo:
        cur, d = todo.pop()
        if d >= depth:
            continue
        names = list(_base_names(cur))
        init = _method(cur, "__init__")
        if init is not None:
            names += [c for c in (_ctor(v) for _, v, _, _ in _self_assigns(init)) if c]
            # a class built or named there (SGLang 0.5.9 mistral_large_3_eagle.py: self.model_cls = Model)
            names += [n.id for n in ast.walk(init) if isinstance(n, ast.Name)]
        for n in names:
            if n in classes and n not in seen:
                seen[n] = classes[n]
                todo.append((classes[n], d + 1))
    return list(seen.values())


def _draft_kind(name: str, node: ast.ClassDef, classes: dict[str, ast.ClassDef], rel: str) -> tuple[str, str] | None:
    related = _related(node, classes)
    reads = [(c.name, _reads_spec_hidden(c)) for c in related]
    reads = [(c, line) for c, line in reads if line]
    if not reads:
        return None
    read_why = f"{rel}:{reads[0][1]} {reads[0][0]} reads forward_batch.spec_info.hidden_states"
    for c in related:
        if c is node or c.name in _base_names(node):
            line = _captures_aux(c)
            if line:
                return "eagle3", f"{read_why}; {rel}:{line} {c.name}.__init__ sets capture_aux_hidden_states = True"
    for c in related:
        for n in ast.walk(c):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "fc"
                    and any(_reads_spec_hidden(a) for a in n.args)):
                return "eagle", f"{read_why}; {rel}:{n.lineno} {c.name}: fc(cat(embeds, spec_info.hidden_states))"
    if "eagle" in name.lower() and "eagle3" not in name.lower():
        return "eagle", f"{read_why}; the class name says Eagle"
    return "mtp", f"{read_why}; no aux capture and no fc over cat(embeds, hidden): an MTP/NextN head"


# -- load_weights ---------------------------------------------------------------------------------


def _src_of(text: str, node: ast.AST) -> str:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and not hasattr(node, "lineno"):
        return f"not ({_src_of(text, node.operand)})"  # the else branch of an if
    return (ast.get_source_segment(text, node) or "").strip()


def _tests_src(text: str, tests: list) -> str:
    return " and ".join(t for t in (_src_of(text, x) for x in tests) if t)


def _imports(tree: ast.Module) -> dict[str, str]:
    """``{name: relative file}`` for ``from sglang.srt.models.x import Name`` (and the relative
    form) at module level."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module
            if mod.startswith("sglang."):
                mod = mod[len("sglang."):]
            path = mod.replace(".", "/") + ".py"
            for a in node.names:
                out[a.asname or a.name] = path
    return out


def _find(src: Any, name: str, rel: str) -> tuple[str, ast.ClassDef, str] | None:
    """Class ``name`` as seen from ``rel``: defined there, else where ``rel`` imports it from,
    else anywhere under ``srt/models`` (:meth:`EngineSource.find_class`)."""
    tree = src.tree(rel)
    if tree is not None:
        classes = _classes(tree)
        if name in classes:
            return rel, classes[name], _text(src, rel) or ""
        imp = _imports(tree).get(name)
        if imp and src.tree(imp) is not None and name in _classes(src.tree(imp)):
            return imp, _classes(src.tree(imp))[name], _text(src, imp) or ""
    return src.find_class(name)


def _find_method(src: Any, cls: str, method: str, rel: str, depth: int = 4):
    """``(file, def node, text, owner class, class node)`` of ``cls.method`` following bases."""
    hit = _find(src, cls, rel)
    if hit is None:
        return None
    frel, node, text = hit
    fn = _method(node, method)
    if fn is not None:
        return frel, fn, text, cls, node
    if depth > 0:
        for b in _base_names(node):
            if b not in ("Module", "object", cls):
                got = _find_method(src, b, method, frel, depth - 1)
                if got is not None:
                    return got
    return None


def _modules(src: Any, cls: str, rel: str, prefix: str = "", depth: int = 2) -> tuple[list[Module], list[str]]:
    """The top-level modules ``cls.__init__`` (or a base's) builds, with the model class's own
    (``self.model = Model(...)``) one level down; notes for what could not be read. A module is a
    ``self.X = Cls(...)`` whose constructor name ends like a layer with parameters (``Linear``,
    ``Embedding``, ``LMHead``, ``Norm``, ``ModuleList``, ``Layer``, ``MLP``, ``Attention``, ``Model``,
    ...: :data:`_PARAM_SUFFIXES`), or an alias of another module (``self.lm_head =
    self.model.embed_tokens``); private attributes and parameter-free helpers
    (``LogitsProcessor``, ...) are left out."""
    notes: list[str] = []
    hit = _find_method(src, cls, "__init__", rel)
    if hit is None:
        return [], [f"no __init__ of {cls} in the engine source"]
    frel, fn, text, owner, _ = hit
    out: list[Module] = []
    seen: set[str] = set()
    for attr, value, line, tests in _self_assigns(fn):
        if attr.startswith("_"):
            continue
        path = prefix + attr
        where = f"{frel}:{line}"
        cond = _tests_src(text, tests) or None
        if (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Attribute)
                and isinstance(value.value.value, ast.Name) and value.value.value.id == "self"):
            mod = Module(path, f"alias of {prefix}{value.value.attr}.{value.attr}", where, bool(tests), cond)
        else:
            ctor = _ctor(value)
            if ctor is None or ctor in _PARAMLESS or not ctor.endswith(_PARAM_SUFFIXES):
                continue
            first = value.args[0] if isinstance(value, ast.Call) and value.args else None
            mod = Module(path, ctor, where, bool(tests), cond, _src_of(text, first) if first is not None else None)
            if attr == "model" and depth > 0 and not prefix:
                sub, sub_notes = _modules(src, ctor, frel, "model.", depth - 1)
                notes += sub_notes
                if sub:  # the model's own modules stand for it
                    out += [m for m in sub if m.path not in seen]
                    seen |= {m.path for m in sub}
                    continue
        if path in seen:
            # assigned on several branches (tied / own head): one module, conditional
            prev = next(m for m in out if m.path == path)
            ctors = sorted({*prev.ctor.split(" | "), mod.ctor}, key=lambda c: c.startswith("alias of"))
            out[out.index(prev)] = Module(path, " | ".join(ctors), prev.where, True,
                                          " / ".join(c for c in (prev.condition, mod.condition) if c) or None,
                                          prev.arg0 if prev.arg0 == mod.arg0 else None)
            continue
        seen.add(path)
        out.append(mod)
    if not prefix and owner != cls:
        notes.append(f"{cls}.__init__ is inherited from {owner} ({frel}:{fn.lineno})")
    return out, notes


def _lm_head(src: Any, cls: str, rel: str) -> LmHead:
    hit = _find_method(src, cls, "__init__", rel)
    if hit is None:
        return LmHead()
    frel, fn, text, _, _ = hit
    tied = own = rows = ft_where = ft_when = None
    for attr, value, line, tests in _self_assigns(fn):
        tests_src = _tests_src(text, tests)
        if attr == "lm_head":
            if isinstance(value, ast.Attribute) and value.attr == "embed_tokens":
                tied = f"{frel}:{line}"
            elif _ctor(value) and _ctor(value).endswith(("LMHead", "Linear")):
                own = f"{frel}:{line}"
                rows = _src_of(text, value.args[0]) if value.args else None
        if attr == "load_lm_head_from_target" and isinstance(value, ast.Constant) and value.value is True:
            ft_where, ft_when = f"{frel}:{line}", tests_src or "always"
    return LmHead(tied, own, rows, ft_where, ft_when)


def _name_tests(test: ast.AST) -> list[tuple[str, bool]]:
    """``[(substring, positive)]`` for ``"x" in name`` / ``"x" not in name`` / ``name == "x"`` /
    ``name.endswith(".x")`` tests, joined by ``or``/``and``."""
    out = []
    if isinstance(test, ast.BoolOp):
        for v in test.values:
            out += _name_tests(v)
    elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Constant) \
            and isinstance(test.left.value, str):
        if isinstance(test.ops[0], ast.In):
            out.append((test.left.value, True))
        elif isinstance(test.ops[0], ast.NotIn):
            out.append((test.left.value, False))
    elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) \
            and isinstance(test.comparators[0], ast.Constant) and isinstance(test.comparators[0].value, str):
        out.append((test.comparators[0].value, True))
    elif isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "endswith" \
            and test.args and isinstance(test.args[0], ast.Constant) and isinstance(test.args[0].value, str):
        out.append((test.args[0].value.lstrip("."), True))
    return out


def _ends_in_skip(body: list) -> bool:
    return bool(body) and isinstance(body[-1], ast.Continue)


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _subscripts_params(node: ast.AST) -> int | None:
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "params_dict":
            return n.lineno
    return None


def _guarded(stmts: list, inner_loop: bool = False) -> tuple[str, int | None]:
    """How a branch treats a name with no parameter: walk its statements for the
    ``params_dict`` lookup and what guards it. ``inner_loop``: the statements are the body of the
    ``for ... in stacked_params_mapping`` loop, where ``if x not in params_dict: continue`` goes on
    to the next mapping (``next``; SGLang 0.5.23 ``kimi_k25_eagle3.py``), not to the next name."""
    for st in stmts:
        if isinstance(st, ast.If) and _mentions(st.test, "params_dict"):
            test = st.test
            negated = isinstance(test, ast.Compare) and any(isinstance(o, ast.NotIn) for o in test.ops)
            if negated:
                # if x not in params_dict: [warn]; continue
                warn = any(isinstance(n, ast.Attribute) and n.attr in ("warning", "warn", "warning_once")
                           for n in ast.walk(ast.Module(body=st.body, type_ignores=[])))
                if _ends_in_skip(st.body):
                    if inner_loop:
                        return "next", st.lineno
                    return ("warning" if warn else "silent"), st.lineno
                continue
            if isinstance(test, ast.Compare) and any(isinstance(o, ast.In) for o in test.ops):
                if _subscripts_params(ast.Module(body=st.body, type_ignores=[])):
                    if not st.orelse:
                        return "silent", st.lineno
                    warn = any(isinstance(n, ast.Attribute) and n.attr in ("warning", "warn", "warning_once")
                               for n in ast.walk(ast.Module(body=st.orelse, type_ignores=[])))
                    raises = any(isinstance(n, ast.Raise) for n in ast.walk(ast.Module(body=st.orelse, type_ignores=[])))
                    return ("raises" if raises else "warning" if warn else "silent"), st.lineno
            continue
        if isinstance(st, (ast.Assign, ast.Expr, ast.AnnAssign)):
            line = _subscripts_params(st)
            if line:
                return "raises", line
    return "unknown", None


def _rename_calls(node: ast.AST, rel: str, dicts: dict[str, dict]) -> list:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.For) and isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Attribute) \
                and n.iter.func.attr == "items" and isinstance(n.iter.func.value, ast.Name) \
                and n.iter.func.value.id in dicts and any(
                    isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "replace"
                    for c in ast.walk(n)):
            out += [("replace", old, new, f"{rel}:{n.lineno}") for old, new in dicts[n.iter.func.value.id].items()]
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "replace" \
                and len(n.args) == 2 and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in n.args):
            out.append(("replace", n.args[0].value, n.args[1].value, f"{rel}:{n.lineno}"))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "sub" \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "re" and len(n.args) >= 2 \
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in n.args[:2]):
            out.append(("regex", n.args[0].value, n.args[1].value, f"{rel}:{n.lineno}"))
    return out


def _renames(stmts: list, rel: str, dicts: dict[str, dict]) -> list:
    """The renames every name goes through: ``str.replace`` / ``re.sub`` with literal arguments in
    the loop body's own statements (and in ``for old, new in legacy_map.items()`` loops, and in an
    ``if`` that only renames); a branch that handles some names itself and ``continue``s (the MLA
    class's fused q/kv-a projection) is not a rename of every name."""
    out = []
    for st in stmts:
        if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
            out += _rename_calls(st, rel, dicts)
        elif isinstance(st, ast.If) and not st.orelse and all(isinstance(b, ast.Assign) for b in st.body):
            out += _rename_calls(ast.Module(body=st.body, type_ignores=[]), rel, dicts)
    return out


def _loads(stmts: list) -> bool:
    """The statements load a tensor (a ``params_dict`` lookup, a ``weight_loader`` or
    ``load_weights`` call): a handler, not a skip."""
    for n in ast.walk(ast.Module(body=stmts, type_ignores=[])):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "params_dict":
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute)) and \
                (getattr(n.func, "id", None) or getattr(n.func, "attr", None)) in ("weight_loader", "load_weights"):
            return True
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Subscript) for t in n.targets):
            return True  # cached for a fused load later (kimi_k25_eagle3.py cached_a_proj)
    return False


def _literal_assigns(fn: ast.FunctionDef) -> dict[str, Any]:
    out = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            try:
                out[n.targets[0].id] = (ast.literal_eval(n.value), n.lineno)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
    return out


def _prefix(fn: ast.FunctionDef, text: str) -> tuple[str | None, str | None]:
    """``("model.", mode)`` when the body adds a ``model.`` prefix to names."""
    parents: dict[ast.AST, ast.AST] = {}
    for p in ast.walk(fn):
        for c in ast.iter_child_nodes(p):
            parents[c] = p
    for n in ast.walk(fn):
        is_prefix = (isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[0], ast.Constant)
                     and n.values[0].value == "model.") or (
            isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and isinstance(n.left, ast.Constant)
            and n.left.value == "model.")
        if not is_prefix:
            continue
        up = parents.get(n)
        while up is not None and up is not fn:
            if isinstance(up, (ast.IfExp, ast.If)) and _mentions(up.test, "params_dict"):
                return "model.", "if-not-param"
            if isinstance(up, (ast.IfExp, ast.If)) and "lm_head" in _src_of(text, up.test):
                return "model.", "unless-lm_head"
            up = parents.get(up)
        return "model.", "always"
    return None, None


def _env_default(src: Any, name: str) -> tuple[bool, str] | None:
    """``(default, "srt/environ.py:line")`` of ``NAME = EnvBool(True|False)`` (SGLang 0.5.23
    ``srt/environ.py:315``: ``SGLANG_ENABLE_WEIGHT_LOADER_V2 = EnvBool(False)``); ``None`` when
    the file or the variable is not there."""
    text = src.read("srt/environ.py")
    if text is None:
        return None
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(rf"\s*{re.escape(name)}\s*=\s*EnvBool\((True|False)\)", line)
        if m:
            return m.group(1) == "True", f"srt/environ.py:{i}"
    return None


def _dispatch_target(src: Any, owner_node: ast.ClassDef, fn: ast.FunctionDef, text: str):
    """The loader a dispatching ``load_weights`` runs by default, and how it chooses, in words:
    ``if envs.X.get(): return self.a(...)`` then ``return self.b(...)`` (SGLang 0.5.18+
    ``llama.py``: ``SGLANG_ENABLE_WEIGHT_LOADER_V2``, default ``EnvBool(False)`` → ``b``,
    ``_legacy_load_weights``). A switch whose default is not read follows the unconditional
    return (and says the default is unknown); a body without such a switch, the first loader it
    calls. ``None`` when it calls no loader of the class."""
    def loader_call(stmt, loop: bool = True):
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                    and n.func.value.id == "self":
                target = _method(owner_node, n.func.attr)
                if target is not None and (not loop or any(isinstance(x, ast.For) for x in ast.walk(target))):
                    return target
        return None

    switch = next((st for st in fn.body if isinstance(st, ast.If) and loader_call(
        ast.Module(body=st.body, type_ignores=[]), loop=False)), None)
    fallback = next((loader_call(st) for st in fn.body if isinstance(st, ast.Return) and loader_call(st)), None)
    if switch is None or fallback is None:
        for st in fn.body:
            target = loader_call(st)
            if target is not None:
                return target, f"dispatches to {target.name}"
        return None
    when = loader_call(ast.Module(body=switch.body, type_ignores=[]), loop=False)
    cond = ast.get_source_segment(text, switch.test) or ast.unparse(switch.test)
    env = next((n.attr for n in ast.walk(switch.test) if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name) and n.value.id == "envs"), None)
    default = _env_default(src, env) if env else None
    how = f"switches on `{cond}` (line {switch.lineno}): {when.name} when it is true, else {fallback.name}"
    if default is None:
        return fallback, how + "; its default is not read from the source, the unconditional branch is followed"
    runs = when if default[0] else fallback
    return runs, how + f"; by default ({env} = EnvBool({default[0]}), {default[1]}) {runs.name} runs"


def load_weights_facts(src: Any, cls: str, rel: str | None = None, _depth: int = 3) -> LoadWeights | None:
    """The facts of ``cls.load_weights`` in the engine at ``src`` (see the module docstring);
    ``rel``: the file the class is registered in (else found under ``srt/models``). ``None`` when
    the class is not in the source. A ``load_weights`` that only dispatches to another method of
    the class (``return self._legacy_load_weights(weights)``, SGLang 0.5.23 ``llama.py``) is
    followed into the first one it names (a note says so)."""
    found = _find(src, cls, rel) if rel else src.find_class(cls)
    if found is None:
        return None
    crel = found[0]
    mods, notes = _modules(src, cls, crel)
    facts = LoadWeights(cls, None, None, modules=mods, lm_head=_lm_head(src, cls, crel), notes=notes)
    se = _find_method(src, cls, "set_embed", crel)
    if se is not None:
        facts.set_embed_where = f"{se[0]}:{se[1].lineno}"
    hit = _find_method(src, cls, "load_weights", crel)
    if hit is None:
        facts.notes.append(f"no load_weights in {cls} or its bases")
        return facts
    frel, fn, text, owner, owner_node = hit
    # a load_weights that dispatches (SGLang 0.5.18+ llama.py: env switch between two loaders)
    if not any(isinstance(n, ast.For) for n in ast.walk(fn)):
        picked = _dispatch_target(src, owner_node, fn, text)
        if picked is not None:
            target, how = picked
            facts.entry_where = f"{frel}:{fn.lineno}"
            facts.notes.append(f"{owner}.load_weights ({frel}:{fn.lineno}) {how}; {target.name} "
                               f"({frel}:{target.lineno}) is read")
            fn = target
    facts.owner, facts.where = owner, f"{frel}:{fn.lineno}"
    lits = _literal_assigns(fn)
    dicts = {k: v for k, (v, _) in lits.items() if isinstance(v, dict)
             and all(isinstance(a, str) and isinstance(b, str) for a, b in v.items())}
    loop = next((n for n in ast.walk(fn) if isinstance(n, ast.For) and _mentions(n.iter, "weights")), None)
    body = loop.body if loop is not None else fn.body
    facts.renames = _renames(body, frel, dicts)
    facts.prefix, facts.prefix_mode = _prefix(fn, text)
    for k, (v, line) in lits.items():
        if k.startswith("stacked_params_mapping") and isinstance(v, list) and all(
                isinstance(t, tuple) and len(t) == 3 for t in v):
            facts.stacked, facts.stacked_where = [tuple(t) for t in v], f"{frel}:{line}"
    # names skipped on purpose, the d2t read, a body wrapped in `if "lm_head" not in name:`, and
    # names a branch of their own handles (fused projections)
    for st in ast.walk(ast.Module(body=body, type_ignores=[])):
        if not isinstance(st, ast.If):
            continue
        if isinstance(st.test, ast.BoolOp) and isinstance(st.test.op, ast.And):
            parts = [_name_tests(v) for v in st.test.values]
            if st in body and all(len(p) == 1 and not p[0][1] for p in parts):
                # `if "d2t" not in name and "t2d" not in name and "lm_head" not in name: load ...
                # elif "lm_head" in name: ...` (SGLang 0.4.6 llama_eagle3.py): a name holding one of
                # them is skipped unless the else branch takes it
                taken = {sub for o in st.orelse if isinstance(o, ast.If) for sub, pos in _name_tests(o.test) if pos}
                for (sub, _), in parts:
                    if sub not in taken and sub not in [s_ for s_, _ in facts.skips]:
                        facts.skips.append((sub, f"{frel}:{st.lineno}"))
            continue  # an `a and b` test skips only sometimes (tied lm_head, an extra bias): not recorded
        tests = _name_tests(st.test)
        hot = any(isinstance(n, ast.Attribute) and n.attr == "hot_token_id" for n in ast.walk(
            ast.Module(body=st.body, type_ignores=[])))
        where = f"{frel}:{st.lineno}"
        for sub, positive in tests:
            if positive and hot and "d2t" in sub:
                facts.d2t_where = facts.d2t_where or where
            elif positive and _ends_in_skip(st.body):
                if _loads(st.body):
                    facts.handled.append((sub, where))
                elif sub not in [s_ for s_, _ in facts.skips]:
                    facts.skips.append((sub, where))
            elif not positive and not st.orelse and st in body and len(tests) == 1:
                facts.skips.append((sub, where))
    # where a name goes when no parameter has it
    stacked_for = next((n for n in ast.walk(ast.Module(body=body, type_ignores=[])) if isinstance(n, ast.For)
                        and isinstance(n.iter, ast.Name) and n.iter.id.startswith("stacked_params_mapping")), None)
    if stacked_for is not None:
        facts.drop_stacked, sline = _guarded(stacked_for.body, inner_loop=True)
        facts.drop_stacked_where = f"{frel}:{sline}" if sline else None
        # the regular branch: the for's else, or what follows the loop in the body
        regular = ((stacked_for.orelse or body[body.index(stacked_for) + 1:]) if stacked_for in body
                   else stacked_for.orelse)
        facts.drop, line = _guarded(regular or [])
    else:
        facts.drop, line = _guarded(body)
    facts.drop_where = f"{frel}:{line}" if line else None
    # handing names on to the base class's load_weights
    sup = next((n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "load_weights" and isinstance(n.func.value, ast.Call)
                and isinstance(n.func.value.func, ast.Name) and n.func.value.func.id == "super"), None)
    if sup is not None and _depth > 0:
        base = next((b for b in _base_names(owner_node) if b not in ("Module", "object")), None)
        if base is not None:
            facts.delegate = load_weights_facts(src, base, frel, _depth - 1)
            if facts.delegate is not None:
                facts.delegate.modules = None  # the draft's modules are its own, not the base's
                d = facts.delegate
                facts.notes.append(f"names are handed to {base}.load_weights ({d.entry_where or d.where})"
                                   + (f": {d.notes[-1].split(') ', 1)[1]}" if d.entry_where and d.notes else ""))
    return facts


def worker_lm_head_source(src: Any, *, worker: Any = None) -> str | None:
    """``file:line`` where the draft worker this server runs honours a draft's
    ``load_lm_head_from_target`` (SGLang ``srt/speculative/eagle_worker.py`` from 0.5.2,
    ``eagle_worker_v2.py``; 0.5.12 ``eagle_worker_v2.py:218`` for ``EAGLEWorkerV2``, its default,
    ``eagle_worker.py:183`` for ``EAGLEWorker``). ``worker``: the worker the server runs
    (:class:`workbench.engine.codepath.WorkerChoice`, from
    :func:`workbench.engine.codepath.eagle_worker` with the launch's environment and arguments;
    its ``file`` and ``other`` are read): never the other worker's file, nor another worker
    class's (``multi_layer_eagle_worker.py``); ``None``: the first file that reads it (the caller
    could not tell the worker). ``None`` when the worker this server runs does not read it (the
    draft's own head is then always kept under EAGLE3). Box errors propagate."""
    hits = src.grep(["load_lm_head_from_target"], under="srt/speculative")
    rows = sorted(hits["load_lm_head_from_target"])
    if rows and worker is not None:
        own = [r for r in rows if r[0] == worker.file]
        # a helper module of the worker may read it; another worker class's file never counts
        rows = own or [r for r in rows if r[0] != worker.other and not r[0].endswith(("worker.py", "worker_v2.py"))]
    return f"{rows[0][0]}:{rows[0][1]}" if rows else None


def _param_of(name: str, params: Any) -> str | None:
    """``name`` if ``params`` has it: a set of full parameter names is matched exactly; a list of
    :class:`Module` by module (``name`` is the module's path or lies under it: the inner names are
    not read from the source, so a name under a module counts as that module's)."""
    if isinstance(params, (set, dict, frozenset)):
        return name if name in params else None
    for m in params:
        if name == m.path or name.startswith(m.path + "."):
            return m.path
    return None


def follow(name: str, lw: LoadWeights, params: Any) -> tuple[str, str | None, Any, str | None]:
    """Where ``lw``'s ``load_weights`` puts checkpoint tensor ``name``, step by step as its source
    does: ``(how, param, shard id, file:line)``. ``how``: ``d2t`` (read into ``hot_token_id``),
    ``skipped`` (skipped on purpose: ``t2d``, an EAGLE-1 ``lm_head``), ``loaded``, or for a name no
    parameter has: ``dropped`` (skipped without a word), ``dropped-warned`` (skipped with a
    ``logger.warning``), ``raises`` (``params_dict[name]`` unguarded: ``KeyError``, the server does
    not start), ``unknown`` (the source's branch could not be read). ``params``: the full
    parameter names (a set) or the class's :attr:`LoadWeights.modules`. Renames, the ``model.``
    prefix and a hand-off to the base class's ``load_weights`` are applied in the source's order
    (renames, then the prefix, then the base's own steps)."""
    n, cur = name, lw
    while True:
        if cur.d2t_where and "d2t" in n:
            return "d2t", None, None, cur.d2t_where
        for sub, where in cur.skips:
            if sub in n:
                return "skipped", None, None, where
        for kind, old, new, _ in cur.renames:
            n = n.replace(old, new) if kind == "replace" else re.sub(old, new, n)
        if cur.prefix and (cur.prefix_mode == "always"
                           or (cur.prefix_mode == "unless-lm_head" and not n.startswith("lm_head"))):
            n = cur.prefix + n
        if cur.delegate is not None:
            cur = cur.delegate
            continue
        break

    def resolve(cand: str) -> str | None:
        got = _param_of(cand, params)
        if got is None and cur.prefix_mode == "if-not-param" and cur.prefix:
            got = _param_of(cur.prefix + cand, params)
        return got

    for sub, where in cur.handled:
        if sub in n:
            got = resolve(n)
            return ("loaded", got, None, where) if got else ("dropped", None, None, where)
    for param_piece, ckpt_piece, shard in cur.stacked:
        if ckpt_piece not in n:
            continue
        got = resolve(n.replace(ckpt_piece, param_piece))
        if got is not None:
            return "loaded", got, shard, cur.stacked_where
        if cur.drop_stacked == "next":
            continue
        # the first matching shard decides (a stacked name is not tried as a plain one)
        return _dropped(cur.drop_stacked), None, None, cur.drop_stacked_where or cur.stacked_where
    got = resolve(n)
    if got is not None:
        return "loaded", got, None, cur.where
    return _dropped(cur.drop), None, None, cur.drop_where


def _dropped(mode: str) -> str:
    return {"silent": "dropped", "warning": "dropped-warned", "raises": "raises"}.get(mode, "unknown")
