"""Every runbook's parameters, one schema per runbook, checked before anything touches the box.

:data:`SCHEMAS` maps each runbook (``runbooks/NAME.ipynb``) to its parameters and the kind of
value each takes (:data:`KINDS`). :func:`check_runbook_parameters` checks a set of values against
it and raises :class:`~workbench.errors.RunbookParameterError` naming every bad one at once (the
parameter, the value given and what it must be). Two callers, one check:

- ``workbench runbook NAME -p KEY VALUE ...`` (:mod:`workbench.cli.runbook`) checks the values
  given before any kernel starts (exit 2);
- each runbook's first cell after its ``parameters`` cell calls it on its own values, so a
  papermill run without the CLI (``papermill runbooks/NAME.ipynb out.ipynb -p num_prompts -3``)
  fails there with the same message, before the box is touched.

A test keeps each schema equal to the notebook's ``parameters`` cell
(``papermill.inspect_notebook``). A parameter in a schema that the values lack is skipped (a
notebook that does not have it yet, or a CLI run that did not give it: the notebook's default).

Values arrive as papermill gives them: from the command line ``True``/``False``/``None``, JSON
when it parses (``-3`` is the int -3, ``[1,3,6]`` a list), else the text (``abc``, ``1,3,6``).
A bool is never a number (``True`` is no count of 1) and text never a flag (``"no"`` is no False).

Layering: imports :mod:`workbench.session` (the plain kinds), :mod:`workbench.measure` (prompt
sets, the sweep grid), :mod:`workbench.engine` (launch commands), :mod:`remote` (box specs, read
from the ssh config without connecting) and :mod:`workbench.errors`; the diagnosis, the CLI and
the notebooks import it. Nothing here needs the sandbox extra.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Optional

from workbench.errors import RunbookParameterError, WorkbenchInputError
from workbench.redact import redact_text
from workbench.session.box_session import RUN_PARAMETER_KINDS

__all__ = ["Kind", "KINDS", "SCHEMAS", "check_runbook_parameters", "runbook_parameter_problems",
           "parse_layer_ids", "RunbookParameterError"]


class Kind(NamedTuple):
    """A kind of parameter value: ``expected`` (what a value must be, the words of the error) and
    ``check(value)`` (``None`` when the value is of the kind, else ``""`` or a detail that says
    why, e.g. the prompt file's own error)."""

    expected: str
    check: Callable[[Any], Optional[str]]


def _plain(kind: str) -> Kind:
    expected, ok = RUN_PARAMETER_KINDS[kind]
    return Kind(expected, lambda v: None if ok(v) else "")


def _port(v: Any) -> Optional[str]:
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65535):
        return None
    return ""


def _host(v: Any) -> Optional[str]:
    """A box spec as :func:`remote.connect` takes it, resolved against the ssh config without
    connecting (a mistyped alias is caught here, not after a kernel started)."""
    if not isinstance(v, str) or not v.strip():
        return ""
    from remote.connect import LOCAL_SPECS
    from remote.errors import BoxSpecError

    text = v.strip()
    if text in LOCAL_SPECS:
        return None
    from remote.ssh import config_path, load_ssh_config, resolve_target

    try:
        resolve_target(text, load_ssh_config(config_path()))
    except BoxSpecError as exc:
        return str(exc)
    return None


def _launch_command(v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, str):
        return ""
    from workbench.engine.launch import LaunchCommand

    try:
        LaunchCommand.parse(v)
    except WorkbenchInputError as exc:  # LaunchCommandError: quotes, not SGLang's, a flag without its value
        return str(exc)
    return None


def _prompts(v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, (str, Path)) or not str(v).strip():
        return ""
    from workbench.measure.prompts import load_prompts

    try:
        load_prompts(v)
    except WorkbenchInputError as exc:  # PromptSetError: the file and line at fault
        return str(exc)
    return None


def parse_layer_ids(value: Any) -> Optional[list[int]]:
    """The ``aux_layer_ids`` parameter as a list: ``None``, a non-empty list (or tuple) of
    non-negative ints, or their text, ``"1,3,6"`` or ``"[1, 3, 6]"``. Raises ``ValueError`` naming
    the value for anything else (a bare int, a bool, a negative id, an empty list)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = ast.literal_eval(text if text.startswith("[") else f"[{text}]")
        except (ValueError, SyntaxError):
            raise ValueError(f"not layer ids: {text!r}") from None
    if not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise ValueError(f"not non-negative layer ids: {value!r}")
    return list(value)


def _layer_ids(v: Any) -> Optional[str]:
    try:
        parse_layer_ids(v)
    except ValueError:
        return ""
    return None


def _accept_length(v: Any) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return ""
    return None if v >= 1 else "accept length counts the bonus token: it is never below 1"


def _grid(v: Any) -> Optional[str]:
    if not isinstance(v, (str, dict)):
        return ""
    from workbench.measure.sweep import parse_grid

    try:
        parse_grid(v)
    except WorkbenchInputError as exc:  # SweepError: the key or value at fault
        return str(exc)
    return None


def _box_path(v: Any) -> Optional[str]:
    return None if v is None or (isinstance(v, str) and v.strip()) else ""


def _report_dir(v: Any) -> Optional[str]:
    if not isinstance(v, (str, Path)) or not str(v).strip():
        return ""
    path = Path(v).expanduser()
    return f"{path} exists and is not a directory" if path.exists() and not path.is_dir() else None


def _engine(v: Any) -> Optional[str]:
    return None if v is None or v in SANDBOX_ENGINES else ""


#: The engines the embedded sandbox box can be served by (the ``engine`` runbook parameter, used
#: only when no server runs and ``launch_command`` is None): ``"sglang"`` its SGLang-compatible
#: server (``workbench.sandbox_box.sandbox_launch_command``), ``"vllm"`` vLLM's CPU build
#: (``sandbox_vllm_launch_command``).
SANDBOX_ENGINES = ("sglang", "vllm")


#: Every kind of runbook parameter value, by name.
KINDS: dict[str, Kind] = {
    **{kind: _plain(kind) for kind in RUN_PARAMETER_KINDS},
    "port": Kind("None or a TCP port number 1-65535", _port),
    "host": Kind("a box: 'local', an ~/.ssh/config alias, user@host[:port] or ssh://user@host[:port]", _host),
    "engine": Kind("None, 'sglang' or 'vllm' (the engine serving the sandbox box when no server runs)", _engine),
    "launch_command": Kind("None or an SGLang or vLLM launch command (python -m sglang.launch_server ..., sglang serve "
                           "..., vllm serve MODEL ..., python -m vllm.entrypoints.openai.api_server ...)",
                           _launch_command),
    "prompts": Kind("None, a built-in prompt set (default, chat, code, math) or the path of a JSONL file of prompts",
                    _prompts),
    "aux_layer_ids": Kind("None or non-negative layer ids: \"1,3,6\" or a list such as [1, 3, 6]", _layer_ids),
    "accept_length": Kind("None or an accept length ≥ 1 (tokens per verify step, bonus token included)",
                          _accept_length),
    "grid": Kind("a sweep grid such as \"steps:1,2,3 topk:1 draft_tokens:auto\" (or a dict of lists)", _grid),
    "box_path": Kind("None or a path on the box", _box_path),
    "report_dir": Kind("a directory (made when missing)", _report_dir),
}

_BOX = {"host": "host", "launch_command": "launch_command", "port": "port"}
_RUN = {"prompts": "prompts", "num_prompts": "optional_count", "max_new_tokens": "count",
        "server_start_timeout": "seconds", "request_timeout": "seconds", "report_dir": "report_dir"}
#: the runbooks that change the box: their run's watchdog (``workbench.session.watchdog``)
_WATCHDOG = {"watchdog_after_s": "watchdog"}

#: Each runbook's parameters and their kinds (a key of :data:`KINDS`), in the order of its
#: ``parameters`` cell. ``force_launch`` (diagnose_acceptance, measure_acceptance, compare_drafts)
#: is a flag added to those notebooks by issue 13; until a notebook has it, it is skipped.
#: ``watchdog_after_s`` (the same three, issue 26): seconds of heartbeat silence before the run's
#: watchdog on the box restores it, 0 for none (``workbench runbook --watchdog-after``).
#: ``reclaim_gpus`` (the same three, issue 28): before a launch, stop the box user's own orphaned
#: SGLang processes holding the GPUs it uses (``workbench.session.gpu_guard``; set on the run as
#: ``run.reclaim_gpus``); without it such a launch is refused with the holders named.
#: ``stack_dumps`` (diagnose_acceptance, issue 28): ``py-spy dump`` of the running server's
#: processes as live evidence before any restart.
SCHEMAS: dict[str, dict[str, str]] = {
    "diagnose_acceptance": {
        **_BOX, "allow_restart": "flag", "apply_fix": "flag", "keep_fix": "flag", "attribute_fixes": "flag",
        "try_candidates": "flag", "aux_layer_ids": "aux_layer_ids", "expected_accept_length": "accept_length",
        **_RUN, "force_launch": "flag", "reclaim_gpus": "flag", "engine": "engine", **_WATCHDOG, "stack_dumps": "flag",
    },
    "measure_acceptance": {
        **_BOX, "grid": "grid", "include_baseline": "flag", **_RUN, "warmup": "non_negative",
        "force_launch": "flag", "reclaim_gpus": "flag", "engine": "engine", **_WATCHDOG,
    },
    "compare_drafts": {
        **_BOX, "draft_a": "box_path", "draft_b": "box_path", "include_baseline": "flag", **_RUN,
        "warmup": "non_negative", "force_launch": "flag", "reclaim_gpus": "flag", "engine": "engine", **_WATCHDOG,
    },
    "preflight": {**_BOX, "report_dir": "report_dir"},
}


def _schema(runbook: str) -> dict[str, str]:
    try:
        return SCHEMAS[runbook]
    except KeyError:
        raise RunbookParameterError(runbook, [f"no parameter schema for runbook {runbook!r} "
                                              f"(schemas: {', '.join(sorted(SCHEMAS))})"]) from None


def runbook_parameter_problems(runbook: str, values: Mapping[str, Any]) -> list[str]:
    """The problems of ``values`` (parameter name -> value; names not in the runbook's schema are
    ignored, schema names missing from it skipped) as phrases ``"NAME must be WHAT, got VALUE"``
    (``": DETAIL"`` after it when the check says why), in schema order; ``[]`` when all are good.
    Raises :class:`RunbookParameterError` for a runbook with no schema. A check that fails
    unexpectedly is itself a problem of that parameter, never hiding the others'."""
    problems = []
    for name, kind_name in _schema(runbook).items():
        if name not in values:
            continue
        kind, value = KINDS[kind_name], values[name]
        try:
            detail = kind.check(value)
        except Exception as exc:  # noqa: BLE001 - reported as this parameter's problem; the others still checked
            detail = f"could not be checked: {type(exc).__name__}: {exc}"
        if detail is not None:
            # the value is shown redacted (a launch command that does not parse still carries its --api-key)
            problems.append(f"{name} must be {kind.expected}, got {redact_text(repr(value))}"
                            + (f": {redact_text(detail)}" if detail else ""))
    return problems


#: Names IPython itself puts in a kernel's user namespace (besides ``_``-names): never parameters.
KERNEL_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython", "open"})

_LITERAL_TYPES = (type(None), bool, int, float, str, list, dict, tuple)


def injected_unknown(runbook: str, namespace: Mapping[str, Any]) -> list[str]:
    """Names in a runbook kernel's ``namespace`` (its ``globals()`` in the first cell after the
    parameters) that papermill injected but the runbook does not have: every name bound to a plain
    value (None, bool, number, str, list, dict, tuple: what ``papermill -p``/``-y`` can inject)
    that is neither in the runbook's schema, nor IPython's own (:data:`KERNEL_NAMES`), nor
    ``_``-prefixed. Papermill only warns about such a name (``Passed unknown parameter``) and runs
    on with the default, so a typo such as ``-p num_promts 2`` would restart a server with the
    defaults. Sorted. Raises :class:`RunbookParameterError` for a runbook with no schema."""
    schema = _schema(runbook)
    return sorted(k for k, v in namespace.items()
                  if not k.startswith("_") and k not in schema and k not in KERNEL_NAMES
                  and isinstance(v, _LITERAL_TYPES))


def check_runbook_parameters(runbook: str, values: Mapping[str, Any], *, kernel_namespace: bool = False) -> None:
    """Check ``values`` against the schema of ``runbook`` (a key of :data:`SCHEMAS`); a runbook's
    cell passes ``globals()`` with ``kernel_namespace=True`` (then names papermill injected that the
    runbook does not have are refused too: :func:`injected_unknown`), the CLI the ``-p`` values
    (it refuses unknown names itself). Raises :class:`RunbookParameterError` (exit code 2) naming
    every bad parameter with its value and what it must be (:func:`runbook_parameter_problems`),
    or for a runbook with no schema. Reads nothing on the box; reads the prompt file and the ssh
    config on this machine."""
    problems = []
    if kernel_namespace:
        unknown = injected_unknown(runbook, values)
        if unknown:
            problems.append(f"{runbook} has no parameter {', '.join(map(repr, unknown))} "
                            f"(its parameters: {', '.join(_schema(runbook))})")
    problems += runbook_parameter_problems(runbook, values)
    if problems:
        raise RunbookParameterError(runbook, problems)
