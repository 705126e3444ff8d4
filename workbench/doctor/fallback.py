"""What the doctor's findings cost when the engine on the box could not be found: the rules that
then read the workbench's built-in release facts instead of the box's engine source, which release
those facts are from, and what could differ.

The rules read their facts through one :class:`workbench.rules.facts.Facts`; :class:`ReadTracker`
stands in for it while the registry runs and records, per rule, which attributes the rule read
(``Registry.run(on_rule=...)``). The attributes derived from the engine's source are listed here
(:data:`SGLANG_SOURCE_FACTS`, :data:`VLLM_SOURCE_FACTS`: what each reads from the source and what
the built-in table can get wrong), so the list of rules is what the rules actually did on this launch,
not a hand-kept table of rule ids.
"""

from __future__ import annotations

from typing import Any, Optional

from workbench.engine.modelled import SGLANG_VERSION
from workbench.rules.vllm_engine import VLLM_VERSION

__all__ = ["SGLANG_SOURCE_FACTS", "VLLM_SOURCE_FACTS", "ReadTracker", "engine_fallback", "fallback_lines"]

#: ``Facts`` attribute → (what it reads from SGLang's source on the box, what SGLang 0.5.23's
#: built-in facts (:mod:`workbench.engine.modelled`, :mod:`workbench.engine.flag_table`) can get
#: wrong for another release). Sources: ``workbench/rules/facts.py`` (each attribute's docstring).
SGLANG_SOURCE_FACTS = {
    "engine": ("the engine source itself (srt/...)", "anything the rule reads from the source directly"),
    "flag_table": ("the launch flags (srt/server_args.py, srt/arg_groups/fields/*.py)",
                   "a flag added, renamed or removed since that release is judged by its flag list: one the box "
                   "accepts can be called unknown, one it dropped accepted"),
    "algorithms": ("the speculative algorithm names (srt/speculative/spec_info.py)",
                   "an algorithm name added or renamed in another release"),
    "algorithm_choices": ("--speculative-algorithm's argparse choices (srt/server_args.py)",
                          "the names the box's parser accepts"),
    "draft_registry": ("the draft classes the engine registers (srt/models/*.py EntryClass)",
                       "a draft architecture registered in another release is called unknown, a dropped one accepted"),
    "draft_classes": ("the draft classes registered for the algorithm (srt/models/*.py)",
                      "a draft architecture registered in another release is called unknown, a dropped one accepted"),
    "draft_class_unknown": ("whether the draft's architecture is registered (srt/models/*.py)",
                            "a draft architecture registered in another release is called unknown"),
    "draft_load_weights": ("the draft class's load_weights (its renames and skips)",
                           "tensor names another release renames or skips differently: dropped or missing weights "
                           "mis-reported"),
    "weights": ("the draft checkpoint through the draft class's load_weights",
                "tensor names another release renames or skips differently: dropped or missing weights mis-reported"),
    "weights_checkable": ("whether the draft class's load_weights could be read", "whether the weight rules run"),
    "capture": ("the target class's set_eagle3_layers_to_capture (its aux-layer offset rule)",
                "the layers another release captures for the draft's aux ids"),
}

#: The same for a vLLM launch: vLLM's facts (``workbench.rules.vllm_engine.VllmEngine``, read from
#: ``model_executor/models/registry.py``, ``transformers_utils/configs/speculators/``,
#: ``config/speculative.py``, ``entrypoints/cli/main.py``) and its flags (its own parser).
VLLM_SOURCE_FACTS = {
    "vllm": ("the draft classes vLLM registers, its speculators types, the --speculative-config methods, the "
             "console script (model_executor/models/registry.py, config/speculative.py, ...)",
             "a draft architecture or method added or dropped in another release; the release's own loader "
             "behaviour (weight-name mapping, d2t, aux-layer defaults) where a rule reads it"),
    "flag_table": ("vLLM's launch flags (its own argparse, dumped by its interpreter)",
                   "a flag added, renamed or removed since that release"),
}


class ReadTracker:
    """A stand-in for a ``Facts`` object while the registry runs: every attribute read is passed
    through to ``facts`` and recorded under the rule whose check is running (:meth:`start`, given to
    ``Registry.run(on_rule=...)``). ``reads``: ``{rule id: set of attribute names}``. Writes go to
    ``facts``."""

    def __init__(self, facts: Any):
        object.__setattr__(self, "_facts", facts)
        object.__setattr__(self, "reads", {})
        object.__setattr__(self, "_rule", None)

    def start(self, rule: Any) -> None:
        """``Registry.run``'s ``on_rule`` hook: the reads that follow are ``rule``'s."""
        object.__setattr__(self, "_rule", rule.id)
        self.reads.setdefault(rule.id, set())

    def __getattr__(self, name: str) -> Any:
        rule = object.__getattribute__(self, "_rule")
        if rule is not None:
            object.__getattribute__(self, "reads")[rule].add(name)
        return getattr(object.__getattribute__(self, "_facts"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_facts"), name, value)


def engine_fallback(facts: Any, reads: dict[str, set], *, remedy: Optional[str] = None) -> Optional[dict]:
    """What the built-in facts cost on this run, or ``None`` when the engine on the box was read.

    ``facts``: the doctor's ``Facts`` (``engine_missing``: why the engine was not found, set by
    :func:`workbench.doctor.run.gather_facts`); ``reads``: :attr:`ReadTracker.reads`. Returns
    ``{"engine", "release", "why", "rules": {rule: [attribute, ...]}, "facts": {attribute: {"reads",
    "could_differ"}}, "remedy"}``: ``rules`` lists every rule that read a source-derived fact
    (those rules' findings, and their silence, are the built-in release's, not the box's);
    ``remedy``: what the caller's user can give instead (``workbench doctor``: ``--engine-root``),
    else a remedy that names no option."""
    why = getattr(facts, "engine_missing", None)
    if not why:
        return None
    vllm = getattr(facts.launch, "engine", None) == "vllm"
    table = VLLM_SOURCE_FACTS if vllm else SGLANG_SOURCE_FACTS
    rules = {rule: sorted(a for a in attrs if a in table) for rule, attrs in reads.items()}
    rules = {rule: attrs for rule, attrs in rules.items() if attrs}
    used = sorted({a for attrs in rules.values() for a in attrs})
    package = "vllm" if vllm else "sglang"
    return {
        "engine": package, "release": VLLM_VERSION if vllm else SGLANG_VERSION, "why": why,
        "rules": rules,
        "facts": {a: {"reads": table[a][0], "could_differ": table[a][1]} for a in used},
        "remedy": remedy or (f"make the {package} package the server imports readable on the box (the interpreter "
                             "that runs the server must find it)"),
    }


def fallback_lines(fb: Optional[dict]) -> list[str]:
    """:func:`engine_fallback`'s result as the lines that open the doctor's text report (empty for
    ``None``)."""
    if not fb:
        return []
    lines = [f"ENGINE NOT FOUND: the {fb['engine']} package on the box could not be located ({fb['why']})",
             f"  {len(fb['rules'])} rule(s) used {fb['engine']} {fb['release']}'s built-in facts instead of the box's "
             "source: their findings, and their silence, hold for that release only"]
    for rule, attrs in fb["rules"].items():
        lines.append(f"    {rule}: {', '.join(attrs)}")
    for attr, d in fb["facts"].items():
        lines.append(f"  {attr} = {d['reads']}; could differ: {d['could_differ']}")
    lines.append(f"  to read the box's engine: {fb['remedy']}")
    return lines + [""]
