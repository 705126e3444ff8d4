"""A second target class for the sandbox box: `GraniteForCausalLM`, WITHOUT EAGLE-3 capture.

Mirrors SGLang 0.5.23, srt/models/granite.py: `GraniteForCausalLM(nn.Module)` defines neither
`set_eagle3_layers_to_capture` (so under EAGLE3 the model runner raises at start-up:
model_runner_components/attention_backend_setup.py:55-60) nor `get_embed_and_head` (so under
EAGLE the draft worker's lm_head sharing fails at start-up with an `AttributeError`:
speculative/pp_draft_embedding.py:95). Neither is faked here: the methods are simply absent.

Loads a HF Granite directory through transformers' `GraniteForCausalLM` (fp32, CPU). With
`embedding_multiplier = residual_multiplier = logits_scaling = 1` and `attention_multiplier =
head_dim ** -0.5`, Granite computes exactly Llama, so the sandbox's Llama-format target weights
serve unchanged (`tests/testkit/faults.py`, fault `target-no-capture`). transformers' modeling
is imported here only, when a Granite target is loaded: the Llama target's path never imports it.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn


class GraniteKVCache:
    """A request's KV cache for the Granite target: transformers' `DynamicCache` (``.cache``) with
    the sandbox's crop convention (`crop(n)` removes the last n positions; transformers 5.25's
    `DynamicCache.crop` takes -n for that)."""

    def __init__(self, hf_config) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=hf_config)

    def get_seq_length(self) -> int:
        """Positions held."""
        return self.cache.get_seq_length()

    def __len__(self) -> int:
        return self.get_seq_length()

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``tokens_to_remove`` positions (0: nothing; negative: ``ValueError``)."""
        if tokens_to_remove < 0:
            raise ValueError(f"tokens_to_remove must be >= 0, got {tokens_to_remove}")
        if tokens_to_remove > 0:
            self.cache.crop(-tokens_to_remove)


class GraniteForCausalLM(nn.Module):
    """Wraps `transformers.GraniteForCausalLM` (fp32, CPU).

    `forward(input_ids [1,T], positions [1,T], cache)` returns `(logits [1,T,vocab], hidden
    [1,T,hidden])`, hidden = the final state after the norm (what the logits processor hands the
    EAGLE worker); `cache` is a `GraniteKVCache` (`new_cache()`). No aux capture, no
    embedding/head sharing: see the module docstring.
    """

    def __init__(self, hf_model) -> None:
        super().__init__()
        self.hf_model = hf_model
        self.config = hf_model.config
        self._final_hidden: Optional[torch.Tensor] = None
        hf_model.model.norm.register_forward_hook(self._norm_hook)

    @classmethod
    def from_pretrained(cls, path: str, config=None) -> "GraniteForCausalLM":
        """Load a HF Granite directory (config.json + model.safetensors) in fp32, eval mode.
        ``config`` (the config the worker read) is not used: transformers' `GraniteForCausalLM`
        reads the directory's config itself, as its `from_pretrained` does."""
        from transformers import GraniteForCausalLM as HFGranite
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a tqdm bar on stderr would break SGLang's log format
        hf_model = HFGranite.from_pretrained(path, dtype=torch.float32)
        hf_model.eval()
        return cls(hf_model)

    def new_cache(self) -> GraniteKVCache:
        """An empty KV cache for one request."""
        return GraniteKVCache(self.config)

    def _norm_hook(self, module, args, output):
        self._final_hidden = output
        return None

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: GraniteKVCache) -> Tuple[torch.Tensor, torch.Tensor]:
        self._final_hidden = None
        out = self.hf_model(input_ids=input_ids, position_ids=positions, cache=cache.cache, use_cache=True)
        return out.logits, self._final_hidden


EntryClass = [GraniteForCausalLM]
