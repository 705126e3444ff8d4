"""Named probe recipes on the EAGLE-3 code path: what to print where, anchored on the code-path map.

A recipe names a map entry (:mod:`workbench.engine.codepath`) and the expressions to print just
before its statement; :func:`recipe_probe` turns it into the probe for the box's own version (the
entry's file and line there), :func:`add_recipe` adds it with :func:`remote.probes.add_probe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from workbench.engine.codepath import CodePathMap
from workbench.errors import SourceLookupError

__all__ = ["ProbeSpec", "Recipe", "RECIPES", "recipe_probe", "add_recipe"]


@dataclass(frozen=True)
class ProbeSpec:
    """A probe to add (:func:`remote.probes.add_probe`): ``path`` on the box, ``line`` to go
    before (1-based; the statement of a map entry), ``function`` it lies in, ``exprs`` and ``tag``;
    ``once_per``: print once per distinct value of this expression (``None``: once per process)."""

    tag: str
    path: str
    line: int
    function: Optional[str]
    exprs: tuple[str, ...]
    entry: str
    once_per: Optional[str] = None


@dataclass(frozen=True)
class Recipe:
    """A named probe on the EAGLE-3 path: before the statement of map entry ``entry``, print
    ``exprs`` (once per process, or once per distinct value of ``once_per``); ``reads``: what the
    values mean."""

    name: str
    entry: str
    exprs: tuple[str, ...]
    description: str
    reads: str
    once_per: Optional[str] = None


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("draft-input-width", "draft-fc-width-check",
           ("hidden_states.shape", "embeds.shape", "hidden_states.dtype", "self.fc.in_features",
            "hidden_states.float().mean().item()", "hidden_states.float().std().item()"),
           "the hidden state the draft receives, just before the fc width check (one line per distinct width)",
           "the draft-extend step after each target forward must show hidden_states.shape[-1] == "
           "self.fc.in_features (number of aux states × target hidden); a line at the embedding width is the "
           "draft's own decode steps (and, on a GPU box, CUDA-graph capture at start-up), where skipping fc is "
           "right; only embedding-width lines, never the fc width, means the aux states never arrive (EAGLE "
           "instead of EAGLE3)", once_per="hidden_states.shape[-1]"),
    Recipe("target-capture-layers", "target-capture-point",
           ("self.layers_to_capture", "getattr(self, 'capture_aux_hidden_states', None)"),
           "the layers the target captures, at the capture test in its forward",
           "an empty list means no aux capture (the EAGLE3 gate was not passed); else the layer inputs "
           "captured (draft id + 1 on Llama)"),
    Recipe("draft-d2t", "d2t-use",
           ("self.hot_token_id is None",
            "None if self.hot_token_id is None else tuple(self.hot_token_id.shape)",
            "None if self.hot_token_id is None else self.hot_token_id[:8].tolist()",
            "None if self.hot_token_id is None else self.hot_token_id[-4:].tolist()"),
           "the d2t map (draft id → target id) the draft worker holds when it maps proposals",
           "None means draft ids are used as target ids (EAGLE, or no d2t); under EAGLE3 the shape is "
           "(draft vocab,) and values are target ids"),
)}


def recipe_probe(cmap: CodePathMap, name: str, *, tag: Optional[str] = None) -> ProbeSpec:
    """The probe of recipe ``name`` on this engine: the anchor is the line of its map entry (so it
    follows the version), the tag defaults to the recipe name. Raises ``KeyError`` for an
    unknown recipe (naming the known ones) and :class:`SourceLookupError` when the entry is not
    in this version's source."""
    if name not in RECIPES:
        raise KeyError(f"no probe recipe {name!r} (recipes: {', '.join(RECIPES)})")
    recipe = RECIPES[name]
    entry = cmap.entry(recipe.entry)
    if not entry.found:
        raise SourceLookupError(f"recipe {name}: the code-path entry {recipe.entry} is not in this engine "
                                f"version ({entry.looked_in})", where=cmap.root)
    return ProbeSpec(tag or name, entry.file, entry.line, entry.function, recipe.exprs, recipe.entry, recipe.once_per)


def add_recipe(box, cmap: CodePathMap, name: str, *, tag: Optional[str] = None, python: Optional[str] = None,
               timeout: float = 60):
    """Add recipe ``name``'s probe on ``box`` (:func:`recipe_probe`, then
    :func:`remote.probes.add_probe` with the map entry's line and function as the anchor).
    ``python``: the interpreter that compiles the patched file on the box (the engine's, e.g.
    :attr:`workbench.engine.EngineInfo.python`). Returns the journalled ``remote.probes.Probe``.
    Raises what those two raise (``KeyError``, :class:`SourceLookupError`, ``remote.errors.ProbeError``
    and its subclasses)."""
    from remote.probes import add_probe

    spec = recipe_probe(cmap, name, tag=tag)
    return add_probe(box, spec.path, before=spec.line, function=spec.function, exprs=list(spec.exprs),
                     tag=spec.tag, once_per=spec.once_per, python=python, timeout=timeout)
