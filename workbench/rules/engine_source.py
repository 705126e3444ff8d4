"""Fault family: what the engine source on the box does with the draft (read, never imported).

Rules: ``swallowed-config-error`` (info: a broad ``except`` on the EAGLE-3 path that neither logs nor
re-raises, and each silent fallback on it, with file:line — the facts come from
:func:`workbench.engine.codepath.swallowed_on_path`), ``norm-flags-unsupported`` (warning: the draft
sets a norm flag the engine's draft class never reads). On SGLang 0.5.23:
``spec_aux_hidden_state.py:195`` (the ``except Exception:`` around the ``eagle_config`` read of ``:188``),
``llama_eagle3.py:238`` (the fc width check), ``:363`` and ``:373`` (silent weight drops).
"""

from __future__ import annotations

import re

from workbench.engine.codepath import CodePathMap, code_path_map, swallowed_on_path
from workbench.engine.modelled import DRAFT_CLASS_FILES
from workbench.engine.source import EngineSource
from workbench.rules.facts import Facts
from workbench.rules.finding import Finding, ev
from workbench.rules.fix import Fix
from workbench.rules.registry import ALL_ENGINES, Family, HypothesisSpec
from workbench.rules import vllm_checks
from workbench.rules.vllm_source import vllm_source

__all__ = ["FAMILY", "scan_swallowed", "NORM_FLAGS", "swallowed_config_error", "norm_flags_unsupported"]

def _vllm_findings(said: list) -> list[Finding]:
    """This family's findings on a vLLM launch, from what :mod:`workbench.rules.vllm_checks` found
    (:class:`~workbench.rules.vllm_checks.Said`): the findings are made here, in the rules' own module."""
    return [Finding(s.rule, s.severity, s.message, s.evidence, s.fix, prevents_start=s.prevents_start) for s in said]


FAMILY = Family("engine-source", "What the engine source on the box does with the draft", __doc__, module=__name__,
                hypotheses=(HypothesisSpec(
                    "norm-flags", "The draft was trained with a norm the engine's draft class never applies.",
                    rules=("norm-flags-unsupported",), order=32),))

#: Draft config keys for norms some trainers add (EAGLE-3 variants); an engine whose draft class
#: never reads one does not apply that norm.
NORM_FLAGS = ("norm_before_fc", "fc_norm", "use_aux_norm", "norm_output")


def scan_swallowed(src: EngineSource, cmap: CodePathMap) -> list[Finding]:
    """``swallowed-config-error`` findings (severity ``info``) on the path of ``cmap``, one per
    place :func:`workbench.engine.codepath.swallowed_on_path` reports: each broad ``except`` that
    neither logs nor re-raises, and each silent fallback. Evidence: ``source`` = ``file:line`` (for
    a handler, the ``except`` line), ``guarded`` = ``file:line`` of the guarded statement (the
    ``eagle_config`` read) and ``guarded_code``, the handler, the enclosing function and what the
    handler does instead (or the fallback's code)."""
    findings: list[Finding] = []
    for s in swallowed_on_path(src, cmap):
        where = f"{s.path}:{s.line}"
        if s.kind == "handler":
            guarded = f"{s.path}:{s.guarded_line}"
            findings.append(Finding(
                "swallowed-config-error", "info",
                f"{s.rel}:{s.line} ({s.function}): a broad `{s.handler_kind}:` around {s.about} (line "
                f"{s.guarded_line}: `{s.guarded}`) neither logs nor re-raises; on any error it silently does "
                f"`{s.fallback}`",
                {"source": {"value": where, "source": where}, "guarded": {"value": guarded, "source": guarded},
                 "guarded_code": s.guarded, "try_line": s.try_line, "handler": s.handler,
                 "function": s.function, "fallback": s.fallback}, None))
        else:
            findings.append(Finding(
                "swallowed-config-error", "info", f"{s.rel}:{s.line} ({s.function}): silent fallback: {s.what}",
                {"source": {"value": where, "source": where}, "code": s.code, "function": s.function,
                 "detail": s.detail}, None))
    return findings


@FAMILY.rule("swallowed-config-error", severities=("info",), engines=ALL_ENGINES,
             summary="the engine source on the box reads the draft's eagle_config inside a broad except (and, from "
                     "`workbench source scan`, every silent fallback on the EAGLE-3 path)",
             fix="shows file:line")
def swallowed_config_error(facts: Facts) -> list[Finding]:
    """The doctor scans the function that reads the draft's ``eagle_config`` (the code-path map's
    ``eagle-config-read`` entry, found in the box's own source) for a broad ``except`` that neither
    logs nor re-raises: on SGLang 0.5.23 ``spec_aux_hidden_state.py:195`` (around the read at
    ``:188``), where any error in the ids silently becomes "the default layers". Only for EAGLE3 launches with the engine source
    located. ``workbench source scan`` runs the same scan over the whole path (:func:`scan_swallowed`).

    On a vLLM launch the same scan runs on the reader of the model runner this launch runs (vLLM's
    code-path map, :func:`workbench.engine.codepath_vllm.vllm_code_path_map`: V1
    ``gpu_model_runner.py`` ``_get_eagle3_aux_layers_from_config``, V2 ``eagle3_utils.py``) and reports
    a broad ``except`` there; vLLM 0.32.0 has none (its readers fall back to the target's defaults
    when they find no ids, without an exception to swallow: ``aux-config-unread`` says when that
    happens). Needs the box's vLLM source (no built-in fallback: a finding that names a line must
    have read it)."""
    if facts.algorithm != "EAGLE3":
        return []
    if facts.engine_name == "vllm":
        src = vllm_source(facts)
        if src is None:
            return []
        from workbench.engine.codepath import PathEntry
        from workbench.engine.codepath_vllm import _aux_reader

        runner = facts.vllm_runner or "v1"
        reader = _aux_reader(src, runner)  # only the reader's file is read (not the whole code-path map's)
        if reader is None:
            return []
        rel, fn = reader
        entry = PathEntry(f"eagle-config-read{'.v2' if runner == 'v2' else ''}", "the runner's aux-id reader", True,
                          src.path(rel), fn.body[0].lineno, function=fn.name)
        cmap = CodePathMap(src.root, src.version, facts.target_architecture or "", facts.draft_architecture or "",
                           [entry], engine="vllm", runner=runner)
        return scan_swallowed(src, cmap)
    if facts.engine is None:
        return []
    return scan_swallowed(facts.engine, code_path_map(facts.engine, keys=["eagle-config-read"]))


@FAMILY.rule("norm-flags-unsupported", severities=("warning",), engines=ALL_ENGINES,
             summary="the draft sets norm_before_fc, fc_norm, use_aux_norm or norm_output, and the engine source on "
                     "the box never reads that key",
             fix="upgrade the engine, or retrain without it")
def norm_flags_unsupported(facts: Facts) -> list[Finding]:
    """A norm flag (``eagle_config.<key>`` or top level) that the engine's draft class file never
    mentions (no ``"<key>"`` string in the box's ``srt/models/llama_eagle3.py`` or the class's
    file) is ignored: the draft runs without the norm it was trained with (sglang#32226, GPT-OSS
    drafts with ``norm_before_fc``). Needs the engine source on the box.

    vLLM 0.32.0 (:func:`workbench.rules.vllm_checks.norm_flags_unsupported`): ``llama_eagle3.py`` reads
    ``norm_before_fc`` (also in ``eagle_config``), ``fc_norm``, ``norm_before_residual`` and
    ``norm_output``; each switch is looked for in the box's own draft class file (vLLM 0.32.0's as
    built in when the source is not on the box, said in the evidence); one it never names is ignored."""
    if facts.engine_name == "vllm":
        return _vllm_findings(vllm_checks.norm_flags_unsupported(facts))
    draft, engine, arch = facts.draft, facts.engine, facts.draft_architecture
    if draft is None or engine is None or arch not in DRAFT_CLASS_FILES:
        return []
    src = engine.read(DRAFT_CLASS_FILES[arch])
    if src is None:
        return []
    out = []
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
    return out


@FAMILY.fixes_with
def engine_source_fixes(facts: Facts, findings: list[Finding], given: dict) -> list[Fix]:
    """Nothing to repair in the draft: the engine release decides which norms it applies."""
    return [Fix("none", (f.rule,), "the engine does not apply a norm the draft was trained with",
                missing=f.fix or "an engine release that reads the flag")
            for f in findings if f.rule == "norm-flags-unsupported"]
