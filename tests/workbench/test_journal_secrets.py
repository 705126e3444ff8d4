"""The journal holds the original server's secrets (restore needs them): private on the box, and
only the environment a relaunch needs."""

from __future__ import annotations

import json
import os
import stat
import sys

from remote import connect
from workbench.session.box_session import launch_env_delta
from workbench.session.journal import Journal


def test_journal_is_private_and_its_directory_too(tmp_path):
    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as box:
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


def test_an_existing_world_readable_journal_becomes_private(tmp_path):
    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as box:
        journal = Journal(box)
        os.makedirs(os.path.dirname(journal.path))
        with open(journal.path, "w") as f:
            f.write("{}")
        os.chmod(journal.path, 0o644)
        journal.begin()
        assert stat.S_IMODE(os.stat(journal.path).st_mode) == 0o600


def test_only_the_variables_a_launch_would_not_have_are_kept(tmp_path):
    """The box's own environment (what a launch gets anyway) is left out; changed, added and
    secret variables stay, with their real values."""
    with connect("local", state_dir=tmp_path / "state", python=sys.executable) as box:
        server_env = dict(os.environ)
        server_env["HF_TOKEN"] = "hf_planted"
        server_env["HOME"] = "/somewhere/else"
        delta = launch_env_delta(box, server_env)
        assert delta["HF_TOKEN"] == "hf_planted" and delta["HOME"] == "/somewhere/else"
        unchanged = [k for k, v in os.environ.items() if k in delta and delta[k] == v]
        # bash's own `_` (the last command) differs per process; nothing else of this environment is kept
        assert [k for k in unchanged if k != "_"] == []
        assert "PATH" not in delta
        assert launch_env_delta(box, None) is None
