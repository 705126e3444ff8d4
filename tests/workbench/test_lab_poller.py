"""workbench.lab.poller.Poller: the live panes' background polling."""

import threading

import pytest

from workbench.lab.poller import Poller


def test_poller_polls_until_stopped_and_starts_once():
    polled = threading.Event()
    calls = []

    def poll():
        calls.append(threading.current_thread().name)
        polled.set()

    p = Poller(poll, 0.01, "wb-test-follow")
    p.start()
    p.start()  # already running: no second thread
    assert polled.wait(5) and p.running
    p.stop()
    assert not p.running
    n = len(calls)
    assert n >= 1 and set(calls) == {"wb-test-follow"}
    assert len(calls) == n  # nothing polls after stop


@pytest.mark.parametrize("interval", [0, -1.0])
def test_poller_refuses_an_interval_that_is_not_positive(interval):
    with pytest.raises(ValueError, match="poll interval must be > 0 seconds"):
        Poller(lambda: None, interval, "x")
