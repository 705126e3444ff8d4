"""Acceptance on vLLM (``workbench.measure.vllm``, ``measure``, ``workbench measure``, ``workbench
logs``): unit tests on the answers of a real vLLM 0.32.0 server (``tests/fixtures/vllm/``, made by
its ``capture.py``), and slow tests on the real shared ``vllm_server``: the per-request figures,
the Prometheus counter deltas and the ``SpecDecoding metrics`` log lines of one window agree exactly
(greedy decoding is deterministic), in the workbench's definitions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from workbench.logs.vllm_log import VllmLogReader
from workbench.measure import measure
from workbench.measure.prompts import load_prompts
from workbench.measure.sources import format_table, parse_metrics, summarize_records
from workbench.measure.sources import vllm_counter_row as counter_row
from workbench.measure.vllm import (
    GENERATE_UNAVAILABLE, M_DRAFTS, NO_PER_REQUEST, SERVER_INFO_UNAVAILABLE, detect_engine,
    record_from_vllm_completion, vllm_server,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
PER_REQUEST = ("--per-request-spec-decode-metrics", "summary")


def _snap(name: str):
    return parse_metrics((FIXTURES / name).read_text())


def _records():
    lines = (FIXTURES / "completions.jsonl").read_text().splitlines()
    return [record_from_vllm_completion(i, json.loads(ln)["response"], 0.5) for i, ln in enumerate(lines)]


def _replay(**bodies) -> httpx.Client:
    """An httpx client whose transport answers the given paths (``v1_models`` for ``/v1/models``)
    with the captured real answers, 404 otherwise: the engine check reads only these."""
    def answer(request):
        key = request.url.path.strip("/").replace("/", "_")
        if key not in bodies:
            return httpx.Response(404, text='{"detail":"Not Found"}')
        body = bodies[key]
        return httpx.Response(200, text=body if isinstance(body, str) else json.dumps(body))
    return httpx.Client(transport=httpx.MockTransport(answer))


def test_records_from_real_responses():
    recs = _records()
    assert [r.completion_tokens for r in recs] == [64] * 6
    assert [r.spec_verify_ct for r in recs] == [56, 34, 42, 18, 29, 39]
    assert [r.spec_num_correct_drafts for r in recs] == [9, 31, 23, 46, 34, 24]
    assert [r.spec_num_proposed_drafts for r in recs] == [3 * s for s in (56, 34, 42, 18, 29, 39)]
    assert recs[3].histogram == [2, 0, 2, 14] and recs[3].spec_accept_length == pytest.approx(1 + 46 / 18)
    assert recs[0].read_from["verify_steps"] == "metrics.speculative_decoding.num_spec_steps"


def test_a_response_without_per_request_metrics_is_not_an_accept_length():
    body = json.loads((FIXTURES / "completions.jsonl").read_text().splitlines()[0])["response"]
    body["metrics"] = None
    rec = record_from_vllm_completion(0, body, 0.1)
    assert rec.completion_tokens == 64 and rec.spec_verify_ct is None and rec.spec_accept_length is None
    body["metrics"] = {"speculative_decoding": {"num_spec_steps": 0, "mean_acceptance_length": 1.0}}
    assert record_from_vllm_completion(0, body, 0.1).spec_accept_length is None   # vLLM's 1.0 for no step
    from workbench.errors import AcceptanceError
    with pytest.raises(AcceptanceError, match="usage.completion_tokens"):
        record_from_vllm_completion(0, {"choices": []}, 0.1)


def test_counter_row_from_real_snapshots_equals_the_per_request_sums():
    recs = _records()
    row = counter_row(_snap("metrics-before.txt"), _snap("metrics-after.txt"), None, window_s=8.0, n_sent=6,
                      sent_tokens=384, sent_steps=218)
    assert row.available and (row.requests, row.completion_tokens) == (6, 384)
    assert (row.verify_steps, row.correct_drafts, row.proposed_drafts) == (218, 167, 654)
    assert row.verify_steps == sum(r.spec_verify_ct for r in recs)
    assert row.correct_drafts == sum(r.spec_num_correct_drafts for r in recs)
    assert row.accept_length == row.tau == pytest.approx(1 + 167 / 218)
    assert row.accept_rate == pytest.approx(167 / 654)                        # 25.5 %
    assert row.raw["per_position_accepted"] == [85, 50, 32]
    assert row.position_acceptance == pytest.approx([85 / 218, 50 / 218, 32 / 218])
    # the histogram the counters imply = the summed per-request acceptance_histogram
    summed = [sum(r.histogram[j] for r in recs) for j in range(4)]
    assert row.histogram == summed == [133, 35, 18, 32]
    assert not any("other traffic" in n for n in row.notes)
    other = counter_row(_snap("metrics-before.txt"), _snap("metrics-after.txt"), None, window_s=8.0, n_sent=5,
                        sent_tokens=320, sent_steps=200)
    assert any("other traffic" in n for n in other.notes)


def test_the_openai_row_in_the_same_definitions():
    row = summarize_records("openai", "x", _records(), 3)
    assert (row.verify_steps, row.correct_drafts) == (218, 167)
    assert row.tau == pytest.approx(1 + 167 / 218)
    assert row.position_acceptance == pytest.approx([85 / 218, 50 / 218, 32 / 218])


def test_counter_row_without_spec_counters_says_why():
    before, after = _snap("metrics-before.txt"), _snap("metrics-after.txt")
    for snap in (before, after):
        for name in list(snap.samples):
            if name.startswith("vllm:spec_decode"):
                del snap.samples[name]
        snap.families = {k: v for k, v in snap.families.items() if not k.startswith("vllm:spec_decode")}
    row = counter_row(before, after, None, window_s=1, n_sent=1, sent_tokens=1, sent_steps=0)
    assert not row.available and M_DRAFTS in row.reason and "speculative decoding is off" in row.reason
    row = counter_row(None, after, "GET /metrics answered 500", window_s=1, n_sent=1, sent_tokens=1, sent_steps=0)
    assert not row.available and row.reason == "GET /metrics answered 500"


def test_detect_engine_from_real_answers():
    models = json.loads((FIXTURES / "models.json").read_text())
    metrics = (FIXTURES / "metrics-after.txt").read_text()
    version = json.loads((FIXTURES / "version.json").read_text())
    engine, facts = detect_engine(_replay(v1_models=models, version=version, metrics=metrics), "http://vllm")
    assert engine == "vllm" and facts["version"] == "0.32.0" and facts["model"] == models["data"][0]["id"]
    assert any("owned_by vllm" in e for e in facts["evidence"])
    # /v1/models elsewhere (a proxy): the vllm: metrics decide
    engine, facts = detect_engine(_replay(metrics=metrics), "http://vllm")
    assert engine == "vllm" and "model" not in facts
    # VLLM_SERVER_DEV_MODE's /server_info is vLLM's, not SGLang's
    assert detect_engine(_replay(server_info={"vllm_config": "...", "vllm_env": {}}, v1_models=models),
                         "http://vllm")[0] == "vllm"
    sglang = {"model_path": "/m", "version": "0.5.23", "speculative_algorithm": "EAGLE3"}
    assert detect_engine(_replay(server_info=sglang), "http://sglang")[0] == "sglang"
    # nothing tells, or the sources disagree: not taken for either
    assert detect_engine(_replay(), "http://x")[0] is None
    engine, facts = detect_engine(_replay(server_info=sglang, v1_models=models), "http://x")
    assert engine is None and facts["identity"] == "conflicting"


def test_vllm_server_settings():
    s = vllm_server({"version": "0.32.0", "model": "m"}, _snap("metrics-after.txt"))
    assert s == {"engine": "vllm", "version": "0.32.0", "served_model_name": "m", "num_speculative_tokens": 3,
                 "speculative_algorithm": "vllm speculative decoding", "speculative_num_draft_tokens": 4}


# ---------------------------------------------------------------------------------------------
# Real vLLM server (slow)
# ---------------------------------------------------------------------------------------------


def _settle(log_path: Path) -> None:
    """Wait until the stat logger (VLLM_LOG_STATS_INTERVAL=1 on test servers) printed the last
    interval: the log stops growing for 2.5 s."""
    size, still = log_path.stat().st_size, time.monotonic()
    while time.monotonic() - still < 2.5:
        time.sleep(0.5)
        now = log_path.stat().st_size
        if now != size:
            size, still = now, time.monotonic()


def _counts(url):
    snap = parse_metrics(httpx.get(url + "/metrics", timeout=30, trust_env=False).text)
    per = {lb["position"]: v for lb, v in snap.samples["vllm:spec_decode_num_accepted_tokens_per_pos_total"]}
    return {"drafts": snap.total(M_DRAFTS), "tokens": snap.total("vllm:spec_decode_num_draft_tokens_total"),
            "accepted": snap.total("vllm:spec_decode_num_accepted_tokens_total"),
            "per_pos": [per[str(k)] for k in range(len(per))]}


@pytest.mark.slow
def test_real_vllm_sources_agree(vllm_server):
    srv = vllm_server(extra=PER_REQUEST)
    _settle(srv.log_path)
    start, before = srv.log_path.stat().st_size, _counts(srv.url)
    m = measure(srv.url, "default", num_prompts=6, max_new_tokens=64, warmup=1, progress=False)
    _settle(srv.log_path)
    after = _counts(srv.url)
    gen, oa, si, mc = (m.row(s) for s in ("generate", "openai", "server_info", "metrics"))
    assert m.server["engine"] == "vllm" and m.server["num_speculative_tokens"] == 3
    assert m.server["version"] == "0.32.0"
    assert (gen.available, gen.reason) == (False, GENERATE_UNAVAILABLE)
    assert (si.available, si.reason) == (False, SERVER_INFO_UNAVAILABLE)
    assert oa.available and mc.available and oa.requests == mc.requests == 6
    # per-request figures = counter deltas of the window, exactly (warm-up excluded from both)
    for attr in ("verify_steps", "correct_drafts", "proposed_drafts", "completion_tokens", "histogram"):
        assert getattr(oa, attr) == getattr(mc, attr), attr
    assert oa.accept_length == mc.accept_length == pytest.approx(1 + mc.correct_drafts / mc.verify_steps)
    assert oa.position_acceptance == pytest.approx(mc.position_acceptance)
    assert mc.proposed_drafts == 3 * mc.verify_steps
    # the log's SpecDecoding lines since `start` = the counters' deltas around measure() (warm-up included)
    reader = VllmLogReader(offset=start)
    with open(srv.log_path, "rb") as f:
        f.seek(start)
        reader.feed(f.read())
    reader.finish()
    log = reader.summary()
    assert log.problems == [] and set(log.wordings) == {"v1"}
    assert (log.drafts, log.drafted, log.accepted) == (after["drafts"] - before["drafts"],
                                                       after["tokens"] - before["tokens"],
                                                       after["accepted"] - before["accepted"])
    assert log.per_position_accepted == [a - b for a, b in zip(after["per_pos"], before["per_pos"])]
    warm = m.warmup_summary["openai"]
    assert log.drafts == mc.verify_steps + warm["verify_steps"]
    # the sandbox draft as shipped (SGLang's aux-id convention) on vLLM: the notes' ~25 % acceptance
    assert 0.15 < mc.accept_rate < 0.35
    table = format_table(m)
    assert "server: vLLM 0.32.0" in table and "generate: unavailable: vLLM serves no POST /generate" in table
    assert "accept len = 1 + Σ accepted / Σ drafts" in table and "Σ completion_tokens" not in table
    print(f"\nvLLM sandbox draft as shipped: drafts {mc.verify_steps}, accepted {mc.correct_drafts}/"
          f"{mc.proposed_drafts} ({mc.accept_rate:.1%}), accept length {mc.accept_length:.3f}, per position "
          f"{[round(p, 3) for p in mc.position_acceptance]}; log window drafts {log.drafts}")


@pytest.mark.slow
def test_real_vllm_cli_measure_and_logs(vllm_server, cli):
    srv = vllm_server(extra=PER_REQUEST)
    res = cli("measure", "--port", str(srv.port), "--num-prompts", "2", "--max-new-tokens", "32", "--json",
              "--no-progress", "--start-timeout", "60")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    rows = {r["source"]: r for r in out["rows"]}
    assert out["server"]["engine"] == "vllm"
    assert rows["metrics"]["verify_steps"] == rows["openai"]["verify_steps"] > 0
    assert rows["generate"]["available"] is False and rows["server_info"]["available"] is False
    _settle(srv.log_path)
    res = cli("logs", str(srv.log_path), "--json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["engine"] == "vllm" and summary["speculative"] and summary["drafts"] > 0
    assert summary["accept_length"] == pytest.approx(1 + summary["accepted"] / summary["drafts"])
    text = cli("logs", str(srv.log_path))
    assert text.code == 0 and "SpecDecoding metrics" in text.out and "accept length" in text.out


@pytest.mark.slow
def test_real_vllm_without_per_request_metrics(vllm_server):
    """The session's default vLLM server (no --per-request-spec-decode-metrics, as most deployments
    run): the openai row has the tokens but says where the per-request figures went; the counters
    still give every number, and they equal the log's lines of the window."""
    srv = vllm_server()
    _settle(srv.log_path)
    start, before = srv.log_path.stat().st_size, _counts(srv.url)
    m = measure(srv.url, "default", num_prompts=3, max_new_tokens=48, warmup=0, sources=["openai", "metrics"],
                progress=False)
    _settle(srv.log_path)
    after = _counts(srv.url)
    oa, mc = m.row("openai"), m.row("metrics")
    assert oa.available and oa.requests == 3 and oa.completion_tokens == mc.completion_tokens > 0
    assert oa.verify_steps is None and oa.accept_length is None and oa.notes == [NO_PER_REQUEST]
    assert mc.verify_steps == after["drafts"] - before["drafts"] > 0
    assert mc.accept_length == pytest.approx(1 + mc.correct_drafts / mc.verify_steps)
    reader = VllmLogReader(offset=start)
    with open(srv.log_path, "rb") as f:
        f.seek(start)
        reader.feed(f.read())
    reader.finish()
    log = reader.summary()
    assert (log.drafts, log.accepted, log.drafted) == (mc.verify_steps, mc.correct_drafts, mc.proposed_drafts)
    assert log.per_position_accepted == mc.raw["per_position_accepted"]


def test_counters_of_several_engines_are_summed_and_created_samples_ignored():
    """Data parallelism: one sample per engine label (vLLM 0.32.0 create_metric_per_engine); the
    ``*_created`` gauges prometheus_client adds are never read as counts."""
    def two_engines(name):
        text = (FIXTURES / name).read_text()
        extra = [ln.replace('engine="0"', 'engine="1"') for ln in text.splitlines()
                 if ln.startswith("vllm:spec_decode") and 'engine="0"' in ln]
        return parse_metrics(text + "\n".join(extra) + "\n")

    row = counter_row(two_engines("metrics-before.txt"), two_engines("metrics-after.txt"), None, window_s=1.0,
                      n_sent=6, sent_tokens=384, sent_steps=436)
    assert (row.verify_steps, row.correct_drafts, row.proposed_drafts) == (436, 334, 1308)
    assert row.raw["per_position_accepted"] == [170, 100, 64]
    assert row.accept_length == pytest.approx(1 + 167 / 218)


def test_v0_engine_metrics_are_not_mixed_in():
    """vLLM's V0 engine exported accepted / draft / emitted tokens without a drafts counter (its
    accepted tokens count any position): the row says so instead of computing a wrong accept length."""
    v0 = ("# TYPE vllm:spec_decode_num_accepted_tokens counter\nvllm:spec_decode_num_accepted_tokens_total"
          '{model_name="m"} 8547.0\n# TYPE vllm:spec_decode_num_draft_tokens counter\n'
          'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 13311.0\n'
          '# TYPE vllm:spec_decode_num_emitted_tokens counter\nvllm:spec_decode_num_emitted_tokens_total'
          '{model_name="m"} 10616.0\n')
    row = counter_row(parse_metrics(v0), parse_metrics(v0), None, window_s=1, n_sent=1, sent_tokens=1, sent_steps=0)
    assert not row.available and "V0 engine" in row.reason and row.accept_length is None


@pytest.mark.slow
def test_real_vllm_measure_generate_runs_unchanged(vllm_server):
    """What the diagnosis calls (``measure_generate``) on vLLM, which has no /generate: the same
    AcceptanceMeasurement, from the per-request figures or, without them, from the counters, and
    the two agree (greedy: the same tokens on both servers)."""
    from workbench.measure.generate import measure_generate

    texts = [p["text"] for p in load_prompts("default")][:3]
    per = measure_generate(vllm_server(extra=PER_REQUEST).url, texts, max_new_tokens=40, warmup=1)
    counters = measure_generate(vllm_server().url, texts, max_new_tokens=40, warmup=1)
    assert per.source.startswith("POST /v1/completions metrics.speculative_decoding")
    assert counters.source.startswith("POST /v1/completions + GET /metrics")
    assert per.server_info["engine"] == "vllm" and per.server_info["num_speculative_tokens"] == 3
    assert per.verify_steps == counters.verify_steps > 0 and per.total_tokens == counters.total_tokens == 120
    assert per.accept_length == pytest.approx(counters.accept_length)
    assert per.accept_length == pytest.approx(1 + sum(r.spec_num_correct_drafts for r in per.records) / per.verify_steps)
    assert per.accept_rate == pytest.approx(counters.accept_rate) and per.histogram == counters.histogram
    assert all(r.spec_verify_ct is None for r in counters.records) and "--per-request-spec-decode-metrics" in counters.note
