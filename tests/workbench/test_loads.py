"""What a diagnosis costs the box in loads (issue 28): the launch records, the timeline of the
box's port, the downtime, the timeline figure — numbers in, numbers out — and the start-up phases
of one launch read from its part of a real log file on the local box."""

from __future__ import annotations

import pytest

from remote import connect
from workbench.diagnosis.loads import all_launches, count_loads, downtime_s, serving_state, timeline
from workbench.errors import FigureInputError
from workbench.report.timeline import STATE_COLORS, box_timeline
from workbench.session.launches import launch_phases, launch_record


def _rec(label, *, stopped_at=None, launched_at, ready_at, pid=1, **kw):
    return launch_record(label=label, reason=f"{label}: why", launch_command="python -m x", pid=pid, log_path=None,
                         stopped_at=stopped_at, stopped="the server as found" if stopped_at else None,
                         launched_at=launched_at, ready_at=ready_at, log_start=0, **kw)


def test_a_launch_record_keeps_the_old_keys_and_adds_the_new():
    r = _rec("fix", stopped_at=99.0, launched_at=100.0, ready_at=130.25)
    assert r["healthy_after_s"] == r["ready_after_s"] == 30.25 and r["started_at"] == r["launched_at"] == 100.0
    assert r["reason"] == "fix: why" and r["phases"] is None and r["started"] is True
    failed = _rec("probe", launched_at=100.0, ready_at=None, started=False, error="boom")
    assert failed["ready_after_s"] is None and failed["error"] == "boom"
    # no reason given: the label stands for it
    assert launch_record(label="as-found", reason=None, launch_command=None, pid=None, log_path=None, stopped_at=None,
                         stopped=None, launched_at=1.0, ready_at=None, log_start=None)["reason"] == "as-found"


def test_the_reference_case_costs_two_loads_and_its_downtime_is_the_two_gaps():
    """A running box: the fix launch stops the server as found (down 10 s until the fixed one is
    ready), the restore stops the fixed one (down 12 s until the original is back)."""
    launches = all_launches([_rec("fix", stopped_at=10.0, launched_at=10.5, ready_at=20.0)],
                            _rec("restore", stopped_at=50.0, launched_at=51.0, ready_at=62.0))
    assert [r["label"] for r in launches] == ["fix", "restore"] and count_loads(launches) == 2
    segs = timeline(launches, found_serving=True, start=0.0, end=70.0)
    assert [(s["state"], s["from"], s["to"]) for s in segs] == [
        ("serving as found", 0.0, 10.0), ("down", 10.0, 20.0), ("serving fixed", 20.0, 50.0), ("down", 50.0, 62.0),
        ("restored", 62.0, 70.0)]
    assert downtime_s(segs) == 22.0


def test_keep_fix_counts_until_the_fixed_server_was_ready():
    launches = all_launches([_rec("fix", stopped_at=10.0, launched_at=10.5, ready_at=25.5)], None)
    segs = timeline(launches, found_serving=True, start=0.0, end=40.0)
    assert count_loads(launches) == 1 and downtime_s(segs) == 15.5 and segs[-1]["state"] == "serving fixed"


def test_a_box_with_no_server_is_not_down_before_or_after_the_run():
    """The run launched the command as given (no stop: nothing served) and the restore stopped its
    last server without a relaunch: the port is free again, as found — no downtime but the gap
    between the as-found server and the fixed one."""
    launches = [_rec("as-found", launched_at=1.0, ready_at=5.0),
                _rec("fix", stopped_at=20.0, launched_at=20.5, ready_at=27.0)]
    segs = timeline(launches, found_serving=False, start=0.0, end=40.0, final_stop_at=35.0)
    assert [s["state"] for s in segs] == ["no server", "serving as found", "down", "serving fixed", "no server"]
    assert downtime_s(segs) == 7.0 and count_loads(launches) == 2


def test_a_launch_that_never_got_ready_keeps_the_box_down_until_the_next_ready_one():
    launches = [_rec("probe", stopped_at=10.0, launched_at=10.0, ready_at=None, started=False),
                _rec("fix", stopped_at=None, launched_at=30.0, ready_at=41.0),
                _rec("refused", launched_at=45.0, ready_at=None, pid=None, started=False)]
    segs = timeline(launches, found_serving=True, start=0.0, end=50.0)
    assert downtime_s(segs) == 31.0 and count_loads(launches) == 2  # the refused launch started nothing
    assert serving_state("candidate: +1") == serving_state("ladder: 1 fix(es)") == "serving a trial"


def test_the_timeline_figure_draws_each_segment_and_sums_the_downtime():
    segs = timeline(all_launches([_rec("fix", stopped_at=10.0, launched_at=10.5, ready_at=20.0)],
                                 _rec("restore", stopped_at=50.0, launched_at=51.0, ready_at=62.0)),
                    found_serving=True, start=1000.0 - 1000.0, end=70.0)
    fig = box_timeline(segs, loads=2, port=43000)
    assert [(t.name, t.base[0], t.x[0]) for t in fig.data] == [
        ("serving as found", 0.0, 10.0), ("down", 10.0, 10.0), ("serving fixed", 20.0, 30.0), ("down", 50.0, 12.0),
        ("restored", 62.0, 8.0)]
    assert [t.showlegend for t in fig.data] == [True, True, True, False, True]  # one legend entry per state
    assert fig.data[1].marker.color == STATE_COLORS["down"] and fig.data[0].y == ("port 43000",)
    assert "down 22.0 s; 2 server start-up(s)" in fig.layout.title.text


@pytest.mark.parametrize("segments, where", [
    ([], "at least one segment"),
    ([{"state": "", "from": 0, "to": 1}], r"segments\[0\].state"),
    ([{"state": "down", "from": 0, "to": float("nan")}], r"segments\[0\].to"),
    ([{"state": "down", "from": 5, "to": 1}], r"segments\[0\] ends"),
])
def test_the_timeline_figure_refuses_bad_segments(segments, where):
    with pytest.raises(FigureInputError, match=where):
        box_timeline(segments)


def test_a_launchs_phases_come_from_its_own_part_of_the_log(tmp_path):
    """Two start-ups appended to one log (the restore appends to the original's): the second
    launch's phases are read from its own bytes only."""
    first = ("[2026-12-07 18:00:00] Load weight begin. avail mem=70.00 GB\n"
             "[2026-12-07 18:00:10] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB\n"
             "[2026-12-07 18:00:30] The server is fired up and ready to roll!\n")
    second = ("[2026-12-07 19:00:00 TP0] Load weight begin. avail mem=70.00 GB\n"
              "[2026-12-07 19:00:05 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB\n"
              "[2026-12-07 19:00:08 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=59.00 GB\n"
              "[2026-12-07 19:00:20 TP0] The server is fired up and ready to roll!\n")
    log = tmp_path / "server.log"
    log.write_text(first + second)
    box = connect("local")
    got = launch_phases(box, str(log), len(first.encode()), None)
    names = [p["name"] for p in got["phases"]]
    assert names[-1] == "ready" and "load" in names and "capture" in names, got
    assert got["phase"] == "ready" and got["cut"] is False
    # the first launch's lines are not in it: its load began at 18:00, this one's at 19:00
    load_at = next(p["at"] for p in got["phases"] if p["name"] == "load")
    assert load_at is not None and load_at > next(p["at"] for p in launch_phases(box, str(log), 0, len(first.encode()))["phases"]
                                                  if p["name"] == "load")
    # bounded: a start-up longer than the budget is read as its head and its tail
    cut = launch_phases(box, str(log), 0, None, max_bytes=256)
    assert cut["cut"] is True and cut["phase"] == "ready"
    assert launch_phases(box, str(tmp_path / "missing.log"), 0, None) is None
    assert launch_phases(box, None, 0, None) is None


def test_the_spec_accept_length_gauge_of_a_metrics_body():
    from workbench.diagnosis.steps.live import fc_widths_as_served, spec_accept_length

    body = ("# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n"
            "# TYPE sglang:spec_accept_length gauge\n"
            'sglang:spec_accept_length{model_name="t",tp_rank="0"} 1.5\n'
            'sglang:spec_accept_length{model_name="t",tp_rank="1"} 2.5\n'
            'sglang:spec_accept_rate{model_name="t"} 0.25\n')
    assert spec_accept_length(body) == 2.0  # the mean over the label sets
    assert spec_accept_length("sglang:spec_accept_length NaN\n") is None
    assert spec_accept_length("sglang:num_running_reqs 0.0\n") is None
    # nothing to predict from: no map, or a width unknown
    assert fc_widths_as_served(None, "EAGLE", hidden=160, fc_in=480) is None
