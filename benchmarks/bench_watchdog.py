"""Benchmark the run watchdog (issue 26): the time from a run's heartbeat loss to a restored box.

    .venv/bin/python benchmarks/bench_watchdog.py [--out reports/bench_watchdog.json] [--after S] [--repeat N]

A driver (``tests/testkit/watchdog_driver.py``, through the real library) takes a box's run lock,
leaves its watchdog there (``watchdog_after_s`` = ``--after``, default 2 s), stops the "original"
server it found (the tests' tiny HTTP server, started with its own cwd, log and environment),
inserts a probe and runs a server of its own on the port; then it is SIGKILLed (over SSH its
connections are cut first: every session process of the sshd SIGKILLed). Nothing else is run.
Measured, from the kill: the time until the box is restored (the journal empty, the run lock free,
the watchdog's report written, the original answering ``/health`` again), on:

- ``local``: the local box, the driver on its kernel (its process is a sign of life);
- ``local, heartbeat only``: the driver records another boot id (a laptop driving the box: only
  its heartbeat, every ``after/5`` s, tells it lives);
- ``ssh``: the same box through a loopback OpenSSH server (``tests/sshd.py``), connections cut.

The report's own figures beside it: the silence the watchdog saw, and its restore's duration (the
relaunch and the wait for ``/health_generate``/``/health`` included). Goal: restored within
``--after`` + 2 s of the kill (median), on each box: the detection costs at most a poll (a tenth
of the threshold, at most 1 s), the restore of this small box well under a second.

Prints a table, writes JSON (``--out``), exits 1 when a goal is missed (2 when it cannot run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402

from remote import connect  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.watchdogs import stop_watchdogs_under  # noqa: E402

TINY = ROOT / "tests" / "remote" / "tiny_launch_server.py"
DRIVER = ROOT / "tests" / "testkit" / "watchdog_driver.py"
MAX_OVERHEAD_S = 2.0


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _sshd_sessions(listener: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(text.rsplit(") ", 1)[1].split()[1])
        if ppid == listener and text[text.index("(") + 1:text.rindex(")")].startswith("sshd"):
            out.append(int(entry))
    return out


def one_run(host: str, work: Path, after: float, *, fake_boot: bool = False, env_extra=None,
            sshd_pid: int | None = None) -> dict:
    """One driver killed at "fix-running"; returns the seconds until the box was back and the report."""
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    port = free_port()
    box = connect("local", state_dir=state, python=sys.executable)
    (work / "cwd").mkdir(exist_ok=True)
    probe = work / "model.py"
    probe.write_bytes(b"def forward(x):\n    y = x * 2\n    return y\n")
    original = box.launch_server([sys.executable, str(TINY), "--port", str(port)], port=port,
                                 log_path=work / "original.log", cwd=work / "cwd", env={"EWB_BENCH": "1"})
    box.wait_healthy(original, timeout=20)
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state), PYTHONPATH=str(ROOT), **(env_extra or {}))
    argv = [sys.executable, str(DRIVER), "low", host, "--port", str(port), "--after", str(after), "--probe-file",
            str(probe), "--stage", "fix-running", "--fix-argv",
            json.dumps([sys.executable, str(TINY), "--port", str(port), "--child"])]
    proc = subprocess.Popen(argv + (["--fake-boot"] if fake_boot else []), env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "ready":
                break
        else:
            raise RuntimeError(f"the driver failed: {proc.stderr.read()[-2000:]}")
        if sshd_pid is not None:
            for pid in _sshd_sessions(sshd_pid):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        killed = time.monotonic()
        proc.wait(timeout=10)
        journal, lock = state / "diagnosis" / "journal.json", state / "diagnosis" / "run.lock"
        report_path = state / "diagnosis" / "watchdog-report.json"
        deadline = killed + after + 60
        while not (report_path.exists() and not lock.exists() and journal.read_text().strip() == "{}"
                   and _healthy(port)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"not restored within {after + 60:g} s: {journal.read_text()}")
            time.sleep(0.01)
        back = time.monotonic() - killed
        report = json.loads(report_path.read_text())
        if not report.get("clean"):
            raise RuntimeError(f"the watchdog left problems: {report['problems']}")
        return {"restored_s": round(back, 3), "silent_for_s": report["silent_for_s"],
                "restore_s": report["restore_s"], "actions": len(report["actions"])}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for s in box.find_servers(str(TINY)):
            if s.port == port:
                box.stop_server(s, grace=2)
        stop_watchdogs_under(str(state))
        box.close()


def bench(label: str, repeat: int, after: float, work: Path, **kw) -> dict:
    """``repeat`` runs of :func:`one_run` on ``host`` (in ``kw``) and their medians (seconds)."""
    host = kw.pop("host")
    runs = [one_run(host, work, after, **kw) for _ in range(repeat)]
    restored = [r["restored_s"] for r in runs]
    return {"label": label, "runs": runs, "restored_median_s": round(statistics.median(restored), 3),
            "restored_max_s": round(max(restored), 3),
            "overhead_median_s": round(statistics.median(restored) - after, 3),
            "restore_median_s": round(statistics.median(r["restore_s"] for r in runs), 3)}


def main(argv=None) -> int:
    """Run the measurements, print the table, write JSON; exit 1 on a missed goal."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench_watchdog.json"))
    ap.add_argument("--after", type=float, default=2.0, help="watchdog_after_s of the runs (seconds)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    from sshd import LoopbackSSHD, keygen, make_client, sshd_missing_reason

    work = Path(tempfile.mkdtemp(prefix="ewb-bench-watchdog-"))
    results = []
    server = None
    try:
        results.append(bench("local", args.repeat, args.after, work, host="local"))
        results.append(bench("local, heartbeat only", args.repeat, args.after, work, host="local", fake_boot=True))
        reason = sshd_missing_reason()
        if reason:
            print(f"bench_watchdog: no SSH measurement: {reason}", file=sys.stderr)
        else:
            (work / "client").mkdir()
            key = keygen(work / "client" / "id_ed25519")
            server = LoopbackSSHD(work / "server", authorized=[key], extra_config="SetEnv SHLVL=1\n").start()
            client = make_client(work / "client", server, key)
            results.append(bench("ssh (connections cut)", args.repeat, args.after, work, host=client.alias,
                                 env_extra={"EAGLE_WORKBENCH_SSH_CONFIG": str(client.config)},
                                 sshd_pid=server.proc.pid))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    checks = {r["label"]: r["overhead_median_s"] <= MAX_OVERHEAD_S for r in results}
    print(f"\nwatchdog benchmark: heartbeat loss (driver SIGKILLed) -> box restored, watchdog_after_s "
          f"{args.after:g} s, {args.repeat} runs each\n")
    print(f"{'box':<28}{'restored (median)':>19}{'max':>9}{'beyond threshold':>18}{'restore itself':>16}")
    for r in results:
        print(f"{r['label']:<28}{r['restored_median_s']:>17.2f} s{r['restored_max_s']:>7.2f} s"
              f"{r['overhead_median_s']:>16.2f} s{r['restore_median_s']:>14.2f} s")
    print()
    for label, ok in checks.items():
        print(f"  {'met ' if ok else 'MISS'} {label}: restored within watchdog_after_s + {MAX_OVERHEAD_S:g} s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"after_s": args.after, "repeat": args.repeat, "results": results, "checks": checks,
                               "goals": {"max_overhead_s": MAX_OVERHEAD_S}}, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
