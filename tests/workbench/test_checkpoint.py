import json
import os

import numpy as np
import pytest

from workbench.checkpoint import (
    CheckpointUnreadable,
    ConfigUnreadable,
    MAX_HEADER_SIZE,
    TensorNotFound,
    read_checkpoint_tensors,
    read_draft_facts,
    read_json_config,
    read_safetensors_header,
    read_target_facts,
    read_tensor,
)
from workbench_test_helpers import fixture_config, write_raw, write_sparse_safetensors

KIMI_DRAFT = "sgl-project__SpecForge__configs_kimi-k2-eagle3.json"


def test_read_json_config_errors(box, tmp_path):
    with pytest.raises(ConfigUnreadable, match="not found.*config.json"):
        read_json_config(box, str(tmp_path))
    (tmp_path / "config.json").write_text('{"hidden_size": 7168,\n "x": }')
    with pytest.raises(ConfigUnreadable, match=r"not valid JSON .*line 2, column 7.*config.json"):
        read_json_config(box, str(tmp_path / "config.json"))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigUnreadable, match="JSON list, not an object"):
        read_json_config(box, str(tmp_path))
    (tmp_path / "config.json").write_text('{"hidden_size": 7168}')
    assert read_json_config(box, str(tmp_path)) == {"hidden_size": 7168}


def test_sparse_21504_wide_fc_header(box, tmp_path):
    f = tmp_path / "model.safetensors"
    size = write_sparse_safetensors(
        f, {"fc.weight": ("BF16", (7168, 21504)), "midlayer.hidden_norm.weight": ("BF16", (7168,))},
        metadata={"format": "pt"},
    )
    assert size > 7168 * 21504 * 2
    assert os.stat(f).st_blocks * 512 < 1 << 20  # sparse: the hole costs nothing
    h = read_safetensors_header(box, str(f))
    assert h["fc.weight"].shape == (7168, 21504)
    assert h["fc.weight"].dtype == "BF16"
    assert h["fc.weight"].data_offsets == (0, 7168 * 21504 * 2)
    assert h["midlayer.hidden_norm.weight"].data_offsets == (7168 * 21504 * 2, 7168 * 21504 * 2 + 7168 * 2)
    assert h.metadata == {"format": "pt"}
    assert h.file_size == size
    assert set(h) == {"fc.weight", "midlayer.hidden_norm.weight"}


@pytest.mark.parametrize(
    "make,reason",
    [
        (lambda p: p.write_bytes(b"\x01\x00"), "truncated"),
        (lambda p: write_raw(p, b'{"a": 1}', length=4096), "truncated"),
        (lambda p: write_raw(p, b"", length=MAX_HEADER_SIZE + 1), "header-too-large"),
        (lambda p: write_raw(p, b"not json at all"), "not-json"),
        (lambda p: write_raw(p, json.dumps({"w": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}}).encode(),
                             extra=b"\0\0"), "unknown-dtype"),
        (lambda p: write_raw(p, json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode(),
                             extra=b"\0" * 8), "offsets-past-end"),
        (lambda p: write_raw(p, json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}).encode(),
                             extra=b"\0" * 16), "size-mismatch"),
    ],
)
def test_header_validation(box, tmp_path, make, reason):
    p = tmp_path / "bad.safetensors"
    make(p)
    with pytest.raises(CheckpointUnreadable) as ei:
        read_safetensors_header(box, str(p))
    assert ei.value.reason == reason
    assert str(p) in str(ei.value)


def test_missing_file(box, tmp_path):
    with pytest.raises(CheckpointUnreadable) as ei:
        read_safetensors_header(box, str(tmp_path / "nope.safetensors"))
    assert ei.value.reason == "missing"


def test_read_tensor_dtypes(box, tmp_path):
    d2t = np.array([0, 5, 5, 9, 120], dtype=np.int64)
    t2d = np.zeros(16, dtype=bool)
    t2d[[0, 6, 7, 12]] = True
    f32 = np.array([[1.5, -2.0], [3.25, 0.0]], dtype=np.float32)
    bf16 = (np.array([1.0, -2.5, 3.0], dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    f = tmp_path / "model.safetensors"
    write_sparse_safetensors(
        f, {"d2t": ("I64", (5,)), "t2d": ("BOOL", (16,)), "w": ("F32", (2, 2)), "b": ("BF16", (3,)),
            "fc.weight": ("BF16", (64, 192))},
        data={"d2t": d2t, "t2d": t2d, "w": f32, "b": bf16},
    )
    assert read_tensor(box, str(f), "d2t").tolist() == [0, 5, 5, 9, 120]
    assert read_tensor(box, str(f), "d2t").dtype == np.int64
    assert np.flatnonzero(read_tensor(box, str(f), "t2d")).tolist() == [0, 6, 7, 12]
    assert read_tensor(box, str(f), "w").tolist() == [[1.5, -2.0], [3.25, 0.0]]
    assert read_tensor(box, str(f), "b").tolist() == [1.0, -2.5, 3.0]
    assert read_tensor(box, str(tmp_path), "d2t").tolist() == [0, 5, 5, 9, 120]  # via the directory
    with pytest.raises(TensorNotFound, match="'lm_head.weight'"):
        read_tensor(box, str(f), "lm_head.weight")


def test_sharded_checkpoint(box, tmp_path):
    write_sparse_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"model.fc.weight": ("BF16", (4096, 12288))})
    write_sparse_safetensors(tmp_path / "model-00002-of-00002.safetensors",
                             {"d2t": ("I64", (8,))}, data={"d2t": np.arange(8, dtype=np.int64)})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {}, "weight_map": {"model.fc.weight": "model-00001-of-00002.safetensors",
                                       "d2t": "model-00002-of-00002.safetensors"}}))
    tensors = read_checkpoint_tensors(box, str(tmp_path))
    assert tensors["model.fc.weight"].file.endswith("model-00001-of-00002.safetensors")
    assert read_tensor(box, str(tmp_path), "d2t").tolist() == list(range(8))
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096}))
    facts = read_draft_facts(box, str(tmp_path))
    assert facts.fc_weight_name == "model.fc.weight"
    assert facts.fc_in_features == 12288 and facts.fc_out_features == 4096
    # an index that points at a shard lacking the tensor
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"d2t": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(CheckpointUnreadable) as ei:
        read_checkpoint_tensors(box, str(tmp_path))
    assert ei.value.reason == "bad-index"


def test_draft_facts_kimi_fixture(box, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(fixture_config(KIMI_DRAFT)))
    write_sparse_safetensors(tmp_path / "model.safetensors", {
        "fc.weight": ("BF16", (7168, 21504)), "d2t": ("I64", (32000,)), "t2d": ("BOOL", (163840,)),
        "midlayer.self_attn.q_proj.weight": ("BF16", (8192, 14336)), "lm_head.weight": ("BF16", (32000, 7168))})
    f = read_draft_facts(box, str(tmp_path))
    assert f.architectures == ["LlamaForCausalLMEagle3"]
    assert f.hidden_size == 7168 and f.target_hidden_size is None and f.effective_target_hidden_size == 7168
    assert f.aux_layer_ids == [2, 30, 58] and f.aux_layer_ids_top_level is None
    assert f.use_aux_hidden_state is True
    assert (f.vocab_size, f.draft_vocab_size, f.num_hidden_layers) == (163840, 32000, 1)
    assert f.fc_in_features == 21504
    assert f.eagle3_signals(7168)["fc_in_features_multiple"] == 3
    assert f.is_eagle3_like and not f.is_eagle1_like
    assert f.sources["fc_in_features"].endswith("model.safetensors: fc.weight shape [7168, 21504]")
    assert f.sources["aux_layer_ids"].endswith("config.json: eagle_config.eagle_aux_hidden_state_layer_ids")
    assert f.checkpoint_error is None


def test_draft_facts_speculators_format(box, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(fixture_config("vllm-project__speculators__issues_796_comment-config.json")))
    (tmp_path / "model.safetensors").write_bytes(b"\x00")  # unreadable: recorded, not raised
    f = read_draft_facts(box, str(tmp_path))
    assert f.hidden_size == 12288
    assert f.sources["hidden_size"].endswith("transformer_layer_config.hidden_size")
    assert f.target_hidden_size is None
    assert f.aux_layer_ids is None and f.aux_layer_ids_top_level == [2, 44, 85]
    assert f.has_eagle3_architecture  # Eagle3DraftModel
    assert f.tensors is None and f.checkpoint_error.reason == "truncated"


def test_draft_facts_eagle1(box, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(fixture_config("SafeAILab__EAGLE__eagle_train_EAGLE-LLaMA3-Instruct-8B.json")))
    write_sparse_safetensors(tmp_path / "model.safetensors", {"fc.weight": ("F16", (4096, 8192)),
                                                             "layers.0.self_attn.q_proj.weight": ("F16", (4096, 4096))})
    f = read_draft_facts(box, str(tmp_path))
    assert f.fc_in_features == 8192 and f.is_eagle1_like and not f.is_eagle3_like
    assert f.eagle3_signals(4096) == {}


def test_target_facts_text_config(box, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "text_config": {"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840}}))
    t = read_target_facts(box, str(tmp_path))
    assert (t.hidden_size, t.num_hidden_layers, t.vocab_size) == (7168, 61, 163840)
    assert t.text_config_used
    assert t.sources["hidden_size"].endswith("config.json: text_config.hidden_size")
    with pytest.raises(ConfigUnreadable):
        read_target_facts(box, str(tmp_path / "absent"))
