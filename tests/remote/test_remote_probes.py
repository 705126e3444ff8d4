"""Probes: inject, fire once, read back, revert byte for byte; conflicts, journal, crashes."""

import hashlib
import json
import os
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
    ProbeNotFound,
    RemoteFileNotFound,
    RemoteIsADirectory,
)
from remote.probes import (
    CRASH_ENV,
    Probe,
    ProbeReading,
    add_probe,
    journal_dir,
    list_probes,
    locate_anchor,
    parse_probe_value,
    parse_shape,
    probe_file_status,
    read_probe_log,
    read_probe_output,
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
    assert probe_lines == [
        "[probe:fc-width] hidden_states.shape=torch.Size([1, 7168]) embeds.shape[-1]=7168 "
        "1/0=<error:ZeroDivisionError('division by zero')>"
    ]
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
    with pytest.raises(ProbeCompileError) as info:  # parses as an expression, fails to compile in a sync def
        add_probe(box, src, before=16, exprs=["await embeds"], tag="bad")
    assert "await" in info.value.output
    assert src.read_text() == DRAFT_SOURCE
    assert list_probes(box) == [] and os.listdir(src.parent) == ["draft_model.py"]


def test_refuses_when_the_file_changes_between_read_and_replace(box, src, monkeypatch):
    real_run = box.run

    def run_and_edit(*args, **kw):  # someone edits the file while the candidate compiles
        res = real_run(*args, **kw)
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
    with pytest.raises(ProbeConflict, match=r"newer probes \['b'\]"):
        revert_probe(box, a)
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
    with pytest.raises(ProbeConflict, match="interrupted"):
        add_probe(box, src, before=16, exprs=["hidden_states.shape"], tag="crashy")
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
