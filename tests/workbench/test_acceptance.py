import json
from datetime import datetime

import httpx
import pytest

from workbench.errors import AcceptanceError
from workbench.logs import acceptance_from_log, parse_log, parse_log_line
from workbench.measure.prompts import load_prompts
from workbench.measure.generate import measure_generate
from workbench_test_helpers import public_report

# Real-format lines, as SGLang 0.5.23's metrics_reporter.py / configure_logger write them.
DECODE_TP1 = ("[2026-01-01 12:00:00] Decode batch, #running-req: 4, #token: 8123, token usage: 0.02, accept len: 3.12, "
              "accept rate: 0.53, cuda graph: True, gen throughput (token/s): 612.40, #queue-req: 0")
DECODE_RANKS = ("[2026-01-01 12:00:05.250 DP1 PP0 ATTN_CP0 MOE_DP1 TP3 EP3] Decode batch, #running-req: 1, #token: 77, "
                "token usage: 0.00, accept len: 1.00, accept rate: 0.00, npu graph: False, gen throughput (token/s): 20.10, "
                "#queue-req: 2")
DECODE_NOSPEC = ("[2026-01-01 12:00:06 TP0] Decode batch, #running-req: 2, #token: 300, token usage: 0.01, "
                 "cpu graph: False, gen throughput (token/s): 45.00, #queue-req: 0")
DECODE_HYBRID_SUFFIX = (
    "[2026-01-01 12:00:07] Decode batch [812], #running-req: 3, #full token: 90, full token usage: 0.01, #swa token: 12, "
    "swa token usage: 0.00, accept len: 2.50, accept rate: 0.50, cap len: 1.20, musa graph: True, "
    "gen throughput (token/s): 99.99, #queue-req: 1, est. decode TFLOPS/s (per GPU): 1.25, est. read BW (GB/s per GPU): 3.50, "
    "est. write BW (GB/s per GPU): 0.10")
PREFILL = ("[2026-01-01 11:59:59] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.01, "
           "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 1843.21")


def test_decode_line_tp1():
    r = parse_log_line(DECODE_TP1)
    assert r.kind == "decode"
    assert r.timestamp == datetime(2026, 1, 1, 12, 0, 0)
    assert r.ranks == {}
    assert (r.running_req, r.num_tokens, r.token_usage, r.queue_req) == (4, 8123, 0.02, 0)
    assert (r.accept_len, r.accept_rate) == (3.12, 0.53)
    assert (r.graph_backend, r.graph, r.gen_throughput) == ("cuda", True, 612.40)


def test_decode_line_rank_tags_and_ms():
    r = parse_log_line(DECODE_RANKS)
    assert r.timestamp == datetime(2026, 1, 1, 12, 0, 5, 250000)
    assert r.ranks == {"DP": 1, "PP": 0, "ATTN_CP": 0, "MOE_DP": 1, "TP": 3, "EP": 3}
    assert (r.accept_len, r.graph_backend, r.graph, r.queue_req) == (1.0, "npu", False, 2)


def test_decode_line_without_speculation_and_with_suffix():
    r = parse_log_line(DECODE_NOSPEC)
    assert r.accept_len is None and r.accept_rate is None and r.graph_backend == "cpu"
    h = parse_log_line(DECODE_HYBRID_SUFFIX)
    assert h.iteration == 812
    assert (h.accept_len, h.cap_len, h.queue_req, h.num_tokens) == (2.5, 1.2, 1, None)
    assert h.fields["#full token"] == 90 and h.fields["est. decode TFLOPS/s (per GPU)"] == 1.25
    assert h.graph_backend == "musa"


def test_prefill_and_non_batch_lines():
    p = parse_log_line(PREFILL)
    assert p.kind == "prefill"
    assert (p.new_seq, p.new_token, p.cached_token, p.pending_token, p.input_throughput) == (1, 512, 0, 0, 1843.21)
    assert parse_log_line("[2026-01-01 12:00:00] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16") is None
    assert parse_log_line("[2026-01-01 12:00:00] The server is fired up and ready to roll!") is None
    assert parse_log_line("") is None
    # a message that merely mentions a decode batch later in the line is not a batch line
    assert parse_log_line("[2026-01-01 12:00:00] note: Decode batch, #running-req: 1") is None
    # a container-log prefix in front, and a custom logging format without SGLang's prefix
    assert parse_log_line("pod-7 | " + DECODE_TP1).accept_len == 3.12
    bare = parse_log_line("INFO sglang: Decode batch, #running-req: 1, accept len: 1.50, #queue-req: 0")
    assert bare.timestamp is None and bare.accept_len == 1.5


def test_parse_log_summary():
    lines = [PREFILL, DECODE_TP1, "noise", DECODE_RANKS, DECODE_HYBRID_SUFFIX]
    parsed = parse_log("\n".join(lines))
    s = parsed.summary
    assert (s["decode_lines"], s["prefill_lines"], s["accept_len_lines"]) == (3, 1, 3)
    assert (s["accept_len_min"], s["accept_len_median"], s["accept_len_max"], s["accept_len_last"]) == (1.0, 2.5, 3.12, 2.5)
    assert s["speculative"] is True
    assert s["first"] == "2026-01-01 11:59:59" and s["last"] == "2026-01-01 12:00:07"
    acc = acceptance_from_log(parsed)
    assert acc.accept_length == pytest.approx((3.12 + 1.0 + 2.5) / 3)
    assert (acc.median, acc.last, acc.lines) == (2.5, 2.5, 3)
    json.dumps(parsed.to_dict())


def test_acceptance_from_log_not_speculative():
    acc = acceptance_from_log(parse_log([DECODE_NOSPEC, DECODE_NOSPEC]).decode)
    assert acc.speculative is False and acc.accept_length is None
    assert "speculative decoding is off" in acc.note
    empty = acceptance_from_log([])
    assert empty.accept_length is None and "no decode log line" in empty.note


def test_public_report_log_line_is_not_an_sglang_decode_line():
    # the PR text quotes "accept_len: 1.00", a paraphrase, not the engine's format
    lines = public_report("sglang-pr21272-eagle-flag-with-eagle3-draft")["inputs"]["log_lines"]
    assert lines == ["accept_len: 1.00"]
    assert [parse_log_line(l) for l in lines] == [None]
    # the same symptom in the real format
    collapsed = [DECODE_TP1.replace("accept len: 3.12, accept rate: 0.53", "accept len: 1.00, accept rate: 0.00")] * 5
    acc = acceptance_from_log(parse_log(collapsed))
    assert (acc.accept_length, acc.accept_rate, acc.max) == (1.0, 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# /generate, against an httpx in-memory transport speaking SGLang 0.5.23's meta_info


def fake_server(metas, server_info=None, status=200):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/server_info":
            return httpx.Response(200, json=server_info or {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                                            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                                                            "version": "0.5.23", "unrelated": 1})
        body = json.loads(request.content)
        calls.append(body)
        if status != 200:
            return httpx.Response(status, text="boom")
        meta = metas[len(calls) - 1]
        return httpx.Response(200, json={"text": "x", "meta_info": {"id": "r", "finish_reason": {"type": "length"},
                                                                    "prompt_tokens": 10, "e2e_latency": 0.5, **meta}})

    return httpx.Client(transport=httpx.MockTransport(handler)), calls


def spec_meta(completion, verify, correct, num_draft_tokens=4, hist=None):
    proposed = verify * (num_draft_tokens - 1)
    m = {"completion_tokens": completion, "spec_verify_ct": verify, "spec_accept_length": completion / verify,
         "spec_accept_rate": correct / proposed, "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": proposed}
    if hist is not None:
        m["spec_correct_drafts_histogram"] = hist
    return m


def test_measure_generate_aggregates_like_sglang():
    warm = spec_meta(100, 100, 0)  # excluded
    metas = [warm, spec_meta(128, 40, 60, hist=[10, 10, 10, 10]), spec_meta(64, 32, 10, hist=[25, 4, 2, 1]),
             spec_meta(1, 1, 0)]
    client, calls = fake_server(metas)
    m = measure_generate("http://box:30000/", ["a", "b", "c"], max_new_tokens=128, warmup=1, client=client)
    assert len(calls) == 4 and calls[0]["text"] == "a"
    assert calls[1]["sampling_params"] == {"temperature": 0, "max_new_tokens": 128}
    assert [r.prompt_index for r in m.records] == [0, 1, 2]
    assert m.total_tokens == 128 + 64 + 1
    assert m.verify_steps == 73
    assert m.accept_length == pytest.approx(193 / 73)  # Σ completion / Σ verify, not a mean of ratios
    assert m.accept_rate == pytest.approx(70 / (73 * 3))
    assert m.mean_spec_accept_rate == pytest.approx((60 / 120 + 10 / 96 + 0) / 3)
    assert m.histogram == [35, 14, 12, 11]
    assert m.speculative is True and m.note is None
    assert m.server_info == {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                             "speculative_num_draft_tokens": 4, "version": "0.5.23"}
    assert m.records[0].e2e_latency == 0.5 and m.records[0].text is None
    assert m.tokens_per_s == pytest.approx(m.total_tokens / m.wall_s)
    d = m.to_dict()
    json.dumps(d)
    assert d["records"][1]["spec_verify_ct"] == 32


def test_measure_generate_without_spec_fields_is_not_one():
    client, _ = fake_server([{"completion_tokens": 128}] * 3)
    m = measure_generate("http://box:30000", ["a", "b"], warmup=1, client=client, fetch_server_info=False)
    assert m.speculative is False
    assert m.accept_length is None and m.accept_rate is None
    assert m.verify_steps == 0 and m.total_tokens == 256
    assert "speculative decoding is off" in m.note and "not 1.0" in m.note
    assert m.requests_without_spec == 2


def test_measure_generate_legacy_histogram_key():
    meta = spec_meta(10, 5, 3)
    meta["spec_accept_histogram"] = [2, 3]
    client, _ = fake_server([meta])
    m = measure_generate("http://b", ["a"], warmup=0, client=client, fetch_server_info=False)
    assert m.records[0].histogram == [2, 3] and m.accept_length == 2.0


def test_measure_generate_errors():
    client, _ = fake_server([], status=503)
    with pytest.raises(AcceptanceError, match=r"POST http://b/generate answered 503: boom"):
        measure_generate("http://b", ["a"], warmup=0, client=client)
    client, _ = fake_server([{"no": "tokens"}])
    with pytest.raises(AcceptanceError, match="no meta_info.completion_tokens"):
        measure_generate("http://b", ["a"], warmup=0, client=client, fetch_server_info=False)
    with pytest.raises(AcceptanceError, match="POST http://127.0.0.1:9/generate failed"):
        measure_generate("http://127.0.0.1:9", ["a"], warmup=0, timeout=2)


def test_load_prompts(tmp_path):
    prompts = load_prompts()
    assert 10 <= len(prompts) <= 16
    assert {p["kind"] for p in prompts} == {"code", "prose"}
    assert all(p["text"] and p["source"] and p["id"] for p in prompts)
    assert len({p["id"] for p in prompts}) == len(prompts)
    f = tmp_path / "p.jsonl"
    f.write_text('// comment\n{"text": "hi"}\n\n{"nope": 1}\n')
    # one loader for every prompt set (workbench.measure.prompts): a PromptSetError, which is a ValueError
    with pytest.raises(ValueError, match=r"p.jsonl:4: missing a string 'text'"):
        load_prompts(f)
