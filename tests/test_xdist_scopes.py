"""The suite's own pytest-xdist units of work (tests/scopes.py): which tests one worker runs
together, and which go to any worker one by one."""

from pathlib import Path

from testkit import xdist_scopes as scopes

ROOT = Path(__file__).resolve().parents[1]


def test_vllm_and_lab_tests_are_groups_and_file_scoped_files_stay_whole():
    assert scopes.xdist_scope_of("tests/workbench/test_doctor_vllm.py::test_x[a]") == "vllm-engine"
    assert scopes.xdist_scope_of("tests/lab/test_console_browser.py::test_y") == "jupyterlab"
    assert scopes.xdist_scope_of("tests/lab/test_lab_harness.py::test_z") == "jupyterlab"
    # a file whose module fixture starts ~15 servers: one unit, so they start once
    assert scopes.xdist_scope_of("tests/sandbox/test_sandbox_faults.py::test_a[b]") == \
        scopes.xdist_scope_of("tests/sandbox/test_sandbox_faults.py::test_c") == "tests/sandbox/test_sandbox_faults.py"
    # the sandbox engine is per process now (testkit.engine_copy): its probing tests spread test by test
    for nodeid in ("tests/integration/test_fault_matrix.py::test_fault_matrix[algorithm-flag]",
                   "tests/integration/test_fault_injection.py::test_two_runs_at_once_one_waits",
                   "tests/workbench/test_probe_cli.py::test_add"):
        assert scopes.xdist_scope_of(nodeid) == nodeid
    # every file named exists (a renamed one would silently spread again)
    assert [p for p in scopes.FILE_SCOPED_FILES + scopes.VLLM_FILES if not (ROOT / p).is_file()] == []
    assert not set(scopes.FILE_SCOPED_FILES) & set(scopes.VLLM_FILES)
