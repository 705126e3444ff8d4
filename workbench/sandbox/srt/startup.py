"""A scheduler's start-up as SGLang 0.5.23 logs it, spread over ``--sandbox-load-seconds``, with the
rank's sandbox GPU memory taken where SGLang's model runner allocates it, and the ``hang:PHASE``
fault.

Phases, in SGLang's order (each rank logs its own lines; prefix ``TP{r}`` with TP > 1), and the
source of each line (SGLang 0.5.23 wheel):

==============  ==============================================================================
``nccl-init``   "Init parallel begin." / "Init parallel ends. elapsed=X s"
                (srt/distributed/bootstrap.py ``init_parallel_runtime``, lines 115, 190)
``load``        "Load weight begin. avail mem=X GB" (srt/model_executor/model_runner.py:1274);
                rank 0 only: "Loading safetensors checkpoint shards:  N% Completed | k/n [..]"
                (srt/model_loader/weight_utils.py:1154-1168, tqdm with ``BAR_FORMAT`` of
                srt/utils/common.py:1414, written on stderr with ``\\r`` as tqdm writes);
                "Load weight end. elapsed=X s, type=C, avail mem=X GB, mem usage=X GB."
                (model_runner.py:1372-1378)
``kv-cache``    "Memory pool end. avail mem=X GB" (srt/mem_cache/kv_cache_configurator.py:498-501)
``capture``     "Capture target verify CUDA graph begin. backend=..., num_tokens_per_req=N, avail
                mem=X GB" / "... end. bs=[...], elapsed=X s, mem usage=X GB, avail mem=X GB."
                (srt/model_executor/model_runner_components/cuda_graph_setup.py:758-790; "target
                decode" without speculative decoding)
``load-draft``  the draft's model runner: "Load weight begin. ..." / "Load weight end. ..." again
``capture-draft`` rank 0 only (``log_info_on_rank0``): "Capture draft decode CUDA graph begin. ..."
                / "... end. ..." and "Capture draft extend CUDA graph begin. ..." / "... end. ..."
                (srt/speculative/eagle_worker_v2.py:513-537, 632-658)
``warmup``      the warm-up request's "Prefill batch ..." line (the scheduler's; hang:warmup stops
                the scheduler right after it)
==============  ==============================================================================

Each phase sleeps its share of the load seconds (:data:`PHASE_SHARES`); ``hang:PHASE`` logs the
phase's first line and then blocks the thread on an event nobody sets (no CPU burnt, no more lines).

GPU memory (``workbench.sandbox.gpus``): a rank takes ``mem_fraction_static * total`` MiB of device
``base_gpu_id + tp_rank`` right after "Load weight begin". A device index past the GPU dir's devices
fails as ``torch.cuda.set_device`` fails (SGLang logs "Context: device=cuda gpu_id=..." first,
bootstrap.py:132-142; torch raises "CUDA error: invalid device ordinal"); too little free memory fails
with SGLang's "Not enough memory. Please try to increase --mem-fraction-static. Current value:
mem_fraction_static=F" (srt/model_executor/pool_configurator.py:95-99). Memory short only because
of processes that are gone (within the GPU dir's release delay) is waited for, at most that delay
(a sandbox simplification: a stop followed at once by a launch does not fail on memory the driver
is still freeing; a live holder, an orphaned rank or another user's process, fails the start).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Optional

from workbench.sandbox.gpus import OutOfDeviceMemory, SandboxGpus, default_gpus_dir, install_nvidia_smi

logger = logging.getLogger(__name__)

#: the share of ``--sandbox-load-seconds`` each phase sleeps (sums to 1)
PHASE_SHARES = {"nccl-init": 0.05, "load": 0.45, "kv-cache": 0.05, "capture": 0.15, "load-draft": 0.10,
                "capture-draft": 0.15, "warmup": 0.05}
#: SGLang 0.5.23 srt/utils/common.py:1414
BAR_FORMAT = "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"
SHARDS_DESC = "Loading safetensors checkpoint shards"
#: the batch sizes SGLang captures by default for a small max running requests (cuda_graph_setup)
CAPTURE_BS = [1, 2, 4, 8]


def open_gpus() -> SandboxGpus:
    """The box's sandbox GPUs (``workbench.sandbox.gpus.default_gpus_dir``), created with the
    defaults when absent, and their ``bin/nvidia-smi`` (re)installed. Raises ``OSError`` when the
    GPU dir cannot be created."""
    path = default_gpus_dir()
    gpus = SandboxGpus.create(path)
    install_nvidia_smi(path)
    return gpus


def _interval(seconds: float) -> str:
    """tqdm's ``format_interval``: ``MM:SS`` (``H:MM:SS`` past an hour)."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def shard_bar(n: int, total: int, elapsed: float) -> str:
    """One tqdm update of SGLang's shard progress bar (``BAR_FORMAT``), as tqdm fills it: rate
    ``?it/s`` before the first shard, then ``X.XXs/it`` (slower than 1 it/s) or ``X.XXit/s``."""
    rate = n / elapsed if n and elapsed > 0 else None
    if rate is None:
        rate_fmt, remaining = "?it/s", "?"
    else:
        inv = 1 / rate
        rate_fmt = f"{inv:5.2f}s/it" if inv > 1 else f"{rate:5.2f}it/s"
        remaining = _interval((total - n) / rate)
    return BAR_FORMAT.format(desc=SHARDS_DESC, percentage=100 * n / total, n_fmt=n, total_fmt=total,
                             elapsed=_interval(elapsed), remaining=remaining, rate_fmt=rate_fmt)


class Startup:
    """The start-up of one scheduler (rank ``tp_rank``; the in-process scheduler is rank 0 of 1):
    pacing, its log lines, the ``hang:PHASE`` fault and its GPU memory (module docstring)."""

    def __init__(self, server_args, tp_rank: int = 0, gpus: Optional[SandboxGpus] = None) -> None:
        self.server_args = server_args
        self.tp_rank = tp_rank
        self.seconds = float(getattr(server_args, "sandbox_load_seconds", 0.0) or 0.0)
        fault = getattr(server_args, "sandbox_fault", None) or ""
        self.hang_phase = fault[5:] if fault.startswith("hang:") else None
        self.gpus = gpus
        self.device = server_args.base_gpu_id + tp_rank
        self.taken_mib = 0

    # -- pacing ---------------------------------------------------------------------------------
    def pace(self, phase: str, share: float = 1.0) -> None:
        """Sleep ``share`` of ``phase``'s part of the load seconds, after hanging there if asked."""
        self.hang_if(phase)
        if self.seconds > 0:
            time.sleep(self.seconds * PHASE_SHARES[phase] * share)

    def hang_if(self, phase: str) -> None:
        """``hang:PHASE`` for this phase: block this thread for good (an event nobody sets), as a
        start-up stuck in a collective or on a file system does: no CPU, no more log lines."""
        if self.hang_phase == phase:
            for handler in logging.getLogger().handlers:
                handler.flush()
            threading.Event().wait()

    # -- memory ---------------------------------------------------------------------------------
    def avail_gb(self) -> float:
        """Free memory of this rank's device in GB (SGLang: ``get_available_gpu_memory``, bytes /
        2**30), 0.0 without sandbox GPUs or for a device the box lacks."""
        if self.gpus is None:
            return 0.0
        try:
            return self.gpus.free_mib(self.device) / 1024
        except Exception:  # NoSuchDevice: reported by take_memory
            return 0.0

    def take_memory(self) -> None:
        """Take ``mem_fraction_static * total`` MiB of this rank's device (module docstring for the
        errors, both ``RuntimeError`` as SGLang's)."""
        if self.gpus is None:
            return
        devices = {d.index: d for d in self.gpus.devices()}
        if self.device not in devices:
            logger.warning(f"Context: device=cuda gpu_id={self.device} CUDA_VISIBLE_DEVICES="
                           f"{os.environ.get('CUDA_VISIBLE_DEVICES')} tp_rank={self.tp_rank}")
            raise RuntimeError("CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously "
                               "reported at some other API call, so the stacktrace below might be incorrect.")
        frac = self.server_args.mem_fraction_static
        mib = int(frac * devices[self.device].total_mib)
        try:
            self.gpus.take(self.device, mib, wait_released=True)
        except OutOfDeviceMemory:
            raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static. "
                               f"Current value: mem_fraction_static={frac}") from None
        self.taken_mib += mib

    # -- the phases' lines ----------------------------------------------------------------------
    def init_parallel(self, init) -> None:
        """nccl-init: the two lines around ``init()`` (the process group's creation, or nothing)."""
        tic = time.perf_counter()
        logger.info("Init parallel begin.")
        self.pace("nccl-init")
        init()
        logger.info(f"Init parallel ends. elapsed={time.perf_counter() - tic:.2f} s")

    def load(self, phase: str, load_model, n_shards: int = 1, take: bool = True):
        """``load`` / ``load-draft``: "Load weight begin", the memory take, the shard bar (rank 0,
        load phase only), ``load_model()`` (a worker: the line names the class of its ``draft_model`` or
        ``model``), "Load weight end"; returns the worker."""
        tic = time.perf_counter()
        before = self.avail_gb()
        logger.info(f"Load weight begin. avail mem={before:.2f} GB")
        if take:
            self.take_memory()
        self.hang_if(phase)  # a load stuck on its shards holds what it took
        if phase == "load" and self.tp_rank == 0:
            self._shards(max(n_shards, 1))
        else:
            self.pace(phase)
        worker = load_model()
        model = getattr(worker, "draft_model", None) or getattr(worker, "model", worker)
        after = self.avail_gb()
        logger.info(f"Load weight end. elapsed={time.perf_counter() - tic:.2f} s, type={type(model).__name__}, "
                    f"avail mem={after:.2f} GB, mem usage={before - after:.2f} GB.")
        return worker

    def _shards(self, total: int) -> None:
        tic = time.perf_counter()
        sys.stderr.write("\r" + shard_bar(0, total, 0.0))
        sys.stderr.flush()
        for k in range(1, total + 1):
            self.pace("load", 1 / total)
            sys.stderr.write("\r" + shard_bar(k, total, time.perf_counter() - tic))
            sys.stderr.flush()
        sys.stderr.write("\n")
        sys.stderr.flush()

    def memory_pool(self) -> None:
        """kv-cache: "Memory pool end. avail mem=X GB"."""
        self.pace("kv-cache")
        logger.info(f"Memory pool end. avail mem={self.avail_gb():.2f} GB")

    def capture(self, speculative: bool, num_tokens_per_req: int) -> None:
        """capture: the target's "Capture target verify|decode CUDA graph begin/end" lines."""
        name = "target verify" if speculative else "target decode"
        self._capture_pair(f"Capture {name} CUDA graph", "capture",
                           f"backend=triton, num_tokens_per_req={num_tokens_per_req}", f"bs={CAPTURE_BS}, ")

    def capture_draft(self, topk: int, num_draft_tokens: int) -> None:
        """capture-draft: the draft's decode and extend captures, logged by rank 0 only."""
        if self.tp_rank != 0:
            self.pace("capture-draft")
            return
        self._capture_pair("Capture draft decode CUDA graph", "capture-draft",
                           f"backend=triton, num_tokens_per_req={topk}, bs={CAPTURE_BS}", "", share=0.5)
        self._capture_pair("Capture draft extend CUDA graph", "capture-draft",
                           f"backend=triton, num_tokens_per_req={num_draft_tokens}, bs={CAPTURE_BS}", "",
                           share=0.5)

    def _capture_pair(self, what: str, phase: str, begin: str, end_bs: str, share: float = 1.0) -> None:
        tic = time.perf_counter()
        before = self.avail_gb()
        logger.info(f"{what} begin. {begin}, avail mem={before:.2f} GB")
        self.pace(phase, share)
        after = self.avail_gb()
        logger.info(f"{what} end. {end_bs}elapsed={time.perf_counter() - tic:.2f} s, "
                    f"mem usage={before - after:.2f} GB, avail mem={after:.2f} GB.")
