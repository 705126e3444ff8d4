"""Trial 29 item 5: SGLang's speculative flags on a vLLM launch must not hide the draft's faults:
the doctor also runs the rules on the corrected launch it proposes (the draft translated into
--speculative-config) and reports that launch's findings, marked."""

from __future__ import annotations

import shlex

from testkit.faults import build_deployment
from testkit.vllm_servers import vllm_python

from workbench.doctor import run_doctor
from workbench.doctor.run import CORRECTED_LAUNCH_KEY


def _sglang_flags_on_vllm(dep) -> str:
    return shlex.join([str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(dep.target_dir),
                       "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(dep.draft_dir),
                       "--speculative-num-steps", "3"])


def test_the_drafts_faults_are_reported_on_the_corrected_launch(box, tmp_path):
    dep = build_deployment(tmp_path / "d", "wrapper-prefix")
    rep = run_doctor(box, _sglang_flags_on_vllm(dep))
    flag = [f for f in rep.findings if f.rule == "vllm-flag-unknown"]
    assert len(flag) == 1 and CORRECTED_LAUNCH_KEY not in flag[0].evidence
    corrected = rep.corrected_launch()
    assert corrected is not None and "--speculative-config" in corrected and str(dep.draft_dir) in corrected
    of_fixed = [f for f in rep.findings if CORRECTED_LAUNCH_KEY in f.evidence]
    assert {"weights-dropped", "weights-missing"} <= {f.rule for f in of_fixed}, rep.rules
    assert all(f.evidence[CORRECTED_LAUNCH_KEY] == corrected and f.message.startswith("on the corrected launch: ")
               for f in of_fixed)
    assert any("rules also ran on the corrected launch" in n for n in rep.notes)
    assert rep.draft_facts is not None and rep.draft_facts.path.endswith("draft")
    # the same draft launched as vLLM reads it: the same faults, unmarked
    direct = run_doctor(box, corrected)
    assert {f.rule for f in of_fixed} <= set(direct.rules)
    assert not [f for f in direct.findings if CORRECTED_LAUNCH_KEY in f.evidence]


def test_a_healthy_draft_behind_sglang_flags_adds_no_error(box, tmp_path):
    dep = build_deployment(tmp_path / "d", "healthy")
    rep = run_doctor(box, _sglang_flags_on_vllm(dep))
    assert [f.rule for f in rep.findings if f.severity == "error"] == ["vllm-flag-unknown"]
    assert any("rules also ran on the corrected launch" in n for n in rep.notes)
