"""connect(): local boxes, SSH specs refused with a clear typed error, bad specs."""

import pytest

from remote import Box, LocalTransport, SSHNotImplemented, connect
from remote.errors import BoxSpecError, RemoteError


def test_connect_local(tmp_path):
    with connect("local", state_dir=tmp_path / "s") as box:
        assert isinstance(box, Box) and box.name == "local"
        assert box.state_dir == str(tmp_path / "s")
        assert box.run("echo ok").stdout == "ok\n"


def test_default_state_dir_is_under_the_box_home():
    box = connect("local")
    assert box.state_dir.endswith("/.cache/eagle-workbench") and not box.state_dir.startswith("~")


def test_connect_accepts_a_transport():
    assert connect(LocalTransport()).name == "local"


@pytest.mark.parametrize("spec", ["user@gpu-box", "root@10.0.0.5:2222", "ssh://user@host:22", "kimi-8xh200", "[::1]:22"])
def test_ssh_specs_say_ssh_is_not_implemented(spec):
    with pytest.raises(SSHNotImplemented) as info:
        connect(spec)
    err = info.value
    assert isinstance(err, BoxSpecError) and isinstance(err, RemoteError)
    assert err.spec == spec and "not implemented" in str(err) and spec in str(err)


@pytest.mark.parametrize("spec", ["", "two words", 42])
def test_unusable_specs(spec):
    with pytest.raises(BoxSpecError):
        connect(spec)
