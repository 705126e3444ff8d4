"""Secrets never leave the box, end to end: a sandbox server launched with a planted ``--api-key``
and planted ``HF_TOKEN`` / ``MY_SECRET`` in its environment is diagnosed by the real driver
(``workbench runbook diagnose_acceptance``, a subprocess); every artefact is then read byte for
byte — the report directory (executed notebook, HTML, verdict JSON), the driver's stdout and
stderr, the terminal output of ``workbench doctor --running``, ``measure`` and ``logs`` — and none
holds a planted value, while the report still shows that the key was there (``--api-key ***``) and
the original server is back with its real key and environment. The journal is read while the run
is pending: private (0600 in a 0700 directory), real values kept (restore needs them), and only
the variables a launch on this box would not have anyway.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from remote import connect
from workbench.engine.locate import read_environ
from workbench.sandbox_box import sandbox_launch_command
from workbench.session.journal import Journal
from testkit.engine_copy import checkout_dir

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

API_KEY = "sk-plantedApiKey0123456789abcdef"
HF_TOKEN = "hf_PlantedHuggingFaceToken0123456789"
MY_SECRET = "planted-private-value-42"  # no known token shape: found only because it was learned
PLANTED = (API_KEY, HF_TOKEN, MY_SECRET)


def _cli(*args, state_dir, timeout=600):
    env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir))
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], env=env, cwd=checkout_dir(), capture_output=True,
                          text=True, timeout=timeout)


def _leaks(name: str, data: bytes) -> list[str]:
    return [f"{name} holds {value[:6]}… {data.count(value.encode())} times" for value in PLANTED
            if value.encode() in data]


def test_no_planted_secret_in_any_artefact_and_the_box_is_put_back(tmp_path, free_port, state_dir):
    box = connect("local", state_dir=state_dir)
    argv = shlex.split(sandbox_launch_command(port=free_port)) + ["--api-key", API_KEY]
    handle = box.launch_server(argv, port=free_port, log_path=tmp_path / "original.log",
                               env={"HF_TOKEN": HF_TOKEN, "MY_SECRET": MY_SECRET})
    reports = tmp_path / "reports"
    try:
        box.wait_healthy(handle, timeout=180)
        original_env = read_environ(box, handle.pid)
        assert original_env["HF_TOKEN"] == HF_TOKEN and original_env["MY_SECRET"] == MY_SECRET
        # the sandbox requires the key as SGLang does
        with httpx.Client(trust_env=False, timeout=30) as client:
            assert client.get(f"http://127.0.0.1:{free_port}/server_info").status_code == 401

        env = dict(os.environ, EAGLE_WORKBENCH_STATE_DIR=str(state_dir))
        cmd = [sys.executable, "-m", "workbench.cli", "runbook", "diagnose_acceptance", "--report-dir", str(reports),
               "-p", "port", str(free_port), "-p", "num_prompts", "4", "-p", "max_new_tokens", "64"]
        proc = subprocess.Popen(cmd, env=env, cwd=checkout_dir(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Watch the journal while the run is pending (the original server stopped).
        journal_file = Path(Journal(box).path)
        seen = None
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                doc = json.loads(journal_file.read_text())
            except (OSError, ValueError):
                doc = {}
            if (doc.get("original_server") or {}).get("stopped") and seen is None:
                seen = (doc, stat.S_IMODE(journal_file.stat().st_mode),
                        stat.S_IMODE(journal_file.parent.stat().st_mode))
            time.sleep(0.05)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-4000:]

        # The journal while pending: private, with the real values restore needs, and only those
        # variables a launch would not have anyway.
        assert seen is not None, "the run never recorded the original server as stopped"
        doc, mode, dir_mode = seen
        assert (mode, dir_mode) == (0o600, 0o700)
        original = doc["original_server"]
        assert original["argv"] == argv
        assert original["env"]["HF_TOKEN"] == HF_TOKEN and original["env"]["MY_SECRET"] == MY_SECRET
        assert "PATH" not in original["env"] and len(original["env"]) < len(original_env) // 2

        # The box is put back: the same argv (the real key) and the same environment.
        servers = [s for s in box.find_servers() if s.port == free_port]
        assert len(servers) == 1 and list(servers[0].argv) == argv and servers[0].pid != handle.pid
        back_env = read_environ(box, servers[0].pid)
        differ = {k for k in original_env if back_env.get(k) != original_env[k]} - {"_"}
        assert differ == set(), differ
        with httpx.Client(trust_env=False, timeout=60) as client:
            ok = client.post(f"http://127.0.0.1:{free_port}/generate",
                             json={"text": "def f(", "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
                             headers={"Authorization": f"Bearer {API_KEY}"})
            assert ok.status_code == 200
        assert not Journal(box).pending

        # The verdict reached the right answer through the key (measurements authenticated).
        verdict = json.loads((reports / "diagnose_acceptance.json").read_text())
        assert verdict["root_cause"]["rule"] == "algorithm-mismatch"
        assert verdict["acceptance"]["after"]["accept_length"] >= 2.0

        # The other commands' terminal output, against the keyed server.
        doctor = _cli("doctor", "--running", "--port", str(free_port), state_dir=state_dir)
        assert doctor.returncode == 1, doctor.stderr  # the wrong flag: an error finding
        assert "corrected launch command:" in doctor.stdout and "--api-key ***" in doctor.stdout
        doctor_json = _cli("doctor", "--running", "--port", str(free_port), "--json", state_dir=state_dir)
        assert "--api-key ***" in json.loads(doctor_json.stdout)["corrected_launch_command"]
        measure = _cli("measure", "--port", str(free_port), "--num-prompts", "2", "--max-new-tokens", "16",
                       "--sources", "generate,server_info", "--json", "--no-progress", state_dir=state_dir)
        assert measure.returncode in (0, 1), measure.stderr  # it measured (through the key)
        generate = [r for r in json.loads(measure.stdout)["rows"] if r["source"] == "generate"]
        assert generate and generate[0]["available"] and generate[0]["accept_length"] > 0, measure.stdout
        logs = _cli("logs", str(tmp_path / "original.log"), "--json", state_dir=state_dir)
        assert logs.returncode in (0, 1), logs.stderr
        # the server's own log does hold the key (SGLang logs its server_args): the box keeps it
        assert API_KEY.encode() in (tmp_path / "original.log").read_bytes()

        # Every artefact, byte for byte.
        leaks = []
        artefacts = sorted(p for p in reports.rglob("*") if p.is_file())
        assert {p.suffix for p in artefacts} >= {".ipynb", ".html", ".json"}
        for path in artefacts:
            leaks += _leaks(str(path.relative_to(tmp_path)), path.read_bytes())
        for name, data in [("driver stdout", out), ("driver stderr", err)] + [
                (f"{what} {stream}", getattr(res, stream).encode())
                for what, res in (("doctor", doctor), ("doctor --json", doctor_json), ("measure", measure),
                                  ("logs", logs))
                for stream in ("stdout", "stderr")]:
            leaks += _leaks(name, data)
        assert leaks == []
        # ... and a reader still sees that the server had a key
        for name in ("diagnose_acceptance.html", "diagnose_acceptance.json", "diagnose_acceptance.ipynb"):
            assert "--api-key ***" in (reports / name).read_text(), name
        assert json.loads((reports / "diagnose_acceptance.json").read_text())["inventory"]["server_info"]["api_key"] \
            == "***"
    finally:
        for s in box.find_servers():
            if s.port == free_port:
                box.stop_server(s)
