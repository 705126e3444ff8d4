"""What SGLang's ``Decode batch`` line says about acceptance, release by release, and how to turn
its ``accept rate`` into one definition.

Read from the published wheels (``pip download --no-deps sglang==X``, unpacked; file and line
given per row; ``tests/workbench/test_acceptance_releases.py`` checks every row against the wheels
of :data:`workbench.engine.releases.COVERED_RELEASES`):

``accept len`` (every release 0.4.6 - 0.5.23) is the same quantity everywhere: accepted tokens per
verify step over the last ``--decode-log-interval`` decode iterations, where accepted tokens =
correct drafts + 1 bonus token per request per step (0.4.6 ``scheduler.py``
``spec_num_total_accepted_tokens += num_accepted_tokens + batch.batch_size()``; 0.5.12
``update_spec_metrics``: ``num_correct_drafts + bs``). That is τ of the EAGLE papers.

``accept rate`` (from 0.5.4; 0.4.6 - 0.5.3 print none) changed its definition twice:

====================  ==========================================================================
releases              printed ``accept rate`` (A = accepted tokens, bonus included; F = verify
                      steps × requests; S = ``--speculative-num-steps``; D =
                      ``--speculative-num-draft-tokens``)
====================  ==========================================================================
0.5.4 - 0.5.5         ``A / (F × (S + 1))`` = τ / (S + 1): the bonus counted as accepted, the
                      denominator the chain length (``scheduler_metrics_mixin.py``
                      ``total_draft_tokens = self.spec_num_total_forward_ct * (
                      (self.server_args.speculative_num_steps or 0) + 1)``).
0.5.6 - 0.5.10        ``A / (F × D)`` = τ / D (``draft_tokens_fallback`` ... ``total_draft_tokens =
                      self.spec_num_forward_ct * num_draft_tokens``).
0.5.12 - 0.5.23       ``(A − F) / (F × (D − 1))`` = (τ − 1) / (D − 1): correct drafts / proposed
                      drafts, the definition ``meta_info.spec_accept_rate`` uses from 0.5.6 (0.5.12
                      ``observability/scheduler_metrics_mixin.py`` ``num_correct_drafts =
                      self.spec_num_accept_tokens - self.spec_num_forward_ct``).
====================  ==========================================================================

(0.5.11 was not published as a wheel this project could read; the change lies between 0.5.10
and 0.5.12.) The one definition the workbench reports, whatever the release, is the last:
**correct drafts / proposed drafts** = ``(τ − 1) / (D − 1)``, computed from ``accept len`` and
the server's ``speculative_num_draft_tokens`` (:func:`correct_draft_rate`), so the printed rate
of an older release is never compared with a newer one's as if they meant the same.

Standard library only (the bottom of :mod:`workbench.logs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["DecodeLineFormat", "DECODE_LINE_FORMATS", "decode_line_format", "release_key", "correct_draft_rate",
           "engine_accept_rate", "ACCEPT_RATE_DEFINITIONS", "accept_rate_meanings"]


def release_key(version: str) -> tuple[int, ...]:
    """``"0.5.9"`` → ``(0, 5, 9)``; ``"0.5.23+sandbox"``, ``"0.5.10.post1"``, ``"0.5.4rc2"`` → their
    leading numbers. Raises ``ValueError`` for a text with no leading ``N.N``."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(version or ""))
    if not m:
        raise ValueError(f"{version!r} is not an SGLang version (N.N[.N])")
    return tuple(int(g) for g in m.groups(default="0"))


@dataclass(frozen=True)
class DecodeLineFormat:
    """How one range of releases writes the acceptance part of its ``Decode batch`` line.

    ``first`` / ``last``: the earliest and latest published release read with this format
    (``last`` ``None``: still so in 0.5.23; releases between two rows that were not read count as
    the older row's, :func:`decode_line_format`); ``file``: where the f-string is (relative to the
    ``sglang`` package); ``accept``: the f-string text that writes the acceptance items, exactly
    as in the source; ``header``: the f-string text that opens the line; ``accept_rate``: the
    printed rate's definition (``None``: no rate printed), one of :data:`ACCEPT_RATE_DEFINITIONS`."""

    first: str
    last: Optional[str]
    file: str
    header: str
    accept: str
    accept_rate: Optional[str]

    def covers(self, version: str) -> bool:
        """Whether ``version`` lies in ``first`` … ``last`` (by :func:`release_key`)."""
        k = release_key(version)
        return release_key(self.first) <= k and (self.last is None or k <= release_key(self.last))


#: The printed ``accept rate``'s definitions (module docstring), by name.
ACCEPT_RATE_DEFINITIONS = {
    "tau/(steps+1)": "accepted tokens (bonus included) / (verify steps × (speculative_num_steps + 1))",
    "tau/D": "accepted tokens (bonus included) / (verify steps × speculative_num_draft_tokens)",
    "correct/proposed": "correct drafts / (verify steps × (speculative_num_draft_tokens − 1))",
}

_ACCEPT_LEN = 'msg += f"accept len: {spec_accept_length:.2f}, "'
_ACCEPT_BOTH = 'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "'

#: Every format, oldest first (module docstring; file:line per release in the test that checks them).
DECODE_LINE_FORMATS = (
    DecodeLineFormat("0.4.6", "0.4.9", "srt/managers/scheduler.py", 'f"Decode batch. "', _ACCEPT_LEN, None),
    DecodeLineFormat("0.4.10", "0.5.3", "srt/managers/scheduler_metrics_mixin.py", 'msg = f"Decode batch. #running-req:',
                     _ACCEPT_LEN, None),
    DecodeLineFormat("0.5.4", "0.5.4", "srt/managers/scheduler_metrics_mixin.py",
                     'msg = f"Decode batch [{self.forward_ct}], #running-req:', _ACCEPT_BOTH, "tau/(steps+1)"),
    DecodeLineFormat("0.5.5", "0.5.5", "srt/managers/scheduler_metrics_mixin.py",
                     'msg = f"Decode batch{iter_msg}, #running-req:', _ACCEPT_BOTH, "tau/(steps+1)"),
    DecodeLineFormat("0.5.6", "0.5.9", "srt/managers/scheduler_metrics_mixin.py",
                     'msg = f"Decode batch{iter_msg}, #running-req:', _ACCEPT_BOTH, "tau/D"),
    DecodeLineFormat("0.5.10", "0.5.10", "srt/observability/scheduler_metrics_mixin.py",
                     'msg = f"Decode batch{iter_msg}, #running-req:', _ACCEPT_BOTH, "tau/D"),
    DecodeLineFormat("0.5.12", "0.5.12", "srt/observability/scheduler_metrics_mixin.py",
                     'msg = f"Decode batch{iter_msg}, #running-req:', _ACCEPT_BOTH, "correct/proposed"),
    DecodeLineFormat("0.5.15", None, "srt/managers/scheduler_components/metrics_reporter.py",
                     'msg = f"Decode batch{iter_msg}, #running-req:', _ACCEPT_BOTH, "correct/proposed"),
)


def decode_line_format(version: str) -> Optional[DecodeLineFormat]:
    """The :class:`DecodeLineFormat` of ``version``: the newest format whose ``first`` is not after
    it (a release between two read ones, e.g. 0.5.11, gets the older neighbour's; one after 0.5.23
    the newest). ``None`` before 0.4.6, which this table does not cover. Raises ``ValueError`` for a
    text that is no version."""
    k = release_key(version)
    best = None
    for f in DECODE_LINE_FORMATS:
        if release_key(f.first) <= k:
            best = f
    return best


def correct_draft_rate(accept_len: Optional[float], num_draft_tokens: Optional[int]) -> Optional[float]:
    """Correct drafts / proposed drafts from a ``Decode batch`` line's ``accept len`` (τ, tokens
    per verify step, bonus included) and the server's ``speculative_num_draft_tokens`` D:
    ``(τ − 1) / (D − 1)``. ``None`` when either is missing or D < 2 (no draft proposed). The
    line's ``accept len`` is rounded to 2 decimals, so the result is within ±0.005 / (D − 1)."""
    if accept_len is None or not num_draft_tokens or num_draft_tokens < 2:
        return None
    return (float(accept_len) - 1.0) / (num_draft_tokens - 1)


def engine_accept_rate(printed: Optional[float], version: str, *, num_steps: Optional[int] = None,
                       num_draft_tokens: Optional[int] = None) -> Optional[float]:
    """A printed ``accept rate`` of release ``version`` (or ``/metrics`` ``sglang:spec_accept_rate``,
    the same number) turned into correct drafts / proposed drafts (module docstring table):
    ``tau/(steps+1)``: τ = rate × (S + 1); ``tau/D``: τ = rate × D; then ``(τ − 1) / (D − 1)``;
    ``correct/proposed``: unchanged. ``None`` when the rate is missing, the release prints none,
    or the settings the conversion needs (S, D) are not given."""
    fmt = decode_line_format(version)
    if printed is None or fmt is None or fmt.accept_rate is None:
        return None
    if fmt.accept_rate == "correct/proposed":
        return float(printed)
    if fmt.accept_rate == "tau/(steps+1)":
        tau = float(printed) * (num_steps + 1) if num_steps is not None else None
    else:
        tau = float(printed) * num_draft_tokens if num_draft_tokens else None
    return correct_draft_rate(tau, num_draft_tokens)


def accept_rate_meanings() -> str:
    """One line saying what a decode line's printed ``accept rate`` means on which releases, built
    from :data:`DECODE_LINE_FORMATS` (ranges with the same definition merged, oldest first), e.g.
    ``"0.5.4–0.5.5: accepted tokens (bonus included) / (verify steps × (speculative_num_steps + 1));
    …"``. For a reader of a log whose release is not known (``workbench logs``)."""
    spans: list[list] = []
    for fmt in DECODE_LINE_FORMATS:
        if fmt.accept_rate is None:
            continue
        if spans and spans[-1][2] == fmt.accept_rate:
            spans[-1][1] = fmt.last
        else:
            spans.append([fmt.first, fmt.last, fmt.accept_rate])
    parts = [f"{first}–{last}" if last and last != first else (first if last else f"{first} on") for first, last, _ in spans]
    return "; ".join(f"{where}: {ACCEPT_RATE_DEFINITIONS[name]}" for where, (_, _, name) in zip(parts, spans))
