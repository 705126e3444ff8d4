"""The test infrastructure itself: what the guard of ``make test-fast`` refuses, and that a
mis-marked test really fails under it (a pytest run of a few demo tests, in a subprocess, with
this suite's conftest; nothing is started: the guard refuses before anything is executed)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testkit.fast_guard import what_it_starts

TESTS = Path(__file__).resolve().parent
PY = sys.executable


@pytest.mark.parametrize("argv, what", [
    (["/usr/sbin/sshd", "-D", "-f", "cfg"], "an OpenSSH server (sshd)"),
    ([PY, "-m", "workbench.sandbox.launch_server", "--port", "1"], "a server (workbench.sandbox.launch_server)"),
    ([PY, "-u", "/t/remote/tiny_launch_server.py", "--port", "1"], "a server (tiny_launch_server.py)"),
    ([PY, "-m", "ipykernel_launcher", "-f", "k.json"], "a notebook kernel (ipykernel_launcher)"),
    ([PY, "-m", "jupyterlab", "--no-browser"], "a notebook kernel (jupyterlab)"),
    (["/usr/bin/chromium", "--headless", "r.html"], "a browser (chromium)"),
    ([PY, "-m", "workbench.cli", "runbook", "diagnose_acceptance"], "a runbook run (a notebook kernel and servers)"),
    (["bash", "-c", "PYTHONPATH=/x exec python3 -m sglang.launch_server --port 4"], "a server (sglang.launch_server)"),
    # the local transport's detached launch: the program is in the words after $0
    (["bash", "-c", "rm -f /s.pid; setsid bash -c 'echo $$ > \"$0.tmp\" && exec \"$@\"' /s.pid /usr/sbin/sshd -D "
      "> /s.log 2>&1 < /dev/null &"], "an OpenSSH server (sshd)"),
])
def test_the_guard_names_what_a_command_starts(argv, what):
    assert what_it_starts(argv) == what


@pytest.mark.parametrize("argv", [
    [PY, "-m", "workbench.cli", "doctor", "--launch", "python -m sglang.launch_server --model-path /m"],
    ["bash", "-c", "cat /x/sglang/launch_server.py && echo sshd"],
    [PY, "-c", "import subprocess"],
    ["sleep", "30"],
    "echo hi",
])
def test_plain_commands_are_allowed(argv):
    assert what_it_starts(argv) is None


DEMO = '''
import subprocess, sys
import pytest

def test_unmarked_starts_sshd(tmp_path):
    subprocess.Popen(["/usr/sbin/sshd", "-D", "-f", str(tmp_path / "none")])

def test_unmarked_swallows_the_refusal():
    try:
        subprocess.run([sys.executable, "-m", "workbench.sandbox.launch_server", "--port", "1"])
    except Exception as exc:  # the code under test hides the error: the test must still fail
        print("caught", type(exc).__name__)

def test_unmarked_box_launch(tmp_path):
    from remote import connect
    connect("local", state_dir=tmp_path).launch_server(["sleep", "30"], port=None)

def test_plain_command():
    assert subprocess.run(["true"]).returncode == 0

@pytest.mark.slow
def test_marked_by_hand():
    subprocess.Popen(["/usr/sbin/sshd", "-D"])

def test_marked_by_its_fixture(sshd):
    pass
'''

CONFTEST = f'''
import importlib.util, sys
sys.path.insert(0, {str(TESTS)!r})
spec = importlib.util.spec_from_file_location("ewb_tests_conftest", {str(TESTS / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
globals().update({{k: v for k, v in vars(suite).items() if not k.startswith("__")}})
'''


def _demo_run(tmp_path, *args):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_demo.py").write_text(DEMO)
    return subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *args, str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(TESTS.parent)})


def test_a_mis_marked_test_fails_under_the_fast_run(tmp_path):
    proc = _demo_run(tmp_path, "-m", "not slow")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "3 failed, 1 passed, 2 deselected" in out, out
    for name, what in (("test_unmarked_starts_sshd", "an OpenSSH server (sshd)"),
                       ("test_unmarked_swallows_the_refusal", "a server (workbench.sandbox.launch_server)"),
                       ("test_unmarked_box_launch", "a server (Box.launch_server)")):
        assert f"FAILED test_demo.py::{name}" in out, out
    for what in ("an OpenSSH server (sshd)", "a server (workbench.sandbox.launch_server)",
                 "a server (Box.launch_server)"):
        assert f"make test-fast starts nothing, but this test started {what}" in out, out


def test_fixture_marks_are_automatic(tmp_path):
    """``-m slow`` selects the test marked by hand and the one marked by its fixture (sshd), not
    the plain ones (collection only: nothing runs)."""
    proc = _demo_run(tmp_path, "-m", "slow", "--collect-only")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    selected = sorted(line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line)
    assert selected == ["test_marked_by_hand", "test_marked_by_its_fixture"], proc.stdout
