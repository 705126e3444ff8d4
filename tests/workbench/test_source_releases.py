"""``source find`` following base classes and ``source scan`` naming the handler's line, on the
published SGLang wheels of every covered release (read from the cache, never copied here), and on
small class trees written for the MRO cases no release shows.

Every expected file:line below was found by hand in the unpacked wheel (``grep -n`` / ``sed -n``),
not by the code under test."""

from __future__ import annotations

import json
import textwrap

import pytest

from workbench.engine import EngineSource, SourceLookupError
from workbench.engine.codepath import code_path_map, swallowed_on_path
from workbench.engine.releases import COVERED_RELEASES
from workbench.rules.engine_source import scan_swallowed

# `LlamaForCausalLMEagle3.forward`: srt/models/llama_eagle3.py's class (bases: LlamaForCausalLM,
# imported from sglang.srt.models.llama) defines no forward; llama.py's LlamaForCausalLM does:
# (the `def forward(` line, its `@torch.no_grad()` line), by `grep -n` inside `class LlamaForCausalLM(`.
INHERITED_FORWARD = {
    "0.4.6": (415, 414), "0.4.8": (448, 447), "0.4.10": (448, 447), "0.5.2": (456, 455), "0.5.4": (460, 459),
    "0.5.9": (503, 502), "0.5.12": (515, 514), "0.5.18": (563, 562), "0.5.23": (602, 601),
}

# The broad handler around the draft's eagle_config read: (file, `except` line, the
# `eagle_config = getattr(` line it guards, the handler as written). 0.4.6 and 0.4.8 read no
# eagle_config at all (`grep -rn eagle_config srt/` finds nothing).
AUX = "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
RUNNER = "srt/model_executor/model_runner.py"
EAGLE_CONFIG_HANDLER = {
    "0.4.6": None,
    "0.4.8": None,
    "0.4.10": (RUNNER, 357, 351, "except"),
    "0.5.2": (RUNNER, 412, 406, "except"),
    "0.5.4": (RUNNER, 497, 491, "except"),
    "0.5.9": (RUNNER, 366, 357, "except"),
    "0.5.12": (RUNNER, 439, 430, "except"),
    "0.5.18": (AUX, 94, 85, "except"),
    "0.5.23": (AUX, 195, 188, "except Exception"),
}


def test_tables_cover_every_release():
    assert set(INHERITED_FORWARD) == set(COVERED_RELEASES) == set(EAGLE_CONFIG_HANDLER)


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_find_follows_the_base_class(box, sglang_release, version):
    root = sglang_release(version)
    src = EngineSource(box, str(root), version)
    (d,) = src.find_definition("LlamaForCausalLMEagle3.forward")
    line, first = INHERITED_FORWARD[version]
    assert (d.file, d.line, d.first_line) == (f"{root}/srt/models/llama.py", line, first)
    assert d.qualname == "LlamaForCausalLM.forward" and d.kind == "method"
    assert d.inherited_by == "LlamaForCausalLMEagle3"
    assert d.inherited_from == "LlamaForCausalLM (srt/models/llama.py)"
    assert "inherited by LlamaForCausalLMEagle3 from LlamaForCausalLM (srt/models/llama.py)" in str(d)
    assert (root / "srt/models/llama.py").read_text().splitlines()[line - 1] == "    def forward("
    # a method the class defines itself is its own, not inherited
    (own,) = src.find_definition("LlamaForCausalLMEagle3.load_weights")
    assert own.file == f"{root}/srt/models/llama_eagle3.py" and own.inherited_by is None
    with pytest.raises(SourceLookupError) as err:
        src.find_definition("LlamaForCausalLMEagle3.no_such_method_xyz")
    assert ("LlamaForCausalLMEagle3 (srt/models/llama_eagle3.py), LlamaForCausalLM (srt/models/llama.py) do not "
            "define 'no_such_method_xyz'") in str(err.value)


def _tree(tmp_path, files: dict[str, str]):
    root = tmp_path / "pkg" / "sglang"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_find_uses_python_mro_not_depth_first(box, tmp_path):
    """D(B, C), B(A), C(A): Python's MRO is D B C A, so C.m wins over A.m (depth-first would give
    A.m); a same-named base means the imported class, not the class itself; a base outside the
    package ends the search; an unknown base is named in the error."""
    root = _tree(tmp_path, {
        "srt/models/base.py": """\
            import torch.nn as nn


            class A(nn.Module):
                def m(self):
                    return "A"

                def only_a(self):
                    return "A"


            class Layer:
                def run(self):
                    return "base layer"
            """,
        "srt/models/mid.py": """\
            from sglang.srt.models.base import A


            class B(A):
                pass


            class C(A):
                def m(self):
                    return "C"
            """,
        "srt/models/top.py": """\
            from sglang.srt.models.base import Layer
            from .mid import B, C


            class Layer(Layer):
                pass


            class D(B, C):
                pass


            class E(Missing):
                pass
            """,
    })
    src = EngineSource(box, str(root), "test")
    (m,) = src.find_definition("D.m")
    assert (m.file, m.line, m.qualname, m.inherited_from) == (f"{root}/srt/models/mid.py", 9, "C.m",
                                                              "C (srt/models/mid.py)")
    (a,) = src.find_definition("D.only_a")
    assert (a.file, a.line, a.inherited_from) == (f"{root}/srt/models/base.py", 8, "A (srt/models/base.py)")
    (run,) = src.find_definition("Layer.run")  # base.py's own Layer.run is the only definition
    assert run.file == f"{root}/srt/models/base.py" and run.inherited_by is None
    found = src.find_definition("Layer.run", file="srt/models/top.py")
    assert [(d.file, d.line, d.inherited_by) for d in found] == [(f"{root}/srt/models/base.py", 13, "Layer")]
    with pytest.raises(SourceLookupError) as err:
        src.find_definition("E.m")
    assert "base(s) not found in the engine source: Missing" in str(err.value)
    with pytest.raises(SourceLookupError) as err:
        src.find_definition("D.nothing")
    assert "nn" not in str(err.value) and "Module" not in str(err.value)


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_scan_names_the_handler_line(box, sglang_release, version):
    root = sglang_release(version)
    src = EngineSource(box, str(root), version)
    handlers = [s for s in swallowed_on_path(src, code_path_map(src, keys=["eagle-config-read"]))
                if s.kind == "handler"]
    want = EAGLE_CONFIG_HANDLER[version]
    if want is None:
        assert handlers == []
        return
    rel, line, guarded, kind = want
    (s,) = handlers
    assert (s.rel, s.line, s.guarded_line, s.handler_kind) == (rel, line, guarded, kind)
    assert s.handler == f"{kind}: (line {line})"
    text = (root / rel).read_text().splitlines()
    assert text[line - 1].strip() == f"{kind}:"
    assert text[guarded - 1].strip().startswith("eagle_config = getattr(")
    (f,) = [f for f in scan_swallowed(src, code_path_map(src, keys=["eagle-config-read"]))
            if "guarded" in f.evidence]
    assert f.evidence["source"]["value"] == f"{root}/{rel}:{line}"
    assert f.evidence["guarded"]["value"] == f"{root}/{rel}:{guarded}"
    assert f.message.startswith(f"{rel}:{line} ") and f"(line {guarded}: `eagle_config = getattr(" in f.message


def test_cli_find_says_inherited(cli, sglang_release, monkeypatch):
    """``workbench source find`` prints the inherited method with where it comes from (0.5.9)."""
    root = sglang_release("0.5.9")
    monkeypatch.setenv("PYTHONPATH", str(root.parent))
    code, out, err = cli("source", "find", "LlamaForCausalLMEagle3.forward", "--python", "python3", "--json")
    assert code == 0, err
    (d,) = json.loads(out)
    assert (d["file"], d["line"], d["inherited_by"]) == (f"{root}/srt/models/llama.py", 503, "LlamaForCausalLMEagle3")
    code, out, err = cli("source", "find", "LlamaForCausalLMEagle3.forward", "--python", "python3")
    assert code == 0 and out.strip() == (f"{root}/srt/models/llama.py:503  method LlamaForCausalLM.forward (lines "
                                         "502-536), inherited by LlamaForCausalLMEagle3 from LlamaForCausalLM "
                                         "(srt/models/llama.py)")
