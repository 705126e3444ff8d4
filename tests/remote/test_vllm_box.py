"""The box layer on a REAL vLLM server (vLLM's CPU build, ``make vllm``; the sandbox target with its
EAGLE-3 draft): found once with its helpers, its port, log and engine; ready through vLLM's own
routes; identified as vLLM; stopped as a whole with nothing left and every port freed. Locally on a
server started outside the box (the testkit's launcher), and over the real loopback sshd on one the
box launches itself.

Both process trees a one-GPU-sized vLLM server has: the CPU build's default executor, ``mp``
(api_server → resource_tracker, ``VLLM::EngineCore`` → ``VLLM::Worker``: the local test and the
engine-core-killed test, where the worker outlives the api_server), and the uniprocess executor vLLM
uses for one GPU (api_server → resource_tracker, ``VLLM::EngineCore`` running the model:
``testkit.vllm_servers.UNIPROC_ENV``, the SSH test).

Each test owns its server (a stop test needs its own) and they run one after the other: at most one
vLLM server (~2.7 GB) at a time. Timings are printed (``-s``) as ``vLLM box timing: …``.
"""

import re
import signal
import time

import httpx
import pytest

from remote import connect
from remote.errors import ServerNotReady, ServerStartNotReady, ServerStartTimedOut
from remote.readiness import check_generation, identify_server, wait_ready
from testkit.ports import free_port
from workbench.sandbox_box import sandbox_vllm_launch_command
from testkit.sandbox_servers import TARGET
from testkit.vllm_servers import (
    LOG_STATS_INTERVAL,
    START_TIMEOUT,
    UNIPROC_ENV,
    launch_argv,
    require_vllm,
    speculative_config,
    vllm_python,
)

pytestmark = pytest.mark.slow

#: What a vLLM server needs on top of the box's environment (shared/notes/vllm-cpu.md).
VLLM_ENV = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": LOG_STATS_INTERVAL,
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1"}
#: The process titles under the api_server, per executor (vLLM 0.32.0, one worker).
TITLES = {"mp": ["VLLM::EngineCore", "VLLM::Worker"], "uni": ["VLLM::EngineCore"]}


def installed_vllm_version():
    """The version of the vLLM the tests run, from its ``_version.py`` (not importing vllm)."""
    (path,) = vllm_python().parent.parent.glob("lib/python*/site-packages/vllm/_version.py")
    return re.search(r"^__version__ = version = '([^']+)'", path.read_text(), re.M).group(1)


def report(what, **numbers):
    print("vLLM box timing:", what, " ".join(f"{k}={v}" for k, v in numbers.items()))


def check_found_ready_identified_stopped(box, pid, port, log_path, executor):
    """The whole contract on one live vLLM server (api_server ``pid`` on ``port``, log ``log_path``,
    its executor ``"mp"`` or ``"uni"``: :data:`TITLES`)."""
    # -- found once, with its helpers ------------------------------------------------------------
    tree = {p.pid: p for p in box.process_tree(pid)}
    titles = sorted(p.argv[0] for p in tree.values() if p.argv and "::" in p.argv[0])
    assert titles == TITLES[executor], tree
    trackers = [q for q, p in tree.items() if any("multiprocessing.resource_tracker" in a for a in p.argv)]
    assert len(trackers) == 1
    assert {p.pgid for p in tree.values()} == {pid}  # one process group, the api_server's
    found = box.find_servers()
    mine = [s for s in found if s.pid in tree]
    assert [s.pid for s in mine] == [pid], [(s.pid, s.argv[:1]) for s in mine]
    (s,) = mine
    assert s.engine == "vllm" and s.port == port and s.log_path == str(log_path)
    # without --port in its argv (a --config YAML gave it) the port is read from the listening socket
    assert s.listening_ports == (() if "--port" in s.argv else (port,))
    assert set(s.children) == set(tree) - {pid}
    # a pattern that matches the helpers' titles and the venv's path still lists the api_server alone
    assert [x.pid for x in box.find_servers(r"VLLM::|vllm") if x.pid in tree] == [pid]
    ports = {q: box.listening_ports_of(q) for q in tree}
    assert ports[pid] == (port,)  # the api_server listens on its HTTP port only
    helper_ports = {p for q, ps in ports.items() if q != pid for p in ps}
    # -- ready, through vLLM's routes ---------------------------------------------------------------
    url = box.url(port)
    with httpx.Client(trust_env=False) as client:
        for engine in (None, "vllm"):
            r = check_generation(client, url, timeout=60, engine=engine)
            assert r.ready and r.path == "/v1/completions (1 token)", r
        assert r.missing_routes == ()
        assert check_generation(client, url, timeout=60).missing_routes == ("/health_generate", "/generate")
        t0 = time.monotonic()
        assert wait_ready(url, start_timeout=30, request_timeout=60, engine="vllm", progress=None) < 30
        ready_s = time.monotonic() - t0
        ident = identify_server(client, url, timeout=30)
    assert box.server_identity(port, timeout=30) == ident  # the same through the box's own URL
    assert ident.engine == "vllm", ident.evidence
    assert ident.version == installed_vllm_version()
    assert ident.models == (str(TARGET),)
    assert any(e.startswith("/server_info: HTTP 404") for e in ident.evidence)  # no dev mode
    # -- stopped as a whole --------------------------------------------------------------------------
    stopped = box.stop_server(s, grace=60)
    assert stopped.how == "terminated" and stopped.signals == ("TERM",)
    assert set(stopped.stopped_pids) == set(tree) and stopped.outside_group == ()
    assert not any(box.is_alive(q) for q in tree)
    assert not box.group_alive(pid)
    assert box.process_tree(pid) == []
    listening = box.listening_ports()
    assert port not in listening and not (helper_ports & listening)
    return {"ready_check_s": round(ready_s, 3), "stop_s": round(stopped.waited_s, 2), "pids": len(tree),
            "helper_ports": len(helper_ports)}


def test_a_vllm_server_started_elsewhere_is_found_ready_identified_and_stopped_locally(own_vllm_server, tmp_path):
    with own_vllm_server(tmp_path / "logs", spec=speculative_config(), executor="mp") as server, \
            connect("local") as box:
        numbers = check_found_ready_identified_stopped(box, server.pid, server.port, server.log_path, "mp")
        report("local", started_s=round(server.started_s, 1), **numbers)


def test_a_vllm_server_launched_over_ssh_is_ready_found_and_stopped_as_a_whole(ssh_env, tmp_path):
    """Launched over SSH with its port in a ``--config`` YAML (vLLM 0.32.0 ``FlexibleArgumentParser.
    _pull_args_from_config``), so its argv names no ``--port``: found on the port it listens on. With
    the uniprocess executor (``UNIPROC_ENV``): the model in ``VLLM::EngineCore``, no worker."""
    require_vllm()
    port = free_port()
    log = tmp_path / "vllm over ssh.log"
    config = tmp_path / "serve.yaml"
    config.write_text(f"port: {port}\n")
    argv = launch_argv(port, spec=speculative_config())
    at = argv.index("--port")
    argv[at:at + 2] = ["--config", str(config)]
    with connect(ssh_env.alias, state_dir=tmp_path / "state") as box:
        t0 = time.monotonic()
        h = box.launch_server(argv, port=port, log_path=log, env={**VLLM_ENV, **UNIPROC_ENV})
        try:
            assert box.process(h.pid).pgid == h.pid  # its own session and group
            waited = box.wait_healthy(h, timeout=START_TIMEOUT)
            assert any("Application startup complete" in line for line in box.tail(h.log_path, 200))
            numbers = check_found_ready_identified_stopped(box, h.pid, port, log, "uni")
        finally:
            box.stop_server(h, grace=30)
        assert not (tmp_path / "vllm over ssh.log.pid").exists()
        report("ssh", launch_to_ready_s=round(waited, 1), total_s=round(time.monotonic() - t0, 1), **numbers)


def test_a_vllm_server_that_wants_a_key_then_loses_its_engine_core_is_said_so_and_left_clean(tmp_path):
    """Launched as shell text (the sandbox box's vLLM command, ``VAR=value`` assignments first, so
    ``wait_healthy`` must read the engine through them) with ``--api-key``: the launch answers but
    ``/v1/models`` is 401, so ``wait_healthy`` raises at once saying a key is wanted (not a time-out);
    with the key it is ready. Then its ``VLLM::EngineCore`` is
    killed: the check stops being ready, the api_server exits (vLLM 0.32.0 shuts down on
    ``EngineDeadError``, logged), and ``stop_server`` leaves nothing of the group (the worker
    outlives the api_server) and frees the port."""
    require_vllm()
    port = free_port()
    key = "ewb-test-key"
    with connect("local", state_dir=tmp_path / "state") as box:
        text = sandbox_vllm_launch_command(port=port, python=str(vllm_python())) + f" --api-key {key}"
        h = box.launch_server(text, port=port, log_path=tmp_path / "vllm.log", env=VLLM_ENV)
        assert h.argv == (text,)
        try:
            with pytest.raises(ServerStartNotReady) as info:
                box.wait_healthy(h, timeout=START_TIMEOUT)
            assert "HTTP 401" in info.value.last and "API key" in info.value.last and info.value.routes == ()
            assert isinstance(info.value, ServerStartTimedOut) and box.is_alive(h.pid)
            url = box.url(port)
            with httpx.Client(trust_env=False, headers={"Authorization": f"Bearer {key}"}) as keyed, \
                    httpx.Client(trust_env=False) as plain:
                assert check_generation(keyed, url, timeout=60, engine="vllm").ready
                ident = identify_server(plain, url, timeout=30)
                assert ident.engine == "vllm" and "/v1/models: HTTP 401" in ident.evidence
                (core,) = [p.pid for p in box.process_tree(h.pid) if p.argv[:1] == ("VLLM::EngineCore",)]
                box.transport.kill(core, signal.SIGKILL)
                with pytest.raises(ServerNotReady):
                    wait_ready(url, start_timeout=60, request_timeout=30, engine="vllm", client=keyed,
                               alive=lambda: box.is_alive(h.pid), progress=None)
            deadline = time.monotonic() + 60
            while box.is_alive(h.pid):
                assert time.monotonic() < deadline, "the api_server outlived its engine core by 60 s"
                time.sleep(0.2)
            assert any("EngineDeadError" in line for line in box.tail(h.log_path, 400))
        finally:
            stopped = box.stop_server(h, grace=30)
        assert box.process_tree(h.pid) == [] and not box.port_in_use(port)
        report("engine core killed", left_after_api_server_exit=len(stopped.stopped_pids), how=stopped.how)
