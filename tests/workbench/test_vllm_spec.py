"""vLLM's speculative method names read from its real source (.venv-vllm), the shipped list, the
method check a finding uses, and what vLLM does when no method is written."""

import json
import pathlib

import pytest

from remote import connect
from testkit.vllm_servers import require_vllm
from workbench.engine.launch import LaunchCommand
from workbench.engine.vllm_spec import (MethodNamesError, check_method, check_speculative_keys, infer_method,
                                        parse_method_names, read_method_names, shipped_method_names)
from workbench.sandbox_box import vllm_python


@pytest.fixture
def local_box():
    box = connect("local")
    yield box
    box.close()


def _vllm_root() -> pathlib.Path:
    require_vllm()
    root = pathlib.Path(vllm_python()).parents[1] / "lib"  # not resolved: a venv python links to the base one
    [pkg] = list(root.glob("python3*/site-packages/vllm"))
    return pkg


def test_the_real_source_gives_the_shipped_list(local_box):
    """config/speculative.py of the installed vLLM, read with ast on the box: the shipped list."""
    root = _vllm_root()
    names = read_method_names(local_box, str(root), "0.32.0")
    shipped = shipped_method_names()
    assert (names.methods, names.eagle, names.mtp_aliases, names.config_fields) == (
        shipped.methods, shipped.eagle, shipped.mtp_aliases, shipped.config_fields)
    assert {"method", "model", "num_speculative_tokens", "draft_tensor_parallel_size"} <= set(names.config_fields)
    assert names.origin == "box" and names.source == f"{root}/config/speculative.py"
    # the names the issue lists, and the nesting followed (EagleModelTypes ⊂ SpeculativeMethod)
    assert {"eagle", "eagle3", "mtp", "ngram", "medusa", "mlp_speculator", "draft_model", "suffix"} <= set(names.methods)
    assert {"eagle", "eagle3", "mtp", "dflash"} <= set(names.eagle) <= set(names.methods)
    assert "deepseek_mtp" in names.mtp_aliases and "mtp" not in names.mtp_aliases
    assert shipped.version == "0.32.0" and shipped.origin == "shipped"


def test_an_older_single_file_layout_and_nested_unions(local_box, tmp_path):
    """vLLM releases before the config package declare it in vllm/config.py; `Literal[...] | Literal[...]`
    and a name bound to a plain Literal are followed."""
    (tmp_path / "config.py").write_text(
        'from typing import Literal\n'
        'MTPModelTypes = Literal["deepseek_mtp", "mimo_mtp"]\n'
        'EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]\n'
        'SpeculativeMethod = Literal["ngram", "medusa"] | Literal["mlp_speculator", "draft_model", EagleModelTypes]\n')
    names = read_method_names(local_box, str(tmp_path), "0.9.2")
    assert names.methods == ("ngram", "medusa", "mlp_speculator", "draft_model", "eagle", "eagle3", "deepseek_mtp", "mimo_mtp")
    assert names.mtp_aliases == ("deepseek_mtp", "mimo_mtp") and names.source.endswith("/config.py")
    assert check_method("deepseek_mtp", names).normalised == "mtp"
    assert not check_method("mtp", names).known  # 0.9-style: no plain "mtp" in that list


def test_sources_that_are_not_readable(local_box, tmp_path):
    with pytest.raises(MethodNamesError, match=r"no vLLM speculative config source under .*: tried .*config/speculative.py"):
        read_method_names(local_box, str(tmp_path))
    (tmp_path / "config.py").write_text("SpeculativeMethod = str\n")
    with pytest.raises(MethodNamesError, match="SpeculativeMethod is not a Literal of names this reader follows: str"):
        read_method_names(local_box, str(tmp_path))
    (tmp_path / "config.py").write_text("def (:\n")
    with pytest.raises(MethodNamesError, match="this Python cannot parse it"):
        read_method_names(local_box, str(tmp_path))
    with pytest.raises(MethodNamesError, match="no SpeculativeMethod"):
        parse_method_names("X = 1\n", where="f.py")


@pytest.mark.parametrize("method,known,normalised,suggestion", [
    ("eagle3", True, "eagle3", None),
    ("deepseek_mtp", True, "mtp", None),
    ("EAGLE3", False, None, "eagle3"),
    ("eagle-3", False, None, "eagle3"),
    ("ngrams", False, None, "ngram"),
    ("lookahead", False, None, None),
])
def test_check_method(method, known, normalised, suggestion):
    c = check_method(method)
    assert (c.known, c.normalised, c.suggestion) == (known, normalised, suggestion)
    assert c.evidence["release"] == "0.32.0" and c.evidence["method"] == method
    if not known:
        assert "is not a speculative method of vLLM 0.32.0: vLLM refuses the launch" in c.message
        assert "deepseek_mtp" not in c.message and "eagle3" in c.message  # aliases left out of the list said
        assert (f"did you mean {suggestion!r}" in c.message) == (suggestion is not None)


def test_check_method_from_a_launch_command():
    c = LaunchCommand.parse("vllm serve t -sc '{\"method\": \"EAGLE3\", \"model\": \"/d\"}'")
    res = check_method(c.speculative_config.method_written)
    assert not res.known and res.suggestion == "eagle3"


@pytest.mark.parametrize("model,config,method", [
    (None, None, None),
    ("ngram", None, "ngram"),
    ("yuhuili/EAGLE-LLaMA3-Instruct-8B", None, "eagle"),
    ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", None, "eagle3"),
    ("AngelSlim/Qwen3-8B_eagle3", None, "eagle3"),
    ("/models/draft", None, None),
    ("/models/draft", {"model_type": "medusa"}, "medusa"),
    ("/models/draft", {"model_type": "deepseek_mtp"}, "mtp"),
    ("/models/draft", {"model_type": "llama", "architectures": ["LlamaForCausalLMEagle3"]}, "draft_model"),
])
def test_infer_method(model, config, method):
    got, how = infer_method(model, config)
    assert got == method and how


def test_the_sandbox_draft_without_a_method_would_run_as_a_plain_draft_model():
    """The sandbox's EAGLE-3 draft (models/draft: a path naming no method) with no "method": vLLM
    0.32.0 runs it as 'draft_model' — no aux hidden states."""
    draft = pathlib.Path(__file__).resolve().parents[2] / "workbench" / "sandbox" / "models" / "draft"
    config = json.loads((draft / "config.json").read_text())
    method, how = infer_method(str(draft), config)
    assert method == "draft_model" and "stand-alone" in how


def test_check_speculative_keys():
    raw = {"method": "eagle3", "model": "/d", "num_speculative_token": 3, "tensor_parallel_size": 2,
           "draft_tensor_parallel_size": 0}
    checks = check_speculative_keys(raw)
    assert [(c.key, c.suggestion) for c in checks] == [("num_speculative_token", "num_speculative_tokens"),
                                                       ("tensor_parallel_size", "draft_tensor_parallel_size"),
                                                       ("draft_tensor_parallel_size", None)]
    assert "(SpeculativeConfig forbids extra fields); did you mean 'num_speculative_tokens'?" in checks[0].message
    assert check_speculative_keys({"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}) == []
    from workbench.engine.vllm_spec import MethodNames
    assert check_speculative_keys({"anything": 1}, MethodNames(("eagle",))) == []  # fields unknown: nothing claimed


#: speculative_config objects given to vLLM's real SpeculativeConfig (method ngram needs no model).
REAL_VALIDATION = [
    {"method": "ngram", "num_speculative_tokens": 3},
    {"method": "EAGLE3", "num_speculative_tokens": 3},
    {"method": "ngrams", "num_speculative_tokens": 3},
    {"method": "Ngram", "num_speculative_tokens": 3},
    {"method": "ngram", "num_speculative_tokens": 3, "num_speculative_token": 3},
    {"method": "ngram", "num_speculative_tokens": 3, "tensor_parallel_size": 1},
    {"method": "ngram", "num_speculative_tokens": 0},
    {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
]

REAL_VALIDATE = r"""
import json, sys
from vllm.config.speculative import SpeculativeConfig
out = []
for kw in json.loads(sys.argv[1]):
    try:
        SpeculativeConfig(**kw)
        out.append([])
    except Exception as exc:  # pydantic's ValidationError: the fields it names
        errs = exc.errors() if hasattr(exc, "errors") else [{"loc": ["?"], "type": type(exc).__name__}]
        out.append(sorted({(str(e["loc"][0]) if e.get("loc") else "") + ":" + e["type"] for e in errs}))
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_the_checks_agree_with_vllms_own_validation(local_box):
    """Each object built by vLLM 0.32.0's real SpeculativeConfig: refused exactly when check_method /
    check_speculative_keys say so, for the field they name."""
    require_vllm()
    res = local_box.run([vllm_python(), "-B", "-c", REAL_VALIDATE, json.dumps(REAL_VALIDATION)], timeout=300)
    [line] = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    real = json.loads(line[len("RESULT "):])
    for kw, errors in zip(REAL_VALIDATION, real):
        mine = set()
        if not check_method(kw["method"]).known:
            mine.add("method:literal_error")
        for c in check_speculative_keys(kw):
            mine.add({"num_speculative_token": "num_speculative_token:unexpected_keyword_argument",
                      "tensor_parallel_size": ":value_error",
                      "num_speculative_tokens": "num_speculative_tokens:greater_than"}[c.key])
        assert set(errors) == mine, (kw, errors)
