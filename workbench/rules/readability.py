"""Fault family: can the models the launch command names be read at all.

Rules: ``checkpoint-unreadable`` (a model path that does not exist on the box, a ``config.json``
that is missing or not JSON, a safetensors header that is truncated, over 100 MB, not JSON, names
an unknown dtype or points past the end of its file, a ``d2t``/``t2d`` that cannot be read) and
``model-not-on-box`` (a Hugging Face repo id the box's cache does not hold: the server would
download it, the doctor cannot check it). The facts come from reading the inputs
(:class:`workbench.rules.facts.UnreadableInput`, ``DraftFacts.checkpoint_error``, the token map);
every other rule that needs an unreadable input says it was not run. The safetensors format and
its limits: :mod:`workbench.checkpoint.readers` (safetensors 0.4-0.8).
"""

from __future__ import annotations

from workbench.checkpoint import DraftFacts
from workbench.rules.facts import Facts, TokenMap, UnreadableInput
from workbench.rules.finding import Finding, ev
from workbench.rules.fix import Fix
from workbench.rules.registry import ALL_ENGINES, Family, HypothesisSpec

__all__ = ["FAMILY", "checkpoint_unreadable", "model_not_on_box", "draft_checkpoint_findings",
           "token_map_unreadable_findings"]

FAMILY = Family("readability", "Can the models the launch command names be read", __doc__, module=__name__,
                hypotheses=(HypothesisSpec(
                    "checkpoint-readable", "A model the launch command names cannot be read: a path missing on the "
                    "box, a config that is not JSON, a truncated or corrupt safetensors file, a repo not in the "
                    "box's cache.", rules=("checkpoint-unreadable", "model-not-on-box"), order=0),))

_FLAG = {"target model": "--model-path", "draft model": "--speculative-draft-model-path"}


def _path_finding(u: UnreadableInput, rule: str, severity: str, fix: str) -> Finding:
    return Finding(rule, severity, f"the {u.role} {u.value!r} cannot be read on {u.box}: {u.how}",
                   {u.role: ev(u.value, "launch command")}, fix)


def draft_checkpoint_findings(draft: DraftFacts) -> list[Finding]:
    """``checkpoint-unreadable`` for a draft whose safetensors could not be read (``DraftFacts.tensors``
    is ``None``: ``checkpoint_error`` says why)."""
    if draft.tensors is not None and draft.checkpoint_error is None:
        return []
    err = draft.checkpoint_error
    if err is None:
        return [Finding("checkpoint-unreadable", "error", f"the draft checkpoint of {draft.path} was not read",
                        {"path": ev(draft.path, "draft checkpoint")}, "re-export or re-download the draft checkpoint")]
    return [Finding("checkpoint-unreadable", "error", f"the draft checkpoint cannot be read ({err.reason}): {err}",
                    {"path": ev(err.path, "draft checkpoint"), "reason": err.reason},
                    "re-export or re-download the draft checkpoint")]


def token_map_unreadable_findings(draft: DraftFacts, tm: TokenMap | None) -> list[Finding]:
    """``checkpoint-unreadable`` when ``d2t``/``t2d`` could not be read by byte range."""
    if tm is None or tm.error is None:
        return []
    return [Finding("checkpoint-unreadable", "error", f"d2t/t2d unreadable: {tm.error}", {"path": draft.path}, None)]


@FAMILY.rule("checkpoint-unreadable", engines=ALL_ENGINES, severities=("error",), prevents_start="always",
             summary="a model path missing on the box, a config.json missing or not JSON, or a safetensors header "
                     "truncated, over 100 MB, not JSON, with an unknown dtype or data offsets past the end of the file",
             fix="fix the path, or re-export / re-download the checkpoint")
def checkpoint_unreadable(facts: Facts) -> list[Finding]:
    """What SGLang would fail on at load time, found by reading the same files by byte range: the
    model directory (absolute, relative to the server's cwd, or a Hugging Face repo id resolved in
    the box's cache), ``config.json``, each safetensors file's 8-byte header length and JSON header
    (the reference reader refuses headers over 100,000,000 bytes), the index of a sharded
    checkpoint, and ``d2t``/``t2d`` when the token-map rules read them."""
    out: list[Finding] = []
    for u in facts.unreadable:
        if u.kind == "path":
            out.append(_path_finding(u, "checkpoint-unreadable", "error", "fix the path in the launch command"))
        elif u.kind == "config":
            side = "target" if u.role == "target model" else "draft"
            out.append(Finding("checkpoint-unreadable", "error", f"{side} config unreadable: {u.error}",
                               {"path": ev(u.error.path, f"launch command: {_FLAG[u.role]}")}, None))
    draft = facts.draft
    if draft is not None:
        out += draft_checkpoint_findings(draft)
    if draft is not None and facts.weights is not None:
        out += token_map_unreadable_findings(draft, facts.token_map)
    return out


@FAMILY.rule("model-not-on-box", engines=ALL_ENGINES, severities=("warning",),
             summary="a Hugging Face repo id the box's cache does not hold (the server would download it; the doctor "
                     "cannot check what it would get)",
             fix="download it into the box's Hugging Face cache or pass a local directory")
def model_not_on_box(facts: Facts) -> list[Finding]:
    """An addition to the catalogue. A repo id ``org/name`` is looked up the way huggingface_hub
    lays out its cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``~/.cache/huggingface/hub``; ``models--org--name/refs/main`` → ``snapshots/<rev>``:
    :func:`workbench.checkpoint.paths.resolve_model_path`). Not there, the server downloads it at
    start-up; every rule that needs its files is then not run."""
    return [_path_finding(u, "model-not-on-box", "warning",
                          "download it into the box's Hugging Face cache or pass a local directory")
            for u in facts.unreadable if u.kind == "repo-not-in-cache"]


@FAMILY.fixes_with
def readability_fixes(facts: Facts, findings: list[Finding], given: dict) -> list[Fix]:
    """Nothing the workbench can repair: an unreadable file must be re-exported or re-downloaded,
    a path corrected, a repo downloaded. The fix says which file and what to do."""
    out = []
    for f in findings:
        if f.rule not in ("checkpoint-unreadable", "model-not-on-box") or f.severity == "info":
            continue
        what = f.fix or ("download it into the box's Hugging Face cache" if f.rule == "model-not-on-box"
                         else "re-export or re-download the checkpoint")
        out.append(Fix("none", (f.rule,), f.message.split(":")[0], missing=f"{what} ({f.message})"))
    return out
