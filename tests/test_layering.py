"""The import graph keeps the design's layering (docs/ARCHITECTURE.md, "Packages").

Read from the source with ``ast`` (every ``import`` / ``from ... import``, also the ones inside
functions: a lazy import is still an import), never by importing the modules:

- no import cycle among the modules of ``remote/`` and ``workbench/``;
- ``remote`` never imports ``workbench``;
- the sandbox (``workbench.sandbox``) imports neither ``remote`` nor the rest of ``workbench``, and
  nothing in ``remote`` or ``workbench`` outside it imports it;
- inside ``workbench``, each part imports only the parts below it in :data:`LAYERS`.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The parts of ``workbench``, lowest first. A part may import its own modules and any part of a
#: lower layer; parts in the same layer do not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("workbench.errors", "workbench.redact"),
    ("workbench.report", "workbench.checkpoint"),
    ("workbench.engine",),
    ("workbench.rules", "workbench.sandbox_box"),
    ("workbench.doctor", "workbench.logs"),
    ("workbench.session",),
    ("workbench.measure",),
    ("workbench.runbook_params",),
    ("workbench.diagnosis",),
    ("workbench.lab",),  # the JupyterLab widgets over the diagnosis
    ("workbench.cli",),
]
RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}

#: The rooms inside a part (issue 27): a package split by responsibility, its modules in layers,
#: lowest first. A module imports only modules of its own room in lower layers (its room's
#: ``__init__``, the re-exporting front door, aside); modules in one layer do not import each other.
ROOMS: dict[str, list[tuple[str, ...]]] = {
    # the diagnosis: values, then the services every step shares, then the steps in the order
    # they use each other, the verdict, and the orchestrator on top
    "workbench.diagnosis": [
        ("ledger", "results", "words", "acceptance", "loads", "steps"),
        ("context",),
        ("deaths",),
        ("serving",),
        ("steps.symptom", "steps.static", "steps.relaunch"),
        ("steps.hypotheses", "steps.candidates", "steps.ladder"),
        ("steps.readings",),
        ("steps.probe",),
        ("steps.fixes", "steps.live"),
        ("verdict",),
        ("steps.finish",),
        ("summary",),
        ("run",),
    ],
    # probes on the box: the record and the expression whitelist; the run-time guard, the journal,
    # files on the box, reading lines back; the text of a probe block; placing and reverting
    "remote.probes": [
        ("record", "whitelist"),
        ("guard", "journal", "files", "read"),
        ("text",),
        ("place", "revert"),
    ],
    # launch commands: flag resolution, tokens, reading / the speculative config / display,
    # rewriting, the class
    "workbench.engine.launch": [
        ("resolve",),
        ("tokens",),
        ("parse", "speculative", "display"),
        ("rewrite",),
        ("command",),
    ],
    # the code-path map: AST helpers, which worker runs, the map and its landmarks, building it
    "workbench.engine.codepath": [
        ("ast_tools",),
        ("worker",),
        ("model", "landmarks"),
        ("aux_switch", "build", "swallowed"),
    ],
}
#: The most lines a module of a room may have (issue 27: rooms of a size one can live in).
ROOM_MAX_LINES = 500


def _modules() -> dict[str, Path]:
    mods = {}
    for top in ("remote", "workbench"):
        for p in sorted((ROOT / top).rglob("*.py")):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            mods[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return mods


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports (``from pkg import sub`` counts ``pkg.sub`` when it is
    a module)."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    found = set()
    for target in out:
        # the deepest project module the dotted name names (a.b.Name -> a.b)
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


@functools.lru_cache(maxsize=None)
def graph() -> dict[str, set[str]]:
    """The import graph: each project module -> the project modules it imports (:func:`_imports`).
    Built on first use, not at import: parsing all ~2.5 MB of ``remote/`` and ``workbench/`` costs
    ~1.2 s of CPU, and every pytest process imports this module to collect it (each xdist worker),
    while only the one that runs these tests needs the graph."""
    return {name: _imports(name, path) for name, path in MODULES.items()}


def _in_sandbox(module: str) -> bool:
    return module == "workbench.sandbox" or module.startswith("workbench.sandbox.")


def _part(module: str) -> str | None:
    for part in sorted(RANK, key=len, reverse=True):
        if module == part or module.startswith(part + "."):
            return part
    return None


def test_every_workbench_module_has_a_layer():
    unplaced = [m for m in MODULES if m.startswith("workbench.") and not _in_sandbox(m) and _part(m) is None]
    assert unplaced == [], f"add these to LAYERS (or move them into a part): {unplaced}"


def test_no_import_cycle():
    # a package's __init__ importing its own submodules (and they the package) is not a cycle
    def edges(m):
        return {d for d in graph()[m] if not d.startswith(m + ".") and not m.startswith(d + ".")}

    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for d in sorted(edges(m)):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d] if d in stack else [m, d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(graph()):
        if m not in state:
            visit(m, [m])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_remote_never_imports_workbench():
    bad = {m: sorted(d for d in deps if d.startswith("workbench")) for m, deps in graph().items() if m.startswith("remote")}
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_sandbox_stands_alone():
    inside = {m for m in graph() if _in_sandbox(m)}
    out_of_sandbox = {m: sorted(d for d in graph()[m] if d not in inside and d != "workbench") for m in inside}
    assert {m: d for m, d in out_of_sandbox.items() if d} == {}
    into_sandbox = {m: sorted(d for d in deps if d in inside) for m, deps in graph().items() if m not in inside}
    assert {m: d for m, d in into_sandbox.items() if d} == {}


def test_workbench_package_itself_imports_nothing():
    # `python -m workbench.sandbox.launch_server` must load nothing but the sandbox
    assert graph()["workbench"] == set()


@pytest.mark.parametrize("part", sorted(RANK))
def test_each_part_imports_only_lower_layers(part):
    wrong = {}
    for m, deps in graph().items():
        if _part(m) != part:
            continue
        for d in deps:
            dp = _part(d)
            if dp is None or dp == part:
                continue
            if RANK[dp] >= RANK[part]:
                wrong.setdefault(m, []).append(d)
    assert wrong == {}, f"{part} (layer {RANK[part]}) imports a part that is not below it: {wrong}"


def _room_rank(room: str) -> dict[str, int]:
    return {f"{room}.{name}": i for i, layer in enumerate(ROOMS[room]) for name in layer}


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_every_module_of_a_room_has_a_layer(room):
    rank = _room_rank(room)
    unplaced = sorted(m for m in MODULES if m.startswith(room + ".") and m not in rank)
    assert unplaced == [], f"add these to ROOMS[{room!r}]: {unplaced}"
    assert sorted(m for m in rank if m not in MODULES) == [], "ROOMS names modules that do not exist"


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_imports_only_lower_layers(room):
    rank = _room_rank(room)
    wrong = {}
    for m, r in rank.items():
        for d in graph()[m]:
            if d in rank and rank[d] >= r:
                wrong.setdefault(m, []).append(d)
    assert wrong == {}, f"{room}: a module imports one of its room that is not below it: {wrong}"


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_no_module_of_a_room_is_over_the_limit(room):
    sizes = {m: len(MODULES[m].read_text(encoding="utf-8").splitlines()) for m in MODULES
             if m == room or m.startswith(room + ".")}
    assert len(sizes) >= 4, sizes
    assert {m: n for m, n in sizes.items() if n > ROOM_MAX_LINES} == {}


def test_the_graph_is_read():
    # the checks above are only as good as the graph: a few edges the design relies on
    assert "workbench.rules.runtime" in graph()["workbench.logs.summary"]
    assert "workbench.session" in graph()["workbench.measure.sweep"] or \
        "workbench.session.box_session" in graph()["workbench.measure.sweep"]
    assert "remote.errors" in graph()["workbench.checkpoint.readers"]
    assert len([m for m in MODULES if m.startswith("workbench.rules.")]) >= 6
    assert "workbench.diagnosis.steps.probe" in graph()["workbench.diagnosis.steps.fixes"]


@pytest.mark.parametrize("old", sorted(__import__("workbench").MOVED_MODULES))
def test_an_old_flat_module_says_where_it_moved(old):
    """The flat layout's modules are gone (``workbench/`` is packages); importing one names the
    new place, and the first place it names is a module that imports."""
    import importlib

    import workbench

    assert old not in MODULES  # really gone
    with pytest.raises(ModuleNotFoundError, match=f"No module named '{old}': it moved to workbench[.]"):
        importlib.import_module(old)
    new = workbench.MOVED_MODULES[old].split()[0].rstrip(";,")
    assert new in MODULES, new
    importlib.import_module(new)
