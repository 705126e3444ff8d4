"""SGLang server logs, summarized: :class:`Stat` and :class:`LogSummary` (accept length, accept
rate, throughput and load over time, the ``acceptance-collapsed`` finding), the timeline and the
fast median.

:meth:`LogSummary.build` reads what a scanner accumulated through the small interface
:class:`ScannedLog` (``arrays()`` and the line / byte counts), which
:class:`workbench.logs.scanner.LogScanner` provides. This module does not import the scanner:
the scanner imports this module (:meth:`LogScanner.summary`), so the whole-input entry points
that need both (``summarize_bytes``, ``scan_file``, ``scan_box``, ``tail_box``) live in
:mod:`workbench.logs.read`, above both.

Imports :mod:`workbench.logs.lines` and the runtime rule
(:func:`workbench.rules.runtime.acceptance_collapsed`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Protocol, Sequence

import numpy as np

from workbench.logs.bounded import MAX_LINE
from workbench.logs.lines import DEFAULT_DECODE_LOG_INTERVAL, LogAcceptance, _iso, _not_speculative_note
from workbench.rules.runtime import acceptance_collapsed


class ScannedLog(Protocol):
    """What :meth:`LogSummary.build` reads from a scanner (:class:`workbench.logs.scanner.LogScanner`
    is one): ``arrays()`` (every batch line's ``pos``, ``decode``, ``t`` and the scanner's key
    columns, float64 with NaN = absent; see :meth:`LogScanner.arrays`), the ``bytes`` and
    ``lines`` fed, lines per rank-tag string (``ranks``), whether any line bore SGLang's prefix
    (``saw_prefix``) and the lines each parser took (``fast_lines``, ``slow_lines``)."""

    bytes: int
    lines: int
    ranks: dict[str, int]
    saw_prefix: bool
    fast_lines: int
    slow_lines: int

    def arrays(self) -> dict[str, np.ndarray]: ...


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
    ``slow_lines``: lines taken by each parser; ``cut_lines``: ``(line number, real length in
    bytes)`` of the first lines longer than :data:`~workbench.logs.bounded.MAX_LINE` (read as
    their first 64 KiB), ``cut_count`` how many there were (a note says so too).
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
    cut_lines: list = field(default_factory=list)
    cut_count: int = 0

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
            "decode_log_interval", "cut_count")}
        d["cut_lines"] = [{"line": n, "bytes": b} for n, b in self.cut_lines]
        for k in ("accept_len", "accept_rate", "gen_throughput", "running_req", "input_throughput"):
            v = getattr(self, k)
            d[k] = v.to_dict() if v is not None else None
        d["acceptance"] = self.acceptance.to_dict()
        d["findings"] = [f.to_dict() if hasattr(f, "to_dict") else f for f in self.findings]
        d["events"] = [e.to_dict() if hasattr(e, "to_dict") else e for e in self.events]
        d["collapsed"] = self.collapsed
        return d

    @classmethod
    def build(cls, scanner: ScannedLog, *, source: str = "log", buckets: int = 12,
              decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL, evaluate_rules: bool = True,
              events: Sequence[Any] = ()) -> "LogSummary":
        """Summarize ``scanner`` (see the class doc). ``buckets``: timeline slices (>= 1).

        The ``acceptance-collapsed`` rule (``notes/doctor-rules.md``; :func:`workbench.rules.runtime.
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
        cut = list(getattr(scanner, "cut_lines", ()))
        cut_count = int(getattr(scanner, "cut_count", len(cut)))
        if cut_count:
            shown = ", ".join(f"line {n} ({b:,} bytes)" for n, b in cut[:5])
            more = f" and {cut_count - len(cut[:5])} more" if cut_count > len(cut[:5]) else ""
            notes.append(f"{cut_count} line(s) longer than {MAX_LINE // 1024} KiB were read as their first "
                         f"{MAX_LINE // 1024} KiB (memory stays bounded): {shown}{more}")
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
            decode_log_interval=int(decode_log_interval), cut_lines=cut, cut_count=cut_count)
        if evaluate_rules and n_spec:
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
