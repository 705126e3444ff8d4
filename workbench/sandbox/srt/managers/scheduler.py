"""The sandbox scheduler: one request at a time, prefill then decode/verify steps, SGLang's
batch log lines and per-request speculative statistics.

Mirrors SGLang 0.5.23, srt/managers/scheduler.py and
srt/managers/scheduler_components/metrics_reporter.py (`report_prefill_stats`,
`report_decode_stats`): a `Decode batch` line every `--decode-log-interval` decode iterations
(a verify step is one decode iteration), `accept len` = accepted tokens (correct drafts + 1
bonus) / verify forwards over the interval, `accept rate` = correct drafts /
(verify forwards x (num_draft_tokens - 1)); the interval counters reset at each line and add to
the totals behind `/server_info` `internal_states[0].avg_spec_accept_length`.

With `--enable-metrics` the Prometheus gauges are set as SGLang's `SchedulerMetricsCollector.log_stats`
sets them: at each prefill report (speculative gauges keep their last value, 0.0 before the first
decode tick) and at each decode log tick (`spec_accept_length` = the line's `accept len`,
`spec_accept_rate` = its `accept rate`). `flush_cache()` (`/flush_cache`) resets every counter as
SGLang's `Scheduler.flush_cache` -> `SchedulerMetricsReporter.reset_metrics` does, when idle.

`last_receive_tstamp` (wall-clock seconds) is when the scheduler last produced output (a prefill or
a decode step), as SGLang's `TokenizerManager.last_receive_tstamp` is when it last heard from the
scheduler/detokenizer; `/health_generate` compares it with its own start.

Fault for the tests, a real stall: with `SANDBOX_FAULT_STALL_FILE=PATH` in the server's
environment, every forward (prefill, decode step) first blocks while PATH exists, holding the
scheduler lock, as a scheduler stuck in a collective or a kernel does: HTTP stays up, generation
does not return, and neither does `/server_info` (its internal state comes from the scheduler).
Remove the file and it resumes. Present at start-up it stalls the warm-up, so the server stays 503
(SGLang's `Starting`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from workbench.sandbox.srt.speculative.eagle_worker import EAGLEWorker, TargetWorker
from workbench.sandbox.srt.speculative.spec_info import SpeculativeAlgorithm

logger = logging.getLogger(__name__)

# The sandbox's notional KV pool (token usage = tokens held / this).
MAX_TOTAL_NUM_TOKENS = 65536


@dataclass
class SamplingParams:
    """`sampling_params` of `/generate` that the sandbox honours (greedy decoding)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    stop: List[str] = field(default_factory=list)
    ignore_eos: bool = False


def _count_shards(model_path: str) -> int:
    """The number of safetensors files the target loads (its index's distinct shards, else 1)."""
    import json

    index = os.path.join(model_path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            return max(len(set(json.load(f).get("weight_map", {}).values())), 1)
    return 1


class Scheduler:
    """Owns the workers and runs requests one at a time (a lock), logging like SGLang."""

    def __init__(self, server_args, tp_rank: int = 0, startup=None) -> None:
        """Load the target and the draft as rank ``tp_rank`` (0 for the in-process scheduler of
        TP 1), logging the start-up through ``startup`` (``workbench.sandbox.srt.startup.Startup``;
        default: one without sandbox GPUs, no pacing unless ``--sandbox-load-seconds``)."""
        from workbench.sandbox.srt.startup import Startup

        self.server_args = server_args
        self.tp_rank = tp_rank
        # SGLang 0.5.23 observability/metrics_collector.py:1361: the batch lines come from attn TP rank 0
        self.is_stats_logging_rank = tp_rank == 0
        # called once per prefill / decode step with the step's last token (TP > 1: a collective
        # across the ranks, as a tensor-parallel forward's all-reduce; None in process)
        self.tp_sync: Optional[Callable[[int], None]] = None
        # hang:warmup: the first request (the warm-up) stops after its prefill line
        self.hang_after_first_prefill = getattr(server_args, "sandbox_fault", None) == "hang:warmup"
        self.startup = startup if startup is not None else Startup(server_args, tp_rank)
        self.spec_algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
        self.lock = threading.Lock()
        self.last_receive_tstamp = time.time()
        self.stall_file = os.environ.get("SANDBOX_FAULT_STALL_FILE") or None
        self._stall_logged = False
        self.target_worker = self.startup.load("load", lambda: TargetWorker(server_args.model_path),
                                               n_shards=_count_shards(server_args.model_path))
        self.context_length = server_args.context_length or int(
            getattr(self.target_worker.model.config, "max_position_embeddings", 2048)
        )
        self.startup.memory_pool()
        # called (no arguments) when a request fails inside the scheduler, before the exception
        # propagates: the server sets it to SGLang's "Scheduler hit an exception" path (the
        # process dies); in-process users leave it None and get the exception
        self.exception_hook: Optional[Callable[[], None]] = None
        self.draft_worker: Optional[EAGLEWorker] = None
        self.startup.capture(self.spec_algorithm.is_eagle(), server_args.speculative_num_draft_tokens or 1)
        if self.spec_algorithm.is_eagle():
            self.draft_worker = self.startup.load(
                "load-draft", lambda: EAGLEWorker(server_args, self.target_worker, self.spec_algorithm), take=False)
            self.startup.capture_draft(server_args.speculative_eagle_topk or 1, server_args.speculative_num_draft_tokens)
        self.decode_log_interval = server_args.decode_log_interval
        self.graph_label = "cpu graph"
        # metrics (SchedulerMetricsReporter fields)
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.last_decode_stats_tic = time.perf_counter()
        self.last_gen_throughput = 0.0
        self.spec_num_accept_tokens = 0
        self.spec_num_correct_drafts = 0
        self.spec_num_forward_ct = 0
        self.spec_total_num_accept_tokens = 0
        self.spec_total_num_forward_ct = 0
        self._warned_temperature = False
        # Prometheus (--enable-metrics): SchedulerMetricsCollector + TokenizerMetricsCollector
        self.metrics_collector = None
        self.stats = None
        if getattr(server_args, "enable_metrics", False):
            from workbench.sandbox.srt.observability.metrics_collector import SandboxMetrics, SchedulerStats

            self.metrics_collector = SandboxMetrics(server_args.served_model_name or server_args.model_path)
            self.stats = SchedulerStats()

    def reset_metrics(self) -> None:
        """Zero the log-interval and lifetime counters (SGLang: `SchedulerMetricsReporter.reset_metrics`)."""
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.spec_num_accept_tokens = 0
        self.spec_num_correct_drafts = 0
        self.spec_num_forward_ct = 0
        self.spec_total_num_accept_tokens = 0
        self.spec_total_num_forward_ct = 0

    def flush_cache(self) -> bool:
        """`/flush_cache`: only when idle (no running request), reset the metrics counters (the
        sandbox has no radix cache to flush). Returns whether it was done (SGLang:
        `Scheduler.flush_cache`, which does nothing while requests run or wait)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self.reset_metrics()
            logger.info("Cache flushed successfully!")
            return True
        finally:
            self.lock.release()

    # -- statistics ----------------------------------------------------------------------------
    def get_internal_state(self) -> List[Dict]:
        """One dict per DP rank (the sandbox has one). `avg_spec_accept_length` only after the
        first decode log tick (SGLang: scheduler_components/internal_state.py). Stalls while the
        stall fault is on: SGLang's `/server_info` asks the scheduler for it
        (`tokenizer_manager.get_internal_state()`), so a stuck scheduler leaves it unanswered."""
        self._stall_if_asked()
        state: Dict = {"last_gen_throughput": self.last_gen_throughput, "decode_log_interval": self.decode_log_interval}
        if not self.spec_algorithm.is_none() and self.spec_total_num_forward_ct > 0:
            state["avg_spec_accept_length"] = self.spec_total_num_accept_tokens / self.spec_total_num_forward_ct
        return [state]

    def _report_prefill_stats(self, num_new_tokens: int, seconds: float) -> None:
        if not self.is_stats_logging_rank:
            return
        throughput = num_new_tokens / seconds if seconds > 0 else 0.0
        usage = num_new_tokens / MAX_TOTAL_NUM_TOKENS
        logger.info(
            f"Prefill batch, #new-seq: 1, #new-token: {num_new_tokens}, #cached-token: 0, "
            f"token usage: {usage:.2f}, #running-req: 0, #queue-req: 0, #pending-token: 0, "
            f"{self.graph_label}: False, input throughput (token/s): {throughput:.2f}"
        )
        if self.metrics_collector is not None:
            self.stats.num_running_reqs = 0
            self.stats.num_queue_reqs = 0
            self.stats.cache_hit_rate = 0.0
            self.stats.token_usage = usage
            self.stats.num_used_tokens = num_new_tokens
            self.metrics_collector.log_stats(self.stats)

    def _report_decode_stats(self, num_tokens_in_cache: int) -> None:
        if self.forward_ct_decode % self.decode_log_interval != 0 or not self.is_stats_logging_rank:
            return
        gap_latency = time.perf_counter() - self.last_decode_stats_tic
        self.last_decode_stats_tic = time.perf_counter()
        self.last_gen_throughput = self.num_generated_tokens / gap_latency
        self.num_generated_tokens = 0
        usage = num_tokens_in_cache / MAX_TOTAL_NUM_TOKENS
        msg = f"Decode batch, #running-req: 1, #token: {num_tokens_in_cache}, token usage: {usage:.2f}, "
        if not self.spec_algorithm.is_none():
            spec_accept_length = self.spec_num_accept_tokens / self.spec_num_forward_ct
            draft_per_round = self.server_args.speculative_num_draft_tokens - 1
            total_draft_tokens = self.spec_num_forward_ct * draft_per_round
            spec_accept_rate = self.spec_num_correct_drafts / total_draft_tokens if total_draft_tokens > 0 else 0
            self.spec_total_num_accept_tokens += self.spec_num_accept_tokens
            self.spec_total_num_forward_ct += self.spec_num_forward_ct
            self.spec_num_accept_tokens = self.spec_num_correct_drafts = 0
            self.spec_num_forward_ct = 0
            msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "
        msg += (
            f"{self.graph_label}: False, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: 0"
        )
        logger.info(msg)
        if self.metrics_collector is not None:
            self.stats.num_running_reqs = 1
            self.stats.num_queue_reqs = 0
            self.stats.gen_throughput = self.last_gen_throughput
            self.stats.token_usage = usage
            self.stats.num_used_tokens = num_tokens_in_cache
            if self.spec_algorithm.is_none():
                self.stats.spec_accept_length = self.stats.spec_accept_rate = 0.0
                self.stats.spec_num_steps = self.stats.spec_num_draft_tokens = 0
            else:
                self.stats.spec_accept_length = spec_accept_length
                self.stats.spec_accept_rate = spec_accept_rate
                self.stats.spec_num_steps = self.server_args.speculative_num_steps or 0
                self.stats.spec_num_draft_tokens = self.server_args.speculative_num_draft_tokens or 0
            self.metrics_collector.log_stats(self.stats)

    # -- request handling ----------------------------------------------------------------------
    def _stall_if_asked(self) -> None:
        """The stall fault (module docstring): block while ``SANDBOX_FAULT_STALL_FILE`` exists."""
        if self.stall_file is None:
            return
        while os.path.exists(self.stall_file):
            if not self._stall_logged:
                logger.warning(f"SANDBOX_FAULT_STALL_FILE {self.stall_file} exists: generation stalls until it is "
                               "removed")
                self._stall_logged = True
            time.sleep(0.05)
        self._stall_logged = False

    def generate(self, input_ids: List[int], params: SamplingParams, decode) -> Dict:
        """Run one request to completion. `decode(ids) -> str` is the tokenizer's decode.

        Returns `{"output_ids": [...], "meta_info": {...}}` (SGLang 0.5.23 field names).
        Raises `ValueError` for a request the tokenizer manager would refuse (empty, too long);
        any exception from the model run calls `exception_hook` first (when set), then propagates.
        """
        if params.temperature > 0 and not self._warned_temperature:
            logger.info("The sandbox decodes greedily: temperature > 0 is treated as temperature 0 (logged once).")
            self._warned_temperature = True
        if not input_ids:
            raise ValueError("The input is empty (no tokens)")
        if len(input_ids) + params.max_new_tokens > self.context_length:
            raise ValueError(
                f"Requested token count exceeds the model's maximum context length of {self.context_length} tokens. "
                f"You requested a total of {len(input_ids) + params.max_new_tokens} tokens: {len(input_ids)} tokens "
                f"from the input messages and {params.max_new_tokens} tokens for the completion."
            )
        with self.lock:
            try:
                return self._generate_locked(input_ids, params, decode)
            except Exception:
                # SGLang 0.5.23: an exception in the scheduler's event loop ends the scheduler
                # process (scheduler.py:6370-6373); the hook reproduces that in the server
                if self.exception_hook is not None:
                    self.exception_hook()
                raise

    def _generate_locked(self, input_ids: List[int], params: SamplingParams, decode) -> Dict:
        tic = time.perf_counter()
        rid = uuid.uuid4().hex
        worker = self.draft_worker or self.target_worker
        if self.forward_ct_decode % self.decode_log_interval == 0:
            self.last_decode_stats_tic = time.perf_counter()
        output: List[int] = []
        finish_reason: Optional[Dict] = None
        verify_ct = 0
        correct = 0
        histogram = [0] * ((self.server_args.speculative_num_draft_tokens or 1))

        def add_tokens(tokens: List[int]) -> Optional[Dict]:
            for t in tokens:
                output.append(t)
                if params.stop:
                    text = decode(output)
                    for s in params.stop:
                        if s and text.endswith(s):
                            return {"type": "stop", "matched": s}
                if len(output) >= params.max_new_tokens:
                    return {"type": "length", "length": params.max_new_tokens}
            return None

        if params.max_new_tokens <= 0:
            finish_reason = {"type": "length", "length": 0}
        else:
            t0 = time.perf_counter()
            self._stall_if_asked()
            state, first = worker.prefill(list(input_ids))
            if self.tp_sync is not None:
                self.tp_sync(first)
            self.last_receive_tstamp = time.time()
            self._report_prefill_stats(len(input_ids), time.perf_counter() - t0)
            if self.hang_after_first_prefill:
                self.startup.hang_if("warmup")
            finish_reason = add_tokens([first])
            while finish_reason is None:
                self._stall_if_asked()
                step = worker.decode(state)
                if self.tp_sync is not None:
                    self.tp_sync(step.tokens[-1] if step.tokens else -1)
                self.last_receive_tstamp = time.time()
                self.forward_ct_decode += 1
                n_before = len(output)
                finish_reason = add_tokens(step.tokens)
                emitted = len(output) - n_before
                self.num_generated_tokens += emitted
                if step.is_verify:
                    verify_ct += 1
                    correct += step.num_correct_drafts
                    histogram[step.num_correct_drafts] += 1
                    self.spec_num_forward_ct += 1
                    self.spec_num_accept_tokens += step.num_correct_drafts + 1
                    self.spec_num_correct_drafts += step.num_correct_drafts
                self._report_decode_stats(state.seq_len)

        meta = {
            "id": rid,
            "finish_reason": finish_reason,
            "prompt_tokens": len(input_ids),
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": len(output),
            "cached_tokens": 0,
            "e2e_latency": time.perf_counter() - tic,
        }
        if verify_ct > 0:
            num_proposed = verify_ct * (self.server_args.speculative_num_draft_tokens - 1)
            meta.update(
                spec_verify_ct=verify_ct,
                spec_accept_length=len(output) / verify_ct,
                spec_accept_rate=correct / num_proposed if num_proposed > 0 else 0.0,
                spec_num_correct_drafts=correct,
                spec_num_proposed_drafts=num_proposed,
                spec_correct_drafts_histogram=histogram,
            )
        return {"output_ids": output, "meta_info": meta}
