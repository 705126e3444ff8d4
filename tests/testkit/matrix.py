"""The fault matrix's rows (issue 12), shared by ``tests/integration/test_fault_matrix.py`` and
``benchmarks/bench_diagnose.py``: per case the faults injected (``testkit.faults``), the runbook
parameters, and what the verdict must say."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Case", "CASES", "case", "GUARD_REFUSES"]


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
    Case("token-map", ("d2t-minus-arange",), ("token-map",), ("token-map-invalid",), ("draft-copy",)),
    Case("config-vs-target", ("target-hidden-mismatch",), ("config-vs-target",), ("hidden-size-mismatch",),
         ("draft-copy",), starts_as_found=False, refused_as_found=True),
    Case("draft-config-vs-tensors", ("draft-hidden-size",), ("config-vs-target",), ("draft-config-vs-tensors",),
         ("draft-copy",), starts_as_found=False, refused_as_found=True),
    Case("draft-architecture-unknown", ("draft-unknown-architecture",), ("config-vs-target",),
         ("unknown-draft-architecture",), ("draft-copy",), starts_as_found=False, refused_as_found=True),
    Case("config-fault-without-effect", ("vocab-mismatch",), ("config-vs-target",), ("vocab-size-mismatch",), (),
         outcome="latent", fixable=False),
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
#: above; tests/integration/test_launch_guard_sandbox.py launches each to show it), none of those
#: it serves with (they lower acceptance, and the diagnosis needs that launch to measure it).
GUARD_REFUSES = {
    "healthy": set(), "no-eagle-config": set(), "aux-ids-top-level": set(),
    "aux-ids-out-of-range": {"aux-layer-ids-out-of-range"}, "aux-ids-shifted": set(),
    "target-no-capture": {"target-no-aux-capture"}, "renamed-tensor": set(), "d2t-minus-arange": set(),
    "d2t-shuffled": set(), "d2t-missing": set(),
    # the draft's first forward (the engine's warm-up): indexed past d2t's end, or with float ids
    "d2t-short": {"token-map-invalid"}, "d2t-float": {"token-map-invalid"},
    "vocab-mismatch": set(), "target-hidden-mismatch": {"hidden-size-mismatch"},
    # the weight loader's asserts: consequences of the config, each one a start-up failure too
    "draft-hidden-size": {"draft-config-vs-tensors", "weight-shape-mismatch", "lm-head-shape-mismatch"},
    "draft-unknown-architecture": {"unknown-draft-architecture"},
    "truncated-checkpoint": {"checkpoint-unreadable"}, "eagle-flag": set(),
    "spec-params-without-steps": {"spec-params-invalid"}, "spec-steps-zero": set(),
}
