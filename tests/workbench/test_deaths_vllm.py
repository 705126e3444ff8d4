"""vLLM's own start-up deaths, produced by the real vLLM 0.32.0 CPU build at test time: one offline
``vllm.LLM`` process (``testkit.vllm_deaths``) builds an engine on each faulty copy of the sandbox
draft, and :func:`workbench.logs.deaths.read_death` reads what it printed — the engine's final
exception, the step (vLLM reads the draft's config at launch, loads it after the target), the known
death and the rules that model it."""

from __future__ import annotations

import json

import pytest

from testkit.faults import build_deployment
from testkit.vllm_deaths import capture
from testkit.vllm_servers import TARGET, require_vllm, server_env, vllm_python
from workbench.logs.deaths import attribute, read_death

pytestmark = pytest.mark.vllm

#: case -> (signature id, step, a fragment of the engine's line); None: vLLM starts with it
EXPECTED = {
    "target-hidden-mismatch": ("vllm-linear-shape-assert", "load-draft",
                               "Tried to load weights of size torch.Size([160, 480])to a parameter of size "
                               "torch.Size([160, 576])"),
    "renamed-tensor": ("vllm-no-module-or-parameter", "load-draft",
                       "There is no module or parameter named 'layers.0.self_attn.qproj' in LlamaModel"),
    "draft-hidden-size": ("hidden-not-multiple-of-heads", "launch",
                          "The hidden size (128) is not a multiple of the number of attention heads (5)"),
    "d2t-short": ("weight-loader-shape-assert", "load-draft",
                  "Attempted to load weight (torch.Size([32])) into parameter (torch.Size([128]))"),
    "unknown-architecture": ("architecture-not-supported", "launch", "Model architectures ['NoSuchEagle3ForCausalLM']"),
    # vLLM sizes the draft's fc from the aux ids it captures: it starts (SGLang dies in its warm-up)
    "aux-ids-fewer-than-num-aux": None,
}


@pytest.fixture(scope="module")
def deaths(tmp_path_factory):
    require_vllm()
    root = tmp_path_factory.mktemp("vllm-deaths")
    drafts = {}
    for case in EXPECTED:
        fault = "healthy" if case == "unknown-architecture" else case
        dep = build_deployment(root / case, *(() if fault == "healthy" else (fault,)))
        if case == "unknown-architecture":
            cfg = dep.draft_dir / "config.json"
            data = json.loads(cfg.read_text())
            data["architectures"] = ["NoSuchEagle3ForCausalLM"]
            cfg.unlink()  # a copy (never written through the link to the committed file)
            cfg.write_text(json.dumps(data))
        drafts[case] = str(dep.draft_dir)
    return capture(str(vllm_python()), TARGET, drafts, server_env())


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_vllm_death_read_from_its_own_text(deaths, case):
    text = deaths[case]
    death = read_death(text.splitlines(), engine="vllm")
    if EXPECTED[case] is None:
        assert "STARTED" in text and death is None, text[-2000:]
        return
    sig, step, fragment = EXPECTED[case]
    assert death is not None, text[-3000:]
    assert fragment in death.exception, death.exception
    assert (death.signature.id if death.signature else None, death.step) == (sig, step), death.to_dict()
    assert death.engine == "vllm" and death.where  # the raising frame in vLLM's (or transformers') code


def test_a_vllm_death_maps_to_the_rule_the_doctor_found(deaths):
    death = read_death(deaths["renamed-tensor"].splitlines(), engine="vllm")
    assert attribute(death, ["weights-dropped"])["rules"] == ["weights-dropped"]
    unexplained = attribute(death, [])
    assert not unexplained["explained"] and "load-draft" in unexplained["why"]
    assert "There is no module or parameter named" in unexplained["why"]
