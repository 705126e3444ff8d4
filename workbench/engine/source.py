"""The engine's source on the box, read exactly (:mod:`workbench.engine.locate` finds the package).

* :class:`EngineSource` reads files of that package through the :class:`remote.Box` API (each
  file once), shows numbered lines with context, and finds definitions (functions, methods,
  classes) by name with :mod:`ast` (``grep -F`` on the box only narrows the candidate files).
* The target class's ``set_eagle3_layers_to_capture`` is *evaluated* from the box's source
  (:meth:`EngineSource.capture_rule`), so the aux-layer offset rule follows the engine version.

Facts encoded here were read from SGLang 0.5.23 (``pip download --no-deps sglang==0.5.23``).
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from remote.errors import RemoteFileNotFound
from workbench.errors import SourceLookupError

__all__ = ["SourceLookupError", "EngineSource", "Definition", "SourceExcerpt", "CaptureRule", "split_captured"]


_SAFE_BUILTINS = {n: __builtins__[n] if isinstance(__builtins__, dict) else getattr(__builtins__, n)
                  for n in ("len", "list", "max", "min", "range", "sorted", "int", "isinstance", "hasattr",
                            "getattr", "setattr", "tuple", "set", "enumerate", "any", "all", "AttributeError",
                            "ValueError", "RuntimeError", "NotImplementedError", "TypeError", "True", "False", "None")
                  if (isinstance(__builtins__, dict) and n in __builtins__) or hasattr(__builtins__, n)}


class _Rec:
    """A stand-in ``self`` for evaluating ``set_eagle3_layers_to_capture``: any attribute
    exists; ``model.set_eagle3_layers_to_capture(ids)`` records ``layers_to_capture``."""

    def __init__(self, **kw: Any):
        self.__dict__.update(kw)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _Rec()
        setattr(self, name, value)
        return value

    def __getitem__(self, key: Any) -> "_Rec":
        return _Rec()

    def set_eagle3_layers_to_capture(self, ids: Any = None) -> None:
        self.layers_to_capture = list(ids) if ids is not None else None  # raises as list() would


@dataclass
class CaptureRule:
    """What the target captures for the given ids: ``captured`` (layer indices the capture loop
    tests, as ints: an entry the engine set that equals an int by value, ``2.0`` or ``True``, is
    that int, since the loop tests ``i in self.layers_to_capture``), ``reachable_max`` (largest
    index the loop reaches), ``source`` (file:line of the method), ``how`` (``evaluated`` from the
    box's source or ``modelled`` from 0.5.23), ``unmatchable`` (entries the method set that equal
    no layer index — ``"2"``, ``2.5``, ``None``, ``[1]`` — so they never fire) and ``error``
    (``"TypeError: ..."``: the method raised for these ids, so the engine fails at start-up when
    EAGLE3 sets capture up; ``captured`` is then ``None``) and ``ignores_ids`` (the method takes no
    layer ids at all, so the draft's ids are never read and ``captured`` is the release's default
    layers whatever the config says: SGLang 0.4.6–0.4.8 ``srt/models/llama.py``
    ``set_eagle3_layers_to_capture(self)``, called as ``set_eagle3_layers_to_capture()`` by
    ``model_runner.py``; 0.4.9 on pass the ids)."""

    captured: list[int] | None
    reachable_max: int
    source: str
    how: str
    unmatchable: list = field(default_factory=list)
    error: str | None = None
    ignores_ids: bool = False


class EngineSource:
    """The engine's source tree on the box (``root`` = the ``sglang`` package directory) with
    the lookups the source-dependent rules need. Files are read once (``read_text``); class
    definitions are found with one ``grep`` per class name over ``srt/models``. Every method
    returns ``None`` (not raises) when the file or class is absent; box errors propagate.
    """

    def __init__(self, box: Any, root: str, version: str | None, *, timeout: float = 30):
        self.box, self.root, self.version, self.timeout = box, root.rstrip("/"), version, timeout
        self._files: dict[str, str | None] = {}
        self._classes: dict[str, tuple[str, str] | None] = {}
        self._trees: dict[str, ast.Module | None] = {}
        self._greps: dict[tuple, dict[str, list[tuple[str, int]]]] = {}

    def read(self, rel: str) -> str | None:
        """The text of ``root/rel``, ``None`` when the file does not exist."""
        rel = self.rel(rel)
        if rel not in self._files:
            path = posixpath.join(self.root, rel)
            try:
                self._files[rel] = self.box.read_text(path, timeout=self.timeout)
            except RemoteFileNotFound:
                self._files[rel] = None
        return self._files[rel]

    # -- files and lines ---------------------------------------------------------------------

    def rel(self, path: str) -> str:
        """``path`` as a path relative to the package root. Accepts a relative path
        (``srt/models/llama_eagle3.py``, also with a leading ``sglang/``) or an absolute path under
        the root. Raises :class:`SourceLookupError` for an absolute path outside the root or a
        path that climbs out of it."""
        path = str(path)
        if path.startswith("/"):
            norm = posixpath.normpath(path)
            if norm != self.root and not norm.startswith(self.root + "/"):
                raise SourceLookupError(f"{path} is not inside the engine package", where=self.root)
            return posixpath.relpath(norm, self.root)
        norm = posixpath.normpath(path)
        pkg = posixpath.basename(self.root)
        if norm.startswith(pkg + "/") and not norm.startswith("srt/"):
            norm = norm[len(pkg) + 1:]
        if norm == ".." or norm.startswith("../"):
            raise SourceLookupError(f"{path} climbs out of the engine package", where=self.root)
        return norm

    def path(self, rel: str) -> str:
        """The absolute path on the box of ``rel`` (see :meth:`rel` for the accepted forms)."""
        return posixpath.join(self.root, self.rel(rel))

    def lines(self, rel: str) -> list[str]:
        """The lines of a source file (without line endings; ``lines[0]`` is line 1).
        Raises :class:`SourceLookupError` when the file does not exist."""
        text = self.read(self.rel(rel))
        if text is None:
            raise SourceLookupError(f"no file {self.rel(rel)} in the engine package", where=self.root)
        return text.splitlines()

    def tree(self, rel: str) -> ast.Module | None:
        """The parsed module (cached); ``None`` when the file is absent or this Python cannot
        parse it."""
        rel = self.rel(rel)
        if rel not in self._trees:
            text = self.read(rel)
            try:
                self._trees[rel] = ast.parse(text) if text is not None else None
            except SyntaxError:
                self._trees[rel] = None
        return self._trees[rel]

    def show(self, rel: str, line: int, context: int = 5) -> "SourceExcerpt":
        """Lines ``line - context`` .. ``line + context`` of a file (1-based, clipped to the file),
        numbered. Raises :class:`SourceLookupError` when the file is absent or ``line`` is
        outside it."""
        lines = self.lines(rel)
        if not 1 <= int(line) <= len(lines):
            raise SourceLookupError(f"line {line} is outside {self.rel(rel)} (it has {len(lines)} lines)",
                                    where=self.path(rel))
        first, last = max(1, line - context), min(len(lines), line + context)
        return SourceExcerpt(self.path(rel), first, last, int(line), tuple(lines[first - 1:last]))

    @property
    def layout(self) -> str:
        """``"vllm"`` when the root is a vLLM package (it has ``model_executor/models/registry.py``),
        else ``"sglang"`` (SGLang and the sandbox's mirror: ``srt/``). Read once."""
        if not hasattr(self, "_layout"):
            self._layout = "vllm" if self.read("model_executor/models/registry.py") is not None else "sglang"
        return self._layout

    @property
    def code_dir(self) -> str:
        """The directory definitions are searched under: ``srt`` on SGLang, the whole package
        (``""``) on vLLM."""
        return "" if self.layout == "vllm" else "srt"

    @property
    def models_dir(self) -> str:
        """Where the model classes live: ``srt/models`` (SGLang), ``model_executor/models`` (vLLM)."""
        return "model_executor/models" if self.layout == "vllm" else "srt/models"

    def grep(self, tokens: Sequence[str], *, under: str | None = None) -> dict[str, list[tuple[str, int]]]:
        """``{token: [(relative file, line), ...]}`` for fixed strings in the ``*.py`` files under
        ``root/under`` (default :attr:`code_dir`): one ``grep -rnF`` on the box for all tokens.
        Used only to pick candidate files; lines are then judged with :mod:`ast`."""
        if under is None:
            under = self.code_dir
        tokens = [t for t in tokens if t]
        out: dict[str, list[tuple[str, int]]] = {t: [] for t in tokens}
        if not tokens:
            return out
        key = (under, tuple(tokens))
        if key in self._greps:
            return self._greps[key]
        cmd = ["grep", "-rnF", "--include=*.py"]
        for t in tokens:
            cmd += ["-e", t]
        cmd.append(posixpath.join(self.root, under))
        res = self.box.run(cmd, timeout=self.timeout, check=False)
        if res.exit_code not in (0, 1):
            raise SourceLookupError(f"grep over the engine source failed: {res.stderr.strip()[-200:]}",
                                    where=posixpath.join(self.root, under))
        for row in res.stdout.splitlines():
            parts = row.split(":", 2)
            if len(parts) < 3 or not parts[1].isdigit():
                continue
            rel = posixpath.relpath(parts[0], self.root)
            for t in tokens:
                if t in parts[2]:
                    out[t].append((rel, int(parts[1])))
        self._greps[key] = out
        return out

    def find_definition(self, name: str, *, file: str | None = None, limit: int = 60) -> list["Definition"]:
        """Every function, method or class called ``name`` (``forward``, ``LlamaModel.forward``,
        ``LlamaForCausalLMEagle3``; a dotted name matches the end of the qualified name), found by
        walking each candidate file's :mod:`ast`. Candidates: ``file`` when given, else the files
        under ``srt/`` whose text holds ``def <last part>`` / ``class <last part>`` (or, for a
        dotted name, ``class <first part>``).

        ``Class.method`` that the class does not define itself is looked up in its base classes in
        method resolution order (C3, as Python computes it, over the bases :mod:`ast` can resolve:
        a class of the same file defined before it, the module a ``from ... import`` in that file
        names, else the one file under ``srt/`` that defines ``class <base>``); the first base that
        defines it gives the :class:`Definition`, with ``inherited_by`` (the class asked for) and
        ``inherited_from`` (the defining class) set. Bases outside the engine package (``nn.Module``)
        end the search. Raises :class:`SourceLookupError` when nothing is found (the message names
        the classes searched and the bases that could not be resolved), or when more than ``limit``
        files are candidates (qualify the name or give ``file``)."""
        parts = [p for p in (name or "").split(".") if p]
        if not parts or not all(re.fullmatch(r"[A-Za-z_]\w*", p) for p in parts):
            raise SourceLookupError(f"{name!r} is not a Python name (use func, Class or Class.method)",
                                    where=self.root)
        if file is not None:
            files = [self.rel(file)]
            if self.read(files[0]) is None:
                raise SourceLookupError(f"no file {files[0]} in the engine package", where=self.root)
        else:
            tokens = [f"class {parts[0]}"] if len(parts) > 1 else [f"def {parts[-1]}", f"class {parts[-1]}"]
            hits = self.grep(tokens)
            files = sorted({rel for t in tokens for rel, _ in hits[t]})
            if len(files) > limit:
                raise SourceLookupError(f"{name!r} is defined in {len(files)} files; qualify it (Class.method) "
                                        "or give the file", where=self.root)
        found: list[Definition] = []
        for rel in files:
            tree = self.tree(rel)
            if tree is None:
                continue
            for qual, node in _walk_definitions(tree):
                if qual == name or qual.endswith("." + name):
                    found.append(self._definition(rel, qual, node))
        searched: list[str] = []
        unresolved: list[str] = []
        if not found and len(parts) > 1:
            owner = ".".join(parts[:-1])
            for rel in files:
                tree = self.tree(rel)
                if tree is None:
                    continue
                for qual, node in _walk_definitions(tree):
                    if isinstance(node, ast.ClassDef) and (qual == owner or qual.endswith("." + owner)):
                        hit = self._inherited(rel, qual, node, parts[-1], searched, unresolved)
                        if hit is not None:
                            found.append(hit)
        if not found:
            extra = ""
            if searched:
                extra = f": {', '.join(searched)} do not define {parts[-1]!r}"
                if unresolved:
                    extra += f"; base(s) not found in the engine source: {', '.join(sorted(set(unresolved)))}"
            raise SourceLookupError(f"no definition of {name!r} in the engine source{extra}",
                                    where=self.path(file) if file else self.root)
        return found

    def _definition(self, rel: str, qual: str, node: ast.AST, **inherited: str) -> "Definition":
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        kind = "class" if isinstance(node, ast.ClassDef) else ("method" if "." in qual else "function")
        return Definition(self.path(rel), qual, kind, node.lineno, node.end_lineno or node.lineno, first,
                          node.body[0].lineno, **inherited)

    def _inherited(self, rel: str, qual: str, node: ast.ClassDef, method: str, searched: list[str],
                   unresolved: list[str]) -> "Definition | None":
        """The ``method`` of the first base of class ``qual`` (``node`` in ``rel``) that defines it,
        in method resolution order (see :meth:`find_definition`); ``searched`` / ``unresolved``
        collect the classes looked at (``Name (file)``) and the base names no file resolved."""
        mro = self._mro((rel, node.lineno, node.name), node, unresolved, set())
        searched.append(f"{qual} ({rel})")
        for brel, bnode in mro[1:]:
            searched.append(f"{bnode.name} ({brel})")
            for item in bnode.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                    return self._definition(brel, f"{bnode.name}.{method}", item, inherited_by=qual,
                                            inherited_from=f"{bnode.name} ({brel})")
        return None

    def _mro(self, key: tuple, node: ast.ClassDef, unresolved: list[str], active: set,
             depth: int = 0) -> list[tuple[str, ast.ClassDef]]:
        """C3 linearization of a class (``key`` = (file, line, name)) over its resolvable bases:
        ``[(file, node), ...]`` starting with the class itself. A cycle, more than 16 levels, or
        bases C3 cannot merge fall back to depth-first order without repeats."""
        me = (key[0], node)
        if key in active or depth > 16:
            return [me]
        active = active | {key}
        bases: list[tuple[tuple, ast.ClassDef]] = []
        for b in node.bases:
            bname = _base_name(b)
            if bname is None or bname in ("object", "Module", "Generic", "Protocol", "ABC"):
                continue
            hit = self._resolve_class(key[0], bname, node.lineno)
            if hit is None:
                if not _external_base(self, key[0], bname):
                    unresolved.append(bname)
                continue
            brel, bnode = hit
            bases.append(((brel, bnode.lineno, bnode.name), bnode))
        seqs = [[(k, n) for k, n in self._keyed(self._mro(k, n, unresolved, active, depth + 1))] for k, n in bases]
        seqs.append(list(bases))
        merged = _c3_merge([list(s) for s in seqs])
        if merged is None:
            merged, seen = [], set()
            for s in seqs:
                for k, n in s:
                    if k not in seen:
                        seen.add(k)
                        merged.append((k, n))
        return [me] + [(k[0], n) for k, n in merged]

    @staticmethod
    def _keyed(mro: list[tuple[str, ast.ClassDef]]) -> list[tuple[tuple, ast.ClassDef]]:
        return [((rel, n.lineno, n.name), n) for rel, n in mro]

    def _resolve_class(self, rel: str, name: str, before: int, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """The class a base called ``name`` means in file ``rel`` for a class statement at line
        ``before``: a top-level class of that file defined earlier, else what a ``from M import name
        [as name]`` of that file brings in (followed through re-exports, 4 levels), else the first
        file under ``srt/`` (sorted) with a top-level ``class name``. ``None`` when none is found."""
        tree = self.tree(rel)
        if tree is not None:
            earlier = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name and n.lineno < before]
            if earlier:
                return rel, earlier[-1]
            for imp in tree.body:
                if not isinstance(imp, ast.ImportFrom):
                    continue
                for alias in imp.names:
                    if (alias.asname or alias.name) != name:
                        continue
                    target = self._module_file(rel, imp.module, imp.level)
                    if target is None or depth > 4:
                        return None
                    return self._resolve_class(target, alias.name, 10 ** 9, depth + 1)
        if depth:
            return None
        hits = self.grep([f"class {name}"])
        for crel in sorted({r for r, _ in hits[f"class {name}"]}):
            ctree = self.tree(crel)
            if ctree is None:
                continue
            for n in ctree.body:
                if isinstance(n, ast.ClassDef) and n.name == name:
                    return crel, n
        return None

    def _module_file(self, rel: str, module: str | None, level: int) -> str | None:
        """The file (relative to the root) of module ``module`` imported from file ``rel``
        (``level`` leading dots); ``None`` when it lies outside the engine package."""
        pkg = posixpath.basename(self.root)
        if level:
            base = posixpath.dirname(rel)
            for _ in range(level - 1):
                base = posixpath.dirname(base)
            parts = ([base] if base else []) + (module.split(".") if module else [])
            stem = posixpath.join(*parts) if parts else ""
        else:
            if not module or not (module == pkg or module.startswith(pkg + ".")):
                return None
            stem = "/".join(module.split(".")[1:])
        for cand in (stem + ".py", posixpath.join(stem, "__init__.py")):
            if cand and not cand.startswith("/") and self.read(cand) is not None:
                return cand
        return None

    def find_class(self, name: str) -> tuple[str, ast.ClassDef, str] | None:
        """``(relative file, class node, file text)`` of ``class name(`` under :attr:`models_dir`
        (``srt/models``; vLLM: ``model_executor/models``)."""
        if not re.fullmatch(r"\w+", name or ""):
            return None
        if name not in self._classes:
            res = self.box.run(["grep", "-rlE", "--include=*.py", rf"^class {name}\b",
                                posixpath.join(self.root, self.models_dir)], timeout=self.timeout, check=False)
            files = [ln for ln in res.stdout.splitlines() if ln.strip()]
            self._classes[name] = None
            for f in files:
                rel = posixpath.relpath(f, self.root)
                text = self.read(rel)
                if text is None:
                    continue
                self._classes[name] = (rel, text)
                break
        hit = self._classes[name]
        if hit is None:
            return None
        rel, text = hit
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return rel, node, text
        return None

    def find_method(self, cls: str, method: str, depth: int = 4) -> tuple[str, ast.FunctionDef, str, str] | None:
        """``(file, def node, file text, defining class)`` of ``cls.method``, following base
        classes defined under ``srt/models`` (``depth`` levels)."""
        found = self.find_class(cls)
        if found is None:
            return None
        rel, node, text = found
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == method:
                return rel, item, text, cls
        if depth > 0:
            for base in node.bases:
                bname = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
                if bname and bname not in ("Module", "object") and bname != cls:
                    hit = self.find_method(bname, method, depth - 1)
                    if hit is not None:
                        return hit
        return None

    def capture_delegate(self, target_arch: str) -> str | None:
        """The class a target hands ``set_eagle3_layers_to_capture`` on to: when the method calls
        ``self.<attr>.set_eagle3_layers_to_capture`` (not ``self.model``) and the file assigns
        ``self.<attr> = Cls(...)`` (SGLang 0.5.23 ``kimi_k25.py``: ``language_model`` =
        ``DeepseekV3ForCausalLM``), that ``Cls``; else ``None``."""
        hit = self.find_method(target_arch, "set_eagle3_layers_to_capture")
        if hit is None:
            return None
        _, fn, text, _ = hit
        body = ast.get_source_segment(text, fn) or ""
        m = re.search(r"self\.(\w+)\.set_eagle3_layers_to_capture", body)
        if m and m.group(1) not in ("model",):
            cm = re.search(rf"self\.{m.group(1)}\s*=\s*(\w+)\(", text)
            if cm and cm.group(1) != target_arch:
                return cm.group(1)
        return None

    def capture_rule(self, target_arch: str, num_layers: int, ids: Any) -> CaptureRule | None:
        """Evaluate the target class's ``set_eagle3_layers_to_capture(ids)`` from the box's
        source (SGLang 0.5.23: ``srt/models/llama.py`` ``[id + 1]``, ``deepseek_v2.py`` +1 only
        when ``ids[0] == 1``, ``gpt_oss.py`` keeps ids whose max is ``num_layers``; Kimi-K2.5
        delegates to its ``language_model``). The method body is executed on a stand-in object
        with a restricted set of builtins (it is list arithmetic). ``reachable_max`` is
        ``num_layers - 1`` (the capture loop ``for i in range(start, end)``), or ``num_layers``
        when the model file also tests ``end_layer in self.layers_to_capture`` after the loop.

        ``ids`` is what the engine passes: the draft config's nested
        ``eagle_config.eagle_aux_hidden_state_layer_ids`` exactly as written (SGLang 0.5.23
        ``spec_aux_hidden_state.py`` hands the JSON value on unchecked: strings, floats, nested
        lists stay what they are), or ``None`` for the default layers. When the method raises for
        these ids (``"1" + 1``: ``TypeError``) the rule says so in ``error`` instead of raising;
        entries no layer index equals are in ``unmatchable``. ``None`` when the class or method is
        not in the source. Raises only when the method cannot be evaluated at all (it fails for
        well-formed ids too)."""
        hit = self.find_method(target_arch, "set_eagle3_layers_to_capture")
        if hit is None:
            return None
        rel, fn, text, owner = hit
        src = f"{self.root}/{rel}:{fn.lineno} ({owner}.set_eagle3_layers_to_capture)"
        delegate_cls = self.capture_delegate(target_arch)
        if delegate_cls:
            delegate = self.capture_rule(delegate_cls, num_layers, ids)
            if delegate is not None:
                delegate.source = f"{src} → {delegate.source}"
                return delegate
        reach = num_layers if re.search(r"(end_layer|num_layers|len\(self\.layers\))\s+in\s+self\.layers_to_capture",
                                        text) else num_layers - 1
        if not _takes_ids(fn):
            # SGLang 0.4.6-0.4.8: set_eagle3_layers_to_capture(self), called without ids; the draft's
            # ids are never read and the method's defaults are captured
            captured, unmatchable = split_captured(_evaluate_capture(fn, num_layers, None, pass_ids=False))
            return CaptureRule(captured, reach, src, "evaluated from the box's engine source", unmatchable,
                               ignores_ids=True)
        try:
            got = _evaluate_capture(fn, num_layers, ids)
        except Exception as exc:  # noqa: BLE001 - the engine's own method, run on the draft's ids
            if _well_formed(ids):
                raise
            # The method runs for well-formed ids of the same length: it is these ids it fails on.
            _evaluate_capture(fn, num_layers, list(range(1, 1 + max(1, _length(ids)))))
            return CaptureRule(None, reach, src, "evaluated from the box's engine source",
                               error=f"{type(exc).__name__}: {exc}")
        captured, unmatchable = split_captured(got)
        return CaptureRule(captured, reach, src, "evaluated from the box's engine source", unmatchable)

    def draft_classes(self, eagle3: bool) -> dict[str, str] | None:
        """``{class name: file}`` of the draft classes this engine registers
        (:func:`workbench.engine.drafts.registered_draft_classes`: an ``EntryClass`` in any
        ``srt/models`` file that reads ``spec_info.hidden_states``): the EAGLE-3 ones (``eagle3``)
        or the others (EAGLE-1/2 and MTP drafts). ``None`` without ``srt/models``."""
        from workbench.engine.drafts import registered_draft_classes

        reg = registered_draft_classes(self)
        if reg is None:
            return None
        return {n: d.file for n, d in reg.items() if n != "__skipped__" and d.eagle3 == eagle3}

    def spec_algorithm_choices(self) -> tuple[list[str], str] | None:
        """``(choices, "file:line")`` when the release's argparse restricts ``--speculative-algorithm``
        to a ``choices=[...]`` list (case-sensitive: argparse checks the string as written, before
        the engine upper-cases it). SGLang 0.4.6 ``srt/server_args.py:862`` ``["EAGLE", "EAGLE3",
        "NEXTN"]`` … 0.5.9 ``:3925`` (plus ``STANDALONE``, ``NGRAM``); 0.5.12 on have no choices
        (any name, upper-cased, ``from_string``/plugins decide): ``None`` then, or when the file
        is absent."""
        text = self.read("srt/server_args.py")
        tree = self.tree("srt/server_args.py") if text is not None else None
        if tree is None:
            return None
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument" and node.args
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == "--speculative-algorithm"):
                continue
            for kw in node.keywords:
                if kw.arg == "choices" and isinstance(kw.value, (ast.List, ast.Tuple)) and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in kw.value.elts):
                    return [e.value for e in kw.value.elts], f"{self.root}/srt/server_args.py:{node.args[0].lineno}"
            return None
        return None

    def spec_algorithms(self) -> tuple[set[str], str] | None:
        """The algorithm names the engine accepts without a plugin: the members of
        ``SpeculativeAlgorithm`` (an ``Enum`` in ``srt/speculative/spec_info.py``) and the names in a
        ``_RESERVED_ALIASES`` set literal there or in ``spec_registry.py`` (SGLang 0.5.23:
        ``NEXTN``); with the file:line of the class. ``None`` when the source does not say."""
        text = self.read("srt/speculative/spec_info.py")
        if text is None:
            return None
        names: set[str] = set()
        where = None
        for rel in ("srt/speculative/spec_info.py", "srt/speculative/spec_registry.py"):
            src = text if rel.endswith("spec_info.py") else self.read(rel)
            if src is None:
                continue
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, ast.ClassDef) and node.name == "SpeculativeAlgorithm":
                    where = f"{self.root}/{rel}:{node.lineno}"
                    names |= {t.id for st in node.body if isinstance(st, ast.Assign) for t in st.targets
                              if isinstance(t, ast.Name) and t.id.isupper()}
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_RESERVED_ALIASES"
                                                        for t in node.targets):
                    names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)
                              and isinstance(c.value, str)}
        return (names, where) if names and where else None


@dataclass(frozen=True)
class Definition:
    """A function, method or class in the engine source. ``file`` is the absolute path on the
    box; ``line`` the ``def``/``class`` line, ``first_line`` the first decorator's line,
    ``body_line`` the first statement of the body, ``end_line`` the last line (all 1-based).
    A method found in a base class (:meth:`EngineSource.find_definition` of ``Class.method``) has
    ``inherited_by`` (the class asked for) and ``inherited_from`` (``Base (file)``); else ``None``."""

    file: str
    qualname: str
    kind: str
    line: int
    end_line: int
    first_line: int
    body_line: int
    inherited_by: str | None = None
    inherited_from: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}  {self.kind} {self.qualname} (lines {self.first_line}-{self.end_line})"
        if self.inherited_by:
            text += f", inherited by {self.inherited_by} from {self.inherited_from}"
        return text


@dataclass(frozen=True)
class SourceExcerpt:
    """Numbered lines ``first``..``last`` of ``file`` (absolute path on the box); ``focus`` is the
    line asked for. ``str()`` renders them as ``  NNN | text`` with ``>`` on the focus line."""

    file: str
    first: int
    last: int
    focus: int
    lines: tuple[str, ...]

    def __str__(self) -> str:
        width = len(str(self.last))
        rows = [f"{self.file}:{self.focus}"]
        for n, text in enumerate(self.lines, start=self.first):
            rows.append(f"{'>' if n == self.focus else ' '} {n:>{width}} | {text}")
        return "\n".join(rows)

    def to_dict(self) -> dict:
        return {"file": self.file, "first": self.first, "last": self.last, "focus": self.focus,
                "lines": list(self.lines)}


def _walk_definitions(tree: ast.AST, prefix: tuple[str, ...] = ()):
    """``(qualified name, node)`` of every function and class, nested ones included."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qual = prefix + (child.name,)
            yield ".".join(qual), child
            yield from _walk_definitions(child, qual)
        else:
            yield from _walk_definitions(child, prefix)


def _base_name(expr: ast.expr) -> str | None:
    """The class name a base-class expression names: ``A`` -> A, ``m.A`` -> A, ``A[T]`` -> A."""
    if isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def _external_base(src: "EngineSource", rel: str, name: str) -> bool:
    """Whether file ``rel`` imports ``name`` from outside the engine package (``torch``,
    ``transformers``): such a base ends the search without being reported as unresolved."""
    tree = src.tree(rel)
    if tree is None:
        return False
    for imp in tree.body:
        if isinstance(imp, ast.ImportFrom) and any((a.asname or a.name) == name for a in imp.names):
            return src._module_file(rel, imp.module, imp.level) is None
        if isinstance(imp, ast.Import) and any((a.asname or a.name).split(".")[0] == name for a in imp.names):
            return True
    return False


def _c3_merge(seqs: list[list[tuple]]) -> list[tuple] | None:
    """C3 merge of linearizations (lists of ``(key, node)``), as Python's MRO; ``None`` when no
    consistent order exists."""
    out: list[tuple] = []
    seqs = [s for s in seqs if s]
    while seqs:
        for s in seqs:
            head = s[0][0]
            if not any(head in [k for k, _ in t[1:]] for t in seqs):
                break
        else:
            return None
        out.append(s[0])
        seqs = [[x for x in t if x[0] != head] for t in seqs]
        seqs = [t for t in seqs if t]
    return out


def _well_formed(ids: Any) -> bool:
    return ids is None or (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids))


def _length(ids: Any) -> int:
    try:
        return len(ids)
    except TypeError:
        return 1


def split_captured(got: Any) -> tuple[list[int] | None, list]:
    """``(layer indices, unmatchable entries)`` of what ``set_eagle3_layers_to_capture`` set:
    the capture loop tests ``i in self.layers_to_capture`` (SGLang 0.5.23 ``srt/models/llama.py``),
    so an entry equal to an int by value (``2``, ``2.0``, ``True``) captures that layer and any
    other (``"2"``, ``2.5``, ``None``, ``[2]``) equals no ``i`` and never fires. ``(None, [])`` for
    ``None``."""
    if got is None:
        return None, []
    captured, unmatchable = [], []
    for x in got:
        if isinstance(x, int):
            captured.append(int(x))
        elif isinstance(x, float) and x.is_integer():
            captured.append(int(x))
        else:
            unmatchable.append(x)
    return captured, unmatchable


def _takes_ids(fn: ast.FunctionDef) -> bool:
    """The method has a parameter after ``self`` (or ``*args``) for the layer ids: false for SGLang
    0.4.6–0.4.8's ``set_eagle3_layers_to_capture(self)``."""
    return len(fn.args.posonlyargs) + len(fn.args.args) > 1 or fn.args.vararg is not None


def _evaluate_capture(fn: ast.FunctionDef, num_layers: int, ids: Any, *, pass_ids: bool = True) -> list | None:
    """Run the engine's ``set_eagle3_layers_to_capture`` (``fn``) on a stand-in target with
    ``num_layers`` layers and the ids as the engine passes them (a deep copy: JSON values
    unchanged; no argument at all when ``pass_ids`` is false, as SGLang 0.4.6–0.4.8 call it);
    returns the list it set (entries as the method made them), ``None`` when it set none. Raises
    what the method raises."""
    import copy

    fn = ast.fix_missing_locations(_strip_annotations(fn))
    module = ast.Module(body=[fn], type_ignores=[])
    ns: dict[str, Any] = {"__builtins__": _SAFE_BUILTINS}
    exec(compile(module, "<set_eagle3_layers_to_capture>", "exec"), ns)  # noqa: S102 - list arithmetic, restricted builtins
    model = _Rec(layers_to_capture=None)
    self_obj = _Rec(model=model, config=_Rec(num_hidden_layers=num_layers), pp_group=_Rec(is_last_rank=True))
    if pass_ids:
        ns[fn.name](self_obj, copy.deepcopy(ids))
    else:
        ns[fn.name](self_obj)
    got = model.layers_to_capture
    if got is None and isinstance(self_obj.__dict__.get("layers_to_capture"), list):
        got = self_obj.__dict__["layers_to_capture"]  # a target that keeps the list on itself
    return list(got) if got is not None else None


def _strip_annotations(fn: ast.FunctionDef) -> ast.FunctionDef:
    import copy

    fn = copy.deepcopy(fn)
    fn.returns = None
    fn.decorator_list = []
    for a in fn.args.args + fn.args.kwonlyargs:
        a.annotation = None
    return fn


