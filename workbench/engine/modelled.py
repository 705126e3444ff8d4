"""SGLang 0.5.23's facts as shipped tables: what the rules use when the engine source on the box
cannot be read (or for facts not yet read from it). Each table names the file of the 0.5.23
source it was read from (the published ``sglang==0.5.23`` wheel); evidence built from these
says "modelled".
"""

from __future__ import annotations

from workbench.engine.flags import SGLANG_VERSION
from typing import Any

from workbench.engine.source import CaptureRule, split_captured

__all__ = [
    "SGLANG_VERSION", "MTP_TARGETS", "PAGE_TREE_BACKENDS", "MODELLED_EAGLE3_DRAFT_CLASSES",
    "MODELLED_FIRST_ID_1_TARGETS", "MODELLED_SPEC_ALGORITHMS", "DRAFT_CLASS_FILES", "LEGACY_NAME_MAP", "STACKED",
    "MODELLED_ENGINE", "modelled_capture",
]


#: Targets whose checkpoint supplies its own MTP draft: with no draft path the engine uses the
#: target path (SGLang 0.5.23 ``srt/arg_groups/speculative_hook.py`` ``_handle_eagle_family``).
MTP_TARGETS = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})
#: Attention backends implementing topk > 1 with page_size > 1 (0.5.23 ``_PAGE_TREE_SPEC_BACKENDS``).
PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")
#: Fallback facts (SGLang 0.5.23) used when the engine source is not on the box.
MODELLED_EAGLE3_DRAFT_CLASSES = ("LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM")
MODELLED_FIRST_ID_1_TARGETS = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"})


def modelled_capture(target_arch: str, num_layers: int, ids: Any) -> CaptureRule:
    """SGLang 0.5.23's offset rule without the source: ``[2, L//2, L-3]`` for no ids; +1 when
    ``ids[0] == 1`` for DeepSeek-family targets (``deepseek_v2.py``, Kimi-K2.5 delegating to it);
    +1 always otherwise (``llama.py``). ``ids`` as the engine passes them (the config's JSON value
    unchanged): the same expressions run on them, so ids the engine fails on (``"1" + 1``) give a
    rule with ``error`` set (``TypeError: ...``) and entries no layer index equals are
    ``unmatchable`` (:func:`workbench.engine.source.split_captured`)."""
    src = f"modelled: sglang {SGLANG_VERSION} (engine source not on the box)"
    try:
        if ids is None:
            cap = [2, num_layers // 2, num_layers - 3]
        elif target_arch in MODELLED_FIRST_ID_1_TARGETS:
            cap = [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids)
        else:
            cap = [i + 1 for i in ids]
    except Exception as exc:  # noqa: BLE001 - what the engine's own expression raises on these ids
        return CaptureRule(None, num_layers - 1, src, "modelled", error=f"{type(exc).__name__}: {exc}")
    captured, unmatchable = split_captured(cap)
    return CaptureRule(captured, num_layers - 1, src, "modelled", unmatchable)


#: SGLang 0.5.23 srt/speculative/spec_info.py ``SpeculativeAlgorithm`` members and
#: spec_registry.py ``_RESERVED_ALIASES`` (NEXTN): the names ``from_string`` accepts without a plugin.
MODELLED_SPEC_ALGORITHMS = frozenset({"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE",
                                      "NGRAM", "NONE", "NEXTN"})


#: Where SGLang 0.5.23 defines each EAGLE-3 draft class.
DRAFT_CLASS_FILES = {"LlamaForCausalLMEagle3": "srt/models/llama_eagle3.py",
                     "Eagle3DeepseekV2ForCausalLM": "srt/models/kimi_k25_eagle3.py"}


MODELLED_ENGINE = "sglang 0.5.23 srt/models/llama_eagle3.py LlamaForCausalLMEagle3.load_weights"

#: Legacy checkpoint substrings → module names (SGLang 0.5.23 llama_eagle3.py ``legacy_name_map``,
#: applied in this order with ``str.replace``).
LEGACY_NAME_MAP = {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                   "aux_norm_high": "fc_norm.2"}
#: ``(param_name, shard_name, shard_id)`` (SGLang 0.5.23 llama_eagle3.py ``stacked_params_mapping``;
#: the first entry whose shard name is a substring wins).
STACKED = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
           (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]
