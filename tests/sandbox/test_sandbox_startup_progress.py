"""A real sandbox server's start-up, followed as a launch is (workbench.session.startup_wait): its
progress reporter sees the phases in the order its log gives them, and a start-up that hangs
(``SANDBOX_FAULT_STALL_FILE``: the warm-up's first forward blocks, no line, no CPU) is a
``ServerStartStalled`` within the stall time-out, naming the phase and the last log line.
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


def _launch(box, tmp_path, port, env=None):
    return box.launch_server(launch_argv(*FLAGS, port=port), port=port, cwd=str(checkout_dir()),
                             log_path=str(tmp_path / "launch.log"), env={"PYTHONUNBUFFERED": "1", **(env or {})})


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
