"""The box console's panes in a real JupyterLab (Chromium via Playwright), one notebook on one EAGLE3
sandbox server of the test's own (no restarts): the Log tab's tail grows after requests and its
filter keeps only matching lines; the Accept length tab's summary equals workbench.logs on the
server's log; the Source tab shows the code-path entry's line as read from the engine file; the
Probes tab adds a recipe and reverts it (listed, then gone; the engine file byte-identical).
Screenshots ``console-log.png``, ``console-accept.png``, ``console-probes.png``."""

from __future__ import annotations

import hashlib
import re
import statistics
from pathlib import Path

import httpx

from lab import labkit
from remote import connect, probes
from testkit.sandbox_servers import sandbox_flags
from workbench.lab.accept_pane import WINDOW
from workbench.lab.state import BoxState
from workbench.logs import parse_log
from workbench.session.journal import Journal
from testkit.engine_copy import sandbox_engine_dir

ROOT = Path(__file__).resolve().parents[2]
SANDBOX_SRT = sandbox_engine_dir() / "srt"  # the engine this process's servers import (testkit.engine_copy)


def _hashes() -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in SANDBOX_SRT.rglob("*.py")}



def _send(port: int, n: int = 3) -> None:
    with httpx.Client(trust_env=False, timeout=60) as client:
        for i in range(n):
            r = client.post(f"http://127.0.0.1:{port}/generate",
                            json={"text": f"Request {i}: the quick brown fox",
                                  "sampling_params": {"max_new_tokens": 24, "temperature": 0}})
            assert r.status_code == 200, r.text


def _tail_lines(lab) -> list[str]:
    return [ln for ln in lab.text(".wb-log-tail").splitlines() if ln.strip()]


def _shot(lab, selector: str, name: str) -> None:
    """A screenshot once the kernel is idle, with ``selector`` scrolled into view (the notebook
    scrolls inside its panel, so a full-page shot shows only what is in view)."""
    lab.wait_idle(30)
    lab.page.locator(selector).first.scroll_into_view_if_needed()
    shot = lab.screenshot(name)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _wait(pred, what: str, timeout: float = 30.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_console_log_accept_source_and_probes_tabs_in_the_browser(lab, lab_server, own_sandbox_server, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(lab_server.state_dir))  # the kernel's probe journal
    before = _hashes()
    box = connect("local")
    try:
        with own_sandbox_server(tmp_path / "s", *sandbox_flags("EAGLE3", decode_log_interval=1)) as srv:
            try:
                _send(srv.port, 2)  # decode lines already in the log when the console opens
                lab.open(ROOT / "notebooks" / "box_console.ipynb", parameters={"port": srv.port})
                lab.run_all(timeout=120)
                lab.wait_for_text(".wb-console-status-view", "healthy", timeout=60)
                assert lab.errors() == []

                # (a) Log: the tail shows text; after requests and Poll now it has more lines; the filter
                labkit.console_tab(lab, "Log")
                first = _wait(lambda: _tail_lines(lab), "the log tail", 30)
                _send(srv.port, 3)
                lab.click(".wb-log-poll")
                grown = _wait(lambda: (lambda now: now if len(now) > len(first) else None)(_tail_lines(lab)),
                              "the tail to grow", 30)
                assert len(grown) > len(first)
                lab.fill(".wb-log-filter", "accept len")
                shown = _wait(lambda: (lambda now: now if now and all("accept len" in ln for ln in now) else None)(
                    _tail_lines(lab)), "only `accept len` lines", 30)
                assert len(shown) < len(grown)
                _shot(lab, ".wb-log-tail", "console-log")

                # (b) Accept length: Poll now -> the summary's mean equals workbench.logs on the log
                labkit.console_tab(lab, "Accept length")
                lab.click(".wb-accept-poll")
                text = lab.wait_for_text(".wb-accept-summary", "mean of the last", timeout=30)
                lens = [r.accept_len for r in parse_log(Path(srv.log_path).read_bytes()).decode
                        if r.accept_len is not None]
                m = re.search(r"mean of the last (\d+) ([0-9.]+) · (\d+) decode records · ceiling 4 ", text)
                assert m, text
                assert int(m.group(1)) == min(WINDOW, len(lens)) and int(m.group(3)) == len(lens)
                assert m.group(2) == f"{statistics.fmean(lens[-WINDOW:]):.2f}" and float(m.group(2)) > 1.5
                lab.page.locator(".wb-accept-figure .js-plotly-plot").first.wait_for(timeout=30_000)
                _shot(lab, ".wb-accept-figure", "console-accept")

                # (c) Source: the code-path entry's line, as read from the engine file here
                state = BoxState("local", srv.port, box=box)
                entry = next(e for e in state.code_path().entries if e.key == "draft-fc-width-check")
                path = Path(entry.file) if Path(entry.file).is_absolute() else Path(state.engine().root) / entry.file
                line = path.read_text().splitlines()[entry.line - 1].strip()
                assert line
                labkit.console_tab(lab, "Source")
                lab.click(".wb-source-entry-draft-fc-width-check")
                view = lab.wait_for_text(".wb-source-view", line, timeout=30)
                focus = lab.text(".wb-source-view .wb-source-focus")
                assert line in focus and f" {entry.line} |" in focus, (focus, view[:200])

                # (d) Probes: add the draft-input-width recipe, listed; Revert all: none, file as before
                labkit.console_tab(lab, "Probes")
                lab.page.locator(".wb-probes-recipe select").first.select_option("draft-input-width")
                lab.click(".wb-probes-add")
                lab.wait_for_text(".wb-probes-status", "added", timeout=60)
                added = probes.list_probes(box)
                assert len(added) == 1 and Path(added[0].path).resolve() == path.resolve()
                lab.wait_for_text(".wb-probes-list", added[0].tag, timeout=30)
                assert hashlib.sha256(path.read_bytes()).hexdigest() != before[path.resolve()]
                _shot(lab, ".wb-probes-list", "console-probes")
                lab.click(".wb-probes-revert-all")
                lab.wait_for_text(".wb-probes-list", "no probes on the box", timeout=60)
                assert probes.list_probes(box) == []
                assert hashlib.sha256(path.read_bytes()).hexdigest() == before[path.resolve()]
                assert lab.errors() == []
            finally:
                for p in reversed(probes.list_probes(box)):  # a failure above must not leave a probe
                    probes.revert_probe(box, p.tag)
        assert not Journal(box).pending
        assert probes.list_probes(box) == []
    finally:
        box.close()
    assert _hashes() == before
