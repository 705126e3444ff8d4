"""The sweep's grid and launch commands (no server needed)."""

import pytest

from workbench.engine.launch import LaunchCommand
from workbench.measure.sweep import (SpecSetting, SweepError, SweepResult, SweepRow, parse_grid, rank_rows,
                                     setting_launch)

LAUNCH = ("python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3 "
          "--speculative-draft-model-path /d --speculative-num-steps 3 --speculative-eagle-topk 1 "
          "--speculative-num-draft-tokens 4 --tp 8 --port 30000")


def test_parse_grid_product_auto_and_baseline_first():
    got = parse_grid("steps:1,3 topk:1,2")
    assert parse_grid("steps=1,3 topk=1,2") == got
    assert [s.label for s in got] == [
        "no speculation", "steps=1 topk=1 draft_tokens=2", "steps=1 topk=2 draft_tokens=3",
        "steps=3 topk=1 draft_tokens=4", "steps=3 topk=2 draft_tokens=7"]
    assert parse_grid({"steps": [2], "draft_tokens": [2, 3, 9]}, include_baseline=False) == [
        SpecSetting(2, 1, 2), SpecSetting(2, 1, 3)]  # 9 > steps * topk + 1 cannot be filled: dropped


@pytest.mark.parametrize("grid, message", [
    ("steps=1 width=3", "unknown grid key"),
    ("steps=0", "must be >= 1"),
    ("steps=a", "is not a positive integer"),
    ("steps", "is not key:v1,v2"),
    ("topk:1", "no speculative setting"),
])
def test_parse_grid_errors_name_the_part(grid, message):
    with pytest.raises(SweepError, match=message):
        parse_grid(grid)


def test_setting_launch_replaces_only_the_three_flags_and_baseline_drops_all():
    launch = LaunchCommand.parse(LAUNCH)
    s = setting_launch(launch, SpecSetting(5, 2, 8))
    assert [s.get(f) for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                               "--speculative-num-draft-tokens")] == ["5", "2", "8"]
    assert s.get("--tp") == "8" and s.get("--speculative-draft-model-path") == "/d"
    base = setting_launch(launch, SpecSetting(baseline=True))
    assert not [f for f in base.flags() if f.startswith("--speculative")]
    assert base.get("--model-path") == "/m" and base.get("--port") == "30000"
    with pytest.raises(SweepError, match="no --speculative-algorithm"):
        setting_launch(base, SpecSetting(1, 1, 2))


def test_result_table_csv_and_best():
    rows = [SweepRow("no speculation", True, None, None, None, True, tokens_per_s=50.0, speedup=1.0),
            SweepRow("steps=3 topk=1 draft_tokens=4", False, 3, 1, 4, True, accept_length=2.5, tokens_per_s=80.0,
                     speedup=1.6),
            SweepRow("steps=3 topk=2 draft_tokens=7", False, 3, 2, 7, False, error="the server did not start")]
    res = SweepResult(rows, "local", 30000, 8, 64, 1, LAUNCH)
    assert res.best.label == "steps=3 topk=1 draft_tokens=4" and res.baseline.tokens_per_s == 50.0
    lines = res.to_csv().splitlines()
    assert lines[0].startswith("label,baseline,steps,topk,draft_tokens,draft_path,ok,accept_length")
    assert lines[2].startswith("steps=3 topk=1 draft_tokens=4,False,3,1,4,,True,2.5,")
    figs = res.figures()
    assert list(figs["accept_length"].data[0].y) == [2.5]
    assert list(figs["throughput"].data[0].y) == [50.0, 80.0]


def test_grid_repeated_key_or_empty_value_is_refused():
    with pytest.raises(SweepError, match="given twice"):
        parse_grid("steps:1 steps:2")
    with pytest.raises(SweepError, match="empty value"):
        parse_grid("steps:1,,3")


def test_check_fails_when_nothing_was_measured():
    rows = [SweepRow("no speculation", True, None, None, None, True, tokens_per_s=50.0),
            SweepRow("steps=1 topk=2 draft_tokens=3", False, 1, 2, 3, False, error="the server did not start: x")]
    with pytest.raises(SweepError, match="no setting could be measured: steps=1 topk=2 draft_tokens=3: the server"):
        SweepResult(rows, "local", 30000, 8, 64, 1, LAUNCH).check()
    SweepResult(rows[:1] + [SweepRow("s", False, 1, 1, 2, True)], "local", 30000, 8, 64, 1, LAUNCH).check()


def test_runbooks_refuse_port_0_instead_of_falling_back_to_30000():
    from workbench.errors import DiagnosisError
    from workbench.session import open_box

    for bad in (0, 70000, "abc", True):
        with pytest.raises(DiagnosisError, match="port must be a TCP port number 1-65535"):
            open_box("local", launch_command=None, port=bad)


def _draft(label, accept_length, tokens_per_s, ok=True):
    return SweepRow(label, False, None, None, None, ok, accept_length=accept_length, tokens_per_s=tokens_per_s,
                    draft_path=f"/drafts/{label}")


def test_a_comparison_of_drafts_ranks_by_accept_length_with_tokens_per_s_beside():
    """Draft B is faster on the clock (a quieter moment of a shared box) but accepts fewer tokens
    per verify step: A is best, decided by accept length, and the reason gives both figures."""
    rows = [_draft("draft A", 2.281, 40.0), _draft("draft B", 1.021, 55.5), _draft("draft C", None, None, ok=False)]
    res = SweepResult(rows, "local", 30000, 8, 64, 1, LAUNCH, rank_by="accept_length")
    assert res.best.label == "draft A"
    ranking = res.ranking()
    assert ranking["decided_by"] == "accept_length" and ranking["order"] == ["draft A", "draft B"]
    assert ranking["reason"] == ("draft A by accept length, tokens per verify step (accept length 2.281, 40.0 "
                                 "tokens/s; draft B: accept length 1.021, 55.5 tokens/s); tokens/s is shown beside it "
                                 "and did not decide")
    doc = res.to_dict()
    assert (doc["best"], doc["best_by"], doc["ranking"]["rank_by"]) == ("draft A", "accept_length", "accept_length")
    page = res._repr_html_()
    assert "Best: <b>draft A</b>, decided by <b>accept length</b>" in page
    assert page.index("<th style='text-align:right'>accept_length</th>") < page.index(
        "<th style='text-align:right'>tokens_per_s</th>") < page.index("<th style='text-align:right'>tau</th>")
    # the same rows as a sweep of the settings: tokens/s decides there
    assert SweepResult(rows, "local", 30000, 8, 64, 1, LAUNCH).best.label == "draft B"


def test_tied_accept_lengths_are_decided_by_tokens_per_s_and_say_so():
    rows = [_draft("draft A", 2.300, 40.0), _draft("draft B", 2.304, 35.0), _draft("draft C", 1.5, 90.0)]
    ranked, decided, reason = rank_rows(rows, "accept_length")
    assert [r.label for r in ranked] == ["draft A", "draft B", "draft C"] and decided == "tokens_per_s"
    assert reason.startswith("draft A by tokens/s: the accept lengths tie within 0.005 tokens per verify step")
    # just outside the tie: accept length decides
    ranked, decided, _ = rank_rows([_draft("draft A", 2.300, 40.0), _draft("draft B", 2.306, 35.0)], "accept_length")
    assert ranked[0].label == "draft B" and decided == "accept_length"


def test_nothing_measured_has_no_best_and_an_unknown_figure_is_refused():
    res = SweepResult([_draft("draft A", None, None, ok=False)], "local", 30000, 8, 64, 1, LAUNCH,
                      rank_by="accept_length")
    assert res.best is None and res.to_dict()["best_by"] is None
    assert res.ranking()["reason"] == "no setting was measured: no best"
    assert rank_rows([_draft("only", 2.0, 30.0)], "accept_length")[2] == (
        "only is the only one measured (accept length 2.000, 30.0 tokens/s)")
    with pytest.raises(ValueError, match="rank_by must be one of tokens_per_s, accept_length"):
        rank_rows([], "speedup")
