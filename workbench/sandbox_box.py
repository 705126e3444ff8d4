"""The embedded sandbox box, as seen from outside: where its models and prompts are on this machine
and the command that launches its server. Paths and a command line only: nothing here imports
:mod:`workbench.sandbox` (the diagnosis treats the sandbox like any SGLang box), so this works
without the sandbox's extra installed; launching the command needs it (torch, transformers,
FastAPI, uvicorn: ``pip install 'eagle-workbench[sandbox]'``).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from workbench.engine.launch import DEFAULT_PORT

__all__ = ["SANDBOX_SERVER_MODULE", "DEFAULT_PORT", "sandbox_models_dir", "sandbox_prompts_path",
           "sandbox_launch_command"]


#: Module of the embedded sandbox box's server (SGLang's flags and endpoints).
SANDBOX_SERVER_MODULE = "workbench.sandbox.launch_server"
def sandbox_models_dir() -> Path:
    """The committed sandbox models (``workbench/sandbox/models``) on this machine. A path only:
    the diagnosis never imports the sandbox."""
    return Path(__file__).resolve().parent / "sandbox" / "models"


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
