"""Redaction recognises a secret by the flag it IS (issue 26: "redaction must not eat flags").

argparse accepts any unique prefix of an option (``allow_abbrev``), so a launch may spell
``--speculative-num-draft-tokens`` as ``--speculative-num-draft-token`` (not a secret, though its
last word is "token") and ``--api-key`` as ``--api-k`` (a secret, though no word of it says so).
Every spelling below, of both engines, is checked three ways: the command shown
(:meth:`LaunchCommand.to_display`) keeps every non-secret value and no secret, and re-parses to
the same flags; free-text and JSON redaction (the sinks of reports, verdicts and the terminal)
leaves the shown command as it is; the doctor's corrected launch command, run as a user runs
it, keeps ``--speculative-num-draft-token 4`` and no secret.
"""

from __future__ import annotations

import json
import shlex

import pytest

from workbench.engine.launch import LaunchCommand
from workbench.engine.vllm_flags import shipped_vllm_flag_table
from workbench.redact import PLACEHOLDER, Redactor, flag_tables, is_secret_flag

SECRET = "plantedSecret42xyz"  # no token shape: found only by the flag that carries it
SECRET2 = "otherPlanted77secret"

# (launch text, {arg spelling: True when its value is a secret})
SGLANG = [
    (f"python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3 "
     f"--speculative-num-draft-token 4 --api-k {SECRET}",
     {"--speculative-num-draft-token": False, "--api-k": True, "--model-path": False}),
    (f"python -m sglang.launch_server --model-path /m --speculative-num-draft-token=4 --api-k={SECRET} "
     f"--admin-api '{SECRET2}'",
     {"--speculative-num-draft-token": False, "--api-k": True, "--admin-api": True}),
    (f"env HF_TOKEN={SECRET} CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server --model /m "
     f"--speculative-num-draft 4 --ssl-keyfile-pass \"{SECRET2}\" --ssl-keyf /k.pem",
     # --ssl-keyf: SGLang finds it ambiguous (--ssl-keyfile, --ssl-keyfile-password; argparse refuses it):
     # one of the flags it could be is secret, so its value is hidden
     {"--speculative-num-draft": False, "--ssl-keyfile-pass": True, "--ssl-keyf": True}),
    (f"MY_API_KEY='{SECRET} with spaces' sglang serve /m --speculative-num-draft-token 4 "
     f"--max-total-token 100 --api-key {SECRET2} --speculative-token-map /t.pt",
     {"--speculative-num-draft-token": False, "--max-total-token": False, "--api-key": True,
      "--speculative-token-map": False}),
    (f"python -m workbench.sandbox.launch_server --model-path /m --speculative-num-draft-token 4 "
     f"--speculative-eagle-top 1 --api-ke {SECRET}",
     {"--speculative-num-draft-token": False, "--speculative-eagle-top": False, "--api-ke": True}),
]
VLLM = [
    (f"vllm serve /m --max-num-batched-token 100 --api_k {SECRET} --allow-credentials --hf-tok {SECRET2}",
     {"--max-num-batched-token": False, "--api_k": True, "--allow-credentials": False, "--hf-tok": True}),
    ("vllm serve /m --speculative-config '{\"method\":\"eagle3\",\"model\":\"/d\",\"num_speculative_tokens\":3}' "
     f"--kv-transfer-config '{{\"kv_connector\":\"X\",\"kv_connector_extra_config\":{{\"api_key\":\"{SECRET}\"}}}}'",
     {"--speculative-config": False}),
    (f"vllm serve /m --speculative-config.num_speculative_tokens 3 "
     f"--kv-transfer-config.kv_connector_extra_config.api_key {SECRET} --api-key={SECRET2}",
     {"--speculative-config.num_speculative_tokens": False,
      "--kv-transfer-config.kv_connector_extra_config.api_key": True, "--api-key": True}),
    (f"HF_TOKEN={SECRET} python -m vllm.entrypoints.openai.api_server --model /m --max-num-seq 4 "
     f"--api-k {SECRET2} --ssl-key /k.pem",
     {"--max-num-seq": False, "--api-k": True, "--ssl-key": False}),
]
CASES = SGLANG + VLLM


@pytest.mark.parametrize("flag,secret", [
    ("--api-key", True), ("--api-k", True), ("--api", True), ("--admin-api", True), ("--admin-api-key", True),
    ("--ssl-keyfile-pass", True), ("--hf-tok", True), ("--api_k", True),
    ("--speculative-num-draft-token", False), ("--speculative-num-draft-tok", False),
    ("--speculative_num_draft_token", False), ("--max-num-batched-token", False), ("--max-total-token", False),
    ("--ssl-keyfile", False), ("--ssl-keyf", False), ("--ssl-key", False),  # vLLM's --ssl-keyfile: a path
    ("--allow-credentials", False),  # vLLM's CORS switch: takes no value
    ("--speculative-token-map", False), ("--spec", False),
    ("--kv-transfer-config.kv_connector_extra_config.api_key", True),
    ("--speculative-config.num_speculative_tokens", False),
    # no engine defines them: the kind rule on the name
    ("--token", True), ("--db-password", True), ("--num-draft-token", False),
])
def test_a_flag_is_secret_by_what_argparse_resolves_it_to(flag, secret):
    assert is_secret_flag(flag) is secret


def test_against_the_commands_own_table_the_engine_decides():
    """``--ad`` is SGLang's ``--admin-api-key`` but vLLM's ``--additional-config``: the command's
    table says which; free text (no table) takes the secret side."""
    vllm = shipped_vllm_flag_table()
    assert is_secret_flag("--ad", vllm) is False
    assert is_secret_flag("--ad", flag_tables()[0]) is True
    assert is_secret_flag("--ad") is True
    shown = LaunchCommand.parse("vllm serve /m --ad '{\"x\": 1}'").to_display(Redactor())
    assert shown == "vllm serve /m --ad '{\"x\": 1}'"


@pytest.mark.parametrize("text,spellings", CASES, ids=[c[0].split(" --", 1)[0] + f"#{i}" for i, c in enumerate(CASES)])
def test_shown_command_keeps_every_flag_redacts_every_secret_and_reparses(text, spellings):
    cmd = LaunchCommand.parse(text)
    shown = cmd.to_display(Redactor())
    assert SECRET not in shown and SECRET2 not in shown
    again = LaunchCommand.parse(shown)
    assert again.engine == cmd.engine and again.module == cmd.module
    assert [(a.flag, a.spelled, a.equals, a.key, a.status) for a in again.args] == \
           [(a.flag, a.spelled, a.equals, a.key, a.status) for a in cmd.args]
    assert [k for k, _ in again.env] == [k for k, _ in cmd.env]
    seen = set()
    for before, after in zip(cmd.args, again.args):
        if before.spelled in spellings:
            seen.add(before.spelled)
            if spellings[before.spelled]:
                assert after.values == (PLACEHOLDER,) * len(before.values), before.spelled
            else:
                assert after.values == before.values, before.spelled
        elif SECRET not in " ".join(before.values) and SECRET2 not in " ".join(before.values):
            assert after.values == before.values, before.spelled
    assert seen == set(spellings)
    # the sinks (terminal, report HTML, verdict JSON) redact the shown command again: nothing changes
    fresh = Redactor()
    assert fresh.text(shown) == shown
    assert fresh.obj({"fix": {"launch_command": shown}}) == {"fix": {"launch_command": shown}}
    # and the raw text, never learned, loses its secrets to the rules alone
    raw = fresh.text(text)
    assert SECRET not in raw and SECRET2 not in raw
    for spelled, secret in spellings.items():
        if not secret:
            assert spelled in raw


@pytest.mark.parametrize("text,spellings", CASES, ids=[f"#{i}" for i in range(len(CASES))])
def test_learned_from_the_launch_the_secrets_go_everywhere_else_too(text, spellings):
    r = Redactor()
    r.learn_launch(LaunchCommand.parse(text))
    planted = [v for v in (f"{SECRET} with spaces", SECRET, SECRET2) if v in text]
    if len(planted) > 1 and planted[0].startswith(planted[1]):
        planted.pop(1)  # a variable's whole value is what was learned
    line = "[2026-01-01] server args: " + " ".join(planted)
    assert r.text(line) == "[2026-01-01] server args: " + " ".join(PLACEHOLDER for _ in planted)
    # a non-secret value is not learned: `4` of --speculative-num-draft-token stays everywhere
    assert r.text("--speculative-num-draft-tokens 4 steps 4") == "--speculative-num-draft-tokens 4 steps 4"


def test_vllm_json_config_keeps_its_json_and_loses_its_secret():
    text = CASES[len(SGLANG) + 1][0]
    shown = LaunchCommand.parse(text).to_display(Redactor())
    tokens = shlex.split(shown)
    spec = json.loads(tokens[tokens.index("--speculative-config") + 1])
    kv = json.loads(tokens[tokens.index("--kv-transfer-config") + 1])
    assert spec == {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    assert kv == {"kv_connector": "X", "kv_connector_extra_config": {"api_key": PLACEHOLDER}}


@pytest.mark.slow
def test_doctor_corrected_command_keeps_the_abbreviation_and_hides_the_key(cli, tmp_path, state_dir):
    """The reported case, run as a user runs it: ``--speculative-num-draft-token 4`` (argparse's
    prefix) with EAGLE; the corrected launch command (text and ``--json``) keeps it as ``4`` and
    shows the abbreviated ``--api-k`` as ``***``, and re-parses to the same flags."""
    (tmp_path / "m").mkdir()
    launch = (f"python -m sglang.launch_server --model-path {tmp_path / 'm'} --speculative-algorithm EAGLE "
              f"--speculative-draft-model-path {tmp_path / 'd'} --speculative-num-draft-token 4 --api-k {SECRET}")
    env = {"EAGLE_WORKBENCH_STATE_DIR": str(state_dir)}
    text = cli.subprocess("doctor", "--launch", launch, env=env)
    assert SECRET not in text.out + text.err
    line = next(ln for ln in text.out.splitlines() if ln.startswith("corrected launch command: "))
    fixed = line.split(": ", 1)[1]
    assert "--speculative-num-draft-token 4" in fixed and f"--api-k {PLACEHOLDER}" in fixed
    assert "--speculative-num-steps 3" in fixed  # the doctor's fix is there (spec-params: steps for 4 draft tokens)
    res = cli.subprocess("doctor", "--json", "--launch", launch, env=env)
    assert SECRET not in res.out + res.err
    doc = json.loads(res.out)
    for key in ("launch_command", "corrected_launch_command"):
        again = LaunchCommand.parse(doc[key])
        assert again.get("--speculative-num-draft-tokens") == "4"
        assert again.get("--api-key") == PLACEHOLDER
    assert LaunchCommand.parse(doc["corrected_launch_command"]).get("--speculative-num-steps") == "3"
