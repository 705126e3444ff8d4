"""GPU memory and the processes holding it, for the JupyterLab console: the console's view over
:mod:`workbench.session.gpus` (which command, the queries, the parser) and
:mod:`workbench.session.gpu_holders` (each holder named), plus the console's "reclaim my orphans"
action (:func:`reclaim_my_orphans`, through :func:`workbench.session.gpu_guard.reclaim_orphans`).

Queries (NVIDIA's ``nvidia-smi --help-query-gpu`` / ``--help-query-compute-apps``):
:data:`GPU_QUERY` (memory in MiB) and :data:`APPS_QUERY` (``used_memory`` in MiB; ``[N/A]`` when the
driver cannot say, e.g. in a container)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from remote.errors import RemoteError
from workbench.errors import GpuQueryError
from workbench.session.gpu_guard import reclaim_orphans
from workbench.session.gpu_holders import BoxGpus, read_box_gpus
from workbench.session.gpu_release import GPU_FREE_TIMEOUT_S, wait_released
from workbench.session.gpus import (APPS_QUERY, GPU_QUERY, Gpu, parse_app_lines, parse_gpu_lines,
                                    read_gpu_snapshot)

__all__ = ["Gpu", "GpuHolder", "GpuReport", "GpuQueryError", "parse_gpus", "parse_compute_apps", "read_gpus",
           "reclaim_my_orphans", "GPU_QUERY", "APPS_QUERY"]


@dataclass(frozen=True)
class GpuHolder:
    """A process holding GPU memory: ``pid``, ``used_mib`` (MiB, ``None``: N/A), ``gpu_uuid``,
    ``name`` (the process name nvidia-smi gives), ``pgid`` (its process group on the box, ``None``:
    gone or not readable), ``leftover`` (not in the current server's process group)."""

    pid: int
    used_mib: Optional[int]
    gpu_uuid: str
    name: str
    pgid: Optional[int] = None
    leftover: bool = False


@dataclass
class GpuReport:
    """What ``nvidia-smi`` says: ``gpus`` and ``holders``; ``available`` False when the box has no
    GPU query command (``note`` says why); ``named``: the holders named with title, user, server
    tree and orphan flag (:class:`workbench.session.gpu_holders.BoxGpus`)."""

    available: bool
    gpus: list[Gpu] = field(default_factory=list)
    holders: list[GpuHolder] = field(default_factory=list)
    note: str = ""
    named: Optional[BoxGpus] = None

    @property
    def leftovers(self) -> list[GpuHolder]:
        return [h for h in self.holders if h.leftover]


def parse_gpus(text: str) -> list[Gpu]:
    """The GPUs in the output of :data:`GPU_QUERY`. Raises :class:`GpuQueryError` naming the first
    malformed line (:func:`workbench.session.gpus.parse_gpu_lines` keeps the good ones instead)."""
    gpus, problems = parse_gpu_lines(text)
    if problems:
        raise problems[0]
    return gpus


def parse_compute_apps(text: str) -> list[GpuHolder]:
    """The processes in the output of :data:`APPS_QUERY` (no pgid, not marked). Raises
    :class:`GpuQueryError` naming the first malformed line."""
    apps, problems = parse_app_lines(text)
    if problems:
        raise problems[0]
    return [GpuHolder(a.pid, a.used_mib, a.gpu_uuid, a.process_name) for a in apps]


def read_gpus(box: Any, *, server_pgid: Optional[int] = None, timeout: float = 10) -> GpuReport:
    """Run the two queries on ``box`` (each bounded by ``timeout`` seconds; the command by
    :func:`workbench.session.gpus.gpu_command`) and mark as leftover every holder whose process
    group is not ``server_pgid`` (the current server's; ``None``: every holder is a leftover). No
    command: ``GpuReport(available=False)``. Malformed lines are left out and named in ``note``.
    Raises ``remote.errors.RemoteError`` (the box failed)."""
    snap = read_gpu_snapshot(box, timeout=timeout)
    if not snap.available:
        return GpuReport(False, note=snap.note)
    named = read_box_gpus(box, snapshot=snap, sglang_candidates=True, timeout=timeout)
    pgid = {h.pid: h.pgid for h in named.holders}
    holders = [GpuHolder(a.pid, a.used_mib, a.gpu_uuid, a.process_name, pgid.get(a.pid),
                         leftover=server_pgid is None or pgid.get(a.pid) != server_pgid) for a in snap.apps]
    return GpuReport(True, list(snap.gpus), holders, note=snap.note, named=named)


def reclaim_my_orphans(box: Any, *, timeout: float = GPU_FREE_TIMEOUT_S) -> dict:
    """The console's "Reclaim my orphaned GPU memory": stop every orphan of an earlier SGLang launch
    of the box's user (:attr:`workbench.session.gpu_holders.Holder.orphan`: never another user's
    process, never a live server's), whole group, SIGTERM then SIGKILL, and wait up to ``timeout``
    seconds for the GPUs they held to be back at their baseline. Returns ``{"reclaimed": [holder
    dicts], "survivors": [pids], "release": GpuRelease dict or None, "note": str}``. Raises
    ``remote.errors.RemoteError`` and :class:`workbench.errors.GpusNotFreed`."""
    before = read_gpu_snapshot(box)
    if not before.available:
        return {"reclaimed": [], "survivors": [], "release": None, "note": before.note}
    named = read_box_gpus(box, snapshot=before, sglang_candidates=True)
    orphans = named.orphans
    if not orphans:
        return {"reclaimed": [], "survivors": [], "release": None, "note": "no orphaned SGLang process of "
                f"{named.user or 'this user'} holds GPU memory"}
    survivors = reclaim_orphans(box, orphans)
    try:
        release = wait_released(box, before, {h.pid for h in orphans}, timeout=timeout, server="the orphans")
    except RemoteError as exc:
        return {"reclaimed": [h.to_dict() for h in orphans], "survivors": survivors, "release": None,
                "note": f"the GPUs could not be read after the clean-up: {exc}"}
    return {"reclaimed": [h.to_dict() for h in orphans], "survivors": survivors, "release": release.to_dict(),
            "note": release.describe()}
