"""Servers that are starting or stuck, against real sandbox servers (every test here is slow).

The stall is real: ``SANDBOX_FAULT_STALL_FILE`` in a server's environment makes its scheduler block
before every forward while that file exists (and its ``/server_info``, which asks the scheduler),
holding the scheduler lock, with HTTP up. Present at launch it stalls the start-up warm-up, so the
server answers 503 (SGLang's ``Starting``) until the file is removed.

- a measurement started while the server is still starting (connection refused, then 503) waits,
  with one progress line, and measures what a measurement of the ready server measures;
- one that stays 503 past a short start-up time-out fails with ``ServerNotReady`` in about that
  time (library and ``Box.wait_healthy``);
- stuck generation (HTTP up, the 1-token check does not return) is ``GenerationStuck`` within the
  per-request time-out when the client gives up first (ReadTimeout), or when the server's own health
  wait does (``SGLANG_HEALTH_CHECK_TIMEOUT``: 503 after it) on ``STUCK_CONFIRMATIONS`` checks in a
  row (one slow 503 may be a busy machine: issue 26); the inventory records it;
- a ``/generate`` or ``/server_info`` that stalls fails after the user's time-out, not a default:
  ``workbench measure --timeout 3`` fails in about 3 s.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from remote import connect
from remote.readiness import STUCK_CONFIRMATIONS
from remote.errors import GenerationStuck, ServerNotReady, ServerStartTimedOut
from remote.readiness import wait_ready
from testkit.ports import free_port
from testkit.sandbox_servers import SandboxServer, _server_env, launch_argv, models_missing_reason, sandbox_flags
from workbench.errors import AcceptanceError, MeasureError
from workbench.measure import measure
from workbench.measure.generate import measure_generate
from workbench.measure.prompts import load_prompts
from testkit.engine_copy import checkout_dir

pytestmark = pytest.mark.slow

FLAGS = sandbox_flags("EAGLE3", decode_log_interval=1)
PROMPTS = [p["text"] for p in load_prompts("default")[:3]]
MAX_NEW = 40
SLACK = 8.0  # seconds: this 2-core machine is shared with other test runs
HEALTH_WAIT = 2  # the stuck server's SGLANG_HEALTH_CHECK_TIMEOUT


@pytest.fixture(scope="module", autouse=True)
def _models():
    reason = models_missing_reason()
    if reason:
        pytest.skip(reason)


def _launch(log_dir: Path, stall_file: Path, *, env: dict | None = None) -> SandboxServer:
    """A sandbox server with the stall fault wired to ``stall_file``; returns at once (no wait)."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"server_{port}.log"
    argv = launch_argv(*FLAGS, port=port)
    full_env = {**_server_env(), "SANDBOX_FAULT_STALL_FILE": str(stall_file), **(env or {})}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=checkout_dir(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=full_env,
                                start_new_session=True)
    return SandboxServer(proc, port, log_path, [], FLAGS, argv)


@contextlib.contextmanager
def _server(log_dir: Path, stall_file: Path, **kw):
    server = _launch(log_dir, stall_file, **kw)
    try:
        yield server
    finally:
        stall_file.unlink(missing_ok=True)
        server.stop()


def _wait_status(url: str, want: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=30, trust_env=False).status_code == want:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url}/health never answered {want}")


@contextlib.contextmanager
def _stalled(stall_file: Path):
    stall_file.touch()
    try:
        yield
    finally:
        stall_file.unlink(missing_ok=True)


# -- a server still starting ----------------------------------------------------------------------


def test_a_measurement_started_while_the_server_starts_waits_and_measures_what_the_ready_server_gives(
        tmp_path, capfd):
    stall = tmp_path / "stall"
    stall.touch()  # the warm-up stalls: 503 until it is removed
    with _server(tmp_path / "logs", stall) as server:
        released = {}

        def release_when_503_seen():
            _wait_status(server.url, 503)
            released["saw_503"] = time.monotonic()
            time.sleep(1.5)
            stall.unlink()
            released["at"] = time.monotonic()

        helper = threading.Thread(target=release_when_503_seen, daemon=True)
        started = time.monotonic()  # right after Popen: nothing listens yet
        helper.start()
        first = measure_generate(server.url, PROMPTS, max_new_tokens=MAX_NEW, warmup=1, timeout=60,
                                 start_timeout=200, alive=lambda: server.proc.poll() is None)
        helper.join(timeout=5)
        assert "at" in released, "the helper never released the stall"
        assert started < released["at"] <= time.monotonic()  # it was measuring before the server was ready
        err = capfd.readouterr().err
        waiting = [ln for ln in err.splitlines() if ln.startswith("waiting up to 200 s for the server at")]
        assert len(waiting) == 1, err
        again = measure_generate(server.url, PROMPTS, max_new_tokens=MAX_NEW, warmup=1, timeout=60,
                                 start_timeout=200, alive=lambda: server.proc.poll() is None)
        assert "waiting up to" not in capfd.readouterr().err  # ready at once: no progress line
    assert first.accept_length is not None and first.verify_steps > 0
    assert first.accept_length == again.accept_length  # greedy and deterministic
    assert [(r.completion_tokens, r.spec_verify_ct) for r in first.records] == \
        [(r.completion_tokens, r.spec_verify_ct) for r in again.records]


@pytest.fixture(scope="module")
def never_ready(tmp_path_factory):
    """A server whose warm-up stays stalled: HTTP up, 503 for the whole module."""
    d = tmp_path_factory.mktemp("never-ready")
    stall = d / "stall"
    stall.touch()
    with _server(d / "logs", stall) as server:
        _wait_status(server.url, 503)
        yield server


@pytest.mark.parametrize("how", ["measure_generate", "measure"])
def test_a_server_that_stays_starting_fails_typed_within_the_start_timeout(never_ready, how):
    t0 = time.monotonic()
    with pytest.raises(ServerNotReady) as info:
        if how == "measure":
            measure(never_ready.url, PROMPTS, sources=["generate"], timeout=5, start_timeout=3, progress=False,
                    alive=lambda: never_ready.proc.poll() is None)
        else:
            measure_generate(never_ready.url, PROMPTS, timeout=5, start_timeout=3,
                             alive=lambda: never_ready.proc.poll() is None)
    took = time.monotonic() - t0
    assert 3 <= took < 3 + SLACK
    assert "never became ready in 3 s" in str(info.value)
    assert info.value.last.startswith("/health_generate: 503") and info.value.url == never_ready.url
    assert never_ready.proc.poll() is None  # nothing was done to the server


def test_wait_healthy_of_a_launch_that_stays_starting_times_out_saying_what_it_answered(tmp_path):
    stall = tmp_path / "stall"
    stall.touch()
    port = free_port()
    with connect("local") as box:
        handle = box.launch_server(launch_argv(*FLAGS, port=port), port=port, cwd=str(checkout_dir()),
                                   log_path=str(tmp_path / "launch.log"),
                                   env={"SANDBOX_FAULT_STALL_FILE": str(stall), "PYTHONUNBUFFERED": "1"})
        try:
            _wait_status(box.url(port), 503)
            t0 = time.monotonic()
            with pytest.raises(ServerStartTimedOut) as info:
                box.wait_healthy(handle, timeout=3)
            assert time.monotonic() - t0 < 3 + SLACK
            assert "never became ready in 3s (last: /health_generate: 503 (not ready" in str(info.value)
            assert not isinstance(info.value, GenerationStuck)
        finally:
            stall.unlink(missing_ok=True)
            box.stop_server(handle, grace=10)


# -- stuck generation -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stuck_server(tmp_path_factory):
    """A ready server whose scheduler a test stalls with ``stall`` (the fixture's file)."""
    d = tmp_path_factory.mktemp("stuck")
    stall = d / "stall"
    with _server(d / "logs", stall, env={"SGLANG_HEALTH_CHECK_TIMEOUT": str(HEALTH_WAIT)}) as server:
        _wait_status(server.url, 200)
        server.stall = stall
        yield server


def _ready_again(server) -> None:
    """After the stall: the same server generates again (the check is not sticky)."""
    waited = wait_ready(server.url, start_timeout=60, request_timeout=30, progress=None)
    assert waited < 60


def test_stuck_generation_is_reported_when_the_client_timeout_comes_first(stuck_server):
    with _stalled(stuck_server.stall):
        t0 = time.monotonic()
        with pytest.raises(GenerationStuck) as info:
            wait_ready(stuck_server.url, start_timeout=60, request_timeout=1, progress=None)
        took = time.monotonic() - t0
    assert 1 <= took < 1 + SLACK
    assert "HTTP is up but generation is stuck" in str(info.value)
    assert "no answer came within 1 s" in info.value.last
    _ready_again(stuck_server)


def test_stuck_generation_is_reported_when_the_servers_own_health_wait_gives_up(stuck_server):
    with _stalled(stuck_server.stall):
        t0 = time.monotonic()
        with pytest.raises(GenerationStuck) as info:
            wait_ready(stuck_server.url, start_timeout=60, request_timeout=30, progress=None)
        took = time.monotonic() - t0
    # SGLang's own wait gave up on every one of STUCK_CONFIRMATIONS checks in a row
    assert STUCK_CONFIRMATIONS * HEALTH_WAIT <= took < STUCK_CONFIRMATIONS * HEALTH_WAIT + SLACK
    assert info.value.last.startswith(f"/health_generate: 503 after {HEALTH_WAIT}.")
    assert f"({STUCK_CONFIRMATIONS} checks in a row)" in str(info.value)
    assert "Health check failed. Server couldn't get a response from detokenizer for last 2 seconds." in \
        stuck_server.log()
    _ready_again(stuck_server)


def test_a_generate_that_stalls_fails_after_the_per_request_timeout(stuck_server):
    with _stalled(stuck_server.stall):
        t0 = time.monotonic()
        with pytest.raises(AcceptanceError, match="no answer within the per-request time-out of 3 s"):
            measure_generate(stuck_server.url, PROMPTS, max_new_tokens=MAX_NEW, timeout=3)  # no readiness check
        took = time.monotonic() - t0
    assert 3 <= took < 3 + SLACK
    _ready_again(stuck_server)


def test_measure_honours_the_timeout_on_a_server_info_that_stalls(stuck_server):
    with _stalled(stuck_server.stall):
        t0 = time.monotonic()
        with pytest.raises(MeasureError, match=r"GET .*/server_info: no answer within the per-request time-out "
                                               r"of 3 s"):
            measure(stuck_server.url, PROMPTS, sources=["server_info"], timeout=3, progress=False)
        took = time.monotonic() - t0
    assert 3 <= took < 3 + SLACK  # the user's 3 s, not the 30 s status reads once had
    _ready_again(stuck_server)


def test_workbench_measure_timeout_3_against_a_stalled_server_fails_in_about_3_s(stuck_server, cli):
    with _stalled(stuck_server.stall):
        t0 = time.monotonic()
        code, out, err = cli("measure", "--port", str(stuck_server.port), "--timeout", "3", "--no-progress")
        took = time.monotonic() - t0
    assert code == 2, (out, err)
    assert HEALTH_WAIT <= took < 3 + SLACK
    # this server's own health wait (2 s) ends before the client's 3 s: its late 503 says stuck
    assert "HTTP is up but generation is stuck: /health_generate: 503 after 2." in err
    _ready_again(stuck_server)


def test_the_inventory_of_a_stuck_running_server_says_it_is_stuck(stuck_server):
    from workbench.session.inventory import take_inventory

    with _stalled(stuck_server.stall), connect("local") as box:
        inv = take_inventory(box, launch_command=None, port=stuck_server.port, timeout=3)
    assert inv.server_pid == stuck_server.pid
    assert inv.server_health["state"] == "stuck"
    assert any(n.startswith("the running server is not ready to generate (stuck)") for n in inv.notes)
    assert inv.to_dict()["server_health"] == inv.server_health
    _ready_again(stuck_server)
    with connect("local") as box:
        assert take_inventory(box, launch_command=None, port=stuck_server.port, timeout=30).server_health["state"] \
            == "ready"
