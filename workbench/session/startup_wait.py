"""Waiting for a launch: the start-up time-out is a stall time-out, and the start-up's progress
(phase, shard count, elapsed, last log line: :mod:`workbench.logs.startup`) is shown while it loads.

``server_start_timeout`` (the runbooks' parameter, :class:`~workbench.session.box_session.BoxSession`,
:func:`~workbench.session.journal.restore_box`, the watchdog's relaunch) is the seconds a launch may
go WITHOUT progress: no new log bytes (the readiness polls' own access lines aside), no CPU time
used by its process group, the same answer, the same phase and shard count
(``remote.readiness.StallClock``). A stall is ``remote.errors.ServerStartStalled`` naming the
phase it stalled in and the last log line. A start that progresses is waited for up to
:data:`MAX_START_S` in all, whatever ``server_start_timeout`` is: the slowest public reports
load for one to two hours (Kimi-K2.5 at TP 8 on network storage, sgl-project/sglang#17970;
DeepSeek-V3's 163 shards about an hour on MI300X, sglang#3416), so a 40-minute load that
progresses is waited for.

Progress is shown through a *reporter*: a callable ``reporter(label, progress, elapsed_s, final)``
(``label``: which launch, e.g. ``"fix"``; ``progress``: a
:class:`~workbench.logs.startup.StartupProgress`; ``elapsed_s``: seconds since the wait began;
``final``: True once, when the wait ended). :func:`default_reporter` picks one: a progress bar
rewritten in place on a terminal (:class:`TerminalBar`), else lines at most every
:data:`LINE_INTERVAL_S` seconds (:class:`LineReporter`: a notebook cell's output, a log). Lines
start with :data:`PROGRESS_MARK`, so the ``workbench runbook`` driver shows the kernel's progress
lines on its terminal (:class:`ProgressRelay`) and nothing else of the cell's stderr.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

from workbench.logs.startup import PHASE_TEXT, StartupProgress, StartupTracker, format_duration, startup_progress
from workbench.redact import REDACTOR

__all__ = ["MAX_START_S", "LINE_INTERVAL_S", "PROGRESS_MARK", "StartupWatch", "LineReporter", "TerminalBar",
           "ProgressRelay", "DisplayReporter", "default_reporter", "wait_for_start", "progress_line"]

#: Seconds a launch that keeps progressing is waited for in all (module doc: the slowest public loads).
MAX_START_S = 6 * 3600.0
#: A line reporter prints at most one progress line per this many seconds (a phase change, the end
#: and the first line aside).
LINE_INTERVAL_S = 5.0
#: Every progress line starts with this (the runbook driver relays such lines to its terminal).
PROGRESS_MARK = "[start-up] "

Reporter = Callable[[str, StartupProgress, float, bool], None]


def progress_line(label: str, progress: StartupProgress, elapsed_s: float, final: bool = False) -> str:
    """One line: ``[start-up] fix: loading weights: shard 57/163, 12 min 3 s elapsed; last: ...``
    (``final``: ``ready after 12 min 3 s`` / ``not ready: loading weights after ...; last: ...``).
    Secrets the workbench knows (``workbench.redact.REDACTOR``: the launch's API keys) are masked."""
    who = f"{label}: " if label else ""
    if final:
        if progress.phase == "ready":
            return f"{PROGRESS_MARK}{who}ready after {format_duration(elapsed_s)}"
        text = (f"{PROGRESS_MARK}{who}not ready: {PHASE_TEXT.get(progress.phase, progress.phase)} "
                f"after {format_duration(elapsed_s)}; last: {progress.last_line or '(no log line)'}")
    else:
        text = f"{PROGRESS_MARK}{who}{progress.describe(elapsed_s)}"
    return REDACTOR.text(text)


class LineReporter:
    """Progress lines on ``stream`` (default ``sys.stderr`` at call time): the first, one at each
    phase change, otherwise at most one per ``interval`` seconds, and the final one; never more
    than one per ``min_gap`` seconds except the final (a sandbox start runs every phase in a
    second: one line, not eight)."""

    def __init__(self, stream: Optional[TextIO] = None, *, interval: float = LINE_INTERVAL_S, min_gap: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.stream, self.interval, self.min_gap, self.clock = stream, interval, min_gap, clock
        self._last_at: Optional[float] = None
        self._last_phase: Optional[str] = None
        self.lines = 0

    def __call__(self, label: str, progress: StartupProgress, elapsed_s: float, final: bool) -> None:
        now = self.clock()
        since = None if self._last_at is None else now - self._last_at
        due = (final or since is None or since >= self.interval
               or (progress.phase != self._last_phase and since >= self.min_gap))
        if not due:
            return
        self._last_at, self._last_phase = now, progress.phase
        out = self.stream or sys.stderr
        print(progress_line(label, progress, elapsed_s, final), file=out, flush=True)
        self.lines += 1


class TerminalBar:
    """A progress bar on a terminal: one line rewritten in place (``\\r``, cut to ``width``),
    at most ``fps`` times a second; the shard bar while loading; the final line stays."""

    def __init__(self, stream: Optional[TextIO] = None, *, width: int = 100, fps: float = 4.0,
                 clock: Callable[[], float] = time.monotonic):
        self.stream, self.width, self.gap, self.clock = stream, width, 1.0 / fps, clock
        self._last_at: Optional[float] = None

    def __call__(self, label: str, progress: StartupProgress, elapsed_s: float, final: bool) -> None:
        now = self.clock()
        if not final and self._last_at is not None and now - self._last_at < self.gap:
            return
        self._last_at = now
        out = self.stream or sys.stderr
        if final:
            out.write("\r\x1b[K" + progress_line(label, progress, elapsed_s, True) + "\n")
        else:
            bar = ""
            if progress.shards and progress.phase in ("load", "load-draft") and progress.shards[1] > 0:
                done, total = progress.shards
                n = int(20 * min(done, total) / total)
                bar = "[" + "#" * n + "." * (20 - n) + "] "
            text = REDACTOR.text(f"{PROGRESS_MARK}{label + ': ' if label else ''}{bar}{progress.describe(elapsed_s)}")
            out.write("\r\x1b[K" + text[:self.width])
        out.flush()


class DisplayReporter:
    """Progress in an interactive notebook (JupyterLab, a kernel not run by the ``workbench
    runbook`` driver): one small grey line per launch, updated in place (an IPython display with a
    ``display_id``, at most ``fps`` times a second), never a stderr stream (which JupyterLab draws
    on a red background: progress is no error)."""

    def __init__(self, *, fps: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.gap, self.clock = 1.0 / fps, clock
        self._handles: dict = {}
        self._last_at: Optional[float] = None

    def __call__(self, label: str, progress: StartupProgress, elapsed_s: float, final: bool) -> None:
        from IPython.display import HTML, display

        now = self.clock()
        if not final and label in self._handles and self._last_at is not None and now - self._last_at < self.gap:
            return
        self._last_at = now
        line = progress_line(label, progress, elapsed_s, final)
        html = HTML(f'<pre class="wb-progress" style="color:#777;margin:0">{_html_escape(line)}</pre>')
        handle = self._handles.get(label)
        if handle is None:
            self._handles[label] = display(html, display_id=True)
        else:
            handle.update(html)
        if final:
            self._handles.pop(label, None)


def _html_escape(text: str) -> str:
    import html

    return html.escape(text)


def _interactive_kernel() -> bool:
    """Whether this process is a Jupyter kernel a person works in: IPython's ZMQ shell, not under
    the ``workbench runbook`` driver (``EAGLE_WORKBENCH_DRIVER``: there the lines go to stderr,
    relayed to the terminal and collapsed in the report)."""
    import os

    if os.environ.get("EAGLE_WORKBENCH_DRIVER") or "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def default_reporter(stream: Optional[TextIO] = None) -> Reporter:
    """:class:`TerminalBar` when ``stream`` (default ``sys.stderr``) is a terminal;
    :class:`DisplayReporter` in an interactive notebook (no ``stream`` given); else
    :class:`LineReporter` (a notebook cell run by the runbook driver, a file, a pipe)."""
    if stream is None and _interactive_kernel():
        return DisplayReporter()
    out = stream or sys.stderr
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        tty = False
    return TerminalBar(stream) if tty else LineReporter(stream)


class StartupWatch:
    """What ``Box.wait_healthy`` is given to follow a launch: :meth:`on_log` feeds a
    :class:`~workbench.logs.startup.StartupTracker` with the log text as it appears (no re-read),
    :meth:`marker` (called once per poll) is the tracker's change count (a new phase, shard or
    rank is progress) and gives the reporter its tick, each phase change is reported as its line is
    read, :meth:`stall_phase` names the phase for
    ``ServerStartStalled``. ``reporter``: a :data:`Reporter` or None (silent)."""

    def __init__(self, label: str = "", reporter: Optional[Reporter] = None, *,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.reporter, self.clock = label, reporter, clock
        self.tracker = StartupTracker(year=time.localtime().tm_year)
        self.tracker.on_phase = lambda _progress: self._report(False)   # every phase, also within one chunk
        self.started = clock()

    @property
    def progress(self) -> StartupProgress:
        """The start-up read so far."""
        return self.tracker.progress

    @property
    def elapsed_s(self) -> float:
        """Seconds since the watch began (the caller's clock)."""
        return self.clock() - self.started

    def on_log(self, text: str) -> None:
        """New log text (``Box.wait_healthy``'s ``on_log``)."""
        self.tracker.feed(text)
        self._report(False)

    def marker(self) -> int:
        """The tracker's change count (``Box.wait_healthy``'s ``progress_marker``); reports a tick."""
        self._report(False)
        return self.tracker.changes

    def stall_phase(self, tail: list) -> Optional[str]:
        """The phase the start-up stalled in (``Box.wait_healthy``'s ``stall_phase``): the tracker's
        when it read anything, else :func:`~workbench.logs.startup.startup_progress` over ``tail``."""
        if self.tracker.progress.lines:
            return self.tracker.flush().phase
        return startup_progress(tail).phase

    def finish(self) -> StartupProgress:
        """The end of the wait: the last partial line read, the final report. Returns the progress."""
        self.tracker.flush()
        if self.reporter is not None:
            self.reporter(self.label, self.progress, self.elapsed_s, True)
        return self.progress

    def _report(self, final: bool) -> None:
        if self.reporter is not None:
            self.reporter(self.label, self.progress, self.elapsed_s, final)


def wait_for_start(box, handle, *, stall_timeout: float, label: str = "", reporter: Optional[Reporter] = None,
                   total_timeout: float = MAX_START_S, **kwargs) -> tuple:
    """``box.wait_healthy`` of ``handle`` with the stall semantics (module doc): given up after
    ``stall_timeout`` seconds without progress (``ServerStartStalled`` naming the phase and the
    last log line), after ``total_timeout`` seconds in all (``ServerStartTimedOut``); progress to
    ``reporter`` meanwhile. ``kwargs`` go to ``wait_healthy``. Returns ``(seconds waited,
    StartupProgress)``. Raises what ``wait_healthy`` raises (``ServerDied``, ``ServerStartStuck``,
    ...), after the final report."""
    watch = StartupWatch(label, reporter)
    try:
        waited = box.wait_healthy(handle, timeout=max(total_timeout, stall_timeout), stall_timeout=stall_timeout,
                                  on_log=watch.on_log, progress_marker=watch.marker,
                                  stall_phase=watch.stall_phase, **kwargs)
    except BaseException:
        watch.finish()
        raise
    # the log is read up to the last poll; a ready server is ready whatever its last line says
    watch.tracker.enter("ready")
    return waited, watch.finish()


class ProgressRelay:
    """A file-like ``write`` target (papermill's ``stderr_file``) that passes the cell's stderr
    lines starting with :data:`PROGRESS_MARK` to ``stream`` and drops the rest (warnings stay in
    the notebook). On a terminal the lines rewrite one status line in place (the final ``ready``
    / ``not ready`` line stays); elsewhere each is a line."""

    def __init__(self, stream: Optional[TextIO] = None):
        self.stream = stream
        self._partial = ""
        self._open_line = False

    def write(self, text: str) -> int:
        data = self._partial + text
        lines = data.split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line)
        return len(text)

    def flush(self) -> None:
        out = self.stream or sys.stderr
        out.flush()

    def close_line(self) -> None:
        """End a status line left open on a terminal (the run ended)."""
        if self._open_line:
            (self.stream or sys.stderr).write("\n")
            self._open_line = False

    def _line(self, line: str) -> None:
        line = line.rstrip("\r")
        if not line.startswith(PROGRESS_MARK):
            return
        out = self.stream or sys.stderr
        try:
            tty = out.isatty()
        except (AttributeError, ValueError):
            tty = False
        final = " ready after " in line or ": not ready: " in line
        if tty and not final:
            out.write("\r\x1b[K" + line[:120])
            self._open_line = True
        else:
            out.write(("\r\x1b[K" if tty else "") + line + "\n")
            self._open_line = False
        out.flush()
