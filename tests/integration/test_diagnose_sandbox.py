"""The main job end to end on the embedded sandbox box: real server processes, real HTTP, real
papermill executions, real probes in the sandbox's ``srt/models/llama_eagle3.py``.

The sandbox is diagnosed like any box (through ``remote``, HTTP and its files); these tests look at
it from the outside too: the server processes on the port, the sha256 of the file the probe patches,
the journal on the box.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote import connect
from remote import probes as remote_probes
from workbench.diagnosis.run import DRAFT_MODEL_FILE
from workbench.sandbox_box import sandbox_launch_command
from workbench.session.journal import Journal
from workbench.report import check_self_contained, count_plotly_figures, render_dom
from testkit.engine_copy import sandbox_engine_dir, checkout_dir

ROOT = Path(__file__).resolve().parents[2]
DRAFT_FILE = sandbox_engine_dir() / DRAFT_MODEL_FILE  # the file the probe patches, in this process's engine
TARGET_CONFIG = ROOT / "workbench" / "sandbox" / "models" / "target" / "config.json"

pytestmark = pytest.mark.slow


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _servers_on(box, port):
    return [s for s in box.find_servers() if s.port == port]


def _run_runbook(tmp_path, port, state_dir, extra=()):
    """``workbench runbook diagnose_acceptance`` as a user runs it (a subprocess)."""
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir))
    cmd = [sys.executable, "-m", "workbench.cli", "runbook", "diagnose_acceptance", "--report-dir",
           str(tmp_path / "reports"), "-p", "port", str(port), "-p", "num_prompts", "4",
           "-p", "max_new_tokens", "64", *extra]
    return subprocess.run(cmd, env=env, cwd=checkout_dir(), capture_output=True, text=True, timeout=900)


def _assert_sandbox_verdict(verdict):
    """The verdict every sandbox diagnosis with the wrong flag must reach (issue 2's "done when")."""
    hidden = json.loads(TARGET_CONFIG.read_text())["hidden_size"]
    assert verdict["root_cause"]["rule"] == "algorithm-mismatch"
    assert verdict["acceptance"]["before"]["accept_length"] <= 1.2
    assert verdict["acceptance"]["after"]["accept_length"] >= 2.0
    _assert_mechanism_shown(verdict, hidden)
    # every hypothesis of the catalogue decided; the flag is the one cause, its mechanism shown by the probe
    by_id = {h["id"]: h["verdict"] for h in verdict["hypotheses"]}
    assert [h for h, v in by_id.items() if v == "confirmed"] == ["algorithm-flag"]
    assert set(by_id) >= {"algorithm-flag", "aux-eagle-config", "weights-loaded", "token-map", "chat-template"}
    assert all(h["evidence"] for h in verdict["hypotheses"])
    assert verdict["root_cause"]["hypothesis"] == "algorithm-flag"
    assert verdict["root_cause"]["mechanism_confirmed_by_probe"] is True


def _assert_mechanism_shown(verdict, hidden):
    """The flag's mechanism with no probe launch (issue 28): the probes rode on the fix launch, whose
    draft receives fc's 3 x hidden width, and the server as found showed without a restart (its
    /server_info's algorithm through the code-path map) that it sends fc the hidden-size state only."""
    probe = verdict["probe"]
    assert probe["rides_on"] == "fix" and probe["observed_hidden_size"] is None  # nothing probed as found
    assert probe["expected_hidden_size"] == 3 * hidden and probe["after_fix_hidden_size"] == 3 * hidden
    assert verdict["live"]["fc_widths_as_found"] == [hidden]
    assert "EAGLE" in verdict["live"]["fc_widths_source"]
    assert verdict["root_cause"]["mechanism_confirmed_by"] == (
        "probe on the fixed server + live evidence of the server as found")
    flag = next(h for h in verdict["hypotheses"] if h["id"] == "algorithm-flag")
    kinds = [e["kind"] for e in flag["evidence"]]
    assert kinds.index("live") < kinds.index("probe")  # read before any restart, then the probe on the fix
    assert [launch["label"] for launch in verdict["launches"] if launch["label"] == "probe"] == []


def test_diagnose_sandbox_from_a_launch_command(tmp_path, free_port, state_dir):
    """No server on the port: the runbook launches the wrong-flag command itself, diagnoses it,
    verifies the fix and stops everything it started (the box had no server, it has none after)."""
    box = connect("local", state_dir=state_dir)
    sha_before = box.sha256(DRAFT_FILE)
    result = _run_runbook(tmp_path, free_port, state_dir)
    assert result.returncode == 0, result.stderr[-4000:]
    verdict = json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())
    _assert_sandbox_verdict(verdict)
    assert verdict["outcome"] == "fixed" and verdict["fix"]["sufficient"] is True and verdict["fix"]["kinds"] == ["launch"]
    assert verdict["probe"]["after_fix_hidden_size"] == verdict["probe"]["expected_hidden_size"]
    assert "--speculative-algorithm EAGLE3" in verdict["fix"]["launch_command"]
    assert [d["flag"] for d in verdict["fix"]["diff"]] == ["--speculative-algorithm"]
    # nothing ran: the as-found launch is not a restart; the fix is (the probes ride on it); nothing
    # relaunched at the end. Two start-ups; the box was down only between the as-found server and
    # the fixed one (nothing served before the run, nothing is relaunched after it)
    assert verdict["restarts"] == 1
    assert [launch["label"] for launch in verdict["launches"]] == ["as-found", "fix"]
    assert verdict["loads"] == 2 and verdict["downtime_s"] == pytest.approx(
        sum(s["seconds"] for s in verdict["timeline"] if s["state"] == "down"))
    assert [s["state"] for s in verdict["timeline"]] == ["no server", "serving as found", "down", "serving fixed",
                                                         "no server"]
    assert verdict["duration_s"] > 0
    # each launch's start-up progress reached the terminal (the driver relays the cell's start-up
    # lines: workbench.session.startup_wait.ProgressRelay), ending ready; no other cell stderr
    for label in ("as-found", "fix"):
        assert f"[start-up] {label}: ready after " in result.stderr, result.stderr[-2000:]
    # the terminal's last line: the verdict in figures, without opening the report
    acc = verdict["acceptance"]
    assert result.stdout.splitlines()[-1] == (
        f"verdict: fixed; accept length {acc['before']['accept_length']:.3f} -> {acc['after']['accept_length']:.3f}; "
        "root cause: algorithm-mismatch; box restored"), result.stdout

    # the box as found: no server on the port, the draft file byte for byte, no probe, no journal
    assert _servers_on(box, free_port) == []
    assert box.sha256(DRAFT_FILE) == sha_before
    assert remote_probes.list_probes(box) == []
    assert not Journal(box).pending

    html_path = tmp_path / "reports" / "diagnose_acceptance.html"
    html = html_path.read_text()
    assert check_self_contained(html) == []
    assert "algorithm-mismatch" in html
    # opened offline in headless Chromium, the figures are drawn: before/after, per request,
    # timeline, probe width (read on the fixed server), and at the end the box's timeline;
    # plotly.js creates one <svg class="main-svg"> layer pair per figure
    figures = count_plotly_figures(html)
    assert figures == 6  # + the per-position acceptance of the measured requests
    assert "The box during the run" in html
    dom = render_dom(html_path)
    assert dom.count('class="main-svg"') >= figures
    _assert_readable(html_path)


def _assert_readable(html_path):
    """The report as a reader sees it in Chromium (Playwright, tests/testkit/report_layout.py), at 1280
    and 800 px: no progress bar in a stderr block, each paragraph once, the code-path table left-aligned
    with its code as <code> and no literal backtick, the page never wider than the window, no two
    plotly text boxes intersecting."""
    import collections

    from tests.testkit.report_layout import measure_report
    from workbench.report.html import is_progress_line

    for width, f in measure_report(html_path, widths=(1280, 800)).items():
        assert not [t for t in f["stderr"] if is_progress_line(t) or "it/s" in t], (width, f["stderr"])
        # the ledger's back-references ("note: the same as under h1") are pointers, not repeated prose
        repeated = [t for t, n in collections.Counter(f["paragraphs"]).items() if n > 1 and "the same as under" not in t]
        assert repeated == [], (width, repeated)
        cells = f["codepath"]
        assert cells, "the code-path table is in the report"
        assert {c["align"] for c in cells} == {"left"}
        assert all("`" not in c["text"] for c in cells), [c["text"] for c in cells if "`" in c["text"]]
        assert sum("<code>" in c["html"] for c in cells) >= len(cells) // 3  # the file:line column at least
        assert f["page"]["scroll"] <= f["page"]["inner"], (width, f["page"])
        assert f["overlaps"] == [], (width, f["overlaps"])


def test_diagnose_running_server_is_put_back(tmp_path, free_port, state_dir):
    """A server runs with the wrong flag: the runbook diagnoses it, and afterwards the same
    command line serves the port again (a new process, same argv), with the file unchanged."""
    box = connect("local", state_dir=state_dir)
    argv = shlex.split(sandbox_launch_command(port=free_port))
    handle = box.launch_server(argv, port=free_port, log_path=tmp_path / "original.log")
    try:
        box.wait_healthy(handle, timeout=180)
        sha_before = box.sha256(DRAFT_FILE)
        result = _run_runbook(tmp_path, free_port, state_dir)
        assert result.returncode == 0, result.stderr[-4000:]
        verdict = json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())
        assert verdict["root_cause"]["rule"] == "algorithm-mismatch"
        assert verdict["inventory"]["server_pid"] == handle.pid
        # the fix launch (the probes ride on it), the original relaunched: two loads, each with why
        assert verdict["restarts"] == 2 and verdict["loads"] == 2
        assert [(launch["label"], launch["reason"]) for launch in verdict["launches"]] == [
            ("fix", "fix: measure the fix for algorithm-mismatch with the probes riding on it"),
            ("restore", "restore: relaunch the server as found")]
        assert verdict["downtime_s"] > 0
        servers = _servers_on(box, free_port)
        assert len(servers) == 1 and list(servers[0].argv) == argv and servers[0].pid != handle.pid
        assert box.sha256(DRAFT_FILE) == sha_before
        assert not Journal(box).pending
        # the relaunched original appends to the original log file
        assert servers[0].log_path == str(tmp_path / "original.log")
    finally:
        for s in _servers_on(box, free_port):
            box.stop_server(s)


@pytest.mark.parametrize("interrupts", [1, 3])
def test_interrupted_run_leaves_the_box_as_found(tmp_path, free_port, state_dir, interrupts):
    """SIGINT to the driver while the probe is in the engine source and the probed server runs:
    the probe is reverted byte for byte, the diagnosis's server stopped, the original relaunched.
    More Ctrl-C's while it restores (an impatient user) do not cut the restore short."""
    box = connect("local", state_dir=state_dir)
    argv = shlex.split(sandbox_launch_command(port=free_port))
    handle = box.launch_server(argv, port=free_port, log_path=tmp_path / "original.log")
    driver = None
    try:
        box.wait_healthy(handle, timeout=180)
        sha_before = box.sha256(DRAFT_FILE)
        env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir))
        driver = subprocess.Popen(
            [sys.executable, "-m", "workbench.cli", "runbook", "diagnose_acceptance", "--report-dir",
             str(tmp_path / "reports"), "-p", "port", str(free_port), "-p", "num_prompts", "2",
             "-p", "max_new_tokens", "32"],
            env=env, cwd=checkout_dir(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # Ctrl-C in a terminal: SIGINT at its default even when this test runs in a background
            # job of a shell without job control (which starts it ignored, and the driver with it).
            preexec_fn=_sigint_default)
        deadline = time.monotonic() + 600
        # the probe is journalled ("pending") before the file is patched: wait until it is active
        # and the probed server has been launched from the patched file
        while not (any(p.state == "active" for p in remote_probes.list_probes(box))
                   and [s for s in _servers_on(box, free_port) if s.pid != handle.pid]):
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the probe never appeared"
            time.sleep(0.2)
        assert box.sha256(DRAFT_FILE) != sha_before  # the probe is in
        driver.send_signal(signal.SIGINT)
        for _ in range(interrupts - 1):
            time.sleep(0.5)
            if driver.poll() is None:
                driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=600)
        assert driver.returncode == 130, err[-3000:]
        assert "the box was restored" in err, err[-3000:]
        assert box.sha256(DRAFT_FILE) == sha_before, err[-3000:]
        assert remote_probes.list_probes(box) == []
        servers = _servers_on(box, free_port)
        assert len(servers) == 1 and list(servers[0].argv) == argv, err[-3000:]
        assert not Journal(box).pending
        # the executed notebook was kept (papermill saves it) and exported
        assert (tmp_path / "reports" / "diagnose_acceptance.ipynb").exists()
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.communicate()
        for s in _servers_on(box, free_port):
            box.stop_server(s)


def test_runbook_over_ssh_reaches_the_same_verdict(tmp_path, free_port, state_dir, ssh_env):
    """``host`` set to an alias of the loopback sshd (which serves this machine, so the sandbox box
    is there): the unchanged runbook diagnoses the layered case (the wrong flag and a broken token
    map, ``testkit.faults``) through SSH (commands over exec channels, files over SFTP, HTTP through
    a port forward): both causes in the order they act, both fixed in one relaunch, and the box left
    as found. (The one end-to-end run over SSH: the fault matrix's layered case runs locally.)"""
    from testkit.faults import build_deployment

    dep = build_deployment(tmp_path / "deployment", "eagle-flag", "d2t-minus-arange")
    with connect(ssh_env.alias, state_dir=state_dir) as box:
        sha_before = box.sha256(DRAFT_FILE)
        result = _run_runbook(tmp_path, free_port, state_dir,
                              extra=("-p", "host", ssh_env.alias, "-p", "launch_command", dep.launch_command(free_port)))
        assert result.returncode == 0, result.stderr[-4000:]
        verdict = json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())
        assert [c["hypothesis"] for c in verdict["root_causes"]] == ["algorithm-flag", "token-map"], verdict["root_causes"]
        assert verdict["root_cause"]["rule"] == "algorithm-mismatch"
        assert verdict["outcome"] == "fixed" and verdict["fix"]["kinds"] == ["draft-copy", "launch"], verdict["fixes"]
        assert verdict["acceptance"]["before"]["accept_length"] <= 1.2
        assert verdict["acceptance"]["after"]["accept_length"] >= 2.0
        hidden = json.loads(TARGET_CONFIG.read_text())["hidden_size"]
        _assert_mechanism_shown(verdict, hidden)
        inventory = verdict["inventory"]
        assert inventory["host"] == ssh_env.alias
        # the server was reached through a local port forward, not its own port
        assert inventory["base_url"].startswith("http://127.0.0.1:") and not inventory["base_url"].endswith(
            f":{free_port}")
        assert verdict["restarts"] == 1, [launch["label"] for launch in verdict["launches"]]  # the fix (probes ride on it)
        # the report is not cluttered by the forward's refused connections while servers started
        assert "open FAILED" not in (tmp_path / "reports" / "diagnose_acceptance.ipynb").read_text()

        # the box as found, seen through SSH and directly: no server, no probe, no journal, the
        # committed draft byte for byte
        assert _servers_on(box, free_port) == []
        assert box.sha256(DRAFT_FILE) == sha_before
        assert remote_probes.list_probes(box) == []
        assert not Journal(box).pending
    assert connect("local", state_dir=state_dir).find_servers(rf"--port {free_port}\b") == []
