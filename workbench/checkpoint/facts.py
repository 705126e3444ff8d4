"""The facts the rules need about a draft and a target, read from their configs and safetensors
headers on the box (:mod:`workbench.checkpoint.readers`): :class:`DraftFacts` and
:class:`TargetFacts`, each with ``sources`` naming the file and key every value came from."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.checkpoint.readers import TensorInfo, read_checkpoint_tensors, read_json_config
from workbench.errors import CheckpointUnreadable

__all__ = ["DraftFacts", "TargetFacts", "draft_facts_from", "read_draft_facts", "target_facts_from",
           "read_target_facts"]


def _fc_weight_name(tensors: Mapping[str, TensorInfo]) -> str | None:
    """The draft's fusion projection: ``fc.weight`` under any prefix (``model.fc.weight``),
    never a layer's own ``fc`` (names containing ``layers.`` or ``midlayer``)."""
    candidates = [n for n in tensors if (n == "fc.weight" or n.endswith(".fc.weight"))
                  and "layers." not in n and "midlayer" not in n and len(tensors[n].shape) == 2]
    if not candidates:
        return None
    return min(candidates, key=len)


@dataclass
class DraftFacts:
    """What the rules need to know about a draft model directory.

    Config values (from ``config.json``; SGLang 0.5.23 ``srt/models/llama_eagle3.py`` reads
    ``target_hidden_size`` else ``hidden_size``, ``num_aux_hidden_states`` else
    ``len(eagle_config.eagle_aux_hidden_state_layer_ids)`` else 3, ``draft_vocab_size``):
    ``architectures``, ``model_type``, ``hidden_size`` (top level, else a speculators-format
    ``transformer_layer_config.hidden_size``), ``target_hidden_size`` (as written, may be
    ``None``), ``num_hidden_layers``, ``vocab_size``, ``draft_vocab_size``, ``eagle_config``
    (the nested dict or ``None``), ``aux_layer_ids`` (nested
    ``eagle_config.eagle_aux_hidden_state_layer_ids``, the only place SGLang's capture path
    reads), ``aux_layer_ids_top_level``, ``use_aux_hidden_state``, ``num_aux_hidden_states``.
    Checkpoint values: ``tensors`` (``{name: TensorInfo}``, ``None`` when unreadable),
    ``checkpoint_error`` (the :class:`CheckpointUnreadable`, or ``None``), ``fc_weight_name``,
    ``fc_in_features`` / ``fc_out_features`` (``fc.weight`` is ``(out, in)``).
    ``sources``: ``{fact: "file: key"}`` for every value found.
    """

    path: str
    config_path: str
    config: dict
    architectures: list[str]
    model_type: str | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None
    num_hidden_layers: int | None = None
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    eagle_config: dict | None = None
    aux_layer_ids: Any = None
    aux_layer_ids_top_level: Any = None
    use_aux_hidden_state: bool | None = None
    num_aux_hidden_states: int | None = None
    tensors: dict[str, TensorInfo] | None = None
    checkpoint_error: CheckpointUnreadable | None = None
    fc_weight_name: str | None = None
    fc_in_features: int | None = None
    fc_out_features: int | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def has_eagle3_architecture(self) -> bool:
        """An architecture name contains ``Eagle3`` (``LlamaForCausalLMEagle3``, ...)."""
        return any("Eagle3" in a for a in self.architectures)

    @property
    def effective_target_hidden_size(self) -> int | None:
        """``target_hidden_size`` else ``hidden_size`` (SGLang 0.5.23 llama_eagle3.py)."""
        return self.target_hidden_size if self.target_hidden_size is not None else self.hidden_size

    def aux_count(self) -> tuple[int, str]:
        """``(number of aux states the engine concatenates into fc, where that number comes from)``:
        ``num_aux_hidden_states``, else the length of the nested aux layer ids, else 3 (SGLang 0.5.23
        ``srt/models/llama_eagle3.py``)."""
        if self.num_aux_hidden_states is not None:
            return self.num_aux_hidden_states, str(self.sources.get("num_aux_hidden_states"))
        ids = self.aux_layer_ids
        if isinstance(ids, list) and ids:  # llama_eagle3.py: len(layer_ids) if layer_ids else 3, whatever the entries
            return len(ids), str(self.sources.get("aux_layer_ids"))
        return 3, "llama_eagle3.py default 3"

    def eagle3_signals(self, target_hidden_size: int | None = None) -> dict[str, Any]:
        """Why this looks like an EAGLE-3 draft: ``{signal: value}``, empty if nothing does.

        Signals (``notes/doctor-rules.md``, ``algorithm-mismatch``): an architecture name with
        ``Eagle3``; ``eagle_config.use_aux_hidden_state`` or
        ``eagle_aux_hidden_state_layer_ids`` present (nested or top level); ``fc`` in_features
        = k × target hidden with k ≥ 3 (``target_hidden_size`` argument, else the draft's own
        effective target hidden size).
        """
        out: dict[str, Any] = {}
        eagle3_arch = [a for a in self.architectures if "Eagle3" in a]
        if eagle3_arch:
            out["architecture"] = eagle3_arch
        if self.use_aux_hidden_state is not None:
            out["use_aux_hidden_state"] = self.use_aux_hidden_state
        if self.aux_layer_ids is not None:
            out["eagle_config.eagle_aux_hidden_state_layer_ids"] = self.aux_layer_ids
        if self.aux_layer_ids_top_level is not None:
            out["eagle_aux_hidden_state_layer_ids"] = self.aux_layer_ids_top_level
        th = target_hidden_size or self.effective_target_hidden_size
        if self.fc_in_features and th and self.fc_in_features % th == 0 and self.fc_in_features // th >= 3:
            out["fc_in_features_multiple"] = self.fc_in_features // th
        return out

    @property
    def is_eagle3_like(self) -> bool:
        return bool(self.eagle3_signals())

    @property
    def is_eagle1_like(self) -> bool:
        """fc in_features = 2 × hidden and no ``Eagle3`` architecture (an EAGLE-1/2 head)."""
        return (not self.has_eagle3_architecture and self.fc_in_features is not None
                and self.hidden_size is not None and self.fc_in_features == 2 * self.hidden_size)


@dataclass
class TargetFacts:
    """What the rules need to know about the target model.

    ``hidden_size``, ``num_hidden_layers``, ``vocab_size``, ``max_position_embeddings`` come
    from ``text_config`` when the config has one (multimodal targets such as Kimi-K2.5), else
    from the top level; ``text_config_used`` says which. ``sources``: ``{fact: "file: key"}``.
    """

    path: str
    config_path: str
    config: dict
    architectures: list[str]
    model_type: str | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    text_config_used: bool = False
    sources: dict[str, str] = field(default_factory=dict)


def architectures_of(value: Any) -> list[str]:
    """A config's ``architectures`` as the list of names SGLang looks up (``architectures[0]`` is
    the class it builds): ``[]`` when absent or null, a lone string as a one-name list, and any
    entry that is not a string written as its JSON text (``[1]`` → ``["1"]``, ``5`` → ``["5"]``), so
    the rules see the bogus name the engine would fail on instead of failing on it themselves."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    items = value if isinstance(value, (list, tuple)) else [value]
    return [a if isinstance(a, str) else json.dumps(a, default=str) for a in items]


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def draft_facts_from(path: str, config_path: str, config: dict,
                     tensors: Mapping[str, TensorInfo] | None = None,
                     checkpoint_error: CheckpointUnreadable | None = None,
                     checkpoint_source: str | None = None) -> DraftFacts:
    """Build :class:`DraftFacts` from an already-read config and tensor table."""
    src: dict[str, str] = {}

    def pick(key: str, *, nested: str | None = None) -> Any:
        if key in config and config[key] is not None:
            src[key] = f"{config_path}: {key}"
            return config[key]
        sub = config.get(nested) if nested else None
        if isinstance(sub, dict) and sub.get(key) is not None:
            src[key] = f"{config_path}: {nested}.{key}"
            return sub[key]
        return None

    archs = architectures_of(config.get("architectures"))
    src["architectures"] = f"{config_path}: architectures"
    ec = config.get("eagle_config")
    eagle_config = ec if isinstance(ec, dict) else None
    if "eagle_config" in config:
        src["eagle_config"] = f"{config_path}: eagle_config"
    aux_nested = eagle_config.get("eagle_aux_hidden_state_layer_ids") if eagle_config else None
    if aux_nested is not None:
        src["aux_layer_ids"] = f"{config_path}: eagle_config.eagle_aux_hidden_state_layer_ids"
    aux_top = config.get("eagle_aux_hidden_state_layer_ids")
    if aux_top is not None:
        src["aux_layer_ids_top_level"] = f"{config_path}: eagle_aux_hidden_state_layer_ids"
    use_aux = eagle_config.get("use_aux_hidden_state") if eagle_config else None
    if use_aux is None and config.get("use_aux_hidden_state") is not None:
        use_aux = config["use_aux_hidden_state"]
        src["use_aux_hidden_state"] = f"{config_path}: use_aux_hidden_state"
    elif use_aux is not None:
        src["use_aux_hidden_state"] = f"{config_path}: eagle_config.use_aux_hidden_state"
    facts = DraftFacts(
        path=path, config_path=config_path, config=config, architectures=archs,
        model_type=pick("model_type"),
        hidden_size=_int_or_none(pick("hidden_size", nested="transformer_layer_config")),
        target_hidden_size=_int_or_none(pick("target_hidden_size")),
        num_hidden_layers=_int_or_none(pick("num_hidden_layers", nested="transformer_layer_config")),
        vocab_size=_int_or_none(pick("vocab_size", nested="transformer_layer_config")),
        draft_vocab_size=_int_or_none(pick("draft_vocab_size")),
        eagle_config=eagle_config, aux_layer_ids=aux_nested, aux_layer_ids_top_level=aux_top,
        use_aux_hidden_state=use_aux, num_aux_hidden_states=_int_or_none(pick("num_aux_hidden_states")),
        tensors=dict(tensors) if tensors is not None else None, checkpoint_error=checkpoint_error, sources=src,
    )
    if tensors is not None:
        fc = _fc_weight_name(tensors)
        if fc is not None:
            info = tensors[fc]
            facts.fc_weight_name = fc
            facts.fc_out_features, facts.fc_in_features = info.shape[0], info.shape[1]
            where = checkpoint_source or info.file
            src["fc_in_features"] = src["fc_out_features"] = f"{where}: {fc} shape {list(info.shape)}"
    return facts


def read_draft_facts(box: Any, draft_dir: str, *, timeout: float = 30) -> DraftFacts:
    """Read a draft directory's ``config.json`` and checkpoint headers into :class:`DraftFacts`.

    Raises :class:`ConfigUnreadable` when ``config.json`` cannot be used. An unreadable
    checkpoint does not raise: ``tensors`` is ``None`` and ``checkpoint_error`` holds the
    :class:`CheckpointUnreadable` (the ``checkpoint-unreadable`` rule reports it).
    """
    config_path = posixpath.join(draft_dir, "config.json")
    config = read_json_config(box, config_path, timeout=timeout)
    tensors = None
    err = None
    try:
        tensors = read_checkpoint_tensors(box, draft_dir, timeout=timeout)
    except CheckpointUnreadable as exc:
        err = exc
    return draft_facts_from(draft_dir, config_path, config, tensors, err)


def target_facts_from(path: str, config_path: str, config: dict) -> TargetFacts:
    """Build :class:`TargetFacts` from an already-read config."""
    tc = config.get("text_config")
    use_text = isinstance(tc, dict) and tc.get("hidden_size") is not None
    src: dict[str, str] = {"architectures": f"{config_path}: architectures"}

    def pick(key: str) -> Any:
        if use_text and tc.get(key) is not None:
            src[key] = f"{config_path}: text_config.{key}"
            return tc[key]
        if config.get(key) is not None:
            src[key] = f"{config_path}: {key}"
            return config[key]
        return None

    return TargetFacts(
        path=path, config_path=config_path, config=config, architectures=architectures_of(config.get("architectures")),
        model_type=config.get("model_type"),
        hidden_size=_int_or_none(pick("hidden_size")), num_hidden_layers=_int_or_none(pick("num_hidden_layers")),
        vocab_size=_int_or_none(pick("vocab_size")), max_position_embeddings=_int_or_none(pick("max_position_embeddings")),
        text_config_used=use_text, sources=src,
    )


def read_target_facts(box: Any, target_dir: str, *, timeout: float = 30) -> TargetFacts:
    """Read a target directory's ``config.json`` into :class:`TargetFacts`.

    Raises :class:`ConfigUnreadable`.
    """
    config_path = posixpath.join(target_dir, "config.json")
    return target_facts_from(target_dir, config_path, read_json_config(box, config_path, timeout=timeout))
