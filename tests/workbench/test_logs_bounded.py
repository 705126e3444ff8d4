"""Bounded memory on any log: no reader holds more than ``MAX_LINE`` (64 KiB) of one line.

Fast tests check every reader on small logs with long lines (the line cut to its head and the mark
with its real length, the lines around it read as before); the slow ones measure the peak RSS of
``workbench logs --last 10`` (locally and over the loopback sshd), of a whole-log scan and of a
measurement's decode-record read on a real 500 MB single-line log.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remote import connect
from remote.errors import RemoteFileNotFound
from workbench.logs.bounded import MARK_ROOM
from testkit.engine_copy import checkout_dir
from workbench.logs import (
    MAX_LINE,
    LineCapper,
    LogFollower,
    LogScanner,
    cap_lines,
    cut_length,
    parse_log,
    read_decode_records,
    scan_file,
    tail_box,
    tail_bytes,
)

REPO = Path(__file__).resolve().parents[2]


def decode_line(i: int, accept: float = 2.5) -> bytes:
    return (f"[2026-07-01 12:00:{i:02d}] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, "
            f"accept len: {accept:.2f}, gen throughput (token/s): 10.00, #queue-req: 0").encode()


def cut(line: bytes, max_line: int = MAX_LINE) -> bytes:
    """The reference: what a reader keeps of ``line``."""
    if len(line) <= max_line:
        return line
    return line[:max_line] + b" [eagle-workbench: line cut at %d of %d bytes]" % (max_line, len(line))


def test_line_capper_matches_the_reference_for_any_split():
    rnd = random.Random(7)
    for _ in range(400):
        lines = [bytes([rnd.choice(b"ab")]) * rnd.choice([0, 1, 9, 10, 11, 40]) for _ in range(rnd.randint(0, 6))]
        data = b"\n".join(lines) + rnd.choice([b"", b"\n"])
        capper, got, pos = LineCapper(10), b"", 0
        while pos < len(data):
            step = rnd.randint(1, 13)
            got += capper.feed(data[pos:pos + step])
            assert len(capper.held) <= 11 + MARK_ROOM
            pos += step
        tail = capper.flush()
        want_lines = data.split(b"\n")
        finished, last = want_lines[:-1], want_lines[-1]
        assert got == b"".join(cut(x, 10) + b"\n" for x in finished)
        assert tail == cut(last, 10)
    assert cap_lines(b"abc\n" + b"x" * 30 + b"\n", 10) == b"abc\n" + cut(b"x" * 30, 10) + b"\n"
    assert cut_length(cut(b"x" * 30, 10)) == 30 and cut_length(b"x" * 30) is None


def test_scanner_reads_around_a_long_line_and_records_its_length(tmp_path):
    big = b"[2026-07-01 12:00:03] a printed tensor: " + b"7" * (3 * MAX_LINE)
    lines = [decode_line(1), decode_line(2), big, decode_line(4, 3.0), b"Decode batch, #running-req: " + b"9" * MAX_LINE]
    p = tmp_path / "server.log"
    p.write_bytes(b"\n".join(lines) + b"\n")
    s = scan_file(str(p), block=1000)  # the long lines cross many blocks
    assert (s.lines, s.decode_lines, s.cut_count) == (5, 4, 2)  # the cut decode line still scanned
    assert s.cut_lines == [(3, len(big)), (5, len(lines[4]))]
    assert s.accept_len.count == 3 and s.accept_len.max == 3.0
    assert f"line 3 ({len(big):,} bytes)" in " ".join(s.notes)
    assert s.to_dict()["cut_lines"][0] == {"line": 3, "bytes": len(big)}

    sc = LogScanner()  # an unfinished long last line is held as its head only
    sc.feed(decode_line(1) + b"\n" + b"z" * (5 * MAX_LINE))
    assert len(sc.held) == MAX_LINE + 1 + MARK_ROOM and sc.held_length == 5 * MAX_LINE
    sc.finish()
    assert sc.cut_lines == [(2, 5 * MAX_LINE)]


def test_tail_and_follow_and_decode_records_cut_a_long_line(tmp_path):
    big = b"[2026-07-01 12:00:03] dump: " + b"q" * (2 * MAX_LINE + 5)
    p = tmp_path / "server.log"
    p.write_bytes(b"\n".join([decode_line(1), big, decode_line(4, 3.5)]) + b"\n")
    with connect("local") as box:
        data, end = tail_bytes(box, str(p), 2)
        assert end == p.stat().st_size and data == cut(big) + b"\n" + decode_line(4, 3.5) + b"\n"
        s = tail_box(box, str(p), 10)
        assert (s.lines, s.decode_lines, s.cut_lines) == (3, 2, [(2, len(big))])
        assert [r.accept_len for r in read_decode_records(box, str(p), 0, block=4096)] == [2.5, 3.5]
        assert [r.accept_len for r in read_decode_records(box, str(p), len(decode_line(1)) + 1)] == [3.5]
        assert [r.accept_len for r in read_decode_records(box, str(p), 10**9)] == [2.5, 3.5]  # shorter: from 0
        assert read_decode_records(box, str(tmp_path / "gone.log"), 0, missing_ok=True) == []
        with pytest.raises(RemoteFileNotFound):
            read_decode_records(box, str(tmp_path / "gone.log"), 0)

        follower = LogFollower(box, str(p), offset=0, max_bytes=50_000)
        got = b""
        for _ in range(20):
            got += follower.poll()
            assert len(follower.held) <= MAX_LINE + 1 + MARK_ROOM
        assert got == decode_line(1) + b"\n" + cut(big) + b"\n" + decode_line(4, 3.5) + b"\n"
        with p.open("ab") as f:  # a long unfinished line while following: held as its head only
            f.write(b"w" * (3 * MAX_LINE))
        assert [follower.poll() for _ in range(6)] == [b""] * 6  # 50 kB per poll
        assert len(follower.held) == MAX_LINE + 1 + MARK_ROOM and follower._capper.held_length == 3 * MAX_LINE


# -- the 500 MB line, measured --------------------------------------------------------------------

BIG = 500_000_000

#: Runs argv[1:] as a child and prints its peak RSS (KiB, getrusage of the children) and exit code.
PEAK = textwrap.dedent("""\
    import json, resource, subprocess, sys
    p = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=600)
    print(json.dumps({"rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "code": p.returncode,
                      "out": p.stdout[-4000:], "err": p.stderr[-2000:]}))
""")

DECODE_READER = ("import sys; from remote import connect; from workbench.logs import read_decode_records; "
                 "box = connect('local'); print([r.accept_len for r in read_decode_records(box, sys.argv[1], 0)])")


def _peak(argv: list[str], env=None) -> dict:
    out = subprocess.run([sys.executable, "-c", PEAK, *argv], capture_output=True, text=True, timeout=900, env=env,
                         cwd=checkout_dir())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def huge_log(tmp_path):
    """A real log with one 500 MB line (its body a sparse hole: written fast, little disk) between
    decode lines; deleted after."""
    p = tmp_path / "huge.log"
    head = b"\n".join(decode_line(i) for i in range(1, 4)) + b"\n" + b"[2026-07-01 12:00:04] tensor: "
    tail = b"\n" + b"\n".join(decode_line(i, 3.0) for i in range(5, 10)) + b"\n"
    with p.open("wb") as f:
        f.write(head)
        f.seek(len(head) + BIG - len(b"[2026-07-01 12:00:04] tensor: "))
        f.write(tail)
    small = tmp_path / "small.log"
    small.write_bytes(head + b"short\n" + tail[1:])
    yield p, small, BIG
    p.unlink()


def _growth(big: dict, small: dict) -> int:
    assert big["code"] == 0 and small["code"] == 0, (big["err"], small["err"])
    return (big["rss_kib"] - small["rss_kib"]) * 1024


@pytest.mark.slow
def test_last_10_of_a_500_mb_line_log_stays_bounded_locally(huge_log):
    big_path, small_path, length = huge_log
    cli = [sys.executable, "-m", "workbench.cli.logs"]
    big, small = _peak(cli + [str(big_path), "--last", "10"]), _peak(cli + [str(small_path), "--last", "10"])
    grew = _growth(big, small)
    print(f"local --last 10: peak RSS {big['rss_kib'] / 1024:.1f} MiB vs {small['rss_kib'] / 1024:.1f} MiB "
          f"on a small log: +{grew / 2**20:.1f} MiB")
    assert grew < 100 * 2**20
    assert f"line 4 ({length:,} bytes)" in big["out"] and "1 line(s) longer than 64 KiB" in big["out"]
    assert "9 lines" in big["out"] or "lines         9" in big["out"] or '"lines": 9' in big["out"], big["out"]

    whole, whole_small = _peak(cli + [str(big_path)]), _peak(cli + [str(small_path)])
    grew = _growth(whole, whole_small)
    print(f"local whole scan: +{grew / 2**20:.1f} MiB")
    assert grew < 100 * 2**20 and f"line 4 ({length:,} bytes)" in whole["out"]

    rec, rec_small = (_peak([sys.executable, "-c", DECODE_READER, str(p)]) for p in (big_path, small_path))
    grew = _growth(rec, rec_small)
    print(f"local read_decode_records: +{grew / 2**20:.1f} MiB")
    assert grew < 100 * 2**20
    assert rec["out"].strip() == str([2.5] * 3 + [3.0] * 5) == rec_small["out"].strip()


@pytest.mark.slow
def test_last_10_of_a_500_mb_line_log_stays_bounded_over_ssh(huge_log, ssh_env):
    big_path, small_path, length = huge_log
    cli = [sys.executable, "-m", "workbench.cli.logs"]
    big = _peak(cli + [str(big_path), "--last", "10", "--host", ssh_env.alias])
    small = _peak(cli + [str(small_path), "--last", "10", "--host", ssh_env.alias])
    grew = _growth(big, small)
    print(f"ssh --last 10: peak RSS {big['rss_kib'] / 1024:.1f} MiB, +{grew / 2**20:.1f} MiB over a small log")
    assert grew < 100 * 2**20
    assert f"line 4 ({length:,} bytes)" in big["out"]


def test_scanner_fed_in_any_blocks_matches_the_line_parser_on_the_cut_lines():
    rnd = random.Random(3)
    for trial in range(25):
        lines = []
        for i in range(rnd.randint(1, 30)):
            kind = rnd.random()
            if kind < 0.6:
                lines.append(decode_line(i % 60, rnd.choice([1.0, 2.5, 3.25])))
            elif kind < 0.8:
                lines.append(b"[2026-07-01 12:00:00] blob " + b"b" * rnd.choice([10, MAX_LINE - 27, MAX_LINE, 3 * MAX_LINE]))
            else:
                lines.append(decode_line(i % 60, 4.0) + b" " + b"p" * rnd.choice([MAX_LINE, 2 * MAX_LINE]))
        data = b"\n".join(lines) + rnd.choice([b"", b"\n"])
        sc, pos = LogScanner(), 0
        while pos < len(data):
            step = rnd.choice([1, 7, 4096, MAX_LINE - 1, MAX_LINE + 3, 1 << 20])
            sc.feed(data[pos:pos + step])
            pos += step
        sc.finish()
        s = sc.summary()
        kept = [cut(x) for x in lines]
        want = [r.accept_len for r in parse_log(kept).decode]
        assert (s.lines, s.decode_lines, s.bytes) == (len(lines), len(want), len(data)), trial
        if want:
            assert s.accept_len.count == len(want) and s.accept_len.mean == pytest.approx(sum(want) / len(want))
        else:
            assert s.accept_len is None
        assert s.cut_lines == [(i + 1, len(x)) for i, x in enumerate(lines) if len(x) > MAX_LINE][:20]
