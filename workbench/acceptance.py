"""Acceptance measurement: accept length and accept rate, exactly as SGLang defines them.

Definitions (SGLang 0.5.23, ``srt/managers/tokenizer_manager.py`` for ``/generate``'s
``meta_info``, ``srt/managers/scheduler_components/metrics_reporter.py`` for the decode log):

- **accept length** = tokens per verify step, bonus token included:
  ``completion_tokens / spec_verify_ct``. Over several requests this module sums first:
  ``Σ completion_tokens / Σ spec_verify_ct``.
- **accept rate** = correct drafts / proposed drafts, proposed = ``spec_verify_ct ×
  (num_draft_tokens − 1)``. Over several requests: ``Σ spec_num_correct_drafts /
  Σ spec_num_proposed_drafts``; the plain mean of the per-request ``spec_accept_rate`` is kept
  beside it.

SGLang adds the ``spec_*`` keys to ``meta_info`` only when ``spec_verify_ct > 0``. A response
without them means speculative decoding is off or the engine did not report it; this module
says so (``speculative=False``, ``accept_length=None``) and never substitutes 1.0.

Two sources: :func:`measure_generate` (greedy requests to ``POST /generate``) and the server log
(:func:`parse_log_line`, :func:`parse_log`, :func:`acceptance_from_log`).
"""

from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

import httpx

__all__ = [
    "AcceptanceError", "RequestRecord", "AcceptanceMeasurement", "measure_generate", "summarize_responses",
    "load_prompts", "LogRecord", "ParsedLog", "LogAcceptance", "parse_log_line", "parse_log", "acceptance_from_log",
]

NOT_SPECULATIVE_NOTE = (
    "no response carried spec_verify_ct: speculative decoding is off on this server, or the engine did not "
    "report it (SGLang 0.5.23 adds the spec_* meta_info keys only when spec_verify_ct > 0); accept length is "
    "unknown, not 1.0"
)

SERVER_INFO_KEYS = (
    "model_path", "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "tp_size", "version",
)


class AcceptanceError(RuntimeError):
    """A measurement could not be made: the server was unreachable, answered with an error
    status, or sent a body that is not a ``/generate`` response. The message names the URL."""


# ---------------------------------------------------------------------------------------------
# /generate
# ---------------------------------------------------------------------------------------------


@dataclass
class RequestRecord:
    """One measured ``/generate`` request (warm-up requests are never recorded).

    ``prompt_index``: index into the prompt list; token counts from ``meta_info``;
    ``spec_verify_ct`` and the other ``spec_*`` values are ``None`` when the response did not
    carry them; ``histogram``: ``spec_correct_drafts_histogram`` (index k = verify steps that
    accepted k drafts; the pre-0.5.23 key ``spec_accept_histogram`` is read too);
    ``e2e_latency``: the server's seconds; ``wall_s``: seconds measured by this client.
    """

    prompt_index: int
    completion_tokens: int
    prompt_tokens: int | None
    spec_verify_ct: int | None
    spec_accept_length: float | None
    spec_accept_rate: float | None
    spec_num_correct_drafts: int | None
    spec_num_proposed_drafts: int | None
    histogram: list[int] | None
    e2e_latency: float | None
    wall_s: float
    finish_reason: Any = None
    text: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AcceptanceMeasurement:
    """Aggregate of measured requests.

    ``accept_length`` = Σ completion_tokens / Σ spec_verify_ct over the requests that report
    ``spec_verify_ct`` (``None`` when none does); ``accept_rate`` = Σ correct / Σ proposed
    drafts; ``mean_spec_accept_rate``: mean of per-request ``spec_accept_rate``;
    ``verify_steps`` = Σ spec_verify_ct; ``total_tokens`` = Σ completion_tokens (all measured
    requests); ``wall_s``: seconds spent in the measured requests; ``tokens_per_s`` =
    total_tokens / wall_s; ``histogram``: element-wise sum; ``speculative``: at least one
    response reported ``spec_verify_ct``; ``note``: why a value is missing, if one is;
    ``server_info``: the speculative settings ``/server_info`` reported (or ``None``).
    """

    accept_length: float | None
    accept_rate: float | None
    mean_spec_accept_rate: float | None
    verify_steps: int
    total_tokens: int
    wall_s: float
    tokens_per_s: float | None
    speculative: bool
    records: list[RequestRecord]
    histogram: list[int] | None = None
    requests_without_spec: int = 0
    note: str | None = None
    warmup: int = 0
    max_new_tokens: int | None = None
    base_url: str | None = None
    server_info: dict | None = None
    source: str = "/generate"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["records"] = [r.to_dict() for r in self.records]
        return d


def _opt_int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _opt_float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def record_from_response(prompt_index: int, body: Any, wall_s: float, *, url: str = "/generate") -> RequestRecord:
    """Turn one ``/generate`` JSON response into a :class:`RequestRecord`.

    Raises :class:`AcceptanceError` when ``meta_info.completion_tokens`` is missing.
    """
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    meta = body.get("meta_info") if isinstance(body, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("completion_tokens"), int):
        raise AcceptanceError(f"{url}: response has no meta_info.completion_tokens: {str(body)[:300]}")
    hist = meta.get("spec_correct_drafts_histogram", meta.get("spec_accept_histogram"))
    return RequestRecord(
        prompt_index=prompt_index,
        completion_tokens=meta["completion_tokens"],
        prompt_tokens=_opt_int(meta.get("prompt_tokens")),
        spec_verify_ct=_opt_int(meta.get("spec_verify_ct")),
        spec_accept_length=_opt_float(meta.get("spec_accept_length")),
        spec_accept_rate=_opt_float(meta.get("spec_accept_rate")),
        spec_num_correct_drafts=_opt_int(meta.get("spec_num_correct_drafts")),
        spec_num_proposed_drafts=_opt_int(meta.get("spec_num_proposed_drafts")),
        histogram=[int(x) for x in hist] if isinstance(hist, list) else None,
        e2e_latency=_opt_float(meta.get("e2e_latency")),
        wall_s=wall_s,
        finish_reason=meta.get("finish_reason"),
        text=body.get("text") if isinstance(body.get("text"), str) else None,
    )


def summarize_responses(records: Sequence[RequestRecord], **extra: Any) -> AcceptanceMeasurement:
    """Aggregate :class:`RequestRecord` s as SGLang defines accept length / rate (module doc)."""
    spec = [r for r in records if r.spec_verify_ct]
    total_tokens = sum(r.completion_tokens for r in records)
    wall = sum(r.wall_s for r in records)
    verify = sum(r.spec_verify_ct for r in spec)
    accept_length = sum(r.completion_tokens for r in spec) / verify if verify else None
    with_counts = [r for r in spec if r.spec_num_proposed_drafts is not None and r.spec_num_correct_drafts is not None]
    proposed = sum(r.spec_num_proposed_drafts for r in with_counts)
    accept_rate = sum(r.spec_num_correct_drafts for r in with_counts) / proposed if proposed else None
    rates = [r.spec_accept_rate for r in spec if r.spec_accept_rate is not None]
    hist: list[int] | None = None
    for r in spec:
        if r.histogram:
            hist = hist or []
            hist += [0] * (len(r.histogram) - len(hist))
            for k, v in enumerate(r.histogram):
                hist[k] += v
    note = None
    if not records:
        note = "no requests were measured"
    elif not spec:
        note = NOT_SPECULATIVE_NOTE
    elif accept_rate is None:
        note = "responses carry spec_verify_ct but not spec_num_correct_drafts/spec_num_proposed_drafts: accept rate unknown"
    return AcceptanceMeasurement(
        accept_length=accept_length, accept_rate=accept_rate,
        mean_spec_accept_rate=statistics.fmean(rates) if rates else None,
        verify_steps=verify, total_tokens=total_tokens, wall_s=wall,
        tokens_per_s=total_tokens / wall if wall > 0 else None,
        speculative=bool(spec), records=list(records), histogram=hist,
        requests_without_spec=len(records) - len(spec), note=note, **extra,
    )


def _post_generate(client: httpx.Client, url: str, prompt: str, max_new_tokens: int) -> tuple[Any, float]:
    payload = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    t0 = time.perf_counter()
    try:
        resp = client.post(url, json=payload)
    except httpx.HTTPError as exc:
        raise AcceptanceError(f"POST {url} failed: {type(exc).__name__}: {exc}") from exc
    wall = time.perf_counter() - t0
    if resp.status_code != 200:
        raise AcceptanceError(f"POST {url} answered {resp.status_code}: {resp.text[:500]}")
    try:
        return resp.json(), wall
    except ValueError as exc:
        raise AcceptanceError(f"POST {url} answered a body that is not JSON: {resp.text[:300]!r}") from exc


def _server_info(client: httpx.Client, base_url: str) -> dict:
    url = base_url.rstrip("/") + "/server_info"
    try:
        resp = client.get(url)
        resp.raise_for_status()
        info = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"GET {url}: {type(exc).__name__}: {exc}"}
    if not isinstance(info, dict):
        return {"error": f"GET {url}: not a JSON object"}
    return {k: info.get(k) for k in SERVER_INFO_KEYS if k in info}


def measure_generate(
    base_url: str,
    prompts: Sequence[str] | None = None,
    *,
    max_new_tokens: int = 128,
    warmup: int = 1,
    timeout: float = 300.0,
    client: httpx.Client | None = None,
    fetch_server_info: bool = True,
    keep_text: bool = False,
) -> AcceptanceMeasurement:
    """Measure accept length on a running server with greedy ``POST /generate`` requests.

    ``prompts``: texts (default :func:`load_prompts`), sent one at a time with
    ``temperature=0`` and ``max_new_tokens``. The first ``warmup`` requests (prompts taken
    in order, cycling) are sent first and excluded from every number. ``timeout``: seconds per
    request. ``client``: an ``httpx.Client`` to use (tests pass one with a mock transport).
    With ``fetch_server_info`` the server's speculative settings from ``GET /server_info`` are
    stored beside the numbers (an error there is recorded, not raised).
    Raises :class:`AcceptanceError` on a connection failure, a non-200 answer or a body that
    is not a ``/generate`` response.
    """
    texts = [p["text"] if isinstance(p, dict) else p for p in (prompts if prompts is not None else load_prompts())]
    if not texts:
        raise AcceptanceError("no prompts to send")
    url = base_url.rstrip("/") + "/generate"
    own = client is None
    client = client or httpx.Client(timeout=timeout)
    try:
        for i in range(warmup):
            _post_generate(client, url, texts[i % len(texts)], max_new_tokens)
        records = []
        for i, text in enumerate(texts):
            body, wall = _post_generate(client, url, text, max_new_tokens)
            rec = record_from_response(i, body, wall, url=url)
            if not keep_text:
                rec.text = None
            records.append(rec)
        info = _server_info(client, base_url) if fetch_server_info else None
    finally:
        if own:
            client.close()
    return summarize_responses(records, warmup=warmup, max_new_tokens=max_new_tokens, base_url=base_url,
                               server_info=info)


def load_prompts(path: str | Path | None = None) -> list[dict]:
    """Load a JSONL prompt set: one object per line with at least ``text`` (also ``id``,
    ``kind``, ``source``). ``path=None`` loads the built-in ``workbench/prompts/default.jsonl``.
    Blank lines and lines starting with ``//`` are skipped.
    Raises ``ValueError`` naming the line for a line that is not a JSON object with ``text``.
    """
    if path is None:
        text = resources.files("workbench").joinpath("prompts/default.jsonl").read_text(encoding="utf-8")
        name = "workbench/prompts/default.jsonl"
    else:
        text = Path(path).read_text(encoding="utf-8")
        name = str(path)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}:{n}: not JSON ({exc.msg})") from exc
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise ValueError(f"{name}:{n}: expected an object with a string 'text'")
        out.append(obj)
    return out


# ---------------------------------------------------------------------------------------------
# Server log
# ---------------------------------------------------------------------------------------------

# [2026-01-01 12:00:00.123 DP0 PP1 ATTN_CP0 MOE_DP0 TP3 EP3] Decode batch [17], ...
_PREFIX = re.compile(
    r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(?P<ms>\d{3}))?"
    r"(?P<tags>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] "
)
_BATCH = re.compile(r"(?P<kind>Decode|Prefill) batch(?: \[(?P<iter>\d+)\])?, (?P<body>.*?)\s*$")
_TAG = re.compile(r" (DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)")
_GRAPH = re.compile(r"^(cuda|cpu|npu|musa) graph$")

_FIELD_NAMES = {
    "#running-req": "running_req", "#queue-req": "queue_req", "#token": "num_tokens", "token usage": "token_usage",
    "accept len": "accept_len", "accept rate": "accept_rate", "cap len": "cap_len",
    "block accept len": "block_accept_len", "gen throughput (token/s)": "gen_throughput",
    "input throughput (token/s)": "input_throughput", "#new-seq": "new_seq", "#new-token": "new_token",
    "#cached-token": "cached_token", "#pending-token": "pending_token",
}


def _number(s: str) -> Any:
    if s in ("True", "False"):
        return s == "True"
    try:
        return int(s)
    except ValueError:
        try:
            return float(s)
        except ValueError:
            return s


@dataclass
class LogRecord:
    """One SGLang ``Decode batch`` / ``Prefill batch`` log line.

    ``kind``: ``"decode"`` or ``"prefill"``; ``timestamp``: ``datetime`` (milliseconds when
    ``SGLANG_LOG_MS=1``), ``None`` for a line without SGLang's prefix (custom logging config);
    ``ranks``: ``{"DP": 0, "TP": 3, ...}``; ``iteration``: the ``[N]`` forward iteration when
    logged; ``accept_len`` / ``accept_rate`` only with speculative decoding; ``graph_backend``
    (``cuda``/``cpu``/``npu``/``musa``) and ``graph`` (bool); throughputs in tokens/s;
    ``fields``: every ``key: value`` of the line (numbers converted); ``line``: the raw line.
    Format: SGLang 0.5.23 ``metrics_reporter.py`` (``report_decode_stats``,
    ``report_prefill_stats``) and ``utils/common.py`` (``configure_logger``).
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
    fields: dict[str, Any] = field(default_factory=dict)
    line: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["timestamp"] = self.timestamp.isoformat(sep=" ") if self.timestamp else None
        return d


def parse_log_line(line: str) -> LogRecord | None:
    """Parse one log line; ``None`` when it is not a ``Decode batch`` / ``Prefill batch`` line.

    Accepts SGLang's prefix ``[YYYY-mm-dd HH:MM:SS[.mmm][ DPn][ PPn][ ATTN_CPn][ MOE_DPn][ TPn][ EPn]] ``
    anywhere in the line (so container-log prefixes do not matter) and, failing that, a bare
    ``Decode batch, ...`` message (custom ``SGLANG_LOGGING_CONFIG_PATH`` formats; timestamp
    ``None``). Field order is not assumed; ``#queue-req`` may end the line or be followed by
    an optional suffix (``, est. decode TFLOPS/s ...``).
    """
    line = line.rstrip("\r\n")
    m = _PREFIX.search(line)
    ts = None
    ranks: dict[str, int] = {}
    rest_start = 0
    if m:
        ts = datetime.strptime(m.group("ts"), "%Y-%m-%d %H:%M:%S")
        if m.group("ms"):
            ts = ts.replace(microsecond=int(m.group("ms")) * 1000)
        ranks = {k: int(v) for k, v in _TAG.findall(m.group("tags"))}
        rest_start = m.end()
    b = _BATCH.search(line, rest_start)
    if not b or (m and b.start() != rest_start):
        return None
    fields: dict[str, Any] = {}
    for part in b.group("body").split(", "):
        key, sep, value = part.rpartition(": ")
        if not sep:
            if part:
                fields.setdefault("_unparsed", []).append(part)
            continue
        fields[key] = _number(value.rstrip(","))
    rec = LogRecord(kind=b.group("kind").lower(), timestamp=ts, ranks=ranks,
                    iteration=int(b.group("iter")) if b.group("iter") else None, fields=fields, line=line)
    for key, value in fields.items():
        attr = _FIELD_NAMES.get(key)
        if attr is not None and isinstance(value, (int, float)):
            setattr(rec, attr, value)
        g = _GRAPH.match(key)
        if g and isinstance(value, bool):
            rec.graph_backend, rec.graph = g.group(1), value
    return rec


@dataclass
class ParsedLog:
    """Result of :func:`parse_log`: ``decode`` and ``prefill`` records in order and ``summary``
    (``decode_lines``, ``accept_len_lines``, ``accept_len_min`` / ``_median`` / ``_max`` /
    ``_last``, ``accept_rate_median`` / ``_last``, ``speculative``, ``first`` / ``last``
    timestamps)."""

    decode: list[LogRecord]
    prefill: list[LogRecord]
    summary: dict

    def to_dict(self) -> dict:
        return {"decode": [r.to_dict() for r in self.decode], "prefill": [r.to_dict() for r in self.prefill],
                "summary": self.summary}


def parse_log(lines: Iterable[str] | str) -> ParsedLog:
    """Parse a log (an iterable of lines or one string) into decode and prefill records plus a
    summary of the accept lengths the decode lines report."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    decode, prefill = [], []
    for line in lines:
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


def acceptance_from_log(records: Iterable[LogRecord] | ParsedLog) -> LogAcceptance:
    """Accept length / rate from decode-log records (see :class:`LogAcceptance`)."""
    recs = records.decode if isinstance(records, ParsedLog) else [r for r in records if r.kind == "decode"]
    lens = [r.accept_len for r in recs if r.accept_len is not None]
    rates = [r.accept_rate for r in recs if r.accept_rate is not None]
    if not lens:
        why = ("no decode log line at all: no decode-log interval elapsed yet, or the log is not the scheduler's"
               if not recs else
               f"{len(recs)} decode lines, none with 'accept len': speculative decoding is off on this server")
        return LogAcceptance(None, None, None, None, None, None, len(recs), False, note=why)
    return LogAcceptance(
        accept_length=statistics.fmean(lens), accept_rate=statistics.fmean(rates) if rates else None,
        median=statistics.median(lens), last=lens[-1], min=min(lens), max=max(lens), lines=len(lens),
        speculative=True,
    )
