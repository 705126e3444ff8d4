"""SGLang server logs, one line at a time: the complete parser and what it returns.

:func:`parse_log_line` reads one ``Decode batch`` / ``Prefill batch`` line of any release 0.4.0 -
0.5.23 (the formats: :mod:`workbench.logs`) into a :class:`LogRecord` with every field;
:func:`parse_log` does a whole log that way (:class:`ParsedLog`); :func:`acceptance_from_log`
turns decode records into a :class:`LogAcceptance`. Also here, because every other module of
the package uses them: SGLang's prefix / batch regexes, :func:`epoch_seconds` and ``_iso`` (the
log's clock as seconds since 1970 and back) and :data:`DEFAULT_DECODE_LOG_INTERVAL`.

The bottom of the package with :mod:`.formats` (the per-release acceptance formats, imported
lazily by :func:`acceptance_from_log`): the standard library only, nothing else from :mod:`workbench`.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Iterator, Optional, Union


#: SGLang's default ``--decode-log-interval`` (decode iterations per ``Decode batch`` line), 0.4.0 - 0.5.23.
DEFAULT_DECODE_LOG_INTERVAL = 40
_EPOCH = datetime(1970, 1, 1)


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

    ``accept_rate``: the mean printed ``accept rate`` — whose definition depends on the release
    (:mod:`workbench.logs.formats`) — unless :func:`acceptance_from_log` was told the release and
    the server's settings: then correct drafts / proposed drafts for every release, the printed
    mean kept in ``accept_rate_engine`` and its definition in ``accept_rate_definition``
    (a :data:`~workbench.logs.formats.ACCEPT_RATE_DEFINITIONS` name).
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
    accept_rate_engine: float | None = None
    accept_rate_definition: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _not_speculative_note(decode_lines: int) -> str:
    if not decode_lines:
        return "no decode log line at all: no decode-log interval elapsed yet, or the log is not the scheduler's"
    return f"{decode_lines} decode lines, none with 'accept len': speculative decoding is off on this server"


def acceptance_from_log(records: Union[Iterable[LogRecord], ParsedLog], *, version: str | None = None,
                        num_steps: int | None = None, num_draft_tokens: int | None = None) -> LogAcceptance:
    """Accept length / rate from decode-log records (see :class:`LogAcceptance`).

    ``version`` (the server's SGLang release, e.g. ``/server_info`` ``version``), ``num_steps``
    and ``num_draft_tokens`` (its ``speculative_num_steps`` / ``speculative_num_draft_tokens``):
    with ``version`` and ``num_draft_tokens`` the rate is reported as correct drafts / proposed
    drafts = ``(accept len − 1) / (D − 1)`` per line (:func:`workbench.logs.formats.correct_draft_rate`;
    the same on every release, also on 0.4.6 - 0.5.3, which print no rate), the printed rate kept
    in ``accept_rate_engine`` with its definition. Raises ``ValueError`` for a ``version`` that is
    no version text."""
    from workbench.logs.formats import correct_draft_rate, decode_line_format

    recs = records.decode if isinstance(records, ParsedLog) else [r for r in records if r.kind == "decode"]
    lens = [r.accept_len for r in recs if r.accept_len is not None]
    rates = [r.accept_rate for r in recs if r.accept_rate is not None]
    fmt = decode_line_format(version) if version is not None else None
    if not lens:
        return LogAcceptance(None, None, None, None, None, None, len(recs), False, note=_not_speculative_note(len(recs)))
    printed = statistics.fmean(rates) if rates else None
    out = LogAcceptance(
        accept_length=statistics.fmean(lens), accept_rate=printed,
        median=statistics.median(lens), last=lens[-1], min=min(lens), max=max(lens), lines=len(lens),
        speculative=True,
    )
    if version is not None:
        out.accept_rate_engine = printed
        out.accept_rate_definition = fmt.accept_rate if fmt is not None else None
        converted = [correct_draft_rate(a, num_draft_tokens) for a in lens]
        if num_draft_tokens and num_draft_tokens >= 2:
            out.accept_rate = statistics.fmean(converted)
        else:
            out.accept_rate = printed if fmt is not None and fmt.accept_rate == "correct/proposed" else None
            out.note = (f"accept rate as correct/proposed drafts needs the server's speculative_num_draft_tokens"
                        + ("" if out.accept_rate is not None else
                           f"; SGLang {version} prints "
                           + (f"'{fmt.accept_rate}'" if fmt is not None and fmt.accept_rate else "no accept rate")))
    return out
