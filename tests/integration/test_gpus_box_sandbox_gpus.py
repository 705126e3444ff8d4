"""The workbench on a box shaped like a real one (issue 28): a TP 2 sandbox server whose ranks hold
sandbox GPU memory (only the GPUs are the sandbox's: no GPU here, names say so), stopped as a whole
tree and then waited for until its GPUs are back at their baseline — over the real loopback SSH box;
and the diagnosis refusing a launch whose GPUs another user holds (a refused start the verdict names,
never a crash, the holder never killed), then reclaiming this user's orphaned ranks when asked."""

from __future__ import annotations

import os
import shlex
import time

import pytest

from remote import connect
from testkit.gpu_holders import hold, kill, sandbox_gpus
from workbench.diagnosis import DiagnosisRun
from workbench.sandbox_box import sandbox_launch_command
from workbench.session.gpu_holders import title_of
from workbench.session.gpus import read_gpu_snapshot
from workbench.session.gpu_release import stop_and_release

pytestmark = pytest.mark.slow

RANK_MIB = int(0.88 * 81559)  # --mem-fraction-static 0.88 (the sandbox's default) x an H100's memory.total


@pytest.fixture
def gpu_state(tmp_path_factory, monkeypatch):
    """A state dir of this test's own with 2 sandbox GPUs (release delay 0.3 s), named to the
    workbench (``EAGLE_WORKBENCH_STATE_DIR``) and to the sandbox servers it launches (the same dir:
    ``SANDBOX_GPUS_DIR`` unset)."""
    state = tmp_path_factory.mktemp("gpus-box", numbered=True) / "state"
    state.mkdir()
    sandbox_gpus(state, 2, release_delay_s=0.3)
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(state))
    monkeypatch.delenv("SANDBOX_GPUS_DIR", raising=False)
    return state


def _tp2(port: int, algorithm: str = "EAGLE") -> str:
    return sandbox_launch_command(algorithm=algorithm, port=port) + " --tp-size 2"


def test_the_stop_of_a_tp2_server_waits_for_its_gpus_over_ssh_sandbox_gpus(gpu_state, ssh_env, free_port):
    with connect(ssh_env.alias, state_dir=gpu_state) as box:
        handle = box.launch_server(shlex.split(_tp2(free_port)), port=free_port,
                                   env={"SANDBOX_GPUS_DIR": str(gpu_state / "sandbox-gpus")})
        try:
            box.wait_healthy(handle, timeout=120)
            tree = box.process_tree(handle.pid)
            titles = sorted(title_of(p.argv) for p in tree if p.pid != handle.pid)  # setproctitle pads with spaces
            assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
            assert [g.used_mib for g in read_gpu_snapshot(box).gpus] == [RANK_MIB, RANK_MIB]
            t0 = time.monotonic()
            stopped, release = stop_and_release(box, handle)
            stop_to_free = time.monotonic() - t0
        finally:
            box.stop_server(handle, grace=2)
        assert release.error is None and release.basis == "others"
        assert set(stopped.stopped_pids) >= {p.pid for p in tree}
        assert [(g["index"], g["before_stop_mib"], g["baseline_mib"], g["used_mib"]) for g in release.gpus] == [
            (0, RANK_MIB, 0, 0), (1, RANK_MIB, 0, 0)]
        assert release.waited_s >= 0.3  # the memory went only once the ranks were gone (+ the release delay)
        assert [g.used_mib for g in read_gpu_snapshot(box).gpus] == [0, 0]
        print(f"stop-to-GPU-free: {stop_to_free:.2f} s (GPU wait {release.waited_s:.2f} s)")


def _diagnose(command: str, port: int, tmp_path, *, reclaim: bool = False):
    run = DiagnosisRun.start(host="local", launch_command=command, port=port, report_dir=tmp_path / "reports",
                             num_prompts=2, max_new_tokens=16, apply_fix=False, server_start_timeout=120)
    run.reclaim_gpus = reclaim
    run.progress = False
    return run.run_all(), run


def test_another_users_gpus_refuse_the_launch_and_the_verdict_names_them_sandbox_gpus(gpu_state, nobody, free_port,
                                                                                       tmp_path):
    theirs = hold(gpu_state / "sandbox-gpus", [(1, 20000)], user="nobody")
    try:
        verdict, run = _diagnose(_tp2(free_port), free_port, tmp_path, reclaim=True)
        [failure] = verdict["start_failures"]
        assert failure["label"] == "as-found" and failure["log_tail"] == []
        assert [f["rule"] for f in failure["refused"]] == ["gpus-held"]
        assert f"pid {theirs} " in failure["refused"][0]["message"] and "user nobody" in failure["refused"][0]["message"]
        assert "GPU1 20000 MiB" in failure["refused"][0]["message"]
        assert "another user's processes are never killed" in failure["error"]
        assert verdict["restarts"] == 0 and os.path.exists(f"/proc/{theirs}")  # never killed, even with reclaim_gpus
        assert [g.used_mib for g in read_gpu_snapshot(connect("local")).gpus] == [0, 20000]
    finally:
        kill(theirs)


def test_orphaned_ranks_are_reclaimed_when_asked_sandbox_gpus(gpu_state, free_port, tmp_path):
    gpus = gpu_state / "sandbox-gpus"
    orphans = [hold(gpus, [(r, RANK_MIB)], title=f"sglang::scheduler_TP{r}", orphan=True) for r in (0, 1)]
    try:
        verdict, run = _diagnose(_tp2(free_port), free_port, tmp_path)
        [failure] = verdict["start_failures"]
        assert sorted(int(f["evidence"]["pid"]["value"]) for f in failure["refused"]) == orphans
        assert "reclaim_gpus=True cleans them up" in failure["error"]
        assert all(os.path.exists(f"/proc/{p}") for p in orphans)
        verdict, run = _diagnose(_tp2(free_port), free_port, tmp_path, reclaim=True)
        assert verdict["start_failures"] == []
        assert verdict["acceptance"]["before"]["accept_length"] is not None
        [reclaim] = [e for e in run.gpu_events if e["event"] == "reclaim"]
        assert sorted(h["pid"] for h in reclaim["reclaimed"]) == orphans
        stops = [e for e in run.gpu_events if e["event"] == "stop"]
        assert stops and all(e["error"] is None for e in stops)
        assert [g.used_mib for g in read_gpu_snapshot(connect("local")).gpus] == [0, 0]
    finally:
        for pid in orphans:
            kill(pid)
