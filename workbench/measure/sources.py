"""Acceptance measured from every source an SGLang server offers, warm-up excluded, with every
definition users meet side by side.

Sources (each probed; one that the box does not offer is reported unavailable, with why):

``generate``
    Greedy ``POST /generate``; per request ``meta_info`` (SGLang 0.5.23
    ``srt/managers/tokenizer_manager.py`` ``TokenizerManager._calculate_spec_decoding_metrics``):
    ``completion_tokens``, and only when ``spec_verify_ct > 0``: ``spec_verify_ct``,
    ``spec_accept_length`` (= completion_tokens / spec_verify_ct), ``spec_accept_rate``,
    ``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` (= spec_verify_ct ×
    (speculative_num_draft_tokens − 1)) and ``spec_correct_drafts_histogram`` (index k = verify steps
    that accepted exactly k drafts: ``srt/managers/schedule_batch.py``
    ``Req.update_spec_correct_drafts_histogram``; its length is the largest k seen + 1, not the
    draft count). Warm-up excluded: the first K requests are sent and not counted.
``openai``
    ``POST /v1/completions`` (or ``/v1/chat/completions``) with ``return_spec_tokens_details: true``
    (``srt/entrypoints/openai/protocol.py`` ``CompletionRequest`` / ``ChatCompletionRequest``):
    ``usage.completion_tokens`` and ``sglext.spec_tokens_details`` (``protocol.py``
    ``SpecTokensDetails``, built from the same meta_info by ``srt/entrypoints/openai/utils.py``
    ``spec_tokens_details_from_meta_info``, which fills absent keys with 0, so a
    ``spec_verify_ct`` of 0 means "not reported", never an accept length of 0; the response-level
    ``sglext`` is added by ``serving_completions.py`` ``_build_completion_response`` /
    ``serving_chat.py`` ``_build_chat_response`` only when some detail exists). Warm-up excluded
    as for ``generate``.
``server_info``
    ``GET /server_info`` ``internal_states[i].avg_spec_accept_length`` (one dict per DP rank;
    ``srt/managers/scheduler_components/internal_state.py`` ``_add_speculative`` /
    ``_average_accept_length``) = ``spec_total_num_accept_tokens / spec_total_num_forward_ct`` of
    ``scheduler_components/metrics_reporter.py``: accepted tokens = correct drafts + 1 bonus per
    request per verify step (``batch_result_processor.py`` ``process_batch_result_decode`` feeds
    ``update_spec_metrics`` with ``srt/managers/utils.py`` ``get_num_generated_tokens`` =
    ``num_correct_drafts + bs × num_non_draft_tokens_per_req``, which is 1 for EAGLE/EAGLE3),
    folded into the totals only at each decode log tick (``report_decode_stats``, every
    ``--decode-log-interval`` decode iterations), reset by ``/flush_cache`` (``Scheduler.flush_cache``
    → ``reset_metrics``; also by an accept-threshold change through ``/set_internal_state``,
    ``internal_state.py`` ``_apply_accept_threshold``). So it is τ (below) over
    the server's lifetime: it **cannot exclude warm-up** (nor other clients' traffic), unless
    ``flush_cache_after_warmup=True`` resets it after the warm-up (then the window minus its last,
    still unfolded, partial log interval).
``metrics``
    ``GET /metrics`` (only with ``--enable-metrics``; ``srt/utils/common.py``
    ``add_prometheus_middleware``), parsed with ``prometheus_client.parser``
    (``srt/observability/metrics_collector.py``). Counters, taken as after − before deltas around
    the measured window (so warm-up is excluded): ``sglang:spec_verify_calls_total`` (Σ
    spec_verify_ct of finished requests), ``sglang:generation_tokens_total`` (Σ completion_tokens),
    ``sglang:num_requests_total``, ``sglang:prompt_tokens_total``
    (``TokenizerMetricsCollector.observe_one_finished_request``). No counter counts correct
    drafts, so the counters give the SGLang accept length only. Gauges (row ``metrics_gauges``):
    ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate`` are the values of the LAST
    decode-log interval (``metrics_reporter.py`` ``report_decode_stats`` → ``SchedulerMetricsCollector.log_stats``):
    τ and accept rate over the last ``--decode-log-interval`` decode iterations, 0.0 before the first
    tick and on non-speculative servers (reported as missing, never as a value); a gauge is not
    cumulative, so no before/after delta exists: it excludes warm-up only when the window is at
    least two log intervals long (flagged per measurement).

Releases: every name above is SGLang 0.5.23's; older releases name and place them differently
(``meta_info`` keys renamed at 0.5.6 and 0.5.12, ``/server_info`` only from 0.5.6 and
``avg_spec_accept_length`` at the top level in 0.4.6, ``sglang:spec_verify_calls_total`` only from
0.5.15, ``sglang:spec_accept_rate`` with the decode line's definition of that release): each with
its releases in :mod:`workbench.measure.fields` and :mod:`workbench.logs.formats`. Every reader
here accepts every release's names and reports the definitions below; a source a release lacks is
"unavailable", with the release that added it.

Definitions (over the counted requests; sums first, then divide; never 1.0 for a missing value):

- **accept length (SGLang)** ``L = Σ completion_tokens / Σ spec_verify_ct``: tokens per verify step,
  bonus included, as ``meta_info.spec_accept_length`` and SGLang's docs define it. It counts the
  request's first token, which comes from the prefill, not from a verify step, and it loses the
  accepted tokens cut off by ``max_new_tokens`` or a stop string in the last step.
- **accepted drafts per step** ``a = Σ spec_num_correct_drafts / Σ spec_verify_ct``.
- **τ** (EAGLE, EAGLE-2, EAGLE-3 papers: "average acceptance length τ", the average number of
  tokens accepted/generated per drafting-verification cycle, as the papers word it (quoted from
  memory; this is the usual reading), computed in the EAGLE code as ``new_token += accept_length +
  1`` per cycle, divided by the number of cycles) ``τ = 1 + a = (Σ correct + Σ verify) / Σ verify``:
  every verify step's accepted drafts plus its one bonus token, no prefill token, nothing cut.
  SGLang's server-side ``accept len`` (log line, ``/server_info``, the gauge) is this τ. The two
  are linked exactly by ``L = τ + (prefill_tokens − cut_tokens) / Σ verify`` where
  ``prefill_tokens`` = requests with a verify step (one token each) and ``cut_tokens`` = tokens
  the verify steps accepted but the request did not return.
- **accept rate** ``Σ spec_num_correct_drafts / Σ spec_num_proposed_drafts`` (proposed =
  verify steps × (num_draft_tokens − 1)): SGLang's ``spec_accept_rate``.
- **per-position acceptance** ``P(accepted ≥ k) = Σ_{j ≥ k} h[j] / Σ h`` for k = 1 … D−1 draft
  positions, from the summed ``spec_correct_drafts_histogram`` h (chain drafting: the k-th draft
  token was accepted; tree drafting: the accepted path reached depth k).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import httpx

from workbench.errors import AcceptanceError, MeasureError, PromptSetError
from workbench.measure.generate import (
    NO_GENERATE_HANDLERS, AcceptanceMeasurement, RequestRecord, _opt_float, _opt_int, auth_headers,
    record_from_response, sum_histograms, summarize_responses, timeout_message,
)
from workbench.logs.formats import ACCEPT_RATE_DEFINITIONS, correct_draft_rate, decode_line_format
from workbench.measure.fields import METRIC_NAMES, has_name
from workbench.measure.prompts import BUILTIN_PROMPT_SETS, load_prompts
from workbench.measure.vllm import (
    ENGINE_VLLM, GENERATE_UNAVAILABLE, M_ACCEPTED, M_DRAFT_TOKENS, M_DRAFTS, M_EMITTED_V0, M_PER_POS, NO_PER_REQUEST,
    SERVER_INFO_UNAVAILABLE, VLLM_METRICS, detect_engine, send_completion, vllm_server,
)
from workbench.measure.vllm import M_GEN_TOKENS as V_GEN_TOKENS, M_REQUESTS as V_REQUESTS, _SRC as _VLLM_SRC
from workbench.rules.acceptance_level import AcceptanceLevel, classify_acceptance, verify_ceiling
from workbench.rules.runtime import acceptance_collapsed

__all__ = [
    "SOURCES", "BUILTIN_PROMPT_SETS", "MeasureError", "PromptSetError", "SourceAcceptance", "Measurement",
    "load_prompts", "measure", "acceptance_from_counts", "position_acceptance", "record_from_openai",
    "parse_metrics", "MetricsSnapshot", "format_table", "summarize_records", "avg_accept_lengths", "vllm_counter_row",
    "measure_vllm", "measure_generate_vllm",
]

SOURCES = ("generate", "openai", "server_info", "metrics")
REQUEST_SOURCES = ("generate", "openai")

SERVER_KEYS = (
    "model_path", "served_model_name", "speculative_algorithm", "speculative_draft_model_path",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "decode_log_interval",
    "enable_metrics", "tp_size", "dp_size", "version",
)

# Prometheus names (SGLang 0.5.23 srt/observability/metrics_collector.py)
M_VERIFY = "sglang:spec_verify_calls_total"
M_GEN_TOKENS = "sglang:generation_tokens_total"
M_REQUESTS = "sglang:num_requests_total"
M_PROMPT_TOKENS = "sglang:prompt_tokens_total"
G_ACCEPT_LENGTH = "sglang:spec_accept_length"
G_ACCEPT_RATE = "sglang:spec_accept_rate"
G_NUM_STEPS = "sglang:spec_num_steps"
G_NUM_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"
COUNTERS = (M_VERIFY, M_GEN_TOKENS, M_REQUESTS, M_PROMPT_TOKENS)
GAUGES = (G_ACCEPT_LENGTH, G_ACCEPT_RATE, G_NUM_STEPS, G_NUM_DRAFT_TOKENS)


# ---------------------------------------------------------------------------------------------
# Prompt sets
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Definitions
# ---------------------------------------------------------------------------------------------


def position_acceptance(histogram: Sequence[int] | None, positions: int | None = None) -> list[float] | None:
    """``P(accepted ≥ k)`` for k = 1 … ``positions`` from a ``spec_correct_drafts_histogram`` (index
    k = verify steps that accepted exactly k drafts). ``positions`` defaults to ``len(histogram) − 1``
    (SGLang's histogram stops at the largest k seen, so pass the draft count, num_draft_tokens − 1,
    to get the trailing zeros). ``None`` when the histogram is missing or empty."""
    if not histogram or sum(histogram) <= 0:
        return None
    total = sum(histogram)
    positions = len(histogram) - 1 if positions is None else positions
    return [sum(histogram[k:]) / total for k in range(1, positions + 1)]


def acceptance_from_counts(*, completion_tokens: int | None, verify_steps: int | None,
                           correct_drafts: int | None = None, proposed_drafts: int | None = None,
                           requests: int | None = None) -> dict[str, float | int | None]:
    """The four definitions (module docstring) from summed counts.

    Returns ``accept_length`` (Σ completion / Σ verify), ``drafts_per_step`` (Σ correct / Σ verify),
    ``tau`` (1 + drafts_per_step), ``accept_rate`` (Σ correct / Σ proposed), ``prefill_tokens``
    (= ``requests``) and ``cut_tokens`` (= Σ correct + Σ verify + requests − Σ completion: accepted
    tokens not returned). A value whose inputs are missing, or whose denominator is 0, is ``None``.
    """
    out: dict[str, float | int | None] = dict.fromkeys(
        ("accept_length", "drafts_per_step", "tau", "accept_rate", "prefill_tokens", "cut_tokens"))
    if not verify_steps:
        return out
    if completion_tokens is not None:
        out["accept_length"] = completion_tokens / verify_steps
    if correct_drafts is not None:
        out["drafts_per_step"] = correct_drafts / verify_steps
        out["tau"] = 1.0 + correct_drafts / verify_steps
        if requests is not None and completion_tokens is not None:
            out["prefill_tokens"] = requests
            out["cut_tokens"] = correct_drafts + verify_steps + requests - completion_tokens
    if correct_drafts is not None and proposed_drafts:
        out["accept_rate"] = correct_drafts / proposed_drafts
    return out


@dataclass
class SourceAcceptance:
    """Acceptance from one source (one row of the table).

    ``source``: ``generate``, ``openai``, ``server_info``, ``metrics`` (counters) or
    ``metrics_gauges``; ``endpoint``: what was read; ``scope``: ``measured window``, ``lifetime`` or
    ``last decode-log interval``; ``warmup_excluded``: whether the numbers leave the warm-up out
    (``None``: unknown); ``available``: the source answered (``reason`` says why not).
    Counts over the scope: ``requests``, ``completion_tokens``, ``verify_steps``,
    ``correct_drafts``, ``proposed_drafts``; ``draft_positions`` (num_draft_tokens − 1).
    Numbers (``None`` when the source does not give them, never a substitute):
    ``accept_length`` (SGLang, tokens per verify step), ``drafts_per_step``, ``tau``,
    ``accept_rate`` (0..1), ``tokens_per_s`` (completion tokens per second of the scope's wall
    time), ``wall_s``; ``histogram`` (summed ``spec_correct_drafts_histogram``),
    ``position_acceptance`` (P(accepted ≥ k), k = 1 …), ``prefill_tokens``, ``cut_tokens``;
    ``notes``: caveats; ``raw``: the values read (before/after snapshots, gauges).
    """

    source: str
    endpoint: str
    scope: str
    warmup_excluded: bool | None
    available: bool = True
    reason: str | None = None
    requests: int | None = None
    completion_tokens: int | None = None
    verify_steps: int | None = None
    correct_drafts: int | None = None
    proposed_drafts: int | None = None
    draft_positions: int | None = None
    accept_length: float | None = None
    drafts_per_step: float | None = None
    tau: float | None = None
    accept_rate: float | None = None
    tokens_per_s: float | None = None
    wall_s: float | None = None
    histogram: list[int] | None = None
    position_acceptance: list[float] | None = None
    prefill_tokens: int | None = None
    cut_tokens: int | None = None
    notes: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_records(source: str, endpoint: str, records: Sequence[RequestRecord],
                      draft_positions: int | None) -> SourceAcceptance:
    """A :class:`SourceAcceptance` (scope ``measured window``) from counted requests
    (:class:`RequestRecord` s of any release, :func:`record_from_response`) with the module
    docstring's definitions; ``draft_positions``: num_draft_tokens − 1 when known (else taken from
    proposed / verify)."""
    row = SourceAcceptance(source, endpoint, "measured window", True, requests=len(records))
    spec = [r for r in records if r.spec_verify_ct]
    row.completion_tokens = sum(r.completion_tokens for r in records)
    row.wall_s = sum(r.wall_s for r in records)
    row.tokens_per_s = row.completion_tokens / row.wall_s if row.wall_s > 0 else None
    if not records:
        row.notes.append("no request was counted")
        return row
    if not spec:
        row.notes.append("no response reported spec_verify_ct > 0: speculative decoding is off on this server, or "
                         "the engine does not report it (SGLang adds the spec_* keys only when spec_verify_ct > 0); "
                         "accept length unknown, not 1.0")
        return row
    if len(spec) < len(records):
        row.notes.append(f"{len(records) - len(spec)} of {len(records)} requests reported no verify step "
                         "(e.g. one token long); they are left out of the spec sums")
    verify = sum(r.spec_verify_ct for r in spec)
    row.verify_steps = verify
    completion = sum(r.completion_tokens for r in spec)
    full = [r for r in spec if r.spec_num_correct_drafts is not None]
    correct = sum(r.spec_num_correct_drafts for r in full) if len(full) == len(spec) else None
    with_prop = [r for r in spec if r.spec_num_proposed_drafts]
    proposed = sum(r.spec_num_proposed_drafts for r in with_prop) if len(with_prop) == len(spec) else None
    row.correct_drafts, row.proposed_drafts = correct, proposed
    if correct is None:
        row.notes.append("responses carry spec_verify_ct but not spec_num_correct_drafts: drafts/step, τ and "
                         "accept rate unknown")
    defs = acceptance_from_counts(completion_tokens=completion, verify_steps=verify, correct_drafts=correct,
                                  proposed_drafts=proposed, requests=len(spec))
    for k, v in defs.items():
        setattr(row, k, v)
    if proposed and verify:
        per_step = proposed / verify
        if per_step == int(per_step):
            draft_positions = int(per_step)
    row.draft_positions = draft_positions
    hist = sum_histograms(r.histogram for r in spec)
    row.histogram = hist
    if hist is not None:
        positions = draft_positions if draft_positions is not None else len(hist) - 1
        row.position_acceptance = position_acceptance(hist, positions)
        if sum(hist) != verify:
            row.notes.append(f"the histograms sum to {sum(hist)} verify steps, spec_verify_ct to {verify}")
        if correct is not None and sum(k * v for k, v in enumerate(hist)) != correct:
            row.notes.append("Σ k·histogram[k] differs from Σ spec_num_correct_drafts")
    else:
        row.notes.append("no spec_correct_drafts_histogram in the responses: per-position acceptance unknown")
    detailed = [r for r in spec if r.per_step_accepted]
    if detailed:  # vLLM --per-request-spec-decode-metrics detailed: every verify step's accepted drafts, in order
        row.raw["per_step_accepted"] = {r.prompt_index: list(r.per_step_accepted) for r in detailed}
        bad = [r.prompt_index for r in detailed if len(r.per_step_accepted) != r.spec_verify_ct
               or (r.spec_num_correct_drafts is not None and sum(r.per_step_accepted) != r.spec_num_correct_drafts)]
        row.notes.append(f"per-step acceptance of {len(detailed)} request(s) (vLLM detailed per-request metrics): "
                         "raw.per_step_accepted" + (f"; requests {bad} do not add up to their summary" if bad else ""))
    return row


# ---------------------------------------------------------------------------------------------
# Responses -> records
# ---------------------------------------------------------------------------------------------


def record_from_openai(prompt_index: int, body: Any, wall_s: float, *, url: str = "/v1/completions") -> RequestRecord:
    """One ``/v1/completions`` or ``/v1/chat/completions`` response as a ``RequestRecord``.

    ``usage.completion_tokens`` (``protocol.py`` ``UsageInfo``) is required; the spec fields come
    from ``sglext.spec_tokens_details`` (``SpecTokensDetails``; a list when ``n > 1``: summed).
    A details object with ``spec_verify_ct`` 0 (SGLang's default for an absent key) gives ``None``
    spec fields, as a missing ``sglext`` does. Raises :class:`AcceptanceError` without usage.
    """
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict) or _opt_int(usage.get("completion_tokens")) is None:
        raise AcceptanceError(f"{url}: response has no usage.completion_tokens: {str(body)[:300]}")
    details = (body.get("sglext") or {}).get("spec_tokens_details") if isinstance(body.get("sglext"), dict) else None
    if isinstance(details, list):
        items = [d for d in details if isinstance(d, dict)]
        details = None
        if items:
            details = {k: sum(_opt_int(d.get(k)) or 0 for d in items)
                       for k in ("spec_verify_ct", "spec_num_correct_drafts", "spec_num_proposed_drafts")}
            hists = [d.get("spec_correct_drafts_histogram") or [] for d in items]
            width = max((len(h) for h in hists), default=0)
            details["spec_correct_drafts_histogram"] = [sum(h[k] for h in hists if k < len(h)) for k in range(width)]
    verify = _opt_int(details.get("spec_verify_ct")) if isinstance(details, dict) else None
    spec = isinstance(details, dict) and bool(verify)
    choices = body.get("choices") or []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    hist = details.get("spec_correct_drafts_histogram") if spec else None
    return RequestRecord(
        prompt_index=prompt_index,
        completion_tokens=int(usage["completion_tokens"]),
        prompt_tokens=_opt_int(usage.get("prompt_tokens")),
        spec_verify_ct=verify if spec else None,
        spec_accept_length=_opt_float(details.get("spec_accept_length")) if spec else None,
        spec_accept_rate=_opt_float(details.get("spec_accept_rate")) if spec else None,
        spec_num_correct_drafts=_opt_int(details.get("spec_num_correct_drafts")) if spec else None,
        spec_num_proposed_drafts=_opt_int(details.get("spec_num_proposed_drafts")) if spec else None,
        histogram=[int(x) for x in hist] if isinstance(hist, list) and hist else None,
        e2e_latency=None,
        wall_s=wall_s,
        finish_reason=first.get("finish_reason"),
        text=None,
    )


# ---------------------------------------------------------------------------------------------
# Prometheus
# ---------------------------------------------------------------------------------------------


@dataclass
class MetricsSnapshot:
    """One ``GET /metrics`` parsed with ``prometheus_client.parser.text_string_to_metric_families``.

    ``samples``: sample name → list of (labels, value); ``families``: declared family name → type
    (a labelled metric is declared by ``# TYPE`` before its first sample exists); ``t``: the
    client's monotonic time of the read (seconds)."""

    samples: dict[str, list[tuple[dict, float]]]
    families: dict[str, str]
    t: float = 0.0

    def declared(self, sample_name: str) -> bool:
        """Whether the metric exists on the server (declared or sampled)."""
        base = sample_name[: -len("_total")] if sample_name.endswith("_total") else sample_name
        return sample_name in self.samples or sample_name in self.families or base in self.families

    def total(self, sample_name: str) -> float | None:
        """Sum over label sets (0.0 when declared without samples, ``None`` when unknown)."""
        if sample_name in self.samples:
            return sum(v for _, v in self.samples[sample_name])
        return 0.0 if self.declared(sample_name) else None

    def gauge(self, name: str) -> float | None:
        """A gauge's value: the ``tp_rank="0"`` sample when there are several (SGLang logs scheduler
        metrics on attention-TP rank 0 unless ``--enable-metrics-for-all-schedulers``), else the
        only one; ``None`` when it has no sample."""
        values = self.samples.get(name) or []
        if not values:
            return None
        rank0 = [v for labels, v in values if labels.get("tp_rank") in ("0", None)]
        return (rank0 or [values[0][1]])[0]


def parse_metrics(text: str, t: float = 0.0) -> MetricsSnapshot:
    """Parse Prometheus text exposition (what SGLang's ``/metrics`` serves) with
    ``prometheus_client``'s parser. Raises ``ValueError`` for text it cannot parse."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[tuple[dict, float]]] = {}
    families: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        families[fam.name] = fam.type
        for s in fam.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return MetricsSnapshot(samples, families, t)


# ---------------------------------------------------------------------------------------------
# The measurement
# ---------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    """Everything one :func:`measure` call saw.

    ``rows``: one :class:`SourceAcceptance` per source (``metrics`` gives two: counters and
    gauges), unavailable ones included with their reason; ``server``: the server's settings from
    ``/server_info`` (``SERVER_KEYS``) or ``None``; ``warmup_summary``: per request source the
    excluded requests' ``requests``, ``completion_tokens``, ``verify_steps``; ``records``: the
    counted requests per request source; ``window_s``: seconds between the before and after
    snapshots; ``duration_s``: the whole call; ``notes``: caveats for the whole measurement.
    """

    base_url: str
    prompt_set: str
    num_prompts: int
    max_new_tokens: int
    warmup: int
    sources: list[str]
    openai_endpoint: str
    rows: list[SourceAcceptance]
    server: dict | None = None
    warmup_summary: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)
    flush_cache: str | None = None
    window_s: float | None = None
    duration_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def row(self, source: str) -> SourceAcceptance | None:
        """The row of ``source`` (``metrics_gauges`` for the metrics gauges), or ``None``."""
        return next((r for r in self.rows if r.source == source), None)

    def findings(self) -> list:
        """``acceptance-collapsed`` findings (:func:`workbench.rules.runtime.acceptance_collapsed`) on every
        available row with an SGLang accept length; each finding's evidence names the source."""

        out = []
        for r in self.rows:
            if r.available and r.accept_length is not None:
                out += acceptance_collapsed({"accept_length": r.accept_length, "verify_steps": r.verify_steps},
                                            source=f"{r.source} ({r.endpoint})")
        return out

    def ceiling(self) -> float | None:
        """The verify ceiling of the measured server (tokens per verify step, bonus included), from
        its ``server`` settings: SGLang's ``speculative_num_draft_tokens`` (else
        ``speculative_num_steps`` + 1), vLLM's ``num_speculative_tokens`` + 1
        (:func:`workbench.rules.acceptance_level.verify_ceiling`); ``None`` when unknown."""
        s = self.server or {}
        if s.get("engine") == "vllm":
            k = s.get("num_speculative_tokens")
            return float(k) + 1 if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None
        return verify_ceiling(None, s)

    def levels(self) -> list[tuple[str, "AcceptanceLevel"]]:
        """Every available row's accept length judged against :meth:`ceiling`
        (:func:`workbench.rules.acceptance_level.classify_acceptance`: the one definition of low
        acceptance the logs, the doctor and the runbooks share): ``(source, level)``."""
        ceiling = self.ceiling()
        return [(r.source, classify_acceptance(r.accept_length, ceiling=ceiling)) for r in self.rows
                if r.available and r.accept_length is not None]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["findings"] = [f.to_dict() if hasattr(f, "to_dict") else asdict(f) for f in self.findings()]
        d["ceiling"] = self.ceiling()
        d["acceptance_levels"] = {src: level.to_dict() for src, level in self.levels()}
        return d


class _Client:
    """The HTTP side of :func:`measure`: one ``httpx.Client``, the user's ``timeout`` (seconds) on
    every call, status reads included."""

    def __init__(self, base_url: str, timeout: float, client: httpx.Client | None, api_key: str | None = None) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.own = client is None
        self.http = client or httpx.Client(timeout=timeout, trust_env=False, headers=auth_headers(api_key))

    def close(self) -> None:
        if self.own:
            self.http.close()

    def get(self, path: str) -> httpx.Response:
        try:
            return self.http.get(self.base + path, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise MeasureError(timeout_message("GET", self.base + path, exc, self.timeout)) from exc

    def post(self, path: str, payload: dict) -> tuple[httpx.Response, float]:
        t0 = time.perf_counter()
        try:
            resp = self.http.post(self.base + path, json=payload, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise MeasureError(timeout_message("POST", self.base + path, exc, self.timeout)) from exc
        return resp, time.perf_counter() - t0


class _SourceUnavailable(Exception):
    pass


def _json(resp: httpx.Response, what: str) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        raise MeasureError(f"{what} answered a body that is not JSON: {resp.text[:200]!r}") from exc


def _server_info(c: _Client) -> tuple[dict | None, str | None]:
    """``/server_info`` (``/get_server_info`` on servers that only have the old name): the JSON
    object, or (None, why)."""
    for path in ("/server_info", "/get_server_info"):
        resp = c.get(path)
        if resp.status_code == 404:
            continue
        if resp.status_code != 200:
            return None, f"GET {path} answered {resp.status_code}: {resp.text[:200]}"
        info = _json(resp, f"GET {c.base}{path}")
        if not isinstance(info, dict):
            return None, f"GET {path} answered {type(info).__name__}, not an object"
        return info, None
    return None, "GET /server_info and /get_server_info answered 404 (not an SGLang server?)"


def _metrics(c: _Client) -> tuple[MetricsSnapshot | None, str | None]:
    resp = c.get("/metrics")
    t = time.monotonic()
    if resp.status_code == 404:
        return None, ("GET /metrics answered 404: the server was not started with --enable-metrics (SGLang mounts "
                      "/metrics only then)")
    if resp.status_code != 200:
        return None, f"GET /metrics answered {resp.status_code}: {resp.text[:200]}"
    try:
        return parse_metrics(resp.text, t), None
    except ValueError as exc:
        return None, f"GET /metrics: not Prometheus text ({exc})"


def avg_accept_lengths(info: dict | None) -> list[float] | None:
    """The ``avg_spec_accept_length`` values of a ``/server_info`` (``/get_server_info``) answer,
    one per DP rank: ``internal_states[i].avg_spec_accept_length`` (SGLang 0.4.7+), else the
    top-level ``avg_spec_accept_length`` (0.4.6 merges the one internal state into the answer;
    :data:`workbench.measure.fields.SERVER_INFO_NAMES`). ``[]`` when the server has none yet (set
    only after the first decode-log tick), ``None`` when ``info`` is not such an answer."""
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states")
    if isinstance(states, list):
        return [float(s["avg_spec_accept_length"]) for s in states
                if isinstance(s, dict) and _opt_float(s.get("avg_spec_accept_length")) is not None]
    top = _opt_float(info.get("avg_spec_accept_length"))
    if top is not None:
        return [top]
    return [] if "speculative_algorithm" in info or "model_path" in info else None


def _payload(source: str, endpoint: str, text: str, max_new_tokens: int) -> tuple[str, dict]:
    if source == "generate":
        return "/generate", {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    if endpoint == "chat":
        return "/v1/chat/completions", {"model": "default", "messages": [{"role": "user", "content": text}],
                                        "max_tokens": max_new_tokens, "temperature": 0,
                                        "return_spec_tokens_details": True}
    return "/v1/completions", {"model": "default", "prompt": text, "max_tokens": max_new_tokens, "temperature": 0,
                               "return_spec_tokens_details": True}


def _send(c: _Client, source: str, endpoint: str, index: int, text: str, max_new_tokens: int,
          server: dict | None = None) -> RequestRecord:
    path, payload = _payload(source, endpoint, text, max_new_tokens)
    resp, wall = c.post(path, payload)
    if resp.status_code in (404, 405):
        raise _SourceUnavailable(f"POST {path} answered {resp.status_code}: this server has no such endpoint")
    if resp.status_code != 200:
        raise MeasureError(f"POST {c.base}{path} answered {resp.status_code}: {resp.text[:300]}")
    body = _json(resp, f"POST {c.base}{path}")
    try:
        if source == "generate":
            return record_from_response(index, body, wall, url=path,
                                        num_steps=_opt_int((server or {}).get("speculative_num_steps")),
                                        num_draft_tokens=_opt_int((server or {}).get("speculative_num_draft_tokens")))
        return record_from_openai(index, body, wall, url=path)
    except AcceptanceError as exc:
        raise MeasureError(str(exc)) from exc


def _progress_enabled(progress: bool | None) -> bool:
    if progress is not None:
        return bool(progress)
    if "ipykernel" in sys.modules:
        try:
            from IPython import get_ipython

            shell = get_ipython()
            return shell is not None and "IPKernelApp" in getattr(shell, "config", {})
        except ImportError:
            return False
    return sys.stderr.isatty()


def measure(
    base_url: str,
    prompts: str | Path | Sequence[str | dict] | None = None,
    *,
    sources: Iterable[str] = SOURCES,
    num_prompts: int | None = None,
    max_new_tokens: int = 128,
    warmup: int = 1,
    openai_endpoint: str = "completions",
    flush_cache_after_warmup: bool = False,
    timeout: float = 300.0,
    progress: bool | None = None,
    client: httpx.Client | None = None,
    start_timeout: float | None = None,
    alive: Callable[[], bool] | None = None,
    api_key: str | None = None,
) -> Measurement:
    """Measure acceptance on a running server from every selected source (module docstring).

    ``base_url``: ``http://host:port`` (over SSH, ``remote.Box.url(port)``, a port forward).
    ``prompts``: a built-in set name, a JSONL path (:func:`workbench.measure.prompts.load_prompts`), a list of texts or
    prompt dicts, or ``None`` for ``default``; the first ``num_prompts`` are used. Each request
    source (``generate``, ``openai``) first sends ``warmup`` requests (prompts in order, cycling)
    that are not counted, then every prompt once, greedy (temperature 0), ``max_new_tokens``
    each. ``server_info`` and ``metrics`` are read before and after the counted requests; when no
    request source is selected, ``/generate`` drives the traffic without being reported.
    ``openai_endpoint``: ``completions`` (the same text as ``/generate``, so the same tokens) or
    ``chat`` (one user message; a real server applies its chat template). ``flush_cache_after_warmup``:
    ``POST /flush_cache`` after the warm-up so ``/server_info``'s lifetime average restarts (it
    also empties the server's prefix cache; off by default). ``timeout``: seconds per request, status
    reads (``/server_info``, ``/metrics``, ``/flush_cache``) and readiness checks included.
    ``progress``: a ``tqdm.auto`` bar on stderr, a widget in a notebook (``None``: only when stderr is a terminal or an IPython kernel runs this; pass ``False`` in
    papermill runbooks, where a widget bar would only clutter the executed notebook and its report).
    ``start_timeout`` (seconds; ``None``: no readiness check) and ``alive``: first wait for a server
    that is still starting, as :func:`workbench.measure.generate.measure_generate` does.
    ``api_key``: the server's ``--api-key`` (sent as ``Authorization: Bearer KEY``, as SGLang requires
    when it is set); ``None``: no header.

    On a vLLM server (no SGLang ``/server_info``; ``/v1/models`` ``owned_by: "vllm"`` or ``vllm:``
    metrics: :func:`workbench.measure.vllm.detect_engine`) the same rows come from vLLM's own sources
    (:func:`workbench.measure.vllm.measure_vllm`): ``openai`` from ``/v1/completions`` with the
    per-request ``metrics.speculative_decoding`` (servers started with
    ``--per-request-spec-decode-metrics``), ``metrics`` from the ``vllm:spec_decode_*`` counter
    deltas, each in the same definitions (accept length = 1 + accepted / drafts, bonus included);
    ``generate`` and ``server_info`` are unavailable there, with the reason.

    Raises ``ValueError`` for bad arguments, :class:`PromptSetError` for a bad prompt set and
    :class:`MeasureError` when the server is unreachable or a request fails (non-200 other than
    404, not JSON, no token counts, no answer within ``timeout``); with ``start_timeout``,
    ``remote.errors.ServerNotReady`` (never ready within it) and ``remote.errors.GenerationStuck``
    (HTTP up, a 1-token generation does not return within ``timeout``).
    """
    started = time.perf_counter()
    wanted = list(dict.fromkeys(sources))
    bad = [s for s in wanted if s not in SOURCES]
    if bad or not wanted:
        raise ValueError(f"unknown source(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(SOURCES)}")
    if openai_endpoint not in ("completions", "chat"):
        raise ValueError(f"openai_endpoint must be 'completions' or 'chat', got {openai_endpoint!r}")
    for name, value, low in (("warmup", warmup, 0), ("max_new_tokens", max_new_tokens, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if num_prompts is not None and (not isinstance(num_prompts, int) or num_prompts < 1):
        raise ValueError(f"num_prompts must be a positive integer, got {num_prompts!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    if prompts is None or isinstance(prompts, (str, Path)):
        label = str(prompts or "default")
        items = load_prompts(label)
    else:
        label = "(given)"
        items = [p if isinstance(p, dict) else {"text": p} for p in prompts]
        if not items or not all(isinstance(p.get("text"), str) and p["text"] for p in items):
            raise ValueError("prompts must be non-empty texts")
    notes: list[str] = []
    if num_prompts is not None and num_prompts > len(items):
        notes.append(f"--num-prompts {num_prompts} asked, the set has {len(items)}: all {len(items)} used")
    texts = [p["text"] for p in (items[:num_prompts] if num_prompts else items)]

    request_sources = [s for s in REQUEST_SOURCES if s in wanted]
    drivers = request_sources or ["generate"]
    if not request_sources:
        notes.append("no request source selected: /generate drove the traffic (not reported as a row)")
    if start_timeout is not None and not start_timeout >= 0:
        raise ValueError(f"start_timeout must be >= 0 seconds, got {start_timeout!r}")
    c = _Client(base_url, timeout, client, api_key)
    try:
        if start_timeout is not None:
            from remote.readiness import wait_ready

            wait_ready(base_url, start_timeout=start_timeout, request_timeout=timeout, alive=alive, client=c.http,
                       progress=lambda line: print(line, file=sys.stderr, flush=True))
        info, info_error = _server_info(c)
        if info is None or "vllm_config" in info:
            # no SGLang /server_info: a vLLM server? (workbench.measure.vllm.detect_engine)
            engine, facts = detect_engine(c.http, c.base, timeout=c.timeout)
            if engine == ENGINE_VLLM:
                bar = None
                if _progress_enabled(progress):
                    from tqdm.auto import tqdm

                    bar = tqdm(total=warmup + len(texts), desc="measure", unit="req", leave=False)
                try:
                    return measure_vllm(c, texts=texts, label=label, wanted=wanted, warmup=warmup,
                                        max_new_tokens=max_new_tokens, openai_endpoint=openai_endpoint,
                                        flush_cache_after_warmup=flush_cache_after_warmup, facts=facts, notes=notes,
                                        started=started, bar=bar)
                finally:
                    if bar is not None:
                        bar.close()
        server = {k: info.get(k) for k in SERVER_KEYS if k in info} if info else None
        draft_tokens = _opt_int((server or {}).get("speculative_num_draft_tokens"))
        positions = draft_tokens - 1 if draft_tokens and draft_tokens > 1 else None

        unavailable: dict[str, str] = {}
        warm: dict[str, dict] = {}
        records: dict[str, list[RequestRecord]] = {s: [] for s in drivers}
        total = len(drivers) * (warmup + len(texts))
        bar = None
        if _progress_enabled(progress):
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc="measure", unit="req", leave=False)
        try:
            for src in drivers:
                w = {"requests": 0, "completion_tokens": 0, "verify_steps": 0}
                try:
                    for i in range(warmup):
                        if bar is not None:
                            bar.set_description(f"{src} warm-up")
                        rec = _send(c, src, openai_endpoint, i % len(texts), texts[i % len(texts)], max_new_tokens, server)
                        w["requests"] += 1
                        w["completion_tokens"] += rec.completion_tokens
                        w["verify_steps"] += rec.spec_verify_ct or 0
                        if bar is not None:
                            bar.update(1)
                except _SourceUnavailable as exc:
                    unavailable[src] = str(exc)
                warm[src] = w
            flush_note = None
            if flush_cache_after_warmup:
                resp = c.http.post(c.base + "/flush_cache", timeout=c.timeout)
                flush_note = (f"POST /flush_cache answered {resp.status_code}: "
                              f"{resp.text.strip().splitlines()[0] if resp.text.strip() else ''}")
                flushed = resp.status_code == 200
            else:
                flushed = False
            before_info, _ = _server_info(c) if "server_info" in wanted else (None, None)
            before_metrics, metrics_error = _metrics(c) if "metrics" in wanted else (None, None)
            t0 = time.monotonic()
            for src in drivers:
                if src in unavailable:
                    continue
                try:
                    for i, text in enumerate(texts):
                        if bar is not None:
                            bar.set_description(src)
                        rec = _send(c, src, openai_endpoint, i, text, max_new_tokens, server)
                        records[src].append(rec)
                        if bar is not None:
                            bar.update(1)
                except _SourceUnavailable as exc:
                    unavailable[src] = str(exc)
                    records[src] = []
            t1 = time.monotonic()
            after_info, after_info_error = _server_info(c) if "server_info" in wanted else (None, None)
            after_metrics, after_metrics_error = _metrics(c) if "metrics" in wanted else (None, None)
        finally:
            if bar is not None:
                bar.close()
    except httpx.HTTPError as exc:
        raise MeasureError(f"{base_url}: {type(exc).__name__}: {exc}") from exc
    finally:
        c.close()
    if all(s in unavailable for s in drivers):
        raise MeasureError(f"{base_url}: no request source answered: " + "; ".join(unavailable.values()))

    rows: list[SourceAcceptance] = []
    endpoints = {"generate": "POST /generate meta_info",
                 "openai": f"POST /v1/{'chat/completions' if openai_endpoint == 'chat' else 'completions'} "
                           "sglext.spec_tokens_details"}
    for src in request_sources:
        if src in unavailable:
            rows.append(SourceAcceptance(src, endpoints[src], "measured window", None, available=False,
                                         reason=unavailable[src]))
            continue
        row = summarize_records(src, endpoints[src], records[src], positions)
        if src == "openai" and row.verify_steps is None and records[src]:
            row.notes.append("no response carried sglext.spec_tokens_details with spec_verify_ct > 0 although "
                             "return_spec_tokens_details was sent: speculative decoding is off, or this server "
                             "ignores return_spec_tokens_details (SGLang adds sglext.spec_tokens_details from 0.5.20; "
                             "0.4.6 - 0.5.18 have no such field: use the generate source)")
        rows.append(row)
    counted = [r for s in drivers for r in records[s]]
    sent_tokens = sum(r.completion_tokens for r in counted)
    sent_verify = sum(r.spec_verify_ct or 0 for r in counted)
    if "server_info" in wanted:
        rows.append(_server_info_row(info, info_error, before_info, after_info, after_info_error, server, flushed,
                                     flush_note))
    if "metrics" in wanted:
        rows += _metrics_rows(before_metrics, metrics_error, after_metrics, after_metrics_error, server, t1 - t0,
                              len(counted), sent_tokens, sent_verify, positions)
    return Measurement(
        base_url=base_url, prompt_set=label, num_prompts=len(texts), max_new_tokens=max_new_tokens, warmup=warmup,
        sources=wanted, openai_endpoint=openai_endpoint, rows=rows, server=server, warmup_summary=warm,
        records={s: [r.to_dict() for r in recs] for s, recs in records.items()}, flush_cache=flush_note,
        window_s=t1 - t0, duration_s=time.perf_counter() - started, notes=notes + ([f"/server_info: {info_error}"]
                                                                                  if info_error else []),
    )


def _server_info_row(info, info_error, before, after, after_error, server, flushed, flush_note) -> SourceAcceptance:
    """The ``server_info`` row: τ over the server's lifetime (or since the flush)."""
    scope = "since /flush_cache after warm-up" if flushed else "lifetime"
    row = SourceAcceptance("server_info", "GET /server_info internal_states[].avg_spec_accept_length", scope,
                           warmup_excluded=flushed)
    if info is None or after is None:
        row.available, row.reason = False, info_error or after_error or "GET /server_info failed"
        return row
    if flush_note:
        row.notes.append(flush_note)
    values = avg_accept_lengths(after)
    row.raw = {"before": avg_accept_lengths(before), "after": values}
    if not values:
        algo = (server or {}).get("speculative_algorithm")
        row.reason = ("speculative decoding is off (speculative_algorithm is None)" if not algo else
                      "internal_states has no avg_spec_accept_length: SGLang sets it only after the first decode "
                      f"log tick (every decode_log_interval={(server or {}).get('decode_log_interval')} decode "
                      "iterations) since start or the last /flush_cache")
        return row
    tau = sum(values) / len(values)
    if len(values) > 1:
        row.notes.append(f"{len(values)} DP ranks: {', '.join(f'{v:.3f}' for v in values)}; their plain mean shown")
    row.tau = tau
    row.drafts_per_step = tau - 1.0
    d = _opt_int((server or {}).get("speculative_num_draft_tokens"))
    if d and d > 1:
        row.accept_rate = (tau - 1.0) / (d - 1)
        row.draft_positions = d - 1
    row.notes.append("τ definition (correct drafts + 1 per verify step), not completion_tokens / spec_verify_ct; "
                     "drafts/step and accept rate derived from it" +
                     ("" if flushed else "; includes warm-up, every earlier request and other clients' traffic "
                                         "(a ratio without its counts: no before/after delta exists)"))
    if flushed:
        row.notes.append("the last partial decode-log interval is folded in only at its tick")
    return row


def _metrics_rows(before, before_error, after, after_error, server, window_s, n_sent, sent_tokens, sent_verify,
                  positions) -> list[SourceAcceptance]:
    """The ``metrics`` (counter deltas over the window) and ``metrics_gauges`` rows."""
    counters = SourceAcceptance("metrics", "GET /metrics counters (after − before)", "measured window", True)
    gauges = SourceAcceptance("metrics_gauges", "GET /metrics gauges sglang:spec_accept_length/_rate",
                              "last decode-log interval", None)
    if before is None or after is None:
        for r in (counters, gauges):
            r.available, r.reason = False, before_error or after_error or "GET /metrics failed"
        return [counters, gauges]
    delta: dict[str, float | None] = {}
    for name in COUNTERS:
        a, b = after.total(name), before.total(name)
        delta[name] = None if a is None or b is None else a - b
    counters.raw = {"before": {n: before.total(n) for n in COUNTERS}, "after": {n: after.total(n) for n in COUNTERS}}
    missing = [n for n in (M_VERIFY, M_GEN_TOKENS) if delta[n] is None]
    version = (server or {}).get("version")
    if missing:
        counters.available = False
        if missing == [M_VERIFY] and has_name(METRIC_NAMES, M_VERIFY, version) is not True:
            counters.reason = (f"/metrics has no {M_VERIFY}: SGLang exports it from 0.5.15 (this server: "
                               f"{version or 'version unknown'}); without it the counters give no accept length "
                               "(the gauges and the request sources do)")
        else:
            counters.reason = f"/metrics has no {', '.join(missing)} (not SGLang's metric names?)"
    else:
        verify, tokens = int(delta[M_VERIFY]), int(delta[M_GEN_TOKENS])
        counters.requests = int(delta[M_REQUESTS]) if delta[M_REQUESTS] is not None else None
        counters.completion_tokens, counters.wall_s = tokens, window_s
        counters.tokens_per_s = tokens / window_s if window_s > 0 else None
        counters.verify_steps = verify or None
        if verify:
            counters.accept_length = tokens / verify
        else:
            counters.notes.append("sglang:spec_verify_calls_total did not grow: no verify step was counted "
                                  "(speculative decoding off?); accept length unknown, not 1.0")
        if tokens != sent_tokens or (verify and verify != sent_verify) or (
                counters.requests is not None and counters.requests != n_sent):
            counters.notes.append(f"the counters saw {counters.requests} requests, {tokens} tokens, {verify} verify "
                                  f"steps; this measurement counted {n_sent}, {sent_tokens}, {sent_verify}: other "
                                  "traffic reached the server during the window")
        counters.notes.append("no counter counts correct drafts: only the SGLang accept length")
    tau = after.gauge(G_ACCEPT_LENGTH)
    rate = after.gauge(G_ACCEPT_RATE)
    d = after.gauge(G_NUM_DRAFT_TOKENS)
    gauges.raw = {n: after.gauge(n) for n in GAUGES}
    if not after.declared(G_ACCEPT_LENGTH):
        gauges.available, gauges.reason = False, f"/metrics has no {G_ACCEPT_LENGTH}"
        return [counters, gauges]
    if not tau:
        gauges.reason = (f"{G_ACCEPT_LENGTH} is {tau}: SGLang exports 0.0 until the first decode log tick and on "
                         "non-speculative servers")
        return [counters, gauges]
    gauges.tau, gauges.drafts_per_step = tau, tau - 1.0
    gauges.draft_positions = int(d) - 1 if d and d > 1 else positions
    draft_tokens = gauges.draft_positions + 1 if gauges.draft_positions else None
    # the gauge holds the decode line's accept rate, whose definition changed (workbench.logs.formats):
    # restated as correct / proposed drafts = (τ − 1) / (D − 1) on every release
    gauges.accept_rate = correct_draft_rate(tau, draft_tokens)
    fmt = None
    if version:
        try:
            fmt = decode_line_format(version)
        except ValueError:
            fmt = None
    if gauges.accept_rate is None and rate and fmt is not None and fmt.accept_rate == "correct/proposed":
        gauges.accept_rate = rate
    if rate:
        gauges.notes.append(f"{G_ACCEPT_RATE} = {rate:.4f} as exported"
                            + (f" (SGLang {version}: {ACCEPT_RATE_DEFINITIONS[fmt.accept_rate]})"
                               if fmt is not None and fmt.accept_rate else "")
                            + "; accept rate shown = (tau − 1) / (num_draft_tokens − 1), correct/proposed drafts")
    interval = _opt_int((server or {}).get("decode_log_interval"))
    window_verify = int(delta.get(M_VERIFY) or 0)
    if interval:
        gauges.warmup_excluded = window_verify >= 2 * interval
        gauges.notes.append(
            f"covers the last decode-log interval ({interval} decode iterations) before the read: "
            + ("inside the measured window" if gauges.warmup_excluded else
               f"the window had {window_verify} verify steps (< 2 × {interval}), so it may reach into the warm-up "
               "or earlier traffic")
            + " (assuming one request at a time)")
    else:
        gauges.notes.append("covers the last decode-log interval before the read (its length unknown: no "
                            "decode_log_interval in /server_info)")
    return [counters, gauges]


# ---------------------------------------------------------------------------------------------
# vLLM (the engine's facts: workbench.measure.vllm)
# ---------------------------------------------------------------------------------------------


def vllm_counter_row(before: Any, after: Any, error: str | None, *, window_s: float, n_sent: int, sent_tokens: int,
                sent_steps: int) -> Any:
    """The ``metrics`` row of a vLLM server: the spec-decode counters' after − before deltas
    (:class:`~workbench.measure.sources.MetricsSnapshot` s; ``error``: why a snapshot is missing) in
    the module docstring's definitions. ``n_sent`` / ``sent_tokens`` / ``sent_steps``: what this
    measurement counted itself (requests, completion tokens, per-request drafts when known), to flag
    other traffic in the window. Never raises for a missing counter: the row says what is missing."""
    row = SourceAcceptance("metrics", "GET /metrics vllm:spec_decode_* counters (after − before)", "measured window",
                           True)
    if before is None or after is None:
        row.available, row.reason = False, error or "GET /metrics failed"
        return row
    names = (M_DRAFTS, M_DRAFT_TOKENS, M_ACCEPTED, V_GEN_TOKENS, V_REQUESTS)
    delta = {}
    for n in names:
        a, b = after.total(n), before.total(n)
        delta[n] = None if a is None or b is None else a - b
    row.raw = {"before": {n: before.total(n) for n in names}, "after": {n: after.total(n) for n in names},
               "definitions": {n: VLLM_METRICS[n][0] for n in names}, "source": _VLLM_SRC}
    if delta[M_DRAFTS] is None:
        row.available = False
        if after.declared(M_EMITTED_V0):
            row.reason = (f"/metrics has {M_EMITTED_V0} but no {M_DRAFTS}: vLLM's V0 engine, whose accepted "
                          "tokens count matches at any position; its accept length is emitted / (draft tokens / k) "
                          "from the log's 'Speculative metrics' line (workbench logs)")
        else:
            row.reason = (f"/metrics has no {M_DRAFTS}: vLLM declares the spec-decode counters only with a "
                          "--speculative-config (speculative decoding is off)")
        return row
    drafts = int(delta[M_DRAFTS])
    accepted = int(delta[M_ACCEPTED] or 0)
    tokens = int(delta[M_DRAFT_TOKENS] or 0)
    row.requests = int(delta[V_REQUESTS]) if delta[V_REQUESTS] is not None else None
    row.completion_tokens = int(delta[V_GEN_TOKENS]) if delta[V_GEN_TOKENS] is not None else None
    row.wall_s = window_s
    row.tokens_per_s = row.completion_tokens / window_s if row.completion_tokens is not None and window_s > 0 else None
    if not drafts:
        row.notes.append(f"{M_DRAFTS} did not grow: no verify step with drafts in the window; accept length "
                         "unknown, not 1.0")
        return row
    row.verify_steps, row.correct_drafts, row.proposed_drafts = drafts, accepted, tokens
    row.drafts_per_step = accepted / drafts
    row.tau = row.accept_length = 1.0 + accepted / drafts
    row.accept_rate = accepted / tokens if tokens else None
    per_pos_after = {lb.get("position"): v for lb, v in _vllm_by_position(after)}
    per_pos_before = {lb.get("position"): v for lb, v in _vllm_by_position(before)}
    if per_pos_after:
        k = len(per_pos_after)
        counts = [int(per_pos_after.get(str(p), 0) - per_pos_before.get(str(p), 0)) for p in range(k)]
        row.draft_positions = k
        row.position_acceptance = [c / drafts for c in counts]
        row.raw["per_position_accepted"] = counts
        # steps accepting exactly j drafts, from the per-position counts (chain drafting: P(≥k) nested)
        hist = [drafts - counts[0]] + [counts[j - 1] - counts[j] for j in range(1, k)] + [counts[k - 1]]
        if all(h >= 0 for h in hist):
            row.histogram = hist
        else:
            row.notes.append("per-position counts do not nest (tree drafting?): no histogram")
    else:
        row.notes.append(f"/metrics has no {M_PER_POS}: per-position acceptance unknown")
    row.notes.append("accept length = 1 + accepted / drafts (vLLM's mean acceptance length, bonus included; equal "
                     "to tau: vLLM's counters hold no prefill token and no cut tokens)")
    if row.completion_tokens is not None:
        row.notes.append(f"completion tokens / drafts = {row.completion_tokens / drafts:.3f} (SGLang's "
                         "completion_tokens / spec_verify_ct, for comparison with an SGLang server)")
    other = (row.requests is not None and row.requests != n_sent) or (
        row.completion_tokens is not None and row.completion_tokens != sent_tokens) or (
        sent_steps and drafts != sent_steps)
    if other:
        row.notes.append(f"the counters saw {row.requests} requests, {row.completion_tokens} tokens, {drafts} drafts; "
                         f"this measurement counted {n_sent}, {sent_tokens}, {sent_steps or '?'}: other traffic "
                         "reached the server during the window")
    return row


def _vllm_by_position(snap: Any) -> list[tuple[dict, float]]:
    """The per-position samples summed over engines: [(labels with position only, value)]."""
    sums: dict[str, float] = {}
    for labels, v in snap.samples.get(M_PER_POS, []):
        p = labels.get("position")
        if p is not None:
            sums[p] = sums.get(p, 0.0) + v
    return [({"position": p}, v) for p, v in sums.items()]


def measure_vllm(c: Any, *, texts: Sequence[str], label: str, wanted: list[str], warmup: int, max_new_tokens: int,
                 openai_endpoint: str, flush_cache_after_warmup: bool, facts: dict, notes: list[str],
                 started: float, bar: Any = None) -> Any:
    """:func:`workbench.measure.sources.measure` on a vLLM server (module docstring): ``warmup``
    uncounted requests, a ``/metrics`` snapshot, every text once through ``/v1/completions`` (the
    only request source vLLM has), a second snapshot; rows ``generate`` / ``server_info``
    unavailable with why, ``openai`` (per-request figures when the server gives them), ``metrics``
    (counter deltas). ``c``: the measurement's HTTP client (``get``, ``post``, ``base``). Raises
    :class:`MeasureError` when a request fails."""
    model = facts.get("model")
    endpoint = "POST /v1/" + ("chat/completions" if openai_endpoint == "chat" else "completions") + \
        " metrics.speculative_decoding"
    warm = {"requests": 0, "completion_tokens": 0, "verify_steps": 0}
    for i in range(warmup):
        rec = send_completion(c, model, i % len(texts), texts[i % len(texts)], max_new_tokens, openai_endpoint)
        warm["requests"] += 1
        warm["completion_tokens"] += rec.completion_tokens
        warm["verify_steps"] += rec.spec_verify_ct or 0
        if bar is not None:
            bar.update(1)
    flush_note = None
    if flush_cache_after_warmup:
        flush_note = "--flush-cache does nothing on vLLM: the /metrics counters' deltas already leave the warm-up out"
    before, before_error = _metrics(c) if "metrics" in wanted else (None, None)
    t0 = time.monotonic()
    records = []
    for i, text in enumerate(texts):
        records.append(send_completion(c, model, i, text, max_new_tokens, openai_endpoint))
        if bar is not None:
            bar.update(1)
    t1 = time.monotonic()
    after, after_error = _metrics(c) if "metrics" in wanted else (None, None)
    settings = after if after is not None else before
    if settings is None and "metrics" not in wanted:
        # the metrics source was not selected: one /metrics read after the window, only for the
        # server's settings (whether vllm:spec_decode_* counters are declared, k); not a row
        settings, settings_error = _metrics(c)
        if settings is None:
            notes.append(f"GET /metrics failed ({settings_error}): whether the server decodes speculatively is not known")
    server = vllm_server(facts, settings, records)
    k = server.get("num_speculative_tokens") or next(
        (r.histogram and len(r.histogram) - 1 for r in records if r.histogram), None)
    if k and not server.get("num_speculative_tokens"):
        server["num_speculative_tokens"], server["speculative_num_draft_tokens"] = k, k + 1
    rows = []
    for src in ("generate", "openai", "server_info", "metrics"):
        if src not in wanted:
            continue
        if src == "generate":
            rows.append(SourceAcceptance("generate", "POST /generate", "measured window", None, available=False,
                                         reason=GENERATE_UNAVAILABLE))
        elif src == "server_info":
            rows.append(SourceAcceptance("server_info", "GET /server_info", "lifetime", None, available=False,
                                         reason=SERVER_INFO_UNAVAILABLE))
        elif src == "openai":
            row = summarize_records("openai", endpoint, records, k)
            if row.verify_steps:
                row.raw["completion_tokens_per_verify_step"] = row.accept_length
                row.accept_length = row.tau
                row.prefill_tokens = row.cut_tokens = None
                row.notes = [n for n in row.notes if "SGLang" not in n]
                row.notes.append("accept length = 1 + Σ num_accepted_draft_tokens / Σ num_spec_steps (vLLM's mean "
                                 "acceptance length, bonus included, = tau); completion tokens / steps = "
                                 f"{row.raw['completion_tokens_per_verify_step']:.3f} (SGLang's definition)")
            elif records:
                row.notes = [NO_PER_REQUEST]
            rows.append(row)
        else:
            sent_steps = sum(r.spec_verify_ct or 0 for r in records) if all(r.spec_verify_ct for r in records) else 0
            rows.append(vllm_counter_row(before, after, before_error or after_error, window_s=t1 - t0, n_sent=len(records),
                                    sent_tokens=sum(r.completion_tokens for r in records), sent_steps=sent_steps))
    if "openai" not in wanted:
        notes.append("the openai source was not selected: /v1/completions drove the traffic (not reported as a row)")
    notes.append("engine: vLLM (" + "; ".join(facts.get("evidence") or ["detected"]) + ")")
    return Measurement(
        base_url=c.base, prompt_set=label, num_prompts=len(texts), max_new_tokens=max_new_tokens, warmup=warmup,
        sources=wanted, openai_endpoint=openai_endpoint, rows=rows, server=server, warmup_summary={"openai": warm},
        records={"openai": [r.to_dict() for r in records]}, flush_cache=flush_note, window_s=t1 - t0,
        duration_s=time.perf_counter() - started, notes=notes)


def measure_generate_vllm(client: httpx.Client, base_url: str, texts: Sequence[str], *, max_new_tokens: int,
                          warmup: int, timeout: float, keep_text: bool = False) -> AcceptanceMeasurement | None:
    """:func:`workbench.measure.generate.measure_generate` on a vLLM server (it has no ``/generate``):
    ``None`` when the server is not vLLM (:func:`workbench.measure.vllm.detect_engine`); else
    ``warmup`` uncounted greedy ``/v1/completions``, then each text once, between two ``/metrics``
    snapshots, as an :class:`AcceptanceMeasurement` in the same fields: ``verify_steps`` = drafts,
    ``accept_length`` = 1 + accepted / drafts (bonus included), ``accept_rate`` = accepted / draft
    tokens, ``histogram`` (steps accepting exactly j drafts), ``records`` (per request: the spec
    fields when the server runs with ``--per-request-spec-decode-metrics``), ``server_info`` =
    :func:`workbench.measure.vllm.vllm_server`, ``source`` naming what was read, ``note`` the caveats.
    The numbers come from the per-request figures when every response has them, else from the
    counters' deltas (the window's, warm-up excluded). Raises :class:`AcceptanceError` when a request
    fails or neither source gives the counts."""
    c = _Client(base_url, timeout, client)
    try:
        engine, facts = detect_engine(c.http, c.base, timeout=c.timeout)
        if engine != ENGINE_VLLM:
            return None
        model = facts.get("model")
        for i in range(warmup):
            send_completion(c, model, i % len(texts), texts[i % len(texts)], max_new_tokens)
        before, before_error = _metrics(c)
        t0 = time.monotonic()
        records = [send_completion(c, model, i, t, max_new_tokens) for i, t in enumerate(texts)]
        window = time.monotonic() - t0
        after, after_error = _metrics(c)
    except MeasureError as exc:
        raise AcceptanceError(str(exc)) from exc
    for r in records:
        r.text = r.text if keep_text else None
    row = vllm_counter_row(before, after, before_error or after_error, window_s=window, n_sent=len(records),
                           sent_tokens=sum(r.completion_tokens for r in records),
                           sent_steps=sum(r.spec_verify_ct or 0 for r in records)
                           if all(r.spec_verify_ct for r in records) else 0)
    result = summarize_responses(records, warmup=warmup, max_new_tokens=max_new_tokens, base_url=base_url,
                                 server_info=vllm_server(facts, after if after is not None else before, records))
    notes = ["vLLM server (" + "; ".join(facts.get("evidence") or []) + "): no /generate; accept length = 1 + "
             "accepted / drafts (vLLM's mean acceptance length, bonus included)"]
    if result.speculative and result.requests_without_spec == 0:
        correct = sum(r.spec_num_correct_drafts or 0 for r in records)
        result.accept_length = 1.0 + correct / result.verify_steps
        result.source = "POST /v1/completions metrics.speculative_decoding (vLLM)"
        if row.available and row.verify_steps not in (None, result.verify_steps):
            notes.append(f"the counters saw {row.verify_steps} drafts, the responses {result.verify_steps}: other "
                         "traffic reached the server during the window")
    elif row.available and row.verify_steps:
        result.accept_length, result.accept_rate = row.accept_length, row.accept_rate
        result.verify_steps, result.histogram, result.speculative = row.verify_steps, row.histogram, True
        result.source = "POST /v1/completions + GET /metrics vllm:spec_decode_* deltas (vLLM)"
        notes.append("per-request figures off (start vLLM with --per-request-spec-decode-metrics summary for them): "
                     "the numbers are the counters' over the window")
        notes += [n for n in row.notes if "other traffic" in n]
    else:
        result.accept_length = result.accept_rate = None
        result.speculative = False
        result.source = "POST /v1/completions (vLLM)"
        notes.append(row.reason or (row.notes[0] if row.notes else "no spec-decode counts") +
                     "; accept length unknown, not 1.0")
    result.note = "; ".join(notes)
    result.server_info["per_position_acceptance"] = row.position_acceptance if row.available else None
    return result


NO_GENERATE_HANDLERS.append(measure_generate_vllm)


# ---------------------------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------------------------


def _fmt(v: Any, spec: str = ".3f") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return format(v, spec) if isinstance(v, float) else str(v)


def format_table(m: Measurement) -> str:
    """The plain-text report: one line per source (accept length as SGLang defines it, accepted
    drafts per step, τ, accept rate, tokens/s), then per-position acceptance and histograms, then
    unavailable sources with why, notes and ``acceptance-collapsed`` findings."""
    head = ("source", "scope", "warm-up out", "reqs", "verify", "accept len", "drafts/step", "tau", "accept rate",
            "tok/s")
    lines_ = [head]
    for r in m.rows:
        if not r.available:
            continue
        lines_.append((r.source, r.scope, _fmt(r.warmup_excluded) if r.warmup_excluded is not None else "?",
                       _fmt(r.requests), _fmt(r.verify_steps), _fmt(r.accept_length), _fmt(r.drafts_per_step),
                       _fmt(r.tau), _fmt(r.accept_rate), _fmt(r.tokens_per_s, ".1f")))
    widths = [max(len(row[i]) for row in lines_) for i in range(len(head))]
    out = [f"{m.base_url}  prompts={m.prompt_set} ({m.num_prompts})  max_new_tokens={m.max_new_tokens}  "
           f"warm-up={m.warmup} request(s) per request source"]
    if m.server and m.server.get("engine") == "vllm":
        s = m.server
        out.append(f"server: vLLM {s.get('version') or '(version unknown)'}  model={s.get('served_model_name')}  "
                   + (f"num_speculative_tokens={s.get('num_speculative_tokens')}" if s.get("speculative_algorithm")
                      or s.get("num_speculative_tokens") else
                      "speculative decoding not known (GET /metrics not read)" if s.get("metrics_read") is False else
                      "no speculative decoding (GET /metrics declares no vllm:spec_decode_* counters)"))
    elif m.server:
        s = m.server
        out.append(f"server: {s.get('speculative_algorithm') or 'no speculative decoding'}"
                   + (f" steps={s.get('speculative_num_steps')} topk={s.get('speculative_eagle_topk')} "
                      f"draft_tokens={s.get('speculative_num_draft_tokens')}" if s.get("speculative_algorithm") else "")
                   + f"  version={s.get('version')}")
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines_]
    if m.server and m.server.get("engine") == "vllm":
        out.append("accept len = 1 + Σ accepted / Σ drafts (vLLM's mean acceptance length, bonus included; = tau); "
                   "verify = drafts (request verify steps with draft tokens); drafts/step = Σ accepted / Σ drafts; "
                   "accept rate = Σ accepted / Σ draft tokens")
    else:
        out.append("accept len = Σ completion_tokens / Σ spec_verify_ct (SGLang); drafts/step = Σ correct drafts / "
                   "Σ verify; tau = 1 + drafts/step (EAGLE papers; SGLang's server-side accept len); accept rate = "
                   "Σ correct / Σ proposed")
    for r in m.rows:
        if r.available and r.position_acceptance:
            pos = ", ".join(f"k={k} {p:.3f}" for k, p in enumerate(r.position_acceptance, 1))
            out.append(f"{r.source}: P(accepted >= k): {pos}; histogram (steps accepting exactly k drafts) "
                       f"{r.histogram}")
        for index, steps in sorted((r.raw.get("per_step_accepted") or {}).items()) if r.available else ():
            shown = " ".join(map(str, steps[:40])) + (f" … ({len(steps)} steps)" if len(steps) > 40 else "")
            out.append(f"{r.source}: prompt {index}: drafts accepted at each verify step: {shown}")
        if r.available and r.cut_tokens is not None:
            out.append(f"{r.source}: {r.prefill_tokens} first tokens from prefill, {r.cut_tokens} accepted tokens cut "
                       "by max_new_tokens/stop: accept len = tau + (prefill - cut) / verify")
    for r in m.rows:
        if not r.available:
            out.append(f"{r.source}: unavailable: {r.reason}")
        elif r.reason:
            out.append(f"{r.source}: {r.reason}")
        for n in r.notes:
            out.append(f"{r.source}: note: {n}")
    if m.flush_cache and m.server and m.server.get("engine") == "vllm":
        out.append(f"note: {m.flush_cache}")  # SGLang's flush answer is in its server_info row already
    out += [f"note: {n}" for n in m.notes]
    for src, level in m.levels():
        out.append(f"acceptance ({src}): {level.words}")
    for f in m.findings():
        where = (f.evidence.get("accept_length") or {}).get("source")
        out.append(f"{f.rule} [{f.severity}] {f.message}" + (f" (source: {where})" if where else ""))
    return "\n".join(out)
