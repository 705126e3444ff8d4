"""The sandbox server's OpenAI endpoints, /metrics (--enable-metrics) and /flush_cache over real
HTTP, shaped as SGLang 0.5.23 shapes them (srt/entrypoints/openai/protocol.py, serving_completions.py,
serving_chat.py, utils.py; srt/observability/metrics_collector.py). Two servers, both the session's
shared ones (the ``sandbox_server`` fixture): EAGLE3 with --enable-metrics (also read by
tests/workbench/test_measure.py), and one without speculative decoding or metrics (also read by
test_sandbox_server.py)."""

from __future__ import annotations

import re

import httpx
import pytest

from testkit.sandbox_servers import EAGLE3_METRICS, PLAIN

pytestmark = [pytest.mark.usefixtures("models_present"), pytest.mark.slow]

PROMPT = "def main():\n    "
SPEC_KEYS = ["spec_accept_rate", "spec_accept_length", "spec_cap_length", "spec_block_accept_length",
             "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct", "spec_correct_drafts_histogram",
             "spec_cap_lens_histogram"]
USAGE_KEYS = ["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details", "reasoning_tokens",
              "completion_tokens_details"]
SCHED_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}


def _families(status, content_type, text):
    from prometheus_client.parser import text_string_to_metric_families

    assert status == 200 and content_type.startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(text)}


def _metrics(url):
    resp = httpx.get(url + "/metrics", timeout=30)
    return _families(resp.status_code, resp.headers["content-type"], resp.text)


def _value(families, family, sample=None, **labels):
    fam = families[family]
    return sum(s.value for s in fam.samples if s.name == (sample or family)
               and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture
def spec(sandbox_server):
    """The shared EAGLE3 server with --enable-metrics, every decode step a log tick."""
    srv = sandbox_server(**EAGLE3_METRICS)
    srv.initial_metrics = _families(*srv.startup["metrics"])  # after the start-up warm-up, before any test request
    return srv


@pytest.fixture
def plain(sandbox_server):
    """The shared server without speculative decoding (a decode log line every 4 tokens)."""
    return sandbox_server(**PLAIN)


def _post(url, path, body, status=200):
    resp = httpx.post(url + path, json=body, timeout=120)
    assert resp.status_code == status, resp.text
    return resp.json()


def test_openai_responses_match_generate(spec):
    gen = _post(spec.url, "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 24, "temperature": 0}})
    meta = gen["meta_info"]
    comp = _post(spec.url, "/v1/completions", {"model": "m", "prompt": PROMPT, "max_tokens": 24, "temperature": 0,
                                               "return_spec_tokens_details": True})
    chat = _post(spec.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}],
                                                    "max_tokens": 24, "return_spec_tokens_details": True})
    assert list(comp) == ["id", "object", "created", "model", "choices", "usage", "metadata", "sglext"]
    assert list(chat) == ["id", "object", "created", "model", "choices", "usage", "metadata", "sglext"]
    assert (comp["object"], chat["object"], comp["model"], chat["model"]) == (
        "text_completion", "chat.completion", "m", "default")
    assert comp["choices"] == [{"index": 0, "text": gen["text"], "logprobs": None, "finish_reason": "length",
                                "matched_stop": None}]
    assert chat["choices"] == [{"index": 0, "message": {"role": "assistant", "content": gen["text"],
                                                        "reasoning_content": None},
                                "logprobs": None, "finish_reason": "length", "matched_stop": None}]
    for body in (comp, chat):
        assert list(body["usage"]) == USAGE_KEYS
        assert body["usage"]["completion_tokens"] == meta["completion_tokens"] == 24
        assert body["usage"]["prompt_tokens"] == meta["prompt_tokens"] == len(PROMPT.encode())
        assert body["usage"]["total_tokens"] == meta["prompt_tokens"] + 24
        assert body["metadata"] == {"weight_version": "default"}
        details = body["sglext"]["spec_tokens_details"]
        assert list(details) == SPEC_KEYS
        assert {k: details[k] for k in meta if k in details} == {k: meta[k] for k in meta if k in details}
        assert details["spec_verify_ct"] > 0 and details["spec_cap_lens_histogram"] == []
        assert details["spec_cap_length"] == 0.0 and details["spec_block_accept_length"] == 0.0
    # no sglext unless asked for
    plain_comp = _post(spec.url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0})
    assert "sglext" not in plain_comp and plain_comp["usage"]["completion_tokens"] == 8


def test_stop_batch_echo_and_chat_template(spec):
    gen = _post(spec.url, "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 24, "temperature": 0}})
    stop = gen["text"].strip()[:3]
    body = _post(spec.url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stop": stop})
    assert body["choices"][0]["finish_reason"] == "stop" and body["choices"][0]["matched_stop"] == stop
    assert body["choices"][0]["text"].endswith(stop)
    batch = _post(spec.url, "/v1/completions", {"prompt": [PROMPT, "import "], "max_tokens": 4, "echo": True,
                                                "return_spec_tokens_details": True})
    assert [c["index"] for c in batch["choices"]] == [0, 1] and batch["choices"][1]["text"].startswith("import ")
    assert batch["usage"]["completion_tokens"] == 8
    assert isinstance(batch["sglext"]["spec_tokens_details"], dict)  # n == 1: the first prompt's only, as SGLang
    # the chat template: the messages' text contents joined with "\n", no role markers
    chat = _post(spec.url, "/v1/chat/completions", {
        "messages": [{"role": "system", "content": "ab"}, {"role": "user", "content": [{"type": "text", "text": "cd"}]}],
        "max_completion_tokens": 4})
    assert chat["usage"]["prompt_tokens"] == len("ab\ncd") and chat["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("path,body,message", [
    ("/v1/completions", {"prompt": "x", "n": 2}, "n > 1"),
    ("/v1/completions", {"prompt": "x", "stream": True}, "stream"),
    ("/v1/completions", {"prompt": 3}, "prompt must be"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens must be positive"),
    ("/v1/completions", {"prompt": "x", "return_spec_tokens_details": "yes"}, "must be a boolean"),
    ("/v1/chat/completions", {"messages": []}, "messages must be a non-empty list"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "text parts"),
])
def test_openai_errors(spec, path, body, message):
    err = _post(spec.url, path, body, status=400)
    assert err["object"] == "error" and err["type"] == "BadRequestError" and err["code"] == 400
    assert message in err["message"] and set(err) == {"object", "message", "type", "param", "code"}


def test_metrics_names_types_and_counts(spec, sglang_source):
    first = spec.initial_metrics
    # the start-up warm-up is SGLang's (8 greedy tokens of WARMUP_TEXT through /generate) and is counted, as in
    # SGLang: one request, 8 tokens, its verify steps; the gauges hold its last decode-log tick (interval 1 here)
    from workbench.sandbox.srt.entrypoints.http_server import WARMUP_MAX_NEW_TOKENS, WARMUP_TEXT

    assert _value(first, "sglang:num_requests", "sglang:num_requests_total") == 1
    assert _value(first, "sglang:generation_tokens", "sglang:generation_tokens_total") == WARMUP_MAX_NEW_TOKENS
    assert _value(first, "sglang:prompt_tokens", "sglang:prompt_tokens_total") == len(WARMUP_TEXT.encode())
    warm_verify = _value(first, "sglang:spec_verify_calls", "sglang:spec_verify_calls_total")
    assert 1 <= warm_verify <= WARMUP_MAX_NEW_TOKENS - 1  # the first token comes from the prefill
    assert 1.0 <= _value(first, "sglang:spec_accept_length") <= 4.0
    before = _metrics(spec.url)
    gen = _post(spec.url, "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 20, "temperature": 0}})
    assert httpx.get(spec.url + "/health_generate", timeout=60).status_code == 200  # log_metrics=False: not counted
    after = _metrics(spec.url)
    meta = gen["meta_info"]
    for family, sample, expect in (
            ("sglang:generation_tokens", "sglang:generation_tokens_total", meta["completion_tokens"]),
            ("sglang:prompt_tokens", "sglang:prompt_tokens_total", meta["prompt_tokens"]),
            ("sglang:spec_verify_calls", "sglang:spec_verify_calls_total", meta["spec_verify_ct"]),
            ("sglang:num_requests", "sglang:num_requests_total", 1)):
        assert after[family].type == "counter"
        assert _value(after, family, sample) - (_value(before, family, sample) if family in before else 0) == expect
    for g in ("sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:spec_num_steps",
              "sglang:spec_num_draft_tokens", "sglang:gen_throughput", "sglang:num_running_reqs"):
        assert after[g].type == "gauge" and {k for k in after[g].samples[0].labels} == SCHED_LABELS
    assert (_value(after, "sglang:spec_num_steps"), _value(after, "sglang:spec_num_draft_tokens")) == (3, 4)
    tau, rate = _value(after, "sglang:spec_accept_length"), _value(after, "sglang:spec_accept_rate")
    assert 1.0 <= tau <= 4.0 and tau - 1 == pytest.approx(rate * 3)  # one log interval: correct+1 per verify
    assert after["sglang:generation_tokens"].samples[0].labels.keys() == {"model_name", "engine_type", "is_streaming"}
    # every metric the sandbox exports is one SGLang 0.5.23 defines, with the same name
    collector = (sglang_source / "srt/observability/metrics_collector.py").read_text()
    names = {s.name for f in after.values() for s in f.samples} | set(after)
    for name in sorted(n for n in names if n.startswith("sglang:")):
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        assert f'name="{base}"' in collector or f'name="{name}"' in collector or \
            f'name="{base}_total"' in collector, name


def test_flush_cache_resets_server_info(spec):
    _post(spec.url, "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0}})
    state = httpx.get(spec.url + "/server_info", timeout=30).json()["internal_states"][0]
    assert state["avg_spec_accept_length"] >= 1.0
    resp = httpx.post(spec.url + "/flush_cache", timeout=30)
    assert resp.status_code == 200 and resp.text.startswith("Cache flushed.")
    state = httpx.get(spec.url + "/server_info", timeout=30).json()["internal_states"][0]
    assert "avg_spec_accept_length" not in state  # absent again until the next decode log tick


def test_plain_server_has_no_metrics_and_no_sglext(plain):
    assert httpx.get(plain.url + "/metrics", timeout=30).status_code == 404  # no --enable-metrics
    body = _post(plain.url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "return_spec_tokens_details": True})
    assert "sglext" not in body and body["usage"]["completion_tokens"] == 6
    body = _post(plain.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 6,
                                                     "return_spec_tokens_details": True})
    assert "sglext" not in body
    assert httpx.get(plain.url + "/flush_cache", timeout=30).status_code == 200
