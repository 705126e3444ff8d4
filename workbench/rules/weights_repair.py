"""Repairs of a draft checkpoint's tensor names by rule: the naming transform the checkpoint applied
to its names, learned from the names themselves and checked through the engine's own loader.

A checkpoint whose names the loader drops (or, on vLLM, refuses) was usually written by a tool that
renamed EVERY tensor the same way: a wrapper prefix (``module.``, ``draft_model.``, ``model.model.``),
a stripped prefix (``midlayer.`` lost), another framework's naming (``layers.0.attention.wq``,
``self_attn`` → ``attn``), another separator (``/``). :func:`learn_steps` proposes the steps such a
transform is made of — a prefix shared by the problem names (strip it), a prefix the engine's names
have and these lack (add it), token runs that differ consistently between the problem names and the
names the loader wants for the parameters that got no tensor (on the dotted tokens: one
edit per pair, kept when it explains several names or is the only explanation), the layouts EAGLE-3
exports use for layer 0 (``midlayer.`` ↔ ``layers.0.``) and Meta's Llama naming as
``transformers/models/llama/convert_llama_weights_to_hf.py`` maps it (``wq``→``q_proj``,
``w1``→``gate_proj``, ``attention_norm``→``input_layernorm`` …). :func:`repair_names` then picks the
combination of steps that maps the most names onto parameters (or stacked shards) that got no
tensor, each new name FOLLOWED through the engine's loader (SGLang's ``load_weights`` as read from
the box, or vLLM's: :mod:`workbench.engine.vllm_weights`); a name another combination maps when the
best one does not keeps its own. Shapes are a check, not the key: a mapped tensor whose shape
disagrees with the parameter (shard) is rejected with the reason; two names landing on one slot are
both rejected (ambiguous). Every name that stays unmapped says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Callable

__all__ = ["Step", "NameRepair", "learn_steps", "repair_names", "wanted_names", "META_LLAMA_NAMES"]

#: Meta's Llama checkpoint naming → Hugging Face's (``transformers`` ``convert_llama_weights_to_hf.py``:
#: ``layers.{i}.attention.wq`` → ``model.layers.{i}.self_attn.q_proj``, ``feed_forward.w1|w2|w3`` →
#: ``mlp.gate_proj|down_proj|up_proj``, ``attention_norm`` / ``ffn_norm`` → ``input_layernorm`` /
#: ``post_attention_layernorm``, ``tok_embeddings`` → ``embed_tokens``, ``output`` → ``lm_head``).
META_LLAMA_NAMES = {("attention",): ("self_attn",), ("wq",): ("q_proj",), ("wk",): ("k_proj",), ("wv",): ("v_proj",),
                    ("wo",): ("o_proj",), ("feed_forward",): ("mlp",), ("w1",): ("gate_proj",), ("w2",): ("down_proj",),
                    ("w3",): ("up_proj",), ("attention_norm",): ("input_layernorm",),
                    ("ffn_norm",): ("post_attention_layernorm",), ("tok_embeddings",): ("embed_tokens",),
                    ("output",): ("lm_head",)}
#: Layer 0 in EAGLE-3 exports: ``midlayer.*`` (EAGLE, SpecForge) or ``layers.0.*``.
LAYER0_LAYOUTS = {("midlayer",): ("layers", "0"), ("layers", "0"): ("midlayer",)}
#: Stacked parameters and their pieces (SGLang 0.5.23 ``stacked_params_mapping``, vLLM 0.32.0
#: ``hf_to_vllm_mapper.orig_to_new_stacked``): used to name a missing shard's checkpoint tensor.
STACKED_PIECES = {"qkv_proj": {"q": "q_proj", "k": "k_proj", "v": "v_proj"}, "gate_up_proj": {0: "gate_proj", 1: "up_proj"}}
_MAX_STEPS = 9
#: Steps combined into one transform at most (a wrapper, a scheme, a layout: three covers what exports do).
_MAX_COMBINED = 3
_SKIP = ("d2t", "t2d")

#: ``follow(name) -> (how, param, shard)``: one checkpoint name through the engine's loader.
Follow = Callable[[str], tuple]


@dataclass(frozen=True)
class Step:
    """One part of a naming transform. ``kind``: ``separator`` (``src`` → ``.``), ``strip`` (a leading
    token run), ``add`` (a leading token run), ``sub`` (a token run replaced wherever it occurs);
    ``src``/``dst``: token tuples (``separator``: the separator string in ``src[0]``); ``why``:
    where it comes from; ``support``: how many problem names it was learned from."""

    kind: str
    src: tuple
    dst: tuple = ()
    why: str = ""
    support: int = 0

    def apply(self, name: str) -> str:
        """``name`` with this step applied (unchanged where it does not apply)."""
        if self.kind == "separator":
            return name.replace(self.src[0], ".")
        toks = tuple(name.split("."))
        if self.kind == "strip":
            return ".".join(toks[len(self.src):]) if toks[:len(self.src)] == self.src and len(toks) > len(self.src) \
                else name
        if self.kind == "add":
            return ".".join(self.dst + toks) if toks[:len(self.dst)] != self.dst else name
        if self.kind == "vocab":
            for src, dst in self.src:
                name = Step("sub", src, dst).apply(name)
            return name
        k = len(self.src)
        out, i = [], 0
        while i < len(toks):
            if toks[i:i + k] == self.src:
                out += list(self.dst)
                i += k
            else:
                out.append(toks[i])
                i += 1
        return ".".join(out)

    def describe(self, name: str | None = None) -> str:
        """The step in words; for a naming scheme only the pairs ``name`` uses (all without one)."""
        if self.kind == "vocab":
            toks = set(name.replace("/", ".").split(".")) if name else None
            pairs = [(a, b) for a, b in self.src if toks is None or set(a) <= toks] or list(self.src)
            return ", ".join(f"'{'.'.join(a)}' → '{'.'.join(b)}'" for a, b in pairs) + f" ({self.why})"
        s, d = ".".join(self.src), ".".join(self.dst)
        text = (f"separator {self.src[0]!r} → '.'" if self.kind == "separator" else
                f"strip the prefix '{s}.'" if self.kind == "strip" else
                f"add the prefix '{d}.'" if self.kind == "add" else f"'{s}' → '{d}'")
        return f"{text} ({self.why})"


@dataclass
class NameRepair:
    """What :func:`repair_names` found: ``renames`` (checkpoint name → new name), ``reasons`` (one line
    per rename: the steps and where it lands), ``unmapped`` (name → why no rename), ``unfilled``
    (missing slots no rename fills), ``steps`` (the transform that mapped the most names)."""

    renames: dict = field(default_factory=dict)
    reasons: list = field(default_factory=list)
    unmapped: dict = field(default_factory=dict)
    unfilled: list = field(default_factory=list)
    steps: list = field(default_factory=list)


def _slots(w: Any) -> list[tuple[str, Any]]:
    """The ``(param, shard)`` slots ``w.missing`` lists (``None`` shard: the whole parameter)."""
    out = []
    for m in w.missing:
        param, _, rest = m.partition(" (shard ")
        if rest:
            out += [(param, int(s) if s.isdigit() else s) for s in rest.rstrip(")").split(", ")]
        elif (w.spec.get(param) or {}).get("shards"):
            out += [(param, s) for s in w.spec[param]["shards"]]
        else:
            out.append((param, None))
    return out


def wanted_names(w: Any, follow: Follow) -> dict[str, tuple[str, Any]]:
    """Checkpoint names the loader maps onto each missing slot of ``w`` (name → ``(param, shard)``):
    the parameter name without ``model.``, a shard under its piece's name (``q_proj``), layer 0 in
    both EAGLE-3 layouts, each kept only when ``follow`` lands it on that slot."""
    out: dict[str, tuple[str, Any]] = {}
    for param, shard in _slots(w):
        base = param[len("model."):] if param.startswith("model.") else param
        if shard is not None:
            for stacked, pieces in STACKED_PIECES.items():
                if f".{stacked}." in f".{base}." and shard in pieces:
                    base = base.replace(stacked, pieces[shard])
        toks = tuple(base.split("."))
        variants = {base, "model." + base}
        for src, dst in LAYER0_LAYOUTS.items():
            v = Step("sub", src, dst).apply(base)
            variants |= {v, "model." + v}
        del toks
        for v in sorted(variants):
            how, p, s = follow(v)[:3]
            if how == "loaded" and p == param and (shard is None or s == shard):
                out.setdefault(v, (param, shard))
    return out


#: The longest token run one learned edit replaces (a module's name, a layer's path).
_EDIT_TOKENS = 3


def _one_edit(d: tuple, w: tuple) -> tuple | None:
    """The single token-run edit turning ``d`` into ``w`` as ``(kind, src, dst)`` (an insert or delete
    anchored on its neighbour token; at the start: ``add``/``strip``): what lies between their common
    leading and trailing tokens, when neither side is longer than :data:`_EDIT_TOKENS`; ``None`` when
    they are equal or differ in more than that."""
    n = min(len(d), len(w))
    p = 0
    while p < n and d[p] == w[p]:
        p += 1
    q = 0
    while q < n - p and d[len(d) - 1 - q] == w[len(w) - 1 - q]:
        q += 1
    i1, i2, j1, j2 = p, len(d) - q, p, len(w) - q
    if (i1 == i2 and j1 == j2) or i2 - i1 > _EDIT_TOKENS or j2 - j1 > _EDIT_TOKENS:
        return None
    tag = "insert" if i1 == i2 else "delete" if j1 == j2 else "replace"
    if tag == "insert" and i1 == 0:
        return ("add", (), w[j1:j2])
    if tag == "delete" and i1 == 0:
        return ("strip", d[i1:i2], ())
    if tag in ("insert", "delete"):  # anchor on the token before it
        return ("sub", d[i1 - 1:i2], w[j1 - 1:j2])
    return ("sub", d[i1:i2], w[j1:j2])


def learn_steps(problem: list[str], wanted: list[str]) -> list[Step]:
    """The candidate steps of the transform that turned the engine's names into ``problem`` (see the
    module docstring), most supported first, at most ``_MAX_STEPS``."""
    steps: dict[tuple, Step] = {}

    def add(kind: str, src: tuple, dst: tuple, why: str, support: int) -> None:
        key = (kind, src, dst)
        if key not in steps or steps[key].support < support:
            steps[key] = Step(kind, src, dst, why, support)

    names = [n for n in problem if not any(s in n for s in _SKIP)] or list(problem)
    for sep in ("/", "::"):
        n_sep = sum(1 for n in names if sep in n)
        if n_sep:
            add("separator", (sep,), (), f"{n_sep} names use {sep!r} between their parts", n_sep)
    norm = [n.replace("/", ".").replace("::", ".") for n in names]
    toks = [tuple(n.split(".")) for n in norm]
    every = [tuple(n.replace("/", ".").replace("::", ".").split(".")) for n in problem]
    for k in (1, 2, 3):  # a leading run shared by several problem names (or by the only one)
        counts: dict[tuple, int] = {}
        for t in toks:
            if len(t) > k:
                counts[t[:k]] = counts.get(t[:k], 0) + 1
        for pre, c in counts.items():
            if c >= 2 or len(toks) == 1:
                # counted over every problem name (the token map's too), as the renames are
                on = sum(1 for t in every if len(t) > k and t[:k] == pre)
                add("strip", pre, (), f"a wrapper prefix on {on} of {len(every)} names", c)
    present = {x for t in toks for x in t}
    meta = tuple((src, dst) for src, dst in META_LLAMA_NAMES.items() if set(src) <= present)
    if meta:  # one step: a naming scheme is a vocabulary, renamed as a whole
        add("vocab", meta, (), "Meta's Llama naming, as transformers' convert_llama_weights_to_hf.py maps it",
            sum(1 for t in toks if any(src[0] in t for src, _ in meta)))
    for src, dst in LAYER0_LAYOUTS.items():
        if all(x in present for x in src):
            add("sub", src, dst, "the other EAGLE-3 layout of layer 0", sum(1 for t in toks if src[0] in t))
    wt = [tuple(n.split(".")) for n in wanted]
    edits: dict[tuple, set] = {}
    only: dict[tuple, int] = {}
    for i, t in enumerate(toks):
        mine = {e for w in wt if (e := _one_edit(t, w)) is not None}
        for e in mine:
            edits.setdefault(e, set()).add(i)
        if len(mine) == 1:
            only[next(iter(mine))] = only.get(next(iter(mine)), 0) + 1
    for (kind, src, dst), who in edits.items():
        if len(who) >= 2 or only.get((kind, src, dst)):
            why = (f"learned: the same edit on {len(who)} names" if len(who) >= 2
                   else "learned: the only edit that explains the name")
            add(kind, src, dst, why, len(who))
    order = {"separator": 0, "strip": 1, "vocab": 2, "sub": 3, "add": 4}
    ranked = sorted(steps.values(), key=lambda s: (-s.support, order[s.kind], s.src, s.dst))[:_MAX_STEPS]
    return sorted(ranked, key=lambda s: (order[s.kind], -s.support))


def _apply(steps: tuple, name: str) -> str:
    for s in steps:
        name = s.apply(name)
    return name


def repair_names(problem: list[str], shapes: dict[str, tuple], w: Any, follow: Follow, *,
                 existing: set[str] | None = None, many_per_slot: bool = False) -> NameRepair:
    """Map every name of ``problem`` (the checkpoint names the loader drops or refuses) onto the
    parameter slot the loader wants for it, through the checkpoint's own naming pattern (see the
    module docstring). ``shapes``: name → tensor shape; ``w``: the
    :class:`~workbench.engine.load_weights.WeightAnalysis` (``spec``, ``missing``); ``follow``: the
    engine's loader for one name; ``existing``: every checkpoint name (a new name must not collide);
    ``many_per_slot``: several tensors may fill one slot (a module-level analysis)."""
    existing = existing or set()
    slots = set(_slots(w))
    wanted = wanted_names(w, follow)
    steps = learn_steps(problem, list(wanted))
    rep = NameRepair(steps=list(steps))
    names = list(problem)
    d2t_free = getattr(w, "d2t_name", None) is None

    memo: dict[str, tuple] = {}

    def lands(new: str) -> tuple[str, Any] | None:
        if new not in memo:
            memo[new] = tuple(follow(new)[:3])
        how, param, shard = memo[new]
        if new in existing:
            return None
        if how == "d2t" and d2t_free:  # a token map under a name the loader refuses (vLLM: module.d2t)
            return "d2t", None
        if how != "loaded":
            return None
        if many_per_slot:
            return (param, None) if (param, None) in slots or any(p == param for p, _ in slots) else None
        if (param, shard) in slots:
            return param, shard
        return None

    tried: list[tuple[tuple, dict]] = []
    for k in range(0, min(len(steps), _MAX_COMBINED) + 1):
        for combo in combinations(steps, k):
            mapped = {}
            for n in names:
                new = _apply(combo, n)
                if new != n and (slot := lands(new)) is not None:
                    mapped[n] = (new, slot)
            if mapped:
                tried.append((combo, mapped))
    tried.sort(key=lambda t: (-len(t[1]), len(t[0]), -sum(s.support for s in t[0])))
    if tried:
        rep.steps = list(tried[0][0])
    taken: dict[tuple, str] = {}
    rejected: dict[str, str] = {}
    choice: dict[str, tuple] = {}
    for combo, mapped in tried:
        for n, (new, slot) in mapped.items():
            if n in choice or n in rejected:
                continue
            param, shard = slot
            spec = w.spec.get(param) or {}
            want = spec.get("shape") if shard is None else (spec.get("shards") or {}).get(shard)
            if not many_per_slot and want is not None and tuple(shapes[n]) != tuple(want):
                rejected[n] = (f"{n} → {new} would land on {param}{'' if shard is None else ' shard ' + str(shard)} "
                               f"but its shape {list(shapes[n])} is not the parameter's {list(want)}")
                continue
            choice[n] = (new, slot, combo)
    for n, (new, slot, combo) in list(choice.items()):
        if many_per_slot:
            continue
        other = taken.get(slot)
        if other is not None:
            rejected[n] = rejected[other] = (f"{other} and {n} both map onto {slot[0]}"
                                             f"{'' if slot[1] is None else ' shard ' + str(slot[1])}: ambiguous")
        taken[slot] = n
    kept = {n: c for n, c in choice.items() if n not in rejected}
    for n, (new, slot, combo) in sorted(kept.items()):
        rep.renames[n] = new
        how = "; ".join(s.describe(n) for s in combo) or "as named"
        share = sum(1 for c in kept.values() if c[2] == combo)
        rep.reasons.append(f"weights-dropped: {n} → {new} (the checkpoint's naming: {how}"
                           f"{f'; the same transform maps {share} names' if share > 1 else ''}; it lands on {slot[0]}"
                           f"{'' if slot[1] is None else ' shard ' + str(slot[1])}, which got no tensor)")
    for n in problem:
        if n in rep.renames:
            continue
        rep.unmapped[n] = rejected.get(n) or (
            f"{n}: no transform of the checkpoint's naming ({'; '.join(s.describe() for s in steps) or 'none found'}) "
            "maps it onto a parameter that got no tensor")
    filled = {(choice[n][1]) for n in rep.renames}
    rep.unfilled = [f"{p}{'' if s is None else ' (shard ' + str(s) + ')'}" for p, s in sorted(slots, key=str)
                    if (p, s) not in filled and not (many_per_slot and any(fp == p for fp, _ in filled))]
    return rep
