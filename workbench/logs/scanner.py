"""SGLang server logs, fast: :class:`LogScanner`, the numpy scanner over whole buffers.

The numbers a summary needs (time, running requests, accept len and rate, gen and input
throughput, rank tags) from blocks of bytes, over 100 MB/s on one core
(``benchmarks/bench_logs.py``): the key tables (``_KEYS``, ``_key_tables``, ``_suffix_tables``),
the padded byte block (``_Block``), the SWAR number readers (``_numbers``, ``_numbers_d_dd``,
``_numbers_f2``, ``_numbers_int``), the prefix and rank-tag readers and the per-shape templates.
A line it cannot vouch for goes through :func:`workbench.logs.lines.parse_log_line`, so both
parsers give the same values. No I/O here: the bytes come from :mod:`workbench.logs.read` (or
any caller of :meth:`LogScanner.feed`).

Imports :mod:`workbench.logs.lines` (the complete parser, for the lines it hands over) and
:mod:`workbench.logs.summary` (:meth:`LogScanner.summary` builds a :class:`LogSummary`); neither
imports this module.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from workbench.logs.bounded import LineCapper, cut_length
from workbench.logs.lines import _TAGS_OK, LogRecord, epoch_seconds, parse_log_line
from workbench.logs.summary import LogSummary

# ---------------------------------------------------------------------------------------------
# The fast scanner (numpy over whole buffers)
# ---------------------------------------------------------------------------------------------

#: (column, key) the scanner reads; a key counts only as a whole item (after ", " or at the body's start).
_KEYS = (
    ("running_req", b"#running-req"),
    ("accept_len", b"accept len"),
    ("accept_rate", b"accept rate"),
    ("gen_throughput", b"gen throughput (token/s)"),
    ("input_throughput", b"input throughput (token/s)"),
)
_COLUMNS = ("t",) + tuple(name for name, _ in _KEYS)
_PAD = 96                       # zero bytes after a block: every fixed-width read stays inside
_LEAD = 32                      # and before it
_SCAN_BLOCK = 2 << 20           # the scanner works on pieces of about this size
_CUT_PREFIX = b" [eagle-workbench: line cut at "
MAX_CUT_LINES = 20              # cut lines recorded by line number (all are counted)
_COLON_CHUNK = 65536            # colons (keys, numbers) are read this many at a time
_TEMPLATE_MIN = 8               # lines of one shape in a block before a template is learned for them
_TAG_WIDTH = 48                 # rank tags longer than this go to the complete parser
_MAX_TAG_GROUPS = 64
_LOW4 = np.uint64(0xFFFFFFFF)
#: "[YYYY-mm-dd HH:MM:SS": the 20 bytes, the fixed ones and the digits
_TS_INDEX = np.arange(20)
_TS_FIXED = np.array([0, 5, 8, 11, 14, 17])
_TS_FIXED_BYTES = np.frombuffer(b"[-- ::", dtype=np.uint8)
_TS_DIGITS = np.array([1, 2, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19])
_DAYS_IN_MONTH = np.array([0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def _u64(b: bytes) -> np.uint64:
    """The little-endian 64-bit word of 8 bytes (the first byte lowest)."""
    return np.uint64(int.from_bytes(b, "little"))


def _rep(byte: int) -> np.uint64:
    return _u64(bytes([byte]) * 8)


_K30, _KF0, _K0F, _K78, _K06, _K80, _K1E, _K7F = (_rep(b) for b in (0x30, 0xF0, 0x0F, 0x78, 0x06, 0x80, 0x1E, 0x7F))
_ONE, _EIGHT, _TEN, _SIXTY4 = np.uint64(1), np.uint64(8), np.uint64(10), np.uint64(64)
_M1 = np.uint64(0x000000FF000000FF)
_C1 = np.uint64(100 + (1000000 << 32))
_C2 = np.uint64(1 + (10000 << 32))
_POW10 = 10.0 ** np.arange(24)


def _key_tables() -> tuple:
    """Tables of the scanner's keys: their lengths, the 8-byte words (and offsets) that cover
    each key but its last 4 bytes (those are checked with the colon; rows padded with the first
    word), and the indexes of gen and input throughput (their last 4 bytes are the same)."""
    names = [name for name, _ in _KEYS]
    klen = np.array([len(k) for _, k in _KEYS], dtype=np.int64)
    offs = [sorted({min(o, len(k) - 8) for o in range(0, len(k) - 4, 8)}) for _, k in _KEYS]
    width = max(len(o) for o in offs)
    ko = np.array([o + [o[0]] * (width - len(o)) for o in offs], dtype=np.int64)
    kw = np.array([[int.from_bytes(k[off: off + 8], "little") for off in row] for (_, k), row in zip(_KEYS, ko)],
                  dtype=np.uint64)
    return klen, ko, kw, names.index("gen_throughput"), names.index("input_throughput")


_KLEN, _KO, _KW, _GEN, _INPUT = _key_tables()
#: the 4 bytes before the colon and the ": " of each key, by the first of those bytes (distinct
#: for the scanner's keys; gen and input throughput share theirs, told apart by their first word)
_SUFFIX_MASK = np.uint64(0xFFFFFFFFFFFF)


def _suffix_tables() -> tuple[np.ndarray, np.ndarray]:
    """By the first of a key's last 4 bytes: the 64-bit word of those 4 bytes and ": ", and the
    key's index (-1: no key)."""
    words = np.zeros(256, dtype=np.uint64)
    keys = np.full(256, -1, dtype=np.int64)
    for i, (_, k) in enumerate(_KEYS):
        word = np.uint64(int.from_bytes(k[-4:] + b": ", "little"))
        if keys[k[-4]] >= 0 and words[k[-4]] != word:
            raise AssertionError(f"two scanner keys start their last 4 bytes with {chr(k[-4])!r}")
        if keys[k[-4]] < 0:
            words[k[-4]], keys[k[-4]] = word, i
    words[0] = ~np.uint64(0)                      # never matches a word whose first byte is 0
    return words, keys


_SUFFIX_BY_FIRST, _KEY_BY_FIRST = _suffix_tables()
_SUFFIX_FIRST_OK = _KEY_BY_FIRST >= 0
_SUFFIX_WORD = tuple(np.uint64(int.from_bytes(k[-4:] + b": ", "little")) for _, k in _KEYS)
_ALEN, _ARATE = (i for i, (name, _) in enumerate(_KEYS) if name in ("accept_len", "accept_rate"))
_DECODE_WORDS = (_u64(b"Decode b"), _u64(b"de batch"))          # "Decode batch" at +0 and +4
_PREFILL_WORDS = (_u64(b"Prefill "), _u64(b"ll batch"))         # "Prefill batch" at +0 and +5


def _nondigit_t(t: np.ndarray) -> np.ndarray:
    """0x80 in each byte of ``x`` that is not an ASCII digit, given ``t = x ^ 0x3030...30``
    (SWAR; no carries between bytes)."""
    return ((((t & _KF0) >> _ONE) + _K78) | (((t & _K0F) + _K06) << np.uint64(3))) & _K80


def _zero_bytes(y: np.ndarray) -> np.ndarray:
    """0x80 in each byte of ``y`` that is zero (exact, no carries between bytes)."""
    return ~(((y & _K7F) + _K7F) | y | _K7F) & _K80


def _parse8(v: np.ndarray) -> np.ndarray:
    """Integer value of 8 decimal digits, one per byte (values 0-9, the most significant in the
    lowest byte): the SWAR reduction of Lemire's ``parse_eight_digits``."""
    v = v * _TEN + (v >> _EIGHT)
    return ((v & _M1) * _C1 + ((v >> np.uint64(16)) & _M1) * _C2) >> np.uint64(32)


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (vectorized; H. Hinnant's algorithm)."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _is_key(bb: "_Block", colon: np.ndarray, ki: np.ndarray, body_start: np.ndarray) -> np.ndarray:
    """Whether key ``ki`` (index into ``_KEYS``) is written whole just before each ``colon``, as
    an item of the body that starts at ``body_start`` (after ``", "`` or at the body's start)."""
    ks = colon - _KLEN[ki]
    m = (ks >= body_start) & (bb.words[_LEAD + np.maximum(ks, -_LEAD)] == _KW[ki, 0])
    longk = np.flatnonzero(m & (_KLEN[ki] > 12))
    for j in range(1, _KO.shape[1]):
        kl, kk = ks[longk], ki[longk]
        m[longk] &= bb.words[_LEAD + kl + _KO[kk, j]] == _KW[kk, j]
    ksc = np.maximum(ks, 0)
    return m & ((ks == body_start) | ((bb.b(-1)[ksc] == 32) & (bb.b(-2)[ksc] == 44)))


def _is_key_const(bb: "_Block", colon: np.ndarray, k: int, body_start: np.ndarray) -> np.ndarray:
    """:func:`_is_key` for one key ``k`` at every colon (a template's column): the key's words are
    read through shifted views, without index arithmetic."""
    key = _KEYS[k][1]
    klen = len(key)
    m = (colon - klen) >= body_start
    for off in sorted({min(o, klen - 8) for o in range(0, klen - 4, 8)}):
        m &= bb.w(off - klen)[colon] == _u64(key[off: off + 8])
    return m & (((colon - klen) == body_start) | ((bb.b(-klen - 1)[colon] == 32) & (bb.b(-klen - 2)[colon] == 44)))


def _in_ranges(lo: np.ndarray, hi: np.ndarray, size: int) -> np.ndarray:
    """A mask of ``size`` with the disjoint index ranges ``[lo, hi)`` set."""
    delta = np.bincount(lo, minlength=size + 1) - np.bincount(hi, minlength=size + 1)
    return np.cumsum(delta[:size]) > 0


class _Block:
    """A block of log bytes with zero padding before (``_LEAD``) and after (``_PAD``) it, read at
    positions shifted by a constant without building index arrays: ``b(k)[p]`` is the byte at
    ``p + k``, ``w(k)[p]`` the little-endian 64-bit word of the 8 bytes from ``p + k``."""

    def __init__(self, block: Union[bytes, memoryview], store: Optional[np.ndarray] = None):
        n = len(block)
        self.n = n
        if store is None or len(store) < _LEAD + n + _PAD:
            store = np.empty(_LEAD + n + _PAD, dtype=np.uint8)
        self.buf = store[: _LEAD + n + _PAD]
        self.buf[:_LEAD] = 0
        self.buf[_LEAD: _LEAD + n] = np.frombuffer(block, dtype=np.uint8)
        self.buf[_LEAD + n:] = 0
        self.words = np.ndarray(shape=(len(self.buf) - 8,), dtype="<u8", buffer=self.buf.data, strides=(1,))
        self.body = self.buf[_LEAD: _LEAD + n]

    def b(self, k: int = 0) -> np.ndarray:
        return self.buf[_LEAD + k:]

    def w(self, k: int = 0) -> np.ndarray:
        return self.words[_LEAD + k:]


def _digits_of(t: np.ndarray, dot: np.ndarray, run: np.ndarray,
               nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For words ``t`` (bytes minus ``'0'``), their dot bytes ``dot`` and the mask ``run`` of the
    ``nbytes`` (at most 7) bytes that hold a number: the integer of its digits (the dot skipped),
    how many digits, the dots in the run, and how many digits come after the dot."""
    v = t & run
    dots = dot & run
    dm = dots ^ (dots - _ONE)                     # no dot: all ones
    hasdot = dots != 0
    joined = (v & (dm >> _EIGHT)) | ((v & ~dm) >> _EIGHT)   # the digits without the dot
    ndig = nbytes - hasdot
    mant = _parse8(joined << ((_SIXTY4 - _EIGHT * ndig.astype(np.uint64)) % _SIXTY4))
    after_dot = np.where(hasdot, nbytes - (np.bitwise_count(dm).astype(np.int64) >> 3), 0)
    return mant, ndig, dots, after_dot


_DDD_MASK = _u64(b"\0\xff\0\0\xff\xff\0\0")
_DDD_PATTERN = _u64(b"\0.\0\0, \0\0")
_DDD_DIGITS = _u64(b"\x80\0\x80\x80\0\0\0\0")
_K76 = _rep(0x76)


def _numbers_d_dd(bb: "_Block", colon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_numbers` for the common shape of ``accept len`` / ``accept rate`` (``%.2f`` below 10,
    then ``", "``): ``(values, ok)``; ``ok`` False where the value has another shape (then
    :func:`_numbers` reads it). Same values as :func:`_numbers`: ``(d*100 + d*10 + d) / 100``."""
    x = bb.w(2)[colon]
    t = x ^ _K30
    ok = ((x & _DDD_MASK) == _DDD_PATTERN) & (((((t & _K7F) + _K76) | t) & _DDD_DIGITS) == 0)
    mant = (t & np.uint64(0xFF)) * np.uint64(100) + ((t >> np.uint64(16)) & np.uint64(0xFF)) * _TEN \
        + ((t >> np.uint64(24)) & np.uint64(0xFF))
    return mant.astype(np.float64) / 100.0, ok


_K8080 = np.uint64(0x8080)
_ENDINGS = tuple(np.uint64(int.from_bytes(e, "little")) for e in (b", ", b",\n", b",\r"))


def _good_end(tail: np.ndarray) -> np.ndarray:
    """Whether a value's next two bytes (``tail``: the first in the low byte) end it as the
    complete parser would: ``", "``, a trailing ``,`` at the end of the line, or the line's end."""
    tb = tail & np.uint64(0xFF)
    return (tb == 10) | (tb == 13) | (tail == _ENDINGS[0]) | (tail == _ENDINGS[1]) | (tail == _ENDINGS[2])


def _numbers_f2(bb: "_Block", colon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_numbers` for ``%.2f`` values with 1 - 7 integer digits followed by ``", "`` (gen
    and input throughput): ``(values, ok)``; ``ok`` False where the value has another shape (then
    :func:`_numbers` reads it). Same values: ``(integer * 100 + hundredths) / 100``."""
    x = bb.w(2)[colon]
    t = x ^ _K30
    dot = _zero_bytes(t ^ _K1E)
    low = dot ^ (dot - _ONE)                      # bits up to the first dot
    dpos = (np.bitwise_count(low).astype(np.int64) >> 3) - 1
    before = low >> _EIGHT                        # the integer digits' bytes
    ok = (dot != 0) & (dpos >= 1) & ((_nondigit_t(t) & before) == 0)
    y = bb.w(3)[colon + dpos]                     # "dd, " after the dot
    ty = y ^ _K30
    ok &= _good_end((y >> np.uint64(16)) & np.uint64(0xFFFF)) & (((((ty & _K7F) + _K76) | ty) & _K8080) == 0)
    whole = _parse8((t & before) << ((_SIXTY4 - _EIGHT * dpos.astype(np.uint64)) % _SIXTY4))
    mant = whole * np.uint64(100) + (ty & np.uint64(0xFF)) * _TEN + ((ty >> _EIGHT) & np.uint64(0xFF))
    return mant.astype(np.float64) / 100.0, ok


_RUN = [name for name, _ in _KEYS].index("running_req")


def _numbers_int(bb: "_Block", colon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_numbers` for integers of 1 - 6 digits followed by ``", "`` (``#running-req``):
    ``(values, ok)``; ``ok`` False where the value has another shape (then :func:`_numbers` reads
    it)."""
    x = bb.w(2)[colon]
    t = x ^ _K30
    term = _nondigit_t(t)
    low = term ^ (term - _ONE)                    # bits up to the first non-digit
    length = (np.bitwise_count(low).astype(np.int64) >> 3) - 1
    lu = length.astype(np.uint64)
    ok = (term != 0) & (length >= 1) & (length <= 6) & _good_end((x >> ((_EIGHT * lu) % _SIXTY4)) & np.uint64(0xFFFF))
    mant = _parse8((t & (low >> _EIGHT)) << ((_SIXTY4 - _EIGHT * lu) % _SIXTY4))
    return mant.astype(np.float64), ok


def _numbers(bb: "_Block", colon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numbers written after the ``": "`` at ``colon`` (each the value of a ``key: value`` item):
    ``(values, ok)``.

    A value is the run of ``[0-9.]`` bytes at ``colon + 2``; ``ok`` is False unless the run is 1 - 15
    bytes with at least one digit and at most one dot, followed by ``", "``, a trailing ``,``,
    the end of the line or of the block: such lines go to the complete parser. Each
    value equals Python's ``float(text)`` (an exact integer mantissa divided by an exact power of
    ten is correctly rounded). The bytes are read as 64-bit words and checked 8 at a time (SWAR).
    """
    x = bb.w(2)[colon]
    t = x ^ _K30
    dot = _zero_bytes(t ^ _K1E)
    term = _nondigit_t(t) & ~dot                        # bytes that are neither digit nor dot
    short = term != 0
    low = term ^ (term - _ONE)                          # bits up to the terminator's 0x80 bit
    length = (np.bitwise_count(low).astype(np.int64) >> 3) - 1
    mant, ndig, dots, frac = _digits_of(t, dot, low >> _EIGHT, length)
    ok = short & ((dots & (dots - _ONE)) == 0) & (ndig >= 1)
    mant = mant.astype(np.int64)
    # the terminator and the byte after it (", " / ",\n" / ",\r" / "\n" / "\r")
    tail = (x >> ((_EIGHT * length.astype(np.uint64)) % _SIXTY4)) & np.uint64(0xFFFF)
    far = np.flatnonzero(length >= 7)                   # the byte after the terminator, or the run
    if len(far):                                        # itself, is in the next word
        x1 = bb.w(10)[colon[far]]
        sf = short[far]
        tail[far] = np.where(sf, (tail[far] & np.uint64(0xFF)) | ((x1 & np.uint64(0xFF)) << _EIGHT), tail[far])
        longs = far[~sf]
        if len(longs):
            x1 = x1[~sf]
            t0, t1 = t[longs], x1 ^ _K30
            dot1 = _zero_bytes(t1 ^ _K1E)
            term1 = _nondigit_t(t1) & ~dot1
            low1 = term1 ^ (term1 - _ONE)
            len1 = (np.bitwise_count(low1).astype(np.int64) >> 3) - 1
            dot0 = dot[longs]
            d0 = dot0 != 0
            # the first word is all number: 8 digits, or 7 digits around a dot
            dm0 = dot0 ^ (dot0 - _ONE)
            m0 = _parse8(np.where(d0, ((t0 & (dm0 >> _EIGHT)) | ((t0 & ~dm0) >> _EIGHT)) << _EIGHT, t0))
            f0 = np.where(d0, 8 - (np.bitwise_count(dm0).astype(np.int64) >> 3), 0)
            n0 = 8 - d0
            m1, n1, dots1, f1 = _digits_of(t1, dot1, low1 >> _EIGHT, len1)
            mant[longs] = m0.astype(np.int64) * (10 ** n1) + m1.astype(np.int64)
            ndig[longs] = n0 + n1
            frac[longs] = np.where(d0, f0 + n1, f1)
            length[longs] = 8 + len1
            ok[longs] = (term1 != 0) & ((np.bitwise_count(dot0) + np.bitwise_count(dots1)) <= 1)
            tail1 = (x1 >> ((_EIGHT * len1.astype(np.uint64)) % _SIXTY4)) & np.uint64(0xFFFF)
            seven = len1 >= 7
            tail[longs] = np.where(seven, (tail1 & np.uint64(0xFF)) | (bb.b(18)[colon[longs]].astype(np.uint64) << _EIGHT),
                                   tail1)
    values = mant / _POW10[np.clip(frac, 0, 23)]
    tb = tail & np.uint64(0xFF)
    good_end = _good_end(tail)
    if bb.n and bb.body[-1] != 10:                      # the last line has no newline: the block's end ends it
        end_at = (colon + 2 + length) - bb.n
        good_end |= ((tb == 0) & (end_at == 0)) | ((tb == 44) & (end_at == -1))
    return values, ok & good_end


class LogScanner:
    """Accumulates the numbers of a log's batch lines, fed in blocks of bytes.

    ``feed(data)`` takes the next bytes of the log (any block size; a line cut by a block boundary
    is held until its end arrives); ``finish()`` treats held bytes as the last line (a file need
    not end with a newline). Per batch line, in file order, the scanner keeps: ``kind`` (decode /
    prefill), ``t`` (seconds since 1970 of the log's own clock, NaN without SGLang's prefix),
    ``running_req``, ``accept_len``, ``accept_rate``, ``gen_throughput``, ``input_throughput``
    (NaN where the line has no such item); and counts of rank tags, lines and bytes, and whether
    any line bears SGLang's prefix. :meth:`summary` turns them into a :class:`LogSummary`.

    Speed: numpy over pieces of about 2 MB: newline / ``]`` / ``:`` positions, then the prefix,
    the keys and the numbers read 8 bytes at a time (SWAR). Lines of a frequent shape (kind and
    number of colons) are read through a template learned from one of them (which colon holds
    which key), each line's keys still checked whole; the others through a search of every colon.
    Lines it cannot vouch for go through :func:`parse_log_line`, which is also the reference the
    tests compare it with. ``fast_lines`` / ``slow_lines`` count the two paths.
    """

    def __init__(self) -> None:
        self._capper = LineCapper()
        #: ``(line number, real length)`` of the first ``MAX_CUT_LINES`` lines cut at ``MAX_LINE``
        #: bytes; ``cut_count`` counts them all.
        self.cut_lines: list[tuple[int, int]] = []
        self.cut_count = 0
        self._parts: list[dict[str, np.ndarray]] = []
        self._slow: list[tuple[int, LogRecord]] = []
        self.bytes = 0
        self.lines = 0
        self.saw_prefix = False
        self.fast_lines = 0
        self.slow_lines = 0
        self.ranks: dict[str, int] = {}
        self._tag_names: list[str] = []
        self._tag_index: dict[bytes, int] = {}
        self._templates_seen: dict[int, list] = {}
        self._store: Optional[np.ndarray] = None
        self._pos = 0  # absolute offset of the next byte to scan

    # -- feeding -------------------------------------------------------------------------------

    def feed(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Scan the complete lines of ``held + data``; keep the unfinished last line for later (at
        most :data:`~workbench.logs.bounded.MAX_LINE` + 97 bytes of it). A line longer than
        ``MAX_LINE`` is scanned as its first 64 KiB and recorded in ``cut_lines``. ``data`` is only
        read during the call (a buffer may be reused for the next one)."""
        if isinstance(data, memoryview):
            data = data.tobytes()
        if not data:
            return
        self.bytes += len(data)
        for buf, start, end in self._capper.feed_parts(data):
            if end > start:
                self._scan_lines(buf, start, end)

    def _scan_lines(self, data: bytes, start: int, end: int) -> None:
        """Scan ``data[start:end]`` (complete lines, already capped) in pieces of about
        ``_SCAN_BLOCK`` bytes (no copy)."""
        self._note_cuts(data, start, end)
        mv = memoryview(data)
        cut = end - 1
        while start <= cut:
            stop = cut + 1
            if stop - start > _SCAN_BLOCK:
                nl = data.rfind(b"\n", start, start + _SCAN_BLOCK)
                stop = nl + 1 if nl >= start else data.find(b"\n", start + _SCAN_BLOCK) + 1
            self._scan(mv[start:stop])
            start = stop

    def _note_cuts(self, data: bytes, start: int = 0, end: Optional[int] = None) -> None:
        """Record the lines of ``data[start:end]`` (about to be scanned) that end in a cut mark:
        1-based line number and real length."""
        end = len(data) if end is None else end
        i = data.find(_CUT_PREFIX, start, end)
        while i >= 0:
            stop = data.find(b"\n", i, end)
            stop = end if stop < 0 else stop
            begin = max(start, data.rfind(b"\n", start, i) + 1)
            length = cut_length(data[begin:stop])
            if length is not None:
                self.cut_count += 1
                if len(self.cut_lines) < MAX_CUT_LINES:
                    self.cut_lines.append((self.lines + data.count(b"\n", start, begin) + 1, length))
            i = data.find(_CUT_PREFIX, stop, end)

    def finish(self) -> None:
        """Scan the held bytes as the last line (no newline after it)."""
        last = self._capper.flush()
        if last:
            self._note_cuts(last)
            self._scan(last)

    @property
    def held(self) -> bytes:
        """The bytes of the unfinished last line, not scanned yet (its first ``MAX_LINE`` + 97 at most)."""
        return self._capper.held

    @property
    def held_length(self) -> int:
        """The real length (bytes) of the unfinished last line."""
        return self._capper.held_length

    def drop_held(self) -> bytes:
        """Forget the unfinished last line (a follower will read it whole) and return what was held
        of it (``held_length`` says how long it really is)."""
        held, length = self._capper.held, self._capper.held_length
        self._capper.held, self._capper.held_length = b"", 0
        self.bytes -= length
        return held

    # -- one block of complete lines -----------------------------------------------------------

    def _scan(self, block: Union[bytes, memoryview]) -> None:
        base = self._pos
        self._pos += len(block)
        n = len(block)
        if not n:
            return
        bb = _Block(block, self._store)
        self._store = bb.buf.base if bb.buf.base is not None else bb.buf
        arr, body, b, w = bb.b(), bb.body, bb.b, bb.w
        ends = np.flatnonzero(body == 10)
        if body[-1] != 10:
            ends = np.append(ends, n)
        self.lines += len(ends)
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        if not self.saw_prefix:
            self.saw_prefix = bool(self._prefix(bb, starts[:2000])[0].any())

        slow_lines: set[int] = set()
        rbr = np.flatnonzero(body == 93)
        # batch headers: "] Decode batch" / "] Prefill batch"
        x2 = b(2)[rbr]
        c = rbr[(b(1)[rbr] == 32) & ((x2 == 68) | (x2 == 80))]
        w0, w1 = w(2)[c], w(6)[c]
        isdec = (w0 == _DECODE_WORDS[0]) & (w1 == _DECODE_WORDS[1])
        ispre = (w0 == _PREFILL_WORDS[0]) & (w(7)[c] == _PREFILL_WORDS[1])
        c, isdec = c[isdec | ispre], isdec[isdec | ispre]
        q = c + np.where(isdec, 14, 15)                          # just after the literal
        sep, nxt = arr[q], arr[q + 1]
        body_start = np.where(((sep == 44) | (sep == 46)) & (nxt == 32), q + 2, -1)
        iters = np.flatnonzero((sep == 32) & (nxt == 91))        # "batch [N],"
        if len(iters):
            qi = q[iters] + 2
            close = rbr[np.minimum(np.searchsorted(rbr, qi), len(rbr) - 1)]
            dlen = close - qi
            digits_ok = np.ones(len(iters), bool)
            for j in range(19):
                cj = arr[qi + j]
                digits_ok &= (j >= dlen) | ((cj >= 48) & (cj <= 57))
            good = (dlen >= 1) & (dlen <= 19) & digits_ok & ((arr[close + 1] == 44) | (arr[close + 1] == 46)) \
                & (arr[close + 2] == 32)
            body_start[iters[good]] = (close + 3)[good]
        header = body_start >= 0
        c, isdec, body_start = c[header], isdec[header], body_start[header]
        li = np.searchsorted(ends, c)
        if len(li) > 1:
            dup = np.flatnonzero(np.diff(li) == 0)
            slow_lines.update(li[dup].tolist())
        s, e = starts[li], ends[li]
        pref_ok, t, tag_start = self._prefix(bb, s)
        if not self.saw_prefix and pref_ok.any():
            self.saw_prefix = True
        # the prefix must end exactly at the header's ']', with valid rank tags between
        tl = c - tag_start
        pref_ok &= (tl >= 0) & (tl <= _TAG_WIDTH)
        tag_ids, tags_ok = self._tags(bb, tag_start, tl, pref_ok)
        good = pref_ok & tags_ok
        # a ']' in the body (brackets change how items split): complete parser
        k = np.searchsorted(rbr, body_start)
        good &= ~((k < len(rbr)) & (rbr[np.minimum(k, max(len(rbr) - 1, 0))] < e)) if len(rbr) else good
        slow_lines.update(li[~good].tolist())

        # the keys and their numbers: lines of a frequent shape through a template, the rest (and
        # every colon outside a batch line's body) through the general search
        nk = len(_KEYS)
        colon = np.flatnonzero(body == 58)
        values = np.full((nk, len(c)), np.nan)           # key-major: each key's column contiguous
        if len(c):
            lo, hi = np.searchsorted(colon, body_start), np.searchsorted(colon, e)
            generic = self._templates(bb, colon, lo, hi, isdec, c, e, body_start, ends, li, values, slow_lines)
            gl, gh = lo[generic], hi[generic]
            rest = (np.concatenate([colon[a:z] for a, z in zip(gl.tolist(), gh.tolist())]) if len(gl) < 64
                    else colon[_in_ranges(gl, gh, len(colon))]) if len(gl) else colon[:0]
            found = [self._keys(bb, rest[i: i + _COLON_CHUNK], c, e, body_start, ends, slow_lines)
                     for i in range(0, len(rest), _COLON_CHUNK)]
            found = [f for f in found if len(f[0])]
            if found:
                rr, ki, vals, ok, _ = (np.concatenate(z) for z in zip(*found))
                code = rr * nk + ki
                ok &= np.bincount(code, minlength=len(c) * nk)[code] == 1   # a key twice: complete parser
                bad = rr[~ok]
                if len(bad):
                    slow_lines.update(li[bad].tolist())
                values[ki[ok], rr[ok]] = vals[ok]
            outside = colon[~_in_ranges(lo, hi, len(colon))]
        else:
            outside = colon
        # a key outside every batch line's body: a bare batch line (custom logging config), or a
        # line that only mentions one: the complete parser decides
        outside = outside[bb.b(1)[outside] == 32]
        if len(outside):
            x = bb.w(-4)[outside] & _SUFFIX_MASK
            hits = outside[x == _SUFFIX_BY_FIRST[x & np.uint64(0xFF)]]
            if len(hits):
                slow_lines.update(np.searchsorted(ends, hits).tolist())

        keep = good
        if slow_lines:
            keep = keep & ~np.isin(li, np.fromiter(slow_lines, dtype=np.int64, count=len(slow_lines)))
        part = {"pos": base + c[keep], "decode": isdec[keep], "t": t[keep]}
        kept = values[:, keep]
        for j, (name, _) in enumerate(_KEYS):
            part[name] = kept[j]
        self._parts.append(part)
        self.fast_lines += int(keep.sum())
        kept_tags = tag_ids[keep]
        kept_tags = kept_tags[kept_tags >= 0]
        if len(kept_tags):
            for tag, cnt in zip(*np.unique(kept_tags, return_counts=True)):
                name = self._tag_names[int(tag)]
                self.ranks[name] = self.ranks.get(name, 0) + int(cnt)
        for line_no in sorted(slow_lines):
            a, z = int(starts[line_no]), int(ends[line_no])
            r = parse_log_line(bytes(block[a:z]))
            self.slow_lines += 1
            if r is not None:
                self._slow.append((base + a, r))
                if r.timestamp is not None:
                    self.saw_prefix = True
                if r.ranks:
                    self.ranks[r.rank_tag] = self.ranks.get(r.rank_tag, 0) + 1

    @staticmethod
    def _keys(bb: "_Block", colon: np.ndarray, c: np.ndarray, e: np.ndarray, body_start: np.ndarray,
              ends: np.ndarray, slow_lines: set) -> tuple[np.ndarray, ...]:
        """The scanner's keys among ``colon`` (sorted colon positions) and their numbers: the
        4 bytes before the colon and ": " after it (one 64-bit read per colon), then the whole key
        at an item start inside a batch line's body (headers ``c``, line ends ``e``, bodies from
        ``body_start``). Returns ``(record, key index, value, ok, colon)``; lines the complete parser
        must read are added to ``slow_lines`` (by index into ``ends``)."""
        b, w = bb.b, bb.w
        x = w(-4)[colon] & _SUFFIX_MASK
        first = x & np.uint64(0xFF)
        sel = np.flatnonzero(x == _SUFFIX_BY_FIRST[first])
        cand = colon[sel]
        ki = _KEY_BY_FIRST[first[sel]]
        paren = np.flatnonzero(ki == _GEN)                       # "n/s): ": gen or input throughput
        ki[paren[b(-25)[cand[paren]] == 110]] = _INPUT           # the "n" of "input throughput (token/s)"
        rr = np.maximum(np.searchsorted(c, cand) - 1, 0)
        ks = cand - _KLEN[ki]
        inside = (cand > c[rr]) & (cand < e[rr]) & (ks >= body_start[rr])
        # a key outside every batch line's body: a bare batch line (custom logging config), or a
        # line that only mentions one: the complete parser decides
        if not inside.all():
            slow_lines.update(np.searchsorted(ends, cand[~inside]).tolist())
            cand, ki, rr, ks = cand[inside], ki[inside], rr[inside], ks[inside]
        m = _is_key(bb, cand, ki, body_start[rr])
        cand, ki, rr = cand[m], ki[m], rr[m]
        vals, ok = np.empty(len(cand)), np.empty(len(cand), bool)
        dd = np.flatnonzero((ki == _ALEN) | (ki == _ARATE))
        vals[dd], ok[dd] = _numbers_d_dd(bb, cand[dd])
        other = np.ones(len(cand), bool)
        other[dd] = ~ok[dd]
        rest = np.flatnonzero(other)
        vals[rest], ok[rest] = _numbers(bb, cand[rest])
        return rr, ki, vals, ok, cand

    def _templates(self, bb: "_Block", colon: np.ndarray, lo: np.ndarray, hi: np.ndarray, isdec: np.ndarray,
                   c: np.ndarray, e: np.ndarray, body_start: np.ndarray, ends: np.ndarray, li: np.ndarray,
                   values: np.ndarray, slow_lines: set) -> np.ndarray:
        """Batch lines of a frequent shape (kind and number of colons in the body): the keys of the
        first such line (found by :meth:`_keys`) give a template, colon index -> key; each line of
        that shape whose colons hold exactly those keys (each checked whole, at an item start, and
        no other colon holding one) gets its numbers read at those colons, into ``values``.
        Returns which records are left for the general search."""
        generic = np.ones(len(c), bool)
        cnt = hi - lo
        shape = cnt * 2 + isdec
        kinds, first, counts = np.unique(shape, return_index=True, return_counts=True)
        for sh, f, k in zip(kinds.tolist(), first.tolist(), counts.tolist()):
            if k < _TEMPLATE_MIN:
                continue
            template = self._templates_seen.get(sh)
            if template is None:
                template = self._learn(bb, colon[lo[f]:hi[f]], c, e, body_start, ends)
                if template is None:
                    continue
                self._templates_seen[sh] = template
            members = np.flatnonzero(shape == sh)
            base, bstart = lo[members], body_start[members]
            okm = np.ones(len(members), bool)
            pos = []
            for j, kk in template:
                p = colon[base + j]
                x = bb.w(-4)[p] & _SUFFIX_MASK
                okm &= x == _SUFFIX_WORD[kk]
                if kk in (_GEN, _INPUT):
                    okm &= (bb.b(-25)[p] == 110) == (kk == _INPUT)
                okm &= _is_key_const(bb, p, kk, bstart)
                pos.append(p)
            taken = {j for j, _ in template}
            for j in range(int(cnt[f])):
                if j in taken:
                    continue
                p = colon[base + j]
                rows = np.flatnonzero(_SUFFIX_FIRST_OK[bb.b(-4)[p]])   # a byte first, then the word
                x = bb.w(-4)[p[rows]] & _SUFFIX_MASK
                first_b = x & np.uint64(0xFF)
                hit = rows[x == _SUFFIX_BY_FIRST[first_b]]
                if len(hit):
                    kk = _KEY_BY_FIRST[bb.b(-4)[p[hit]]]
                    paren = np.flatnonzero(kk == _GEN)
                    kk[paren[bb.b(-25)[p[hit][paren]] == 110]] = _INPUT
                    okm[hit[_is_key(bb, p[hit], kk, bstart[hit])]] = False     # another key: not this shape
            mem = members[okm]
            for (j, kk), p in zip(template, pos):
                p = p[okm]
                if kk in (_ALEN, _ARATE, _GEN, _INPUT, _RUN):
                    v, good = (_numbers_d_dd if kk in (_ALEN, _ARATE) else _numbers_int if kk == _RUN
                               else _numbers_f2)(bb, p)
                    redo = np.flatnonzero(~good)
                    if len(redo):
                        v[redo], good[redo] = _numbers(bb, p[redo])
                else:
                    v, good = _numbers(bb, p)
                values[kk, mem[good]] = v[good]
                if not good.all():
                    slow_lines.update(li[mem[~good]].tolist())
            generic[mem] = False
            if len(mem) < len(members) // 2:
                self._templates_seen.pop(sh, None)       # learn again from the next block's first line
        return generic

    def _learn(self, bb: "_Block", colon: np.ndarray, c: np.ndarray, e: np.ndarray, body_start: np.ndarray,
               ends: np.ndarray) -> Optional[list]:
        """The template of the batch line whose body holds ``colon``: ``[(colon index, key index)]``,
        or ``None`` when its keys do not make a clean template (a value that is not a number, a key
        twice)."""
        scratch: set = set()
        rr, ki, _, ok, cand = self._keys(bb, colon, c, e, body_start, ends, scratch)
        if scratch or not ok.all() or len(set(ki.tolist())) != len(ki):
            return None
        return list(zip(np.searchsorted(colon, cand).tolist(), ki.tolist()))

    @staticmethod
    def _prefix(bb: "_Block", s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For lines starting at ``s``: whether SGLang's ``[YYYY-mm-dd HH:MM:SS`` opens the line
        (a valid date and time), its time in seconds since 1970 (NaN if not), and where the rank
        tags begin (after the seconds, or after ``.mmm``). Lines of the same second as the line
        before them reuse its parse."""
        # "[YYYY-MM" "-DD HH:M" "M:SS": lines of the same second share the first 20 bytes
        a, b, c4 = bb.w(0)[s], bb.w(8)[s], bb.w(16)[s] & _LOW4
        new = np.ones(len(s), bool)
        if len(s) > 1:
            new[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (c4[1:] != c4[:-1])
        first = s[new]
        group = np.cumsum(new) - 1
        cells = bb.buf[_LEAD + first[:, None] + _TS_INDEX]       # (unique seconds, 20)
        ok = (cells[:, _TS_FIXED] == _TS_FIXED_BYTES).all(axis=1)
        dig = cells[:, _TS_DIGITS].astype(np.int64) - 48
        ok &= ((dig >= 0) & (dig <= 9)).all(axis=1)
        y = dig[:, 0] * 1000 + dig[:, 1] * 100 + dig[:, 2] * 10 + dig[:, 3]
        mo, d, hh, mi, ss = (dig[:, 4:14:2] * 10 + dig[:, 5:14:2]).T
        leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
        mdays = _DAYS_IN_MONTH[np.minimum(np.maximum(mo, 0), 12)] - ((mo == 2) & ~leap)
        ok &= (y >= 1) & (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= mdays) & (hh <= 23) & (mi <= 59) & (ss <= 59)
        secs = (_days_from_civil(y, np.minimum(np.maximum(mo, 1), 12), d) * 86400 + hh * 3600 + mi * 60
                + ss).astype(np.float64)
        ok, secs = ok[group], secs[group]
        dot = bb.b(20)[s] == 46                                      # ".mmm" (SGLANG_LOG_MS=1)
        if dot.any():
            m3 = [bb.b(k)[s].astype(np.int64) - 48 for k in (21, 22, 23)]
            has_ms = dot & ((m3[0] >= 0) & (m3[0] <= 9) & (m3[1] >= 0) & (m3[1] <= 9) & (m3[2] >= 0) & (m3[2] <= 9))
            secs = secs + np.where(has_ms, m3[0] * 100 + m3[1] * 10 + m3[2], 0) / 1000.0
        else:
            has_ms = dot
        t = np.where(ok, secs, np.nan)
        return ok, t, s + np.where(has_ms, 24, 20)

    def _tags(self, bb: "_Block", start: np.ndarray, length: np.ndarray,
              ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rank tags between the timestamp and ``]``: an id per line into ``self._tag_names``
        (-1 for none) and whether the tags are valid (`` TAG{n}`` repeated, as the complete
        parser wants them)."""
        ids = np.full(len(start), -1, dtype=np.int64)
        valid = np.ones(len(start), dtype=bool)
        todo = np.flatnonzero(ok & (length > 0))
        groups = 0
        while len(todo):
            r = int(todo[0])
            ln = int(length[r])
            rep = bytes(bb.b(int(start[r]))[:ln])
            same = length[todo] == ln
            for off in range(0, ln, 8):
                width = min(8, ln - off)
                mask = _u64(b"\xff" * width + b"\0" * (8 - width))
                same &= (bb.w(off)[start[todo]] & mask) == _u64(rep[off: off + width] + b"\0" * (8 - width))
            members = todo[same]
            idx = self._tag_index.get(rep)
            if idx is None:
                text = rep.decode("ascii", "replace")
                if _TAGS_OK.fullmatch(text):
                    idx = len(self._tag_names)
                    self._tag_names.append(text.strip())
                else:
                    idx = -2
                self._tag_index[rep] = idx
            if idx == -2:
                valid[members] = False
            else:
                ids[members] = idx
            todo = todo[~same]
            groups += 1
            if groups >= _MAX_TAG_GROUPS and len(todo):
                valid[todo] = False  # too many distinct tags in one block: the complete parser
                break
        return ids, valid


    # -- results -------------------------------------------------------------------------------

    def arrays(self) -> dict[str, np.ndarray]:
        """Every batch line's numbers in file order: ``pos`` (byte offset of the line's header),
        ``decode`` (bool), ``t`` and the ``_KEYS`` columns (float64, NaN = absent)."""
        parts = list(self._parts)
        if self._slow:
            slow = {"pos": np.array([p for p, _ in self._slow], dtype=np.int64),
                    "decode": np.array([r.kind == "decode" for _, r in self._slow], dtype=bool),
                    "t": np.array([epoch_seconds(r.timestamp) if r.timestamp else np.nan for _, r in self._slow])}
            for name, _ in _KEYS:
                slow[name] = np.array([_f(getattr(r, name)) for _, r in self._slow], dtype=np.float64)
            parts.append(slow)
        if not parts:
            out = {"pos": np.zeros(0, np.int64), "decode": np.zeros(0, bool)}
            out.update({name: np.zeros(0) for name in _COLUMNS})
            return out
        out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        if self._slow:
            order = np.argsort(out["pos"], kind="stable")
            out = {k: v[order] for k, v in out.items()}
        return out

    def summary(self, **kw: Any) -> "LogSummary":
        """The :class:`LogSummary` of everything fed (call :meth:`finish` first for the last line).
        Keyword arguments are passed to :meth:`LogSummary.build`."""
        return LogSummary.build(self, **kw)


def _f(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
