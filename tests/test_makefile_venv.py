"""The Makefile's one venv and one stamp: each target installs the extras it needs (``make demo``:
``.[sandbox]``; ``make setup`` / ``make test``: ``.[sandbox,test]``), only when the stamp does not
list them or is older than ``pyproject.toml`` / ``constraints.txt``, always with
``-c constraints.txt``, and never drops another target's extras.

The real Makefile runs with real ``make`` in a copy of the repository's three files; the
interpreter it is given (``PYTHON=``, and the ``.venv/bin/python`` its ``-m venv`` creates) is a
shell script that records its arguments instead of running pip, which would need the package
registry and minutes per case. What pip does with those arguments is checked by hand (README).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

STUB = """#!/bin/bash
# records "<venv-relative argv>" and, for -m venv DIR, creates DIR/bin/{python,workbench} as copies of itself
echo "$(basename "$0") $*" >> "$CALLS"
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && cp "$0" "$3/bin/workbench"
fi
"""

PIP_UPGRADE = "python -m pip install --quiet --upgrade pip"
KERNEL = 'python -m ipykernel install --sys-prefix --name python3 --display-name Python 3 (eagle-workbench)'


@pytest.fixture
def checkout(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy2(ROOT / name, repo / name)
    stub = tmp_path / "python3-stub"
    stub.write_text(STUB)
    stub.chmod(0o755)
    calls = tmp_path / "calls.log"

    def make(target: str, *args: str) -> list[str]:
        calls.write_text("")
        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        proc = subprocess.run(["make", "--no-print-directory", "-C", str(repo), target, f"PYTHON={stub}", *args],
                              env={**env, "CALLS": str(calls)}, capture_output=True, text=True, timeout=60)
        make.output = proc.stdout + proc.stderr
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return calls.read_text().splitlines()

    make.repo = repo
    make.stamp = repo / ".venv" / ".installed-stamp"
    return make


def _install(spec: str) -> list[str]:
    return [PIP_UPGRADE, f"python -m pip install --quiet -c constraints.txt -e {spec}", KERNEL]


def _age(path: Path, seconds: int = 100) -> None:
    st = path.stat()
    os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds))


def test_demo_on_a_clean_clone_installs_the_sandbox_extra_only(checkout):
    calls = checkout("demo")
    assert calls == ["python3-stub -m venv .venv"] + _install(".[sandbox]") + [
        "workbench runbook diagnose_acceptance --report-dir reports"]
    assert checkout.stamp.read_text() == "sandbox\n"
    # nothing changed: no pip, no venv, straight to the job
    assert checkout("demo") == ["workbench runbook diagnose_acceptance --report-dir reports"]


def test_setup_after_demo_adds_the_test_extra_and_keeps_the_sandbox(checkout):
    checkout("demo")
    assert checkout("setup") == _install(".[sandbox,test]")
    assert checkout.stamp.read_text() == "sandbox test\n"
    assert checkout("setup") == []
    assert checkout("sandbox-models") == ["python -m workbench.sandbox.train"]
    assert checkout("demo") == ["workbench runbook diagnose_acceptance --report-dir reports"]


@pytest.mark.parametrize("changed", ["pyproject.toml", "constraints.txt"])
def test_a_changed_pyproject_or_constraints_reinstalls_everything_the_stamp_lists(checkout, changed):
    checkout("setup")
    _age(checkout.stamp)
    (checkout.repo / changed).touch()
    assert checkout("sandbox-models") == _install(".[sandbox,test]") + ["python -m workbench.sandbox.train"]
    assert checkout.stamp.read_text() == "sandbox test\n"
    assert checkout("sandbox-models") == ["python -m workbench.sandbox.train"]


def test_a_venv_without_its_interpreter_is_made_again(checkout):
    checkout("setup")
    (checkout.repo / ".venv" / "bin" / "python").unlink()
    assert checkout("setup") == ["python3-stub -m venv .venv"] + _install(".[sandbox,test]")


def test_lab_installs_its_extra_once_and_takes_port_ip_root_and_no_display(checkout):
    """``make lab`` twice: pip once (the stamp then lists ``lab sandbox``), JupyterLab both times on
    LAB_IP:LAB_PORT with checkpoints under the venv, ``--allow-root`` only as root and
    ``--no-browser`` without a display (the stub's environment has none)."""
    state = checkout.repo / ".venv" / "lab-state"
    lab = (f"python -m jupyterlab --config={checkout.repo}/scripts/lab_config.py"
           " --ServerApp.ip=0.0.0.0 --ServerApp.port=9555 --ServerApp.port_retries=0"
           f" --FileCheckpoints.checkpoint_dir={state}/checkpoints"
           f" --LanguageServerManager.virtual_documents_dir={state}/virtual_documents"
           f" --LabApp.app_settings_dir={checkout.repo}/.venv/share/jupyter/lab/settings"
           " --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"
           + (" --allow-root" if os.geteuid() == 0 else "") + " --no-browser notebooks/")
    assert checkout("lab", "LAB_PORT=9555", "LAB_IP=0.0.0.0") == (
        ["python3-stub -m venv .venv"] + _install(".[lab,sandbox]") + [lab])
    assert "installing .[lab,sandbox]" in checkout.output
    assert checkout.stamp.read_text() == "lab sandbox\n"
    assert checkout("lab", "LAB_PORT=9555", "LAB_IP=0.0.0.0") == [lab]
    assert "installing" not in checkout.output
    assert (state / "checkpoints").is_dir()
    overrides = checkout.repo / ".venv/share/jupyter/lab/settings/overrides.d/eagle-workbench.json"
    assert json.loads(overrides.read_text()) == {
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}
    # after make test (sandbox test), lab adds only its extra, once
    checkout("setup")
    assert checkout.stamp.read_text() == "lab sandbox test\n"
    assert checkout("lab", "LAB_PORT=9555", "LAB_IP=0.0.0.0") == [lab]
