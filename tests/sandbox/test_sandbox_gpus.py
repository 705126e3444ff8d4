"""The sandbox box's GPUs (``workbench.sandbox.gpus``) and its ``nvidia-smi``
(``workbench.sandbox.nvidia_smi``), through the installed ``<GPU dir>/bin/nvidia-smi`` script and real
holder processes (one of them another user's, run with ``setpriv`` as ``nobody``). Every test here
uses the sandbox's GPUs, not a real one: their names say so (``..._sandbox_gpus``).

The CSV is parsed with the workbench's own parser (``workbench.lab.gpu``), so what the sandbox prints
is what the workbench reads on a real box."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import workbench
from workbench.lab.gpu import APPS_QUERY, GPU_QUERY, parse_compute_apps, parse_gpus
from workbench.sandbox.gpus import (
    DEFAULT_DEVICE_NAME,
    DEFAULT_TOTAL_MIB,
    NoSuchDevice,
    OutOfDeviceMemory,
    SandboxGpuError,
    SandboxGpus,
    default_gpus_dir,
    install_nvidia_smi,
)

ROOT = Path(workbench.__file__).resolve().parents[1]


@pytest.fixture
def gpu_dir():
    """A GPU dir other users can reach (pytest's tmp dirs are 0700): 2 devices, delay 0.5 s."""
    base = tempfile.mkdtemp(prefix="ranks-gpus-")
    os.chmod(base, 0o755)
    path = Path(base) / "sandbox-gpus"
    SandboxGpus.create(path, 2, release_delay_s=0.5)
    install_nvidia_smi(path)
    yield path
    shutil.rmtree(base, ignore_errors=True)


def smi(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(path / "bin" / "nvidia-smi"), *args], capture_output=True, text=True, timeout=30)


def start_holder(path: Path, device: int, mib: int, *, user: str | None = None) -> subprocess.Popen:
    """``python -m workbench.sandbox.gpus hold`` as a process of its own (as ``user`` with setpriv);
    returns once it printed that it holds the memory."""
    cmd = [sys.executable, "-m", "workbench.sandbox.gpus", "--gpus-dir", str(path), "hold",
           "--device", str(device), "--mib", str(mib)]
    if user is not None:
        pw = pwd.getpwnam(user)
        cmd = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    line = proc.stdout.readline()
    assert line.startswith("holding "), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=10)


def test_query_gpu_prints_what_the_workbench_parses_sandbox_gpus(gpu_dir):
    out = smi(gpu_dir, *GPU_QUERY[1:])
    assert out.returncode == 0, out
    gpus = parse_gpus(out.stdout)
    assert [(g.index, g.name, g.used_mib, g.total_mib) for g in gpus] == [
        (0, DEFAULT_DEVICE_NAME, 0, DEFAULT_TOTAL_MIB), (1, DEFAULT_DEVICE_NAME, 0, DEFAULT_TOTAL_MIB)]
    uuids = [d.uuid for d in SandboxGpus(gpu_dir).devices()]
    assert [g.uuid for g in gpus] == uuids and all(len(u) == 40 and u.startswith("GPU-") for u in uuids)
    holder = start_holder(gpu_dir, 1, 30000)
    try:
        lines = smi(gpu_dir, "--query-gpu=index,uuid,name,memory.used,memory.total", "--format=csv").stdout.splitlines()
        assert lines == ["index, uuid, name, memory.used [MiB], memory.total [MiB]",
                         f"0, {uuids[0]}, {DEFAULT_DEVICE_NAME}, 0 MiB, {DEFAULT_TOTAL_MIB} MiB",
                         f"1, {uuids[1]}, {DEFAULT_DEVICE_NAME}, 30000 MiB, {DEFAULT_TOTAL_MIB} MiB"]
        # any subset, any order, noheader and nounits independently
        assert smi(gpu_dir, "--query-gpu=memory.used,index", "--format=csv,noheader").stdout == "0 MiB, 0\n30000 MiB, 1\n"
        assert smi(gpu_dir, "--query-gpu=memory.free", "--format=csv,nounits").stdout == (
            f"memory.free [MiB]\n{DEFAULT_TOTAL_MIB}\n{DEFAULT_TOTAL_MIB - 30000}\n")
        assert smi(gpu_dir, "-i", "1", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits").stdout == "1, 30000\n"
    finally:
        stop(holder)


def test_compute_apps_lists_holders_and_container_mode_hides_them_sandbox_gpus(gpu_dir):
    gpus = SandboxGpus(gpu_dir)
    holder = start_holder(gpu_dir, 0, 1234)
    try:
        out = smi(gpu_dir, *APPS_QUERY[1:])
        assert out.returncode == 0, out
        apps = parse_compute_apps(out.stdout)
        uuid0 = gpus.devices()[0].uuid
        title = Path(f"/proc/{holder.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        assert [(a.pid, a.used_mib, a.gpu_uuid, a.name) for a in apps] == [(holder.pid, 1234, uuid0, title)]
        assert smi(gpu_dir, "--query-compute-apps=pid,used_memory", "--format=csv").stdout == (
            f"pid, used_gpu_memory [MiB]\n{holder.pid}, 1234 MiB\n")
        gpus.configure(container_mode=True)
        assert smi(gpu_dir, *APPS_QUERY[1:]).stdout == ""
        assert smi(gpu_dir, "--query-compute-apps=pid,used_memory", "--format=csv").stdout == "pid, used_gpu_memory [MiB]\n"
        assert [g.used_mib for g in parse_gpus(smi(gpu_dir, *GPU_QUERY[1:]).stdout)] == [1234, 0]
    finally:
        stop(holder)


def test_memory_is_released_only_after_the_holder_is_gone_plus_the_delay_sandbox_gpus(gpu_dir):
    gpus = SandboxGpus(gpu_dir)
    gpus.configure(release_delay_s=1.0)
    holder = start_holder(gpu_dir, 0, 40000)
    stop(holder)
    first_seen = time.time()
    held = parse_gpus(smi(gpu_dir, *GPU_QUERY[1:]).stdout)
    assert held[0].used_mib == 40000  # gone, but within the delay: still counted ...
    assert parse_compute_apps(smi(gpu_dir, *APPS_QUERY[1:]).stdout) == []  # ... and no longer listed
    [hold] = gpus.holds()
    assert not hold.alive and first_seen - 0.5 <= hold.gone_since <= time.time()
    deadline = time.time() + 10
    while parse_gpus(smi(gpu_dir, *GPU_QUERY[1:]).stdout)[0].used_mib:
        assert time.time() < deadline
        time.sleep(0.05)
    assert time.time() - hold.gone_since >= 1.0
    assert list((gpu_dir / "holds").iterdir()) == []


def test_a_reused_pid_is_not_a_holder_sandbox_gpus(gpu_dir):
    import json

    gpus = SandboxGpus(gpu_dir)
    gpus.configure(release_delay_s=0)
    # this process's pid, but another start time: the process that took the memory is gone
    (gpu_dir / "holds" / f"{os.getpid()}-1-0.json").write_text(json.dumps(
        {"pid": os.getpid(), "start_time": 1, "device": 0, "mib": 500, "uid": 0, "title": "x"}))
    assert gpus.used_mib() == {0: 0, 1: 0}
    hold = gpus.take(0, 700)
    assert hold.pid == os.getpid() and gpus.used_mib() == {0: 700, 1: 0}


def test_another_users_holder_is_listed_with_its_pid_and_user_sandbox_gpus(gpu_dir):
    holder = start_holder(gpu_dir, 1, 20000, user="nobody")
    try:
        [hold] = SandboxGpus(gpu_dir).holds()
        assert (hold.pid, hold.uid, hold.device, hold.mib, hold.alive) == (holder.pid, pwd.getpwnam("nobody").pw_uid,
                                                                          1, 20000, True)
        assert os.stat(f"/proc/{holder.pid}").st_uid == hold.uid
        [app] = parse_compute_apps(smi(gpu_dir, *APPS_QUERY[1:]).stdout)
        assert (app.pid, app.used_mib) == (holder.pid, 20000)
    finally:
        stop(holder)


def test_takes_past_the_memory_or_the_devices_fail_sandbox_gpus(gpu_dir):
    gpus = SandboxGpus(gpu_dir)
    holder = start_holder(gpu_dir, 0, 80000)
    try:
        with pytest.raises(OutOfDeviceMemory) as e:
            gpus.take(0, 2000)
        assert (e.value.device, e.value.free_mib, e.value.asked_mib) == (0, DEFAULT_TOTAL_MIB - 80000, 2000)
        assert "2000 MiB asked, 1559 MiB free" in str(e.value)
        with pytest.raises(NoSuchDevice, match="no sandbox GPU 2 .*devices 0..1"):
            gpus.take(2, 1)
        failed = subprocess.run([sys.executable, "-m", "workbench.sandbox.gpus", "--gpus-dir", str(gpu_dir), "hold",
                                 "--device", "0", "--mib", "9000"], capture_output=True, text=True, timeout=30,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert failed.returncode == 1 and "gpus: error: sandbox GPU 0: 9000 MiB asked" in failed.stderr
        assert gpus.used_mib() == {0: 80000, 1: 0}  # the failed take left nothing
    finally:
        stop(holder)
    with pytest.raises(SandboxGpuError, match="not a sandbox GPU dir"):
        SandboxGpus(gpu_dir / "nope")


def test_nvidia_smi_refuses_what_the_real_one_refuses_sandbox_gpus(gpu_dir, tmp_path):
    bad = smi(gpu_dir, "--query-gpu=index,cuda_version", "--format=csv")
    assert (bad.returncode, bad.stdout) == (2, 'Field "cuda_version" is not a valid field to query.\n')
    for args in (["-L"], ["--query-gpu=index"], ["--query-gpu=index", "--format=json"], []):
        out = smi(gpu_dir, *args)
        assert (out.returncode, out.stdout) == (2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' "
                                                   "for help.\n"), args
    missing = smi(gpu_dir, "-i", "7", "--query-gpu=index", "--format=csv")
    assert (missing.returncode, missing.stdout) == (6, "No devices were found\n")
    script = install_nvidia_smi(tmp_path / "no-gpus")  # a script whose GPU dir was never created
    gone = subprocess.run([str(script), *GPU_QUERY[1:]], capture_output=True, text=True, timeout=30)
    assert gone.returncode == 9 and gone.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate")


def test_the_gpu_dir_follows_the_state_dir_rule_and_is_never_on_path_sandbox_gpus(gpu_dir):
    assert default_gpus_dir({"SANDBOX_GPUS_DIR": "/x/g", "EAGLE_WORKBENCH_STATE_DIR": "/s"}) == Path("/x/g")
    assert default_gpus_dir({"EAGLE_WORKBENCH_STATE_DIR": "/s"}) == Path("/s/sandbox-gpus")
    assert default_gpus_dir({"HOME": "/h"}) == Path(os.path.expanduser("~")) / ".cache/eagle-workbench/sandbox-gpus"
    assert shutil.which("nvidia-smi") != str(gpu_dir / "bin" / "nvidia-smi")
    assert str(gpu_dir / "bin") not in os.environ.get("PATH", "").split(os.pathsep)


def test_a_take_waits_for_memory_of_gone_processes_but_not_of_live_ones_sandbox_gpus(gpu_dir):
    gpus = SandboxGpus(gpu_dir)
    gpus.configure(release_delay_s=1.0)
    holder = start_holder(gpu_dir, 0, 60000)
    with pytest.raises(OutOfDeviceMemory):  # a live holder: refused at once, even when asked to wait
        gpus.take(0, 30000, wait_released=True)
    stop(holder)
    with pytest.raises(OutOfDeviceMemory):  # gone, within the delay, and not asked to wait
        gpus.take(0, 30000)
    tic = time.time()
    hold = gpus.take(0, 30000, wait_released=True)
    assert hold.mib == 30000 and 0.3 <= time.time() - tic <= 2.5  # the rest of the delay
    assert gpus.used_mib()[0] == 30000


def test_nvidia_smi_runs_from_any_directory_sandbox_gpus(gpu_dir, tmp_path):
    """Run from a directory holding another ``workbench`` package (a checkout of another version,
    or a broken one): the sandbox's nvidia-smi still runs this checkout's (``python -m`` would put
    the current directory first on sys.path)."""
    (tmp_path / "workbench").mkdir()
    (tmp_path / "workbench" / "__init__.py").write_text("raise ImportError('the wrong workbench')\n")
    args = ["--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]
    out = subprocess.run([str(gpu_dir / "bin" / "nvidia-smi"), *args], capture_output=True, text=True, timeout=30,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["0, 81559", "1, 81559"]
