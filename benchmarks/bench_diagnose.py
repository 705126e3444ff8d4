"""The diagnosis over the fault matrix, timed: per case the restarts, the wall time and accept length
before and after (``make bench``), and the main job (``make demo``'s diagnosis) against its goal.

Each case is a faulty copy of the sandbox deployment (``tests/testkit/faults.py``) diagnosed in
full (``DiagnosisRun``: symptom, static hypotheses, probe, every derived fix in one relaunch,
verdict), on this machine; the refused column counts the launches the launch guard refused (the
doctor's findings said they would not start: no launch spent). Goals: the main job (the wrong flag, the runbook's defaults) under 45 s
after set-up on a quiet machine; every fixable case's fix within 10 % of the healthy draft.

    python benchmarks/bench_diagnose.py [--out reports/bench_diagnose.json] [--cases NAME,...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from testkit.faults import build_deployment  # noqa: E402
from testkit.matrix import CASES  # noqa: E402
from workbench.diagnosis import DiagnosisRun  # noqa: E402

MAIN_JOB_GOAL_S = 45.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_case(work: Path, faults, params, *, expected=None, num_prompts=4, max_new_tokens=64) -> dict:
    dep = build_deployment(work, *faults)
    port = _port()
    t0 = time.monotonic()
    run = DiagnosisRun.start(launch_command=dep.launch_command(port), port=port, report_dir=work / "reports",
                             num_prompts=num_prompts, max_new_tokens=max_new_tokens, expected_accept_length=expected,
                             **params)
    run.progress = False
    verdict = run.run_all()
    return {"wall_s": round(time.monotonic() - t0, 1), "outcome": verdict["outcome"], "restarts": verdict["restarts"],
            "root_causes": [c["hypothesis"] for c in verdict["root_causes"]], "fix_kinds": verdict["fix"]["kinds"],
            "before": verdict["acceptance"]["before"]["accept_length"],
            "after": verdict["acceptance"]["after"]["accept_length"],
            "refused": verdict["launch_guard"]["refused"],
            "refused_as_found": any(s["label"] == "as-found" and s["refused"] for s in verdict["start_failures"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "reports" / "bench_diagnose.json"))
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    wanted = set(args.cases.split(",")) if args.cases else None
    with tempfile.TemporaryDirectory(prefix="bench-diagnose-") as tmp:
        os.environ["EAGLE_WORKBENCH_STATE_DIR"] = str(Path(tmp) / "state")
        # the main job: the runbook's defaults (8 prompts x 96 tokens) on the wrong flag
        port = _port()
        t0 = time.monotonic()
        run = DiagnosisRun.start(port=port, report_dir=Path(tmp) / "main")
        run.progress = False
        try:
            run.measure_symptom(); run.check_hypotheses(); run.probe(); run.apply_fixes()  # noqa: E702
        finally:
            main_verdict = run.finish()
        main_s = time.monotonic() - t0
        rows = {}
        healthy = run_case(Path(tmp) / "healthy", (), {})
        rows["healthy"] = healthy
        for case in CASES:
            if wanted and case.name not in wanted:
                continue
            rows[case.name] = run_case(Path(tmp) / case.name, case.faults, case.params, expected=healthy["before"])
            rows[case.name]["fixable"] = case.fixable
            rows[case.name]["expected_outcome"] = case.outcome
            rows[case.name]["expected_refused_as_found"] = case.refused_as_found
    print(f"main job (wrong flag, runbook defaults): {main_s:.1f} s, {main_verdict['outcome']}, "
          f"{main_verdict['acceptance']['before']['accept_length']:.3f} → "
          f"{main_verdict['acceptance']['after']['accept_length']:.3f}, restarts {main_verdict['restarts']}"
          f"  [{'met' if main_s <= MAIN_JOB_GOAL_S else 'MISSED'} goal <= {MAIN_JOB_GOAL_S:g} s]")
    print(f"{'case':36} {'outcome':22} {'restarts':>8} {'refused':>7} {'wall s':>7} {'before':>7} {'after':>7}  causes")
    missed = main_s > MAIN_JOB_GOAL_S
    for name, r in rows.items():
        fmt = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
        ok = ""
        if r.get("expected_outcome") not in (None, r["outcome"]):
            ok = f"  MISSED (outcome, expected {r['expected_outcome']})"
            missed = True
        if r.get("expected_refused_as_found") not in (None, r["refused_as_found"]):
            ok += f"  MISSED (as-found launch {'not ' if r['expected_refused_as_found'] else ''}refused by the guard)"
            missed = True
        if r.get("fixable"):
            good = r["after"] is not None and r["after"] >= 0.9 * healthy["before"]
            ok += "" if good else "  MISSED (after < 90 % of healthy)"
            missed |= not good
        print(f"{name:36} {r['outcome']:22} {r['restarts']:>8} {r['refused']:>7} {r['wall_s']:>7} {fmt(r['before']):>7} "
              f"{fmt(r['after']):>7}  {', '.join(r['root_causes']) or '—'}{ok}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"main_job_s": round(main_s, 1), "main_goal_s": MAIN_JOB_GOAL_S, "cases": rows,
                               "load_average": os.getloadavg()}, indent=2))
    print(f"load average {os.getloadavg()[0]:.2f}; wrote {out}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
