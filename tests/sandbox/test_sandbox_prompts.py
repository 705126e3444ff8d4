"""The sandbox's benchmark prompts: drawn from the part of the memorised slice the drafts never saw."""

import json
from pathlib import Path

from workbench.measure.prompts import load_prompts
from workbench.sandbox_box import sandbox_prompts_path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "workbench" / "sandbox" / "models" / "target" / "corpus_manifest.json"


def test_bench_prompts_come_from_part_a_only():
    manifest = json.loads(MANIFEST.read_text())
    part_a = {e["name"] for e in manifest["part_a"]}
    part_b = {e["name"] for e in manifest["part_b"]}
    prompts = load_prompts(sandbox_prompts_path())
    assert len(prompts) == 20
    assert {p["file"] for p in prompts} <= part_a
    assert not {p["file"] for p in prompts} & part_b


def test_bench_prompt_text_is_the_file_text_at_its_offset():
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for p in load_prompts(sandbox_prompts_path()):
        data = (stdlib / p["file"]).read_bytes()
        assert data[p["offset"]:p["offset"] + len(p["text"])] == p["text"].encode()
