"""Where the engine reads the draft's ``eagle_config.use_aux_hidden_state`` and the test that skips
the aux capture when it is false: :func:`aux_capture_switch` -> :class:`AuxSwitch` (SGLang 0.5.8 …;
``None`` on 0.4.6 … 0.5.7, which never read the key). Read by :mod:`workbench.rules.aux_layers`.

Imports: :mod:`.ast_tools`, :mod:`.landmarks` (the aux set-up files, the capture-call matcher and
its flag gate) and :mod:`workbench.engine.source`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from workbench.engine.codepath.ast_tools import _first_line, _in_order, _own_exprs, _seg
from workbench.engine.codepath.landmarks import MODEL_RUNNER_FILE, SPEC_AUX_FILE, _flag_gate, _m_capture_call
from workbench.engine.source import EngineSource

@dataclass(frozen=True)
class AuxSwitch:
    """Where the engine reads the draft's ``eagle_config.use_aux_hidden_state`` and the test that
    skips the aux capture when it is false (:func:`aux_capture_switch`). ``read`` / ``gate``:
    ``(absolute file, line, code)``; ``default``: the ``.get`` default's source text; ``condition``:
    the gate's test as written (``not ...`` for an early return)."""

    read: tuple[str, int, str]
    default: Optional[str]
    gate: Optional[tuple[str, int, str]]
    condition: Optional[str]


def aux_capture_switch(src: EngineSource) -> Optional[AuxSwitch]:
    """The box's read of ``eagle_config.get("use_aux_hidden_state", ...)`` (SGLang 0.5.8
    ``model_runner.py:336``, 0.5.23 ``model_runner_components/spec_aux_hidden_state.py:189``) and
    the gate around the capture call (0.5.8 ``model_runner.py:587``, 0.5.23
    ``attention_backend_setup.py:54``), found with :mod:`ast` in the aux set-up files, else in the
    files under ``srt/`` (not ``srt/models``) holding the key; ``None`` when the release never
    reads it (0.4.6 … 0.5.7): it always captures under EAGLE3. Box errors propagate."""
    files = [SPEC_AUX_FILE, MODEL_RUNNER_FILE]
    hits = src.grep(["use_aux_hidden_state"])["use_aux_hidden_state"]
    files += sorted({r for r, _ in hits if r.startswith("srt/") and not r.startswith("srt/models/")} - set(files))
    read = None
    for rel in files:
        tree = src.tree(rel)
        if tree is None:
            continue
        text = src.read(rel) or ""
        for stmt, _parents in _in_order(tree):
            call = next((n for n in _own_exprs(stmt) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                         and n.func.attr == "get" and n.args and isinstance(n.args[0], ast.Constant)
                         and n.args[0].value == "use_aux_hidden_state"), None)
            if call is not None:
                line = _first_line(stmt)
                read = (src.path(rel), line, " ".join(_seg(text, stmt).split()),
                        _seg(text, call.args[1]) if len(call.args) > 1 else None)
                break
        if read is not None:
            break
    if read is None:
        return None
    gate = None
    for rel in ["srt/model_executor/model_runner_components/attention_backend_setup.py"] + files:
        tree = src.tree(rel)
        if tree is None:
            continue
        text = src.read(rel) or ""
        for stmt, parents in _in_order(tree):
            if _m_capture_call(stmt, parents, text):
                g = _flag_gate(stmt, parents)
                if g is not None:
                    node, early = g
                    cond = _seg(text, node.test)
                    gate = (src.path(rel), node.lineno, text.splitlines()[node.lineno - 1].strip(),
                            cond if not early else f"{cond} → return")
                    break
        if gate is not None:
            break
    return AuxSwitch(read[:3], read[3], gate[:3] if gate else None, gate[3] if gate else None)
