"""A launch waits for generation-level readiness, on every transport (local, local primitives, and
over SSH through the port forward): the tiny real HTTP server (tests/remote/tiny_launch_server.py)
refuses connections while it starts (``--delay``), answers ``/health_generate`` 503 while it "warms
up" (``--starting``), or accepts the check and never answers it (``--stuck``). The SSH instances
start the loopback sshd, so they are slow; the local ones start the tiny server: slow too."""

import time

import httpx
import pytest

from remote.errors import GenerationStuck, ServerNotReady, ServerRouteMissing, ServerStartStuck, ServerStartTimedOut
from remote.readiness import check_generation, wait_ready

pytestmark = pytest.mark.slow


def test_a_launch_is_ready_only_once_health_generate_answers_200(box, free_port, tiny_server_argv, launched):
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--delay", "0.5", "--starting", "1.5"],
                          port=free_port)
    launched.append(h)
    t0 = time.monotonic()
    waited = box.wait_healthy(h, timeout=30, poll_interval=0.05)
    assert waited >= 1.5 + 0.5 - 0.2  # refused, then 503 for 1.5 s after listening
    assert time.monotonic() - t0 < 30


def test_a_measurement_waits_through_refused_and_503_over_the_boxs_url(box, free_port, tiny_server_argv, launched):
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--delay", "1", "--starting", "1"],
                          port=free_port)
    launched.append(h)
    lines = []
    waited = wait_ready(box.url(free_port), start_timeout=30, request_timeout=5, alive=lambda: box.is_alive(h.pid),
                        progress=lines.append, poll_interval=0.1)
    assert waited >= 1.5
    assert len(lines) == 1 and lines[0].startswith("waiting up to 30 s for the server at " + box.url(free_port))


def test_a_slow_starting_503_without_a_health_check_failure_is_waited_for(box, free_port, tiny_server_argv, launched):
    """A loaded box: the server's "still starting" 503s take 1.5 s each to arrive (its event loop is
    starved while the models load) and nothing logs SGLang's "Health check failed". That is no stuck
    server: the launch is waited for until it answers 200."""
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--starting", "3", "--slow-503", "1.5"],
                          port=free_port)
    launched.append(h)
    waited = box.wait_healthy(h, timeout=60, poll_interval=0.05)
    assert waited >= 3 - 0.2


def test_a_launch_that_stays_503_times_out_with_what_it_answered(box, free_port, tiny_server_argv, launched):
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--starting", "600"], port=free_port)
    launched.append(h)
    t0 = time.monotonic()
    with pytest.raises(ServerStartTimedOut) as info:
        box.wait_healthy(h, timeout=2, poll_interval=0.1)
    assert time.monotonic() - t0 < 2 + 6
    assert "never became ready in 2s (last: /health_generate: 503 (not ready" in str(info.value)
    assert not isinstance(info.value, GenerationStuck)
    with pytest.raises(ServerNotReady, match="never became ready in 1 s"):
        wait_ready(box.url(free_port), start_timeout=1, request_timeout=5, alive=lambda: box.is_alive(h.pid),
                   progress=None)


def test_a_launch_whose_generation_is_stuck_fails_as_stuck_within_the_request_timeout(box, free_port,
                                                                                      tiny_server_argv, launched):
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--stuck"], port=free_port)
    launched.append(h)
    t0 = time.monotonic()
    with pytest.raises(ServerStartStuck) as info:
        box.wait_healthy(h, timeout=60, poll_interval=0.1, request_timeout=2)
    assert 2 <= time.monotonic() - t0 < 2 + 8
    assert info.value.pid == h.pid and "no answer came within 2 s" in info.value.last
    assert isinstance(info.value, ServerStartTimedOut) and box.is_alive(h.pid)  # stopping it is the caller's job


def test_a_server_with_health_only_is_live_but_not_a_vllm_server(box, free_port, tiny_server_argv, launched):
    """The tiny server answers ``/health`` and 404 to the rest. Without an engine the check falls
    through SGLang's routes to ``/health`` (liveness only, the missing routes named); asked as vLLM
    it is not ready, and says which route is missing (``ServerRouteMissing``)."""
    h = box.launch_server([*tiny_server_argv, "--port", str(free_port)], port=free_port)
    launched.append(h)
    box.wait_healthy(h, timeout=30, poll_interval=0.05)
    url = box.url(free_port)
    with httpx.Client(trust_env=False) as client:
        r = check_generation(client, url, timeout=5)
        assert r.ready and r.path == "/health" and "liveness only" in r.detail
        assert r.missing_routes == ("/health_generate", "/generate", "/v1/models")
        v = check_generation(client, url, timeout=5, engine="vllm")
    assert (v.state, v.status, v.missing_routes) == ("error", 404, ("/v1/models",))
    assert "no /v1/models route" in v.detail
    t0 = time.monotonic()
    with pytest.raises(ServerRouteMissing) as info:
        wait_ready(url, start_timeout=30, request_timeout=5, engine="vllm", progress=None)
    assert time.monotonic() - t0 < 5  # at once: waiting would not bring the route
    assert info.value.routes == ("/v1/models",) and isinstance(info.value, ServerNotReady)
