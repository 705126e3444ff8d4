"""The fault matrix's rows (issue 12), shared by ``tests/integration/test_fault_matrix.py`` and
``benchmarks/bench_diagnose.py``: per case the faults injected (``testkit.faults``), the runbook
parameters, and what the verdict must say.

Also what the matrix publishes for the other tests of the session that need one of its runs
(``testkit.session_share``; tests/integration/test_verdicts_under_load.py): :data:`PROMPTS`, the
run's inputs (:func:`run_inputs`) and what its verdict decided (:func:`signature`), under
:func:`entry_name`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["Case", "CASES", "case", "GUARD_REFUSES", "UNMODELLED_DEATHS", "PROMPTS", "signature", "step_times", "run_inputs", "entry_name"]

#: the prompts every matrix diagnosis measures with (the healthy draft is healthy on them)
PROMPTS = dict(num_prompts=4, max_new_tokens=64)


@dataclass(frozen=True)
class Case:
    """One row of the matrix: the faults injected, the runbook parameters, and what the verdict
    must say: the hypotheses confirmed (in the order they act), rules among the findings, the fix
    kinds applied, the outcome, whether the fix must bring acceptance back to the healthy level,
    whether the server starts as found, and whether the launch guard refuses the as-found launch
    (the doctor's findings say it will not start: no launch is spent on it, issue 13)."""

    name: str
    faults: tuple[str, ...]
    causes: tuple[str, ...]
    rules: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    outcome: str = "fixed"
    fixable: bool = True
    params: dict = field(default_factory=dict)
    starts_as_found: bool = True
    refused_as_found: bool = False


CASES = [
    Case("algorithm-flag", ("eagle-flag",), ("algorithm-flag",), ("algorithm-mismatch",), ("launch",)),
    Case("eagle-config-missing", ("no-eagle-config",), ("aux-eagle-config",), ("aux-config-unread",),
         ("draft-copy",), params={"aux_layer_ids": [1, 3, 6]}),
    Case("eagle-config-missing-ids-unknown", ("no-eagle-config",), (), ("aux-config-unread",), (),
         outcome="unexplained", fixable=False),
    Case("aux-ids-out-of-range", ("aux-ids-out-of-range",), ("aux-layer-ids",), ("aux-layer-ids-out-of-range",),
         ("draft-copy",), params={"aux_layer_ids": [1, 3, 6]}, starts_as_found=False, refused_as_found=True),
    Case("aux-offset-convention", ("aux-ids-shifted",), ("aux-offset-convention",), ("aux-layer-offset-convention",),
         ("draft-copy",)),
    Case("target-without-capture", ("target-no-capture",), ("target-capture",), ("target-no-aux-capture",), (),
         outcome="cause-found", fixable=False, starts_as_found=False, refused_as_found=True),
    Case("weights-dropped", ("renamed-tensor",), ("weights-loaded",), ("weights-dropped", "weights-missing"),
         ("draft-copy",)),
    # every name in another framework's naming (Meta's): the repair learns the naming, not shape pairs
    Case("weights-framework-naming", ("framework-naming",), ("weights-loaded",), ("weights-dropped", "weights-missing"),
         ("draft-copy",)),
    Case("token-map", ("d2t-minus-arange",), ("token-map",), ("token-map-invalid",), ("draft-copy",)),
    Case("config-vs-target", ("target-hidden-mismatch",), ("config-vs-target",), ("hidden-size-mismatch",),
         ("draft-copy",), starts_as_found=False, refused_as_found=True),
    Case("draft-config-vs-tensors", ("draft-hidden-size",), ("config-vs-target",), ("draft-config-vs-tensors",),
         ("draft-copy",), starts_as_found=False, refused_as_found=True),
    Case("draft-architecture-unknown", ("draft-unknown-architecture",), ("config-vs-target",),
         ("unknown-draft-architecture",), ("draft-copy",), starts_as_found=False, refused_as_found=True),
    Case("config-fault-without-effect", ("vocab-mismatch",), ("config-vs-target",), ("vocab-size-mismatch",), (),
         outcome="latent", fixable=False),
    # fc.weight stored [in, out]: named transposed, the copy holds it transposed (issue 29 trial item 6)
    Case("fc-transposed", ("fc-transposed",), ("weights-loaded",), ("weight-shape-mismatch", "aux-count-mismatch"),
         ("draft-copy",), starts_as_found=False, refused_as_found=True),
    Case("spec-params", ("spec-params-without-steps",), ("spec-params",), ("spec-params-invalid",), ("launch",),
         starts_as_found=False, refused_as_found=True),
    Case("spec-steps-zero", ("spec-steps-zero",), ("spec-params",), ("spec-params-invalid",), ("launch",)),
    Case("checkpoint-unreadable", ("truncated-checkpoint",), ("checkpoint-readable",), ("checkpoint-unreadable",), (),
         outcome="cause-found", fixable=False, starts_as_found=False, refused_as_found=True),
    Case("layered-flag-and-token-map", ("eagle-flag", "d2t-minus-arange"), ("algorithm-flag", "token-map"),
         ("algorithm-mismatch", "token-map-invalid"), ("draft-copy", "launch")),
    Case("layered-flag-and-shuffled-token-map", ("eagle-flag", "d2t-shuffled"), ("algorithm-flag", "token-map"),
         ("algorithm-mismatch", "token-map-unordered"), ("draft-copy", "launch")),
    Case("layered-weights-and-eagle-config", ("renamed-tensor", "no-eagle-config"),
         ("weights-loaded", "aux-eagle-config"), ("weights-dropped", "aux-config-unread"), ("draft-copy",),
         params={"aux_layer_ids": [1, 3, 6]}),
    Case("masked-eagle-config-behind-the-flag", ("eagle-flag", "no-eagle-config"), ("algorithm-flag", "aux-eagle-config"),
         ("algorithm-mismatch", "aux-config-unread"), ("draft-copy", "launch"), params={"aux_layer_ids": [1, 3, 6]}),
]


def case(name: str) -> Case:
    """The row ``name``; ``KeyError`` naming the rows for another name."""
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no fault-matrix case {name!r} (cases: {', '.join(c.name for c in CASES)})")


#: Every fault of ``testkit.faults`` and the rules whose findings make the launch guard refuse its
#: launch: exactly the faults the sandbox engine dies on while it starts (``starts_as_found=False``
#: above; tests/sandbox/test_sandbox_faults.py launches each to show it), none of those
#: it serves with (they lower acceptance, and the diagnosis needs that launch to measure it).
GUARD_REFUSES = {
    "healthy": set(), "no-eagle-config": set(), "aux-ids-top-level": set(),
    "aux-ids-out-of-range": {"aux-layer-ids-out-of-range"}, "aux-ids-shifted": set(),
    "target-no-capture": {"target-no-aux-capture"}, "renamed-tensor": set(), "d2t-minus-arange": set(),
    "d2t-shuffled": set(), "d2t-missing": set(),
    # the draft's first forward (the engine's warm-up): indexed past d2t's end, or with float ids
    "d2t-short": {"token-map-invalid"}, "d2t-float": {"token-map-invalid"},
    "vocab-mismatch": set(), "target-hidden-mismatch": {"hidden-size-mismatch"},
    # the loader's assert on the transposed fc, and the fc width that follows from it
    "fc-transposed": {"weight-shape-mismatch", "aux-count-mismatch"},
    # the weight loader's asserts: consequences of the config, each one a start-up failure too
    "draft-hidden-size": {"draft-config-vs-tensors", "weight-shape-mismatch", "lm-head-shape-mismatch"},
    "draft-unknown-architecture": {"unknown-draft-architecture"},
    "truncated-checkpoint": {"checkpoint-unreadable"}, "eagle-flag": set(),
    "spec-params-without-steps": {"spec-params-invalid"}, "spec-steps-zero": set(),
    # a death no rule predicts (fc sized by num_aux_hidden_states, two layers captured): launched, it
    # dies in the warm-up, and the diagnosis names the death from the engine's own line
    "aux-ids-fewer-than-num-aux": set(),
    # the naming faults: SGLang skips every name it cannot place, silently (vLLM refuses them: not this box)
    "wrapper-prefix": set(), "stripped-prefix": set(), "framework-naming": set(), "attn-renamed": set(),
}
#: Faults the engine dies on at start-up although the guard lets them launch: no rule models
#: them (the diagnosis names such a death from its log: ``workbench.logs.deaths``).
UNMODELLED_DEATHS = frozenset({"aux-ids-fewer-than-num-aux"})


def signature(verdict: dict) -> dict:
    """What a verdict decides (never how long anything took), in JSON's types (lists, not tuples),
    so that a signature read back from a published file compares equal to a fresh one."""
    return json.loads(json.dumps({
        "outcome": verdict["outcome"],
        "root_causes": [(c["hypothesis"], c["rule"]) for c in verdict["root_causes"]],
        "hypotheses": {h["id"]: h["verdict"] for h in verdict["hypotheses"]},
        "fix_kinds": verdict["fix"]["kinds"],
        "fix_sufficient": verdict["fix"]["sufficient"],
        "restarts": verdict["restarts"],
        "start_failures": [f["label"] for f in verdict["start_failures"]],
        "accept_length": (verdict["acceptance"]["before"]["accept_length"],
                          verdict["acceptance"]["after"]["accept_length"]),
        "probe": {k: verdict["probe"].get(k) for k in ("observed_hidden_size", "expected_hidden_size",
                                                        "observed_widths", "captured_layers", "after_fix_widths")},
    }))


def step_times(verdict: dict) -> dict:
    """The step times of a verdict (seconds): each launch's wait until healthy, each measurement's
    requests (for the record: what a load changes)."""
    out = {f"start {launch['label']}": launch.get("healthy_after_s") for launch in verdict["launches"]
           if launch.get("healthy_after_s") is not None}
    for key in ("before", "after"):
        wall = verdict["acceptance"][key].get("wall_s")
        if wall is not None:
            out[f"measure {key}"] = round(wall, 2)
    return out


def run_inputs(faults, params: dict, expected_accept_length) -> dict:
    """Everything a matrix diagnosis depends on besides the code: the entry point (``DiagnosisRun``
    in process on the local box), the faults, the runbook parameters, :data:`PROMPTS` and the
    expected accept length. Two runs with equal inputs are the same run."""
    return json.loads(json.dumps({"entry": "DiagnosisRun(host=local).run_all", "faults": list(faults),
                                  "params": params, "prompts": PROMPTS,
                                  "expected_accept_length": expected_accept_length}, sort_keys=True))


def entry_name(name: str) -> str:
    """The session-shared entry of the matrix's run ``name`` (a case's name, or ``"healthy"``)."""
    return f"fault-matrix-{name}"
