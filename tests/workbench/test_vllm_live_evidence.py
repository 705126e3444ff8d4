"""vLLM's own live evidence (issue 29, part 1): its per-position acceptance counters
(``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="k"}``) and
``--per-request-spec-decode-metrics`` (vLLM 0.32.0 ``config/observability.py``: ``summary`` /
``detailed`` add ``metrics.speculative_decoding`` to each response, ``detailed`` the accepted /
proposed drafts of every verify step; nothing in the log), read by the diagnosis' live step and by
the measurement, and shown in the report's per-position figure.

Captured ``/metrics`` of the real server (``tests/fixtures/vllm``) for the arithmetic; the shared real
vLLM server for the diagnosis; one server of its own for the ``detailed`` level (a flag of the launch).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from workbench.errors import FigureInputError
from workbench.logs.vllm_log import VllmLogReader
from workbench.measure.sources import parse_metrics, vllm_counter_row
from workbench.measure.vllm import counter_window, per_step_acceptance, record_from_vllm_completion, spec_counters
from workbench.report.figures_position import per_position_acceptance

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"


def _snap(name: str):
    return parse_metrics((FIXTURES / name).read_text())


def test_counters_of_the_captured_metrics_agree_with_the_measurements_row():
    """The real server's captured /metrics: the lifetime counters as printed, and the window between
    the two captures equal to what the measurement's metrics row computes from them."""
    after = spec_counters(_snap("metrics-after.txt"))
    assert after.since_start and after.drafts == 274 and after.per_position_accepted == [92, 52, 32]
    assert after.accepted == sum(after.per_position_accepted)  # chain drafting: a prefix is accepted
    assert after.accept_length == pytest.approx(1 + 176 / 274)
    win = counter_window(_snap("metrics-before.txt"), _snap("metrics-after.txt"))
    row = vllm_counter_row(_snap("metrics-before.txt"), _snap("metrics-after.txt"), None, window_s=1.0, n_sent=0,
                           sent_tokens=0, sent_steps=0)
    assert (win.drafts, win.accepted, win.draft_tokens) == (row.verify_steps, row.correct_drafts, row.proposed_drafts)
    assert win.per_position == pytest.approx(row.position_acceptance) and win.accept_length == row.accept_length
    # the counters of two processes are never subtracted (a restart between the reads)
    assert counter_window(_snap("metrics-after.txt"), _snap("metrics-before.txt")) is None
    assert spec_counters(parse_metrics("# TYPE vllm:generation_tokens_total counter\n")) is None


def test_detailed_per_request_metrics_are_read_and_the_summary_level_has_none():
    """vLLM 0.32.0 ``RequestSpecDecodeMetrics.to_dict``'s shape: the per-step arrays only at ``detailed``."""
    summary = {"usage": {"completion_tokens": 9, "prompt_tokens": 3}, "choices": [{"finish_reason": "length"}],
               "metrics": {"speculative_decoding": {"mean_acceptance_length": 2.0, "draft_acceptance_rate": 1 / 3,
                                                    "acceptance_histogram": [1, 1, 0, 1], "num_spec_steps": 3,
                                                    "num_accepted_draft_tokens": 4, "num_draft_tokens": 9,
                                                    "num_spec_tokens": 3}}}
    assert per_step_acceptance(summary) is None
    assert record_from_vllm_completion(0, summary, 0.1).per_step_accepted is None
    detailed = json.loads(json.dumps(summary))
    detailed["metrics"]["speculative_decoding"].update(per_step_accepted=[3, 0, 1], per_step_drafted=[3, 3, 3])
    assert per_step_acceptance(detailed) == {"accepted": [3, 0, 1], "drafted": [3, 3, 3], "accept_lengths": [4, 1, 2]}
    rec = record_from_vllm_completion(0, detailed, 0.1)
    assert rec.per_step_accepted == [3, 0, 1] and rec.read_from["per_step_accepted"].endswith(".per_step_accepted")
    detailed["metrics"]["speculative_decoding"]["per_step_drafted"] = [3, 3]  # arrays that disagree: not read
    assert per_step_acceptance(detailed) is None


def test_the_per_position_figure():
    fig = per_position_acceptance({"as found": [0.6, 0.33, 0.18], "fixed": [0.7, 0.45, 0.3]})
    assert [t.name for t in fig.data] == ["as found (accept length 2.11)", "fixed (accept length 2.45)"]
    assert list(fig.data[0].x) == [1, 2, 3] and list(fig.data[1].y) == [0.7, 0.45, 0.3]
    for bad in ({}, {"a": []}, {"a": [1.5]}, {"a": ["x"]}, {"a": [True]}, [0.5], {1: [0.5]}):
        with pytest.raises(FigureInputError):
            per_position_acceptance(bad)


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _settle(log_path: Path) -> None:
    """Wait until vLLM's stat logger (interval 1 s on test servers) wrote its last line: the log
    stops growing for 2.5 s."""
    size, still = log_path.stat().st_size, time.monotonic()
    while time.monotonic() - still < 2.5:
        time.sleep(0.5)
        now = log_path.stat().st_size
        if now != size:
            size, still = now, time.monotonic()


@pytest.mark.vllm
@pytest.mark.slow
def test_the_diagnosis_reads_vllms_live_evidence(vllm_server, state_dir, tmp_path):
    """The shared real vLLM server diagnosed with no restart: the live step reads its counters since
    start (per position), the last metrics line of its log, the per-request level (``none``); the
    lifetime counters equal the sum of every metrics line its log printed (two sources of vLLM's own);
    the report has the per-position figure, live and measured."""
    from workbench.diagnosis.run import DiagnosisRun

    srv = vllm_server()
    run = DiagnosisRun.start(port=srv.port, report_dir=tmp_path / "reports", allow_restart=False, num_prompts=2,
                             max_new_tokens=24)
    run.progress = False
    try:
        run.measure_symptom()
        _settle(srv.log_path)
        run.check_hypotheses()
        live = dict(run.ctx.state.live)
        counts = live["vllm_counters"]
        reader = VllmLogReader()
        reader.feed(srv.log_path.read_bytes())
        reader.finish()
        log = reader.summary()
        assert (counts["drafts"], counts["accepted"], counts["draft_tokens"]) == (log.drafts, log.accepted, log.drafted)
        assert counts["per_position_accepted"] == log.per_position_accepted and len(counts["per_position"]) == 3
        assert live["counters_accept_length"] == pytest.approx(1 + sum(live["per_position_acceptance"]), abs=1e-3)
        assert live["per_request_spec_decode_metrics"] == "none" and "log_accept_length" in live
        assert live["log_line"].split("SpecDecoding metrics:")[1].strip() in srv.log_path.read_text()
        # the draft as shipped (SGLang's aux ids) on vLLM: the notes' ~25-36 % acceptance, position 1 the best
        assert 0.15 < counts["accept_rate"] < 0.4 and live["per_position_acceptance"][0] > live["per_position_acceptance"][2]
        hyp = run.ctx.ledger.get("aux-cross-engine-convention")
        assert any(e.kind == "live" and f"over {counts['drafts']} verify steps" in e.summary for e in hyp.evidence)
        figs = run.figures()
        names = [t.name.split(" (accept length")[0] for t in figs["per_position"].data]
        assert names[0] == "as found, live (vLLM counters since start)" and len(names) == 2, names
    finally:
        verdict = run.finish()
    assert verdict["live"]["per_position_acceptance"] == live["per_position_acceptance"]
    print(f"\nvLLM live (since start): drafts {counts['drafts']}, accepted {counts['accepted']}/{counts['draft_tokens']}, "
          f"accept length {live['counters_accept_length']}, per position {live['per_position_acceptance']} "
          f"({counts['per_position_accepted']}); log's last line: {live['log_accept_length']} {live['log_per_position']}")
    assert httpx.get(srv.url + "/health", timeout=10, trust_env=False).status_code == 200


@pytest.mark.vllm
@pytest.mark.slow
def test_detailed_per_request_metrics_on_a_real_vllm_server(own_vllm_server, tmp_path, cli):
    """A server launched with ``--per-request-spec-decode-metrics detailed``: every response carries
    the accepted drafts of each verify step; they add up to the response's own summary, and
    ``workbench measure`` reports them."""
    from testkit.vllm_servers import speculative_config
    from workbench.measure.generate import measure_generate

    with own_vllm_server(tmp_path / "v", spec=speculative_config(),
                         extra=("--per-request-spec-decode-metrics", "detailed")) as srv:
        m = measure_generate(srv.url, ["def fibonacci(n):\n    ", "import os\nimport sys\n"], max_new_tokens=32,
                             warmup=1)
        assert m.records and all(r.per_step_accepted for r in m.records)
        for r in m.records:
            assert len(r.per_step_accepted) == r.spec_verify_ct and sum(r.per_step_accepted) == r.spec_num_correct_drafts
            assert max(r.per_step_accepted) <= 3
            hist = [r.per_step_accepted.count(j) for j in range(4)]
            assert hist == r.histogram  # the step-by-step list and vLLM's own histogram agree
        res = cli("measure", "--port", str(srv.port), "--num-prompts", "2", "--max-new-tokens", "24", "--json",
                  "--no-progress", "--sources", "openai,metrics")
        assert res.code == 0, res.err
        rows = {r["source"]: r for r in json.loads(res.out)["rows"]}
        per_step = rows["openai"]["raw"]["per_step_accepted"]
        assert len(per_step) == 2 and sum(map(sum, per_step.values())) == rows["openai"]["correct_drafts"]
        text = cli("measure", "--port", str(srv.port), "--num-prompts", "1", "--max-new-tokens", "24", "--no-progress",
                   "--sources", "openai")
        assert text.code == 0 and "openai: prompt 0: drafts accepted at each verify step: " in text.out, text.out
