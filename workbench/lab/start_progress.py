"""The console's start-up progress: an ipywidgets ``HTML`` showing a launch's phase, shard bar,
elapsed time and last log line while it loads, from the same
:class:`~workbench.logs.startup.StartupProgress` the CLI's bar and the runbook's lines show
(:mod:`workbench.session.startup_wait`).

:class:`StartProgressView` is both the widget (``.widget``, CSS class
``wb-console-start-progress``) and the reporter a :class:`~workbench.session.box_session.BoxSession`
or :func:`~workbench.session.journal.restore_box` calls (``view(label, progress, elapsed_s, final)``),
updating at most :data:`UPDATES_PER_S` times a second (the final update always).
"""

from __future__ import annotations

import html
import time
from typing import Callable, Optional

import ipywidgets as W

from workbench.logs.startup import PHASE_TEXT, PHASES, StartupProgress, format_duration
from workbench.redact import REDACTOR

#: The widget is redrawn at most this many times a second while a launch loads.
UPDATES_PER_S = 4.0


def _esc(x) -> str:
    return html.escape(str(x))


class StartProgressView:
    """The start-up progress widget and reporter (module doc). ``.text``: the last state shown as
    one plain line (``"fix: loading weights: shard 57/163, 12 min 3 s elapsed"``), ``""`` before
    any launch; ``.updates``: how many times it was redrawn."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic):
        self.widget = W.HTML()
        self.widget.add_class("wb-console-start-progress")
        self.clock = clock
        self.text = ""
        self.updates = 0
        self._last: Optional[float] = None

    def clear(self) -> None:
        """Nothing shown (a new action begins)."""
        self.widget.value = ""
        self.text = ""
        self._last = None

    def __call__(self, label: str, progress: StartupProgress, elapsed_s: float, final: bool) -> None:
        now = self.clock()
        if not final and self._last is not None and now - self._last < 1.0 / UPDATES_PER_S:
            return
        self._last = now
        self.updates += 1
        phase = PHASE_TEXT.get(progress.phase, progress.phase)
        who = f"{label}: " if label else ""
        if final:
            head = (f"ready after {format_duration(elapsed_s)}" if progress.phase == "ready"
                    else f"not ready ({phase}) after {format_duration(elapsed_s)}")
        else:
            head = f"{phase}, {format_duration(elapsed_s)} elapsed"
        bar = ""
        if progress.shards and progress.phase in ("load", "load-draft") and progress.shards[1] > 0:
            done, total = progress.shards
            head += f", shard {done}/{total}"
            bar = (f"<progress class='wb-console-shards' value='{done}' max='{total}' "
                   f"style='width:20em'></progress> ")
        self.text = who + head
        steps = [p for p in PHASES if p not in ("launch", "failed")]
        seen = {p["name"] for p in progress.phases}
        trail = " → ".join(f"<b>{_esc(p)}</b>" if p == progress.phase else
                           (_esc(p) if p in seen else f"<span style='color:#999'>{_esc(p)}</span>") for p in steps)
        last = (f"<pre class='wb-console-start-last' style='white-space:pre-wrap;margin:0'>"
                f"{_esc(REDACTOR.text(progress.last_line))}</pre>") if progress.last_line else ""
        ranks = f" ({len(progress.ranks_seen)} ranks)" if len(progress.ranks_seen) > 1 else ""
        self.widget.value = (f"<div><b>Start-up</b> {_esc(who)}{bar}{_esc(head)}{_esc(ranks)}<br>"
                             f"<small>{trail}</small>{last}</div>")
