"""Which engine answers at a URL (``remote.readiness.identify_server``) on servers that are not vLLM:
the shared sandbox server (SGLang's routes: ``/server_info`` with its server args and version, no
``/version``), and the tiny HTTP server (no engine's routes: ``unknown``). vLLM itself is identified in
test_vllm_box.py on a real vLLM server."""

import httpx
import pytest

from remote import connect
from remote.readiness import check_generation, identify_server
from workbench.sandbox import __version__ as SANDBOX_VERSION

pytestmark = pytest.mark.slow


def test_the_sandbox_answers_as_sglang_with_its_version(sandbox_server):
    server = sandbox_server("EAGLE3")
    with httpx.Client(trust_env=False) as client:
        ident = identify_server(client, server.url, timeout=30)
        ready = check_generation(client, server.url, timeout=30)
    assert ident.engine == "sglang", ident.evidence
    assert ident.version == SANDBOX_VERSION
    assert f"/server_info: SGLang's server args, version {SANDBOX_VERSION}" in ident.evidence
    assert "/version: HTTP 404" in ident.evidence  # SGLang 0.5.23 has no /version route
    assert ready.ready and ready.path == "/health_generate" and ready.missing_routes == ()


def test_a_server_of_no_engine_is_unknown(free_port, tiny_server_argv, tmp_path):
    with connect("local", state_dir=tmp_path / "state") as box:
        h = box.launch_server([*tiny_server_argv, "--port", str(free_port)], port=free_port)
        try:
            box.wait_healthy(h, timeout=30, poll_interval=0.05)
            with httpx.Client(trust_env=False) as client:
                ident = identify_server(client, box.url(free_port), timeout=10)
            assert box.server_identity(free_port, timeout=10) == ident
        finally:
            box.stop_server(h, grace=5)
    assert (ident.engine, ident.version, ident.models) == ("unknown", None, ())
    assert ident.evidence == ("/server_info: HTTP 404", "/version: HTTP 404", "/v1/models: HTTP 404",
                              "/metrics: HTTP 404")


def test_sources_that_disagree_are_conflicting_with_both_named(free_port, tiny_server_argv, tmp_path):
    """A stand-in (the tiny server's ``--claim-engines``: SGLang's ``/server_info`` and vLLM's
    ``/version`` at once; no real engine does this) is not called either engine."""
    with connect("local", state_dir=tmp_path / "state") as box:
        h = box.launch_server([*tiny_server_argv, "--port", str(free_port), "--claim-engines"], port=free_port)
        try:
            box.wait_healthy(h, timeout=30, poll_interval=0.05)
            ident = box.server_identity(free_port, timeout=10)
        finally:
            box.stop_server(h, grace=5)
    assert ident.engine == "conflicting"
    assert ident.version == "0.5.23"  # the first source that told one
    assert ident.evidence[:2] == ("/server_info: SGLang's server args, version 0.5.23", "/version: 0.32.0 (vLLM's route)")
