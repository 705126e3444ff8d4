"""Bounded log lines: no reader of the workbench holds more than :data:`MAX_LINE` bytes of one line.

A line longer than ``MAX_LINE`` (64 KiB) is kept as its first ``MAX_LINE`` bytes followed by
``" [eagle-workbench: line cut at 65536 of N bytes]"`` (:func:`remote.box.cut_mark`; ``N`` its real
length, read back by :func:`cut_length`), wherever it is read: the last N lines
(:func:`remote.box.tail_lines`, ``Box.tail``, :func:`workbench.logs.tail_bytes`), a whole log
(:class:`workbench.logs.LogScanner`), a followed one (:class:`workbench.logs.LogFollower`) and the
decode records a measurement reads (:func:`workbench.logs.read_decode_records`). One 500 MB line
(a printed tensor, a dump) then costs 64 KiB, and the other lines around it are still read.

:class:`LineCapper` splits a stream of byte blocks into complete, capped lines, holding at most
``MAX_LINE + 97`` bytes of the unfinished one; :func:`cap_lines` caps the lines of one block.
"""

from __future__ import annotations

from typing import Union

import numpy as np

from remote.box import MAX_LINE, cut_length, cut_line, cut_mark, tail_lines

__all__ = ["MAX_LINE", "cut_mark", "cut_length", "cut_line", "tail_lines", "cap_lines", "LineCapper"]

Buffer = Union[bytes, bytearray, memoryview]
#: Room for a cut mark after ``max_line`` bytes: a line cut once (by a tail, a follower) passes
#: through again unchanged, its mark (and real length) kept.
MARK_ROOM = 96


def _already_cut(line: bytes, max_line: int) -> bool:
    return len(line) <= max_line + MARK_ROOM and cut_length(line) is not None


def _may_hold_long_line(data: bytes, max_line: int, start: int = 0, end: int | None = None) -> bool:
    """False when every aligned piece of ``max_line // 2`` bytes of ``data[start:end]`` holds a
    newline: then no two newlines are ``max_line`` or more apart (one ``find`` per piece, each
    stopping at the piece's first newline: cheap next to a scan)."""
    end = len(data) if end is None else end
    h = max(1, max_line // 2)
    return any(data.find(b"\n", i, min(i + h, end)) < 0 for i in range(start, end, h))


def _cap_range(data: bytes, start: int, end: int, max_line: int) -> list[tuple[bytes, int, int]]:
    """The pieces ``(buffer, start, end)``, in order, of ``data[start:end]`` (complete lines) with
    every line longer than ``max_line`` cut to its head and :func:`cut_mark`; nothing is copied
    when no line needs it."""
    if end - start <= max_line or not _may_hold_long_line(data, max_line, start, end):
        return [(data, start, end)]
    arr = np.frombuffer(data, np.uint8, count=end - start, offset=start)
    ends = np.flatnonzero(arr == 10)
    if len(ends) == 0 or ends[-1] != len(arr) - 1:
        ends = np.append(ends, len(arr))
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    long = np.flatnonzero(ends - starts > max_line)
    out: list[tuple[bytes, int, int]] = []
    pos = start
    for i in long:
        a, b = start + int(starts[i]), start + int(ends[i])
        if _already_cut(data[a:b], max_line):
            continue
        line = data[a:a + max_line] + cut_mark(max_line, b - a) + data[b:b + 1]  # one piece, its newline too
        out += [(data, pos, a), (line, 0, len(line))]
        pos = b + 1
    out.append((data, pos, end))
    return [p for p in out if p[2] > p[1]]


def cap_lines(block: Buffer, max_line: int = MAX_LINE) -> bytes:
    """``block`` (complete lines, each ending in ``\\n``) with every line longer than ``max_line``
    bytes cut to its head and :func:`cut_mark` (a line that is already a head and its mark is kept
    as it is). A block with no line that long is returned as it is."""
    data = bytes(block)
    return b"".join(buf[a:b] for buf, a, b in _cap_range(data, 0, len(data), max_line))


class LineCapper:
    """Complete lines out of a stream of blocks, each line at most ``max_line`` bytes plus its
    :func:`cut_mark`. :meth:`feed` returns the complete lines (bytes, each ending in ``\\n``) the
    block finished; the unfinished last line is held, at most ``max_line + 1 + MARK_ROOM`` bytes
    of it (``held``) with its real length so far (``held_length``); :meth:`flush` returns it (capped,
    without a newline) and forgets it."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        if max_line < 1:
            raise ValueError(f"max_line must be >= 1, got {max_line}")
        self.max_line = max_line
        self.held = b""
        self.held_length = 0

    def _hold(self, data: Buffer) -> None:
        room = self.max_line + 1 + MARK_ROOM - len(self.held)
        if room > 0 and len(data):
            self.held += bytes(data[:room])
        self.held_length += len(data)

    def _finish_held(self, rest: Buffer) -> bytes:
        self._hold(rest)
        line, length = self.held, self.held_length
        self.held, self.held_length = b"", 0
        if length <= self.max_line or _already_cut(line[:length], self.max_line):
            return line
        return line[: self.max_line] + cut_mark(self.max_line, length)

    def feed(self, data: Buffer) -> bytes:
        """The complete lines ``data`` finishes (with the held line's end first), capped."""
        return b"".join(buf[a:b] for buf, a, b in self.feed_parts(data))

    def feed_parts(self, data: Buffer) -> list[tuple[bytes, int, int]]:
        """:meth:`feed` as pieces ``(buffer, start, end)`` (``buffer`` is ``data`` itself when it is
        ``bytes``, or a cut line's head and mark); ``buffer[start:end]`` joined is what :meth:`feed`
        returns. A block whose lines need no cut is not copied."""
        raw = data if isinstance(data, bytes) else bytes(data)
        if not raw:
            return []
        first = raw.find(b"\n")
        if first < 0:
            self._hold(raw)
            return []
        head = self._finish_held(raw[:first]) + b"\n"
        last = raw.rfind(b"\n")
        parts = [(head, 0, len(head))] + (_cap_range(raw, first + 1, last + 1, self.max_line) if last > first else [])
        self._hold(memoryview(raw)[last + 1 :])
        return parts

    def flush(self) -> bytes:
        """The held unfinished line, capped (no newline); ``b""`` when none. Forgets it."""
        if not self.held_length:
            return b""
        return self._finish_held(b"")
