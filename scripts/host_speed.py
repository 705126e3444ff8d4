"""How fast the machine ran while ``make test`` did: a fixed reference step timed before and after
the suite, and the share of the run the CPUs were idle or stolen by the hypervisor.

    python scripts/host_speed.py start reports/host_speed.json   # before the suite
    python scripts/host_speed.py end reports/host_speed.json     # after it: prints one line

The suite is CPU-bound, so its wall time follows the machine's speed. A virtual machine's speed is
not fixed: on 2026-12-07 the same 2-core machine ran a loop of 30 million additions in 2.9 s of CPU
between two ``make test`` runs and in 4.5-5.3 s right after the second one (the hypervisor's other
tenants), and a sandbox server's start went from 1.75 to 2.6 s of CPU with it. The line ``make
test`` prints lets a reader tell a slow host from a slower suite.

The reference step: ``REFERENCE_ADDITIONS`` integer additions in a pure-Python loop, the best of
``REFERENCE_REPEATS`` timings in CPU seconds of this process (``time.process_time``), so waiting
for a core is not counted, and a slower core is. The idle and steal shares come from
``psutil.cpu_times()`` (on Linux the ``cpu`` line of ``/proc/stat``; iowait counts as idle).
Raises ``SystemExit`` with a message when the start file cannot be read or written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import psutil

REFERENCE_ADDITIONS = 3_000_000
REFERENCE_REPEATS = 3


def reference_step_s(additions: int = REFERENCE_ADDITIONS, repeats: int = REFERENCE_REPEATS) -> float:
    """CPU seconds (``time.process_time``) of the fastest of ``repeats`` runs of a pure-Python loop
    of ``additions`` integer additions. Lower is a faster core."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        total = 0
        for i in range(additions):
            total += i
        best = min(best, time.process_time() - started)
    return best


def cpu_seconds(times) -> dict[str, float]:
    """``{"total", "idle", "steal"}`` in seconds from a ``psutil.cpu_times()`` reading (all CPUs):
    guest time is already inside user and nice (proc(5)), so it is not added again; iowait counts
    as idle; a platform without a steal (or iowait) field gives 0 for it."""
    fields = times._asdict()
    total = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
    return {"total": total, "idle": fields["idle"] + fields.get("iowait", 0.0), "steal": fields.get("steal", 0.0)}


def cpu_ticks() -> dict[str, float]:
    """The machine's CPU time so far (:func:`cpu_seconds` of ``psutil.cpu_times()``)."""
    return cpu_seconds(psutil.cpu_times())


def shares(before: dict[str, float], after: dict[str, float]) -> dict[str, float] | None:
    """Percent of the CPU time between two :func:`cpu_ticks` readings that was idle and stolen;
    ``None`` when no time passed."""
    total = after["total"] - before["total"]
    if total <= 0:
        return None
    return {"idle_pct": 100.0 * (after["idle"] - before["idle"]) / total,
            "steal_pct": 100.0 * (after["steal"] - before["steal"]) / total}


def summary_line(start: dict, end_step_s: float, end_ticks: dict[str, float] | None) -> str:
    """The one line ``make test`` prints, from the start record (``{"reference_s", "ticks"}``),
    the reference step after the run (s) and the ticks after it."""
    line = (f"make test: host speed: reference step {start['reference_s']:.2f} s of CPU before, "
            f"{end_step_s:.2f} s after ({REFERENCE_ADDITIONS:,} Python additions; lower is faster)")
    got = shares(start["ticks"], end_ticks) if start.get("ticks") and end_ticks else None
    if got is not None:
        line += f"; during the run the CPUs were {got['idle_pct']:.1f} % idle, {got['steal_pct']:.1f} % stolen"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("when", choices=("start", "end"))
    parser.add_argument("record", type=Path, help="the JSON file start writes and end reads")
    args = parser.parse_args(argv)
    if args.when == "start":
        record = {"reference_s": reference_step_s(), "ticks": cpu_ticks()}
        try:
            args.record.parent.mkdir(parents=True, exist_ok=True)
            args.record.write_text(json.dumps(record))
        except OSError as exc:
            raise SystemExit(f"host_speed: cannot write {args.record}: {exc}") from None
        return 0
    try:
        start = json.loads(args.record.read_text())
        float(start["reference_s"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"host_speed: cannot read the start record {args.record}: {exc!r}") from None
    print(summary_line(start, reference_step_s(), cpu_ticks()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
