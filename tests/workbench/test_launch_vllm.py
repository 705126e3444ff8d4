"""vLLM launch commands: recognised, read as vLLM 0.32.0's FlexibleArgumentParser reads them, the
engine-neutral accessors on both engines, and the rewrites (with_speculative keeps the form)."""

import json

import pytest

from workbench.engine.launch import LaunchCommand, LaunchCommandError, SpeculativeConfigError, normalise_method
from workbench.engine.locate import is_launch_argv
from workbench.sandbox_box import sandbox_launch_command, sandbox_vllm_launch_command

DRAFT_JSON = '{"method": "eagle3", "model": "/models/draft", "num_speculative_tokens": 3}'

#: One deployment, written every way vLLM 0.32.0 accepts: (text, module).
SAME_DEPLOYMENT = [
    (f"vllm serve /models/target --speculative-config '{DRAFT_JSON}' -tp 2 --port 8001", "vllm serve"),
    (f"/opt/venv/bin/vllm serve --model /models/target --speculative_config '{DRAFT_JSON}' "
     "--tensor-parallel-size=2 --port=8001", "vllm serve"),
    (f"python3 -m vllm.entrypoints.openai.api_server --model /models/target -sc '{DRAFT_JSON}' -tp 2 --port 8001",
     "vllm.entrypoints.openai.api_server"),
    ("python -m vllm.entrypoints.cli.main serve /models/target --speculative-config.method eagle3 "
     "--speculative-config.model /models/draft --speculative_config.num_speculative_tokens=3 --tensor_parallel_size 2 "
     "--port 8001", "vllm.entrypoints.cli.main serve"),
    ("VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 vllm serve /models/target --spec-method eagle3 "
     "--spec-model /models/draft --spec-tokens 3 -tp 2 --port 8001", "vllm serve"),
    ("vllm serve /models/target \\\n  --speculative-config '{\"method\":\"eagle3\",\"model\":\"/models/draft\"}' \\\n"
     "  --spec-tokens 3 --tensor-para 2 --port 8001  # a comment", "vllm serve"),
]


@pytest.mark.parametrize("text,module", SAME_DEPLOYMENT)
def test_every_written_form_reads_as_the_same_deployment(text, module):
    c = LaunchCommand.parse(text)
    assert (c.engine, c.module) == ("vllm", module)
    assert c.target_model == "/models/target"
    assert c.draft_model == "/models/draft"
    assert c.speculative_method == "eagle3"
    assert c.num_speculative_tokens == 3
    assert c.tensor_parallel_size == 2
    assert (c.port, c.default_port, c.host) == (8001, 8000, None)
    assert c.unresolved() == []
    assert LaunchCommand.parse(c.to_string()) == c  # round trip
    assert is_launch_argv(c.argv[len(c.env):])


def test_the_sandbox_vllm_command_and_its_defaults():
    c = LaunchCommand.parse(sandbox_vllm_launch_command(port=8123, python="/venv/bin/python"))
    assert c.engine == "vllm" and c.launcher == ("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server")
    assert dict(c.env) == {"VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert c.port == 8123 and c.host == "127.0.0.1"
    assert c.target_model.endswith("/models/target") and c.draft_model.endswith("/models/draft")
    assert c.get("--enforce-eager") is True  # a BooleanOptionalAction: did not eat --speculative-config
    assert c.get("--max-model-len") == "512" and c.get("--dtype") == "float32"
    sc = c.speculative_config
    assert (sc.form, sc.flag, sc.method_written, sc.draft_tensor_parallel_size) == ("json", "--speculative-config", "eagle3", None)
    assert dict(sc.raw) == {"method": "eagle3", "model": c.draft_model, "num_speculative_tokens": 3}
    bare = LaunchCommand.parse("vllm serve m")
    assert (bare.port, bare.tensor_parallel_size, bare.speculative_config, bare.draft_model) == (8000, 1, None, None)


def test_sglang_accessors_are_the_same_names():
    c = LaunchCommand.parse("python -m sglang.launch_server --model m --speculative-algorithm EAGLE3 "
                            "--speculative-draft-model d --speculative-num-steps 4 --tp 8 --port 31000 --host 0.0.0.0")
    assert (c.engine, c.target_model, c.draft_model, c.speculative_method, c.num_speculative_tokens) == (
        "sglang", "m", "d", "eagle3", 4)
    assert (c.tensor_parallel_size, c.port, c.default_port, c.host) == (8, 31000, 30000, "0.0.0.0")
    assert c.speculative_config.method_written == "EAGLE3" and c.speculative_config.form == "flags"
    bare = LaunchCommand.parse("sglang serve /m")
    assert (bare.target_model, bare.port, bare.host, bare.tensor_parallel_size, bare.speculative_config) == (
        "/m", 30000, "127.0.0.1", 1, None)
    sandbox = LaunchCommand.parse(sandbox_launch_command(port=30123))
    assert (sandbox.engine, sandbox.speculative_method, sandbox.port) == ("sandbox", "eagle", 30123)
    assert sandbox.draft_model.endswith("models/draft")


def test_sglang_rewrites():
    c = LaunchCommand.parse("python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE "
                            "--speculative-draft-model-path d --port 30000")
    fixed = c.with_speculative(method="eagle3", num_speculative_tokens=3).with_draft_model("/copy").with_port(30001)
    assert fixed.to_string() == ("python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 "
                                 "--speculative-draft-model-path /copy --port 30001 --speculative-num-steps 3")
    assert c.with_speculative(model=None).draft_model is None
    with pytest.raises(LaunchCommandError, match="SGLang has no launch flag for the speculative setting 'draft_tensor"):
        c.with_speculative(draft_tensor_parallel_size=1)


def test_with_speculative_keeps_the_json_form_and_its_separators():
    spaced = LaunchCommand.parse(f"vllm serve t --speculative-config '{DRAFT_JSON}' --port 8000")
    out = spaced.with_speculative(num_speculative_tokens=5, draft_tensor_parallel_size=1)
    assert out.arg_tokens[1:3] == ["--speculative-config", '{"method": "eagle3", "model": "/models/draft", '
                                   '"num_speculative_tokens": 5, "draft_tensor_parallel_size": 1}']
    assert out.num_speculative_tokens == 5 and out.speculative_config.draft_tensor_parallel_size == 1
    compact = LaunchCommand.parse("""vllm serve t -sc='{"method":"eagle","model":"/d"}'""")
    out = compact.with_speculative(method="eagle3")
    assert out.arg_tokens == ["t", '-sc={"method":"eagle3","model":"/d"}']
    assert compact.with_speculative(model=None).speculative_config.raw == {"method": "eagle"}
    # dashes in keys are vLLM's too (create_speculative_config): the key is rewritten where written
    dashed = LaunchCommand.parse("""vllm serve t -sc '{"method": "eagle3", "num-speculative-tokens": 2}'""")
    assert dashed.num_speculative_tokens == 2
    assert json.loads(dashed.with_speculative(num_speculative_tokens=4).arg_tokens[-1]) == {
        "method": "eagle3", "num-speculative-tokens": 4}
    none = LaunchCommand.parse("vllm serve t --port 8000")
    assert none.with_draft_model("/d").arg_tokens == ["t", "--port", "8000", "--speculative-config", '{"model": "/d"}']


def test_with_speculative_keeps_dotted_and_spec_flags():
    dotted = LaunchCommand.parse("vllm serve t --speculative-config.method eagle --speculative-config.model /d --port 8000")
    out = dotted.with_speculative(method="eagle3", num_speculative_tokens=3)
    assert out.arg_tokens == ["t", "--speculative-config.method", "eagle3", "--speculative-config.model", "/d",
                              "--speculative-config.num_speculative_tokens", "3", "--port", "8000"]
    assert (out.speculative_method, out.num_speculative_tokens) == ("eagle3", 3)
    assert dotted.with_speculative(model=None).arg_tokens == ["t", "--speculative-config.method", "eagle", "--port", "8000"]
    flags = LaunchCommand.parse("vllm serve t --spec-method eagle --spec-model /d --spec-tokens 2")
    out = flags.with_speculative(method="eagle3", num_speculative_tokens=4).with_draft_model("/copy")
    assert out.arg_tokens == ["t", "--spec-method", "eagle3", "--spec-model", "/copy", "--spec-tokens", "4"]
    assert out.speculative_config.form == "flags"


def test_a_dotted_form_replaces_the_json_beside_it():
    """vLLM 0.32.0 appends the dotted keys as a later --speculative-config: the JSON one is lost
    (checked against the real parser in test_vllm_flags_real.py)."""
    c = LaunchCommand.parse(f"vllm serve t --speculative-config '{DRAFT_JSON}' --speculative-config.num_speculative_tokens 5")
    sc = c.speculative_config
    assert dict(sc.raw) == {"num_speculative_tokens": 5} and sc.method is None and sc.model is None
    assert sc.form == "dotted" and "method, model of that object are lost" in sc.notes[0]
    assert c.get("--speculative-config") == '{"num_speculative_tokens": 5}'
    assert c.get_all("--speculative-config") == [DRAFT_JSON, '{"num_speculative_tokens": 5}']
    two = LaunchCommand.parse("vllm serve t --speculative-config.method eagle3 -sc.model=/d")
    assert dict(two.speculative_config.raw) == {"model": "/d"}
    assert "separate objects" in two.speculative_config.notes[0]


def test_dotted_values_are_read_as_vllm_reads_them():
    c = LaunchCommand.parse("vllm serve t -sc.num_speculative_tokens 3k -sc.model 7 -sc.method eagle3 "
                            "--compilation-config.custom_ops+ +rms_norm,-silu_and_mul --compilation-config.custom_ops+=none")
    assert dict(c.speculative_config.raw) == {"num_speculative_tokens": 3000, "model": 7, "method": "eagle3"}
    assert json.loads(c.get("--compilation-config")) == {"custom_ops": ["+rms_norm", "-silu_and_mul", "none"]}
    assert LaunchCommand.parse("vllm serve t -sc.x 1K").speculative_config.raw == {"x": 1024}
    assert LaunchCommand.parse("vllm serve t -sc.x 1.5K").speculative_config.raw == {"x": "1.5K"}


def test_spec_flags_merge_and_their_conflict_is_a_problem():
    c = LaunchCommand.parse("vllm serve t -sc '{\"method\": \"eagle3\", \"model\": \"/d\"}' --spec-tokens 3")
    assert c.num_speculative_tokens == 3 and c.speculative_config.problems == ()
    clash = LaunchCommand.parse("vllm serve t -sc '{\"method\": \"eagle3\"}' --spec-method eagle")
    assert clash.speculative_method == "eagle3"
    [problem] = clash.speculative_config.problems
    assert "--spec-method and --speculative-config['method'] are both given" in problem


@pytest.mark.parametrize("value,where,msg", [
    ('{"method": "eagle3", "model": "<D>", "num_speculative_tokens": <k>}', "<k>", "Expecting value"),
    ("{'method': 'eagle3'}", "'method'", "Expecting property name enclosed in double quotes"),
    ('{"method": "eagle3",}', "}", "Expecting property name"),
    ('{"method": "eagle3"', None, "Expecting ',' delimiter"),
])
def test_malformed_json_is_a_typed_error_with_its_position(value, where, msg):
    pos = value.index(where) if where else len(value)  # the offending character (the end: nothing closes it)
    c = LaunchCommand.parse(["vllm", "serve", "t", "--port", "8000", "--speculative_config", value])  # parse never refuses it
    with pytest.raises(SpeculativeConfigError) as exc:
        c.speculative_config
    err = exc.value
    assert (err.flag, err.position, err.token) == ("--speculative_config", pos, 5)
    assert msg in str(err) and f"at character {pos}" in str(err) and "--speculative_config (token 5)" in str(err)
    assert isinstance(err, LaunchCommandError)
    for accessor in ("draft_model", "speculative_method", "num_speculative_tokens"):
        with pytest.raises(SpeculativeConfigError):
            getattr(c, accessor)
    assert c.target_model == "t" and c.port == 8000  # the rest is still read


def test_json_that_is_not_an_object_and_none():
    with pytest.raises(SpeculativeConfigError, match="JSON but not an object \\(a list\\)") as exc:
        LaunchCommand.parse("vllm serve t -sc '[1]'").speculative_config
    assert exc.value.position is None and exc.value.flag == "-sc"
    assert LaunchCommand.parse("vllm serve t -sc None").speculative_config is None
    assert LaunchCommand.parse("vllm serve t -sc ''").speculative_config is None


def test_the_public_report_command_with_placeholders():
    text = ('vllm serve <TARGET> --speculative-config \'{"method": "eagle3", "model": "<AUTOMODEL_EAGLE3_EXPORT>", '
            '"num_speculative_tokens": <k>}\'   # reconstructed')
    c = LaunchCommand.parse(text)
    assert c.target_model == "<TARGET>" and c.engine == "vllm"
    value = c.get("--speculative-config")
    with pytest.raises(SpeculativeConfigError, match=f"at character {value.index('<k>')} ") as exc:
        c.draft_model
    assert exc.value.position == value.index("<k>")


def test_optimization_level_forms():
    for text, level in [("vllm serve t -O3", "3"), ("vllm serve t -O=1", "1"), ("vllm serve t -O 2", "2"),
                        ("vllm serve t -Odecode", "decode"), ("vllm serve t --optimization_level 0", "0")]:
        c = LaunchCommand.parse(text)
        assert c.get("--optimization-level") == level, text
        assert c.to_string() == text and c.unresolved() == []
    c = LaunchCommand.parse("vllm serve t -O3").with_flag("--optimization-level", 1)
    assert c.arg_tokens == ["t", "-O1"]


def test_flags_resolve_against_the_vllm_table():
    c = LaunchCommand.parse("vllm serve t --enforce_eager --no-enable-prefix-caching --max-model-len 512 "
                            "--speculative-confg '{}' --tensor-paralel-size 2 --served-model-name a b")
    assert c.get("--enforce-eager") is True and c.get("--enable-prefix-caching") is False
    assert c.get("--served-model-name") == ["a", "b"]
    assert [(a.spelled, a.status) for a in c.unresolved()] == [("--speculative-confg", "unknown"),
                                                                ("--tensor-paralel-size", "unknown")]
    assert c.table.engine == "vllm" and c.table.describe().startswith("vllm 0.32.0 (shipped table")
    # an SGLang table given for a vLLM command is not used for it (and the other way round)
    sg = LaunchCommand.parse("python -m sglang.launch_server --model-path m --tp 2")
    assert LaunchCommand.parse("vllm serve t -tp 2", sg.table).table.engine == "vllm"
    assert LaunchCommand.parse("python -m sglang.launch_server --model-path m", c.table).table is None


def test_api_server_positional_is_not_the_model_but_serve_takes_it():
    api = LaunchCommand.parse("python -m vllm.entrypoints.openai.api_server /ignored --model /t")
    assert api.target_model == "/t" and api.positionals == ["/ignored"]
    serve = LaunchCommand.parse("vllm serve --port 8000 --model /first --enforce-eager")
    assert serve.target_model == "/first"
    assert LaunchCommand.parse("vllm serve --port 8000 /t").target_model == "/t"


@pytest.mark.parametrize("text,what", [
    ("vllm bench serve --model m", "a vLLM command that starts no server"),
    ("vllm chat", "a vLLM command that starts no server"),
    ("python -m vllm.entrypoints.cli.main bench latency", "not its server launcher"),
    ("python3 examples/offline_inference/eagle.py --method eagle3", "the Python script examples/offline_inference/eagle.py"),
])
def test_other_vllm_commands_are_named(text, what):
    with pytest.raises(LaunchCommandError, match="not an SGLang launch command \\(nor a vLLM one\\)") as exc:
        LaunchCommand.parse(text)
    assert what in str(exc.value)
    assert not is_launch_argv(text.split())


def test_bad_port_and_tp_are_typed_errors():
    with pytest.raises(LaunchCommandError, match="--port '<PORT>' is not a port number"):
        LaunchCommand.parse("vllm serve t --port <PORT>").port
    with pytest.raises(LaunchCommandError, match="--tensor-parallel-size 'x' is not an integer"):
        LaunchCommand.parse("vllm serve t -tp x").tensor_parallel_size
    with pytest.raises(LaunchCommandError, match="a port is an integer"):
        LaunchCommand.parse("vllm serve t").with_port("80")
    with pytest.raises(LaunchCommandError, match="-sc.model \\(token 3\\) is missing its value"):
        LaunchCommand.parse("vllm serve t -sc.model")


def test_method_normalisation():
    assert normalise_method("EAGLE3", "sglang") == "eagle3"
    assert normalise_method("deepseek_mtp", "vllm") == "mtp"
    assert normalise_method("[ngram]", "vllm") == "ngram"
    assert normalise_method("NEXTN", "sglang") == "nextn"
    c = LaunchCommand.parse("vllm serve t -sc '{\"method\": \"EAGLE3\", \"model\": \"/d\"}'")
    assert c.speculative_method == "eagle3" and c.speculative_config.method_written == "EAGLE3"


def test_fixes_of_different_speculative_keys_compose():
    """On vLLM the method and the draft are two keys of ONE flag: a method fix and a repaired-draft
    fix, each made from the original, both hold (SGLang: two flags, as before)."""
    o = LaunchCommand.parse(f"vllm serve t -sc '{DRAFT_JSON.replace('eagle3', 'eagle')}' --port 8000")
    both = LaunchCommand.compose(o, [o.with_speculative(method="eagle3"), o.with_draft_model("/copy"), o.with_port(8001)])
    assert (both.speculative_method, both.draft_model, both.num_speculative_tokens, both.port) == ("eagle3", "/copy", 3, 8001)
    assert both.arg_tokens[1] == "-sc"  # in place, the form kept
    d = LaunchCommand.parse("vllm serve t -sc.method eagle -sc.model /d --port 8000")
    both = LaunchCommand.compose(d, [d.with_speculative(method="eagle3"), d.with_draft_model("/copy"),
                                     d.with_speculative(num_speculative_tokens=2)])
    assert both.arg_tokens == ["t", "-sc.method", "eagle3", "-sc.model", "/copy", "-sc.num_speculative_tokens", "2",
                               "--port", "8000"]
    dropped = LaunchCommand.compose(o, [o.with_speculative(num_speculative_tokens=None)])
    assert dropped.num_speculative_tokens is None and dropped.draft_model == "/models/draft"
    assert [f for f, _a, _b in o.diff(o.with_draft_model("/copy"))] == ["--speculative-config"]
    sg = LaunchCommand.parse("python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE "
                             "--speculative-draft-model-path d")
    both = LaunchCommand.compose(sg, [sg.with_speculative(method="eagle3"), sg.with_draft_model("/copy")])
    assert (both.speculative_method, both.draft_model) == ("eagle3", "/copy")


def test_secrets_are_redacted_however_they_are_spelt():
    c = LaunchCommand.parse("vllm serve t --api_key S3CRET1 --api-ke S3CRET2 --hf-token=S3CRET3 "
                            "-sc.hf_token S3CRET4 --port 8000")
    shown = c.to_display()
    assert "S3CRET" not in shown and shown.count("***") == 4
    assert "S3CRET2" in c.to_string()  # what is launched keeps the values
    sg = LaunchCommand.parse("python -m sglang.launch_server --model-path m --api-ke S3CRET5")
    assert "S3CRET5" not in sg.to_display()


def test_with_table_rereads_a_vllm_command():
    from workbench.engine.vllm_flags import vllm_flag_table_from_json

    c = LaunchCommand.parse("vllm serve t --brand-new-flag --port 8000")
    assert [a.spelled for a in c.unresolved()] == ["--brand-new-flag"]
    newer = vllm_flag_table_from_json({"version": "0.99.0", "flags": {
        "--brand-new-flag": {"kind": "store_true"}, "--port": {"kind": "value", "nargs": None, "default": 9000}}},
        origin="box", where="a newer vLLM")
    again = c.with_table(newer)
    assert again.unresolved() == [] and again.table.version == "0.99.0" and again.port == 8000
    assert LaunchCommand.parse("vllm serve t", newer).default_port == 9000


def test_config_file_pulled_in_as_vllm_does():
    """(Checked against the real parser in test_vllm_flags.py.) The file's flags go before the command
    line's; `--config=FILE` and errors."""
    yaml_text = "port: 8123\ntensor_parallel_size: 2\nenforce-eager: true\nenable-prefix-caching: false\n" \
                "speculative-config:\n  method: eagle3\n  model: /d\nserved-model-name: [a, b]\n"
    c = LaunchCommand.parse("vllm serve /t --config serve.yaml --port 9000")
    assert (c.config_file, c.config_file_ignored) == ("serve.yaml", False)
    e = c.with_config_file(yaml_text)
    assert (e.port, e.tensor_parallel_size, e.draft_model, e.speculative_method, e.target_model) == (9000, 2, "/d", "eagle3", "/t")
    assert e.get("--enforce-eager") is True and e.get("--enable-prefix-caching") is False
    assert e.get("--served-model-name") == ["a", "b"] and e.config_file is None
    assert [a.origin for a in e.args if a.flag == "--port"] == ["config", ""]
    assert e.arg_tokens[:3] == ["/t", "--port", "8123"]
    ignored = LaunchCommand.parse("vllm serve /t --config=serve.yaml")
    assert ignored.config_file == "serve.yaml" and ignored.config_file_ignored
    assert ignored.with_config_file(yaml_text) == ignored
    with pytest.raises(LaunchCommandError, match="serve.yaml: not YAML at line 2, column"):
        c.with_config_file("port: 1\n  bad: [\n")
    with pytest.raises(LaunchCommandError, match="a YAML mapping of flags is expected, got list"):
        c.with_config_file("- 1\n")
    with pytest.raises(LaunchCommandError, match="--config files are vLLM's"):
        LaunchCommand.parse("sglang serve m").with_config_file({})


@pytest.mark.parametrize("argv,server", [
    (["/venv/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/t", "--port", "8000"], True),
    (["/venv/bin/vllm", "serve", "/t"], True),
    (["python", "-m", "vllm.entrypoints.cli.main", "serve", "/t"], True),
    # a real vLLM 0.32.0 server's children, as /proc/PID/cmdline shows them (read on this machine):
    # setproctitle pads the title with empty arguments
    (["VLLM::EngineCore"] + [""] * 40, False),
    (["VLLM::Worker"] + [""] * 40, False),
    (["/venv/bin/python", "-B", "-c", "from multiprocessing.resource_tracker import main;main(31)"], False),
    (["/venv/bin/python", "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=32, "
      "pipe_handle=29)", "--multiprocessing-fork"], False),
    (["tail", "-f", "vllm serve.log"], False),
    (["vllm", "bench", "serve", "--model", "/t"], False),
])
def test_is_launch_argv_on_vllm_processes(argv, server):
    assert is_launch_argv(argv) is server


def test_a_pasted_prompt_before_a_vllm_command():
    c = LaunchCommand.parse("(venv) user@gpu-box:~$ vllm serve /t --port 8001")
    assert (c.prompt, c.engine, c.target_model, c.port) == ("(venv) user@gpu-box:~$", "vllm", "/t", 8001)


def test_a_console_script_as_proc_shows_it_and_an_env_wrapper_are_launches():
    """``/proc/PID/cmdline`` of ``vllm serve MODEL`` is the script's interpreter, then the script
    (the kernel runs the #! line); ``env NAME=VALUE cmd`` is a wrapper script's form."""
    from workbench.engine.locate import engine_package, is_launch_argv

    argv = ["/v/bin/python", "/v/bin/vllm", "serve", "/m", "--port", "8001"]
    launch = LaunchCommand.parse(argv)
    assert (launch.engine, launch.module, launch.target_model, launch.port) == ("vllm", "vllm serve", "/m", 8001)
    assert is_launch_argv(argv) and engine_package(launch) == "vllm" and launch.argv == argv
    sg = LaunchCommand.parse(["/v/bin/python3.11", "/v/bin/sglang", "serve", "--model-path", "/m"])
    assert (sg.engine, sg.target_model) == ("sglang", "/m")
    wrapped = LaunchCommand.parse("env VLLM_HOST_IP=127.0.0.1 vllm serve /m -tp 2")
    assert wrapped.env == (("VLLM_HOST_IP", "127.0.0.1"),) and wrapped.tensor_parallel_size == 2
    with pytest.raises(LaunchCommandError):
        LaunchCommand.parse("env -i vllm serve /m")  # env's options change the environment: not read
    with pytest.raises(LaunchCommandError):
        LaunchCommand.parse(["/v/bin/python", "/v/bin/vllm", "bench", "serve"])
