"""eagle-workbench: diagnose EAGLE / EAGLE-3 speculative decoding on SGLang boxes.

Kept import-free (the standard library's ``sys`` only) so that ``python -m
workbench.sandbox.launch_server`` loads nothing else. The one thing it does: an import of a module
of the old flat layout (``workbench.launch``, ``workbench.diagnose``, ...) fails with a
``ModuleNotFoundError`` that says where the module went (docs/ARCHITECTURE.md, "Packages").
"""

import sys

#: Modules of the flat layout (until the packages of issue 11) and where their contents are now.
MOVED_MODULES = {
    "workbench.acceptance": "workbench.measure.generate (load_prompts: workbench.measure.prompts; the log "
                            "parsers: workbench.logs)",
    "workbench.argtypes": "workbench.cli.argtypes",
    "workbench.codepath": "workbench.engine.codepath (RECIPES, recipe_probe, add_recipe: workbench.engine.recipes; "
                          "scan_swallowed: workbench.rules.engine_source)",
    "workbench.diagnosis.panel": "workbench.lab.panel (the JupyterLab widgets: workbench.lab)",
    "workbench.diagnose": "workbench.diagnosis (DiagnosisRun); BoxSession, open_box, take_inventory: "
                          "workbench.session; sandbox_launch_command, sandbox_prompts_path: workbench.sandbox_box",
    "workbench.draft_checks": "workbench.rules.weights (expected_parameters, map_checkpoint_name: "
                              "workbench.engine.load_weights)",
    "workbench.figures": "workbench.report.figures",
    "workbench.journal": "workbench.session.journal",
    "workbench.launch": "workbench.engine.launch",
    "workbench.ledger": "workbench.diagnosis.ledger",
    "workbench.logs_cli": "workbench.cli.logs",
    "workbench.measure_cli": "workbench.cli.measure",
    "workbench.panel": "workbench.lab.panel",
    "workbench.sglang_flags": "workbench.engine.flags (the table itself: workbench/engine/data/, JSON)",
    "workbench.source_cli": "workbench.cli.source",
    "workbench.sweep": "workbench.measure.sweep",
}


class _MovedModuleFinder:
    """Last on ``sys.meta_path``: asked only for a module no other finder found, it answers an old
    flat-layout name with a ``ModuleNotFoundError`` naming the new place, and anything else with
    ``None`` (not found, as usual)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name in MOVED_MODULES:
            raise ModuleNotFoundError(f"No module named {name!r}: it moved to {MOVED_MODULES[name]} "
                                      "(docs/ARCHITECTURE.md lists the packages)", name=name)
        return None


if not any(isinstance(f, type) and f.__name__ == "_MovedModuleFinder" for f in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder)
