"""Fixtures shared by every test folder (including the loopback OpenSSH server of the SSH tests)."""

import socket

import pytest

from sshd import LoopbackSSHD, keygen, make_client, sshd_missing_reason


@pytest.fixture
def free_port():
    """A TCP port nothing listens on right now (bound to 0 and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real OpenSSH server on 127.0.0.1 serving this machine for the whole session, and a
    client side for it (``sshd.ClientSide``: key, known_hosts, an ssh config with the alias
    ``ewb-loopback``). Skipped only when ``/usr/sbin/sshd`` is not installed."""
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("sshd")
    (base / "client").mkdir()
    key = keygen(base / "client" / "id_ed25519")
    server = LoopbackSSHD(base / "server", authorized=[key]).start()
    try:
        yield make_client(base / "client", server, key)
    finally:
        server.stop()


@pytest.fixture
def ssh_env(sshd, monkeypatch):
    """``$EAGLE_WORKBENCH_SSH_CONFIG`` pointing at the loopback client config (child processes
    inherit it); returns the ``ClientSide``."""
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(sshd.config))
    return sshd


@pytest.fixture(scope="session")
def sglang_source(tmp_path_factory):
    """The unpacked SGLang 0.5.23 package directory (``.../sglang``): ``$SGLANG_SRC``, else
    ``/tmp/sglang_src/sglang``, else the published wheel fetched with ``pip download --no-deps
    sglang==0.5.23`` and its ``sglang/`` tree unzipped. Skips, saying why, when none can be had."""
    import os
    import pathlib
    import subprocess
    import sys
    import zipfile

    for cand in (os.environ.get("SGLANG_SRC"), "/tmp/sglang_src/sglang"):
        if cand and (pathlib.Path(cand) / "srt/models/llama_eagle3.py").exists():
            return pathlib.Path(cand)
    dest = tmp_path_factory.mktemp("sglang_src")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "sglang==0.5.23",
                           "-d", str(dest)], capture_output=True, text=True, timeout=300)
    wheels = list(dest.glob("sglang-0.5.23-*.whl"))
    if proc.returncode != 0 or not wheels:
        pytest.skip(f"SGLang 0.5.23 source unavailable (pip download failed: {proc.stderr.strip()[-200:]})")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(dest, [n for n in zf.namelist() if n.startswith("sglang/")])
    return dest / "sglang"


@pytest.fixture
def nobody():
    """``(uid, gid)`` of the unprivileged ``nobody`` user and its group (``nogroup`` or ``nobody``),
    for the ownership tests; skipped when the system has neither group."""
    import grp
    import pwd

    uid = pwd.getpwnam("nobody").pw_uid
    for group in ("nogroup", "nobody"):
        try:
            return uid, grp.getgrnam(group).gr_gid
        except KeyError:
            continue
    pytest.skip("no nogroup/nobody group")


@pytest.fixture
def cli(capsys):
    """The ``workbench`` command line (``tests/cli_runner.py``): ``cli("doctor", ...)`` runs
    ``workbench.cli.main`` in this process and returns ``(code, out, err)``;
    ``cli.subprocess("probe", "list", env=...)`` runs ``python -m workbench.cli`` as a user does."""
    from cli_runner import CliRunner

    return CliRunner(capsys)
