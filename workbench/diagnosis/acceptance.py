"""Judging acceptance: the ceiling one verify step can reach (:func:`verify_ceiling`), when an
accept length is low (:func:`acceptance_low`), the thresholds a decision compares a measurement
with (:func:`decision_thresholds`), and two measurements pooled (:func:`pooled_measurement`).

Pure functions over numbers and launch commands (no box, no server): every step that judges a
measurement (the symptom, the fix, the candidates, the verdict) judges it here, the same way.
"""

from __future__ import annotations

import dataclasses

from workbench.rules.acceptance_level import LOW_ACCEPT_FRACTION as _LOW_FRACTION
from workbench.rules.acceptance_level import classify_acceptance, verify_ceiling
from workbench.rules.runtime import COLLAPSED_ACCEPT_LENGTH

__all__ = ["LOW_ACCEPT_FRACTION", "SUFFICIENT_GAIN", "NEAR_THRESHOLD_BAND", "verify_ceiling", "acceptance_low",
           "decision_thresholds", "pooled_measurement"]

#: Without ``expected_accept_length``, acceptance counts as low below this fraction of its ceiling
#: (:data:`workbench.rules.acceptance_level.LOW_ACCEPT_FRACTION`: the one definition the logs, the
#: measurement, the doctor and the runbooks share).
LOW_ACCEPT_FRACTION = _LOW_FRACTION
#: A fix is sufficient when acceptance is no longer low and rose by at least this factor.
SUFFICIENT_GAIN = 1.1
#: A measured accept length within this fraction of a threshold a decision compares it with (low:
#: 90 % of ``expected_accept_length`` or :data:`LOW_ACCEPT_FRACTION` of the ceiling, collapsed;
#: a fix's gain: :data:`SUFFICIENT_GAIN` × the accept length before) is measured once more and the
#: decision taken on both measurements pooled (Σ tokens / Σ verify steps): one measurement near a
#: threshold never decides alone (issue 26).
NEAR_THRESHOLD_BAND = 0.03


def acceptance_low(accept_length: float | None, *, expected: float | None, ceiling: float | None) -> bool | None:
    """Whether ``accept_length`` (tokens per verify step) is low for a deployment (``None``:
    nothing measured): below 90 % of ``expected`` (the user's ``expected_accept_length``) when
    given, else collapsed (≤ :data:`~workbench.rules.runtime.COLLAPSED_ACCEPT_LENGTH`, 1.05) or
    below :data:`LOW_ACCEPT_FRACTION` of ``ceiling`` (:func:`verify_ceiling`): the ``low`` of
    :func:`workbench.rules.acceptance_level.classify_acceptance`, the one definition."""
    return classify_acceptance(accept_length, expected=expected, ceiling=ceiling).low


def decision_thresholds(*, expected: float | None, ceiling: float | None, before: float | None) -> list[float]:
    """The accept lengths a decision compares a measurement with: the low line (90 % of
    ``expected``; else the collapse line and :data:`LOW_ACCEPT_FRACTION` of ``ceiling``) and, once
    acceptance before was measured (``before``), the fix's gain line (:data:`SUFFICIENT_GAIN` ×
    before)."""
    out: list[float] = []
    if expected:
        out.append(0.9 * expected)
    else:
        out.append(COLLAPSED_ACCEPT_LENGTH)
        if ceiling:
            out.append(LOW_ACCEPT_FRACTION * ceiling)
    if before:
        out.append(before * SUFFICIENT_GAIN)
    return out


def near_thresholds(accept_length: float | None, thresholds: list[float]) -> list[float]:
    """The ``thresholds`` within :data:`NEAR_THRESHOLD_BAND` (relative) of ``accept_length``: a
    measurement that close is measured once more and decided on both pooled (issue 26)."""
    if accept_length is None:
        return []
    return [t for t in thresholds if abs(accept_length - t) <= NEAR_THRESHOLD_BAND * t]


def pooled_measurement(a, b):
    """Two acceptance measurements of the same server pooled into one
    (``workbench.measure.generate.AcceptanceMeasurement``): through ``/generate`` every number
    recomputed over both requests' records (``summarize_responses``: Σ tokens / Σ verify steps);
    from another source (vLLM's counters) accept length and accept rate weighted by each one's verify
    steps (the same server drafts the same tokens per step). Either
    without an accept length: ``a`` unchanged."""
    from workbench.measure.generate import summarize_responses

    if a.accept_length is None or b.accept_length is None or not a.verify_steps or not b.verify_steps:
        return a
    if a.source == "/generate" and b.source == "/generate" and a.records and b.records:
        return summarize_responses(list(a.records) + list(b.records), warmup=a.warmup, max_new_tokens=a.max_new_tokens,
                                   base_url=a.base_url, server_info=b.server_info)
    steps = a.verify_steps + b.verify_steps
    wall = a.wall_s + b.wall_s
    # accepted / drafted: the same server drafts the same number of tokens per verify step, so the
    # rates pool weighted by verify steps too
    rate = (None if a.accept_rate is None or b.accept_rate is None
            else (a.accept_rate * a.verify_steps + b.accept_rate * b.verify_steps) / steps)
    return dataclasses.replace(
        a, accept_length=(a.accept_length * a.verify_steps + b.accept_length * b.verify_steps) / steps,
        accept_rate=rate, verify_steps=steps, total_tokens=a.total_tokens + b.total_tokens, wall_s=wall,
        tokens_per_s=(a.total_tokens + b.total_tokens) / wall if wall > 0 else None,
        records=list(a.records) + list(b.records), histogram=None,
        note=(a.note + "; " if a.note else "") + "two measurements pooled: accept length weighted by verify steps")
