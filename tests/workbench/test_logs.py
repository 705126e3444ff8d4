"""SGLang server logs (``workbench.logs``, ``workbench logs``): every line shape of 0.4.0 - 0.5.23
with its parsed values, the fast scanner against the complete parser, bytes that are not UTF-8,
tail, following across real truncation and rotation, the CLI in process and over the loopback
sshd, and the sandbox server's own log."""

from __future__ import annotations

import json
import os
import random
import shlex
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import numpy as np
import pytest

from remote import connect
from workbench.logs import (
    LogFollower,
    LogScanner,
    epoch_seconds,
    parse_log,
    parse_log_line,
    scan_box,
    scan_file,
    summarize_bytes,
    tail_box,
    tail_bytes,
)
from workbench.cli.logs import main as logs_main
from workbench_test_helpers import public_report

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _line(name: str, n: int) -> str:
    return (LOGS / name).read_text(encoding="utf-8").split("\n")[n - 1]


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


# (file, line, expected): every attribute named is asserted; "f" are items of LogRecord.fields.
EXPECTED = [
    ("sglang-0.4.0.log", 1, None),
    ("sglang-0.4.0.log", 2, dict(kind="prefill", timestamp=ts("2024-12-04 08:15:02"), ranks={"TP": 0}, new_seq=1,
                                 new_token=7, cached_token=0, cache_hit_rate=0.0, token_usage=0.0, running_req=0,
                                 queue_req=0, accept_len=None, graph=None)),
    ("sglang-0.4.0.log", 3, dict(kind="decode", running_req=1, num_tokens=40, token_usage=0.0, gen_throughput=25.61,
                                 queue_req=0, accept_len=None, accept_rate=None, graph_backend=None)),
    ("sglang-0.4.0.log", 4, dict(kind="decode", ranks={"DP": 1, "TP": 2}, running_req=3, num_tokens=1290,
                                 gen_throughput=301.07, queue_req=2)),
    ("sglang-0.4.3.log", 1, dict(kind="prefill", new_token=512, cached_token=64, cache_hit_rate=11.11, token_usage=0.01)),
    ("sglang-0.4.3.log", 2, dict(kind="decode", running_req=1, num_tokens=640, accept_len=2.35, accept_rate=None,
                                 gen_throughput=98.12, queue_req=0)),
    ("sglang-0.4.3.log", 3, dict(kind="decode", accept_len=None, gen_throughput=45.2)),
    ("sglang-0.4.6.log", 1, dict(kind="prefill", new_seq=2, new_token=1024, running_req=0, queue_req=0,
                                 cache_hit_rate=None)),
    ("sglang-0.4.6.log", 2, dict(kind="prefill", new_token=2048, running_req=0, queue_req=1,
                                 f={"#unbootstrapped-req": 2, "#transferring-req": 3})),
    ("sglang-0.4.6.log", 3, dict(kind="decode", running_req=4, num_tokens=5120, accept_len=1.87,
                                 gen_throughput=310.55)),
    ("sglang-0.4.6.log", 4, dict(kind="decode", running_req=16, accept_len=2.64, prealloc_usage=0.12,
                                 gen_throughput=1830.02, queue_req=4)),
    ("sglang-0.4.6.log", 5, dict(kind="decode", ranks={"DP": 3, "TP": 3}, gen_throughput=88.0)),
    ("sglang-0.4.10.log", 1, dict(kind="prefill", ranks={"TP": 0, "EP": 0}, new_token=256, running_req=0,
                                  queue_req=0)),
    ("sglang-0.4.10.log", 2, dict(kind="prefill", ranks={}, token_usage=None,
                                  f={"full token usage": 0.01, "swa token usage": 0.02}, running_req=1)),
    ("sglang-0.4.10.log", 3, dict(kind="prefill", ranks={"DP": 0, "TP": 0, "EP": 0, "PP": 0}, running_req=None,
                                  queue_req=2, input_throughput=18722.3,
                                  f={"#unbootstrapped-req": 1, "#transferring-req": 3})),
    ("sglang-0.4.10.log", 4, dict(kind="decode", running_req=8, num_tokens=9120, accept_len=3.01,
                                  graph_backend="cuda", graph=True, gen_throughput=1022.18, queue_req=0)),
    ("sglang-0.4.10.log", 5, dict(kind="decode", num_tokens=None, f={"#full token": 1200, "#swa token": 800},
                                  graph_backend="cuda", graph=False, gen_throughput=61.5)),
    ("sglang-0.4.10.log", 6, dict(kind="decode", ranks={"DP": 1, "TP": 0, "EP": 0, "PP": 0}, running_req=32,
                                  accept_len=2.98, prealloc_usage=0.07, retracted_req=0, gen_throughput=2520.18,
                                  queue_req=3)),
    ("sglang-0.5.3.log", 1, dict(kind="prefill", new_token=28, running_req=0, queue_req=0)),
    ("sglang-0.5.3.log", 2, dict(kind="prefill", prealloc_req=2, inflight_req=1, queue_req=1)),
    ("sglang-0.5.3.log", 3, dict(kind="decode", ranks={}, accept_len=1.0, accept_rate=None, graph_backend="cpu",
                                 graph=False, gen_throughput=20.1)),
    ("sglang-0.5.3.log", 4, dict(kind="decode", prealloc_usage=0.28, prealloc_req=5, transfer_req=3, retracted_req=0,
                                 accept_len=2.4, gen_throughput=2520.18, queue_req=3)),
    ("sglang-0.5.5.log", 1, dict(kind="prefill", iteration=41, new_token=512)),
    ("sglang-0.5.5.log", 2, dict(kind="decode", iteration=80, accept_len=3.2, accept_rate=0.73, gen_throughput=180.33)),
    ("sglang-0.5.5.log", 3, dict(kind="decode", iteration=None, f={"#full token": 900, "mamba num": 4,
                                                                    "mamba usage": 0.1},
                                 accept_len=2.11, accept_rate=0.37, gen_throughput=402.71)),
    ("sglang-0.5.5.log", 4, dict(kind="prefill", f={"full token usage": 0.01, "mamba usage": 0.03}, running_req=3)),
    ("sglang-0.5.7.log", 1, dict(kind="decode", timestamp=ts("2025-12-20 08:00:00.125"),
                                 ranks={"DP": 0, "PP": 1, "TP": 0, "EP": 0}, running_req=64, accept_len=1.04,
                                 accept_rate=0.01, gen_throughput=3012.4, queue_req=12)),
    ("sglang-0.5.7.log", 2, dict(kind="prefill", timestamp=ts("2025-12-20 08:00:00.981"), new_seq=3)),
    ("sglang-0.5.10.log", 1, dict(kind="prefill", graph_backend="npu", graph=False, input_throughput=5120.0)),
    ("sglang-0.5.10.log", 2, dict(kind="decode", accept_len=3.12, accept_rate=0.53, graph_backend="npu", graph=True,
                                  gen_throughput=612.4, queue_req=0)),
    ("sglang-0.5.10.log", 3, dict(kind="decode", ranks={"DP": 0, "ATTN_CP": 0, "MOE_DP": 1, "TP": 0, "EP": 0},
                                  accept_len=2.77, queue_req=1,
                                  f={"est. decode TFLOPS/s (per GPU)": 41.2, "est. read BW (GB/s per GPU)": 1830.55,
                                     "est. write BW (GB/s per GPU)": 12.4})),
    ("sglang-0.5.10.log", 4, dict(kind="decode", accept_len=None, accept_rate=None, graph_backend="cpu",
                                  gen_throughput=45.0)),
    ("sglang-0.5.10.log", 5, dict(kind="prefill", input_throughput=40960.12,
                                  f={"est. prefill TFLOPS/s (per GPU)": 210.5})),
    ("sglang-0.5.17.log", 1, dict(kind="prefill", pending_token=16384, inflight_req=2, input_throughput=30411.88,
                                  f={"#bootstrap-req": 1, "#optimistic-req": 0, "fwd occupancy": 87.5})),
    ("sglang-0.5.17.log", 2, dict(kind="decode", accept_len=3.4, accept_rate=0.8, cap_len=3.1, block_accept_len=3.55,
                                  graph_backend="musa", graph=True, gen_throughput=701.25)),
    ("sglang-0.5.17.log", 3, dict(kind="decode", accept_len=2.48, accept_rate=0.49, graph_backend="cuda",
                                  gen_throughput=390.02, f={"est uncap acc len": "2.61 [2.40, 2.83]"})),
    ("sglang-0.5.23.log", 1, dict(kind="prefill", timestamp=ts("2026-07-01 11:59:59"), ranks={}, new_seq=1,
                                  new_token=512, cached_token=0, token_usage=0.01, running_req=0, queue_req=0,
                                  pending_token=0, graph_backend="cuda", graph=False, input_throughput=1843.21)),
    ("sglang-0.5.23.log", 2, dict(kind="decode", timestamp=ts("2026-07-01 12:00:00"), ranks={}, running_req=4,
                                  num_tokens=8123, token_usage=0.02, accept_len=3.12, accept_rate=0.53,
                                  graph_backend="cuda", graph=True, gen_throughput=612.4, queue_req=0)),
    ("sglang-0.5.23.log", 3, dict(kind="decode", ranks={"TP": 0}, accept_len=1.0, accept_rate=0.0,
                                  gen_throughput=48.02)),
    ("sglang-0.5.23.log", 4, dict(kind="prefill", timestamp=ts("2026-07-01 12:00:06.500"), iteration=1203,
                                  cached_token=4096, running_req=7, input_throughput=3302.5,
                                  f={"#replay-token": 64, "fwd occupancy": 71.25, "fwd+idle occupancy": 99.8})),
    ("sglang-0.5.23.log", 5, dict(kind="decode", ranks={"DP": 1, "TP": 0, "EP": 0}, running_req=48, prealloc_usage=0.09,
                                  prealloc_req=6, transfer_req=2, retracted_req=0, accept_len=2.9,
                                  f={"#host-receive-req": 1}, gen_throughput=3400.7, queue_req=5)),
    ("sglang-0.5.23.log", 6, dict(kind="decode", num_tokens=None, f={"#gpu token": 4096, "#cpu token": 65536,
                                                                      "cpu token usage": 0.12},
                                  accept_len=2.05, graph_backend="cuda")),
    ("sglang-0.5.23.log", 7, dict(kind="decode", accept_len=None, f={"#full token": 5000, "mamba num": 5},
                                  gen_throughput=260.8)),
    ("public-issues.log", 1, None),
    ("public-issues.log", 2, dict(kind="prefill", timestamp=ts("2025-01-07 20:16:02"), ranks={"TP": 0}, new_token=48,
                                  cache_hit_rate=0.0, running_req=0, queue_req=0)),
    ("public-issues.log", 3, dict(kind="prefill", new_token=75, token_usage=0.01, running_req=1, queue_req=62)),
    ("public-issues.log", 4, dict(kind="decode", timestamp=ts("2025-06-07 21:25:14"), num_tokens=9322,
                                  gen_throughput=97.52, accept_len=None)),
    ("public-issues.log", 5, dict(kind="decode", num_tokens=9362, gen_throughput=97.58)),
    ("public-issues.log", 6, dict(kind="prefill", new_token=28, queue_req=0)),
    ("public-issues.log", 7, dict(kind="decode", timestamp=ts("2025-10-22 10:27:57"), running_req=1, num_tokens=108,
                                  accept_len=2.17, accept_rate=0.54, graph_backend="cuda", graph=True,
                                  gen_throughput=0.39, queue_req=0)),
    ("public-issues.log", 8, dict(kind="decode", num_tokens=186, accept_len=1.95, accept_rate=0.49, gen_throughput=178.86)),
    ("public-issues.log", 9, dict(kind="decode", num_tokens=258, accept_len=1.8, accept_rate=0.45, gen_throughput=165.41)),
    ("public-issues.log", 10, dict(kind="decode", num_tokens=340, accept_len=2.05, accept_rate=0.51,
                                   gen_throughput=188.68)),
    ("public-issues.log", 11, dict(kind="decode", num_tokens=412, accept_len=1.8, accept_rate=0.45,
                                   gen_throughput=165.59)),
]


@pytest.mark.parametrize("name,n,expected", EXPECTED, ids=[f"{f}:{n}" for f, n, _ in EXPECTED])
def test_every_release_line_parses_to_its_values(name, n, expected):
    rec = parse_log_line(_line(name, n))
    if expected is None:
        assert rec is None
        return
    assert rec is not None
    for key, value in expected.items():
        if key == "f":
            for fk, fv in value.items():
                assert rec.fields[fk] == fv, (fk, rec.fields)
        else:
            assert getattr(rec, key) == value, (key, getattr(rec, key), rec.line)
    # the same line as bytes
    assert parse_log_line(_line(name, n).encode()).to_dict() == rec.to_dict()


def test_every_fixture_line_is_covered():
    covered = {(f, n) for f, n, _ in EXPECTED}
    for path in sorted(LOGS.glob("*.log")):
        lines = path.read_text().splitlines()
        batch = {(path.name, i) for i, line in enumerate(lines, 1) if parse_log_line(line) is not None}
        assert batch <= covered, f"{path.name}: lines {sorted(n for _, n in batch - covered)} have no expectation"


def _records(data: bytes):
    return [r for r in (parse_log_line(ln) for ln in data.split(b"\n")) if r is not None]


def assert_fast_equals_complete(data: bytes, block: int | None = None) -> LogScanner:
    """The scanner's numbers for ``data`` (fed in ``block``-byte pieces) equal parse_log_line's."""
    sc = LogScanner()
    step = block or len(data) or 1
    for i in range(0, len(data), step):
        sc.feed(data[i: i + step])
    sc.finish()
    a = sc.arrays()
    recs = _records(data)
    assert len(recs) == len(a["pos"]), (len(recs), len(a["pos"]))
    for i, r in enumerate(recs):
        assert a["decode"][i] == (r.kind == "decode"), r.line
        want = epoch_seconds(r.timestamp) if r.timestamp else None
        got = a["t"][i]
        assert (want is None and np.isnan(got)) or want == got, (r.line, want, got)
        for name in ("running_req", "accept_len", "accept_rate", "gen_throughput", "input_throughput"):
            v = getattr(r, name)
            g = a[name][i]
            assert (v is None and np.isnan(g)) or (v is not None and float(v) == g), (r.line, name, v, g)
    return sc


def test_fast_scanner_equals_complete_parser_on_every_fixture():
    for path in sorted(LOGS.glob("*.log")):
        sc = assert_fast_equals_complete(path.read_bytes())
        assert sc.fast_lines > 0 and sc.slow_lines <= 1, (path.name, sc.slow_lines)  # only the bracketed DSpark line


ODD_LINES = [
    # container and Ray prefixes in front of SGLang's (complete parser)
    b"pod-7 | [2026-07-01 12:00:01] Decode batch, #running-req: 2, #token: 9, token usage: 0.00, accept len: 1.50, "
    b"accept rate: 0.17, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0",
    b"(SchedulerActor pid=4242, ip=10.0.0.3) [2026-07-01 12:00:02 TP0] Decode batch, #running-req: 3, #token: 9, "
    b"token usage: 0.00, accept len: 2.50, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 11.00, #queue-req: 0",
    # a custom SGLANG_LOGGING_CONFIG_PATH format: no timestamp prefix
    b"INFO sglang.srt.managers.scheduler: Decode batch, #running-req: 21, accept len: 1.25, accept rate: 0.08, "
    b"gen throughput (token/s): 12.00, #queue-req: 0",
    # mentions, not batch lines
    b"[2026-07-01 12:00:03] note: Decode batch, #running-req: 1, accept len: 9.99",
    b"[2026-07-01 12:00:03] Decode batch size is 8",
    b"[2026-07-01 12:00:03] the accept len: 3.00, gen throughput (token/s): 1.00 of nothing",
    # an impossible date: the prefix is not SGLang's, the line is a bare batch line
    b"[2026-13-45 12:00:00] Decode batch, #running-req: 22, accept len: 1.75, gen throughput (token/s): 13.00, #queue-req: 0",
    # values that are not plain numbers, a key twice, a negative count, a very long number
    b"[2026-07-01 12:00:04] Decode batch, #running-req: 23, accept len: nan, accept rate: 1.2.3, gen throughput (token/s): inf, #queue-req: 0",
    b"[2026-07-01 12:00:05] Decode batch, #running-req: 25, accept len: 2.00, accept len: 3.00, gen throughput (token/s): 14.00, #queue-req: 0",
    b"[2026-07-01 12:00:06] Prefill batch, #new-seq: 1, #running-req: -1, #queue-req: 0, input throughput (token/s): 123456789012.25",
    b"[2026-07-01 12:00:07] Decode batch, #running-req: 5, accept len: 3.125, accept rate: .5, gen throughput (token/s): 1234567.8",
    # two batches in one line, CRLF, trailing spaces, an iteration with brackets in the body
    b"[2026-07-01 12:00:08] Decode batch, #running-req: 31, accept len: 1.10, [2026-07-01 12:00:08] Decode batch, #running-req: 32",
    b"[2026-07-01 12:00:09] Decode batch, #running-req: 6, accept len: 1.20, accept rate: 0.05, gen throughput (token/s): 15.00, #queue-req: 0\r",
    b"[2026-07-01 12:00:10] Prefill batch [12], #new-seq: 1, #running-req: 0, #queue-req: 0, input throughput (token/s): 9.50   ",
    b"[2026-07-01 12:00:11] Decode batch [x], #running-req: 24",
    # bytes that are not UTF-8, in the message, in a tag, next to a value
    b"[2026-07-01 12:00:12 TP0] Decode batch, #running-req: 7, #token: 1, token usage: 0.00, accept len: 2.20, "
    b"accept rate: 0.40, \xff\xfe graph: True, gen throughput (token/s): 16.00, #queue-req: 0",
    b"[2026-07-01 12:00:13 T\xc3P0] Decode batch, #running-req: 8, accept len: 2.30, gen throughput (token/s): 17.00, #queue-req: 0",
    b"[2026-07-01 12:00:14] Decode batch, #running-req: 9, accept len: 2.40\xe2\x82, accept rate: 0.47, gen throughput (token/s): 18.00, #queue-req: 0",
    b"\x00\x00\x00\x00[2026-07-01 12:00:15] Decode batch, #running-req: 10, accept len: 2.50, gen throughput (token/s): 19.00, #queue-req: 0",
    b"[2026-02-29 12:00:16] Decode batch, #running-req: 11, accept len: 2.60, gen throughput (token/s): 20.00, #queue-req: 0",
    b"[2024-02-29 12:00:17.999 DP7 TP0 EP0] Prefill batch, #new-seq: 1, #running-req: 12, #queue-req: 0, input throughput (token/s): 21.00",
]


def test_odd_lines_never_crash_and_agree():
    data = b"\n".join(ODD_LINES) + b"\n"
    sc = assert_fast_equals_complete(data)
    recs = _records(data)
    by_running = {r.running_req: r for r in recs if r.running_req is not None}
    assert by_running[2].accept_len == 1.5 and by_running[2].timestamp == datetime(2026, 7, 1, 12, 0, 1)
    assert by_running[3].ranks == {"TP": 0}
    assert by_running[21].timestamp is None and by_running[21].accept_len == 1.25          # custom format
    assert by_running[22].timestamp is None and by_running[22].accept_len == 1.75          # 2026-13-45
    assert by_running[23].accept_len is None and by_running[23].accept_rate is None        # nan, 1.2.3
    assert by_running[23].gen_throughput is None and by_running[23].fields["accept len"] == "nan"
    assert by_running[32].accept_len == 1.1                                                # two in one line
    assert by_running[25].accept_len == 3.0                                                # a key twice: the last
    assert 24 not in by_running and 1 not in by_running                                    # not batch lines
    assert by_running[7].accept_len == 2.2 and "\ufffd" in by_running[7].line       # replacement characters
    assert by_running[9].accept_len is None and by_running[9].accept_rate == 0.47   # "2.40\xe2\x82" is no number
    assert by_running[10].accept_len == 2.5                                          # NUL bytes in front
    assert by_running[11].timestamp is None                                          # 2026-02-29 does not exist
    assert by_running[12].timestamp == datetime(2024, 2, 29, 12, 0, 17, 999000)
    assert by_running[5].accept_len == 3.125 and by_running[5].accept_rate == 0.5
    assert by_running[-1].input_throughput == 123456789012.25
    assert sc.slow_lines >= 5
    # the same bytes through every block size
    for block in (1, 7, 64, 1000):
        assert_fast_equals_complete(data, block)


def _generated(n_lines: int, seed: int) -> bytes:
    """A mixed log: every fixture line, the odd lines, and 0.5.23 lines with random numbers."""
    rnd = random.Random(seed)
    pool = [ln.encode() for p in sorted(LOGS.glob("*.log")) for ln in p.read_text().splitlines()] + ODD_LINES
    out = []
    for i in range(n_lines):
        r = rnd.random()
        if r < 0.3:
            out.append(rnd.choice(pool))
        else:
            al = rnd.uniform(1, 6)
            tags = rnd.choice(["", " TP0", " DP3 TP0 EP0", ".123 DP0 PP1 ATTN_CP0 MOE_DP0 TP0 EP0"])
            out.append((f"[2026-07-01 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}{tags}] Decode batch, "
                        f"#running-req: {rnd.randint(0, 10 ** rnd.randint(1, 6))}, #token: {rnd.randint(0, 99999)}, "
                        f"token usage: {rnd.random():.2f}, accept len: {al:.{rnd.choice([2, 2, 2, 3, 0])}f}, "
                        f"accept rate: {(al - 1) / 5:.2f}, cuda graph: True, gen throughput (token/s): "
                        f"{rnd.uniform(0, 10 ** rnd.randint(1, 9)):.2f}, #queue-req: 0").encode())
    return b"\n".join(out) + rnd.choice([b"\n", b""])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_scanner_equals_complete_parser_on_generated_logs(seed):
    data = _generated(3000, seed)
    assert_fast_equals_complete(data, block=random.Random(seed).choice([4096, 65536, 1 << 20]))


def test_lines_that_look_like_the_frequent_shape_but_are_not():
    # 40 canonical 0.5.23 lines teach the scanner their shape; lines with the same number of
    # colons but other keys at those places must still come out as the complete parser reads them
    canon = [_decode(f"12:00:{i:02d}", 1.0 + i / 100, run=i) for i in range(40)]
    base = canon[0]
    twins = [
        base.replace("accept len", "cap len"),                                   # " len" but not the key
        base.replace("accept len: 1.00, accept rate: 0.00", "accept rate: 0.00, accept len: 1.00"),
        base.replace("#token: 100", "accept len: 7.00"),                         # the key twice
        base.replace("#queue-req: 0", "#running-req: 99"),                       # the key twice, last wins
        base.replace("token usage: 0.00", "accept len: 2.50"),
        base.replace("accept len: 1.00", "accept len: 1.0x"),                    # not a number
        base.replace("gen throughput (token/s)", "input throughput (token/s)"),  # the other ")" key
        base.replace(", accept len", " accept len"),                             # not an item start
        base.replace("#running-req: 0", "#running-req: 123456789012345678"),     # too long a number
    ]
    rnd = random.Random(7)
    lines = canon + twins * 3
    rnd.shuffle(lines)
    sc = assert_fast_equals_complete(_log(lines))
    assert sc.fast_lines >= 40 and sc.slow_lines >= 9


def _value_strings(seed: int, n: int = 20000):
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        k = rnd.random()
        if k < 0.25:
            s = f"{rnd.uniform(0, 10 ** rnd.randint(0, 9)):.2f}"
        elif k < 0.45:
            s = str(rnd.randint(0, 10 ** rnd.randint(1, 17)))
        elif k < 0.55:
            s = f"{rnd.uniform(0, 1):.{rnd.randint(0, 12)}f}"
        elif k < 0.75:
            s = "".join(rnd.choice("0123456789.") for _ in range(rnd.randint(1, 18)))
        else:
            s = rnd.choice(["", ".", ".5", "5.", "1.2.3", "12a", "007", "-1", "nan", "1e5", "1234567", "12345678",
                            "123456789012345", "1234567890123456", "1234567.89", "12345678.90"])
        out.append((s, rnd.choice([b", ", b",\n", b"\n", b"\r\n", b" ", b",,", b", x", b"x"])))
    return out


def _reference(s: str, end: bytes):
    """What the complete parser makes of ``key: <s><end>``: the number, or None."""
    run = ""
    for ch in s + end.decode():
        if ch not in "0123456789.":
            break
        run += ch
    rest = (s + end.decode())[len(run):]
    ended = rest[:1] in ("\n", "\r") or (rest[:1] == "," and rest[1:2] in (" ", "\n", "\r"))
    if not (ended and 1 <= len(run) <= 15 and run.count(".") <= 1 and any(c.isdigit() for c in run)):
        return None
    return float(run)


@pytest.mark.parametrize("reader", ["_numbers", "_numbers_d_dd", "_numbers_f2", "_numbers_int"])
def test_number_readers_equal_python_float(reader):
    # the SWAR readers: a value they accept is exactly float(text); the general one accepts every
    # plain number the complete parser does and nothing else
    import workbench.logs.scanner as L  # the private readers live in the scanner

    cases = _value_strings(11)
    pieces = [b": " + s.encode() + end + b"Q" * 20 for s, end in cases]
    pos = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    bb = L._Block(b"".join(pieces))
    vals, ok = getattr(L, reader)(bb, np.array(pos))
    for i, (s, end) in enumerate(cases):
        want = _reference(s, end)
        if ok[i]:
            assert want is not None and vals[i] == want, (reader, s, end, vals[i], want)
        elif reader == "_numbers":
            assert want is None or len(s) > 15, (s, end, want)
    assert ok.sum() > 100


def test_public_reports():
    # the PR text quotes "accept_len: 1.00": a paraphrase, not the engine's line
    lines = public_report("sglang-pr21272-eagle-flag-with-eagle3-draft")["inputs"]["log_lines"]
    assert [parse_log_line(ln) for ln in lines] == [None]
    # sgl-project/sglang#11948 (0.5.3.post3, EAGLE3 on Qwen3-8B): the decode lines of the issue
    s = scan_file(str(LOGS / "public-issues.log"), evaluate_rules=True)
    assert (s.decode_lines, s.prefill_lines, s.spec_lines) == (7, 3, 5)
    assert (s.accept_len.min, s.accept_len.median, s.accept_len.max, s.accept_len.last) == (1.8, 1.95, 2.17, 1.8)
    assert s.accept_rate.median == 0.49 and s.ranks == {"TP0": 10} and not s.collapsed


def _log(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _decode(t: str, al: float | None, run: int = 1, gen: float = 50.0, tags: str = "") -> str:
    spec = f"accept len: {al:.2f}, accept rate: {max(al - 1, 0) / 3:.2f}, " if al is not None else ""
    return (f"[2026-07-01 {t}{tags}] Decode batch, #running-req: {run}, #token: 100, token usage: 0.00, {spec}"
            f"cuda graph: True, gen throughput (token/s): {gen:.2f}, #queue-req: 0")


def test_summary_stats_span_ranks_and_timeline():
    lines = [_decode(f"12:00:{i:02d}", 1.0 + i / 10, run=i + 1, gen=100 + i, tags=" TP0" if i % 2 else "")
             for i in range(20)]
    lines.insert(3, "[2026-07-01 11:59:59 TP0] Prefill batch, #new-seq: 1, #new-token: 5, #cached-token: 0, "
                    "token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
                    "input throughput (token/s): 250.00")
    s = summarize_bytes(_log(lines), buckets=4)
    assert (s.decode_lines, s.prefill_lines, s.spec_lines, s.speculative) == (20, 1, 20, True)
    assert (s.accept_len.min, s.accept_len.max, s.accept_len.last, s.accept_len.count) == (1.0, 2.9, 2.9, 20)
    assert s.accept_len.median == pytest.approx(1.95) and s.accept_len.mean == pytest.approx(1.95)
    assert (s.running_req.min, s.running_req.max, s.gen_throughput.last, s.input_throughput.last) == (1, 20, 119, 250)
    assert (s.first, s.last, s.span_s) == ("2026-07-01 11:59:59", "2026-07-01 12:00:19", 20.0)
    assert s.ranks == {"TP0": 11}
    assert [b["decode_lines"] for b in s.timeline] == [5, 5, 5, 5]
    assert s.timeline[0]["start"] == "2026-07-01 12:00:00" and s.timeline[0]["accept_len_median"] == 1.2
    assert s.timeline[-1]["accept_len_max"] == 2.9
    assert s.acceptance.accept_length == pytest.approx(1.95) and not s.collapsed
    json.dumps(s.to_dict())


def test_acceptance_collapsed_rule_from_the_log():
    collapsed = _log([_decode(f"12:00:{i:02d}", 1.0) for i in range(3)])
    s = summarize_bytes(collapsed, decode_log_interval=8)       # 3 lines x 8 iterations = 24 verify steps
    (f,) = s.findings
    assert f.rule == "acceptance-collapsed" and f.severity == "error" and s.collapsed
    assert f.evidence["verify_steps"]["value"] == 24 and f.evidence["accept_length"]["value"] == 1.0
    assert "decode-log-interval 8" in f.evidence["accept_length"]["source"]
    # two lines of 8 iterations are 16 verify steps: too few to call it
    assert not summarize_bytes(_log([_decode("12:00:00", 1.0), _decode("12:00:01", 1.0)]),
                               decode_log_interval=8).collapsed
    # no speculative fields: no rule, and the note says why
    off = summarize_bytes(_log([_decode(f"12:00:{i:02d}", None) for i in range(30)]))
    assert not off.speculative and not off.findings and off.accept_len is None
    assert "speculative decoding is off" in off.notes[0]


def test_parse_log_and_bytes_input():
    data = (LOGS / "sglang-0.5.23.log").read_bytes()
    assert parse_log(data).summary == parse_log(data.decode()).summary
    assert parse_log(data).summary["decode_lines"] == 5


# ---------------------------------------------------------------------------------------------
# tail


class CountingBox:
    """A local box that counts the bytes its reads return."""

    def __init__(self):
        self.box = connect("local")
        self.read = 0
        self.name = self.box.name

    def __getattr__(self, name):
        return getattr(self.box, name)

    def read_bytes(self, path, offset=0, length=None, *, timeout=30):
        data = self.box.read_bytes(path, offset, length, timeout=timeout)
        self.read += len(data)
        return data


def test_tail_reads_only_the_end_of_a_1gib_sparse_log(tmp_path):
    body = _log([_decode(f"12:{i // 60 % 60:02d}:{i % 60:02d}", 1.0 + (i % 7) / 10, run=i) for i in range(3000)])
    path = tmp_path / "big.log"
    with open(path, "wb") as f:
        f.truncate((1 << 30) - len(body))
        f.seek((1 << 30) - len(body))
        f.write(body)
    box = CountingBox()
    data, end = tail_bytes(box, str(path), 100, timeout=10)
    assert end == 1 << 30 and data.count(b"\n") == 100
    assert data.split(b"\n")[-2] == body.split(b"\n")[-2]
    assert box.read <= 2 * 64 * 1024
    s = tail_box(box, str(path), 1000, timeout=10)
    assert s.decode_lines == 1000 and s.running_req.last == 2999 and s.running_req.min == 2000
    assert box.read < 2 * 64 * 1024 + 400 * 1024


def test_tail_edges(tmp_path, box):
    p = tmp_path / "t.log"
    for content, n, want in [(b"", 3, b""), (b"a", 1, b"a"), (b"a\nb\n", 1, b"b\n"), (b"a\nb", 1, b"b"),
                             (b"a\nb", 5, b"a\nb"), (b"\n\n", 1, b"\n")]:
        p.write_bytes(content)
        assert tail_bytes(box, str(p), n, timeout=10)[0] == want, (content, n)
    with pytest.raises(ValueError):
        tail_bytes(box, str(p), 0, timeout=10)


# ---------------------------------------------------------------------------------------------
# following: real files, real truncation and rotation


def _numbered(i: int) -> bytes:
    return (_decode(f"12:{i // 60 % 60:02d}:{i % 60:02d}", 1.0 + (i % 10) / 10, run=i) + "\n").encode()


def _collect(follower) -> list[int]:
    recs = _records(follower.poll())
    return [r.running_req for r in recs]


def test_follow_holds_partial_lines_until_complete(tmp_path, box):
    p = tmp_path / "server.log"
    p.write_bytes(_numbered(0))
    fol = LogFollower(box, str(p), timeout=10)                  # starts at the current end
    assert fol.poll() == b""
    line = _numbered(1)
    with open(p, "ab") as f:
        f.write(line[:40])
    assert fol.poll() == b"" and fol.held == line[:40]
    with open(p, "ab") as f:
        f.write(line[40:] + _numbered(2)[:10])
    got = fol.poll()
    assert got == line and fol.held == _numbered(2)[:10]
    with open(p, "ab") as f:
        f.write(_numbered(2)[10:])
    assert _collect(fol) == [2]
    assert fol.events == []


def test_follow_across_truncation_smaller_and_larger(tmp_path, box):
    p = tmp_path / "server.log"
    p.write_bytes(b"".join(_numbered(i) for i in range(5)))
    fol = LogFollower(box, str(p), offset=0, timeout=10)
    assert _collect(fol) == [0, 1, 2, 3, 4]
    # truncated, then fewer bytes than were read
    with open(p, "wb") as f:
        f.write(_numbered(10))
    assert _collect(fol) == [10]
    assert [e.kind for e in fol.events] == ["truncated"]
    # truncated, then MORE bytes than the old offset before the next poll: caught by the fingerprint
    old_offset = fol.offset
    with open(p, "wb") as f:
        f.write(b"".join(_numbered(i) for i in range(20, 26)))
    assert p.stat().st_size > old_offset
    assert _collect(fol) == [20, 21, 22, 23, 24, 25]
    assert [e.kind for e in fol.events] == ["truncated", "truncated"]
    assert _collect(fol) == []


def test_follow_across_rename_rotation_drains_the_old_file(tmp_path, box):
    p = tmp_path / "server.log"
    p.write_bytes(b"".join(_numbered(i) for i in range(3)))
    fol = LogFollower(box, str(p), offset=0, timeout=10)
    assert _collect(fol) == [0, 1, 2]
    # the server writes more, then the log is rotated (RotatingFileHandler: rename to .1, new file)
    # and the new file grows past the old offset before the follower looks again
    with open(p, "ab") as f:
        f.write(_numbered(3) + _numbered(4))
    os.rename(p, str(p) + ".1")
    p.write_bytes(b"".join(_numbered(i) for i in range(5, 12)))
    got = _collect(fol)
    assert got == list(range(3, 12)), got                      # nothing skipped, nothing twice
    (ev,) = fol.events
    assert ev.kind == "rotated" and ev.rotated_to == str(p) + ".1" and ev.drained == len(_numbered(3) + _numbered(4))
    assert ev.lost is None


def test_follow_across_copytruncate_and_a_missing_file(tmp_path, box):
    p = tmp_path / "server.log"
    p.write_bytes(_numbered(0))
    fol = LogFollower(box, str(p), offset=0, timeout=10)
    assert _collect(fol) == [0]
    with open(p, "ab") as f:
        f.write(_numbered(1))
    # logrotate copytruncate: copy to .1, truncate in place
    (tmp_path / "server.log.1").write_bytes(p.read_bytes())
    with open(p, "r+b") as f:
        f.truncate(0)
    with open(p, "ab") as f:
        f.write(_numbered(2))
    assert _collect(fol) == [1, 2]
    assert fol.events[-1].kind == "rotated"
    # the file disappears for a while (mid-rotation), then comes back
    os.unlink(p)
    assert fol.poll() == b"" and fol.events[-1].kind == "missing"
    p.write_bytes(_numbered(3))
    assert _collect(fol) == [3]


def test_follow_rotation_without_a_rotated_copy_says_what_was_lost(tmp_path, box):
    p = tmp_path / "server.log"
    p.write_bytes(_numbered(0))
    fol = LogFollower(box, str(p), offset=0, timeout=10)
    assert _collect(fol) == [0]
    with open(p, "ab") as f:
        f.write(_numbered(1)[:30])                               # an unfinished line
    assert fol.poll() == b""
    os.rename(p, tmp_path / "elsewhere.log")
    p.write_bytes(b"".join(_numbered(i) for i in range(7, 12)))
    assert _collect(fol) == [7, 8, 9, 10, 11]
    (ev,) = fol.events
    assert ev.kind == "truncated" and "unfinished line of 30 bytes" in ev.lost and "no rotated copy" in ev.lost


def test_follow_non_utf8_bytes(tmp_path, box):
    p = tmp_path / "server.log"
    p.write_bytes(b"")
    fol = LogFollower(box, str(p), timeout=10)
    with open(p, "ab") as f:
        f.write(b"\xff\xfe garbage \x80\n" + _numbered(5) + b"[2026-07-01 12:00:00] \xc3\x28 Decode batch, #running-req: 6\n")
    lines = fol.lines()
    assert len(lines) == 3 and "\ufffd" in lines[0]
    assert [r.running_req for r in (parse_log_line(ln) for ln in lines) if r] == [5]


# ---------------------------------------------------------------------------------------------
# the CLI


def test_cli_plain_json_last_and_exit_codes(tmp_path, cli):
    code, out, err = cli("logs", str(LOGS / "sglang-0.5.23.log"))
    assert code == 0 and err == ""
    assert "5 decode (4 with accept len), 2 prefill" in out and "accept len" in out and "timeline" in out
    code, out, _ = cli("logs", str(LOGS / "sglang-0.5.23.log"), "--json", "--last", "2")
    doc = json.loads(out)
    assert code == 0 and doc["decode_lines"] == 2 and doc["accept_len"]["last"] == 2.05
    assert doc["source"].startswith("last 2 lines of") and doc["path"].endswith("sglang-0.5.23.log")

    collapsed = tmp_path / "collapsed.log"
    collapsed.write_bytes(_log([_decode(f"12:00:{i:02d}", 1.0) for i in range(5)]))
    code, out, _ = cli("logs", str(collapsed))
    assert code == 1 and "acceptance-collapsed [error]" in out
    # logs runs no static checks: it must not say none explains the collapse (issue 29 trial item 4)
    assert "no static finding" not in out and "workbench doctor --running" in out
    code, out, _ = cli("logs", str(collapsed), "--json")
    assert code == 1 and json.loads(out)["findings"][0]["rule"] == "acceptance-collapsed"
    code, out, _ = cli("logs", str(collapsed), "--decode-log-interval", "1")    # 5 verify steps: too few
    assert code == 0

    notspec = tmp_path / "nospec.log"
    notspec.write_bytes(_log([_decode("12:00:00", None)]))
    code, out, _ = cli("logs", str(notspec))
    assert code == 0 and "speculative   no" in out and "speculative decoding is off" in out


def test_cli_bad_input_is_one_line_never_a_traceback(tmp_path, cli):
    cases = {
        str(tmp_path / "missing.log"): "no such file",
        str(tmp_path): "is a directory",
        str(Path(__file__).resolve().parents[2] / "pyproject.toml"): "is not an SGLang server log",
    }
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    cases[str(empty)] = "is empty"
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 100)
    cases[str(binary)] = "is not an SGLang server log"
    for path, what in cases.items():
        code, out, err = cli("logs", path)
        assert code == 2 and out == "", path
        assert err.count("\n") == 1 and err.startswith("workbench logs: ") and what in err, err
        assert "Traceback" not in err
    code, _, err = cli("logs", str(empty), "--host", "no-such-alias-here")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        logs_main([str(empty), "--last", "0"])
    assert exc.value.code == 2


def test_cli_follow_across_rotation(tmp_path, cli):
    p = tmp_path / "server.log"
    p.write_bytes(b"".join(_numbered(i) for i in range(3)))
    stop = threading.Event()

    def writer():
        time.sleep(0.5)                                            # after the CLI has found the end
        i = 3
        while not stop.is_set() and i < 40:
            with open(p, "ab") as f:
                f.write(_numbered(i))
            if i == 20:
                os.rename(p, str(p) + ".1")                        # rotation mid-follow
                p.write_bytes(b"")
            i += 1
            time.sleep(0.04)

    t = threading.Thread(target=writer)
    t.start()
    try:
        code, out, err = cli("logs", str(p), "--follow", "3.5", "--json", "--poll", "0.1")
    finally:
        stop.set()
        t.join()
    doc = json.loads(out)
    assert code == 0, err
    # the follow starts at the end: lines 3..39, each once, across the rotation
    assert doc["decode_lines"] == 37 and doc["running_req"]["min"] == 3 and doc["running_req"]["max"] == 39
    assert [e["kind"] for e in doc["events"] if e["kind"] != "missing"] == ["rotated"]


def test_cli_on_its_own_and_through_workbench_main(cli, capsys):
    # workbench/cli/logs.py's main (`python -m workbench.cli.logs`) is the same command as `workbench logs`
    code = logs_main([str(LOGS / "public-issues.log"), "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["spec_lines"] == 5
    code, out, _ = cli("logs", str(LOGS / "sglang-0.5.7.log"))     # one line of accept len 1.04 x 40 steps
    assert code == 1 and "acceptance-collapsed [error]" in out


def test_cli_over_ssh(ssh_env, tmp_path, cli):
    big = tmp_path / "big.log"
    body = _log([_decode(f"12:{i // 60 % 60:02d}:{i % 60:02d}", 1.0, run=i) for i in range(500)])
    with open(big, "wb") as f:
        f.truncate((4 << 30) - len(body))                        # a 4 GiB log: never pulled whole
        f.seek((4 << 30) - len(body))
        f.write(body)
    t0 = time.perf_counter()
    code, out, err = cli("logs", str(big), "--host", ssh_env.alias, "--last", "200", "--json")
    assert time.perf_counter() - t0 < 20
    doc = json.loads(out)
    assert code == 1, err                                          # accept len 1.00: collapsed
    assert doc["decode_lines"] == 200 and doc["running_req"]["min"] == 300 and doc["host"] == ssh_env.alias
    small = tmp_path / "small.log"
    small.write_bytes((LOGS / "sglang-0.5.23.log").read_bytes())
    code, out, _ = cli("logs", str(small), "--host", ssh_env.alias, "--json")
    assert code == 0 and json.loads(out)["decode_lines"] == 5
    code, _, err = cli("logs", str(tmp_path / "nope.log"), "--host", ssh_env.alias)
    assert code == 2 and "no such file" in err and err.count("\n") == 1


def test_library_over_ssh_follow_and_scan(ssh_env, tmp_path):
    p = tmp_path / "server.log"
    p.write_bytes(b"".join(_numbered(i) for i in range(4)))
    with connect(ssh_env.alias) as box:
        s = scan_box(box, str(p), timeout=20, block=100)
        assert s.decode_lines == 4 and s.running_req.max == 3
        fol = LogFollower(box, str(p), timeout=20)
        with open(p, "ab") as f:
            f.write(_numbered(4))
        assert _collect(fol) == [4]
        os.rename(p, str(p) + ".1")
        p.write_bytes(b"".join(_numbered(i) for i in range(5, 40)))
        assert _collect(fol) == list(range(5, 40))
        assert [e.kind for e in fol.events] == ["rotated"]


# ---------------------------------------------------------------------------------------------
# the sandbox server's own log


@pytest.mark.slow
def test_sandbox_server_log(tmp_path, free_port, monkeypatch, cli):
    from workbench.sandbox_box import sandbox_launch_command

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "box-state"))
    box = connect("local")
    results = {}
    for algorithm in ("EAGLE", "EAGLE3"):
        log = tmp_path / f"{algorithm}.log"
        argv = shlex.split(sandbox_launch_command(algorithm=algorithm, port=free_port, decode_log_interval=8))
        handle = box.launch_server(argv, port=free_port, log_path=log)
        try:
            box.wait_healthy(handle, timeout=240)
            for text in ("def main():\n    ", "import os\n", "class Box:\n    def "):
                reply = httpx.post(box.url(free_port) + "/generate", timeout=120, trust_env=False,
                                   json={"text": text, "sampling_params": {"max_new_tokens": 48, "temperature": 0}})
                assert reply.status_code == 200, reply.text
        finally:
            box.stop_server(handle)
        code, out, err = cli("logs", str(log), "--json", "--decode-log-interval", "8")
        results[algorithm] = (code, json.loads(out) if out else None, err)
        # the sandbox's lines are SGLang 0.5.23's: both parsers agree on every one of them
        assert_fast_equals_complete(log.read_bytes())
    code, eagle, err = results["EAGLE"]
    assert eagle is not None, err
    assert eagle["speculative"] and eagle["spec_lines"] >= 3 and eagle["prefill_lines"] >= 3
    # the wrong flag: most windows accept nothing (a few easy prefixes still do)
    assert eagle["accept_len"]["median"] == 1.0 and eagle["accept_len"]["min"] == 1.0
    assert eagle["accept_rate"]["median"] == 0.0
    code3, eagle3, err = results["EAGLE3"]
    assert eagle3 is not None, err
    assert eagle3["speculative"] and eagle3["accept_len"]["median"] > 2 * eagle["accept_len"]["median"]
    assert code3 == 0 and not eagle3["collapsed"]
    # the rule on the log: the mean accept len over lines x 8 verify steps, exit 1 when it fires
    for c, doc in ((code, eagle), (code3, eagle3)):
        fired = doc["accept_len"]["mean"] <= 1.05 and doc["spec_lines"] * 8 >= 20
        assert doc["collapsed"] == fired and c == (1 if fired else 0)


def test_cli_says_what_the_printed_accept_rate_means_by_release(cli):
    """The printed ``accept rate`` changed meaning twice (0.5.4–0.5.5 τ/(steps+1), 0.5.6–0.5.10 τ/D,
    0.5.12 on correct/proposed: ``workbench.logs.formats``); a log does not say its release, so
    ``workbench logs`` says what the number means on which release instead of passing it off as one."""
    code, out, _ = cli("logs", str(LOGS / "sglang-0.5.5.log"))
    assert code == 0 and "accept rate is as the server printed it; its meaning depends on the release" in out
    assert "0.5.4–0.5.5: accepted tokens (bonus included) / (verify steps × (speculative_num_steps + 1))" in out
    assert "0.5.12 on: correct drafts / (verify steps × (speculative_num_draft_tokens − 1))" in out
    code, out, _ = cli("logs", str(LOGS / "sglang-0.5.5.log"), "--json")
    assert json.loads(out)["accept_rate_meaning"].startswith("as printed by the server; by release: 0.5.4–0.5.5:")
    code, out, _ = cli("logs", str(LOGS / "sglang-0.4.3.log"))  # no accept rate on the lines: no note
    assert code == 0 and "its meaning depends on the release" not in out
