"""Step 4, the probe: the probes that show the mechanism of the suspects on the engine's own code
path. The recipes of every confirmed or undecided hypothesis (the width reaching ``fc`` always) are
placed where the box's engine release has its landmarks (the code-path map). When every suspect has
a fix that will be applied, that is all: the probes ride on the fix launch (one load both confirms
the mechanism and measures the fix). Otherwise the server is relaunched with its own command (the
probe launch, its reason naming the hypotheses that need it), one request is sent, and the lines
that launch printed are read.

Reads ``ctx.state.static`` (the configs the readings are judged against; read here when preflight
has not run), the ledger (which hypotheses are still suspect) and ``ctx.inventory`` (engine source,
launch command); adds ``ctx.state.probe`` (the probes in place, their readings summarised, the
code-path map) and, through :mod:`workbench.diagnosis.steps.readings`, evidence (kind ``probe``)
to the hypotheses the readings speak to.
"""

from __future__ import annotations

from typing import Any, Callable

import httpx

from remote import probes as remote_probes
from remote.errors import RemoteError
from workbench.diagnosis.context import RunContext
from workbench.diagnosis.results import StepResult
from workbench.diagnosis.serving import stopped_answering, try_launch
from workbench.diagnosis.steps.readings import PROBE_RECIPE, attach_probe_evidence, probe_text, summarize_readings
from workbench.diagnosis.steps.static import read_configs
from workbench.engine.codepath import CodePathMap, code_path_map
from workbench.engine.recipes import add_recipes, read_recipes, recipe_probes, recipes_for
from workbench.engine.source import EngineSource
from workbench.errors import SourceLookupError
from workbench.logs import read_when_settled
from workbench.measure.generate import auth_headers
from workbench.rules import REGISTRY

__all__ = ["suspects", "code_path", "engine_kind", "recipes_for_suspects", "probe", "launch_probe", "read_probes",
           "revert_probes"]


def suspects(ctx: RunContext) -> list[str]:
    """The hypotheses still in play (confirmed or inconclusive), in the order they act; a consequence
    of a confirmed cause (the ledger's ``consequence_of``) is none: its cause's probes show it."""
    return [spec.id for spec, _ in REGISTRY.hypotheses()
            if ctx.ledger.get(spec.id).verdict in ("confirmed", "inconclusive") and spec.static
            and not any(ctx.ledger.get(c).verdict == "confirmed" for c in ctx.ledger.get(spec.id).consequence_of)]


def code_path(ctx: RunContext) -> CodePathMap | None:
    """The EAGLE-3 code-path map of the box's engine for this deployment's target and draft
    classes (:func:`workbench.engine.codepath.code_path_map`; built once). ``None`` when the
    engine source was not located."""
    if ctx.state.probe.code_path is None and ctx.inventory.engine_root:
        kw: dict[str, Any] = {}
        if ctx.state.target_facts is not None and ctx.state.target_facts.architectures:
            kw["target_arch"] = ctx.state.target_facts.architectures[0]
            kw["num_layers"] = ctx.state.target_facts.num_hidden_layers
        if ctx.state.draft_facts is not None:
            if ctx.state.draft_facts.architectures:
                kw["draft_arch"] = ctx.state.draft_facts.architectures[0]
            if isinstance(ctx.state.draft_facts.aux_layer_ids, list):
                kw["aux_ids"] = ctx.state.draft_facts.aux_layer_ids
        src = EngineSource(ctx.box, ctx.inventory.engine_root, ctx.inventory.engine_version, timeout=30)
        launch = ctx.inventory.launch
        # the EAGLE worker the server runs follows its environment and flags (SGLANG_ENABLE_SPEC_V2, ...)
        kw["env"] = {**(ctx.inventory.server_env or {}), **dict(launch.env)} if launch is not None else \
            ctx.inventory.server_env
        kw["launch_args"] = list(launch.arg_tokens) if launch is not None else None
        if engine_kind(ctx) == "vllm":
            # vLLM's own code path: the draft's class and whole config from --speculative-config, the
            # model runner from the server's environment (workbench.engine.codepath_vllm)
            from workbench.engine.codepath_vllm import vllm_map_for_launch

            ctx.state.probe.code_path = vllm_map_for_launch(ctx.box, src, ctx.inventory.resolved or launch,
                                                            cwd=ctx.inventory.server_cwd, timeout=30,
                                                            notes=ctx.notes, environ=ctx.inventory.server_env)
        else:
            ctx.state.probe.code_path = code_path_map(src, **kw)
    return ctx.state.probe.code_path


def engine_kind(ctx: RunContext) -> str:
    """``"vllm"`` when the box's engine package is vLLM, else ``"sglang"`` (SGLang and the
    sandbox's mirror of it): whose code-path map and probe recipes the probe step uses."""
    return "vllm" if (ctx.inventory.engine_package or "").split(".")[0] == "vllm" else "sglang"


def recipes_for_suspects(ctx: RunContext, suspected: list[str]) -> list[str]:
    """The probe recipes for the hypotheses ``suspected``: the width reaching ``fc``
    (:data:`PROBE_RECIPE`) first, then each hypothesis's own (``HypothesisSpec.probes``), those the
    box's engine has (:func:`workbench.engine.recipes.recipes_for`)."""
    names = [PROBE_RECIPE]
    for hid in suspected:
        names += [p for p in ctx.hypotheses.specs[hid].probes if p not in names]
    table = recipes_for(engine_kind(ctx))
    return [n for n in names if n in table]


def probe(ctx: RunContext, launch_needed: Callable[[], list[str]] | None = None) -> StepResult | None:
    """The probes showing the mechanism of the suspects on the engine's own code path: the
    recipes of every confirmed or undecided hypothesis (the width reaching ``fc`` always) placed,
    then, only when ``launch_needed()`` names why (each a sentence: a hypothesis no applied fix
    will answer, :func:`workbench.diagnosis.steps.fixes.probe_launch_needed`), the server
    relaunched with its own command, one request, the readings taken from that launch's log.
    When it names nothing the probes ride on the fix launch (no load spent here: the
    fixed server's log gives the readings, :mod:`~workbench.diagnosis.steps.fixes`);
    ``None`` (the default) launches, as a probe step on its own does.

    Skipped (``None``) when restarts are not allowed, when nothing is suspect and acceptance is
    not low (a healthy deployment costs no restart), when the engine source was not located, or
    when the server does not start as found (the start-up failure is the evidence). The probes
    stay in place for the fix relaunch (the fixed server shows its mechanism too) when fixes
    will be applied, and are reverted otherwise. A probe server that stops answering ends the
    run (``inconclusive``, see :mod:`~workbench.diagnosis.steps.symptom`)."""
    if not ctx.session.allow_restart:
        ctx.notes.append("no probe: allow_restart is False")
        return None
    suspected = suspects(ctx)
    low = True if ctx.speculation_off() else ctx.low_before()
    if ctx.state.start_failures and ctx.state.before is None:
        ctx.notes.append("no probe: the server does not start as found (its log is the evidence)")
        return None
    if not suspected and not low:
        ctx.notes.append("no probe: no hypothesis is suspect and acceptance is not low")
        return None
    if not ctx.inventory.engine_root:
        ctx.notes.append("no probe: the engine's source was not located on the box")
        return None
    # The draft's and target's configs (the fc width the probe's readout is judged against, the
    # classes the code-path map follows) come from the static read, also when the probe is the
    # first step after Inventory; a draft that cannot be read leaves them unknown (said below).
    read_configs(ctx)
    cmap = code_path(ctx)
    added = []
    for name in recipes_for_suspects(ctx, suspected):
        try:
            recipe_probes(cmap, name)
        except SourceLookupError as exc:
            ctx.notes.append(f"probe {name} not added: {exc}")
            continue
        added.append(name)
    if not added:
        return None
    try:
        ctx.state.probe.in_place = add_recipes(ctx.box, cmap, added, python=ctx.inventory.python, timeout=60)
    except (RemoteError, SourceLookupError) as exc:
        ctx.notes.append(f"the probes were not added ({type(exc).__name__}: {exc}); none is in place")
        return StepResult("probe", "inconclusive", f"the probes could not be added: {exc}")
    ctx.state.probe.result["recipes_added"] = added
    needed = launch_needed() if launch_needed is not None else None
    if needed is not None and not needed:
        ctx.state.probe.rides_on = "fix"
        ctx.state.probe.result["rides_on"] = "fix"
        return StepResult("probe", "placed", f"probes {', '.join(added)} placed; no probe launch: every suspect "
                          f"({', '.join(suspected)}) has a fix that will be applied, so they ride on the fix launch "
                          "and its log gives the readings", data={"recipes_added": added, "rides_on": "fix"})
    why = "; ".join(needed or []) or "the probes' readings on the server as found"
    return launch_probe(ctx, f"probe: {why}", added)


def launch_probe(ctx: RunContext, reason: str, added: list[str] | None = None) -> StepResult:
    """The probe launch itself, the probes in place: the server relaunched with its own command
    (``reason``: why this load is needed, kept in its launch record), one request, the readings
    of that launch summarised into ``ctx.state.probe.result`` and attached to the ledger.
    Reverts the probes when the launch does not start, or when no fix will be applied."""
    added = added if added is not None else ctx.state.probe.result.get("recipes_added", [])
    ctx.state.probe.rides_on = None
    handle, failure = try_launch(ctx, ctx.inventory.launch, "probe", reason)
    if failure is not None:
        revert_probes(ctx)
        return StepResult("probe", "inconclusive", f"the probe launch did not start: {failure.exception or failure.error}")
    readings = read_probes(ctx, handle)
    ctx.state.probe.result = summarize_readings(ctx, readings, before=True)
    ctx.state.probe.result["recipes_added"] = added
    attach_probe_evidence(ctx, readings)
    if not (ctx.settings.apply_fix and ctx.session.allow_restart):
        revert_probes(ctx)
    shown = ("observed_widths", "captured_layers", "d2t", "unmatched", "left_at_init")
    return StepResult("probe", "done", probe_text(ctx),
                      data={k: v for k, v in ctx.state.probe.result.items() if k in shown})


def read_probes(ctx: RunContext, handle) -> dict[str, list]:
    """Send one request to the launch ``handle`` (bounded by ``request_timeout``) and read each
    recipe's lines printed by that launch (its process group: an earlier launch's lines are no
    evidence about this one): ``{recipe name: [ProbeReading, ...]}``. Read once the log has
    settled (``workbench.logs.read_when_settled``: not grown for 0.5 s with the width line in
    it), or given up when it has not grown for 10 s without it: no fixed deadline a busy
    machine could overrun."""
    launch = ctx.session.current_launch or ctx.inventory.launch
    key = launch.get("--api-key")
    with httpx.Client(timeout=ctx.session.request_timeout, trust_env=False,
                      headers=auth_headers(key if isinstance(key, str) else None)) as client:
        try:
            if launch.engine == "vllm":
                # vLLM has no /generate: one greedy /v1/completions for the served model
                # (vLLM 0.32.0 entrypoints/openai/completion; its id from GET /v1/models)
                models = client.get(ctx.inventory.base_url + "/v1/models").json().get("data") or []
                model = next((m.get("id") for m in models if isinstance(m, dict) and m.get("id")), None)
                body = {"prompt": ctx.settings.prompts[0]["text"], "max_tokens": 8, "temperature": 0}
                client.post(ctx.inventory.base_url + "/v1/completions",
                            json={**body, **({"model": model} if model else {})})
            else:
                client.post(ctx.inventory.base_url + "/generate",
                            json={"text": ctx.settings.prompts[0]["text"],
                                  "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            lost = (stopped_answering(ctx, exc, what="the probe request", pid=handle.pid, log_path=handle.log_path)
                    if isinstance(exc, httpx.TransportError) else None)
            if lost is not None:
                raise lost from exc
            ctx.notes.append(f"the probe request failed: {type(exc).__name__}: {exc}")
    # Read once the log has settled: the lines of every recipe the request printed, never a
    # partial read of a log still being written; given up when it has not grown for
    # SETTLE_STALL_S without the width line (a stall, not a total time: a busy box is slower).
    try:
        out, _settled = read_when_settled(
            ctx.box, handle.log_path,
            lambda: read_recipes(ctx.box, handle.log_path, ctx.state.probe.in_place, pgid=handle, timeout=30),
            done=lambda readings: bool(readings.get(PROBE_RECIPE)), timeout=30)
    except RemoteError as exc:
        ctx.notes.append(f"the probe lines could not be read: {exc}")
        return {}
    return out


def revert_probes(ctx: RunContext) -> None:
    """Revert every probe the run placed, newest first (byte for byte:
    :func:`remote.probes.revert_probe`); one that cannot be reverted now is noted and left to the
    restore (its journal entry stays)."""
    for placed in reversed(ctx.state.probe.in_place):
        try:
            remote_probes.revert_probe(ctx.box, placed)
        except RemoteError as exc:
            ctx.notes.append(f"probe {placed.tag} not reverted here ({exc}); the restore reverts it")
    if ctx.state.probe.in_place:
        ctx.state.probe.result["reverted"] = True
    ctx.state.probe.in_place = []
