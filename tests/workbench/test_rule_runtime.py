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
