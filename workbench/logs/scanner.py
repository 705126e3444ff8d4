"""SGLang server logs: parse the scheduler's ``Decode batch`` / ``Prefill batch`` lines of every
release from 0.4.0 to 0.5.23, summarize a log of any size fast, tail it, follow it.

Formats (read from the published ``sglang`` wheels; file and function named; samples of each in
``tests/fixtures/logs/`` with their exact source):

====================  =========================================================================
release               what changes in the line (``srt/managers/...``)
====================  =========================================================================
0.4.0 - 0.4.3         ``scheduler.py`` ``log_prefill_stats`` / ``log_decode_stats``.
                      Prefix ``[%Y-%m-%d %H:%M:%S TP{n}]`` (TP always, ``DP{n} TP{n}`` with DP
                      attention; ``srt/utils.py`` ``configure_logger``).
                      ``Prefill batch. #new-seq: N, #new-token: N, #cached-token: N, cache hit
                      rate: P%, token usage: F, #running-req: N, #queue-req: N``;
                      ``Decode batch. #running-req: N, #token: N, token usage: F, [accept len: F, ]
                      gen throughput (token/s): F, #queue-req: N`` (``accept len`` from 0.4.3).
0.4.6                 no ``cache hit rate``; PD prefill ends ``#unbootstrapped-req: N, #queue-req:
                      N, #transferring-req: N `` (trailing space); PD decode ``pre-allocated
                      usage: F, `` before the throughput.
0.4.10                ``scheduler_metrics_mixin.py``. Tags ``DP TP EP PP``, ``TP`` only when
                      tp > 1. Hybrid SWA ``#full token``/``#swa token``; ``cuda graph: B, `` before
                      the throughput; PD ``#retracted-req``; lines end with ``", "``.
0.5.3                 ``cuda graph``/``cpu graph``; PD decode ``#prealloc-req``, ``#transfer-req``;
                      PD prefill ``#prealloc-req``, ``#inflight-req``; still ``batch.`` and ``", "``.
0.5.4 (public log)    ``Decode batch.`` with ``accept rate`` (sgl-project/sglang#11948).
0.5.5 - 0.5.7         ``Decode batch,`` / ``Prefill batch,`` and the optional iteration
                      ``batch [N],`` (``SGLANG_LOG_FORWARD_ITERS``); ``accept rate``; hybrid GDN
                      ``mamba num``/``mamba usage``; 0.5.7: ``.mmm`` with ``SGLANG_LOG_MS``, tags
                      ``DP PP TP EP``.
0.5.10                ``observability/scheduler_metrics_mixin.py``. No trailing comma (the line ends
                      at ``#queue-req: N`` or an ``est. ...`` suffix); ``npu graph``; tags
                      ``DP PP ATTN_CP MOE_DP TP EP``; prefill always ends ``{graph}: B, input
                      throughput (token/s): F``.
0.5.17 - 0.5.23       ``scheduler_components/metrics_reporter.py`` ``report_decode_stats`` /
                      ``report_prefill_stats``. ``musa graph``; ``cap len``, ``block accept len``;
                      DSpark ``est uncap acc len: F [F, F]``; ``#pending-token``, ``#bootstrap-req``,
                      ``#optimistic-req``, ``#replay-token``; ``fwd occupancy: P%``; 0.5.23 PD
                      ``#host-receive-req``; HiSparse ``#gpu token``/``#cpu token``.
====================  =========================================================================

No release from 0.4.0 to 0.5.23 names the accept length anything but ``accept len``, nor writes a
``largest-len`` field; unknown ``key: value`` items are kept in :attr:`LogRecord.fields` whatever
their name. SGLang's own ``srt/debug_utils/log_parser.py`` does not match most of these lines.

Two parsers, the same answers:

- :func:`parse_log_line` (complete, one line at a time): a :class:`LogRecord` with every field.
- :class:`LogScanner` (fast): the numbers a summary needs (time, running requests, accept len and
  rate, gen and input throughput, rank tags) from whole buffers with numpy, over 100 MB/s on one
  core (``benchmarks/bench_logs.py``); a line it cannot vouch for (a container prefix before
  SGLang's, brackets in the body, a value that is not a plain number, a duplicated key, a bare line
  from a custom logging config) goes through :func:`parse_log_line`, so both give the same values
  (``tests/workbench/test_logs.py`` checks it line by line).

Box access: :func:`scan_box` (the whole file in blocks, never whole in memory), :func:`tail_box`
(the last N lines, read backwards: time independent of the file's size) and :class:`LogFollower`
(new complete lines of a growing file, across truncation and rotation). Bytes that are not UTF-8
never raise: numbers are read from the bytes, text is decoded with replacement characters.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import numpy as np

__all__ = [
    "LogRecord", "ParsedLog", "LogAcceptance", "parse_log_line", "parse_log", "acceptance_from_log",
    "LogScanner", "LogSummary", "Stat", "FollowEvent", "LogFollower", "LogInputError",
    "summarize_bytes", "scan_file", "scan_box", "read_box", "tail_bytes", "tail_box", "epoch_seconds",
    "DEFAULT_DECODE_LOG_INTERVAL",
]

#: SGLang's default ``--decode-log-interval`` (decode iterations per ``Decode batch`` line), 0.4.0 - 0.5.23.
DEFAULT_DECODE_LOG_INTERVAL = 40
_EPOCH = datetime(1970, 1, 1)


class LogInputError(ValueError):
    """The input is not something a log can be read from: not an SGLang server log (no line carries
    SGLang's ``[YYYY-mm-dd HH:MM:SS]`` prefix and none is a batch line), or empty. The message
    names the file."""


def epoch_seconds(ts: datetime) -> float:
    """Seconds since 1970-01-01 of a naive log timestamp (the log's own clock; no time zone is
    applied), milliseconds kept: the same float the fast scanner computes from the bytes."""
    whole = (ts.replace(microsecond=0) - _EPOCH) // timedelta(seconds=1)
    return whole + (ts.microsecond // 1000) / 1000.0


def _iso(t: float | None) -> str | None:
    if t is None or t != t:  # NaN
        return None
    whole = int(t // 1)
    ms = int(round((t - whole) * 1000))
    dt = _EPOCH + timedelta(seconds=whole, milliseconds=ms)
    return dt.isoformat(sep=" ", timespec="milliseconds" if ms else "seconds")


# ---------------------------------------------------------------------------------------------
# The complete parser (one line)
# ---------------------------------------------------------------------------------------------

# [2026-01-01 12:00:00.123 DP0 PP1 ATTN_CP0 MOE_DP0 TP3 EP3] Decode batch [17], ...
_PREFIX = re.compile(
    r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(?P<ms>\d{3}))?"
    r"(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] "
)
_BATCH = re.compile(r"(?P<kind>Decode|Prefill) batch(?: \[(?P<iter>\d+)\])?[.,] (?P<body>.*?)\s*$")
_TAG = re.compile(r" ([A-Z][A-Z_]*?)(\d+)(?= |$)")
_TAGS_OK = re.compile(r"(?: [A-Z][A-Z_]*\d+)+")
_GRAPH = re.compile(r"^(cuda|cpu|npu|musa) graph$")
# ", " separates items, except inside a closed [...] (DSpark: "est uncap acc len: 2.50 [2.10, 2.90]")
_ITEM_SEP = re.compile(r", (?![^\[\]]*\])")

_FIELD_NAMES = {
    "#running-req": "running_req", "#queue-req": "queue_req", "#token": "num_tokens", "token usage": "token_usage",
    "accept len": "accept_len", "accept rate": "accept_rate", "cap len": "cap_len",
    "block accept len": "block_accept_len", "gen throughput (token/s)": "gen_throughput",
    "input throughput (token/s)": "input_throughput", "#new-seq": "new_seq", "#new-token": "new_token",
    "#cached-token": "cached_token", "#pending-token": "pending_token", "cache hit rate": "cache_hit_rate",
    "pre-allocated usage": "prealloc_usage", "#prealloc-req": "prealloc_req", "#transfer-req": "transfer_req",
    "#retracted-req": "retracted_req", "#inflight-req": "inflight_req",
}


def _number(s: str) -> Any:
    """``"12"`` -> 12, ``"3.12"`` -> 3.12, ``"True"`` -> True, ``"12.5%"`` -> 12.5 (percent kept as
    the number before ``%``); anything else (``nan`` and ``inf`` too) stays the string."""
    if s in ("True", "False"):
        return s == "True"
    pct = s.endswith("%")
    t = s[:-1] if pct else s
    try:
        return int(t)
    except ValueError:
        try:
            v = float(t)
        except ValueError:
            return s
        return v if math.isfinite(v) else s


@dataclass
class LogRecord:
    """One SGLang ``Decode batch`` / ``Prefill batch`` log line (any release 0.4.0 - 0.5.23, module doc).

    ``kind``: ``"decode"`` or ``"prefill"``; ``timestamp``: ``datetime`` (milliseconds when
    ``SGLANG_LOG_MS=1``), ``None`` for a line without SGLang's prefix (custom logging config);
    ``ranks``: the prefix's rank tags in order, ``{"DP": 0, "TP": 3, ...}``; ``iteration``: the
    ``[N]`` forward iteration (``SGLANG_LOG_FORWARD_ITERS``); ``accept_len`` (tokens per verify
    step, bonus included) / ``accept_rate`` (correct drafts / proposed) only with speculative
    decoding; ``graph_backend`` (``cuda``/``cpu``/``npu``/``musa``) and ``graph`` (bool, absent
    before 0.4.10); throughputs in tokens/s; ``token_usage`` and ``prealloc_usage`` are fractions
    of the KV pool; ``cache_hit_rate`` in percent (0.4.0 - 0.4.3 prefill); PD-disaggregation
    counts ``prealloc_req``, ``transfer_req``, ``retracted_req``, ``inflight_req``;
    ``fields``: every ``key: value`` of the line in order (numbers converted, ``P%`` -> P; hybrid
    models' ``#full token``, ``#swa token``, ``mamba num`` ... are only here; unsplittable text
    under ``_unparsed``); ``line``: the raw line (undecodable bytes replaced).
    """

    kind: str
    timestamp: datetime | None
    ranks: dict[str, int]
    iteration: int | None = None
    running_req: int | None = None
    queue_req: int | None = None
    num_tokens: int | None = None
    token_usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    cap_len: float | None = None
    block_accept_len: float | None = None
    graph_backend: str | None = None
    graph: bool | None = None
    gen_throughput: float | None = None
    input_throughput: float | None = None
    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    pending_token: int | None = None
    cache_hit_rate: float | None = None
    prealloc_usage: float | None = None
    prealloc_req: int | None = None
    transfer_req: int | None = None
    retracted_req: int | None = None
    inflight_req: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    line: str = ""

    @property
    def rank_tag(self) -> str:
        """The rank tags as written in the prefix (``"DP1 TP0"``), ``""`` when there are none."""
        return " ".join(f"{k}{v}" for k, v in self.ranks.items())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["timestamp"] = self.timestamp.isoformat(sep=" ") if self.timestamp else None
        return d


def _parse_prefix(line: str) -> tuple[Optional[re.Match], Optional[datetime]]:
    m = _PREFIX.search(line)
    while m is not None:
        t = m.group("ts")
        try:
            ts = datetime(int(t[0:4]), int(t[5:7]), int(t[8:10]), int(t[11:13]), int(t[14:16]), int(t[17:19]))
        except ValueError:  # "2026-13-45 ..." is no timestamp: look for the next prefix
            m = _PREFIX.search(line, m.start() + 1)
            continue
        if m.group("ms"):
            ts = ts.replace(microsecond=int(m.group("ms")) * 1000)
        return m, ts
    return None, None


def parse_log_line(line: Union[str, bytes]) -> LogRecord | None:
    """Parse one log line; ``None`` when it is not a ``Decode batch`` / ``Prefill batch`` line.

    ``line``: text, or bytes (decoded as UTF-8 with replacement characters: never raises).
    Accepts SGLang's prefix ``[YYYY-mm-dd HH:MM:SS[.mmm][ TAG{n}]...] `` (tags DP, PP, ATTN_CP,
    MOE_DP, TP, EP in any order, as 0.4.x - 0.5.23 write them) anywhere in the line (so container-
    or Ray-log prefixes in front do not matter; the batch must follow it directly) and, failing
    that, a bare ``Decode batch, ...`` message (custom ``SGLANG_LOGGING_CONFIG_PATH`` formats;
    timestamp ``None``). ``batch.`` (0.4.0 - 0.5.4) and ``batch,`` (0.5.5+), the iteration
    ``batch [N],``, a trailing ``", "`` (0.4.10 - 0.5.7) are all accepted; field order is not
    assumed; an unknown ``key: value`` item is kept in ``fields``.
    """
    if isinstance(line, (bytes, bytearray, memoryview)):
        line = bytes(line).decode("utf-8", "replace")
    line = line.rstrip("\r\n")
    if "batch" not in line:
        return None
    m, ts = _parse_prefix(line)
    ranks: dict[str, int] = {}
    rest_start = 0
    if m:
        ranks = {k: int(v) for k, v in _TAG.findall(m.group("tags"))}
        rest_start = m.end()
    b = _BATCH.search(line, rest_start)
    if not b or (m and b.start() != rest_start):
        return None
    fields: dict[str, Any] = {}
    body = b.group("body")
    for part in (_ITEM_SEP.split(body) if "]" in body else body.split(", ")):
        key, sep, value = part.rpartition(": ")
        if not sep:
            if part.strip(", "):
                fields.setdefault("_unparsed", []).append(part)
            continue
        fields[key] = _number(value.rstrip(",").strip())
    rec = LogRecord(kind=b.group("kind").lower(), timestamp=ts, ranks=ranks,
                    iteration=int(b.group("iter")) if b.group("iter") else None, fields=fields, line=line)
    for key, value in fields.items():
        attr = _FIELD_NAMES.get(key)
        if attr is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(rec, attr, value)
        g = _GRAPH.match(key)
        if g and isinstance(value, bool):
            rec.graph_backend, rec.graph = g.group(1), value
    return rec


@dataclass
class ParsedLog:
    """Result of :func:`parse_log`: ``decode`` and ``prefill`` records in order and ``summary``
    (``decode_lines``, ``prefill_lines``, ``accept_len_lines``, ``accept_len_min`` / ``_median`` /
    ``_max`` / ``_last``, ``accept_rate_median`` / ``_last``, ``speculative``, ``first`` / ``last``
    timestamps as ``YYYY-mm-dd HH:MM:SS[.ffffff]`` text)."""

    decode: list[LogRecord]
    prefill: list[LogRecord]
    summary: dict

    def to_dict(self) -> dict:
        return {"decode": [r.to_dict() for r in self.decode], "prefill": [r.to_dict() for r in self.prefill],
                "summary": self.summary}


def _iter_lines(lines: Union[Iterable[Union[str, bytes]], str, bytes]) -> Iterator[Union[str, bytes]]:
    if isinstance(lines, str):
        return iter(lines.splitlines())
    if isinstance(lines, (bytes, bytearray)):
        return iter(bytes(lines).split(b"\n"))
    return iter(lines)


def parse_log(lines: Union[Iterable[Union[str, bytes]], str, bytes]) -> ParsedLog:
    """Parse a log (an iterable of lines, or one text / bytes blob) into decode and prefill
    records plus a summary of the accept lengths the decode lines report. Every line goes
    through :func:`parse_log_line`; for large logs use :class:`LogScanner` (same numbers, fast)."""
    decode, prefill = [], []
    for line in _iter_lines(lines):
        rec = parse_log_line(line)
        if rec is None:
            continue
        (decode if rec.kind == "decode" else prefill).append(rec)
    lens = [r.accept_len for r in decode if r.accept_len is not None]
    rates = [r.accept_rate for r in decode if r.accept_rate is not None]
    stamps = [r.timestamp for r in decode + prefill if r.timestamp is not None]
    summary = {
        "decode_lines": len(decode), "prefill_lines": len(prefill), "accept_len_lines": len(lens),
        "accept_len_min": min(lens) if lens else None,
        "accept_len_median": statistics.median(lens) if lens else None,
        "accept_len_max": max(lens) if lens else None,
        "accept_len_last": lens[-1] if lens else None,
        "accept_rate_median": statistics.median(rates) if rates else None,
        "accept_rate_last": rates[-1] if rates else None,
        "speculative": bool(lens),
        "first": min(stamps).isoformat(sep=" ") if stamps else None,
        "last": max(stamps).isoformat(sep=" ") if stamps else None,
    }
    return ParsedLog(decode, prefill, summary)


@dataclass
class LogAcceptance:
    """Accept length as the decode log reports it.

    Each decode line gives the accept length of its window (``--decode-log-interval``
    iterations); the line does not say how many verify steps the window had, so
    ``accept_length`` is the unweighted mean over lines (``median``, ``last``, ``min``,
    ``max`` beside it). ``speculative`` is False and the values ``None`` when no decode line
    carries ``accept len``; ``note`` says why.
    """

    accept_length: float | None
    accept_rate: float | None
    median: float | None
    last: float | None
    min: float | None
    max: float | None
    lines: int
    speculative: bool
    note: str | None = None
    source: str = "log"

    def to_dict(self) -> dict:
        return asdict(self)


def _not_speculative_note(decode_lines: int) -> str:
    if not decode_lines:
        return "no decode log line at all: no decode-log interval elapsed yet, or the log is not the scheduler's"
    return f"{decode_lines} decode lines, none with 'accept len': speculative decoding is off on this server"


def acceptance_from_log(records: Union[Iterable[LogRecord], ParsedLog]) -> LogAcceptance:
    """Accept length / rate from decode-log records (see :class:`LogAcceptance`)."""
    recs = records.decode if isinstance(records, ParsedLog) else [r for r in records if r.kind == "decode"]
    lens = [r.accept_len for r in recs if r.accept_len is not None]
    rates = [r.accept_rate for r in recs if r.accept_rate is not None]
    if not lens:
        return LogAcceptance(None, None, None, None, None, None, len(recs), False, note=_not_speculative_note(len(recs)))
    return LogAcceptance(
        accept_length=statistics.fmean(lens), accept_rate=statistics.fmean(rates) if rates else None,
        median=statistics.median(lens), last=lens[-1], min=min(lens), max=max(lens), lines=len(lens),
        speculative=True,
    )


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
        self._held = b""
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
        """Scan the complete lines of ``held + data``; keep the unfinished last line for later.
        ``data`` is only read during the call (a buffer may be reused for the next one)."""
        if isinstance(data, memoryview):
            data = data.tobytes()
        if not data:
            return
        self.bytes += len(data)
        cut = data.rfind(b"\n")
        if cut < 0:
            self._held += bytes(data)
            return
        mv = memoryview(data)
        start = 0
        if self._held:
            start = data.find(b"\n") + 1
            self._scan(self._held + bytes(mv[:start]))
        self._held = bytes(mv[cut + 1:])
        while start <= cut:
            stop = cut + 1
            if stop - start > _SCAN_BLOCK:
                nl = data.rfind(b"\n", start, start + _SCAN_BLOCK)
                stop = nl + 1 if nl >= start else data.find(b"\n", start + _SCAN_BLOCK) + 1
            self._scan(mv[start:stop])
            start = stop

    def finish(self) -> None:
        """Scan the held bytes as the last line (no newline after it)."""
        if self._held:
            block, self._held = self._held, b""
            self._scan(block)

    @property
    def held(self) -> bytes:
        """The bytes of the unfinished last line, not scanned yet."""
        return self._held

    def drop_held(self) -> bytes:
        """Forget the unfinished last line (a follower will read it whole) and return it."""
        held, self._held = self._held, b""
        self.bytes -= len(held)
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


# ---------------------------------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------------------------------


@dataclass
class Stat:
    """``min`` / ``median`` / ``max`` / ``last`` / ``mean`` of one column over ``count`` lines
    (``last``: the last line in file order)."""

    count: int
    min: float
    median: float
    max: float
    last: float
    mean: float

    @classmethod
    def of(cls, values: np.ndarray) -> Optional["Stat"]:
        v = values[~np.isnan(values)]
        if not len(v):
            return None
        return cls(int(len(v)), float(v.min()), _median(v), float(v.max()), float(v[-1]), float(v.mean()))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LogSummary:
    """What a server log says about acceptance and load.

    ``source``: where the bytes came from (path, box, ``last N lines`` / ``followed S s``);
    ``bytes`` / ``lines`` read; ``decode_lines`` / ``prefill_lines``; ``spec_lines``: decode lines
    carrying ``accept len``; ``speculative``: any did; ``accept_len`` (tokens per verify step,
    bonus included), ``accept_rate`` (correct drafts / proposed), ``gen_throughput`` (tokens/s,
    decode lines), ``running_req`` (decode lines), ``input_throughput``
    (tokens/s, prefill lines): :class:`Stat` or ``None``; ``first`` / ``last``: the earliest and
    latest batch-line timestamps (text), ``span_s`` between them in seconds; ``ranks``: lines per
    rank-tag string (``"DP0 TP0"``; ``""`` not counted); ``timeline``: up to ``buckets`` equal
    time slices (by line order when lines lack timestamps), each ``{start, end, decode_lines,
    spec_lines, accept_len_median, accept_len_min, accept_len_max, accept_rate_median,
    gen_throughput_median, running_req_median}``; ``acceptance``: :class:`LogAcceptance`;
    ``findings``: the ``acceptance-collapsed`` finding when it fires (see :meth:`build`);
    ``events``: truncation / rotation seen while following; ``notes``: why something is missing;
    ``saw_prefix``: some line opens with SGLang's timestamp prefix; ``fast_lines`` /
    ``slow_lines``: lines taken by each parser.
    """

    source: str
    bytes: int
    lines: int
    decode_lines: int
    prefill_lines: int
    spec_lines: int
    speculative: bool
    accept_len: Optional[Stat]
    accept_rate: Optional[Stat]
    gen_throughput: Optional[Stat]
    running_req: Optional[Stat]
    input_throughput: Optional[Stat]
    first: Optional[str]
    last: Optional[str]
    span_s: Optional[float]
    ranks: dict[str, int]
    timeline: list[dict]
    acceptance: LogAcceptance
    findings: list = field(default_factory=list)
    events: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    saw_prefix: bool = False
    fast_lines: int = 0
    slow_lines: int = 0
    decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL

    @property
    def collapsed(self) -> bool:
        """True when the ``acceptance-collapsed`` rule fired."""
        return any(getattr(f, "rule", None) == "acceptance-collapsed" for f in self.findings)

    @property
    def looks_like_log(self) -> bool:
        """False when nothing read is SGLang's: no batch line and no line with its prefix."""
        return bool(self.decode_lines or self.prefill_lines or self.saw_prefix)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in (
            "source", "bytes", "lines", "decode_lines", "prefill_lines", "spec_lines", "speculative", "first",
            "last", "span_s", "ranks", "timeline", "notes", "saw_prefix", "fast_lines", "slow_lines",
            "decode_log_interval")}
        for k in ("accept_len", "accept_rate", "gen_throughput", "running_req", "input_throughput"):
            v = getattr(self, k)
            d[k] = v.to_dict() if v is not None else None
        d["acceptance"] = self.acceptance.to_dict()
        d["findings"] = [f.to_dict() if hasattr(f, "to_dict") else f for f in self.findings]
        d["events"] = [e.to_dict() if hasattr(e, "to_dict") else e for e in self.events]
        d["collapsed"] = self.collapsed
        return d

    @classmethod
    def build(cls, scanner: LogScanner, *, source: str = "log", buckets: int = 12,
              decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL, evaluate_rules: bool = True,
              events: Sequence[Any] = ()) -> "LogSummary":
        """Summarize ``scanner`` (see the class doc). ``buckets``: timeline slices (>= 1).

        The ``acceptance-collapsed`` rule (``notes/doctor-rules.md``; :func:`workbench.doctor.
        acceptance_collapsed`) is evaluated on the mean accept length of the decode lines, with
        ``verify_steps`` = spec lines × ``decode_log_interval``: each line reports one window of
        that many decode iterations, each at least one verify step, so this is a lower bound
        (more running requests mean more steps). ``decode_log_interval``: the server's
        ``--decode-log-interval`` (SGLang's default 40; the sandbox runbooks use 8).
        """
        a = scanner.arrays()
        dec = a["decode"]
        spec = dec & ~np.isnan(a["accept_len"])
        t = a["t"]
        notes: list[str] = []
        known_t = t[~np.isnan(t)]
        first = float(known_t.min()) if len(known_t) else None
        last = float(known_t.max()) if len(known_t) else None
        n_dec, n_spec = int(dec.sum()), int(spec.sum())
        lens = a["accept_len"][spec]
        rates = a["accept_rate"][spec]
        rates = rates[~np.isnan(rates)]
        if n_spec:
            acceptance = LogAcceptance(
                accept_length=float(lens.mean()), accept_rate=float(rates.mean()) if len(rates) else None,
                median=_median(lens), last=float(lens[-1]), min=float(lens.min()), max=float(lens.max()),
                lines=n_spec, speculative=True)
        else:
            acceptance = LogAcceptance(None, None, None, None, None, None, n_dec, False,
                                       note=_not_speculative_note(n_dec))
            notes.append(acceptance.note)
        if n_dec and len(known_t) < len(t):
            notes.append(f"{len(t) - len(known_t)} batch lines have no SGLang timestamp prefix (custom logging "
                         "config): the timeline follows line order")
        summary = cls(
            source=source, bytes=scanner.bytes, lines=scanner.lines, decode_lines=n_dec,
            prefill_lines=int((~dec).sum()), spec_lines=n_spec, speculative=bool(n_spec),
            accept_len=Stat.of(a["accept_len"][dec]), accept_rate=Stat.of(a["accept_rate"][dec]),
            gen_throughput=Stat.of(a["gen_throughput"][dec]), running_req=Stat.of(a["running_req"][dec]),
            input_throughput=Stat.of(a["input_throughput"][~dec]),
            first=_iso(first), last=_iso(last), span_s=(last - first) if first is not None else None,
            ranks=dict(sorted(scanner.ranks.items())), timeline=_timeline(a, dec, max(1, int(buckets))),
            acceptance=acceptance, events=list(events), notes=notes, saw_prefix=scanner.saw_prefix,
            fast_lines=scanner.fast_lines, slow_lines=scanner.slow_lines,
            decode_log_interval=int(decode_log_interval))
        if evaluate_rules and n_spec:
            from workbench.doctor import acceptance_collapsed

            summary.findings = acceptance_collapsed(
                {"accept_length": acceptance.accept_length, "verify_steps": n_spec * int(decode_log_interval)},
                source=f"{source}: mean 'accept len' of {n_spec} decode lines; verify steps >= lines x "
                       f"--decode-log-interval {int(decode_log_interval)}")
        return summary


def _median(v: np.ndarray) -> float:
    """``np.median`` of a non-empty array without NaN (the mean of the two middle values), by one
    partition: the same number, a few times faster."""
    n = len(v)
    lo, hi = (n - 1) // 2, n // 2
    part = np.partition(v, hi)
    return float((part[:hi].max() + part[hi]) / 2) if lo != hi else float(part[hi])


def _med(v: np.ndarray) -> Optional[float]:
    v = v[~np.isnan(v)]
    return _median(v) if len(v) else None


def _timeline(a: dict[str, np.ndarray], dec: np.ndarray, buckets: int) -> list[dict]:
    """Decode lines in ``buckets`` equal time slices (by line order when some lack a time)."""
    idx = np.flatnonzero(dec)
    if not len(idx):
        return []
    t = a["t"][idx]
    by_time = not np.isnan(t).any() and float(t.max()) > float(t.min())
    if by_time:
        t0, t1 = float(t.min()), float(t.max())
        slot = np.minimum(((t - t0) / (t1 - t0) * buckets).astype(np.int64), buckets - 1)
        order = np.argsort(slot, kind="stable")             # a log is nearly sorted already
        idx, slot = idx[order], slot[order]
    else:
        slot = (np.arange(len(idx)) * buckets) // len(idx)
    bounds = np.searchsorted(slot, np.arange(buckets + 1))
    cols = {k: a[k][idx] for k in ("t", "accept_len", "accept_rate", "gen_throughput", "running_req")}
    out = []
    for b in range(buckets):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        if lo == hi:
            continue
        lens = cols["accept_len"][lo:hi]
        spec = lens[~np.isnan(lens)]
        out.append({
            "start": _iso(t0 + (t1 - t0) * b / buckets) if by_time else _iso(_nanmin(cols["t"][lo:hi])),
            "end": _iso(t0 + (t1 - t0) * (b + 1) / buckets) if by_time else _iso(_nanmax(cols["t"][lo:hi])),
            "decode_lines": hi - lo, "spec_lines": int(len(spec)),
            "accept_len_median": _median(spec) if len(spec) else None,
            "accept_len_min": float(spec.min()) if len(spec) else None,
            "accept_len_max": float(spec.max()) if len(spec) else None,
            "accept_rate_median": _med(cols["accept_rate"][lo:hi]),
            "gen_throughput_median": _med(cols["gen_throughput"][lo:hi]),
            "running_req_median": _med(cols["running_req"][lo:hi]),
        })
    return out


def _nanmin(v: np.ndarray) -> Optional[float]:
    v = v[~np.isnan(v)]
    return float(v.min()) if len(v) else None


def _nanmax(v: np.ndarray) -> Optional[float]:
    v = v[~np.isnan(v)]
    return float(v.max()) if len(v) else None


# ---------------------------------------------------------------------------------------------
# Reading logs: bytes, local files, boxes
# ---------------------------------------------------------------------------------------------

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
    as bytes, and ``end``. Read backwards in 64 KiB ranges with ``box.read_bytes`` (as
    ``Box.tail`` does, but anchored at ``end`` and without decoding): the time depends on ``n``
    and the lines' length, not on the file's size. An unfinished last line (no newline) counts
    as a line. Raises the box's file errors; ``ValueError`` for ``n < 1``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    size = _check_file(box, path, timeout) if end is None else end
    pos, chunks, newlines = size, [], 0
    tail_newline = False
    first = True
    while pos > 0 and newlines <= n:
        step = min(TAIL_BLOCK, pos)
        pos -= step
        data = box.read_bytes(path, pos, step, timeout=timeout)
        if first:
            tail_newline, first = data.endswith(b"\n"), False
        chunks.append(data)
        newlines += data.count(b"\n")
    buf = b"".join(reversed(chunks))
    # from the end: the last newline ends the last line (or an unfinished line is the last line)
    cut = len(buf) - 1 if tail_newline else len(buf)
    for _ in range(n):
        cut = buf.rfind(b"\n", 0, cut)
        if cut < 0:
            break
    start = cut + 1
    if pos > 0 and cut < 0:
        start = buf.find(b"\n") + 1           # the first block began mid-line
    return buf[start:], size


def tail_box(box: Any, path: str, n: int, *, timeout: float = 30.0, **kw: Any) -> LogSummary:
    """:class:`LogSummary` of the last ``n`` lines of ``path`` on ``box`` (:func:`tail_bytes`).
    ``kw``: see :meth:`LogSummary.build`. Raises what :func:`tail_bytes` raises."""
    data, _ = tail_bytes(box, path, n, timeout=timeout)
    sc = LogScanner()
    sc.feed(data)
    sc.finish()
    kw.setdefault("source", f"last {n} lines of {path} on {box.name}")
    return sc.summary(**kw)


# ---------------------------------------------------------------------------------------------
# Following a growing log across truncation and rotation
# ---------------------------------------------------------------------------------------------


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
    a line is returned only once its newline has arrived (the unfinished end is held: ``held``);
    ``max_bytes``: at most this many new bytes per poll (the rest next time). No inode is used
    (SFTP has none), so a replacement file whose bytes before the offset are identical to the old
    ones is not told apart; with ``fingerprint`` = 256 bytes of timestamped log lines that does
    not happen.
    """

    def __init__(self, box: Any, path: str, *, offset: int | None = None, timeout: float = 30.0,
                 max_bytes: int = 64 << 20, fingerprint: int = 256, rotated_suffixes: Sequence[str] = (".1",)):
        from remote.errors import RemoteFileNotFound

        self.box, self.path, self.timeout = box, path, timeout
        self.max_bytes, self.fp_len = max_bytes, fingerprint
        self.rotated_suffixes = tuple(rotated_suffixes)
        self.events: list[FollowEvent] = []
        self._held = b""
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
        """The unfinished last line (bytes after the last newline), not returned yet."""
        return self._held

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
        buf = self._held + new
        cut = buf.rfind(b"\n")
        if cut < 0:
            self._held = buf
            return b""
        self._held = buf[cut + 1:]
        return buf[: cut + 1]

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
                data, nxt = self._read(cand, start, 1 << 62)
            except RemoteFileNotFound:
                continue
            if nxt - len(data) != start or len(data) < len(fp) or data[: len(fp)] != fp:
                continue
            rest = data[len(fp):]
            out = self._take(rest)
            lost = None
            if self._held:
                lost = f"an unfinished last line of {len(self._held)} bytes in {cand}"
                self._held = b""
            self.events.append(FollowEvent("rotated", self.path, self.offset, size, cand, len(rest), lost))
            return out
        lost_parts = []
        if self._held:
            lost_parts.append(f"an unfinished line of {len(self._held)} bytes")
            self._held = b""
        lost_parts.append("whatever the old file gained after byte "
                          f"{self.offset} (no rotated copy at {', '.join(self.path + s for s in self.rotated_suffixes)})")
        self.events.append(FollowEvent("truncated", self.path, self.offset, size, None, 0, "; ".join(lost_parts)))
        return b""

    def lines(self) -> list[str]:
        """:meth:`poll` as text lines (UTF-8, undecodable bytes replaced; line endings removed)."""
        data = self.poll()
        return [ln.rstrip("\r") for ln in data.decode("utf-8", "replace").split("\n")[:-1]] if data else []
