"""The SSH transport against real OpenSSH servers on loopback: spec forms, host keys, auth,
unreachable hosts, ProxyJump through a second sshd, connection reuse, time-outs that kill the
remote process group, servers that outlive the connection, port forwards, odd paths, big output.

The servers serve this same machine, so what a command did is checked directly in ``/proc`` and
the file system. (The generic box suite also runs over SSH: ``box`` in conftest.py.)
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from remote import CommandTimedOut, connect
from remote import probes as remote_probes
from remote.errors import (
    AuthenticationFailed,
    HostKeyChanged,
    HostKeyUnknown,
    SSHConfigError,
    SSHConnectFailed,
    SSHConnectionLost,
    SSHError,
    SSHTimedOut,
    UnknownSSHHost,
)
from remote.ssh import SSHTransport, load_ssh_config, resolve_target
from sshd import LoopbackSSHD, fingerprint, keygen

def _server_port_seen_by_box(box) -> int:
    """The sshd port the command's session came in on (``$SSH_CONNECTION``: client ip/port, server ip/port)."""
    return int(box.run("echo $SSH_CONNECTION").stdout.split()[3])


def _client_ports_to(port: int) -> set[int]:
    """Local ports of the ESTABLISHED TCP connections on this machine to 127.0.0.1:``port``."""
    ports = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].split(":")[1], 16) == port:
                ports.add(int(fields[1].split(":")[1], 16))
    return ports


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except FileNotFoundError:
        return False
    return text[text.rfind(")") + 2] != "Z"


def _processes_matching(needle: str) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if needle in argv and _alive(int(name)):
                pids.append(int(name))
    return pids


# -- spec forms -------------------------------------------------------------------------------


def test_every_spec_form_reaches_the_loopback_sshd(sshd, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(sshd.config.read_text() + f"Host localhost\n    Port {sshd.server.port}\n")
    specs = [
        sshd.alias,                                            # an ~/.ssh/config alias
        f"{sshd.user}@127.0.0.1:{sshd.server.port}",           # user@host:port
        f"ssh://{sshd.user}@127.0.0.1:{sshd.server.port}",     # ssh:// URL
        f"ssh://127.0.0.1:{sshd.server.port}",                 # URL without user
        "localhost",                                           # a plain host (port from its Host block)
    ]
    for spec in specs:
        with connect(spec, ssh_config=config) as box:
            assert box.name == spec and isinstance(box.transport, SSHTransport)
            assert _server_port_seen_by_box(box) == sshd.server.port
            assert box.run(["id", "-un"]).stdout.strip() == sshd.user
            assert box.expand_path("~") == os.path.expanduser("~")


def test_env_var_names_the_ssh_config(ssh_env):
    with connect(ssh_env.alias) as box:  # no ssh_config argument: $EAGLE_WORKBENCH_SSH_CONFIG
        assert _server_port_seen_by_box(box) == ssh_env.server.port


def test_config_options_are_resolved_with_include(sshd, tmp_path):
    extra = tmp_path / "conf.d" / "boxes.conf"
    extra.parent.mkdir()
    extra.write_text(f"Host gpu-box\n    HostName 127.0.0.1\n    Port 2200\n    User alice\n"
                     f"    IdentityFile {tmp_path}/id_gpu\n    ConnectTimeout 7\n    ServerAliveInterval 11\n"
                     f"    UserKnownHostsFile {tmp_path}/kh1 {tmp_path}/kh2\n    StrictHostKeyChecking accept-new\n"
                     f"    ProxyJump bastion,inner\n")
    main = tmp_path / "ssh_config"
    main.write_text(f"Include {extra}\n\nHost bastion inner\n    HostName 127.0.0.1\n")
    configs = load_ssh_config(str(main))
    assert configs.files == [str(main), str(extra)]
    t = resolve_target("gpu-box", configs)
    assert (t.hostname, t.port, t.user) == ("127.0.0.1", 2200, "alice")
    assert t.identity_files == (f"{tmp_path}/id_gpu",) and t.connect_timeout == 7 and t.keepalive == 11
    assert t.known_hosts == (f"{tmp_path}/kh1", f"{tmp_path}/kh2") and t.accept_new
    assert t.proxy_jump == ("bastion", "inner") and t.where == "alice@127.0.0.1:2200"
    assert t.host_key_name == "[127.0.0.1]:2200"
    assert resolve_target("root@gpu-box:2300", configs).port == 2300  # the spec wins over the config


def test_proxycommand_is_refused_not_ignored(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host via-cmd\n    HostName 127.0.0.1\n    ProxyCommand nc %h %p\n")
    with pytest.raises(SSHConfigError) as info:
        connect("via-cmd", ssh_config=config)
    assert info.value.option == "ProxyCommand" and "ProxyJump" in str(info.value)


def test_unknown_alias_is_a_typed_error(sshd):
    with pytest.raises(UnknownSSHHost) as info:
        connect("ewb-loopbak", ssh_config=sshd.config)  # a typo of the alias
    assert sshd.alias in info.value.aliases and str(sshd.config) in str(info.value)


# -- host keys ------------------------------------------------------------------------------


def _config_with_known_hosts(sshd, tmp_path, known_hosts: Path, **extra) -> Path:
    config = tmp_path / "ssh_config"
    config.write_text(sshd.host_block("kh-test", sshd.server.port, UserKnownHostsFile=f'"{known_hosts}"', **extra))
    return config


def test_unknown_host_key_is_refused_naming_host_and_fingerprint(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = _config_with_known_hosts(sshd, tmp_path, known)
    with pytest.raises(HostKeyUnknown) as info:
        connect("kh-test", ssh_config=config)
    err = info.value
    assert err.fingerprint == sshd.server.fingerprint and err.fingerprint.startswith("SHA256:")
    assert err.host_port == f"[127.0.0.1]:{sshd.server.port}" and err.key_type == "ssh-ed25519"
    assert err.fingerprint in str(err) and f"[127.0.0.1]:{sshd.server.port}" in str(err)
    assert known.read_text() == ""  # nothing was trusted


def test_changed_host_key_is_refused_even_with_trust_on_first_use(sshd, tmp_path):
    other = keygen(tmp_path / "other_host_key")
    kind, blob = Path(str(other) + ".pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.server.port} {kind} {blob}\n")
    config = _config_with_known_hosts(sshd, tmp_path, known, StrictHostKeyChecking="accept-new")
    for trust in (False, True):
        with pytest.raises(HostKeyChanged) as info:
            connect("kh-test", ssh_config=config, trust_unknown_hosts=trust)
        err = info.value
        assert err.fingerprint == sshd.server.fingerprint
        assert err.expected_fingerprint == fingerprint(Path(str(other) + ".pub"))
        assert err.fingerprint in str(err) and err.expected_fingerprint in str(err) and "CHANGED" in str(err)
    assert known.read_text() == f"[127.0.0.1]:{sshd.server.port} {kind} {blob}\n"


@pytest.mark.parametrize("how", ["argument", "config accept-new"])
def test_trust_on_first_use_is_opt_in_and_writes_known_hosts(sshd, tmp_path, how):
    known = tmp_path / "sub dir" / "known_hosts"  # created on first use
    extra = {"StrictHostKeyChecking": "accept-new"} if how == "config accept-new" else {}
    config = _config_with_known_hosts(sshd, tmp_path, known, **extra)
    with connect("kh-test", ssh_config=config, trust_unknown_hosts=(how == "argument")) as box:
        assert box.transport.trusted_new_host_key.startswith(f"[127.0.0.1]:{sshd.server.port} ssh-ed25519 SHA256:")
        assert box.run("echo ok").stdout == "ok\n"
    kind, blob = sshd.server.host_key_pub.read_text().split()[:2]
    assert known.read_text() == f"[127.0.0.1]:{sshd.server.port} {kind} {blob}\n"
    assert oct(known.stat().st_mode & 0o777) == "0o600"
    # from now on the key is known: no opt-in needed, nothing appended
    with connect("kh-test", ssh_config=_config_with_known_hosts(sshd, tmp_path, known)) as box:
        assert box.transport.trusted_new_host_key is None
    assert known.read_text().count("\n") == 1


# -- authentication and reachability --------------------------------------------------------------


def test_refused_key_is_a_typed_error_naming_user_host_and_keys(sshd, tmp_path):
    wrong = keygen(tmp_path / "id_wrong")
    config = tmp_path / "ssh_config"
    config.write_text(sshd.host_block("wrong-key", sshd.server.port, IdentityFile=str(wrong)))
    start = time.monotonic()
    with pytest.raises(AuthenticationFailed) as info:
        connect("wrong-key", ssh_config=config)
    assert time.monotonic() - start < 10
    err = info.value
    assert err.user == sshd.user and err.host == "127.0.0.1"
    assert len(err.keys_tried) == 1 and err.keys_tried[0].startswith(f"{wrong} (ssh-ed25519 SHA256:")
    assert err.keys_tried[0].endswith("refused") and fingerprint(Path(str(wrong) + ".pub")) in err.keys_tried[0]
    assert f"{sshd.user}@127.0.0.1" in str(err) and "no password" in str(err)


def test_missing_and_encrypted_keys_are_reported_not_prompted_for(sshd, tmp_path):
    encrypted = tmp_path / "id_encrypted"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(encrypted)], check=True, timeout=30)
    config = tmp_path / "ssh_config"
    config.write_text(sshd.host_block("enc", sshd.server.port,
                                      IdentityFile=f"{encrypted}\n    IdentityFile {tmp_path}/nope"))
    with pytest.raises(AuthenticationFailed) as info:
        connect("enc", ssh_config=config)
    tried = info.value.keys_tried
    assert f"{encrypted} (encrypted; load it into ssh-agent, passphrases are never prompted for): not tried" in tried
    assert f"{tmp_path}/nope (no such file): not tried" in tried


def test_closed_port_is_refused_at_once(sshd, tmp_path, free_port):
    config = tmp_path / "ssh_config"
    config.write_text(sshd.host_block("closed", free_port, ConnectTimeout="3"))
    start = time.monotonic()
    with pytest.raises(SSHConnectFailed) as info:
        connect("closed", ssh_config=config)
    assert time.monotonic() - start < 3
    assert "connection refused" in str(info.value) and f"127.0.0.1:{free_port}" in str(info.value)
    assert info.value.where == f"{sshd.user}@127.0.0.1:{free_port}"


def test_silent_server_times_out_within_connect_timeout(sshd, tmp_path):
    with socket.socket() as silent:  # accepts TCP (kernel backlog) but never speaks SSH
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        config = tmp_path / "ssh_config"
        config.write_text(sshd.host_block("silent", port, ConnectTimeout="2"))
        start = time.monotonic()
        with pytest.raises(SSHConnectFailed) as info:
            connect("silent", ssh_config=config)
        took = time.monotonic() - start
    assert 1.5 < took < 6, took
    assert "2s" in str(info.value)


# -- ProxyJump through a second sshd --------------------------------------------------------------


@pytest.fixture(scope="module")
def jump_pair(sshd, tmp_path_factory):
    """Two more sshd processes: a jump host (debug log, to see what it forwards) and a target."""
    base = tmp_path_factory.mktemp("jump")
    jump = LoopbackSSHD(base / "jump", authorized=[sshd.key], log_level="DEBUG1").start()
    target = LoopbackSSHD(base / "target", authorized=[sshd.key]).start()
    known = base / "known_hosts"
    known.write_text(jump.known_hosts_line() + target.known_hosts_line())
    config = base / "ssh_config"
    config.write_text(sshd.host_block("ewb-jump", jump.port, UserKnownHostsFile=str(known))
                      + sshd.host_block("ewb-behind", target.port, UserKnownHostsFile=str(known),
                                        ProxyJump="ewb-jump"))
    try:
        yield jump, target, config
    finally:
        jump.stop()
        target.stop()


def test_proxyjump_goes_through_the_jump_host(jump_pair):
    jump, target, config = jump_pair
    with connect("ewb-behind", ssh_config=config) as box:
        assert _server_port_seen_by_box(box) == target.port
        assert box.transport.local_address() is None  # no direct socket: it rides a channel
        assert box.read_text("/proc/sys/kernel/hostname") == socket.gethostname() + "\n"
        url = box.url(target.port)  # forwards work through the chain too: the target's own sshd banner
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5) as s:
            s.settimeout(5)
            assert s.recv(8) == b"SSH-2.0-"
    log = jump.log.read_text()
    assert re.search(rf"direct_tcpip: originator .* target 127\.0\.0\.1 port {target.port}\n", log), log[-2000:]


def test_proxyjump_list_chains_hops_in_order(jump_pair, sshd, tmp_path):
    """``ProxyJump first,second``: the session sshd, then the jump sshd, then the target."""
    jump, target, config = jump_pair
    chained = tmp_path / "ssh_config"
    chained.write_text(config.read_text().replace("ProxyJump ewb-jump", "ProxyJump ewb-first,ewb-jump")
                       + sshd.host_block("ewb-first", sshd.server.port))
    before = jump.log.read_text().count(f"port {target.port}")
    with connect("ewb-behind", ssh_config=chained) as box:
        assert _server_port_seen_by_box(box) == target.port
    log = jump.log.read_text()
    assert log.count(f"port {target.port}") > before
    # the jump sshd was reached through the first hop: its client came through a channel of the
    # session sshd, whose forwarded connection to the jump is logged by the jump with a real port
    assert re.search(r"Accepted publickey for \S+ from 127\.0\.0\.1 port \d+", log)


# -- one connection, reused -----------------------------------------------------------------------


def test_one_connection_is_reused_across_calls(sshd, tmp_path, tiny_server_argv, free_port):
    before = _client_ports_to(sshd.server.port)  # (other tests' connections may come and go)
    with connect(sshd.alias, ssh_config=sshd.config, state_dir=tmp_path / "state") as box:
        client = box.transport.client
        local = box.transport.local_address()
        assert _client_ports_to(sshd.server.port) - before == {local[1]}
        p = tmp_path / "f.txt"
        for i in range(5):
            box.run(f"echo {i}")
            box.write_file(p, f"v{i}")
            assert box.read_text(p) == f"v{i}"
            box.stat(p), box.listdir(tmp_path), box.sha256(p), box.find_servers()
        h = box.launch_server([*tiny_server_argv, "--port", str(free_port)], port=free_port)
        try:
            box.wait_healthy(h, timeout=20)
            assert httpx.get(box.url(free_port) + "/health", trust_env=False).text == "ok\n"
        finally:
            box.stop_server(h, grace=5)
        assert box.transport.client is client and box.transport.local_address() == local
        assert box.transport.reconnects == 0
        assert _client_ports_to(sshd.server.port) - before == {local[1]}  # still the one connection
        sock = box.transport.client.get_transport().sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    deadline = time.monotonic() + 5
    while local[1] in _client_ports_to(sshd.server.port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert local[1] not in _client_ports_to(sshd.server.port)  # closed with the box


def test_dropped_connection_is_reopened_for_reads(ssh_env, tmp_path):
    p = tmp_path / "data.txt"
    p.write_text("still here\n")
    with connect(ssh_env.alias) as box:
        first = box.transport.local_address()
        box.transport.client.get_transport().sock.shutdown(socket.SHUT_RDWR)  # the network goes away
        assert box.read_text(p) == "still here\n"
        assert box.transport.reconnects == 1 and box.transport.local_address() != first
        assert box.run("echo back").stdout == "back\n"


def test_connection_lost_during_a_command_is_a_typed_error(ssh_env):
    with connect(ssh_env.alias) as box:
        outcome = {}

        def run():
            try:
                box.run("sleep 3; echo done", timeout=20)
            except SSHError as exc:
                outcome["error"] = exc

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(0.8)
        box.transport.client.get_transport().sock.shutdown(socket.SHUT_RDWR)
        worker.join(15)
        err = outcome["error"]
        assert isinstance(err, SSHConnectionLost) and "sleep 3; echo done" in str(err)
        assert "may or may not" in str(err)


# -- commands -------------------------------------------------------------------------------------


def test_timeout_kills_the_remote_process_group(ssh_env):
    a, b = f"{300 + os.getpid() % 97}.{time.time_ns() % 10**6}", f"{400 + os.getpid() % 89}.5"  # unique sleeps
    with connect(ssh_env.alias) as box:
        start = time.monotonic()
        with pytest.raises(CommandTimedOut) as info:
            box.run(f"trap '' TERM HUP INT; sleep {a} & echo child=$!; echo shell=$$; sleep {b}", timeout=1.5)
        assert time.monotonic() - start < 8
        err = info.value
        assert err.killed and err.result.exit_code == -9
        fields = dict(line.split("=") for line in err.result.stdout.split())
        child, shell = int(fields["child"]), int(fields["shell"])
        deadline = time.monotonic() + 5
        while (_alive(child) or _alive(shell)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child) and not _alive(shell)
        assert _processes_matching(f"sleep {a}") == [] and _processes_matching(f"sleep {b}") == []


def test_hundred_megabytes_of_output_arrive_whole(ssh_env):
    with connect(ssh_env.alias) as box:
        start = time.monotonic()
        res = box.run("head -c 100000000 /dev/zero | tr '\\0' x; echo tail >&2", timeout=120)
        took = time.monotonic() - start
        assert len(res.stdout) == 100_000_000 and res.stdout[:3] == "xxx" and res.stdout.count("x") == 100_000_000
        assert res.stderr == "tail\n" and res.exit_code == 0 and took < 120


def test_paths_with_spaces_quotes_and_shell_syntax_are_inert(ssh_env, tmp_path, tiny_server_argv, free_port):
    names = [
        f"x; touch {tmp_path}/pwned",
        f"a $(touch {tmp_path}/pwned2) `touch {tmp_path}/pwned3` 'q' \"d\" && true",
        "sp ace\ttab\\back $HOME *",
    ]
    with connect(ssh_env.alias, state_dir=tmp_path / "state", python=sys.executable) as box:
        for name in names:
            path = Path(str(tmp_path / name) + "/file 'it\"s'.py")
            box.makedirs(path.parent)
            assert path.parent.is_dir()
            box.write_file(path, "def f(x):\n    return x\n")
            assert path.read_text() == "def f(x):\n    return x\n" and box.read_text(path) == path.read_text()
            assert box.sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
            assert box.stat(path).size == path.stat().st_size and box.listdir(path.parent) == [path.name]
            assert box.realpath(path) == str(path)
            assert box.run("pwd", cwd=path.parent).stdout == f"{path.parent}\n"
            assert box.run(["cat", str(path)]).stdout == path.read_text()
            probe = remote_probes.add_probe(box, path, before=r"return x", exprs=["x"], tag="odd-path")
            assert "[probe:odd-path]" in path.read_text()
            remote_probes.revert_probe(box, probe)
            assert path.read_text() == "def f(x):\n    return x\n"
            box.remove(path)
            assert not path.exists()
        log = Path(str(tmp_path / names[0]) + "/server log.txt")
        h = box.launch_server([*tiny_server_argv, "--port", str(free_port)], port=free_port, log_path=log)
        try:
            box.wait_healthy(h, timeout=20)
            assert log.exists() and box.find_servers(rf"--port {free_port}\b")[0].log_path == str(log)
        finally:
            box.stop_server(h, grace=5)
    assert not any((tmp_path / marker).exists() for marker in ("pwned", "pwned2", "pwned3"))
    assert not (Path.home() / "pwned").exists()


# -- servers and port forwards --------------------------------------------------------------------


def test_server_survives_disconnect_and_is_stopped_from_a_new_connection(ssh_env, tmp_path, tiny_server_argv,
                                                                         free_port):
    argv = [*tiny_server_argv, "--port", str(free_port)]
    box = connect(ssh_env.alias, state_dir=tmp_path / "state")
    h = box.launch_server(argv, port=free_port)
    box.wait_healthy(h, timeout=20)
    box.close()
    time.sleep(0.5)
    assert _alive(h.pid)
    with connect(ssh_env.alias, state_dir=tmp_path / "state") as again:
        found = again.find_servers(rf"tiny_launch_server\.py --port {free_port}\b")
        assert [s.pid for s in found] == [h.pid] and list(found[0].argv) == argv
        assert found[0].port == free_port and found[0].log_path == h.log_path
        assert httpx.get(again.url(free_port) + "/health", trust_env=False, timeout=5).status_code == 200
        stopped = again.stop_server(found[0], grace=5)
        assert stopped.how == "terminated"
    assert not _alive(h.pid)
    assert _processes_matching(f"tiny_launch_server.py --port {free_port}") == []


def test_port_forward_serves_http_from_a_server_on_the_box(ssh_env, tmp_path, tiny_server_argv, free_port):
    box = connect(ssh_env.alias, state_dir=tmp_path / "state")
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port)], port=free_port)
    try:
        url = box.url(free_port)
        local_port = int(url.rsplit(":", 1)[1])
        assert url.startswith("http://127.0.0.1:") and local_port != free_port
        box.wait_healthy(h, timeout=20)  # polls through the forward
        with httpx.Client(trust_env=False, timeout=5) as client:
            assert client.get(url + "/health").text == "ok\n"
            assert client.get(url + "/nope").status_code == 404
        answers = []

        def fetch():
            answers.append(httpx.get(url + "/health", trust_env=False, timeout=10).status_code)

        threads = [threading.Thread(target=fetch) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert answers == [200] * 8
        assert sum("GET /nope" in line for line in box.tail(h.log_path, 200)) == 1
    finally:
        box.stop_server(h, grace=5)
        box.close()
    with pytest.raises(OSError):  # the forward closed with the box
        socket.create_connection(("127.0.0.1", local_port), timeout=2).close()


def test_closed_box_refuses_further_calls(ssh_env):
    box = connect(ssh_env.alias)
    box.close()
    box.close()  # idempotent
    with pytest.raises(SSHError):
        box.run("true")



def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            ppid = int(text[text.rfind(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def test_a_frozen_server_cannot_hang_file_calls_or_commands(sshd, tmp_path):
    """sshd's processes for the connection stopped (SIGSTOP): every call gives up after its time-out."""
    server = LoopbackSSHD(tmp_path / "server", authorized=[sshd.key]).start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(server.known_hosts_line())
        config = tmp_path / "ssh_config"
        config.write_text(sshd.host_block("frozen", server.port, UserKnownHostsFile=f'"{known}"'))
        with connect("frozen", ssh_config=config) as box:
            assert box.stat("/").is_dir  # the SFTP session is up
            frozen = _descendants(server.proc.pid)
            assert frozen, "no sshd process serves the connection"
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                with pytest.raises(SSHTimedOut) as info:
                    box.stat("/etc", timeout=1)
                assert time.monotonic() - start < 3 and info.value.timeout == 1 and "/etc" in str(info.value)
                start = time.monotonic()
                with pytest.raises(SSHError):
                    box.run("true", timeout=1)
                assert time.monotonic() - start < 4
            finally:
                for pid in frozen:
                    os.kill(pid, signal.SIGCONT)
            assert box.run("echo thawed").stdout == "thawed\n" and box.stat("/etc").is_dir
    finally:
        server.stop()


def test_timeout_while_the_login_shell_is_still_starting_never_runs_the_command(sshd, tmp_path):
    """A login shell stuck in its start-up files (here BASH_ENV sleeps 2 s) past the time-out: the
    command is reported timed out and not killed by group (its id was never printed); the channel
    is closed, so the shell dies (SIGPIPE) on the prologue's first line and never runs the command."""
    slow = tmp_path / "slow_start.sh"  # once per session (not in the shells it starts)
    slow.write_text('[ -n "$EWB_SLEPT" ] || { export EWB_SLEPT=1; sleep 2; }\n')
    server = LoopbackSSHD(tmp_path / "server", authorized=[sshd.key],
                          extra_config=f"SetEnv BASH_ENV={slow}\n").start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(server.known_hosts_line())
        config = tmp_path / "ssh_config"
        config.write_text(sshd.host_block("slow", server.port, UserKnownHostsFile=f'"{known}"'))
        marker = tmp_path / "ran"
        with connect("slow", ssh_config=config) as box:
            start = time.monotonic()
            with pytest.raises(CommandTimedOut) as info:
                box.run(f"touch {marker}", timeout=0.2)
            assert time.monotonic() - start < 2  # 0.2 s + up to 1 s waiting for the group id
            err = info.value
            assert not err.killed and "login shell had not started the command" in str(err)
            assert err.result.exit_code is None
            deadline = time.monotonic() + 30  # past the start-up (2 s + rc files): the shell dies unrun
            while _processes_matching(f"touch {marker}") and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _processes_matching(f"touch {marker}") == [] and not marker.exists()
            assert box.run("echo late", timeout=20).stdout == "late\n"  # slow, but it works
    finally:
        server.stop()
