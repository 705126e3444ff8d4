"""What a fault family proposes to do about its findings: a :class:`Fix`, and for fixes that change
the draft, the :class:`DraftRepair` a copy of the draft gets (the user's files are never changed).

Kinds of fix (:data:`FIX_KINDS`):

- ``launch``: a change of the launch command (``launch``: flag → new value, ``None`` removes it);
- ``draft-copy``: a repaired copy of the draft on the box (``repair``), the relaunch pointing
  ``--speculative-draft-model-path`` at it;
- ``candidates``: the fix cannot be derived, but known conventions can be tried, each measured
  (``candidates``: alternative repairs or launch changes, best first);
- ``none``: nothing the workbench can derive; ``missing`` says exactly what is missing and how to
  supply it (a runbook parameter where that makes sense).

A repair is data only; :mod:`workbench.session.draft_copy` makes the copy on the box (journalled,
removed at the end unless kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["FIX_KINDS", "Fix", "DraftRepair", "TensorData"]

FIX_KINDS = ("launch", "draft-copy", "candidates", "none")


@dataclass(frozen=True)
class TensorData:
    """A tensor to write into the copy: ``dtype`` (safetensors dtype string, ``"I64"``), ``shape``
    and ``values`` (a flat list of Python numbers in C order, ``len == prod(shape)``)."""

    dtype: str
    shape: tuple[int, ...]
    values: tuple

    def __post_init__(self) -> None:
        n = 1
        for d in self.shape:
            n *= d
        if len(self.values) != n:
            raise ValueError(f"TensorData: {len(self.values)} values for shape {self.shape} ({n} expected)")


@dataclass
class DraftRepair:
    """Changes to a copy of the draft directory.

    ``renames``: checkpoint tensor name → new name (the data unchanged); ``tensors``: name →
    :class:`TensorData` to write (replacing a tensor of that name, or adding it); ``config``:
    top-level ``config.json`` keys → new values (a nested dict such as ``eagle_config`` replaces
    the whole key); ``config_remove``: top-level keys to delete; ``reasons``: one line per change,
    naming the rule that asked for it (shown in the verdict and the report); ``transposes``: names
    (in the copy, after the renames) of 2-D tensors written transposed (``[a, b]`` → ``[b, a]``, the
    data moved, not only the header).
    """

    renames: dict[str, str] = field(default_factory=dict)
    tensors: dict[str, TensorData] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    config_remove: tuple[str, ...] = ()
    reasons: list[str] = field(default_factory=list)
    transposes: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.renames or self.tensors or self.config or self.config_remove or self.transposes)

    def merged(self, other: "DraftRepair") -> "DraftRepair":
        """This repair and ``other`` together (``other`` wins where both set the same key or
        tensor); raises ``ValueError`` when both rename the same tensor differently."""
        for name, new in other.renames.items():
            if name in self.renames and self.renames[name] != new:
                raise ValueError(f"two repairs rename {name!r}: to {self.renames[name]!r} and to {new!r}")
        return DraftRepair({**self.renames, **other.renames}, {**self.tensors, **other.tensors},
                           {**self.config, **other.config},
                           tuple(dict.fromkeys(self.config_remove + other.config_remove)),
                           self.reasons + other.reasons,
                           tuple(dict.fromkeys(self.transposes + other.transposes)))

    def to_dict(self) -> dict:
        return {"renames": dict(self.renames),
                "tensors": {n: {"dtype": t.dtype, "shape": list(t.shape)} for n, t in self.tensors.items()},
                "config": dict(self.config), "config_remove": list(self.config_remove),
                "transposes": list(self.transposes), "reasons": list(self.reasons)}


@dataclass
class Fix:
    """One fix a family derives from its findings.

    ``kind``: one of :data:`FIX_KINDS`; ``rules``: the finding ids it answers; ``summary``: one
    line for the verdict; ``launch``: flag → value (``None`` removes the flag) for ``launch``;
    ``repair``: for ``draft-copy``; ``candidates``: for ``candidates``, each ``{"label", "launch",
    "repair"}``; ``missing``: for ``none``, what is missing and how to supply it; ``parameter``:
    the runbook parameter that would supply it, when there is one.
    """

    kind: str
    rules: tuple[str, ...]
    summary: str
    launch: dict[str, Any] = field(default_factory=dict)
    repair: DraftRepair | None = None
    candidates: list[dict] = field(default_factory=list)
    missing: str | None = None
    parameter: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in FIX_KINDS:
            raise ValueError(f"Fix.kind must be one of {FIX_KINDS}, got {self.kind!r}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "rules": list(self.rules), "summary": self.summary, "launch": dict(self.launch),
                "repair": self.repair.to_dict() if self.repair is not None else None,
                "candidates": [{"label": c.get("label"), "launch": c.get("launch") or {},
                                "repair": c["repair"].to_dict() if c.get("repair") is not None else None}
                               for c in self.candidates],
                "missing": self.missing, "parameter": self.parameter}
