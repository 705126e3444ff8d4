"""What the probe lines say: the readings of one launch summarised (:func:`summarize_readings`:
the widths reaching ``fc`` against the width it expects, the layers the target captures, the token
map, the checkpoint names ``load_weights`` dropped, the parameters left at their initial values),
attached to the ledger as evidence (:func:`attach_probe_evidence`), and the cross-engine aux
convention decided by the captured layers (:func:`probe_decides_cross_engine`).

Reads ``ctx.state.static`` (the draft's fc width, the target's hidden size) and the doctor's
``aux-id-convention`` finding; adds to the ledger evidence of kind ``probe`` (``algorithm-flag``,
the aux hypotheses, ``token-map``, ``weights-loaded``) and decides
:data:`~workbench.diagnosis.steps.hypotheses.CROSS_ENGINE_AUX` when the readings show it.
A new probe recipe's reading is summarised and attached here.
"""

from __future__ import annotations

from typing import Any

from remote import probes as remote_probes
from workbench.diagnosis.context import RunContext
from workbench.diagnosis.steps.hypotheses import CROSS_ENGINE_AUX
from workbench.diagnosis.words import d2t_words, literal, pr_subset, unmatched_words
from workbench.engine.recipes import missing_required, params_left_at_init, weights_unmatched

__all__ = ["DRAFT_MODEL_FILE", "PROBE_RECIPE", "DECIDED_AS_FOUND", "summarize_readings", "rank_values", "attach_probe_evidence",
           "attach_fix_width_evidence",
           "probe_decides_cross_engine", "probe_text", "decisive_width", "target_hidden", "expected_width"]

#: The draft model file, relative to the engine package root: SGLang 0.5.23
#: ``srt/models/llama_eagle3.py`` (the sandbox mirrors the path).
DRAFT_MODEL_FILE = "srt/models/llama_eagle3.py"
#: The probe that gives the verdict's ``probe.observed_hidden_size``: the ``draft-input-width``
#: recipe, anchored on the draft's fc width check as the code-path map finds it in the box's
#: version (SGLang 0.5.23 ``srt/models/llama_eagle3.py`` ``LlamaModel.forward``).
PROBE_RECIPE = "draft-input-width"
#: The hypotheses that the probes' readings of the server AS FOUND decide (not only add evidence
#: to): the cross-engine aux convention, by the layers the target captures compared with the
#: states the draft was trained on (:func:`probe_decides_cross_engine`) — a fix launch captures
#: other layers, so its readings cannot stand in. Such a suspect without a fix of its own needs a
#: probe launch (:func:`workbench.diagnosis.steps.fixes.probe_launch_needed`).
DECIDED_AS_FOUND = (CROSS_ENGINE_AUX,)


def summarize_readings(ctx: RunContext, readings: dict[str, list], *, before: bool) -> dict[str, Any]:
    """One launch's probe readings (``{recipe name: [ProbeReading, ...]}``) summarised:
    ``observed_hidden_size`` (the decisive width reaching ``fc``), ``expected_hidden_size`` (the
    draft's fc in_features), ``target_hidden_size``, ``observed_shape``, ``observed_widths``,
    ``lines`` (the raw probe lines by tag), and when read ``captured_layers``, ``d2t``,
    ``unmatched`` (or ``unmatched_unknown``), ``left_at_init`` / ``shared_from_target``. Widths are
    in hidden units (the last dimension). ``before``: the launch as found (``False``: the fix's).
    ``ranks``: one entry per rank that printed the width (:func:`rank_values`); the decisive width
    is rank 0's when rank 0 printed, and ``ranks_disagree`` names every rank whose width differs."""
    by_process: dict[Any, list[tuple[int, ...]]] = {}
    for r in readings.get(PROBE_RECIPE, []):
        if "hidden_states.shape" in r.raw and not r.error:
            try:
                shape = remote_probes.parse_shape(r.raw["hidden_states.shape"])
            except ValueError:
                continue
            by_process.setdefault(r.rank if r.rank is not None else ("pid", r.pid), []).append(shape)
    expected = expected_width(ctx)
    ranks = rank_values(by_process, expected)
    # the verdict uses rank 0 (the others are compared with it); lines of unknown rank all count
    widths = by_process.get(0) or [s for shapes in by_process.values() for s in shapes]
    observed = decisive_width(widths, expected)
    out: dict[str, Any] = {
        "observed_hidden_size": observed, "expected_hidden_size": expected,
        "target_hidden_size": target_hidden(ctx),
        "observed_shape": next((s for s in widths if s and s[-1] == observed), None),
        "observed_widths": sorted({s[-1] for s in widths if s}),
        "lines": {tag: [r.log_line for r in rs] for tag, rs in readings.items()},
        "ranks": ranks,
        "ranks_disagree": [e["rank"] for e in ranks if e["rank"] is not None and 0 in by_process
                           and e["value"] != observed],
    }
    # SGLang: the layer inputs the target tests (``self.layers_to_capture``); vLLM: the layers its
    # model keeps (``self.aux_hidden_state_layers``: the hidden state after k layers)
    # (a vLLM target with its own setter, DeepSeek-V2/V3, stores the runner's ``aux_layers`` as given)
    rows = [r for r in readings.get("target-capture-layers", []) if not r.error]
    cap = [literal(r.raw[key]) for key in ("self.layers_to_capture", "self.aux_hidden_state_layers", "aux_layers")
           for r in rows if key in r.raw][:1]
    if cap:
        out["captured_layers"] = cap[0]
    d2t = [r.raw for r in readings.get("draft-d2t", []) if not r.error]
    if d2t:
        out["d2t"] = d2t[0]
    weights = readings.get("draft-weights-unmatched")
    if weights is not None and not missing_required("draft-weights-unmatched", weights):
        out["unmatched"] = weights_unmatched(weights)
    elif weights is not None:
        out["unmatched_unknown"] = "load_weights printed no .ran line: no unmatched name is no evidence"
    at_init = readings.get("draft-params-at-init")
    if at_init:
        left = params_left_at_init(at_init)
        if left.compared:
            out["left_at_init"] = left.faults
            out["shared_from_target"] = list(left.shared_from_target)
    return out


def rank_values(by_process: dict[Any, list[tuple[int, ...]]], expected: int | None) -> list[dict[str, Any]]:
    """One entry per rank that printed the width probe: ``{"rank": r, "value": the decisive width
    of its lines, "widths": every width it printed}``, ranks in order; a process whose lines carry
    no rank (``by_process`` key ``("pid", P)``) is one entry ``{"rank": None, "pid": P, ...}``
    after them. Widths in hidden units (:func:`decisive_width`)."""
    known = sorted(k for k in by_process if isinstance(k, int))
    unknown = [k for k in by_process if not isinstance(k, int)]
    out = [{"rank": k, "value": decisive_width(by_process[k], expected),
            "widths": sorted({s[-1] for s in by_process[k] if s})} for k in known]
    out += [{"rank": None, "pid": k[1], "value": decisive_width(by_process[k], expected),
             "widths": sorted({s[-1] for s in by_process[k] if s})} for k in unknown]
    return out


def attach_probe_evidence(ctx: RunContext, readings: dict[str, list], pr: dict | None = None, *,
                          on_fix: bool = False) -> None:
    """The summary ``pr`` (default ``ctx.state.probe.result``) as ledger evidence (kind
    ``probe``): the width against ``fc`` for ``algorithm-flag``, the captured layers for the aux
    hypotheses (and the cross-engine decision), the token map, the weights dropped or left at
    init. ``on_fix``: the readings come from the fix launch the probes rode on (said in every
    summary; the width is judged with the server as found's live evidence,
    :func:`attach_fix_width_evidence`; the captured layers decide nothing about the convention
    as found). Names every rank whose width disagrees with rank 0's."""
    pr = ctx.state.probe.result if pr is None else pr
    where = "probe on the fixed server" if on_fix else "probe"
    if pr.get("ranks_disagree"):
        ctx.notes.append(f"{where}: rank(s) {pr['ranks_disagree']} printed another width than rank 0 "
                         f"({[(e['rank'], e['value']) for e in pr.get('ranks') or []]}); the verdict uses rank 0")
    if on_fix:
        attach_fix_width_evidence(ctx, pr)
        _attach_other_readings(ctx, pr, where, decide=False)
        return
    expected, observed = pr.get("expected_hidden_size"), pr.get("observed_hidden_size")
    widths = pr.get("observed_widths")
    if observed is not None and expected is not None:
        if observed != expected:
            ctx.add_evidence("algorithm-flag", f"probe: no draft forward saw the fc's width {expected} "
                               f"(widths seen {widths}): the width check skips fc", pr_subset(pr))
        else:
            ctx.add_evidence("algorithm-flag", f"probe: the draft-extend step receives {expected}-wide input, "
                               "what its fc expects", pr_subset(pr))
    _attach_other_readings(ctx, pr, where, decide=True)


def _attach_other_readings(ctx: RunContext, pr: dict, where: str, *, decide: bool) -> None:
    """The captured layers, token map and weights of summary ``pr`` as evidence (``where``
    starts each summary); ``decide``: the captured layers may decide the cross-engine convention
    (readings of the server as found only)."""
    if "captured_layers" in pr:
        for hid in ("aux-eagle-config", "aux-layer-ids", "aux-offset-convention", "target-capture"):
            ctx.add_evidence(hid, f"{where}: the target captures layers {pr['captured_layers']}",
                               {"captured_layers": pr["captured_layers"]})
        if decide:
            probe_decides_cross_engine(ctx, pr["captured_layers"])
    if "d2t" in pr:
        ctx.add_evidence("token-map", f"{where}: {d2t_words(pr['d2t'])}", {"d2t": pr["d2t"]})
    if "left_at_init" in pr:
        left = sorted(pr["left_at_init"])
        ctx.add_evidence("weights-loaded", f"{where}: load_weights left {len(left)} parameter(s) at their initial "
                           f"values{': ' + str(left[:5]) + (' …' if len(left) > 5 else '') if left else ''} (besides those the target's embedding "
                           "/ lm_head replace)", {"left_at_init": pr["left_at_init"],
                                                  "shared_from_target": pr.get("shared_from_target")})
    if "unmatched" in pr:
        ctx.add_evidence("weights-loaded", f"{where}: {unmatched_words(pr['unmatched'])}",
                           {"unmatched": pr["unmatched"]})


def attach_fix_width_evidence(ctx: RunContext, after: dict) -> None:
    """The width probe read on the fix launch it rode on, judged with what the server as found
    showed without a restart (``ctx.state.live["fc_widths_as_found"]``: the widths its flags send
    to ``fc`` by the code-path map, :mod:`~workbench.diagnosis.steps.live`). The mechanism of
    ``algorithm-flag`` is shown (``ctx.state.probe.result["mechanism_shown_on_fix"]``) when the
    fixed server's draft forward receives fc's width and the server as found sends it none of it:
    both sides of the one difference the fix made."""
    expected, observed = after.get("expected_hidden_size"), after.get("observed_hidden_size")
    if expected is None or observed is None:
        return
    live = ctx.state.live or {}
    as_found = live.get("fc_widths_as_found")
    data = {**pr_subset(after), "fc_widths_as_found": as_found, "as_found_source": live.get("fc_widths_source")}
    if observed == expected:
        shown = isinstance(as_found, list) and expected not in as_found
        said = (f"; as found, {live.get('fc_widths_words')}" if shown else
                "; what the server as found sends to fc is not known without a probe launch")
        ctx.add_evidence("algorithm-flag", f"probe on the fixed server: the draft-extend step receives "
                         f"{expected}-wide input, what its fc expects{said}", data)
        ctx.state.probe.result["mechanism_shown_on_fix"] = shown
    else:
        ctx.add_evidence("algorithm-flag", f"probe on the fixed server: no draft forward saw the fc's width "
                         f"{expected} (widths seen {after.get('observed_widths')}): the fix did not reach fc", data)


def probe_decides_cross_engine(ctx: RunContext, captured: Any) -> None:
    """The ``target-capture-layers`` reading decides :data:`CROSS_ENGINE_AUX` when the doctor's
    ``aux-id-convention`` finding named a known convention: the target capturing the states the
    finding says the serving engine feeds (``states_fed``, which differ from those the draft was
    trained on) confirms the shift on the engine's own code path; capturing the trained states
    refutes it. Both as evidence ``kind="probe"``. Layer numbers are hidden states after k
    decoder layers in both engines (SGLang's ``layers_to_capture`` = inputs of layer k; vLLM's
    ``aux_hidden_state_layers``, vLLM 0.32.0 ``model_executor/models/interfaces.py``)."""
    finding = next((f for f in ctx.state.findings if f.rule == "aux-id-convention"), None)
    if finding is None or not isinstance(captured, (list, tuple)) or \
            ctx.ledger.get(CROSS_ENGINE_AUX).verdict != "inconclusive":
        return
    ev = finding.evidence
    if (ev.get("draft_convention") or {}).get("value") is None:
        return
    fed = (ev.get("states_fed") or {}).get("value")
    trained = next(((v or {}).get("value") for k, v in ev.items() if k.startswith("states_under_")
                    and k != "states_under_v2"), None)
    got = sorted(int(x) for x in captured)
    data = {"captured_layers": got, "states_fed": fed, "states_trained": trained,
            "proposed_ids": ev.get("proposed_ids")}
    if isinstance(fed, list) and isinstance(trained, list) and got == sorted(fed) and got != sorted(trained):
        ctx.decide(CROSS_ENGINE_AUX, "confirmed", f"probe: the target captures the states after {got} decoder "
                     f"layers; the draft was trained on those after {trained} (its ids written for the other "
                     "engine)", data=data, kind="probe")
        ctx.state.probe.confirmed.add(CROSS_ENGINE_AUX)
    elif isinstance(trained, list) and got == sorted(trained):
        ctx.decide(CROSS_ENGINE_AUX, "refuted", f"probe: the target captures the states after {got} decoder "
                     "layers, those the draft was trained on", data=data, kind="probe")


def probe_text(ctx: RunContext) -> str:
    """The probe's readings in one sentence for the runbook (``"the probes printed nothing"``
    when there are none)."""
    pr = ctx.state.probe.result
    parts = []
    if pr.get("observed_widths"):
        expected = pr.get("expected_hidden_size")
        parts.append(f"widths reaching fc: {pr['observed_widths']} " +
                     (f"(fc expects {expected})" if expected is not None else
                      "(the width fc expects is unknown: the draft's config was not read)"))
    if "captured_layers" in pr:
        parts.append(f"layers captured: {pr['captured_layers']}" +
                     (" (none: no aux hidden states reach the draft)" if pr["captured_layers"] == [] else ""))
    if "d2t" in pr:
        parts.append(d2t_words(pr["d2t"]))
    if "unmatched" in pr:
        parts.append(unmatched_words(pr["unmatched"]))
    if "left_at_init" in pr:
        parts.append(f"parameters left at their initial values: {sorted(pr['left_at_init']) or 'none'}")
    return "; ".join(parts) or "the probes printed nothing"


def decisive_width(shapes: list[tuple[int, ...]], expected: int | None) -> int | None:
    """The width that decides: ``expected`` (the draft's fc in_features) when any forward saw
    it (the aux states reached the draft), else the widest seen; ``None`` when none."""
    widths = [s[-1] for s in shapes if s]
    if not widths:
        return None
    return expected if expected in widths else max(widths)


def target_hidden(ctx: RunContext) -> int | None:
    """The target's hidden size (its config's, else what the draft's config says it is); ``None``
    when neither was read."""
    if ctx.state.target_facts is not None and ctx.state.target_facts.hidden_size:
        return ctx.state.target_facts.hidden_size
    if ctx.state.draft_facts is not None:
        return ctx.state.draft_facts.effective_target_hidden_size
    return None


def expected_width(ctx: RunContext) -> int | None:
    """The width the draft's ``fc`` takes (in_features: 3 × the target's hidden size for EAGLE-3);
    ``None`` when the draft's config was not read."""
    if ctx.state.draft_facts is not None and ctx.state.draft_facts.fc_in_features:
        return ctx.state.draft_facts.fc_in_features
    return None
