"""pytest's rewritten test modules cached once per run, for the pytest-xdist workers to read.

pytest rewrites the ``assert`` statements of every test module and ``conftest.py`` it imports
(``_pytest.assertion.rewrite``: parse, rewrite, compile) and caches the result in
``__pycache__/<name>.cpython-XY-pytest-<version>.pyc`` next to the file — but it writes that cache
only when ``sys.dont_write_bytecode`` is false, and this project's machines (and CI) run with
``PYTHONDONTWRITEBYTECODE=1``. So each pytest process rewrote all ~145 test files itself: ~5.5 s of
CPU in every xdist worker (4.6 s of it the rewrite and the compile of the rewritten tree; the same
files compile plainly in 0.4 s), a quarter of the collection.

It *reads* the cache whatever ``dont_write_bytecode`` says. :func:`precompile_rewritten` is run by
the xdist controller (``tests/conftest.py``, before the workers start): it writes, with pytest's
own functions, the cache of each test file and ``conftest.py`` under the run's arguments that has
none or a stale one; each worker then loads every module from it (~0.05 s for all). The cache is
pytest's, bit for bit what pytest writes without ``PYTHONDONTWRITEBYTECODE`` (a checked-hash pyc
since pytest 9: a source edited since is rewritten again, its hash no longer matching), in the
``__pycache__`` directories ``.gitignore`` already ignores; only test files are written (never the
project's ``workbench/`` or ``remote/``, nor a package's ``pytest11`` plugin in the venv).

Private pytest API (``_rewrite_test``, ``_write_pyc``, ``_read_pyc``, ``get_cache_dir``,
``PYC_TAIL``): where a pytest release changed it, nothing is written and every worker rewrites on
its own, as before (slower, never wrong).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

__all__ = ["precompile_rewritten", "rewritten_files"]


def rewritten_files(args: Iterable[str], patterns: Iterable[str]) -> Iterator[Path]:
    """The files pytest rewrites under ``args`` (pytest's positional arguments, or ``testpaths``:
    directories or files, ``::`` node ids cut off): every ``conftest.py`` and every file whose name
    matches one of ``patterns`` (the ``python_files`` ini value, e.g. ``test_*.py``); ``__pycache__``
    and hidden directories skipped. A file argument is yielded as it is (pytest rewrites a test
    file given by name whatever its name)."""
    patterns = list(patterns)
    seen: set[Path] = set()
    for arg in args:
        path = Path(str(arg).split("::", 1)[0]).resolve()
        if path.is_file() and path.suffix == ".py":
            found: Iterable[Path] = [path]
        elif path.is_dir():
            found = _walk(path, patterns)
        else:
            continue
        for f in found:
            if f not in seen:
                seen.add(f)
                yield f


def _walk(top: Path, patterns: list[str]) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in sorted(filenames):
            if name == "conftest.py" or (name.endswith(".py") and any(fnmatch.fnmatch(name, p) for p in patterns)):
                yield Path(dirpath) / name


def precompile_rewritten(config: Any) -> dict:
    """Write pytest's rewritten-module cache for each file of :func:`rewritten_files` (``config.args``,
    ``python_files``) that has none or a stale one. Returns ``{"written": n, "fresh": n,
    "failed": n}`` (``failed``: a file that did not parse or a cache that could not be written:
    pytest rewrites it itself and reports any error at collection, as it would have); an empty dict
    when the assertion mode is not ``rewrite`` or this pytest's private API is not the one known.
    CPU: ~5.5 s for the ~145 files of this suite when none is cached, ~0.1 s when all are."""
    if getattr(config.option, "assertmode", None) != "rewrite":
        return {}
    try:
        from _pytest.assertion import rewrite
        from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir

        state = config.stash[rewrite.assertstate_key]
    except (ImportError, AttributeError, KeyError):
        return {}
    counts = {"written": 0, "fresh": 0, "failed": 0}
    for fn in rewritten_files(config.args, config.getini("python_files")):
        cache_dir = get_cache_dir(fn)
        pyc = cache_dir / (fn.name[:-3] + PYC_TAIL)
        if _read_pyc(fn, pyc) is not None:
            counts["fresh"] += 1
            continue
        try:
            cache_dir.mkdir(exist_ok=True)
            source_key, co = _rewrite_test(fn, config)
            ok = _write_pyc(state, co, source_key, pyc)
        except (OSError, SyntaxError, ValueError, TypeError):
            ok = False
        counts["written" if ok else "failed"] += 1
    return counts
