"""The sandbox's config reader (workbench/sandbox/srt/utils/hf_transformers_utils.py) against
transformers': a config.json of the plain form gives a `PlainLlamaConfig` with exactly the instance
attributes transformers' `LlamaConfig` has, for a file transformers reads without a log record or
a warning; every other file is left to transformers (its values, warnings and errors)."""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from pathlib import Path

import pytest

from sandbox_helpers import CONTROL, DRAFT, TARGET
from testkit import faults as fk
from workbench.sandbox.srt.utils import hf_transformers_utils as hfu

transformers = pytest.importorskip("transformers")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _transformers_read(path: Path, auto: bool):
    """(config or the exception raised, [transformers log records >= WARNING and Python warnings])."""
    handler = _Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cfg = (transformers.AutoConfig if auto else transformers.LlamaConfig).from_pretrained(str(path))
            except Exception as exc:  # noqa: BLE001 - compared with what the sandbox's reader does
                cfg = exc
    finally:
        logger.removeHandler(handler)
    said = [r.getMessage() for r in handler.records if r.levelno >= logging.WARNING] + [str(w.message) for w in caught]
    return cfg, said


def _check(path: Path, auto: bool) -> bool:
    """Whether ``path`` is read as plain; when it is, transformers reads it silently to the same
    attributes; when it is not, `get_config` / `get_llama_config` give transformers' result."""
    plain = hfu.read_plain_llama_config(str(path), name_or_path=str(path) if auto else "")
    ref, said = _transformers_read(path, auto)
    if plain is not None:
        assert not isinstance(ref, Exception), ref
        assert said == []
        assert vars(plain) == vars(ref)
        return True
    read = hfu.get_config if auto else hfu.get_llama_config
    if isinstance(ref, Exception):
        with pytest.raises(type(ref)) as got:
            read(str(path))
        assert str(got.value) == str(ref)
    else:
        assert type(read(str(path))) is type(ref) and vars(read(str(path))) == vars(ref)
    return False


def test_committed_configs_are_plain_and_equal():
    assert _check(TARGET, auto=True)
    assert _check(DRAFT, auto=False) and _check(CONTROL, auto=False)
    target = hfu.get_config(str(TARGET))
    assert type(target).__name__ == "PlainLlamaConfig" and target.rope_parameters == {"rope_theta": 10000.0,
                                                                                        "rope_type": "default"}


def test_fault_deployments(tmp_path):
    """Every fault's configs: the plain reader takes all but the two transformers must read (a
    Granite target; a draft whose hidden size transformers refuses), and agrees with it."""
    not_plain = set()
    for name in fk.FAULTS:
        dep = fk.build_deployment(tmp_path / name, *([] if name == "healthy" else [name]))
        if not _check(dep.target_dir, auto=True):
            not_plain.add((name, "target"))
        if not _check(dep.draft_dir, auto=False):
            not_plain.add((name, "draft"))
    assert not_plain == {("target-no-capture", "target"), ("draft-hidden-size", "draft")}
    with pytest.raises(Exception, match=r"The hidden size \(128\) is not a multiple of the number of attention heads"):
        hfu.get_llama_config(str(tmp_path / "draft-hidden-size/draft"))
    granite = hfu.get_config(str(tmp_path / "target-no-capture/target"))
    assert type(granite).__name__ == "GraniteConfig"


OTHER_FORMS = {  # a change to the committed target's config -> whether the plain reader takes it
    "rope-theta-top-level": ({"rope_parameters": None, "rope_theta": 500000.0}, True),
    "no-rope": ({"rope_parameters": None}, True),
    "no-kv-heads-no-head-dim": ({"num_key_value_heads": None, "head_dim": None}, True),
    "torch-dtype": ({"dtype": None, "torch_dtype": "bfloat16"}, True),
    "eagle-keys": ({"draft_vocab_size": 64, "target_hidden_size": 160, "eagle_config": {"x": [1]}}, True),
    "missing-fields": ({"attention_bias": "DROP", "max_position_embeddings": "DROP", "use_cache": "DROP"}, True),
    "mistral": ({"model_type": "mistral"}, False),
    "no-model-type": ({"model_type": "DROP"}, False),
    "unknown-key": ({"foo": 1}, False),
    "generation-key": ({"temperature": 0.7}, False),
    "auto-map": ({"auto_map": {"AutoConfig": "x.Y"}}, False),
    "rope-scaling": ({"rope_scaling": {"type": "linear", "factor": 2.0}}, False),
    "rope-theta-int": ({"rope_parameters": {"rope_theta": 10000, "rope_type": "default"}}, False),
    "rope-extra-key": ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "default", "factor": 2.0}}, False),
    "both-rope-theta": ({"rope_theta": 1e4}, False),
    "bos-out-of-vocab": ({"bos_token_id": 300}, False),
    "odd-head-dim": ({"head_dim": 33}, False),
    "int-eps": ({"rms_norm_eps": 1}, False),
    "bool-size": ({"vocab_size": True}, False),
    "zero-heads": ({"num_attention_heads": 0}, False),
    "str-architectures": ({"architectures": "LlamaForCausalLM"}, False),
    "bad-dtype": ({"dtype": "float8"}, False),
    "float-tag": ({"rms_norm_eps": {"__float__": "NaN"}}, False),
}


@pytest.mark.parametrize("form", sorted(OTHER_FORMS))
def test_other_forms(tmp_path, form):
    change, plain = OTHER_FORMS[form]
    cfg = json.loads((TARGET / "config.json").read_text())
    for k, v in change.items():
        if v == "DROP":
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert _check(tmp_path, auto=True) is plain
    assert _check(tmp_path, auto=False) is plain


def test_unreadable_files_go_to_transformers(tmp_path, monkeypatch):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad/config.json").write_text("{not json")
    (tmp_path / "list").mkdir()
    (tmp_path / "list/config.json").write_text("[1, 2]")
    for d in ("bad", "list", "absent"):
        assert hfu.read_plain_llama_config(str(tmp_path / d)) is None
    assert not _check(tmp_path / "bad", auto=True)
    assert not _check(tmp_path / "absent", auto=True)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")  # transformers would log its info lines
    assert hfu.read_plain_llama_config(str(TARGET)) is None
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "error")
    assert hfu.read_plain_llama_config(str(TARGET)) is not None


def test_field_table_is_the_installed_llama_config():
    fields = {f.name: f.default for f in dataclasses.fields(transformers.LlamaConfig)}
    table = dict(hfu.BASE_FIELDS)
    table.update({k: default for k, (_, default) in hfu.LLAMA_FIELDS.items()})
    assert table == fields
    generation = set(transformers.GenerationConfig._get_default_generation_params())
    for key in hfu.EXTRA_KEYS:  # set as plain attributes by transformers: no property, class attribute, generation key
        assert not hasattr(transformers.LlamaConfig, key) and key not in generation and key not in fields, key
