"""The suite's own pytest-xdist units of work (tests/testkit/xdist_scopes.py): which tests one worker
runs together, and which go to any worker one by one."""

from pathlib import Path

import pytest

from testkit import xdist_scopes as scopes

ROOT = Path(__file__).resolve().parents[1]

PROBING = ("tests/integration/test_fault_matrix.py::test_fault_matrix[algorithm-flag]",
           "tests/integration/test_fault_injection.py::test_two_runs_at_once_one_waits",
           "tests/workbench/test_probe_cli.py::test_add")


def test_lab_tests_are_one_group_and_file_scoped_files_stay_whole(monkeypatch):
    monkeypatch.delenv(scopes.COPIES_ENV, raising=False)
    assert scopes.xdist_scope_of("tests/lab/test_console_browser.py::test_y") == "jupyterlab"
    assert scopes.xdist_scope_of("tests/lab/test_lab_harness.py::test_z") == "jupyterlab"
    # a file whose module fixture starts ~15 servers: one unit, so they start once
    assert scopes.xdist_scope_of("tests/sandbox/test_sandbox_faults.py::test_a[b]") == \
        scopes.xdist_scope_of("tests/sandbox/test_sandbox_faults.py::test_c") == "tests/sandbox/test_sandbox_faults.py"
    # every file named exists (a renamed one would silently spread again)
    named = scopes.FILE_SCOPED_FILES + scopes.VLLM_FILES + scopes.SANDBOX_ENGINE_FILES
    assert [p for p in named if not (ROOT / p).is_file()] == []
    assert not set(scopes.FILE_SCOPED_FILES) & set(scopes.VLLM_FILES)
    assert len(set(scopes.VLLM_FILES)) == len(scopes.VLLM_FILES)


def test_engine_copies_are_on_by_default_and_spread_the_probing_tests(monkeypatch):
    monkeypatch.delenv(scopes.COPIES_ENV, raising=False)
    assert scopes.engine_copies_on()
    for nodeid in PROBING:  # an engine per process (testkit.engine_copy): test by test
        assert scopes.xdist_scope_of(nodeid) == nodeid
    # without engine copies the tests that probe the one sandbox engine are one group
    monkeypatch.setenv(scopes.COPIES_ENV, "0")
    assert not scopes.engine_copies_on() and not scopes.vllm_copies_on()
    assert {scopes.xdist_scope_of(n) for n in PROBING} == {"sandbox-engine"}


@pytest.mark.parametrize("copies", [True, False], ids=["vllm-venv-per-process", "one-vllm-venv"])
def test_vllm_groups(monkeypatch, copies):
    """With a vLLM venv per process the shared-server readers are one group (each configuration starts
    once), the files that start their own servers another (memory), the readers spread; with one venv
    every vLLM file is one group (a probe in the venv would reach every server)."""
    monkeypatch.setattr(scopes, "vllm_copies_on", lambda: copies)
    groups = {path: scopes.xdist_scope_of(f"{path}::test_x[a]") for path in scopes.VLLM_FILES}
    if copies:
        assert {groups[p] for p in scopes.VLLM_SHARED_FILES} == {"vllm-shared"}
        assert {groups[p] for p in scopes.VLLM_OWN_FILES} == {"vllm-own"}
        assert [groups[p] for p in scopes.VLLM_READ_FILES] == [f"{p}::test_x[a]" for p in scopes.VLLM_READ_FILES]
    else:
        assert set(groups.values()) == {"vllm-engine"}


def test_vllm_copies_follow_the_filesystem_of_the_venv(monkeypatch, tmp_path):
    """A venv on the temporary directory's filesystem can be hard-linked; none (no venv) cannot."""
    import testkit.vllm_servers as vs

    monkeypatch.delenv(scopes.COPIES_ENV, raising=False)
    monkeypatch.setattr(vs, "vllm_python", lambda: tmp_path / "nowhere" / "bin" / "python")
    assert not scopes.vllm_copies_on()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.setattr(vs, "vllm_python", lambda: venv / "bin" / "python")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    assert scopes.vllm_copies_on()


def test_run_after_moves_a_file_right_after_the_files_it_needs():
    rules = {"c.py": ("a.py", "d.py")}
    assert scopes.run_after(["c.py", "a.py", "b.py", "d.py", "e.py"], rules) == ["a.py", "b.py", "d.py", "c.py", "e.py"]
    assert scopes.run_after(["a.py", "d.py", "c.py"], rules) == ["a.py", "d.py", "c.py"]  # already after: kept
    assert scopes.run_after(["c.py", "b.py"], rules) == ["c.py", "b.py"]  # nothing it needs is collected
    assert scopes.run_after(["b.py"], rules) == ["b.py"]


def test_the_under_load_test_runs_after_the_fault_matrix_whatever_the_durations():
    """test_verdicts_under_load.py reuses the fault matrix's published quiet runs: it is collected (and
    so handed out by pytest-xdist) after every test of test_fault_matrix.py, even when the durations
    would put it first."""
    under, matrix = "tests/integration/test_verdicts_under_load.py", "tests/integration/test_fault_matrix.py"
    assert scopes.RUN_AFTER[under] == (matrix,)
    assert all((ROOT / p).is_file() for p in (under, *scopes.RUN_AFTER[under]))
    order = scopes.run_after([under, "tests/x.py", matrix, "tests/y.py"])
    assert order.index(under) == order.index(matrix) + 1


def test_the_shared_vllm_readers_keep_their_order_whatever_the_durations():
    """The files of VLLM_SHARED_FILES run in their listed order (each shared vLLM configuration then
    starts once), in the places the durations give them (``longest_files_first``, tests/conftest.py)."""
    files = ["tests/a.py", *reversed(scopes.VLLM_SHARED_FILES), "tests/b.py"]
    assert scopes.shared_vllm_files_in_order(files) == ["tests/a.py", *scopes.VLLM_SHARED_FILES, "tests/b.py"]
    mixed = [scopes.VLLM_SHARED_FILES[2], "tests/a.py", scopes.VLLM_SHARED_FILES[0], "tests/b.py"]
    assert scopes.shared_vllm_files_in_order(mixed) == \
        [scopes.VLLM_SHARED_FILES[0], "tests/a.py", scopes.VLLM_SHARED_FILES[2], "tests/b.py"]
