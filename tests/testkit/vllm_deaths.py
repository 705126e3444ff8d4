"""Real vLLM start-up deaths: one offline ``vllm.LLM`` process (vLLM 0.32.0 CPU build, the in-process
engine core: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"``) builds an
engine per faulty sandbox draft and prints, for each, what vLLM logged and the traceback of the
exception that stopped it — the text a server whose engine dies at start-up writes — between
markers, so a test reads each case's real text generated at test time (nothing committed).

``python tests/testkit/vllm_deaths.py TARGET CASE=DRAFT_DIR ...`` (run with vLLM's interpreter);
:func:`capture` runs it and returns ``{case: text}``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BEGIN = "=== DEATH CASE "
END = "=== DEATH END"


def capture(python: str, target: Path, drafts: dict, env: dict, *, timeout: float = 600) -> dict:
    """``{case: the log text and traceback vLLM printed for it}`` (``drafts``: case -> draft dir),
    one process for all; a case whose engine started has the text ``"STARTED"``. Raises
    ``RuntimeError`` with the output's tail when the process fails outside the cases."""
    argv = [python, __file__, str(target), *(f"{k}={v}" for k, v in drafts.items())]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    text = out.stdout + out.stderr
    cases: dict = {}
    # the logger writes to stderr, the markers and tracebacks to stdout: each case's stdout part
    for chunk in out.stdout.split(BEGIN)[1:]:
        name, _, rest = chunk.partition("\n")
        cases[name.strip()] = rest.split(END, 1)[0]
    if set(cases) != set(drafts):
        raise RuntimeError(f"vLLM death capture ended early (rc {out.returncode}): {text[-3000:]}")
    return cases


def _main(argv: list) -> None:
    import logging
    import traceback

    from vllm import LLM

    target, pairs = argv[0], argv[1:]
    # vLLM's own log lines to stdout too, so each case's block holds them in order
    for h in logging.getLogger("vllm").handlers:
        if isinstance(h, logging.StreamHandler):
            h.setStream(sys.stdout)
    for pair in pairs:
        name, _, draft = pair.partition("=")
        print(BEGIN + name, flush=True)
        try:
            llm = LLM(model=target, dtype="float32", max_model_len=256, enforce_eager=True,
                      distributed_executor_backend="uni", gpu_memory_utilization=0.5,
                      speculative_config={"method": "eagle3", "model": draft, "num_speculative_tokens": 3})
            print("STARTED", flush=True)
            del llm
        except BaseException:  # noqa: BLE001 - the death is the output
            print(traceback.format_exc(), flush=True)
        print(END, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    _main(sys.argv[1:])
