"""The flag table read from each covered SGLang release's own source (the published wheels, never
installed), through a real local box; the shipped flag history; argparse's reading of prefixes.

Every expected value below was found BY HAND in the unpacked wheels (``grep -n`` / reading
``srt/server_args.py``, ``srt/arg_groups/fields/*.py``), not computed by the code under test:

* flag counts: ``grep -c 'add_argument(' srt/server_args.py`` for 0.4.6 … 0.5.12 (all in
  ``ServerArgs.add_cli_args``, all distinct); 0.5.23: ``cat srt/arg_groups/fields/*.py | grep -cE
  '^    [a-z_0-9]+: A\\['`` = 541, minus 19 ``no_cli=True``, plus 9 ``parser.add_argument(`` = 531;
  0.5.18: 472 ``A[`` lines in ``server_args.py`` (some not CLI fields: ``NS(...)`` only, multi-line
  ``no_cli``), 8 ``no_cli=True``, 29 ``parser.add_argument(``: about 490;
* ``--speculative-algorithm`` ``choices=[...]``: 0.4.6 l.864, 0.4.8 l.1110, 0.4.10 l.1281 ``["EAGLE",
  "EAGLE3", "NEXTN"]``; 0.5.2 l.1538 adds ``"STANDALONE"``; 0.5.4 l.2415 and 0.5.9 l.3927 add
  ``"NGRAM"``; 0.5.12 l.5786 none (help text only), 0.5.18 / 0.5.23 a plain ``Optional[str]`` field;
* ``--tensor-parallel-size``, ``--tp-size`` (0.4.6 l.622-623 … 0.5.12 l.5046-5047: the first is the
  flag); 0.5.18 ``tp_size`` field l.1010 and 0.5.23 ``fields/parallel.py`` l.45 with
  ``aliases=["--tensor-parallel-size"]``;
* ``--model``: no alias in 0.4.6 (only ``"--model-path"`` l.394) and 0.4.8 (l.565); ``"--model-path",
  "--model"`` from 0.4.10 (l.592-593);
* ``--trust-remote-code``: ``action="store_true"`` (0.4.6 l.464-465 … 0.5.12 l.4607-4608), a ``bool``
  field in 0.5.18 (l.576) and 0.5.23 (``fields/model.py`` l.106);
* ``"--cuda-graph-max-bs"``: 0.4.6 l.1015, 0.4.8 l.1307, 0.4.10 l.1522, 0.5.2 l.1882, 0.5.4 l.2858,
  0.5.9 l.4478, 0.5.12 l.6428; 0.5.18 l.8774 ``action=DeprecatedAliasStoreAction,
  new_flag="--cuda-graph-max-bs-decode"``; absent from 0.5.20 and 0.5.23, which have
  ``cuda_graph_max_bs_decode`` / ``cuda_graph_max_bs_prefill`` (0.5.23 ``fields/exec_.py`` l.629, 632);
* 0.4.6 ``--enable-flashinfer-mla`` (l.845-847) ``action=DeprecatedAction``, whose ``__call__``
  raises ``ValueError(self.help)`` (l.1347-1354);
* 0.5.23 ``--monokernel-backend`` (``server_args.py`` l.426-436): ``DeprecatedStoreConstAction`` with
  ``nargs=None, choices=["amd"]``: takes one value.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

import pytest

from workbench.engine.flag_table import (
    FlagTableError, load_flag_history, parse_flag_sources, read_flag_table, replacements,
)
from workbench.engine.launch import LaunchCommand
from workbench.engine.releases import COVERED_RELEASES

ROOT = pathlib.Path(__file__).resolve().parents[2]
EAGLE_123 = ["EAGLE", "EAGLE3", "NEXTN"]

# release: (flag count (exact, or (low, high)), --cuda-graph-max-bs spec status, --speculative-algorithm
# choices, the flag --tp resolves to, whether --model is an alias)
HAND = {
    "0.4.6": (124, "flag", EAGLE_123, "--tensor-parallel-size", False),
    "0.4.8": (160, "flag", EAGLE_123, "--tensor-parallel-size", False),
    "0.4.10": (180, "flag", EAGLE_123, "--tensor-parallel-size", True),
    "0.5.2": (210, "flag", EAGLE_123 + ["STANDALONE"], "--tensor-parallel-size", True),
    "0.5.4": (273, "flag", EAGLE_123 + ["STANDALONE", "NGRAM"], "--tensor-parallel-size", True),
    "0.5.9": (331, "flag", EAGLE_123 + ["STANDALONE", "NGRAM"], "--tensor-parallel-size", True),
    "0.5.12": (387, "flag", None, "--tensor-parallel-size", True),
    "0.5.18": ((480, 495), "deprecated-alias", None, "--tp-size", True),
    "0.5.23": (531, "ambiguous", None, "--tp-size", True),
}


class CountingBox:
    """The real local box, with its calls counted (what the reader asks of a box)."""

    def __init__(self, box):
        self.box, self.calls = box, []

    def read_text(self, path, *, timeout=30, **kw):
        self.calls.append(("read_text", path, timeout))
        return self.box.read_text(path, timeout=timeout, **kw)

    def listdir(self, path, *, timeout=30):
        self.calls.append(("listdir", path, timeout))
        return self.box.listdir(path, timeout=timeout)


def test_hand_table_covers_every_covered_release():
    assert tuple(HAND) == COVERED_RELEASES


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_flag_table_of_each_release_read_through_the_box(box, sglang_release, version):
    count, cgmb, algo_choices, tp, model_alias = HAND[version]
    root = sglang_release(version)
    counting = CountingBox(box)
    table = read_flag_table(counting, str(root), timeout=7)
    assert (table.version, table.origin) == (version, "box")  # version read from the wheel's version files
    assert table.source.startswith(f"read from {root}/srt/server_args.py")
    if isinstance(count, tuple):
        assert count[0] <= len(table.flags) <= count[1]
    else:
        assert len(table.flags) == count
    # one call per file, each with the timeout given; nothing but reads
    paths = [p for _, p, _ in counting.calls]
    assert len(paths) == len(set(paths)) and {t for _, _, t in counting.calls} == {7}
    assert {c for c, _, _ in counting.calls} <= {"read_text", "listdir"}

    spec = table.flags.get("--cuda-graph-max-bs")
    if cgmb == "flag":
        assert spec["kind"] == "value" and spec["nargs"] is None and spec["deprecated"] is None
        assert table.resolve("--cuda-graph-max-bs").status == "known"
    elif cgmb == "deprecated-alias":
        assert (spec["deprecated"], spec["new_flag"], spec["field"]) == ("alias", "--cuda-graph-max-bs-decode",
                                                                         "cuda_graph_max_bs_decode")
        assert table.resolve("--cuda-graph-max-bs").status == "known"  # an exact option string wins
    else:
        assert spec is None
        r = table.resolve("--cuda-graph-max-bs")
        assert (r.status, r.candidates) == ("ambiguous", ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"))

    algo = table.flags["--speculative-algorithm"]
    assert (algo["kind"], algo["choices"]) == ("value", algo_choices)
    assert table.resolve("--tp").canon == tp
    other = "--tp-size" if tp == "--tensor-parallel-size" else "--tensor-parallel-size"
    assert table.flags[tp]["aliases"] == [other] and table.resolve(other).canon == tp
    assert table.flags["--trust-remote-code"]["kind"] == "store_true"
    assert ("--model" in table.flags["--model-path"]["aliases"]) is model_alias
    assert table.resolve("--model").canon == "--model-path"  # alias, or (0.4.6/0.4.8) the one flag it prefixes


def test_old_release_quirks_found_by_hand(sglang_release, box):
    t046 = read_flag_table(box, str(sglang_release("0.4.6")))
    mla = t046.flags["--enable-flashinfer-mla"]
    assert (mla["kind"], mla["deprecated"]) == ("store_true", "refused")
    assert "Please use '--attention-backend flashinfer' instead." in mla["note"]
    t023 = read_flag_table(box, str(sglang_release("0.5.23")))
    mono = t023.flags["--monokernel-backend"]
    assert (mono["kind"], mono["choices"], mono["new_flag"]) == ("value", ["amd"], "--enable-amd-monokernel")
    # fields/model.py l.95 `choices=LOAD_FORMAT_CHOICES`, a list of srt/arg_groups/choices.py (l.3: "auto", "pt",
    # "safetensors", "instanttensor", "npcache", ...)
    assert t023.flags["--load-format"]["choices"][:5] == ["auto", "pt", "safetensors", "instanttensor", "npcache"]
    cmd = LaunchCommand.parse("python -m sglang.launch_server --model-path /m --monokernel-backend amd --tp 2", t023)
    assert cmd.get("--monokernel-backend") == "amd" and cmd.get("--tp-size") == "2" and not cmd.unresolved()


def test_resolution_is_what_argparse_does(capsys):
    """The reader's resolution against argparse itself (allow_abbrev=True, the default no SGLang
    release changes) on the same option strings: exact, alias, unique prefix, ambiguous, unknown."""
    table = parse_flag_sources({"srt/server_args.py": '''
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int)
        parser.add_argument("--enable-x", action=argparse.BooleanOptionalAction)
'''}, "test")
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda-graph-max-bs-decode", type=int)
    parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int)
    parser.add_argument("--enable-x", action=argparse.BooleanOptionalAction)
    assert parser.parse_args(["--tp", "2"]).tp_size == 2 and table.resolve("--tp").canon == "--tp-size"
    assert parser.parse_args(["--tensor", "2"]).tp_size == 2 and table.resolve("--tensor").canon == "--tp-size"
    assert parser.parse_args(["--no-enable-x"]).enable_x is False and table.resolve("--no-enable-x").negated
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--cuda-graph-max-bs", "32"])
    assert exc.value.code == 2
    assert ("ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in capsys.readouterr().err
    r = table.resolve("--cuda-graph-max-bs")
    assert (r.status, r.candidates) == ("ambiguous", ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"))
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--tp", "2", "--nope", "1"])
    assert exc.value.code == 2 and "unrecognized arguments: --nope 1" in capsys.readouterr().err
    assert table.resolve("--nope").status == "unknown"


def test_a_tree_without_server_args_is_a_typed_error(box, tmp_path):
    (tmp_path / "srt").mkdir()
    with pytest.raises(FlagTableError, match="no srt/server_args.py under"):
        read_flag_table(box, str(tmp_path))
    (tmp_path / "srt" / "server_args.py").write_text("def broken(:\n")
    with pytest.raises(FlagTableError, match="server_args.py: this Python cannot parse it"):
        read_flag_table(box, str(tmp_path))
    (tmp_path / "srt" / "server_args.py").write_text("x = 1\n")
    with pytest.raises(FlagTableError, match="no launch flag declared"):
        read_flag_table(box, str(tmp_path))
    (tmp_path / "srt" / "server_args.py").write_bytes(b"x = '\xff\xfe'\n")
    with pytest.raises(FlagTableError, match="srt/server_args.py: "):
        read_flag_table(box, str(tmp_path))
    (tmp_path / "srt" / "server_args.py").unlink()
    (tmp_path / "srt" / "server_args.py").mkdir()
    with pytest.raises(FlagTableError, match="srt/server_args.py: "):
        read_flag_table(box, str(tmp_path))


def test_shipped_table_is_the_readers_output_for_0_5_23(sglang_release):
    """The committed table is byte for byte what scripts/gen_sglang_flags.py (a thin CLI over the
    reader) writes from the 0.5.23 wheel."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts/gen_sglang_flags.py"), str(sglang_release("0.5.23"))],
                         capture_output=True, text=True, check=True).stdout
    assert out == (ROOT / "workbench/engine/data/sglang-0.5.23-flags.json").read_text()


def test_flag_history_found_by_hand():
    """The shipped history (20 releases): ``--cuda-graph-max-bs`` in 0.4.6 … 0.5.18 (hand grep above;
    0.5.20 has no ``"--cuda-graph-max-bs"``: ``grep -c`` 0), renamed to ``--cuda-graph-max-bs-decode``
    (0.5.15 ``server_args.py`` l.6244-6249 is the first wheel with the ``new_flag``);
    ``--enable-flashinfer-mla`` in 0.4.6 and 0.4.7 only (0.4.8 has no such string)."""
    hist = load_flag_history()
    assert hist["releases"][0] == "0.4.6" and hist["releases"][-1] == "0.5.23" and len(hist["releases"]) == 20
    row = hist["flags"]["--cuda-graph-max-bs"]
    assert row["ranges"] == [["0.4.6", "0.5.18"]] and row["field"] == "cuda_graph_max_bs"
    assert hist["renames"]["--cuda-graph-max-bs"][0]["new"] == "--cuda-graph-max-bs-decode"
    assert hist["renames"]["--cuda-graph-max-bs"][0]["since"] == "0.5.15"
    assert hist["flags"]["--enable-flashinfer-mla"]["ranges"] == [["0.4.6", "0.4.7"]]
    assert hist["flags"]["--speculative-algorithm"]["ranges"] == [["0.4.6", "0.5.23"]]


def test_replacements_follow_renames_into_the_box_release(sglang_release, box):
    t023 = read_flag_table(box, str(sglang_release("0.5.23")))
    [r] = [x for x in replacements("--cuda-graph-max-bs", t023) if x["flag"]]
    assert (r["flag"], r["how"]) == ("--cuda-graph-max-bs-decode", "new_flag")
    # --nsa-decode → --nsa-decode-backend (0.5.4) → --dsa-decode-backend (0.5.15): two hops
    assert [x["flag"] for x in replacements("--nsa-decode", t023) if x["flag"]][:1] == ["--dsa-decode-backend"]
    t09 = read_flag_table(box, str(sglang_release("0.5.9")))
    assert replacements("--speculative-algorithm", t09) == []
    # the newer name on an older release: the flag 0.5.18 (l.8774, new_flag=) says it became
    [r] = replacements("--cuda-graph-max-bs-decode", t09)
    assert (r["flag"], r["how"]) == ("--cuda-graph-max-bs", "older-name")


@pytest.mark.slow
def test_shipped_history_is_the_scripts_output():
    """Regenerating the history from the wheels of its releases (downloaded when not cached) gives
    the committed file."""
    hist = load_flag_history()
    out = subprocess.run([sys.executable, str(ROOT / "scripts/gen_sglang_flag_history.py"), *hist["releases"]],
                         capture_output=True, text=True, check=True, timeout=1800).stdout
    assert json.loads(out) == json.loads((ROOT / "workbench/engine/data/sglang-flag-history.json").read_text())


def test_flag_table_over_ssh_is_the_local_one(ssh_env, sglang_release):
    """Through a real OpenSSH server on loopback (auto-marked slow: it starts sshd): the same table."""
    from remote import connect

    root = str(sglang_release("0.5.9"))
    with connect("local") as local, connect(ssh_env.alias) as there:
        a, b = read_flag_table(local, root), read_flag_table(there, root)
    assert (a.version, a.flags) == (b.version, b.flags) and len(b.flags) == 331


@pytest.mark.parametrize("version, port_source", [("0.4.6", "server_args.py:409 type=int"),
                                                  ("0.5.23", "fields/serving.py:66 A[int, ...]")])
def test_value_types_found_by_hand(box, sglang_release, version, port_source):
    """argparse's type of each valued flag: ``type=int``/``float`` of add_argument (0.4.6
    server_args.py:409 --port type=int, :564-565 --mem-fraction-static type=float), the field's
    annotation (0.5.23 fields/serving.py:66 port: A[int, …], fields/schedule.py:27-28
    mem_fraction_static: A[Optional[float], …]); str and switches have none."""
    t = read_flag_table(box, str(sglang_release(version)))
    assert t.spec("--port")["type"] == "int", port_source
    assert t.spec("--mem-fraction-static")["type"] == "float"
    assert t.spec("--model-path")["type"] is None and t.spec("--trust-remote-code")["type"] is None
