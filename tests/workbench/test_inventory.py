"""The inventory's working directory when the run launches the command itself: asked of the box
(``pwd -P`` through it), the directory a server launched with ``cwd=None`` really starts in, on the
local box and over SSH; relative model paths resolved against it."""

from __future__ import annotations

import os
import shlex
import sys

import pytest

from remote import connect
from workbench.session.inventory import launch_cwd, take_inventory
from workbench.sandbox_box import sandbox_models_dir


def _started_in(box) -> str:
    """The cwd (``/proc/PID/cwd``) of a process launched on ``box`` with ``cwd=None``."""
    handle = box.launch_server(["sleep", "30"], port=None)
    try:
        return box.transport.readlink(f"/proc/{handle.pid}/cwd", timeout=10)
    finally:
        box.stop_server(handle, grace=2)


@pytest.mark.slow  # launches a process on the local box
def test_launch_cwd_is_where_a_local_launch_starts(tmp_path, monkeypatch):
    here = tmp_path / "driver cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    with connect("local", state_dir=tmp_path / "state") as box:
        assert launch_cwd(box, timeout=10) == os.path.realpath(here) == _started_in(box)


@pytest.mark.slow
def test_launch_cwd_over_ssh_is_the_login_directory(tmp_path, ssh_env, monkeypatch):
    monkeypatch.chdir(tmp_path)  # this process's cwd is not the box's
    with connect(ssh_env.alias, state_dir=tmp_path / "state") as box:
        cwd = launch_cwd(box, timeout=10)
        assert cwd == _started_in(box)
        assert cwd != os.path.realpath(tmp_path)


def test_inventory_of_a_command_to_launch_resolves_relative_paths_where_it_will_start(tmp_path, monkeypatch,
                                                                                      free_port):
    """No server runs: ``server_cwd`` is the directory the launch will start in (not ``None``), and
    ``resolved`` has the relative model paths made absolute there, as the server will resolve them."""
    models = sandbox_models_dir()
    tmp = tmp_path.resolve()
    rel = tmp / "cases" / "rel"
    rel.mkdir(parents=True)
    (rel / "target").symlink_to(models / "target")
    (rel / "draft").symlink_to(models / "draft")
    trial = tmp / "trial"
    trial.mkdir()
    monkeypatch.chdir(trial)
    command = shlex.join([sys.executable, "-m", "workbench.sandbox.launch_server", "--model-path", "../cases/rel/target",
                          "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "../cases/rel/draft",
                          "--port", str(free_port)])
    with connect("local", state_dir=tmp / "state") as box:
        inv = take_inventory(box, launch_command=command, port=None)
    assert inv.server_pid is None and inv.server_cwd == str(trial)
    assert inv.launch.get("--model-path") == "../cases/rel/target"  # as given
    assert inv.resolved.get("--model-path") == str(rel / "target")
    assert inv.resolved.get("--speculative-draft-model-path") == str(rel / "draft")
    assert inv.to_dict()["server_cwd"] == inv.server_cwd
