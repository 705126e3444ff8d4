"""workbench.session.startup_wait: server_start_timeout is a stall time-out naming the phase, a
start-up that keeps progressing is waited for past any multiple of it, and its progress is
reported (lines, a terminal bar, the runbook driver's relay).

The launches are the tiny real HTTP server of the remote tests (tests/remote/tiny_launch_server.py)
printing SGLang 0.5.23's own start-up lines one by one (``--log-lines``), on the real local box:
its log, its /proc CPU time, its HTTP answers are what the wait reads. The watchdog's relaunch
wait (plain Python on the box) is checked against the same server.
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

from remote import connect
from remote.errors import ServerStartStalled, ServerStartTimedOut
from workbench.logs.startup import StartupProgress, startup_progress
from workbench.session import watchdog_box
from workbench.session.startup_wait import (PROGRESS_MARK, LineReporter, ProgressRelay, TerminalBar,
                                            progress_line, wait_for_start)

TINY_SERVER = Path(__file__).resolve().parent.parent / "remote" / "tiny_launch_server.py"
STALL = 2.0     # seconds without progress that give a start up
SLACK = 6.0     # a 2-core machine shared with other test runs

# SGLang 0.5.23 lines, each from its format string (file:line in the wheel): a TP 1 load of
# 12 shards (srt/model_loader/weight_utils.py:1166 with BAR_FORMAT, srt/utils/common.py:1414)
HEAD = [
    "[2026-12-07 18:00:00] Init parallel begin.",                                   # srt/distributed/bootstrap.py:115
    "[2026-12-07 18:00:01] Init parallel ends. elapsed=0.80 s",                     # bootstrap.py:190
    "[2026-12-07 18:00:01] Load weight begin. avail mem=78.50 GB",                  # model_runner.py:1274
]
SHARDS = [f"Loading safetensors checkpoint shards: {100 * n // 12:3d}% Completed | {n}/12 "
          f"[00:{2 * n:02d}<00:{24 - 2 * n:02d},  2.00s/it]" for n in range(13)]
TAIL = [
    "[2026-12-07 18:00:25] Load weight end. elapsed=24.10 s, type=LlamaForCausalLM, avail mem=63.00 GB, "
    "mem usage=15.50 GB.",                                                           # model_runner.py:1373
    "[2026-12-07 18:00:26] Memory pool end. avail mem=8.12 GB",                     # kv_cache_configurator.py:499
    "[2026-12-07 18:00:26] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
    "avail mem=8.00 GB",                                                             # cuda_graph_setup.py:759
]


@pytest.fixture
def box(tmp_path):
    with connect("local", state_dir=tmp_path / "box-state", python=sys.executable) as b:
        yield b


@pytest.fixture
def launched(box):
    handles = []
    yield handles
    for h in handles:
        box.stop_server(h, grace=2)


def _tiny(box, launched, port, lines, tmp_path, *flags):
    path = tmp_path / "startup-lines.txt"
    path.write_text("\n".join(lines) + "\n")
    argv = [sys.executable, str(TINY_SERVER), "--port", str(port), "--log-lines", str(path), *flags]
    h = box.launch_server(argv, port=port)
    launched.append(h)
    return h


class Recorder:
    """A reporter that keeps every call: (label, phase, shards, elapsed_s, final)."""

    def __init__(self):
        self.calls = []

    def __call__(self, label, progress, elapsed_s, final):
        self.calls.append((label, progress.phase, progress.shards, elapsed_s, final))

    def phases(self):
        out = []
        for _, phase, _, _, _ in self.calls:
            if not out or out[-1] != phase:
                out.append(phase)
        return out


@pytest.mark.slow
def test_a_load_longer_than_four_stall_time_outs_that_progresses_is_waited_for(box, launched, free_port, tmp_path):
    lines = HEAD + SHARDS + TAIL
    start = 4.5 * STALL       # issue 26's cap was 4 x the time-out in all: gone
    every = start / (len(lines) + 2)
    h = _tiny(box, launched, free_port, lines, tmp_path, "--starting", str(start), "--log-every", f"{every:.3f}")
    rec = Recorder()
    waited, progress = wait_for_start(box, h, stall_timeout=STALL, label="fix", reporter=rec, poll_interval=0.1)
    assert start - 0.5 <= waited < start + SLACK
    assert rec.phases() == ["launch", "nccl-init", "load", "kv-cache", "capture", "ready"]
    seen_shards = [s for _, _, s, _, _ in rec.calls if s is not None]
    assert seen_shards[0][0] < 12 and seen_shards[-1] == (12, 12)
    assert rec.calls[-1][0] == "fix" and rec.calls[-1][4] is True and rec.calls[-1][1] == "ready"
    assert [p["name"] for p in progress.phases] == ["nccl-init", "load", "kv-cache", "capture", "ready"]


@pytest.mark.slow
def test_a_load_that_hangs_at_a_shard_is_a_stall_naming_the_phase_and_its_last_line(box, launched, free_port,
                                                                                     tmp_path):
    lines = HEAD + SHARDS[:6]   # 5/12 shards, then nothing (sglang#9590: a load hung at a shard)
    h = _tiny(box, launched, free_port, lines, tmp_path, "--starting", "600", "--log-every", "0.05")
    box.wait_healthy(h, timeout=30, path="/health")     # listening
    deadline = time.monotonic() + 10
    while "5/12" not in box.read_text(h.log_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    rec = Recorder()
    t0 = time.monotonic()
    with pytest.raises(ServerStartStalled) as info:
        wait_for_start(box, h, stall_timeout=STALL, label="probe", reporter=rec, poll_interval=0.1)
    took = time.monotonic() - t0
    assert STALL <= took < STALL + SLACK
    err = info.value
    assert isinstance(err, ServerStartTimedOut) and err.timeout == STALL
    assert err.phase == "load"
    assert err.last_line == SHARDS[5]
    assert "in start-up phase 'load'" in str(err) and SHARDS[5] in str(err)
    final = rec.calls[-1]
    assert final[4] is True and final[1] == "load" and final[2] == (5, 12)


@pytest.mark.slow
def test_stall_phase_without_a_tracker_reads_the_tail(box, launched, free_port, tmp_path):
    """``remote`` alone (no ``on_log``): ``stall_phase`` gets the tail; the last line skips the
    readiness polls' own access lines."""
    h = _tiny(box, launched, free_port, HEAD, tmp_path, "--starting", "600", "--log-every", "0.05")
    box.wait_healthy(h, timeout=30, path="/health")
    got = []

    def phase_of(tail):
        got.append(list(tail))
        return startup_progress(tail).phase

    with pytest.raises(ServerStartStalled) as info:
        box.wait_healthy(h, timeout=60, stall_timeout=STALL, poll_interval=0.1, stall_phase=phase_of)
    assert info.value.phase == "load" and info.value.last_line == HEAD[-1]
    assert any('"GET /health_generate' in line for line in got[0])   # the polls are in the tail ...
    assert "GET /health" not in info.value.last_line                 # ... never the last line


@pytest.mark.slow
def test_the_watchdogs_relaunch_wait_is_a_stall_time_out_too(box, launched, free_port, tmp_path):
    lines = HEAD + SHARDS
    start = 3 * STALL
    h = _tiny(box, launched, free_port, lines, tmp_path, "--starting", str(start), "--log-every",
              f"{start / (len(lines) + 2):.3f}")
    waited = watchdog_box.wait_healthy(h.pid, free_port, STALL, log_path=h.log_path)
    assert start - 0.5 <= waited < start + SLACK


@pytest.mark.slow
def test_the_watchdogs_relaunch_wait_names_the_last_line_of_a_stall(box, launched, free_port, tmp_path):
    h = _tiny(box, launched, free_port, HEAD + SHARDS[:3], tmp_path, "--starting", "600", "--log-every", "0.05")
    box.wait_healthy(h, timeout=30, path="/health")
    deadline = time.monotonic() + 10
    while "2/12" not in box.read_text(h.log_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="it stalled: no progress for") as info:
        watchdog_box.wait_healthy(h.pid, free_port, STALL, log_path=h.log_path)
    assert STALL <= time.monotonic() - t0 < STALL + SLACK
    assert str(info.value).endswith(f"last log line: {SHARDS[2]})")


# -- reporters ------------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _progress(lines):
    return startup_progress(lines)


def test_line_reporter_prints_at_most_every_few_seconds_and_at_phase_changes():
    out, clock = io.StringIO(), Clock()
    rep = LineReporter(out, interval=5.0, min_gap=1.0, clock=clock)
    load = _progress(HEAD + SHARDS[:3])
    for i in range(40):          # 40 log chunks in 4 s of one phase: one line
        clock.t = i * 0.1
        rep("fix", load, clock.t, False)
    assert rep.lines == 1
    clock.t = 4.2
    rep("fix", _progress(HEAD + SHARDS + TAIL[:2]), 4.2, False)   # a new phase, 4.2 s after: a line
    clock.t = 4.5
    rep("fix", _progress(HEAD + SHARDS + TAIL), 4.5, False)       # another, 0.3 s after: not yet
    clock.t = 9.3
    rep("fix", _progress(HEAD + SHARDS + TAIL), 9.3, False)       # 5 s since the last line
    rep("fix", _progress(HEAD + SHARDS + TAIL), 9.4, True)         # the final one, always
    text = out.getvalue().splitlines()
    assert rep.lines == 4 and len(text) == 4
    assert text[0] == f"{PROGRESS_MARK}fix: loading weights: shard 2/12, 0 s elapsed; last: {SHARDS[2]}"
    assert text[1].startswith(f"{PROGRESS_MARK}fix: allocating the KV cache: 4 s elapsed")
    assert text[2].startswith(f"{PROGRESS_MARK}fix: capturing CUDA graphs: 9 s elapsed")
    assert text[3] == f"{PROGRESS_MARK}fix: not ready: capturing CUDA graphs after 9 s; last: {TAIL[-1][22:]}"


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_terminal_bar_rewrites_one_line_and_keeps_the_final():
    out, clock = Tty(), Clock()
    bar = TerminalBar(out, clock=clock)
    bar("fix", _progress(HEAD + SHARDS[:4]), 1.0, False)
    clock.t = 0.1
    bar("fix", _progress(HEAD + SHARDS[:5]), 1.1, False)     # within 1/4 s: not drawn
    done = StartupProgress(phase="ready")
    bar("fix", done, 30.0, True)
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 2 and text.endswith("fix: ready after 30 s\n")
    assert "[#####...............] loading weights: shard 3/12" in text


def test_progress_relay_passes_only_progress_lines():
    out = io.StringIO()
    relay = ProgressRelay(out)
    relay.write("some warning\n" + progress_line("fix", _progress(HEAD), 3.0)[:20])
    relay.write(progress_line("fix", _progress(HEAD), 3.0)[20:] + "\nDeprecationWarning: x\n")
    relay.write(progress_line("fix", StartupProgress(phase="ready"), 12.0, final=True) + "\n")
    assert out.getvalue().splitlines() == [progress_line("fix", _progress(HEAD), 3.0),
                                           f"{PROGRESS_MARK}fix: ready after 12 s"]
    tty = Tty()
    relay = ProgressRelay(tty)
    relay.write(progress_line("fix", _progress(HEAD), 3.0) + "\n")
    relay.close_line()
    assert tty.getvalue() == "\r\x1b[K" + progress_line("fix", _progress(HEAD), 3.0) + "\n"


def test_the_report_keeps_one_line_per_launch_with_its_final_state():
    """A runbook's cell output: the start-up lines of two launches and a warning in one stderr
    stream; the report (workbench.report.html.collapse_progress) shows each launch's final line in
    the small grey progress style and keeps the warning as stderr."""
    import nbformat

    from workbench.report.html import START_UP_MARK, collapse_progress

    assert START_UP_MARK == PROGRESS_MARK
    load = _progress(HEAD + SHARDS[:4])
    text = "\n".join([progress_line("probe", load, 1.0), "UserWarning: something real",
                      progress_line("probe", _progress(HEAD + SHARDS + TAIL), 6.0),
                      progress_line("probe", StartupProgress(phase="ready"), 8.0, final=True),
                      progress_line("fix", load, 1.0),
                      progress_line("fix", StartupProgress(phase="ready"), 9.0, final=True)]) + "\n"
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("run.diagnose()")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=text)]
    nb.cells.append(cell)
    assert collapse_progress(nb) == 2
    shown = [(o["output_type"], o.get("text") or o["data"]["text/plain"]) for o in nb.cells[0].outputs]
    assert shown == [("display_data", f"{PROGRESS_MARK}probe: ready after 8 s"),
                     ("stream", "UserWarning: something real\n"),
                     ("display_data", f"{PROGRESS_MARK}fix: ready after 9 s")]
