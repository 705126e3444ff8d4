"""workbench.figures: plain inputs in, plotly Figures out, clear titles / units, typed input errors."""

import datetime as dt

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from workbench.report import figures
from workbench.report.figures import FigureInputError


def _hline_ys(fig: go.Figure) -> list[float]:
    return sorted(shape.y0 for shape in fig.layout.shapes if shape.type == "line" and shape.y0 == shape.y1)


def _data(fig: go.Figure) -> list:
    """The traces that draw data; the reference lines' legend-only entries left out."""
    return [t for t in fig.data if t.legendgroup != "reference"]


def _reference_labels(fig: go.Figure) -> list[str]:
    return [t.name for t in fig.data if t.legendgroup == "reference"]


def test_before_after_bars_reference_lines_and_units():
    fig = figures.accept_length_before_after(1.0, 3.21, ideal=4)
    assert isinstance(fig, go.Figure)
    (bar,) = _data(fig)
    assert list(bar.x) == ["before (EAGLE)", "after (EAGLE3)"]
    assert list(bar.y) == [1.0, 3.21]
    assert list(bar.text) == ["1.00", "3.21"]
    assert _hline_ys(fig) == [1.0, 4.0]
    assert all(shape.line.dash == "dash" for shape in fig.layout.shapes)
    assert "tokens / verify step" in fig.layout.yaxis.title.text
    assert "before and after" in fig.layout.title.text and "×3.21" in fig.layout.title.text
    assert fig.layout.yaxis.range[1] >= 4  # the ceiling is visible


def test_before_after_without_ideal_accepts_numpy_and_none():
    fig = figures.accept_length_before_after(np.float32(1.0), None, labels=("EAGLE", "EAGLE3"))
    assert _hline_ys(fig) == [1.0]
    assert list(_data(fig)[0].text) == ["1.00", "not measured"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(before="x", after=2.0), "before must be a number"),
        (dict(before=1.0, after=float("nan")), "after must be finite"),
        (dict(before=1.0, after=2.0, ideal=0.5), "ideal must be >= 1"),
        (dict(before=1.0, after=2.0, labels=("only one",)), "labels must be two strings"),
        (dict(before=True, after=2.0), "before must be a number"),
    ],
)
def test_before_after_rejects_bad_input(kwargs, match):
    with pytest.raises(FigureInputError, match=match):
        figures.accept_length_before_after(**kwargs)


def test_per_request_two_runs_and_means():
    fig = figures.accept_length_per_request([1.0, 1.0, 1.0], [3.0, 3.5])
    assert [trace.name for trace in _data(fig)] == ["before (EAGLE): n=3, mean 1.00",
                                                     "after (EAGLE3): n=2, mean 3.25"]
    assert list(_data(fig)[1].x) == [0, 1]
    assert _hline_ys(fig) == [1.0, 1.0, 3.25]  # two means + the no-speculation line
    assert fig.layout.xaxis.title.text.startswith("request #")
    assert "tokens / verify step" in fig.layout.yaxis.title.text


def test_per_request_empty_run_and_bad_element():
    fig = figures.accept_length_per_request([], [2.0])
    assert len(_data(fig)) == 2 and _data(fig)[0].name == "before (EAGLE): n=0"
    with pytest.raises(FigureInputError, match=r"after\[1\]"):
        figures.accept_length_per_request([1.0], [2.0, None])
    with pytest.raises(FigureInputError, match="list of numbers"):
        figures.accept_length_per_request("1,2", [2.0])


def _records(start, accept, throughput=None, step_s=10):
    out = []
    for i, a in enumerate(accept):
        record = {"timestamp": start + dt.timedelta(seconds=step_s * i), "accept_len": a}
        if throughput is not None:
            record["gen_throughput"] = throughput[i]
        out.append(record)
    return out


def test_timeline_with_throughput_on_secondary_axis():
    t0 = dt.datetime(2026, 1, 5, 12, 0, 0)
    before = _records(t0, [1.0, 1.0, 1.0], [40.0, 41.0, 39.5])
    after = [dict(r, timestamp=r["timestamp"].isoformat()) for r in _records(t0 + dt.timedelta(hours=1), [3.1, 3.3])]
    fig = figures.acceptance_timeline({"before": before, "after": after})
    names = [trace.name for trace in fig.data]
    assert names == ["before: accept length", "before: gen throughput", "after: accept length"]
    # elapsed seconds per run, so runs an hour apart line up
    assert list(fig.data[0].x) == [0.0, 10.0, 20.0] and list(fig.data[2].x) == [0.0, 10.0]
    assert fig.data[1].yaxis == "y2"
    assert fig.layout.yaxis2.title.text == "gen throughput (token/s)"
    assert fig.layout.yaxis2.range is None and fig.layout.yaxis2.rangemode == "tozero"  # not the accept-length range
    assert fig.layout.yaxis.range[1] >= 3.3
    assert "tokens / verify step" in fig.layout.yaxis.title.text
    assert fig.layout.xaxis.title.text.endswith("(s)")


def test_timeline_without_throughput_and_sorted_and_errors():
    t0 = dt.datetime(2026, 1, 5, 12, 0, 0, tzinfo=dt.timezone.utc)
    records = list(reversed(_records(t0, [1.0, 2.0, 3.0])))
    fig = figures.acceptance_timeline({"run": records})
    assert len(fig.data) == 1 and list(fig.data[0].y) == [1.0, 2.0, 3.0]
    assert "yaxis2" not in fig.layout.to_plotly_json()

    empty = figures.acceptance_timeline({"run": []})
    assert any("no decode log records" in a.text for a in empty.layout.annotations)

    with pytest.raises(FigureInputError, match=r"records_by_label\['run'\]\[0\] has no 'accept_len'"):
        figures.acceptance_timeline({"run": [{"timestamp": t0}]})
    with pytest.raises(FigureInputError, match="not an ISO 8601"):
        figures.acceptance_timeline({"run": [{"timestamp": "yesterday", "accept_len": 1.0}]})
    with pytest.raises(FigureInputError, match="must be a dict of label"):
        figures.acceptance_timeline([{"timestamp": t0, "accept_len": 1.0}])


def test_hidden_width_probe_mismatch_and_match():
    fig = figures.hidden_width_probe(7168, 21504, 7168)
    (bar,) = _data(fig)
    assert list(bar.y) == [7168, 21504]
    assert list(bar.text) == ["7168 (= 1 × 7168)", "21504 (= 3 × 7168)"]
    assert _hline_ys(fig) == [7168]
    assert "MISMATCH" in fig.layout.title.text
    assert fig.layout.yaxis.title.text == "width (hidden units)"

    ok = figures.hidden_width_probe(np.int64(21504), 21504, 7168)
    assert "widths match" in ok.layout.title.text
    assert "not probed" in figures.hidden_width_probe(None, 21504, 7168).data[0].text[0]


@pytest.mark.parametrize("args", [(0, 21504, 7168), (7168, 21504.5, 7168), (7168, 21504, "wide"), (7168, None, 7168)])
def test_hidden_width_probe_rejects_bad_widths(args):
    with pytest.raises(FigureInputError):
        figures.hidden_width_probe(*args)


def test_figures_serialise_to_json():
    # What papermill stores and the report renders: every figure must survive a JSON round trip.
    t0 = dt.datetime(2026, 1, 5)
    for fig in (
        figures.accept_length_before_after(1.0, 3.0, ideal=4),
        figures.accept_length_per_request([1.0], [3.0]),
        figures.acceptance_timeline({"a": _records(t0, [1.0, 2.0], [10.0, 20.0])}),
        figures.hidden_width_probe(7168, 21504, 7168),
    ):
        assert pio.from_json(fig.to_json()).to_plotly_json()["data"]


def test_accept_length_live_time_axis_ceiling_and_restart_markers():
    t0 = dt.datetime(2026, 7, 1, 12, 0, 0)
    records = [{"timestamp": t0 + dt.timedelta(seconds=i), "accept_len": v} for i, v in enumerate([2.0, 2.5, 1.0, 3.0])]
    fig = figures.accept_length_live(records, ceiling=4, restarts=[(2, "restart (pid 7)"), (4, "restart (pid 9)")],
                                     window=2)
    trace, mean = fig.data
    assert list(trace.y) == [2.0, 2.5, 1.0, 3.0] and list(trace.x) == [r["timestamp"] for r in records]
    assert list(mean.y) == [2.0, 2.25, 1.75, 2.0] and mean.name == "mean of the last 2"
    assert _hline_ys(fig) == [1.0, 4.0]  # no speculation, the ceiling
    vlines = sorted(str(s.x0) for s in fig.layout.shapes if s.type == "line" and s.x0 == s.x1)
    # the first marker at the new server's first record, the second (no record yet) at the last one
    assert vlines == [str(records[2]["timestamp"]), str(records[3]["timestamp"])]
    assert [a.text for a in fig.layout.annotations if a.text.startswith("restart")] == ["restart (pid 7)",
                                                                                        "restart (pid 9)"]
    assert fig.layout.yaxis.range[1] >= 4.0 and "tokens / verify step" in fig.layout.yaxis.title.text
    assert "log time" in fig.layout.xaxis.title.text


def test_accept_length_live_record_numbers_empty_and_errors():
    fig = figures.accept_length_live([{"timestamp": None, "accept_len": 1.5}, {"accept_len": 2}], window=None)
    assert len(fig.data) == 1  # no mean line
    assert list(fig.data[0].x) == [1, 2] and fig.layout.xaxis.title.text == "decode record number"
    with pytest.raises(FigureInputError, match="window must be"):
        figures.accept_length_live([], window=0)
    assert _hline_ys(fig) == [1.0]
    empty = figures.accept_length_live([], restarts=[(0, "restart")])
    assert any(a.text == "no decode log records yet" for a in empty.layout.annotations)
    with pytest.raises(FigureInputError, match=r"records\[0\] has no 'accept_len'"):
        figures.accept_length_live([{"timestamp": None}])
    with pytest.raises(FigureInputError, match="ceiling must be >= 1"):
        figures.accept_length_live([], ceiling=0.5)
    with pytest.raises(FigureInputError, match=r"restarts\[0\] index 3 is outside 0..1"):
        figures.accept_length_live([{"accept_len": 1.0}], restarts=[(3, "x")])
    with pytest.raises(FigureInputError, match="must be a list of decode-log records"):
        figures.accept_length_live({"accept_len": 1.0})


def test_report_figures_label_reference_lines_in_the_legend_never_on_the_plot():
    """Trial finding 15: at 800 px the reference lines' on-plot labels overprinted bars and lines;
    the report's figures name them in the legend instead (no annotation left on the plot), and
    say how the headline accept length differs from the per-request mean."""
    figs = {
        "before_after": figures.accept_length_before_after(1.157, 2.356, ideal=4),
        "per_request": figures.accept_length_per_request([1.1, 1.2], [2.3, 2.5]),
        "probe": figures.hidden_width_probe(160, 480, 160),
        "ladder": figures.fix_ladder(["as found", "+ EAGLE3"], [1.15, 2.35], ceiling=4),
    }
    for name, fig in figs.items():
        assert list(fig.layout.annotations) == [], name
        assert fig.layout.showlegend is not False, name
        assert len(_reference_labels(fig)) == len(_hline_ys(fig)) - (2 if name == "per_request" else 0), name
        assert all(t.showlegend is False for t in _data(fig) if t.type == "bar"), name
    assert _reference_labels(figs["before_after"]) == ["1.0 = no speculation<br>(bonus token only)",
                                                       "4 = ceiling<br>(num draft tokens)"]
    assert _reference_labels(figs["probe"]) == ["target hidden_size<br>= 160"]
    assert "Σ completion tokens / Σ verify steps" in figs["before_after"].layout.title.text
    assert "mean of the requests' own values" in figs["per_request"].layout.title.text
    assert "Σ tokens / Σ verify steps" in figs["per_request"].layout.title.text
