"""The unknown-host-key error names what a user can do, and each thing it names works (issue 26).

Against the real loopback sshd with an empty known_hosts: the message of ``HostKeyUnknown`` gives
three remedies as commands in backticks — ``ssh-keyscan … >> KNOWN_HOSTS``, one OpenSSH login
``ssh -o StrictHostKeyChecking=accept-new … exit``, and the ssh config line ``StrictHostKeyChecking
accept-new`` under the box's ``Host`` (which the workbench honours, with ``UserKnownHostsFile``
naming where the key goes). Each test runs one of them exactly as printed (through ``bash``), then
connects again with nothing else changed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from remote import connect
from remote.errors import HostKeyUnknown

pytestmark = pytest.mark.skipif(shutil.which("ssh-keyscan") is None or shutil.which("ssh") is None,
                                reason="the OpenSSH client (ssh, ssh-keyscan) is not installed")


def _commands(message: str) -> dict[str, str]:
    quoted = re.findall(r"`([^`]+)`", message)
    return {"keyscan": next(q for q in quoted if "ssh-keyscan" in q),
            "ssh": next(q for q in quoted if q.startswith("ssh -o StrictHostKeyChecking=accept-new")),
            "option": next(q for q in quoted if q.startswith("StrictHostKeyChecking ")),
            "host": next(q for q in quoted if q.startswith("Host ")),
            "fingerprint": next(q for q in quoted if q.startswith("ssh-keygen -lf "))}


def _bash(command: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={**os.environ, **env})


def _alias_setup(sshd, tmp_path: Path) -> tuple[Path, Path]:
    known = tmp_path / "kh" / "known_hosts"
    known.parent.mkdir()
    known.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(sshd.host_block("kh-new", sshd.server.port, UserKnownHostsFile=f'"{known}"'))
    return known, config


def _refused(spec: str, config: Path | None = None) -> HostKeyUnknown:
    with pytest.raises(HostKeyUnknown) as info:
        connect(spec, ssh_config=config)
    return info.value


def test_the_message_names_the_exact_commands_for_an_alias(sshd, tmp_path):
    known, config = _alias_setup(sshd, tmp_path)
    err = _refused("kh-new", config)
    port = sshd.server.port
    cmds = _commands(str(err))
    assert cmds["keyscan"] == f"ssh-keyscan -p {port} -t ed25519 127.0.0.1 >> {known}"
    assert cmds["ssh"] == f"ssh -o StrictHostKeyChecking=accept-new -F {config} kh-new exit"
    assert cmds["option"] == "StrictHostKeyChecking accept-new" and cmds["host"] == "Host kh-new"
    assert f"in {config} " in str(err) and f"appended to {known}" in str(err)
    assert cmds["fingerprint"] == "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"  # run on the box
    assert err.fingerprint == sshd.server.fingerprint and err.fingerprint in str(err)
    assert "trust_unknown_hosts=True" in str(err)  # the Python API's opt-in, which exists (test_remote_ssh)
    assert known.read_text() == ""


def test_the_keyscan_command_as_printed_makes_the_box_reachable(sshd, tmp_path):
    known, config = _alias_setup(sshd, tmp_path)
    run = _bash(_commands(str(_refused("kh-new", config)))["keyscan"])
    assert run.returncode == 0, run.stderr
    kind, blob = sshd.server.host_key_pub.read_text().split()[:2]
    assert f"[127.0.0.1]:{sshd.server.port} {kind} {blob}" in known.read_text()
    with connect("kh-new", ssh_config=config) as box:
        assert box.run("echo ok", timeout=30).stdout == "ok\n"
        assert box.transport.trusted_new_host_key is None  # known now, not trusted on first use


def test_the_ssh_login_as_printed_records_the_key_in_the_file_the_workbench_reads(sshd, tmp_path):
    known, config = _alias_setup(sshd, tmp_path)
    run = _bash(_commands(str(_refused("kh-new", config)))["ssh"])
    assert run.returncode == 0, run.stderr
    assert f"[127.0.0.1]:{sshd.server.port} ssh-ed25519 " in known.read_text()
    with connect("kh-new", ssh_config=config) as box:
        assert box.run("echo ok", timeout=30).stdout == "ok\n"


def test_the_config_option_as_printed_is_honoured_and_writes_user_known_hosts_file(sshd, tmp_path):
    known, config = _alias_setup(sshd, tmp_path)
    cmds = _commands(str(_refused("kh-new", config)))
    # "add the line `StrictHostKeyChecking accept-new` under `Host kh-new` in CONFIG"
    lines = config.read_text().splitlines()
    at = lines.index(cmds["host"]) + 1
    config.write_text("\n".join(lines[:at] + ["    " + cmds["option"]] + lines[at:]) + "\n")
    with connect("kh-new", ssh_config=config) as box:
        assert box.transport.trusted_new_host_key.startswith(f"[127.0.0.1]:{sshd.server.port} ssh-ed25519 SHA256:")
        assert box.run("echo ok", timeout=30).stdout == "ok\n"
    assert known.read_text().startswith(f"[127.0.0.1]:{sshd.server.port} ssh-ed25519 ")


def test_a_user_at_host_port_spec_gets_its_own_ssh_command(sshd, tmp_path, monkeypatch):
    """``user@127.0.0.1:PORT`` through ``$EAGLE_WORKBENCH_SSH_CONFIG`` (a ``Host 127.0.0.1`` block):
    the login command repeats the spec (``-p PORT user@127.0.0.1``) with that config, and works."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host 127.0.0.1\n    IdentityFile {sshd.key}\n    IdentitiesOnly yes\n"
                      f"    UserKnownHostsFile {known}\n    ConnectTimeout 5\n")
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(config))
    err = _refused(sshd.spec)
    cmds = _commands(str(err))
    port = sshd.server.port
    assert cmds["ssh"] == f"ssh -o StrictHostKeyChecking=accept-new -F {config} -p {port} {sshd.user}@127.0.0.1 exit"
    assert cmds["host"] == "Host 127.0.0.1"
    run = _bash(cmds["ssh"])
    assert run.returncode == 0, run.stderr
    with connect(sshd.spec) as box:
        assert box.run("echo ok", timeout=30).stdout == "ok\n"


def test_without_any_ssh_config_the_defaults_are_named_and_a_missing_ssh_dir_is_made(sshd, tmp_path, monkeypatch):
    """No ssh config, no ``~/.ssh``: the key goes to ``~/.ssh/known_hosts`` (created by the printed
    command: ``mkdir -p -m 700 ~/.ssh && ssh-keyscan …``); the option goes in ``~/.ssh/config``
    (to be created); the login command needs no ``-F``."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("EAGLE_WORKBENCH_SSH_CONFIG", raising=False)
    with pytest.raises(HostKeyUnknown) as info:
        connect(sshd.spec, look_for_keys=False, allow_agent=False)
    message = str(info.value)
    cmds = _commands(message)
    port = sshd.server.port
    assert cmds["keyscan"] == (f"mkdir -p -m 700 {home}/.ssh && ssh-keyscan -p {port} -t ed25519 127.0.0.1 "
                               f">> {home}/.ssh/known_hosts")
    assert cmds["ssh"] == f"ssh -o StrictHostKeyChecking=accept-new -p {port} {sshd.user}@127.0.0.1 exit"
    assert f"in {home}/.ssh/config (create the file)" in message
    run = _bash(cmds["keyscan"])
    assert run.returncode == 0, run.stderr
    assert oct((home / ".ssh").stat().st_mode & 0o777) == "0o700"
    # the key is known now: the next attempt passes the host key check (and fails later, on the
    # missing client key: no key at all was offered)
    from remote.errors import AuthenticationFailed

    with pytest.raises(AuthenticationFailed):
        connect(sshd.spec, look_for_keys=False, allow_agent=False)


@pytest.mark.slow
def test_the_cli_says_it_in_one_line(sshd, tmp_path, cli):
    known, config = _alias_setup(sshd, tmp_path)
    res = cli.subprocess("doctor", "--host", "kh-new", "--launch", "python -m sglang.launch_server --model-path /m",
                         env={"EAGLE_WORKBENCH_SSH_CONFIG": str(config), "EAGLE_WORKBENCH_STATE_DIR": str(tmp_path / "state")})
    assert res.code == 2 and res.out == ""
    lines = res.err.splitlines()
    assert len(lines) == 1, res.err
    assert lines[0].startswith(f"workbench doctor: cannot reach box kh-new ({sshd.user}@127.0.0.1:{sshd.server.port}): "
                               f"host key of [127.0.0.1]:{sshd.server.port} is unknown")
    assert lines[0].endswith("; nothing was changed")
    assert f"`ssh-keyscan -p {sshd.server.port} -t ed25519 127.0.0.1 >> {known}`" in lines[0]
