"""Building SGLang's code-path map: :func:`code_path_map` (the files each entry is looked for in —
the target class and the classes its forward runs through, the draft's file and the base classes
its ``load_weights`` hands tensors to, the EAGLE worker the server runs —, each landmark of
:data:`.landmarks.LANDMARKS` searched there and then by ``grep``, statements in workbench probe
blocks skipped, and the target's offset rule evaluated) and :func:`map_for_launch` (the same for a
launch command, the classes and aux ids read from the checkpoints' configs on the box).

Imports: :mod:`.ast_tools`, :mod:`.worker`, :mod:`.model`, :mod:`.landmarks`,
:mod:`remote.probes`, :mod:`workbench.checkpoint`, :mod:`workbench.engine.launch`,
:mod:`workbench.engine.modelled` and :mod:`workbench.engine.source`.
"""

from __future__ import annotations

import ast
from typing import Iterable, Mapping, Optional, Sequence

from remote.probes import _probe_block_lines
from workbench.checkpoint import CheckpointError, read_draft_facts, read_target_facts
from workbench.checkpoint.paths import box_env, resolve_model_path
from workbench.engine.codepath.ast_tools import _calls_attr, _first_line, _function_of, _in_order, _probe_note, _seg
from workbench.engine.codepath.landmarks import LANDMARKS, Landmark, _Ctx
from workbench.engine.codepath.model import CodePathMap, PathEntry
from workbench.engine.codepath.worker import WorkerChoice, eagle_worker
from workbench.engine.launch import LaunchCommand
from workbench.engine.modelled import DRAFT_CLASS_FILES
from workbench.engine.source import EngineSource

_TARGET_RULE_WHAT = ("the target turns the draft's aux layer ids into the layers it captures (its offset "
                     "rule: the capture is taken at a layer's input, so the output of layer id is layer id+1's input)")


def _find(ctx: _Ctx, lm: Landmark) -> PathEntry:
    tried: list[str] = []
    candidates = [f for f in dict.fromkeys(lm.files(ctx)) if f]
    for rel in candidates:
        tried.append(rel)
        entry = _find_in(ctx, lm, rel)
        if entry is not None:
            return entry
    if lm.worker and ctx.worker is not None:
        # the worker's own modules (what it imports from srt/speculative), never the other worker
        for rel in _speculative_imports(ctx.src, ctx.worker.file):
            if rel in candidates or rel == ctx.worker.other:
                continue
            tried.append(rel)
            entry = _find_in(ctx, lm, rel)
            if entry is not None:
                return entry
    elif lm.grep_fallback:
        hits = ctx.src.grep([lm.token])[lm.token]
        for rel in sorted({r for r, _ in hits if r not in candidates and lm.where(r)}):
            tried.append(rel)
            entry = _find_in(ctx, lm, rel)
            if entry is not None:
                return entry
        if not hits:
            tried.append(f"no file under srt/ holds {lm.token!r}")
    looked = ", ".join(tried) or "no candidate file"
    if lm.worker and ctx.worker is not None:
        looked += f" (the worker this server runs: {ctx.worker.cls})"
    return PathEntry(lm.key, lm.what, False, looked_in=looked, silent=lm.silent)


def _speculative_imports(src: EngineSource, rel: str) -> list[str]:
    """The ``srt/speculative`` modules ``rel`` imports (``from sglang.srt.speculative.X import``),
    in file order, those that exist."""
    tree = src.tree(rel)
    out: list[str] = []
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang.srt.speculative."):
            cand = node.module[len("sglang."):].replace(".", "/") + ".py"
            if cand != rel and cand not in out and src.read(cand) is not None:
                out.append(cand)
    return out


def _find_in(ctx: _Ctx, lm: Landmark, rel: str) -> Optional[PathEntry]:
    tree = ctx.src.tree(rel)
    if tree is None:
        return None
    text = ctx.src.read(rel) or ""
    hits = [(s, p) for s, p in _in_order(tree) if lm.match(s, p, text)]
    if not hits:
        return None
    lines = text.splitlines()
    in_probe = _probe_block_lines(lines)
    hits = [(s, p) for s, p in hits if _first_line(s) - 1 not in in_probe]  # the workbench's own probes
    if not hits:
        return None
    stmt, parents = hits[0]

    def named(s):
        return lm.line_of(s, text) if lm.line_of else _first_line(s)

    line, anchor = named(stmt), _first_line(stmt)
    detail = lm.detail(stmt, parents, text, ctx) if lm.detail else None
    if lm.worker and ctx.worker is not None:
        detail = (detail + "; " if detail else "") + f"in {ctx.worker.cls} ({ctx.worker.why})"
    if lm.key.startswith("draft-") and rel in ctx.inherited:
        detail = (detail + "; " if detail else "") + ctx.inherited[rel]
    also = tuple(named(s) for s, _ in hits[1:])
    anchors = tuple(_first_line(s) for s, _ in hits)
    return PathEntry(lm.key, lm.what, True, ctx.src.path(rel), line, lines[line - 1] if line <= len(lines) else None,
                     _function_of(parents + ((stmt,) if isinstance(stmt, ast.FunctionDef) else ())), detail,
                     also, rel, lm.silent, _probe_note(lines, anchor),
                     tuple(lines[n - 1] if n <= len(lines) else "" for n in also),
                     anchor if anchor != line else None, anchors[1:] if lm.line_of else (),
                     tuple(lines[n - 1] if n <= len(lines) else "" for n in anchors) if lm.line_of else ())


def _target_offset_rule(ctx: _Ctx) -> PathEntry:
    key = "target-offset-rule"
    hit = ctx.src.find_method(ctx.target_arch, "set_eagle3_layers_to_capture")
    if hit is None:
        where = ctx.target_files[0] if ctx.target_files else f"no class {ctx.target_arch} under srt/models"
        return PathEntry(key, _TARGET_RULE_WHAT, False,
                         looked_in=f"{ctx.target_arch} and its bases ({where}): no set_eagle3_layers_to_capture; "
                                   "under EAGLE3 the runner raises at startup")
    rel, fn, text, owner = hit
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "layers_to_capture" for t in n.targets)]
    rules = "; ".join(f"`{_seg(text, a)}`" for a in assigns)
    detail = rules or None
    if ctx.num_layers:
        rule = ctx.src.capture_rule(ctx.target_arch, ctx.num_layers, ctx.aux_ids)
        if rule is not None and rule.error:
            detail = (detail + "; " if detail else "") + (
                f"for draft ids {ctx.aux_ids} it raises {rule.error} ({rule.source}): the engine fails at start-up")
        elif rule is not None and rule.captured is not None:
            ids = ctx.aux_ids if ctx.aux_ids is not None else "none (defaults)"
            detail = (detail + "; " if detail else "") + (
                f"for draft ids {ids} on {ctx.num_layers} layers it captures {rule.captured} ({rule.source})")
            unreachable = [i for i in rule.captured if i > rule.reachable_max or i < 0] + list(rule.unmatchable)
            if unreachable:
                detail += (f"; layer(s) {unreachable} are never reached (the capture loop covers 0.."
                           f"{rule.reachable_max}): fewer aux states than the draft's fc expects")
    elif ctx.aux_ids is not None:
        detail = (detail + "; " if detail else "") + "give the target's layer count to evaluate the rule for the draft's ids"
    lines = text.splitlines()
    return PathEntry(key, _TARGET_RULE_WHAT, True, ctx.src.path(rel), fn.lineno, lines[fn.lineno - 1],
                     f"{owner}.set_eagle3_layers_to_capture", detail, (), rel, note=_probe_note(lines, fn.lineno))


def _class_name(node: ast.expr) -> Optional[str]:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name if name and name[:1].isupper() and name not in ("Module", "object") else None


def _forward_classes(src: EngineSource, arch: str, limit: int = 12) -> list[tuple[str, str]]:
    """``(class, file)`` of the target class and every class its forward runs through, breadth
    first: its bases, and the classes of the attributes its ``forward`` reads that ``__init__``
    assigns as ``self.X = Cls(...)`` (Kimi-K2.5's ``language_model = DeepseekV3ForCausalLM(...)``,
    a causal LM's ``model = LlamaModel(...)``). Classes are looked up under ``srt/models``; at most
    ``limit`` classes."""
    out: list[tuple[str, str]] = []
    queue, seen = [arch], set()
    while queue and len(seen) < limit:
        cls = queue.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        found = src.find_class(cls)
        if found is None:
            continue
        rel, node, _ = found
        out.append((cls, rel))
        queue += [b for b in (_class_name(b) for b in node.bases) if b]
        methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
        fwd, init = methods.get("forward"), methods.get("__init__")
        if fwd is None or init is None:
            continue
        used = {n.attr for n in ast.walk(fwd) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "self"}
        for n in ast.walk(init):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and any(
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                    and t.attr in used for t in n.targets):
                name = _class_name(n.value.func)
                if name:
                    queue.append(name)
    return out


def _draft_file(src: EngineSource, draft_arch: str) -> Optional[str]:
    """The file that defines the draft class: the known file (:data:`DRAFT_CLASS_FILES`) when
    the box has it, else the file under ``srt/models`` that defines the class; ``None`` when
    none does."""
    if draft_arch in DRAFT_CLASS_FILES and src.read(DRAFT_CLASS_FILES[draft_arch]) is not None:
        return DRAFT_CLASS_FILES[draft_arch]
    hit = src.find_class(draft_arch) if draft_arch else None
    return hit[0] if hit is not None else None


def _load_weights_bases(src: EngineSource, draft_arch: str, depth: int = 3) -> list[tuple[str, str]]:
    """``(file, how)`` of the base classes whose ``load_weights`` the draft's ``load_weights``
    hands its tensors to through ``super().load_weights(...)`` (SGLang 0.4.6 … 0.4.9
    ``llama_eagle3.py``: ``super().load_weights([(f"model.{name}", loaded_weight)])`` into
    ``LlamaForCausalLM.load_weights`` in ``llama.py``), followed ``depth`` levels."""
    out: list[tuple[str, str]] = []
    cls = draft_arch
    for _ in range(depth):
        found = src.find_class(cls)
        if found is None:
            break
        rel, node, _ = found
        fn = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "load_weights"), None)
        if fn is None or not any(_calls_attr(n, "load_weights") and isinstance(n.func.value, ast.Call)
                                 and isinstance(n.func.value.func, ast.Name) and n.func.value.func.id == "super"
                                 for n in ast.walk(fn)):
            break
        base = next((b for b in (_class_name(b) for b in node.bases) if b), None)
        hit = src.find_method(base, "load_weights") if base else None
        if hit is None:
            break
        out.append((hit[0], f"reached through super().load_weights from {cls}.load_weights ({rel}:{fn.lineno})"))
        cls = hit[3]
    return out


def code_path_map(src: EngineSource, *, target_arch: str = "LlamaForCausalLM",
                  draft_arch: str = "LlamaForCausalLMEagle3", aux_ids: Optional[Sequence[int]] = None,
                  num_layers: Optional[int] = None, keys: Optional[Iterable[str]] = None,
                  env: Optional[Mapping[str, str]] = None,
                  launch_args: Optional[Sequence[str]] = None,
                  worker: Optional[WorkerChoice] = None) -> CodePathMap:
    """The EAGLE-3 code-path map of the engine ``src`` (:class:`workbench.engine.EngineSource`).

    ``target_arch`` / ``draft_arch``: the classes whose files hold the model-specific entries
    (SGLang's ``architectures[0]`` of each config; defaults: Llama target, SGLang's EAGLE-3 draft).
    ``aux_ids`` / ``num_layers``: the draft's aux layer ids and the target's layer count, to
    evaluate the target's offset rule for them (optional). ``keys``: only these entries (the
    doctor asks for one); default all. ``env`` / ``launch_args``: the server's environment and
    its launch command's argument tokens, which decide the EAGLE worker the draft-worker entries
    are read in (:func:`eagle_worker`; default: the release's own default); ``worker``: that
    choice made already (another map's :attr:`CodePathMap.worker`), used as it is. Files are read
    through the box, once each; box errors propagate. Entries not in this version come back with
    ``found=False`` and no line.

    The target's capture test is looked for in the classes its forward runs through
    (:func:`_forward_classes`); the draft's ``load_weights`` entries also in the base class's
    ``load_weights`` it hands tensors to (:func:`_load_weights_bases`).
    """
    want = set(keys) if keys is not None else None
    target_files: list[str] = []
    needs_target = want is None or bool(want & {"target-offset-rule", "target-capture-point"})
    needs_draft = want is None or any(k.startswith("draft-") for k in want)
    arch: str | None = target_arch if needs_target else None
    for _ in range(3):  # the target, then the classes it delegates the capture to (Kimi-K2.5 → DeepseekV3)
        found = src.find_class(arch) if arch else None
        if found is None:
            break
        target_files.append(found[0])
        owner = src.find_method(arch, "set_eagle3_layers_to_capture")
        if owner is not None:
            target_files.append(owner[0])
        arch = src.capture_delegate(arch)
    forward_files: list[str] = []
    if want is None or "target-capture-point" in want:
        forward_files = [rel for _, rel in _forward_classes(src, target_arch)]
    draft_files: list[str] = []
    draft_load: list[str] = []
    inherited: dict[str, str] = {}
    if needs_draft:
        own = _draft_file(src, draft_arch)
        if own is not None:
            draft_files.append(own)
            draft_load.append(own)
            for rel, how in _load_weights_bases(src, draft_arch):
                if rel not in draft_load:
                    draft_load.append(rel)
                    inherited[rel] = how
    needs_worker = want is None or bool(want & {lm.key for lm in LANDMARKS if lm.worker})
    if worker is None and needs_worker:
        worker = eagle_worker(src, env=env, launch_args=launch_args)
    ctx = _Ctx(src, target_arch, draft_arch, list(aux_ids) if aux_ids is not None else None, num_layers,
               tuple(dict.fromkeys(target_files)), tuple(draft_files), tuple(dict.fromkeys(forward_files)),
               tuple(draft_load), worker, inherited)
    entries: list[PathEntry] = []
    for lm in LANDMARKS:
        if lm.key == "target-capture-point" and (want is None or "target-offset-rule" in want):
            entries.append(_target_offset_rule(ctx))
        if want is not None and lm.key not in want:
            continue
        entry = _find(ctx, lm)
        if not entry.found and not lm.grep_fallback:
            missing = "target" if lm.key == "target-capture-point" else "draft"
            arch = target_arch if missing == "target" else draft_arch
            files = ctx.forward_files if missing == "target" else ctx.draft_files
            if not files:
                entry = PathEntry(lm.key, lm.what, False, looked_in=f"no {missing} class {arch} under srt/models",
                                  silent=lm.silent)
        entries.append(entry)
    return CodePathMap(src.root, src.version, target_arch, draft_arch, entries, worker)


def map_for_launch(box, src: EngineSource, launch, *, cwd: Optional[str] = None, timeout: float = 30,
                   notes: Optional[list[str]] = None, environ: Optional[Mapping[str, str]] = None) -> CodePathMap:
    """:func:`code_path_map` for a deployment: the target architecture and layer count from the
    ``--model-path`` config, the draft architecture and aux layer ids from the
    ``--speculative-draft-model-path`` config (read on the box; Hugging Face repo ids through the
    box's cache, relative paths against ``cwd``). A config that cannot be read leaves the default
    (Llama target, SGLang's EAGLE-3 draft) and appends why to ``notes``. ``launch``: a
    :class:`workbench.engine.launch.LaunchCommand` or its text. The EAGLE worker
    (:func:`eagle_worker`) follows ``environ`` (the running server's own environment,
    :func:`workbench.engine.locate.read_environ`; ``None``: none known) with the command's
    ``VAR=value`` prefix over it, and the command's flags."""
    notes = notes if notes is not None else []
    launch = LaunchCommand.parse(launch) if isinstance(launch, str) else launch
    env = {**box_env(box, timeout), **dict(launch.env)}
    kw: dict = {}
    for flag, role in (("--model-path", "target"), ("--speculative-draft-model-path", "draft")):
        value = launch.get(flag)
        if not isinstance(value, str) or not value:
            notes.append(f"no {flag} in the launch command: default {role} class used")
            continue
        path, how = resolve_model_path(box, value, env=env, cwd=cwd, timeout=timeout)
        if path is None:
            notes.append(f"{role} config not read ({how}): default {role} class used")
            continue
        try:
            if role == "target":
                facts = read_target_facts(box, path, timeout=timeout)
                if facts.architectures:
                    kw["target_arch"] = facts.architectures[0]
                kw["num_layers"] = facts.num_hidden_layers
            else:
                draft = read_draft_facts(box, path, timeout=timeout)
                if draft.architectures:
                    kw["draft_arch"] = draft.architectures[0]
                if isinstance(draft.aux_layer_ids, list):
                    kw["aux_ids"] = draft.aux_layer_ids
        except CheckpointError as exc:
            notes.append(f"{role} config not read ({exc}): default {role} class used")
    server_env = {**dict(environ or {}), **dict(launch.env)}
    return code_path_map(src, env=server_env, launch_args=launch.arg_tokens, **kw)
