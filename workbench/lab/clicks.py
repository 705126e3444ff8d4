"""One guard for every button of the box console and its panes (:class:`ClickGuard`): a click
that arrives while an action runs, or that was queued while it ran, is dropped, not run again.

Why a disabled button is not enough: the kernel runs a button's handler while it reads no other
message; clicks made meanwhile (a double-click, a second click before the browser shows the
button disabled) wait in the kernel's shell queue, and ipykernel delivers them one after the other
right after the handler returns — when the button is enabled again (ipywidgets'
``Button._handle_button_msg`` calls the handlers whatever ``disabled`` says). So a double-click on
"Restart" restarted twice and one on "Revert this probe" reverted the next probe too.

How a queued click is told from a new one: each click is a comm message whose header ``date`` the
browser set when it sent it (JupyterLab's ``KernelMessage.createMessage``:
``date: new Date().toISOString()``). The guard keeps the send time of the click that started the
last action and how long the action ran in the kernel; a click sent before that action ended (its
send time earlier than start + duration + :data:`SLACK_S`, both times on the browser's clock, so a
skew between browser and kernel clocks does not matter) was queued during it and is dropped. A
click without a send time (a call from Python, no kernel) is dropped when it is handled less than
:data:`SETTLE_S` seconds after the last action ended (queued clicks are handled within
milliseconds of that end). A click handled while an action of the same guard runs (a thread, or a
click nested in an action) is always dropped.
"""

from __future__ import annotations

import datetime as _dt
import functools
import threading
import time
from typing import Any, Callable, Optional

__all__ = ["ClickGuard", "SETTLE_S", "SLACK_S", "click_sent_at", "clicks_of"]

#: Seconds after an action ends during which a click with no send time is taken as queued.
SETTLE_S = 0.3
#: Seconds added to an action's duration for the message's way from browser to kernel.
SLACK_S = 0.25


def _epoch(value: Any) -> Optional[float]:
    """A message header's ``date`` (a ``datetime``, as jupyter_client's session extracts it, or an
    ISO 8601 string) as seconds since the epoch; ``None`` when absent or unreadable."""
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.timestamp()
    return None


def click_sent_at() -> Optional[float]:
    """When the browser sent the message being handled now (the shell parent header's ``date``
    of the running IPython kernel, seconds since the epoch on the browser's clock); ``None`` outside
    a kernel or without a date."""
    try:
        from IPython import get_ipython
    except ImportError:  # IPython is not installed: not in a kernel
        return None
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    get_parent = getattr(kernel, "get_parent", None)
    if get_parent is None:
        return None
    parent = get_parent("shell") or {}
    return _epoch((parent.get("header") or {}).get("date"))


class ClickGuard:
    """Runs button actions one at a time and drops the clicks that arrive while one runs or that
    were queued during it (see the module docstring).

    ``settle_s`` (default :data:`SETTLE_S`), ``slack_s`` (default :data:`SLACK_S`): seconds, as
    described there; ``clock``: a monotonic clock in seconds (``time.monotonic``); ``on_drop``:
    called with the action's name when a click is dropped. ``.dropped``: names of the actions
    whose clicks were dropped, in order; ``.running``: the name of the action running, or ``None``.
    Shared by the console and its panes (``BoxState.clicks``), so a click on another pane's
    button queued during a restart is dropped too."""

    def __init__(self, settle_s: float = SETTLE_S, slack_s: float = SLACK_S, *,
                 clock: Callable[[], float] = time.monotonic, on_drop: Optional[Callable[[str], None]] = None):
        self.settle_s, self.slack_s = float(settle_s), float(slack_s)
        self.clock = clock
        self.on_drop = on_drop
        self.dropped: list[str] = []
        self.running: Optional[str] = None
        self._ended_at = float("-inf")
        self._last_sent: Optional[float] = None
        self._last_duration = 0.0
        self._lock = threading.Lock()

    def _queued(self, sent_at: Optional[float]) -> bool:
        if sent_at is not None and self._last_sent is not None:
            return sent_at < self._last_sent + self._last_duration + self.slack_s
        return self.clock() - self._ended_at < self.settle_s

    def run(self, name: str, fn: Callable[[], Any], *, sent_at: Optional[float] = None) -> Any:
        """Run ``fn()`` as the action ``name`` (``sent_at``: when the click was sent, seconds on the
        browser's clock, or ``None``) unless the click must be dropped (then ``fn`` is not called
        and ``None`` is returned). Exceptions of ``fn`` propagate."""
        with self._lock:
            drop = self.running is not None or self._queued(sent_at)
            if not drop:
                self.running = name
        if drop:
            self.dropped.append(name)
            if self.on_drop is not None:
                self.on_drop(name)
            return None
        t0 = self.clock()
        try:
            return fn()
        finally:
            with self._lock:
                self._ended_at = self.clock()
                self._last_sent, self._last_duration = sent_at, self._ended_at - t0
                self.running = None

    def handler(self, name: str, fn: Callable[[], Any]) -> Callable[[Any], Any]:
        """An ``on_click`` callback (takes the button) running ``fn()`` through :meth:`run` with
        the click's send time (:func:`click_sent_at`)."""
        @functools.wraps(fn)
        def on_click(_button: Any = None) -> Any:
            return self.run(name, fn, sent_at=click_sent_at())
        return on_click


def clicks_of(state: Any) -> ClickGuard:
    """The :class:`ClickGuard` of ``state`` (``state.clicks``, a :class:`workbench.lab.state.BoxState`'s);
    one is made and kept on ``state`` when it has none (a pane built on another state object)."""
    guard = getattr(state, "clicks", None)
    if guard is None:
        guard = ClickGuard()
        if hasattr(state, "__dict__"):  # else (a state taking no attributes) the guard is this pane's own
            state.clicks = guard
    return guard
