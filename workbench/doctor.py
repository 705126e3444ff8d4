"""The preflight doctor: every rule of the catalogue (``notes/doctor-rules.md``) on one box.

:func:`run_doctor` reads, through the :class:`remote.Box` API only (``read_text``, ``read_bytes``
byte ranges, ``exists``, ``listdir``, ``run`` for one ``grep`` over the engine's model sources):

* the launch command's paths; a Hugging Face repo id (``org/name``) is looked up in the box's
  Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``; ``models--org--name/refs/main`` → ``snapshots/<rev>``); a repo
  that is not there is a ``model-not-on-box`` finding (an addition to the catalogue: the server
  would download it, the doctor cannot check it);
* both ``config.json`` files, the draft checkpoint's safetensors headers (single file or
  ``model.safetensors.index.json``) and ``d2t``/``t2d`` by byte range
  (:mod:`workbench.checkpoint`);
* the engine's version and source root (located with the box's interpreter, as the diagnosis
  inventory does), and from that source: the target class's ``set_eagle3_layers_to_capture``
  (the aux-layer offset rule is *evaluated* from the box's own source, so it follows the
  engine version), the draft classes the engine registers (``EntryClass`` of
  ``srt/models/*eagle*.py``), the config keys the draft class reads, and the ``try/except``
  around the ``eagle_config`` read.

When the engine source cannot be located, the source-dependent rules fall back to the facts
modelled from SGLang 0.5.23 (``notes/sglang-0.5.23.md``) and their evidence says so.

Rule functions are pure (facts in, :class:`workbench.rules.Finding` list out), so tests can call
them one by one; :func:`acceptance_collapsed` is the runtime rule.
"""

from __future__ import annotations

import difflib
import html
import json
import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import Any

from remote.errors import RemoteError
from workbench.checkpoint import (
    ConfigUnreadable,
    DraftFacts,
    TargetFacts,
    read_draft_facts,
    read_target_facts,
)
from workbench.codepath import DRAFT_CLASS_FILES, code_path_map, scan_swallowed
from workbench.draft_checks import check_draft_weights
from workbench.engine import CaptureRule, EngineNotFound, EngineSource, find_engine
from workbench.launch import SGLANG_VERSION, LaunchCommand
from workbench.rules import Finding, algorithm_mismatch

__all__ = [
    "DoctorError", "DoctorReport", "EngineSource", "run_doctor", "resolve_model_path", "acceptance_collapsed",
    "spec_params_invalid", "draft_path_missing", "aux_rules", "config_rules", "RULE_IDS", "MTP_TARGETS",
    "preflight", "running_launch",
]

#: Every rule id the doctor can emit (the catalogue, plus ``model-not-on-box`` and ``launch-flag-unknown``).
RULE_IDS = (
    "algorithm-mismatch", "draft-path-missing", "spec-params-invalid", "unknown-draft-architecture",
    "aux-config-unread", "aux-layer-ids-out-of-range", "aux-layer-offset-convention", "aux-count-mismatch",
    "hidden-size-mismatch", "vocab-size-mismatch", "head-dim-mismatch", "context-length-mismatch", "rope-mismatch",
    "norm-flags-unsupported", "weights-dropped", "weights-missing", "lm-head-shape-mismatch", "token-map-missing",
    "token-map-invalid", "checkpoint-unreadable", "target-no-aux-capture", "swallowed-config-error",
    "acceptance-collapsed", "model-not-on-box", "launch-flag-unknown",
)

#: Targets whose checkpoint supplies its own MTP draft: with no draft path the engine uses the
#: target path (SGLang 0.5.23 ``srt/arg_groups/speculative_hook.py`` ``_handle_eagle_family``).
MTP_TARGETS = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})
#: Attention backends implementing topk > 1 with page_size > 1 (0.5.23 ``_PAGE_TREE_SPEC_BACKENDS``).
PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")
#: Fallback facts (SGLang 0.5.23) used when the engine source is not on the box.
MODELLED_EAGLE3_DRAFT_CLASSES = ("LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM")
MODELLED_FIRST_ID_1_TARGETS = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"})
NORM_FLAGS = ("norm_before_fc", "fc_norm", "use_aux_norm", "norm_output")
#: The draft class's source file, relative to the engine root (SGLang 0.5.23).
LLAMA_ROPE_THETA = 10000.0
_HF_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class DoctorError(RuntimeError):
    """The doctor itself could not run (exit code 2): an unreachable box, a launch command that
    names no model. ``.where`` names the box or input."""

    def __init__(self, message: str, *, where: str = ""):
        self.where = where
        super().__init__(f"{message}" + (f" ({where})" if where else ""))


def _ev(value: Any, source: str | None) -> dict:
    return {"value": value, "source": source}


# ---------------------------------------------------------------------------------------------
# Counting box: every byte the doctor reads is counted.
# ---------------------------------------------------------------------------------------------


class _CountingBox:
    """Wraps a Box; counts bytes returned by reads and commands (``.bytes_read``)."""

    def __init__(self, box: Any):
        self._box = box
        self.bytes_read = 0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._box, name)

    def read_bytes(self, path, offset=0, length=None, *, timeout=30):
        data = self._box.read_bytes(path, offset, length, timeout=timeout)
        self.bytes_read += len(data)
        self.calls += 1
        return data

    def read_text(self, path, *, timeout=30, **kw):
        text = self._box.read_text(path, timeout=timeout, **kw)
        self.bytes_read += len(text.encode("utf-8", "replace"))
        self.calls += 1
        return text

    def run(self, cmd, **kw):
        result = self._box.run(cmd, **kw)
        self.bytes_read += len(result.stdout) + len(result.stderr)
        self.calls += 1
        return result


# ---------------------------------------------------------------------------------------------
# Paths: local directories and the Hugging Face cache.
# ---------------------------------------------------------------------------------------------


def _box_env(box: Any, timeout: float) -> dict[str, str]:
    res = box.run(["sh", "-c", 'printf "%s\\n%s\\n%s\\n" "$HF_HUB_CACHE" "$HF_HOME" "$HOME"'],
                  timeout=timeout, check=False)
    lines = (res.stdout.split("\n") + ["", "", ""])[:3]
    return {"HF_HUB_CACHE": lines[0], "HF_HOME": lines[1], "HOME": lines[2]}


def resolve_model_path(box: Any, value: str, *, env: dict[str, str], cwd: str | None = None,
                       timeout: float = 30) -> tuple[str | None, str]:
    """Where a ``--model-path``-style value lives on the box: ``(directory or None, how)``.

    An absolute (or ``~``) path, or a path relative to ``cwd`` that exists, is used as is. A
    Hugging Face repo id ``org/name`` is looked up as huggingface_hub lays out its cache
    (huggingface_hub ``constants.py``/``file_download.py``): ``$HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``$HOME/.cache/huggingface/hub``; then
    ``models--org--name/refs/main`` holds the revision and ``snapshots/<rev>/`` the files (one
    snapshot directory is used when ``refs/main`` is absent). ``env``: the server's environment
    (launch-command prefixes over the box's). ``how`` explains the lookup for the evidence.
    Raises the box's ``RemoteError`` only for failures other than a missing file.
    """
    if value.startswith(("/", "~")):
        path = box.expand_path(value) if value.startswith("~") else value
        return (path, "path in the launch command") if box.exists(path, timeout=timeout) else (
            None, f"{path} does not exist on {box.name}")
    if cwd:
        cand = posixpath.normpath(posixpath.join(cwd, value))
        if box.exists(cand, timeout=timeout):
            return cand, f"relative to the server's cwd {cwd}"
    if not _HF_REPO.match(value):
        return None, f"{value!r} is neither a directory on {box.name} nor a Hugging Face repo id"
    hub = env.get("HF_HUB_CACHE") or (posixpath.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else
                                      posixpath.join(env.get("HOME") or "~", ".cache/huggingface/hub"))
    repo_dir = posixpath.join(hub, "models--" + value.replace("/", "--"))
    if not box.exists(repo_dir, timeout=timeout):
        return None, f"Hugging Face repo {value} is not in the box's cache ({repo_dir} missing)"
    ref = posixpath.join(repo_dir, "refs", "main")
    rev = None
    if box.exists(ref, timeout=timeout):
        rev = box.read_text(ref, timeout=timeout).strip()
    else:
        snaps = box.listdir(posixpath.join(repo_dir, "snapshots"), timeout=timeout) \
            if box.exists(posixpath.join(repo_dir, "snapshots"), timeout=timeout) else []
        rev = snaps[0] if len(snaps) == 1 else None
    if not rev:
        return None, f"Hugging Face repo {value}: no refs/main and not exactly one snapshot in {repo_dir}"
    snap = posixpath.join(repo_dir, "snapshots", rev)
    if not box.exists(snap, timeout=timeout):
        return None, f"Hugging Face repo {value}: refs/main names {rev} but {snap} is missing"
    return snap, f"Hugging Face cache {repo_dir} (refs/main → {rev})"


def modelled_capture(target_arch: str, num_layers: int, ids: list[int] | None) -> CaptureRule:
    """SGLang 0.5.23's offset rule without the source: ``[2, L//2, L-3]`` for no ids; +1 when
    ``ids[0] == 1`` for DeepSeek-family targets (``deepseek_v2.py``, Kimi-K2.5 delegating to it);
    +1 always otherwise (``llama.py``)."""
    if ids is None:
        cap = [2, num_layers // 2, num_layers - 3]
    elif target_arch in MODELLED_FIRST_ID_1_TARGETS:
        cap = [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids)
    else:
        cap = [i + 1 for i in ids]
    return CaptureRule(cap, num_layers - 1, f"modelled: sglang {SGLANG_VERSION} (engine source not on the box)",
                       "modelled")


# ---------------------------------------------------------------------------------------------
# Rules on the launch command.
# ---------------------------------------------------------------------------------------------


def _algo(launch: LaunchCommand) -> str | None:
    raw = launch.get("--speculative-algorithm")
    if not isinstance(raw, str):
        return None
    up = raw.upper()
    return "EAGLE" if up == "NEXTN" else up


def _int_flag(launch: LaunchCommand, flag: str) -> tuple[int | None, str | None]:
    v = launch.get(flag)
    if v is None:
        return None, None
    try:
        return int(v), None
    except (TypeError, ValueError):
        return None, f"{flag} {v!r} is not an integer"


#: SGLang 0.5.23 srt/speculative/spec_info.py ``SpeculativeAlgorithm`` members and
#: spec_registry.py ``_RESERVED_ALIASES`` (NEXTN): the names ``from_string`` accepts without a plugin.
MODELLED_SPEC_ALGORITHMS = frozenset({"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE",
                                      "NGRAM", "NONE", "NEXTN"})


def launch_flags_unknown(launch: LaunchCommand, engine_version: str | None = None) -> list[Finding]:
    """Rule ``launch-flag-unknown`` (an addition to the catalogue): a ``--flag`` of an SGLang launch
    that SGLang 0.5.23's argparse does not define (a typo such as ``--speculative-algoritm``).
    argparse then exits with "unrecognized arguments" — unless it is a prefix of one flag, which
    ``LaunchCommand`` already resolves. Flag table: :mod:`workbench.sglang_flags` (generated from
    the 0.5.23 source). Error when the box runs 0.5.23; a warning when its version differs or is
    unknown (a newer engine may define it). Not applied to non-SGLang launchers."""
    from workbench.sglang_flags import FLAGS

    if launch.engine != "sglang":
        return []
    unknown = [f for f in launch.flags() if f.startswith("--") and f not in FLAGS]
    if not unknown:
        return []
    severity = "error" if engine_version == SGLANG_VERSION else "warning"
    close = {f: difflib.get_close_matches(f, list(FLAGS), n=1) for f in unknown}
    fixed = launch
    for f, match in close.items():
        if match:
            values = fixed.get_all(f)
            fixed = fixed.without_flag(f).with_flag(match[0], values[-1] if values else True)
    return [Finding("launch-flag-unknown", severity,
                    f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a flag of sglang "
                    f"{SGLANG_VERSION}'s launch_server: argparse stops the server with 'unrecognized arguments'"
                    + "".join(f"; did you mean {m[0]}?" for m in close.values() if m),
                    {"unknown_flags": _ev(unknown, "launch command"),
                     "engine_version": _ev(engine_version, "box" if engine_version else None),
                     "flag_table": f"sglang {SGLANG_VERSION} (workbench/sglang_flags.py)"},
                    fixed.to_string() if fixed is not launch else None)]


def spec_params_invalid(launch: LaunchCommand, target_arch: str | None = None,
                        draft_vocab: int | None = None, target_vocab: int | None = None) -> list[Finding]:
    """Rule ``spec-params-invalid``: the engine's own checks on steps / topk / draft tokens.

    SGLang 0.5.23 ``srt/arg_groups/speculative_hook.py`` ``_handle_eagle_family``:
    steps unset with topk or draft tokens set → bare ``assert`` at startup (error); topk == 1
    and draft tokens ≠ steps + 1 → warned and rewritten to steps + 1 (warning); topk > 1 with
    ``--page-size`` > 1 and an ``--attention-backend`` outside flashinfer/fa3/triton → raises
    (error); ``trtllm_mha`` with topk > 1 → raises; ``--speculative-use-rejection-sampling``
    outside EAGLE/EAGLE3 or with topk ≠ 1 → raises, and (notes) the draft vocab must equal the
    target vocab. Non-integer values → argparse rejects them (error). The fix is the launch
    command with the values the engine would accept.
    """
    algo = _algo(launch)
    if algo not in ("EAGLE", "EAGLE3", "STANDALONE"):
        return []
    out: list[Finding] = []
    steps, e1 = _int_flag(launch, "--speculative-num-steps")
    topk, e2 = _int_flag(launch, "--speculative-eagle-topk")
    ndt, e3 = _int_flag(launch, "--speculative-num-draft-tokens")
    ev = {"--speculative-num-steps": _ev(launch.get("--speculative-num-steps"), "launch command"),
          "--speculative-eagle-topk": _ev(launch.get("--speculative-eagle-topk"), "launch command"),
          "--speculative-num-draft-tokens": _ev(launch.get("--speculative-num-draft-tokens"), "launch command"),
          "modelled_engine": f"sglang {SGLANG_VERSION} srt/arg_groups/speculative_hook.py _handle_eagle_family"}
    bad = [e for e in (e1, e2, e3) if e]
    if bad:
        return [Finding("spec-params-invalid", "error", "; ".join(bad) + ": the server refuses to start", ev, None)]
    if steps is None and (topk is not None or ndt is not None):
        fixed = launch.without_flag("--speculative-eagle-topk").without_flag("--speculative-num-draft-tokens")
        out.append(Finding("spec-params-invalid", "error",
                           "--speculative-eagle-topk / --speculative-num-draft-tokens are set without "
                           "--speculative-num-steps: the engine's bare assert stops the server at startup",
                           ev, fixed.to_string()))
        return out
    if steps is not None and steps < 1:
        out.append(Finding("spec-params-invalid", "error", f"--speculative-num-steps {steps} must be ≥ 1", ev,
                           launch.with_flag("--speculative-num-steps", 1).to_string()))
    if topk == 1 and steps is not None and ndt != steps + 1:
        out.append(Finding("spec-params-invalid", "warning",
                           f"with --speculative-eagle-topk 1 the engine rewrites --speculative-num-draft-tokens {ndt} "
                           f"to steps + 1 = {steps + 1} (a warning in the log only)",
                           ev, launch.with_flag("--speculative-num-draft-tokens", steps + 1).to_string()))
    page, _ = _int_flag(launch, "--page-size")
    backend = launch.get("--attention-backend")
    if topk is not None and topk > 1 and page is not None and page > 1 and isinstance(backend, str) \
            and backend not in PAGE_TREE_BACKENDS:
        out.append(Finding("spec-params-invalid", "error",
                           f"--speculative-eagle-topk {topk} with --page-size {page} needs an attention backend in "
                           f"{PAGE_TREE_BACKENDS}, got {backend}: the engine raises at startup",
                           {**ev, "--page-size": _ev(page, "launch command"),
                            "--attention-backend": _ev(backend, "launch command")},
                           launch.with_flag("--page-size", 1).to_string()))
    if topk is not None and topk > 1 and backend == "trtllm_mha":
        out.append(Finding("spec-params-invalid", "error", "trtllm_mha supports only topk = 1 for speculative "
                           "decoding: the engine raises", ev, launch.with_flag("--speculative-eagle-topk", 1).to_string()))
    if launch.get("--speculative-use-rejection-sampling") is True:
        if topk is not None and topk != 1:
            out.append(Finding("spec-params-invalid", "error", "--speculative-use-rejection-sampling requires "
                               "--speculative-eagle-topk 1: the engine raises", ev,
                               launch.with_flag("--speculative-eagle-topk", 1).to_string()))
        if draft_vocab is not None and target_vocab is not None and draft_vocab != target_vocab:
            out.append(Finding("spec-params-invalid", "error",
                               f"rejection sampling needs the draft vocab ({draft_vocab}) to equal the target vocab "
                               f"({target_vocab})", {**ev, "draft_vocab_size": draft_vocab, "vocab_size": target_vocab},
                               launch.without_flag("--speculative-use-rejection-sampling").to_string()))
    return out


def draft_path_missing(launch: LaunchCommand, target: TargetFacts | None) -> list[Finding]:
    """Rule ``draft-path-missing`` (error): EAGLE/EAGLE3 with no ``--speculative-draft-model-path``
    for a target that does not supply its own MTP head (the architectures SGLang 0.5.23
    ``speculative_hook.py`` ``_handle_eagle_family`` fills the draft path for: :data:`MTP_TARGETS`)."""
    algo = _algo(launch)
    if algo not in ("EAGLE", "EAGLE3") or launch.get("--speculative-draft-model-path"):
        return []
    arch = target.architectures[0] if target is not None and target.architectures else None
    if arch in MTP_TARGETS:
        return []
    return [Finding("draft-path-missing", "error",
                    f"--speculative-algorithm {launch.get('--speculative-algorithm')} without a draft model path, and "
                    f"the target ({arch or 'architecture unknown'}) has no MTP head the engine would use instead",
                    {"speculative_algorithm": _ev(launch.get("--speculative-algorithm"), "launch command"),
                     "target_architecture": _ev(arch, target.sources.get("architectures") if target else None),
                     "mtp_targets": f"sglang {SGLANG_VERSION} speculative_hook.py _handle_eagle_family"},
                    "add --speculative-draft-model-path <the EAGLE draft trained for this target>")]


# ---------------------------------------------------------------------------------------------
# Rules on the two configs.
# ---------------------------------------------------------------------------------------------


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _rope(cfg: dict, path: str) -> tuple[float, str, str | None, str]:
    """(theta, its source, scaling type or None, its source) with ``rope_parameters``
    (transformers ≥ 4.56), ``rope_theta`` and ``rope_scaling.type|rope_type``; a missing theta
    is 10000 (the Llama default, transformers ``LlamaConfig``)."""
    rp = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    if _num(cfg.get("rope_theta")) is not None:
        theta, tsrc = _num(cfg["rope_theta"]), f"{path}: rope_theta"
    elif _num(rp.get("rope_theta")) is not None:
        theta, tsrc = _num(rp["rope_theta"]), f"{path}: rope_parameters.rope_theta"
    else:
        theta, tsrc = LLAMA_ROPE_THETA, f"{path}: rope_theta absent (Llama default 10000)"
    rs = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else rp
    kind = (rs or {}).get("rope_type") or (rs or {}).get("type")
    if kind == "default":
        kind = None
    return theta, tsrc, kind, f"{path}: rope_scaling" if cfg.get("rope_scaling") else f"{path}: rope_parameters"


def config_rules(launch: LaunchCommand, draft: DraftFacts, target: TargetFacts) -> list[Finding]:
    """Rules comparing the draft's config with the target's: ``hidden-size-mismatch``,
    ``vocab-size-mismatch`` (errors), ``context-length-mismatch`` (warning), ``rope-mismatch``
    (info). The target's text config is used for multimodal targets (:class:`TargetFacts`).
    Engine facts (SGLang 0.5.23 ``llama_eagle3.py``): the draft's ``fc`` input width is
    ``target_hidden_size`` else ``hidden_size``; draft logits are mapped to the target vocab."""
    out: list[Finding] = []
    dsrc = draft.sources
    th = draft.effective_target_hidden_size
    if th is not None and target.hidden_size is not None and th != target.hidden_size:
        key = "target_hidden_size" if draft.target_hidden_size is not None else "hidden_size"
        out.append(Finding("hidden-size-mismatch", "error",
                           f"the draft expects target hidden states {th} wide ({key}) but the target's are "
                           f"{target.hidden_size}: the draft was trained for another target",
                           {"draft_" + key: _ev(th, dsrc.get(key)),
                            "target_hidden_size": _ev(target.hidden_size, target.sources.get("hidden_size"))},
                           "use the draft trained for this target"))
    if draft.vocab_size is not None and target.vocab_size is not None and draft.vocab_size != target.vocab_size:
        out.append(Finding("vocab-size-mismatch", "error",
                           f"draft vocab_size {draft.vocab_size} ≠ target vocab_size {target.vocab_size}",
                           {"draft_vocab_size_field": _ev(draft.vocab_size, dsrc.get("vocab_size")),
                            "target_vocab_size": _ev(target.vocab_size, target.sources.get("vocab_size"))},
                           "use the draft trained for this target's tokenizer"))
    dmpe, dmpe_src = draft.config.get("max_position_embeddings"), f"{draft.config_path}: max_position_embeddings"
    if dmpe is None and isinstance(draft.config.get("transformer_layer_config"), dict):
        dmpe = draft.config["transformer_layer_config"].get("max_position_embeddings")
        dmpe_src = f"{draft.config_path}: transformer_layer_config.max_position_embeddings"
    ctx_flag, _ = _int_flag(launch, "--context-length")
    ctx, csrc = (ctx_flag, "launch command: --context-length") if ctx_flag else (
        target.max_position_embeddings, target.sources.get("max_position_embeddings"))
    if isinstance(dmpe, int) and ctx is not None and dmpe < ctx:
        fix = f"set max_position_embeddings to {ctx} in {draft.config_path}"
        if not ctx_flag:
            fix += f", or serve with --context-length {dmpe}"
        out.append(Finding("context-length-mismatch", "warning",
                           f"the draft's max_position_embeddings {dmpe} is below the {ctx}-token context the server "
                           "will serve: acceptance decays on long prompts",
                           {"draft_max_position_embeddings": _ev(dmpe, dmpe_src),
                            "served_context": _ev(ctx, csrc)}, fix))
    dt, dts, dk, dks = _rope(draft.config, draft.config_path)
    tc = target.config.get("text_config") if target.text_config_used else None
    tt, tts, tk, tks = _rope(tc if isinstance(tc, dict) else target.config,
                             target.config_path + (" text_config" if target.text_config_used else ""))
    if dt != tt or dk != tk:
        out.append(Finding("rope-mismatch", "info",
                           f"draft rope (theta {dt:g}, scaling {dk}) differs from the target's (theta {tt:g}, scaling "
                           f"{tk}); harmless if the draft was trained with this config",
                           {"draft_rope_theta": _ev(dt, dts), "target_rope_theta": _ev(tt, tts),
                            "draft_rope_scaling_type": _ev(dk, dks), "target_rope_scaling_type": _ev(tk, tks)},
                           "align them, or confirm training used them"))
    return out


def _ids_ok(ids: Any) -> bool:
    return isinstance(ids, list) and bool(ids) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)


def aux_rules(launch: LaunchCommand, draft: DraftFacts, target: TargetFacts,
              capture: CaptureRule | None) -> list[Finding]:
    """EAGLE3 aux-layer rules: ``aux-config-unread``, ``aux-layer-ids-out-of-range``,
    ``aux-layer-offset-convention``, ``aux-count-mismatch``.

    SGLang 0.5.23 ``spec_aux_hidden_state.py`` reads only the nested
    ``eagle_config.eagle_aux_hidden_state_layer_ids`` (inside ``try/except Exception``: missing or
    malformed → ``None`` → the target's default layers). ``capture`` is the target's offset rule
    evaluated for those ids (:meth:`EngineSource.capture_rule`). ``aux-config-unread`` is a
    warning when the ids are malformed or only at top level (the draft's width code and the
    capture path then disagree) and ``info`` when absent altogether (the engine's default layers,
    which SpecForge also trains with when none are written: not a fault by itself).
    The aux count is ``num_aux_hidden_states``, else len(nested ids), else 3 (``llama_eagle3.py``).
    """
    if _algo(launch) != "EAGLE3":
        return []
    out: list[Finding] = []
    nested = draft.aux_layer_ids
    top = draft.aux_layer_ids_top_level
    L = target.num_hidden_layers
    engine_ids = nested if _ids_ok(nested) else None
    cap_src = capture.source if capture else None
    captured = capture.captured if capture else None
    ev_ids = _ev(nested, draft.sources.get("aux_layer_ids") or f"{draft.config_path}: eagle_config (absent)")
    if engine_ids is None:
        malformed = nested is not None or (draft.eagle_config is None and "eagle_config" in draft.config)
        sev = "warning" if (malformed or top is not None) else "info"
        why = ("malformed" if malformed else "only at top level, which the capture path never reads" if top is not None
               else "absent")
        out.append(Finding("aux-config-unread", sev,
                           f"eagle_config.eagle_aux_hidden_state_layer_ids is {why}: the engine silently captures its "
                           f"default layers {str(captured) + ' ' if captured is not None else ''}(of {L} target layers)",
                           {"eagle_config.eagle_aux_hidden_state_layer_ids": ev_ids,
                            "eagle_aux_hidden_state_layer_ids (top level)": _ev(top, draft.sources.get("aux_layer_ids_top_level")),
                            "captured_layers": _ev(captured, cap_src)},
                           f"write the ids into eagle_config in {draft.config_path}"
                           + (f": \"eagle_config\": {{\"eagle_aux_hidden_state_layer_ids\": {top}}}" if _ids_ok(top) else "")))
    if captured is not None and L is not None and capture is not None:
        bad = [c for c in captured if c < 0 or c > capture.reachable_max]
        if bad:
            reach = [c for c in captured if 0 <= c <= capture.reachable_max]
            out.append(Finding("aux-layer-ids-out-of-range", "error",
                               f"the target captures layers {captured} but its capture loop reaches only 0..{capture.reachable_max} "
                               f"(num_hidden_layers {L}): {bad} never fire, so {len(reach)} aux states reach an fc built "
                               f"for {len(captured)}",
                               {"eagle_aux_hidden_state_layer_ids": ev_ids, "captured_layers": _ev(captured, cap_src),
                                "num_hidden_layers": _ev(L, target.sources.get("num_hidden_layers")),
                                "reachable_max": capture.reachable_max},
                               "use ids the engine can capture, or an engine version that captures the final boundary "
                               "(SGLang PR #32334)"))
        if engine_ids is not None and list(captured) != list(engine_ids):
            out.append(Finding("aux-layer-offset-convention", "info",
                               f"the config writes ids {engine_ids}; this engine captures layers {captured} for this "
                               f"target ({'+1' if captured and captured[0] == engine_ids[0] + 1 else 'as written'}), i.e. "
                               f"the outputs of layers {[c - 1 for c in captured]}: check the draft's training used the "
                               "same convention (first id 1 = 'output of layer', 2 = 'input to layer')",
                               {"config_ids": ev_ids, "captured_layers": _ev(captured, cap_src)}, None))
    n_aux_src = None
    if draft.num_aux_hidden_states is not None:
        n_aux, n_aux_src = draft.num_aux_hidden_states, draft.sources.get("num_aux_hidden_states")
    elif engine_ids is not None:
        n_aux, n_aux_src = len(engine_ids), draft.sources.get("aux_layer_ids")
    else:
        n_aux, n_aux_src = 3, "llama_eagle3.py default 3"
    th = draft.target_hidden_size if draft.target_hidden_size is not None else target.hidden_size
    if draft.fc_in_features is not None and th is not None and n_aux * th != draft.fc_in_features:
        out.append(Finding("aux-count-mismatch", "error",
                           f"fc.weight takes {draft.fc_in_features} inputs but the engine feeds {n_aux} aux states × "
                           f"{th} = {n_aux * th}: the draft fails to load or its fc is skipped",
                           {"fc_in_features": _ev(draft.fc_in_features, draft.sources.get("fc_in_features")),
                            "num_aux": _ev(n_aux, n_aux_src), "target_hidden": th}, None))
    return out


def acceptance_collapsed(measurement: Any, static_findings: list[Finding] = (), *,
                         source: str = "measurement") -> list[Finding]:
    """Runtime rule ``acceptance-collapsed`` (error): accept length ≤ 1.05 over ≥ 20 verify steps
    with speculative decoding on. ``measurement``: an object or dict with ``accept_length``
    (tokens per verify step, bonus included: SGLang's ``completion_tokens / spec_verify_ct``) and
    ``verify_steps`` (e.g. :class:`workbench.acceptance.AcceptanceMeasurement`). The finding
    points at the static error findings that explain it."""
    get = measurement.get if isinstance(measurement, dict) else lambda k: getattr(measurement, k, None)
    al, steps = get("accept_length"), get("verify_steps")
    if al is None or steps is None or steps < 20 or al > 1.05:
        return []
    causes = [f.rule for f in static_findings if f.severity == "error"]
    return [Finding("acceptance-collapsed", "error",
                    f"accept length {al:.3f} over {steps} verify steps: the draft's proposals are almost never "
                    "accepted" + (f"; explained by {', '.join(causes)}" if causes else "; no static finding explains it "
                                  "(probe the draft's input width)"),
                    {"accept_length": _ev(al, source), "verify_steps": _ev(steps, source), "static_causes": causes},
                    None)]


# ---------------------------------------------------------------------------------------------
# The report and the driver.
# ---------------------------------------------------------------------------------------------


@dataclass
class DoctorReport:
    """The doctor's result: ``findings`` (ordered: errors, warnings, info), ``inputs`` (what was
    read: ``{"what", "path", "how"}``), ``bytes_read`` (bytes returned by the box's reads and
    commands), ``wire_bytes`` (TCP bytes over SSH, ``None`` locally), ``engine_version``,
    ``engine_root``, ``launch`` (the command checked), ``duration_s``, ``notes``."""

    findings: list[Finding]
    inputs: list[dict]
    bytes_read: int
    wire_bytes: int | None
    engine_version: str | None
    engine_root: str | None
    launch: str
    duration_s: float
    notes: list[str] = field(default_factory=list)
    draft_facts: DraftFacts | None = field(default=None, repr=False, compare=False)
    target_facts: TargetFacts | None = field(default=None, repr=False, compare=False)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def exit_code(self) -> int:
        """0 no error finding, 1 at least one (the catalogue's exit codes)."""
        return 1 if self.errors else 0

    @property
    def rules(self) -> list[str]:
        return [f.rule for f in self.findings]

    def corrected_launch(self) -> str | None:
        """The launch command with every error/warning fix that is itself a launch command
        applied in turn (flags they change), or ``None`` when no finding proposes one."""
        current = LaunchCommand.parse(self.launch)
        changed = False
        for f in self.findings:
            if f.severity == "info" or not f.fix:
                continue
            try:
                proposed = LaunchCommand.parse(f.fix)
            except ValueError:
                continue
            for flag, _old, new in current.diff(proposed):
                if flag.startswith("--"):
                    current = current.without_flag(flag) if new is None else current.with_flag(flag, new)
                    changed = True
        return current.to_string() if changed else None

    def to_dict(self) -> dict:
        return {"findings": [f.to_dict() for f in self.findings], "inputs": self.inputs,
                "bytes_read": self.bytes_read, "wire_bytes": self.wire_bytes, "engine_version": self.engine_version,
                "engine_root": self.engine_root, "launch_command": self.launch,
                "corrected_launch_command": self.corrected_launch(), "duration_s": self.duration_s,
                "notes": self.notes, "exit_code": self.exit_code}

    def to_text(self) -> str:
        """Terminal output: one block per finding, evidence indented, then a summary line."""
        lines = []
        for f in self.findings:
            lines.append(f"{f.severity.upper():7} {f.rule}: {f.message}")
            for k, v in f.evidence.items():
                if isinstance(v, dict) and set(v) == {"value", "source"}:
                    lines.append(f"          {k} = {json.dumps(v['value'], default=str)}    [{v['source']}]")
                else:
                    lines.append(f"          {k} = {json.dumps(v, default=str)[:300]}")
            if f.fix:
                lines.append(f"   fix:   {f.fix}")
            lines.append("")
        counts = {s: sum(f.severity == s for f in self.findings) for s in ("error", "warning", "info")}
        lines.append(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info; "
                     f"engine {self.engine_version or 'unknown'}; read {self.bytes_read} bytes in {self.duration_s:.2f} s")
        for n in self.notes:
            lines.append(f"note: {n}")
        fixed = self.corrected_launch()
        if fixed:
            lines.append(f"corrected launch command: {fixed}")
        return "\n".join(lines)

    def fix_html(self) -> str:
        """The corrected launch command and its diff against the checked one, as HTML."""
        fixed = self.corrected_launch()
        if fixed is None:
            return "<p>No finding proposes a launch-command change.</p>"
        diff = LaunchCommand.parse(self.launch).diff(LaunchCommand.parse(fixed))
        rows = "".join(f"<tr><td><code>{html.escape(f)}</code></td><td style='color:#b00020'><code>- {html.escape(str(a))}"
                       f"</code></td><td style='color:#1b7a1b'><code>+ {html.escape(str(b))}</code></td></tr>"
                       for f, a, b in diff)
        return (f"<p><b>Corrected launch command</b>:</p><pre style='white-space:pre-wrap'>{html.escape(fixed)}</pre>"
                f"<table>{rows}</table>")

    def write_json(self, path: Any) -> Any:
        """Write :meth:`to_dict` as JSON to ``path`` (a local path; parents created); returns it."""
        from pathlib import Path

        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.to_dict(), indent=2, default=str))
        return out

    def _repr_html_(self) -> str:
        colour = {"error": "#cf222e", "warning": "#9a6700", "info": "#57606a"}
        rows = []
        for f in self.findings:
            ev = "<br>".join(
                f"<code>{html.escape(str(k))}</code> = <code>{html.escape(json.dumps(v['value'], default=str))}</code>"
                f" <small>({html.escape(str(v['source']))})</small>" if isinstance(v, dict) and set(v) == {"value", "source"}
                else f"<code>{html.escape(str(k))}</code> = <code>{html.escape(json.dumps(v, default=str)[:300])}</code>"
                for k, v in f.evidence.items())
            rows.append(f"<tr><td style='color:{colour[f.severity]}'><b>{f.severity}</b></td><td><code>{f.rule}</code></td>"
                        f"<td style='text-align:left'>{html.escape(f.message)}</td><td style='text-align:left'>{ev}</td>"
                        f"<td style='text-align:left'><code>{html.escape(f.fix or '')}</code></td></tr>")
        head = "<tr><th>severity</th><th>rule</th><th>message</th><th>evidence</th><th>fix</th></tr>"
        summary = (f"<p>engine {html.escape(str(self.engine_version))} at {html.escape(str(self.engine_root))}; "
                   f"{len(self.inputs)} inputs, {self.bytes_read} bytes read, {self.duration_s:.2f} s</p>")
        return f"<h4>Preflight findings</h4>{summary}<table>{head}{''.join(rows) or '<tr><td colspan=5>no findings</td></tr>'}</table>"


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set = set()
    out = []
    for f in findings:
        key = (f.rule, f.message)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda f: order[f.severity])


def run_doctor(box: Any, launch: LaunchCommand | str, *, timeout: float = 30, engine_root: str | None = None,
               engine_version: str | None = None, cwd: str | None = None) -> DoctorReport:
    """Run every static rule of the catalogue on ``launch`` against the files on ``box``.

    ``launch``: a :class:`LaunchCommand` or its text. ``engine_root``/``engine_version``: the
    ``sglang`` package directory and version on the box; located with the command's interpreter
    when ``None`` (:func:`workbench.engine.find_engine`). ``cwd``: the server's working directory for relative
    paths. ``timeout``: seconds for every box call. Returns a :class:`DoctorReport`; bad inputs
    (unreadable configs or checkpoints, repo ids not in the cache) are findings. Raises
    :class:`DoctorError` when the doctor cannot run (no ``--model-path``), and
    ``remote.errors.RemoteError`` subclasses for a box that fails (connection lost, time-out).
    """
    t0 = time.monotonic()
    if isinstance(launch, str):
        launch = LaunchCommand.parse(launch)
    cbox = _CountingBox(box)
    wire0 = _wire(box)
    findings: list[Finding] = []
    inputs: list[dict] = []
    notes: list[str] = []
    model_value = launch.get("--model-path")
    if not isinstance(model_value, str) or not model_value:
        raise DoctorError("the launch command has no --model-path", where=launch.to_string()[:200])
    env = _box_env(cbox, timeout)
    env.update(dict(launch.env))

    def resolve(value: str, role: str) -> str | None:
        path, how = resolve_model_path(cbox, value, env=env, cwd=cwd, timeout=timeout)
        inputs.append({"what": role, "path": path or value, "how": how})
        if path is None:
            rule, sev = ("model-not-on-box", "warning") if "not in the box's cache" in how else ("checkpoint-unreadable", "error")
            findings.append(Finding(rule, sev, f"the {role} {value!r} cannot be read on {box.name}: {how}",
                                    {role: _ev(value, "launch command")},
                                    "download it into the box's Hugging Face cache or pass a local directory"
                                    if rule == "model-not-on-box" else "fix the path in the launch command"))
        return path

    target = draft = None
    target_path = resolve(model_value, "target model")
    if target_path:
        try:
            target = read_target_facts(cbox, target_path, timeout=timeout)
            inputs.append({"what": "target config", "path": target.config_path, "how": "read_text"})
        except ConfigUnreadable as exc:
            findings.append(Finding("checkpoint-unreadable", "error", f"target config unreadable: {exc}",
                                    {"path": _ev(exc.path, "launch command: --model-path")}, None))
    algo = _algo(launch)
    draft_value = launch.get("--speculative-draft-model-path")
    if isinstance(draft_value, str) and draft_value:
        draft_path = resolve(draft_value, "draft model")
        if draft_path:
            try:
                draft = read_draft_facts(cbox, draft_path, timeout=timeout)
                inputs.append({"what": "draft config", "path": draft.config_path, "how": "read_text"})
                inputs.append({"what": "draft checkpoint headers",
                               "path": sorted({t.file for t in (draft.tensors or {}).values()}) or draft_path,
                               "how": "read_bytes (header byte ranges)"})
            except ConfigUnreadable as exc:
                findings.append(Finding("checkpoint-unreadable", "error", f"draft config unreadable: {exc}",
                                        {"path": _ev(exc.path, "launch command: --speculative-draft-model-path")}, None))
    if engine_root is None:
        try:
            located = find_engine(cbox, launch=launch, timeout=timeout)
            engine_root, engine_version = located.root, engine_version or located.version
        except EngineNotFound as exc:
            notes.append(f"engine source not located ({exc}); source-dependent rules use the facts modelled "
                         f"from sglang {SGLANG_VERSION}")
    engine = EngineSource(cbox, engine_root, engine_version, timeout=timeout) if engine_root else None
    if engine_root:
        inputs.append({"what": "engine source", "path": engine_root, "how": f"version {engine_version}"})
    if engine_version and launch.engine == "sglang" and engine_version != SGLANG_VERSION:
        notes.append(f"the box runs sglang {engine_version}; rules were modelled on {SGLANG_VERSION} and read the "
                     "box's source where they depend on it")

    raw_algo = launch.get("--speculative-algorithm")
    known_algos = engine.spec_algorithms() if engine is not None else None
    if known_algos is None:
        known_algos = (MODELLED_SPEC_ALGORITHMS, f"modelled: sglang {SGLANG_VERSION} srt/speculative/spec_info.py "
                                                 "SpeculativeAlgorithm, spec_registry.py _RESERVED_ALIASES")
    findings += launch_flags_unknown(launch, engine_version)
    if isinstance(raw_algo, str) and known_algos is not None and raw_algo.upper() not in known_algos[0]:
        findings.append(Finding("spec-params-invalid", "error",
                                f"--speculative-algorithm {raw_algo} is not an algorithm this engine knows "
                                f"({', '.join(sorted(known_algos[0] - {'NONE'}))}): from_string raises at startup "
                                "unless a plugin registers it",
                                {"speculative_algorithm": _ev(raw_algo, "launch command"),
                                 "engine_algorithms": _ev(sorted(known_algos[0]), known_algos[1])},
                                "use EAGLE3 for an EAGLE-3 draft, EAGLE for an EAGLE-1/2 draft"))
    findings += draft_path_missing(launch, target)
    findings += spec_params_invalid(launch, target.architectures[0] if target and target.architectures else None,
                                    draft.draft_vocab_size if draft else None, target.vocab_size if target else None)
    if draft is not None:
        findings += algorithm_mismatch(launch, draft, target)
        findings += _draft_rules(cbox, launch, draft, target, engine, timeout, notes)
    if engine is not None and algo == "EAGLE3":
        findings += scan_swallowed(engine, code_path_map(engine, keys=["eagle-config-read"]))
    wire1 = _wire(box)
    return DoctorReport(_dedupe(findings), inputs, cbox.bytes_read,
                        (wire1 - wire0) if wire0 is not None and wire1 is not None else None,
                        engine_version, engine_root, launch.to_string(), round(time.monotonic() - t0, 3), notes,
                        draft_facts=draft, target_facts=target)


def running_launch(box: Any, *, port: int | None = None, timeout: float = 30) -> tuple[LaunchCommand, str | None]:
    """The launch command and cwd of the SGLang (or sandbox) server running on ``box``
    (``Box.find_servers``; on ``port`` when given). Raises :class:`DoctorError` when none runs."""
    from workbench.diagnose import _is_launch_argv

    servers = [s for s in box.find_servers(timeout=timeout) if _is_launch_argv(s.argv)]
    if port:
        servers = [s for s in servers if s.port == port]
    if not servers:
        raise DoctorError("no SGLang server running" + (f" on port {port}" if port else ""), where=box.name)
    return LaunchCommand.parse(list(servers[0].argv)), servers[0].cwd


def preflight(host: str = "local", launch_command: str | None = None, *, port: int | None = None,
              timeout: float = 30) -> DoctorReport:
    """The preflight runbook's one call: connect to ``host`` (``remote.connect`` spec), take
    ``launch_command`` (else the running server's command line, else the embedded sandbox box's
    default launch with the wrong flag, as ``diagnose_acceptance`` does), run :func:`run_doctor`,
    close the box. Raises :class:`DoctorError`, ``LaunchCommandError``, ``RemoteError``."""
    from remote import connect

    box = connect(host)
    try:
        cwd = None
        if launch_command is not None:
            launch = LaunchCommand.parse(launch_command)
        else:
            try:
                launch, cwd = running_launch(box, port=port, timeout=timeout)
            except DoctorError:
                from workbench.diagnose import sandbox_launch_command

                launch = LaunchCommand.parse(sandbox_launch_command(port=port or 30000))
        return run_doctor(box, launch, timeout=timeout, cwd=cwd)
    finally:
        box.close()


def _wire(box: Any) -> int | None:
    tb = getattr(getattr(box, "transport", None), "tcp_bytes", None)
    if tb is None:
        return None
    try:
        v = tb()
    except (OSError, RemoteError):
        return None
    if isinstance(v, dict):
        return int(sum(x for x in v.values() if isinstance(x, (int, float))))
    if isinstance(v, tuple):
        return int(sum(v))
    return int(v) if isinstance(v, (int, float)) else None


def _draft_rules(box: Any, launch: LaunchCommand, draft: DraftFacts, target: TargetFacts | None,
                 engine: EngineSource | None, timeout: float, notes: list[str]) -> list[Finding]:
    out: list[Finding] = []
    algo = _algo(launch)
    arch = draft.architectures[0] if draft.architectures else None
    if draft.checkpoint_error is not None:
        err = draft.checkpoint_error
        out.append(Finding("checkpoint-unreadable", "error", f"the draft checkpoint cannot be read ({err.reason}): {err}",
                           {"path": _ev(err.path, "draft checkpoint"), "reason": err.reason},
                           "re-export or re-download the draft checkpoint"))
    registered = None
    if engine is not None:
        registered = engine.draft_classes(eagle3=True)
        if algo != "EAGLE3" and registered is not None:
            registered.update(engine.draft_classes(eagle3=False) or {})
    reg_src = f"{engine.root}/srt/models/*eagle{'3' if algo == 'EAGLE3' else ''}*.py EntryClass" if engine else \
        f"modelled sglang {SGLANG_VERSION}"
    if registered is None and algo == "EAGLE3":
        registered = {c: DRAFT_CLASS_FILES[c] for c in MODELLED_EAGLE3_DRAFT_CLASSES}
    eagle_layout = bool(draft.tensors) and any(n.startswith(("midlayer.", "fc.", "model.fc.")) for n in draft.tensors)
    known = True
    if registered is not None and (algo == "EAGLE3" or eagle_layout) and arch not in registered:
        known = False
        want = sorted(registered) or ["LlamaForCausalLMEagle3"]
        best = ("LlamaForCausalLMEagle" if algo == "EAGLE" and draft.is_eagle1_like and "LlamaForCausalLMEagle" in registered
                else "LlamaForCausalLMEagle3" if "LlamaForCausalLMEagle3" in registered else want[0])
        out.append(Finding("unknown-draft-architecture", "error",
                           f"the draft declares architectures {draft.architectures}, which is not an EAGLE"
                           f"{'-3' if algo == 'EAGLE3' else ''} draft class of this engine ({', '.join(want)}); the engine "
                           f"builds {arch or 'nothing'} and its weights do not fit",
                           {"draft_architectures": _ev(draft.architectures, draft.sources.get("architectures")),
                            "registered_draft_classes": _ev(want, reg_src),
                            "eagle_tensors": [n for n in sorted(draft.tensors or {}) if n.startswith(("midlayer.", "fc."))][:4]},
                           f"set \"architectures\": [\"{best}\"] in {draft.config_path}"))
    if target is not None:
        out += config_rules(launch, draft, target)
        capture = None
        if algo == "EAGLE3" and target.num_hidden_layers:
            tarch = target.architectures[0] if target.architectures else ""
            ids = draft.aux_layer_ids if _ids_ok(draft.aux_layer_ids) else None
            if engine is not None:
                try:
                    capture = engine.capture_rule(tarch, target.num_hidden_layers, ids)
                except Exception as exc:  # noqa: BLE001 - engine code evaluated; reported, modelled rule used
                    notes.append(f"could not evaluate {tarch}.set_eagle3_layers_to_capture from the box's source "
                                 f"({type(exc).__name__}: {exc}); the 0.5.23 rule is used")
                    capture = modelled_capture(tarch, target.num_hidden_layers, ids)
                if capture is None:
                    cls = engine.find_class(tarch)
                    if cls is not None:
                        out.append(Finding("target-no-aux-capture", "error",
                                           f"the target class {tarch} ({engine.root}/{cls[0]}:{cls[1].lineno}) has no "
                                           "set_eagle3_layers_to_capture: the engine raises when EAGLE3 sets up capture",
                                           {"target_architecture": _ev(tarch, target.sources.get("architectures")),
                                            "class": _ev(tarch, f"{engine.root}/{cls[0]}:{cls[1].lineno}")},
                                           "use an engine version whose target class supports EAGLE-3, or EAGLE"))
                    else:
                        notes.append(f"target class {tarch} not found under {engine.root}/srt/models")
            else:
                capture = modelled_capture(tarch, target.num_hidden_layers, ids)
        out += aux_rules(launch, draft, target, capture)
    if engine is not None and arch in DRAFT_CLASS_FILES:
        src = engine.read(DRAFT_CLASS_FILES[arch])
        if src is not None:
            cfg, ec = draft.config, draft.eagle_config or {}
            for key in NORM_FLAGS:
                val = ec.get(key, cfg.get(key))
                if val and not re.search(rf"[\"']{key}[\"']", src):
                    where = f"{draft.config_path}: {'eagle_config.' if key in ec else ''}{key}"
                    out.append(Finding("norm-flags-unsupported", "warning",
                                       f"the draft sets {key}={val!r} but the engine's {DRAFT_CLASS_FILES[arch]} never "
                                       f"reads {key!r}: the norm the draft was trained with is not applied",
                                       {key: _ev(val, where), "engine_file": _ev(f"{engine.root}/{DRAFT_CLASS_FILES[arch]}",
                                                                                  f"no occurrence of {key!r}")},
                                       "upgrade the engine to a version that reads it, or retrain without it"))
    if known and arch == "LlamaForCausalLMEagle3" and draft.tensors is not None:
        weights, _checked = check_draft_weights(box, draft, target, timeout=timeout)
        out += weights
    return out
