"""Real OpenSSH servers on loopback for the SSH tests (no mocks, no address outside 127.0.0.1).

``LoopbackSSHD`` starts ``/usr/sbin/sshd -D`` with a generated config, host key and authorized
client key under a temporary directory, on 127.0.0.1 and a free port, and stops it again.
``ClientSide`` is what a user of such a box has: a client key, a known_hosts file and an ssh
config file with aliases. ``tests/conftest.py`` builds the session-wide pair from these.

These servers serve this same machine: a box reached through them is this machine, so tests can
check what a command did by looking at ``/proc`` and the files directly.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from testkit.ports import free_port

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


def sshd_missing_reason() -> str | None:
    """Why the SSH tests cannot run here (``None`` when they can)."""
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} is not installed (apt-get install openssh-server; .ci/run does)"
    if not os.access(SSH_KEYGEN, os.X_OK):
        return "ssh-keygen is not installed (openssh-client)"
    return None


def keygen(path: Path, kind: str = "ed25519") -> Path:
    """Generate an unencrypted key pair at ``path`` / ``path.pub`` with ssh-keygen."""
    subprocess.run([SSH_KEYGEN, "-q", "-t", kind, "-N", "", "-C", f"ewb-test-{path.name}", "-f", str(path)],
                   check=True, timeout=30)
    return path


def fingerprint(pub: Path) -> str:
    """``SHA256:...`` of a public key file, as ``ssh-keygen -lf`` prints it."""
    out = subprocess.run([SSH_KEYGEN, "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return out.split()[1]


@dataclass
class LoopbackSSHD:
    """One ``sshd -D`` on 127.0.0.1 accepting the public keys in ``authorized`` for this user."""

    workdir: Path
    authorized: list[Path]
    log_level: str = "VERBOSE"
    extra_config: str = ""  # more sshd_config lines
    port: int = 0
    proc: subprocess.Popen | None = None
    host_key: Path = field(init=False)

    def start(self, timeout: float = 20) -> "LoopbackSSHD":
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self.host_key = keygen(self.workdir / "ssh_host_ed25519_key")
        auth = self.workdir / "authorized_keys"
        auth.write_text("".join(Path(str(p) + ".pub").read_text() for p in self.authorized))
        auth.chmod(0o600)
        self.port = free_port()
        config = self.workdir / "sshd_config"
        config.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.host_key}\n"
            f"PidFile {self.workdir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {auth}\n"
            "StrictModes no\n"
            "UsePAM no\n"
            "PermitRootLogin yes\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "AllowTcpForwarding yes\n"
            "X11Forwarding no\n"
            "PrintMotd no\n"
            "UseDNS no\n"
            f"LogLevel {self.log_level}\n"
            "Subsystem sftp internal-sftp\n"
            + self._config_with_env()
        )
        self.log = self.workdir / "sshd.log"
        self.proc = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(self.log)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {self.proc.stderr.read().decode()}"
                                   f"{self.log.read_text() if self.log.exists() else ''}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.settimeout(2)
                    if s.recv(64).startswith(b"SSH-2.0-"):
                        return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def _config_with_env(self) -> str:
        """``extra_config`` with one ``SetEnv`` line (sshd uses only the first): its own variables
        and, first, ``PYTHONPATH`` of this process, so that a session imports what this process's
        children import (the pytest process's engine checkout, testkit.engine_copy), as a login on
        a box finds that box's engine; then ``PATH`` of this process and ``SHLVL=1`` (a session's
        bash then skips ``~/.bashrc``: ``testkit.plain_python``), each unless ``extra_config``
        sets it."""
        setenv, rest = [], []
        for line in self.extra_config.splitlines(keepends=True):
            if line.split(None, 1)[:1] == ["SetEnv"]:
                setenv += line.split()[1:]
            else:
                rest.append(line)
        if os.environ.get("PYTHONPATH") and not any(v.startswith("PYTHONPATH=") for v in setenv):
            setenv.insert(0, f'PYTHONPATH="{os.environ["PYTHONPATH"]}"')
        # this process's PATH, and no ~/.bashrc (pyenv's init: ~0.15 s of CPU per command here;
        # testkit.plain_python), unless the test's own SetEnv says otherwise
        if os.environ.get("PATH") and not any(v.startswith("PATH=") for v in setenv):
            setenv.append(f'PATH="{os.environ["PATH"]}"')
        # the sandbox GPUs' release delay of the suite (conftest), as a login on the box would have it
        if os.environ.get("SANDBOX_GPU_RELEASE_DELAY_S") and not any(v.startswith("SANDBOX_GPU_RELEASE_DELAY_S=")
                                                                    for v in setenv):
            setenv.append(f'SANDBOX_GPU_RELEASE_DELAY_S={os.environ["SANDBOX_GPU_RELEASE_DELAY_S"]}')
        if not any(v.startswith("SHLVL=") for v in setenv):
            setenv.append("SHLVL=1")
        return (f"SetEnv {' '.join(setenv)}\n" if setenv else "") + "".join(rest)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    @property
    def host_key_pub(self) -> Path:
        return Path(str(self.host_key) + ".pub")

    @property
    def fingerprint(self) -> str:
        """The host key's ``SHA256:...`` fingerprint (what ssh-keygen shows on the box)."""
        return fingerprint(self.host_key_pub)

    def known_hosts_line(self, name: str = "127.0.0.1") -> str:
        """A known_hosts line trusting this server's key as ``[name]:port``."""
        kind, blob = self.host_key_pub.read_text().split()[:2]
        return f"[{name}]:{self.port} {kind} {blob}\n"


@dataclass
class ClientSide:
    """A user's side of the loopback boxes: ``key`` (client private key), ``known_hosts``,
    ``config`` (an ssh config file) with the alias ``alias`` for the server."""

    workdir: Path
    key: Path
    known_hosts: Path
    config: Path
    server: LoopbackSSHD
    alias: str = "ewb-loopback"
    user: str = field(default_factory=getpass.getuser)

    @property
    def spec(self) -> str:
        """``user@127.0.0.1:port`` of the server."""
        return f"{self.user}@127.0.0.1:{self.server.port}"

    def host_block(self, alias: str, port: int, **extra: str) -> str:
        """An ssh config ``Host`` block for 127.0.0.1:``port`` with this client's key and known_hosts."""
        opts = {"HostName": "127.0.0.1", "Port": str(port), "User": self.user, "IdentityFile": f'"{self.key}"',
                "IdentitiesOnly": "yes", "UserKnownHostsFile": f'"{self.known_hosts}"', "ConnectTimeout": "5",
                "ServerAliveInterval": "15", **extra}
        return f"Host {alias}\n" + "".join(f"    {k} {v}\n" for k, v in opts.items()) + "\n"


def make_client(workdir: Path, server: LoopbackSSHD, key: Path) -> ClientSide:
    """Write known_hosts (the server's key) and an ssh config with the alias ``ewb-loopback`` and
    defaults for 127.0.0.1 / localhost, for the client key ``key``."""
    workdir.mkdir(parents=True, exist_ok=True)
    known = workdir / "known_hosts"
    known.write_text(server.known_hosts_line("127.0.0.1") + server.known_hosts_line("localhost"))
    client = ClientSide(workdir=workdir, key=key, known_hosts=known, config=workdir / "ssh_config", server=server)
    defaults = (f"Host 127.0.0.1 localhost\n    IdentityFile {key}\n    IdentitiesOnly yes\n"
                f"    UserKnownHostsFile {known}\n    ConnectTimeout 5\n\n")
    client.config.write_text(client.host_block(client.alias, server.port) + defaults)
    return client
