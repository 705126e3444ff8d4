"""Probe readings and launch commands in plain words, and the small readers the steps share:
:func:`d2t_words` / :func:`unmatched_words` (probe readings as sentences), :func:`pr_subset`,
:func:`literal` (a probe's printed repr back to a value), :func:`last_exception` (why a server's
log says it ended), :func:`parse_ids` (the ``aux_layer_ids`` parameter), :func:`draft_of` (the draft
directory a launch serves) and :func:`method_label`.

Pure functions over values: imports only the engine's launch command and probe recipes.
"""

from __future__ import annotations

import ast
from typing import Any

from workbench.engine.launch import LaunchCommand
from workbench.engine.recipes import RECIPES, VLLM_RECIPES
from workbench.errors import DiagnosisError, WorkbenchInputError
from workbench.runbook_params import parse_layer_ids

__all__ = ["d2t_words", "unmatched_words", "pr_subset", "literal", "last_exception", "parse_ids", "draft_of",
           "method_label"]


def d2t_words(raw: dict) -> str:
    """The ``draft-d2t`` probe's readings (``{expression: printed text}``, the expressions of
    :data:`workbench.engine.recipes.RECIPES` ``["draft-d2t"]`` — or, on vLLM, of
    :data:`workbench.engine.recipes.VLLM_RECIPES` ``["draft-d2t"]`` (its ``draft_id_to_target_id``) —
    in their order: is-None, shape, first 8 ids, last 4 ids) in plain words: ``"hot token map (d2t) loaded: no (draft token ids
    are used as target ids as they are)"``, or ``"hot token map (d2t) loaded: yes, shape (128,),
    ids [..] … [..]"``. A reading that is not there is said so, never guessed."""
    exprs = next((r["draft-d2t"].probes[0].exprs for r in (RECIPES, VLLM_RECIPES)
                  if r["draft-d2t"].probes[0].exprs[0] in raw), RECIPES["draft-d2t"].probes[0].exprs)
    is_none, shape, head, tail = (literal(raw.get(e)) for e in exprs[:4])
    if is_none is True or is_none == "True":
        return "hot token map (d2t) loaded: no (draft token ids are used as target ids as they are)"
    if is_none is False or is_none == "False":
        return (f"hot token map (d2t) loaded: yes, shape {shape}, target ids {head} … {tail}")
    return f"hot token map (d2t): not read (the probe printed {raw!r})"


def unmatched_words(unmatched: list) -> str:
    """The ``draft-weights-unmatched`` reading in plain words: the checkpoint tensor names the
    engine's ``load_weights`` matched to no parameter of the draft (those tensors were dropped:
    their parameters keep their initial values). First 5 named."""
    if not unmatched:
        return "load_weights used every checkpoint tensor (no name was dropped)"
    more = " …" if len(unmatched) > 5 else ""
    return (f"load_weights dropped {len(unmatched)} checkpoint tensor(s) whose names match no draft parameter: "
            f"{list(unmatched[:5])}{more}")


def pr_subset(pr: dict) -> dict:
    """The width readings of a probe summary (``observed_widths``, ``observed_hidden_size``,
    ``expected_hidden_size``, ``target_hidden_size``), for the evidence of ``algorithm-flag``."""
    return {k: pr.get(k) for k in ("observed_widths", "observed_hidden_size", "expected_hidden_size",
                                   "target_hidden_size")}


def literal(text: Any) -> Any:
    """A probe's printed ``repr`` back to its Python value (``ast.literal_eval``); the text itself
    when it is no literal (a tensor's repr), a non-string unchanged."""
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def last_exception(lines: list[str]) -> str | None:
    """The last line of a log that says why the process ended: an exception (``SomeError: ...``,
    ``module.SomeError: ...``), else an argparse refusal (``prog: error: argument --x: ...``, what
    SGLang's ``launch_server`` prints for a bad flag value), else a shell's ``No such file or
    directory`` / ``command not found`` / ``...: not found`` (``exec: NAME: not found``, dash's
    ``sh: 1: NAME: not found``) / ``Permission denied`` for a program that is not there.
    ``None`` when no line says."""
    for line in reversed(lines):
        text = line.strip()
        head = text.split(":", 1)[0].rsplit(".", 1)[-1]
        if ":" in text and " " not in head and (head.endswith(("Error", "Exception", "Exit", "Interrupt"))):
            return text
    for line in reversed(lines):
        text = line.strip()
        if ": error: " in text or text.startswith("error: "):
            return text
    for line in reversed(lines):
        text = line.strip()
        if text.endswith(("No such file or directory", "command not found", ": not found", "Permission denied")):
            return text
    return None


def parse_ids(value: Any) -> list[int] | None:
    """The ``aux_layer_ids`` parameter: ``None``, a list of ints, or their text (``"1,3,6"``,
    ``"[1, 3, 6]"``), read as the runbook's schema reads it
    (:func:`workbench.runbook_params.parse_layer_ids`). Raises :class:`DiagnosisError` naming the
    value otherwise."""
    try:
        return parse_layer_ids(value)
    except ValueError:
        raise DiagnosisError(f"aux_layer_ids must be non-negative layer ids such as [1, 3, 6], got {value!r}") from None


def draft_of(launch: LaunchCommand | None) -> str | None:
    """The draft directory ``launch`` serves: SGLang's ``--speculative-draft-model-path``, vLLM's
    ``--speculative-config`` ``"model"`` (:attr:`LaunchCommand.draft_model`); ``None`` when there is
    none or vLLM's config cannot be read (the doctor's ``speculative-config-unreadable`` says so)."""
    if launch is None:
        return None
    try:
        value = launch.draft_model
    except WorkbenchInputError:
        return None
    return value if isinstance(value, str) else None


def method_label(launch: LaunchCommand) -> str:
    """The speculative method as the launch writes it, for a measurement's label: SGLang's
    ``--speculative-algorithm`` (``"None"`` when absent, as before), vLLM's ``--speculative-config``
    method (``"vllm <method>"``)."""
    if launch.engine != "vllm":
        return str(launch.get("--speculative-algorithm"))
    try:
        return f"vllm {launch.speculative_method}"
    except WorkbenchInputError:
        return "vllm (speculative config unreadable)"

