"""Before a launch: the rendezvous / NCCL ports free, and the GPUs it will use held by nothing that
is not this run's — orphans of an earlier SGLang launch of the box's user cleaned up when asked
(``reclaim_gpus``), anything else refused with the table of holders as the reason.

Facts encoded here (read from the engines' sources):

- SGLang 0.5.23 (``srt/arg_groups/fields/parallel.py``, ``srt/server_args.py`` ``PortArgs.init_new``):
  ``--nccl-port N`` is the port the ranks' ``torch.distributed`` / NCCL rendezvous binds (random
  below the ephemeral range when not given); ``--dist-init-addr HOST:PORT`` (alias
  ``--nccl-init-addr``) is the rendezvous of a multi-node (or DP-attention) server, bound by node
  rank 0. Taken ports fail the start-up with ``EADDRINUSE`` after a restart (sglang #37215).
- vLLM 0.32.0 (``vllm/config/parallel.py``): ``--master-port`` (multi-node ``mp`` backend) and
  ``--data-parallel-rpc-port``; only checked when given.
- SGLang 0.5.23's rank ``r`` of pipeline stage ``p`` runs on GPU ``base_gpu_id + p * tp_per_node +
  r * gpu_id_step`` (``srt/entrypoints/engine.py``), data-parallel replica ``d`` (without DP
  attention) ``d * tp * pp * gpu_id_step`` further (``srt/managers/data_parallel_controller.py``);
  indices are of the GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible. vLLM uses the first
  ``tp * pp * dp_local`` visible GPUs.
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from remote.errors import PortInUse
from workbench.errors import GpusHeld, GpusNotFreed, GpusTooFew
from workbench.rules.gpus import gpus_held, gpus_too_few
from workbench.session.gpu_holders import BoxGpus, Holder, read_box_gpus, title_of, uid_of, user_names
from workbench.session.gpu_release import GPU_FREE_TIMEOUT_S, GpuBaseline, launch_baseline
from workbench.session.gpus import CONTAINER_MIN_MIB, GpuSnapshot, gpu_command, read_gpu_snapshot

__all__ = ["RendezvousPortInUse", "LaunchCheck", "rendezvous_ports", "check_rendezvous_ports", "port_owner",
           "launch_devices", "held_on", "reclaim_orphans", "check_before_launch", "not_freed_refusal", "GpusHeld"]

#: The flags whose port the launch binds on this box, per engine (see the module docstring).
RENDEZVOUS_FLAGS = {"sglang": ("--nccl-port", "--dist-init-addr"), "sandbox": ("--nccl-port", "--dist-init-addr"),
                    "vllm": ("--master-port", "--data-parallel-rpc-port")}


class RendezvousPortInUse(PortInUse):
    """Refused before the launch: a rendezvous / NCCL port the launch would bind (``flag``, ``port``)
    is already listening on the box; ``owner`` names the process holding it when readable."""

    def __init__(self, port: int, flag: str, owner: Optional[str], *, box: Optional[str] = None):
        self.flag, self.owner = flag, owner
        super().__init__(port, box=box, detail=f"{flag} of the launch: the ranks' torch.distributed/NCCL rendezvous; "
                                                f"held by {owner or 'a process whose sockets this user cannot read'}")


def rendezvous_ports(launch: Any) -> list[tuple[str, int]]:
    """``[(flag, port)]`` the launch binds on this box: ``--nccl-port``, the port of
    ``--dist-init-addr HOST:PORT`` when this is node rank 0 (``--node-rank`` absent or 0), vLLM's
    ``--master-port`` / ``--data-parallel-rpc-port``; values that are no port are left out."""
    out = []
    for flag in RENDEZVOUS_FLAGS.get(getattr(launch, "engine", None) or "sglang", ()):
        value = launch.get(flag)
        if not isinstance(value, str):
            continue
        if flag == "--dist-init-addr":
            if str(launch.get("--node-rank") or "0") != "0":
                continue
            value = value.rsplit(":", 1)[-1] if ":" in value else ""
        if value.isdigit() and 0 < int(value) < 65536:
            out.append((flag, int(value)))
    return out


def _inode_of(box: Any, port: int, timeout: float) -> Optional[str]:
    return next((str(inode) for inode, p in box.listening_sockets(timeout=timeout).items() if p == port), None)


def port_owner(box: Any, port: int, *, timeout: float = 10) -> Optional[str]:
    """Who listens on TCP ``port`` on the box: ``"pid 123 TITLE (user NAME)"``, found by the
    socket's inode (``/proc/net/tcp*``) among ``/proc/*/fd`` (one ``find``); ``None`` when not
    readable (another user's fds)."""
    inode = _inode_of(box, port, timeout)
    if not inode or not inode.isdigit():
        return None
    res = box.run(["sh", "-c", f"find /proc/[0-9]*/fd -maxdepth 1 -lname 'socket:\\[{inode}\\]' 2>/dev/null"],
                  check=False, timeout=timeout)
    for line in res.stdout.splitlines():
        m = re.match(r"^/proc/(\d+)/fd/", line)
        if m:
            pid = int(m.group(1))
            proc = box.process(pid, timeout=timeout)
            uid = uid_of(box, pid, timeout=timeout)
            user = user_names(box, [uid], timeout=timeout).get(uid) if uid is not None else "?"
            return f"pid {pid} {title_of(proc.argv) if proc else '(exited)'} (user {user})"
    return None


def check_rendezvous_ports(box: Any, launch: Any, *, timeout: float = 10) -> list[tuple[str, int]]:
    """Raise :class:`RendezvousPortInUse` when a port of :func:`rendezvous_ports` listens on the
    box (``Box.listening_ports``), its owner named; else return the ports checked."""
    ports = rendezvous_ports(launch)
    if ports:
        listening = box.listening_ports(timeout=timeout)
        for flag, port in ports:
            if port in listening:
                raise RendezvousPortInUse(port, flag, port_owner(box, port, timeout=timeout), box=box.name)
    return ports


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, str) and value.isdigit() else default


def launch_devices(launch: Any, env: Optional[Mapping[str, str]], snapshot: GpuSnapshot) -> tuple[Optional[list[int]], str]:
    """The indices (as nvidia-smi numbers them) of the GPUs ``launch`` will use, with how they were
    found; ``None`` (all GPUs) when they cannot be told (a ``CUDA_VISIBLE_DEVICES`` entry no GPU
    matches, multi-node). Formula and sources: module docstring."""
    if getattr(launch, "engine", None) == "vllm":
        tp, pp = _int(launch.get("--tensor-parallel-size"), 1), _int(launch.get("--pipeline-parallel-size"), 1)
        dp = _int(launch.get("--data-parallel-size-local") or launch.get("--data-parallel-size"), 1)
        logical, how = list(range(tp * pp * dp)), f"vLLM tp {tp} x pp {pp} x dp {dp}"
    else:
        tp, pp = _int(launch.get("--tp-size"), 1), _int(launch.get("--pp-size"), 1)
        dp = 1 if launch.get("--enable-dp-attention") is True else _int(launch.get("--dp-size"), 1)
        base, step = _int(launch.get("--base-gpu-id"), 0), _int(launch.get("--gpu-id-step"), 1)
        nnodes = _int(launch.get("--nnodes"), 1)
        if nnodes > 1:
            return None, f"--nnodes {nnodes}: the GPUs of this node are not told apart; all checked"
        logical = sorted({base + d * tp * pp * step + p * tp + r * step
                          for d in range(dp) for p in range(pp) for r in range(tp)})
        how = f"SGLang tp {tp} x pp {pp} x dp {dp} from GPU {base} step {step}"
    visible = (env or {}).get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return logical, how
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    out = []
    for i in logical:
        if i >= len(entries):
            return None, f"CUDA_VISIBLE_DEVICES={visible} has no device {i}; all checked"
        e = entries[i]
        gpu = snapshot.gpu(int(e)) if e.isdigit() else next((g for g in snapshot.gpus if g.uuid.startswith(e)), None)
        if gpu is None:
            return None, f"CUDA_VISIBLE_DEVICES entry {e!r} matches no GPU; all checked"
        out.append(gpu.index)
    return sorted(set(out)), how + f" through CUDA_VISIBLE_DEVICES={visible}"


def held_on(named: BoxGpus, devices: Optional[Sequence[int]]) -> tuple[list[Holder], list[Holder], dict[int, int]]:
    """What holds memory on ``devices`` (``None``: every GPU): ``(blockers, orphans, hidden)`` —
    holders that are not orphans (another user's, a live server's, anything else), orphans
    (:attr:`Holder.orphan`; the SGLang processes nvidia-smi does not list count when memory is
    hidden), and ``{index: MiB}`` of ``memory.used`` no live listed process accounts for: unattributed
    memory of at least :data:`~workbench.session.gpus.CONTAINER_MIN_MIB`, plus what listed processes
    that have exited still hold (memory the driver has not released yet)."""
    wanted = {g.index for g in named.snapshot.gpus} if devices is None else set(devices)
    hidden = {i: m for i, m in named.unattributed().items() if i in wanted and m is not None and m >= CONTAINER_MIN_MIB}
    blockers, orphans = [], []
    for h in named.holders:
        if h.gone:  # listed, but exited: its memory is the driver's to release
            for i, m in h.mib.items():
                if i in wanted and m:
                    hidden[i] = hidden.get(i, 0) + m
            continue
        if not h.listed:
            if hidden and h.orphan:
                orphans.append(h)
            continue
        if not any(i in wanted and (m is None or m > 0) for i, m in h.mib.items()):
            continue
        (orphans if h.orphan else blockers).append(h)
    return blockers, orphans, hidden


def reclaim_orphans(box: Any, orphans: Sequence[Holder], *, grace: float = 10.0, kill_wait: float = 10.0,
                    timeout: float = 10) -> list[int]:
    """Stop the orphans: SIGTERM to each one's whole process group when every live process of that
    group is one of them (else to the orphans one by one), SIGKILL to what is left after ``grace``
    seconds, and wait up to ``kill_wait`` more. Only ever given orphans of the box's own user
    (:attr:`Holder.orphan`). Returns the pids still alive at the end (empty: all gone). Raises
    ``remote.errors.RemoteError`` when the box fails."""
    pids = {h.pid for h in orphans if h.orphan}
    protected = box.transport.protected_pgids()
    procs = [p for p in box.transport.processes(argv=False, timeout=timeout) if not p.exited]
    groups, singles = set(), set()
    for h in orphans:
        if h.pid not in pids:
            continue
        members = {p.pid for p in procs if p.pgid == h.pgid}
        if h.pgid and h.pgid > 1 and h.pgid not in protected and members <= pids:
            groups.add(h.pgid)
        else:
            singles.add(h.pid)

    def alive() -> set[int]:
        live = {p.pid for p in box.transport.processes(argv=False, timeout=timeout) if not p.exited}
        return {p for p in pids if p in live}

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_wait)):
        left = alive()
        if not left:
            return []
        for pgid in sorted(groups):
            box.transport.kill(pgid, sig, group=True, timeout=timeout)
        for pid in sorted(singles | (left if sig == signal.SIGKILL else set())):
            box.transport.kill(pid, sig, group=False, timeout=timeout)
        deadline, delay = time.monotonic() + wait, 0.02
        while alive() and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
    return sorted(alive())


@dataclass
class LaunchCheck:
    """What the check before a launch found: ``devices`` (GPU indices the launch uses, ``None``:
    all or no GPUs), ``how`` (how they were told), ``ports`` (rendezvous ports checked),
    ``baseline`` (``memory.used`` right before the launch, for the stop's wait), ``reclaimed``
    (the orphans cleaned up, as dicts), ``note`` (why the GPU check was skipped, if it was),
    ``beside`` (holders that are not this run's but leave the launch its share: :func:`blocking`)."""

    devices: Optional[list[int]] = None
    how: str = ""
    ports: list = field(default_factory=list)
    baseline: Optional[GpuBaseline] = None
    reclaimed: list = field(default_factory=list)
    note: str = ""
    beside: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"devices": self.devices, "how": self.how, "ports": [list(p) for p in self.ports],
                "baseline": self.baseline.to_dict() if self.baseline else None, "reclaimed": list(self.reclaimed),
                "note": self.note, "beside": list(self.beside)}


def _refusal(launch: Any, label: str, blockers: list[Holder], orphans: list[Holder], hidden: dict[int, int],
             devices: Optional[list[int]], reclaim: bool, extra: str = "") -> GpusHeld:
    findings = gpus_held([{**h.to_dict(), "mib": dict(h.mib), "describe": h.describe()} for h in blockers + orphans],
                         unattributed=hidden)
    where = "every GPU" if devices is None else ", ".join(f"GPU{i}" for i in devices)
    lines = [h.describe() for h in blockers + orphans] + [f.message for f in findings[len(blockers) + len(orphans):]]
    advice = []
    if orphans and not reclaim and not blockers:
        advice.append(f"orphans of an earlier SGLang launch of this user (pids {', '.join(str(h.pid) for h in orphans)}): "
                      "reclaim_gpus=True cleans them up")
    if any(not h.own for h in blockers):
        advice.append("another user's processes are never killed: ask them, or launch on other GPUs")
    message = (f"launch refused ({label}): GPU memory on {where} (the GPUs this launch uses) is held by processes "
               "that are not this run's:\n" + "\n".join(f"  {line}" for line in lines)
               + "".join(f"\n{a}" for a in advice) + (f"\n{extra}" if extra else ""))
    return GpusHeld(launch.to_display() if hasattr(launch, "to_display") else str(launch), label, findings,
                    holders=[h.to_dict() for h in blockers + orphans], orphans=[h.pid for h in orphans], message=message)


#: The share of each GPU a launch reserves when its command does not say: SGLang 0.5.23's
#: ``--mem-fraction-static`` on an 80 GB GPU at TP 8 (srt/server_args.py
#: ``_handle_gpu_memory_settings``, 0.88 being the sandbox's default too) and vLLM's
#: ``--gpu-memory-utilization`` default (0.9, vllm/config/cache.py).
DEFAULT_FRACTION = {"vllm": 0.9, None: 0.88}


def reserved_fraction(launch: Any) -> float:
    """The share of each GPU ``launch`` reserves at start-up (0-1): its ``--mem-fraction-static``
    (SGLang) or ``--gpu-memory-utilization`` (vLLM), else :data:`DEFAULT_FRACTION`."""
    vllm = getattr(launch, "engine", None) == "vllm"
    raw = launch.get("--gpu-memory-utilization" if vllm else "--mem-fraction-static")
    try:
        value = float(raw) if isinstance(raw, str) else None
    except ValueError:
        value = None
    if value is None or not 0 < value <= 1:
        return DEFAULT_FRACTION["vllm" if vllm else None]
    return value


def blocking(named: BoxGpus, devices: Optional[Sequence[int]], holders: Sequence[Holder], hidden: Mapping[int, int],
             fraction: float) -> list[int]:
    """The GPUs (indices, among ``devices``; ``None``: all) on which what ``holders`` and
    ``hidden`` hold leaves less than ``fraction`` of the GPU free: there the launch cannot reserve
    its share and would run out of memory. A holder whose memory is unknown (N/A) and a GPU whose
    total is unknown block. A small holder (a monitoring agent, another user's small context, an
    MPS server) beside which the launch fits does not."""
    out = []
    for g in named.snapshot.gpus:
        if devices is not None and g.index not in devices:
            continue
        mibs = [h.mib.get(g.index) for h in holders if g.index in h.mib] + ([hidden[g.index]] if g.index in hidden else [])
        if not mibs:
            continue
        if g.total_mib is None or any(m is None for m in mibs) or sum(mibs) > g.total_mib * (1 - fraction):
            out.append(g.index)
    return out


#: Seconds :func:`check_before_launch` waits for GPU memory that no live listed process accounts
#: for (a server stopped a moment before: the driver releases its memory after its processes are
#: gone) before it refuses the launch for it.
HIDDEN_SETTLE_S = 10.0


def check_before_launch(box: Any, launch: Any, *, env: Optional[Mapping[str, str]] = None, label: str = "launch",
                        reclaim: bool = False, timeout: float = GPU_FREE_TIMEOUT_S) -> LaunchCheck:
    """Everything checked right before ``launch`` is made on ``box`` (after the run's own and the
    original server were stopped): :func:`check_rendezvous_ports`, then the GPUs the launch uses
    (:func:`launch_devices`, ``env`` the launch's environment). Memory no live listed process accounts
    for is waited for (:data:`HIDDEN_SETTLE_S`) before it refuses. Orphans of the box user's earlier
    SGLang launch are cleaned up when ``reclaim`` (:func:`reclaim_orphans`, then their memory
    waited for, at most ``timeout`` seconds) — never when anything else holds those GPUs too.
    Returns a :class:`LaunchCheck` (with the baseline the stop will compare with). Raises
    :class:`RendezvousPortInUse`, :class:`~workbench.errors.GpusHeld` (the table of holders;
    nothing killed for another user) and ``remote.errors.RemoteError``. A box with no GPU query
    command: only the ports are checked (``note`` says why)."""
    check = LaunchCheck(ports=check_rendezvous_ports(box, launch))
    cmd = gpu_command(box)
    if not cmd.available:
        check.note = cmd.reason
        return check
    deadline = settle = None
    while True:
        snap = read_gpu_snapshot(box, command=cmd)
        if not snap.available:
            check.note = snap.note
            return check
        check.devices, check.how = launch_devices(launch, env, snap)
        if check.devices and gpus_too_few(check.devices, len(snap.gpus)):
            raise _too_few(launch, label, check.devices, check.how, len(snap.gpus), cmd.path)
        named = read_box_gpus(box, snapshot=snap, sglang_candidates=True)
        blockers, orphans, hidden = held_on(named, check.devices)
        fraction = reserved_fraction(launch)
        if not (reclaim and orphans) and not blocking(named, check.devices, blockers + orphans, hidden, fraction):
            if blockers or orphans or hidden:
                check.beside = [h.to_dict() for h in blockers + orphans] + [
                    {"gpu": i, "unattributed_mib": m} for i, m in sorted(hidden.items())]
            check.baseline = launch_baseline(snap)
            return check
        if hidden and deadline is None and not blocking(named, check.devices, blockers + orphans, {}, fraction):
            # Memory no live listed process accounts for is what leaves too little: a server stopped just before (its
            # memory is released a moment after its processes are gone), or a container's. Waited
            # for up to HIDDEN_SETTLE_S before it refuses the launch.
            settle = settle if settle is not None else time.monotonic() + min(HIDDEN_SETTLE_S, timeout)
            if time.monotonic() < settle:
                time.sleep(0.1)
                continue
        if blocking(named, check.devices, blockers, {}, fraction) or not reclaim or (not orphans and deadline is None):
            raise _refusal(launch, label, blockers, orphans, hidden, check.devices, reclaim)
        if deadline is None:
            left = reclaim_orphans(box, orphans)
            check.reclaimed = [h.to_dict() for h in orphans]
            if left:
                raise _refusal(launch, label, blockers, orphans, hidden, check.devices, reclaim,
                               f"reclaim_gpus: pids {left} survived SIGKILL")
            deadline, delay = time.monotonic() + timeout, 0.05
        elif time.monotonic() >= deadline:
            raise _refusal(launch, label, blockers, orphans, hidden, check.devices, reclaim,
                           f"reclaim_gpus cleaned up pids {[h['pid'] for h in check.reclaimed]}; their memory was "
                           f"not released within {timeout:g} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def check_before_stop(box: Any, launch: Any, *, env: Optional[Mapping[str, str]] = None, label: str = "launch",
                      serving_pid: Optional[int] = None, reclaim: bool = False, timeout: float = 10) -> None:
    """What refuses ``launch`` whatever the stop of the server that serves now (``serving_pid``, its
    process tree; ``None``: none) changes, checked BEFORE that stop, so a launch that cannot be
    made costs no outage and no reload: a rendezvous port held by a process outside that tree, a
    launch needing more GPUs than the box has, GPU memory of processes outside that tree that
    leaves the launch less than its share (:func:`blocking`), orphans that do (unless ``reclaim``).
    Memory no listed process accounts for (a container) is not judged here: the server serving now
    may be what holds it; :func:`check_before_launch` judges it after the stop. Raises
    :class:`RendezvousPortInUse`, :class:`~workbench.errors.GpusTooFew`,
    :class:`~workbench.errors.GpusHeld` and ``remote.errors.RemoteError``."""
    serving: set[int] = set()
    if serving_pid:
        serving = {p.pid for p in box.process_tree(serving_pid, timeout=timeout)} | {serving_pid}
    ports = rendezvous_ports(launch)
    if ports:
        listening = box.listening_ports(timeout=timeout)
        for flag, port in ports:
            if port in listening:
                owner = port_owner(box, port, timeout=timeout)
                m = re.match(r"pid (\d+)", owner or "")
                if m and int(m.group(1)) in serving:
                    continue  # the server serving now: its stop frees the port
                raise RendezvousPortInUse(port, flag, owner, box=box.name)
    cmd = gpu_command(box)
    if not cmd.available:
        return
    snap = read_gpu_snapshot(box, command=cmd)
    if not snap.available:
        return
    devices, _how = launch_devices(launch, env, snap)
    if devices and gpus_too_few(devices, len(snap.gpus)):
        raise _too_few(launch, label, devices, _how, len(snap.gpus), cmd.path)
    named = read_box_gpus(box, snapshot=snap, sglang_candidates=True)
    blockers, orphans, _hidden = held_on(named, devices)
    blockers = [h for h in blockers if h.pid not in serving and h.server not in serving]
    fraction = reserved_fraction(launch)
    refuse = (blocking(named, devices, blockers, {}, fraction)
              or (orphans and not reclaim and blocking(named, devices, blockers + orphans, {}, fraction)))
    if refuse:
        raise _refusal(launch, label, blockers, [] if reclaim else orphans, {}, devices, reclaim,
                       "(checked before the server serving now was stopped: nothing was stopped)")


def _too_few(launch: Any, label: str, devices: list[int], how: str, count: int, command: Optional[str]) -> GpusTooFew:
    """The refusal of a launch that needs GPU indices the box does not have (:class:`GpusTooFew`)."""
    findings = gpus_too_few(devices, count, how=how, command=command, engine=getattr(launch, "engine", None))
    text = findings[0].message
    return GpusTooFew(launch.to_display() if hasattr(launch, "to_display") else str(launch), label, findings,
                      needed=devices, available=count, message=f"launch refused ({label}): {text}")


def not_freed_refusal(launch: Any, label: str, exc: GpusNotFreed) -> GpusHeld:
    """The launch refused because the server stopped before it did not give its GPUs back in time
    (``exc``): the same table, as a :class:`~workbench.errors.GpusHeld` (so the diagnosis records
    a refused launch, not a crash)."""
    findings = gpus_held(exc.holders, not_back=exc.gpus)
    return GpusHeld(launch.to_display() if hasattr(launch, "to_display") else str(launch), label, findings,
                    holders=exc.holders, message=f"launch refused ({label}): {exc}")
