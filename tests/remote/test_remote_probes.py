"""Probes: inject, fire once, read back, revert byte for byte; conflicts, journal, crashes."""

import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap

import pytest

from remote import connect
from remote.errors import (
    AnchorAmbiguous,
    AnchorNotFound,
    ProbeCompileError,
    ProbeConflict,
    ProbeError,
    ProbeExists,
    ProbeExpressionRefused,
    ProbePathOutside,
    ProbeNotFound,
    RemoteFileNotFound,
    RemoteIsADirectory,
)
from remote.probes import (
    CRASH_ENV,
    JournalProblem,
    Probe,
    ProbeReading,
    add_probe,
    check_expression,
    journal_dir,
    launch_pgid,
    list_journal,
    list_probes,
    locate_anchor,
    parse_probe_value,
    parse_shape,
    probe_file_status,
    read_probe_log,
    read_probe_output,
    readings_by_launch,
    render_block,
    revert_all,
    revert_probe,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRAFT_SOURCE = textwrap.dedent(
    '''\
    """A stand-in for llama_eagle3.py: the fc check that is silently skipped."""


    class Size(tuple):
        def __repr__(self):
            return "torch.Size([" + ", ".join(map(str, self)) + "])"


    class FakeTensor:
        def __init__(self, *shape):
            self.shape = Size(shape)


    class LlamaModel:
        def forward(self, hidden_states, embeds):
            if hidden_states.shape[-1] != embeds.shape[-1]:
                hidden_states = "fc(hidden_states)"
            return hidden_states

        def other(
            self,
            hidden_states,
        ):
            return hidden_states.shape[-1] != 0


    def forward(hidden_states, embeds):
        if hidden_states.shape[-1] != embeds.shape[-1]:
            return "module-level"
        return None
    '''
)

CALLER = textwrap.dedent(
    """\
    import sys
    sys.path.insert(0, sys.argv[1])
    import draft_model as m
    model = m.LlamaModel()
    for width in (7168, 21504):
        result = model.forward(m.FakeTensor(1, width), m.FakeTensor(1, 7168))
        print(getattr(result, "shape", result))
    """
)


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "engine dir 'x'"
    d.mkdir()
    p = d / "draft_model.py"
    p.write_text(DRAFT_SOURCE)
    os.chmod(p, 0o640)
    return p


def _run_caller(src):
    return subprocess.run([sys.executable, "-c", CALLER, str(src.parent)], capture_output=True, text=True, timeout=30)


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _add_fc(box, src, tag="fc-width", **kw):
    return add_probe(
        box,
        src,
        before=r"if hidden_states\.shape\[-1\] != embeds\.shape\[-1\]",
        function="LlamaModel.forward",
        exprs=kw.pop("exprs", ["hidden_states.shape", "embeds.shape[-1]", "1/0"]),
        tag=tag,
        **kw,
    )


def test_probe_fires_once_with_values_and_reverts_byte_for_byte(box, src):
    original = src.read_bytes()
    probe = _add_fc(box, src)
    assert isinstance(probe, Probe) and probe.state == "active" and probe.line == 16
    text = src.read_text()
    lines = text.splitlines()
    begin = lines.index("        # >>> eagle-workbench probe fc-width >>>")
    assert lines[begin + probe.block_lines - 1] == "        # <<< eagle-workbench probe fc-width <<<"
    assert lines[begin + probe.block_lines].strip().startswith("if hidden_states.shape[-1]")
    assert all(line.startswith("        ") for line in lines[begin : begin + probe.block_lines])
    assert probe.patched_sha256 == _sha(src) and probe.original_sha256 == hashlib.sha256(original).hexdigest()
    assert stat.S_IMODE(src.stat().st_mode) == 0o640

    out = _run_caller(src)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["torch.Size([1, 7168])", "fc(hidden_states)"]  # behaviour unchanged
    probe_lines = [line for line in out.stderr.splitlines() if line.startswith("[probe:")]
    [line] = probe_lines  # the caller runs in this test's process group (subprocess.run keeps it)
    assert re.fullmatch(
        rf"\[probe:fc-width pgid={os.getpgrp()} pid=\d+\] hidden_states.shape=torch.Size\(\[1, 7168\]\) "
        r"embeds.shape\[-1\]=7168 1/0=<error:ZeroDivisionError\('division by zero'\)>", line), line
    values = read_probe_output(out.stderr, probe)
    assert values == [
        {
            "hidden_states.shape": "torch.Size([1, 7168])",
            "embeds.shape[-1]": "7168",
            "1/0": "<error:ZeroDivisionError('division by zero')>",
        }
    ]
    assert read_probe_output(out.stderr.splitlines(), "fc-width") == values  # heuristic split agrees
    assert parse_shape(values[0]["hidden_states.shape"]) == (1, 7168)

    assert list_probes(box) == [probe]
    reverted = revert_probe(box, probe)
    assert reverted.tag == "fc-width"
    assert src.read_bytes() == original
    assert stat.S_IMODE(src.stat().st_mode) == 0o640
    assert list_probes(box) == []
    assert os.listdir(journal_dir(box)) == []
    assert os.listdir(src.parent) == ["draft_model.py"]
    with pytest.raises(ProbeNotFound):
        revert_probe(box, "fc-width")


def test_adding_the_same_tag_twice_is_idempotent(box, src):
    first = _add_fc(box, src)
    patched = src.read_bytes()
    again = _add_fc(box, src)
    assert again == first and src.read_bytes() == patched
    assert src.read_text().count("# >>> eagle-workbench probe fc-width >>>") == 1
    with pytest.raises(ProbeExists):
        _add_fc(box, src, exprs=["embeds"])
    revert_all(box)


def test_module_level_function_and_line_number_anchors(box, src):
    with pytest.raises(AnchorAmbiguous) as info:  # LlamaModel.forward and the module-level forward
        add_probe(box, src, before=r"if hidden_states", function="forward", exprs=["embeds"], tag="x")
    assert info.value.lines == [16, 28]
    assert "--function" not in str(info.value) and "--line N" in str(info.value)  # a function was given
    with pytest.raises(AnchorAmbiguous) as info:
        add_probe(box, src, before=r"if hidden_states", exprs=["embeds"], tag="x")
    assert "restrict it with --function (function= in Python)" in str(info.value)
    assert "function=," not in str(info.value)
    probe = add_probe(box, src, before=28, exprs=["embeds"], tag="by-line")
    assert probe.line == 28
    assert src.read_text().splitlines()[27] == "    # >>> eagle-workbench probe by-line >>>"
    revert_all(box)
    assert src.read_text() == DRAFT_SOURCE


def test_anchor_errors_are_clear(box, src):
    with pytest.raises(AnchorNotFound, match="matches no line"):
        add_probe(box, src, before=r"no_such_code", exprs=["1"], tag="t")
    with pytest.raises(AnchorNotFound, match="no function named"):
        add_probe(box, src, before=r"return", function="missing", exprs=["1"], tag="t")
    with pytest.raises(AnchorNotFound, match="outside the file"):
        add_probe(box, src, before=999, exprs=["1"], tag="t")
    with pytest.raises(AnchorNotFound, match="does not start a statement"):
        add_probe(box, src, before=r"^\s+hidden_states,$", exprs=["1"], tag="t")  # inside a signature
    with pytest.raises(AnchorNotFound, match="blank"):
        add_probe(box, src, before=2, exprs=["1"], tag="t")
    with pytest.raises(ProbeError, match="tag"):
        add_probe(box, src, before=16, exprs=["1"], tag="bad tag!")
    with pytest.raises(ProbeError, match="not a Python expression"):
        add_probe(box, src, before=16, exprs=["1 +"], tag="t")
    assert src.read_text() == DRAFT_SOURCE and list_probes(box) == []


def test_compile_failure_on_the_box_leaves_everything_untouched(box, src):
    with pytest.raises(ProbeCompileError) as info:  # parses as an expression, passes the whitelist, fails to compile
        add_probe(box, src, before=16, exprs=["round(embeds, ndigits=1, ndigits=2)"], tag="bad")
    assert "keyword argument repeated" in info.value.output and not info.value.of_original
    assert src.read_text() == DRAFT_SOURCE
    assert list_probes(box) == [] and os.listdir(src.parent) == ["draft_model.py"]


def test_refuses_when_the_file_changes_between_read_and_replace(box, src, monkeypatch):
    real_run = box.run

    def run_and_edit(argv, **kw):  # someone edits the file while the candidate compiles
        res = real_run(argv, **kw)
        if ".ewb-tmp-" in argv[-2]:  # the compile check of the patched temporary file
            with src.open("a") as f:
                f.write("# edited meanwhile\n")
        return res

    monkeypatch.setattr(box, "run", run_and_edit)
    with pytest.raises(ProbeConflict, match="changed while"):
        _add_fc(box, src)
    assert src.read_text() == DRAFT_SOURCE + "# edited meanwhile\n"
    assert list_probes(box) == [] and os.listdir(src.parent) == ["draft_model.py"]


def test_revert_refuses_when_someone_edited_the_file(box, src):
    probe = _add_fc(box, src)
    with src.open("a") as f:
        f.write("# a colleague's change\n")
    edited = src.read_bytes()
    with pytest.raises(ProbeConflict) as info:
        revert_probe(box, probe)
    assert "edited by someone else" in str(info.value)
    assert info.value.backup_path == probe.backup_path and os.path.exists(probe.backup_path)
    assert src.read_bytes() == edited
    assert [p.tag for p in list_probes(box)] == ["fc-width"]


def test_stacked_probes_revert_newest_first(box, src):
    a = _add_fc(box, src, tag="a")
    b = add_probe(box, src, before=r"return hidden_states$", function="LlamaModel.forward", exprs=["hidden_states"], tag="b")
    assert b.original_sha256 == a.patched_sha256
    with pytest.raises(ProbeConflict, match=r"newer probes \['b'\]") as info:
        revert_probe(box, a)
    assert "`workbench probe revert --all` does it in order" in str(info.value)
    assert [p.tag for p in revert_all(box)] == ["b", "a"]
    assert src.read_text() == DRAFT_SOURCE


def test_anchor_regex_ignores_lines_inside_other_probes(box, src):
    _add_fc(box, src, tag="first")
    # "embeds.shape[-1]" now also appears inside the first probe's block; only the code line counts
    second = add_probe(box, src, before=r"embeds\.shape\[-1\]", function="LlamaModel.forward", exprs=["1"], tag="second")
    assert second.line > 16
    revert_all(box)
    assert src.read_text() == DRAFT_SOURCE


def test_journal_lets_a_new_session_list_and_revert(box, src, tmp_path):
    probe = _add_fc(box, src)
    entry = json.loads(open(probe.journal_path).read())
    assert entry["tag"] == "fc-width" and entry["state"] == "active" and entry["path"] == str(src)
    with connect(box.name, state_dir=box.state_dir) as fresh:
        assert [p.tag for p in list_probes(fresh)] == ["fc-width"]
        assert [p.tag for p in revert_all(fresh)] == ["fc-width"]
    assert src.read_text() == DRAFT_SOURCE


def test_symlinked_source_patches_the_real_file(box, src, tmp_path):
    link = tmp_path / "link to draft.py"
    link.symlink_to(src)
    probe = _add_fc(box, link)
    assert probe.path == str(src) and link.is_symlink()
    assert "eagle-workbench probe" in src.read_text()
    assert _add_fc(box, link) == probe
    revert_all(box)
    assert link.is_symlink() and src.read_text() == DRAFT_SOURCE


def test_crlf_file_keeps_its_line_endings(box, tmp_path):
    p = tmp_path / "crlf.py"
    original = b"def f(x):\r\n    y = x + 1\r\n    return y\r\n"
    p.write_bytes(original)
    add_probe(box, p, before=r"return y", exprs=["y"], tag="crlf")
    assert b"\n" not in p.read_bytes().replace(b"\r\n", b"")
    revert_all(box)
    assert p.read_bytes() == original


CRASHER = textwrap.dedent(
    """\
    import sys
    sys.path.insert(0, {repo!r})
    from remote import connect
    from remote.probes import add_probe
    box = connect({name!r}, state_dir={state!r}, python=sys.executable)
    add_probe(box, {src!r}, before=16, exprs=["hidden_states.shape"], tag="crashy")
    print("not killed")
    """
)


@pytest.mark.parametrize("point", ["after-backup", "before-replace", "after-replace"])
def test_process_killed_mid_probe_leaves_a_whole_file_and_a_recoverable_journal(box, src, point):
    original = src.read_bytes()
    script = CRASHER.format(repo=REPO, name=box.name, state=box.state_dir, src=str(src))
    env = {**os.environ, CRASH_ENV: point}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr
    [pending] = list_probes(box)
    assert pending.state == "pending" and pending.tag == "crashy"
    current = src.read_bytes()
    if point == "after-replace":
        assert hashlib.sha256(current).hexdigest() == pending.patched_sha256  # whole patched file
        compile(current, str(src), "exec")
    else:
        assert current == original  # the original, not half of anything
    with pytest.raises(ProbeConflict, match="interrupted") as info:
        add_probe(box, src, before=16, exprs=["hidden_states.shape"], tag="crashy")
    assert "run `workbench probe revert --tag crashy` (revert_probe in Python) to clean up first" in str(info.value)
    assert [p.tag for p in revert_all(box)] == ["crashy"]
    assert src.read_bytes() == original
    assert list_probes(box) == [] and os.listdir(src.parent) == ["draft_model.py"]


def test_read_probe_output_variants():
    log = "\n".join(
        [
            "INFO something else",
            "[probe:t] x=torch.Size([1, 384]) s='a b=c' d={'k': (1, 2)} e=<error:ValueError('x y')>",
            "[TP3] [probe:t] x=(2, 3) s='' d={} e=None",
            "[probe:t] <probe failed:NameError('sys')>",
            "[probe:other] x=1",
        ]
    )
    got = read_probe_output(log, "t")
    assert got[0] == {"x": "torch.Size([1, 384])", "s": "'a b=c'", "d": "{'k': (1, 2)}", "e": "<error:ValueError('x y')>"}
    assert got[1] == {"x": "(2, 3)", "s": "''", "d": "{}", "e": "None"}
    assert got[2] == {"probe_error": "<probe failed:NameError('sys')>"}
    exact = read_probe_output(
        "[probe:t] a if b else c=1 x == y=False", "t", exprs=["a if b else c", "x == y"]
    )
    assert exact == [{"a if b else c": "1", "x == y": "False"}]
    assert read_probe_output("", "t") == []


@pytest.mark.parametrize(
    "text, shape",
    [
        ("torch.Size([1, 384])", (1, 384)),
        ("torch.Size([])", ()),
        ("(1, 384)", (1, 384)),
        ("(384,)", (384,)),
        ("[2, 3, 4]", (2, 3, 4)),
        (" Size([7168]) ", (7168,)),
    ],
)
def test_parse_shape(text, shape):
    assert parse_shape(text) == shape


@pytest.mark.parametrize("text", ["7168", "torch.Size([1, x])", "(1, 2", "None"])
def test_parse_shape_rejects_non_shapes(text):
    with pytest.raises(ValueError):
        parse_shape(text)


# -- read-back from a log on the box -------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("torch.Size([1, 5, 480])", (1, 5, 480)),
        ("Size([160])", (160,)),
        ("(1, 480)", (1, 480)),
        ("[2, 4, 7]", [2, 4, 7]),
        ("[]", []),
        ("None", None),
        ("True", True),
        ("-3", -3),
        ("0.125", 0.125),
        ("inf", float("inf")),
        ("'a b=c'", "a b=c"),
        ("{'k': (1, 2)}", {"k": (1, 2)}),
        ("torch.float32", "torch.float32"),
        ("tensor([1, 2])", "tensor([1, 2])"),
        ("<error:AttributeError(\"'NoneType' object has no attribute 'shape'\")>",
         "<error:AttributeError(\"'NoneType' object has no attribute 'shape'\")>"),
        ("[1, 2, 3...", "[1, 2, 3..."),  # a repr cut at MAX_REPR stays text
        ("torch.Size([1, x])", "torch.Size([1, x])"),
        ("__import__('os').getcwd()", "__import__('os').getcwd()"),  # never evaluated
    ],
)
def test_parse_probe_value(text, value):
    assert parse_probe_value(text) == value
    assert type(parse_probe_value(text)) is type(value)


def test_parse_probe_value_nan_and_type_errors():
    nan = parse_probe_value("nan")
    assert isinstance(nan, float) and nan != nan
    with pytest.raises(TypeError):
        parse_probe_value(480)


LOG_LINES = [
    "[2026-01-01 12:00:00] server_args=ServerArgs(...)",
    "[probe:width] hidden_states.shape=torch.Size([1, 5, 480]) embeds.shape=torch.Size([1, 5, 160]) "
    "hidden_states.dtype=torch.float32 x=<error:NameError(\"name 'x' is not defined\")>",
    "[probe:width2] hidden_states.shape=torch.Size([1, 1])",
    "    print('[probe:width] ' + ' '.join(_ewb_parts))",  # a traceback quoting the probe's source
    "[2026-01-01 12:00:01 TP1] [probe:width] hidden_states.shape=torch.Size([1, 5, 160]) "
    "embeds.shape=torch.Size([1, 5, 160]) hidden_states.dtype=torch.float32 x=None",
    "[probe:width] <probe failed:RuntimeError('boom')>",
]


def test_read_probe_log_greps_on_the_box_and_parses(box, tmp_path, read_counter):
    log = tmp_path / "server log.txt"
    filler = "[2026-01-01 12:00:00] Decode batch, #running-req: 1, #token: 99, accept len: 1.00\n" * 200_000
    with log.open("wb") as f:  # ~17 MB of ordinary lines, a binary byte, then the probe lines
        f.write(filler.encode())
        f.write(b"\x00\xff binary junk\n")
        f.write(("\n".join(LOG_LINES) + "\n").encode())
    first = 200_001 + 1  # the line number of LOG_LINES[0]
    readings = read_probe_log(box, log, "width", exprs=["hidden_states.shape", "embeds.shape", "hidden_states.dtype", "x"])
    assert read_counter.calls == 0 and read_counter.bytes == 0  # nothing of the log came back but grep's lines
    assert [r.line_number for r in readings] == [first + 1, first + 4, first + 5]
    a, b, failed = readings
    assert isinstance(a, ProbeReading) and a.tag == "width"
    assert a.values == {"hidden_states.shape": (1, 5, 480), "embeds.shape": (1, 5, 160),
                        "hidden_states.dtype": "torch.float32", "x": a.raw["x"]}
    assert a.raw["hidden_states.shape"] == "torch.Size([1, 5, 480])"
    assert a.errors == {"x": "<error:NameError(\"name 'x' is not defined\")>"} and a.error is None
    assert b.values["hidden_states.shape"][-1] == 160 and b.values["x"] is None and b.errors == {}
    assert b.log_line.startswith("[2026-01-01 12:00:01 TP1] [probe:width]")
    assert failed.error == "<probe failed:RuntimeError('boom')>" and failed.values == {"probe_error": failed.error}
    assert json.loads(json.dumps(a.to_dict()))["values"]["hidden_states.shape"] == [1, 5, 480]
    # without exprs the fields are split heuristically, to the same values
    assert [r.values for r in read_probe_log(box, str(log), "width")][:2] == [a.values, b.values]
    assert read_probe_log(box, log, "width2")[0].values == {"hidden_states.shape": (1, 1)}
    assert read_probe_log(box, log, "never-fired") == []


def test_read_probe_log_errors_are_typed(box, tmp_path):
    with pytest.raises(RemoteFileNotFound):
        read_probe_log(box, tmp_path / "no such.log", "t")
    with pytest.raises(RemoteIsADirectory):
        read_probe_log(box, tmp_path, "t")
    (tmp_path / "x.log").write_text("[probe:t] a=1\n")
    with pytest.raises(ProbeError, match="tag"):
        read_probe_log(box, tmp_path / "x.log", "bad tag")
    assert read_probe_log(box, tmp_path / "x.log", "t")[0].values == {"a": 1}


# -- on the real SGLang 0.5.23 source -------------------------------------------------------------

from sglang_files import AUX_REL, DRAFT_REL, GATE, RUN_AUX_GATE, WIDTH_CHECK  # noqa: E402



def copy_sglang_subset(sglang_source, dest, rels=(DRAFT_REL, AUX_REL)):
    """A package dir ``dest/sglang`` holding the real files ``rels`` (relative layout kept) and the
    package's ``__init__.py`` / ``version.py`` / ``_version.py``; returns it."""
    import shutil

    root = dest / "sglang"
    for rel in ("__init__.py", "version.py", "_version.py", *rels):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sglang_source / rel, root / rel)
    return root


def _line_of(path, text):
    [n] = [i for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip() == text]
    return n


def test_probes_on_the_real_sglang_source(box, sglang_source, tmp_path):
    root = copy_sglang_subset(sglang_source, tmp_path / "site")
    draft, aux = root / DRAFT_REL, root / AUX_REL
    originals = {p: hashlib.sha256((sglang_source / rel).read_bytes()).hexdigest()
                 for p, rel in ((draft, DRAFT_REL), (aux, AUX_REL))}
    width_line, gate_line = _line_of(draft, WIDTH_CHECK), _line_of(aux, GATE)

    assert locate_anchor(box, draft, before=r"if hidden_states\.shape\[-1\] != embeds", function="LlamaModel.forward") \
        == width_line
    width = add_probe(box, draft, before=r"if hidden_states\.shape\[-1\] != embeds", function="LlamaModel.forward",
                      exprs=["hidden_states.shape", "embeds.shape", "self.fc.in_features"], tag="width")
    gate = add_probe(box, aux, before=r"if spec_algorithm\.is_eagle3\(\):", function="_resolve_eagle_aux_hidden_state",
                     exprs=["spec_algorithm", "spec_algorithm.is_eagle3()", "draft_path"], tag="gate")
    assert (width.line, gate.line) == (width_line, gate_line)
    for probe, path in ((width, draft), (gate, aux)):
        lines = path.read_text().splitlines()
        compile(path.read_bytes(), str(path), "exec")  # compiled on the box too (add_probe checked it)
        assert lines[probe.line - 1].strip() == f"# >>> eagle-workbench probe {probe.tag} >>>"
        assert lines[probe.line - 1 + probe.block_lines].strip() in (WIDTH_CHECK, GATE)
        assert probe_file_status(box, probe) == ("patched", probe.patched_sha256)
    assert [p.tag for p in list_probes(box)] == ["width", "gate"]

    # the probe fires inside the real function, which goes on doing what it did
    log = tmp_path / "server.log"
    for algo in ("EAGLE", "EAGLE3"):
        with log.open("a") as f:
            out = subprocess.run([sys.executable, "-c", RUN_AUX_GATE, str(aux), algo], stderr=f, stdout=subprocess.PIPE,
                                 text=True, timeout=60)
        assert out.returncode == 0, log.read_text()[-2000:]
        assert out.stdout.split(None, 1) == (["False", "None\n"] if algo == "EAGLE" else ["True", "[1, 29, 57]\n"])
    readings = read_probe_log(box, log, gate)
    assert [r.values for r in readings] == [
        {"spec_algorithm": "SpeculativeAlgorithm.EAGLE", "spec_algorithm.is_eagle3()": False, "draft_path": "/models/draft"},
        {"spec_algorithm": "SpeculativeAlgorithm.EAGLE3", "spec_algorithm.is_eagle3()": True, "draft_path": "/models/draft"},
    ]

    assert [p.tag for p in revert_all(box)] == ["gate", "width"]
    for path, sha in originals.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    assert list_probes(box) == [] and sorted(os.listdir(draft.parent)) == ["llama_eagle3.py"]


def test_file_status_after_edits_stacks_and_removal(box, src):
    a = _add_fc(box, src, tag="a")
    b = add_probe(box, src, before=r"return hidden_states$", function="LlamaModel.forward", exprs=["1"], tag="b")
    patched = src.read_bytes()
    assert probe_file_status(box, a)[0] == "stacked" and probe_file_status(box, b)[0] == "patched"
    with src.open("a") as f:
        f.write("# edited\n")
    assert probe_file_status(box, a)[0] == "edited" and probe_file_status(box, b)[0] == "edited"
    src.write_text(DRAFT_SOURCE)
    assert probe_file_status(box, a)[0] == "original" and probe_file_status(box, b)[0] == "edited"
    src.unlink()
    assert probe_file_status(box, a) == ("missing", None)
    src.write_bytes(patched)
    assert [p.tag for p in revert_all(box)] == ["b", "a"]
    assert src.read_text() == DRAFT_SOURCE


# -- what a probe may go into, and what it may evaluate -------------------------------------------


def test_refuses_a_file_that_is_not_python_source(box, tmp_path):
    hostname = tmp_path / "hostname"  # "vm" is a valid Python expression: it compiles
    hostname.write_text("vm\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("x = 1\n")
    link = tmp_path / "looks_like.py"
    link.symlink_to(hostname)  # the real file is what gets patched: still refused
    for path in (hostname, notes, link):
        with pytest.raises(ProbeError, match="not a Python source file") as info:
            add_probe(box, path, before=1, exprs=["1"], tag="t")
        assert info.value.path in (str(hostname), str(notes))
    assert hostname.read_text() == "vm\n" and notes.read_text() == "x = 1\n"
    assert list_probes(box) == [] and not os.path.exists(journal_dir(box))


def test_refuses_when_the_original_does_not_compile(box, tmp_path):
    legacy = tmp_path / "legacy.py"
    original = b"def f(x):\n    print 'x is', x\n    return x\n"  # Python 2
    legacy.write_bytes(original)
    with pytest.raises(ProbeCompileError, match="the original file does not compile") as info:
        add_probe(box, legacy, before=r"return x", exprs=["x"], tag="legacy")
    assert info.value.of_original and "nothing was written" in str(info.value)
    assert "print" in info.value.output
    assert legacy.read_bytes() == original
    assert [n for n in os.listdir(tmp_path) if n != "box-state"] == ["legacy.py"]  # no temporary file
    assert list_probes(box) == [] and not os.path.exists(journal_dir(box))


@pytest.mark.parametrize("expr, why", [
    ("(n := hidden_states.shape)", ":="),
    ("[y for x in embeds if (y := x)]", ":="),
    ("await embeds", "await"),
    ("(yield)", "yield"),
    ("hidden_states.zero_()", ".zero_()"),
    ("hidden_states.mul_(2)", ".mul_()"),
    ("hidden_states.copy_(embeds)", ".copy_()"),
    ("hidden_states.fill_(0).shape", ".fill_()"),
    ("[t.add_(1) for t in (hidden_states,)]", ".add_()"),
    ("(lambda t: t.clamp_(0))(embeds)", ".clamp_()"),
])
def test_expressions_that_would_change_state_are_refused(src, tmp_path, expr, why):
    with connect("local", state_dir=tmp_path / "box-state", python=sys.executable) as box:
        with pytest.raises(ProbeError, match="must only read") as info:
            add_probe(box, src, before=16, exprs=["embeds", expr], tag="t")
        assert why in str(info.value) and isinstance(info.value, ProbeExpressionRefused)
        with pytest.raises(ProbeError, match="once_per .* must only read"):
            add_probe(box, src, before=16, exprs=["embeds"], once_per=expr, tag="t")
    assert src.read_text() == DRAFT_SOURCE and not (tmp_path / "box-state").exists()


@pytest.mark.parametrize("expr", ["hidden_states.shape[-1]", "hidden_states.zero_", "a_ == b_", "type(x).__name__",
                                  "hidden_states.float().mean().item()", "len(embeds) if embeds else None",
                                  "{n: p.norm().item() for n, p in m.named_parameters()}", "hasattr(x, 'fc')",
                                  "torch.linalg.vector_norm(p.detach(), dtype=torch.float32)", "f'{x.shape!r}'",
                                  "x.is_contiguous()", "sorted(d.items(), reverse=True)[:3]"])
def test_reading_expressions_are_allowed(expr):
    check_expression(expr)  # an in-place method not called, names ending in _, the recipes' kinds of reads


@pytest.mark.parametrize("expr, column, why", [
    ("__import__('os').system('touch /tmp/x')", 1, "__import__"),
    ("open('/tmp/x', 'w')", 1, "open (I/O)"),
    ("getattr(h, 'zero_')()", 1, "getattr"),
    ("getattr(hidden_states, 'shape')", 1, "getattr"),
    ("h.__class__.__mro__", 1, ".__class__"),
    ("x.__globals__", 1, ".__globals__"),
    ("hidden_states.__len__()", 1, ".__len__"),
    ("embeds.add(1)", 1, ".add()"),
    ("os.system('id')", 1, ".system()"),
    ("eval('1')", 1, "eval"),
    ("(lambda: 0)()", 2, "a lambda"),
    ("sorted(x, key=os.system)", 1, "keyword key="),
    ("max(*xs)", 5, "unpacking (*x)"),
    ("{**d}", 1, "unpacking (**x)"),
    ("type('X', (), {})", 1, "type() with other than one argument"),
    ("hasattr(x, name)", 1, "hasattr() without a constant"),
    ("hasattr(x, '__class__')", 12, ".__class__"),
    ("'{0.__class__}'.format(x)", 1, ".format()"),
    ("f'{x.__dict__}'", 4, ".__dict__"),
    ("x.shape if _ewb_sys else 0", 12, "_ewb_sys"),
    ("__builtins__", 1, "the dunder name"),
    ("f(x)", 1, "a call of f()"),
    ("x.is_ready(1)", 1, ".is_ready() with arguments"),
    ("[y for y.attr in xs]", 8, "a comprehension target other than names"),
])
def test_expressions_outside_the_whitelist_are_refused_naming_the_node(expr, column, why):
    with pytest.raises(ProbeExpressionRefused) as info:
        check_expression(expr, what="--print")
    assert why in str(info.value) and f"at column {column} " in str(info.value), str(info.value)
    assert info.value.column == column and str(info.value).startswith(f"--print {expr!r} is refused")


# -- once per distinct key -------------------------------------------------------------------------

WIDTHS_CALLER = textwrap.dedent(
    """\
    import sys
    sys.path.insert(0, sys.argv[1])
    import draft_model as m
    model = m.LlamaModel()
    for width in map(int, sys.argv[2].split(",")):
        result = model.forward(m.FakeTensor(1, width), m.FakeTensor(1, 7168))
        print(getattr(result, "shape", result))
    """
)

# CUDA-graph capture first (the 1x-wide zeros buffer, several batch sizes), then the draft-extend
# call aux-wide (3 x 7168), then decode again, then more widths than max_prints allows.
WIDTHS = [7168, 7168, 7168, 21504, 21504, 7168, 100, 200, 300]


def _run_widths(src, widths=WIDTHS):
    out = subprocess.run([sys.executable, "-c", WIDTHS_CALLER, str(src.parent), ",".join(map(str, widths))],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [("torch.Size([1, 7168])" if w == 7168 else "fc(hidden_states)")
                                       for w in widths]  # the engine's behaviour is unchanged
    return out.stderr


def test_once_per_prints_each_distinct_key_once_up_to_max_prints(box, src, tmp_path):
    per_width = _add_fc(box, src, tag="per-width", exprs=["hidden_states.shape"], once_per="hidden_states.shape[-1]",
                        max_prints=3)
    assert (per_width.once_per, per_width.max_prints) == ("hidden_states.shape[-1]", 3)
    once = add_probe(box, src, before=r"return hidden_states$", function="LlamaModel.forward",
                     exprs=["hidden_states.shape"], tag="once")  # the default: once per process
    assert (once.once_per, once.max_prints) == (None, 8)
    # the same probe again is idempotent (also once newer probes sit on top of it)
    assert _add_fc(box, src, tag="per-width", exprs=["hidden_states.shape"], once_per="hidden_states.shape[-1]",
                   max_prints=3) == per_width
    bad_key = add_probe(box, src, before=r"return hidden_states$", function="LlamaModel.forward",
                        exprs=["hidden_states.shape"], once_per="hidden_states.no_such_attr", tag="bad-key")
    entry = json.loads(open(per_width.journal_path).read())
    assert (entry["once_per"], entry["max_prints"]) == ("hidden_states.shape[-1]", 3)

    log = tmp_path / "server.log"
    log.write_text(_run_widths(src))
    got = [r.values["hidden_states.shape"] for r in read_probe_log(box, log, per_width)]
    assert got == [(1, 7168), (1, 21504), (1, 100)]  # each width once, in order; 200 and 300 over max_prints
    # the once-per-process probe only ever shows the first call: the graph-capture width
    assert [r.values["hidden_states.shape"] for r in read_probe_log(box, log, once)] == [(1, 7168)]
    [failed] = read_probe_log(box, log, bad_key)  # a failing key prints once and never raises into the code
    assert failed.error.startswith("<probe failed:AttributeError(")

    assert _add_fc(box, src, tag="per-width", exprs=["hidden_states.shape"], once_per="hidden_states.shape[-1]",
                   max_prints=3) == per_width
    # another key or max_prints under the same tag is a different probe
    for kw in ({"once_per": "hidden_states.shape"}, {"once_per": None}, {"once_per": "hidden_states.shape[-1]"}):
        with pytest.raises(ProbeExists, match="once per hidden_states.shape\\[-1\\] \\(max 3\\)"):
            _add_fc(box, src, tag="per-width", exprs=["hidden_states.shape"], **kw)
    with pytest.raises(ProbeExists, match="once per process"):
        add_probe(box, src, before=r"return hidden_states$", function="LlamaModel.forward",
                  exprs=["hidden_states.shape"], once_per="hidden_states.shape[-1]", tag="once")
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ProbeError, match="max_prints must be a positive int"):
            _add_fc(box, src, tag="other", once_per="hidden_states.shape[-1]", max_prints=bad)
    assert [p.tag for p in revert_all(box)] == ["bad-key", "once", "per-width"]
    assert src.read_text() == DRAFT_SOURCE


def test_render_block_once_per_default_and_key_failure():
    block = render_block("w", ["x.shape"], "    ", once_per="x.shape[-1]")
    assert "if _ewb_b.len(_ewb_seen) < 8:" in block and "_ewb_b.repr((x.shape[-1]))" in block
    ns = {"x": type("T", (), {"shape": (1, 2)})()}
    code = compile("def f(x):\n" + block + "    return 1\n", "<probe>", "exec")
    exec(code, ns)
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        for shape in ((1, 2), (1, 2), (1, 3), None, None, (1, 3), (1, 4)):
            x = type("T", (), {"shape": shape})()
            assert ns["f"](x) == 1  # a key that raises (None[-1]) never reaches the caller
    who = f"pgid={os.getpgrp()} pid={os.getpid()}"
    assert err.getvalue().splitlines() == [
        f"[probe:w {who}] x.shape=(1, 2)", f"[probe:w {who}] x.shape=(1, 3)",
        f"[probe:w {who}] <probe failed:TypeError(\"'NoneType' object is not subscriptable\")>",  # once
        f"[probe:w {who}] x.shape=(1, 4)"]


def test_journal_entries_of_older_versions_still_load_and_revert(box, src):
    probe = _add_fc(box, src)
    entry = json.loads(open(probe.journal_path).read())
    for key in ("once_per", "max_prints", "mode", "owner_uid", "owner_gid", "owner_note"):
        del entry[key]
    with open(probe.journal_path, "w") as f:
        json.dump(entry, f)
    [old] = list_probes(box)
    assert (old.once_per, old.max_prints, old.mode, old.owner_uid) == (None, 8, None, None)
    assert _add_fc(box, src) == old  # idempotent against the old entry
    assert revert_probe(box, "fc-width").tag == "fc-width"
    assert src.read_text() == DRAFT_SOURCE and stat.S_IMODE(src.stat().st_mode) == 0o640


# -- owner and mode ----------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_owner_and_mode_are_kept_on_add_and_revert(box, src, nobody):
    uid, gid = nobody
    os.chown(src, uid, gid)
    before = src.stat()
    probe = _add_fc(box, src)
    after = src.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (uid, gid, 0o640)
    assert after.st_ino != before.st_ino  # an atomic rename: a new inode
    assert (probe.owner_uid, probe.owner_gid, probe.mode, probe.owner_note) == (uid, gid, 0o640, None)
    entry = json.loads(open(probe.journal_path).read())
    assert (entry["owner_uid"], entry["owner_gid"], entry["mode"]) == (uid, gid, 0o640)
    reverted = revert_probe(box, probe)
    restored = src.stat()
    assert reverted.owner_note is None and src.read_text() == DRAFT_SOURCE
    assert (restored.st_uid, restored.st_gid, stat.S_IMODE(restored.st_mode)) == (uid, gid, 0o640)
    assert os.listdir(src.parent) == ["draft_model.py"]


AS_NOBODY = textwrap.dedent(
    """\
    import json, sys
    sys.path.insert(0, {repo!r})
    from remote import connect
    from remote.probes import add_probe, revert_probe
    with connect("local", state_dir={state!r}, python=sys.executable) as box:
        probe = add_probe(box, {src!r}, before=16, exprs=["hidden_states.shape"], tag="nobody")
        print(json.dumps(probe.owner_note))
        print(json.dumps(revert_probe(box, probe).owner_note))
    """
)


def _as_user(uid, gid, argv, **kw):
    """``argv`` run as ``uid:gid`` (no supplementary groups) through ``setpriv``."""
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=60, **kw)


def _python_for(uid, gid, env):
    """An interpreter ``uid`` may run that imports the workbench with ``env`` (this venv's may live
    under /root); skips when there is none."""
    import sysconfig

    probe = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import remote.probes'], check=True)"
    for cand in (sys.executable, getattr(sys, "_base_executable", None), "/usr/bin/python3", shutil.which("python3")):
        if cand and _as_user(uid, gid, [cand, "-c", probe], env=env, cwd="/").returncode == 0:
            return cand  # also in a process it starts, as the box runs the compile check
    pytest.skip(f"no Python that uid {uid} may run with {sysconfig.get_paths()['purelib']}")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_owner_that_cannot_be_kept_is_reported_and_the_probe_still_added(nobody):
    """As ``nobody``, in a directory it may write, on a file owned by root: the temporary file is
    nobody's and chown to root is not permitted; the probe goes in anyway and says so."""
    import sysconfig
    import tempfile

    uid, gid = nobody
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([REPO, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])}
    python = _python_for(uid, gid, env)
    work = tempfile.mkdtemp(prefix="ewb-owner-")
    try:
        os.chmod(work, 0o777)
        src = os.path.join(work, "draft_model.py")
        with open(src, "w") as f:
            f.write(DRAFT_SOURCE)
        os.chmod(src, 0o666)
        script = AS_NOBODY.format(repo=REPO, state=os.path.join(work, "state"), src=src)
        out = _as_user(uid, gid, [python, "-c", script], env={**env, "HOME": work}, cwd=work)
        assert out.returncode == 0, out.stderr
        added, reverted = (json.loads(line) for line in out.stdout.splitlines())
        for note in (added, reverted):
            assert note.startswith(f"owner could not be kept: the file is now owned by {uid}:{gid}, the original by 0:0")
            assert "Operation not permitted" in note
        assert open(src).read() == DRAFT_SOURCE and stat.S_IMODE(os.stat(src).st_mode) == 0o666
    finally:
        shutil.rmtree(work)


# -- unreadable journal entries, and putting the original back by hand ------------------------------


def test_unreadable_journal_entries_are_reported_not_fatal(box, src):
    probe = _add_fc(box, src, tag="good")
    jdir = journal_dir(box)
    with open(os.path.join(jdir, "bogus.json"), "w") as f:
        f.write("{not json")
    with open(os.path.join(jdir, "half.json"), "w") as f:
        json.dump({"tag": "half", "path": str(src)}, f)
    with open(os.path.join(jdir, "renamed.json"), "w") as f:
        json.dump({**probe.to_dict(), "tag": "someone-else"}, f)
    probes, problems = list_journal(box)
    assert probes == [probe]
    assert [(p.tag, p.journal_path) for p in problems] == [
        (t, os.path.join(jdir, f"{t}.json")) for t in ("bogus", "half", "renamed")]
    assert "not JSON" in problems[0].reason and "missing field(s) line" in problems[1].reason
    assert "records tag 'someone-else'" in problems[2].reason
    assert isinstance(problems[0], JournalProblem) and "then delete the entry" in problems[0].describe()
    assert list_probes(box) == [probe]
    with pytest.raises(ProbeError, match="unreadable"):
        revert_probe(box, "bogus")
    with pytest.raises(ProbeConflict, match="could not revert 3") as info:
        revert_all(box)
    assert [p.tag for p in info.value.reverted] == ["good"]  # the readable one is reverted all the same
    assert [p.tag for p in info.value.unreadable] == ["bogus", "half", "renamed"]
    assert src.read_text() == DRAFT_SOURCE
    assert sorted(os.listdir(jdir)) == ["bogus.json", "half.json", "renamed.json"]  # left for a human


def test_after_a_refused_revert_cp_then_revert_drops_the_record(box, src):
    original = src.read_bytes()
    probe = _add_fc(box, src)
    with src.open("a") as f:
        f.write("# a colleague's change\n")
    with pytest.raises(ProbeConflict) as info:
        revert_probe(box, probe)
    message = str(info.value)
    assert f"the original is kept at {probe.backup_path}" in message
    [cp] = re.findall(r"`(cp [^`]+)`", message)
    assert "`workbench probe revert --tag fc-width` drops the record" in message
    subprocess.run(cp, shell=True, check=True)  # the path has spaces and quotes: the command is quoted
    assert src.read_bytes() == original
    assert revert_probe(box, "fc-width").tag == "fc-width"
    assert src.read_bytes() == original and list_probes(box) == [] and os.listdir(journal_dir(box)) == []


def test_locate_anchor_counts_lines_without_other_probes_blocks(box, src):
    first = _add_fc(box, src, tag="first")
    rx = r"return hidden_states$"
    in_file = locate_anchor(box, src, before=rx, function="LlamaModel.forward")
    assert in_file == 18 + first.block_lines
    assert locate_anchor(box, src, before=rx, function="LlamaModel.forward", without_probes=True) == 18
    assert locate_anchor(box, src, before=in_file, without_probes=True) == 18
    assert DRAFT_SOURCE.splitlines()[17].strip() == "return hidden_states"
    revert_all(box)


# -- which launch printed a line -----------------------------------------------------------------------

ENGINE_STEP = textwrap.dedent(
    """\
    def step(label):
        width = len(label)
        return width
    """
)

#: A tiny server (tests/remote/tiny_launch_server.py) that first runs the probed ``step`` in its own
#: process and in a worker process it spawns (as SGLang's scheduler runs the model), then serves.
LAUNCH_WITH_WORKER = textwrap.dedent(
    """\
    import runpy, subprocess, sys
    engine_dir, tiny, port, label = sys.argv[1:5]
    sys.path.insert(0, engine_dir)
    import engine_step
    engine_step.step(label)
    code = f"import sys; sys.path.insert(0, {engine_dir!r}); import engine_step; engine_step.step({label + '-worker'!r})"
    subprocess.run([sys.executable, "-c", code], check=True)
    sys.argv = [tiny, "--port", port]
    runpy.run_path(tiny, run_name="__main__")
    """
)


def test_a_log_appended_by_two_launches_is_read_per_launch(box, tmp_path, tiny_server_argv, free_port):
    """Two real launches append to one log; each line carries its launch's pgid (the server's pid,
    inherited by the worker it spawns); reading with pgid= returns only that launch's lines, and a
    line of the older format (no pgid) is read as of unknown launch."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "engine_step.py").write_text(ENGINE_STEP)
    probe = add_probe(box, engine / "engine_step.py", before=r"return width", exprs=["label", "width"], tag="step")
    log = tmp_path / "server.log"
    handles = []
    try:
        for label in ("first", "second"):
            argv = [sys.executable, "-c", LAUNCH_WITH_WORKER, str(engine), tiny_server_argv[1], str(free_port), label]
            handle = box.launch_server(argv, port=free_port, log_path=log, append_log=True)
            handles.append(handle)
            box.wait_healthy(handle, timeout=60)
            box.stop_server(handle)
    finally:
        for handle in handles:
            box.stop_server(handle)
        revert_probe(box, probe)
    first, second = handles
    assert first.pid == first.pgid and second.pid == second.pgid and first.pgid != second.pgid
    with log.open("a") as f:  # a line printed by an older probe block: no pgid
        f.write("[probe:step] label='old' width=3\n")

    everything = read_probe_log(box, log, probe)
    assert [(r.values["label"], r.pgid) for r in everything] == [
        ("first", first.pgid), ("first-worker", first.pgid), ("second", second.pgid),
        ("second-worker", second.pgid), ("old", None)]
    server_line, worker_line = everything[:2]
    assert server_line.pid == first.pid and worker_line.pid not in (None, first.pid)  # the worker: same group
    assert server_line.log_line.startswith(f"[probe:step pgid={first.pgid} pid={first.pid}] label='first'")
    for handle, label in ((first, "first"), (second, "second")):
        mine = read_probe_log(box, log, probe, pgid=handle)
        assert [r.values["label"] for r in mine] == [label, label + "-worker"]
        assert [r.values for r in read_probe_log(box, log, "step", pgid=handle.pgid)] == [r.values for r in mine]
        assert read_probe_output(log.read_text(), probe, pgid=handle) == [r.raw for r in mine]
    assert list(readings_by_launch(everything)) == [first.pgid, second.pgid, None]
    assert readings_by_launch(everything)[None][0].to_dict()["pgid"] is None
    assert read_probe_log(box, log, probe, pgid=1) == []  # a launch that printed nothing here
    with pytest.raises(TypeError, match="process group id"):
        read_probe_log(box, log, probe, pgid="first")
    assert launch_pgid(None) is None and launch_pgid(7) == 7
    with pytest.raises(TypeError):
        launch_pgid(True)


def test_when_prints_only_the_calls_it_holds_for_and_never_raises(box, src, tmp_path):
    """``when``: only calls where it is true print (and count towards once / max_prints); a
    condition that raises prints one <probe failed:...> line and the code runs on unchanged."""
    wide = _add_fc(box, src, tag="wide", exprs=["hidden_states.shape"], once_per="hidden_states.shape[-1]",
                   when="hidden_states.shape[-1] > 10000", max_prints=2)
    assert wide.when == "hidden_states.shape[-1] > 10000"
    first_wide = _add_fc(box, src, tag="first-wide", exprs=["hidden_states.shape"],
                         when="hidden_states.shape[-1] > 10000")  # once per process, the first call that holds
    broken = _add_fc(box, src, tag="broken", exprs=["hidden_states.shape"], when="hidden_states.no_such_attr")
    assert json.loads(open(wide.journal_path).read())["when"] == "hidden_states.shape[-1] > 10000"
    log = tmp_path / "server.log"
    log.write_text(_run_widths(src, [7168, 21504, 7168, 20000, 30000, 21504]))
    assert [r.values["hidden_states.shape"] for r in read_probe_log(box, log, wide)] == [(1, 21504), (1, 20000)]
    assert [r.values["hidden_states.shape"] for r in read_probe_log(box, log, first_wide)] == [(1, 21504)]
    [failed] = read_probe_log(box, log, broken)
    assert failed.error.startswith("<probe failed:AttributeError(") and failed.pgid == os.getpgrp()
    with pytest.raises(ProbeExists, match="when hidden_states.shape"):  # another condition is another probe
        _add_fc(box, src, tag="wide", exprs=["hidden_states.shape"], once_per="hidden_states.shape[-1]",
                max_prints=2)
    with pytest.raises(ProbeError, match="when '\\(n := 1\\)' is refused"):
        _add_fc(box, src, tag="bad-when", when="(n := 1)")
    with pytest.raises(ProbeError, match="max_repr must be a positive int"):
        _add_fc(box, src, tag="bad-repr", max_repr=0)
    revert_all(box)
    assert src.read_text() == DRAFT_SOURCE


def test_the_block_never_raises_even_when_stderr_cannot_be_written():
    """A print that fails (stderr closed, a broken pipe) is caught too: the failure is kept in
    sys._eagle_workbench_probes_lost, and the code goes on."""
    ns: dict = {}
    exec(compile("def f(x):\n" + render_block("lost-t", ["x"], "    ", when="x > 0") + "    return x + 1\n",
                 "<probe>", "exec"), ns)

    class Unwritable:
        def write(self, s):
            raise OSError("stderr is closed")

        def flush(self):
            raise OSError("stderr is closed")

    saved = sys.stderr
    sys.stderr = Unwritable()
    try:
        assert ns["f"](0) == 1 and ns["f"](1) == 2 and ns["f"](2) == 3
    finally:
        sys.stderr = saved
    assert sys._eagle_workbench_probes_lost["lost-t"] == "OSError('stderr is closed')"


# -- containment: what the inserted block may do, and where it may be written -----------------------

GATED_SOURCE = textwrap.dedent(
    """\
    import sys
    import torch


    def work(m, it, x):
        len = print  # a frame variable shadowing the builtin
        y = 1
        return next(it), str(m.weight.dtype), y
    """
)


def test_the_block_gates_every_call_when_the_probe_runs(box, tmp_path):
    """The static whitelist passes these; when the probe runs, the gate still refuses a shadowed
    builtin, a module cast in place and an iterator of the frame: each prints ``<error:...>`` and
    the engine's state is as before (the module still half, the iterator not advanced)."""
    path = tmp_path / "gated.py"
    path.write_text(GATED_SOURCE)
    exprs = ["len(x)", "m.float()", "list(it)", "x.float().sum().item()", "m.weight.dtype", "tuple(x.shape)"]
    probe = add_probe(box, path, before=r"^\s+y = 1$", exprs=exprs, tag="gate")
    caller = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import gated; "
              "print(gated.work(torch.nn.Linear(2, 2).half(), iter(range(5)), torch.ones(2, 3)))")
    out = subprocess.run([sys.executable, "-c", caller, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(0, 'torch.float16', 1)"  # the iterator not consumed, the module not cast
    [values] = read_probe_output(out.stderr, probe)
    assert values["len(x)"].startswith("<error:TypeError('probe: len here is <built-in function print>")
    assert values["m.float()"] == "<error:TypeError('probe: .float() would change the module in place; not called')>"
    assert values["list(it)"].startswith("<error:TypeError('probe: range_iterator is an iterator")
    assert values["x.float().sum().item()"] == "6.0"
    assert values["m.weight.dtype"] == "torch.float16" and values["tuple(x.shape)"] == "(2, 3)"
    revert_probe(box, probe)
    assert path.read_text() == GATED_SOURCE


def test_a_symlink_out_of_the_engine_is_refused_naming_link_and_target(box, tmp_path):
    engine, outside = tmp_path / "pkg", tmp_path / "elsewhere"
    (engine / "models").mkdir(parents=True)
    outside.mkdir()
    (outside / "victim.py").write_text(DRAFT_SOURCE)
    (engine / "models" / "inside.py").write_text(DRAFT_SOURCE)
    os.symlink(outside, engine / "linked")                        # a directory link leading out
    os.symlink(outside / "victim.py", engine / "models" / "file_link.py")  # a file link leading out
    os.symlink(engine / "models" / "inside.py", engine / "alias.py")       # a link that stays inside
    for given, link in ((engine / "linked" / "victim.py", engine / "linked"),
                        (engine / "models" / "file_link.py", engine / "models" / "file_link.py")):
        with pytest.raises(ProbePathOutside) as info:
            add_probe(box, given, before=16, exprs=["embeds"], tag="t", root=engine)
        err = info.value
        assert (err.link, err.target, err.root) == (str(link), str(os.path.realpath(link)), str(engine))
        assert f"{link} is a symlink to {os.path.realpath(link)}, outside the engine package {engine}" in str(err)
    with pytest.raises(ProbePathOutside, match="resolves to .*victim.py, outside the engine package"):
        add_probe(box, outside / "victim.py", before=16, exprs=["embeds"], tag="t", root=engine)
    assert (outside / "victim.py").read_text() == DRAFT_SOURCE and not (tmp_path / "box-state").exists()

    probe = add_probe(box, engine / "alias.py", before=16, exprs=["embeds"], tag="t", root=engine)
    assert probe.path == str(engine / "models" / "inside.py") and os.path.islink(engine / "alias.py")
    # the probed directory swapped for a link before the revert: never written through
    os.rename(engine / "models", engine / "models.real")
    os.symlink(outside, engine / "models")
    (outside / "inside.py").write_bytes((engine / "models.real" / "inside.py").read_bytes())
    with pytest.raises(ProbeConflict, match="now resolves to .*elsewhere/inside.py; not writing through the link"):
        revert_probe(box, probe)
    assert (outside / "inside.py").read_bytes() == (engine / "models.real" / "inside.py").read_bytes()
    os.remove(engine / "models")
    os.rename(engine / "models.real", engine / "models")
    revert_probe(box, probe)
    assert (engine / "models" / "inside.py").read_text() == DRAFT_SOURCE
