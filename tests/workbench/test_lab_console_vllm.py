"""The box console and the control panel with ``engine="vllm"`` (issue 29, part 1), on the real vLLM
CPU build: the shared server (``vllm_server()``: the sandbox target with the sandbox draft as
shipped) for what only reads (status, the Log tab's metrics lines, the Accept length tab's
``/metrics`` counters, vLLM's probe recipes, the panel's inventory), and one server the console
launches and stops itself, on a port of its own, for start / stop / put back.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from workbench.engine.recipes import VLLM_RECIPES
from workbench.errors import WorkbenchInputError
from workbench.lab.console import BoxConsole
from workbench.logs.vllm_log import parse_spec_decoding_line
from workbench.measure.sources import parse_metrics
from workbench.measure.vllm import counter_window, spec_counters

PROMPTS = ["def fibonacci(n):\n    ", "import os\nimport sys\n\n", "The quick brown fox", "for i in range(10):\n"]


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """This test's own journal and run lock (the workbench's state directory on the local box)."""
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _settle(log_path: Path) -> None:
    """Wait until vLLM's stat logger (``VLLM_LOG_STATS_INTERVAL=1`` on test servers) wrote its last
    interval: the log stops growing for 2.5 s."""
    size, still = log_path.stat().st_size, time.monotonic()
    while time.monotonic() - still < 2.5:
        time.sleep(0.5)
        now = log_path.stat().st_size
        if now != size:
            size, still = now, time.monotonic()


def _complete(url: str, n: int = 4, max_tokens: int = 32) -> None:
    model = httpx.get(url + "/v1/models", timeout=30, trust_env=False).json()["data"][0]["id"]
    for text in PROMPTS[:n]:
        r = httpx.post(url + "/v1/completions", json={"model": model, "prompt": text, "max_tokens": max_tokens,
                                                      "temperature": 0}, timeout=120, trust_env=False)
        assert r.status_code == 200, r.text


def _snapshot(url: str):
    return parse_metrics(httpx.get(url + "/metrics", timeout=30, trust_env=False).text)


def test_engine_values_are_checked(free_port):
    with pytest.raises(WorkbenchInputError, match=r"engine='llama' \(local\): give one of 'auto', 'sglang', 'vllm'"):
        BoxConsole(port=free_port, engine="llama")
    from workbench.lab.panel import control_panel

    with pytest.raises(WorkbenchInputError, match="engine='tgi'"):
        control_panel(engine="tgi")
    assert control_panel(engine="VLLM").engine.value == "vllm" and control_panel().engine.value == "auto"


def test_no_server_offers_the_engines_sandbox_command(free_port):
    c = BoxConsole(port=free_port, engine="vllm")
    try:
        assert "-m vllm.entrypoints.openai.api_server" in c.command.value
        assert f"--port {free_port}" in c.command.value and "VLLM_HOST_IP=127.0.0.1" in c.command.value
        assert c.state.engine_name() == "vllm"
    finally:
        c.close()
    c = BoxConsole(port=free_port)
    try:
        assert "workbench.sandbox.launch_server" in c.command.value and c.state.engine_name() == "sglang"
    finally:
        c.close()


@pytest.mark.vllm
@pytest.mark.slow
def test_the_console_reads_a_real_vllm_server(vllm_server, state_dir):
    srv = vllm_server()
    c = BoxConsole(port=srv.port, engine="vllm")
    try:
        f = c.status()
        assert (f["engine"], f["engine_version"]) == ("vllm", "0.32.0") and "engine_note" not in f
        assert f["engine_root"].endswith("site-packages/vllm") and f["pid"] == srv.pid
        assert "vllm 0.32.0 at" in c.status_html.value
        assert c.command.value == " ".join(__import__("shlex").quote(a) for a in srv.argv)
        panes = {title: pane for title, pane, _ in c.panes}
        log, accept, probes = panes["Log"], panes["Accept length"], panes["Probes"]
        # the probes tab offers vLLM's recipes, anchored on vLLM's own code path
        probes.refresh()
        assert list(probes.recipe.options) == list(VLLM_RECIPES)
        assert c.state.code_path().engine == "vllm"
        # the accept length tab: vLLM's counters, the window between two polls
        _settle(srv.log_path)
        start = srv.log_path.stat().st_size
        accept.poll_once()
        before = _snapshot(srv.url)
        _complete(srv.url)
        after = _snapshot(srv.url)
        assert accept.poll_once() == 1
        rec, want = accept.records[-1], counter_window(before, after)
        assert accept.source == "metrics" and not rec["since_start"] and want.drafts > 0
        assert rec["drafts"] == want.drafts and rec["accept_len"] == pytest.approx(1 + want.accepted / want.drafts)
        # chain drafting: the accepted tokens are the per-position counts summed (two counters agree)
        assert rec["accept_len"] == pytest.approx(1 + sum(rec["per_position"]))
        assert rec["per_position"] == sorted(rec["per_position"], reverse=True) and len(rec["per_position"]) == 3
        assert accept.ceiling == 4.0 and "per-position acceptance" in accept.summary_text()
        # the log tab: vLLM's own metrics lines of that window, parsed
        _settle(srv.log_path)
        log.poll_once()
        lines = srv.log_path.read_bytes()[start:].decode().splitlines()
        last = [parse_spec_decoding_line(ln) for ln in lines if "SpecDecoding metrics:" in ln][-1]
        assert log.last_spec is not None and log.last_spec.line == last.line
        assert f"mean acceptance length {last.mean_acceptance_length:.2f}" in log.spec.value
        log.preset.value = "vLLM spec metrics"
        assert log.shown() and all("SpecDecoding metrics" in ln for ln in log.shown())
        # the counters since start agree with what the log printed over the same requests
        total = spec_counters(after)
        assert total.drafts >= want.drafts
    finally:
        c.close()
    # asked for SGLang, given a vLLM server: read as it is, and said
    c = BoxConsole(port=srv.port, engine="sglang")
    try:
        f = c.status()
        assert f["engine"] == "vllm" and "engine='sglang' was asked for" in f["engine_note"]
        assert "wb-console-engine-note" in c.status_html.value
    finally:
        c.close()


@pytest.mark.vllm
@pytest.mark.slow
def test_the_panel_inventories_a_real_vllm_server(vllm_server, state_dir, tmp_path):
    from workbench.lab.panel import control_panel

    srv = vllm_server()
    panel = control_panel(port=srv.port, engine="vllm", report_dir=str(tmp_path / "reports"), num_prompts=2,
                          max_new_tokens=24)
    inv = panel.step("start")
    try:
        assert inv is not None, panel.errors
        assert (inv.engine, inv.engine_version, inv.server_pid) == ("vllm", "0.32.0", srv.pid)
        assert inv.engine_root.endswith("site-packages/vllm")
    finally:
        panel.step("finish")
    assert panel.run.finished and panel.errors == []
    assert httpx.get(srv.url + "/health", timeout=10, trust_env=False).status_code == 200  # left as found


@pytest.mark.vllm
@pytest.mark.slow
def test_the_console_starts_and_stops_a_vllm_server(free_port, state_dir):
    """Start a vLLM launch command from the Server tab (the doctor's vLLM rules check it first), read
    it, stop it, put the box back: nothing of it left."""
    from workbench.sandbox_box import sandbox_vllm_launch_command

    c = BoxConsole(port=free_port, engine="vllm", server_start_timeout=240)
    try:
        # the uniprocess executor: the test servers' setting (testkit.vllm_servers.UNIPROC_ENV)
        command = "VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 " + sandbox_vllm_launch_command(port=free_port)
        handle = c.start(command)
        assert handle is not None, c.status_line.value
        # the doctor's vLLM rules on the exact command: the draft's SGLang aux-id convention
        assert [(f.rule, f.severity) for f in c.last_findings] == [("aux-id-convention", "warning")]
        f = c.status()
        assert (f["engine"], f["health"], f["port"]) == ("vllm", "ready", free_port)
        assert c.stop() is True and "stopped pid" in c.status_line.value
        report = c.restore()
        assert report is not None and report.clean
        assert c.state.servers() == [] or all(s.port != free_port for s in c.state.servers())
    finally:
        c.close()
