"""algorithm-mismatch on real public draft configs and the two public reports.

Target configs are built from the public models' facts (model cards / config.json):
hidden size, layer count, vocab.
"""

import json

import pytest

from rule_helpers import LLAMA31_8B, by_rule, deploy, doctor, draft_cfg, launch
from workbench.checkpoint import draft_facts_from, target_facts_from
from workbench.engine.launch import LaunchCommand
from workbench.rules import Facts, Finding, RuleInputError, algorithm_mismatch, check_algorithm_mismatch
from workbench.rules.launch_flags import spec_params_invalid
from workbench_test_helpers import fixture_config, public_report, write_sparse_safetensors


# (draft fixture, target architectures, target hidden, target layers, target vocab, text_config?)
EAGLE3_DRAFTS = {
    "kimi-k2": ("sgl-project__SpecForge__configs_kimi-k2-eagle3.json", "DeepseekV3ForCausalLM", 7168, 61, 163840, False),
    "deepseek-v3": ("sgl-project__SpecForge__configs_deepseek-v3-671b-eagle3.json", "DeepseekV3ForCausalLM", 7168, 61, 129280, False),
    "gpt-oss-20b": ("sgl-project__SpecForge__configs_gpt-oss-20B-eagle3.json", "GptOssForCausalLM", 2880, 24, 201088, False),
    "qwen3-30b-a3b": ("sgl-project__SpecForge__configs_qwen3-30B-eagle3.json", "Qwen3MoeForCausalLM", 2048, 48, 151936, False),
    "mistral-123b": ("vllm-project__speculators__issues_796_comment-config.json", "Mistral3ForConditionalGeneration", 12288, 88, 131072, True),
}


def make_target(tmp_path, arch, hidden, layers, vocab, text_config=False):
    d = tmp_path / "target"
    d.mkdir(exist_ok=True)
    inner = {"hidden_size": hidden, "num_hidden_layers": layers, "vocab_size": vocab}
    cfg = {"architectures": [arch], **({"text_config": inner} if text_config else inner)}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def make_draft(tmp_path, config, fc_shape, extra=None, name="draft"):
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    spec = {"fc.weight": ("BF16", fc_shape), **(extra or {})}
    write_sparse_safetensors(d / "model.safetensors", spec)
    return d


def algo_launch(algo, target, draft, extra=""):
    return LaunchCommand.parse(
        f"python -m sglang.launch_server --model-path {target} --speculative-algorithm {algo} "
        f"--speculative-draft-model-path {draft} --tp 8 {extra}"
    )


@pytest.mark.parametrize("key", sorted(EAGLE3_DRAFTS))
def test_real_eagle3_drafts(box, tmp_path, key):
    fixture, arch, hidden, layers, vocab, text = EAGLE3_DRAFTS[key]
    cfg = fixture_config(fixture)
    target = make_target(tmp_path, arch, hidden, layers, vocab, text)
    draft_hidden = cfg.get("hidden_size") or cfg["transformer_layer_config"]["hidden_size"]
    draft = make_draft(tmp_path, cfg, (draft_hidden, 3 * hidden))
    # healthy: EAGLE3
    assert check_algorithm_mismatch(box, algo_launch("EAGLE3", target, draft)) == []
    # mis-flagged: EAGLE and NEXTN
    for algo in ("EAGLE", "NEXTN", "eagle"):
        (f,) = check_algorithm_mismatch(box, algo_launch(algo, target, draft))
        assert (f.rule, f.severity) == ("algorithm-mismatch", "error")
        assert f.evidence["speculative_algorithm"]["value"] == algo
        assert f.evidence["fc_in_features"]["value"] == 3 * hidden
        assert f.evidence["target_hidden_size"]["value"] == hidden
        assert f.evidence["fc_in_features / target_hidden_size"] == 3.0
        assert "architecture" in f.evidence["eagle3_signals"]
        assert LaunchCommand.parse(f.fix).get("--speculative-algorithm") == "EAGLE3"
        assert LaunchCommand.parse(f.fix).diff(algo_launch(algo, target, draft)) == [
            ("--speculative-algorithm", "EAGLE3", algo)]


def test_pr21272_eagle_flag_with_eagle3_draft(box, tmp_path):
    report = public_report("sglang-pr21272-eagle-flag-with-eagle3-draft")
    # Kimi-K2.5 (public config): multimodal, the language model's facts live in text_config
    target = make_target(tmp_path, "KimiK25ForConditionalGeneration", 7168, 61, 163840, text_config=True)
    cfg = fixture_config("sgl-project__SpecForge__configs_kimi-k2-eagle3.json")
    cfg["architectures"] = report["inputs"]["draft_config"]["architectures"]
    draft = make_draft(tmp_path, cfg, (7168, 21504), {
        "midlayer.self_attn.q_proj.weight": ("BF16", (8192, 14336)),
        "midlayer.hidden_norm.weight": ("BF16", (7168,)),
        "d2t": ("I64", (32000,)), "t2d": ("BOOL", (163840,)), "lm_head.weight": ("BF16", (32000, 7168))})
    cmd = LaunchCommand.parse(report["inputs"]["launch_command"])
    assert cmd.get("--speculative-algorithm") == "EAGLE"
    cmd = cmd.with_flag("--model-path", str(target)).with_flag("--speculative-draft-model-path", str(draft))
    (f,) = check_algorithm_mismatch(box, cmd)
    assert f.evidence["draft_architectures"] == {"value": ["LlamaForCausalLMEagle3"], "source": f"{draft}/config.json: architectures"}
    assert f.evidence["fc_in_features"] == {"value": 21504, "source": f"{draft}/model.safetensors: fc.weight shape [7168, 21504]"}
    assert f.evidence["target_hidden_size"] == {"value": 7168, "source": f"{target}/config.json: text_config.hidden_size"}
    assert f.evidence["eagle_config.eagle_aux_hidden_state_layer_ids"]["value"] == [2, 30, 58]
    assert f.evidence["eagle3_signals"] == ["architecture", "eagle_config.eagle_aux_hidden_state_layer_ids",
                                            "fc_in_features_multiple", "use_aux_hidden_state"]
    assert f.fix == (f"python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 "
                     f"--speculative-draft-model-path {draft} --tp 8 ...")
    assert "21504" in f.message and "EAGLE3" in f.message
    json.dumps(f.to_dict())  # serialisable
    # the fix passes the rule
    assert check_algorithm_mismatch(box, LaunchCommand.parse(f.fix)) == []


def test_each_signal_alone_fires(tmp_path):
    target = target_facts_from("/t", "/t/config.json", {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 128256})
    cmd = algo_launch("EAGLE", "/t", "/d")
    base = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}
    # architecture only, no checkpoint read (as the report's draft_config gives it)
    only_arch = draft_facts_from("/d", "/d/config.json", {"architectures": ["LlamaForCausalLMEagle3"]})
    assert algorithm_mismatch(Facts.of(cmd, only_arch, target))[0].evidence["eagle3_signals"] == ["architecture"]
    only_ec = draft_facts_from("/d", "/d/config.json", {**base, "eagle_config": {"use_aux_hidden_state": True}})
    assert algorithm_mismatch(Facts.of(cmd, only_ec, target))[0].evidence["eagle3_signals"] == ["use_aux_hidden_state"]
    from workbench.checkpoint import TensorInfo

    fc4 = {"fc.weight": TensorInfo("BF16", (4096, 16384), (0, 4096 * 16384 * 2), file="/d/model.safetensors")}
    only_fc = draft_facts_from("/d", "/d/config.json", base, fc4)
    (f,) = algorithm_mismatch(Facts.of(cmd, only_fc, target))
    assert f.evidence["eagle3_signals"] == ["fc_in_features_multiple"]
    assert f.evidence["fc_in_features / target_hidden_size"] == 4.0
    # fc of 2x hidden and nothing else: not EAGLE-3
    fc2 = {"model.fc.weight": TensorInfo("BF16", (4096, 8192), (0, 4096 * 8192 * 2), file="/d/model.safetensors")}
    assert algorithm_mismatch(Facts.of(cmd, draft_facts_from("/d", "/d/config.json", base, fc2), target)) == []
    # no algorithm: speculation off, nothing to say
    plain = LaunchCommand.parse("python -m sglang.launch_server --model-path /t")
    assert algorithm_mismatch(Facts.of(plain, only_arch, target)) == []


def test_eagle214_eagle1_draft_launched_with_eagle3(box, tmp_path):
    report = public_report("eagle-214-eagle1-config-used-for-eagle3")
    cfg = fixture_config("SafeAILab__EAGLE__eagle_train_EAGLE-LLaMA3-Instruct-8B.json")
    assert "draft_vocab_size" not in cfg and report["inputs"]["draft_config"]["draft_vocab_size"] == "(absent)"
    target = make_target(tmp_path, "LlamaForCausalLM", 4096, 32, 128256)  # Llama-3.1-8B-Instruct
    draft = make_draft(tmp_path, cfg, (4096, 8192), {
        "layers.0.self_attn.q_proj.weight": ("F16", (4096, 4096)), "embed_tokens.weight": ("F16", (128256, 4096))})
    (f,) = check_algorithm_mismatch(box, algo_launch("EAGLE3", target, draft))
    assert f.evidence["fc_in_features"]["value"] == 8192
    assert f.evidence["draft_hidden_size"] == {"value": 4096, "source": f"{draft}/config.json: hidden_size"}
    assert f.evidence["fc_in_features / draft_hidden_size"] == 2.0
    assert f.evidence["draft_vocab_size"]["value"] is None
    assert LaunchCommand.parse(f.fix).get("--speculative-algorithm") == "EAGLE"
    assert "EAGLE-1/2" in f.message
    # the same draft launched as EAGLE is fine
    assert check_algorithm_mismatch(box, algo_launch("EAGLE", target, draft)) == []


def test_unreadable_target_and_missing_draft(box, tmp_path):
    cfg = fixture_config("sgl-project__SpecForge__configs_qwen3-30B-eagle3.json")
    draft = make_draft(tmp_path, cfg, (2048, 6144))
    (f,) = check_algorithm_mismatch(box, algo_launch("EAGLE", "Qwen/Qwen3-30B-A3B", draft))
    assert f.evidence["target_hidden_size"]["value"] == 2048
    assert "target config not read" in f.evidence["target_hidden_size"]["source"]
    assert "config file not found" in f.evidence["target_config_error"]
    with pytest.raises(RuleInputError, match="no --speculative-draft-model-path"):
        check_algorithm_mismatch(box, LaunchCommand.parse("python -m sglang.launch_server --model-path x --speculative-algorithm EAGLE"))


def test_finding_validates_severity():
    with pytest.raises(ValueError, match="severity"):
        Finding("x", "fatal", "m")
    assert Finding("x", "info", "m").to_dict() == {"rule": "x", "severity": "info", "message": "m", "evidence": {},
                                                  "fix": None, "prevents_start": False}


@pytest.mark.parametrize("extra, severity, text", [
    ("--speculative-eagle-topk 1 --speculative-num-draft-tokens 4", "error", "bare assert"),
    ("--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 8", "warning", "rewrites"),
    ("--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8 --page-size 16 "
     "--attention-backend flashmla", "error", "attention backend"),
    ("--speculative-num-steps x", "error", "not an integer"),
    ("--speculative-num-steps -2 --speculative-eagle-topk 1", "error", "negative"),
])
def test_spec_params_invalid(extra, severity, text):
    cmd = LaunchCommand.parse(f"python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3 {extra}")
    found = spec_params_invalid(Facts.of(cmd))
    assert [(f.rule, f.severity) for f in found] == [("spec-params-invalid", severity)] and text in found[0].message
    if severity == "warning":
        assert LaunchCommand.parse(found[0].fix).get("--speculative-num-draft-tokens") == "4"


@pytest.mark.parametrize("extra, steps, ndt, topk", [
    ("--speculative-num-steps 0 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4", "3", "4", "1"),
    ("--speculative-num-steps 0 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6", "5", "6", "1"),
    ("--speculative-num-steps 0", "3", "4", None),
    ("--speculative-num-steps 0 --speculative-eagle-topk 1 --speculative-num-draft-tokens 1", "3", "4", "1"),
    ("--speculative-num-steps 0 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8", "3", "8", "4"),
])
def test_spec_steps_zero_disables_drafting_and_the_fix_drafts_a_chain(extra, steps, ndt, topk):
    """SGLang 0.5.23 accepts steps 0 and drafts nothing (accept length 1.00, no error): one error
    finding whose fix drafts ``draft tokens - 1`` steps in a chain, else 3; a tree (topk > 1)
    keeps its draft tokens."""
    cmd = LaunchCommand.parse(f"python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3 {extra}")
    [f] = spec_params_invalid(Facts.of(cmd))
    assert (f.rule, f.severity) == ("spec-params-invalid", "error") and "disables drafting" in f.message
    fixed = LaunchCommand.parse(f.fix)
    assert (fixed.get("--speculative-num-steps"), fixed.get("--speculative-num-draft-tokens"),
            fixed.get("--speculative-eagle-topk")) == (steps, ndt, topk)
    assert spec_params_invalid(Facts.of(fixed)) == []


def test_unknown_algorithm_name_from_the_engine_source(box, tmp_path, sglang_source):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    rep = doctor(box, launch(t, d, "EAGLE-3"), sglang_source)
    f = by_rule(rep, "spec-params-invalid")
    assert f.severity == "error" and "EAGLE3" in f.evidence["engine_algorithms"]["value"]
    assert "srt/speculative/spec_info.py:" in f.evidence["engine_algorithms"]["source"]
    assert "spec-params-invalid" not in doctor(box, launch(t, d, "nextn"), sglang_source).rules


def test_launch_flag_unknown_names_the_typo_and_the_flag_meant():
    from workbench.rules.launch_flags import launch_flag_unknown
    from workbench.engine.launch import LaunchCommand

    typo = LaunchCommand.parse("python -m sglang.launch_server --model-path /m --speculative-algoritm EAGLE3 "
                               "--tp 8 --trust-remote-code")
    [f] = launch_flag_unknown(Facts.of(typo, engine_version="0.5.23"))
    assert (f.rule, f.severity) == ("launch-flag-unknown", "error")
    assert f.evidence["unknown_flags"]["value"] == ["--speculative-algoritm"]
    assert "did you mean --speculative-algorithm?" in f.message
    assert "--speculative-algorithm EAGLE3" in f.fix and "--speculative-algoritm" not in f.fix
    # another engine version might define it: a warning, not an error
    assert launch_flag_unknown(Facts.of(typo, engine_version="0.6.0"))[0].severity == "warning"
    # real flags, aliases and unique prefixes (--tp) are not findings
    ok = LaunchCommand.parse("python -m sglang.launch_server --model /m --speculative-algorithm EAGLE3 --tp 8 "
                             "--speculative-draft-model /d --context-length 4096")
    assert launch_flag_unknown(Facts.of(ok, engine_version="0.5.23")) == []
    # the sandbox launcher takes SGLang's flags and refuses the others like SGLang: an error whatever
    # version the box reports
    sandbox = LaunchCommand.parse("python -m workbench.sandbox.launch_server --model-path /m "
                                  "--speculative-algoritm EAGLE3")
    [g] = launch_flag_unknown(Facts.of(sandbox, engine_version=None))
    assert (g.rule, g.severity) == ("launch-flag-unknown", "error") and "--speculative-algorithm EAGLE3" in g.fix


def test_unknown_algorithm_name_is_an_error(tmp_path):
    """A misspelled algorithm is caught from the names the box's engine source defines (the
    sandbox mirrors SGLang's spec_info.py), else from the names modelled from 0.5.23."""
    from remote import connect
    from workbench.sandbox_box import sandbox_launch_command
    from workbench.doctor import run_doctor
    from workbench.engine.launch import LaunchCommand

    text = sandbox_launch_command(port=30123).replace("--speculative-algorithm EAGLE ",
                                                      "--speculative-algorithm EAGEL3 ")
    with connect("local", state_dir=tmp_path / "state") as box:
        report = run_doctor(box, LaunchCommand.parse(text), engine_root=None)
    bad = [f for f in report.findings if f.rule == "spec-params-invalid"]
    assert bad and "EAGEL3" in bad[0].message and bad[0].severity == "error"


def test_draft_path_missing():
    """EAGLE/EAGLE3 without a draft path: an error for a target without an MTP head, nothing for a
    target whose checkpoint carries one (SGLang fills the path with the target's), nothing
    without speculative decoding."""
    from workbench.checkpoint import target_facts_from
    from workbench.rules import draft_path_missing

    llama = target_facts_from("/t", "/t/config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096})
    ds = target_facts_from("/t", "/t/config.json", {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168})
    cmd = "python -m sglang.launch_server --model-path /t --speculative-algorithm EAGLE3 --speculative-num-steps 3"
    [f] = draft_path_missing(Facts.of(cmd, target=llama))
    assert f.rule == "draft-path-missing" and f.severity == "error"
    assert f.evidence["target_architecture"] == {"value": "LlamaForCausalLM", "source": "/t/config.json: architectures"}
    assert "--speculative-draft-model-path" in f.fix
    assert draft_path_missing(Facts.of(cmd, target=ds)) == []
    assert draft_path_missing(Facts.of(cmd + " --speculative-draft-model-path /d", target=llama)) == []
    assert draft_path_missing(Facts.of("python -m sglang.launch_server --model-path /t", target=llama)) == []
    # NEXTN is EAGLE: same rule; the target unread says "architecture unknown"
    [g] = draft_path_missing(Facts.of(cmd.replace("EAGLE3", "NEXTN")))
    assert "architecture unknown" in g.message


def test_model_path_missing():
    """argparse's required --model-path: a finding (no longer an error the doctor stops on)."""
    from workbench.rules.launch_flags import model_path_missing

    [f] = model_path_missing(Facts.of("python -m sglang.launch_server --speculative-algorithm EAGLE3"))
    assert f.rule == "model-path-missing" and f.severity == "error" and "required" in f.message
    assert f.fix.startswith("add --model-path")
    assert model_path_missing(Facts.of("python -m sglang.launch_server --model /t")) == []  # the alias


# --speculative-algorithm choices, by hand (grep -n -A4 '"--speculative-algorithm"' srt/server_args.py):
# 0.4.6:862, 0.4.8:1108, 0.4.10:1279 choices=["EAGLE", "EAGLE3", "NEXTN"]; 0.5.2:1536 adds STANDALONE;
# 0.5.4:2413 and 0.5.9:3925 add NGRAM; 0.5.12 on: no choices (type=str, upper-cased, from_string decides).
ALGO_CHOICES = {"0.4.6": 862, "0.4.8": 1108, "0.4.10": 1279, "0.5.2": 1536, "0.5.4": 2413, "0.5.9": 3925}


@pytest.mark.parametrize("version, algo, refused", [
    ("0.4.6", "eagle3", True), ("0.4.6", "NEXTN", False), ("0.4.6", "STANDALONE", True),
    ("0.4.8", "Eagle3", True), ("0.4.10", "EAGLE3", False), ("0.5.2", "STANDALONE", False),
    ("0.5.2", "NGRAM", True), ("0.5.9", "eagle3", True), ("0.5.9", "NGRAM", False),
    ("0.5.12", "eagle3", False), ("0.5.23", "eagle3", False), ("0.5.23", "nextn", False),
])
def test_algorithm_names_as_each_releases_argparse_takes_them(box, tmp_path, sglang_release, version, algo, refused):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    report = doctor(box, launch(t, d, algo=algo), sglang_release(version), version)
    assert report.rule_failures == []
    hits = [f for f in report.findings if f.rule == "spec-params-invalid"]
    if not refused:
        assert hits == [], [f.message for f in hits]
        return
    (f,) = hits
    assert f.severity == "error" and f.prevents_start
    assert "invalid choice" in f.message and f"--speculative-algorithm {algo}:" in f.message
    assert f.evidence["argparse_choices"]["source"].endswith(f"srt/server_args.py:{ALGO_CHOICES[version]}")
    if algo.upper() in f.evidence["argparse_choices"]["value"]:
        assert LaunchCommand.parse(f.fix).get("--speculative-algorithm") == algo.upper()
