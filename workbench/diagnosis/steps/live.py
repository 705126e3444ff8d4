"""Live evidence: what the server serving now already shows, read without a restart (issue 28:
evidence first from the running server, so a cause is confirmed before any load is spent).

- ``/server_info`` (SGLang 0.5.23 ``srt/entrypoints/http_server.py`` ``server_info``: every
  resolved server arg): the resolved speculative algorithm, the attention backends, the draft;
- ``/metrics`` when the server runs with ``--enable-metrics`` (``sglang:spec_accept_length``, a
  gauge of SGLang 0.5.23 ``srt/metrics/collector.py``; a 404 otherwise, said);
- the server's log: the accept length of its last decode lines;
- the code-path map (:mod:`workbench.engine.codepath`): which widths reach the draft's ``fc`` for
  the flags as served — the target's aux hidden-state capture is set up only inside the
  ``is_eagle3()`` gate (``aux-capture-gate``), so a server whose resolved algorithm is not
  ``EAGLE3`` feeds the draft the target's hidden-size state and never fc's width;
- opt-in stack dumps of the server's processes with ``py-spy dump`` (``stack_dumps``; a missing
  binary or no ptrace permission is a note, never a failure).

On a vLLM server (no ``/server_info``), its own evidence instead (:func:`vllm_live`): the Prometheus
counters since it started (vLLM 0.32.0 ``v1/spec_decode/metrics.py`` ``SpecDecodingProm``: drafts,
accepted and proposed draft tokens, and the per-position counters
``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="k"}``: P(k-th draft token accepted)),
the last ``SpecDecoding metrics`` line of its log (:mod:`workbench.logs.vllm_log`, every wording), and
whether it runs with ``--per-request-spec-decode-metrics`` (vLLM 0.32.0 ``config/observability.py``:
``summary`` / ``detailed`` add ``metrics.speculative_decoding`` to each response — the acceptance
histogram, and with ``detailed`` the accepted / proposed drafts of every verify step — which the
measurement reads, :func:`workbench.measure.vllm.record_from_vllm_completion`; nothing in the log).

Reads ``ctx.inventory`` (base URL, launch, engine root, the server's environment), the static
evidence (the draft's fc width, the target's hidden size); adds ``ctx.state.live`` and ledger
evidence of kind ``live``. Changes nothing on the box.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from remote.errors import RemoteError
from workbench.diagnosis.context import RunContext
from workbench.diagnosis.results import StepResult
from workbench.diagnosis.steps.probe import code_path, engine_kind
from workbench.diagnosis.steps.readings import expected_width, target_hidden
from workbench.measure.generate import auth_headers

__all__ = ["LIVE_TIMEOUT_S", "SERVER_INFO_KEYS", "live_evidence", "spec_accept_length", "fc_widths_as_served",
           "stack_dumps", "vllm_live", "PER_REQUEST_FLAG"]

#: vLLM's flag for per-request acceptance in each response (vLLM 0.32.0 ``engine/arg_utils.py``;
#: ``none`` / ``summary`` / ``detailed``, default ``none``).
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"

#: Seconds each live read may take (one HTTP request, one command on the box).
LIVE_TIMEOUT_S = 10.0
#: The ``/server_info`` keys kept as live evidence: SGLang 0.5.23 ``srt/server_args.py`` field
#: names (those a release lacks are simply absent).
SERVER_INFO_KEYS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
                    "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_token_map",
                    "attention_backend", "prefill_attention_backend", "decode_attention_backend",
                    "speculative_attention_mode", "enable_metrics", "tp_size", "dp_size")
_METRIC = re.compile(r"^sglang:spec_accept_length(?:\{[^}]*\})?\s+(?P<v>[-+0-9.eE]+|NaN)\s*$", re.M)


def spec_accept_length(metrics_text: str) -> float | None:
    """The ``sglang:spec_accept_length`` gauge of a ``/metrics`` body (Prometheus text format;
    the mean over its samples when several label sets report one); ``None`` when absent."""
    values = [float(m.group("v")) for m in _METRIC.finditer(metrics_text) if m.group("v") != "NaN"]
    return round(sum(values) / len(values), 4) if values else None


def fc_widths_as_served(cmap, algorithm: str | None, *, hidden: int | None, fc_in: int | None) -> dict[str, Any] | None:
    """The widths the draft's ``fc`` input sees on a server running ``algorithm``, by the code-path
    map: ``{"widths": [...], "capture": bool, "words": ..., "where": file:line}``; ``None`` when
    the map has no ``aux-capture-gate`` (another engine, a release without it) or a width is
    unknown. With the capture gated on ``is_eagle3()`` (SGLang 0.5.23
    ``model_runner_components/spec_aux_hidden_state.py``) and an algorithm other than ``EAGLE3``,
    no aux state is captured: the draft gets the target's ``hidden``-wide state, never ``fc_in``."""
    if cmap is None or algorithm is None or hidden is None or fc_in is None:
        return None
    entries = {e.key: e for e in getattr(cmap, "entries", [])}
    gate = entries.get("aux-capture-gate")
    if gate is None or not gate.found or "is_eagle3" not in (gate.code or ""):
        return None
    capture = algorithm.upper() == "EAGLE3"
    where = gate.location if hasattr(gate, "location") else f"{gate.file}:{gate.line}"
    if capture:
        words = f"with {algorithm} the aux capture is set up ({where}): fc receives its {fc_in}-wide input"
    else:
        words = (f"with {algorithm} the aux capture is never set up (only inside `{gate.code.strip()}`, {where}): "
                 f"the draft's forward gets the target's {hidden}-wide hidden state, never fc's {fc_in}, so the "
                 "width check skips fc")
    return {"widths": [fc_in] if capture else [hidden], "capture": capture, "words": words, "where": where}


def stack_dumps(box, pid: int, *, max_lines: int = 40) -> dict[str, Any]:
    """``py-spy dump --pid P`` of every process of the server's tree (``Box.process_tree``):
    ``{"dumps": [{"pid", "title", "lines"}], "note": ...}``, each dump cut to ``max_lines``. A box
    without ``py-spy`` on PATH, or where ptrace is not permitted (another user's process, a
    container without ``SYS_PTRACE``), gives a note naming why, never an error. ``box``: a
    ``remote.Box``; ``pid``: the server's (its launcher's) pid."""
    try:
        found = box.run(["bash", "-c", "command -v py-spy"], timeout=LIVE_TIMEOUT_S, check=False)
        tree = box.process_tree(pid, timeout=LIVE_TIMEOUT_S)
    except RemoteError as exc:
        return {"dumps": [], "note": f"no stack dumps: the box could not be asked ({exc})"}
    if found.exit_code != 0 or not found.stdout.strip():
        return {"dumps": [], "note": "no stack dumps: py-spy is not installed on the box (`command -v py-spy` "
                                     "found none; `pip install py-spy` puts it there)"}
    spy = found.stdout.strip().splitlines()[0]
    dumps, failed = [], []
    for proc in tree:
        try:
            res = box.run([spy, "dump", "--pid", str(proc.pid)], timeout=30, check=False)
        except RemoteError as exc:
            failed.append(f"pid {proc.pid}: {exc}")
            continue
        if res.exit_code != 0:
            why = (res.stderr or res.stdout).strip().splitlines()
            failed.append(f"pid {proc.pid}: {why[-1] if why else f'exit {res.exit_code}'}")
            continue
        dumps.append({"pid": proc.pid, "title": " ".join(proc.argv)[:120] if proc.argv else None,
                      "lines": res.stdout.splitlines()[:max_lines]})
    note = None
    if failed:
        perm = any("ermission" in f or "ptrace" in f.lower() for f in failed)
        note = ("py-spy could not dump " + "; ".join(failed[:4]) +
                (" (ptrace not permitted: run as the server's user, or give the container SYS_PTRACE)" if perm else ""))
    return {"dumps": dumps, "note": note}


def _get(ctx: RunContext, path: str) -> httpx.Response | None:
    launch = ctx.inventory.launch
    key = launch.get("--api-key") if launch is not None else None
    try:
        with httpx.Client(timeout=LIVE_TIMEOUT_S, trust_env=False,
                          headers=auth_headers(key if isinstance(key, str) else None)) as client:
            return client.get(ctx.inventory.base_url + path)
    except httpx.HTTPError as exc:
        ctx.state.live.setdefault("unread", []).append(f"{path}: {type(exc).__name__}: {exc}")
        return None


def live_evidence(ctx: RunContext, *, stack_dumps_on: bool = False) -> StepResult | None:
    """Read what the server serving now shows, no restart: ``/server_info``, ``/metrics``, the
    last decode lines of its log, the code-path map for its resolved flags, and with
    ``stack_dumps_on`` its processes' stacks (:func:`stack_dumps`). Fills ``ctx.state.live``
    (``server_info``, ``spec_accept_length`` or ``metrics`` off, ``log_accept_length``,
    ``fc_widths_as_found`` / ``fc_widths_words`` / ``fc_widths_source``, ``stack_dumps``) and adds
    evidence of kind ``live`` to ``algorithm-flag`` (the resolved algorithm and what it sends to
    fc). ``None`` (with ``ctx.state.live["skipped"]``) when nothing serves the port."""
    session, live = ctx.session, ctx.state.live
    original = session.journal.data.get("original_server")
    if session.current is None and not (original and not original.get("stopped")):
        live["skipped"] = "no server serves the port: nothing to read live"
        return None
    sglang = engine_kind(ctx) == "sglang"
    info: dict[str, Any] = {}
    if sglang:
        resp = _get(ctx, "/server_info")
        if resp is not None and resp.status_code == 200:
            body = resp.json() if "json" in resp.headers.get("content-type", "") else {}
            info = {k: body[k] for k in SERVER_INFO_KEYS if isinstance(body, dict) and k in body}
        live["server_info"] = info or None
        env = ctx.inventory.server_env or {}
        live["spec_v2"] = env.get("SGLANG_ENABLE_SPEC_V2")
        resp = _get(ctx, "/metrics")
        if resp is not None and resp.status_code == 200:
            live["spec_accept_length"] = spec_accept_length(resp.text)
        elif resp is not None:
            live["metrics"] = f"/metrics answered {resp.status_code}: the server runs without --enable-metrics"
    log_path = session.current.log_path if session.current is not None else ctx.inventory.server_log
    if not sglang:
        vllm_live(ctx, log_path)
    elif log_path:
        from workbench.logs.lines import parse_log

        try:
            tail = ctx.box.tail(log_path, 200, timeout=LIVE_TIMEOUT_S)
            decodes = [r for r in parse_log(tail).decode if r.accept_len is not None]
            if decodes:
                live["log_accept_length"] = decodes[-1].accept_len
        except (RemoteError, AttributeError) as exc:
            live.setdefault("unread", []).append(f"the log {log_path}: {exc}")
    algorithm = info.get("speculative_algorithm")
    if algorithm is None and ctx.inventory.launch is not None:
        flag = ctx.inventory.launch.get("--speculative-algorithm")
        algorithm = flag if isinstance(flag, str) else None
    cmap = code_path(ctx) if sglang else None
    widths = fc_widths_as_served(cmap, algorithm, hidden=target_hidden(ctx), fc_in=expected_width(ctx))
    if widths is not None:
        source = ("/server_info speculative_algorithm" if "speculative_algorithm" in info else "the launch command")
        live.update(fc_widths_as_found=widths["widths"], fc_widths_words=widths["words"],
                    fc_widths_source=f"{source} {algorithm} + the code-path map ({widths['where']})")
        summary = f"live: {source} {algorithm}; {widths['words']}"
        ctx.add_evidence("algorithm-flag", summary, {"speculative_algorithm": algorithm, **widths,
                                                     "server_info": info or None}, kind="live")
    if stack_dumps_on:
        pid = session.current.pid if session.current is not None else ctx.inventory.server_pid
        live["stack_dumps"] = stack_dumps(ctx.box, pid) if pid else {"dumps": [], "note": "no server pid known"}
        if live["stack_dumps"].get("note"):
            ctx.notes.append(live["stack_dumps"]["note"])
    shown = {k: live.get(k) for k in ("server_info", "spec_accept_length", "log_accept_length", "fc_widths_as_found",
                                      "counters_accept_length", "per_position_acceptance", "log_per_position",
                                      "per_request_spec_decode_metrics")
             if live.get(k) is not None}
    return StepResult("live", "done", "; ".join(f"{k}: {v}" for k, v in shown.items()) or "nothing read", data=shown)


def vllm_live(ctx: RunContext, log_path: str | None) -> None:
    """vLLM's own live evidence into ``ctx.state.live`` (module docstring): ``vllm_counters`` (the
    lifetime :class:`workbench.measure.vllm.SpecCounters` as a dict), ``counters_accept_length``
    and ``per_position_acceptance`` (when it drafted at all), or ``metrics`` (why not); from the log
    ``log_accept_length`` / ``log_per_position`` / ``log_line`` (its last metrics line, the interval
    it covers); ``per_request_spec_decode_metrics`` (the flag's value, ``none`` when not given).
    With counters, evidence of kind ``live`` for ``aux-cross-engine-convention`` (the fault whose
    symptom on vLLM is low per-position acceptance) when the ledger has it. Reads only; what cannot
    be read goes to ``live["unread"]``."""
    from workbench.measure.sources import parse_metrics
    from workbench.measure.vllm import M_DRAFTS, spec_counters

    live = ctx.state.live
    launch = ctx.inventory.launch
    level = launch.get(PER_REQUEST_FLAG) if launch is not None else None
    live["per_request_spec_decode_metrics"] = level if isinstance(level, str) else "none"
    resp = _get(ctx, "/metrics")
    counts = None
    if resp is not None and resp.status_code == 200:
        try:
            counts = spec_counters(parse_metrics(resp.text))
        except ValueError as exc:
            live.setdefault("unread", []).append(f"/metrics: not Prometheus text ({exc})")
        if counts is None:
            live["metrics"] = f"vLLM's /metrics declares no {M_DRAFTS}: speculative decoding is off on this server"
        else:
            live["vllm_counters"] = counts.to_dict()
            if counts.drafts:
                live["counters_accept_length"] = round(counts.accept_length, 4)
                live["per_position_acceptance"] = [round(p, 4) for p in counts.per_position]
            else:
                live["metrics"] = "no verify step with draft tokens yet: vLLM's counters are all zero"
    elif resp is not None:
        live["metrics"] = f"/metrics answered {resp.status_code}"
    if log_path:
        from workbench.logs.vllm_log import parse_spec_decoding_line

        try:
            tail = ctx.box.tail(log_path, 200, timeout=LIVE_TIMEOUT_S)
        except (RemoteError, AttributeError) as exc:
            live.setdefault("unread", []).append(f"the log {log_path}: {exc}")
            tail = []
        lines = [rec for rec in (parse_spec_decoding_line(ln) for ln in tail if "metrics:" in ln) if rec is not None]
        if lines:
            last = lines[-1]
            live.update(log_accept_length=last.mean_acceptance_length, log_per_position=last.per_position,
                        log_line=last.line)
    if counts is not None and counts.drafts and "aux-cross-engine-convention" in ctx.ledger:
        pos = ", ".join(f"{p:.3f}" for p in counts.per_position)
        ctx.add_evidence("aux-cross-engine-convention",
                         f"live: vLLM's counters since the server started: {counts.accepted} of {counts.draft_tokens} "
                         f"draft tokens accepted over {counts.drafts} verify steps (accept length "
                         f"{counts.accept_length:.3f}; per position {pos})", counts.to_dict(), kind="live")
