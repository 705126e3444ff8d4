"""Fault family: what the box's GPUs leave a launch (runtime rules, run before every launch by
:mod:`workbench.session.gpu_guard`, never by the doctor: they read the box as it is now).

Rules:

- ``gpus-held`` — GPU memory on the GPUs a launch will use is held by processes that are not this
  run's: another user's (never killed), a live server's, orphaned SGLang ranks of the box's user
  (left by a killed launcher: ``reclaim_gpus=True`` cleans them up), memory no listed process
  accounts for (a container, where ``nvidia-smi`` lists no PIDs), or a stopped server's memory not
  back at its baseline in time. The launch would run out of memory: SGLang reserves
  ``--mem-fraction-static`` of each GPU at start-up (0.88 by default on an 80 GB GPU; SGLang 0.5.23,
  srt/server_args.py), and orphaned schedulers keep ~100 GB per GPU (sglang #23627); vLLM reserves
  ``--gpu-memory-utilization`` of each GPU (0.9 by default, vLLM 0.32.0 ``config/cache.py``) and
  refuses to start when less is free, and its orphans are ``VLLM::EngineCore`` / ``VLLM::Worker``
  processes.
- ``gpus-too-few`` — the launch needs more GPUs than the box has (``--tp-size`` x ``--pp-size`` x
  ``--dp-size`` from ``--base-gpu-id``): SGLang 0.5.23 fails at start-up on the first rank without
  a device ("CUDA error: invalid device ordinal", srt/distributed/bootstrap.py); vLLM 0.32.0 needs
  ``--tensor-parallel-size`` x ``--pipeline-parallel-size`` x ``--data-parallel-size`` devices of its
  ``CUDA_VISIBLE_DEVICES`` (``workbench.session.gpu_guard.launch_devices`` reads both engines' flags).

Both prevent the start; ``force_launch`` does not override them.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from workbench.rules.finding import Finding, ev
from workbench.rules.registry import ALL_ENGINES, Family

__all__ = ["FAMILY", "gpus_held", "gpus_too_few"]

FAMILY = Family("gpus", "What the box's GPUs leave a launch", __doc__, module=__name__)


def _mib_text(mib: Mapping[Any, Any]) -> str:
    return ", ".join(f"GPU{i} {m if m is not None else '?'} MiB" for i, m in mib.items())


@FAMILY.rule("gpus-held", severities=("error",), kind="runtime", prevents_start="always", engines=ALL_ENGINES,
             summary="GPU memory on the GPUs a launch uses is held by processes that are not this run's (another "
                     "user's, a live server's, orphaned engine ranks — SGLang schedulers, vLLM EngineCore/Worker "
                     "processes —, memory no process accounts for)",
             fix="reclaim_gpus=True for the box user's own orphans; otherwise free the GPUs or use others")
def gpus_held(holders: Sequence[Mapping[str, Any]] = (), *, unattributed: Optional[Mapping[int, int]] = None,
              not_back: Sequence[Mapping[str, Any]] = ()) -> list[Finding]:
    """One finding per holder, per GPU with memory no live listed process accounts for, and per GPU
    a stopped server left above its baseline.

    ``holders``: dicts with ``pid``, ``title`` (its command line), ``user``, ``mib`` (``{GPU index:
    MiB}``, MiB ``None`` when nvidia-smi says N/A), ``listed`` (nvidia-smi lists it), ``orphan`` and
    ``describe`` (the one-line description, e.g. ``workbench.session.gpu_holders.Holder.describe``);
    ``unattributed``: ``{GPU index: MiB}``; ``not_back``: dicts with ``index``, ``used_mib``,
    ``baseline_mib``, ``basis`` (``workbench.errors.GpusNotFreed.gpus``). Raises nothing."""
    out = []
    for h in holders:
        pid = h.get("pid")
        out.append(Finding("gpus-held", "error",
                           h.get("describe") or f"pid {pid} {h.get('title')} (user {h.get('user') or '?'}) holds "
                           + _mib_text(h.get("mib") or {}),
                           evidence={"pid": ev(pid, "nvidia-smi --query-compute-apps" if h.get("listed", True)
                                               else "/proc"),
                                     "title": ev(h.get("title"), f"/proc/{pid}/cmdline"),
                                     "user": ev(h.get("user"), f"/proc/{pid}/status"),
                                     "mib": ev({str(k): v for k, v in (h.get("mib") or {}).items()},
                                               "nvidia-smi --query-compute-apps")},
                           fix="reclaim_gpus=True (the box user's own orphans only)" if h.get("orphan") else None,
                           prevents_start=True))
    for i, m in sorted((unattributed or {}).items()):
        out.append(Finding("gpus-held", "error", f"GPU{i}: {m} MiB held by no listed process (nvidia-smi lists no "
                           "PIDs: a container, or memory the driver has not released yet)",
                           evidence={"unattributed_mib": ev(m, "nvidia-smi --query-gpu=memory.used")},
                           prevents_start=True))
    for g in not_back:
        out.append(Finding("gpus-held", "error", f"GPU{g.get('index')}: {g.get('used_mib')} MiB used, baseline "
                           f"{g.get('baseline_mib')} MiB ({g.get('basis')})",
                           evidence={"used_mib": ev(g.get("used_mib"), "nvidia-smi --query-gpu=memory.used")},
                           prevents_start=True))
    return out


@FAMILY.rule("gpus-too-few", severities=("error",), kind="runtime", prevents_start="always", engines=ALL_ENGINES,
             summary="the launch needs more GPUs than the box has (SGLang: tp x pp x dp from --base-gpu-id; vLLM: "
                     "tensor x pipeline x data parallel size, of CUDA_VISIBLE_DEVICES)",
             fix="a smaller --tp-size (or --pp-size/--dp-size), or a lower --base-gpu-id; on vLLM a smaller "
                 "--tensor-parallel-size (or --pipeline-parallel-size/--data-parallel-size)")
def gpus_too_few(devices: Sequence[int], count: int, *, how: str = "", command: Optional[str] = None,
                 engine: Optional[str] = None) -> list[Finding]:
    """``[]`` when every GPU index in ``devices`` (those the launch uses, as nvidia-smi numbers
    them) is below ``count`` (the GPUs the box has), else one finding naming the missing indices.
    ``how``: how the indices were told (e.g. ``SGLang tp 8 x pp 1 x dp 1 from GPU 0 step 1``);
    ``command``: the GPU query command (evidence); ``engine``: the launch's engine (``"vllm"`` words the
    fix with vLLM's flags, vLLM 0.32.0 ``engine/arg_utils.py``). Raises nothing."""
    devices = sorted(devices)
    missing = [i for i in devices if i >= count]
    if not missing:
        return []
    text = (f"the launch uses GPUs {devices[0]}..{devices[-1]}{f' ({how})' if how else ''} but the box has {count} "
            f"GPU{'' if count == 1 else 's'}{f' ({command})' if command else ''}: "
            f"no GPU{', GPU'.join(str(i) for i in missing)}")
    return [Finding("gpus-too-few", "error", text,
                    evidence={"needed": ev(devices, how or "the launch's flags"),
                              "gpus": ev(count, f"{command or 'nvidia-smi'} --query-gpu=index")},
                    fix=("a smaller --tensor-parallel-size (or --pipeline-parallel-size/--data-parallel-size), or other "
                         "GPUs in CUDA_VISIBLE_DEVICES" if engine == "vllm" else
                         "a smaller --tp-size (or --pp-size/--dp-size), or a lower --base-gpu-id"), prevents_start=True)]
