"""Named probe recipes on the EAGLE-3 code path: what to print where, anchored on the code-path map.

A recipe names one or more map entries (:mod:`workbench.engine.codepath`) and the expressions to
print just before each entry's statement; :func:`recipe_probes` turns it into the probes for the
box's own version (the entries' files and lines there), :func:`add_recipes` adds several recipes'
probes with :func:`remote.probes.add_probe` (all or none), :func:`read_recipes` reads them back
from the server's log for one launch (its process group), grouped by recipe;
:func:`missing_required` says whether a launch's readings are complete evidence, and
:func:`weights_unmatched` / :func:`params_left_at_init` turn the two weight recipes' readings into
their answer.

The recipes, in :data:`RECIPES`' order (SGLang 0.5.23's file and line; the sandbox's mirror of it
in ``workbench/sandbox/srt`` has the same statements at its own lines):

- ``draft-weights-unmatched``: the checkpoint names ``load_weights`` matched to nothing. Two
  conditional probes (``when="param_name not in params_dict"``) before the two ``if param_name in
  params_dict:`` tests that have no ``else`` (``srt/models/llama_eagle3.py:363``, in the stacked
  q/k/v, gate/up loop, and ``:373``, the other parameters; the map's ``draft-weight-drop``), and
  ``.ran`` before ``params_dict = dict(self.named_parameters())`` (``:326``, ``draft-params-dict``),
  which shows that ``load_weights`` ran with the probes in place: without it, no unmatched name is
  no evidence.
- ``draft-params-at-init``: the parameters ``load_weights`` left at their initial values. Every
  draft parameter's L2 norm at ``load_weights``' first statement (``.before``, ``:326``) and again
  in the worker's ``init_lm_head`` before the target's embedding / lm_head are shared
  (``srt/speculative/eagle_worker_v2.py:353``, ``lm-head-shared``); a norm that did not change
  belongs to a parameter no checkpoint tensor reached.
- ``draft-input-width`` (``llama_eagle3.py:238``): the width reaching ``fc``.
- ``target-capture-layers`` (``srt/models/llama.py:487``, the layer call holding the capture test
  at ``:492``): the layers the target really captures.
- ``draft-d2t`` (``eagle_worker_v2.py:757``): the token map the draft worker holds.

On other releases the probes follow the map (its entries there, the worker the server runs:
``eagle_worker.py`` lines on 0.4.6 … 0.5.9 by default); a recipe whose entry a release lacks
(``draft-weights-unmatched`` on 0.4.6 / 0.4.8, which log their misses) raises
:class:`SourceLookupError` before anything is added. A probe in a base-class method the draft
reaches through ``super()`` (0.4.6 … 0.4.9 ``LlamaForCausalLM.load_weights``, which loads the
target too) prints only when ``type(self).__name__`` is the draft class.

vLLM (:data:`VLLM_RECIPES`, on a map of :func:`workbench.engine.codepath_vllm.vllm_code_path_map`,
``cmap.engine == "vllm"``; vLLM 0.32.0 lines, paths relative to the ``vllm`` package), the same
names as on SGLang:

- ``target-capture-layers``: the layers the target's model keeps, after
  ``self.aux_hidden_state_layers = tuple(sorted(set(layers)))`` (``model_executor/models/interfaces.py:1578``,
  ``capture-set``), and ``.config``: the ids the model runner passes, before
  ``self.model.set_aux_hidden_state_layers(aux_layers)`` (``v1/worker/gpu_model_runner.py:5249``; the
  V2 runner's ``eagle3_utils.py:31`` when the map was made for V2). Both run once, at load time.

Every vLLM recipe sits outside the compiled and graph-captured code (load time, the proposer's eager
``combine_hidden_states`` / ``compute_logits`` calls). Without ``--enforce-eager`` vLLM keys its
torch.compile cache on the text of every file the compiled forward traced (vLLM 0.32.0
``compilation/backends.py:1043-1062``: ``llama.py``, ``llama_eagle3.py``, ``interfaces.py`` among
them), so the probe launch compiles afresh; after the revert the original text finds the old cache
entry again.
- ``draft-input-width``: the width reaching ``fc``, at the first statement of
  ``Eagle3LlamaForCausalLM.combine_hidden_states`` (``model_executor/models/llama_eagle3.py:401``;
  called by the proposer in eager Python, never inside a compiled graph).
- ``draft-d2t``: the draft's ``draft_id_to_target_id`` at ``compute_logits``' ``if
  self.draft_id_to_target_id is None:`` (``llama_eagle3.py:378``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from remote.probes import MAX_PRINTS, MAX_REPR
from workbench.engine.codepath import CodePathMap, PathEntry, code_path_map
from workbench.engine.source import EngineSource
from workbench.errors import SourceLookupError

__all__ = ["ProbeSpec", "RecipeProbe", "Recipe", "RECIPES", "VLLM_RECIPES", "recipes_for", "recipe_entries", "recipe_probes", "recipe_probe",
           "recipe_of", "add_recipe", "add_recipes", "read_recipes", "missing_required", "weights_unmatched",
           "ParamsAtInit", "params_left_at_init"]


@dataclass(frozen=True)
class ProbeSpec:
    """A probe to add (:func:`remote.probes.add_probe`): ``path`` on the box, ``line`` to go
    before (1-based; the statement of a map entry, in the file as it is when the spec was made),
    ``function`` it lies in, ``exprs`` and ``tag``; ``entry``: the map entry; ``once_per``: print
    once per distinct value of this expression (``None``: once per process); ``when``: print only
    when this is true; ``max_prints`` / ``max_repr`` as in ``add_probe``; ``code``: the anchor
    line's text; ``recipe``: the recipe it belongs to; ``role``: what this probe of the recipe
    shows (``""`` for the recipe's main probe)."""

    tag: str
    path: str
    line: int
    function: Optional[str]
    exprs: tuple[str, ...]
    entry: str
    once_per: Optional[str] = None
    when: Optional[str] = None
    max_prints: int = MAX_PRINTS
    max_repr: int = MAX_REPR
    code: Optional[str] = None
    recipe: Optional[str] = None
    role: str = ""


@dataclass(frozen=True)
class RecipeProbe:
    """One probe of a recipe: before the statement of map entry ``entry`` (its ``occurrence``-th
    line: 0 the entry's line, k its ``also[k-1]``), print ``exprs``; tag = the recipe's tag +
    ``suffix``; ``once_per`` / ``when`` / ``max_prints`` / ``max_repr`` as in ``add_probe``;
    ``role`` says what this probe shows; ``required``: a launch's readings are complete only when
    this probe printed (a conditional probe that prints nothing on a healthy engine is not);
    ``needs``: text the anchor line must hold (the variables the expressions read), else the
    version's statement there is another one and the recipe does not apply."""

    entry: str
    exprs: tuple[str, ...]
    suffix: str = ""
    occurrence: int = 0
    once_per: Optional[str] = None
    when: Optional[str] = None
    max_prints: int = MAX_PRINTS
    max_repr: int = MAX_REPR
    role: str = ""
    required: bool = True
    needs: Optional[str] = None


@dataclass(frozen=True)
class Recipe:
    """A named probe (or set of probes) on the EAGLE-3 path. ``probes[0]`` is the main one (its tag
    is the recipe's); ``description``: what it shows; ``reads``: how to read its values;
    ``limits``: what it cannot show."""

    name: str
    probes: tuple[RecipeProbe, ...]
    description: str
    reads: str
    limits: str = ""

    @property
    def entry(self) -> str:
        """The main probe's map entry."""
        return self.probes[0].entry

    @property
    def entries(self) -> tuple[str, ...]:
        """Every map entry the recipe's probes stand on, in order, once each."""
        return tuple(dict.fromkeys(p.entry for p in self.probes))

    @property
    def exprs(self) -> tuple[str, ...]:
        """The main probe's expressions."""
        return self.probes[0].exprs

    @property
    def once_per(self) -> Optional[str]:
        """The main probe's ``once_per``."""
        return self.probes[0].once_per

    @property
    def when(self) -> Optional[str]:
        """The main probe's ``when``."""
        return self.probes[0].when

    def to_dict(self) -> dict:
        """JSON-ready: name, description, reads, limits and each probe (entry, exprs, suffix, ...)."""
        return {"name": self.name, "entry": self.entry, "entries": list(self.entries), "exprs": list(self.exprs),
                "description": self.description, "reads": self.reads, "limits": self.limits,
                "probes": [{**dataclasses.asdict(p), "exprs": list(p.exprs)} for p in self.probes]}


#: The draft model, in the worker: SGLang's ``EagleDraftWorker`` holds it as
#: ``self.draft_runner.model`` (``srt/speculative/eagle_worker_v2.py``), SGLang's V1
#: ``EAGLEWorker`` as ``self.draft_model_runner.model`` (a property, ``eagle_worker.py`` 0.4.6 …
#: 0.5.12), the sandbox's ``EAGLEWorker`` as ``self.draft_model``.
_WORKER_DRAFT = ("(self.draft_runner.model if hasattr(self, 'draft_runner') else self.draft_model_runner.model "
                 "if hasattr(self, 'draft_model_runner') else self.draft_model)")
#: Every parameter's L2 norm, as text (``'nan'`` stays parseable), computed in float32 without a
#: float32 copy of the tensor (``torch.linalg.vector_norm(..., dtype=)``); ``.item()`` synchronises,
#: which is why these probes sit at load time, never in a forward (CUDA-graph capture).
_NORMS = ("{{n: repr(torch.linalg.vector_norm(p.detach(), dtype=torch.float32).item()) "
          "for n, p in {model}.named_parameters()}}")
PARAM_NORMS_BEFORE = _NORMS.format(model="self")
PARAM_NORMS_AFTER = _NORMS.format(model=_WORKER_DRAFT)
DRAFT_IS_EAGLE3 = "self.speculative_algorithm.is_eagle3()"
#: ``hasattr`` and a plain attribute read rather than ``getattr(..., None)``: probe expressions
#: may not call ``getattr`` (:func:`remote.probes.check_expression`).
DRAFT_HEAD_FROM_TARGET = (f"({_WORKER_DRAFT}.load_lm_head_from_target if hasattr({_WORKER_DRAFT}, "
                          "'load_lm_head_from_target') else None)")
TARGET_CAPTURES_AUX = "(self.capture_aux_hidden_states if hasattr(self, 'capture_aux_hidden_states') else None)"
_UNMATCHED = "param_name not in params_dict"

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("draft-weights-unmatched", (
        RecipeProbe("draft-weight-drop", ("name", "param_name", "shard_id"), occurrence=0,
                    once_per="(param_name, shard_id)", when=_UNMATCHED, max_prints=64, required=False,
                    needs="param_name in params_dict", role="dropped in the stacked q/k/v, gate/up loop"),
        RecipeProbe("draft-weight-drop", ("name", "param_name"), suffix=".2", occurrence=1,
                    once_per="param_name", when=_UNMATCHED, max_prints=64, required=False,
                    needs="param_name in params_dict", role="dropped among the other parameters"),
        RecipeProbe("draft-params-dict", ("type(self).__name__",), suffix=".ran",
                    role="load_weights ran with these probes in place (once per process): without this line, "
                         "no unmatched name is no evidence"),
    ),
        "the checkpoint names load_weights matched to no parameter, at its two `if param_name in params_dict:` "
        "tests (no else: SGLang drops them without a word); only those names print, once each",
        "once the .ran line has printed, no other line means every checkpoint name reached a parameter (d2t "
        "and t2d are handled before the tests and never print); each other line names one dropped tensor: "
        "`name` after load_weights' renames "
        "(midlayer→layers.0, q/k/v_proj→qkv_proj, ...), `param_name` the parameter it looked for; the "
        "parameter it should have filled keeps its initial value (see draft-params-at-init)",
        "the name printed is the renamed one (load_weights does not keep the checkpoint's own spelling); at "
        "most 64 lines per process and site; a draft class without these tests (Kimi-K2.5's MLA draft logs "
        "its skips instead) has no such entry in the map"),
    Recipe("draft-params-at-init", (
        RecipeProbe("lm-head-shared", (PARAM_NORMS_AFTER, DRAFT_IS_EAGLE3, DRAFT_HEAD_FROM_TARGET),
                    max_repr=200_000, role="after load_weights (the worker's init_lm_head, before the target's "
                                           "embedding / lm_head are shared)"),
        RecipeProbe("draft-params-dict", (PARAM_NORMS_BEFORE, "type(self).__name__"), suffix=".before",
                    max_repr=200_000, role="before load_weights reads anything (its first statement)"),
    ),
        "the draft parameters load_weights left at their initial values: every parameter's L2 norm when "
        "load_weights starts and again when the worker shares the target's embedding (once per process)",
        "a parameter whose norm is the same before and after was never written by load_weights: no checkpoint "
        "tensor reached it (params_left_at_init lists them); model.embed_tokens.weight is always among them "
        "(EAGLE-3 drafts take the target's embedding right after this point), lm_head.weight too when the "
        "target's head replaces the draft's (not EAGLE3, or no draft_vocab_size); a norm of nan / inf is "
        "uninitialised memory (torch.empty)",
        "a parameter only partly written (one stacked q/k/v shard dropped) changes and is not listed: "
        "draft-weights-unmatched names the shard; a checkpoint tensor equal to the initial value (a norm "
        "weight of ones) looks unwritten; post-load quantisation that rewrites a parameter hides it; the "
        "norms cost one GPU synchronisation per parameter, twice, at load time"),
    Recipe("draft-input-width", (
        RecipeProbe("draft-fc-width-check",
                    ("hidden_states.shape", "embeds.shape", "hidden_states.dtype", "self.fc.in_features",
                     "hidden_states.float().mean().item()", "hidden_states.float().std().item()"),
                    once_per="hidden_states.shape[-1]"),
    ),
        "the hidden state the draft receives, just before the fc width check (one line per distinct width)",
        "the draft-extend step after each target forward must show hidden_states.shape[-1] == "
        "self.fc.in_features (number of aux states × target hidden); a line at the embedding width is the "
        "draft's own decode steps (and, on a GPU box, CUDA-graph capture at start-up), where skipping fc is "
        "right; only embedding-width lines, never the fc width, means the aux states never arrive (EAGLE "
        "instead of EAGLE3)"),
    Recipe("target-capture-layers", (
        RecipeProbe("target-capture-point",
                    ("self.layers_to_capture", TARGET_CAPTURES_AUX)),
    ),
        "the layers the target captures, at the capture test in its forward",
        "an empty list means no aux capture (the EAGLE3 gate was not passed); else the layer inputs "
        "captured (draft id + 1 on Llama)"),
    Recipe("draft-d2t", (
        RecipeProbe("d2t-use",
                    ("self.hot_token_id is None",
                     "None if self.hot_token_id is None else tuple(self.hot_token_id.shape)",
                     "None if self.hot_token_id is None else self.hot_token_id[:8].tolist()",
                     "None if self.hot_token_id is None else self.hot_token_id[-4:].tolist()")),
    ),
        "the d2t map (draft id → target id) the draft worker holds when it maps proposals",
        "None means draft ids are used as target ids (EAGLE, or no d2t); under EAGLE3 the shape is "
        "(draft vocab,) and values are target ids"),
)}


VLLM_RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("target-capture-layers", (
        RecipeProbe("capture-set", ("self.aux_hidden_state_layers", "type(self).__name__", "len(self.layers)"),
                    required=False,
                    role="the layers the target's model keeps (sorted, de-duplicated), once per process; a target "
                         "with its own setter (DeepSeek-V2/V3, Kimi-K2.5: deepseek_v2.py set_aux_hidden_state_layers) "
                         "never passes here"),
        RecipeProbe("capture-configured", ("aux_layers",), suffix=".config", needs="aux_layers",
                    role="the ids the model runner passes: the draft config's, else the target's defaults"),
    ),
        "the aux layers the target captures: what the model runner passes (.config) and what the model keeps, "
        "at load time",
        "vLLM's convention: id k is the hidden state after k layers (+ residual), the input of layer k; a draft "
        "trained on SGLang (llama: input of layer k+1) needs ids + 1; `.config` equal to the target's defaults "
        "(2, L//2, L-3) while the draft's config has ids means the runner did not read them (V2 and SGLang's "
        "nested eagle_config)",
        "shows the ids, not the tensors: which layers the draft was trained on is not in the checkpoint; the model-side "
        "line prints only for targets that keep the layers through EagleModelMixin (Llama, Qwen, ...): DeepSeek-V2/V3 "
        "store the runner's tuple as given (unsorted), so .config is what they capture"),
    Recipe("draft-input-width", (
        RecipeProbe("draft-fc-apply",
                    ("hidden_states.shape", "self.model.use_aux_hidden_state", "self.model.fc_input_size",
                     "self.model.num_aux_hidden_states", "hidden_states.dtype"),
                    once_per="hidden_states.shape[-1]"),
    ),
        "the hidden state the draft receives from the target, at combine_hidden_states before fc (one line per "
        "distinct width)",
        "hidden_states.shape[-1] must equal self.model.fc_input_size (number of aux states × target hidden); "
        "use_aux_hidden_state False means fc is skipped (a draft without aux states)",
        "vLLM has no silent width check: a wrong width fails loudly in fc; this shows what arrived"),
    Recipe("draft-d2t", (
        RecipeProbe("d2t-use",
                    ("self.draft_id_to_target_id is None",
                     "None if self.draft_id_to_target_id is None else tuple(self.draft_id_to_target_id.shape)",
                     "None if self.draft_id_to_target_id is None else self.draft_id_to_target_id[:8].tolist()",
                     "None if self.draft_id_to_target_id is None else self.draft_id_to_target_id[-4:].tolist()",
                     "self.config.draft_vocab_size")),
    ),
        "the d2t offsets (draft id → target id = id + d2t[id]) the draft holds when it computes logits",
        "None means the draft vocab is the target's (no mapping); else the shape is (draft vocab,); all zeros "
        "with a draft vocab smaller than the target's means the checkpoint had no d2t (the parameter kept its "
        "zeros)",
        "printed once per process, at the first draft step"),
)}


def recipes_for(engine: str = "sglang") -> dict[str, Recipe]:
    """The recipe table of ``engine``: :data:`RECIPES` (SGLang and the sandbox) or
    :data:`VLLM_RECIPES` (``"vllm"``). Raises ``KeyError`` for another engine."""
    if engine == "vllm":
        return VLLM_RECIPES
    if engine in ("sglang", "sandbox"):
        return RECIPES
    raise KeyError(f"no probe recipes for engine {engine!r} (engines: sglang, vllm)")


def _recipe(name: str, engine: str = "sglang") -> Recipe:
    table = recipes_for(engine)
    if name not in table:
        raise KeyError(f"no probe recipe {name!r} on {engine} (recipes: {', '.join(table)})")
    return table[name]


def recipe_entries(names: Iterable[str], engine: str = "sglang") -> list[str]:
    """The map entries the recipes ``names`` of ``engine`` stand on (for ``code_path_map(...,
    keys=...)``), in order, once each. Raises ``KeyError`` for an unknown recipe."""
    return list(dict.fromkeys(e for n in names for e in _recipe(n, engine).entries))


def _entry_key(cmap: CodePathMap, key: str) -> str:
    """The map key of a recipe's entry on ``cmap``: a vLLM map made for the V2 model runner has the
    runner-specific entries as ``KEY.v2``."""
    if cmap.engine == "vllm" and cmap.runner == "v2" and any(e.key == key + ".v2" for e in cmap.entries):
        return key + ".v2"
    return key


def _map_keys(cmap: CodePathMap, names: Iterable[str]) -> list[str]:
    keys = recipe_entries(names, cmap.engine)
    return keys + [k + ".v2" for k in keys] if cmap.engine == "vllm" else keys


def _remap(box, cmap: CodePathMap, keys: Sequence[str], timeout: float) -> CodePathMap:
    """A new map of ``keys`` for the engine of ``cmap`` (its files as they are now)."""
    src = EngineSource(box, cmap.root, cmap.version, timeout=timeout)
    if cmap.engine == "vllm":
        from workbench.engine.codepath_vllm import vllm_code_path_map

        return vllm_code_path_map(src, target_arch=cmap.target_arch, draft_arch=cmap.draft_arch,
                                  method=cmap.method or "eagle3", keys=keys, runner=cmap.runner)
    return code_path_map(src, target_arch=cmap.target_arch, draft_arch=cmap.draft_arch, keys=keys,
                         worker=cmap.worker)


def _site(cmap: CodePathMap, name: str, rp: RecipeProbe) -> tuple[PathEntry, int]:
    entry = cmap.entry(_entry_key(cmap, rp.entry))
    if not entry.found:
        raise SourceLookupError(f"recipe {name}: the code-path entry {rp.entry} is not in this engine "
                                f"version ({entry.looked_in})", where=cmap.root)
    lines = (entry.probe_line,) + tuple(entry.also_anchor or entry.also)  # a probe goes before a statement
    if rp.occurrence >= len(lines):
        raise SourceLookupError(f"recipe {name}: the code-path entry {rp.entry} has {len(lines)} line(s) in this "
                                f"engine version ({', '.join(map(str, lines))}), the recipe needs "
                                f"{rp.occurrence + 1} ({rp.role})", where=entry.file or cmap.root)
    line = lines[rp.occurrence]
    if rp.needs is not None:
        codes = (entry.code,) + tuple(entry.also_code)
        text = codes[rp.occurrence] if rp.occurrence < len(codes) else None
        if text is None or rp.needs not in text:
            raise SourceLookupError(f"recipe {name}: the code-path entry {rp.entry} in this version is "
                                    f"`{(text or '?').strip()}` (line {line}), not a test on `{rp.needs}`: the "
                                    "recipe's expressions would not apply there", where=entry.file or cmap.root)
    return entry, line


def _spec(cmap: CodePathMap, name: str, rp: RecipeProbe, base: str, code: Optional[str] = None) -> ProbeSpec:
    entry, line = _site(cmap, name, rp)
    codes = tuple(entry.anchor_code) or (entry.code,) + tuple(entry.also_code)  # the anchor lines' text
    text = codes[rp.occurrence] if rp.occurrence < len(codes) else None
    when = rp.when
    owner = (entry.function or "").split(".")[0]
    try:
        own = cmap.entry("draft-fc-defined")
        draft_file = own.file if own.found else None
    except KeyError:
        draft_file = None
    elsewhere = entry.file != draft_file if draft_file else (entry.function or "").endswith(".load_weights")
    if cmap.engine != "vllm" and rp.entry.startswith("draft-") and owner and owner != cmap.draft_arch and elsewhere:
        # a base class's method in another file, which the draft reaches through super() (0.4.6 … 0.4.9:
        # the draft's tensors go to LlamaForCausalLM.load_weights in llama.py, which loads the target
        # too): print for the draft only. A class of the draft's own file (its inner LlamaModel, whose
        # forward holds the fc width check) is the draft's: no condition.
        only = f"type(self).__name__ == {cmap.draft_arch!r}"
        when = f"({when}) and {only}" if when else only
    return ProbeSpec(base + rp.suffix, entry.file, line, entry.function, rp.exprs, entry.key, rp.once_per, when,
                     rp.max_prints, rp.max_repr, code if code is not None else text, name, rp.role)


def recipe_probes(cmap: CodePathMap, name: str, *, tag: Optional[str] = None) -> list[ProbeSpec]:
    """The probes of recipe ``name`` on this engine, main probe first: each anchor is the line of its
    map entry (so it follows the version), the tags are ``tag`` (default the recipe name) plus each
    probe's suffix (``draft-params-at-init``, ``draft-params-at-init.before``). The lines are those
    of the files as ``cmap`` saw them: :func:`add_recipes` re-reads them before each add. Raises
    ``KeyError`` for an unknown recipe (naming the known ones) and :class:`SourceLookupError` when
    an entry (or the entry's second line a probe needs) is not in this version's source."""
    recipe = _recipe(name, cmap.engine)
    return [_spec(cmap, name, rp, tag or name) for rp in recipe.probes]


def recipe_probe(cmap: CodePathMap, name: str, *, tag: Optional[str] = None) -> ProbeSpec:
    """The main probe of recipe ``name`` (:func:`recipe_probes`' first), tagged ``tag`` or the
    recipe name. Raises as :func:`recipe_probes`."""
    recipe = _recipe(name, cmap.engine)
    return _spec(cmap, name, recipe.probes[0], tag or name)


def recipe_of(probe: Any) -> Optional[str]:
    """The recipe a probe (a ``remote.probes.Probe``, or anything with ``exprs``) belongs to,
    recognised by its expressions (so a custom tag does not matter); ``None`` for a probe that is
    no recipe's."""
    exprs = tuple(getattr(probe, "exprs", ()))
    for recipe in list(RECIPES.values()) + list(VLLM_RECIPES.values()):
        if any(rp.exprs == exprs for rp in recipe.probes):
            return recipe.name
    return None


def _fresh_spec(box, cmap: CodePathMap, name: str, rp: RecipeProbe, base: str, timeout: float) -> ProbeSpec:
    """The spec of ``rp`` from the file as it is now (a new map of that entry: probes added since
    ``cmap`` was made moved the lines down; statements inside probe blocks are never entries)."""
    fresh = _remap(box, cmap, [rp.entry, rp.entry + ".v2"] if cmap.engine == "vllm" else [rp.entry], timeout)
    return _spec(fresh, name, rp, base)


def add_recipes(box, cmap: CodePathMap, names: Sequence[str], *, python: Optional[str] = None,
                timeout: float = 60, tag: Optional[str] = None,
                overrides: Optional[Mapping[str, Any]] = None) -> list:
    """Add the probes of the recipes ``names`` on ``box``, all or none; returns the journalled
    ``remote.probes.Probe`` list, in order (a recipe's main probe first).

    ``cmap``: the code-path map of the box's engine (its root, version and target / draft
    classes); each probe's line is re-read from the file just before it is added (a probe added
    before it in the same file moved the lines down). ``python``: the interpreter that compiles
    the patched file on the box (the engine's, e.g. :attr:`workbench.engine.EngineInfo.python`).
    ``tag``: the base tag instead of the recipe name (one recipe only). ``overrides``:
    ``once_per`` / ``when`` / ``max_prints`` / ``max_repr`` for every probe added. A probe already
    in place (same tag, file, expressions) is returned as it is. ``timeout``: seconds for each box
    call.

    When one add fails, the probes this call added are reverted (newest first) and the error is
    raised; a revert that fails too is named in a ``remote.errors.ProbeError`` raised from it.
    Raises ``KeyError`` for an unknown recipe, ``ValueError`` for ``tag`` with several recipes or
    an unknown override, :class:`SourceLookupError` when an entry is not in this version (before
    anything is added), and ``remote.errors.ProbeError`` and its subclasses from ``add_probe``.
    """
    from remote.errors import ProbeError
    from remote.probes import add_probe, list_probes, revert_probe

    names = list(names)
    for name in names:
        _recipe(name, cmap.engine)
    if tag is not None and len(names) != 1:
        raise ValueError(f"a tag names one recipe's probes; {len(names)} recipes given")
    overrides = dict(overrides or {})
    unknown = set(overrides) - {"once_per", "when", "max_prints", "max_repr"}
    if unknown:
        raise ValueError(f"unknown override(s) {sorted(unknown)}: once_per, when, max_prints, max_repr")
    now = _remap(box, cmap, _map_keys(cmap, names), timeout)
    for name in names:  # every entry in this version, before anything is added
        recipe_probes(now, name, tag=tag)
    added: list = []  # added by this call: reverted if a later one fails
    result: list = []  # added or already in place, in order
    try:
        for name in names:
            for rp in _recipe(name, cmap.engine).probes:
                rp = dataclasses.replace(rp, **overrides)
                spec = _fresh_spec(box, cmap, name, rp, tag or name, timeout)
                existing = next((p for p in list_probes(box, timeout=timeout) if p.tag == spec.tag), None)
                before: Any = spec.line
                if existing is not None and existing.path == spec.path and existing.exprs == spec.exprs \
                        and existing.function == spec.function:
                    before = existing.anchor  # in place already: the map's line moved down by its block
                probe = add_probe(box, spec.path, before=before, function=spec.function, exprs=list(spec.exprs),
                                  tag=spec.tag, once_per=spec.once_per, when=spec.when, max_prints=spec.max_prints,
                                  max_repr=spec.max_repr, python=python, root=cmap.root, timeout=timeout)
                if existing is None:
                    added.append(probe)
                result.append(probe)
    except BaseException as exc:
        problems = []
        for probe in reversed(added):
            try:
                revert_probe(box, probe, timeout=timeout)
            except ProbeError as rexc:
                problems.append(f"{probe.tag}: {rexc}")
        if problems:
            raise ProbeError(f"adding recipe probes failed ({exc}); reverting the ones added before it failed "
                             "too: " + "; ".join(problems), box=getattr(box, "name", None)) from exc
        raise
    return result


def add_recipe(box, cmap: CodePathMap, name: str, *, tag: Optional[str] = None, python: Optional[str] = None,
               timeout: float = 60):
    """Add the probe of the one-probe recipe ``name`` on ``box`` (:func:`add_recipes` with that
    name) and return it (a ``remote.probes.Probe``). A recipe of several probes
    (``draft-weights-unmatched``, ``draft-params-at-init``) raises ``ValueError`` before anything
    is added: use :func:`add_recipes`, which returns them all (to revert them all). Otherwise
    raises what :func:`add_recipes` raises."""
    recipe = _recipe(name, cmap.engine)
    if len(recipe.probes) != 1:
        raise ValueError(f"recipe {name} is {len(recipe.probes)} probes "
                         f"({', '.join((tag or name) + rp.suffix for rp in recipe.probes)}); add it with add_recipes, "
                         "which returns them all")
    return add_recipes(box, cmap, [name], python=python, timeout=timeout, tag=tag)[0]


def read_recipes(box, log_path, probes: Sequence[Any], *, pgid: Any, timeout: float = 30) -> dict[str, list]:
    """What the recipe probes ``probes`` (as :func:`add_recipes` returned them, or from
    ``remote.probes.list_probes``) printed into the log ``log_path`` on the box, by one launch:
    ``{recipe name: [remote.probes.ProbeReading, ...]}`` in log order, every recipe of
    ``probes`` present (an empty list when nothing printed), in the order first met.

    ``pgid``: the launch (its process group id, or its ``ServerHandle`` / ``ServerProcess``;
    :func:`remote.probes.launch_pgid`); only its lines count: the same tags printed by an earlier
    launch into an appended log are not evidence about this one. ``None`` reads every launch's
    lines (each reading has its ``pgid``). A probe that is no recipe's (:func:`recipe_of`) is
    grouped under its tag. ``timeout``: seconds for each grep on the box. Raises what
    ``remote.probes.read_probe_log`` raises (``RemoteFileNotFound`` for a missing log, ...)."""
    from remote.probes import read_probe_log

    out: dict[str, list] = {}
    for probe in probes:
        name = recipe_of(probe) or probe.tag
        out.setdefault(name, []).extend(read_probe_log(box, log_path, probe, pgid=pgid, timeout=timeout))
    for name in out:
        out[name].sort(key=lambda r: r.line_number)
    return out


def missing_required(name: str, readings: Iterable[Any], *, tag: Optional[str] = None,
                     engine: str = "sglang") -> list[str]:
    """The tags of recipe ``name``'s required probes (``RecipeProbe.required``) that printed no
    line among ``readings`` (one launch's, as :func:`read_recipes` gives them): ``[]`` when the
    readings are complete evidence. ``tag``: the base tag the probes were added under (default the
    recipe name); ``engine``: whose recipe (``"sglang"`` / ``"vllm"``). Raises ``KeyError`` for an
    unknown recipe."""
    base = tag or name
    printed = {r.tag for r in readings if not r.error}
    return [base + rp.suffix for rp in _recipe(name, engine).probes if rp.required and base + rp.suffix not in printed]


def weights_unmatched(readings: Iterable[Any]) -> list[str]:
    """The checkpoint names (as ``load_weights`` had renamed them) that matched no parameter, from
    ``draft-weights-unmatched`` readings: distinct, in the order printed (several TP ranks print
    the same names once). Readings of a failed probe are skipped (``reading.error`` says why)."""
    names: list[str] = []
    for r in readings:
        if r.error or "name" not in r.values:
            continue
        name = r.values["name"]
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names


@dataclass(frozen=True)
class ParamsAtInit:
    """What ``draft-params-at-init`` shows, per launch.

    ``left``: ``{parameter name: its norm (text)}`` of the parameters whose L2 norm was the same
    before and after ``load_weights`` (never written), in any process that printed both lines;
    ``shared_from_target``: those of ``left`` that the worker replaces with the target's right
    after (the embedding always, the lm_head when the target's head is used), which is how SGLang
    works and no fault; ``faults``: ``left`` without them. ``changed``: parameters written;
    ``unpaired``: pids that printed only one of the two lines (a reading lost, or a process that
    did not load the draft); ``compared``: the number of processes compared."""

    left: dict = field(default_factory=dict)
    shared_from_target: tuple = ()
    changed: tuple = ()
    unpaired: tuple = ()
    compared: int = 0

    @property
    def faults(self) -> dict:
        """``left`` without the parameters the target's embedding / lm_head replace."""
        return {k: v for k, v in self.left.items() if k not in self.shared_from_target}

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"left": dict(self.left), "faults": self.faults, "shared_from_target": list(self.shared_from_target),
                "changed": list(self.changed), "unpaired": list(self.unpaired), "compared": self.compared}


def _same_norm(a: Any, b: Any) -> bool:
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    return x == y or (math.isnan(x) and math.isnan(y))


def params_left_at_init(readings: Iterable[Any]) -> ParamsAtInit:
    """The draft parameters ``load_weights`` never wrote, from ``draft-params-at-init`` readings
    (both of its probes; read them for one launch): per process (``pid``), the norms printed by
    the ``.before`` probe (``load_weights``' first statement) against those printed after loading
    (the worker's ``init_lm_head``); a parameter with the same norm in both was not written.
    Readings of a failed probe, or whose norms raised, are skipped. See :class:`ParamsAtInit`."""
    before: dict = {}
    after: dict = {}
    flags: dict = {}
    for r in readings:
        if r.error:
            continue
        if isinstance(r.values.get(PARAM_NORMS_BEFORE), dict):
            before.setdefault(r.pid, r.values[PARAM_NORMS_BEFORE])
        elif isinstance(r.values.get(PARAM_NORMS_AFTER), dict):
            after.setdefault(r.pid, r.values[PARAM_NORMS_AFTER])
            flags.setdefault(r.pid, (r.values.get(DRAFT_IS_EAGLE3), r.values.get(DRAFT_HEAD_FROM_TARGET)))
    left: dict = {}
    changed: list = []
    shared: list = []
    pids = [p for p in before if p in after]
    for pid in pids:
        eagle3, head_from_target = flags.get(pid, (None, None))
        for name, norm in before[pid].items():
            if name not in after[pid]:
                continue
            if _same_norm(norm, after[pid][name]):
                left.setdefault(name, norm)
                head_shared = eagle3 is not True or head_from_target is True
                if ("embed_tokens" in name or (head_shared and name.startswith("lm_head."))) and name not in shared:
                    shared.append(name)
            elif name not in changed:
                changed.append(name)
    changed = [n for n in changed if n not in left]
    unpaired = tuple(sorted({p for p in list(before) + list(after) if p not in pids}, key=lambda p: (p is None, p)))
    return ParamsAtInit(left, tuple(shared), tuple(changed), unpaired, len(pids))
