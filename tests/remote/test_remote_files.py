"""Box file primitives: line ranges, byte ranges, atomic writes, hashes, tail and follow."""

import hashlib
import os
import re
import stat

import pytest

from remote.box import MAX_LINE
from remote.errors import (
    RemoteFileDecodeError,
    RemoteFileNotFound,
    RemoteIsADirectory,
)

ODD_NAME = "dir with space/it's \"quoted\" file.txt"


@pytest.fixture
def odd_path(tmp_path):
    p = tmp_path / ODD_NAME
    p.parent.mkdir()
    return p


def test_read_lines_range_is_one_based_and_inclusive(box, odd_path):
    odd_path.write_text("one\ntwo\r\nthree\nfour")
    assert box.read_lines(odd_path, 2, 3) == [(2, "two"), (3, "three")]
    assert box.read_lines(odd_path) == [(1, "one"), (2, "two"), (3, "three"), (4, "four")]
    assert box.read_lines(odd_path, 4, 10) == [(4, "four")]
    assert box.read_lines(odd_path, 9) == []
    with pytest.raises(ValueError):
        box.read_lines(odd_path, 0)


def test_read_lines_stops_reading_after_the_range(box, tmp_path, read_counter):
    big = tmp_path / "big.txt"
    big.write_bytes(b"".join(b"line %d\n" % i for i in range(600_000)))  # ~6 MB
    assert box.read_lines(big, 10, 12) == [(10, "line 9"), (11, "line 10"), (12, "line 11")]
    assert read_counter.bytes < big.stat().st_size / 4


def test_read_bytes_reads_a_range(box, tmp_path, read_counter):
    p = tmp_path / "blob.bin"
    p.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    assert box.read_bytes(p, 10, 5) == bytes([10, 11, 12, 13, 14])
    assert read_counter.bytes == 5
    assert box.read_bytes(p, 1 << 20, 10) == b""
    assert box.read_bytes(p, (1 << 20) - 2) == bytes([254, 255])


def test_read_text_and_decode_error(box, odd_path):
    odd_path.write_text("héllo\n", encoding="utf-8")
    assert box.read_text(odd_path) == "héllo\n"
    odd_path.write_bytes(b"\xff\xfe bad")
    with pytest.raises(RemoteFileDecodeError) as info:
        box.read_text(odd_path)
    assert ODD_NAME in str(info.value)


def test_missing_file_errors_name_the_path(box, tmp_path):
    missing = tmp_path / "no such file.txt"
    for call in (box.read_text, box.read_lines, box.sha256, box.stat, box.file_size, box.tail):
        with pytest.raises(RemoteFileNotFound) as info:
            call(missing)
        assert str(missing) in str(info.value) and f"[{box.name}]" in str(info.value)
    assert not box.exists(missing)


def test_reading_a_directory_is_a_typed_error(box, tmp_path):
    with pytest.raises(RemoteIsADirectory):
        box.read_bytes(tmp_path)


def test_write_file_is_atomic_keeps_mode_and_leaves_no_temp(box, odd_path):
    odd_path.write_text("old\n")
    os.chmod(odd_path, 0o751)
    box.write_file(odd_path, "new text\n")
    assert odd_path.read_text() == "new text\n"
    assert stat.S_IMODE(odd_path.stat().st_mode) == 0o751
    assert os.listdir(odd_path.parent) == [odd_path.name]
    box.write_file(odd_path, b"\x00bytes", mode=0o600)
    assert odd_path.read_bytes() == b"\x00bytes"
    assert box.stat(odd_path).mode == 0o600


def test_write_file_new_file_default_mode_and_make_dirs(box, tmp_path):
    target = tmp_path / "a" / "b" / "c.txt"
    with pytest.raises(RemoteFileNotFound):
        box.write_file(target, "x")
    box.write_file(target, "x", make_dirs=True)
    assert target.read_text() == "x"
    assert box.stat(target).mode == 0o644


def test_sha256_stat_size_exists(box, odd_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    odd_path.write_bytes(data)
    assert box.sha256(odd_path) == hashlib.sha256(data).hexdigest()
    st = box.stat(odd_path)
    assert st.size == len(data) and st.is_file and not st.is_dir and st.mtime > 0
    assert box.file_size(odd_path) == len(data)
    assert box.exists(odd_path) and box.exists(odd_path.parent)
    assert box.stat(odd_path.parent).is_dir


def test_tail_reads_only_the_end(box, tmp_path, read_counter):
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(b"log line %d\n" % i for i in range(1_000_000)))  # ~15 MB
    assert box.tail(log, 3) == ["log line 999997", "log line 999998", "log line 999999"]
    assert read_counter.bytes <= 64 * 1024


def test_tail_edge_cases(box, tmp_path):
    p = tmp_path / "t.log"
    p.write_text("")
    assert box.tail(p, 5) == []
    p.write_text("a\nb\nc")  # no final newline
    assert box.tail(p, 2) == ["b", "c"]
    assert box.tail(p, 10) == ["a", "b", "c"]
    assert box.tail(p, 0) == []
    long_lines = [str(i) + ("x" * 100_000) for i in range(3)] + ["y" * MAX_LINE]
    p.write_text("\n".join(long_lines) + "\n")
    # a line over MAX_LINE comes back as its head and the cut mark with its real length; one of
    # exactly MAX_LINE bytes whole
    cut = " [eagle-workbench: line cut at 65536 of 100001 bytes]"
    assert box.tail(p, 3) == ["1" + "x" * (MAX_LINE - 1) + cut, "2" + "x" * (MAX_LINE - 1) + cut, "y" * MAX_LINE]
    assert box.read_lines(p, 2, 4) == [(2, "1" + "x" * (MAX_LINE - 1) + cut), (3, "2" + "x" * (MAX_LINE - 1) + cut),
                                      (4, "y" * MAX_LINE)]


def test_follow_new_bytes_and_truncation(box, tmp_path):
    p = tmp_path / "f.log"
    assert box.follow(p, 0) == (b"", 0)  # not there yet
    p.write_bytes(b"first\n")
    data, off = box.follow(p, 0)
    assert (data, off) == (b"first\n", 6)
    assert box.follow(p, off) == (b"", 6)
    with p.open("ab") as f:
        f.write(b"second\n")
    data, off = box.follow(p, off)
    assert (data, off) == (b"second\n", 13)
    p.write_bytes(b"new\n")  # truncated / rotated: shorter than the offset
    assert box.follow(p, off) == (b"new\n", 4)
    with p.open("ab") as f:
        f.write(b"0123456789")
    data, off = box.follow(p, 4, max_bytes=4)
    assert (data, off) == (b"0123", 8)


def test_url(box):
    if box.name.startswith("local"):
        assert box.url(30000) == "http://127.0.0.1:30000"
        assert box.url(8080, host="::1") == "http://[::1]:8080"
    else:  # over SSH: the local end of a port forward, one per (host, port), kept
        url = box.url(30000)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url) and url != "http://127.0.0.1:30000"
        assert box.url(30000) == url
        assert box.url(8080, host="::1") not in (url, "http://[::1]:8080")


def test_remove_and_listdir(box, tmp_path):
    (tmp_path / "b").write_text("")
    (tmp_path / "a").write_text("")
    assert box.listdir(tmp_path) == ["a", "b"]
    box.remove(tmp_path / "a")
    with pytest.raises(RemoteFileNotFound):
        box.remove(tmp_path / "a")
    box.remove(tmp_path / "a", missing_ok=True)
