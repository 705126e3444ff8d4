"""A background poller for the live panes (log tail, accept length): calls ``poll`` every
``interval`` seconds in a daemon thread until stopped."""

from __future__ import annotations

import threading
from typing import Callable, Optional

__all__ = ["Poller"]


class Poller:
    """Calls ``poll()`` every ``interval`` seconds (float, > 0) in a daemon thread named ``name``
    between :meth:`start` and :meth:`stop`. ``poll`` must not raise (the panes' ``poll_once`` shows
    its errors in the pane); an exception would end the thread."""

    def __init__(self, poll: Callable[[], object], interval: float, name: str):
        if not interval > 0:
            raise ValueError(f"poll interval must be > 0 seconds, got {interval!r}")
        self.poll, self.interval, self.name = poll, float(interval), name
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def running(self) -> bool:
        """Whether the polling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start polling (no-op while already polling)."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        """Stop polling; waits for the thread at most ``interval`` + 5 s."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)
            self._thread = None
