"""The suite's own pytest-xdist units of work (tests/conftest.py): which tests one worker runs
together, and which go to any worker one by one."""

from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parents[1]


def test_vllm_and_lab_tests_are_groups_and_file_scoped_files_stay_whole():
    assert conftest.xdist_scope_of("tests/workbench/test_doctor_vllm.py::test_x[a]") == "vllm-engine"
    assert conftest.xdist_scope_of("tests/lab/test_console_browser.py::test_y") == "jupyterlab"
    assert conftest.xdist_scope_of("tests/lab/test_lab_harness.py::test_z") == "jupyterlab"
    # a file whose module fixture starts ~15 servers: one unit, so they start once
    assert conftest.xdist_scope_of("tests/sandbox/test_sandbox_faults.py::test_a[b]") == \
        conftest.xdist_scope_of("tests/sandbox/test_sandbox_faults.py::test_c") == "tests/sandbox/test_sandbox_faults.py"
    # the sandbox engine is per process now (testkit.engine_copy): its probing tests spread test by test
    for nodeid in ("tests/integration/test_fault_matrix.py::test_fault_matrix[algorithm-flag]",
                   "tests/integration/test_fault_injection.py::test_two_runs_at_once_one_waits",
                   "tests/workbench/test_probe_cli.py::test_add"):
        assert conftest.xdist_scope_of(nodeid) == nodeid
    # every file named exists (a renamed one would silently spread again)
    assert [p for p in conftest.FILE_SCOPED_FILES + conftest.VLLM_FILES if not (ROOT / p).is_file()] == []
    assert not set(conftest.FILE_SCOPED_FILES) & set(conftest.VLLM_FILES)
