"""The sweep's settings on a vLLM launch command (``workbench.measure.sweep.setting_launch``):
``num_speculative_tokens`` and the draft in ``--speculative-config``, the baseline without it, and
the SGLang-only settings refused with why."""

from __future__ import annotations

import pytest

from workbench.engine.launch import LaunchCommand
from workbench.errors import SweepError
from workbench.measure.sweep import SpecSetting, compare_settings, parse_grid, setting_launch

if not hasattr(LaunchCommand, "speculative_config"):       # the vLLM launch command (engine package)
    pytest.skip("this checkout's LaunchCommand does not read vLLM commands yet", allow_module_level=True)

VLLM = ("VLLM_HOST_IP=127.0.0.1 python -m vllm.entrypoints.openai.api_server --model /m/target --port 8000 "
        "--speculative-config '{\"method\": \"eagle3\", \"model\": \"/m/draft\", \"num_speculative_tokens\": 3}'")


def test_grid_on_vllm():
    cmd = LaunchCommand.parse(VLLM)
    assert cmd.engine == "vllm"
    got = {s.label: setting_launch(cmd, s) for s in parse_grid("steps:1,2,5 topk:1 draft_tokens:auto")}
    base = got.pop("no speculation")
    assert base.speculative_config is None and base.target_model == "/m/target" and base.port == 8000
    assert {label: (launch.num_speculative_tokens, launch.draft_model, launch.speculative_method)
            for label, launch in got.items()} == {
        "steps=1 topk=1 draft_tokens=2": (1, "/m/draft", "eagle3"),
        "steps=2 topk=1 draft_tokens=3": (2, "/m/draft", "eagle3"),
        "steps=5 topk=1 draft_tokens=6": (5, "/m/draft", "eagle3")}


def test_compare_drafts_on_vllm():
    cmd = LaunchCommand.parse(VLLM)
    drafts = [setting_launch(cmd, s).draft_model for s in compare_settings([("a", "/m/draft"), ("b", "/x/other")])]
    assert drafts == ["/m/draft", "/x/other"]


def test_settings_vllm_has_no_equivalent_of():
    cmd = LaunchCommand.parse(VLLM)
    with pytest.raises(SweepError, match="vLLM drafts a chain"):
        setting_launch(cmd, SpecSetting(steps=3, topk=4, draft_tokens=8))
    with pytest.raises(SweepError, match="draft_tokens 7 != steps \\+ 1"):
        setting_launch(cmd, SpecSetting(steps=3, topk=1, draft_tokens=7))
    assert setting_launch(cmd, SpecSetting(steps=None, topk=1, draft_tokens=5)).num_speculative_tokens == 4
    plain = LaunchCommand.parse("python -m vllm.entrypoints.openai.api_server --model /m/target")
    with pytest.raises(SweepError, match="no --speculative-config"):
        setting_launch(plain, SpecSetting(steps=2, topk=1, draft_tokens=3))


@pytest.mark.slow
def test_sweep_launches_and_measures_a_real_vllm_server(tmp_path, monkeypatch):
    """The measure_acceptance runbook's sweep on vLLM, for real: the sandbox's vLLM command (the box
    starts its own server, num_speculative_tokens 2 instead of 3), measured through /v1/completions
    and vLLM's counters, the server stopped and the box left as found. The box's environment has the
    test servers' ``UNIPROC_ENV`` (the model in the engine core, as on one GPU)."""
    from testkit.ports import free_port
    from testkit.vllm_servers import UNIPROC_ENV, require_vllm, vllm_python

    require_vllm()
    for k, v in UNIPROC_ENV.items():
        monkeypatch.setenv(k, v)  # the local box's environment, which its launches inherit
    from workbench.measure.sweep import SweepRun
    from workbench.sandbox_box import sandbox_vllm_launch_command

    port = free_port()
    cmd = sandbox_vllm_launch_command(port=port, python=str(vllm_python()))
    run = SweepRun.start(host="local", launch_command=cmd, port=port, grid="steps:2 topk:1 draft_tokens:auto",
                         include_baseline=False, prompts="default", num_prompts=3, max_new_tokens=32, warmup=1,
                         server_start_timeout=900, report_dir=str(tmp_path), progress=False)
    try:
        run.run()
    finally:
        result = run.finish()
    (row,) = result.rows
    assert row.ok, row.error
    assert '"num_speculative_tokens": 2' in row.launch_command
    assert row.requests == 3 and row.completion_tokens == 96 and row.verify_steps > 0
    assert len(row.per_position) == 2 and row.per_position[0] >= row.per_position[1]
    assert row.tau == pytest.approx(row.accept_length) and 1.0 < row.accept_length <= 3.0
    assert result.restore["clean"] and result.restore["problems"] == []
    assert httpx_refused(port)


def httpx_refused(port: int) -> bool:
    """Nothing listens on ``port`` any more (the sweep's server was stopped)."""
    import httpx

    try:
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5, trust_env=False)
    except httpx.TransportError:
        return True
    return False
