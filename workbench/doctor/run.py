"""The preflight doctor: every rule of the catalogue (``notes/doctor-rules.md``) on one box.

:func:`run_doctor` reads, through the :class:`remote.Box` API only (``read_text``, ``read_bytes``
byte ranges, ``exists``, ``listdir``, ``run`` for one ``grep`` over the engine's model sources):

* the launch command's paths; a Hugging Face repo id (``org/name``) is looked up in the box's
  Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``; ``models--org--name/refs/main`` → ``snapshots/<rev>``); a repo
  that is not there is a ``model-not-on-box`` finding (an addition to the catalogue: the server
  would download it, the doctor cannot check it);
* both ``config.json`` files, the draft checkpoint's safetensors headers (single file or
  ``model.safetensors.index.json``) and ``d2t``/``t2d`` by byte range
  (:mod:`workbench.checkpoint`);
* the engine's version and source root (located with the box's interpreter, as the diagnosis
  inventory does), and from that source: the target class's ``set_eagle3_layers_to_capture``
  (the aux-layer offset rule is *evaluated* from the box's own source, so it follows the
  engine version), the draft classes the engine registers (``EntryClass`` of
  ``srt/models/*eagle*.py``), the config keys the draft class reads, and the ``try/except``
  around the ``eagle_config`` read.

When the engine source cannot be located, the source-dependent rules fall back to the facts
modelled from SGLang 0.5.23 (``notes/sglang-0.5.23.md``) and their evidence says so.

Rule functions are pure (facts in, :class:`workbench.rules.Finding` list out), so tests can call
them one by one; :func:`acceptance_collapsed` is the runtime rule.
"""

from __future__ import annotations

import re
import time
from typing import Any

from remote.errors import RemoteError
from workbench.checkpoint import ConfigUnreadable, DraftFacts, TargetFacts, read_draft_facts, read_target_facts
from workbench.checkpoint.paths import box_env, resolve_model_path
from workbench.doctor.report import DoctorReport, _dedupe
from workbench.engine.codepath import code_path_map
from workbench.engine.launch import LaunchCommand
from workbench.engine.locate import find_engine, is_launch_argv
from workbench.engine.modelled import (
    DRAFT_CLASS_FILES,
    MODELLED_EAGLE3_DRAFT_CLASSES,
    MODELLED_SPEC_ALGORITHMS,
    SGLANG_VERSION,
    modelled_capture,
)
from workbench.engine.source import EngineSource
from workbench.errors import DoctorError, EngineNotFound
from workbench.rules.aux_layers import _ids_ok, aux_rules
from workbench.rules.configs import config_rules
from workbench.rules.engine_source import NORM_FLAGS, scan_swallowed
from workbench.rules.finding import Finding, ev
from workbench.rules.launch_flags import _algo, algorithm_mismatch, draft_path_missing, launch_flags_unknown, spec_params_invalid
from workbench.rules.weights import check_draft_weights
from workbench.sandbox_box import DEFAULT_PORT, sandbox_launch_command

__all__ = ["DoctorError", "DoctorReport", "run_doctor", "RULE_IDS", "preflight", "running_launch"]

#: Every rule id the doctor can emit (the catalogue, plus ``model-not-on-box`` and ``launch-flag-unknown``).
RULE_IDS = (
    "algorithm-mismatch", "draft-path-missing", "spec-params-invalid", "unknown-draft-architecture",
    "aux-config-unread", "aux-layer-ids-out-of-range", "aux-layer-offset-convention", "aux-count-mismatch",
    "hidden-size-mismatch", "vocab-size-mismatch", "head-dim-mismatch", "context-length-mismatch", "rope-mismatch",
    "norm-flags-unsupported", "weights-dropped", "weights-missing", "lm-head-shape-mismatch", "token-map-missing",
    "token-map-invalid", "checkpoint-unreadable", "target-no-aux-capture", "swallowed-config-error",
    "acceptance-collapsed", "model-not-on-box", "launch-flag-unknown",
)

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
# The driver.
# ---------------------------------------------------------------------------------------------


def run_doctor(box: Any, launch: LaunchCommand | str, *, timeout: float = 30, engine_root: str | None = None,
               engine_version: str | None = None, cwd: str | None = None) -> DoctorReport:
    """Run every static rule of the catalogue on ``launch`` against the files on ``box``.

    ``launch``: a :class:`LaunchCommand` or its text. ``engine_root``/``engine_version``: the
    ``sglang`` package directory and version on the box; located with the command's interpreter
    when ``None`` (:func:`workbench.engine.locate.find_engine`). ``cwd``: the server's working directory for relative
    paths. ``timeout``: seconds for every box call. Returns a :class:`DoctorReport`; bad inputs
    (unreadable configs or checkpoints, repo ids not in the cache) are findings. Raises
    :class:`DoctorError` when the doctor cannot run (no ``--model-path``), and
    ``remote.errors.RemoteError`` subclasses for a box that fails (connection lost, time-out).
    """
    t0 = time.monotonic()
    if isinstance(launch, str):
        launch = LaunchCommand.parse(launch)
    cbox = _CountingBox(box)
    wire0 = _wire(box)
    findings: list[Finding] = []
    inputs: list[dict] = []
    notes: list[str] = []
    model_value = launch.get("--model-path")
    if not isinstance(model_value, str) or not model_value:
        raise DoctorError("the launch command has no --model-path", where=launch.to_string()[:200])
    env = box_env(cbox, timeout)
    env.update(dict(launch.env))

    def resolve(value: str, role: str) -> str | None:
        path, how = resolve_model_path(cbox, value, env=env, cwd=cwd, timeout=timeout)
        inputs.append({"what": role, "path": path or value, "how": how})
        if path is None:
            rule, sev = ("model-not-on-box", "warning") if "not in the box's cache" in how else ("checkpoint-unreadable", "error")
            findings.append(Finding(rule, sev, f"the {role} {value!r} cannot be read on {box.name}: {how}",
                                    {role: ev(value, "launch command")},
                                    "download it into the box's Hugging Face cache or pass a local directory"
                                    if rule == "model-not-on-box" else "fix the path in the launch command"))
        return path

    target = draft = None
    target_path = resolve(model_value, "target model")
    if target_path:
        try:
            target = read_target_facts(cbox, target_path, timeout=timeout)
            inputs.append({"what": "target config", "path": target.config_path, "how": "read_text"})
        except ConfigUnreadable as exc:
            findings.append(Finding("checkpoint-unreadable", "error", f"target config unreadable: {exc}",
                                    {"path": ev(exc.path, "launch command: --model-path")}, None))
    algo = _algo(launch)
    draft_value = launch.get("--speculative-draft-model-path")
    if isinstance(draft_value, str) and draft_value:
        draft_path = resolve(draft_value, "draft model")
        if draft_path:
            try:
                draft = read_draft_facts(cbox, draft_path, timeout=timeout)
                inputs.append({"what": "draft config", "path": draft.config_path, "how": "read_text"})
                inputs.append({"what": "draft checkpoint headers",
                               "path": sorted({t.file for t in (draft.tensors or {}).values()}) or draft_path,
                               "how": "read_bytes (header byte ranges)"})
            except ConfigUnreadable as exc:
                findings.append(Finding("checkpoint-unreadable", "error", f"draft config unreadable: {exc}",
                                        {"path": ev(exc.path, "launch command: --speculative-draft-model-path")}, None))
    if engine_root is None:
        try:
            located = find_engine(cbox, launch=launch, timeout=timeout)
            engine_root, engine_version = located.root, engine_version or located.version
        except EngineNotFound as exc:
            notes.append(f"engine source not located ({exc}); source-dependent rules use the facts modelled "
                         f"from sglang {SGLANG_VERSION}")
    engine = EngineSource(cbox, engine_root, engine_version, timeout=timeout) if engine_root else None
    if engine_root:
        inputs.append({"what": "engine source", "path": engine_root, "how": f"version {engine_version}"})
    if engine_version and launch.engine == "sglang" and engine_version != SGLANG_VERSION:
        notes.append(f"the box runs sglang {engine_version}; rules were modelled on {SGLANG_VERSION} and read the "
                     "box's source where they depend on it")

    raw_algo = launch.get("--speculative-algorithm")
    known_algos = engine.spec_algorithms() if engine is not None else None
    if known_algos is None:
        known_algos = (MODELLED_SPEC_ALGORITHMS, f"modelled: sglang {SGLANG_VERSION} srt/speculative/spec_info.py "
                                                 "SpeculativeAlgorithm, spec_registry.py _RESERVED_ALIASES")
    findings += launch_flags_unknown(launch, engine_version)
    if isinstance(raw_algo, str) and known_algos is not None and raw_algo.upper() not in known_algos[0]:
        findings.append(Finding("spec-params-invalid", "error",
                                f"--speculative-algorithm {raw_algo} is not an algorithm this engine knows "
                                f"({', '.join(sorted(known_algos[0] - {'NONE'}))}): from_string raises at startup "
                                "unless a plugin registers it",
                                {"speculative_algorithm": ev(raw_algo, "launch command"),
                                 "engine_algorithms": ev(sorted(known_algos[0]), known_algos[1])},
                                "use EAGLE3 for an EAGLE-3 draft, EAGLE for an EAGLE-1/2 draft"))
    findings += draft_path_missing(launch, target)
    findings += spec_params_invalid(launch, target.architectures[0] if target and target.architectures else None,
                                    draft.draft_vocab_size if draft else None, target.vocab_size if target else None)
    if draft is not None:
        findings += algorithm_mismatch(launch, draft, target)
        findings += _draft_rules(cbox, launch, draft, target, engine, timeout, notes)
    if engine is not None and algo == "EAGLE3":
        findings += scan_swallowed(engine, code_path_map(engine, keys=["eagle-config-read"]))
    wire1 = _wire(box)
    return DoctorReport(_dedupe(findings), inputs, cbox.bytes_read,
                        (wire1 - wire0) if wire0 is not None and wire1 is not None else None,
                        engine_version, engine_root, launch.to_string(), round(time.monotonic() - t0, 3), notes,
                        draft_facts=draft, target_facts=target)


def running_launch(box: Any, *, port: int | None = None, timeout: float = 30) -> tuple[LaunchCommand, str | None]:
    """The launch command and cwd of the SGLang (or sandbox) server running on ``box``
    (``Box.find_servers``; on ``port`` when given). Raises :class:`DoctorError` when none runs."""
    servers = [s for s in box.find_servers(timeout=timeout) if is_launch_argv(s.argv)]
    if port:
        servers = [s for s in servers if s.port == port]
    if not servers:
        raise DoctorError("no SGLang server running" + (f" on port {port}" if port else ""), where=box.name)
    return LaunchCommand.parse(list(servers[0].argv)), servers[0].cwd


def preflight(host: str = "local", launch_command: str | None = None, *, port: int | None = None,
              timeout: float = 30) -> DoctorReport:
    """The preflight runbook's one call: connect to ``host`` (``remote.connect`` spec), take
    ``launch_command`` (else the running server's command line, else the embedded sandbox box's
    default launch with the wrong flag, as ``diagnose_acceptance`` does), run :func:`run_doctor`,
    close the box. Raises :class:`DoctorError`, ``LaunchCommandError``, ``RemoteError``."""
    from remote import connect

    box = connect(host)
    try:
        cwd = None
        if launch_command is not None:
            launch = LaunchCommand.parse(launch_command)
        else:
            try:
                launch, cwd = running_launch(box, port=port, timeout=timeout)
            except DoctorError:
                launch = LaunchCommand.parse(sandbox_launch_command(port=port or DEFAULT_PORT))
        return run_doctor(box, launch, timeout=timeout, cwd=cwd)
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


def _draft_rules(box: Any, launch: LaunchCommand, draft: DraftFacts, target: TargetFacts | None,
                 engine: EngineSource | None, timeout: float, notes: list[str]) -> list[Finding]:
    out: list[Finding] = []
    algo = _algo(launch)
    arch = draft.architectures[0] if draft.architectures else None
    if draft.checkpoint_error is not None:
        err = draft.checkpoint_error
        out.append(Finding("checkpoint-unreadable", "error", f"the draft checkpoint cannot be read ({err.reason}): {err}",
                           {"path": ev(err.path, "draft checkpoint"), "reason": err.reason},
                           "re-export or re-download the draft checkpoint"))
    registered = None
    if engine is not None:
        registered = engine.draft_classes(eagle3=True)
        if algo != "EAGLE3" and registered is not None:
            registered.update(engine.draft_classes(eagle3=False) or {})
    reg_src = f"{engine.root}/srt/models/*eagle{'3' if algo == 'EAGLE3' else ''}*.py EntryClass" if engine else \
        f"modelled sglang {SGLANG_VERSION}"
    if registered is None and algo == "EAGLE3":
        registered = {c: DRAFT_CLASS_FILES[c] for c in MODELLED_EAGLE3_DRAFT_CLASSES}
    eagle_layout = bool(draft.tensors) and any(n.startswith(("midlayer.", "fc.", "model.fc.")) for n in draft.tensors)
    known = True
    if registered is not None and (algo == "EAGLE3" or eagle_layout) and arch not in registered:
        known = False
        want = sorted(registered) or ["LlamaForCausalLMEagle3"]
        best = ("LlamaForCausalLMEagle" if algo == "EAGLE" and draft.is_eagle1_like and "LlamaForCausalLMEagle" in registered
                else "LlamaForCausalLMEagle3" if "LlamaForCausalLMEagle3" in registered else want[0])
        out.append(Finding("unknown-draft-architecture", "error",
                           f"the draft declares architectures {draft.architectures}, which is not an EAGLE"
                           f"{'-3' if algo == 'EAGLE3' else ''} draft class of this engine ({', '.join(want)}); the engine "
                           f"builds {arch or 'nothing'} and its weights do not fit",
                           {"draft_architectures": ev(draft.architectures, draft.sources.get("architectures")),
                            "registered_draft_classes": ev(want, reg_src),
                            "eagle_tensors": [n for n in sorted(draft.tensors or {}) if n.startswith(("midlayer.", "fc."))][:4]},
                           f"set \"architectures\": [\"{best}\"] in {draft.config_path}"))
    if target is not None:
        out += config_rules(launch, draft, target)
        capture = None
        if algo == "EAGLE3" and target.num_hidden_layers:
            tarch = target.architectures[0] if target.architectures else ""
            ids = draft.aux_layer_ids if _ids_ok(draft.aux_layer_ids) else None
            if engine is not None:
                try:
                    capture = engine.capture_rule(tarch, target.num_hidden_layers, ids)
                except Exception as exc:  # noqa: BLE001 - engine code evaluated; reported, modelled rule used
                    notes.append(f"could not evaluate {tarch}.set_eagle3_layers_to_capture from the box's source "
                                 f"({type(exc).__name__}: {exc}); the 0.5.23 rule is used")
                    capture = modelled_capture(tarch, target.num_hidden_layers, ids)
                if capture is None:
                    cls = engine.find_class(tarch)
                    if cls is not None:
                        out.append(Finding("target-no-aux-capture", "error",
                                           f"the target class {tarch} ({engine.root}/{cls[0]}:{cls[1].lineno}) has no "
                                           "set_eagle3_layers_to_capture: the engine raises when EAGLE3 sets up capture",
                                           {"target_architecture": ev(tarch, target.sources.get("architectures")),
                                            "class": ev(tarch, f"{engine.root}/{cls[0]}:{cls[1].lineno}")},
                                           "use an engine version whose target class supports EAGLE-3, or EAGLE"))
                    else:
                        notes.append(f"target class {tarch} not found under {engine.root}/srt/models")
            else:
                capture = modelled_capture(tarch, target.num_hidden_layers, ids)
        out += aux_rules(launch, draft, target, capture)
    if engine is not None and arch in DRAFT_CLASS_FILES:
        src = engine.read(DRAFT_CLASS_FILES[arch])
        if src is not None:
            cfg, ec = draft.config, draft.eagle_config or {}
            for key in NORM_FLAGS:
                val = ec.get(key, cfg.get(key))
                if val and not re.search(rf"[\"']{key}[\"']", src):
                    where = f"{draft.config_path}: {'eagle_config.' if key in ec else ''}{key}"
                    out.append(Finding("norm-flags-unsupported", "warning",
                                       f"the draft sets {key}={val!r} but the engine's {DRAFT_CLASS_FILES[arch]} never "
                                       f"reads {key!r}: the norm the draft was trained with is not applied",
                                       {key: ev(val, where), "engine_file": ev(f"{engine.root}/{DRAFT_CLASS_FILES[arch]}",
                                                                                  f"no occurrence of {key!r}")},
                                       "upgrade the engine to a version that reads it, or retrain without it"))
    if known and arch == "LlamaForCausalLMEagle3" and draft.tensors is not None:
        weights, _checked = check_draft_weights(box, draft, target, timeout=timeout)
        out += weights
    return out
