"""Real processes holding the sandbox's GPU memory, for the tests of the workbench's GPU checks
(``workbench.session.gpus`` and friends). Only the GPUs are the sandbox's (``workbench.sandbox.gpus``:
there is no GPU here); the processes, their titles (``setproctitle``, as SGLang sets them), users
(``setpriv``), parents and process groups are real.

- :func:`sandbox_gpus` creates the GPU dir a box finds at ``<state_dir>/sandbox-gpus`` and installs
  its ``nvidia-smi`` there (never on PATH).
- :func:`hold` starts a process that takes MiB on some devices, optionally titles itself
  (``sglang::scheduler_TP0``), runs as another user, or is left orphaned: its parent (the
  "launcher", leader of its own process group) exits once the memory is taken, so it is reparented
  as SGLang's ranks are when their launcher is killed (sglang #23627), still in that group.
- :data:`SERVER_SCRIPT`: a launcher that forks one titled rank per device (``sglang::scheduler_TP{r}``),
  each holding memory, and waits: a TP-N server's process tree, for ``Box.launch_server``.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import workbench

ROOT = Path(workbench.__file__).resolve().parents[1]

_HOLD = r"""
import os, sys, time, setproctitle
from workbench.sandbox.gpus import SandboxGpus
gpus_dir, title, detach = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
takes = [tuple(int(x) for x in t.split(":")) for t in sys.argv[4:]]
r, w = os.pipe()
if detach and os.fork():
    os.close(w)
    print(os.read(r, 64).decode().strip(), flush=True)
    os._exit(0)
g = SandboxGpus(gpus_dir)
for device, mib in takes:
    g.take(device, mib)
if title:
    setproctitle.setproctitle(title)
if detach:
    os.write(w, str(os.getpid()).encode())
else:
    print(os.getpid(), flush=True)
while True:
    time.sleep(3600)
"""

#: ``python -c SERVER_SCRIPT GPUS_DIR MIB N``: a launcher forking N ranks titled
#: ``sglang::scheduler_TP{r}``, rank r holding MIB on device r; the launcher waits for them.
SERVER_SCRIPT = r"""
import os, sys, time, setproctitle
from workbench.sandbox.gpus import SandboxGpus
gpus_dir, mib, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kids = []
for r in range(n):
    pid = os.fork()
    if pid == 0:
        SandboxGpus(gpus_dir).take(r, mib)
        setproctitle.setproctitle(f"sglang::scheduler_TP{r}")
        print(f"rank {r} holds {mib} MiB", flush=True)
        while True:
            time.sleep(3600)
    kids.append(pid)
print("ready", flush=True)
for pid in kids:
    os.waitpid(pid, 0)
"""


def env() -> dict:
    """The environment the helper processes need (this checkout on ``PYTHONPATH``)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


def sandbox_gpus(state_dir: Path, count: int = 2, *, release_delay_s: float = 0.3,
                 container_mode: bool = False) -> Path:
    """The sandbox GPU dir at ``state_dir/sandbox-gpus`` with ``count`` devices and its
    ``bin/nvidia-smi``; ``state_dir`` and its parents made reachable by other users (``nobody``)."""
    from workbench.sandbox.gpus import SandboxGpus, install_nvidia_smi

    path = Path(state_dir) / "sandbox-gpus"
    SandboxGpus.create(path, count, release_delay_s=release_delay_s)
    if container_mode:
        SandboxGpus(path).configure(container_mode=True)
    install_nvidia_smi(path)
    for p in [Path(state_dir), *Path(state_dir).parents]:
        if str(p) in ("/", "/tmp"):
            break
        os.chmod(p, os.stat(p).st_mode | 0o755)
    return path


def hold(gpus_dir: Path, takes: Sequence[tuple[int, int]], *, title: str = "", user: Optional[str] = None,
         orphan: bool = False) -> int:
    """Start a process holding ``takes`` (``[(device, MiB)]``) and return its pid once it holds
    them. ``title``: its process title; ``user``: run as that user (``setpriv``); ``orphan``: its
    parent exits at once (reparented, in its dead parent's process group)."""
    cmd = [sys.executable, "-c", _HOLD, str(gpus_dir), title, "1" if orphan else "0",
           *[f"{d}:{m}" for d, m in takes]]
    if user is not None:
        pw = pwd.getpwnam(user)
        cmd = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd="/",
                            start_new_session=True)
    line = proc.stdout.readline().strip()
    if not line.isdigit():
        proc.kill()
        raise RuntimeError(f"holder did not start: {line!r} {proc.stderr.read()}")
    if orphan:
        proc.wait(timeout=10)
    return int(line)


def kill(pid: int) -> None:
    """SIGKILL ``pid`` if it still runs (test clean-up) and wait until it is gone (reaped by
    whoever is its parent)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.02)
