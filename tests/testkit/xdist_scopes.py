"""The suite's units of work under pytest-xdist (used by the scheduler in ``tests/conftest.py``):
which tests one worker runs together, and which go to any worker one by one."""

from __future__ import annotations

import os

__all__ = ["VLLM_FILES", "LAB_DIR", "FILE_SCOPED_FILES", "SANDBOX_ENGINE_FILES", "COPIES_ENV",
           "engine_copies_on", "xdist_group_of", "xdist_scope_of"]

#: ``1``: each pytest process imports its own copy of the sandbox engine (``testkit.engine_copy``)
#: and the tests that probe it spread over every worker. Off by default. With it on, the vLLM
#: diagnosis (tests/integration/test_diagnose_vllm.py) once measured a different accept rate
#: (0.225 instead of 84/315, deterministic): the copy's ``workbench/sandbox/models`` is a link, and
#: ``workbench.sandbox_box.sandbox_models_dir()`` spelled it through the link, so the diagnosis did
#: not recognise the server's (real) target path as the sandbox's and measured the built-in chat
#: prompts instead of ``bench.jsonl``; fixed there (symlinks resolved), caught by
#: ``tests/remote/test_engine_copy.py``. On 2 cores the suite is CPU-bound either way (108 core-min
#: at 98.8 %), so the copies did not shorten it.
COPIES_ENV = "WORKBENCH_TEST_ENGINE_COPIES"


def engine_copies_on() -> bool:
    """Whether ``$WORKBENCH_TEST_ENGINE_COPIES`` is ``1`` (see :data:`COPIES_ENV`)."""
    return os.environ.get(COPIES_ENV) == "1"


#: Test files that patch the sandbox box's engine source in this checkout (probes in
#: ``workbench/sandbox/srt``, inserted by a diagnosis, a walkthrough, a console or ``workbench probe``)
#: or assert it unchanged byte for byte. Without engine copies that source is one per machine, as an
#: installed SGLang is one per box: one worker runs them all, one after another.
SANDBOX_ENGINE_FILES = (
    "tests/integration/test_diagnose_edges.py", "tests/integration/test_diagnose_sandbox.py",
    "tests/integration/test_fault_injection.py", "tests/integration/test_fault_matrix.py",
    "tests/integration/test_launch_guard_sandbox.py", "tests/integration/test_probe_recipes_sandbox.py",
    "tests/integration/test_secrets.py", "tests/integration/test_ssh_fault_run.py",
    "tests/integration/test_walkthrough_papermill.py", "tests/integration/test_walkthrough_rerun.py",
    "tests/integration/test_sweep_sandbox.py", "tests/integration/test_server_stops_answering.py",
    "tests/integration/test_runbook_restore_connections.py", "tests/workbench/test_probe_run_lock.py",
    "tests/integration/test_verdicts_under_load.py",
    # reads a shared server's log and requires every line in SGLang's format (a probe line is not)
    "tests/sandbox/test_sandbox_server.py",
    "tests/lab/test_console_panes_browser.py", "tests/lab/test_engine_probes_browser.py",
    "tests/lab/test_panel_browser.py", "tests/lab/test_walkthrough_browser.py",
    "tests/lab/test_console_browser.py", "tests/lab/test_console_clicks_browser.py",
    "tests/test_notebooks.py",
    "tests/workbench/test_probe_cli.py", "tests/workbench/test_engine_source.py",
    "tests/workbench/test_lab_console.py", "tests/workbench/test_lab_console_fixes.py",
    "tests/workbench/test_lab_panes.py", "tests/workbench/test_lab_panel.py",
    "tests/workbench/test_lab_walkthrough.py", "tests/workbench/test_kernel_shutdown_restore.py",
    "tests/workbench/test_diagnose_units.py", "tests/workbench/test_diagnose_outcome.py",
    "tests/workbench/test_port_none.py", "tests/workbench/test_runlock.py", "tests/workbench/test_source_cli.py",
)


#: The sandbox box's engine (``workbench/sandbox/srt``, which probes patch) is one per pytest
#: process: each imports a copy of its own (``testkit.engine_copy``, set up in ``pytest_configure``),
#: so the tests that probe it run on any worker, as two boxes each have their own SGLang.

#: Test files that start real vLLM servers (the ``vllm_server`` / ``own_vllm_server`` fixtures, or a
#: diagnosis or runbook that launches one) or probe the shared ``.venv-vllm``: one worker runs them
#: all (at most two shared vLLM servers at once, ~2.5 GB each, and no server imports a file another
#: test has a probe in).
VLLM_FILES = ("tests/integration/test_diagnose_vllm.py", "tests/integration/test_runbooks_vllm.py",
              "tests/integration/test_vllm_probes_real_server.py", "tests/workbench/test_diagnose_vllm_units.py",
              "tests/workbench/test_codepath_vllm.py", "tests/workbench/test_sweep_vllm.py",
              "tests/remote/test_vllm_box.py", "tests/sandbox/test_vllm_sandbox.py",
              "tests/workbench/test_doctor_vllm.py", "tests/workbench/test_vllm_measure.py")


#: Test files under this folder drive a real JupyterLab in Chromium (the session-scoped
#: ``lab_server`` and browser of ``tests/lab/conftest.py``): one worker runs them all, so one
#: JupyterLab and one Chromium start per suite rather than one per worker.
LAB_DIR = "tests/lab/"


def xdist_group_of(nodeid: str):
    """The group of the test ``nodeid`` (``tests/x/test_y.py::test_z[...]``) that one pytest-xdist
    worker runs whole, one test after another: ``"vllm-engine"``, ``"sandbox-engine"`` (without engine
    copies), ``"jupyterlab"``, or None
    (any worker, test by test)."""
    path = nodeid.split("::", 1)[0]
    if path in VLLM_FILES:
        return "vllm-engine"
    if path in SANDBOX_ENGINE_FILES and not engine_copies_on():
        return "sandbox-engine"
    if path.startswith(LAB_DIR):
        return "jupyterlab"
    return None


#: Test files whose module-scoped fixtures start servers or kernels (the fault-per-server
#: ``matrix`` of test_sandbox_faults.py starts ~15): each runs whole on one worker, so those start
#: once, not once per worker that gets one of its tests. (test_fault_matrix.py's module fixture
#: is one diagnosis, and its cases are the suite's longest tests: they stay spread.)
FILE_SCOPED_FILES = ("tests/sandbox/test_sandbox_faults.py", "tests/sandbox/test_sandbox_readiness.py",
                     "tests/sandbox/test_sandbox_server.py", "tests/sandbox/test_sandbox_mechanism.py",
                     "tests/workbench/test_report.py", "tests/workbench/test_port_none.py",
                     "tests/remote/test_remote_ssh.py")


def xdist_scope_of(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to under pytest-xdist: its group
    (:func:`xdist_group_of`), else its file when in :data:`FILE_SCOPED_FILES`, else itself."""
    path = nodeid.split("::", 1)[0]
    return xdist_group_of(nodeid) or (path if path in FILE_SCOPED_FILES else nodeid)
