"""Trial 29 finding 2: a start-up death the doctor predicted is attributed to the findings that said
the launch would not start, whatever its text; vLLM's own heads assert (``num_heads (N) is not
divisible by num_kv_heads (M)``, raised here from the statement of the real vLLM 0.32.0 source) is a
known death of ``draft-config-vs-tensors``; the rule's vLLM message and the consequence mechanisms
name vLLM's code on a vLLM launch, not SGLang's alone."""

from __future__ import annotations

import ast
import json
import shlex
import traceback
from pathlib import Path

import pytest

from remote import connect
from testkit.faults import build_deployment
from testkit.vllm_servers import vllm_python
from workbench.doctor import run_doctor
from workbench.logs.death_signatures import match_signature
from workbench.logs.deaths import attribute, read_death
from workbench.rules import REGISTRY

VLLM_PKG = Path(__file__).resolve().parents[2] / ".venv-vllm/lib/python3.11/site-packages/vllm"
ATTENTION = VLLM_PKG / "model_executor/layers/attention/attention.py"


def _vllm_heads_assert(num_heads: int, num_kv_heads: int) -> str:
    """The traceback of vLLM 0.32.0's own ``assert num_heads % num_kv_heads == 0`` statement
    (Attention.__init__), compiled alone with its file name and line numbers."""
    tree = ast.parse(ATTENTION.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Assert)
                and "num_kv_heads" in ast.unparse(n.test) and "num_heads" in ast.unparse(n.test)
                and "self." not in ast.unparse(n.test))
    code = compile(ast.Module(body=[node], type_ignores=[]), str(ATTENTION), "exec")
    try:
        exec(code, {"num_heads": num_heads, "num_kv_heads": num_kv_heads})
    except AssertionError:
        return traceback.format_exc()
    raise AssertionError("vLLM's heads assert did not fire")


def _vllm_log(tb: str) -> list[str]:
    """``tb`` as vLLM's worker logs it while loading the drafter (as in /tmp/t29r/dead_vllm_kv.log)."""
    return ["(EngineCore_DP0 pid=10) INFO 12-07 10:00:00 [core.py:133] Initializing a V1 LLM engine (v0.32.0)",
            "(Worker pid=11) INFO 12-07 10:00:02 [gpu_model_runner.py:5071] Loading drafter model...",
            *[f"(Worker pid=11) ERROR 12-07 10:00:03 [multiproc_executor.py:953] {line}"
              for line in ("WorkerProc failed to start.\n" + tb).rstrip("\n").split("\n")]]


def _kv_deployment(tmp_path, kv: int):
    """The sandbox deployment, its draft's num_key_value_heads set to ``kv`` (its tensors say 5)."""
    dep = build_deployment(tmp_path / f"dep{kv}")
    path = dep.draft_dir / "config.json"
    cfg = json.loads(path.read_text())
    assert cfg["num_key_value_heads"] != kv
    cfg["num_key_value_heads"] = kv
    path.unlink()
    path.write_text(json.dumps(cfg))
    return dep, cfg


def _vllm_launch(dep) -> str:
    sc = {"method": "eagle3", "model": str(dep.draft_dir), "num_speculative_tokens": 3}
    return shlex.join([str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(dep.target_dir),
                       "--speculative-config", json.dumps(sc)])


def test_vllms_heads_assert_is_a_known_death_of_the_config():
    tb = _vllm_heads_assert(5, 3)
    assert "AssertionError: num_heads (5) is not divisible by num_kv_heads (3)" in tb
    death = read_death(_vllm_log(tb), engine="vllm")
    assert death.exception == "AssertionError: num_heads (5) is not divisible by num_kv_heads (3)"
    assert death.signature.id == "heads-not-divisible-by-kv-heads" and death.step == "load-draft"
    assert death.rules[0] == "draft-config-vs-tensors"
    assert match_signature(death.exception, engine="sglang") is None  # SGLang dies in its loader instead
    got = attribute(death, ["draft-config-vs-tensors"], ["draft-config-vs-tensors"])
    assert got["explained"] and got["rules"] == ["draft-config-vs-tensors"]
    assert got["predicted"] == ["draft-config-vs-tensors"]


def test_a_predicted_death_with_an_unknown_text_is_attributed_to_the_prediction():
    tb = "Traceback (most recent call last):\n  File \"/v/x.py\", line 3, in build\nRuntimeError: zorg failed\n"
    death = read_death(_vllm_log(tb), engine="vllm")
    assert death is not None and death.signature is None
    got = attribute(death, ["draft-config-vs-tensors", "head-dim-mismatch"], ["draft-config-vs-tensors"])
    assert got["explained"] and got["rules"] == ["draft-config-vs-tensors"]
    assert got["why"].startswith("the doctor predicted this launch would not start: draft-config-vs-tensors; "
                                 "the engine's line"), got["why"]
    assert "RuntimeError: zorg failed" in got["why"] and "do not explain" not in got["why"]
    # no finding said it would not start: not explained
    alone = attribute(death, ["draft-config-vs-tensors"])
    assert not alone["explained"] and alone["why"].startswith("a start-up death the rules do not explain")
    assert alone["rules"] == [] and alone["predicted"] == []


@pytest.mark.vllm
def test_vllm_kv_heads_fault_names_the_attention_assert_and_the_death_confirms_it(tmp_path):
    """The doctor on a vLLM launch of a draft whose num_key_value_heads (3) does not divide its
    heads (5): the finding says vLLM dies building attention (not that its loader asserts), it
    prevents the start, and vLLM's own assert text for that config is attributed to it. With kv 1
    (which divides 5) vLLM builds the attention and its weight loader asserts instead."""
    dep, cfg = _kv_deployment(tmp_path, 3)
    rep = run_doctor(connect("local"), _vllm_launch(dep))
    (f,) = [f for f in rep.findings if f.rule == "draft-config-vs-tensors"]
    assert f.prevents_start
    heads = cfg["num_attention_heads"]
    assert f"num_heads ({heads}) is not divisible by num_kv_heads (3)" in f.message, f.message
    assert "building the draft's attention" in f.message and "weight loader asserts" not in f.message
    errors = [x for x in rep.findings if x.severity == "error"]
    death = read_death(_vllm_log(_vllm_heads_assert(heads, 3)), engine="vllm")
    got = attribute(death, [x.rule for x in errors], [x.rule for x in errors if x.prevents_start])
    assert got["explained"] and "draft-config-vs-tensors" in got["rules"]
    assert "draft-config-vs-tensors" in got["predicted"]

    dep1, _ = _kv_deployment(tmp_path, 1)
    (f1,) = [f for f in run_doctor(connect("local"), _vllm_launch(dep1)).findings
             if f.rule == "draft-config-vs-tensors"]
    assert f1.prevents_start and "weight loader asserts" in f1.message and "attention" not in f1.message


def test_consequence_mechanisms_cite_both_engines():
    """The mechanisms of the config and weight links hold on both engines: each names vLLM's source
    as well as SGLang's (a vLLM verdict does not cite srt/models/llama_eagle3.py alone)."""
    links = [c for c in REGISTRY.consequences() if c.cause in ("draft-config-vs-tensors", "weights-dropped")
             or (c.cause == "hidden-size-mismatch" and c.effect != "weights-missing")
             or c.cause == "vocab-size-mismatch"]
    assert links
    for c in links:
        assert "vLLM" in c.mechanism and "SGLang" in c.mechanism, (c.cause, c.effect, c.mechanism)


@pytest.mark.vllm
def test_a_run_attributes_the_death_to_the_doctors_prediction(tmp_path, monkeypatch, free_port):
    """The diagnosis level, no server: a run on the vLLM launch of the kv-heads-3 draft (the
    doctor's real findings, prevents_start) whose as-found start failed with vLLM's own assert (and,
    second, with a line no signature knows): both deaths are explained, attributed to
    draft-config-vs-tensors, and its hypothesis carries the death as evidence — never "a start-up
    death the rules do not explain"."""
    from workbench.diagnosis.deaths import attribute_deaths
    from workbench.diagnosis.results import StartFailure
    from workbench.diagnosis.run import DiagnosisRun

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    dep, cfg = _kv_deployment(tmp_path, 3)
    run = DiagnosisRun.start(launch_command=_vllm_launch(dep), port=free_port, engine="vllm", allow_restart=False,
                             report_dir=tmp_path / "reports")
    try:
        run.check_hypotheses()
        ctx = run.ctx
        assert any(f.rule == "draft-config-vs-tensors" and f.prevents_start for f in ctx.state.findings)
        unknown = "Traceback (most recent call last):\n  File \"/v/x.py\", line 3, in build\nRuntimeError: zorg\n"
        for tb in (_vllm_heads_assert(cfg["num_attention_heads"], 3), unknown):
            death = read_death(_vllm_log(tb), engine="vllm")
            ctx.state.start_failures.append(StartFailure("as-found", _vllm_launch(dep), "died", [], death.exception,
                                                         death=death.to_dict()))
        attribute_deaths(ctx)
        known, other = (f.death["attribution"] for f in ctx.state.start_failures)
        assert known["explained"] and "draft-config-vs-tensors" in known["rules"], known
        assert other["explained"] and "draft-config-vs-tensors" in other["rules"], other
        assert other["why"].startswith("the doctor predicted this launch would not start: "), other["why"]
        hid = ctx.hypotheses.of_rule("draft-config-vs-tensors")
        entry = ctx.ledger.get(hid)
        assert entry.verdict == "confirmed"
        logs = [e.summary for e in entry.evidence if e.kind == "log"]
        assert any("num_heads (5) is not divisible by num_kv_heads (3)" in s for s in logs), logs
        assert not any("do not explain" in s for s in logs) and not any("do not explain" in n for n in run.notes)
    finally:
        run.finish()
