"""Fixtures for the sandbox tests: committed model dirs and a real server on a free port."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "workbench" / "sandbox" / "models"
TARGET = MODELS / "target"
DRAFT = MODELS / "draft"
CONTROL = MODELS / "draft-aux-zeroed"
SPEC_FLAGS = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running sandbox server process (stderr captured to `log_path`)."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: Path, statuses: List[int]) -> None:
        self.proc, self.port, self.log_path, self.statuses = proc, port, log_path, statuses
        self.url = f"http://127.0.0.1:{port}"

    def log(self) -> str:
        return self.log_path.read_text()


def launch_argv(*extra: str, port: int) -> List[str]:
    return [sys.executable, "-m", "workbench.sandbox.launch_server", "--model-path", str(TARGET),
            "--host", "127.0.0.1", "--port", str(port), *extra]


@contextlib.contextmanager
def running_server(tmp_path: Path, *extra: str, timeout: float = 120) -> Iterator[Server]:
    """Start a server, wait for /health == 200 (recording statuses seen), stop it after."""
    port = free_port()
    log_path = tmp_path / f"server_{port}.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("SGLANG_LOG_MS", None)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(launch_argv(*extra, port=port), cwd=ROOT, stdout=log, stderr=log, env=env)
    statuses: List[int] = []
    refused: Exception | None = None
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}:\n{log_path.read_text()}")
            try:
                code = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code
                statuses.append(code)
                if code == 200:
                    break
            except httpx.TransportError as exc:
                refused = exc  # still loading: connection refused until uvicorn listens
            if time.time() > deadline:
                raise AssertionError(f"server not healthy (last: {refused!r}, {statuses[-3:]}):\n{log_path.read_text()}")
            time.sleep(0.1)
        yield Server(proc, port, log_path, statuses)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def models_present() -> None:
    if not (TARGET / "config.json").exists() or not (DRAFT / "model.safetensors").exists():
        pytest.skip("sandbox models missing: run `python -m workbench.sandbox.train`")
