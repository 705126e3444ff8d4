"""A checkout of this project per pytest process, whose ``workbench`` package (the sandbox box's
engine, ``workbench/sandbox/srt``, in it) is a copy of its own.

Why: the sandbox box's engine is found the way SGLang is found on a real box (``find_spec`` run by
the server's interpreter, ``workbench.engine.locate``), and probes are written into the file that
search returns. With one engine tree per machine, two pytest-xdist workers probing it at once see
each other's markers ("the file already holds markers … the journal does not know"), so every test
that probes it had to run on one worker (the suite's longest lane). With a tree per worker each
worker is a box of its own, as two GPU boxes each have their own SGLang install.

:func:`make_engine_checkout` builds ``<base>/checkout``: ``workbench/`` copied (without the project's
``__pycache__``, then compiled anew: :func:`compile_tree`, timestamp caches as pip leaves next to an
installed engine; ``workbench/sandbox/models`` a symlink to the committed models, which no test may change and every
fault-matrix case checks byte for byte), every other top-level entry of the project a symlink to
the real one (``runbooks``, ``docs``, ``tests``, ``.venv-vllm``…, so paths a module finds from its
own ``__file__`` still resolve). :func:`use_engine_checkout` puts it first on ``PYTHONPATH`` and
makes it the working directory (``python -m`` and ``python -c`` put the working directory before
``PYTHONPATH``), so every server, kernel, CLI and box-side script this process starts, locally or
through the loopback sshd (``SetEnv``, ``tests/sshd.py``), imports the copy; the test process keeps
the ``workbench`` it imported at start (the same code). :func:`sandbox_engine_dir` is the copy's
``workbench/sandbox``, the engine root the box reports.

vLLM, the box's second engine, gets the same: the checkout's ``.venv-vllm`` is a copy of vLLM's
virtual environment made of hard links (:func:`link_venv`: ~2 s for its ~64,000 files, no data
copied), and :func:`use_engine_checkout` names its interpreter in ``$WORKBENCH_VLLM_PYTHON``. A
probe never writes into a file in place (``remote.probes`` writes a new file and renames it over the
old one, and moves bytecode aside by renaming), so a probe in one worker's vLLM replaces that
worker's link and leaves every other copy and the installed venv as they are. Where hard links
cannot be made (another filesystem) the checkout keeps a symlink to the shared venv, and
:func:`vllm_copied` says so (the scheduler then keeps the tests that probe vLLM on one worker).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["ROOT", "ENV", "VLLM_ENV", "make_engine_checkout", "compile_tree", "use_engine_checkout", "checkout_dir",
           "sandbox_engine_dir", "link_venv", "venv_of", "vllm_copied"]

#: the project checkout the tests run from
ROOT = Path(__file__).resolve().parents[2]
#: the environment variable naming this process's engine checkout (set by :func:`use_engine_checkout`)
ENV = "EWB_TEST_ENGINE_CHECKOUT"
#: the environment variable naming vLLM's interpreter (read by ``workbench.sandbox_box.vllm_python``
#: and ``testkit.vllm_servers.vllm_python``)
VLLM_ENV = "WORKBENCH_VLLM_PYTHON"


def venv_of(python: str | os.PathLike) -> Path | None:
    """The virtual environment ``python`` belongs to (``<venv>/bin/python``: the directory holding
    ``pyvenv.cfg``, symlinks resolved), or ``None`` when it is not a venv's interpreter."""
    venv = Path(python).parent.parent
    return venv.resolve() if (venv / "pyvenv.cfg").is_file() else None


def link_venv(venv: Path, dest: Path) -> bool:
    """Make ``dest`` a copy of the virtual environment ``venv`` whose files are hard links to the
    originals (directories and symlinks made anew). Python finds its prefix from the interpreter's
    path (``dest/bin/python``, a symlink to the base interpreter, and ``dest/pyvenv.cfg``), so
    ``dest/bin/python`` imports the copy's site-packages. Returns ``False``, with nothing left at
    ``dest``, when hard links cannot be made there (another filesystem); other ``OSError`` raise."""
    import errno

    try:
        shutil.copytree(venv, dest, symlinks=True, copy_function=os.link)
        _repoint_scripts(venv, dest)
    except shutil.Error as exc:  # copytree collects the per-file errors
        shutil.rmtree(dest, ignore_errors=True)
        if all(isinstance(e[2], str) and ("Invalid cross-device link" in e[2] or "Operation not permitted" in e[2])
               for e in exc.args[0]):
            return False
        raise
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if exc.errno in (errno.EXDEV, errno.EPERM):
            return False
        raise
    return True


def _repoint_scripts(venv: Path, dest: Path) -> None:
    """The console scripts of ``dest/bin`` (``vllm``, ``pip``...) name their interpreter in their
    first line, ``#!<venv>/bin/python``: each becomes a file of its own (not a link) naming
    ``dest/bin/python``, as if the venv had been made at ``dest``. ``vllm serve`` then runs the
    copy's vLLM, as the copy's ``python -m`` does."""
    old = f"#!{venv}/bin/".encode()
    for script in (dest / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        with open(script, "rb") as f:
            head = f.read(len(old))
        if head != old:
            continue
        data = script.read_bytes()
        mode = script.stat().st_mode
        script.unlink()  # the copy's own file from here on: the venv's stays as it is
        script.write_bytes(f"#!{dest}/bin/".encode() + data[len(old):])
        script.chmod(mode)


def make_engine_checkout(base: Path, root: Path = ROOT, *, vllm_venv: Path | None = None) -> Path:
    """Build ``base/checkout`` (see the module docstring) and return it: ``vllm_venv`` (the venv of
    vLLM's interpreter, :func:`venv_of`), when given, becomes its ``.venv-vllm`` as hard links
    (:func:`link_venv`; a symlink to it where links cannot be made). Raises ``FileExistsError``
    when the checkout exists already, ``OSError`` from the copy."""
    checkout = Path(base) / "checkout"
    checkout.mkdir(parents=True)
    for entry in sorted(root.iterdir()):
        if entry.name == "workbench" or (vllm_venv is not None and entry.name == ".venv-vllm"):
            continue
        (checkout / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    if vllm_venv is not None and not link_venv(vllm_venv, checkout / ".venv-vllm"):
        (checkout / ".venv-vllm").symlink_to(vllm_venv, target_is_directory=True)
    models = root / "workbench" / "sandbox" / "models"
    shutil.copytree(root / "workbench", checkout / "workbench", symlinks=True,
                    ignore=lambda d, names: [n for n in names if n == "__pycache__"
                                             or (Path(d) / n) == models])
    (checkout / "workbench" / "sandbox" / "models").symlink_to(models, target_is_directory=True)
    compile_tree(checkout / "workbench")
    return checkout


def compile_tree(root: Path) -> int:
    """Write the bytecode cache of every ``.py`` file under ``root`` (``__pycache__/NAME.cpython-XY.pyc``,
    the interpreter's own optimisation level; symlinked directories not followed) and return how
    many were written. A timestamp cache, as pip writes for an installed SGLang on a real box, so a
    probed or edited file is recompiled by the next import (its mtime and size no longer match).
    ``py_compile`` writes whatever ``PYTHONDONTWRITEBYTECODE`` says.

    Why: with ``PYTHONDONTWRITEBYTECODE=1`` (this machine, CI) nothing ever writes these caches, so
    every kernel, ``workbench`` CLI and sandbox server started from the checkout compiled each
    module of ``workbench`` it imported from source: ~0.24 s of CPU per kernel running a runbook's
    imports, ~0.2 s per CLI, ~0.03 s per sandbox server (it imports little of ``workbench``); the
    suite starts ~70 kernels, ~100 CLIs and ~300 servers. Compiling the tree costs ~0.5 s once per
    pytest process. ``remote/`` is a link to the project's and is left alone (nothing is written
    into the project). Raises ``py_compile.PyCompileError`` for a file that does not compile."""
    import py_compile

    n = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name.endswith(".py") and not os.path.islink(path):
                py_compile.compile(path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
                n += 1
    return n


def use_engine_checkout(checkout: Path) -> None:
    """Make ``checkout`` what this process's children import ``workbench`` from: first on
    ``PYTHONPATH``, the working directory, and ``$EWB_TEST_ENGINE_CHECKOUT``; and, when the checkout
    has a venv copy of vLLM of its own (:func:`vllm_copied`), its interpreter
    ``$WORKBENCH_VLLM_PYTHON``."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(checkout) + (os.pathsep + old if old else "")
    os.environ[ENV] = str(checkout)
    if vllm_copied(checkout):
        os.environ[VLLM_ENV] = str(checkout / ".venv-vllm" / "bin" / "python")
    os.chdir(checkout)


def vllm_copied(checkout: Path | None = None) -> bool:
    """Whether ``checkout`` (default: this process's, ``$EWB_TEST_ENGINE_CHECKOUT``) has a vLLM venv
    of its own (hard links, not a symlink to the shared one)."""
    if checkout is None:
        given = os.environ.get(ENV)
        if not given:
            return False
        checkout = Path(given)
    venv = Path(checkout) / ".venv-vllm"
    return venv.is_dir() and not venv.is_symlink() and (venv / "pyvenv.cfg").is_file()


def sandbox_engine_dir() -> Path:
    """The sandbox engine root this process's servers import: ``<checkout>/workbench/sandbox``
    (its ``srt/`` is what probes change), or the project's own when no checkout is in use (a
    run outside ``tests/conftest.py``)."""
    return checkout_dir() / "workbench" / "sandbox"


def checkout_dir() -> Path:
    """This process's checkout (``$EWB_TEST_ENGINE_CHECKOUT``), else the project's: the working
    directory to give a subprocess that runs ``python -m workbench...`` (``python -m`` puts its
    working directory first on ``sys.path``: run from the project, it would import the project's
    engine, which another worker may be probing)."""
    checkout = os.environ.get(ENV)
    return Path(checkout) if checkout else ROOT
