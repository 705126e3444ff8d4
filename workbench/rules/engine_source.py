"""Fault family: what the engine source on the box does with the draft (read, never imported).

Rules: ``swallowed-config-error`` (info: a broad ``except`` on the EAGLE-3 path that neither logs nor
re-raises, and each silent fallback on it, with file:line — the facts come from
:func:`workbench.engine.codepath.swallowed_on_path`), ``norm-flags-unsupported`` (warning: the draft
sets a norm flag the engine's draft class never reads). On SGLang 0.5.23:
``spec_aux_hidden_state.py:188`` (the ``eagle_config`` read under ``except Exception:``),
``llama_eagle3.py:238`` (the fc width check), ``:363`` and ``:373`` (silent weight drops).
"""

from __future__ import annotations

from workbench.engine.codepath import CodePathMap, swallowed_on_path
from workbench.engine.source import EngineSource
from workbench.rules.finding import Finding

__all__ = ["scan_swallowed", "NORM_FLAGS"]


NORM_FLAGS = ("norm_before_fc", "fc_norm", "use_aux_norm", "norm_output")


def scan_swallowed(src: EngineSource, cmap: CodePathMap) -> list[Finding]:
    """``swallowed-config-error`` findings (severity ``info``) on the path of ``cmap``, one per
    place :func:`workbench.engine.codepath.swallowed_on_path` reports: each broad ``except`` that
    neither logs nor re-raises, and each silent fallback. Evidence: ``source`` = ``file:line``,
    the handler, the enclosing function and what the handler does instead (or the fallback's code)."""
    findings: list[Finding] = []
    for s in swallowed_on_path(src, cmap):
        where = f"{s.path}:{s.line}"
        if s.kind == "handler":
            findings.append(Finding(
                "swallowed-config-error", "info",
                f"{s.rel}:{s.line} ({s.function}): a broad `{s.handler_kind}:` around {s.about} neither logs nor "
                f"re-raises; on any error it silently does `{s.fallback}`",
                {"source": {"value": where, "source": where}, "try_line": s.try_line, "handler": s.handler,
                 "function": s.function, "fallback": s.fallback}, None))
        else:
            findings.append(Finding(
                "swallowed-config-error", "info", f"{s.rel}:{s.line} ({s.function}): silent fallback: {s.what}",
                {"source": {"value": where, "source": where}, "code": s.code, "function": s.function,
                 "detail": s.detail}, None))
    return findings
