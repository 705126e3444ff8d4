"""The journal holds the original server's secrets (restore needs them): private on the box, and
only the environment a relaunch needs."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from remote import connect
from workbench.session.box_session import launch_env_delta
from workbench.session.journal import Journal


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.slow)])
def spec(request):
    """The box: this machine, or this machine over SSH (the loopback sshd: the state dir is a local
    path either way, so the test can stat it)."""
    return "local" if request.param == "local" else request.getfixturevalue("ssh_env").alias


def test_journal_is_private_and_its_directory_too(tmp_path, spec):
    with connect(spec, state_dir=tmp_path / "state", python=sys.executable) as box:
        journal = Journal(box)
        journal.begin()
        journal.record_original(argv=["python", "-m", "sglang.launch_server", "--api-key", "sk-x"], cwd="/",
                                env={"HF_TOKEN": "hf_x"}, port=30000, log_path=None, pid=1234)
        path = journal.path
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        # the real values are kept: restore relaunches the server exactly
        original = json.loads(open(path).read())["original_server"]
        assert original["argv"][-1] == "sk-x" and original["env"] == {"HF_TOKEN": "hf_x"}


def test_an_existing_world_readable_journal_becomes_private(tmp_path, spec):
    with connect(spec, state_dir=tmp_path / "state", python=sys.executable) as box:
        journal = Journal(box)
        os.makedirs(os.path.dirname(journal.path))
        with open(journal.path, "w") as f:
            f.write("{}")
        os.chmod(journal.path, 0o644)
        journal.begin()
        assert stat.S_IMODE(os.stat(journal.path).st_mode) == 0o600


def test_only_the_variables_a_launch_would_not_have_are_kept(tmp_path, spec):
    """The box's own environment (what a launch gets anyway: over SSH the exec channel's, not this
    process's) is left out; changed, added and secret variables stay, with their real values."""
    with connect(spec, state_dir=tmp_path / "state", python=sys.executable) as box:
        base = dict(item.split("=", 1) for item in box.run(["env", "-0"]).stdout.split("\0") if "=" in item)
        server_env = dict(base)
        server_env["HF_TOKEN"] = "hf_planted"
        server_env["HOME"] = "/somewhere/else"
        delta = launch_env_delta(box, server_env)
        # bash's own `_` (the last command it ran) differs from one command to the next
        assert {k: v for k, v in delta.items() if k != "_"} == {"HF_TOKEN": "hf_planted", "HOME": "/somewhere/else"}
        assert launch_env_delta(box, None) is None
