"""One definition of "low acceptance": an accept length classified against the launch's ceiling,
the same thresholds and the same words for ``workbench logs``, ``workbench measure``, the doctor
(``--running``), the runbooks and the lab walkthrough.

The ceiling is the most tokens one verify step can yield (tokens per verify step, bonus
included): ``--speculative-num-draft-tokens``, else ``--speculative-num-steps`` + 1 (SGLang's
``server_args.py``; chain drafting), on vLLM ``num_speculative_tokens`` + 1
(:func:`verify_ceiling`; from a server's log: :func:`ceiling_from_log`). The levels
(:func:`classify_acceptance`):

- ``collapsed``: ≤ :data:`~workbench.rules.runtime.COLLAPSED_ACCEPT_LENGTH` (1.05): the draft is
  almost never right (the runtime rule ``acceptance-collapsed``, which also wants ≥ 20 verify steps);
- ``low``: below :data:`LOW_ACCEPT_FRACTION` (45 %) of the ceiling, or below 90 % of an expected
  accept length the user gave (the draft's training evaluation);
- ``ok``: neither (``not low``); ``unknown`` when nothing was measured. Without a ceiling (and no
  expectation) only a collapse can be judged: the words say so.

Pure functions (no box). Layer: :mod:`workbench.rules` (imports the launch command only), so the
logs, the measurement, the doctor and the diagnosis all import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from workbench.engine.launch import LaunchCommand
from workbench.errors import WorkbenchInputError
from workbench.rules.runtime import COLLAPSED_ACCEPT_LENGTH

__all__ = ["LOW_ACCEPT_FRACTION", "EXPECTED_FRACTION", "AcceptanceLevel", "classify_acceptance", "verify_ceiling",
           "ceiling_from_log"]

#: Without an expected accept length, acceptance counts as low below this fraction of its ceiling
#: (or when it has collapsed). A heuristic: a working EAGLE-3 draft on chat or code prompts sits
#: at 0.55-0.8 of its ceiling (the sandbox's at 0.53-0.6).
LOW_ACCEPT_FRACTION = 0.45
#: With an expected accept length (``expected_accept_length``), low below this fraction of it.
EXPECTED_FRACTION = 0.9


@dataclass(frozen=True)
class AcceptanceLevel:
    """An accept length judged: ``level`` (``collapsed``, ``low``, ``ok``, ``unknown``), ``low``
    (``True`` for collapsed or low, ``False`` for ok, ``None`` when not measured), the numbers it
    was judged with (``accept_length``, ``ceiling``, ``expected``: tokens per verify step) and
    ``words``, the one line every command prints (e.g. ``low: 1.12 of a possible 4.00 (< 45 % of
    the ceiling)``)."""

    level: str
    low: bool | None
    accept_length: float | None
    ceiling: float | None
    expected: float | None
    words: str

    def to_dict(self) -> dict:
        return {"level": self.level, "low": self.low, "accept_length": self.accept_length, "ceiling": self.ceiling,
                "expected": self.expected, "words": self.words}

    def __str__(self) -> str:
        return self.words


def _of(al: float, ceiling: float | None) -> str:
    return f"{al:.2f} of a possible {ceiling:.2f}" if ceiling else f"{al:.2f}"


def classify_acceptance(accept_length: float | None, *, ceiling: float | None = None,
                        expected: float | None = None) -> AcceptanceLevel:
    """Judge ``accept_length`` (tokens per verify step, bonus included) against ``ceiling``
    (:func:`verify_ceiling`) or, when given, ``expected`` (the accept length the draft should
    reach): see the module docstring for the levels. Raises :class:`WorkbenchInputError` for a
    negative or non-numeric accept length or ceiling."""
    for name, v in (("accept length", accept_length), ("ceiling", ceiling), ("expected accept length", expected)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise WorkbenchInputError(f"{name} must be a non-negative number, got {v!r}")
    ceiling = float(ceiling) if ceiling else None
    if accept_length is None:
        return AcceptanceLevel("unknown", None, None, ceiling, expected, "not measured")
    al = float(accept_length)
    if expected:
        line = EXPECTED_FRACTION * expected
        if al <= COLLAPSED_ACCEPT_LENGTH:
            return AcceptanceLevel("collapsed", True, al, ceiling, expected,
                                   f"collapsed: {_of(al, ceiling)} (≤ {COLLAPSED_ACCEPT_LENGTH}: the draft is almost "
                                   "never right)")
        if al < line:
            return AcceptanceLevel("low", True, al, ceiling, expected,
                                   f"low: {_of(al, ceiling)} (< {EXPECTED_FRACTION * 100:.0f} % of the expected "
                                   f"{expected:.2f})")
        return AcceptanceLevel("ok", False, al, ceiling, expected,
                               f"not low: {_of(al, ceiling)} (≥ {EXPECTED_FRACTION * 100:.0f} % of the expected "
                               f"{expected:.2f})")
    if al <= COLLAPSED_ACCEPT_LENGTH:
        return AcceptanceLevel("collapsed", True, al, ceiling, None,
                               f"collapsed: {_of(al, ceiling)} (≤ {COLLAPSED_ACCEPT_LENGTH}: the draft is almost never "
                               "right)")
    if not ceiling:
        return AcceptanceLevel("ok", False, al, None, None,
                               f"not low: {al:.2f} (the ceiling is unknown: only a collapse, ≤ "
                               f"{COLLAPSED_ACCEPT_LENGTH}, can be judged)")
    pct = f"{LOW_ACCEPT_FRACTION * 100:.0f} %"
    if al < LOW_ACCEPT_FRACTION * ceiling:
        return AcceptanceLevel("low", True, al, ceiling, None, f"low: {_of(al, ceiling)} (< {pct} of the ceiling)")
    return AcceptanceLevel("ok", False, al, ceiling, None, f"not low: {_of(al, ceiling)} (≥ {pct} of the ceiling)")


def verify_ceiling(launch: LaunchCommand | None, server_info: dict | None = None) -> float | None:
    """The most tokens one verify step can yield (tokens per verify step, bonus included) for a
    server launched with ``launch``: ``--speculative-num-draft-tokens``, else
    ``--speculative-num-steps`` + 1 (chain drafting: every draft token and the bonus token
    accepted), each falling back on ``server_info`` (``GET /server_info``'s resolved
    ``speculative_num_draft_tokens`` / ``speculative_num_steps``) when the flag is absent;
    ``None`` when neither is known or a value is not a number (SGLang's ``server_args.py``:
    ``speculative_num_draft_tokens`` verify slots per step). On a vLLM launch:
    ``num_speculative_tokens`` + 1 from ``--speculative-config`` (vLLM 0.32.0 drafts a chain of k
    tokens per verify step, ``v1/spec_decode/llm_base_proposer.py``), ``None`` when the config
    cannot be read."""
    if launch is not None and launch.engine == "vllm":
        try:
            k = launch.num_speculative_tokens
        except WorkbenchInputError:
            return None
        return float(k) + 1 if isinstance(k, int) and k > 0 else None
    info = server_info or {}
    get = launch.get if launch is not None else (lambda _flag: None)
    ndt = get("--speculative-num-draft-tokens") or info.get("speculative_num_draft_tokens")
    steps = get("--speculative-num-steps") or info.get("speculative_num_steps")
    try:
        return float(ndt) if ndt is not None else (float(steps) + 1 if steps is not None else None)
    except (TypeError, ValueError):
        return None


_SGLANG_NDT = re.compile(r"\bspeculative_num_draft_tokens=(\d+)")
_SGLANG_STEPS = re.compile(r"\bspeculative_num_steps=(\d+)")
_VLLM_K = re.compile(r"\bnum_spec(?:ulative)?_tokens['\"]?\s*[=:]\s*(\d+)")


def ceiling_from_log(lines: Iterable[str]) -> float | None:
    """The verify ceiling a server's own log states (its start-up lines): SGLang's
    ``server_args=ServerArgs(... speculative_num_draft_tokens=4 ...)`` (else
    ``speculative_num_steps`` + 1; SGLang 0.5.23 ``launch_server`` logs it first), vLLM's
    ``speculative_config=SpeculativeConfig(method='eagle3', ..., num_spec_tokens=3)`` (k + 1).
    ``None`` when no line states it (a log whose head was rotated away, speculative decoding off)."""
    for line in lines:
        if "server_args=" in line:
            ndt = _SGLANG_NDT.search(line)
            steps = _SGLANG_STEPS.search(line)
            if ndt is not None:
                return float(ndt.group(1))
            if steps is not None:
                return float(steps.group(1)) + 1
        elif "SpeculativeConfig(" in line or "speculative_config" in line:
            k = _VLLM_K.search(line)
            if k is not None and int(k.group(1)) > 0:
                return float(k.group(1)) + 1
    return None
