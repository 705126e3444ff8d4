"""Prometheus metrics of the sandbox server, with SGLang 0.5.23's names, types and labels.

Mirrors SGLang 0.5.23, srt/observability/metrics_collector.py:

- ``SchedulerMetricsCollector`` (labels ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``,
  ``moe_ep_rank``; gauges, ``multiprocess_mode="mostrecent"`` in SGLang): ``log_stats`` sets every
  gauge from the scheduler's stats object. SGLang calls it at each prefill report
  (``metrics_reporter.py`` ``report_prefill_stats``: the speculative gauges keep their last
  value, 0.0 before the first decode log tick) and at each decode log tick (``report_decode_stats``,
  every ``--decode-log-interval`` decode iterations: ``spec_accept_length`` = accepted tokens
  (correct drafts + 1 bonus per request per verify) / verify forwards over the interval, the same
  number as the log line's ``accept len``; ``spec_accept_rate`` = correct drafts / (verify
  forwards x (num_draft_tokens - 1)); both 0 on a non-speculative server).
- ``TokenizerMetricsCollector`` (labels ``model_name``, ``engine_type``; plus ``is_streaming`` on
  the token and request counters): ``observe_one_finished_request`` adds each finished request's
  ``prompt_tokens``, ``completion_tokens`` (``sglang:generation_tokens_total``), ``spec_verify_ct``
  (``sglang:spec_verify_calls_total``, only when > 0) and 1 (``sglang:num_requests_total``), and
  observes its e2e latency. SGLang skips requests with ``log_metrics=False`` (``/health_generate``).

SGLang serves them in multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), which writes no
``_created`` series; the sandbox is one process and turns ``_created`` off to match.
A labelled metric has no sample line until it is first set or incremented (only its ``# HELP`` /
``# TYPE`` lines), as in SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass
class SchedulerStats:
    """The subset of SGLang's ``SchedulerStats`` the sandbox reports (same field names)."""

    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    gen_throughput: float = 0.0
    cache_hit_rate: float = 0.0
    token_usage: float = 0.0
    num_used_tokens: int = 0
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    spec_num_steps: int = 0
    spec_num_draft_tokens: int = 0


# SGLang 0.5.23 TokenizerMetricsCollector: default e2e latency buckets (seconds)
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0, 800.0]


class SandboxMetrics:
    """Both collectors on one registry; ``render()`` is the ``/metrics`` body."""

    def __init__(self, served_model_name: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

        disable_created_metrics()  # SGLang's multiprocess exposition has no _created series
        self.registry = CollectorRegistry()
        reg = self.registry
        self.scheduler_labels: Dict[str, str] = {
            "model_name": served_model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        self.tokenizer_labels: Dict[str, str] = {"model_name": served_model_name, "engine_type": "unified"}
        sl = list(self.scheduler_labels)

        def gauge(name: str, doc: str) -> "Gauge":
            return Gauge(name, doc, labelnames=sl, registry=reg)

        self.num_running_reqs = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue_reqs = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.num_used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.spec_accept_length = gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).")
        self.spec_accept_rate = gauge(
            "sglang:spec_accept_rate",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).")
        self.spec_num_steps = gauge("sglang:spec_num_steps", "Currently active speculative_num_steps.")
        self.spec_num_draft_tokens = gauge(
            "sglang:spec_num_draft_tokens",
            "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).")

        tl = list(self.tokenizer_labels)
        self.prompt_tokens_total = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                                           labelnames=tl + ["is_streaming"], registry=reg)
        self.generation_tokens_total = Counter("sglang:generation_tokens_total",
                                               "Number of generation tokens processed.",
                                               labelnames=tl + ["is_streaming"], registry=reg)
        self.spec_verify_calls_total = Counter("sglang:spec_verify_calls_total",
                                               "Number of speculative decoding verification calls.",
                                               labelnames=tl, registry=reg)
        self.num_requests_total = Counter("sglang:num_requests_total", "Number of requests processed.",
                                          labelnames=tl + ["is_streaming"], registry=reg)
        self.histogram_e2e_request_latency = Histogram(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
            labelnames=tl + ["is_streaming"], buckets=E2E_BUCKETS, registry=reg)

    # -- SchedulerMetricsCollector.log_stats ---------------------------------------------------
    def log_stats(self, stats: SchedulerStats) -> None:
        """Set every scheduler gauge from ``stats`` (SGLang: ``SchedulerMetricsCollector.log_stats``)."""
        lab = self.scheduler_labels
        self.num_running_reqs.labels(**lab).set(stats.num_running_reqs)
        self.num_queue_reqs.labels(**lab).set(stats.num_queue_reqs)
        self.gen_throughput.labels(**lab).set(stats.gen_throughput)
        self.cache_hit_rate.labels(**lab).set(stats.cache_hit_rate)
        self.token_usage.labels(**lab).set(stats.token_usage)
        self.num_used_tokens.labels(**lab).set(stats.num_used_tokens)
        self.spec_accept_length.labels(**lab).set(stats.spec_accept_length)
        self.spec_accept_rate.labels(**lab).set(stats.spec_accept_rate)
        self.spec_num_steps.labels(**lab).set(stats.spec_num_steps)
        self.spec_num_draft_tokens.labels(**lab).set(stats.spec_num_draft_tokens)

    # -- TokenizerMetricsCollector.observe_one_finished_request --------------------------------
    def observe_one_finished_request(self, prompt_tokens: int, generation_tokens: int, e2e_latency: float,
                                     spec_verify_ct: int = 0, is_streaming: bool = False) -> None:
        """Count one finished request (SGLang: ``observe_one_finished_request``)."""
        stream = {**self.tokenizer_labels, "is_streaming": "true" if is_streaming else "false"}
        self.prompt_tokens_total.labels(**stream).inc(prompt_tokens)
        self.generation_tokens_total.labels(**stream).inc(generation_tokens)
        if spec_verify_ct > 0:
            self.spec_verify_calls_total.labels(**self.tokenizer_labels).inc(spec_verify_ct)
        self.num_requests_total.labels(**stream).inc(1)
        self.histogram_e2e_request_latency.labels(**stream).observe(float(e2e_latency))

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of every metric."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
