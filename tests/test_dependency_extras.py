"""A plain ``pip install eagle-workbench`` drives a real box without torch; the sandbox box is the
``sandbox`` extra.

- The declared metadata: ``pyproject.toml`` and the installed distribution's
  ``importlib.metadata.requires``: torch, transformers, safetensors, FastAPI and uvicorn only under
  ``extra == "sandbox"``, and every third-party module the base imports declared in the base.
- Without the extra (its absence simulated: a ``sitecustomize`` on ``PYTHONPATH`` puts an import
  hook first on ``sys.meta_path`` that raises ``ModuleNotFoundError`` for those modules and logs
  every attempt, in this process's children and theirs): every module of ``remote`` and
  ``workbench`` outside ``workbench.sandbox`` imports, and the ``workbench`` commands that need no
  sandbox server run on real files with their normal exit codes, with no attempt to import torch;
  the sandbox's entry points print the one-line extra message and exit 2; the diagnosis's default
  launch is refused up front with a :class:`DiagnosisError` naming the extra and the missing modules.

The simulation is the only way to run without the extra on a machine that has it (CI installs
``.[test,sandbox]``); the real, unsimulated install of the base alone is checked by hand with
``pip install --dry-run --report`` (no torch is resolved; see the README).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent

#: The distributions (and top-level modules: each is imported under its own name) only the sandbox needs.
SANDBOX_ONLY = ("torch", "transformers", "safetensors", "fastapi", "uvicorn", "setproctitle")

MESSAGE = ("the sandbox box needs the 'sandbox' extra (torch, transformers, safetensors, fastapi, uvicorn, "
           "setproctitle): "
           "pip install 'eagle-workbench[sandbox]' — missing: ")

#: The import hook of the simulated absence. ``EWB_BLOCKED``: comma-separated top-level modules;
#: ``EWB_BLOCKED_LOG``: a file that gets one line per attempt, ``import NAME`` or ``find_spec NAME``
#: (the latter when the attempt comes from ``importlib.util.find_spec``, which imports nothing).
SITECUSTOMIZE = textwrap.dedent('''
    """Simulated absence of the sandbox extra (tests/test_dependency_extras.py)."""
    import os
    import sys

    _BLOCKED = frozenset(filter(None, os.environ.get("EWB_BLOCKED", "").split(",")))
    _LOG = os.environ.get("EWB_BLOCKED_LOG")


    def _via_find_spec():
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "find_spec" and (code.co_filename == "<frozen importlib.util>"
                                                or code.co_filename.endswith(os.path.join("importlib", "util.py"))):
                return True
            frame = frame.f_back
        return False


    class _SimulatedAbsence:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] not in _BLOCKED:
                return None
            if _LOG:
                kind = "find_spec" if _via_find_spec() else "import"
                with open(_LOG, "a", encoding="utf-8") as log:
                    log.write(f"{kind} {name} pid={os.getpid()} argv={sys.argv[:3]!r}\\n")
            raise ModuleNotFoundError(f"No module named {name!r} (absence simulated)", name=name)


    sys.meta_path.insert(0, _SimulatedAbsence())
''')


# -- the declared metadata ----------------------------------------------------------------------

def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _names(requirements) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_pyproject_declares_the_sandbox_stack_only_in_the_sandbox_extra():
    project = _pyproject()["project"]
    base = _names(project["dependencies"])
    extras = {name: _names(reqs) for name, reqs in project["optional-dependencies"].items()}
    assert base.isdisjoint(SANDBOX_ONLY), base & set(SANDBOX_ONLY)
    assert extras["sandbox"] == set(SANDBOX_ONLY)
    for name, names in extras.items():
        if name != "sandbox":
            assert names.isdisjoint(SANDBOX_ONLY), (name, names & set(SANDBOX_ONLY))
    assert {"test", "lab"} <= set(extras)
    # what the base must have: the box layer, HTTP, the log scanner's and checkpoint reads' arrays,
    # runbooks, reports, the panel
    assert {"paramiko", "httpx", "numpy", "papermill", "ipykernel", "nbconvert", "plotly", "ipywidgets"} <= base


def test_installed_metadata_puts_the_sandbox_stack_under_extra_sandbox_only():
    requires = metadata.requires("eagle-workbench")
    assert requires, "eagle-workbench is not installed (make setup)"
    by_name: dict[str, list[str]] = {}
    for text in requires:
        req = Requirement(text)
        by_name.setdefault(canonicalize_name(req.name), []).append(str(req.marker) if req.marker else "")
    for name in SANDBOX_ONLY:
        assert by_name.get(name) == ['extra == "sandbox"'], (name, by_name.get(name))
    unconditional = {name for name, markers in by_name.items() if "" in markers}
    # the installed metadata is this pyproject's (an editable install older than it would differ)
    assert unconditional == _names(_pyproject()["project"]["dependencies"])
    assert unconditional.isdisjoint(SANDBOX_ONLY)


def test_the_entry_points_and_the_default_launch_check_the_extras_own_modules():
    """The sandbox's entry points and the diagnosis's default-launch check each carry the module
    list (neither may import the other); both are the extra's distributions, in its order."""
    from workbench.sandbox.extra import EXTRA, EXTRA_MODULES
    from workbench.sandbox_box import SANDBOX_EXTRA, SANDBOX_EXTRA_MODULES

    declared = tuple(canonicalize_name(Requirement(r).name)
                     for r in _pyproject()["project"]["optional-dependencies"]["sandbox"])
    assert EXTRA == SANDBOX_EXTRA == "sandbox"
    assert EXTRA_MODULES == SANDBOX_EXTRA_MODULES == declared == SANDBOX_ONLY


def _third_party_imports(paths) -> dict[str, set[str]]:
    """Top-level modules imported anywhere in ``paths`` (also inside functions) that are neither
    the standard library nor this project, each with the files importing it."""
    import ast

    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in ("remote", "workbench", "__future__"):
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_module_the_base_imports_is_a_base_dependency():
    """Read with ``ast`` from remote/ and workbench/ outside workbench/sandbox/ (the box-side
    scripts in string constants, run by the box's own interpreter, are not imports of ours)."""
    files = [p for p in sorted((ROOT / "workbench").rglob("*.py"))
             if p.relative_to(ROOT / "workbench").parts[0] != "sandbox"] + sorted((ROOT / "remote").rglob("*.py"))
    imported = _third_party_imports(files)
    dists = metadata.packages_distributions()
    base = _names(_pyproject()["project"]["dependencies"])
    undeclared = {}
    for module, where in imported.items():
        owners = {canonicalize_name(d) for d in dists.get(module, [])}
        assert owners, f"{module} (imported by {sorted(where)}) is not installed"
        if not owners & base:
            undeclared[module] = (sorted(owners), sorted(where))
    assert undeclared == {}
    assert set(imported).isdisjoint(SANDBOX_ONLY), {m: imported[m] for m in set(imported) & set(SANDBOX_ONLY)}


# -- without the extra (absence simulated) ------------------------------------------------------

@pytest.fixture
def no_sandbox_extra(tmp_path):
    """An environment for subprocesses in which the sandbox extra's modules cannot be imported
    (simulated, see :data:`SITECUSTOMIZE`); ``.attempts()`` reads the hook's log."""
    hook_dir = tmp_path / "simulated-no-sandbox-extra"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    log = tmp_path / "blocked-imports.log"

    class Env(dict):
        def attempts(self, kind: str | None = None) -> list[str]:
            lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
            return [ln for ln in lines if kind is None or ln.startswith(kind + " ")]

    env = Env(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(hook_dir), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["EWB_BLOCKED"] = ",".join(SANDBOX_ONLY)
    env["EWB_BLOCKED_LOG"] = str(log)
    env["EAGLE_WORKBENCH_STATE_DIR"] = str(tmp_path / "box-state")
    return env


def _run(argv, env, *, timeout=300, cwd=ROOT):
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _workbench(env, *args, timeout=300):
    return _run([sys.executable, "-m", "workbench.cli", *args], env, timeout=timeout)


def test_the_hook_really_hides_the_extra_simulated_absence(no_sandbox_extra):
    proc = _run([sys.executable, "-c", "import torch"], no_sandbox_extra)
    assert proc.returncode == 1 and "ModuleNotFoundError: No module named 'torch' (absence simulated)" in proc.stderr
    assert len(no_sandbox_extra.attempts("import")) == 1


def test_every_base_module_imports_without_the_extra_simulated_absence(no_sandbox_extra):
    script = textwrap.dedent("""
        import importlib, json, pkgutil, sys
        import remote, workbench

        def walk(pkg):
            for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
                if info.name == "workbench.sandbox" or info.name.endswith(".__main__"):
                    continue  # the sandbox; an entry point's __main__ runs its command when imported
                mod = importlib.import_module(info.name)
                yield info.name
                if info.ispkg:
                    yield from walk(mod)

        names = ["remote", "workbench"] + list(walk(remote)) + list(walk(workbench))
        print(json.dumps({"imported": names,
                          "loaded_sandbox_stack": sorted(m for m in sys.modules
                                                         if m.partition(".")[0] in %r),
                          "loaded_sandbox": sorted(m for m in sys.modules if m.startswith("workbench.sandbox."))}))
    """ % (SANDBOX_ONLY,))
    proc = _run([sys.executable, "-c", script], no_sandbox_extra)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    on_disk = set()
    for top in ("remote", "workbench"):
        for p in (ROOT / top).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            if parts[:2] == ("workbench", "sandbox") or parts[-1] == "__main__":
                continue
            on_disk.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert set(out["imported"]) == on_disk
    assert out["loaded_sandbox_stack"] == [] and out["loaded_sandbox"] == []
    assert no_sandbox_extra.attempts() == []


def test_doctor_on_the_sandbox_launch_without_the_extra_simulated_absence(no_sandbox_extra):
    """The doctor reads the committed sandbox models and the sandbox's source through the box:
    the wrong flag is found (exit 1: an error finding) with no torch anywhere."""
    from workbench.sandbox_box import sandbox_launch_command, sandbox_models_dir

    proc = _workbench(no_sandbox_extra, "doctor", "--launch", sandbox_launch_command(), "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    errors = [f["rule"] for f in report["findings"] if f["severity"] == "error"]
    assert errors == ["algorithm-mismatch"]
    assert report["engine_version"] == "0.5.23+sandbox"
    assert "--speculative-algorithm EAGLE3" in report["corrected_launch_command"]
    assert str(sandbox_models_dir() / "draft") in report["launch_command"]
    assert no_sandbox_extra.attempts("import") == []


def test_logs_on_a_fixture_without_the_extra_simulated_absence(no_sandbox_extra):
    log = ROOT / "tests" / "fixtures" / "logs" / "sglang-0.5.23.log"
    accept = [float(m) for m in re.findall(r"accept len: ([0-9.]+)", log.read_text(encoding="utf-8"))]
    proc = _workbench(no_sandbox_extra, "logs", str(log), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["accept_len"]["count"] == len(accept) == 4
    assert (summary["accept_len"]["min"], summary["accept_len"]["max"], summary["accept_len"]["last"]) == \
        (min(accept), max(accept), accept[-1])
    assert summary["collapsed"] is False
    assert no_sandbox_extra.attempts("import") == []


def test_source_locate_and_probe_recipes_without_the_extra_simulated_absence(no_sandbox_extra):
    proc = _workbench(no_sandbox_extra, "source", "locate", "--package", "workbench.sandbox")
    assert proc.returncode == 0, proc.stderr
    fields = dict(re.split(r"\s+", ln, maxsplit=1) for ln in proc.stdout.splitlines() if ln.strip())
    assert fields["package"] == "workbench.sandbox"
    assert fields["root"] == str(ROOT / "workbench" / "sandbox")
    assert fields["version"] == "0.5.23+sandbox"
    proc = _workbench(no_sandbox_extra, "probe", "recipes")
    assert proc.returncode == 0, proc.stderr
    recipes = [ln for ln in proc.stdout.splitlines() if re.fullmatch(r"[a-z0-9-]+", ln)]
    assert recipes == ["draft-weights-unmatched", "draft-params-at-init", "draft-input-width", "target-capture-layers",
                       "draft-d2t"]
    assert no_sandbox_extra.attempts("import") == []


@pytest.mark.slow  # executes a notebook in a kernel
def test_report_of_an_executed_notebook_without_the_extra_simulated_absence(no_sandbox_extra, tmp_path):
    """A two-cell notebook executed by papermill in an ipykernel kernel (which inherits the
    simulated absence) and exported with ``workbench report``: one self-contained HTML file."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# without the sandbox extra"),
        nbformat.v4.new_code_cell("import sys\nprint('torch loaded:', 'torch' in sys.modules)"),
        nbformat.v4.new_code_cell("import plotly.graph_objects as go\n"
                                  "go.Figure(go.Scatter(x=[1, 2, 3], y=[1.0, 1.02, 2.28]))"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, out = tmp_path / "tiny.ipynb", tmp_path / "tiny.out.ipynb"
    nbformat.write(nb, src)
    proc = _run([sys.executable, "-m", "papermill", str(src), str(out), "-k", "python3", "--no-progress-bar"],
                no_sandbox_extra, timeout=180)
    assert proc.returncode == 0, proc.stderr
    executed = nbformat.read(out, as_version=4)
    assert executed.cells[1].outputs[0]["text"] == "torch loaded: False\n"
    proc = _workbench(no_sandbox_extra, "report", str(out))
    assert proc.returncode == 0, proc.stderr
    html_path = Path(proc.stdout.strip())
    assert html_path == out.with_suffix(".html")
    html = html_path.read_text(encoding="utf-8")
    assert "torch loaded: False" in html and "<script src=" not in html
    assert html.count("Plotly.newPlot") == 1
    assert no_sandbox_extra.attempts("import") == []


@pytest.mark.slow  # starts the sandbox's launch_server (which refuses at once)
@pytest.mark.parametrize("blocked, missing", [
    (SANDBOX_ONLY, "torch, transformers, safetensors, fastapi, uvicorn, setproctitle"),
    (("torch",), "torch"),
    (("uvicorn", "fastapi"), "fastapi, uvicorn"),
])
def test_launch_server_names_the_extra_and_exits_2_simulated_absence(no_sandbox_extra, blocked, missing):
    from workbench.sandbox_box import sandbox_launch_command

    no_sandbox_extra["EWB_BLOCKED"] = ",".join(blocked)
    argv = shlex.split(sandbox_launch_command())
    proc = _run(argv, no_sandbox_extra, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"launch_server: error: {MESSAGE}{missing}\n"
    assert proc.stdout == ""
    # asked with find_spec, never imported
    assert no_sandbox_extra.attempts("import") == [] and no_sandbox_extra.attempts("find_spec")


def test_train_names_the_extra_and_exits_2_simulated_absence(no_sandbox_extra, tmp_path):
    out = tmp_path / "models"
    proc = _run([sys.executable, "-m", "workbench.sandbox.train", "--quick", "--out", str(out)], no_sandbox_extra,
                timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"train: error: {MESSAGE}torch, transformers, safetensors, fastapi, uvicorn, setproctitle\n"
    assert not out.exists()
    assert no_sandbox_extra.attempts("import") == []


def test_diagnosis_default_launch_is_refused_without_the_extra_simulated_absence(no_sandbox_extra, free_port,
                                                                                 tmp_path):
    """No server on the port, no launch_command: the diagnosis would launch the sandbox box with
    this interpreter; the box's ``find_spec`` check refuses it before anything is launched."""
    script = textwrap.dedent(f"""
        import json, sys
        from workbench.diagnosis.run import DiagnosisRun
        from workbench.errors import DiagnosisError
        try:
            DiagnosisRun.start(port={free_port}, report_dir={str(tmp_path / 'reports')!r})
        except DiagnosisError as exc:
            print(json.dumps({{"type": type(exc).__name__, "message": str(exc),
                               "torch_loaded": "torch" in sys.modules}}))
        else:
            print(json.dumps({{"type": None}}))
    """)
    proc = _run([sys.executable, "-c", script], no_sandbox_extra, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["type"] == "DiagnosisError" and out["torch_loaded"] is False
    assert f"port {free_port}" in out["message"] and sys.executable in out["message"]
    assert MESSAGE + "torch, transformers, safetensors, fastapi, uvicorn, setproctitle" in out["message"]
    assert "launch_command" in out["message"]
    # checked by the box's interpreter with find_spec (nothing imported), and nothing was launched
    assert no_sandbox_extra.attempts("import") == []
    assert len(no_sandbox_extra.attempts("find_spec")) == len(SANDBOX_ONLY)
    assert not (tmp_path / "reports").exists()


def test_missing_sandbox_modules_through_the_box(no_sandbox_extra, monkeypatch):
    """The check itself, on the local box: nothing missing with this interpreter; all five when
    the box's commands run in the simulated absence (the local box's commands inherit this
    process's environment); an interpreter that cannot run is a DiagnosisError naming it."""
    from remote import connect
    from workbench.errors import DiagnosisError
    from workbench.sandbox_box import missing_sandbox_modules

    box = connect("local")
    assert missing_sandbox_modules(box, sys.executable) == []
    with pytest.raises(DiagnosisError) as info:
        missing_sandbox_modules(box, "/bin/false")
    assert "/bin/false on local" in str(info.value) and "exit 1" in str(info.value)
    for key in ("PYTHONPATH", "EWB_BLOCKED", "EWB_BLOCKED_LOG"):
        monkeypatch.setenv(key, no_sandbox_extra[key])
    assert missing_sandbox_modules(box, sys.executable) == list(SANDBOX_ONLY)
    assert no_sandbox_extra.attempts("import") == []


@pytest.mark.slow
def test_a_built_wheel_carries_the_runbooks_and_data_and_runs_outside_the_checkout(tmp_path):
    """`pip install .` (not editable) installs a wheel: build it, unpack it (a wheel is a zip of
    the files an install puts in site-packages), and run from it, away from the checkout: the
    runbooks, prompt sets, flag table and sandbox models are there and found."""
    import zipfile

    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                  str(tmp_path / "dist"), str(ROOT)], dict(os.environ), timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("eagle_workbench-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(site)
    for runbook in ("diagnose_acceptance", "preflight", "measure_acceptance", "compare_drafts"):
        assert f"workbench/runbooks/{runbook}.ipynb" in names
    assert {"workbench/engine/data/sglang-0.5.23-flags.json", "workbench/measure/prompt_sets/chat.jsonl",
            "workbench/sandbox/models/draft/config.json"} <= names
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # ahead of the editable install of the checkout
    probe = textwrap.dedent("""
        import json, workbench
        from workbench.cli.runbook import runbooks_dir
        from workbench.engine.flags import FLAGS
        from workbench.measure.prompts import load_prompts
        print(json.dumps({"package": workbench.__file__, "runbooks": str(runbooks_dir()),
                          "found": sorted(p.stem for p in runbooks_dir().glob("*.ipynb")),
                          "flags": len(FLAGS), "chat": len(load_prompts("chat"))}))
    """)
    proc = _run([sys.executable, "-c", probe], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["package"].startswith(str(site)) and seen["runbooks"].startswith(str(site))
    assert seen["found"] == ["compare_drafts", "diagnose_acceptance", "measure_acceptance", "preflight"]
    assert seen["flags"] > 500 and seen["chat"] == 30


# -- what the runbook driver pays to start -------------------------------------------------------

#: Imported by jsonschema >= 4.25 (its ``format-nongpl`` extra, which jupyter-events requires) to
#: check the ``iri`` formats; it builds a Lark grammar when imported: ~1.5 s of CPU in every process
#: that imports jsonschema (nbformat, papermill, nbconvert, Jupyter's server).
GRAMMAR_AT_IMPORT = "rfc3987_syntax"


def test_constraints_keep_jsonschema_below_the_release_that_imports_a_grammar():
    pins = [Requirement(line.split("#", 1)[0].strip()) for line in
            (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines() if line.split("#", 1)[0].strip()]
    jsonschema = [r for r in pins if canonicalize_name(r.name) == "jsonschema"]
    assert jsonschema, "constraints.txt does not pin jsonschema"
    assert not jsonschema[0].specifier.contains("4.25.0") and jsonschema[0].specifier.contains("4.24.1"), jsonschema
    assert metadata.version("jsonschema") in jsonschema[0].specifier, metadata.version("jsonschema")


def test_the_runbook_driver_imports_jsonschema_without_building_a_grammar():
    """What ``workbench runbook`` imports to run and export a notebook (papermill, nbformat's
    validator, nbconvert) leaves ``rfc3987_syntax`` and ``lark`` unimported, in a fresh interpreter
    of this venv (installed or not: jsonschema 4.24 never imports them)."""
    script = ("import sys, papermill, nbformat.validator, nbconvert, jsonschema\n"
              "print(sorted(m for m in (%r, 'lark') if m in sys.modules))" % GRAMMAR_AT_IMPORT)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]", res.stdout
