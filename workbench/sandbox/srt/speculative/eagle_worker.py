"""Target and EAGLE draft workers: prefill, chain drafting, verification, KV-cache crop.

Mirrors SGLang 0.5.23, srt/speculative/eagle_worker_v2.py (`EAGLEWorker`: `init_token_map`,
`init_lm_head`, draft -> verify -> draft extend) with chain drafting only (topk == 1), batch
size 1, greedy verification. Lossless: every emitted token is the target's argmax given the
tokens before it, so the output equals plain greedy decoding.

One verify step (S = speculative_num_steps, num_draft_tokens = S + 1):
1. draft: the first draft token d_1 comes from the previous draft extend; S - 1 more draft
   forwards feed the draft's own pre-norm hidden state (width H, so `fc` is skipped by the width
   check) and produce d_2..d_S;
2. verify: one target forward over [x_n, d_1..d_S] with the target KV cache;
3. accept the longest prefix with d_{i+1} == argmax_i, plus one bonus token from the target;
4. crop the rejected tail from the target KV cache (`crop(n)` removes the last n positions) and
   the speculative entries from the draft KV cache;
5. draft extend over the accepted tokens with the target's hidden states (aux capture under
   EAGLE3: width 3H -> `fc` runs; final normed state under EAGLE: width H -> `fc` skipped).

With `--speculative-num-steps 0` drafting is disabled as in SGLang 0.5.23
(eagle_worker_v2.py:1469-1472, `_build_trivial_verify_input`): the verify forward runs over the
last token alone and emits the target's one token (accept length 1.00); the draft extend still runs.

Draft token ids keep the dtype the token map gives them (`hot_token_id[topk_index]`, as SGLang's
worker does) and enter the draft and target forwards as tensors: a float `d2t` fails in the next
embedding lookup, as it does in SGLang, instead of being rounded to an int here. The classes come
from the model registry (`srt/models/registry.py`) by each config's `architectures`, as SGLang's
`get_model_architecture` resolves them. Configs are read as transformers reads them (the target's
as `AutoConfig`, the draft's as `LlamaConfig`; `srt/utils/hf_transformers_utils.py`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

from workbench.sandbox.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    configure_aux_hidden_state_capture,
    resolve_spec_aux_hidden_state_config,
)
from workbench.sandbox.srt.model_loader.utils import get_model_architecture
from workbench.sandbox.srt.models.llama_eagle3 import (
    DraftKVCache,
    ForwardBatch,
    LlamaForCausalLMEagle3,
    SpecInput,
)
from workbench.sandbox.srt.utils.hf_transformers_utils import get_config, get_llama_config

logger = logging.getLogger(__name__)


def as_input_ids(ids) -> torch.Tensor:
    """Token ids (Python ints or 0-dim tensors, mixed) -> input_ids [1, T].

    Python ints become int64; a tensor keeps its dtype (so a float token id from a float token
    map reaches the embedding lookup, which refuses it as SGLang's does)."""
    if not any(isinstance(i, torch.Tensor) for i in ids):
        return torch.tensor([list(ids)], dtype=torch.long)
    parts = [i.reshape(()) if isinstance(i, torch.Tensor) else torch.tensor(int(i), dtype=torch.long) for i in ids]
    return torch.stack(parts)[None]


@dataclass
class DecodeState:
    """Per-request state across steps. `seq_len` = tokens in the target KV cache."""

    target_cache: object
    seq_len: int
    last_token: int
    draft_cache: Optional[DraftKVCache] = None
    next_draft_token: Optional[torch.Tensor] = None  # d_1 for the next verify (target id, 0-dim)
    draft_hidden: Optional[torch.Tensor] = None  # [1, 1, H] pre-norm draft state for step 2


@dataclass
class StepResult:
    """Tokens a step emits (target ids, in order) and, for a verify step, correct drafts."""

    tokens: List[int]
    num_correct_drafts: int = 0
    is_verify: bool = False


class TargetWorker:
    """Loads the target, the class its config's `architectures` names in the model registry
    (`LlamaForCausalLM`, `GraniteForCausalLM`; SGLang 0.5.23 model_loader/utils.py
    `get_model_architecture`), and runs it. Raises `ValueError` for an architecture the registry
    cannot resolve, with SGLang's message."""

    def __init__(self, model_path: str) -> None:
        self.hf_config = get_config(model_path)
        self.model_cls, self.architecture = get_model_architecture(self.hf_config)
        self.model = self.model_cls.from_pretrained(model_path, config=self.hf_config)
        self.model_path = model_path

    def new_cache(self):
        """A fresh KV cache for one request: the target class's own (`KVCache` of
        srt/models/llama.py; `GraniteKVCache` of srt/models/granite.py), with `crop(n)`."""
        return self.model.new_cache()

    def forward(self, ids: List, start: int, cache) -> Tuple[torch.Tensor, torch.Tensor]:
        """Extend `cache` with `ids` (ints or 0-dim tensors) at positions start.. -> (logits
        [T, V], hidden [T, width])."""
        input_ids = as_input_ids(ids)
        positions = torch.arange(start, start + len(ids))[None]
        logits, hidden = self.model(input_ids, positions, cache)
        return logits[0], hidden[0]

    def prefill(self, prompt: List[int]) -> Tuple[DecodeState, int]:
        """Run the prompt. Returns (state, first generated token)."""
        state, tok, _ = self.prefill_with_hidden(prompt)
        return state, tok

    def prefill_with_hidden(self, prompt: List[int]) -> Tuple[DecodeState, int, torch.Tensor]:
        """Run the prompt. Returns (state, first generated token, hidden [P, width])."""
        cache = self.new_cache()
        logits, hidden = self.forward(prompt, 0, cache)
        tok = int(logits[-1].argmax())
        return DecodeState(target_cache=cache, seq_len=len(prompt), last_token=tok), tok, hidden

    def decode(self, state: DecodeState) -> StepResult:
        """One plain greedy decode step (no speculation)."""
        logits, _ = self.forward([state.last_token], state.seq_len, state.target_cache)
        state.seq_len += 1
        state.last_token = int(logits[-1].argmax())
        return StepResult(tokens=[state.last_token])


class EAGLEWorker:
    """The EAGLE / EAGLE3 draft worker (SGLang 0.5.23, srt/speculative/eagle_worker_v2.py).

    `spec_algorithm.is_eagle3()` decides: aux capture on the target (via
    `_resolve_eagle_aux_hidden_state` + `set_eagle3_layers_to_capture`), the draft keeps its own
    lm_head over the draft vocab and maps ids through `hot_token_id`. Otherwise (EAGLE / NEXTN)
    the draft gets the target's embedding AND lm_head, `hot_token_id` is not used, and the
    target hands over its final hidden state after the norm.
    """

    def __init__(self, server_args, target_worker: TargetWorker, spec_algorithm) -> None:
        from safetensors.torch import safe_open

        self.server_args = server_args
        self.target_worker = target_worker
        self.speculative_algorithm = spec_algorithm
        self.num_steps = server_args.speculative_num_steps
        self.num_draft_tokens = server_args.speculative_num_draft_tokens
        draft_path = server_args.speculative_draft_model_path

        self.draft_hf_config = get_llama_config(draft_path)
        draft_cls, draft_arch = get_model_architecture(self.draft_hf_config)
        if not issubclass(draft_cls, LlamaForCausalLMEagle3):
            raise ValueError(
                f"the draft's architectures {draft_arch!r} names the sandbox's {draft_cls.__name__}, a target class; the "
                "sandbox builds EAGLE-3 drafts only (LlamaForCausalLMEagle3). SGLang 0.5.23 would build that class for "
                "the draft and fail in its load_weights on the draft's tensor names (cf. sgl-project/sglang#9135)."
            )
        # target side: which layers to capture (EAGLE3 only)
        aux_config = resolve_spec_aux_hidden_state_config(
            draft_hf_config=self.draft_hf_config, spec_algorithm=spec_algorithm, is_draft_worker=False
        )
        configure_aux_hidden_state_capture(target_worker.model, aux_config)

        self.draft_model = draft_cls(self.draft_hf_config)
        weights_path = os.path.join(draft_path, "model.safetensors")
        with safe_open(weights_path, framework="pt") as f:
            self.draft_model.load_weights((name, f.get_tensor(name)) for name in f.keys())
        self.draft_model.eval()

        self.init_token_map()
        self.init_lm_head()

    def init_token_map(self) -> None:
        """EAGLE3: the draft's own d2t (read in `load_weights`); else `--speculative-token-map`."""
        if self.speculative_algorithm.is_eagle3():
            if self.server_args.speculative_token_map is not None:
                logger.warning(
                    "Speculative token map specified, but EAGLE3 models already have this. Ignoring the specified token map."
                )
            self.hot_token_id = None
        elif self.server_args.speculative_token_map is not None:
            self.hot_token_id = torch.load(self.server_args.speculative_token_map).long()
        else:
            self.hot_token_id = None

    def init_lm_head(self) -> None:
        """Share the target's embedding (always) and lm_head (EAGLE, or EAGLE3 without a draft vocab)."""
        embed, head = self.target_worker.model.get_embed_and_head()
        if self.speculative_algorithm.is_eagle3():
            if self.draft_model.load_lm_head_from_target:
                self.draft_model.set_embed_and_head(embed, head)
            else:
                self.draft_model.set_embed(embed)
            if self.draft_model.hot_token_id is not None:
                self.hot_token_id = self.draft_model.hot_token_id
        else:
            if self.hot_token_id is not None and head is not None:
                head = head.detach().clone()[self.hot_token_id]
            self.draft_model.set_embed_and_head(embed, head)

    # -- draft model calls ---------------------------------------------------------------------
    def _draft_forward(self, ids: List, start: int, hidden: torch.Tensor, cache: DraftKVCache) -> Tuple[torch.Tensor, torch.Tensor]:
        """Draft over `ids` (ints or 0-dim tensors) at positions start.. with `hidden` [T, width];
        returns the target id of the last position's argmax (a 0-dim tensor, in the token map's
        dtype) and the last pre-norm hidden [1, 1, H]. Raises `IndexError` when the draft's argmax
        is beyond the token map (a d2t shorter than the draft vocab), as SGLang's indexing does."""
        input_ids = as_input_ids(ids)
        positions = torch.arange(start, start + len(ids))[None]
        batch = ForwardBatch(spec_info=SpecInput(hidden_states=hidden[None]), kv_cache=cache)
        logits, aux = self.draft_model(input_ids, positions, batch)
        topk_index = logits[0, -1].argmax()
        if self.hot_token_id is not None:
            topk_index = self.hot_token_id[topk_index]
        return topk_index, aux[:, -1:]

    def forward_draft_extend(self, state: DecodeState, ids: List, start: int, hidden: torch.Tensor) -> None:
        """Draft extend over accepted tokens (ids shifted by one w.r.t. the target's hidden states)."""
        state.next_draft_token, state.draft_hidden = self._draft_forward(ids, start, hidden, state.draft_cache)

    def prefill(self, prompt: List[int]) -> Tuple[DecodeState, int]:
        """Target prefill, then draft extend over the prompt. Returns (state, first token)."""
        state, tok, hidden = self.target_worker.prefill_with_hidden(prompt)
        state.draft_cache = DraftKVCache()
        self.forward_draft_extend(state, prompt[1:] + [tok], 0, hidden)
        return state, tok

    def draft(self, state: DecodeState) -> List[torch.Tensor]:
        """Chain drafting: d_1 from the last extend, then num_steps - 1 draft forwards (0-dim
        tensors, target ids). No drafts at all with 0 steps (SGLang: drafting disabled)."""
        if self.num_steps == 0:
            return []
        drafts = [state.next_draft_token]
        hidden = state.draft_hidden[0]
        pos = state.seq_len  # draft position of d_1 (= index of the last extended entry + 1)
        for _ in range(self.num_steps - 1):
            tok, h = self._draft_forward([drafts[-1]], pos, hidden, state.draft_cache)
            drafts.append(tok)
            hidden = h[0]
            pos += 1
        return drafts

    def decode(self, state: DecodeState) -> StepResult:
        """One verify step (draft -> verify -> accept -> crop -> draft extend)."""
        drafts = self.draft(state)
        n = state.seq_len  # position of last_token x_n
        verify_ids = [state.last_token] + drafts
        logits, hidden = self.target_worker.forward(verify_ids, n, state.target_cache)
        predictions = logits.argmax(-1).tolist()
        accepted = 0
        while accepted < len(drafts) and int(drafts[accepted]) == predictions[accepted]:
            accepted += 1
        bonus = predictions[accepted]
        new_tokens = predictions[:accepted] + [bonus]  # the accepted drafts are these same target ids
        # crop the rejected tail: target cache held n + S + 1 entries, keep n + accepted + 1
        state.target_cache.crop(len(drafts) - accepted)
        state.draft_cache.crop(self.num_steps - 1)
        state.seq_len = n + accepted + 1
        state.last_token = bonus
        self.forward_draft_extend(state, new_tokens, n, hidden[: accepted + 1])
        return StepResult(tokens=new_tokens, num_correct_drafts=accepted, is_verify=True)
