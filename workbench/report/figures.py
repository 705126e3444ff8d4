"""Plotly figures for the acceptance diagnosis.

Every function takes plain numbers / lists / dicts (no other workbench module is imported), returns a
``plotly.graph_objects.Figure`` and has no display side effect: the caller shows it (``fig.show()`` in
a notebook, ``display(fig)``) or exports it.

Units used throughout:
- accept length: tokens per verify step, bonus token included (SGLang's
  ``completion_tokens / spec_verify_ct``); 1.0 means every draft token was rejected (no speculation gain);
- hidden width: number of features (hidden units) of a hidden-state row;
- throughput: generated tokens per second;
- time: seconds since the first record of each run (``accept_length_live``: the log's own time).

Bad inputs raise :class:`FigureInputError` (a ``ValueError``) naming the offending argument.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots
from workbench.errors import FigureInputError

__all__ = [
    "FigureInputError",
    "accept_length_before_after",
    "accept_length_per_request",
    "acceptance_timeline",
    "accept_length_live",
    "hidden_width_probe",
    "ACCEPT_LENGTH_AXIS",
]

#: Axis title shared by every accept-length axis.
ACCEPT_LENGTH_AXIS = "accept length (tokens / verify step)"

_BEFORE_COLOR = "#d62728"  # red: the broken run
_AFTER_COLOR = "#2ca02c"  # green: the fixed run
_NEUTRAL_COLOR = "#7f7f7f"
_PALETTE = ["#d62728", "#2ca02c", "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
_TEMPLATE = "plotly_white"


def _number(value: Any, name: str, *, allow_none: bool = False) -> float | None:
    """Return ``value`` as a finite float (numpy scalars accepted) or raise FigureInputError."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or value is None:
        raise FigureInputError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise FigureInputError(f"{name} must be a number, got {value!r}") from exc
    if not math.isfinite(number):
        raise FigureInputError(f"{name} must be finite, got {value!r}")
    return number


def _reference_line(fig: go.Figure, y: float, text: str, color: str, *, legend: bool = False,
                    dash: str = "dash", **kwargs: Any) -> None:
    """A horizontal reference line at ``y``, labelled ``text``: on the plot (top left) or, with
    ``legend``, as a legend entry of its own (a trace with no points, ``legendgroup``
    ``"reference"``), so the label can never overprint a bar, a marker or another line whatever
    the figure's width (issue 15, trial finding 15: at 800 px "1.0 = no speculation" overprinted
    the red bar and the "before" line)."""
    if not legend:
        fig.add_hline(y=y, line_dash=dash, line_color=color, line_width=1.5, annotation_text=text,
                      annotation_position="top left", annotation_font_color=color, **kwargs)
        return
    fig.add_hline(y=y, line_dash=dash, line_color=color, line_width=1.5, **kwargs)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=text, legendgroup="reference",
                             line=dict(color=color, dash=dash, width=1.5), hoverinfo="skip"))


def _data_traces(fig: go.Figure) -> list:
    """The traces that draw data (not the legend-only entries of :func:`_reference_line`)."""
    return [t for t in fig.data if getattr(t, "legendgroup", None) != "reference"]


def accept_length_before_after(
    before: float | None,
    after: float | None,
    *,
    labels: tuple[str, str] = ("before (EAGLE)", "after (EAGLE3)"),
    ideal: float | None = None,
) -> go.Figure:
    """Bar chart of the mean accept length of two runs (the broken launch and the fixed one).

    Args:
        before: accept length of the first run, tokens per verify step (``None``: not measured, the bar
            is drawn empty and marked "not measured").
        after: accept length of the second run, tokens per verify step (``None`` as for ``before``).
        labels: the two bar labels.
        ideal: the ceiling, ``--speculative-num-draft-tokens`` (every draft token accepted); drawn as a
            dashed line when given.

    A dashed line at 1.0 marks "no speculation": the verify step only yields its bonus token. The
    reference lines are labelled in the legend (never on the plot, where they overprinted bars).
    Each bar is the run's overall accept length (Σ completion tokens / Σ verify steps over all its
    requests), which the subtitle says: it differs from the mean of per-request values that
    :func:`accept_length_per_request` shows (longer requests weigh more here).

    Raises:
        FigureInputError: a value is not a finite number, ``labels`` is not two strings, or
            ``ideal`` < 1.
    """
    b = _number(before, "before", allow_none=True)
    a = _number(after, "after", allow_none=True)
    ceiling = _number(ideal, "ideal", allow_none=True)
    if ceiling is not None and ceiling < 1:
        raise FigureInputError(f"ideal must be >= 1 (the number of draft tokens per verify step), got {ideal!r}")
    if len(labels) != 2 or not all(isinstance(label, str) for label in labels):
        raise FigureInputError(f"labels must be two strings, got {labels!r}")

    values = [b, a]
    fig = go.Figure(
        go.Bar(
            x=list(labels),
            y=[0.0 if v is None else v for v in values],
            marker_color=[_BEFORE_COLOR, _AFTER_COLOR],
            text=["not measured" if v is None else f"{v:.2f}" for v in values],
            # inside the bar, so the labels never collide with the reference-line annotations
            textposition=["outside" if v is None else "inside" for v in values],
            insidetextanchor="end",
            textfont_size=14,
            hovertemplate="%{x}: %{y:.3f} tokens / verify step<extra></extra>",
            name="accept length",
            showlegend=False,
        )
    )
    _reference_line(fig, 1.0, "1.0 = no speculation<br>(bonus token only)", _NEUTRAL_COLOR, legend=True)
    top = max([v for v in values if v is not None] + [1.0])
    if ceiling is not None:
        _reference_line(fig, ceiling, f"{ceiling:g} = ceiling<br>(num draft tokens)", "#1f77b4", legend=True)
        top = max(top, ceiling)
    title = "Accept length before and after the fix"
    if b is not None and a is not None and b > 0:
        title += f"<br><sup>{b:.2f} → {a:.2f} tokens / verify step (×{a / b:.2f})</sup>"
    title += "<br><sup>each bar: Σ completion tokens / Σ verify steps over all requests</sup>"
    fig.update_layout(
        title=title,
        template=_TEMPLATE,
        xaxis_title="run",
        yaxis_title=ACCEPT_LENGTH_AXIS,
        yaxis_range=[0, top * 1.2],
        showlegend=True,
        margin=dict(t=110),
    )
    return fig


def _number_list(values: Sequence[Any], name: str) -> list[float]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise FigureInputError(f"{name} must be a list of numbers, got {type(values).__name__}")
    return [_number(v, f"{name}[{i}]") for i, v in enumerate(values)]  # type: ignore[misc]


def accept_length_per_request(
    before: Sequence[float],
    after: Sequence[float],
    *,
    labels: tuple[str, str] = ("before (EAGLE)", "after (EAGLE3)"),
) -> go.Figure:
    """Per-request accept length of both runs, one marker per request, with each run's mean dotted.

    Each point is one request's own accept length (its completion tokens / its verify steps); the
    dotted mean is the mean of these per-request values, named in the legend (``"before (EAGLE): n=8, mean
    2.45"``). It differs from the headline accept length of
    :func:`accept_length_before_after` (Σ tokens / Σ verify steps over all requests, where longer
    requests weigh more): the subtitle says so. Reference lines are labelled in the legend.

    Args:
        before: accept length of each request of the first run, tokens per verify step.
        after: the same for the second run (the lists may differ in length; either may be empty).
        labels: legend names of the two runs.

    Raises:
        FigureInputError: an element is not a finite number or an argument is not a list.
    """
    runs = [_number_list(before, "before"), _number_list(after, "after")]
    fig = go.Figure()
    for values, label, color in zip(runs, labels, (_BEFORE_COLOR, _AFTER_COLOR)):
        mean = math.fsum(values) / len(values) if values else None
        fig.add_trace(
            go.Scatter(
                x=list(range(len(values))),
                y=values,
                mode="lines+markers",
                name=f"{label}: n={len(values)}" + (f", mean {mean:.2f}" if mean is not None else ""),
                line_color=color,
                hovertemplate="request %{x}: %{y:.3f} tokens / verify step<extra>" + label + "</extra>",
            )
        )
        if mean is not None:
            fig.add_hline(y=mean, line_dash="dot", line_color=color, line_width=1.5)  # named in the legend
    _reference_line(fig, 1.0, "1.0 = no speculation", _NEUTRAL_COLOR, legend=True)
    top = max([v for run in runs for v in run] + [1.0])
    fig.update_layout(
        title="Accept length per request<br><sup>dotted: the mean of the requests' own values; the headline "
              "accept length is<br>Σ tokens / Σ verify steps over all requests (longer requests weigh more)</sup>",
        margin=dict(t=110),
        template=_TEMPLATE,
        xaxis_title="request # (order sent)",
        yaxis_title=ACCEPT_LENGTH_AXIS,
        yaxis_range=[0, top * 1.2],
        legend_title_text="run",
    )
    return fig


def _timestamp(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise FigureInputError(f"{where}: timestamp {value!r} is not an ISO 8601 date-time") from exc
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ts = datetime.fromtimestamp(float(value), tz=timezone.utc)
    else:
        raise FigureInputError(f"{where}: timestamp must be a datetime or an ISO string, got {value!r}")
    if ts.tzinfo is not None:
        ts = ts.astimezone(timezone.utc).replace(tzinfo=None)
    return ts


def acceptance_timeline(records_by_label: Mapping[str, Sequence[Mapping[str, Any]]]) -> go.Figure:
    """Accept length over time from parsed decode-log records, one line per run.

    Args:
        records_by_label: run label -> decode-log records in log order. Each record is a mapping with at
            least ``timestamp`` (``datetime``, ISO 8601 string, or epoch seconds) and ``accept_len``
            (tokens per verify step); an optional ``gen_throughput`` (tokens / s) is drawn dotted on a
            secondary y axis when any record of any run has it. Time is in seconds since each run's
            first record, so runs taken at different times line up.

    Raises:
        FigureInputError: ``records_by_label`` is not a mapping, a record is not a mapping, lacks
            ``timestamp`` / ``accept_len``, or holds a value that is not a number / date-time.
    """
    if not isinstance(records_by_label, Mapping):
        raise FigureInputError(
            f"records_by_label must be a dict of label -> records, got {type(records_by_label).__name__}"
        )
    parsed: dict[str, list[tuple[datetime, float, float | None]]] = {}
    for label, records in records_by_label.items():
        rows = []
        for i, record in enumerate(records):
            where = f"records_by_label[{label!r}][{i}]"
            if not isinstance(record, Mapping):
                raise FigureInputError(f"{where} must be a dict, got {type(record).__name__}")
            for key in ("timestamp", "accept_len"):
                if key not in record:
                    raise FigureInputError(f"{where} has no {key!r} key (keys: {sorted(record)})")
            rows.append(
                (
                    _timestamp(record["timestamp"], where),
                    _number(record["accept_len"], f"{where}['accept_len']"),
                    _number(record.get("gen_throughput"), f"{where}['gen_throughput']", allow_none=True),
                )
            )
        rows.sort(key=lambda row: row[0])
        parsed[str(label)] = rows  # type: ignore[assignment]

    has_throughput = any(row[2] is not None for rows in parsed.values() for row in rows)
    fig = make_subplots(specs=[[{"secondary_y": True}]]) if has_throughput else go.Figure()
    for index, (label, rows) in enumerate(parsed.items()):
        color = _PALETTE[index % len(_PALETTE)]
        start = rows[0][0] if rows else None
        elapsed = [(row[0] - start).total_seconds() for row in rows] if start else []
        accept = go.Scatter(
            x=elapsed,
            y=[row[1] for row in rows],
            mode="lines+markers",
            name=f"{label}: accept length",
            legendgroup=label,
            line_color=color,
            customdata=[row[0].isoformat(sep=" ") for row in rows],
            hovertemplate="t=%{x:.1f} s (%{customdata}): %{y:.2f} tokens / verify step<extra>" + label + "</extra>",
        )
        if has_throughput:
            fig.add_trace(accept, secondary_y=False)
            points = [(t, row[2]) for t, row in zip(elapsed, rows) if row[2] is not None]
            if points:
                fig.add_trace(
                    go.Scatter(
                        x=[p[0] for p in points],
                        y=[p[1] for p in points],
                        mode="lines",
                        name=f"{label}: gen throughput",
                        legendgroup=label,
                        line=dict(color=color, dash="dot", width=1.5),
                        opacity=0.7,
                        hovertemplate="t=%{x:.1f} s: %{y:.1f} token/s<extra>" + label + "</extra>",
                    ),
                    secondary_y=True,
                )
        else:
            fig.add_trace(accept)
    _reference_line(fig, 1.0, "1.0 = no speculation", _NEUTRAL_COLOR)
    top = max([row[1] for rows in parsed.values() for row in rows] + [1.0])
    fig.update_layout(
        title="Accept length over time (decode log)",
        template=_TEMPLATE,
        xaxis_title="time since the run's first decode log line (s)",
        legend_title_text="run",
    )
    if has_throughput:
        fig.update_yaxes(title_text=ACCEPT_LENGTH_AXIS, range=[0, top * 1.2], secondary_y=False)
        fig.update_yaxes(title_text="gen throughput (token/s)", secondary_y=True, rangemode="tozero", showgrid=False)
    else:
        fig.update_yaxes(title_text=ACCEPT_LENGTH_AXIS, range=[0, top * 1.2])
    if not any(parsed.values()):
        fig.add_annotation(text="no decode log records", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def accept_length_live(
    records: Sequence[Mapping[str, Any]],
    *,
    ceiling: float | None = None,
    restarts: Sequence[tuple[int, str]] = (),
    window: int | None = 20,
) -> go.Figure:
    """Accept length of one followed server log, record after record, with restart markers (the box
    console's live pane, :class:`workbench.lab.accept_pane.AcceptPane`).

    Args:
        records: decode-log records in the order they were read (across restarts), each a mapping with
            ``accept_len`` (tokens per verify step, bonus included) and ``timestamp`` (``datetime``,
            ISO 8601 string, epoch seconds, or ``None``). The x axis is the log's time (the
            timestamps SGLang writes, the box's clock) when every record has one, else the record
            number (1, 2, ...).
        ceiling: the most tokens one verify step can yield (``--speculative-num-draft-tokens``, else
            ``--speculative-num-steps`` + 1), drawn as a dashed line when given.
        restarts: ``(index, label)`` pairs: a server (re)start before ``records[index]`` (the first
            record of the new server; ``index == len(records)``: it has none yet, the marker is
            drawn at the last record). Each is a dotted vertical line annotated with ``label``.
        window: the records drawn as markers, and the mean of the last ``window`` records at each
            one as a line (``None`` or 1: no mean line); SGLang logs a decode line every
            ``--decode-log-interval`` steps, so several share one second of the log's time.

    Raises:
        FigureInputError: ``records`` is not a sequence of mappings with a numeric ``accept_len``, a
            timestamp is not a date-time, ``ceiling`` < 1, or a restart index is outside
            0..len(records).
    """
    if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Sequence):
        raise FigureInputError(f"records must be a list of decode-log records, got {type(records).__name__}")
    ys: list[float] = []
    stamps: list[datetime | None] = []
    for i, record in enumerate(records):
        where = f"records[{i}]"
        if not isinstance(record, Mapping):
            raise FigureInputError(f"{where} must be a dict, got {type(record).__name__}")
        if "accept_len" not in record:
            raise FigureInputError(f"{where} has no 'accept_len' key (keys: {sorted(record)})")
        ys.append(_number(record["accept_len"], f"{where}['accept_len']"))  # type: ignore[arg-type]
        ts = record.get("timestamp")
        stamps.append(None if ts is None else _timestamp(ts, where))
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise FigureInputError(f"window must be a whole number of records >= 1 or None, got {window!r}")
    top_line = _number(ceiling, "ceiling", allow_none=True)
    if top_line is not None and top_line < 1:
        raise FigureInputError(f"ceiling must be >= 1 token per verify step, got {ceiling!r}")
    by_time = bool(stamps) and all(ts is not None for ts in stamps)
    xs: list[Any] = list(stamps) if by_time else list(range(1, len(ys) + 1))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers",
            name="accept length (decode line)",
            marker=dict(color=_PALETTE[2], size=6, opacity=0.6),
            hovertemplate="%{x}: %{y:.2f} tokens / verify step<extra></extra>",
        )
    )
    if window is not None and window > 1 and ys:
        means = [math.fsum(ys[max(0, i + 1 - window): i + 1]) / (i + 1 - max(0, i + 1 - window)) for i in range(len(ys))]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=means,
                mode="lines",
                name=f"mean of the last {window}",
                line=dict(color=_PALETTE[3], width=2),
                hovertemplate="%{x}: mean %{y:.2f}<extra></extra>",
            )
        )
    _reference_line(fig, 1.0, "1.0 = no speculation", _NEUTRAL_COLOR)
    if top_line is not None:
        _reference_line(fig, top_line, f"ceiling {top_line:g}", _AFTER_COLOR)
    for n, item in enumerate(restarts):
        try:
            index, label = int(item[0]), str(item[1])
        except (TypeError, ValueError, IndexError) as exc:
            raise FigureInputError(f"restarts[{n}] must be (index, label), got {item!r}") from exc
        if not 0 <= index <= len(ys):
            raise FigureInputError(f"restarts[{n}] index {index} is outside 0..{len(ys)} (the records)")
        if not ys:
            continue  # nothing to place it against
        at = min(index, len(ys) - 1)
        fig.add_vline(x=xs[at], line_dash="dot", line_color=_BEFORE_COLOR, line_width=1.5)
        fig.add_annotation(x=xs[at], y=1.0, yref="paper", text=label, showarrow=False, textangle=-90,
                           xanchor="right", yanchor="top", font=dict(color=_BEFORE_COLOR, size=10))
    top = max(ys + [1.0] + ([top_line] if top_line is not None else []))
    fig.update_layout(
        title="Accept length, live (decode log)",
        template=_TEMPLATE,
        xaxis_title="log time (the box's clock)" if by_time else "decode record number",
        yaxis_title=ACCEPT_LENGTH_AXIS,
        yaxis_range=[0, top * 1.15],
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
        margin=dict(l=60, r=20, t=60, b=50),
        height=360,
    )
    if not ys:
        fig.add_annotation(text="no decode log records yet", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def hidden_width_probe(observed: int | None, expected: int, target_hidden: int, *, where: str = "probe") -> go.Figure:
    """Bar chart: the hidden-state width the draft received vs the width its ``fc`` projection needs.

    Args:
        observed: width of the hidden state the draft received at run time (from the probe), in hidden
            units; ``None`` when the probe did not run (the bar is marked "not probed").
        expected: ``fc`` input width, hidden units (EAGLE-3: number of aux layers × target hidden size).
        target_hidden: the target model's ``hidden_size``, drawn as a dashed reference line; bar labels
            give each width as a multiple of it.
        where: which probe read ``observed``, in the bar's label (``"probe on the fixed server"``
            when the probes rode on the fix launch).

    Raises:
        FigureInputError: a width is not a positive integer.
    """
    widths: dict[str, int | None] = {}
    for name, value in (("observed", observed), ("expected", expected), ("target_hidden", target_hidden)):
        if value is None and name == "observed":
            widths[name] = None
            continue
        number = _number(value, name)
        if number is None or number <= 0 or number != int(number):
            raise FigureInputError(f"{name} must be a positive integer width, got {value!r}")
        widths[name] = int(number)
    obs, exp, hid = widths["observed"], widths["expected"], widths["target_hidden"]
    assert exp is not None and hid is not None

    def multiple(width: int | None) -> str:
        if width is None:
            return "not probed"
        ratio = width / hid
        return f"{width} (= {ratio:g} × {hid})" if ratio == int(ratio) else f"{width} ({ratio:.2f} × {hid})"

    match = obs == exp
    fig = go.Figure(
        go.Bar(
            x=["received by the draft (probe)" if where == "probe" else f"received by the draft<br>({where})",
               "fc input expects"],
            y=[0 if obs is None else obs, exp],
            marker_color=[_NEUTRAL_COLOR if obs is None else (_AFTER_COLOR if match else _BEFORE_COLOR), "#1f77b4"],
            text=[multiple(obs), multiple(exp)],
            textposition=["outside" if obs is None else "inside", "inside"],
            insidetextanchor="end",
            textfont_size=14,
            hovertemplate="%{x}: %{y} hidden units<extra></extra>",
            showlegend=False,
        )
    )
    _reference_line(fig, hid, f"target hidden_size<br>= {hid}", _NEUTRAL_COLOR, legend=True)
    if obs is None:
        subtitle = "probe not run"
    elif match:
        subtitle = "widths match: fc is applied"
    else:
        subtitle = f"MISMATCH: the draft got {obs}, fc needs {exp}; the fc projection is skipped"
    fig.update_layout(
        title=f"Hidden-state width at the draft's fc<br><sup>{subtitle}</sup>",
        template=_TEMPLATE,
        xaxis_title="",
        yaxis_title="width (hidden units)",
        yaxis_range=[0, max(exp, obs or 0, hid) * 1.2],
        showlegend=True,
    )
    return fig


def fix_ladder(labels: Sequence[str], accept_lengths: Sequence[Any], *, ceiling: float | None = None) -> go.Figure:
    """The fix ladder: accept length as found and after each fix added in turn (cumulative, in the
    order the causes act), one bar per rung, so what each fix contributed is the step between two
    bars.

    Args:
        labels: one label per rung (``"as found"``, ``"+ --speculative-algorithm EAGLE3"``, ...).
        accept_lengths: tokens per verify step of each rung, same length as ``labels``.
        ceiling: ``--speculative-num-draft-tokens`` (every draft accepted), a dashed line when given.

    Raises:
        FigureInputError: fewer than two rungs, lengths that differ, a value that is not a finite
            number, a label that is not a string, or ``ceiling`` < 1.
    """
    values = _number_list(accept_lengths, "accept_lengths")
    if isinstance(labels, (str, bytes)) or len(labels) != len(values) or len(values) < 2:
        raise FigureInputError(f"a ladder needs two or more rungs with one label each, got {len(values)} values and "
                               f"{labels!r}")
    if not all(isinstance(label, str) for label in labels):
        raise FigureInputError(f"labels must be strings, got {labels!r}")
    top_line = _number(ceiling, "ceiling", allow_none=True)
    if top_line is not None and top_line < 1:
        raise FigureInputError(f"ceiling must be >= 1, got {ceiling!r}")
    steps = [None] + [b - a for a, b in zip(values, values[1:])]
    fig = go.Figure(go.Bar(
        x=list(labels), y=values,
        marker_color=[_BEFORE_COLOR] + [_AFTER_COLOR if (s or 0) > 0 else _NEUTRAL_COLOR for s in steps[1:]],
        text=[f"{v:.2f}" if s is None else f"{v:.2f} ({s:+.2f})" for v, s in zip(values, steps)],
        textposition="inside", insidetextanchor="end", textfont_size=13,
        hovertemplate="%{x}: %{y:.3f} tokens / verify step<extra></extra>", name="accept length",
        showlegend=False))
    _reference_line(fig, 1.0, "1.0 = no speculation", _NEUTRAL_COLOR, legend=True)
    top = max(values + [1.0])
    if top_line is not None:
        _reference_line(fig, top_line, f"{top_line:g} = ceiling", "#1f77b4", legend=True)
        top = max(top, top_line)
    fig.update_layout(title="What each fix contributed (cumulative, in the order the causes act)",
                      template=_TEMPLATE, xaxis_title="fixes applied", yaxis_title=ACCEPT_LENGTH_AXIS,
                      yaxis_range=[0, top * 1.2], showlegend=True)
    return fig
