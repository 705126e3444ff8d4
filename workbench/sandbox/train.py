"""Train the sandbox box's models: the tiny byte-level target and two EAGLE-3 drafts.

    python -m workbench.sandbox.train            # all three, writes workbench/sandbox/models/*
    python -m workbench.sandbox.train --quick    # a fast smoke configuration (pipeline check)

Corpus: a small slice of the Python standard library of the running interpreter (sorted
top-level `*.py` files; the first ASCII files of 4-16 KB until `slice_bytes`, ~60 KB), split by
file into part A (even-indexed: the benchmark prompts, `prompts/bench.jsonl`) and part B
(odd-indexed: the prompts of the draft-training data). The files used and their sha256 are
written to `models/target/corpus_manifest.json`.

Target: transformers `LlamaForCausalLM`, byte vocab (256), 8 layers, trained from scratch
(AdamW, cosine, no weight decay) for ~30 epochs of the slice, so that it MEMORISES it: its
greedy continuation of a prompt from the slice reproduces the real text. Why: a target trained
on a large corpus at this size has degenerate greedy output (space runs, loops) that a
feature-less draft predicts as well as a real one, so the benchmark's control could not tell
whether the aux hidden states carry information. With a memorised slice, the next token is known
to the target's hidden states, and a draft that never saw part A cannot guess it from the
context alone: the EAGLE-3 draft (reading the aux states) beats the aux-zeroed control.
While training, `AheadHeads` (multi-token prediction, as in MTP-trained models) make the output
of layer `ahead_layer` predict the tokens 2 and 3 ahead, so the aux states carry the tokens the
draft has to guess (dropped at save: the saved target is a plain `LlamaForCausalLM`).

Draft: an EAGLE-3 head trained the EAGLE-3 way (as in SpecForge / the EAGLE-3 paper): on the
target's own greedy continuations (prompts from part B and, a quarter, from stdlib files
outside the slice; never part A), with the target's aux hidden states (captured exactly as
the server captures them: input of layer id+1, SGLang's llama rule) concatenated into `fc`,
and a training-time test that unrolls `ttt_steps` draft steps, later steps feeding the draft's
own (pre-norm) hidden state and attending to the step-0 keys plus their own diagonal, which is
what chain drafting at serving time sees. Saved in SGLang's EAGLE-3 checkpoint format
(`fc`, `midlayer.*` with separate q/k/v and gate/up, `norm`, `lm_head`, `d2t`, `t2d`).
Control draft (`draft-aux-zeroed`): identical, but `fc.weight` is frozen at zeros, so
`fc(aux) == 0` whatever the features are; it is served as a normal EAGLE-3 draft.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import sysconfig
import time
from pathlib import Path
from typing import Dict, List, Tuple

if __name__ == "__main__":
    # As an entry point, say which extra is missing (one line, exit 2) before importing torch.
    from workbench.sandbox.extra import exit_if_missing

    exit_if_missing("train")

import torch
import torch.nn.functional as F
from torch import nn

from workbench.sandbox.srt.models.llama_eagle3 import RMSNorm, apply_rotary, rope_cos_sin

SANDBOX_DIR = Path(__file__).resolve().parent
MODELS_DIR = SANDBOX_DIR / "models"
PROMPTS_PATH = SANDBOX_DIR / "prompts" / "bench.jsonl"

FULL = dict(
    hidden=160, intermediate=448, layers=8, heads=5, seq=256, batch=8, target_steps=1000, lr=3e-3,
    slice_bytes=60000, n_gen=512, outside_fraction=0.25, prompt_len=64, gen_len=128,
    draft_steps=400, draft_batch=12, draft_lr=2e-3, draft_intermediate=256,
    aux_layer_ids=[1, 3, 6], draft_vocab=128, ttt_steps=3, ahead_layer=6, ahead=[2, 3], ahead_weight=0.5,
)
QUICK = dict(FULL, target_steps=60, n_gen=64, draft_steps=30)


def log(msg: str) -> None:
    """Timestamped progress line on stderr."""
    print(f"[train {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------
def stdlib_files() -> List[Path]:
    """Sorted top-level stdlib `*.py` files of the running interpreter."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.iterdir() if p.suffix == ".py" and p.is_file())


def corpus_split(slice_bytes: int) -> Tuple[List[Path], List[Path], List[Path], List[Path]]:
    """(slice, part A, part B, outside).

    The slice: the first ASCII files of 4-16 KB (sorted by name) until `slice_bytes` is reached;
    the target is trained on it until it memorises it. Part A = the slice's even-indexed files
    (bench prompts only), part B = the odd-indexed ones (draft-data prompts). Outside = every
    other stdlib file (a quarter of the draft-data prompts, text the target has never seen).
    """
    files = stdlib_files()
    picked: List[Path] = []
    total = 0
    for p in files:
        if total >= slice_bytes:
            break
        if 4000 <= p.stat().st_size <= 16000 and p.read_bytes().isascii():
            picked.append(p)
            total += p.stat().st_size
    part_a = picked[0::2]
    part_b = picked[1::2]
    outside = [p for p in files if p not in picked]
    return picked, part_a, part_b, outside


def load_bytes(files: List[Path]) -> bytes:
    """Concatenate the files' bytes, each followed by a blank line."""
    return b"\n\n".join(p.read_bytes() for p in files)


def write_manifest(parts: Dict[str, List[Path]], out: Path) -> None:
    """Record which files were used (name, size, sha256) and the interpreter version."""
    def entry(p: Path) -> dict:
        data = p.read_bytes()
        return {"name": p.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    out.write_text(json.dumps({
        "python": sys.version.split()[0],
        "stdlib": sysconfig.get_paths()["stdlib"],
        "rule": ("sorted top-level *.py of the stdlib; the slice = the first ASCII files of 4-16 KB "
                 "until slice_bytes; part A = slice[0::2] (bench prompts), part B = slice[1::2] "
                 "(draft-data prompts); outside = all other files (draft-data prompts, not trained on)"),
        **{k: [entry(p) for p in v] for k, v in parts.items() if k != "outside"},
        "outside": [p.name for p in parts["outside"]],
    }, indent=1))


def make_bench_prompts(files: List[Path], n: int = 20, prompt_len: int = 96, seed: int = 1) -> List[dict]:
    """Snippets of part A starting at a line start, ASCII only, `prompt_len` bytes."""
    rng = random.Random(seed)
    prompts = []
    i = 0
    while len(prompts) < n:
        p = files[i % len(files)]
        i += 1
        data = p.read_bytes()
        lines = [j + 1 for j in range(len(data) - prompt_len - 160) if data[j] == 10]
        if not lines:
            continue
        start = rng.choice(lines)
        chunk = data[start:start + prompt_len]
        if not chunk.isascii() or chunk.strip() == b"":
            continue
        prompts.append({"file": p.name, "offset": start, "text": chunk.decode("ascii")})
    return prompts


# --------------------------------------------------------------------------------------------
# Target
# --------------------------------------------------------------------------------------------
def target_config(cfg: dict):
    """The HF LlamaConfig of the target (byte vocab 256, untied head)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=256, hidden_size=cfg["hidden"], intermediate_size=cfg["intermediate"],
        num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["heads"], max_position_embeddings=2048, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        architectures=["LlamaForCausalLM"],
    )


def lr_at(step: int, total: int, peak: float, warmup: int = 50) -> float:
    """Linear warm-up then cosine decay to 10 % of peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


class AheadHeads(nn.Module):
    """Training-only multi-token-prediction heads (as in MTP-trained models, e.g. DeepSeek-V3):
    from the output of target layer `layer` (the input of layer `layer + 1`), head d predicts the
    token d positions ahead (d = 2, 3; the LM head predicts d = 1). Discarded after training: the
    saved target is a plain `LlamaForCausalLM`. Their effect is that the target's aux hidden states
    carry the tokens after next, which is what an EAGLE-3 draft reads from them."""

    def __init__(self, hidden: int, ahead: List[int]) -> None:
        super().__init__()
        self.ahead = list(ahead)
        self.norms = nn.ModuleList(RMSNorm(hidden) for _ in self.ahead)
        self.heads = nn.ModuleList(nn.Linear(hidden, 256, bias=False) for _ in self.ahead)

    def losses(self, h: torch.Tensor, batch: torch.Tensor) -> List[torch.Tensor]:
        """h [B, T, H] (positions 0..T-1 of batch[:, :T]), batch [B, T+1] -> one CE loss per head."""
        T = h.shape[1]
        out = []
        for d, norm, head in zip(self.ahead, self.norms, self.heads):
            logits = head(norm(h[:, :T + 1 - d]))
            out.append(F.cross_entropy(logits.reshape(-1, 256), batch[:, d:T + 1].reshape(-1)))
        return out


def train_target(cfg: dict, data: torch.Tensor, out_dir: Path):
    """Train the target LM on byte windows of the slice until it memorises it (no weight decay,
    ~30 epochs), with the `AheadHeads` loss on layer `ahead_layer`; save a HF model dir (fp16,
    heads dropped). Returns (model in eval mode, fp32; stats)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(target_config(cfg))
    ahead = AheadHeads(cfg["hidden"], cfg["ahead"])
    params = list(model.parameters()) + list(ahead.parameters())
    opt = torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=0.0, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(0)
    seq, bs, steps = cfg["seq"], cfg["batch"], cfg["target_steps"]
    log(f"target: {sum(p.numel() for p in model.parameters())/1e6:.2f} M params, {steps} steps of {bs}x{seq}")
    got: Dict[str, torch.Tensor] = {}

    def grab(module, args, kwargs):
        got["h"] = args[0] if args else kwargs["hidden_states"]

    hook = model.model.layers[cfg["ahead_layer"] + 1].register_forward_pre_hook(grab, with_kwargs=True)
    t0 = time.time()
    model.train()
    try:
        for step in range(steps):
            idx = torch.randint(0, len(data) - seq - 1, (bs,), generator=gen)
            batch = torch.stack([data[i:i + seq + 1] for i in idx]).long()
            for g in opt.param_groups:
                g["lr"] = lr_at(step, steps, cfg["lr"])
            logits = model(input_ids=batch[:, :-1]).logits
            loss = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
            extra = ahead.losses(got.pop("h"), batch)
            total = loss + cfg["ahead_weight"] * sum(extra)
            opt.zero_grad(set_to_none=True)
            total.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if step % 100 == 0 or step == steps - 1:
                log(f"target step {step} loss {loss.item():.3f} ahead {[round(x.item(), 3) for x in extra]} "
                    f"({time.time()-t0:.0f}s)")
    finally:
        hook.remove()
    model.eval()
    # Stored in float16 (half the size in git); the in-memory model is rounded the same way so
    # the draft is trained on exactly the features the server (loading it as fp32) computes.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    out_dir.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(out_dir, safe_serialization=True)
    model.float()
    return model, {"final_loss": round(loss.item(), 4), "final_ahead_losses": [round(x.item(), 4) for x in extra]}


# --------------------------------------------------------------------------------------------
# Draft data: the target's own greedy continuations + aux features
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def greedy_generate(model, prompts: torch.Tensor, n_new: int) -> torch.Tensor:
    """Batched greedy continuation with a KV cache. prompts [B, P] -> [B, P + n_new]."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    out = model(input_ids=prompts, cache=cache, use_cache=True)
    seqs = [prompts]
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(n_new - 1):
        seqs.append(nxt)
        out = model(input_ids=nxt, cache=cache, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    seqs.append(nxt)
    return torch.cat(seqs, dim=1)


@torch.no_grad()
def aux_features(model, seqs: torch.Tensor, layer_ids: List[int]) -> torch.Tensor:
    """Aux hidden states as the server captures them: input of layer id+1 (SGLang's llama rule).

    seqs [B, T] -> [B, T, len(layer_ids) * H] (float16 to save memory).
    """
    capture = [i + 1 for i in layer_ids]
    got: Dict[int, torch.Tensor] = {}
    hooks = []
    for li in capture:
        def hook(module, args, kwargs, li=li):
            got[li] = args[0] if args else kwargs["hidden_states"]
        hooks.append(model.model.layers[li].register_forward_pre_hook(hook, with_kwargs=True))
    try:
        model(input_ids=seqs)
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([got[li] for li in capture], dim=-1).half()


@torch.no_grad()
def memorisation(model, data: torch.Tensor, prompts: List[dict], files: List[Path], seq: int, n_new: int = 128) -> dict:
    """How well the target memorised its slice: teacher-forced loss over the whole slice, and the
    fraction of its greedy continuation of each bench prompt equal to the file's real text."""
    total, count = 0.0, 0
    for i in range(0, len(data) - 1, seq):
        x = data[i:i + seq + 1].long()[None]
        if x.shape[1] < 2:
            continue
        total += F.cross_entropy(model(input_ids=x[:, :-1]).logits[0], x[0, 1:], reduction="sum").item()
        count += x.shape[1] - 1
    by_name = {p.name: p.read_bytes() for p in files}
    same = 0
    for p in prompts:
        ids = torch.tensor(list(p["text"].encode()))[None]
        out = greedy_generate(model, ids, n_new)[0, ids.shape[1]:].tolist()
        real = by_name[p["file"]][p["offset"] + len(p["text"]):][:n_new]
        same += sum(int(a == b) for a, b in zip(out, real))
    stats = {"slice_loss_nats_per_byte": round(total / count, 4),
             "bench_greedy_equals_real_text": round(same / (n_new * len(prompts)), 4)}
    log(f"target memorisation: {stats}")
    return stats


def make_draft_data(cfg: dict, model, part_b: torch.Tensor, outside: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(seqs [N, P+G] int64, feats [N, P+G, n_aux*H] fp16): the target's greedy continuations of
    prompts at line starts of part B (and, for `outside_fraction` of them, of stdlib text outside
    the slice). Never part A: the bench text must stay unseen by the drafts."""
    gen = torch.Generator().manual_seed(2)
    P, G, N = cfg["prompt_len"], cfg["gen_len"], cfg["n_gen"]
    n_out = int(N * cfg["outside_fraction"])

    def windows(data: torch.Tensor, n: int) -> torch.Tensor:
        newlines = (data[:-P - 1] == 10).nonzero().flatten()
        starts = newlines[torch.randint(0, len(newlines), (n,), generator=gen)] + 1
        return torch.stack([data[s:s + P] for s in starts]).long()

    prompts = torch.cat([windows(part_b, N - n_out), windows(outside, n_out)])
    prompts = prompts[torch.randperm(N, generator=gen)]
    t0 = time.time()
    seqs, feats = [], []
    for i in range(0, N, 64):
        s = greedy_generate(model, prompts[i:i + 64], G)
        seqs.append(s)
        feats.append(aux_features(model, s, cfg["aux_layer_ids"]))
    log(f"draft data: {N} sequences ({n_out} outside the slice) x {P}+{G} bytes in {time.time()-t0:.0f}s")
    return torch.cat(seqs), torch.cat(feats)


# --------------------------------------------------------------------------------------------
# Draft (checkpoint names = SGLang's EAGLE-3 format)
# --------------------------------------------------------------------------------------------
class _Attn(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.hd = heads, hidden // heads
        self.q_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.k_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.v_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)


class _MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Midlayer(nn.Module):
    def __init__(self, hidden: int, inter: int, heads: int) -> None:
        super().__init__()
        self.self_attn = _Attn(hidden, heads)
        self.mlp = _MLP(hidden, inter)
        self.hidden_norm = RMSNorm(hidden)
        self.input_layernorm = RMSNorm(hidden)
        self.post_attention_layernorm = RMSNorm(hidden)


class Eagle3DraftTrainer(nn.Module):
    """Trainable EAGLE-3 head whose state_dict names are the checkpoint names.

    `fc` [H, 3H], `midlayer.*`, `norm`, `lm_head` [draft_vocab, H]; embeddings are the target's
    (frozen, not saved). `ttt_loss` runs the training-time test over [B, T] sequences.
    """

    def __init__(self, hidden: int, inter: int, heads: int, n_aux: int, draft_vocab: int, embed: torch.Tensor,
                 zero_fc: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(n_aux * hidden, hidden, bias=False)
        if zero_fc:
            nn.init.zeros_(self.fc.weight)
            self.fc.weight.requires_grad_(False)
        self.midlayer = _Midlayer(hidden, inter, heads)
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, draft_vocab, bias=False)
        self.register_buffer("embed", embed.detach().clone(), persistent=False)
        self.hidden, self.heads = hidden, heads

    def _step(self, tok: torch.Tensor, h: torch.Tensor, pos: torch.Tensor, prev_k: List[torch.Tensor],
              prev_v: List[torch.Tensor]):
        """One unrolled step. tok/pos [B,T], h [B,T,H]. prev_k[0] are step-0 keys (causal);
        later entries are diagonal. Returns (logits, pre-norm hidden, k, v)."""
        m = self.midlayer
        B, T, H = h.shape
        residual = h
        x = torch.cat([m.input_layernorm(F.embedding(tok, self.embed)), m.hidden_norm(h)], dim=-1)
        a = m.self_attn
        q = a.q_proj(x).view(B, T, self.heads, -1).transpose(1, 2)
        k = a.k_proj(x).view(B, T, self.heads, -1).transpose(1, 2)
        v = a.v_proj(x).view(B, T, self.heads, -1).transpose(1, 2)
        cos, sin = rope_cos_sin(pos, a.hd, 10000.0)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        scale = 1.0 / math.sqrt(a.hd)
        if not prev_k:
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            scores = (q @ k.transpose(-1, -2)) * scale
            scores = scores.masked_fill(~causal, float("-inf"))
            out = scores.softmax(-1) @ v
        else:
            k0, v0 = prev_k[0], prev_v[0]
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            s0 = ((q @ k0.transpose(-1, -2)) * scale).masked_fill(~causal, float("-inf"))
            diag_k = prev_k[1:] + [k]
            diag_v = prev_v[1:] + [v]
            sd = torch.stack([(q * dk).sum(-1) * scale for dk in diag_k], dim=-1)  # [B,h,T,k]
            w = torch.cat([s0, sd], dim=-1).softmax(-1)
            out = w[..., :T] @ v0 + (w[..., T:, None] * torch.stack(diag_v, dim=-2)).sum(-2)
        out = a.o_proj(out.transpose(1, 2).reshape(B, T, H))
        out, residual = m.post_attention_layernorm(out, residual)
        out = m.mlp(out)
        normed, pre = self.norm(out, residual)
        return self.lm_head(normed), pre, k, v

    def ttt_loss(self, seqs: torch.Tensor, feats: torch.Tensor, t2d_index: torch.Tensor, valid_from: int,
                 steps: int) -> Tuple[torch.Tensor, List[float]]:
        """Training-time test. seqs [B, T] target tokens, feats [B, T, n_aux*H] aux states.

        Step k at index i reads token x[i+1+k] (position i+k) and predicts x[i+2+k]; step 0 gets
        fc(feats[i]), later steps the previous step's pre-norm hidden. Loss only where the label
        was generated by the target (index >= valid_from) and is in the draft vocab.
        Returns (weighted loss, per-step accuracy).
        """
        B, T = seqs.shape
        n = T - 1 - steps
        h = self.fc(feats[:, :n].float())
        pos0 = torch.arange(n)[None].expand(B, n)
        ks, vs, accs = [], [], []
        total = 0.0
        for k in range(steps):
            tok = seqs[:, 1 + k:1 + k + n]
            label = seqs[:, 2 + k:2 + k + n]
            logits, h, kk, vv = self._step(tok, h, pos0 + k, ks, vs)
            ks.append(kk)
            vs.append(vv)
            dl = t2d_index[label]
            mask = (dl >= 0) & (torch.arange(n)[None] + 2 + k >= valid_from)
            loss = F.cross_entropy(logits[mask], dl[mask])
            total = total + (0.8 ** k) * loss
            accs.append((logits[mask].argmax(-1) == dl[mask]).float().mean().item())
        return total, accs


def draft_vocab_map(seqs: torch.Tensor, valid_from: int, size: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d2t int64 [size] offsets, t2d bool [256], t2d_index int64 [256] (-1 outside)) from the
    most frequent target-generated tokens; draft ids in ascending target-id order."""
    counts = torch.bincount(seqs[:, valid_from:].flatten(), minlength=256)
    counts = counts + 1e-3 * torch.bincount(torch.arange(256), minlength=256)  # deterministic ties
    top = counts.argsort(descending=True)[:size].sort().values
    d2t = top - torch.arange(size)
    t2d = torch.zeros(256, dtype=torch.bool)
    t2d[top] = True
    t2d_index = torch.full((256,), -1, dtype=torch.long)
    t2d_index[top] = torch.arange(size)
    return d2t.long(), t2d, t2d_index


def train_draft(cfg: dict, embed: torch.Tensor, seqs: torch.Tensor, feats: torch.Tensor, out_dir: Path,
                zero_fc: bool, target_dir: Path) -> dict:
    """Train one EAGLE-3 draft with the training-time test; save config.json + model.safetensors."""
    from safetensors.torch import save_file

    torch.manual_seed(3)
    H = cfg["hidden"]
    P = cfg["prompt_len"]
    d2t, t2d, t2d_index = draft_vocab_map(seqs, P, cfg["draft_vocab"])
    n_aux = len(cfg["aux_layer_ids"])
    model = Eagle3DraftTrainer(H, cfg["draft_intermediate"], cfg["heads"], n_aux, cfg["draft_vocab"], embed, zero_fc)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg["draft_lr"], weight_decay=0.0)
    n_val = max(16, len(seqs) // 16)
    tr_s, tr_f, va_s, va_f = seqs[n_val:], feats[n_val:], seqs[:n_val], feats[:n_val]
    gen = torch.Generator().manual_seed(4)
    steps, bs = cfg["draft_steps"], cfg["draft_batch"]
    t0 = time.time()
    for step in range(steps):
        idx = torch.randint(0, len(tr_s), (bs,), generator=gen)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, cfg["draft_lr"], warmup=30)
        loss, accs = model.ttt_loss(tr_s[idx], tr_f[idx], t2d_index, P, cfg["ttt_steps"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"{out_dir.name} step {step} loss {loss.item():.3f} acc {[round(a, 2) for a in accs]} ({time.time()-t0:.0f}s)")
    with torch.no_grad():
        _, val_accs = model.ttt_loss(va_s, va_f, t2d_index, P, cfg["ttt_steps"])
    log(f"{out_dir.name} held-out per-step accuracy {[round(a, 3) for a in val_accs]}")

    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors["d2t"] = d2t
    tensors["t2d"] = t2d
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": H,
        "target_hidden_size": H,
        "intermediate_size": cfg["draft_intermediate"],
        "num_hidden_layers": 1,
        "num_attention_heads": cfg["heads"],
        "num_key_value_heads": cfg["heads"],
        "head_dim": H // cfg["heads"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "vocab_size": 256,
        "draft_vocab_size": cfg["draft_vocab"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bias": False,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": list(cfg["aux_layer_ids"]),
            "use_aux_hidden_state": True,
            "use_input_layernorm_in_first_layer": True,
            "use_last_layernorm": True,
            "use_mtp_layernorm": False,
        },
        "sandbox_training": {
            "target": os.path.relpath(target_dir, out_dir),
            "fc_weight_frozen_at_zero": zero_fc,
            "ttt_steps": cfg["ttt_steps"],
            "train_steps": steps,
            "sequences": len(seqs),
            "held_out_step_accuracy": [round(a, 4) for a in val_accs],
        },
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return {"held_out_step_accuracy": val_accs, "seconds": time.time() - t0}


def main(argv=None) -> int:
    """Entry point: `python -m workbench.sandbox.train [--quick] [--out DIR] [--skip-target]`."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny smoke configuration")
    ap.add_argument("--out", default=str(MODELS_DIR), help="models directory (default: %(default)s)")
    ap.add_argument("--skip-target", action="store_true", help="reuse OUT/target, retrain the drafts only")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    t_start = time.time()

    slice_files, part_a, part_b, outside = corpus_split(cfg["slice_bytes"])
    data = torch.frombuffer(bytearray(load_bytes(slice_files)), dtype=torch.uint8).clone()
    data_b = torch.frombuffer(bytearray(load_bytes(part_b)), dtype=torch.uint8).clone()
    data_out = torch.frombuffer(bytearray(load_bytes(outside)), dtype=torch.uint8).clone()
    log(f"corpus: slice of {len(slice_files)} files ({len(data)} bytes; part A {len(part_a)}, "
        f"part B {len(part_b)} files), {len(outside)} files outside")
    prompts = make_bench_prompts(part_a)

    target_dir = out / "target"
    if args.skip_target:
        from transformers import LlamaForCausalLM

        target = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
        target_stats = None
    else:
        target, target_stats = train_target(cfg, data, target_dir)
        write_manifest({"slice": slice_files, "part_a": part_a, "part_b": part_b, "outside": outside},
                       target_dir / "corpus_manifest.json")
    PROMPTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    PROMPTS_PATH.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    t_target = time.time() - t_start
    mem = memorisation(target, data, prompts, part_a, cfg["seq"])

    seqs, feats = make_draft_data(cfg, target, data_b, data_out)
    embed = target.model.embed_tokens.weight.detach()
    stats = {"config": cfg, "target_memorisation": mem, "target_training": target_stats, "target_seconds": t_target}
    stats["draft"] = train_draft(cfg, embed, seqs, feats, out / "draft", False, target_dir)
    stats["draft-aux-zeroed"] = train_draft(cfg, embed, seqs, feats, out / "draft-aux-zeroed", True, target_dir)
    stats["total_seconds"] = time.time() - t_start
    (out / "training_stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    log(f"done in {stats['total_seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
