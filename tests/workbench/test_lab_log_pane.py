"""LogPane in-process on a real file of the local box, with a stand-in for BoxState (only
``.box`` and ``.log_path()``, the part of H1's contract the pane uses)."""

from __future__ import annotations

import time

from remote import connect
from workbench.lab.logs_pane import LogPane


class StandInState:
    def __init__(self, box, path):
        self.box, self.path = box, path

    def log_path(self):
        return self.path


def test_log_pane_tail_filter_restart_and_bad_regex(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("Decode batch. accept len: 1.02\nother line\n")
    with connect("local") as box:
        st = StandInState(box, str(a))
        pane = LogPane(st, interval=0.1)
        assert pane.poll_once() == 2
        assert "accept len: 1.02" in pane.tail.value and "other line" in pane.tail.value
        pane.preset.value = "decode"
        assert pane.shown() == ["Decode batch. accept len: 1.02"]
        pane.filter.value = "/[unclosed/"
        assert "bad regex" in pane.status.value and pane.tail.value == "<pre></pre>"
        pane.filter.value = ""
        b.write_text("[probe:x] 7\n")
        st.path = str(b)
        pane.poll_once()
        assert pane.shown()[-2:] == [f"[eagle-workbench: server restarted: now {b}]", "[probe:x] 7"]
        assert str(b) in pane.status.value
        pane.follow.value = True  # background polling
        with open(b, "a") as fh:
            fh.write("grown\n")
        deadline = time.monotonic() + 5
        while "grown" not in pane.tail.value and time.monotonic() < deadline:
            time.sleep(0.05)
        pane.stop()
        assert "grown" in pane.tail.value and not pane._poller.running and pane.follow.value is False
        st.box = None
