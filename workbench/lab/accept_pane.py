"""The box console's live accept length: :class:`AcceptPane`, the current server's decode log followed
across restarts, rotation and truncation (:class:`workbench.logs.ServerLogFollower`), its new lines
parsed by :func:`workbench.logs.parse_log` (the parser ``workbench logs`` and the runbooks use), and
shown as a plotly figure (:func:`workbench.report.figures.accept_length_live`) with the ceiling and a
marker at each restart, and a summary line.

The pane takes a state with ``.box`` and ``.log_path()`` (``workbench.lab.state.BoxState``); when
the state also has ``.server()`` (BoxState does), the server is read once per poll: its pid tells a
restart that kept the log path, and its launch command gives the ceiling
(:func:`workbench.diagnosis.acceptance.verify_ceiling`).

On a vLLM server (its command line says so: ``BoxState.engine_name``) the accept length is read from
vLLM's own Prometheus counters instead (``GET /metrics``: :func:`workbench.measure.vllm.spec_counters`
/ :func:`~workbench.measure.vllm.counter_window`, vLLM 0.32.0 ``v1/spec_decode/metrics.py``
``SpecDecodingProm``): the first poll of a server gives its lifetime mean, each later poll the window
since the one before (1 + accepted / drafts), with the per-position acceptance (P(k-th draft token
accepted)); a restart (new pid) starts again from its lifetime counts.
"""

from __future__ import annotations

import html
import json
import statistics
import threading
from typing import Any, Optional

import ipywidgets as W

from workbench.lab.clicks import clicks_of
from workbench.lab.poller import Poller

from workbench.logs import ServerLogFollower, parse_log

__all__ = ["AcceptPane", "EMPTY_TEXT", "WINDOW"]

#: Decode records the summary's mean is taken over (the most recent ones).
WINDOW = 20
#: The summary when no decode record with an accept length was read yet.
EMPTY_TEXT = "no decode records yet — send requests (workbench measure …)"


class AcceptPane:
    """Accept length of the current server, live: a plotly figure, a summary line, Poll now, Follow,
    Clear.

    ``state``: has ``.box`` (remote.Box) and ``.log_path() -> str | None``; optionally ``.server()``
    (a ``ServerProcess`` with ``pid``, ``argv``, ``log_path``, or ``None``) and ``.listeners`` (a list
    of ``fn(event)``: the pane polls after the console's ``started`` / ``stopped`` / ``restored``).
    ``interval``: seconds between background polls while Follow is on (default 2 s);
    ``first_bytes``: bytes read of the first log seen (default 256 KiB: the records already there);
    ``max_records``: records kept (default 5000, oldest dropped; restart markers move with them).

    :attr:`records`: ``{"timestamp": datetime | None, "accept_len": float}`` per decode line with
    an accept length, in log order; :attr:`restarts`: ``(index, label)``, a server (re)start before
    ``records[index]``; :attr:`ceiling`: tokens per verify step (``None``: not speculative or not
    known). Errors (box unreachable, no server, several servers and no port, unreadable log) are
    shown in the status line (``wb-accept-status``), never raised out of :meth:`poll_once` /
    :meth:`refresh`. CSS classes: ``wb-accept-poll``, ``wb-accept-follow``, ``wb-accept-clear``,
    ``wb-accept-summary``, ``wb-accept-status``, ``wb-accept-figure``.
    """

    def __init__(self, state, *, interval: float = 2.0, first_bytes: int = 256 << 10, max_records: int = 5000):
        self.state, self.interval = state, float(interval)
        self.max_records = int(max_records)
        self.records: list[dict] = []
        self.restarts: list[tuple[int, str]] = []
        self.notes: list[str] = []
        self.ceiling: Optional[float] = None
        self.pid: Optional[int] = None
        #: ``"log"`` (SGLang's decode lines) or ``"metrics"`` (vLLM's counters): where the records came from.
        self.source = "log"
        #: vLLM only: the last window's per-position acceptance (P(k-th draft accepted), k = 1 …).
        self.per_position: list[float] = []
        self._snapshot = None  # vLLM: the last /metrics snapshot and the pid it was read from
        self._snapshot_pid: Optional[int] = None
        self._server = None
        self.last_error: Optional[BaseException] = None
        self._pid_changed = False
        self._lock = threading.RLock()
        self._poller = Poller(self.poll_once, self.interval, "wb-accept-follow")
        self.follower = ServerLogFollower(state.box, self._log_path, first_bytes=first_bytes)

        def button(label: str, cls: str) -> W.Button:
            b = W.Button(description=label, layout=W.Layout(width="auto"))
            b.add_class(cls)
            return b

        self.poll_button = button("Poll now", "wb-accept-poll")
        self.clear_button = button("Clear", "wb-accept-clear")
        self.follow = W.ToggleButton(value=False, description="Follow", tooltip="poll every few seconds",
                                     layout=W.Layout(width="auto"))
        self.follow.add_class("wb-accept-follow")
        self.summary = W.HTML(html.escape(EMPTY_TEXT))
        self.summary.add_class("wb-accept-summary")
        self.status = W.HTML("")
        self.status.add_class("wb-accept-status")
        self.figure = W.Output(layout=W.Layout(min_height="360px"))
        self.figure.add_class("wb-accept-figure")
        clicks = clicks_of(state)  # a click queued while an action ran is dropped (workbench.lab.clicks)
        self.poll_button.on_click(clicks.handler("poll accept length", self.poll_once))
        self.clear_button.on_click(clicks.handler("clear accept length", self.clear))
        self.follow.observe(lambda c: self.start() if c["new"] else self.stop(), names="value")
        self.widget = W.VBox([W.HBox([self.poll_button, self.follow, self.clear_button]), self.summary,
                              self.status, self.figure])
        listeners = getattr(state, "listeners", None)
        if isinstance(listeners, list):
            listeners.append(self._on_event)
        self.render()

    # -- reading the box ------------------------------------------------------------------------

    def _log_path(self) -> Optional[str]:
        """The current server's log (the follower's ``path_fn``); with ``state.server()`` also its
        pid (a new pid is a restart) and the ceiling of its launch command."""
        server_fn = getattr(self.state, "server", None)
        if not callable(server_fn):
            return self.state.log_path()
        server = server_fn()
        self._server = server
        if server is None:
            return None
        if server.pid != self.pid:
            from workbench.diagnosis.acceptance import verify_ceiling
            from workbench.engine.launch import LaunchCommand

            self._pid_changed = self.pid is not None
            self.pid = server.pid
            self.ceiling = verify_ceiling(LaunchCommand.parse(list(server.argv)))
        return server.log_path

    def poll_once(self) -> int:
        """Read what is new in the log; the number of new decode records (with an accept length).
        Errors go to the status line (and :attr:`last_error`); nothing is raised."""
        self.poll_button.disabled = True
        try:
            with self._lock:
                self._pid_changed = False
                upd = self.follower.poll()
                restarted = self._pid_changed or any(n.startswith("server restarted") for n in upd.notes)
                if restarted:
                    self.restarts.append((len(self.records), f"restart (pid {self.pid})" if self.pid else "restart"))
                if self._is_vllm():
                    new = self._poll_vllm()
                else:
                    self.source = "log"
                    new = [{"timestamp": r.timestamp, "accept_len": float(r.accept_len)}
                           for r in parse_log(upd.lines).decode if r.accept_len is not None]
                self.records.extend(new)
                self._trim()
                self.notes.extend(upd.notes)
                self.last_error = None
            self.render()
            return len(new)
        except Exception as exc:  # noqa: BLE001 - a box error is shown in the pane; the next poll tries again
            self.last_error = exc
            self.status.value = (f"<span style='color:#b00'><b>{html.escape(type(exc).__name__)}</b>: "
                                 f"{html.escape(str(exc))}</span>")
            return 0
        finally:
            self.poll_button.disabled = False

    def _is_vllm(self) -> bool:
        """Whether the server polled last runs vLLM (its command line; ``state.engine_name``)."""
        name_fn = getattr(self.state, "engine_name", None)
        return self._server is not None and callable(name_fn) and name_fn(self._server) == "vllm"

    def _poll_vllm(self) -> list[dict]:
        """One ``GET /metrics`` of the vLLM server: the records it adds (``accept_len``,
        ``per_position``, ``drafts``, ``timestamp`` now, ``since_start`` for a server's first read).
        Raises ``httpx.HTTPError`` / box errors (shown by :meth:`poll_once`)."""
        import datetime

        import httpx

        from workbench.measure.sources import parse_metrics
        from workbench.measure.vllm import counter_window, spec_counters

        server = self._server
        self.source = "metrics"
        url = self.state.box.url(server.port) + "/metrics"
        resp = httpx.get(url, timeout=10.0, trust_env=False)
        if resp.status_code != 200:
            raise RuntimeError(f"GET {url} answered {resp.status_code}: {resp.text[:200]}")
        snap = parse_metrics(resp.text)
        if spec_counters(snap) is None:
            self.notes.append("vLLM's /metrics has no vllm:spec_decode_num_drafts counter: speculative decoding is "
                              "off on this server")
            return []
        same = self._snapshot is not None and self._snapshot_pid == server.pid
        counts = counter_window(self._snapshot, snap) if same else spec_counters(snap)
        self._snapshot, self._snapshot_pid = snap, server.pid
        if counts is None or not counts.drafts:
            return []
        self.per_position = counts.per_position
        return [{"timestamp": datetime.datetime.now(), "accept_len": counts.accept_length,
                 "per_position": counts.per_position, "drafts": counts.drafts, "since_start": counts.since_start}]

    def _trim(self) -> None:
        drop = len(self.records) - self.max_records
        if drop > 0:
            del self.records[:drop]
            self.restarts = [(max(0, i - drop), label) for i, label in self.restarts]

    def refresh(self) -> None:
        """Re-read the box (one poll)."""
        self.poll_once()

    def _on_event(self, _event: str) -> None:
        self.poll_once()

    def clear(self) -> None:
        """Forget the records and markers read so far (the log keeps being followed from where it is)."""
        with self._lock:
            self.records.clear()
            self.restarts.clear()
            self.notes.clear()
        self.render()

    # -- what is shown -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """``{"records": N, "last": float | None, "mean": float | None (of the last WINDOW records),
        "ceiling": float | None}`` (accept lengths in tokens per verify step)."""
        with self._lock:
            lens = [r["accept_len"] for r in self.records]
            return {"records": len(lens), "last": lens[-1] if lens else None,
                    "mean": statistics.fmean(lens[-WINDOW:]) if lens else None, "ceiling": self.ceiling}

    def summary_text(self) -> str:
        """The summary line as text: last, mean of the last :data:`WINDOW`, count, ceiling, and that
        mean's level in the words ``workbench logs`` / ``measure`` / ``doctor --running`` print for
        the same value (``acceptance: low: 1.12 of a possible 4.00 (< 45 % of the ceiling)``:
        :func:`workbench.rules.acceptance_level.classify_acceptance`); or :data:`EMPTY_TEXT`."""
        from workbench.rules.acceptance_level import classify_acceptance

        s = self.stats()
        if not s["records"]:
            return EMPTY_TEXT
        ceiling = f"{s['ceiling']:g}" if s["ceiling"] is not None else "unknown"
        n = min(WINDOW, s["records"])
        level = f" · acceptance: {classify_acceptance(s['mean'], ceiling=s['ceiling']).words}"
        if self.source == "metrics":
            pos = ", ".join(f"{p:.3f}" for p in self.per_position)
            return (f"accept length (vLLM /metrics counters): last {s['last']:.2f} · mean of the last {n} "
                    f"{s['mean']:.2f} · {s['records']} windows · per-position acceptance {pos or 'unknown'} · "
                    f"ceiling {ceiling} tokens / verify step{level}")
        return (f"accept length: last {s['last']:.2f} · mean of the last {n} {s['mean']:.2f} · "
                f"{s['records']} decode records · ceiling {ceiling} tokens / verify step{level}")

    def render(self) -> None:
        """Redraw the summary, the status line and the figure from the records kept."""
        from workbench.report.figures import accept_length_live

        with self._lock:
            records = list(self.records)
            restarts = list(self.restarts)
            notes = "; ".join(self.notes[-3:])
            path = self.follower.path or "(no log)"
        self.summary.value = html.escape(self.summary_text())
        self.status.value = html.escape(" · ".join(x for x in (path, notes) if x))
        fig = accept_length_live(records, ceiling=self.ceiling, restarts=restarts, window=WINDOW)
        self.fig = fig
        spec = json.loads(fig.to_json())  # plotly's encoder: datetimes as ISO text
        bundle = {"application/vnd.plotly.v1+json": {"data": spec["data"], "layout": spec["layout"], "config": {}},
                  "text/plain": f"<accept length figure: {len(records)} records, {len(restarts)} restarts>"}
        # set the Output's outputs directly: works from the Follow thread, unlike `with output:`
        self.figure.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)

    # -- Follow ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Poll every ``interval`` seconds in a background thread until :meth:`stop`."""
        self._poller.start()

    def stop(self) -> None:
        """Stop the background polling (waits for the thread, at most ``interval`` + 5 s)."""
        self._poller.stop()
        if self.follow.value:
            self.follow.value = False

    def close(self) -> None:
        """Stop following and stop listening to the console's events (idempotent)."""
        self.stop()
        listeners = getattr(self.state, "listeners", None)
        if isinstance(listeners, list) and self._on_event in listeners:
            listeners.remove(self._on_event)
