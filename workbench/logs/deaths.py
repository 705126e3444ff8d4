"""Why a server died while it started: the engine's own error line(s) at its death, the start-up step
it died in, the rank that logged it, and the known death it is (:mod:`workbench.logs.death_signatures`).

:func:`read_death` reads a server's log lines (SGLang or vLLM, any release's wording, any rank
prefix: :mod:`workbench.logs.startup`) and returns a :class:`Death`, or None when no line says
why the process ended. What it reads:

- **Tracebacks.** SGLang logs one through its logger (``Scheduler hit an exception: Traceback
  (most recent call last):`` on a prefixed line, the frames unprefixed after it; SGLang 0.5.23
  ``srt/managers/scheduler.py:6369-6373``, each rank its own at TP > 1); vLLM 0.32.0 prefixes every
  line of it (``(Worker_TP0 pid=9) ERROR 12-07 10:00:00 [multiproc_executor.py:772] Traceback
  ...``), and a process that dies outside the logger (the API server, an offline ``LLM``) prints
  it bare. A traceback's **final exception** is its last ``Type: message`` line with the lines
  that continue it (a pydantic ``ValidationError``'s field and reason, a huggingface_hub
  validation error's cause); chained exceptions above it are kept as ``chain``.
- **Which traceback.** Several processes report one death: vLLM's worker (the cause), then
  ``EngineCore failed to start`` (``Exception: WorkerProc initialization failed ... See stack
  trace for root cause``), then the API server (``RuntimeError: Engine core initialization
  failed. See root cause above``); SGLang's ranks each log theirs. The first traceback whose
  final exception is no such pointer to another is the death; the others are ``others``.
- **The step.** The start-up phase (:data:`workbench.logs.startup.PHASES`) the log was in when the
  traceback began, refined by the traceback's own frames: a frame that loads weights or reads a
  config is the load (``load`` or ``load-draft``, as the log's phase says), one that captures CUDA
  graphs is the capture, and a forward outside both once the models are loaded (SGLang's warm-up
  request, vLLM's ``profile_run`` / ``_dummy_run`` / ``compile_or_warm_up_model``) is ``warmup``:
  the first forward, whatever the last start-up line was.
- **No traceback.** A server that ends with an exception line but no traceback (argparse's
  ``error:``, a bare ``RuntimeError: ...``) is read from that line; the step is the log's phase.

Pure (str lines in, values out; raises nothing for text it does not know), except
:func:`read_death_from_box`, which reads a log's last :data:`DEATH_WINDOW` bytes from a box first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

from workbench.logs.death_signatures import Signature, match_signature
from workbench.logs.startup import StartupTracker

__all__ = ["Death", "read_death", "read_death_from_box", "attribute", "MAX_EXCEPTION_LINES", "DEATH_WINDOW"]

#: Bytes read from a log's end for its death: the traceback and the start-up lines before it; the
#: cost does not depend on the log's size or its lines' length.
DEATH_WINDOW = 2 << 20

#: Continuation lines kept after a final exception's ``Type: message`` line.
MAX_EXCEPTION_LINES = 6

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SGL_PREFIX = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d{3})?(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] ")
_VLLM_PREFIX = re.compile(
    r"(?:\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]]*\] |\S+\] )")
_VLLM_PROC = re.compile(r"\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\) ")
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*)?(?:Error|Exception|Exit|Interrupt|Failure|Warning"
                  r"|KeyError|StopIteration))(?::\s?(?P<msg>.*))?$")
_CHAIN = ("The above exception was the direct cause of the following exception:",
          "During handling of the above exception, another exception occurred:")
# a final exception that only points at another process's traceback (vLLM 0.32.0
# v1/engine/core.py, v1/engine/utils.py:1432, v1/executor/multiproc_executor.py; SGLang's launcher)
_POINTER = re.compile(r"See (?:root cause|stack trace)|check the stack trace above|Engine core initialization failed"
                      r"|EngineDeadError|WorkerProc initialization failed|Rank \d+ scheduler is dead"
                      r"|^(?:KeyboardInterrupt|SystemExit)\b")
# the traceback's frames that say which step it died in
_LOAD_FRAME = re.compile(r"load_weights|load_model|weight_loader|get_model|_initialize_model|initialize_model"
                         r"|safetensors_weights_iterator|safe_open|_load_draft|load_drafter")
# frames that read a config (the engine's argument checks at launch, or a model's config while it loads)
_CONFIG_FRAME = re.compile(r"get_config|get_llama_config|from_pretrained|get_hf_config|create_engine_config"
                           r"|^validate|__post_init__|_verify_args")
# a frame of the speculative side: the draft's load, not the target's
_DRAFT_FILE = re.compile(r"spec_decode|speculative|eagle|draft")
_CAPTURE_FRAME = re.compile(r"capture|cuda_graph|CudaGraph")
_FORWARD_FRAME = re.compile(r"forward|generate|prefill|decode|run_batch|event_loop|execute_model|_dummy_run"
                            r"|profile_run|warm_up|warmup|_execute_server_warmup|sample")
_LOADED = ("load", "load-draft", "kv-cache", "capture", "capture-draft", "warmup")
# an argparse refusal / a shell's missing program: why a process ended, with no traceback
_OTHER_END = re.compile(r": error: |^error: |No such file or directory$|command not found$|: not found$"
                        r"|Permission denied$")


@dataclass
class Death:
    """A server's death at start-up, read from its log.

    ``exception``: the final exception as the engine wrote it (``Type: message`` and up to
    :data:`MAX_EXCEPTION_LINES` continuation lines joined by ``" | "``); ``exc_type`` (as printed,
    e.g. ``RuntimeError``, ``pydantic_core._pydantic_core.ValidationError``) and ``message``;
    ``step``: the start-up phase it died in (:data:`workbench.logs.startup.PHASES`, refined by the
    frames: module doc); ``log_phase``: the phase the log's lines alone had reached; ``rank``: the
    rank tag or vLLM process that logged it (``"TP1"``, ``"Worker_TP0"``; None at TP 1 or for a
    bare traceback); ``where``: the innermost frame outside torch / the standard library
    (``"forward (srt/models/llama_eagle3.py:281)"``) or None; ``frames``: every frame as
    ``"function file:line"``; ``chain``: the chained exceptions above the final one (first to
    last); ``signature``: the known death (:class:`~workbench.logs.death_signatures.Signature`)
    or None; ``others``: the other tracebacks' final exceptions (deduplicated); ``line``: the
    index (0-based) of the line the traceback or exception began on; ``engine``: ``"sglang"``,
    ``"vllm"`` or None (no prefixed line)."""

    exception: str
    exc_type: str
    message: str
    step: str
    log_phase: str
    rank: Optional[str] = None
    where: Optional[str] = None
    frames: list = field(default_factory=list)
    chain: list = field(default_factory=list)
    signature: Optional[Signature] = None
    others: list = field(default_factory=list)
    line: int = 0
    engine: Optional[str] = None

    @property
    def rules(self) -> tuple:
        """The rule ids the signature maps the death to (empty: unknown death, or no rule models it)."""
        return self.signature.rules if self.signature is not None else ()

    def describe(self) -> str:
        """One line: ``"died in warmup (TP0): RuntimeError: mat1 and mat2 ...; a known death:
        matmul-shape (an activation of another width ...)"``."""
        who = f" ({self.rank})" if self.rank else ""
        text = f"died in {self.step}{who}: {self.exception}"
        if self.where:
            text += f" [at {self.where}]"
        if self.signature is not None:
            text += f"; a known death: {self.signature.id} ({self.signature.fault})"
        return text

    def to_dict(self) -> dict:
        """JSON-ready: the fields above, ``signature`` as ``{"id", "fault", "rules", "sources"}`` or None."""
        sig = self.signature
        return {"exception": self.exception, "exc_type": self.exc_type, "message": self.message, "step": self.step,
                "log_phase": self.log_phase, "rank": self.rank, "where": self.where, "frames": list(self.frames),
                "chain": list(self.chain), "others": list(self.others), "line": self.line, "engine": self.engine,
                "signature": None if sig is None else {"id": sig.id, "fault": sig.fault, "rules": list(sig.rules),
                                                       "sources": list(sig.sources)}}


@dataclass
class _Block:
    start: int
    phase: str
    rank: Optional[str]
    proc: Optional[str]
    lines: list = field(default_factory=list)
    closed: bool = False


def _split(line: str) -> tuple:
    """(kind, rank, proc, body): kind ``"sglang"``, ``"vllm"``, ``"proc"`` (vLLM process tag
    only) or ``""`` (no prefix)."""
    m = _SGL_PREFIX.search(line)
    if m is not None and m.start() < 200:
        return "sglang", m.group("tags").strip() or None, None, line[m.end():]
    m = _VLLM_PREFIX.search(line)
    if m is not None and m.start() < 200:
        proc = m.group("proc")
        return "vllm", proc, proc, line[m.end():]
    m = _VLLM_PROC.match(line)
    if m is not None:
        return "proc", m.group("proc"), m.group("proc"), line[m.end():]
    return "", None, None, line


def read_death(lines: Iterable[str], *, engine: Optional[str] = None) -> Optional[Death]:
    """The death a server's log shows (module doc), None when no line says why it ended.

    ``lines``: the log's lines (str, newlines optional, an item holding several is split; a start-up log from its first line gives
    the step, a tail gives the exception and the frames with the step as far as the tail shows);
    ``engine``: ``"sglang"``, ``"vllm"``, ``"sandbox"`` or None (read from the prefixes), used to
    pick the signature table's wordings."""
    tracker = StartupTracker()
    blocks: list[_Block] = []
    current: Optional[_Block] = None
    plain: list[tuple] = []        # (index, phase, rank, body) of every line, for a death without traceback
    pieces = (piece for raw in lines for piece in raw.rstrip("\r\n").split("\n"))  # an item may hold several
    for i, raw in enumerate(pieces):
        line = _ANSI.sub("", raw.rstrip("\r"))
        kind, rank, proc, body = _split(line)
        phase_before = tracker.progress.phase
        if _TRACEBACK in body and current is not None and not current.closed and _chained(current, kind, proc):
            current.lines.append(body.rstrip())       # the next exception of a chain: one traceback
            continue
        if _TRACEBACK in body:
            if current is not None:
                current.closed = True
            phase = phase_before if phase_before != "failed" else _last_phase(tracker)
            current = _Block(i, phase, rank, proc)
            blocks.append(current)
            head = body.split(_TRACEBACK, 1)[0].strip()
            if head:
                plain.append((i, phase, rank, head))
            tracker.feed(line + "\n")
            continue
        if current is not None and not current.closed:
            if kind == "sglang" or (kind in ("vllm", "proc") and proc != current.proc):
                current.closed = True           # a new log line: the traceback ended
            elif kind == "" and current.proc is not None and body.strip():
                current.closed = True           # vLLM's traceback lines are all prefixed
            else:
                current.lines.append(body.rstrip())
                continue
        tracker.feed(line + "\n")
        if body.strip():
            plain.append((i, tracker.progress.phase if tracker.progress.phase != "failed" else _last_phase(tracker),
                          rank, body.strip()))
    eng = engine or tracker.progress.engine
    deaths = [d for d in (_from_block(b, eng) for b in blocks) if d is not None]
    if deaths:
        first = next((d for d in deaths if not _POINTER.search(d.exception)), deaths[0])
        seen = {first.exception}
        for d in deaths:
            if d.exception not in seen:
                seen.add(d.exception)
                first.others.append(d.exception)
        first.engine = tracker.progress.engine
        return first
    return _without_traceback(plain, eng, tracker.progress.engine)


def _chained(block: _Block, kind: str, proc: Optional[str]) -> bool:
    """Whether a ``Traceback`` line continues ``block`` (its last text line is a chain separator,
    from the same process)."""
    last = next((t.strip() for t in reversed(block.lines) if t.strip()), "")
    return last in _CHAIN and (proc == block.proc or kind == "")


def read_death_from_box(box, path: str, *, timeout: float = 30.0, engine: Optional[str] = None,
                        size: Optional[int] = None) -> Optional[Death]:
    """:func:`read_death` of the last :data:`DEATH_WINDOW` bytes of ``path`` on ``box`` (a
    :class:`remote.Box`: ``stat``, ``read_bytes``; ``size``: the file's size when known), the first
    partial line dropped; each box call bounded by ``timeout`` seconds. Raises what the box raises
    (a missing file, a time-out)."""
    end = box.stat(path, timeout=timeout).size if size is None else size
    start = max(0, end - DEATH_WINDOW)
    data = box.read_bytes(path, start, end - start, timeout=timeout) if end > start else b""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if start > 0 and lines:
        lines = lines[1:]
    return read_death(lines, engine=engine)


def _last_phase(tracker: StartupTracker) -> str:
    """The phase before ``failed`` (the step a failure line interrupted)."""
    names = [p["name"] for p in tracker.progress.phases if p["name"] != "failed"]
    return names[-1] if names else "launch"


def _from_block(block: _Block, engine: Optional[str]) -> Optional[Death]:
    body = [b for b in block.lines]
    frames, exc_at = [], []
    for j, text in enumerate(body):
        m = _FRAME.match(text)
        if m is not None:
            frames.append((m.group("func"), m.group("file"), int(m.group("line"))))
            continue
        if text and not text[0].isspace() and _EXC.match(text.strip()) and text.strip() not in _CHAIN:
            exc_at.append(j)
    if not exc_at:
        return None
    last = exc_at[-1]
    head = _EXC.match(body[last].strip())
    more = [t.strip() for t in body[last + 1:] if t.strip()][:MAX_EXCEPTION_LINES]
    exception = " | ".join([body[last].strip()] + more)
    chain = [body[j].strip() for j in exc_at[:-1] if not _FRAME.match(body[j])]
    # frames of the final exception only (after the last chain separator)
    cut = max((j for j, t in enumerate(body) if t.strip() in _CHAIN), default=-1)
    final_frames = [f for f, j in zip(frames, [j for j, t in enumerate(body) if _FRAME.match(t)]) if j > cut]
    frame_text = [f"{fn} {fl}:{ln}" for fn, fl, ln in final_frames]
    all_frames = [f"{fn} {fl}:{ln}" for fn, fl, ln in frames]
    text_for_match = "\n".join([body[last].strip()] + more)
    sig = match_signature(text_for_match, all_frames, engine)
    if sig is None:
        for c in reversed(chain):  # the cause of a wrapper (an exception raised from another)
            sig = match_signature(c, all_frames, engine)
            if sig is not None:
                break
    return Death(exception=exception, exc_type=head.group("type"), message=(head.group("msg") or "").strip(),
                 step=_step(block.phase, frame_text or all_frames), log_phase=block.phase, rank=block.rank,
                 where=_where(final_frames or frames), frames=all_frames, chain=chain, signature=sig,
                 line=block.start)


def _step(phase: str, frames: list) -> str:
    """The step a traceback died in: the log's ``phase`` refined by its ``frames`` (``"function
    file:line"``, module doc). A weight-loading frame is the load (``load-draft`` when a frame of
    the speculative side — vLLM's ``spec_decode/``, SGLang's ``speculative/eagle_worker.py`` — is
    on the stack, or when the log's phase says so); a config read is the phase the log was in
    (vLLM reads the draft's config at launch, SGLang while loading the draft); a CUDA graph
    capture frame is the capture; a forward once the models are loaded is ``warmup``."""
    funcs = [f.split(" ", 1)[0] for f in frames]
    draft = any(_DRAFT_FILE.search(f.split(" ", 1)[-1]) for f in frames)
    if any(_LOAD_FRAME.search(fn) for fn in funcs) or any("model_loader" in f for f in frames):
        if phase == "load-draft" or draft:
            return "load-draft"
        return phase if phase == "load" else ("load-draft" if phase in _LOADED[2:] else "load")
    if any(_CONFIG_FRAME.search(fn) for fn in funcs):
        return phase
    if any(_CAPTURE_FRAME.search(f) for f in frames):
        return phase if phase in ("capture", "capture-draft") else "capture"
    if any(_FORWARD_FRAME.search(fn) for fn in funcs) and phase in _LOADED:
        return "warmup"
    return phase


_LIB = re.compile(r"/(?:torch|transformers|huggingface_hub|pydantic|pydantic_core|safetensors)/|^<"
                  r"|/lib/python3\.\d+/(?!site-packages/)")


def _where(frames: list) -> Optional[str]:
    """The innermost frame outside torch and the libraries: ``"func (path tail:line)"``."""
    for fn, fl, ln in reversed(frames):
        if not _LIB.search(fl):
            parts = fl.replace("\\", "/").split("/")
            tail = "/".join(parts[-3:]) if len(parts) >= 3 else fl
            return f"{fn} ({tail}:{ln})"
    return None


def _without_traceback(plain: list, engine: Optional[str], seen_engine: Optional[str]) -> Optional[Death]:
    """The last exception line (else an argparse / shell refusal) of a log with no traceback."""
    for i, phase, rank, body in reversed(plain):
        m = _EXC.match(body)
        if m is not None:
            return Death(exception=body, exc_type=m.group("type"), message=(m.group("msg") or "").strip(), step=phase,
                         log_phase=phase, rank=rank, signature=match_signature(body, [], engine), line=i,
                         engine=seen_engine)
    for i, phase, rank, body in reversed(plain):
        if _OTHER_END.search(body):
            return Death(exception=body, exc_type="", message=body, step=phase, log_phase=phase, rank=rank,
                         signature=match_signature(body, [], engine), line=i, engine=seen_engine)
    return None


def attribute(death: Death, found_rules: Iterable[str], predicted: Iterable[str] = ()) -> dict:
    """Which of the doctor's findings explain ``death``: ``{"rules": the death's signature rules that
    the doctor found on this launch (in the signature's order), "candidates": all the signature's
    rules, "explained": bool, "why": one sentence, "predicted": the rules of ``predicted`` the death
    is attributed to}``. ``found_rules``: the rule ids of the doctor's error findings on the launch
    that died; ``predicted``: those of its findings that said the launch would not start
    (``Finding.prevents_start``). A death whose signature's rules the doctor found is explained by
    them; one whose text matches no such rule is still explained when the doctor predicted the
    launch would not start ("the doctor predicted this launch would not start: RULE; the engine's
    line: ..."). Unexplained ("a start-up death the rules do not explain", with the engine's line
    and the step) only when neither holds."""
    found = set(found_rules)
    said = list(dict.fromkeys(predicted))
    candidates = list(death.rules)
    hit = [r for r in candidates if r in found]
    where = f" in {death.step}" + (f" ({death.rank})" if death.rank else "")
    if hit:
        why = (f"the server died{where} with the engine's own line {death.exception!r}: a known death "
               f"({death.signature.id}: {death.signature.fault}) that {', '.join(hit)} predicted")
        return {"rules": hit, "candidates": candidates, "explained": True, "why": why,
                "predicted": [r for r in hit if r in said]}
    if death.signature is None:
        kind = "no known death has that text"
    elif not candidates:
        kind = f"a known death ({death.signature.id}: {death.signature.fault}) that no rule models"
    else:
        kind = (f"a known death ({death.signature.id}: {death.signature.fault}) whose rules "
                f"({', '.join(candidates)}) found nothing on this launch")
    if said:
        why = (f"the doctor predicted this launch would not start: {', '.join(said)}; the engine's line{where}: "
               f"{death.exception!r} ({kind})")
        return {"rules": said, "candidates": candidates, "explained": True, "why": why, "predicted": said}
    why = (f"a start-up death the rules do not explain: the server died{where} with the engine's own line "
           f"{death.exception!r}; {kind}")
    return {"rules": [], "candidates": candidates, "explained": False, "why": why, "predicted": []}
