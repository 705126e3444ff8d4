"""One definition of low acceptance (issue 29, part 5): ``workbench.rules.acceptance_level`` judges
an accept length against the launch's ceiling, and ``workbench logs``, ``workbench measure``,
``workbench doctor --running`` and the runbook's judgement (``acceptance_low``) agree on the same
server, printing the same words."""

from __future__ import annotations

import json
import shlex

import pytest

from remote import connect
from workbench.diagnosis.acceptance import acceptance_low
from workbench.errors import WorkbenchInputError
from workbench.rules.acceptance_level import LOW_ACCEPT_FRACTION, ceiling_from_log, classify_acceptance


@pytest.mark.parametrize("al, ceiling, level, words", [
    (1.12, 4.0, "low", "low: 1.12 of a possible 4.00 (< 45 % of the ceiling)"),
    (1.02, 4.0, "collapsed", "collapsed: 1.02 of a possible 4.00 (≤ 1.05: the draft is almost never right)"),
    (1.80, 4.0, "ok", "not low: 1.80 of a possible 4.00 (≥ 45 % of the ceiling)"),
    (1.12, None, "ok", "not low: 1.12 (the ceiling is unknown: only a collapse, ≤ 1.05, can be judged)"),
    (None, 4.0, "unknown", "not measured"),
])
def test_levels_and_words(al, ceiling, level, words):
    got = classify_acceptance(al, ceiling=ceiling)
    assert (got.level, got.words) == (level, words)
    # the runbook's judgement is the same function's
    assert acceptance_low(al, expected=None, ceiling=ceiling) == got.low


def test_the_threshold_is_the_fraction_of_the_ceiling_and_an_expectation_replaces_it():
    line = LOW_ACCEPT_FRACTION * 4.0
    assert classify_acceptance(line - 0.001, ceiling=4.0).low is True
    assert classify_acceptance(line, ceiling=4.0).low is False
    exp = classify_acceptance(2.0, ceiling=4.0, expected=2.5)
    assert exp.level == "low" and exp.words == "low: 2.00 of a possible 4.00 (< 90 % of the expected 2.50)"
    assert classify_acceptance(2.3, ceiling=4.0, expected=2.5).low is False
    with pytest.raises(WorkbenchInputError, match="accept length"):
        classify_acceptance(-1.0, ceiling=4.0)
    with pytest.raises(WorkbenchInputError, match="ceiling"):
        classify_acceptance(1.0, ceiling="four")


def test_the_ceiling_from_a_log_s_start_up_lines_of_both_engines():
    sglang = ("[2026-12-07 18:00:00] server_args=ServerArgs(model_path='/m', speculative_algorithm='EAGLE3', "
              "speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4, port=30000)")
    assert ceiling_from_log(["noise", sglang]) == 4.0
    assert ceiling_from_log([sglang.replace("speculative_num_draft_tokens=4, ", "")]) == 4.0  # steps + 1
    vllm = ("INFO 12-07 18:00:00 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: model='/t', "
            "speculative_config=SpeculativeConfig(method='eagle3', model='/d', num_spec_tokens=3)")
    assert ceiling_from_log([vllm]) == 4.0
    assert ceiling_from_log(["[2026-12-07 18:00:00] Decode batch. #running-req: 1"]) is None


@pytest.mark.slow
def test_logs_measure_and_the_runbook_agree_on_one_sandbox_server(tmp_path, free_port, monkeypatch, cli):
    """The sandbox launched with the wrong flag (EAGLE for its EAGLE-3 draft; ceiling 4): ``workbench
    measure`` and ``workbench logs`` on its own log each judge their accept length with the one
    function, read the same ceiling, print its words, and ``logs`` never says "not fired" beside a
    value it calls low. ``workbench doctor --running`` on the same server, after the measurement,
    gives the same level and words as ``logs`` (read from the end of the same log) beside its
    static findings."""
    from workbench.sandbox_box import sandbox_launch_command

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "box-state"))
    box = connect("local")
    log = tmp_path / "eagle.log"
    argv = shlex.split(sandbox_launch_command(algorithm="EAGLE", port=free_port, decode_log_interval=4))
    handle = box.launch_server(argv, port=free_port, log_path=log)
    try:
        box.wait_healthy(handle, timeout=240)
        code_m, out_m, err_m = cli("measure", "--port", str(free_port), "--json", "--num-prompts", "4",
                                   "--max-new-tokens", "48", "--sources", "generate")
        code_t, text_m, _ = cli("measure", "--port", str(free_port), "--num-prompts", "2", "--max-new-tokens", "32",
                                "--sources", "generate")
        code_d, out_d, err_d = cli("doctor", "--running", "--port", str(free_port), "--json")
        code_dt, text_d, _ = cli("doctor", "--running", "--port", str(free_port))
    finally:
        box.stop_server(handle)
    measured = json.loads(out_m)
    assert measured["ceiling"] == 4.0, err_m
    (src, level_m), = measured["acceptance_levels"].items()
    row = next(r for r in measured["rows"] if r["source"] == src)
    assert level_m == classify_acceptance(row["accept_length"], ceiling=4.0).to_dict()
    assert level_m["low"] is True and acceptance_low(row["accept_length"], expected=None, ceiling=4.0) is True
    assert "acceptance (generate): " in text_m and " of a possible 4.00 (" in text_m
    code_l, out_l, err_l = cli("logs", str(log), "--json", "--decode-log-interval", "4")
    doc = json.loads(out_l)
    level_l = doc["acceptance_level"]
    assert level_l["ceiling"] == 4.0, err_l
    assert level_l == classify_acceptance(level_l["accept_length"], ceiling=4.0).to_dict()
    assert level_l["low"] is True  # the same server: low (or collapsed) by both
    _, text_l, _ = cli("logs", str(log), "--decode-log-interval", "4")
    assert f"acceptance: {level_l['words']}" in text_l
    assert "acceptance-collapsed: not fired" not in text_l
    # doctor --running on the same server: its static findings, and the same level and words as logs
    after = json.loads(out_d)
    assert "algorithm-mismatch" in {f["rule"] for f in after["findings"]}, err_d
    assert code_d == code_dt == after["exit_code"] == 1
    # ... and after the measurement, the same level and the same words as logs on the same log
    assert after["acceptance_level"] == level_l, (after["acceptance_level"], after["acceptance_notes"])
    assert after["acceptance_source"].endswith(f"decode lines of {log}")
    assert f"acceptance: {level_l['words']}" in text_d


@pytest.mark.slow
def test_doctor_running_says_nothing_was_measured_and_keeps_its_findings(tmp_path, free_port, monkeypatch, cli):
    """A sandbox server that has logged no decode line yet (``--decode-log-interval`` far above what
    its warm-up decodes) and serves no ``/metrics``: ``doctor --running`` says the level is unknown
    and why (nothing measured yet; the /metrics it tried as well), as a note, with every static
    finding of the same launch and the same exit code."""
    from workbench.sandbox_box import sandbox_launch_command

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "box-state"))
    box = connect("local")
    log = tmp_path / "quiet.log"
    command = sandbox_launch_command(algorithm="EAGLE", port=free_port, decode_log_interval=100000)
    handle = box.launch_server(shlex.split(command), port=free_port, log_path=log)
    try:
        box.wait_healthy(handle, timeout=240)
        code, out, err = cli("doctor", "--running", "--port", str(free_port), "--json")
        _, text, _ = cli("doctor", "--running", "--port", str(free_port))
    finally:
        box.stop_server(handle)
    rep = json.loads(out)
    assert rep["acceptance_level"] == classify_acceptance(None, ceiling=4.0).to_dict(), err
    assert rep["acceptance_source"] is None
    notes = rep["acceptance_notes"]
    assert any(n.startswith("nothing measured yet: no decode line with an accept length") and str(log) in n
               for n in notes), notes
    assert any("/metrics could not be read" in n for n in notes), notes
    _, out_l, _ = cli("doctor", "--launch", command, "--json")
    static = json.loads(out_l)
    assert [f["rule"] for f in rep["findings"]] == [f["rule"] for f in static["findings"]]
    assert code == rep["exit_code"] == static["exit_code"] == 1 and "acceptance_level" not in static
    assert "acceptance: unknown: not measured (nothing measured yet: " in text
    assert "ERROR   algorithm-mismatch" in text


@pytest.mark.vllm
@pytest.mark.slow
def test_doctor_running_reads_a_real_vllm_server_s_level_from_its_counters(vllm_server, cli):
    """The shared real vLLM server (the sandbox draft, k = 3: ceiling 4): after requests,
    ``doctor --running`` judges the accept length of vLLM's own ``/metrics`` counters (1 + accepted /
    drafts since the server started, read here from the same endpoint) with the one definition, and
    prints its words beside its static findings."""
    import httpx

    from workbench.measure.sources import parse_metrics
    from workbench.measure.vllm import spec_counters

    srv = vllm_server()
    code_m, _, err_m = cli("measure", "--port", str(srv.port), "--num-prompts", "2", "--max-new-tokens", "24",
                           "--sources", "openai")
    assert code_m in (0, 1), err_m
    counts = spec_counters(parse_metrics(httpx.get(f"{srv.url}/metrics", timeout=10, trust_env=False).text))
    assert counts is not None and counts.drafts > 0
    code, out, err = cli("doctor", "--running", "--port", str(srv.port), "--json")
    rep = json.loads(out)
    want = classify_acceptance(counts.accept_length, ceiling=4.0)
    assert rep["acceptance_level"] == want.to_dict(), (rep["acceptance_level"], rep["acceptance_notes"], err)
    assert rep["acceptance_source"] == (f"vLLM /metrics counters since the server started: 1 + {counts.accepted} "
                                        f"accepted / {counts.drafts} drafts")
    assert rep["engine_version"] == "0.32.0" and code == rep["exit_code"]
    _, text, _ = cli("doctor", "--running", "--port", str(srv.port))
    assert f"acceptance: {want.words}    [vLLM /metrics counters since the server started" in text
    print(f"vLLM shared server: {want.words} ({counts.accepted} accepted / {counts.drafts} drafts)")
