"""Benchmark the preflight doctor and the EAGLE-3 code-path map over SSH on a Kimi-K2.5-sized deployment.

    .venv/bin/python benchmarks/bench_doctor.py [--out reports/bench_doctor.json] [--repeat N]

Builds, in a temporary directory on this machine, what a Kimi-K2.5 box holds: the target's
``config.json`` (KimiK25ForConditionalGeneration, text config 7168 wide, 61 layers, vocab 163840)
with a 64-shard ``model.safetensors.index.json``, and an EAGLE-3 draft (the public SpecForge Kimi-K2
config) whose two sparse safetensors shards carry the real names and shapes (several GB, no disk
used) with a real d2t/t2d; the SGLang 0.5.23 source (``$SGLANG_SRC``, else the published wheel from the release cache,
:func:`workbench.engine.releases.release_source`)
is the engine, found by the box's ``python3`` through ``PYTHONPATH`` in the launch command. A real
OpenSSH server on 127.0.0.1 (``tests/sshd.py``, quiet login shell) serves it; the doctor runs over
one connection (``--speculative-algorithm EAGLE``: the fault), ``--repeat`` times.

Goals: the doctor finishes within 3 s (median of the worse of the two commands, on an open connection; connecting is reported
beside it) and moves under 1 MB over TCP (``TCP_INFO``, SSH framing included). The code-path map of
the engine for that deployment (``workbench source map``: the engine located, the Kimi-K2.5 target's
offset rule evaluated through ``kimi_k25.py`` → ``deepseek_v2.py``, all 14 entries) plus the
swallowed-error scan finish within 3 s and move under 2 MB.
Exits 1 when a goal is missed, 2 when it cannot run (no sshd, no SGLang source).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "workbench"))

from remote import connect  # noqa: E402
from workbench.doctor import run_doctor  # noqa: E402

MAX_SECONDS = 3.0
MAX_BYTES = 1_000_000
MAP_MAX_SECONDS = 3.0
MAP_MAX_BYTES = 2_000_000


def build_deployment(base: Path, sglang_src: Path) -> str:
    """Write the target and draft directories; return the launch command."""
    from rule_helpers import specforge_spec, token_map
    from workbench_test_helpers import fixture_config, write_sparse_safetensors

    target = base / "Kimi-K2.5"
    target.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
                        "vocab_size": 163840, "max_position_embeddings": 262144, "rope_theta": 50000.0}}))
    weight_map = {f"language_model.model.layers.{i}.mlp.experts.{e}.down_proj.weight": f"model-{i % 64 + 1:05d}-of-00064.safetensors"
                  for i in range(61) for e in range(48)}
    (target / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 595 << 30},
                                                                     "weight_map": weight_map}))
    cfg = fixture_config("sgl-project__SpecForge__configs_kimi-k2-eagle3.json")
    cfg["max_position_embeddings"] = 262144
    draft = base / "kimi-k2.5-eagle3"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(cfg))
    spec = specforge_spec(cfg)
    spec["embed_tokens.weight"] = ("BF16", (cfg["vocab_size"], cfg["hidden_size"]))
    names = list(spec)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    d2t, t2d = token_map(cfg["vocab_size"], cfg["draft_vocab_size"])
    for fname, part in shards.items():
        write_sparse_safetensors(draft / fname, {n: spec[n] for n in part},
                                 data={k: v for k, v in {"d2t": d2t, "t2d": t2d}.items() if k in part})
    (draft / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f for f, part in shards.items() for n in part}}))
    return (f"PYTHONPATH={sglang_src.parent} python3 -m sglang.launch_server --model-path {target} "
            f"--speculative-algorithm EAGLE --speculative-draft-model-path {draft} --speculative-num-steps 3 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --tp 8 --trust-remote-code")


def bench_map(box, launch: str, repeat: int) -> list[dict]:
    """``repeat`` fresh code-path maps (engine located, configs read, map built, scan run) on ``box``:
    seconds, bytes moved over TCP, entries found and missing, swallowed findings."""
    from workbench.engine.codepath import map_for_launch
    from workbench.rules.engine_source import scan_swallowed
    from workbench.engine import find_engine

    out = []
    for _ in range(repeat):
        before = box.transport.tcp_bytes()
        t = time.perf_counter()
        engine = find_engine(box, launch=launch, timeout=30)
        src = engine.source(box)
        cmap = map_for_launch(box, src, launch, timeout=30)
        findings = scan_swallowed(src, cmap)
        took = time.perf_counter() - t
        after = box.transport.tcp_bytes()
        moved = None if before is None or after is None else (after[0] - before[0]) + (after[1] - before[1])
        out.append({"seconds": round(took, 3), "bytes_moved": moved, "entries": len(cmap.entries),
                    "found": len(cmap.entries) - len(cmap.missing), "missing": cmap.missing,
                    "swallowed": len(findings), "target_arch": cmap.target_arch})
    return out


def _sglang_source() -> tuple[Path | None, str | None]:
    """``(the SGLang 0.5.23 package directory, None)``, or ``(None, why not)``: ``$SGLANG_SRC`` when
    set (it must hold ``srt/models/llama_eagle3.py``), else the published wheel from the release cache
    (:func:`workbench.engine.releases.release_source`: ``pip download --no-deps``, cached, unpacked,
    never installed), as the tests get it."""
    from workbench.engine.releases import ReleaseUnavailable, release_source

    given = os.environ.get("SGLANG_SRC")
    if given:
        src = Path(given)
        if (src / "srt/models/llama_eagle3.py").exists():
            return src, None
        return None, f"$SGLANG_SRC={given} holds no SGLang source (no srt/models/llama_eagle3.py)"
    try:
        return release_source("0.5.23"), None
    except ReleaseUnavailable as exc:
        return None, f"no SGLang 0.5.23 source: {exc} (set $SGLANG_SRC to an unpacked sglang/ package)"


def main(argv=None) -> int:
    """Run the benchmark, print the numbers, write JSON; exit 1 on a missed goal."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench_doctor.json"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    from sshd import LoopbackSSHD, keygen, make_client, sshd_missing_reason

    src, reason = _sglang_source()
    reason = sshd_missing_reason() or reason
    if reason:
        print(f"bench_doctor: cannot run: {reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ewb-bench-doctor-"))
    server = None
    try:
        launch = build_deployment(work / "box", src)
        draft_bytes = sum(p.stat().st_size for p in (work / "box" / "kimi-k2.5-eagle3").glob("*.safetensors"))
        (work / "client").mkdir()
        key = keygen(work / "client" / "id_ed25519")
        server = LoopbackSSHD(work / "server", authorized=[key], extra_config="SetEnv SHLVL=1\n").start()
        client = make_client(work / "client-1", server, key)
        t0 = time.perf_counter()
        box = connect(client.alias, ssh_config=client.config)
        box.run("true", timeout=30)
        connect_s = time.perf_counter() - t0
        runs = []
        try:
            for i in range(2 * args.repeat):
                # Alternate the fault (EAGLE) and the fixed command (EAGLE3: every EAGLE-3 rule, the
                # engine's capture rule evaluated from kimi_k25.py → deepseek_v2.py).
                cmd = launch if i % 2 == 0 else launch.replace("--speculative-algorithm EAGLE ",
                                                                "--speculative-algorithm EAGLE3 ")
                before = box.transport.tcp_bytes()
                t = time.perf_counter()
                report = run_doctor(box, cmd, timeout=30)
                took = time.perf_counter() - t
                after = box.transport.tcp_bytes()
                moved = None if before is None or after is None else (after[0] - before[0]) + (after[1] - before[1])
                runs.append({"algorithm": "EAGLE" if i % 2 == 0 else "EAGLE3",
                             "seconds": round(took, 3), "bytes_moved": moved, "bytes_read": report.bytes_read,
                             "errors": [f.rule for f in report.errors]})
            maps = bench_map(box, launch, args.repeat)
        finally:
            box.close()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work)
    med_s = max(statistics.median(r["seconds"] for r in runs if r["algorithm"] == a) for a in ("EAGLE", "EAGLE3"))
    moved = [r["bytes_moved"] for r in runs if r["bytes_moved"] is not None]
    med_b = max(statistics.median(r["bytes_moved"] for r in runs if r["algorithm"] == a) for a in ("EAGLE", "EAGLE3")) \
        if len(moved) == len(runs) else None
    map_s = statistics.median(r["seconds"] for r in maps)
    map_b = statistics.median(r["bytes_moved"] for r in maps) if all(r["bytes_moved"] is not None for r in maps) else None
    checks = {"doctor_le_3s": med_s <= MAX_SECONDS, "moves_lt_1MB": med_b is not None and med_b < MAX_BYTES,
              "map_le_3s": map_s <= MAP_MAX_SECONDS, "map_moves_lt_2MB": map_b is not None and map_b < MAP_MAX_BYTES,
              "map_complete": all(r["missing"] == [] and r["swallowed"] >= 1 for r in maps),
              "finds_algorithm_mismatch": all(r["errors"] == (["algorithm-mismatch"] if r["algorithm"] == "EAGLE" else [])
                                              for r in runs)}
    print(f"\nDoctor over SSH (loopback sshd) on a Kimi-K2.5-sized deployment ({draft_bytes / 2**30:.1f} GiB sparse "
          f"draft in 2 shards, 64-shard target index), {args.repeat} runs on one connection\n")
    print(f"  connect: {connect_s:.2f} s")
    for a in ("EAGLE", "EAGLE3"):
        rs = [r for r in runs if r["algorithm"] == a]
        print(f"  {a:<7} doctor: median {statistics.median(r['seconds'] for r in rs):.2f} s   moved: median "
              f"{statistics.median(r['bytes_moved'] or 0 for r in rs):.0f} B   read: {rs[0]['bytes_read']} B   "
              f"errors: {rs[0]['errors']}")
    print(f"  {'met ' if checks['doctor_le_3s'] else 'MISS'} doctor time {med_s:.2f} s (goal <= {MAX_SECONDS:g} s)")
    print(f"  {'met ' if checks['moves_lt_1MB'] else 'MISS'} bytes moved {med_b} (goal < {MAX_BYTES})")
    print(f"  {'met ' if checks['finds_algorithm_mismatch'] else 'MISS'} the fault found under EAGLE, no error under EAGLE3")
    print(f"\n  code-path map + scan: median {map_s:.2f} s, moved {map_b} B, entries found "
          f"{maps[0]['found']}/{maps[0]['entries']}, swallowed findings {maps[0]['swallowed']}")
    print(f"  {'met ' if checks['map_le_3s'] else 'MISS'} map time {map_s:.2f} s (goal <= {MAP_MAX_SECONDS:g} s)")
    print(f"  {'met ' if checks['map_moves_lt_2MB'] else 'MISS'} map bytes moved {map_b} (goal < {MAP_MAX_BYTES})")
    print(f"  {'met ' if checks['map_complete'] else 'MISS'} every entry found on 0.5.23, the broad except reported")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": runs, "map_runs": maps, "map_median_s": map_s, "map_median_bytes": map_b,
                               "connect_s": round(connect_s, 3), "draft_file_bytes": draft_bytes,
                               "median_s": med_s, "median_bytes_moved": med_b, "checks": checks,
                               "goals": {"max_seconds": MAX_SECONDS, "max_bytes_moved": MAX_BYTES}}, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
