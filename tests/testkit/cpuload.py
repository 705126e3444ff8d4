"""A CPU load for tests that must not depend on how busy the machine is (issue 26): something that
makes every step of the test's own work take at least twice as long, started and stopped by the
test, undone whatever happens to the test.

Two kinds, :func:`slowing_load` picks:

- **a CPU quota** (:class:`CpuQuota`, :func:`quota_load`), where this process may create a cgroup
  with a writable ``cpu`` controller (cgroup v1 ``cpu.cfs_quota_us``, or cgroup v2 ``cpu.max``):
  a child cgroup of the process's own with a CPU bandwidth quota; the test process moves into it
  (``cgroup.procs``: all its threads) and every process it starts from then on (servers, their
  workers, CLIs) is born in it. The test's work, in process and in every child, shares that
  quota, so it runs slower without any CPU being burnt: the cores it does not get go to the other
  jobs on the machine (other pytest-xdist workers). Leaving moves the process back to the cgroup
  it came from, moves out whatever it left in there (a server that outlived the test), and
  removes the cgroup.
- **busy loops** (:class:`CpuLoad`, :func:`doubling_load`), the fallback where no writable
  ``cpu`` controller exists: pure-Python busy-loop processes that compete with everything for the
  cores (and burn them: the machine's other jobs slow down too). Each exits by itself after
  ``max_s`` seconds, so a crashed test never leaves one spinning.

Either way the slowdown is measured, not assumed: :func:`calibration_step` (a fixed amount of
single-threaded Python work) is timed without the load and then under it (inside the limited
process for the quota), and the load is tightened until the step takes at least ``factor`` times
as long: against the machine as it is in the same test, not an absolute figure. For the quota the
step without it is timed at the top scheduling priority (:func:`unloaded_calibration_step`): the
machine's own speed, not the share the other jobs of the moment leave it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import psutil

__all__ = ["CpuLoad", "calibration_step", "unloaded_calibration_step", "doubling_load", "STEP_ITERATIONS", "CgroupError", "CgroupUnavailable",
           "CpuController", "find_cpu_controller", "CpuQuota", "quota_load", "Slowdown", "slowing_load",
           "cgroup_of", "quota_us_of", "MIN_QUOTA_CPUS"]

#: The calibration step's iterations: ~0.3-0.5 s of Python on this machine (long enough that the
#: scheduler's bonus for a process that just woke up does not hide the load).
STEP_ITERATIONS = 4_000_000

_BUSY = ("import time\n"
         "end = time.monotonic() + {max_s}\n"
         "x = 0\n"
         "while time.monotonic() < end:\n"
         "    for _ in range(100000):\n"
         "        x += 1\n")


def calibration_step(iterations: int = STEP_ITERATIONS, repeats: int = 3) -> float:
    """Wall seconds of ``iterations`` additions in a Python loop (one thread), the median of
    ``repeats`` runs: the time one step of CPU-bound work takes on this machine right now."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x = 0
        for _ in range(iterations):
            x += 1
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def unloaded_calibration_step(iterations: int = STEP_ITERATIONS, repeats: int = 3) -> tuple[float, str]:
    """The seconds :func:`calibration_step` takes on this machine without the other jobs' share of
    the cores: run at the highest scheduling priority (nice -20 for this thread, put back after)
    where this process may raise it (root, ``CAP_SYS_NICE``), else at its own. Returns
    ``(seconds, how)``, ``how`` naming the priority it ran at.

    Why: measured at the normal priority while other pytest-xdist workers share the 2 cores, the
    step already runs at a fraction of a core, so the quota that "doubles" it was that fraction
    halved — down to :data:`MIN_QUOTA_CPUS` — and the loaded diagnoses ran 4-5x slower than on a
    quiet machine (520 s for the under-load test in one run, 234 s in another). At the top
    priority the scheduler gives the step the core as if nothing else ran (0.13 s here with three
    busy loops on the 2 cores, 0.13 s without them; 0.25 s at nice 0), so the quota doubles the
    step's time against the machine itself, whatever else runs at that moment."""
    old = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)  # this thread only (Linux)
    except OSError as exc:  # not permitted: measured at the process's own priority
        return calibration_step(iterations, repeats), f"at nice {old} (nice -20 refused: {exc.strerror})"
    try:
        return calibration_step(iterations, repeats), "at nice -20"
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, old)


# ---------------------------------------------------------------------------------------------
# Busy loops (the fallback)
# ---------------------------------------------------------------------------------------------


@dataclass
class CpuLoad:
    """``n`` busy-loop processes, each ending by itself after ``max_s`` seconds. Use as a context
    manager or call :meth:`start` / :meth:`stop`. ``pids``: the running loops."""

    n: int
    max_s: float = 900.0
    procs: list = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def add(self, k: int = 1) -> None:
        """Start ``k`` more busy loops."""
        for _ in range(k):
            self.procs.append(subprocess.Popen([sys.executable, "-c", _BUSY.format(max_s=float(self.max_s))],
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL, start_new_session=True))
        self.n = len(self.procs)

    def start(self) -> "CpuLoad":
        """Start the ``n`` loops (none more when already started)."""
        if not self.procs:
            n, self.n = self.n, 0
            self.add(n)
        return self

    def stop(self) -> None:
        """Kill every loop by its pid and reap it (within 10 s each)."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait(timeout=10)
        self.procs = []

    def __enter__(self) -> "CpuLoad":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def doubling_load(factor: float = 2.0, *, max_processes: int | None = None, max_s: float = 900.0,
                  settle_s: float = 0.5) -> tuple[CpuLoad, float, float]:
    """A started :class:`CpuLoad` under which :func:`calibration_step` takes at least ``factor``
    times as long as without it, and the two step times ``(load, unloaded_s, loaded_s)`` in
    seconds. Starts as many loops as cores, then adds one at a time up to ``max_processes``
    (default 8 × cores: other jobs' processes share the cores too); raises ``RuntimeError`` (the load stopped) when even that does not slow
    the step down by ``factor``."""
    cores = len(os.sched_getaffinity(0))
    limit = max_processes or 8 * cores
    unloaded = calibration_step()
    load = CpuLoad(cores, max_s=max_s).start()
    try:
        while True:
            time.sleep(settle_s)
            loaded = calibration_step()
            if loaded >= factor * unloaded:
                return load, unloaded, loaded
            if load.n >= limit:
                raise RuntimeError(f"{load.n} busy loops slow the calibration step only from {unloaded:.3f} s to "
                                   f"{loaded:.3f} s (< {factor:g}x)")
            load.add(1)
    except BaseException:
        load.stop()
        raise


# ---------------------------------------------------------------------------------------------
# A CPU quota on the test's own process tree (cgroups)
# ---------------------------------------------------------------------------------------------


class CgroupError(RuntimeError):
    """A cgroup operation of :class:`CpuQuota` failed (``.path``: the file or directory)."""

    def __init__(self, message: str, *, path: Path | str | None = None) -> None:
        self.path = None if path is None else str(path)
        super().__init__(message)


class CgroupUnavailable(CgroupError):
    """No writable ``cpu`` controller for this process (``.reason`` says why): no cgroup v1
    hierarchy with ``cpu`` nor cgroup v2 with ``cpu`` enabled, mounted read-only, or not ours to
    write (not root, a container's view)."""

    def __init__(self, reason: str, *, path: Path | str | None = None) -> None:
        self.reason = reason
        super().__init__(f"no writable cgroup cpu controller: {reason}", path=path)


#: the prefix of the cgroups :class:`CpuQuota` creates: ``<prefix><pid>-<random>``
CHILD_PREFIX = "ewb-cpu-quota-"


def _mounts(mountinfo: str) -> list[tuple[str, Path, str, list[str], list[str]]]:
    """``(root, mount point, fstype, mount options, super options)`` of each line of
    ``/proc/<pid>/mountinfo`` (``man 5 proc``: the optional fields end at ``-``)."""
    out = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3:
            continue
        out.append((_unescape(fields[3]), Path(_unescape(fields[4])), tail[0], fields[5].split(","),
                    tail[2].split(",")))
    return out


def _unescape(path: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space) undone."""
    return path.encode().decode("unicode_escape") if "\\" in path else path


def cgroup_of(pid: int | str = "self") -> dict[str, str]:
    """The cgroups of process (or thread: ``"self/task/<tid>"``) ``pid``, from
    ``/proc/<pid>/cgroup``: controller list (``"cpu"``, ``"cpu,cpuacct"``; ``""`` for cgroup v2)
    → path in that hierarchy."""
    out = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _hier, controllers, path = line.rstrip("\n").split(":", 2)
            out[controllers] = path
    return out


@dataclass(frozen=True)
class CpuController:
    """Where this process's CPU bandwidth can be limited: cgroup ``version`` 1 or 2, ``key`` the
    hierarchy's controller list in ``/proc/<pid>/cgroup`` (``""`` for v2), ``mount`` its mount
    point and ``root`` the hierarchy path mounted there, ``own_dir`` the directory of the cgroup
    the process was in when it was found."""

    version: int
    key: str
    mount: Path
    root: str
    own_dir: Path

    def dir_of(self, path: str) -> Path:
        """The directory of the cgroup ``path`` (as ``/proc/<pid>/cgroup`` spells it)."""
        rel = os.path.relpath(path, self.root) if self.root != "/" else path.lstrip("/")
        return self.mount if rel in ("", ".") else self.mount / rel

    def current_dir(self, pid: int | str = "self") -> Path:
        """The directory of the cgroup ``pid`` (or ``"self/task/<tid>"``) is in now."""
        return self.dir_of(cgroup_of(pid)[self.key])

    def quota_files(self, cpus: float, period_us: int) -> list[tuple[str, str]]:
        """The (file, value) writes that set a quota of ``cpus`` cores per ``period_us``."""
        quota_us = quota_us_of(cpus, period_us)
        if self.version == 1:
            return [("cpu.cfs_period_us", str(period_us)), ("cpu.cfs_quota_us", str(quota_us))]
        return [("cpu.max", f"{quota_us} {period_us}")]


def quota_us_of(cpus: float, period_us: int) -> int:
    """The quota in microseconds per period for ``cpus`` cores (the kernel's minimum is 1 ms)."""
    return max(1000, int(round(cpus * period_us)))


def find_cpu_controller() -> CpuController:
    """This process's writable ``cpu`` controller: cgroup v1 (a ``cgroup`` mount whose options
    name ``cpu``) first, else cgroup v2 (a ``cgroup2`` mount where ``cpu`` is enabled for the
    children of the process's cgroup: ``cgroup.subtree_control``; nothing is enabled here).
    Raises :class:`CgroupUnavailable` saying why there is none: no such mount, mounted read-only,
    the process's cgroup not under the mount (another namespace's view), or its directory not
    writable by this user."""
    try:
        mounts = _mounts(Path("/proc/self/mountinfo").read_text())
        groups = cgroup_of()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read /proc/self/mountinfo or /proc/self/cgroup: {exc}") from exc
    reasons = []
    for version in (1, 2):
        for root, point, fstype, options, superopts in mounts:
            if version == 1 and not (fstype == "cgroup" and "cpu" in superopts):
                continue
            if version == 2 and fstype != "cgroup2":
                continue
            key = next((k for k in groups if k and "cpu" in k.split(",")), None) if version == 1 else ""
            if key is None or key not in groups:
                reasons.append(f"{point}: this process has no cgroup in it")
                continue
            if "ro" in options:
                reasons.append(f"{point}: mounted read-only")
                continue
            path = groups[key]
            if root != "/" and not (path == root or path.startswith(root.rstrip("/") + "/")):
                reasons.append(f"{point}: this process's cgroup {path} is outside the mount's root {root}")
                continue
            controller = CpuController(version, key, point, root, Path("/"))
            own = controller.dir_of(path)
            controller = CpuController(version, key, point, root, own)
            if version == 2:
                try:
                    enabled = (own / "cgroup.subtree_control").read_text().split()
                except OSError as exc:
                    reasons.append(f"{own}: {exc}")
                    continue
                if "cpu" not in enabled:
                    reasons.append(f"{own}: the cpu controller is not enabled for its children "
                                   f"(cgroup.subtree_control: {' '.join(enabled) or 'empty'})")
                    continue
            if not os.access(own, os.W_OK) or not os.access(own / "cgroup.procs", os.W_OK):
                reasons.append(f"{own}: not writable by uid {os.geteuid()}")
                continue
            return controller
    if not reasons:
        reasons.append("no cgroup v1 hierarchy with the cpu controller and no cgroup v2 mount")
    raise CgroupUnavailable("; ".join(reasons))


def _write(path: Path, value: str) -> None:
    """Write ``value`` to the cgroup file ``path`` (one write, as the kernel wants it);
    :class:`CgroupError` naming the file on failure."""
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        raise CgroupError(f"writing {value!r} to {path}: {exc}", path=path) from exc


def _pids(cgroup: Path) -> list[int]:
    try:
        return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


class CpuQuota:
    """A child cgroup of this process's own (:class:`CpuController`) with a CPU bandwidth quota of
    ``cpus`` cores per ``period_us`` microseconds, which this process enters (:meth:`enter`: all its
    threads, and every process it starts afterwards) and leaves (:meth:`leave`). Use as a context
    manager. ``strays``: the processes still in the cgroup when it was left (moved out with it).
    ``unloaded_how``: how :func:`quota_load` timed the step without the quota (empty otherwise)."""

    def __init__(self, controller: CpuController, cpus: float, *, period_us: int = 20_000) -> None:
        self.controller = controller
        self.cpus = cpus
        self.period_us = period_us
        self.unloaded_how = ""
        self.path: Optional[Path] = None
        self.home: Optional[Path] = None
        self.strays: list[int] = []

    def describe(self) -> str:
        """One line: the quota and where it is."""
        return (f"cgroup v{self.controller.version} CPU quota of {self.cpus:.2f} core(s) per {self.period_us} us "
                f"({self.path})" + (f"; the step without it timed {self.unloaded_how}" if self.unloaded_how else ""))

    def _remove_stale(self) -> None:
        """Remove cgroups this helper made for processes that no longer exist (a test killed while
        inside one): only empty ones, only ours (:data:`CHILD_PREFIX`)."""
        for entry in self.controller.own_dir.glob(CHILD_PREFIX + "*"):
            try:
                pid = int(entry.name[len(CHILD_PREFIX):].split("-", 1)[0])
            except ValueError:
                continue
            if pid != os.getpid() and not psutil.pid_exists(pid) and not _pids(entry):
                try:
                    entry.rmdir()
                except OSError:
                    continue  # another process removed it, or it is not empty after all: left as it is

    def enter(self) -> "CpuQuota":
        """Create the cgroup, set the quota, move this process in (``cgroup.procs``: every thread).
        Raises :class:`CgroupError` (nothing left behind) when any step fails."""
        if self.path is not None:
            raise CgroupError(f"already inside {self.path}", path=self.path)
        self.home = self.controller.current_dir()
        self._remove_stale()
        path = self.controller.own_dir / f"{CHILD_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            path.mkdir()
        except OSError as exc:
            raise CgroupError(f"cannot create {path}: {exc}", path=path) from exc
        self.path = path
        try:
            self.set_cpus(self.cpus)
            _write(path / "cgroup.procs", str(os.getpid()))
            if self.controller.current_dir() != path:
                raise CgroupError(f"moved into {path}, but /proc/self/cgroup says {self.controller.current_dir()}",
                                  path=path)
        except BaseException:
            self.leave()
            raise
        return self

    def set_cpus(self, cpus: float) -> None:
        """Change the quota to ``cpus`` cores (inside or not)."""
        if self.path is None:
            raise CgroupError("no cgroup: enter() first")
        for name, value in self.controller.quota_files(cpus, self.period_us):
            _write(self.path / name, value)
        self.cpus = quota_us_of(cpus, self.period_us) / self.period_us

    def leave(self) -> None:
        """Move this process back to the cgroup it came from, then every process still inside (each
        recorded in ``strays``), and remove the cgroup. Does every step it can; raises
        :class:`CgroupError` afterwards when one failed (this process is out first)."""
        if self.path is None:
            return
        path, home, errors = self.path, self.home or self.controller.own_dir, []
        try:
            if self.controller.current_dir() == path:
                _write(home / "cgroup.procs", str(os.getpid()))
        except CgroupError as exc:
            errors.append(str(exc))
        deadline = time.monotonic() + 10
        while True:
            left = _pids(path)
            for pid in left:
                if pid not in self.strays:
                    self.strays.append(pid)
                try:
                    _write(home / "cgroup.procs", str(pid))
                except CgroupError as exc:
                    if psutil.pid_exists(pid):  # else it exited meanwhile: nothing to move
                        errors.append(str(exc))
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    errors.append(f"cannot remove {path}: {exc} (processes: {_pids(path)})")
                    break
                time.sleep(0.05)  # a process exiting, or one started meanwhile: move it too
        self.path = None
        if errors:
            raise CgroupError("; ".join(errors), path=path)

    def __enter__(self) -> "CpuQuota":
        return self.enter()

    def __exit__(self, *exc) -> None:
        self.leave()


#: The lowest quota :func:`quota_load` sets, in cores: twice what a server's stall clock counts as
#: progress (``remote.readiness.MIN_CPU_PROGRESS_S`` core-seconds per second), so that a slowed
#: server is never taken for a stalled one.
MIN_QUOTA_CPUS = 0.1


def quota_load(factor: float = 2.0, *, controller: CpuController | None = None, period_us: int = 20_000,
               min_cpus: float = MIN_QUOTA_CPUS) -> tuple[CpuQuota, float, float]:
    """An entered :class:`CpuQuota` under which :func:`calibration_step`, run in this (now limited)
    process, takes at least ``factor`` times as long as it did just before without it (measured at the
    top priority: :func:`unloaded_calibration_step`), and the two step times ``(quota, unloaded_s,
    loaded_s)``. Starts at ``1 / (1.25 × factor)`` of a core and
    lowers the quota in proportion to the shortfall until the step is slow enough; raises
    ``RuntimeError`` (left again) when even ``min_cpus`` (:data:`MIN_QUOTA_CPUS`) is not.
    ``controller``: default :func:`find_cpu_controller` (:class:`CgroupUnavailable` when there is
    none)."""
    controller = controller or find_cpu_controller()
    unloaded, how = unloaded_calibration_step()
    cpus = 1.0 / (1.25 * factor)
    quota = CpuQuota(controller, cpus, period_us=period_us)
    quota.unloaded_how = how
    quota.enter()
    try:
        while True:
            loaded = calibration_step()
            if loaded >= factor * unloaded:
                return quota, unloaded, loaded
            if quota.cpus <= min_cpus:
                raise RuntimeError(f"a quota of {quota.cpus:.3f} core(s) slows the calibration step only from "
                                   f"{unloaded:.3f} s to {loaded:.3f} s (< {factor:g}x)")
            quota.set_cpus(max(min_cpus, quota.cpus * (loaded / unloaded) / factor * 0.9))
    except BaseException:
        quota.leave()
        raise


@dataclass
class Slowdown:
    """A started load from :func:`slowing_load`: ``kind`` (``"cpu quota"`` or ``"busy loops"``),
    the calibration step's seconds without and under it, ``note`` (what it is, and for the
    fallback why the quota could not be used). :meth:`stop` undoes it."""

    kind: str
    unloaded_s: float
    loaded_s: float
    note: str
    stopper: Callable[[], None]
    load: object = None

    def stop(self) -> None:
        """Undo the load: leave the cgroup (back where the process was), or kill the busy loops."""
        self.stopper()

    def describe(self) -> str:
        return f"{self.kind}: {self.note}"


def slowing_load(factor: float = 2.0) -> Slowdown:
    """A load under which the calibration step takes at least ``factor`` times as long: a CPU quota
    on this process and its future children (:func:`quota_load`) where a writable ``cpu``
    controller exists, else busy loops (:func:`doubling_load`), with ``note`` saying why."""
    try:
        quota, unloaded, loaded = quota_load(factor)
    except CgroupUnavailable as exc:
        load, unloaded, loaded = doubling_load(factor)
        return Slowdown("busy loops", unloaded, loaded,
                        f"{load.n} busy-loop processes, because there is {exc} (they burn CPU the other jobs "
                        f"on this machine then lack)", load.stop, load)
    return Slowdown("cpu quota", unloaded, loaded, quota.describe(), quota.leave, quota)
