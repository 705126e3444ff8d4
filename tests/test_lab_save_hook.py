"""scripts/lab_config.py, the Jupyter server config of ``make lab``: its pre_save_hook saves the
committed notebooks as committed (no outputs, the builder's metadata), keeps source edits and
leaves notebooks elsewhere alone. In-process on the real ``FileContentsManager`` (jupyter_server)
with the hook loaded from the config file the way ``--config`` loads it (traitlets); the real
``make lab`` is tests/lab/test_make_lab.py."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "scripts" / "lab_config.py"
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb")) + sorted((REPO / "runbooks").glob("*.ipynb"))


def _load():
    spec = importlib.util.spec_from_file_location("_lab_config_under_test", CONFIG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_all(nb: dict) -> dict:
    """As JupyterLab saves a notebook after Run All: outputs, counts, its kernel metadata."""
    nb = copy.deepcopy(nb)
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = i + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x\n"}]
        cell["metadata"].update(scrolled=True, collapsed=False, execution={"shell.execute_reply": "t"},
                                jupyter={"outputs_hidden": True})
    nb["metadata"] = {"kernelspec": {"name": "python3", "display_name": "Python 3 (eagle-workbench)", "language": "python"},
                      "language_info": {"name": "python", "version": "3.11.7", "file_extension": ".py"},
                      "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}}
    return nb


def test_hook_metadata_is_what_the_builder_writes_into_every_committed_notebook():
    mod = _load()
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        assert json.loads(path.read_text())["metadata"] == mod.NOTEBOOK_METADATA, path


def test_committed_notebook_paths():
    mod = _load()
    assert mod.is_committed_notebook(REPO / "notebooks" / "box_console.ipynb")
    assert mod.is_committed_notebook(REPO / "runbooks" / "preflight.ipynb")
    assert not mod.is_committed_notebook(REPO / "reports" / "box_console.ipynb")
    assert not mod.is_committed_notebook(REPO / "notebooks" / "notes.txt")
    assert not mod.is_committed_notebook(Path("/tmp/notebooks/box_console.ipynb"))


def test_config_file_installs_the_hook_on_the_file_contents_manager(tmp_path):
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
    cm = FileContentsManager(root_dir=str(REPO / "notebooks"), config=config)
    assert cm.pre_save_hook is not None and cm.pre_save_hook.__name__ == "pre_save_hook"


@pytest.fixture
def repo_copy(tmp_path):
    """A copy of the repository's notebooks/ and runbooks/ with the config file beside them
    (scripts/), so the hook's repository is the copy and the real notebooks are never written."""
    for d in ("notebooks", "runbooks"):
        shutil.copytree(REPO / d, tmp_path / d)
    (tmp_path / "scripts").mkdir()
    for name in ("lab_config.py", "build_runbooks.py"):
        shutil.copy2(REPO / "scripts" / name, tmp_path / "scripts" / name)
    return tmp_path


def _manager(root: Path, config_file: Path):
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(config_file.name, path=str(config_file.parent)).load_config()
    return FileContentsManager(root_dir=str(root), config=config)


def test_saving_a_run_notebook_writes_the_committed_file_back(repo_copy):
    cm = _manager(repo_copy, repo_copy / "scripts" / "lab_config.py")
    for rel in ("notebooks/box_console.ipynb", "notebooks/control_panel.ipynb", "runbooks/preflight.ipynb"):
        before = (repo_copy / rel).read_bytes()
        model = cm.get(rel, content=True)
        ran = _run_all(json.loads(json.dumps(model["content"])))
        cm.save({"type": "notebook", "format": "json", "content": ran}, rel)
        assert (repo_copy / rel).read_bytes() == before, rel


def test_an_edited_source_is_saved_and_only_it(repo_copy):
    cm = _manager(repo_copy, repo_copy / "scripts" / "lab_config.py")
    rel = "notebooks/box_console.ipynb"
    ran = _run_all(json.loads(json.dumps(cm.get(rel, content=True)["content"])))
    params = next(c for c in ran["cells"] if "parameters" in c["metadata"].get("tags", []))
    params["source"] = 'host = "local"\nport = 31555\n'
    ran["cells"].append(nbformat.v4.new_markdown_cell("my note", id="mine"))
    cm.save({"type": "notebook", "format": "json", "content": ran}, rel)
    saved = nbformat.read(str(repo_copy / rel), as_version=4)
    committed = nbformat.read(str(REPO / rel), as_version=4)
    assert [c.id for c in saved.cells] == [c.id for c in committed.cells] + ["mine"]
    assert [c.source for c in saved.cells if c.id not in (params["id"], "mine")] == \
        [c.source for c in committed.cells if c.id != params["id"]]
    assert next(c for c in saved.cells if c.id == params["id"]).source.startswith('host = "local"\nport = 31555')
    assert saved.cells[-1].source == "my note"
    assert all(c.outputs == [] and c.execution_count is None for c in saved.cells if c.cell_type == "code")
    assert saved.metadata == committed.metadata
    assert next(c for c in saved.cells if c.id == params["id"]).metadata == {"tags": ["parameters"]}


def test_a_notebook_outside_notebooks_and_runbooks_keeps_its_outputs(repo_copy):
    cm = _manager(repo_copy, repo_copy / "scripts" / "lab_config.py")
    (repo_copy / "reports").mkdir()
    shutil.copy2(repo_copy / "notebooks" / "box_console.ipynb", repo_copy / "reports" / "executed.ipynb")
    ran = _run_all(json.loads(json.dumps(cm.get("reports/executed.ipynb", content=True)["content"])))
    cm.save({"type": "notebook", "format": "json", "content": ran}, "reports/executed.ipynb")
    saved = nbformat.read(str(repo_copy / "reports" / "executed.ipynb"), as_version=4)
    assert saved.cells[1].outputs and saved.cells[1].execution_count == 1
    assert saved.metadata.kernelspec.display_name == "Python 3 (eagle-workbench)"
