"""AcceptPane (workbench.lab.accept_pane): in-process on a real log file of the local box with a
stand-in state (only ``.box`` and ``.log_path()``), in SGLang 0.5.23's decode-line format
(``scheduler_components/metrics_reporter.py`` ``report_decode_stats``, as in
tests/fixtures/logs/sglang-0.5.23.log); and on a real EAGLE3 sandbox server, restarted through the
box console."""

from __future__ import annotations

import html
import statistics
import time
from pathlib import Path

import httpx

from remote import connect
from testkit.sandbox_servers import EAGLE3_METRICS, sandbox_flags
from workbench.errors import ServerChoiceError
from workbench.lab.accept_pane import EMPTY_TEXT, WINDOW, AcceptPane
from workbench.logs import parse_log
from workbench.rules.acceptance_level import classify_acceptance

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "sglang-0.5.23.log"


def decode_line(second: int, accept_len: float) -> str:
    """A 0.5.23 ``Decode batch`` line (the shape of sglang-0.5.23.log:2) at 12:MM:SS."""
    return (f"[2026-07-01 12:{second // 60:02d}:{second % 60:02d}] Decode batch, #running-req: 4, #token: 8123, "
            f"token usage: 0.02, accept len: {accept_len:.2f}, accept rate: 0.53, cuda graph: True, "
            f"gen throughput (token/s): 612.40, #queue-req: 0\n")


class StandInState:
    def __init__(self, box, path):
        self.box, self.path = box, path

    def log_path(self):
        if isinstance(self.path, Exception):
            raise self.path
        return self.path


def expected(path: Path) -> tuple[int, float, float]:
    """(records, last, mean of the last WINDOW) as workbench.logs computes them on the file(s)."""
    lens = [r.accept_len for r in parse_log(path.read_bytes()).decode if r.accept_len is not None]
    return len(lens), lens[-1], statistics.fmean(lens[-WINDOW:])


def test_accept_pane_follows_appends_truncation_rotation_and_restarts(tmp_path):
    log = tmp_path / "server.log"
    fixture = FIXTURE.read_text()
    log.write_text(fixture + "".join(decode_line(10 + i, 1.5 + 0.1 * i) for i in range(25)))
    with connect("local") as box:
        st = StandInState(box, str(log))
        pane = AcceptPane(st, interval=0.1)
        assert pane.summary.value == EMPTY_TEXT  # before any poll
        n0 = pane.poll_once()
        count, last, mean = expected(log)
        assert n0 == count == 29  # the fixture's 4 decode lines with accept len + 25
        s = pane.stats()
        assert (s["records"], s["last"], round(s["mean"], 9)) == (count, last, round(mean, 9))
        assert f"last {last:.2f}" in pane.summary.value and f"mean of the last 20 {mean:.2f}" in pane.summary.value
        assert "29 decode records" in pane.summary.value and "ceiling unknown" in pane.summary.value
        assert pane.summary_text().endswith(f" · acceptance: {classify_acceptance(mean).words}")
        assert abs(pane.fig.data[1].y[-1] - mean) < 1e-9  # the figure's mean line ends at the summary's mean
        assert list(pane.fig.data[0].y) == [r.accept_len for r in parse_log(log.read_bytes()).decode
                                            if r.accept_len is not None]
        # appended lines: the count grows by what was appended, the numbers follow
        with open(log, "a") as fh:
            fh.write("an unrelated line\n" + decode_line(40, 3.0) + decode_line(41, 2.5))
        assert pane.poll_once() == 2
        count, last, mean = expected(log)
        assert pane.stats()["records"] == count == 31 and pane.stats()["last"] == last == 2.5
        assert abs(pane.stats()["mean"] - mean) < 1e-9
        # truncation (a new, shorter file at the path): read again from the top
        log.write_text(decode_line(50, 1.25))
        assert pane.poll_once() == 1 and pane.stats()["last"] == 1.25 and pane.stats()["records"] == 32
        assert any("truncated" in n for n in pane.notes)
        # rotation: the old end is read from server.log.1, then the new file
        with open(log, "a") as fh:
            fh.write(decode_line(51, 1.75))
        log.rename(tmp_path / "server.log.1")
        log.write_text(decode_line(52, 2.25) + "x" * 300 + "\n")
        assert pane.poll_once() == 2
        assert [r["accept_len"] for r in pane.records[-3:]] == [1.25, 1.75, 2.25]
        assert any("rotated" in n for n in pane.notes) and pane.restarts == []
        # a restart (a new log path): a marker before the new server's first record, in the figure
        new = tmp_path / "server-2.log"
        new.write_text(decode_line(60, 2.0) + decode_line(61, 2.1))
        st.path = str(new)
        assert pane.poll_once() == 2
        assert pane.restarts == [(34, "restart")]
        assert [sh.type for sh in pane.fig.layout.shapes].count("line") == 2  # 1.0 reference + the marker
        assert any(a.text == "restart" for a in pane.fig.layout.annotations)
        # Follow: a background poll picks up new lines
        pane.follow.value = True
        with open(new, "a") as fh:
            fh.write(decode_line(62, 2.9))
        deadline = time.monotonic() + 5
        while pane.stats()["records"] < 37 and time.monotonic() < deadline:
            time.sleep(0.05)
        pane.close()
        assert pane.stats()["last"] == 2.9 and not pane._poller.running and pane.follow.value is False
        # Clear: nothing kept, the empty summary; later lines are still followed
        pane.clear()
        assert pane.stats()["records"] == 0 and pane.summary.value == EMPTY_TEXT
        with open(new, "a") as fh:
            fh.write(decode_line(63, 3.1))
        assert pane.poll_once() == 1 and pane.stats()["records"] == 1
        # errors are shown in the pane, never raised out of refresh()
        st.path = ServerChoiceError("several servers run: ports 30000, 30001; set port = N", where="local")
        pane.refresh()
        assert "ServerChoiceError" in pane.status.value and "30001" in pane.status.value
        assert isinstance(pane.last_error, ServerChoiceError)
        st.path = str(tmp_path)  # a directory, not a log file
        pane.refresh()
        assert pane.last_error is not None and type(pane.last_error).__name__ in pane.status.value


def test_accept_pane_on_an_eagle3_server_and_a_restart(own_sandbox_server, tmp_path, state_dir):
    from remote.probes import list_probes
    from workbench.lab.console import BoxConsole
    from workbench.lab.state import BoxState
    from workbench.session.journal import Journal

    box = connect("local")
    relaunched = None
    try:
        with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE3_METRICS)) as srv:
            c = BoxConsole(port=srv.port, server_start_timeout=120)
            try:
                pane = next(p for title, p, _w in c.panes if title == "Accept length")
                assert isinstance(pane, AcceptPane)
                with httpx.Client(trust_env=False, timeout=60) as client:
                    for prompt in ("The capital of France is", "Once upon a time", "1, 2, 3, 4,"):
                        r = client.post(f"http://127.0.0.1:{srv.port}/generate",
                                        json={"text": prompt, "sampling_params": {"max_new_tokens": 32,
                                                                                  "temperature": 0}})
                        assert r.status_code == 200, r.text
                pane.poll_once()
                assert pane.last_error is None, pane.status.value
                lens = [x.accept_len for x in parse_log(Path(srv.log_path).read_bytes()).decode
                        if x.accept_len is not None]
                s = pane.stats()
                assert s["records"] == len(lens) > 0 and s["last"] == lens[-1]
                assert abs(s["mean"] - statistics.fmean(lens[-WINDOW:])) < 1e-9 and s["mean"] > 1.5
                assert s["ceiling"] == 4.0  # --speculative-num-draft-tokens 4 (3 steps + 1)
                assert "ceiling 4 tokens" in pane.summary.value and pane.restarts == []
                # the level in the words logs / measure / doctor --running print for the same value
                words = classify_acceptance(s["mean"], ceiling=4.0).words
                assert pane.summary_text().endswith(f" · acceptance: {words}")
                assert html.escape(f"acceptance: {words}") in pane.summary.value
                # a restart through the console: a marker in the figure, the new server's log followed
                handle = c.restart(c.command.value)
                assert handle is not None, c.status_line.value
                relaunched = handle
                pane.poll_once()  # (the console's "started" event already polled; nothing new since)
                assert len(pane.restarts) == 1 and f"pid {handle.pid}" in pane.restarts[0][1]
                assert any(f"pid {handle.pid}" in (a.text or "") for a in pane.fig.layout.annotations)
                assert pane.pid == handle.pid and pane.follower.path == c.state.log_path()
            finally:
                c.close()  # puts the original server back (journalled)
                if relaunched is not None:
                    assert not box.is_alive(relaunched.pid)
            back = [sv for sv in BoxState("local", srv.port, box=box).servers() if sv.port == srv.port]
            assert [sv.pid for sv in back] != [] and not Journal(box).pending
            for sv in back:
                if sv.pid != srv.pid:
                    box.stop_server(sv.pid, grace=10)
        assert list_probes(box) == []
    finally:
        box.close()
