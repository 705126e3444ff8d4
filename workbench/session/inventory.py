"""What is on the box before anything changes: the engine, its version and location, the server
and its command line (:func:`take_inventory`)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

import httpx

from remote.errors import CommandError, RemoteError
from workbench.engine.launch import DEFAULT_PORT, LaunchCommand
from workbench.engine.locate import (choose_server, engine_of_package, engine_package, find_engine, is_launch_argv,
                                     read_environ, server_python)
from workbench.errors import DiagnosisError, EngineNotFound
from workbench.redact import REDACTOR
from workbench.report.tables import html_table
from workbench.sandbox_box import SANDBOX_SERVER_MODULE, missing_sandbox_modules, sandbox_extra_message, sandbox_models_dir

__all__ = ["Inventory", "take_inventory", "serves_sandbox_target", "absolutize", "launch_cwd", "learn_box_secrets"]


def learn_box_secrets(box, *, timeout: float = 30) -> int:
    """Teach the process-wide redactor (:data:`workbench.redact.REDACTOR`) the secret values of
    every SGLang (or sandbox) server running on ``box``: its argv's secret flags and its
    environment's secret variables (``/proc/PID/environ``), so whatever this process shows or
    writes afterwards has them redacted. Returns how many servers were read. Raises what
    ``Box.find_servers`` raises; a server whose environment cannot be read is still learned from
    its argv."""
    servers = [s for s in box.find_servers(timeout=timeout) if is_launch_argv(s.argv)]
    for server in servers:
        REDACTOR.learn_argv(list(server.argv))
        REDACTOR.learn_env(read_environ(box, server.pid, timeout=timeout))
    return len(servers)


def absolutize(box, launch: LaunchCommand, cwd: str | None) -> LaunchCommand:
    """``launch`` with relative ``--model-path`` / ``--speculative-draft-model-path`` made absolute
    against the server's working directory (``/proc/PID/cwd``), as the server resolves them. A
    value that is not a directory there (a Hugging Face repo id such as ``org/name``) is kept."""
    if not cwd:
        return launch
    if launch.engine == "vllm":
        return _absolutize_vllm(box, launch, cwd)
    for flag in ("--model-path", "--speculative-draft-model-path", "--tokenizer-path"):
        value = launch.get(flag)
        if isinstance(value, str) and value and not value.startswith(("/", "~")):
            candidate = posixpath.normpath(posixpath.join(cwd, value))
            if box.exists(candidate):
                launch = launch.with_flag(flag, candidate)
    return launch


def _absolutize_vllm(box, launch: LaunchCommand, cwd: str) -> LaunchCommand:
    """:func:`absolutize` for a vLLM launch: ``--model`` (``vllm serve``'s positional model too,
    rewritten as ``--model``), ``--tokenizer`` and the draft (``--speculative-config``'s ``"model"``,
    :meth:`LaunchCommand.with_draft_model`, its form kept). A speculative config that cannot be read
    is left as written (the doctor reports it)."""
    from workbench.errors import LaunchCommandError

    def rel(value: Any) -> str | None:
        if isinstance(value, str) and value and not value.startswith(("/", "~")):
            candidate = posixpath.normpath(posixpath.join(cwd, value))
            if box.exists(candidate):
                return candidate
        return None

    for flag in ("--model", "--tokenizer"):
        new = rel(launch.get(flag))
        if new is not None:
            launch = launch.with_flag(flag, new)
    try:
        new = rel(launch.draft_model)
    except LaunchCommandError:
        return launch
    return launch.with_draft_model(new) if new is not None else launch


def launch_cwd(box, *, timeout: float = 30) -> str:
    """The directory a server launched on ``box`` without a ``cwd`` starts in (what
    ``box.launch_server(..., cwd=None)`` uses: on the local box this process's cwd, over SSH the
    login directory), asked of the box itself: ``pwd -P`` run through it the way a launch runs
    (physical, as ``/proc/PID/cwd`` reads and as the server resolves ``../x``). Raises a
    :class:`remote.errors.RemoteError` when the box cannot say."""
    result = box.run("pwd -P", timeout=timeout)
    lines = result.stdout.strip().splitlines()
    cwd = lines[-1].strip() if lines else ""
    if not cwd.startswith("/"):
        raise CommandError(f"`pwd -P` printed no absolute directory: {result.stdout!r}", result)
    return cwd


def _as_number(value: Any) -> Any:
    """A flag's value read from the launch command (text, ``"3"``) as the number it is (``3``), as
    the server's ``/get_server_info`` reports it; anything else (``None``, ``"auto"``) unchanged."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


@dataclass
class Inventory:
    """What is on the box: the engine, its version and location, the server and its command line.

    ``engine``: ``"sglang"``, ``"sandbox"`` or ``"vllm"``; ``engine_package``: ``sglang``,
    ``workbench.sandbox`` or ``vllm``; ``engine_root``: the installed
    package directory on the box; ``launch``: the command as found (the server's own argv),
    ``resolved``: the same with relative model paths made absolute against the server's cwd (used
    to read files); ``server_pid`` is ``None`` when no server was running (the run then launches
    ``launch`` itself and stops it at the end). ``server_cwd``: the running server's working
    directory, or, when none runs, the directory the run's launch will start in on that box
    (:func:`launch_cwd`); the doctor resolves relative paths against it and every launch of the
    run is given it. ``server_env``: the running server's environment (``None`` when none runs).
    ``server_health``: a running server's generation-level readiness when the inventory was taken
    (``remote.readiness.check_generation``: ``{"state": "ready"|"starting"|"stuck"|"error",
    "detail": ...}``; ``None`` when none runs); anything but ready is also a note.
    """

    host: str
    engine: str
    engine_package: str
    engine_version: str | None
    engine_root: str | None
    python: str
    launch: LaunchCommand
    port: int
    base_url: str
    resolved: LaunchCommand | None = None
    server_pid: int | None = None
    server_cwd: str | None = None
    server_env: dict[str, str] | None = None
    server_log: str | None = None
    server_info: dict | None = None
    server_health: dict | None = None
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[tuple[str, Any]]:
        info = self.server_info or {}
        return [
            ("box", self.host),
            ("engine", f"{self.engine_package} {self.engine_version or '(version unknown)'}"),
            ("engine source", self.engine_root or "(not located)"),
            ("python", self.python),
            ("server", f"pid {self.server_pid}" if self.server_pid else "not running (the run launches it)"),
            ("server log", self.server_log or ("(the run's own server logs)" if not self.server_pid else "(not a file)")),
            ("launch command", self.launch.to_display()),
            ("working directory", (self.server_cwd or "(unknown)") + ("" if self.server_pid else
                                                                      " (where the run's launches start)")),
        ] + (self._vllm_rows() if self.launch.engine == "vllm" else [
            ("speculative algorithm (resolved)", info.get("speculative_algorithm", self.launch.get("--speculative-algorithm"))),
            ("num steps / topk / draft tokens", tuple(  # numbers, as the server reports them (issue 15)
                _as_number(info.get(key, self.launch.get(flag))) for key, flag in (
                    ("speculative_num_steps", "--speculative-num-steps"),
                    ("speculative_eagle_topk", "--speculative-eagle-topk"),
                    ("speculative_num_draft_tokens", "--speculative-num-draft-tokens")))),
        ]) + [
            ("url", self.base_url),
        ] + ([("server health", f"{self.server_health['state']}: {self.server_health['detail']}")]
             if self.server_health else []) + [("note", n) for n in self.notes]

    def _vllm_rows(self) -> list[tuple[str, Any]]:
        """A vLLM launch's speculative settings as its ``--speculative-config`` writes them (vLLM has
        no ``/server_info``): method, draft, ``num_speculative_tokens``; the parse error when the
        JSON cannot be read."""
        from workbench.errors import LaunchCommandError

        try:
            return [("speculative method (--speculative-config)", self.launch.speculative_method),
                    ("draft", self.launch.draft_model),
                    ("num_speculative_tokens", self.launch.num_speculative_tokens)]
        except LaunchCommandError as exc:
            return [("--speculative-config", f"unreadable: {exc}")]

    def to_dict(self) -> dict[str, Any]:
        """The inventory as plain JSON for the verdict, secrets redacted (:mod:`workbench.redact`:
        the launch command's display form, ``server_info``'s ``api_key`` and any known value);
        the server's environment is never included."""
        return REDACTOR.obj({
            "host": self.host, "engine": self.engine, "engine_package": self.engine_package,
            "engine_version": self.engine_version, "engine_root": self.engine_root, "python": self.python,
            "launch_command": self.launch.to_display(), "port": self.port, "base_url": self.base_url,
            "server_pid": self.server_pid, "server_cwd": self.server_cwd, "server_log": self.server_log,
            "server_info": self.server_info, "server_health": self.server_health, "notes": list(self.notes),
        })

    def api_key(self) -> str | None:
        """The server's ``--api-key`` (SGLang requires ``Authorization: Bearer KEY`` on every
        request but ``/health*`` and ``/metrics`` when it is set), or ``None``."""
        value = self.launch.get("--api-key")
        return value if isinstance(value, str) and value else None

    def _repr_html_(self) -> str:
        return REDACTOR.text("<h4>Box inventory</h4>" + html_table(self.rows()))


def _check_default_launch_on_box(box, launch: LaunchCommand, python: str, *, port: int | None,
                                 timeout: float) -> None:
    """The built-in default launch (the embedded sandbox box) names paths on the machine the
    workbench runs on. On another box (over SSH) they exist only if that box has them too (the
    loopback case): check its interpreter and model directory there, through the box, and raise
    :class:`DiagnosisError` naming what is missing rather than launching a server that cannot start.
    Then, for the sandbox's server module, check that the interpreter has the ``sandbox`` extra
    (torch, transformers, safetensors, FastAPI, uvicorn: a plain ``pip install eagle-workbench`` has
    none of them), with ``find_spec`` run by that interpreter on the box
    (:func:`workbench.sandbox_box.missing_sandbox_modules`: nothing imported), and raise
    :class:`DiagnosisError` naming the extra and the missing modules."""
    try:  # SGLang's --model-path / --speculative-draft-model-path, vLLM's --model / --speculative-config "model"
        models = (launch.target_model, launch.draft_model)
    except ValueError:  # a vLLM config that cannot be read: the doctor reports it
        models = (launch.target_model, None)
    missing = [p for p in (python, *models)
               if isinstance(p, str) and p.startswith("/") and not box.exists(p, timeout=timeout)]
    if missing:
        raise DiagnosisError(
            f"no server found on {box.name} (port {port or 'any'}) and no launch_command given; the built-in "
            f"default (the embedded sandbox box) is not on that box ({', '.join(missing)} missing there): pass "
            "launch_command, or start the server first"
        )
    if launch.module == SANDBOX_SERVER_MODULE:
        modules = missing_sandbox_modules(box, python, timeout=timeout)
        if modules:
            raise DiagnosisError(
                f"no server found on {box.name} (port {port or 'any'}) and no launch_command given; the built-in "
                f"default launches the embedded sandbox box with {python}, which cannot run it: "
                f"{sandbox_extra_message(modules)}; or pass launch_command, or start the server first"
            )


def take_inventory(box, *, launch_command: str | None, port: int | None, default_launch: str | None = None,
                   how: str = "port = N in the parameters cell", timeout: float = 30) -> Inventory:
    """Find the server on the box and what it runs.

    A server is looked for among the box's processes (``Box.find_servers``) on ``port`` (else on
    the launch command's ``--port``, else SGLang's default 30000). If one runs, its real command
    line is the truth (a ``launch_command`` that differs is noted); if none runs, ``launch_command``
    is what the run will launch (``default_launch`` when that is ``None`` too). Raises
    :class:`DiagnosisError` when there is neither.

    When nothing names a server (``port`` and ``launch_command`` ``None``), no server runs on
    the default port and several run elsewhere, nobody said which one is meant: raises
    :class:`~workbench.errors.ServerChoiceError` (from :func:`workbench.engine.choose_server`)
    listing each (port, pid) and how to pick one in the caller's terms (``how``, ``N`` standing
    for the number: ``"port = N in the parameters cell"`` for a runbook, ``"--port N"`` on the
    command line), before anything on the box changes. One server elsewhere is left alone (a
    note says so) and the run launches on the default port, as before.
    """
    given = LaunchCommand.parse(launch_command) if launch_command else None
    if given is not None:
        REDACTOR.learn_launch(given)
    # the launch command's port, else its engine's default (SGLang 30000, vLLM 8000)
    want_port = port or (given.port if given is not None else DEFAULT_PORT)
    servers = [s for s in box.find_servers(timeout=timeout) if is_launch_argv(s.argv)]
    candidates = [s for s in servers if s.port == want_port or (
        s.port is None and want_port == LaunchCommand.parse(list(s.argv)).default_port)]
    notes: list[str] = []
    if not candidates and port is None and given is None and len(servers) > 1:
        choose_server(servers, None, how=how, where=box.name)  # raises: several run, none named
    others = sorted({s.port for s in servers if s not in candidates and s.port is not None})
    if others:
        # Never restart a server nobody pointed at: only the one on the asked port is diagnosed.
        notes.append(f"other servers run on port(s) {', '.join(map(str, others))}; pass port= to diagnose one")
    server = None
    if len(candidates) > 1:
        notes.append(f"{len(candidates)} servers match; using pid {candidates[0].pid}")
    if candidates:
        server = candidates[0]
    if server is not None:
        launch = LaunchCommand.parse(list(server.argv))
        if given is not None and given.argv != launch.argv:
            notes.append("the running server's command line differs from the launch_command parameter; "
                         "the running one is diagnosed")
        python = server_python(box, launch, server, timeout=timeout)
    elif given is not None or default_launch:
        launch = given if given is not None else LaunchCommand.parse(default_launch)
        python = launch.launcher[0] if "python" in posixpath.basename(launch.launcher[0]) else "python3"
        if given is None:
            _check_default_launch_on_box(box, launch, python, port=want_port, timeout=timeout)
    else:
        raise DiagnosisError(
            f"no server found on {box.name} (port {want_port or 'any'}) and no launch_command given: "
            "nothing to diagnose"
        )
    final_port = int(launch.get("--port") or want_port or launch.default_port)
    if server is not None:
        cwd = server.cwd
    else:
        # The run launches the command itself, with no cwd of its own: the server starts where a
        # launch on this box starts, and its relative model paths resolve there. The doctor
        # resolves them against this directory and every launch of the run is given it
        # explicitly, so both agree even if this process changes directory later.
        try:
            cwd = launch_cwd(box, timeout=timeout)
        except RemoteError as exc:
            cwd = None
            notes.append(f"the directory a launched server starts in is unknown ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}); relative model paths are not resolved")
    resolved = absolutize(box, launch, cwd)
    package = engine_package(launch)
    engine_root = engine_version = None
    try:
        # a running server: located from that process (its interpreter, cwd and environment), so the
        # engine is the one it runs whatever directory this runs in; no CLI option to name in a hint
        located = find_engine(box, python=python, launch=launch, package=package, timeout=timeout, server=server,
                              options=())
        engine_root, engine_version = located.root, located.version
        if server is not None and located.python != "-":
            python = located.python
    except EngineNotFound as exc:
        notes.append(f"engine not located: {exc}")
    base_url = box.url(final_port)
    # Secrets never leave the box: whatever shows or writes this inventory (and the run built on
    # it) redacts the values of the server's secret flags and variables wherever they appear.
    REDACTOR.learn_launch(launch)
    server_env = read_environ(box, server.pid) if server else None
    REDACTOR.learn_env(server_env)
    server_info = server_health = None
    if server is not None and launch.engine == "vllm":
        # vLLM has no /server_info (only the VLLM_SERVER_DEV_MODE config dump): its settings are its
        # command line (workbench.measure.vllm); readiness as for SGLang (remote.readiness)
        server_health = _health(base_url, timeout=timeout)
        if server_health["state"] != "ready":
            notes.append(f"the running server is not ready to generate ({server_health['state']}): "
                         f"{server_health['detail']}")
    elif server is not None:
        key = launch.get("--api-key")
        server_info = _get_json(base_url, "/server_info", "/get_server_info", notes=notes, timeout=timeout,
                                api_key=key if isinstance(key, str) else None)
        server_health = _health(base_url, timeout=timeout)
        if server_health["state"] != "ready":
            notes.append(f"the running server is not ready to generate ({server_health['state']}): "
                         f"{server_health['detail']}")
    return Inventory(
        host=box.name, engine=engine_of_package(package),
        engine_package=package, engine_version=engine_version, engine_root=engine_root, python=python,
        launch=launch, port=final_port, base_url=base_url, resolved=resolved,
        server_pid=server.pid if server else None, server_cwd=cwd,
        server_env=server_env,
        server_log=server.log_path if server else None, server_info=server_info, server_health=server_health,
        notes=notes,
    )


def _health(base_url: str, *, timeout: float) -> dict:
    """One generation-level readiness check (``remote.readiness.check_generation``), bounded by
    ``timeout`` seconds: ``{"state", "detail"}``."""
    from remote.readiness import check_generation

    with httpx.Client(trust_env=False) as client:
        r = check_generation(client, base_url, timeout=timeout)
    return {"state": r.state, "detail": r.detail}


def _get_json(base_url: str, *paths: str, notes: list[str], timeout: float,
              api_key: str | None = None) -> dict | None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    with httpx.Client(timeout=timeout, trust_env=False, headers=headers) as client:
        for path in paths:
            try:
                response = client.get(base_url + path)
            except httpx.HTTPError as exc:
                notes.append(f"GET {path}: {type(exc).__name__}: {exc}")
                continue
            if response.status_code == 200:
                return response.json()
            notes.append(f"GET {path}: HTTP {response.status_code}")
    return None


def serves_sandbox_target(inventory: "Inventory") -> bool:
    """Whether the box serves the sandbox's target (a byte-level model of Python source, whose own
    prompts are its workload): the sandbox box's server, or another engine (vLLM) given the sandbox
    target's directory (:func:`workbench.sandbox_box.sandbox_models_dir`, its symlinks resolved: a
    path compared, nothing imported)."""
    if inventory.engine == "sandbox":
        return True
    launch = inventory.resolved or inventory.launch
    target = launch.target_model if launch is not None else None
    return isinstance(target, str) and posixpath.normpath(target) == posixpath.normpath(str(sandbox_models_dir() / "target"))
