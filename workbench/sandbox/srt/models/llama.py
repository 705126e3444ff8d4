"""Target model wrapper for the sandbox box: a transformers `LlamaForCausalLM` with EAGLE-3
auxiliary hidden-state capture.

Mirrors SGLang 0.5.23, srt/models/llama.py: `set_eagle3_layers_to_capture(layer_ids)` with the
llama offset rule (None -> `[2, L//2, L-3]`; explicit ids -> `[id + 1 for id in ids]`), the
capture taken at the INPUT of decoder layer k (= the output of layer k-1, residual included),
and with capture off the draft receives the final hidden state after the norm (what SGLang's
logits processor hands to the EAGLE worker).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn


class LlamaForCausalLM(nn.Module):
    """Wraps `transformers.LlamaForCausalLM` (fp32, CPU).

    `forward(input_ids [1,T], positions [1,T], cache)` returns
    `(logits [1,T,vocab], hidden [1,T,width])` where width = hidden_size (final state after the
    norm) without capture, or `len(layers_to_capture) * hidden_size` (concatenated aux states)
    with capture on.
    """

    def __init__(self, hf_model) -> None:
        super().__init__()
        self.hf_model = hf_model
        self.config = hf_model.config
        self.capture_aux_hidden_states = False
        self.layers_to_capture: List[int] = []
        self._captured: dict = {}
        self._final_hidden: Optional[torch.Tensor] = None
        layers = hf_model.model.layers
        for i, layer in enumerate(layers):
            layer.register_forward_pre_hook(self._make_capture_hook(i), with_kwargs=True)
        hf_model.model.norm.register_forward_hook(self._norm_hook)

    @classmethod
    def from_pretrained(cls, path: str) -> "LlamaForCausalLM":
        """Load a HF Llama directory (config.json + model.safetensors) in fp32, eval mode."""
        from transformers import LlamaForCausalLM as HFLlama
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a tqdm bar on stderr would break SGLang's log format

        hf_model = HFLlama.from_pretrained(path, dtype=torch.float32)
        hf_model.eval()
        return cls(hf_model)

    # -- capture -------------------------------------------------------------------------------
    def _make_capture_hook(self, layer_index: int):
        def hook(module, args, kwargs):
            if self.capture_aux_hidden_states and layer_index in self.layers_to_capture:
                hidden = args[0] if args else kwargs["hidden_states"]
                self._captured[layer_index] = hidden
            return None

        return hook

    def _norm_hook(self, module, args, output):
        self._final_hidden = output
        return None

    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None) -> None:
        """Turn on aux capture (SGLang 0.5.23, srt/models/llama.py).

        None -> layers `[2, L//2, L-3]`; explicit ids -> `[id + 1 for id in ids]` (capture at
        the input of layer id+1, i.e. the output of layer id).
        """
        num_layers = self.config.num_hidden_layers
        if layer_ids is None:
            self.capture_aux_hidden_states = True
            self.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.capture_aux_hidden_states = True
            # we plus 1 here because in SGLang, for the ith layer, it takes the output
            # of the (i-1)th layer as aux hidden state
            self.layers_to_capture = [val + 1 for val in layer_ids]

    # -- embedding / head sharing ---------------------------------------------------------------
    def get_embed_and_head(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(embedding [vocab, H], lm_head [vocab, H]) shared with the draft."""
        return self.hf_model.model.embed_tokens.weight, self.hf_model.lm_head.weight

    def get_embed(self) -> torch.Tensor:
        """Embedding table [vocab, H]."""
        return self.hf_model.model.embed_tokens.weight

    # -- forward --------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache) -> Tuple[torch.Tensor, torch.Tensor]:
        self._captured = {}
        self._final_hidden = None
        out = self.hf_model(input_ids=input_ids, position_ids=positions, cache=cache, use_cache=True)
        logits = out.logits
        if self.capture_aux_hidden_states:
            # SGLang walks the layers in order and captures once per layer listed in
            # layers_to_capture (AuxHiddenStateList): order = layer order, duplicates collapse.
            aux = [self._captured[i] for i in sorted(self._captured)]
            hidden = torch.cat(aux, dim=-1)
        else:
            hidden = self._final_hidden
        return logits, hidden


EntryClass = [LlamaForCausalLM]
