"""The engine on the box: where its package is, which version, and its source read exactly.

* :func:`find_engine` locates the engine package (``sglang``, or the sandbox box's
  ``workbench.sandbox``) with the interpreter that runs it: a ``python`` given by the user, else the
  launch command's interpreter, else the running server's (from its command line and
  ``/proc/PID/environ``: a venv's ``bin/python`` is kept, not resolved to the base interpreter),
  else ``python3``. The package is found with ``importlib.util.find_spec`` on the box, never imported.
* :class:`EngineSource` reads files of that package through the :class:`remote.Box` API (each
  file once), shows numbered lines with context, and finds definitions (functions, methods,
  classes) by name with :mod:`ast` (``grep -F`` on the box only narrows the candidate files).
* The target class's ``set_eagle3_layers_to_capture`` is *evaluated* from the box's source
  (:meth:`EngineSource.capture_rule`), so the aux-layer offset rule follows the engine version.

Facts encoded here were read from SGLang 0.5.23 (``pip download --no-deps sglang==0.5.23``).
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from remote.errors import RemoteError, RemoteFileNotFound
from workbench.launch import LaunchCommand, LaunchCommandError

__all__ = [
    "EngineInfo", "EngineNotFound", "SourceLookupError", "EngineSource", "Definition", "SourceExcerpt",
    "CaptureRule", "find_engine", "engine_package", "is_launch_argv", "server_python",
    "read_environ", "running_servers", "LOCATE_ENGINE_SCRIPT",
]


class EngineNotFound(RuntimeError):
    """The engine package could not be located on the box. ``.where`` names the box and the
    interpreter tried; the message says what to pass instead (``--python``, ``--port``)."""

    def __init__(self, message: str, *, where: str = ""):
        self.where = where
        super().__init__(message + (f" ({where})" if where else ""))


class SourceLookupError(LookupError):
    """A file, line or definition asked for is not in the engine's source. ``.where`` names the
    file (or the engine root) searched."""

    def __init__(self, message: str, *, where: str = ""):
        self.where = where
        super().__init__(message + (f" ({where})" if where else ""))


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
        self.layers_to_capture = list(ids) if ids is not None else None


@dataclass
class CaptureRule:
    """What the target captures for the given ids: ``captured`` (layer indices the capture loop
    tests), ``reachable_max`` (largest index the loop reaches), ``source`` (file:line of the
    method), ``how`` (``evaluated`` from the box's source or ``modelled`` from 0.5.23)."""

    captured: list[int] | None
    reachable_max: int
    source: str
    how: str


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

    def grep(self, tokens: Sequence[str], *, under: str = "srt") -> dict[str, list[tuple[str, int]]]:
        """``{token: [(relative file, line), ...]}`` for fixed strings in the ``*.py`` files under
        ``root/under``: one ``grep -rnF`` on the box for all tokens. Used only to pick candidate
        files; lines are then judged with :mod:`ast`."""
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
        dotted name, ``class <first part>``). Raises :class:`SourceLookupError` when nothing is
        found, or when more than ``limit`` files are candidates (qualify the name or give ``file``)."""
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
                    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    kind = "class" if isinstance(node, ast.ClassDef) else ("method" if "." in qual else "function")
                    found.append(Definition(self.path(rel), qual, kind, node.lineno, node.end_lineno or node.lineno,
                                            first, node.body[0].lineno))
        if not found:
            raise SourceLookupError(f"no definition of {name!r} in the engine source",
                                    where=self.path(file) if file else self.root)
        return found


    def find_class(self, name: str) -> tuple[str, ast.ClassDef, str] | None:
        """``(relative file, class node, file text)`` of ``class name(`` under ``srt/models``."""
        if not re.fullmatch(r"\w+", name or ""):
            return None
        if name not in self._classes:
            res = self.box.run(["grep", "-rlE", "--include=*.py", rf"^class {name}\b",
                                posixpath.join(self.root, "srt", "models")], timeout=self.timeout, check=False)
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

    def capture_rule(self, target_arch: str, num_layers: int, ids: list[int] | None) -> CaptureRule | None:
        """Evaluate the target class's ``set_eagle3_layers_to_capture(ids)`` from the box's
        source (SGLang 0.5.23: ``srt/models/llama.py`` ``[id + 1]``, ``deepseek_v2.py`` +1 only
        when ``ids[0] == 1``, ``gpt_oss.py`` keeps ids whose max is ``num_layers``; Kimi-K2.5
        delegates to its ``language_model``). The method body is executed on a stand-in object
        with a restricted set of builtins (it is list arithmetic). ``reachable_max`` is
        ``num_layers - 1`` (the capture loop ``for i in range(start, end)``), or ``num_layers``
        when the model file also tests ``end_layer in self.layers_to_capture`` after the loop.
        ``None`` when the class or method is not in the source."""
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
        captured = _evaluate_capture(fn, num_layers, ids)
        reach = num_layers if re.search(r"(end_layer|num_layers|len\(self\.layers\))\s+in\s+self\.layers_to_capture",
                                        text) else num_layers - 1
        return CaptureRule(captured, reach, src, "evaluated from the box's engine source")

    def draft_classes(self, eagle3: bool) -> dict[str, str] | None:
        """``{class name: file}`` registered by ``EntryClass`` in ``srt/models/*eagle3*.py``
        (``eagle3``) or ``srt/models/*eagle*.py`` without ``eagle3`` (EAGLE-1/2 drafts)."""
        try:
            names = self.box.listdir(posixpath.join(self.root, "srt", "models"), timeout=self.timeout)
        except RemoteFileNotFound:
            return None
        out: dict[str, str] = {}
        for n in names:
            if not n.endswith(".py") or "eagle" not in n or (("eagle3" in n) != eagle3):
                continue
            text = self.read(f"srt/models/{n}") or ""
            m = re.search(r"^EntryClass\s*=\s*\[?([\w\s,]+)\]?", text, re.M)
            for cls in (m.group(1).replace("\n", " ").split(",") if m else []):
                if cls.strip():
                    out[cls.strip()] = f"srt/models/{n}"
        return out

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
    ``body_line`` the first statement of the body, ``end_line`` the last line (all 1-based)."""

    file: str
    qualname: str
    kind: str
    line: int
    end_line: int
    first_line: int
    body_line: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}  {self.kind} {self.qualname} (lines {self.first_line}-{self.end_line})"


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


def _evaluate_capture(fn: ast.FunctionDef, num_layers: int, ids: list[int] | None) -> list[int] | None:
    fn = ast.fix_missing_locations(_strip_annotations(fn))
    module = ast.Module(body=[fn], type_ignores=[])
    ns: dict[str, Any] = {"__builtins__": _SAFE_BUILTINS}
    exec(compile(module, "<set_eagle3_layers_to_capture>", "exec"), ns)  # noqa: S102 - list arithmetic, restricted builtins
    model = _Rec(layers_to_capture=None)
    self_obj = _Rec(model=model, config=_Rec(num_hidden_layers=num_layers), pp_group=_Rec(is_last_rank=True))
    ns[fn.name](self_obj, list(ids) if ids is not None else None)
    got = model.layers_to_capture
    if got is None and isinstance(self_obj.__dict__.get("layers_to_capture"), list):
        got = self_obj.__dict__["layers_to_capture"]  # a target that keeps the list on itself
    return [int(x) for x in got] if got is not None else None


def _strip_annotations(fn: ast.FunctionDef) -> ast.FunctionDef:
    import copy

    fn = copy.deepcopy(fn)
    fn.returns = None
    fn.decorator_list = []
    for a in fn.args.args + fn.args.kwonlyargs:
        a.annotation = None
    return fn


#: Run on the box by the launch command's interpreter with the engine package as argv[1]
#: (``sglang``, or ``workbench.sandbox``): prints ``{"package", "root", "version", "error"}`` as JSON,
#: without importing the package (``find_spec``; the version from ``version.py`` / ``_version.py`` /
#: ``__init__.py``, else the installed distribution's metadata).
LOCATE_ENGINE_SCRIPT = r"""
import importlib.util, importlib.metadata, json, os, re, sys
pkg = sys.argv[1]
out = {"package": pkg, "root": None, "version": None, "error": None}
try:
    spec = importlib.util.find_spec(pkg)
except Exception as exc:  # find_spec imports parent packages; report whatever they raise
    spec = None
    out["error"] = f"{type(exc).__name__}: {exc}"
if spec is not None and spec.submodule_search_locations:
    root = list(spec.submodule_search_locations)[0]
    out["root"] = root
    for name in ("version.py", "_version.py", "__init__.py"):
        path = os.path.join(root, name)
        if os.path.exists(path):
            m = re.search(r'^_{0,2}version_{0,2}\s*=\s*(?:\w+\s*=\s*)*[\'"]([^\'"]+)[\'"]', open(path, encoding="utf-8").read(), re.M)
            if m:
                out["version"] = m.group(1)
                break
    if out["version"] is None:
        try:
            out["version"] = importlib.metadata.version(pkg.split(".")[0])
        except importlib.metadata.PackageNotFoundError as exc:
            out["version_error"] = f"no version file and no installed distribution ({exc})"
elif out["error"] is None:
    out["error"] = f"package {pkg} not found by {sys.executable}"
print(json.dumps(out))
"""


def engine_package(launch: LaunchCommand) -> str:
    """The package whose source is the engine of ``launch``: ``sglang`` for SGLang's launchers,
    ``workbench.sandbox`` for the sandbox box's server, else the launch module's package."""
    module = launch.module or ""
    if module.startswith("sglang"):
        return "sglang"
    if module.endswith(".launch_server"):
        return module[: -len(".launch_server")]
    return module.split(".")[0] or "sglang"


def is_launch_argv(argv: Sequence[str]) -> bool:
    """True when ``argv`` starts a server (``python -m sglang.launch_server``, ``sglang serve``, the
    sandbox's): a process that merely mentions one (an editor, ``tail -f sglang.log``, this
    workbench's own command line with a ``launch_command`` parameter) is not a server."""
    try:
        LaunchCommand.parse(list(argv))
    except LaunchCommandError:
        return False
    return True


def running_servers(box: Any, *, port: int | None = None, timeout: float = 30) -> list:
    """The SGLang (or sandbox) servers running on the box (``Box.find_servers`` filtered by
    :func:`is_launch_argv`), on ``port`` when given; sorted by pid."""
    servers = [s for s in box.find_servers(timeout=timeout) if is_launch_argv(s.argv)]
    return [s for s in servers if s.port == port] if port else servers


def read_environ(box: Any, pid: int, *, timeout: float = 10) -> dict[str, str] | None:
    """The environment of process ``pid`` on the box (``/proc/PID/environ``); ``None`` when it
    cannot be read (another user's process, or gone)."""
    try:
        raw = box.read_bytes(f"/proc/{pid}/environ", timeout=timeout)
    except RemoteError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def server_python(box: Any, launch: LaunchCommand, server: Any, *, timeout: float) -> str:
    """The interpreter that runs ``server``, as a path that keeps its environment: ``argv[0]``
    when it names a python (a venv's ``bin/python`` must not be resolved to the base interpreter
    ``/proc/PID/exe`` points at, which lacks the venv's packages), looked up on the server's own
    ``PATH`` when relative; else the ``exe`` link. ``sglang serve``: the script's interpreter is
    found from its shebang line."""
    first = launch.launcher[0] if launch.launcher else ""
    env = read_environ(box, server.pid) or {}
    name = posixpath.basename(first)
    if first and (name.startswith("python") or name == "sglang"):
        if "/" in first:
            path = first if first.startswith("/") else posixpath.join(server.cwd or "/", first)
        else:
            found = box.run(["env", f"PATH={env.get('PATH', '/usr/bin:/bin')}", "which", first],
                            check=False, timeout=timeout)
            path = found.stdout.strip() if found.exit_code == 0 else ""
        if path and name == "sglang":
            head = box.read_bytes(path, 0, 256, timeout=timeout).split(b"\n", 1)[0].decode("utf-8", "replace")
            path = head[2:].strip().split()[0] if head.startswith("#!") and head[2:].strip() else ""
        if path:
            return path
    return server.exe or "python3"


@dataclass(frozen=True)
class EngineInfo:
    """Where the engine lives on a box. ``package``: ``sglang`` or ``workbench.sandbox``;
    ``root``: the package directory (absolute, on the box); ``version``: from the package's
    version file or distribution metadata (``None`` when neither says); ``python``: the
    interpreter that located it; ``how``: how that interpreter was chosen; ``server_pid`` /
    ``port`` / ``log_path`` / ``cwd``: the running server it was taken from, if any (``cwd``: its
    working directory, against which relative paths in ``launch`` resolve)."""

    package: str
    root: str
    version: Optional[str]
    python: str
    how: str
    server_pid: Optional[int] = None
    port: Optional[int] = None
    log_path: Optional[str] = None
    launch: Optional[str] = None
    cwd: Optional[str] = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def source(self, box: Any, *, timeout: float = 30) -> EngineSource:
        """An :class:`EngineSource` reading this engine's files on ``box``."""
        return EngineSource(box, self.root, self.version, timeout=timeout)


def find_engine(box: Any, *, python: str | None = None, port: int | None = None,
                launch: LaunchCommand | str | None = None, package: str | None = None,
                timeout: float = 30) -> EngineInfo:
    """Locate the engine package on ``box``.

    The interpreter, in order: ``python`` (a path on the box); the interpreter of ``launch``
    (with its ``VAR=value`` prefixes); the running server's (on ``port``, or the only one
    running; :func:`server_python`), run in the server's cwd with its ``PYTHONPATH`` /
    ``PYTHONHOME``, so a checkout run with ``python -m`` is found as the server found it; else
    ``python3``. An explicit ``package`` without ``port`` never takes a running server's
    interpreter (``workbench.*`` on the local box: this workbench's interpreter). The package: ``package``, else the one the
    launch command runs (:func:`engine_package`), else ``sglang``. Runs
    :data:`LOCATE_ENGINE_SCRIPT` with that interpreter (``find_spec``; nothing is imported).

    Raises :class:`EngineNotFound` when several servers run and no ``port`` picks one, when
    ``port`` names no running server, or when the interpreter cannot find the package (the
    message says which interpreter was tried and what to pass instead).
    """
    env = None
    server = None
    cwd = None
    if isinstance(launch, str):
        launch = LaunchCommand.parse(launch)
    if python:
        how = f"--python {python}"
    elif launch is not None:
        python = launch.launcher[0] if launch.launcher and "python" in posixpath.basename(launch.launcher[0]) \
            else "python3"
        env = dict(launch.env) or None
        how = f"the launch command's interpreter {python}"
    elif package and not port:
        # An explicit package names the engine to read: never switch to whichever server happens to
        # run (on a shared box it may be someone else's). The sandbox box's engine lives in this
        # workbench's own environment when the box is this machine.
        if package.startswith("workbench") and box.name == "local":
            python, how = sys.executable, f"this workbench's interpreter {sys.executable} (--package {package})"
        else:
            python, how = "python3", f"python3 on the box's PATH (--package {package}; pass --python to choose)"
    else:
        servers = running_servers(box, port=port, timeout=timeout)
        if port and not servers:
            raise EngineNotFound(f"no SGLang server runs on port {port}; start it, or pass --python",
                                 where=box.name)
        if len(servers) > 1:
            raise EngineNotFound(f"{len(servers)} servers run (ports {', '.join(str(s.port) for s in servers)}); "
                                 "pick one with --port, or pass --python", where=box.name)
        if servers:
            server = servers[0]
            launch = LaunchCommand.parse(list(server.argv))
            python = server_python(box, launch, server, timeout=timeout)
            # The server's import path: its PYTHONPATH/PYTHONHOME and (python -m puts it first) its cwd.
            server_env = read_environ(box, server.pid, timeout=timeout) or {}
            env = {k: server_env[k] for k in ("PYTHONPATH", "PYTHONHOME") if server_env.get(k)}
            env.update(dict(launch.env))
            env = env or None
            cwd = server.cwd
            how = f"the interpreter of the server pid {server.pid} (port {server.port})"
        else:
            python = "python3"
            how = "python3 on the box's PATH (no server running; pass --python or --port to choose)"
    package = package or (engine_package(launch) if launch is not None else "sglang")
    try:
        res = box.run([python, "-c", LOCATE_ENGINE_SCRIPT, package], timeout=timeout, check=False, env=env,
                      cwd=cwd)
    except RemoteFileNotFound:  # the server's cwd vanished: locate from the login directory
        res = box.run([python, "-c", LOCATE_ENGINE_SCRIPT, package], timeout=timeout, check=False, env=env)
    where = f"{box.name}, {python}"
    if res.exit_code != 0:
        raise EngineNotFound(f"{python} could not run the locate script: {res.stderr.strip()[-300:]}", where=where)
    try:
        found = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise EngineNotFound(f"unreadable output of the locate script ({exc}): {res.stdout[-200:]!r}",
                             where=where) from None
    if not found.get("root"):
        hint = ("; pass --python with the interpreter that runs the server, or --port of the running server"
                + ("" if package != "sglang" else " (for the sandbox box: --package workbench.sandbox)"))
        raise EngineNotFound(f"the {package} package is not found ({found.get('error')}){hint}", where=where)
    return EngineInfo(package, found["root"].rstrip("/"), found.get("version"), python, how,
                      server.pid if server else None, server.port if server else None,
                      server.log_path if server else None, launch.to_string() if launch is not None else None,
                      server.cwd if server else None)
