"""Probes and Python's bytecode caches (``__pycache__``), with the real interpreter: an engine
that runs from an unchecked-hash ``.pyc`` (trusted without its source) would never run a probe
unless the cache is moved aside; timestamp and checked-hash caches are invalidated by the patched
file. The revert restores the source and every moved cache byte for byte."""

from __future__ import annotations

import hashlib
import importlib.util
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from remote import connect
from remote.probes import add_probe, bytecode_caches, list_probes, revert_probe

SOURCE = "def answer(x):\n    y = x * 2\n    return y\n"


def _module(tmp_path: Path, mode: py_compile.PycInvalidationMode | None) -> tuple[Path, Path | None]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    src = pkg / "mod.py"
    src.write_text(SOURCE)
    cache = None
    if mode is not None:
        cache = Path(py_compile.compile(str(src), invalidation_mode=mode, doraise=True))
    return src, cache


def _run(tmp_path: Path) -> subprocess.CompletedProcess:
    """Import ``pkg.mod`` in a fresh interpreter (writing bytecode as an engine would) and call it."""
    return subprocess.run([sys.executable, "-c", "import pkg.mod as m; print(m.answer(21))"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def box(tmp_path):
    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as b:
        yield b


def test_an_unchecked_hash_cache_hides_an_edited_source(tmp_path):
    """The fault the handling exists for, shown with the real interpreter: the edit never runs."""
    src, cache = _module(tmp_path, py_compile.PycInvalidationMode.UNCHECKED_HASH)
    src.write_text(SOURCE.replace("x * 2", "x * 3"))
    assert _run(tmp_path).stdout.strip() == "42"  # still the cached original


@pytest.mark.parametrize("mode", [py_compile.PycInvalidationMode.UNCHECKED_HASH,
                                  py_compile.PycInvalidationMode.CHECKED_HASH,
                                  py_compile.PycInvalidationMode.TIMESTAMP, None])
def test_the_probe_runs_whatever_the_cache_and_the_revert_restores_it(box, tmp_path, mode):
    src, cache = _module(tmp_path, mode)
    before_src = _sha(src)
    before_cache = _sha(cache) if cache else None
    kinds = [c["kind"] for c in bytecode_caches(box, src)]
    expected_kind = {None: [], py_compile.PycInvalidationMode.UNCHECKED_HASH: ["unchecked-hash"],
                     py_compile.PycInvalidationMode.CHECKED_HASH: ["checked-hash"],
                     py_compile.PycInvalidationMode.TIMESTAMP: ["timestamp"]}[mode]
    assert kinds == expected_kind
    probe = add_probe(box, src, before=r"return y", exprs=["y"], tag="bc", function="answer")
    if mode == py_compile.PycInvalidationMode.UNCHECKED_HASH:
        assert [b["cache"] for b in probe.bytecode] == [str(cache)] and not cache.exists()
        assert "moved aside" in probe.bytecode_note
    else:
        assert probe.bytecode == ()
        assert (probe.bytecode_note is None) == (mode is None)
    run = _run(tmp_path)
    assert run.stdout.strip() == "42"
    assert "[probe:bc " in run.stderr and "y=42" in run.stderr
    revert_probe(box, probe)
    assert _sha(src) == before_src and list_probes(box) == []
    if mode == py_compile.PycInvalidationMode.UNCHECKED_HASH:
        assert _sha(cache) == before_cache  # the engine's own cache, byte for byte
        assert not list(Path(box.state_dir, "probes").glob("bc.pyc-*"))
    after = _run(tmp_path)
    assert after.stdout.strip() == "42" and "[probe:" not in after.stderr


def test_the_cache_path_follows_the_interpreter(box, tmp_path):
    src, cache = _module(tmp_path, py_compile.PycInvalidationMode.TIMESTAMP)
    [found] = bytecode_caches(box, src)
    assert found["cache"] == importlib.util.cache_from_source(str(src)) == str(cache)
    assert found["magic_ok"] is True and found["flags"] == 0


def test_the_cli_says_what_it_did_with_the_cache(cli, tmp_path, monkeypatch):
    """``workbench probe add`` / ``revert`` name the bytecode cache they moved aside and put back."""
    src, cache = _module(tmp_path, py_compile.PycInvalidationMode.UNCHECKED_HASH)
    before = _sha(cache)
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    code, out, err = cli("probe", "add", "--file", str(src), "--before", "return y", "--print", "y",
                         "--python", sys.executable, "--package", "pkg", "--tag", "bc")
    assert code == 0, err
    assert f"bytecode: {cache}: an unchecked-hash cache" in out and not cache.exists()
    code, out, err = cli("probe", "revert", "--all")
    assert code == 0, err
    assert f"its bytecode cache {cache} (unchecked-hash) put back byte for byte" in out
    assert _sha(cache) == before
