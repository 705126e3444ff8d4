"""``make lab`` for real, in a fresh clone of this working tree: as whoever runs the tests (root in
CI, where JupyterLab refuses to start without ``--allow-root``), on a free ``LAB_PORT``; a notebook
is opened in a kernel session, saved and checkpointed through the REST API, and afterwards
``git status --porcelain`` is empty (checkpoints and virtual documents live under the venv); the
three notebooks saved as JupyterLab's autosave saves them after Run All (outputs, execution counts,
its kernel metadata) leave it empty too (scripts/lab_config.py's pre_save_hook), while an edited
source cell is saved; and JupyterLab's news question is answered "no" by the settings default.

The venv: a throw-away one (``VENV=`` is a make variable) whose site-packages points at this
interpreter's (a ``.pth``) and whose stamp already lists ``lab sandbox``, so no pip runs (no torch
reinstalled); the output must not say ``installing``. The stamp logic itself (install once, never
again) is tested with a recording interpreter in tests/test_makefile_venv.py."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testkit import ports

REPO = Path(__file__).resolve().parents[2]


def _api(url, token, method, path, body=None):
    req = urllib.request.Request(url + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def _git_status(clone: Path) -> str:
    return subprocess.run(["git", "-C", str(clone), "status", "--porcelain", "--ignored=no"], capture_output=True,
                          text=True, check=True, timeout=60).stdout


def _as_jupyterlab_saves_it_after_run_all(nb: dict) -> dict:
    """The notebook JSON as JupyterLab 4 PUTs it after Run All (the shape of the fresh-user trial's
    dirty notebooks): every code cell with an execution count and an output, the scrolled/timing
    cell metadata, the kernel's display name, the kernel's language_info and ipywidgets' state."""
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = i + 1
        cell["outputs"] = [{"output_type": "execute_result", "execution_count": i + 1, "metadata": {},
                            "data": {"text/plain": "Tab(children=(VBox(...)))",
                                     "application/vnd.jupyter.widget-view+json": {
                                         "model_id": f"{i:032x}", "version_major": 2, "version_minor": 0}}},
                           {"output_type": "stream", "name": "stderr", "text": "[eagle-workbench] ran\n"}]
        cell["metadata"]["scrolled"] = True
        cell["metadata"]["execution"] = {"iopub.status.busy": "2026-12-02T01:00:00.000Z"}
        cell["metadata"]["jupyter"] = {"outputs_hidden": False}
    nb["metadata"]["kernelspec"]["display_name"] = "Python 3 (eagle-workbench)"
    nb["metadata"]["language_info"] = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                                       "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                                       "pygments_lexer": "ipython3", "version": "3.11.7"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                               "version_minor": 0}}
    return nb


@pytest.mark.slow
def test_make_lab_as_root_on_lab_port_leaves_git_status_clean(tmp_path, monkeypatch):
    for tool in ("make", "git"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    pytest.importorskip("jupyterlab")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    # the branch's uncommitted Makefile/.gitignore/lab config are what is under test when run before a commit
    for name in ("Makefile", ".gitignore", "scripts/lab_config.py", "scripts/build_runbooks.py"):
        shutil.copy2(REPO / name, clone / name)
    subprocess.run(["git", "-C", str(clone), "add", "-A"], check=True, timeout=60)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "wip",
                    "--allow-empty"], check=True, timeout=60)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (site / "reuse-test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # JupyterLab's app dir is sys.prefix/share/jupyter/lab: this interpreter's schemas, static files
    # and themes, and a settings dir of the throw-away venv's own (make lab writes its overrides there)
    app_dir = venv / "share" / "jupyter" / "lab"
    app_dir.mkdir(parents=True)
    for entry in (Path(sys.prefix) / "share" / "jupyter" / "lab").iterdir():
        if entry.name != "settings":
            (app_dir / entry.name).symlink_to(entry)
    (venv / ".installed-stamp").write_text("lab sandbox\n")
    os.utime(venv / ".installed-stamp")  # newer than the clone's pyproject.toml / constraints.txt

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "box-state"))  # the executed notebook's kernel
    port, token = ports.free_port(), secrets.token_hex(16)
    home = tmp_path / "home"
    env = {**os.environ, "JUPYTER_TOKEN": token, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / "cfg"),
           "JUPYTER_RUNTIME_DIR": str(home / "rt"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "ws"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings")}
    env.pop("DISPLAY", None)
    log = tmp_path / "make-lab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["make", "--no-print-directory", "lab", f"VENV={venv}", f"LAB_PORT={port}"], cwd=clone,
                                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"make lab exited {proc.returncode}:\n{log.read_text()}"
            try:
                _api(url, token, "GET", "/api/status")
                break
            except (OSError, urllib.error.HTTPError):
                assert time.monotonic() < deadline, f"make lab did not serve on {port}:\n{log.read_text()}"
                time.sleep(0.5)
        nb = "engine_probes.ipynb"
        model = _api(url, token, "GET", f"/api/contents/{nb}?content=1")
        session = _api(url, token, "POST", "/api/sessions", {"path": nb, "type": "notebook", "name": nb,
                                                             "kernel": {"name": "python3"}})
        _api(url, token, "POST", f"/api/contents/{nb}/checkpoints")
        _api(url, token, "PUT", f"/api/contents/{nb}", {"type": "notebook", "format": "json", "content": model["content"]})
        # what JupyterLab's autosave PUTs after Run All: outputs, execution counts, the kernel's
        # display name and language_info, ipywidgets' state, output/timing cell metadata
        for name in ("box_console.ipynb", "control_panel.ipynb", "engine_probes.ipynb"):
            ran = _as_jupyterlab_saves_it_after_run_all(_api(url, token, "GET", f"/api/contents/{name}?content=1")["content"])
            _api(url, token, "PUT", f"/api/contents/{name}", {"type": "notebook", "format": "json", "content": ran})
        # and a real run: box_console.ipynb executed in a real kernel (nbclient: the outputs and the
        # language_info the kernel reports), saved through the REST API
        nbclient = pytest.importorskip("nbclient")
        import nbformat

        executed = nbformat.read(str(clone / "notebooks" / "box_console.ipynb"), as_version=4)
        nbclient.NotebookClient(executed, kernel_name="python3", timeout=300, allow_errors=True,
                                resources={"metadata": {"path": str(clone / "notebooks")}}).execute()
        assert all(c.outputs for c in executed.cells if c.cell_type == "code" and "import" in c.source), executed
        assert executed.metadata.language_info.get("version"), executed.metadata
        _api(url, token, "PUT", "/api/contents/box_console.ipynb",
             {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(executed))})
        status = _git_status(clone)
        assert status == "", f"running and autosaving a committed notebook changed it:\n{status}"
        on_disk = json.loads((clone / "notebooks" / "box_console.ipynb").read_text())
        assert all(c.get("outputs", []) == [] and c.get("execution_count") is None for c in on_disk["cells"])
        # an edited source IS saved (and only the source: still no outputs)
        edited = _as_jupyterlab_saves_it_after_run_all(_api(url, token, "GET", "/api/contents/box_console.ipynb?content=1")["content"])
        params = next(c for c in edited["cells"] if "parameters" in c["metadata"].get("tags", []))
        params["source"] = 'host = "local"\nport = 31555\nlaunch_command = None\nengine = "auto"'
        _api(url, token, "PUT", "/api/contents/box_console.ipynb", {"type": "notebook", "format": "json", "content": edited})
        assert _git_status(clone) == " M notebooks/box_console.ipynb\n"
        diff = subprocess.run(["git", "-C", str(clone), "diff", "--numstat", "--", "notebooks/box_console.ipynb"],
                              capture_output=True, text=True, check=True, timeout=60).stdout
        assert diff.split()[:2] == ["4", "4"], diff  # the 4 source lines, nothing else
        saved = json.loads((clone / "notebooks" / "box_console.ipynb").read_text())
        assert "port = 31555\n" in next(c for c in saved["cells"] if c["id"] == params["id"])["source"]
        subprocess.run(["git", "-C", str(clone), "checkout", "--", "notebooks/box_console.ipynb"], check=True, timeout=60)
        # no "get notified about official Jupyter news?" question: the setting's default is "false"
        news = _api(url, token, "GET", "/lab/api/settings/@jupyterlab/apputils-extension:notification")
        # (JupyterLab's composite: the schema's defaults, with the overrides applied, under the user's settings)
        composite = {k: v.get("default") for k, v in news["schema"]["properties"].items()} | (news.get("settings") or {})
        assert composite["fetchNews"] == "false", news
        assert composite["checkForUpdates"] is False, news
        _api(url, token, "DELETE", f"/api/sessions/{session['id']}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    text = log.read_text()
    assert "installing" not in text, text
    assert "pre_save_hook" not in text and "Pre-save hook" not in text, text  # no warning, no failed hook
    if os.geteuid() == 0:
        assert "Use --allow-root" not in text
    status = _git_status(clone)
    assert status == "", status
    assert list((venv / "lab-state" / "checkpoints").glob("engine_probes-checkpoint.ipynb")), text
    assert not list(clone.rglob(".ipynb_checkpoints")), "checkpoints written next to the notebooks"
