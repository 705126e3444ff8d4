"""SGLang server logs, read: whole inputs to a :class:`LogSummary`, from memory, a local file or a
box, and the last N lines of a file on a box.

:func:`summarize_bytes` and :func:`scan_file` (bytes in memory, a local file), :func:`read_box`
and :func:`scan_box` (a whole file on a :class:`remote.Box`, in ``BLOCK``-byte ranges, never whole
in memory), :func:`tail_bytes` and :func:`tail_box` (the last N lines, read backwards in
``TAIL_BLOCK`` steps: time independent of the file's size), ``_check_file`` (a box file's size,
a directory refused).

Its own module rather than part of the scanner, for two reasons. This is the I/O (local files,
the box's ``stat`` / ``read_bytes``, :mod:`remote.errors`) and the scanner is pure computation
over the bytes it is handed, so the hot numpy module stays free of file and box concerns. And the
entry points need both :class:`LogScanner` and :class:`LogSummary`: here, above both, they make
no cycle (``summary.py`` cannot import the scanner, which imports it). :mod:`workbench.logs.follow`
uses ``_check_file`` from here.

Imports :mod:`workbench.logs.scanner` and :mod:`workbench.logs.summary` (and
:mod:`remote.errors` lazily, where a box error is raised).
"""

from __future__ import annotations

from typing import Any, Union

from workbench.logs.bounded import LineCapper, tail_lines
from workbench.logs.lines import LogRecord, parse_log_line
from workbench.logs.scanner import LogScanner
from workbench.logs.summary import LogSummary

#: Block size for reading a log: local files and over SSH alike.
BLOCK = 8 << 20


def summarize_bytes(data: Union[bytes, str], *, source: str = "log", **kw: Any) -> LogSummary:
    """:class:`LogSummary` of a log held in memory (text is encoded as UTF-8). ``kw``: see
    :meth:`LogSummary.build`."""
    sc = LogScanner()
    sc.feed(data.encode("utf-8") if isinstance(data, str) else data)
    sc.finish()
    return sc.summary(source=source, **kw)


def scan_file(path: str, *, block: int = BLOCK, **kw: Any) -> LogSummary:
    """:class:`LogSummary` of a local file, read in ``block``-byte pieces (memory stays bounded
    whatever the size). Raises ``OSError`` (missing, a directory, unreadable). ``kw``: see
    :meth:`LogSummary.build`."""
    sc = LogScanner()
    buf = bytearray(block)
    with open(path, "rb", buffering=0) as f:
        while True:
            got = f.readinto(buf)
            if not got:
                break
            sc.feed(buf if got == len(buf) else bytes(buf[:got]))
    sc.finish()
    kw.setdefault("source", str(path))
    return sc.summary(**kw)


def _check_file(box: Any, path: str, timeout: float) -> int:
    """Size of ``path`` on the box; raises ``RemoteIsADirectory`` for a directory and the box's
    file errors (``RemoteFileNotFound`` ...) otherwise."""
    from remote.errors import RemoteIsADirectory

    st = box.stat(path, timeout=timeout)
    if st.is_dir:
        raise RemoteIsADirectory("a directory, not a log file", path=path, box=box.name)
    return st.size


def read_box(box: Any, path: str, scanner: LogScanner, *, timeout: float = 30.0, block: int = BLOCK,
             end: int | None = None) -> int:
    """Feed ``scanner`` the file ``path`` on ``box`` from byte 0 to ``end`` (default: its size
    now), read with ``box.read_bytes`` in ``block``-byte ranges, each call with ``timeout``
    seconds: a multi-GB log streams through, never held whole. Returns the offset reached.
    Raises the box's file errors (``RemoteFileNotFound``, ``RemoteIsADirectory``,
    ``RemotePermissionError``) and transport errors."""
    size = _check_file(box, path, timeout) if end is None else end
    offset = 0
    while offset < size:
        data = box.read_bytes(path, offset, min(block, size - offset), timeout=timeout)
        if not data:
            break
        scanner.feed(data)
        offset += len(data)
    return offset


def scan_box(box: Any, path: str, *, timeout: float = 30.0, block: int = BLOCK, **kw: Any) -> LogSummary:
    """:class:`LogSummary` of the whole file ``path`` on ``box`` (a :class:`remote.Box`), read as
    :func:`read_box` reads it. ``kw``: see :meth:`LogSummary.build`. Raises what :func:`read_box`
    raises."""
    sc = LogScanner()
    read_box(box, path, sc, timeout=timeout, block=block)
    sc.finish()
    kw.setdefault("source", f"{path} on {box.name}")
    return sc.summary(**kw)


#: Tail block size: the same 64 KiB steps as ``Box.tail``.
TAIL_BLOCK = 64 * 1024


def tail_bytes(box: Any, path: str, n: int, *, timeout: float = 30.0, end: int | None = None) -> tuple[bytes, int]:
    """The last ``n`` lines of ``path`` on ``box`` before byte ``end`` (default: its size now),
    as bytes, and ``end``. Read backwards with ``box.read_bytes`` (:func:`remote.box.tail_lines`:
    blocks of 64 KiB doubling to 8 MiB): the time depends on ``n`` and the lines' length, not on
    the file's size, and the memory on neither: a line longer than
    :data:`~workbench.logs.bounded.MAX_LINE` comes back as its first 64 KiB and
    ``" [eagle-workbench: line cut at 65536 of N bytes]"`` (the scanner records it with ``N``). An
    unfinished last line (no newline) counts as a line; the lines end in ``\n`` as in the file.
    Raises the box's file errors; ``ValueError`` for ``n < 1``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    size = _check_file(box, path, timeout) if end is None else end
    lines = tail_lines(lambda off, length: box.read_bytes(path, off, length, timeout=timeout), size, n)
    if not lines:
        return b"", size
    ends_newline = box.read_bytes(path, size - 1, 1, timeout=timeout) == b"\n"
    return b"\n".join(lines) + (b"\n" if ends_newline else b""), size


def tail_box(box: Any, path: str, n: int, *, timeout: float = 30.0, **kw: Any) -> LogSummary:
    """:class:`LogSummary` of the last ``n`` lines of ``path`` on ``box`` (:func:`tail_bytes`).
    ``kw``: see :meth:`LogSummary.build`. Raises what :func:`tail_bytes` raises."""
    data, _ = tail_bytes(box, path, n, timeout=timeout)
    sc = LogScanner()
    sc.feed(data)
    sc.finish()
    kw.setdefault("source", f"last {n} lines of {path} on {box.name}")
    return sc.summary(**kw)


def read_decode_records(box: Any, path: str, start: int = 0, *, end: int | None = None, timeout: float = 30.0,
                        block: int = BLOCK, missing_ok: bool = False) -> list[LogRecord]:
    """The decode batch lines (:class:`~workbench.logs.lines.LogRecord`, ``kind == "decode"``) of
    ``path`` on ``box`` between byte ``start`` and ``end`` (default: its size now), in file order:
    what a measurement reads from the log its requests wrote. Read in ``block``-byte ranges and
    split by a :class:`~workbench.logs.bounded.LineCapper`: memory stays bounded whatever the
    lines' length (a line longer than 64 KiB is parsed as its first 64 KiB, where SGLang's batch
    fields are). Each call of the box has ``timeout`` seconds. A line cut by ``start`` is parsed
    from there (no decode line starts mid-line). A file now shorter than ``start`` (truncated or
    rotated) is read from byte 0, as ``Box.follow`` does; with ``missing_ok`` a file that does not
    exist gives ``[]``. Raises the box's file errors (``RemoteFileNotFound``, ``RemoteIsADirectory``,
    ``RemotePermissionError``); ``ValueError`` for a negative ``start``."""
    from remote.errors import RemoteFileNotFound

    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    try:
        size = _check_file(box, path, timeout) if end is None else end
    except RemoteFileNotFound:
        if missing_ok:
            return []
        raise
    if start > size:
        start = 0
    capper = LineCapper()
    out: list[LogRecord] = []

    def take(lines: bytes) -> None:
        for raw in lines.split(b"\n"):
            rec = parse_log_line(raw.rstrip(b"\r")) if raw else None
            if rec is not None and rec.kind == "decode":
                out.append(rec)

    offset = start
    while offset < size:
        data = box.read_bytes(path, offset, min(block, size - offset), timeout=timeout)
        if not data:
            break
        offset += len(data)
        take(capper.feed(data))
    take(capper.flush())
    return out
