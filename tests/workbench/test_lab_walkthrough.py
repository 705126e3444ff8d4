"""The walkthrough's views (workbench.lab.walkthrough) on given numbers: what each says the numbers
mean (pinned near 1.00, low, not low; the width reaching fc; fixed against still open) and that a
bad parameter is refused before anything touches the box. The steps on a real box are in
tests/integration/test_walkthrough_papermill.py and tests/lab/test_walkthrough_browser.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import DiagnosisError
from workbench.lab import walkthrough as walk
from workbench.lab.notebook import NotebookMessage
from workbench.rules.acceptance_level import classify_acceptance


@pytest.mark.parametrize("accept, ceiling, low, starts", [
    (1.00, 4.0, True, "Acceptance: collapsed: 1.00 of a possible 4.00 (≤ 1.05: the draft is almost never right). "
                      "Pinned near 1.00"),
    # the sandbox with the wrong flag, few prompts: the words logs, measure and doctor --running print
    (1.108, 4.0, True, "Acceptance: low: 1.11 of a possible 4.00 (< 45 % of the ceiling). Pinned near 1.00"),
    (1.04, None, True, "Acceptance: collapsed: 1.04 (≤ 1.05: the draft is almost never right). Pinned near 1.00"),
    (1.5, 4.0, True, "Acceptance: low: 1.50 of a possible 4.00 (< 45 % of the ceiling). The draft helps"),
    (2.3, 4.0, False, "Acceptance: not low: 2.30 of a possible 4.00 (≥ 45 % of the ceiling). A working"),
])
def test_symptom_reads_accept_length_against_the_ceiling(accept, ceiling, low, starts):
    s = walk.Symptom(accept, ceiling, low)
    assert s.reading().startswith(starts)
    assert s.pinned is ("Pinned near 1.00" in starts)
    # the same words as every command for the same value
    assert classify_acceptance(accept, ceiling=ceiling).words in s.reading()
    if ceiling:
        assert s.fraction == pytest.approx(accept / ceiling)
        assert f"accept length {accept:.3f} of ceiling {ceiling:g}" in s.text()
    assert "wb-walk-symptom" in s._repr_html_()


def test_symptom_of_a_server_that_did_not_start_and_a_rerun():
    s = walk.Symptom(None, 4.0, None, failure="ServerDied: exit code 1", again=True)
    assert s.reading().startswith("The server did not start: ServerDied: exit code 1.")
    assert s.fraction is None and not s.pinned
    assert "[measured earlier in this run]" in s.text()
    assert "Measured earlier in this run" in s._repr_html_()


@pytest.mark.parametrize("observed, says", [
    (160, "The draft receives 160 (one hidden state) where its fc expects 480 (3 × 160)"),
    (480, "The draft receives 480-wide input, what its fc expects"),
    (None, "The probe printed nothing"),
])
def test_probe_width_reading(observed, says):
    p = walk.ProbeWidth(observed, 480, 160, widths=[observed] if observed else [], in_place=["draft-input-width"])
    assert p.reading().startswith(says)
    assert "probes on the box now: ['draft-input-width']" in p.text()


def test_probe_width_riding_on_the_fix_says_so():
    p = walk.ProbeWidth(None, None, None, in_place=["draft-input-width"], rides_on="fix",
                        live="with EAGLE the aux capture is never set up")
    assert p.reading() == ("No probe launch: the probes are placed and ride on the fix launch, whose log gives the "
                           "readings (one load both shows the mechanism and measures the fix). The server as found, "
                           "read live: with EAGLE the aux capture is never set up.")


def test_probe_width_skipped_says_why():
    p = walk.ProbeWidth(None, None, None, skipped="no probe: allow_restart is False")
    assert p.reading() == "No probe ran: no probe: allow_restart is False"
    assert "probes on the box now: none" in p.text()


def test_verification_fixed_against_still_open():
    fixed = walk.Verification(1.108, 2.118, 4.0, "fixed", width_before=160, width_after=480, width_expected=480)
    assert fixed.fixed and fixed.gain == pytest.approx(2.118 / 1.108)
    assert fixed.reading() == "Fixed: accept length 1.108 → 2.118 (1.91×), 53% of the ceiling 4."
    html = fixed._repr_html_()
    assert "<span class='wb-walk-before'>1.108</span>" in html and "<span class='wb-walk-after'>2.118</span>" in html
    assert "160 → 480 (480)" in html and "Still open" not in html

    near = walk.Verification(1.1, 2.2, 4.0, "fixed", expected=2.3)
    assert near.reading().endswith("near the trained value 2.3.")

    partly = walk.Verification(1.1, 1.3, 4.0, "partly-fixed", why="accept length 1.100 → 1.300 — still low",
                               open=[("aux-eagle-config", "give aux_layer_ids to decide")])
    assert not partly.fixed
    assert partly.reading() == ("Still open (partly-fixed): accept length 1.100 → 1.300 — still low. "
                                "Look at the open hypotheses below.")
    assert "<li><b>aux-eagle-config</b>: give aux_layer_ids to decide</li>" in partly._repr_html_()

    unmeasured = walk.Verification(1.0, None, 4.0, "cause-found")
    assert unmeasured.gain is None
    assert unmeasured.reading().startswith("Still open (cause-found): nothing was measured with a fix.")


def test_fix_and_finish_views_as_text():
    f = walk.FixApplied([("launch", "algorithm-mismatch", "--speculative-algorithm EAGLE3")],
                        [("--speculative-algorithm", "EAGLE", "EAGLE3")], "python -m sglang.launch_server ...",
                        True, 2.1, "accept length 1.000 → 2.100")
    assert f.text().splitlines() == [
        "launch     algorithm-mismatch: --speculative-algorithm EAGLE3",
        "--speculative-algorithm: EAGLE -> EAGLE3",
        "corrected launch command: python -m sglang.launch_server ...",
        "relaunched with it: accept length 2.100"]
    assert "<b>Relaunched with the fix</b>: accept length 1.000 → 2.100" in f._repr_html_()
    done = walk.Finished(Path("/r/diagnose_acceptance.json"), "fixed", ["stopped fix server pid 1 (terminated)"],
                         ["nothing to do"], "<p>v</p>")
    assert done.text().splitlines() == ["verdict: /r/diagnose_acceptance.json", "outcome: fixed",
                                        " - stopped fix server pid 1 (terminated)", "finish again: nothing to do"]


def test_start_run_refuses_a_bad_port_as_one_message_before_touching_the_box():
    with pytest.raises(NotebookMessage) as info:
        walk.start_run(previous=None, host="local", port="abc")
    assert isinstance(info.value.error, DiagnosisError)
    assert info.value._render_traceback_() == [
        "DiagnosisError: port must be a TCP port number 1-65535, got 'abc'"]
