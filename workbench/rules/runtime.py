"""Fault family: what the running server measures (runtime rules).

Rule: ``acceptance-collapsed`` — measured accept length ≤ 1.05 over ≥ 20 verify steps with
speculative decoding on, from any source (``/generate``, the OpenAI endpoints, ``/metrics``,
``/server_info``, the decode log). Accept length as SGLang 0.5.23 defines it
(``tokenizer_manager.py``: ``completion_tokens / spec_verify_ct``, bonus token included).
"""

from __future__ import annotations

from typing import Any

from workbench.rules.finding import Finding, ev
from workbench.rules.registry import ALL_ENGINES, Family, HypothesisSpec

__all__ = ["FAMILY", "acceptance_collapsed", "COLLAPSED_ACCEPT_LENGTH", "MIN_VERIFY_STEPS"]

FAMILY = Family(
    "runtime", "What the running server measures", __doc__, module=__name__, probes=("draft-input-width",),
    hypotheses=(
        HypothesisSpec("chat-template", "The requests are formatted differently from the draft's training data "
                       "(a chat template applied, or not, or another one).", order=60, static=False,
                       decide="measure acceptance with the training data's format: `workbench measure --openai-endpoint "
                              "chat` against `--openai-endpoint completions` on the same prompts"),
        HypothesisSpec("engine-regression", "This engine release runs the draft differently from the release it was "
                       "validated on.", order=61, static=False,
                       decide="the same draft and target on another release (measure_acceptance on both, or "
                              "compare_drafts), or the release notes of the EAGLE-3 code path"),
        HypothesisSpec("quantised-target", "The target is quantised (or otherwise altered) after the draft was "
                       "trained on its unquantised hidden states.", order=62, static=False,
                       decide="measure with the unquantised target, or with a draft trained on the quantised "
                              "target's hidden states"),
    ))

#: Accept length at or below which acceptance has collapsed (tokens per verify step).
COLLAPSED_ACCEPT_LENGTH = 1.05
#: Fewest verify steps over which the rule decides.
MIN_VERIFY_STEPS = 20


@FAMILY.rule("acceptance-collapsed", severities=("error",), kind="runtime", engines=ALL_ENGINES,
             summary="measured accept length ≤ 1.05 over ≥ 20 verify steps with speculative decoding on (logs, "
                     "metrics or /generate)",
             fix="points at the static findings that explain it")
def acceptance_collapsed(measurement: Any, static_findings: list[Finding] | None = None, *,
                         source: str = "measurement") -> list[Finding]:
    """A runtime rule: run on a measurement, not by the doctor. ``measurement``: an object or dict
    with ``accept_length`` (tokens per verify step, bonus included: SGLang 0.5.23's
    ``completion_tokens / spec_verify_ct``; vLLM 0.32.0's "Mean acceptance length", ``1 + accepted / drafts``
    of its spec-decode counters, is the same quantity) and ``verify_steps`` (e.g.
    :class:`workbench.measure.generate.AcceptanceMeasurement`; a log's decode lines × its
    ``--decode-log-interval``, a lower bound). A draft that is never right still gets the bonus
    token, so a healthy draft sits well above 1.05. The finding points at the static error
    findings (``static_findings``) that explain it; ``static_findings=None`` means the static checks
    were not run (``workbench measure``, ``workbench logs``): the finding says so and points at
    ``workbench doctor --running`` (``evidence["static_checked"]`` False), never "no static finding
    explains it"; only when the checks ran and found no error does it say that and to probe the
    draft's input width."""
    get = measurement.get if isinstance(measurement, dict) else lambda k: getattr(measurement, k, None)
    al, steps = get("accept_length"), get("verify_steps")
    if al is None or steps is None or steps < MIN_VERIFY_STEPS or al > COLLAPSED_ACCEPT_LENGTH:
        return []
    checked = static_findings is not None
    causes = [f.rule for f in static_findings or () if f.severity == "error"]
    why = (f"; explained by {', '.join(causes)}" if causes else
           "; no static finding explains it (probe the draft's input width)" if checked else
           "; the static checks (draft, config, launch) were not run here: run `workbench doctor --running` "
           "against this server to find the cause")
    return [Finding("acceptance-collapsed", "error",
                    f"accept length {al:.3f} over {steps} verify steps: the draft's proposals are almost never "
                    "accepted" + why,
                    {"accept_length": ev(al, source), "verify_steps": ev(steps, source), "static_causes": causes,
                     "static_checked": checked},
                    None)]
