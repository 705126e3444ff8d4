"""In-process tests of the sandbox's EAGLE / EAGLE3 mechanism (no HTTP): lossless decoding,
the fc skip by the width check, the aux-layer resolution, load_weights renames."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from sandbox_helpers import CONTROL, DRAFT, SPEC_FLAGS, TARGET
from workbench.sandbox.srt.entrypoints.http_server import decode, encode
from workbench.sandbox.srt.managers.scheduler import SamplingParams, Scheduler
from workbench.sandbox.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
from workbench.sandbox.srt.server_args import prepare_server_args
from workbench.sandbox.srt.speculative.spec_info import SpeculativeAlgorithm

pytestmark = pytest.mark.usefixtures("models_present")

PROMPTS = [json.loads(line)["text"] for line in
           (Path(__file__).resolve().parents[2] / "workbench/sandbox/prompts/bench.jsonl").read_text().splitlines()[:3]]
N_NEW = 48


def make_scheduler(algo=None, draft=DRAFT, extra=()):
    argv = ["--model-path", str(TARGET), "--decode-log-interval", "1000", *extra]
    if algo:
        argv += ["--speculative-algorithm", algo, "--speculative-draft-model-path", str(draft), *SPEC_FLAGS]
    return Scheduler(prepare_server_args(argv))


def run(sched, prompts=PROMPTS, n=N_NEW):
    return [sched.generate(encode(p), SamplingParams(max_new_tokens=n, temperature=0), decode) for p in prompts]


@pytest.fixture(scope="module")
def plain_outputs():
    torch.set_num_threads(1)
    return [o["output_ids"] for o in run(make_scheduler())]


@pytest.fixture(scope="module")
def eagle3():
    return make_scheduler("EAGLE3")


@pytest.fixture(scope="module")
def eagle():
    return make_scheduler("EAGLE")


class FcProbe:
    """Counts draft `fc` calls and records the width of `spec_info.hidden_states` the draft gets."""

    def __init__(self, sched) -> None:
        model = sched.draft_worker.draft_model.model
        self.fc_calls = 0
        self.widths = []
        self.handles = [
            model.fc.register_forward_hook(self._on_fc),
            model.register_forward_pre_hook(self._on_model, with_kwargs=True),
        ]

    def _on_fc(self, module, args, output):
        self.fc_calls += 1

    def _on_model(self, module, args, kwargs):
        forward_batch = args[2] if len(args) > 2 else kwargs["forward_batch"]
        self.widths.append(forward_batch.spec_info.hidden_states.shape[-1])

    def remove(self):
        for h in self.handles:
            h.remove()


@pytest.mark.parametrize("which", ["eagle3", "eagle"])
def test_speculative_greedy_is_lossless(request, which, plain_outputs):
    sched = request.getfixturevalue(which)
    outs = run(sched)
    assert [o["output_ids"] for o in outs] == plain_outputs
    for o in outs:
        m = o["meta_info"]
        assert m["completion_tokens"] == N_NEW
        assert m["spec_accept_length"] == pytest.approx(m["completion_tokens"] / m["spec_verify_ct"])
        assert sum(m["spec_correct_drafts_histogram"]) == m["spec_verify_ct"]


def test_control_draft_is_lossless_too(plain_outputs):
    outs = run(make_scheduler("EAGLE3", draft=CONTROL))
    assert [o["output_ids"] for o in outs] == plain_outputs


def test_eagle3_runs_fc_on_three_aux_states(eagle3):
    hidden = eagle3.target_worker.model.config.hidden_size
    probe = FcProbe(eagle3)
    try:
        run(eagle3, PROMPTS[:1], 16)
    finally:
        probe.remove()
    assert 3 * hidden in probe.widths  # draft extend: the concatenated aux states
    assert hidden in probe.widths  # later draft steps: the draft's own state
    assert probe.fc_calls == probe.widths.count(3 * hidden) > 0
    assert eagle3.target_worker.model.capture_aux_hidden_states


def test_eagle_skips_fc_silently(eagle):
    hidden = eagle.target_worker.model.config.hidden_size
    probe = FcProbe(eagle)
    try:
        outs = run(eagle, PROMPTS[:1], 16)
    finally:
        probe.remove()
    assert set(probe.widths) == {hidden}
    assert probe.fc_calls == 0
    assert not eagle.target_worker.model.capture_aux_hidden_states
    # the draft uses the target's lm_head (full vocab) and no hot-token map under EAGLE
    assert eagle.draft_worker.hot_token_id is None
    assert eagle.draft_worker.draft_model.lm_head.weight.shape[0] == eagle.target_worker.model.config.vocab_size
    assert outs[0]["meta_info"]["spec_verify_ct"] > 0


def test_eagle3_accepts_more_than_eagle(eagle3, eagle):
    e3 = run(eagle3, PROMPTS[:2])
    e1 = run(eagle, PROMPTS[:2])
    assert sum(o["meta_info"]["spec_accept_length"] for o in e3) > 1.5 * sum(o["meta_info"]["spec_accept_length"] for o in e1)


def test_configured_aux_layers_use_llama_offset(eagle3):
    ids = json.loads((DRAFT / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert eagle3.target_worker.model.layers_to_capture == [i + 1 for i in ids]


def test_missing_eagle_config_falls_back_to_default_layers(tmp_path):
    draft = tmp_path / "draft-no-eagle-config"
    shutil.copytree(DRAFT, draft)
    cfg = json.loads((draft / "config.json").read_text())
    del cfg["eagle_config"]
    (draft / "config.json").write_text(json.dumps(cfg))
    sched = make_scheduler("EAGLE3", draft=draft)
    L = sched.target_worker.model.config.num_hidden_layers
    assert L == 8  # so that SGLang's default [2, L // 2, L - 3] is three distinct, valid layers
    assert sched.target_worker.model.layers_to_capture == [2, L // 2, L - 3] == [2, 4, 5]
    assert sched.target_worker.model.capture_aux_hidden_states


def test_draft_hidden_width_comes_from_target(eagle3):
    draft_model = eagle3.draft_worker.draft_model
    hidden = eagle3.target_worker.model.config.hidden_size
    assert tuple(draft_model.model.fc.weight.shape) == (hidden, 3 * hidden)
    assert draft_model.model.embed_tokens.weight.data_ptr() == eagle3.target_worker.model.get_embed().data_ptr()


def test_load_weights_renames_and_drops_unknown_silently():
    from transformers import LlamaConfig
    from safetensors.torch import load_file

    cfg = LlamaConfig.from_pretrained(DRAFT)
    model = LlamaForCausalLMEagle3(cfg)
    tensors = load_file(str(DRAFT / "model.safetensors"))
    model.load_weights(list(tensors.items()) + [("not.a.param", torch.zeros(3))])
    q = tensors["midlayer.self_attn.q_proj.weight"]
    qkv = model.model.layers[0].self_attn.qkv_proj.weight
    assert torch.equal(qkv[: q.shape[0]], q)
    assert torch.equal(qkv[-tensors["midlayer.self_attn.v_proj.weight"].shape[0]:], tensors["midlayer.self_attn.v_proj.weight"])
    up = tensors["midlayer.mlp.up_proj.weight"]
    assert torch.equal(model.model.layers[0].mlp.gate_up_proj.weight[up.shape[0]:], up)
    assert torch.equal(model.model.fc.weight, tensors["fc.weight"])
    d2t = tensors["d2t"]
    assert torch.equal(model.hot_token_id, d2t + torch.arange(d2t.shape[0]))
    assert torch.equal(tensors["t2d"].nonzero().flatten(), model.hot_token_id)


def test_checkpoint_format():
    from safetensors import safe_open

    cfg = json.loads((DRAFT / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["eagle_config"]["use_aux_hidden_state"] is True
    assert len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]) == 3
    assert cfg["draft_vocab_size"] < cfg["vocab_size"]
    H = cfg["hidden_size"]
    with safe_open(str(DRAFT / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        assert f.get_tensor("d2t").dtype == torch.int64
        assert f.get_tensor("t2d").dtype == torch.bool
    assert shapes["fc.weight"] == (H, 3 * H)
    assert shapes["midlayer.self_attn.q_proj.weight"][1] == 2 * H
    assert shapes["lm_head.weight"] == (cfg["draft_vocab_size"], H)
    for name in ["midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight", "midlayer.post_attention_layernorm.weight",
                 "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight", "norm.weight"]:
        assert name in shapes
    assert not any("embed" in k for k in shapes)
    with safe_open(str(CONTROL / "model.safetensors"), "pt") as f:
        assert not f.get_tensor("fc.weight").any()


def test_algorithm_names():
    assert SpeculativeAlgorithm.from_string("eagle3").is_eagle3()
    assert SpeculativeAlgorithm.from_string("NEXTN") is SpeculativeAlgorithm.EAGLE
    assert not SpeculativeAlgorithm.from_string("EAGLE").is_eagle3()
    assert SpeculativeAlgorithm.from_string("EAGLE").is_eagle()
    with pytest.raises(ValueError, match="Unknown speculative algorithm name"):
        SpeculativeAlgorithm.from_string("EAGLE4")
