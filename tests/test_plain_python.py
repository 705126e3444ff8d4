"""The tests' boxes reach python3 without a version manager's shim, and the loopback sshd's commands
skip ~/.bashrc (tests/testkit/plain_python.py, tests/sshd.py)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from testkit.plain_python import NAMES, is_script, plain_python_dir


def _shim(dirpath: Path, name: str, marker: Path) -> Path:
    """A pyenv-like shim: a script that notes each run in ``marker`` and execs this interpreter."""
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / name
    path.write_text(f'#!/bin/sh\necho run >> "{marker}"\nexec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


def test_a_shim_on_path_is_bypassed_by_a_link_to_its_interpreter(tmp_path, monkeypatch):
    marker = tmp_path / "runs"
    shims = tmp_path / "shims"
    for name in NAMES:
        _shim(shims, name, marker)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    where = plain_python_dir(tmp_path / "base")
    assert where == tmp_path / "base" / "plain-python"
    assert os.environ["PATH"].split(os.pathsep)[:2] == [str(where), str(shims)]
    for name in NAMES:
        assert os.readlink(where / name) == sys.executable  # what the shim runs, asked once
        assert shutil.which(name) == str(where / name) and not is_script(shutil.which(name))
    assert marker.read_text().count("run") == len(NAMES)
    import subprocess

    out = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert Path(out).resolve() == Path(sys.executable).resolve()
    assert marker.read_text().count("run") == len(NAMES)  # the shim no longer runs


def test_no_shim_changes_nothing(tmp_path, monkeypatch):
    plain = tmp_path / "bin"
    plain.mkdir()
    for name in NAMES:
        (plain / name).symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(plain))
    assert plain_python_dir(tmp_path / "base") is None
    assert os.environ["PATH"] == str(plain) and not (tmp_path / "base").exists()


def test_a_shim_naming_no_interpreter_is_refused(tmp_path, monkeypatch):
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").write_text("#!/bin/sh\necho /nonexistent/python3\n")
    (shims / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}/usr/bin{os.pathsep}/bin")
    with pytest.raises(RuntimeError, match="names '/nonexistent/python3' as its interpreter"):
        plain_python_dir(tmp_path / "base")


def test_this_sessions_python3_is_no_shim():
    """conftest's pytest_configure: whatever PATH had, the python3 this session's boxes run is an
    interpreter, not a script."""
    found = shutil.which("python3")
    assert found is not None and not is_script(found), found


@pytest.mark.slow
def test_loopback_ssh_commands_skip_bashrc_and_see_this_path(sshd):
    """The loopback sshd's sessions: SHLVL=1 (bash reads ~/.bashrc for sshd only in a top-level
    shell), this process's PATH, so python3 is the same interpreter as here."""
    from remote import connect

    with connect(sshd.alias, ssh_config=sshd.config) as box:
        # shell text: evaluated by the login shell itself (remote.ssh.transport.wrap_command)
        res = box.run('echo "$SHLVL"; echo "$PATH"; command -v python3', timeout=30)
    shlvl, path, python3 = res.stdout.splitlines()[:3]
    assert shlvl == "2", res.stdout  # SetEnv SHLVL=1, +1 in the login shell: not top-level, no ~/.bashrc
    assert path == os.environ["PATH"], (path, os.environ["PATH"])
    assert python3 == shutil.which("python3")
