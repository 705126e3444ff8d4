"""The sandbox's target model: a compact PyTorch Llama decoder with EAGLE-3 auxiliary hidden-state
capture, loaded from a Hugging Face Llama directory (config.json + model.safetensors) by tensor name.

Its own implementation, as SGLang's is (SGLang 0.5.23, srt/models/llama.py is SGLang's code, not
transformers'); the server's start path imports no transformers modeling code. The arithmetic
mirrors transformers 5.25, models/llama/modeling_llama.py `LlamaForCausalLM` with the `sdpa`
attention (integrations/sdpa_attention.py) and the causal mask of masking_utils.py
`create_causal_mask`, op for op in fp32, so logits and hidden states are bitwise equal to
transformers' (tests/sandbox/test_native_llama.py checks it against `LlamaForCausalLM`):

- RMSNorm: `weight * (x * rsqrt(mean(x ** 2) + eps))` (`LlamaRMSNorm`);
- RoPE: `inv_freq = 1 / theta ** (arange(0, d, 2) / d)`, `cos/sin` of `cat([p * inv_freq] * 2)`,
  `rotate_half` (`LlamaRotaryEmbedding`, default rope type; theta from `rope_parameters`, else the
  legacy top-level `rope_theta`, else 10000);
- attention: separate q/k/v/o projections (`attention_bias`), `scaled_dot_product_attention` with
  `scale = head_dim ** -0.5`; no mask and `is_causal` for a prefill (or a one-token step, then
  not causal), a boolean mask `kv_idx <= q_idx + past` for a multi-token extend over a cache (a
  verify step); GQA through `enable_gqa` without a mask, else `repeat_kv` (`num_key_value_heads`);
- MLP: `down(silu(gate(x)) * up(x))` (`mlp_bias`); `tie_word_embeddings` shares the embedding
  with `lm_head`.

Mirrors SGLang 0.5.23, srt/models/llama.py in what the EAGLE-3 path reads:
`set_eagle3_layers_to_capture(layer_ids)` with the llama offset rule (None -> `[2, L//2, L-3]`;
explicit ids -> `[id + 1 for id in ids]`), the capture taken at the INPUT of decoder layer k (= the
output of layer k-1, residual included), tested in the layer loop of the forward; with capture off
the draft receives the final hidden state after the norm (what SGLang's logits processor hands to
the EAGLE worker). `load_weights` as SGLang's: a checkpoint name matching no parameter is skipped,
a shape mismatch fails in `default_weight_loader`'s assert; activations other than SiLU are
refused as SGLang's `LlamaMLP` refuses them.

The target's KV cache (`KVCache`) belongs to one request; the EAGLE worker crops the rejected
draft positions from it after each verify step (`KVCache.crop`).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)


class KVCache:
    """A request's target KV cache: per decoder layer, keys and values [B, kv_heads, T, head_dim].

    Stands in for SGLang's KV pool (srt/mem_cache/memory_pool.py) with transformers 5.25's
    `DynamicLayer` arithmetic (cache_utils.py): a layer starts as an empty tensor and grows by
    `torch.cat` along the sequence axis, so the attention reads the same tensors as transformers'.
    """

    def __init__(self, num_layers: int) -> None:
        self.keys: List[Optional[torch.Tensor]] = [None] * num_layers
        self.values: List[Optional[torch.Tensor]] = [None] * num_layers

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Positions held by layer ``layer_idx`` (0 before the first update)."""
        keys = self.keys[layer_idx]
        return 0 if keys is None or keys.numel() == 0 else keys.shape[-2]

    def __len__(self) -> int:
        return self.get_seq_length()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Append new keys/values [B, kv_heads, t, head_dim] to layer ``layer_idx``; returns the
        layer's full keys and values [B, kv_heads, past + t, head_dim]."""
        if self.keys[layer_idx] is None:
            self.keys[layer_idx] = torch.tensor([], dtype=key_states.dtype, device=key_states.device)
            self.values[layer_idx] = torch.tensor([], dtype=value_states.dtype, device=value_states.device)
        self.keys[layer_idx] = torch.cat([self.keys[layer_idx], key_states], dim=-2)
        self.values[layer_idx] = torch.cat([self.values[layer_idx], value_states], dim=-2)
        return self.keys[layer_idx], self.values[layer_idx]

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``tokens_to_remove`` positions of every layer (the rejected draft tokens
        of a verify step). 0 changes nothing; raises ``ValueError`` for a negative count."""
        if tokens_to_remove < 0:
            raise ValueError(f"tokens_to_remove must be >= 0, got {tokens_to_remove}")
        if tokens_to_remove == 0:
            return
        for i, keys in enumerate(self.keys):
            if keys is not None:
                self.keys[i] = keys[..., :-tokens_to_remove, :]
                self.values[i] = self.values[i][..., :-tokens_to_remove, :]


def rope_parameters_of(config) -> dict:
    """``{"rope_type", "rope_theta", ...}`` of a Llama config: its ``rope_parameters`` (transformers
    5 keeps the RoPE settings there), else the legacy top-level ``rope_theta`` (default 10000.0) with
    ``rope_scaling``'s settings, as transformers 5.25's `convert_rope_params_to_dict` standardises
    them (modeling_rope_utils.py)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        out = dict(params)
    else:
        out = dict(getattr(config, "rope_scaling", None) or {})
        out["rope_theta"] = getattr(config, "rope_theta", None) or 10000.0
    out.setdefault("rope_type", out.pop("type", "default"))
    return out


class LlamaRotaryEmbedding(nn.Module):
    """cos/sin tables for positions (transformers 5.25 `LlamaRotaryEmbedding`, default rope type).

    ``forward(x, position_ids [B, T])`` -> (cos, sin), each [B, T, head_dim] in ``x``'s dtype.
    Raises ``ValueError`` at construction for any other rope type (linear, llama3, yarn, dynamic,
    ...): the sandbox implements the default RoPE only.
    """

    def __init__(self, config) -> None:
        super().__init__()
        params = rope_parameters_of(config)
        if params["rope_type"] != "default":
            raise ValueError(f"rope_type {params['rope_type']!r} is not implemented by the sandbox's Llama target "
                             "(default RoPE only)")
        base = float(params["rope_theta"])
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.attention_scaling = 1.0
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[..., d] -> cat(-x[..., d/2:], x[..., :d/2])."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """q [B, heads, T, d], k [B, kv_heads, T, d], cos/sin [B, T, d] -> rotated (q, k)."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, kv_heads, T, d] -> [B, kv_heads * n_rep, T, d], each kv head repeated n_rep times."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def causal_mask(q_length: int, past: int, device=None) -> Optional[torch.Tensor]:
    """The attention mask transformers 5.25 builds for `sdpa` with a cache holding ``past``
    positions (masking_utils.py `sdpa_mask`, `_ignore_causal_mask_sdpa`): ``None`` for a single
    query or an empty cache (the attention then relies on `is_causal`), else a boolean
    [1, 1, q_length, past + q_length] that lets query i see keys 0..past + i."""
    if q_length == 1 or past == 0:
        return None
    q_idx = torch.arange(q_length, device=device) + past
    kv_idx = torch.arange(past + q_length, device=device)
    mask = kv_idx[None, None, None, :] <= q_idx[None, None, :, None]
    return mask.expand(1, -1, q_length, past + q_length)


class RMSNorm(nn.Module):
    """RMSNorm as transformers 5.25 `LlamaRMSNorm` computes it (fp32). x [..., hidden]."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class _Linear(nn.Linear):
    """``nn.Linear`` with uninitialised storage: its weights come from the checkpoint (a parameter
    the checkpoint lacks is initialised by `LlamaForCausalLM.from_pretrained`)."""

    def reset_parameters(self) -> None:
        pass


class _Embedding(nn.Embedding):
    """``nn.Embedding`` with uninitialised storage (see `_Linear`)."""

    def reset_parameters(self) -> None:
        pass


def _linear(in_features: int, out_features: int, bias: bool) -> nn.Linear:
    return _Linear(in_features, out_features, bias=bias)


class LlamaMLP(nn.Module):
    """SiLU-gated MLP: down(silu(gate(x)) * up(x)). [B, T, H] -> [B, T, H]. Raises ``ValueError``
    for an activation other than SiLU (SGLang 0.5.23 srt/models/llama.py `LlamaMLP`, same text)."""

    def __init__(self, config) -> None:
        super().__init__()
        hidden_act = getattr(config, "hidden_act", "silu")
        if hidden_act != "silu":
            raise ValueError(f"Unsupported activation: {hidden_act}. Only silu is supported for now.")
        bias = bool(getattr(config, "mlp_bias", False))
        self.gate_proj = _linear(config.hidden_size, config.intermediate_size, bias)
        self.up_proj = _linear(config.hidden_size, config.intermediate_size, bias)
        self.down_proj = _linear(config.intermediate_size, config.hidden_size, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaAttention(nn.Module):
    """Causal self-attention with RoPE and GQA (transformers 5.25 `LlamaAttention` +
    `sdpa_attention_forward`). [B, T, H] -> [B, T, H]; appends this layer's keys/values to the cache."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        bias = bool(getattr(config, "attention_bias", False))
        self.q_proj = _linear(config.hidden_size, self.num_heads * self.head_dim, bias)
        self.k_proj = _linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias)
        self.v_proj = _linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias)
        self.o_proj = _linear(self.num_heads * self.head_dim, config.hidden_size, bias)

    def forward(self, hidden_states: torch.Tensor, position_embeddings: Tuple[torch.Tensor, torch.Tensor],
                attention_mask: Optional[torch.Tensor], cache: KVCache) -> torch.Tensor:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)  # [B, heads, T, d]
        key = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)  # [B, kv_heads, T, d]
        value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query, key = apply_rotary_pos_emb(query, key, cos, sin)
        key, value = cache.update(key, value, self.layer_idx)  # [B, kv_heads, past + T, d]

        # transformers 5.25 integrations/sdpa_attention.py, on CPU
        sdpa_kwargs = {}
        q_length = query.shape[2]
        if self.num_key_value_groups > 1:
            if attention_mask is None and key.shape[-1] == value.shape[-1] <= 256:
                sdpa_kwargs["enable_gqa"] = True
            elif q_length == 1:  # pack_gqa: one query token, attention over the kv heads directly
                query = query.reshape(query.shape[0], self.num_heads // self.num_key_value_groups,
                                      self.num_key_value_groups, query.shape[-1])
            else:
                key = repeat_kv(key, self.num_key_value_groups)
                value = repeat_kv(value, self.num_key_value_groups)
        is_causal = q_length > 1 and attention_mask is None
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=0.0,
                                             scale=self.scaling, is_causal=is_causal, **sdpa_kwargs)
        out = out.reshape(out.shape[0], -1, q_length, value.shape[-1])
        out = out.transpose(1, 2).contiguous()  # [B, T, heads, d]
        out = out.reshape(*input_shape, -1).contiguous()
        return self.o_proj(out)


class LlamaDecoderLayer(nn.Module):
    """Pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(.)). [B, T, H] -> [B, T, H]
    (the full residual stream, as transformers 5.25's `LlamaDecoderLayer` returns it)."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        eps = getattr(config, "rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=eps)

    def forward(self, hidden_states: torch.Tensor, position_embeddings, attention_mask, cache: KVCache) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask, cache)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaModel(nn.Module):
    """The trunk: `embed_tokens` [vocab, H], `layers`, `norm`, and the RoPE tables (checkpoint
    names `model.*`). Run by `LlamaForCausalLM.forward`, which holds the capture test."""

    def __init__(self, config) -> None:
        super().__init__()
        self.embed_tokens = _Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=getattr(config, "rms_norm_eps", 1e-6))
        self.rotary_emb = LlamaRotaryEmbedding(config)


class LlamaForCausalLM(nn.Module):
    """The Llama target (fp32, CPU) with SGLang's EAGLE-3 capture.

    `forward(input_ids [B,T], positions [B,T], cache)` returns `(logits [B,T,vocab], hidden
    [B,T,width])` where width = hidden_size (final state after the norm) without capture, or
    `len(captured layers) * hidden_size` (the captured states concatenated in layer order) with
    capture on. `cache` is this model's `KVCache` (`new_cache()`), extended by the forward.
    """

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        if getattr(config, "tie_word_embeddings", False):
            self.lm_head = _linear(config.hidden_size, config.vocab_size, False)
            self.lm_head.weight = self.model.embed_tokens.weight
        else:
            self.lm_head = _linear(config.hidden_size, config.vocab_size, False)
        self.capture_aux_hidden_states = False
        self.layers_to_capture: List[int] = []

    @classmethod
    def from_pretrained(cls, path: str, config=None) -> "LlamaForCausalLM":
        """Build from ``config`` (default: ``path``/config.json read with transformers' AutoConfig)
        and load ``path``'s safetensors weights (``model.safetensors``, or the shards of
        ``model.safetensors.index.json``) by name (`load_weights`), fp32, eval mode. Raises
        ``FileNotFoundError`` when the directory has neither file."""
        from safetensors import safe_open

        if config is None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(path)
        model = cls(config)
        single = os.path.join(path, "model.safetensors")
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(single):
            files = [single]
        elif os.path.exists(index):
            with open(index) as f:
                files = [os.path.join(path, name) for name in sorted(set(json.load(f)["weight_map"].values()))]
        else:
            raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {path}")
        loaded = set()
        for file in files:
            with safe_open(file, framework="pt") as f:
                loaded |= model.load_weights((name, f.get_tensor(name)) for name in f.keys())
        model.init_missing_weights(loaded)
        return model.eval()

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> set:
        """Copy checkpoint tensors into the parameters of the same name (converted to fp32);
        returns the names of the parameters loaded.

        As SGLang 0.5.23's `LlamaForCausalLM.load_weights`: rotary `inv_freq` buffers are skipped,
        so is `lm_head.weight` when the embeddings are tied, and a name matching no parameter is
        dropped; a tensor whose shape differs from its parameter's raises `AssertionError` in
        `default_weight_loader` ("Attempted to load weight (...) into parameter (...)").
        """
        from workbench.sandbox.srt.model_loader.weight_utils import default_weight_loader

        params_dict = dict(self.named_parameters())
        loaded = set()
        for name, loaded_weight in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if name == "lm_head.weight" and getattr(self.config, "tie_word_embeddings", False):
                continue
            if name in params_dict:
                with torch.no_grad():
                    default_weight_loader(params_dict[name], loaded_weight)
                loaded.add(name)
        return loaded

    @torch.no_grad()
    def init_missing_weights(self, loaded: set) -> None:
        """Initialise the parameters no checkpoint tensor reached as transformers 5.25's
        `PreTrainedModel._init_weights` does (modeling_utils.py: linear and embedding weights
        normal(0, initializer_range), biases 0, norm weights 1) and log one warning naming them
        (transformers prints its load report instead; SGLang leaves them uninitialised)."""
        missing = [name for name, _ in self.named_parameters() if name not in loaded]
        if not missing:
            return
        std = getattr(self.config, "initializer_range", None) or 0.02
        for name, param in self.named_parameters():
            if name in missing:
                if name.endswith("norm.weight"):
                    param.fill_(1.0)
                elif name.endswith(".bias"):
                    param.zero_()
                else:
                    param.normal_(mean=0.0, std=std)
        logger.warning(f"Parameters missing from the checkpoint, initialised as transformers initialises them: {missing}")

    def new_cache(self) -> KVCache:
        """An empty KV cache for one request."""
        return KVCache(len(self.model.layers))

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
        return self.model.embed_tokens.weight, self.lm_head.weight

    def get_embed(self) -> torch.Tensor:
        """Embedding table [vocab, H]."""
        return self.model.embed_tokens.weight

    # -- forward --------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> Tuple[torch.Tensor, torch.Tensor]:
        model = self.model
        hidden_states = model.embed_tokens(input_ids)  # [B, T, H]
        position_embeddings = model.rotary_emb(hidden_states, positions)
        attention_mask = causal_mask(input_ids.shape[1], cache.get_seq_length(), hidden_states.device)
        aux_hidden_states = []
        for layer_index, layer in enumerate(model.layers):
            # SGLang walks the layers in order and captures once per layer listed in
            # layers_to_capture (AuxHiddenStateList): order = layer order, duplicates collapse.
            if self.capture_aux_hidden_states and layer_index in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(hidden_states, position_embeddings, attention_mask, cache)
        hidden_states = model.norm(hidden_states)
        logits = self.lm_head(hidden_states)
        if self.capture_aux_hidden_states:
            return logits, torch.cat(aux_hidden_states, dim=-1)
        return logits, hidden_states


EntryClass = [LlamaForCausalLM]
