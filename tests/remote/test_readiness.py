"""The readiness decision (``remote.readiness.classify``) and its typed errors: what one answer of a
health check says about a server (fast: no server is started here; the mechanism against real
sandbox servers is in tests/sandbox/test_sandbox_readiness.py)."""

import time

import httpx
import pytest

from remote.errors import GenerationStuck, ServerError, ServerNotReady, ServerStartStuck, ServerStartTimedOut
from remote.readiness import SGLANG_HEALTH_MIN_WAIT_S, check_generation, classify, wait_ready
from testkit.ports import free_port

PATH = "/health_generate"


def test_200_is_ready():
    r = classify(PATH, status=200, elapsed_s=1.02)
    assert (r.state, r.ready, r.status) == ("ready", True, 200)


def test_an_immediate_503_is_a_server_still_starting():
    # SGLang 0.5.23 health_generate: ServerStatus.Starting -> 503 before any generation is tried
    r = classify(PATH, status=503, elapsed_s=0.01)
    assert (r.state, r.ready) == ("starting", False)
    assert "503" in r.detail and "loading or warming up" in r.detail


@pytest.mark.parametrize("elapsed", [SGLANG_HEALTH_MIN_WAIT_S, 2.0, 20.3])
def test_a_503_after_the_health_wait_is_a_stuck_scheduler(elapsed):
    # SGLang answers 503 after its generation wait only when the scheduler never answered
    r = classify(PATH, status=503, elapsed_s=elapsed)
    assert r.state == "stuck"
    assert f"after {elapsed:.1f} s" in r.detail and "SGLANG_HEALTH_CHECK_TIMEOUT" in r.detail


def test_a_503_just_under_the_health_wait_is_still_starting():
    assert classify(PATH, status=503, elapsed_s=SGLANG_HEALTH_MIN_WAIT_S - 0.01).state == "starting"


@pytest.mark.parametrize("exc", [httpx.ConnectError("[Errno 111] Connection refused"), httpx.ConnectTimeout("t")])
def test_a_refused_or_unanswered_connection_is_starting(exc):
    r = classify(PATH, error=exc, elapsed_s=0.0)
    assert r.state == "starting" and r.status is None
    assert type(exc).__name__ in r.detail


def test_an_accepted_connection_with_no_answer_is_stuck_and_names_the_timeout():
    r = classify(PATH, error=httpx.ReadTimeout("timed out"), elapsed_s=3.0, timeout=3)
    assert r.state == "stuck"
    assert "within 3 s" in r.detail and "generation does not return" in r.detail


@pytest.mark.parametrize("status", [400, 404, 500, 502])
def test_other_statuses_are_errors_not_starting(status):
    r = classify(PATH, status=status, elapsed_s=0.1)
    assert r.state == "error" and f"HTTP {status}" in r.detail


@pytest.mark.parametrize("exc", [httpx.RemoteProtocolError("Server disconnected without sending a response."),
                                 httpx.ReadError("[Errno 104] Connection reset by peer")])
def test_a_connection_closed_without_an_answer_is_starting(exc):
    # how a refused connection looks through an SSH port forward: accepted locally, then closed
    r = classify(PATH, error=exc)
    assert r.state == "starting" and r.status is None and type(exc).__name__ in r.detail


def test_other_transport_failures_are_errors():
    r = classify(PATH, error=httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'."))
    assert r.state == "error" and "UnsupportedProtocol" in r.detail


@pytest.mark.parametrize("kw", [{}, {"status": 200, "error": httpx.ReadTimeout("x")}])
def test_classify_needs_exactly_one_answer(kw):
    with pytest.raises(ValueError, match="exactly one"):
        classify(PATH, **kw)


def test_start_stuck_is_both_a_start_time_out_and_a_stuck_generation():
    e = ServerStartStuck("server at http://x answers HTTP but generation is stuck", pid=7, log_path="/l.log",
                         log_tail=["line a"], timeout=3.0, url="http://x", last="no answer")
    assert isinstance(e, ServerStartTimedOut) and isinstance(e, GenerationStuck)
    assert (e.pid, e.log_path, e.log_tail, e.timeout, e.url, e.last) == (7, "/l.log", ["line a"], 3.0, "http://x",
                                                                         "no answer")
    assert "line a" in str(e) and "pid 7" in str(e)


def test_not_ready_and_stuck_are_server_errors_with_their_url():
    for cls in (ServerNotReady, GenerationStuck):
        e = cls("m", url="http://h:1", timeout=5.0, last="503")
        assert isinstance(e, ServerError) and (e.url, e.timeout, e.last) == ("http://h:1", 5.0, "503")


# -- wait_ready on a port where nothing listens (no server is started: the refusal is real) -------------


def test_nothing_listening_and_no_process_to_wait_for_fails_at_once():
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(ServerNotReady, match="nothing answers at .* no server process is known") as info:
        wait_ready(url, start_timeout=30, request_timeout=2, progress=None)
    assert time.monotonic() - t0 < 5
    assert info.value.url == url and "connection failed" in info.value.last


def test_a_refused_connection_is_waited_for_while_the_process_lives_then_times_out():
    url = f"http://127.0.0.1:{free_port()}"
    lines = []
    t0 = time.monotonic()
    with pytest.raises(ServerNotReady, match=r"never became ready in 1.5 s \(last answer: /health_generate: "
                                             r"connection failed") as info:
        wait_ready(url, start_timeout=1.5, request_timeout=2, alive=lambda: True, progress=lines.append,
                   poll_interval=0.1)
    took = time.monotonic() - t0
    assert 1.5 <= took < 5 and info.value.timeout == 1.5
    assert len(lines) == 1 and lines[0].startswith("waiting up to 1.5 s for the server at " + url)


def test_a_process_that_exits_while_waited_for_fails_saying_so():
    url = f"http://127.0.0.1:{free_port()}"
    calls = []

    def alive():
        calls.append(1)
        return len(calls) < 3  # alive for two checks, then gone

    with pytest.raises(ServerNotReady, match="its process exited before it became ready"):
        wait_ready(url, start_timeout=30, request_timeout=2, alive=alive, progress=None, poll_interval=0.05)
    assert len(calls) == 3


@pytest.mark.parametrize("kw", [{"start_timeout": -1, "request_timeout": 1},
                                {"start_timeout": 1, "request_timeout": 0}])
def test_wait_ready_refuses_bad_time_outs(kw):
    with pytest.raises(ValueError, match="timeout must be"):
        wait_ready("http://127.0.0.1:9", progress=None, **kw)


def test_check_generation_refuses_an_unknown_engine():
    with httpx.Client(trust_env=False) as client, pytest.raises(ValueError, match="engine must be"):
        check_generation(client, "http://127.0.0.1:9", timeout=1, engine="tgi")


def test_a_vllm_check_of_a_port_where_nothing_listens_is_starting_with_no_route_missing():
    # vLLM's api_server listens only once its engine core is up: a refusal is "starting"
    with httpx.Client(trust_env=False) as client:
        r = check_generation(client, f"http://127.0.0.1:{free_port()}", timeout=2, engine="vllm")
    assert (r.state, r.path, r.status, r.missing_routes) == ("starting", "/health", None, ())
