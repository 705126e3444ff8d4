"""EAGLE-3 draft model (`LlamaForCausalLMEagle3`) for the sandbox box.

Mirrors SGLang 0.5.23, srt/models/llama_eagle3.py: the same module names (`model.fc`,
`model.layers.0.{hidden_norm,input_layernorm,self_attn.qkv_proj,...}`, `model.norm`, `lm_head`),
the same forward (including the silent width check that skips `fc`), and the same
`load_weights` renames (legacy `midlayer` -> `layers.0`, stacked q/k/v -> `qkv_proj`,
gate/up -> `gate_up_proj`, a name tried as-is then with a `model.` prefix, names matching no
parameter dropped silently, `d2t` -> `hot_token_id = d2t + arange`, `t2d` skipped).

Plain PyTorch on CPU, fp32, batch size 1 in the server (any batch in the math). The attention
keeps its own KV cache (`DraftKVCache`) the way SGLang's draft keeps its own KV pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


# --------------------------------------------------------------------------------------------
# Small building blocks (shared with the trainer so training and serving run the same math)
# --------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """RMSNorm with SGLang's fused-residual calling convention.

    Mirrors SGLang 0.5.23, srt/layers/layernorm.py `RMSNorm.forward`: `norm(x)` returns the
    normalised tensor; `norm(x, residual)` first sets `x = x + residual`, then returns
    `(norm(x), x)`. Shapes: x [..., hidden].
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        if residual is None:
            return self._norm(x)
        x = x + residual
        return self._norm(x), x


def rope_theta_of(config) -> float:
    """The RoPE base of a HF Llama config (transformers 5 keeps it in `rope_parameters`)."""
    rope_parameters = getattr(config, "rope_parameters", None) or {}
    if isinstance(rope_parameters, dict) and "rope_theta" in rope_parameters:
        return float(rope_parameters["rope_theta"])
    return float(getattr(config, "rope_theta", 10000.0) or 10000.0)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables for `positions` (any shape [...]) -> two tensors [..., head_dim].

    Same layout as HF Llama's default RoPE (`rotate_half` convention).
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32)[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, heads, T, head_dim] with cos/sin [B, T, head_dim] (rotate_half convention)."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


# --------------------------------------------------------------------------------------------
# Runtime plumbing (stand-ins for SGLang's ForwardBatch / spec_info / KV pool)
# --------------------------------------------------------------------------------------------
class DraftKVCache:
    """The draft's own KV cache: one layer, tensors [B, kv_heads, T, head_dim].

    Stands in for the draft KV pool SGLang allocates (srt/mem_cache). `crop(n)` removes the last
    n positions (the speculative entries written by draft decode steps).
    """

    def __init__(self) -> None:
        self.k: Optional[torch.Tensor] = None
        self.v: Optional[torch.Tensor] = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Append new keys/values [B, kv, t, d]; return the full cached keys/values."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last `tokens_to_remove` positions."""
        if tokens_to_remove <= 0 or self.k is None:
            return
        keep = self.k.shape[2] - tokens_to_remove
        self.k = self.k[:, :, :keep]
        self.v = self.v[:, :, :keep]


@dataclass
class SpecInput:
    """What the target hands the draft (SGLang 0.5.23, srt/speculative/eagle_info.py
    `EagleDraftInput.hidden_states`): [B, T, width], width = hidden (EAGLE, or the draft's own
    state on later steps) or num_aux x target_hidden (EAGLE3 aux capture)."""

    hidden_states: torch.Tensor


@dataclass
class ForwardBatch:
    """Minimal stand-in for SGLang's `ForwardBatch` (srt/model_executor/forward_batch_info.py)."""

    spec_info: SpecInput
    kv_cache: DraftKVCache = field(default_factory=DraftKVCache)


# --------------------------------------------------------------------------------------------
# The draft model, with SGLang's module names
# --------------------------------------------------------------------------------------------
class LlamaAttention(nn.Module):
    """Llama attention with a stacked `qkv_proj` (SGLang's QKVParallelLinear layout:
    rows [q (heads*d) | k (kv*d) | v (kv*d)]). Input [B, T, in_width], output [B, T, hidden]."""

    def __init__(self, config, in_width: int) -> None:
        super().__init__()
        self.hidden_size = config.hidden_size
        self.total_num_heads = config.num_attention_heads
        self.total_num_kv_heads = getattr(config, "num_key_value_heads", None) or self.total_num_heads
        self.head_dim = getattr(config, "head_dim", None) or self.hidden_size // self.total_num_heads
        self.q_size = self.total_num_heads * self.head_dim
        self.kv_size = self.total_num_kv_heads * self.head_dim
        self.rope_theta = rope_theta_of(config)
        self.qkv_proj = nn.Linear(in_width, self.q_size + 2 * self.kv_size, bias=False)
        self.o_proj = nn.Linear(self.q_size, self.hidden_size, bias=False)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, forward_batch: ForwardBatch) -> torch.Tensor:
        B, T, _ = hidden_states.shape
        qkv = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(B, T, self.total_num_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.total_num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.total_num_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        past = len(forward_batch.kv_cache)
        keys, values = forward_batch.kv_cache.append(k, v)
        total = keys.shape[2]
        if self.total_num_kv_heads != self.total_num_heads:
            rep = self.total_num_heads // self.total_num_kv_heads
            keys = keys.repeat_interleave(rep, dim=1)
            values = values.repeat_interleave(rep, dim=1)
        # new token j (absolute index past + j) sees cached keys 0..past + j
        mask = torch.arange(total)[None, :] <= (past + torch.arange(T))[:, None]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        out = out.transpose(1, 2).reshape(B, T, self.q_size)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    """SiLU-gated MLP with SGLang's stacked `gate_up_proj` ([gate; up] rows). [B,T,H] -> [B,T,H]."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    """The EAGLE-3 midlayer (SGLang 0.5.23, srt/models/llama_eagle3.py `LlamaDecoderLayer`).

    Layer 0 reads `cat[input_layernorm(embeds), hidden_norm(hidden_states)]` (width 2*hidden)
    into qkv. Inputs: embeds [B,T,H], hidden_states [B,T,H]; returns (hidden_states, residual).
    """

    def __init__(self, config, layer_id: int = 0) -> None:
        super().__init__()
        self.hidden_size = config.hidden_size
        self.is_input_layer = layer_id == 0
        in_width = 2 * self.hidden_size if self.is_input_layer else self.hidden_size
        eps = getattr(config, "rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(config, in_width)
        self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size)
        self.hidden_norm = RMSNorm(config.hidden_size, eps=eps)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=eps)

    def forward(self, positions, embeds, hidden_states, forward_batch, residual):
        if self.is_input_layer:
            residual = hidden_states
            hidden_states = self.hidden_norm(hidden_states)
            embeds = self.input_layernorm(embeds)
            hidden_states = torch.cat([embeds, hidden_states], dim=-1)
        else:
            hidden_states, residual = self.hidden_norm(hidden_states, residual)

        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states, forward_batch=forward_batch)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class LlamaModel(nn.Module):
    """Draft trunk: embed_tokens (shared from the target), fc, one midlayer, norm.

    Mirrors SGLang 0.5.23, srt/models/llama_eagle3.py `LlamaModel`: `fc` maps
    `target_hidden_size * num_aux_hidden_states` -> `hidden_size`; num_aux resolution: explicit
    `num_aux_hidden_states` > `len(eagle_config.eagle_aux_hidden_state_layer_ids)` > 3.
    """

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)

        if hasattr(config, "target_hidden_size"):
            self.hidden_size_in = config.target_hidden_size
        else:
            self.hidden_size_in = config.hidden_size

        self.num_aux_hidden_states = getattr(config, "num_aux_hidden_states", None)
        if self.num_aux_hidden_states is None:
            eagle_config = getattr(config, "eagle_config", None) or {}
            layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
            self.num_aux_hidden_states = len(layer_ids) if layer_ids else 3

        self.fc = torch.nn.Linear(
            self.hidden_size_in * self.num_aux_hidden_states,
            config.hidden_size,
            bias=getattr(config, "bias", False),
        )
        self.input_norm = None  # norm_before_fc: not used by the sandbox checkpoints
        self.fc_norm = None  # fc_norm / use_aux_norm: not used by the sandbox checkpoints
        self.layers = nn.ModuleList([LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=getattr(config, "rms_norm_eps", 1e-6))
        self.norm_output = getattr(config, "norm_output", False)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        forward_batch: ForwardBatch,
        input_embeds: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """input_ids/positions [B, T]; spec_info.hidden_states [B, T, width].

        Returns (hidden for logits [B,T,H] after norm, [aux hidden [B,T,H] before norm]).
        """
        if input_embeds is None:
            embeds = self.embed_tokens(input_ids)
        else:
            embeds = input_embeds

        hidden_states = forward_batch.spec_info.hidden_states
        if hidden_states.shape[-1] != embeds.shape[-1]:
            if self.input_norm is not None:
                hidden_states = self.input_norm(hidden_states)
            if self.fc_norm is not None:
                chunks = hidden_states.chunk(self.num_aux_hidden_states, dim=-1)
                hidden_states = torch.cat([norm(chunk) for norm, chunk in zip(self.fc_norm, chunks)], dim=-1)
            hidden_states = self.fc(hidden_states)

        # idle batch
        if hidden_states.shape[0] == 0:
            return hidden_states, [hidden_states]

        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, embeds, hidden_states, forward_batch, residual)

        hidden_states_to_logits, hidden_states_to_aux = self.norm(hidden_states, residual)

        # Draft decode captures pre-norm hidden by default; `norm_output` opts for normed.
        aux = hidden_states_to_logits if self.norm_output else hidden_states_to_aux
        return hidden_states_to_logits, [aux]


class LlamaForCausalLMEagle3(nn.Module):
    """The EAGLE-3 draft as SGLang builds it (SGLang 0.5.23, srt/models/llama_eagle3.py).

    `lm_head` is [draft_vocab_size, hidden] when the config has `draft_vocab_size`, else the
    target's vocab (then loaded from the target). Embeddings always come from the target
    (`set_embed`); under EAGLE (not EAGLE3) the worker also swaps in the target's lm_head
    (`set_embed_and_head`) and `hot_token_id` is never used.
    """

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.load_lm_head_from_target = False
        if getattr(config, "draft_vocab_size", None) is None:
            self.load_lm_head_from_target = True
        self.lm_head = nn.Linear(
            config.hidden_size,
            getattr(config, "draft_vocab_size", None) or config.vocab_size,
            bias=False,
        )
        self.capture_aux_hidden_states = True
        self.hot_token_id: Optional[torch.Tensor] = None
        # the stacked parameters' loaders (SGLang: QKVParallelLinear / MergedColumnParallelLinear set them)
        from functools import partial

        for module in self.modules():
            if isinstance(module, LlamaAttention):
                module.qkv_proj.weight.weight_loader = partial(qkv_weight_loader, module)
            elif isinstance(module, LlamaMLP):
                module.gate_up_proj.weight.weight_loader = partial(gate_up_weight_loader, module)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch):
        """Returns (logits [B, T, lm_head rows], aux hidden [B, T, H] (pre-norm, fed back as the
        next draft step's `hidden_states`))."""
        hidden_states_to_logits, aux = self.model(input_ids, positions, forward_batch)
        logits = self.lm_head(hidden_states_to_logits)
        return logits, aux[0]

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """Load checkpoint tensors with SGLang 0.5.23's renames (see module docstring).

        Names that match no parameter are dropped silently, exactly as in SGLang. Each tensor is
        copied by its parameter's `weight_loader` (else `default_weight_loader`) with SGLang's
        shape asserts: a config that disagrees with its tensors raises `AssertionError` here, as
        SGLang's load does (llama_eagle3.py:358-378).
        """
        from workbench.sandbox.srt.model_loader.weight_utils import default_weight_loader

        params_dict = dict(self.named_parameters())
        stacked_params_mapping = [
            # (param_name, shard_name, shard_id)
            (".qkv_proj", ".q_proj", "q"),
            (".qkv_proj", ".k_proj", "k"),
            (".qkv_proj", ".v_proj", "v"),
            (".gate_up_proj", ".gate_proj", 0),
            (".gate_up_proj", ".up_proj", 1),
        ]
        legacy_name_map = {
            "midlayer": "layers.0",
            "aux_norm_low": "fc_norm.0",
            "aux_norm_mid": "fc_norm.1",
            "aux_norm_high": "fc_norm.2",
        }
        for name, loaded_weight in weights:
            for legacy, new in legacy_name_map.items():
                if legacy in name:
                    name = name.replace(legacy, new)

            if "d2t" in name:
                # d2t stores diffs between draft id and target id
                self.hot_token_id = loaded_weight + torch.arange(loaded_weight.shape[0])
                continue

            if "t2d" in name:
                continue

            for param_name, weight_name, shard_id in stacked_params_mapping:
                if weight_name not in name:
                    continue
                name = name.replace(weight_name, param_name)
                param_name = f"model.{name}" if name not in params_dict else name
                if param_name in params_dict:
                    param = params_dict[param_name]
                    weight_loader = getattr(param, "weight_loader", default_weight_loader)
                    weight_loader(param, loaded_weight, shard_id)
                break
            else:
                # Handle regular parameters
                param_name = name if name in params_dict else f"model.{name}"
                if param_name in params_dict:
                    param = params_dict[param_name]
                    weight_loader = getattr(param, "weight_loader", default_weight_loader)
                    weight_loader(param, loaded_weight)

    def get_hot_token_id(self) -> Optional[torch.Tensor]:
        """[draft_vocab] int64 target ids of the draft vocab (None without a d2t)."""
        return self.hot_token_id

    def set_embed(self, embed: torch.Tensor) -> None:
        """Share the target's embedding table [vocab, H] (SGLang 0.5.23: `set_embed`, inherited
        from srt/models/llama.py:910-918). Not when the config's `target_hidden_size` differs from
        its `hidden_size`: then the draft keeps its own `embed_tokens` (SGLang returns early too)."""
        # NOTE: If draft hidden size != target hidden size, the embed weight cannot be shared for EAGLE3
        if (
            hasattr(self.config, "target_hidden_size")
            and self.config.target_hidden_size != self.config.hidden_size
        ):
            return
        self.model.embed_tokens.weight = nn.Parameter(embed, requires_grad=False)

    def set_embed_and_head(self, embed: torch.Tensor, head: torch.Tensor) -> None:
        """Share the target's embedding [vocab, H] and lm_head [vocab, H] (SGLang: `set_embed_and_head`)."""
        self.model.embed_tokens.weight = nn.Parameter(embed, requires_grad=False)
        self.lm_head = nn.Linear(head.shape[1], head.shape[0], bias=False)
        self.lm_head.weight = nn.Parameter(head, requires_grad=False)


def qkv_weight_loader(attn: "LlamaAttention", param: nn.Parameter, loaded_weight: torch.Tensor,
                      loaded_shard_id: str) -> None:
    """Copy a q/k/v checkpoint tensor into its rows of the stacked `qkv_proj.weight` of `attn`
    (SGLang 0.5.23, srt/layers/linear.py `QKVParallelLinear.weight_loader`, TP = 1). Raises
    `AssertionError` "param_data.shape=... loaded_weight.shape=..." when the shard's shape
    differs from the tensor's (linear.py:1547-1549, the same text)."""
    assert loaded_shard_id in ["q", "k", "v"]
    offsets = {"q": (0, attn.q_size), "k": (attn.q_size, attn.kv_size), "v": (attn.q_size + attn.kv_size, attn.kv_size)}
    shard_offset, shard_size = offsets[loaded_shard_id]
    param_data = param.data.narrow(0, shard_offset, shard_size)
    assert param_data.shape == loaded_weight.shape, (
        f"{param_data.shape=} {loaded_weight.shape=}"
    )
    param_data.copy_(loaded_weight)


def gate_up_weight_loader(mlp: "LlamaMLP", param: nn.Parameter, loaded_weight: torch.Tensor, loaded_shard_id: int) -> None:
    """Copy the gate (0) or up (1) checkpoint tensor into its rows of `gate_up_proj.weight` of
    `mlp` (SGLang 0.5.23, srt/layers/linear.py `MergedColumnParallelLinear.weight_loader`, TP = 1).
    Raises a bare `AssertionError` when the shapes differ (linear.py:894, bare there too)."""
    assert loaded_shard_id < 2
    param_data = param.data.narrow(0, loaded_shard_id * mlp.intermediate_size, mlp.intermediate_size)
    assert param_data.shape == loaded_weight.shape
    param_data.copy_(loaded_weight)


EntryClass = [LlamaForCausalLMEagle3]
