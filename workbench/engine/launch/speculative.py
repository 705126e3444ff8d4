"""Speculative settings, engine-neutral: :class:`SpeculativeConfig` read from a launch command, and
the command rewritten with changed settings.

Holds: :class:`SpeculativeConfig`, :func:`normalise_method`, SGLang's speculative flags
(``_SGLANG_SPEC_FLAGS``: SGLang 0.5.23 ``srt/arg_groups/fields``) and vLLM's ``--spec-*`` ones
(``_VLLM_SPEC_FLAGS``), the reading of vLLM's JSON ``--speculative-config`` (plain, dotted, merged
with ``--spec-*``: ``_vllm_spec_sources``, ``_load_spec_json``; vLLM 0.32.0 ``vllm/engine/arg_utils.py``)
and of SGLang's flags (:func:`speculative_config`), its rewriting in the form it was written
(:func:`with_speculative`, ``_vllm_with_speculative``), and the JSON keys a fix changes
(``_json_key_changes``). The functions take a :class:`workbench.engine.launch.LaunchCommand` (its
class lives above: it is used through its methods, never imported).

Imports, of :mod:`workbench.engine.launch`, only :mod:`.tokens`; besides
:mod:`workbench.engine.flag_table`, :mod:`workbench.engine.vllm_spec` (lazily), :mod:`workbench.errors`
and :mod:`workbench.redact`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

from workbench.engine.flag_table import vllm_option_name
from workbench.engine.launch.tokens import Arg, _derived, _dotted_groups
from workbench.errors import LaunchCommandError, SpeculativeConfigError
from workbench.redact import REDACTOR

__all__ = ["SpeculativeConfig", "normalise_method", "speculative_config", "with_speculative"]


# ---------------------------------------------------------------------------------------------
# Speculative settings, engine-neutral.
# ---------------------------------------------------------------------------------------------

#: SGLang's flags for the engine-neutral speculative keys (SGLang 0.5.23 ``srt/arg_groups/fields``).
_SGLANG_SPEC_FLAGS = {"method": "--speculative-algorithm", "model": "--speculative-draft-model-path",
                      "num_speculative_tokens": "--speculative-num-steps"}
#: vLLM 0.32.0's single-key flags merged into ``speculative_config`` (``vllm/engine/arg_utils.py``
#: ``create_speculative_config``): flag → key.
_VLLM_SPEC_FLAGS = {"--spec-method": "method", "--spec-model": "model", "--spec-tokens": "num_speculative_tokens"}


@dataclass(frozen=True)
class SpeculativeConfig:
    """The speculative-decoding settings of a launch command, for both engines
    (:attr:`LaunchCommand.speculative_config`).

    ``engine``: ``"sglang"`` / ``"sandbox"`` / ``"vllm"``. ``method``: normalised — lower case
    (SGLang ``EAGLE3`` → ``"eagle3"``), and on vLLM as its ``SpeculativeConfig.__post_init__``
    renames (vLLM 0.32.0 ``vllm/config/speculative.py``: an MTP model type such as
    ``"deepseek_mtp"`` → ``"mtp"``, ``"[ngram]"`` → ``"ngram"``); ``None`` when not written (vLLM then
    infers it from the draft: ``method_written`` says it was not given). ``method_written``: as
    written (vLLM's method is case-sensitive: ``"EAGLE3"`` is refused there). ``model``: the draft
    path / id as written. ``num_speculative_tokens``: draft tokens per verify step (SGLang:
    ``--speculative-num-steps``), ``None`` when absent or not an integer (the text stays in ``raw``).
    ``draft_tensor_parallel_size``: vLLM's key (SGLang has none: ``None``). ``raw``: every key as the
    engine gets it (vLLM: the JSON object, ``-`` in keys read as ``_``; SGLang: ``{flag: value}`` of its
    speculative flags). ``form``: how it was written — ``"json"`` (``--speculative-config '<json>'``),
    ``"dotted"`` (``--speculative-config.key value``), ``"flags"`` (vLLM's ``--spec-*`` only, or
    SGLang's flags). ``flag``: the option as written for ``json`` / ``dotted``. ``problems``: what vLLM
    refuses while building its config (a key given by a ``--spec-*`` flag and in the JSON), one
    sentence each, finding-ready; ``notes``: what is legal but easy to get wrong (a dotted form that
    replaced a JSON object written beside it)."""

    engine: str
    method: str | None
    method_written: str | None
    model: str | None
    num_speculative_tokens: int | None
    draft_tensor_parallel_size: int | None
    raw: Mapping[str, Any]
    form: str
    flag: str | None = None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def normalise_method(method: Any, engine: str) -> str | None:
    """The engine-neutral name of a speculative method: lower case; on vLLM an MTP model type is
    ``"mtp"`` and ``"[ngram]"`` is ``"ngram"`` (vLLM 0.32.0 ``SpeculativeConfig.__post_init__``; the
    MTP model types from the shipped list, :func:`workbench.engine.vllm_spec.shipped_method_names`).
    ``None`` for ``None``."""
    from workbench.engine.vllm_spec import shipped_method_names

    if method is None:
        return None
    name = str(method).strip().lower()
    if engine == "vllm":
        if name in shipped_method_names().mtp_aliases:
            return "mtp"
        if name == "[ngram]":
            return "ngram"
    return name


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _token_index(cmd: "LaunchCommand", arg: Arg) -> int:
    i = len(cmd.env) + len(cmd.launcher)
    for a in cmd.args:
        if a is arg:
            return i
        i += len(a.tokens())
    return i


def _load_spec_json(cmd: "LaunchCommand", arg: Arg) -> dict | None:
    """The object of one plain ``--speculative-config`` argument (``None`` for ``""`` / ``"None"``,
    vLLM 0.32.0 ``optional_type``). Raises SpeculativeConfigError."""
    text = arg.values[0] if arg.values else ""
    if text in ("", "None"):
        return None
    tok = _token_index(cmd, arg)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        shown = REDACTOR.text(text[max(0, exc.pos - 25):exc.pos]) + " <here> " + REDACTOR.text(text[exc.pos:exc.pos + 25])
        raise SpeculativeConfigError(
            f"{arg.spelled} (token {tok}): its value is not JSON: {exc.msg} at character {exc.pos} (line {exc.lineno}, "
            f"column {exc.colno}) of the value: ...{shown}... (vLLM's argparse refuses it: json.loads)",
            flag=arg.spelled, position=exc.pos, token=tok) from exc
    if not isinstance(doc, dict):
        raise SpeculativeConfigError(
            f"{arg.spelled} (token {tok}): its value is JSON but not an object (a {type(doc).__name__}); vLLM builds "
            "SpeculativeConfig(**value) from an object such as {\"method\": \"eagle3\", \"model\": ...}",
            flag=arg.spelled, position=None, token=tok)
    return doc


def _vllm_spec_sources(cmd: "LaunchCommand") -> tuple[dict | None, str, str | None, list[str]]:
    """``(object or None, form, flag as written, notes)`` of the effective ``--speculative-config``
    (before the ``--spec-*`` flags are merged)."""
    occ = cmd._occurrences("--speculative-config")
    plain = [a for a in occ if not a.key]
    groups = _dotted_groups(occ)
    notes: list[str] = []
    if groups:
        name, obj = list(groups.items())[-1]
        if plain:
            lost = _load_spec_json(cmd, plain[-1]) or {}
            gone = sorted(set(lost) - set(obj))
            notes.append(f"the dotted {name}.KEY arguments replace the object of {plain[-1].spelled} written beside "
                         f"them (vLLM 0.32.0 FlexibleArgumentParser appends them as a later {name}; not merged)"
                         + (f": {', '.join(gone)} of that object {'is' if len(gone) == 1 else 'are'} lost" if gone else ""))
        if len(groups) > 1:
            notes.append(f"dotted keys under several spellings ({', '.join(groups)}) are separate objects: only the "
                         f"last ({name}) is used")
        return dict(obj), "dotted", name, notes
    if plain:
        return _load_spec_json(cmd, plain[-1]), "json", plain[-1].spelled, notes
    return None, "flags", None, notes


def _vllm_speculative_config(cmd: "LaunchCommand") -> SpeculativeConfig | None:
    obj, form, flag, notes = _vllm_spec_sources(cmd)
    problems: list[str] = []
    merged = dict(obj) if obj is not None else None
    for spec_flag, key in _VLLM_SPEC_FLAGS.items():
        value = cmd.get(spec_flag)
        if value is None:
            continue
        if merged is None:
            merged = {}
        if key in merged:
            problems.append(f"{spec_flag} and --speculative-config['{key}'] are both given: vLLM refuses the launch "
                            "(\"mutually exclusive\", vLLM 0.32.0 vllm/engine/arg_utils.py create_speculative_config)")
            continue
        merged[key] = _as_int(value) if key == "num_speculative_tokens" and _as_int(value) is not None else value
    if merged is None:
        return None
    raw = {str(k).replace("-", "_"): v for k, v in merged.items()}
    written = raw.get("method")
    return SpeculativeConfig(
        engine="vllm", method=normalise_method(written, "vllm"), method_written=None if written is None else str(written),
        model=None if raw.get("model") is None else str(raw["model"]),
        num_speculative_tokens=_as_int(raw.get("num_speculative_tokens")) if raw.get("num_speculative_tokens") is not None else None,
        draft_tensor_parallel_size=_as_int(raw.get("draft_tensor_parallel_size")) if raw.get("draft_tensor_parallel_size") is not None else None,
        raw=raw, form=form if obj is not None else "flags", flag=flag if obj is not None else None,
        problems=tuple(problems), notes=tuple(notes))


def _sglang_speculative_config(cmd: "LaunchCommand") -> SpeculativeConfig | None:
    flags = ("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
             "--speculative-eagle-topk", "--speculative-num-draft-tokens")
    raw = {f: cmd.get(f) for f in flags if cmd.get(f) is not None}
    if not raw:
        return None
    written = raw.get("--speculative-algorithm")
    model = raw.get("--speculative-draft-model-path")
    steps = raw.get("--speculative-num-steps")
    return SpeculativeConfig(
        engine=cmd.engine, method=normalise_method(written, cmd.engine), method_written=None if written is None else str(written),
        model=None if model is None else str(model), num_speculative_tokens=_as_int(steps) if steps is not None else None,
        draft_tensor_parallel_size=None, raw=raw, form="flags")


def _json_key_changes(original: "LaunchCommand", proposed: "LaunchCommand") -> dict[str, Any] | None:
    """The keys of the effective ``--speculative-config`` object that change from ``original`` to
    ``proposed`` (``{key: new value}``, ``None`` for a key removed); ``None`` when either object cannot
    be read (then the flag is replaced as a whole)."""
    try:
        before = _vllm_spec_sources(original)[0] or {}
        after = _vllm_spec_sources(proposed)[0] or {}
    except SpeculativeConfigError:
        return None
    norm_b = {str(k).replace("-", "_"): v for k, v in before.items()}
    norm_a = {str(k).replace("-", "_"): v for k, v in after.items()}
    out: dict[str, Any] = {k: v for k, v in norm_a.items() if norm_b.get(k, object()) != v}
    out.update({k: None for k in norm_b if k not in norm_a})
    return out


def _dump_like(obj: Mapping, original: str) -> str:
    """``json.dumps(obj)`` with the separators ``original`` used (compact when it had no space after
    ``,`` / ``:``)."""
    compact = bool(original) and not re.search(r"[,:]\s", original)
    return json.dumps(obj, separators=(",", ":") if compact else (", ", ": "))


def _vllm_with_speculative(cmd: "LaunchCommand", changes: Mapping[str, Any]) -> "LaunchCommand":
    out = cmd
    rest: dict[str, Any] = {}
    by_key = {v: k for k, v in _VLLM_SPEC_FLAGS.items()}
    for key, value in changes.items():
        key = key.replace("-", "_")
        spec_flag = by_key.get(key)
        if spec_flag and out.has(spec_flag):  # written as --spec-method / --spec-model / --spec-tokens: stays so
            out = out.without_flag(spec_flag) if value is None else out.with_flag(spec_flag, value)
        else:
            rest[key] = value
    if not rest:
        return out
    obj, form, flag, _notes = _vllm_spec_sources(out)
    if form == "dotted":
        args = list(out.args)

        def in_group(a: Arg) -> bool:
            return (a.flag == "--speculative-config" and bool(a.key)
                    and vllm_option_name(a.spelled.partition("=")[0]).split(".", 1)[0] == flag)

        for key, value in rest.items():
            hits = [k for k, a in enumerate(args) if in_group(a) and tuple(x.replace("-", "_") for x in a.key) == (key,)]
            if value is None:
                args = [a for k, a in enumerate(args) if k not in hits]
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            new = Arg("--speculative-config", f"{flag}.{key}", (text,), table=out.table, key=(key,))
            if hits:
                args = [new if k == hits[0] else a for k, a in enumerate(args) if k == hits[0] or k not in hits]
            else:
                last = max(k for k, a in enumerate(args) if in_group(a))
                args.insert(last + 1, new)
        return _derived(out, args=tuple(args))
    new_obj = dict(obj or {})
    for key, value in rest.items():
        if value is None:
            new_obj.pop(key, None)
            new_obj.pop(key.replace("_", "-"), None)
        else:
            dash = key.replace("_", "-")
            new_obj[dash if dash in new_obj and key not in new_obj else key] = value
    plain = [a for a in out._occurrences("--speculative-config") if not a.key]
    if not plain:
        return out.with_flag("--speculative-config", _dump_like(new_obj, ""))
    target = plain[-1]
    text = _dump_like(new_obj, target.values[0] if target.values else "")
    args = tuple(replace(a, values=(text,)) if a is target else a for a in out.args)
    return _derived(out, args=args)



def speculative_config(cmd: "LaunchCommand") -> SpeculativeConfig | None:
    """:attr:`workbench.engine.launch.LaunchCommand.speculative_config` (see it): vLLM's from its JSON
    ``--speculative-config`` / dotted keys / ``--spec-*`` flags, SGLang's and the sandbox's from their
    ``--speculative-*`` flags; ``None`` when speculative decoding is off. Raises
    :class:`SpeculativeConfigError` when the vLLM value is not JSON or not a JSON object."""
    if cmd.engine == "vllm":
        return _vllm_speculative_config(cmd)
    return _sglang_speculative_config(cmd)


def with_speculative(cmd: "LaunchCommand", changes: Mapping[str, Any]) -> "LaunchCommand":
    """:meth:`workbench.engine.launch.LaunchCommand.with_speculative` (see it): ``cmd`` with the
    speculative settings ``changes`` (``{key: value}``, ``None`` removes) applied, in the form they
    were written. Raises :class:`LaunchCommandError` for a key SGLang has no flag for, and
    :class:`SpeculativeConfigError` when the written JSON cannot be read."""
    if cmd.engine == "vllm":
        return _vllm_with_speculative(cmd, changes)
    out = cmd
    for key, value in changes.items():
        flag = _SGLANG_SPEC_FLAGS.get(key)
        if flag is None:
            raise LaunchCommandError(f"SGLang has no launch flag for the speculative setting {key!r} "
                                     f"(known: {', '.join(_SGLANG_SPEC_FLAGS)})")
        if value is None:
            out = out.without_flag(flag)
        else:
            out = out.with_flag(flag, str(value).upper() if key == "method" else value)
    return out
