"""The per-position acceptance figure: P(the k-th draft token of a verify step is accepted), k = 1 …
draft tokens, one line per run, on either engine (SGLang: from ``spec_correct_drafts_histogram`` /
the acceptance histogram, ``workbench.measure.sources.position_acceptance``; vLLM: its per-position
counters ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="k"}`` or its log's
``Per-position acceptance rate``). Plain numbers in, a plotly figure out, as
:mod:`workbench.report.figures`; bad input raises :class:`FigureInputError`.

Chain drafting accepts a prefix: position k is accepted only if k − 1 was, so each curve falls; the
accept length is 1 + the sum of the curve, which the legend says. A draft fed the wrong features
(a cross-engine aux-id shift, the wrong algorithm flag) shows as a low first position.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go

from workbench.errors import FigureInputError

__all__ = ["per_position_acceptance"]

_PALETTE = ["#d62728", "#2ca02c", "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b"]


def per_position_acceptance(series: Mapping[str, Sequence[Any]], *, title: str | None = None) -> go.Figure:
    """Per-position acceptance of each run in ``series`` (``{label: [p1, p2, ...]}``, each p the
    fraction 0..1 of verify steps whose k-th draft token was accepted).

    Raises:
        FigureInputError: ``series`` is not a non-empty mapping of labels to non-empty lists of
            numbers in [0, 1].
    """
    if not isinstance(series, Mapping) or not series:
        raise FigureInputError(f"series must be a non-empty {{label: [p1, p2, ...]}}, got {series!r}")
    fig = go.Figure()
    for i, (label, values) in enumerate(series.items()):
        if not isinstance(label, str):
            raise FigureInputError(f"series labels must be strings, got {label!r}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise FigureInputError(f"series[{label!r}] must be a non-empty list of fractions, got {values!r}")
        ys = []
        for k, v in enumerate(values, 1):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
                raise FigureInputError(f"series[{label!r}][{k - 1}] must be a fraction in [0, 1], got {v!r}")
            ys.append(float(v))
        fig.add_trace(go.Scatter(
            x=list(range(1, len(ys) + 1)), y=ys, mode="lines+markers+text", name=f"{label} (accept length "
            f"{1 + sum(ys):.2f})", text=[f"{y:.2f}" for y in ys], textposition="top center",
            line_color=_PALETTE[i % len(_PALETTE)],
            hovertemplate="position %{x}: %{y:.3f} of verify steps accepted it<extra>" + label + "</extra>"))
    fig.update_layout(title=title or "Per-position acceptance (P(k-th draft token accepted))", template="plotly_white",
                      xaxis_title="draft position k", yaxis_title="fraction of verify steps", yaxis_range=[0, 1.05],
                      xaxis_dtick=1)
    return fig
