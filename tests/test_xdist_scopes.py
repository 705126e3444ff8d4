"""The suite's own pytest-xdist units of work (tests/scopes.py): which tests one worker runs
together, and which go to any worker one by one."""

from pathlib import Path

from testkit import xdist_scopes as scopes

ROOT = Path(__file__).resolve().parents[1]


def test_vllm_and_lab_tests_are_groups_and_file_scoped_files_stay_whole(monkeypatch):
    monkeypatch.setenv(scopes.COPIES_ENV, "1")
    assert scopes.xdist_scope_of("tests/workbench/test_doctor_vllm.py::test_x[a]") == "vllm-engine"
    assert scopes.xdist_scope_of("tests/lab/test_console_browser.py::test_y") == "jupyterlab"
    assert scopes.xdist_scope_of("tests/lab/test_lab_harness.py::test_z") == "jupyterlab"
    # a file whose module fixture starts ~15 servers: one unit, so they start once
    assert scopes.xdist_scope_of("tests/sandbox/test_sandbox_faults.py::test_a[b]") == \
        scopes.xdist_scope_of("tests/sandbox/test_sandbox_faults.py::test_c") == "tests/sandbox/test_sandbox_faults.py"
    probing = ("tests/integration/test_fault_matrix.py::test_fault_matrix[algorithm-flag]",
               "tests/integration/test_fault_injection.py::test_two_runs_at_once_one_waits",
               "tests/workbench/test_probe_cli.py::test_add")
    # without engine copies the tests that probe the one sandbox engine are one group ...
    monkeypatch.delenv(scopes.COPIES_ENV, raising=False)
    assert {scopes.xdist_scope_of(n) for n in probing} == {"sandbox-engine"}
    # ... with them (testkit.engine_copy: an engine per process) they spread test by test
    monkeypatch.setenv(scopes.COPIES_ENV, "1")
    for nodeid in probing:
        assert scopes.xdist_scope_of(nodeid) == nodeid
    # every file named exists (a renamed one would silently spread again)
    assert [p for p in scopes.FILE_SCOPED_FILES + scopes.VLLM_FILES if not (ROOT / p).is_file()] == []
    assert not set(scopes.FILE_SCOPED_FILES) & set(scopes.VLLM_FILES)
