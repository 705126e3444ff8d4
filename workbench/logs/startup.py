"""Start-up progress of an SGLang or vLLM server from its log: which phase it is in, the shard
count of the weight load, when each phase began, the last line, the ranks heard from.

:func:`startup_progress` reads whole lines (pure); :class:`StartupTracker` is the same parser fed
text as it arrives (``Box.wait_healthy(on_log=...)``), keeping its state so a poll never re-reads
the log. Phases, in the order SGLang 0.5.23 runs them (``srt/managers/scheduler.py``
``init_model_worker``: target load, draft load, memory pools, attention backends, target graphs,
draft graphs):

=================  ==============================================================================
phase              a line that starts it (source, file:line in the published wheel / install)
=================  ==============================================================================
``launch``         nothing yet (the process started; imports, argument checks)
``nccl-init``      SGLang 0.5.23 ``Init parallel begin.`` (``srt/distributed/bootstrap.py:115``);
                   0.4 - 0.5 ``Init torch distributed begin.`` (0.4.6
                   ``srt/model_executor/model_runner.py:328``); early ``Init nccl begin.``; vLLM
                   ``world_size=N rank=N local_rank=N distributed_init_method=...``
                   (``vllm/distributed/parallel_state.py:1907``)
``load``           ``Load weight begin. avail mem=`` (0.5.23 ``model_runner.py:1274``), the first
                   on a rank; a ``Loading ... checkpoint shards: P% Completed | n/N`` bar
                   (``srt/model_loader/weight_utils.py:1166``, ``BAR_FORMAT`` in
                   ``srt/utils/common.py:1414``); vLLM ``Starting to load model M...``
                   (``vllm/v1/worker/gpu_model_runner.py:5040``)
``load-draft``     the second ``Load weight begin.`` on a rank (the EAGLE draft's model runner);
                   vLLM ``Loading drafter model...`` (``gpu_model_runner.py:5071``)
``kv-cache``       ``KV Cache is allocated.`` (0.4.6 ``srt/mem_cache/memory_pool.py:243``),
                   ``Memory pool end.`` (0.5.23 ``srt/mem_cache/kv_cache_configurator.py:499``);
                   vLLM ``Available KV cache memory:`` (``vllm/v1/worker/gpu_worker.py:760``),
                   ``GPU/CPU KV cache size:`` (``vllm/v1/core/kv_cache_utils.py:2328``)
``capture``        0.5.23 ``Capture target verify|decode|prefill CUDA graph begin.``
                   (``srt/model_executor/model_runner_components/cuda_graph_setup.py:685,759``),
                   0.4 - 0.5 ``Capture cuda graph begin.`` (0.4.6 ``model_runner.py:965``) before
                   the draft's load; vLLM ``Capturing CUDA graphs (...)`` (``gpu_model_runner.py:6657``)
``capture-draft``  0.5.23 ``Capture draft decode|extend|verify CUDA graph begin.``
                   (``srt/speculative/eagle_worker_v2.py:515,634``), 0.4 - 0.5 ``Capture draft
                   cuda graph begin.`` (0.4.6 ``srt/speculative/eagle_worker.py:220``), a generic
                   capture line after the draft's load on that rank
``warmup``         uvicorn's ``Application startup complete.`` / ``Uvicorn running on`` (SGLang:
                   the warm-up request follows, ``srt/entrypoints/http_server.py`` ``_wait_and_warmup``)
                   and the warm-up request's ``Prefill batch`` / ``Decode batch`` line, each only once
                   weights were loaded (HTTP up while a server still loads is no warm-up),
                   ``Start of pd disaggregation warmup``; vLLM ``init engine (profile, create kv
                   cache, warmup model) took`` (``vllm/v1/engine/core.py:403``)
``ready``          ``The server is fired up and ready to roll!`` (``http_server.py:2600``); vLLM
                   (no such line) uvicorn's ``Application startup complete.``
``failed``         ``Scheduler hit an exception`` (``srt/managers/scheduler.py:6372``, and the
                   tokenizer's/detokenizer's/DP controller's), ``Received sigquit from a child
                   process`` (``srt/entrypoints/engine.py:1977``), ``Initialization failed.``
                   (``engine.py:2032``, ``http_server.py:2384``); vLLM ``EngineCore failed to start.``
                   (``vllm/v1/engine/core.py:1510``), ``Engine core initialization failed.``
                   (``vllm/v1/engine/utils.py:1432``). Sticky: later lines do not undo it.
=================  ==============================================================================

The phase is that of the latest line that starts one (a lagging rank's ``Load weight begin.``
after another rank's memory pool puts it back to ``load``: the slowest rank is what the start-up
waits for); ``phases`` lists each phase once, at its first line. End lines (``Load weight end.``,
``Capture ... end.``, ``Init parallel ends.``) count as progress but start no phase.

Rank prefixes: SGLang's ``[YYYY-MM-DD HH:MM:SS(.mmm)? TAGS] `` (``srt/utils/common.py``
``configure_logger``; tags ``TP3``, ``DP0 TP0 EP0``, ``PP1 TP0`` as ``scheduler.py``
``run_scheduler_process`` builds them; none at TP 1), vLLM's ``(PROC pid=N) LEVEL MM-DD HH:MM:SS
[file.py:N] `` (``vllm/logger.py`` ``_FORMAT``: ``(EngineCore_DP0 pid=123)``, ``(VllmWorker rank=3
pid=9)``, ``(Worker_TP1 pid=9)``), ANSI colours stripped, any text before either (a container's
own prefix). tqdm bars carry no prefix and may hold several updates separated by ``\\r``: the last
one counts. The access-log echo of a readiness poll (``remote.box.POLL_LINE``: ``"GET
/health_generate HTTP/1.1" 503``) is no progress: it is counted in ``lines`` and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable, Optional

from remote.box import POLL_LINE
from workbench.logs.lines import epoch_seconds

#: Start-up phases in SGLang 0.5.23's order (module doc), then the two ends.
PHASES = ("launch", "nccl-init", "load", "load-draft", "kv-cache", "capture", "capture-draft", "warmup",
          "ready", "failed")

#: What each phase is called in one line of progress text.
PHASE_TEXT = {
    "launch": "launching", "nccl-init": "initialising torch.distributed", "load": "loading weights",
    "load-draft": "loading draft weights", "kv-cache": "allocating the KV cache",
    "capture": "capturing CUDA graphs", "capture-draft": "capturing the draft's CUDA graphs",
    "warmup": "warming up", "ready": "ready", "failed": "failed",
}

# the access-log echo of a readiness poll (remote.box.POLL_LINE): not the server's progress
_POLL = re.compile(POLL_LINE.pattern.decode())
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SGL_PREFIX = re.compile(
    r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:[.,](?P<ms>\d{3}))?(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] ")
_VLLM_PREFIX = re.compile(
    r"(?:\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)? (?:\[[^\]]*\] |\S+\] )")
_VLLM_PROC = re.compile(r"\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\) ")
# tqdm: "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [...]" (SGLang / vLLM BAR_FORMAT)
# or tqdm's default "{l_bar}{bar}| {n_fmt}/{total_fmt} [...]"
_SHARD_BAR = re.compile(
    r"(?:Loading[^:\r\n]*?(?:shards|loader|InstantTensor|Streamer)|Multi-thread loading[^:\r\n]*?)"
    r":\s*\d+%(?: Completed \||[^|\r\n]*\|) *(?P<n>\d+)/(?P<total>\d+)")

# (regex, phase); first match wins. "load*" and generic captures are resolved per rank below.
_MARKERS: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p), ph) for p, ph in (
    (r"Scheduler hit an exception|TokenizerManager hit an exception|DetokenizerManager hit an exception"
     r"|DataParallelController hit an exception|Received sigquit from a child process"
     r"|Initialization failed\.|EngineCore failed to start|Engine core initialization failed", "failed"),
    (r"The server is fired up and ready to roll", "ready"),
    (r"Init parallel begin\.|Init torch distributed begin\.|Init nccl begin\.|^world_size=\d+ rank=\d+ ", "nccl-init"),
    (r"^Load weight begin\.|^Starting to load model ", "load*"),
    (r"^Loading drafter model", "load-draft"),
    (r"^KV Cache is allocated\.|^Memory pool end\.|^Available KV cache memory:|^[A-Z]+ KV cache size: ",
     "kv-cache"),
    (r"^Capture (?:draft|Frozen-KV MTP draft)\b[^.]*? begin\.", "capture-draft"),
    (r"^Capture target\b[^.]*? begin\.", "capture"),
    (r"^Capture [^.]*?(?:cuda|CUDA|CPU|NPU|XPU) graph begin\.|^Capturing CUDA graphs", "capture*"),
    (r"Application startup complete\.|Uvicorn running on|Start of pd disaggregation warmup"
     r"|^init engine \(profile, create kv cache, warmup model\) took", "warmup*"),
))
# phases after which HTTP coming up or a batch line is the warm-up
_LOADED = frozenset({"load", "load-draft", "kv-cache", "capture", "capture-draft"})
_BATCH = re.compile(r"(?:Prefill|Decode) batch\b")
# lines that are progress but start no phase
_ENDS = re.compile(r"^(?:Load weight end\.|Capture [^.]*? end\.|Init parallel ends\.|Init torch distributed ends\."
                   r"|Loading weights took|Model loading took|Graph capturing finished)")


@dataclass
class StartupProgress:
    """Where a server's start-up is, read from its log.

    ``phase``: one of :data:`PHASES`; ``phases``: ``[{"name": phase, "at": epoch seconds of the
    line that started it (the log's own clock, no time zone: :func:`workbench.logs.epoch_seconds`)
    or None}]``, each phase once, in the order first seen (vLLM lines have no year: ``at`` is None
    unless a ``year`` was given); ``shards``: ``(done, total)`` of the latest shard-loading bar or
    None; ``last_line``: the last non-empty line without its prefix (a tqdm line: its last update),
    None before any; ``ranks_seen``: the rank tags as the log writes them, in the order first seen
    (SGLang ``"TP3"``, ``"DP0 TP0 EP0"``; vLLM the process, ``"VllmWorker rank=3"``,
    ``"Worker_TP1"``); empty for a TP 1 SGLang server (no tags). ``first_at`` / ``last_at``: the
    first and latest line timestamps (epoch seconds) or None; ``engine``: ``"sglang"``,
    ``"vllm"`` or None (no prefixed line yet); ``lines``: lines read.
    """

    phase: str = "launch"
    phases: list = field(default_factory=list)
    shards: Optional[tuple] = None
    last_line: Optional[str] = None
    ranks_seen: list = field(default_factory=list)
    first_at: Optional[float] = None
    last_at: Optional[float] = None
    engine: Optional[str] = None
    lines: int = 0

    def phase_started_at(self, name: str) -> Optional[float]:
        """Epoch seconds (log clock) when phase ``name`` first began, None if not seen or undated."""
        for p in self.phases:
            if p["name"] == name:
                return p["at"]
        return None

    def describe(self, elapsed_s: Optional[float] = None, *, width: int = 160) -> str:
        """One line for a human: ``"loading weights: shard 57/163, 12 min 3 s elapsed; last: <line>"``.

        ``elapsed_s``: seconds since the launch (the caller's clock); None -> from the log's own
        first and latest timestamps, left out when it has none. The whole line is cut to ``width``
        characters (the last line shortened, ``...`` marking the cut)."""
        head = PHASE_TEXT.get(self.phase, self.phase)
        parts = []
        if self.shards is not None and self.phase in ("load", "load-draft"):
            parts.append(f"shard {self.shards[0]}/{self.shards[1]}")
        if elapsed_s is None and self.first_at is not None and self.last_at is not None:
            elapsed_s = self.last_at - self.first_at
        if elapsed_s is not None:
            parts.append(f"{format_duration(elapsed_s)} elapsed")
        if len(self.ranks_seen) > 1:
            parts.append(f"{len(self.ranks_seen)} ranks")
        text = head + (": " + ", ".join(parts) if parts else "")
        if self.last_line:
            room = max(width - len(text) - len("; last: "), 20)
            last = self.last_line if len(self.last_line) <= room else self.last_line[:room - 3] + "..."
            text += f"; last: {last}"
        return text

    def to_dict(self) -> dict:
        """JSON-ready: the fields above, ``shards`` as ``[done, total]`` or None."""
        return {"phase": self.phase, "phases": [dict(p) for p in self.phases],
                "shards": list(self.shards) if self.shards else None, "last_line": self.last_line,
                "ranks_seen": list(self.ranks_seen), "first_at": self.first_at, "last_at": self.last_at,
                "engine": self.engine, "lines": self.lines}


def format_duration(seconds: float) -> str:
    """``5.2`` -> ``"5 s"``, ``723`` -> ``"12 min 3 s"``, ``3725`` -> ``"1 h 2 min"`` (whole seconds)."""
    s = int(max(seconds, 0.0))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class StartupTracker:
    """The incremental parser: :meth:`feed` log text as it arrives (any chunking; a line cut in two
    is joined; a tqdm update ending in ``\\r`` counts at once), read :attr:`progress`.

    ``year``: the year given to vLLM's year-less timestamps (None: their ``at`` is None). Keeps
    per-rank state (loads seen, whether the draft's load began) so the second ``Load weight
    begin.`` of a rank is the draft's; nothing else of the log is kept. :attr:`on_phase` (None or
    a callable taking the :class:`StartupProgress`) is called at each phase change, in the middle
    of a chunk that holds several: a watcher sees every phase.
    """

    def __init__(self, *, year: Optional[int] = None) -> None:
        self.year = year
        self.progress = StartupProgress()
        self._partial = ""
        self._loads: dict = {}      # rank key -> "Load weight begin." count
        self._pids: dict = {}       # vLLM worker pid -> index in ranks_seen
        self._seen_phases: set = set()
        self.changes = 0            # bumps when phase, shards or ranks change (a cheap "moved" test)
        self.on_phase = None        # called with the progress at each phase change, as the line is read

    def feed(self, text: str) -> StartupProgress:
        """Take new log text (str; decode bytes with errors="replace" first). Returns :attr:`progress`."""
        if not text:
            return self.progress
        data = self._partial + text
        pieces = re.split(r"(\r\n|\n|\r)", data)
        # pieces: [seg, sep, seg, sep, ..., tail]; a tail with no separator waits for more text
        self._partial = pieces[-1]
        if len(self._partial) > 65536:          # a runaway line: read what we have
            self._line(self._partial)
            self._partial = ""
        for i in range(0, len(pieces) - 1, 2):
            self._line(pieces[i])
        return self.progress

    def flush(self) -> StartupProgress:
        """Read a last line that has no newline yet (the end of the input)."""
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        return self.progress

    # --- one line -------------------------------------------------------------------------------

    def _line(self, raw: str) -> None:
        line = _ANSI.sub("", raw).strip()
        if not line:
            return
        p = self.progress
        p.lines += 1
        if _POLL.search(line):
            return
        at, key, body = self._prefix(line)
        if at is not None:
            if p.first_at is None:
                p.first_at = at
            p.last_at = at
        bar = None
        for m in _SHARD_BAR.finditer(body):
            bar = m
        if bar is not None:
            shards = (int(bar.group("n")), int(bar.group("total")))
            if shards != p.shards:
                p.shards = shards
                self.changes += 1
            if p.phase in ("launch", "nccl-init"):
                self.enter("load", at)
        p.last_line = body
        phase = self._phase_of(body, key)
        if phase is not None:
            self.enter(phase, at)

    def _prefix(self, line: str) -> tuple:
        """(epoch seconds or None, a stable key of the rank or "", the line without its prefix)."""
        m = _SGL_PREFIX.search(line)
        if m is not None and m.start() < 200:
            self.progress.engine = self.progress.engine or "sglang"
            ts = datetime.strptime(m.group("ts"), "%Y-%m-%d %H:%M:%S")
            if m.group("ms"):
                ts = ts.replace(microsecond=int(m.group("ms")) * 1000)
            tags = m.group("tags").strip()
            if tags and tags not in self.progress.ranks_seen:
                self.progress.ranks_seen.append(tags)
                self.changes += 1
            return epoch_seconds(ts), tags, line[m.end():].strip()
        m = _VLLM_PREFIX.search(line)
        if m is not None and m.start() < 200:
            self.progress.engine = self.progress.engine or "vllm"
            at = None
            if self.year is not None:
                at = epoch_seconds(datetime.strptime(f"{self.year}-{m.group('md')} {m.group('hms')}",
                                                     "%Y-%m-%d %H:%M:%S"))
            return at, self._vllm_rank(m.group("proc"), m.group("pid")), line[m.end():].strip()
        m = _VLLM_PROC.match(line)          # a worker's bare print behind the process tag
        if m is not None:
            return None, self._vllm_rank(m.group("proc"), m.group("pid")), line[m.end():].strip()
        return None, "", line

    def _vllm_rank(self, proc: Optional[str], pid: Optional[str]) -> str:
        """The key (``"pid:N"``) of the vLLM worker named by a prefix, "" for the API server and
        the engine core. One ``ranks_seen`` entry per worker pid: vLLM 0.32 renames a worker from
        ``VllmWorker-N`` to ``Worker`` / ``Worker_TPn`` once its groups exist
        (``vllm/v1/executor/multiproc_executor.py:747,1088``); the more specific name is kept."""
        if not proc or proc.startswith(("APIServer", "EngineCore")):
            return ""
        ranks = self.progress.ranks_seen
        if pid in self._pids:
            i = self._pids[pid]
            if ranks[i] != proc and proc != "Worker":
                ranks[i] = proc
        else:
            self._pids[pid] = len(ranks)
            ranks.append(proc)
            self.changes += 1
        return f"pid:{pid}"

    def _phase_of(self, body: str, key: str) -> Optional[str]:
        for rx, phase in _MARKERS:
            if not rx.search(body):
                continue
            if phase == "load*":
                n = self._loads.get(key, 0) + 1
                self._loads[key] = n
                return "load" if n == 1 else "load-draft"
            if phase == "capture*":
                return "capture-draft" if self._loads.get(key, 0) >= 2 else "capture"
            if phase == "warmup*":
                if self.progress.engine == "vllm" and "Application startup complete" in body:
                    return "ready"
                # HTTP up before any weights (a server that answers 503 while it loads): no warm-up yet
                return "warmup" if self._seen_phases & _LOADED else None
            return phase
        if _BATCH.match(body) and self._seen_phases & _LOADED and self.progress.phase not in ("ready", "failed"):
            return "warmup"     # the warm-up request's batch line (SGLang: srt/entrypoints/http_server.py)
        if _ENDS.search(body):
            self.changes += 1
        return None

    def enter(self, phase: str, at: Optional[float] = None) -> None:
        """Put the start-up in ``phase`` (one of :data:`PHASES`) as of ``at`` (epoch seconds or None):
        what a line does, and what a caller does that knows more than the log (the server answered
        a generation: ``"ready"``). ``failed`` is final; after ``ready`` only ``failed`` counts. A
        phase already entered is not entered again: with several ranks the furthest one sets the
        phase, and a slower rank's line (TP1 still allocating its KV cache while TP0 captures) does
        not send it back."""
        p = self.progress
        if p.phase == "failed" or p.phase == phase:
            return
        if p.phase == "ready" and phase != "failed":
            return
        if phase in self._seen_phases and phase != "failed":
            return
        p.phase = phase
        self.changes += 1
        if phase not in self._seen_phases:
            self._seen_phases.add(phase)
            p.phases.append({"name": phase, "at": at})
        if self.on_phase is not None:
            self.on_phase(p)


def startup_progress(lines: Iterable[str], *, year: Optional[int] = None) -> StartupProgress:
    """Read a server's start-up from its log lines (module doc: phases, prefixes, sources).

    ``lines``: str lines (newlines optional; a line may hold several tqdm updates separated by
    ``\\r``), SGLang or vLLM, any rank prefix. ``year``: for vLLM's year-less timestamps. Pure:
    returns a new :class:`StartupProgress`; raises nothing for text it does not know (such lines
    only become ``last_line``)."""
    t = StartupTracker(year=year)
    for line in lines:
        t.feed(line if line.endswith(("\n", "\r")) else line + "\n")
    return t.flush()
