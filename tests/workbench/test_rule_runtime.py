"""Rules of the runtime family (workbench/rules/runtime.py)."""

from __future__ import annotations

from workbench.rules.runtime import acceptance_collapsed


def test_acceptance_collapsed_runtime_rule():
    from workbench.rules import Finding

    static = [Finding("algorithm-mismatch", "error", "m", {}, None)]
    hit = acceptance_collapsed({"accept_length": 1.0, "verify_steps": 96}, static)
    assert [f.rule for f in hit] == ["acceptance-collapsed"] and hit[0].evidence["static_causes"] == ["algorithm-mismatch"]
    assert acceptance_collapsed({"accept_length": 1.0, "verify_steps": 19}) == []
    assert acceptance_collapsed({"accept_length": 1.06, "verify_steps": 200}) == []


def test_acceptance_collapsed_says_whether_the_static_checks_ran():
    """Issue 29 trial item 4: ``measure``/``logs`` run no static checks, so the finding must not claim that
    no static finding explains the collapse; it says they were not run and points at ``doctor --running``."""
    (unchecked,) = acceptance_collapsed({"accept_length": 1.0, "verify_steps": 96})
    assert "were not run" in unchecked.message and "workbench doctor --running" in unchecked.message
    assert "no static finding explains it" not in unchecked.message
    assert unchecked.evidence["static_checked"] is False and unchecked.evidence["static_causes"] == []
    (clean,) = acceptance_collapsed({"accept_length": 1.0, "verify_steps": 96}, [])
    assert "no static finding explains it" in clean.message and "were not run" not in clean.message
    assert clean.evidence["static_checked"] is True
