"""The suite's units of work under pytest-xdist (used by the scheduler in ``tests/conftest.py``):
which tests one worker runs together, and which go to any worker one by one."""

from __future__ import annotations

import os

__all__ = ["VLLM_FILES", "VLLM_SHARED_FILES", "shared_vllm_files_in_order", "VLLM_OWN_FILES", "VLLM_READ_FILES", "LAB_DIR",
           "FILE_SCOPED_FILES", "SANDBOX_ENGINE_FILES", "COPIES_ENV", "engine_copies_on", "vllm_copies_on",
           "xdist_group_of", "xdist_scope_of", "RUN_AFTER", "run_after"]

#: ``0`` turns off what is on by default: each pytest process imports its own copy of the sandbox
#: engine, and has a vLLM venv of its own (``testkit.engine_copy``: a checkout per process, its
#: ``.venv-vllm`` hard links), so the tests that probe either engine spread over every worker, as
#: two boxes each have their own SGLang and vLLM. With ``0`` the tests that probe the one sandbox
#: engine, and those that probe or serve the one vLLM, each run on one worker (two long lanes).
#: (Copies once changed the vLLM diagnosis's accept rate, 0.225 instead of 84/315: the copy's
#: ``workbench/sandbox/models`` is a link and ``sandbox_models_dir()`` spelled it through the link,
#: so the diagnosis measured the built-in chat prompts instead of ``bench.jsonl``; fixed there,
#: caught by ``tests/remote/test_engine_copy.py``.)
COPIES_ENV = "WORKBENCH_TEST_ENGINE_COPIES"


def engine_copies_on() -> bool:
    """Whether engine copies are on: unless ``$WORKBENCH_TEST_ENGINE_COPIES`` is ``0`` (see
    :data:`COPIES_ENV`)."""
    return os.environ.get(COPIES_ENV, "1") != "0"


def vllm_copies_on() -> bool:
    """Whether each pytest process gets a vLLM venv of its own: engine copies are on and vLLM's venv
    (``testkit.vllm_servers.vllm_python``) is on the filesystem of the temporary directory, where
    ``testkit.engine_copy.link_venv`` makes its hard links. Decided the same way in the xdist
    controller (which schedules) and the workers (which make the copies)."""
    import tempfile

    from testkit.engine_copy import venv_of
    from testkit.vllm_servers import vllm_python

    if not engine_copies_on():
        return False
    venv = venv_of(vllm_python())
    if venv is None:
        return False
    try:
        return os.stat(venv).st_dev == os.stat(tempfile.gettempdir()).st_dev
    except OSError:
        return False


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

#: Test files that read from the session's shared vLLM servers (the ``vllm_server`` fixture,
#: ``testkit.vllm_servers.VllmServers``: at most two at once, ~2.5-3 GB each): one worker runs them
#: all, so each configuration starts once per suite, not once per worker. They run in this order
#: (:func:`shared_vllm_files_in_order`): test_vllm_measure.py asks for the draft as
#: shipped with and without ``--per-request-spec-decode-metrics``, test_doctor_vllm.py for the draft
#: as shipped and then the ids [2, 4, 7] (the least recently used, per-request one, stops: no later
#: test asks for it), test_vllm_sandbox.py for the draft as shipped: three starts. With
#: test_doctor_vllm.py first, the draft as shipped would start twice (the summary at the end of a
#: run counts starts per configuration).
VLLM_SHARED_FILES = ("tests/workbench/test_vllm_measure.py", "tests/workbench/test_doctor_vllm.py",
                     "tests/sandbox/test_vllm_sandbox.py")
def shared_vllm_files_in_order(files):
    """``files`` (test file paths, in the order a run will take them) with those of
    :data:`VLLM_SHARED_FILES` put in that tuple's order, in the places they had: so each shared vLLM
    configuration starts once whatever order the durations gave (``longest_files_first`` in
    ``tests/conftest.py``)."""
    shared = iter(sorted((f for f in files if f in VLLM_SHARED_FILES), key=VLLM_SHARED_FILES.index))
    return [next(shared) if f in VLLM_SHARED_FILES else f for f in files]


#: Test files that start vLLM servers of their own (``own_vllm_server``, or a diagnosis, runbook or
#: sweep that launches one) and probe vLLM's files: one worker runs them all, so that with the shared
#: ones at most three or four vLLM servers run at once on the machine (memory).
VLLM_OWN_FILES = ("tests/integration/test_diagnose_vllm.py", "tests/integration/test_runbooks_vllm.py",
                  "tests/integration/test_vllm_probes_real_server.py", "tests/remote/test_vllm_box.py",
                  "tests/workbench/test_sweep_vllm.py", "tests/integration/test_vllm_fault_truth.py")
#: Test files that read vLLM's installed files or start a diagnosis that refuses to launch: no server,
#: any worker (with a vLLM venv per process; else with the others, which may probe the one venv).
VLLM_READ_FILES = ("tests/workbench/test_diagnose_vllm_units.py", "tests/workbench/test_codepath_vllm.py",
                   "tests/workbench/test_rules_vllm_parity.py")
#: Every test file that reads or runs vLLM's CPU build.
VLLM_FILES = VLLM_SHARED_FILES + VLLM_OWN_FILES + VLLM_READ_FILES


#: Test files under this folder drive a real JupyterLab in Chromium (the session-scoped
#: ``lab_server`` and browser of ``tests/lab/conftest.py``): one worker runs them all, so one
#: JupyterLab and one Chromium start per suite rather than one per worker.
LAB_DIR = "tests/lab/"


def xdist_group_of(nodeid: str):
    """The group of the test ``nodeid`` (``tests/x/test_y.py::test_z[...]``) that one pytest-xdist
    worker runs whole, one test after another, or None (any worker, test by test). With a vLLM venv
    per process (:func:`vllm_copies_on`): ``"vllm-shared"`` and ``"vllm-own"``; without: every vLLM
    file in ``"vllm-engine"``. Without engine copies: ``"sandbox-engine"`` for the files that probe
    the sandbox engine. ``"jupyterlab"`` for the browser tests."""
    path = nodeid.split("::", 1)[0]
    if path in VLLM_FILES:
        if not vllm_copies_on():
            return "vllm-engine"
        if path in VLLM_SHARED_FILES:
            return "vllm-shared"
        if path in VLLM_OWN_FILES:
            return "vllm-own"
        return None
    if path in SANDBOX_ENGINE_FILES and not engine_copies_on():
        return "sandbox-engine"
    if path.startswith(LAB_DIR):
        return "jupyterlab"
    return None


#: Test files whose module-scoped fixtures start servers or kernels (the fault-per-server
#: ``matrix`` of test_sandbox_faults.py starts ~22): each runs whole on one worker, so those start
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


#: test file -> the files it runs after (collection order, so also the order pytest-xdist hands the
#: tests out in): test_verdicts_under_load.py compares its loaded runs with the fault matrix's
#: quiet ones, which the matrix publishes for the session (``testkit.session_share``) once each case
#: passed; after the matrix they are there (or running: it waits), rather than run twice.
RUN_AFTER = {"tests/integration/test_verdicts_under_load.py": ("tests/integration/test_fault_matrix.py",)}


def run_after(order, rules=None):
    """``order`` (test files) with each file of ``rules`` (default :data:`RUN_AFTER`) moved to just
    after the last of the files it runs after, when that one comes later; the others keep their
    order. A file whose predecessors are not in ``order`` stays where it is."""
    rules = RUN_AFTER if rules is None else rules
    order = list(order)
    for name, before in rules.items():
        if name not in order:
            continue
        last = max((order.index(b) for b in before if b in order), default=-1)
        if last > order.index(name):
            order.remove(name)  # the predecessor moves up one: inserting at `last` puts it right after
            order.insert(last, name)
    return order
