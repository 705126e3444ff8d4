"""The sandbox's start-up over ``--sandbox-load-seconds`` and its ``--sandbox-fault`` modes, each by
its mechanism, on real rank processes (``workbench.sandbox.srt.startup``, ``...managers.tp_ranks``):
``orphan-ranks`` (no parent-death signal: a SIGKILLed launcher leaves its ranks running, reparented,
holding their memory), ``term-ignored``, ``port-held`` (the next launch on the port fails with torch's
EADDRINUSE), ``hang:PHASE``. GPU memory is the sandbox's (names say so)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from testkit.engine_copy import checkout_dir
from testkit.ports import free_port
from testkit.sandbox_servers import _server_env, launch_argv, sandbox_flags
from workbench.lab.gpu import APPS_QUERY, GPU_QUERY, parse_compute_apps, parse_gpus

pytestmark = pytest.mark.usefixtures("models_present")
RANK_MIB = int(0.88 * 81559)


class Launch:
    """A server started as is (no wait for /health): ``proc``, ``port``, ``log``, ``gpus`` (its GPU dir)."""

    def __init__(self, tmp_path: Path, *flags: str, gpus: Path | None = None) -> None:
        self.port = free_port()
        self.gpus = gpus or tmp_path / f"gpus-{self.port}"
        self.log_path = tmp_path / f"server-{self.port}.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(launch_argv(*flags, port=self.port), cwd=checkout_dir(), stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, env=_server_env(self.gpus), start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_bytes().decode()  # as written: tqdm's "\r" kept

    def wait_for(self, pattern: str, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while not re.search(pattern, self.log(), re.M):
            assert self.proc.poll() is None or re.search(pattern, self.log(), re.M), self.log()[-3000:]
            assert time.time() < deadline, f"{pattern!r} not in the log:\n{self.log()[-3000:]}"
            time.sleep(0.05)

    def health(self) -> int:
        return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code

    def ranks(self) -> dict[str, int]:
        return titled(lambda pid: ppid(pid) == self.proc.pid)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


def ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def titled(keep) -> dict[str, int]:
    """{title: pid} of the live ``sglang::`` processes ``keep(pid)`` accepts (/proc cmdline)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode()
            if title.startswith("sglang::") and alive(int(entry)) and keep(int(entry)):
                out[title] = int(entry)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return out


def smi(gpus: Path, query: list[str]) -> str:
    return subprocess.run([str(gpus / "bin" / "nvidia-smi"), *query[1:]], capture_output=True, text=True, timeout=30,
                          check=True).stdout


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.slow
def test_a_load_spread_over_seconds_logs_sglangs_phases_and_answers_503_until_ready_sandbox_gpus(tmp_path):
    s = Launch(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2", "--sandbox-load-seconds", "1.5")
    try:
        tic = time.time()
        statuses = []
        while True:
            try:
                statuses.append(s.health())
            except httpx.TransportError:
                pass
            if statuses and statuses[-1] == 200:
                break
            assert s.proc.poll() is None and time.time() - tic < 60, s.log()[-3000:]
            time.sleep(0.05)
        assert time.time() - tic >= 1.5 and statuses.count(503) >= 5  # not ready while it loads
        log = s.log()
        order = ["TP0] Init parallel begin.", "TP0] Init parallel ends. elapsed=", "TP0] Load weight begin. avail mem=79.65 GB",
                 "Loading safetensors checkpoint shards: 100% Completed | 1/1 [", "TP0] Load weight end. elapsed=",
                 "TP0] Memory pool end. avail mem=9.56 GB", "TP0] Capture target verify CUDA graph begin. backend=triton, "
                 "num_tokens_per_req=4, avail mem=9.56 GB", "TP0] Capture target verify CUDA graph end. bs=[1, 2, 4, 8], ",
                 "TP0] Load weight begin. avail mem=9.56 GB", "TP0] Capture draft decode CUDA graph begin.",
                 "TP0] Capture draft extend CUDA graph end.", "TP0] Prefill batch, #new-seq: 1, #new-token: 29,",
                 "] The server is fired up and ready to roll!"]
        at = [log.find(text) for text in order]
        assert -1 not in at and at == sorted(at), list(zip(order, at))
        # tqdm's updates, written with "\r" (no newline between them), SGLang's BAR_FORMAT
        assert re.search(r"\rLoading safetensors checkpoint shards:   0% Completed \| 0/1 \[00:00<\?, \?it/s\]"
                         r"\rLoading safetensors checkpoint shards: 100% Completed \| 1/1 \[00:00<00:00, +\d+\.\d\d(it/s|s/it)\]\n",
                         log)
        load = float(re.search(r"TP0\] Load weight end\. elapsed=(\d+\.\d\d) s, type=LlamaForCausalLM,", log).group(1))
        assert load >= 1.5 * 0.45 - 0.05  # the load phase's share of the seconds
        assert re.search(r"TP1\] Capture target verify CUDA graph end\.", log) and "TP1] Capture draft" not in log
    finally:
        s.kill()


@pytest.mark.slow
def test_orphan_ranks_outlive_a_sigkilled_launcher_and_keep_their_memory_sandbox_gpus(tmp_path):
    s = Launch(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2", "--sandbox-fault", "orphan-ranks")
    try:
        s.wait_for(r"fired up and ready to roll")
        ranks = s.ranks()
        assert set(ranks) == {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"}
        os.kill(s.proc.pid, signal.SIGKILL)
        s.proc.wait(timeout=10)
        time.sleep(0.5)
        assert not alive(ranks["sglang::detokenizer"])  # it keeps its parent-death signal
        for title in ("sglang::scheduler_TP0", "sglang::scheduler_TP1"):
            pid = ranks[title]
            assert alive(pid) and ppid(pid) != s.proc.pid  # reparented (to init or a subreaper)
        apps = {a.pid: a for a in parse_compute_apps(smi(s.gpus, APPS_QUERY))}
        assert {p: (apps[p].used_mib, apps[p].name) for p in apps} == {
            ranks["sglang::scheduler_TP0"]: (RANK_MIB, "sglang::scheduler_TP0"),
            ranks["sglang::scheduler_TP1"]: (RANK_MIB, "sglang::scheduler_TP1")}
        assert [g.used_mib for g in parse_gpus(smi(s.gpus, GPU_QUERY))][:2] == [RANK_MIB, RANK_MIB]
        # the next launch on the same GPUs runs out of memory (sglang #23627), as SGLang says it
        nxt = Launch(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2", gpus=s.gpus)
        assert nxt.proc.wait(timeout=120) == -signal.SIGKILL
        assert ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                "mem_fraction_static=0.88") in nxt.log()
    finally:
        s.kill()  # the orphans are still in the launcher's process group


@pytest.mark.slow
def test_a_rank_that_ignores_sigterm_outlives_a_sigterm_of_the_group_sandbox_gpus(tmp_path):
    s = Launch(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2", "--sandbox-fault", "term-ignored")
    try:
        s.wait_for(r"fired up and ready to roll")
        ranks = s.ranks()
        sigign = int(re.search(r"^SigIgn:\s+([0-9a-f]+)$", Path(f"/proc/{ranks['sglang::scheduler_TP1']}/status")
                               .read_text(), re.M).group(1), 16)
        assert sigign & (1 << (signal.SIGTERM - 1))
        os.killpg(s.proc.pid, signal.SIGTERM)
        s.proc.wait(timeout=30)
        deadline = time.time() + 10
        while alive(ranks["sglang::scheduler_TP0"]) or alive(ranks["sglang::detokenizer"]):
            assert time.time() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        assert alive(ranks["sglang::scheduler_TP1"])  # still there, holding its memory
        assert [a.pid for a in parse_compute_apps(smi(s.gpus, APPS_QUERY))] == [ranks["sglang::scheduler_TP1"]]
    finally:
        s.kill()


def _port_holders(port: int) -> list[int]:
    """Pids with a socket listening on ``port`` (/proc/net/tcp, then /proc/PID/fd)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == port and f[3] == "0A":
            inodes.add(f"socket:[{f[9]}]")
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if any(os.readlink(f"/proc/{entry}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{entry}/fd")):
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


@pytest.mark.slow
def test_a_held_rendezvous_port_fails_the_next_launch_with_eaddrinuse(tmp_path):
    nccl = free_port()
    s = Launch(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2", "--nccl-port", str(nccl), "--sandbox-fault", "port-held")
    holders: list[int] = []
    try:
        s.wait_for(r"fired up and ready to roll")
        s.kill()  # the whole process group: the server is gone
        holders = [p for p in _port_holders(nccl) if alive(p)]
        assert holders and all(os.getsid(p) != s.proc.pid for p in holders)  # a session of its own
        with socket.socket() as probe, pytest.raises(OSError) as e:
            probe.bind(("127.0.0.1", nccl))
        assert e.value.errno == 98  # EADDRINUSE
        nxt = Launch(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2", "--nccl-port", str(nccl))
        assert nxt.proc.wait(timeout=120) == -signal.SIGKILL
        log = nxt.log()
        assert re.search(r"TP0\] Scheduler hit an exception: Traceback", log)
        assert f"port: {nccl}" in log and "EADDRINUSE" in log, log[-3000:]
    finally:
        s.kill()
        for p in holders:
            os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("phase, line", [
    ("nccl-init", r"TP1\] Init parallel begin\.$"),
    ("load", r"TP0\] Load weight begin\. avail mem=79\.65 GB$"),
    ("capture-draft", r"TP0\] Capture draft decode CUDA graph begin\. "),
    ("warmup", r"TP0\] Prefill batch, #new-seq: 1, #new-token: 29, "),
])
@pytest.mark.slow
def test_a_start_up_hangs_at_its_phase_without_burning_cpu(tmp_path, phase, line):
    s = Launch(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2", "--sandbox-fault", f"hang:{phase}")
    try:
        s.wait_for(line)
        time.sleep(0.3)
        ranks = s.ranks()
        before = {t: cpu_ticks(p) for t, p in ranks.items()}
        size = len(s.log())
        time.sleep(1.0)
        assert len(s.log()) == size  # no more progress
        assert all(cpu_ticks(p) - before[t] <= 5 for t, p in ranks.items())  # waiting, not spinning
        assert s.health() == 503 and s.proc.poll() is None
        assert "fired up" not in s.log() and "Scheduler hit an exception" not in s.log()
    finally:
        s.kill()
