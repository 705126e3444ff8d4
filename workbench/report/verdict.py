"""The verdict document (``reports/diagnose_acceptance.json``): its contract (DESIGN.md,
"Contracts") checked by :func:`validate_verdict`, and :func:`write_verdict_json`, which writes it
atomically after turning dataclasses, numpy values, datetimes and paths into plain JSON."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Mapping

from workbench.errors import VerdictSchemaError
from workbench.redact import REDACTOR, Redactor
from workbench.report.files import atomic_write_text

__all__ = ["HYPOTHESIS_VERDICTS", "validate_verdict", "write_verdict_json", "VerdictSchemaError"]

HYPOTHESIS_VERDICTS = ("confirmed", "refuted", "inconclusive")


def _json_default(obj: Any) -> Any:
    """JSON fallback: datetimes (ISO 8601), timedeltas (seconds), numpy scalars/arrays, paths, enums,
    sets/tuples, dataclasses and objects with ``to_dict()``."""
    if isinstance(obj, (_dt.datetime, _dt.date, _dt.time)):
        return obj.isoformat()
    if isinstance(obj, _dt.timedelta):
        return obj.total_seconds()
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if callable(getattr(obj, "to_dict", None)):
        return obj.to_dict()
    module = type(obj).__module__
    if module == "numpy" or module.startswith("numpy."):
        if hasattr(obj, "tolist"):
            return obj.tolist()  # ndarray and numpy scalars (int64, float32, bool_, ...)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def _to_plain(verdict: Any) -> Any:
    try:
        return json.loads(json.dumps(verdict, default=_json_default, allow_nan=False))
    except ValueError as exc:  # NaN / inf
        raise VerdictSchemaError([("", f"holds a non-finite number (NaN / inf), which JSON cannot carry: {exc}")]) from exc
    except TypeError as exc:
        raise VerdictSchemaError([("", str(exc))]) from exc


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# key path -> (type predicate, type description, None allowed)
_REQUIRED: list[tuple[str, Any, str, bool]] = [
    ("root_cause.rule", lambda v: isinstance(v, str) and v != "", "a non-empty string (a rule id)", True),
    ("acceptance.before.accept_length", _is_number, "a number (tokens / verify step)", True),
    ("acceptance.after.accept_length", _is_number, "a number (tokens / verify step)", True),
    ("probe.observed_hidden_size", _is_int, "an integer (hidden units)", True),
    ("probe.expected_hidden_size", _is_int, "an integer (hidden units)", True),
    ("fix.launch_command", lambda v: isinstance(v, str) and v != "", "a non-empty string", True),
    ("restarts", lambda v: _is_int(v) and v >= 0, "a non-negative integer", False),
    ("duration_s", lambda v: _is_number(v) and v >= 0, "a non-negative number (seconds)", False),
]


def _lookup(doc: Any, dotted: str, problems: list[tuple[str, str]]) -> tuple[bool, Any]:
    node = doc
    walked: list[str] = []
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            where = ".".join(walked) or "(document)"
            problems.append((where, f"must be an object holding {part!r}, got {type(node).__name__}"))
            return False, None
        if part not in node:
            problems.append((".".join(walked + [part]), "missing"))
            return False, None
        node = node[part]
        walked.append(part)
    return True, node


def validate_verdict(verdict: Mapping[str, Any]) -> None:
    """Check the verdict document against DESIGN.md's contract.

    Required (``None`` allowed where a run could not determine the value, but the key must exist):
    ``root_cause.rule`` (str), ``hypotheses`` (list of objects with ``id`` (str or int), ``statement``
    (str), ``verdict`` (one of confirmed / refuted / inconclusive), ``evidence`` (any, may be None)),
    ``acceptance.before.accept_length`` and ``acceptance.after.accept_length`` (number, tokens / verify
    step), ``probe.observed_hidden_size`` and ``probe.expected_hidden_size`` (int, hidden units),
    ``fix.launch_command`` (str); always set: ``restarts`` (int >= 0) and ``duration_s`` (seconds >= 0).

    Raises:
        VerdictSchemaError: listing every missing or ill-typed key path (``.path`` is the first one).
    """
    problems: list[tuple[str, str]] = []
    if not isinstance(verdict, Mapping):
        raise VerdictSchemaError([("(document)", f"must be an object, got {type(verdict).__name__}")])
    for dotted, check, described, nullable in _REQUIRED:
        found, value = _lookup(verdict, dotted, problems)
        if not found:
            continue
        if value is None:
            if not nullable:
                problems.append((dotted, f"must be {described}, got null"))
        elif not check(value) or (isinstance(value, float) and not math.isfinite(value)):
            problems.append((dotted, f"must be {described}{' or null' if nullable else ''}, got {value!r}"))

    found, hypotheses = _lookup(verdict, "hypotheses", problems)
    if found:
        if not isinstance(hypotheses, list):
            problems.append(("hypotheses", f"must be a list, got {type(hypotheses).__name__}"))
        else:
            for i, hyp in enumerate(hypotheses):
                where = f"hypotheses[{i}]"
                if not isinstance(hyp, Mapping):
                    problems.append((where, f"must be an object, got {type(hyp).__name__}"))
                    continue
                for key in ("id", "statement", "verdict", "evidence"):
                    if key not in hyp:
                        problems.append((f"{where}.{key}", "missing"))
                if "id" in hyp and not (isinstance(hyp["id"], str) and hyp["id"] or _is_int(hyp["id"])):
                    problems.append((f"{where}.id", f"must be a non-empty string or an integer, got {hyp['id']!r}"))
                if "statement" in hyp and not (isinstance(hyp["statement"], str) and hyp["statement"].strip()):
                    problems.append((f"{where}.statement", f"must be a non-empty string, got {hyp['statement']!r}"))
                if "verdict" in hyp and hyp["verdict"] not in HYPOTHESIS_VERDICTS:
                    problems.append(
                        (f"{where}.verdict", f"must be one of {', '.join(HYPOTHESIS_VERDICTS)}, got {hyp['verdict']!r}")
                    )
    if problems:
        raise VerdictSchemaError(problems)


def write_verdict_json(path: str | os.PathLike[str], verdict: Mapping[str, Any], *,
                       redactor: Redactor | None = None) -> Path:
    """Validate ``verdict`` (see :func:`validate_verdict`) and write it as indented UTF-8 JSON, atomically,
    with every secret redacted (:meth:`workbench.redact.Redactor.obj` with ``redactor``, default the
    process-wide one: secret flags, variables, URL credentials, token shapes and every value it learned
    become ``***``).

    Datetimes become ISO 8601 strings, timedeltas seconds, numpy scalars / arrays plain numbers / lists,
    dataclasses and objects with ``to_dict()`` objects. Parent directories are created.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        VerdictSchemaError: a required key is missing or ill-typed, or a value is not JSON-serialisable
            (including NaN / inf); nothing is written then.
        OSError: the file cannot be written.
    """
    plain = (redactor or REDACTOR).obj(_to_plain(verdict))
    validate_verdict(plain)
    text = json.dumps(plain, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    return atomic_write_text(Path(path), text)
