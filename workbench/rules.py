"""Preflight rules: static checks on a launch command, configs and checkpoint headers.

Each rule has a stable id (the catalogue is ``shared/notes/doctor-rules.md``), returns a list of
:class:`Finding` (empty when it has nothing to say) and never loads a model. Every finding names
its evidence: each value compared, with the file (and key) it came from.

Implemented here: ``algorithm-mismatch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.checkpoint import DraftFacts, TargetFacts, read_draft_facts, read_target_facts
from workbench.launch import SGLANG_VERSION, LaunchCommand

__all__ = ["Finding", "SEVERITIES", "algorithm_mismatch", "check_algorithm_mismatch", "RuleInputError"]

SEVERITIES = ("error", "warning", "info")


class RuleInputError(ValueError):
    """A rule cannot run: the launch command lacks what it needs (e.g. a draft path)."""


@dataclass
class Finding:
    """One result of a rule.

    ``rule``: the rule id (``"algorithm-mismatch"``); ``severity``: ``error`` (acceptance or
    startup will fail), ``warning`` (likely loss) or ``info``; ``message``: one or two sentences
    for a human; ``evidence``: ``{name: {"value": ..., "source": "file: key"}}`` plus derived
    values; ``fix``: the corrected launch command (or other remedy text), ``None`` if none.
    Raises ``ValueError`` for an unknown severity.
    """

    rule: str
    severity: str
    message: str
    evidence: dict = field(default_factory=dict)
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "message": self.message,
                "evidence": self.evidence, "fix": self.fix}


def _ev(value: Any, source: str | None) -> dict:
    return {"value": value, "source": source}


def algorithm_mismatch(launch: LaunchCommand, draft: DraftFacts, target: TargetFacts | None = None) -> list[Finding]:
    """Rule ``algorithm-mismatch`` (severity ``error``), as ``shared/notes/doctor-rules.md`` defines it.

    Fires when
    - an EAGLE-3 draft (an architecture name containing ``Eagle3``, or
      ``eagle_config.use_aux_hidden_state`` / ``eagle_aux_hidden_state_layer_ids`` present, or
      ``fc`` in_features = k × target hidden with k ≥ 3) is launched with
      ``--speculative-algorithm EAGLE`` or ``NEXTN``; or
    - an EAGLE-1/2 draft (``fc`` in_features = 2 × draft hidden, no ``Eagle3`` architecture) is
      launched with ``EAGLE3``.

    Engine facts (SGLang 0.5.23): the algorithm is upper-cased and ``NEXTN`` is an alias of
    ``EAGLE`` (``srt/arg_groups/speculative_hook.py``); aux hidden-state capture is set up only
    when ``is_eagle3()``, strictly ``== EAGLE3`` (``srt/speculative/spec_info.py``,
    ``model_runner_components/spec_aux_hidden_state.py``); the draft's ``fc`` is applied only
    when ``hidden_states.shape[-1] != embeds.shape[-1]`` (``srt/models/llama_eagle3.py``), so
    under EAGLE it is skipped silently. Nothing in 0.5.23 detects the mismatch (PR #21272 was
    not merged).

    ``target``: the target's facts (hidden size for the k × hidden test); when ``None`` the
    draft's ``target_hidden_size`` (else ``hidden_size``) stands in and the evidence says so.
    The fix is the launch command with ``--speculative-algorithm`` replaced.
    """
    raw = launch.get("--speculative-algorithm")
    if raw is None or not isinstance(raw, str):
        return []
    algo = raw.upper()
    evidence: dict[str, Any] = {
        "speculative_algorithm": _ev(raw, "launch command: --speculative-algorithm"),
        "draft_architectures": _ev(draft.architectures, draft.sources.get("architectures")),
        "modelled_engine": f"sglang {SGLANG_VERSION}",
    }
    if draft.fc_in_features is not None:
        evidence["fc_in_features"] = _ev(draft.fc_in_features, draft.sources.get("fc_in_features"))
    elif draft.checkpoint_error is not None:
        evidence["fc_in_features"] = _ev(None, f"checkpoint unreadable: {draft.checkpoint_error}")
    else:
        evidence["fc_in_features"] = _ev(None, f"no fc.weight in the checkpoint of {draft.path}")

    if target is not None and target.hidden_size is not None:
        target_hidden, th_source = target.hidden_size, target.sources.get("hidden_size")
    else:
        target_hidden = draft.effective_target_hidden_size
        key = "target_hidden_size" if draft.target_hidden_size is not None else "hidden_size"
        th_source = f"{draft.sources.get(key)} (draft config; target config not read)"

    if algo in ("EAGLE", "NEXTN"):
        signals = draft.eagle3_signals(target_hidden)
        if not signals:
            return []
        if draft.aux_layer_ids is not None:
            evidence["eagle_config.eagle_aux_hidden_state_layer_ids"] = _ev(draft.aux_layer_ids, draft.sources.get("aux_layer_ids"))
        if draft.aux_layer_ids_top_level is not None:
            evidence["eagle_aux_hidden_state_layer_ids"] = _ev(draft.aux_layer_ids_top_level,
                                                               draft.sources.get("aux_layer_ids_top_level"))
        if draft.use_aux_hidden_state is not None:
            evidence["use_aux_hidden_state"] = _ev(draft.use_aux_hidden_state, draft.sources.get("use_aux_hidden_state"))
        evidence["target_hidden_size"] = _ev(target_hidden, th_source)
        if draft.fc_in_features and target_hidden:
            evidence["fc_in_features / target_hidden_size"] = draft.fc_in_features / target_hidden
        evidence["eagle3_signals"] = sorted(signals)
        width = f"{draft.fc_in_features}-wide " if draft.fc_in_features else ""
        message = (
            f"The draft at {draft.path} is an EAGLE-3 draft ({', '.join(sorted(signals))}) but the server is launched "
            f"with --speculative-algorithm {raw}. The target then never captures the auxiliary hidden states, the draft "
            f"receives one {target_hidden or 'hidden_size'}-wide state instead of the {width}input its fc expects, fc is "
            "skipped without an error and the proposals are garbage: accept length stays near 1.00. "
            "Relaunch with --speculative-algorithm EAGLE3."
        )
        fix = launch.with_flag("--speculative-algorithm", "EAGLE3").to_string()
        return [Finding("algorithm-mismatch", "error", message, evidence, fix)]

    if algo == "EAGLE3":
        if not draft.is_eagle1_like:
            return []
        evidence["draft_hidden_size"] = _ev(draft.hidden_size, draft.sources.get("hidden_size"))
        evidence["fc_in_features / draft_hidden_size"] = draft.fc_in_features / draft.hidden_size
        evidence["target_hidden_size"] = _ev(target_hidden, th_source)
        evidence["draft_vocab_size"] = _ev(draft.draft_vocab_size, draft.sources.get("draft_vocab_size")
                                           or f"{draft.config_path}: draft_vocab_size (absent)")
        message = (
            f"The draft at {draft.path} is an EAGLE-1/2 draft (fc in_features {draft.fc_in_features} = 2 × hidden "
            f"{draft.hidden_size}, architectures {draft.architectures} without Eagle3) but the server is launched with "
            "--speculative-algorithm EAGLE3, which feeds it three concatenated auxiliary hidden states and expects an "
            "EAGLE-3 checkpoint (LlamaForCausalLMEagle3, draft vocab, d2t). Launch it with --speculative-algorithm "
            "EAGLE, or use the EAGLE-3 draft trained for this target."
        )
        fix = launch.with_flag("--speculative-algorithm", "EAGLE").to_string()
        return [Finding("algorithm-mismatch", "error", message, evidence, fix)]
    return []


def check_algorithm_mismatch(box: Any, launch: LaunchCommand, *, timeout: float = 30) -> list[Finding]:
    """Read the draft (and, when readable, the target) named in ``launch`` from ``box`` and run
    :func:`algorithm_mismatch`.

    Raises :class:`RuleInputError` when the command has no ``--speculative-draft-model-path``,
    and :class:`workbench.checkpoint.ConfigUnreadable` when the draft's config cannot be read.
    A target config that cannot be read is not an error here: the draft's own
    ``target_hidden_size`` stands in, and the evidence says so.
    """
    from workbench.checkpoint import ConfigUnreadable

    draft_path = launch.get("--speculative-draft-model-path")
    if not draft_path:
        raise RuleInputError("the launch command has no --speculative-draft-model-path; algorithm-mismatch needs the draft")
    draft = read_draft_facts(box, draft_path, timeout=timeout)
    target = None
    target_error = None
    model_path = launch.get("--model-path")
    if not model_path:
        target_error = "the launch command has no --model-path"
    else:
        try:
            target = read_target_facts(box, model_path, timeout=timeout)
        except ConfigUnreadable as exc:
            target_error = str(exc)
    findings = algorithm_mismatch(launch, draft, target)
    for f in findings:
        if target_error is not None:
            f.evidence["target_config_error"] = target_error
    return findings
