"""``workbench probe add`` and ``probe revert`` take the box's run lock as the runbooks do (issue 26
part 3, item 2): while another process holds it they refuse (exit 2, one line naming the holder)
and change nothing; otherwise they take it and release it themselves. ``probe list`` only reads
and takes no lock.

Real parts: the CLI runs as a user runs it (``python -m workbench.cli`` in a child process), the
holder is another real process that took the lock with :func:`workbench.session.runlock.acquire`
on the same local box (the state dir of this test), and the probed files are real SGLang 0.5.23
files (``tests/sglang_files.py``).
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remote import connect
from remote.probes import CRASH_ENV
from sglang_files import AUX_REL, DRAFT_REL
from workbench.session import runlock
from testkit.engine_copy import checkout_dir

REPO = Path(__file__).resolve().parents[2]
WIDTH_RX = r"if hidden_states\.shape\[-1\] != embeds"

#: a child that takes the run lock on the local box, says so, and holds it until its stdin closes
HOLDER = textwrap.dedent("""
    import sys
    from remote import connect
    from workbench.session import runlock

    box = connect("local")
    lock = runlock.acquire(box, "local", "holder123456", name="diagnose_acceptance")
    print("held", flush=True)
    sys.stdin.read()
    lock.release()
    print("released", flush=True)
""")


@pytest.fixture
def site(sglang_source, tmp_path, monkeypatch):
    """``tmp_path/site`` holding a package ``sglang`` made of real 0.5.23 files; on ``PYTHONPATH``."""
    site = tmp_path / "site"
    for rel in ("__init__.py", "version.py", "_version.py", DRAFT_REL, AUX_REL):
        (site / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sglang_source / rel, site / "sglang" / rel)
    monkeypatch.setenv("PYTHONPATH", f"{site}:{REPO}")
    return site


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _holder() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], cwd=checkout_dir(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "held", proc.stderr.read()
    return proc


def _holder_now():
    with connect("local") as box:
        return runlock.box_status(box).holder


@pytest.mark.slow  # starts a process that holds the lock
def test_add_and_revert_refuse_while_another_run_holds_the_box(site, state_dir, cli):
    draft = site / "sglang" / DRAFT_REL
    original = _sha(draft)
    add = ("probe", "add", "--file", DRAFT_REL, "--before", WIDTH_RX, "--print", "hidden_states.shape",
           "--tag", "width", "--python", sys.executable)
    holder = _holder()
    try:
        refused = cli.subprocess(*add)
        assert refused.code == 2, refused.err
        lines = [line for line in refused.err.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in refused.err, refused.err
        assert lines[0].startswith("workbench probe add: another run is using local: run holder123456 "
                                   f"(pid {holder.pid} on "), lines[0]
        assert "runbook diagnose_acceptance, since " in lines[0], lines[0]
        assert _sha(draft) == original and sorted(p.name for p in draft.parent.iterdir()) == ["llama_eagle3.py"]
        listed = cli.subprocess("probe", "list")  # only reads: no lock, not refused
        assert listed.code == 0 and listed.out.startswith("no probes on local"), listed.err
        reverted = cli.subprocess("probe", "revert", "--all")
        assert reverted.code == 2 and reverted.err.startswith(
            "workbench probe revert: another run is using local: run holder123456"), reverted.err
        # the holder's lock is untouched by the refusals
        held = _holder_now()
        assert held is not None and held.run_id == "holder123456" and held.alive
    finally:
        out, err = holder.communicate(input="", timeout=60)
    assert holder.returncode == 0 and "released" in out, err

    # nobody holds the box now: add takes the lock, and releases it when done
    added = cli.subprocess(*add)
    assert added.code == 0, added.err
    assert added.out.startswith("probe width added on local") and _sha(draft) != original
    assert _holder_now() is None
    reverted = cli.subprocess("probe", "revert", "--all")
    assert reverted.code == 0, reverted.err
    assert _sha(draft) == original and _holder_now() is None


def test_add_holds_the_lock_while_it_changes_the_file(site, state_dir, cli):
    """An add SIGKILLed in the middle of patching (``remote.probes``' crash hook, after the backup)
    leaves the lock it held behind, naming ``workbench probe add`` and its (dead) pid: it held it
    while it changed the box. The next revert takes the dead holder's lock over, cleans up and
    releases it."""
    draft = site / "sglang" / DRAFT_REL
    original = _sha(draft)
    killed = cli.subprocess("probe", "add", "--file", DRAFT_REL, "--before", WIDTH_RX, "--print",
                            "hidden_states.shape", "--tag", "crashy", "--python", sys.executable,
                            env={CRASH_ENV: "after-backup"})
    assert killed.code == -signal.SIGKILL, killed.err
    left = _holder_now()
    assert left is not None and left.runbook == "workbench probe add" and left.alive is False, left
    reverted = cli.subprocess("probe", "revert", "--all")
    assert reverted.code == 0, reverted.err
    assert "cleaned up an interrupted add of crashy" in reverted.out
    assert _sha(draft) == original and _holder_now() is None
