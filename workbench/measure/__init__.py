"""Measurement: accept length (and accept rate, τ, per-position acceptance) from every source a
server offers, and sweeps over the speculative settings.

- :mod:`.generate` — greedy requests to ``POST /generate``, summed the way SGLang defines accept length;
- :mod:`.sources` — every source at once (``/generate``, the OpenAI endpoints, ``/server_info``,
  Prometheus ``/metrics``), each with its definition, warm-up excluded;
- :mod:`.vllm` — the same rows on a vLLM server (engine detected from the server): ``/v1/completions``
  with per-request ``metrics.speculative_decoding``, the ``vllm:spec_decode_*`` counter deltas;
  accept length = 1 + accepted / drafts (bonus included), per-position acceptance from the counters;
- :mod:`.prompts` — the one prompt loader (built-in sets and user JSONL files);
- :mod:`.sweep` — a grid of (steps, topk, draft tokens) plus the no-speculation baseline, one
  launch per setting on a journalled :class:`workbench.session.BoxSession`.

Layering: imports :mod:`workbench.session`, :mod:`workbench.rules` (the runtime rule),
:mod:`workbench.engine` and :mod:`workbench.errors`.
"""

from workbench.errors import AcceptanceError, MeasureError, PromptSetError, SweepError
from workbench.measure.generate import AcceptanceMeasurement, RequestRecord, measure_generate, summarize_responses
from workbench.measure.prompts import BUILTIN_PROMPT_SETS, load_prompts
from workbench.measure.sources import (
    SOURCES,
    Measurement,
    MetricsSnapshot,
    SourceAcceptance,
    acceptance_from_counts,
    format_table,
    measure,
    parse_metrics,
    position_acceptance,
    record_from_openai,
)
from workbench.measure.sources import measure_vllm, vllm_counter_row
from workbench.measure.vllm import detect_engine, record_from_vllm_completion

__all__ = [
    "AcceptanceError", "MeasureError", "PromptSetError", "SweepError", "AcceptanceMeasurement", "RequestRecord",
    "measure_generate", "summarize_responses", "BUILTIN_PROMPT_SETS", "load_prompts", "SOURCES", "Measurement",
    "MetricsSnapshot", "SourceAcceptance", "acceptance_from_counts", "format_table", "measure", "parse_metrics",
    "position_acceptance", "record_from_openai", "vllm_counter_row", "measure_vllm", "detect_engine",
    "record_from_vllm_completion",
]
