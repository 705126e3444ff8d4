"""A server that stops answering in the middle of a real diagnosis (issue 26 part 3, item 1): the
sandbox server under measurement is SIGKILLed, or SIGSTOPped (it then accepts connections and
never answers), while a step measures it. The run must end with the verdict ``inconclusive``, its
``outcome_detail`` saying the server stopped answering (which server, its pid and port, in which
step, how its log ends), never with an exception; the box restored (journal empty, probes
reverted, nothing the run launched left, the original server relaunched when the run had stopped
it); the verdict JSON written — and, through ``workbench runbook``, the HTML report too.

Real parts only: sandbox server processes, HTTP, the local box, papermill. Faults are injected by
a watcher thread that waits for the step to be reached (the run's own launch record of the server,
appended once it is healthy, or the executed notebook's cell status), then signals the server's
process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.faults import build_deployment
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.diagnosis import DiagnosisRun
from workbench.diagnosis.run import SERVER_STOPPED_ANSWERING
from workbench.session import Journal
from testkit.engine_copy import checkout_dir

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: long enough that the signal lands while the step still measures (the sandbox decodes a few
#: hundred tokens per second here), short enough to keep the test fast
PROMPTS = dict(num_prompts=3, max_new_tokens=64)
#: seconds a request may take: a SIGSTOPped server is given up on after this (a 64-token request
#: takes about 3 s here while other tests load the 2 cores; a tighter bound reads as a hang)
REQUEST_TIMEOUT = 20.0


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    path = tmp_path / "box-state"
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(path))
    return path


class _Injector:
    """Signals the process group of the first server the run launched under ``label`` as soon as
    ``diagnosis.launches`` records it (appended once it answered healthy: the step measures it next).
    ``hit``: that launch record, once signalled."""

    def __init__(self, diagnosis: DiagnosisRun, label: str, sig: int):
        self.diagnosis, self.label, self.sig = diagnosis, label, sig
        self.hit: dict | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.is_set():
            launch = next((l for l in list(self.diagnosis.launches) if l.get("label") == self.label and l.get("pid")
                           and l.get("healthy_after_s") is not None), None)  # not a launch that failed to start
            if launch is not None:
                os.killpg(os.getpgid(launch["pid"]), self.sig)
                self.hit = launch
                return
            time.sleep(0.01)


def _servers_on(box, port: int) -> list:
    return [s for s in box.find_servers() if s.port == port]


def _box_restored(box, port: int) -> None:
    assert not Journal(box).pending and Journal(box).data == {}
    assert remote_probes.list_probes(box) == []


def test_the_as_found_server_killed_mid_measurement_ends_inconclusive(tmp_path, state_dir, free_port):
    """No server ran: the run launches the command as found and measures it; the server is
    SIGKILLed as the measurement starts. The symptom step returns (no exception), the later steps
    are skipped (no probe, no fix: 0 restarts), the verdict says which server stopped answering,
    and nothing is left on the port."""
    dep = build_deployment(tmp_path / "deployment", "eagle-flag")
    run = DiagnosisRun.start(launch_command=dep.launch_command(free_port), port=free_port,
                             report_dir=tmp_path / "reports", request_timeout=REQUEST_TIMEOUT, **PROMPTS)
    run.progress = False
    injector = _Injector(run, "as-found", signal.SIGKILL)
    try:
        step = run.measure_symptom()
        assert injector.hit is not None, f"the as-found server never got healthy: {run.start_failures}"
        pid = injector.hit["pid"]
        assert step.verdict == "inconclusive" and step.summary.startswith(SERVER_STOPPED_ANSWERING), step.summary
        run.check_hypotheses()  # static: still decided from the files
        assert run.probe() is None and run.apply_fixes() is None and run.attribute() is None
        verdict = run.finish()
    finally:
        injector.stop.set()
        if not run.finished:
            run.finish()
    assert verdict["outcome"] == "inconclusive"
    detail = verdict["outcome_detail"]
    assert detail.startswith(f"{SERVER_STOPPED_ANSWERING}: the server the run launched as found "
                             f"(pid {pid}, port {free_port}) exited during measure_symptom"), detail
    assert "; the box was restored" in detail and "its log ends: " in detail, detail
    lost = verdict["server_stopped_answering"]
    assert (lost["pid"], lost["port"], lost["state"], lost["step"]) == (pid, free_port, "exited", "measure_symptom")
    assert lost["log_tail"] and lost["log_path"] == injector.hit["log_path"]
    assert verdict["restarts"] == 0 and verdict["acceptance"]["before"]["accept_length"] is None
    assert [l["label"] for l in verdict["launches"]] == ["as-found"]
    assert any(n.startswith("no probe: server stopped answering") for n in verdict["notes"]), verdict["notes"]
    # the statically decided cause is still reported; the outcome does not claim more than was measured
    assert [c["rule"] for c in verdict["root_causes"]] == ["algorithm-mismatch"]
    written = json.loads((tmp_path / "reports" / "diagnose_acceptance.json").read_text())
    assert written["outcome"] == "inconclusive" and written["outcome_detail"] == detail
    with connect("local") as box:
        _box_restored(box, free_port)
        assert _servers_on(box, free_port) == []


def test_the_fix_server_sigstopped_ends_inconclusive_and_the_original_comes_back(
        tmp_path, state_dir, own_sandbox_server):
    """A server ran (the sandbox with the wrong flag, the original): the run probes and launches the
    fix, and the fixed server is SIGSTOPped while its acceptance is measured, so its port accepts
    connections and answers nothing. After ``request_timeout`` the fix step returns, the verdict
    names the fix server as stopped, and the restore stops it (SIGTERM with SIGCONT, no 10 s wait
    for SIGKILL), reverts the probes and relaunches the original."""
    box = connect("local")
    with own_sandbox_server(tmp_path / "original", *sandbox_flags(**EAGLE)) as srv:
        try:
            _fix_server_sigstopped(box, srv, tmp_path)
        finally:
            # whatever failed above: no server of this test outlives it (the relaunched original
            # is no process of the fixture's)
            for p in _servers_on(box, srv.port):
                if p.pid != srv.pid:
                    box.stop_server(p.pid, grace=10)
            box.close()


def _fix_server_sigstopped(box, srv, tmp_path: Path) -> None:
    original = next(tuple(p.argv) for p in box.find_servers(timeout=30) if p.pid == srv.pid)
    run = DiagnosisRun.start(port=srv.port, report_dir=tmp_path / "reports", request_timeout=REQUEST_TIMEOUT,
                             **PROMPTS)
    run.progress = False
    injector = _Injector(run, "fix", signal.SIGSTOP)
    try:
        assert run.measure_symptom().accept_length < 1.1  # the wrong flag: the symptom
        run.check_hypotheses()
        assert run.probe().verdict == "placed"  # the probes ride on the fix launch (issue 28): no launch here
        started = time.monotonic()
        step = run.apply_fixes()
        assert injector.hit is not None, f"the fix server never got healthy: {run.start_failures}"
        assert time.monotonic() - started < 120
        assert step.verdict == "inconclusive", step
        assert run.attribute() is None
        finished = time.monotonic()
        verdict = run.finish()
        restore_took = time.monotonic() - finished
    finally:
        injector.stop.set()
        if not run.finished:
            run.finish()
    pid = injector.hit["pid"]
    assert verdict["outcome"] == "inconclusive"
    detail = verdict["outcome_detail"]
    assert detail.startswith(
        f"{SERVER_STOPPED_ANSWERING}: the fix server (pid {pid}, port {srv.port}) is stopped (SIGSTOP: it "
        "accepts connections and never answers) during apply_fixes (measuring: fix): "), detail
    assert "the box was restored (the original server relaunched)" in detail, detail
    lost = verdict["server_stopped_answering"]
    assert (lost["state"], lost["step"], lost["server"]) == ("stopped", "apply_fixes", "the fix server")
    assert "ReadTimeout" in lost["error"] or "stuck" in lost["error"].lower(), lost["error"]
    assert verdict["fix"]["applied"] is True and verdict["fix"]["sufficient"] is None
    assert verdict["acceptance"]["after"]["accept_length"] is None
    assert verdict["restore"]["clean"], verdict["restore"]
    stopped = [a for a in verdict["restore"]["actions"] if f"server pid {pid}" in a]
    assert stopped and "(terminated)" in stopped[0], verdict["restore"]["actions"]  # SIGCONT: no SIGKILL
    assert restore_took < 60, restore_took
    assert not box.is_alive(pid)
    _box_restored(box, srv.port)
    deadline = time.monotonic() + 120
    while not (relaunched := [p for p in _servers_on(box, srv.port) if tuple(p.argv) == original]):
        assert time.monotonic() < deadline, "the original server was not relaunched"
        time.sleep(0.2)
    assert len(relaunched) == 1 and relaunched[0].pid != srv.pid
    health = httpx.get(f"http://127.0.0.1:{srv.port}/health", timeout=10, trust_env=False)
    assert health.status_code == 200


def test_the_runbook_ends_with_an_inconclusive_verdict_and_its_report(tmp_path, free_port):
    """Through ``workbench runbook diagnose_acceptance`` (papermill): the server the run launched is
    SIGSTOPped while the symptom cell measures it. The runbook runs to its end (exit 0, no failed
    cell), writes the verdict JSON and the HTML report, both saying the server stopped answering,
    and the box is restored (no server on the port, journal empty, no probe)."""
    state = tmp_path / "box-state"
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state))
    dep = build_deployment(tmp_path / "deployment", "eagle-flag")
    out = tmp_path / "reports"
    notebook = out / "diagnose_acceptance.ipynb"
    driver = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "runbook", "diagnose_acceptance", "--report-dir", str(out),
         "-p", "launch_command", dep.launch_command(free_port), "-p", "port", str(free_port),
         "-p", "num_prompts", str(PROMPTS["num_prompts"]), "-p", "max_new_tokens", str(PROMPTS["max_new_tokens"]),
         "-p", "request_timeout", str(REQUEST_TIMEOUT)],
        env=env, cwd=checkout_dir(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    box = connect("local", state_dir=state)
    try:
        deadline = time.monotonic() + 300
        target = None
        while target is None:
            assert driver.poll() is None, (driver.communicate()[1][-3000:], _outcome(out))
            assert time.monotonic() < deadline, "the as-found server never served the measurement"
            target = _serving_the_symptom(notebook, state, free_port)
            time.sleep(0.01)
        os.killpg(target["pgid"], signal.SIGSTOP)
        stdout, stderr = driver.communicate(timeout=300)
        assert driver.returncode == 0, stderr[-3000:]
        verdict = json.loads((out / "diagnose_acceptance.json").read_text())
        assert verdict["outcome"] == "inconclusive", verdict["outcome"]
        detail = verdict["outcome_detail"]
        assert detail.startswith(f"{SERVER_STOPPED_ANSWERING}: the server the run launched as found "
                                 f"(pid {target['pid']}, port {free_port}) is stopped"), detail
        assert "during measure_symptom" in detail and "the box was restored" in detail, detail
        html = (out / "diagnose_acceptance.html").read_text()
        assert "The run ended early" in html and f"pid {target['pid']}" in html
        assert "outcome: inconclusive" in html
        _box_restored(box, free_port)
        assert _servers_on(box, free_port) == []
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
        if target is not None and box.group_alive(target["pgid"]):  # a failed assertion above: let it go
            os.killpg(target["pgid"], signal.SIGCONT)
        if Journal(box).pending:
            from workbench.session.journal import restore_box

            restore_box(box, server_start_timeout=60)
        box.close()


def _outcome(out: Path) -> str:
    """The verdict's outcome and detail (what a run that ended too early for the test decided)."""
    try:
        verdict = json.loads((out / "diagnose_acceptance.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        return f"no verdict: {exc}"
    return f"{verdict['outcome']}: {verdict['outcome_detail']}; start failures: {verdict['start_failures']}"


def _serving_the_symptom(notebook: Path, state: Path, port: int) -> dict | None:
    """The journalled as-found server once the symptom cell runs and the server decodes the
    measurement's requests (a ``Decode batch`` line in its log: past its start-up and readiness
    checks, which generate one token each)."""
    try:
        nb = json.loads(notebook.read_text())
        journal = json.loads((state / "diagnosis" / "journal.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    cell = next((c for c in nb.get("cells", []) if c.get("cell_type") == "code"
                 and "".join(c.get("source", "")).startswith("before = run.measure_symptom()")), None)
    if cell is None or (cell.get("metadata", {}).get("papermill") or {}).get("status") != "running":
        return None
    server = next((s for s in journal.get("started_servers") or [] if s.get("label") == "as-found"), None)
    if server is None:
        return None
    logs = sorted((state / "servers").glob(f"server-{port}-*.log"))
    return server if logs and "Decode batch" in logs[-1].read_text(errors="replace") else None
