"""The sandbox box on a real vLLM (vLLM's CPU build, ``make vllm``): the committed tokenizer files, the
launch command ``workbench.sandbox_box.sandbox_vllm_launch_command`` gives, and the target and draft
as vLLM loads them — greedy output token for token equal to the sandbox's own server's, the draft's
aux layer ids read from its ``eagle_config``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from testkit.ports import free_port
from testkit.sandbox_servers import PLAIN, TARGET, _group_members
from testkit.vllm_servers import require_vllm, server_env, vllm_python
from workbench.sandbox_box import VLLM_SANDBOX_ENV, sandbox_prompts_path, sandbox_vllm_launch_command

PROMPTS = [json.loads(line)["text"] for line in sandbox_prompts_path().read_text().splitlines()[:3]]


def test_committed_tokenizer_files_are_what_the_generator_writes(tmp_path):
    from workbench.sandbox.tokenizer import TOKENIZER_FILES, write_byte_tokenizer

    write_byte_tokenizer(tmp_path)
    for name in TOKENIZER_FILES:
        assert (TARGET / name).read_bytes() == (tmp_path / name).read_bytes(), name


def test_tokenizer_ids_are_the_sandbox_servers_byte_ids():
    transformers = pytest.importorskip("transformers")
    from workbench.sandbox.srt.entrypoints.http_server import decode, encode

    tok = transformers.AutoTokenizer.from_pretrained(str(TARGET))
    texts = [*PROMPTS, "tab\\tnewline\\n é 漢字 \\x00\\x7f\\x80"]
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == encode(text)
        assert tok.decode(ids) == decode(ids) == text
    assert len(tok) == 256 and tok.bos_token_id is None and tok.eos_token_id is None


def test_launch_command_names_the_sandbox_models_and_cpu_settings():
    cmd = sandbox_vllm_launch_command(port=8123, python="/opt/v/bin/python", draft="draft", num_speculative_tokens=2)
    words = cmd.split()
    assert words[:2] == [f"{k}={v}" for k, v in VLLM_SANDBOX_ENV]
    assert words[2:5] == ["/opt/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--port 8123" in cmd and f"--model {TARGET}" in cmd and "--enforce-eager" in cmd
    spec = json.loads(cmd.split("--speculative-config ", 1)[1].strip("'"))
    assert spec == {"method": "eagle3", "model": str(TARGET.parent / "draft"), "num_speculative_tokens": 2}


@pytest.mark.slow
def test_sandbox_launch_command_serves_on_vllm_greedy_equal_to_the_sandbox_server(tmp_path, sandbox_server):
    """One real vLLM server started from the command the workbench gives: it reads the draft's aux
    layer ids from eagle_config (vLLM 0.32.0 logs "Using auxiliary layers from speculative config"),
    and its greedy text equals the sandbox server's (no speculation there) for the same prompts —
    speculative decoding is lossless under greedy, so a wrong tokenizer or a mis-loaded target shows.
    The command as a user runs it: vLLM's CPU default executor (``mp``, a ``VLLM::Worker``), nothing
    of the test servers' ``UNIPROC_ENV`` added."""
    require_vllm()
    plain = sandbox_server(**PLAIN)
    port = free_port()
    cmd = sandbox_vllm_launch_command(port=port, python=str(vllm_python()))
    log_path = tmp_path / "vllm.log"
    env = server_env(executor="mp")
    for k, _ in VLLM_SANDBOX_ENV:
        env.pop(k)  # the command sets them itself
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["bash", "-c", cmd], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while True:
            assert proc.poll() is None, log_path.read_text()[-4000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=10, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass  # still loading
            assert time.monotonic() < deadline, log_path.read_text()[-4000:]
            time.sleep(0.5)
        log = log_path.read_text()
        assert "Using auxiliary layers from speculative config: (1, 3, 6)" in log
        for prompt in PROMPTS:
            ours = httpx.post(f"{plain.url}/generate", json={"text": prompt, "sampling_params": {
                "max_new_tokens": 48, "temperature": 0}}, timeout=120, trust_env=False).json()["text"]
            theirs = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={
                "model": str(TARGET), "prompt": prompt, "max_tokens": 48, "temperature": 0}, timeout=300,
                trust_env=False).json()["choices"][0]["text"]
            assert theirs == ours
    finally:
        if _group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while _group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert _group_members(proc.pid) == []


def _argv(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def test_shared_vllm_server_runs_the_draft_as_shipped_in_its_own_process_group(vllm_server):
    """The session's shared server (``vllm_server()``): the draft as shipped, its aux layer ids
    read as written, api_server → EngineCore in one process group of its own; the engine core runs
    the model itself (the uniprocess executor of ``UNIPROC_ENV``: no ``VLLM::Worker``, one
    ``import vllm`` less per start — were vLLM to ignore the variables, this says so)."""
    server = vllm_server()
    assert httpx.get(server.url + "/health", timeout=30, trust_env=False).status_code == 200
    assert "Using auxiliary layers from speculative config: (1, 3, 6)" in server.log()
    names = [_argv(pid) for pid in server.group()]
    assert any("vllm.entrypoints.openai.api_server" in n for n in names), names
    assert any(n.startswith("VLLM::EngineCore") for n in names), names
    assert not any(n.startswith("VLLM::Worker") for n in names), names
    assert os.getpgid(server.pid) == server.pid
