"""connect(): local boxes, how SSH specs are parsed, bad specs. (SSH connections: test_remote_ssh.py.)"""

import pytest

from remote import Box, LocalTransport, connect
from remote.errors import BoxSpecError, RemoteError, UnknownSSHHost
from remote.ssh import parse_spec


def test_connect_local(tmp_path):
    with connect("local", state_dir=tmp_path / "s") as box:
        assert isinstance(box, Box) and box.name == "local"
        assert box.state_dir == str(tmp_path / "s")
        assert box.run("echo ok").stdout == "ok\n"


def test_default_state_dir_is_under_the_box_home(monkeypatch):
    monkeypatch.delenv("EAGLE_WORKBENCH_STATE_DIR", raising=False)  # the tests set one per worker
    box = connect("local")
    assert box.state_dir.endswith("/.cache/eagle-workbench") and not box.state_dir.startswith("~")


def test_connect_accepts_a_transport():
    assert connect(LocalTransport()).name == "local"


@pytest.mark.parametrize("spec, parsed", [
    ("user@gpu-box", ("user", "gpu-box", None)),
    ("root@10.0.0.5:2222", ("root", "10.0.0.5", 2222)),
    ("ssh://user@host:22", ("user", "host", 22)),
    ("ssh://host", (None, "host", None)),
    ("kimi-8xh200", (None, "kimi-8xh200", None)),
    ("[::1]:22", (None, "::1", 22)),
    ("localhost", (None, "localhost", None)),
])
def test_ssh_spec_forms_are_parsed(spec, parsed):
    assert parse_spec(spec) == parsed


@pytest.mark.parametrize("spec", ["", "two words", 42, "user@host:99999", "ssh://user@host/path", "a;b"])
def test_unusable_specs(spec):
    with pytest.raises(BoxSpecError) as info:
        connect(spec)
    assert isinstance(info.value, RemoteError)


def test_a_bare_name_that_is_no_alias_is_refused_without_any_network(tmp_path):
    """A typo'd alias is not looked up in DNS: it is no Host in the config and not in /etc/hosts."""
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu-a gpu-b\n    HostName 127.0.0.1\n\nHost *\n    ConnectTimeout 3\n")
    with pytest.raises(UnknownSSHHost) as info:
        connect("gpu-c", ssh_config=config)
    err = info.value
    assert err.spec == "gpu-c" and err.config_files == [str(config)] and err.aliases == ["gpu-a", "gpu-b"]
    assert "gpu-c" in str(err) and str(config) in str(err) and "user@gpu-c" in str(err)
