"""The rewritten-module cache the xdist controller writes for its workers (``testkit.rewrite_cache``),
with a real pytest-xdist run under ``PYTHONDONTWRITEBYTECODE=1`` on a small project of its own: the
cache is bit for bit pytest's own (as pytest writes it when it may write bytecode), only test files
and ``conftest.py`` get one, assertions keep their introspection, and an edited test runs as edited."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testkit.rewrite_cache import rewritten_files

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import os, sys
sys.path.insert(0, {str(TESTS)!r})

def pytest_configure(config):
    if "PYTEST_XDIST_WORKER" not in os.environ and getattr(config.option, "numprocesses", None):
        from testkit.rewrite_cache import precompile_rewritten
        print("precompiled", precompile_rewritten(config), file=sys.stderr)
"""

TEST_A = """
from helper import value

def test_value():
    assert value() == 2
"""


def _project(tmp: Path) -> Path:
    (tmp / "conftest.py").write_text(CONFTEST)
    (tmp / "helper.py").write_text("def value():\n    return 1\n")
    (tmp / "test_a.py").write_text(TEST_A)
    (tmp / "sub").mkdir()
    (tmp / "sub" / "test_b.py").write_text("def test_b():\n    assert [1, 2] == [1, 2]\n")
    return tmp


def _pytest(cwd: Path, *args: str, write_bytecode: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTEST_XDIST_WORKER",
                                                             "PYTEST_ADDOPTS")}
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _pycs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("__pycache__/*.pyc"))}


def test_the_controller_writes_pytests_own_cache_and_the_workers_run_from_it(tmp_path):
    root = _project(tmp_path)
    # pytest's own cache, written by pytest itself where it may write bytecode (one process, no xdist)
    own = _pytest(root, write_bytecode=True)
    assert own.returncode == 1, own.stdout + own.stderr
    pytests = {k: v for k, v in _pycs(root).items() if "-pytest-" in k}
    assert sorted(k.split("/")[-1].split(".")[0] for k in pytests) == ["conftest", "test_a", "test_b"]
    for p in root.rglob("__pycache__"):
        for f in p.iterdir():
            f.unlink()

    run = _pytest(root, "-n", "2")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "precompiled {'written': 3, 'fresh': 0, 'failed': 0}" in run.stderr, run.stderr
    assert _pycs(root) == pytests  # the same files, bit for bit; nothing for helper.py
    # the failing assert is still rewritten: its operands are shown
    assert "assert 1 == 2" in run.stdout and "where 1 = value()" in run.stdout, run.stdout

    # an edited test: its cache no longer matches the source (hash), it is written again and the
    # edit is what runs
    (root / "test_a.py").write_text(TEST_A.replace("== 2", "== 1"))
    again = _pytest(root, "-n", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "precompiled {'written': 1, 'fresh': 2, 'failed': 0}" in again.stderr, again.stderr


def test_the_files_are_the_test_files_and_conftests_under_the_arguments(tmp_path):
    root = _project(tmp_path)
    (root / ".hidden").mkdir()
    (root / ".hidden" / "test_c.py").write_text("")
    (root / "sub" / "b_test.py").write_text("")
    names = [str(p.relative_to(root)) for p in rewritten_files([str(root)], ["test_*.py", "*_test.py"])]
    assert names == ["conftest.py", "test_a.py", "sub/b_test.py", "sub/test_b.py"]
    # a file given by name (a node id's file part) is one, whatever its name; none twice
    given = rewritten_files([f"{root}/helper.py::x", str(root / "sub"), str(root / "sub" / "test_b.py")], ["test_*.py"])
    assert [str(p.relative_to(root)) for p in given] == ["helper.py", "sub/test_b.py"]
