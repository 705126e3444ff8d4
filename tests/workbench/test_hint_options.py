"""Every hint names only options that exist (issue 29, part 5): each ``--option`` a message, a hint or
a fix mentions is checked against the parser of the command it is shown by (``workbench/cli/*.py``'s
argparse, built by :func:`workbench.cli.build_parser`), the launch flags of the engine it is about
(the SGLang 0.5.23 table, ``workbench/engine/flag_table.py``; vLLM 0.32.0's,
``workbench/engine/vllm_flags.py``), and each ``-p NAME`` / ``NAME = N in the parameters cell``
against the runbooks' parameter schemas (``workbench/runbook_params.py``).

The texts come from where users see them: the CLI modules' own messages (every string literal but
docstrings), the engine locator's hints as each caller gets them, the registry's fixes, and the
findings, notes and fixes the doctor prints on every fault of the fault matrix (``testkit.faults``),
on an SGLang launch and on a vLLM launch of the same faulty deployment.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from testkit.faults import FAULTS, build_deployment
from workbench.cli import build_parser
from workbench.engine.flag_table import shipped_flag_table
from workbench.engine.locate import LOCATE_OPTIONS, find_engine
from workbench.engine.vllm_flags import shipped_vllm_flag_table
from workbench.errors import EngineNotFound
from workbench.rules import REGISTRY
from workbench.runbook_params import SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
#: An option as a user types it: ``--word(-word)*`` not preceded by a word character or dash.
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
#: A runbook parameter named in a hint: ``-p NAME`` (the CLI) or ``NAME = N in the parameters cell``.
PARAMETER = re.compile(r"(?<![\w-])-p (\w+)|(\w+) = \S+ in the parameters cell")

SGLANG_FLAGS = frozenset(shipped_flag_table().option_strings)
VLLM_FLAGS = frozenset(shipped_vllm_flag_table().option_strings)
RUNBOOK_PARAMETERS = frozenset(p for schema in SCHEMAS.values() for p in schema)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of its subcommands' parsers."""
    out: set[str] = set()
    for action in parser._actions:
        out |= set(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out |= _options(sub)
    return out


def _commands() -> dict[str, set[str]]:
    """``{subcommand: its options (with its own subcommands')}`` of the ``workbench`` parser."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: _options(p) | _options_top(parser) for name, p in sub.choices.items()}


def _options_top(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions if not isinstance(a, argparse._SubParsersAction) for o in a.option_strings}


def _message_literals(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every string literal of the module at ``path`` (f-strings' constant parts
    included) except docstrings: the texts the module can print."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_option_pattern_reads_options_and_only_options():
    assert OPTION.findall("pass --engine-root DIR, or --port N (not x--y, a -- separator or --Upper)") == [
        "--engine-root", "--port"]
    assert PARAMETER.findall("pass -p aux_layer_ids '[1]'; set port = 8000 in the parameters cell") == [
        ("aux_layer_ids", ""), ("", "port")]


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "workbench" / "cli").glob("*.py")))
def test_cli_messages_name_only_their_commands_options(module):
    """A CLI module's messages name options of its own command (shared modules: of any command), or
    an engine's launch flags (messages about the launch command being checked)."""
    commands = _commands()
    allowed = commands.get(module) or set().union(*commands.values())
    wrong = [(line, opt) for line, text in _message_literals(ROOT / "workbench" / "cli" / f"{module}.py")
             for opt in OPTION.findall(text) if opt not in allowed | SGLANG_FLAGS | VLLM_FLAGS]
    assert wrong == [], f"workbench/cli/{module}.py names options no parser has: {wrong}"


def test_the_locators_hints_name_only_the_callers_options(tmp_path):
    """``find_engine``'s default hints are ``workbench probe`` / ``workbench source``'s (both have every
    option of :data:`LOCATE_OPTIONS`); a caller without them (the doctor, the runbooks, the console)
    gets a hint naming none, plus its own remedy; the doctor's remedy names its own option."""
    from remote import connect
    from workbench.cli.doctor import REMEDY

    commands = _commands()
    for cmd in ("probe", "source"):
        assert set(LOCATE_OPTIONS) <= commands[cmd], cmd
    assert set(OPTION.findall(REMEDY)) <= commands["doctor"]
    box = connect("local")
    try:
        with pytest.raises(EngineNotFound) as default:
            find_engine(box, python=sys.executable, package="sglang")
        assert set(OPTION.findall(str(default.value))) <= set(LOCATE_OPTIONS)
        with pytest.raises(EngineNotFound) as bare:
            find_engine(box, python=sys.executable, package="sglang", options=())
        assert OPTION.findall(str(bare.value)) == [] and "interpreter that runs the server" in str(bare.value)
        with pytest.raises(EngineNotFound) as doctor:
            find_engine(box, python=sys.executable, package="sglang", options=(), remedy=REMEDY)
        assert OPTION.findall(str(doctor.value)) == ["--engine-root"]
        found = find_engine(box, launch=f"{sys.executable} -m sglang.launch_server --model-path /m", options=())
    except EngineNotFound as exc:  # no sglang in this interpreter: the how is in the message
        found = None
        assert OPTION.findall(str(exc)) == []
    finally:
        box.close()
    assert found is None or OPTION.findall(found.how) == []


def test_the_registrys_fixes_name_only_their_engines_flags():
    """Every rule's ``fix`` names launch flags of the engines it checks (SGLang's for the SGLang and
    sandbox rules, vLLM's for the vLLM ones) and runbook parameters that exist."""
    wrong = []
    for rid in REGISTRY.ids:
        rule = REGISTRY.get(rid)
        flags = (SGLANG_FLAGS if {"sglang", "sandbox"} & set(rule.engines) else set()) | (
            VLLM_FLAGS if "vllm" in rule.engines else set())
        wrong += [(rid, o) for o in OPTION.findall(rule.fix or "") if o not in flags]
        wrong += [(rid, p) for pair in PARAMETER.findall(f"{rule.fix} {rule.explanation}") for p in pair
                  if p and p not in RUNBOOK_PARAMETERS]
    assert wrong == []


def test_runbook_parameters_named_in_the_librarys_hints_exist():
    """``-p NAME`` and ``NAME = N in the parameters cell`` in any message of the library name a
    parameter of a runbook schema."""
    wrong = []
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        if "sandbox" in path.relative_to(ROOT / "workbench").parts[:1]:
            continue
        for line, text in _message_literals(path):
            wrong += [(str(path.relative_to(ROOT)), line, p) for pair in PARAMETER.findall(text) for p in pair
                      if p and p not in RUNBOOK_PARAMETERS]
    assert wrong == []


@pytest.fixture(scope="module")
def fault_reports(tmp_path_factory):
    """The doctor's report on every fault of the fault matrix, launched on SGLang (the sandbox box's
    launcher) and on vLLM (``.venv-vllm``'s interpreter, or ``python3`` where it is not built: vLLM's
    shipped facts then), ``[(engine, fault, report)]``."""
    from remote import connect
    from workbench.doctor import run_doctor

    vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
    base = tmp_path_factory.mktemp("faults")
    box = connect("local")
    out = []
    try:
        for name in FAULTS:
            dep = build_deployment(base / name, name)
            spec = json.dumps({"method": "eagle3", "model": str(dep.draft_dir), "num_speculative_tokens": 3})
            vllm = shlex.join([str(vllm_python) if vllm_python.exists() else "python3", "-m",
                               "vllm.entrypoints.openai.api_server", "--model", str(dep.target_dir),
                               "--speculative-config", spec])
            out.append(("sglang", name, run_doctor(box, dep.launch_command(30000))))
            out.append(("vllm", name, run_doctor(box, vllm, vllm_flags="shipped")))
    finally:
        box.close()
    return out


def test_the_doctors_findings_on_every_fault_name_only_existing_options(fault_reports):
    """On every fault, on both engines: a finding's ``fix`` names only the launch flags of its
    launch's engine; its message, the notes and the fallback section name flags of either engine
    (a cross-engine message names the other's) or the doctor's own options; runbook parameters exist."""
    doctor = _commands()["doctor"]
    wrong, seen = [], set()
    for engine, fault, rep in fault_reports:
        flags = SGLANG_FLAGS if engine == "sglang" else VLLM_FLAGS
        for f in rep.findings:
            seen.update(OPTION.findall(f.fix or ""))
            wrong += [(engine, fault, f.rule, "fix", o) for o in OPTION.findall(f.fix or "") if o not in flags | doctor]
            wrong += [(engine, fault, f.rule, "message", o) for o in OPTION.findall(f.message)
                      if o not in SGLANG_FLAGS | VLLM_FLAGS | doctor]
        texts = list(rep.notes) + [json.dumps(rep.engine_fallback or {})]
        wrong += [(engine, fault, "notes", o) for t in texts for o in OPTION.findall(t)
                  if o not in SGLANG_FLAGS | VLLM_FLAGS | doctor]
        wrong += [(engine, fault, "parameter", p) for f in rep.findings for pair in PARAMETER.findall(
            f"{f.message} {f.fix}") for p in pair if p and p not in RUNBOOK_PARAMETERS]
    assert wrong == []
    # the check saw the fixes' flags (a matrix whose fixes named none would check nothing)
    assert {"--speculative-algorithm", "--speculative-num-steps"} <= seen


def test_library_hints_that_name_a_workbench_command_name_its_options():
    """A message outside the CLI that tells the user to run ``workbench <command> ...`` (a hypothesis's
    "decide" text, a note) names only options of that command (or engine flags)."""
    commands = _commands()
    wrong, seen = [], 0
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        if path.parent.name == "cli":
            continue
        for line, text in _message_literals(path):
            for cmd in re.findall(r"\bworkbench (\w+)", text):
                if cmd not in commands:
                    continue
                seen += 1
                wrong += [(str(path.relative_to(ROOT)), line, cmd, o) for o in OPTION.findall(text)
                          if o not in commands[cmd] | SGLANG_FLAGS | VLLM_FLAGS]
    assert wrong == [] and seen > 0


def test_a_time_out_names_the_option_of_whoever_shows_it():
    """The per-request time-out message names no option in the library (the runbooks give
    ``request_timeout``); ``workbench measure`` adds its own ``--timeout``."""
    import httpx

    from workbench.measure.generate import timeout_message

    text = timeout_message("POST", "http://h/generate", httpx.ReadTimeout("timed out"), 5)
    assert "longer per-request time-out" in text and OPTION.findall(text) == []
    assert "--timeout" in _commands()["measure"]
