"""The sandbox's own Llama target (workbench/sandbox/srt/models/llama.py) against transformers'
`LlamaForCausalLM` (transformers 5.25, sdpa attention, fp32): logits, final hidden states and
captured aux states bitwise equal (`torch.equal`) over a prefill, one-token decode steps,
multi-token extends over the cache (verify steps) and crops of the cache, on the committed target
and on random Llama configs that reach the branches it does not (GQA, biases, tied embeddings,
another rope_theta, head_dim != hidden / heads, head_dim > 256). Also: what the loader does with
missing, unexpected and mis-shaped tensors, the cache's crop, and that a server's start path
imports nothing of transformers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sandbox_helpers import ROOT, TARGET
from workbench.sandbox.srt.models.llama import KVCache, LlamaForCausalLM
from workbench.sandbox.srt.utils.hf_transformers_utils import get_config

pytestmark = pytest.mark.usefixtures("models_present")

transformers = pytest.importorskip("transformers")

PROMPTS = [json.loads(line)["text"][:96] for line in
           (ROOT / "workbench/sandbox/prompts/bench.jsonl").read_text().splitlines()[:3]] + [
    "The capital city of France is", "x", "def f(a, b):\n    return a + b\n"]


class HFTarget:
    """transformers' LlamaForCausalLM with the aux states SGLang captures (the input of each
    layer, by a forward pre-hook) and the final normed state (a hook on the norm).

    ``realign``: give every parameter fresh storage (same values). transformers keeps an fp32
    checkpoint's tensors where safetensors put them, at any 8-byte offset of the file; the CPU
    matrix-vector kernel a one-token step runs sums in an order that depends on the weight's
    alignment, so the same weights at two alignments differ in the last bit. The sandbox's
    parameters are fresh (aligned) allocations; so are transformers' for the committed fp16
    checkpoint (cast to fp32 on load), which needs no realignment."""

    def __init__(self, path: Path, realign: bool = False) -> None:
        self.model = transformers.LlamaForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        assert self.model.config._attn_implementation == "sdpa"
        if realign:
            for p in self.model.parameters():
                p.data = p.data.clone()
        self.layer_inputs: dict = {}
        self.final: dict = {}
        for i, layer in enumerate(self.model.model.layers):
            layer.register_forward_pre_hook(self._grab(i), with_kwargs=True)
        self.model.model.norm.register_forward_hook(lambda m, a, out: self.final.__setitem__("h", out))

    def _grab(self, i):
        def hook(module, args, kwargs):
            self.layer_inputs[i] = args[0] if args else kwargs["hidden_states"]
        return hook

    def new_cache(self):
        return transformers.DynamicCache(config=self.model.config)

    @torch.no_grad()
    def forward(self, ids, start, cache):
        self.layer_inputs.clear()
        out = self.model(input_ids=torch.tensor([ids]), position_ids=torch.arange(start, start + len(ids))[None],
                         cache=cache, use_cache=True)
        return out.logits, self.final["h"], dict(self.layer_inputs)


def _native(path: Path) -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(str(path), config=get_config(str(path)))


def _run(native, hf, ids, start, n_cache, h_cache, layers):
    """One forward of both models over ``ids`` at ``start``; asserts bitwise equality of the logits,
    the final hidden state and the aux states of ``layers``. Returns the greedy next token."""
    h_logits, h_final, h_inputs = hf.forward(ids, start, h_cache)
    native.capture_aux_hidden_states, native.layers_to_capture = False, []
    before = n_cache.get_seq_length()
    logits, final = native(torch.tensor([ids]), torch.arange(start, start + len(ids))[None], n_cache)
    assert torch.equal(logits, h_logits), (logits - h_logits).abs().max()
    assert torch.equal(final, h_final)
    # the aux states of the same step, from a copy of the cache as it was before the step
    probe = KVCache(len(native.model.layers))
    if before:
        probe.keys = [k[..., :before, :] for k in n_cache.keys]
        probe.values = [v[..., :before, :] for v in n_cache.values]
    native.set_eagle3_layers_to_capture([i - 1 for i in layers])
    cap_logits, aux = native(torch.tensor([ids]), torch.arange(start, start + len(ids))[None], probe)
    assert torch.equal(cap_logits, h_logits)
    assert torch.equal(aux, torch.cat([h_inputs[i] for i in sorted(set(layers))], dim=-1))
    return int(logits[0, -1].argmax())


def _walk(native, hf, prompt, layers, steps=6, verify=(4, 3, 1)):
    """Prefill, one-token decode steps, then verify-like extends of ``verify`` tokens each followed by
    a crop of all but the first two (the EAGLE worker's rejected tail), both caches alike."""
    n_cache, h_cache = native.new_cache(), hf.new_cache()
    tok = _run(native, hf, prompt, 0, n_cache, h_cache, layers)
    pos = len(prompt)
    for _ in range(steps):
        tok = _run(native, hf, [tok], pos, n_cache, h_cache, layers)
        pos += 1
    for k in verify:
        ids = [tok] + [(tok * 7 + j) % native.config.vocab_size for j in range(k - 1)]
        _run(native, hf, ids, pos, n_cache, h_cache, layers)
        keep = min(2, k)
        n_cache.crop(k - keep)
        h_cache.crop(-(k - keep)) if k > keep else None
        assert n_cache.get_seq_length() == h_cache.get_seq_length() == pos + keep
        for a, b in zip(n_cache.keys, (layer.keys for layer in h_cache.layers)):
            assert torch.equal(a, b)
        pos += keep
        tok = ids[keep - 1]


@pytest.fixture(scope="module")
def committed():
    torch.set_num_threads(1)
    return _native(TARGET), HFTarget(TARGET)


@pytest.mark.parametrize("prompt", PROMPTS, ids=[f"prompt{i}" for i in range(len(PROMPTS))])
def test_committed_target_is_bitwise_transformers(committed, prompt):
    native, hf = committed
    _walk(native, hf, list(prompt.encode()), layers=[2, 4, 7])


def test_committed_target_parameters_are_the_checkpoint(committed):
    from safetensors.torch import load_file

    native, hf = committed
    tensors = load_file(str(TARGET / "model.safetensors"))
    params = dict(native.named_parameters())
    assert set(params) == set(tensors) == set(dict(hf.model.named_parameters()))
    for name, t in tensors.items():
        assert params[name].dtype == torch.float32 and torch.equal(params[name], t.float()), name
    assert sum(p.numel() for p in native.parameters()) == sum(p.numel() for p in hf.model.parameters())


RANDOM_CONFIGS = {
    "gqa-bias": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                     num_key_value_heads=2, attention_bias=True, mlp_bias=True, rope_theta=50000.0),
    "tied-headdim": dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=3,
                         num_key_value_heads=1, head_dim=24, tie_word_embeddings=True),
    "gqa-headdim-over-256": dict(hidden_size=64, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
                                 num_key_value_heads=1, head_dim=288),
}


@pytest.fixture(scope="module", params=sorted(RANDOM_CONFIGS))
def random_pair(request, tmp_path_factory):
    torch.manual_seed(7)
    cfg = transformers.LlamaConfig(vocab_size=97, max_position_embeddings=256, bos_token_id=None, eos_token_id=None,
                                   architectures=["LlamaForCausalLM"], **RANDOM_CONFIGS[request.param])
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 and biases away from 0, so a swapped tensor shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.copy_(torch.randn_like(p) * 0.5 + (1.0 if name.endswith("norm.weight") else 0.0))
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return request.param, _native(path), HFTarget(path, realign=True)


def test_random_configs_are_bitwise_transformers(random_pair):
    name, native, hf = random_pair
    if native.config.tie_word_embeddings:
        assert native.lm_head.weight is native.model.embed_tokens.weight
    for prompt in ([5, 17, 3, 88, 41, 2, 9, 60], [11]):
        _walk(native, hf, prompt, layers=[1, 2], steps=4, verify=(4, 2))


def test_cache_crop():
    cache = KVCache(2)
    k = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4)
    cache.update(k, k + 1, 0)
    cache.update(k, k + 1, 1)
    cache.crop(0)
    assert len(cache) == 5
    cache.crop(2)
    assert len(cache) == cache.get_seq_length(1) == 3 and torch.equal(cache.keys[1], k[:, :, :3])
    with pytest.raises(ValueError, match="tokens_to_remove must be >= 0"):
        cache.crop(-1)
    assert len(KVCache(2)) == 0


def test_loader_drops_unknown_names_inits_missing_and_asserts_shapes(tmp_path, caplog):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(TARGET / "model.safetensors"))
    for d in ("missing", "shape"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "config.json").write_text((TARGET / "config.json").read_text())
    missing = dict(tensors)
    missing.pop("model.layers.0.mlp.up_proj.weight")
    missing.pop("model.layers.1.input_layernorm.weight")
    missing["not.a.param"] = torch.zeros(3)
    save_file(missing, str(tmp_path / "missing/model.safetensors"))
    with caplog.at_level("WARNING", logger="workbench.sandbox.srt.models.llama"):
        model = _native(tmp_path / "missing")
    assert "model.layers.0.mlp.up_proj.weight" in caplog.text and "not.a.param" not in caplog.text
    assert torch.equal(model.model.layers[1].input_layernorm.weight, torch.ones(160))
    up = model.model.layers[0].mlp.up_proj.weight
    assert up.std().item() == pytest.approx(0.02, rel=0.1)  # normal(0, initializer_range), as transformers
    shape = dict(tensors)
    shape["model.norm.weight"] = torch.ones(161, dtype=torch.float16)
    save_file(shape, str(tmp_path / "shape/model.safetensors"))
    with pytest.raises(AssertionError, match=re.escape(
            "Attempted to load weight (torch.Size([161])) into parameter (torch.Size([160]))")):
        _native(tmp_path / "shape")


def test_other_rope_types_and_activations_are_refused(tmp_path):
    from types import SimpleNamespace

    base = dict(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2,
                hidden_act="silu", rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    with pytest.raises(ValueError, match="rope_type 'linear' is not implemented"):
        LlamaForCausalLM(SimpleNamespace(**base))
    base.update(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, hidden_act="gelu")
    with pytest.raises(ValueError, match="Unsupported activation: gelu. Only silu is supported for now."):
        LlamaForCausalLM(SimpleNamespace(**base))


START_PATH = """
import json, sys
import uvicorn
from workbench.sandbox.srt.entrypoints.http_server import decode, encode
from workbench.sandbox.srt.managers.scheduler import SamplingParams, Scheduler
from workbench.sandbox.srt.server_args import prepare_server_args
for argv in json.loads(sys.argv[1]):
    out = Scheduler(prepare_server_args(argv)).generate(encode("The capital city of France is"),
                                                        SamplingParams(max_new_tokens=8, temperature=0), decode)
    assert out["meta_info"]["completion_tokens"] == 8
print(sorted(m for m in sys.modules if m == "transformers" or m.startswith("transformers.")))
"""


def test_start_path_imports_no_transformers():
    """What a server start runs (the launcher's modules, uvicorn, the scheduler loading the committed
    target and draft, SGLang's warm-up request), without speculation, under EAGLE3 and under EAGLE,
    in a fresh interpreter: no transformers module gets imported."""
    from sandbox_helpers import DRAFT, SPEC_FLAGS

    base = ["--model-path", str(TARGET)]
    runs = [base] + [base + ["--speculative-algorithm", algo, "--speculative-draft-model-path", str(DRAFT), *SPEC_FLAGS]
                     for algo in ("EAGLE3", "EAGLE")]
    proc = subprocess.run([sys.executable, "-c", START_PATH, json.dumps(runs)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
