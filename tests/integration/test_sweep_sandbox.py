"""runbooks/measure_acceptance.ipynb through `workbench runbook` on the sandbox box: a grid with
settings the sandbox can and cannot start, the baseline, the table (JSON, CSV), the HTML report,
and the box left as found."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testkit.engine_copy import checkout_dir, sandbox_engine_dir

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_measure_acceptance_runbook_on_the_sandbox(tmp_path, free_port):
    env = {**os.environ, "EAGLE_WORKBENCH_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "runbook", "measure_acceptance",
                           "-p", "port", str(free_port), "-p", "grid", "steps:1,3 topk:1,2", "-p", "num_prompts", "3",
                           "-p", "max_new_tokens", "32", "--report-dir", str(tmp_path / "out")],
                          cwd=checkout_dir(), env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "measure_acceptance.json").read_text())
    rows = {r["label"]: r for r in doc["rows"]}
    assert list(rows) == ["no speculation", "steps=1 topk=1 draft_tokens=2", "steps=1 topk=2 draft_tokens=3",
                          "steps=3 topk=1 draft_tokens=4", "steps=3 topk=2 draft_tokens=7"]
    base = rows["no speculation"]
    assert base["ok"] and base["accept_length"] is None and base["speedup"] == 1.0
    for label in ("steps=1 topk=1 draft_tokens=2", "steps=3 topk=1 draft_tokens=4"):
        r = rows[label]
        assert r["ok"] and r["error"] is None
        # tokens per verify step, bonus included: between 1 and draft_tokens
        assert 1.0 < r["accept_length"] <= r["draft_tokens"]
        assert abs(r["accepted_drafts_per_step"] - (r["accept_length"] - 1)) < 0.35
        assert abs(r["speedup"] - r["tokens_per_s"] / base["tokens_per_s"]) < 1e-9
    assert rows["steps=3 topk=1 draft_tokens=4"]["accept_length"] > rows["steps=1 topk=1 draft_tokens=2"]["accept_length"]
    for label in ("steps=1 topk=2 draft_tokens=3", "steps=3 topk=2 draft_tokens=7"):
        assert not rows[label]["ok"] and "chain drafting only" in rows[label]["error"]
    with open(tmp_path / "out" / "measure_acceptance.csv") as f:
        table = list(csv.DictReader(f))
    assert [t["label"] for t in table] == list(rows) and table[3]["accept_length"] == str(
        rows["steps=3 topk=1 draft_tokens=4"]["accept_length"])
    assert doc["restore"]["clean"] and doc["best"] in rows
    html = (tmp_path / "out" / "measure_acceptance.html").read_text()
    assert "Accept length (tokens per verify step" in html and "<script src=\"http" not in html
    assert not list((tmp_path / "state" / "diagnosis").glob("journal.json")) or \
        not json.loads((tmp_path / "state" / "diagnosis" / "journal.json").read_text()).get("started_servers")


def test_compare_drafts_runbook_trained_against_a_broken_token_map(tmp_path, free_port):
    """compare_drafts on the sandbox: the trained draft against a copy whose d2t is shuffled. The
    copy loads (every id valid) and its acceptance collapses to ~1 token per verify step; the copy
    is removed afterwards and the sandbox draft is untouched."""
    import hashlib

    draft = sandbox_engine_dir() / "models" / "draft"  # as the runbook's kernel finds it (testkit.engine_copy)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in draft.iterdir()}
    env = {**os.environ, "EAGLE_WORKBENCH_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "runbook", "compare_drafts",
                           "-p", "port", str(free_port), "-p", "num_prompts", "4", "-p", "max_new_tokens", "48",
                           "--report-dir", str(tmp_path / "out")],
                          cwd=checkout_dir(), env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "compare_drafts.json").read_text())
    a, b = doc["rows"]
    assert (a["label"], b["label"]) == ("draft A (as given)", "draft B (token map shuffled)")
    assert a["ok"] and b["ok"] and a["draft_path"] == str(draft.resolve())  # sandbox_models_dir(): links resolved
    assert a["accept_length"] > 1.8 and b["accept_length"] < 1.15
    assert a["per_position"][0] > 0.4 and b["per_position"][0] < 0.05
    assert sum(a["histogram"]) == a["verify_steps"]
    assert "shuffled order (128 of 128 draft ids moved)" in doc["notes"][0]
    assert not (tmp_path / "state" / "compare" / "draft-broken-token-map").exists()
    assert before == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in draft.iterdir()}
    html = (tmp_path / "out" / "compare_drafts.html").read_text()
    assert "Per-position acceptance" in html
    # the best draft is picked by accept length, tokens/s beside it, and the report says which decided
    assert (doc["best"], doc["best_by"]) == ("draft A (as given)", "accept_length")
    assert doc["ranking"]["order"] == ["draft A (as given)", "draft B (token map shuffled)"]
    assert a["tokens_per_s"] > 0 and b["tokens_per_s"] > 0
    assert "decided by <b>accept length</b>" in html and "best: draft A (as given) (decided by accept_length)" in html
    with open(tmp_path / "out" / "compare_drafts.csv") as f:
        table = list(csv.DictReader(f))
    assert [t["draft_path"] for t in table][0] == str(draft.resolve()) and json.loads(table[0]["per_position"])[0] > 0.4


def test_compare_two_drafts_picks_the_higher_accept_length(tmp_path, free_port, monkeypatch):
    """Two real drafts of the sandbox target, on the same settings: the trained draft and its
    control whose aux-state weights are zeroed (``draft-aux-zeroed``). The best is the one with the
    higher accept length, decided by accept length (not a tie), with tokens/s measured beside it;
    the JSON says which figure decided."""
    from workbench.measure.sweep import SweepRun

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    models = ROOT / "workbench" / "sandbox" / "models"
    run = SweepRun.compare(port=free_port, draft_a=str(models / "draft"), draft_b=str(models / "draft-aux-zeroed"),
                           num_prompts=3, max_new_tokens=48, report_dir=tmp_path / "out", progress=False)
    try:
        result = run.run()
    finally:
        result = run.finish("compare_drafts")
    a, b = result.rows
    assert (a.label, b.label) == ("draft A: draft", "draft B: draft-aux-zeroed")
    assert a.ok and b.ok and a.tokens_per_s > 0 and b.tokens_per_s > 0
    print(f"\naccept length: draft {a.accept_length:.3f} ({a.tokens_per_s:.1f} tokens/s), "
          f"draft-aux-zeroed {b.accept_length:.3f} ({b.tokens_per_s:.1f} tokens/s)")
    assert a.accept_length - b.accept_length > 0.1  # not a tie: accept length decides
    doc = json.loads((tmp_path / "out" / "compare_drafts.json").read_text())
    assert (doc["best"], doc["best_by"]) == ("draft A: draft", "accept_length")
    assert doc["ranking"]["reason"].startswith(f"draft A: draft by accept length, tokens per verify step "
                                               f"(accept length {a.accept_length:.3f}, {a.tokens_per_s:.1f} tokens/s; "
                                               f"draft B: draft-aux-zeroed: accept length {b.accept_length:.3f}")
    assert doc["restore"]["clean"]


def test_compare_drafts_killed_mid_run_leaves_nothing_after_restore(tmp_path, free_port):
    """SIGKILL of the whole runbook run while draft B's copy exists: `workbench restore` stops the
    run's server and removes the copy (journalled before it was written)."""
    import signal
    import time

    env = {**os.environ, "EAGLE_WORKBENCH_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "runbook", "compare_drafts",
                             "-p", "port", str(free_port), "-p", "num_prompts", "2", "-p", "max_new_tokens", "16",
                             "--report-dir", str(tmp_path / "out")], cwd=checkout_dir(), env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    copy = tmp_path / "state" / "compare" / "draft-broken-token-map"
    deadline = time.monotonic() + 300
    while not (copy / "model.safetensors").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert (copy / "model.safetensors").exists(), "the run never wrote draft B"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "restore"], cwd=checkout_dir(), env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"removed {copy} (created by the run)" in out.stdout
    assert not copy.exists()
    again = subprocess.run([sys.executable, "-m", "workbench.cli", "restore"], cwd=checkout_dir(), env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.stdout.strip() == "nothing to restore"


def test_a_sweep_launches_an_environment_prefixed_command_with_the_prefix_in_its_environment(tmp_path, free_port,
                                                                                             monkeypatch):
    """`FOO=1 python -m ...` as the launch command: each setting's server starts (the prefix is no
    program to exec) with FOO=1 in its environment; the rows show the command with its prefix."""
    from workbench.measure.sweep import SweepRun
    from workbench.sandbox_box import sandbox_launch_command

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    command = "FOO=1 " + sandbox_launch_command(algorithm="EAGLE3", port=free_port)
    run = SweepRun.start(launch_command=command, port=free_port, grid="steps:1", include_baseline=False,
                         num_prompts=1, max_new_tokens=16, report_dir=tmp_path / "out", progress=False)
    seen = {}
    original = run._launch

    def launch_and_look(launch, label):
        handle = original(launch, label)
        raw = Path(f"/proc/{handle.pid}/environ").read_bytes().split(b"\0")
        seen[label] = b"FOO=1" in raw
        return handle

    run._launch = launch_and_look
    try:
        result = run.run()
    finally:
        result = run.finish()
    assert [r.ok for r in result.rows] == [True], [(r.label, r.error) for r in result.rows]
    assert seen == {result.rows[0].label: True}
    assert result.rows[0].launch_command.startswith("FOO=1 ")
