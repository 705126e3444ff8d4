"""workbench.session.draft_copy: a repaired copy of the draft on the box, made from the sandbox's
real draft (copied to a tmp dir first: the committed files are never touched), through the local
box and, once, over SSH to a real sshd on loopback; one copy is served by the sandbox server.

Inputs that need a broken draft are written with the ``safetensors`` package (an independent
writer), never with the code under test. Every test checks that the user's draft is unchanged
(sha256 of each file) and that nothing is left behind that the journal does not list.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from remote import connect
from workbench.checkpoint import read_checkpoint_tensors, read_json_config, read_tensor
from workbench.errors import DraftCopyError, JournalError, WorkbenchError
from workbench.rules.fix import DraftRepair, TensorData
from workbench.session import (
    Journal,
    RepairedDraft,
    keep_repaired_copy,
    make_repaired_copy,
    plan_repaired_copy,
    remove_repaired_copy,
    restore_box,
)
from workbench.session import draft_copy
from testkit.engine_copy import checkout_dir

st = pytest.importorskip("safetensors.numpy")

ROOT = Path(__file__).resolve().parents[2]
SANDBOX_DRAFT = ROOT / "workbench" / "sandbox" / "models" / "draft"


# -- helpers ---------------------------------------------------------------------------------------


def _tree_sha(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (relative name -> hex)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _header(path: Path) -> tuple[int, bytes, dict]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return n, raw[8:8 + n], json.loads(raw[8:8 + n])


def _source_tensors() -> dict[str, np.ndarray]:
    return st.load_file(str(SANDBOX_DRAFT / "model.safetensors"))


def _d2t_from_t2d(t2d: np.ndarray) -> TensorData:
    """What a token-map fix derives: d2t[i] = (i-th target id the draft keeps) - i, I64."""
    ids = np.flatnonzero(t2d)
    return TensorData("I64", (len(ids),), tuple(int(v) for v in ids - np.arange(len(ids))))


def _write_draft(dest: Path, tensors: dict[str, np.ndarray], *, config: dict | None = None) -> Path:
    dest.mkdir(parents=True)
    cfg = config if config is not None else json.loads((SANDBOX_DRAFT / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    st.save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "README.md").write_text("an EAGLE-3 draft\n")
    return dest


class Setup:
    """A local box whose state dir is under tmp_path, a begun journal, a draft dir (a copy of
    the sandbox draft plus a README and a tokenizer sub-directory) and its hashes."""

    def __init__(self, box, tmp_path: Path):
        self.box = box
        self.tmp = tmp_path
        self.journal = Journal(box)
        self.run_id = self.journal.begin()
        self.draft = tmp_path / "draft"
        shutil.copytree(SANDBOX_DRAFT, self.draft)
        (self.draft / "README.md").write_text("an EAGLE-3 draft\n")
        (self.draft / "tokenizer").mkdir()
        (self.draft / "tokenizer" / "tokenizer.json").write_text("{}\n")
        self.before = _tree_sha(self.draft)

    @property
    def repairs(self) -> Path:
        return Path(self.box.state_dir) / "repairs"

    def leftovers(self) -> list[str]:
        return sorted(os.listdir(self.repairs)) if self.repairs.exists() else []

    def assert_source_unchanged(self, draft: Path | None = None) -> None:
        assert _tree_sha(draft or self.draft) == (self.before if draft is None else _tree_sha(draft))


@pytest.fixture
def setup(tmp_path):
    with connect("local", state_dir=tmp_path / "box-state", python=sys.executable) as box:
        yield Setup(box, tmp_path)


# -- the cases a fix asks for ------------------------------------------------------------------------


def test_rename_a_real_tensor(setup):
    repair = DraftRepair(renames={"fc.weight": "fc.weight.renamed"}, reasons=["weights: fc renamed (test)"])
    copy = make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair)

    path = Path(copy.path)
    assert path.parent == setup.repairs and path.name == f"{setup.run_id}-1"
    assert copy.path in setup.journal.data["created_paths"] and Journal(setup.box).pending
    assert copy.files_rewritten == ["model.safetensors"]
    assert copy.files_linked == ["README.md", "config.json", "tokenizer"]
    for name in copy.files_linked:  # symlinks to the source, nothing copied
        assert (path / name).is_symlink() and os.readlink(path / name) == str(setup.draft / name)
    assert not (path / "model.safetensors").is_symlink()
    assert copy.actions[0] == "why: weights: fc renamed (test)"
    assert any("renamed 'fc.weight' -> 'fc.weight.renamed'" in a and "header only" in a for a in copy.actions)
    assert copy.bytes_written == (path / "model.safetensors").stat().st_size

    # a valid safetensors file: 8-byte length, JSON header padded with spaces to 8, metadata kept
    n, raw, header = _header(path / "model.safetensors")
    assert n % 8 == 0 and raw.startswith(b"{") and raw.rstrip(b" ").endswith(b"}")
    assert header["__metadata__"] == {"format": "pt"}
    src_n, _, src_header = _header(setup.draft / "model.safetensors")
    assert [k if k != "fc.weight" else "fc.weight.renamed" for k in src_header] == list(header)  # order kept
    # only the header changed: the data section is the source's byte for byte
    src_raw = (setup.draft / "model.safetensors").read_bytes()
    assert (path / "model.safetensors").read_bytes()[8 + n:] == src_raw[8 + src_n:]

    src = _source_tensors()
    got = st.load_file(str(path / "model.safetensors"))  # the reference reader accepts it
    assert set(got) == set(src) - {"fc.weight"} | {"fc.weight.renamed"}
    np.testing.assert_array_equal(got["fc.weight.renamed"], src["fc.weight"])
    for name in set(src) - {"fc.weight"}:
        np.testing.assert_array_equal(got[name], src[name])
    np.testing.assert_array_equal(read_tensor(setup.box, copy.path, "fc.weight.renamed"), src["fc.weight"])
    assert any("renamed 'fc.weight' -> 'fc.weight.renamed': present, old name absent" in c for c in copy.checks)
    setup.assert_source_unchanged()

    report = restore_box(setup.box)
    assert report.clean and f"removed {copy.path} (created by the run)" in report.actions
    assert not path.exists() and not Journal(setup.box).pending
    setup.assert_source_unchanged()  # removing the links left their targets alone


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_a_rewritten_file_keeps_the_source_permissions(setup, mode):
    """A checkpoint kept private (0600) stays private in the copy, whatever the umask says."""
    weights = setup.draft / "model.safetensors"
    old = weights.stat().st_mode & 0o7777
    weights.chmod(mode)
    try:
        copy = make_repaired_copy(setup.box, setup.journal, str(setup.draft),
                                  DraftRepair(renames={"fc.weight": "fc.weight.renamed"}, reasons=["test"]))
        assert (Path(copy.path) / "model.safetensors").stat().st_mode & 0o7777 == mode
    finally:
        weights.chmod(old)
    restore_box(setup.box)


def test_replace_d2t_with_one_rebuilt_from_t2d(setup, tmp_path):
    src = _source_tensors()
    broken = dict(src, d2t=np.zeros_like(src["d2t"]))  # a token map lost in conversion
    draft = _write_draft(tmp_path / "broken", broken)
    before = _tree_sha(draft)
    d2t = _d2t_from_t2d(read_tensor(setup.box, str(draft), "t2d"))
    repair = DraftRepair(tensors={"d2t": d2t}, reasons=["token map: d2t is all zeros; rebuilt from t2d"])
    copy = make_repaired_copy(setup.box, setup.journal, str(draft), repair)

    assert any("replaced 'd2t' (I64 [128]) in place in model.safetensors" == a for a in copy.actions)
    out = Path(copy.path) / "model.safetensors"
    assert out.stat().st_size == (draft / "model.safetensors").stat().st_size  # patched in place
    got = st.load_file(str(out))
    np.testing.assert_array_equal(got["d2t"], src["d2t"])  # the sandbox's true map, recovered
    assert got["d2t"].dtype == np.int64
    for name in set(src) - {"d2t"}:
        np.testing.assert_array_equal(got[name], src[name])
    assert any("'d2t' (I64 [128]): bytes and values read back equal" in c for c in copy.checks)
    assert _tree_sha(draft) == before


def test_add_d2t_to_a_draft_without_one(setup, tmp_path):
    src = _source_tensors()
    draft = _write_draft(tmp_path / "no-d2t", {k: v for k, v in src.items() if k != "d2t"})
    before = _tree_sha(draft)
    repair = DraftRepair(tensors={"d2t": _d2t_from_t2d(src["t2d"])}, reasons=["token map: no d2t"])
    copy = make_repaired_copy(setup.box, setup.journal, str(draft), repair)

    assert "added 'd2t' (I64 [128]) to model.safetensors" in copy.actions
    tensors = read_checkpoint_tensors(setup.box, copy.path)
    assert set(tensors) == set(src)
    np.testing.assert_array_equal(read_tensor(setup.box, copy.path, "d2t"), src["d2t"])
    got = st.load_file(str(Path(copy.path) / "model.safetensors"))
    for name in src:
        np.testing.assert_array_equal(got[name], src[name])
    _, _, header = _header(Path(copy.path) / "model.safetensors")
    assert list(header)[-1] == "d2t"  # appended
    assert _tree_sha(draft) == before


def test_write_an_eagle_config_and_remove_a_key(setup, tmp_path):
    src_cfg = json.loads((SANDBOX_DRAFT / "config.json").read_text())
    cfg = {k: v for k, v in src_cfg.items() if k != "eagle_config"}
    cfg["draft_vocab_size"] = 999  # wrong, and removed below
    draft = _write_draft(tmp_path / "no-eagle-config", _source_tensors(), config=cfg)
    before = _tree_sha(draft)
    repair = DraftRepair(config={"eagle_config": src_cfg["eagle_config"], "hidden_size": 160},
                         config_remove=("draft_vocab_size",),
                         reasons=["aux layers: no eagle_config", "configs: draft_vocab_size not the checkpoint's"])
    copy = make_repaired_copy(setup.box, setup.journal, str(draft), repair)

    path = Path(copy.path)
    assert copy.files_rewritten == ["config.json"] and (path / "model.safetensors").is_symlink()
    assert not (path / "config.json").is_symlink()
    assert copy.bytes_written == (path / "config.json").stat().st_size
    got = json.loads((path / "config.json").read_text())
    want = {k: v for k, v in cfg.items() if k != "draft_vocab_size"}
    want["eagle_config"] = src_cfg["eagle_config"]  # a new key: appended
    assert list(got.items()) == list(want.items())  # every other key equal, order kept
    assert read_json_config(setup.box, copy.path) == got
    assert "removed 'draft_vocab_size' from config.json" in copy.actions
    assert any(a.startswith("set 'eagle_config' in config.json") and a.endswith("(was absent)") for a in copy.actions)
    assert any(a.startswith("set 'hidden_size' in config.json to 160 (was 160)") for a in copy.actions)
    assert _tree_sha(draft) == before


def test_replacing_with_another_dtype_appends_and_keeps_the_file_contiguous(setup):
    src = _source_tensors()
    d2t32 = TensorData("I32", (128,), tuple(int(v) for v in src["d2t"]))
    lm_bf16 = TensorData("BF16", (2, 3), (1.0, -2.5, 3.140625, float("inf"), float("nan"), 0.0))
    copy = make_repaired_copy(setup.box, setup.journal, str(setup.draft),
                              DraftRepair(tensors={"d2t": d2t32, "tiny.bf16": lm_bf16}))
    assert any("replaced 'd2t' (I64 [128] -> I32 [128])" in a and "appended" in a for a in copy.actions)
    _, _, header = _header(Path(copy.path) / "model.safetensors")
    spans = sorted(tuple(e["data_offsets"]) for k, e in header.items() if k != "__metadata__")
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # no hole
    from safetensors import safe_open

    with safe_open(str(Path(copy.path) / "model.safetensors"), framework="np") as f:  # validates the layout
        assert set(f.keys()) == set(src) | {"tiny.bf16"}
        got = {k: f.get_tensor(k) for k in f.keys() if k != "tiny.bf16"}  # numpy has no bfloat16
    assert got["d2t"].dtype == np.int32 and (got["d2t"] == src["d2t"]).all()
    bf = read_tensor(setup.box, copy.path, "tiny.bf16")
    np.testing.assert_array_equal(bf.reshape(-1)[[0, 1, 2, 3, 5]], [1.0, -2.5, 3.140625, np.inf, 0.0])
    assert np.isnan(bf.reshape(-1)[4])
    for name in set(src) - {"d2t"}:
        np.testing.assert_array_equal(got[name], src[name])
    setup.assert_source_unchanged()


def test_renames_may_swap_names(setup):
    src = _source_tensors()
    a, b = "midlayer.input_layernorm.weight", "midlayer.post_attention_layernorm.weight"
    copy = make_repaired_copy(setup.box, setup.journal, str(setup.draft), DraftRepair(renames={a: b, b: a}))
    got = st.load_file(str(Path(copy.path) / "model.safetensors"))
    np.testing.assert_array_equal(got[a], src[b])
    np.testing.assert_array_equal(got[b], src[a])


def test_the_box_script_streams(setup, tmp_path):
    """A 160 MiB tensor renamed: the box script's peak memory (measured by a wrapper around the
    box's python, ``ru_maxrss`` of its child) stays far below the file size, with the kernel copy
    and with the 8 MiB read/write fallback; both copies are byte for byte what the plan says."""
    big = tmp_path / "big"
    big.mkdir()
    shutil.copy(SANDBOX_DRAFT / "config.json", big / "config.json")
    n = 40 << 20  # F32 elements: 160 MiB
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "big.weight": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(big / "model.safetensors", "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.write(b"\x11" * (1 << 20))  # a recognisable start, the rest sparse zeros, a recognisable end
        f.truncate(8 + len(header) + 4 * n - (1 << 20))
        f.seek(0, 2)
        f.write(b"\x22" * (1 << 20))
    rss = tmp_path / "maxrss"
    wrapper = tmp_path / "measuring-python"
    wrapper.write_text(f"#!{sys.executable}\nimport resource, subprocess, sys\n"
                       f"code = subprocess.run([{sys.executable!r}, *sys.argv[1:]]).returncode\n"
                       f"open({str(rss)!r}, 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
                       "sys.exit(code)\n")
    wrapper.chmod(0o755)
    repair = DraftRepair(renames={"big.weight": "fc.weight"})
    copy = make_repaired_copy(setup.box, setup.journal, str(big), repair, python=str(wrapper))
    assert int(rss.read_text()) < 60 * 1024, f"peak RSS {int(rss.read_text()) // 1024} MiB for a 160 MiB copy"
    out = Path(copy.path) / "model.safetensors"
    src_raw, out_raw = (big / "model.safetensors").read_bytes(), out.read_bytes()
    m = int.from_bytes(out_raw[:8], "little")
    assert out_raw[8 + m:] == src_raw[8 + len(header):]

    # the fallback: no copy_file_range, 8 MiB pread/pwrite chunks (the script run directly)
    plan = plan_repaired_copy(setup.box, str(big), repair)
    payload = draft_copy.script_payload(plan, str(setup.repairs / "fallback"))
    payload.update(kernel_copy=False)
    setup.journal.add_created(payload["dest"])
    res = setup.box.run([str(wrapper), "-c", draft_copy.COPY_SCRIPT], stdin=json.dumps(payload), timeout=120)
    answer = json.loads(res.stdout.strip().splitlines()[-1])
    assert answer["files"]["model.safetensors"]["copy"] == "read/write"
    assert int(rss.read_text()) < 60 * 1024, f"peak RSS {int(rss.read_text()) // 1024} MiB (fallback)"
    assert (setup.repairs / "fallback" / "model.safetensors").read_bytes() == out_raw
    assert restore_box(setup.box).clean and setup.leftovers() == []


def test_small_chunks_copy_the_same_bytes(setup):
    repair = DraftRepair(renames={"fc.weight": "fc.w"}, tensors={"d2t": _d2t_from_t2d(_source_tensors()["t2d"])})
    plan = plan_repaired_copy(setup.box, str(setup.draft), repair)
    outs = []
    for name, extra in (("kernel", {}), ("chunks", {"kernel_copy": False, "chunk_bytes": 4093})):
        payload = dict(draft_copy.script_payload(plan, str(setup.repairs / name)), **extra)
        setup.box.makedirs(str(setup.repairs))
        setup.journal.add_created(payload["dest"])
        setup.box.run([sys.executable, "-c", draft_copy.COPY_SCRIPT], stdin=json.dumps(payload), timeout=60)
        outs.append((setup.repairs / name / "model.safetensors").read_bytes())
    assert outs[0] == outs[1] and len(outs[0]) == plan.files[0].size
    assert restore_box(setup.box).clean


def _shard(dest: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """The sandbox draft split in two shards + index, as the HF writers lay them out."""
    src = _source_tensors()
    names = list(src)
    parts = {"model-00001-of-00002.safetensors": names[:8], "model-00002-of-00002.safetensors": names[8:]}
    dest.mkdir()
    shutil.copy(SANDBOX_DRAFT / "config.json", dest / "config.json")
    weight_map = {}
    for fname, part in parts.items():
        st.save_file({n: src[n] for n in part}, str(dest / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    total = sum(v.nbytes for v in src.values())
    (dest / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return dest, src


def test_a_sharded_draft(setup, tmp_path):
    draft, src = _shard(tmp_path / "sharded")
    before = _tree_sha(draft)
    second = "model-00002-of-00002.safetensors"
    index = json.loads((draft / "model.safetensors.index.json").read_text())
    renamed = next(n for n, f in index["weight_map"].items() if f == second)
    repair = DraftRepair(renames={renamed: "renamed." + renamed},
                         tensors={"extra_bias": TensorData("F32", (4,), (0.5, 1.5, -2.0, 3.0))})
    copy = make_repaired_copy(setup.box, setup.journal, str(draft), repair)
    path = Path(copy.path)

    assert copy.files_rewritten == ["model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    assert (path / "model-00001-of-00002.safetensors").is_symlink() and (path / "config.json").is_symlink()
    assert f"added 'extra_bias' (F32 [4]) to {second}" in copy.actions  # to the shard already rewritten
    new_index = json.loads((path / "model.safetensors.index.json").read_text())
    assert renamed not in new_index["weight_map"] and new_index["weight_map"]["renamed." + renamed] == second
    assert new_index["weight_map"]["extra_bias"] == second
    assert list(new_index["weight_map"])[:-1] == [k if k != renamed else "renamed." + renamed
                                                   for k in index["weight_map"]]
    assert new_index["metadata"]["total_size"] == index["metadata"]["total_size"] + 16

    tensors = read_checkpoint_tensors(setup.box, copy.path)  # index and headers agree
    assert set(tensors) == set(src) - {renamed} | {"renamed." + renamed, "extra_bias"}
    for name in src:
        new = "renamed." + name if name == renamed else name
        np.testing.assert_array_equal(read_tensor(setup.box, copy.path, new), src[name])
    np.testing.assert_array_equal(read_tensor(setup.box, copy.path, "extra_bias"), [0.5, 1.5, -2.0, 3.0])
    assert _tree_sha(draft) == before
    assert restore_box(setup.box).clean and not path.exists()
    assert _tree_sha(draft) == before


# -- failures leave nothing behind ------------------------------------------------------------------------


@pytest.mark.parametrize("repair, problem", [
    (DraftRepair(renames={"fc.weights": "fc.weight2"}), "cannot rename 'fc.weights': no such tensor"),
    (DraftRepair(renames={"fc.weight": "norm.weight"}), "cannot rename 'fc.weight' to 'norm.weight': the checkpoint "
                                                        "already has a tensor of that name"),
    (DraftRepair(renames={"fc.weight": "x", "norm.weight": "x"}), "already has a tensor renamed to it"),
    (DraftRepair(tensors={"d2t": TensorData("I65", (1,), (0,))}), "'I65' is not a safetensors dtype"),
    (DraftRepair(tensors={"d2t": TensorData("F8_E4M3", (1,), (0.0,))}), "cannot write dtype F8_E4M3"),
    (DraftRepair(tensors={"d2t": TensorData("I64", (2,), (1, 1.5))}), "value [1] = 1.5 is not an integer"),
    (DraftRepair(tensors={"t2d": TensorData("U8", (2,), (1, 300))}), "value [1] = 300 does not fit U8 (0..255)"),
    (DraftRepair(tensors={"t2d": TensorData("BOOL", (1,), (2,))}), "is not a boolean"),
    (DraftRepair(tensors={"x": TensorData("F16", (1,), (1e6,))}), "is too large for F16"),
    (DraftRepair(tensors={"x": TensorData("F32", (1,), ("1",))}), "is not a real number"),
    (DraftRepair(config_remove=("no_such_key",)), "config_remove names 'no_such_key'"),
    (DraftRepair(config={"k": object()}), "config key 'k'"),
    (DraftRepair(), "the repair changes nothing"),
])
def test_a_repair_that_does_not_fit_writes_nothing(setup, repair, problem):
    with pytest.raises(DraftCopyError) as info:
        make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair)
    err = info.value
    assert isinstance(err, WorkbenchError) and err.exit_code == 2
    assert problem in str(err) and err.path == str(setup.draft)
    assert setup.leftovers() == [] and not Journal(setup.box).data.get("created_paths")
    setup.assert_source_unchanged()


def test_every_problem_is_reported_at_once(setup):
    repair = DraftRepair(renames={"nope": "x"}, tensors={"d2t": TensorData("I64", (1,), (2**63,))},
                         config_remove=("absent",))
    with pytest.raises(DraftCopyError, match="3 problems") as info:
        plan_repaired_copy(setup.box, str(setup.draft), repair)
    assert len(info.value.problems) == 3
    assert any("does not fit I64" in p for p in info.value.problems)


def test_a_draft_that_changed_after_planning_fails_half_way_and_is_removed(setup, monkeypatch):
    real_plan = draft_copy.plan_repaired_copy

    def plan_then_change_the_draft(*args, **kwargs):
        plan = real_plan(*args, **kwargs)
        with open(setup.draft / "model.safetensors", "ab") as f:  # someone writes the draft meanwhile
            f.write(b"\0" * 8)
        return plan

    monkeypatch.setattr(draft_copy, "plan_repaired_copy", plan_then_change_the_draft)
    with pytest.raises(DraftCopyError, match="changed since") as info:
        make_repaired_copy(setup.box, setup.journal, str(setup.draft), DraftRepair(renames={"fc.weight": "fc.w"}))
    assert info.value.path.startswith(str(setup.repairs))  # the copy, which the script had begun
    assert setup.leftovers() == [] and not Journal(setup.box).data.get("created_paths")


def test_a_copy_that_does_not_read_back_is_removed(setup, monkeypatch):
    real_plan = draft_copy.plan_repaired_copy

    def lying_plan(*args, **kwargs):
        plan = real_plan(*args, **kwargs)
        plan.written["d2t"] = b"\1" * len(plan.written["d2t"])  # what the read-back will not find
        return plan

    monkeypatch.setattr(draft_copy, "plan_repaired_copy", lying_plan)
    d2t = _d2t_from_t2d(_source_tensors()["t2d"])
    with pytest.raises(DraftCopyError, match="does not read back as planned") as info:
        make_repaired_copy(setup.box, setup.journal, str(setup.draft), DraftRepair(tensors={"d2t": d2t}))
    assert "'d2t': the bytes read back differ" in str(info.value)
    assert setup.leftovers() == [] and not Journal(setup.box).data.get("created_paths")


def test_refuses_an_existing_or_foreign_destination(setup, tmp_path):
    repair = DraftRepair(renames={"fc.weight": "fc.w"})
    taken = setup.repairs / "mine"
    taken.mkdir(parents=True)
    (taken / "keep.txt").write_text("not the workbench's\n")
    with pytest.raises(DraftCopyError, match="already exists"):
        make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair, dest_dir=str(taken))
    assert (taken / "keep.txt").read_text() == "not the workbench's\n"
    with pytest.raises(DraftCopyError, match="under the box's state dir"):
        make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair, dest_dir=str(tmp_path / "elsewhere"))
    assert not (tmp_path / "elsewhere").exists() and not Journal(setup.box).data.get("created_paths")
    custom = make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair,
                                dest_dir=str(setup.repairs / "custom"))
    assert custom.path == str(setup.repairs / "custom")
    second = make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair)
    assert second.path.endswith(f"{setup.run_id}-1")
    third = make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair)
    assert third.path.endswith(f"{setup.run_id}-2")


# -- the journal: restore, a kill, keep --------------------------------------------------------------------


def test_keep_forgets_the_copy_in_the_journal(setup):
    repair = DraftRepair(renames={"fc.weight": "fc.w"})
    kept = make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair, keep=True)
    assert kept.kept and kept.to_dict()["kept"] is True
    later = make_repaired_copy(setup.box, setup.journal, str(setup.draft), repair)
    keep_repaired_copy(setup.journal, later)
    assert not Journal(setup.box).data.get("created_paths")
    assert restore_box(setup.box).clean
    assert Path(kept.path).is_dir() and Path(later.path).is_dir()  # the user asked to keep the fix
    remove_repaired_copy(setup.box, setup.journal, kept)
    assert not Path(kept.path).exists()
    with pytest.raises(DraftCopyError, match="not under the box's state dir"):
        remove_repaired_copy(setup.box, setup.journal, str(setup.draft))
    setup.assert_source_unchanged()


def test_a_kill_mid_copy_is_cleaned_up_by_restore(setup, tmp_path):
    """The process making the copy is SIGKILLed after the journal entry and the box script's
    writes, before make_repaired_copy returned: the journal lists the copy, the next run's
    ``begin`` refuses, ``restore_box`` removes it."""
    pidfile = tmp_path / "wrapper.pid"
    slow_python = tmp_path / "slow-python"
    slow_python.write_text(f'#!/bin/sh\n{sys.executable} "$@"\nstatus=$?\necho $$ > {pidfile}\nsleep 60\n'
                           'exit $status\n')
    slow_python.chmod(0o755)
    code = textwrap.dedent(f"""
        import sys
        from remote import connect
        from workbench.rules.fix import DraftRepair
        from workbench.session import Journal, make_repaired_copy
        box = connect("local", state_dir={str(setup.box.state_dir)!r}, python=sys.executable)
        make_repaired_copy(box, Journal(box), {str(setup.draft)!r}, DraftRepair(renames={{"fc.weight": "fc.w"}}),
                           python={str(slow_python)!r})
        """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=checkout_dir(), start_new_session=True)
    wrapper = None
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert proc.poll() is None, "the copy process ended before it could be killed"
            assert time.monotonic() < deadline, "the box script never ran"
            time.sleep(0.05)
        wrapper = int(pidfile.read_text())
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if wrapper is not None:  # the box command's own process group (the local transport's)
            try:
                os.killpg(os.getpgid(wrapper), signal.SIGKILL)
            except ProcessLookupError:
                pass  # it had exited already
    (left,) = setup.leftovers()
    copy = setup.repairs / left
    assert (copy / "model.safetensors").is_file()  # the script's writes happened
    journal = Journal(setup.box)
    assert journal.pending and journal.data["created_paths"] == [str(copy)]
    with pytest.raises(JournalError, match="restore"):
        Journal(setup.box).begin()  # the next run does not forget it
    report = restore_box(setup.box)
    assert report.clean and f"removed {copy} (created by the run)" in report.actions
    assert setup.leftovers() == [] and not Journal(setup.box).pending
    setup.assert_source_unchanged()


def test_plan_is_a_dry_run(setup):
    plan = plan_repaired_copy(setup.box, str(setup.draft), DraftRepair(renames={"fc.weight": "fc.w"},
                                                                          config={"x": 1}))
    assert plan.files_rewritten == ["config.json", "model.safetensors"]
    assert sorted(plan.links) == ["README.md", "tokenizer"]
    assert plan.bytes_to_write > (setup.draft / "model.safetensors").stat().st_size
    assert setup.leftovers() == [] and not Journal(setup.box).data.get("created_paths")


def test_repaired_draft_to_dict_is_json():
    copy = RepairedDraft("/s/repairs/r-1", "/d", ["config.json"], ["model.safetensors"], ["why: x"], 10, ["ok"])
    assert json.loads(json.dumps(copy.to_dict()))["files_linked"] == ["model.safetensors"]


# -- over SSH, and served -------------------------------------------------------------------------------------


def test_over_ssh(ssh_env, tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(SANDBOX_DRAFT, draft)
    before = _tree_sha(draft)
    src = _source_tensors()
    with connect(ssh_env.alias, state_dir=tmp_path / "ssh-state", python=sys.executable) as box:
        journal = Journal(box)
        journal.begin()
        repair = DraftRepair(renames={"midlayer.mlp.up_proj.weight": "layers.0.mlp.up_proj.weight"},
                             tensors={"d2t": _d2t_from_t2d(src["t2d"])}, config={"draft_vocab_size": 128})
        copy = make_repaired_copy(box, journal, str(draft), repair)
        assert copy.files_rewritten == ["config.json", "model.safetensors"]
        np.testing.assert_array_equal(read_tensor(box, copy.path, "layers.0.mlp.up_proj.weight"),
                                      src["midlayer.mlp.up_proj.weight"])
        np.testing.assert_array_equal(read_tensor(box, copy.path, "d2t"), src["d2t"])
        assert restore_box(box).clean and not Path(copy.path).exists()
    assert _tree_sha(draft) == before


@pytest.mark.slow  # starts a sandbox server
def test_the_repaired_copy_serves(setup, tmp_path, own_sandbox_server):
    """A draft whose fc was renamed by a converter (SGLang drops the unknown name silently: fc
    stays random, acceptance collapses) is renamed back in a copy, and the sandbox server with
    EAGLE3 pointed at the copy answers /generate with real acceptance."""
    from testkit.sandbox_servers import SPEC_FLAGS
    from workbench.measure import measure_generate
    from workbench.sandbox_box import sandbox_prompts_path

    src = _source_tensors()
    broken = {("fc.linear.weight" if k == "fc.weight" else k): v for k, v in src.items()}
    draft = _write_draft(tmp_path / "converted", broken)
    before = _tree_sha(draft)
    copy = make_repaired_copy(setup.box, setup.journal, str(draft),
                              DraftRepair(renames={"fc.linear.weight": "fc.weight"},
                                          reasons=["weights: fc.linear.weight is dropped by load_weights"]))
    prompts = [json.loads(line) for line in sandbox_prompts_path().read_text().splitlines()[:4]]
    accept = {}
    for label, path in (("broken", str(draft)), ("repaired", copy.path)):
        with own_sandbox_server(tmp_path / label, "--speculative-algorithm", "EAGLE3",
                                "--speculative-draft-model-path", path, *SPEC_FLAGS) as server:
            m = measure_generate(server.url, prompts, max_new_tokens=32, warmup=1, fetch_server_info=False)
        assert m.speculative, m.to_dict()
        accept[label] = m.accept_length
    # greedy decoding: deterministic (measured 1.27 and 2.25 tokens per verify step)
    assert accept["broken"] < 1.5 and accept["repaired"] > 1.9, accept
    assert restore_box(setup.box).clean and not Path(copy.path).exists()
    assert _tree_sha(draft) == before
