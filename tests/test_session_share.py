"""Results shared by the tests of one session across pytest-xdist workers (``testkit.session_share``):
the directory, atomic entries, and waiting for a publisher only while it is running in a live
process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

from testkit.session_share import Publication, publish, published, shared_dir, wait_published


def _name() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def test_the_shared_dir_is_the_sessions_basetemp_or_its_parent_under_xdist(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    expected = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    assert shared_dir(tmp_path_factory) == expected / "session-shared" and shared_dir(tmp_path_factory).is_dir()


def test_an_entry_is_published_whole_and_read_back(tmp_path_factory):
    name = _name()
    assert published(tmp_path_factory, name) is None
    path = publish(tmp_path_factory, name, {"signature": {"root_causes": [["algorithm-flag", "rule"]]}, "x": 1.25})
    assert published(tmp_path_factory, name) == {"signature": {"root_causes": [["algorithm-flag", "rule"]]}, "x": 1.25}
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(f".{name}")] == []  # no temporary left


def test_a_reader_waits_for_a_running_publisher_and_gets_its_result(tmp_path_factory):
    name = _name()
    first = Publication(tmp_path_factory, name)
    first.running()

    def finish():
        time.sleep(0.5)
        first.publish({"v": 3})
        first.done()

    thread = threading.Thread(target=finish)
    thread.start()
    data, waited = wait_published(tmp_path_factory, name, timeout=30, poll=0.05)
    thread.join()
    assert data == {"v": 3} and 0.3 < waited < 10


def test_no_waiting_for_what_nobody_runs_failed_or_died(tmp_path_factory):
    # nobody runs it: no wait at all
    data, waited = wait_published(tmp_path_factory, _name(), timeout=30, poll=0.05)
    assert data is None and waited < 1
    # it ran and failed (done, nothing published)
    failed = Publication(tmp_path_factory, _name())
    failed.running()
    failed.done()
    data, waited = wait_published(tmp_path_factory, failed.name, timeout=30, poll=0.05)
    assert data is None and waited < 1
    # its process died before it was done
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    path = shared_dir(tmp_path_factory) / f"{_name()}.running"
    path.write_text('{"pid": %d}' % int(dead.stdout))
    data, waited = wait_published(tmp_path_factory, path.stem, timeout=30, poll=0.05)
    assert data is None and waited < 1
    # still running in a live process: waited for up to the bound
    live = Publication(tmp_path_factory, _name())
    live.running()
    data, waited = wait_published(tmp_path_factory, live.name, timeout=0.3, poll=0.05)
    assert data is None and 0.3 <= waited < 5
