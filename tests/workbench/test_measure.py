"""workbench.measure and ``workbench measure``.

Unit tests run against an in-memory SGLang 0.5.23 stand-in (httpx.MockTransport) whose responses
use the real field names (checked against the 0.5.23 source in ``test_field_names_in_sglang_0_5_23``).
The slow tests read the session's shared sandbox servers (``sandbox_server``: EAGLE3 with
--enable-metrics and --decode-log-interval 1, so every server-side counter is folded at each verify
step; EAGLE without metrics) and check that every source agrees with the others within what its
definition allows.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import httpx
import pytest

from workbench.measure import (
    MeasureError,
    PromptSetError,
    acceptance_from_counts,
    format_table,
    measure,
    parse_metrics,
    position_acceptance,
    record_from_openai,
)
from workbench.measure.prompts import load_prompts
from testkit.sandbox_servers import EAGLE, EAGLE3_METRICS

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "workbench" / "sandbox" / "prompts" / "bench.jsonl"


# ---------------------------------------------------------------------------------------------
# Definitions
# ---------------------------------------------------------------------------------------------


def test_definitions_from_counts():
    # 2 requests, 10 verify steps, 14 correct drafts, 3 drafts per step; 1 prefill token each and 3
    # accepted tokens cut by max_new_tokens: completion = 14 + 10 + 2 - 3 = 23
    d = acceptance_from_counts(completion_tokens=23, verify_steps=10, correct_drafts=14, proposed_drafts=30, requests=2)
    assert d["accept_length"] == pytest.approx(2.3)
    assert d["drafts_per_step"] == pytest.approx(1.4)
    assert d["tau"] == pytest.approx(2.4)
    assert d["accept_rate"] == pytest.approx(14 / 30)
    assert (d["prefill_tokens"], d["cut_tokens"]) == (2, 3)
    assert d["accept_length"] == pytest.approx(d["tau"] + (d["prefill_tokens"] - d["cut_tokens"]) / 10)
    empty = acceptance_from_counts(completion_tokens=23, verify_steps=0, correct_drafts=0, proposed_drafts=0)
    assert all(v is None for v in empty.values())  # never 1.0 for "no verify step"


def test_position_acceptance():
    hist = [268, 83, 12, 9]
    p = position_acceptance(hist, 3)
    assert p == pytest.approx([104 / 372, 21 / 372, 9 / 372])
    # SGLang's histogram stops at the largest k seen: the draft count gives the trailing zeros
    assert position_acceptance([2, 6], 3) == pytest.approx([0.75, 0.0, 0.0])
    assert position_acceptance([], 3) is None and position_acceptance(None) is None


# ---------------------------------------------------------------------------------------------
# Real-format responses
# ---------------------------------------------------------------------------------------------


def _details(verify, correct, hist, drafts=3, completion=None):
    """``sglext.spec_tokens_details`` as SGLang 0.5.23 builds it (protocol.py SpecTokensDetails)."""
    return {"spec_accept_rate": correct / (verify * drafts), "spec_accept_length": (completion or 0) / verify,
            "spec_cap_length": 0.0, "spec_block_accept_length": 0.0, "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": verify * drafts, "spec_verify_ct": verify,
            "spec_correct_drafts_histogram": hist, "spec_cap_lens_histogram": []}


def _completion_body(completion, details=None):
    body = {"id": "x", "object": "text_completion", "created": 0, "model": "default",
            "choices": [{"index": 0, "text": "t", "logprobs": None, "finish_reason": "length", "matched_stop": None}],
            "usage": {"prompt_tokens": 5, "total_tokens": 5 + completion, "completion_tokens": completion,
                      "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None},
            "metadata": {"weight_version": "default"}}
    if details is not None:
        body["sglext"] = {"spec_tokens_details": details}
    return body


def test_record_from_openai_variants():
    rec = record_from_openai(0, _completion_body(10, _details(4, 6, [1, 1, 1, 1], completion=10)), 0.5)
    assert (rec.completion_tokens, rec.spec_verify_ct, rec.spec_num_correct_drafts, rec.spec_num_proposed_drafts,
            rec.histogram) == (10, 4, 6, 12, [1, 1, 1, 1])
    # no sglext (non-speculative server, or the flag unsupported): no spec values, not zeros
    rec = record_from_openai(0, _completion_body(10), 0.5)
    assert rec.spec_verify_ct is None and rec.spec_num_correct_drafts is None and rec.histogram is None
    # SpecTokensDetails fills absent keys with 0: spec_verify_ct 0 means "not reported"
    zero = {"spec_accept_rate": 0.0, "spec_accept_length": 0.0, "spec_verify_ct": 0, "spec_num_correct_drafts": 0,
            "spec_correct_drafts_histogram": []}
    assert record_from_openai(0, _completion_body(10, zero), 0.5).spec_verify_ct is None
    # n > 1: a list, summed
    rec = record_from_openai(0, _completion_body(20, [_details(4, 6, [1, 1, 1, 1]), _details(2, 1, [1, 1])]), 0.5)
    assert (rec.spec_verify_ct, rec.spec_num_correct_drafts, rec.histogram) == (6, 7, [2, 2, 1, 1])
    with pytest.raises(Exception, match="usage.completion_tokens"):
        record_from_openai(0, {"choices": []}, 0.5)


METRICS_TEXT = """\
# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.5
sglang:spec_accept_length{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 9.0
# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.
# TYPE sglang:spec_verify_calls_total counter
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 30.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 12.0
"""


def test_parse_metrics_real_format():
    snap = parse_metrics(METRICS_TEXT)
    assert snap.total("sglang:generation_tokens_total") == 42.0  # summed over is_streaming
    assert snap.total("sglang:spec_verify_calls_total") == 0.0  # declared, no sample yet: a known zero
    assert snap.total("sglang:num_requests_total") is None  # not declared: unknown
    assert snap.gauge("sglang:spec_accept_length") == 2.5  # tp_rank 0
    assert snap.gauge("sglang:spec_accept_rate") is None


# ---------------------------------------------------------------------------------------------
# measure() against an in-memory SGLang 0.5.23 stand-in
# ---------------------------------------------------------------------------------------------


class FakeSGLang:
    """A speculative (or not) SGLang 0.5.23 server: every request after the first ``collapsed``
    generates 10 tokens in 4 verify steps with 6 correct drafts (histogram [1, 1, 1, 1]); the first
    ``collapsed`` ones 10 tokens in 9 steps with 0 correct, so a counted warm-up would show."""

    def __init__(self, *, speculative=True, metrics=True, openai=True, collapsed=0, gauge=2.5, num_draft_tokens=4):
        self.speculative, self.metrics, self.openai = speculative, metrics, openai
        self.collapsed, self.gauge_value, self.d = collapsed, gauge, num_draft_tokens
        self.calls = 0
        self.tokens = self.verify = self.requests = 0
        self.totals = [0, 0]  # lifetime accepted tokens, forward ct (avg_spec_accept_length)
        self.paths: list[str] = []

    def _meta(self):
        self.calls += 1
        collapsed = self.calls <= self.collapsed
        verify, correct, hist = (9, 0, [9]) if collapsed else (4, 6, [1, 1, 1, 1])
        meta = {"id": f"r{self.calls}", "finish_reason": {"type": "length", "length": 10}, "prompt_tokens": 5,
                "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": 10,
                "cached_tokens": 0, "e2e_latency": 0.01}
        self.tokens += 10
        self.requests += 1
        if self.speculative:
            meta.update(spec_accept_rate=correct / (verify * (self.d - 1)), spec_accept_length=10 / verify,
                        spec_num_correct_drafts=correct, spec_num_proposed_drafts=verify * (self.d - 1),
                        spec_verify_ct=verify, spec_correct_drafts_histogram=hist)
            self.verify += verify
            self.totals[0] += correct + verify
            self.totals[1] += verify
        return meta

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        if path == "/server_info":
            state = {"last_gen_throughput": 10.0}
            if self.speculative and self.totals[1]:
                state["avg_spec_accept_length"] = self.totals[0] / self.totals[1]
            return httpx.Response(200, json={
                "model_path": "/m", "speculative_algorithm": "EAGLE3" if self.speculative else None,
                "speculative_num_steps": 3 if self.speculative else None, "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": self.d if self.speculative else None, "decode_log_interval": 40,
                "version": "0.5.23", "internal_states": [state]})
        if path == "/generate":
            meta = self._meta()
            return httpx.Response(200, json={"text": "t", "output_ids": [1] * 10, "meta_info": meta})
        if path == "/v1/completions" and self.openai:
            meta = self._meta()
            body = _completion_body(10)
            wants = json.loads(request.content).get("return_spec_tokens_details")
            if wants and self.speculative:
                body["sglext"] = {"spec_tokens_details": _details(meta["spec_verify_ct"], meta["spec_num_correct_drafts"],
                                                                  meta["spec_correct_drafts_histogram"], completion=10)}
            return httpx.Response(200, json=body)
        if path == "/metrics" and self.metrics:
            lab = 'engine_type="unified",model_name="m"'
            text = ("# TYPE sglang:spec_verify_calls_total counter\n"
                    + (f"sglang:spec_verify_calls_total{{{lab}}} {float(self.verify)}\n" if self.verify else "")
                    + "# TYPE sglang:generation_tokens_total counter\n"
                    f'sglang:generation_tokens_total{{{lab},is_streaming="false"}} {float(self.tokens)}\n'
                    "# TYPE sglang:num_requests_total counter\n"
                    f'sglang:num_requests_total{{{lab},is_streaming="false"}} {float(self.requests)}\n'
                    "# TYPE sglang:spec_accept_length gauge\n"
                    f'sglang:spec_accept_length{{{lab},tp_rank="0"}} {self.gauge_value if self.speculative else 0.0}\n'
                    "# TYPE sglang:spec_accept_rate gauge\n"
                    f'sglang:spec_accept_rate{{{lab},tp_rank="0"}} {0.5 if self.speculative else 0.0}\n'
                    "# TYPE sglang:spec_num_draft_tokens gauge\n"
                    f'sglang:spec_num_draft_tokens{{{lab},tp_rank="0"}} {float(self.d if self.speculative else 0)}\n')
            return httpx.Response(200, text=text)
        return httpx.Response(404, json={"detail": "Not Found"})

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handler))


def test_measure_every_source_warmup_excluded():
    fake = FakeSGLang(collapsed=2)
    m = measure("http://box", ["a", "b", "c"], warmup=1, client=fake.client(), progress=False)
    gen, oa, si, mc, mg = (m.row(s) for s in ("generate", "openai", "server_info", "metrics", "metrics_gauges"))
    # the two collapsed requests are the two warm-ups (one per request source): none is counted
    assert m.warmup_summary == {"generate": {"requests": 1, "completion_tokens": 10, "verify_steps": 9},
                                "openai": {"requests": 1, "completion_tokens": 10, "verify_steps": 9}}
    for row in (gen, oa):
        assert row.warmup_excluded and row.requests == 3 and row.verify_steps == 12
        assert row.accept_length == pytest.approx(30 / 12)
        assert row.drafts_per_step == pytest.approx(18 / 12) and row.tau == pytest.approx(2.5)
        assert row.accept_rate == pytest.approx(18 / 36)
        assert row.histogram == [3, 3, 3, 3] and row.draft_positions == 3
        assert row.position_acceptance == pytest.approx([0.75, 0.5, 0.25])
    # counters: after - before, so the warm-up's 18 verify steps are out
    assert (mc.requests, mc.completion_tokens, mc.verify_steps) == (6, 60, 24)
    assert mc.accept_length == pytest.approx(2.5) and mc.warmup_excluded
    # /server_info is a lifetime ratio: the warm-ups are in it, and it says so
    assert si.warmup_excluded is False and si.scope == "lifetime"
    assert si.tau == pytest.approx((2 * 9 + 6 * 10) / (2 * 9 + 6 * 4))
    assert mg.tau == 2.5 and mg.accept_rate == 0.5 and mg.warmup_excluded is False  # 24 < 2 x 40
    assert m.findings() == []
    text = format_table(m)
    assert "P(accepted >= k): k=1 0.750, k=2 0.500, k=3 0.250" in text


def test_measure_non_speculative_never_one():
    fake = FakeSGLang(speculative=False, metrics=False)
    m = measure("http://box", ["a", "b"], warmup=0, client=fake.client(), progress=False)
    for src in ("generate", "openai"):
        row = m.row(src)
        assert row.available and row.completion_tokens == 20
        assert row.accept_length is None and row.tau is None and row.verify_steps is None
        assert any("not 1.0" in n for n in row.notes)
    assert any("sglext" in n for n in m.row("openai").notes)
    si = m.row("server_info")
    assert si.tau is None and "speculative decoding is off" in si.reason
    for src in ("metrics", "metrics_gauges"):
        assert not m.row(src).available and "--enable-metrics" in m.row(src).reason
    assert m.findings() == []


def test_measure_gauge_zero_is_missing_and_collapse_fires():
    fake = FakeSGLang(collapsed=100, gauge=0.0)
    m = measure("http://box", ["a"] * 3, warmup=0, sources=["generate", "metrics"], client=fake.client(), progress=False)
    assert m.row("generate").accept_length == pytest.approx(10 / 9)
    g = m.row("metrics_gauges")
    assert g.tau is None and "0.0" in g.reason
    fake2 = FakeSGLang(collapsed=100)
    m2 = measure("http://box", ["a"] * 3, warmup=0, sources=["generate"], client=fake2.client(), progress=False)
    assert m2.row("generate").verify_steps == 27
    # 30 tokens / 27 steps = 1.11 > 1.05: no finding; a collapsed box (1 token per step) fires it
    assert m2.findings() == []


def test_measure_collapsed_fires_rule():
    class Collapsed(FakeSGLang):
        def _meta(self):
            meta = super()._meta()
            meta.update(completion_tokens=10, spec_verify_ct=10, spec_num_correct_drafts=0,
                        spec_num_proposed_drafts=30, spec_correct_drafts_histogram=[10])
            return meta

    m = measure("http://box", ["a", "b", "c"], warmup=0, sources=["generate"], client=Collapsed().client(),
                progress=False)
    assert m.row("generate").accept_length == 1.0  # measured: 30 tokens over 30 verify steps
    (f,) = m.findings()
    assert f.rule == "acceptance-collapsed"
    # measure runs no static checks (issue 29 trial item 4)
    assert f.evidence["static_checked"] is False and "workbench doctor --running" in f.message
    assert "no static finding" not in f.message


def test_measure_without_openai_endpoints():
    fake = FakeSGLang(openai=False)
    m = measure("http://box", ["a", "b"], warmup=1, sources=["generate", "openai"], client=fake.client(),
                progress=False)
    assert m.row("generate").available and m.row("generate").requests == 2
    oa = m.row("openai")
    assert not oa.available and "404" in oa.reason


def test_measure_passive_sources_drive_generate():
    fake = FakeSGLang()
    m = measure("http://box", ["a", "b"], warmup=0, sources=["metrics"], client=fake.client(), progress=False)
    assert m.row("generate") is None and m.row("metrics").verify_steps == 8
    assert "/generate" in " ".join(m.notes)


def test_measure_bad_arguments_and_unreachable():
    with pytest.raises(ValueError, match="unknown source"):
        measure("http://box", ["a"], sources=["logs"])
    with pytest.raises(ValueError, match="warmup"):
        measure("http://box", ["a"], warmup=-1)

    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(MeasureError, match="connection refused"):
        measure("http://box", ["a"], client=httpx.Client(transport=httpx.MockTransport(refuse)), progress=False)


# ---------------------------------------------------------------------------------------------
# Prompt sets
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,count", [("chat", 30), ("code", 30), ("math", 35), ("default", 12)])
def test_builtin_prompt_sets(name, count):
    prompts = load_prompts(name)
    assert len(prompts) == count
    assert len({p["id"] for p in prompts}) == count
    if name != "default":
        assert all(p["source"] and p["license"] in ("MIT", "Apache-2.0") and p["kind"] == name for p in prompts)


def test_user_prompt_file(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('// a comment\n\n{"text": "def f():", "id": 1}\n{"text": "x", "source": "me", "extra": [1]}\n')
    assert [p["text"] for p in load_prompts(f)] == ["def f():", "x"]
    assert len(load_prompts(BENCH)) == 20  # the sandbox's own prompts are in the same format


@pytest.mark.parametrize("content,line,message", [
    ('{"text": "a"}\n{"text": "b"\n', 2, "not JSON"),
    ('{"text": "a"}\n["b"]\n', 2, "expected a JSON object"),
    ('{"id": "x"}\n', 1, "missing a string 'text'"),
    ('{"text": 3}\n', 1, "'text' must be a string"),
    ('\n{"text": "  "}\n', 2, "'text' is empty"),
    ('{"text": "a", "id": [1]}\n', 1, "'id' must be a string"),
    ('// only\n\n', None, "no prompt"),
])
def test_prompt_file_errors_name_the_line(tmp_path, content, line, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(PromptSetError, match=re.escape(message)) as info:
        load_prompts(f)
    assert info.value.line == line and info.value.path == str(f)
    assert str(info.value).startswith(f"{f}:{line}:" if line else f"{f}:")


def test_prompt_file_not_utf8_missing_and_directory(tmp_path):
    f = tmp_path / "latin1.jsonl"
    f.write_bytes(b'{"text": "a"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(PromptSetError, match="not UTF-8") as info:
        load_prompts(f)
    assert info.value.line == 2
    with pytest.raises(PromptSetError, match="not a built-in prompt set"):
        load_prompts(tmp_path / "nope.jsonl")
    with pytest.raises(PromptSetError, match="directory"):
        load_prompts(tmp_path)


# ---------------------------------------------------------------------------------------------
# The definitions' sources: every field and metric name read, in the real SGLang 0.5.23 source
# ---------------------------------------------------------------------------------------------

CITED = [  # (file, function or class, names it must contain)
    ("srt/managers/tokenizer_manager.py", "_calculate_spec_decoding_metrics",
     ["spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
      "spec_num_proposed_drafts", "spec_correct_drafts_histogram", "completion_tokens"]),
    ("srt/managers/schedule_batch.py", "update_spec_correct_drafts_histogram", ["spec_correct_drafts_histogram"]),
    ("srt/entrypoints/openai/protocol.py", "SpecTokensDetails",
     ["spec_verify_ct", "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_correct_drafts_histogram"]),
    ("srt/entrypoints/openai/protocol.py", "SglExt", ["spec_tokens_details"]),
    ("srt/entrypoints/openai/protocol.py", "CompletionRequest", ["return_spec_tokens_details", "max_tokens"]),
    ("srt/entrypoints/openai/protocol.py", "ChatCompletionRequest", ["return_spec_tokens_details", "max_tokens"]),
    ("srt/entrypoints/openai/protocol.py", "UsageInfo", ["completion_tokens", "prompt_tokens"]),
    ("srt/entrypoints/openai/utils.py", "spec_tokens_details_from_meta_info", ["spec_verify_ct", "or 0"]),
    ("srt/entrypoints/openai/serving_completions.py", "_build_completion_response", ["spec_tokens_details", "sglext"]),
    ("srt/entrypoints/openai/serving_chat.py", "_build_chat_response", ["spec_tokens_details", "sglext"]),
    ("srt/managers/scheduler_components/internal_state.py", "_add_speculative", ["avg_spec_accept_length"]),
    ("srt/managers/scheduler_components/internal_state.py", "_average_accept_length",
     ["spec_total_num_accept_tokens", "spec_total_num_forward_ct"]),
    ("srt/managers/scheduler_components/metrics_reporter.py", "reset_metrics", ["spec_total_num_forward_ct"]),
    ("srt/managers/scheduler_components/metrics_reporter.py", "report_decode_stats",
     ["spec_total_num_accept_tokens", "self.stats.spec_accept_length", "self.stats.spec_accept_rate"]),
    ("srt/managers/scheduler_components/batch_result_processor.py", "process_batch_result_decode",
     ["update_spec_metrics", "num_accept_tokens=num_generated_tokens"]),
    ("srt/managers/utils.py", "get_num_generated_tokens", ["num_correct_drafts", "num_non_draft_tokens_per_req"]),
    ("srt/observability/metrics_collector.py", "observe_one_finished_request",
     ["spec_verify_calls_total", "generation_tokens_total", "num_requests_total"]),
    ("srt/observability/metrics_collector.py", "log_stats", ["spec_accept_length", "spec_accept_rate"]),
    ("srt/utils/common.py", "add_prometheus_middleware", ['"/metrics"']),
    ("srt/managers/scheduler.py", "flush_cache", ["reset_metrics"]),
]
METRIC_NAMES = ["sglang:spec_verify_calls_total", "sglang:generation_tokens_total", "sglang:num_requests_total",
                "sglang:prompt_tokens_total", "sglang:spec_accept_length", "sglang:spec_accept_rate",
                "sglang:spec_num_steps", "sglang:spec_num_draft_tokens"]


def _definition(path: Path, name: str) -> str:
    text = path.read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return ast.get_source_segment(text, node)
    raise AssertionError(f"{name} not defined in {path}")


@pytest.mark.parametrize("rel,name,names", CITED, ids=[f"{c[0].rsplit('/', 1)[1]}:{c[1]}" for c in CITED])
def test_field_names_in_sglang_0_5_23(sglang_source, rel, name, names):
    source = _definition(sglang_source / rel, name)
    for n in names:
        assert n in source, (rel, name, n)


def test_metric_names_in_sglang_0_5_23(sglang_source):
    text = (sglang_source / "srt/observability/metrics_collector.py").read_text()
    for n in METRIC_NAMES:
        assert f'name="{n}"' in text, n


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["--sources", "generate,logs"], "--sources: unknown source logs"),
    (["--prompts", "no/such.jsonl"], "no/such.jsonl: no such file"),
])
def test_cli_bad_input_one_line(cli, argv, message):
    code, out, err = cli("measure", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize("argv,message", [
    (["--num-prompts", "0"], "argument --num-prompts: must be >= 1, got 0"),
    (["--warmup", "x"], "argument --warmup: expected a non-negative integer, got 'x'"),
    (["--warmup", "-1"], "argument --warmup: must be >= 0, got -1"),
    (["--port", "70000"], "argument --port: must be >= 1 and <= 65535 (a TCP port number), got 70000"),
    (["--timeout", "0"], "argument --timeout: must be a positive number of seconds, got 0"),
])
def test_cli_bad_numbers_are_usage_errors(cli, argv, message):
    """The numbers are read by argparse, as on every other subcommand: a usage error, exit 2."""
    code, out, err = cli("measure", *argv)
    assert code == 2 and out == ""
    assert err.startswith("usage: workbench measure") and "Traceback" not in err
    assert err.splitlines()[-1] == f"workbench measure: error: {message}"


def test_cli_bad_prompt_line_and_unreachable(cli, tmp_path, free_port):
    f = tmp_path / "p.jsonl"
    f.write_text('{"text": "a"}\n{"txt": "b"}\n')
    code, _, err = cli("measure", "--prompts", str(f))
    assert code == 2 and err == f"workbench measure: {f}:2: missing a string 'text'\n"
    code, _, err = cli("measure", "--port", str(free_port), "--num-prompts", "1", "--no-progress")
    assert code == 2 and err.count("\n") == 1 and "failed" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# On the sandbox box (slow): real servers
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def eagle3(sandbox_server):
    """The sandbox under EAGLE3 with --enable-metrics, every decode iteration a log tick: the
    session's shared server (also read by tests/sandbox/test_sandbox_endpoints.py)."""
    srv = sandbox_server(**EAGLE3_METRICS)
    return srv.url, srv.port, srv.log_path


@pytest.fixture
def eagle(sandbox_server):
    """The sandbox under the wrong flag (EAGLE), without --enable-metrics: the session's shared server."""
    srv = sandbox_server(**EAGLE)
    return srv.url, srv.port, srv.log_path


def _read_metrics(url):
    return parse_metrics(httpx.get(url + "/metrics", timeout=30, trust_env=False).text)


@pytest.mark.slow
def test_sandbox_sources_agree(eagle3):
    url, _, log = eagle3
    m = measure(url, BENCH, num_prompts=4, max_new_tokens=24, warmup=1, flush_cache_after_warmup=True, progress=False)
    gen, oa, si, mc, mg = (m.row(s) for s in ("generate", "openai", "server_info", "metrics", "metrics_gauges"))
    assert all(r.available for r in (gen, oa, si, mc, mg)), [(r.source, r.reason) for r in m.rows]
    # /generate and /v1/completions: the same greedy prompts decode the same tokens, request by request
    keys = ("completion_tokens", "spec_verify_ct", "spec_num_correct_drafts", "spec_num_proposed_drafts", "histogram")
    assert [[r[k] for k in keys] for r in m.records["generate"]] == [[r[k] for k in keys] for r in m.records["openai"]]
    for attr in ("requests", "completion_tokens", "verify_steps", "correct_drafts", "accept_length", "drafts_per_step",
                 "tau", "accept_rate", "histogram", "position_acceptance", "cut_tokens"):
        assert getattr(gen, attr) == getattr(oa, attr), attr
    assert gen.requests == 4 and gen.accept_length >= 2.0  # EAGLE3 works on the sandbox
    assert gen.accept_length == pytest.approx(gen.tau + (gen.prefill_tokens - gen.cut_tokens) / gen.verify_steps)
    assert len(gen.position_acceptance) == 3 and gen.position_acceptance == sorted(gen.position_acceptance,
                                                                                   reverse=True)
    # Prometheus counters over the window = the counted requests of both sources, nothing else
    assert (mc.requests, mc.completion_tokens, mc.verify_steps) == (
        8, gen.completion_tokens + oa.completion_tokens, gen.verify_steps + oa.verify_steps)
    assert mc.accept_length == gen.accept_length and mc.warmup_excluded
    # /server_info after /flush_cache, every step folded (interval 1): τ of the window exactly
    assert si.warmup_excluded and si.tau == pytest.approx(gen.tau, rel=1e-12)
    assert si.accept_rate == pytest.approx(gen.accept_rate, rel=1e-12)
    # gauges: the last decode-log interval (one verify step here), the same numbers as the log line
    decode = [ln for ln in log.read_text().splitlines() if "Decode batch" in ln and "accept len" in ln]
    last = re.search(r"accept len: ([\d.]+), accept rate: ([\d.]+)", decode[-1])
    assert f"{mg.tau:.2f}" == last.group(1) and f"{mg.accept_rate:.2f}" == last.group(2)
    assert mg.tau - 1 == pytest.approx(mg.accept_rate * 3) and mg.warmup_excluded  # >= 2 intervals in the window
    assert m.findings() == []
    assert "unavailable" not in format_table(m)


@pytest.mark.slow
def test_sandbox_warmup_really_excluded(eagle3):
    url, _, _ = eagle3
    before = _read_metrics(url)
    m = measure(url, BENCH, num_prompts=3, max_new_tokens=16, warmup=2, sources=["generate", "metrics", "server_info"],
                progress=False)
    after = _read_metrics(url)
    gen, mc, si = m.row("generate"), m.row("metrics"), m.row("server_info")
    warm = m.warmup_summary["generate"]
    counted = m.records["generate"]
    assert gen.requests == 3 and len(counted) == 3
    # the warm-up sent prompts 0 and 1 (greedy: the same tokens as their counted requests)
    assert warm["requests"] == 2
    assert warm["completion_tokens"] == sum(r["completion_tokens"] for r in counted[:2]) > 0
    assert warm["verify_steps"] == sum(r["spec_verify_ct"] for r in counted[:2]) > 0
    # the server counted warm-up + window; the measurement only the window
    lifetime = after.total("sglang:generation_tokens_total") - before.total("sglang:generation_tokens_total")
    assert lifetime == gen.completion_tokens + warm["completion_tokens"]
    assert mc.completion_tokens == gen.completion_tokens and mc.verify_steps == gen.verify_steps
    assert (after.total("sglang:spec_verify_calls_total") - before.total("sglang:spec_verify_calls_total")
            == gen.verify_steps + warm["verify_steps"])
    # without /flush_cache /server_info is lifetime and says so
    assert si.scope == "lifetime" and si.warmup_excluded is False and si.tau is not None


@pytest.mark.slow
def test_sandbox_eagle_vs_eagle3(eagle, eagle3, cli):
    good = measure(eagle3[0], BENCH, num_prompts=4, max_new_tokens=24, warmup=1, sources=["generate"], progress=False)
    bad = measure(eagle[0], BENCH, num_prompts=4, max_new_tokens=24, warmup=1, progress=False)
    g, b = good.row("generate"), bad.row("generate")
    assert g.accept_length >= 2.0 and g.tau >= 2.0
    assert 1.05 < b.accept_length <= 1.35 and b.tau <= 1.3, (b.accept_length, b.tau)
    assert bad.row("openai").accept_length == b.accept_length
    for src in ("metrics", "metrics_gauges"):
        assert not bad.row(src).available and "--enable-metrics" in bad.row(src).reason
    # the command line on the same server: a table, the unavailable source named, exit 0 (not collapsed)
    code, out, err = cli("measure", "--port", str(eagle[1]), "--prompts", str(BENCH), "--num-prompts", "2",
                         "--max-new-tokens", "16", "--no-progress")
    assert code == 0, err
    assert "accept len" in out and "metrics: unavailable: GET /metrics answered 404" in out
    code, out, _ = cli("measure", "--port", str(eagle[1]), "--prompts", str(BENCH), "--num-prompts", "1",
                       "--max-new-tokens", "8", "--sources", "generate", "--json", "--no-progress")
    assert code == 0 and json.loads(out)["rows"][0]["source"] == "generate"


@pytest.mark.slow
def test_cli_over_ssh(eagle3, ssh_env, cli):
    _, port, _ = eagle3
    code, out, err = cli("measure", "--host", ssh_env.alias, "--port", str(port), "--prompts", str(BENCH),
                         "--num-prompts", "1", "--max-new-tokens", "8", "--sources", "generate,metrics",
                         "--json", "--no-progress")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["base_url"] != f"http://127.0.0.1:{port}"  # the local end of the port forward
    rows = {r["source"]: r for r in doc["rows"]}
    assert rows["generate"]["verify_steps"] == rows["metrics"]["verify_steps"] > 0
    assert any("SSH port forward" in n for n in doc["notes"])
