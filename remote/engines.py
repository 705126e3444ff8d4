"""Which engine a process is: launcher command lines (SGLang, the sandbox, vLLM) and the helper
processes an engine starts under its server (they are part of the server, never servers of their
own). Pure functions of an argv; ``Box.find_servers`` / ``Box.stop_server`` use them.

Engine facts, read from the engines' sources:

- vLLM 0.32.0: the OpenAI server is ``python -m vllm.entrypoints.openai.api_server``, the console
  script ``vllm serve`` (``vllm/entrypoints/cli/main.py``; also ``python -m vllm.entrypoints.cli.main
  serve``). Its HTTP port is ``--port`` (default 8000: ``FrontendArgs.port`` in
  ``vllm/entrypoints/launchers/cli_args.py``). It starts, in the api_server's process group,
  ``multiprocessing.resource_tracker`` (argv ``python -B -c "from multiprocessing.resource_tracker
  import main;main(N)"``), the engine core and its workers, whose argv is replaced by
  ``setproctitle`` with ``PREFIX::NAME`` (``vllm/utils/system_utils.py: set_process_title``;
  PREFIX is ``$VLLM_PROCESS_NAME_PREFIX``, default ``VLLM``; names ``EngineCore`` /
  ``EngineCore_DP{rank}`` (``v1/engine/core.py``), ``Worker`` with ``_DP{r}``, ``_PP{r}``, ``_TP{r}``…
  suffixes (``v1/executor/multiproc_executor.py``), ``APIServer_{n}`` (``v1/utils.py``),
  ``DPCoordinator``). Observed here: api_server →
  resource_tracker, ``VLLM::EngineCore`` → ``VLLM::Worker``.
- SGLang 0.5.23: ``python -m sglang.launch_server`` / ``sglang serve``, default port 30000
  (``srt/arg_groups/fields/serving.py``); its scheduler, detokenizer and data-parallel controller
  are titled ``sglang::scheduler…`` / ``sglang::detokenizer`` (``setproctitle`` in ``srt/managers/``).
- The sandbox: ``python -m workbench.sandbox.launch_server`` (SGLang's flags and endpoints: treated
  as engine ``sglang``).
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Optional, Sequence, Union

__all__ = ["VLLM", "SGLANG", "DEFAULT_PORTS", "launcher_engine", "launch_engine", "is_helper_process", "helper_kind"]

VLLM = "vllm"
SGLANG = "sglang"

#: The HTTP port a server listens on without ``--port``: vLLM 0.32.0 ``FrontendArgs.port``
#: (``vllm/entrypoints/launchers/cli_args.py``); SGLang 0.5.23 ``Serving.port``
#: (``srt/arg_groups/fields/serving.py``, part of its ``ServerArgs``).
DEFAULT_PORTS = {VLLM: 8000, SGLANG: 30000}

_VLLM_MODULES = {"vllm.entrypoints.openai.api_server"}
_VLLM_CLI_MODULES = {"vllm.entrypoints.cli.main"}
_SGLANG_MODULES = {"sglang.launch_server", "workbench.sandbox.launch_server"}
_PROCTITLE = re.compile(r"^[A-Za-z0-9_.-]+::[A-Za-z0-9_.:-]+$")
_MP_MARKERS = ("from multiprocessing.resource_tracker import", "from multiprocessing.spawn import",
               "from multiprocessing.forkserver import", "from multiprocessing.semaphore_tracker import")


def _is_python(arg: str) -> bool:
    return re.match(r"^python[0-9.]*$", os.path.basename(arg)) is not None


def _module(argv: Sequence[str]) -> tuple[Optional[str], int]:
    """The module a Python argv runs with ``-m`` (``-m mod`` or ``-mmod``) and the index after it;
    ``(None, -1)`` when it runs none. Interpreter options before ``-m`` are skipped."""
    if not argv or not _is_python(argv[0]):
        return None, -1
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1], i + 2
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:], i + 1
        if arg in ("-c",) or not arg.startswith("-"):
            return None, -1  # a script or -c code: not a module
        i += 2 if arg in ("-W", "-X", "--check-hash-based-pycs") else 1
    return None, -1


def launcher_engine(argv: Sequence[str]) -> Optional[str]:
    """``"vllm"`` or ``"sglang"`` when ``argv`` starts that engine's HTTP server, else ``None``.

    vLLM: ``python [opts] -m vllm.entrypoints.openai.api_server …``, ``python -m
    vllm.entrypoints.cli.main serve …``, ``vllm serve …`` (also ``python /path/bin/vllm serve``).
    SGLang: ``python -m sglang.launch_server …``, ``sglang serve …``, and the sandbox's ``python -m
    workbench.sandbox.launch_server …`` (or its file ``…/workbench/sandbox/launch_server.py``).
    A process that merely mentions an engine (``tail -f vllm.log``, an editor) is ``None``."""
    argv = [str(a) for a in argv]
    if not argv:
        return None
    module, after = _module(argv)
    if module in _VLLM_MODULES:
        return VLLM
    if module in _VLLM_CLI_MODULES:
        return VLLM if after < len(argv) and argv[after] == "serve" else None
    if module in _SGLANG_MODULES:
        return SGLANG
    if module == "sglang" or module == "sglang.cli.main":
        return SGLANG if after < len(argv) and argv[after] == "serve" else None
    prog = argv[1:] if _is_python(argv[0]) and len(argv) > 1 else argv
    name = os.path.basename(prog[0])
    if name in ("vllm", "sglang") and len(prog) > 1 and prog[1] == "serve":
        return VLLM if name == "vllm" else SGLANG
    if prog[0].endswith(("workbench/sandbox/launch_server.py", "sglang/launch_server.py")) and prog is not argv:
        return SGLANG
    return None


def launch_engine(argv: Union[str, Sequence[str]]) -> Optional[str]:
    """:func:`launcher_engine` of a launch given as an argv, or as shell text (a string, or a
    one-element sequence holding one: ``ServerHandle.argv`` of a shell-text launch), after leading
    ``VAR=value`` assignments and an ``env [VAR=value…]`` prefix; ``None`` for shell text shlex cannot
    split or that is more than one command (``;``, ``&&``, ``|``)."""
    if isinstance(argv, str) or (len(argv) == 1 and " " in str(argv[0])):
        text = argv if isinstance(argv, str) else str(argv[0])
        try:
            words = shlex.split(text)
        except ValueError:
            return None
        if any(w in (";", "&&", "||", "|", "&") for w in words):
            return None
    else:
        words = [str(a) for a in argv]
    if words and words[0] in ("env", "/usr/bin/env"):
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[1:]
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    return launcher_engine(words)


def helper_kind(argv: Sequence[str]) -> Optional[str]:
    """What kind of engine helper ``argv`` is: ``"proctitle"`` (a process titled ``PREFIX::NAME`` by
    setproctitle, as vLLM's ``VLLM::EngineCore`` / ``VLLM::Worker`` and SGLang's ``sglang::scheduler``),
    ``"multiprocessing"`` (Python's resource tracker, forkserver or a spawned child: ``-c "from
    multiprocessing.… import …"`` / ``--multiprocessing-fork``), else ``None``."""
    args = [str(a).strip() for a in argv if str(a).strip()]
    if not args:
        return None
    if len(args) == 1 and _PROCTITLE.match(args[0]):
        return "proctitle"
    if _PROCTITLE.match(args[0]) and not _is_python(args[0]):
        return "proctitle"  # setproctitle keeps trailing words in some modes ("VLLM::Worker foo")
    if "--multiprocessing-fork" in args or any(m in a for a in args for m in _MP_MARKERS):
        return "multiprocessing"
    return None


def is_helper_process(argv: Sequence[str]) -> bool:
    """True when ``argv`` is an engine helper process (:func:`helper_kind` is not ``None``)."""
    return helper_kind(argv) is not None
