"""ServerLogFollower on real files of the local box: grows, truncation, rotation (rename + new
file), a new path (server restart), no server, and the first-open bound."""

from __future__ import annotations

import os

from remote import connect
from workbench.logs import ServerLogFollower


def _box():
    return connect("local")


def test_follows_growth_then_new_path_then_none(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("one\ntwo\n")
    cur = {"p": str(a)}
    with _box() as box:
        f = ServerLogFollower(box, lambda: cur["p"])
        u = f.poll()
        assert u.lines == ["one", "two"] and u.notes == [] and u.path == str(a)
        with open(a, "a") as fh:
            fh.write("three\npart")
        assert f.poll().lines == ["three"]
        with open(a, "a") as fh:
            fh.write("ial\n")
        assert f.poll().lines == ["partial"]
        assert f.poll().lines == []
        b.write_text("new server 1\nnew server 2\n")
        cur["p"] = str(b)
        u = f.poll()
        assert u.notes == [f"server restarted: now {b}"]
        assert u.lines == ["new server 1", "new server 2"]  # a new server's log is read whole
        cur["p"] = None
        u = f.poll()
        assert u.lines == [] and u.path is None and u.notes == ["no server log (no server running)"]
        assert f.poll().notes == []  # said once


def test_truncation_and_rotation_start_again_from_the_top(tmp_path):
    a = tmp_path / "s.log"
    a.write_text("".join(f"2026-12-01 10:00:{i:02d} line {i}\n" for i in range(20)))
    with _box() as box:
        f = ServerLogFollower(box, lambda: str(a))
        assert len(f.poll().lines) == 20
        a.write_text("after truncate\n")  # truncated in place (shorter)
        u = f.poll()
        assert u.lines == ["after truncate"]
        assert len(u.notes) == 1 and u.notes[0].startswith("log rotated/truncated")
        with open(a, "a") as fh:
            fh.write("old tail\n")
        os.rename(a, str(a) + ".1")  # rotation: rename, then a new file at the path
        a.write_text("fresh 1\n")
        u = f.poll()
        assert u.lines == ["old tail", "fresh 1"]  # the old file's unread end first, nothing lost
        assert u.notes == [f"log rotated (old end read from {a}.1)"]


def test_first_open_reads_only_the_last_bytes_and_drops_the_cut_line(tmp_path):
    a = tmp_path / "big.log"
    a.write_text("".join(f"line {i:05d}\n" for i in range(10000)))  # 11 bytes a line
    with _box() as box:
        f = ServerLogFollower(box, lambda: str(a), first_bytes=1000)
        lines = f.poll().lines
        assert lines[-1] == "line 09999"
        assert all(ln.startswith("line ") and len(ln) == 10 for ln in lines)
        assert len(lines) == 1000 // 11  # 90 whole lines inside the last 1000 bytes
