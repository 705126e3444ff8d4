"""The launch guard on the sandbox box (issue 13): a launch the doctor knows will fail is never made.

Real parts: the diagnosis and the sweep in-process on the local box, the sandbox engine's own
launcher, a psutil watcher over the process table for the whole run (a refused launch must never
show up there, not even for a moment), and the box checked as found afterwards (no server on the
port, no probe, no pending journal, the deployment's files byte for byte). (The guard's table
against the engine, every fault launched as is, is tests/sandbox/test_sandbox_faults.py's, on the
servers its fault matrix starts anyway.)
"""

from __future__ import annotations

import hashlib
import shlex
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from remote import connect
from remote import probes as remote_probes
from testkit.faults import build_deployment
from workbench.diagnosis import DiagnosisRun
from workbench.measure.sweep import SweepRun, compare_settings
from workbench.session import Journal

pytestmark = pytest.mark.slow

PROMPTS = dict(num_prompts=2, max_new_tokens=16)


class ProcessWatcher:
    """Polls the process table every 20 ms for processes whose command line contains ``marker``;
    ``seen``: the command lines found (each once)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in psutil.process_iter(["cmdline"]):
                cmd = " ".join(p.info.get("cmdline") or [])
                if self.marker in cmd and "launch_server" in cmd and cmd not in self.seen:
                    self.seen.append(cmd)
            time.sleep(0.02)

    def __enter__(self) -> "ProcessWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _digests(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def _box_as_found(port: int, state_dir: Path) -> None:
    with connect("local") as box:
        assert [s for s in box.find_servers() if s.port == port] == []
        assert remote_probes.list_probes(box) == []
        assert not Journal(box).pending
    repairs = state_dir / "repairs"
    assert not repairs.exists() or list(repairs.iterdir()) == []


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    path = tmp_path / "box-state"
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(path))
    return path


def _diagnose(launch_command: str, port: int, tmp_path: Path, **params):
    run = DiagnosisRun.start(host="local", launch_command=launch_command, port=port,
                             report_dir=tmp_path / "reports", **PROMPTS, **params)
    run.progress = False
    verdict = run.run_all()
    return verdict, run


def test_a_directory_config_json_is_refused_and_nothing_is_launched(tmp_path, free_port, state_dir):
    """The case of the issue: without the guard the sandbox built a default-sized model and the
    OOM killer ended it after 148 s. Now: refused from the doctor's finding, no process started,
    0 restarts, the verdict and the report say why."""
    dep = build_deployment(tmp_path / "deployment")
    cfg = dep.draft_dir / "config.json"
    cfg.unlink()
    cfg.mkdir()
    before = _digests(dep.root)
    t0 = time.monotonic()
    with ProcessWatcher(str(dep.root)) as watch:
        verdict, run = _diagnose(dep.launch_command(free_port), free_port, tmp_path)
    wall = time.monotonic() - t0
    assert watch.seen == []  # no launch, not even one that died at once
    assert verdict["launches"] == [] and verdict["restarts"] == 0
    assert verdict["outcome"] == "cause-found"
    assert [c["hypothesis"] for c in verdict["root_causes"]] == ["checkpoint-readable"]
    [failure] = verdict["start_failures"]
    assert failure["label"] == "as-found" and failure["log_tail"] == []
    assert [f["rule"] for f in failure["refused"]] == ["checkpoint-unreadable"]
    assert str(cfg) in failure["refused"][0]["message"] and "directory" in failure["refused"][0]["message"]
    assert verdict["launch_guard"]["refused"] == 1 and verdict["launch_guard"]["force_launch"] is False
    assert verdict["fix"]["applied"] is False
    html = run.summary_html()
    assert "launch refused" in html and "checkpoint-unreadable" in html and "0 restart(s)" in html
    assert (tmp_path / "reports" / "diagnose_acceptance.json").is_file()
    assert wall < 60, wall  # the doctor only: seconds, where the launch took 148 s to be killed
    assert _digests(dep.root) == before
    _box_as_found(free_port, state_dir)


def _no_model_path_command(dep, port: int) -> str:
    return shlex.join([sys.executable, "-m", "workbench.sandbox.launch_server", "--host", "127.0.0.1",
                       "--port", str(port), "--speculative-algorithm", "EAGLE3",
                       "--speculative-draft-model-path", str(dep.draft_dir)])


def test_a_command_without_model_path_is_refused(tmp_path, free_port, state_dir):
    dep = build_deployment(tmp_path / "deployment")
    before = _digests(dep.root)
    with ProcessWatcher(str(dep.draft_dir)) as watch:
        verdict, _run = _diagnose(_no_model_path_command(dep, free_port), free_port, tmp_path)
    assert watch.seen == []
    assert verdict["launches"] == [] and verdict["restarts"] == 0
    [failure] = verdict["start_failures"]
    assert [f["rule"] for f in failure["refused"]] == ["model-path-missing"]
    assert verdict["root_causes"][0]["rule"] == "model-path-missing"
    missing = [f for f in verdict["fixes"] if f["kind"] == "none" and "model-path-missing" in f["rules"]]
    assert missing and "--model-path" in missing[0]["missing"]
    assert _digests(dep.root) == before
    _box_as_found(free_port, state_dir)


def test_force_launch_launches_and_the_verdict_records_what_it_overrode(tmp_path, free_port, state_dir):
    """force_launch on the command without --model-path (a case that fails at once: argparse):
    the launch is made, the engine says the same as the finding, the verdict names the override."""
    dep = build_deployment(tmp_path / "deployment")
    with ProcessWatcher(str(dep.draft_dir)) as watch:
        verdict, run = _diagnose(_no_model_path_command(dep, free_port), free_port, tmp_path, force_launch=True)
    [launch] = verdict["launches"]
    assert launch["label"] == "as-found" and launch["started"] is False
    [failure] = verdict["start_failures"]
    assert failure["refused"] is None and "required: --model-path" in (failure["exception"] or "")
    [check] = verdict["launch_guard"]["checks"]
    assert check["decision"] == "overridden" and [f["rule"] for f in check["findings"]] == ["model-path-missing"]
    assert verdict["launch_guard"]["force_launch"] is True and verdict["launch_guard"]["overridden"] == 1
    assert "launch guard overridden" in run.summary_html()
    assert watch.seen or launch["pid"]  # a real launch (it may die before the watcher's next poll)
    _box_as_found(free_port, state_dir)


def test_a_sweep_refuses_the_setting_that_will_not_start_and_measures_the_others(tmp_path, free_port, state_dir):
    """compare_drafts' sweep over a good draft and one whose config.json is a directory: the good
    one measured, the broken one a refused row with the finding, never launched."""
    dep = build_deployment(tmp_path / "deployment")
    broken = build_deployment(tmp_path / "broken").draft_dir
    (broken / "config.json").unlink()
    (broken / "config.json").mkdir()
    before = _digests(dep.root) | _digests(broken.parent)
    settings = compare_settings([("good", str(dep.draft_dir)), ("broken", str(broken))])
    with ProcessWatcher(str(broken)) as watch:
        run = SweepRun.start(host="local", launch_command=dep.launch_command(free_port), port=free_port,
                             settings=settings, warmup=0, report_dir=tmp_path / "reports", progress=False,
                             **PROMPTS)
        try:
            result = run.run()
        finally:
            result = run.finish("compare_drafts")
    assert watch.seen == []
    good, bad = result.rows
    assert good.ok and good.accept_length and good.accept_length > 1.0 and good.refused is None
    assert not bad.ok and bad.accept_length is None and bad.log_tail == []
    assert [f["rule"] for f in bad.refused] == ["checkpoint-unreadable"]
    assert bad.error.startswith("launch refused") and "checkpoint-unreadable" in bad.error
    guard = result.to_dict()["launch_guard"]
    assert [c["decision"] for c in guard["checks"]] == ["allowed", "refused"] and guard["refused"] == 1
    assert [launch["label"] for launch in run.launches] == ["good"]
    assert (tmp_path / "reports" / "compare_drafts.json").is_file()
    assert _digests(dep.root) | _digests(broken.parent) == before
    _box_as_found(free_port, state_dir)


def test_a_fix_launch_that_would_not_start_is_not_tried_and_its_causes_stay_open(tmp_path, free_port, state_dir):
    """The wrong flag masks aux ids out of range (EAGLE never reads them): as found the server
    serves, the symptom is measured; the fix (EAGLE3) without the training ids would start with
    ids the capture loop never reaches, which stops start-up — so that relaunch is not spent. The
    verdict says the fix was not tried and what blocks it; both causes stay open."""
    dep = build_deployment(tmp_path / "deployment", "eagle-flag", "aux-ids-out-of-range")
    verdict, run = _diagnose(dep.launch_command(free_port), free_port, tmp_path)
    assert verdict["acceptance"]["before"]["accept_length"] is not None  # the symptom was measured
    causes = [c["hypothesis"] for c in verdict["root_causes"]]
    assert causes == ["algorithm-flag", "aux-layer-ids"], causes
    assert verdict["outcome"] == "cause-found"
    fix = [s for s in verdict["start_failures"] if s["label"] == "fix"]
    assert len(fix) == 1 and [f["rule"] for f in fix[0]["refused"]] == ["aux-layer-ids-out-of-range"]
    assert verdict["fix"]["applied"] is False and verdict["acceptance"]["after"]["accept_length"] is None
    assert "not tried" in verdict["fix"]["why"] and "aux-layer-ids-out-of-range" in verdict["fix"]["why"]
    assert [launch["label"] for launch in verdict["launches"]] == ["as-found", "probe"]
    assert verdict["restarts"] == 1  # the probe only: no relaunch spent on a fix that cannot start
    blocked = {o["hypothesis"] for o in verdict["open"] if "was not tried" in o["why"]}
    assert blocked == {"algorithm-flag"}, verdict["open"]
    assert not all(c["fix_applied"] for c in verdict["root_causes"])
    assert "The fix was not tried" in run.summary_html()
    _box_as_found(free_port, state_dir)
