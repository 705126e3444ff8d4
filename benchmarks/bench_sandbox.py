"""Benchmark the sandbox box: no speculation vs EAGLE vs EAGLE3 vs the aux-zeroed control.

    .venv/bin/python benchmarks/bench_sandbox.py [--out reports/bench_sandbox.json] [--max-new-tokens 128]
        [--models workbench/sandbox/models] [--limit N]

Starts one real sandbox server per configuration (sequentially, loopback, a free port), sends
the built-in held-out prompts (`workbench/sandbox/prompts/bench.jsonl`) one at a time through
`POST /generate` (greedy), and reads SGLang's `meta_info` fields. Accept length is
sum(completion_tokens) / sum(spec_verify_ct); tok/s is sum(completion_tokens) /
sum(e2e_latency). Also checks that every speculative output equals the plain greedy output.
Prints a table (each row with its target and whether it is met) and writes JSON; also the
start-up time (launch to /health 200) of an EAGLE3 server at TP 1 and TP 8 (informational). Exit 1 when
a target is missed: EAGLE3 >= 2.0, EAGLE <= 1.2, EAGLE3 - control >= 0.5 (the aux features must
carry information the feature-less control draft cannot get), every output lossless.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
MIN_EAGLE3 = 2.0
MAX_EAGLE = 1.2
MIN_GAP = 0.5
SANDBOX = ROOT / "workbench" / "sandbox"
MODELS = SANDBOX / "models"
PROMPTS = SANDBOX / "prompts" / "bench.jsonl"

CONFIGS = [
    ("no-spec", None, None),
    ("EAGLE", "EAGLE", "draft"),
    ("EAGLE3", "EAGLE3", "draft"),
    ("EAGLE3 aux-zeroed control", "EAGLE3", "draft-aux-zeroed"),
]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_config(algo, draft, prompts, max_new_tokens: int, log_dir: Path, models: Path = MODELS) -> dict:
    """Serve one configuration, run all prompts, stop the server. Returns aggregated stats."""
    port = free_port()
    cmd = [sys.executable, "-m", "workbench.sandbox.launch_server", "--model-path", str(models / "target"),
           "--host", "127.0.0.1", "--port", str(port)]
    if algo:
        cmd += ["--speculative-algorithm", algo, "--speculative-draft-model-path", str(models / draft),
                "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    log_path = log_dir / f"bench_{algo or 'none'}_{draft or 'none'}.log"
    # each server a box of its own (sandbox GPUs): the next one never waits for this one's memory
    env = {**os.environ, "SANDBOX_GPUS_DIR": str(log_dir / f"sandbox-gpus-{port}")}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 180
        last: Exception | None = None
        with httpx.Client(timeout=300) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"server exited ({proc.returncode}); see {log_path}")
                try:
                    if client.get(base + "/health").status_code == 200:
                        break
                except httpx.TransportError as exc:
                    last = exc  # still loading: connection refused until uvicorn listens
                if time.time() > deadline:
                    raise RuntimeError(f"server not healthy in 180 s (last: {last!r}); see {log_path}")
                time.sleep(0.3)
            outs, completion, verify, latency = [], 0, 0, 0.0
            for p in prompts:
                r = client.post(base + "/generate", json={"text": p, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}})
                r.raise_for_status()
                body = r.json()
                m = body["meta_info"]
                outs.append(body["output_ids"])
                completion += m["completion_tokens"]
                latency += m["e2e_latency"]
                verify += m.get("spec_verify_ct", 0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "algorithm": algo, "draft": draft, "completion_tokens": completion, "seconds": latency,
        "tokens_per_s": completion / latency if latency else 0.0,
        "accept_length": completion / verify if verify else None, "spec_verify_ct": verify,
        "outputs": outs, "log": str(log_path),
    }


def startup_seconds(tp: int, log_dir: Path, models: Path = MODELS, load_seconds: float = 0.0) -> float:
    """Seconds from launching an EAGLE3 server at ``--tp-size tp`` (``tp`` rank processes on sandbox
    GPUs of its own) to its first /health 200. Raises ``RuntimeError`` when it exits or takes > 180 s."""
    port = free_port()
    cmd = [sys.executable, "-m", "workbench.sandbox.launch_server", "--model-path", str(models / "target"),
           "--host", "127.0.0.1", "--port", str(port), "--tp-size", str(tp), "--speculative-algorithm", "EAGLE3",
           "--speculative-draft-model-path", str(models / "draft"), "--speculative-num-steps", "3",
           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
           "--sandbox-load-seconds", str(load_seconds)]
    env = {**os.environ, "SANDBOX_GPUS_DIR": str(log_dir / f"sandbox-gpus-{port}")}
    log_path = log_dir / f"bench_startup_tp{tp}.log"
    tic = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited ({proc.returncode}); see {log_path}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200:
                    return time.time() - tic
            except httpx.TransportError:
                pass
            if time.time() - tic > 180:
                raise RuntimeError(f"server not healthy in 180 s; see {log_path}")
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def main(argv=None) -> int:
    """Run all configurations, print the table, write JSON; exit 1 if a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench_sandbox.json"))
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--models", default=str(MODELS), help="models directory (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    args = ap.parse_args(argv)
    prompts = [json.loads(line)["text"] for line in PROMPTS.read_text().splitlines() if line.strip()]
    if args.limit:
        prompts = prompts[: args.limit]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, algo, draft in CONFIGS:
        results[name] = run_config(algo, draft, prompts, args.max_new_tokens, out.parent, Path(args.models))
        print(f"  ran {name}: {results[name]['tokens_per_s']:.1f} tok/s", file=sys.stderr, flush=True)
    ref = results["no-spec"]["outputs"]
    base_tps = results["no-spec"]["tokens_per_s"]
    print(f"\nsandbox benchmark: {len(prompts)} prompts x {args.max_new_tokens} new tokens, greedy, "
          "chain drafting (3 steps, topk 1, 4 draft tokens)\n")
    e3 = results["EAGLE3"]["accept_length"]
    e1 = results["EAGLE"]["accept_length"]
    ctl = results["EAGLE3 aux-zeroed control"]["accept_length"]
    for r in results.values():
        r["lossless"] = r["outputs"] == ref
        r["speedup"] = r["tokens_per_s"] / base_tps if base_tps else None
    checks = {
        "eagle3_accept_length_ge_2": e3 >= MIN_EAGLE3,
        "eagle_accept_length_le_1_2": e1 <= MAX_EAGLE,
        "eagle3_minus_control_ge_0_5": e3 - ctl >= MIN_GAP,
        "all_lossless": all(r["lossless"] for r in results.values()),
    }
    row_target = {
        "no-spec": ("reference", None),
        "EAGLE": (f"<= {MAX_EAGLE}", checks["eagle_accept_length_le_1_2"]),
        "EAGLE3": (f">= {MIN_EAGLE3}", checks["eagle3_accept_length_ge_2"]),
        "EAGLE3 aux-zeroed control": (f"<= EAGLE3 - {MIN_GAP}", checks["eagle3_minus_control_ge_0_5"]),
    }
    print(f"{'configuration':<28}{'accept len':>11}{'tok/s':>9}{'speed-up':>10}{'lossless':>10}"
          f"  {'accept-length target':<22}{'met':<4}")
    for name, r in results.items():
        al = f"{r['accept_length']:.2f}" if r["accept_length"] is not None else "-"
        target, met = row_target[name]
        met_s = "-" if met is None else ("yes" if met else "NO")
        print(f"{name:<28}{al:>11}{r['tokens_per_s']:>9.1f}{r['speedup']:>9.2f}x{str(r['lossless']):>10}"
              f"  {target:<22}{met_s:<4}")
    print(f"\nEAGLE3 - control accept length: {e3 - ctl:+.2f} (target >= {MIN_GAP})")
    for k, v in checks.items():
        print(f"  {'met ' if v else 'MISS'} {k}")
    startup = {f"tp{tp}": startup_seconds(tp, out.parent, Path(args.models)) for tp in (1, 8)}
    print("\nstart-up to /health 200 (EAGLE3, --sandbox-load-seconds 0): "
          + ", ".join(f"TP {k[2:]} {v:.2f} s" for k, v in startup.items()))
    for r in results.values():
        r.pop("outputs")
    out.write_text(json.dumps({"prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                               "results": results, "eagle3_minus_control": e3 - ctl, "checks": checks,
                               "startup_s": startup}, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
