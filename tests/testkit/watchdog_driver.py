"""A run driver for the watchdog tests: it changes a box the way a diagnosis does, through the real
library, says how far it got, and waits to be killed.

    python watchdog_driver.py MODE HOST --port P --after S --probe-file F --stage STAGE
                              [--poll S] [--fix-argv JSON] [--fake-boot] [--start-timeout S]

``MODE`` ``session``: :func:`workbench.session.open_box` (the run lock, the heartbeat, the watchdog,
the inventory of the server on ``--port``, the journal) and a :class:`BoxSession` (its ``stop`` and
``launch``, the launch guard included): the server must be an SGLang-compatible one (the sandbox).
``low``: the same steps one level down (:func:`runlock.acquire`, :func:`watchdog.start_watchdog`,
:class:`Journal`, ``box.stop_server`` / ``box.launch_server``), for any server (the tests' tiny one);
``--fake-boot`` then records another boot id in the lock (a driver on another machine than the box:
only its heartbeat tells it lives).

Stages, in order, each printed as ``stage NAME`` once reached: ``locked`` (lock taken, watchdog
watching), ``original-stopped`` (journalled, then stopped), ``probe-inserted`` (a probe in
``--probe-file``), ``fix-running`` (a server of the run's own serving ``--port``: ``--fix-argv``, a
JSON list, in low mode; the session mode launches the sandbox with EAGLE3). At ``--stage`` it prints
``ready`` and waits: a line ``release`` on stdin restores the box (``restore_box``) and prints
``released``; else it waits to be killed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from remote import connect  # noqa: E402
from remote import probes as remote_probes  # noqa: E402
from workbench.session import runlock, watchdog  # noqa: E402
from workbench.session.box_session import BoxSession, launch_env_delta, open_box  # noqa: E402
from workbench.session.journal import Journal, restore_box  # noqa: E402

STAGES = ("locked", "original-stopped", "probe-inserted", "fix-running")


def say(text: str) -> None:
    print(text, flush=True)


def add_probe(box, path: str) -> None:
    remote_probes.add_probe(box, path, before=r"return y", exprs=["y"], tag="wd-probe", timeout=60)


def run_low(args) -> tuple:
    box = connect(args.host)
    run_id = uuid.uuid4().hex[:12]
    me = runlock.self_identity()
    if args.fake_boot:
        holder = {"run_id": run_id, **me, "boot_id": f"laptop-{uuid.uuid4().hex[:8]}", "host": "laptop",
                  "runbook": "watchdog_driver", "started_at": 0.0, "heartbeat": True}
        out = runlock._run_script(box, "acquire", json.dumps({"holder": holder, "dead": None}), timeout=30)
        assert out["status"] == "acquired", out
        lock = runlock.RunLock(box, args.host, holder, heartbeat=True,
                               heartbeat_s=watchdog.heartbeat_interval(args.after))
    else:
        lock = runlock.acquire(box, args.host, run_id, heartbeat_s=watchdog.heartbeat_interval(args.after))
    lock.watchdog = watchdog.start_watchdog(box, run_id, after_s=args.after, poll_s=args.poll,
                                            server_start_timeout=args.start_timeout)
    journal = Journal(box)
    journal.begin(run_id)
    journal.run_lock = lock
    (orig,) = [s for s in box.find_servers() if s.port == args.port and args.port in box.listening_ports_of(s.pid)]
    env_text = box.read_bytes(f"/proc/{orig.pid}/environ").decode("utf-8", "replace")
    env = dict(item.split("=", 1) for item in env_text.split("\0") if "=" in item)
    journal.record_original(argv=list(orig.argv), cwd=orig.cwd, env=launch_env_delta(box, env), port=args.port,
                            log_path=orig.log_path, pid=orig.pid)
    say(f"run {run_id} watchdog {lock.watchdog.pid}")
    yield "locked"
    journal.mark_original_stopped(True)
    box.stop_server(orig.pid, grace=10)
    yield "original-stopped"
    add_probe(box, args.probe_file)
    yield "probe-inserted"
    fix = json.loads(args.fix_argv)
    journal.begin_launch(port=args.port, argv=fix, label="fix")
    handle = box.launch_server(fix, port=args.port)
    journal.end_launch(pid=handle.pid, pgid=handle.pgid)
    box.wait_healthy(handle, timeout=args.start_timeout)
    say(f"fix pid {handle.pid}")
    yield "fix-running"


def run_session(args):
    box, inventory, journal = open_box(args.host, launch_command=None, port=args.port,
                                       server_start_timeout=args.start_timeout, watchdog_after_s=args.after)
    session = BoxSession(box, inventory, journal, server_start_timeout=args.start_timeout)
    say(f"run {journal.data['run_id']} watchdog {journal.run_lock.watchdog.pid}")
    yield "locked"
    session.stop()
    yield "original-stopped"
    add_probe(box, args.probe_file)
    yield "probe-inserted"
    launch = inventory.launch.with_flag("--speculative-algorithm", "EAGLE3")
    handle = session.launch(launch, "fix")
    say(f"fix pid {handle.pid}")
    yield "fix-running"


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("low", "session"))
    p.add_argument("host")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--after", type=float, required=True)
    p.add_argument("--poll", type=float, default=0.1)
    p.add_argument("--probe-file", required=True)
    p.add_argument("--stage", choices=STAGES, required=True)
    p.add_argument("--fix-argv", default="[]")
    p.add_argument("--fake-boot", action="store_true")
    p.add_argument("--start-timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    steps = run_low(args) if args.mode == "low" else run_session(args)
    for stage in steps:
        say(f"stage {stage}")
        if stage == args.stage:
            break
    say("ready")
    line = sys.stdin.readline()
    if line.strip() == "release":
        box = connect(args.host)
        report = restore_box(box, server_start_timeout=args.start_timeout)
        say("released " + json.dumps(report.to_dict()))
        os._exit(0)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
