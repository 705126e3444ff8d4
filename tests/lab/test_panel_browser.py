"""notebooks/control_panel.ipynb in a real JupyterLab (Chromium via Playwright) against a sandbox
server of the test's own launched with the wrong flag (``--speculative-algorithm EAGLE``): run all,
click the steps in order by their ``wb-panel-<method>`` classes and read what the page shows —
every button disabled while a step runs, the newest result in ``wb-panel-latest``, after Finish
the verdict's path, outcome and restore actions in ``wb-panel-verdict``; Finish again rewrites the
verdict and leaves the server found running; a step after Finish starts a new run and says so.
Screenshots ``panel-latest.png`` and ``panel-verdict.png``. The box is left as found."""

from __future__ import annotations

import json
import time
from pathlib import Path

from remote import connect
from remote import probes as remote_probes
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.engine.locate import running_servers
from workbench.lab.panel import STEPS
from workbench.session import Journal

ROOT = Path(__file__).resolve().parents[2]
METHODS = [m for _, m in STEPS]


_SEL = ", ".join(f"button.wb-panel-{m}" for m in METHODS)

#: Before a click: a MutationObserver records whether every step button was seen disabled at once
#: and the status seen saying "running …" (a step's state in the page, however short it lasts).
_WATCH_JS = """(sel) => {
  window.__wbStep = {disabled: false, running: false};
  const check = () => {
    const b = document.querySelectorAll(sel);
    if (b.length === %d && Array.from(b).every(x => x.disabled)) window.__wbStep.disabled = true;
    const s = document.querySelector('.wb-panel-status');
    if (s && s.textContent.startsWith('running')) window.__wbStep.running = true;
  };
  if (window.__wbObserver) window.__wbObserver.disconnect();
  window.__wbObserver = new MutationObserver(check);
  window.__wbObserver.observe(document.body, {attributes: true, childList: true, subtree: true, characterData: true});
}""" % len(METHODS)

#: The step ran and ended: seen running and disabled, now every button enabled and the status
#: ``<label>: …``.
_ENDED_JS = """([sel, label]) => {
  const b = document.querySelectorAll(sel);
  const s = document.querySelector('.wb-panel-status');
  return window.__wbStep && window.__wbStep.running && b.length === %d && Array.from(b).every(x => !x.disabled)
    && !!s && s.textContent.includes(label + ': ');
}""" % len(METHODS)


#: How often (ms) the page evaluates :data:`_ENDED_JS` while a step runs. Not Playwright's default
#: ("raf": on every animation frame), which keeps headless Chromium producing frames of the
#: JupyterLab page for as long as the step runs (~0.08 s of CPU per second, against ~0.02 idle or
#: ~0.03 polling every 100 ms): Chromium used ~18 s of CPU during this test, ~13 s with this. What
#: happens during the step (the buttons disabled, the status saying "running …", however briefly)
#: is recorded by :data:`_WATCH_JS`'s MutationObserver, not by this polling, and the end state it
#: waits for stays: a 100 ms interval misses nothing.
POLL_MS = 100


def _step(lab, method: str, done: str, timeout: float = 300.0) -> str:
    """Click the step ``method`` and wait until it ended (:data:`_ENDED_JS`, evaluated every
    :data:`POLL_MS`); assert every step button was disabled while it ran and the status says
    ``<label>: <done>``; the status text."""
    label = dict((m, lab_) for lab_, m in STEPS)[method]
    lab.page.evaluate(_WATCH_JS, _SEL)
    lab.click(f".wb-panel-{method}")
    lab.page.wait_for_function(_ENDED_JS, arg=[_SEL, label], timeout=timeout * 1000, polling=POLL_MS)
    assert lab.page.evaluate("() => window.__wbStep.disabled"), f"{method}: the buttons were not disabled while it ran"
    status = lab.text(".wb-panel-status")
    assert f"{label}: {done}" in status, status
    return status


def test_control_panel_steps_finish_twice_and_a_new_run_in_the_browser(lab, lab_server, own_sandbox_server,
                                                                        tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(lab_server.state_dir))  # the kernel's journal
    reports = tmp_path / "reports"
    verdict_path = reports / "diagnose_acceptance.json"
    box = connect("local")
    try:
        with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
            original = tuple(running_servers(box, port=srv.port)[0].argv)
            opened = False
            try:
                lab.open(ROOT / "notebooks" / "control_panel.ipynb",
                         parameters={"port": srv.port, "report_dir": str(reports), "num_prompts": 4,
                                     "max_new_tokens": 64})
                opened = True
                lab.run_all(timeout=120)
                assert lab.errors() == []
                _step(lab, "start", "done", timeout=120)
                assert str(srv.port) in lab.text(".wb-panel-latest")
                _step(lab, "measure_symptom", "done")
                latest = lab.text(".wb-panel-latest")
                assert "accept" in latest.lower(), latest
                assert "requests: 4 in " in latest, latest  # the measurement's progress: one text line
                lab.page.locator(".wb-panel-latest").scroll_into_view_if_needed()
                lab.screenshot("panel-latest")
                _step(lab, "check_hypotheses", "done")
                _step(lab, "probe", "done")
                _step(lab, "apply_fixes", "done", timeout=420)
                # the box now runs the fixed server; Finish puts the one found back
                _step(lab, "finish", "done", timeout=300)
                shown = lab.wait_for_text(".wb-panel-verdict", "Verdict", timeout=30)
                assert str(verdict_path.resolve()) in shown, shown
                assert verdict_path.is_file()
                verdict = json.loads(verdict_path.read_text())
                assert verdict["outcome"] == "fixed", verdict["outcome"]
                before = verdict["acceptance"]["before"]["accept_length"]
                after = verdict["acceptance"]["after"]["accept_length"]
                assert after > before, (before, after)
                assert f"{before:.2f}" in lab.text(".wb-panel-before") and f"{after:.2f}" in lab.text(".wb-panel-after")
                actions = verdict["restore"]["actions"]
                assert actions and all(a in shown for a in actions), (actions, shown)
                # the ledger of the Finish summary fits the panel: its prose wraps, no cut-off column
                fit = lab.page.evaluate("""() => [...document.querySelectorAll('.wb-panel-latest table.eagle-workbench-ledger')]
                    .map(t => [t.scrollWidth, t.parentElement.clientWidth])""")
                assert fit and all(w <= box_w + 1 for w, box_w in fit), f"ledger wider than its box: {fit}"
                lab.page.locator(".wb-panel-verdict").scroll_into_view_if_needed()
                lab.screenshot("panel-verdict")
                back = running_servers(box, port=srv.port)
                assert len(back) == 1 and tuple(back[0].argv) == original and back[0].pid != srv.pid
                # Finish again: the verdict is rewritten, the server found still runs as found
                mtime = verdict_path.stat().st_mtime_ns
                time.sleep(0.05)
                _step(lab, "finish", "done", timeout=120)
                lab.wait_for_text(".wb-panel-verdict", "Finish again: nothing to do", timeout=30)
                assert verdict_path.stat().st_mtime_ns > mtime
                assert json.loads(verdict_path.read_text())["restore_again"] == ["nothing to do"]
                again = running_servers(box, port=srv.port)
                assert [(s.pid, tuple(s.argv)) for s in again] == [(back[0].pid, original)]
                # a step after Finish starts run 2 on the server found (no relaunch of anything)
                _step(lab, "measure_symptom", "done")
                assert "The previous run finished; started run 2." in lab.text(".wb-panel-latest")
                assert lab.text(".wb-panel-verdict").strip() == ""  # run 2 has no verdict yet
                now = running_servers(box, port=srv.port)
                assert [(s.pid, tuple(s.argv)) for s in now] == [(back[0].pid, original)]
                _step(lab, "finish", "done", timeout=120)
                assert lab.errors() == []
            finally:
                if opened and lab.page.locator("button.wb-panel-finish").count():
                    # the kernel's run (if any is open) puts the box back while the kernel lives
                    try:
                        lab.wait_idle(timeout=600)
                        _step(lab, "finish", "done", timeout=300)
                    except Exception as exc:  # reported; the checks below say what is left on the box
                        print(f"final Finish in the page failed: {type(exc).__name__}: {exc}")
                for s in running_servers(box, port=srv.port):
                    if s.pid != srv.pid:  # the relaunched original (own_sandbox_server stops srv's group)
                        box.stop_server(s.pid, grace=10)
        assert running_servers(box, port=srv.port) == []
        assert remote_probes.list_probes(box) == []
        assert not Journal(box).pending
    finally:
        box.close()
