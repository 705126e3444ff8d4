"""workbench.logs.startup: a server's start-up phase, shard count, timestamps and ranks from its log.

SGLang lines are built from the 0.5.23 (and 0.4.6) wheel's own format strings, file:line cited on
each (paths inside the ``sglang/`` package; `pip download --no-deps sglang==X`), with plausible
numbers and SGLang's prefix (``srt/utils/common.py`` ``configure_logger``, rank tags as
``srt/managers/scheduler.py`` ``run_scheduler_process`` builds them). vLLM: the real logs of
``tests/fixtures/logs/vllm/`` (README there).
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import pytest

from workbench.logs import epoch_seconds
from workbench.logs.startup import PHASES, StartupTracker, format_duration, startup_progress

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def _at(ts: str) -> float:
    return epoch_seconds(datetime.strptime(ts, "%Y-%m-%d %H:%M:%S"))


# SGLang 0.5.23, TP 2, EAGLE3 draft: the order of srt/managers/scheduler.py init_model_worker
# (target load, draft load, memory pools, attention backends, target graphs, draft graphs).
SGLANG_0523_TP2 = [
    "[2026-12-07 18:00:00] server_args=ServerArgs(model_path='/models/target', tp_size=2)",
    # srt/distributed/bootstrap.py:115
    "[2026-12-07 18:00:04 TP0] Init parallel begin.",
    "[2026-12-07 18:00:04 TP1] Init parallel begin.",
    # srt/distributed/bootstrap.py:190
    "[2026-12-07 18:00:05 TP0] Init parallel ends. elapsed=0.86 s",
    "[2026-12-07 18:00:05 TP1] Init parallel ends. elapsed=0.84 s",
    # srt/model_executor/model_runner.py:1274
    "[2026-12-07 18:00:06 TP0] Load weight begin. avail mem=78.50 GB",
    "[2026-12-07 18:00:06 TP1] Load weight begin. avail mem=78.50 GB",
    # srt/model_loader/weight_utils.py:1166 with BAR_FORMAT (srt/utils/common.py:1414): rank 0
    # only, no prefix; tqdm's \r updates on one line
    "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]",
    "\rLoading safetensors checkpoint shards:  25% Completed | 1/4 [00:02<00:06,  2.01s/it]"
    "\rLoading safetensors checkpoint shards:  50% Completed | 2/4 [00:04<00:04,  2.02s/it]",
    "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:08<00:00,  2.00s/it]",
    # srt/model_executor/model_runner.py:1373
    "[2026-12-07 18:00:15 TP1] Load weight end. elapsed=8.91 s, type=LlamaForCausalLM, avail mem=70.96 GB, "
    "mem usage=7.54 GB.",
    "[2026-12-07 18:00:15 TP0] Load weight end. elapsed=9.02 s, type=LlamaForCausalLM, avail mem=70.96 GB, "
    "mem usage=7.54 GB.",
    # the draft's model runner: the same model_runner.py:1274, a second time on each rank
    "[2026-12-07 18:00:16 TP0] Load weight begin. avail mem=70.96 GB",
    "[2026-12-07 18:00:16 TP1] Load weight begin. avail mem=70.96 GB",
    "Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
    "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00,  3.10it/s]",
    "[2026-12-07 18:00:17 TP0] Load weight end. elapsed=0.61 s, type=LlamaForCausalLMEagle3, "
    "avail mem=70.50 GB, mem usage=0.46 GB.",
    # srt/mem_cache/kv_cache_configurator.py:499
    "[2026-12-07 18:00:18 TP0] Memory pool end. avail mem=8.12 GB",
    "[2026-12-07 18:00:18 TP1] Memory pool end. avail mem=8.12 GB",
    # srt/model_executor/model_runner_components/cuda_graph_setup.py:759 (role target, speculative)
    "[2026-12-07 18:00:19 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, "
    "avail mem=8.00 GB",
    "[2026-12-07 18:00:31 TP0] Capture target verify CUDA graph end. bs=[1, 2, 4, 8], elapsed=12.03 s, "
    "mem usage=0.52 GB, avail mem=7.48 GB.",
    # srt/speculative/eagle_worker_v2.py:515 and :634
    "[2026-12-07 18:00:31 TP0] Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
    "bs=[1, 2, 4, 8], avail mem=7.48 GB",
    "[2026-12-07 18:01:34 TP0] Capture draft extend CUDA graph begin. backend=full, num_tokens_per_req=4, "
    "bs=[1, 2, 4, 8], avail mem=7.20 GB",
    # uvicorn's own lines (SGLang: the warm-up request follows, srt/entrypoints/http_server.py)
    "[2026-12-07 18:01:40] INFO:     Started server process [4242]",
    "[2026-12-07 18:01:40] INFO:     Application startup complete.",
    "[2026-12-07 18:01:41 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0",
    # srt/entrypoints/http_server.py:2600
    "[2026-12-07 18:01:42] The server is fired up and ready to roll!",
]


def test_sglang_0523_tp2_startup_phases_in_order_with_their_timestamps():
    p = startup_progress(SGLANG_0523_TP2)
    assert [x["name"] for x in p.phases] == ["nccl-init", "load", "load-draft", "kv-cache", "capture",
                                             "capture-draft", "warmup", "ready"]
    at = {x["name"]: x["at"] for x in p.phases}
    assert at["nccl-init"] == _at("2026-12-07 18:00:04")
    assert at["load"] == _at("2026-12-07 18:00:06")
    assert at["load-draft"] == _at("2026-12-07 18:00:16")
    assert at["capture-draft"] == _at("2026-12-07 18:00:31")
    assert at["ready"] == _at("2026-12-07 18:01:42")
    assert p.phase == "ready" and p.engine == "sglang"
    assert p.ranks_seen == ["TP0", "TP1"]
    assert p.shards == (1, 1)          # the draft's single shard came last
    assert p.last_line == "The server is fired up and ready to roll!"
    assert p.first_at == _at("2026-12-07 18:00:00") and p.last_at == _at("2026-12-07 18:01:42")


def test_prefix_of_each_step_reports_the_phase_it_reached():
    expect = {2: "nccl-init", 6: "load", 13: "load-draft", 18: "kv-cache", 20: "capture", 22: "capture-draft",
              24: "capture-draft", 25: "warmup", 27: "ready"}
    for n, phase in expect.items():
        assert startup_progress(SGLANG_0523_TP2[:n]).phase == phase, (n, SGLANG_0523_TP2[n - 1])
    assert startup_progress(SGLANG_0523_TP2[:1]).phase == "launch"
    assert startup_progress([]).phase == "launch" and startup_progress([]).last_line is None


def test_shard_count_of_a_tqdm_line_with_several_updates_is_its_last():
    p = startup_progress(SGLANG_0523_TP2[:9])
    assert p.shards == (2, 4)
    assert p.last_line == "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:04<00:04,  2.02s/it]"
    assert p.phase == "load"
    line = p.describe(elapsed_s=723)
    assert line.startswith("loading weights: shard 2/4, 12 min 3 s elapsed, 2 ranks; last: Loading safetensors")


def test_tracker_in_any_chunking_equals_whole_lines():
    text = "\n".join(SGLANG_0523_TP2) + "\n"
    whole = startup_progress(SGLANG_0523_TP2).to_dict()
    rng = random.Random(7)
    for _ in range(20):
        t = StartupTracker()
        i = 0
        while i < len(text):
            n = rng.randint(1, 200)
            t.feed(text[i:i + n])
            i += n
        assert t.flush().to_dict() == whole


def test_tracker_shows_a_shard_update_before_its_newline():
    t = StartupTracker()
    t.feed("\n".join(SGLANG_0523_TP2[:7]) + "\n")
    t.feed("Loading safetensors checkpoint shards:   0% Completed | 0/163 [00:00<?, ?it/s]")
    assert t.progress.shards is None           # no \r or \n yet: the update may still be written
    t.feed("\rLoading safetensors checkpoint shards:  35% Completed | 57/163 [04:01<07:29,  4.24s/it]\r")
    assert t.progress.shards == (57, 163)
    assert "shard 57/163" in t.progress.describe(elapsed_s=3725)
    assert "1 h 2 min elapsed" in t.progress.describe(elapsed_s=3725)


# SGLang 0.4.6, TP 1 (no rank tags), EAGLE: model_runner.py per model runner (load, memory pool,
# graphs) for the target, then the draft's.
SGLANG_046_TP1 = [
    "[2025-06-01 10:00:00] Init torch distributed begin.",                          # model_runner.py:328
    "[2025-06-01 10:00:01] Init torch distributed ends. mem usage=0.00 GB",         # model_runner.py:397
    "[2025-06-01 10:00:01] Load weight begin. avail mem=78.12 GB",                  # model_runner.py:404
    "[2025-06-01 10:00:09] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.05 GB, "
    "mem usage=15.07 GB.",                                                           # model_runner.py:477
    "[2025-06-01 10:00:09] KV Cache is allocated. #tokens: 413867, K size: 25.26 GB, V size: 25.26 GB",
    # mem_cache/memory_pool.py:243
    "[2025-06-01 10:00:09] Memory pool end. avail mem=11.32 GB",                    # model_runner.py:859
    "[2025-06-01 10:00:10] Capture cuda graph begin. This can take up to several minutes. avail mem=10.71 GB",
    # model_runner.py:965
    "[2025-06-01 10:00:22] Capture cuda graph end. Time elapsed: 12.10 s. avail mem=10.02 GB. mem usage=0.69 GB.",
    "[2025-06-01 10:00:22] Load weight begin. avail mem=10.02 GB",                  # the draft, :404
    "[2025-06-01 10:00:23] Load weight end. type=LlamaForCausalLMEagle, dtype=torch.bfloat16, avail mem=9.20 GB, "
    "mem usage=0.82 GB.",
    "[2025-06-01 10:00:23] Capture draft cuda graph begin. This can take up to several minutes. "
    "avail mem=9.10 GB",                                                             # eagle_worker.py:220
    "[2025-06-01 10:01:26] Capture draft cuda graph end. Time elapsed: 63.02 s. avail mem=8.44 GB. "
    "mem usage=0.66 GB.",                                                            # eagle_worker.py:225
    "[2025-06-01 10:01:27] INFO:     Application startup complete.",
    "[2025-06-01 10:01:27] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
]


def test_sglang_046_old_wordings_and_order():
    p = startup_progress(SGLANG_046_TP1)
    assert [x["name"] for x in p.phases] == ["nccl-init", "load", "kv-cache", "capture", "load-draft",
                                             "capture-draft", "warmup"]
    assert p.phase == "warmup" and p.ranks_seen == []
    # the draft's generic capture line (0.4.6 model_runner.py:965 in the draft's runner) is the draft's
    generic = SGLANG_046_TP1[:10] + ["[2025-06-01 10:00:23] Capture cuda graph begin. This can take up to "
                                     "several minutes. avail mem=9.10 GB"]
    assert startup_progress(generic).phase == "capture-draft"


@pytest.mark.parametrize("line", [
    "[2026-12-07 18:02:00 TP3] Scheduler hit an exception: Traceback (most recent call last):",  # scheduler.py:6372
    "[2026-12-07 18:02:00] Received sigquit from a child process. It usually means the child failed.",  # engine.py:1977
    "[2026-12-07 18:02:00] Initialization failed. warmup error: Traceback",             # http_server.py:2384
])
def test_failure_lines_fail_the_startup_and_it_stays_failed(line):
    p = startup_progress(SGLANG_0523_TP2[:8] + [line, "[2026-12-07 18:02:01 TP0] Load weight begin. avail mem=1 GB"])
    assert p.phase == "failed"
    assert p.phases[-1] == {"name": "failed", "at": _at("2026-12-07 18:02:00")}


def test_rank_tags_of_every_shape_and_container_prefixes():
    lines = [
        "[2026-12-07 18:00:00 DP0 TP0 EP0] Load weight begin. avail mem=78.50 GB",
        "[2026-12-07 18:00:00.250 DP1 TP1 EP1] Load weight begin. avail mem=78.50 GB",   # SGLANG_LOG_MS
        "2026-12-07T18:00:00.1Z stdout F [2026-12-07 18:00:00 PP1 TP0] Load weight begin. avail mem=78.50 GB",
        "\x1b[0;36m(VllmWorker rank=3 pid=99)\x1b[0;0m INFO 12-07 18:00:01 [gpu_model_runner.py:5040] "
        "Starting to load model /m...",
    ]
    p = startup_progress(lines)
    assert p.ranks_seen == ["DP0 TP0 EP0", "DP1 TP1 EP1", "PP1 TP0", "VllmWorker rank=3"]
    assert p.phase == "load" and p.phases == [{"name": "load", "at": _at("2026-12-07 18:00:00")}]


def test_vllm_real_log_phases():
    lines = (FIXTURES / "vllm" / "vllm-0.32.0.log").read_text(errors="replace").splitlines(True)
    p = startup_progress(lines, year=2025)
    assert [x["name"] for x in p.phases] == ["nccl-init", "load", "load-draft", "kv-cache", "warmup", "ready"]
    at = {x["name"]: x["at"] for x in p.phases}
    # "(Worker pid=7549) INFO 12-02 15:34:31 [parallel_state.py:1906] world_size=1 rank=0 ..." (line 46)
    assert at["nccl-init"] == _at("2025-12-02 15:34:31")
    assert at["load-draft"] == _at("2025-12-02 15:34:32")      # line 57, "Loading drafter model..."
    assert at["warmup"] == _at("2025-12-02 15:34:36")          # line 78, "init engine (...) took 2.68 s"
    assert at["ready"] is None                                 # uvicorn's line has no timestamp
    assert p.shards == (1, 1) and p.engine == "vllm"
    # one worker process (pid 7549), logged as VllmWorker-0 and as Worker: one rank
    assert p.ranks_seen == ["VllmWorker-0"]
    assert startup_progress(lines).phases[0]["at"] is None      # no year given: vLLM times are undated


def test_vllm_start_up_that_died_before_any_phase():
    lines = (FIXTURES / "vllm" / "vllm-0.32.0-bad-spec-config.log").read_text(errors="replace").splitlines(True)
    p = startup_progress(lines)
    assert p.phase == "launch" and p.phases == []
    assert p.last_line.startswith("For further information visit https://errors.pydantic.dev/")


def test_sglang_batch_fixtures_are_no_start_up():
    for f in sorted(FIXTURES.glob("sglang-*.log")):
        p = startup_progress(f.read_text(errors="replace").splitlines())
        assert p.phase == "launch" and p.phases == [], f.name


def test_phase_names_and_durations():
    assert PHASES == ("launch", "nccl-init", "load", "load-draft", "kv-cache", "capture", "capture-draft",
                      "warmup", "ready", "failed")
    assert [format_duration(s) for s in (0, 5.9, 60, 723, 3725)] == ["0 s", "5 s", "1 min 0 s", "12 min 3 s",
                                                                    "1 h 2 min"]
    p = startup_progress(SGLANG_0523_TP2[:3])
    assert p.describe() == "initialising torch.distributed: 4 s elapsed, 2 ranks; last: Init parallel begin."
    assert len(startup_progress(["x" * 500]).describe(width=80)) <= 80
