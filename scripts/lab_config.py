"""The Jupyter server config ``make lab`` passes (``--config=scripts/lab_config.py``): the
committed notebooks stay as committed when they are run and saved (autosave included).

Jupyter server's documented save hook (``ContentsManager.pre_save_hook``, called with the model
before it is written: https://jupyter-server.readthedocs.io/en/latest/developers/savehooks.html)
rewrites what is saved for a notebook inside this repository's ``notebooks/`` or ``runbooks/``
(:func:`strip_for_git`): no outputs, no execution counts, none of the cell metadata that only
records how outputs were shown or when a cell ran, and the notebook metadata exactly as
``scripts/build_runbooks.py`` writes it (``NOTEBOOK_METADATA``: kernelspec and language_info;
JupyterLab would write the kernel's display name, its language_info and ipywidgets' state).
The user's edits to cell sources (and added, removed or moved cells, tags) are saved. Executed
copies of a notebook belong in ``reports/`` (``workbench runbook ... --report-dir``, or File >
Save Notebook As... outside these two folders), which this hook leaves alone.

Used as a config file (traitlets runs it with ``c`` and ``__file__`` defined) and imported by
the tests (``c`` is then absent and nothing is configured).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import warnings
from pathlib import Path

#: the repository (this file is ``<repo>/scripts/lab_config.py``)
REPO = Path(__file__).resolve().parents[1]
#: the folders whose notebooks are committed: saved without outputs
COMMITTED_DIRS = (REPO / "notebooks", REPO / "runbooks")
#: cell metadata keys that record how outputs were shown or when the cell ran (nbformat 4's
#: ``collapsed``/``scrolled``/``jupyter.outputs_hidden``, JupyterLab's ``execution`` timing,
#: the ExecuteTime extension's): meaningless without the outputs, so not saved
OUTPUT_CELL_METADATA = ("collapsed", "scrolled", "execution", "ExecuteTime")


def _builder_metadata() -> dict:
    spec = importlib.util.spec_from_file_location("_ewb_build_runbooks", REPO / "scripts" / "build_runbooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return copy.deepcopy(module.NOTEBOOK_METADATA)


#: the notebook metadata every committed notebook has (from scripts/build_runbooks.py)
NOTEBOOK_METADATA = _builder_metadata()


def is_committed_notebook(os_path: str | os.PathLike) -> bool:
    """True for a ``.ipynb`` file under ``notebooks/`` or ``runbooks/`` of this repository
    (symlinks resolved), e.g. ``<repo>/notebooks/box_console.ipynb``; False for anything else
    (``reports/``, a copy elsewhere)."""
    p = Path(os_path).resolve()
    return p.suffix == ".ipynb" and any(d == p.parent or d in p.parents for d in COMMITTED_DIRS)


def strip_for_git(nb: dict) -> dict:
    """Make the notebook JSON ``nb`` (an nbformat 4 dict, changed in place and returned) what is
    committed: code cells without outputs and with ``execution_count`` null; the cell metadata
    keys of :data:`OUTPUT_CELL_METADATA` and ``jupyter.outputs_hidden``/``source_hidden``
    removed; the notebook metadata replaced by :data:`NOTEBOOK_METADATA`. Sources, cell ids,
    tags and the cells' order are kept."""
    for cell in nb.get("cells") or []:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        meta = cell.get("metadata")
        if isinstance(meta, dict):
            for key in OUTPUT_CELL_METADATA:
                meta.pop(key, None)
            jup = meta.get("jupyter")
            if isinstance(jup, dict):
                jup.pop("outputs_hidden", None)
                jup.pop("source_hidden", None)
                if not jup:
                    del meta["jupyter"]
    nb["metadata"] = copy.deepcopy(NOTEBOOK_METADATA)
    return nb


def pre_save_hook(model, path, contents_manager, **kwargs):
    """Jupyter server's ``pre_save_hook``: ``model`` is the contents model about to be written to
    ``path`` (API path, relative to the server's root dir); a notebook model whose file is a
    committed notebook (:func:`is_committed_notebook`) gets :func:`strip_for_git` on its content."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    os_path = os.path.join(contents_manager.root_dir, path.strip("/"))
    if is_committed_notebook(os_path):
        strip_for_git(model["content"])


if "c" in globals():  # run as a Jupyter config file
    c = globals()["c"]  # noqa: F821 - defined by traitlets' config loader
    c.FileContentsManager.pre_save_hook = pre_save_hook
    # traitlets applies the config to the contents manager twice (on construction and again when
    # its ``config`` is set), and jupyter_server's validator then warns that this hook "overrides"
    # itself; only that exact message is silenced (another hook replacing this one still warns)
    warnings.filterwarnings("ignore", category=UserWarning, message=re.escape(
        "Overriding existing pre_save_hook (pre_save_hook) with a new one (pre_save_hook)."))
