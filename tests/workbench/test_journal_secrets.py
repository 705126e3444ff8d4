"""The journal holds the original server's secrets (restore needs them): private on the box, and
only the environment a relaunch needs."""

from __future__ import annotations

import json
import os
import stat
import sys
import time

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


def test_a_loose_state_directory_an_older_run_left_becomes_private(tmp_path, spec):
    """A ``diagnosis/`` directory created 0755 (by an older release, or by hand) is tightened to
    0700 by the first journal write; the journal inside is 0600."""
    with connect(spec, state_dir=tmp_path / "state", python=sys.executable) as box:
        journal = Journal(box)
        directory = os.path.dirname(journal.path)
        os.makedirs(directory)
        os.chmod(directory, 0o755)
        journal.begin()
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(journal.path).st_mode) == 0o600


@pytest.mark.slow
def test_a_launched_servers_log_is_private_in_a_private_directory(tmp_path, spec):
    """The log of a server the workbench launches holds its arguments (SGLang prints server_args,
    --api-key included): created 0600 in a 0700 ``servers/`` directory, even when that directory
    existed 0755; the server process itself keeps the box's umask (a file it creates is not
    tightened)."""
    state = tmp_path / "state"
    os.makedirs(state / "servers")
    os.chmod(state / "servers", 0o755)
    made = tmp_path / "made-by-the-server"
    with connect(spec, state_dir=state, python=sys.executable) as box:
        handle = box.launch_server(["bash", "-c", f"echo api_key=sk-secret; touch {made}; sleep 30"], port=None)
        try:
            deadline = time.monotonic() + 10
            while not made.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert stat.S_IMODE(os.stat(handle.log_path).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(state / "servers").st_mode) == 0o700
            assert stat.S_IMODE(os.stat(made).st_mode) == 0o666 & ~_umask()
        finally:
            box.stop_server(handle, grace=2)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
