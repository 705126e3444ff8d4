"""A repair checked before it is offered: the draft's facts as the repaired copy would have them,
and the rules run on them (a fix the doctor itself would reject is never offered).

:func:`repaired_facts` builds the :class:`workbench.rules.facts.Facts` of the copy a
:class:`workbench.rules.fix.DraftRepair` makes (its ``config`` keys set, ``config_remove`` keys
dropped, ``renames`` and ``transposes`` applied to the tensor table) without touching the box;
:func:`rejections` runs the named rules on them and returns the error and warning findings that
remain. Only the facts a config/tensor-table change reaches are rebuilt: the launch, the target and
the engine source are the original run's; derived facts (capture, weights) are worked out afresh
(``weights``: ``None`` unless asked for, so that the check never reads the box).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from workbench.checkpoint.facts import draft_facts_from
from workbench.rules.facts import Facts
from workbench.rules.finding import Finding
from workbench.rules.fix import DraftRepair

__all__ = ["repaired_facts", "rejections", "stored_transposed", "AUX_ID_RULES"]

#: The rules that judge a draft's aux layer ids (:mod:`workbench.rules.aux_layers`): a repair that
#: writes ids is checked against these.
AUX_ID_RULES = ("aux-config-unread", "aux-layer-ids-invalid", "aux-layer-ids-out-of-range", "aux-ids-ignored",
                "aux-count-mismatch")


def repaired_facts(facts: Facts, repair: DraftRepair) -> Facts:
    """The facts of the draft copy ``repair`` makes from ``facts.draft`` (``ValueError`` when the
    run has no draft). Config: top-level keys replaced (a nested dict replaces the whole key),
    ``config_remove`` dropped. Tensors: renamed (``renames``), reshaped to the transposed shape
    (``transposes``), added with their :class:`TensorData` shape (``tensors``). ``weights`` is
    ``None`` on the result (the tensor-level weight rules are not rerun: they read the engine's
    load_weights from the box)."""
    draft = facts.draft
    if draft is None:
        raise ValueError("repaired_facts: the run has no draft")
    config = {**(draft.config if isinstance(draft.config, dict) else {}), **repair.config}
    for key in repair.config_remove:
        config.pop(key, None)
    tensors = None
    if draft.tensors is not None:
        tensors = {}
        for name, info in draft.tensors.items():
            new_name = repair.renames.get(name, name)
            if name in getattr(repair, "transposes", ()) and len(info.shape) == 2:
                info = replace(info, shape=tuple(reversed(info.shape)))
            tensors[new_name] = info
        for name, data in repair.tensors.items():
            old = tensors.get(name)
            tensors[name] = (replace(old, dtype=data.dtype, shape=tuple(data.shape)) if old is not None else
                             replace(next(iter(draft.tensors.values())), dtype=data.dtype, shape=tuple(data.shape))
                             if draft.tensors else old)
        tensors = {k: v for k, v in tensors.items() if v is not None}
    fixed = draft_facts_from(draft.path, draft.config_path, config, tensors, draft.checkpoint_error)
    out = Facts.of(facts.launch, draft=fixed, target=facts.target, engine=facts.engine,
                   engine_version=facts.engine_version, box=facts.box, timeout=facts.timeout, weights=None)
    for name in ("engine_name", "speculative_method", "vllm_runner", "vllm"):
        if name in facts.__dict__:  # settable facts given to (or worked out for) the original run
            setattr(out, name, facts.__dict__[name])
    return out


def rejections(facts: Facts, repair: DraftRepair, rules: Sequence[str] = AUX_ID_RULES) -> list[Finding]:
    """The error and warning findings ``rules`` (rule ids) still make on the copy ``repair`` would
    produce (:func:`repaired_facts`); ``[]`` when the doctor would accept it. A rule that does not
    check the launch's engine is skipped; one that raises counts as a rejection (its message)."""
    from workbench.rules.registry import REGISTRY

    fixed = repaired_facts(facts, repair)
    engine = fixed.engine_name
    out: list[Finding] = []
    for rule_id in rules:
        if rule_id not in REGISTRY:
            continue
        rule = REGISTRY.get(rule_id)
        if engine is not None and engine not in rule.engines:
            continue
        try:
            found = rule.check(fixed)
        except Exception as exc:  # noqa: BLE001 - a rule that cannot judge the copy rejects it, said so
            found = [Finding(rule_id, "error", f"{rule_id} could not check the repaired copy: "
                             f"{type(exc).__name__}: {exc}", {})]
        out.extend(f for f in found if f.severity in ("error", "warning"))
    return out


def stored_transposed(shape: Any, expected: Any) -> bool:
    """A 2-D, non-square tensor ``shape`` that is exactly ``expected`` reversed: a Linear weight
    stored ``[in, out]`` where the engine's ``nn.Linear`` / ``ReplicatedLinear`` holds ``[out, in]``
    (a converter's layout; both engines load ``weight`` as ``[out_features, in_features]``)."""
    try:
        a, b = (list(shape), list(expected))
    except TypeError:
        return False
    return len(a) == 2 and len(b) == 2 and a[0] != a[1] and a == b[::-1] and None not in a
