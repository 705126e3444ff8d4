"""Which engine an argv launches, and which processes are an engine's helpers (``remote.engines``):
the launcher forms of vLLM and SGLang (and the sandbox), the titles vLLM 0.32.0 and SGLang 0.5.23
give their helper processes, and the launch commands the workbench itself writes (fast: no process
is started; the real process trees are in test_remote_servers.py and test_vllm_box.py)."""

import ast
import shlex

import pytest

from remote.engines import DEFAULT_PORTS, helper_kind, launch_engine, launcher_engine
from testkit.vllm_servers import require_vllm, vllm_python
from workbench.sandbox_box import sandbox_launch_command, sandbox_vllm_launch_command

VENV = "/opt/venv-vllm/bin/python"


@pytest.mark.parametrize("argv, engine", [
    ([VENV, "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "8001"], "vllm"),
    ([VENV, "-B", "-u", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),      # interpreter options first
    ([VENV, "-X", "utf8", "-mvllm.entrypoints.openai.api_server"], "vllm"),       # -X takes a value; -mMOD form
    (["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m"], "vllm"),
    (["python3", "-m", "vllm.entrypoints.cli.main", "bench", "serve"], None),     # another vllm subcommand
    (["vllm", "serve", "meta-llama/Llama-3.1-8B", "--port", "9000"], "vllm"),
    (["/usr/local/bin/vllm", "serve", "m"], "vllm"),
    ([VENV, "/opt/venv-vllm/bin/vllm", "serve", "m"], "vllm"),                    # the console script's shebang
    (["vllm", "chat"], None),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], "sglang"),
    (["sglang", "serve", "--model-path", "m"], "sglang"),
    (["python3", "-m", "workbench.sandbox.launch_server", "--port", "1"], "sglang"),
    (["python3", "/src/workbench/sandbox/launch_server.py"], "sglang"),
    (["python3", "tests/remote/tiny_launch_server.py", "--port", "1"], None),     # matches the pattern, no engine
    (["tail", "-f", "/var/log/vllm.log"], None),
    (["vim", "vllm/entrypoints/openai/api_server.py"], None),
    (["python3", "-c", "import vllm.entrypoints.openai.api_server"], None),
    (["VLLM::EngineCore"], None),
    ([], None),
])
def test_launcher_engine(argv, engine):
    assert launcher_engine(argv) == engine


@pytest.mark.parametrize("argv, kind", [
    (["VLLM::EngineCore"], "proctitle"),            # vLLM 0.32.0 set_process_title("EngineCore")
    (["VLLM::Worker"], "proctitle"),
    (["VLLM::Worker_TP1"], "proctitle"),
    (["VLLM::Worker_DP0_TP1_EP1"], "proctitle"),   # multiproc_executor.py's suffixes
    (["VLLM::EngineCore_DP1"], "proctitle"),
    (["MYPREFIX::APIServer_0"], "proctitle"),       # $VLLM_PROCESS_NAME_PREFIX
    (["sglang::scheduler_TP0"], "proctitle"),       # SGLang 0.5.23 scheduler.py setproctitle
    (["sglang::detokenizer"], "proctitle"),
    ([VENV, "-B", "-c", "from multiprocessing.resource_tracker import main;main(32)"], "multiprocessing"),
    ([VENV, "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
      "--multiprocessing-fork"], "multiprocessing"),
    ([VENV, "-m", "vllm.entrypoints.openai.api_server"], None),
    (["python3", "-m", "http.server", "8000"], None),
    (["  "], None),
])
def test_helper_kind(argv, kind):
    assert helper_kind(argv) == kind


def test_the_workbench_s_own_launch_commands_are_recognised_as_shell_text():
    """``Box.launch_server`` of shell text keeps it as a one-element argv; its engine is read
    through the ``VAR=value`` assignments the vLLM sandbox command starts with."""
    vllm_text = sandbox_vllm_launch_command(port=8123, python=VENV)
    assert vllm_text.split()[0].startswith("VLLM_")  # the command starts with its environment
    assert launch_engine(vllm_text) == "vllm" and launch_engine((vllm_text,)) == "vllm"
    assert launch_engine(sandbox_launch_command(port=30001)) == "sglang"
    assert launch_engine(["env", "-i", "VLLM_HOST_IP=127.0.0.1", "vllm", "serve", "m"]) == "vllm"
    assert launch_engine(shlex.join(["vllm", "serve", "m"]) + " && echo done") is None  # more than one command
    assert launch_engine("vllm serve 'unclosed") is None


def _class_default(path, cls, field):
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    stmt = next(s for s in node.body if isinstance(s, ast.AnnAssign) and getattr(s.target, "id", None) == field)
    return ast.literal_eval(stmt.value)


def test_default_ports_are_the_installed_engines_defaults(sglang_source):
    """vLLM's ``FrontendArgs.port`` read from the installed vLLM (``make vllm``); SGLang's
    ``Serving.port`` (``srt/arg_groups/fields/serving.py``, a field of its ``ServerArgs``) from the
    0.5.23 release source."""
    require_vllm()
    site = sorted(vllm_python().parent.parent.glob("lib/python*/site-packages/vllm"))
    assert site, f"no vllm package next to {vllm_python()}"
    cli_args = site[0] / "entrypoints" / "launchers" / "cli_args.py"
    assert DEFAULT_PORTS["vllm"] == _class_default(cli_args, "FrontendArgs", "port")
    serving = sglang_source / "srt" / "arg_groups" / "fields" / "serving.py"
    assert DEFAULT_PORTS["sglang"] == _class_default(serving, "Serving", "port")
