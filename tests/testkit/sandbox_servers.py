"""Sandbox servers for the tests: the one launcher, and the session cache behind the
``sandbox_server`` fixture (``tests/conftest.py``).

A server is a real ``python -m workbench.sandbox.launch_server`` process on a free port of
127.0.0.1, with stdout and stderr in a log file, in its own session and process group. Starting
waits until ``GET /health`` answers 200 (recording the statuses seen on the way); stopping sends
SIGTERM to the whole group, then SIGKILL, and checks that no process of the group is left.

Tests that own their server (they stop, restart or probe-patch it, or check its start-up) use
``running_sandbox_server``; tests that only read from one ask the session cache for a
configuration (``SandboxServers.get``) and share it with every other test asking for the same.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

import httpx

from testkit.ports import free_port
from testkit.engine_copy import checkout_dir

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "workbench" / "sandbox" / "models"
TARGET = MODELS / "target"
DRAFT = MODELS / "draft"
CONTROL = MODELS / "draft-aux-zeroed"
SERVER_MODULE = "workbench.sandbox.launch_server"
SPEC_FLAGS = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
START_TIMEOUT = 240.0  # seconds; a cold start on this shared 2-core machine takes 3-8 s


# The configurations the read-only tests share (``sandbox_server(**EAGLE3_METRICS)`` etc.): one
# server each for the whole session, whichever module asks first.
EAGLE3_METRICS = {"algorithm": "EAGLE3", "decode_log_interval": 1, "extra": ("--enable-metrics",)}  # every step a tick
EAGLE = {"algorithm": "EAGLE", "decode_log_interval": 1}  # the wrong flag: fc skipped, accept length ~1
PLAIN = {"decode_log_interval": 4}  # no speculative decoding


def models_missing_reason() -> str | None:
    """Why no sandbox server can start here (``None`` when the committed models are present)."""
    if not (TARGET / "config.json").exists() or not (DRAFT / "model.safetensors").exists():
        return "sandbox models missing: run `python -m workbench.sandbox.train`"
    return None


def launch_argv(*flags: str, port: int) -> list[str]:
    """The server's command line: this Python, the sandbox target, loopback, ``port``, ``flags``."""
    return [sys.executable, "-m", SERVER_MODULE, "--model-path", str(TARGET),
            "--host", "127.0.0.1", "--port", str(port), *flags]


def sandbox_flags(algorithm: str | None = None, *, draft: str = "draft", decode_log_interval: int | None = None,
                  extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The flags of one server configuration: ``--speculative-algorithm ALGORITHM`` with the draft
    ``models/DRAFT`` and the chain settings (3 steps, topk 1, 4 draft tokens) when ``algorithm`` is
    given (else no speculative decoding), ``--decode-log-interval`` when given, then ``extra``."""
    flags: list[str] = []
    if algorithm:
        flags += ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(MODELS / draft),
                  *SPEC_FLAGS]
    if decode_log_interval is not None:
        flags += ["--decode-log-interval", str(decode_log_interval)]
    return (*flags, *extra)


def _server_env(gpus_dir: Path | None = None) -> dict[str, str]:
    """The server's environment: no workbench state dir; its own sandbox GPUs (``SANDBOX_GPUS_DIR``
    = ``gpus_dir``, unless the caller's environment names some): every server a box of its own, so
    two servers of a session never compete for the same sandbox device."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_WORKBENCH_")}
    if not env.get("SANDBOX_GPUS_DIR"):
        env["SANDBOX_GPUS_DIR"] = str(gpus_dir) if gpus_dir is not None else tempfile.mkdtemp(prefix="sandbox-gpus-")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("SGLANG_LOG_MS", None)  # the log format the tests check: whole seconds
    return env


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, from /proc."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited while we looked
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; ``False`` when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


class SandboxServer:
    """A running sandbox server: ``proc`` (its process, the leader of its own group), ``port``,
    ``url``, ``log_path`` (stdout and stderr), ``statuses`` (the /health answers seen while it
    started), ``flags`` and ``argv``. ``startup`` holds what it answered right after start-up,
    before any test used it (``server_info``; ``metrics``: status, content type and text when it
    runs with ``--enable-metrics``), filled in for shared servers."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: Path, statuses: list[int],
                 flags: tuple[str, ...], argv: list[str]) -> None:
        self.proc, self.port, self.log_path, self.statuses = proc, port, log_path, statuses
        self.flags, self.argv = flags, argv
        self.url = f"http://127.0.0.1:{port}"
        self.startup: dict = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def snapshot_startup(self) -> None:
        """Record ``startup`` (see the class) now."""
        with httpx.Client(timeout=30, trust_env=False) as client:
            self.startup["server_info"] = client.get(self.url + "/server_info").json()
            if "--enable-metrics" in self.flags:
                resp = client.get(self.url + "/metrics")
                self.startup["metrics"] = (resp.status_code, resp.headers.get("content-type", ""), resp.text)

    def stop(self, grace: float = 20) -> None:
        """Stop the whole process group: SIGTERM, up to ``grace`` seconds, then SIGKILL. Raises
        ``RuntimeError`` when a process of the group is still alive 10 s after SIGKILL."""
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        if self.proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(pgid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # the leader is gone; nothing else of its group may outlive it
        deadline = time.monotonic() + 10
        while _group_members(pgid):
            _signal_group(pgid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"sandbox server group {pgid} still has live processes {_group_members(pgid)}")
            time.sleep(0.05)

    def __repr__(self) -> str:
        return f"SandboxServer(pid={self.pid}, port={self.port}, flags={' '.join(self.flags)!r})"


def start_sandbox_server(log_dir: Path, *flags: str, timeout: float = START_TIMEOUT) -> SandboxServer:
    """Start a server with ``flags`` on a free port (log in ``log_dir``) and wait until /health
    answers 200. On any failure the process group is stopped and ``AssertionError`` raised with
    the server's log."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"server_{port}.log"
    argv = launch_argv(*flags, port=port)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=checkout_dir(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env=_server_env(log_dir / f"sandbox-gpus-{port}"),
                                start_new_session=True)
    server = SandboxServer(proc, port, log_path, [], tuple(flags), argv)
    refused: Exception | None = None
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}:\n{log_path.read_text()}")
            try:
                code = httpx.get(f"{server.url}/health", timeout=5, trust_env=False).status_code
                server.statuses.append(code)
                if code == 200:
                    return server
            except httpx.TransportError as exc:
                refused = exc  # still loading: connection refused until uvicorn listens
            if time.time() > deadline:
                raise AssertionError(f"server not healthy after {timeout:g}s (last: {refused!r}, "
                                     f"{server.statuses[-3:]}):\n{log_path.read_text()}")
            time.sleep(0.1)
    except BaseException:
        server.stop()
        raise


@contextlib.contextmanager
def running_sandbox_server(log_dir: Path, *flags: str, timeout: float = START_TIMEOUT) -> Iterator[SandboxServer]:
    """A server of the caller's own (``start_sandbox_server``), stopped when the block ends, also
    when it raises."""
    server = start_sandbox_server(log_dir, *flags, timeout=timeout)
    try:
        yield server
    finally:
        server.stop()


class SandboxServers:
    """One shared server per configuration for the test session (the ``sandbox_server``
    fixture): ``get(...)`` starts it on first use and returns the same server afterwards; a
    configuration that failed to start fails at once on later requests instead of waiting again.
    ``close()`` stops them all (also registered with ``atexit`` in case the session dies)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: dict[tuple[str, ...], SandboxServer] = {}
        self.failed: dict[tuple[str, ...], str] = {}
        self.requests: dict[tuple[str, ...], int] = {}
        self.started: list[tuple[str, ...]] = []  # every configuration launched, in order
        atexit.register(self.close)

    def get(self, algorithm: str | None = None, *, draft: str = "draft", decode_log_interval: int | None = None,
            extra: Sequence[str] = ()) -> SandboxServer:
        """The shared server for this configuration (see ``sandbox_flags`` for the arguments)."""
        flags = sandbox_flags(algorithm, draft=draft, decode_log_interval=decode_log_interval, extra=extra)
        self.requests[flags] = self.requests.get(flags, 0) + 1
        if flags in self.failed:
            raise AssertionError(f"the shared sandbox server {' '.join(flags)!r} failed to start earlier in this "
                                 f"session:\n{self.failed[flags]}")
        if flags not in self.servers:
            try:
                server = start_sandbox_server(self.log_dir / f"shared-{len(self.servers) + len(self.failed)}", *flags)
            except Exception as exc:  # remembered, so later requests fail at once; re-raised
                self.failed[flags] = str(exc)
                raise
            try:
                server.snapshot_startup()
            except Exception as exc:
                self.failed[flags] = f"the start-up snapshot failed: {exc!r}\n{server.log()}"
                server.stop()
                raise
            self.servers[flags] = server
            self.started.append(flags)
        return self.servers[flags]

    def close(self) -> None:
        """Stop every shared server (each whole process group); idempotent."""
        errors = []
        while self.servers:
            _, server = self.servers.popitem()
            try:
                server.stop()
            except RuntimeError as exc:  # keep stopping the others, then report
                errors.append(str(exc))
        if errors:
            raise RuntimeError("; ".join(errors))

    def summary(self) -> list[str]:
        """One line per configuration started this session: how many tests asked for it."""
        return [f"{n} requests, one server: {' '.join(flags).replace(str(MODELS) + os.sep, '')}"
                for flags, n in self.requests.items() if flags in self.started]
