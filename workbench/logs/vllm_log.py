"""vLLM server logs: the speculative-decoding metrics line of every wording vLLM has printed, and
a summary of those lines over a window, in the workbench's definitions (accept length = tokens per
verify step, bonus included; per-position acceptance = P(the k-th draft token was accepted)).

The wordings (the format strings, read from vLLM's source; the releases where each was seen):

``v1`` (vLLM 0.32.0 ``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingLogging.log``; the same text in
the V1 engine since about 0.10)::

    SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,
    Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens,
    Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%

``v1-0.9`` (the V1 engine of vLLM 0.8.4 - 0.9.x; seen in a vLLM 0.9.0.1 log)::

    SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f,
    Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s

``v1-0.8`` (the first V1 wording, vLLM 0.8.2 - 0.8.3; no mean length, no per-position rates)::

    SpecDecoding metrics: Draft acceptance rate: %.1f%%, Accepted: %d tokens, Drafted: %d tokens

``v0`` (the V0 engine, vLLM 0.4 - 0.9, ``vllm/engine/metrics.py``
``LoggingStatLogger._format_spec_decode_metrics_str``; the earliest releases wrote ``Number of draft
tokens tokens`` / ``Number of emitted tokens tokens``)::

    Speculative metrics: Draft acceptance rate: %.3f, System efficiency: %.3f,
    Number of speculative tokens: %d, Number of accepted tokens: %d, Number of draft tokens: %d,
    Number of emitted tokens: %d.

Definitions (V1, per log interval: the stat logger sums the scheduler's ``SpecDecodingStats`` over
``VLLM_LOG_STATS_INTERVAL`` seconds, default 10, prints the line and resets; vLLM 0.32.0
``vllm/v1/metrics/loggers.py`` ``LoggingStatLogger.log``; the line is printed at INFO unless the engine
was idle for two intervals, then at DEBUG): one *draft* is one request's verify step with draft tokens
(``vllm/v1/core/sched/scheduler.py`` ``make_spec_decoding_stats`` → ``SpecDecodingStats.observe_draft``);
``Accepted`` = accepted draft tokens (the accepted prefix: ``len(generated) − 1``, no bonus);
``Drafted`` = draft tokens proposed; ``Mean acceptance length`` = ``1 + Accepted / drafts`` (bonus
included: the workbench's accept length and SGLang's ``accept len``, τ); ``Per-position acceptance
rate`` k = drafts whose k-th token was accepted / drafts; ``Avg Draft acceptance rate`` = Accepted /
Drafted × 100 (the workbench's accept rate, correct / proposed drafts, in percent). The line does not
print the drafts: :meth:`SpecDecodingLine.drafts` recovers them (``Drafted / k`` when that is an
integer consistent with the printed mean length, else ``Accepted / (mean − 1)``), and per-position
counts are rate × drafts rounded (exact while drafts < 1000 per line: the rates have 3 decimals).

V0 (``vllm/spec_decode/metrics.py`` ``AsyncMetricsCollector``): the numbers are **cumulative** since
the server started (the rejection sampler's running totals); ``Number of accepted tokens`` counts
draft tokens that matched *at any position* (not only the accepted prefix), ``Number of emitted
tokens`` = accepted prefix + 1 per draft, drafts = ``draft tokens / k``, so the accept length is
``emitted / drafts`` (= System efficiency × (k + 1)) and a window's counts are the last line's
minus the line before the window. V0 prints no per-position rates.

Prefix (vLLM 0.32.0 ``vllm/logger.py`` ``_FORMAT``): ``[VLLM_LOGGING_PREFIX](PROCESS pid=N) LEVEL
MM-DD HH:MM:SS [FILE:LINE] message``; older releases ``LEVEL MM-DD HH:MM:SS FILE:LINE] message``
(no process, no opening bracket); colour codes (``VLLM_LOGGING_COLOR=1``) are stripped; a JSON log
line (vLLM's ``JSON_FORMAT`` through python-json-logger: ``{"asctime": …, "message": …}``) is read
from its ``message``. The date has no year: timestamps are kept as text and as (month, day, seconds
of day) for ordering within a log.

Standard library only. :class:`VllmLogReader` reads bytes in blocks (``feed`` / ``finish``), keeping
only the lines that matter, so a log of any size is read in bounded memory.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional, Union

__all__ = ["SpecDecodingLine", "VllmLogSummary", "VllmLogReader", "parse_spec_decoding_line",
           "summarize_spec_lines", "WORDINGS", "looks_like_vllm_line", "SPEC_MARKERS", "summarize_box_window"]

#: The wording ids (module docstring) and where each comes from.
WORDINGS = {
    "v1": "vLLM 0.32.0 vllm/v1/spec_decode/metrics.py SpecDecodingLogging.log (V1 engine, since about 0.10)",
    "v1-0.9": "vLLM 0.8.4 - 0.9.x V1 engine: 'Draft acceptance rate' first, 'Mean acceptance length', "
              "'Per-position acceptance rate', no throughputs",
    "v1-0.8": "vLLM 0.8.2 - 0.8.3 V1 engine: 'Draft acceptance rate', 'Accepted', 'Drafted' only",
    "v0": "vLLM V0 engine vllm/engine/metrics.py _format_spec_decode_metrics_str: 'Speculative metrics', "
          "cumulative counts",
}

#: The bytes that open the message of a speculative-decoding metrics line (V1, V0).
SPEC_MARKERS = (b"SpecDecoding metrics:", b"Speculative metrics:")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUM = r"(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)"
# (APIServer pid=123) INFO 12-02 15:40:01 [metrics.py:123] ...  /  INFO 10-16 19:05:47 metrics.py:367] ...
_PREFIX = re.compile(
    r"(?:\((?P<proc>[^()\s]+) pid=(?P<pid>\d+)\) )?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<month>\d\d)-(?P<day>\d\d) "
    r"(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<ms>\d{1,6}))? \[?(?P<file>[^\s\]:]+):(?P<lineno>\d+)\] ")
# the logger prefix's fixed part, anywhere in a block (one per vLLM line): counted, not anchored, so
# a block is read at over 100 MB/s
_PREFIX_CORE = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                          rb"\[?[^\s\]:\n]+\.py:\d+\] ")
_VLLM_LINE = re.compile(
    rb"(?m)^[^\n]{0,64}?(?:\([^()\s\n]+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
    rb"(?:\.\d+)? \[?[^\s\]:\n]+\.py:\d+\] ")

_V1_FIELDS = {
    "mean_acceptance_length": re.compile(rf"Mean acceptance length: ({_NUM})"),
    "accepted_throughput": re.compile(rf"Accepted throughput: ({_NUM}) tokens/s"),
    "drafted_throughput": re.compile(rf"Drafted throughput: ({_NUM}) tokens/s"),
    "accepted": re.compile(r"(?:: |, )Accepted: (\d+) tokens"),
    "drafted": re.compile(r"(?:: |, )Drafted: (\d+) tokens"),
    "avg_rate_pct": re.compile(rf"Avg Draft acceptance rate: ({_NUM})%"),
    "rate_pct": re.compile(rf"(?<!Avg )Draft acceptance rate: ({_NUM})%"),
}
_PER_POS = re.compile(rf"Per-position acceptance rate: ({_NUM}(?:, {_NUM})*)(?![\d.])")
_V0_FIELDS = {
    "rate": re.compile(rf"Draft acceptance rate: ({_NUM})(?!%)"),
    "efficiency": re.compile(rf"System efficiency: ({_NUM})"),
    "k": re.compile(r"Number of speculative tokens: (\d+)"),
    "accepted": re.compile(r"Number of accepted tokens: (\d+)"),
    "drafted": re.compile(r"Number of draft tokens(?: tokens)?: (\d+)"),
    "emitted": re.compile(r"Number of emitted tokens(?: tokens)?: (\d+)"),
}


def _float(s: Optional[str]) -> Optional[float]:
    if s is None:
        return None
    v = float(s)
    return v if math.isfinite(v) else None


@dataclass
class SpecDecodingLine:
    """One speculative-decoding metrics line of a vLLM log (module docstring for the wordings).

    ``wording``: ``v1``, ``v1-0.9``, ``v1-0.8`` or ``v0``; ``cumulative``: the counts are totals
    since the server started (V0) rather than one log interval's (V1). Prefix: ``process`` (e.g.
    ``APIServer``), ``pid``, ``level``, ``when`` (``MM-DD HH:MM:SS`` as printed, no year),
    ``month`` / ``day`` / ``second_of_day`` (``None`` without a prefix), ``file`` / ``lineno`` (where
    vLLM logged it). Printed values (``None`` when the wording has none or it was ``nan``):
    ``mean_acceptance_length`` (tokens per draft, bonus included; 2 decimals),
    ``accepted`` (accepted draft tokens, no bonus), ``drafted`` (draft tokens proposed),
    ``per_position`` (fractions of drafts, position 1 first, 3 decimals),
    ``draft_acceptance_rate`` (accepted / drafted as a fraction 0..1, from the printed percent, or V0's
    fraction, whose accepted counts any position), ``accepted_throughput`` / ``drafted_throughput``
    (tokens/s); V0 only: ``system_efficiency``, ``num_spec_tokens`` (k), ``emitted`` (accepted
    prefix + bonus). ``problems``: what could not be read (the line is kept, never dropped);
    ``offset``: byte offset of the line in the input (``None`` when unknown); ``line``: the text.
    """

    wording: str
    cumulative: bool
    line: str
    offset: Optional[int] = None
    process: Optional[str] = None
    pid: Optional[int] = None
    level: Optional[str] = None
    when: Optional[str] = None
    month: Optional[int] = None
    day: Optional[int] = None
    second_of_day: Optional[float] = None
    file: Optional[str] = None
    lineno: Optional[int] = None
    mean_acceptance_length: Optional[float] = None
    accepted: Optional[int] = None
    drafted: Optional[int] = None
    per_position: Optional[list[float]] = None
    draft_acceptance_rate: Optional[float] = None
    accepted_throughput: Optional[float] = None
    drafted_throughput: Optional[float] = None
    system_efficiency: Optional[float] = None
    num_spec_tokens: Optional[int] = None
    emitted: Optional[int] = None
    problems: list[str] = field(default_factory=list)

    def drafts(self, num_spec_tokens: Optional[int] = None) -> tuple[Optional[int], str]:
        """The number of drafts (verify steps with draft tokens) this line covers, and how it was
        recovered (the line does not print it). ``num_spec_tokens``: the server's
        ``num_speculative_tokens`` (k; default: the number of per-position rates, or V0's k).

        V0: ``drafted // k`` (vLLM's own ``get_max_num_emitted_tokens``). V1: ``drafted / k`` when it is
        an integer and ``1 + accepted / drafts`` rounds to the printed mean length (every draft had k
        tokens, as EAGLE's always do away from ``max_model_len``); else ``accepted / (mean − 1)``
        rounded, when consistent with the printed mean; else ``(None, why)``."""
        k = num_spec_tokens or self.num_spec_tokens or (len(self.per_position) if self.per_position else None)
        if self.wording == "v0":
            if k and self.drafted is not None:
                return self.drafted // k, f"draft tokens // k ({k}), vLLM V0 get_max_num_emitted_tokens"
            return None, "V0 line without number of speculative tokens"
        acc, mean = self.accepted, self.mean_acceptance_length
        if acc is None or self.drafted is None:
            return None, "line without Accepted / Drafted"

        def consistent(d: int) -> bool:
            return d > 0 and (mean is None or abs(1 + acc / d - mean) <= 0.005 + 1e-9)

        if k and self.drafted % k == 0 and consistent(self.drafted // k):
            return self.drafted // k, f"Drafted / k ({k})" + ("" if mean is None else
                                                               ", consistent with the printed mean length")
        if mean is not None and mean > 1.0 and acc > 0:
            d = round(acc / (mean - 1.0))
            if consistent(d):
                return d, "Accepted / (mean acceptance length − 1), rounded (mean printed with 2 decimals)"
        if mean is None and k and self.drafted % k == 0:
            return self.drafted // k, f"Drafted / k ({k}); no mean length printed to check it"
        return None, (f"no draft count fits Drafted {self.drafted}, Accepted {acc} and mean length {mean}"
                      + (f" with k = {k}" if k else ""))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["drafts"], d["drafts_from"] = self.drafts()
        return d


def looks_like_vllm_line(line: Union[str, bytes]) -> bool:
    """Whether ``line`` opens (after at most 64 bytes of another prefix) with vLLM's logger prefix
    (``(PROC pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] `` or the older ``LEVEL MM-DD HH:MM:SS file.py:N] ``)."""
    if isinstance(line, str):
        line = line.encode("utf-8", "replace")
    return _VLLM_LINE.match(_ANSI.sub("", line.decode("utf-8", "replace")).encode()) is not None


def parse_spec_decoding_line(line: Union[str, bytes], offset: Optional[int] = None) -> Optional[SpecDecodingLine]:
    """Parse one vLLM log line; ``None`` when it is not a speculative-decoding metrics line (no
    ``SpecDecoding metrics:`` / ``Speculative metrics:`` in it). Never raises on a line that has the
    marker: what cannot be read is listed in ``problems`` (a wording this parser does not know still
    gives the fields it recognises). ``line``: text or bytes (UTF-8, undecodable bytes replaced)."""
    if isinstance(line, (bytes, bytearray, memoryview)):
        line = bytes(line).decode("utf-8", "replace")
    text = _ANSI.sub("", line.rstrip("\r\n"))
    json_when = None
    if text.lstrip().startswith("{") and ("SpecDecoding metrics:" in text or "Speculative metrics:" in text):
        # vLLM's JSON logging config (vllm/logging_utils/formatter.py JSON_FORMAT, python-json-logger)
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("message"), str):
            json_when = obj.get("asctime")
            text = obj["message"]
    v1 = text.find("SpecDecoding metrics:")
    v0 = text.find("Speculative metrics:") if v1 < 0 else -1
    if v1 < 0 and v0 < 0:
        return None
    start = v1 if v1 >= 0 else v0
    msg = text[start:]
    if v0 >= 0:
        rec = SpecDecodingLine("v0", True, text, offset)
    else:
        has_mean = "Mean acceptance length:" in msg
        avg_first = "Avg Draft acceptance rate:" in msg
        wording = "v1" if avg_first or "Accepted throughput:" in msg else ("v1-0.9" if has_mean else "v1-0.8")
        rec = SpecDecodingLine(wording, False, text, offset)
    head = _PREFIX.search(text[:start])
    if head is not None:
        rec.process = head.group("proc")
        rec.pid = int(head.group("pid")) if head.group("pid") else None
        rec.level = head.group("level")
        rec.month, rec.day = int(head.group("month")), int(head.group("day"))
        sec = int(head.group("h")) * 3600 + int(head.group("m")) * 60 + int(head.group("s"))
        rec.second_of_day = sec + (float("0." + head.group("ms")) if head.group("ms") else 0.0)
        rec.when = f"{head.group('month')}-{head.group('day')} {head.group('h')}:{head.group('m')}:{head.group('s')}"
        rec.file, rec.lineno = head.group("file"), int(head.group("lineno"))
    elif json_when is not None:
        rec.when = str(json_when)
        m = re.match(r"\d{4}-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)", rec.when)
        if m:
            rec.month, rec.day = int(m.group(1)), int(m.group(2))
            rec.second_of_day = int(m.group(3)) * 3600 + int(m.group(4)) * 60 + int(m.group(5))
    else:
        rec.problems.append("no vLLM logger prefix before the message (time unknown)")

    def grab(rx: re.Pattern, conv, name: str, required: bool) -> object:
        m = rx.search(msg)
        if m is None:
            if required:
                rec.problems.append(f"no '{name}' item")
            return None
        try:
            return conv(m.group(1))
        except ValueError:
            rec.problems.append(f"'{name}' is not a number: {m.group(1)!r}")
            return None

    if rec.wording == "v0":
        f = _V0_FIELDS
        rec.draft_acceptance_rate = grab(f["rate"], _float, "Draft acceptance rate", True)
        rec.system_efficiency = grab(f["efficiency"], _float, "System efficiency", True)
        rec.num_spec_tokens = grab(f["k"], int, "Number of speculative tokens", True)
        rec.accepted = grab(f["accepted"], int, "Number of accepted tokens", True)
        rec.drafted = grab(f["drafted"], int, "Number of draft tokens", True)
        rec.emitted = grab(f["emitted"], int, "Number of emitted tokens", True)
        return rec
    f = _V1_FIELDS
    rec.accepted = grab(f["accepted"], int, "Accepted", True)
    rec.drafted = grab(f["drafted"], int, "Drafted", True)
    if rec.wording != "v1-0.8":
        rec.mean_acceptance_length = grab(f["mean_acceptance_length"], _float, "Mean acceptance length", True)
        m = _PER_POS.search(msg)
        if m is None:
            rec.problems.append("no 'Per-position acceptance rate' item")
        else:
            values = [_float(x) for x in m.group(1).split(", ")]
            rec.per_position = None if any(v is None for v in values) else values
    if rec.wording == "v1":
        rec.accepted_throughput = grab(f["accepted_throughput"], _float, "Accepted throughput", True)
        rec.drafted_throughput = grab(f["drafted_throughput"], _float, "Drafted throughput", True)
        pct = grab(f["avg_rate_pct"], _float, "Avg Draft acceptance rate", True)
    else:
        pct = grab(f["rate_pct"], _float, "Draft acceptance rate", True)
    rec.draft_acceptance_rate = pct / 100.0 if isinstance(pct, float) else None
    if rec.per_position is not None and rec.drafted is not None and rec.accepted is not None and rec.drafted:
        if rec.accepted > rec.drafted:
            rec.problems.append(f"Accepted {rec.accepted} > Drafted {rec.drafted}")
    return rec


@dataclass
class VllmLogSummary:
    """What a vLLM log's speculative-decoding lines say over a window (module docstring).

    ``source``: where the lines came from; ``lines``: all lines read; ``vllm_lines``: lines with
    vLLM's logger prefix; ``spec_lines``: the parsed metrics lines (:class:`SpecDecodingLine`, in file
    order); ``wordings``: lines per wording; ``first`` / ``last``: their ``MM-DD HH:MM:SS``.
    Totals over the window (``None`` when no line gives them): ``accepted`` (accepted draft tokens),
    ``drafted`` (draft tokens), ``drafts`` (verify steps with drafts, recovered per line:
    :meth:`SpecDecodingLine.drafts`), ``per_position_accepted`` (drafts whose k-th token was
    accepted, k = 1 …). Derived, the workbench's definitions: ``accept_length`` = 1 + accepted /
    drafts (tokens per verify step, bonus included; V0: emitted / drafts), ``accept_rate`` = accepted
    / drafted (correct / proposed drafts), ``per_position`` = per_position_accepted / drafts.
    ``mean_acceptance_length``: min / median / max / last of the printed per-line values;
    ``num_spec_tokens``: k (from the lines); ``cumulative``: V0 counts (window = last − before);
    ``generation_throughput``: the ``Engine NNN: … Avg generation throughput`` values (tokens/s)
    seen; ``problems``: lines with the marker that could not be read whole (kept, with why);
    ``notes``: caveats."""

    source: str
    lines: int
    vllm_lines: int
    spec_lines: list[SpecDecodingLine]
    wordings: dict[str, int]
    first: Optional[str] = None
    last: Optional[str] = None
    accepted: Optional[int] = None
    drafted: Optional[int] = None
    drafts: Optional[int] = None
    emitted: Optional[int] = None
    per_position_accepted: Optional[list[int]] = None
    accept_length: Optional[float] = None
    accept_rate: Optional[float] = None
    per_position: Optional[list[float]] = None
    mean_acceptance_length: Optional[dict] = None
    num_spec_tokens: Optional[int] = None
    cumulative: bool = False
    generation_throughput: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def speculative(self) -> bool:
        """Whether any speculative-decoding metrics line was read."""
        return bool(self.spec_lines)

    @property
    def looks_like_log(self) -> bool:
        """Whether the input is a vLLM log (a line with vLLM's prefix or a metrics line)."""
        return bool(self.vllm_lines or self.spec_lines)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in (
            "source", "lines", "vllm_lines", "wordings", "first", "last", "accepted", "drafted", "drafts", "emitted",
            "per_position_accepted", "accept_length", "accept_rate", "per_position", "mean_acceptance_length",
            "num_spec_tokens", "cumulative", "generation_throughput", "problems", "notes")}
        d["engine"] = "vllm"
        d["speculative"] = self.speculative
        d["spec_lines"] = [r.to_dict() for r in self.spec_lines]
        return d


def summarize_spec_lines(records: Iterable[SpecDecodingLine], *, source: str = "log", lines: int = 0,
                         vllm_lines: int = 0, num_spec_tokens: Optional[int] = None,
                         before: Optional[SpecDecodingLine] = None,
                         generation_throughput: Iterable[float] = ()) -> VllmLogSummary:
    """Sum speculative-decoding lines into a :class:`VllmLogSummary` (module docstring).

    ``records``: the window's lines in file order; ``num_spec_tokens``: the server's k, if known
    (else read from the lines); ``before``: for V0's cumulative lines, the last line before the
    window (its totals are subtracted; without it the window starts at the server's start).
    ``lines`` / ``vllm_lines``: counts for the summary. A line that cannot be read whole is listed
    in ``problems`` and left out of the sums it cannot contribute to; the others still count."""
    recs = list(records)
    out = VllmLogSummary(source, lines, vllm_lines, recs, {}, generation_throughput=list(generation_throughput))
    for r in recs:
        out.wordings[r.wording] = out.wordings.get(r.wording, 0) + 1
        if r.problems:
            out.problems.append(f"{r.when or 'line'} ({r.wording}): " + "; ".join(r.problems))
    if not recs:
        out.notes.append("no 'SpecDecoding metrics' line: speculative decoding is off, the window had no verify "
                         "step, the logging level is above INFO, or the stat logger is disabled (--disable-log-stats)")
        return out
    stamped = [r for r in recs if r.when]
    if stamped:
        out.first, out.last = stamped[0].when, stamped[-1].when
    v0 = [r for r in recs if r.wording == "v0"]
    v1 = [r for r in recs if r.wording != "v0"]
    if v0 and v1:
        out.notes.append(f"{len(v0)} V0 and {len(v1)} V1 lines in one window (two servers in one log?): "
                         "only the V1 lines are summed")
    means = [r.mean_acceptance_length for r in recs if r.mean_acceptance_length is not None]
    if means:
        out.mean_acceptance_length = {"count": len(means), "min": min(means), "median": statistics.median(means),
                                      "max": max(means), "last": means[-1]}
    if v1:
        _sum_v1(out, v1, num_spec_tokens)
    else:
        _sum_v0(out, v0, before)
    return out


def _sum_v1(out: VllmLogSummary, recs: list[SpecDecodingLine], k: Optional[int]) -> None:
    ks = {len(r.per_position) for r in recs if r.per_position}
    out.num_spec_tokens = k or (ks.pop() if len(ks) == 1 else None)
    if len(ks) > 1 and not k:
        out.notes.append(f"lines with different numbers of per-position rates {sorted(ks)}: k unknown")
    acc = drafted = drafts = 0
    pos: Optional[list[int]] = [0] * out.num_spec_tokens if out.num_spec_tokens else None
    counted = 0
    for r in recs:
        if r.accepted is None or r.drafted is None:
            continue
        d, why = r.drafts(out.num_spec_tokens)
        if d is None:
            out.problems.append(f"{r.when or 'line'}: drafts unknown: {why}; left out of the sums")
            continue
        acc, drafted, drafts, counted = acc + r.accepted, drafted + r.drafted, drafts + d, counted + 1
        if pos is not None:
            if r.per_position is not None and len(r.per_position) == len(pos):
                for i, p in enumerate(r.per_position):
                    pos[i] += round(p * d)
                if d >= 1000:
                    out.notes.append(f"{r.when or 'line'}: {d} drafts in one line: per-position counts from 3-decimal "
                                     "rates may be off by a few")
            else:
                pos = None
    if not counted:
        out.notes.append("no line with readable Accepted / Drafted counts")
        return
    out.accepted, out.drafted, out.drafts = acc, drafted, drafts
    out.accept_rate = acc / drafted if drafted else None
    out.accept_length = 1.0 + acc / drafts if drafts else None
    if pos is not None and drafts:
        out.per_position_accepted = pos
        out.per_position = [p / drafts for p in pos]
    elif any(r.wording == "v1-0.8" for r in recs):
        out.notes.append("vLLM 0.8.2 - 0.8.3 lines print no per-position rates")


def _sum_v0(out: VllmLogSummary, recs: list[SpecDecodingLine], before: Optional[SpecDecodingLine]) -> None:
    out.cumulative = True
    last = next((r for r in reversed(recs) if not r.problems), None)
    if last is None:
        out.notes.append("no V0 line readable whole")
        return
    k = last.num_spec_tokens
    out.num_spec_tokens = k
    base = before if before is not None and not before.problems else None
    acc = last.accepted - (base.accepted if base else 0)
    drafted = last.drafted - (base.drafted if base else 0)
    emitted = last.emitted - (base.emitted if base else 0)
    out.accepted, out.drafted, out.emitted = acc, drafted, emitted
    out.drafts = drafted // k if k else None
    out.accept_rate = acc / drafted if drafted else None
    out.accept_length = emitted / out.drafts if out.drafts else None
    out.notes.append("vLLM V0 counts are cumulative since the server started: window = last line − "
                     + ("the line before the window" if base else "nothing (no line before the window: since start)")
                     + "; V0's accepted tokens count matches at any position, so the accept rate is not the accepted"
                       " prefix's; accept length = emitted / drafts")


_GEN = re.compile(rb"Avg generation throughput: (" + _NUM.encode() + rb") tokens/s")


class VllmLogReader:
    """Reads a vLLM log in blocks of bytes (``feed``, then ``finish``) in bounded memory: keeps the
    speculative-decoding lines (:func:`parse_spec_decoding_line`, with their byte offsets) and the
    ``Avg generation throughput`` values, counts lines and lines with vLLM's prefix. ``offset``: the
    byte offset of the first byte fed (for a window read from the middle of a file).
    :meth:`summary` sums the lines (optionally only those from byte ``start`` on)."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.bytes = 0
        self.lines = 0
        self.vllm_lines = 0
        self.records: list[SpecDecodingLine] = []
        self.throughput: list[float] = []
        self._held = b""
        self._held_at = offset

    def feed(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Read ``data`` (the next bytes of the log); a last partial line is held for the next call
        (at most its last 64 KiB: a longer line is no metrics line; offsets stay exact)."""
        data = bytes(data)
        at = self._held_at if self._held else self.offset + self.bytes
        self.bytes += len(data)
        buf = self._held + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            keep = buf[-65536:]
            self._held, self._held_at = keep, at + len(buf) - len(keep)
            return
        self._held, self._held_at = buf[cut + 1:], at + cut + 1
        self._take(buf[: cut + 1], at)

    def finish(self) -> None:
        """Read the held last line (one without a newline at the end of the input)."""
        if self._held:
            held, self._held = self._held, b""
            self._take(held + b"\n", self._held_at)

    def _take(self, block: bytes, base: int) -> None:
        self.lines += block.count(b"\n")
        self.vllm_lines += len(_PREFIX_CORE.findall(block))
        new: list[SpecDecodingLine] = []
        for marker in SPEC_MARKERS:
            i = block.find(marker)
            while i >= 0:
                a = block.rfind(b"\n", 0, i) + 1
                z = block.find(b"\n", i)
                rec = parse_spec_decoding_line(block[a:z], offset=base + a)
                if rec is not None:
                    new.append(rec)
                i = block.find(marker, z)
        if b"Avg generation throughput" in block:
            for m in _GEN.finditer(block):
                v = _float(m.group(1).decode())
                if v is not None:
                    self.throughput.append(v)
        self.records += sorted(new, key=lambda r: r.offset or 0)      # both markers' lines in file order

    def summary(self, *, source: str = "log", start: Optional[int] = None, end: Optional[int] = None,
                num_spec_tokens: Optional[int] = None) -> VllmLogSummary:
        """The :class:`VllmLogSummary` of the lines read whose offset lies in ``[start, end)`` (byte
        offsets; ``None``: unbounded). For V0's cumulative lines the line before ``start`` is the base."""
        inside = [r for r in self.records if (start is None or (r.offset or 0) >= start)
                  and (end is None or (r.offset or 0) < end)]
        before = None
        if start is not None:
            earlier = [r for r in self.records if (r.offset or 0) < start and r.wording == "v0"]
            before = earlier[-1] if earlier else None
        return summarize_spec_lines(inside, source=source, lines=self.lines, vllm_lines=self.vllm_lines,
                                    num_spec_tokens=num_spec_tokens, before=before,
                                    generation_throughput=self.throughput)


def summarize_box_window(box, path: str, start: int = 0, end: Optional[int] = None, *, timeout: float = 30.0,
                         block: int = 8 << 20, num_spec_tokens: Optional[int] = None) -> VllmLogSummary:
    """The :class:`VllmLogSummary` of a vLLM log file ``path`` on ``box`` (a :class:`remote.Box`:
    ``stat``, ``read_bytes``) between byte offsets ``start`` and ``end`` (default: its size now), read
    in ``block``-byte ranges, each box call with ``timeout`` seconds: a measurement's window (the
    log's size before and after it; the stat logger prints its last line up to
    ``VLLM_LOG_STATS_INTERVAL`` seconds after the last request, so read ``end`` after that). A V0
    log's cumulative counts are based on the last metrics line before ``start``, which this reads
    backwards for (at most 64 blocks). Raises what the box raises (file missing, time-outs) and
    ``ValueError`` for ``start`` beyond ``end``."""
    size = box.stat(path, timeout=timeout).size if end is None else end
    if start > size:
        raise ValueError(f"{path}: window start {start} is beyond its end {size}")
    reader = VllmLogReader(offset=start)
    offset = start
    while offset < size:
        data = box.read_bytes(path, offset, min(block, size - offset), timeout=timeout)
        if not data:
            break
        reader.feed(data)
        offset += len(data)
    reader.finish()
    window = reader.summary(source=f"{path} bytes {start}-{offset}", num_spec_tokens=num_spec_tokens)
    if window.cumulative and start > 0:
        back = VllmLogReader(offset=max(0, start - 64 * block))
        pos = max(0, start - 64 * block)
        while pos < start:
            data = box.read_bytes(path, pos, min(block, start - pos), timeout=timeout)
            if not data:
                break
            back.feed(data)
            pos += len(data)
        back.finish()
        base = [r for r in back.records if r.wording == "v0"]
        window = summarize_spec_lines(window.spec_lines, source=window.source, lines=window.lines,
                                      vllm_lines=window.vllm_lines, num_spec_tokens=num_spec_tokens,
                                      before=base[-1] if base else None,
                                      generation_throughput=window.generation_throughput)
    return window
