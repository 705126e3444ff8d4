"""``workbench runbook`` ends with the diagnosis's verdict in one line (``verdict_summary``), so a
user at a terminal sees the outcome and the accept length without opening the report (a new user's
trial: ``make demo`` printed only three paths). The sandbox diagnosis itself checks the line it
prints (tests/integration/test_diagnose_sandbox.py)."""

from __future__ import annotations

import json

import pytest

from workbench.cli.runbook import verdict_summary


def _write(tmp_path, verdict) -> str:
    path = tmp_path / "diagnose_acceptance.json"
    path.write_text(json.dumps(verdict))
    return str(path)


def test_a_fixed_run(tmp_path):
    path = _write(tmp_path, {
        "outcome": "fixed", "outcome_detail": None, "root_cause": {"rule": "algorithm-mismatch"},
        "acceptance": {"before": {"accept_length": 1.1566}, "after": {"accept_length": 2.35561}},
        "restore": {"actions": ["stopped fix server"], "problems": [], "clean": True}})
    assert verdict_summary(path) == ("verdict: fixed; accept length 1.157 -> 2.356; root cause: algorithm-mismatch; "
                                     "box restored")


def test_an_inconclusive_run_says_why_and_what_was_not_measured(tmp_path):
    path = _write(tmp_path, {
        "outcome": "inconclusive", "outcome_detail": "symptom not measured", "root_cause": {"rule": None},
        "acceptance": {"before": {"accept_length": None}, "after": {"accept_length": None}},
        "restore": {"actions": [], "problems": ["probe p1 not reverted: permission denied"], "clean": False}})
    assert verdict_summary(path) == ("verdict: inconclusive (symptom not measured); accept length not measured -> "
                                     "not measured; box NOT fully restored: probe p1 not reverted: permission denied")


def test_a_server_that_never_started_is_named(tmp_path):
    """A trial: the as-found launch died (wrong interpreter, no torch) and the verdict line said only
    ``cause-found; accept length not measured``; the start failure is the news."""
    path = _write(tmp_path, {
        "outcome": "cause-found", "outcome_detail": None, "root_cause": {"rule": "algorithm-mismatch"},
        "acceptance": {"before": {"accept_length": None}, "after": {"accept_length": None}},
        "start_failures": [{"label": "as-found", "error": "ServerDied: the server exited",
                            "exception": "ModuleNotFoundError: No module named 'torch'"},
                           {"label": "fix", "error": "ServerDied", "exception": None}],
        "restore": {"actions": [], "problems": [], "clean": True}})
    assert verdict_summary(path) == ("verdict: cause-found; accept length not measured -> not measured; the server did "
                                     "not start (as-found: ModuleNotFoundError: No module named 'torch'); root cause: "
                                     "algorithm-mismatch; box restored")
    # measured as found: a later launch that failed (a fix) is in the report, not in this line
    fixed = json.loads(open(path).read())
    fixed["acceptance"]["before"]["accept_length"] = 1.1
    assert "did not start" not in verdict_summary(_write(tmp_path, fixed))


def test_a_verdict_with_fields_missing_still_gives_its_outcome(tmp_path):
    assert verdict_summary(_write(tmp_path, {"outcome": "healthy"})) == \
        "verdict: healthy; accept length not measured -> not measured"


@pytest.mark.parametrize("content", [
    {"ranking": [], "best_by": "accept_length"},  # compare_drafts' JSON: no outcome
    ["not", "a", "dict"],
    {"outcome": 3},
])
def test_other_json_gives_no_line(tmp_path, content):
    assert verdict_summary(_write(tmp_path, content)) is None


def test_a_missing_or_broken_file_gives_no_line(tmp_path, caplog):
    assert verdict_summary(None) is None
    assert verdict_summary(tmp_path / "absent.json") is None
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert verdict_summary(broken) is None
    assert f"{broken} is not JSON" in caplog.text


def test_the_line_names_reclaimed_orphans_and_a_kept_fix_not_a_restored_box(tmp_path):
    verdict = {"outcome": "fixed", "acceptance": {"before": {"accept_length": 1.1}, "after": {"accept_length": 2.3}},
               "root_cause": {"rule": "algorithm-mismatch"}, "restore": {"clean": True, "problems": []},
               "fix": {"kept_server": {"pid": 4242}},
               "gpu_events": [{"event": "stop"}, {"event": "reclaim", "reclaimed": [{"pid": 11}, {"pid": 12}]}]}
    assert verdict_summary(_write(tmp_path, verdict)) == (
        "verdict: fixed; accept length 1.100 -> 2.300; root cause: algorithm-mismatch; reclaim_gpus stopped orphaned "
        "pids 11, 12; the fixed server (pid 4242) kept in place of the one found")
