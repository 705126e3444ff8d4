"""Reading model configs (mirrors SGLang 0.5.23, srt/utils/hf_transformers_utils.py `get_config`,
which reads them with transformers' `AutoConfig.from_pretrained`).

transformers is the reference: `get_config(path)` is `AutoConfig.from_pretrained(path)` (the
target), `get_llama_config(path)` is `LlamaConfig.from_pretrained(path)` (the draft, as the
sandbox's EAGLE worker reads it), and every error, warning and value is theirs. Importing
transformers' configuration classes costs a server start about 2 s of CPU, though (the package,
the Auto mappings, and `configuration_llama`'s import of `utils.type_validators`, which imports
`activations` and, through it, `torch.distributed.tensor`). So a config.json of the plain form
that the sandbox's own configs have is read here without transformers, into a `PlainLlamaConfig`
whose instance attributes are those transformers 5.25's `LlamaConfig` would have; anything else
goes to transformers itself. The plain form (`read_plain_llama_config`) is narrow on purpose, so
that transformers would accept the file without a log line or a warning and compute the same
values:

- a directory holding config.json, UTF-8 JSON (an object) with no `__float__` tags, and
  ``TRANSFORMERS_VERBOSITY`` unset or warning/error/critical (transformers logs its info lines
  otherwise);
- `model_type` "llama";
- keys among `LlamaConfig`'s fields, `transformers_version`, `architectures`, `dtype` /
  `torch_dtype`, the legacy `rope_theta`, and the EAGLE / sandbox keys of `EXTRA_KEYS`
  (set as plain attributes, as transformers sets unknown keys);
- each field with the exact JSON type of its annotation (an int for `int`, a float for
  `float`, ...); `initializer_range` in [0, 1]; a dtype name among float16/bfloat16/float32/
  float64;
- `hidden_size` a multiple of `num_attention_heads` (else transformers raises); `head_dim` even
  or <= 4 (else transformers raises); `*_token_id` ints inside the vocabulary (else transformers
  warns);
- RoPE: no `rope_parameters` (then `{"rope_theta": rope_theta or 10000.0, "rope_type":
  "default"}`, as `convert_rope_params_to_dict` makes it), or exactly `{"rope_theta": float,
  "rope_type": "default"}` without a top-level `rope_theta` (a float too);
- sizes (vocabulary, hidden, intermediate, layers, heads, kv heads, head_dim, positions) positive.

tests/sandbox/test_plain_config.py compares both readers (every instance attribute, no log
record) on the committed configs, every fault deployment of tests/testkit/faults.py and
configs of other forms, and checks the field table against the installed `LlamaConfig`.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Optional

CONFIG_NAME = "config.json"

#: Keys outside `LlamaConfig`'s fields that the plain form accepts: EAGLE-3 draft keys (SGLang
#: 0.5.23 srt/models/llama_eagle3.py reads them) and the sandbox's training record. transformers
#: sets each as a plain instance attribute (PreTrainedConfig.__post_init__); none of them is a
#: property, a class attribute or a generation parameter of LlamaConfig (checked by the test).
EXTRA_KEYS = frozenset({
    "eagle_config", "eagle_aux_hidden_state_layer_ids", "draft_vocab_size", "target_hidden_size",
    "num_aux_hidden_states", "bias", "norm_output", "sandbox_training",
})

_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _is_int(v: Any) -> bool:
    return type(v) is int


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


#: transformers 5.25 `LlamaConfig` fields (models/llama/configuration_llama.py): name -> (plain-form
#: check of the JSON value, default).
LLAMA_FIELDS: Dict[str, tuple] = {
    "vocab_size": (_is_int, 32000),
    "hidden_size": (_is_int, 4096),
    "intermediate_size": (_is_int, 11008),
    "num_hidden_layers": (_is_int, 32),
    "num_attention_heads": (_is_int, 32),
    "num_key_value_heads": (_opt(_is_int), None),
    "hidden_act": (lambda v: type(v) is str, "silu"),
    "max_position_embeddings": (_is_int, 2048),
    "initializer_range": (lambda v: type(v) is float and 0.0 <= v <= 1.0, 0.02),
    "rms_norm_eps": (lambda v: type(v) is float, 1e-6),
    "use_cache": (lambda v: type(v) is bool, True),
    "pad_token_id": (_opt(_is_int), None),
    "bos_token_id": (_opt(_is_int), 1),
    "eos_token_id": (_opt(lambda v: _is_int(v) or (type(v) is list and all(_is_int(x) for x in v))), 2),
    "pretraining_tp": (_opt(_is_int), 1),
    "tie_word_embeddings": (lambda v: type(v) is bool, False),
    "rope_parameters": (lambda v: True, None),  # checked on its own (`_rope_parameters`)
    "attention_bias": (lambda v: type(v) is bool, False),
    "attention_dropout": (_opt(lambda v: type(v) in (int, float)), 0.0),
    "mlp_bias": (lambda v: type(v) is bool, False),
    "head_dim": (_opt(_is_int), None),
}

#: transformers 5.25 `PreTrainedConfig` fields (configuration_utils.py) with their defaults; of
#: them the plain form accepts `transformers_version`, `architectures` and `dtype` in the JSON.
BASE_FIELDS: Dict[str, Any] = {
    "transformers_version": None, "architectures": None, "output_hidden_states": False, "return_dict": True,
    "dtype": None, "chunk_size_feed_forward": 0, "is_encoder_decoder": False, "id2label": None, "label2id": None,
    "problem_type": None,
}


class PlainLlamaConfig:
    """A Llama config.json of the plain form, read without transformers: the instance attributes
    transformers 5.25's `LlamaConfig` would have (fields with their defaults and `__post_init__`
    values, the JSON's other keys), nothing else. Built by `read_plain_llama_config`."""

    def __init__(self, attributes: Dict[str, Any]) -> None:
        self.__dict__.update(attributes)

    def __repr__(self) -> str:
        public = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return f"PlainLlamaConfig({public})"


def _rope_parameters(raw: Dict[str, Any]) -> Optional[dict]:
    """The standardised `rope_parameters` of a plain config, or None when the RoPE keys are not of
    the plain form (see the module docstring)."""
    params = raw.get("rope_parameters")
    theta = raw.get("rope_theta")
    if theta is not None and type(theta) is not float:
        return None
    if params is None:
        return {"rope_theta": 10000.0 if theta is None else theta, "rope_type": "default"}
    if "rope_theta" in raw or type(params) is not dict or set(params) != {"rope_theta", "rope_type"}:
        return None
    if params["rope_type"] != "default" or type(params["rope_theta"]) is not float:
        return None
    return dict(params)


def read_plain_llama_config(path: str, name_or_path: str = "") -> Optional[PlainLlamaConfig]:
    """``path``/config.json as a `PlainLlamaConfig` when it has the plain form (module docstring),
    else None (then transformers must read it). ``name_or_path``: what transformers would store
    as ``_name_or_path`` (AutoConfig: the path given; LlamaConfig.from_pretrained: "")."""
    if os.environ.get("TRANSFORMERS_VERBOSITY", "warning").lower() not in ("warning", "error", "critical"):
        return None
    file = os.path.join(path, CONFIG_NAME)
    if not (os.path.isdir(path) and os.path.isfile(file)):
        return None
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
        raw = json.loads(text)
    except (OSError, ValueError):
        return None
    if type(raw) is not dict or "__float__" in text or raw.get("model_type") != "llama":
        return None
    base_keys = {"model_type", "transformers_version", "architectures", "dtype", "torch_dtype", "rope_theta"}
    if any(k not in LLAMA_FIELDS and k not in base_keys and k not in EXTRA_KEYS for k in raw):
        return None
    if any(k in raw and not check(raw[k]) for k, (check, _) in LLAMA_FIELDS.items()):
        return None
    version, archs = raw.get("transformers_version"), raw.get("architectures")
    if not (version is None or type(version) is str):
        return None
    if not (archs is None or (type(archs) is list and all(type(a) is str for a in archs))):
        return None
    dtype = raw.get("dtype") if raw.get("dtype") is not None else raw.get("torch_dtype")
    if not (dtype is None or dtype in _DTYPES):
        return None
    rope = _rope_parameters(raw)
    if rope is None:
        return None
    sizes = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "max_position_embeddings")
    if any(raw.get(k) is not None and raw[k] <= 0 for k in sizes):
        return None

    attrs: Dict[str, Any] = dict(BASE_FIELDS)
    attrs.update({k: default for k, (_, default) in LLAMA_FIELDS.items()})
    attrs.update({k: raw[k] for k in ("transformers_version", "architectures") if k in raw})
    attrs.update({k: raw[k] for k in LLAMA_FIELDS if k in raw})
    # LlamaConfig.__post_init__, then PreTrainedConfig.__post_init__ (transformers 5.25)
    if attrs["head_dim"] is None:
        attrs["head_dim"] = attrs["hidden_size"] // attrs["num_attention_heads"]
    if attrs["num_key_value_heads"] is None:
        attrs["num_key_value_heads"] = attrs["num_attention_heads"]
    if dtype is not None:
        import torch

        attrs["dtype"] = getattr(torch, dtype)
    attrs["id2label"] = {0: "LABEL_0", 1: "LABEL_1"}
    attrs["label2id"] = {"LABEL_0": 0, "LABEL_1": 1}
    attrs["rope_parameters"] = rope
    attrs.update({"_name_or_path": str(name_or_path), "_output_attentions": False,
                  "_attn_implementation_internal": None, "_experts_implementation_internal": None,
                  "model_type": "llama"})
    attrs.update({k: raw[k] for k in EXTRA_KEYS if k in raw})
    attrs["_post_init_done"] = True

    # the validations that would make transformers raise or warn: leave those files to it
    head_dim, vocab = attrs["head_dim"], attrs["vocab_size"]
    if attrs["hidden_size"] % attrs["num_attention_heads"] != 0:
        return None
    if head_dim > 4 and head_dim % 2:
        return None
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = attrs[name]
        if _is_int(value) and not 0 <= value < vocab:
            return None
    return PlainLlamaConfig(attrs)


def get_config(model_path: str):
    """The target's config: as transformers' ``AutoConfig.from_pretrained(model_path)`` reads it
    (a `PlainLlamaConfig` for the plain form, else transformers' own object). Raises what
    AutoConfig raises (``OSError`` for a missing or unreadable config.json, ``ValueError`` for an
    unknown model type, ...)."""
    plain = read_plain_llama_config(model_path, name_or_path=model_path)
    if plain is not None:
        return plain
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_path)


def get_llama_config(model_path: str):
    """A draft's config: as transformers' ``LlamaConfig.from_pretrained(model_path)`` reads it
    (a `PlainLlamaConfig` for the plain form, else transformers' own object). Raises what
    LlamaConfig raises (e.g. ``ValueError: The hidden size (128) is not a multiple of the number
    of attention heads (5).``)."""
    plain = read_plain_llama_config(model_path)
    if plain is not None:
        return plain
    from transformers import LlamaConfig

    return LlamaConfig.from_pretrained(model_path)
