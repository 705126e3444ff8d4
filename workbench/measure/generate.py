"""Acceptance measurement: accept length and accept rate, exactly as SGLang defines them.

Definitions (SGLang 0.5.23, ``srt/managers/tokenizer_manager.py`` for ``/generate``'s
``meta_info``, ``srt/managers/scheduler_components/metrics_reporter.py`` for the decode log):

- **accept length** = tokens per verify step, bonus token included:
  ``completion_tokens / spec_verify_ct``. Over several requests this module sums first:
  ``Σ completion_tokens / Σ spec_verify_ct``.
- **accept rate** = correct drafts / proposed drafts, proposed = ``spec_verify_ct ×
  (num_draft_tokens − 1)``. Over several requests: ``Σ spec_num_correct_drafts /
  Σ spec_num_proposed_drafts``; the plain mean of the per-request ``spec_accept_rate`` is kept
  beside it.

The ``meta_info`` names changed across releases (0.4.6 - 0.5.3: ``spec_verify_ct`` only; 0.5.4 -
0.5.5: ``spec_accept_rate`` over ``speculative_num_steps``; 0.5.6 - 0.5.10: ``spec_accept_token_num``
/ ``spec_draft_token_num``; 0.5.12 on: ``spec_num_correct_drafts`` / ``spec_num_proposed_drafts``;
every name with its releases in :mod:`workbench.measure.fields`); :func:`record_from_response`
reads each release's names into the same fields and definitions. A response without
``spec_verify_ct > 0`` means speculative decoding is off or the engine did not report it (0.5.4 -
0.5.6 write ``spec_verify_ct`` 0 with ``spec_accept_length`` 0 then); this module says so
(``speculative=False``, ``accept_length=None``) and never substitutes 1.0 or 0.

This module: :func:`measure_generate` (greedy requests to ``POST /generate``). The other sources
are :mod:`workbench.measure.sources` (the OpenAI endpoints, ``/metrics``, ``/server_info``) and
the server log (:mod:`workbench.logs`).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import httpx

from workbench.errors import AcceptanceError
from workbench.measure.prompts import load_prompts

__all__ = ["AcceptanceError", "RequestRecord", "AcceptanceMeasurement", "measure_generate", "summarize_responses"]

NOT_SPECULATIVE_NOTE = (
    "no response carried spec_verify_ct: speculative decoding is off on this server, or the engine did not "
    "report it (SGLang 0.4.6 - 0.5.3 add only spec_verify_ct, 0.5.4 - 0.5.6 write it as 0 when nothing was "
    "verified, 0.5.7+ add the spec_* meta_info keys only when spec_verify_ct > 0); accept length is unknown, not 1.0"
)

SERVER_INFO_KEYS = (
    "model_path", "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "tp_size", "version",
)


# ---------------------------------------------------------------------------------------------
# /generate
# ---------------------------------------------------------------------------------------------


@dataclass
class RequestRecord:
    """One measured ``/generate`` request (warm-up requests are never recorded).

    ``prompt_index``: index into the prompt list; token counts from ``meta_info``;
    ``spec_verify_ct`` and the other ``spec_*`` values are ``None`` when the response did not
    carry them; ``histogram``: ``spec_correct_drafts_histogram`` (index k = verify steps that
    accepted k drafts; the 0.5.9 - 0.5.20 key ``spec_accept_histogram`` is read too);
    ``spec_num_correct_drafts`` / ``spec_num_proposed_drafts`` / ``spec_accept_rate`` in the
    0.5.12+ sense whatever names the release used (:func:`record_from_response`);
    ``e2e_latency``: the server's seconds; ``wall_s``: seconds measured by this client;
    ``read_from``: field → the ``meta_info`` key (or formula) it was read from (not named ``*keys``:
    the redaction of command output masks such names). ``per_step_accepted``: the draft tokens
    accepted at each verify step, in order (vLLM with ``--per-request-spec-decode-metrics detailed``:
    :func:`workbench.measure.vllm.per_step_acceptance`), ``None`` where the engine does not say.
    """

    prompt_index: int
    completion_tokens: int
    prompt_tokens: int | None
    spec_verify_ct: int | None
    spec_accept_length: float | None
    spec_accept_rate: float | None
    spec_num_correct_drafts: int | None
    spec_num_proposed_drafts: int | None
    histogram: list[int] | None
    e2e_latency: float | None
    wall_s: float
    finish_reason: Any = None
    text: str | None = None
    read_from: dict = field(default_factory=dict)
    per_step_accepted: list[int] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AcceptanceMeasurement:
    """Aggregate of measured requests.

    ``accept_length`` = Σ completion_tokens / Σ spec_verify_ct over the requests that report
    ``spec_verify_ct`` (``None`` when none does); ``accept_rate`` = Σ correct / Σ proposed
    drafts; ``mean_spec_accept_rate``: mean of per-request ``spec_accept_rate``;
    ``verify_steps`` = Σ spec_verify_ct; ``total_tokens`` = Σ completion_tokens (all measured
    requests); ``wall_s``: seconds spent in the measured requests; ``tokens_per_s`` =
    total_tokens / wall_s; ``histogram``: element-wise sum; ``speculative``: at least one
    response reported ``spec_verify_ct``; ``note``: why a value is missing, if one is;
    ``server_info``: the speculative settings ``/server_info`` reported (or ``None``).
    """

    accept_length: float | None
    accept_rate: float | None
    mean_spec_accept_rate: float | None
    verify_steps: int
    total_tokens: int
    wall_s: float
    tokens_per_s: float | None
    speculative: bool
    records: list[RequestRecord]
    histogram: list[int] | None = None
    requests_without_spec: int = 0
    note: str | None = None
    warmup: int = 0
    max_new_tokens: int | None = None
    base_url: str | None = None
    server_info: dict | None = None
    source: str = "/generate"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["records"] = [r.to_dict() for r in self.records]
        return d


def _opt_int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _opt_float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _first_key(meta: dict, keys: Sequence[str], conv: Callable[[Any], Any]) -> tuple[Any, str | None]:
    """The first of ``keys`` present in ``meta`` with a usable value (after ``conv``) and its name."""
    for k in keys:
        v = conv(meta.get(k))
        if v is not None:
            return v, k
    return None, None


#: meta_info keys per field, newest name first (:data:`workbench.measure.fields.META_INFO_KEYS`
#: gives each key's releases).
CORRECT_DRAFT_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
PROPOSED_DRAFT_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def record_from_response(prompt_index: int, body: Any, wall_s: float, *, url: str = "/generate",
                         num_steps: int | None = None, num_draft_tokens: int | None = None) -> RequestRecord:
    """Turn one ``/generate`` JSON response into a :class:`RequestRecord`, whatever the release's
    ``meta_info`` names (:mod:`workbench.measure.fields`): correct drafts from
    ``spec_num_correct_drafts`` (0.5.12+), ``spec_accepted_drafts`` (its 0.5.12 - 0.5.20 alias) or
    ``spec_accept_token_num`` (0.5.6 - 0.5.10); proposed drafts from ``spec_num_proposed_drafts`` /
    ``spec_proposed_drafts`` / ``spec_draft_token_num``; the histogram from
    ``spec_correct_drafts_histogram`` or ``spec_accept_histogram`` (0.5.9 - 0.5.20).

    A ``spec_verify_ct`` of 0 (0.5.4 - 0.5.6 write it, with ``spec_accept_length`` 0 and
    ``spec_accept_rate`` 0.0, for every finished request) leaves every spec field ``None``: not
    measured, never an accept length of 0 or 1. 0.5.4 - 0.5.5 give no counts, only
    ``spec_accept_rate`` = correct / (verify × ``speculative_num_steps``): with ``num_steps`` (the
    server's ``speculative_num_steps``) the correct drafts are recovered from it (rounded to the
    nearest count), and with ``num_draft_tokens`` (D) the proposed drafts = verify × (D − 1) and the
    rate restated as correct / proposed. ``read_from`` of the record names the key each value came
    from. Raises :class:`AcceptanceError` when ``meta_info.completion_tokens`` is missing.
    """
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    meta = body.get("meta_info") if isinstance(body, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("completion_tokens"), int):
        raise AcceptanceError(f"{url}: response has no meta_info.completion_tokens: {str(body)[:300]}")
    verify = _opt_int(meta.get("spec_verify_ct"))
    keys: dict[str, str] = {}
    correct = proposed = hist = length = rate = None
    if verify:
        keys["verify_steps"] = "spec_verify_ct"
        correct, k = _first_key(meta, CORRECT_DRAFT_KEYS, _opt_int)
        if k:
            keys["correct_drafts"] = k
        proposed, k = _first_key(meta, PROPOSED_DRAFT_KEYS, _opt_int)
        if k:
            keys["proposed_drafts"] = k
        hist, k = _first_key(meta, HISTOGRAM_KEYS, lambda v: [int(x) for x in v] if isinstance(v, list) else None)
        if k:
            keys["histogram"] = k
        length = _opt_float(meta.get("spec_accept_length")) or None      # 0: not measured (0.5.4 - 0.5.6)
        rate = _opt_float(meta.get("spec_accept_rate"))
        if rate is not None and correct is None and proposed is None:
            # 0.5.4 - 0.5.5: the rate is the only count, over verify × speculative_num_steps
            if num_steps:
                correct = round(rate * verify * num_steps)
                keys["correct_drafts"] = "spec_accept_rate × spec_verify_ct × speculative_num_steps"
                if num_draft_tokens and num_draft_tokens > 1:
                    proposed = verify * (num_draft_tokens - 1)
                    keys["proposed_drafts"] = "spec_verify_ct × (speculative_num_draft_tokens − 1)"
                    rate = correct / proposed
                else:
                    rate = None
            else:
                rate = None     # its denominator (speculative_num_steps) unknown: no comparable rate
    return RequestRecord(
        prompt_index=prompt_index,
        completion_tokens=meta["completion_tokens"],
        prompt_tokens=_opt_int(meta.get("prompt_tokens")),
        spec_verify_ct=verify or None,
        spec_accept_length=length,
        spec_accept_rate=rate,
        spec_num_correct_drafts=correct,
        spec_num_proposed_drafts=proposed,
        histogram=hist,
        e2e_latency=_opt_float(meta.get("e2e_latency")),
        wall_s=wall_s,
        finish_reason=meta.get("finish_reason"),
        text=body.get("text") if isinstance(body.get("text"), str) else None,
        read_from=keys,
    )


def sum_histograms(histograms) -> list[int] | None:
    """Element-wise sum of ``spec_correct_drafts_histogram`` lists of different lengths (SGLang
    0.5.23 cuts each at the largest k it saw); ``None`` when none is given (empty ones skipped)."""
    hist: list[int] | None = None
    for h in histograms:
        if h:
            hist = hist or []
            hist += [0] * (len(h) - len(hist))
            for k, v in enumerate(h):
                hist[k] += v
    return hist


def summarize_responses(records: Sequence[RequestRecord], **extra: Any) -> AcceptanceMeasurement:
    """Aggregate :class:`RequestRecord` s as SGLang defines accept length / rate (module doc)."""
    spec = [r for r in records if r.spec_verify_ct]
    total_tokens = sum(r.completion_tokens for r in records)
    wall = sum(r.wall_s for r in records)
    verify = sum(r.spec_verify_ct for r in spec)
    accept_length = sum(r.completion_tokens for r in spec) / verify if verify else None
    with_counts = [r for r in spec if r.spec_num_proposed_drafts is not None and r.spec_num_correct_drafts is not None]
    proposed = sum(r.spec_num_proposed_drafts for r in with_counts)
    accept_rate = sum(r.spec_num_correct_drafts for r in with_counts) / proposed if proposed else None
    rates = [r.spec_accept_rate for r in spec if r.spec_accept_rate is not None]
    hist = sum_histograms(r.histogram for r in spec)
    note = None
    if not records:
        note = "no requests were measured"
    elif not spec:
        note = NOT_SPECULATIVE_NOTE
    elif accept_rate is None:
        note = "responses carry spec_verify_ct but not spec_num_correct_drafts/spec_num_proposed_drafts: accept rate unknown"
    return AcceptanceMeasurement(
        accept_length=accept_length, accept_rate=accept_rate,
        mean_spec_accept_rate=statistics.fmean(rates) if rates else None,
        verify_steps=verify, total_tokens=total_tokens, wall_s=wall,
        tokens_per_s=total_tokens / wall if wall > 0 else None,
        speculative=bool(spec), records=list(records), histogram=hist,
        requests_without_spec=len(records) - len(spec), note=note, **extra,
    )


def timeout_message(method: str, url: str, exc: httpx.HTTPError, timeout: float) -> str:
    """The message of a failed request: a read time-out says that nothing came back within the
    per-request ``timeout`` (a stalled generation, or a server slower than the time-out). It names
    no option: the caller says how its user gives a longer one (``workbench measure``: ``--timeout``;
    the runbooks: ``request_timeout``)."""
    if isinstance(exc, httpx.ReadTimeout):
        return (f"{method} {url}: no answer within the per-request time-out of {timeout:g} s (ReadTimeout): "
                "generation stalled, or the request needs a longer per-request time-out")
    return f"{method} {url} failed: {type(exc).__name__}: {exc}"


def auth_headers(api_key: str | None) -> dict[str, str] | None:
    """The headers a request to an SGLang server started with ``--api-key KEY`` needs:
    ``{"Authorization": "Bearer KEY"}`` (SGLang 0.5.23 ``add_api_key_middleware``: every path but
    ``/health*`` and ``/metrics`` answers 401 without it); ``None`` for no key."""
    return {"Authorization": f"Bearer {api_key}"} if isinstance(api_key, str) and api_key else None


class _NoGenerate(Exception):
    """``POST /generate`` answered 404: the server has no such endpoint (a vLLM server)."""


#: Called with ``(client, base_url, texts, max_new_tokens=, warmup=, timeout=, keep_text=)`` when
#: ``POST /generate`` answers 404, in order, until one returns an :class:`AcceptanceMeasurement`
#: (``None``: not its engine). :mod:`workbench.measure.sources` registers the vLLM one at import
#: (every ``workbench.measure`` import does: the package imports it), so this module needs no
#: import of it (no cycle).
NO_GENERATE_HANDLERS: list[Callable[..., "AcceptanceMeasurement | None"]] = []


def _post_generate(client: httpx.Client, url: str, prompt: str, max_new_tokens: int,
                   timeout: float) -> tuple[Any, float]:
    payload = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    t0 = time.perf_counter()
    try:
        resp = client.post(url, json=payload, timeout=timeout)
    except httpx.HTTPError as exc:
        raise AcceptanceError(timeout_message("POST", url, exc, timeout)) from exc
    wall = time.perf_counter() - t0
    if resp.status_code == 404:
        raise _NoGenerate(f"POST {url} answered 404: {resp.text[:200]}")
    if resp.status_code != 200:
        raise AcceptanceError(f"POST {url} answered {resp.status_code}: {resp.text[:500]}")
    try:
        return resp.json(), wall
    except ValueError as exc:
        raise AcceptanceError(f"POST {url} answered a body that is not JSON: {resp.text[:300]!r}") from exc


def _server_info(client: httpx.Client, base_url: str, timeout: float) -> dict:
    """The server's speculative settings (``SERVER_INFO_KEYS``) from ``GET /server_info``, or
    ``GET /get_server_info`` where the first answers 404 (SGLang 0.4.6 - 0.5.5 have only the old
    route); ``{"error": why}`` when neither answers."""
    for path in ("/server_info", "/get_server_info"):
        url = base_url.rstrip("/") + path
        try:
            resp = client.get(url, timeout=timeout)
            if resp.status_code == 404 and path == "/server_info":
                continue
            resp.raise_for_status()
            info = resp.json()
        except httpx.HTTPError as exc:
            return {"error": timeout_message("GET", url, exc, timeout)}
        except ValueError as exc:
            return {"error": f"GET {url}: {type(exc).__name__}: {exc}"}
        break
    if not isinstance(info, dict):
        return {"error": f"GET {url}: not a JSON object"}
    return {k: info.get(k) for k in SERVER_INFO_KEYS if k in info}


def measure_generate(
    base_url: str,
    prompts: Sequence[str] | None = None,
    *,
    max_new_tokens: int = 128,
    warmup: int = 1,
    timeout: float = 300.0,
    client: httpx.Client | None = None,
    fetch_server_info: bool = True,
    keep_text: bool = False,
    progress: bool | str = False,
    start_timeout: float | None = None,
    alive: Callable[[], bool] | None = None,
    api_key: str | None = None,
    activity: Callable[[], tuple] | None = None,
) -> AcceptanceMeasurement:
    """Measure accept length on a running server with greedy ``POST /generate`` requests.

    ``prompts``: texts (default :func:`load_prompts`), sent one at a time with
    ``temperature=0`` and ``max_new_tokens``. The first ``warmup`` requests (prompts taken
    in order, cycling) are sent first and excluded from every number. ``timeout``: seconds per
    request (every request, ``/server_info`` and the readiness checks included). ``client``: an
    ``httpx.Client`` to use (tests pass one with a mock transport).
    With ``fetch_server_info`` the server's speculative settings from ``GET /server_info`` are
    stored beside the numbers (an error there is recorded, not raised). ``progress``: a bar over the
    requests (True: terminal or notebook widget; ``"text"``: one stdout line when done, for papermill
    runbooks; False: none). ``api_key``: the server's ``--api-key``, sent as ``Authorization: Bearer``
    (:func:`auth_headers`; ignored when ``client`` is given).
    ``start_timeout`` (seconds; ``None``: no readiness check): first wait until the server
    generates (``remote.readiness.wait_ready``: ``/health_generate``, else a 1-token ``/generate``),
    while it answers 503 or, when ``alive`` (is the server's process still there?) says so, refuses
    connections, with one progress line on stderr; a server already ready costs one check.
    ``activity`` (``remote.box.Box.activity_probe`` of the server: its log progress and CPU seconds): the
    ``start_timeout`` then counts seconds without progress (a server starting slowly on a busy
    machine is waited for while it works; ``wait_ready``'s ``max_wait``, 4 × ``start_timeout``,
    bounds the whole wait).
    On a server without ``/generate`` (404) that is vLLM (:func:`workbench.measure.vllm.detect_engine`)
    the same measurement is made through ``/v1/completions`` and vLLM's counters
    (:func:`workbench.measure.sources.measure_generate_vllm`): accept length = 1 + accepted / drafts.

    Raises :class:`AcceptanceError` on a connection failure, a non-200 answer, a request with no
    answer within ``timeout`` or a body that is not a ``/generate`` response;
    ``remote.errors.ServerNotReady`` when the server never became ready within ``start_timeout``
    (or its process exited, or nothing listens and no process is starting), and
    ``remote.errors.GenerationStuck`` when HTTP is up but the 1-token check does not return within
    ``timeout``.
    """
    texts = [p["text"] if isinstance(p, dict) else p for p in (prompts if prompts is not None else load_prompts())]
    if not texts:
        raise AcceptanceError("no prompts to send")
    url = base_url.rstrip("/") + "/generate"
    own = client is None
    client = client or httpx.Client(timeout=timeout, trust_env=False, headers=auth_headers(api_key))
    try:
        return _measure_generate(client, base_url, url, texts, max_new_tokens=max_new_tokens, warmup=warmup,
                                 timeout=timeout, fetch_server_info=fetch_server_info, keep_text=keep_text,
                                 progress=progress, start_timeout=start_timeout, alive=alive,
                                 activity=activity)
    except _NoGenerate as exc:
        for handler in NO_GENERATE_HANDLERS:
            result = handler(client, base_url, texts, max_new_tokens=max_new_tokens, warmup=warmup, timeout=timeout,
                             keep_text=keep_text)
            if result is not None:
                return result
        raise AcceptanceError(f"{exc}: this server has no /generate and is not a vLLM server either "
                              "(workbench.measure.vllm.detect_engine)") from None
    finally:
        if own:
            client.close()


def _measure_generate(client: httpx.Client, base_url: str, url: str, texts: Sequence[str], *, max_new_tokens: int,
                      warmup: int, timeout: float, fetch_server_info: bool, keep_text: bool, progress: bool | str,
                      start_timeout: float | None, alive: Callable[[], bool] | None,
                      activity: Callable[[], tuple] | None = None) -> AcceptanceMeasurement:
    """The body of :func:`measure_generate` on a server with ``/generate`` (raises ``_NoGenerate``
    on a 404 from it)."""
    if start_timeout is not None:
        from remote.readiness import wait_ready

        wait_ready(base_url, start_timeout=start_timeout, request_timeout=timeout, alive=alive, client=client,
                   progress=lambda line: print(line, file=sys.stderr, flush=True), activity=activity)
    for i in range(warmup):
        _post_generate(client, url, texts[i % len(texts)], max_new_tokens, timeout)
    records = []
    from tqdm.auto import tqdm

    started = time.monotonic()
    # papermill runbooks ("text"): no bar (its redraws would fill the exported report), one
    # stdout line when done
    bar = tqdm(texts, desc="requests", unit="req", disable=progress in (False, "text"), mininterval=1.0,
               leave=False)
    pre = _server_info(client, base_url, timeout) if fetch_server_info else {}
    steps, draft_tokens = _opt_int(pre.get("speculative_num_steps")), _opt_int(pre.get("speculative_num_draft_tokens"))
    for i, text in enumerate(bar):
        body, wall = _post_generate(client, url, text, max_new_tokens, timeout)
        rec = record_from_response(i, body, wall, url=url, num_steps=steps, num_draft_tokens=draft_tokens)
        if not keep_text:
            rec.text = None
        records.append(rec)
    info = _server_info(client, base_url, timeout) if fetch_server_info else None
    if progress == "text":
        print(f"requests: {len(records)} in {time.monotonic() - started:.1f} s", flush=True)
    return summarize_responses(records, warmup=warmup, max_new_tokens=max_new_tokens, base_url=base_url,
                               server_info=info)

