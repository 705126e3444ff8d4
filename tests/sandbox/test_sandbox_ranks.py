"""The sandbox at ``--tp-size N`` (``workbench.sandbox.srt.managers.tp_ranks``): real rank processes
forked by the launcher, their titles through ``ps``, their log prefixes, their GPU memory through
the sandbox ``nvidia-smi`` (sandbox GPUs: these tests' names say so), the accept length against
TP 1, and what a dead or failing rank does (SGLang 0.5.23's mechanisms, cited in the module)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from sandbox_helpers import ROOT
from testkit.ports import free_port
from testkit.sandbox_servers import _server_env, launch_argv, sandbox_flags
from testkit.engine_copy import checkout_dir
from workbench.lab.gpu import APPS_QUERY, GPU_QUERY, parse_compute_apps, parse_gpus

pytestmark = pytest.mark.usefixtures("models_present")

BENCH = ROOT / "workbench" / "sandbox" / "prompts" / "bench.jsonl"
PROMPTS = [json.loads(line)["text"] for line in BENCH.read_text().splitlines()[:3]]
N_NEW = 48
RANK_MIB = int(0.88 * 81559)  # --mem-fraction-static default x an H100's memory.total


def children(pid: int) -> list[tuple[int, int, int, str]]:
    """(pid, ppid, pgid, args) of ``pid``'s children, from the real ``ps``."""
    out = subprocess.run(["ps", "-o", "pid=,ppid=,pgid=,args=", "--ppid", str(pid)], capture_output=True, text=True,
                         timeout=10).stdout
    rows = []
    for line in out.splitlines():
        p, pp, pg, args = line.split(None, 3)
        rows.append((int(p), int(pp), int(pg), args.strip()))
    return rows


def smi(gpus_dir: Path, query: list[str]) -> str:
    return subprocess.run([str(gpus_dir / "bin" / "nvidia-smi"), *query[1:]], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def gpus_dir_of(server) -> Path:
    return server.log_path.parent / f"sandbox-gpus-{server.port}"


def accept(server, prompt: str) -> tuple[list[int], float]:
    r = httpx.post(server.url + "/generate", json={"text": prompt, "sampling_params": {
        "max_new_tokens": N_NEW, "temperature": 0}}, timeout=60).json()
    return r["output_ids"], r["meta_info"]["spec_accept_length"]


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.fixture(scope="module")
def tp2(own_sandbox_server, tmp_path_factory):
    nccl = free_port()
    with own_sandbox_server(tmp_path_factory.mktemp("tp2"), *sandbox_flags("EAGLE3", decode_log_interval=4),
                            "--tp-size", "2", "--nccl-port", str(nccl)) as server:
        server.nccl_port = nccl
        yield server


def test_tp2_runs_titled_ranks_with_rank_prefixes_sandbox_gpus(tp2):
    rows = children(tp2.pid)
    titles = sorted(args for _, _, _, args in rows)
    assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"], rows
    assert all(ppid == tp2.pid and pgid == tp2.pid for _, ppid, pgid, _ in rows)  # the launcher's group
    assert "workbench.sandbox.launch_server" in Path(f"/proc/{tp2.pid}/cmdline").read_text()  # its own command
    ranks = {args: pid for pid, _, _, args in rows}
    log = tp2.log()
    for r in (0, 1):
        for line in ("Init parallel begin.", "Load weight begin. avail mem=79.65 GB", "Memory pool end. avail mem=9.56 GB"):
            assert re.search(rf"^\[\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d TP{r}\] {re.escape(line)}$", log, re.M), (r, line)
        assert re.search(rf"^\[[^\]]+ TP{r}\] Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLMEagle3, ",
                         log, re.M)
    # rank 0 alone logs the batches (SGLang: attn_tp_rank == 0), the shard bar and the draft's capture
    assert re.search(r"^\[[^\]]+ TP0\] Prefill batch, ", log, re.M) and not re.search(r"TP1\] (Prefill|Decode) batch", log)
    assert log.count("Loading safetensors checkpoint shards: 100% Completed | 1/1 [") == 1
    assert "TP0] Capture draft decode CUDA graph begin." in log and "TP1] Capture draft" not in log
    # each rank's memory, on devices base_gpu_id + rank, under its title
    gdir = gpus_dir_of(tp2)
    apps = parse_compute_apps(smi(gdir, APPS_QUERY))
    uuids = [g.uuid for g in parse_gpus(smi(gdir, GPU_QUERY))]
    assert sorted((a.pid, a.used_mib, a.gpu_uuid, a.name) for a in apps) == sorted([
        (ranks["sglang::scheduler_TP0"], RANK_MIB, uuids[0], "sglang::scheduler_TP0"),
        (ranks["sglang::scheduler_TP1"], RANK_MIB, uuids[1], "sglang::scheduler_TP1")])
    assert [g.used_mib for g in parse_gpus(smi(gdir, GPU_QUERY))] == [RANK_MIB, RANK_MIB] + [0] * 6


def test_tp2_accepts_exactly_what_tp1_accepts(tp2, sandbox_server):
    tp1 = sandbox_server("EAGLE3", decode_log_interval=4)
    for prompt in PROMPTS:
        ids1, accept1 = accept(tp1, prompt)
        ids2, accept2 = accept(tp2, prompt)
        assert ids2 == ids1 and accept2 == accept1 and accept1 > 1.5, prompt[:40]
    info = httpx.get(tp2.url + "/server_info", timeout=30).json()
    assert info["tp_size"] == 2 and info["nccl_port"] == tp2.nccl_port
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1.5


def test_a_dead_rank_leaves_rank_0_waiting_in_its_collective(tmp_path, own_sandbox_server):
    """sglang #3099: a rank is gone, rank 0 neither answers nor exits; it waits (no CPU) in the
    step's collective; the server's /health stays up only as an HTTP process."""
    with own_sandbox_server(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2") as server:
        ranks = {args: pid for pid, _, _, args in children(server.pid)}
        os.kill(ranks["sglang::scheduler_TP1"], signal.SIGKILL)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + "/generate", json={"text": PROMPTS[0], "sampling_params": {
                "max_new_tokens": 8, "temperature": 0}}, timeout=2)
        rank0 = ranks["sglang::scheduler_TP0"]
        before = cpu_ticks(rank0)
        time.sleep(1.0)
        assert cpu_ticks(rank0) - before <= 5  # waiting, not spinning (ticks of 10 ms)
        assert server.proc.poll() is None and Path(f"/proc/{rank0}").exists()
        assert "Prefill batch" in server.log().splitlines()[-1]  # its last line: the request it took


def test_ranks_die_with_a_sigkilled_launcher_and_their_memory_follows_sandbox_gpus(tmp_path, own_sandbox_server):
    with own_sandbox_server(tmp_path, *sandbox_flags("EAGLE3"), "--tp", "2") as server:
        gdir = gpus_dir_of(server)
        ranks = [pid for pid, _, _, args in children(server.pid) if args.startswith("sglang::")]
        assert len(ranks) == 3
        os.kill(server.pid, signal.SIGKILL)  # PR_SET_PDEATHSIG: the kernel SIGKILLs every child
        deadline = time.time() + 10
        while any(Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1][:3]
                  for p in ranks):
            assert time.time() < deadline
            time.sleep(0.05)
        while any(g.used_mib for g in parse_gpus(smi(gdir, GPU_QUERY))):  # released after the delay
            assert time.time() < deadline + 5
            time.sleep(0.1)


@pytest.mark.slow
def test_a_rank_on_a_device_the_box_lacks_fails_the_start_like_sglang_sandbox_gpus(tmp_path):
    port = free_port()
    gdir = tmp_path / "gpus"
    argv = launch_argv(*sandbox_flags("EAGLE3"), "--tp", "2", "--base-gpu-id", "7", port=port)
    proc = subprocess.run(argv, cwd=checkout_dir(), capture_output=True, text=True, timeout=120,
                          env={**_server_env(gdir), "SANDBOX_GPUS_DIR": str(gdir)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    err = proc.stderr
    assert re.search(r"TP1\] Context: device=cuda gpu_id=8 CUDA_VISIBLE_DEVICES=None tp_rank=1$", err, re.M)
    assert re.search(r"TP1\] Scheduler hit an exception: Traceback", err)
    assert "RuntimeError: CUDA error: invalid device ordinal" in err
    assert "Received sigquit from a child process. It usually means the child failed." in err


def test_tp_flag_spellings_parse_as_sglang(tmp_path):
    from workbench.sandbox.srt.server_args import prepare_server_args

    model = str(ROOT / "workbench" / "sandbox" / "models" / "target")
    for flag in ("--tp", "--tp-size", "--tensor-parallel-size"):
        args = prepare_server_args(["--model-path", model, flag, "4", "--base-gpu-id", "2", "--nccl-port", "29555",
                                    "--dist-init-addr", "127.0.0.1:29556", "--mem-fraction-static", "0.5"])
        assert (args.tp_size, args.base_gpu_id, args.nccl_port, args.dist_init_addr, args.mem_fraction_static,
                args.ignored_args) == (4, 2, 29555, "127.0.0.1:29556", 0.5, [])
