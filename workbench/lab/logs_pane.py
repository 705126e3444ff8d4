"""The box console's live log tail: :class:`LogPane` over a :class:`workbench.logs.ServerLogFollower`.

The pane takes a state with ``.box`` and ``.log_path()`` (``workbench.lab.state.BoxState``); the
log path is re-read on every poll, so the tail follows a restart onto the new log file.

Both engines' logs: the presets hold SGLang's ``Decode batch`` lines and vLLM's speculative-decoding
metrics lines (``SpecDecoding metrics:`` / V0's ``Speculative metrics:``), and each vLLM metrics line
read is parsed (:func:`workbench.logs.vllm_log.parse_spec_decoding_line`, every wording vLLM has
printed) into the line under the filter (``wb-log-spec``): the last interval's mean acceptance length,
accepted / drafted tokens and per-position acceptance.
"""

from __future__ import annotations

import html
import re
import threading
from collections import deque

import ipywidgets as W

from workbench.lab.clicks import clicks_of
from workbench.lab.poller import Poller
from workbench.logs import ServerLogFollower

#: Filter presets: label -> (pattern, is_regex). ``[probe:`` is the prefix probes print.
PRESETS = {
    "(none)": ("", False),
    "decode": ("Decode batch", False),
    "vLLM spec metrics": ("SpecDecoding metrics|Speculative metrics", True),
    "probe": ("[probe:", False),
    "error/Traceback": (r"error|Error|ERROR|Traceback|Exception", True),
}


class LogPane:
    """A live tail of the current server's log, with a filter, presets, follow toggle and Poll now.

    ``state``: has ``.box`` (remote.Box) and ``.log_path() -> str | None``. ``interval``: seconds
    between background polls (default 1 s) while Follow is on (:meth:`start` / :meth:`stop`).
    ``max_lines``: lines kept (default 2000); ``first_bytes``: bytes read of the first log seen
    (default 256 KiB). Errors (box errors, a bad regex) are shown in the status line
    (``wb-log-status``), never raised out of :meth:`poll_once` / :meth:`refresh`.
    CSS classes: ``wb-log-tail``, ``wb-log-filter``, ``wb-log-preset``, ``wb-log-follow``,
    ``wb-log-poll``, ``wb-log-status``.
    """

    def __init__(self, state, *, interval: float = 1.0, max_lines: int = 2000, first_bytes: int = 256 << 10):
        self.state, self.interval = state, float(interval)
        self.lines: deque[str] = deque(maxlen=int(max_lines))
        self.notes: list[str] = []
        self.follower = ServerLogFollower(state.box, state.log_path, first_bytes=first_bytes)
        self._lock = threading.Lock()
        self._poller = Poller(self.poll_once, self.interval, "wb-log-follow")
        self.filter = W.Text(placeholder="filter: substring, or /regex/", description="Filter",
                             layout=W.Layout(width="auto"))
        self.filter.add_class("wb-log-filter")
        self.preset = W.Dropdown(options=list(PRESETS), value="(none)", description="Preset")
        self.preset.add_class("wb-log-preset")
        self.follow = W.ToggleButton(value=False, description="Follow", layout=W.Layout(width="auto"))
        self.follow.add_class("wb-log-follow")
        self.poll_button = W.Button(description="Poll now", layout=W.Layout(width="auto"))
        self.poll_button.add_class("wb-log-poll")
        self.status = W.HTML("")
        self.status.add_class("wb-log-status")
        #: The last vLLM speculative-decoding metrics line read (``SpecDecodingLine``), else ``None``.
        self.last_spec = None
        self.spec = W.HTML("")
        self.spec.add_class("wb-log-spec")
        self.tail = W.HTML("<pre></pre>", layout=W.Layout(max_height="400px", overflow="auto"))
        self.tail.add_class("wb-log-tail")
        self.filter.observe(lambda _c: self.render(), names="value")
        self.preset.observe(self._on_preset, names="value")
        self.follow.observe(lambda c: self.start() if c["new"] else self.stop(), names="value")
        self.poll_button.on_click(clicks_of(state).handler("poll now", self.poll_once))
        self.widget = W.VBox([W.HBox([self.filter, self.preset, self.follow, self.poll_button]),
                              self.status, self.spec, self.tail])

    def _on_preset(self, change) -> None:
        pat, is_re = PRESETS[change["new"]]
        self.filter.value = f"/{pat}/" if is_re and pat else pat

    def _matcher(self):
        """A predicate for the filter text; ``/.../`` is a regex. Raises re.error on a bad one."""
        text = self.filter.value
        if len(text) >= 2 and text.startswith("/") and text.endswith("/"):
            rx = re.compile(text[1:-1])
            return lambda ln: rx.search(ln) is not None
        return lambda ln: text in ln

    def shown(self) -> list[str]:
        """The kept lines the filter lets through (all when it is empty). Raises re.error."""
        match = self._matcher()
        with self._lock:
            return [ln for ln in self.lines if match(ln)]

    def render(self) -> None:
        """Redraw the tail and the status from the kept lines (a bad regex is said in the status)."""
        try:
            lines = self.shown()
            err = ""
        except re.error as exc:
            lines, err = [], f"bad regex {self.filter.value!r}: {exc}"
        path = self.follower.path or "(no log)"
        notes = "; ".join(self.notes[-3:])
        self.status.value = html.escape(" · ".join(x for x in (path, f"{len(lines)} lines", notes, err) if x))
        self.tail.value = "<pre>" + html.escape("\n".join(lines)) + "</pre>"

    def poll_once(self) -> int:
        """Read what is new on the box; the number of new lines. Errors go to the status line."""
        self.poll_button.disabled = True
        try:
            upd = self.follower.poll()
            with self._lock:
                self.notes.extend(upd.notes)
                for note in upd.notes:  # the boundary first, then what came after it
                    self.lines.append(f"[eagle-workbench: {note}]")
                self.lines.extend(upd.lines)
                self._read_spec(upd.lines)
            self.render()
            return len(upd.lines)
        except Exception as exc:  # a box error: shown in the pane, the poll goes on next time
            self.status.value = html.escape(f"{type(exc).__name__}: {exc}")
            return 0
        finally:
            self.poll_button.disabled = False

    def _read_spec(self, lines) -> None:
        """Parse the vLLM speculative-decoding metrics lines among ``lines``; the last one shown."""
        from workbench.logs.vllm_log import SPEC_MARKERS, parse_spec_decoding_line

        markers = tuple(m.decode() for m in SPEC_MARKERS)
        for line in lines:
            if any(m in line for m in markers):
                rec = parse_spec_decoding_line(line)
                if rec is not None:
                    self.last_spec = rec
        rec = self.last_spec
        if rec is None:
            return
        parts = [f"vLLM speculative decoding ({rec.wording} line{', ' + rec.when if rec.when else ''})"]
        if rec.mean_acceptance_length is not None:
            parts.append(f"mean acceptance length {rec.mean_acceptance_length:.2f}")
        if rec.accepted is not None and rec.drafted is not None:
            parts.append(f"accepted {rec.accepted} of {rec.drafted} draft tokens")
        if rec.per_position:
            parts.append("per position " + ", ".join(f"{p:.3f}" for p in rec.per_position))
        parts += [f"({p})" for p in rec.problems]
        self.spec.value = "<b>" + html.escape(" · ".join(parts)) + "</b>"

    def refresh(self) -> None:
        """Re-read the box (one poll)."""
        self.poll_once()

    def start(self) -> None:
        """Poll every ``interval`` seconds in a background thread until :meth:`stop`."""
        self._poller.start()

    def stop(self) -> None:
        """Stop the background polling (waits for the thread, at most ``interval`` + 5 s)."""
        self._poller.stop()
        if self.follow.value:
            self.follow.value = False
