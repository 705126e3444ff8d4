"""vLLM logs (``workbench.logs.vllm_log``): the speculative-decoding metrics line of every wording,
read from a real vLLM 0.32.0 server's log and from public older logs, summed over a window and
checked against the same server's Prometheus counters (``tests/fixtures/vllm/``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.logs.vllm_log import (
    VllmLogReader, looks_like_vllm_line, parse_spec_decoding_line, summarize_spec_lines,
)
from workbench.measure.sources import parse_metrics

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL_LOG = FIXTURES / "logs" / "vllm" / "vllm-0.32.0.log"
OLDER_LOG = FIXTURES / "logs" / "vllm" / "vllm-older.log"


def _counters(name: str) -> dict[str, float]:
    snap = parse_metrics((FIXTURES / "vllm" / name).read_text())
    out = {n: snap.total(f"vllm:spec_decode_num_{n}_total") for n in ("drafts", "draft_tokens", "accepted_tokens")}
    for labels, v in snap.samples["vllm:spec_decode_num_accepted_tokens_per_pos_total"]:
        out[f"pos{labels['position']}"] = v
    return out


def _read(path: Path, chunk: int | None = None) -> VllmLogReader:
    reader = VllmLogReader()
    data = path.read_bytes()
    step = chunk or len(data)
    for i in range(0, len(data), step):
        reader.feed(data[i:i + step])
    reader.finish()
    return reader


def test_real_line_parsed_exactly():
    lines = [ln for ln in REAL_LOG.read_text().splitlines() if "SpecDecoding metrics" in ln]
    assert len(lines) == 3
    rec = parse_spec_decoding_line(lines[2])
    assert rec.wording == "v1" and not rec.cumulative and rec.problems == []
    assert (rec.process, rec.level, rec.when, rec.file) == ("APIServer", "INFO", "12-02 15:34:42", "metrics.py")
    assert rec.pid == 7302 and rec.lineno == 120
    assert rec.mean_acceptance_length == 1.89 and rec.accepted == 163 and rec.drafted == 552
    assert rec.per_position == [0.440, 0.272, 0.174]
    assert rec.draft_acceptance_rate == pytest.approx(0.295)
    assert (rec.accepted_throughput, rec.drafted_throughput) == (162.79, 551.30)
    assert rec.drafts() == (184, "Drafted / k (3), consistent with the printed mean length")


def test_real_log_totals_equal_the_servers_counters():
    """The whole log's lines sum to the counters' lifetime totals (the server started at 0), and the
    lines after the warm-up's to the after − before deltas: the log and /metrics agree exactly."""
    after, before = _counters("metrics-after.txt"), _counters("metrics-before.txt")
    reader = _read(REAL_LOG)
    whole = reader.summary()
    assert whole.wordings == {"v1": 3} and whole.problems == []
    assert (whole.drafts, whole.drafted, whole.accepted) == (after["drafts"], after["draft_tokens"],
                                                             after["accepted_tokens"]) == (274, 822, 176)
    assert whole.per_position_accepted == [after["pos0"], after["pos1"], after["pos2"]] == [92, 52, 32]
    assert whole.accept_length == pytest.approx(1 + 176 / 274)
    assert whole.accept_rate == pytest.approx(176 / 822)
    window = reader.summary(start=reader.records[1].offset)
    assert (window.drafts, window.drafted, window.accepted) == (
        after["drafts"] - before["drafts"], after["draft_tokens"] - before["draft_tokens"],
        after["accepted_tokens"] - before["accepted_tokens"]) == (218, 654, 167)
    assert window.per_position_accepted == [after[f"pos{k}"] - before[f"pos{k}"] for k in range(3)] == [85, 50, 32]
    assert window.accept_rate == pytest.approx(167 / 654)           # 25.5 %: the notes' figure
    assert window.per_position == pytest.approx([85 / 218, 50 / 218, 32 / 218])
    assert window.first == "12-02 15:34:41" and window.last == "12-02 15:34:42"
    assert window.mean_acceptance_length["last"] == 1.89
    assert whole.vllm_lines > 100 and whole.lines == REAL_LOG.read_bytes().count(b"\n")


def test_reader_gives_the_same_records_in_any_block_size():
    one = _read(REAL_LOG)
    for chunk in (1, 7, 4096):
        other = _read(REAL_LOG, chunk)
        assert [(r.offset, r.line) for r in other.records] == [(r.offset, r.line) for r in one.records]
        assert other.lines == one.lines and other.vllm_lines == one.vllm_lines
    data = REAL_LOG.read_bytes()
    for r in one.records:
        assert data[r.offset:].startswith(r.line.encode())


def test_older_v1_wordings():
    recs = _read(OLDER_LOG).records
    first, second = recs[0], recs[1]
    assert first.wording == "v1-0.8" and first.accepted == 0 and first.drafted == 0
    assert first.draft_acceptance_rate is None and first.mean_acceptance_length is None and first.per_position is None
    assert first.problems == [] and first.process is None and first.when == "04-02 18:03:41"
    assert second.wording == "v1-0.9" and second.problems == []
    assert (second.draft_acceptance_rate, second.mean_acceptance_length) == (pytest.approx(0.388), 2.16)
    assert (second.accepted, second.drafted, second.per_position) == (150, 387, [0.543, 0.357, 0.264])
    s = summarize_spec_lines([second])
    assert (s.drafts, s.per_position_accepted) == (129, [70, 46, 34])
    assert s.accept_length == pytest.approx(1 + 150 / 129)


def test_v0_lines_are_cumulative_and_give_emitted_per_draft():
    recs = [r for r in _read(OLDER_LOG).records if r.wording == "v0"]
    assert len(recs) == 3 and all(r.cumulative and not r.problems for r in recs)
    a = recs[0]
    assert (a.num_spec_tokens, a.accepted, a.drafted, a.emitted) == (3, 8547, 13311, 10616)
    assert (a.draft_acceptance_rate, a.system_efficiency, a.file, a.lineno) == (0.642, 0.598, "metrics.py", 367)
    s = summarize_spec_lines([a])
    assert s.cumulative and s.drafts == 4437 and s.accept_length == pytest.approx(10616 / 4437)
    assert s.accept_length == pytest.approx(a.system_efficiency * 4, abs=0.002)   # vLLM's own efficiency
    assert s.per_position is None
    doubled = recs[2]
    assert (doubled.drafted, doubled.emitted, doubled.num_spec_tokens) == (400, 200, 4)
    # a window of cumulative lines: the last minus the line before the window
    base = parse_spec_decoding_line(a.line.replace("8547", "8000").replace("13311", "12000").replace("10616", "9000"))
    w = summarize_spec_lines([a], before=base)
    assert (w.accepted, w.drafted, w.emitted, w.drafts) == (547, 1311, 1616, 437)


def test_coloured_and_prefixed_lines():
    real = next(ln for ln in REAL_LOG.read_text().splitlines() if "SpecDecoding metrics" in ln)
    coloured = ("[pod-7] \x1b[32m(APIServer pid=7302) INFO\x1b[0m \x1b[90m12-02 15:34:38\x1b[0m "
                + real.split(" 15:34:38 ", 1)[1])
    rec = parse_spec_decoding_line(coloured)
    assert rec.problems == [] and rec.when == "12-02 15:34:38" and rec.accepted == 9 and rec.pid == 7302
    assert looks_like_vllm_line(real) and looks_like_vllm_line(coloured)
    assert not looks_like_vllm_line("[2026-01-01 12:00:00] Decode batch, #running-req: 1")


def test_a_line_that_cannot_be_read_hides_nothing_else():
    good = next(ln for ln in REAL_LOG.read_text().splitlines() if "Accepted: 163" in ln)
    bad = good.replace("Mean acceptance length: 1.89", "Mean acceptance length: n/a").replace("Drafted: 552", "Drafted: ?")
    rec = parse_spec_decoding_line(bad)
    assert rec is not None and rec.mean_acceptance_length is None and rec.drafted is None
    assert "no 'Mean acceptance length' item" in rec.problems and "no 'Drafted' item" in rec.problems
    s = summarize_spec_lines([parse_spec_decoding_line(good), rec])
    assert s.drafts == 184 and s.accepted == 163 and len(s.problems) == 1
    assert parse_spec_decoding_line("INFO 12-02 15:34:42 [loggers.py:335] Engine 000: Running: 0 reqs") is None
    # a mean length no draft count fits (below 1: impossible): drafts unknown, said why
    odd = parse_spec_decoding_line(good.replace("length: 1.89", "length: 0.89"))
    d, why = odd.drafts()
    assert d is None and "no draft count fits" in why


def test_no_lines_says_why():
    s = summarize_spec_lines([])
    assert not s.speculative and s.accept_length is None and "no 'SpecDecoding metrics' line" in s.notes[0]


def test_workbench_logs_on_a_real_vllm_log(cli):
    res = cli("logs", str(REAL_LOG), "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["engine"] == "vllm" and out["speculative"] and out["collapsed"] is False
    assert (out["drafts"], out["drafted"], out["accepted"], out["per_position_accepted"]) == (274, 822, 176, [92, 52, 32])
    assert out["accept_length"] == pytest.approx(1 + 176 / 274)
    assert [r["drafts"] for r in out["spec_lines"]] == [56, 34, 184]
    text = cli("logs", str(REAL_LOG))
    assert text.code == 0
    assert "accept length 1.642" in text.out and "k=1 0.336 (92)" in text.out and "engine        vLLM" in text.out
    last = json.loads(cli("logs", str(REAL_LOG), "--last", "75", "--json").out)     # from the window's first line
    assert last["drafts"] == 218 and last["accepted"] == 167


def test_workbench_logs_collapsed_vllm_acceptance_exits_1(cli, tmp_path):
    line = ("(APIServer pid=1) INFO 12-02 15:34:42 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 1.00, "
            "Accepted throughput: 0.00 tokens/s, Drafted throughput: 55.00 tokens/s, Accepted: 0 tokens, Drafted: "
            "150 tokens, Per-position acceptance rate: 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%\n")
    log = tmp_path / "collapsed.log"
    log.write_text(line * 3)
    res = cli("logs", str(log))
    assert res.code == 1 and "acceptance-collapsed" in res.out and "drafts        150" in res.out
    assert "no static finding" not in res.out and "workbench doctor --running" in res.out


def test_workbench_logs_says_what_a_log_is(cli, tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("hello\nworld\n")
    res = cli("logs", str(other))
    assert res.code == 2 and "not an SGLang server log, nor a vLLM one" in res.err


def test_json_log_lines():
    """vLLM's JSON logging config (vllm/logging_utils/formatter.py JSON_FORMAT: asctime, levelname,
    name, processName, process, message)."""
    real = next(ln for ln in REAL_LOG.read_text().splitlines() if "Accepted: 163" in ln)
    msg = real[real.index("SpecDecoding metrics:"):]
    line = json.dumps({"asctime": "2026-12-02 15:34:42,001", "levelname": "INFO", "name": "vllm.v1.spec_decode.metrics",
                       "processName": "MainProcess", "process": 7302, "message": msg})
    rec = parse_spec_decoding_line(line)
    assert rec.problems == [] and rec.accepted == 163 and rec.per_position == [0.440, 0.272, 0.174]
    assert (rec.month, rec.day, rec.second_of_day) == (12, 2, 15 * 3600 + 34 * 60 + 42)
    older = next(ln for ln in OLDER_LOG.read_text().splitlines() if "Mean acceptance length: 2.16" in ln)
    rec = parse_spec_decoding_line(json.dumps({"asctime": "x", "message": older[older.index("SpecDecoding"):]}))
    assert rec.per_position == [0.543, 0.357, 0.264] and rec.problems == []


def test_window_on_a_box(tmp_path):
    """summarize_box_window reads byte ranges through the Box API (here the local box; the same calls
    go over SFTP on an SSH box)."""
    from remote import connect
    from workbench.logs.vllm_log import summarize_box_window

    data = REAL_LOG.read_bytes()
    start = data.index(b"(APIServer pid=7302) INFO 12-02 15:34:41 [metrics.py")
    with connect("local") as box:
        w = summarize_box_window(box, str(REAL_LOG), start, block=100)
        whole = summarize_box_window(box, str(REAL_LOG))
    assert (w.drafts, w.accepted, w.drafted, w.per_position_accepted) == (218, 167, 654, [85, 50, 32])
    assert whole.drafts == 274
    with connect("local") as box, pytest.raises(ValueError, match="beyond its end"):
        summarize_box_window(box, str(REAL_LOG), len(data) + 10)
    # V0 cumulative lines: the window is based on the line before it
    v0 = tmp_path / "v0.log"
    lines = [ln for ln in OLDER_LOG.read_text().splitlines() if "Number of speculative tokens: 3" in ln]
    first = lines[0].replace("8547", "8000").replace("13311", "12000").replace("10616", "9000")
    v0.write_text(first + "\n" + "INFO 10-16 19:05:50 api_server.py:1] other\n" + lines[0] + "\n")
    with connect("local") as box:
        w = summarize_box_window(box, str(v0), len(first) + 1)
    assert w.cumulative and (w.accepted, w.drafted, w.emitted) == (547, 1311, 1616)


def test_workbench_logs_follow_a_growing_vllm_log(tmp_path, cli):
    """``--follow``: the real log's lines appended while the command follows (a real file, a real
    writer thread); each metrics line is printed as it comes, and the summary covers only them."""
    import threading
    import time

    lines = REAL_LOG.read_bytes().splitlines(keepends=True)
    head = [ln for ln in lines if b"Accepted: 9 tokens" in ln]          # written before: not followed
    later = [ln for ln in lines if b"SpecDecoding metrics" in ln or b"Engine 000" in ln][2:]
    p = tmp_path / "vllm.log"
    p.write_bytes(b"".join(head))
    done = threading.Event()

    def writer():
        time.sleep(0.6)
        for ln in later:
            with open(p, "ab") as f:
                f.write(ln)
            time.sleep(0.05)
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    try:
        res = cli("logs", str(p), "--follow", "2.5", "--poll", "0.1")
    finally:
        t.join()
    assert done.is_set() and res.code == 0, res.err
    shown = [ln for ln in res.out.splitlines() if ln.startswith("12-02 ")]
    assert shown == ["12-02 15:34:41  drafts 34  accepted 4/102  mean acceptance length 1.12  per position 0.118, "
                     "0.000, 0.000",
                     "12-02 15:34:42  drafts 184  accepted 163/552  mean acceptance length 1.89  per position 0.440, "
                     "0.272, 0.174"]
    assert "drafts        218" in res.out and "accept length 1.766" in res.out


def test_vllm_log_over_ssh(ssh_env, tmp_path, cli):
    """The same reads over a real OpenSSH server on loopback (SFTP byte ranges): ``workbench logs
    --host`` and ``summarize_box_window``."""
    from remote import connect
    from workbench.logs.vllm_log import summarize_box_window

    log = tmp_path / "vllm.log"
    log.write_bytes(REAL_LOG.read_bytes())
    res = cli("logs", str(log), "--host", ssh_env.alias, "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert (doc["engine"], doc["drafts"], doc["accepted"], doc["host"]) == ("vllm", 274, 176, ssh_env.alias)
    start = REAL_LOG.read_bytes().index(b"(APIServer pid=7302) INFO 12-02 15:34:41 [metrics.py")
    with connect(ssh_env.alias) as box:
        w = summarize_box_window(box, str(log), start, block=4096)
    assert (w.drafts, w.accepted, w.per_position_accepted) == (218, 167, [85, 50, 32])


def test_reader_offsets_stay_exact_after_a_line_longer_than_it_holds():
    data = REAL_LOG.read_bytes()
    long = b"x" * 200_000 + b"\n"                       # a 200 KB line (a dumped config, say) first
    reader = VllmLogReader()
    blob = long + data
    for i in range(0, len(blob), 50_000):
        reader.feed(blob[i:i + 50_000])
    reader.finish()
    assert len(reader.records) == 3
    for r in reader.records:
        assert blob[r.offset:].startswith(r.line.encode())


BAD_SPEC_LOG = FIXTURES / "logs" / "vllm" / "vllm-0.32.0-bad-spec-config.log"
ENGINE_DEAD_LOG = FIXTURES / "logs" / "vllm" / "vllm-0.32.0-engine-dead.log"


@pytest.mark.parametrize("chunk", [None, 997, 64])
def test_fatal_errors_of_real_vllm_logs_are_read_in_any_block_size(chunk):
    """The real logs of a server that died on its first request (draft aux ids [1, 3, 12]) and of
    one whose --speculative-config failed validation: every exception line, in file order, with
    its process; the shutdown after SIGTERM of the healthy server's log is no failure."""
    dead = _read(ENGINE_DEAD_LOG, chunk).summary()
    assert dead.failed and dead.engine_died and dead.tracebacks == 4
    assert [(e.short_type, e.process, e.count) for e in dead.errors] == [
        ("RuntimeError", "Worker", 2), ("RuntimeError", "EngineCore", 1), ("EngineDeadError", "APIServer", 1)]
    assert dead.errors[0].message == "shape '[-1, 480]' is invalid for input of size 3520"
    assert dead.errors[0].when == "12-02 17:03:00" and dead.errors[0].pid == 13425
    assert "the server failed (RuntimeError in Worker)" in dead.notes[0]
    bad = _read(BAD_SPEC_LOG, chunk).summary()
    assert bad.failed and not bad.engine_died and bad.tracebacks == 1 and len(bad.errors) == 1
    (e,) = bad.errors
    assert e.exc_type == "pydantic_core._pydantic_core.ValidationError" and e.process is None and e.when is None
    if chunk is None or chunk > 200:  # the two lines after it are read from the same block
        assert e.message == ("1 validation error for SpeculativeConfig | num_speculative_tokens | Input should be "
                             "greater than 0 [type=greater_than, input_value=0, input_type=int]")
    ok = _read(REAL_LOG, chunk).summary()
    assert not ok.failed and not ok.engine_died
    assert [(x.short_type, x.after_stop) for x in ok.errors] == [("EngineDeadError", True)]


def test_workbench_logs_reports_a_dead_vllm_engine_and_exits_1(cli):
    res = cli("logs", str(ENGINE_DEAD_LOG))
    assert res.code == 1, res.err
    assert "FAILED        the engine died" in res.out
    assert "RuntimeError: shape '[-1, 480]' is invalid for input of size 3520  (Worker pid=13425" in res.out
    assert "speculative decoding is off" not in res.out and "speculative   unknown" in res.out
    out = json.loads(cli("logs", str(ENGINE_DEAD_LOG), "--json").out)
    assert out["failed"] and out["engine_died"] and out["errors"][2]["exc_type"].endswith("EngineDeadError")
    bad = cli("logs", str(BAD_SPEC_LOG))
    assert bad.code == 1 and "ValidationError: 1 validation error for SpeculativeConfig" in bad.out
    assert "Input should be greater than 0" in bad.out and "speculative decoding is off" not in bad.out
    ok = cli("logs", str(REAL_LOG))
    assert ok.code == 0 and "FAILED" not in ok.out and "after a stop signal" in ok.out


COLORED_LOG = FIXTURES / "logs" / "vllm" / "vllm-0.32.0-colored.log"


@pytest.mark.parametrize("chunk", [None, 100])
def test_coloured_prefixes_are_counted_and_their_errors_read(chunk):
    """vLLM's ColoredFormatter puts ANSI codes inside the prefix: ``logs`` said "7 lines (0 with
    vLLM's logger prefix)" while it parsed the metrics line, and missed the error."""
    r = _read(COLORED_LOG, chunk)
    s = r.summary()
    assert (r.lines, r.vllm_lines) == (7, 7) and len(s.spec_lines) == 1 and s.drafted == 168
    (e,) = s.errors
    assert (e.exc_type, e.process, e.when) == ("RuntimeError", "APIServer", "12-02 17:11:08")
    assert e.message == "shape '[-1, 480]' is invalid for input of size 3520"
    data = COLORED_LOG.read_bytes()
    assert data[e.offset:].split(b"\n", 1)[0].endswith(b"RuntimeError: shape '[-1, 480]' is invalid for input of size 3520")
