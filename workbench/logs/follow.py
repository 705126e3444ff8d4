"""SGLang server logs, followed: :class:`LogFollower` (the new complete lines of a growing file on a
box, across truncation and rotation, by a fingerprint of the bytes before the read offset) and
:class:`FollowEvent` (each boundary it crossed, and what could not be read).

Imports :mod:`workbench.logs.read` (``_check_file``; and :mod:`remote.errors` lazily). It hands
back bytes; feeding them to a :class:`workbench.logs.scanner.LogScanner` is the caller's part
(``workbench logs --follow``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from workbench.logs.bounded import MAX_LINE, LineCapper
from workbench.logs.read import _check_file


@dataclass
class FollowEvent:
    """Something that happened to the followed file between two polls.

    ``kind``: ``truncated`` (the file at the path is shorter than what was read, or its bytes
    before the read offset changed, and no rotated copy holds the old content), ``rotated`` (the
    old content was found at ``rotated_to`` and its unread end was read from there), ``missing``
    (no file at the path; nothing lost yet); ``offset``: bytes read from the old file;
    ``size``: the new file's size; ``drained``: bytes read from the rotated copy; ``lost``: what
    could not be read (``None`` when nothing): the old file's unread end when no rotated copy was
    found, an unfinished last line."""

    kind: str
    path: str
    offset: int
    size: int | None = None
    rotated_to: str | None = None
    drained: int = 0
    lost: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class LogFollower:
    """New complete lines of a log that keeps growing, across truncation and rotation.

    Each :meth:`poll` calls ``Box.follow`` once (one stat and one read, ``timeout`` seconds each)
    starting ``fingerprint`` bytes before the read offset: those bytes must be the ones read
    last time. When they are not, or the file is now shorter than the offset, the file was
    truncated or replaced (rotation: a new file at the path, even one already larger than the old
    offset). Then the old file's unread end is looked for under the rotation names
    (``path + suffix`` for ``rotated_suffixes``, default ``.1``: logging's RotatingFileHandler and
    logrotate, ``copytruncate`` included), recognised by the same fingerprint, and read first; then
    the new file from byte 0. So no line is counted twice and none skipped when the old content is
    still on the box; a :class:`FollowEvent` records each boundary (and what could not be read).

    ``offset``: where to start (default: the file's current end, or 0 when it does not exist);
    a line is returned only once its newline has arrived (the unfinished end is held: ``held``,
    at most ``max_line`` + 97 bytes of it; a longer line is returned as its first ``max_line``
    bytes and ``" [eagle-workbench: line cut at M of N bytes]"``, :mod:`workbench.logs.bounded`);
    ``max_bytes``: at most this many new bytes per poll (the rest next time; default 8 MiB, so a
    poll holds a bounded number of bytes whatever the log). No inode is used
    (SFTP has none), so a replacement file whose bytes before the offset are identical to the old
    ones is not told apart; with ``fingerprint`` = 256 bytes of timestamped log lines that does
    not happen.
    """

    def __init__(self, box: Any, path: str, *, offset: int | None = None, timeout: float = 30.0,
                 max_bytes: int = 8 << 20, fingerprint: int = 256, rotated_suffixes: Sequence[str] = (".1",),
                 max_line: int = MAX_LINE):
        from remote.errors import RemoteFileNotFound

        self.box, self.path, self.timeout = box, path, timeout
        self.max_bytes, self.fp_len = max_bytes, fingerprint
        self.rotated_suffixes = tuple(rotated_suffixes)
        self.events: list[FollowEvent] = []
        self._capper = LineCapper(max_line)
        self._fp = b""
        self._missing = False
        if offset is None:
            try:
                offset = _check_file(box, path, timeout)
            except RemoteFileNotFound:
                offset = 0
        self.offset = int(offset)
        if self.offset:
            start = max(0, self.offset - self.fp_len)
            self._fp = box.read_bytes(path, start, self.offset - start, timeout=timeout)
            if len(self._fp) != self.offset - start:
                raise ValueError(f"offset {self.offset} is beyond the end of {path}")

    @property
    def held(self) -> bytes:
        """The unfinished last line (bytes after the last newline; its first ``max_line`` + 97 at
        most), not returned yet."""
        return self._capper.held

    def _read(self, path: str, start: int, limit: int) -> tuple[bytes, int]:
        return self.box.follow(path, start, max_bytes=limit, timeout=self.timeout)

    def poll(self) -> bytes:
        """The complete new lines (bytes, each ending with ``\\n``) since the last poll; ``b""``
        when none. Raises the box's errors other than a missing file (a missing file is an event)."""
        fp = self._fp
        start = self.offset - len(fp)
        data, nxt = self._read(self.path, start, self.max_bytes + len(fp))
        if not data and nxt == start:
            if start == self.offset:        # nothing new (or no file yet, before anything was read)
                return b""
            if not self._exists():          # mid-rotation: no file at the path right now
                if not self._missing:
                    self.events.append(FollowEvent("missing", self.path, self.offset))
                    self._missing = True
                return b""
        self._missing = False
        if nxt - len(data) == start and len(data) >= len(fp) and data[: len(fp)] == fp:
            new = data[len(fp):]
            out = self._take(new)
            self.offset = nxt
            self._fp = (fp + new)[-self.fp_len:] if self.fp_len else b""
            return out
        # truncated or replaced: the old file's end first (when a rotated copy has it), then the new file
        out = self._boundary()
        data, nxt = self._read(self.path, 0, self.max_bytes)
        out += self._take(data)
        self.offset = nxt
        self._fp = data[-self.fp_len:] if self.fp_len else b""
        return out

    def _exists(self) -> bool:
        return self.box.exists(self.path, timeout=self.timeout)

    def _take(self, new: bytes) -> bytes:
        return self._capper.feed(new)

    def _drop_held(self) -> int:
        """Forget the unfinished line; its real length."""
        length = self._capper.held_length
        self._capper.held, self._capper.held_length = b"", 0
        return length

    def _boundary(self) -> bytes:
        from remote.errors import RemoteFileNotFound

        size = None
        try:
            size = self.box.stat(self.path, timeout=self.timeout).size
        except RemoteFileNotFound:
            size = None
        fp = self._fp
        start = self.offset - len(fp)
        for suffix in self.rotated_suffixes if fp else ():
            cand = self.path + suffix
            try:
                data, nxt = self._read(cand, start, self.max_bytes + len(fp))
            except RemoteFileNotFound:
                continue
            if nxt - len(data) != start or len(data) < len(fp) or data[: len(fp)] != fp:
                continue
            out, got = [self._take(data[len(fp):])], len(data) - len(fp)
            while True:  # the rest of the old file's end, in max_bytes pieces (never held whole)
                data, nxt = self._read(cand, nxt, self.max_bytes)
                if not data:
                    break
                out.append(self._take(data))
                got += len(data)
            lost = None
            held = self._drop_held()
            if held:
                lost = f"an unfinished last line of {held} bytes in {cand}"
            self.events.append(FollowEvent("rotated", self.path, self.offset, size, cand, got, lost))
            return b"".join(out)
        lost_parts = []
        held = self._drop_held()
        if held:
            lost_parts.append(f"an unfinished line of {held} bytes")
        lost_parts.append("whatever the old file gained after byte "
                          f"{self.offset} (no rotated copy at {', '.join(self.path + s for s in self.rotated_suffixes)})")
        self.events.append(FollowEvent("truncated", self.path, self.offset, size, None, 0, "; ".join(lost_parts)))
        return b""

    def lines(self) -> list[str]:
        """:meth:`poll` as text lines (UTF-8, undecodable bytes replaced; line endings removed)."""
        data = self.poll()
        return [ln.rstrip("\r") for ln in data.decode("utf-8", "replace").split("\n")[:-1]] if data else []


@dataclass
class TailUpdate:
    """What one :meth:`ServerLogFollower.poll` found: ``lines`` (new complete text lines, line
    endings removed), ``notes`` (human sentences for each boundary crossed: ``"server restarted:
    now <path>"``, ``"log rotated"``, ``"log truncated"``, ``"no server log"``) and ``path`` (the
    log followed now, ``None`` when there is none)."""

    lines: list[str]
    notes: list[str]
    path: str | None


class ServerLogFollower:
    """The log of whatever server runs now, followed across restarts, rotation and truncation.

    ``path_fn()`` names the current log (``str``) or ``None`` (no server); it is called on every
    :meth:`poll`, so when a restart gives a new log file the follower switches to it, starting at
    its byte 0 (a new server's log is read whole), and says ``"server restarted: now <path>"``.
    The first log seen is read from its last ``first_bytes`` bytes (default 256 KiB; the partial
    line at that cut is dropped). Within one path, rotation and truncation are
    :class:`LogFollower`'s (its events become ``"log rotated"`` / ``"log truncated"`` notes).
    ``max_bytes`` bounds the bytes read per poll. Raises the box's errors other than a missing file.
    """

    def __init__(self, box: Any, path_fn, *, first_bytes: int = 256 << 10, max_bytes: int = 1 << 20,
                 timeout: float = 30.0):
        self.box, self.path_fn, self.timeout = box, path_fn, timeout
        self.first_bytes, self.max_bytes = int(first_bytes), int(max_bytes)
        self.path: str | None = None
        self.follower: LogFollower | None = None
        self._seen_any = False
        self._drop_first_partial = False
        self._no_log_said = False

    def _open(self, path: str) -> LogFollower:
        from remote.errors import RemoteFileNotFound

        offset = 0
        if not self._seen_any:
            try:
                size = self.box.stat(path, timeout=self.timeout).size
            except RemoteFileNotFound:
                size = 0
            offset = max(0, size - self.first_bytes)
            self._drop_first_partial = offset > 0
        self._seen_any = True
        return LogFollower(self.box, path, offset=offset, timeout=self.timeout, max_bytes=self.max_bytes)

    def poll(self) -> TailUpdate:
        """One look at the box: the new lines since the last poll, and the notes."""
        notes: list[str] = []
        path = self.path_fn()
        if path is None:
            if not self._no_log_said:
                notes.append("no server log (no server running)")
                self._no_log_said = True
            self.path, self.follower = None, None
            return TailUpdate([], notes, None)
        self._no_log_said = False
        if path != self.path or self.follower is None:
            if self._seen_any:
                notes.append(f"server restarted: now {path}")
            self.follower = self._open(path)
            self.path = path
        before = len(self.follower.events)
        lines = self.follower.lines()
        if self._drop_first_partial and lines:
            lines = lines[1:]
            self._drop_first_partial = False
        for ev in self.follower.events[before:]:
            if ev.kind == "rotated":
                notes.append(f"log rotated (old end read from {ev.rotated_to})")
            elif ev.kind == "truncated":
                notes.append("log rotated/truncated: reading again from the top"
                             + (f" (lost: {ev.lost})" if ev.lost else ""))
            elif ev.kind == "missing":
                notes.append(f"log {ev.path} is missing (waiting for it)")
        return TailUpdate(lines, notes, path)


#: A log that did not grow for this long (seconds) after the request that prints into it returned
#: holds every line of that request: the server writes them before or just after its answer.
SETTLE_QUIET_S = 0.5
#: A log that did not grow for this long (seconds) while the lines looked for are still missing:
#: the server printed nothing more, the lines are not coming (a stall measured, not a total time).
SETTLE_STALL_S = 10.0


def read_when_settled(box: Any, path: str, read, *, done=None, quiet_s: float = SETTLE_QUIET_S,
                      stall_s: float = SETTLE_STALL_S, poll_s: float = 0.2, timeout: float = 30.0,
                      max_s: float = 120.0) -> tuple[Any, bool]:
    """Read a log a server may still be writing, once it has settled (issue 26: never decide from a
    partial read of a log still being written, and never give up on lines a busy machine delays).

    ``read()`` reads what the caller wants from the log at ``path`` on ``box`` (e.g.
    ``workbench.engine.recipes.read_recipes``); it is called again each time the log grew
    (``Box.file_size``, ``timeout`` seconds each). Returns ``(reading, settled)``: ``settled`` True
    as soon as ``done(reading)`` holds (default: always) and neither the log has grown nor, when it
    grew, the reading changed for ``quiet_s`` seconds since that reading (so lines the reading
    ignores — a load balancer's health checks in the access log, every second — never hold it
    back; a reading whose type has no equality changes at every growth, as before); False when the
    log has not grown for ``stall_s`` seconds and
    ``done`` still does not hold (the lines are not coming: the last reading is returned), or when
    ``max_s`` seconds passed in all (a log that never stops growing). A log that does not exist
    counts as size 0. Errors of ``read`` and of the box propagate (``remote.errors.RemoteError``)."""
    import time

    def size() -> int:
        return box.file_size(path, timeout=timeout) if box.exists(path, timeout=timeout) else 0

    start = last_growth = last_change = time.monotonic()
    last_size = size()
    reading = read()
    while True:
        time.sleep(poll_s)
        now_size = size()
        now = time.monotonic()
        if now_size != last_size:
            last_size, last_growth = now_size, now
            again = read()
            if again != reading:
                last_change = now
            reading = again
        ok = done(reading) if done is not None else True
        if ok and now - last_change >= quiet_s:
            return reading, True
        if now - last_growth >= stall_s or now - start >= max_s:
            return reading, bool(ok)
