"""A stop is the whole process tree and then the GPUs back at their baseline.

:func:`stop_and_release` runs ``Box.stop_server`` (the whole tree: group, descendants, SIGTERM then
SIGKILL) and then waits until each GPU the server used is back at its *baseline* ``memory.used``,
within a time-out, else raises :class:`~workbench.errors.GpusNotFreed` naming what still holds it.
Stopping is not freeing: the driver releases a process's memory only after the process is fully
gone, and ranks orphaned by a killed launcher keep theirs (sglang #23627).

The baseline of GPU *g* for a server *S* (MiB), by what is known (:attr:`GpuRelease.basis`):

- ``"others"`` — nvidia-smi lists PIDs: the GPUs *S* used are those where a process of *S*'s tree
  held memory just before the stop. Each is back when no process of *S* is listed on it any more
  and its ``memory.used`` is at most its baseline: what the processes listed on it now hold (others
  may start or stop meanwhile: that is not *S*'s), plus what no listed process accounted for just
  before the stop (driver reservations, memory of processes already gone but not yet released),
  and never below ``memory.used`` before the run launched *S* when that is known (the larger of the
  two, so memory another process took meanwhile never counts against the stop).
- ``"before-launch"`` — no PIDs listed (a container) and the run launched *S*: each GPU whose
  ``memory.used`` was above its level before that launch must get back to that level.
- ``"settled"`` — no PIDs listed and *S* was found running (nothing known from before it): the
  stop is done when some GPU's ``memory.used`` went down after the stop and then no GPU changed for
  :data:`SETTLE_S` seconds. (Limit: memory *S* never frees cannot be told from another's.)

Each comparison allows :data:`TOLERANCE_MIB`. A box with no GPU query command costs nothing here
beyond :func:`workbench.session.gpus.gpu_command` (cached per box).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from remote.errors import RemoteError
from workbench.errors import GpusNotFreed
from workbench.session.gpu_holders import read_box_gpus
from workbench.session.gpus import GpuSnapshot, gpu_command, read_gpu_snapshot

__all__ = ["TOLERANCE_MIB", "SETTLE_S", "GPU_FREE_TIMEOUT_S", "GpuBaseline", "GpuRelease", "launch_baseline",
           "stop_and_release", "wait_released", "GpusNotFreed"]

#: MiB by which ``memory.used`` may differ from a baseline and still count as back at it.
TOLERANCE_MIB = 64
#: Seconds ``memory.used`` must stay unchanged for the ``settled`` basis.
SETTLE_S = 2.0
#: Default seconds to wait for a stopped server's GPUs (the driver frees a process's memory within
#: seconds of its exit; the sandbox after its ``release_delay_s``).
GPU_FREE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class GpuBaseline:
    """``memory.used`` per GPU (``{uuid: MiB}``) taken right before a launch, at ``at`` (epoch s)."""

    used: dict
    at: float

    def to_dict(self) -> dict:
        return {"used": dict(self.used), "at": self.at}

    @classmethod
    def from_dict(cls, data: Optional[dict]) -> Optional["GpuBaseline"]:
        return None if not data else cls(dict(data.get("used") or {}), float(data.get("at") or 0.0))


def launch_baseline(snapshot: GpuSnapshot) -> Optional[GpuBaseline]:
    """The baseline a launch records from ``snapshot`` (taken right before it), ``None`` without GPUs."""
    if not snapshot.available or not snapshot.gpus:
        return None
    return GpuBaseline({u: m for u, m in snapshot.used().items() if m is not None}, snapshot.at)


@dataclass
class GpuRelease:
    """How a stopped server's GPUs got back: ``basis`` (``others``, ``before-launch``, ``settled``,
    or ``skipped`` with ``note`` saying why), ``gpus`` (one dict per GPU waited for: ``index``,
    ``uuid``, ``before_stop_mib``, ``baseline_mib``, ``used_mib`` at the end), ``waited_s``."""

    basis: str
    gpus: list = field(default_factory=list)
    waited_s: float = 0.0
    note: str = ""
    error: Optional[GpusNotFreed] = None

    def raise_error(self) -> None:
        """Raise :attr:`error` (the GPUs did not get back in time), if any."""
        if self.error is not None:
            raise self.error

    def to_dict(self) -> dict:
        return {"basis": self.basis, "gpus": list(self.gpus), "waited_s": round(self.waited_s, 3), "note": self.note,
                "error": None if self.error is None else str(self.error)}

    def describe(self) -> str:
        if self.basis == "skipped":
            return f"GPU release not checked: {self.note}"
        if not self.gpus:
            return f"the server held no GPU memory ({self.basis})"
        gpus = ", ".join(f"GPU{g['index']} {g['used_mib']} MiB (baseline {g['baseline_mib']})" for g in self.gpus)
        return f"GPUs back at baseline ({self.basis}) after {self.waited_s:.1f} s: {gpus}"


def _plan(before: GpuSnapshot, server_pids: set[int], baseline: Optional[GpuBaseline]) -> tuple[str, dict]:
    """The basis and ``{uuid: (before-stop MiB, unattributed-before MiB or None)}`` of the GPUs to wait for."""
    if before.apps or not before.container:
        plan = {}
        for g in before.gpus:
            if before.listed_mib(g.uuid, pids=server_pids) > 0 or any(a.pid in server_pids for a in before.apps_on(g.uuid)):
                plan[g.uuid] = (g.used_mib, before.unattributed_mib(g.uuid) or 0)
        return "others", plan
    if baseline is not None:
        return "before-launch", {g.uuid: (g.used_mib, None) for g in before.gpus
                                 if g.used_mib is not None and g.used_mib > baseline.used.get(g.uuid, 0) + TOLERANCE_MIB}
    return "settled", {g.uuid: (g.used_mib, None) for g in before.gpus}


def _target(basis: str, uuid: str, entry: tuple, now: GpuSnapshot, server_pids: set[int],
            baseline: Optional[GpuBaseline]) -> Optional[int]:
    """The baseline MiB of GPU ``uuid`` now (``None``: not decidable this way: the settled basis)."""
    if basis == "others":
        target = now.listed_mib(uuid, exclude=server_pids) + (entry[1] or 0)
        if baseline is not None and uuid in baseline.used:
            target = max(target, baseline.used[uuid])
        return target
    if basis == "before-launch":
        return baseline.used.get(uuid, 0) if baseline is not None else None
    return None


def wait_released(box: Any, before: GpuSnapshot, server_pids: set[int], *, baseline: Optional[GpuBaseline] = None,
                  timeout: float = GPU_FREE_TIMEOUT_S, server: str = "server") -> GpuRelease:
    """Wait until the GPUs ``before`` (read right before the stop) shows the processes
    ``server_pids`` using are back at their baseline (module docstring), polling nvidia-smi with
    a back-off from 0.05 to 0.5 s, at most ``timeout`` seconds. Raises
    :class:`~workbench.errors.GpusNotFreed` naming the GPUs still above it and every process
    holding memory on them (pid, title, user, MiB per GPU); ``remote.errors.RemoteError`` when the
    box fails."""
    basis, plan = _plan(before, server_pids, baseline)
    start = time.monotonic()
    delay = 0.05
    last_change, dropped = time.monotonic(), False
    prev = before.used()
    while True:
        now = read_gpu_snapshot(box, apps=basis == "others", timeout=10, command=before.command)
        if not now.available:
            return GpuRelease("skipped", waited_s=time.monotonic() - start, note=now.note)
        left, rows = [], []
        for uuid, entry in plan.items():
            g = now.gpu(uuid)
            if g is None or g.used_mib is None:
                continue
            target = _target(basis, uuid, entry, now, server_pids, baseline)
            still = any(a.pid in server_pids for a in now.apps_on(uuid))
            row = {"index": g.index, "uuid": uuid, "before_stop_mib": entry[0], "used_mib": g.used_mib,
                   "baseline_mib": target}
            rows.append(row)
            if still or (target is not None and g.used_mib > target + TOLERANCE_MIB):
                left.append(row)
        if basis == "settled":
            used = now.used()
            if any(abs((used.get(u) or 0) - (prev.get(u) or 0)) > TOLERANCE_MIB for u in used):
                last_change = time.monotonic()
            dropped = dropped or any((used.get(u) or 0) < (entry[0] or 0) - TOLERANCE_MIB for u, entry in plan.items())
            busy = any((entry[0] or 0) > TOLERANCE_MIB for entry in plan.values())
            prev = used
            if busy and not (dropped and time.monotonic() - last_change >= SETTLE_S):
                left = rows
        waited = time.monotonic() - start
        if not left:
            return GpuRelease(basis, rows if basis != "settled" else [r for r in rows if (r["before_stop_mib"] or 0) > TOLERANCE_MIB],
                              waited_s=waited)
        if waited >= timeout:
            raise _not_freed(box, now, left, basis, waited, server)
        time.sleep(min(delay, max(0.0, timeout - waited)))
        delay = min(delay * 2, 0.5)


def _not_freed(box: Any, now: GpuSnapshot, left: list, basis: str, waited: float, server: str) -> GpusNotFreed:
    """The error for GPUs still above their baseline: the GPUs and every holder on them, named."""
    indices = {r["index"] for r in left}
    try:
        named = read_box_gpus(box, snapshot=now if now.apps else read_gpu_snapshot(box, command=now.command),
                              sglang_candidates=True)
        holders = [h for h in named.holders if not h.listed or indices & set(h.mib)]
    except RemoteError as exc:
        holders, named = [], None
        basis += f"; the holders could not be read: {exc}"
    gpus = "; ".join(f"GPU{r['index']} {r['used_mib']} MiB, baseline "
                     f"{r['baseline_mib'] if r['baseline_mib'] is not None else '(settling)'} MiB" for r in left)
    who = "; ".join(h.describe() for h in holders) or (
        "no process listed (nvidia-smi lists no PIDs here)" if named is not None and not named.snapshot.apps
        else "no process listed: memory not yet released by the driver")
    return GpusNotFreed(f"{server} stopped, but its GPUs are not back at their baseline ({basis}) after "
                        f"{waited:.1f} s: {gpus}. Held by: {who}",
                        gpus=[dict(r, basis=basis) for r in left], holders=[h.to_dict() for h in holders],
                        waited_s=waited, server=server)


def stop_and_release(box: Any, target: Any, *, grace: float = 10.0, baseline: Optional[GpuBaseline] = None,
                     timeout: float = GPU_FREE_TIMEOUT_S, server: str = "server"):
    """``Box.stop_server(target, grace=grace)`` (the whole tree), then :func:`wait_released` for
    the GPUs it used. Returns ``(ServerStopped, GpuRelease)``; GPUs not back in ``timeout`` seconds
    are NOT raised but returned in ``GpuRelease.error`` (:class:`~workbench.errors.GpusNotFreed`,
    raised by ``release.raise_error()``), so the caller records the stop first. ``baseline``:
    ``memory.used`` before the run launched it (:func:`launch_baseline`), ``None`` for a server
    found running. With no GPU query command on the box the release is ``skipped`` (said why) at the
    cost of the cached :func:`~workbench.session.gpus.gpu_command`. Raises what ``stop_server``
    raises and ``remote.errors.RemoteError`` (the box failed). A GPU query that cannot run is a
    ``skipped`` release, never an error over a stop that worked."""
    cmd = gpu_command(box)
    if not cmd.available:
        return box.stop_server(target, grace=grace), GpuRelease("skipped", note=cmd.reason)
    try:
        before: Optional[GpuSnapshot] = read_gpu_snapshot(box, command=cmd)
    except RemoteError as exc:
        before, note = None, f"the GPUs could not be read before the stop: {exc}"
    stopped = box.stop_server(target, grace=grace)
    if before is None:
        return stopped, GpuRelease("skipped", note=note)
    if not before.available:
        return stopped, GpuRelease("skipped", note=before.note)
    pids = set(stopped.stopped_pids) | {stopped.pid}
    try:
        return stopped, wait_released(box, before, pids, baseline=baseline, timeout=timeout, server=server)
    except GpusNotFreed as exc:
        return stopped, GpuRelease("held", gpus=exc.gpus, waited_s=exc.waited_s, note=str(exc), error=exc)
