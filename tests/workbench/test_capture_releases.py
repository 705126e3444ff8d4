"""The target's aux-layer capture rule, evaluated from each covered SGLang release's own source
(the published wheels, never installed), against what was read there by hand; and the doctor's
capture-dependent findings on the releases where the rule differs.

By hand (``grep -n "def set_eagle3_layers_to_capture"`` in each release's ``srt/models``):

- ``llama.py``: 0.4.6 line 639 and 0.4.8 line 700 ``def set_eagle3_layers_to_capture(self):``
  (no ids; ``layers_to_capture = [2, num_layers // 2, num_layers - 3]``; ``model_runner.py``
  calls it without arguments); from 0.4.10 (line 743) ``(self, layer_ids=None)`` with
  ``[val + 1 for val in layer_ids]``.
- ``deepseek_v2.py``: no such method up to 0.5.4; 0.5.9 (2963) and 0.5.12 (2529) ``+1`` always;
  0.5.18 (3166) and 0.5.23 (3458) ``+1`` only when ``layer_ids[0] == 1``, else ``list(layer_ids)``.
- ``kimi_k25.py``: 0.5.9 has ``KimiK25ForConditionalGeneration`` without the method (the runner's
  ``self.model.set_eagle3_layers_to_capture`` has nothing to call); 0.5.12 (799), 0.5.18 (926),
  0.5.23 (928) delegate to ``self.language_model`` (``DeepseekV3ForCausalLM``).
- ``qwen3.py``: 0.4.6 / 0.4.8 no method; from 0.4.10 ``[val + 1 for val in layer_ids]``.
"""

import pytest

from workbench.engine.source import EngineSource

LLAMA_LINE = {"0.4.6": 639, "0.4.8": 700, "0.4.10": 743, "0.5.2": 726, "0.5.4": 730, "0.5.9": 778,
              "0.5.12": 798, "0.5.18": 891, "0.5.23": 929}
NO_IDS = {"0.4.6", "0.4.8"}


def _src(box, sglang_release, version):
    return EngineSource(box, str(sglang_release(version)), version)


@pytest.mark.parametrize("version", sorted(LLAMA_LINE))
def test_llama_capture_rule_per_release(box, sglang_release, version):
    src = _src(box, sglang_release, version)
    rule = src.capture_rule("LlamaForCausalLM", 32, [0, 10, 20])
    assert rule.source.endswith(f"srt/models/llama.py:{LLAMA_LINE[version]} (LlamaForCausalLM.set_eagle3_layers_to_capture)")
    if version in NO_IDS:
        assert rule.ignores_ids and rule.captured == [2, 16, 29] and rule.error is None
    else:
        assert not rule.ignores_ids and rule.captured == [1, 11, 21]
    assert src.capture_rule("LlamaForCausalLM", 32, None).captured == [2, 16, 29]


DEEPSEEK = {  # version -> (captured for [1, 29, 57], captured for [2, 30, 58]); None: no method
    "0.4.6": None, "0.4.8": None, "0.4.10": None, "0.5.2": None, "0.5.4": None,
    "0.5.9": ([2, 30, 58], [3, 31, 59]), "0.5.12": ([2, 30, 58], [3, 31, 59]),
    "0.5.18": ([2, 30, 58], [2, 30, 58]), "0.5.23": ([2, 30, 58], [2, 30, 58]),
}


@pytest.mark.parametrize("version", sorted(DEEPSEEK))
def test_deepseek_and_kimi_capture_rule_per_release(box, sglang_release, version):
    src = _src(box, sglang_release, version)
    want = DEEPSEEK[version]
    for arch in ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"):
        if arch.startswith("Kimi") and (version in ("0.5.9",) or want is None):
            # 0.5.9 has the class but not the method; older releases have no kimi_k25.py
            assert src.capture_rule(arch, 61, [1, 29, 57]) is None
            continue
        if want is None:
            assert src.capture_rule(arch, 61, [1, 29, 57]) is None, (arch, version)
            continue
        one, two = (src.capture_rule(arch, 61, ids) for ids in ([1, 29, 57], [2, 30, 58]))
        assert (one.captured, two.captured) == want, (arch, version)
        assert not one.ignores_ids
        if arch.startswith("Kimi"):
            assert "kimi_k25.py" in one.source and "→" in one.source and "deepseek_v2.py" in one.source
