"""The sandbox server over real HTTP: endpoints, meta_info, SGLang log format, flag handling.

``server`` is this module's own (its start-up is checked: /health 503 until ready, /server_info
after SGLang's start-up warm-up only, the start-up log lines); the no-speculation test reads the
session's shared server without speculative decoding."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest

from sandbox_helpers import DRAFT, SPEC_FLAGS, TARGET, launch_argv
from testkit.ports import free_port
from testkit.sandbox_servers import PLAIN
from testkit.engine_copy import checkout_dir

pytestmark = pytest.mark.usefixtures("models_present")

PREFIX = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] "
DECODE_RE = re.compile(
    "^" + PREFIX + r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d{2}, "
    r"accept len: \d+\.\d{2}, accept rate: \d+\.\d{2}, cpu graph: (True|False), "
    r"gen throughput \(token/s\): \d+\.\d{2}, #queue-req: \d+$"
)
DECODE_NOSPEC_RE = re.compile(
    "^" + PREFIX + r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d{2}, "
    r"cpu graph: (True|False), gen throughput \(token/s\): \d+\.\d{2}, #queue-req: \d+$"
)
PREFILL_RE = re.compile(
    "^" + PREFIX + r"Prefill batch, #new-seq: \d+, #new-token: \d+, #cached-token: \d+, token usage: \d+\.\d{2}, "
    r"#running-req: \d+, #queue-req: \d+, #pending-token: \d+, cpu graph: (True|False), "
    r"input throughput \(token/s\): \d+\.\d{2}$"
)
IGNORED = ["--max-running-requests", "8", "--trust-remote-code", "--attention-backend", "triton", "--enable-cache-report",
           "--chunked-prefill-size=4096"]
INTERVAL = 5


@pytest.fixture(scope="module")
def server(tmp_path_factory, own_sandbox_server):
    tmp = tmp_path_factory.mktemp("srv")
    with own_sandbox_server(tmp, "--speculative-algorithm", "eagle3", "--speculative-draft-model", str(DRAFT), *SPEC_FLAGS,
                        "--decode-log-interval", str(INTERVAL), *IGNORED) as srv:
        yield srv


def generate(server, **body):
    r = httpx.post(server.url + "/generate", json=body, timeout=120)
    r.raise_for_status()
    return r.json()


def test_health_was_503_until_ready(server):
    assert server.statuses[-1] == 200
    assert set(server.statuses[:-1]) <= {503}
    assert httpx.get(server.url + "/health_generate", timeout=60).status_code == 200


def test_server_info_after_the_warmup_only(server):
    # must run before any /generate of the tests: only SGLang's start-up warm-up (8 tokens, so at most 7 verify
    # steps: one log tick at most with --decode-log-interval 5) has run; avg_spec_accept_length is there iff it ticked
    info = httpx.get(server.url + "/server_info").json()
    state = info["internal_states"][0]
    ticks = [ln for ln in server.log().splitlines() if DECODE_RE.match(ln)]
    assert len(ticks) <= 1
    if not ticks:
        assert "avg_spec_accept_length" not in state
    else:
        assert f"accept len: {state['avg_spec_accept_length']:.2f}," in ticks[0]


def test_generate_meta_info(server):
    out = generate(server, text="def main():\n    ", sampling_params={"max_new_tokens": 40, "temperature": 0})
    m = out["meta_info"]
    assert out["text"] == bytes(out["output_ids"]).decode("utf-8", "replace")
    assert m["finish_reason"] == {"type": "length", "length": 40}
    assert m["prompt_tokens"] == len("def main():\n    ".encode())
    assert m["completion_tokens"] == len(out["output_ids"]) == 40
    assert m["cached_tokens"] == 0 and m["e2e_latency"] > 0 and m["id"]
    assert m["spec_accept_length"] == pytest.approx(m["completion_tokens"] / m["spec_verify_ct"])
    assert sum(m["spec_correct_drafts_histogram"]) == m["spec_verify_ct"]
    assert len(m["spec_correct_drafts_histogram"]) == 4
    assert m["spec_num_correct_drafts"] == sum(k * c for k, c in enumerate(m["spec_correct_drafts_histogram"]))
    assert m["spec_num_proposed_drafts"] == m["spec_verify_ct"] * 3
    assert m["spec_accept_rate"] == pytest.approx(m["spec_num_correct_drafts"] / m["spec_num_proposed_drafts"])


def test_generate_batch_input_ids_and_stop(server):
    outs = generate(server, input_ids=[list(b"import os\n"), list(b"class A:\n")],
                    sampling_params={"max_new_tokens": 8, "temperature": 0})
    assert isinstance(outs, list) and len(outs) == 2
    assert all(o["meta_info"]["completion_tokens"] == 8 for o in outs)
    full = generate(server, text="import os\n", sampling_params={"max_new_tokens": 30, "temperature": 0})["text"]
    stop = full[5:7]
    out = generate(server, text="import os\n", sampling_params={"max_new_tokens": 30, "temperature": 0, "stop": stop})
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert out["text"].endswith(stop)
    bad = httpx.post(server.url + "/generate", json={"sampling_params": {}})
    assert bad.status_code == 400


def test_server_info_fields(server):
    generate(server, text="x = 1\n", sampling_params={"max_new_tokens": 64, "temperature": 0})
    info = httpx.get(server.url + "/server_info").json()
    assert info["speculative_algorithm"] == "EAGLE3"
    assert info["speculative_num_steps"] == 3 and info["speculative_eagle_topk"] == 1
    assert info["speculative_num_draft_tokens"] == 4
    assert info["speculative_draft_model_path"] == str(DRAFT)
    assert info["model_path"] == str(TARGET) and info["decode_log_interval"] == INTERVAL
    assert "workbench.sandbox.launch_server" in info["launch_command"] and "--max-running-requests 8" in info["launch_command"]
    assert info["tp_size"] == 1 and info["mem_fraction_static"] == 0.88 and info["base_gpu_id"] == 0
    assert info["version"].startswith("0.5.23")
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1.0
    assert httpx.get(server.url + "/get_server_info").json()["model_path"] == str(TARGET)


def test_model_info(server):
    info = httpx.get(server.url + "/model_info").json()
    assert info["model_path"] == str(TARGET) and info["tokenizer_path"] == str(TARGET)
    assert info["architectures"] == ["LlamaForCausalLM"] and info["model_type"] == "llama"
    assert httpx.get(server.url + "/get_model_info").json() == info


def test_log_format_matches_sglang(server):
    generate(server, text="for i in range(10):\n", sampling_params={"max_new_tokens": 60, "temperature": 0})
    for deprecated in ("/get_server_info", "/get_model_info"):  # their warnings, whatever ran before
        httpx.get(server.url + deprecated).raise_for_status()
    time.sleep(0.2)
    # tqdm writes the shard bar ("\rLoading safetensors checkpoint shards: ...") without the
    # logger's prefix, as in SGLang's logs
    lines = [l for l in server.log().splitlines() if l and not l.startswith("Loading safetensors checkpoint shards: ")]
    assert lines and all(re.match(PREFIX, line) for line in lines), [l for l in lines if not re.match(PREFIX, l)]
    assert any(DECODE_RE.match(l) for l in lines)
    assert any(PREFILL_RE.match(l) for l in lines)
    assert not any(" TP0" in l or "INFO" in l for l in lines)
    assert any("server_args=ServerArgs(" in l for l in lines)
    assert any(l.endswith("Load weight begin. avail mem=79.65 GB") for l in lines)  # 81559 MiB free (own sandbox GPUs)
    assert any(l.endswith("The server is fired up and ready to roll!") for l in lines)
    assert any("Endpoint '/get_server_info' is deprecated" in l for l in lines)
    assert any("Endpoint '/get_model_info' is deprecated" in l for l in lines)
    for flag in ["--max-running-requests 8", "--trust-remote-code", "--attention-backend triton", "--enable-cache-report",
                 "--chunked-prefill-size=4096"]:
        assert any(l.endswith(f"Ignoring SGLang flag not implemented by the sandbox: {flag}") for l in lines), flag


def test_decode_line_every_interval_and_accept_len(server):
    before = server.log().count("Decode batch")
    out = generate(server, text="if x:\n    ", sampling_params={"max_new_tokens": 100, "temperature": 0})
    time.sleep(0.2)
    assert server.log().count("Decode batch") - before >= out["meta_info"]["spec_verify_ct"] // INTERVAL - 1


def test_no_spec_server_log_and_meta(sandbox_server):
    srv = sandbox_server(**PLAIN)  # --decode-log-interval 4
    out = generate(srv, text="import sys\n", sampling_params={"max_new_tokens": 12, "temperature": 0.7})
    assert "spec_verify_ct" not in out["meta_info"]
    info = httpx.get(srv.url + "/server_info").json()
    assert info["speculative_algorithm"] is None
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    time.sleep(0.2)
    lines = srv.log().splitlines()
    assert any(DECODE_NOSPEC_RE.match(l) for l in lines)
    assert not any("accept len" in l for l in lines)


def test_log_ms_env_adds_milliseconds():
    code = (
        "import logging\n"
        "from workbench.sandbox.srt.server_args import ServerArgs\n"
        "from workbench.sandbox.srt.utils.common import configure_logger\n"
        "configure_logger(ServerArgs(model_path=''))\n"
        "logging.getLogger('x').info('hello')\n"
    )
    import os

    env = dict(os.environ, SGLANG_LOG_MS="1")
    p = subprocess.run([sys.executable, "-c", code], cwd=checkout_dir(), env=env, capture_output=True, text=True, timeout=60)
    assert re.match(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\] hello$", p.stderr.strip()), p.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--speculative-algorithm", "EAGLE4", "--speculative-draft-model-path", str(DRAFT)], "Unknown speculative algorithm name: EAGLE4"),
        (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(DRAFT), "--speculative-num-steps", "abc"], "--speculative-num-steps: must be a non-negative integer, got 'abc'"),
        (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(DRAFT), "--speculative-num-steps", "3", "--speculative-eagle-topk", "4"], "chain drafting only"),
        (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(DRAFT)], "chain drafting only"),  # auto (5, 4, 8)
        (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(DRAFT), "--speculative-eagle-topk", "1"], "must be unset when --speculative-num-steps is unset"),
        (["--speculative-algorithm", "NGRAM"], "not implemented by the sandbox"),
        (["--speculative-algorithm", "EAGLE3"], "--speculative-draft-model-path is required"),
        (["--port", "99999"], "--port: must be a TCP port"),
        (["--tp", "abc"], "--tp-size/--tensor-parallel-size/--tp: must be a positive integer, got 'abc'"),
        (["--sandbox-load-seconds", "inf"], "--sandbox-load-seconds: must be a number of seconds from 0 to 86400, got inf"),
    ],
)
@pytest.mark.slow  # starts the server module (which refuses the flags and exits)
def test_bad_flag_values_exit_with_clear_error(flags, message):
    p = subprocess.run(launch_argv(*flags, port=free_port()), cwd=checkout_dir(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert message in p.stderr


def test_topk1_forces_num_draft_tokens(tmp_path):
    from workbench.sandbox.srt.server_args import prepare_server_args

    args = prepare_server_args(["--model-path", str(TARGET), "--speculative-algorithm", "NEXTN", "--speculative-draft-model-path",
                                str(DRAFT), "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                                "--speculative-num-draft-tokens", "8", "--max-running-requests", "8"])
    assert args.speculative_algorithm == "EAGLE"
    assert args.speculative_num_draft_tokens == 3
    assert args.ignored_args == ["--max-running-requests 8"]


@pytest.mark.parametrize("extra, refused", [
    (["--speculative-algoritm", "EAGLE3"], "--speculative-algoritm EAGLE3"),  # a typo: SGLang refuses it
    (["--enable-foo-bar"], "--enable-foo-bar"),
])
def test_a_flag_sglang_does_not_define_is_refused_like_sglang(extra, refused):
    """SGLang's argparse stops at a flag it does not define; the sandbox too (it ignores only the
    SGLang flags it does not implement, prefixes included)."""
    from workbench.sandbox.srt.server_args import ServerArgsError, prepare_server_args

    with pytest.raises(ServerArgsError, match="unrecognized arguments: " + re.escape(refused)):
        prepare_server_args(["--model-path", str(TARGET), *extra])
    args = prepare_server_args(["--model-path", str(TARGET), "--max-running-requests", "8", "--mem-fraction", "0.8"])
    assert args.ignored_args == ["--max-running-requests 8", "--mem-fraction 0.8"]
