"""The box's timeline as a plotly figure: what served the port during a run — the server as found,
nothing (down), the probe launch's server, the fixed server, a trial, the original restored — one
horizontal bar per segment on a time axis in seconds since the run began, the seconds it served
nothing summed in the title (the verdict's ``downtime_s``).

Takes plain segments (``workbench.diagnosis.loads.timeline``: ``{"state", "from", "to",
"label"}``, epoch seconds); no other workbench module is imported. Bad input raises
:class:`FigureInputError` naming the segment.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go

from workbench.errors import FigureInputError

__all__ = ["STATE_COLORS", "box_timeline"]

#: The colour of each state (the diagnosis's ``loads.STATES``); an unknown state is drawn grey.
STATE_COLORS = {
    "serving as found": "#d62728",     # red: the broken deployment serves
    "down": "#000000",                 # black: nothing serves the port
    "serving with probes": "#ff7f0e",  # orange: the probe launch
    "serving fixed": "#2ca02c",        # green: the fix
    "serving a trial": "#9467bd",      # purple: a candidate or a ladder rung
    "restored": "#1f77b4",             # blue: the original back
    "no server": "#dddddd",            # light grey: the box had none
}


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FigureInputError(f"{where} must be a finite number of seconds, got {value!r}")
    return float(value)


def box_timeline(segments: Sequence[Mapping[str, Any]], *, loads: int | None = None,
                 port: int | None = None) -> go.Figure:
    """A horizontal timeline of the box's port: one bar per segment (``segments`` in order, each
    ``{"state": str, "from": epoch s, "to": epoch s, "label": launch label or None}``), x in
    seconds since the first segment began, coloured by state (:data:`STATE_COLORS`), each bar's
    length in its hover text; the title gives the seconds ``down`` summed and ``loads`` (server
    start-ups) when given. ``port``: named on the y axis.

    Raises:
        FigureInputError: no segments, a segment without a state, a time that is no finite
            number, or a segment that ends before it begins.
    """
    if not segments:
        raise FigureInputError("segments must hold at least one segment of the timeline")
    t0 = None
    rows = []
    for i, seg in enumerate(segments):
        state = seg.get("state")
        if not isinstance(state, str) or not state:
            raise FigureInputError(f"segments[{i}].state must be a state name, got {state!r}")
        start, end = _seconds(seg.get("from"), f"segments[{i}].from"), _seconds(seg.get("to"), f"segments[{i}].to")
        if end < start:
            raise FigureInputError(f"segments[{i}] ends ({end}) before it begins ({start})")
        t0 = start if t0 is None else t0
        rows.append((state, start - t0, end - start, seg.get("label")))
    down = sum(length for state, _s, length, _l in rows if state == "down")
    y = f"port {port}" if port is not None else "the box's port"
    fig = go.Figure()
    shown: set[str] = set()
    for state, start, length, label in rows:
        fig.add_trace(go.Bar(
            x=[length], base=[start], y=[y], orientation="h", name=state, legendgroup=state,
            showlegend=state not in shown, marker_color=STATE_COLORS.get(state, "#7f7f7f"),
            text=[state if length >= 0.08 * max(r[1] + r[2] for r in rows) else ""], textposition="inside",
            insidetextanchor="middle",
            hovertemplate=(f"{state}" + (f" ({label})" if label else "") +
                           ": %{base:.1f} s → %{x:.1f} s long<extra></extra>")))
        shown.add(state)
    title = f"The box during the run<br><sup>down {down:.1f} s" + (f"; {loads} server start-up(s)" if loads is not None
                                                                  else "") + "</sup>"
    fig.update_layout(title=title, template="plotly_white", barmode="overlay", xaxis_title="seconds since the run began",
                      yaxis_title="", height=260, legend={"orientation": "h", "y": -0.45},
                      margin={"l": 90, "r": 20, "t": 70, "b": 40})
    return fig
