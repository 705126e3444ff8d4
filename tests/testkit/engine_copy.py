"""A checkout of this project per pytest process, whose ``workbench`` package (the sandbox box's
engine, ``workbench/sandbox/srt``, in it) is a copy of its own.

Why: the sandbox box's engine is found the way SGLang is found on a real box (``find_spec`` run by
the server's interpreter, ``workbench.engine.locate``), and probes are written into the file that
search returns. With one engine tree per machine, two pytest-xdist workers probing it at once see
each other's markers ("the file already holds markers … the journal does not know"), so every test
that probes it had to run on one worker (the suite's longest lane). With a tree per worker each
worker is a box of its own, as two GPU boxes each have their own SGLang install.

:func:`make_engine_checkout` builds ``<base>/checkout``: ``workbench/`` copied (no ``__pycache__``;
``workbench/sandbox/models`` a symlink to the committed models, which no test may change and every
fault-matrix case checks byte for byte), every other top-level entry of the project a symlink to
the real one (``runbooks``, ``docs``, ``tests``, ``.venv-vllm``…, so paths a module finds from its
own ``__file__`` still resolve). :func:`use_engine_checkout` puts it first on ``PYTHONPATH`` and
makes it the working directory (``python -m`` and ``python -c`` put the working directory before
``PYTHONPATH``), so every server, kernel, CLI and box-side script this process starts, locally or
through the loopback sshd (``SetEnv``, ``tests/sshd.py``), imports the copy; the test process keeps
the ``workbench`` it imported at start (the same code). :func:`sandbox_engine_dir` is the copy's
``workbench/sandbox``, the engine root the box reports.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["ROOT", "ENV", "make_engine_checkout", "use_engine_checkout", "checkout_dir", "sandbox_engine_dir"]

#: the project checkout the tests run from
ROOT = Path(__file__).resolve().parents[2]
#: the environment variable naming this process's engine checkout (set by :func:`use_engine_checkout`)
ENV = "EWB_TEST_ENGINE_CHECKOUT"


def make_engine_checkout(base: Path, root: Path = ROOT) -> Path:
    """Build ``base/checkout`` (see the module docstring) and return it. Raises ``FileExistsError``
    when it exists already, ``OSError`` from the copy."""
    checkout = Path(base) / "checkout"
    checkout.mkdir(parents=True)
    for entry in sorted(root.iterdir()):
        if entry.name == "workbench":
            continue
        (checkout / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    models = root / "workbench" / "sandbox" / "models"
    shutil.copytree(root / "workbench", checkout / "workbench", symlinks=True,
                    ignore=lambda d, names: [n for n in names if n == "__pycache__"
                                             or (Path(d) / n) == models])
    (checkout / "workbench" / "sandbox" / "models").symlink_to(models, target_is_directory=True)
    return checkout


def use_engine_checkout(checkout: Path) -> None:
    """Make ``checkout`` what this process's children import ``workbench`` from: first on
    ``PYTHONPATH``, the working directory, and ``$EWB_TEST_ENGINE_CHECKOUT``."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(checkout) + (os.pathsep + old if old else "")
    os.environ[ENV] = str(checkout)
    os.chdir(checkout)


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
