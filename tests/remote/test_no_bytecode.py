"""No bytecode in the engine's tree: a server the workbench launches (``Box.launch_server``) runs
with ``PYTHONDONTWRITEBYTECODE=1`` (unless the launch sets it), locally and over SSH.

The engine is a fresh copy of the ``workbench`` package (the sandbox server's own tree,
``workbench/sandbox`` included) with no ``__pycache__``, first on ``PYTHONPATH``; the sandbox server
is launched from it, answers ``/health`` and one ``/generate``, and is stopped. The tree's file list
is the same before and after. A control launch with ``PYTHONDONTWRITEBYTECODE`` set empty by the
launch itself (Python then writes bytecode) shows that the copy is what the server imported and
that the check can fail.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import httpx
import pytest

from testkit.sandbox_servers import models_missing_reason
from workbench.sandbox_box import sandbox_launch_command

pytestmark = pytest.mark.slow  # starts sandbox servers (and sshd for the ssh box)

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _serve_once(box, site: Path, port: int, log: Path, env: dict) -> None:
    argv = sandbox_launch_command(port=port, algorithm="EAGLE3")
    handle = box.launch_server(argv, port=port, log_path=log, cwd=site, env=env, timeout=30)
    try:
        box.wait_healthy(handle, timeout=180)
        r = httpx.post(box.url(port) + "/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 4}},
                       timeout=60)
        assert r.status_code == 200, r.text
    finally:
        box.stop_server(handle)


def test_a_launched_server_writes_no_bytecode_into_the_engine_tree(box, tmp_path, free_port):
    reason = models_missing_reason()
    if reason:
        pytest.skip(reason)
    site = tmp_path / "site"
    shutil.copytree(REPO / "workbench", site / "workbench", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    before = _tree(site)
    assert not [f for f in before if "__pycache__" in f]
    env = {"PYTHONPATH": str(site)}

    _serve_once(box, site, free_port, tmp_path / "server.log", env)
    assert _tree(site) == before, sorted(_tree(site) - before)[:10]

    # control: the launch asks for bytecode itself (an empty value is "not set" to Python)
    _serve_once(box, site, free_port, tmp_path / "control.log", {**env, "PYTHONDONTWRITEBYTECODE": ""})
    new = _tree(site) - before
    assert any(f.startswith(os.path.join("workbench", "sandbox")) and "__pycache__" in f for f in new), sorted(new)[:10]
