"""Acceptance sources across SGLang releases: each covered release's decode log line and
``meta_info`` keys, written BY HAND here from that release's published wheel (file:line in the
comments; the line itself is checked against the wheel below), read by the workbench's parsers
into the same definitions; and the workbench's own tables (``workbench.logs.formats``,
``workbench.measure.fields``) checked against every covered wheel, so they cannot rot.

Numbers used throughout (one request, tree drafting): --speculative-num-steps S = 3,
--speculative-num-draft-tokens D = 6, 40 verify steps, 72 correct drafts, so accepted tokens
(bonus included) A = 72 + 40 = 112, τ = 112 / 40 = 2.80; completion_tokens = 113 (the prefill's
token + 112); proposed drafts = 40 × (6 − 1) = 200; correct / proposed = 72 / 200 = 0.36.
Printed ``accept rate``: 0.5.4 A / (40 × (S + 1)) = 0.70; 0.5.9 A / (40 × D) = 0.4667 → "0.47";
0.5.12 on 72 / (40 × 5) = 0.36."""

from __future__ import annotations

import re

import pytest

from workbench.engine.releases import COVERED_RELEASES
from workbench.logs import acceptance_from_log, parse_log, parse_log_line, summarize_bytes
from workbench.logs.formats import DECODE_LINE_FORMATS, decode_line_format, engine_accept_rate
from workbench.measure.fields import META_INFO_KEYS, METRIC_NAMES, SERVER_INFO_NAMES, metrics_file
from workbench.measure.generate import record_from_response, summarize_responses
from workbench.measure.sources import avg_accept_lengths, summarize_records

# --------------------------------------------------------------------------------------------
# The decode line, per release, as its f-strings assemble it for a speculative, non-hybrid,
# non-disaggregated server on CUDA (default: no SGLANG_LOG_FORWARD_ITERS). (file, header line,
# header text there, accept line, accept text there, the assembled format).
# --------------------------------------------------------------------------------------------
DECODE_LINES = {
    # srt/managers/scheduler.py:1043-1063 (msg = (f"Decode batch. " ... ), :1059 accept len)
    "0.4.6": ("srt/managers/scheduler.py", 1044, 'f"Decode batch. "', 1059,
              'msg += f"accept len: {spec_accept_length:.2f}, "',
              "Decode batch. #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
              "gen throughput (token/s): {g:.2f}, #queue-req: {q}"),
    # srt/managers/scheduler.py:1316-1342: "cuda graph" since 0.4.7
    "0.4.8": ("srt/managers/scheduler.py", 1317, 'f"Decode batch. "', 1332,
              'msg += f"accept len: {spec_accept_length:.2f}, "',
              "Decode batch. #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
              "cuda graph: {cg}, gen throughput (token/s): {g:.2f}, #queue-req: {q}"),
    # srt/managers/scheduler_metrics_mixin.py:170-190: a trailing ", "
    "0.4.10": ("srt/managers/scheduler_metrics_mixin.py", 170,
               'msg = f"Decode batch. #running-req: {num_running_reqs}, {token_msg}"', 181,
               'msg += f"accept len: {spec_accept_length:.2f}, "',
               "Decode batch. #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
               "cuda graph: {cg}, gen throughput (token/s): {g:.2f}, #queue-req: {q}, "),
    # srt/managers/scheduler_metrics_mixin.py:199-219
    "0.5.2": ("srt/managers/scheduler_metrics_mixin.py", 199,
              'msg = f"Decode batch. #running-req: {num_running_reqs}, {token_msg}"', 210,
              'msg += f"accept len: {spec_accept_length:.2f}, "',
              "Decode batch. #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
              "cuda graph: {cg}, gen throughput (token/s): {g:.2f}, #queue-req: {q}, "),
    # srt/managers/scheduler_metrics_mixin.py:249-283: the iteration always, accept rate
    "0.5.4": ("srt/managers/scheduler_metrics_mixin.py", 249,
              'msg = f"Decode batch [{self.forward_ct}], #running-req: {num_running_reqs}, {token_usage_msg}"', 270,
              'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "',
              "Decode batch [{it}], #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
              "accept rate: {ar:.2f}, cuda graph: {cg}, gen throughput (token/s): {g:.2f}, #queue-req: {q}, "),
    # srt/managers/scheduler_metrics_mixin.py:365-411: "batch," (iter_msg empty), no trailing ", "
    "0.5.9": ("srt/managers/scheduler_metrics_mixin.py", 366,
              'msg = f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"', 390,
              'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "',
              "Decode batch, #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
              "accept rate: {ar:.2f}, cuda graph: {cg}, gen throughput (token/s): {g:.2f}, #queue-req: {q}"),
    # srt/observability/scheduler_metrics_mixin.py:675-711 (token_usage_msg from
    # get_decode_usage_msg_parts: "#token: N, token usage: F")
    "0.5.12": ("srt/observability/scheduler_metrics_mixin.py", 675,
               'msg = f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"', 694,
               'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "',
               "Decode batch, #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
               "accept rate: {ar:.2f}, cuda graph: {cg}, gen throughput (token/s): {g:.2f}, #queue-req: {q}"),
    # srt/managers/scheduler_components/metrics_reporter.py:780-856
    "0.5.18": ("srt/managers/scheduler_components/metrics_reporter.py", 780,
               'msg = f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"', 821,
               'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "',
               "Decode batch, #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
               "accept rate: {ar:.2f}, cuda graph: {cg}, gen throughput (token/s): {g:.2f}, #queue-req: {q}"),
    # srt/managers/scheduler_components/metrics_reporter.py:963-1045
    "0.5.23": ("srt/managers/scheduler_components/metrics_reporter.py", 963,
               'msg = f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"', 1005,
               'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "',
               "Decode batch, #running-req: {r}, #token: {t}, token usage: {u:.2f}, accept len: {a:.2f}, "
               "accept rate: {ar:.2f}, cuda graph: {cg}, gen throughput (token/s): {g:.2f}, #queue-req: {q}"),
}

# The printed accept rate for τ = 2.80, S = 3, D = 6 (module docstring), None: not printed.
PRINTED_RATE = {"0.4.6": None, "0.4.8": None, "0.4.10": None, "0.5.2": None, "0.5.4": 0.70, "0.5.9": 0.4667,
                "0.5.12": 0.36, "0.5.18": 0.36, "0.5.23": 0.36}
# The printed rate's definition by name (workbench.logs.formats.ACCEPT_RATE_DEFINITIONS)
RATE_DEFINITION = {"0.4.6": None, "0.4.8": None, "0.4.10": None, "0.5.2": None, "0.5.4": "tau/(steps+1)",
                   "0.5.9": "tau/D", "0.5.12": "correct/proposed", "0.5.18": "correct/proposed",
                   "0.5.23": "correct/proposed"}
# The source text that computes that rate, found by hand in the same file.
RATE_SOURCE = {
    "tau/(steps+1)": r"total_draft_tokens = self\.spec_num_total_forward_ct \* \(\s*"
                     r"\(self\.server_args\.speculative_num_steps or 0\) \+ 1",
    "tau/D": r"total_draft_tokens = self\.spec_num_forward_ct \* num_draft_tokens",
    "correct/proposed": r"num_correct_drafts / total_draft_tokens",
}


def test_tables_cover_the_covered_releases():
    assert set(DECODE_LINES) == set(COVERED_RELEASES) == set(PRINTED_RATE) == set(META_INFO)


def _line(version: str, it: int = 17) -> str:
    fmt = DECODE_LINES[version][5]
    rate = PRINTED_RATE[version]
    return "[2026-12-01 18:00:00 TP0] " + fmt.format(r=1, t=523, u=0.01, a=2.80, ar=rate or 0.0, cg=True, g=87.31,
                                                      q=0, it=it)


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_the_hand_written_format_is_in_the_wheel(sglang_release, version):
    rel, hline, header, aline, accept, _ = DECODE_LINES[version]
    lines = (sglang_release(version) / rel).read_text().splitlines()
    assert lines[hline - 1].strip() == header
    assert lines[aline - 1].strip() == accept


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_log_parsers_read_every_release_line(version):
    line = _line(version)
    rec = parse_log_line(line)
    assert rec is not None and rec.kind == "decode"
    assert rec.accept_len == 2.80 and rec.running_req == 1 and rec.gen_throughput == 87.31
    want_rate = PRINTED_RATE[version]
    assert rec.accept_rate == (None if want_rate is None else round(want_rate, 2))
    # the fast scanner (templates need >= 8 lines of one shape) reads the same numbers
    blob = "\n".join(_line(version, it=i) for i in range(40)).encode() + b"\n"
    summary = summarize_bytes(blob)
    assert summary.spec_lines == 40 and summary.accept_len.median == 2.80
    assert (summary.accept_rate.median if summary.accept_rate else None) == rec.accept_rate


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_log_accept_rate_is_one_definition_on_every_release(version):
    parsed = parse_log([_line(version, i) for i in range(5)])
    acc = acceptance_from_log(parsed, version=version, num_steps=3, num_draft_tokens=6)
    assert acc.accept_length == pytest.approx(2.80)
    assert acc.accept_rate == pytest.approx(0.36)            # (2.80 - 1) / (6 - 1), correct / proposed
    assert acc.accept_rate_definition == RATE_DEFINITION[version]
    printed = PRINTED_RATE[version]
    assert acc.accept_rate_engine == (None if printed is None else pytest.approx(round(printed, 2)))
    if printed is not None:
        # the printed rate alone, restated: 0.47 × 6 = 2.82 -> 0.364 (the line rounds to 2 decimals)
        assert engine_accept_rate(round(printed, 2), version, num_steps=3, num_draft_tokens=6) == \
            pytest.approx(0.36, abs=0.005)
    # without the release the printed number is reported as printed, never re-defined
    assert acceptance_from_log(parsed).accept_rate == (None if printed is None else pytest.approx(round(printed, 2)))


def test_accept_rate_without_the_draft_token_count_is_not_guessed():
    parsed = parse_log([_line("0.5.9")])
    acc = acceptance_from_log(parsed, version="0.5.9", num_steps=3)
    assert acc.accept_rate is None and acc.accept_rate_engine == 0.47
    assert "speculative_num_draft_tokens" in acc.note and "'tau/D'" in acc.note
    acc = acceptance_from_log(parse_log([_line("0.5.23")]), version="0.5.23")
    assert acc.accept_rate == 0.36   # this release prints correct/proposed already
    with pytest.raises(ValueError, match="not an SGLang version"):
        acceptance_from_log(parsed, version="latest")


# --------------------------------------------------------------------------------------------
# meta_info per release: the keys _calculate_spec_decoding_metrics (0.5.4+) or
# _handle_batch_output (before) of srt/managers/tokenizer_manager.py writes, with the values
# that release computes for the numbers of the module docstring.
# --------------------------------------------------------------------------------------------
BASE = {"completion_tokens": 113, "prompt_tokens": 20, "e2e_latency": 1.5, "finish_reason": {"type": "length"}}
NEW = {"spec_accept_rate": 72 / 200, "spec_accept_length": 113 / 40, "spec_num_correct_drafts": 72,
       "spec_num_proposed_drafts": 200, "spec_verify_ct": 40, "spec_correct_drafts_histogram": [8, 8, 8, 16]}
META_INFO = {
    "0.4.6": {**BASE, "spec_verify_ct": 40},     # tokenizer_manager.py:1087
    "0.4.8": {**BASE, "spec_verify_ct": 40},     # :1256
    "0.4.10": {**BASE, "spec_verify_ct": 40},    # :1540
    "0.5.2": {**BASE, "spec_verify_ct": 40},     # :1272
    # :1593-1616: rate over verify × speculative_num_steps, no counts
    "0.5.4": {**BASE, "spec_accept_rate": 72 / (40 * 3), "spec_accept_length": 113 / 40, "spec_verify_ct": 40},
    # :1851-1867
    "0.5.9": {**BASE, "spec_accept_rate": 72 / 200, "spec_accept_length": 113 / 40, "spec_accept_token_num": 72,
              "spec_draft_token_num": 200, "spec_verify_ct": 40, "spec_accept_histogram": [8, 8, 8, 16]},
    # :2129-2156: the new names and the backward-compat aliases
    "0.5.12": {**BASE, **NEW, "spec_accepted_drafts": 72, "spec_proposed_drafts": 200,
               "spec_accept_histogram": [8, 8, 8, 16]},
    "0.5.18": {**BASE, **NEW, "spec_accepted_drafts": 72, "spec_proposed_drafts": 200,
               "spec_accept_histogram": [8, 8, 8, 16]},   # :2791-2836
    "0.5.23": {**BASE, **NEW},                    # :3164-3201, no aliases
}
HAS_COUNTS = {"0.5.4", "0.5.9", "0.5.12", "0.5.18", "0.5.23"}        # 0.5.4 only with num_steps
HAS_HISTOGRAM = {"0.5.9", "0.5.12", "0.5.18", "0.5.23"}


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_meta_info_of_every_release_gives_the_same_definitions(version):
    rec = record_from_response(0, {"text": "x", "meta_info": META_INFO[version]}, 0.5, num_steps=3,
                               num_draft_tokens=6)
    assert rec.spec_verify_ct == 40 and rec.completion_tokens == 113
    row = summarize_records("generate", "POST /generate meta_info", [rec], 5)
    assert row.accept_length == pytest.approx(113 / 40)
    if version in HAS_COUNTS:
        assert (rec.spec_num_correct_drafts, rec.spec_num_proposed_drafts) == (72, 200)
        assert row.tau == pytest.approx(2.8) and row.drafts_per_step == pytest.approx(1.8)
        assert row.accept_rate == pytest.approx(0.36) and row.cut_tokens == 0 and row.prefill_tokens == 1
    else:
        assert rec.spec_num_correct_drafts is None and row.tau is None and row.accept_rate is None
        assert any("spec_num_correct_drafts" in n for n in row.notes)
    if version in HAS_HISTOGRAM:
        assert row.histogram == [8, 8, 8, 16]
        assert row.position_acceptance == pytest.approx([0.8, 0.6, 0.4, 0.0, 0.0])
    else:
        assert row.histogram is None and row.position_acceptance is None
    agg = summarize_responses([rec])
    assert agg.accept_length == pytest.approx(113 / 40)
    assert agg.accept_rate == (pytest.approx(0.36) if version in HAS_COUNTS else None)


def test_0_5_4_counts_need_the_step_count():
    rec = record_from_response(0, {"meta_info": META_INFO["0.5.4"]}, 0.1)
    assert rec.spec_num_correct_drafts is None and rec.spec_accept_rate is None
    rec = record_from_response(0, {"meta_info": META_INFO["0.5.4"]}, 0.1, num_steps=3)
    assert rec.spec_num_correct_drafts == 72 and rec.spec_num_proposed_drafts is None and rec.spec_accept_rate is None
    assert rec.read_from["correct_drafts"].startswith("spec_accept_rate")


def test_0_5_4_to_0_5_6_zero_placeholders_are_not_values():
    # tokenizer_manager.py 0.5.4:1593-1595 (also 0.5.5, 0.5.6): set before the spec_verify_ct > 0 test
    meta = {**BASE, "spec_accept_rate": 0.0, "spec_accept_length": 0, "spec_verify_ct": 0}
    rec = record_from_response(0, {"meta_info": meta}, 0.1, num_steps=3, num_draft_tokens=6)
    assert (rec.spec_verify_ct, rec.spec_accept_length, rec.spec_accept_rate) == (None, None, None)
    row = summarize_records("generate", "POST /generate meta_info", [rec], 5)
    assert row.accept_length is None and row.tau is None and "not 1.0" in row.notes[-1]


def test_server_info_accept_length_top_level_and_per_rank():
    # 0.4.6 http_server.py get_server_info: {**server_args, **scheduler_info, **internal_states}
    assert avg_accept_lengths({"model_path": "m", "speculative_algorithm": "EAGLE3",
                               "avg_spec_accept_length": 2.8}) == [2.8]
    # 0.4.7+: "internal_states": [one dict per DP rank]
    assert avg_accept_lengths({"internal_states": [{"avg_spec_accept_length": 2.8},
                                                   {"avg_spec_accept_length": 3.0}]}) == [2.8, 3.0]
    assert avg_accept_lengths({"model_path": "m", "internal_states": [{"last_gen_throughput": 1.0}]}) == []
    assert avg_accept_lengths({"model_path": "m"}) == []
    assert avg_accept_lengths(None) is None


# --------------------------------------------------------------------------------------------
# The workbench's tables against every covered wheel
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_the_tables_match_every_release_source(sglang_release, version):
    root = sglang_release(version)
    wrong = []
    tm = (root / "srt/managers/tokenizer_manager.py").read_text()
    for row in META_INFO_KEYS:
        if (row.source_text in tm) != row.covers(version):
            wrong.append(f"meta_info {row.name}: table says {row.covers(version)}")
    http = (root / "srt/entrypoints/http_server.py").read_text()
    for row in SERVER_INFO_NAMES:
        if (row.source_text in http) != row.covers(version):
            wrong.append(f"server_info {row.name}: table says {row.covers(version)}")
    metrics = (root / metrics_file(version)).read_text()
    for row in METRIC_NAMES:
        if (row.source_text in metrics) != row.covers(version):
            wrong.append(f"metric {row.name} in {metrics_file(version)}: table says {row.covers(version)}")
    fmt = decode_line_format(version)
    text = (root / fmt.file).read_text()
    if fmt.header not in text or fmt.accept not in text:
        wrong.append(f"decode format {fmt.first}: header/accept not in {fmt.file}")
    if fmt.accept_rate != RATE_DEFINITION[version]:
        wrong.append(f"decode format {fmt.first}: rate {fmt.accept_rate}, by hand {RATE_DEFINITION[version]}")
    if fmt.accept_rate is None:
        if "accept rate: {spec_accept_rate" in text:
            wrong.append("a rate is printed")
    elif not re.search(RATE_SOURCE[fmt.accept_rate], text):
        wrong.append(f"{fmt.accept_rate} computed elsewhere than {fmt.file}")
    assert wrong == []


def test_decode_formats_are_ordered_and_fill_the_range():
    from workbench.logs.formats import release_key

    firsts = [release_key(f.first) for f in DECODE_LINE_FORMATS]
    assert firsts == sorted(firsts) and DECODE_LINE_FORMATS[0].first == "0.4.6"
    assert decode_line_format("0.4.5") is None
    assert decode_line_format("0.5.11").accept_rate == "tau/D"          # not read: its older neighbour's
    assert decode_line_format("0.5.23+sandbox").first == "0.5.15"
    assert decode_line_format("0.6.0").first == "0.5.15"


# --------------------------------------------------------------------------------------------
# measure() end to end against in-memory stand-ins of old releases (no GPU, no such wheel can
# serve here): what a 0.4.6 and a 0.5.9 server answer, per their http_server.py /
# tokenizer_manager.py / metrics collector (the keys above; routes and metric names as in
# workbench.measure.fields, checked against the wheels by test_the_tables_match_every_release_source).
# --------------------------------------------------------------------------------------------


def _old_server(version: str):
    import httpx

    state = {"verify": 0, "tokens": 0, "requests": 0}
    lab = 'model_name="m"'

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        # /server_info from 0.5.6 (http_server.py); 0.4.6 - 0.5.5 only /get_server_info
        if path == "/get_server_info" or (path == "/server_info" and version not in ("0.4.6", "0.5.4")):
            info = {"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                    "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 6, "decode_log_interval": 1,
                    "version": version}
            if version == "0.4.6":
                info["avg_spec_accept_length"] = 2.8                       # **internal_states
            else:
                info["internal_states"] = [{"avg_spec_accept_length": 2.8}]
            return httpx.Response(200, json=info)
        if path == "/generate":
            state["verify"] += 40
            state["tokens"] += 113
            state["requests"] += 1
            return httpx.Response(200, json={"text": "t", "meta_info": dict(META_INFO[version])})
        if path == "/metrics":
            text = ("# TYPE sglang:generation_tokens_total counter\n"
                    f"sglang:generation_tokens_total{{{lab}}} {float(state['tokens'])}\n"
                    "# TYPE sglang:num_requests_total counter\n"
                    f"sglang:num_requests_total{{{lab}}} {float(state['requests'])}\n"
                    "# TYPE sglang:spec_accept_length gauge\n"
                    f'sglang:spec_accept_length{{{lab},tp_rank="0"}} 2.8\n')
            if version == "0.5.9":
                text += ("# TYPE sglang:spec_accept_rate gauge\n"
                         f'sglang:spec_accept_rate{{{lab},tp_rank="0"}} {2.8 / 6}\n')
            return httpx.Response(200, text=text)
        return httpx.Response(404, json={"detail": "Not Found"})

    return httpx.Client(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("version", ["0.4.6", "0.5.9"])
def test_measure_on_an_old_release_stand_in(version):
    from workbench.measure.sources import measure

    m = measure("http://box", ["a", "b"], warmup=1, sources=["generate", "server_info", "metrics"],
                client=_old_server(version), progress=False)
    gen, si, mc, mg = (m.row(s) for s in ("generate", "server_info", "metrics", "metrics_gauges"))
    assert m.server["version"] == version and m.server["speculative_num_draft_tokens"] == 6
    assert gen.accept_length == pytest.approx(113 / 40)
    assert gen.tau == (None if version == "0.4.6" else pytest.approx(2.8))
    assert si.available and si.tau == pytest.approx(2.8) and si.accept_rate == pytest.approx(0.36)
    assert not mc.available and "from 0.5.15" in mc.reason and f"this server: {version}" in mc.reason
    assert mg.tau == pytest.approx(2.8) and mg.accept_rate == pytest.approx(0.36)
    if version == "0.5.9":
        assert any("accepted tokens (bonus included) / (verify steps × speculative_num_draft_tokens)" in n
                   for n in mg.notes)


def test_measure_generate_on_a_0_5_4_stand_in_recovers_the_counts():
    """0.5.4 gives only spec_accept_rate over verify × speculative_num_steps: measure_generate reads
    the server's settings (/get_server_info: 0.5.4 has no /server_info) and recovers the counts."""
    from workbench.measure.generate import measure_generate

    m = measure_generate("http://box", ["a", "b"], warmup=0, client=_old_server("0.5.4"))
    assert m.server_info["version"] == "0.5.4" and m.server_info["speculative_num_steps"] == 3
    assert m.accept_length == pytest.approx(113 / 40) and m.accept_rate == pytest.approx(0.36)
    assert [r.spec_num_correct_drafts for r in m.records] == [72, 72]
