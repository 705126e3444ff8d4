"""Loads and downtime of the reference case on a box like the real one (issue 28): the sandbox box
with ``--speculative-algorithm EAGLE`` instead of ``EAGLE3`` already serving at ``--tp-size 8`` with
``--sandbox-load-seconds 30`` (each start-up spread over 30 s with SGLang's own lines), diagnosed
in full (``DiagnosisRun.run_all``); then the server stopped and the time until its sandbox GPUs are
back at their baseline.

Targets: the verdict ``fixed`` in at most 2 loads (fix, restore) and ``downtime_s`` at most
2 × S + 30 s (two start-ups of S seconds plus 30 s for stopping, measuring and the waits between).
Each launch is printed with its reason, its seconds to ready and its phases; the downtime is also
measured from outside (``/health`` polled once a second) as a check of the verdict's own.

    python benchmarks/bench_loads.py [--tp 8] [--load-seconds 30] [--out reports/bench_loads.json]

Needs the sandbox's TP ranks and sandbox GPUs (``--tp-size``, ``--sandbox-load-seconds``) and the
workbench's GPU reading (``workbench.session.gpus``); without the latter the stop-to-GPU-free time
is reported as not measured, with why.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote import connect  # noqa: E402
from workbench.diagnosis import DiagnosisRun  # noqa: E402
from workbench.sandbox_box import sandbox_launch_command  # noqa: E402

#: seconds added to 2 × the load time for the stops, the measurements and the waits between
DOWNTIME_SLACK_S = 30.0
MAX_LOADS = 2


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HealthPoll:
    """``/health`` of ``port`` once a second in a thread: the seconds it did not answer 200 between
    the first failure and the end (a check of the verdict's ``downtime_s`` from outside; every poll
    is an access-log line, so not more often: the probe reading waits for a quiet log)."""

    def __init__(self, port: int, every_s: float = 1.0):
        self.port, self.every_s, self.samples = port, every_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while not self._stop.is_set():
                t = time.time()
                try:
                    ok = client.get(f"http://127.0.0.1:{self.port}/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.samples.append((t, ok))
                self._stop.wait(self.every_s)

    def __enter__(self) -> "HealthPoll":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def down_s(self) -> float:
        return round(sum(t2 - t1 for (t1, ok), (t2, _) in zip(self.samples, self.samples[1:]) if not ok), 1)


def sandbox_gpus(state_dir: Path) -> str:
    """The sandbox box's GPUs made ready before its first launch (``<state dir>/sandbox-gpus``:
    the device list and its ``nvidia-smi``, which the sandbox server would install only at its
    start), so the baseline is read before anything holds them. Returns how, in words."""
    try:
        from workbench.sandbox.gpus import SandboxGpus, install_nvidia_smi
    except ImportError:
        return "no sandbox GPUs in this checkout"
    path = state_dir / "sandbox-gpus"
    if not (path / "devices.json").is_file():
        SandboxGpus.create(path)
    install_nvidia_smi(path)
    return f"sandbox GPUs at {path}"


def gpus_used(box) -> dict | None:
    """MiB used per GPU now (the box's GPU command: ``workbench.session.gpus``), ``None`` when that
    module is not there or the box has no GPU command."""
    try:
        from workbench.session.gpus import read_gpu_snapshot
    except ImportError:
        return None
    snap = read_gpu_snapshot(box, apps=False)
    return snap.used() if snap.available else None


def stop_to_gpu_free(box, port: int, baseline: dict | None, *, timeout: float = 300.0) -> tuple[float | None, str]:
    """Stop the server serving ``port`` and time until every GPU's memory is back at ``baseline``
    (seconds, and how it was measured)."""
    servers = [s for s in box.find_servers() if s.port == port]
    if not servers:
        return None, "no server on the port to stop"
    t0 = time.monotonic()
    for s in servers:
        box.stop_server(s)
    stopped = time.monotonic() - t0
    if baseline is None:
        return None, f"stopped in {stopped:.1f} s; GPU memory not read (workbench.session.gpus or the GPU command missing)"
    while time.monotonic() - t0 < timeout:
        if gpus_used(box) == baseline:
            return round(time.monotonic() - t0, 1), f"stopped in {stopped:.1f} s, then memory.used back at baseline"
        time.sleep(0.25)
    return None, f"GPU memory not back at its baseline after {timeout:g} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--load-seconds", type=float, default=30.0)
    parser.add_argument("--out", default=str(ROOT / "reports" / "bench_loads.json"))
    args = parser.parse_args()
    target_down = 2 * args.load_seconds + DOWNTIME_SLACK_S
    with tempfile.TemporaryDirectory(prefix="bench-loads-") as tmp:
        os.environ["EAGLE_WORKBENCH_STATE_DIR"] = str(Path(tmp) / "state")  # its own sandbox GPUs too
        gpus_how = sandbox_gpus(Path(tmp) / "state")
        box = connect("local")
        port = _port()
        baseline = gpus_used(box)
        argv = shlex.split(sandbox_launch_command(port=port)) + [
            "--tp-size", str(args.tp), "--sandbox-load-seconds", f"{args.load_seconds:g}"]
        handle = box.launch_server(argv, port=port, log_path=Path(tmp) / "original.log")
        t0 = time.monotonic()
        box.wait_healthy(handle, timeout=4 * args.load_seconds + 300)
        first_load_s = time.monotonic() - t0
        try:
            with HealthPoll(port) as poll:
                run = DiagnosisRun.start(port=port, report_dir=Path(tmp) / "reports", num_prompts=4, max_new_tokens=64,
                                         server_start_timeout=max(120.0, 2 * args.load_seconds))
                run.progress = False
                t1 = time.monotonic()
                verdict = run.run_all()
                wall = time.monotonic() - t1
            free_s, how = stop_to_gpu_free(box, port, baseline)
        finally:
            for s in box.find_servers():
                if s.port == port:
                    box.stop_server(s)
    ok_loads = verdict["outcome"] == "fixed" and verdict["loads"] <= MAX_LOADS
    ok_down = verdict["downtime_s"] <= target_down
    print(f"reference case (EAGLE instead of EAGLE3) at TP {args.tp}, --sandbox-load-seconds {args.load_seconds:g}: "
          f"first load {first_load_s:.1f} s; run {wall:.1f} s; outcome {verdict['outcome']}")
    print(f"loads {verdict['loads']}  [{'met' if ok_loads else 'MISSED'} target <= {MAX_LOADS}]")
    print(f"downtime {verdict['downtime_s']:.1f} s (polled from outside: {poll.down_s():.1f} s)  "
          f"[{'met' if ok_down else 'MISSED'} target <= 2 x {args.load_seconds:g} + {DOWNTIME_SLACK_S:g} = "
          f"{target_down:g} s]")
    for launch in verdict["launches"]:
        phases = " → ".join(p["name"] for p in launch["phases"] or [])
        print(f"  {launch['label']:8} ready after {launch['ready_after_s']} s: {launch['reason']}  [{phases}]")
    print("stop to GPU free: " + (f"{free_s:.1f} s ({how}; {gpus_how})" if free_s is not None else
                                  f"not measured ({how}; {gpus_how})"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "tp": args.tp, "load_seconds": args.load_seconds, "outcome": verdict["outcome"], "loads": verdict["loads"],
        "max_loads": MAX_LOADS, "downtime_s": verdict["downtime_s"], "downtime_polled_s": poll.down_s(),
        "target_downtime_s": target_down, "first_load_s": round(first_load_s, 1), "run_s": round(wall, 1),
        "launches": [{k: launch[k] for k in ("label", "reason", "ready_after_s", "phases")}
                     for launch in verdict["launches"]],
        "stop_to_gpu_free_s": free_s, "stop_to_gpu_free_how": how, "load_average": os.getloadavg()}, indent=2))
    print(f"load average {os.getloadavg()[0]:.2f}; wrote {out}")
    return 0 if ok_loads and ok_down else 1


if __name__ == "__main__":
    sys.exit(main())
