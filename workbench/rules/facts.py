"""What the rules read, gathered once per doctor run: :class:`Facts`.

The doctor (:func:`workbench.doctor.run_doctor`) reads the launch command, both configs, the draft's
safetensors headers and the engine source on the box once, and hands one :class:`Facts` to every
rule. What more than one rule needs and costs something to work out is derived here, lazily and
once: the speculative algorithm, the algorithms and draft classes the engine knows, the layers the
target captures (the offset rule evaluated from the box's own source), the weight analysis (the
checkpoint's names through ``load_weights``) and the token map (``d2t``/``t2d`` by byte range).

Tests and callers without a box build one with :meth:`Facts.of` (any derived fact can be given
directly, e.g. ``capture=``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from workbench.checkpoint import DraftFacts, TargetFacts, read_tensor_data
from workbench.engine.flag_table import FlagTable, flag_table_for_engine
from workbench.engine.launch import LaunchCommand
from workbench.engine.codepath import eagle_worker
from workbench.engine.drafts import LoadWeights, load_weights_facts, registered_draft_classes, worker_lm_head_source
from workbench.engine.load_weights import WeightAnalysis, analyse_weights, analyse_with_source, config_vs_tensors
from workbench.engine.modelled import (
    DRAFT_CLASS_FILES,
    MODELLED_EAGLE3_DRAFT_CLASSES,
    MODELLED_SPEC_ALGORITHMS,
    SGLANG_VERSION,
    modelled_capture,
)
from workbench.engine.source import CaptureRule, EngineSource
from workbench.errors import CheckpointError

__all__ = ["Facts", "UnreadableInput", "Capture", "WeightAnalysis", "TokenMap", "ids_ok"]


def _vllm_spec_dict(launch: Any) -> dict | None:
    """vLLM's ``--speculative-config`` JSON as a dict, from the launch's engine-neutral
    ``speculative_config`` (``.raw``) when it has one, else the flag's text; ``None`` when absent
    or not a JSON object."""
    try:
        sc = getattr(launch, "speculative_config", None)
    except ValueError:  # SpeculativeConfigError
        return None
    if callable(sc):
        sc = sc()
    raw = getattr(sc, "raw", None) if sc is not None else None
    if isinstance(raw, dict):
        return raw
    try:
        text = launch.get("--speculative-config")
    except Exception:  # noqa: BLE001 - a launch object without get(): no spec config
        return None
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        return None
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def ids_ok(ids: Any) -> bool:
    """True when ``ids`` is a non-empty list of ints (a usable ``eagle_aux_hidden_state_layer_ids``)."""
    return isinstance(ids, list) and bool(ids) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)


@dataclass(frozen=True)
class UnreadableInput:
    """A model the launch command names that could not be read on the box. ``role``: ``"target
    model"`` or ``"draft model"``; ``value``: as written in the command; ``how``: why (the path
    lookup's explanation, or the config error); ``kind``: ``"repo-not-in-cache"`` (a Hugging Face
    repo id the box's cache lacks), ``"path"`` (no such directory) or ``"config"`` (the config is
    missing, unreadable or not JSON: ``error`` holds it); ``box``: the box's name."""

    role: str
    value: str
    how: str
    kind: str
    box: str
    error: CheckpointError | None = None


@dataclass(frozen=True)
class Capture:
    """The aux layers the target captures for this draft: ``rule`` (the evaluated
    :class:`~workbench.engine.source.CaptureRule`, ``None`` when it could not be worked out) and,
    when the target class exists in the engine source but has no ``set_eagle3_layers_to_capture``,
    ``class_without_capture`` = ``(file relative to the engine root, line)``."""

    rule: CaptureRule | None
    class_without_capture: tuple[str, int] | None = None


@dataclass(frozen=True)
class TokenMap:
    """The draft's token map as the engine will use it: ``vocab`` (the target vocab bounding it),
    ``draft_vocab`` (``draft_vocab_size``), ``d2t_name``/``t2d_name`` (checkpoint names, ``None``
    when absent), ``d2t``/``t2d`` (the arrays, read by byte range), ``error`` (a read that failed:
    the checkpoint is unreadable there), ``skipped`` (why it was not read)."""

    vocab: int | None
    draft_vocab: int | None
    d2t_name: str | None
    t2d_name: str | None
    d2t: np.ndarray | None = None
    t2d: np.ndarray | None = None
    error: CheckpointError | None = None
    skipped: str | None = None


@dataclass
class Facts:
    """Everything the static rules read. ``launch``: the command checked (``None`` for checks of a
    draft alone); ``target`` / ``draft``:
    their facts (``None`` when not named or not readable: ``unreadable`` says why); ``engine``:
    the engine source on the box (``None`` when not located: the rules then use SGLang 0.5.23's
    facts, :mod:`workbench.engine.modelled`, and say so); ``engine_version``; ``box`` and
    ``timeout``: for the reads a derived fact needs (the token map); ``notes``: what a human should
    know about how the facts were read (appended to by derivations too)."""

    launch: LaunchCommand | None
    target: TargetFacts | None = None
    draft: DraftFacts | None = None
    engine: EngineSource | None = None
    engine_version: str | None = None
    unreadable: list[UnreadableInput] = field(default_factory=list)
    box: Any = None
    timeout: float = 30.0
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, launch: LaunchCommand | str | None, draft: DraftFacts | None = None, target: TargetFacts | None = None,
           **given: Any) -> "Facts":
        """Facts from values at hand (tests, callers that read the configs themselves): fields by
        name, and any derived fact (``capture``, ``weights``, ``token_map``, ``algorithms``,
        ``draft_classes``) given directly instead of worked out."""
        launch = LaunchCommand.parse(launch) if isinstance(launch, str) else launch
        derived = {k: given.pop(k) for k in list(given) if k in ("capture", "weights", "token_map", "algorithms",
                                                                  "draft_classes", "flag_table", "draft_registry",
                                                                  "engine_name", "speculative_method",
                                                                  "draft_model_value", "vllm", "vllm_runner",
                                                                  "speculative_config_error",
                                                                  "draft_load_weights", "vllm_weights")}
        facts = cls(launch, target=target, draft=draft, **given)
        for k, v in derived.items():
            if k == "capture" and (v is None or isinstance(v, CaptureRule)):
                v = Capture(v)
            setattr(facts, k, v)
        return facts

    # -- the launch command -----------------------------------------------------------------------

    @cached_property
    def engine_name(self) -> str | None:
        """The engine the launch runs: ``"sglang"``, ``"sandbox"`` (the embedded box standing in
        for SGLang) or ``"vllm"`` (:attr:`workbench.engine.launch.LaunchCommand.engine`); ``None``
        without a launch (every rule runs then). Settable (tests, callers without a command)."""
        return getattr(self.launch, "engine", None) if self.launch is not None else None

    @cached_property
    def speculative_method(self) -> str | None:
        """The speculative method as written: vLLM's ``--speculative-config`` ``method``, SGLang's
        ``--speculative-algorithm`` (the launch's engine-neutral ``speculative_method`` when it has
        one); ``None`` when absent. Settable."""
        launch = self.launch
        if launch is None:
            return None
        try:
            value = getattr(launch, "speculative_method", None)
        except ValueError:  # SpeculativeConfigError: rule speculative-config-unreadable says so
            return None
        if callable(value):
            value = value()
        if isinstance(value, str) and value:
            return value
        if self.engine_name == "vllm":
            spec = _vllm_spec_dict(launch)
            m = spec.get("method") if spec else None
            return m if isinstance(m, str) else None
        return self.raw_algorithm

    @cached_property
    def draft_model_value(self) -> str | None:
        """The draft model as the launch names it (a path or a repo id): vLLM's
        ``--speculative-config`` ``model``, SGLang's ``--speculative-draft-model-path``. Settable."""
        launch = self.launch
        if launch is None:
            return None
        try:
            value = getattr(launch, "draft_model", None)
        except ValueError:  # SpeculativeConfigError: rule speculative-config-unreadable says so
            return None
        if isinstance(value, str) and value:
            return value
        if self.engine_name == "vllm":
            spec = _vllm_spec_dict(launch)
            m = spec.get("model") if spec else None
            return m if isinstance(m, str) and m else None
        v = launch.get("--speculative-draft-model-path")
        return v if isinstance(v, str) and v else None

    @cached_property
    def speculative_config_error(self) -> Any:
        """The :class:`workbench.errors.SpeculativeConfigError` reading the launch's vLLM
        ``--speculative-config`` raises (not JSON, not an object), ``None`` when it reads (or the
        launch is not vLLM's). Settable."""
        if self.launch is None or self.engine_name != "vllm":
            return None
        from workbench.errors import SpeculativeConfigError

        try:
            getattr(self.launch, "speculative_config", None)
        except SpeculativeConfigError as exc:
            return exc
        return None

    @cached_property
    def vllm_runner(self) -> str | None:
        """vLLM's model runner for this launch when its env decides it: ``VLLM_USE_V2_MODEL_RUNNER``
        ``1``/``true`` → ``"v2"``, ``0``/``false`` → ``"v1"`` (vLLM 0.32.0 ``config/vllm.py``
        ``use_v2_model_runner``); ``None`` when unset (chosen at start-up: V2 where Triton runs and
        nothing unsupported is asked, else V1). Settable."""
        env = dict(getattr(self.launch, "env", ()) or ()) if self.launch is not None else {}
        value = str(env.get("VLLM_USE_V2_MODEL_RUNNER", "")).strip().lower()
        return "v2" if value in ("1", "true") else "v1" if value in ("0", "false") else None

    @cached_property
    def vllm(self) -> Any:
        """vLLM's own facts (:class:`workbench.rules.vllm_engine.VllmEngine`): read from the box's
        vLLM by the doctor, else vLLM 0.32.0's shipped table. Settable."""
        from workbench.rules.vllm_engine import shipped_vllm_engine

        return shipped_vllm_engine()

    @property
    def raw_algorithm(self) -> str | None:
        """``--speculative-algorithm`` as written (``None`` when absent or not a string)."""
        if self.launch is None or self.engine_name == "vllm":
            return None
        raw = self.launch.get("--speculative-algorithm")
        return raw if isinstance(raw, str) else None

    @property
    def algorithm(self) -> str | None:
        """The algorithm as the engine resolves it: upper-cased, ``NEXTN`` → ``EAGLE`` (SGLang 0.5.23
        ``srt/arg_groups/speculative_hook.py``); on a vLLM launch its method upper-cased (``eagle3`` →
        ``EAGLE3``), so the engine-neutral rules read one name."""
        if self.engine_name == "vllm":
            m = self.speculative_method
            return m.upper() if isinstance(m, str) else None
        raw = self.raw_algorithm
        if raw is None:
            return None
        up = raw.upper()
        return "EAGLE" if up == "NEXTN" else up

    # -- what the engine knows ----------------------------------------------------------------------

    @cached_property
    def flag_table(self) -> FlagTable:
        """The launch flags of the box's engine: read from its own source (``srt/server_args.py``,
        ``srt/arg_groups/fields/*.py``; :func:`workbench.engine.flag_table.read_flag_table`, cached
        per engine for the process), else the shipped SGLang 0.5.23 table (``origin == "shipped"``;
        why is added to :attr:`notes`). The sandbox's launcher takes SGLang 0.5.23's flags: the shipped table."""
        if self.launch is not None and self.launch.engine == "sandbox":
            return flag_table_for_engine(None)
        return flag_table_for_engine(self.engine, notes=self.notes)

    @cached_property
    def algorithms(self) -> tuple[frozenset, str]:
        """``(names, source)``: the algorithm names the engine's ``SpeculativeAlgorithm.from_string``
        accepts, read from the box's source, else SGLang 0.5.23's."""
        known = self.engine.spec_algorithms() if self.engine is not None else None
        if known is None:
            return (MODELLED_SPEC_ALGORITHMS, f"modelled: sglang {SGLANG_VERSION} srt/speculative/spec_info.py "
                                              "SpeculativeAlgorithm, spec_registry.py _RESERVED_ALIASES")
        return frozenset(known[0]), known[1]

    @cached_property
    def algorithm_choices(self) -> tuple[list[str], str] | None:
        """``(choices, source)`` when the box's argparse restricts ``--speculative-algorithm`` to a
        case-sensitive list (SGLang ≤ 0.5.9 ``srt/server_args.py``:
        :meth:`workbench.engine.source.EngineSource.spec_algorithm_choices`); ``None`` when it does
        not (0.5.12 on) or the source is not on the box."""
        return self.engine.spec_algorithm_choices() if self.engine is not None else None

    @cached_property
    def draft_registry(self) -> dict | None:
        """``{class: DraftClass}``: the draft classes the box's engine registers
        (:func:`workbench.engine.drafts.registered_draft_classes`, read from its source): under
        EAGLE3 the EAGLE-3 drafts, else the EAGLE-3 and EAGLE-1/2 drafts (scope ``eagle``: MTP heads
        are read only when the draft declares one), plus the draft's declared class whatever it
        is; ``None`` without engine source (or when it could not be read: a
        note says why)."""
        if self.engine is None:
            return None
        scope = "eagle3" if self.algorithm == "EAGLE3" else "eagle"
        try:
            reg = registered_draft_classes(self.engine, scope=scope, also=(self.draft_architecture or "",))
        except Exception as exc:  # noqa: BLE001 - a box error reading the source: reported, modelled facts used
            self.notes.append(f"could not read the draft classes from {self.engine.root}/srt/models "
                              f"({type(exc).__name__}: {exc}); SGLang {SGLANG_VERSION}'s are used")
            return None
        if reg is not None and "__skipped__" in reg:
            self.notes.append(f"draft classes: {reg.pop('__skipped__').why}")
        return reg

    @cached_property
    def draft_classes(self) -> tuple[dict | None, str]:
        """``(registered, source)``: the draft classes the engine registers for this algorithm
        → their files: the EAGLE-3 drafts for EAGLE3, the drafts of :attr:`draft_registry` otherwise
        (:attr:`draft_registry`); ``None`` when unknown (no engine source, not EAGLE3); without
        engine source under EAGLE3, SGLang 0.5.23's (modelled)."""
        reg = self.draft_registry
        registered = None
        if reg is not None:
            registered = {n: d.file for n, d in reg.items() if d.eagle3 or self.algorithm != "EAGLE3"}
        source = (f"{self.engine.root}/srt/models EntryClass (draft classes read from the source: "
                  f"{'EAGLE-3' if self.algorithm == 'EAGLE3' else 'EAGLE-3 and EAGLE'} drafts)"
                  if reg is not None else f"modelled sglang {SGLANG_VERSION}")
        if registered is None and self.algorithm == "EAGLE3":
            registered = {c: DRAFT_CLASS_FILES[c] for c in MODELLED_EAGLE3_DRAFT_CLASSES}
        return registered, source

    @cached_property
    def draft_load_weights(self) -> LoadWeights | None:
        """The declared draft class's ``load_weights`` read from the box's source
        (:func:`workbench.engine.drafts.load_weights_facts`), when the engine registers that class;
        ``None`` otherwise (no source: the rules use SGLang 0.5.23's ``LlamaForCausalLMEagle3``,
        modelled). A class whose source cannot be read is a note, never an exception."""
        reg, arch = self.draft_registry, self.draft_architecture
        if reg is None or arch not in reg:
            return None
        try:
            return load_weights_facts(self.engine, arch, reg[arch].file)
        except Exception as exc:  # noqa: BLE001 - reported; the modelled facts are used where they apply
            self.notes.append(f"could not read {arch}.load_weights from {self.engine.root}/{reg[arch].file} "
                              f"({type(exc).__name__}: {exc})")
            return None

    @property
    def draft_architecture(self) -> str | None:
        return self.draft.architectures[0] if self.draft is not None and self.draft.architectures else None

    @property
    def target_architecture(self) -> str | None:
        return self.target.architectures[0] if self.target is not None and self.target.architectures else None

    @property
    def draft_has_eagle_layout(self) -> bool:
        """The checkpoint holds EAGLE tensors (``midlayer.*``, ``fc.*``, ``model.fc.*``)."""
        return bool(self.draft is not None and self.draft.tensors) and any(
            n.startswith(("midlayer.", "fc.", "model.fc.")) for n in self.draft.tensors)

    @property
    def draft_class_unknown(self) -> bool:
        """The draft declares a class the engine does not register as an EAGLE(-3) draft, while the
        launch (EAGLE3) or the checkpoint (EAGLE tensors) says it is one: the engine would build the
        wrong model (rule ``unknown-draft-architecture``; the weight rules then do not apply)."""
        registered, _ = self.draft_classes
        return (self.draft is not None and registered is not None
                and (self.algorithm == "EAGLE3" or self.draft_has_eagle_layout)
                and self.draft_architecture not in registered)

    # -- aux capture ------------------------------------------------------------------------------

    @cached_property
    def capture(self) -> Capture | None:
        """The layers the target captures for the draft's ids (EAGLE3 with both configs read and
        the target's layer count known; else ``None``): the target class's
        ``set_eagle3_layers_to_capture`` evaluated from the box's source, else SGLang 0.5.23's rule
        (:func:`workbench.engine.modelled.modelled_capture`; a note says so when the source could
        not be evaluated). Ids the engine's method fails on (strings: ``"1" + 1``) give a rule with
        ``error`` set, never an exception."""
        if self.algorithm != "EAGLE3" or self.draft is None or self.target is None or not self.target.num_hidden_layers:
            return None
        tarch = self.target_architecture or ""
        layers = self.target.num_hidden_layers
        # What the engine passes (SGLang 0.5.23 spec_aux_hidden_state.py): the nested JSON value as
        # written, None only when eagle_config or the key is missing (or null).
        ids = self.draft.aux_layer_ids
        if self.engine is None:
            return Capture(modelled_capture(tarch, layers, ids))
        try:
            rule = self.engine.capture_rule(tarch, layers, ids)
        except Exception as exc:  # noqa: BLE001 - engine code evaluated; reported, modelled rule used
            self.notes.append(f"could not evaluate {tarch}.set_eagle3_layers_to_capture from the box's source "
                              f"({type(exc).__name__}: {exc}); the 0.5.23 rule is used")
            return Capture(modelled_capture(tarch, layers, ids))
        if rule is not None:
            return Capture(rule)
        cls = self.engine.find_class(tarch) if tarch else None
        if cls is None:
            self.notes.append(f"target class {tarch} not found under {self.engine.root}/srt/models" if tarch else
                              f"the target config {self.target.config_path} names no architecture: the layers it "
                              "captures cannot be read from the engine source")
            return Capture(None)
        return Capture(None, (cls[0], cls[1].lineno))

    # -- weights and token map ------------------------------------------------------------------------

    @property
    def weights_checkable(self) -> bool:
        """The weight rules apply: a readable checkpoint of a class the engine registers, whose
        ``load_weights`` was read from the box's source (:attr:`draft_load_weights`), or, without
        the source, of the class they model (``LlamaForCausalLMEagle3``)."""
        if self.draft is None or self.draft.tensors is None or self.draft_class_unknown:
            return False
        lw = self.draft_load_weights
        if lw is not None:
            why = lw.followable
            if why is not None:
                note = f"the weight rules do not run for {lw.cls}: {why}"
                if note not in self.notes:
                    self.notes.append(note)
            return why is None
        return self.draft_registry is None and self.draft_architecture == "LlamaForCausalLMEagle3"

    @cached_property
    def weights(self) -> WeightAnalysis | None:
        """The checkpoint's tensors through ``load_weights``, when :attr:`weights_checkable`: the
        class's own ``load_weights`` as read from the box's source
        (:func:`workbench.engine.load_weights.analyse_with_source`), else SGLang 0.5.23's
        ``LlamaForCausalLMEagle3`` modelled (:func:`workbench.engine.load_weights.analyse_weights`)."""
        if not self.weights_checkable:
            return None
        lw = self.draft_load_weights
        if lw is None:
            return analyse_weights(self.draft)
        # the worker's head and embedding sharing follows the algorithm: under anything but EAGLE3 it
        # takes both from the target (SGLang eagle_worker*.py init_lm_head, its else branch)
        kind = self.draft_registry[self.draft_architecture].kind if self.algorithm == "EAGLE3" else "eagle"
        try:
            launch = self.launch
            # the worker this server runs decides (SGLang 0.5.12 runs EAGLEWorkerV2 by default)
            choice = eagle_worker(self.engine, env=dict(launch.env) if launch is not None else None,
                                  launch_args=list(launch.arg_tokens) if launch is not None else None)
            worker = worker_lm_head_source(self.engine, worker=choice)
        except Exception as exc:  # noqa: BLE001 - reported; the head is then judged without the worker
            self.notes.append(f"could not grep the draft workers for load_lm_head_from_target ({type(exc).__name__}: "
                              f"{exc})")
            worker = None
        for note in lw.notes:
            if note not in self.notes:
                self.notes.append(note)
        try:
            return analyse_with_source(self.draft, lw, kind, worker)
        except Exception as exc:  # noqa: BLE001 - source facts this code does not understand: said, not hidden
            self.notes.append(f"could not follow the checkpoint through {lw.cls}.load_weights as read from "
                              f"{lw.where} ({type(exc).__name__}: {exc})"
                              + ("; SGLang 0.5.23's modelled load_weights is used" if lw.cls == "LlamaForCausalLMEagle3"
                                 else "; the weight rules are not run for this draft"))
            return analyse_weights(self.draft) if lw.cls == "LlamaForCausalLMEagle3" else None

    @cached_property
    def vllm_weights(self) -> WeightAnalysis | None:
        """The checkpoint's tensors through vLLM's own EAGLE-3 weight loading on a vLLM launch
        (:func:`workbench.rules.weights_vllm.vllm_weight_analysis`: read from the box's vLLM, vLLM
        0.32.0's as fallback, a note saying so); ``None`` when not a vLLM ``eagle3`` launch of a
        readable draft whose class is modelled. Settable."""
        if self.engine_name != "vllm":
            return None
        from workbench.rules.weights_vllm import vllm_weight_analysis

        return vllm_weight_analysis(self)

    @cached_property
    def config_vs_tensors(self) -> dict[str, dict[str, Any]]:
        """The draft config's fields that disagree with its own tensor shapes (hidden size,
        intermediate size, layer count, heads where ``head_dim`` makes them unambiguous):
        :func:`workbench.engine.load_weights.config_vs_tensors`, for a ``LlamaForCausalLMEagle3``
        draft when :attr:`weights_checkable` (the layout it reads is that class's); else ``{}``.
        The weight rules' findings are consequences of such a field (``evidence["consequence_of"]``)."""
        if self.engine_name == "vllm":
            # vLLM builds Eagle3LlamaForCausalLM from the config the same way (the same LlamaConfig checks, the
            # weight loader's shape asserts): the same layout is read, for a draft vLLM builds as that class
            from workbench.rules.vllm_source import vllm_draft_class

            if self.draft is None or self.draft.tensors is None or vllm_draft_class(self)[1] != "Eagle3LlamaForCausalLM":
                return {}
            return config_vs_tensors(self.draft)
        if not self.weights_checkable or self.draft_architecture != "LlamaForCausalLMEagle3":
            return {}
        return config_vs_tensors(self.draft)

    @cached_property
    def token_map(self) -> TokenMap | None:
        """The token map the engine will use (needs :attr:`weights`): ``d2t``/``t2d`` read from the
        checkpoint by byte range through ``box`` (``t2d`` also without a ``d2t``: it is what a
        missing ``d2t`` can be rebuilt from). On a vLLM launch, for a draft vLLM builds as
        ``Eagle3LlamaForCausalLM``: the tensor whose name contains ``d2t`` (vLLM 0.32.0
        ``llama_eagle3.py`` ``load_weights``: ``if "d2t" in name``; ``t2d`` names are skipped) and
        ``draft_vocab`` as vLLM sets it (``draft_vocab_size``, else the draft's ``vocab_size``)."""
        draft = self.draft
        if self.engine_name == "vllm":
            from workbench.rules.vllm_source import vllm_draft_class

            if draft is None or draft.tensors is None or vllm_draft_class(self)[1] != "Eagle3LlamaForCausalLM":
                return None
            d2t_name = next((n for n in sorted(draft.tensors) if "t2d" not in n and "d2t" in n), None)
            t2d_name = next((n for n in sorted(draft.tensors) if "t2d" in n), None)
            draft_vocab = draft.draft_vocab_size if draft.draft_vocab_size is not None else draft.vocab_size
        else:
            w = self.weights
            if w is None:
                return None
            d2t_name, t2d_name, draft_vocab = w.d2t_name, w.t2d_name, draft.draft_vocab_size
        vocab = self.target.vocab_size if self.target is not None and self.target.vocab_size else draft.vocab_size
        if d2t_name is not None and vocab is None:
            return TokenMap(vocab, draft_vocab, d2t_name, t2d_name, skipped="no vocab_size in the draft or target config")
        try:
            # the header entries are in the facts already: one byte-range read per tensor
            d2t = read_tensor_data(self.box, draft.tensors[d2t_name], name=d2t_name,
                                   timeout=self.timeout) if d2t_name else None
            t2d = read_tensor_data(self.box, draft.tensors[t2d_name], name=t2d_name,
                                   timeout=self.timeout) if t2d_name else None
        except CheckpointError as exc:
            return TokenMap(vocab, draft_vocab, d2t_name, t2d_name, error=exc)
        return TokenMap(vocab, draft_vocab, d2t_name, t2d_name, d2t, t2d)
