"""The Probes pane's readout (workbench.lab.probes_pane.reading_rows): recipes whose reading has a
meaning are said in words, with the diagnosis's own wording, above the values as printed (issue 15,
trial finding 13: the pane showed only the raw probe expressions)."""

from remote.probes import ProbeReading
from workbench.engine.recipes import RECIPES
from workbench.lab.probes_pane import reading_rows

D2T = RECIPES["draft-d2t"].probes[0].exprs


def _reading(tag, raw, n=1):
    return ProbeReading(tag=tag, values=dict(raw), raw={k: str(v) for k, v in raw.items()}, line_number=n)


def test_d2t_not_loaded_is_said_in_words_above_the_printed_values():
    raw = {D2T[0]: "True", D2T[1]: "None", D2T[2]: "None", D2T[3]: "None"}
    rows = reading_rows({"draft-d2t": [_reading("draft-d2t", raw)]})
    assert rows[0] == "draft-d2t: 1 line(s)"
    assert rows[1] == "    means: hot token map (d2t) loaded: no (draft token ids are used as target ids as they are)"
    assert rows[2].startswith("    " + D2T[0] + "=")  # the printed values are still there


def test_unmatched_weights_in_words_only_when_load_weights_ran():
    dropped = _reading("draft-weights-unmatched", {"name": "midlayer.fc.weight", "param_name": "midlayer.fc.weight",
                                                   "shard_id": None}, 2)
    ran = _reading("draft-weights-unmatched.ran", {"type(self).__name__": "LlamaForCausalLMEagle3"}, 1)
    rows = reading_rows({"draft-weights-unmatched": [ran, dropped]})
    assert ("    means: load_weights dropped 1 checkpoint tensor(s) whose names match no draft parameter: "
            "['midlayer.fc.weight']") in rows
    # without the .ran line, no dropped name is no evidence: nothing is claimed
    rows = reading_rows({"draft-weights-unmatched": [dropped]})
    assert not any("means:" in r for r in rows)
    assert reading_rows({"draft-d2t": []}) == ["draft-d2t: 0 line(s) (none yet: restart the server, send a request)"]
