"""A verdict does not depend on how busy the machine is (issue 26).

The same faulty deployments (``testkit.faults``, rows of ``testkit.matrix``) are diagnosed in-process
(``DiagnosisRun``, as ``test_fault_matrix.py`` does) twice: on the machine as it is, then under a
load that at least doubles the time of every step. The verdicts must be identical: outcome, root
causes in order (hypothesis and rule), every hypothesis' verdict, the fix kinds and whether the fix
was sufficient, the restarts. A representative subset: a healthy draft, a static-only case (the
guard refuses the as-found launch), a probe-needed case, and stacked faults.

The load (``testkit.cpuload.slowing_load``): a CPU quota on this test's own process tree (a cgroup
this pytest process moves into for the loaded half, so the diagnosis in process and every server and
child it starts run under the quota, and moves out of afterwards, whatever happens), tightened until
a calibration step in the limited process takes at least twice as long as just before without it.
It burns no CPU: the cores it withholds go to the other jobs on the machine. Where no writable cgroup
``cpu`` controller exists it falls back to busy-loop processes, and says so. The load and the step
times with and without it are printed (``-s``) for the record.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import pytest

from testkit.cpuload import calibration_step, slowing_load
from testkit.faults import build_deployment
from testkit.matrix import case
from testkit.ports import free_port
from workbench.diagnosis import DiagnosisRun

pytestmark = pytest.mark.slow

PROMPTS = dict(num_prompts=4, max_new_tokens=64)  # the fault matrix's: healthy is healthy on it
#: static-only (refused as found), probe-needed, stacked
CASE_NAMES = ("spec-params", "algorithm-flag", "layered-flag-and-token-map")


def _diagnose(tmp: Path, faults: tuple[str, ...], expected, params: dict) -> tuple[dict, float]:
    dep = build_deployment(tmp / "deployment", *faults)
    port = free_port()
    t0 = time.monotonic()
    run = DiagnosisRun.start(host="local", launch_command=dep.launch_command(port), port=port,
                             report_dir=tmp / "reports", expected_accept_length=expected, **PROMPTS, **params)
    run.progress = False
    verdict = run.run_all()
    return verdict, time.monotonic() - t0


def signature(verdict: dict) -> dict:
    """What a verdict decides (never how long anything took)."""
    return {
        "outcome": verdict["outcome"],
        "root_causes": [(c["hypothesis"], c["rule"]) for c in verdict["root_causes"]],
        "hypotheses": {h["id"]: h["verdict"] for h in verdict["hypotheses"]},
        "fix_kinds": verdict["fix"]["kinds"],
        "fix_sufficient": verdict["fix"]["sufficient"],
        "restarts": verdict["restarts"],
        "start_failures": [f["label"] for f in verdict["start_failures"]],
        "accept_length": (verdict["acceptance"]["before"]["accept_length"],
                          verdict["acceptance"]["after"]["accept_length"]),
        "probe": {k: verdict["probe"].get(k) for k in ("observed_hidden_size", "expected_hidden_size",
                                                        "observed_widths", "captured_layers", "after_fix_widths")},
    }


def _steps(verdict: dict) -> dict:
    """The step times of a verdict (seconds): each launch's wait until healthy, each measurement's
    requests."""
    out = {f"start {launch['label']}": launch.get("healthy_after_s") for launch in verdict["launches"]
           if launch.get("healthy_after_s") is not None}
    for key in ("before", "after"):
        wall = verdict["acceptance"][key].get("wall_s")
        if wall is not None:
            out[f"measure {key}"] = round(wall, 2)
    return out


def _all(tmp: Path, label: str, expected) -> tuple[dict, dict, dict, float]:
    """Diagnose the healthy deployment, then each case of :data:`CASE_NAMES` against ``expected``
    (the healthy accept length measured without load; ``None``: this run's healthy one)."""
    sigs, steps, walls = {}, {}, {}
    for name in ("healthy", *CASE_NAMES):
        c = case(name) if name != "healthy" else None
        verdict, wall = _diagnose(tmp / f"{label}-{name}", c.faults if c else (), expected, c.params if c else {})
        sigs[name], steps[name], walls[name] = signature(verdict), _steps(verdict), round(wall, 1)
        if name == "healthy" and expected is None:
            expected = verdict["acceptance"]["before"]["accept_length"]
        print(f"{label} {name}: {walls[name]} s, {sigs[name]['outcome']}", file=sys.stderr, flush=True)
    return sigs, steps, walls, expected


@pytest.mark.timeout(2400)
def test_verdicts_are_the_same_under_a_load_that_doubles_every_step(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "box-state"))
    quiet, quiet_steps, quiet_walls, expected = _all(tmp_path, "quiet", None)
    assert quiet["healthy"]["outcome"] == "healthy" and expected and expected > 1.5, quiet["healthy"]
    load = slowing_load(2.0)
    print(f"busy half under {load.describe()}", file=sys.stderr, flush=True)
    if load.kind != "cpu quota":  # said in the summary too: the fallback burns CPU other tests lack
        warnings.warn(f"test_verdicts_under_load: no CPU quota, {load.describe()}")
    try:
        busy, busy_steps, busy_walls, _ = _all(tmp_path, "busy", expected)
        still_s = calibration_step()  # the load at the end of the loaded runs
    finally:
        load.stop()
    unloaded_s, loaded_s = load.unloaded_s, load.loaded_s
    print(f"\nload: {load.describe()}")
    print(f"calibration step: {unloaded_s:.3f} s without, {loaded_s:.3f} s under the {load.kind} "
          f"({loaded_s / unloaded_s:.2f}x; {still_s / unloaded_s:.2f}x at the end)")
    for name in quiet:
        print(f"{name}: wall {quiet_walls[name]} s -> {busy_walls[name]} s; steps {quiet_steps[name]} -> "
              f"{busy_steps[name]}; verdict {quiet[name]['outcome']}")
    assert loaded_s >= 2.0 * unloaded_s
    # the matrix's expectations hold without load, and the loaded runs agree on every decision
    for name in CASE_NAMES:
        c = case(name)
        assert quiet[name]["outcome"] == c.outcome, (name, quiet[name])
        assert [h for h, _rule in quiet[name]["root_causes"]] == list(c.causes), (name, quiet[name])
        assert quiet[name]["fix_kinds"] == sorted(c.kinds), (name, quiet[name])
    # the probe-needed cases showed the mechanism: one 160-wide state instead of 3 x 160
    for name in ("algorithm-flag", "layered-flag-and-token-map"):
        assert quiet[name]["probe"]["observed_widths"] == [160], (name, quiet[name]["probe"])
    for name in quiet:
        assert busy[name] == quiet[name], (name, busy[name], quiet[name])
