"""The embedded sandbox box, as seen from outside: where its models and prompts are on this machine
and the command that launches its server. Paths and a command line only: nothing here imports
:mod:`workbench.sandbox` (the diagnosis treats the sandbox like any SGLang box), so this works
without the sandbox's extra installed; launching the command needs it (torch, transformers,
FastAPI, uvicorn, setproctitle: ``pip install 'eagle-workbench[sandbox]'``).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from workbench.engine.launch import DEFAULT_PORT
from workbench.errors import DiagnosisError

__all__ = ["SANDBOX_SERVER_MODULE", "SANDBOX_EXTRA", "SANDBOX_EXTRA_MODULES", "SANDBOX_EXTRA_CHECK_SCRIPT",
           "DEFAULT_PORT", "sandbox_models_dir", "sandbox_prompts_path", "sandbox_launch_command",
           "sandbox_vllm_launch_command", "vllm_python", "VLLM_DEFAULT_PORT", "VLLM_SANDBOX_ENV",
           "missing_sandbox_modules", "sandbox_extra_message"]


#: Module of the embedded sandbox box's server (SGLang's flags and endpoints).
SANDBOX_SERVER_MODULE = "workbench.sandbox.launch_server"

#: The optional-dependency group of eagle-workbench the sandbox box needs (``pyproject.toml``).
SANDBOX_EXTRA = "sandbox"

#: The top-level modules of that extra's distributions, in ``pyproject.toml``'s order (the same list
#: as ``workbench/sandbox/extra.py``, which the sandbox's entry points check; not imported from
#: there: the diagnosis never imports the sandbox. ``tests/test_dependency_extras.py`` keeps the
#: two and the extra equal).
SANDBOX_EXTRA_MODULES = ("torch", "transformers", "safetensors", "fastapi", "uvicorn", "setproctitle")

#: Run on the box by the interpreter of the sandbox's launch command, with the module names as
#: argv: prints ``{"python": sys.executable, "missing": [names]}`` as JSON. ``find_spec`` only:
#: nothing is imported (no torch import to answer whether torch is there); a finder that raises
#: for a name counts it as missing.
SANDBOX_EXTRA_CHECK_SCRIPT = r"""
import importlib.util, json, sys
missing = []
for name in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        missing.append(name)
print(json.dumps({"python": sys.executable, "missing": missing}))
"""
def sandbox_models_dir() -> Path:
    """The committed sandbox models (``workbench/sandbox/models``) on this machine, every symlink
    resolved. A path only: the diagnosis never imports the sandbox.

    Resolved because the path is an identity, not only a place: the launch commands built here name
    it, and :func:`workbench.session.inventory.serves_sandbox_target` compares a server's model path
    with it (a string, on whatever box) to choose the sandbox's own prompts. A ``workbench`` imported
    from a tree whose ``models`` is a link (the test suite's engine copies, ``tests/testkit/engine_copy.py``)
    would otherwise spell the same directory differently from a server launched through the real
    tree, miss it, and measure the built-in chat prompts instead."""
    return (Path(__file__).resolve().parent / "sandbox" / "models").resolve()


def sandbox_prompts_path() -> Path:
    """The sandbox box's benchmark prompts (``workbench/sandbox/prompts/bench.jsonl``: snippets of
    the stdlib files its target memorised, never seen by its drafts), used instead of the built-in
    chat prompts when the box's engine is the sandbox and no prompt file is given."""
    return Path(__file__).resolve().parent / "sandbox" / "prompts" / "bench.jsonl"


def sandbox_launch_command(*, algorithm: str = "EAGLE", port: int = DEFAULT_PORT, python: str | None = None,
                           draft: str = "draft", decode_log_interval: int = 8) -> str:
    """The launch command of the embedded sandbox box, by default with the wrong flag
    (``--speculative-algorithm EAGLE`` for an EAGLE-3 draft): the case this tool exists for."""
    models = sandbox_models_dir()
    return shlex.join([
        python or sys.executable, "-m", SANDBOX_SERVER_MODULE,
        "--model-path", str(models / "target"),
        "--speculative-algorithm", algorithm,
        "--speculative-draft-model-path", str(models / draft),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--host", "127.0.0.1", "--port", str(port),
        "--decode-log-interval", str(decode_log_interval),
    ])


#: vLLM's default ``--port`` (vLLM 0.32.0 ``vllm/entrypoints/openai/cli_args.py`` ``FrontendArgs.port``).
VLLM_DEFAULT_PORT = 8000

#: What vLLM's CPU build needs on this kind of machine (``shared/notes/vllm-cpu.md``):
#: ``VLLM_HOST_IP`` loopback (else its message queue binds the host's non-loopback address) and a
#: 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``, GiB; vLLM 0.32.0 ``vllm/envs.py``).
VLLM_SANDBOX_ENV = (("VLLM_HOST_IP", "127.0.0.1"), ("VLLM_CPU_KVCACHE_SPACE", "1"))


def vllm_python() -> str:
    """The interpreter of vLLM's CPU build for the sandbox box: ``$WORKBENCH_VLLM_PYTHON`` when set,
    else ``.venv-vllm/bin/python`` of this checkout (``make vllm`` builds it). A path only: it may
    not exist (the launch then fails with the shell's "No such file", and ``make vllm`` is the fix)."""
    import os

    given = os.environ.get("WORKBENCH_VLLM_PYTHON")
    if given:
        return given
    return str(Path(__file__).resolve().parent.parent / ".venv-vllm" / "bin" / "python")


def sandbox_vllm_launch_command(*, port: int = VLLM_DEFAULT_PORT, python: str | None = None, draft: str = "draft",
                                method: str = "eagle3", num_speculative_tokens: int = 3,
                                max_model_len: int = 512) -> str:
    """The launch command of the sandbox box on vLLM (its CPU build): the sandbox target and the
    EAGLE-3 draft ``models/DRAFT`` (or an absolute path) as shipped, i.e. with its aux layer ids in
    SGLang's convention — the cross-engine fault of ``shared/notes/vllm-cpu.md`` — through
    ``python -m vllm.entrypoints.openai.api_server`` with :data:`VLLM_SANDBOX_ENV` and
    ``--dtype float32 --max-model-len MAX_MODEL_LEN --enforce-eager`` (float32: the CPU build's
    kernels; eager: no torch.compile on 2 cores). ``python``: default :func:`vllm_python`."""
    models = sandbox_models_dir()
    draft_path = draft if draft.startswith("/") else str(models / draft)
    spec = json.dumps({"method": method, "model": draft_path, "num_speculative_tokens": num_speculative_tokens},
                      separators=(", ", ": "))
    env = [f"{k}={v}" for k, v in VLLM_SANDBOX_ENV]
    return " ".join(env) + " " + shlex.join([
        python or vllm_python(), "-m", "vllm.entrypoints.openai.api_server",
        "--host", "127.0.0.1", "--port", str(port),
        "--model", str(models / "target"),
        "--dtype", "float32", "--max-model-len", str(max_model_len), "--enforce-eager",
        "--speculative-config", spec,
    ])


def sandbox_extra_message(missing: list[str]) -> str:
    """What to install for the sandbox box, naming the ``missing`` modules (one line)."""
    return (f"the sandbox box needs the '{SANDBOX_EXTRA}' extra ({', '.join(SANDBOX_EXTRA_MODULES)}): "
            f"pip install 'eagle-workbench[{SANDBOX_EXTRA}]' — missing: {', '.join(missing)}")


def missing_sandbox_modules(box: Any, python: str, *, timeout: float = 30) -> list[str]:
    """The modules of the ``sandbox`` extra that ``python`` on ``box`` cannot import, checked on
    the box with :data:`SANDBOX_EXTRA_CHECK_SCRIPT` (``python -c``; ``find_spec``, nothing
    imported). ``box``: a ``remote`` box (``run``). Raises :class:`DiagnosisError` when the
    interpreter does not run the script or its answer is not the expected JSON (the message
    names the interpreter, the box and the last line of its stderr)."""
    res = box.run([python, "-B", "-c", SANDBOX_EXTRA_CHECK_SCRIPT, *SANDBOX_EXTRA_MODULES], timeout=timeout, check=False)
    where = f"{python} on {getattr(box, 'name', 'the box')}"
    if res.exit_code != 0:
        last = next((ln for ln in reversed(res.stderr.strip().splitlines()) if ln.strip()), "no error output")
        raise DiagnosisError(f"cannot check the sandbox box's modules with {where}: exit {res.exit_code}: {last}")
    try:
        answer = json.loads(res.stdout.strip().splitlines()[-1])
        missing = answer["missing"]
    except (IndexError, ValueError, KeyError, TypeError) as exc:
        raise DiagnosisError(f"cannot check the sandbox box's modules with {where}: unexpected output "
                             f"{res.stdout[-200:]!r} ({type(exc).__name__}: {exc})") from exc
    if not isinstance(missing, list) or not all(isinstance(m, str) for m in missing):
        raise DiagnosisError(f"cannot check the sandbox box's modules with {where}: 'missing' is {missing!r}")
    return missing
