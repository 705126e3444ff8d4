"""A CPU load for tests that must not depend on how busy the machine is (issue 26): busy-loop
processes that compete with everything else for the cores, started and stopped by the test,
bounded in time whatever happens to the test.

:class:`CpuLoad` starts ``n`` processes, each a pure-Python busy loop (``python -c``) that exits
by itself after ``max_s`` seconds (so a crashed test never leaves one spinning), in its own
session; :meth:`CpuLoad.stop` kills each by its pid. :func:`calibration_step` is the reference
step: a fixed amount of single-threaded Python work, timed in wall seconds.
:func:`doubling_load` measures that step without the load, then starts busy loops (as many as
cores, then more) until the step takes at least ``factor`` times as long, and returns the load
with both timings: the slowdown is measured against the machine as it is in the same test, not
against an absolute figure (other jobs share the cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

__all__ = ["CpuLoad", "calibration_step", "doubling_load", "STEP_ITERATIONS"]

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
