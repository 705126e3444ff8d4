"""Reading a log a server may still be writing (issue 26): ``read_when_settled`` waits while the
log grows, however slowly, returns once it has stopped growing with what was looked for in it,
and gives up only after the log has not grown for the stall time (a real file on the local box,
written by a thread). Pooling two acceptance measurements taken near a threshold."""

import threading
import time

import pytest

from remote import connect
from workbench.diagnosis.run import pooled_measurement
from workbench.logs import read_when_settled
from workbench.measure.generate import RequestRecord, summarize_responses


def _writer(path, lines, every):
    def run():
        for line in lines:
            time.sleep(every)
            with open(path, "a") as f:
                f.write(line + "\n")
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_slow_writer_is_read_to_its_end_past_the_stall_time(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("start\n")
    lines = [f"step {i}" for i in range(8)] + ["WANTED width=480", "after 1", "after 2"]
    writer = _writer(log, lines, 0.3)
    with connect("local") as box:
        t0 = time.monotonic()
        text, settled = read_when_settled(box, str(log), log.read_text, done=lambda t: "WANTED" in t,
                                          quiet_s=0.8, stall_s=1.0, poll_s=0.05)
        took = time.monotonic() - t0
    writer.join(5)
    assert settled is True
    assert took >= 11 * 0.3  # longer than the stall time: the log kept growing
    assert text.splitlines() == ["start", *lines]  # the lines after the wanted one too: the log had settled


def test_lines_that_never_come_are_given_up_after_the_stall_time(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("start\n")
    writer = _writer(log, ["one", "two"], 0.2)
    with connect("local") as box:
        t0 = time.monotonic()
        text, settled = read_when_settled(box, str(log), log.read_text, done=lambda t: "WANTED" in t,
                                          quiet_s=0.2, stall_s=1.0, poll_s=0.05)
        took = time.monotonic() - t0
    writer.join(5)
    assert settled is False and text == "start\none\ntwo\n"
    assert 0.4 + 1.0 <= took < 0.4 + 1.0 + 3.0


def _record(i, tokens, steps):
    return RequestRecord(prompt_index=i, completion_tokens=tokens, prompt_tokens=10, spec_verify_ct=steps,
                         spec_accept_length=tokens / steps, spec_accept_rate=None, spec_num_correct_drafts=None,
                         spec_num_proposed_drafts=None, histogram=None, e2e_latency=None, wall_s=0.01 * tokens)


def test_two_measurements_pool_to_tokens_over_verify_steps():
    a = summarize_responses([_record(0, 64, 40), _record(1, 64, 32)], warmup=1, max_new_tokens=64)
    b = summarize_responses([_record(0, 64, 36), _record(1, 60, 30)], warmup=1, max_new_tokens=64)
    pooled = pooled_measurement(a, b)
    assert pooled.verify_steps == 40 + 32 + 36 + 30 and pooled.total_tokens == 64 * 3 + 60
    assert pooled.accept_length == (64 * 3 + 60) / (40 + 32 + 36 + 30)
    assert len(pooled.records) == 4 and pooled.warmup == 1
    nothing = summarize_responses([], warmup=1)
    assert pooled_measurement(a, nothing) is a  # nothing to pool with


def test_counter_measurements_pool_accept_rate_by_verify_steps():
    """vLLM's counters (no per-request records): accept length and accept rate (accepted / drafted,
    the same tokens drafted per step) weighted by verify steps; a rate was kept None before."""
    import dataclasses

    base = summarize_responses([_record(0, 64, 40)], warmup=0, max_new_tokens=64)
    a = dataclasses.replace(base, source="metrics", records=[], accept_length=1.8, accept_rate=0.25, verify_steps=100)
    b = dataclasses.replace(base, source="metrics", records=[], accept_length=2.0, accept_rate=1 / 3, verify_steps=50)
    pooled = pooled_measurement(a, b)
    assert pooled.accept_length == pytest.approx((1.8 * 100 + 2.0 * 50) / 150)
    assert pooled.accept_rate == pytest.approx((0.25 * 100 + 50 / 3) / 150)


def test_lines_the_reading_ignores_do_not_hold_it_back(tmp_path):
    """A health checker polling the server every 0.1 s keeps its access log growing; once the
    reading (here: the probe lines) is complete and has not changed for the quiet time, it is
    settled, long before the polling stops."""
    log = tmp_path / "server.log"
    log.write_text("start\nPROBE rank=0 width=480\n")
    polls = [f'INFO:     127.0.0.1:5{i:04d} - "GET /health HTTP/1.1" 200 OK' for i in range(60)]
    writer = _writer(log, ["PROBE rank=1 width=480"] + polls, 0.1)

    def probes():
        return [line for line in log.read_text().splitlines() if line.startswith("PROBE")]

    with connect("local") as box:
        t0 = time.monotonic()
        reading, settled = read_when_settled(box, str(log), probes, done=lambda r: len(r) == 2,
                                             quiet_s=0.8, stall_s=3.0, poll_s=0.05)
        took = time.monotonic() - t0
    assert settled is True and reading == ["PROBE rank=0 width=480", "PROBE rank=1 width=480"]
    assert took < 3.0 and writer.is_alive()  # settled while the health checks still came in
    writer.join(10)
