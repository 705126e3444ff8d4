import pytest

from workbench.engine.launch import LaunchCommand, LaunchCommandError, canonical_flag

KIMI = (
    "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 SGLANG_LOG_MS=1 python3 -m sglang.launch_server \\\n"
    "  --model-path moonshotai/Kimi-K2.5 --speculative-algorithm EAGLE \\\n"
    "  --speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 --tp 8 --trust-remote-code \\\n"
    "  --speculative-num-steps=3 --host 0.0.0.0 --port 30000\n"
)


def test_parse_env_launcher_and_flags():
    c = LaunchCommand.parse(KIMI)
    assert c.env == (("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"), ("SGLANG_LOG_MS", "1"))
    assert c.launcher == ("python3", "-m", "sglang.launch_server")
    assert (c.engine, c.module) == ("sglang", "sglang.launch_server")
    assert c.get("--speculative-algorithm") == "EAGLE"
    assert c.get("--tp-size") == "8"  # --tp is argparse's unique prefix of --tp-size
    assert c.get("--tensor-parallel-size") == "8"
    assert c.get("--trust-remote-code") is True  # store_true: did not eat --speculative-num-steps
    assert c.get("--speculative-num-steps") == "3"
    assert c.get("--port") == "30000"
    assert c.get("--speculative-eagle-topk") is None
    assert not c.has("--speculative-eagle-topk")
    assert c.positionals == []


def test_aliases_and_field_names():
    assert canonical_flag("--model") == "--model-path"
    assert canonical_flag("--speculative-draft-model") == "--speculative-draft-model-path"
    assert canonical_flag("--tp") == "--tp-size"
    assert canonical_flag("--ep") == "--ep-size"
    assert canonical_flag("--speculative-algo") == "--speculative-algorithm"
    assert canonical_flag("speculative_algorithm") == "--speculative-algorithm"
    c = LaunchCommand.parse("python -m sglang.launch_server --model m --speculative-draft-model d")
    assert c.get("--model-path") == "m"
    assert c.get("speculative_draft_model_path") == "d"


def test_ambiguous_prefix_is_kept_not_raised():
    c = LaunchCommand.parse("python -m sglang.launch_server --model-path m --spec EAGLE")
    (arg,) = c.unresolved()
    assert (arg.flag, arg.status, arg.values) == ("--spec", "ambiguous", ("EAGLE",))
    assert "--speculative-algorithm" in arg.candidates and "--speculative-draft-model-path" in arg.candidates
    assert c.get("--model-path") == "m"
    # 0.5.23 split --cuda-graph-bs into -decode / -prefill: the old spelling is ambiguous there; both
    # candidates take lists, so the values stay with it
    c = LaunchCommand.parse("python -m sglang.launch_server --cuda-graph-bs 1 2 --tp 2")
    (arg,) = c.unresolved()
    assert arg.candidates == ("--cuda-graph-bs-decode", "--cuda-graph-bs-prefill")
    assert arg.values == ("1", "2") and c.get("--tp-size") == "2"
    assert c.get("--cuda-graph-bs") == ["1", "2"] and c.without_flag("--cuda-graph-bs").unresolved() == []
    with pytest.raises(LaunchCommandError, match="ambiguous flag --cuda-graph-bs"):
        canonical_flag("--cuda-graph-bs")
    with pytest.raises(LaunchCommandError, match="ambiguous flag --cuda-graph-bs"):
        c.with_flag("--cuda-graph-bs", [4])


def test_unknown_flag_is_kept_with_its_value():
    c = LaunchCommand.parse("python -m sglang.launch_server --model-path m --speculative-algoritm EAGLE3 --tp 2")
    (arg,) = c.unresolved()
    assert (arg.flag, arg.status, arg.values) == ("--speculative-algoritm", "unknown", ("EAGLE3",))
    assert c.get("--tp-size") == "2"


@pytest.mark.parametrize(
    "text,launcher",
    [
        ("python -m sglang.launch_server --model-path m", ("python", "-m", "sglang.launch_server")),
        ("/opt/venv/bin/python3.11 -u -m sglang.launch_server --model-path m",
         ("/opt/venv/bin/python3.11", "-u", "-m", "sglang.launch_server")),
        ("A=1 python -m sglang.launch_server --model-path m", ("python", "-m", "sglang.launch_server")),
    ],
)
def test_launcher_forms(text, launcher):
    c = LaunchCommand.parse(text)
    assert c.launcher == launcher
    assert c.get("--model-path") == "m"
    assert LaunchCommand.parse(c.to_string()) == c


def test_sglang_serve_positional_model():
    c = LaunchCommand.parse("sglang serve Qwen/Qwen3-8B --speculative-algorithm EAGLE3 --port 30000")
    assert (c.engine, c.module) == ("sglang", "sglang serve")
    assert c.get("--model-path") == "Qwen/Qwen3-8B"
    d = c.with_flag("--model", "other")
    assert d.argv == ["sglang", "serve", "other", "--speculative-algorithm", "EAGLE3", "--port", "30000"]


def test_sandbox_engine():
    c = LaunchCommand.parse(
        "python -m workbench.sandbox.launch_server --model-path t --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path d --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4 --port 31000"
    )
    assert (c.engine, c.module) == ("sandbox", "workbench.sandbox.launch_server")
    assert c.get("--speculative-num-draft-tokens") == "4"


@pytest.mark.parametrize(
    "text",
    ["vllm bench serve --model m", "python -m eagle.evaluation.gen_ea_answer_llama3chat --use-eagle3",
     "python train.py", "A=1 B=2"],
)
def test_not_an_sglang_command(text):
    with pytest.raises(LaunchCommandError, match="not an SGLang launch command"):
        LaunchCommand.parse(text)


def test_unbalanced_quote_reports_column():
    text = "python -m sglang.launch_server --model-path 'abc --port 1"
    with pytest.raises(LaunchCommandError, match=r"unbalanced quote.*column 45") as ei:
        LaunchCommand.parse(text)
    assert ei.value.position == text.index("'")


def test_missing_value():
    with pytest.raises(LaunchCommandError, match=r"--model-path \(token 3\) is missing its value \(before --port\)"):
        LaunchCommand.parse("python -m sglang.launch_server --model-path --port 1")
    with pytest.raises(LaunchCommandError, match="missing its value .at the end"):
        LaunchCommand.parse("python -m sglang.launch_server --port")
    # a value given to a switch is kept (argparse exits 2 on it: the launch-flag-unknown rule says so)
    c = LaunchCommand.parse("python -m sglang.launch_server --trust-remote-code=yes --enable-torch-compile=false")
    assert [(a.flag, a.status, a.values) for a in c.args] == [
        ("--trust-remote-code", "switch-value", ("yes",)), ("--enable-torch-compile", "switch-value", ("false",))]
    assert (c.get("--trust-remote-code"), c.get("--enable-torch-compile")) == (True, False)
    assert c.to_string().endswith("--trust-remote-code=yes --enable-torch-compile=false")
    with pytest.raises(LaunchCommandError, match="empty"):
        LaunchCommand.parse("  # nothing\n")


def test_repeated_flags_last_wins_and_with_flag_keeps_position():
    c = LaunchCommand.parse(
        "python -m sglang.launch_server --speculative-algorithm=EAGLE --port 1 --speculative-algorithm NEXTN"
    )
    assert c.get("--speculative-algorithm") == "NEXTN"
    assert c.get_all("--speculative-algorithm") == ["EAGLE", "NEXTN"]
    d = c.with_flag("--speculative-algorithm", "EAGLE3")
    assert d.arg_tokens == ["--speculative-algorithm=EAGLE3", "--port", "1"]
    e = d.with_flag("--speculative-num-steps", 3)
    assert e.arg_tokens[-2:] == ["--speculative-num-steps", "3"]
    assert e.without_flag("--port").arg_tokens == ["--speculative-algorithm=EAGLE3", "--speculative-num-steps", "3"]
    # the original is unchanged
    assert c.get("--speculative-algorithm") == "NEXTN"


def test_boolean_and_list_flags():
    c = LaunchCommand.parse(
        "python -m sglang.launch_server --model-path m --enable-tf32-matmul --no-enable-tf32-matmul "
        "--cuda-graph-bs-decode 1 2 4 8 --enable-multi-layer-eagle --chunked-prefill-size -1"
    )
    assert c.get("--enable-tf32-matmul") is False
    assert c.get("--cuda-graph-bs-decode") == ["1", "2", "4", "8"]
    assert c.get("--enable-multi-layer-eagle") is True
    assert c.get("--chunked-prefill-size") == "-1"  # a negative number is a value, not a flag
    d = c.with_flag("--enable-multi-layer-eagle", False).with_flag("--cuda-graph-bs-decode", [16, 32])
    assert not d.has("--enable-multi-layer-eagle")
    assert d.get("--cuda-graph-bs-decode") == ["16", "32"]
    assert d.with_flag("--enable-tf32-matmul", True).get("--enable-tf32-matmul") is True
    with pytest.raises(LaunchCommandError, match="store_true"):
        c.with_flag("--trust-remote-code", "1")
    with pytest.raises(LaunchCommandError, match="takes a value"):
        c.with_flag("--port", True)


def test_round_trip_with_quotes_and_comments():
    text = (
        "SGLANG_X='a b' python -m sglang.launch_server --model-path '/models/my model' "
        "--json-model-override-args '{\"rope_theta\": 1e6}' --tp 8 ...   # reconstructed: flags unknown"
    )
    c = LaunchCommand.parse(text)
    assert c.env == (("SGLANG_X", "a b"),)
    assert c.get("--model-path") == "/models/my model"
    assert c.get("--json-model-override-args") == '{"rope_theta": 1e6}'
    assert c.positionals == ["..."]
    s = c.to_string()
    assert s.startswith("SGLANG_X='a b' python")
    assert LaunchCommand.parse(s) == c
    assert LaunchCommand.parse(c.argv) == c


def test_unknown_flags_are_kept():
    c = LaunchCommand.parse("python -m sglang.launch_server --future-flag x --future-bool --port 1")
    assert c.get("--future-flag") == "x"
    assert c.get("--future-bool") is True
    assert c.get("--port") == "1"


def test_diff():
    a = LaunchCommand.parse("A=1 python -m sglang.launch_server --speculative-algorithm EAGLE --tp 8")
    b = a.with_flag("--speculative-algorithm", "EAGLE3").with_flag("--port", 30001).with_env("A", "2")
    assert a.diff(b) == [("env:A", "1", "2"), ("--speculative-algorithm", "EAGLE", "EAGLE3"), ("--port", None, "30001")]
    assert a.diff(a) == []


def test_public_report_command():
    # sglang-pr21272: the reconstructed command, with its trailing "..." and comment
    text = ("python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --speculative-algorithm EAGLE "
            "--speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 --tp 8 ...   # reconstructed: only "
            "algorithm, target, draft and 8-GPU TP are given in the PR; other flags unknown")
    c = LaunchCommand.parse(text)
    assert c.get("--tp-size") == "8"
    fixed = c.with_flag("--speculative-algorithm", "EAGLE3")
    assert fixed.to_string() == (
        "python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 --tp 8 ..."
    )


def test_flag_table_matches_sglang_source(sglang_source):
    """The committed table (workbench/engine/data/sglang-0.5.23-flags.json) is byte for byte what
    scripts/gen_sglang_flags.py produces from the published SGLang 0.5.23 wheel, and what
    workbench.engine.flags loads."""
    import json
    import pathlib
    import subprocess
    import sys

    from workbench.engine.flags import FLAGS, SGLANG_VERSION, load_flag_table

    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "scripts/gen_sglang_flags.py"), str(sglang_source)],
                         capture_output=True, text=True, check=True).stdout
    table = root / "workbench/engine/data/sglang-0.5.23-flags.json"
    assert out == table.read_text()
    assert load_flag_table(table) == (SGLANG_VERSION, FLAGS) == ("0.5.23", json.loads(out)["flags"])
    assert FLAGS["--speculative-algorithm"]["kind"] == "value" and len(FLAGS) > 500


def test_env_prefix_split_for_launching():
    """What a launch hands the box: the program without the prefix (what the server's cmdline
    shows) and the prefix's variables merged over the server's own environment, the prefix winning
    and a repeated name's last value kept; the command as given keeps its prefix."""
    c = LaunchCommand.parse("FOO=1 B='x y' FOO=2 /venv/bin/python -m sglang.launch_server --model-path /m --port 1")
    assert c.exec_argv == ["/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/m", "--port", "1"]
    assert c.argv[:3] == ["FOO=1", "B=x y", "FOO=2"] and c.argv[3:] == c.exec_argv
    assert c.launch_env() == {"FOO": "2", "B": "x y"}
    assert c.launch_env({"PATH": "/usr/bin", "FOO": "0"}) == {"PATH": "/usr/bin", "FOO": "2", "B": "x y"}
    assert c.to_string().startswith("FOO=1 B='x y' FOO=2 /venv/bin/python")
    # derived commands keep the prefix
    assert c.with_flag("--port", 2).launch_env() == {"FOO": "2", "B": "x y"}
    plain = LaunchCommand.parse("python -m sglang.launch_server --model-path /m")
    assert plain.exec_argv == plain.argv
    assert plain.launch_env() is None and plain.launch_env({}) is None
    assert plain.launch_env({"A": "1"}) == {"A": "1"}


# ---------------------------------------------------------------------------------------------
# Composing fixes: each fix is a diff against the ORIGINAL command
# ---------------------------------------------------------------------------------------------

_BASE = "python -m sglang.launch_server --model-path t --speculative-draft-model-path d"


def test_compose_two_fixes_made_from_the_same_command_keeps_both():
    original = LaunchCommand.parse(f"{_BASE} --speculative-algorithm EAGLE --enable-ep-moe --tp 8")
    algo = original.with_flag("--speculative-algorithm", "EAGLE3")  # keeps --enable-ep-moe
    flag = original.without_flag("--enable-ep-moe")                 # keeps EAGLE
    fixed = LaunchCommand.compose(original, [algo, flag])
    assert fixed.to_string() == f"{_BASE} --speculative-algorithm EAGLE3 --tp 8"
    # the order of the fixes does not matter when they change different flags
    assert LaunchCommand.compose(original, [flag, algo]).to_string() == fixed.to_string()


def test_compose_three_fixes_flag_algorithm_and_spec_params():
    original = LaunchCommand.parse(f"{_BASE} --speculative-algorithm EAGLE --specualtive-eagle-topk 1 "
                                   "--speculative-num-steps 3 --speculative-num-draft-tokens 8 --tp 2")
    algo = original.with_flag("--speculative-algorithm", "EAGLE3")
    typo = original.replace_flag("--specualtive-eagle-topk", "--speculative-eagle-topk", "1")
    spec = original.with_flag("--speculative-num-draft-tokens", 4)
    fixed = LaunchCommand.compose(original, [algo, typo, spec])
    # the typo's replacement stands where the typo stood; the other flags keep their places
    assert fixed.to_string() == (f"{_BASE} --speculative-algorithm EAGLE3 --speculative-eagle-topk 1 "
                                 "--speculative-num-steps 3 --speculative-num-draft-tokens 4 --tp 2")
    assert fixed.unresolved() == []


def test_compose_never_resolves_an_ambiguous_flag_again():
    """An ambiguous prefix (--cuda-graph-max-bs on the shipped 0.5.23 table) in a fix's command: it is
    moved as written, no LaunchCommandError."""
    original = LaunchCommand.parse(f"{_BASE} --speculative-algorithm EAGLE --cuda-graph-max-bs 32")
    algo = original.with_flag("--speculative-algorithm", "EAGLE3")
    swap = original.replace_flag("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", "32")
    fixed = LaunchCommand.compose(original, [swap, algo])
    assert fixed.to_string() == f"{_BASE} --speculative-algorithm EAGLE3 --cuda-graph-max-bs-decode 32"
    # a fix that only rewrites how a flag is written (the value is the same): applied
    valued = LaunchCommand.parse(f"{_BASE} --enable-torch-compile=true --tp 2")
    bare = valued.with_flag("--enable-torch-compile", True)
    assert LaunchCommand.compose(valued, [bare]).to_string() == f"{_BASE} --enable-torch-compile --tp 2"


@pytest.mark.parametrize("prompt, stripped", [("$ ", "$"), ("# ", "#"), ("> ", ">"), ("(venv) $ ", "(venv) $"),
                                              ("root@host:~# ", "root@host:~#"), ("user@box:/work$ ", "user@box:/work$")])
def test_a_pasted_shell_prompt_is_stripped_and_kept_aside(prompt, stripped):
    c = LaunchCommand.parse(f"{prompt}CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server --model-path m --tp 2")
    assert (c.prompt, c.env, c.launcher) == (stripped, (("CUDA_VISIBLE_DEVICES", "0"),), ("python3", "-m", "sglang.launch_server"))
    assert c.to_string() == "CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server --model-path m --tp 2"


def test_a_comment_line_is_not_a_prompt():
    c = LaunchCommand.parse("# start the server\npython -m sglang.launch_server --model-path m")
    assert c.prompt == "" and c.get("--model-path") == "m"
    with pytest.raises(LaunchCommandError, match="not an SGLang launch command"):
        LaunchCommand.parse("$ vllm chat m")
