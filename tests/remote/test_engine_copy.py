"""The test harness's engine checkout (``testkit.engine_copy``): on every transport, the sandbox box's
engine that this pytest process finds, probes and launches is its own copy, never the project's
``workbench/sandbox``, so two pytest-xdist workers probing "the" engine never meet in one file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.engine_copy import ENV, ROOT, make_engine_checkout, sandbox_engine_dir
from testkit.xdist_scopes import COPIES_ENV, engine_copies_on
from workbench.engine import find_engine


@pytest.mark.skipif(not engine_copies_on(), reason=f"engine copies are off (set {COPIES_ENV}=1)")
def test_the_sandbox_engine_found_on_the_box_is_this_processs_copy(box):
    found = find_engine(box, package="workbench.sandbox", python=sys.executable)
    assert os.environ.get(ENV), "tests/conftest.py did not set up the engine checkout"
    assert found.root == str(sandbox_engine_dir()) == os.path.join(os.environ[ENV], "workbench", "sandbox")
    assert Path(found.root).resolve() != (ROOT / "workbench" / "sandbox").resolve()
    # a copy, not a link to the project's files (a probe written there would reach the project)
    assert not Path(found.root).is_symlink() and not (Path(found.root) / "srt").is_symlink()
    assert (Path(found.root) / "srt" / "models" / "llama_eagle3.py").read_bytes() == \
        (ROOT / "workbench" / "sandbox" / "srt" / "models" / "llama_eagle3.py").read_bytes()
    # the committed models are the project's (a symlink: no test may change them)
    assert (Path(found.root) / "models").resolve() == (ROOT / "workbench" / "sandbox" / "models").resolve()


#: run in an engine checkout: which ``workbench`` it imports, its sandbox models, and whether a vLLM
#: server launched by the project's own ``workbench`` (``argv[1]``) counts as serving the sandbox target
_IN_CHECKOUT = r"""
import json, sys
import workbench
from workbench.engine.launch import LaunchCommand
from workbench.sandbox_box import sandbox_models_dir
from workbench.session.inventory import Inventory, serves_sandbox_target
launch = LaunchCommand.parse(sys.argv[1])
inv = Inventory(host="local", engine="vllm", engine_package="vllm", engine_version="0.32.0", engine_root=None,
                python="python", launch=launch, port=8123, base_url="http://127.0.0.1:8123")
print(json.dumps({"workbench": workbench.__file__, "models": str(sandbox_models_dir()),
                  "serves_sandbox_target": serves_sandbox_target(inv)}))
"""


def test_a_workbench_imported_from_an_engine_checkout_knows_the_projects_sandbox_target(tmp_path):
    """The engine checkout's ``workbench/sandbox/models`` is a link to the project's: a diagnosis run
    from the checkout must still recognise a vLLM server launched on the project's models as the
    sandbox target (and measure the sandbox's own prompts). It once compared the link's spelling with
    the real path, missed, and measured the built-in chat prompts: accept rate 0.225, not 84/315, in
    tests/integration/test_diagnose_vllm.py under engine copies."""
    from workbench.sandbox_box import sandbox_vllm_launch_command

    checkout = make_engine_checkout(tmp_path)
    command = sandbox_vllm_launch_command(port=8123, python="python")  # this process's workbench: the project's
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop(ENV, None)
    out = subprocess.run([sys.executable, "-B", "-c", _IN_CHECKOUT, command], cwd=checkout, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout)
    assert Path(seen["workbench"]).parent == checkout / "workbench"  # the copy was imported
    assert seen["models"] == str((ROOT / "workbench" / "sandbox" / "models").resolve())
    assert seen["serves_sandbox_target"] is True


@pytest.mark.vllm
@pytest.mark.skipif(not engine_copies_on(), reason=f"engine copies are off ({COPIES_ENV}=0)")
def test_the_vllm_this_process_runs_is_its_own_venv_copy():
    """The checkout's ``.venv-vllm`` is a venv of hard links (not a link to the shared one), its
    interpreter is the one every test and workbench call uses, and it imports vLLM from the copy."""
    from testkit.engine_copy import VLLM_ENV, vllm_copied
    from testkit.vllm_servers import vllm_python
    from testkit.xdist_scopes import vllm_copies_on
    from workbench.sandbox_box import vllm_python as workbench_vllm_python

    if not vllm_copies_on():
        pytest.skip("vLLM's venv is on another filesystem than the temporary directory: no hard links")
    checkout = Path(os.environ[ENV])
    assert vllm_copied(checkout) and not (checkout / ".venv-vllm").is_symlink()
    python = checkout / ".venv-vllm" / "bin" / "python"
    assert os.environ[VLLM_ENV] == str(python) == str(vllm_python()) == workbench_vllm_python()
    out = subprocess.run([str(python), "-B", "-c", "import importlib.util as u; print(u.find_spec('vllm').origin)"],
                         capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert Path(out).is_relative_to(checkout / ".venv-vllm")
    shared = ROOT / ".venv-vllm" / Path(out).relative_to(checkout / ".venv-vllm")
    assert os.path.samefile(out, shared)  # a hard link: no data copied


def test_a_file_replaced_in_a_linked_venv_leaves_the_original_as_it_was(tmp_path):
    """What a probe does to an engine file (a new file renamed over it, ``remote.probes``) changes the
    copy only: the original venv's file keeps its bytes and inode."""
    from testkit.engine_copy import link_venv

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python").symlink_to(sys.executable)
    module = venv / "lib" / "site-packages" / "engine" / "model.py"
    module.parent.mkdir(parents=True)
    module.write_text("ORIGINAL = 1\n")
    (venv / "bin" / "engine").write_text(f"#!{venv}/bin/python\nimport engine\n")
    assert link_venv(venv, tmp_path / "copy")
    # a console script names the copy's interpreter (the venv's own is left as it was)
    assert (tmp_path / "copy" / "bin" / "engine").read_text() == f"#!{tmp_path / 'copy'}/bin/python\nimport engine\n"
    assert (venv / "bin" / "engine").read_text() == f"#!{venv}/bin/python\nimport engine\n"
    copied = tmp_path / "copy" / "lib" / "site-packages" / "engine" / "model.py"
    assert os.path.samefile(copied, module) and (tmp_path / "copy" / "bin" / "python").is_symlink()
    inode = module.stat().st_ino
    tmp = copied.with_name("model.py.probe-tmp")
    tmp.write_text("ORIGINAL = 1\nprint('probe')\n")
    os.replace(tmp, copied)
    assert module.read_text() == "ORIGINAL = 1\n" and module.stat().st_ino == inode
    assert copied.read_text().endswith("print('probe')\n")
