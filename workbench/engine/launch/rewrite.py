"""Rewriting a launch command: flags set, replaced, and a fix's changes applied on top of others.

Holds the logic of :class:`workbench.engine.launch.LaunchCommand`'s rewrites that are more than a line:
:func:`with_flag` (a flag set in place, its spelling kept), :func:`replace_flag`, :func:`with_changes_of`
(the changes that turn one command into another applied to a third: the fixes composed), and
:func:`with_config_file` (vLLM 0.32.0's ``--config`` YAML file pulled in). Each takes the command
(its class lives above: used through its methods and :func:`dataclasses.replace`, never imported)
and returns a new one.

Imports, of :mod:`workbench.engine.launch`, :mod:`.resolve`, :mod:`.tokens`, :mod:`.parse` and
:mod:`.speculative`; besides :mod:`workbench.errors` (and PyYAML, lazily).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping

from workbench.engine.launch.parse import _parse_vllm_args
from workbench.engine.launch.resolve import DEFAULT_TABLE, _spec, canonical_flag
from workbench.engine.launch.speculative import _json_key_changes, _vllm_with_speculative
from workbench.engine.launch.tokens import Arg, _derived
from workbench.errors import LaunchCommandError, SpeculativeConfigError

__all__ = ["with_flag", "replace_flag", "with_changes_of", "with_config_file"]


def with_flag(cmd: "LaunchCommand", flag: str, value: Any = True) -> "LaunchCommand":
    """The logic of :meth:`workbench.engine.launch.LaunchCommand.with_flag` (see it): ``cmd`` with
    ``flag`` set to ``value``, the first occurrence replaced in place (its spelling, its ``=``), later
    ones dropped, an absent flag appended. Raises :class:`LaunchCommandError` when the value does not
    fit the flag or ``flag`` is an ambiguous prefix in ``cmd``'s table."""
    canon = canonical_flag(flag, cmd.table)
    spec = _spec(canon, cmd.table)
    kind = spec["kind"] if spec else "value"
    negated = False
    if kind == "store_true":
        if value is False:
            return cmd.without_flag(canon)
        if value is not True:
            raise LaunchCommandError(f"{canon} is a boolean flag (store_true): it takes no value, got {value!r}")
        values: tuple[str, ...] = ()
    elif kind == "bool_optional":
        if not isinstance(value, bool):
            raise LaunchCommandError(f"{canon} is a --x/--no-x flag: pass True or False, got {value!r}")
        values, negated = (), not value
    else:
        if isinstance(value, bool):
            raise LaunchCommandError(f"{canon} takes a value, got the boolean {value!r}")
        if isinstance(value, (list, tuple)):
            if not spec or spec.get("nargs") not in ("+", "*"):
                if len(value) != 1:
                    raise LaunchCommandError(f"{canon} takes one value, got {len(value)}: {value!r}")
            values = tuple(str(v) for v in value)
        else:
            values = (str(value),)
    new_args: list[Arg] = []
    replaced = False
    for a in cmd.args:
        if a.flag != canon:
            new_args.append(a)
            continue
        if replaced:
            continue
        spelled = a.spelled if not a.key else (a.spelled.split(".", 1)[0])  # a dotted key: the whole value now
        if kind == "bool_optional":
            spelled = ("--no-" + canon[2:]) if negated else canon
        equals = a.equals and len(values) == 1
        new_args.append(
            Arg(canon, spelled, values, equals=equals, negated=negated, positional=a.positional and len(values) == 1,
                status=None if spec else "unknown", table=cmd.table, attached=a.attached and len(values) == 1)
        )
        replaced = True
    if not replaced:
        spelled = ("--no-" + canon[2:]) if negated else canon
        new_args.append(Arg(canon, spelled, values, negated=negated, status=None if spec else "unknown",
                            table=cmd.table))
    return _derived(cmd, args=tuple(new_args))


def replace_flag(cmd: "LaunchCommand", old: str, new: str, value: Any = True) -> "LaunchCommand":
    """The logic of :meth:`workbench.engine.launch.LaunchCommand.replace_flag` (see it): every
    ``old`` removed, ``new`` set to ``value`` where ``old`` first stood. Raises as :func:`with_flag`."""
    canon_old = cmd._canon(old)
    at = next((k for k, a in enumerate(cmd.args) if a.flag == canon_old), None)
    rest = cmd.without_flag(old)
    if at is None:
        return rest.with_flag(new, value)
    canon_new = canonical_flag(new, cmd.table)
    single = with_flag(_derived(cmd, args=()), new, value)
    before = [a for a in cmd.args[:at] if a.flag != canon_old and a.flag != canon_new]
    after = [a for a in cmd.args[at:] if a.flag != canon_old and a.flag != canon_new]
    return _derived(cmd, args=tuple(before + list(single.args) + after))


def with_changes_of(cmd: "LaunchCommand", original: "LaunchCommand", proposed: "LaunchCommand") -> "LaunchCommand":
    """The logic of :meth:`workbench.engine.launch.LaunchCommand.with_changes_of` (see it): ``cmd``
    with the flag changes that turn ``original`` into ``proposed`` applied, working on the arguments as
    written (never re-resolving a flag); a vLLM ``--speculative-config`` changed one JSON key at a time."""
    args = list(cmd.args)
    changed = [flag for flag, _old, _new in original.diff(proposed) if flag.startswith("--")]
    for flag in original.flags():  # same value, other tokens: `--x=true` written as the bare switch
        if flag not in changed and flag.startswith("--") and proposed.has_written(flag) and (
                [a.tokens() for a in original.args if a.flag == flag] !=
                [a.tokens() for a in proposed.args if a.flag == flag]):
            changed.append(flag)
    spec_changes: dict[str, Any] | None = None
    if cmd.engine == "vllm" and "--speculative-config" in changed:
        spec_changes = _json_key_changes(original, proposed)
        if spec_changes is not None:  # one key at a time: two fixes of different keys both hold
            changed.remove("--speculative-config")
    for flag in changed:
        theirs = [a for a in proposed.args if a.flag == flag]
        if not theirs:
            args = [a for a in args if a.flag != flag]
            continue
        new_arg = theirs[-1]
        # vLLM: a JSON flag's dotted keys are one value together (`-sc.method X -sc.model Y`): all kept
        block = [a for a in theirs if a.key] if cmd.engine == "vllm" and new_arg.key else [new_arg]
        at = next((k for k, a in enumerate(args) if a.flag == flag), None)
        if at is not None:
            args = [a for k, a in enumerate(args) if a.flag != flag or k == at]
            args[at:at + 1] = block
            continue
        where = len(args)
        pos = next(k for k, a in enumerate(proposed.args) if a is new_arg)
        for prev in reversed(proposed.args[:pos]):
            hits = [k for k, a in enumerate(args) if (a.flag is not None and a.flag == prev.flag)
                    or (a.flag is None and prev.flag is None and a.values == prev.values)]
            if hits:
                where = hits[-1] + 1
                break
        else:
            where = 0 if pos == 0 else len(args)
        args[where:where] = block
    gone = [a.values for a in original.args if a.flag is None]
    for a in proposed.args:  # the positionals the fix dropped (a stray word, a placeholder)
        if a.flag is None and a.values in gone:
            gone.remove(a.values)
    for values in gone:
        at = next((k for k, a in enumerate(args) if a.flag is None and a.values == values), None)
        if at is not None:
            del args[at]
    launcher, engine, module = cmd.launcher, cmd.engine, cmd.module
    if proposed.launcher != original.launcher and proposed.engine == cmd.engine:
        # the fix starts the server another way (vLLM: `vllm serve` → `python -m ...api_server`):
        # its launcher holds; a model given as `serve`'s positional becomes `--model` where the new
        # launcher does not read a positional model (vLLM 0.32.0 api_server: `model_tag` is ignored)
        launcher, module = proposed.launcher, proposed.module
        if not module.endswith("serve"):
            args = [replace(a, spelled="--model", positional=False) if a.flag == "--model" and a.positional else a
                    for a in args]
    out = _derived(cmd, launcher=launcher, engine=engine, module=module, args=tuple(args))
    if spec_changes:
        try:
            out = _vllm_with_speculative(out, spec_changes)
        except SpeculativeConfigError:  # this command's own JSON is broken: the fix's value replaces it
            theirs = [a for a in proposed.args if a.flag == "--speculative-config"]
            out = _derived(out, args=tuple(a for a in out.args if a.flag != "--speculative-config") + tuple(theirs))
    return out


def with_config_file(cmd: "LaunchCommand", config: "Mapping[str, Any] | str") -> "LaunchCommand":
    """The logic of :meth:`workbench.engine.launch.LaunchCommand.with_config_file` (see it): a vLLM
    command with its ``--config`` YAML file's flags (vLLM 0.32.0 ``FlexibleArgumentParser.
    _pull_args_from_config``) inserted before the command line's arguments. Raises
    :class:`LaunchCommandError` for a command that is not vLLM's, YAML that does not load or is not a
    mapping."""
    if cmd.engine != "vllm":
        raise LaunchCommandError(f"--config files are vLLM's; this is a {cmd.engine} launch command")
    if cmd.config_file is None or cmd.config_file_ignored:
        return cmd
    if isinstance(config, str):
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - pyyaml comes with papermill
            raise LaunchCommandError("reading a vLLM --config file needs PyYAML (pip install pyyaml)") from exc
        try:
            config = yaml.safe_load(config)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise LaunchCommandError(f"vLLM --config file {cmd.config_file}: not YAML{where}: "
                                     f"{getattr(exc, 'problem', None) or exc}") from exc
    if not isinstance(config, Mapping):
        raise LaunchCommandError(f"vLLM --config file {cmd.config_file}: a YAML mapping of flags is expected, "
                                 f"got {type(config).__name__}")
    tab = cmd.table or DEFAULT_TABLE
    pulled: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                pulled.append(f"--{key}")
            elif f"--no-{key}" in tab.negations or f"--no-{key}" in tab.aliases:
                pulled.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                pulled += [f"--{key}", *(str(v) for v in value)]
        elif isinstance(value, dict):
            pulled += [f"--{key}", json.dumps(value)]
        else:
            pulled += [f"--{key}", str(value)]
    at = cmd.args.index(next(a for a in cmd.args if a.flag == "--config" and a.spelled == "--config"))
    rest = [a for k, a in enumerate(cmd.args) if k != at]
    front: list[Arg] = []
    if cmd.module.endswith("serve"):  # the CLI's first --model was moved to the front as the model
        first = next((a for a in rest if a.flag == "--model" and not a.positional and not a.key
                      and a.spelled == "--model"), None)
        model = first or next((a for a in rest if a.flag == "--model" and a.positional), None)
        if model is not None:
            rest.remove(model)
            front = [Arg("--model", "", model.values[:1], positional=True, table=cmd.table)]
    elif rest and rest[0].flag is None:
        front, rest = [rest[0]], rest[1:]
    config_args = _parse_vllm_args(pulled, 0, "", tab)
    args = front + [replace(a, origin="config") for a in config_args] + rest
    return _derived(cmd, args=tuple(args))
