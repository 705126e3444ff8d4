"""The sandbox-server fixtures of tests/conftest.py (``testkit.sandbox_servers``): one shared
server per configuration, and a server of a test's own stopped with its whole process group even
when the test fails."""

import os

import httpx
import pytest

from testkit.sandbox_servers import PLAIN, _group_members


def test_a_shared_server_is_one_per_configuration(sandbox_server):
    first = sandbox_server(**PLAIN)
    again = sandbox_server(decode_log_interval=4)  # the same configuration, spelled out
    assert again is first and first.proc.poll() is None
    assert first.statuses[-1] == 200 and first.startup["server_info"]["speculative_algorithm"] is None
    assert os.getpgid(first.pid) == first.pid  # its own process group, stopped as a whole at session end
    assert httpx.get(first.url + "/health", timeout=30).status_code == 200


def test_an_own_server_is_stopped_with_its_group_when_the_test_fails(tmp_path, own_sandbox_server):
    with pytest.raises(RuntimeError, match="the test failed"):
        with own_sandbox_server(tmp_path) as srv:
            assert os.getpgid(srv.pid) == srv.pid
            assert httpx.get(srv.url + "/health", timeout=30).status_code == 200
            raise RuntimeError("the test failed")
    assert srv.proc.returncode is not None
    assert _group_members(srv.pid) == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(srv.url + "/health", timeout=5)


def test_stop_leaves_no_process_of_the_group(tmp_path):
    """``SandboxServer.stop`` stops the whole group: here a leader that ignores SIGTERM and a child
    it started (plain processes, no server: what ``stop`` does is the same for any group)."""
    import signal
    import subprocess
    import time

    from testkit.sandbox_servers import SandboxServer

    proc = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 60 & echo $!; wait"], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    child = int(proc.stdout.readline())
    assert sorted(_group_members(proc.pid)) == sorted([proc.pid, child])
    server = SandboxServer(proc, 0, tmp_path / "none.log", [], (), [])
    t0 = time.monotonic()
    server.stop(grace=0.5)
    assert proc.returncode == -signal.SIGKILL and time.monotonic() - t0 < 10
    assert _group_members(proc.pid) == []
