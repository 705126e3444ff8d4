"""GPU memory and the processes holding it, read with ``nvidia-smi`` on the box.

Queries (NVIDIA's ``nvidia-smi --help-query-gpu`` / ``--help-query-compute-apps``):
``--query-gpu=index,uuid,name,memory.used,memory.total --format=csv,noheader,nounits`` (memory in
MiB) and ``--query-compute-apps=pid,used_memory,gpu_uuid,process_name --format=csv,noheader,nounits``
(``used_memory`` in MiB; ``[N/A]`` when the driver cannot say, e.g. in a container)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any, Optional

from workbench.errors import WorkbenchError

__all__ = ["Gpu", "GpuHolder", "GpuReport", "GpuQueryError", "parse_gpus", "parse_compute_apps", "read_gpus",
           "GPU_QUERY", "APPS_QUERY"]

GPU_QUERY = ["nvidia-smi", "--query-gpu=index,uuid,name,memory.used,memory.total", "--format=csv,noheader,nounits"]
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory,gpu_uuid,process_name",
              "--format=csv,noheader,nounits"]


class GpuQueryError(WorkbenchError, ValueError):
    """``nvidia-smi`` printed something that is not the CSV asked for; the message quotes the line."""


@dataclass(frozen=True)
class Gpu:
    """One GPU: ``index``, ``uuid``, ``name``, ``used_mib`` / ``total_mib`` (MiB; ``None``: N/A)."""

    index: int
    uuid: str
    name: str
    used_mib: Optional[int]
    total_mib: Optional[int]


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
    ``nvidia-smi`` (``note`` says so)."""

    available: bool
    gpus: list[Gpu] = field(default_factory=list)
    holders: list[GpuHolder] = field(default_factory=list)
    note: str = ""

    @property
    def leftovers(self) -> list[GpuHolder]:
        return [h for h in self.holders if h.leftover]


def _mib(value: str) -> Optional[int]:
    v = value.strip()
    if v.startswith("[") or v in ("", "N/A"):
        return None
    return int(float(v))


def _rows(text: str, n: int, what: str) -> list[list[str]]:
    rows = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != n:
            raise GpuQueryError(f"nvidia-smi {what}: expected {n} comma-separated fields, got {row!r}")
        rows.append([c.strip() for c in row])
    return rows


def parse_gpus(text: str) -> list[Gpu]:
    """The GPUs in the output of :data:`GPU_QUERY`. Raises :class:`GpuQueryError` on a malformed line."""
    out = []
    for idx, uuid, name, used, total in _rows(text, 5, "--query-gpu"):
        try:
            out.append(Gpu(int(idx), uuid, name, _mib(used), _mib(total)))
        except ValueError as exc:
            raise GpuQueryError(f"nvidia-smi --query-gpu: bad number in {[idx, uuid, name, used, total]!r}: {exc}")
    return out


def parse_compute_apps(text: str) -> list[GpuHolder]:
    """The processes in the output of :data:`APPS_QUERY` (no pgid, not marked). Raises
    :class:`GpuQueryError` on a malformed line."""
    out = []
    for pid, used, uuid, name in _rows(text, 4, "--query-compute-apps"):
        try:
            out.append(GpuHolder(int(pid), _mib(used), uuid, name))
        except ValueError as exc:
            raise GpuQueryError(f"nvidia-smi --query-compute-apps: bad number in {[pid, used, uuid, name]!r}: {exc}")
    return out


def read_gpus(box: Any, *, server_pgid: Optional[int] = None, timeout: float = 10) -> GpuReport:
    """Run the two queries on ``box`` (each bounded by ``timeout`` seconds) and mark as leftover
    every holder whose process group is not ``server_pgid`` (the current server's; ``None``: every
    holder is a leftover). No ``nvidia-smi`` on the box: ``GpuReport(available=False)``. Raises
    ``remote.errors.RemoteError`` (the box failed, nvidia-smi exited non-zero) and :class:`GpuQueryError`."""
    found = box.run(["sh", "-c", "command -v nvidia-smi"], check=False, timeout=timeout)
    if found.exit_code != 0 or not found.stdout.strip():
        return GpuReport(False, note="no nvidia-smi on this box")
    gpus = parse_gpus(box.run(GPU_QUERY, timeout=timeout).stdout)
    holders = []
    for h in parse_compute_apps(box.run(APPS_QUERY, timeout=timeout).stdout):
        info = box.process(h.pid, timeout=timeout)
        pgid = info.pgid if info is not None else None
        holders.append(GpuHolder(h.pid, h.used_mib, h.gpu_uuid, h.name, pgid,
                                 leftover=server_pgid is None or pgid != server_pgid))
    return GpuReport(True, gpus, holders)
