"""A real sandbox server's start-up, followed as a launch is (workbench.session.startup_wait): its
progress reporter sees the phases in the order its log gives them, and a start-up that hangs
(``SANDBOX_FAULT_STALL_FILE``: the warm-up's first forward blocks, no line, no CPU;
``--sandbox-fault hang:load``) is a ``ServerStartStalled`` within the stall time-out, naming the
phase and the last log line. A TP 2 start-up spread over more than the stall time-out
(``--sandbox-load-seconds``) that progresses is waited for. Sandbox GPUs (each test its own
``SANDBOX_GPUS_DIR``): the tests say so in their names.
"""

from __future__ import annotations

import time

import pytest

from remote import connect
from remote.errors import ServerStartStalled
from testkit.engine_copy import checkout_dir
from testkit.ports import free_port
from testkit.sandbox_servers import launch_argv, models_missing_reason, sandbox_flags
from workbench.logs.startup import startup_progress
from workbench.session.startup_wait import wait_for_start

FLAGS = sandbox_flags("EAGLE3", decode_log_interval=1)
STALL = 3.0
SLACK = 8.0

pytestmark = pytest.mark.skipif(bool(models_missing_reason()), reason=models_missing_reason() or "")


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, label, progress, elapsed_s, final):
        self.calls.append((progress.phase, final, progress.last_line))


def _launch(box, tmp_path, port, env=None, extra=()):
    return box.launch_server(launch_argv(*FLAGS, *extra, port=port), port=port, cwd=str(checkout_dir()),
                             log_path=str(tmp_path / "launch.log"),
                             env={"PYTHONUNBUFFERED": "1", "SANDBOX_GPUS_DIR": str(tmp_path / "gpus"), **(env or {})})


@pytest.mark.slow
def test_sandbox_start_up_progress_sees_its_phases_in_order(tmp_path):
    port = free_port()
    with connect("local") as box:
        handle = _launch(box, tmp_path, port)
        try:
            rec = Recorder()
            waited, progress = wait_for_start(box, handle, stall_timeout=30, label="as-found", reporter=rec,
                                              poll_interval=0.1)
        finally:
            box.stop_server(handle, grace=10)
    log = (tmp_path / "launch.log").read_text()
    # what the log says, read at once, is what the incremental watch read as it grew
    whole = startup_progress(log.split("The server is fired up")[0].splitlines() +
                             ["[x] The server is fired up and ready to roll!"])
    names = [p["name"] for p in progress.phases]
    assert names == [p["name"] for p in whole.phases]
    # the target's weights, then the draft's (the second "Load weight begin." of the process), then ready
    assert names.index("load") < names.index("load-draft") < names.index("ready") == len(names) - 1
    assert progress.phase == "ready" and rec.calls[-1][:2] == ("ready", True)
    seen = [c[0] for c in rec.calls]
    assert seen.index("load") < seen.index("load-draft") < seen.index("ready")
    assert 0 < waited < 30


@pytest.mark.slow
def test_sandbox_start_up_that_hangs_is_a_stall_naming_its_phase(tmp_path):
    stall = tmp_path / "stall"
    stall.touch()
    port = free_port()
    with connect("local") as box:
        handle = _launch(box, tmp_path, port, env={"SANDBOX_FAULT_STALL_FILE": str(stall)})
        try:
            rec = Recorder()
            t0 = time.monotonic()
            with pytest.raises(ServerStartStalled) as info:
                wait_for_start(box, handle, stall_timeout=STALL, label="fix", reporter=rec, poll_interval=0.1)
            took = time.monotonic() - t0
            log = (tmp_path / "launch.log").read_text().splitlines()   # before the stall is lifted
        finally:
            stall.unlink(missing_ok=True)
            box.stop_server(handle, grace=10)
    err = info.value
    # the phase named is the one the whole log shows (the sandbox loads the draft last), and it is no end
    assert err.phase == startup_progress(log).phase and err.phase not in ("ready", "failed", "launch")
    assert err.last_line is not None and "SANDBOX_FAULT_STALL_FILE" in err.last_line
    assert f"in start-up phase {err.phase!r}" in str(err)
    assert STALL <= took < STALL + SLACK + 30   # the start itself (torch import, load) is progress
    assert err.stalled_s >= STALL
    assert rec.calls[-1][1] is True and rec.calls[-1][0] == err.phase


LOAD_S = 7.0     # over twice the stall time-out


@pytest.mark.slow
def test_sandbox_gpus_tp2_load_longer_than_the_stall_time_out_is_waited_for_with_every_phase(tmp_path):
    port = free_port()
    with connect("local") as box:
        handle = _launch(box, tmp_path, port, extra=("--tp-size", "2", "--sandbox-load-seconds", str(LOAD_S)))
        try:
            rec = Recorder()
            waited, progress = wait_for_start(box, handle, stall_timeout=STALL, label="fix", reporter=rec,
                                              poll_interval=0.1)
        finally:
            box.stop_server(handle, grace=10)
    assert LOAD_S <= waited < LOAD_S + 60
    names = [p["name"] for p in progress.phases]
    # SGLang's order as the sandbox logs it (workbench/sandbox/srt/startup.py), each rank its own lines
    assert names[:6] == ["nccl-init", "load", "kv-cache", "capture", "load-draft", "capture-draft"]
    assert names[-1] == "ready"
    seen = []
    for phase, _final, _last in rec.calls:
        if not seen or seen[-1] != phase:
            seen.append(phase)
    assert seen[:7] == ["launch", "nccl-init", "load", "kv-cache", "capture", "load-draft", "capture-draft"]
    assert progress.ranks_seen == ["TP0", "TP1"] or sorted(progress.ranks_seen) == ["TP0", "TP1"]
    assert progress.shards is not None and progress.shards[0] == progress.shards[1]


@pytest.mark.slow
def test_sandbox_gpus_hang_at_load_is_a_stall_naming_load(tmp_path):
    port = free_port()
    with connect("local") as box:
        handle = _launch(box, tmp_path, port, extra=("--tp-size", "2", "--sandbox-load-seconds", "1",
                                                     "--sandbox-fault", "hang:load"))
        try:
            t0 = time.monotonic()
            with pytest.raises(ServerStartStalled) as info:
                wait_for_start(box, handle, stall_timeout=STALL, label="fix", reporter=Recorder(), poll_interval=0.1)
            took = time.monotonic() - t0
        finally:
            box.stop_server(handle, grace=10)
    assert info.value.phase == "load", str(info.value)
    assert "Load weight begin." in (info.value.last_line or "") or "checkpoint shards" in (info.value.last_line or "")
    assert STALL <= took < STALL + SLACK + 30
