"""Start-up deaths read from real engine text (``workbench.logs.deaths``): the exceptions are raised by
the engines' own code at test time — SGLang's functions lifted from the published wheels (0.4.6,
0.5.1, 0.5.23), vLLM 0.32.0's from the CPU build's package, torch's and transformers' errors by running
them — and written the way each engine logs them (SGLang's rank-tagged logger line with the
traceback below it; vLLM's per-line process prefix, several processes reporting one death)."""

from __future__ import annotations

import ast
import logging
import re
import traceback
from pathlib import Path

import pytest
import torch

from workbench.logs.death_signatures import SIGNATURES, match_signature
from workbench.logs.deaths import attribute, read_death
from workbench.rules import REGISTRY

VLLM_PKG = Path(__file__).resolve().parents[2] / ".venv-vllm/lib/python3.11/site-packages/vllm"
SGL_START = ["[2026-12-07 10:00:00 TP0] Init torch distributed begin.",
             "[2026-12-07 10:00:01 TP0] Load weight begin. avail mem=70.00 GB",
             "[2026-12-07 10:00:05 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB",
             "[2026-12-07 10:00:05 TP0] KV Cache is allocated. #tokens: 100000",
             "[2026-12-07 10:00:06 TP0] Capture cuda graph begin. This can take up to several minutes.",
             "[2026-12-07 10:00:09 TP0] Capture cuda graph end. Time elapsed: 3.0 s",
             "[2026-12-07 10:00:09 TP0] Load weight begin. avail mem=59.00 GB"]
SGL_END = ["[2026-12-07 10:00:10] Received sigquit from a child process. It usually means the child failed."]


def _lift(path: Path, name: str, cls: str | None = None, **env):
    """The function ``name`` (a method of ``cls``) of the source file ``path``, compiled alone with its
    own file name and line numbers, its globals ``torch`` plus ``env``."""
    tree = ast.parse(path.read_text())
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    fn = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    g = {"torch": torch, "logger": logging.getLogger("lifted"), **env}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), g)
    return g[name]


def _raised(fn, *args) -> str:
    """The traceback ``fn(*args)`` raises, as Python prints it."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - the text is the point
        return traceback.format_exc()
    raise AssertionError(f"{fn} did not raise")


def _sglang_log(tb: str, *, start=SGL_START, tag=" TP0") -> list[str]:
    """``tb`` as SGLang's scheduler logs it (``scheduler.py:6369-6373``) after the start-up lines."""
    return [*start, f"[2026-12-07 10:00:10{tag}] Scheduler hit an exception: {tb}", *SGL_END]


def _vllm_lines(proc: str, text: str, where: str = "multiproc_executor.py:772") -> list[str]:
    return [f"({proc}) ERROR 12-07 10:00:10 [{where}] {line}" for line in text.rstrip("\n").split("\n")]


@pytest.mark.parametrize("version", ["0.4.6", "0.5.1", "0.5.23"])
def test_sglang_weight_loader_assert_in_each_release(sglang_release, version):
    loader = _lift(sglang_release(version) / "srt/model_loader/weight_utils.py", "default_weight_loader")
    tb = _raised(loader, torch.nn.Parameter(torch.empty(160, 576)), torch.empty(160, 480))
    death = read_death(_sglang_log(tb), engine="sglang")
    assert death.exception == "AssertionError: Attempted to load weight (torch.Size([160, 480])) into parameter " \
                              "(torch.Size([160, 576]))"
    assert (death.step, death.rank, death.engine) == ("load-draft", "TP0", "sglang")
    assert death.signature.id == "weight-loader-shape-assert"
    assert any(s.startswith(f"sglang {version} ") for s in death.signature.sources)
    assert death.where.startswith("default_weight_loader (") and "weight_utils.py" in death.where
    explained = attribute(death, ["hidden-size-mismatch", "rope-mismatch"])
    assert explained["explained"] and explained["rules"] == ["hidden-size-mismatch"]
    assert "load-draft (TP0)" in explained["why"] and "Attempted to load weight" in explained["why"]


@pytest.mark.parametrize("version", ["0.4.6", "0.5.23"])
def test_sglang_unsupported_architecture(sglang_release, version):
    class Registry:
        def get_supported_archs(self):
            return {"LlamaForCausalLM", "LlamaForCausalLMEagle3"}

    raise_for = _lift(sglang_release(version) / "srt/models/registry.py", "_raise_for_unsupported", "_ModelRegistry",
                      List=list)
    tb = _raised(raise_for, Registry(), ["Qwen3ForCausalLMEagle3"])
    start = [line.replace(" TP0]", "]") for line in SGL_START]
    death = read_death(_sglang_log(tb, start=start, tag=""))
    assert death.exception.startswith("ValueError: Model architectures ['Qwen3ForCausalLMEagle3'] are not supported")
    assert death.signature.id == "architecture-not-supported" and death.rank is None
    assert death.rules == ("unknown-draft-architecture",)
    assert not attribute(death, [])["explained"]


def test_vllm_weight_loader_and_a_wrapped_death_across_processes():
    """vLLM's worker dies (its default_weight_loader, lifted from the 0.32.0 package) while loading the
    drafter; the engine core and the API server report it after: the death is the worker's."""
    loader = _lift(VLLM_PKG / "model_executor/model_loader/weight_utils.py", "default_weight_loader")
    tb = _raised(loader, torch.nn.Parameter(torch.empty(128)), torch.empty(32))
    lines = ["(EngineCore_DP0 pid=10) INFO 12-07 10:00:00 [core.py:133] Initializing a V1 LLM engine (v0.32.0)",
             "(Worker_TP0 pid=11) INFO 12-07 10:00:01 [gpu_model_runner.py:5040] Starting to load model /m/target...",
             "(Worker_TP0 pid=11) INFO 12-07 10:00:02 [gpu_model_runner.py:5071] Loading drafter model...",
             *_vllm_lines("Worker_TP0 pid=11", "WorkerProc failed to start.\n" + tb),
             *_vllm_lines("EngineCore_DP0 pid=10", "EngineCore failed to start.\nTraceback (most recent call last):\n"
                          '  File "/v/vllm/v1/engine/core.py", line 1500, in run_engine_core\n'
                          "Exception: WorkerProc initialization failed due to an exception in a background process. "
                          "See stack trace for root cause.", "core.py:1510"),
             "Traceback (most recent call last):",
             '  File "/v/vllm/entrypoints/openai/api_server.py", line 100, in run_server',
             "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    death = read_death(lines)
    assert death.exception == "AssertionError: Attempted to load weight (torch.Size([32])) into parameter " \
                              "(torch.Size([128]))"
    assert (death.engine, death.rank, death.step) == ("vllm", "Worker_TP0", "load-draft")
    assert death.signature.id == "weight-loader-shape-assert" and "token-map-invalid" in death.rules
    assert len(death.others) == 2 and "See root cause above" in death.others[1]


def _torch_errors() -> dict:
    """Real torch errors of a first forward, raised in functions named as the engines' are."""
    def profile_run():          # vLLM's first forward: the memory profile (gpu_model_runner.py)
        torch.nn.functional.linear(torch.zeros(29, 320), torch.zeros(160, 480))

    def forward_view():
        torch.zeros(29, 320).view(-1, 480)

    def forward_rope():
        torch.zeros(1, 32, 4, 5) * torch.zeros(1, 1, 4, 6)

    def forward_embed():
        torch.nn.functional.embedding(torch.tensor([40]), torch.zeros(32, 4))

    def forward_float_ids():
        torch.nn.functional.embedding(torch.tensor([1.0]), torch.zeros(32, 4))

    return {"matmul-shape": profile_run, "view-shape-invalid": forward_view, "broadcast-size": forward_rope,
            "index-out-of-range": forward_embed, "indices-dtype": forward_float_ids}


@pytest.mark.parametrize("sig", sorted(_torch_errors()))
def test_torch_first_forward_deaths_are_the_warmup(sig):
    tb = _raised(_torch_errors()[sig])
    sgl = read_death([*SGL_START, "[2026-12-07 10:00:09 TP0] Load weight end. type=LlamaForCausalLMEagle3",
                      *_sglang_log(tb, start=[])[0:], *SGL_END])
    assert sgl.signature.id == sig and sgl.step == "warmup" and sgl.log_phase == "load-draft", sgl.to_dict()
    vllm = read_death(["(EngineCore_DP0 pid=7) INFO 12-07 10:00:01 [gpu_model_runner.py:5040] Starting to load model m",
                       "(EngineCore_DP0 pid=7) INFO 12-07 10:00:02 [gpu_model_runner.py:5071] Loading drafter model...",
                       *_vllm_lines("EngineCore_DP0 pid=7", "EngineCore failed to start.\n" + tb, "core.py:1510")])
    assert vllm.signature.id == sig and vllm.step == "warmup" and vllm.exception == sgl.exception


def test_transformers_refusals_read_with_their_cause():
    """transformers (the version installed here) refuses a draft config: a huggingface_hub validation
    error whose cause is on the next line; both ends of the chain are kept."""
    from transformers import LlamaConfig

    odd = _raised(lambda: LlamaConfig(hidden_size=160, num_attention_heads=32, num_key_value_heads=32))
    death = read_death(_sglang_log(odd))
    assert death.signature.id == "rope-odd-head-dim" and death.rules == ()
    assert "RoPE requires an even rotary dimension" in death.exception and death.step == "load-draft"
    why = attribute(death, ["hidden-size-mismatch"])
    assert not why["explained"] and "that no rule models" in why["why"] and "load-draft" in why["why"]
    heads = _raised(lambda: LlamaConfig(hidden_size=128, num_attention_heads=5))
    assert read_death(_sglang_log(heads)).signature.id == "hidden-not-multiple-of-heads"


def test_a_bare_assert_is_a_loader_shard_only_in_a_loader_frame():
    from workbench.sandbox.srt.models.llama_eagle3 import LlamaMLP, gate_up_weight_loader

    mlp = LlamaMLP(160, 256)
    tb = _raised(gate_up_weight_loader, mlp, mlp.gate_up_proj.weight, torch.empty(200, 160), 0)
    death = read_death(_sglang_log(tb))
    assert death.exception == "AssertionError" and death.signature.id == "linear-shard-shape-assert"

    def check_args():  # an assert of the launcher's argument checks (pytest rewrites a literal assert here)
        raise AssertionError
    other = read_death(_sglang_log(_raised(check_args)))
    assert other.exception == "AssertionError" and other.signature is None
    assert "no known death has that text" in attribute(other, ["weights-dropped"])["why"]


def test_a_death_without_traceback_and_a_log_without_death():
    argparse = ["usage: launch_server.py [-h] --model-path MODEL_PATH",
                "launch_server.py: error: argument --tp-size: invalid int value: 'abc'"]
    death = read_death(argparse)
    assert death.exception == argparse[1] and death.step == "launch" and death.signature is None
    healthy = [*SGL_START, "[2026-12-07 10:00:11] The server is fired up and ready to roll!"]
    assert read_death(healthy) is None


def test_every_signature_names_rules_that_exist():
    for sig in SIGNATURES:
        assert all(rule in REGISTRY for rule in sig.rules), (sig.id, sig.rules)
        assert sig.sources and re.compile(sig.pattern)


#: a phrase of each engine-raised signature, found at the file:line its sources cite
CITED = {"weight-loader-shape-assert": "Attempted to load weight", "architecture-not-supported": "are not supported",
         "model-module-not-found": "Cannot find model module", "target-no-aux-capture": "set_eagle3_layers_to_capture",
         "not-enough-memory": "Not enough memory", "linear-shard-shape-assert": "assert param",
         "load-weights-unknown-name": "params_dict[", "address-in-use": "in use",
         "vllm-linear-shape-assert": "Tried to load weights of size",
         "vllm-no-module-or-parameter": "There is no module or parameter named",
         "vllm-weights-not-initialized": "Following weights were not initialized",
         "vllm-no-kv-memory": "memory", "speculative-config-invalid": "class SpeculativeConfig",
         "heads-not-divisible-by-kv-heads": "divisible by num_kv_heads"}


@pytest.mark.parametrize("sig_id", sorted(CITED))
def test_each_cited_line_holds_the_text(sig_id, sglang_release):
    sig = next(s for s in SIGNATURES if s.id == sig_id)
    checked = 0
    for source in sig.sources:
        m = re.match(r"(sglang|vllm) (\S+) (\S+?):([\d,\-]+)", source)
        if m is None:
            continue
        engine, version, rel, spans = m.groups()
        path = (sglang_release(version) / rel) if engine == "sglang" else VLLM_PKG / rel
        lines = path.read_text().splitlines()
        for span in spans.split(","):
            a, _, b = span.partition("-")
            text = "\n".join(lines[int(a) - 2:int(b or a) + 1])
            assert CITED[sig_id] in text, (source, span, text)
            checked += 1
    assert checked, sig.sources


def test_match_signature_respects_the_engine():
    assert match_signature("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
                           engine="vllm") is None
    assert match_signature("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
                           engine="sandbox").id == "not-enough-memory"


def test_a_death_read_from_a_box_costs_its_window_only(tmp_path):
    """A dead server's log on the (local) box: its last 2 MiB are read, whatever precedes them (a
    3 MiB line without a newline here), and the death is found in them."""
    from remote import connect
    from workbench.logs.deaths import DEATH_WINDOW, read_death_from_box

    tb = _raised(_torch_errors()["matmul-shape"])
    log = tmp_path / "server.log"
    log.write_text("x" * (3 << 20) + "\n" + "\n".join(_sglang_log(tb)) + "\n")
    assert log.stat().st_size > DEATH_WINDOW
    with connect("local") as box:
        death = read_death_from_box(box, str(log), timeout=30)
    assert death.signature.id == "matmul-shape" and death.step == "warmup" and death.rank == "TP0"


def test_a_death_in_cuda_graph_capture_is_the_capture_step():
    """SGLang captures the draft's CUDA graphs after its load (0.5.23 ``eagle_worker_v2.py``): a first
    forward raised under a capture frame is the capture, not the warm-up."""
    def capture_one_batch_size():   # SGLang's CudaGraphRunner.capture_one_batch_size
        torch.zeros(4, 5) * torch.zeros(4, 6)

    start = [*SGL_START, "[2026-12-07 10:00:09 TP0] Load weight end. type=LlamaForCausalLMEagle3",
             "[2026-12-07 10:00:09 TP0] Capture draft cuda graph begin. This can take up to several minutes."]
    death = read_death(_sglang_log(_raised(capture_one_batch_size), start=start))
    assert (death.step, death.log_phase, death.signature.id) == ("capture-draft", "capture-draft", "broadcast-size")
