import json

import pytest

from workbench.diagnosis.ledger import Evidence, Hypothesis, Ledger, LedgerError


def test_ledger_flow_and_json():
    led = Ledger()
    h = led.add("algo-flag", "The server runs EAGLE with an EAGLE-3 draft")
    assert h.verdict == "inconclusive"
    led.add(Hypothesis("draft-weights", "The draft weights are broken"))
    ev = Evidence("finding", "algorithm-mismatch fired", {"fc_in_features": 21504}, "/d/model.safetensors: fc.weight")
    led.decide("algo-flag", "confirmed", ev)
    led.decide("draft-weights", "refuted")
    assert [x.verdict for x in led] == ["confirmed", "refuted"]
    assert [x.id for x in led.confirmed()] == ["algo-flag"]
    d = json.loads(led.to_json())
    assert d == {"hypotheses": [
        {"id": "algo-flag", "statement": "The server runs EAGLE with an EAGLE-3 draft", "verdict": "confirmed",
         "evidence": [{"kind": "finding", "summary": "algorithm-mismatch fired", "data": {"fc_in_features": 21504},
                       "source": "/d/model.safetensors: fc.weight"}], "consequence_of": []},
        {"id": "draft-weights", "statement": "The draft weights are broken", "verdict": "refuted", "evidence": [],
         "consequence_of": []}]}
    assert Ledger.from_dict(d).to_dict() == d


def test_ledger_errors():
    led = Ledger()
    led.add("a", "s")
    with pytest.raises(LedgerError, match="already"):
        led.add("a", "again")
    with pytest.raises(LedgerError, match="no hypothesis 'b'"):
        led.decide("b", "confirmed")
    with pytest.raises(LedgerError, match="verdict must be one of"):
        led.decide("a", "probably")
    assert led.get("a").verdict == "inconclusive"  # unchanged by the failed decide
    with pytest.raises(LedgerError):
        Hypothesis("x", "y", verdict="maybe")


def test_html_escapes_and_colours():
    led = Ledger()
    led.add("x<1>", "fc <skipped> & 'silent'")
    led.decide("x<1>", "refuted", Evidence("log", "<script>alert(1)</script>", source="a&b"))
    out = led._repr_html_()
    assert "<script>" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert "fc &lt;skipped&gt; &amp; &#x27;silent&#x27;" in out
    assert "x&lt;1&gt;" in out and "a&amp;b" in out
    assert "#cf222e" in out and ">refuted<" in out
    assert "no hypotheses" in Ledger()._repr_html_()
